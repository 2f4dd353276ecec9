/* vr_server.h: the server's one context (settings, scorer, queue, transports).
 *
 * Ownership: main() owns the vr_server_t and everything in it. Threads:
 *   - main / event loop: HTTP (vr_http), signals, shutdown orchestration;
 *   - dispatcher (vr_dispatch): drains shm lanes into the batcher;
 *   - batcher (vr_batcher): one worker per model replica (--device list); packs, scores,
 *     answers (shm directly, HTTP via a wakeup of the event loop);
 *   - loader (main.c, start-up only): fills scorer while the loop already serves
 *     /health and /ready; joined by the loop thread before loaded is set.
 * Fields are written before the threads start, except the atomics below and
 * scorer.models[], which a reload switches (vr_batcher_swap_models stores them atomically;
 * readers on the loop thread load them atomically; vr_reload.h). */
#ifndef VR_SERVER_H
#define VR_SERVER_H

#include <stdint.h>

#include "vr_batcher.h"
#include "vr_metrics.h"
#include "vr_scorer.h"
#include "vr_settings.h"

struct event_base;
struct vr_http;
struct vr_dispatch;
struct vr_shm_server;
struct vr_reload;

typedef struct vr_server {
  vr_settings_t st;
  vr_scorer_t scorer;
  vr_metrics_t metrics;
  vr_batcher_t *batcher;
  struct vr_shm_server *shm;     /* NULL when --shm-name is empty */
  struct vr_dispatch *dispatch;
  struct event_base *base;
  struct vr_http *http;          /* NULL when --port 0 */
  struct vr_reload *reload;      /* SIGHUP / POST /admin/reload (vr_reload.h); loop thread */
  char admin_token[256];         /* from --admin-token-file; "" = POST /admin/reload off */
  int argc;                      /* the command line, parsed again by a reload */
  char **argv;
  int loaded;                    /* atomic: 1 once the loader thread was joined; before, only that
                                    thread touches scorer (the loop reads none of it) */
  int ready;                     /* atomic: 1 once warmed up and accepting */
  int draining;                  /* atomic: 1 after SIGTERM/SIGINT */
  uint32_t http_inflight;        /* atomic: HTTP score requests not yet answered */
} vr_server_t;

/* Samples the gauges /metrics reports (vr_server.c). Thread-safe. */
void vr_server_gauges(vr_server_t *srv, vr_metrics_gauges_t *g);

#endif /* VR_SERVER_H */
