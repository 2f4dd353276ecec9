/* vr_cuda_roll_ops.h: the rollout engine's own kernels (paged KV cache, decode attention,
 * sampling); C linkage, no CUDA types beyond cudaStream_t, so plain C tests drive each one
 * against a host reference. Everything else a decode step needs (GEMMs, RMSNorm, RoPE at
 * per-token positions, SwiGLU, embeddings, prefill attention) is model/cuda/vr_cuda_ops.h's.
 * Same conventions as there: bf16 as uint16_t bit patterns, launchers enqueue on `s`, check
 * the launch, never allocate or synchronise (all capturable into a CUDA graph).
 *
 * Paged KV cache (one pair of arrays per layer), blocks of VR_ROLL_BLOCK tokens:
 *   K (n_blocks, Hkv, D/8, VR_ROLL_BLOCK, 8) bf16: for a fixed 8-element chunk of the head,
 *     the block's tokens are adjacent, so a warp reading one chunk of 16 keys reads 256
 *     contiguous bytes (vLLM's key layout with x = 8);
 *   V (n_blocks, Hkv, VR_ROLL_BLOCK, D) bf16: token rows.
 * A sequence's token at position p lives in block block_table[p / VR_ROLL_BLOCK] at offset
 * p % VR_ROLL_BLOCK; its slot is block * VR_ROLL_BLOCK + offset (vLLM's slot_mapping). Blocks
 * may be shared between sequences (prefix sharing) as long as nobody writes a shared block.
 * D must be a multiple of 8, at most 256. */
#ifndef VR_CUDA_ROLL_OPS_H
#define VR_CUDA_ROLL_OPS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>


#ifdef __cplusplus
extern "C" {
#endif

#define VR_ROLL_BLOCK 16     /* tokens per cache block */
#define VR_ROLL_MAX_PART 512 /* most keys per decode-attention partition */
#define VR_ROLL_SAMPLE_THREADS 1024

/* ---- cache writes: vr_cuda_roll_kv.cu --------------------------------------- */
/* For each row t < T of qkv (T, ld) with slots[t] >= 0: key head hk (columns k_off + hk*D) and
 * value head hk (v_off + hk*D) into the cache at slot slots[t]. Rows with a negative slot
 * (batch padding) are skipped. kc, vc: one layer's K and V arrays (layout above). */
void vr_cuda_roll_kv_append(uint16_t *kc, uint16_t *vc, const uint16_t *qkv, int ld, int k_off, int v_off,
                            const int32_t *slots, int T, int Hkv, int D, cudaStream_t s);

/* As vr_cuda_rope (model/cuda/vr_cuda_ops.h: rotate_half on the q heads at q_off and the k heads
 * at k_off of each row t < T at position pos[t], inv_freq (D/2), times attn_scaling) followed by
 * vr_cuda_roll_kv_append (rotated keys and values at v_off into slot slots[t], negative = skip), in
 * one kernel (one block per row): the decode step's RoPE and cache write. qkv is rotated in place
 * (the prefill's varlen attention reads its keys from there). */
void vr_cuda_roll_rope_append(uint16_t *kc, uint16_t *vc, uint16_t *qkv, int ld, int q_off, int k_off, int v_off,
                              const int32_t *pos, const int32_t *slots, const float *inv_freq, float attn_scaling,
                              int T, int H, int Hkv, int D, cudaStream_t s);

/* ---- decode attention: vr_cuda_roll_attn.cu ---------------------------------- */
/* One query token per sequence b < B against its cached keys 0..lens[b]-1 (the new token's
 * own K/V already appended): out[b, h] = softmax_j(scale * q[b, h] . k_j) v_j, q = row b of
 * qkv (B, ld) at q_off + h*D, key/value head h / (H / Hkv) (GQA), keys j >= lens[b] - window
 * only when window > 0. block_tables (n_tables, max_blocks) int32: row b uses table bt_row[b]
 * (bt_row NULL: table b), so the tokens of a chunked prefill each attend to their sequence's
 * cache up to their own position (lens = position + 1); lens (B), 0 = padding row (its output is
 * zeros). out (B, ld_out): head h at h*D, bf16.
 * Work: one block per (sequence, kv head, group of <= 8 query heads, partition of `part` keys):
 * each K/V head is read once for all the query heads of its group. A sequence whose keys span
 * more than one partition (flash-decoding) leaves per-partition results in the fp32 scratch
 * po (B * H * max_parts, D) and pml (B * H * max_parts, 2) and the combine kernel merges them;
 * a single-partition sequence is written directly. max_parts >= ceil(max lens / part) is the
 * grid's partition axis (blocks past a sequence's end exit at once), so one captured graph
 * serves every length up to max_parts * part. part: a multiple of VR_ROLL_BLOCK in
 * 16..VR_ROLL_MAX_PART. */
/* flags: VR_ROLL_ATTN_MMA = the tensor-core kernel (head_dim a multiple of 16: QK and PV on mma.sync
 * through the shared-memory ring; ignored for other head dims); VR_ROLL_ATTN_RING = the CUDA-core
 * shared-memory ring kernel (cp.async, the cache reads issued before the prologue);
 * VR_ROLL_ATTN_REGS = the earlier kernel that holds its loads in registers (same split and
 * arithmetic order as the ring: the same bits); VR_ROLL_ATTN_OLD_RULE = the choice before the
 * tensor-core kernel (the ring up to 4 query heads per kv head, else the register kernel); none of
 * these (0) = vr_cuda_roll_attn_kernel's rule. VR_ROLL_ATTN_PDL = (the rope form below, the ring and
 * tensor-core kernels) launched as a programmatic dependent of the previous kernel in the stream,
 * which may still run while the block table, the cache and the rope angles are read (only qkv is
 * waited for): so that kernel must not write the cache, the block table, lens, pos, slots or
 * inv_freq (the decode step: it is the qkv GEMM). The kernels differ in their bits (the tensor-core
 * kernel rounds P to bf16 for its product); each is deterministic and the same eager or in a graph. */
#define VR_ROLL_ATTN_REGS 1u
#define VR_ROLL_ATTN_PDL 2u
#define VR_ROLL_ATTN_RING 4u
#define VR_ROLL_ATTN_MMA 8u
#define VR_ROLL_ATTN_OLD_RULE 16u
/* The kernel (VR_ROLL_ATTN_MMA, _RING or _REGS) that flags pick for G query heads per kv head at
 * head_dim D: a forced one, else (0) the tensor-core kernel where D % 16 == 0, else the ring up to 4
 * heads per kv head and the register kernel above. */
unsigned vr_cuda_roll_attn_kernel(int G, int D, unsigned flags);
void vr_cuda_roll_decode_attention(uint16_t *out, int ld_out, const uint16_t *qkv, int ld, int q_off,
                                   const uint16_t *kc, const uint16_t *vc, const int32_t *block_tables,
                                   int max_blocks, const int32_t *bt_row, const int32_t *lens, int B, int H, int Hkv, int D, int window,
                                   float scale, int part, int max_parts, float *po, float *pml, unsigned flags,
                                   cudaStream_t s);
/* The decode step's form: vr_cuda_roll_rope_append (positions pos, slots, inv_freq, attn_scaling;
 * q at q_off, k at k_off, v at v_off of each row of qkv, which stays unrotated) fused into the
 * attention above (one query row per sequence, bt_row NULL, lens[b] = pos[b] + 1): out and the
 * cache get the bits of vr_cuda_roll_rope_append followed by vr_cuda_roll_decode_attention (the new
 * key and value are appended to the cache at slots[b], negative = none, and read from shared
 * memory). */
void vr_cuda_roll_decode_attention_rope(uint16_t *out, int ld_out, const uint16_t *qkv, int ld, int q_off, int k_off,
                                        int v_off, uint16_t *kc, uint16_t *vc, const int32_t *block_tables,
                                        int max_blocks, const int32_t *lens, const int32_t *pos, const int32_t *slots,
                                        const float *inv_freq, float attn_scaling, int B, int H, int Hkv, int D,
                                        int window, float scale, int part, int max_parts, float *po, float *pml,
                                        unsigned flags, cudaStream_t s);
/* Dynamic shared memory of one block of the register kernel (VR_ROLL_ATTN_REGS; bytes) for these
 * sizes (at most ~43 KiB, whatever part: the scores stay in registers). The ring kernel takes more
 * (its rings: 48 KiB at D 64, 64 KiB at 128, 128 KiB at 256, plus ~3% of that) and opts in to it;
 * neither depends on part. */
size_t vr_cuda_roll_attention_smem(int H, int Hkv, int D, int part);
/* The partition length for a batch of B sequences on a device of n_sms multiprocessors: short
 * partitions when B * Hkv blocks would leave the device idle, long ones otherwise (fewer
 * partials to combine); always within the shared-memory bound. */
int vr_cuda_roll_pick_part(int B, int H, int Hkv, int D, int n_sms);
/* The partition length for one decode step whose n sequences have ctx[b] keys each (window > 0: at
 * most window of them count): starting from base (the bucket's vr_cuda_roll_pick_part), doubled
 * while the doubled length, up to VR_ROLL_MAX_PART within the shared-memory bound, still gives
 * Hkv x head chunks x sum_b ceil(keys_b / part) >= 2 * n_sms blocks that do work, i.e. as long as
 * the device stays as full as the bucket rule asks (fewer, longer partitions stream the cache
 * faster and leave fewer partials to combine: docs/benchmarks.md, "length-aware partitions").
 * Returns base << k for some k >= 0; a pure function of its arguments. */
int vr_cuda_roll_pick_part_ctx(int base, int H, int Hkv, int D, int n_sms, const uint32_t *ctx, int n, int window);
/* The SM count the engine gives vr_cuda_roll_pick_part_ctx for the kernel that flags pick
 * (vr_cuda_roll_attn_kernel) on a device of n_sms: a quarter of it (rounded up) for the tensor-core
 * kernel, whose blocks finish so fast that fewer, longer partitions win as long as Hkv x chunks x
 * partitions >= n_sms / 2 blocks do work (measured: qwen2-0.5b 64 x 383 tokens, 128 blocks of 512
 * keys beat 256 of 256 and 384 of 128 plus the combine; docs/benchmarks.md, "tensor-core decode
 * attention"); n_sms itself for the CUDA-core kernels. */
int vr_cuda_roll_part_sms(int G, int D, unsigned flags, int n_sms);

/* ---- decode GEMMs: vr_cuda_roll_gemm.cu ---------------------------------------- */
#define VR_ROLL_GEMM_MAX_M 64
#define VR_ROLL_GEMM_MAX_SPLITS 8 /* a split-K cluster's blocks (the portable cluster size) */
/* One launch configuration: bn output columns per block (64, 128 or 256), K streamed in chunks
 * of kc elements (64, 128, or 256 with bn < 256) per pipeline stage and cut into `splits` ranges of chunks
 * (1..min(VR_ROLL_GEMM_MAX_SPLITS, ceil(K / kc))), pdl 1 = launched with programmatic dependent
 * launch (the weight loads start before the previous kernel in the stream has finished;
 * everything that reads its results waits for it). */
typedef struct vr_cuda_roll_gemm_cfg {
  int bn, kc, splits, pdl;
} vr_cuda_roll_gemm_cfg_t;
/* 1 when this build carries the sm_90a kernel and `device` is compute 9.0 (Hopper). */
int vr_cuda_roll_gemm_available(int device);
/* 1 for the shapes the kernel takes: 1 <= M <= VR_ROLL_GEMM_MAX_M, N >= 1, K >= 8, K % 8 == 0. */
int vr_cuda_roll_gemm_supported(int M, int N, int K);
int vr_cuda_roll_gemm_cfg_ok(int N, int K, vr_cuda_roll_gemm_cfg_t c);
/* The configurations worth timing for (N, K) on n_sms multiprocessors (every bn x kc x splits that
 * is valid, with at most 2 blocks per multiprocessor when splits > 1, at most 8 otherwise), pdl 0:
 * up to max into out;
 * returns how many there are. */
int vr_cuda_roll_gemm_candidates(int N, int K, int n_sms, vr_cuda_roll_gemm_cfg_t *out, int max);
/* The configuration for (N, K) on a device of n_sms multiprocessors by a fixed rule (a model of
 * waves x bytes per block over bn 64 / 128, kc 64; M plays no part), pdl 0: two engines on one
 * device pick the same, so they compute the same bits. Within 0-30% of the best configuration of
 * vr_cuda_roll_gemm_candidates on the measured decode shapes (docs/benchmarks.md). */
vr_cuda_roll_gemm_cfg_t vr_cuda_roll_gemm_pick(int N, int K, int n_sms);
/* D (M, N) = A (M, K) . W (N, K)^T [+ bias (N)] [+ D if beta == 1], the decode step's products at
 * M = the batch bucket: A, W bf16 (16-byte aligned, rows of K contiguous), fp32 accumulation; D
 * fp32 (out_f32 = 1, bias fp32, beta 0 or 1) or bf16 (bias bf16, beta 0). Requires
 * vr_cuda_roll_gemm_available and _supported, and cfg_ok. Deterministic: the bits depend on
 * (K, cfg.kc, cfg.splits) only (each split's partial sum, then the partials added in split order), not on
 * M, the other rows or timing. Not bit-equal to cuBLASLt (another summation order). Encodes two
 * tensor maps on the host per call (they go into the kernel's parameters: graph capture keeps
 * them). */
void vr_cuda_roll_gemm(void *D, int out_f32, const uint16_t *A, const uint16_t *W, const void *bias, int M, int N,
                       int K, float beta, vr_cuda_roll_gemm_cfg_t cfg, cudaStream_t s);
/* res (2 unsigned, device) = max |a - b| and max |b| over n elements (fp32 or bf16), as float bits
 * (a NaN difference reads as above every finite one). */
void vr_cuda_roll_gemm_compare(const void *a, const void *b, int out_f32, size_t n, unsigned *res, cudaStream_t s);

/* ---- sampling: vr_cuda_roll_sample.cu ----------------------------------------- */
/* One row to sample: logits row `row`, trainer/vr_sample.h's parameters, and the uniform u in
 * [0, 1) the host drew with vr_sample_uniform(key, stream, position) (so the device draws exactly
 * the CPU's random number). */
typedef struct vr_cuda_roll_sample_row {
  int32_t row;
  float temperature; /* 0: greedy */
  int32_t top_k;     /* <= 0 or >= V: off */
  float top_p;       /* (0, 1]; 1: off */
  double u;
} vr_cuda_roll_sample_row_t;
/* For each i < n: tokens[i], logprobs[i] = vr_sample_row()'s token and log-prob for logits row
 * rows[i].row of logits (n_rows, V) fp32 (trainer/vr_sample.h's rule: top-k keeps ties, top-p over
 * (value, id) ascending, inverse CDF over the survivors in id order, log-prob of
 * log_softmax(l / T)). A row holding NaN or +Inf, or only -Inf, gets token -1 and a NaN log-prob.
 * One block of VR_ROLL_SAMPLE_THREADS per row. Deterministic: integer histograms (top-p's
 * probability mass in 2^32 fixed point) and fixed-shape reductions, so a row's result does not
 * depend on the batch. The top-p cut is the CPU's integer computation, so the kept set is the
 * CPU's; the token equals the CPU's except where the inverse-CDF step falls within rounding of a
 * boundary (V > VR_ROLL_SAMPLE_THREADS: the CPU sums in double sequentially, the kernel per
 * thread range then across ranges). */
void vr_cuda_roll_sample(int32_t *tokens, float *logprobs, const float *logits, const vr_cuda_roll_sample_row_t *rows,
                         int n, int V, cudaStream_t s);
/* The same with the greedy rows (temperature 0) spread over ceil(V / 8192) blocks each (one block
 * per row leaves most multiprocessors idle at a decode batch), merged by the row's block: the same
 * tokens (ties: the lowest id), log-probs summed in another order (within ~1e-7 of the one-block
 * ones). ws: device scratch of vr_cuda_roll_sample_ws_bytes(n, V) bytes (8-byte aligned); NULL:
 * vr_cuda_roll_sample. Results do not depend on the batch either. */
size_t vr_cuda_roll_sample_ws_bytes(int n, int V);
void vr_cuda_roll_sample_ws(int32_t *tokens, float *logprobs, const float *logits,
                            const vr_cuda_roll_sample_row_t *rows, int n, int V, void *ws, cudaStream_t s);
/* The one-step-late pipeline's input tokens: for q < n with feed[q] >= 0, ids[q] = prev[feed[q]]
 * (the previous step's sampled tokens), 0 when that is outside [0, V) (a row the sampler marked
 * -1); other ids untouched. */
void vr_cuda_roll_feed_ids(int32_t *ids, const int32_t *feed, const int32_t *prev, int n, int V, cudaStream_t s);
/* A decode step's metadata into meta_d, on the device (so that a CUDA graph holds it): rows [0, B) of
 * the four per-row arrays at word offsets seg[0..4) of meta_d (ids, positions, slots, lengths), read
 * at sseg[0..4) of src, the ids of rows whose feed word (at word feed + row of the layout) is >= 0
 * taken from prev as vr_cuda_roll_feed_ids does, then the span words [span0, span0 + span) read from
 * sspan0 (the feed words lie inside the span). src: the pinned host block through its device mapping
 * (sseg = seg, sspan0 = span0) or a device copy of those words packed at B (sseg = 0, B, 2 B, 3 B,
 * sspan0 = 4 B). */
void vr_cuda_roll_stage_decode(int32_t *meta_d, const size_t seg[4], size_t span0, size_t span, size_t feed,
                               const int32_t *src, const size_t sseg[4], size_t sspan0, const int32_t *prev, int B,
                               int V, cudaStream_t s);
/* n words src -> dst by a kernel (dst: pinned host memory through its device mapping). */
void vr_cuda_roll_copy_out(int32_t *dst, const int32_t *src, int n, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif /* VR_CUDA_ROLL_OPS_H */
