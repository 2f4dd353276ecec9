/* vr_bench_hist.h: log-linear latency histogram (HdrHistogram-style).
 *
 * Values are non-negative integers (the bench records nanoseconds). Values
 * below 2*VR_HIST_SUB are counted exactly; above, every power of two is split
 * into VR_HIST_SUB (128) equal buckets, so a bucket's width is at most 1/128
 * of any value in it (0.78%). Percentiles report the bucket's midpoint, clamped
 * to the exact min/max, so a reported percentile lies within 0.4% of a value
 * that falls in the same bucket as the exact order statistic (<= 1% overall).
 *
 * Memory: one fixed array (~58 KiB) inside the struct; no allocation.
 * Threading: not thread-safe; the bench gives every client its own histogram
 * and merges them (vr_hist_merge) after the run. Plain data: may live in a
 * MAP_SHARED mapping written by a child process. */
#ifndef VR_BENCH_HIST_H
#define VR_BENCH_HIST_H

#include <stdint.h>

#define VR_HIST_SUB_BITS 7
#define VR_HIST_SUB (1u << VR_HIST_SUB_BITS)
/* index space: [0, 2*SUB) exact, then (64 - SUB_BITS - 1) groups of SUB buckets */
#define VR_HIST_BUCKETS (2u * VR_HIST_SUB + (64u - VR_HIST_SUB_BITS - 1u) * VR_HIST_SUB)

typedef struct vr_hist {
  uint64_t count;
  uint64_t min;            /* exact; UINT64_MAX when empty */
  uint64_t max;            /* exact; 0 when empty */
  double sum;              /* for the mean */
  uint64_t buckets[VR_HIST_BUCKETS];
} vr_hist_t;

void vr_hist_init(vr_hist_t *h);
void vr_hist_record(vr_hist_t *h, uint64_t v);
/* Adds src into dst (dst may already hold values). */
void vr_hist_merge(vr_hist_t *dst, const vr_hist_t *src);
/* Value at percentile p in [0, 100]: the smallest recorded value v such that
 * at least p% of the values are <= v, up to the bucket resolution. 0 when empty.
 * p = 100 returns the exact max. */
uint64_t vr_hist_percentile(const vr_hist_t *h, double p);
double vr_hist_mean(const vr_hist_t *h);

/* Bucket geometry (exposed for the unit test): index of v, and the inclusive
 * range [lo, hi] of values that share bucket idx. */
uint32_t vr_hist_index(uint64_t v);
void vr_hist_bucket_range(uint32_t idx, uint64_t *lo, uint64_t *hi);

#endif
