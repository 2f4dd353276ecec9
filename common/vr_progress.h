/* vr_progress.h: INFO progress lines for long start-up work (weight reads, conversion,
 * CUDA upload, warm-up buckets), through vr_log only.
 *
 *   vr_progress_t p;
 *   vr_progress_begin(&p, "cuda:0 weights", "layers", n_layers, total_bytes);
 *   for (...) vr_progress_step(&p, 1, layer_bytes);   // a line at most once per interval
 *   vr_progress_end(&p);                              // always one final line
 *
 * A line reads
 *   "cuda:0 weights: 412.0/15316.5 MiB (2.7%), 1/32 layers, 803.1 MiB/s, ETA 18.6 s"
 * and the final one "cuda:0 weights: done, 15316.5 MiB, 32 layers in 19.1 s (802.0 MiB/s)".
 * With total_bytes 0 the byte parts are left out and the ETA comes from the item count, or from
 * the work weights when total_work is set (items of different cost, e.g. warm-up buckets).
 * Nothing is printed unless the work lasts longer than the interval (vr_progress_begin's
 * default: 1 s) or the final line is asked for, so a tiny test model logs one line at most.
 * The struct is the caller's (stack is fine); one thread at a time. */
#ifndef VR_PROGRESS_H
#define VR_PROGRESS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vr_progress {
  char what[64];        /* "cuda:0 weights" */
  const char *unit;     /* plural noun for the items: "tensors", "layers", "buckets" (static) */
  uint64_t total_bytes, done_bytes;
  uint32_t total_items, done_items;
  uint64_t t0_ns, last_ns, interval_ns;
  int printed;          /* a progress line went out: the final line is then always printed */
  /* optional work weights for the ETA when items differ in cost (warm-up buckets: tokens);
   * total_work 0 = unweighted. Set after vr_progress_begin, add with vr_progress_work. */
  uint64_t total_work, done_work;
} vr_progress_t;

/* Adds weighted work done (see total_work); call before the vr_progress_step of the same items. */
static inline void vr_progress_work(vr_progress_t *p, uint64_t work) { p->done_work += work; }

/* Starts the clock. what is copied (truncated to 63 bytes); unit must outlive p. */
void vr_progress_begin(vr_progress_t *p, const char *what, const char *unit, uint32_t total_items,
                       uint64_t total_bytes);

/* Adds work done; logs an INFO line when at least interval_ns passed since the last one. */
void vr_progress_step(vr_progress_t *p, uint32_t items, uint64_t bytes);

/* Logs the final line (elapsed time and the mean rate) when the work took longer than one
 * interval or a progress line was printed; a short job stays silent (its caller's own summary
 * line says it was done). */
void vr_progress_end(vr_progress_t *p);

/* Formats the current state as one line (what vr_progress_step logs); for tests. */
void vr_progress_format(const vr_progress_t *p, uint64_t now_ns, int final, char *buf, unsigned n);

#ifdef __cplusplus
}
#endif
#endif /* VR_PROGRESS_H */
