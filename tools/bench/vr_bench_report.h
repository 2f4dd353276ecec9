/* vr_bench_report.h: the bench's outputs: a text table on stdout, --json
 * (one object, or a list for several runs), --csv, --plot (a self-contained
 * SVG of latency percentiles per transport and concurrency/rate).
 *
 * JSON keys per run: transport, concurrency, requests, errors,
 * throughput {req_s, seq_s, tok_s}, latency_us {p50, p90, p99, p999, max}
 * (the contract), plus successes, mode ("closed"|"open"), rate,
 * duration_s, batch, seqs, tokens, warmup_errors, unsent, verify_failures,
 * server_us {queue_mean, compute_mean}, latency_mean_us. Latencies are in microseconds. */
#ifndef VR_BENCH_REPORT_H
#define VR_BENCH_REPORT_H

#include <stdio.h>

#include "vr_bench_run.h"

/* What the report says about the setup (printed above the table). */
typedef struct vr_report_meta {
  const char *command_line;
  const char *workload;    /* e.g. "batch 4 x fixed:128" */
  uint32_t batch;
} vr_report_meta_t;

void vr_report_table(FILE *f, const vr_report_meta_t *m, const vr_run_result_t *r, size_t n);
/* Each returns 0 or VR_ERR_IO (logged). `as_list`: write a JSON list even for one run. */
int vr_report_json(const char *path, const vr_report_meta_t *m, const vr_run_result_t *r, size_t n,
                   int as_list);
int vr_report_csv(const char *path, const vr_report_meta_t *m, const vr_run_result_t *r, size_t n);
int vr_report_svg(const char *path, const vr_report_meta_t *m, const vr_run_result_t *r, size_t n);

#endif
