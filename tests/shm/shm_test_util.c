/* shm_test_util.c: see shm_test_util.h. */
#define _GNU_SOURCE
#include "shm_test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vr_checksum.h"
#include "vr_time.h"

#define MAX_TRACKED 256
static pid_t g_pids[MAX_TRACKED];
static char g_names[32][64];
static int g_n_names;
static int g_registered;
static pid_t g_owner;

static void cleanup(void) {
  if (getpid() != g_owner) return; /* a forked child that called exit() */
  for (int i = 0; i < MAX_TRACKED; i++)
    if (g_pids[i] > 0) {
      kill(g_pids[i], SIGKILL);
      waitpid(g_pids[i], NULL, 0);
      g_pids[i] = 0;
    }
  for (int i = 0; i < g_n_names; i++) { /* what a killed server left behind */
    vr_shm_addr_t a;
    char why[256], p[VR_SHM_ADDR_MAX + 8];
    if (vr_shm_resolve(g_names[i], NULL, -1, 1, &a, why, sizeof why) != 0 || a.abstract) continue;
    const char *ext[3] = {"", VR_SHM_SOCK_INFO_EXT, VR_SHM_SOCK_LOCK_EXT};
    for (int k = 0; k < 3; k++) {
      snprintf(p, sizeof p, "%s%s", a.path, ext[k]);
      unlink(p);
    }
  }
}

static void ensure_registered(void) {
  if (g_registered) return;
  g_registered = 1;
  g_owner = getpid();
  atexit(cleanup);
}

void tu_track_pid(pid_t pid) {
  ensure_registered();
  for (int i = 0; i < MAX_TRACKED; i++)
    if (g_pids[i] == 0) {
      g_pids[i] = pid;
      return;
    }
}

void tu_untrack_pid(pid_t pid) {
  for (int i = 0; i < MAX_TRACKED; i++)
    if (g_pids[i] == pid) g_pids[i] = 0;
}

void tu_name(char *buf, size_t n, const char *tag) {
  ensure_registered();
  snprintf(buf, n, "vrt_%s_%d", tag, (int)getpid());
  if (g_n_names < 32) snprintf(g_names[g_n_names++], sizeof g_names[0], "%s", buf);
  /* a fresh log per name (a restarted server appends to it) */
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char log[256];
  snprintf(log, sizeof log, "%s/%s.log", tmp, buf);
  unlink(log);
}

int tu_connect(const char *name, uint32_t spin_us, vr_client_t **out) {
  vr_client_options_t o;
  vr_client_options_init(&o);
  o.connect_timeout_us = TU_HANG_GUARD_US;
  o.spin_us = spin_us;
  return vr_client_connect(name, &o, out);
}

int tu_server_start(tu_server_t *s, const char *name, const char *const *extra) {
  ensure_registered();
  memset(s, 0, sizeof *s);
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(s->name, sizeof s->name, "%s", name);
  snprintf(s->stats, sizeof s->stats, "%s/%s.stats", tmp, name);
  snprintf(s->log, sizeof s->log, "%s/%s.log", tmp, name);
  unlink(s->stats);
  const char *argv[64];
  int k = 0;
  argv[k++] = VR_SHM_TEST_SERVER;
  argv[k++] = "--name";
  argv[k++] = name;
  argv[k++] = "--stats";
  argv[k++] = s->stats;
  for (int i = 0; extra && extra[i] && k < 62; i++) argv[k++] = extra[i];
  argv[k] = NULL;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  s->pid = pid;
  tu_track_pid(pid);
  vr_client_t *c = NULL;
  if (tu_connect(name, 0, &c) != 0) {
    fprintf(stderr, "server %s did not come up: %s (log %s)\n", name, vr_client_last_error(), s->log);
    return -1;
  }
  vr_client_close(c);
  return 0;
}

int tu_server_stop(tu_server_t *s, int sig) {
  int st = -1;
  if (s->pid <= 0) return st;
  kill(s->pid, sig);
  waitpid(s->pid, &st, 0);
  tu_untrack_pid(s->pid);
  s->pid = 0;
  return st;
}

int tu_server_stat(const tu_server_t *s, const char *key, uint64_t *v) {
  FILE *f = fopen(s->stats, "r");
  if (!f) return -1;
  char k[64];
  unsigned long long x;
  int rc = -1;
  while (fscanf(f, "%63s %llu", k, &x) == 2)
    if (!strcmp(k, key)) {
      *v = x;
      rc = 0;
    }
  fclose(f);
  return rc;
}

int tu_read_byte(int fd, char *byte) {
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  int rc;
  while ((rc = poll(&pf, 1, (int)(TU_HANG_GUARD_US / 1000))) < 0 && errno == EINTR) {
  }
  if (rc != 1) {
    fprintf(stderr, "no byte on fd %d within %u s\n", fd, TU_HANG_GUARD_US / 1000000);
    return -1;
  }
  return read(fd, byte, 1) == 1 ? 0 : -1;
}

int tu_log_count(const tu_server_t *s, const char *needle) {
  FILE *f = fopen(s->log, "r");
  if (!f) return 0;
  char line[4096];
  int n = 0;
  while (fgets(line, sizeof line, f))
    if (strstr(line, needle)) n++;
  fclose(f);
  return n;
}

uint64_t tu_rand(uint64_t *s) {
  *s += 0x9e3779b97f4a7c15ull;
  return vr_checksum_mix64(*s);
}

void tu_batch_random(tu_batch_t *tb, uint64_t *rng, uint32_t n_seqs, uint32_t min_len, uint32_t max_len,
                     uint32_t vocab) {
  tb->cu = malloc(sizeof(uint32_t) * (n_seqs + 1));
  tb->cu[0] = 0;
  for (uint32_t i = 0; i < n_seqs; i++)
    tb->cu[i + 1] = tb->cu[i] + min_len + (uint32_t)(tu_rand(rng) % (max_len - min_len + 1));
  tb->ids = malloc(sizeof(int32_t) * (tb->cu[n_seqs] ? tb->cu[n_seqs] : 1));
  for (uint32_t t = 0; t < tb->cu[n_seqs]; t++) tb->ids[t] = (int32_t)(tu_rand(rng) % (vocab ? vocab : 1u << 30));
  memset(&tb->b, 0, sizeof tb->b);
  tb->b.n_seqs = n_seqs;
  tb->b.token_ids = tb->ids;
  tb->b.cu_seqlens = tb->cu;
}

void tu_batch_free(tu_batch_t *tb) {
  free(tb->ids);
  free(tb->cu);
  memset(tb, 0, sizeof *tb);
}

uint32_t tu_batch_mismatches(const tu_batch_t *tb, const float *scores) {
  uint32_t bad = 0;
  for (uint32_t i = 0; i < tb->b.n_seqs; i++) {
    float want = vr_checksum_score(tb->ids + tb->cu[i], tb->cu[i + 1] - tb->cu[i]);
    if (scores[i] != want) bad++;
  }
  return bad;
}

static volatile sig_atomic_t g_usr1;
static void on_usr1(int sig) {
  (void)sig;
  g_usr1 = 1;
}

void tu_stop_on_usr1(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, NULL);
}

int tu_score_until_usr1(const char *name, uint64_t seed, uint32_t max_seqs, uint32_t max_len, int ready_fd) {
  vr_client_t *c;
  if (tu_connect(name, 0, &c) != 0) return 10;
  uint64_t rng = seed, n = 0;
  float *sc = malloc(sizeof(float) * max_seqs);
  while (!g_usr1) {
    tu_batch_t tb;
    tu_batch_random(&tb, &rng, 1 + (uint32_t)(tu_rand(&rng) % max_seqs), 1, max_len, 0);
    int rc = vr_client_score(c, &tb.b, sc, NULL, NULL);
    if (rc || tu_batch_mismatches(&tb, sc)) {
      fprintf(stderr, "client %llu: batch %llu: %s %s\n", (unsigned long long)seed, (unsigned long long)n,
              vr_status_name(rc), vr_client_last_error());
      return 11;
    }
    tu_batch_free(&tb);
    if (n++ == 0 && ready_fd >= 0 && write(ready_fd, "r", 1) != 1) return 13;
  }
  free(sc);
  vr_client_close(c);
  fprintf(stderr, "client %llu: %llu batches scored\n", (unsigned long long)seed, (unsigned long long)n);
  return n ? 0 : 12;
}

void tu_shm_config(vr_shm_config_t *cfg, const char *name, uint32_t n_lanes, uint64_t arena_bytes) {
  vr_shm_config_init(cfg);
  cfg->name = name;
  cfg->n_lanes = n_lanes;
  cfg->arena_bytes = arena_bytes;
}

int tu_receive_fds(const char *name, int fds[3]) {
  struct sockaddr_un sa;
  unsigned len;
  char why[256];
  vr_shm_addr_t a;
  if (vr_shm_resolve(name, NULL, -1, 0, &a, why, sizeof why) != 0) return -1;
  vr_shm_sockaddr(&a, 0, &sa, &len);
  int sk = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sk < 0 || connect(sk, (struct sockaddr *)&sa, len) != 0) {
    if (sk >= 0) close(sk);
    return -1;
  }
  vr_shm_hello_t hello;
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(3 * sizeof(int))];
  } ctl;
  struct iovec iov = {&hello, sizeof hello};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
  ssize_t got = recvmsg(sk, &mh, MSG_WAITALL | MSG_CMSG_CLOEXEC);
  close(sk);
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  if (got != (ssize_t)sizeof hello) return -1;
  if (!cm || cm->cmsg_type != SCM_RIGHTS) return 0;
  int n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
  if (n > 3) n = 3;
  memcpy(fds, CMSG_DATA(cm), sizeof(int) * (size_t)n);
  return n;
}

int tu_server_wait_stat(const tu_server_t *s, const char *key, uint64_t want, double *took) {
  const double max_s = TU_HANG_GUARD_US / 1e6;
  uint64_t t0 = vr_now_ns(), v = ~0ull;
  while ((double)(vr_now_ns() - t0) / 1e9 < max_s) {
    if (tu_server_stat(s, key, &v) == 0 && v == want) {
      if (took) *took = (double)(vr_now_ns() - t0) / 1e9;
      return 0;
    }
    usleep(20000);
  }
  fprintf(stderr, "stat %s stayed at %llu (want %llu) for %.1f s\n", key, (unsigned long long)v,
          (unsigned long long)want, max_s);
  return -1;
}
