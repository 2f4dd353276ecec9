/* vr_bench_hist.c: see vr_bench_hist.h for the bucket layout and error bound. */
#include "vr_bench_hist.h"

#include <math.h>
#include <string.h>

void vr_hist_init(vr_hist_t *h) {
  memset(h, 0, sizeof(*h));
  h->min = UINT64_MAX;
}

uint32_t vr_hist_index(uint64_t v) {
  if (v < 2u * VR_HIST_SUB) return (uint32_t)v;
  unsigned msb = 63u - (unsigned)__builtin_clzll(v);  /* >= SUB_BITS + 1 */
  unsigned shift = msb - VR_HIST_SUB_BITS;            /* >= 1 */
  /* v >> shift lies in [SUB, 2*SUB); group `shift` starts at SUB * (shift + 1) */
  return (uint32_t)(shift * VR_HIST_SUB + (v >> shift));
}

void vr_hist_bucket_range(uint32_t idx, uint64_t *lo, uint64_t *hi) {
  if (idx < 2u * VR_HIST_SUB) {
    *lo = *hi = idx;
    return;
  }
  unsigned shift = idx / VR_HIST_SUB - 1u;
  uint64_t top = (uint64_t)(idx - shift * VR_HIST_SUB); /* in [SUB, 2*SUB) */
  *lo = top << shift;
  *hi = *lo + ((1ull << shift) - 1u);
}

void vr_hist_record(vr_hist_t *h, uint64_t v) {
  h->buckets[vr_hist_index(v)]++;
  h->count++;
  h->sum += (double)v;
  if (v < h->min) h->min = v;
  if (v > h->max) h->max = v;
}

void vr_hist_merge(vr_hist_t *dst, const vr_hist_t *src) {
  if (src->count == 0) return;
  for (uint32_t i = 0; i < VR_HIST_BUCKETS; i++) dst->buckets[i] += src->buckets[i];
  dst->count += src->count;
  dst->sum += src->sum;
  if (src->min < dst->min) dst->min = src->min;
  if (src->max > dst->max) dst->max = src->max;
}

uint64_t vr_hist_percentile(const vr_hist_t *h, double p) {
  if (h->count == 0) return 0;
  if (p >= 100.0) return h->max;
  if (p < 0.0) p = 0.0;
  /* rank of the order statistic, 1-based: ceil(p/100 * n), at least 1 */
  uint64_t rank = (uint64_t)ceil(p / 100.0 * (double)h->count);
  if (rank < 1) rank = 1;
  if (rank > h->count) rank = h->count;
  uint64_t cum = 0;
  for (uint32_t i = 0; i < VR_HIST_BUCKETS; i++) {
    cum += h->buckets[i];
    if (cum >= rank) {
      uint64_t lo, hi;
      vr_hist_bucket_range(i, &lo, &hi);
      uint64_t mid = lo + (hi - lo) / 2u;
      if (mid < h->min) mid = h->min;
      if (mid > h->max) mid = h->max;
      return mid;
    }
  }
  return h->max;
}

double vr_hist_mean(const vr_hist_t *h) { return h->count ? h->sum / (double)h->count : 0.0; }
