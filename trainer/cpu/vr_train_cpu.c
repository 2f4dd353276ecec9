/* vr_train_cpu.c: the cpu fp32 training backend (vr_train_backend_cpu, vr_train.h).
 *
 * Parameters, gradients and the shard's AdamW moments live in host buffers laid out as the
 * vr_lm table. Forward over a packed batch keeps, per layer, what backward needs (the layer's
 * input, both norms' outputs and rstd, q/k after RoPE, v, the attention output and its
 * log-sum-exp rows, gate/up/act); with recompute only each layer's input is kept and the layer
 * is run again in backward. The LM head works on the rows that predict a wanted token only, in
 * chunks (vr_tcpu_lmhead): no (T, V) array exists. All GEMMs are vr_cpu_gemm's deterministic
 * kernels; results do not depend on the thread count.
 *
 * Threading: one call at a time per state; OpenMP inside (opt->n_threads). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_log.h"
#include "vr_tcpu_ops.h"
#include "vr_train.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Activations of one layer for T tokens. */
typedef struct vr_tcpu_acts {
  float *xin, *h1, *r1, *q, *k, *v, *att, *lse, *xmid, *h2, *r2, *g, *u, *a;
} vr_tcpu_acts_t;

/* Parameter (or gradient) pointers of one layer; NULL where absent. */
typedef struct vr_tcpu_layer {
  float *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *o_w, *o_b, *gate_w, *gate_b, *up_w, *up_b, *down_w, *down_b;
  float *n1, *n2;
} vr_tcpu_layer_t;

typedef struct vr_tcpu {
  vr_lm_config_t c;
  size_t n_floats, lo, hi;
  float *p, *g, *m, *v;            /* params, grads (n_floats); moments (hi - lo) */
  vr_tcpu_layer_t *pl, *gl;        /* per layer views of p and g */
  size_t *off_layer, off_fnorm;    /* offsets of each layer's first tensor and of the final norm */
  float *p_embed, *g_embed, *p_fnorm, *g_fnorm, *p_head, *g_head, *p_score, *g_score, *p_sbias, *g_sbias;
  vr_tcpu_ctx_t ctx;
  vr_tcpu_rope_tab_t rope;         /* positions up to the longest sequence seen */
  int recompute, vchunk;
  /* workspace for ws_T tokens */
  size_t ws_T, att_cap;
  vr_tcpu_acts_t *acts;            /* num_layers entries (recompute: 1, plus xs) */
  float *xs;                       /* recompute: (num_layers, T, C) layer inputs */
  float *xf, *rf, *hf;             /* final residual, rstd, normed (T, C) */
  float *tmpC, *dx, *dh, *dq, *dk, *dv, *datt, *da, *dg, *du, *hs, *dhs, *att_s, *zbuf;
  int32_t *tgt, *sel;
  float *sel_lse, *sel_ent, *sel_logp;
  /* the kept batch */
  int kept, T, R;
  uint32_t n;
  int32_t *ids;
  uint32_t *cu;
  float tau;
} vr_tcpu_t;

static float *vr_tcpu_at(float *base, const vr_lm_t *lm, int i) {
  return i < 0 || !base ? NULL : base + vr_lm_tensor(lm, (size_t)i)->offset;
}

static void vr_tcpu_views(vr_tcpu_layer_t *d, float *base, const vr_lm_t *lm, const vr_lm_layer_index_t *L) {
  d->q_w = vr_tcpu_at(base, lm, L->q_w), d->q_b = vr_tcpu_at(base, lm, L->q_b);
  d->k_w = vr_tcpu_at(base, lm, L->k_w), d->k_b = vr_tcpu_at(base, lm, L->k_b);
  d->v_w = vr_tcpu_at(base, lm, L->v_w), d->v_b = vr_tcpu_at(base, lm, L->v_b);
  d->o_w = vr_tcpu_at(base, lm, L->o_w), d->o_b = vr_tcpu_at(base, lm, L->o_b);
  d->gate_w = vr_tcpu_at(base, lm, L->gate_w), d->gate_b = vr_tcpu_at(base, lm, L->gate_b);
  d->up_w = vr_tcpu_at(base, lm, L->up_w), d->up_b = vr_tcpu_at(base, lm, L->up_b);
  d->down_w = vr_tcpu_at(base, lm, L->down_w), d->down_b = vr_tcpu_at(base, lm, L->down_b);
  d->n1 = vr_tcpu_at(base, lm, L->norm1), d->n2 = vr_tcpu_at(base, lm, L->norm2);
}

static float *vr_tcpu_alloc(size_t n, int *err) {
  if (*err) return NULL;
  size_t bytes = ((n ? n : 1) * sizeof(float) + 63) & ~(size_t)63;
  float *p = aligned_alloc(64, bytes);
  if (!p) *err = VR_ERR_NOMEM;
  else memset(p, 0, bytes);
  return p;
}

static void vr_tcpu_free_ws(vr_tcpu_t *s) {
  int nl = s->recompute ? 1 : s->c.num_layers;
  for (int l = 0; s->acts && l < nl; l++) {
    vr_tcpu_acts_t *A = &s->acts[l];
    float *all[] = {A->xin, A->h1, A->r1, A->q, A->k, A->v, A->att, A->lse, A->xmid, A->h2, A->r2, A->g, A->u, A->a};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
  }
  free(s->acts);
  s->acts = NULL;
  float **bufs[] = {&s->xs, &s->xf, &s->rf, &s->hf, &s->tmpC, &s->dx, &s->dh, &s->dq, &s->dk, &s->dv, &s->datt,
                    &s->da, &s->dg, &s->du, &s->hs, &s->dhs, &s->sel_lse, &s->sel_ent, &s->sel_logp, &s->ctx.tmp};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
    free(*bufs[i]);
    *bufs[i] = NULL;
  }
  free(s->tgt), free(s->sel), free(s->ids), free(s->cu);
  s->tgt = s->sel = s->ids = NULL;
  s->cu = NULL;
  s->ws_T = 0;
}

/* Grows the workspace to T tokens (n_seqs <= T). */
static int vr_tcpu_ensure(vr_tcpu_t *s, size_t T) {
  if (T <= s->ws_T) return 0;
  vr_tcpu_free_ws(s);
  const vr_lm_config_t *c = &s->c;
  size_t C = c->hidden_size, QD = (size_t)c->num_heads * c->head_dim, KD = (size_t)c->num_kv_heads * c->head_dim,
         F = c->intermediate_size, H = c->num_heads;
  int err = 0, nl = s->recompute ? 1 : c->num_layers;
  s->acts = calloc((size_t)nl, sizeof *s->acts);
  if (!s->acts) return VR_ERR_NOMEM;
  for (int l = 0; l < nl; l++) {
    vr_tcpu_acts_t *A = &s->acts[l];
    A->xin = vr_tcpu_alloc(T * C, &err), A->h1 = vr_tcpu_alloc(T * C, &err), A->r1 = vr_tcpu_alloc(T, &err);
    A->q = vr_tcpu_alloc(T * QD, &err), A->k = vr_tcpu_alloc(T * KD, &err), A->v = vr_tcpu_alloc(T * KD, &err);
    A->att = vr_tcpu_alloc(T * QD, &err), A->lse = vr_tcpu_alloc(T * H, &err);
    A->xmid = vr_tcpu_alloc(T * C, &err), A->h2 = vr_tcpu_alloc(T * C, &err), A->r2 = vr_tcpu_alloc(T, &err);
    A->g = vr_tcpu_alloc(T * F, &err), A->u = vr_tcpu_alloc(T * F, &err), A->a = vr_tcpu_alloc(T * F, &err);
  }
  if (s->recompute) s->xs = vr_tcpu_alloc((size_t)c->num_layers * T * C, &err);
  s->xf = vr_tcpu_alloc(T * C, &err), s->rf = vr_tcpu_alloc(T, &err), s->hf = vr_tcpu_alloc(T * C, &err);
  s->tmpC = vr_tcpu_alloc(T * C, &err), s->dx = vr_tcpu_alloc(T * C, &err), s->dh = vr_tcpu_alloc(T * C, &err);
  s->dq = vr_tcpu_alloc(T * QD, &err), s->dk = vr_tcpu_alloc(T * KD, &err), s->dv = vr_tcpu_alloc(T * KD, &err);
  s->datt = vr_tcpu_alloc(T * QD, &err), s->da = vr_tcpu_alloc(T * F, &err), s->dg = vr_tcpu_alloc(T * F, &err);
  s->du = vr_tcpu_alloc(T * F, &err), s->hs = vr_tcpu_alloc(T * C, &err), s->dhs = vr_tcpu_alloc(T * C, &err);
  s->sel_lse = vr_tcpu_alloc(T, &err), s->sel_ent = vr_tcpu_alloc(T, &err), s->sel_logp = vr_tcpu_alloc(T, &err);
  size_t M = C > QD ? C : QD;
  if (F > M) M = F;
  size_t tmp = M * M + 2 * T * M, lm = (size_t)VR_TCPU_LM_ROWS * C + (size_t)s->vchunk * (VR_TCPU_LM_ROWS + C);
  s->ctx.tmp_floats = tmp > lm ? tmp : lm;
  s->ctx.tmp = vr_tcpu_alloc(s->ctx.tmp_floats, &err);
  s->tgt = malloc(T * sizeof *s->tgt), s->sel = malloc(T * sizeof *s->sel);
  s->ids = malloc(T * sizeof *s->ids), s->cu = malloc((T + 1) * sizeof *s->cu);
  if (!s->tgt || !s->sel || !s->ids || !s->cu) err = VR_ERR_NOMEM;
  if (err) {
    vr_tcpu_free_ws(s);
    vr_log(VR_LOG_ERROR, "cpu training backend: out of memory for a %zu-token workspace", T);
    return err;
  }
  s->ws_T = T;
  return 0;
}

static void vr_tcpu_free(void *state) {
  vr_tcpu_t *s = state;
  if (!s) return;
  vr_tcpu_free_ws(s);
  free(s->p), free(s->g), free(s->m), free(s->v);
  free(s->pl), free(s->gl), free(s->off_layer);
  vr_tcpu_rope_free(&s->rope);
  free((void *)s->c.rope_inv_freq);
  free(s->ctx.pack);
  free(s->zbuf);
  free(s->att_s);
  free(s);
}

static int vr_tcpu_init(const vr_lm_t *lm, const vr_train_options_t *opt, size_t lo, size_t hi, void **state) {
  *state = NULL;
  vr_cpu_gemm_variant_t gemm;
  if (vr_cpu_gemm_parse(opt->cpu_gemm, &gemm) != 0) {
    vr_log(VR_LOG_ERROR, "cpu-gemm \"%s\" is not auto|generic|avx2+fma", opt->cpu_gemm);
    return VR_ERR_INVAL;
  }
  if (!vr_cpu_gemm_supported(gemm)) {
    vr_log(VR_LOG_ERROR, "cpu-gemm %s: this CPU lacks AVX2 + FMA. HINT: --cpu-gemm generic (or auto)", vr_cpu_gemm_name(gemm));
    return VR_ERR_UNSUPPORTED;
  }
  vr_tcpu_t *s = calloc(1, sizeof *s);
  if (!s) return VR_ERR_NOMEM;
  s->c = *vr_lm_config(lm);
  const vr_lm_config_t *c = &s->c;
  int err = 0, half = c->head_dim / 2;
  float *inv = malloc((size_t)half * sizeof *inv);
  if (inv) memcpy(inv, c->rope_inv_freq, (size_t)half * sizeof *inv);
  else err = VR_ERR_NOMEM;
  s->c.rope_inv_freq = inv;
  s->ctx.gemm = gemm;
#ifdef _OPENMP
  s->ctx.n_threads = opt->n_threads > 0 ? opt->n_threads : omp_get_max_threads();
#else
  s->ctx.n_threads = 1;
#endif
  s->recompute = opt->recompute;
  size_t vchunk = opt->vocab_chunk > 0 ? opt->vocab_chunk : 4096; /* clamped before it becomes an int */
  s->vchunk = vchunk > (size_t)c->vocab_size ? c->vocab_size : (int)vchunk;
  s->n_floats = vr_lm_n_floats(lm);
  s->lo = lo, s->hi = hi;
  s->p = vr_tcpu_alloc(s->n_floats, &err);
  if (!opt->forward_only) { /* a forward-only engine (vr_train.c refuses the rest) has no gradients or moments */
    s->g = vr_tcpu_alloc(s->n_floats, &err);
    s->m = vr_tcpu_alloc(hi - lo, &err), s->v = vr_tcpu_alloc(hi - lo, &err);
  }
  if (!err) memcpy(s->p, vr_lm_params_const(lm), s->n_floats * sizeof(float));
  s->pl = calloc((size_t)c->num_layers, sizeof *s->pl), s->gl = calloc((size_t)c->num_layers, sizeof *s->gl);
  s->off_layer = calloc((size_t)c->num_layers, sizeof *s->off_layer);
  if (!s->pl || !s->gl || !s->off_layer) err = VR_ERR_NOMEM;
  const vr_lm_index_t *ix = vr_lm_index(lm);
  for (int l = 0; l < c->num_layers && !err; l++) {
    vr_tcpu_views(&s->pl[l], s->p, lm, &ix->layers[l]);
    vr_tcpu_views(&s->gl[l], s->g, lm, &ix->layers[l]);
    s->off_layer[l] = vr_lm_tensor(lm, (size_t)ix->layers[l].q_w)->offset;
  }
  if (!err) s->off_fnorm = vr_lm_tensor(lm, (size_t)ix->final_norm)->offset;
  if (!err) {
    s->p_embed = vr_tcpu_at(s->p, lm, ix->embed), s->g_embed = vr_tcpu_at(s->g, lm, ix->embed);
    s->p_fnorm = vr_tcpu_at(s->p, lm, ix->final_norm), s->g_fnorm = vr_tcpu_at(s->g, lm, ix->final_norm);
    int head = c->head == VR_LM_HEAD_LM ? (ix->lm_head >= 0 ? ix->lm_head : ix->embed) : -1;
    s->p_head = vr_tcpu_at(s->p, lm, head), s->g_head = vr_tcpu_at(s->g, lm, head);
    s->p_score = vr_tcpu_at(s->p, lm, ix->score_w), s->g_score = vr_tcpu_at(s->g, lm, ix->score_w);
    s->p_sbias = vr_tcpu_at(s->p, lm, ix->score_b), s->g_sbias = vr_tcpu_at(s->g, lm, ix->score_b);
  }
  int k = c->hidden_size;
  if (c->num_heads * c->head_dim > k) k = c->num_heads * c->head_dim;
  if (c->intermediate_size > k) k = c->intermediate_size;
  s->ctx.pack_k = k;
  s->ctx.pack = vr_tcpu_alloc((size_t)s->ctx.n_threads * VR_CPU_GEMM_PACK_FLOATS(k), &err);
  s->zbuf = vr_tcpu_alloc((size_t)VR_TCPU_LM_ROWS * s->vchunk, &err);
  if (err) {
    vr_log(VR_LOG_ERROR, "cpu training backend: out of memory for %zu parameters", s->n_floats);
    vr_tcpu_free(s);
    return err;
  }
  *state = s;
  return 0;
}

/* ---- forward ------------------------------------------------------------------------------ */

/* One decoder layer on A->xin (filled by the caller); writes xout (T, C). */
static int vr_tcpu_layer_fwd(vr_tcpu_t *s, const vr_tcpu_layer_t *P, vr_tcpu_acts_t *A, int T, float *xout) {
  const vr_lm_config_t *c = &s->c;
  const vr_tcpu_ctx_t *x = &s->ctx;
  const int C = c->hidden_size, H = c->num_heads, KV = c->num_kv_heads, D = c->head_dim, F = c->intermediate_size;
  vr_tcpu_rmsnorm(A->xin, P->n1, T, C, c->rms_norm_eps, A->h1, A->r1);
  vr_tcpu_linear(x, A->h1, P->q_w, P->q_b, T, C, H * D, A->q);
  vr_tcpu_linear(x, A->h1, P->k_w, P->k_b, T, C, KV * D, A->k);
  vr_tcpu_linear(x, A->h1, P->v_w, P->v_b, T, C, KV * D, A->v);
  vr_tcpu_rope(A->q, H, D, s->cu, s->n, s->rope.cos_t, s->rope.sin_t, 0);
  vr_tcpu_rope(A->k, KV, D, s->cu, s->n, s->rope.cos_t, s->rope.sin_t, 0);
  vr_tcpu_attention(x, A->q, A->k, A->v, H, KV, D, c->sliding_window, s->cu, s->n, A->att, A->lse, s->att_s);
  vr_tcpu_linear(x, A->att, P->o_w, P->o_b, T, H * D, C, s->tmpC);
  for (size_t i = 0; i < (size_t)T * C; i++) A->xmid[i] = A->xin[i] + s->tmpC[i];
  vr_tcpu_rmsnorm(A->xmid, P->n2, T, C, c->rms_norm_eps, A->h2, A->r2);
  vr_tcpu_linear(x, A->h2, P->gate_w, P->gate_b, T, C, F, A->g);
  vr_tcpu_linear(x, A->h2, P->up_w, P->up_b, T, C, F, A->u);
  vr_tcpu_swiglu(A->g, A->u, (size_t)T * F, A->a);
  vr_tcpu_linear(x, A->a, P->down_w, P->down_b, T, F, C, s->tmpC);
  for (size_t i = 0; i < (size_t)T * C; i++) xout[i] = A->xmid[i] + s->tmpC[i];
  return 0;
}

static float *vr_tcpu_layer_input(vr_tcpu_t *s, int l) {
  return s->recompute ? s->xs + (size_t)l * s->T * s->c.hidden_size : s->acts[l].xin;
}

/* Runs the trunk: embeddings, every layer, final norm into s->hf. */
static void vr_tcpu_trunk(vr_tcpu_t *s) {
  const vr_lm_config_t *c = &s->c;
  const int C = c->hidden_size, T = s->T;
  float *x0 = vr_tcpu_layer_input(s, 0);
  for (int t = 0; t < T; t++) memcpy(x0 + (size_t)t * C, s->p_embed + (size_t)s->ids[t] * C, C * sizeof(float));
  for (int l = 0; l < c->num_layers; l++) {
    vr_tcpu_acts_t *A = &s->acts[s->recompute ? 0 : l];
    if (s->recompute) memcpy(A->xin, vr_tcpu_layer_input(s, l), (size_t)T * C * sizeof(float));
    float *xout = l + 1 < c->num_layers ? vr_tcpu_layer_input(s, l + 1) : s->xf;
    vr_tcpu_layer_fwd(s, &s->pl[l], A, T, xout);
  }
  vr_tcpu_rmsnorm(s->xf, s->p_fnorm, T, C, c->rms_norm_eps, s->hf, s->rf);
}

static int vr_tcpu_forward(void *state, const vr_train_batch_t *b, float tau, float *out, float *ent, int keep) {
  vr_tcpu_t *s = state;
  const uint32_t T = b->cu_seqlens[b->n_seqs];
  s->kept = 0;
  int rc = vr_tcpu_ensure(s, T > 0 ? T : 1);
  uint32_t longest = 0;
  for (uint32_t q = 0; q < b->n_seqs; q++)
    if (b->cu_seqlens[q + 1] - b->cu_seqlens[q] > longest) longest = b->cu_seqlens[q + 1] - b->cu_seqlens[q];
  if (rc == 0 && vr_tcpu_rope_grow(&s->rope, longest, (size_t)s->c.max_position_embeddings, s->c.rope_inv_freq,
                                    s->c.head_dim / 2, s->c.rope_attention_scaling) != 0) {
    vr_log(VR_LOG_ERROR, "cpu training backend: out of memory for RoPE tables of %u positions", longest);
    rc = VR_ERR_NOMEM;
  }
  if (rc != 0) return rc;
  s->T = (int)T, s->n = b->n_seqs, s->tau = tau;
  memcpy(s->ids, b->ids, T * sizeof *s->ids);
  memcpy(s->cu, b->cu_seqlens, (b->n_seqs + 1) * sizeof *s->cu);
  size_t need = vr_tcpu_attn_scratch(s->cu, s->n, s->ctx.n_threads, s->c.head_dim);
  if (need > s->att_cap) {
    free(s->att_s);
    int err = 0;
    s->att_s = vr_tcpu_alloc(need, &err);
    s->att_cap = s->att_s ? need : 0;
    if (err) return err;
  }
  vr_tcpu_trunk(s);
  const int C = s->c.hidden_size;
  memset(out, 0, T * sizeof *out);
  if (ent) memset(ent, 0, T * sizeof *ent);
  int R = 0;
  for (uint32_t q = 0; q < s->n; q++)
    for (uint32_t t = s->cu[q]; t < s->cu[q + 1]; t++) {
      int want = b->mask ? b->mask[t] != 0 : (s->c.head == VR_LM_HEAD_VALUE || t > s->cu[q]);
      if (want) s->sel[R++] = (int32_t)t;
    }
  s->R = R;
  if (s->c.head == VR_LM_HEAD_VALUE) {
    const float *w = s->p_score, bias = s->p_sbias[0];
    for (int r = 0; r < R; r++) {
      const float *h = s->hf + (size_t)s->sel[r] * C;
      float acc = 0.0f;
      for (int i = 0; i < C; i++) acc += h[i] * w[i];
      out[s->sel[r]] = acc + bias;
    }
  } else {
    for (int r = 0; r < R; r++) {
      memcpy(s->hs + (size_t)r * C, s->hf + (size_t)(s->sel[r] - 1) * C, C * sizeof(float));
      s->tgt[r] = s->ids[s->sel[r]];
    }
    vr_tcpu_lmhead(&s->ctx, s->hs, s->tgt, R, C, s->p_head, s->c.vocab_size, tau, s->vchunk, s->sel_logp,
                   s->sel_ent, s->sel_lse, s->zbuf);
    for (int r = 0; r < R; r++) {
      out[s->sel[r]] = s->sel_logp[r];
      if (ent) ent[s->sel[r]] = s->sel_ent[r];
    }
  }
  s->kept = keep;
  return 0;
}

/* ---- backward ------------------------------------------------------------------------------- */

/* dx (T, C): gradient at the layer's output on entry, at its input on return. */
static void vr_tcpu_layer_bwd(vr_tcpu_t *s, int l, float *dx) {
  const vr_lm_config_t *c = &s->c;
  const vr_tcpu_ctx_t *x = &s->ctx;
  const int C = c->hidden_size, H = c->num_heads, KV = c->num_kv_heads, D = c->head_dim, F = c->intermediate_size;
  const int T = s->T;
  const vr_tcpu_layer_t *P = &s->pl[l], *G = &s->gl[l];
  vr_tcpu_acts_t *A = &s->acts[s->recompute ? 0 : l];
  if (s->recompute) {
    memcpy(A->xin, vr_tcpu_layer_input(s, l), (size_t)T * C * sizeof(float));
    vr_tcpu_layer_fwd(s, P, A, T, s->dh); /* output unused: dh is scratch here */
  }
  vr_tcpu_linear_bwd(x, A->a, P->down_w, dx, T, F, C, s->da, 0, G->down_w, G->down_b);
  vr_tcpu_swiglu_bwd(A->g, A->u, s->da, (size_t)T * F, s->dg, s->du);
  vr_tcpu_linear_bwd(x, A->h2, P->gate_w, s->dg, T, C, F, s->dh, 0, G->gate_w, G->gate_b);
  vr_tcpu_linear_bwd(x, A->h2, P->up_w, s->du, T, C, F, s->dh, 1, G->up_w, G->up_b);
  vr_tcpu_rmsnorm_bwd(A->xmid, P->n2, A->r2, s->dh, T, C, dx, G->n2);
  vr_tcpu_linear_bwd(x, A->att, P->o_w, dx, T, H * D, C, s->datt, 0, G->o_w, G->o_b);
  vr_tcpu_attention_bwd(x, A->q, A->k, A->v, A->att, A->lse, s->datt, H, KV, D, c->sliding_window, s->cu, s->n,
                        s->dq, s->dk, s->dv, s->att_s);
  vr_tcpu_rope(s->dq, H, D, s->cu, s->n, s->rope.cos_t, s->rope.sin_t, 1);
  vr_tcpu_rope(s->dk, KV, D, s->cu, s->n, s->rope.cos_t, s->rope.sin_t, 1);
  vr_tcpu_linear_bwd(x, A->h1, P->q_w, s->dq, T, C, H * D, s->dh, 0, G->q_w, G->q_b);
  vr_tcpu_linear_bwd(x, A->h1, P->k_w, s->dk, T, C, KV * D, s->dh, 1, G->k_w, G->k_b);
  vr_tcpu_linear_bwd(x, A->h1, P->v_w, s->dv, T, C, KV * D, s->dh, 1, G->v_w, G->v_b);
  vr_tcpu_rmsnorm_bwd(A->xin, P->n1, A->r1, s->dh, T, C, dx, G->n1);
}

/* backward_ready (vr_train.h): ready (may be NULL) after the head + final norm, each layer, the
 * embeddings. */
static int vr_tcpu_backward_ready(void *state, const float *dout, const float *dent,
                                  void (*ready)(void *ctx, size_t lo), void *rctx) {
  vr_tcpu_t *s = state;
  const vr_lm_config_t *c = &s->c;
  const int C = c->hidden_size, T = s->T, R = s->R;
  s->kept = 0;
  float *dhf = s->tmpC; /* (T, C) gradient at the final norm's output */
  memset(dhf, 0, (size_t)T * C * sizeof(float));
  if (c->head == VR_LM_HEAD_VALUE) {
    float *gw = s->g_score, *gb = s->g_sbias;
    for (int r = 0; r < R; r++) {
      const int t = s->sel[r];
      const float d = dout[t];
      const float *h = s->hf + (size_t)t * C;
      for (int i = 0; i < C; i++) {
        dhf[(size_t)t * C + i] = d * s->p_score[i];
        gw[i] += d * h[i];
      }
      gb[0] += d;
    }
  } else {
    float *gl = s->sel_logp, *ge = s->dq; /* dq is free until the layers' backward */
    for (int r = 0; r < R; r++) {
      gl[r] = dout[s->sel[r]];
      ge[r] = dent ? dent[s->sel[r]] : 0.0f;
    }
    vr_tcpu_lmhead_bwd(&s->ctx, s->hs, s->tgt, R, C, s->p_head, c->vocab_size, s->tau, s->vchunk, s->sel_lse,
                       s->sel_ent, gl, dent ? ge : NULL, s->dhs, s->g_head, s->zbuf);
    for (int r = 0; r < R; r++)
      memcpy(dhf + (size_t)(s->sel[r] - 1) * C, s->dhs + (size_t)r * C, C * sizeof(float));
  }
  memset(s->dx, 0, (size_t)T * C * sizeof(float));
  vr_tcpu_rmsnorm_bwd(s->xf, s->p_fnorm, s->rf, dhf, T, C, s->dx, s->g_fnorm);
  if (ready) ready(rctx, s->off_fnorm);
  for (int l = c->num_layers - 1; l >= 0; l--) {
    vr_tcpu_layer_bwd(s, l, s->dx);
    if (ready) ready(rctx, s->off_layer[l]);
  }
  for (int t = 0; t < T; t++) {
    float *ge = s->g_embed + (size_t)s->ids[t] * C;
    const float *d = s->dx + (size_t)t * C;
    for (int i = 0; i < C; i++) ge[i] += d[i];
  }
  if (ready) ready(rctx, 0);
  return 0;
}

static int vr_tcpu_backward(void *state, const float *dout, const float *dent) {
  return vr_tcpu_backward_ready(state, dout, dent, NULL, NULL);
}

/* ---- optimizer and buffers ---------------------------------------------------------------------- */

static int vr_tcpu_zero_grad(void *state) {
  vr_tcpu_t *s = state;
  memset(s->g, 0, s->n_floats * sizeof(float));
  return 0;
}

static float *vr_tcpu_grads(void *state) { return ((vr_tcpu_t *)state)->g; }
static float *vr_tcpu_params(void *state) { return ((vr_tcpu_t *)state)->p; }

static int vr_tcpu_grad_sqnorm(void *state, size_t lo, size_t hi, double *out) {
  vr_tcpu_t *s = state;
  double acc = 0;
  for (size_t i = lo; i < hi && i < s->n_floats; i++) acc += (double)s->g[i] * s->g[i];
  *out = acc;
  return 0;
}

static int vr_tcpu_scale_grads(void *state, float f) {
  vr_tcpu_t *s = state;
  for (size_t i = 0; i < s->n_floats; i++) s->g[i] *= f;
  return 0;
}

static int vr_tcpu_adamw(void *state, const vr_adamw_t *h, int64_t step) {
  vr_tcpu_t *s = state;
  const double bc1 = 1.0 - pow((double)h->beta1, (double)step), bc2 = 1.0 - pow((double)h->beta2, (double)step);
  const float step_size = (float)(h->lr / bc1), bc2_sqrt = (float)sqrt(bc2);
  const float decay = (float)(1.0 - (double)h->lr * h->weight_decay), b1 = h->beta1, b2 = h->beta2;
  for (size_t i = s->lo; i < s->hi; i++) {
    float *p = s->p + i, g = s->g[i], *m = s->m + (i - s->lo), *v = s->v + (i - s->lo);
    *p *= decay;
    *m += (1.0f - b1) * (g - *m); /* torch: exp_avg.lerp_(grad, 1 - beta1) */
    *v = *v * b2 + (1.0f - b2) * g * g;
    *p -= step_size * (*m / (sqrtf(*v) / bc2_sqrt + h->eps));
  }
  return 0;
}

static int vr_tcpu_get_params(void *state, float *dst) {
  vr_tcpu_t *s = state;
  memcpy(dst, s->p, s->n_floats * sizeof(float));
  return 0;
}

static int vr_tcpu_set_params(void *state, const float *src) {
  vr_tcpu_t *s = state;
  memcpy(s->p, src, s->n_floats * sizeof(float));
  s->kept = 0;
  return 0;
}

static int vr_tcpu_get_grads(void *state, float *dst) {
  vr_tcpu_t *s = state;
  memcpy(dst, s->g, s->n_floats * sizeof(float));
  return 0;
}

static int vr_tcpu_get_moments(void *state, float *m, float *v) {
  vr_tcpu_t *s = state;
  memcpy(m, s->m, (s->hi - s->lo) * sizeof(float));
  memcpy(v, s->v, (s->hi - s->lo) * sizeof(float));
  return 0;
}

static int vr_tcpu_set_moments(void *state, const float *m, const float *v) {
  vr_tcpu_t *s = state;
  memcpy(s->m, m, (s->hi - s->lo) * sizeof(float));
  memcpy(s->v, v, (s->hi - s->lo) * sizeof(float));
  return 0;
}

const vr_train_backend_ops_t vr_train_backend_cpu = {
    .name = "cpu",
    .init = vr_tcpu_init,
    .free = vr_tcpu_free,
    .forward = vr_tcpu_forward,
    .backward = vr_tcpu_backward,
    .zero_grad = vr_tcpu_zero_grad,
    .grads = vr_tcpu_grads,
    .grad_sqnorm = vr_tcpu_grad_sqnorm,
    .scale_grads = vr_tcpu_scale_grads,
    .adamw = vr_tcpu_adamw,
    .params = vr_tcpu_params,
    .get_params = vr_tcpu_get_params,
    .set_params = vr_tcpu_set_params,
    .get_grads = vr_tcpu_get_grads,
    .get_moments = vr_tcpu_get_moments,
    .set_moments = vr_tcpu_set_moments,
    .backward_ready = vr_tcpu_backward_ready,
};
