/* vr_cuda_roll_backend.h: the rollout engine's cuda backend (vr_rollout_backend_cuda, the table of
 * trainer/vr_rollout.h) and the entries it has beyond the table.
 *
 * State per model: bf16 weights on the device (q/k/v fused into one (Nqkv, C) matrix, gate/up
 * into one (2F, C); norms and the o/down biases fp32; the LM head shares the embedding when
 * tied), the paged K/V pool (vr_cuda_roll_ops.h's layout, bf16, opt->block_size must be
 * VR_ROLL_BLOCK), workspaces for max(max_seqs, max_batch_tokens) rows, pinned staging. All of it
 * is allocated in init; set_weights and the forwards allocate nothing (graphs are instantiated on
 * a bucket's first decode).
 *
 * decode: one step for n sequences runs as the CUDA graph of its batch bucket (powers of two up
 * to max_seqs, and max_seqs): embeddings -> per layer QKV GEMM (M = bucket), paged decode
 * attention with the RoPE at each sequence's position and the K/V append fused in, O GEMM +
 * residual, RMSNorm, gate/up
 * GEMM, SwiGLU, down GEMM + residual -> final RMSNorm -> LM head (fp32 logits). The batch's
 * ids, positions, slots, lengths and block tables go into one pinned block copied to fixed
 * device addresses before the replay; padding rows have length 0 and slot -1. A bucket's first
 * step runs eagerly (building its GEMM plans) and captures the graph for the next ones; a bucket
 * has one graph per attention partition length, picked per step from the live contexts
 * (vr_cuda_roll_set_part).
 * prefill: eager at the exact size; fresh prompts (ctx_len == q_len for every sequence) use
 * model/cuda's varlen attention over the packed prompts, other batches (chunks after cached
 * context, recomputes) the paged attention with one row per new token; the LM head runs on each
 * sequence's last new token only.
 * sample: trainer/vr_sample.h's rule on the device (vr_cuda_roll_sample_ws: greedy rows over several
 * blocks unless vr_cuda_roll_split_sample(st, 0)), the uniforms drawn on
 * the host with vr_sample_uniform; decode_sample: a decode step whose graph ends with that sampler
 * (its rows in the metadata block, tokens and log-probs back in one copy); decode_launch /
 * decode_wait: the same split for the scheduler's one-step-late pipeline (two host metadata blocks
 * and two pinned result slots in turn; a fed row's input id copied on the device from the previous
 * step's sampler output before the replay).
 *
 * Threading: one thread at a time per state (the engine's). */
#ifndef VR_CUDA_ROLL_BACKEND_H
#define VR_CUDA_ROLL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "vr_rollout.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const vr_rollout_backend_t vr_rollout_backend_cuda;

/* Weight update from a device buffer (the actor on the same GPU, or what an NCCL broadcast
 * received): dparams holds n_params fp32 values on this state's device with the layout of the
 * host buffer host_base that the view w points into (offsets w->x - host_base). Each tensor is
 * converted to bf16 straight into the existing weight storage: no staging, no second copy. The
 * first set_weights (host) call must have happened (it fixes n_params and the layout).
 * *seconds (may be NULL) gets the device time of the update (CUDA events). 0 or VR_ERR_INVAL.
 * The table's set_weights_device entry is the same conversion without a view, for any range of the
 * layout the first set_weights fixed (kept as offsets): vr_rollout_set_params_device, and the
 * weight sync's chunks (received into device_chunk, the first 32 MiB staging buffer). */
int vr_cuda_roll_set_weights_device(void *state, const float *dparams, size_t n_params, const float *host_base,
                                    const vr_rollout_weights_t *w, double *seconds);

/* Tests: 0 runs every decode eagerly (no graphs), 1 (the default) replays the buckets' graphs. */
void vr_cuda_roll_use_graphs(void *state, int on);

/* Which decode GEMMs (M <= VR_ROLL_GEMM_MAX_M) run on our Hopper kernel (vr_cuda_roll_gemm,
 * vr_cuda_roll_ops.h) instead of cuBLASLt, where the device runs it (compute 9.0, an sm_90a build)
 * and the shape fits; a bit mask:
 *   LAYERS: the layers' GEMMs (qkv, o + residual, gate/up, down + residual), configuration by rule;
 *   HEAD:   the LM head likewise;
 *   TIMED:  instead of always, per shape where it beats cuBLASLt by 3% at the bucket's warm-up
 *           (both timed from HBM when the flush buffer exists; benchmarks only: two engines may
 *           choose differently, so round differently);
 *   PDL:    launched with programmatic dependent launch (the weight loads overlap the previous
 *           kernel's tail).
 * Default: VR_CUDA_ROLL_DGEMM_DEFAULT, 0 = cuBLASLt everywhere: ours measured 5-34% slower than
 * cuBLASLt (in its best configuration) on every decode GEMM of the Llama-3.2-1B and Qwen2-0.5B shapes at M = 64, and the step
 * slower with it (docs/benchmarks.md, "A Hopper decode GEMM of our own"). Captured graphs keep
 * their kernels: call it before the first generate. */
#define VR_CUDA_ROLL_DGEMM_LAYERS 1u
#define VR_CUDA_ROLL_DGEMM_HEAD 2u
#define VR_CUDA_ROLL_DGEMM_TIMED 4u
#define VR_CUDA_ROLL_DGEMM_PDL 8u
#define VR_CUDA_ROLL_DGEMM_DEFAULT 0u
void vr_cuda_roll_use_dgemm(void *state, unsigned flags);
/* Benchmarks: 1 (the default) ends each decode step's graph with the sampler (the table's
 * decode_sample: one upload, one download, one synchronisation per step); 0 samples after the graph
 * as sample() does (three copies and a kernel outside it). Same results. Fixed per bucket at its
 * first step: call it before the first generate. */
void vr_cuda_roll_fuse_sample(void *state, int on);

/* Benchmarks: where a sampling decode step's metadata upload, id feed and result download run.
 * 2 (the default): the upload (the words the step reads, the per-row arrays packed at the bucket's
 * width) is issued at launch on a copy stream into a device copy of the host block (one per block),
 * overlapping the step still running; the main stream waits for it before the graph, whose first
 * kernel stages the metadata from that device copy (and feeds the fed rows' ids) and whose last
 * writes the tokens and log-probs into the pinned result slot through its device mapping.
 * 1: the same graph with its first kernel reading the pinned host block itself through its device
 * mapping (PCIe reads inside the step; no copy). Both: one graph launch per step, two graphs per
 * partition class (one per host block). 0: the upload, the feed kernel and the download as stream
 * operations around the graph. Same results. Without mapped pinned memory 0; fixed per bucket at
 * its first step: call it before the first generate. */
void vr_cuda_roll_graph_io(void *state, int form);

/* Benchmarks: 1 records events around every launched decode step (decode_launch) from now on and
 * clears the sums; vr_cuda_roll_step_times then gives the means over the waited steps: ms[0] the
 * device period (a step's first stream operation to the next step's, consecutive steps only),
 * ms[1] a step's stream operations (first to last), ms[2] its graph (or eager kernels) alone.
 * VR_ERR_INVAL when no step (or no consecutive pair) was timed. */
void vr_cuda_roll_time_steps(void *state, int on);
int vr_cuda_roll_step_times(void *state, double ms[3]);
/* Benchmarks: 1 (the default) spreads each greedy row of the sampler over several blocks
 * (vr_cuda_roll_sample_ws: the same tokens, log-probs summed in another order); 0 one block per
 * row. Fixed in a bucket's graph at its capture: call it before the first generate. */
void vr_cuda_roll_split_sample(void *state, int on);
/* Benchmarks: how a decode bucket's warm-up times the cuBLASLt candidates of its GEMMs (both 1 by
 * default): cold 1 overwrites a flush buffer (the gate/up output rows past max_seqs, when they
 * span the L2; else it times hot) before every timed run, so the weights come from HBM as in a
 * step; splitk 1 widens the search (twice the heuristic's candidates and their split-K variants:
 * vr_cuda_gemm_set_tune_opts). The timed choice is made once per key in the process and shared by
 * every later engine (vr_cuda_gemm_set_tuning), and with later processes through the GEMM-choice
 * cache file (opt.gemm_tune / gemm_cache, vr_rollout.h), so two engines over the same weights run the same
 * algorithms (split-K variants round differently: without the sharing, test_cuda_rollout's
 * fresh-vs-updated engine check failed once, docs/benchmarks.md). Before the first generate
 * (plans keep their candidates). */
void vr_cuda_roll_set_tuning(void *state, int cold, int splitk);
/* Benchmarks: the decode step's attention kernel (vr_cuda_roll_ops.h's VR_ROLL_ATTN_*): kernel 0 the
 * register kernel, 1 the CUDA-core ring kernel, 2 the tensor-core kernel, 3 the rule before it (ring
 * or register kernel by group size), -1 (the default) vr_cuda_roll_attn_kernel's rule; pdl 1 launches
 * the ring or tensor-core kernel as a programmatic dependent of the qkv GEMM (default 0: measured no
 * faster). Fixed in a bucket's graph at its capture: call it before the first generate. */
void vr_cuda_roll_set_attn(void *state, int kernel, int pdl);
/* Benchmarks: the decode attention alone (the rope form, layer 0's cache, kernel flags `flags` less
 * PDL) of the last decode bucket holding n rows on the last decode's metadata, at partition length
 * part (0: the one of that bucket's last step), reps times back to back after 2 untimed: *ms = the
 * mean. Overwrites layer 0's cache slots of that step: only after the generation. 0 or VR_ERR_INVAL
 * (no such warm bucket, a bad part, or partials that would not fit the scratch). */
int vr_cuda_roll_time_attention(void *state, uint32_t n, int reps, unsigned flags, int part, double *ms);
/* The decode attention's partition length (keys per block). part 0 (the default): per step from the
 * live contexts: the bucket's length (vr_cuda_roll_pick_part of its rows) doubled while the step's
 * contexts still fill the device (vr_cuda_roll_pick_part_ctx, given vr_cuda_roll_part_sms of the
 * device's SMs: with the tensor-core kernel half as many working blocks as SMs count as full), each
 * length with its own graph per
 * bucket (at most VR_CUDA_ROLL_PART_LENGTHS, captured at their first step); -1: the bucket's length
 * only (the rule before the length-aware choice); > 0 (benchmarks): that length for every step (a
 * multiple of 16 in 16..512). Before the first generate only: VR_ERR_INVAL once a bucket ran, for a
 * bad length, or when the partials would not fit the scratch sized at init.
 * Bits: a sequence's step depends on the partition length (the partials merge in another order),
 * which is a function of the step's bucket and of the live context lengths of its batch, both
 * fixed by the inputs and the schedule: reruns reproduce bit for bit and graph replay equals eager
 * bit for bit; the same sequence in another batch may differ in the last bits (as across buckets
 * before), within the cuda-vs-cpu tolerance of the tests. */
#define VR_CUDA_ROLL_PART_LENGTHS 6 /* 16, 32, ..., 512 */
int vr_cuda_roll_set_part(void *state, int part);
/* Tests: the SM count behind the length-aware rule (0: the device's; the rule is given
 * vr_cuda_roll_part_sms of it, a quarter with the tensor-core kernel), so small batches switch
 * partition lengths; before the first generate (captured graphs keep theirs). */
void vr_cuda_roll_set_part_rule(void *state, int n_sms);
/* The decode steps since init per partition length: steps[i] ran at 16 << i keys (a fixed length
 * that is not a power of two counts at the next one). */
void vr_cuda_roll_part_steps(void *state, uint64_t steps[VR_CUDA_ROLL_PART_LENGTHS]);
/* The decode GEMM choices so far, one line each ("M= N= K=: cuBLASLt x us, ours y us (bn, kc,
 * splits) -> ..."), then cuBLASLt's timed choices of each warm bucket: vr_cuda_gemm_report),
 * into buf (n bytes, NUL-terminated, truncated); returns the length the whole report needs. */
size_t vr_cuda_roll_gemm_report(void *state, char *buf, size_t n);

/* Benchmarks: the last decode bucket holding n rows (warm, graph captured), replayed on the last
 * decode's metadata: ms[0] the step eagerly, ms[1..4] eagerly without (1) the decode attention (with
 * the RoPE and K/V append fused into it), (2) the layers' GEMMs, (3) the small kernels (norms,
 * SwiGLU, embeddings), (4) the LM head (and the sampler where the step ends with it); ms[5] the
 * graph replay; each the mean of reps. Overwrites the cache slots of that step
 * with garbage: only after the generation. 0 or VR_ERR_INVAL (no such bucket yet). */
int vr_cuda_roll_profile_decode(void *state, uint32_t n, int reps, double ms[6]);

/* Device time (ms, CUDA events) of the last decode() call's forward, for benchmarks. */
double vr_cuda_roll_last_decode_ms(void *state);

#ifdef __cplusplus
}
#endif
#endif /* VR_CUDA_ROLL_BACKEND_H */
