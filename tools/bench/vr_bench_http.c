/* vr_bench_http.c: see vr_bench_http.h. */
#include "vr_bench_http.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_log.h"

struct vr_http {
  struct event_base *base;
  struct evhttp_connection *conn;
  char host[256];
  uint16_t port;
  char host_hdr[280];
  /* state of the request in flight */
  int done;
  int status;             /* 0 or a vr_status_t */
  int code;
  enum evhttp_request_error err;
  int got_err;
  uint8_t *resp;
  size_t resp_len, resp_cap;
};

int vr_http_parse_url(const char *url, char *host, size_t host_n, uint16_t *port) {
  const char *p = url;
  if (strncmp(p, "http://", 7) == 0) p += 7;
  const char *colon = strrchr(p, ':');
  if (!colon || colon == p || (size_t)(colon - p) >= host_n) goto bad;
  char *end;
  errno = 0;
  unsigned long v = strtoul(colon + 1, &end, 10);
  if (errno || end == colon + 1 || v == 0 || v > 65535 || (*end != '\0' && strcmp(end, "/") != 0))
    goto bad;
  memcpy(host, p, (size_t)(colon - p));
  host[colon - p] = '\0';
  *port = (uint16_t)v;
  return 0;
bad:
  vr_log(VR_LOG_ERROR, "bad server address '%s' (want HOST:PORT or http://HOST:PORT)", url);
  return VR_ERR_PARSE;
}

int vr_http_open(const char *host, uint16_t port, int64_t timeout_us, vr_http_t **out) {
  vr_http_t *h = calloc(1, sizeof(*h));
  if (!h) return VR_ERR_NOMEM;
  snprintf(h->host, sizeof(h->host), "%s", host);
  snprintf(h->host_hdr, sizeof(h->host_hdr), "%s:%u", host, port);
  h->port = port;
  h->base = event_base_new();
  if (h->base) h->conn = evhttp_connection_base_new(h->base, NULL, h->host, port);
  if (!h->base || !h->conn) {
    vr_log(VR_LOG_ERROR, "libevent: cannot create a connection to %s", h->host_hdr);
    vr_http_close(h);
    return VR_ERR_NOMEM;
  }
  if (timeout_us <= 0) timeout_us = 30000000;
  struct timeval tv = {.tv_sec = timeout_us / 1000000, .tv_usec = timeout_us % 1000000};
  evhttp_connection_set_timeout_tv(h->conn, &tv);
  evhttp_connection_set_retries(h->conn, 0);
  evhttp_connection_set_max_body_size(h->conn, VR_HTTP_MAX_BODY);
  *out = h;
  return 0;
}

void vr_http_close(vr_http_t *h) {
  if (!h) return;
  if (h->conn) evhttp_connection_free(h->conn);
  if (h->base) event_base_free(h->base);
  free(h->resp);
  free(h);
}

static void on_error(enum evhttp_request_error err, void *arg) {
  vr_http_t *h = arg;
  h->got_err = 1;
  h->err = err;
}

static void on_done(struct evhttp_request *req, void *arg) {
  vr_http_t *h = arg;
  h->done = 1;
  event_base_loopbreak(h->base);
  if (!req || evhttp_request_get_response_code(req) == 0) {
    h->status = (h->got_err && h->err == EVREQ_HTTP_TIMEOUT) ? VR_ERR_TIMEOUT
              : (h->got_err && h->err == EVREQ_HTTP_DATA_TOO_LONG) ? VR_ERR_TOO_LARGE : VR_ERR_IO;
    return;
  }
  h->code = evhttp_request_get_response_code(req);
  struct evbuffer *in = evhttp_request_get_input_buffer(req);
  size_t n = evbuffer_get_length(in);
  if (n > VR_HTTP_MAX_BODY) {
    h->status = VR_ERR_TOO_LARGE;
    return;
  }
  if (n + 1 > h->resp_cap) {
    size_t cap = h->resp_cap ? h->resp_cap : 4096;
    while (cap < n + 1) cap *= 2;
    uint8_t *p = realloc(h->resp, cap);
    if (!p) {
      h->status = VR_ERR_NOMEM;
      return;
    }
    h->resp = p;
    h->resp_cap = cap;
  }
  if (evbuffer_remove(in, h->resp, n) != (int)n) {
    h->status = VR_ERR_IO;
    return;
  }
  h->resp[n] = 0;
  h->resp_len = n;
  h->status = 0;
}

int vr_http_request(vr_http_t *h, const char *method, const char *path, const char *content_type,
                    const void *body, size_t body_len, int *http_status, const uint8_t **resp,
                    size_t *resp_len) {
  h->done = 0;
  h->got_err = 0;
  h->status = VR_ERR_IO;
  h->code = 0;
  h->resp_len = 0;
  struct evhttp_request *req = evhttp_request_new(on_done, h);
  if (!req) return VR_ERR_NOMEM;
  evhttp_request_set_error_cb(req, on_error);
  struct evkeyvalq *hdr = evhttp_request_get_output_headers(req);
  evhttp_add_header(hdr, "Host", h->host_hdr);
  evhttp_add_header(hdr, "Connection", "keep-alive");
  int post = strcmp(method, "POST") == 0;
  if (post) {
    if (content_type) evhttp_add_header(hdr, "Content-Type", content_type);
    if (body_len && evbuffer_add(evhttp_request_get_output_buffer(req), body, body_len) != 0) {
      evhttp_request_free(req);
      return VR_ERR_NOMEM;
    }
  }
  /* evhttp_make_request owns req from here on (frees it on failure too) */
  if (evhttp_make_request(h->conn, req, post ? EVHTTP_REQ_POST : EVHTTP_REQ_GET, path) != 0) {
    vr_log(VR_LOG_DEBUG, "evhttp_make_request %s %s failed", method, path);
    return VR_ERR_IO;
  }
  while (!h->done) {
    /* 1 = nothing pending although the request has not completed: a bug, not a hang */
    if (event_base_dispatch(h->base) != 0 && !h->done) return VR_ERR_INTERNAL;
  }
  if (h->status != 0) return h->status;
  *http_status = h->code;
  if (resp) *resp = h->resp ? h->resp : (const uint8_t *)"";
  if (resp_len) *resp_len = h->resp_len;
  return 0;
}
