/* vr_server.c: what the server context reports about itself (vr_server.h).
 * Lives apart from main.c so the modules that report it (the HTTP front's
 * /metrics) depend on the context, not on the program that owns it. */
#include "vr_server.h"

#include <string.h>

#include "vr_model.h"
#include "vr_shm.h"

void vr_server_gauges(vr_server_t *srv, vr_metrics_gauges_t *g) {
  memset(g, 0, sizeof *g);
  g->queue_depth = srv->batcher ? vr_batcher_depth(srv->batcher) : 0;
  g->queue_capacity = srv->st.max_queue;
  if (srv->shm) {
    g->lanes_in_use = vr_shm_server_lanes_in_use(srv->shm);
    g->shm_inflight = vr_shm_server_inflight(srv->shm);
    g->lanes_total = srv->st.lanes;
  }
  g->http_inflight = __atomic_load_n(&srv->http_inflight, __ATOMIC_RELAXED);
  _Static_assert(VR_METRICS_MAX_REPLICAS == VR_SETTINGS_MAX_REPLICAS, "a series per replica");
  for (uint32_t r = 0; __atomic_load_n(&srv->loaded, __ATOMIC_ACQUIRE) && r < srv->scorer.n_replicas; r++) {
    struct vr_model *model = __atomic_load_n(&srv->scorer.models[r], __ATOMIC_ACQUIRE); /* a reload switches it */
    if (!model) continue;
    const vr_model_info_t *mi = vr_model_info(model);
    g->replica_device_bytes[r] = mi->device_bytes;
    g->device_bytes += mi->device_bytes;
    g->host_bytes += mi->host_bytes;
  }
  g->ready = __atomic_load_n(&srv->ready, __ATOMIC_RELAXED);
  g->draining = __atomic_load_n(&srv->draining, __ATOMIC_RELAXED);
  g->have_process = vr_metrics_process_stats(&g->process) == 0;
}
