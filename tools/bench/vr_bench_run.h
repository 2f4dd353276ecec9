/* vr_bench_run.h: one measurement: N clients against one server over one
 * transport, closed loop (each client sends its next request when the last
 * one answered) or open loop (requests follow a schedule of intended send
 * times at --rate R, constant or Poisson; latency = completion - intended send
 * time, so a stall that delays sending counts in full: no coordinated
 * omission).
 *
 * Clients are threads, or processes with procs = 1 (forked; results come back
 * through a MAP_SHARED mapping). Every client has its own connection (its own
 * shm lane / HTTP connection), its own histogram and counters; they are
 * merged into the result after the run.
 *
 * Timeline: all clients connect, then start together at t0; [t0, t0+warmup)
 * is warm-up (not recorded); the measured window is [t0+warmup, +duration)
 * or the first `requests` requests after warm-up. A request belongs to the
 * window by its send time (closed loop) or intended send time (open loop). */
#ifndef VR_BENCH_RUN_H
#define VR_BENCH_RUN_H

#include <stdint.h>

#include "vr_bench_hist.h"
#include "vr_bench_transport.h"
#include "vr_bench_workload.h"

/* Checks the scores of one answered request; returns the number of wrong
 * scores (0 = all correct). Called from client threads/processes: must be
 * thread-safe. */
typedef uint32_t (*vr_verify_fn)(const vr_reqbuf_t *r, const float *scores);

typedef struct vr_run_cfg {
  vr_transport_t transport;
  vr_target_t target;
  uint32_t concurrency;     /* clients (closed loop) / maximum requests in flight (open loop) */
  int procs;                /* 1: clients are processes */
  double rate;              /* requests/s; 0 = closed loop */
  int poisson;              /* open loop: exponential inter-arrival gaps */
  double duration_s;        /* measured window (ignored when requests > 0) */
  double warmup_s;
  uint64_t requests;        /* > 0: measure this many requests instead of a duration */
  const vr_workload_t *wl;
  vr_verify_fn verify;      /* NULL: scores not checked */
  uint64_t seed;
} vr_run_cfg_t;

typedef struct vr_run_result {
  vr_transport_t transport;
  uint32_t concurrency;
  double rate;              /* 0 = closed loop */
  int poisson;
  uint64_t requests;        /* measured requests = successes + errors */
  uint64_t successes;
  uint64_t errors;
  uint64_t warmup_errors;   /* errors during warm-up (not in requests; still fail the run) */
  uint64_t unsent;          /* open loop: scheduled but never sent (client fell behind past the drain limit) */
  uint64_t verify_failures; /* scores that did not match the checksum (each request counted once, also in errors) */
  uint64_t seqs, tokens;    /* of successful measured requests */
  double duration_s;        /* measured window */
  double req_s, seq_s, tok_s;
  vr_hist_t lat_ns;         /* latency of successful measured requests */
  double queue_us_mean, compute_us_mean; /* server-reported, over successes */
  int first_error;
  char first_error_msg[256];
} vr_run_result_t;

/* Runs one measurement. Returns 0 when the run took place (it may still have
 * counted errors), or a status when it could not run (no client could
 * connect, out of memory); res is filled in either case. res is large
 * (histogram): allocate it on the heap. */
int vr_run(const vr_run_cfg_t *cfg, vr_run_result_t *res);

#endif
