/* test_bench_e2e.c: verl-reward-bench end to end against a real
 * verl-reward-server on the CPU backend, started by the bench itself
 * (--spawn-server), over shm, HTTP JSON and HTTP msgpack.
 *
 * Checks: exit codes (0 clean, 1 when requests fail, 2 on bad usage), the
 * JSON contract (every key of the issue, a list for sweeps, requests =
 * successes + errors, throughput x duration ~ requests, ordered percentiles,
 * seq/tok rates consistent with the workload), CSV and SVG outputs, process
 * clients, --requests, open loop, a real model fixture, and that
 * --verify-checksum catches scores that are not the checksum. */
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "bench_test_util.h"

/* --spawn-server arguments: the checksum scorer on the CPU backend */
#define CHECKSUM_SERVER "--model checksum --device cpu --log-level warn " BT_SERVER_SEGMENT

static char g_bench[1024], g_json[256], g_csv[256], g_svg[256], g_jsonl[256];

static int bench(char **args) {
  char *argv[64];
  int k = 0;
  argv[k++] = g_bench;
  for (int i = 0; args[i] && k < 62; i++) argv[k++] = args[i];
  argv[k++] = "--log-level";
  argv[k++] = "warn";
  argv[k] = NULL;
  return bt_run(argv, 120);
}

/* The keys plus the internal consistency of one run object. */
static void check_run(const cJSON *r, const char *transport, double duration, uint32_t batch,
                      double min_len, double max_len) {
  assert_true(cJSON_IsObject(r));
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "transport");
  assert_true(cJSON_IsString(t));
  if (transport) assert_string_equal(t->valuestring, transport);
  static const char *const keys[] = {"concurrency", "requests", "errors", "throughput.req_s",
                                     "throughput.seq_s", "throughput.tok_s", "latency_us.p50",
                                     "latency_us.p90", "latency_us.p99", "latency_us.p999",
                                     "latency_us.max", "successes", "duration_s"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    if (isnan(bt_num(r, keys[i]))) fail_msg("run JSON lacks numeric \"%s\"", keys[i]);
  double req = bt_num(r, "requests"), ok = bt_num(r, "successes"), err = bt_num(r, "errors");
  assert_true(req > 0);
  assert_true(req == ok + err);
  assert_true(err == 0);
  double req_s = bt_num(r, "throughput.req_s"), d = bt_num(r, "duration_s");
  if (duration > 0) assert_true(fabs(d - duration) < 1e-9);
  if (!(fabs(req_s * d - req) <= 0.02 * req + 1)) fail_msg("req_s %.2f x %.3f s != %.0f requests", req_s, d, req);
  assert_true(fabs(bt_num(r, "throughput.seq_s") - batch * req_s) <= 1e-6 * batch * req_s + 1e-9);
  double tok_per_seq = bt_num(r, "throughput.tok_s") / bt_num(r, "throughput.seq_s");
  if (!(tok_per_seq >= min_len - 1e-9 && tok_per_seq <= max_len + 1e-9))
    fail_msg("tokens per sequence %.2f outside [%g, %g]", tok_per_seq, min_len, max_len);
  double p[5] = {bt_num(r, "latency_us.p50"), bt_num(r, "latency_us.p90"), bt_num(r, "latency_us.p99"),
                 bt_num(r, "latency_us.p999"), bt_num(r, "latency_us.max")};
  assert_true(p[0] > 0);
  for (int i = 1; i < 5; i++) assert_true(p[i] >= p[i - 1]);
  /* closed loop: latency of one request bounds throughput per client from below (Little's law).
   * Open loop measures latency from the intended send time, so a request that waited for a free
   * client counts time no client held it: there the bound does not hold (a loaded machine broke it) */
  const cJSON *mode = cJSON_GetObjectItemCaseSensitive(r, "mode");
  const int open_loop = cJSON_IsString(mode) && strcmp(mode->valuestring, "open") == 0;
  if (!open_loop) assert_true(req_s <= bt_num(r, "concurrency") * 1e6 / p[0] * 1.5 + 1);
  assert_true(bt_num(r, "verify_failures") == 0);
}

static size_t count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = 0;
  int c;
  while ((c = fgetc(f)) != EOF) n += c == '\n';
  fclose(f);
  return n;
}

static void test_checksum_all_transports(void **state) {
  (void)state;
  char *args[] = {"--spawn-server", CHECKSUM_SERVER,
                  "--transport", "shm,http,http-msgpack", "--concurrency", "1,2", "--duration", "0.8",
                  "--warmup", "0.2", "--batch", "3", "--lengths", "uniform:4-64", "--verify-checksum",
                  "--json", g_json, "--csv", g_csv, "--plot", g_svg, NULL};
  assert_int_equal(bench(args), 0);
  cJSON *j = bt_read_json(g_json);
  assert_non_null(j);
  assert_true(cJSON_IsArray(j));
  assert_int_equal(cJSON_GetArraySize(j), 6);
  static const char *const tr[3] = {"shm", "http", "http-msgpack"};
  for (int i = 0; i < 6; i++) {
    const cJSON *r = cJSON_GetArrayItem(j, i);
    check_run(r, tr[i / 2], 0.8, 3, 4, 64);
    assert_true(bt_num(r, "concurrency") == (i % 2 ? 2 : 1));
    /* the checksum scorer reports its (small) compute time; queue + compute < latency */
    assert_true(bt_num(r, "server_us.queue_mean") + bt_num(r, "server_us.compute_mean") <=
                bt_num(r, "latency_us.max"));
  }
  cJSON_Delete(j);
  assert_int_equal(count_lines(g_csv), 7);
  FILE *f = fopen(g_svg, "r");
  assert_non_null(f);
  char head[8] = {0};
  assert_int_equal(fread(head, 1, 4, f), 4);
  fclose(f);
  assert_string_equal(head, "<svg");
}

static void test_procs_requests(void **state) {
  (void)state;
  char *args[] = {"--spawn-server", CHECKSUM_SERVER, "--transport", "shm",
                  "--procs", "--concurrency", "3", "--requests", "150", "--warmup", "0.1",
                  "--batch", "2", "--lengths", "fixed:32", "--verify-checksum", "--json", g_json, NULL};
  assert_int_equal(bench(args), 0);
  cJSON *j = bt_read_json(g_json);
  assert_non_null(j);
  assert_true(cJSON_IsObject(j)); /* one run: one object */
  check_run(j, "shm", -1, 2, 32, 32);
  assert_true(bt_num(j, "requests") == 150);
  cJSON_Delete(j);
}

static void test_open_loop_poisson(void **state) {
  (void)state;
  char *args[] = {"--spawn-server", CHECKSUM_SERVER, "--transport",
                  "http-msgpack", "--rate", "150", "--arrival", "poisson", "--duration", "1", "--warmup",
                  "0.2", "--lengths", "lognormal:40,0.5", "--verify-checksum", "--json", g_json, NULL};
  assert_int_equal(bench(args), 0);
  cJSON *j = bt_read_json(g_json);
  assert_non_null(j);
  check_run(j, "http-msgpack", -1, 1, 1, 8192);
  /* open loop: the window, or longer when the last answers came after it (how much longer
   * depends on the machine; the upper bound only rejects garbage: the bench sends a backlog
   * for at most 5 s past the window, then waits for answers) */
  double d = bt_num(j, "duration_s");
  if (!(d >= 1.0 && d < 60)) fail_msg("open-loop duration_s %.4f, want the 1 s window or a little more", d);
  double n = bt_num(j, "requests");
  /* Poisson count with mean 150: far outside 150 +- 5 sigma would be a broken schedule */
  if (!(n > 150 - 62 && n < 150 + 62)) fail_msg("open loop sent %.0f requests, expected ~150", n);
  const cJSON *mode = cJSON_GetObjectItemCaseSensitive(j, "mode");
  assert_true(cJSON_IsString(mode) && strcmp(mode->valuestring, "open") == 0);
  cJSON_Delete(j);
}

/* --spawn-server arguments for the bert fixture on the CPU backend (vocab 97, 40 positions). */
static void bert_server_args(char *buf, size_t n) {
  const char *fx = getenv("VR_FIXTURES");
  snprintf(buf, n, "--model %s/models/bert --device cpu --threads 1 --log-level warn " BT_SERVER_SEGMENT,
           fx && *fx ? fx : "tests/fixtures");
}

static void test_fixture_model(void **state) {
  (void)state;
  char spawn[1200];
  bert_server_args(spawn, sizeof spawn);
  /* real token ids from a JSONL file (both accepted line shapes); bert's vocab is 97 */
  FILE *f = fopen(g_jsonl, "w");
  assert_non_null(f);
  fprintf(f, "[5, 17, 33, 2, 96, 40]\n{\"input_ids\": [[1, 2, 3, 4], [50, 60, 70, 80, 90, 10, 11, 12]]}\n\n[7, 8]\n");
  fclose(f);
  char *args[] = {"--spawn-server", spawn, "--transport", "shm,http", "--concurrency", "2", "--duration",
                  "0.6", "--warmup", "0.2", "--batch", "2", "--input", g_jsonl, "--json", g_json, NULL};
  assert_int_equal(bench(args), 0);
  cJSON *j = bt_read_json(g_json);
  assert_non_null(j);
  assert_int_equal(cJSON_GetArraySize(j), 2);
  check_run(cJSON_GetArrayItem(j, 0), "shm", 0.6, 2, 2, 8);
  check_run(cJSON_GetArrayItem(j, 1), "http", 0.6, 2, 2, 8);
  assert_true(bt_num(cJSON_GetArrayItem(j, 0), "server_us.compute_mean") > 0);
  cJSON_Delete(j);

  /* ids beyond the model's vocabulary are refused before anything is sent */
  f = fopen(g_jsonl, "w");
  assert_non_null(f);
  fprintf(f, "[1, 2, 97]\n");
  fclose(f);
  char *bad[] = {"--spawn-server", spawn, "--duration", "0.2", "--input", g_jsonl, NULL};
  assert_int_equal(bench(bad), 2);
}

/* Reads a whole file into a malloc'd string ("" when missing). */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  char *buf = calloc(1, 1 << 20);
  assert_non_null(buf);
  if (f) {
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = 0;
    fclose(f);
  }
  return buf;
}

/* The README's bare bench against the llama_gqa fixture (max_seq_len 48): the default
 * lengths (fixed:128) are clamped with a warning instead of failing, and the spawned
 * server's log (here at info: it logs the load and every lane it reclaims) goes to its
 * file, never to the bench's output. */
static void test_clamp_and_server_log(void **state) {
  (void)state;
  const char *fx = getenv("VR_FIXTURES");
  char spawn[1200], log[300], out[300];
  snprintf(spawn, sizeof spawn, "--model %s/models/llama_gqa --device cpu --threads 1 --log-level info " BT_SERVER_SEGMENT,
           fx && *fx ? fx : "tests/fixtures");
  snprintf(log, sizeof log, "/tmp/vrb_e2e_%d_server.log", (int)getpid());
  snprintf(out, sizeof out, "/tmp/vrb_e2e_%d_out.txt", (int)getpid());
  char *argv[] = {g_bench, "--spawn-server", spawn, "--server-log", log, "--transport", "shm", "--concurrency", "2",
                  "--requests", "20", "--warmup", "0", "--json", g_json, NULL};
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(126);
    execv(g_bench, argv);
    _exit(127);
  }
  bt_track(pid);
  assert_int_equal(bt_wait(pid, 120), 0);
  char *text = slurp(out), *srv = slurp(log);
  if (!strstr(text, "clamped to 48 tokens") || !strstr(text, "HINT: --lengths fixed:48"))
    fail_msg("no clamp warning in the bench's output:\n%s", text);
  if (strstr(text, "vr_model_load") || strstr(text, "reclaimed"))
    fail_msg("the server's log reached the bench's output:\n%s", text);
  if (!strstr(srv, "vr_model_load") || !strstr(text, log))
    fail_msg("the server's log is not in %s (or the bench does not name it):\n%s", log, srv);
  cJSON *j = bt_read_json(g_json);
  assert_non_null(j);
  check_run(j, "shm", -1, 1, 48, 48); /* every sequence clamped to exactly 48 tokens */
  cJSON_Delete(j);
  free(text);
  free(srv);
  unlink(out);
  unlink(log);
}

static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

/* --plot: one latency panel per transport plus one throughput panel; with 150 samples per
 * run p50 and p90 are drawn (20 and 100 needed) but not p99 or p99.9 (1000, 10000); a .png
 * path gives the PNG (rsvg-convert) and the SVG beside it. */
static void test_plot_panels(void **state) {
  (void)state;
  char png[300], svg[300];
  snprintf(png, sizeof png, "/tmp/vrb_e2e_%d_plot.png", (int)getpid());
  snprintf(svg, sizeof svg, "/tmp/vrb_e2e_%d_plot.svg", (int)getpid());
  char *args[] = {"--spawn-server", CHECKSUM_SERVER, "--transport", "shm,http", "--concurrency", "1,3",
                  "--requests", "150", "--warmup", "0", "--lengths", "fixed:8", "--plot", png, NULL};
  assert_int_equal(bench(args), 0);
  char *text = slurp(svg);
  assert_int_equal(count_of(text, "<svg"), 1);
  assert_int_equal(count_of(text, "shm: latency percentiles"), 1);
  assert_int_equal(count_of(text, "http: latency percentiles"), 1);
  assert_int_equal(count_of(text, "throughput (successful requests/s)"), 1);
  /* the point tooltips: 2 transports x 2 loads per drawn percentile, none for the others */
  assert_int_equal(count_of(text, " p50 @ "), 4);
  assert_int_equal(count_of(text, " p90 @ "), 4);
  assert_int_equal(count_of(text, " max @ "), 4);
  assert_int_equal(count_of(text, " p99 @ "), 0);
  assert_int_equal(count_of(text, " p99.9 @ "), 0);
  assert_non_null(strstr(text, "150 samples"));
  assert_non_null(strstr(text, "a percentile p needs 10/(1-p) samples"));
  free(text);
  FILE *f = fopen(png, "rb");
  assert_non_null(f);
  unsigned char head[8] = {0};
  assert_int_equal(fread(head, 1, 8, f), 8);
  fclose(f);
  assert_memory_equal(head, "\x89PNG\r\n\x1a\n", 8);
  unlink(png);
  unlink(svg);
}

/* A model's scores are not checksums: --verify-checksum must fail the run. */
static void test_verify_catches_wrong_scores(void **state) {
  (void)state;
  char spawn[1200];
  bert_server_args(spawn, sizeof spawn);
  char *args[] = {"--spawn-server", spawn, "--transport", "http", "--requests", "20", "--warmup", "0",
                  "--lengths", "uniform:2-30", "--verify-checksum", "--json", g_json, NULL};
  assert_int_equal(bench(args), 1);
  cJSON *j = bt_read_json(g_json);
  assert_non_null(j);
  assert_true(bt_num(j, "verify_failures") == 20);
  assert_true(bt_num(j, "errors") == 20);
  assert_true(bt_num(j, "requests") == 20);
  cJSON_Delete(j);
}

static void test_bad_usage(void **state) {
  (void)state;
  char *a1[] = {"--lengths", "fixed:0", NULL};
  assert_int_equal(bench(a1), 2);
  char *a2[] = {"--transport", "carrier-pigeon", NULL};
  assert_int_equal(bench(a2), 2);
  char *a3[] = {"--concurrency", "1,x", NULL};
  assert_int_equal(bench(a3), 2);
  /* no server under this name: cannot run */
  char *a4[] = {"--shm-name", "vrb_e2e_nobody_here", "--duration", "0.1", NULL};
  assert_int_equal(bench(a4), 2);
  /* a server binary that exits at once */
  char *a5[] = {"--spawn-server", "--no-such-flag", "--duration", "0.1", NULL};
  assert_int_equal(bench(a5), 2);
}

int main(void) {
  atexit(bt_cleanup);
  signal(SIGPIPE, SIG_IGN);
  snprintf(g_bench, sizeof g_bench, "%s/verl-reward-bench", bt_bin_dir());
  int pid = (int)getpid();
  snprintf(g_json, sizeof g_json, "/tmp/vrb_e2e_%d.json", pid);
  snprintf(g_csv, sizeof g_csv, "/tmp/vrb_e2e_%d.csv", pid);
  snprintf(g_svg, sizeof g_svg, "/tmp/vrb_e2e_%d.svg", pid);
  snprintf(g_jsonl, sizeof g_jsonl, "/tmp/vrb_e2e_%d.jsonl", pid);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_usage),
      cmocka_unit_test(test_checksum_all_transports),
      cmocka_unit_test(test_procs_requests),
      cmocka_unit_test(test_open_loop_poisson),
      cmocka_unit_test(test_fixture_model),
      cmocka_unit_test(test_verify_catches_wrong_scores),
      cmocka_unit_test(test_clamp_and_server_log),
      cmocka_unit_test(test_plot_panels),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  unlink(g_json);
  unlink(g_csv);
  unlink(g_svg);
  unlink(g_jsonl);
  return rc;
}
