/* test_bench_units.c: the bench's parsers and generators on their own:
 * length distributions (parse + the lengths they generate), token ids inside
 * the vocabulary, the JSONL corpus reader against malformed files, the
 * --spawn-server argument splitter, and server-address parsing. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "verl_reward/status.h"
#include "vr_bench_http.h"
#include "vr_bench_report.h"
#include "vr_bench_spawn.h"
#include "vr_bench_workload.h"
#include "vr_log.h"

static void test_len_parse(void **state) {
  (void)state;
  vr_len_dist_t d;
  assert_int_equal(vr_len_dist_parse("fixed:128", &d), 0);
  assert_int_equal(d.kind, VR_LEN_FIXED);
  assert_int_equal(d.a, 128);
  assert_int_equal(vr_len_dist_parse("uniform:8-48", &d), 0);
  assert_int_equal(d.kind, VR_LEN_UNIFORM);
  assert_int_equal(d.a, 8);
  assert_int_equal(d.b, 48);
  assert_int_equal(vr_len_dist_parse("lognormal:300,0.8", &d), 0);
  assert_int_equal(d.kind, VR_LEN_LOGNORMAL);
  assert_true(d.mean == 300 && d.sigma == 0.8);
  static const char *const bad[] = {"fixed:0", "fixed:", "fixed:12x", "fixed:-3", "uniform:9-8",
                                    "uniform:0-4", "uniform:4", "uniform:4-", "lognormal:0.5,1",
                                    "lognormal:100", "lognormal:100,-1", "lognormal:nan,1",
                                    "normal:5", "", "fixed:99999999999"};
  vr_log_set_level(VR_LOG_OFF);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (vr_len_dist_parse(bad[i], &d) != VR_ERR_PARSE) fail_msg("'%s' accepted", bad[i]);
  vr_log_set_level(VR_LOG_INFO);
}

/* Generated requests: K sequences, lengths inside the distribution's range,
 * ids inside the vocabulary, lognormal mean close to MEAN. */
static void test_generate(void **state) {
  (void)state;
  vr_workload_t w = {.batch = 5, .vocab = 97, .max_seq_len = 0};
  vr_reqbuf_t r;
  vr_reqbuf_init(&r, 42);
  assert_int_equal(vr_len_dist_parse("uniform:3-9", &w.len), 0);
  int seen_lo = 0, seen_hi = 0;
  for (int n = 0; n < 2000; n++) {
    assert_int_equal(vr_workload_next(&w, &r), 0);
    assert_int_equal(r.n_seqs, 5);
    assert_int_equal(r.cu[0], 0);
    assert_int_equal(r.cu[5], r.n_tokens);
    for (uint32_t i = 0; i < 5; i++) {
      uint32_t len = r.cu[i + 1] - r.cu[i];
      assert_true(len >= 3 && len <= 9);
      seen_lo |= len == 3;
      seen_hi |= len == 9;
    }
    for (uint64_t t = 0; t < r.n_tokens; t++) assert_true(r.ids[t] >= 0 && r.ids[t] < 97);
  }
  assert_true(seen_lo && seen_hi);
  /* lognormal: mean length ~ MEAN; clamp to max_seq_len */
  assert_int_equal(vr_len_dist_parse("lognormal:200,0.5", &w.len), 0);
  w.batch = 1;
  double sum = 0;
  int n = 20000;
  for (int k = 0; k < n; k++) {
    assert_int_equal(vr_workload_next(&w, &r), 0);
    sum += (double)r.n_tokens;
  }
  if (fabs(sum / n - 200) > 6) fail_msg("lognormal mean length %.1f, want ~200", sum / n);
  w.max_seq_len = 150;
  for (int k = 0; k < 2000; k++) {
    assert_int_equal(vr_workload_next(&w, &r), 0);
    assert_true(r.n_tokens >= 1 && r.n_tokens <= 150);
  }
  /* same seed, same stream */
  vr_reqbuf_t a, b;
  vr_reqbuf_init(&a, 7);
  vr_reqbuf_init(&b, 7);
  assert_int_equal(vr_workload_next(&w, &a), 0);
  assert_int_equal(vr_workload_next(&w, &b), 0);
  assert_int_equal(a.n_tokens, b.n_tokens);
  assert_memory_equal(a.ids, b.ids, a.n_tokens * sizeof(int32_t));
  vr_reqbuf_free(&a);
  vr_reqbuf_free(&b);
  vr_reqbuf_free(&r);
}

static char g_path[128];

static int load_text(const char *text, uint32_t vocab, uint32_t max_len, vr_workload_t *w) {
  FILE *f = fopen(g_path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  memset(w, 0, sizeof(*w));
  w->batch = 1;
  w->vocab = vocab;
  w->max_seq_len = max_len;
  return vr_workload_load_jsonl(w, g_path);
}

static void test_jsonl(void **state) {
  (void)state;
  vr_workload_t w;
  assert_int_equal(load_text("[1,2,3]\n\n{\"input_ids\": [4,5]}\n{\"input_ids\": [[6],[7,8,9,10]]}\n", 100, 0, &w), 0);
  assert_int_equal(w.corpus_n, 4);
  assert_int_equal(w.corpus_off[4], 10);
  assert_int_equal(w.corpus_ids[9], 10);
  /* requests walk the corpus in order, wrapping around */
  vr_reqbuf_t r;
  vr_reqbuf_init(&r, 0);
  r.corpus_pos = 0;
  w.batch = 3;
  assert_int_equal(vr_workload_next(&w, &r), 0);
  assert_int_equal(r.n_tokens, 3 + 2 + 1);
  assert_int_equal(vr_workload_next(&w, &r), 0);
  assert_int_equal(r.cu[1], 4); /* [7,8,9,10] then wrap to [1,2,3] */
  assert_int_equal(r.ids[4], 1);
  vr_reqbuf_free(&r);
  vr_workload_free(&w);

  vr_log_set_level(VR_LOG_OFF);
  static const struct { const char *text; int want; } bad[] = {
      {"[1,2,3\n", VR_ERR_PARSE},                       /* not JSON */
      {"[1,-2]\n", VR_ERR_PARSE},                       /* negative id */
      {"[1,2.5]\n", VR_ERR_PARSE},                      /* not an integer */
      {"[1,\"a\"]\n", VR_ERR_PARSE},                    /* not a number */
      {"[1,3000000000]\n", VR_ERR_PARSE},               /* beyond int32 */
      {"[]\n", VR_ERR_PARSE},                           /* empty sequence */
      {"{\"ids\": [1]}\n", VR_ERR_PARSE},               /* no input_ids */
      {"{\"input_ids\": [[1], 2]}\n", VR_ERR_PARSE},    /* mixed */
      {"[1,2,100]\n", VR_ERR_TOKEN_RANGE},              /* vocab is 100 */
      {"[1,2,3,4,5,6]\n", VR_ERR_SEQ_TOO_LONG},         /* max_seq_len 5 */
      {"\n\n", VR_ERR_PARSE},                           /* no sequences */
      {"[1,2] [3]\n", VR_ERR_PARSE},                    /* text after the value (cJSON dropped it) */
      {"{\"input_ids\": [1]}{\"input_ids\": [2]}\n", VR_ERR_PARSE}, /* two objects on a line */
      {"{\"input_ids\": [1], \"input_ids\": [2]}\n", VR_ERR_PARSE}, /* input_ids twice */
      {"[1,\f2]\n", VR_ERR_PARSE},                      /* a control byte (cJSON skipped it) */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = load_text(bad[i].text, 100, 5, &w);
    if (rc != bad[i].want) fail_msg("case %zu: got %d, want %d", i, rc, bad[i].want);
    assert_null(w.corpus_ids);
  }
  memset(&w, 0, sizeof(w));
  assert_int_equal(vr_workload_load_jsonl(&w, "/nonexistent/vrb.jsonl"), VR_ERR_IO);
  vr_log_set_level(VR_LOG_INFO);
}

static void test_split_args(void **state) {
  (void)state;
  char **argv;
  int argc;
  assert_int_equal(vr_split_args("  --model 'my dir/m' --device \"cuda:0\"  --x=a'b c'd ", &argv, &argc), 0);
  assert_int_equal(argc, 5);
  assert_string_equal(argv[0], "--model");
  assert_string_equal(argv[1], "my dir/m");
  assert_string_equal(argv[2], "--device");
  assert_string_equal(argv[3], "cuda:0");
  assert_string_equal(argv[4], "--x=ab cd");
  assert_null(argv[5]);
  vr_split_free(argv);
  assert_int_equal(vr_split_args("", &argv, &argc), 0);
  assert_int_equal(argc, 0);
  vr_split_free(argv);
  vr_log_set_level(VR_LOG_OFF);
  assert_int_equal(vr_split_args("--model 'unterminated", &argv, &argc), VR_ERR_PARSE);
  vr_log_set_level(VR_LOG_INFO);
}

/* The percentile support rule: pN needs 10/(1-N/100) samples; min/max need one. */
static void test_pct_supported(void **state) {
  (void)state;
  static const struct { double p; uint64_t need; } t[] = {{50, 20}, {90, 100}, {99, 1000}, {99.9, 10000}, {99.99, 100000}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    if (!vr_report_pct_supported(t[i].p, t[i].need) || vr_report_pct_supported(t[i].p, t[i].need - 1))
      fail_msg("p%g: want support from %llu samples on", t[i].p, (unsigned long long)t[i].need);
  }
  assert_int_equal(vr_report_pct_supported(99.9, 204), 0); /* the plot: p99.9 of 204 samples */
  assert_int_equal(vr_report_pct_supported(100, 1), 1);
  assert_int_equal(vr_report_pct_supported(100, 0), 0);
  assert_int_equal(vr_report_pct_supported(50, 0), 0);
}

static void test_parse_url(void **state) {
  (void)state;
  char host[64];
  uint16_t port;
  assert_int_equal(vr_http_parse_url("127.0.0.1:8080", host, sizeof host, &port), 0);
  assert_string_equal(host, "127.0.0.1");
  assert_int_equal(port, 8080);
  assert_int_equal(vr_http_parse_url("http://reward-host:9000/", host, sizeof host, &port), 0);
  assert_string_equal(host, "reward-host");
  assert_int_equal(port, 9000);
  vr_log_set_level(VR_LOG_OFF);
  static const char *const bad[] = {"localhost", ":80", "host:0", "host:65536", "host:80x", "host:"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (vr_http_parse_url(bad[i], host, sizeof host, &port) == 0) fail_msg("'%s' accepted", bad[i]);
  vr_log_set_level(VR_LOG_INFO);
}

int main(void) {
  snprintf(g_path, sizeof g_path, "/tmp/vrb_units_%d.jsonl", (int)getpid());
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_len_parse), cmocka_unit_test(test_generate), cmocka_unit_test(test_jsonl),
      cmocka_unit_test(test_split_args), cmocka_unit_test(test_parse_url), cmocka_unit_test(test_pct_supported),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  unlink(g_path);
  return rc;
}
