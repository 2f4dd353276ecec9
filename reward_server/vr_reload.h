/* vr_reload.h: replacing the model and settings of a running server (SIGHUP,
 * POST /admin/reload).
 *
 * A reload parses the settings again (--config file and command line: --model,
 * --log-level, --max-wait-us, --batch-linger-us, --max-queue and --max-queue-per-client
 * may change; any other change refuses the reload), loads the model they name (a new
 * directory, or the same one holding other weights) on a thread of its own, beside the one
 * serving, and warms it up (a NaN/Inf warm-up score refuses it). The new model must take the same requests
 * as the old one (same vocabulary size and effective max_seq_len: the shm segment
 * publishes them to clients), else it is refused. With several replicas (--device list) the
 * model is loaded and warmed up on every one of them (all or none). Then the batcher switches
 * every replica to it at once between two batches (the batches in flight finish on the old
 * model), with the new batching settings, and the old models are freed on the event loop. Any failure keeps the old model
 * and settings serving and is logged (ERROR) and counted.
 * Event-loop thread only (start, free); one reload at a time. */
#ifndef VR_RELOAD_H
#define VR_RELOAD_H

#include <stdint.h>

#include "vr_server.h"

typedef struct vr_reload vr_reload_t;

/* NULL on allocation failure. */
vr_reload_t *vr_reload_create(vr_server_t *srv);

/* Starts a reload (why: "SIGHUP", "POST /admin/reload" for the log). 0: started;
 * VR_ERR_BUSY: one is running; VR_ERR_AGAIN: the server is not serving (starting,
 * draining) or has no model to reload; VR_ERR_NOMEM. */
int vr_reload_start(vr_reload_t *r, const char *why);

/* Reloads finished so far, and those of them that failed. */
void vr_reload_counts(const vr_reload_t *r, uint64_t *done, uint64_t *failed);

/* Joins a running reload (it finishes; its result is not switched in). NULL-safe. */
void vr_reload_free(vr_reload_t *r);

#endif /* VR_RELOAD_H */
