/* train_test_util.h: helpers of the training-engine tests (fixtures under tests/fixtures/lm/,
 * goldens from tools/fixtures/make_lm_fixtures.py). Failures abort the test (cmocka). */
#ifndef TRAIN_TEST_UTIL_H
#define TRAIN_TEST_UTIL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "vr_lm.h"
#include "vr_train.h"

/* A golden.json with its sequences packed: ids (T), cu (n + 1). */
typedef struct tr_golden {
  cJSON *root;
  int32_t *ids;
  uint32_t *cu, n, T;
  float *grads;        /* grads.bin */
  size_t n_grads;
  char dir[1024];
} tr_golden_t;

void tr_fixture_dir(char *path, size_t cap, const char *name); /* tests/fixtures/lm/<name> */
void tr_golden_load(const char *name, tr_golden_t *g);
void tr_golden_free(tr_golden_t *g);
/* Per-sequence list key (e.g. "logprobs_t1": lists of n-1 values) flattened onto token rows:
 * out[cu[q] + 1 + i] = list[q][i] (shift 1) or out[cu[q] + i] (shift 0); other rows 0. */
void tr_golden_rows(const cJSON *lists, const tr_golden_t *g, int shift, double *out);
/* Max relative error per tensor of grads (n_floats, lm layout) against grads set `set` of the
 * golden, as max |a - b| / max |b| over the tensor; every lm tensor must be in the set and
 * vice versa. Prints the worst tensors; returns the max over tensors. */
double tr_grads_check(const vr_lm_t *lm, const float *grads, const tr_golden_t *g, const char *set);
/* Max over tensors of max |a - b| / max |b| (b the reference; a tensor of zeros: max |a - b|),
 * both in lm's layout; *worst (may be NULL) names the worst tensor. */
double tr_grads_vs(const vr_lm_t *lm, const float *a, const float *b, const char **worst);
/* tests/fixtures/lm/<name> loaded with the given head (value heads seeded 1); aborts on failure. */
vr_lm_t *tr_lm_load(const char *name, vr_lm_head_t head);
/* max |got[i] - want[i]| over n values. */
double tr_max_abs_diff(const float *got, const double *want, uint32_t n);
/* Log-probs and entropy of the golden's sequences (one packed batch) at temperature tau against
 * the golden's lp_key / ent_key lists: each max |diff| must be <= tol (printed with tag). */
void tr_check_logprobs(vr_train_t *t, tr_golden_t *g, const char *lp_key, const char *ent_key, float tau, double tol,
                       const char *tag);
/* An engine for lm with defaults and the given threads / recompute / vocab chunk. */
vr_train_t *tr_engine(const vr_lm_t *lm, int threads, int recompute, size_t vchunk);

#endif
