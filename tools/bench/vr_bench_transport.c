/* vr_bench_transport.c: shm (client library), HTTP JSON and HTTP msgpack. */
#include "vr_bench_transport.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/client.h"
#include "verl_reward/status.h"
#include "vr_bench_http.h"
#include "vr_log.h"

struct vr_conn {
  vr_transport_t t;
  vr_client_t *client;      /* shm */
  vr_http_t *http;          /* http, http-msgpack */
  char *body;               /* request body buffer (JSON) */
  size_t body_cap;
  msgpack_sbuffer sbuf;     /* request body buffer (msgpack) */
  msgpack_unpacked unp;
  char err[256];
};

static const char *const k_names[] = {"shm", "http", "http-msgpack"};

const char *vr_transport_name(vr_transport_t t) {
  return (unsigned)t < 3u ? k_names[t] : "?";
}

int vr_transport_parse(const char *s, vr_transport_t *out) {
  for (int i = 0; i < 3; i++) {
    if (strcmp(s, k_names[i]) == 0) {
      *out = (vr_transport_t)i;
      return 0;
    }
  }
  vr_log(VR_LOG_ERROR, "unknown transport '%s' (want shm, http or http-msgpack)", s);
  return VR_ERR_PARSE;
}

static int fail(vr_conn_t *c, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(vr_conn_t *c, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof(c->err), fmt, ap);
  va_end(ap);
  return status;
}

const char *vr_conn_last_error(const vr_conn_t *c) { return c->err; }

int vr_conn_open(vr_transport_t t, const vr_target_t *tg, vr_conn_t **out) {
  vr_conn_t *c = calloc(1, sizeof(*c));
  if (!c) return VR_ERR_NOMEM;
  c->t = t;
  msgpack_sbuffer_init(&c->sbuf);
  msgpack_unpacked_init(&c->unp);
  int rc;
  if (t == VR_TR_SHM) {
    vr_client_options_t o;
    vr_client_options_init(&o);
    o.timeout_us = tg->timeout_us;
    o.connect_timeout_us = tg->connect_timeout_us;
    if (tg->spin_us >= 0) o.spin_us = (uint32_t)tg->spin_us;
    rc = vr_client_connect(tg->shm_name, &o, &c->client);
    if (rc != 0)
      vr_log(VR_LOG_ERROR, "shm connect to '%s' failed: %s (%s)%s", tg->shm_name, vr_strerror(rc),
             vr_client_last_error(),
             rc == VR_ERR_NO_LANE ? ". HINT: every shm client takes a lane; start the server with a larger --lanes" : "");
  } else {
    if (tg->port == 0) {
      vr_log(VR_LOG_ERROR, "transport %s needs the server's HTTP address (--url HOST:PORT)",
             vr_transport_name(t));
      rc = VR_ERR_INVAL;
    } else {
      rc = vr_http_open(tg->host, tg->port, tg->timeout_us, &c->http);
    }
  }
  if (rc != 0) {
    vr_conn_close(c);
    return rc;
  }
  *out = c;
  return 0;
}

void vr_conn_close(vr_conn_t *c) {
  if (!c) return;
  vr_client_close(c->client);
  vr_http_close(c->http);
  free(c->body);
  msgpack_sbuffer_destroy(&c->sbuf);
  msgpack_unpacked_destroy(&c->unp);
  free(c);
}

/* ---- shm -------------------------------------------------------------------- */

static int shm_score(vr_conn_t *c, const vr_reqbuf_t *r, float *scores, vr_score_timing_t *tm) {
  vr_batch_t b = {.n_seqs = r->n_seqs, .token_ids = r->ids, .cu_seqlens = r->cu};
  vr_request_info_t info;
  memset(&info, 0, sizeof(info));
  int rc = vr_client_score(c->client, &b, scores, NULL, &info);
  if (rc != 0) return fail(c, rc, "%s: %s", vr_status_name(rc), vr_client_last_error());
  tm->queue_us = info.queue_us;
  tm->compute_us = info.compute_us;
  return 0;
}

/* ---- HTTP JSON ------------------------------------------------------------- */

static int body_reserve(vr_conn_t *c, size_t need) {
  if (need <= c->body_cap) return 0;
  size_t cap = c->body_cap ? c->body_cap : 4096;
  while (cap < need) cap *= 2;
  char *p = realloc(c->body, cap);
  if (!p) return VR_ERR_NOMEM;
  c->body = p;
  c->body_cap = cap;
  return 0;
}

/* Maps a non-200 answer to a status: the server's own code when its error body
 * ({"error": {"status": -11, ...}}) says so, else one from the HTTP code. The
 * body is kept in the error detail. */
static int http_error(vr_conn_t *c, int code, const uint8_t *resp, size_t len) {
  int st = code == 400 ? VR_ERR_MALFORMED
         : code == 413 ? VR_ERR_TOO_LARGE
         : code == 429 ? VR_ERR_OVERLOADED
         : code == 503 ? VR_ERR_SHUTTING_DOWN
         : code == 504 ? VR_ERR_TIMEOUT : VR_ERR_IO;
  cJSON *j = cJSON_ParseWithLength((const char *)resp, len);
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(e, "status");
  if (cJSON_IsNumber(s) && s->valuedouble < 0 && s->valuedouble > -1000) st = (int)s->valuedouble;
  cJSON_Delete(j);
  return fail(c, st, "HTTP %d: %.*s", code, (int)(len > 160 ? 160 : len), (const char *)resp);
}

static int json_u32(const cJSON *o, const char *key, uint32_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0.0) || v->valuedouble > UINT32_MAX) return -1;
  *out = (uint32_t)v->valuedouble;
  return 0;
}

static int http_json_score(vr_conn_t *c, const vr_reqbuf_t *r, float *scores, vr_score_timing_t *tm) {
  /* {"input_ids":[[..],[..]]}: at most 12 bytes per id plus brackets */
  size_t need = 32 + (size_t)r->n_tokens * 12u + (size_t)r->n_seqs * 4u;
  if (body_reserve(c, need)) return fail(c, VR_ERR_NOMEM, "out of memory");
  char *p = c->body;
  p += sprintf(p, "{\"input_ids\":[");
  for (uint32_t s = 0; s < r->n_seqs; s++) {
    *p++ = s ? ',' : '[';
    if (s) *p++ = '[';
    for (uint32_t i = r->cu[s]; i < r->cu[s + 1]; i++) {
      if (i != r->cu[s]) *p++ = ',';
      p += sprintf(p, "%d", r->ids[i]);
    }
    *p++ = ']';
  }
  p += sprintf(p, "]}");
  int code = 0;
  const uint8_t *resp;
  size_t len;
  int rc = vr_http_request(c->http, "POST", "/v1/score", "application/json", c->body,
                           (size_t)(p - c->body), &code, &resp, &len);
  if (rc != 0) return fail(c, rc, "POST /v1/score: %s", vr_strerror(rc));
  if (code != 200) return http_error(c, code, resp, len);
  cJSON *j = cJSON_ParseWithLength((const char *)resp, len);
  if (!j) return fail(c, VR_ERR_MALFORMED, "response is not JSON");
  rc = 0;
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "scores");
  if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != (int)r->n_seqs) {
    rc = fail(c, VR_ERR_MALFORMED, "response \"scores\" is not an array of %u numbers", r->n_seqs);
  } else {
    uint32_t i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) {
      if (!cJSON_IsNumber(v)) {
        rc = fail(c, VR_ERR_MALFORMED, "response score %u is not a number", i);
        break;
      }
      scores[i++] = (float)v->valuedouble;
    }
  }
  if (rc == 0 && (json_u32(j, "queue_us", &tm->queue_us) || json_u32(j, "compute_us", &tm->compute_us)))
    rc = fail(c, VR_ERR_MALFORMED, "response lacks queue_us/compute_us");
  cJSON_Delete(j);
  return rc;
}

/* ---- HTTP msgpack ---------------------------------------------------------- */

static int mp_key_is(const msgpack_object *k, const char *s) {
  size_t n = strlen(s);
  if (k->type == MSGPACK_OBJECT_STR) return k->via.str.size == n && memcmp(k->via.str.ptr, s, n) == 0;
  if (k->type == MSGPACK_OBJECT_BIN) return k->via.bin.size == n && memcmp(k->via.bin.ptr, s, n) == 0;
  return 0;
}

static int mp_number(const msgpack_object *o, double *out) {
  switch (o->type) {
  case MSGPACK_OBJECT_POSITIVE_INTEGER: *out = (double)o->via.u64; return 0;
  case MSGPACK_OBJECT_NEGATIVE_INTEGER: *out = (double)o->via.i64; return 0;
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64: *out = o->via.f64; return 0;
  default: return -1;
  }
}

static int http_msgpack_score(vr_conn_t *c, const vr_reqbuf_t *r, float *scores, vr_score_timing_t *tm) {
  msgpack_sbuffer_clear(&c->sbuf);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &c->sbuf, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 1);
  msgpack_pack_str(&pk, 9);
  msgpack_pack_str_body(&pk, "input_ids", 9);
  msgpack_pack_array(&pk, r->n_seqs);
  for (uint32_t s = 0; s < r->n_seqs; s++) {
    msgpack_pack_array(&pk, r->cu[s + 1] - r->cu[s]);
    for (uint32_t i = r->cu[s]; i < r->cu[s + 1]; i++) msgpack_pack_int32(&pk, r->ids[i]);
  }
  int code = 0;
  const uint8_t *resp;
  size_t len;
  int rc = vr_http_request(c->http, "POST", "/v1/score", "application/msgpack", c->sbuf.data,
                           c->sbuf.size, &code, &resp, &len);
  if (rc != 0) return fail(c, rc, "POST /v1/score: %s", vr_strerror(rc));
  if (code != 200) return http_error(c, code, resp, len);
  size_t off = 0;
  if (msgpack_unpack_next(&c->unp, (const char *)resp, len, &off) != MSGPACK_UNPACK_SUCCESS ||
      c->unp.data.type != MSGPACK_OBJECT_MAP)
    return fail(c, VR_ERR_MALFORMED, "response is not a msgpack map");
  const msgpack_object_map *m = &c->unp.data.via.map;
  int have_scores = 0, have_q = 0, have_c = 0;
  for (uint32_t k = 0; k < m->size; k++) {
    const msgpack_object *key = &m->ptr[k].key, *val = &m->ptr[k].val;
    double d;
    if (mp_key_is(key, "scores")) {
      if (val->type != MSGPACK_OBJECT_ARRAY || val->via.array.size != r->n_seqs)
        return fail(c, VR_ERR_MALFORMED, "response \"scores\" is not an array of %u numbers", r->n_seqs);
      for (uint32_t i = 0; i < r->n_seqs; i++) {
        if (mp_number(&val->via.array.ptr[i], &d))
          return fail(c, VR_ERR_MALFORMED, "response score %u is not a number", i);
        scores[i] = (float)d;
      }
      have_scores = 1;
    } else if (mp_key_is(key, "queue_us") || mp_key_is(key, "compute_us")) {
      if (mp_number(val, &d) || !(d >= 0.0) || d > UINT32_MAX)
        return fail(c, VR_ERR_MALFORMED, "response timing is not a non-negative number");
      if (mp_key_is(key, "queue_us")) {
        tm->queue_us = (uint32_t)d;
        have_q = 1;
      } else {
        tm->compute_us = (uint32_t)d;
        have_c = 1;
      }
    }
  }
  if (!have_scores || !have_q || !have_c)
    return fail(c, VR_ERR_MALFORMED, "response lacks scores/queue_us/compute_us");
  return 0;
}

int vr_conn_score(vr_conn_t *c, const vr_reqbuf_t *r, float *scores, vr_score_timing_t *timing) {
  c->err[0] = 0;
  vr_score_timing_t tm = {0, 0};
  int rc;
  switch (c->t) {
  case VR_TR_SHM: rc = shm_score(c, r, scores, &tm); break;
  case VR_TR_HTTP: rc = http_json_score(c, r, scores, &tm); break;
  case VR_TR_HTTP_MSGPACK: rc = http_msgpack_score(c, r, scores, &tm); break;
  default: rc = VR_ERR_INVAL;
  }
  if (timing) *timing = tm;
  return rc;
}

int vr_conn_server_info(vr_conn_t *c, vr_server_info_t *out) {
  memset(out, 0, sizeof(*out));
  if (c->t == VR_TR_SHM) {
    vr_limits_t lim;
    int rc = vr_client_limits(c->client, &lim);
    if (rc != 0) return fail(c, rc, "vr_client_limits: %s", vr_client_last_error());
    out->vocab_size = lim.vocab_size;
    out->max_seq_len = lim.max_seq_len;
    out->max_seqs_per_request = lim.max_seqs_per_request;
    return 0;
  }
  int code = 0;
  const uint8_t *resp;
  size_t len;
  int rc = vr_http_request(c->http, "GET", "/v1/model", NULL, NULL, 0, &code, &resp, &len);
  if (rc != 0) return fail(c, rc, "GET /v1/model: %s", vr_strerror(rc));
  if (code != 200) return http_error(c, code, resp, len);
  cJSON *j = cJSON_ParseWithLength((const char *)resp, len);
  if (!j) return fail(c, VR_ERR_MALFORMED, "GET /v1/model: response is not JSON");
  rc = 0;
  if (json_u32(j, "vocab_size", &out->vocab_size))
    rc = fail(c, VR_ERR_MALFORMED, "GET /v1/model: no \"vocab_size\"");
  (void)json_u32(j, "max_seq_len", &out->max_seq_len);       /* optional */
  (void)json_u32(j, "max_seqs_per_request", &out->max_seqs_per_request);
  cJSON_Delete(j);
  return rc;
}
