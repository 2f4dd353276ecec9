/* vr_backend.h: what the loader hands a backend, and the backend function table.
 *
 * The loader (model/) parses config.json into vr_model_config_t, maps every
 * safetensors file and resolves the architecture's tensors into
 * vr_model_weights_t (pointers into the mapping, in the file's dtype). A
 * backend turns those into its own representation (cpu: fp32, converting
 * F16/BF16 once; cuda: bf16 on the device) and runs packed forwards.
 * The backend must not keep pointers into cfg/w beyond init unless it also
 * documents that the model outlives it (it does: the loader frees the mapping
 * only after the backend's free()). */
#ifndef VR_BACKEND_H
#define VR_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "vr_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vr_dtype { VR_DTYPE_F32 = 0, VR_DTYPE_F16 = 1, VR_DTYPE_BF16 = 2 } vr_dtype_t;

/* One tensor of a safetensors file: a view into the mmapped file (data may be
 * only 1-byte aligned: read with memcpy or convert). shape is row-major. */
typedef struct vr_tensor {
  const char *name;
  vr_dtype_t dtype;
  int ndim;
  int64_t shape[4];
  const void *data;
  size_t nbytes;
} vr_tensor_t;

typedef enum vr_arch {
  VR_ARCH_BERT = 0,    /* BertForSequenceClassification */
  VR_ARCH_ROBERTA = 1, /* RobertaForSequenceClassification, XLMRobertaForSequenceClassification */
  VR_ARCH_LLAMA = 2,   /* LlamaForSequenceClassification */
  VR_ARCH_MISTRAL = 3, /* MistralForSequenceClassification */
  VR_ARCH_QWEN2 = 4,   /* Qwen2ForSequenceClassification */
} vr_arch_t;

/* What the checkpoint's head is (config.json "architectures"). The reward runtime
 * (vr_model_load) serves VR_TASK_SEQ_CLS only; the trainer's weights entry
 * (vr_model_weights.h) also opens the decoders' causal-LM and token-classification forms. */
typedef enum vr_task {
  VR_TASK_SEQ_CLS = 0,   /* *ForSequenceClassification: score (num_labels, C) */
  VR_TASK_CAUSAL_LM = 1, /* LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM: lm_head (V, C) */
  VR_TASK_TOKEN_CLS = 2, /* LlamaForTokenClassification, ...: score (num_labels, C) + bias */
} vr_task_t;

typedef enum vr_act { VR_ACT_GELU = 0 /* erf */, VR_ACT_GELU_TANH = 1 /* gelu_new, gelu_pytorch_tanh */, VR_ACT_SILU = 2, VR_ACT_RELU = 3 } vr_act_t;

typedef struct vr_model_config {
  vr_arch_t arch;
  vr_task_t task;              /* the head architectures[0] names */
  int is_decoder;
  int vocab_size, hidden_size, num_layers, num_heads, num_kv_heads, head_dim, intermediate_size;
  int max_position_embeddings; /* as in config.json */
  int max_seq_len;             /* longest accepted sequence: encoders max_pos - position_offset */
  int type_vocab_size;         /* bert/roberta token_type embeddings (type 0 is used) */
  int num_labels;              /* must be 1 */
  float norm_eps;              /* layer_norm_eps or rms_norm_eps */
  vr_act_t act;
  int pad_token_id;            /* -1 when absent */
  int position_offset;         /* roberta: padding_idx + 1; bert/decoders: 0 */
  int attention_bias;          /* q/k/v (and o for bert) have biases; qwen2: q/k/v only */
  int o_bias;                  /* o_proj has a bias */
  int mlp_bias;
  int tie_word_embeddings;
  int sliding_window;          /* mistral; 0 = none */
  /* RoPE (decoders): inv_freq[i] for i < head_dim/2, final (after any scaling),
   * computed once by the loader exactly as transformers' rope init does. */
  float rope_theta;
  float *rope_inv_freq;        /* owned by the loader */
  float rope_attention_scaling; /* multiplies cos/sin (1.0 except yarn-like types) */
} vr_model_config_t;

/* Per-layer tensors. Encoder (post-norm): x = LN1(x + O(attn(x))); x = LN2(x + down(act(up(x)))).
 * Decoder (pre-norm): x += O(attn(RMS1(x))); x += down(silu(gate(RMS2(x))) * up(RMS2(x))).
 * Linear weights are (out, in) as in PyTorch; absent optional tensors are NULL. */
typedef struct vr_layer_weights {
  const vr_tensor_t *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *o_w, *o_b;
  const vr_tensor_t *norm1_w, *norm1_b; /* enc: attention.output.LayerNorm; dec: input_layernorm */
  const vr_tensor_t *norm2_w, *norm2_b; /* enc: output.LayerNorm; dec: post_attention_layernorm */
  const vr_tensor_t *gate_w;            /* dec only */
  const vr_tensor_t *up_w, *up_b;       /* enc: intermediate.dense; dec: up_proj */
  const vr_tensor_t *down_w, *down_b;   /* enc: output.dense; dec: down_proj */
  const vr_tensor_t *gate_b;            /* dec with mlp_bias (llama): gate_proj.bias; else NULL */
} vr_layer_weights_t;

typedef struct vr_model_weights {
  const vr_tensor_t *tok_emb;                 /* (V, C) */
  const vr_tensor_t *pos_emb, *type_emb;      /* encoders */
  const vr_tensor_t *emb_norm_w, *emb_norm_b; /* encoders: embeddings.LayerNorm */
  vr_layer_weights_t *layers;                 /* num_layers entries */
  const vr_tensor_t *final_norm_w;            /* decoders: model.norm */
  /* heads. bert: head1 = pooler.dense (tanh), head2 = classifier.
   *        roberta: head1 = classifier.dense (tanh), head2 = classifier.out_proj.
   *        decoders: head2 = score (num_labels, C), no bias; head1 NULL.
   *        decoders, VR_TASK_TOKEN_CLS: head2 = score (num_labels, C), head2_b = score.bias.
   *        decoders, VR_TASK_CAUSAL_LM: head2 = lm_head (V, C), or tok_emb itself when
   *        tie_word_embeddings (a lm_head.weight in the file is then ignored, as transformers
   *        ties it). */
  const vr_tensor_t *head1_w, *head1_b, *head2_w, *head2_b;
} vr_model_weights_t;

/* Backend function table (designated initializers; optional entries may be NULL). */
typedef struct vr_backend_ops {
  const char *name; /* "cpu", "cuda" */
  /* Builds the backend state for this model; device_index is N of "cuda:N" (0 for cpu).
   * On failure returns a negative vr_status_t and logs why. Required. */
  int (*init)(const vr_model_config_t *cfg, const vr_model_weights_t *w,
              const vr_model_options_t *opt, int device_index, void **state);
  /* One packed forward of already-validated sequences whose total length is at most
   * the configured max_batch_tokens: writes n_seqs scores. Required. */
  int (*forward)(void *state, const int32_t *ids, const uint32_t *cu_seqlens, uint32_t n_seqs,
                 float *scores);
  /* The trunk alone (embeddings -> layers -> final norm, no head, no pruning): writes the
   * hidden states (T, C) of the packed batch as fp32 into hidden, row t = token t of the
   * batch (T = cu_seqlens[n_seqs]). Decoders: after the final RMSNorm (model.norm), as
   * transformers' last_hidden_state; encoders: the last layer's output. Same input contract
   * as forward(). Required: this is the entry point other components (the trainer) build on,
   * and the score heads are defined on its output (scores == head(hidden)). */
  int (*hidden)(void *state, const int32_t *ids, const uint32_t *cu_seqlens, uint32_t n_seqs,
                float *hidden);
  void (*free)(void *state);                    /* required; NULL state is a no-op */
  /* Fills the device/host fields of info (device, device_name, compute_dtype, *_bytes). Optional. */
  void (*describe)(void *state, vr_model_info_t *info);
  /* Pipelined pair (optional; both or neither; NULL = vr_model.c runs forward() inside
   * vr_model_submit). submit: same input contract as forward(), but copies ids/cu_seqlens
   * before it returns and does not wait for the result; at most max_inflight batches are
   * outstanding (vr_model.c enforces it). On an error return nothing is outstanding.
   * collect: waits for the OLDEST outstanding batch, writes its n_seqs scores (the count
   * given to its submit) and returns 0 or the device error; the batch is no longer
   * outstanding either way. Same thread as the other calls. */
  int (*submit)(void *state, const int32_t *ids, const uint32_t *cu_seqlens, uint32_t n_seqs);
  int (*collect)(void *state, float *scores);
  int max_inflight; /* with submit/collect: batches that may be outstanding (1..VR_MODEL_MAX_INFLIGHT) */
} vr_backend_ops_t;

#define VR_MODEL_MAX_INFLIGHT 4

extern const vr_backend_ops_t vr_backend_cpu;
#ifdef VR_HAVE_CUDA
extern const vr_backend_ops_t vr_backend_cuda;
/* Visible CUDA devices (0 when none; why then gets the driver's reason, "0 devices" or
 * "driver: ..."). Loads no model; safe before anything else. Not thread-safe (first CUDA call). */
int vr_cuda_device_count(char *why, size_t whyn);
/* Free and total memory of device index (cudaMemGetInfo on it; the calling thread's current
 * device is put back). 0, or VR_ERR_NO_DEVICE / VR_ERR_DEVICE. Not thread-safe. */
int vr_cuda_device_memory(int index, uint64_t *free_bytes, uint64_t *total_bytes);
/* "CUDA 13.0 / cuBLAS 13.1" (the runtime and cuBLAS this binary runs with) into buf. */
void vr_cuda_runtime_versions(char *buf, size_t n);
#endif

/* bf16 / f16 -> f32 helpers for backends (exact conversions). */
float vr_bf16_to_f32(uint16_t h);
float vr_f16_to_f32(uint16_t h);
/* Converts any tensor to a fresh malloc'd fp32 array (caller frees); NULL on OOM. */
float *vr_tensor_to_f32(const vr_tensor_t *t);

#ifdef __cplusplus
}
#endif
#endif /* VR_BACKEND_H */
