/* vr_rollout_sync.c: weight update over the weight-sync group (vr_rollout_sync.h). */
#include "vr_rollout_sync.h"

#include "verl_reward/status.h"
#include "vr_log.h"
#include "vr_time.h"

/* MPI groups: one broadcast of the whole buffer (into the backend's host storage or the staging). */
static int sync_host(vr_world_t *w, vr_group_t *g, int root, float *params, size_t n, vr_rollout_t *r) {
  const int me = vr_group_rank(g);
  float *dst = params;
  int direct = 0;
  if (r && me != root) {
    size_t nb = 0;
    int on_dev = 0;
    float *own = vr_rollout_param_buffer(r, &nb, &on_dev);
    if (own && nb == n && !on_dev) {
      dst = own; /* the broadcast lands in the backend's weights */
      direct = 1;
    } else {
      dst = vr_rollout_staging(r);
      if (!dst) return VR_ERR_NOMEM;
    }
  }
  if (!dst) return VR_ERR_INVAL;
  int rc = vr_group_bcast(w, g, dst, n * sizeof(float), root);
  if (rc != 0 || !r || me == root) return rc;
  return direct ? vr_rollout_params_updated(r) : vr_rollout_set_params(r, dst, n, NULL);
}

/* NCCL groups: chunk by chunk; an engine member converts each chunk as it arrives. */
static int sync_device(vr_world_t *w, vr_group_t *g, int root, float *params, size_t n, vr_rollout_t *r) {
  const int me = vr_group_rank(g);
  float *base = params, *chunk = NULL, *mine = NULL; /* base: chunks land at base + off */
  if (r && me != root) {
    size_t nb = 0, nc = 0;
    int on_dev = 0;
    float *own = vr_rollout_param_buffer(r, &nb, &on_dev);
    if (own && nb == n && on_dev) {
      base = own;
    } else if (vr_rollout_has_device_update(r)) {
      base = NULL;
      chunk = vr_rollout_device_chunk(r, &nc);
      if (!chunk || nc < VR_ROLLOUT_SYNC_CHUNK) {
        chunk = mine = vr_group_alloc(g, VR_ROLLOUT_SYNC_CHUNK * sizeof(float));
        if (!chunk) {
          vr_log(VR_LOG_ERROR, "weight sync: cannot allocate the %zu MiB device chunk",
                 VR_ROLLOUT_SYNC_CHUNK * sizeof(float) >> 20);
          return VR_ERR_NOMEM;
        }
      }
    } else {
      vr_log(VR_LOG_ERROR, "weight sync: the %s group's broadcast writes device memory, and the rollout backend "
             "offers neither a device parameter buffer nor set_weights_device", vr_group_name(VR_GROUP_WEIGHT_SYNC));
      return VR_ERR_UNSUPPORTED;
    }
  }
  if (!base && !chunk) return VR_ERR_INVAL;
  int rc = 0;
  for (size_t off = 0; off < n && rc == 0; off += VR_ROLLOUT_SYNC_CHUNK) {
    const size_t len = n - off < VR_ROLLOUT_SYNC_CHUNK ? n - off : VR_ROLLOUT_SYNC_CHUNK;
    rc = vr_group_bcast(w, g, base ? base + off : chunk, len * sizeof(float), root);
    if (rc == 0 && chunk) rc = vr_rollout_set_params_device(r, chunk, off, len, NULL);
  }
  if (mine) vr_group_free_buf(g, mine);
  if (rc == 0 && r && me != root && base) rc = vr_rollout_params_updated(r);
  return rc;
}

int vr_rollout_sync_weights(vr_world_t *w, vr_group_t *g, int root, float *params, int params_on_device,
                            size_t n_params, vr_rollout_t *r, double *seconds) {
  const uint64_t t0 = vr_now_ns();
  if (seconds) *seconds = 0;
  if (!g) return VR_ERR_INVAL;
  if (r && n_params != vr_rollout_n_params(r)) {
    vr_log(VR_LOG_ERROR, "weight sync: %zu parameters sent, the rollout engine holds %zu", n_params,
           vr_rollout_n_params(r));
    return VR_ERR_INVAL;
  }
  const int me = vr_group_rank(g);
  int rc = 0;
  if (vr_group_size(g) > 1) rc = vr_group_is_device(g) ? sync_device(w, g, root, params, n_params, r)
                                                        : sync_host(w, g, root, params, n_params, r);
  if (rc == 0 && r && me == root) { /* an engine colocated with the root */
    if (!params) rc = VR_ERR_INVAL;
    else if (params_on_device) rc = vr_rollout_set_params_device(r, params, 0, n_params, NULL);
    else rc = vr_rollout_set_params(r, params, n_params, NULL);
  }
  if (seconds) *seconds = (double)(vr_now_ns() - t0) * 1e-9;
  return rc;
}
