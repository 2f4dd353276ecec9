/* vr_tcpu_ops.h: forward and backward ops of the cpu training backend (fp32, deterministic).
 *
 * Every op reads and writes caller-owned arrays; shapes in comments, T = packed tokens.
 * Determinism: every output element is computed by one thread in a fixed order (GEMMs through
 * vr_cpu_gemm.h, reductions over tokens in token order), so results do not depend on the thread
 * count. Backward ops ADD into parameter gradients (accumulation over micro-batches) and WRITE
 * (or add, where the name says so) activation gradients. */
#ifndef VR_TCPU_OPS_H
#define VR_TCPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "vr_cpu_gemm.h"

typedef struct vr_tcpu_ctx {
  vr_cpu_gemm_variant_t gemm;
  int n_threads;
  float *pack;   /* n_threads * VR_CPU_GEMM_PACK_FLOATS(pack_k) floats, 32-byte aligned */
  int pack_k;    /* largest inner dimension of an NT GEMM */
  float *tmp;    /* scratch of tmp_floats (linear backward: dW, transposes) */
  size_t tmp_floats;
} vr_tcpu_ctx_t;

/* y (T, out) = x (T, in) W^T (+ b). */
void vr_tcpu_linear(const vr_tcpu_ctx_t *c, const float *x, const float *w, const float *b, int T, int in,
                    int out, float *y);
/* Backward of y = x W^T + b for dy (T, out): dx (T, in) written (add_dx 0) or added (1);
 * dx may be NULL (not wanted). gw (out, in) += dy^T x, gb (out) += sum_t dy (gb NULL: no bias).
 * Needs c->tmp of at least out * (T + in) + T * in floats. */
void vr_tcpu_linear_bwd(const vr_tcpu_ctx_t *c, const float *x, const float *w, const float *dy, int T,
                        int in, int out, float *dx, int add_dx, float *gw, float *gb);

/* y = w * (x * r), r[t] = 1 / sqrt(mean(x[t]^2) + eps) saved in r (T). x, y (T, C). */
void vr_tcpu_rmsnorm(const float *x, const float *w, int T, int C, float eps, float *y, float *r);
/* dx (T, C) += d/dx, gw (C) += d/dw, from dy and the saved r. */
void vr_tcpu_rmsnorm_bwd(const float *x, const float *w, const float *r, const float *dy, int T, int C,
                         float *dx, float *gw);

/* In place: rotates every head (T rows of nh heads of D) by its position (positions from each
 * sequence's start; cos/sin tables (max_len, D/2)); inverse = 1 applies the transpose (backward). */
void vr_tcpu_rope(float *x, int nh, int D, const uint32_t *cu, uint32_t n, const float *cos_t,
                  const float *sin_t, int inverse);

/* RoPE cos/sin tables (n, half) for positions [0, n), grown on demand: a config's
 * max_position_embeddings may be 2^24, so nothing is computed before sequences that long come. */
typedef struct vr_tcpu_rope_tab {
  float *cos_t, *sin_t;
  size_t n;
} vr_tcpu_rope_tab_t;
/* Covers positions [0, need) (growing to at least twice the old size, at most cap): entry (p, i)
 * is cosf / sinf of (float)p * inv[i], times scale, in float32 as transformers' rotary embedding.
 * 0 or VR_ERR_NOMEM (the table is then as before). */
int vr_tcpu_rope_grow(vr_tcpu_rope_tab_t *t, size_t need, size_t cap, const float *inv, int half, float scale);
void vr_tcpu_rope_free(vr_tcpu_rope_tab_t *t);

/* a (T*F) = silu(g) * u. */
void vr_tcpu_swiglu(const float *g, const float *u, size_t n, float *a);
/* dg, du (n) from da. */
void vr_tcpu_swiglu_bwd(const float *g, const float *u, const float *da, size_t n, float *dg, float *du);

/* Causal attention with GQA over packed sequences: out (T, H*D) = softmax(q k^T D^-1/2 + mask) v,
 * q (T, H*D) and k, v (T, KV*D) after RoPE; window > 0 keeps keys j with i - j < window.
 * lse (T, H) gets each row's log-sum-exp of the scaled scores (for backward). s: scratch of
 * n_threads * block * L floats where the caller sized it with vr_tcpu_attn_scratch. */
size_t vr_tcpu_attn_scratch(const uint32_t *cu, uint32_t n, int n_threads, int D);
void vr_tcpu_attention(const vr_tcpu_ctx_t *c, const float *q, const float *k, const float *v, int H, int KV,
                       int D, int window, const uint32_t *cu, uint32_t n, float *out, float *lse, float *s);
/* Backward (FlashAttention-2 style: P recomputed from q, k and lse): dq (T, H*D), dk, dv
 * (T, KV*D) written. Threads split the kv heads (each owns its dk/dv rows and its group's dq). */
void vr_tcpu_attention_bwd(const vr_tcpu_ctx_t *c, const float *q, const float *k, const float *v,
                           const float *out, const float *lse, const float *dout, int H, int KV, int D,
                           int window, const uint32_t *cu, uint32_t n, float *dq, float *dk, float *dv,
                           float *s);

/* Rows of the LM head processed together (the z chunk is VR_TCPU_LM_ROWS x vchunk). */
#define VR_TCPU_LM_ROWS 64

/* LM head log-probs + entropy at temperature tau for R selected rows, never materialising
 * (R, V): h (R, C) hidden rows, tgt (R) target ids, W (V, C). Chunks of VR_TCPU_LM_ROWS rows and
 * vchunk vocabulary rows with an online log-sum-exp (double accumulators); z = h W^T / tau.
 * Writes logp (R), ent (R), lse (R) (of z). zbuf: VR_TCPU_LM_ROWS * vchunk floats; vchunk in
 * [1, V] (the caller clamps it: 0 would never finish). */
void vr_tcpu_lmhead(const vr_tcpu_ctx_t *c, const float *h, const int32_t *tgt, int R, int C, const float *W,
                    int V, float tau, int vchunk, float *logp, float *ent, float *lse, float *zbuf);
/* Backward for dlogp (R) and dent (R, or NULL): dh (R, C) written, gW (V, C) added. Recomputes z
 * per chunk. zbuf as forward; needs c->tmp >= VR_TCPU_LM_ROWS * C + vchunk * (VR_TCPU_LM_ROWS + C). */
void vr_tcpu_lmhead_bwd(const vr_tcpu_ctx_t *c, const float *h, const int32_t *tgt, int R, int C,
                        const float *W, int V, float tau, int vchunk, const float *lse, const float *ent,
                        const float *dlogp, const float *dent, float *dh, float *gW, float *zbuf);

#endif /* VR_TCPU_OPS_H */
