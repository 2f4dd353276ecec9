/* test_bench_hist.c: the bench histogram against exact order statistics.
 *
 * Synthetic latency sets (log-normal, uniform over several decades, a bimodal
 * mix, small exact values) are recorded into per-"client" histograms, merged,
 * and every reported percentile must be within 1% of the exact order statistic
 * of the sorted data (same rank definition: the ceil(p/100 * n)-th smallest). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "vr_bench_hist.h"

static uint64_t rng_state = 0x1234567887654321ull;
static double urand(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (double)((rng_state * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
}
static double nrand(void) { return sqrt(-2.0 * log1p(-urand())) * cos(2.0 * M_PI * urand()); }

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static uint64_t exact_pct(const uint64_t *sorted, size_t n, double p) {
  size_t rank = (size_t)ceil(p / 100.0 * (double)n);
  if (rank < 1) rank = 1;
  if (rank > n) rank = n;
  return sorted[rank - 1];
}

/* Records v[] across 8 histograms, merges, compares percentiles. */
static void check_set(uint64_t *v, size_t n) {
  enum { CLIENTS = 8 };
  vr_hist_t *h = calloc(CLIENTS + 1, sizeof(vr_hist_t));
  assert_non_null(h);
  for (int c = 0; c <= CLIENTS; c++) vr_hist_init(&h[c]);
  for (size_t i = 0; i < n; i++) vr_hist_record(&h[i % CLIENTS], v[i]);
  for (int c = 0; c < CLIENTS; c++) vr_hist_merge(&h[CLIENTS], &h[c]);
  const vr_hist_t *m = &h[CLIENTS];
  assert_int_equal(m->count, n);
  qsort(v, n, sizeof(uint64_t), cmp_u64);
  assert_int_equal(m->min, v[0]);
  assert_int_equal(m->max, v[n - 1]);
  static const double ps[] = {0.1, 1, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.99, 100};
  for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
    uint64_t want = exact_pct(v, n, ps[k]);
    uint64_t got = vr_hist_percentile(m, ps[k]);
    double rel = fabs((double)got - (double)want) / (double)(want ? want : 1);
    if (rel > 0.01) fail_msg("p%g: histogram %llu, exact %llu (rel err %.4f > 1%%)", ps[k],
                             (unsigned long long)got, (unsigned long long)want, rel);
  }
  double mean = 0;
  for (size_t i = 0; i < n; i++) mean += (double)v[i];
  mean /= (double)n;
  assert_true(fabs(vr_hist_mean(m) - mean) <= 1e-9 * mean + 1e-9);
  free(h);
}

/* Generators of synthetic latency sets (nanoseconds). */
static uint64_t gen_lognormal(size_t i) { (void)i; return (uint64_t)exp(log(250000.0) + 1.2 * nrand()); } /* ~250 us */
static uint64_t gen_wide(size_t i) { (void)i; return (uint64_t)pow(10.0, 2.0 + 9.0 * urand()); } /* 100 ns .. 100 s */
/* 99% fast (~50 us), 1% stalled (300 ms): the shape coordinated omission hides */
static uint64_t gen_bimodal(size_t i) {
  return i % 100 == 0 ? 300000000u + (uint64_t)(urand() * 1e6) : 50000u + (uint64_t)(urand() * 5000);
}
static uint64_t gen_small(size_t i) { (void)i; return (uint64_t)(urand() * 256); } /* exact buckets */

static void check_generated(size_t n, uint64_t (*gen)(size_t)) {
  uint64_t *v = malloc(n * sizeof(uint64_t));
  assert_non_null(v);
  for (size_t i = 0; i < n; i++) v[i] = gen(i);
  check_set(v, n);
  free(v);
}

static void test_lognormal(void **state) {
  (void)state;
  check_generated(200000, gen_lognormal);
}

static void test_wide_uniform_log(void **state) {
  (void)state;
  check_generated(100000, gen_wide);
}

static void test_bimodal_stall(void **state) {
  (void)state;
  check_generated(50000, gen_bimodal);
}

static void test_small_exact(void **state) {
  (void)state;
  check_generated(1000, gen_small);
  /* below 2*SUB the percentile is the exact value */
  vr_hist_t *h = malloc(sizeof(*h));
  assert_non_null(h);
  vr_hist_init(h);
  for (uint64_t i = 1; i <= 100; i++) vr_hist_record(h, i);
  assert_int_equal(vr_hist_percentile(h, 50), 50);
  assert_int_equal(vr_hist_percentile(h, 99), 99);
  assert_int_equal(vr_hist_percentile(h, 100), 100);
  assert_int_equal(vr_hist_percentile(h, 0), 1);
  free(h);
}

/* Every bucket's width is at most 1/128 of its smallest value; buckets tile
 * the value range without gaps or overlaps (checked across group borders). */
static void test_bucket_geometry(void **state) {
  (void)state;
  uint64_t prev_hi = 0;
  for (uint32_t i = 0; i < VR_HIST_BUCKETS; i++) {
    uint64_t lo, hi;
    vr_hist_bucket_range(i, &lo, &hi);
    if (i) assert_int_equal(lo, prev_hi + 1);
    assert_true(hi >= lo);
    if (lo >= 2u * VR_HIST_SUB) assert_true((double)(hi - lo + 1) / (double)lo <= 1.0 / VR_HIST_SUB + 1e-12);
    assert_int_equal(vr_hist_index(lo), i);
    assert_int_equal(vr_hist_index(hi), i);
    prev_hi = hi;
  }
  assert_int_equal(prev_hi, UINT64_MAX);
  vr_hist_t *h = malloc(sizeof(*h));
  assert_non_null(h);
  vr_hist_init(h);
  assert_int_equal(vr_hist_percentile(h, 50), 0); /* empty */
  vr_hist_record(h, UINT64_MAX);
  assert_int_equal(vr_hist_percentile(h, 50), UINT64_MAX);
  free(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lognormal),       cmocka_unit_test(test_wide_uniform_log),
      cmocka_unit_test(test_bimodal_stall),   cmocka_unit_test(test_small_exact),
      cmocka_unit_test(test_bucket_geometry),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
