/* Non-finite scores (issue 18): a sequence whose score comes out NaN/Inf gets NaN and
 * VR_ERR_NONFINITE, through vr_model_score and vr_model_submit/collect alike, and the
 * other sequences of the same call keep their normal scores. Models with NaN weights are
 * written into a scratch copy of the llama_gqa fixture. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "model_test_util.h"
#include "verl_reward/status.h"
#include "vr_model.h"

#define NAN_TOKEN 5

static vr_model_t *load_dir(const char *dir) {
  vr_model_options_t opt;
  vr_model_options_init(&opt);
  opt.n_threads = 1;
  vr_model_t *m = NULL;
  assert_int_equal(vr_model_load(dir, &opt, &m), 0);
  return m;
}

/* three sequences; only the second contains NAN_TOKEN */
static const int32_t k_ids[] = {1, 2, 3, 4, 4, NAN_TOKEN, 6, 7, 8, 9, 10};
static const uint32_t k_cu[] = {0, 4, 7, 11};
#define K_N 3

static void score_both_ways(vr_model_t *m, float *scores, int32_t *st, float *scores2, int32_t *st2) {
  assert_int_equal(vr_model_score(m, k_ids, k_cu, K_N, scores, st), 0);
  assert_int_equal(vr_model_submit(m, k_ids, k_cu, K_N, scores2, st2), 0);
  assert_int_equal(vr_model_collect(m), 0);
}

static void test_all_nan_weights(void **state) {
  (void)state;
  char dir[1300];
  snprintf(dir, sizeof dir, "%s/nan_all", mt_tmp);
  mt_make_nan_model("llama_gqa", dir, -1);
  vr_model_t *m = load_dir(dir);
  float s[K_N], s2[K_N];
  int32_t st[K_N], st2[K_N];
  score_both_ways(m, s, st, s2, st2);
  for (int i = 0; i < K_N; i++) {
    assert_int_equal(st[i], VR_ERR_NONFINITE);
    assert_int_equal(st2[i], VR_ERR_NONFINITE);
    assert_true(isnan(s[i]) && isnan(s2[i]));
  }
  vr_model_free(m);
}

static void test_one_nan_token(void **state) {
  (void)state;
  char dir[1300], good[1200];
  snprintf(dir, sizeof dir, "%s/nan_tok", mt_tmp);
  mt_make_nan_model("llama_gqa", dir, NAN_TOKEN);
  mt_model_path(good, sizeof good, "llama_gqa");
  vr_model_t *m = load_dir(dir), *ref = load_dir(good);
  float s[K_N], s2[K_N], want[K_N], want2[K_N];
  int32_t st[K_N], st2[K_N], wst[K_N], wst2[K_N];
  score_both_ways(m, s, st, s2, st2);
  score_both_ways(ref, want, wst, want2, wst2);
  for (int i = 0; i < K_N; i++) assert_int_equal(wst[i], 0);
  assert_int_equal(st[1], VR_ERR_NONFINITE);
  assert_int_equal(st2[1], VR_ERR_NONFINITE);
  assert_true(isnan(s[1]) && isnan(s2[1]));
  for (int i = 0; i < K_N; i += 2) { /* sequences 0 and 2 do not contain the token */
    assert_int_equal(st[i], 0);
    assert_int_equal(st2[i], 0);
    assert_true(isfinite(s[i]) && isfinite(s2[i]));
    assert_true(mt_rel_err(s[i], want[i]) < 1e-5);
    assert_true(mt_rel_err(s2[i], want2[i]) < 1e-5);
  }
  vr_model_free(m);
  vr_model_free(ref);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_all_nan_weights, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_one_nan_token, mt_setup_tmp, mt_teardown_tmp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
