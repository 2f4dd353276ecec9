/* rollout_test_model.h: a random causal LM for the rollout engine's CUDA test and benchmark
 * (test_cuda_rollout.c, cuda_rollout_bench.c): a vr_model_config_t (Llama layout; qwen2-style
 * q/k/v biases; tied or separate LM head; sliding window), every parameter in one fp32 buffer and
 * trainer/vr_rollout.h's weights view pointing into it. Values are a pure function of (seed,
 * index), filled in parallel when OpenMP is on. Header-only (static). */
#ifndef ROLLOUT_TEST_MODEL_H
#define ROLLOUT_TEST_MODEL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vr_config.h"
#include "vr_rollout.h"

typedef struct {
  vr_model_config_t cfg;
  float *params;
  size_t n;
  vr_rollout_weights_t w;
  vr_rollout_layer_w_t *layers;
} tmodel_t;

/* Uniform in [-1, 1) from (seed, i) (splitmix64). */
static inline float tmodel_u(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (float)((double)(z >> 40) * (2.0 / 16777216.0) - 1.0);
}

/* n values bias + amp * u(seed, off + i) at params + *off; advances *off. */
static inline float *tmodel_take(tmodel_t *m, uint64_t seed, size_t *off, size_t n, float amp, float bias) {
  float *p = m->params + *off;
  const size_t o = *off;
#pragma omp parallel for schedule(static) if (n > (1u << 20))
  for (long long i = 0; i < (long long)n; ++i) p[i] = bias + amp * tmodel_u(seed, o + (uint64_t)i);
  *off += n;
  return p;
}

/* amp: amplitude of the linear weights (<= 0: 1.7 / sqrt(fan_in)); emb_amp: of the embeddings.
 * Returns 0, or -1 when out of memory (nothing to free then). */
static inline int tmodel_make(tmodel_t *m, int V, int C, int L, int H, int KV, int D, int F, int tied, int bias,
                              int window, uint64_t seed, float amp, float emb_amp) {
  memset(m, 0, sizeof *m);
  vr_model_config_t *c = &m->cfg;
  c->arch = bias ? VR_ARCH_QWEN2 : VR_ARCH_LLAMA;
  c->is_decoder = 1;
  c->vocab_size = V, c->hidden_size = C, c->num_layers = L, c->num_heads = H, c->num_kv_heads = KV;
  c->head_dim = D, c->intermediate_size = F, c->max_position_embeddings = 4096, c->max_seq_len = 4096;
  c->num_labels = 1, c->norm_eps = 1e-5f, c->act = VR_ACT_SILU, c->pad_token_id = -1;
  c->attention_bias = bias, c->tie_word_embeddings = tied, c->sliding_window = window;
  c->rope_theta = 10000.f;
  c->rope_inv_freq = vr_rope_inv_freq(D, 10000.f, "default", 1.f, 1.f, 1.f, 4096.f);
  c->rope_attention_scaling = 1.f;
  const size_t nqkv = (size_t)(H + 2 * KV) * D;
  const size_t per_layer = nqkv * C + (size_t)C * H * D + 3 * (size_t)F * C + 2 * (size_t)C + nqkv;
  m->n = (size_t)V * C * (tied ? 1 : 2) + C + (size_t)L * per_layer;
  m->params = (float *)malloc(m->n * sizeof(float));
  m->layers = (vr_rollout_layer_w_t *)calloc(L, sizeof *m->layers);
  if (!m->params || !m->layers || !c->rope_inv_freq) {
    free(m->params), free(m->layers), free(c->rope_inv_freq);
    memset(m, 0, sizeof *m);
    return -1;
  }
  size_t off = 0;
  m->w.tok_emb = tmodel_take(m, seed, &off, (size_t)V * C, emb_amp, 0.f);
  m->w.final_norm_w = tmodel_take(m, seed, &off, C, 0.1f, 1.f);
  m->w.lm_head = tied ? m->w.tok_emb : tmodel_take(m, seed, &off, (size_t)V * C, emb_amp, 0.f);
  const float sc = amp > 0 ? amp : 1.7f / sqrtf((float)C), sf = amp > 0 ? amp : 1.7f / sqrtf((float)F);
  for (int l = 0; l < L; ++l) {
    vr_rollout_layer_w_t *y = &m->layers[l];
    y->q_w = tmodel_take(m, seed, &off, (size_t)H * D * C, sc, 0.f);
    y->k_w = tmodel_take(m, seed, &off, (size_t)KV * D * C, sc, 0.f);
    y->v_w = tmodel_take(m, seed, &off, (size_t)KV * D * C, sc, 0.f);
    y->o_w = tmodel_take(m, seed, &off, (size_t)C * H * D, sc, 0.f);
    y->norm1_w = tmodel_take(m, seed, &off, C, 0.1f, 1.f);
    y->norm2_w = tmodel_take(m, seed, &off, C, 0.1f, 1.f);
    y->gate_w = tmodel_take(m, seed, &off, (size_t)F * C, sc, 0.f);
    y->up_w = tmodel_take(m, seed, &off, (size_t)F * C, sc, 0.f);
    y->down_w = tmodel_take(m, seed, &off, (size_t)C * F, sf, 0.f);
    float *b = tmodel_take(m, seed, &off, nqkv, 0.3f, 0.f);
    if (bias) y->q_b = b, y->k_b = b + (size_t)H * D, y->v_b = b + (size_t)(H + KV) * D;
  }
  m->w.layers = m->layers;
  return 0;
}

static inline void tmodel_free(tmodel_t *m) {
  free(m->params);
  free(m->layers);
  free(m->cfg.rope_inv_freq);
  memset(m, 0, sizeof *m);
}

#endif /* ROLLOUT_TEST_MODEL_H */
