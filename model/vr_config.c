/* vr_config.c: config.json parsing and RoPE tables (see vr_config.h). */
#include "vr_config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_jsonl.h"
#include "vr_log.h"

static const struct {
  const char *name;
  vr_arch_t arch;
  vr_task_t task;
} vr_arch_names[] = {
    {"BertForSequenceClassification", VR_ARCH_BERT, VR_TASK_SEQ_CLS},
    {"RobertaForSequenceClassification", VR_ARCH_ROBERTA, VR_TASK_SEQ_CLS},
    {"XLMRobertaForSequenceClassification", VR_ARCH_ROBERTA, VR_TASK_SEQ_CLS},
    {"LlamaForSequenceClassification", VR_ARCH_LLAMA, VR_TASK_SEQ_CLS},
    {"MistralForSequenceClassification", VR_ARCH_MISTRAL, VR_TASK_SEQ_CLS},
    {"Qwen2ForSequenceClassification", VR_ARCH_QWEN2, VR_TASK_SEQ_CLS},
    {"LlamaForCausalLM", VR_ARCH_LLAMA, VR_TASK_CAUSAL_LM},
    {"MistralForCausalLM", VR_ARCH_MISTRAL, VR_TASK_CAUSAL_LM},
    {"Qwen2ForCausalLM", VR_ARCH_QWEN2, VR_TASK_CAUSAL_LM},
    {"LlamaForTokenClassification", VR_ARCH_LLAMA, VR_TASK_TOKEN_CLS},
    {"MistralForTokenClassification", VR_ARCH_MISTRAL, VR_TASK_TOKEN_CLS},
    {"Qwen2ForTokenClassification", VR_ARCH_QWEN2, VR_TASK_TOKEN_CLS},
};

/* Key lookup helpers: a present key of the wrong type is an error (-1), an
 * absent or null key keeps the default (0). */
static int vr_cfg_int(const cJSON *o, const char *key, int *v, const char *path) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!j || cJSON_IsNull(j)) return 0;
  double d = cJSON_IsNumber(j) ? j->valuedouble : NAN;
  if (!(d >= -2147483648.0 && d <= 2147483647.0) || floor(d) != d) {
    vr_log(VR_LOG_ERROR, "%s: \"%s\" must be an integer", path, key);
    return -1;
  }
  *v = (int)d;
  return 0;
}

static int vr_cfg_float(const cJSON *o, const char *key, float *v, const char *path) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!j || cJSON_IsNull(j)) return 0;
  if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble)) {
    vr_log(VR_LOG_ERROR, "%s: \"%s\" must be a number", path, key);
    return -1;
  }
  *v = (float)j->valuedouble;
  return 0;
}

static int vr_cfg_bool(const cJSON *o, const char *key, int *v, const char *path) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!j || cJSON_IsNull(j)) return 0;
  if (!cJSON_IsBool(j)) {
    vr_log(VR_LOG_ERROR, "%s: \"%s\" must be true or false", path, key);
    return -1;
  }
  *v = cJSON_IsTrue(j);
  return 0;
}

static const char *vr_cfg_str(const cJSON *o, const char *key) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(j) ? j->valuestring : NULL;
}

float *vr_rope_inv_freq(int head_dim, float theta, const char *rope_type, float factor,
                        float low_freq_factor, float high_freq_factor, float original_max_pos) {
  int n = head_dim / 2;
  float *inv = malloc((size_t)(n > 0 ? n : 1) * sizeof *inv);
  if (!inv) return NULL;
  for (int i = 0; i < n; i++) {
    /* torch: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all float32 */
    float e = (float)(2 * i) / (float)head_dim;
    float p = (float)pow((double)theta, (double)e);
    inv[i] = 1.0f / p;
  }
  if (strcmp(rope_type, "linear") == 0) {
    for (int i = 0; i < n; i++) inv[i] = inv[i] / factor;
  } else if (strcmp(rope_type, "llama3") == 0) {
    const float pi = 3.14159265358979323846f;
    float low_wavelen = original_max_pos / low_freq_factor;
    float high_wavelen = original_max_pos / high_freq_factor;
    for (int i = 0; i < n; i++) {
      float wavelen = 2.0f * pi / inv[i];
      float x = wavelen > low_wavelen ? inv[i] / factor : inv[i];
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        float smooth = (original_max_pos / wavelen - low_freq_factor) /
                       (high_freq_factor - low_freq_factor);
        x = (1.0f - smooth) * x / factor + smooth * x;
      }
      inv[i] = x;
    }
  }
  return inv;
}

/* RoPE keys of a decoder config: transformers 5 "rope_parameters" or
 * transformers 4 "rope_scaling" + "rope_theta". */
static int vr_cfg_rope(const cJSON *root, const char *path, vr_model_config_t *cfg) {
  const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
  const char *src = "rope_parameters";
  if (!rp || cJSON_IsNull(rp)) {
    rp = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    src = "rope_scaling";
  }
  if (rp && !cJSON_IsNull(rp) && !cJSON_IsObject(rp)) {
    vr_log(VR_LOG_ERROR, "%s: \"%s\" must be an object", path, src);
    return VR_ERR_MODEL_FORMAT;
  }
  if (cJSON_IsNull(rp)) rp = NULL;
  float theta = 10000.0f, factor = 1.0f, lo = 1.0f, hi = 4.0f, orig = 8192.0f, partial = 1.0f;
  if (vr_cfg_float(root, "rope_theta", &theta, path) != 0) return VR_ERR_MODEL_FORMAT;
  if (vr_cfg_float(root, "partial_rotary_factor", &partial, path) != 0) return VR_ERR_MODEL_FORMAT;
  const char *type = "default";
  if (rp) {
    if (vr_cfg_float(rp, "rope_theta", &theta, path) != 0 ||
        vr_cfg_float(rp, "factor", &factor, path) != 0 ||
        vr_cfg_float(rp, "low_freq_factor", &lo, path) != 0 ||
        vr_cfg_float(rp, "high_freq_factor", &hi, path) != 0 ||
        vr_cfg_float(rp, "original_max_position_embeddings", &orig, path) != 0 ||
        vr_cfg_float(rp, "partial_rotary_factor", &partial, path) != 0)
      return VR_ERR_MODEL_FORMAT;
    if (vr_cfg_str(rp, "rope_type")) type = vr_cfg_str(rp, "rope_type");
    else if (vr_cfg_str(rp, "type")) type = vr_cfg_str(rp, "type");
  }
  if (strcmp(type, "default") != 0 && strcmp(type, "linear") != 0 && strcmp(type, "llama3") != 0) {
    vr_log(VR_LOG_ERROR, "%s: %s rope_type \"%s\" is not supported (supported: default, linear, llama3)",
           path, src, type);
    return VR_ERR_UNSUPPORTED;
  }
  if (partial != 1.0f) {
    vr_log(VR_LOG_ERROR, "%s: partial_rotary_factor %g is not supported (only 1.0)", path, partial);
    return VR_ERR_UNSUPPORTED;
  }
  if (!(theta > 0.0f) || !(factor > 0.0f) ||
      (strcmp(type, "llama3") == 0 && (!(lo > 0.0f) || !(hi > lo) || !(orig > 0.0f)))) {
    vr_log(VR_LOG_ERROR, "%s: invalid RoPE parameters (rope_theta %g, factor %g, low/high_freq_factor %g/%g, original_max_position_embeddings %g)",
           path, theta, factor, lo, hi, orig);
    return VR_ERR_MODEL_FORMAT;
  }
  cfg->rope_theta = theta;
  cfg->rope_attention_scaling = 1.0f;
  cfg->rope_inv_freq = vr_rope_inv_freq(cfg->head_dim, theta, type, factor, lo, hi, orig);
  if (!cfg->rope_inv_freq) return VR_ERR_NOMEM;
  vr_log(VR_LOG_DEBUG, "%s: rope %s theta %g factor %g", path, type, theta, factor);
  return 0;
}

static int vr_cfg_act(const char *name, vr_act_t *act) {
  if (!name) return -1;
  if (strcmp(name, "gelu") == 0) *act = VR_ACT_GELU;
  else if (strcmp(name, "gelu_new") == 0 || strcmp(name, "gelu_pytorch_tanh") == 0 ||
           strcmp(name, "gelu_fast") == 0)
    *act = VR_ACT_GELU_TANH;
  else if (strcmp(name, "silu") == 0 || strcmp(name, "swish") == 0) *act = VR_ACT_SILU;
  else if (strcmp(name, "relu") == 0) *act = VR_ACT_RELU;
  else return -1;
  return 0;
}

int vr_config_parse(const char *json, size_t json_len, const char *path, vr_model_config_t *cfg,
                    char *arch_name, size_t arch_cap, char *model_type, size_t type_cap) {
  memset(cfg, 0, sizeof *cfg);
  char jerr[1400];
  cJSON *root = vr_json_parse_file(json, json_len, path, VR_JSON_DUP_LAST, jerr, sizeof jerr);
  int rc = VR_ERR_MODEL_FORMAT;
  if (!root) {
    vr_log(VR_LOG_ERROR, "%s", jerr);
    goto done;
  }
  if (!cJSON_IsObject(root)) {
    vr_log(VR_LOG_ERROR, "%s: not a JSON object", path);
    goto done;
  }
  const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
  const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
  if (!cJSON_IsString(a0)) {
    vr_log(VR_LOG_ERROR, "%s: \"architectures\" must be a list naming the model class (supported: %s)",
           path, VR_SUPPORTED_ARCHS);
    goto done;
  }
  size_t ai = 0, na = sizeof vr_arch_names / sizeof vr_arch_names[0];
  while (ai < na && strcmp(vr_arch_names[ai].name, a0->valuestring) != 0) ai++;
  if (ai == na) {
    vr_log(VR_LOG_ERROR, "%s: architecture \"%.100s\" is not supported; supported: %s (reward models); %s (trainer)",
           path, a0->valuestring, VR_SUPPORTED_ARCHS, VR_TRAINER_ARCHS);
    rc = VR_ERR_UNSUPPORTED;
    goto done;
  }
  snprintf(arch_name, arch_cap, "%s", vr_arch_names[ai].name);
  snprintf(model_type, type_cap, "%s", vr_cfg_str(root, "model_type") ? vr_cfg_str(root, "model_type") : "");
  cfg->arch = vr_arch_names[ai].arch;
  cfg->task = vr_arch_names[ai].task;
  int enc = cfg->arch == VR_ARCH_BERT || cfg->arch == VR_ARCH_ROBERTA;
  cfg->is_decoder = !enc;

  /* transformers' defaults for absent keys */
  cfg->num_labels = -1;
  cfg->pad_token_id = -1;
  cfg->type_vocab_size = 2;
  cfg->norm_eps = enc ? 1e-12f : 1e-6f;
  cfg->tie_word_embeddings = enc ? 1 : 0;
  cfg->head_dim = 0;
  cfg->num_kv_heads = 0;
  if (vr_cfg_int(root, "vocab_size", &cfg->vocab_size, path) ||
      vr_cfg_int(root, "hidden_size", &cfg->hidden_size, path) ||
      vr_cfg_int(root, "num_hidden_layers", &cfg->num_layers, path) ||
      vr_cfg_int(root, "num_attention_heads", &cfg->num_heads, path) ||
      vr_cfg_int(root, "num_key_value_heads", &cfg->num_kv_heads, path) ||
      vr_cfg_int(root, "head_dim", &cfg->head_dim, path) ||
      vr_cfg_int(root, "intermediate_size", &cfg->intermediate_size, path) ||
      vr_cfg_int(root, "max_position_embeddings", &cfg->max_position_embeddings, path) ||
      vr_cfg_int(root, "type_vocab_size", &cfg->type_vocab_size, path) ||
      vr_cfg_int(root, "num_labels", &cfg->num_labels, path) ||
      vr_cfg_int(root, "pad_token_id", &cfg->pad_token_id, path) ||
      vr_cfg_float(root, enc ? "layer_norm_eps" : "rms_norm_eps", &cfg->norm_eps, path) ||
      vr_cfg_bool(root, "tie_word_embeddings", &cfg->tie_word_embeddings, path))
    goto done;
  if (cfg->num_labels < 0) {
    const cJSON *id2label = cJSON_GetObjectItemCaseSensitive(root, "id2label");
    if (cJSON_IsObject(id2label)) cfg->num_labels = cJSON_GetArraySize(id2label);
  }
  const struct { const char *key; int v; } need[] = {
      {"vocab_size", cfg->vocab_size}, {"hidden_size", cfg->hidden_size},
      {"num_hidden_layers", cfg->num_layers}, {"num_attention_heads", cfg->num_heads},
      {"intermediate_size", cfg->intermediate_size},
      {"max_position_embeddings", cfg->max_position_embeddings}};
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
    if (need[i].v <= 0 || need[i].v > (1 << 24)) {
      vr_log(VR_LOG_ERROR, "%s: \"%s\" missing or out of range (%d)", path, need[i].key, need[i].v);
      goto done;
    }
  }
  if (cfg->num_layers > 1024 || cfg->num_heads > 4096) {
    vr_log(VR_LOG_ERROR, "%s: num_hidden_layers %d / num_attention_heads %d out of range", path,
           cfg->num_layers, cfg->num_heads);
    goto done;
  }
  if (cfg->num_kv_heads <= 0 || enc) cfg->num_kv_heads = cfg->num_heads;
  if (cfg->head_dim <= 0 || enc) {
    if (cfg->hidden_size % cfg->num_heads != 0) {
      vr_log(VR_LOG_ERROR, "%s: hidden_size %d is not a multiple of num_attention_heads %d", path,
             cfg->hidden_size, cfg->num_heads);
      goto done;
    }
    cfg->head_dim = cfg->hidden_size / cfg->num_heads;
  }
  if (cfg->num_heads % cfg->num_kv_heads != 0 || cfg->head_dim > 65536 ||
      (!enc && cfg->head_dim % 2 != 0)) {
    vr_log(VR_LOG_ERROR, "%s: num_attention_heads %d / num_key_value_heads %d / head_dim %d inconsistent",
           path, cfg->num_heads, cfg->num_kv_heads, cfg->head_dim);
    goto done;
  }
  if (!(cfg->norm_eps >= 0.0f)) {
    vr_log(VR_LOG_ERROR, "%s: norm epsilon must be >= 0", path);
    goto done;
  }
  const char *act = vr_cfg_str(root, "hidden_act");
  if (!act) act = enc ? "gelu" : "silu";
  if (vr_cfg_act(act, &cfg->act) != 0) {
    vr_log(VR_LOG_ERROR, "%s: hidden_act \"%.40s\" is not supported (gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, silu, relu)",
           path, act);
    rc = VR_ERR_UNSUPPORTED;
    goto done;
  }

  if (enc) {
    /* transformers options that change the encoder's math and that we do not implement */
    const char *pet = vr_cfg_str(root, "position_embedding_type");
    int causal = 0;
    if (vr_cfg_bool(root, "is_decoder", &causal, path)) goto done;
    if ((pet && strcmp(pet, "absolute") != 0) || causal) {
      vr_log(VR_LOG_ERROR, "%s: %s%s%s is not supported (absolute position embeddings, bidirectional attention only)",
             path, pet && strcmp(pet, "absolute") != 0 ? "position_embedding_type " : "",
             pet && strcmp(pet, "absolute") != 0 ? pet : "", causal ? " is_decoder=true" : "");
      rc = VR_ERR_UNSUPPORTED;
      goto done;
    }
  }
  cfg->max_seq_len = cfg->max_position_embeddings;
  switch (cfg->arch) {
    case VR_ARCH_BERT:
      cfg->attention_bias = cfg->o_bias = cfg->mlp_bias = 1;
      break;
    case VR_ARCH_ROBERTA:
      cfg->attention_bias = cfg->o_bias = cfg->mlp_bias = 1;
      if (cfg->pad_token_id < 0) {
        vr_log(VR_LOG_ERROR, "%s: roberta needs pad_token_id (position ids start at pad_token_id + 1)", path);
        goto done;
      }
      cfg->position_offset = cfg->pad_token_id + 1;
      cfg->max_seq_len = cfg->max_position_embeddings - cfg->position_offset;
      if (cfg->max_seq_len < 1) {
        vr_log(VR_LOG_ERROR, "%s: max_position_embeddings %d leaves no positions after pad_token_id %d + 1",
               path, cfg->max_position_embeddings, cfg->pad_token_id);
        goto done;
      }
      break;
    case VR_ARCH_LLAMA:
      if (vr_cfg_bool(root, "attention_bias", &cfg->attention_bias, path) ||
          vr_cfg_bool(root, "mlp_bias", &cfg->mlp_bias, path))
        goto done;
      cfg->o_bias = cfg->attention_bias;
      break;
    case VR_ARCH_MISTRAL:
      if (vr_cfg_int(root, "sliding_window", &cfg->sliding_window, path)) goto done;
      if (cfg->sliding_window < 0) cfg->sliding_window = 0;
      break;
    case VR_ARCH_QWEN2: {
      cfg->attention_bias = 1; /* q/k/v */
      int use_sw = 0;
      if (vr_cfg_bool(root, "use_sliding_window", &use_sw, path)) goto done;
      const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
      int sliding_layers = 0;
      for (const cJSON *it = cJSON_IsArray(lt) ? lt->child : NULL; it; it = it->next)
        if (cJSON_IsString(it) && strcmp(it->valuestring, "full_attention") != 0) sliding_layers++;
      if (use_sw || sliding_layers) {
        vr_log(VR_LOG_ERROR, "%s: Qwen2 per-layer sliding-window attention (use_sliding_window / layer_types) is not supported",
               path);
        rc = VR_ERR_UNSUPPORTED;
        goto done;
      }
      break;
    }
  }
  if (cfg->pad_token_id >= cfg->vocab_size) cfg->pad_token_id = -1; /* cannot occur in valid ids */
  if (cfg->is_decoder) {
    rc = vr_cfg_rope(root, path, cfg);
    if (rc != 0) goto done;
  }
  rc = 0;
done:
  cJSON_Delete(root);
  if (rc != 0) vr_config_free(cfg);
  return rc;
}

void vr_config_free(vr_model_config_t *cfg) {
  if (!cfg) return;
  free(cfg->rope_inv_freq);
  cfg->rope_inv_freq = NULL;
}
