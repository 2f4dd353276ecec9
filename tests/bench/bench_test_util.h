/* bench_test_util.h: helpers for the bench's black-box tests (header-only):
 * run a program with a deadline, start/stop a real verl-reward-server on a
 * unique shm name + free port, read JSON output. Every child a test starts is
 * killed by bt_cleanup(), which the tests register with atexit() so nothing
 * is left behind even when an assertion fails. */
#ifndef BENCH_TEST_UTIL_H
#define BENCH_TEST_UTIL_H

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vr_bench_http.h"

/* The servers' segment: 16 lanes of 1 MiB instead of the default 32 x 4 MiB (about 130 MiB
 * of /dev/shm, allocated at start), so they fit a small /dev/shm next to other tests. */
#define BT_SERVER_SEGMENT "--lanes 16 --arena-mb 1"

#define BT_MAX_CHILDREN 16
static pid_t bt_children[BT_MAX_CHILDREN];

static inline void bt_cleanup(void) {
  for (int i = 0; i < BT_MAX_CHILDREN; i++) {
    if (bt_children[i] > 0) {
      kill(bt_children[i], SIGCONT);
      kill(bt_children[i], SIGKILL);
      waitpid(bt_children[i], NULL, 0);
      bt_children[i] = 0;
    }
  }
}

static inline void bt_track(pid_t pid) {
  for (int i = 0; i < BT_MAX_CHILDREN; i++)
    if (bt_children[i] == 0) {
      bt_children[i] = pid;
      return;
    }
}

static inline void bt_untrack(pid_t pid) {
  for (int i = 0; i < BT_MAX_CHILDREN; i++)
    if (bt_children[i] == pid) bt_children[i] = 0;
}

static inline double bt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline pid_t bt_spawn(char *const argv[]) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    execv(argv[0], argv);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  if (pid > 0) bt_track(pid);
  return pid;
}

/* Waits for pid up to timeout_s; returns its exit status (0..255), 128+sig if
 * killed by a signal, or -1 on timeout (the child is then killed). */
static inline int bt_wait(pid_t pid, double timeout_s) {
  double end = bt_now() + timeout_s;
  int st;
  for (;;) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    if (w < 0 || bt_now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      bt_untrack(pid);
      fprintf(stderr, "child %d did not finish within %.0f s: killed\n", (int)pid, timeout_s);
      return -1;
    }
    usleep(10000);
  }
  bt_untrack(pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Runs argv to completion; returns what bt_wait returns. */
static inline int bt_run(char *const argv[], double timeout_s) {
  pid_t pid = bt_spawn(argv);
  if (pid < 0) return -1;
  return bt_wait(pid, timeout_s);
}

static inline uint16_t bt_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof(a);
  uint16_t port = 0;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &al) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

static inline const char *bt_bin_dir(void) {
  const char *d = getenv("VR_BIN_DIR");
  return d && *d ? d : "build/bin";
}

/* Polls GET /ready until 200 (1) or the deadline / the server's exit (0). */
static inline int bt_wait_ready(pid_t server, uint16_t port, double timeout_s) {
  vr_http_t *h = NULL;
  if (vr_http_open("127.0.0.1", port, 500000, &h) != 0) return 0;
  double end = bt_now() + timeout_s;
  int ok = 0;
  while (bt_now() < end) {
    int st;
    if (waitpid(server, &st, WNOHANG) == server) {
      bt_untrack(server);
      fprintf(stderr, "server exited before it was ready (status 0x%x)\n", st);
      break;
    }
    int code = 0;
    if (vr_http_request(h, "GET", "/ready", NULL, NULL, 0, &code, NULL, NULL) == 0 && code == 200) {
      ok = 1;
      break;
    }
    usleep(50000);
  }
  vr_http_close(h);
  return ok;
}

/* Sum of every sample of a Prometheus metric family in GET /metrics (lines
 * "NAME{labels} VALUE" or "NAME VALUE"); -1 when /metrics cannot be read. */
static inline double bt_metric_sum(uint16_t port, const char *name) {
  vr_http_t *h = NULL;
  if (vr_http_open("127.0.0.1", port, 1000000, &h) != 0) return -1;
  int code = 0;
  const uint8_t *body = NULL;
  size_t len = 0;
  double sum = -1;
  if (vr_http_request(h, "GET", "/metrics", NULL, NULL, 0, &code, &body, &len) == 0 && code == 200) {
    sum = 0;
    size_t n = strlen(name);
    for (const char *line = (const char *)body; line && *line;) {
      const char *nl = strchr(line, '\n');
      if (strncmp(line, name, n) == 0 && (line[n] == '{' || line[n] == ' ')) {
        const char *sp = memchr(line, ' ', nl ? (size_t)(nl - line) : strlen(line));
        if (sp) sum += strtod(sp + 1, NULL);
      }
      line = nl ? nl + 1 : NULL;
    }
  }
  vr_http_close(h);
  return sum;
}

/* SIGTERM, then bt_wait: the server's exit status (0 = clean). */
static inline int bt_stop(pid_t pid, double timeout_s) {
  kill(pid, SIGCONT);
  kill(pid, SIGTERM);
  return bt_wait(pid, timeout_s);
}

static inline cJSON *bt_read_json(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  char *buf = NULL;
  size_t cap = 0, len = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 65536;
      char *p = realloc(buf, cap);
      if (!p) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = p;
    }
    size_t k = fread(buf + len, 1, 4096, f);
    len += k;
    if (k == 0) break;
  }
  fclose(f);
  cJSON *j = buf ? cJSON_ParseWithLength(buf, len) : NULL;
  free(buf);
  return j;
}

/* Number at a dotted path ("latency_us.p99"); NAN when missing / not a number. */
static inline double bt_num(const cJSON *o, const char *path) {
  char key[64];
  const char *p = path;
  while (o) {
    const char *dot = strchr(p, '.');
    size_t n = dot ? (size_t)(dot - p) : strlen(p);
    if (n >= sizeof(key)) return NAN;
    memcpy(key, p, n);
    key[n] = 0;
    o = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!dot) break;
    p = dot + 1;
  }
  return cJSON_IsNumber(o) ? o->valuedouble : NAN;
}

#endif
