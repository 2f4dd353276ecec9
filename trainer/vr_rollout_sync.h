/* vr_rollout_sync.h: the actor -> rollout weight update over the trainer's weight-sync group
 * (vr_comm.h: actor and rollout workers, the actor's first worker at group rank 0).
 *
 * The root sends its parameter buffer (vr_lm's contiguous fp32 layout: the actor's training engine's
 * own buffer, vr_train_param_buffer). Nothing is reloaded from disk. By the group's memory kind:
 *
 * MPI groups (host buffers): one broadcast of the whole buffer. A member with a rollout engine
 * receives straight into the backend's own parameter storage when the backend offers one in host
 * memory (cpu backend: no second copy), else into the engine's host staging buffer followed by
 * set_params.
 *
 * NCCL groups (device buffers): the buffer goes in chunks of VR_ROLLOUT_SYNC_CHUNK floats (32
 * MiB). A member with an engine whose backend converts from device memory (set_weights_device:
 * cuda) receives each chunk into a device scratch of one chunk, the backend's own device_chunk when
 * it is large enough (cuda: its upload staging buffer, so no device memory is added) or one chunk
 * allocated for the call, and converts it into its bf16 weights before the next chunk arrives: the
 * extra device memory is bounded by one chunk, never a second full copy. A backend with a device
 * param_buffer receives the chunks in place. A member without an engine (another actor rank)
 * receives into its own buffer. (fp32 chunks rather than bf16 ones: twice the bytes on the wire,
 * but the root needs no conversion scratch and the rollout rounds exactly as set_weights does.)
 *
 * The root's own engine (actor and rollout colocated in one worker, e.g. on one GPU): converted
 * from the root's buffer directly: device to device when params_on_device (the backend's
 * set_weights_device; no host round trip, no staging; VR_ERR_UNSUPPORTED for a backend without
 * it), set_params from host memory otherwise.
 *
 * *seconds covers the broadcasts (with any wait for the root to reach them) and the hand-over to
 * the backend (conversions included: they are synchronous).
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

#define VR_ROLLOUT_SYNC_CHUNK ((size_t)8 << 20) /* floats per NCCL broadcast (32 MiB) */

/* root: the group rank that sends (0 for the weight-sync group). params: the sender's buffer at the
 * root, a member's own buffer when it has no engine (r NULL), ignored otherwise (may be NULL); in
 * device memory on NCCL groups. params_on_device: whether params is device memory (the root's
 * colocated engine needs to know also on a group of one, which may be MPI). n_params: floats, the
 * same on every member (checked against r's). */
int vr_rollout_sync_weights(vr_world_t *w, vr_group_t *g, int root, float *params, int params_on_device,
                            size_t n_params, vr_rollout_t *r, double *seconds);

#ifdef __cplusplus
}
#endif
#endif /* VR_ROLLOUT_SYNC_H */
