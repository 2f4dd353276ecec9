/* vr_tmetrics.h: verl-trainer's per-step metrics sink, shared by every phase of a step.
 *
 * Names follow verl's: timing_s/<phase> (gen, reward, old_log_prob, ref, values, adv,
 * update_critic, update_actor, sync_weights, step, ...), plus any "<group>/<name>" metric.
 * vr_tm_end_step prints one console progress line
 *   step 3/20 | timing_s/step 0.0123 | timing_s/sync_weights 0.0045 | comm/weight_sync/busbw_gbps 12.3
 * (to the stream given at init) and appends one JSON line {"step": 3, "timing_s/step": 0.0123,
 * ...} to the metrics file, flushed per step so a crash loses no finished step.
 *
 * Threading: one thread (the controller's). */
#ifndef VR_TMETRICS_H
#define VR_TMETRICS_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VR_TM_MAX 128 /* metrics per step */

typedef struct vr_tmetrics {
  FILE *console;  /* NULL: no progress line */
  FILE *jsonl;    /* NULL: no file */
  int total_steps;
  int n;
  char names[VR_TM_MAX][64];
  double values[VR_TM_MAX];
} vr_tmetrics_t;

/* path NULL or "": no JSON lines file; an existing file is appended to (a resumed run continues it).
 * Returns 0 or -1 (errno) when the file cannot be opened. */
int vr_tm_open(vr_tmetrics_t *tm, const char *path, FILE *console, int total_steps);
void vr_tm_close(vr_tmetrics_t *tm);
/* Sets (or replaces) a metric of the current step. */
void vr_tm_set(vr_tmetrics_t *tm, const char *name, double v);
/* Adds seconds to timing_s/<phase>. */
void vr_tm_time(vr_tmetrics_t *tm, const char *phase, double seconds);
/* Writes the step's line and JSON record, then clears the step. Returns 0 or -1 on a write error. */
int vr_tm_end_step(vr_tmetrics_t *tm, int step);

#ifdef __cplusplus
}
#endif
#endif /* VR_TMETRICS_H */
