/* test_shm_perm: a client of another uid cannot attach to a default (0600)
 * segment. Needs root to switch uid: when run as root the child drops to
 * `nobody` (uid/gid 65534); otherwise it exits 77, which ctest reports as
 * "Not Run" (SKIP_RETURN_CODE), never as a pass. */
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

static int as_nobody(const char *name) {
  if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) return 50;
  if (geteuid() != 65534) return 51;
  vr_client_t *c = NULL;
  vr_client_options_t o;
  vr_client_options_init(&o);
  int rc = vr_client_connect(name, &o, &c);
  fprintf(stderr, "connect as nobody: %s (%s)\n", vr_status_name(rc), vr_client_last_error());
  if (rc != VR_ERR_PERM || c) return 52;
  if (!strstr(vr_client_last_error(), "HINT")) return 53;
  return 0;
}

static void test_other_uid_refused(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "perm");
  tu_server_t s;
  assert_int_equal(tu_server_start(&s, name, NULL), 0);
  pid_t kid = fork();
  if (kid == 0) _exit(as_nobody(name));
  tu_track_pid(kid);
  int st;
  waitpid(kid, &st, 0);
  tu_untrack_pid(kid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  /* the owner still gets in */
  vr_client_t *c;
  assert_int_equal(tu_connect(name, 0, &c), 0);
  vr_client_close(c);
  tu_server_stop(&s, SIGTERM);
}

int main(void) {
  if (geteuid() != 0) {
    printf("not root: cannot switch to another uid; skipped (exit 77)\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_other_uid_refused)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
