/* verl-shm-bench: transport benchmark of the shm channel (no model: the
 * server scores with the checksum function, so only the channel is measured).
 *
 *   verl-shm-bench [--json FILE] [--samples N] [--seconds S] [--max-clients K]
 *
 * 1. round trip of one request (1 sequence of 64 tokens), one client, through
 *    a real server process: spin mode (client and server busy-poll) and park
 *    mode (spin 0: both sleep on the futex doorbells at once); p50/p99/p99.9;
 * 2. the same payload over a Unix-domain stream socket to an echo/score
 *    process (the kernel-IPC baseline);
 * 3. aggregated sequences/s with 1..K client processes, each keeping 4
 *    batches of 64 sequences x 64 tokens in flight (default spin budgets);
 * 4. the time of one vr_client_connect (handshake, lane memfd, checks, maps),
 *    samples/1000 rounds (at least 2) of 8 connects into 8 free lanes.
 * JSON keys: spin_rtt_us, park_rtt_us, uds_rtt_us, connect_us ({p50,p99,p999}), seq_per_s
 * ({"1": .., "2": ..}), plus the parameters. Numbers only; no pass/fail. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "verl_reward/client.h"
#include "vr_cli.h"
#include "vr_checksum.h"
#include "vr_log.h"
#include "vr_shm.h"
#include "vr_time.h"

#define SEQ_TOKENS 64
#define TP_SEQS 64
#define TP_DEPTH 4

typedef struct pct {
  double p50, p99, p999;
} pct_t;

/* The one file-scope global here: the server process's SIGTERM flag (a
 * signal handler can reach nothing else; volatile sig_atomic_t, written only
 * by on_term). */
static volatile sig_atomic_t g_stop;
static void on_term(int sig) {
  (void)sig;
  g_stop = 1;
}

/* ---- the server process: poll, checksum, complete, on one thread ---- */

static int server_main(const char *name, uint32_t spin_us) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, NULL);
  vr_shm_config_t cfg;
  vr_shm_config_init(&cfg);
  cfg.name = name;
  cfg.n_lanes = 8;
  cfg.spin_us = spin_us;
  vr_shm_server_t *s;
  if (vr_shm_server_create(&cfg, &s) != 0) return 1;
  vr_shm_server_set_state(s, VR_SHM_READY);
  vr_shm_request_t q[64];
  float scores[1024];
  while (!g_stop) {
    int n = vr_shm_server_poll(s, q, 64, 50000);
    for (int k = 0; k < n; k++) {
      uint64_t t0 = vr_now_ns();
      for (uint32_t i = 0; i < q[k].n_seqs; i++)
        scores[i] = vr_checksum_score(q[k].token_ids + q[k].cu_seqlens[i], q[k].cu_seqlens[i + 1] - q[k].cu_seqlens[i]);
      vr_shm_server_complete(s, &q[k], 0, scores, NULL, 0, NULL, NULL, (uint32_t)((t0 - q[k].accepted_ns) / 1000),
                             (uint32_t)((vr_now_ns() - t0) / 1000));
    }
  }
  vr_shm_server_destroy(s);
  return 0;
}

static pid_t start_server(const char *name, uint32_t spin_us) {
  pid_t pid = fork();
  if (pid == 0) _exit(server_main(name, spin_us));
  return pid;
}

static void stop_pid(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
}

static int connect_client(const char *name, uint32_t spin_us, vr_client_t **c) {
  vr_client_options_t o;
  vr_client_options_init(&o);
  o.connect_timeout_us = 10000000;
  o.spin_us = spin_us;
  int rc = vr_client_connect(name, &o, c);
  if (rc) fprintf(stderr, "verl-shm-bench: connect %s: %s\n", name, vr_client_last_error());
  return rc;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static pct_t percentiles(uint64_t *ns, int n) {
  qsort(ns, (size_t)n, sizeof *ns, cmp_u64);
  pct_t p;
  p.p50 = (double)ns[n / 2] / 1e3;
  p.p99 = (double)ns[(int)((double)n * 0.99)] / 1e3;
  p.p999 = (double)ns[(int)((double)n * 0.999)] / 1e3;
  return p;
}

/* Connect cost: rounds of 8 connects (timed one by one: the handshake, a fresh sealed lane
 * memfd, the checks and maps) into the server's 8 lanes, closed, then a pause of 250 ms so
 * that the server has freed them (its liveness beat) before the next round. */
static int connect_time(const char *name, int rounds, pct_t *out) {
  pid_t srv = start_server(name, 50);
  vr_client_t *c;
  if (connect_client(name, 50, &c)) { /* waits for the server to come up */
    stop_pid(srv);
    return 1;
  }
  vr_client_close(c);
  uint64_t *ns = calloc((size_t)rounds * 8, sizeof *ns);
  int n = 0, rc = 0;
  for (int r = 0; r < rounds && !rc; r++) {
    struct timespec pause = {0, 250000000};
    nanosleep(&pause, NULL);
    vr_client_t *cs[8] = {0};
    for (int k = 0; k < 8 && !rc; k++) {
      uint64_t t0 = vr_now_ns();
      rc = connect_client(name, 50, &cs[k]);
      ns[n++] = vr_now_ns() - t0;
    }
    for (int k = 0; k < 8; k++) vr_client_close(cs[k]);
  }
  stop_pid(srv);
  if (!rc) *out = percentiles(ns, n);
  free(ns);
  return rc;
}

static void fill_tokens(int32_t *ids, int n, uint32_t seed) {
  for (int i = 0; i < n; i++) ids[i] = (int32_t)((seed * 2654435761u + (uint32_t)i * 40503u) % 151000u);
}

/* ---- 1. shm round trip ---- */

static int shm_rtt(const char *name, uint32_t spin_us, int samples, pct_t *out) {
  pid_t srv = start_server(name, spin_us);
  vr_client_t *c;
  if (connect_client(name, spin_us, &c) != 0) {
    stop_pid(srv);
    return 1;
  }
  int32_t ids[SEQ_TOKENS];
  uint32_t cu[2] = {0, SEQ_TOKENS};
  vr_batch_t b = {.n_seqs = 1, .token_ids = ids, .cu_seqlens = cu};
  uint64_t *ns = malloc(sizeof *ns * (size_t)samples);
  int rc = 0;
  for (int i = -samples / 10; i < samples && !rc; i++) {
    fill_tokens(ids, SEQ_TOKENS, (uint32_t)(i + samples));
    float sc;
    uint64_t t0 = vr_now_ns();
    rc = vr_client_score(c, &b, &sc, NULL, NULL);
    uint64_t t1 = vr_now_ns();
    if (!rc && sc != vr_checksum_score(ids, SEQ_TOKENS)) rc = VR_ERR_INTERNAL;
    if (i >= 0) ns[i] = t1 - t0;
  }
  if (rc) fprintf(stderr, "verl-shm-bench: score: %s (%s)\n", vr_status_name(rc), vr_client_last_error());
  else *out = percentiles(ns, samples);
  free(ns);
  vr_client_close(c);
  stop_pid(srv);
  return rc != 0;
}

/* ---- 2. Unix-domain socket baseline ---- */

static int full_io(int fd, void *buf, size_t n, int wr) {
  uint8_t *p = buf;
  while (n) {
    ssize_t k = wr ? write(fd, p, n) : read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static int uds_rtt(int samples, pct_t *out) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    /* request: uint32 n_tokens + ids; response: float score */
    for (;;) {
      uint32_t n;
      int32_t ids[SEQ_TOKENS];
      if (full_io(sv[1], &n, 4, 0) || n > SEQ_TOKENS || full_io(sv[1], ids, 4u * n, 0)) _exit(0);
      float sc = vr_checksum_score(ids, n);
      if (full_io(sv[1], &sc, 4, 1)) _exit(0);
    }
  }
  close(sv[1]);
  uint64_t *ns = malloc(sizeof *ns * (size_t)samples);
  int rc = 0;
  struct {
    uint32_t n;
    int32_t ids[SEQ_TOKENS];
  } req;
  req.n = SEQ_TOKENS;
  for (int i = -samples / 10; i < samples && !rc; i++) {
    fill_tokens(req.ids, SEQ_TOKENS, (uint32_t)(i + samples));
    float sc;
    uint64_t t0 = vr_now_ns();
    rc = full_io(sv[0], &req, sizeof req, 1) || full_io(sv[0], &sc, 4, 0);
    uint64_t t1 = vr_now_ns();
    if (!rc && sc != vr_checksum_score(req.ids, SEQ_TOKENS)) rc = 1;
    if (i >= 0) ns[i] = t1 - t0;
  }
  if (!rc) *out = percentiles(ns, samples);
  free(ns);
  close(sv[0]);
  waitpid(pid, NULL, 0);
  return rc;
}

/* ---- 3. throughput with k client processes ---- */

static int tp_client(const char *name, uint64_t start, uint64_t end, int fd) {
  vr_client_t *c;
  if (connect_client(name, 50, &c) != 0) return 1;
  int32_t ids[TP_SEQS * SEQ_TOKENS];
  uint32_t cu[TP_SEQS + 1];
  for (int i = 0; i <= TP_SEQS; i++) cu[i] = (uint32_t)(i * SEQ_TOKENS);
  fill_tokens(ids, TP_SEQS * SEQ_TOKENS, (uint32_t)getpid());
  vr_batch_t b = {.n_seqs = TP_SEQS, .token_ids = ids, .cu_seqlens = cu};
  uint64_t id[TP_DEPTH], seqs = 0;
  float sc[TP_SEQS];
  while (vr_now_ns() < start) usleep(100);
  for (int k = 0; k < TP_DEPTH; k++)
    if (vr_client_submit(c, &b, &id[k]) != 0) return 2;
  /* count the sequences answered inside the common window [start, end) */
  int k = 0;
  for (;;) {
    if (vr_client_wait(c, id[k], 10000000, sc, NULL, NULL) != 0) return 3;
    if (vr_now_ns() >= end) break;
    seqs += TP_SEQS;
    if (vr_client_submit(c, &b, &id[k]) != 0) return 4;
    k = (k + 1) % TP_DEPTH;
  }
  for (int j = 1; j < TP_DEPTH; j++) vr_client_wait(c, id[(k + j) % TP_DEPTH], 10000000, sc, NULL, NULL);
  if (sc[0] != vr_checksum_score(ids, SEQ_TOKENS)) return 5;
  vr_client_close(c);
  return write(fd, &seqs, sizeof seqs) == (ssize_t)sizeof seqs ? 0 : 6;
}

/* All k clients run in the same window; the rate is their total over it. */
static double throughput(const char *name, int k, double seconds) {
  pid_t srv = start_server(name, 50);
  vr_client_t *probe;
  if (connect_client(name, 0, &probe) != 0) {
    stop_pid(srv);
    return -1;
  }
  vr_client_close(probe);
  int p[2];
  if (pipe(p) != 0) return -1;
  uint64_t start = vr_now_ns() + 300000000ull, end = start + (uint64_t)(seconds * 1e9);
  pid_t kids[16];
  for (int i = 0; i < k; i++) {
    kids[i] = fork();
    if (kids[i] == 0) _exit(tp_client(name, start, end, p[1]));
  }
  uint64_t sum = 0;
  int ok = 1;
  for (int i = 0; i < k; i++) {
    int st;
    waitpid(kids[i], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ok = 0;
  }
  close(p[1]);
  uint64_t n;
  while (read(p[0], &n, sizeof n) == (ssize_t)sizeof n) sum += n;
  close(p[0]);
  stop_pid(srv);
  return ok ? (double)sum / ((double)(end - start) / 1e9) : -1;
}

int main(int argc, char **argv) {
  const char *json = NULL;
  int samples = 20000, max_clients = 4;
  double seconds = 2.0;
  static const char prog[] = "verl-shm-bench";
  static const struct option lo[] = {{"json", required_argument, 0, 'j'},     {"samples", required_argument, 0, 'n'},
                                     {"seconds", required_argument, 0, 's'},  {"max-clients", required_argument, 0, 'k'},
                                     {"version", no_argument, 0, 'V'},        {"help", no_argument, 0, 'h'},
                                     {0, 0, 0, 0}};
  uint64_t v;
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
    switch (c) {
      case 'j': json = optarg; break;
      case 'n':
        if (vr_cli_parse_u64(prog, "--samples", optarg, 100, 100000000, &v)) return VR_EXIT_USAGE;
        samples = (int)v;
        break;
      case 's':
        if (vr_cli_parse_double(prog, "--seconds", optarg, 0.01, 3600, &seconds)) return VR_EXIT_USAGE;
        break;
      case 'k':
        if (vr_cli_parse_u64(prog, "--max-clients", optarg, 1, 16, &v)) return VR_EXIT_USAGE;
        max_clients = (int)v;
        break;
      case 'V': vr_cli_version(stdout, prog, NULL); return 0;
      case 'h':
        printf("usage: verl-shm-bench [--json FILE] [--samples N] [--seconds S] [--max-clients K]\n"
               "       verl-shm-bench --version | --help\n"
               "Round-trip latency of the shm channel (spin, park) against a Unix socket, and throughput with\n"
               "1..K client processes (defaults: 20000 samples, 2 s per point, 4 clients; K at most 16).\n");
        return 0;
      default: return vr_cli_getopt_error(prog, c, argv, optind, optopt);
    }
  }
  if (optind < argc) return vr_cli_usage_error(prog, "unexpected argument '%s'", argv[optind]);
  if (!getenv("VR_LOG_LEVEL")) vr_log_set_level(VR_LOG_WARN); /* no per-lane info lines in the output */
  char name[64];
  snprintf(name, sizeof name, "verl_shm_bench_%d", (int)getpid());
  pct_t spin, park, uds;
  printf("verl-shm-bench: %d samples of 1 x %d tokens, throughput %d x %d tokens x %d in flight, %.1f s per point\n",
         samples, SEQ_TOKENS, TP_SEQS, SEQ_TOKENS, TP_DEPTH, seconds);
  if (shm_rtt(name, 1000000, samples, &spin)) return 1;
  printf("shm spin RTT us: p50 %.2f  p99 %.2f  p99.9 %.2f\n", spin.p50, spin.p99, spin.p999);
  if (shm_rtt(name, 0, samples, &park)) return 1;
  printf("shm park RTT us: p50 %.2f  p99 %.2f  p99.9 %.2f\n", park.p50, park.p99, park.p999);
  if (uds_rtt(samples, &uds)) return 1;
  printf("uds RTT us:      p50 %.2f  p99 %.2f  p99.9 %.2f\n", uds.p50, uds.p99, uds.p999);
  pct_t conn;
  int rounds = samples / 1000 < 2 ? 2 : samples / 1000;
  if (connect_time(name, rounds, &conn)) return 1;
  printf("shm connect us:  p50 %.2f  p99 %.2f  p99.9 %.2f (%d connects)\n", conn.p50, conn.p99, conn.p999,
         rounds * 8);
  double tp[17];
  for (int k = 1; k <= max_clients; k++) {
    tp[k] = throughput(name, k, seconds);
    if (tp[k] < 0) return 1;
    printf("%d client(s): %.0f sequences/s\n", k, tp[k]);
  }
  if (json) {
    FILE *f = fopen(json, "w");
    if (!f) {
      perror(json);
      return 1;
    }
    fprintf(f, "{\n  \"spin_rtt_us\": {\"p50\": %.3f, \"p99\": %.3f, \"p999\": %.3f},\n", spin.p50, spin.p99, spin.p999);
    fprintf(f, "  \"park_rtt_us\": {\"p50\": %.3f, \"p99\": %.3f, \"p999\": %.3f},\n", park.p50, park.p99, park.p999);
    fprintf(f, "  \"uds_rtt_us\": {\"p50\": %.3f, \"p99\": %.3f, \"p999\": %.3f},\n", uds.p50, uds.p99, uds.p999);
    fprintf(f, "  \"connect_us\": {\"p50\": %.3f, \"p99\": %.3f, \"p999\": %.3f, \"n\": %d},\n", conn.p50, conn.p99,
            conn.p999, rounds * 8);
    fprintf(f, "  \"seq_per_s\": {");
    for (int k = 1; k <= max_clients; k++) fprintf(f, "%s\"%d\": %.0f", k > 1 ? ", " : "", k, tp[k]);
    fprintf(f, "},\n  \"samples\": %d, \"seq_tokens\": %d, \"batch_seqs\": %d, \"in_flight\": %d, \"seconds\": %.1f,\n",
            samples, SEQ_TOKENS, TP_SEQS, TP_DEPTH, seconds);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    fprintf(f, "  \"cpus\": %ld\n}\n", cpus);
    fclose(f);
  }
  return 0;
}
