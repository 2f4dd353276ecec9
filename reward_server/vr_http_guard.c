/* vr_http_guard.c: connection cap, whole-request deadline and accept back-off
 * for the evhttp front (see vr_http_guard.h). */
#define _GNU_SOURCE
#include "vr_http_guard.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "vr_log.h"
#include "vr_log_limit.h"
#include "vr_time.h"

#define SWEEP_MS 500
#define BACKOFF_MS 100

typedef struct conn {
  struct conn *prev, *next;
  struct bufferevent *bev;     /* the one evhttp uses (we hold a reference) */
  uint64_t since_ns;           /* accept, or the last reply */
  uint32_t busy;               /* requests being served */
} conn_t;

struct vr_http_guard {
  struct event_base *base;
  struct evconnlistener *listener;
  struct event *sweep_ev, *backoff_ev;
  conn_t head;                 /* sentinel */
  uint32_t n, max_conns;
  uint64_t deadline_ns;
  vr_log_limit_t accept_log, close_log;
};

/* evhttp's bufferevent of a new connection: ours, with a reference of ours, so the
 * sweep can tell when evhttp has freed it (bufferevent_free clears its callbacks; the
 * socket is closed when our reference goes too). */
static struct bufferevent *make_bev(struct event_base *base, void *arg) {
  vr_http_guard_t *g = arg;
  conn_t *c = calloc(1, sizeof *c);
  struct bufferevent *bev = c ? bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE) : NULL;
  if (!bev) { /* evhttp then makes a plain bufferevent: served, but not guarded */
    free(c);
    vr_log_limited(&g->close_log, VR_LOG_WARN, "out of memory guarding an HTTP connection");
    return NULL;
  }
  bufferevent_incref(bev);
  c->bev = bev;
  c->since_ns = vr_now_ns();
  c->next = g->head.next;
  c->prev = &g->head;
  g->head.next->prev = c;
  g->head.next = c;
  g->n++;
  return bev;
}

/* Drops our record (and reference) of c. */
static void forget(vr_http_guard_t *g, conn_t *c) {
  c->prev->next = c->next;
  c->next->prev = c->prev;
  g->n--;
  bufferevent_decref(c->bev);
  free(c);
}

/* 1 once evhttp freed c's connection. */
static int gone(conn_t *c) {
  bufferevent_data_cb r = NULL, w = NULL;
  bufferevent_event_cb e = NULL;
  bufferevent_getcb(c->bev, &r, &w, &e, NULL);
  return !r && !w && !e;
}

static conn_t *find(vr_http_guard_t *g, struct evhttp_request *req) {
  struct evhttp_connection *evcon = req ? evhttp_request_get_connection(req) : NULL;
  struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
  for (conn_t *c = g->head.next; bev && c != &g->head; c = c->next)
    if (c->bev == bev) return c;
  return NULL;
}

void vr_http_guard_begin(vr_http_guard_t *g, struct evhttp_request *req) {
  conn_t *c = g ? find(g, req) : NULL;
  if (c) c->busy++;
}

void vr_http_guard_end(vr_http_guard_t *g, struct evhttp_request *req) {
  conn_t *c = g ? find(g, req) : NULL;
  if (!c) return;
  if (c->busy) c->busy--;
  c->since_ns = vr_now_ns();
}

uint32_t vr_http_guard_connections(const vr_http_guard_t *g) { return g ? g->n : 0; }

/* Ends c's connection: evhttp sees EOF and frees it (the next sweep forgets it). */
static void cut(conn_t *c) {
  evutil_socket_t fd = bufferevent_getfd(c->bev);
  if (fd >= 0) shutdown(fd, SHUT_RDWR);
}

static void sweep_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  vr_http_guard_t *g = arg;
  uint64_t now = vr_now_ns();
  for (conn_t *c = g->head.next, *nx; c != &g->head; c = nx) {
    nx = c->next;
    if (gone(c)) forget(g, c);
  }
  /* over the cap: the newest (the list is newest first) beyond max_conns */
  uint32_t k = 0, over = g->n > g->max_conns ? g->n - g->max_conns : 0, cut_over = 0, cut_late = 0;
  for (conn_t *c = g->head.next; c != &g->head; c = c->next, k++) {
    if (k < over) {
      cut(c);
      cut_over++;
    } else if (!c->busy && now - c->since_ns > g->deadline_ns) {
      cut(c);
      cut_late++;
    }
  }
  if (cut_over)
    vr_log_limited(&g->close_log, VR_LOG_WARN, "HTTP: %u connections over the cap (--max-connections %u) closed",
                   cut_over, g->max_conns);
  if (cut_late)
    vr_log_limited(&g->close_log, VR_LOG_WARN,
                   "HTTP: %u connections closed that completed no request within %llu s (--request-timeout-s)",
                   cut_late, (unsigned long long)(g->deadline_ns / 1000000000ull));
  vr_log_limit_flush(&g->accept_log);
  vr_log_limit_flush(&g->close_log);
}

static void backoff_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  vr_http_guard_t *g = arg;
  evconnlistener_enable(g->listener);
}

/* event_base_foreach_event: the guard is the argument of the sweep event. */
static int find_guard(const struct event_base *base, const struct event *ev, void *out) {
  (void)base;
  if (event_get_callback(ev) != sweep_cb) return 0;
  *(vr_http_guard_t **)out = event_get_callback_arg(ev);
  return 1;
}

/* The listener's error callback gets evhttp's argument, not ours: the guard is found
 * through its sweep event (this runs at most once per back-off). */
static void accept_error_cb(struct evconnlistener *l, void *arg) {
  (void)arg;
  int e = EVUTIL_SOCKET_ERROR();
  vr_http_guard_t *g = NULL;
  event_base_foreach_event(evconnlistener_get_base(l), find_guard, &g);
  if (!g) return;
  if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
    evconnlistener_disable(l);
    struct timeval tv = {0, BACKOFF_MS * 1000};
    evtimer_add(g->backoff_ev, &tv);
  }
  vr_log_limited(&g->accept_log, VR_LOG_WARN, "HTTP accept(): %s (%u connections open); %s", strerror(e), g->n,
                 e == EMFILE || e == ENFILE ? "pausing the listener 100 ms. HINT: raise the fd limit (ulimit -n) or lower "
                                              "--max-connections"
                 : e == ENOBUFS || e == ENOMEM ? "pausing the listener 100 ms (the kernel is short of memory)"
                                               : "retrying");
}

vr_http_guard_t *vr_http_guard_create(struct event_base *base, struct evhttp *eh, struct evhttp_bound_socket *bound,
                                      uint32_t max_conns, uint32_t deadline_s) {
  vr_http_guard_t *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->base = base;
  g->head.next = g->head.prev = &g->head;
  g->max_conns = max_conns ? max_conns : 1;
  g->deadline_ns = (uint64_t)(deadline_s ? deadline_s : 1) * 1000000000ull;
  vr_log_limit_init(&g->accept_log, "accept errors", 1, 10ull * 1000000000ull);
  vr_log_limit_init(&g->close_log, "connections closed", 5, 10ull * 1000000000ull);
  g->sweep_ev = event_new(base, -1, EV_PERSIST, sweep_cb, g);
  g->backoff_ev = evtimer_new(base, backoff_cb, g);
  g->listener = bound ? evhttp_bound_socket_get_listener(bound) : NULL;
  if (!g->sweep_ev || !g->backoff_ev || !g->listener) {
    vr_http_guard_free(g);
    return NULL;
  }
  struct timeval tv = {0, SWEEP_MS * 1000};
  event_add(g->sweep_ev, &tv);
  evconnlistener_set_error_cb(g->listener, accept_error_cb);
  evhttp_set_bevcb(eh, make_bev, g);
  return g;
}

void vr_http_guard_free(vr_http_guard_t *g) {
  if (!g) return;
  if (g->sweep_ev) event_free(g->sweep_ev);
  if (g->backoff_ev) event_free(g->backoff_ev);
  while (g->head.next != &g->head) forget(g, g->head.next);
  vr_log_limit_free(&g->accept_log);
  vr_log_limit_free(&g->close_log);
  free(g);
}
