/* rollout_test_util.h: tiny random causal LMs built in memory for the rollout tests, and a naive
 * dense reference forward (double accumulation, written for clarity: a second implementation of
 * transformers' Llama/Qwen2/Mistral math to check the paged engine against). */
#ifndef ROLLOUT_TEST_UTIL_H
#define ROLLOUT_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "vr_rollout.h"

/* For the multi-process (mpirun) rollout tests, where cmocka's per-process runner does not fit:
 * a failed check names the file, line and condition and exits 1 (the job's verdict is every
 * rank's exit status). */
#define RT_CHECK(cond)                                                                 \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);          \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

typedef struct rt_shape {
  int vocab, hidden, layers, heads, kv_heads, head_dim, inter, max_pos;
  int qkv_bias, tied, sliding_window;
} rt_shape_t;

typedef struct rt_model {
  vr_model_config_t cfg;   /* cfg.rope_inv_freq owned */
  float *params;           /* one buffer, the view points into it */
  size_t n_params;
  vr_rollout_layer_w_t *layers;
  vr_rollout_weights_t w;
} rt_model_t;

/* Weights ~ U(-scale, scale) from seed (norm weights around 1). */
void rt_model_random(rt_model_t *m, const rt_shape_t *s, uint64_t seed, float scale);
void rt_model_free(rt_model_t *m);

/* Logits (len, vocab) of every position of one sequence, dense causal attention in double. */
void rt_ref_logits(const rt_model_t *m, const int32_t *ids, int len, double *logits);

#endif
