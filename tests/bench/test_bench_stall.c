/* test_bench_stall.c: coordinated-omission correction against a real stall.
 *
 * A real verl-reward-server (checksum scorer, CPU) is driven by the bench in
 * open loop at RATE req/s for DURATION s. In the middle of the measured window
 * the test freezes the server with SIGSTOP for STALL ms, then SIGCONT.
 * Requests whose intended send time falls inside the stall wait for it, so
 * with latency measured from the intended send time the k-th largest latency
 * is about STALL - k/RATE: the top fraction f of N = RATE*DURATION requests
 * lies above STALL - f*DURATION. Expected here: max ~ 300 ms, p99 ~ 280 ms,
 * p90 ~ 100 ms. A bench that measured from the actual send (coordinated
 * omission) would see the stall in only the few requests in flight, and its
 * p90 would stay near the unstalled latency.
 * The checks are lower bounds that the real stall guarantees (a slower machine only
 * adds latency) and one upper bound on the median: the same schedule run first without a
 * stall gives this machine's unstalled median, and the stalled run's median must stay within
 * half the stall of it (a bench that added the stall to every request would not). A loaded
 * machine moves both runs alike, so the bound holds on any machine.
 * Run for the shm transport and for HTTP. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "bench_test_util.h"

#define RATE 200.0
#define DURATION 2.0
#define WARMUP 0.3
#define STALL_MS 300.0

/* One open-loop run; stall: freeze the server STALL_MS in the window. Returns the run's p50 (us);
 * base_p50 >= 0: the stalled run's checks against that unstalled median. */
static double stall_run(const char *transport, int stall, double base_p50) {
  char server_bin[1024], bench_bin[1024], shm[64], port_s[16], url[64], json[256];
  snprintf(server_bin, sizeof server_bin, "%s/verl-reward-server", bt_bin_dir());
  snprintf(bench_bin, sizeof bench_bin, "%s/verl-reward-bench", bt_bin_dir());
  snprintf(shm, sizeof shm, "vrb_stall_%d_%s%d", (int)getpid(), transport, stall);
  uint16_t port = bt_free_port();
  assert_true(port > 0);
  snprintf(port_s, sizeof port_s, "%u", port);
  snprintf(url, sizeof url, "127.0.0.1:%u", port);
  snprintf(json, sizeof json, "/tmp/vrb_stall_%d_%s.json", (int)getpid(), transport);
  unlink(json);

  char *srv_argv[] = {server_bin, "--model", "checksum", "--device", "cpu", "--shm-name", shm,
                      "--port", port_s, "--log-level", "warn", "--lanes", "16", "--arena-mb", "1", NULL};
  pid_t srv = bt_spawn(srv_argv);
  assert_true(srv > 0);
  if (!bt_wait_ready(srv, port, 60)) fail_msg("server did not become ready");

  char rate_s[32], dur_s[32], warm_s[32];
  snprintf(rate_s, sizeof rate_s, "%g", RATE);
  snprintf(dur_s, sizeof dur_s, "%g", DURATION);
  snprintf(warm_s, sizeof warm_s, "%g", WARMUP);
  char *bench_argv[] = {bench_bin, "--transport", (char *)transport, "--shm-name", shm, "--url", url,
                        "--rate", rate_s, "--concurrency", "8", "--duration", dur_s, "--warmup", warm_s,
                        "--verify-checksum", "--json", json, "--log-level", "warn", NULL};
  double t0 = bt_now();
  pid_t bench = bt_spawn(bench_argv);
  assert_true(bench > 0);
  /* wait until the bench's clients are sending (the server counted an answer: warm-up has
   * begun), so a slow start cannot move the stall out of the window; then freeze the server
   * ~0.8 s into the measured window */
  double base = bt_metric_sum(port, "verl_reward_requests_total");
  assert_true(base >= 0);
  while (bt_metric_sum(port, "verl_reward_requests_total") <= base) {
    if (bt_now() - t0 > 60) fail_msg("the bench sent nothing within 60 s (a hang guard)");
    usleep(5000);
  }
  usleep((useconds_t)((WARMUP + 0.8) * 1e6));
  double stalled_ms = 0;
  if (stall) {
    assert_int_equal(kill(srv, SIGSTOP), 0);
    double t_stop = bt_now();
    usleep((useconds_t)(STALL_MS * 1000));
    assert_int_equal(kill(srv, SIGCONT), 0);
    stalled_ms = (bt_now() - t_stop) * 1000;
  }
  int rc = bt_wait(bench, 60);
  fprintf(stderr, "[%s] bench exit %d after %.2f s; server frozen %.0f ms\n", transport, rc,
          bt_now() - t0, stalled_ms);
  assert_int_equal(rc, 0);
  assert_int_equal(bt_stop(srv, 20), 0);

  cJSON *j = bt_read_json(json);
  if (!j) fail_msg("no JSON in %s", json);
  char *txt = cJSON_Print(j);
  fprintf(stderr, "%s\n", txt);
  cJSON_free(txt);
  double p50 = bt_num(j, "latency_us.p50"), p90 = bt_num(j, "latency_us.p90");
  double p99 = bt_num(j, "latency_us.p99"), mx = bt_num(j, "latency_us.max");
  double n = bt_num(j, "requests"), errors = bt_num(j, "errors");
  double stall_us = STALL_MS * 1000;
  assert_true(errors == 0);
  /* the schedule held RATE*DURATION requests; all were sent */
  assert_true(fabs(n - RATE * DURATION) <= 2);
  assert_true(bt_num(j, "unsent") == 0);
  if (!stall) {
    cJSON_Delete(j);
    unlink(json);
    return p50;
  }
  /* max: the first request scheduled in the stall waited all of it */
  if (!(mx >= 0.9 * stall_us)) fail_msg("max %.0f us < 90%% of the %.0f us stall", mx, stall_us);
  /* p99 ~ stall - 0.01*DURATION = 280 ms; p90 ~ stall - 0.1*DURATION = 100 ms */
  double want99 = stall_us - 0.01 * DURATION * 1e6, want90 = stall_us - 0.10 * DURATION * 1e6;
  if (!(p99 >= 0.7 * want99)) fail_msg("p99 %.0f us, CO-correct value ~%.0f us", p99, want99);
  if (!(p90 >= 0.5 * want90)) fail_msg("p90 %.0f us, CO-correct value ~%.0f us", p90, want90);
  /* and the median stays this machine's normal latency: the stall is a tail, not a shift */
  if (!(p50 < base_p50 + 0.5 * stall_us))
    fail_msg("p50 %.0f us, unstalled %.0f us: the %.0f us stall shifted the median", p50, base_p50, stall_us);
  cJSON_Delete(j);
  unlink(json);
  return p50;
}

static void test_stall_shm(void **state) {
  (void)state;
  stall_run("shm", 1, stall_run("shm", 0, -1));
}

static void test_stall_http(void **state) {
  (void)state;
  stall_run("http", 1, stall_run("http", 0, -1));
}

int main(void) {
  atexit(bt_cleanup);
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_stall_shm), cmocka_unit_test(test_stall_http)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
