/* test_shm_kill: liveness with real processes and SIGKILL.
 *  - clients killed with requests in flight, repeatedly, while two others keep
 *    scoring: the others are served throughout, the killed lanes come back
 *    (reclaim time printed), nothing stays in flight, and afterwards every
 *    lane can take a request that fills its whole arena;
 *  - the server killed with requests in flight (it would hold them for 10 minutes,
 *    so none can be answered first): every waiting client returns
 *    VR_ERR_SERVER_GONE (or _RESTARTED) well before its timeout, an idle client
 *    learns of the restart, and all of them reconnect to the restarted server.
 * Every deadline here is a hang guard (TU_HANG_GUARD_US), not a speed bound. */
#define _GNU_SOURCE
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
#include "vr_checksum.h"
#include "vr_time.h"

/* Fills its lane with requests (from the batch that seed gives), tells the parent, waits
 * to be killed. */
static int victim(const char *name, int fd, uint64_t seed) {
  vr_client_t *c;
  if (tu_connect(name, 0, &c) != 0) return 20;
  uint64_t rng = seed, id;
  tu_batch_t tb;
  tu_batch_random(&tb, &rng, 4, 100, 1000, 0);
  int n = 0;
  while (n < 64 && vr_client_submit(c, &tb.b, &id) == 0) n++;
  char one = n > 0 ? 1 : 0;
  if (write(fd, &one, 1) != 1) return 21;
  for (;;) pause();
}

static void test_kill_clients(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "killc");
  tu_server_t s;
  assert_int_equal(tu_server_start(&s, name,
                                   (const char *const[]){"--lanes", "8", "--arena-bytes", "262144", "--delay-us",
                                                         "500", "--workers", "2", NULL}),
                   0);
  tu_stop_on_usr1();
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t good[2];
  for (int k = 0; k < 2; k++) {
    good[k] = fork();
    if (good[k] == 0) _exit(tu_score_until_usr1(name, 77 + (uint64_t)k, 16, 512, p[1]));
    tu_track_pid(good[k]);
  }
  for (int k = 0; k < 2; k++) { /* both are scoring before the first kill */
    char r = 0;
    assert_int_equal(tu_read_byte(p[0], &r), 0);
    assert_int_equal(r, 'r');
  }
  enum { ROUNDS = 8, VICTIMS = 3 };
  for (int r = 0; r < ROUNDS; r++) {
    pid_t v[VICTIMS];
    for (int k = 0; k < VICTIMS; k++) {
      v[k] = fork();
      if (v[k] == 0) _exit(victim(name, p[1], 1000u * (uint64_t)r + (uint64_t)k));
      tu_track_pid(v[k]);
    }
    for (int k = 0; k < VICTIMS; k++) {
      char one = 0;
      assert_int_equal(tu_read_byte(p[0], &one), 0);
      assert_int_equal(one, 1); /* it had requests in flight */
    }
    for (int k = 0; k < VICTIMS; k++) {
      kill(v[k], SIGKILL);
      waitpid(v[k], NULL, 0);
      tu_untrack_pid(v[k]);
    }
  }
  double took = -1;
  assert_int_equal(tu_server_wait_stat(&s, "lanes", 2, &took), 0);
  printf("killed lanes reclaimed %.2f s after the last kill (stats file refreshes every 0.1 s)\n", took);
  for (int k = 0; k < 2; k++) {
    kill(good[k], SIGUSR1);
    int st;
    waitpid(good[k], &st, 0);
    tu_untrack_pid(good[k]);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
  }
  assert_int_equal(tu_server_wait_stat(&s, "lanes", 0, NULL), 0);
  assert_int_equal(tu_server_wait_stat(&s, "inflight", 0, NULL), 0);
  assert_true(tu_log_count(&s, "is gone") >= ROUNDS * VICTIMS);
  /* every lane again takes a request that fills its arena */
  vr_client_t *c[8];
  tu_batch_t tb;
  uint64_t rng = 5;
  tu_batch_random(&tb, &rng, 8, 8000, 8000, 0); /* 256 KB of tokens + 36 B/seq results */
  uint64_t id[8];
  for (int i = 0; i < 8; i++) {
    assert_int_equal(tu_connect(name, 0, &c[i]), 0);
    assert_int_equal(vr_client_submit(c[i], &tb.b, &id[i]), 0);
  }
  float sc[8];
  for (int i = 0; i < 8; i++) {
    assert_int_equal(vr_client_wait(c[i], id[i], TU_HANG_GUARD_US, sc, NULL, NULL), 0);
    assert_int_equal(tu_batch_mismatches(&tb, sc), 0);
    vr_client_close(c[i]);
  }
  tu_batch_free(&tb);
  int st = tu_server_stop(&s, SIGTERM);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  close(p[0]);
  close(p[1]);
}

/* Waits on an in-flight request while the server dies; then reconnects. */
static int waiting_client(const char *name, int fd) {
  vr_client_t *c;
  if (tu_connect(name, 0, &c) != 0) return 30;
  int32_t ids[5] = {9, 8, 7, 6, 5};
  uint32_t cu[2] = {0, 5};
  vr_batch_t b = {.n_seqs = 1, .token_ids = ids, .cu_seqlens = cu};
  uint64_t id;
  if (vr_client_submit(c, &b, &id) != 0) return 31;
  char one = 1;
  if (write(fd, &one, 1) != 1) return 32;
  uint64_t t0 = vr_now_ns();
  float sc;
  int rc = vr_client_wait(c, id, TU_HANG_GUARD_US, &sc, NULL, NULL);
  double took = (double)(vr_now_ns() - t0) / 1e9;
  if (rc != VR_ERR_SERVER_GONE && rc != VR_ERR_SERVER_RESTARTED) {
    fprintf(stderr, "waiting client: wait returned %s after %.2f s\n", vr_status_name(rc), took);
    return 33;
  }
  fprintf(stderr, "waiting client: %s after %.3f s (%s)\n", vr_status_name(rc), took, vr_client_last_error());
  /* the client stays failed until it reconnects */
  if (vr_client_submit(c, &b, &id) == 0) return 34;
  vr_client_close(c);
  if (tu_connect(name, 0, &c) != 0) {
    fprintf(stderr, "waiting client: reconnect: %s\n", vr_client_last_error());
    return 35;
  }
  if (vr_client_score(c, &b, &sc, NULL, NULL) != 0 || sc != vr_checksum_score(ids, 5)) return 36;
  vr_client_close(c);
  return 0;
}

static void test_kill_server(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "kills");
  tu_server_t s;
  /* 600 s per request: nothing is answered before the kill, however slow the machine */
  assert_int_equal(tu_server_start(&s, name, (const char *const[]){"--delay-us", "600000000", NULL}), 0);
  vr_client_t *idle;
  assert_int_equal(tu_connect(name, 0, &idle), 0);
  int p[2];
  assert_int_equal(pipe(p), 0);
  enum { K = 3 };
  pid_t kid[K];
  for (int k = 0; k < K; k++) {
    kid[k] = fork();
    if (kid[k] == 0) _exit(waiting_client(name, p[1]));
    tu_track_pid(kid[k]);
  }
  for (int k = 0; k < K; k++) {
    char one;
    assert_int_equal(tu_read_byte(p[0], &one), 0);
  }
  usleep(100000);
  tu_server_stop(&s, SIGKILL);
  usleep(500000);
  assert_int_equal(tu_server_start(&s, name, NULL), 0);
  for (int k = 0; k < K; k++) {
    int st;
    waitpid(kid[k], &st, 0);
    tu_untrack_pid(kid[k]);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
  }
  /* the idle client learns that the server restarted */
  int32_t ids[2] = {1, 2};
  uint32_t cu[2] = {0, 2};
  vr_batch_t b = {.n_seqs = 1, .token_ids = ids, .cu_seqlens = cu};
  uint64_t id;
  assert_int_equal(vr_client_submit(idle, &b, &id), VR_ERR_SERVER_RESTARTED);
  vr_client_close(idle);
  assert_int_equal(tu_connect(name, 0, &idle), 0);
  float sc;
  assert_int_equal(vr_client_score(idle, &b, &sc, NULL, NULL), 0);
  assert_true(sc == vr_checksum_score(ids, 2));
  vr_client_close(idle);
  /* nothing of the killed server stood in the way: the kernel freed its socket name with it */
  assert_int_equal(tu_log_count(&s, "is taken"), 0);
  tu_server_stop(&s, SIGTERM);
  close(p[0]);
  close(p[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_kill_clients), cmocka_unit_test(test_kill_server)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
