/* vr_dispatch.c: shm lanes -> batcher; answers through vr_shm_server_complete. */
#define _GNU_SOURCE
#include "vr_dispatch.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_log.h"
#include "vr_shm.h"
#include "vr_time.h"

#define POLL_BATCH 64
#define POLL_WAIT_US 20000 /* bounds how long stop waits for the thread */

struct vr_dispatch {
  vr_server_t *srv;
  pthread_t thread;
  int stop;                  /* atomic */
  pthread_mutex_t complete_mu;
  uint32_t n_components;     /* in responses: spec.n when components are reported, else 0 */
  char names[VR_MAX_COMPONENTS][VR_COMPONENT_NAME_MAX];
};

/* One shm request between poll and complete. */
typedef struct shm_job {
  vr_job_t job;
  vr_dispatch_t *d;
  vr_shm_request_t req;
  vr_extras_t *extras;       /* n_seqs, when parsed */
  const vr_extras_t **ptrs;
} shm_job_t;

static void shm_job_free(shm_job_t *sj) {
  if (sj->extras)
    for (uint32_t i = 0; i < sj->req.n_seqs; i++) vr_extras_free(&sj->extras[i]);
  free(sj->extras);
  free(sj->ptrs);
  vr_job_free_outputs(&sj->job);
  free(sj);
}

/* Answers and frees. status 0 with scores, or an error (scores then NaN where unscored). */
static void answer(vr_dispatch_t *d, shm_job_t *sj, int status) {
  vr_server_t *srv = d->srv;
  const vr_shm_request_t *r = &sj->req;
  pthread_mutex_lock(&d->complete_mu);
  int rc = vr_shm_server_complete(srv->shm, r, status, sj->job.scores, sj->job.seq_status, d->n_components,
                                  d->n_components ? (const char(*)[VR_COMPONENT_NAME_MAX])d->names : NULL,
                                  d->n_components ? sj->job.components : NULL, sj->job.queue_us, sj->job.compute_us);
  pthread_mutex_unlock(&d->complete_mu);
  if (rc) vr_log(VR_LOG_DEBUG, "lane %u: answer dropped (%s)", r->lane, vr_strerror(rc));
  double lat = (vr_now_ns() - r->accepted_ns) / 1e9;
  vr_metrics_request(&srv->metrics, VR_TRANSPORT_SHM, status, r->n_seqs, r->n_tokens, lat);
  shm_job_free(sj);
}

static void shm_job_done(vr_job_t *job) {
  shm_job_t *sj = (shm_job_t *)job;
  answer(sj->d, sj, job->status);
}

/* Validates sequences and parses extras; on failure marks seq_status and
 * returns the first error. */
static int validate(vr_dispatch_t *d, shm_job_t *sj) {
  const vr_scorer_t *sc = &d->srv->scorer;
  const vr_shm_request_t *r = &sj->req;
  int first = 0;
  for (uint32_t i = 0; i < r->n_seqs; i++) {
    uint32_t a = r->cu_seqlens[i], b = r->cu_seqlens[i + 1];
    int rc = (b < a || b > r->n_tokens) ? VR_ERR_MALFORMED : vr_scorer_check_seq(sc, r->token_ids + a, b - a, NULL);
    if (rc) {
      sj->job.seq_status[i] = rc;
      if (!first) {
        first = rc;
        vr_log(VR_LOG_DEBUG, "lane %u: sequence %u rejected: %s", r->lane, i, vr_strerror(rc));
      }
    }
  }
  if (first || !sc->spec.needs_extras || !r->extras || !r->extras_off) return first;
  sj->extras = calloc(r->n_seqs, sizeof *sj->extras);
  sj->ptrs = calloc(r->n_seqs, sizeof *sj->ptrs);
  if (!sj->extras || !sj->ptrs) return VR_ERR_NOMEM;
  for (uint32_t i = 0; i < r->n_seqs; i++) {
    vr_extras_init(&sj->extras[i]);
    uint32_t a = r->extras_off[i], b = r->extras_off[i + 1];
    if (b < a) {
      sj->job.seq_status[i] = VR_ERR_MALFORMED;
      return VR_ERR_MALFORMED;
    }
    if (b == a) continue; /* no extras for this sequence */
    char err[200];
    int rc = vr_extras_parse_msgpack(r->extras + a, b - a, &sj->extras[i], err, sizeof err);
    if (rc) {
      vr_log(VR_LOG_DEBUG, "lane %u: extras of sequence %u rejected: %s", r->lane, i, err);
      sj->job.seq_status[i] = rc == VR_ERR_NOMEM ? rc : VR_ERR_MALFORMED;
      return sj->job.seq_status[i];
    }
    sj->ptrs[i] = &sj->extras[i];
  }
  return 0;
}

static void intake(vr_dispatch_t *d, const vr_shm_request_t *r) {
  vr_server_t *srv = d->srv;
  const uint32_t n = r->n_seqs, nc = srv->scorer.spec.n;
  shm_job_t *sj = calloc(1, sizeof *sj);
  if (!sj || vr_job_alloc_outputs(&sj->job, n, nc) != 0) {
    vr_log(VR_LOG_ERROR, "out of memory taking a request of %u sequences", n);
    if (sj) shm_job_free(sj);
    pthread_mutex_lock(&d->complete_mu);
    vr_shm_server_complete(srv->shm, r, VR_ERR_NOMEM, NULL, NULL, 0, NULL, NULL, 0, 0);
    pthread_mutex_unlock(&d->complete_mu);
    vr_metrics_request(&srv->metrics, VR_TRANSPORT_SHM, VR_ERR_NOMEM, n, r->n_tokens, 0);
    return;
  }
  sj->d = d;
  sj->req = *r;
  int rc = n ? validate(d, sj) : VR_ERR_MALFORMED;
  if (rc) {
    answer(d, sj, rc);
    return;
  }
  vr_job_t *j = &sj->job;
  j->transport = VR_TRANSPORT_SHM;
  j->client = (uint64_t)r->lane + 1; /* fairness: one client per lane */
  j->n_seqs = n;
  j->n_tokens = r->n_tokens;
  j->ids = r->token_ids;
  j->cu = r->cu_seqlens;
  j->extras = sj->ptrs;
  j->accepted_ns = r->accepted_ns;
  j->done = shm_job_done;
  j->user = sj;
  rc = vr_batcher_submit(srv->batcher, j);
  if (rc) answer(d, sj, rc);
}

static void *dispatch_main(void *arg) {
  vr_dispatch_t *d = arg;
  vr_shm_request_t reqs[POLL_BATCH];
  for (;;) {
    int stopping = __atomic_load_n(&d->stop, __ATOMIC_ACQUIRE);
    int n = vr_shm_server_poll(d->srv->shm, reqs, POLL_BATCH, stopping ? 0 : POLL_WAIT_US);
    if (n < 0) {
      vr_log(VR_LOG_ERROR, "shm poll failed: %s", vr_strerror(n));
      n = 0;
    }
    for (int i = 0; i < n; i++) intake(d, &reqs[i]);
    if (stopping && n == 0) break; /* rings empty after intake stopped */
  }
  return NULL;
}

int vr_dispatch_start(vr_server_t *srv, vr_dispatch_t **out) {
  *out = NULL;
  vr_dispatch_t *d = calloc(1, sizeof *d);
  if (!d) return VR_ERR_NOMEM;
  d->srv = srv;
  pthread_mutex_init(&d->complete_mu, NULL);
  const vr_reward_spec_t *spec = &srv->scorer.spec;
  if (srv->scorer.has_components) {
    d->n_components = spec->n < VR_MAX_COMPONENTS ? spec->n : VR_MAX_COMPONENTS;
    for (uint32_t c = 0; c < d->n_components; c++) { /* names longer than the wire field are cut */
      size_t n = strnlen(spec->rules[c].name, VR_COMPONENT_NAME_MAX - 1);
      memcpy(d->names[c], spec->rules[c].name, n);
      d->names[c][n] = 0;
    }
  }
  int e = pthread_create(&d->thread, NULL, dispatch_main, d);
  if (e) {
    vr_log(VR_LOG_ERROR, "cannot start the dispatcher thread: %s", strerror(e));
    pthread_mutex_destroy(&d->complete_mu);
    free(d);
    return VR_ERR_INTERNAL;
  }
  *out = d;
  return 0;
}

void vr_dispatch_stop(vr_dispatch_t *d) {
  if (!d || __atomic_exchange_n(&d->stop, 1, __ATOMIC_ACQ_REL)) return;
  vr_shm_server_wake(d->srv->shm);
  pthread_join(d->thread, NULL);
}

void vr_dispatch_free(vr_dispatch_t *d) {
  if (!d) return;
  vr_dispatch_stop(d);
  pthread_mutex_destroy(&d->complete_mu);
  free(d);
}
