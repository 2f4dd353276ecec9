/* vr_rollout_lm.c: the engine on a vr_lm_t, and the EOS ids of a checkpoint (vr_rollout_lm.h). */
#include "vr_rollout_lm.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_log.h"

static const float *vr_rlm_at(const vr_lm_t *lm, int i) {
  return i < 0 ? NULL : vr_lm_params_const(lm) + vr_lm_tensor(lm, (size_t)i)->offset;
}

int vr_rollout_lm_view(const vr_lm_t *lm, vr_rollout_lm_t *v) {
  memset(v, 0, sizeof *v);
  const vr_lm_config_t *lc = vr_lm_config(lm);
  const vr_lm_index_t *ix = vr_lm_index(lm);
  if (lc->head != VR_LM_HEAD_LM) {
    vr_log(VR_LOG_ERROR, "rollout: %s is a value-head model; generation needs a causal LM head", vr_lm_dir(lm));
    return VR_ERR_UNSUPPORTED;
  }
  vr_model_config_t *c = &v->cfg;
  c->arch = lc->family == VR_LM_QWEN2 ? VR_ARCH_QWEN2 : lc->family == VR_LM_MISTRAL ? VR_ARCH_MISTRAL : VR_ARCH_LLAMA;
  c->is_decoder = 1;
  c->vocab_size = lc->vocab_size, c->hidden_size = lc->hidden_size, c->num_layers = lc->num_layers;
  c->num_heads = lc->num_heads, c->num_kv_heads = lc->num_kv_heads, c->head_dim = lc->head_dim;
  c->intermediate_size = lc->intermediate_size;
  c->max_position_embeddings = c->max_seq_len = lc->max_position_embeddings;
  c->num_labels = 1, c->norm_eps = lc->rms_norm_eps, c->act = VR_ACT_SILU, c->pad_token_id = -1;
  c->attention_bias = lc->qkv_bias, c->o_bias = lc->o_bias, c->mlp_bias = lc->mlp_bias;
  c->tie_word_embeddings = lc->tie_word_embeddings, c->sliding_window = lc->sliding_window;
  c->rope_theta = lc->rope_theta, c->rope_attention_scaling = lc->rope_attention_scaling;
  c->rope_inv_freq = (float *)lc->rope_inv_freq; /* borrowed: vr_rollout never frees cfg members */
  v->layers = calloc((size_t)lc->num_layers, sizeof *v->layers);
  if (!v->layers) return VR_ERR_NOMEM;
  for (int l = 0; l < lc->num_layers; l++) {
    const vr_lm_layer_index_t *a = &ix->layers[l];
    vr_rollout_layer_w_t *d = &v->layers[l];
    d->q_w = vr_rlm_at(lm, a->q_w), d->q_b = vr_rlm_at(lm, a->q_b);
    d->k_w = vr_rlm_at(lm, a->k_w), d->k_b = vr_rlm_at(lm, a->k_b);
    d->v_w = vr_rlm_at(lm, a->v_w), d->v_b = vr_rlm_at(lm, a->v_b);
    d->o_w = vr_rlm_at(lm, a->o_w), d->o_b = vr_rlm_at(lm, a->o_b);
    d->gate_w = vr_rlm_at(lm, a->gate_w), d->gate_b = vr_rlm_at(lm, a->gate_b);
    d->up_w = vr_rlm_at(lm, a->up_w), d->up_b = vr_rlm_at(lm, a->up_b);
    d->down_w = vr_rlm_at(lm, a->down_w), d->down_b = vr_rlm_at(lm, a->down_b);
    d->norm1_w = vr_rlm_at(lm, a->norm1), d->norm2_w = vr_rlm_at(lm, a->norm2);
  }
  v->w.tok_emb = vr_rlm_at(lm, ix->embed);
  v->w.final_norm_w = vr_rlm_at(lm, ix->final_norm);
  v->w.lm_head = ix->lm_head >= 0 ? vr_rlm_at(lm, ix->lm_head) : v->w.tok_emb;
  v->w.layers = v->layers;
  return 0;
}

void vr_rollout_lm_view_free(vr_rollout_lm_t *v) {
  free(v->layers);
  memset(v, 0, sizeof *v);
}

int vr_rollout_from_lm(const vr_lm_t *lm, const vr_rollout_options_t *opt, vr_rollout_lm_t *v, vr_rollout_t **out) {
  *out = NULL;
  int rc = vr_rollout_lm_view(lm, v);
  if (rc == 0) rc = vr_rollout_init(&v->cfg, vr_lm_params_const(lm), vr_lm_n_floats(lm), &v->w, opt, out);
  if (rc != 0) vr_rollout_lm_view_free(v);
  return rc;
}

/* A small JSON file parsed; NULL with *rc 0 when it does not exist. */
static cJSON *vr_rlm_json(const char *path, int *rc) {
  *rc = 0;
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (errno != ENOENT) {
      vr_log(VR_LOG_ERROR, "%s: cannot open: %s", path, strerror(errno));
      *rc = VR_ERR_IO;
    }
    return NULL;
  }
  char *buf = malloc(1 << 20);
  size_t n = buf ? fread(buf, 1, 1 << 20, f) : 0;
  int too_big = buf && n == (1 << 20);
  fclose(f);
  cJSON *j = buf && !too_big ? cJSON_ParseWithLength(buf, n) : NULL;
  free(buf);
  if (!j || !cJSON_IsObject(j)) {
    vr_log(VR_LOG_ERROR, "%s: %s", path, too_big ? "larger than 1 MiB" : "not a JSON object");
    cJSON_Delete(j);
    *rc = VR_ERR_MODEL_FORMAT;
    return NULL;
  }
  return j;
}

/* eos_token_id of j into ids; 1 when the key was there, 0 when absent or null, <0 on a bad type. */
static int vr_rlm_eos_of(const cJSON *j, const char *path, int vocab, int32_t *ids, uint32_t cap, uint32_t *n) {
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id");
  if (!e || cJSON_IsNull(e)) return 0;
  const cJSON *one = cJSON_IsArray(e) ? e->child : e;
  for (; one; one = cJSON_IsArray(e) ? one->next : NULL) {
    if (!cJSON_IsNumber(one) || floor(one->valuedouble) != one->valuedouble) {
      vr_log(VR_LOG_ERROR, "%s: \"eos_token_id\" must be an integer or a list of integers", path);
      return VR_ERR_MODEL_FORMAT;
    }
    if (one->valuedouble < 0 || one->valuedouble >= vocab) {
      vr_log(VR_LOG_WARN, "%s: eos_token_id %.0f is outside the vocabulary [0, %d): ignored", path, one->valuedouble, vocab);
    } else if (*n < cap) {
      ids[(*n)++] = (int32_t)one->valuedouble;
    }
    if (!cJSON_IsArray(e)) break;
  }
  return 1;
}

int vr_rollout_eos_ids(const char *dir, int vocab, int32_t *ids, uint32_t cap, uint32_t *n) {
  *n = 0;
  static const char *const files[] = {"generation_config.json", "config.json"};
  for (int f = 0; f < 2; f++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, files[f]);
    int rc;
    cJSON *j = vr_rlm_json(path, &rc);
    if (rc != 0) return rc;
    if (!j) continue;
    int got = vr_rlm_eos_of(j, path, vocab, ids, cap, n);
    cJSON_Delete(j);
    if (got < 0) return got;
    if (got) return 0; /* the first file that names it wins, as transformers' generation config */
  }
  return 0;
}
