/* vr_model.h: the reward-model runtime (public to the server and tools; not to trainers).
 *
 * vr_model_load() reads a Hugging Face model directory (config.json plus
 * model.safetensors or a sharded model.safetensors.index.json), mmaps the
 * weights and builds a backend ("cpu" reference or "cuda"). vr_model_score()
 * scores a packed batch: concatenated token ids + cu_seqlens, no padding.
 *
 * Threading: a vr_model_t is used by one thread at a time (the server's
 * batcher); vr_model_info() may be read from any thread after load. */
#ifndef VR_MODEL_H
#define VR_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vr_model vr_model_t;

/* ---- CUDA backend tuning (the cpu backend ignores it) ------------------------------------
 * The defaults (vr_model_options_init) are the measured best on an H200 (docs/benchmarks.md);
 * what each switch trades is in docs/operations.md. */
typedef enum vr_cuda_autotune {
  VR_CUDA_AUTOTUNE_OFF = 0,   /* every GEMM on the cuBLASLt heuristic's first algorithm */
  VR_CUDA_AUTOTUNE_SMALL = 1, /* warm-up times the heuristic's candidates for buckets of <= 4096 rows */
  VR_CUDA_AUTOTUNE_ALL = 2,   /* ... for every bucket (slower load) */
} vr_cuda_autotune_t;

typedef enum vr_cuda_residual {
  VR_CUDA_RESIDUAL_AUTO = 0, /* encoders at least 256 wide: bf16; narrower encoders and decoders: f32 */
  VR_CUDA_RESIDUAL_F32 = 1,  /* fp32 residual stream */
  VR_CUDA_RESIDUAL_BF16 = 2, /* encoders: bf16 residual stream (decoders keep fp32) */
} vr_cuda_residual_t;

typedef struct vr_cuda_options {
  int graphs;     /* 1: a batch is padded to a token bucket and replays that bucket's CUDA graph;
                   * 0: every batch runs eagerly at its exact size, nothing warmed up at load */
  int warmup;     /* with graphs: every bucket is run and captured at load (1) or on first use (0) */
  int exact_size; /* with graphs: a batch smaller than a large bucket runs eagerly at its exact
                   * size (1) instead of replaying the padded graph (0) */
  vr_cuda_autotune_t autotune;
  vr_cuda_residual_t residual;
  int pdl;        /* 1: the backend's own kernels use programmatic dependent launch (each may start
                   * while the previous kernel drains; process-wide, vr_cuda_set_launch_pdl); 0: plain */
  int split_attn; /* 1: batches of <= 512 rows run attention split over key ranges (more blocks
                   * for short sequences); 0 (default): the FA64 kernel, one block per query tile */
} vr_cuda_options_t;

typedef struct vr_model_options {
  const char *device;        /* "cpu", "cuda", "cuda:N"; NULL = "cpu" */
  int n_threads;             /* cpu: OpenBLAS + loop threads; 0 = all cores */
  uint32_t max_batch_tokens; /* largest packed batch a forward gets (sizes workspaces); 0 = 16384 */
  uint32_t max_seqs;         /* largest number of sequences per forward; 0 = max_batch_tokens */
  const char *dtype;         /* compute dtype: NULL/"auto" (cpu: f32, cuda: bf16), "f32", "bf16" */
  vr_cuda_options_t cuda;    /* device "cuda[:N]" only */
  const char *cpu_gemm;      /* device "cpu": the GEMM variant, NULL/"auto" (avx2+fma where the CPU has
                              * it, else generic), "generic" (the same bits on every CPU), "avx2+fma" */
} vr_model_options_t;

/* Fills every field with its default, the CUDA tuning included (the one place defaults live). */
void vr_model_options_init(vr_model_options_t *opt);

/* The CUDA tuning's one text form, shared by every front end (the server's flags and config
 * file, verl-reward-score, the bench runner). Each option is a flag name without the dashes
 * ('_' and '-' alike) and a value:
 *   cuda-graphs on|off, cuda-warmup on|off, cuda-exact-size on|off,
 *   cuda-autotune off|small|all, cuda-residual auto|f32|bf16, cuda-pdl on|off,
 *   cuda-split-attn on|off.
 * vr_cuda_options_set: 0; VR_ERR_NOT_FOUND when name is not a CUDA option (err untouched);
 * VR_ERR_INVAL for a bad value, err (may be NULL) then names the flag and the value.
 * vr_cuda_options_get: the current value's text into buf (0, or VR_ERR_NOT_FOUND).
 * vr_cuda_options_check: 0, or VR_ERR_INVAL with err naming the first field out of range
 * (for options filled in code rather than parsed).
 * vr_cuda_options_format: every option as "name=value" separated by spaces, in table order.
 * vr_cuda_option_at(i): the i-th option's name, its values ("on|off") and a one-line help
 * text (static strings), for --help; NULL past the last one. All thread-safe. */
typedef struct vr_cuda_option_info {
  const char *name, *values, *help;
} vr_cuda_option_info_t;
int vr_cuda_options_set(vr_cuda_options_t *o, const char *name, const char *value, char *err, size_t errlen);
int vr_cuda_options_get(const vr_cuda_options_t *o, const char *name, char *buf, size_t n);
int vr_cuda_options_check(const vr_cuda_options_t *o, char *err, size_t errlen);
void vr_cuda_options_format(const vr_cuda_options_t *o, char *buf, size_t n);
const vr_cuda_option_info_t *vr_cuda_option_at(size_t i);

typedef struct vr_model_info {
  char architecture[64];  /* as in config.json, e.g. "LlamaForSequenceClassification" */
  char model_type[32];    /* "bert", "roberta", "llama", ... */
  int is_decoder;         /* 1: score at the last token; 0: encoder, score from [CLS]/<s> */
  int vocab_size, hidden_size, num_layers, num_heads, num_kv_heads, head_dim, intermediate_size;
  int max_positions;      /* longest sequence the model accepts (after any position offset) */
  int num_labels;
  char weights_dtype[8];  /* dtype of the files: "f32", "f16", "bf16" (mixed: the first seen) */
  char compute_dtype[8];  /* "f32" or "bf16" */
  char device[16];        /* "cpu" or "cuda:N" */
  char device_name[64];   /* e.g. "NVIDIA H200" or "cpu (8 threads)" */
  uint64_t param_count;
  uint64_t host_bytes;    /* host memory the backend holds beyond the mmapped files */
  uint64_t device_bytes;  /* device memory held (weights + workspace); 0 on cpu */
} vr_model_info_t;

/* Loads a model directory. On error returns a negative vr_status_t, logs the
 * file / tensor / field and the problem, and leaves *out NULL. The caller owns
 * the model and frees it with vr_model_free(). */
int vr_model_load(const char *dir, const vr_model_options_t *opt, vr_model_t **out);
void vr_model_free(vr_model_t *m);

/* Never NULL for a loaded model; valid until vr_model_free(). */
const vr_model_info_t *vr_model_info(const vr_model_t *m);

/* Checks one sequence against the model's limits without running it:
 * VR_ERR_EMPTY_SEQ, VR_ERR_SEQ_TOO_LONG, VR_ERR_TOKEN_RANGE or 0. Thread-safe. */
int vr_model_check_seq(const vr_model_t *m, const int32_t *ids, uint32_t len);

/* Scores n_seqs sequences: sequence i is ids[cu_seqlens[i] .. cu_seqlens[i+1]).
 * cu_seqlens has n_seqs + 1 entries, cu_seqlens[0] = 0. Every sequence is
 * checked first (vr_model_check_seq); seq_status[i] (optional, n_seqs entries)
 * gets 0 or the sequence's error, and scores[i] is NaN for a bad sequence; the
 * good ones are still scored. A sequence whose score came out NaN or Inf gets
 * VR_ERR_NONFINITE (and NaN): scores[i] is finite whenever seq_status[i] is 0.
 * Batches larger than max_batch_tokens are split. Returns 0 when the forward ran (even if some sequences were rejected), or a
 * negative vr_status_t when nothing could be scored (bad arguments, device error). */
int vr_model_score(vr_model_t *m, const int32_t *ids, const uint32_t *cu_seqlens,
                   uint32_t n_seqs, float *scores, int32_t *seq_status);

/* The model's trunk without its head: hidden states (T, C) fp32, T = cu_seqlens[n_seqs], C =
 * hidden_size, of a packed batch (decoders: after the final norm, as transformers'
 * last_hidden_state; encoders: the last encoder layer's output). Every sequence must pass
 * vr_model_check_seq and T must be at most max_batch_tokens (else VR_ERR_TOKEN_RANGE and friends,
 * VR_ERR_TOO_LARGE; nothing written). Not while pipelined batches are outstanding (VR_ERR_BUSY).
 * Returns 0 or a negative vr_status_t. */
int vr_model_hidden(vr_model_t *m, const int32_t *ids, const uint32_t *cu_seqlens, uint32_t n_seqs,
                    float *hidden);

/* Pipelined scoring for the server's batcher. vr_model_submit() checks and launches one batch
 * (total tokens <= max_batch_tokens, n_seqs <= max_seqs; returns VR_ERR_TOO_LARGE otherwise) and
 * returns without waiting for the result: ids/cu_seqlens are copied before return (caller may reuse
 * them); scores/seq_status must stay valid until the matching vr_model_collect(). At most
 * vr_model_max_inflight(m) batches (2 on cuda, 1 on cpu) may be outstanding; collect() waits for the
 * OLDEST outstanding batch, writes its scores/seq_status and returns its status (0 or the device
 * error). Backends without async support run the forward inside submit. Same thread as other calls.
 *
 * Details: every sequence is checked as in vr_model_score (a bad one gets NaN and its
 * seq_status at collect; the good ones are still scored); a batch with no good sequence (or
 * n_seqs == 0) is still one outstanding batch. submit returns VR_ERR_BUSY when max_inflight
 * batches are outstanding, VR_ERR_INVAL for bad arguments (nothing outstanding then), or the
 * device error when the launch failed (nothing outstanding; scores NaN, seq_status the error).
 * collect returns VR_ERR_INVAL when nothing is outstanding. vr_model_score() may not be called
 * while batches are outstanding (it returns VR_ERR_BUSY); vr_model_free() drains them. */
int vr_model_submit(vr_model_t *m, const int32_t *ids, const uint32_t *cu_seqlens, uint32_t n_seqs,
                    float *scores, int32_t *seq_status);
int vr_model_collect(vr_model_t *m);
int vr_model_max_inflight(const vr_model_t *m);

/* Names of the backends compiled in, e.g. "cpu,cuda". Static string. */
const char *vr_model_backends(void);

/* ---- command-line values, checked before anything loads (every front end calls these) -------
 * Each writes the canonical spelling into out (n bytes) and returns 0, or VR_ERR_INVAL /
 * VR_ERR_UNSUPPORTED with err naming the value and a HINT. All thread-safe, no device touched.
 * vr_model_device_parse: "cpu", "cuda", "cuda:N" (N in 0..1023; "cuda:0" as PyTorch writes it);
 *   "gpu" and the like are refused; "cuda" is VR_ERR_UNSUPPORTED in a build without the CUDA backend.
 * vr_model_dtype_parse: "auto"; "f32", "float32", "fp32" -> "f32"; "bf16", "bfloat16" -> "bf16"
 *   (a "torch." prefix is accepted); "f16"/"float16"/"half" are VR_ERR_UNSUPPORTED (no backend
 *   computes in f16).
 * vr_model_device_dtype_check: the pair (canonical; device "" = auto): the cpu backend computes in
 *   f32 only, the cuda backend in bf16 only.
 * vr_model_cpu_gemm_parse: "auto", "generic", "avx2+fma" (not a check of this CPU: the load does that). */
int vr_model_device_parse(const char *text, char *out, size_t n, char *err, size_t errlen);
int vr_model_dtype_parse(const char *text, char *out, size_t n, char *err, size_t errlen);
int vr_model_device_dtype_check(const char *device, const char *dtype, char *err, size_t errlen);
int vr_model_cpu_gemm_parse(const char *text, char *err, size_t errlen);
/* A model directory as vr_model_load wants it, checked without reading the weights: a directory
 * with a readable config.json. 0, or VR_ERR_NOT_FOUND with err naming the path and a HINT. */
int vr_model_dir_check(const char *dir, char *err, size_t errlen);

/* Accelerator runtime of this build for --version: "CUDA 13.0 / cuBLAS 13.1", or "cpu only"
 * without the CUDA backend. Touches no device. Returns buf. */
const char *vr_model_runtime_versions(char *buf, size_t n);

/* Visible CUDA devices (0 without the CUDA backend or without a usable device; why then says
 * why: "this build has no CUDA backend", "driver 13.0: 0 devices", "no CUDA driver: ..."). Not thread-safe. */
int vr_model_cuda_devices(char *why, size_t whyn);

/* Free and total memory of GPU cuda:index (cudaMemGetInfo). 0; VR_ERR_NO_DEVICE without that
 * device (or without the CUDA backend), VR_ERR_DEVICE on a driver error. Not thread-safe. */
int vr_model_cuda_memory(int index, uint64_t *free_bytes, uint64_t *total_bytes);

/* The HINT for a vr_model_load() failure with status rc (the load's own log line names the file,
 * tensor or field): e.g. the supported architectures for VR_ERR_UNSUPPORTED, "--device cpu" for
 * VR_ERR_NO_DEVICE. Static string, thread-safe. */
const char *vr_model_load_hint(int rc);

#ifdef __cplusplus
}
#endif
#endif /* VR_MODEL_H */
