/* vr_progress.c: rate-limited progress lines (vr_progress.h). */
#include "vr_progress.h"

#include <stdio.h>

#include "vr_log.h"
#include "vr_time.h"

void vr_progress_begin(vr_progress_t *p, const char *what, const char *unit, uint32_t total_items,
                       uint64_t total_bytes) {
  snprintf(p->what, sizeof p->what, "%s", what ? what : "work");
  p->unit = unit ? unit : "items";
  p->total_items = total_items;
  p->total_bytes = total_bytes;
  p->done_items = 0;
  p->done_bytes = 0;
  p->t0_ns = p->last_ns = vr_now_ns();
  p->interval_ns = 1000000000ull;
  p->printed = 0;
  p->total_work = p->done_work = 0;
}

void vr_progress_format(const vr_progress_t *p, uint64_t now_ns, int final, char *buf, unsigned n) {
  const double s = (now_ns - p->t0_ns) / 1e9, mib = p->done_bytes / 1048576.0;
  const double rate = s > 0 ? mib / s : 0;
  if (final) {
    if (p->total_bytes)
      snprintf(buf, n, "%s: done, %.1f MiB, %u %s in %.1f s (%.1f MiB/s)", p->what, mib, p->done_items, p->unit, s,
               rate);
    else
      snprintf(buf, n, "%s: done, %u %s in %.1f s", p->what, p->done_items, p->unit, s);
    return;
  }
  /* the ETA extrapolates the mean rate so far: bytes when known, else the work weights, else items */
  double frac = p->total_bytes ? (double)p->done_bytes / (double)p->total_bytes
                : p->total_work ? (double)p->done_work / (double)p->total_work
                : p->total_items ? (double)p->done_items / p->total_items : 0;
  char eta[32] = "ETA unknown";
  if (frac > 0 && frac <= 1) snprintf(eta, sizeof eta, "ETA %.1f s", s * (1 - frac) / frac);
  if (p->total_bytes)
    snprintf(buf, n, "%s: %.1f/%.1f MiB (%.1f%%), %u/%u %s, %.1f MiB/s, %s", p->what, mib,
             p->total_bytes / 1048576.0, 100 * frac, p->done_items, p->total_items, p->unit, rate, eta);
  else
    snprintf(buf, n, "%s: %u/%u %s (%.1f%%), %s", p->what, p->done_items, p->total_items, p->unit, 100 * frac, eta);
}

void vr_progress_step(vr_progress_t *p, uint32_t items, uint64_t bytes) {
  p->done_items += items;
  p->done_bytes += bytes;
  uint64_t now = vr_now_ns();
  if (now - p->last_ns < p->interval_ns) return;
  p->last_ns = now;
  p->printed = 1;
  char line[256];
  vr_progress_format(p, now, 0, line, sizeof line);
  vr_log(VR_LOG_INFO, "%s", line);
}

void vr_progress_end(vr_progress_t *p) {
  uint64_t now = vr_now_ns();
  if (!p->printed && now - p->t0_ns < p->interval_ns) return;
  char line[256];
  vr_progress_format(p, now, 1, line, sizeof line);
  vr_log(VR_LOG_INFO, "%s", line);
}
