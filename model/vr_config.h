/* vr_config.h: config.json -> vr_model_config_t (internal to model/).
 *
 * Reads what transformers reads for the supported architectures, with
 * transformers' defaults where a key is absent. RoPE is taken from
 * "rope_parameters" (transformers 5: {"rope_type", "rope_theta", "factor", ...})
 * or "rope_scaling" + top-level "rope_theta" (transformers 4); "type" is an old
 * spelling of "rope_type". Supported rope types: default, linear, llama3. */
#ifndef VR_CONFIG_H
#define VR_CONFIG_H

#include <stddef.h>

#include "vr_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The architectures this runtime can run, comma separated (for error messages). */
#define VR_SUPPORTED_ARCHS                                                                   \
  "BertForSequenceClassification, RobertaForSequenceClassification, "                        \
  "XLMRobertaForSequenceClassification, LlamaForSequenceClassification, "                    \
  "MistralForSequenceClassification, Qwen2ForSequenceClassification"

/* Decoder checkpoints with other heads, which only the trainer opens (vr_model_weights.h). */
#define VR_TRAINER_ARCHS                                                                     \
  "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, LlamaForTokenClassification, "   \
  "MistralForTokenClassification, Qwen2ForTokenClassification, and the decoder "             \
  "*ForSequenceClassification"

/* Parses config.json text (json_len bytes, need not be NUL-terminated). path is
 * used in messages. Fills *cfg (cfg->num_labels = -1 when config.json does not
 * say; the loader then takes it from the head's shape), the architecture name
 * and model_type; cfg->task says which head architectures[0] names (every name of
 * VR_SUPPORTED_ARCHS and VR_TRAINER_ARCHS parses; the caller decides which it serves). On error returns VR_ERR_MODEL_FORMAT / VR_ERR_UNSUPPORTED /
 * VR_ERR_NOMEM, logs the key and the problem, and leaves nothing to free.
 * On success free with vr_config_free(). */
int vr_config_parse(const char *json, size_t json_len, const char *path, vr_model_config_t *cfg,
                    char *arch_name, size_t arch_cap, char *model_type, size_t type_cap);
void vr_config_free(vr_model_config_t *cfg);

/* Computes the rope_inv_freq table (head_dim / 2 entries, malloc'd) the way
 * transformers' rope init functions do, in float32. rope_type: "default",
 * "linear" (factor), "llama3" (factor, low/high_freq_factor,
 * original_max_position_embeddings). Returns NULL on OOM. */
float *vr_rope_inv_freq(int head_dim, float theta, const char *rope_type, float factor,
                        float low_freq_factor, float high_freq_factor, float original_max_pos);

#ifdef __cplusplus
}
#endif
#endif /* VR_CONFIG_H */
