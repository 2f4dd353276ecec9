/* vr_lm.h: the causal-LM handle shared by training (vr_train.h) and rollout.
 *
 * A vr_lm_t is a decoder checkpoint in the trainer's own form: its config, and every
 * parameter as fp32 in ONE contiguous buffer described by a tensor table in Hugging Face
 * order (the order of transformers' model.named_parameters()), so a weight sync is one buffer
 * broadcast and a backend (cpu, cuda) lays out its own copy, its gradients and its optimizer
 * moments with the same offsets.
 *
 * Families: Llama, Mistral, Qwen2 (config.json "architectures" *ForCausalLM, or for the value
 * head also *ForTokenClassification / *ForSequenceClassification). Two heads:
 *   VR_LM_HEAD_LM     lm_head (V, C) — absent from the table when tie_word_embeddings: the
 *                     LM head is then model.embed_tokens.weight itself (gradients of both uses
 *                     add up in that one tensor, as in transformers);
 *   VR_LM_HEAD_VALUE  the critic: score.weight (1, C) and score.bias (1), one value per token
 *                     (transformers' *ForTokenClassification with num_labels = 1, as verl's
 *                     critic); no lm_head.
 *
 * Tensor table, in this order (names exactly as in the HF checkpoint; "[..]" when present;
 * named_parameters()' order except that q/k/v's and gate/up's biases follow all of their group's
 * weights, so each group's weights are adjacent and a backend runs the group as one GEMM):
 *   model.embed_tokens.weight                         (V, C)
 *   per layer l: model.layers.l.
 *     self_attn.q_proj.weight (H*D, C)
 *     self_attn.k_proj.weight (KV*D, C)
 *     self_attn.v_proj.weight (KV*D, C)
 *     [self_attn.q_proj.bias (H*D), self_attn.k_proj.bias (KV*D), self_attn.v_proj.bias (KV*D)]  qkv_bias
 *     self_attn.o_proj.weight (C, H*D)  [self_attn.o_proj.bias (C)]       o_bias
 *     mlp.gate_proj.weight (F, C)
 *     mlp.up_proj.weight (F, C)
 *     [mlp.gate_proj.bias (F), mlp.up_proj.bias (F)]                      mlp_bias
 *     mlp.down_proj.weight (C, F)       [mlp.down_proj.bias (C)]          mlp_bias
 *     input_layernorm.weight (C)
 *     post_attention_layernorm.weight (C)
 *   model.norm.weight (C)
 *   lm_head.weight (V, C)            head LM, untied only
 *   score.weight (1, C), score.bias (1)   head VALUE
 * Every tensor starts at a multiple of VR_LM_ALIGN floats; the gaps are zero and stay zero
 * (a backend must keep them zero in params, grads and moments so norms and syncs over the
 * whole buffer are exact).
 *
 * The math the config describes (transformers' Llama/Mistral/Qwen2): x = embed[ids];
 * per layer: h = RMSNorm1(x); q,k,v = h W^T (+b); RoPE on q,k (rotate_half: pairs (i, i+D/2),
 * angle = pos * rope_inv_freq[i], cos/sin in fp32 times rope_attention_scaling, pos counted from
 * each sequence's first token); causal attention with GQA (query head h reads kv head
 * h / (H/KV)), scale D^-1/2, keys j with i - j < sliding_window when sliding_window > 0;
 * x += o(att); x += down(silu(gate(RMSNorm2(x))) * up(RMSNorm2(x))); final RMSNorm;
 * RMSNorm(x) = w * (x * rsqrt(mean(x^2) + eps)).
 *
 * Threading: a vr_lm_t is not thread-safe; read-only calls may run concurrently. */
#ifndef VR_LM_H
#define VR_LM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VR_LM_ALIGN 64 /* floats: every tensor's offset is a multiple of this (256 bytes) */

typedef enum vr_lm_family { VR_LM_LLAMA = 0, VR_LM_MISTRAL = 1, VR_LM_QWEN2 = 2 } vr_lm_family_t;
typedef enum vr_lm_head { VR_LM_HEAD_LM = 0, VR_LM_HEAD_VALUE = 1 } vr_lm_head_t;

typedef struct vr_lm_config {
  vr_lm_family_t family;
  vr_lm_head_t head;
  char model_type[32];           /* "llama", "mistral", "qwen2" (config.json) */
  int vocab_size;                /* V */
  int hidden_size;               /* C */
  int num_layers;
  int num_heads;                 /* H */
  int num_kv_heads;              /* KV (H % KV == 0) */
  int head_dim;                  /* D (even) */
  int intermediate_size;         /* F */
  int max_position_embeddings;   /* longest sequence accepted */
  float rms_norm_eps;
  int tie_word_embeddings;       /* head LM: logits = h . embed_tokens^T (no lm_head tensor) */
  int qkv_bias;                  /* q/k/v_proj have biases (qwen2; llama attention_bias) */
  int o_bias;                    /* o_proj has a bias (llama attention_bias) */
  int mlp_bias;                  /* gate/up/down_proj have biases (llama mlp_bias) */
  int sliding_window;            /* mistral: 0 = full causal attention */
  float rope_theta;
  float rope_attention_scaling;  /* multiplies cos and sin (1.0 for default/linear/llama3) */
  const float *rope_inv_freq;    /* (D / 2), final after scaling, as model/ computes it; owned by the lm */
  float initializer_range;       /* config.json (0.02 when absent): std of a fresh value head */
} vr_lm_config_t;

typedef struct vr_lm_tensor {
  char name[80];                 /* HF name, e.g. "model.layers.0.self_attn.q_proj.weight" */
  int ndim;                      /* 1 or 2 */
  int64_t shape[2];              /* row-major; shape[1] = 1 for 1-D */
  size_t offset;                 /* floats from the start of the buffer (multiple of VR_LM_ALIGN) */
  size_t numel;
} vr_lm_tensor_t;

/* Positions in the tensor table (vr_lm_tensor(lm, i)); -1 where the tensor is absent. */
typedef struct vr_lm_layer_index {
  int q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b;
  int gate_w, gate_b, up_w, up_b, down_w, down_b;
  int norm1, norm2;              /* input_layernorm, post_attention_layernorm */
} vr_lm_layer_index_t;

typedef struct vr_lm_index {
  int embed;                     /* model.embed_tokens.weight */
  const vr_lm_layer_index_t *layers; /* num_layers entries */
  int final_norm;                /* model.norm.weight */
  int lm_head;                   /* lm_head.weight; -1 when tied (use embed) or value head */
  int score_w, score_b;          /* value head; -1 for head LM */
} vr_lm_index_t;

typedef struct vr_lm vr_lm_t;

typedef struct vr_lm_load_options {
  vr_lm_head_t head;             /* what to build (default VR_LM_HEAD_LM) */
  uint64_t seed;                 /* head VALUE from a causal LM: score.weight ~ N(0, initializer_range^2)
                                  * drawn from this seed (splitmix64 + Box-Muller), bias 0 */
} vr_lm_load_options_t;

/* Loads a Hugging Face directory (model/'s loader: config.json, model.safetensors or a sharded
 * index, F32/F16/BF16 converted to fp32). opt NULL = head LM. Head LM needs a *ForCausalLM
 * checkpoint. Head VALUE takes score from a *ForTokenClassification (weight + bias) or a
 * *ForSequenceClassification (weight; bias 0) with num_labels 1, or initialises it from the seed
 * when the checkpoint is a causal LM (its lm_head is dropped). On error returns a negative
 * vr_status_t after logging the directory, tensor or field and the problem; *out NULL. The caller
 * owns *out (vr_lm_free). */
int vr_lm_load(const char *dir, const vr_lm_load_options_t *opt, vr_lm_t **out);
void vr_lm_free(vr_lm_t *lm);

/* Writes dir/model.safetensors (every table tensor, F32, in table order; tied: no lm_head,
 * as transformers saves it), dir/config.json (the source config.json with "architectures" set
 * to <Family>ForCausalLM or <Family>ForTokenClassification (+ id2label of one label for the
 * value head) and "dtype": "float32") and a copy of the source's generation_config.json when
 * it had one. Creates dir (one level) if missing; each file is written under a temporary name
 * and renamed when complete. AutoModelForCausalLM / AutoModelForTokenClassification load it.
 * 0 or a negative vr_status_t (logged with the path); VR_ERR_INVAL, before anything is written,
 * when dir is too long for its files' paths (+ ".tmp") to stay under PATH_MAX (4096). */
int vr_lm_save(const vr_lm_t *lm, const char *dir);

const vr_lm_config_t *vr_lm_config(const vr_lm_t *lm);
const vr_lm_index_t *vr_lm_index(const vr_lm_t *lm);
size_t vr_lm_n_tensors(const vr_lm_t *lm);
const vr_lm_tensor_t *vr_lm_tensor(const vr_lm_t *lm, size_t i); /* NULL past the end */
int vr_lm_find(const vr_lm_t *lm, const char *name);             /* table position or -1 */
/* The source directory (for generation_config.json, tokenizer files). */
const char *vr_lm_dir(const vr_lm_t *lm);

/* The parameter buffer: vr_lm_n_floats(lm) floats (padding included), tensor i at
 * params + vr_lm_tensor(lm, i)->offset. Writable: a trainer may update it in place. */
float *vr_lm_params(vr_lm_t *lm);
const float *vr_lm_params_const(const vr_lm_t *lm);
size_t vr_lm_n_floats(const vr_lm_t *lm);
/* off[i] (vr_lm_n_tensors entries): tensor i's offset in the table's first layout (version 1 of
 * the optimizer state file: every bias right after its weight, as named_parameters() lists
 * them), which has the same n_floats and the same layer starts. */
void vr_lm_offsets_v1(const vr_lm_t *lm, size_t *off);
/* Sum of numel over the table (the model's parameter count; tied embeddings counted once). */
size_t vr_lm_n_params(const vr_lm_t *lm);
/* Copies a whole buffer in (n must equal vr_lm_n_floats; VR_ERR_INVAL otherwise) or out. */
int vr_lm_set_params(vr_lm_t *lm, const float *src, size_t n);
int vr_lm_get_params(const vr_lm_t *lm, float *dst, size_t n);

/* "LlamaForCausalLM" etc. for a family and head (static string). */
const char *vr_lm_arch_name(vr_lm_family_t f, vr_lm_head_t h);

/* Writes the n_parts buffers (parts[i], lens[i] bytes) one after the other to path through
 * path.tmp: written, fsync'd, renamed over path, so path is never seen half-written. Returns 0,
 * VR_ERR_INVAL when path + ".tmp" does not fit 4096 + 8 bytes (not logged), or VR_ERR_IO (logged, tmp
 * removed). Thread-safe (checkpoints write from background threads). */
int vr_lm_write_file(const char *path, const void *const *parts, const size_t *lens, int n_parts);

#ifdef __cplusplus
}
#endif
#endif /* VR_LM_H */
