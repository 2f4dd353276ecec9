/* test_train_golden.c: the cpu training engine against transformers (float64 goldens of
 * tools/fixtures/make_lm_fixtures.py): log-probs and entropy at temperatures 1 and 0.7 (absolute
 * 1e-5), gradients of the token-mean NLL and of a mixed log-prob/entropy objective (relative
 * 1e-5 per tensor: max |diff| / max |golden|), log-probs after 3 AdamW steps with and without
 * clipping, the critic's values and gradients; recomputation, threads and vocabulary chunks
 * change nothing. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "train_test_util.h"

#define LOGP_TOL 1e-5
#define GRAD_TOL 1e-5

/* Gradients of the token-mean NLL over the whole batch into grads (n_floats). */
static void nll_grads(vr_train_t *t, tr_golden_t *g, float *grads, size_t n, double *loss) {
  vr_train_batch_t b = {g->ids, g->cu, g->n, NULL};
  float *lp = calloc(g->T, sizeof *lp), *d = calloc(g->T, sizeof *d);
  assert_int_equal(vr_train_forward(t, &b, 1.0f, lp, NULL, 1), 0);
  uint32_t N = g->T - g->n;
  double l = 0;
  for (uint32_t q = 0; q < g->n; q++)
    for (uint32_t i = g->cu[q] + 1; i < g->cu[q + 1]; i++) l -= lp[i], d[i] = -1.0f / (float)N;
  if (loss) *loss = l / N;
  assert_int_equal(vr_train_zero_grad(t), 0);
  assert_int_equal(vr_train_backward(t, d, NULL), 0);
  assert_int_equal(vr_train_get_grads(t, grads, n), 0);
  free(lp);
  free(d);
}

static void check_adamw(const vr_lm_t *lm, tr_golden_t *g, const char *key, float clip) {
  vr_train_t *t = tr_engine(lm, 0, 0, 0);
  size_t n = vr_train_n_floats(t);
  float *grads = malloc(n * sizeof *grads);
  vr_adamw_t h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f};
  const cJSON *ref = cJSON_GetObjectItem(g->root, key);
  const cJSON *norms = cJSON_GetObjectItem(ref, "grad_norms");
  for (int s = 0; s < 3; s++) {
    nll_grads(t, g, grads, n, NULL);
    double norm = 0;
    assert_int_equal(vr_train_step(t, &h, clip, &norm), 0);
    if (clip > 0) {
      double want = cJSON_GetArrayItem(norms, s)->valuedouble;
      printf("  %s step %d: grad norm %.9g (transformers %.9g)\n", key, s + 1, norm, want);
      assert_true(fabs(norm - want) <= 1e-5 * want);
    }
  }
  assert_int_equal(vr_train_step_count(t), 3);
  vr_train_batch_t b = {g->ids, g->cu, g->n, NULL};
  float *lp = calloc(g->T, sizeof *lp);
  double *want = calloc(g->T, sizeof *want);
  assert_int_equal(vr_train_forward(t, &b, 1.0f, lp, NULL, 0), 0);
  tr_golden_rows(cJSON_GetObjectItem(ref, "logprobs"), g, 1, want);
  double d = tr_max_abs_diff(lp, want, g->T);
  printf("  %s: log-probs after 3 AdamW steps, max |diff| %.3g\n", key, d);
  assert_true(d <= LOGP_TOL);
  free(lp);
  free(want);
  free(grads);
  vr_train_free(t);
}

static void run_lm(const char *name) {
  printf("%s\n", name);
  tr_golden_t g;
  tr_golden_load(name, &g);
  vr_lm_t *lm = tr_lm_load(name, VR_LM_HEAD_LM);
  vr_train_t *t = tr_engine(lm, 0, 0, 0);
  tr_check_logprobs(t, &g, "logprobs_t1", "entropy_t1", 1.0f, LOGP_TOL, "");
  tr_check_logprobs(t, &g, "logprobs_t07", "entropy_t07", 0.7f, LOGP_TOL, "");
  size_t n = vr_train_n_floats(t);
  float *g0 = malloc(n * sizeof *g0), *g1 = malloc(n * sizeof *g1);
  double loss;
  nll_grads(t, &g, g0, n, &loss);
  double want_loss = cJSON_GetObjectItem(g.root, "loss")->valuedouble;
  printf("  loss %.9g (transformers %.9g)\n", loss, want_loss);
  assert_true(fabs(loss - want_loss) <= 1e-5);
  assert_true(tr_grads_check(lm, g0, &g, "nll") <= GRAD_TOL);
  /* the same bits with recomputation, one thread, and (close) with small vocabulary chunks */
  vr_train_t *t2 = tr_engine(lm, 1, 1, 0);
  nll_grads(t2, &g, g1, n, NULL);
  assert_memory_equal(g0, g1, n * sizeof *g0);
  vr_train_free(t2);
  t2 = tr_engine(lm, 2, 0, 50);
  nll_grads(t2, &g, g1, n, NULL);
  assert_true(tr_grads_check(lm, g1, &g, "nll") <= GRAD_TOL);
  vr_train_free(t2);
  const cJSON *mixed = cJSON_GetObjectItem(g.root, "mixed");
  if (mixed) { /* sum a * logp + b * entropy at temperature 0.7 */
    float tau = (float)cJSON_GetObjectItem(mixed, "temperature")->valuedouble;
    double *a = calloc(g.T, sizeof *a), *bb = calloc(g.T, sizeof *bb);
    tr_golden_rows(cJSON_GetObjectItem(mixed, "a"), &g, 1, a);
    tr_golden_rows(cJSON_GetObjectItem(mixed, "b"), &g, 1, bb);
    float *lp = calloc(g.T, sizeof *lp), *ent = calloc(g.T, sizeof *ent), *da = calloc(g.T, sizeof *da),
          *db = calloc(g.T, sizeof *db);
    for (uint32_t i = 0; i < g.T; i++) da[i] = (float)a[i], db[i] = (float)bb[i];
    vr_train_batch_t b = {g.ids, g.cu, g.n, NULL};
    assert_int_equal(vr_train_forward(t, &b, tau, lp, ent, 1), 0);
    double v = 0;
    for (uint32_t i = 0; i < g.T; i++) v += a[i] * lp[i] + bb[i] * ent[i];
    double want = cJSON_GetObjectItem(mixed, "value")->valuedouble;
    printf("  mixed objective %.9g (transformers %.9g)\n", v, want);
    assert_true(fabs(v - want) <= 1e-4);
    assert_int_equal(vr_train_zero_grad(t), 0);
    assert_int_equal(vr_train_backward(t, da, db), 0);
    assert_int_equal(vr_train_get_grads(t, g1, n), 0);
    assert_true(tr_grads_check(lm, g1, &g, "mixed") <= GRAD_TOL);
    free(a), free(bb), free(lp), free(ent), free(da), free(db);
  }
  vr_train_free(t);
  check_adamw(lm, &g, "adamw", 0.0f);
  check_adamw(lm, &g, "adamw_clip", 0.05f);
  free(g0);
  free(g1);
  vr_lm_free(lm);
  tr_golden_free(&g);
}

static void test_llama(void **state) { (void)state, run_lm("llama_lm"); }
static void test_qwen2_tied(void **state) { (void)state, run_lm("qwen2_lm"); }
static void test_mistral_window(void **state) { (void)state, run_lm("mistral_lm"); }

/* The critic: values per token and the gradients of sum w * value. */
static void test_critic(void **state) {
  (void)state;
  tr_golden_t g;
  tr_golden_load("qwen2_critic", &g);
  vr_lm_t *lm = tr_lm_load("qwen2_critic", VR_LM_HEAD_VALUE);
  vr_train_t *t = tr_engine(lm, 0, 0, 0);
  vr_train_batch_t b = {g.ids, g.cu, g.n, NULL};
  float *val = calloc(g.T, sizeof *val), *dw = calloc(g.T, sizeof *dw);
  double *want = calloc(g.T, sizeof *want), *w = calloc(g.T, sizeof *w);
  assert_int_equal(vr_train_forward(t, &b, 1.0f, val, NULL, 1), 0);
  tr_golden_rows(cJSON_GetObjectItem(g.root, "values"), &g, 0, want);
  double d = tr_max_abs_diff(val, want, g.T);
  printf("qwen2_critic: max |value diff| %.3g\n", d);
  assert_true(d <= LOGP_TOL);
  tr_golden_rows(cJSON_GetObjectItem(g.root, "w"), &g, 0, w);
  for (uint32_t i = 0; i < g.T; i++) dw[i] = (float)w[i];
  assert_int_equal(vr_train_zero_grad(t), 0);
  assert_int_equal(vr_train_backward(t, dw, NULL), 0);
  size_t n = vr_train_n_floats(t);
  float *grads = malloc(n * sizeof *grads);
  assert_int_equal(vr_train_get_grads(t, grads, n), 0);
  assert_true(tr_grads_check(lm, grads, &g, "value") <= GRAD_TOL);
  free(val), free(dw), free(want), free(w), free(grads);
  vr_train_free(t);
  vr_lm_free(lm);
  tr_golden_free(&g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_llama),
      cmocka_unit_test(test_qwen2_tied),
      cmocka_unit_test(test_mistral_window),
      cmocka_unit_test(test_critic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
