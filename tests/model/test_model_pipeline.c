/* vr_model_submit / vr_model_collect (cpu backend, synchronous fallback): every batch of
 * fresh random sequences, some of them bad, gets the statuses vr_model_score gives for the
 * same batch and its scores within MT_TOL_CPU_BATCH; collect returns batches oldest first;
 * the limits (max_inflight, max tokens, max sequences) and bad calls are refused without
 * leaving anything outstanding. */
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
#include "vr_model.h"
#include "vr_test_seed.h"

#define MAX_TOKENS 256u
#define MAX_SEQS 8u

static vr_model_t *load(const char *name) {
  char dir[1200];
  mt_model_path(dir, sizeof dir, name);
  vr_model_options_t opt;
  vr_model_options_init(&opt);
  opt.n_threads = 1;
  opt.max_batch_tokens = MAX_TOKENS;
  opt.max_seqs = MAX_SEQS;
  vr_model_t *m = NULL;
  assert_int_equal(vr_model_load(dir, &opt, &m), 0);
  return m;
}

typedef struct batch {
  uint32_t n, cu[MAX_SEQS + 1];
  int32_t ids[MAX_TOKENS];
  float scores[MAX_SEQS];
  int32_t status[MAX_SEQS];
} batch_t;

/* n random sequences (1..max_len tokens, <= MAX_TOKENS in all); with `bad`, sequence 1
 * gets an out-of-vocabulary id and sequence 2 (when n > 2) is empty. */
static void make_batch(batch_t *b, const vr_model_info_t *info, unsigned *seed, uint32_t n, int bad) {
  b->n = n;
  b->cu[0] = 0;
  uint32_t room = MAX_TOKENS / n, maxl = (uint32_t)info->max_positions < room ? (uint32_t)info->max_positions : room;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t len = 1 + (uint32_t)rand_r(seed) % maxl;
    if (bad && i == 2) len = 0;
    for (uint32_t t = 0; t < len; t++) b->ids[b->cu[i] + t] = (int32_t)((uint32_t)rand_r(seed) % (uint32_t)info->vocab_size);
    if (bad && i == 1) b->ids[b->cu[i]] = info->vocab_size;
    b->cu[i + 1] = b->cu[i] + len;
  }
  for (uint32_t i = 0; i < n; i++) b->scores[i] = -12345.f, b->status[i] = 777; /* poison */
}

/* Pipelines rounds of batches through submit/collect (max_inflight outstanding) and
 * compares each with vr_model_score on the same batch. */
static void check_model(const char *name) {
  vr_model_t *m = load(name);
  const vr_model_info_t *info = vr_model_info(m);
  int inflight = vr_model_max_inflight(m);
  assert_true(inflight >= 1 && inflight <= 4);
  printf("%s: max_inflight %d\n", name, inflight);
  unsigned seed = (unsigned)vr_test_seed(name, 20240515);
  enum { ROUNDS = 6 };
  batch_t *b = calloc(ROUNDS, sizeof *b);
  for (int r = 0; r < ROUNDS; r++) make_batch(&b[r], info, &seed, 1 + (uint32_t)r % MAX_SEQS + (r == 5 ? 2 : 0), r % 3 == 2);
  int submitted = 0, collected = 0;
  while (collected < ROUNDS) {
    while (submitted < ROUNDS && submitted - collected < inflight) {
      batch_t *s = &b[submitted++];
      assert_int_equal(vr_model_submit(m, s->ids, s->cu, s->n, s->scores, s->status), 0);
    }
    assert_int_equal(vr_model_collect(m), 0);
    collected++;
  }
  assert_int_equal(vr_model_collect(m), VR_ERR_INVAL); /* nothing outstanding */
  for (int r = 0; r < ROUNDS; r++) {
    float want[MAX_SEQS];
    int32_t want_st[MAX_SEQS];
    assert_int_equal(vr_model_score(m, b[r].ids, b[r].cu, b[r].n, want, want_st), 0);
    for (uint32_t i = 0; i < b[r].n; i++) {
      if (want_st[i] != b[r].status[i])
        fail_msg("%s batch %d seq %u: status %d, vr_model_score %d", name, r, i, b[r].status[i], want_st[i]);
      if (want_st[i] != 0) {
        assert_true(isnan(b[r].scores[i]));
        continue;
      }
      if (!(mt_rel_err(b[r].scores[i], want[i]) <= MT_TOL_CPU_BATCH))
        fail_msg("%s batch %d seq %u: pipelined %.8g, vr_model_score %.8g", name, r, i, b[r].scores[i], want[i]);
    }
  }
  free(b);
  vr_model_free(m);
}

static void test_pipeline_roberta(void **state) {
  (void)state;
  check_model("roberta");
}
static void test_pipeline_llama(void **state) {
  (void)state;
  check_model("llama_gqa");
}

/* Limits and bad calls: refused, nothing left outstanding, the model still usable. */
static void test_pipeline_limits(void **state) {
  (void)state;
  vr_model_t *m = load("bert");
  const vr_model_info_t *info = vr_model_info(m);
  unsigned seed = 7;
  batch_t a, c;
  make_batch(&a, info, &seed, 2, 0);
  /* too many tokens / sequences for one batch */
  static int32_t big_ids[MAX_TOKENS + 1];
  uint32_t big_cu[2] = {0, MAX_TOKENS + 1};
  float sc[MAX_SEQS + 1];
  assert_int_equal(vr_model_submit(m, big_ids, big_cu, 1, sc, NULL), VR_ERR_TOO_LARGE);
  uint32_t many_cu[MAX_SEQS + 2];
  for (uint32_t i = 0; i < MAX_SEQS + 2; i++) many_cu[i] = i;
  assert_int_equal(vr_model_submit(m, big_ids, many_cu, MAX_SEQS + 1, sc, NULL), VR_ERR_TOO_LARGE);
  uint32_t bad_cu[3] = {1, 2, 3};
  assert_int_equal(vr_model_submit(m, a.ids, bad_cu, 2, a.scores, NULL), VR_ERR_INVAL);
  assert_int_equal(vr_model_submit(m, a.ids, a.cu, 2, NULL, NULL), VR_ERR_INVAL);
  assert_int_equal(vr_model_collect(m), VR_ERR_INVAL);
  /* fill the pipeline: one more is BUSY, and vr_model_score waits for the caller to collect */
  int inflight = vr_model_max_inflight(m);
  batch_t *q = calloc((size_t)inflight, sizeof *q);
  for (int i = 0; i < inflight; i++) {
    make_batch(&q[i], info, &seed, 3, 0);
    assert_int_equal(vr_model_submit(m, q[i].ids, q[i].cu, 3, q[i].scores, q[i].status), 0);
  }
  make_batch(&c, info, &seed, 1, 0);
  assert_int_equal(vr_model_submit(m, c.ids, c.cu, 1, c.scores, c.status), VR_ERR_BUSY);
  assert_int_equal(vr_model_score(m, c.ids, c.cu, 1, c.scores, c.status), VR_ERR_BUSY);
  for (int i = 0; i < inflight; i++) assert_int_equal(vr_model_collect(m), 0);
  /* an empty batch is one outstanding batch too */
  assert_int_equal(vr_model_submit(m, NULL, a.cu, 0, a.scores, NULL), 0);
  assert_int_equal(vr_model_collect(m), 0);
  assert_int_equal(vr_model_collect(m), VR_ERR_INVAL);
  /* left outstanding at free: drained by vr_model_free (ASan sees no leak or bad access) */
  assert_int_equal(vr_model_submit(m, a.ids, a.cu, 2, a.scores, a.status), 0);
  free(q);
  vr_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pipeline_roberta),
      cmocka_unit_test(test_pipeline_llama),
      cmocka_unit_test(test_pipeline_limits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
