/* test_shm_basic: the shm channel end to end with real processes
 * (vr_shm_test_server) and, where the server's own API is under test, an
 * in-process server: round trip, async submit/poll/wait, limits and error
 * codes, a taken / freed / junk-planted name, a segment too big, draining and
 * shutdown answers, lane reuse after close. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm_test_util.h"
#include "verl_reward/protocol.h"
#include "vr_checksum.h"
#include "vr_shm.h"
#include "vr_time.h"

static void test_round_trip(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "rt");
  tu_server_t s;
  assert_int_equal(tu_server_start(&s, name, NULL), 0);
  vr_client_t *c;
  assert_int_equal(tu_connect(name, 50, &c), 0);

  int32_t ids[7] = {5, 6, 7, 1, 2, 9, 9};
  uint32_t cu[4] = {0, 3, 5, 7};
  const uint8_t x0[] = {1, 2, 3}, x2[] = {200};
  const uint8_t *ex[3] = {x0, NULL, x2};
  uint32_t exl[3] = {3, 0, 1};
  vr_batch_t b = {.n_seqs = 3, .token_ids = ids, .cu_seqlens = cu, .extras = ex, .extras_len = exl};
  float scores[3], comps[3 * VR_MAX_COMPONENTS];
  vr_request_info_t info;
  assert_int_equal(vr_client_score(c, &b, scores, comps, &info), 0);
  for (int i = 0; i < 3; i++) {
    float want = vr_checksum_score(ids + cu[i], cu[i + 1] - cu[i]);
    assert_true(scores[i] == want);
    assert_true(comps[i * VR_MAX_COMPONENTS] == want);
    assert_true(comps[i * VR_MAX_COMPONENTS + 1] == (float)(cu[i + 1] - cu[i]));
  }
  assert_true(comps[2] == 6.0f && comps[VR_MAX_COMPONENTS + 2] == 0.0f && comps[2 * VR_MAX_COMPONENTS + 2] == 200.0f);
  assert_int_equal(info.status, 0);
  assert_int_equal(info.n_seqs, 3);
  assert_int_equal(info.bad_seq, -1);
  assert_int_equal(info.n_components, 3);
  assert_string_equal(info.component_names[0], "checksum");
  assert_string_equal(info.component_names[1], "len");
  /* the checksum is order-sensitive and not constant */
  assert_true(scores[0] != vr_checksum_score((int32_t[]){7, 6, 5}, 3));
  assert_true(scores[2] != scores[1]);

  vr_limits_t lim;
  assert_int_equal(vr_client_limits(c, &lim), 0);
  assert_int_equal(lim.max_seq_len, 8192);
  assert_int_equal(lim.max_seqs_per_request, 1024);
  assert_int_equal(lim.n_lanes, 8);
  assert_int_equal(lim.arena_bytes, 1 << 20);
  assert_int_equal(lim.max_inflight, 64);
  vr_client_close(c);
  assert_int_equal(WEXITSTATUS(tu_server_stop(&s, SIGTERM)), 0);
}

static void test_async_out_of_order(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "async");
  tu_server_t s;
  assert_int_equal(tu_server_start(&s, name, (const char *const[]){"--workers", "3", NULL}), 0);
  vr_client_t *c;
  assert_int_equal(tu_connect(name, 0, &c), 0);
  uint64_t rng = 42;
  enum { N = 48 };
  tu_batch_t tb[N];
  uint64_t id[N];
  for (int i = 0; i < N; i++) {
    tu_batch_random(&tb[i], &rng, 1 + (uint32_t)(tu_rand(&rng) % 8), 1, 300, 0);
    assert_int_equal(vr_client_submit(c, &tb[i].b, &id[i]), 0);
  }
  /* poll until the last one is there (a hang guard only), then collect newest first */
  uint64_t t0 = vr_now_ns();
  int r;
  while ((r = vr_client_poll(c, id[N - 1])) == 0) assert_true(vr_now_ns() - t0 < TU_HANG_GUARD_NS);
  assert_int_equal(r, 1);
  for (int i = N - 1; i >= 0; i--) {
    float sc[8];
    vr_request_info_t info;
    assert_int_equal(vr_client_wait(c, id[i], TU_HANG_GUARD_US, sc, NULL, &info), 0);
    assert_int_equal(info.n_seqs, tb[i].b.n_seqs);
    assert_int_equal(tu_batch_mismatches(&tb[i], sc), 0);
    tu_batch_free(&tb[i]);
  }
  /* an id that was collected is forgotten */
  assert_int_equal(vr_client_poll(c, id[0]), VR_ERR_NOT_FOUND);
  assert_int_equal(vr_client_wait(c, 12345, 0, NULL, NULL, NULL), VR_ERR_NOT_FOUND);
  vr_client_close(c);
  tu_server_stop(&s, SIGTERM);
}

static void test_limits_and_errors(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "lim");
  tu_server_t s;
  assert_int_equal(tu_server_start(&s, name,
                                   (const char *const[]){"--max-seqs", "4", "--max-seq-len", "100", "--vocab", "1000",
                                                         "--slots", "4", "--arena-bytes", "65536", NULL}),
                   0);
  vr_client_t *c;
  assert_int_equal(tu_connect(name, 0, &c), 0);
  vr_limits_t lim;
  assert_int_equal(vr_client_limits(c, &lim), 0);
  assert_int_equal(lim.max_seqs_per_request, 4);
  assert_int_equal(lim.max_seq_len, 100);
  assert_int_equal(lim.vocab_size, 1000);
  assert_int_equal(lim.max_inflight, 4);
  assert_int_equal(lim.arena_bytes, 65536);

  int32_t ids[200];
  for (int i = 0; i < 200; i++) ids[i] = i;
  uint32_t cu5[6] = {0, 1, 2, 3, 4, 5};
  vr_batch_t b = {.n_seqs = 5, .token_ids = ids, .cu_seqlens = cu5};
  uint64_t id;
  float sc[8];
  assert_int_equal(vr_client_submit(c, &b, &id), VR_ERR_TOO_LARGE);
  uint32_t cul[2] = {0, 101};
  b = (vr_batch_t){.n_seqs = 1, .token_ids = ids, .cu_seqlens = cul};
  assert_int_equal(vr_client_submit(c, &b, &id), VR_ERR_SEQ_TOO_LONG);
  uint32_t cue[3] = {0, 2, 2};
  b = (vr_batch_t){.n_seqs = 2, .token_ids = ids, .cu_seqlens = cue};
  assert_int_equal(vr_client_submit(c, &b, &id), VR_ERR_EMPTY_SEQ);
  int32_t bad_tok[2] = {3, 1000};
  uint32_t cu2[2] = {0, 2};
  b = (vr_batch_t){.n_seqs = 1, .token_ids = bad_tok, .cu_seqlens = cu2};
  assert_int_equal(vr_client_submit(c, &b, &id), VR_ERR_TOKEN_RANGE);
  assert_true(strstr(vr_client_last_error(), "vocabulary") != NULL);
  b = (vr_batch_t){.n_seqs = 0, .token_ids = ids, .cu_seqlens = cu2};
  assert_int_equal(vr_client_submit(c, &b, &id), VR_ERR_INVAL);

  /* the ring holds 4 requests in flight: the 5th is BUSY until one is collected (a slot
   * is freed by collecting, so this holds however fast the server answers; a wait that
   * times out is in test_drain_and_destroy, where nothing can answer) */
  uint32_t cu1[2] = {0, 100};
  b = (vr_batch_t){.n_seqs = 1, .token_ids = ids, .cu_seqlens = cu1};
  uint64_t ids4[4];
  for (int i = 0; i < 4; i++) assert_int_equal(vr_client_submit(c, &b, &ids4[i]), 0);
  assert_int_equal(vr_client_submit(c, &b, &id), VR_ERR_BUSY);
  assert_int_equal(vr_client_wait(c, ids4[0], TU_HANG_GUARD_US, sc, NULL, NULL), 0);
  assert_true(sc[0] == vr_checksum_score(ids, 100));
  assert_int_equal(vr_client_submit(c, &b, &id), 0);
  for (int i = 1; i < 4; i++) assert_int_equal(vr_client_wait(c, ids4[i], TU_HANG_GUARD_US, sc, NULL, NULL), 0);
  assert_int_equal(vr_client_wait(c, id, TU_HANG_GUARD_US, sc, NULL, NULL), 0);
  vr_client_close(c);
  tu_server_stop(&s, SIGTERM);

  /* a request that can never fit the arena */
  tu_name(name, sizeof name, "arena");
  assert_int_equal(tu_server_start(&s, name, (const char *const[]){"--arena-bytes", "8192", NULL}), 0);
  assert_int_equal(tu_connect(name, 0, &c), 0);
  int32_t *big = calloc(4096, sizeof *big);
  uint32_t cub[2] = {0, 4096};
  b = (vr_batch_t){.n_seqs = 1, .token_ids = big, .cu_seqlens = cub};
  assert_int_equal(vr_client_submit(c, &b, &id), VR_ERR_TOO_LARGE);
  cub[1] = 1000;
  assert_int_equal(vr_client_score(c, &b, sc, NULL, NULL), 0);
  assert_true(sc[0] == vr_checksum_score(big, 1000));
  free(big);
  vr_client_close(c);
  tu_server_stop(&s, SIGTERM);
}

static void test_not_found(void **state) {
  (void)state;
  vr_client_t *c = NULL;
  vr_client_options_t o;
  vr_client_options_init(&o);
  assert_int_equal(vr_client_connect("vrt_does_not_exist_here", &o, &c), VR_ERR_NOT_FOUND);
  assert_null(c);
  assert_true(strstr(vr_client_last_error(), "vrt_does_not_exist_here") != NULL);
  assert_int_equal(vr_client_connect("@bad/name", &o, &c), VR_ERR_INVAL);
  assert_int_equal(vr_client_connect("a/dir/", &o, &c), VR_ERR_INVAL);
}

/* 1 when a socket is bound to name's address: /proc/net/unix lists the path of a plain
 * name's socket (DIR/NAME.sock) or "@verl-reward/NAME" for an abstract one ("@NAME"). */
static int name_bound(const char *name) {
  vr_shm_addr_t a;
  char why[256];
  assert_int_equal(vr_shm_resolve(name, NULL, -1, 1, &a, why, sizeof why), 0);
  FILE *f = fopen("/proc/net/unix", "r");
  assert_non_null(f);
  char line[512], want[VR_SHM_ADDR_MAX + 4];
  snprintf(want, sizeof want, " %s\n", a.path);
  int found = 0;
  while (fgets(line, sizeof line, f))
    if (strlen(line) >= strlen(want) && !strcmp(line + strlen(line) - strlen(want), want)) found = 1;
  fclose(f);
  return found;
}

static void test_name_taken_killed_and_junk(void **state) {
  (void)state;
  char name[64], path[80];
  tu_name(name, sizeof name, "name");
  snprintf(path, sizeof path, "/%s", name);
  tu_server_t s;
  assert_int_equal(tu_server_start(&s, name, NULL), 0);
  assert_true(name_bound(name));
  /* a live server keeps its name */
  vr_shm_config_t cfg;
  tu_shm_config(&cfg, name, 2, 65536);
  vr_shm_server_t *srv = NULL;
  assert_int_equal(vr_shm_server_create(&cfg, &srv), VR_ERR_EXISTS);
  assert_null(srv);
  /* killed: its socket file stays, but nobody listens there: a client finds nobody, and
   * the next server (it gets the lock file nobody holds) replaces the stale socket */
  tu_server_stop(&s, SIGKILL);
  assert_false(name_bound(name));
  vr_shm_addr_t a;
  char why[256];
  assert_int_equal(vr_shm_resolve(name, NULL, -1, 1, &a, why, sizeof why), 0);
  struct stat st;
  assert_int_equal(lstat(a.path, &st), 0);
  assert_true(S_ISSOCK(st.st_mode));
  vr_client_t *c = NULL;
  vr_client_options_t o;
  vr_client_options_init(&o);
  assert_int_equal(vr_client_connect(name, &o, &c), VR_ERR_NOT_FOUND);
  assert_non_null(strstr(vr_client_last_error(), "nobody listens"));
  /* a stray regular file at the info socket's path is replaced as well */
  char info[VR_SHM_ADDR_MAX + 8];
  snprintf(info, sizeof info, "%s%s", a.path, VR_SHM_SOCK_INFO_EXT);
  assert_int_equal(unlink(info), 0);
  int jf = open(info, O_CREAT | O_EXCL | O_WRONLY, 0644);
  assert_true(jf >= 0);
  close(jf);
  /* a junk file planted where v1 kept its segment, owned by another uid when we are root
   * (issue 18 case 4: it used to keep the real server from starting) */
  int fd = shm_open(path, O_CREAT | O_EXCL | O_RDWR, 0666);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "not a verl-reward segment, hands off", 36), 36);
  if (geteuid() == 0) assert_int_equal(fchown(fd, 65534, 65534), 0);
  close(fd);
  assert_int_equal(vr_shm_server_create(&cfg, &srv), 0);
  /* STARTING: clients are not let in */
  assert_int_equal(vr_client_connect(name, &o, &c), VR_ERR_SERVER_GONE);
  assert_true(strstr(vr_client_last_error(), "starting") != NULL);
  vr_shm_server_set_state(srv, VR_SHM_READY);
  assert_int_equal(tu_connect(name, 0, &c), 0);
  int32_t ids[2] = {3, 4};
  uint32_t cu[2] = {0, 2};
  vr_batch_t b = {.n_seqs = 1, .token_ids = ids, .cu_seqlens = cu};
  uint64_t id;
  assert_int_equal(vr_client_submit(c, &b, &id), 0);
  vr_shm_request_t q;
  assert_int_equal(vr_shm_server_poll(srv, &q, 1, (int64_t)TU_HANG_GUARD_US), 1);
  float one = 0.25f;
  assert_int_equal(vr_shm_server_complete(srv, &q, 0, &one, NULL, 0, NULL, NULL, 0, 0), 0);
  float sc = 0;
  assert_int_equal(vr_client_wait(c, id, (int64_t)TU_HANG_GUARD_US, &sc, NULL, NULL), 0);
  assert_true(sc == 0.25f);
  vr_client_close(c);
  vr_shm_server_destroy(srv);
  assert_false(name_bound(name));
  /* a clean stop leaves no file behind (socket, info socket, lock) */
  assert_int_not_equal(lstat(a.path, &st), 0);
  assert_int_not_equal(lstat(info, &st), 0);
  char lock[VR_SHM_ADDR_MAX + 8];
  snprintf(lock, sizeof lock, "%s%s", a.path, VR_SHM_SOCK_LOCK_EXT);
  assert_int_not_equal(lstat(lock, &st), 0);
  shm_unlink(path);
  /* the abstract form, "@NAME", still works (and is listed as @verl-reward/NAME) */
  char at[72];
  snprintf(at, sizeof at, "@%s", name);
  tu_shm_config(&cfg, at, 2, 65536);
  assert_int_equal(vr_shm_server_create(&cfg, &srv), 0);
  assert_true(name_bound(at));
  vr_shm_server_set_state(srv, VR_SHM_READY);
  assert_int_equal(tu_connect(at, 0, &c), 0);
  vr_client_close(c);
  vr_shm_server_destroy(srv);
  assert_false(name_bound(at));
}

/* A lane that cannot be allocated (each client's lane is a memfd made at connect) is a
 * VR_ERR_NOSPACE for that client, with a message, and the server carries on. memfds are not
 * limited by /dev/shm; a file-size limit (RLIMIT_FSIZE, which memfds obey) stands in for a
 * memory limit without using any memory. */
static void test_segment_too_big(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "nospace");
  pid_t kid = fork();
  if (kid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {1u << 20, 1u << 20};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(50);
    vr_shm_config_t cfg;
    tu_shm_config(&cfg, name, 4, 1u << 20); /* lanes of 1 MiB + rings: above the 1 MiB limit */
    vr_shm_server_t *srv = NULL;
    if (vr_shm_server_create(&cfg, &srv) != 0) _exit(51); /* the header page fits */
    vr_shm_server_set_state(srv, VR_SHM_READY);
    vr_client_t *c = NULL;
    vr_client_options_t o;
    vr_client_options_init(&o);
    if (vr_client_connect(name, &o, &c) != VR_ERR_NOSPACE || c) _exit(52);
    if (!strstr(vr_client_last_error(), "memory")) _exit(53);
    vr_shm_server_destroy(srv);
    if (name_bound(name)) _exit(54); /* nothing left behind */
    _exit(0);
  }
  tu_track_pid(kid);
  int st;
  waitpid(kid, &st, 0);
  tu_untrack_pid(kid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

/* --- in-process server: draining, shutdown answers, wake, bad_seq --- */

static void *waker(void *arg) {
  usleep(100000);
  vr_shm_server_wake(arg);
  return NULL;
}

static void test_drain_and_destroy(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "drain");
  vr_shm_config_t cfg;
  tu_shm_config(&cfg, name, 2, 1 << 20);
  cfg.spin_us = 0;
  vr_shm_server_t *srv;
  assert_int_equal(vr_shm_server_create(&cfg, &srv), 0);
  vr_shm_server_set_state(srv, VR_SHM_READY);
  /* wake() ends a long poll early: the poll waits up to twice the hang guard, the wake-up
   * comes after 0.1 s, so a poll that returns within the guard was woken (a slow machine
   * only eats into the margin) */
  vr_shm_request_t q[8];
  pthread_t th;
  pthread_create(&th, NULL, waker, srv);
  uint64_t t0 = vr_now_ns();
  assert_int_equal(vr_shm_server_poll(srv, q, 8, 2 * (int64_t)TU_HANG_GUARD_US), 0);
  assert_true(vr_now_ns() - t0 < TU_HANG_GUARD_NS);
  pthread_join(th, NULL);

  vr_client_t *c;
  assert_int_equal(tu_connect(name, 0, &c), 0);
  assert_int_equal(vr_shm_server_lanes_in_use(srv), 1);
  int32_t ids[4] = {1, 2, 3, 4};
  uint32_t cu[3] = {0, 2, 4};
  vr_batch_t b = {.n_seqs = 2, .token_ids = ids, .cu_seqlens = cu};
  uint64_t a, bb, cc;
  assert_int_equal(vr_client_submit(c, &b, &a), 0);
  assert_int_equal(vr_client_submit(c, &b, &bb), 0);
  assert_int_equal(vr_client_submit(c, &b, &cc), 0);
  int n = 0;
  while (n < 3) n += vr_shm_server_poll(srv, q + n, 8 - n, 1000000);
  assert_int_equal(vr_shm_server_inflight(srv), 3);
  assert_int_equal(q[0].n_seqs, 2);
  assert_int_equal(q[0].n_tokens, 4);
  assert_memory_equal(q[0].token_ids, ids, sizeof ids);
  assert_null(q[0].extras);
  /* nothing is answered until complete(): a short wait times out and leaves the request
   * pending (the answer below still arrives) */
  vr_request_info_t info;
  float got[2];
  assert_int_equal(vr_client_wait(c, a, 1000, got, NULL, &info), VR_ERR_TIMEOUT);
  /* complete one with a bad sequence marked */
  float sc[2] = {0.5f, 0.25f};
  int32_t ss[2] = {0, VR_ERR_TOKEN_RANGE};
  assert_int_equal(vr_shm_server_complete(srv, &q[0], 0, sc, ss, 0, NULL, NULL, 7, 9), 0);
  assert_int_equal(vr_client_wait(c, a, 1000000, got, NULL, &info), 0);
  assert_true(got[0] == 0.5f && got[1] == 0.25f);
  assert_int_equal(info.bad_seq, 1);
  assert_int_equal(info.queue_us, 7);
  assert_int_equal(info.compute_us, 9);
  assert_int_equal(info.n_components, 0);
  /* an error answer */
  assert_int_equal(vr_shm_server_complete(srv, &q[1], VR_ERR_OVERLOADED, NULL, NULL, 0, NULL, NULL, 0, 0), 0);
  assert_int_equal(vr_client_wait(c, bb, 1000000, got, NULL, &info), VR_ERR_OVERLOADED);
  assert_int_equal(info.status, VR_ERR_OVERLOADED);
  /* draining: new submissions refused; what was handed out still completes */
  vr_shm_server_set_state(srv, VR_SHM_DRAINING);
  uint64_t d;
  assert_int_equal(vr_client_submit(c, &b, &d), VR_ERR_SHUTTING_DOWN);
  /* destroy answers the handed-out request with SHUTTING_DOWN */
  vr_shm_server_destroy(srv);
  assert_int_equal(vr_client_wait(c, cc, 1000000, got, NULL, &info), VR_ERR_SHUTTING_DOWN);
  /* and afterwards the client reports the server gone */
  assert_int_equal(vr_client_submit(c, &b, &d), VR_ERR_SERVER_GONE);
  vr_client_close(c);
}

static void test_lane_reuse(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "reuse");
  tu_server_t s;
  assert_int_equal(tu_server_start(&s, name, (const char *const[]){"--lanes", "2", "--slots", "1", NULL}), 0);
  /* 2 lanes of 1 slot, 60 connect/score/close cycles with another client holding one */
  vr_client_t *hold;
  assert_int_equal(tu_connect(name, 0, &hold), 0);
  int32_t ids[3] = {1, 2, 3};
  uint32_t cu[2] = {0, 3};
  vr_batch_t b = {.n_seqs = 1, .token_ids = ids, .cu_seqlens = cu};
  float sc;
  for (int i = 0; i < 60; i++) {
    vr_client_t *c;
    assert_int_equal(tu_connect(name, 0, &c), 0);
    assert_int_equal(vr_client_score(c, &b, &sc, NULL, NULL), 0);
    assert_true(sc == vr_checksum_score(ids, 3));
    /* leave a request in flight half of the time: close abandons it */
    uint64_t id;
    if (i % 2) {
      assert_int_equal(vr_client_submit(c, &b, &id), 0);
      assert_int_equal(vr_client_submit(c, &b, &id), VR_ERR_BUSY); /* one slot */
    }
    vr_client_close(c);
  }
  /* both lanes busy: a third connect without timeout fails with NO_LANE */
  vr_client_t *c2, *c3;
  assert_int_equal(tu_connect(name, 0, &c2), 0);
  vr_client_options_t o;
  vr_client_options_init(&o);
  assert_int_equal(vr_client_connect(name, &o, &c3), VR_ERR_NO_LANE);
  vr_client_close(c2);
  assert_int_equal(vr_client_score(hold, &b, &sc, NULL, NULL), 0);
  vr_client_close(hold);
  tu_server_stop(&s, SIGTERM);
}

/* A lane the server quarantines (here: a wrapped request index) fails the
 * client with VR_ERR_MALFORMED; closing that client frees the lane again. */
static void test_quarantine_and_close(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "quar");
  vr_shm_config_t cfg;
  tu_shm_config(&cfg, name, 1, 65536);
  cfg.spin_us = 0;
  vr_shm_server_t *srv;
  assert_int_equal(vr_shm_server_create(&cfg, &srv), 0);
  vr_shm_server_set_state(srv, VR_SHM_READY);
  vr_client_t *c;
  assert_int_equal(tu_connect(name, 0, &c), 0);
  vr_shm_lane_t *l = vr_shm_server_lane(srv, 0); /* the client's lane, as the server maps it */
  atomic_store(&l->req_head, 1000);
  vr_shm_request_t q;
  assert_int_equal(vr_shm_server_poll(srv, &q, 1, 0), 0);
  assert_true(VR_SHM_LEASE_QUARANTINED(atomic_load(&l->lease)));
  assert_int_equal(l->reset_reason, VR_ERR_MALFORMED);
  assert_int_equal(vr_shm_server_lanes_in_use(srv), 1);
  int32_t ids[2] = {1, 2};
  uint32_t cu[2] = {0, 2};
  vr_batch_t b = {.n_seqs = 1, .token_ids = ids, .cu_seqlens = cu};
  uint64_t id;
  assert_int_equal(vr_client_submit(c, &b, &id), VR_ERR_MALFORMED);
  assert_true(strstr(vr_client_last_error(), "reset") != NULL);
  vr_client_close(c);
  assert_int_equal(vr_shm_server_poll(srv, &q, 1, 0), 0);
  assert_int_equal(vr_shm_server_lanes_in_use(srv), 0);
  assert_int_equal(atomic_load(&l->lease) & 0xffffffffu, 0);
  /* the only lane serves a new client */
  assert_int_equal(tu_connect(name, 0, &c), 0);
  assert_int_equal(vr_client_submit(c, &b, &id), 0);
  assert_int_equal(vr_shm_server_poll(srv, &q, 1, 1000000), 1);
  float sc = 1.5f;
  assert_int_equal(vr_shm_server_complete(srv, &q, 0, &sc, NULL, 0, NULL, NULL, 0, 0), 0);
  assert_int_equal(vr_client_wait(c, id, 1000000, &sc, NULL, NULL), 0);
  assert_true(sc == 1.5f);
  vr_client_close(c);
  vr_shm_server_destroy(srv);
}

/* One client shared by several threads (client.h promises thread-safety):
 * synchronous scores and submit/wait pairs interleave on one lane. A forked
 * child cannot use (or close) its parent's client. */
typedef struct thr_arg {
  vr_client_t *c;
  int k;
  int bad;
} thr_arg_t;

static void *thr_main(void *p) {
  thr_arg_t *a = p;
  uint64_t rng = 500 + (uint64_t)a->k;
  float sc[16];
  for (int i = 0; i < 1500 && !a->bad; i++) {
    tu_batch_t tb;
    tu_batch_random(&tb, &rng, 1 + (uint32_t)(tu_rand(&rng) % 16), 1, 200, 0);
    int rc;
    if (i % 2) {
      rc = vr_client_score(a->c, &tb.b, sc, NULL, NULL);
    } else {
      uint64_t id;
      rc = vr_client_submit(a->c, &tb.b, &id);
      if (rc == VR_ERR_BUSY) {
        tu_batch_free(&tb);
        continue;
      }
      if (!rc) rc = vr_client_wait(a->c, id, TU_HANG_GUARD_US, sc, NULL, NULL);
    }
    if (rc || tu_batch_mismatches(&tb, sc)) {
      fprintf(stderr, "thread %d: %s %s\n", a->k, vr_status_name(rc), vr_client_last_error());
      a->bad = 1;
    }
    tu_batch_free(&tb);
  }
  return NULL;
}

static void test_threads_and_fork(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "thr");
  tu_server_t s;
  assert_int_equal(tu_server_start(&s, name, (const char *const[]){"--slots", "8", "--workers", "2", NULL}), 0);
  vr_client_t *c;
  assert_int_equal(tu_connect(name, 20, &c), 0);
  enum { T = 6 };
  pthread_t th[T];
  thr_arg_t arg[T];
  for (int k = 0; k < T; k++) {
    arg[k] = (thr_arg_t){.c = c, .k = k};
    pthread_create(&th[k], NULL, thr_main, &arg[k]);
  }
  for (int k = 0; k < T; k++) {
    pthread_join(th[k], NULL);
    assert_int_equal(arg[k].bad, 0);
  }
  pid_t kid = fork();
  if (kid == 0) {
    int32_t ids[1] = {1};
    uint32_t cu[2] = {0, 1};
    vr_batch_t b = {.n_seqs = 1, .token_ids = ids, .cu_seqlens = cu};
    uint64_t id;
    int rc = vr_client_submit(c, &b, &id);
    vr_client_close(c); /* must leave the parent's lane alone */
    _exit(rc == VR_ERR_INVAL ? 0 : 1);
  }
  int st;
  waitpid(kid, &st, 0);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  usleep(300000); /* past a liveness pass */
  int32_t ids[3] = {4, 5, 6};
  uint32_t cu[2] = {0, 3};
  vr_batch_t b = {.n_seqs = 1, .token_ids = ids, .cu_seqlens = cu};
  float sc;
  assert_int_equal(vr_client_score(c, &b, &sc, NULL, NULL), 0);
  assert_true(sc == vr_checksum_score(ids, 3));
  vr_client_close(c);
  tu_server_stop(&s, SIGTERM);
}

/* A small arena (64 KiB) with requests of up to ~32 KiB collected in random
 * order: allocations wrap around the end, the arena and the FIFO fill (BUSY),
 * and every score still matches. */
static void test_arena_wrap(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "wrap");
  tu_server_t s;
  assert_int_equal(tu_server_start(&s, name, (const char *const[]){"--arena-bytes", "65536", "--slots", "16", NULL}), 0);
  vr_client_t *c;
  assert_int_equal(tu_connect(name, 0, &c), 0);
  enum { W = 16 };
  tu_batch_t tb[W];
  uint64_t id[W];
  int live[W] = {0}, n_live = 0, busy = 0, done = 0;
  uint64_t rng = 3;
  float sc[4];
  for (int it = 0; it < 4000; it++) {
    int slot = (int)(tu_rand(&rng) % W);
    if (!live[slot] && tu_rand(&rng) % 3) {
      tu_batch_random(&tb[slot], &rng, 1 + (uint32_t)(tu_rand(&rng) % 4), 1, 2000, 0);
      int rc = vr_client_submit(c, &tb[slot].b, &id[slot]);
      if (rc == VR_ERR_BUSY) {
        busy++;
        tu_batch_free(&tb[slot]);
      } else {
        assert_int_equal(rc, 0);
        live[slot] = 1;
        n_live++;
      }
    } else if (live[slot]) {
      assert_int_equal(vr_client_wait(c, id[slot], TU_HANG_GUARD_US, sc, NULL, NULL), 0);
      assert_int_equal(tu_batch_mismatches(&tb[slot], sc), 0);
      tu_batch_free(&tb[slot]);
      live[slot] = 0;
      n_live--;
      done++;
    }
  }
  for (int k = 0; k < W; k++)
    if (live[k]) {
      assert_int_equal(vr_client_wait(c, id[k], TU_HANG_GUARD_US, sc, NULL, NULL), 0);
      assert_int_equal(tu_batch_mismatches(&tb[k], sc), 0);
      tu_batch_free(&tb[k]);
    }
  printf("%d requests collected, %d submissions refused with BUSY\n", done, busy);
  assert_true(busy > 0 && done > 500);
  vr_client_close(c);
  tu_server_stop(&s, SIGTERM);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),       cmocka_unit_test(test_async_out_of_order),
      cmocka_unit_test(test_limits_and_errors), cmocka_unit_test(test_not_found),
      cmocka_unit_test(test_name_taken_killed_and_junk), cmocka_unit_test(test_segment_too_big),
      cmocka_unit_test(test_drain_and_destroy), cmocka_unit_test(test_lane_reuse),
      cmocka_unit_test(test_quarantine_and_close), cmocka_unit_test(test_threads_and_fork),
      cmocka_unit_test(test_arena_wrap),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
