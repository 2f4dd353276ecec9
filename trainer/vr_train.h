/* vr_train.h: the training engine (issue 20): per-token log-probs / entropy / values of packed
 * sequences, backward of a caller-given per-token loss gradient, gradient accumulation,
 * global-norm clipping and AdamW, data parallel with ZeRO-1, behind a backend table.
 *
 * The engine is built from a vr_lm_t (vr_lm.h) and copies its parameters; the lm is not used
 * after vr_train_init (get/set params move them back and forth). The loss lives with the
 * caller (the RL algorithms of issue 22): forward gives per-token quantities, the caller
 * computes its loss and hands dL/dlogp (and dL/dentropy) per token back to backward.
 *
 * ---- Packed batches and which tokens count ---------------------------------------------
 * A batch is n_seqs sequences concatenated without padding: sequence q is
 * ids[cu_seqlens[q] .. cu_seqlens[q+1]), T = cu_seqlens[n_seqs]; positions count from each
 * sequence's start. Outputs are per token, indexed like ids:
 *   head LM:    out[t] = log p(ids[t] | ids[start .. t-1]) at the temperature (softmax of
 *               logits / temperature, logits of row t-1), entropy[t] = entropy of that same
 *               distribution. Defined for every token but a sequence's first.
 *   head VALUE: out[t] = score . h[t] + bias, the value of token t's final hidden state (verl's
 *               critic reads the values of response token t at t-1: the caller picks rows).
 * mask (T bytes, or NULL): 1 where the caller wants out[t] (the response tokens); rows with 0 are
 * written as 0 and take no part in backward. mask NULL = every token (head LM: every token but
 * each sequence's first). Head LM: a 1 on a sequence's first token is VR_ERR_INVAL.
 * The LM head never materialises the (T, V) logits: it runs over chunks of tokens and of the
 * vocabulary with an online log-sum-exp (the backward recomputes the chunk's logits).
 *
 * ---- Gradients ------------------------------------------------------------------------------
 * backward(dout, dent) adds to the gradient buffer d/dparams of
 *     sum over masked t of dout[t] * out[t] + dent[t] * entropy[t]
 * for the batch of the last forward with keep = 1 (each such forward allows one backward; any
 * later forward, kept or not, or set_params, discards it).
 * Gradients accumulate over micro-batches until zero_grad. Data parallel: each rank's loss is
 * its share of the global loss (e.g. token-mean: divide by the GLOBAL token count); step()
 * all-reduces (sums) the gradients over the group, so every rank applies the same update
 * (vr_train_backward_last starts that all-reduce during the last micro-batch's backward).
 *
 * ---- Optimizer ------------------------------------------------------------------------------
 * AdamW as torch.optim.AdamW (fp32 moments m, v; step count s starting at 1):
 *   p -= lr * weight_decay * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *   p -= lr / (1 - b1^s) * m / (sqrt(v) / sqrt(1 - b2^s) + eps)
 * applied to every parameter (weight decay included, as torch applies it to all of
 * model.parameters() by default). Clipping (clip > 0): g *= clip / (norm + 1e-6) when
 * norm > clip, norm = global L2 norm over all gradients after the all-reduce
 * (torch.nn.utils.clip_grad_norm_). ZeRO-1: rank r of a group of R keeps moments only for its
 * shard [lo, hi) of the buffer (contiguous, split at VR_LM_ALIGN boundaries), updates that
 * shard, then the shards are broadcast so every rank holds all parameters. Results are equal
 * to a single rank's (same sums in the same order) up to the order of the gradient all-reduce.
 * ZeRO-1 over a comm with reduce_scatter_sum: the gradients are reduce-scattered, so after the
 * step only the shard [lo, hi) (vr_train_shard_range) holds the sums and the rest of the
 * gradient buffer is undefined; the norm is then sqrt of the sum over ranks, in rank order, of
 * each shard's sum of squares (every rank computes the same value).
 *
 * Threading: a vr_train_t is used by one thread. Not thread-safe. */
#ifndef VR_TRAIN_H
#define VR_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "vr_lm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vr_train_batch {
  const int32_t *ids;         /* (T) token ids, each in [0, vocab_size) */
  const uint32_t *cu_seqlens; /* (n_seqs + 1), cu_seqlens[0] = 0, non-decreasing, no empty sequence */
  uint32_t n_seqs;
  const uint8_t *mask;        /* (T) or NULL: which tokens' outputs are wanted (above) */
} vr_train_batch_t;

typedef struct vr_adamw {
  float lr, beta1, beta2, eps, weight_decay;
} vr_adamw_t;

/* Collectives of the data-parallel group (host buffers on cpu groups, device buffers where
 * the backend's buffers live on a device and the group is NCCL). All return 0 or a negative
 * code; a failure ends the step with that code. size 1 (or the whole struct zero) = no DP. */
typedef struct vr_train_comm {
  int rank, size;
  int (*allreduce_sum)(void *ctx, float *buf, size_t n);      /* in place */
  int (*bcast)(void *ctx, void *buf, size_t bytes, int root);
  void *ctx;
  /* Optional (both or neither): a non-blocking in-place sum all-reduce of n <= 2^30 floats.
   * iallreduce_sum starts it and sets *req; wait completes it and releases req (called exactly
   * once per started request, also after a failure elsewhere). test (optional) drives progress
   * without blocking: *done = 1 once complete (the engine still calls wait). When present the
   * engine reduces every gradient bucket with these, overlapped or not, so both paths give the
   * same bits; absent, it calls allreduce_sum per bucket. An NCCL comm starts ncclAllReduce on
   * the stream that orders after the backend's backward work and waits on that stream. */
  int (*iallreduce_sum)(void *ctx, float *buf, size_t n, void **req);
  int (*wait)(void *ctx, void *req);
  int (*test)(void *ctx, void *req, int *done);
  /* Optional, for ZeRO-1: a sum reduce-scatter of buf[0, n) (n <= 2^30) in place: rank r ends
   * with the sums of its piece buf[off[r], off[r+1]) (off: size + 1 non-decreasing entries, 0 ..
   * n, read during the call only); the rest of buf is left undefined. The non-blocking form
   * completes through wait (and test) as iallreduce_sum; it needs wait. When the engine shards
   * (zero1) and reduce_scatter_sum is given, it reduce-scatters every bucket (the non-blocking
   * form when given) instead of all-reducing it: half the traffic; the step then also calls bcast
   * on host doubles (each rank's shard sum of squares, 8 bytes), so a device comm offering these
   * must accept small host buffers in bcast. An NCCL comm can do the reduce-scatter as one
   * ncclReduce per non-empty piece (root = its owner) inside ncclGroupStart/End. */
  int (*reduce_scatter_sum)(void *ctx, float *buf, size_t n, const size_t *off);
  int (*ireduce_scatter_sum)(void *ctx, float *buf, size_t n, const size_t *off, void **req);
} vr_train_comm_t;

typedef struct vr_train_options {
  const char *device;         /* "cpu" (NULL = cpu) or "cuda[:N]" */
  int n_threads;              /* cpu: OpenMP threads, 0 = all */
  const char *cpu_gemm;       /* cpu: NULL/"auto", "generic", "avx2+fma" (vr_cpu_gemm.h) */
  const char *cuda_mlp;       /* cuda: the gate/up projection + SwiGLU forward, NULL/"auto", "cublas",
                               * "fused" (the Hopper GEMM with SwiGLU in its epilogue: sm_90a builds on
                               * compute 9.0 and the shapes vr_cutrain.h names; elsewhere refused)
                               * (vr_cutrain_desc_t.mlp) */
  const char *cuda_gemm_tune; /* cuda: NULL/"off"; "same-bits": each cuBLASLt GEMM shape's first call
                               * times the heuristic's candidates and keeps the fastest of those
                               * that give the untuned bits on that call (results never change;
                               * about a second the first time a batch size is seen, so for fixed
                               * token budgets); "any": the fastest candidate (vr_cutrain_tune_gemms) */
  const char *cuda_optim;     /* cuda: the optimizer step's schedule, NULL/"auto" or "overlap": the
                               * update runs on a second stream beside the next forward, which waits
                               * for each layer's just before it reads it; "serial": on the engine's
                               * stream. The same bits either way (vr_cutrain_desc_t.optim) */
  int recompute;              /* 1: keep only each layer's input; recompute the layer in backward */
  uint32_t max_tokens;        /* largest batch (T) a forward gets; 0 = 8192 */
  size_t vocab_chunk;         /* LM head: vocabulary rows per chunk; 0 = backend default */
  vr_train_comm_t comm;       /* data-parallel group; zero = one rank */
  int zero1;                  /* 1: shard optimizer state over comm (ZeRO-1); 0: every rank holds all */
  size_t bucket_floats;       /* gradient all-reduce bucket (upper bound; buckets end at layer
                               * boundaries, see vr_train_backward_last); 0 = 1<<22 */
  int forward_only;           /* 1: log-probs / values only (the reference policy, `logprobs`): no
                               * gradients, optimizer moments or backward buffers are allocated, one
                               * layer's activations are shared by all layers; forward with keep = 1,
                               * backward, zero_grad, grad_norm, step, the gradient buffer and the
                               * optimizer state are refused (VR_ERR_UNSUPPORTED), and so is a
                               * data-parallel comm (size > 1) */
} vr_train_options_t;

void vr_train_options_init(vr_train_options_t *o);
void vr_adamw_init(vr_adamw_t *h); /* torch defaults: lr 1e-3, betas 0.9/0.999, eps 1e-8, wd 0.01 */

/* ---- backend table (cpu in trainer/cpu/; cuda registers under VR_HAVE_CUDA) ---------------
 * Buffers "params", "grads", "m", "v" are the backend's own (host or device), laid out as
 * vr_lm's table (n_floats floats; m and v only for the shard [shard_lo, shard_hi)); the pad
 * between tensors is kept zero. Entries are required unless marked optional. Every entry
 * returns 0 or a negative vr_status_t and logs what failed. */
typedef struct vr_train_backend_ops {
  const char *name; /* "cpu", "cuda" */
  /* Copies lm's parameters; the moments of [shard_lo, shard_hi) start at zero. */
  int (*init)(const vr_lm_t *lm, const vr_train_options_t *opt, size_t shard_lo, size_t shard_hi, void **state);
  void (*free)(void *state); /* NULL is a no-op */
  /* Checked batch (the engine checks ids, cu_seqlens, mask, T <= max_tokens). out (T) and
   * entropy (T, head LM only, may be NULL) are host arrays. keep: save what backward needs. */
  int (*forward)(void *state, const vr_train_batch_t *b, float temperature, float *out, float *entropy, int keep);
  /* dout (T), dent (T or NULL): host arrays; adds into grads; consumes the kept forward. */
  int (*backward)(void *state, const float *dout, const float *dent);
  int (*zero_grad)(void *state);
  /* The gradient buffer (for the engine's all-reduce through comm; device pointer on cuda),
   * complete when returned (a device backend waits for its queued backward); NULL if that failed. */
  float *(*grads)(void *state);
  /* Sum of squares of grads[lo, hi) in double (deterministic order). */
  int (*grad_sqnorm)(void *state, size_t lo, size_t hi, double *out);
  int (*scale_grads)(void *state, float s);
  /* AdamW on params[shard_lo, shard_hi) with step count step (>= 1). */
  int (*adamw)(void *state, const vr_adamw_t *h, int64_t step);
  /* The parameter buffer (for the engine's ZeRO-1 broadcasts; device pointer on cuda), complete
   * when returned: a device backend first waits for its queued work (the last step's update), so
   * a reader on another stream sees the new values. NULL if that wait failed (logged). */
  float *(*params)(void *state);
  /* Optional: the engine wrote params[lo, hi) in place (ZeRO-1: another rank's updated shard
   * arrived by broadcast, complete on return of bcast); the backend refreshes what it derives
   * from them (cuda: the bf16 compute copy). NULL: nothing to refresh (cpu). */
  int (*params_written)(void *state, size_t lo, size_t hi);
  /* Host copies of the whole params / grads buffer (n_floats floats). */
  int (*get_params)(void *state, float *dst);
  int (*set_params)(void *state, const float *src);
  int (*get_grads)(void *state, float *dst);
  /* Host copies of the shard's moments (shard_hi - shard_lo floats each). */
  int (*get_moments)(void *state, float *m, float *v);
  int (*set_moments)(void *state, const float *m, const float *v);
  /* Optional: backward (same contract) that also calls ready(ctx, lo) each time this backward has
   * made its last addition to grads[lo, n_floats): lo decreases call by call, from the head and
   * final norm (lo = offset of model.norm.weight) through each layer from the last (lo = offset of
   * its first tensor) to the embeddings (lo = 0, the last call). A device backend calls it once
   * the kernels writing those gradients are ordered before the comm's next collective (same
   * stream, or an event the comm waits on). The engine starts the all-reduce of the buckets that
   * became complete, so communication overlaps the rest of the backward. ready must be called
   * from the thread that called backward_ready (it calls the comm), never from worker threads.
   * NULL: the engine runs backward, then reduces every bucket (same results, no overlap). */
  int (*backward_ready)(void *state, const float *dout, const float *dent, void (*ready)(void *ctx, size_t lo),
                        void *ctx);
} vr_train_backend_ops_t;

extern const vr_train_backend_ops_t vr_train_backend_cpu;
/* A device backend is picked in vr_train_init by opt->device's prefix and reads its device index
 * from opt->device ("cuda:N") itself: vr_train_backend_cuda (trainer/cuda/vr_train_cuda.c), in
 * CUDA builds (VR_HAVE_CUDA) only. */
extern const vr_train_backend_ops_t vr_train_backend_cuda;

typedef struct vr_train vr_train_t;

/* Builds the engine for lm on opt->device (NULL opt = defaults). "cuda" is VR_ERR_UNSUPPORTED
 * in a build without CUDA (the message says so). The caller owns *out. */
int vr_train_init(const vr_lm_t *lm, const vr_train_options_t *opt, vr_train_t **out);
void vr_train_free(vr_train_t *t);

/* Forward (see the top): VR_ERR_INVAL for a malformed batch or mask, VR_ERR_TOKEN_RANGE for an
 * id outside the vocabulary, VR_ERR_SEQ_TOO_LONG past max_position_embeddings,
 * VR_ERR_TOO_LARGE when T > max_tokens; the message names the sequence and token. */
int vr_train_forward(vr_train_t *t, const vr_train_batch_t *b, float temperature, float *out, float *entropy,
                     int keep);
/* VR_ERR_INVAL when no forward with keep = 1 is pending, or after vr_train_backward_last until
 * the next step or zero_grad. */
int vr_train_backward(vr_train_t *t, const float *dout, const float *dent);
/* The last micro-batch's backward before vr_train_step: backward, and on a group of size > 1 the
 * gradient all-reduce bucket by bucket as the backward completes them (top layers first; with
 * the comm's iallreduce_sum non-blocking, overlapping the rest of the backward; waited for in
 * step, which then skips its own all-reduce). Buckets: consecutive layers from the top (cut at
 * layer starts, the final norm and 0) of at least bucket_floats floats, split into pieces of at
 * most bucket_floats; the same buckets and collective as step's own all-reduce, so the results
 * are bit-identical to backward + step. Until step or zero_grad the gradients are in flight:
 * zero_grad, get_grads, grad_norm and free wait for them (get_grads then gives the sums);
 * backward / backward_last are VR_ERR_INVAL; forward may run (it does not touch gradients).
 * A failed collective is reported by step (or zero_grad). Size 1: the same as backward. */
int vr_train_backward_last(vr_train_t *t, const float *dout, const float *dent);
int vr_train_zero_grad(vr_train_t *t);
/* One optimizer step: all-reduce the gradients (buckets of bucket_floats), global norm,
 * clipping when clip > 0, AdamW (ZeRO-1: own shard, then broadcasts), step count + 1.
 * *grad_norm (may be NULL) gets the norm before clipping. Gradients are left as reduced
 * (and clipped); call zero_grad before the next accumulation. */
int vr_train_step(vr_train_t *t, const vr_adamw_t *h, float clip, double *grad_norm);
/* The global norm of the current gradients (local ones; the sums after backward_last; with a
 * reduce-scatter, the norm over the whole buffer, which then mixes shard sums and undefined
 * values: use step's grad_norm). */
int vr_train_grad_norm(vr_train_t *t, double *norm);

size_t vr_train_n_floats(const vr_train_t *t); /* = vr_lm_n_floats of the lm */
/* This rank's optimizer shard [*lo, *hi) (the whole buffer without ZeRO-1 or DP). */
void vr_train_shard_range(const vr_train_t *t, size_t *lo, size_t *hi);
int64_t vr_train_step_count(const vr_train_t *t);
/* Host copies of the whole buffer (n = vr_train_n_floats). set_params also updates nothing
 * else (moments and step count stay). To save a checkpoint: get_params into vr_lm_params of
 * the lm and vr_lm_save. */
int vr_train_get_params(vr_train_t *t, float *dst, size_t n);
int vr_train_set_params(vr_train_t *t, const float *src, size_t n);
int vr_train_get_grads(vr_train_t *t, float *dst, size_t n);
/* The engine's own parameter / gradient buffers (vr_train_n_floats floats, the vr_lm layout):
 * host memory on cpu, device memory on a device backend; for a weight-sync broadcast straight
 * from the actor's buffer. Stable for the engine's lifetime; the caller must not write the
 * parameters while a kept forward is pending (backward reads them). The values are those of the
 * last step: vr_train_param_buffer waits for the device's queued update before it returns, so
 * call it again after each step rather than keeping the pointer across steps. NULL when that wait
 * failed. */
float *vr_train_param_buffer(vr_train_t *t);
float *vr_train_grad_buffer(vr_train_t *t);
const char *vr_train_device(const vr_train_t *t); /* the backend's name: "cpu", "cuda" */

/* Optimizer state of this rank's shard: a file "VRAD" (u32 version 2, i64 step, u64 n_floats,
 * u64 lo, u64 hi, then m and v as f32 little endian, in vr_lm's table layout). load checks every
 * field against this engine and names the one that differs; it also reads version 1 (the table's
 * first layout, vr_lm_offsets_v1), moving each tensor's moments to its current offset (refused,
 * saying so, where a moved tensor's moments lie outside the file's ZeRO-1 shard). */
int vr_train_save_optimizer(vr_train_t *t, const char *path);
int vr_train_load_optimizer(vr_train_t *t, const char *path);
/* The same file in two halves, for a write on another thread (async checkpoints): snapshot copies
 * this rank's step count and moments into host memory (the file's bytes; a device backend
 * downloads them), after which t may go on training; write puts the bytes into path.tmp, fsyncs it
 * and renames it to path (path appears complete or not at all). A snapshot does not refer to t and
 * may be written from any thread, one user at a time. save_optimizer = snapshot + write + free.
 * 0 or VR_ERR_NOMEM / VR_ERR_IO / VR_ERR_INVAL (logged). */
typedef struct vr_train_optsnap {
  void *bytes;
  size_t n_bytes;
} vr_train_optsnap_t;
int vr_train_optimizer_snapshot(vr_train_t *t, vr_train_optsnap_t *s);
int vr_train_optimizer_write(const vr_train_optsnap_t *s, const char *path);
void vr_train_optimizer_snap_free(vr_train_optsnap_t *s); /* NULL bytes is fine */

/* Micro-batches of consecutive sequences with at most budget tokens each (a longer sequence
 * gets a micro-batch of its own): writes first sequence indices into starts (n_seqs + 1
 * entries: starts[k] .. starts[k+1]) and returns the number of micro-batches (>= 0). */
uint32_t vr_train_split(const uint32_t *cu_seqlens, uint32_t n_seqs, uint32_t budget, uint32_t *starts);

/* The comm of a cpu group over an MPI communicator: mpi_comm points at an MPI_Comm (kept as a
 * pointer so this header needs no mpi.h), which must outlive c. Sum all-reduce and broadcast
 * through MPI; for tests and cpu groups. In vr_train_mpi.c. The comm over a role group of the
 * trainer's world (vr_comm.h: bounded collectives, NCCL on device groups) is
 * vr_train_comm_group in vr_train_comm.h. */
void vr_train_comm_mpi(vr_train_comm_t *c, void *mpi_comm);

#ifdef __cplusplus
}
#endif
#endif /* VR_TRAIN_H */
