/* vr_rollout_sync.h: the actor -> rollout weight update over the trainer's weight-sync group
 * (vr_comm.h: actor and rollout workers, the actor's first worker at group rank 0).
 *
 * One broadcast of the whole parameter buffer (vr_lm's contiguous fp32 layout) from the root. A
 * member with a rollout engine receives straight into the backend's own parameter storage when the
 * backend offers one of the group's memory kind (cpu backend on an MPI group: host memory; nothing
 * reloaded, no second copy), else into the engine's host staging buffer followed by set_params. A
 * member without an engine (another actor rank) passes its own buffer: it receives the root's
 * values. The seconds reported cover the broadcast (with any wait for the root to reach it) and
 * the hand-over to the backend.
 *
 * Every member of g calls it, from the thread that owns the world. Returns 0, a vr_comm error
 * (VR_COMM_ETIMEDOUT / VR_COMM_EFAIL: the group is unusable afterwards) or a vr_status_t. */
#ifndef VR_ROLLOUT_SYNC_H
#define VR_ROLLOUT_SYNC_H

#include <stddef.h>

#include "vr_comm.h"
#include "vr_rollout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* root: the group rank that sends (0 for the weight-sync group). params: the sender's buffer at the
 * root, a member's own buffer when it has no engine (r NULL), ignored otherwise (may be NULL).
 * n_params: floats, the same on every member (checked against r's). */
int vr_rollout_sync_weights(vr_world_t *w, vr_group_t *g, int root, float *params, size_t n_params, vr_rollout_t *r,
                            double *seconds);

#ifdef __cplusplus
}
#endif
#endif /* VR_ROLLOUT_SYNC_H */
