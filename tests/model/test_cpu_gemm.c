/* The cpu backend's GEMMs against the contract of model/cpu/vr_cpu_gemm.h, bit for bit:
 * random shapes (edge tiles, the small-M path, odd strides), with and without bias, on 1..3
 * threads, for every variant this CPU runs ("generic" always, "avx2+fma" where present),
 * against a scalar loop that is the contract written out. Seeded (VR_TEST_SEED overrides;
 * the seed is printed). Compiled with -ffp-contract=off like the code under test. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vr_test_seed.h"

#include "cpu/vr_cpu_gemm.h"

static uint64_t seed_state;

static uint32_t rnd(uint32_t n) { return vr_test_rand(&seed_state, n); }
static float rndf(void) { return ((float)rnd(2000001) - 1000000.0f) / 250000.0f; }

static void fill(float *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = rndf();
}

static void check_nt(vr_cpu_gemm_variant_t v, int M, int N, int K, int threads) {
  int lda = K + (int)rnd(3), ldb = K + (int)rnd(3), ldy = N + (int)rnd(3);
  float alpha = rnd(2) ? 1.0f : rndf();
  float *a = malloc((size_t)M * lda * 4), *b = malloc((size_t)N * ldb * 4), *bias = malloc((size_t)N * 4);
  float *y = malloc((size_t)M * ldy * 4), *pack = aligned_alloc(64, ((size_t)3 * VR_CPU_GEMM_PACK_FLOATS(K) * 4 + 63) & ~(size_t)63);
  assert_true(a && b && bias && y && pack);
  fill(a, (size_t)M * lda), fill(b, (size_t)N * ldb), fill(bias, (size_t)N);
  int use_bias = (int)rnd(2);
  const int fused = v == VR_CPU_GEMM_FMA;
  vr_cpu_gemm_nt(v, M, N, K, alpha, a, lda, b, ldb, use_bias ? bias : NULL, y, ldy, pack, threads);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float s = 0.0f;
      for (int k = 0; k < K; k++) {
        float x = a[(size_t)i * lda + k], w = b[(size_t)j * ldb + k];
        s = fused ? fmaf(x, w, s) : s + x * w;
      }
      s *= alpha;
      if (use_bias) s += bias[j];
      if (memcmp(&s, &y[(size_t)i * ldy + j], 4) != 0)
        fail_msg("nt %s M=%d N=%d K=%d threads=%d: y[%d][%d] = %.9g, contract %.9g", fused ? "fma" : "generic", M,
                 N, K, threads, i, j, y[(size_t)i * ldy + j], s);
    }
  free(a), free(b), free(bias), free(y), free(pack);
}

static void check_nn(vr_cpu_gemm_variant_t v, int M, int N, int K, int threads) {
  int lda = K + (int)rnd(3), ldb = N + (int)rnd(3), ldy = N + (int)rnd(3);
  float *a = malloc((size_t)M * lda * 4), *b = malloc((size_t)K * ldb * 4), *y = malloc((size_t)M * ldy * 4);
  assert_true(a && b && y);
  fill(a, (size_t)M * lda), fill(b, (size_t)K * ldb);
  vr_cpu_gemm_nn(v, M, N, K, a, lda, b, ldb, y, ldy, threads);
  for (int i = 0; i < M; i++)
    for (int d = 0; d < N; d++) {
      float s = 0.0f;
      for (int j = 0; j < K; j++) s += a[(size_t)i * lda + j] * b[(size_t)j * ldb + d];
      if (memcmp(&s, &y[(size_t)i * ldy + d], 4) != 0)
        fail_msg("nn %s M=%d N=%d K=%d threads=%d: y[%d][%d] = %.9g, contract %.9g", vr_cpu_gemm_name(v), M, N, K, threads, i, d,
                 y[(size_t)i * ldy + d], s);
    }
  free(a), free(b), free(y);
}

static void run_variant(vr_cpu_gemm_variant_t v) {
  for (int t = 0; t < 300; t++) check_nt(v, 1 + (int)rnd(40), 1 + (int)rnd(50), 1 + (int)rnd(70), 1 + (int)rnd(3));
  /* large enough for the threaded path (more than 2^18 multiply-adds) */
  check_nt(v, 77, 203, 130, 2);
  check_nt(v, 200, 37, 96, 3);
  for (int t = 0; t < 100; t++) check_nn(v, 1 + (int)rnd(30), 1 + (int)rnd(40), 1 + (int)rnd(50), 1 + (int)rnd(3));
  check_nn(v, 300, 64, 200, 2);
  printf("variant %s: ok\n", vr_cpu_gemm_name(v));
}

static void test_generic(void **state) {
  (void)state;
  assert_true(vr_cpu_gemm_supported(VR_CPU_GEMM_GENERIC));
  run_variant(VR_CPU_GEMM_GENERIC);
}

static void test_fma(void **state) {
  (void)state;
  if (!vr_cpu_gemm_supported(VR_CPU_GEMM_FMA)) {
    printf("this CPU has no AVX2 + FMA: the fused variant is not run here\n");
    skip();
  }
  assert_int_equal(vr_cpu_gemm_best(), VR_CPU_GEMM_FMA);
  run_variant(VR_CPU_GEMM_FMA);
}

static void test_parse(void **state) {
  (void)state;
  vr_cpu_gemm_variant_t v;
  assert_int_equal(vr_cpu_gemm_parse("generic", &v), 0);
  assert_int_equal(v, VR_CPU_GEMM_GENERIC);
  assert_int_equal(vr_cpu_gemm_parse("avx2+fma", &v), 0);
  assert_int_equal(v, VR_CPU_GEMM_FMA);
  assert_int_equal(vr_cpu_gemm_parse("auto", &v), 0);
  assert_int_equal(v, vr_cpu_gemm_best());
  assert_int_equal(vr_cpu_gemm_parse("avx512", &v), -1);
  assert_string_equal(vr_cpu_gemm_name(VR_CPU_GEMM_FMA), "avx2+fma");
}

int main(void) {
  seed_state = vr_test_seed("test_cpu_gemm", 20261201u);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_generic),
      cmocka_unit_test(test_fma),
      cmocka_unit_test(test_parse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
