/* vr_rollout_sync.c: weight update over the weight-sync group (vr_rollout_sync.h). */
#include "vr_rollout_sync.h"

#include "verl_reward/status.h"
#include "vr_log.h"
#include "vr_time.h"

int vr_rollout_sync_weights(vr_world_t *w, vr_group_t *g, int root, float *params, size_t n_params, vr_rollout_t *r,
                            double *seconds) {
  const uint64_t t0 = vr_now_ns();
  if (seconds) *seconds = 0;
  if (!g) return VR_ERR_INVAL;
  const int me = vr_group_rank(g), dev = vr_group_is_device(g);
  float *dst = params;
  int direct = 0;
  if (r && me != root) {
    if (n_params != vr_rollout_n_params(r)) {
      vr_log(VR_LOG_ERROR, "weight sync: %zu parameters sent, the rollout engine holds %zu", n_params,
             vr_rollout_n_params(r));
      return VR_ERR_INVAL;
    }
    size_t nb = 0;
    int on_dev = 0;
    float *own = vr_rollout_param_buffer(r, &nb, &on_dev);
    if (own && nb == n_params && on_dev == dev) {
      dst = own; /* the broadcast lands in the backend's weights */
      direct = 1;
    } else if (dev) {
      vr_log(VR_LOG_ERROR, "weight sync: the %s group's broadcast writes device memory, and the rollout backend "
             "offers no device parameter buffer", vr_group_name(VR_GROUP_WEIGHT_SYNC));
      return VR_ERR_UNSUPPORTED;
    } else {
      dst = vr_rollout_staging(r);
      if (!dst) return VR_ERR_NOMEM;
    }
  }
  if (!dst) return VR_ERR_INVAL;
  int rc = vr_group_bcast(w, g, dst, n_params * sizeof(float), root);
  if (rc != 0) return rc;
  if (r && me != root) rc = direct ? vr_rollout_params_updated(r) : vr_rollout_set_params(r, dst, n_params, NULL);
  else if (r) rc = vr_rollout_set_params(r, params, n_params, NULL); /* an engine colocated with the root */
  if (seconds) *seconds = (double)(vr_now_ns() - t0) * 1e-9;
  return rc;
}
