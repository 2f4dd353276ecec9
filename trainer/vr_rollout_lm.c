/* vr_rollout_lm.c: the engine on a vr_lm_t (vr_rollout_lm.h). */
#include "vr_rollout_lm.h"

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
