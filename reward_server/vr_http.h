/* vr_http.h: the HTTP front (libevent evhttp on the event-loop thread).
 *
 *   POST /v1/score   JSON or application/msgpack: {"input_ids": [[...]], "extras": [{...}]},
 *                    or {"text": [...]} / {"messages": [[...]]} (vr_text.h): those are tokenised
 *                    on the HTTP text worker thread, never on the event loop
 *   GET  /health /ready /metrics /v1/model
 *
 * Every evhttp object is touched only on the event-loop thread: the batcher
 * hands finished requests back through a mutex-guarded list and event_active()
 * (the base must have been created after evthread_use_pthreads()). */
#ifndef VR_HTTP_H
#define VR_HTTP_H

#include "vr_server.h"

typedef struct vr_http vr_http_t;

/* Binds st.host:st.port on srv->base; may run before the model is loaded: until srv->ready the
 * handlers read nothing of srv->scorer (/health "starting", /ready, /v1/model and POST /v1/score
 * 503 with Retry-After; /metrics from the gauges). Returns 0 or VR_ERR_IO (logged, with the address). */
int vr_http_create(vr_server_t *srv, vr_http_t **out);

/* Score requests accepted and not yet answered (event-loop thread). */
uint32_t vr_http_pending(const vr_http_t *h);

/* Called on the event loop when the last pending request was answered and
 * replies had a moment to flush (used by shutdown). */
void vr_http_on_idle(vr_http_t *h, void (*cb)(void *), void *arg);

/* Frees the listener and every connection. Call on the event-loop thread after
 * every pending request was answered. NULL is a no-op. */
void vr_http_free(vr_http_t *h);

#endif /* VR_HTTP_H */
