/* Bad inputs get a per-sequence error and never disturb the good sequences of the
 * same call: token id out of range, empty sequence, sequence past the position
 * limit (roberta: max_position_embeddings - padding_idx - 1), bad call arguments. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "model_test_util.h"
#include "verl_reward/status.h"
#include "vr_log.h"
#include "vr_model.h"

static vr_model_t *load(const char *name, uint32_t max_batch_tokens) {
  char dir[1200];
  mt_model_path(dir, sizeof dir, name);
  vr_model_options_t opt;
  vr_model_options_init(&opt);
  opt.n_threads = 1;
  opt.max_batch_tokens = max_batch_tokens;
  vr_model_t *m = NULL;
  assert_int_equal(vr_model_load(dir, &opt, &m), 0);
  return m;
}

/* One call with good and bad sequences mixed; the good ones match their golden scores. */
static void check_mixed(const char *name, int limit) {
  char dir[1200];
  mt_model_path(dir, sizeof dir, name);
  mt_golden_t g;
  mt_golden_load(dir, &g);
  vr_model_t *m = load(name, 0);
  const vr_model_info_t *info = vr_model_info(m);
  assert_int_equal(info->max_positions, limit);
  int V = info->vocab_size;
  /* sequences: good0 | id == V | empty | good1 | id -1 | limit + 1 tokens | exactly limit (ok) */
  uint32_t len_good0 = g.cu[1] - g.cu[0], len_good1 = g.cu[2] - g.cu[1];
  uint32_t lens[7] = {len_good0, 3, 0, len_good1, 2, (uint32_t)limit + 1, (uint32_t)limit};
  uint32_t cu[8] = {0};
  for (int i = 0; i < 7; i++) cu[i + 1] = cu[i] + lens[i];
  int32_t *ids = calloc(cu[7], sizeof *ids);
  memcpy(ids + cu[0], g.ids + g.cu[0], len_good0 * sizeof *ids);
  ids[cu[1]] = 1, ids[cu[1] + 1] = V, ids[cu[1] + 2] = 2;
  memcpy(ids + cu[3], g.ids + g.cu[1], len_good1 * sizeof *ids);
  ids[cu[4]] = 3, ids[cu[4] + 1] = -1;
  for (uint32_t i = cu[5]; i < cu[7]; i++) ids[i] = (int32_t)(5 + i % 7);
  float scores[7];
  int32_t st[7];
  assert_int_equal(vr_model_score(m, ids, cu, 7, scores, st), 0);
  int32_t want[7] = {0, VR_ERR_TOKEN_RANGE, VR_ERR_EMPTY_SEQ, 0, VR_ERR_TOKEN_RANGE, VR_ERR_SEQ_TOO_LONG, 0};
  for (int i = 0; i < 7; i++) {
    if (st[i] != want[i]) fail_msg("%s: sequence %d: status %s, want %s", name, i, vr_status_name(st[i]),
                                   vr_status_name(want[i]));
    assert_true(want[i] == 0 ? isfinite(scores[i]) : isnan(scores[i]));
  }
  assert_true(mt_rel_err(scores[0], g.scores[0]) <= MT_TOL_TRANSFORMERS);
  assert_true(mt_rel_err(scores[3], g.scores[1]) <= MT_TOL_TRANSFORMERS);
  /* vr_model_check_seq agrees */
  assert_int_equal(vr_model_check_seq(m, ids + cu[1], 3), VR_ERR_TOKEN_RANGE);
  assert_int_equal(vr_model_check_seq(m, ids, 0), VR_ERR_EMPTY_SEQ);
  assert_int_equal(vr_model_check_seq(m, ids + cu[5], lens[5]), VR_ERR_SEQ_TOO_LONG);
  assert_int_equal(vr_model_check_seq(m, ids + cu[6], lens[6]), 0);
  free(ids);
  vr_model_free(m);
  mt_golden_free(&g);
}

static void test_bert_inputs(void **state) {
  (void)state;
  check_mixed("bert", 40);
}
static void test_roberta_inputs(void **state) {
  (void)state;
  check_mixed("roberta", 42 - 1 - 1); /* max_position_embeddings - padding_idx - 1 */
}
static void test_llama_inputs(void **state) {
  (void)state;
  check_mixed("llama_gqa", 48);
}

/* A small max_batch_tokens also caps the accepted length (the model cannot split a sequence). */
static void test_batch_token_cap(void **state) {
  (void)state;
  vr_model_t *m = load("mistral_swa", 10);
  assert_int_equal(vr_model_info(m)->max_positions, 10);
  int32_t ids[11] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  assert_int_equal(vr_model_check_seq(m, ids, 10), 0);
  assert_int_equal(vr_model_check_seq(m, ids, 11), VR_ERR_SEQ_TOO_LONG);
  /* many sequences over several forwards */
  uint32_t cu[6] = {0, 10, 11, 14, 20, 21};
  int32_t many[21];
  for (int i = 0; i < 21; i++) many[i] = (i * 13) % 97;
  float s[5];
  int32_t st[5];
  assert_int_equal(vr_model_score(m, many, cu, 5, s, st), 0);
  for (int i = 0; i < 5; i++) {
    assert_int_equal(st[i], 0);
    float one;
    uint32_t c1[2] = {0, cu[i + 1] - cu[i]};
    assert_int_equal(vr_model_score(m, many + cu[i], c1, 1, &one, NULL), 0);
    assert_true(mt_rel_err(s[i], one) <= MT_TOL_CPU_BATCH);
  }
  vr_model_free(m);
}

static void test_bad_arguments(void **state) {
  (void)state;
  vr_model_t *m = load("bert", 0);
  int32_t ids[4] = {1, 2, 3, 4};
  float s[2];
  uint32_t bad_start[3] = {1, 2, 4}, decreasing[3] = {0, 3, 2}, ok[3] = {0, 2, 4};
  assert_int_equal(vr_model_score(m, ids, bad_start, 2, s, NULL), VR_ERR_INVAL);
  assert_int_equal(vr_model_score(m, ids, decreasing, 2, s, NULL), VR_ERR_INVAL);
  assert_int_equal(vr_model_score(m, NULL, ok, 2, s, NULL), VR_ERR_INVAL);
  assert_int_equal(vr_model_score(m, ids, NULL, 2, s, NULL), VR_ERR_INVAL);
  assert_int_equal(vr_model_score(m, ids, ok, 2, NULL, NULL), VR_ERR_INVAL);
  assert_int_equal(vr_model_score(m, ids, ok, 0, s, NULL), 0);
  assert_int_equal(vr_model_score(m, ids, ok, 2, s, NULL), 0);
  assert_true(isfinite(s[0]) && isfinite(s[1]));
  assert_int_equal(vr_model_load(NULL, NULL, NULL), VR_ERR_INVAL);
  vr_model_free(m);
  vr_model_free(NULL);
}

int main(void) {
  vr_log_set_level(VR_LOG_WARN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bert_inputs),
      cmocka_unit_test(test_roberta_inputs),
      cmocka_unit_test(test_llama_inputs),
      cmocka_unit_test(test_batch_token_cap),
      cmocka_unit_test(test_bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
