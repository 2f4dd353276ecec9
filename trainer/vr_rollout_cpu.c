/* vr_rollout_cpu.c: the rollout's cpu backend (vr_rollout.h): fp32, the training backend's ops
 * (trainer/cpu/vr_tcpu_ops.h: linear on the deterministic GEMMs of model/cpu/vr_cpu_gemm.h, RMSNorm,
 * SwiGLU), its own RoPE at arbitrary positions and paged attention over a K/V pool allocated once
 * at init.
 *
 * One forward serves prefill and decode alike (a decode step is a prefill of one token per
 * sequence): embeddings, then per layer RMSNorm -> q/k/v (+ bias: qwen2) -> RoPE at each token's
 * position -> K/V written into the token's cache slot -> attention of each new token over its
 * sequence's cached positions (causal, mistral's sliding window) -> o_proj -> residual -> RMSNorm ->
 * SwiGLU MLP -> residual; the final RMSNorm and the LM head run on each sequence's last new token
 * only (n_seqs rows of vocab logits).
 *
 * Attention reads the keys of one KV head once for all the query heads of its group (GQA), position
 * by position from the block table, in a fixed order: a token's result is the same function of its
 * own inputs whether it is computed in a prefill of 500 tokens or a decode step of 1, in a batch of
 * 1 or 200, before or after a preemption (the GEMMs promise the same per row). So the engine's
 * outputs do not depend on how it batched them.
 *
 * Threading: opt->n_threads OpenMP threads split GEMM columns and the (token, KV head) pairs of the
 * attention; every output element is written by one thread. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/vr_cpu_gemm.h"
#include "vr_tcpu_ops.h" /* trainer/cpu: the training backend's ops */
#include "verl_reward/status.h"
#include "vr_log.h"
#include "vr_rollout.h"

#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct vr_rcpu {
  const vr_model_config_t *c;
  vr_rollout_options_t opt;
  int n_threads;
  vr_cpu_gemm_variant_t gemm;
  uint32_t num_blocks;
  /* weights: a private copy of the parameter buffer and the view rebased into it */
  float *params;
  size_t n_params;
  vr_rollout_weights_t w;
  vr_rollout_layer_w_t *layers;
  /* K/V pool: (L, num_blocks, block_size, KV * D) each */
  float *kpool, *vpool;
  size_t layer_stride; /* floats per layer in a pool */
  vr_tcpu_rope_tab_t rope;    /* (rope.n, D / 2): positions up to the longest context seen */
  /* workspace for max(max_batch_tokens, max_seqs) tokens */
  uint32_t ws_tokens;
  float *x, *h, *q, *k, *v, *att, *f1, *f2;
  uint32_t *pos, *seq;   /* (ws_tokens) position and sequence of each packed token */
  float *last;           /* (max_seqs, C) final-normed last rows */
  float *logits;         /* (max_seqs, V) */
  uint32_t n_logits;     /* rows valid in logits */
  float *scores;         /* n_threads * scores_n * group attention scratch */
  size_t scores_n;       /* positions per thread in scores: the longest context seen */
  float *pack;           /* GEMM packing scratch */
  float *rstd;           /* (ws_tokens) RMSNorm scratch */
  vr_tcpu_ctx_t ops;     /* the training backend's cpu ops (linear, RMSNorm, SwiGLU): one set of kernels */
  void *sample_ws;       /* VR_SAMPLE_SCRATCH_BYTES(V) */
  /* decode_launch / decode_wait: each launch runs at once; its results wait in slot (head + i) % 2 */
  int32_t *ptok[2], *pids; /* (max_seqs) tokens per slot; the launched batch's ids after feeding */
  float *plp[2];
  int prc[2];
  uint32_t pn[2];
  uint32_t p_head, p_count, p_last; /* p_last: the slot of the last launch (the tokens fed from) */
} vr_rcpu_t;

static void vr_rcpu_free(void *state) {
  vr_rcpu_t *s = state;
  if (!s) return;
  free(s->params);
  free(s->layers);
  free(s->kpool), free(s->vpool);
  vr_tcpu_rope_free(&s->rope);
  free(s->x), free(s->h), free(s->q), free(s->k), free(s->v), free(s->att), free(s->f1), free(s->f2);
  free(s->pos), free(s->seq), free(s->last), free(s->logits), free(s->scores), free(s->pack), free(s->sample_ws), free(s->rstd);
  for (int k = 0; k < 2; k++) free(s->ptok[k]), free(s->plp[k]);
  free(s->pids);
  free(s);
}

static float *vr_rcpu_alloc(size_t n, int *err) {
  if (*err) return NULL;
  float *p = malloc((n ? n : 1) * sizeof(float));
  if (!p) *err = VR_ERR_NOMEM;
  return p;
}

static int vr_rcpu_init(const vr_model_config_t *c, const vr_rollout_options_t *opt, int device_index, void **state,
                        uint32_t *num_blocks) {
  (void)device_index;
  *state = NULL;
  vr_cpu_gemm_variant_t gemm;
  if (vr_cpu_gemm_parse(opt->cpu_gemm, &gemm) != 0 || !vr_cpu_gemm_supported(gemm)) {
    vr_log(VR_LOG_ERROR, "rollout: cpu-gemm \"%s\" is not available here (auto|generic|avx2+fma)",
           opt->cpu_gemm ? opt->cpu_gemm : "auto");
    return VR_ERR_UNSUPPORTED;
  }
  const uint64_t bb = vr_rollout_block_bytes(c, opt->block_size, sizeof(float));
  const uint64_t nb = bb ? opt->kv_cache_bytes / bb : 0;
  if (nb == 0 || nb > UINT32_MAX / 2) {
    vr_log(VR_LOG_ERROR, "rollout: a K/V budget of %llu bytes holds %llu blocks of %u tokens (%llu bytes each). "
           "HINT: raise --kv-cache-bytes", (unsigned long long)opt->kv_cache_bytes, (unsigned long long)nb,
           opt->block_size, (unsigned long long)bb);
    return nb == 0 ? VR_ERR_NOMEM : VR_ERR_INVAL;
  }
  vr_rcpu_t *s = calloc(1, sizeof *s);
  if (!s) return VR_ERR_NOMEM;
  s->c = c;
  s->opt = *opt;
  s->gemm = gemm;
#ifdef _OPENMP
  s->n_threads = opt->n_threads > 0 ? opt->n_threads : omp_get_max_threads();
#else
  s->n_threads = 1;
#endif
  s->num_blocks = (uint32_t)nb;
  const size_t C = (size_t)c->hidden_size, D = (size_t)c->head_dim, H = (size_t)c->num_heads,
               KV = (size_t)c->num_kv_heads, F = (size_t)c->intermediate_size, V = (size_t)c->vocab_size;
  const size_t L = (size_t)c->num_layers;
  int err = 0;
  s->layer_stride = (size_t)s->num_blocks * opt->block_size * KV * D;
  s->kpool = vr_rcpu_alloc(L * s->layer_stride, &err);
  s->vpool = vr_rcpu_alloc(L * s->layer_stride, &err);
  s->ws_tokens = opt->max_batch_tokens > opt->max_seqs ? opt->max_batch_tokens : opt->max_seqs;
  const size_t T = s->ws_tokens;
  s->x = vr_rcpu_alloc(T * C, &err);
  s->h = vr_rcpu_alloc(T * C, &err);
  s->q = vr_rcpu_alloc(T * H * D, &err);
  s->att = vr_rcpu_alloc(T * H * D, &err);
  s->k = vr_rcpu_alloc(T * KV * D, &err);
  s->v = vr_rcpu_alloc(T * KV * D, &err);
  s->f1 = vr_rcpu_alloc(T * F, &err);
  s->f2 = vr_rcpu_alloc(T * F, &err);
  s->last = vr_rcpu_alloc((size_t)opt->max_seqs * C, &err);
  s->logits = vr_rcpu_alloc((size_t)opt->max_seqs * V, &err);
  if (!err) {
    s->pos = malloc(T * sizeof *s->pos);
    s->seq = malloc(T * sizeof *s->seq);
    s->layers = calloc(L, sizeof *s->layers);
    s->sample_ws = malloc(VR_SAMPLE_SCRATCH_BYTES(V));
    size_t k = C > F ? C : F;
    if (H * D > k) k = H * D;
    size_t bytes = (size_t)s->n_threads * VR_CPU_GEMM_PACK_FLOATS(k) * sizeof(float);
    s->pack = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    s->rstd = malloc(T * sizeof *s->rstd);
    for (int j = 0; j < 2; j++) {
      s->ptok[j] = malloc((size_t)opt->max_seqs * sizeof(int32_t));
      s->plp[j] = malloc((size_t)opt->max_seqs * sizeof(float));
      if (!s->ptok[j] || !s->plp[j]) err = VR_ERR_NOMEM;
    }
    s->pids = malloc((size_t)opt->max_seqs * sizeof(int32_t));
    if (!s->pos || !s->seq || !s->layers || !s->sample_ws || !s->pack || !s->rstd || !s->pids) err = VR_ERR_NOMEM;
    s->ops = (vr_tcpu_ctx_t){.gemm = gemm, .n_threads = s->n_threads, .pack = s->pack, .pack_k = (int)k};
  }
  if (err) {
    vr_log(VR_LOG_ERROR, "rollout: out of memory for the cpu backend (K/V pool %llu bytes, %zu-token workspace)",
           (unsigned long long)(2 * L * s->layer_stride * sizeof(float)), T);
    vr_rcpu_free(s);
    return err;
  }
  *state = s;
  *num_blocks = s->num_blocks;
  return 0;
}

/* ---- weights ------------------------------------------------------------------------------------- */

/* The view's pointer p (n floats, NULL allowed when !required) rebased from src into s->params. */
static const float *vr_rcpu_rebase(vr_rcpu_t *s, const float *src, size_t n_src, const float *p, size_t n,
                                   int required, const char *what, int layer, int *err) {
  if (*err) return NULL;
  if (!p) {
    if (required) {
      vr_log(VR_LOG_ERROR, "rollout: weights view lacks %s (layer %d)", what, layer);
      *err = VR_ERR_INVAL;
    }
    return NULL;
  }
  if (p < src || (size_t)(p - src) > n_src || n > n_src - (size_t)(p - src)) {
    vr_log(VR_LOG_ERROR, "rollout: weights view's %s (layer %d, %zu floats) is not inside the parameter buffer",
           what, layer, n);
    *err = VR_ERR_INVAL;
    return NULL;
  }
  return s->params + (p - src);
}

static int vr_rcpu_set_weights(void *state, const float *params, size_t n_params, const vr_rollout_weights_t *w) {
  vr_rcpu_t *s = state;
  const vr_model_config_t *c = s->c;
  if (s->params && n_params != s->n_params) {
    vr_log(VR_LOG_ERROR, "rollout: new parameters have %zu floats, the engine was built for %zu", n_params, s->n_params);
    return VR_ERR_INVAL;
  }
  if (!s->params) {
    s->params = malloc((n_params ? n_params : 1) * sizeof(float));
    if (!s->params) return VR_ERR_NOMEM;
    s->n_params = n_params;
  }
  const size_t C = (size_t)c->hidden_size, V = (size_t)c->vocab_size, F = (size_t)c->intermediate_size,
               QD = (size_t)c->num_heads * c->head_dim, KD = (size_t)c->num_kv_heads * c->head_dim;
  int err = 0;
  vr_rollout_weights_t nw;
  nw.tok_emb = vr_rcpu_rebase(s, params, n_params, w->tok_emb, V * C, 1, "tok_emb", -1, &err);
  nw.final_norm_w = vr_rcpu_rebase(s, params, n_params, w->final_norm_w, C, 1, "final_norm_w", -1, &err);
  nw.lm_head = vr_rcpu_rebase(s, params, n_params, w->lm_head, V * C, 1, "lm_head", -1, &err);
  const int ab = c->attention_bias, ob = c->o_bias, mb = c->mlp_bias;
  for (int l = 0; l < c->num_layers && !err; l++) {
    const vr_rollout_layer_w_t *a = &w->layers[l];
    vr_rollout_layer_w_t *d = &s->layers[l];
#define RB(f, n, req) d->f = vr_rcpu_rebase(s, params, n_params, a->f, n, req, #f, l, &err)
    RB(q_w, QD * C, 1); RB(k_w, KD * C, 1); RB(v_w, KD * C, 1); RB(o_w, C * QD, 1);
    RB(q_b, QD, ab); RB(k_b, KD, ab); RB(v_b, KD, ab); RB(o_b, C, ob);
    RB(norm1_w, C, 1); RB(norm2_w, C, 1);
    RB(gate_w, F * C, 1); RB(up_w, F * C, 1); RB(down_w, C * F, 1);
    RB(gate_b, F, mb); RB(up_b, F, mb); RB(down_b, C, mb);
#undef RB
  }
  if (err) return err;
  nw.layers = s->layers;
  s->w = nw;
  memcpy(s->params, params, n_params * sizeof(float));
  return 0;
}

/* ---- ops ----------------------------------------------------------------------------------------- */

/* Rotates the nh heads of each of T rows of x by the row's position (rotate_half pairs (i, i + D/2)). */
static void vr_rcpu_rope(const vr_rcpu_t *s, float *x, int nh, uint32_t T) {
  const int D = s->c->head_dim, half = D / 2;
  for (uint32_t t = 0; t < T; t++) {
    const float *cs = s->rope.cos_t + (size_t)s->pos[t] * half, *sn = s->rope.sin_t + (size_t)s->pos[t] * half;
    for (int h = 0; h < nh; h++) {
      float *v = x + ((size_t)t * nh + h) * D;
      for (int i = 0; i < half; i++) {
        float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = b * cs[i] + a * sn[i];
      }
    }
  }
}

/* Row of the pool holding position p of sequence q (KV * D floats). */
static size_t vr_rcpu_slot(const vr_rcpu_t *s, const vr_rollout_batch_t *b, uint32_t q, uint32_t p) {
  const uint32_t bs = s->opt.block_size;
  const size_t blk = (size_t)b->block_tables[(size_t)q * b->max_blocks + p / bs];
  return (blk * bs + p % bs) * (size_t)s->c->num_kv_heads * s->c->head_dim;
}

/* att[t, h] = softmax_j(q[t,h] . k_j / sqrt(D)) v_j over positions j of token t's sequence with
 * lo <= j <= pos[t] (lo = pos - window + 1 with a sliding window), every K/V row from the cache. */
static void vr_rcpu_attention(vr_rcpu_t *s, const vr_rollout_batch_t *b, int layer, uint32_t T) {
  const vr_model_config_t *c = s->c;
  const int H = c->num_heads, KV = c->num_kv_heads, D = c->head_dim, G = H / KV, sw = c->sliding_window;
  const float scale = 1.0f / sqrtf((float)D);
  const float *K = s->kpool + (size_t)layer * s->layer_stride, *Vp = s->vpool + (size_t)layer * s->layer_stride;
  const size_t ML = s->scores_n; /* >= every context of the batch (vr_rcpu_forward) */
  const long n_items = (long)T * KV;
#pragma omp parallel for num_threads(s->n_threads) schedule(static) if (s->n_threads > 1 && n_items > 1)
  for (long it = 0; it < n_items; it++) {
#ifdef _OPENMP
    const int tid = omp_get_thread_num();
#else
    const int tid = 0;
#endif
    const uint32_t t = (uint32_t)(it / KV), q = s->seq[t], i = s->pos[t];
    const int g = (int)(it % KV);
    const uint32_t lo = (sw > 0 && i + 1 > (uint32_t)sw) ? i + 1 - (uint32_t)sw : 0, n = i + 1 - lo;
    float *S = s->scores + (size_t)tid * ML * G; /* (n, G) */
    const float *Q = s->q + ((size_t)t * H + (size_t)g * G) * D;
    for (uint32_t j = 0; j < n; j++) {
      const float *kr = K + vr_rcpu_slot(s, b, q, lo + j) + (size_t)g * D;
      for (int h = 0; h < G; h++) {
        const float *qr = Q + (size_t)h * D;
        float acc = 0.0f;
        for (int d = 0; d < D; d++) acc += qr[d] * kr[d];
        S[(size_t)j * G + h] = acc * scale;
      }
    }
    float mx[64], sum[64]; /* G <= 64 is checked at init of the engine */
    for (int h = 0; h < G; h++) {
      mx[h] = -INFINITY;
      sum[h] = 0.0f;
    }
    for (uint32_t j = 0; j < n; j++)
      for (int h = 0; h < G; h++) mx[h] = S[(size_t)j * G + h] > mx[h] ? S[(size_t)j * G + h] : mx[h];
    for (uint32_t j = 0; j < n; j++)
      for (int h = 0; h < G; h++) {
        float e = expf(S[(size_t)j * G + h] - mx[h]);
        S[(size_t)j * G + h] = e;
        sum[h] += e;
      }
    float *out = s->att + ((size_t)t * H + (size_t)g * G) * D;
    memset(out, 0, (size_t)G * D * sizeof(float));
    for (uint32_t j = 0; j < n; j++) {
      const float *vr = Vp + vr_rcpu_slot(s, b, q, lo + j) + (size_t)g * D;
      for (int h = 0; h < G; h++) {
        const float p = S[(size_t)j * G + h];
        float *o = out + (size_t)h * D;
        for (int d = 0; d < D; d++) o[d] += p * vr[d];
      }
    }
    for (int h = 0; h < G; h++) {
      const float inv = 1.0f / sum[h];
      for (int d = 0; d < D; d++) out[(size_t)h * D + d] *= inv;
    }
  }
}

/* RoPE tables and attention scratch for contexts of up to n positions (n <= max_model_len):
 * grown on demand, as max_model_len defaults to max_position_embeddings (up to 2^24). */
static int vr_rcpu_grow(vr_rcpu_t *s, size_t n) {
  const vr_model_config_t *c = s->c;
  if (vr_tcpu_rope_grow(&s->rope, n, s->opt.max_model_len, c->rope_inv_freq, c->head_dim / 2,
                        c->rope_attention_scaling) != 0) {
    vr_log(VR_LOG_ERROR, "rollout: out of memory for RoPE tables of %zu positions", n);
    return VR_ERR_NOMEM;
  }
  if (n > s->scores_n) {
    size_t want = s->rope.n, G = (size_t)(c->num_heads / c->num_kv_heads); /* rope.n >= n, grown geometrically */
    float *p = malloc((size_t)s->n_threads * want * G * sizeof *p);
    if (!p) {
      vr_log(VR_LOG_ERROR, "rollout: out of memory for attention scratch of %zu positions", want);
      return VR_ERR_NOMEM;
    }
    free(s->scores);
    s->scores = p, s->scores_n = want;
  }
  return 0;
}

static int vr_rcpu_forward(void *state, const vr_rollout_batch_t *b) {
  vr_rcpu_t *s = state;
  const vr_model_config_t *c = s->c;
  const uint32_t T = b->cu_q[b->n_seqs];
  if (!s->params) {
    vr_log(VR_LOG_ERROR, "rollout: forward before set_weights");
    return VR_ERR_INVAL;
  }
  if (b->n_seqs == 0 || b->n_seqs > s->opt.max_seqs || T > s->ws_tokens) return VR_ERR_TOO_LARGE;
  const int C = c->hidden_size, F = c->intermediate_size, QD = c->num_heads * c->head_dim,
            KD = c->num_kv_heads * c->head_dim;
  uint32_t longest = 0;
  for (uint32_t q = 0; q < b->n_seqs; q++) {
    const uint32_t len = b->cu_q[q + 1] - b->cu_q[q];
    if (len == 0 || len > b->ctx_len[q] || b->ctx_len[q] > s->opt.max_model_len) return VR_ERR_INVAL;
    for (uint32_t t = b->cu_q[q]; t < b->cu_q[q + 1]; t++) {
      s->seq[t] = q;
      s->pos[t] = b->ctx_len[q] - len + (t - b->cu_q[q]);
    }
    if (b->ctx_len[q] > longest) longest = b->ctx_len[q];
  }
  int rc = vr_rcpu_grow(s, longest);
  if (rc != 0) return rc;
  for (uint32_t t = 0; t < T; t++)
    memcpy(s->x + (size_t)t * C, s->w.tok_emb + (size_t)b->ids[t] * C, (size_t)C * sizeof(float));
  for (int l = 0; l < c->num_layers; l++) {
    const vr_rollout_layer_w_t *L = &s->w.layers[l];
    vr_tcpu_rmsnorm(s->x, L->norm1_w, (int)T, C, c->norm_eps, s->h, s->rstd);
    vr_tcpu_linear(&s->ops, s->h, L->q_w, L->q_b, (int)T, C, QD, s->q);
    vr_tcpu_linear(&s->ops, s->h, L->k_w, L->k_b, (int)T, C, KD, s->k);
    vr_tcpu_linear(&s->ops, s->h, L->v_w, L->v_b, (int)T, C, KD, s->v);
    vr_rcpu_rope(s, s->q, c->num_heads, T);
    vr_rcpu_rope(s, s->k, c->num_kv_heads, T);
    float *K = s->kpool + (size_t)l * s->layer_stride, *V = s->vpool + (size_t)l * s->layer_stride;
    for (uint32_t t = 0; t < T; t++) {
      const size_t slot = vr_rcpu_slot(s, b, s->seq[t], s->pos[t]);
      memcpy(K + slot, s->k + (size_t)t * KD, (size_t)KD * sizeof(float));
      memcpy(V + slot, s->v + (size_t)t * KD, (size_t)KD * sizeof(float));
    }
    vr_rcpu_attention(s, b, l, T);
    vr_tcpu_linear(&s->ops, s->att, L->o_w, L->o_b, (int)T, QD, C, s->h);
    for (size_t i = 0; i < (size_t)T * C; i++) s->x[i] += s->h[i];
    vr_tcpu_rmsnorm(s->x, L->norm2_w, (int)T, C, c->norm_eps, s->h, s->rstd);
    vr_tcpu_linear(&s->ops, s->h, L->gate_w, L->gate_b, (int)T, C, F, s->f1);
    vr_tcpu_linear(&s->ops, s->h, L->up_w, L->up_b, (int)T, C, F, s->f2);
    vr_tcpu_swiglu(s->f1, s->f2, (size_t)T * F, s->f1); /* elementwise: in place is fine */
    vr_tcpu_linear(&s->ops, s->f1, L->down_w, L->down_b, (int)T, F, C, s->h);
    for (size_t i = 0; i < (size_t)T * C; i++) s->x[i] += s->h[i];
  }
  for (uint32_t q = 0; q < b->n_seqs; q++)
    vr_tcpu_rmsnorm(s->x + (size_t)(b->cu_q[q + 1] - 1) * C, s->w.final_norm_w, 1, C, c->norm_eps,
                    s->last + (size_t)q * C, s->rstd);
  vr_tcpu_linear(&s->ops, s->last, s->w.lm_head, NULL, (int)b->n_seqs, C, c->vocab_size, s->logits);
  s->n_logits = b->n_seqs;
  return 0;
}

static int vr_rcpu_sample(void *state, uint32_t n, const vr_sample_req_t *rows, int32_t *tokens, float *logprobs) {
  vr_rcpu_t *s = state;
  const int32_t V = s->c->vocab_size;
  int rc = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (rows[i].row >= s->n_logits) return VR_ERR_INVAL;
    int r = vr_sample_row(s->logits + (size_t)rows[i].row * V, V, &rows[i].p, rows[i].key, rows[i].stream,
                          rows[i].position, s->sample_ws, &tokens[i], &logprobs[i]);
    if (r && !rc) rc = r;
  }
  return rc;
}

/* decode_launch: the forward and the sampling run here; feed rows take the last launch's tokens. */
static int vr_rcpu_decode_launch(void *state, const vr_rollout_batch_t *b, const vr_sample_req_t *rows,
                                 const int32_t *feed) {
  vr_rcpu_t *s = state;
  const uint32_t n = b->n_seqs;
  if (s->p_count >= 2 || n == 0 || n > s->opt.max_seqs) return VR_ERR_INVAL;
  const int32_t V = s->c->vocab_size;
  for (uint32_t q = 0; q < n; q++) {
    if (b->cu_q[q + 1] - b->cu_q[q] != 1 || rows[q].row != q) return VR_ERR_INVAL;
    int32_t t = b->ids[q];
    if (feed && feed[q] >= 0) {
      if ((uint32_t)feed[q] >= s->opt.max_seqs) return VR_ERR_INVAL;
      t = s->ptok[s->p_last][feed[q]];
      if (t < 0 || t >= V) t = 0;
    }
    s->pids[q] = t;
  }
  vr_rollout_batch_t fb = *b;
  fb.ids = s->pids;
  const uint32_t k = (s->p_head + s->p_count) % 2;
  int rc = vr_rcpu_forward(state, &fb);
  if (rc == 0) rc = vr_rcpu_sample(state, n, rows, s->ptok[k], s->plp[k]);
  if (rc != 0 && rc != VR_ERR_NONFINITE) return rc; /* nothing pending */
  s->prc[k] = rc;
  s->pn[k] = n;
  s->p_last = k;
  s->p_count++;
  return 0;
}

static int vr_rcpu_decode_wait(void *state, int32_t *tokens, float *logprobs) {
  vr_rcpu_t *s = state;
  if (s->p_count == 0) return VR_ERR_INVAL;
  const uint32_t k = s->p_head;
  memcpy(tokens, s->ptok[k], s->pn[k] * sizeof(int32_t));
  memcpy(logprobs, s->plp[k], s->pn[k] * sizeof(float));
  s->p_head = (k + 1) % 2;
  s->p_count--;
  return s->prc[k];
}

static int vr_rcpu_copy_blocks(void *state, const uint32_t *src, const uint32_t *dst, uint32_t n) {
  vr_rcpu_t *s = state;
  const size_t blk = (size_t)s->opt.block_size * s->c->num_kv_heads * s->c->head_dim;
  for (uint32_t i = 0; i < n; i++) {
    if (src[i] >= s->num_blocks || dst[i] >= s->num_blocks) return VR_ERR_INVAL;
    for (int l = 0; l < s->c->num_layers; l++) {
      const size_t o = (size_t)l * s->layer_stride;
      memcpy(s->kpool + o + dst[i] * blk, s->kpool + o + src[i] * blk, blk * sizeof(float));
      memcpy(s->vpool + o + dst[i] * blk, s->vpool + o + src[i] * blk, blk * sizeof(float));
    }
  }
  return 0;
}

static float *vr_rcpu_param_buffer(void *state, size_t *n_params, int *on_device) {
  vr_rcpu_t *s = state;
  *n_params = s->n_params;
  *on_device = 0;
  return s->params;
}

static int vr_rcpu_logits(void *state, uint32_t n_rows, float *out) {
  vr_rcpu_t *s = state;
  if (n_rows > s->n_logits) return VR_ERR_INVAL;
  memcpy(out, s->logits, (size_t)n_rows * s->c->vocab_size * sizeof(float));
  return 0;
}

static void vr_rcpu_describe(void *state, uint64_t *weight_bytes, uint64_t *kv_bytes, uint64_t *work_bytes,
                             char *device, size_t device_n) {
  vr_rcpu_t *s = state;
  const vr_model_config_t *c = s->c;
  const uint64_t T = s->ws_tokens, C = (uint64_t)c->hidden_size, F = (uint64_t)c->intermediate_size,
                 QD = (uint64_t)c->num_heads * c->head_dim, KD = (uint64_t)c->num_kv_heads * c->head_dim;
  *weight_bytes = s->n_params * sizeof(float);
  *kv_bytes = 2 * (uint64_t)c->num_layers * s->layer_stride * sizeof(float);
  *work_bytes = (T * (2 * C + 2 * QD + 2 * KD + 2 * F) + (uint64_t)s->opt.max_seqs * (C + (uint64_t)c->vocab_size)) *
                sizeof(float);
  snprintf(device, device_n, "cpu");
}

const vr_rollout_backend_t vr_rollout_backend_cpu = {
    .name = "cpu",
    .init = vr_rcpu_init,
    .free = vr_rcpu_free,
    .set_weights = vr_rcpu_set_weights,
    .prefill = vr_rcpu_forward,
    .decode = NULL, /* a decode step is the same forward with q_len = 1 */
    .sample = vr_rcpu_sample,
    .decode_launch = vr_rcpu_decode_launch, /* runs at once: the pipelined scheduler's reference */
    .decode_wait = vr_rcpu_decode_wait,
    .copy_blocks = vr_rcpu_copy_blocks,
    .param_buffer = vr_rcpu_param_buffer, /* the view points into it: a write is live at once */
    .params_updated = NULL,
    .logits = vr_rcpu_logits,
    .describe = vr_rcpu_describe,
};
