/* The cpu backend's determinism promise (docs/protocol.md, "What a score depends on"), held
 * bit for bit on every fixture of tests/fixtures/models:
 *  - scores and hidden states do not depend on the thread count (1, 2, 3 threads);
 *  - nor on the batch: a sequence scored alone, in the fixture's batch, in reverse order, and
 *    at a random position among random filler sequences gets the same bits;
 *  - the trunk (vr_model_hidden) gives the same rows for a sequence alone and in a batch;
 *  - bad arguments to vr_model_hidden are refused, nothing written.
 * The fixture checks run once per GEMM variant this CPU has (generic; avx2+fma where present).
 * Filler sequences come from a fixed seed (VR_TEST_SEED overrides it; the seed is printed). */
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
#include "model_test_util.h"
#include "verl_reward/status.h"
#include "vr_model.h"

#define MT_MAX_MODELS 64
#define MT_FILLERS 5 /* random sequences around the one under test */

static uint64_t seed_state;

static uint32_t rnd(uint32_t n) { return vr_test_rand(&seed_state, n); }

static const char *g_variant = "auto"; /* the GEMM variant the fixture checks run */

static vr_model_t *load(const char *dir, int threads) {
  vr_model_options_t opt;
  vr_model_options_init(&opt);
  opt.n_threads = threads;
  opt.cpu_gemm = g_variant;
  vr_model_t *m = NULL;
  int rc = vr_model_load(dir, &opt, &m);
  if (rc != 0) fail_msg("load %s: %s", dir, vr_strerror(rc));
  return m;
}

static void score_ok(vr_model_t *m, const int32_t *ids, const uint32_t *cu, uint32_t n, float *out) {
  int32_t st[256];
  assert_true(n <= 256);
  assert_int_equal(vr_model_score(m, ids, cu, n, out, st), 0);
  for (uint32_t i = 0; i < n; i++) assert_int_equal(st[i], 0);
}

static void expect_same(const float *got, const float *want, size_t n, const char *model, const char *what) {
  if (memcmp(got, want, n * sizeof *got) == 0) return;
  for (size_t i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], sizeof *got) != 0)
      fail_msg("%s: %s differs at %zu: %.9g vs %.9g", model, what, i, got[i], want[i]);
}

/* Scores sequence i of g at a random position among random fillers; returns its score. */
static float score_among_fillers(vr_model_t *m, const mt_golden_t *g, uint32_t i) {
  const vr_model_info_t *info = vr_model_info(m);
  uint32_t len = g->cu[i + 1] - g->cu[i], at = rnd(MT_FILLERS + 1), tokens = 0, n = 0;
  int32_t ids[4096];
  uint32_t cu[MT_FILLERS + 2] = {0};
  float scores[MT_FILLERS + 1];
  for (uint32_t k = 0; k <= MT_FILLERS; k++) {
    if (k == at) {
      assert_true(tokens + len <= 4096);
      memcpy(ids + tokens, g->ids + g->cu[i], len * sizeof *ids);
      tokens += len;
    } else {
      uint32_t max = (uint32_t)info->max_positions < 64 ? (uint32_t)info->max_positions : 64;
      uint32_t fl = 1 + rnd(max);
      for (uint32_t t = 0; t < fl; t++) ids[tokens++] = (int32_t)rnd((uint32_t)info->vocab_size);
    }
    cu[++n] = tokens;
  }
  score_ok(m, ids, cu, n, scores);
  return scores[at];
}

static void check_model(const char *name) {
  char dir[1200];
  mt_model_path(dir, sizeof dir, name);
  mt_golden_t g;
  mt_golden_load(dir, &g);
  const uint32_t n = g.n_seqs, T = g.cu[n];
  vr_model_t *m[3] = {load(dir, 1), load(dir, 2), load(dir, 3)};
  const size_t C = (size_t)vr_model_info(m[0])->hidden_size;
  float *ref = malloc(n * sizeof *ref), *got = malloc(n * sizeof *got);
  float *href = malloc(T * C * sizeof *href), *hgot = malloc(T * C * sizeof *hgot);
  assert_non_null(ref), assert_non_null(got), assert_non_null(href), assert_non_null(hgot);

  score_ok(m[0], g.ids, g.cu, n, ref);
  assert_int_equal(vr_model_hidden(m[0], g.ids, g.cu, n, href), 0);
  for (int k = 1; k < 3; k++) {
    score_ok(m[k], g.ids, g.cu, n, got);
    expect_same(got, ref, n, name, k == 1 ? "batch scores, 2 threads" : "batch scores, 3 threads");
    assert_int_equal(vr_model_hidden(m[k], g.ids, g.cu, n, hgot), 0);
    expect_same(hgot, href, T * C, name, "hidden states across thread counts");
  }
  /* alone, each on a different thread count */
  for (uint32_t i = 0; i < n; i++) {
    uint32_t cu[2] = {0, g.cu[i + 1] - g.cu[i]};
    score_ok(m[i % 3], g.ids + g.cu[i], cu, 1, got + i);
    assert_int_equal(vr_model_hidden(m[(i + 1) % 3], g.ids + g.cu[i], cu, 1, hgot), 0);
    expect_same(hgot, href + g.cu[i] * C, cu[1] * C, name, "hidden states of a sequence alone");
  }
  expect_same(got, ref, n, name, "scores of sequences scored alone");
  /* reverse order */
  int32_t *rids = malloc(T * sizeof *rids);
  uint32_t *rcu = malloc((n + 1) * sizeof *rcu);
  rcu[0] = 0;
  for (uint32_t j = 0; j < n; j++) {
    uint32_t i = n - 1 - j, len = g.cu[i + 1] - g.cu[i];
    memcpy(rids + rcu[j], g.ids + g.cu[i], len * sizeof *rids);
    rcu[j + 1] = rcu[j] + len;
  }
  score_ok(m[2], rids, rcu, n, got);
  for (uint32_t j = 0; j < n; j++) expect_same(&got[j], &ref[n - 1 - j], 1, name, "scores in reverse order");
  /* among random fillers */
  for (uint32_t i = 0; i < n; i++) {
    float s = score_among_fillers(m[i % 3], &g, i);
    expect_same(&s, &ref[i], 1, name, "score among random filler sequences");
  }
  free(rids), free(rcu), free(ref), free(got), free(href), free(hgot);
  for (int k = 0; k < 3; k++) vr_model_free(m[k]);
  mt_golden_free(&g);
}

static void every_fixture(vr_cpu_gemm_variant_t v) {
  if (!vr_cpu_gemm_supported(v)) {
    printf("this CPU has no %s GEMM variant: not run here\n", vr_cpu_gemm_name(v));
    skip();
  }
  g_variant = vr_cpu_gemm_name(v);
  static char names[MT_MAX_MODELS][64];
  int n = mt_list_models(names, MT_MAX_MODELS);
  assert_true(n >= 10); /* the fixture set is there: a missing directory must not pass silently */
  for (int i = 0; i < n; i++) check_model(names[i]);
}

static void test_every_fixture_generic(void **state) {
  (void)state;
  every_fixture(VR_CPU_GEMM_GENERIC);
}

static void test_every_fixture_fma(void **state) {
  (void)state;
  every_fixture(VR_CPU_GEMM_FMA);
}

static void test_hidden_bad_arguments(void **state) {
  (void)state;
  char dir[1200];
  mt_model_path(dir, sizeof dir, "llama_gqa");
  vr_model_t *m = load(dir, 1);
  const vr_model_info_t *info = vr_model_info(m);
  float out[4 * 64];
  for (size_t i = 0; i < sizeof out / sizeof *out; i++) out[i] = 7.0f;
  assert_true((size_t)info->hidden_size * 4 <= sizeof out / sizeof *out);
  int32_t ids[4] = {1, 2, 3, 4}, bad[4] = {1, 2, info->vocab_size, 4};
  uint32_t cu[3] = {0, 2, 4}, cu_down[3] = {0, 3, 2}, cu_empty[3] = {0, 0, 4};
  assert_int_equal(vr_model_hidden(m, bad, cu, 2, out), VR_ERR_TOKEN_RANGE);
  assert_int_equal(vr_model_hidden(m, ids, cu_down, 2, out), VR_ERR_INVAL);
  assert_int_equal(vr_model_hidden(m, ids, cu_empty, 2, out), VR_ERR_EMPTY_SEQ);
  assert_int_equal(vr_model_hidden(m, NULL, cu, 2, out), VR_ERR_INVAL);
  assert_int_equal(vr_model_hidden(m, ids, cu, 2, NULL), VR_ERR_INVAL);
  for (size_t i = 0; i < sizeof out / sizeof *out; i++) assert_true(out[i] == 7.0f);
  assert_int_equal(vr_model_hidden(m, ids, cu, 2, out), 0);
  for (size_t i = 0; i < 4 * (size_t)info->hidden_size; i++) assert_true(isfinite(out[i]));
  vr_model_free(m);
  /* the cpu-gemm option: unknown values refused at load */
  vr_model_options_t opt;
  vr_model_options_init(&opt);
  opt.cpu_gemm = "avx512";
  vr_model_t *bad_m = NULL;
  assert_int_equal(vr_model_load(dir, &opt, &bad_m), VR_ERR_INVAL);
  assert_null(bad_m);
}

int main(void) {
  seed_state = vr_test_seed("test_model_determinism", 20261201u);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_fixture_generic),
      cmocka_unit_test(test_every_fixture_fma),
      cmocka_unit_test(test_hidden_bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
