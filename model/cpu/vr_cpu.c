/* vr_cpu.c: the reference backend. Plain C, fp32 activations, deterministic GEMMs (vr_cpu_gemm.h).
 *
 * Weights: F32 tensors whose mapping is 4-byte aligned are used in place (no
 * copy); F16/BF16 (and unaligned F32) are converted once to fp32 at init.
 * Forward = trunk + head. The trunk (vr_cpu_trunk: embeddings -> layers -> final norm) turns
 * packed tokens (T = cu_seqlens[n]), no padding, into hidden states (T, C); the score head reads
 * one row per sequence. Linear layers are one GEMM over all T tokens; attention runs per
 * sequence and head on its own rows, so sequences never see each other. The semantics follow
 * transformers:
 *   encoders (BERT/RoBERTa): post-norm, exact erf GELU or tanh GELU, head on token 0;
 *   decoders (Llama/Mistral/Qwen2): pre-norm RMSNorm, RoPE (rotate_half layout),
 *   GQA, causal (+ sliding window), SwiGLU, score at the last token that is not
 *   pad_token_id (index 0 if every token is pad), as transformers picks it.
 *
 *
 * Determinism: a sequence's hidden states and score are bit-identical whatever else is in the
 * batch, wherever it sits in it, and whatever the thread count: every GEMM element has a fixed
 * order of operations (vr_cpu_gemm.h), norms and softmax reduce each row in index order, and
 * attention touches only the sequence's own rows with a blocking that depends on its length
 * alone. docs/protocol.md states the promise; tests/model/test_model_determinism.c holds it.
 *
 * Threading: opt->n_threads OpenMP threads (0 = omp_get_max_threads()) split GEMM columns and
 * attention heads; each output element is written by one thread. One forward at a time per state. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_backend.h"
#include "vr_cpu_gemm.h"
#include "vr_log.h"
#include "vr_progress.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* y (T, out) = x (T, in) W^T + b; W is (out, in) as in PyTorch. */
typedef struct vr_cpu_linear {
  const float *w, *b;
  int out, in;
} vr_cpu_linear_t;

typedef struct vr_cpu_layer {
  vr_cpu_linear_t q, k, v, o, gate, up, down;
  const float *n1w, *n1b, *n2w, *n2b;
} vr_cpu_layer_t;

typedef struct vr_cpu {
  vr_model_config_t c;      /* copy; c.rope_inv_freq stays owned by the loader */
  int n_threads;
  vr_cpu_gemm_variant_t gemm; /* opt->cpu_gemm, resolved at init */
  const float *tok_emb, *pos_emb, *type_emb0, *emb_nw, *emb_nb, *final_nw;
  vr_cpu_linear_t head1, head2;
  vr_cpu_layer_t *layers;
  float **owned;            /* converted weights */
  size_t n_owned;
  size_t weight_bytes;      /* bytes of converted weights */
  float *rope_cos, *rope_sin; /* (max_len, head_dim / 2) */
  int max_len;
  /* workspace, grown on demand to the largest batch seen */
  size_t ws_tokens;
  float *x, *h, *q, *k, *v, *att, *f1, *f2;
  float *s;                 /* attention scores: n_threads scratch blocks of (rows, L) */
  size_t s_cap;             /* floats in s */
  float *row;               /* (2 C) head scratch */
  float *pack;              /* GEMM packing scratch: n_threads * VR_CPU_GEMM_PACK_FLOATS(pack_k) */
  int pack_k;               /* largest inner dimension of any GEMM */
} vr_cpu_t;

static void vr_cpu_free(void *state);

/* fp32 view of a tensor: in place when F32 and aligned, else a converted copy. */
static const float *vr_cpu_weight(vr_cpu_t *s, const vr_tensor_t *t, int *err) {
  if (!t || *err) return NULL;
  if (t->dtype == VR_DTYPE_F32 && ((uintptr_t)t->data % sizeof(float)) == 0) return t->data;
  float **no = realloc(s->owned, (s->n_owned + 1) * sizeof *no);
  if (!no) {
    *err = VR_ERR_NOMEM;
    return NULL;
  }
  s->owned = no;
  float *f = vr_tensor_to_f32(t);
  if (!f) {
    vr_log(VR_LOG_ERROR, "out of memory converting tensor '%s' (%zu bytes) to fp32", t->name, t->nbytes);
    *err = VR_ERR_NOMEM;
    return NULL;
  }
  s->owned[s->n_owned++] = f;
  s->weight_bytes += t->nbytes / (t->dtype == VR_DTYPE_F32 ? 4 : 2) * sizeof(float);
  return f;
}

static vr_cpu_linear_t vr_cpu_lin(vr_cpu_t *s, const vr_tensor_t *w, const vr_tensor_t *b, int *err) {
  vr_cpu_linear_t l = {0};
  if (!w) return l;
  l.w = vr_cpu_weight(s, w, err);
  l.b = vr_cpu_weight(s, b, err);
  l.out = (int)w->shape[0];
  l.in = (int)w->shape[1];
  return l;
}

static int vr_cpu_init(const vr_model_config_t *cfg, const vr_model_weights_t *w,
                       const vr_model_options_t *opt, int device_index, void **state) {
  *state = NULL;
  if (opt->dtype && strcmp(opt->dtype, "auto") != 0 && strcmp(opt->dtype, "f32") != 0) {
    vr_log(VR_LOG_ERROR, "cpu backend computes in f32 only (dtype \"%s\" requested)", opt->dtype);
    return VR_ERR_UNSUPPORTED;
  }
  vr_cpu_gemm_variant_t gemm;
  if (vr_cpu_gemm_parse(opt->cpu_gemm, &gemm) != 0) {
    vr_log(VR_LOG_ERROR, "cpu-gemm \"%s\" is not auto|generic|avx2+fma", opt->cpu_gemm);
    return VR_ERR_INVAL;
  }
  if (!vr_cpu_gemm_supported(gemm)) {
    vr_log(VR_LOG_ERROR, "cpu-gemm %s: this CPU lacks AVX2 + FMA. HINT: --cpu-gemm generic (or auto)",
           vr_cpu_gemm_name(gemm));
    return VR_ERR_UNSUPPORTED;
  }
  vr_cpu_t *s = calloc(1, sizeof *s);
  if (!s) return VR_ERR_NOMEM;
  s->gemm = gemm;
  s->c = *cfg;
#ifdef _OPENMP
  s->n_threads = opt->n_threads > 0 ? opt->n_threads : omp_get_max_threads();
#else
  s->n_threads = 1;
#endif
  int err = 0;
  s->layers = calloc((size_t)cfg->num_layers, sizeof *s->layers);
  if (!s->layers) err = VR_ERR_NOMEM;
  s->tok_emb = vr_cpu_weight(s, w->tok_emb, &err);
  s->pos_emb = vr_cpu_weight(s, w->pos_emb, &err);
  s->emb_nw = vr_cpu_weight(s, w->emb_norm_w, &err);
  s->emb_nb = vr_cpu_weight(s, w->emb_norm_b, &err);
  s->final_nw = vr_cpu_weight(s, w->final_norm_w, &err);
  if (w->type_emb && !err) {
    /* only row 0 is used (token_type_ids = 0): convert just that row */
    vr_tensor_t row0 = *w->type_emb;
    row0.ndim = 1;
    row0.shape[0] = cfg->hidden_size;
    row0.nbytes = (size_t)cfg->hidden_size * (row0.dtype == VR_DTYPE_F32 ? 4 : 2);
    s->type_emb0 = vr_cpu_weight(s, &row0, &err);
  }
  s->head1 = vr_cpu_lin(s, w->head1_w, w->head1_b, &err);
  s->head2 = vr_cpu_lin(s, w->head2_w, w->head2_b, &err);
  /* F16/BF16 (or unaligned F32) layers are converted here: one progress step per layer; an
   * aligned F32 model converts nothing and stays silent (vr_progress_end prints only long work) */
  vr_progress_t prog;
  vr_progress_begin(&prog, "cpu weights to f32", "layers", (uint32_t)cfg->num_layers, 0);
  for (int l = 0; l < cfg->num_layers && !err; l++) {
    if (l) vr_progress_step(&prog, 1, 0);
    const vr_layer_weights_t *L = &w->layers[l];
    vr_cpu_layer_t *d = &s->layers[l];
    d->q = vr_cpu_lin(s, L->q_w, L->q_b, &err);
    d->k = vr_cpu_lin(s, L->k_w, L->k_b, &err);
    d->v = vr_cpu_lin(s, L->v_w, L->v_b, &err);
    d->o = vr_cpu_lin(s, L->o_w, L->o_b, &err);
    d->gate = vr_cpu_lin(s, L->gate_w, L->gate_b, &err);
    d->up = vr_cpu_lin(s, L->up_w, L->up_b, &err);
    d->down = vr_cpu_lin(s, L->down_w, L->down_b, &err);
    d->n1w = vr_cpu_weight(s, L->norm1_w, &err);
    d->n1b = vr_cpu_weight(s, L->norm1_b, &err);
    d->n2w = vr_cpu_weight(s, L->norm2_w, &err);
    d->n2b = vr_cpu_weight(s, L->norm2_b, &err);
  }
  if (!err) {
    vr_progress_step(&prog, 1, 0);
    vr_progress_end(&prog);
  }
  s->max_len = cfg->max_seq_len < (int)opt->max_batch_tokens ? cfg->max_seq_len : (int)opt->max_batch_tokens;
  if (!err && cfg->is_decoder) {
    /* cos/sin per position, in float32 as transformers' rotary embedding computes them */
    int half = cfg->head_dim / 2;
    size_t n = (size_t)s->max_len * (size_t)half;
    s->rope_cos = malloc(n * sizeof(float));
    s->rope_sin = malloc(n * sizeof(float));
    if (!s->rope_cos || !s->rope_sin) err = VR_ERR_NOMEM;
    for (int p = 0; p < s->max_len && !err; p++) {
      for (int i = 0; i < half; i++) {
        float a = (float)p * cfg->rope_inv_freq[i];
        s->rope_cos[(size_t)p * half + i] = cosf(a) * cfg->rope_attention_scaling;
        s->rope_sin[(size_t)p * half + i] = sinf(a) * cfg->rope_attention_scaling;
      }
    }
  }
  s->row = malloc(2 * (size_t)cfg->hidden_size * sizeof(float));
  if (!s->row && !err) err = VR_ERR_NOMEM;
  {
    int k = cfg->hidden_size;
    if (cfg->intermediate_size > k) k = cfg->intermediate_size;
    if (cfg->num_heads * cfg->head_dim > k) k = cfg->num_heads * cfg->head_dim;
    s->pack_k = k;
    size_t bytes = (size_t)s->n_threads * VR_CPU_GEMM_PACK_FLOATS(k) * sizeof(float);
    s->pack = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!s->pack && !err) err = VR_ERR_NOMEM;
  }
  if (err) {
    vr_log(VR_LOG_ERROR, "cpu backend init failed: %s", vr_strerror(err));
    vr_cpu_free(s);
    return err;
  }
  *state = s;
  return 0;
}

static void vr_cpu_free_ws(vr_cpu_t *s) {
  free(s->x), free(s->h), free(s->q), free(s->k), free(s->v), free(s->att), free(s->f1), free(s->f2);
  s->x = s->h = s->q = s->k = s->v = s->att = s->f1 = s->f2 = NULL;
  s->ws_tokens = 0;
}

static void vr_cpu_free(void *state) {
  vr_cpu_t *s = state;
  if (!s) return;
  for (size_t i = 0; i < s->n_owned; i++) free(s->owned[i]);
  free(s->owned);
  free(s->layers);
  free(s->rope_cos);
  free(s->rope_sin);
  vr_cpu_free_ws(s);
  free(s->s);
  free(s->row);
  free(s->pack);
  free(s);
}

static size_t vr_cpu_ws_bytes(const vr_cpu_t *s) {
  const vr_model_config_t *c = &s->c;
  size_t qd = (size_t)c->num_heads * c->head_dim, kd = (size_t)c->num_kv_heads * c->head_dim;
  return s->ws_tokens * (2 * (size_t)c->hidden_size + 2 * qd + 2 * kd + 2 * (size_t)c->intermediate_size) *
         sizeof(float);
}

static int vr_cpu_ensure_ws(vr_cpu_t *s, size_t T) {
  if (T <= s->ws_tokens) return 0;
  const vr_model_config_t *c = &s->c;
  size_t C = (size_t)c->hidden_size, qd = (size_t)c->num_heads * c->head_dim,
         kd = (size_t)c->num_kv_heads * c->head_dim, F = (size_t)c->intermediate_size;
  vr_cpu_free_ws(s);
  s->x = malloc(T * C * sizeof(float));
  s->h = malloc(T * C * sizeof(float));
  s->q = malloc(T * qd * sizeof(float));
  s->att = malloc(T * qd * sizeof(float));
  s->k = malloc(T * kd * sizeof(float));
  s->v = malloc(T * kd * sizeof(float));
  s->f1 = malloc(T * F * sizeof(float));
  s->f2 = malloc(T * F * sizeof(float));
  if (!s->x || !s->h || !s->q || !s->att || !s->k || !s->v || !s->f1 || !s->f2) {
    vr_cpu_free_ws(s);
    vr_log(VR_LOG_ERROR, "out of memory for a %zu-token workspace", T);
    return VR_ERR_NOMEM;
  }
  s->ws_tokens = T;
  return 0;
}

/* ---- ops ------------------------------------------------------------------------ */

static void vr_cpu_linear(const vr_cpu_t *s, const vr_cpu_linear_t *l, const float *x, int T, float *y) {
  vr_cpu_gemm_nt(s->gemm, T, l->out, l->in, 1.0f, x, l->in, l->w, l->in, l->b, y, l->out, s->pack, s->n_threads);
}

/* y = LayerNorm(x) * w + b over rows of C (biased variance, as torch). */
static void vr_cpu_layernorm(const float *x, const float *w, const float *b, int T, int C, float eps,
                             float *y) {
  for (int t = 0; t < T; t++) {
    const float *r = x + (size_t)t * C;
    double mean = 0, var = 0;
    for (int i = 0; i < C; i++) mean += r[i];
    mean /= C;
    for (int i = 0; i < C; i++) var += (r[i] - mean) * (r[i] - mean);
    var /= C;
    float inv = (float)(1.0 / sqrt(var + eps));
    for (int i = 0; i < C; i++) y[(size_t)t * C + i] = (float)(r[i] - mean) * inv * w[i] + b[i];
  }
}

/* y = x * rsqrt(mean(x^2) + eps) * w (transformers' LlamaRMSNorm). */
static void vr_cpu_rmsnorm(const float *x, const float *w, int T, int C, float eps, float *y) {
  for (int t = 0; t < T; t++) {
    const float *r = x + (size_t)t * C;
    double ss = 0;
    for (int i = 0; i < C; i++) ss += (double)r[i] * r[i];
    float inv = 1.0f / sqrtf((float)(ss / C) + eps);
    for (int i = 0; i < C; i++) y[(size_t)t * C + i] = w[i] * (r[i] * inv);
  }
}

static float vr_cpu_act(vr_act_t a, float x) {
  switch (a) {
    case VR_ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case VR_ACT_GELU_TANH:
      return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case VR_ACT_SILU: return x / (1.0f + expf(-x));
    case VR_ACT_RELU: return x > 0.0f ? x : 0.0f;
  }
  return x;
}

/* x[i] = act(x[i]) (gate == NULL) or act(x[i]) * gate[i] (SwiGLU), for i < n. */
static void vr_cpu_act_rows(const vr_cpu_t *s, float *x, const float *gate, size_t n) {
  const vr_act_t a = s->c.act;
#pragma omp parallel for num_threads(s->n_threads) schedule(static) if (s->n_threads > 1 && n >= 65536)
  for (size_t i = 0; i < n; i++) x[i] = gate ? vr_cpu_act(a, x[i]) * gate[i] : vr_cpu_act(a, x[i]);
}

/* Rotates each head of x (T rows of nh * D) by its token's position (rotate_half layout:
 * pairs (i, i + D/2)); positions count from each sequence's first token. */
static void vr_cpu_rope(const vr_cpu_t *s, float *x, int nh, const uint32_t *cu, uint32_t n) {
  int D = s->c.head_dim, half = D / 2;
  for (uint32_t q = 0; q < n; q++) {
    for (uint32_t t = cu[q]; t < cu[q + 1]; t++) {
      const float *cs = s->rope_cos + (size_t)(t - cu[q]) * half;
      const float *sn = s->rope_sin + (size_t)(t - cu[q]) * half;
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
}

/* Attention of every sequence and head: att = softmax(q k^T * D^-1/2 + mask) v.
 * q, att: (T, H*D); k, v: (T, KV*D). Query rows are processed in blocks (a size that depends
 * on the sequence's length only) so the score scratch stays bounded for long sequences; the
 * heads of a sequence are split over the threads, each with its own scratch block. */
static int vr_cpu_attention(vr_cpu_t *s, const uint32_t *cu, uint32_t n) {
  const vr_model_config_t *c = &s->c;
  const int H = c->num_heads, KV = c->num_kv_heads, D = c->head_dim, group = H / KV;
  const int ldq = H * D, ldk = KV * D;
  const int causal = c->is_decoder, sw = c->sliding_window;
  const float scale = 1.0f / sqrtf((float)D);
  const int nt = s->n_threads < H ? s->n_threads : H;
  for (uint32_t q = 0; q < n; q++) {
    const int o = (int)cu[q], L = (int)(cu[q + 1] - cu[q]);
    int block = L;
    if ((size_t)L * L > ((size_t)1 << 22)) block = (int)(((size_t)1 << 22) / (size_t)L) + 1;
    const size_t need = (size_t)block * L;
    if (need * nt > s->s_cap) {
      free(s->s);
      s->s = malloc(need * nt * sizeof(float));
      s->s_cap = s->s ? need * nt : 0;
      if (!s->s) return VR_ERR_NOMEM;
    }
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && (size_t)L * L * D >= 4096)
    for (int h = 0; h < H; h++) {
#ifdef _OPENMP
      const int tid = omp_get_thread_num();
#else
      const int tid = 0;
#endif
      float *S = s->s + need * (size_t)tid, *pack = s->pack + VR_CPU_GEMM_PACK_FLOATS(s->pack_k) * (size_t)tid;
      const float *Q = s->q + (size_t)o * ldq + (size_t)h * D;
      const float *K = s->k + (size_t)o * ldk + (size_t)(h / group) * D;
      const float *V = s->v + (size_t)o * ldk + (size_t)(h / group) * D;
      float *out = s->att + (size_t)o * ldq + (size_t)h * D;
      for (int r0 = 0; r0 < L; r0 += block) {
        const int rows = L - r0 < block ? L - r0 : block;
        const int cols = causal ? r0 + rows : L; /* later keys are masked anyway */
        vr_cpu_gemm_nt(s->gemm, rows, cols, D, scale, Q + (size_t)r0 * ldq, ldq, K, ldk, NULL, S, cols, pack, 1);
        for (int r = 0; r < rows; r++) {
          float *row = S + (size_t)r * cols;
          int i = r0 + r, lo = 0, hi = causal ? i + 1 : cols;
          if (causal && sw > 0 && i - sw + 1 > 0) lo = i - sw + 1; /* keys j with i - j < window */
          float mx = -INFINITY;
          for (int j = lo; j < hi; j++) mx = row[j] > mx ? row[j] : mx;
          float sum = 0.0f;
          for (int j = 0; j < cols; j++) {
            float e = (j >= lo && j < hi) ? expf(row[j] - mx) : 0.0f;
            row[j] = e;
            sum += e;
          }
          float inv = 1.0f / sum;
          for (int j = lo; j < hi; j++) row[j] *= inv;
        }
        vr_cpu_gemm_nn(s->gemm, rows, D, cols, S, cols, V, ldk, out + (size_t)r0 * ldq, ldq, 1);
      }
    }
  }
  return 0;
}

/* ---- trunk ------------------------------------------------------------------------- */

/* Encoder trunk: embeddings + LayerNorm, then post-norm layers; hidden states in s->x. */
static int vr_cpu_trunk_encoder(vr_cpu_t *s, const int32_t *ids, const uint32_t *cu, uint32_t n) {
  const vr_model_config_t *c = &s->c;
  int C = c->hidden_size, F = c->intermediate_size, T = (int)cu[n];
  /* embeddings: word + position + token type 0; roberta positions count the
   * non-pad tokens from padding_idx + 1 (pad tokens sit at padding_idx) */
  for (uint32_t q = 0; q < n; q++) {
    int count = 0;
    for (uint32_t t = cu[q]; t < cu[q + 1]; t++) {
      int pos = (int)(t - cu[q]);
      if (c->arch == VR_ARCH_ROBERTA) {
        int padding_idx = c->position_offset - 1; /* config pad_token_id */
        if (ids[t] == c->pad_token_id) {
          pos = padding_idx;
        } else {
          count++;
          pos = padding_idx + count;
        }
      }
      const float *we = s->tok_emb + (size_t)ids[t] * C, *pe = s->pos_emb + (size_t)pos * C;
      for (int i = 0; i < C; i++) s->h[(size_t)t * C + i] = we[i] + s->type_emb0[i] + pe[i];
    }
  }
  vr_cpu_layernorm(s->h, s->emb_nw, s->emb_nb, T, C, c->norm_eps, s->x);
  for (int l = 0; l < c->num_layers; l++) {
    const vr_cpu_layer_t *L = &s->layers[l];
    vr_cpu_linear(s, &L->q, s->x, T, s->q);
    vr_cpu_linear(s, &L->k, s->x, T, s->k);
    vr_cpu_linear(s, &L->v, s->x, T, s->v);
    int rc = vr_cpu_attention(s, cu, n);
    if (rc != 0) return rc;
    vr_cpu_linear(s, &L->o, s->att, T, s->h);
    for (size_t i = 0; i < (size_t)T * C; i++) s->h[i] += s->x[i];
    vr_cpu_layernorm(s->h, L->n1w, L->n1b, T, C, c->norm_eps, s->x);
    vr_cpu_linear(s, &L->up, s->x, T, s->f1);
    vr_cpu_act_rows(s, s->f1, NULL, (size_t)T * F);
    vr_cpu_linear(s, &L->down, s->f1, T, s->h);
    for (size_t i = 0; i < (size_t)T * C; i++) s->h[i] += s->x[i];
    vr_cpu_layernorm(s->h, L->n2w, L->n2b, T, C, c->norm_eps, s->x);
  }
  return 0;
}

/* Decoder trunk: embeddings, pre-norm layers, final RMSNorm; hidden states in s->h (the
 * residual stream before the final norm stays in s->x). */
static int vr_cpu_trunk_decoder(vr_cpu_t *s, const int32_t *ids, const uint32_t *cu, uint32_t n) {
  const vr_model_config_t *c = &s->c;
  int C = c->hidden_size, F = c->intermediate_size, T = (int)cu[n];
  for (int t = 0; t < T; t++) memcpy(s->x + (size_t)t * C, s->tok_emb + (size_t)ids[t] * C, C * sizeof(float));
  for (int l = 0; l < c->num_layers; l++) {
    const vr_cpu_layer_t *L = &s->layers[l];
    vr_cpu_rmsnorm(s->x, L->n1w, T, C, c->norm_eps, s->h);
    vr_cpu_linear(s, &L->q, s->h, T, s->q);
    vr_cpu_linear(s, &L->k, s->h, T, s->k);
    vr_cpu_linear(s, &L->v, s->h, T, s->v);
    vr_cpu_rope(s, s->q, c->num_heads, cu, n);
    vr_cpu_rope(s, s->k, c->num_kv_heads, cu, n);
    int rc = vr_cpu_attention(s, cu, n);
    if (rc != 0) return rc;
    vr_cpu_linear(s, &L->o, s->att, T, s->h);
    for (size_t i = 0; i < (size_t)T * C; i++) s->x[i] += s->h[i];
    vr_cpu_rmsnorm(s->x, L->n2w, T, C, c->norm_eps, s->h);
    vr_cpu_linear(s, &L->gate, s->h, T, s->f1);
    vr_cpu_linear(s, &L->up, s->h, T, s->f2);
    vr_cpu_act_rows(s, s->f1, s->f2, (size_t)T * F);
    vr_cpu_linear(s, &L->down, s->f1, T, s->h);
    for (size_t i = 0; i < (size_t)T * C; i++) s->x[i] += s->h[i];
  }
  vr_cpu_rmsnorm(s->x, s->final_nw, T, C, c->norm_eps, s->h);
  return 0;
}

/* Runs the trunk; *hidden points at the (T, C) hidden states in the workspace. */
static int vr_cpu_trunk(vr_cpu_t *s, const int32_t *ids, const uint32_t *cu, uint32_t n, const float **hidden) {
  int rc = vr_cpu_ensure_ws(s, cu[n]);
  if (rc != 0) return rc;
  if (s->c.is_decoder) {
    rc = vr_cpu_trunk_decoder(s, ids, cu, n);
    *hidden = s->h;
  } else {
    rc = vr_cpu_trunk_encoder(s, ids, cu, n);
    *hidden = s->x;
  }
  return rc;
}

/* ---- heads ------------------------------------------------------------------------- */

/* The row a sequence's score is read from, relative to its start. Encoders: token 0 ([CLS] /
 * <s>). Decoders: the last token that is not pad_token_id (transformers: argmax of
 * index * (id != pad), i.e. 0 when every token is pad); no pad id: the last token. */
static uint32_t vr_cpu_score_row(const vr_model_config_t *c, const int32_t *ids, uint32_t len) {
  if (!c->is_decoder) return 0;
  if (c->pad_token_id < 0) return len - 1;
  for (uint32_t i = len; i-- > 0;)
    if (ids[i] != c->pad_token_id) return i;
  return 0;
}

/* Score head on the trunk's hidden states (T, C): encoders pool the score row (bert: pooler
 * dense + tanh, then classifier; roberta: classifier.dense + tanh, then out_proj); decoders
 * apply score (num_labels = 1, C) to it. */
static void vr_cpu_score_head(vr_cpu_t *s, const float *hidden, const int32_t *ids, const uint32_t *cu,
                              uint32_t n, float *scores) {
  const int C = s->c.hidden_size;
  for (uint32_t q = 0; q < n; q++) {
    const uint32_t len = cu[q + 1] - cu[q];
    const float *row = hidden + (size_t)(cu[q] + vr_cpu_score_row(&s->c, ids + cu[q], len)) * C;
    if (s->c.is_decoder) {
      vr_cpu_linear(s, &s->head2, row, 1, scores + q);
      continue;
    }
    float *pooled = s->row;
    vr_cpu_linear(s, &s->head1, row, 1, pooled);
    for (int i = 0; i < C; i++) pooled[i] = tanhf(pooled[i]);
    vr_cpu_linear(s, &s->head2, pooled, 1, scores + q);
  }
}

/* ---- backend entry points ---------------------------------------------------------- */

static int vr_cpu_forward(void *state, const int32_t *ids, const uint32_t *cu_seqlens, uint32_t n_seqs,
                          float *scores) {
  vr_cpu_t *s = state;
  if (n_seqs == 0) return 0;
  const float *hidden;
  int rc = vr_cpu_trunk(s, ids, cu_seqlens, n_seqs, &hidden);
  if (rc != 0) return rc;
  vr_cpu_score_head(s, hidden, ids, cu_seqlens, n_seqs, scores);
  return 0;
}

static int vr_cpu_hidden(void *state, const int32_t *ids, const uint32_t *cu_seqlens, uint32_t n_seqs,
                         float *out) {
  vr_cpu_t *s = state;
  if (n_seqs == 0) return 0;
  const float *hidden;
  int rc = vr_cpu_trunk(s, ids, cu_seqlens, n_seqs, &hidden);
  if (rc != 0) return rc;
  memcpy(out, hidden, (size_t)cu_seqlens[n_seqs] * s->c.hidden_size * sizeof(float));
  return 0;
}


static void vr_cpu_describe(void *state, vr_model_info_t *info) {
  vr_cpu_t *s = state;
  snprintf(info->device, sizeof info->device, "cpu");
  snprintf(info->device_name, sizeof info->device_name, "cpu (%d threads, %s)", s->n_threads,
           vr_cpu_gemm_name(s->gemm));
  snprintf(info->compute_dtype, sizeof info->compute_dtype, "f32");
  info->host_bytes = s->weight_bytes + vr_cpu_ws_bytes(s) + s->s_cap * sizeof(float) +
                     (size_t)s->n_threads * VR_CPU_GEMM_PACK_FLOATS(s->pack_k) * sizeof(float) +
                     (s->rope_cos ? 2 * (size_t)s->max_len * (s->c.head_dim / 2) * sizeof(float) : 0);
  info->device_bytes = 0;
}

const vr_backend_ops_t vr_backend_cpu = {
    .name = "cpu",
    .init = vr_cpu_init,
    .forward = vr_cpu_forward,
    .hidden = vr_cpu_hidden,
    .free = vr_cpu_free,
    .describe = vr_cpu_describe,
};
