/* vr_batcher.h: the one bounded queue of scoring work and the batcher's workers, one thread
 * per model replica (vr_scorer_t.n_replicas: --device cuda:0,cuda:1 or cpu,cpu).
 *
 * Producers (the shm dispatcher thread, the HTTP event-loop thread) submit
 * jobs; a free worker (work-conserving: whichever replica has no batch, or on a pipelined
 * device fewer than its depth, outstanding) packs queued jobs' sequences back to back without
 * padding (concatenated ids + cu_seqlens) up to max_batch_tokens (a job that does not fit
 * what is left of a batch is split at sequence boundaries: its first sequences fill this
 * batch, the rest go into the next ones, and it is answered when its last part is), waiting at
 * most max_wait_us after the oldest job arrived (and, after answering a batch
 * of N jobs, up to batch_linger_us for N jobs to be queued again: closed-loop
 * clients resubmit together and belong in one batch), takes queued jobs
 * round-robin over their clients (job->client) -- one queue for all replicas, so fairness holds
 * whichever replica scores -- runs its replica of the scorer, and calls each job's done() on
 * that worker's thread. Every job that vr_batcher_submit()
 * accepted gets exactly one done() call: scored, failed, or
 * VR_ERR_SHUTTING_DOWN when the drain deadline passes. */
#ifndef VR_BATCHER_H
#define VR_BATCHER_H

#include <stdint.h>

#include "vr_metrics.h"
#include "vr_rules.h"
#include "vr_scorer.h"

typedef struct vr_job vr_job_t;

/* Runs on a worker thread (or on the submitting thread when submit fails:
 * then it is NOT called; the submitter keeps the job). Must not block long. */
typedef void (*vr_job_done_fn)(vr_job_t *job);

struct vr_job {
  vr_transport_t transport;
  uint64_t client;               /* fairness key: jobs of one client are queued in order, clients
                                    are served round-robin (a shm lane, an HTTP connection) */
  uint32_t n_seqs;
  uint64_t n_tokens;             /* sum of the original lengths */
  const int32_t *ids;            /* n_tokens; owned by the submitter until done() */
  const uint32_t *cu;            /* n_seqs + 1 */
  const vr_extras_t *const *extras; /* n_seqs pointers (entries may be NULL) or NULL */
  uint64_t accepted_ns;          /* vr_now_ns() at intake */
  /* outputs (buffers owned by the submitter, sized n_seqs / n_seqs * n_components) */
  float *scores;
  int32_t *seq_status;
  float *components;
  int status;                    /* 0 or the job's error */
  uint32_t queue_us, compute_us;
  vr_job_done_fn done;
  void *user;                    /* the submitter's context */
  vr_job_t *next;                /* queue link, owned by the batcher while queued */
  /* batcher-private: a job larger than what is left of a batch is split at sequence
   * boundaries over consecutive batches (parts); it is answered once its last part is */
  uint64_t kept_tokens;          /* tokens after truncation */
  uint64_t taken_tokens;         /* kept tokens of the sequences already packed into batches */
  uint32_t next_seq;             /* first sequence not yet packed into a batch */
  uint32_t parts_left;           /* atomic: parts in flight, + 1 while sequences are left to pack */
  uint64_t first_submit_ns;      /* when its first part was submitted (compute_us counts from it) */
};

/* Allocates the output buffers for n_seqs sequences (at least one slot each):
 * scores and components NaN, seq_status 0. 0 or VR_ERR_NOMEM (nothing kept).
 * vr_job_free_outputs releases them (NULL-safe fields). Any thread. */
int vr_job_alloc_outputs(vr_job_t *j, uint32_t n_seqs, uint32_t n_components);
void vr_job_free_outputs(vr_job_t *j);

typedef struct vr_batcher vr_batcher_t;

typedef struct vr_batcher_config {
  uint32_t max_batch_tokens;
  uint32_t max_wait_us;
  uint32_t batch_linger_us;      /* after answering N requests, wait this long for N to be queued again */
  uint32_t max_queue;            /* jobs waiting; beyond: VR_ERR_OVERLOADED */
  uint32_t max_client_queue;     /* jobs of one client waiting (0: no own limit); beyond: VR_ERR_OVERLOADED */
} vr_batcher_config_t;

/* Starts one worker thread per replica of sc. sc and m must outlive the batcher. */
int vr_batcher_create(const vr_batcher_config_t *cfg, vr_scorer_t *sc, vr_metrics_t *m, vr_batcher_t **out);

/* Queues a job (thread-safe). 0: accepted (done() will be called exactly once);
 * VR_ERR_OVERLOADED: queue full; VR_ERR_SHUTTING_DOWN: draining. On error the
 * caller still owns the job and answers it itself. */
int vr_batcher_submit(vr_batcher_t *b, vr_job_t *job);

/* Stops intake; queued jobs are still scored until deadline_ns (vr_now_ns
 * clock), after which the rest are answered VR_ERR_SHUTTING_DOWN. The batcher
 * workers then exit; on_idle(arg) is called once everything accepted
 * has been answered (used to wake the event loop): from the last worker to stop. Thread-safe,
 * idempotent. */
void vr_batcher_drain(vr_batcher_t *b, uint64_t deadline_ns, void (*on_idle)(void *), void *arg);

/* Joins the workers (after vr_batcher_drain) and frees. NULL is a no-op. */
void vr_batcher_free(vr_batcher_t *b);

uint32_t vr_batcher_depth(vr_batcher_t *b);

/* Switches every replica's model between two batches: models[r] (sc->n_replicas of them) takes
 * replica r's place, and the batching settings become *cfg (NULL: kept). Every worker finishes its
 * batch in flight on the old model (and the rest of any request split over batches that has begun:
 * one request is never scored by two models) and parks; once all are parked the models are switched
 * together (no batch is ever scored while replicas serve different models), and models[r] gets
 * the old model of replica r (the caller frees them once no other thread can still be reading
 * the old pointers). Blocks until done. 0, or VR_ERR_SHUTTING_DOWN when the batcher is stopping
 * (or another switch is running): then nothing was switched and models[] is untouched. Any
 * thread but a worker's. */
struct vr_model;
int vr_batcher_swap_models(vr_batcher_t *b, struct vr_model **models, const vr_batcher_config_t *cfg);

#endif /* VR_BATCHER_H */
