/* vr_cutrain_ops.h: the CUDA training engine's kernels (backward passes, fused LM-head
 * log-probs, attention backward, AdamW, reductions). Internal to trainer/cuda/ and its tests in
 * tests/cuda/; C linkage, no CUDA types beyond cudaStream_t. The forward kernels, the GEMM
 * plans and the conversions are model/cuda's (vr_cuda_ops.h): this file adds only what
 * training needs. One op family per .cu, named in each section's title.
 *
 * Conventions as vr_cuda_ops.h: bf16 tensors as uint16_t*, fp32 as float*, shapes in comments,
 * (T, C) = T packed tokens by C features, row-major. Every launcher enqueues on `s`, checks the
 * launch and never allocates or synchronises; scratch comes from the caller, sized by the
 * *_scratch functions. All reductions are deterministic: fixed grids, fixed summation order,
 * no floating-point atomics, so a step run twice gives the same bits. */
#ifndef VR_CUTRAIN_OPS_H
#define VR_CUTRAIN_OPS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "vr_cuda_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- RMSNorm backward: vr_cutrain_norm.cu ----------------------------------- */
/* Forward was y = x * r * w with r = rsqrt(mean(x^2) + eps) per row. Given dy (T, C) fp32:
 *   dx (T, C) fp32: dx  = r * (dy * w) - x * r^3 * mean(dy * w * x)   (accumulate = 1: dx +=)
 *   dw (C) fp32:    dw += sum_t dy[t] * x[t] * r[t]
 * For C <= 4096 one kernel reads dy and x once: dx, and per block of 16 rows (in order) the
 * dw partial sums into a (blocks, C) table, then a second pass sums the blocks in order (C % 4
 * == 0 and C <= 896 with 16-byte aligned x, dx, w and fp32 dy (8-byte bf16 dy / dx16): a warp
 * per row, the rows' sums per warp then the warps' in order, which rounds differently);
 * larger C: dx per row, then dw in two passes (rows in chunks of VR_CUTRAIN_NORM_CHUNK into a
 * (chunks, C) partial table, then the chunks in order). scratch:
 * vr_cutrain_rmsnorm_bwd_scratch(T, C) floats. dx must not overlap x or dy. dx16 (T, C) bf16, or NULL: bf16(dx) as well (the next
 * GEMM's operand, without a conversion pass). */
#define VR_CUTRAIN_NORM_CHUNK 64
size_t vr_cutrain_rmsnorm_bwd_scratch(int T, int C);
void vr_cutrain_rmsnorm_bwd(float *dx, uint16_t *dx16, float *dw, const float *dy, const float *x, const float *w,
                            int T, int C, float eps, int accumulate, float *scratch, cudaStream_t s);
/* The same with dy bf16 (a projection's dX as autocast's bf16 linear gives it: half the bytes
 * written by its GEMM and read here), for C <= VR_CUTRAIN_NORM_BWD16_MAX_C (the one-pass
 * kernel): vr_cutrain_rmsnorm_bwd's arithmetic on dy's values widened to fp32, bit for bit (where
 * both calls' pointers allow the same form, as buffers from cudaMalloc do). */
#define VR_CUTRAIN_NORM_BWD16_MAX_C 4096
void vr_cutrain_rmsnorm_bwd16(float *dx, uint16_t *dx16, float *dw, const uint16_t *dy, const float *x,
                              const float *w, int T, int C, float eps, int accumulate, float *scratch, cudaStream_t s);
/* Column sums of a bf16 matrix (a bias gradient): db (N) += sum_t dy[t * ld + n], dy rows of
 * pitch ld >= N, bf16, in the same two passes. scratch: vr_cutrain_colsum_scratch(T, N) floats. */
size_t vr_cutrain_colsum_scratch(int T, int N);
void vr_cutrain_colsum_bf16(float *db, const uint16_t *dy, int ld, int T, int N, float *scratch, cudaStream_t s);

/* out (C) += sum_t x[t, c] * wgt[t] (wgt NULL: 1), x (T, C) fp32, in the same two passes.
 * scratch: vr_cutrain_colsum_scratch(T, C) floats. */
void vr_cutrain_colsum_weighted(float *out, const float *x, const float *wgt, int T, int C, float *scratch,
                                cudaStream_t s);

/* ---- value head (the critic): vr_cutrain_value.cu ----------------------------- */
/* val (T) = h (T, C) . w (C) + b[0] (fp32; h the final norm's fp32 output). */
void vr_cutrain_value_fwd(float *val, const float *h, const float *w, const float *b, int T, int C, cudaStream_t s);
/* Backward from gv = dL/dval (T): dh (T, C) = gv w^T (written), dw (C) += h^T gv, db[0] += sum gv
 * (deterministic column sums). scratch: vr_cutrain_colsum_scratch(T, C) floats. */
void vr_cutrain_value_bwd(float *dh, float *dw, float *db, const float *gv, const float *h, const float *w, int T,
                          int C, float *scratch, cudaStream_t s);

/* ---- activations: vr_cutrain_act.cu ------------------------------------------ */
/* SwiGLU backward: forward out = silu(g) * u with gu (T, 2I) = [g | u]. Given dout (T, I) bf16:
 * dgu[:, :I] = dout * u * silu'(g), dgu[:, I:] = dout * silu(g); dgu (T, 2I) bf16. */
void vr_cutrain_swiglu_bwd(uint16_t *dgu, const uint16_t *dout, const uint16_t *gu, int T, int I, cudaStream_t s);
/* The MLP's gate/up projection and SwiGLU in one Hopper GEMM (vr_cutrain_mlp.cu): with
 * [g | u] = x (T, C) W^T, W (2F, C) the adjacent gate and up weights (no biases), act (T, F) =
 * bf16(silu(g) u) of the bf16-rounded g, u (vr_cuda_swiglu's bits on the gu written here) and,
 * unless gu is NULL, gu (T, 2F) = [g | u] bf16 (the backward's input; fp32 accumulation, the same
 * values as cuBLASLt's bf16 GEMM up to summation order). Returns 1 when it ran; 0 when this build,
 * device, shape (vr_cutrain_gu_swiglu_available) or a pointer's 16-byte alignment has no such
 * kernel: nothing launched, the caller runs vr_cuda_gemm + vr_cuda_swiglu. */
int vr_cutrain_gu_swiglu_fwd(uint16_t *act, uint16_t *gu, const uint16_t *x, const uint16_t *W, int T, int C, int F,
                             cudaStream_t s);
/* 1 when vr_cutrain_gu_swiglu_fwd runs here: an sm_90a build on a compute 9.0 device, C % 64 == 0,
 * F % 128 == 0. */
int vr_cutrain_gu_swiglu_available(int C, int F);
/* RoPE backward: the rotation's transpose, in place on the gradient of the rotated heads. The
 * forward's vr_cuda_rope with every angle negated (neg_inv_freq = -inv_freq, D / 2 floats on
 * the device): sin(-a) = -sin(a), so it applies R^T; attn_scaling as in the forward. */
void vr_cutrain_rope_bwd(uint16_t *dqkv, int ld, int q_off, int k_off, int H, int Hkv, int D, const int32_t *pos,
                         const float *neg_inv_freq, float attn_scaling, int T, cudaStream_t s);

/* ---- embedding backward: vr_cutrain_embed.cu --------------------------------- */
/* dW (V, C) fp32 += scatter of dx (T, C) fp32 by token: for each distinct token uniq[u]
 * (u < n_uniq), the rows order[seg[u]] .. order[seg[u+1] - 1] of dx summed in that order
 * (sort/segment, no atomics: deterministic). order (T), seg (n_uniq + 1), uniq (n_uniq):
 * device int32, made by vr_cutrain_embed_segments (host). */
void vr_cutrain_embed_bwd(float *dW, const float *dx, const int32_t *order, const int32_t *seg, const int32_t *uniq,
                          int n_uniq, int C, cudaStream_t s);
/* Host: the counting sort of ids (T, each in [0, V)) into order / seg / uniq (sizes as above;
 * seg needs T + 1 entries at most); count: V int32 scratch. Returns n_uniq, or -1 when an id
 * is outside [0, V). */
int vr_cutrain_embed_segments(const int32_t *ids, int T, int V, int32_t *order, int32_t *seg, int32_t *uniq,
                              int32_t *count);

/* ---- fused LM head + log-softmax: vr_cutrain_lmhead.cu ----------------------- */
/* Log-probs and entropy of targets at a temperature without the (T, V) logits: the tokens are
 * taken in chunks of at most chunk rows; per chunk the logits (rows, V) fp32 come from one
 * cuBLASLt GEMM into `logits` scratch and an online logsumexp kernel reads them once.
 *   x (T, C) bf16 final hidden states, W (V, C) bf16 the LM head (tied: the embedding),
 *   tgt (T) int32 the next token or -1 (no target: logp = 0),
 *   logp (T), ent (T), lse (T) fp32 out: z = logits / temp, lse = logsumexp(z),
 *   logp = z[tgt] - lse, ent = lse - sum softmax(z) * z.
 * logits: chunk * V floats. Either of logp / ent may be NULL; lse is required (the backward
 * reads it). lp16 (T, V) bf16 or NULL: every row's log-softmax too, for a backward without the
 * logits' recomputation, in the same read of the logits: per segment s of VR_CUTRAIN_LSM_SEG
 * elements of a row (j / VR_CUTRAIN_LSM_SEG == s) its max m_s into lpmax
 * (T, vr_cutrain_lsm_segs(V)) fp32 and lp16 = bf16(z - m_s), so log p_j = lp16[j] + lpmax[s] - lse
 * (as z <= m_s <= lse the stored value is no larger in magnitude than log p: the rounding errs
 * by at most |log p| 2^-8, bf16's unit roundoff). lpmax is required with lp16. */
#define VR_CUTRAIN_LSM_SEG 128
static inline int vr_cutrain_lsm_segs(int V) { return (V + VR_CUTRAIN_LSM_SEG - 1) / VR_CUTRAIN_LSM_SEG; }
/* fused nonzero and vr_cutrain_lmhead_fused_available(C, V): instead, one Hopper GEMM whose
 * epilogue takes the statistics (and writes lp16 / lpmax) from its accumulators, over all T rows
 * at once (vr_cutrain_lmhead_sm90.cuh): no logits are formed; `logits` serves as its workspace, T
 * (4 ceil(V / 256) + 1) floats (launches of fewer rows when chunk * V is smaller). The same
 * outputs up to summation order (fp32 accumulation in both). fused: the GEMM's form,
 * VR_CUTRAIN_LMHEAD_FORM_COOP (1, the engine's): cooperative (two consumer warpgroups on a tile);
 * _PP (2): ping-pong (the epilogue of one tile under the products of the next) in single blocks;
 * _PP2 (3): ping-pong in clusters of two blocks that multicast W. All give the same bits; the two
 * ping-pong forms measured slower on the H200 (docs/benchmarks.md) and stay for measurements
 * (each falls back to the next one down where its checks before the launch refuse it: the
 * workspace, a tensor map, no cluster of two on the device: PP2 -> PP -> COOP; a failed launch is
 * fatal, as every kernel launch here). T <= 0: nothing runs and fused is returned. fused 0:
 * the cuBLASLt path above. Returns the form that ran (nonzero) when the fused kernel did, 0 when
 * the cuBLASLt path did. */
enum { VR_CUTRAIN_LMHEAD_FORM_COOP = 1, VR_CUTRAIN_LMHEAD_FORM_PP = 2, VR_CUTRAIN_LMHEAD_FORM_PP2 = 3 };
int vr_cutrain_lmhead_fwd(vr_cuda_gemm_t *g, float *logp, float *ent, float *lse, const uint16_t *x, const uint16_t *W,
                          const int32_t *tgt, int T, int C, int V, float temp, int chunk, float *logits, uint16_t *lp16,
                          float *lpmax, int fused, cudaStream_t s);
/* 1 when the fused forward runs here: an sm_90a build on a compute 9.0 device, C % 64 == 0. */
int vr_cutrain_lmhead_fused_available(int C, int V);
/* Backward from the caller's per-token loss gradients glp = dL/dlogp (T) and gent = dL/dent
 * (T, or NULL): per chunk the logits are recomputed, dz = glp (onehot(tgt) - p)
 * - gent * p (log p + ent) is formed as bf16 dlogits = dz / temp (rows, V) in `dlogits`
 * scratch (chunk * V bf16), then dx (T, C) fp32 = dlogits W (written) and dW (V, C) fp32 +=
 * dlogits^T x (accumulated). logits / dlogits: the forward's chunk scratch and chunk * V bf16.
 * lp16 / lpmax: the forward's stored log-softmax (then p comes from it and no logits are
 * recomputed; its bf16 rounding errs by at most p |log p| 2^-8 <= 2^-8 / e on a probability):
 * lp16 is OVERWRITTEN with the dlogits of all T rows (in place, one pass) and the two GEMMs run
 * once over all T rows (logits / dlogits unused); or NULL (recomputed in fp32 per chunk).
 * dw_beta 1: dW is accumulated into as above; 0: overwritten (dW = the sum; its old contents,
 * never read, may be anything). */
void vr_cutrain_lmhead_bwd(vr_cuda_gemm_t *g, float *dx, float *dW, const float *glp, const float *gent,
                           const float *lse, const float *ent, const uint16_t *x, const uint16_t *W, const int32_t *tgt,
                           int T, int C, int V, float temp, int chunk, float *logits, uint16_t *dlogits,
                           uint16_t *lp16, const float *lpmax, float dw_beta, cudaStream_t s);
/* The two row kernels alone (tests): over logits (rows, V) fp32 already in memory; lp16 / lpmax
 * as above (rows, V) / (rows, segs): written by the first, read instead of logits by the second
 * when lp16 is non-NULL (dlogits may then be lp16 itself: in place). */
void vr_cutrain_logsoftmax_rows(float *logp, float *ent, float *lse, const float *logits, const int32_t *tgt, int rows,
                                int V, float temp, uint16_t *lp16, float *lpmax, cudaStream_t s);
void vr_cutrain_dlogits_rows(uint16_t *dlogits, const float *logits, const uint16_t *lp16, const float *lpmax,
                             const float *glp, const float *gent, const float *lse, const float *ent,
                             const int32_t *tgt, int rows, int V, float temp, cudaStream_t s);

/* ---- attention: vr_cutrain_attention.cu -------------------------------------- */
/* Forward with the logsumexp saved: model/cuda's vr_cuda_attention_lse (tensor-core kernels,
 * D 16/32/64/128), or vr_cutrain_attention_fwd_generic for any D <= 256 (fp32, one warp per
 * row: small models). Causal; window > 0: keys j of query i with i - j < window.
 * Backward (FlashAttention-2 style, recomputing P from the saved lse):
 *   qkv (T, ld) bf16 the forward's input (after RoPE), q_off / k_off / v_off as the forward's;
 *   o, dout (T, ld_o) bf16 the forward's output and its gradient (head h at h * D);
 *   lse (T, H) fp32 log2-domain logsumexp of the scaled scores (vr_cuda_attention_lse's);
 *   dqkv (T, ld) bf16 out: dq, dk, dv at the same columns as q, k, v (other columns untouched);
 *   cu (n_seqs + 1), tiles (2 * n_tiles): 64-row tiles (seq, t0), as vr_cutrain_attention_tiles;
 *   delta: T * H floats scratch (rowsum(dout * o) per head).
 * tiles orders the dK / dV kernels' blocks, tiles_q (the same tiles in any order, or NULL: tiles)
 * the dQ kernels'; vr_cutrain_attention_tiles_sort puts each kernel's heaviest tiles first.
 * Tensor cores (mma.sync, P and dS in registers) when vr_cutrain_attention_bwd_tc(D, window)
 * (D 64 or 128, no window):
 * dK / dV of a key head summed over its query group inside one block, dQ in a second kernel
 * per query tile; otherwise the generic fp32 kernels (any D <= 256, windows), the same split.
 * split (tensor-core path with H > Hkv; NULL: off, ignored elsewhere):
 * vr_cutrain_attention_bwd_split_scratch(T, H, D) floats; the dK / dV kernel then runs one
 * block per query head (H / Hkv times the blocks: for models with few key heads) into that
 * fp32 table and a second pass sums each group in head order (WGMMA_CO4H: one block per 2 query
 * heads of a group, about half the table).
 * kernel: VR_CUTRAIN_ATTN_BWD_AUTO (vr_cutrain_attention_bwd_kernel's choice) or one of the others
 * where it runs (MMA where _tc, WGMMA where _wgmma_ok; GENERIC anywhere). The WGMMA kernels read
 * whole 64-row tiles through TMA: every row of qkv and dout below T must be finite (rows of other
 * sequences are read and multiplied by P = 0), and qkv / dout 16-byte aligned.
 * No atomics: deterministic (the same bits for any tile order, per kernel; the kernels differ
 * from each other in rounding). */
enum {
  VR_CUTRAIN_ATTN_BWD_AUTO = 0,
  VR_CUTRAIN_ATTN_BWD_GENERIC = 1, /* fp32, one warp per row */
  VR_CUTRAIN_ATTN_BWD_MMA = 2,     /* mma.sync, cp.async (vr_cutrain_attention_mma.cuh): any sm_80+ */
  /* wgmma + TMA (vr_cutrain_attention_sm90.cuh), sm_90a builds on compute 9.0, seven forms: */
  VR_CUTRAIN_ATTN_BWD_WGMMA = 3,    /* register A operands (wg_bwd_ra: the dQ kernel's Q / dO at D 128),
                                       a pair's last product overlapping the next pair's first */
  VR_CUTRAIN_ATTN_BWD_WGMMA_SS = 4, /* every S / dP operand from shared memory, each pair waited for
                                       (the automatic choice before WGMMA_CO4H) */
  VR_CUTRAIN_ATTN_BWD_WGMMA_RA = 5, /* register A operands as WGMMA, each pair waited for */
  VR_CUTRAIN_ATTN_BWD_WGMMA_CO = 6, /* as WGMMA_SS with the dK / dV kernel's S^T and dP^T issued together */
  VR_CUTRAIN_ATTN_BWD_WGMMA_COP = 7, /* WGMMA_CO pipelined as WGMMA (register A where WGMMA has it) */
  VR_CUTRAIN_ATTN_BWD_WGMMA_CO4 = 8, /* WGMMA_CO with the dQ kernel at 4 blocks a multiprocessor, 2 stages (D 64) */
  VR_CUTRAIN_ATTN_BWD_WGMMA_CO4H = 9 /* WGMMA_CO4 with the split table per 2 query heads (half the table):
                                       the automatic choice */
};
/* The automatic choice: VR_CUTRAIN_ATTN_BWD_HOPPER where the wgmma kernels run (_wgmma_ok), else
 * MMA for D 64 / 128 without a window, else GENERIC. VR_CUTRAIN_ATTN_BWD_HOPPER: WGMMA_CO4H, the
 * fastest form timed (docs/benchmarks.md, "attention backward forms (abwd2)"); a build-time knob
 * (-DVR_CUTRAIN_ATTN_BWD_HOPPER=VR_CUTRAIN_ATTN_BWD_MMA turns the wgmma kernels off). */
#ifndef VR_CUTRAIN_ATTN_BWD_HOPPER
#define VR_CUTRAIN_ATTN_BWD_HOPPER VR_CUTRAIN_ATTN_BWD_WGMMA_CO4H
#endif
int vr_cutrain_attention_bwd_kernel(int D, int window);
int vr_cutrain_attention_bwd_tc(int D, int window);
/* 1 when this build carries the wgmma kernels (an sm_90a target), the current device is compute
 * 9.0, D is 64 or 128 and there is no window. */
int vr_cutrain_attention_bwd_wgmma_ok(int D, int window);
size_t vr_cutrain_attention_bwd_split_scratch(int T, int H, int D);
void vr_cutrain_attention_fwd_generic(uint16_t *o, int ld_o, float *lse, const uint16_t *qkv, int ld, int q_off,
                                      int k_off, int v_off, const int32_t *cu, const int32_t *tiles, int n_tiles, int H,
                                      int Hkv, int D, int window, float scale, cudaStream_t s);
void vr_cutrain_attention_bwd(uint16_t *dqkv, const uint16_t *qkv, int ld, int q_off, int k_off, int v_off,
                              const uint16_t *o, const uint16_t *dout, int ld_o, const float *lse, float *delta,
                              const int32_t *cu, const int32_t *tiles, const int32_t *tiles_q, int n_tiles, int H,
                              int Hkv, int D, int window, float scale, float *split, int T, int kernel,
                              cudaStream_t s);
/* Host: reorders a 64-row tile list (n_tiles tiles of sequences cu) by descending work for the
 * dK / dV kernels (for_keys = 1: the queries at or after the tile) or the dQ kernels (0: the
 * keys up to the tile's end; also the forward's list of larger tiles, ordered by their first 64
 * rows), ties in list order. scratch: 2 * n_tiles uint64. */
void vr_cutrain_attention_tiles_sort(const int32_t *cu, int32_t *tiles, int n_tiles, int for_keys, uint64_t *scratch);
/* Host: the tile list of rows-row tiles of sequences cu (n_seqs + 1, host) into tiles
 * (2 * max_tiles); returns n_tiles, or -1 when more than max_tiles are needed. */
int vr_cutrain_attention_tiles(const int32_t *cu, int n_seqs, int rows, int32_t *tiles, int max_tiles);

/* ---- optimizer and reductions: vr_cutrain_optim.cu ---------------------------- */
/* Sum of squares of x (n fp32) into out[0] (double), two passes over a fixed grid
 * (VR_CUTRAIN_SUMSQ_BLOCKS partials in scratch, then one block in order). */
#define VR_CUTRAIN_SUMSQ_BLOCKS 1024
void vr_cutrain_sumsq(double *out, const float *x, size_t n, double *scratch, cudaStream_t s);
/* AdamW (torch.optim.AdamW: decoupled weight decay, bias correction) over chunks of one
 * contiguous buffer set: chunk i covers [off[i], off[i] + len[i]) with weight decay
 * weight_decay * wd[i] (wd NULL: 1 everywhere) — multi-tensor: one launch for every tensor.
 *   p fp32 updated and g fp32 read at [off, off + len); m, v fp32 at [off - moff, ...) (the
 *   moments of a shard starting at moff); p16 bf16 = bf16(p) written (NULL: none).
 *   Gradients are scaled by min(1, clip / (sqrt(sumsq[0]) + 1e-6)) when clip > 0 and sumsq is
 *   given (torch.nn.utils.clip_grad_norm_), the norm staying on the device.
 *   step >= 1 (bias correction 1 - beta^step). off, len (int64), wd (fp32): device arrays,
 *   made by vr_cutrain_adamw_chunks (host: chunks of VR_CUTRAIN_ADAMW_CHUNK over [lo, hi);
 *   returns their number, -1 when more than max_chunks). */
#define VR_CUTRAIN_ADAMW_CHUNK 65536
typedef struct vr_cutrain_adamw {
  float lr, beta1, beta2, eps, weight_decay, clip;
  int64_t step;
  float grad_scale; /* 0 or 1: none; else the gradients' factor not yet applied to them: each is
                     * multiplied by it first (one float product: the bits of g scaled in place) */
} vr_cutrain_adamw_t;
int vr_cutrain_adamw_chunks(size_t lo, size_t hi, int64_t *off, int64_t *len, int max_chunks);
void vr_cutrain_adamw(float *p, uint16_t *p16, float *m, float *v, const float *g, int64_t moff, const int64_t *off,
                      const int64_t *len, const float *wd, int n_chunks, const double *sumsq,
                      const vr_cutrain_adamw_t *hp, cudaStream_t s);
/* out (T, C) fp32 = rows ids[t] of the table at p + off as vr_cutrain_adamw with the same hp,
 * sumsq and wd NULL will leave them (the same arithmetic, bit for bit), written to out alone:
 * the overlapped optimizer's input embedding, read by the next forward before its update runs. */
void vr_cutrain_adamw_rows(float *out, const float *p, const float *m, const float *v, const float *g, int64_t moff,
                           int64_t off, const int32_t *ids, int T, int C, const double *sumsq,
                           const vr_cutrain_adamw_t *hp, cudaStream_t s);
/* x[off[i], off[i] + len[i]) = 0 for the n_chunks chunks (device arrays; chunks of at most
 * VR_CUTRAIN_ADAMW_CHUNK, one block each): the gradient buffer's parts no GEMM overwrites. */
void vr_cutrain_zero_chunks(float *x, const int64_t *off, const int64_t *len, int n_chunks, cudaStream_t s);
/* x (n) fp32 = scale * uniform(-1, 1) from a counter hash of (seed, i): random weights for
 * benchmarks and tests, the same on every device. */
void vr_cutrain_fill_uniform(float *x, size_t n, uint64_t seed, float scale, cudaStream_t s);
/* x (n) fp32 *= a (gradient clipping by the caller's factor). */
void vr_cutrain_scale(float *x, size_t n, float a, cudaStream_t s);
/* x (n) fp32 = value. */
void vr_cutrain_fill(float *x, size_t n, float value, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif /* VR_CUTRAIN_OPS_H */
