/* vr_dispatch.h: the shm dispatcher thread.
 *
 * Drains every lane (vr_shm_server_poll), validates each request's sequences
 * and extras, and submits it to the batcher; the batcher's done() answers it
 * with vr_shm_server_complete (scores, per-sequence status, components,
 * queue/compute timings). Requests that fail validation, or that the batcher
 * refuses (overloaded, shutting down), are answered at once. All
 * vr_shm_server_complete calls go through one mutex. */
#ifndef VR_DISPATCH_H
#define VR_DISPATCH_H

#include "vr_server.h"

typedef struct vr_dispatch vr_dispatch_t;

/* Starts the thread on srv->shm (must be non-NULL, srv->batcher running). */
int vr_dispatch_start(vr_server_t *srv, vr_dispatch_t **out);

/* Stops intake: the thread takes what clients already published (polling
 * without waiting until the rings are empty), submits it, then exits; joins.
 * Call after setting the segment DRAINING. NULL is a no-op. */
void vr_dispatch_stop(vr_dispatch_t *d);

/* Frees; only after the batcher thread has exited (its done() calls use d). */
void vr_dispatch_free(vr_dispatch_t *d);

#endif /* VR_DISPATCH_H */
