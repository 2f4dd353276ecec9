/* vr_rollout.h: the rollout engine (issue 21): batched generation for causal LMs with a paged KV
 * cache, continuous batching and vLLM-style sampling, behind a backend table (cpu reference here,
 * cuda in trainer/cuda_rollout/).
 *
 * Pieces:
 *   vr_sample.h   the sampling rule (temperature, top-k, top-p as vLLM applies them), the log-prob
 *                 it returns and the counter-based RNG: what every backend's sample() computes.
 *   vr_kvcache.h  the host-side block manager: fixed-size blocks, a free list, reference counts,
 *                 block tables per sequence. It owns no K/V memory: the backend does (the pool of
 *                 num_blocks blocks it allocated at init).
 *   vr_rollout.c  the scheduler: requests (n responses per prompt sharing the prompt's blocks),
 *                 prefill-first continuous batching, preemption by recompute when blocks run out.
 *   vr_rollout_cpu.c  the cpu backend (fp32 on the training backend's ops and model/'s GEMMs).
 *   vr_rollout_lm.h   the engine on a vr_lm_t (the trainer's causal-LM handle);
 *   vr_rollout_sync.h weight updates over the weight-sync group; vr_gencfg.h the EOS ids of a
 *                     checkpoint; vr_generate.h the `verl-trainer generate` command.
 *
 * The backend contract, the engine's API and the weights view follow. Threading: a vr_rollout_t
 * and its backend state are used by one thread at a time. */
#ifndef VR_ROLLOUT_H
#define VR_ROLLOUT_H

#include <stddef.h>
#include <stdint.h>

#include "vr_backend.h" /* vr_model_config_t (model/) */
#include "vr_sample.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- weights ---------------------------------------------------------------------------------
 * A view of a causal LM's parameters as fp32 arrays, PyTorch layouts (linear weights (out, in)).
 * Optional tensors are NULL (biases the config does not have). lm_head == tok_emb when the
 * embeddings are tied. The pointers point into ONE contiguous fp32 buffer (vr_lm's parameter
 * buffer, or a copy with the same layout): set_weights() gets that buffer and this view, so a
 * backend may keep either pointers (cpu: its own copy of the buffer, the view rebased into it) or
 * offsets (pointer - base) into a device copy. */
typedef struct vr_rollout_layer_w {
  const float *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *o_w, *o_b; /* (H*D, C) (H*D) (KV*D, C) ... (C, H*D) */
  const float *norm1_w, *norm2_w;                             /* input / post_attention RMSNorm (C) */
  const float *gate_w, *gate_b, *up_w, *up_b, *down_w, *down_b; /* (F, C) (F) (F, C) (F) (C, F) (C) */
} vr_rollout_layer_w_t;

typedef struct vr_rollout_weights {
  const float *tok_emb;              /* (V, C) */
  const vr_rollout_layer_w_t *layers; /* num_layers entries */
  const float *final_norm_w;         /* (C) */
  const float *lm_head;              /* (V, C); == tok_emb when tied */
} vr_rollout_weights_t;

/* ---- one forward's batch -----------------------------------------------------------------------
 * Sequence s feeds q_len(s) = cu_q[s+1] - cu_q[s] new tokens ids[cu_q[s] .. cu_q[s+1]) at positions
 * ctx_len[s] - q_len(s) .. ctx_len[s] - 1 (position = index in the sequence = RoPE position). The
 * forward writes their K/V into the cache slots of those positions and attends each new token to
 * every earlier position of its sequence (causal; mistral: only the last sliding_window ones), the
 * earlier ones read from the cache. Position p of sequence s lives in block
 * block_tables[s * max_blocks + p / block_size], row p % block_size. Blocks other sequences share
 * (prefix sharing) are only read: the engine never asks a forward to write into a block whose
 * reference count is above 1 (it copies it first, copy_blocks). Decode is q_len = 1 for every
 * sequence; prefill any q_len >= 1 (a prompt, a chunk of one, or a preempted sequence's recompute).
 * All arrays are host memory, valid for the call only. */
typedef struct vr_rollout_batch {
  uint32_t n_seqs;             /* 1 .. opt.max_seqs */
  const int32_t *ids;          /* (T) T = cu_q[n_seqs] <= opt.max_batch_tokens, ids checked < vocab */
  const uint32_t *cu_q;        /* (n_seqs + 1) */
  const uint32_t *ctx_len;     /* (n_seqs) tokens in the cache after this forward, <= max_model_len */
  const int32_t *block_tables; /* (n_seqs, max_blocks) */
  uint32_t max_blocks;         /* row stride of block_tables: ceil(max_model_len / block_size) */
} vr_rollout_batch_t;

/* ---- options ------------------------------------------------------------------------------------ */
typedef struct vr_rollout_options {
  const char *device;        /* "cpu" (NULL), "cuda", "cuda:N" */
  int n_threads;             /* cpu: OpenMP threads, 0 = all */
  const char *cpu_gemm;      /* cpu: "auto" (NULL), "generic", "avx2+fma" (vr_cpu_gemm.h) */
  uint64_t kv_cache_bytes;   /* the K/V pool's budget (all layers, K and V); default 64 MiB. The pool
                              * is allocated once at init: num_blocks = budget / bytes per block */
  uint32_t block_size;       /* tokens per block; default 16 */
  uint32_t max_seqs;         /* sequences per forward (decode batch); default 256 */
  uint32_t max_batch_tokens; /* tokens per prefill forward; default 2048 (longer prompts are chunked) */
  uint32_t max_model_len;    /* longest sequence (prompt + response); 0 = max_position_embeddings */
  /* The one-step-late decode pipeline (backends with decode_launch; vr_rollout.c says how): 1 (the
   * default) while the request has no stop ids (then nothing is ever redone), 2 always (a step at
   * which a response stops costs the launched step after it, redone), -1 never; 0 reads as 1.
   * Outputs are those of -1 bit for bit in every mode. */
  int decode_pipeline;
  /* Backends that tune their GEMMs (cuda: the decode buckets' cuBLASLt candidates timed at warm-up,
   * model/cuda/vr_cuda_gemm.cu). gemm_tune: 1 (the default; 0 reads as 1) times them and keeps each
   * choice in the GEMM-choice cache file, so every later process on the same device and cuBLASLt
   * takes the first one's and a seeded run repeats bit for bit across processes; -1 never times
   * (the heuristic's first algorithm: the same in every process, no file, slower decode).
   * gemm_cache: that file (model/vr_gemm_tune.h says its format and checks), "off" for none (choices
   * kept per process only, as before the file), NULL or "" for the default, which the engine
   * resolves at init (vr_gemm_tune_resolve): $VERL_GEMM_CACHE (a path or off), else
   * ${XDG_CACHE_HOME:-$HOME/.cache}/verl-reward/gemm-tune.json. */
  int gemm_tune;
  const char *gemm_cache;
} vr_rollout_options_t;

void vr_rollout_options_init(vr_rollout_options_t *opt);

/* ---- the backend table ---------------------------------------------------------------------------
 * Designated initializers; an entry marked optional may be NULL. Every entry returns 0 or a
 * negative vr_status_t (and logs why), except free. Calls come from one thread. */
typedef struct vr_rollout_backend {
  const char *name; /* "cpu", "cuda" */
  /* Required. Builds the state for this model: allocates the K/V pool from opt->kv_cache_bytes
   * (*num_blocks blocks of opt->block_size tokens; at least 1, else VR_ERR_NOMEM with a HINT) and
   * every workspace a forward of opt->max_seqs sequences / opt->max_batch_tokens tokens needs,
   * once: nothing is allocated after init except in set_weights' first call. cfg outlives the
   * state (the engine keeps it); opt has its defaults filled and max_model_len resolved. */
  int (*init)(const vr_model_config_t *cfg, const vr_rollout_options_t *opt, int device_index, void **state,
              uint32_t *num_blocks);
  void (*free)(void *state); /* required; NULL is a no-op */
  /* Required. (Re)sets every parameter from params (n_params floats, host memory) and w, a view
   * whose pointers point into params. The first call may allocate the backend's weight storage;
   * later calls must have the same n_params and layout (VR_ERR_INVAL otherwise) and copy into the
   * existing storage. The K/V cache content is stale afterwards (the engine holds no sequences
   * across a weight update). */
  int (*set_weights)(void *state, const float *params, size_t n_params, const vr_rollout_weights_t *w);
  /* Required. Runs one batch (vr_rollout_batch_t) and keeps the logits (fp32, n_seqs rows of vocab:
   * the logits after each sequence's LAST new token) in the state for sample()/logits(). */
  int (*prefill)(void *state, const vr_rollout_batch_t *b);
  /* Optional (NULL: the engine calls prefill with q_len = 1). Same contract with q_len = 1 for every
   * sequence; the fast path (cuda: graphs per batch bucket). */
  int (*decode)(void *state, const vr_rollout_batch_t *b);
  /* Required. For i < n: samples from logits row rows[i].row of the last prefill/decode with
   * rows[i]'s parameters and RNG key, exactly as vr_sample_row() defines (a device implementation
   * must draw the same uniform from vr_sample_uniform(); ties and rounding at the top-p boundary
   * may differ in the last bits on other hardware). Writes tokens[i] and logprobs[i] (host). */
  int (*sample)(void *state, uint32_t n, const vr_sample_req_t *rows, int32_t *tokens, float *logprobs);
  /* Optional (NULL: the engine calls decode, then sample). decode(b) followed by sample(b->n_seqs,
   * rows, tokens, logprobs) with rows[q].row == q, in one call, with the same results (cuda: the
   * sampler is the last kernel of the step's graph, so a step costs one upload, one download and
   * one synchronisation). */
  int (*decode_sample)(void *state, const vr_rollout_batch_t *b, const vr_sample_req_t *rows, int32_t *tokens,
                       float *logprobs);
  /* Optional, both or neither: decode_sample split in two for the one-step-late pipeline.
   * decode_launch(b, rows, feed) starts decode_sample(b, rows) and may return before it completes;
   * feed (n_seqs entries) or NULL: feed[q] >= 0 makes row q's input token the one the previously
   * launched step sampled in its row feed[q] (the backend passes it on by itself: the caller need
   * not have waited for it; an out-of-vocabulary one reads as 0; b->ids[q] is ignored), -1 takes
   * b->ids[q]. decode_wait returns the oldest launched step's n_seqs tokens and log-probs, the values
   * decode_sample gives for its batch with the fed ids in place. At most two steps launched and not
   * waited for; between a launch and its wait the only calls are decode_launch and decode_wait. The
   * backend writes the K/V of a launched step's rows whatever becomes of its results, in launch order
   * before anything called after them. VR_ERR_UNSUPPORTED from a launch with feed NULL and nothing
   * pending: this batch cannot be launched (nothing was started; the caller uses decode_sample); a
   * backend that accepted a batch accepts another with the same n_seqs while it has the same
   * state. */
  int (*decode_launch)(void *state, const vr_rollout_batch_t *b, const vr_sample_req_t *rows, const int32_t *feed);
  int (*decode_wait)(void *state, int32_t *tokens, float *logprobs);
  /* Required. Copies the K/V of block src[i] into block dst[i] for every layer, i < n (copy on
   * write of a shared partial block). src and dst sets are disjoint. */
  int (*copy_blocks)(void *state, const uint32_t *src, const uint32_t *dst, uint32_t n);
  /* Optional: the backend's own parameter storage, n_params floats in the layout
   * set_weights was first given (the view's offsets stay valid), which a weight-sync broadcast may
   * write directly: *on_device 0 = host memory (MPI groups), 1 = device memory (NCCL groups).
   * params_updated() (optional: NULL = nothing to do, as on cpu) must follow such a write (cuda:
   * e.g. refresh bf16 copies). NULL: the engine receives into a host staging buffer and calls
   * set_weights. */
  float *(*param_buffer)(void *state, size_t *n_params, int *on_device);
  int (*params_updated)(void *state);
  /* Optional (device backends): a weight update from device memory on this backend's device. src
   * holds the values of parameters [off, off + len) of the flat layout set_weights was first given
   * (float offsets into that buffer): the colocated actor's whole fp32 parameter buffer (off 0,
   * len n_params), or one chunk of a weight-sync broadcast. The parts of the tensors inside the
   * range are converted straight into the backend's weight storage (cuda: fp32 -> bf16): nothing
   * staged, no second copy. src must be complete when called (the writer's stream synchronised);
   * returns once src may be overwritten. Ranges may come in any order; the weights are those of
   * the new parameters once every float was covered (the caller's duty). VR_ERR_INVAL when
   * off + len > n_params or before the first set_weights. NULL: updates go through the host
   * (set_weights, or param_buffer). */
  int (*set_weights_device)(void *state, const float *src, size_t off, size_t len);
  /* Optional (with set_weights_device): a device scratch the backend already owns (cuda: its
   * upload staging chunk), *n_floats floats, into which a weight-sync broadcast may receive one
   * chunk before handing it to set_weights_device; its content is clobbered by set_weights. */
  float *(*device_chunk)(void *state, size_t *n_floats);
  /* Optional: the logits rows of the last forward, (n_rows, vocab) fp32 into host memory (tests). */
  int (*logits)(void *state, uint32_t n_rows, float *out);
  /* Optional: bytes held (weights, K/V pool, workspaces) and where ("cpu" / "cuda:0"). */
  void (*describe)(void *state, uint64_t *weight_bytes, uint64_t *kv_bytes, uint64_t *work_bytes, char *device,
                   size_t device_n);
} vr_rollout_backend_t;

extern const vr_rollout_backend_t vr_rollout_backend_cpu;
#ifdef VR_HAVE_CUDA_ROLLOUT
extern const vr_rollout_backend_t vr_rollout_backend_cuda; /* trainer/cuda (helper H6) */
#endif

/* ---- the engine --------------------------------------------------------------------------------- */
typedef struct vr_rollout vr_rollout_t;

typedef enum vr_finish { VR_FINISH_STOP = 1 /* EOS or a stop id: included in the output */, VR_FINISH_LENGTH = 2 } vr_finish_t;

typedef struct vr_gen_params {
  vr_sample_params_t sample; /* temperature (0 = greedy), top_k (<= 0 off), top_p (1 off) */
  uint32_t n;                /* responses per prompt, >= 1 */
  uint32_t max_new_tokens;   /* >= 1; a response also ends at max_model_len */
  uint64_t seed;             /* prompt p's key is vr_sample_prompt_key(seed, p) unless seeds is given */
  const uint64_t *seeds;     /* optional (n_prompts): prompt p's RNG key, for batch-independent runs */
  const int32_t *stop_ids;   /* EOS ids (generation_config.json) and stop token ids, n_stop of them */
  uint32_t n_stop;
} vr_gen_params_t;

void vr_gen_params_init(vr_gen_params_t *gp); /* greedy, n 1, 16 new tokens, seed 0, no stops */

/* Responses of one vr_rollout_generate: response r = p * n + j (prompt p, sample j); its tokens are
 * tokens[cu[r] .. cu[r+1]) with logprobs[] alongside (log softmax(logits / T) of the chosen token,
 * T = 1 when greedy: vr_sample.h). Owned by the caller: vr_gen_output_free. */
typedef struct vr_gen_stats {
  uint64_t prefill_tokens, decode_tokens, prefill_calls, decode_calls, preemptions, cow_copies;
  uint64_t decode_ahead;   /* decode steps launched before the previous step's tokens were back (the pipeline) */
  uint64_t decode_dropped; /* such steps dropped after a stop (not in decode_calls) */
  uint32_t peak_running, peak_blocks;
  double prefill_s, decode_s, sample_s, total_s; /* decode_s holds the decode steps' sampling where the
                                                  * backend fuses them (decode_sample) */
} vr_gen_stats_t;

typedef struct vr_gen_output {
  uint32_t n_resp;
  uint32_t *cu;       /* (n_resp + 1) */
  int32_t *tokens;    /* (cu[n_resp]) */
  float *logprobs;    /* (cu[n_resp]) */
  uint8_t *finish;    /* (n_resp) vr_finish_t */
  vr_gen_stats_t stats;
} vr_gen_output_t;

void vr_gen_output_free(vr_gen_output_t *o);

/* Builds an engine for a causal LM: cfg (kept by pointer: must outlive the engine), its parameters
 * (params: n_params floats with w pointing into them; copied into the backend, not kept) and the
 * options (NULL = defaults). Picks the backend from opt->device. 0 or a negative vr_status_t;
 * *out NULL on error. */
int vr_rollout_init(const vr_model_config_t *cfg, const float *params, size_t n_params, const vr_rollout_weights_t *w,
                    const vr_rollout_options_t *opt, vr_rollout_t **out);
void vr_rollout_free(vr_rollout_t *r);

/* Same, with an explicit backend table (tests, and the cuda backend before it is registered). */
int vr_rollout_init_backend(const vr_rollout_backend_t *be, const vr_model_config_t *cfg, const float *params,
                            size_t n_params, const vr_rollout_weights_t *w, const vr_rollout_options_t *opt,
                            vr_rollout_t **out);

/* Generates gp->n responses for each of n_prompts prompts: prompt p is ids[cu[p] .. cu[p+1]).
 * Every prompt is checked first (non-empty, ids < vocab, shorter than max_model_len, and prompt +
 * 1 token fits in the whole cache); a bad one fails the call with VR_ERR_EMPTY_SEQ /
 * VR_ERR_TOKEN_RANGE / VR_ERR_SEQ_TOO_LONG / VR_ERR_TOO_LARGE, naming the prompt, nothing generated.
 * Then every response runs to a stop id, max_new_tokens or max_model_len: when blocks run out,
 * the most recently admitted sequence is preempted (its blocks freed, recomputed later); nothing is
 * dropped. Results do not depend on how the scheduler batched them (cpu: bit-identical; vr_sample.h
 * for the RNG). On success fills *out (caller frees); on error *out is zeroed. */
int vr_rollout_generate(vr_rollout_t *r, const int32_t *ids, const uint32_t *cu, uint32_t n_prompts,
                        const vr_gen_params_t *gp, vr_gen_output_t *out);

/* New parameters (same n_params and layout as at init) copied into the backend's weights; nothing
 * reloaded from disk. *seconds (optional) gets the time taken. */
int vr_rollout_set_weights(vr_rollout_t *r, const float *params, size_t n_params, const vr_rollout_weights_t *w,
                           double *seconds);

/* The same with params in the layout given at init (the engine keeps the view's offsets). */
int vr_rollout_set_params(vr_rollout_t *r, const float *params, size_t n_params, double *seconds);

/* For weight sync (vr_rollout_sync.h): the backend's param_buffer (NULL when it has none; then
 * receive into vr_rollout_staging, a host buffer of vr_rollout_n_params floats the engine keeps, and
 * call vr_rollout_set_params), and params_updated after writing into it. */
float *vr_rollout_param_buffer(vr_rollout_t *r, size_t *n_params, int *on_device);
int vr_rollout_params_updated(vr_rollout_t *r);
float *vr_rollout_staging(vr_rollout_t *r);
size_t vr_rollout_n_params(const vr_rollout_t *r);

/* Device weight updates (the backend's set_weights_device; VR_ERR_UNSUPPORTED without one):
 * src holds parameters [off, off + len) of the init layout in device memory of the engine's
 * device. *seconds (optional) gets the time taken (the call is synchronous). */
int vr_rollout_set_params_device(vr_rollout_t *r, const float *src, size_t off, size_t len, double *seconds);
int vr_rollout_has_device_update(const vr_rollout_t *r); /* 1 when the backend has set_weights_device */
/* vr_rollout_options_t.decode_pipeline for the next generates (tests, benchmarks). */
void vr_rollout_set_decode_pipeline(vr_rollout_t *r, int mode);
/* The backend's device_chunk (NULL when it has none). */
float *vr_rollout_device_chunk(vr_rollout_t *r, size_t *n_floats);

/* The engine's shape after init. */
typedef struct vr_rollout_info {
  const char *backend;
  uint32_t num_blocks, block_size, max_seqs, max_batch_tokens, max_model_len;
  uint64_t kv_bytes_per_block;
} vr_rollout_info_t;
void vr_rollout_get_info(const vr_rollout_t *r, vr_rollout_info_t *info);

/* Bytes of K/V one block holds for this model: 2 (K, V) * layers * block_size * kv_heads * head_dim
 * * bytes_per_value (cpu: 4). The budget rule every backend uses for num_blocks. */
uint64_t vr_rollout_block_bytes(const vr_model_config_t *cfg, uint32_t block_size, uint32_t bytes_per_value);

/* The engine's backend state (tests: logits of the last forward through be->logits). */
void *vr_rollout_backend_state(vr_rollout_t *r);

#ifdef __cplusplus
}
#endif
#endif /* VR_ROLLOUT_H */
