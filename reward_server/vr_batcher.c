/* vr_batcher.c: bounded job queue + batcher thread (packing without padding). */
#define _GNU_SOURCE
#include "vr_batcher.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_log.h"
#include "vr_time.h"

struct vr_batcher {
  vr_batcher_config_t cfg;
  vr_scorer_t *sc;
  vr_metrics_t *m;
  pthread_t thread;
  int started;

  pthread_mutex_t mu;      /* guards everything below up to the packing buffers */
  pthread_cond_t cv;       /* signalled on submit and drain */
  vr_job_t *head, *tail;
  uint32_t depth;
  uint64_t queued_tokens;  /* kept (post-truncation) tokens of queued jobs */
  int draining;
  uint64_t deadline_ns;
  void (*on_idle)(void *);
  void *on_idle_arg;

  /* packing buffers: batcher thread only; grown, never shrunk */
  int32_t *ids;
  uint32_t *cu, *resp;
  const vr_extras_t **ex;
  float *scores, *comps;
  int32_t *status;
  size_t ids_cap, cu_cap, resp_cap, ex_cap, scores_cap, status_cap, comps_cap; /* elements */
  vr_job_t **batch;
  size_t batch_cap;
};

int vr_job_alloc_outputs(vr_job_t *j, uint32_t n_seqs, uint32_t n_components) {
  size_t n = n_seqs ? n_seqs : 1, nc = n * (n_components ? n_components : 1);
  j->scores = malloc(n * sizeof *j->scores);
  j->seq_status = calloc(n, sizeof *j->seq_status);
  j->components = malloc(nc * sizeof *j->components);
  if (!j->scores || !j->seq_status || !j->components) {
    vr_job_free_outputs(j);
    return VR_ERR_NOMEM;
  }
  for (size_t i = 0; i < n; i++) j->scores[i] = NAN;
  for (size_t i = 0; i < nc; i++) j->components[i] = NAN;
  return 0;
}

void vr_job_free_outputs(vr_job_t *j) {
  free(j->scores);
  free(j->seq_status);
  free(j->components);
  j->scores = j->components = NULL;
  j->seq_status = NULL;
}

static uint64_t job_kept_tokens(const vr_scorer_t *sc, const vr_job_t *j) {
  uint64_t t = 0;
  for (uint32_t i = 0; i < j->n_seqs; i++) {
    uint32_t start, kept;
    vr_scorer_window(sc, j->cu[i + 1] - j->cu[i], &start, &kept);
    t += kept;
  }
  return t;
}

static uint64_t job_tokens(const vr_job_t *j) { return j->kept_tokens; }

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : 256;
  while (n < need) n *= 2;
  void *np = realloc(*p, n * elem);
  if (!np) return VR_ERR_NOMEM;
  *p = np;
  *cap = n;
  return 0;
}

static void finish(vr_job_t *j, int status) {
  j->status = status;
  j->done(j);
}

/* Runs the scorer over jobs[0..n) packed together; calls done() on each. */
static void run_batch(vr_batcher_t *b, vr_job_t **jobs, size_t n) {
  const uint32_t nc = b->sc->spec.n;
  uint64_t n_seqs = 0, n_tok = 0;
  for (size_t k = 0; k < n; k++) {
    n_seqs += jobs[k]->n_seqs;
    n_tok += job_tokens(jobs[k]);
  }
  size_t need = n_seqs + 1;
  int rc = grow((void **)&b->ids, &b->ids_cap, n_tok ? n_tok : 1, sizeof *b->ids);
  if (!rc) rc = grow((void **)&b->cu, &b->cu_cap, need, sizeof *b->cu);
  if (!rc) rc = grow((void **)&b->resp, &b->resp_cap, need, sizeof *b->resp);
  if (!rc) rc = grow((void **)&b->ex, &b->ex_cap, need, sizeof *b->ex);
  if (!rc) rc = grow((void **)&b->scores, &b->scores_cap, need, sizeof *b->scores);
  if (!rc) rc = grow((void **)&b->status, &b->status_cap, need, sizeof *b->status);
  if (!rc) rc = grow((void **)&b->comps, &b->comps_cap, need * (nc ? nc : 1), sizeof *b->comps);
  if (rc) {
    vr_log(VR_LOG_ERROR, "out of memory packing %llu sequences", (unsigned long long)n_seqs);
    for (size_t k = 0; k < n; k++) finish(jobs[k], VR_ERR_NOMEM);
    return;
  }

  /* pack: sequence windows back to back, no padding */
  uint32_t s = 0, pos = 0;
  b->cu[0] = 0;
  for (size_t k = 0; k < n; k++) {
    const vr_job_t *j = jobs[k];
    for (uint32_t i = 0; i < j->n_seqs; i++, s++) {
      uint32_t len = j->cu[i + 1] - j->cu[i], start, kept;
      vr_scorer_window(b->sc, len, &start, &kept);
      if (kept) memcpy(b->ids + pos, j->ids + j->cu[i] + start, (size_t)kept * sizeof *b->ids);
      pos += kept;
      b->cu[s + 1] = pos;
      b->resp[s] = len;
      b->ex[s] = j->extras ? j->extras[i] : NULL;
    }
  }
  uint64_t t0 = vr_now_ns();
  for (size_t k = 0; k < n; k++) {
    uint64_t q = t0 > jobs[k]->accepted_ns ? (t0 - jobs[k]->accepted_ns) / 1000 : 0;
    jobs[k]->queue_us = q > UINT32_MAX ? UINT32_MAX : (uint32_t)q;
  }
  rc = vr_scorer_run(b->sc, b->ids, b->cu, s, b->ex, b->resp, b->scores, b->status, b->comps, b->m);
  uint64_t dt = vr_now_ns() - t0;
  uint32_t compute_us = dt / 1000 > UINT32_MAX ? UINT32_MAX : (uint32_t)(dt / 1000);
  vr_metrics_batch(b->m, s, pos, dt / 1e9);
  if (rc != 0) vr_log(VR_LOG_ERROR, "scoring a batch of %u sequences failed: %s", s, vr_strerror(rc));
  vr_log(VR_LOG_TRACE, "batch: %zu requests, %u sequences, %u tokens, %u us", n, s, pos, compute_us);

  s = 0;
  for (size_t k = 0; k < n; k++) {
    vr_job_t *j = jobs[k];
    j->compute_us = compute_us;
    int st = rc;
    if (!rc) {
      memcpy(j->scores, b->scores + s, (size_t)j->n_seqs * sizeof *j->scores);
      memcpy(j->seq_status, b->status + s, (size_t)j->n_seqs * sizeof *j->seq_status);
      if (j->components && nc)
        memcpy(j->components, b->comps + (size_t)s * nc, (size_t)j->n_seqs * nc * sizeof *j->components);
      for (uint32_t i = 0; i < j->n_seqs && !st; i++) st = b->status[s + i];
    }
    s += j->n_seqs;
    finish(j, st);
  }
}

static void *batcher_main(void *arg) {
  vr_batcher_t *b = arg;
  size_t nb = 0;
  pthread_mutex_lock(&b->mu);
  for (;;) {
    while (!b->head && !b->draining) pthread_cond_wait(&b->cv, &b->mu);
    if (!b->head) break; /* draining and empty */
    /* wait for more work until the token budget fills or the oldest job's wait ends */
    uint64_t wait_end = b->head->accepted_ns + (uint64_t)b->cfg.max_wait_us * 1000u;
    while (!b->draining && b->queued_tokens < b->cfg.max_batch_tokens) {
      uint64_t now = vr_now_ns();
      if (now >= wait_end) break;
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      uint64_t d = wait_end - now;
      ts.tv_sec += (time_t)(d / 1000000000u);
      ts.tv_nsec += (long)(d % 1000000000u);
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&b->cv, &b->mu, &ts);
    }
    int expired = b->draining && vr_now_ns() >= b->deadline_ns;
    /* take jobs: the head always, then whole jobs while the budget allows */
    nb = 0;
    uint64_t tok = 0;
    while (b->head) {
      vr_job_t *j = b->head;
      uint64_t t = job_tokens(j);
      if (!expired && nb > 0 && tok + t > b->cfg.max_batch_tokens) break;
      if (grow((void **)&b->batch, &b->batch_cap, nb + 1, sizeof *b->batch) != 0) break;
      b->head = j->next;
      if (!b->head) b->tail = NULL;
      b->depth--;
      b->queued_tokens -= t;
      j->next = NULL;
      b->batch[nb++] = j;
      tok += t;
    }
    pthread_mutex_unlock(&b->mu);
    if (expired) {
      vr_log(VR_LOG_WARN, "drain deadline passed: answering %zu queued requests with shutting-down", nb);
      for (size_t k = 0; k < nb; k++) finish(b->batch[k], VR_ERR_SHUTTING_DOWN);
    } else if (nb) {
      run_batch(b, b->batch, nb);
    }
    pthread_mutex_lock(&b->mu);
  }
  void (*cb)(void *) = b->on_idle;
  void *cb_arg = b->on_idle_arg;
  pthread_mutex_unlock(&b->mu);
  if (cb) cb(cb_arg);
  return NULL;
}

int vr_batcher_create(const vr_batcher_config_t *cfg, vr_scorer_t *sc, vr_metrics_t *m, vr_batcher_t **out) {
  *out = NULL;
  vr_batcher_t *b = calloc(1, sizeof *b);
  if (!b) return VR_ERR_NOMEM;
  b->cfg = *cfg;
  b->sc = sc;
  b->m = m;
  pthread_mutex_init(&b->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&b->cv, &ca);
  pthread_condattr_destroy(&ca);
  int e = pthread_create(&b->thread, NULL, batcher_main, b);
  if (e) {
    vr_log(VR_LOG_ERROR, "cannot start the batcher thread: %s", strerror(e));
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
    return VR_ERR_INTERNAL;
  }
  b->started = 1;
  *out = b;
  return 0;
}

int vr_batcher_submit(vr_batcher_t *b, vr_job_t *job) {
  uint64_t t = job_kept_tokens(b->sc, job);
  pthread_mutex_lock(&b->mu);
  if (b->draining) {
    pthread_mutex_unlock(&b->mu);
    return VR_ERR_SHUTTING_DOWN;
  }
  if (b->depth >= b->cfg.max_queue) {
    pthread_mutex_unlock(&b->mu);
    return VR_ERR_OVERLOADED;
  }
  job->kept_tokens = t;
  job->next = NULL;
  if (b->tail) b->tail->next = job;
  else b->head = job;
  b->tail = job;
  b->depth++;
  b->queued_tokens += t;
  pthread_cond_signal(&b->cv);
  pthread_mutex_unlock(&b->mu);
  return 0;
}

void vr_batcher_drain(vr_batcher_t *b, uint64_t deadline_ns, void (*on_idle)(void *), void *arg) {
  pthread_mutex_lock(&b->mu);
  if (!b->draining) {
    b->draining = 1;
    b->deadline_ns = deadline_ns;
    b->on_idle = on_idle;
    b->on_idle_arg = arg;
    pthread_cond_broadcast(&b->cv);
  }
  pthread_mutex_unlock(&b->mu);
}

void vr_batcher_free(vr_batcher_t *b) {
  if (!b) return;
  if (b->started) {
    vr_batcher_drain(b, vr_now_ns(), NULL, NULL);
    pthread_join(b->thread, NULL);
  }
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
  free(b->ids);
  free(b->cu);
  free(b->resp);
  free(b->ex);
  free(b->scores);
  free(b->comps);
  free(b->status);
  free(b->batch);
  free(b);
}

uint32_t vr_batcher_depth(vr_batcher_t *b) {
  pthread_mutex_lock(&b->mu);
  uint32_t d = b->depth;
  pthread_mutex_unlock(&b->mu);
  return d;
}
