/* vr_cuda_ops.h: the CUDA backend's kernels and cuBLASLt wrapper (internal to
 * model/cuda/ and its tests in tests/cuda/; C linkage, no CUDA types beyond
 * cudaStream_t so plain C tests can drive every kernel against a CPU reference).
 * One op family per .cu, named in each section's title.
 *
 * Conventions: bf16 tensors are passed as uint16_t* (bit patterns), fp32 as
 * float*. Shapes in comments: (T, C) = T packed tokens by C features,
 * row-major. Every launcher enqueues on `s`, checks the launch
 * (VR_CUDA_CHECK_LAUNCH) and never allocates or synchronises, so all of them
 * may be captured into a CUDA graph.
 *
 * Packed-batch metadata (device int32 arrays, written by the backend per batch):
 *   cu     (n_seqs + 1)   sequence starts, cu[0] = 0
 *   tiles  (2 * n_tiles)  attention work items: (seq, q0) with q0 a multiple
 *                         of vr_cuda_attention_tile_rows(), longest-work first
 *   meta   [0] = n_seqs, [1] = n_tiles (read on the device, so one captured
 *          graph serves every batch of its token bucket) */
#ifndef VR_CUDA_OPS_H
#define VR_CUDA_OPS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VR_CUDA_ATTN_BM 64 /* query rows per attention tile */
#define VR_CUDA_META_N_SEQS 0
#define VR_CUDA_META_N_TILES 1
/* tiles of the last layer's score-rows-only attention (see the backend's enqueue_forward);
 * that launch reads meta + 1, so its N_TILES word is this one */
#define VR_CUDA_META_N_LTILES 2

/* ---- launches: vr_cuda_launch.cuh / vr_cuda_convert.cu ---------------------- */
/* Whether the launchers below (all but the conversions, the FA3 kernel and cuBLASLt) ask for
 * programmatic dependent launch (vr_cuda_launch.cuh): off (0) unless set on. Process-wide
 * (every model, engine and thread of the process; the cuda backend sets it from cuda-pdl at
 * load); a relaxed atomic, so a change affects launches enqueued after it. */
int vr_cuda_launch_pdl(void);
void vr_cuda_set_launch_pdl(int on);

/* ---- conversions (weights at load): vr_cuda_convert.cu -------------------- */
/* src holds n elements of dtype (0 f32, 1 f16, 2 bf16: vr_dtype_t). */
void vr_cuda_convert_to_bf16(uint16_t *dst, const void *src, int src_dtype, size_t n, cudaStream_t s);
void vr_cuda_convert_to_f32(float *dst, const void *src, int src_dtype, size_t n, cudaStream_t s);

/* ---- embeddings + first norm: vr_cuda_embed.cu ----------------------------- */
/* Encoder: x[t] = LN(tok[ids[t]] + pos_emb[pos[t]] + type_emb[0]) * w + b (fp32), xn = bf16(x).
 * Decoder (pos_emb == NULL, b == NULL): x[t] = tok[ids[t]], xn = bf16(RMS(x) * w).
 * tok, pos_emb, type_emb: (V, C) tables, bf16 or (emb_f32 = 1) fp32; x (T, C) fp32;
 * xn (T, C) bf16. */
void vr_cuda_embed_norm(float *x, uint16_t *xn, const int32_t *ids, const int32_t *pos,
                        const void *tok, const void *pos_emb, const void *type_emb, int emb_f32,
                        const float *w, const float *b, int T, int C, float eps, cudaStream_t s);

/* ---- norms: vr_cuda_norm.cu ------------------------------------------------ */
/* Post-norm (encoders): x = LN(x) * w + b in place (fp32), xn = bf16(x). */
void vr_cuda_layernorm(float *x, uint16_t *xn, const float *w, const float *b, int T, int C,
                       float eps, cudaStream_t s);
/* Post-norm on a bf16 residual stream (encoders): xn = bf16(LN(y [+ r]) * w + b); also the
 * fp32 result into x unless x is NULL. r: a bf16 residual added in the norm, or NULL; it may
 * be xn itself (read before written). y must not overlap xn. */
void vr_cuda_layernorm_b16(const uint16_t *y, const uint16_t *r, uint16_t *xn, float *x, const float *w,
                           const float *b, int T, int C, float eps, cudaStream_t s);
/* Pre-norm (decoders): xn = bf16(x * rsqrt(mean(x^2) + eps) * w); x unchanged. */
void vr_cuda_rmsnorm(const float *x, uint16_t *xn, const float *w, int T, int C, float eps,
                     cudaStream_t s);
/* The same in fp32 (decoders' final norm, the trunk's hidden states): y = x * rsqrt(mean(x^2)
 * + eps) * w; y may be x (in place). */
void vr_cuda_rmsnorm_f32(const float *x, float *y, const float *w, int T, int C, float eps, cudaStream_t s);

/* ---- RoPE: vr_cuda_rope.cu ------------------------------------------------- */
/* RoPE (rotate_half convention) in place on the H query heads at q_off and the
 * Hkv key heads at k_off of each row of qkv (T, ld), head_dim D:
 * angle = pos[t] * inv_freq[i], cos/sin multiplied by attn_scaling. */
void vr_cuda_rope(uint16_t *qkv, int ld, int q_off, int k_off, int H, int Hkv, int D,
                  const int32_t *pos, const float *inv_freq, float attn_scaling, int T,
                  cudaStream_t s);

/* ---- row gathers: vr_cuda_gather.cu ----------------------------------------- */
/* dst row j = src row rows[j] for j < min(n, meta[VR_CUDA_META_N_SEQS]), rows of row_bytes
 * bytes (a multiple of 2); dst must not overlap src. */
void vr_cuda_gather_rows(void *dst, const void *src, const int32_t *rows, const int32_t *meta, int n, int row_bytes,
                         cudaStream_t s);

/* ---- activations and bias: vr_cuda_act.cu ---------------------------------- */
/* out[t, i] = silu(gu[t, i]) * gu[t, I + i]; gu (T, 2I), out (T, I). */
void vr_cuda_swiglu(uint16_t *out, const uint16_t *gu, int T, int I, cudaStream_t s);
/* h[t, i] = gelu(h[t, i] + b[i]) in place; tanh_approx selects gelu_new; b may be NULL. */
void vr_cuda_bias_gelu(uint16_t *h, const float *b, int T, int I, int tanh_approx, cudaStream_t s);
/* y[t, n] += b[n]; y is fp32 (y_f32 = 1, b fp32) or bf16 (b bf16). */
void vr_cuda_add_bias(void *y, int y_f32, const void *b, int T, int N, cudaStream_t s);

/* ---- attention: vr_cuda_attention.cu (+ vr_cuda_attention_fa.cuh) ---------- */
/* The kernels (vr_cuda_attention picks by head_dim and batch rows; tests and benchmarks may
 * name one with vr_cuda_attention_run). */
typedef enum vr_cuda_attn_kernel {
  VR_CUDA_ATTN_KERNEL_GENERIC = 0, /* fp32, one warp per query row, 64-row tiles: any D in 1..256 */
  VR_CUDA_ATTN_KERNEL_FA64 = 1,    /* tensor cores, 64-row query tiles of 4 warps x 16 rows: D 16/32/64/128 */
  VR_CUDA_ATTN_KERNEL_FA128 = 2,   /* tensor cores, 128-row query tiles of 4 warps x 32 rows: D 16/32/64 */
  VR_CUDA_ATTN_KERNEL_FA3 = 3,     /* Hopper wgmma + TMA, warp-specialised, 128- or 192-row tiles
                                      (vr_cuda_attention_fa3_rows): D 64/128, sm_90a builds on compute
                                      9.0 devices only, needs the rows (rows_hint / rows) */
} vr_cuda_attn_kernel_t;
/* Variable-length multi-head attention over packed sequences, no padding:
 * for each sequence, head h, query i: softmax_j(scale * q_i . k_j) v_j over the
 * keys j of the same sequence (j <= i when causal; i - j < window when
 * window > 0). q, k, v are column blocks of qkv (T, ld): query head h at
 * q_off + h*D, key/value head h / (H / Hkv) at k_off / v_off (GQA).
 * out (T, ld_out): head h at h*D. grid_tiles: blocks along the tile axis
 * (each loops over meta[1] tiles); pass n_tiles for an eager launch or an
 * upper bound for a graph. rows_hint: the batch's (bucket's) rows, or 0 (unknown); the
 * kernel is vr_cuda_attention_kernel(D, rows_hint). With rows_hint > 0, qkv has at least
 * rows_hint rows (the FA3 kernel's tensor map spans that many) and cu[n_seqs] <= rows_hint. */
void vr_cuda_attention(const uint16_t *qkv, int ld, int q_off, int k_off, int v_off, uint16_t *out,
                       int ld_out, const int32_t *cu, const int32_t *tiles, const int32_t *meta,
                       int grid_tiles, int H, int Hkv, int D, int causal, int window, float scale,
                       int rows_hint, cudaStream_t s);
/* The same with the kernel named; it must fit D (vr_cuda_attention_kernel_fits) and the tile
 * list must be made of vr_cuda_attention_kernel_rows(k)-row tiles. rows: as rows_hint above
 * (FA3 needs it > 0; the others ignore it). */
void vr_cuda_attention_run(vr_cuda_attn_kernel_t k, const uint16_t *qkv, int ld, int q_off, int k_off, int v_off,
                           uint16_t *out, int ld_out, const int32_t *cu, const int32_t *tiles, const int32_t *meta,
                           int grid_tiles, int H, int Hkv, int D, int causal, int window, float scale, int rows,
                           cudaStream_t s);
/* As vr_cuda_attention, with the batch's longest sequence known on the host (max_len; 0:
 * unknown, which is vr_cuda_attention): from VR_CUDA_ATTN_FA3_C3_MIN_LEN tokens FA3 at head_dim
 * 64 takes three consumer warpgroups on 192-row tiles (VR_CUDA_FA3_C3), so the tile list must be
 * made with vr_cuda_attention_tile_rows_maxlen of the same (D, rows_hint, max_len). A graph
 * serving any batch of its bucket passes 0. */
void vr_cuda_attention_maxlen(const uint16_t *qkv, int ld, int q_off, int k_off, int v_off, uint16_t *out, int ld_out,
                              const int32_t *cu, const int32_t *tiles, const int32_t *meta, int grid_tiles, int H,
                              int Hkv, int D, int causal, int window, float scale, int rows_hint, int max_len,
                              cudaStream_t s);
/* As vr_cuda_attention, also writing lse (T, H) fp32: per query row and head the
 * log2-domain logsumexp of the scaled scores, log2(sum_j 2^(scale * log2(e) * q.k_j)), which a
 * training backward recomputes P from. Tensor-core kernels only: D in 16/32/64/128. */
void vr_cuda_attention_lse(const uint16_t *qkv, int ld, int q_off, int k_off, int v_off, uint16_t *out, int ld_out,
                           float *lse, const int32_t *cu, const int32_t *tiles, const int32_t *meta, int grid_tiles,
                           int H, int Hkv, int D, int causal, int window, float scale, int rows_hint, cudaStream_t s);
/* FA3 from this many rows (it beat FA64 on every shape timed down to 1 x 512 and 8 x 256), its
 * blocks heads-inner (VR_CUDA_FA3_HEAD_INNER) in batches under VR_CUDA_ATTN_FA3_HEAD_INNER_ROWS
 * (faster from 1 x 512 to 1 x 2048, slower at 16384 rows): docs/benchmarks.md, "Issue 24: FA3 at
 * head_dim 64". A definition on the compiler's command line wins (the device scripts' runs). */
#ifndef VR_CUDA_ATTN_FA3_MIN_ROWS
#define VR_CUDA_ATTN_FA3_MIN_ROWS 512
#endif
#ifndef VR_CUDA_ATTN_FA3_HEAD_INNER_ROWS
#define VR_CUDA_ATTN_FA3_HEAD_INNER_ROWS 4096
#endif
/* Three consumer warpgroups at head_dim 64 (VR_CUDA_FA3_C3) in batches whose longest sequence
 * has this many tokens (vr_cuda_attention_maxlen): ahead of two on every 16k shape timed, behind
 * on packed short sequences of the same rows ("Issue 24: FA3 at head_dim 64"). */
#ifndef VR_CUDA_ATTN_FA3_C3_MIN_LEN
#define VR_CUDA_ATTN_FA3_C3_MIN_LEN 8192
#endif
/* FA3's persistent schedule (VR_CUDA_FA3_PERSIST) in the automatic choice: 1 on (except for
 * batches known to hold a sequence of VR_CUDA_ATTN_FA3_C3_MIN_LEN+ tokens), 0 off. */
#ifndef VR_CUDA_ATTN_FA3_PERSIST
#define VR_CUDA_ATTN_FA3_PERSIST 1
#endif
/* The automatic choice: FA3 for D 64 / 128 in batches of VR_CUDA_ATTN_FA3_MIN_ROWS+ rows where
 * it runs (vr_cuda_attention_fa3_ok: an sm_90a build on a compute 9.0 device); else FA128 for
 * D <= 64 in batches of 4096+ rows (or rows_hint 0), FA64 for smaller batches and D = 128,
 * GENERIC for head dims without a tensor-core kernel. */
vr_cuda_attn_kernel_t vr_cuda_attention_kernel(int D, int rows_hint);
/* "generic", "fa64", "fa128", "fa3" (static strings). */
const char *vr_cuda_attention_kernel_name(vr_cuda_attn_kernel_t k);
/* 1 when kernel k runs head_dim D; vr_cuda_attention supports D iff GENERIC fits it. */
int vr_cuda_attention_kernel_fits(vr_cuda_attn_kernel_t k, int D);
/* Query rows per tile of kernel k at head_dim D (64 or 128; FA3's by its configuration,
 * vr_cuda_attention_fa3_rows: 128, or 192 with three consumers at D 64): q0 of its tile
 * list are multiples of it. VR_CUDA_ATTN_BM (64) is the smallest and divides the others, so
 * counts made with it bound any tile list. */
int vr_cuda_attention_kernel_rows(vr_cuda_attn_kernel_t k, int D);
/* Blocks of kernel k for head_dim D that fit on one multiprocessor at once (occupancy query;
 * >= 1): the backend sizes graph grids with it. */
int vr_cuda_attention_kernel_resident(vr_cuda_attn_kernel_t k, int D);
/* The two above for the automatic choice's kernel. */
int vr_cuda_attention_tile_rows(int D, int rows_hint);
/* The tile rows of vr_cuda_attention_maxlen's choice (max_len 0: vr_cuda_attention_tile_rows). */
int vr_cuda_attention_tile_rows_maxlen(int D, int rows_hint, int max_len);
int vr_cuda_attention_resident_blocks(int D, int rows_hint);
/* The Hopper kernel alone (vr_cuda_attention_fa3.cu; VR_CUDA_ATTN_KERNEL_FA3), for the launchers
 * of vr_cuda_attention.cu and the tests / benchmarks comparing its configurations.
 * _ok: 1 when this build carries its sm_90a code, the current device is compute 9.0 and D is
 * 64 or 128. _resident: blocks per multiprocessor (1). _rows: query rows per tile of the
 * configuration `flags` selects at head_dim D (the tile list's rows). The launch: arguments as
 * vr_cuda_attention_run's plus lse (or NULL); rows > 0: qkv's rows (at most its allocation, at
 * least every sequence's end: the tensor map's extent); flags: 0 (the library's
 * configuration) or an OR of one schedule, VR_CUDA_FA3_NO_PINGPONG (the consumer warpgroups
 * issue their products unordered) or VR_CUDA_FA3_PINGPONG (two consumers take turns), and one
 * shape, VR_CUDA_FA3_C2 (two consumer warpgroups on 128-row tiles) or VR_CUDA_FA3_C3 (three on
 * 192-row tiles, head_dim 64 only, unordered), and VR_CUDA_FA3_HEAD_INNER (the blocks take
 * every head of a tile before the next tile, instead of every tile of a head before the next
 * head), VR_CUDA_FA3_EXP2_POLY (a quarter of the softmax's exp2 as a cubic on the FMA pipe),
 * VR_CUDA_FA3_PERSIST (the persistent schedule: min(grid_tiles H, multiprocessors) blocks, each
 * looping over the (tile, head) items of the meta's N_TILES, heads-inner or outer as above, Q
 * double-buffered so that one item's epilogue overlaps the next one's loads; not with
 * EXP2_POLY). */
#define VR_CUDA_FA3_NO_PINGPONG 1
#define VR_CUDA_FA3_PINGPONG 2
#define VR_CUDA_FA3_C2 4
#define VR_CUDA_FA3_C3 8
#define VR_CUDA_FA3_HEAD_INNER 16
#define VR_CUDA_FA3_EXP2_POLY 32
#define VR_CUDA_FA3_PERSIST 64
int vr_cuda_attention_fa3_ok(int D);
int vr_cuda_attention_fa3_resident(int D);
int vr_cuda_attention_fa3_rows(int D, int flags);
void vr_cuda_attention_fa3(const uint16_t *qkv, int ld, int rows, int q_off, int k_off, int v_off, uint16_t *out,
                           int ld_out, float *lse, const int32_t *cu, const int32_t *tiles, const int32_t *meta,
                           int grid_tiles, int H, int Hkv, int D, int causal, int window, float scale, int flags,
                           cudaStream_t s);

/* Short batches: attention with each 64-row query tile's keys cut into up to 4 ranges of
 * whole 64-key tiles, one block each, combined by the last of them to finish (in range order:
 * deterministic; the same kernel family as FA64, results within rounding of it, not bitwise).
 * Arguments as vr_cuda_attention's, the tile list of 64-row tiles (vr_cuda_attention_tile_rows
 * is 64 for such batches); grid_items: blocks along the item axis (each loops over
 * vr_cuda_attention_split_items(meta[1]) items); part / cnt: device scratch of
 * vr_cuda_attention_split_scratch(H, D, &cnt_bytes) bytes / cnt_bytes, cnt zeroed once before
 * the first launch (every launch leaves it zero). One launch at a time per scratch.
 * _fits: 1 for head_dim 16/32/64/128 and 0 < rows_hint <= 512 (the batches it is for).
 * The backend takes it only with cuda-split-attn on (off by default: 13.6 us against FA64's
 * 9.1 us per roberta-base 1x256 layer, docs/benchmarks.md "Small batches"). */
int vr_cuda_attention_split_fits(int D, int rows_hint);
size_t vr_cuda_attention_split_scratch(int H, int D, size_t *cnt_bytes);
int vr_cuda_attention_split_items(int n_tiles);
int vr_cuda_attention_split_resident(int D);
void vr_cuda_attention_split(const uint16_t *qkv, int ld, int q_off, int k_off, int v_off, uint16_t *out, int ld_out,
                             const int32_t *cu, const int32_t *tiles, const int32_t *meta, int grid_items, int H,
                             int Hkv, int D, int causal, int window, float scale, float *part, int32_t *cnt,
                             cudaStream_t s);

/* ---- score heads: vr_cuda_head.cu ------------------------------------------ */
/* Decoder score: for each sequence i < meta[0], row r = rows[i] of x (T, C) fp32:
 * scores[i] = dot(RMS(x[r]) * norm_w, score_w) (score_w fp32 (C)). */
void vr_cuda_score_decoder(float *scores, const float *x, const int32_t *rows, const int32_t *meta,
                           const float *norm_w, const float *score_w, int C, float eps,
                           int grid, cudaStream_t s);
/* Encoder head: h = tanh(W1 x[r] + b1) (W1 fp32 (C, C)), scores[i] = W2 . h + b2 (W2 (C)).
 * Spread over vr_cuda_score_encoder_blocks(C) blocks of 8 dense rows per sequence (one
 * block per sequence was slow: docs/benchmarks.md); partial: scratch of
 * (sequences) x vr_cuda_score_encoder_blocks(C) floats. Deterministic summation order. */
void vr_cuda_score_encoder(float *scores, const float *x, const int32_t *rows, const int32_t *meta,
                           const float *w1, const float *b1, const float *w2, const float *b2,
                           int C, int grid, float *partial, cudaStream_t s);
int vr_cuda_score_encoder_blocks(int C);

/* ---- GEMM (cuBLASLt): vr_cuda_gemm.cu -------------------------------------- */
typedef struct vr_cuda_gemm vr_cuda_gemm_t;
/* Creates the cuBLASLt handle, a workspace of workspace_bytes on the current
 * device and an empty plan cache. Returns 0 or a negative vr_status_t. */
int vr_cuda_gemm_init(vr_cuda_gemm_t **out, size_t workspace_bytes);
void vr_cuda_gemm_free(vr_cuda_gemm_t *g);
/* D (T, N) = A (T, K) . W (N, K)^T [+ bias (N)] [+ beta * D]; A, W bf16;
 * D fp32 (out_f32 = 1; bias fp32) or bf16 (bias bf16); beta is 0 or 1.
 * bf16 products, fp32 accumulation. The plan (layouts + heuristic algorithm)
 * is cached per (T, N, K, out dtype, bias, beta); a bias epilogue the
 * heuristic rejects falls back to a plain GEMM + vr_cuda_add_bias. */
void vr_cuda_gemm(vr_cuda_gemm_t *g, void *D, int out_f32, const uint16_t *A, const uint16_t *W,
                  const void *bias, int T, int N, int K, float beta, cudaStream_t s);
/* As vr_cuda_gemm, with gelu = 1 or 2: D = gelu(A W^T + bias) in the GEMM's epilogue
 * (cuBLASLt's GELU_BIAS, the tanh form; bf16 D, bf16 bias, beta 0). gelu says which form
 * the model wants (1 erf, 2 tanh) for the fallback when no epilogue algorithm exists. */
void vr_cuda_gemm_ex(vr_cuda_gemm_t *g, void *D, int out_f32, const uint16_t *A, const uint16_t *W,
                     const void *bias, int gelu, int T, int N, int K, float beta, cudaStream_t s);
/* Residual form: D (T, N) = A W^T [+ bias] + C, C (T, N) of D's type (may be D itself;
 * a different C is only read). The encoders' bf16 residual stream: C = the block's input,
 * D = the pre-norm sum. */
void vr_cuda_gemm_res(vr_cuda_gemm_t *g, void *D, int out_f32, const uint16_t *A, const uint16_t *W,
                      const void *bias, const void *C, int T, int N, int K, cudaStream_t s);
/* Operand layout in vr_cuda_gemm_op: as stored (N) or transposed (T). */
typedef enum vr_cuda_op { VR_CUDA_OP_N = 0, VR_CUDA_OP_T = 1 } vr_cuda_op_t;
/* The general form, row-major: D (M, N) = op_a(A) (M, K) . op_b(B) (K, N) [+ bias (N)]
 * [+ beta * C], with gelu as in vr_cuda_gemm_ex (0: none). A is stored (M, K) for op_a N, (K, M)
 * for T; B is stored (K, N) for op_b N, (N, K) for T; C (M, N) of D's type, NULL = D itself.
 * vr_cuda_gemm* are (N, T) with B = W. A training step's other two products are
 * dX (T, C) = dY (T, N) . W (N, C): (N, N), and dW (N, C) = dY^T . X: (T, N) with A = dY
 * (T, N), B = X (T, C), M = N, K = T. Plans are cached per (ops, shape, ...) like the
 * forward's; exact-size mode (vr_cuda_gemm_set_plan_rows) applies to op_a N only. */
void vr_cuda_gemm_op(vr_cuda_gemm_t *g, vr_cuda_op_t op_a, vr_cuda_op_t op_b, void *D, int out_f32,
                     const uint16_t *A, const uint16_t *B, const void *bias, int gelu, const void *C, int M, int N,
                     int K, float beta, cudaStream_t s);
/* Exact-size mode while T > 0: a GEMM of fewer than T rows gets a plan for its exact row
 * count with the heuristic's first algorithm for that size; when there is none, it runs on
 * the plan made for T rows with the layouts' row count set to the call's, or, if
 * cublasLtMatmulAlgoCheck rejects that algorithm at the call's size, on a plan of the call's
 * size with any algorithm. 0 turns it off. */
void vr_cuda_gemm_set_plan_rows(vr_cuda_gemm_t *g, int T);
/* While on, a plan's first call outside stream capture times the heuristic's candidates on
 * the call's buffers and keeps the fastest (runs the GEMM ~4x per candidate; an in-place
 * accumulation, beta 1 with C == D, is copied first and put back, so the call's result is the
 * chosen algorithm's on the original D; without device memory for the copy, no tuning). The
 * choice is kept for the process: a plan of the same key (device, shape, layouts, epilogue, output
 * type, tuning options, workspace) tuned later, in any context, takes it without timing (the same
 * algorithm, so the same bits, in every engine of the process; across processes with a cache file:
 * vr_cuda_gemm_cache_open). Thread-safe (a mutex). */
void vr_cuda_gemm_set_tuning(vr_cuda_gemm_t *g, int on);
/* The process's GEMM-choice cache file (model/vr_gemm_tune.h): loads path's choices into the
 * process's table (the first call only: a later one with another path is warned about and kept
 * out; NULL, "" or "off": nothing), logging at info the file and how many were loaded. A loaded
 * choice is taken by a tuned plan of its key only when its bytes equal one of the plan's heuristic
 * candidates (else a warning, the plan is timed and the file's entry replaced). A file that does
 * not parse is warned about and ignored (rewritten at the next save); one refused for its owner or
 * mode (or unreadable) is warned about and not used. Returns 0 or that vr_status_t; tuning goes on
 * either way. Thread-safe. */
int vr_cuda_gemm_cache_open(const char *path);
/* Writes the choices tuned since the last save into the file (merged under a lock, atomically:
 * vr_gemm_tune_store), logging at info how many were added; nothing to do: 0. A failure is warned
 * about and the file not used again, except the lock held by another process's save
 * (VR_ERR_BUSY after vr_gemm_tune_store's bounded wait), a passing state: the choices stay unsaved
 * and the next save tries again, up to three saves in a row before the file is given up.
 * Thread-safe; file I/O: call it after a warm-up, not per step. */
int vr_cuda_gemm_cache_save(void);
/* Tuning options (default: none). flush (device memory of flush_bytes, owned by the caller, whose
 * contents the tuning overwrites; NULL or 0 bytes: off) is written before every timed run, so the
 * candidates are timed with their operands in HBM rather than in L2: give it about twice the L2
 * size. splitk 1 widens the search of the bucket plans built from now on: twice the heuristic's
 * candidates plus their split-K variants (the exact-size plans keep the heuristic's first choice). */
void vr_cuda_gemm_set_tune_opts(vr_cuda_gemm_t *g, void *flush, size_t flush_bytes, int splitk);
/* on 1: tuning takes only candidates whose output on the tuning call equals the heuristic's first
 * choice's bit for bit (checked on the device: a copy of the output), so tuning changes the speed
 * and never a result; off (0, the default) any candidate. Part of a choice's key. */
void vr_cuda_gemm_set_tune_same_bits(vr_cuda_gemm_t *g, int on);
uint64_t vr_cuda_gemm_plans_tuned(const vr_cuda_gemm_t *g);
/* Plans created so far (heuristic queries), for tests and logs. */
uint64_t vr_cuda_gemm_plans_created(const vr_cuda_gemm_t *g);
/* The tuned (timed) bucket plans of T rows, one line each ("  gemm M= N= K=: candidates, split-K,
 * time"), into buf (n bytes, NUL-terminated, truncated at a line); returns the length the whole
 * report needs. */
size_t vr_cuda_gemm_report(const vr_cuda_gemm_t *g, int T, char *buf, size_t n);
size_t vr_cuda_gemm_workspace_bytes(const vr_cuda_gemm_t *g);

#ifdef __cplusplus
}
#endif
#endif /* VR_CUDA_OPS_H */
