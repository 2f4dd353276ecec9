/* test_algo.c: vr_algo (trainer/vr_algo.h) against verl's own formulas. The golden values in
 * tests/fixtures/algo/golden.json come from tests/trainer/algo_ref.py, a stdlib transcription of
 * verl v0.7.1 core_algos.py / torch_functional.py / ray_trainer.py run on verl's padded layout
 * (so the packed layout here is shown equal to it). Gradients (what the trainer hands to the
 * engine's backward) are checked against central differences of the same functions. */
#include <cjson/cJSON.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "vr_algo.h"
#include "vr_test_file.h"

#define TOL 1e-9 /* both sides compute in double */

typedef struct fx {
  cJSON *root;
  uint32_t n_resp, cu[16];
  size_t n_tok;
  int64_t index[16];
} fx_t;

static fx_t g;

static int setup(void **st) {
  (void)st;
  const char *fxd = getenv("VR_FIXTURES");
  char path[1024];
  snprintf(path, sizeof path, "%s/algo/golden.json", fxd ? fxd : "tests/fixtures");
  char *s = vr_test_slurp(path, NULL);
  if (!s) {
    fprintf(stderr, "cannot read %s\n", path);
    return -1;
  }
  g.root = cJSON_Parse(s);
  free(s);
  if (!g.root) return -1;
  const cJSON *lens = cJSON_GetObjectItem(g.root, "lens"), *idx = cJSON_GetObjectItem(g.root, "index");
  g.n_resp = (uint32_t)cJSON_GetArraySize(lens);
  g.cu[0] = 0;
  for (uint32_t r = 0; r < g.n_resp; r++) {
    g.cu[r + 1] = g.cu[r] + (uint32_t)cJSON_GetArrayItem(lens, (int)r)->valueint;
    g.index[r] = cJSON_GetArrayItem(idx, (int)r)->valueint;
  }
  g.n_tok = g.cu[g.n_resp];
  return 0;
}

static int teardown(void **st) {
  (void)st;
  cJSON_Delete(g.root);
  return 0;
}

static const cJSON *item(const cJSON *o, const char *k) {
  const cJSON *x = cJSON_GetObjectItem(o, k);
  if (!x) fail_msg("golden.json has no \"%s\"", k);
  return x;
}

/* A golden list into a fresh double array (n checked when want > 0). */
static double *list(const cJSON *o, const char *k, size_t want) {
  const cJSON *a = item(o, k);
  size_t n = (size_t)cJSON_GetArraySize(a);
  if (want) assert_int_equal(n, want);
  double *x = calloc(n ? n : 1, sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = cJSON_GetArrayItem(a, (int)i)->valuedouble;
  return x;
}

static double num(const cJSON *o, const char *k) { return item(o, k)->valuedouble; }

static void near(const char *what, const double *got, const double *want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!(fabs(got[i] - want[i]) <= TOL * (1 + fabs(want[i]))))
      fail_msg("%s[%zu]: %.12g, verl gives %.12g", what, i, got[i], want[i]);
}

static void test_gae_and_rpp(void **st) {
  (void)st;
  double *values = list(g.root, "values", g.n_tok);
  const char *rews[] = {"scores", "dense"};
  for (int k = 0; k < 2; k++) {
    double *r = list(g.root, rews[k], g.n_tok);
    const double gl[2][2] = {{1.0, 1.0}, {0.99, 0.95}};
    for (int j = 0; j < 2; j++) {
      char key[96];
      snprintf(key, sizeof key, "gae_%s_%.1f_%.1f", rews[k], gl[j][0], gl[j][1]);
      if (j == 1) snprintf(key, sizeof key, "gae_%s_0.99_0.95", rews[k]);
      const cJSON *o = item(g.root, key);
      double *wa = list(o, "adv", g.n_tok), *wr = list(o, "ret", g.n_tok);
      double adv[64], ret[64];
      assert_int_equal(vr_algo_gae(r, values, g.cu, g.n_resp, gl[j][0], gl[j][1], adv, ret), 0);
      near(key, adv, wa, g.n_tok);
      near(key, ret, wr, g.n_tok);
      free(wa), free(wr);
    }
    char key[64];
    snprintf(key, sizeof key, "rpp_%s", rews[k]);
    const cJSON *o = item(g.root, key);
    double *wa = list(o, "adv", g.n_tok), *wr = list(o, "ret", g.n_tok);
    double adv[64], ret[64];
    assert_int_equal(vr_algo_reinforce_pp(r, g.cu, g.n_resp, 0.99, adv, ret), 0);
    near(key, adv, wa, g.n_tok);
    near(key, ret, wr, g.n_tok);
    free(wa), free(wr), free(r);
  }
  /* fewer than two tokens: verl raises (masked_var), we refuse */
  double one = 1, a, b;
  uint32_t cu1[2] = {0, 1};
  assert_int_equal(vr_algo_gae(&one, &one, cu1, 1, 1, 1, &a, &b), -1);
  free(values);
}

static void test_outcome_estimators(void **st) {
  (void)st;
  double *scores = list(g.root, "scores", g.n_tok), score[16], adv[16];
  for (uint32_t r = 0; r < g.n_resp; r++) {
    score[r] = 0;
    for (uint32_t t = g.cu[r]; t < g.cu[r + 1]; t++) score[r] += scores[t];
  }
  double *w1 = list(g.root, "grpo_std", g.n_resp), *w2 = list(g.root, "grpo_nostd", g.n_resp),
         *w3 = list(g.root, "rloo", g.n_resp);
  vr_algo_grpo(score, g.index, g.n_resp, 1e-6, 1, adv);
  near("grpo (norm_adv_by_std_in_grpo)", adv, w1, g.n_resp);
  vr_algo_grpo(score, g.index, g.n_resp, 1e-6, 0, adv);
  near("grpo (no std)", adv, w2, g.n_resp);
  vr_algo_rloo(score, g.index, g.n_resp, adv);
  near("rloo", adv, w3, g.n_resp);
  /* a group whose responses all score the same gets advantage 0, not a division by zero */
  double same[3] = {1, 1, 1};
  int64_t grp[3] = {7, 7, 7};
  vr_algo_grpo(same, grp, 3, 1e-6, 1, adv);
  for (int i = 0; i < 3; i++) assert_true(adv[i] == 0);
  free(scores), free(w1), free(w2), free(w3);
}

static void test_kl(void **st) {
  (void)st;
  double *lp = list(g.root, "lp", g.n_tok), *ref = list(g.root, "ref", g.n_tok);
  const char *kinds[] = {"kl", "abs", "mse", "low_var_kl"};
  for (int k = 0; k < 4; k++) {
    vr_kl_est_t e;
    assert_int_equal(vr_kl_parse(kinds[k], &e), 0);
    char key[32];
    snprintf(key, sizeof key, "kl_%s", kinds[k]);
    double *want = list(g.root, key, g.n_tok), got[64];
    for (size_t t = 0; t < g.n_tok; t++) {
      double gr;
      got[t] = vr_kl_value(&e, lp[t], ref[t], &gr);
      /* gradient against central differences (away from the clamps' corners) */
      const double h = 1e-6;
      double fd = (vr_kl_value(&e, lp[t] + h, ref[t], NULL) - vr_kl_value(&e, lp[t] - h, ref[t], NULL)) / (2 * h);
      if (fabs(gr - fd) > 1e-5 * (1 + fabs(fd))) fail_msg("%s grad[%zu] %.9g, differences %.9g", key, t, gr, fd);
    }
    near(key, got, want, g.n_tok);
    free(want);
  }
  /* names as verl takes them; "+" is the straight-through k2 gradient */
  vr_kl_est_t e;
  assert_int_equal(vr_kl_parse("k3", &e), 0);
  assert_int_equal(e.type, VR_KL_K3);
  assert_int_equal(vr_kl_parse("k3+", &e), 0);
  assert_true(e.straight_through);
  double gr;
  vr_kl_value(&e, -1.0, -1.5, &gr);
  assert_true(fabs(gr - 0.5) < 1e-12);
  assert_int_equal(vr_kl_parse("k2+", &e), 0);
  assert_false(e.straight_through);
  assert_int_equal(vr_kl_parse("full", &e), -1);
  assert_int_equal(vr_kl_parse("k4", &e), -1);
  /* verl's clamps: ref - lp beyond 20, kld beyond 10 */
  assert_int_equal(vr_kl_parse("low_var_kl", &e), 0);
  assert_true(fabs(vr_kl_value(&e, 0, 30, &gr) - 10) < 1e-12 && gr == 0);
  free(lp), free(ref);
}

static void test_policy_and_value_loss(void **st) {
  (void)st;
  double *old = list(g.root, "old", g.n_tok), *lp = list(g.root, "lp", g.n_tok), *adv = list(g.root, "adv", g.n_tok);
  double *vp = list(g.root, "vpreds", g.n_tok), *ret = list(g.root, "returns", g.n_tok),
         *val = list(g.root, "values", g.n_tok);
  const char *modes[] = {"token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"};
  const double clips[2][3] = {{0.2, 0.2, 3.0}, {0.2, 0.28, 1.5}};
  for (int m = 0; m < 4; m++) {
    int mode = vr_agg_parse(modes[m]);
    assert_int_equal(mode, m);
    double w[64], loss[64], gr[64];
    vr_agg_weights((vr_agg_mode_t)mode, g.cu, g.n_resp, 6.0 /* the fixture's padded length */, w);
    for (int c = 0; c < 2; c++) {
      vr_pg_clip_t pc = {clips[c][0], clips[c][1], clips[c][2]};
      double cf = 0, cl = 0, kl = 0;
      for (size_t t = 0; t < g.n_tok; t++) {
        int a, b;
        double nkl;
        loss[t] = vr_pg_token(&pc, lp[t], old[t], adv[t], &gr[t], &a, &b, &nkl);
        cf += a, cl += b, kl += -nkl;
        const double h = 1e-6;
        double fd = (vr_pg_token(&pc, lp[t] + h, old[t], adv[t], NULL, NULL, NULL, NULL) -
                     vr_pg_token(&pc, lp[t] - h, old[t], adv[t], NULL, NULL, NULL, NULL)) / (2 * h);
        if (fabs(gr[t] - fd) > 1e-5 * (1 + fabs(fd))) fail_msg("pg grad[%zu] %.9g, differences %.9g", t, gr[t], fd);
      }
      char key[96];
      snprintf(key, sizeof key, "pg_%s_%.1f_%.*f_%.1f", modes[m], clips[c][0], c ? 2 : 1, clips[c][1], clips[c][2]);
      const cJSON *o = item(g.root, key);
      const double n = (double)g.n_tok + 1e-8; /* masked_mean */
      double got[4] = {vr_agg_apply(w, loss, g.n_tok), cf / n, kl / n, cl / n};
      double want[4] = {num(o, "pg_loss"), num(o, "pg_clipfrac"), num(o, "ppo_kl"), num(o, "pg_clipfrac_lower")};
      near(key, got, want, 4);
    }
    for (int c = 0; c < 2; c++) {
      const double cv = c ? 0.1 : 0.5;
      double cf = 0;
      for (size_t t = 0; t < g.n_tok; t++) {
        int a;
        loss[t] = vr_vf_token(vp[t], ret[t], val[t], cv, &gr[t], &a);
        cf += a;
        const double h = 1e-6;
        double fd = (vr_vf_token(vp[t] + h, ret[t], val[t], cv, NULL, NULL) -
                     vr_vf_token(vp[t] - h, ret[t], val[t], cv, NULL, NULL)) / (2 * h);
        if (fabs(gr[t] - fd) > 1e-5 * (1 + fabs(fd))) fail_msg("vf grad[%zu] %.9g, differences %.9g", t, gr[t], fd);
      }
      char key[96];
      snprintf(key, sizeof key, "vf_%s_%.1f", modes[m], cv);
      const cJSON *o = item(g.root, key);
      double got[2] = {0.5 * vr_agg_apply(w, loss, g.n_tok), cf / ((double)g.n_tok + 1e-8)};
      double want[2] = {num(o, "vf_loss"), num(o, "vf_clipfrac")};
      near(key, got, want, 2);
    }
    char key[64];
    snprintf(key, sizeof key, "entropy_%s", modes[m]);
    double e = vr_agg_apply(w, adv, g.n_tok), we = num(g.root, key);
    near(key, &e, &we, 1);
  }
  assert_int_equal(vr_agg_parse("mean"), -1);
  free(old), free(lp), free(adv), free(vp), free(ret), free(val);
}

static void test_kl_controller_and_penalty(void **st) {
  (void)st;
  const cJSON *o = item(g.root, "adaptive_kl"), *ups = item(o, "updates");
  double *want = list(o, "values", 0);
  vr_kl_ctrl_t k = {1, num(o, "init"), num(o, "target"), num(o, "horizon")};
  vr_kl_ctrl_t fixed = {0, 0.1, 0, 0};
  for (int i = 0; i < cJSON_GetArraySize(ups); i++) {
    const cJSON *u = cJSON_GetArrayItem(ups, i);
    vr_kl_ctrl_update(&k, cJSON_GetArrayItem(u, 0)->valuedouble, cJSON_GetArrayItem(u, 1)->valuedouble);
    vr_kl_ctrl_update(&fixed, cJSON_GetArrayItem(u, 0)->valuedouble, cJSON_GetArrayItem(u, 1)->valuedouble);
    near("adaptive kl_coef", &k.value, &want[i], 1);
  }
  assert_true(fixed.value == 0.1);
  free(want);
  /* apply_kl_penalty: token_level_rewards = scores - beta * kld; current_kl = mean over
   * responses of each response's token mean */
  const cJSON *p = item(g.root, "kl_in_reward");
  double *scores = list(g.root, "scores", g.n_tok), *old = list(g.root, "old", g.n_tok),
         *ref = list(g.root, "ref", g.n_tok), *wr = list(p, "rewards", g.n_tok);
  vr_kl_est_t e;
  assert_int_equal(vr_kl_parse(item(p, "kind")->valuestring, &e), 0);
  const double beta = num(p, "beta");
  double rew[64], cur = 0;
  for (uint32_t r = 0; r < g.n_resp; r++) {
    double s = 0;
    for (uint32_t t = g.cu[r]; t < g.cu[r + 1]; t++) {
      double kld = vr_kl_value(&e, old[t], ref[t], NULL);
      rew[t] = scores[t] - beta * kld;
      s += kld;
    }
    cur += s / ((g.cu[r + 1] - g.cu[r]) + 1e-8);
  }
  cur /= g.n_resp;
  near("kl-penalised rewards", rew, wr, g.n_tok);
  double wc = num(p, "current_kl");
  near("current_kl", &cur, &wc, 1);
  free(scores), free(old), free(ref), free(wr);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gae_and_rpp),
      cmocka_unit_test(test_outcome_estimators),
      cmocka_unit_test(test_kl),
      cmocka_unit_test(test_policy_and_value_loss),
      cmocka_unit_test(test_kl_controller_and_penalty),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
