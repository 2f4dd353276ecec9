/* test_shm_perm: who may attach to whom (issue 18, case 4). Needs root to
 * switch uid: the other party drops to `nobody` (uid/gid 65534); not root, it
 * exits 77, which ctest reports as "Not Run" (SKIP_RETURN_CODE), never a pass.
 *   - a client of another uid is refused by default, both ways: it refuses a
 *     server that does not run as its own uid, and the server refuses a uid
 *     it was not told to allow (each with a HINT);
 *   - --allow-uid lets that uid in, when the client expects the server's uid;
 *   - a server that another user started first under the expected name does
 *     not get the trainer's requests (it used to answer them). */
#define _GNU_SOURCE
#include <grp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm_test_util.h"
#include "vr_checksum.h"

#define NOBODY 65534

static int become_nobody(void) {
  if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0) return 50;
  return geteuid() == NOBODY ? 0 : 51;
}

/* Connects as nobody, expecting the server to run as expected_uid (-1: own uid); 0 when
 * the result is want_rc (and, on success, a checksum score comes back). */
static int as_nobody(const char *name, int64_t expected_uid, int want_rc, const char *want_text) {
  int rc = become_nobody();
  if (rc) return rc;
  vr_client_t *c = NULL;
  vr_client_options_t o;
  vr_client_options_init(&o);
  o.expected_server_uid = expected_uid;
  rc = vr_client_connect(name, &o, &c);
  fprintf(stderr, "connect as nobody (expecting server uid %lld): %s (%s)\n", (long long)expected_uid,
          vr_status_name(rc), vr_client_last_error());
  if (rc != want_rc) return 52;
  if (rc != 0) return c == NULL && strstr(vr_client_last_error(), want_text) ? 0 : 53;
  int32_t ids[3] = {4, 5, 6};
  uint32_t cu[2] = {0, 3};
  vr_batch_t b = {.n_seqs = 1, .token_ids = ids, .cu_seqlens = cu};
  float sc = 0;
  rc = vr_client_score(c, &b, &sc, NULL, NULL);
  vr_client_close(c);
  return rc == 0 && sc == vr_checksum_score(ids, 3) ? 0 : 54;
}

static int run_as_nobody(const char *name, int64_t expected_uid, int want_rc, const char *want_text) {
  pid_t kid = fork();
  if (kid == 0) _exit(as_nobody(name, expected_uid, want_rc, want_text));
  tu_track_pid(kid);
  int st;
  waitpid(kid, &st, 0);
  tu_untrack_pid(kid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 99;
}

static void test_other_uid_refused_unless_allowed(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "perm");
  tu_server_t s;
  assert_int_equal(tu_server_start(&s, name, NULL), 0);
  /* the client will not talk to a server of another uid... */
  assert_int_equal(run_as_nobody(name, -1, VR_ERR_PERM, "expected_server_uid"), 0);
  /* ...and when it expects root's server, that server does not let nobody in */
  assert_int_equal(run_as_nobody(name, 0, VR_ERR_PERM, "--allow-uid"), 0);
  /* the owner still gets in */
  vr_client_t *c;
  assert_int_equal(tu_connect(name, 0, &c), 0);
  vr_client_close(c);
  tu_server_stop(&s, SIGTERM);
  assert_true(tu_log_count(&s, "refused a client") >= 1);
  /* --allow-uid: nobody is let in and scores */
  char name2[64];
  tu_name(name2, sizeof name2, "permok");
  assert_int_equal(tu_server_start(&s, name2, (const char *const[]){"--allow-uid", "65534", NULL}), 0);
  assert_int_equal(run_as_nobody(name2, 0, 0, NULL), 0);
  tu_server_stop(&s, SIGTERM);
}

/* A server of uid nobody that answers every request with 0.5 (not the checksum). */
static int squatter(const char *name, int ready_fd) {
  if (become_nobody()) return 60;
  vr_shm_config_t cfg;
  tu_shm_config(&cfg, name, 2, 65536);
  cfg.mode = 0666; /* "anyone may attach", as in the report */
  vr_shm_server_t *srv;
  if (vr_shm_server_create(&cfg, &srv) != 0) return 61;
  vr_shm_server_set_state(srv, VR_SHM_READY);
  if (write(ready_fd, "r", 1) != 1) return 62;
  for (;;) { /* until killed */
    vr_shm_request_t q;
    if (vr_shm_server_poll(srv, &q, 1, 100000) == 1) {
      float half[1024];
      for (uint32_t i = 0; i < q.n_seqs && i < 1024; i++) half[i] = 0.5f;
      vr_shm_server_complete(srv, &q, 0, half, NULL, 0, NULL, NULL, 0, 0);
    }
  }
}

static void test_squatted_name_refused(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "squat");
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t sq = fork();
  if (sq == 0) _exit(squatter(name, p[1]));
  tu_track_pid(sq);
  char r;
  assert_int_equal(tu_read_byte(p[0], &r), 0);
  /* the trainer (root) finds a server under its name, of another uid: refused */
  vr_client_t *c = NULL;
  vr_client_options_t o;
  vr_client_options_init(&o);
  assert_int_equal(vr_client_connect(name, &o, &c), VR_ERR_PERM);
  assert_null(c);
  assert_non_null(strstr(vr_client_last_error(), "uid 65534"));
  /* the same connect expecting that uid gets its answers: the uid check is what refused it */
  o.expected_server_uid = NOBODY;
  assert_int_equal(vr_client_connect(name, &o, &c), 0);
  int32_t ids[2] = {1, 2};
  uint32_t cu[2] = {0, 2};
  vr_batch_t b = {.n_seqs = 1, .token_ids = ids, .cu_seqlens = cu};
  float sc = 0;
  assert_int_equal(vr_client_score(c, &b, &sc, NULL, NULL), 0);
  assert_true(sc == 0.5f);
  vr_client_close(c);
  kill(sq, SIGKILL);
  waitpid(sq, NULL, 0);
  tu_untrack_pid(sq);
  close(p[0]);
  close(p[1]);
}

int main(void) {
  if (geteuid() != 0) {
    printf("not root: cannot switch to another uid; skipped (exit 77)\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_other_uid_refused_unless_allowed),
                                     cmocka_unit_test(test_squatted_name_refused)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
