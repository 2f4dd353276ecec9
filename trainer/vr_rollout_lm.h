/* vr_rollout_lm.h: a rollout engine on a vr_lm_t (the trainer's causal-LM handle, vr_lm.h).
 *
 * vr_rollout_lm_view describes the handle to the engine: the vr_model_config_t the backends read
 * (converted from vr_lm_config_t; rope_inv_freq borrowed from the lm) and the weights view, whose
 * pointers point into vr_lm_params(lm) at the tensor table's offsets. The engine copies the
 * parameters; the lm may be freed after vr_rollout_from_lm, the view must outlive the engine (the
 * engine keeps the config by pointer) and the lm must outlive the view (rope_inv_freq).
 *
 * Weight updates: vr_rollout_set_params(r, buf, vr_lm_n_floats(lm), ...) with any buffer in the
 * lm's layout (the actor's vr_lm_params), or vr_rollout_sync_weights over the weight-sync group.
 * Only head VR_LM_HEAD_LM generates (VR_ERR_UNSUPPORTED for a value head). */
#ifndef VR_ROLLOUT_LM_H
#define VR_ROLLOUT_LM_H

#include "vr_lm.h"
#include "vr_rollout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vr_rollout_lm {
  vr_model_config_t cfg;
  vr_rollout_weights_t w;
  vr_rollout_layer_w_t *layers; /* (num_layers), owned */
} vr_rollout_lm_t;

int vr_rollout_lm_view(const vr_lm_t *lm, vr_rollout_lm_t *v);
void vr_rollout_lm_view_free(vr_rollout_lm_t *v);

/* View + engine in one call (v filled, free it after the engine). */
int vr_rollout_from_lm(const vr_lm_t *lm, const vr_rollout_options_t *opt, vr_rollout_lm_t *v, vr_rollout_t **out);

#ifdef __cplusplus
}
#endif
#endif /* VR_ROLLOUT_LM_H */
