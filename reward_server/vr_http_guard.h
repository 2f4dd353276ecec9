/* vr_http_guard.h: what stands between evhttp and the clients of the HTTP front
 * (issue 18 case 7): a connection cap, a whole-request deadline and a back-off
 * of the listener when accept() runs out of file descriptors.
 *
 * libevent 2.1's evhttp has none of these (its timeout is per read, so a client
 * trickling one byte per timeout keeps a connection forever, and its listener
 * retries a failing accept() at once, forever). The guard makes the bufferevent
 * of every connection evhttp accepts (evhttp_set_bevcb) and keeps a reference
 * to it, so it can tell when evhttp has freed the connection (its callbacks are
 * cleared; our reference then closes the socket), keeps a list of the live
 * ones, and sweeps that list twice a second:
 *   - over max_conns live connections, the newest are shut down at once
 *     (evhttp sees EOF and frees them);
 *   - a connection that is not being served and has not completed a request
 *     within deadline_s of its accept or of its last reply is shut down (this
 *     also closes keep-alive connections idle that long).
 * On EMFILE / ENFILE / ENOBUFS / ENOMEM from accept() the listener is disabled
 * for 100 ms and one WARN per 10 s says so (with the count of the others).
 * Event-loop thread only, like evhttp. */
#ifndef VR_HTTP_GUARD_H
#define VR_HTTP_GUARD_H

#include <stdint.h>

struct event_base;
struct evhttp;
struct evhttp_bound_socket;
struct evhttp_request;

typedef struct vr_http_guard vr_http_guard_t;

/* Installs the guard on eh (before any connection) and on its bound socket's
 * listener. max_conns >= 1, deadline_s >= 1. NULL on allocation failure. */
vr_http_guard_t *vr_http_guard_create(struct event_base *base, struct evhttp *eh, struct evhttp_bound_socket *bound,
                                      uint32_t max_conns, uint32_t deadline_s);

/* A request of req's connection is being served (from its callback until its
 * reply): its deadline does not run meanwhile. end() restarts the clock. */
void vr_http_guard_begin(vr_http_guard_t *g, struct evhttp_request *req);
void vr_http_guard_end(vr_http_guard_t *g, struct evhttp_request *req);

/* Live connections (for tests and metrics). */
uint32_t vr_http_guard_connections(const vr_http_guard_t *g);

/* Stops the sweep and the back-off timer. Call before evhttp_free; the
 * connections' records are freed as evhttp frees the connections. */
void vr_http_guard_free(vr_http_guard_t *g);

#endif /* VR_HTTP_GUARD_H */
