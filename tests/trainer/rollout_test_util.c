/* rollout_test_util.c: see rollout_test_util.h. */
#include "rollout_test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vr_config.h"

static float rt_u(uint64_t *st) {
  uint64_t z = (*st += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void rt_fill(float *d, size_t n, uint64_t *st, float scale, int norm) {
  for (size_t i = 0; i < n; i++) d[i] = norm ? 1.0f + 0.2f * rt_u(st) : scale * rt_u(st);
}

/* The next n floats of the buffer, filled. */
static const float *rt_take(float **p, size_t n, uint64_t *st, float scale, int norm) {
  float *d = *p;
  *p += n;
  rt_fill(d, n, st, scale, norm);
  return d;
}

void rt_model_random(rt_model_t *m, const rt_shape_t *s, uint64_t seed, float scale) {
  memset(m, 0, sizeof *m);
  vr_model_config_t *c = &m->cfg;
  c->arch = s->sliding_window ? VR_ARCH_MISTRAL : (s->qkv_bias ? VR_ARCH_QWEN2 : VR_ARCH_LLAMA);
  c->is_decoder = 1;
  c->vocab_size = s->vocab, c->hidden_size = s->hidden, c->num_layers = s->layers, c->num_heads = s->heads;
  c->num_kv_heads = s->kv_heads, c->head_dim = s->head_dim, c->intermediate_size = s->inter;
  c->max_position_embeddings = c->max_seq_len = s->max_pos;
  c->num_labels = 1, c->norm_eps = 1e-6f, c->act = VR_ACT_SILU, c->pad_token_id = -1;
  c->attention_bias = s->qkv_bias, c->tie_word_embeddings = s->tied, c->sliding_window = s->sliding_window;
  c->rope_theta = 10000.0f, c->rope_attention_scaling = 1.0f;
  c->rope_inv_freq = vr_rope_inv_freq(s->head_dim, 10000.0f, "default", 1, 1, 4, 8192);
  const size_t C = s->hidden, V = s->vocab, F = s->inter, QD = (size_t)s->heads * s->head_dim,
               KD = (size_t)s->kv_heads * s->head_dim;
  size_t per_layer = QD * C + 2 * KD * C + C * QD + 2 * C + 3 * F * C + (s->qkv_bias ? QD + 2 * KD : 0);
  m->n_params = V * C + (size_t)s->layers * per_layer + C + (s->tied ? 0 : V * C);
  m->params = malloc(m->n_params * sizeof(float));
  m->layers = calloc((size_t)s->layers, sizeof *m->layers);
  uint64_t st = seed;
  float *p = m->params;
#define TAKE(n, norm) rt_take(&p, (n), &st, scale, norm)
  m->w.tok_emb = TAKE(V * C, 0);
  for (int l = 0; l < s->layers; l++) {
    vr_rollout_layer_w_t *L = &m->layers[l];
    L->norm1_w = TAKE(C, 1);
    L->q_w = TAKE(QD * C, 0);
    L->k_w = TAKE(KD * C, 0);
    L->v_w = TAKE(KD * C, 0);
    if (s->qkv_bias) {
      L->q_b = TAKE(QD, 0);
      L->k_b = TAKE(KD, 0);
      L->v_b = TAKE(KD, 0);
    }
    L->o_w = TAKE(C * QD, 0);
    L->norm2_w = TAKE(C, 1);
    L->gate_w = TAKE(F * C, 0);
    L->up_w = TAKE(F * C, 0);
    L->down_w = TAKE(C * F, 0);
  }
  m->w.final_norm_w = TAKE(C, 1);
  m->w.lm_head = s->tied ? m->w.tok_emb : TAKE(V * C, 0);
#undef TAKE
  m->w.layers = m->layers;
}

void rt_model_free(rt_model_t *m) {
  free(m->params);
  free(m->layers);
  free(m->cfg.rope_inv_freq);
  memset(m, 0, sizeof *m);
}

static void rt_lin(const float *w, const float *b, int out, int in, const double *x, double *y) {
  for (int o = 0; o < out; o++) {
    double a = b ? b[o] : 0.0;
    for (int i = 0; i < in; i++) a += (double)w[(size_t)o * in + i] * x[i];
    y[o] = a;
  }
}

static void rt_rms(const double *x, const float *w, int C, double eps, double *y) {
  double ss = 0;
  for (int i = 0; i < C; i++) ss += x[i] * x[i];
  double inv = 1.0 / sqrt(ss / C + eps);
  for (int i = 0; i < C; i++) y[i] = w[i] * x[i] * inv;
}

static void rt_rope(double *v, int D, int pos, const float *inv) {
  for (int i = 0; i < D / 2; i++) {
    double a = (double)pos * inv[i], c = cos(a), s = sin(a), x = v[i], y = v[i + D / 2];
    v[i] = x * c - y * s;
    v[i + D / 2] = y * c + x * s;
  }
}

void rt_ref_logits(const rt_model_t *m, const int32_t *ids, int len, double *logits) {
  const vr_model_config_t *c = &m->cfg;
  const int C = c->hidden_size, H = c->num_heads, KV = c->num_kv_heads, D = c->head_dim, F = c->intermediate_size;
  const int V = c->vocab_size, G = H / KV, sw = c->sliding_window;
  double *x = calloc((size_t)len * C, sizeof *x), *h = malloc((size_t)C * sizeof *h);
  double *q = malloc((size_t)len * H * D * sizeof *q), *k = malloc((size_t)len * KV * D * sizeof *k);
  double *v = malloc((size_t)len * KV * D * sizeof *v), *att = malloc((size_t)H * D * sizeof *att);
  double *g = malloc((size_t)F * sizeof *g), *u = malloc((size_t)F * sizeof *u), *o = malloc((size_t)C * sizeof *o);
  double *sc = malloc((size_t)len * sizeof *sc);
  for (int t = 0; t < len; t++)
    for (int i = 0; i < C; i++) x[(size_t)t * C + i] = m->w.tok_emb[(size_t)ids[t] * C + i];
  for (int l = 0; l < c->num_layers; l++) {
    const vr_rollout_layer_w_t *L = &m->w.layers[l];
    for (int t = 0; t < len; t++) {
      rt_rms(x + (size_t)t * C, L->norm1_w, C, c->norm_eps, h);
      rt_lin(L->q_w, L->q_b, H * D, C, h, q + (size_t)t * H * D);
      rt_lin(L->k_w, L->k_b, KV * D, C, h, k + (size_t)t * KV * D);
      rt_lin(L->v_w, L->v_b, KV * D, C, h, v + (size_t)t * KV * D);
      for (int hh = 0; hh < H; hh++) rt_rope(q + ((size_t)t * H + hh) * D, D, t, c->rope_inv_freq);
      for (int hh = 0; hh < KV; hh++) rt_rope(k + ((size_t)t * KV + hh) * D, D, t, c->rope_inv_freq);
    }
    for (int t = 0; t < len; t++) {
      int lo = sw > 0 && t - sw + 1 > 0 ? t - sw + 1 : 0;
      for (int hh = 0; hh < H; hh++) {
        const double *qr = q + ((size_t)t * H + hh) * D;
        double mx = -INFINITY, sum = 0;
        for (int j = lo; j <= t; j++) {
          const double *kr = k + ((size_t)j * KV + hh / G) * D;
          double a = 0;
          for (int d = 0; d < D; d++) a += qr[d] * kr[d];
          sc[j] = a / sqrt((double)D);
          if (sc[j] > mx) mx = sc[j];
        }
        for (int j = lo; j <= t; j++) sum += (sc[j] = exp(sc[j] - mx));
        for (int d = 0; d < D; d++) {
          double a = 0;
          for (int j = lo; j <= t; j++) a += sc[j] / sum * v[((size_t)j * KV + hh / G) * D + d];
          att[(size_t)hh * D + d] = a;
        }
      }
      rt_lin(L->o_w, L->o_b, C, H * D, att, o);
      for (int i = 0; i < C; i++) x[(size_t)t * C + i] += o[i];
      rt_rms(x + (size_t)t * C, L->norm2_w, C, c->norm_eps, h);
      rt_lin(L->gate_w, L->gate_b, F, C, h, g);
      rt_lin(L->up_w, L->up_b, F, C, h, u);
      for (int i = 0; i < F; i++) g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
      rt_lin(L->down_w, L->down_b, C, F, g, o);
      for (int i = 0; i < C; i++) x[(size_t)t * C + i] += o[i];
    }
  }
  for (int t = 0; t < len; t++) {
    rt_rms(x + (size_t)t * C, m->w.final_norm_w, C, c->norm_eps, h);
    for (int vv = 0; vv < V; vv++) {
      double a = 0;
      for (int i = 0; i < C; i++) a += (double)m->w.lm_head[(size_t)vv * C + i] * h[i];
      logits[(size_t)t * V + vv] = a;
    }
  }
  free(x), free(h), free(q), free(k), free(v), free(att), free(g), free(u), free(o), free(sc);
}
