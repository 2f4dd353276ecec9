/* verl-reward-bench: load tester for verl-reward-server.
 *
 * Runs one measurement per (transport, concurrency, rate) combination against
 * one server (given by --shm-name / --url, or spawned with --spawn-server),
 * prints a table and writes --json / --csv / --plot. Exit status: 0 when every
 * run completed without errors, 1 when any request failed (or scores did not
 * verify, or a spawned server did not stop cleanly), 2 on bad usage or when a
 * run could not take place. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "verl_reward/protocol.h"
#include "verl_reward/status.h"
#include "vr_bench_http.h"
#include "vr_bench_report.h"
#include "vr_bench_run.h"
#include "vr_bench_spawn.h"
#include "vr_checksum.h"
#include "vr_cli.h"
#include "vr_log.h"

#define MAX_LIST 32
#define DEFAULT_VOCAB 32000u /* when the server has no vocabulary (checksum scorer) */

typedef struct bench_opts {
  vr_transport_t transports[3];
  int n_transports;
  uint32_t conc[MAX_LIST];
  int n_conc;
  double rates[MAX_LIST];
  int n_rates;
  int poisson, procs, verify;
  double duration_s, warmup_s, ready_timeout_s;
  uint64_t requests, seed;
  uint32_t batch, vocab;
  vr_len_dist_t len;
  const char *input, *json, *csv, *plot, *spawn, *server_bin, *server_log, *shm_name, *url;
  int64_t timeout_us;
  int64_t spin_us;
} bench_opts_t;

static void usage(FILE *f) {
  fprintf(f,
    "usage: verl-reward-bench [options]    (verl-reward-bench --version | --help)\n"
    "server:\n"
    "  --shm-name NAME          shared-memory segment (default verl_reward_shm)\n"
    "  --url HOST:PORT          HTTP address for http/http-msgpack (default 127.0.0.1:8080)\n"
    "  --spawn-server \"ARGS\"    start build/bin/verl-reward-server ARGS on a fresh shm name and\n"
    "                           port, wait for /ready, run, stop it (SIGTERM)\n"
    "  --server-bin PATH        server binary for --spawn-server (default: next to this binary)\n"
    "  --server-log FILE        the spawned server's stdout+stderr (default $TMPDIR or /tmp,\n"
    "                           /vrbench_PID_N.log; its last lines are shown if it fails to start)\n"
    "  --ready-timeout S        how long to wait for /ready (default 120)\n"
    "load:\n"
    "  --transport LIST         shm,http,http-msgpack (default shm); several = side by side\n"
    "  --concurrency LIST       clients, e.g. 1,2,4,8 (default 1); each client has its own lane /\n"
    "                           connection; in open loop: the most requests in flight (default 16)\n"
    "  --procs                  clients are processes instead of threads\n"
    "  --rate LIST              open loop at R requests/s (several = sweep); latency is measured\n"
    "                           from the intended send time (no coordinated omission)\n"
    "  --arrival constant|poisson  open-loop inter-arrival times (default constant)\n"
    "  --duration S             measured seconds per run (default 10)\n"
    "  --warmup S               unrecorded seconds before each run (default 1)\n"
    "  --requests N             measure N requests instead of a duration\n"
    "  --timeout-ms MS          per-request timeout (default 30000)\n"
    "  --spin-us US             shm client busy-poll before parking (default: the library's, 50)\n"
    "workload:\n"
    "  --batch K                sequences per request (default 1)\n"
    "  --lengths DIST           fixed:L | uniform:A-B | lognormal:MEAN,SIGMA (default fixed:128)\n"
    "  --input FILE.jsonl       real token ids: one JSON array (or {\"input_ids\": ...}) per line\n"
    "  --vocab N                draw token ids below N (default: the server's vocab_size,\n"
    "                           %u when the server has none)\n"
    "  --seed N                 workload seed (default 1)\n"
    "  --verify-checksum        check every score against the checksum scorer (server --model checksum)\n"
    "output:\n"
    "  --json FILE  --csv FILE   ('-' = stdout)\n"
    "  --plot FILE.svg|FILE.png latency panels per transport + a throughput panel; .png also\n"
    "                           writes FILE.svg and needs rsvg-convert (librsvg2-bin)\n"
    "  --log-level LEVEL        trace|debug|info|warn|error (default info)\n",
    DEFAULT_VOCAB);
}

#define PROG "verl-reward-bench"

/* "1,2,4" -> values; 0 or -1 (message printed). */
static int parse_list(const char *s, const char *what, double *out, int *n, int integer) {
  *n = 0;
  const char *p = s;
  while (*p) {
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (errno || end == p || !(v > 0) || !isfinite(v) || (integer && (v != floor(v) || v > 4096)) ||
        (*end && *end != ',') || *n >= MAX_LIST) {
      vr_cli_usage_error(PROG, "%s '%s': not a list of positive %s (comma-separated, at most %d)", what, s,
                         integer ? "integers <= 4096" : "numbers", MAX_LIST);
      return -1;
    }
    out[(*n)++] = v;
    p = *end ? end + 1 : end;
  }
  if (*n == 0) {
    vr_cli_usage_error(PROG, "%s '': an empty list", what);
    return -1;
  }
  return 0;
}

static int parse_num(const char *s, const char *what, double lo, double hi, double *out) {
  return vr_cli_parse_double(PROG, what, s, lo, hi, out) ? -1 : 0;
}

/* Verification against the checksum scorer. The JSON transport prints floats
 * in decimal; 1e-6 absolute keeps that exact enough while any corrupted id,
 * length or misrouted response changes the checksum by far more. */
static uint32_t verify_checksum(const vr_reqbuf_t *r, const float *scores) {
  uint32_t bad = 0;
  for (uint32_t i = 0; i < r->n_seqs; i++) {
    float want = vr_checksum_score(r->ids + r->cu[i], r->cu[i + 1] - r->cu[i]);
    if (!(fabsf(scores[i] - want) <= 1e-6f)) bad++;
  }
  return bad;
}

/* The server binary next to our own (build/bin/verl-reward-bench -> build/bin/verl-reward-server). */
static void default_server_bin(char *buf, size_t n) {
  char self[4096];
  ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (k <= 0) {
    snprintf(buf, n, "verl-reward-server");
    return;
  }
  self[k] = 0;
  char *slash = strrchr(self, '/');
  if (slash) *slash = 0;
  snprintf(buf, n, "%.4000s/verl-reward-server", self);
}

static int parse_args(int argc, char **argv, bench_opts_t *o) {
  enum { O_SHM = 256, O_URL, O_SPAWN, O_SRVBIN, O_READY, O_TRANSPORT, O_CONC, O_PROCS, O_RATE, O_ARRIVAL,
         O_DUR, O_WARM, O_REQS, O_TIMEOUT, O_BATCH, O_LENS, O_INPUT, O_VOCAB, O_SEED, O_VERIFY, O_JSON,
         O_CSV, O_PLOT, O_LOG, O_SPIN, O_HELP, O_VERSION, O_SRVLOG };
  static const struct option lo[] = {
      {"shm-name", 1, 0, O_SHM}, {"url", 1, 0, O_URL}, {"spawn-server", 1, 0, O_SPAWN},
      {"server-bin", 1, 0, O_SRVBIN}, {"ready-timeout", 1, 0, O_READY}, {"transport", 1, 0, O_TRANSPORT},
      {"concurrency", 1, 0, O_CONC}, {"procs", 0, 0, O_PROCS}, {"rate", 1, 0, O_RATE},
      {"arrival", 1, 0, O_ARRIVAL}, {"duration", 1, 0, O_DUR}, {"warmup", 1, 0, O_WARM},
      {"requests", 1, 0, O_REQS}, {"timeout-ms", 1, 0, O_TIMEOUT}, {"batch", 1, 0, O_BATCH},
      {"lengths", 1, 0, O_LENS}, {"input", 1, 0, O_INPUT}, {"vocab", 1, 0, O_VOCAB}, {"seed", 1, 0, O_SEED},
      {"verify-checksum", 0, 0, O_VERIFY}, {"json", 1, 0, O_JSON}, {"csv", 1, 0, O_CSV},
      {"plot", 1, 0, O_PLOT}, {"log-level", 1, 0, O_LOG}, {"spin-us", 1, 0, O_SPIN}, {"help", 0, 0, O_HELP},
      {"version", 0, 0, O_VERSION}, {"server-log", 1, 0, O_SRVLOG}, {0, 0, 0, 0}};
  memset(o, 0, sizeof(*o));
  o->transports[0] = VR_TR_SHM;
  o->n_transports = 1;
  o->duration_s = 10;
  o->warmup_s = 1;
  o->ready_timeout_s = 120;
  o->seed = 1;
  o->batch = 1;
  o->timeout_us = 30000000;
  o->spin_us = -1;
  o->shm_name = "verl_reward_shm";
  o->url = "127.0.0.1:8080";
  vr_len_dist_parse("fixed:128", &o->len);
  double tmp[MAX_LIST], v;
  int c, n;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
    switch (c) {
    case O_SHM: o->shm_name = optarg; break;
    case O_URL: o->url = optarg; break;
    case O_SPAWN: o->spawn = optarg; break;
    case O_SRVBIN: o->server_bin = optarg; break;
    case O_SRVLOG: o->server_log = optarg; break;
    case O_READY: if (parse_num(optarg, "--ready-timeout", 0.1, 86400, &o->ready_timeout_s)) return -1; break;
    case O_TRANSPORT: {
      o->n_transports = 0;
      char buf[256];
      snprintf(buf, sizeof(buf), "%s", optarg);
      for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->n_transports == 3 || vr_transport_parse(t, &o->transports[o->n_transports])) {
          vr_cli_usage_error(PROG, "--transport '%s': at most three of shm, http, http-msgpack", optarg);
          return -1;
        }
        o->n_transports++;
      }
      if (!o->n_transports) {
        vr_cli_usage_error(PROG, "--transport '%s': an empty list", optarg);
        return -1;
      }
      break;
    }
    case O_CONC:
      if (parse_list(optarg, "--concurrency", tmp, &n, 1)) return -1;
      for (int i = 0; i < n; i++) o->conc[i] = (uint32_t)tmp[i];
      o->n_conc = n;
      break;
    case O_PROCS: o->procs = 1; break;
    case O_RATE: if (parse_list(optarg, "--rate", o->rates, &o->n_rates, 0)) return -1; break;
    case O_ARRIVAL:
      if (strcmp(optarg, "poisson") == 0) o->poisson = 1;
      else if (strcmp(optarg, "constant") == 0) o->poisson = 0;
      else {
        vr_cli_usage_error(PROG, "--arrival '%s' is not constant or poisson", optarg);
        return -1;
      }
      break;
    case O_DUR: if (parse_num(optarg, "--duration", 0.01, 86400, &o->duration_s)) return -1; break;
    case O_WARM: if (parse_num(optarg, "--warmup", 0, 3600, &o->warmup_s)) return -1; break;
    case O_REQS: if (parse_num(optarg, "--requests", 1, 1e12, &v)) return -1; o->requests = (uint64_t)v; break;
    case O_TIMEOUT: if (parse_num(optarg, "--timeout-ms", 1, 3600000, &v)) return -1; o->timeout_us = (int64_t)(v * 1000); break;
    case O_SPIN: if (parse_num(optarg, "--spin-us", 0, 1000000, &v)) return -1; o->spin_us = (int64_t)v; break;
    case O_BATCH: if (parse_num(optarg, "--batch", 1, 1 << 20, &v)) return -1; o->batch = (uint32_t)v; break;
    case O_LENS:
      if (vr_len_dist_parse(optarg, &o->len)) {
        vr_cli_usage_error(PROG, "--lengths '%s' is not a length distribution", optarg);
        return -1;
      }
      break;
    case O_INPUT: o->input = optarg; break;
    case O_VOCAB: if (parse_num(optarg, "--vocab", 1, INT32_MAX, &v)) return -1; o->vocab = (uint32_t)v; break;
    case O_SEED: if (parse_num(optarg, "--seed", 0, 1e18, &v)) return -1; o->seed = (uint64_t)v; break;
    case O_VERIFY: o->verify = 1; break;
    case O_JSON: o->json = optarg; break;
    case O_CSV: o->csv = optarg; break;
    case O_PLOT: {
      size_t pl = strlen(optarg);
      if (pl > 4 && strcasecmp(optarg + pl - 4, ".png") == 0 && !vr_report_png_available()) {
        vr_cli_usage_error(PROG, "--plot %s: PNG needs rsvg-convert, not on PATH. HINT: apt-get install librsvg2-bin, "
                           "or --plot FILE.svg", optarg);
        return -1;
      }
      o->plot = optarg;
      break;
    }
    case O_LOG: {
      vr_log_level_t lv;
      if (vr_log_level_parse(optarg, &lv)) {
        vr_cli_usage_error(PROG, "--log-level '%s' is not trace|debug|info|warn|error|fatal|off", optarg);
        return -1;
      }
      vr_log_set_level(lv);
      break;
    }
    case O_HELP: case 'h': usage(stdout); exit(0);
    case O_VERSION: vr_cli_version(stdout, PROG, NULL); exit(0);
    default:
      vr_cli_getopt_error(PROG, c, argv, optind, optopt);
      return -1;
    }
  }
  if (optind < argc) {
    vr_cli_usage_error(PROG, "unexpected argument '%s'", argv[optind]);
    return -1;
  }
  char path[300], why[200];
  if (vr_shm_path(o->shm_name, path, sizeof path, why, sizeof why) != 0) {
    vr_cli_usage_error(PROG, "--shm-name '%s': %s", o->shm_name, why);
    return -1;
  }
  if (!o->n_conc) {
    o->conc[0] = o->n_rates ? 16 : 1;
    o->n_conc = 1;
  }
  return 0;
}

/* Reads the server's vocabulary / limits over the first transport and fits the workload to them. */
static int fit_workload(const bench_opts_t *o, const vr_target_t *tg, vr_workload_t *wl) {
  vr_conn_t *c = NULL;
  vr_server_info_t si;
  int rc = vr_conn_open(o->transports[0], tg, &c);
  if (rc == 0) {
    rc = vr_conn_server_info(c, &si);
    if (rc != 0) vr_log(VR_LOG_ERROR, "cannot read the server's limits: %s", vr_conn_last_error(c));
  }
  vr_conn_close(c);
  if (rc != 0) return rc;
  vr_log(VR_LOG_INFO, "server: vocab_size %u, max_seq_len %u, max_seqs_per_request %u", si.vocab_size,
         si.max_seq_len, si.max_seqs_per_request);
  if (o->vocab && si.vocab_size && o->vocab > si.vocab_size) {
    vr_log(VR_LOG_ERROR, "--vocab %u exceeds the server's vocab_size %u", o->vocab, si.vocab_size);
    return VR_ERR_INVAL;
  }
  wl->vocab = o->vocab ? o->vocab : si.vocab_size ? si.vocab_size : DEFAULT_VOCAB;
  wl->max_seq_len = si.max_seq_len;
  if (si.max_seqs_per_request && o->batch > si.max_seqs_per_request) {
    vr_log(VR_LOG_ERROR, "--batch %u exceeds the server's max_seqs_per_request %u", o->batch,
           si.max_seqs_per_request);
    return VR_ERR_TOO_LARGE;
  }
  /* generated lengths are clamped to max_seq_len (vr_workload_next); say so when the request reaches past it */
  if (o->len.kind != VR_LEN_LOGNORMAL && si.max_seq_len && o->len.b > si.max_seq_len && !o->input) {
    char d[64];
    vr_len_dist_format(&o->len, d, sizeof d);
    vr_log(VR_LOG_WARN,
           "--lengths %s reaches %u tokens, beyond the server's max_seq_len %u: longer sequences are clamped to "
           "%u tokens (HINT: --lengths fixed:%u, or a uniform/lognormal range below %u, to measure an unclamped "
           "workload)",
           d, o->len.b, si.max_seq_len, si.max_seq_len, si.max_seq_len, si.max_seq_len);
  }
  if (o->input) return vr_workload_load_jsonl(wl, o->input);
  return 0;
}

int main(int argc, char **argv) {
  bench_opts_t o;
  if (parse_args(argc, argv, &o) != 0) return 2;
  char cmdline[2048];
  size_t off = 0;
  for (int i = 0; i < argc && off < sizeof(cmdline) - 1; i++)
    off += (size_t)snprintf(cmdline + off, sizeof(cmdline) - off, "%s%s", i ? " " : "", argv[i]);

  vr_target_t tg;
  memset(&tg, 0, sizeof(tg));
  tg.timeout_us = o.timeout_us;
  tg.connect_timeout_us = 5000000;
  tg.spin_us = o.spin_us;
  vr_spawned_t srv = {0};
  if (o.spawn) {
    char bin[4096];
    if (o.server_bin) snprintf(bin, sizeof(bin), "%s", o.server_bin);
    else default_server_bin(bin, sizeof(bin));
    /* every shm client leases a lane (+1 for reading the limits): make sure the spawned server
     * has enough of them unless the arguments say otherwise */
    uint32_t max_conc = 0;
    for (int i = 0; i < o.n_conc; i++) max_conc = o.conc[i] > max_conc ? o.conc[i] : max_conc;
    char spawn_args[4096];
    if (max_conc + 1 > 32 && !strstr(o.spawn, "--lanes"))
      snprintf(spawn_args, sizeof(spawn_args), "%s --lanes %u", o.spawn, max_conc + 1);
    else
      snprintf(spawn_args, sizeof(spawn_args), "%s", o.spawn);
    if (vr_spawn_server(bin, spawn_args, o.server_log, o.ready_timeout_s, &srv) != 0) return 2;
    snprintf(tg.shm_name, sizeof(tg.shm_name), "%s", srv.shm_name);
    snprintf(tg.host, sizeof(tg.host), "127.0.0.1");
    tg.port = srv.port;
  } else {
    snprintf(tg.shm_name, sizeof(tg.shm_name), "%s", o.shm_name);
    int need_http = 0;
    for (int i = 0; i < o.n_transports; i++) need_http |= o.transports[i] != VR_TR_SHM;
    if (need_http && vr_http_parse_url(o.url, tg.host, sizeof(tg.host), &tg.port)) return 2;
  }

  int exit_code = 0;
  vr_workload_t wl = {.batch = o.batch, .len = o.len};
  size_t n_runs = (size_t)o.n_transports * (size_t)o.n_conc * (size_t)(o.n_rates ? o.n_rates : 1);
  vr_run_result_t *res = calloc(n_runs, sizeof(*res));
  size_t done = 0;
  if (!res || fit_workload(&o, &tg, &wl) != 0) {
    exit_code = 2;
    goto out;
  }
  char wdesc[256], dist[64];
  vr_len_dist_format(&o.len, dist, sizeof(dist));
  char span[64];
  if (o.requests) snprintf(span, sizeof(span), "%llu requests", (unsigned long long)o.requests);
  else snprintf(span, sizeof(span), "%gs", o.duration_s);
  snprintf(wdesc, sizeof(wdesc), "batch %u x %s%s%s, vocab %u, %s + %gs warm-up per run, client %s",
           o.batch, o.input ? "input " : "", o.input ? o.input : dist, o.input ? "" : " tokens",
           wl.vocab, span, o.warmup_s, o.procs ? "processes" : "threads");
  vr_report_meta_t meta = {.command_line = cmdline, .workload = wdesc, .batch = o.batch};
  for (int t = 0; t < o.n_transports; t++) {
    for (int ci = 0; ci < o.n_conc; ci++) {
      for (int ri = 0; ri < (o.n_rates ? o.n_rates : 1); ri++) {
        vr_run_cfg_t cfg = {
            .transport = o.transports[t], .target = tg, .concurrency = o.conc[ci], .procs = o.procs,
            .rate = o.n_rates ? o.rates[ri] : 0.0, .poisson = o.poisson, .duration_s = o.duration_s,
            .warmup_s = o.warmup_s, .requests = o.requests, .wl = &wl,
            .verify = o.verify ? verify_checksum : NULL, .seed = o.seed};
        if (cfg.rate > 0)
          vr_log(VR_LOG_INFO, "run: %s, open loop at %g req/s (%s), up to %u in flight",
                 vr_transport_name(cfg.transport), cfg.rate, cfg.poisson ? "poisson" : "constant",
                 cfg.concurrency);
        else
          vr_log(VR_LOG_INFO, "run: %s, closed loop, %u clients", vr_transport_name(cfg.transport),
                 cfg.concurrency);
        if (vr_run(&cfg, &res[done]) != 0) {
          exit_code = 2;
          goto report;
        }
        vr_run_result_t *r = &res[done++];
        if (r->errors || r->warmup_errors || r->verify_failures) exit_code = 1;
      }
    }
  }
report:
  if (done) {
    vr_report_table(stdout, &meta, res, done);
    if (o.json && vr_report_json(o.json, &meta, res, done, n_runs > 1)) exit_code = exit_code ? exit_code : 1;
    if (o.csv && vr_report_csv(o.csv, &meta, res, done)) exit_code = exit_code ? exit_code : 1;
    if (o.plot) {
      size_t pl = strlen(o.plot);
      int png = pl > 4 && strcasecmp(o.plot + pl - 4, ".png") == 0;
      char svg[4096];
      snprintf(svg, sizeof svg, "%.*s.svg", (int)(png ? pl - 4 : pl), o.plot);
      if (png ? vr_report_png(o.plot, svg, &meta, res, done) : vr_report_svg(o.plot, &meta, res, done))
        exit_code = exit_code ? exit_code : 1;
    }
  }
out:
  if (o.spawn && srv.pid > 0 && vr_spawn_stop(&srv, 15.0) != 0) {
    vr_log(VR_LOG_ERROR, "the spawned server did not stop cleanly");
    if (!exit_code) exit_code = 1;
  }
  vr_workload_free(&wl);
  free(res);
  return exit_code;
}
