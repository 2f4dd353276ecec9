/* vr_http.c: evhttp front; every evhttp call happens on the event-loop thread.
 *
 * A POST /v1/score body is received by libevent on the loop thread (non-blocking,
 * in pieces), then moved (its buffer chain, not its bytes) to the parse thread,
 * which parses, validates and submits it to the batcher: one large body never
 * holds up the loop, so /health and every other connection keep being served
 * (issue 18 case 6). Replies are always made on the loop thread, through the
 * done list. The parse thread takes bodies one at a time: the memory that
 * parsing a large body takes (the JSON tree) is bounded by one body's worth,
 * and is given back to the system after a large one (malloc_trim). */
#define _GNU_SOURCE
#include "vr_http.h"

#include <cjson/cJSON.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <malloc.h>
#include <math.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>

#include "verl_reward/status.h"
#include "vr_http_compat.h"
#include "vr_http_guard.h"
#include "vr_log.h"
#include "vr_model.h"
#include "vr_reload.h"
#include "vr_request.h"
#include "vr_time.h"
#include "vr_tok_chat.h"
#include "vr_tokenizer.h"

#define VR_HTTP_TRIM_BYTES (1u << 20) /* bodies from this size on: malloc_trim after their parse */

/* One POST /v1/score between intake and reply. Created and freed on the event
 * thread; between vr_batcher_submit and done() the batcher owns job fields. */
typedef struct http_pending {
  vr_job_t job;
  vr_http_t *h;
  struct evhttp_request *req; /* stays valid until we reply (libevent detaches it on EOF) */
  int msgpack;                /* reply encoding */
  int msgpack_in;             /* body encoding */
  vr_score_req_t r;
  vr_compat_route_t route;    /* VR_COMPAT_NONE: POST /v1/score; else the framework route */
  vr_compat_req_t *compat;    /* that route's reply shape (set by its parse) */
  struct evbuffer *body;      /* the request body, moved here for the parse thread; NULL once parsed */
  int failed;                 /* parse or submit failed: reply perr (job.status holds the status) */
  vr_req_error_t perr;
  struct http_pending *next;  /* parse queue, then done list */
} http_pending_t;

struct vr_http {
  vr_server_t *srv;
  struct evhttp *eh;
  struct event *wake_ev;      /* activated by the batcher when done list is non-empty */
  pthread_mutex_t mu;         /* guards done */
  http_pending_t *done;
  uint32_t pending;           /* event thread only */
  void (*idle_cb)(void *);
  void *idle_arg;
  char *model_json;           /* GET /v1/model body, built once */
  vr_http_guard_t *guard;     /* connection cap, request deadline, accept back-off */
  /* the parse thread */
  pthread_t parse_th;
  int parse_started;
  pthread_mutex_t pmu;        /* guards the parse queue and parse_stop */
  pthread_cond_t pcv;
  http_pending_t *pq_head, *pq_tail;
  int parse_stop;
};

/* ------------------------------------------------------------------ replies */

static void reply(vr_http_t *h, struct evhttp_request *req, int code, const char *ctype, struct evbuffer *body) {
  struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
  evhttp_add_header(oh, "Content-Type", ctype);
  evhttp_add_header(oh, "Server", "verl-reward-server");
  if (code == 503 || code == 429) evhttp_add_header(oh, "Retry-After", "1");
  vr_metrics_http_response(&h->srv->metrics, code);
  vr_http_guard_end(h->guard, req);
  const char *reason = code == 200 ? "OK" : code == 400 ? "Bad Request" : code == 404 ? "Not Found"
                    : code == 405 ? "Method Not Allowed" : code == 413 ? "Payload Too Large"
                    : code == 429 ? "Too Many Requests" : code == 503 ? "Service Unavailable"
                    : code == 415 ? "Unsupported Media Type" : code == 202 ? "Accepted"
                    : code == 401 ? "Unauthorized" : code == 409 ? "Conflict" : "Internal Server Error";
  evhttp_send_reply(req, code, reason, body);
}

/* Errors outside the vr_status_t mapping (404, 405). */
static void reply_plain_error(vr_http_t *h, struct evhttp_request *req, int code, const char *vr_code,
                              const char *msg) {
  struct evbuffer *b = evbuffer_new();
  evbuffer_add_printf(b, "{\"error\":{\"code\":\"%s\",\"message\":\"%s\"}}\n", vr_code, msg);
  reply(h, req, code, "application/json", b);
  evbuffer_free(b);
}

static int http_code_of(int status) {
  switch (status) {
    case VR_ERR_TOO_LARGE: return 413;
    case VR_ERR_OVERLOADED: return 429;
    case VR_ERR_SHUTTING_DOWN: case VR_ERR_AGAIN: return 503;
    case VR_ERR_NOMEM: case VR_ERR_INTERNAL: case VR_ERR_DEVICE: return 500;
    case VR_ERR_NONFINITE: return 500; /* the model's fault (its weights), not the request's */
    default: return status < 0 ? 400 : 500;
  }
}

/* {"error": {"code": "VR_ERR_...", "status": -11, "message": "...", "sequence": 3}} */
static void reply_error(vr_http_t *h, struct evhttp_request *req, int status, int64_t seq, const char *msg) {
  cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
  cJSON_AddStringToObject(err, "code", vr_status_name(status));
  cJSON_AddNumberToObject(err, "status", status);
  cJSON_AddStringToObject(err, "message", msg);
  if (seq >= 0) cJSON_AddNumberToObject(err, "sequence", (double)seq);
  char *s = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  struct evbuffer *b = evbuffer_new();
  if (s) evbuffer_add(b, s, strlen(s));
  evbuffer_add(b, "\n", 1);
  free(s);
  int code = http_code_of(status);
  vr_log(code >= 500 ? VR_LOG_WARN : VR_LOG_DEBUG, "HTTP %d %s: %s", code, vr_status_name(status), msg);
  reply(h, req, code, "application/json", b);
  evbuffer_free(b);
}

static void json_floats(struct evbuffer *b, const float *v, uint32_t n, uint32_t stride) {
  evbuffer_add(b, "[", 1);
  for (uint32_t i = 0; i < n; i++) {
    float x = v[(size_t)i * stride];
    if (isfinite(x)) evbuffer_add_printf(b, i ? ",%.9g" : "%.9g", (double)x);
    else evbuffer_add_printf(b, i ? ",null" : "null");
  }
  evbuffer_add(b, "]", 1);
}

static int sbuf_write(void *data, const char *buf, size_t len) {
  return evbuffer_add((struct evbuffer *)data, buf, len);
}

/* Scores with per-sequence errors (issue 18): a sequence the model could not score (its score
 * was NaN/Inf) is null in scores and has {"code", "status", "message"} at its index of
 * "errors" (present only then; null for the good ones, whose scores are kept). */
static void reply_scores(vr_http_t *h, http_pending_t *p) {
  const vr_scorer_t *sc = &h->srv->scorer;
  const uint32_t n = p->r.n_seqs, nc = sc->spec.n;
  const int with_errors = p->job.status != 0;
  struct evbuffer *b = evbuffer_new();
  if (p->compat) {
    uint8_t id[16];
    vr_compat_random_id(id);
    vr_compat_reply(p->compat, sc, p->job.scores, p->job.components, n, p->r.n_tokens, (int64_t)time(NULL), id, b);
    reply(h, p->req, 200, "application/json", b);
  } else if (!p->msgpack) {
    evbuffer_add_printf(b, "{\"scores\":");
    json_floats(b, p->job.scores, n, 1);
    if (with_errors) {
      evbuffer_add_printf(b, ",\"errors\":[");
      for (uint32_t i = 0; i < n; i++) {
        int e = p->job.seq_status[i];
        if (e) evbuffer_add_printf(b, "%s{\"code\":\"%s\",\"status\":%d,\"message\":\"%s\"}", i ? "," : "",
                                   vr_status_name(e), e, vr_strerror(e));
        else evbuffer_add_printf(b, i ? ",null" : "null");
      }
      evbuffer_add(b, "]", 1);
    }
    evbuffer_add_printf(b, ",\"queue_us\":%u,\"compute_us\":%u", p->job.queue_us, p->job.compute_us);
    if (sc->has_components) {
      evbuffer_add_printf(b, ",\"components\":{");
      for (uint32_t c = 0; c < nc; c++) {
        evbuffer_add_printf(b, "%s\"%s\":", c ? "," : "", sc->spec.rules[c].name);
        json_floats(b, p->job.components + c, n, nc);
      }
      evbuffer_add(b, "}", 1);
    }
    evbuffer_add(b, "}\n", 2);
    reply(h, p->req, 200, "application/json", b);
  } else {
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, sbuf_write);
    msgpack_pack_map(&pk, (sc->has_components ? 4 : 3) + (with_errors ? 1 : 0));
    msgpack_pack_str_with_body(&pk, "scores", 6);
    msgpack_pack_array(&pk, n);
    for (uint32_t i = 0; i < n; i++) {
      if (isfinite(p->job.scores[i])) msgpack_pack_float(&pk, p->job.scores[i]);
      else msgpack_pack_nil(&pk);
    }
    if (with_errors) {
      msgpack_pack_str_with_body(&pk, "errors", 6);
      msgpack_pack_array(&pk, n);
      for (uint32_t i = 0; i < n; i++) {
        int e = p->job.seq_status[i];
        if (!e) {
          msgpack_pack_nil(&pk);
          continue;
        }
        const char *code = vr_status_name(e), *msg = vr_strerror(e);
        msgpack_pack_map(&pk, 3);
        msgpack_pack_str_with_body(&pk, "code", 4);
        msgpack_pack_str_with_body(&pk, code, strlen(code));
        msgpack_pack_str_with_body(&pk, "status", 6);
        msgpack_pack_int32(&pk, e);
        msgpack_pack_str_with_body(&pk, "message", 7);
        msgpack_pack_str_with_body(&pk, msg, strlen(msg));
      }
    }
    msgpack_pack_str_with_body(&pk, "queue_us", 8);
    msgpack_pack_uint32(&pk, p->job.queue_us);
    msgpack_pack_str_with_body(&pk, "compute_us", 10);
    msgpack_pack_uint32(&pk, p->job.compute_us);
    if (sc->has_components) {
      msgpack_pack_str_with_body(&pk, "components", 10);
      msgpack_pack_map(&pk, nc);
      for (uint32_t c = 0; c < nc; c++) {
        msgpack_pack_str_with_body(&pk, sc->spec.rules[c].name, strlen(sc->spec.rules[c].name));
        msgpack_pack_array(&pk, n);
        for (uint32_t i = 0; i < n; i++) {
          float x = p->job.components[(size_t)i * nc + c];
          if (isfinite(x)) msgpack_pack_float(&pk, x);
          else msgpack_pack_nil(&pk);
        }
      }
    }
    reply(h, p->req, 200, "application/msgpack", b);
  }
  evbuffer_free(b);
}

static void pending_free(http_pending_t *p) {
  if (p->body) evbuffer_free(p->body);
  vr_request_free(&p->r);
  vr_compat_free(p->compat);
  vr_job_free_outputs(&p->job);
  free(p);
}

/* ------------------------------------------------------------------ completion */

/* Batcher thread: hand the finished request to the event loop. */
static void http_job_done(vr_job_t *job) {
  http_pending_t *p = (http_pending_t *)job;
  vr_http_t *h = p->h;
  pthread_mutex_lock(&h->mu);
  p->next = h->done;
  h->done = p;
  pthread_mutex_unlock(&h->mu);
  event_active(h->wake_ev, EV_READ, 0);
}

/* Parse thread: a request that failed before the batcher took it goes to the
 * loop thread like a finished one. */
static void pending_fail(http_pending_t *p, int status, int64_t seq, const char *msg) {
  p->failed = 1;
  p->job.status = status;
  p->perr.status = status;
  p->perr.sequence = seq;
  if (msg != p->perr.message) snprintf(p->perr.message, sizeof p->perr.message, "%s", msg);
  http_job_done(&p->job);
}

/* Parse thread: parse, validate and submit one body. */
static void parse_one(vr_http_t *h, http_pending_t *p) {
  vr_server_t *srv = h->srv;
  size_t len = evbuffer_get_length(p->body);
  const char *body = len ? (const char *)evbuffer_pullup(p->body, -1) : "";
  int rc = !body ? VR_ERR_NOMEM
         : p->route ? vr_compat_parse(p->route, body, len, &srv->scorer, srv->st.max_seqs_per_request, srv->st.model,
                                      &p->r, &p->compat, &p->perr)
         : p->msgpack_in ? vr_request_parse_msgpack((const uint8_t *)body, len, &srv->scorer,
                                                    srv->st.max_seqs_per_request, &p->r, &p->perr)
                         : vr_request_parse_json(body, len, &srv->scorer, srv->st.max_seqs_per_request, &p->r, &p->perr);
  evbuffer_free(p->body);
  p->body = NULL;
  if (len >= VR_HTTP_TRIM_BYTES) malloc_trim(0); /* the parse of a large body: give its memory back */
  if (rc) {
    pending_fail(p, rc, body ? p->perr.sequence : -1, body ? p->perr.message : "out of memory");
    return;
  }
  if (p->r.text.kind != VR_TEXT_NONE) { /* "text" / "messages": template + tokenizer here, off the loop */
    int32_t *ids = NULL;
    uint64_t nt = 0;
    memset(&p->perr, 0, sizeof p->perr);
    p->perr.sequence = -1;
    rc = vr_text_encode(srv->scorer.tok, &p->r.text, &ids, p->r.cu, &nt, &p->perr);
    if (!rc) {
      p->r.ids = ids;
      p->r.n_tokens = nt;
      rc = vr_request_check_seqs(&p->r, &srv->scorer, &p->perr);
    }
    if (rc) {
      pending_fail(p, rc, p->perr.sequence, p->perr.message);
      return;
    }
  }
  const uint32_t n = p->r.n_seqs;
  if (vr_job_alloc_outputs(&p->job, n, srv->scorer.spec.n) != 0) {
    pending_fail(p, VR_ERR_NOMEM, -1, "out of memory");
    return;
  }
  vr_job_t *j = &p->job;
  j->transport = VR_TRANSPORT_HTTP;
  j->n_seqs = n;
  j->n_tokens = p->r.n_tokens;
  j->ids = p->r.ids;
  j->cu = p->r.cu;
  j->extras = p->r.extras_ptrs;
  j->done = http_job_done;
  j->user = p;
  rc = vr_batcher_submit(srv->batcher, j);
  if (rc)
    pending_fail(p, rc, -1,
                 rc == VR_ERR_OVERLOADED ? "server overloaded: request queue full (--max-queue); retry later"
                                         : vr_strerror(rc));
}

static void *parse_main(void *arg) {
  vr_http_t *h = arg;
  pthread_mutex_lock(&h->pmu);
  for (;;) {
    while (!h->pq_head && !h->parse_stop) pthread_cond_wait(&h->pcv, &h->pmu);
    if (!h->pq_head) break;
    http_pending_t *p = h->pq_head;
    h->pq_head = p->next;
    if (!h->pq_head) h->pq_tail = NULL;
    p->next = NULL;
    int stopping = h->parse_stop;
    pthread_mutex_unlock(&h->pmu);
    if (stopping) /* the batcher may be gone: answer, do not submit */
      pending_fail(p, VR_ERR_SHUTTING_DOWN, -1, "server is shutting down; no new requests accepted");
    else
      parse_one(h, p);
    pthread_mutex_lock(&h->pmu);
  }
  pthread_mutex_unlock(&h->pmu);
  return NULL;
}

static void finish_pending(vr_http_t *h, http_pending_t *p) {
  int st = p->job.status;
  if (p->failed) {
    reply_error(h, p->req, st, p->perr.sequence, p->perr.message);
  } else if (st == 0 || st == VR_ERR_NONFINITE) { /* scored: a non-finite score is its sequence's error */
    reply_scores(h, p);
  } else {
    int64_t bad = -1;
    for (uint32_t i = 0; i < p->r.n_seqs && bad < 0; i++)
      if (p->job.seq_status[i]) bad = i;
    char msg[200];
    if (bad >= 0) snprintf(msg, sizeof msg, "sequence %lld: %s", (long long)bad, vr_strerror(p->job.seq_status[bad]));
    else snprintf(msg, sizeof msg, "%s", vr_strerror(st));
    reply_error(h, p->req, st, bad, msg);
  }
  double lat = (vr_now_ns() - p->job.accepted_ns) / 1e9;
  vr_metrics_request(&h->srv->metrics, VR_TRANSPORT_HTTP, st, p->failed && st != VR_ERR_OVERLOADED ? 0 : p->r.n_seqs,
                     p->failed && st != VR_ERR_OVERLOADED ? 0 : p->r.n_tokens, lat);
  pending_free(p);
  h->pending--;
  __atomic_store_n(&h->srv->http_inflight, h->pending, __ATOMIC_RELAXED);
}

static void check_idle(vr_http_t *h) {
  if (h->pending == 0 && h->idle_cb) {
    void (*cb)(void *) = h->idle_cb;
    h->idle_cb = NULL;
    cb(h->idle_arg);
  }
}

static void wake_cb(evutil_socket_t fd, short what, void *arg) {
  vr_http_t *h = arg;
  pthread_mutex_lock(&h->mu);
  http_pending_t *list = h->done;
  h->done = NULL;
  pthread_mutex_unlock(&h->mu);
  /* the list is newest first: reverse to answer in completion order */
  http_pending_t *rev = NULL;
  while (list) {
    http_pending_t *n = list->next;
    list->next = rev;
    rev = list;
    list = n;
  }
  while (rev) {
    http_pending_t *n = rev->next;
    finish_pending(h, rev);
    rev = n;
  }
  check_idle(h);
}

/* ------------------------------------------------------------------ handlers */

static int is_msgpack_type(const char *ct) {
  return ct && (strncasecmp(ct, "application/msgpack", 19) == 0 || strncasecmp(ct, "application/x-msgpack", 21) == 0);
}

/* POST /v1/score, or a vr_http_compat route (route != VR_COMPAT_NONE: JSON of that shape). */
static void handle_score(vr_http_t *h, struct evhttp_request *req, vr_compat_route_t route) {
  vr_server_t *srv = h->srv;
  uint64_t t0 = vr_now_ns();
  if (!__atomic_load_n(&srv->ready, __ATOMIC_ACQUIRE) && !__atomic_load_n(&srv->draining, __ATOMIC_ACQUIRE)) {
    /* starting: the scorer (its vocabulary, limits) is not ours to read yet */
    vr_metrics_request(&srv->metrics, VR_TRANSPORT_HTTP, VR_ERR_AGAIN, 0, 0, 0);
    reply_error(h, req, VR_ERR_AGAIN, -1,
                "server is starting (loading the model); retry when GET /ready answers 200");
    return;
  }
  if (__atomic_load_n(&srv->draining, __ATOMIC_ACQUIRE)) {
    vr_metrics_request(&srv->metrics, VR_TRANSPORT_HTTP, VR_ERR_SHUTTING_DOWN, 0, 0, 0);
    reply_error(h, req, VR_ERR_SHUTTING_DOWN, -1, "server is shutting down; no new requests accepted");
    return;
  }
  struct evkeyvalq *ih = evhttp_request_get_input_headers(req);
  const char *ct = evhttp_find_header(ih, "Content-Type");
  int mp = is_msgpack_type(ct);
  /* anything but msgpack is parsed as JSON (curl -d sends form-urlencoded) */
  http_pending_t *p = calloc(1, sizeof *p);
  if (!p || !(p->body = evbuffer_new())) {
    free(p);
    reply_error(h, req, VR_ERR_NOMEM, -1, "out of memory");
    return;
  }
  /* the body's buffer chain moves to the parse thread; no byte is copied here */
  evbuffer_add_buffer(p->body, evhttp_request_get_input_buffer(req));
  p->h = h;
  p->req = req;
  p->msgpack_in = mp;
  p->msgpack = mp;
  const char *accept = evhttp_find_header(ih, "Accept");
  if (accept && strstr(accept, "application/json") && !strstr(accept, "msgpack")) p->msgpack = 0;
  if (accept && is_msgpack_type(accept)) p->msgpack = 1;
  p->route = route;
  p->job.accepted_ns = t0;
  /* fairness: one client per connection (the high bit keeps it apart from shm lanes) */
  p->job.client = (uint64_t)(uintptr_t)evhttp_request_get_connection(req) | (1ull << 63);
  h->pending++;
  __atomic_store_n(&srv->http_inflight, h->pending, __ATOMIC_RELAXED);
  pthread_mutex_lock(&h->pmu);
  if (h->pq_tail) h->pq_tail->next = p;
  else h->pq_head = p;
  h->pq_tail = p;
  pthread_cond_signal(&h->pcv);
  pthread_mutex_unlock(&h->pmu);
}

static void handle_text(vr_http_t *h, struct evhttp_request *req, int code, const char *ctype, const char *text,
                        size_t len) {
  struct evbuffer *b = evbuffer_new();
  evbuffer_add(b, text, len);
  reply(h, req, code, ctype, b);
  evbuffer_free(b);
}

static void handle_metrics(vr_http_t *h, struct evhttp_request *req) {
  vr_metrics_gauges_t g;
  vr_server_gauges(h->srv, &g);
  size_t len = 0;
  char *text = vr_metrics_render(&h->srv->metrics, &g, &len);
  if (!text) {
    reply_error(h, req, VR_ERR_NOMEM, -1, "out of memory rendering metrics");
    return;
  }
  handle_text(h, req, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
  free(text);
}

static char *build_model_json(const vr_server_t *srv) {
  const vr_scorer_t *sc = &srv->scorer;
  cJSON *o = cJSON_CreateObject();
  if (sc->kind == VR_SCORER_MODEL) {
    const vr_model_info_t *mi = vr_model_info(__atomic_load_n(&sc->models[0], __ATOMIC_ACQUIRE));
    cJSON_AddStringToObject(o, "architecture", mi->architecture);
    cJSON_AddStringToObject(o, "model_type", mi->model_type);
    cJSON_AddBoolToObject(o, "is_decoder", mi->is_decoder);
    cJSON_AddNumberToObject(o, "vocab_size", mi->vocab_size);
    cJSON_AddNumberToObject(o, "hidden_size", mi->hidden_size);
    cJSON_AddNumberToObject(o, "num_layers", mi->num_layers);
    cJSON_AddNumberToObject(o, "num_heads", mi->num_heads);
    cJSON_AddNumberToObject(o, "num_kv_heads", mi->num_kv_heads);
    cJSON_AddNumberToObject(o, "head_dim", mi->head_dim);
    cJSON_AddNumberToObject(o, "intermediate_size", mi->intermediate_size);
    cJSON_AddNumberToObject(o, "max_positions", mi->max_positions);
    cJSON_AddNumberToObject(o, "num_labels", mi->num_labels);
    cJSON_AddStringToObject(o, "dtype", mi->compute_dtype);
    cJSON_AddStringToObject(o, "weights_dtype", mi->weights_dtype);
    cJSON_AddStringToObject(o, "device_name", mi->device_name);
    cJSON_AddNumberToObject(o, "param_count", (double)mi->param_count);
  } else {
    cJSON_AddStringToObject(o, "architecture", sc->kind == VR_SCORER_CHECKSUM ? "checksum" : "none");
    cJSON_AddNumberToObject(o, "vocab_size", 0);
    cJSON_AddStringToObject(o, "dtype", sc->kind == VR_SCORER_CHECKSUM ? "f32" : "none");
    cJSON_AddStringToObject(o, "device", sc->kind == VR_SCORER_CHECKSUM ? "cpu" : "none");
  }
  /* one entry per replica (--device list); "device" and "device_memory_bytes" sum them up */
  char devs[VR_SETTINGS_DEVICES_STR] = "";
  size_t at = 0;
  double dev_bytes = 0;
  cJSON *reps = cJSON_AddArrayToObject(o, "replicas");
  for (uint32_t r = 0; r < sc->n_replicas; r++) {
    cJSON *e = cJSON_CreateObject();
    const struct vr_model *m = sc->kind == VR_SCORER_MODEL ? __atomic_load_n(&sc->models[r], __ATOMIC_ACQUIRE) : NULL;
    const vr_model_info_t *ri = m ? vr_model_info(m) : NULL;
    const char *dev = sc->kind == VR_SCORER_NONE ? "none" : sc->devices[r];
    cJSON_AddNumberToObject(e, "replica", r);
    cJSON_AddStringToObject(e, "device", dev);
    cJSON_AddStringToObject(e, "device_name", ri ? ri->device_name : dev);
    cJSON_AddNumberToObject(e, "device_memory_bytes", ri ? (double)ri->device_bytes : 0);
    cJSON_AddItemToArray(reps, e);
    at += (size_t)snprintf(devs + at, sizeof devs - at, "%s%s", r ? "," : "", dev);
    dev_bytes += ri ? (double)ri->device_bytes : 0;
  }
  if (sc->kind == VR_SCORER_MODEL) {
    cJSON_AddStringToObject(o, "device", devs);
    cJSON_AddNumberToObject(o, "device_memory_bytes", dev_bytes);
  }
  cJSON_AddStringToObject(o, "model", srv->st.model);
  /* "text"/"messages" requests: accepted when the model directory's tokenizer loaded */
  cJSON_AddBoolToObject(o, "text_input", sc->tok != NULL);
  cJSON_AddBoolToObject(o, "chat_template", sc->tok && vr_tok_chat_template(sc->tok, NULL) != NULL);
  if (sc->tok) cJSON_AddNumberToObject(o, "tokenizer_vocab_size", (double)vr_tok_vocab_size(sc->tok));
  else cJSON_AddStringToObject(o, "tokenizer", sc->tok_note[0] ? sc->tok_note : "no model");
  cJSON_AddNumberToObject(o, "max_seq_len", sc->max_seq_len);
  cJSON_AddStringToObject(o, "truncate", vr_truncate_name(sc->truncate));
  char spec[512];
  vr_reward_spec_format(&sc->spec, spec, sizeof spec);
  cJSON_AddStringToObject(o, "reward", spec);
  cJSON *names = cJSON_AddArrayToObject(o, "components");
  for (uint32_t c = 0; c < sc->spec.n; c++) cJSON_AddItemToArray(names, cJSON_CreateString(sc->spec.rules[c].name));
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return s;
}

/* POST /admin/reload with "Authorization: Bearer <token>" (--admin-token-file): 202 started,
 * 409 one is running, 503 not serving; 401 without the token; 404 when no token is set. */
static void handle_admin_reload(vr_http_t *h, struct evhttp_request *req, enum evhttp_cmd_type cmd) {
  vr_server_t *srv = h->srv;
  if (!srv->admin_token[0] || !srv->reload) {
    reply_plain_error(h, req, 404, "VR_ERR_NOT_FOUND", "no such endpoint (start the server with --admin-token-file)");
    return;
  }
  if (cmd != EVHTTP_REQ_POST) {
    reply_plain_error(h, req, 405, "VR_ERR_INVAL", "use POST for /admin/reload");
    return;
  }
  const char *auth = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
  const size_t tl = strlen(srv->admin_token);
  int ok = auth && strncmp(auth, "Bearer ", 7) == 0 && strlen(auth + 7) == tl;
  unsigned diff = 0; /* constant time in the token's length */
  for (size_t i = 0; ok && i < tl; i++) diff |= (unsigned)(auth[7 + i] ^ srv->admin_token[i]);
  if (!ok || diff) {
    vr_log(VR_LOG_WARN, "POST /admin/reload without the admin token: refused");
    reply_plain_error(h, req, 401, "VR_ERR_PERM", "missing or wrong admin token (Authorization: Bearer ...)");
    return;
  }
  int rc = vr_reload_start(srv->reload, "POST /admin/reload");
  const char *t = rc == 0 ? "{\"reload\":\"started\"}\n" : rc == VR_ERR_BUSY ? "{\"reload\":\"running\"}\n"
                                                                       : "{\"reload\":\"refused\"}\n";
  handle_text(h, req, rc == 0 ? 202 : rc == VR_ERR_BUSY ? 409 : 503, "application/json", t, strlen(t));
}

static void gen_cb(struct evhttp_request *req, void *arg) {
  vr_http_t *h = arg;
  vr_http_guard_begin(h->guard, req); /* every path below replies, which ends it */
  const char *uri = evhttp_request_get_uri(req);
  enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
  char path[128];
  size_t n = strcspn(uri ? uri : "", "?");
  if (n >= sizeof path) n = sizeof path - 1;
  memcpy(path, uri ? uri : "", n);
  path[n] = 0;
  int is_get = cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD;
  if (strcmp(path, "/admin/reload") == 0) {
    handle_admin_reload(h, req, cmd);
    return;
  }
  if (strcmp(path, "/v1/score") == 0) {
    if (cmd != EVHTTP_REQ_POST) {
      reply_plain_error(h, req, 405, "VR_ERR_INVAL", "use POST for /v1/score");
      return;
    }
    { handle_score(h, req, VR_COMPAT_NONE); return; }
  }
  const vr_compat_route_t compat = vr_compat_route(path);
  if (vr_compat_is_post(compat)) {
    if (cmd != EVHTTP_REQ_POST) { reply_plain_error(h, req, 405, "VR_ERR_INVAL", "use POST"); return; }
    handle_score(h, req, compat);
    return;
  }
  int known = compat || !strcmp(path, "/health") || !strcmp(path, "/ready") || !strcmp(path, "/metrics") ||
              !strcmp(path, "/v1/model");
  if (!known) {
    reply_plain_error(h, req, 404, "VR_ERR_NOT_FOUND", "no such endpoint");
    return;
  }
  if (!is_get) {
    reply_plain_error(h, req, 405, "VR_ERR_INVAL", "use GET");
    return;
  }
  vr_server_t *srv = h->srv;
  const int ready = __atomic_load_n(&srv->ready, __ATOMIC_ACQUIRE);
  if (!strcmp(path, "/health")) {
    /* alive: 200 in every state; the body says which (liveness probes only need the code) */
    const char *t = ready ? "{\"status\":\"ok\"}\n" : "{\"status\":\"starting\"}\n";
    handle_text(h, req, 200, "application/json", t, strlen(t));
    return;
  }
  if (!strcmp(path, "/ready")) {
    const int serving = ready && !__atomic_load_n(&srv->draining, __ATOMIC_ACQUIRE);
    const char *t = serving ? "{\"ready\":true}\n"
                          : __atomic_load_n(&srv->draining, __ATOMIC_ACQUIRE) ? "{\"ready\":false,\"state\":\"draining\"}\n"
                                                                             : "{\"ready\":false,\"state\":\"starting\"}\n";
    { handle_text(h, req, serving ? 200 : 503, "application/json", t, strlen(t)); return; }
  }
  if (!strcmp(path, "/metrics")) { handle_metrics(h, req); return; }
  if (!ready) { /* GET /v1/model: nothing to describe before the load */
    static const char t[] = "{\"error\":{\"code\":\"VR_ERR_AGAIN\",\"message\":\"server is starting (loading the model)\"}}\n";
    handle_text(h, req, 503, "application/json", t, sizeof t - 1);
    return;
  }
  struct evbuffer *b = evbuffer_new();
  if (compat) {
    vr_compat_get(compat, srv, (int64_t)time(NULL), b); /* GET /v1/models, /info */
  } else {
    if (!h->model_json) h->model_json = build_model_json(srv); /* first ask after ready */
    const char *m = h->model_json ? h->model_json : "{}";
    evbuffer_add(b, m, strlen(m));
    evbuffer_add(b, "\n", 1);
  }
  reply(h, req, 200, "application/json", b);
  evbuffer_free(b);
}

/* ------------------------------------------------------------------ lifecycle */

int vr_http_create(vr_server_t *srv, vr_http_t **out) {
  *out = NULL;
  vr_http_t *h = calloc(1, sizeof *h);
  if (!h) return VR_ERR_NOMEM;
  h->srv = srv;
  pthread_mutex_init(&h->mu, NULL);
  pthread_mutex_init(&h->pmu, NULL);
  pthread_cond_init(&h->pcv, NULL);
  if (pthread_create(&h->parse_th, NULL, parse_main, h) != 0) {
    vr_http_free(h);
    return VR_ERR_NOMEM;
  }
  h->parse_started = 1;
  h->eh = evhttp_new(srv->base);
  h->wake_ev = event_new(srv->base, -1, 0, wake_cb, h);
  if (!h->eh || !h->wake_ev) {
    vr_http_free(h);
    return VR_ERR_NOMEM;
  }
  const uint64_t body_limit = vr_settings_body_limit(&srv->st);
  evhttp_set_max_body_size(h->eh, (ev_ssize_t)body_limit);
  evhttp_set_max_headers_size(h->eh, 64 * 1024);
  evhttp_set_timeout(h->eh, 120);
  evhttp_set_allowed_methods(h->eh, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                        EVHTTP_REQ_DELETE);
  evhttp_set_gencb(h->eh, gen_cb, h);
  struct evhttp_bound_socket *bound = evhttp_bind_socket_with_handle(h->eh, srv->st.host, (ev_uint16_t)srv->st.port);
  if (!bound) {
    vr_log(VR_LOG_ERROR, "cannot listen on %s:%d (port in use or bad address). HINT: --port N, or --port 0 "
           "to disable HTTP", srv->st.host, srv->st.port);
    vr_http_free(h);
    return VR_ERR_IO;
  }
  uint32_t max_conns = srv->st.max_connections;
  struct rlimit nofile;
  if (max_conns == 0) /* below the fd limit: accept() itself never runs out */
    max_conns = getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY && nofile.rlim_cur > 80
                    ? (uint32_t)(nofile.rlim_cur - 64 < (1u << 20) ? nofile.rlim_cur - 64 : (1u << 20))
                    : 16;
  h->guard = vr_http_guard_create(srv->base, h->eh, bound, max_conns, srv->st.request_timeout_s);
  if (!h->guard) {
    vr_http_free(h);
    return VR_ERR_NOMEM;
  }
  vr_log(VR_LOG_INFO, "HTTP listening on http://%s:%d (max body %llu bytes, %u connections, %u s per request)",
         srv->st.host, srv->st.port, (unsigned long long)body_limit, max_conns,
         srv->st.request_timeout_s);
  *out = h;
  return 0;
}

uint32_t vr_http_pending(const vr_http_t *h) { return h ? h->pending : 0; }

void vr_http_model_changed(vr_http_t *h) {
  if (!h) return;
  free(h->model_json); /* rebuilt at the next GET /v1/model */
  h->model_json = NULL;
}

void vr_http_on_idle(vr_http_t *h, void (*cb)(void *), void *arg) {
  h->idle_cb = cb;
  h->idle_arg = arg;
  check_idle(h);
}

void vr_http_stop_parsing(vr_http_t *h) {
  if (!h || !h->parse_started) return;
  pthread_mutex_lock(&h->pmu);
  h->parse_stop = 1;
  pthread_cond_signal(&h->pcv);
  pthread_mutex_unlock(&h->pmu);
  pthread_join(h->parse_th, NULL); /* what is queued is answered shutting-down (done list) */
  h->parse_started = 0;
}

void vr_http_free(vr_http_t *h) {
  if (!h) return;
  vr_http_stop_parsing(h);
  vr_http_guard_free(h->guard);
  if (h->eh) evhttp_free(h->eh);
  if (h->wake_ev) event_free(h->wake_ev);
  pthread_mutex_lock(&h->mu);
  http_pending_t *list = h->done;
  h->done = NULL;
  pthread_mutex_unlock(&h->mu);
  while (list) { /* only after a forced exit: answered nowhere, just freed */
    http_pending_t *n = list->next;
    pending_free(list);
    list = n;
  }
  pthread_mutex_destroy(&h->mu);
  pthread_mutex_destroy(&h->pmu);
  pthread_cond_destroy(&h->pcv);
  free(h->model_json);
  free(h);
}
