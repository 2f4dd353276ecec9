/* vr_bench_report.h: the bench's outputs: a text table on stdout, --json
 * (one object, or a list for several runs), --csv, --plot (a self-contained
 * SVG: one panel per transport with its latency percentiles against the load,
 * one panel with every transport's throughput against the load; PNG through
 * rsvg-convert). The table and the plot show a percentile only where the sample
 * supports it (vr_report_pct_supported); JSON and CSV always carry every value.
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

/* The support rule: the p-th percentile (0 < p < 100) of `count` samples is shown only
 * when count >= 10 / (1 - p/100), i.e. at least 10 samples lie above it (p50: 20, p90: 100,
 * p99: 1000, p99.9: 10000); p <= 0 or p >= 100 (min, max) needs one sample. 1 or 0. */
int vr_report_pct_supported(double p, uint64_t count);

/* --plot FILE.png: writes the SVG to svg_path, then runs `rsvg-convert -o png_path svg_path`
 * (librsvg2-bin). 0, or VR_ERR_IO (logged, with a HINT when rsvg-convert is missing). */
int vr_report_png(const char *png_path, const char *svg_path, const vr_report_meta_t *m, const vr_run_result_t *r,
                  size_t n);
/* 1 when rsvg-convert is on PATH (checked before any run when --plot asks for PNG). */
int vr_report_png_available(void);

#endif
