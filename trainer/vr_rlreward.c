/* vr_rlreward.c: reward from verl-reward-server for the RL loop (vr_rlreward.h). */
#include "vr_rlreward.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "verl_reward/client.h"
#include "verl_reward/status.h"

typedef struct pending {
  uint64_t id;
  uint32_t first, n;
  int done;
} pending_t;

struct vr_rlreward {
  char shm[256];
  double retry_s, timeout_s;
  vr_client_t *c;
  vr_limits_t lim;
  int restarts;
  /* the batch in flight (a copy, to send again after a restart) */
  uint32_t n, cap_n;
  size_t cap_T;
  int32_t *ids;
  uint32_t *cu;
  uint8_t **extras;
  uint32_t *extras_len;
  float *scores;
  pending_t *pend;
  uint32_t n_pend;
  /* the batch's answered requests: the server's queue + compute time each reported (ms) */
  uint32_t n_timed;
  double srv_ms_sum, srv_ms_max;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int transient(int rc) {
  return rc == VR_ERR_SERVER_GONE || rc == VR_ERR_SERVER_RESTARTED || rc == VR_ERR_SHUTTING_DOWN ||
         rc == VR_ERR_NOT_FOUND || rc == VR_ERR_BAD_SEGMENT || rc == VR_ERR_NO_LANE;
}

static int connect_retry(vr_rlreward_t *rw) {
  vr_client_close(rw->c);
  rw->c = NULL;
  vr_client_options_t o;
  vr_client_options_init(&o);
  o.timeout_us = (int64_t)(rw->timeout_s * 1e6);
  o.connect_timeout_us = 1000000;
  const double t0 = now_s();
  int rc, said = 0;
  for (;;) {
    rc = vr_client_connect(rw->shm, &o, &rw->c);
    if (rc == 0) rc = vr_client_limits(rw->c, &rw->lim);
    if (rc == 0 || !transient(rc) || now_s() - t0 > rw->retry_s) break;
    if (!said++) /* a silent wait of minutes looks like a hang */
      fprintf(stderr, "verl-trainer: reward: verl-reward-server at shm \"%s\" is not there yet (%s); waiting up to "
                      "%.0f s (trainer.reward_timeout_s)\n", rw->shm, vr_strerror(rc), rw->retry_s);
    vr_client_close(rw->c);
    rw->c = NULL;
    struct timespec ts = {0, 200 * 1000000L};
    nanosleep(&ts, NULL);
  }
  if (rc != 0)
    fprintf(stderr, "verl-trainer: reward: cannot reach verl-reward-server at shm \"%s\": %s (%s). HINT: start "
                    "verl-reward-server --shm-name %s\n", rw->shm, vr_strerror(rc), vr_client_last_error(), rw->shm);
  return rc;
}

int vr_rlreward_open(const char *shm_name, double retry_s, double timeout_s, vr_rlreward_t **out) {
  vr_rlreward_t *rw = calloc(1, sizeof *rw);
  if (!rw) return VR_ERR_NOMEM;
  snprintf(rw->shm, sizeof rw->shm, "%s", shm_name);
  rw->retry_s = retry_s;
  rw->timeout_s = timeout_s > 0 ? timeout_s : 120;
  int rc = connect_retry(rw);
  if (rc != 0) {
    vr_rlreward_close(rw);
    return rc;
  }
  *out = rw;
  return 0;
}

static void drop_batch(vr_rlreward_t *rw) {
  for (uint32_t i = 0; i < rw->n; i++) free(rw->extras[i]);
  rw->n = 0;
  rw->n_pend = 0;
}

void vr_rlreward_close(vr_rlreward_t *rw) {
  if (!rw) return;
  drop_batch(rw);
  vr_client_close(rw->c);
  free(rw->ids), free(rw->cu), free(rw->extras), free(rw->extras_len), free(rw->scores), free(rw->pend);
  free(rw);
}

int vr_rlreward_restarts(const vr_rlreward_t *rw) { return rw->restarts; }

uint32_t vr_rlreward_server_ms(const vr_rlreward_t *rw, double *mean_ms, double *max_ms) {
  *mean_ms = rw->n_timed ? rw->srv_ms_sum / rw->n_timed : 0;
  *max_ms = rw->srv_ms_max;
  return rw->n_timed;
}

static int wait_one(vr_rlreward_t *rw, pending_t *p) {
  vr_request_info_t info;
  int rc = vr_client_wait(rw->c, p->id, (int64_t)(rw->timeout_s * 1e6), rw->scores + p->first, NULL, &info);
  if (rc == 0) {
    p->done = 1;
    const double ms = ((double)info.queue_us + (double)info.compute_us) / 1e3;
    rw->n_timed++;
    rw->srv_ms_sum += ms;
    if (ms > rw->srv_ms_max) rw->srv_ms_max = ms;
  }
  else if (rc == VR_ERR_TIMEOUT)
    fprintf(stderr, "verl-trainer: reward: verl-reward-server at shm \"%s\" did not answer a request of %u sequences "
                    "within %.0f s (trainer.reward_timeout_s). HINT: the server's log says whether it is stopped, "
                    "stuck or overloaded; raise trainer.reward_timeout_s for a slow reward model\n",
            rw->shm, p->n, rw->timeout_s);
  else if (!transient(rc))
    fprintf(stderr, "verl-trainer: reward: the server failed a request of %u sequences: %s (%s)\n", p->n,
            vr_strerror(rc), vr_client_last_error());
  return rc;
}

/* Sends the copied batch as requests of at most max_seqs_per_request. */
static int send_all(vr_rlreward_t *rw) {
  rw->n_pend = 0;
  rw->n_timed = 0, rw->srv_ms_sum = rw->srv_ms_max = 0;
  const uint32_t per = rw->lim.max_seqs_per_request ? rw->lim.max_seqs_per_request : 1;
  for (uint32_t first = 0; first < rw->n;) {
    uint32_t k = rw->n - first < per ? rw->n - first : per;
    uint32_t cu[k + 1];
    for (uint32_t i = 0; i <= k; i++) cu[i] = rw->cu[first + i] - rw->cu[first];
    vr_batch_t b = {k, rw->ids + rw->cu[first], cu, (const uint8_t *const *)(rw->extras + first),
                    rw->extras_len + first};
    uint64_t id;
    int rc = vr_client_submit(rw->c, &b, &id);
    if (rc == VR_ERR_BUSY) { /* the lane is full: collect the oldest request first */
      uint32_t j = 0;
      while (j < rw->n_pend && rw->pend[j].done) j++;
      if (j == rw->n_pend) return rc;
      if ((rc = wait_one(rw, &rw->pend[j])) != 0) return rc;
      continue;
    }
    if (rc == VR_ERR_TOO_LARGE && k > 1) { /* too many bytes for the arena at once: halve */
      k = (k + 1) / 2;
      rw->lim.max_seqs_per_request = k;
      return send_all(rw);
    }
    if (rc != 0) return rc;
    rw->pend[rw->n_pend++] = (pending_t){id, first, k, 0};
    first += k;
  }
  return 0;
}

int vr_rlreward_submit(vr_rlreward_t *rw, uint32_t n, const int32_t *ids, const uint32_t *cu,
                       uint8_t *const *extras, const uint32_t *extras_len) {
  drop_batch(rw);
  if (n > rw->cap_n) {
    uint32_t *ncu = realloc(rw->cu, ((size_t)n + 1) * sizeof *ncu);
    if (ncu) rw->cu = ncu;
    uint8_t **ne = realloc(rw->extras, (size_t)n * sizeof *ne);
    if (ne) rw->extras = ne;
    uint32_t *nl = realloc(rw->extras_len, (size_t)n * sizeof *nl);
    if (nl) rw->extras_len = nl;
    float *ns = realloc(rw->scores, (size_t)n * sizeof *ns);
    if (ns) rw->scores = ns;
    pending_t *np = realloc(rw->pend, (size_t)n * sizeof *np);
    if (np) rw->pend = np;
    if (!ncu || !ne || !nl || !ns || !np) return VR_ERR_NOMEM;
    rw->cap_n = n;
  }
  if (cu[n] > rw->cap_T) {
    int32_t *ni = realloc(rw->ids, (size_t)cu[n] * sizeof *ni);
    if (!ni) return VR_ERR_NOMEM;
    rw->ids = ni, rw->cap_T = cu[n];
  }
  memcpy(rw->ids, ids, (size_t)cu[n] * sizeof *ids);
  memcpy(rw->cu, cu, ((size_t)n + 1) * sizeof *cu);
  for (uint32_t i = 0; i < n; i++) {
    rw->extras_len[i] = extras ? extras_len[i] : 0;
    rw->extras[i] = NULL;
    if (rw->extras_len[i]) {
      rw->extras[i] = malloc(rw->extras_len[i]);
      if (!rw->extras[i]) return VR_ERR_NOMEM;
      memcpy(rw->extras[i], extras[i], rw->extras_len[i]);
    }
    rw->n = i + 1;
  }
  int rc = send_all(rw);
  return transient(rc) ? 0 : rc; /* a restart is handled in wait (the batch is kept) */
}

int vr_rlreward_wait(vr_rlreward_t *rw, float *scores) {
  int rc = 0;
  for (int attempt = 0;; attempt++) {
    rc = 0;
    for (uint32_t j = 0; j < rw->n_pend && rc == 0; j++)
      if (!rw->pend[j].done) rc = wait_one(rw, &rw->pend[j]);
    uint32_t got = 0;
    for (uint32_t j = 0; j < rw->n_pend; j++) got += rw->pend[j].done ? rw->pend[j].n : 0;
    if (rc == 0 && got == rw->n) break;
    if (rc == 0) rc = VR_ERR_SERVER_GONE; /* the submit stopped at a restart */
    if (!transient(rc) || attempt >= 3) return rc;
    fprintf(stderr, "verl-trainer: reward: the server %s; reconnecting and sending the batch again\n",
            rc == VR_ERR_SERVER_RESTARTED ? "restarted" : "went away");
    if ((rc = connect_retry(rw)) != 0) return rc;
    rw->restarts++;
    if ((rc = send_all(rw)) != 0 && !transient(rc)) return rc;
  }
  memcpy(scores, rw->scores, (size_t)rw->n * sizeof *scores);
  return 0;
}

/* ---- msgpack ------------------------------------------------------------------------------- */

typedef struct mp {
  uint8_t *p;
  size_t n, cap;
  int oom;
} mp_t;

static void mp_put(mp_t *m, const void *b, size_t n) {
  if (m->oom) return;
  if (m->n + n > m->cap) {
    size_t c = m->cap ? m->cap * 2 : 256;
    while (c < m->n + n) c *= 2;
    uint8_t *q = realloc(m->p, c);
    if (!q) {
      m->oom = 1;
      return;
    }
    m->p = q, m->cap = c;
  }
  memcpy(m->p + m->n, b, n);
  m->n += n;
}

static void mp_be(mp_t *m, uint8_t tag, uint64_t v, int bytes) {
  uint8_t b[9];
  b[0] = tag;
  for (int i = 0; i < bytes; i++) b[1 + i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
  mp_put(m, b, 1 + (size_t)bytes);
}

static void mp_head(mp_t *m, uint8_t fix, uint32_t fixmax, uint8_t t16, uint8_t t32, size_t n) {
  if (n <= fixmax) mp_be(m, (uint8_t)(fix | n), 0, 0);
  else if (n <= 0xffff) mp_be(m, t16, n, 2);
  else mp_be(m, t32, n, 4);
}

static void mp_str(mp_t *m, const char *s) {
  size_t n = strlen(s);
  if (n < 32) mp_be(m, (uint8_t)(0xa0 | n), 0, 0);
  else if (n <= 0xff) mp_be(m, 0xd9, n, 1);
  else if (n <= 0xffff) mp_be(m, 0xda, n, 2);
  else mp_be(m, 0xdb, n, 4);
  mp_put(m, s, n);
}

static void mp_json(mp_t *m, const cJSON *j, int depth) {
  if (depth > 14 || cJSON_IsNull(j) || cJSON_IsInvalid(j)) {
    mp_be(m, 0xc0, 0, 0);
  } else if (cJSON_IsBool(j)) {
    mp_be(m, cJSON_IsTrue(j) ? 0xc3 : 0xc2, 0, 0);
  } else if (cJSON_IsNumber(j)) {
    double d = j->valuedouble;
    if (d == (double)(int64_t)d && d > -9e15 && d < 9e15) {
      mp_be(m, 0xd3, (uint64_t)(int64_t)d, 8);
    } else {
      uint64_t u;
      memcpy(&u, &d, 8);
      mp_be(m, 0xcb, u, 8);
    }
  } else if (cJSON_IsString(j)) {
    mp_str(m, j->valuestring);
  } else if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
    size_t n = (size_t)cJSON_GetArraySize(j);
    if (cJSON_IsArray(j)) mp_head(m, 0x90, 15, 0xdc, 0xdd, n);
    else mp_head(m, 0x80, 15, 0xde, 0xdf, n);
    for (const cJSON *c = j->child; c; c = c->next) {
      if (cJSON_IsObject(j)) mp_str(m, c->string ? c->string : "");
      mp_json(m, c, depth + 1);
    }
  }
}

uint8_t *vr_rlreward_extras(const char *data_source, const char *solution_str, const char *ground_truth,
                            const char *extra_info_json, uint32_t *len) {
  mp_t m = {0};
  cJSON *ei = extra_info_json ? cJSON_Parse(extra_info_json) : NULL;
  const size_t n = (data_source && *data_source) + !!solution_str + !!ground_truth + !!ei;
  mp_head(&m, 0x80, 15, 0xde, 0xdf, n);
  if (data_source && *data_source) mp_str(&m, "data_source"), mp_str(&m, data_source);
  if (solution_str) mp_str(&m, "solution_str"), mp_str(&m, solution_str);
  if (ground_truth) mp_str(&m, "ground_truth"), mp_str(&m, ground_truth);
  if (ei) mp_str(&m, "extra_info"), mp_json(&m, ei, 0);
  cJSON_Delete(ei);
  if (m.oom) {
    free(m.p);
    return NULL;
  }
  *len = (uint32_t)m.n;
  return m.p;
}
