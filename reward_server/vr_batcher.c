/* vr_batcher.c: bounded job queue + one worker thread per model replica (packing without
 * padding).
 *
 * The queue is fair (issue 18 case 9): one FIFO per client (job->client: a
 * shm lane, an HTTP connection), and the batcher takes jobs round-robin over
 * the clients that have some, so a client's wait is bounded by its own backlog
 * plus about one batch per other client ahead of it, whatever another client
 * queued. A client may have at most max_client_queue jobs queued. */
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

/* Sequences first .. first + n - 1 of a job, packed into one batch. */
typedef struct part {
  vr_job_t *job;
  uint32_t first, n;
  uint64_t tokens;           /* their kept tokens */
} part_t;

/* One packed batch: its buffers (grown, never shrunk) and the job parts it answers. */
typedef struct vr_slot {
  int32_t *ids;
  uint32_t *cu, *resp;
  const vr_extras_t **ex;
  float *scores, *comps;
  int32_t *status;
  size_t ids_cap, cu_cap, resp_cap, ex_cap, scores_cap, status_cap, comps_cap; /* elements */
  part_t *parts;
  size_t parts_cap, n_parts;
  uint32_t n_seqs, n_tokens;
  uint64_t t_submit;
  int submit_rc;
} vr_slot_t;

/* One client's queued jobs. Lives while it has some: in the hash (by key) and in
 * the ring of clients to serve. */
typedef struct cq {
  uint64_t key;
  vr_job_t *head, *tail;
  uint32_t depth;
  struct cq *hnext;          /* hash chain */
  struct cq *prev, *next;    /* the ring */
} cq_t;

#define CQ_BUCKETS 1024u

/* One replica's worker: its thread, its packing slots, its batch-linger state. */
typedef struct worker {
  vr_batcher_t *b;
  uint32_t r;                /* the replica it drives (vr_scorer_submit/collect's r) */
  pthread_t thread;
  /* two packing slots (this thread only): while one batch computes on the device, the next is
   * packed and submitted into the other (pipelined on cuda) */
  vr_slot_t slots[2];
  size_t last_jobs;          /* jobs of the last answered batch */
  uint64_t last_done_ns;     /* when it was answered */
  uint32_t outstanding;      /* batches submitted, not yet collected */
  uint64_t busy_since;       /* when outstanding went from 0 to 1 */
} worker_t;

struct vr_batcher {
  vr_batcher_config_t cfg;
  vr_scorer_t *sc;
  vr_metrics_t *m;
  worker_t *workers;
  uint32_t n_workers, started; /* started: threads created */

  pthread_mutex_t mu;      /* guards everything below */
  pthread_cond_t cv;       /* signalled on submit and drain; a worker passes it on when work is left */
  cq_t *buckets[CQ_BUCKETS];
  cq_t *rr;                /* the client the next job is taken from; NULL: queue empty */
  uint32_t depth;
  uint64_t queued_tokens;  /* kept (post-truncation) tokens of queued jobs */
  uint32_t idle;           /* workers waiting for work with nothing outstanding */
  uint32_t partial;        /* queued jobs with some sequences packed already (a switch waits for them) */
  uint32_t live;           /* workers not yet exited */
  int stopped;             /* every worker exited: a swap asked from now on is refused at once */
  int draining;
  uint64_t deadline_ns;
  void (*on_idle)(void *);
  void *on_idle_arg;

  /* a model switch asked by vr_batcher_swap_models: the workers park between batches, the
   * asking thread switches every replica's model while all are parked */
  pthread_cond_t swap_cv;
  int swap_pending;
  uint32_t parked;
  uint64_t swap_gen;       /* incremented when a switch is done: parked workers resume */
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

/* ---- the fair queue (lock held) ---- */

static cq_t **cq_slot(vr_batcher_t *b, uint64_t key) {
  cq_t **pp = &b->buckets[(key ^ (key >> 29)) % CQ_BUCKETS];
  while (*pp && (*pp)->key != key) pp = &(*pp)->hnext;
  return pp;
}

/* Appends j to its client's queue (creating it, at the end of the round). */
static int q_push(vr_batcher_t *b, vr_job_t *j) {
  cq_t **pp = cq_slot(b, j->client), *c = *pp;
  if (!c) {
    c = calloc(1, sizeof *c);
    if (!c) return VR_ERR_NOMEM;
    c->key = j->client;
    *pp = c;
    if (!b->rr) {
      c->prev = c->next = c;
      b->rr = c;
    } else { /* just before rr: served after everyone already waiting */
      c->next = b->rr;
      c->prev = b->rr->prev;
      c->prev->next = c;
      b->rr->prev = c;
    }
  }
  j->next = NULL;
  if (c->tail) c->tail->next = j;
  else c->head = j;
  c->tail = j;
  c->depth++;
  b->depth++;
  return 0;
}

/* Takes the head job of the client whose turn it is; the turn moves on. */
static vr_job_t *q_pop(vr_batcher_t *b) {
  cq_t *c = b->rr;
  if (!c) return NULL;
  vr_job_t *j = c->head;
  c->head = j->next;
  if (!c->head) c->tail = NULL;
  j->next = NULL;
  c->depth--;
  b->depth--;
  b->rr = c->next;
  if (c->depth == 0) {
    if (c->next == c) b->rr = NULL;
    c->prev->next = c->next;
    c->next->prev = c->prev;
    *cq_slot(b, c->key) = c->hnext;
    free(c);
  }
  return j;
}

static vr_job_t *q_peek(const vr_batcher_t *b) { return b->rr ? b->rr->head : NULL; }

/* The oldest queued job's intake time (the queue is not empty). */
static uint64_t q_oldest_ns(const vr_batcher_t *b) {
  uint64_t t = UINT64_MAX;
  const cq_t *c = b->rr;
  do {
    if (c->head->accepted_ns < t) t = c->head->accepted_ns;
    c = c->next;
  } while (c != b->rr);
  return t;
}

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

/* One of the job's parts is over (status 0 or its error; the first error is the job's):
 * the last one answers the job (returns 1 then, else 0). Any thread, lock not needed. */
static int part_done(vr_job_t *j, int status) {
  if (status) {
    int zero = 0;
    __atomic_compare_exchange_n(&j->status, &zero, status, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  }
  if (__atomic_sub_fetch(&j->parts_left, 1, __ATOMIC_ACQ_REL) == 0) {
    const uint64_t dt = j->first_submit_ns ? vr_now_ns() - j->first_submit_ns : 0; /* 0: never submitted */
    j->compute_us = dt / 1000 > UINT32_MAX ? UINT32_MAX : (uint32_t)(dt / 1000);
    j->done(j);
    return 1;
  }
  return 0;
}

/* Kept tokens of sequence i of j. */
static uint32_t seq_kept(const vr_scorer_t *sc, const vr_job_t *j, uint32_t i) {
  uint32_t start, kept;
  vr_scorer_window(sc, j->cu[i + 1] - j->cu[i], &start, &kept);
  return kept;
}

/* Packs the slot's jobs back to back (no padding) and submits them to the
 * worker's replica. On a packing failure every job is answered at once and the slot is
 * left empty (n_parts 0). */
static void pack_submit(worker_t *w, vr_slot_t *sl) {
  vr_batcher_t *b = w->b;
  const uint32_t nc = b->sc->spec.n;
  uint64_t n_seqs = 0, n_tok = 0;
  for (size_t k = 0; k < sl->n_parts; k++) {
    const part_t *pt = &sl->parts[k];
    n_seqs += pt->n;
    n_tok += pt->tokens;
  }
  size_t need = n_seqs + 1;
  int rc = grow((void **)&sl->ids, &sl->ids_cap, n_tok ? n_tok : 1, sizeof *sl->ids);
  if (!rc) rc = grow((void **)&sl->cu, &sl->cu_cap, need, sizeof *sl->cu);
  if (!rc) rc = grow((void **)&sl->resp, &sl->resp_cap, need, sizeof *sl->resp);
  if (!rc) rc = grow((void **)&sl->ex, &sl->ex_cap, need, sizeof *sl->ex);
  if (!rc) rc = grow((void **)&sl->scores, &sl->scores_cap, need, sizeof *sl->scores);
  if (!rc) rc = grow((void **)&sl->status, &sl->status_cap, need, sizeof *sl->status);
  if (!rc) rc = grow((void **)&sl->comps, &sl->comps_cap, need * (nc ? nc : 1), sizeof *sl->comps);
  if (rc) {
    vr_log(VR_LOG_ERROR, "out of memory packing %llu sequences", (unsigned long long)n_seqs);
    for (size_t k = 0; k < sl->n_parts; k++) part_done(sl->parts[k].job, VR_ERR_NOMEM);
    sl->n_parts = 0;
    return;
  }

  /* pack: sequence windows back to back, no padding */
  uint32_t s = 0, pos = 0;
  sl->cu[0] = 0;
  for (size_t k = 0; k < sl->n_parts; k++) {
    const vr_job_t *j = sl->parts[k].job;
    for (uint32_t i = sl->parts[k].first; i < sl->parts[k].first + sl->parts[k].n; i++, s++) {
      uint32_t len = j->cu[i + 1] - j->cu[i], start, kept;
      vr_scorer_window(b->sc, len, &start, &kept);
      if (kept) memcpy(sl->ids + pos, j->ids + j->cu[i] + start, (size_t)kept * sizeof *sl->ids);
      pos += kept;
      sl->cu[s + 1] = pos;
      sl->resp[s] = len;
      sl->ex[s] = j->extras ? j->extras[i] : NULL;
    }
  }
  sl->n_seqs = s;
  sl->n_tokens = pos;
  sl->t_submit = vr_now_ns();
  for (size_t k = 0; k < sl->n_parts; k++) {
    vr_job_t *j = sl->parts[k].job;
    if (sl->parts[k].first != 0) continue; /* a job's queue wait ends when its first part starts */
    uint64_t q = sl->t_submit > j->accepted_ns ? (sl->t_submit - j->accepted_ns) / 1000 : 0;
    j->queue_us = q > UINT32_MAX ? UINT32_MAX : (uint32_t)q;
    j->first_submit_ns = sl->t_submit;
    vr_metrics_queue_wait(b->m, j->transport, j->queue_us / 1e6); /* the number it is answered with */
  }
  if (w->outstanding++ == 0) w->busy_since = sl->t_submit;
  vr_metrics_replica_state(b->m, w->r, w->outstanding, 0);
  sl->submit_rc = vr_scorer_submit(b->sc, w->r, sl->ids, sl->cu, s, sl->scores, sl->status);
}

/* Waits for the slot's batch (vr_scorer_collect), copies results into each job
 * and calls done() on each. compute_us = submit -> results (on a pipelined
 * device this includes waiting for the batch before it). Records the batch's
 * size and end for the batch-linger rule. */
static void complete(worker_t *w, vr_slot_t *sl) {
  vr_batcher_t *b = w->b;
  const uint32_t nc = b->sc->spec.n;
  if (sl->n_parts == 0) { /* packing failed: its parts were answered already */
    w->last_jobs = 0;
    w->last_done_ns = vr_now_ns();
    return;
  }
  uint32_t s = sl->n_seqs;
  int rc = vr_scorer_collect(b->sc, w->r, sl->submit_rc, sl->cu, s, sl->ex, sl->resp, sl->scores, sl->status,
                             sl->comps, b->m);
  const uint64_t now = vr_now_ns(), dt = now - sl->t_submit;
  uint32_t compute_us = dt / 1000 > UINT32_MAX ? UINT32_MAX : (uint32_t)(dt / 1000);
  vr_metrics_batch(b->m, s, sl->n_tokens, dt / 1e9);
  vr_metrics_replica_batch(b->m, w->r, s, sl->n_tokens);
  w->outstanding--;
  vr_metrics_replica_state(b->m, w->r, w->outstanding, w->outstanding ? 0 : now - w->busy_since);
  if (rc != 0) vr_log(VR_LOG_ERROR, "scoring a batch of %u sequences on %s failed: %s", s, b->sc->devices[w->r],
                      vr_strerror(rc));
  vr_log(VR_LOG_TRACE, "batch on replica %u: %zu request parts, %u sequences, %u tokens, %u us", w->r, sl->n_parts,
         s, sl->n_tokens, compute_us);

  s = 0;
  size_t answered = 0;
  for (size_t k = 0; k < sl->n_parts; k++) {
    const part_t *pt = &sl->parts[k];
    vr_job_t *j = pt->job;
    int st = rc;
    if (!rc) {
      memcpy(j->scores + pt->first, sl->scores + s, (size_t)pt->n * sizeof *j->scores);
      memcpy(j->seq_status + pt->first, sl->status + s, (size_t)pt->n * sizeof *j->seq_status);
      if (j->components && nc)
        memcpy(j->components + (size_t)pt->first * nc, sl->comps + (size_t)s * nc,
               (size_t)pt->n * nc * sizeof *j->components);
      for (uint32_t i = 0; i < pt->n && !st; i++) st = sl->status[s + i];
    }
    s += pt->n;
    answered += (size_t)part_done(j, st);
  }
  w->last_jobs = answered;
  w->last_done_ns = vr_now_ns();
  sl->n_parts = 0;
}

/* Completes the worker's batch in flight (if any) with the lock released; returns with it held. */
static void complete_unlocked(worker_t *w, vr_slot_t **inflight) {
  if (!*inflight) return;
  pthread_mutex_unlock(&w->b->mu);
  complete(w, *inflight);
  *inflight = NULL;
  pthread_mutex_lock(&w->b->mu);
}

/* One replica's worker loop; every worker takes from the one fair queue, so a batch is formed
 * by whichever replica is free (work-conserving), at most the scorer's pipeline depth of
 * batches outstanding per replica.
 * Batching: a batch starts when the token budget is full, or when nothing more
 * is expected: max_wait_us after the oldest queued job arrived, and -- after a
 * batch of N jobs was answered by this replica -- once N jobs are queued again or
 * batch_linger_us passed (N closed-loop clients resubmit within microseconds of
 * each other; starting on the first alone would split them across batches and
 * make the rest wait a whole forward).
 * Pipelining (scorer depth 2, cuda): when the queue holds a full batch beyond
 * the one computing and no other replica is idle, the next is packed and submitted
 * before the one in flight is answered, so the device never waits for the host; otherwise
 * the batch in flight is finished and answered first, so its clients' next requests can
 * join the next batch. A worker that leaves jobs queued wakes another one. */
static void *worker_main(void *arg) {
  worker_t *w = arg;
  vr_batcher_t *b = w->b;
  const int depth = vr_scorer_pipeline_depth(b->sc);
  vr_slot_t *inflight = NULL; /* submitted, not yet completed */
  int next = 0;
  pthread_mutex_lock(&b->mu);
  for (;;) {
    if (b->swap_pending && !b->partial) { /* between batches: the one in flight finishes on the old model */
      complete_unlocked(w, &inflight);
      if (!b->swap_pending || b->partial) continue;
      const uint64_t gen = b->swap_gen;
      b->parked++;
      pthread_cond_broadcast(&b->swap_cv);
      while (b->swap_gen == gen) pthread_cond_wait(&b->swap_cv, &b->mu);
      continue;
    }
    if (inflight && !(b->queued_tokens >= b->cfg.max_batch_tokens && !b->draining && b->idle == 0)) {
      complete_unlocked(w, &inflight);
      continue;
    }
    if (!b->rr && !b->draining) {
      b->idle++; /* nothing outstanding here: a batch in flight was completed above */
      while (!b->rr && !b->draining && !b->swap_pending) pthread_cond_wait(&b->cv, &b->mu);
      b->idle--;
    }
    if (b->swap_pending && !b->partial) continue;
    if (!b->rr) break; /* draining and empty */
    /* wait for company until the token budget fills or nothing more is expected */
    const uint64_t wait_end = q_oldest_ns(b) + (uint64_t)b->cfg.max_wait_us * 1000u;
    const uint64_t linger_end = w->last_done_ns + (uint64_t)b->cfg.batch_linger_us * 1000u;
    while (!inflight && b->rr && !b->draining && !b->swap_pending && b->queued_tokens < b->cfg.max_batch_tokens) {
      const uint64_t now = vr_now_ns();
      uint64_t until = 0;
      if (now < wait_end) until = wait_end;
      if (b->depth < w->last_jobs && now < linger_end && linger_end > until) until = linger_end;
      if (!until) break;
      struct timespec ts = vr_timespec_at(until);
      pthread_cond_timedwait(&b->cv, &b->mu, &ts);
    }
    if (b->swap_pending && !b->partial) continue;
    int expired = b->draining && vr_now_ns() >= b->deadline_ns;
    /* take jobs round-robin over the clients, whole while the budget allows, then the next
     * sequences of the job whose turn it is up to the budget (at least one sequence per batch;
     * the rest of that job waits for the next batch, and its client's turn passes on). Another
     * worker may have taken everything while this one waited. While a model switch waits,
     * only the rest of jobs already begun is taken: no request is scored by two models. */
    vr_slot_t *sl = &w->slots[next];
    sl->n_parts = 0;
    uint64_t tok = 0;
    const int finishing = b->swap_pending;
    while (b->rr && !(finishing && !b->partial)) {
      if (finishing)
        while (b->rr->head->next_seq == 0) b->rr = b->rr->next; /* b->partial > 0: there is one */
      vr_job_t *j = q_peek(b);
      const uint32_t begun = j->next_seq;
      uint32_t n = j->n_seqs - begun;
      uint64_t t = job_tokens(j) - j->taken_tokens;
      if (!expired && tok + t > b->cfg.max_batch_tokens) {
        n = 0;
        t = 0;
        for (uint32_t i = begun; i < j->n_seqs; i++) {
          uint64_t k = seq_kept(b->sc, j, i);
          if (tok + t + k > b->cfg.max_batch_tokens && tok + t > 0) break;
          t += k;
          n++;
        }
        if (n == 0) break; /* the batch is full */
      }
      if (grow((void **)&sl->parts, &sl->parts_cap, sl->n_parts + 1, sizeof *sl->parts) != 0) break;
      if (begun == 0) {
        j->status = 0;
        j->first_submit_ns = 0;
        j->parts_left = 1; /* held while sequences are left to pack */
      }
      __atomic_add_fetch(&j->parts_left, 1, __ATOMIC_RELAXED);
      sl->parts[sl->n_parts++] = (part_t){.job = j, .first = begun, .n = n, .tokens = t};
      j->next_seq += n;
      j->taken_tokens += t;
      b->queued_tokens -= t;
      tok += t;
      if (j->next_seq < j->n_seqs) { /* split: the budget is full */
        if (begun == 0) b->partial++;
        b->rr = b->rr->next;
        break;
      }
      if (begun > 0) b->partial--;
      q_pop(b);
      __atomic_sub_fetch(&j->parts_left, 1, __ATOMIC_RELEASE); /* everything packed (the part above still holds one) */
    }
    if (b->rr && b->idle) pthread_cond_signal(&b->cv); /* work left: a free replica takes it */
    pthread_mutex_unlock(&b->mu);
    if (expired) {
      vr_log(VR_LOG_WARN, "drain deadline passed: answering %zu queued requests with shutting-down", sl->n_parts);
      for (size_t k = 0; k < sl->n_parts; k++) part_done(sl->parts[k].job, VR_ERR_SHUTTING_DOWN);
      sl->n_parts = 0;
    } else if (sl->n_parts) {
      if (inflight && tok > b->cfg.max_batch_tokens) {
        /* one job beyond a forward is scored synchronously in several forwards, which the
         * model allows only with nothing outstanding */
        complete(w, inflight);
        inflight = NULL;
      }
      pack_submit(w, sl);
      if (inflight) complete(w, inflight); /* its successor is already queued on the device */
      inflight = sl;
      next ^= 1;
      if (depth < 2) {
        complete(w, inflight);
        inflight = NULL;
      }
    }
    pthread_mutex_lock(&b->mu);
  }
  /* draining and nothing queued: the last worker out reports the batcher idle */
  void (*cb)(void *) = NULL;
  void *cb_arg = NULL;
  if (--b->live == 0) {
    cb = b->on_idle;
    cb_arg = b->on_idle_arg;
    b->stopped = 1;
  }
  pthread_cond_broadcast(&b->swap_cv); /* a switch waiting for this worker to park counts one fewer */
  pthread_mutex_unlock(&b->mu);
  if (cb) cb(cb_arg);
  return NULL;
}

static void free_slots(worker_t *w) {
  for (int i = 0; i < 2; i++) {
    vr_slot_t *sl = &w->slots[i];
    free(sl->ids);
    free(sl->cu);
    free(sl->resp);
    free(sl->ex);
    free(sl->scores);
    free(sl->comps);
    free(sl->status);
    free(sl->parts);
  }
}

int vr_batcher_create(const vr_batcher_config_t *cfg, vr_scorer_t *sc, vr_metrics_t *m, vr_batcher_t **out) {
  *out = NULL;
  vr_batcher_t *b = calloc(1, sizeof *b);
  const uint32_t n = sc->n_replicas ? sc->n_replicas : 1;
  if (!b || !(b->workers = calloc(n, sizeof *b->workers))) {
    free(b);
    return VR_ERR_NOMEM;
  }
  b->cfg = *cfg;
  b->sc = sc;
  b->m = m;
  b->n_workers = n;
  pthread_mutex_init(&b->mu, NULL);
  vr_cond_init_monotonic(&b->cv);
  pthread_cond_init(&b->swap_cv, NULL);
  pthread_mutex_lock(&b->mu); /* a worker that exits early (a drain right away) counts live */
  for (uint32_t r = 0; r < n; r++) {
    b->workers[r].b = b;
    b->workers[r].r = r;
    int e = pthread_create(&b->workers[r].thread, NULL, worker_main, &b->workers[r]);
    if (e) {
      vr_log(VR_LOG_ERROR, "cannot start the batcher thread of replica %u: %s", r, strerror(e));
      pthread_mutex_unlock(&b->mu);
      vr_batcher_free(b); /* stops and joins the ones started */
      return VR_ERR_INTERNAL;
    }
    b->started++;
    b->live++;
  }
  pthread_mutex_unlock(&b->mu);
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
  const cq_t *c = *cq_slot(b, job->client);
  if (c && b->cfg.max_client_queue && c->depth >= b->cfg.max_client_queue) {
    pthread_mutex_unlock(&b->mu);
    return VR_ERR_OVERLOADED; /* this client's share is full; the others are still served */
  }
  job->kept_tokens = t;
  if (q_push(b, job) != 0) {
    pthread_mutex_unlock(&b->mu);
    return VR_ERR_NOMEM;
  }
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
    for (uint32_t r = 0; r < b->started; r++) pthread_join(b->workers[r].thread, NULL);
  }
  pthread_cond_destroy(&b->cv);
  pthread_cond_destroy(&b->swap_cv);
  pthread_mutex_destroy(&b->mu);
  for (uint32_t r = 0; r < b->n_workers; r++) free_slots(&b->workers[r]);
  free(b->workers);
  free(b);
}

int vr_batcher_swap_models(vr_batcher_t *b, struct vr_model **models, const vr_batcher_config_t *cfg) {
  pthread_mutex_lock(&b->mu);
  if (b->stopped || b->draining || b->swap_pending) {
    pthread_mutex_unlock(&b->mu);
    return VR_ERR_SHUTTING_DOWN;
  }
  b->swap_pending = 1;
  b->parked = 0;
  pthread_cond_broadcast(&b->cv);
  while (b->parked < b->live) pthread_cond_wait(&b->swap_cv, &b->mu);
  /* every live worker is parked between batches: no replica has a batch outstanding */
  for (uint32_t r = 0; r < b->sc->n_replicas; r++) {
    struct vr_model *old = b->sc->models[r];
    __atomic_store_n(&b->sc->models[r], models[r], __ATOMIC_RELEASE);
    models[r] = old;
  }
  if (cfg) b->cfg = *cfg;
  b->swap_pending = 0;
  b->swap_gen++;
  pthread_cond_broadcast(&b->swap_cv);
  pthread_cond_broadcast(&b->cv); /* a worker that was waiting for company looks again */
  pthread_mutex_unlock(&b->mu);
  return 0;
}

uint32_t vr_batcher_depth(vr_batcher_t *b) {
  pthread_mutex_lock(&b->mu);
  uint32_t d = b->depth;
  pthread_mutex_unlock(&b->mu);
  return d;
}
