/* vr_cutrain_engine.c: the CUDA training engine (contract in vr_cutrain.h): buffers, the layer
 * forward and backward as sequences of model/cuda's GEMMs and forward kernels and
 * trainer/cuda's backward kernels (vr_cutrain_ops.h), the optimizer entry points. */
#include "vr_cutrain.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_cuda_check.h"
#include "vr_cutrain_ops.h"
#include "vr_log.h"

#define NONE VR_CUTRAIN_NONE

/* The attention backward's dK / dV per query head (the split table) for models with at most
 * this many key heads (a build-time knob for measurements: 0 never, large always). */
#ifndef VR_CUTRAIN_SPLIT_KV_MAX
#define VR_CUTRAIN_SPLIT_KV_MAX 4
#endif

/* One layer's kept activations (T = max_tokens rows); with recomputation one set that every
 * layer's forward overwrites (backward recomputes a layer's into it from x[l] first). */
typedef struct {
  float *x_mid;  /* (T, C) residual after attention */
  uint16_t *xn1; /* (T, C) RMSNorm1 output */
  uint16_t *qkv; /* (T, NQKV) after RoPE */
  uint16_t *att; /* (T, H*D) attention output */
  float *lse;    /* (T, H) */
  uint16_t *xn2; /* (T, C) */
  uint16_t *gu;  /* (T, 2F) gate | up */
  uint16_t *act; /* (T, F) */
} layer_acts_t;

struct vr_cutrain {
  vr_cutrain_desc_t d;
  vr_cutrain_layer_off_t *L;
  int T_max, chunk, nqkv, fused_qkv, fused_gu, recompute, fwd_only;
  int dxn16; /* the fused projections' dX in bf16 (vr_cutrain_desc_t.dxn_f32 clear, hidden small enough) */
  int attn_bwd; /* the attention backward's kernel (VR_CUTRAIN_ATTN_BWD_*, resolved) */
  int lmhead_fused; /* the LM head's forward: the fused Hopper GEMM (its form, VR_CUTRAIN_LMHEAD_FORM_*) or
                     * cuBLASLt + the row kernel (0) */
  int mlp_fused;    /* the gate/up projection + SwiGLU: one Hopper GEMM (1) or cuBLASLt + the SwiGLU kernel (0) */
  size_t lo, hi, dev_bytes;
  cudaStream_t s;
  vr_cuda_gemm_t *gemm;
  /* parameters */
  float *p, *g, *m, *v;
  uint16_t *p16;
  /* activations */
  float **x; /* layers + 1 residual streams (T, C): x[l] = input of layer l (forward-only: two, x[l] = x[l % 2]) */
  layer_acts_t *a;
  uint16_t *xf; /* (T, C) final norm output */
  /* backward scratch */
  float *dx, *dxn;                          /* (T, C) */
  uint16_t *dx16;                           /* (T, C) */
  uint16_t *dact, *dgu, *datt, *dqkv, *tmp; /* (T, F), (T, 2F), (T, HD), (T, NQKV), (T, max(F, HD)) */
  float *delta, *red;                       /* (T, H); reduction scratch */
  float *split;                             /* the attention backward's split dK / dV table, or NULL */
  /* LM head */
  float *logits, *lse_r, *ent_r, *logp_r, *glp, *gent;
  float *hv; /* value head: (T, C) fp32 final norm output */
  int value; /* 1: value head (score_w), 0: LM head */
  uint16_t *dlogits;
  /* (T, V) bf16 log-softmax of a kept forward and its (T, vr_cutrain_lsm_segs(V)) segment
   * maxima, allocated at the first one when memory allows (then backward does not recompute the
   * logits); lp16_off: not tried again */
  uint16_t *lp16;
  float *lpmax;
  int lp16_off, lp16_kept;
  /* metadata: one device int32 block, staged through pinned host memory */
  int32_t *meta_d, *meta_h;
  int32_t *ids, *pos, *cu, *fa_tiles, *tiles, *tiles_q, *meta4, *tgt, *order, *seg, *uniq;
  uint64_t *sort_h; /* (2 (T + 1)) host scratch of the tile sorts */
  int32_t *count_h; /* (V) host */
  float *rope_if, *rope_nif;
  float *stage_h; /* pinned (2 T) floats: glp, gent in; logp, ent out */
  double *sq, *sq_red;
  int64_t *ad_off, *ad_len; /* the shard's optimizer chunks, ordered by opt_stage (below) */
  int ad_n;
  /* The optimizer overlapped with the next forward (opt_overlap): adamw_step enqueues the clip's
   * sum and AdamW on the side stream so, in opt_stages stages of chunks in the order the forward
   * reads them (0: the embedding and layer 0's first norm; l + 1: layer l; layers + 1: the rest),
   * recording opt_ev[k] after stage k; the next forward waits for stage k before its first use
   * of it and so for all of them before its head; every other call that touches the parameters,
   * moments or gradients first makes the engine's stream wait for the last (opt_join). Each
   * element's update is the same arithmetic in either order, so the bits do not depend on it. */
  cudaStream_t so;
  cudaEvent_t *opt_ev, opt_go, opt_sq, opt_gather, opt_last; /* opt_sq: after the clip's sum; opt_last: the
                                                              * last stage enqueued */
  int *opt_begin; /* (opt_stages + 1) stage k: chunks [opt_begin[k], opt_begin[k + 1]) */
  int opt_stages, opt_overlap, opt_pending;
  /* opt_defer_emb: the input embedding lies in the shard in chunks of its own (stage 0), so
   * adamw_step leaves its update out and the next forward first computes the rows it reads from
   * the update's inputs (vr_cutrain_adamw_rows into dx, its scratch until backward) and only then
   * enqueues stage 0 (emb_deferred until then, with opt_hp / opt_clip): the forward waits for the
   * clip's sum and layer 0 instead of the whole embedding's update. */
  int opt_defer_emb, emb_deferred, opt_clip;
  vr_cutrain_adamw_t opt_hp;
  int32_t *iota; /* (T_max) 0, 1, ...: the gathered rows' ids */
  int zero_deferred; /* a zero_grad's chunks not yet zeroed (the optimizer was reading g) */
  /* scale_grads' factor, not yet applied (1: none): g holds the gradients over gscale. A reader
   * or writer of g applies it first (grads_settle); an update without the on-device clip takes it
   * as its gradients' factor and leaves it pending (the bits of g scaled in place, then the
   * update); zero_grad drops it. So a clipped step costs no pass over g when zero_grad follows. */
  float gscale;
  /* zero_grad without the full memset: it zeroes the zr chunks (the parts of g no GEMM writes)
   * and sets gfresh; the next backward's weight-gradient GEMMs then overwrite (wbeta 0) instead
   * of accumulating (wbeta 1), and a read of g before any backward zeroes the rest first
   * (grads_materialize) */
  int64_t *zr_off, *zr_len;
  int zr_n, gfresh;
  float wbeta;
  /* the pending batch */
  int T, n_seqs, n_fa, n_tiles, n_uniq, kept;
  int fwd_keep; /* the forward running now is kept for backward */
  float temp;
  cudaEvent_t stage_ev[2]; /* vr_cutrain_backward_cb: the ends of the last two stages */
  /* profiling (vr_cutrain_profile): events at phase ends, their phases (-1: a start) */
  cudaEvent_t *ev;
  int *ev_ph, n_ev, prof;
};

#define PROF_EVENTS 1024

/* Records the end of phase ph (-1: the start of a timed span) when profiling is on. */
static void mark(vr_cutrain_t *e, int ph) {
  if (!e->prof || e->n_ev >= PROF_EVENTS) return;
  VR_CUDA_CHECK(cudaEventRecord(e->ev[e->n_ev], e->s));
  e->ev_ph[e->n_ev++] = ph;
}

/* The deferred embedding stage (opt_defer_emb) onto the side stream, after what it waits for. */
static void opt_emb_enqueue(vr_cutrain_t *e) {
  if (!e->emb_deferred) return;
  const int n = e->opt_begin[1];
  vr_cutrain_adamw(e->p, e->p16, e->m, e->v, e->g, (int64_t)e->lo, e->ad_off, e->ad_len, NULL, n,
                   e->opt_clip ? e->sq : NULL, &e->opt_hp, e->so);
  VR_CUDA_CHECK(cudaEventRecord(e->opt_ev[0], e->so));
  e->opt_last = e->opt_ev[0];
  e->emb_deferred = 0;
}

/* The overlapped update (opt_overlap) of the last adamw_step: the engine's stream waits for all of it. */
static void opt_join(vr_cutrain_t *e) {
  if (!e->opt_pending) return;
  opt_emb_enqueue(e);
  VR_CUDA_CHECK(cudaStreamWaitEvent(e->s, e->opt_last, 0));
  e->opt_pending = 0;
}

/* Before the forward's first read of stage k's parameters. */
static void opt_wait(vr_cutrain_t *e, int k) {
  if (e->opt_pending) VR_CUDA_CHECK(cudaStreamWaitEvent(e->s, e->opt_ev[k], 0));
}

/* Before g is read or written on the engine's stream: the update done, a deferred zero_grad's
 * chunks zeroed, and unless keep_scale a pending gradient factor applied. */
static void grads_settle(vr_cutrain_t *e, int keep_scale) {
  opt_join(e);
  if (e->zero_deferred) vr_cutrain_zero_chunks(e->g, e->zr_off, e->zr_len, e->zr_n, e->s);
  e->zero_deferred = 0;
  if (!keep_scale && e->gscale != 1.f) {
    if (!e->gfresh) vr_cutrain_scale(e->g, e->d.n_floats, e->gscale, e->s);
    e->gscale = 1.f;
  }
}

/* ---------------------------------------------------------------- allocation */

static int dalloc(vr_cutrain_t *e, void **p, size_t bytes) {
  *p = NULL;
  if (VR_CUDA_TRY(cudaMalloc(p, bytes ? bytes : 16)) != 0) {
    vr_log(VR_LOG_ERROR, "cudaMalloc of %zu bytes failed after %zu bytes (HINT: fewer max_tokens)", bytes,
           e->dev_bytes);
    *p = NULL;
    return VR_ERR_NOMEM;
  }
  e->dev_bytes += bytes;
  return 0;
}

#define DALLOC(ptr, bytes)                                 \
  do {                                                     \
    int rc_ = dalloc(e, (void **)&(ptr), (size_t)(bytes)); \
    if (rc_) {                                             \
      vr_cutrain_free(e);                                  \
      return rc_;                                          \
    }                                                      \
  } while (0)

/* vr_cutrain_attention_bwd_kernel's values (VR_CUTRAIN_ATTN_BWD_*), for the log */
static const char *const attn_bwd_names[] = {"auto", "generic", "mma.sync", "wgmma", "wgmma (ss)", "wgmma (ra)",
                                             "wgmma (co)", "wgmma (co, pipelined)", "wgmma (co, dQ 4 blocks)",
                                             "wgmma (co, dQ 4 blocks, split by 2 heads)"};

/* Nonzero (logged) when e is forward-only: it has no gradients, moments or backward scratch
 * (vr_train refuses these calls first; this guards the engine's own API). */
static int fwd_only_refuses(const vr_cutrain_t *e, const char *what) {
  if (!e->fwd_only) return 0;
  vr_log(VR_LOG_ERROR, "cuda training engine: %s on a forward-only engine", what);
  return VR_ERR_UNSUPPORTED;
}

static int adjacent(size_t a, size_t na, size_t b) { return a != NONE && b != NONE && a + na == b; }

void vr_cutrain_free(vr_cutrain_t *e) {
  if (!e) return;
  if (e->s) cudaStreamSynchronize(e->s);
  if (e->so) cudaStreamSynchronize(e->so);
  void *dev[] = {e->p,      e->g,      e->m,      e->v,    e->p16,     e->xf,     e->dx,      e->dxn,      e->dx16,
                 e->dact,   e->dgu,    e->datt,   e->dqkv, e->tmp,     e->delta,  e->red,     e->logits,   e->lse_r,
                 e->ent_r,  e->logp_r, e->glp,    e->gent, e->dlogits, e->meta_d, e->rope_if, e->rope_nif, e->sq,
                 e->sq_red, e->ad_off, e->ad_len, e->hv,   e->split,   e->lp16,   e->zr_off, e->zr_len,
                 e->lpmax};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; ++i) cudaFree(dev[i]);
  if (e->x)
    for (int l = 0; l <= (e->fwd_only ? 1 : e->d.layers); ++l) cudaFree(e->x[l]);
  if (e->a)
    for (int l = 0; l < (e->recompute || e->fwd_only ? 1 : e->d.layers); ++l) {
      layer_acts_t *a = &e->a[l];
      void *b[] = {a->x_mid, a->xn1, a->qkv, a->att, a->lse, a->xn2, a->gu, a->act};
      for (size_t i = 0; i < sizeof b / sizeof b[0]; ++i) cudaFree(b[i]);
    }
  if (e->ev)
    for (int i = 0; i < PROF_EVENTS; ++i)
      if (e->ev[i]) cudaEventDestroy(e->ev[i]);
  free(e->ev), free(e->ev_ph);
  for (int i = 0; i < 2; ++i)
    if (e->stage_ev[i]) cudaEventDestroy(e->stage_ev[i]);
  if (e->opt_ev)
    for (int i = 0; i < e->opt_stages; ++i)
      if (e->opt_ev[i]) cudaEventDestroy(e->opt_ev[i]);
  if (e->opt_go) cudaEventDestroy(e->opt_go);
  if (e->opt_sq) cudaEventDestroy(e->opt_sq);
  if (e->opt_gather) cudaEventDestroy(e->opt_gather);
  cudaFree(e->iota);
  free(e->opt_ev), free(e->opt_begin);
  cudaFreeHost(e->meta_h);
  cudaFreeHost(e->stage_h);
  if (e->gemm) vr_cuda_gemm_free(e->gemm);
  if (e->s) cudaStreamDestroy(e->s);
  if (e->so) cudaStreamDestroy(e->so);
  free(e->x), free(e->a), free(e->L), free(e->count_h), free(e->sort_h);
  free(e);
}

/* The metadata block of T_max rows (int32 words; the same layout on the device and in the
 * pinned staging copy): ids, pos, tgt, order, uniq (T each), tiles (the dK/dV order), tiles_q
 * (the dQ order) and fa_tiles (2 (T + 1) each: a tile list has at most one tile per row), seg
 * and cu (T + 1 each), meta (4). */
typedef struct {
  size_t ids, pos, tgt, order, uniq, tiles, tiles_q, fa_tiles, seg, cu, meta, words;
} meta_layout_t;

static meta_layout_t meta_layout(size_t T) {
  meta_layout_t m;
  m.ids = 0, m.pos = T, m.tgt = 2 * T, m.order = 3 * T, m.uniq = 4 * T;
  m.tiles = 5 * T, m.tiles_q = m.tiles + 2 * (T + 1), m.fa_tiles = m.tiles_q + 2 * (T + 1);
  m.seg = m.fa_tiles + 2 * (T + 1);
  m.cu = m.seg + T + 1, m.meta = m.cu + T + 1, m.words = m.meta + 4;
  return m;
}

typedef struct {
  size_t at, n;
} frange_t;

static int frange_cmp(const void *a, const void *b) {
  const size_t x = ((const frange_t *)a)->at, y = ((const frange_t *)b)->at;
  return x < y ? -1 : x > y;
}

/* Orders the shard's optimizer chunks (off / len, n of them in buffer order, made by
 * vr_cutrain_adamw_chunks; not all of one length: the embedding's range is chunked apart) by the forward stage that first reads them (the opt_stage comment in the struct: a
 * chunk holding tensors of two stages goes with the earlier one) and sets e->opt_begin.
 * Returns 0, or -1 (out of host memory). */
static int opt_order_chunks(vr_cutrain_t *e, int64_t *off, int64_t *len, int n) {
  const vr_cutrain_desc_t *d = &e->d;
  const size_t C = (size_t)d->hidden, HD = (size_t)d->heads * d->head_dim, KD = (size_t)d->kv_heads * d->head_dim,
               F = (size_t)d->inter;
  const int ns = d->layers + 2;
  int *st = malloc(((size_t)n + 1) * sizeof *st), *cnt = calloc((size_t)ns + 1, sizeof *cnt);
  int64_t *o2 = malloc(((size_t)n + 1) * 8), *l2 = malloc(((size_t)n + 1) * 8);
  e->opt_begin = calloc((size_t)ns + 1, sizeof *e->opt_begin);
  if (!st || !cnt || !o2 || !l2 || !e->opt_begin) {
    free(st), free(cnt), free(o2), free(l2);
    return -1;
  }
  e->opt_stages = ns;
  for (int i = 0; i < n; ++i) st[i] = ns - 1;
  /* tensor [at, at + k) read first by stage s: every chunk it meets (off ascending here) */
#define OPT_STAGE(at_, k_, s_)                                                     \
  do {                                                                             \
    const size_t a_ = (at_), b_ = a_ == NONE ? 0 : a_ + (k_);                       \
    if (a_ != NONE && b_ > a_) {                                                   \
      int l_ = 0, h_ = n; /* the first chunk ending past a_ */                     \
      while (l_ < h_) {                                                            \
        const int md_ = (l_ + h_) / 2;                                             \
        if ((size_t)(off[md_] + len[md_]) <= a_)                                   \
          l_ = md_ + 1;                                                            \
        else                                                                       \
          h_ = md_;                                                                \
      }                                                                            \
      for (int c_ = l_; c_ < n && (size_t)off[c_] < b_; ++c_)                       \
        if (st[c_] > (s_)) st[c_] = (s_);                                          \
    }                                                                              \
  } while (0)
  OPT_STAGE(d->embed, (size_t)d->vocab * C, 0);
  for (int l = 0; l < d->layers; ++l) {
    const vr_cutrain_layer_off_t *t = &e->L[l];
    const size_t at[16] = {t->q_w, t->q_b, t->k_w, t->k_b, t->v_w,    t->v_b,  t->o_w,    t->o_b,
                           t->gate_w, t->gate_b, t->up_w, t->up_b, t->down_w, t->down_b, t->norm1, t->norm2};
    const size_t k[16] = {HD * C, HD, KD * C, KD, KD * C, KD, C * HD, C, F * C, F, F * C, F, C * F, C, C, C};
    for (int i = 0; i < 16; ++i) OPT_STAGE(at[i], k[i], l + 1);
  }
#undef OPT_STAGE
  for (int i = 0; i < n; ++i) ++cnt[st[i] + 1];
  for (int k = 0; k < ns; ++k) cnt[k + 1] += cnt[k];
  for (int k = 0; k <= ns; ++k) e->opt_begin[k] = cnt[k];
  for (int i = 0; i < n; ++i) { /* stable: within a stage, in buffer order */
    const int j = cnt[st[i]]++;
    o2[j] = off[i], l2[j] = len[i];
  }
  memcpy(off, o2, (size_t)n * 8);
  memcpy(len, l2, (size_t)n * 8);
  free(st), free(cnt), free(o2), free(l2);
  return 0;
}

/* The parts of the gradient buffer that no weight-gradient GEMM overwrites (norms, biases, an
 * untied embedding, the value head, padding) as chunks of at most VR_CUTRAIN_ADAMW_CHUNK floats
 * into off / len (NULL: counted only). Returns their number, or -1 (out of host memory). */
static int zero_chunks_of(const vr_cutrain_t *e, int64_t *off, int64_t *len) {
  const vr_cutrain_desc_t *d = &e->d;
  const size_t C = (size_t)d->hidden, HD = (size_t)d->heads * d->head_dim, KD = (size_t)d->kv_heads * d->head_dim,
               F = (size_t)d->inter;
  frange_t *r = malloc(((size_t)d->layers * 7 + 1) * sizeof *r);
  if (!r) return -1;
  size_t n = 0;
  for (int l = 0; l < d->layers; ++l) {
    const vr_cutrain_layer_off_t *o = &e->L[l];
    const frange_t w[7] = {{o->q_w, HD * C},   {o->k_w, KD * C}, {o->v_w, KD * C},  {o->o_w, C * HD},
                           {o->gate_w, F * C}, {o->up_w, F * C}, {o->down_w, C * F}};
    for (int i = 0; i < 7; ++i) r[n++] = w[i];
  }
  if (!e->value) r[n++] = (frange_t){d->lm_head != NONE ? d->lm_head : d->embed, (size_t)d->vocab * C};
  qsort(r, n, sizeof *r, frange_cmp);
  int chunks = 0;
  size_t pos = 0;
  for (size_t i = 0; i <= n; ++i) {
    const size_t end = i < n ? r[i].at : d->n_floats;
    if (end > pos) { /* the gap [pos, end), in the optimizer's chunks */
      const int k = (int)((end - pos + VR_CUTRAIN_ADAMW_CHUNK - 1) / VR_CUTRAIN_ADAMW_CHUNK);
      if (off) vr_cutrain_adamw_chunks(pos, end, off + chunks, len + chunks, k);
      chunks += k;
    }
    if (i < n && r[i].at + r[i].n > pos) pos = r[i].at + r[i].n;
  }
  free(r);
  return chunks;
}

int vr_cutrain_create(const vr_cutrain_desc_t *d, const float *params, int max_tokens, int lm_chunk, size_t shard_lo,
                      size_t shard_hi, vr_cutrain_t **out) {
  *out = NULL;
  const int C = d->hidden, H = d->heads, KV = d->kv_heads, D = d->head_dim, F = d->inter, V = d->vocab;
  if (D < 2 || D % 2 || D > 256 || H % KV || max_tokens <= 0 || shard_lo > shard_hi || shard_hi > d->n_floats) {
    vr_log(VR_LOG_ERROR,
           "unsupported shape: head_dim %d (even, <= 256), heads %d / kv %d, max_tokens %d, shard "
           "[%zu, %zu) of %zu",
           D, H, KV, max_tokens, shard_lo, shard_hi, d->n_floats);
    return VR_ERR_UNSUPPORTED;
  }
  const int ab = d->attn_bwd, tc = vr_cutrain_attention_bwd_tc(D, d->window);
  if (ab != VR_CUTRAIN_ATTN_BWD_AUTO && ab != VR_CUTRAIN_ATTN_BWD_GENERIC &&
      !(ab == VR_CUTRAIN_ATTN_BWD_MMA && tc) &&
      !(ab >= VR_CUTRAIN_ATTN_BWD_WGMMA && ab <= VR_CUTRAIN_ATTN_BWD_WGMMA_CO4H &&
        vr_cutrain_attention_bwd_wgmma_ok(D, d->window))) {
    vr_log(VR_LOG_ERROR, "attention backward kernel %d does not run head_dim %d, window %d on this build and device",
           ab, D, d->window);
    return VR_ERR_UNSUPPORTED;
  }
  const int fused_ok = vr_cutrain_lmhead_fused_available(C, V);
  if (d->optim < VR_CUTRAIN_OPTIM_AUTO || d->optim > VR_CUTRAIN_OPTIM_SERIAL) {
    vr_log(VR_LOG_ERROR, "optimizer schedule %d is not one of %d-%d", d->optim, VR_CUTRAIN_OPTIM_AUTO,
           VR_CUTRAIN_OPTIM_SERIAL);
    return VR_ERR_UNSUPPORTED;
  }
  if (d->lmhead < VR_CUTRAIN_LMHEAD_AUTO || d->lmhead > VR_CUTRAIN_LMHEAD_FUSED_PP2 ||
      (d->lmhead >= VR_CUTRAIN_LMHEAD_FUSED && !fused_ok)) {
    vr_log(VR_LOG_ERROR, "LM head %d does not run hidden %d on this build and device", d->lmhead, C);
    return VR_ERR_UNSUPPORTED;
  }
  vr_cutrain_t *e = calloc(1, sizeof *e);
  if (!e) return VR_ERR_NOMEM;
  e->d = *d;
  e->gscale = 1.f;
  e->L = malloc((size_t)d->layers * sizeof *e->L);
  e->x = calloc((size_t)d->layers + 1, sizeof *e->x);
  e->a = calloc((size_t)d->layers, sizeof *e->a);
  e->count_h = malloc((size_t)V * sizeof *e->count_h);
  e->sort_h = malloc(2 * ((size_t)max_tokens + 1) * sizeof *e->sort_h);
  if (!e->L || !e->x || !e->a || !e->count_h || !e->sort_h) {
    vr_cutrain_free(e);
    return VR_ERR_NOMEM;
  }
  memcpy(e->L, d->layer, (size_t)d->layers * sizeof *e->L);
  e->d.layer = e->L;
  e->T_max = max_tokens;
  e->recompute = d->recompute != 0;
  e->attn_bwd = ab != VR_CUTRAIN_ATTN_BWD_AUTO ? ab : vr_cutrain_attention_bwd_kernel(D, d->window);
  e->lmhead_fused = d->lmhead == VR_CUTRAIN_LMHEAD_CUBLAS || !fused_ok ? 0
                    : d->lmhead == VR_CUTRAIN_LMHEAD_FUSED_PP  ? VR_CUTRAIN_LMHEAD_FORM_PP
                    : d->lmhead == VR_CUTRAIN_LMHEAD_FUSED_PP2 ? VR_CUTRAIN_LMHEAD_FORM_PP2
                                                               : VR_CUTRAIN_LMHEAD_FORM_COOP;
  e->fwd_only = d->forward_only != 0;
  e->lo = shard_lo, e->hi = shard_hi;
  e->value = d->score_w != NONE;
  e->nqkv = (H + 2 * KV) * D;
  e->fused_qkv = e->fused_gu = 1;
  e->dxn16 = !d->dxn_f32 && C <= VR_CUTRAIN_NORM_BWD16_MAX_C;
  const size_t qn = (size_t)H * D * C, kn = (size_t)KV * D * C;
  int gu_bias = 0;
  for (int l = 0; l < d->layers; ++l) {
    const vr_cutrain_layer_off_t *o = &e->L[l];
    int f = adjacent(o->q_w, qn, o->k_w) && adjacent(o->k_w, kn, o->v_w);
    if (o->q_b != NONE) f = f && adjacent(o->q_b, (size_t)H * D, o->k_b) && adjacent(o->k_b, (size_t)KV * D, o->v_b);
    e->fused_qkv &= f;
    int g = adjacent(o->gate_w, (size_t)F * C, o->up_w);
    if (o->gate_b != NONE) g = g && adjacent(o->gate_b, (size_t)F, o->up_b);
    e->fused_gu &= g;
    gu_bias |= o->gate_b != NONE || o->up_b != NONE;
  }
  const int mlp_ok = e->fused_gu && !gu_bias && vr_cutrain_gu_swiglu_available(C, F);
  if (d->mlp < VR_CUTRAIN_MLP_AUTO || d->mlp > VR_CUTRAIN_MLP_FUSED || (d->mlp == VR_CUTRAIN_MLP_FUSED && !mlp_ok)) {
    vr_log(VR_LOG_ERROR, "MLP forward %d does not run hidden %d, intermediate %d%s on this build and device", d->mlp,
           C, F, gu_bias ? " with gate/up biases" : e->fused_gu ? "" : " with gate and up apart");
    vr_cutrain_free(e);
    return VR_ERR_UNSUPPORTED;
  }
  /* opt-in: on the H200 the fused GEMM measured as fast as cuBLASLt + the SwiGLU kernel, no faster
   * (docs/benchmarks.md, twelfth session) */
  e->mlp_fused = d->mlp == VR_CUTRAIN_MLP_FUSED && mlp_ok;
  size_t chunk = lm_chunk > 0 ? (size_t)lm_chunk : ((size_t)1 << 28) / (size_t)V;
  if (chunk < 1) chunk = 1;
  if (chunk > (size_t)max_tokens) chunk = (size_t)max_tokens;
  e->chunk = (int)chunk;
  /* the engine's stream at the default priority (the lowest), as the NCCL streams of vr_comm.c that
   * all-reduce beside the staged backward: a higher one here would let the backward's kernels starve
   * theirs; the optimizer's stream at the lowest */
  int prio_lo = 0, prio_hi = 0; /* prio_hi unused */
  if (VR_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&prio_lo, &prio_hi)) != 0 ||
      VR_CUDA_TRY(cudaStreamCreateWithFlags(&e->s, cudaStreamNonBlocking)) != 0 ||
      VR_CUDA_TRY(cudaEventCreateWithFlags(&e->stage_ev[0], cudaEventDisableTiming)) != 0 ||
      VR_CUDA_TRY(cudaEventCreateWithFlags(&e->stage_ev[1], cudaEventDisableTiming)) != 0) {
    vr_cutrain_free(e);
    return VR_ERR_DEVICE;
  }
  int rc = vr_cuda_gemm_init(&e->gemm, (size_t)64 << 20);
  if (rc) {
    vr_cutrain_free(e);
    return rc;
  }
  const size_t n = d->n_floats, T = (size_t)max_tokens, sh = shard_hi - shard_lo;
  const int fo = e->fwd_only, one_set = e->recompute || fo;
  DALLOC(e->p, n * 4);
  if (!fo) {
    DALLOC(e->g, n * 4);
    DALLOC(e->m, sh * 4);
    DALLOC(e->v, sh * 4);
  }
  DALLOC(e->p16, n * 2);
  for (int l = 0; l <= (fo ? 1 : d->layers); ++l) DALLOC(e->x[l], T * C * 4);
  for (int l = 2; fo && l <= d->layers; ++l) e->x[l] = e->x[l % 2]; /* layer l reads x[l], writes x[l + 1] */
  for (int l = 0; l < (one_set ? 1 : d->layers); ++l) {
    layer_acts_t *a = &e->a[l];
    DALLOC(a->x_mid, T * C * 4);
    DALLOC(a->xn1, T * C * 2);
    DALLOC(a->qkv, T * e->nqkv * 2);
    DALLOC(a->att, T * H * D * 2);
    DALLOC(a->lse, T * H * 4);
    DALLOC(a->xn2, T * C * 2);
    DALLOC(a->gu, T * 2 * F * 2);
    DALLOC(a->act, T * F * 2);
  }
  for (int l = 1; one_set && l < d->layers; ++l) e->a[l] = e->a[0];
  DALLOC(e->xf, T * C * 2);
  DALLOC(e->tmp, T * (size_t)(F > H * D ? F : H * D) * 2); /* also the split qkv / gate-up forward's */
  if (!fo) {
    DALLOC(e->dx, T * C * 4);
    DALLOC(e->dxn, T * C * 4);
    DALLOC(e->dx16, T * C * 2);
    DALLOC(e->dact, T * F * 2);
    DALLOC(e->dgu, T * 2 * F * 2);
    DALLOC(e->datt, T * H * D * 2);
    DALLOC(e->dqkv, T * e->nqkv * 2);
    DALLOC(e->delta, T * H * 4);
    /* few key heads: the dK / dV kernel per query head (H / KV times the blocks) */
    if (H > KV && KV <= VR_CUTRAIN_SPLIT_KV_MAX && vr_cutrain_attention_bwd_tc(D, d->window))
      DALLOC(e->split, vr_cutrain_attention_bwd_split_scratch(max_tokens, H, D) * 4);
    size_t red = vr_cutrain_rmsnorm_bwd_scratch(max_tokens, C);
    const size_t r2 = vr_cutrain_colsum_scratch(max_tokens, e->nqkv > 2 * F ? e->nqkv : 2 * F);
    if (r2 > red) red = r2;
    DALLOC(e->red, red * 4);
  }
  if (e->value) {
    DALLOC(e->hv, T * C * 4);
  } else {
    if (fo && e->lmhead_fused) {
      /* no backward recomputes logits: the fused forward's workspace alone (vr_cutrain_lmhead_fwd),
       * as whole rows of V floats */
      const size_t ws = T * (4 * (((size_t)V + 255) / 256) + 1), rows = (ws + V - 1) / V;
      if (rows < chunk) chunk = rows, e->chunk = (int)rows;
    }
    DALLOC(e->logits, chunk * V * 4);
    if (!fo) DALLOC(e->dlogits, chunk * V * 2);
  }
  DALLOC(e->lse_r, T * 4);
  DALLOC(e->ent_r, T * 4);
  DALLOC(e->logp_r, T * 4);
  if (!fo) {
    DALLOC(e->glp, T * 4);
    DALLOC(e->gent, T * 4);
  }
  const meta_layout_t ml = meta_layout(T);
  DALLOC(e->meta_d, ml.words * 4);
  DALLOC(e->rope_if, (size_t)D / 2 * 4);
  DALLOC(e->rope_nif, (size_t)D / 2 * 4);
  /* + 2: the input embedding's range chunked on its own (opt_defer_emb) */
  const int max_chunks = fo ? 0 : (int)((sh + VR_CUTRAIN_ADAMW_CHUNK - 1) / VR_CUTRAIN_ADAMW_CHUNK) + 2;
  if (!fo) {
    DALLOC(e->sq, 8);
    DALLOC(e->sq_red, VR_CUTRAIN_SUMSQ_BLOCKS * 8);
    DALLOC(e->ad_off, (size_t)max_chunks * 8);
    DALLOC(e->ad_len, (size_t)max_chunks * 8);
  }
  if (VR_CUDA_TRY(cudaMallocHost((void **)&e->meta_h, ml.words * 4)) ||
      VR_CUDA_TRY(cudaMallocHost((void **)&e->stage_h, 2 * T * 4))) {
    vr_cutrain_free(e);
    return VR_ERR_NOMEM;
  }
  int32_t *b = e->meta_d;
  e->ids = b + ml.ids, e->pos = b + ml.pos, e->tgt = b + ml.tgt, e->order = b + ml.order, e->uniq = b + ml.uniq;
  e->tiles = b + ml.tiles, e->tiles_q = b + ml.tiles_q, e->fa_tiles = b + ml.fa_tiles, e->seg = b + ml.seg,
  e->cu = b + ml.cu;
  e->meta4 = b + ml.meta;
  /* rope */
  float *nif = malloc((size_t)D / 2 * sizeof *nif);
  if (!nif) {
    vr_cutrain_free(e);
    return VR_ERR_NOMEM;
  }
  for (int i = 0; i < D / 2; ++i) nif[i] = -d->rope_inv_freq[i];
  VR_CUDA_CHECK(cudaMemcpyAsync(e->rope_if, d->rope_inv_freq, (size_t)D / 2 * 4, cudaMemcpyHostToDevice, e->s));
  VR_CUDA_CHECK(cudaMemcpyAsync(e->rope_nif, nif, (size_t)D / 2 * 4, cudaMemcpyHostToDevice, e->s));
  VR_CUDA_CHECK(cudaStreamSynchronize(e->s)); /* before nif goes */
  free(nif);
  if (!fo) { /* optimizer chunks of the shard, zero gradients and moments */
    int64_t *ho = malloc((size_t)(max_chunks ? max_chunks : 1) * 8),
            *hl = malloc((size_t)(max_chunks ? max_chunks : 1) * 8);
    if (!ho || !hl) {
      free(ho), free(hl);
      vr_cutrain_free(e);
      return VR_ERR_NOMEM;
    }
    const size_t ea = d->embed, eb = d->embed + (size_t)V * C;
    const int emb_own = d->embed != NONE && ea >= shard_lo && eb <= shard_hi && ea < eb;
    if (emb_own) { /* [lo, ea), [ea, eb), [eb, hi): no chunk holds the embedding and another tensor */
      const int a = vr_cutrain_adamw_chunks(shard_lo, ea, ho, hl, max_chunks);
      const int b = a < 0 ? -1 : vr_cutrain_adamw_chunks(ea, eb, ho + a, hl + a, max_chunks - a);
      const int c = b < 0 ? -1 : vr_cutrain_adamw_chunks(eb, shard_hi, ho + a + b, hl + a + b, max_chunks - a - b);
      e->ad_n = c < 0 ? -1 : a + b + c;
    } else {
      e->ad_n = vr_cutrain_adamw_chunks(shard_lo, shard_hi, ho, hl, max_chunks);
    }
    if (e->ad_n < 0 || opt_order_chunks(e, ho, hl, e->ad_n) != 0) {
      free(ho), free(hl);
      vr_cutrain_free(e);
      return VR_ERR_NOMEM;
    }
    VR_CUDA_CHECK(cudaMemcpyAsync(e->ad_off, ho, (size_t)max_chunks * 8, cudaMemcpyHostToDevice, e->s));
    VR_CUDA_CHECK(cudaMemcpyAsync(e->ad_len, hl, (size_t)max_chunks * 8, cudaMemcpyHostToDevice, e->s));
    VR_CUDA_CHECK(cudaStreamSynchronize(e->s));
    free(ho), free(hl);
    e->opt_overlap = d->optim != VR_CUTRAIN_OPTIM_SERIAL; /* AUTO: overlapped */
    e->opt_defer_emb = e->opt_overlap && emb_own;
    e->opt_ev = calloc((size_t)e->opt_stages, sizeof *e->opt_ev);
    if (!e->opt_ev) {
      vr_cutrain_free(e);
      return VR_ERR_NOMEM;
    }
    int erc = VR_CUDA_TRY(cudaStreamCreateWithPriority(&e->so, cudaStreamNonBlocking, prio_lo)) ||
              VR_CUDA_TRY(cudaEventCreateWithFlags(&e->opt_go, cudaEventDisableTiming)) ||
              VR_CUDA_TRY(cudaEventCreateWithFlags(&e->opt_sq, cudaEventDisableTiming)) ||
              VR_CUDA_TRY(cudaEventCreateWithFlags(&e->opt_gather, cudaEventDisableTiming));
    for (int k = 0; !erc && k < e->opt_stages; ++k)
      erc = VR_CUDA_TRY(cudaEventCreateWithFlags(&e->opt_ev[k], cudaEventDisableTiming));
    if (erc) {
      vr_cutrain_free(e);
      return VR_ERR_DEVICE;
    }
    DALLOC(e->iota, T * 4);
    int32_t *io = malloc(T * 4);
    if (!io) {
      vr_cutrain_free(e);
      return VR_ERR_NOMEM;
    }
    for (size_t t = 0; t < T; ++t) io[t] = (int32_t)t;
    VR_CUDA_CHECK(cudaMemcpyAsync(e->iota, io, T * 4, cudaMemcpyHostToDevice, e->s));
    VR_CUDA_CHECK(cudaStreamSynchronize(e->s)); /* before io goes */
    free(io);
    VR_CUDA_CHECK(cudaMemsetAsync(e->g, 0, n * 4, e->s));
    VR_CUDA_CHECK(cudaMemsetAsync(e->m, 0, sh * 4, e->s));
    e->wbeta = 1.f;
    const int zn = zero_chunks_of(e, NULL, NULL);
    if (zn < 0) {
      vr_cutrain_free(e);
      return VR_ERR_NOMEM;
    }
    DALLOC(e->zr_off, ((size_t)zn + 1) * 8);
    DALLOC(e->zr_len, ((size_t)zn + 1) * 8);
    int64_t *zo = malloc(((size_t)zn + 1) * 8), *zl = malloc(((size_t)zn + 1) * 8);
    if (!zo || !zl || zero_chunks_of(e, zo, zl) != zn) {
      free(zo), free(zl);
      vr_cutrain_free(e);
      return VR_ERR_NOMEM;
    }
    e->zr_n = zn;
    VR_CUDA_CHECK(cudaMemcpyAsync(e->zr_off, zo, (size_t)zn * 8, cudaMemcpyHostToDevice, e->s));
    VR_CUDA_CHECK(cudaMemcpyAsync(e->zr_len, zl, (size_t)zn * 8, cudaMemcpyHostToDevice, e->s));
    VR_CUDA_CHECK(cudaStreamSynchronize(e->s));
    free(zo), free(zl);
    VR_CUDA_CHECK(cudaMemsetAsync(e->v, 0, sh * 4, e->s));
  }
  if (params)
    rc = vr_cutrain_set_params(e, params);
  else {
    VR_CUDA_CHECK(cudaMemsetAsync(e->p, 0, n * 4, e->s));
    VR_CUDA_CHECK(cudaMemsetAsync(e->p16, 0, n * 2, e->s));
    rc = vr_cutrain_sync(e);
  }
  if (rc) {
    vr_cutrain_free(e);
    return rc;
  }
  vr_log(VR_LOG_INFO,
         "cuda training engine: %zu parameters' buffer, %d rows, LM-head chunk %d, qkv %s, gate/up %s, "
         "projections' dX %s, attention backward %s, dK/dV %s, activations %s, LM-head forward %s, gate/up + SwiGLU "
         "%s, optimizer %s, %.2f GiB on the device",
         n, max_tokens, e->chunk, e->fused_qkv ? "fused" : "split", e->fused_gu ? "fused" : "split",
         e->dxn16 && (e->fused_qkv || e->fused_gu) ? "bf16" : "fp32", attn_bwd_names[e->attn_bwd],
         e->split ? "per query head" : "per key head",
         fo ? "forward only" : e->recompute ? "recomputed per layer" : "kept",
         e->lmhead_fused ? "fused sm90 GEMM" : "cuBLASLt + rows", e->mlp_fused ? "fused sm90 GEMM" : "cuBLASLt + kernel",
         fo ? "none" : e->opt_overlap ? "overlapping the next forward" : "on the stream", e->dev_bytes / 1073741824.0);
  *out = e;
  return 0;
}

/* ---------------------------------------------------------------- forward */

static const float *P(const vr_cutrain_t *e, size_t off) { return off == NONE ? NULL : e->p + off; }
static const uint16_t *P16(const vr_cutrain_t *e, size_t off) { return off == NONE ? NULL : e->p16 + off; }

/* T rows of w bf16 from src (pitch src_ld) to dst (pitch dst_ld): a column block in or out of
 * a fused activation. */
static void copy_cols(uint16_t *dst, int dst_ld, const uint16_t *src, int src_ld, int w, int T, cudaStream_t s) {
  VR_CUDA_CHECK(cudaMemcpy2DAsync(dst, (size_t)dst_ld * 2, src, (size_t)src_ld * 2, (size_t)w * 2, (size_t)T,
                                  cudaMemcpyDeviceToDevice, s));
}

/* out (T, ld) = x (T, K) . [W_i]^T + [b_i] for the n parts of widths w[i] (fused: one GEMM on
 * the adjacent weights w_off[0]). */
static void proj_fwd(vr_cutrain_t *e, uint16_t *out, int ld, const uint16_t *x, int K, int n, const size_t *w_off,
                     const size_t *b_off, const int *w, int fused, int T) {
  if (fused) {
    vr_cuda_gemm(e->gemm, out, 0, x, P16(e, w_off[0]), P16(e, b_off[0]), T, ld, K, 0.f, e->s);
    return;
  }
  int col = 0;
  for (int i = 0; i < n; ++i) {
    vr_cuda_gemm(e->gemm, e->tmp, 0, x, P16(e, w_off[i]), P16(e, b_off[i]), T, w[i], K, 0.f, e->s);
    copy_cols(out + col, ld, e->tmp, w[i], w[i], T, e->s);
    col += w[i];
  }
}

/* The backward of proj_fwd given dy (T, ld) bf16: dW_i += dy_i^T x, db_i += colsum(dy_i),
 * dx (T, K) = sum_i dy_i W_i, fp32, or bf16 where fused and e->dxn16 (the returned flag). */
static int proj_bwd(vr_cutrain_t *e, float *dx, const uint16_t *dy, int ld, const uint16_t *x, int K, int n,
                    const size_t *w_off, const size_t *b_off, const int *w, int fused, int T) {
  if (fused) {
    vr_cuda_gemm_op(e->gemm, VR_CUDA_OP_T, VR_CUDA_OP_N, e->g + w_off[0], 1, dy, x, NULL, 0, NULL, ld, K, T, e->wbeta,
                    e->s);
    vr_cuda_gemm_op(e->gemm, VR_CUDA_OP_N, VR_CUDA_OP_N, dx, !e->dxn16, dy, P16(e, w_off[0]), NULL, 0, NULL, T, K, ld,
                    0.f, e->s);
    if (b_off[0] != NONE) vr_cutrain_colsum_bf16(e->g + b_off[0], dy, ld, T, ld, e->red, e->s);
    return e->dxn16;
  }
  int col = 0;
  for (int i = 0; i < n; ++i) {
    copy_cols(e->tmp, w[i], dy + col, ld, w[i], T, e->s);
    vr_cuda_gemm_op(e->gemm, VR_CUDA_OP_T, VR_CUDA_OP_N, e->g + w_off[i], 1, e->tmp, x, NULL, 0, NULL, w[i], K, T,
                    e->wbeta, e->s);
    vr_cuda_gemm_op(e->gemm, VR_CUDA_OP_N, VR_CUDA_OP_N, dx, 1, e->tmp, P16(e, w_off[i]), NULL, 0, NULL, T, K, w[i],
                    i ? 1.f : 0.f, e->s);
    if (b_off[i] != NONE) vr_cutrain_colsum_bf16(e->g + b_off[i], e->tmp, w[i], T, w[i], e->red, e->s);
    col += w[i];
  }
  return 0;
}

/* The RMSNorm backward of a layer's norm from e->dxn, fp32 or (dy16) bf16 as proj_bwd left it:
 * e->dx += its dx, dx16 = bf16(e->dx) unless NULL, dw += its weight's gradient. */
static void norm_bwd(vr_cutrain_t *e, int dy16, uint16_t *dx16, float *dw, const float *x, const float *w, int T) {
  const vr_cutrain_desc_t *d = &e->d;
  if (dy16)
    vr_cutrain_rmsnorm_bwd16(e->dx, dx16, dw, (const uint16_t *)e->dxn, x, w, T, d->hidden, d->rms_eps, 1, e->red,
                             e->s);
  else
    vr_cutrain_rmsnorm_bwd(e->dx, dx16, dw, e->dxn, x, w, T, d->hidden, d->rms_eps, 1, e->red, e->s);
}

/* Layer l's forward from x[l] into its activations and x[l + 1]; again = 1: the backward's
 * recomputation (layer 0's norm too, which the forward fused with the embedding; no down
 * projection: the backward needs its input alone). */
static void layer_fwd(vr_cutrain_t *e, int l, int T, int again) {
  const vr_cutrain_desc_t *d = &e->d;
  const vr_cutrain_layer_off_t *o = &e->L[l];
  layer_acts_t *a = &e->a[l];
  const int C = d->hidden, H = d->heads, KV = d->kv_heads, D = d->head_dim, F = d->inter, HD = H * D;
  const float scale = 1.f / sqrtf((float)D);
  if (l > 0 || again) vr_cuda_rmsnorm(e->x[l], a->xn1, P(e, o->norm1), T, C, d->rms_eps, e->s);
  const size_t qw[3] = {o->q_w, o->k_w, o->v_w}, qb[3] = {o->q_b, o->k_b, o->v_b};
  const int qwid[3] = {HD, KV * D, KV * D};
  proj_fwd(e, a->qkv, e->nqkv, a->xn1, C, 3, qw, qb, qwid, e->fused_qkv, T);
  vr_cuda_rope(a->qkv, e->nqkv, 0, HD, H, KV, D, e->pos, e->rope_if, d->rope_scaling, T, e->s);
  mark(e, again ? VR_CUTRAIN_PH_RECOMPUTE : VR_CUTRAIN_PH_FWD_QKV);
  if (vr_cuda_attention_kernel_fits(VR_CUDA_ATTN_KERNEL_FA64, D))
    vr_cuda_attention_lse(a->qkv, e->nqkv, 0, HD, HD + KV * D, a->att, HD, a->lse, e->cu, e->fa_tiles, e->meta4,
                          e->n_fa, H, KV, D, 1, d->window, scale, T, e->s);
  else
    vr_cutrain_attention_fwd_generic(a->att, HD, a->lse, a->qkv, e->nqkv, 0, HD, HD + KV * D, e->cu, e->tiles,
                                     e->n_tiles, H, KV, D, d->window, scale, e->s);
  mark(e, again ? VR_CUTRAIN_PH_RECOMPUTE : VR_CUTRAIN_PH_FWD_ATTN);
  vr_cuda_gemm_res(e->gemm, a->x_mid, 1, a->att, P16(e, o->o_w), P(e, o->o_b), e->x[l], T, C, HD, e->s);
  mark(e, again ? VR_CUTRAIN_PH_RECOMPUTE : VR_CUTRAIN_PH_FWD_O);
  vr_cuda_rmsnorm(a->x_mid, a->xn2, P(e, o->norm2), T, C, d->rms_eps, e->s);
  const size_t gw[2] = {o->gate_w, o->up_w}, gb[2] = {o->gate_b, o->up_b};
  const int gwid[2] = {F, F};
  /* gu is read by the backward alone: not written by a forward-only engine or a forward not kept
   * for backward, nor by a recomputing engine's first forward but for the last layer (the
   * backward recomputes the others); act's bits do not depend on it */
  uint16_t *gu_kept =
      e->fwd_only || (!again && !e->fwd_keep) || (e->recompute && !again && l < d->layers - 1) ? NULL : a->gu;
  if (!e->mlp_fused || !vr_cutrain_gu_swiglu_fwd(a->act, gu_kept, a->xn2, P16(e, o->gate_w), T, C, F, e->s)) {
    proj_fwd(e, a->gu, 2 * F, a->xn2, C, 2, gw, gb, gwid, e->fused_gu, T);
    vr_cuda_swiglu(a->act, a->gu, T, F, e->s);
  }
  if (again) {
    mark(e, VR_CUTRAIN_PH_RECOMPUTE);
    return;
  }
  vr_cuda_gemm_res(e->gemm, e->x[l + 1], 1, a->act, P16(e, o->down_w), P(e, o->down_b), a->x_mid, T, C, F, e->s);
  mark(e, VR_CUTRAIN_PH_FWD_MLP);
}

/* The stored log-softmax for a kept forward: allocated once (T_max, V) bf16 unless recomputing
 * (the memory-saving mode) or the device lacks the memory (then backward recomputes the logits,
 * as before; logged once). NULL: none. */
static uint16_t *lp16_buffer(vr_cutrain_t *e) {
  if (e->lp16 || e->lp16_off || e->value || e->recompute || e->fwd_only) return e->lp16;
  const size_t bytes = (size_t)e->T_max * (size_t)e->d.vocab * 2,
               mbytes = (size_t)e->T_max * (size_t)vr_cutrain_lsm_segs(e->d.vocab) * 4;
  if (cudaMalloc((void **)&e->lp16, bytes) != cudaSuccess || cudaMalloc((void **)&e->lpmax, mbytes) != cudaSuccess) {
    (void)cudaGetLastError();
    cudaFree(e->lp16);
    e->lp16 = NULL, e->lp16_off = 1;
    vr_log(VR_LOG_INFO, "no %.2f GiB for the stored log-softmax: the LM-head backward recomputes the logits",
           (bytes + mbytes) / 1073741824.0);
    return NULL;
  }
  e->dev_bytes += bytes + mbytes;
  return e->lp16;
}

/* Host metadata of the batch into the pinned block, then one copy. */
static int stage_batch(vr_cutrain_t *e, const int32_t *ids, const uint32_t *cu, int n, const int32_t *tgt) {
  const int T = (int)cu[n];
  int32_t *h = e->meta_h;
  const size_t Tm = (size_t)e->T_max;
  const meta_layout_t ml = meta_layout(Tm);
  int32_t *hids = h + ml.ids, *hpos = h + ml.pos, *htgt = h + ml.tgt, *hord = h + ml.order, *huniq = h + ml.uniq;
  int32_t *htiles = h + ml.tiles, *htq = h + ml.tiles_q, *hfa = h + ml.fa_tiles, *hseg = h + ml.seg, *hcu = h + ml.cu,
          *hmeta = h + ml.meta;
  memcpy(hids, ids, (size_t)T * 4);
  memcpy(htgt, tgt, (size_t)T * 4);
  for (int q = 0; q < n; ++q) {
    hcu[q] = (int32_t)cu[q];
    for (uint32_t t = cu[q]; t < cu[q + 1]; ++t) hpos[t] = (int32_t)(t - cu[q]);
  }
  hcu[n] = T;
  const int max_tiles = (int)Tm + 1;
  e->n_tiles = vr_cutrain_attention_tiles(hcu, n, 64, htiles, max_tiles);
  e->n_fa = vr_cutrain_attention_tiles(hcu, n, vr_cuda_attention_tile_rows(e->d.head_dim, T), hfa, max_tiles);
  if (e->n_tiles < 0 || e->n_fa < 0) return VR_ERR_INTERNAL; /* an empty sequence: the caller checks */
  /* the backward kernels take their heaviest tiles first (the blocks start in list order), the
   * forward too (FA3's persistent schedule deals the tiles out in list order) */
  vr_cutrain_attention_tiles_sort(hcu, hfa, e->n_fa, 0, e->sort_h);
  memcpy(htq, htiles, (size_t)e->n_tiles * 2 * sizeof *htq);
  vr_cutrain_attention_tiles_sort(hcu, htiles, e->n_tiles, 1, e->sort_h);
  vr_cutrain_attention_tiles_sort(hcu, htq, e->n_tiles, 0, e->sort_h);
  hmeta[VR_CUDA_META_N_SEQS] = n, hmeta[VR_CUDA_META_N_TILES] = e->n_fa, hmeta[2] = hmeta[3] = 0;
  e->n_uniq = vr_cutrain_embed_segments(ids, T, e->d.vocab, hord, hseg, huniq, e->count_h);
  if (e->n_uniq < 0) {
    vr_log(VR_LOG_ERROR, "a token id is outside the vocabulary of %d", e->d.vocab);
    return VR_ERR_TOKEN_RANGE;
  }
  VR_CUDA_CHECK(cudaMemcpyAsync(e->meta_d, e->meta_h, ml.words * 4, cudaMemcpyHostToDevice, e->s));
  return 0;
}

int vr_cutrain_forward(vr_cutrain_t *e, const int32_t *ids, const uint32_t *cu, int n_seqs, const int32_t *tgt,
                       float temperature, float *logp, float *ent, int keep) {
  const vr_cutrain_desc_t *d = &e->d;
  e->kept = e->lp16_kept = 0;
  if (keep && fwd_only_refuses(e, "a forward kept for backward")) return VR_ERR_UNSUPPORTED;
  if (n_seqs <= 0 || cu[n_seqs] == 0) return 0;
  if (cu[n_seqs] > (uint32_t)e->T_max || (!e->value && !(temperature > 0.f))) {
    vr_log(VR_LOG_ERROR, "batch of %u rows (engine: %d), temperature %g", cu[n_seqs], e->T_max, temperature);
    return VR_ERR_TOO_LARGE;
  }
  const int T = (int)cu[n_seqs], C = d->hidden;
  /* the previous step's staging may still be read by the device */
  VR_CUDA_CHECK(cudaStreamSynchronize(e->s));
  int rc = stage_batch(e, ids, cu, n_seqs, tgt);
  if (rc) return rc;
  e->T = T, e->n_seqs = n_seqs, e->temp = temperature, e->fwd_keep = keep;
  mark(e, -1);
  if (e->opt_pending && e->emb_deferred) { /* the batch's rows as the update will leave them, then the update */
    VR_CUDA_CHECK(cudaStreamWaitEvent(e->s, e->opt_sq, 0));
    vr_cutrain_adamw_rows(e->dx, e->p, e->m, e->v, e->g, (int64_t)e->lo, (int64_t)d->embed, e->ids, T, C,
                          e->opt_clip ? e->sq : NULL, &e->opt_hp, e->s);
    VR_CUDA_CHECK(cudaEventRecord(e->opt_gather, e->s));
    VR_CUDA_CHECK(cudaStreamWaitEvent(e->so, e->opt_gather, 0));
    opt_emb_enqueue(e);
    opt_wait(e, 1); /* layer 0's first norm */
    vr_cuda_embed_norm(e->x[0], e->a[0].xn1, e->iota, NULL, e->dx, NULL, NULL, 1, P(e, e->L[0].norm1), NULL, T, C,
                       d->rms_eps, e->s);
  } else {
    opt_wait(e, 0);
    opt_wait(e, 1);
    vr_cuda_embed_norm(e->x[0], e->a[0].xn1, e->ids, NULL, P(e, d->embed), NULL, NULL, 1, P(e, e->L[0].norm1), NULL,
                       T, C, d->rms_eps, e->s);
  }
  mark(e, VR_CUTRAIN_PH_EMBED);
  for (int l = 0; l < d->layers; ++l) {
    opt_wait(e, l + 1);
    layer_fwd(e, l, T, 0);
  }
  /* the head, and with it every stage: the update is all waited for */
  if (e->opt_pending) VR_CUDA_CHECK(cudaStreamWaitEvent(e->s, e->opt_last, 0));
  e->opt_pending = 0;
  if (e->value) {
    vr_cuda_rmsnorm_f32(e->x[d->layers], e->hv, P(e, d->final_norm), T, C, d->rms_eps, e->s);
    vr_cutrain_value_fwd(e->logp_r, e->hv, P(e, d->score_w), P(e, d->score_b), T, C, e->s);
    ent = NULL;
  } else {
    vr_cuda_rmsnorm(e->x[d->layers], e->xf, P(e, d->final_norm), T, C, d->rms_eps, e->s);
    const uint16_t *W = P16(e, d->lm_head != NONE ? d->lm_head : d->embed);
    uint16_t *lp16 = keep ? lp16_buffer(e) : NULL;
    e->lp16_kept = lp16 != NULL;
    vr_cutrain_lmhead_fwd(e->gemm, e->logp_r, e->ent_r, e->lse_r, e->xf, W, e->tgt, T, C, d->vocab, temperature,
                          e->chunk, e->logits, lp16, e->lpmax, e->lmhead_fused, e->s);
  }
  mark(e, VR_CUTRAIN_PH_FWD_HEAD);
  if (logp || ent) {
    VR_CUDA_CHECK(cudaMemcpyAsync(e->stage_h, e->logp_r, (size_t)T * 4, cudaMemcpyDeviceToHost, e->s));
    VR_CUDA_CHECK(cudaMemcpyAsync(e->stage_h + T, e->ent_r, (size_t)T * 4, cudaMemcpyDeviceToHost, e->s));
    VR_CUDA_CHECK(cudaStreamSynchronize(e->s));
    if (logp) memcpy(logp, e->stage_h, (size_t)T * 4);
    if (ent) memcpy(ent, e->stage_h + T, (size_t)T * 4);
  }
  e->kept = keep;
  return 0;
}

/* ---------------------------------------------------------------- backward */

static void layer_bwd(vr_cutrain_t *e, int l, int T) {
  const vr_cutrain_desc_t *d = &e->d;
  const vr_cutrain_layer_off_t *o = &e->L[l];
  layer_acts_t *a = &e->a[l];
  const int C = d->hidden, H = d->heads, KV = d->kv_heads, D = d->head_dim, F = d->inter, HD = H * D;
  /* MLP: x_out = x_mid + down(act); e->dx16 = bf16(e->dx) from the norm backward before */
  vr_cuda_gemm_op(e->gemm, VR_CUDA_OP_N, VR_CUDA_OP_N, e->dact, 0, e->dx16, P16(e, o->down_w), NULL, 0, NULL, T, F, C,
                  0.f, e->s);
  vr_cuda_gemm_op(e->gemm, VR_CUDA_OP_T, VR_CUDA_OP_N, e->g + o->down_w, 1, e->dx16, a->act, NULL, 0, NULL, C, F, T,
                  e->wbeta, e->s);
  if (o->down_b != NONE) vr_cutrain_colsum_bf16(e->g + o->down_b, e->dx16, C, T, C, e->red, e->s);
  mark(e, VR_CUTRAIN_PH_BWD_DOWN);
  vr_cutrain_swiglu_bwd(e->dgu, e->dact, a->gu, T, F, e->s);
  mark(e, VR_CUTRAIN_PH_BWD_ELEM);
  const size_t gw[2] = {o->gate_w, o->up_w}, gb[2] = {o->gate_b, o->up_b};
  const int gwid[2] = {F, F};
  int dy16 = proj_bwd(e, e->dxn, e->dgu, 2 * F, a->xn2, C, 2, gw, gb, gwid, e->fused_gu, T);
  mark(e, VR_CUTRAIN_PH_BWD_GU);
  norm_bwd(e, dy16, e->dx16, e->g + o->norm2, a->x_mid, P(e, o->norm2), T);
  mark(e, VR_CUTRAIN_PH_BWD_NORM);
  /* attention: x_mid = x_in + o(att) */
  vr_cuda_gemm_op(e->gemm, VR_CUDA_OP_N, VR_CUDA_OP_N, e->datt, 0, e->dx16, P16(e, o->o_w), NULL, 0, NULL, T, HD, C,
                  0.f, e->s);
  vr_cuda_gemm_op(e->gemm, VR_CUDA_OP_T, VR_CUDA_OP_N, e->g + o->o_w, 1, e->dx16, a->att, NULL, 0, NULL, C, HD, T,
                  e->wbeta, e->s);
  if (o->o_b != NONE) vr_cutrain_colsum_bf16(e->g + o->o_b, e->dx16, C, T, C, e->red, e->s);
  mark(e, VR_CUTRAIN_PH_BWD_O);
  vr_cutrain_attention_bwd(e->dqkv, a->qkv, e->nqkv, 0, HD, HD + KV * D, a->att, e->datt, HD, a->lse, e->delta, e->cu,
                           e->tiles, e->tiles_q, e->n_tiles, H, KV, D, d->window, 1.f / sqrtf((float)D), e->split, T,
                           e->attn_bwd, e->s);
  mark(e, VR_CUTRAIN_PH_BWD_ATTN);
  vr_cutrain_rope_bwd(e->dqkv, e->nqkv, 0, HD, H, KV, D, e->pos, e->rope_nif, d->rope_scaling, T, e->s);
  mark(e, VR_CUTRAIN_PH_BWD_ELEM);
  const size_t qw[3] = {o->q_w, o->k_w, o->v_w}, qb[3] = {o->q_b, o->k_b, o->v_b};
  const int qwid[3] = {HD, KV * D, KV * D};
  dy16 = proj_bwd(e, e->dxn, e->dqkv, e->nqkv, a->xn1, C, 3, qw, qb, qwid, e->fused_qkv, T);
  /* layer 0: the embedding's backward reads the fp32 dx alone */
  mark(e, VR_CUTRAIN_PH_BWD_QKV);
  norm_bwd(e, dy16, l > 0 ? e->dx16 : NULL, e->g + o->norm1, e->x[l], P(e, o->norm1), T);
  mark(e, VR_CUTRAIN_PH_BWD_NORM);
}

/* The end of backward stage k (vr_cutrain_backward_cb's numbering, counted from 0 in the
 * order enqueued) was just enqueued: record it, then report the stage before it once its
 * kernels have finished (the device meanwhile runs stage k's, already queued). */
static void stage_end(vr_cutrain_t *e, int k, int prev_stage, void (*done)(void *, int), void *ctx) {
  if (!done) return;
  VR_CUDA_CHECK(cudaEventRecord(e->stage_ev[k & 1], e->s));
  if (k == 0) return;
  VR_CUDA_CHECK(cudaEventSynchronize(e->stage_ev[(k - 1) & 1]));
  done(ctx, prev_stage);
}

int vr_cutrain_backward(vr_cutrain_t *e, const float *glp, const float *gent) {
  return vr_cutrain_backward_cb(e, glp, gent, NULL, NULL);
}

int vr_cutrain_backward_cb(vr_cutrain_t *e, const float *glp, const float *gent, void (*done)(void *ctx, int stage),
                           void *ctx) {
  const vr_cutrain_desc_t *d = &e->d;
  if (!e->kept) {
    vr_log(VR_LOG_ERROR, "backward without a kept forward");
    return VR_ERR_INVAL;
  }
  e->kept = 0;
  grads_settle(e, 0);
  /* after zero_grad the weight GEMMs write their gradients (the rest of g is zero); cleared
   * here, before any stage callback can take g (vr_cutrain_grads) */
  e->wbeta = e->gfresh ? 0.f : 1.f;
  e->gfresh = 0;
  const int T = e->T, C = d->hidden;
  memcpy(e->stage_h, glp, (size_t)T * 4);
  if (gent) memcpy(e->stage_h + T, gent, (size_t)T * 4);
  VR_CUDA_CHECK(cudaMemcpyAsync(e->glp, e->stage_h, (size_t)T * 4, cudaMemcpyHostToDevice, e->s));
  if (gent) VR_CUDA_CHECK(cudaMemcpyAsync(e->gent, e->stage_h + T, (size_t)T * 4, cudaMemcpyHostToDevice, e->s));
  mark(e, -1);
  if (e->value) {
    vr_cutrain_value_bwd(e->dxn, e->g + d->score_w, e->g + d->score_b, e->glp, e->hv, P(e, d->score_w), T, C, e->red,
                         e->s);
  } else {
    const size_t wo = d->lm_head != NONE ? d->lm_head : d->embed;
    vr_cutrain_lmhead_bwd(e->gemm, e->dxn, e->g + wo, e->glp, gent ? e->gent : NULL, e->lse_r, e->ent_r, e->xf,
                          P16(e, wo), e->tgt, T, C, d->vocab, e->temp, e->chunk, e->logits, e->dlogits,
                          e->lp16_kept ? e->lp16 : NULL, e->lpmax, e->wbeta, e->s);
  }
  mark(e, VR_CUTRAIN_PH_BWD_HEAD);
  vr_cutrain_rmsnorm_bwd(e->dx, e->dx16, e->g + d->final_norm, e->dxn, e->x[d->layers], P(e, d->final_norm), T, C,
                         d->rms_eps, 0, e->red, e->s);
  mark(e, VR_CUTRAIN_PH_BWD_NORM);
  stage_end(e, 0, 0, done, ctx); /* stage d->layers: the head and the final norm */
  for (int l = d->layers - 1; l >= 0; --l) {
    if (e->recompute && l < d->layers - 1) layer_fwd(e, l, T, 1); /* the last layer's are still there */
    layer_bwd(e, l, T);
    stage_end(e, d->layers - l, l + 1, done, ctx);
  }
  vr_cutrain_embed_bwd(e->g + d->embed, e->dx, e->order, e->seg, e->uniq, e->n_uniq, C, e->s);
  mark(e, VR_CUTRAIN_PH_BWD_EMBED);
  stage_end(e, d->layers + 1, 0, done, ctx); /* reports layer 0 */
  /* the staging buffer is reused by the next call: wait until the copies have read it */
  VR_CUDA_CHECK(cudaStreamSynchronize(e->s));
  if (done) done(ctx, -1);
  return 0;
}

/* ---------------------------------------------------------------- optimizer and buffers */

int vr_cutrain_zero_grad(vr_cutrain_t *e) {
  if (fwd_only_refuses(e, "zero_grad")) return VR_ERR_UNSUPPORTED;
  if (!e->gfresh) {
    if (e->opt_pending)
      e->zero_deferred = 1; /* the update still reads g: zeroed by the next reader or writer (grads_settle) */
    else
      vr_cutrain_zero_chunks(e->g, e->zr_off, e->zr_len, e->zr_n, e->s);
  }
  e->gfresh = 1;
  e->gscale = 1.f;
  return 0;
}

/* g read with no backward since zero_grad: the GEMMs' parts are zeroed too. */
static void grads_materialize(vr_cutrain_t *e, int keep_scale) {
  grads_settle(e, keep_scale);
  if (!e->gfresh) return;
  VR_CUDA_CHECK(cudaMemsetAsync(e->g, 0, e->d.n_floats * 4, e->s));
  e->gfresh = 0;
}

int vr_cutrain_grad_sqnorm(vr_cutrain_t *e, size_t lo, size_t hi, double *out) {
  if (fwd_only_refuses(e, "grad_sqnorm")) return VR_ERR_UNSUPPORTED;
  if (hi > e->d.n_floats) hi = e->d.n_floats;
  *out = 0;
  if (lo >= hi) return 0;
  grads_materialize(e, 0);
  vr_cutrain_sumsq(e->sq, e->g + lo, hi - lo, e->sq_red, e->s);
  VR_CUDA_CHECK(cudaMemcpyAsync(e->stage_h, e->sq, 8, cudaMemcpyDeviceToHost, e->s));
  VR_CUDA_CHECK(cudaStreamSynchronize(e->s));
  memcpy(out, e->stage_h, 8);
  return 0;
}

int vr_cutrain_scale_grads(vr_cutrain_t *e, float s) {
  if (fwd_only_refuses(e, "scale_grads")) return VR_ERR_UNSUPPORTED;
  grads_materialize(e, 0); /* a factor already pending applied: two in a row round as two passes */
  e->gscale = s;           /* applied by the next reader of g, or taken by the next update */
  return 0;
}

int vr_cutrain_adamw_step(vr_cutrain_t *e, float lr, float beta1, float beta2, float eps, float weight_decay,
                          float clip, int64_t step) {
  if (step < 1) return VR_ERR_INVAL;
  if (fwd_only_refuses(e, "an optimizer step")) return VR_ERR_UNSUPPORTED;
  /* also waits for a previous update still in flight; a pending factor goes into this update
   * unless the on-device clip must first see the scaled gradients */
  grads_materialize(e, clip <= 0.f);
  const vr_cutrain_adamw_t hp = {lr, beta1, beta2, eps, weight_decay, clip, step, e->gscale};
  if (!e->opt_overlap || e->prof) {
    mark(e, -1);
    if (clip > 0.f) vr_cutrain_sumsq(e->sq, e->g, e->d.n_floats, e->sq_red, e->s);
    vr_cutrain_adamw(e->p, e->p16, e->m, e->v, e->g, (int64_t)e->lo, e->ad_off, e->ad_len, NULL, e->ad_n,
                     clip > 0.f ? e->sq : NULL, &hp, e->s);
    mark(e, VR_CUTRAIN_PH_OPTIM);
    return 0;
  }
  /* after everything enqueued so far (the backward's gradients, a materialisation) */
  VR_CUDA_CHECK(cudaEventRecord(e->opt_go, e->s));
  VR_CUDA_CHECK(cudaStreamWaitEvent(e->so, e->opt_go, 0));
  if (clip > 0.f) vr_cutrain_sumsq(e->sq, e->g, e->d.n_floats, e->sq_red, e->so);
  VR_CUDA_CHECK(cudaEventRecord(e->opt_sq, e->so));
  for (int k = e->opt_defer_emb; k < e->opt_stages; ++k) { /* stage 0 later: opt_emb_enqueue */
    const int b = e->opt_begin[k], n = e->opt_begin[k + 1] - b;
    vr_cutrain_adamw(e->p, e->p16, e->m, e->v, e->g, (int64_t)e->lo, e->ad_off + b, e->ad_len + b, NULL, n,
                     clip > 0.f ? e->sq : NULL, &hp, e->so);
    VR_CUDA_CHECK(cudaEventRecord(e->opt_ev[k], e->so));
  }
  e->opt_last = e->opt_ev[e->opt_stages - 1];
  e->emb_deferred = e->opt_defer_emb;
  e->opt_hp = hp, e->opt_clip = clip > 0.f;
  e->opt_pending = 1;
  return 0;
}

const char *vr_cutrain_phase_name(int ph) {
  static const char *const names[VR_CUTRAIN_PH_N] = {
      "embed fwd",   "qkv+rope fwd", "attention fwd", "o-proj fwd", "mlp fwd",        "lm head fwd",
      "lm head bwd", "down bwd",     "gate/up bwd",   "o-proj bwd", "attention bwd",  "qkv bwd",
      "embed bwd",   "optimizer",    "recompute",     "norm bwd",   "swiglu+rope bwd"};
  return ph >= 0 && ph < VR_CUTRAIN_PH_N ? names[ph] : "?";
}

int vr_cutrain_profile(vr_cutrain_t *e, int on) {
  opt_join(e);
  if (on && !e->ev) {
    e->ev = calloc(PROF_EVENTS, sizeof *e->ev);
    e->ev_ph = calloc(PROF_EVENTS, sizeof *e->ev_ph);
    if (!e->ev || !e->ev_ph) return VR_ERR_NOMEM;
    for (int i = 0; i < PROF_EVENTS; ++i) VR_CUDA_CHECK(cudaEventCreate(&e->ev[i]));
  }
  e->prof = on;
  e->n_ev = 0;
  return 0;
}

int vr_cutrain_profile_take(vr_cutrain_t *e, double *ms) {
  opt_join(e);
  VR_CUDA_CHECK(cudaStreamSynchronize(e->s));
  for (int i = 1; i < e->n_ev; ++i) {
    if (e->ev_ph[i] < 0) continue;
    float t = 0.f;
    VR_CUDA_CHECK(cudaEventElapsedTime(&t, e->ev[i - 1], e->ev[i]));
    ms[e->ev_ph[i]] += t;
  }
  const int full = e->n_ev >= PROF_EVENTS;
  e->n_ev = 0;
  return full ? VR_ERR_TOO_LARGE : 0;
}

float *vr_cutrain_params(vr_cutrain_t *e) {
  if (e->opt_pending) { /* the caller reads or writes it from any stream or the host */
    opt_join(e);
    VR_CUDA_CHECK(cudaStreamSynchronize(e->s));
  }
  return e->p;
}
float *vr_cutrain_grads(vr_cutrain_t *e) {
  if (e->gfresh || e->opt_pending || e->zero_deferred || e->gscale != 1.f) { /* read from any stream or the host */
    grads_materialize(e, 0);
    VR_CUDA_CHECK(cudaStreamSynchronize(e->s));
  }
  return e->g;
}
size_t vr_cutrain_device_bytes(const vr_cutrain_t *e) { return e->dev_bytes; }

void vr_cutrain_tune_gemms(vr_cutrain_t *e, int on) {
  vr_cuda_gemm_set_tune_same_bits(e->gemm, on != 2);
  vr_cuda_gemm_set_tune_opts(e->gemm, NULL, 0, on == 3); /* plans built from now on */
  vr_cuda_gemm_set_tuning(e->gemm, on != 0);
}

int vr_cutrain_sync(vr_cutrain_t *e) {
  opt_join(e);
  VR_CUDA_CHECK(cudaStreamSynchronize(e->s));
  return 0;
}

int vr_cutrain_get_params(vr_cutrain_t *e, float *dst) {
  opt_join(e);
  VR_CUDA_CHECK(cudaMemcpyAsync(dst, e->p, e->d.n_floats * 4, cudaMemcpyDeviceToHost, e->s));
  return vr_cutrain_sync(e);
}

int vr_cutrain_set_params(vr_cutrain_t *e, const float *src) {
  opt_join(e);
  VR_CUDA_CHECK(cudaMemcpyAsync(e->p, src, e->d.n_floats * 4, cudaMemcpyHostToDevice, e->s));
  vr_cuda_convert_to_bf16(e->p16, e->p, 0, e->d.n_floats, e->s);
  return vr_cutrain_sync(e);
}

int vr_cutrain_params_written(vr_cutrain_t *e, size_t lo, size_t hi) {
  opt_join(e);
  if (lo > hi || hi > e->d.n_floats) return VR_ERR_INVAL;
  if (hi > lo) vr_cuda_convert_to_bf16(e->p16 + lo, e->p + lo, 0, hi - lo, e->s);
  VR_CUDA_CHECK(cudaGetLastError());
  return vr_cutrain_sync(e);
}

int vr_cutrain_get_grads(vr_cutrain_t *e, float *dst) {
  if (fwd_only_refuses(e, "get_grads")) return VR_ERR_UNSUPPORTED;
  grads_materialize(e, 0);
  VR_CUDA_CHECK(cudaMemcpyAsync(dst, e->g, e->d.n_floats * 4, cudaMemcpyDeviceToHost, e->s));
  return vr_cutrain_sync(e);
}

int vr_cutrain_get_moments(vr_cutrain_t *e, float *m, float *v) {
  if (fwd_only_refuses(e, "get_moments")) return VR_ERR_UNSUPPORTED;
  opt_join(e);
  VR_CUDA_CHECK(cudaMemcpyAsync(m, e->m, (e->hi - e->lo) * 4, cudaMemcpyDeviceToHost, e->s));
  VR_CUDA_CHECK(cudaMemcpyAsync(v, e->v, (e->hi - e->lo) * 4, cudaMemcpyDeviceToHost, e->s));
  return vr_cutrain_sync(e);
}

int vr_cutrain_set_moments(vr_cutrain_t *e, const float *m, const float *v) {
  if (fwd_only_refuses(e, "set_moments")) return VR_ERR_UNSUPPORTED;
  opt_join(e);
  VR_CUDA_CHECK(cudaMemcpyAsync(e->m, m, (e->hi - e->lo) * 4, cudaMemcpyHostToDevice, e->s));
  VR_CUDA_CHECK(cudaMemcpyAsync(e->v, v, (e->hi - e->lo) * 4, cudaMemcpyHostToDevice, e->s));
  return vr_cutrain_sync(e);
}

int vr_cutrain_randomize(vr_cutrain_t *e, uint64_t seed, float scale) {
  opt_join(e);
  const vr_cutrain_desc_t *d = &e->d;
  vr_cutrain_fill_uniform(e->p, d->n_floats, seed, scale, e->s);
  const int C = d->hidden;
  vr_cutrain_fill(e->p + d->final_norm, (size_t)C, 1.f, e->s);
  for (int l = 0; l < d->layers; ++l) {
    vr_cutrain_fill(e->p + e->L[l].norm1, (size_t)C, 1.f, e->s);
    vr_cutrain_fill(e->p + e->L[l].norm2, (size_t)C, 1.f, e->s);
  }
  vr_cuda_convert_to_bf16(e->p16, e->p, 0, d->n_floats, e->s);
  return vr_cutrain_sync(e);
}
