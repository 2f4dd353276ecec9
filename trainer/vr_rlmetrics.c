/* vr_rlmetrics.c: the RL loop's metric helpers (vr_rlmetrics.h). */
#include "vr_rlmetrics.h"

#include <stdio.h>
#include <string.h>

typedef struct stats {
  double mean, max, min;
} stats_t;

static stats_t stat_of(const double *x, size_t n) {
  stats_t s = {0, n ? x[0] : 0, n ? x[0] : 0};
  for (size_t i = 0; i < n; i++) {
    s.mean += x[i];
    if (x[i] > s.max) s.max = x[i];
    if (x[i] < s.min) s.min = x[i];
  }
  if (n) s.mean /= (double)n;
  return s;
}

void vr_rlm_stats(vr_tmetrics_t *tm, const char *name, const double *x, size_t n) {
  stats_t s = stat_of(x, n);
  char k[64];
  snprintf(k, sizeof k, "%s/mean", name), vr_tm_set(tm, k, s.mean);
  snprintf(k, sizeof k, "%s/max", name), vr_tm_set(tm, k, s.max);
  snprintf(k, sizeof k, "%s/min", name), vr_tm_set(tm, k, s.min);
}

double vr_rlm_var(const double *x, size_t n) {
  double m = 0, q = 0;
  for (size_t i = 0; i < n; i++) m += x[i];
  m /= n ? (double)n : 1;
  for (size_t i = 0; i < n; i++) q += (x[i] - m) * (x[i] - m);
  return n > 1 ? q / (double)(n - 1) : 0;
}

void vr_rlm_progress(FILE *f, int step, int total, const vr_tmetrics_t *tm) {
  char bar[21];
  int fill = total > 0 ? step * 20 / total : 20;
  for (int i = 0; i < 20; i++) bar[i] = i < fill ? '#' : '.';
  bar[20] = 0;
  fprintf(f, "[%s] step %d/%d", bar, step, total);
  static const char *const show[] = {"critic/score/mean", "critic/rewards/mean", "actor/pg_loss", "actor/ppo_kl",
                                     "actor/entropy", "critic/vf_loss", "response_length/mean", "timing_s/step"};
  for (size_t k = 0; k < sizeof show / sizeof *show; k++)
    for (int i = 0; i < tm->n; i++)
      if (!strcmp(tm->names[i], show[k])) fprintf(f, " | %s %.4g", show[k], tm->values[i]);
  fprintf(f, "\n");
  fflush(f);
}

