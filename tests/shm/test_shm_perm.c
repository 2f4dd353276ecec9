/* test_shm_perm: who may attach to whom (issue 18, case 4). Needs root to
 * switch uid: the other party drops to `nobody` (uid/gid 65534); not root, it
 * exits 77, which ctest reports as "Not Run" (SKIP_RETURN_CODE), never a pass.
 *   - a client of another uid is refused by default, both ways: it refuses a
 *     server that does not run as its own uid, and the server refuses a uid
 *     it was not told to allow (each with a HINT);
 *   - --allow-uid lets that uid in, when the client expects the server's uid;
 *   - a server that another user started first under the expected abstract
 *     name (@NAME) does not get the trainer's requests (it used to answer them);
 *   - a plain name cannot be squatted: another user who binds the abstract name
 *     and tries to plant files in the socket directory cannot keep the real
 *     server from starting, and a trainer of another uid reaches the real one;
 *   - a socket directory that is not the server's own, or that others can
 *     write, is refused with a HINT;
 *   - one uid cannot take more than --max-lanes-per-uid lanes. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm_test_util.h"
#include "vr_checksum.h"

#define NOBODY 65534

static int become(uid_t uid) {
  if (setgroups(0, NULL) != 0 || setgid(uid) != 0 || setuid(uid) != 0) return 50;
  return geteuid() == uid ? 0 : 51;
}
static int become_nobody(void) { return become(NOBODY); }

#define SQUATTER 1 /* a third uid (daemon), neither the server's nor the trainer's */

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

/* As nobody: opens n clients to name (expecting the server to run as root); 0 when the
 * first n_ok connect and score and the rest fail with VR_ERR_NO_LANE naming the per-uid
 * limit. */
static int nobody_lanes(const char *name, int n, int n_ok) {
  if (become_nobody()) return 50;
  vr_client_t *c[16] = {0};
  vr_client_options_t o;
  vr_client_options_init(&o);
  o.expected_server_uid = 0;
  int bad = 0;
  for (int k = 0; k < n && k < 16; k++) {
    int rc = vr_client_connect(name, &o, &c[k]);
    fprintf(stderr, "lane %d as nobody: %s (%s)\n", k, vr_status_name(rc), vr_client_last_error());
    if (k < n_ok && rc != 0) bad = 55;
    if (k >= n_ok && (rc != VR_ERR_NO_LANE || !strstr(vr_client_last_error(), "limit per uid"))) bad = 56;
  }
  int32_t ids[2] = {7, 8};
  uint32_t cu[2] = {0, 2};
  vr_batch_t b = {.n_seqs = 1, .token_ids = ids, .cu_seqlens = cu};
  for (int k = 0; k < n_ok && !bad; k++) {
    float sc = 0;
    if (vr_client_score(c[k], &b, &sc, NULL, NULL) != 0 || sc != vr_checksum_score(ids, 2)) bad = 57;
  }
  for (int k = 0; k < 16; k++) vr_client_close(c[k]);
  return bad;
}

static int run_child(int (*fn)(const char *, int, int), const char *name, int a, int b) {
  pid_t kid = fork();
  if (kid == 0) _exit(fn(name, a, b));
  tu_track_pid(kid);
  int st;
  waitpid(kid, &st, 0);
  tu_untrack_pid(kid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 99;
}

/* A server of uid nobody that answers every request with 0.5 (not the checksum). */
static int squatter(const char *name, int ready_fd) {
  if (become_nobody()) return 60;
  vr_shm_config_t cfg;
  tu_shm_config(&cfg, name, 2, 65536);
  cfg.mode = 0666; /* "anyone may attach", as in the report */
  /* both lanes to one uid: the test connects twice in a row, and the lane of the connect the client
   * refused is freed only when this loop's poll sees that client's hang-up (the default limit for a
   * 0666 segment, one lane per uid, made the second connect race it) */
  cfg.max_lanes_per_uid = 2;
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
  /* the abstract form: anyone can bind it first; the uid check is the defence */
  char base[64], name[72];
  tu_name(base, sizeof base, "squat");
  snprintf(name, sizeof name, "@%s", base);
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

/* As uid SQUATTER, against a plain name: binds its abstract form (@verl-reward/NAME and /info)
 * and tries to create NAME.sock, NAME.sock.lock and NAME.sock.info in the socket
 * directory, then signals ready_fd and waits to be killed. Exit 70+ when a file could be
 * planted. */
static int squat_all(const char *name, int ready_fd, int unused) {
  (void)unused;
  if (become(SQUATTER)) return 60;
  char at[80], why[256];
  snprintf(at, sizeof at, "@%s", name);
  vr_shm_addr_t aa, pa;
  if (vr_shm_resolve(at, NULL, -1, 1, &aa, why, sizeof why) != 0) return 61;
  if (vr_shm_resolve(name, NULL, 0, 0, &pa, why, sizeof why) != 0) return 62;
  int held[2];
  for (int info = 0; info < 2; info++) {
    struct sockaddr_un sa;
    unsigned len;
    vr_shm_sockaddr(&aa, info, &sa, &len);
    held[info] = socket(AF_UNIX, SOCK_STREAM, 0);
    if (held[info] < 0 || bind(held[info], (struct sockaddr *)&sa, len) != 0 || listen(held[info], 4) != 0) return 63;
  }
  const char *ext[3] = {"", VR_SHM_SOCK_LOCK_EXT, VR_SHM_SOCK_INFO_EXT};
  for (int k = 0; k < 3; k++) {
    char p[VR_SHM_ADDR_MAX + 8];
    snprintf(p, sizeof p, "%s%s", pa.path, ext[k]);
    int fd = open(p, O_CREAT | O_EXCL | O_WRONLY, 0666);
    if (fd >= 0 || errno != EACCES) return 70 + k;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(p) >= sizeof sa.sun_path) return 69;
    memcpy(sa.sun_path, p, strlen(p) + 1);
    int sk = socket(AF_UNIX, SOCK_STREAM, 0);
    if (sk < 0 || bind(sk, (struct sockaddr *)&sa, sizeof sa) == 0) return 75 + k;
    close(sk);
  }
  if (write(ready_fd, "r", 1) != 1) return 64;
  pause();
  return 0;
}

static int squat_child(const char *name, int ready_fd, int b) { return squat_all(name, ready_fd, b); }

static void test_plain_name_not_squattable(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "nosquat");
  /* the default directory exists (a root server makes it) before the squatter tries it */
  assert_true(mkdir(VR_SHM_SOCK_DIR, 0755) == 0 || errno == EEXIST);
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t sq = fork();
  if (sq == 0) _exit(squat_child(name, p[1], 0));
  tu_track_pid(sq);
  char r;
  if (tu_read_byte(p[0], &r) != 0) {
    int st;
    waitpid(sq, &st, 0);
    tu_untrack_pid(sq);
    fail_msg("the squatter exited %d before it was ready", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  }
  /* the real server (root) starts anyway and serves a trainer of a third uid (nobody), which
   * gets the checksum, that is the real server's scores */
  tu_server_t s;
  assert_int_equal(tu_server_start(&s, name, (const char *const[]){"--allow-uid", "65534", NULL}), 0);
  assert_int_equal(run_as_nobody(name, 0, 0, NULL), 0);
  /* ...while the abstract name stays the squatter's */
  char at[72];
  snprintf(at, sizeof at, "@%s", name);
  vr_client_t *c = NULL;
  vr_client_options_t o;
  vr_client_options_init(&o);
  assert_int_equal(vr_client_connect(at, &o, &c), VR_ERR_PERM);
  tu_server_stop(&s, SIGTERM);
  kill(sq, SIGKILL);
  waitpid(sq, NULL, 0);
  tu_untrack_pid(sq);
  close(p[0]);
  close(p[1]);
}

/* The socket directory must be the server's own and writable by nobody else. */
static void test_socket_dir_checked(void **state) {
  (void)state;
  char dir[128], sub[160];
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/vrt_sockdir_%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
  snprintf(sub, sizeof sub, "%s/made", dir);
  assert_int_equal(mkdir(dir, 0755), 0);
  vr_shm_config_t cfg;
  tu_shm_config(&cfg, "vrt_dir", 2, 65536);
  cfg.socket_dir = dir;
  vr_shm_server_t *srv = NULL;
  /* writable by others: refused */
  assert_int_equal(chmod(dir, 0777), 0);
  assert_int_equal(vr_shm_server_create(&cfg, &srv), VR_ERR_PERM);
  /* another user's: refused */
  assert_int_equal(chmod(dir, 0755), 0);
  assert_int_equal(chown(dir, NOBODY, NOBODY), 0);
  assert_int_equal(vr_shm_server_create(&cfg, &srv), VR_ERR_PERM);
  /* ours, 0755: used; a missing last level is made 0755; clients find it with socket_dir */
  assert_int_equal(chown(dir, 0, 0), 0);
  cfg.socket_dir = sub;
  assert_int_equal(vr_shm_server_create(&cfg, &srv), 0);
  struct stat st;
  assert_int_equal(stat(sub, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0755);
  vr_shm_server_set_state(srv, VR_SHM_READY);
  vr_client_t *c = NULL;
  vr_client_options_t o;
  vr_client_options_init(&o);
  assert_int_equal(vr_client_connect("vrt_dir", &o, &c), VR_ERR_NOT_FOUND); /* not in the default directory */
  o.socket_dir = sub;
  assert_int_equal(vr_client_connect("vrt_dir", &o, &c), 0);
  vr_client_close(c);
  /* and the path form reaches the same socket */
  char path[200];
  snprintf(path, sizeof path, "%s/vrt_dir.sock", sub);
  vr_client_options_init(&o);
  assert_int_equal(vr_client_connect(path, &o, &c), 0);
  vr_client_close(c);
  /* a second server on the same name is refused while the first lives */
  vr_shm_server_t *srv2 = NULL;
  vr_shm_config_t cfg2;
  tu_shm_config(&cfg2, path, 2, 65536);
  assert_int_equal(vr_shm_server_create(&cfg2, &srv2), VR_ERR_EXISTS);
  vr_shm_server_destroy(srv);
  assert_int_equal(rmdir(sub), 0); /* nothing left in it */
  assert_int_equal(rmdir(dir), 0);
}

/* As nobody (no /run/user/65534 here, /run/verl-reward root's): a plain name has no default
 * directory (VR_ERR_NOT_FOUND, with a HINT in the log); with a socket_dir of nobody's own it
 * serves. 0 when both hold. */
static int nobody_server(const char *dir, int a, int b) {
  (void)a, (void)b;
  if (become_nobody()) return 50;
  vr_shm_config_t cfg;
  tu_shm_config(&cfg, "vrt_nobody_srv", 2, 65536);
  vr_shm_server_t *srv = NULL;
  struct stat st;
  if (stat("/run/user/65534", &st) != 0 && vr_shm_server_create(&cfg, &srv) != VR_ERR_NOT_FOUND) return 80;
  cfg.socket_dir = dir;
  if (vr_shm_server_create(&cfg, &srv) != 0) return 81;
  vr_shm_server_set_state(srv, VR_SHM_READY);
  vr_client_t *c = NULL;
  vr_client_options_t o;
  vr_client_options_init(&o);
  o.socket_dir = dir;
  int rc = vr_client_connect("vrt_nobody_srv", &o, &c);
  vr_client_close(c);
  vr_shm_server_destroy(srv);
  return rc == 0 ? 0 : 82;
}

static void test_non_root_server(void **state) {
  (void)state;
  char dir[128]; /* under /tmp, not $TMPDIR: nobody must reach it */
  snprintf(dir, sizeof dir, "/tmp/vrt_nobodydir_%d", (int)getpid());
  assert_int_equal(mkdir(dir, 0755), 0);
  assert_int_equal(chown(dir, NOBODY, NOBODY), 0);
  int rc = run_child(nobody_server, dir, 0, 0);
  rmdir(dir);
  assert_int_equal(rc, 0);
}

/* As nobody: the name's server of its own uid answers 0.5 (the squatter() loop), root's the
 * checksum; 0 when each expectation reaches the server it names. */
static int nobody_picks(const char *name, int a, int b) {
  (void)a, (void)b;
  if (become_nobody()) return 50;
  int32_t ids[2] = {3, 9};
  uint32_t cu[2] = {0, 2};
  vr_batch_t bt = {.n_seqs = 1, .token_ids = ids, .cu_seqlens = cu};
  for (int k = 0; k < 2; k++) {
    vr_client_options_t o;
    vr_client_options_init(&o);
    o.expected_server_uid = k == 0 ? -1 : 0;
    vr_client_t *c = NULL;
    float sc = 0;
    int rc = vr_client_connect(name, &o, &c);
    if (rc == 0) rc = vr_client_score(c, &bt, &sc, NULL, NULL);
    fprintf(stderr, "nobody expecting uid %d: %s (%s) score %g\n", k == 0 ? NOBODY : 0, vr_status_name(rc),
            vr_client_last_error(), sc);
    vr_client_close(c);
    if (rc != 0) return 90 + k;
    if (sc != (k == 0 ? 0.5f : vr_checksum_score(ids, 2))) return 92 + k;
  }
  return 0;
}

/* A user's own server (no /run/verl-reward of its own: /run/user/UID/verl-reward) and root's
 * under the same plain name: a client reaches the one of the uid it expects. */
static void test_user_and_root_servers_same_name(void **state) {
  (void)state;
  struct stat st;
  int made = 0;
  if (stat("/run/user/65534", &st) != 0) {
    assert_true(mkdir("/run/user", 0755) == 0 || errno == EEXIST);
    assert_int_equal(mkdir("/run/user/65534", 0700), 0); /* what logind makes at login */
    assert_int_equal(chown("/run/user/65534", NOBODY, NOBODY), 0);
    made = 1;
  } else if (st.st_uid != NOBODY) {
    skip();
  }
  char name[64];
  tu_name(name, sizeof name, "both");
  tu_server_t s;
  assert_int_equal(tu_server_start(&s, name, (const char *const[]){"--allow-uid", "65534", NULL}), 0);
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t own = fork();
  if (own == 0) _exit(squatter(name, p[1]));
  tu_track_pid(own);
  char r;
  assert_int_equal(tu_read_byte(p[0], &r), 0);
  char path[128];
  snprintf(path, sizeof path, "/run/user/65534/verl-reward/%s.sock", name);
  assert_int_equal(lstat(path, &st), 0);
  int rc = run_child(nobody_picks, name, 0, 0);
  kill(own, SIGKILL);
  waitpid(own, NULL, 0);
  tu_untrack_pid(own);
  tu_server_stop(&s, SIGTERM);
  const char *ext[3] = {"", VR_SHM_SOCK_INFO_EXT, VR_SHM_SOCK_LOCK_EXT};
  for (int k = 0; k < 3; k++) { /* what the killed server left */
    char f[160];
    snprintf(f, sizeof f, "%s%s", path, ext[k]);
    unlink(f);
  }
  rmdir("/run/user/65534/verl-reward");
  if (made) rmdir("/run/user/65534");
  close(p[0]);
  close(p[1]);
  assert_int_equal(rc, 0);
}

/* One uid holds at most --max-lanes-per-uid lanes; others still get theirs. */
static void test_lanes_per_uid(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "cap");
  tu_server_t s;
  /* default with an allow list: half of the 4 lanes */
  assert_int_equal(tu_server_start(&s, name, (const char *const[]){"--lanes", "4", "--allow-uid", "65534", NULL}), 0);
  assert_int_equal(run_child(nobody_lanes, name, 3, 2), 0);
  vr_client_t *c[2];
  assert_int_equal(tu_connect(name, 0, &c[0]), 0); /* root is another uid: its lanes are its own */
  assert_int_equal(tu_connect(name, 0, &c[1]), 0);
  vr_client_close(c[0]);
  vr_client_close(c[1]);
  tu_server_stop(&s, SIGTERM);
  assert_true(tu_log_count(&s, "limit per uid") >= 1);
  /* explicit: 1 */
  char name2[64];
  tu_name(name2, sizeof name2, "cap1");
  assert_int_equal(tu_server_start(&s, name2, (const char *const[]){"--lanes", "4", "--allow-uid", "65534",
                                                                     "--max-lanes-per-uid", "1", NULL}), 0);
  assert_int_equal(run_child(nobody_lanes, name2, 2, 1), 0);
  /* the lane is given back at close: nobody gets one again */
  assert_int_equal(run_child(nobody_lanes, name2, 1, 1), 0);
  tu_server_stop(&s, SIGTERM);
}

int main(void) {
  if (geteuid() != 0) {
    printf("not root: cannot switch to another uid; skipped (exit 77)\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_other_uid_refused_unless_allowed),
                                     cmocka_unit_test(test_squatted_name_refused),
                                     cmocka_unit_test(test_plain_name_not_squattable),
                                     cmocka_unit_test(test_socket_dir_checked),
                                     cmocka_unit_test(test_non_root_server),
                                     cmocka_unit_test(test_user_and_root_servers_same_name),
                                     cmocka_unit_test(test_lanes_per_uid)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
