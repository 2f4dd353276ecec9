/* Parity of the cpu backend with transformers on every fixture of tests/fixtures/models
 * (tolerances: model_test_util.h):
 *  - one-by-one scores match transformers' (MT_TOL_TRANSFORMERS), and transformers'
 *    right-padded batch scores too;
 *  - a packed batch (all sequences in one call, and split by a small
 *    max_batch_tokens / max_seqs) matches sequence-by-sequence (MT_TOL_CPU_BATCH);
 *  - the sharded save gives the single-file save's scores bit for bit (same weights, same
 *    batch, same thread count); bf16/f16 saves match their f32 source within
 *    half-precision tolerance (MT_TOL_HALF_SAVE);
 *  - the RoPE inv_freq table matches transformers' (recorded in golden.json, MT_TOL_ROPE);
 *  - the transformers-4 config form (rope_scaling + rope_theta) gives the same scores. */
#include <limits.h>
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

#include "model_test_util.h"
#include "verl_reward/status.h"
#include "vr_config.h"
#include "vr_log.h"
#include "vr_model.h"

#define MT_MAX_MODELS 64

static vr_model_t *load(const char *dir, uint32_t max_batch_tokens, uint32_t max_seqs) {
  vr_model_options_t opt;
  vr_model_options_init(&opt);
  opt.n_threads = 1;
  opt.max_batch_tokens = max_batch_tokens;
  opt.max_seqs = max_seqs;
  vr_model_t *m = NULL;
  int rc = vr_model_load(dir, &opt, &m);
  if (rc != 0) fail_msg("load %s: %s", dir, vr_strerror(rc));
  return m;
}

/* One sequence per call. */
static void score_each(vr_model_t *m, const mt_golden_t *g, float *out) {
  for (uint32_t i = 0; i < g->n_seqs; i++) {
    uint32_t cu[2] = {0, g->cu[i + 1] - g->cu[i]};
    int32_t st = 99;
    assert_int_equal(vr_model_score(m, g->ids + g->cu[i], cu, 1, out + i, &st), 0);
    assert_int_equal(st, 0);
  }
}

static void score_packed(vr_model_t *m, const mt_golden_t *g, float *out) {
  int32_t *st = malloc(g->n_seqs * sizeof *st);
  assert_int_equal(vr_model_score(m, g->ids, g->cu, g->n_seqs, out, st), 0);
  for (uint32_t i = 0; i < g->n_seqs; i++) assert_int_equal(st[i], 0);
  free(st);
}

static void test_every_fixture(void **state) {
  (void)state;
  static char names[MT_MAX_MODELS][64];
  int n = mt_list_models(names, MT_MAX_MODELS);
  assert_true(n >= 13); /* make_fixtures.py writes 13; fewer means a fixture is lost */
  for (int k = 0; k < n; k++) {
    char dir[1200];
    mt_model_path(dir, sizeof dir, names[k]);
    mt_golden_t g;
    mt_golden_load(dir, &g);
    vr_model_t *m = load(dir, 0, 0);
    const vr_model_info_t *info = vr_model_info(m);
    assert_int_equal(info->max_positions, g.max_seq_len);
    assert_int_equal(info->vocab_size, g.vocab_size);
    assert_string_equal(info->weights_dtype, g.weights_dtype);
    assert_string_equal(info->device, "cpu");
    assert_true(info->param_count > 0);

    float *one = calloc(g.n_seqs, sizeof *one), *packed = calloc(g.n_seqs, sizeof *packed),
          *split = calloc(g.n_seqs, sizeof *split);
    score_each(m, &g, one);
    score_packed(m, &g, packed);
    double d_hf = mt_max_rel(one, g.scores, g.n_seqs);
    double d_batch = g.batch_scores ? mt_max_rel(one, g.batch_scores, g.n_seqs) : 0.0;
    double d_packed = mt_max_rel_ff(packed, one, g.n_seqs);
    /* splitting: batches of at most 2 sequences and max_seq_len tokens */
    vr_model_t *ms = load(dir, (uint32_t)g.max_seq_len, 2);
    score_packed(ms, &g, split);
    double d_split = mt_max_rel_ff(split, one, g.n_seqs);
    vr_model_free(ms);
    printf("%-20s %2u seqs  vs transformers %.2e  vs hf padded batch %.2e  packed %.2e  split %.2e\n",
           names[k], g.n_seqs, d_hf, d_batch, d_packed, d_split);
    assert_true(d_hf <= MT_TOL_TRANSFORMERS);
    assert_true(d_batch <= MT_TOL_TRANSFORMERS);
    assert_true(d_packed <= MT_TOL_CPU_BATCH);
    assert_true(d_split <= MT_TOL_CPU_BATCH);

    if (g.source[0]) {
      /* derived save: same sequences as the source, whose transformers scores golden.json
       * records; f32 (sharded) is a transformers comparison like any other, half precision
       * must stay within its rounding (scores are O(1) by construction) */
      double d_src = mt_max_rel(one, g.source_scores, g.n_seqs);
      double tol = strcmp(g.weights_dtype, "f32") == 0 ? MT_TOL_TRANSFORMERS : MT_TOL_HALF_SAVE;
      printf("%-20s vs f32 source %s: %.2e (tolerance %.0e)\n", names[k], g.source, d_src, tol);
      assert_true(d_src <= tol);
      if (strcmp(g.weights_dtype, "f32") == 0) { /* sharded: bit-identical weights */
        char sdir[1200];
        mt_model_path(sdir, sizeof sdir, g.source);
        vr_model_t *msrc = load(sdir, 0, 0);
        float *s1 = calloc(g.n_seqs, sizeof *s1);
        score_packed(msrc, &g, s1);
        for (uint32_t i = 0; i < g.n_seqs; i++) assert_true(s1[i] == packed[i]);
        free(s1);
        vr_model_free(msrc);
      }
    }
    if (g.inv_freq) {
      assert_int_equal(g.n_inv_freq, info->head_dim / 2);
    }
    free(one);
    free(packed);
    free(split);
    vr_model_free(m);
    mt_golden_free(&g);
  }
}

/* The loader's RoPE table equals transformers' inv_freq (golden.json) for every rope type. */
static void test_rope_tables(void **state) {
  (void)state;
  static const struct {
    const char *name, *type;
    float theta, factor, lo, hi, orig;
  } cases[] = {
      {"llama_gqa", "default", 10000.0f, 1, 1, 4, 8192},
      {"llama_linear_bias", "linear", 10000.0f, 2.0f, 1, 4, 8192},
      {"llama3_mqa", "llama3", 10000.0f, 8.0f, 1.0f, 4.0f, 32.0f},
      {"qwen2", "default", 1000000.0f, 1, 1, 4, 8192},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char dir[1200];
    mt_model_path(dir, sizeof dir, cases[c].name);
    mt_golden_t g;
    mt_golden_load(dir, &g);
    assert_non_null(g.inv_freq);
    int head_dim = 2 * g.n_inv_freq;
    float *inv = vr_rope_inv_freq(head_dim, cases[c].theta, cases[c].type, cases[c].factor, cases[c].lo,
                                  cases[c].hi, cases[c].orig);
    for (int i = 0; i < g.n_inv_freq; i++) {
      double d = fabs((double)inv[i] - g.inv_freq[i]) / g.inv_freq[i];
      if (!(d <= MT_TOL_ROPE))
        fail_msg("%s inv_freq[%d] = %.9g, transformers %.9g", cases[c].name, i, inv[i], g.inv_freq[i]);
    }
    free(inv);
    mt_golden_free(&g);
  }
}

/* transformers 4 wrote RoPE as "rope_scaling" + top-level "rope_theta": same scores. */
static void test_transformers4_config(void **state) {
  (void)state;
  char src[1200], tmp[1200], path[1300], target[1300];
  mt_model_path(src, sizeof src, "llama3_mqa");
  mt_tmpdir(tmp, sizeof tmp);
  char *cfgtext = mt_read_file((snprintf(path, sizeof path, "%s/config.json", src), path), NULL);
  cJSON *cfg = cJSON_Parse(cfgtext);
  free(cfgtext);
  cJSON *rp = cJSON_DetachItemFromObject(cfg, "rope_parameters");
  assert_non_null(rp);
  cJSON *theta = cJSON_DetachItemFromObject(rp, "rope_theta");
  cJSON_AddItemToObject(cfg, "rope_theta", theta);
  cJSON *type = cJSON_DetachItemFromObject(rp, "rope_type");
  cJSON_AddItemToObject(rp, "type", type); /* the oldest spelling */
  cJSON_AddItemToObject(cfg, "rope_scaling", rp);
  char *out = cJSON_Print(cfg);
  snprintf(path, sizeof path, "%s/config.json", tmp);
  mt_write_file(path, out, strlen(out));
  free(out);
  cJSON_Delete(cfg);
  snprintf(path, sizeof path, "%s/model.safetensors", tmp);
  snprintf(target, sizeof target, "%s/model.safetensors", src);
  char abs_target[PATH_MAX];
  assert_non_null(realpath(target, abs_target));
  assert_int_equal(symlink(abs_target, path), 0);

  mt_golden_t g;
  mt_golden_load(src, &g);
  vr_model_t *m = load(tmp, 0, 0);
  float *s = calloc(g.n_seqs, sizeof *s);
  score_packed(m, &g, s);
  double d = mt_max_rel(s, g.scores, g.n_seqs);
  printf("llama3_mqa with a transformers-4 config: vs transformers %.2e\n", d);
  assert_true(d <= MT_TOL_TRANSFORMERS);
  free(s);
  vr_model_free(m);
  mt_golden_free(&g);
  mt_tmpdir_remove(tmp);
}

int main(void) {
  vr_log_set_level(VR_LOG_WARN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_fixture),
      cmocka_unit_test(test_rope_tables),
      cmocka_unit_test(test_transformers4_config),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
