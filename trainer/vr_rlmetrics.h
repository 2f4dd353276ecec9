/* vr_rlmetrics.h: the RL loop's metric helpers on the step's sink (vr_tmetrics.h): verl's
 * mean / max / min triples (compute_data_metrics), a variance (vf_explained_var), and
 * the console line with a progress bar. Threading: the controller's thread. */
#ifndef VR_RLMETRICS_H
#define VR_RLMETRICS_H

#include <stddef.h>
#include <stdio.h>

#include "vr_tmetrics.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sets name/mean, name/max, name/min of x[n] (0 when n is 0). */
void vr_rlm_stats(vr_tmetrics_t *tm, const char *name, const double *x, size_t n);
/* Unbiased variance of x[n] (torch.var's default, as verl's vf_explained_var); 0 when n < 2. */
double vr_rlm_var(const double *x, size_t n);
/* "[#####...] step S/N | critic/score/mean ... | timing_s/step ..." with the main metrics the
 * step has (before vr_tm_end_step clears them). */
void vr_rlm_progress(FILE *f, int step, int total, const vr_tmetrics_t *tm);

#ifdef __cplusplus
}
#endif
#endif /* VR_RLMETRICS_H */
