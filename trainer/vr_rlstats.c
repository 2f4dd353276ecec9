/* vr_rlstats.c: verl's update metrics (vr_rlstats.h). */
#include "vr_rlstats.h"

#include <string.h>

/* torch's masked_mean: sum / (count + 1e-8) (verl_F.masked_mean) */
static double masked_mean(double sum, double n) { return sum / (n + 1e-8); }

void vr_rls_add_micro(double *st, const vr_rls_micro_t *m, double scale) {
  st[VR_ST_PG_LOSS] += m->wpg * scale;
  st[VR_ST_KL_LOSS] += m->wkl * scale;
  st[VR_ST_VF_LOSS] += 0.5 * m->wvf * scale;
  st[VR_ST_ENTROPY] += m->went;
  st[VR_ST_CLIPFRAC] += masked_mean(m->clip, m->n_tok);
  st[VR_ST_CLIPFRAC_LOWER] += masked_mean(m->clip_lower, m->n_tok);
  st[VR_ST_PPO_KL] += masked_mean(m->neg_kl, m->n_tok);
  st[VR_ST_VF_CLIPFRAC] += masked_mean(m->vclip, m->n_tok);
  st[VR_ST_VPRED] += masked_mean(m->vpred, m->n_tok);
  st[VR_ST_MICRO] += 1;
}

void vr_rls_reduce(const double *members, int n, double *out) {
  memset(out, 0, VR_ST_COUNT * sizeof *out);
  int ran = 0;
  for (int k = 0; k < n; k++) {
    const double *s = members + (size_t)k * VR_ST_COUNT;
    for (int i = 0; i < VR_ST_COUNT; i++) out[i] += s[i];
    ran += s[VR_ST_MICRO] > 0;
  }
  static const int per_micro[] = {VR_ST_CLIPFRAC, VR_ST_PPO_KL, VR_ST_CLIPFRAC_LOWER, VR_ST_ENTROPY,
                                  VR_ST_VF_CLIPFRAC, VR_ST_VPRED};
  static const int summed[] = {VR_ST_PG_LOSS, VR_ST_KL_LOSS, VR_ST_VF_LOSS};
  for (size_t i = 0; i < sizeof per_micro / sizeof *per_micro; i++)
    out[per_micro[i]] = out[VR_ST_MICRO] > 0 ? out[per_micro[i]] / out[VR_ST_MICRO] : 0;
  for (size_t i = 0; i < sizeof summed / sizeof *summed; i++) out[summed[i]] = ran ? out[summed[i]] / ran : 0;
  out[VR_ST_UPDATES] = n > 0 ? members[VR_ST_UPDATES] : 0;
  out[VR_ST_GRAD_NORM] = out[VR_ST_UPDATES] > 0 ? members[VR_ST_GRAD_NORM] / out[VR_ST_UPDATES] : 0;
}
