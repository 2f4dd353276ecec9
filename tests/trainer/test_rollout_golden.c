/* test_rollout_golden.c: the rollout engine on the causal-LM fixtures (tests/fixtures/lm/<name>,
 * loaded through vr_lm) against transformers (tests/fixtures/lm_gen/<name>.json, written by
 * tools/fixtures/make_gen_fixtures.py: greedy generate() in float32 and float64 log-probs):
 *  - greedy: every prompt in one batch, EOS ids from generation_config.json; tokens equal
 *    token for token while transformers' top-1/top-2 margin exceeds 1e-3, log-probs (temperature 1)
 *    within 2e-5 of the float64 ones on those tokens;
 *  - temperature 0.7 with top_k 1: the same tokens, log-probs of the 0.7-scaled distribution;
 *  - a cache of a few blocks (waiting and preemption) gives bit-identical outputs;
 *  - a weight update from a buffer equals loading the saved checkpoint of those weights. */
#include <cjson/cJSON.h>
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

#include "trainer_test_util.h"
#include "vr_lm.h"
#include "vr_gencfg.h"
#include "vr_rollout_lm.h"
#include "vr_train.h"

typedef struct golden {
  cJSON *doc;
  uint32_t n;        /* prompts */
  int32_t ids[4096];
  uint32_t cu[64];
  int max_new;
} golden_t;

static void load_golden(const char *name, golden_t *g) {
  char path[4096], rel[256];
  snprintf(rel, sizeof rel, "lm_gen/%s.json", name);
  tt_fixture(path, sizeof path, rel);
  size_t len;
  char *text = tt_read(path, &len);
  g->doc = cJSON_ParseWithLength(text, len);
  free(text);
  assert_non_null(g->doc);
  g->max_new = cJSON_GetObjectItem(g->doc, "max_new_tokens")->valueint;
  const cJSON *cases = cJSON_GetObjectItem(g->doc, "cases");
  g->n = 0;
  g->cu[0] = 0;
  for (const cJSON *c = cases->child; c; c = c->next, g->n++) {
    uint32_t k = g->cu[g->n];
    for (const cJSON *t = cJSON_GetObjectItem(c, "prompt")->child; t; t = t->next) g->ids[k++] = t->valueint;
    g->cu[g->n + 1] = k;
  }
}

static const cJSON *gcase(const golden_t *g, uint32_t i) { return cJSON_GetArrayItem(cJSON_GetObjectItem(g->doc, "cases"), (int)i); }

/* Compares o (responses in prompt order) with the goldens; lp_key "logprobs_t1" or "logprobs_t07". */
static void compare(const golden_t *g, const vr_gen_output_t *o, const char *lp_key, const char *name) {
  int tokens = 0, stopped_early = 0;
  double worst = 0;
  assert_int_equal(o->n_resp, g->n);
  for (uint32_t i = 0; i < g->n; i++) {
    const cJSON *c = gcase(g, i);
    const cJSON *out = cJSON_GetObjectItem(c, "output_ids"), *mar = cJSON_GetObjectItem(c, "margins"),
                *lp = cJSON_GetObjectItem(c, lp_key);
    const uint32_t n_gold = (uint32_t)cJSON_GetArraySize(out), n = o->cu[i + 1] - o->cu[i];
    uint32_t t = 0;
    for (; t < n_gold; t++) {
      if (cJSON_GetArrayItem(mar, (int)t)->valuedouble <= 1e-3) break; /* a near tie: stop comparing */
      assert_true(t < n);
      const int32_t want = cJSON_GetArrayItem(out, (int)t)->valueint, got = o->tokens[o->cu[i] + t];
      if (want != got) fprintf(stderr, "%s prompt %u token %u: want %d got %d\n", name, i, t, want, got);
      assert_int_equal(got, want);
      const double d = fabs(o->logprobs[o->cu[i] + t] - cJSON_GetArrayItem(lp, (int)t)->valuedouble);
      if (d > worst) worst = d;
      assert_true(d < 2e-5);
      tokens++;
    }
    if (t == n_gold) assert_int_equal(n, n_gold); /* same length when every token was compared */
    else stopped_early++;
  }
  printf("%s (%s): %d tokens equal to transformers' generate, %d prompts cut at a near tie, worst log-prob diff %.2e\n",
         name, lp_key, tokens, stopped_early, worst);
  assert_true(tokens >= 100);
}

static void expect_same(const vr_gen_output_t *a, const vr_gen_output_t *b) {
  assert_int_equal(a->n_resp, b->n_resp);
  assert_memory_equal(a->cu, b->cu, (a->n_resp + 1) * sizeof *a->cu);
  assert_memory_equal(a->tokens, b->tokens, a->cu[a->n_resp] * sizeof *a->tokens);
  assert_memory_equal(a->logprobs, b->logprobs, a->cu[a->n_resp] * sizeof *a->logprobs);
}

/* The PPO ratio starts at 1: sampled responses' log-probs equal the training engine's
 * (vr_train_forward at the same temperature on prompt + response, response tokens masked in).
 * lm holds the weights r generates with. */
static void check_training_engine(const vr_lm_t *lm, vr_rollout_t *r, const golden_t *g, const vr_gen_params_t *gp0,
                                  const char *name) {
  vr_train_options_t to;
  vr_train_options_init(&to);
  to.n_threads = 2;
  vr_train_t *t = NULL;
  assert_int_equal(vr_train_init(lm, &to, &t), 0);
  const struct { float T; int k; float p; } modes[] = {{0.0f, -1, 1.0f}, {1.0f, -1, 1.0f}, {0.7f, 40, 0.9f}};
  double worst = 0;
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
    vr_gen_params_t gp = *gp0;
    gp.sample.temperature = modes[m].T, gp.sample.top_k = modes[m].k, gp.sample.top_p = modes[m].p;
    gp.n = 2;
    gp.seed = 11 + m;
    vr_gen_output_t o;
    assert_int_equal(vr_rollout_generate(r, g->ids, g->cu, g->n, &gp, &o), 0);
    /* one packed batch: prompt + response of every response */
    size_t T = 0;
    for (uint32_t i = 0; i < o.n_resp; i++) T += g->cu[i / 2 + 1] - g->cu[i / 2] + o.cu[i + 1] - o.cu[i];
    int32_t *ids = malloc(T * sizeof *ids);
    uint8_t *mask = calloc(T, 1);
    uint32_t *cu = malloc((o.n_resp + 1) * sizeof *cu);
    float *out = malloc(T * sizeof *out);
    cu[0] = 0;
    for (uint32_t i = 0; i < o.n_resp; i++) {
      const uint32_t p = i / 2, pl = g->cu[p + 1] - g->cu[p], n = o.cu[i + 1] - o.cu[i];
      memcpy(ids + cu[i], g->ids + g->cu[p], pl * sizeof *ids);
      memcpy(ids + cu[i] + pl, o.tokens + o.cu[i], n * sizeof *ids);
      memset(mask + cu[i] + pl, 1, n);
      cu[i + 1] = cu[i] + pl + n;
    }
    vr_train_batch_t b = {.ids = ids, .cu_seqlens = cu, .n_seqs = o.n_resp, .mask = mask};
    assert_int_equal(vr_train_forward(t, &b, modes[m].T > 0 ? modes[m].T : 1.0f, out, NULL, 0), 0);
    for (uint32_t i = 0; i < o.n_resp; i++) {
      const uint32_t pl = g->cu[i / 2 + 1] - g->cu[i / 2];
      for (uint32_t k = 0; k < o.cu[i + 1] - o.cu[i]; k++) {
        const double d = fabs(out[cu[i] + pl + k] - o.logprobs[o.cu[i] + k]);
        if (d > worst) worst = d;
        assert_true(d < 1e-5);
      }
    }
    free(ids), free(mask), free(cu), free(out);
    vr_gen_output_free(&o);
  }
  printf("%s: rollout log-probs (greedy, T 1, T 0.7 top-k 40 top-p 0.9) equal the training engine's within %.2e\n",
         name, worst);
  vr_train_free(t);
}

static void run_model(const char *name) {
  char dir[4096], rel[256];
  snprintf(rel, sizeof rel, "lm/%s", name);
  tt_fixture(dir, sizeof dir, rel);
  vr_lm_t *lm = NULL;
  assert_int_equal(vr_lm_load(dir, NULL, &lm), 0);
  golden_t g;
  load_golden(name, &g);
  int32_t eos[8];
  uint32_t n_eos = 0;
  assert_int_equal(vr_gencfg_eos_ids(dir, vr_lm_config(lm)->vocab_size, eos, 8, &n_eos), 0);
  assert_int_equal(n_eos, (uint32_t)cJSON_GetArraySize(cJSON_GetObjectItem(g.doc, "eos_token_id")));
  vr_rollout_options_t opt;
  vr_rollout_options_init(&opt);
  opt.n_threads = 2;
  opt.kv_cache_bytes = 1 << 20;
  vr_rollout_lm_t view;
  vr_rollout_t *r;
  assert_int_equal(vr_rollout_from_lm(lm, &opt, &view, &r), 0);
  vr_gen_params_t gp;
  vr_gen_params_init(&gp);
  gp.max_new_tokens = (uint32_t)g.max_new;
  gp.stop_ids = eos;
  gp.n_stop = n_eos;
  vr_gen_output_t greedy, t07, small;
  assert_int_equal(vr_rollout_generate(r, g.ids, g.cu, g.n, &gp, &greedy), 0);
  compare(&g, &greedy, "logprobs_t1", name);
  vr_gen_params_t gp7 = gp;
  gp7.sample.temperature = 0.7f;
  gp7.sample.top_k = 1;
  assert_int_equal(vr_rollout_generate(r, g.ids, g.cu, g.n, &gp7, &t07), 0);
  compare(&g, &t07, "logprobs_t07", name);
  assert_memory_equal(t07.tokens, greedy.tokens, greedy.cu[greedy.n_resp] * sizeof(int32_t));
  /* 8 blocks of 8 tokens, 3 sequences per step, 16-token prefill chunks */
  vr_rollout_options_t tiny = opt;
  tiny.block_size = 8;
  tiny.kv_cache_bytes = 8 * vr_rollout_block_bytes(&view.cfg, 8, 4);
  tiny.max_seqs = 3;
  tiny.max_batch_tokens = 16;
  vr_rollout_lm_t view2;
  vr_rollout_t *r2;
  assert_int_equal(vr_rollout_from_lm(lm, &tiny, &view2, &r2), 0);
  assert_int_equal(vr_rollout_generate(r2, g.ids, g.cu, g.n, &gp, &small), 0);
  printf("%s: tiny cache: %llu preemptions, %llu prefill calls\n", name, (unsigned long long)small.stats.preemptions,
         (unsigned long long)small.stats.prefill_calls);
  assert_true(small.stats.preemptions > 0);
  expect_same(&greedy, &small);
  vr_gen_output_free(&small);
  vr_rollout_free(r2);
  vr_rollout_lm_view_free(&view2);

  /* weight update == reload: new weights (the old ones scaled) set from a buffer, and saved + loaded */
  const size_t nf = vr_lm_n_floats(lm);
  float *nw = malloc(nf * sizeof *nw);
  assert_int_equal(vr_lm_get_params(lm, nw, nf), 0);
  for (size_t i = 0; i < nf; i++) nw[i] *= 1.0f + 0.25f * (float)((i * 2654435761u) % 1000) / 1000.0f;
  double secs = -1;
  assert_int_equal(vr_rollout_set_params(r, nw, nf, &secs), 0);
  assert_true(secs >= 0);
  vr_gen_params_t gps = gp;
  gps.sample.temperature = 0.9f;
  gps.n = 2;
  gps.seed = 3;
  vr_gen_output_t upd, upd_s, rel_g, rel_s;
  assert_int_equal(vr_rollout_generate(r, g.ids, g.cu, g.n, &gp, &upd), 0);
  assert_int_equal(vr_rollout_generate(r, g.ids, g.cu, g.n, &gps, &upd_s), 0);
  assert_int_equal(vr_lm_set_params(lm, nw, nf), 0);
  char tmp[] = "/tmp/vr_rollout_golden_XXXXXX";
  assert_non_null(mkdtemp(tmp));
  assert_int_equal(vr_lm_save(lm, tmp), 0);
  vr_lm_t *lm2 = NULL;
  assert_int_equal(vr_lm_load(tmp, NULL, &lm2), 0);
  vr_rollout_lm_t view3;
  vr_rollout_t *r3;
  assert_int_equal(vr_rollout_from_lm(lm2, &opt, &view3, &r3), 0);
  assert_int_equal(vr_rollout_generate(r3, g.ids, g.cu, g.n, &gp, &rel_g), 0);
  assert_int_equal(vr_rollout_generate(r3, g.ids, g.cu, g.n, &gps, &rel_s), 0);
  expect_same(&upd, &rel_g);
  expect_same(&upd_s, &rel_s);
  assert_true(memcmp(upd.tokens, greedy.tokens, (upd.cu[upd.n_resp] < greedy.cu[greedy.n_resp] ? upd.cu[upd.n_resp] : greedy.cu[greedy.n_resp]) * sizeof(int32_t)) != 0);
  printf("%s: weight update of %zu floats in %.3f ms equals the reloaded checkpoint\n", name, nf, secs * 1e3);
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  assert_int_equal(system(cmd), 0);
  vr_gen_output_free(&upd), vr_gen_output_free(&upd_s), vr_gen_output_free(&rel_g), vr_gen_output_free(&rel_s);
  vr_rollout_free(r3);
  vr_rollout_lm_view_free(&view3);
  vr_lm_free(lm2);
  free(nw);

  check_training_engine(lm, r, &g, &gp, name);
  vr_gen_output_free(&greedy), vr_gen_output_free(&t07);
  vr_rollout_free(r);
  vr_rollout_lm_view_free(&view);
  vr_lm_free(lm);
  cJSON_Delete(g.doc);
}

static void test_llama(void **st) {
  (void)st;
  run_model("llama_lm");
}
static void test_qwen2(void **st) {
  (void)st;
  run_model("qwen2_lm");
}
static void test_mistral(void **st) {
  (void)st;
  run_model("mistral_lm");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_llama),
      cmocka_unit_test(test_qwen2),
      cmocka_unit_test(test_mistral),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
