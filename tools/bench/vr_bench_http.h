/* vr_bench_http.h: a synchronous keep-alive HTTP/1.1 client on libevent's evhttp.
 *
 * One vr_http_t = one event_base + one evhttp connection (reconnected by
 * libevent when the server closes it). vr_http_request() sends one request and
 * runs the base until the response (or an error / timeout) arrives, so one
 * bench client = one connection with at most one request in flight.
 * Threading: a handle belongs to one thread at a time. */
#ifndef VR_BENCH_HTTP_H
#define VR_BENCH_HTTP_H

#include <stddef.h>
#include <stdint.h>

typedef struct vr_http vr_http_t;

#define VR_HTTP_MAX_BODY (64u << 20) /* larger responses fail with VR_ERR_TOO_LARGE */

/* Creates the handle (no connection is made until the first request).
 * timeout_us bounds every request (connect + send + response). 0 or a status. */
int vr_http_open(const char *host, uint16_t port, int64_t timeout_us, vr_http_t **out);
void vr_http_close(vr_http_t *h);

/* One request: method "GET" (body NULL) or "POST" with content_type + body.
 * On success (the server answered, any status code) returns 0, sets
 * *http_status and points *resp at the body (NUL-terminated; owned by h,
 * valid until the next request). Transport failures: VR_ERR_IO (connection
 * refused / reset), VR_ERR_TIMEOUT, VR_ERR_TOO_LARGE (body over the limit). */
int vr_http_request(vr_http_t *h, const char *method, const char *path, const char *content_type,
                    const void *body, size_t body_len, int *http_status, const uint8_t **resp,
                    size_t *resp_len);

/* Splits "host:port" or "http://host:port[/]" into host/port. 0 or VR_ERR_PARSE. */
int vr_http_parse_url(const char *url, char *host, size_t host_n, uint16_t *port);

#endif
