/* vr_cutrain.h: the CUDA training engine for decoder causal LMs (Llama / Mistral / Qwen2 math as
 * vr_lm.h states it): bf16 compute with fp32 master weights, gradients and AdamW moments, all
 * in one contiguous buffer set laid out by the caller's offsets (vr_lm's table for the backend
 * in vr_train_cuda.c; the benchmark's own random-weight layout).
 *
 * Rows, not tokens: a forward over packed sequences gives, for every row r, the log-prob of
 * tgt[r] (the caller's target: the next token, or -1 for none) and the entropy of row r's
 * distribution at a temperature, never holding the (T, V) logits (the LM head runs over
 * chunks of rows). backward(glp, gent) adds d/dparams of sum_r glp[r] logp[r] + gent[r] ent[r]
 * into the gradient buffer (rows with tgt -1 must have glp = gent = 0).
 *
 * Fused GEMMs: when q, k, v (and their biases) are adjacent in the buffer, one qkv GEMM, the
 * same for gate / up; otherwise one GEMM each, copied into the fused activation buffers.
 * Activations of every layer are kept for backward, or with desc.recompute only each layer's
 * input (x, fp32 (T, C)) plus one layer's set: backward runs the layer's forward again (without
 * its down projection) before its backward, with the same kernels (the same activations, bit
 * for bit); it costs about one more forward of the layers. Without recompute a kept forward
 * also stores the LM head's bf16 log-softmax (T_max x vocab, allocated at the first one when
 * the device has room) so that backward need not recompute the logits; with recompute, or
 * without the room, backward recomputes them in fp32 (gradients within bf16 tolerance of
 * each other).
 *
 * Threading: one thread per engine; all work on the engine's stream; calls that return host
 * results synchronise it. Errors: negative vr_status_t, logged; CUDA faults abort
 * (vr_cuda_check.h). */
#ifndef VR_CUTRAIN_H
#define VR_CUTRAIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VR_CUTRAIN_NONE ((size_t)-1) /* an absent tensor's offset */

/* Offsets (floats into the parameter buffer) of one layer's tensors; VR_CUTRAIN_NONE = absent. */
typedef struct vr_cutrain_layer_off {
  size_t q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b;
  size_t gate_w, gate_b, up_w, up_b, down_w, down_b;
  size_t norm1, norm2;
} vr_cutrain_layer_off_t;

typedef struct vr_cutrain_desc {
  int vocab, hidden, layers, heads, kv_heads, head_dim, inter;
  int window; /* sliding window, 0 = full causal */
  float rms_eps, rope_scaling;
  const float *rope_inv_freq;          /* (head_dim / 2), host; copied */
  size_t n_floats;                     /* the buffer, padding included */
  size_t embed, final_norm, lm_head;   /* lm_head VR_CUTRAIN_NONE: tied (the embedding) */
  const vr_cutrain_layer_off_t *layer; /* layers entries; copied */
  size_t score_w, score_b;             /* value head (critic): score (1, C), bias (1); NONE: the LM head */
  int recompute; /* 1: keep each layer's input alone; backward recomputes the layer's activations */
  int attn_bwd;  /* the attention backward's kernel, VR_CUTRAIN_ATTN_BWD_* (vr_cutrain_ops.h); 0: the
                    automatic choice (the others for measurements; VR_ERR_UNSUPPORTED where it cannot run) */
  int lmhead; /* the LM head's forward, VR_CUTRAIN_LMHEAD_*: 0 the automatic choice (FUSED where it runs) */
  int forward_only; /* 1: no gradients, moments or backward scratch; one activation set and two residual
                     * streams shared by every layer; forward with keep = 0 alone (vr_train refuses the rest) */
  int dxn_f32; /* 1: the fused q/k/v and gate/up projections' dX in fp32 into their RMSNorm backward; 0
                * (default): bf16, as autocast's bf16 linear gives it (hidden <= VR_CUTRAIN_NORM_BWD16_MAX_C;
                * the split projections sum their parts in fp32 either way) */
  int mlp; /* the gate/up projection + SwiGLU forward, VR_CUTRAIN_MLP_*: 0 the automatic choice
            * (CUBLAS: FUSED measured no faster on the H200; FUSED for measurements) */
  int optim; /* the optimizer step's schedule, VR_CUTRAIN_OPTIM_*: 0 the automatic choice (OVERLAP) */
} vr_cutrain_desc_t;

/* vr_cutrain_desc_t.lmhead: CUBLAS, cuBLASLt's fp32 logits per chunk then a row kernel; FUSED, one
 * Hopper GEMM with the log-softmax statistics in its epilogue, in its cooperative form (sm_90a
 * builds on compute 9.0, hidden % 64 == 0; asked for elsewhere: VR_ERR_UNSUPPORTED); FUSED_PP and
 * FUSED_PP2, the same GEMM in its ping-pong forms, single blocks and pairs of blocks (the same
 * bits, slower on the H200; for measurements; vr_cutrain_lmhead_fwd). */
enum {
  VR_CUTRAIN_LMHEAD_AUTO = 0,
  VR_CUTRAIN_LMHEAD_CUBLAS = 1,
  VR_CUTRAIN_LMHEAD_FUSED = 2,
  VR_CUTRAIN_LMHEAD_FUSED_PP = 3,
  VR_CUTRAIN_LMHEAD_FUSED_PP2 = 4
};
/* vr_cutrain_desc_t.mlp: CUBLAS, cuBLASLt's (T, 2F) gate/up projection then the SwiGLU kernel; FUSED,
 * one Hopper GEMM with SwiGLU in its epilogue (vr_cutrain_gu_swiglu_fwd: sm_90a builds on compute
 * 9.0, hidden % 64 == 0, intermediate % 128 == 0, gate and up adjacent without biases; asked for
 * elsewhere: VR_ERR_UNSUPPORTED). */
enum { VR_CUTRAIN_MLP_AUTO = 0, VR_CUTRAIN_MLP_CUBLAS = 1, VR_CUTRAIN_MLP_FUSED = 2 };
/* vr_cutrain_desc_t.optim: OVERLAP, adamw_step enqueues the clip's sum of squares and AdamW on a
 * second stream of the engine (the lowest priority, as its main one) and returns; the next forward
 * waits for each layer's update just before it reads that layer (so the update of layer l + 1 runs
 * beside the forward of layer l, and the host stages the batch meanwhile). The input embedding's update (when the shard
 * holds all of it) waits instead for the forward to take the batch's rows, which it computes from
 * the update's inputs with the update's arithmetic (vr_cutrain_adamw_rows), so the forward starts
 * after the clip's sum and layer 0's update alone. Every other call that touches the parameters,
 * gradients or moments waits for the whole update first. SERIAL: the update on the engine's
 * stream, in the call's order (also whenever profiling is on, so that the optimizer phase is
 * timed alone). The same bits either way (test_cuda_train_optim). */
enum { VR_CUTRAIN_OPTIM_AUTO = 0, VR_CUTRAIN_OPTIM_OVERLAP = 1, VR_CUTRAIN_OPTIM_SERIAL = 2 };

typedef struct vr_cutrain vr_cutrain_t;

/* Allocates the engine for batches of at most max_tokens rows on the current CUDA device:
 * parameters (from params, n_floats host floats; NULL: zero), gradients (zero), moments for
 * [shard_lo, shard_hi) (zero), activations. lm_chunk: LM-head rows per chunk (0: as many as
 * fit 1 GiB of fp32 logits). VR_ERR_UNSUPPORTED for shapes it has no kernels for (head_dim
 * > 256 or odd), VR_ERR_OOM when the device is too small (the message says how much). */
int vr_cutrain_create(const vr_cutrain_desc_t *d, const float *params, int max_tokens, int lm_chunk, size_t shard_lo,
                      size_t shard_hi, vr_cutrain_t **out);
void vr_cutrain_free(vr_cutrain_t *e);

/* Forward over a batch (host arrays): ids (T), cu (n_seqs + 1, cu[n_seqs] = T <= max_tokens),
 * tgt (T) targets per row or -1. logp / ent: host (T) outputs or NULL (then the call does not
 * wait for the device). keep = 1 saves what backward needs (one backward per such forward).
 * Value head: logp gets the value of every row (tgt and temperature unused, ent untouched);
 * backward's glp is then dL/dvalue per row and gent is ignored. Inputs are checked by the caller (ids < vocab,
 * positions < the model's limit). */
int vr_cutrain_forward(vr_cutrain_t *e, const int32_t *ids, const uint32_t *cu, int n_seqs, const int32_t *tgt,
                       float temperature, float *logp, float *ent, int keep);
/* glp (T), gent (T or NULL): host. VR_ERR_INVAL when no kept forward is pending. */
int vr_cutrain_backward(vr_cutrain_t *e, const float *glp, const float *gent);
/* The same backward (the same kernels, the same bits) in stages, calling done(ctx, stage) on the
 * calling thread once the stage's gradients are final on the device (its kernels have
 * finished: a reader on any stream or the host sees them): stage = layers for the LM / value
 * head and the final norm (their gradients; a tied head's embedding gradient is not final
 * until the end), then l = layers - 1 .. 0 after layer l (every tensor of the layer), then -1
 * after the embedding, the last call. While it waits for stage k the engine has stage k + 1
 * queued, so the device does not idle; done may start communication on other streams but
 * must not enqueue work on the engine or wait for its stream. done NULL: vr_cutrain_backward. */
int vr_cutrain_backward_cb(vr_cutrain_t *e, const float *glp, const float *gent, void (*done)(void *ctx, int stage),
                           void *ctx);
/* Gradients to zero. Lazily: it zeroes only what no weight GEMM writes (norms, biases, an untied
 * embedding, the value head) and the next backward's weight GEMMs overwrite their gradients
 * instead of adding to them (saving a write of the whole buffer and the GEMMs' reads of it); a
 * read of the gradients before that backward (the calls below, vr_cutrain_grads) zeroes the rest
 * first. */
int vr_cutrain_zero_grad(vr_cutrain_t *e);
/* Sum of squares of grads[lo, hi) (double, deterministic), host result (synchronises). */
int vr_cutrain_grad_sqnorm(vr_cutrain_t *e, size_t lo, size_t hi, double *out);
/* Gradients times s (a clip's factor), lazily: the factor is applied by the next call that reads
 * or accumulates into the gradients, dropped by zero_grad, and taken by an adamw_step with clip 0
 * as its gradients' factor (the bits of the gradients scaled in place first; the gradients read
 * afterwards are the scaled ones), so a clipped step followed by zero_grad makes no pass over them. */
int vr_cutrain_scale_grads(vr_cutrain_t *e, float s);
/* AdamW on the shard with step count step >= 1; clip > 0 also clips by the global norm of the
 * whole gradient buffer on the device (no host round trip; the engine of vr_train.h clips
 * itself and passes 0). Refreshes the bf16 compute copy. */
int vr_cutrain_adamw_step(vr_cutrain_t *e, float lr, float beta1, float beta2, float eps, float weight_decay,
                          float clip, int64_t step);
/* Device buffers (n_floats floats): for all-reduce and broadcasts (grads: final once it returns;
 * after a lazy zero_grad it zeroes the buffer and waits first). */
float *vr_cutrain_params(vr_cutrain_t *e);
float *vr_cutrain_grads(vr_cutrain_t *e);
/* Host copies (n_floats floats; moments: shard_hi - shard_lo each). set_params refreshes the
 * bf16 copy. All synchronise. */
int vr_cutrain_get_params(vr_cutrain_t *e, float *dst);
int vr_cutrain_set_params(vr_cutrain_t *e, const float *src);
/* params[lo, hi) were written in place on the device (a ZeRO-1 broadcast of another rank's
 * shard, completed before the call): refresh their bf16 compute copy. Waits for it. */
int vr_cutrain_params_written(vr_cutrain_t *e, size_t lo, size_t hi);
int vr_cutrain_get_grads(vr_cutrain_t *e, float *dst);
int vr_cutrain_get_moments(vr_cutrain_t *e, float *m, float *v);
int vr_cutrain_set_moments(vr_cutrain_t *e, const float *m, const float *v);
/* Fills params with scale * uniform(-1, 1) (norm weights with 1) from seed: benchmarks. */
int vr_cutrain_randomize(vr_cutrain_t *e, uint64_t seed, float scale);
/* While on (1 or 2), a GEMM plan's first call outside capture times cuBLASLt's candidate
 * algorithms on the call's buffers and keeps the fastest for the process (vr_cuda_gemm_set_tuning;
 * the in-place accumulations, the weight gradients, are copied and put back, so the call's result
 * stands). on 1: only candidates that give the heuristic's first choice's bits on that call
 * (vr_cuda_gemm_set_tune_same_bits), so results never depend on the timing; on 2: any candidate
 * (split-K variants round differently, so two processes may differ in bits); 3: as 1 over a wider
 * search (twice the heuristic's candidates and their split-K variants, for the plans built from
 * then on: vr_cuda_gemm_set_tune_opts); 0: off. */
void vr_cutrain_tune_gemms(vr_cutrain_t *e, int on);
/* Waits for the engine's stream. */
int vr_cutrain_sync(vr_cutrain_t *e);
/* Device bytes the engine allocated. */
size_t vr_cutrain_device_bytes(const vr_cutrain_t *e);

/* Profiling (benchmarks): per-phase device time from cudaEvents recorded on the stream at the
 * phase boundaries of forward / backward / adamw_step (per layer, summed over layers). Spans
 * start after each call's host staging, so host work between calls is not counted.
 * vr_cutrain_profile(e, 1) starts recording (creates the events on first use), 0 stops; both
 * forget what was recorded. vr_cutrain_profile_take synchronises, adds each phase's
 * milliseconds since the last take into ms[VR_CUTRAIN_PH_N] and forgets them; at most 1024
 * boundaries are kept in between (VR_ERR_TOO_LARGE: some were dropped: take more often). */
enum {
  VR_CUTRAIN_PH_EMBED,
  VR_CUTRAIN_PH_FWD_QKV,
  VR_CUTRAIN_PH_FWD_ATTN,
  VR_CUTRAIN_PH_FWD_O,
  VR_CUTRAIN_PH_FWD_MLP,
  VR_CUTRAIN_PH_FWD_HEAD,
  VR_CUTRAIN_PH_BWD_HEAD,
  VR_CUTRAIN_PH_BWD_DOWN,
  VR_CUTRAIN_PH_BWD_GU,
  VR_CUTRAIN_PH_BWD_O,
  VR_CUTRAIN_PH_BWD_ATTN,
  VR_CUTRAIN_PH_BWD_QKV,
  VR_CUTRAIN_PH_BWD_EMBED,
  VR_CUTRAIN_PH_OPTIM,
  VR_CUTRAIN_PH_RECOMPUTE, /* backward's layer forwards (recompute = 1) */
  VR_CUTRAIN_PH_BWD_NORM,  /* every RMSNorm backward (the final norm's too) */
  VR_CUTRAIN_PH_BWD_ELEM,  /* SwiGLU and RoPE backward */
  VR_CUTRAIN_PH_N
};
int vr_cutrain_profile(vr_cutrain_t *e, int on);
int vr_cutrain_profile_take(vr_cutrain_t *e, double *ms);
const char *vr_cutrain_phase_name(int ph);

#ifdef __cplusplus
}
#endif
#endif /* VR_CUTRAIN_H */
