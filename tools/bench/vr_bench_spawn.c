/* vr_bench_spawn.c: see vr_bench_spawn.h. */
#include "vr_bench_spawn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "verl_reward/status.h"
#include "vr_bench_http.h"
#include "vr_log.h"
#include "vr_time.h"

/* The one file-scope global here: the pid of the spawned server, for the
 * fatal-signal handler (which can reach nothing else); volatile sig_atomic_t. */
static volatile sig_atomic_t g_child = 0;

static void on_fatal_signal(int sig) {
  if (g_child > 0) kill((pid_t)g_child, SIGTERM);
  signal(sig, SIG_DFL);
  raise(sig);
}

void vr_split_free(char **argv) {
  if (!argv) return;
  for (char **p = argv; *p; p++) free(*p);
  free(argv);
}

int vr_split_args(const char *s, char ***argv_out, int *argc_out) {
  size_t len = strlen(s);
  char **argv = calloc(len / 2 + 2, sizeof(char *)); /* at most len/2+1 words */
  char *word = malloc(len + 1);
  if (!argv || !word) {
    free(argv);
    free(word);
    return VR_ERR_NOMEM;
  }
  int argc = 0;
  const char *p = s;
  for (;;) {
    while (*p == ' ' || *p == '\t' || *p == '\n') p++;
    if (!*p) break;
    size_t w = 0;
    while (*p && *p != ' ' && *p != '\t' && *p != '\n') {
      if (*p == '\'' || *p == '"') {
        char q = *p++;
        while (*p && *p != q) word[w++] = *p++;
        if (*p != q) {
          vr_log(VR_LOG_ERROR, "unbalanced %c quote in '%s'", q, s);
          free(word);
          argv[argc] = NULL;
          vr_split_free(argv);
          return VR_ERR_PARSE;
        }
        p++;
      } else {
        word[w++] = *p++;
      }
    }
    word[w] = 0;
    argv[argc] = strdup(word);
    if (!argv[argc]) {
      free(word);
      vr_split_free(argv);
      return VR_ERR_NOMEM;
    }
    argc++;
  }
  argv[argc] = NULL;
  free(word);
  *argv_out = argv;
  *argc_out = argc;
  return 0;
}

/* A port the kernel considers free right now (bind :0). The server binds it a
 * moment later; a collision in between makes the server fail to start, which
 * is reported, never silently ignored. */
static int free_port(uint16_t *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return VR_ERR_IO;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof(a);
  int rc = VR_ERR_IO;
  if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr *)&a, &al) == 0) {
    *port = ntohs(a.sin_port);
    rc = 0;
  }
  close(fd);
  return rc;
}

/* Logs the last lines of the spawned server's log (why it exited or never got ready). */
static void log_tail(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return;
  char buf[2048];
  long end = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : 0;
  long from = end > (long)sizeof buf - 1 ? end - (long)sizeof buf + 1 : 0;
  size_t n = fseek(f, from, SEEK_SET) == 0 ? fread(buf, 1, sizeof buf - 1, f) : 0;
  fclose(f);
  buf[n] = 0;
  char *p = buf;
  if (from > 0 && (p = strchr(buf, '\n')) != NULL) p++; /* start at a whole line */
  if (!p || !*p) return;
  vr_log(VR_LOG_ERROR, "the server's log %s ends:\n%s", path, p);
}

static void log_exit(pid_t pid, int st) {
  if (WIFEXITED(st))
    vr_log(VR_LOG_ERROR, "server (pid %d) exited with status %d", (int)pid, WEXITSTATUS(st));
  else if (WIFSIGNALED(st))
    vr_log(VR_LOG_ERROR, "server (pid %d) killed by signal %d", (int)pid, WTERMSIG(st));
}

int vr_spawn_server(const char *server_bin, const char *args, const char *log_path, double ready_timeout_s,
                    vr_spawned_t *out) {
  static unsigned seq = 0; /* segment names stay unique across calls in one process (callers: one thread) */
  memset(out, 0, sizeof(*out));
  snprintf(out->shm_name, sizeof(out->shm_name), "vrbench_%d_%u", (int)getpid(), seq++);
  const char *tmp = getenv("TMPDIR");
  if (log_path) snprintf(out->log_path, sizeof(out->log_path), "%s", log_path);
  else snprintf(out->log_path, sizeof(out->log_path), "%s/%s.log", tmp && *tmp ? tmp : "/tmp", out->shm_name);
  int log_fd = open(out->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    vr_log(VR_LOG_ERROR, "cannot write the server's log %s: %s. HINT: --server-log FILE", out->log_path,
           strerror(errno));
    return VR_ERR_IO;
  }
  if (free_port(&out->port) != 0) {
    vr_log(VR_LOG_ERROR, "cannot find a free TCP port: %s", strerror(errno));
    return VR_ERR_IO;
  }
  char **user = NULL;
  int n_user = 0;
  int rc = vr_split_args(args ? args : "", &user, &n_user);
  if (rc != 0) {
    close(log_fd);
    return rc;
  }
  char port_s[16];
  snprintf(port_s, sizeof(port_s), "%u", out->port);
  const char **argv = calloc((size_t)n_user + 6, sizeof(char *));
  if (!argv) {
    vr_split_free(user);
    close(log_fd);
    return VR_ERR_NOMEM;
  }
  int k = 0;
  argv[k++] = server_bin;
  for (int i = 0; i < n_user; i++) argv[k++] = user[i];
  argv[k++] = "--shm-name";
  argv[k++] = out->shm_name;
  argv[k++] = "--port";
  argv[k++] = port_s;
  argv[k] = NULL;
  if (vr_log_enabled(VR_LOG_INFO)) {
    char line[1024];
    size_t off = 0;
    for (int i = 0; argv[i] && off < sizeof(line) - 1; i++)
      off += (size_t)snprintf(line + off, sizeof(line) - off, "%s%s", i ? " " : "", argv[i]);
    vr_log(VR_LOG_INFO, "spawning: %s (its log: %s)", line, out->log_path);
  }
  pid_t pid = fork();
  if (pid == 0) {
    /* the server must not outlive a bench that dies without cleaning up (SIGKILL, crash) */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() == 1) _exit(127);
    if (dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0) _exit(126);
    execv(server_bin, (char *const *)argv);
    fprintf(stderr, "verl-reward-bench: exec %s: %s\n", server_bin, strerror(errno));
    _exit(127);
  }
  free(argv);
  vr_split_free(user);
  close(log_fd);
  if (pid < 0) {
    vr_log(VR_LOG_ERROR, "fork failed: %s", strerror(errno));
    return VR_ERR_IO;
  }
  out->pid = pid;
  g_child = pid;
  signal(SIGINT, on_fatal_signal);
  signal(SIGTERM, on_fatal_signal);

  vr_http_t *h = NULL;
  if ((rc = vr_http_open("127.0.0.1", out->port, 500000, &h)) != 0) {
    vr_spawn_stop(out, 5.0);
    return rc;
  }
  uint64_t deadline = vr_now_ns() + (uint64_t)(ready_timeout_s * 1e9);
  rc = VR_ERR_TIMEOUT;
  for (;;) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      log_exit(pid, st);
      log_tail(out->log_path);
      out->pid = 0;
      g_child = 0;
      rc = VR_ERR_IO;
      break;
    }
    int code = 0;
    if (vr_http_request(h, "GET", "/ready", NULL, NULL, 0, &code, NULL, NULL) == 0 && code == 200) {
      rc = 0;
      break;
    }
    if (vr_now_ns() > deadline) {
      vr_log(VR_LOG_ERROR, "server not ready after %.0f s (GET /ready on port %u). HINT: --ready-timeout",
             ready_timeout_s, out->port);
      log_tail(out->log_path);
      vr_spawn_stop(out, 5.0);
      break;
    }
    usleep(50000);
  }
  vr_http_close(h);
  if (rc == 0) vr_log(VR_LOG_INFO, "server pid %d ready: shm %s, port %u", (int)pid, out->shm_name, out->port);
  return rc;
}

int vr_spawn_stop(vr_spawned_t *s, double grace_s) {
  if (s->pid <= 0) return VR_ERR_INTERNAL;
  pid_t pid = s->pid;
  kill(pid, SIGTERM);
  uint64_t deadline = vr_now_ns() + (uint64_t)(grace_s * 1e9);
  int st = 0, rc = VR_ERR_INTERNAL;
  for (;;) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) {
      if (WIFEXITED(st) && WEXITSTATUS(st) == 0) rc = 0;
      else log_exit(pid, st);
      break;
    }
    if (w < 0 && errno != EINTR) break;
    if (vr_now_ns() > deadline) {
      vr_log(VR_LOG_ERROR, "server pid %d still running %.0f s after SIGTERM: SIGKILL", (int)pid, grace_s);
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      break;
    }
    usleep(10000);
  }
  s->pid = 0;
  g_child = 0;
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  return rc;
}
