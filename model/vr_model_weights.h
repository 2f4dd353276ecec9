/* vr_model_weights.h: the loader without a backend, for the trainer (trainer/vr_lm.c).
 *
 * vr_model_weights_open() reads a decoder checkpoint directory as vr_model_load() does
 * (config.json, model.safetensors or a sharded index, F32/F16/BF16, mmapped, every tensor
 * checked for presence, dtype and shape) but builds no backend and accepts the heads reward
 * serving refuses: LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM (lm_head, or
 * embed_tokens when tie_word_embeddings), *ForTokenClassification (score + bias) and the decoder
 * *ForSequenceClassification (score). Encoders are refused. vr_model_load() itself still
 * refuses causal LMs and token classifiers ("... is a causal language model, not a reward model").
 * model/ stays forward-only: this hands out views, the trainer copies them into its own buffers.
 *
 * The handle is a vr_model_t without a backend: only the functions below and vr_model_info()
 * (architecture and model_type filled, the rest zero) may be used on it, and it is freed with
 * vr_model_free(). Views stay valid until then. Not thread-safe; read-only after open. */
#ifndef VR_MODEL_WEIGHTS_H
#define VR_MODEL_WEIGHTS_H

#include <stddef.h>

#include "vr_backend.h"
#include "vr_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 0 and *out, or a negative vr_status_t after logging the file / tensor / field and the problem
 * (VR_ERR_NOT_FOUND, VR_ERR_MODEL_FORMAT, VR_ERR_UNSUPPORTED, VR_ERR_NOMEM); *out NULL then. */
int vr_model_weights_open(const char *dir, vr_model_t **out);
/* The parsed config (cfg->task says the head; cfg->rope_inv_freq owned by the handle). */
const vr_model_config_t *vr_model_weights_config(const vr_model_t *m);
/* Tensor views into the mapping, in the file's dtype (vr_tensor_to_f32 converts). */
const vr_model_weights_t *vr_model_weights_tensors(const vr_model_t *m);
/* config.json exactly as read (not NUL-terminated in general; *len bytes). */
const char *vr_model_weights_config_json(const vr_model_t *m, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* VR_MODEL_WEIGHTS_H */
