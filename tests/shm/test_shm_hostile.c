/* test_shm_hostile: a client process that writes garbage into its lane
 * (random descriptors, offsets past the arena, huge lengths, wrapped ring
 * indices, descriptors torn by a second thread while the server reads them,
 * a bogus response tail, a tampered lease) while two well-behaved clients keep
 * scoring. The server (built with ASan+UBSan in the sanitizer pass) must log,
 * reset the hostile lane, keep serving the others, and exit cleanly. After each
 * wrapped ring index the hostile client waits (a hang guard) for the reset that
 * must follow, so the count of resets does not depend on how fast the server is. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm_test_util.h"
#include "verl_reward/protocol.h"
#include "vr_proc.h"
#include "vr_time.h"

/* ---- the hostile client: raw access to the segment ---- */

typedef struct hostile {
  vr_shm_map_t m;
  vr_shm_lane_t *l;
  uint64_t lease;
  vr_shm_req_desc_t *ring;
  uint8_t *arena;
  uint32_t slots;
  _Atomic int tear;   /* the tearing thread runs while 1 */
  _Atomic int tearing; /* 1 while it is in one pass */
  _Atomic int quit;
  uint64_t rng;
} hostile_t;

/* Connects as a raw client: the server gives it a lane (v2: lanes are given, not claimed). */
static int grab_lane(hostile_t *H, const char *name) {
  char why[256];
  uint64_t t0 = vr_now_ns();
  while (vr_shm_attach(name, NULL, -1, &H->m, why, sizeof why) != 0) {
    if (vr_now_ns() - t0 > TU_HANG_GUARD_NS) return -1;
    usleep(2000);
  }
  H->slots = H->m.hdr.ring_slots;
  H->l = H->m.lane;
  H->lease = atomic_load(&H->l->lease);
  H->ring = vr_shm_req_ring(H->l);
  H->arena = vr_shm_arena(H->l, H->slots);
  return 0;
}

/* Closes the lane (CLOSING bit on our lease) and unmaps it. */
static void release_lane(hostile_t *H) {
  uint64_t w = atomic_load(&H->l->lease);
  if (VR_SHM_LEASE_PID(w) == (uint32_t)getpid() && (w == H->lease || VR_SHM_LEASE_QUARANTINED(w)))
    atomic_compare_exchange_strong(&H->l->lease, &w, w | VR_SHM_LEASE_CLOSING_BIT);
  atomic_fetch_add(H->m.bell, 1);
  vr_futex_wake(H->m.bell, 1);
  vr_shm_detach(&H->m);
  H->l = NULL;
}

static void *tearer(void *arg) {
  hostile_t *H = arg;
  uint64_t rng = 12345;
  while (!atomic_load(&H->quit)) {
    atomic_store(&H->tearing, 1);
    if (!atomic_load(&H->tear)) {
      atomic_store(&H->tearing, 0);
      usleep(100);
      continue;
    }
    vr_shm_lane_t *l = H->l;
    vr_shm_req_desc_t *ring = vr_shm_req_ring(l);
    uint64_t r = tu_rand(&rng);
    vr_shm_req_desc_t *d = &ring[r % H->slots];
    switch ((r >> 20) % 4) {
      case 0: ((volatile uint32_t *)d)[2 + (r >> 30) % 4] = (uint32_t)(r >> 32); break;
      case 1: ((volatile uint64_t *)&d->payload_off)[0] = (r >> 8) % (H->m.hdr.arena_bytes + 64); break;
      case 2: ((volatile uint32_t *)vr_shm_arena(l, H->slots))[(r >> 12) % 1024] = (uint32_t)r; break;
      default: ((volatile uint32_t *)&d->n_seqs)[0] = 1 + (uint32_t)(r >> 40) % 3; break;
    }
    atomic_store(&H->tearing, 0);
  }
  return NULL;
}

static void publish(hostile_t *H, const vr_shm_req_desc_t *d) {
  uint32_t head = atomic_load(&H->l->req_head);
  memcpy(&H->ring[head % H->slots], d, sizeof *d);
  atomic_store_explicit(&H->l->req_head, head + 1, memory_order_release);
  atomic_fetch_add(H->m.bell, 1);
  vr_futex_wake(H->m.bell, 1);
}

/* A descriptor that would be valid: 1..3 sequences of <= 50 tokens at offset 0. */
static void plausible(hostile_t *H, vr_shm_req_desc_t *d) {
  memset(d, 0, sizeof *d);
  uint32_t n = 1 + (uint32_t)(tu_rand(&H->rng) % 3), tok = 0;
  uint32_t *cu = (uint32_t *)(H->arena + 4 * 150);
  int32_t *ids = (int32_t *)H->arena;
  cu[0] = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t len = 1 + (uint32_t)(tu_rand(&H->rng) % 50);
    for (uint32_t t = 0; t < len; t++) ids[tok + t] = (int32_t)t;
    tok += len;
    cu[i + 1] = tok;
  }
  /* tokens must be followed directly by cu: move cu behind the tokens */
  memmove(H->arena + 4ull * tok, cu, 4ull * (n + 1));
  d->req_id = tu_rand(&H->rng);
  d->n_seqs = n;
  d->n_tokens = tok;
  d->payload_off = 0;
  d->result_off = 8192;
}

static int hostile_main(const char *name, int rounds) {
  hostile_t H;
  memset(&H, 0, sizeof H);
  H.rng = 4242; /* fixed: the same garbage on every run (the tearing thread's timing still varies) */
  if (grab_lane(&H, name) != 0) return 41;
  pthread_t th;
  pthread_create(&th, NULL, tearer, &H);
  int lanes_taken = 1, resets_seen = 0;
  uint64_t t0 = vr_now_ns();
  for (int r = 0; r < rounds; r++) {
    if (atomic_load(&H.l->lease) != H.lease) { /* the server reset us: take a fresh lane */
      atomic_store(&H.tear, 0); /* the tearing thread must not touch a lane being unmapped */
      while (atomic_load(&H.tearing)) usleep(50);
      release_lane(&H);
      if (grab_lane(&H, name) != 0) return 42;
      lanes_taken++;
    }
    vr_shm_req_desc_t d;
    uint32_t head = atomic_load(&H.l->req_head);
    switch (r % 10) {
      case 0: /* random bytes */
        for (size_t k = 0; k < sizeof d; k += 8) {
          uint64_t x = tu_rand(&H.rng);
          memcpy((uint8_t *)&d + k, &x, 8);
        }
        publish(&H, &d);
        break;
      case 1: /* payload past the arena, huge token count */
        plausible(&H, &d);
        d.payload_off = H.m.hdr.arena_bytes - 4;
        d.n_tokens = 0xfffffff0u;
        publish(&H, &d);
        break;
      case 2: { /* wrapped index: head far ahead of the tail; the server must reset the lane */
        atomic_store(&H.l->req_head, head + H.slots + 1 + (uint32_t)(tu_rand(&H.rng) % 1000));
        atomic_fetch_add(H.m.bell, 1);
        vr_futex_wake(H.m.bell, 1);
        uint64_t t_reset = vr_now_ns();
        while (atomic_load(&H.l->lease) == H.lease) {
          if (vr_now_ns() - t_reset > TU_HANG_GUARD_NS) return 44;
          usleep(1000);
        }
        resets_seen++;
        break;
      }
      case 3: /* head behind the tail (wraps to ~4 billion requests) */
        atomic_store(&H.l->req_head, head - 5);
        atomic_fetch_add(H.m.bell, 1);
        break;
      case 4: /* well-formed descriptor, garbage cu_seqlens */
        plausible(&H, &d);
        ((uint32_t *)(H.arena + 4ull * d.n_tokens))[1] = 0x7fffffff;
        publish(&H, &d);
        break;
      case 5: /* torn descriptors: a second thread rewrites slots and arena meanwhile */
        atomic_store(&H.tear, 1);
        for (int k = 0; k < 40; k++) {
          plausible(&H, &d);
          publish(&H, &d);
        }
        usleep(2000);
        atomic_store(&H.tear, 0);
        break;
      case 6: /* bogus response tail, then a valid request: the answer cannot be placed */
        atomic_store(&H.l->resp_tail, 0x80000000u);
        plausible(&H, &d);
        publish(&H, &d);
        break;
      case 7: /* tampered lease generation (+2: the server's reset issues +1) */
        atomic_store(&H.l->lease, H.lease + (2ull << 32));
        H.lease += 2ull << 32;
        atomic_fetch_add(H.m.bell, 1);
        break;
      case 8: /* absurd counts */
        plausible(&H, &d);
        d.n_seqs = 0xffffffffu;
        d.n_tokens = 0xffffffffu;
        publish(&H, &d);
        break;
      default: /* result area overlapping the payload, misaligned offsets */
        plausible(&H, &d);
        d.result_off = (r & 1) ? 4 : 3;
        publish(&H, &d);
        break;
    }
    usleep(3000);
  }
  atomic_store(&H.quit, 1);
  pthread_join(th, NULL);
  release_lane(&H);
  fprintf(stderr, "hostile client: %d rounds, %d lanes taken, %d resets after a wrapped index, %.2f s\n",
          rounds, lanes_taken, resets_seen, (double)(vr_now_ns() - t0) / 1e9);
  return resets_seen == rounds / 10 ? 0 : 43; /* (a missing reset returned 44 above) */
}

#define LOG_BURST 5
#define LOG_BURST_S "5"

/* Lines of the server log with "suppressed K similar messages <cause>": their number, and
 * the sum of the K in *total. */
static int count_suppressed(const tu_server_t *s, const char *cause, uint64_t *total) {
  FILE *f = fopen(s->log, "r");
  assert_non_null(f);
  char line[1024];
  int n = 0;
  *total = 0;
  while (fgets(line, sizeof line, f)) {
    const char *p = strstr(line, "suppressed ");
    unsigned long long k;
    if (!p || !strstr(line, cause) || sscanf(p, "suppressed %llu similar messages", &k) != 1) continue;
    *total += k;
    n++;
  }
  fclose(f);
  return n;
}

static void test_hostile_lane(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "hostile");
  tu_server_t s;
  assert_int_equal(tu_server_start(&s, name,
                                   (const char *const[]){"--lanes", "6", "--slots", "16", "--arena-bytes", "65536",
                                                         "--workers", "2", "--log-burst", LOG_BURST_S,
                                                         "--log-window-s", "3600", NULL}),
                   0);
  tu_stop_on_usr1();
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t good[2], bad;
  for (int k = 0; k < 2; k++) {
    good[k] = fork();
    if (good[k] == 0) _exit(tu_score_until_usr1(name, 99 + (uint64_t)k, 8, 256, p[1]));
    tu_track_pid(good[k]);
  }
  for (int k = 0; k < 2; k++) { /* both are scoring before the garbage starts */
    char r = 0;
    assert_int_equal(tu_read_byte(p[0], &r), 0);
  }
  close(p[0]);
  close(p[1]);
  bad = fork();
  if (bad == 0) _exit(hostile_main(name, 300));
  tu_track_pid(bad);
  int st;
  waitpid(bad, &st, 0);
  tu_untrack_pid(bad);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  for (int k = 0; k < 2; k++) {
    kill(good[k], SIGUSR1);
    waitpid(good[k], &st, 0);
    tu_untrack_pid(good[k]);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
  }
  /* the server is alive and stops cleanly */
  assert_int_equal(waitpid(s.pid, &st, WNOHANG), 0);
  st = tu_server_stop(&s, SIGTERM);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  /* it said what it did, rate-limited (issue 18): one window (an hour) of LOG_BURST lines, then
   * one count line (written at exit) for all the others; every quarantine is accounted for */
  uint64_t suppressed = 0;
  int count_lines = count_suppressed(&s, "(lane quarantined)", &suppressed);
  int shown = tu_log_count(&s, "reset and quarantined");
  printf("server quarantined the hostile lane %llu times, logged %d lines + %d count lines\n",
         (unsigned long long)(shown + suppressed), shown, count_lines);
  assert_int_equal(shown, LOG_BURST);
  assert_int_equal(count_lines, 1);
  assert_true(shown + suppressed >= 300 / 10); /* at least one per wrapped index */
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_hostile_lane)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
