/* vr_http.h: the HTTP front (libevent evhttp on the event-loop thread).
 *
 *   POST /v1/score   JSON or application/msgpack: {"input_ids": [[...]], "extras": [{...}]},
 *                    or {"text": [...]} / {"messages": [[...]]} (vr_text.h): those are tokenised
 *                    on the HTTP text worker thread, never on the event loop
 *   GET  /health /ready /metrics /v1/model
 *   the framework routes (vLLM /classify, SGLang /v1/classify /v1/embeddings, OpenRLHF
 *   /get_reward, TEI /predict /info, GET /v1/models): vr_http_compat.h, the same queue
 *   POST /admin/reload (with --admin-token-file; vr_reload.h)
 *
 * Every evhttp object is touched only on the event-loop thread: the parse
 * thread (bodies are parsed off the loop) and the batcher hand finished
 * requests back through a mutex-guarded list and event_active() (the base must
 * have been created after evthread_use_pthreads()). */
#ifndef VR_HTTP_H
#define VR_HTTP_H

#include "vr_server.h"

typedef struct vr_http vr_http_t;

/* Binds st.host:st.port on srv->base; may run before the model is loaded: until srv->ready the
 * handlers read nothing of srv->scorer (/health "starting", /ready, /v1/model and POST /v1/score
 * 503 with Retry-After; /metrics from the gauges). Returns 0 or VR_ERR_IO (logged, with the address). */
int vr_http_create(vr_server_t *srv, vr_http_t **out);

/* The model was switched (a reload): GET /v1/model describes the new one. Loop thread. */
void vr_http_model_changed(vr_http_t *h);

/* Score requests accepted and not yet answered (event-loop thread). */
uint32_t vr_http_pending(const vr_http_t *h);

/* Called on the event loop when the last pending request was answered and
 * replies had a moment to flush (used by shutdown). */
void vr_http_on_idle(vr_http_t *h, void (*cb)(void *), void *arg);

/* Stops and joins the parse thread; bodies still queued are answered
 * VR_ERR_SHUTTING_DOWN (on the loop, later). Call before the batcher is freed.
 * Idempotent; NULL is a no-op. */
void vr_http_stop_parsing(vr_http_t *h);

/* Frees the listener and every connection. Call on the event-loop thread after
 * every pending request was answered. NULL is a no-op. */
void vr_http_free(vr_http_t *h);

#endif /* VR_HTTP_H */
