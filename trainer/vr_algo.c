/* vr_algo.c: verl's RL formulas (vr_algo.h; verl v0.7.1 core_algos.py). */
#include "vr_algo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"

static const char *const vr_adv_names[] = {"gae", "grpo", "rloo", "reinforce_plus_plus"};

int vr_adv_est_parse(const char *s) {
  for (int i = 0; i < (int)(sizeof vr_adv_names / sizeof *vr_adv_names); i++)
    if (s && strcmp(s, vr_adv_names[i]) == 0) return i;
  return -1;
}

const char *vr_adv_est_name(vr_adv_est_t e) {
  return (unsigned)e < sizeof vr_adv_names / sizeof *vr_adv_names ? vr_adv_names[e] : "?";
}

int vr_adv_est_needs_critic(vr_adv_est_t e) { return e == VR_ADV_GAE; }

/* masked_whiten: mean, unbiased var (masked_var with bessel correction), (x - mean) * rsqrt(var + 1e-8) */
int vr_algo_whiten(double *x, size_t n) {
  if (n < 2) return VR_ERR_INVAL;
  double s = 0;
  for (size_t i = 0; i < n; i++) s += x[i];
  /* masked_mean divides by (mask.sum() + 1e-8) */
  const double mean = s / ((double)n + 1e-8);
  double q = 0;
  for (size_t i = 0; i < n; i++) q += (x[i] - mean) * (x[i] - mean);
  const double var = q / ((double)n + 1e-8) * ((double)n / (double)(n - 1));
  const double inv = 1.0 / sqrt(var + 1e-8);
  for (size_t i = 0; i < n; i++) x[i] = (x[i] - mean) * inv;
  return 0;
}

int vr_algo_gae(const double *rewards, const double *values, const uint32_t *cu, uint32_t n_resp, double gamma,
                double lam, double *adv, double *ret) {
  for (uint32_t r = 0; r < n_resp; r++) {
    double nextvalue = 0, lastgaelam = 0;
    for (uint32_t t = cu[r + 1]; t-- > cu[r];) {
      const double delta = rewards[t] + gamma * nextvalue - values[t];
      lastgaelam = delta + gamma * lam * lastgaelam;
      nextvalue = values[t];
      adv[t] = lastgaelam;
    }
  }
  const size_t n = cu[n_resp];
  for (size_t t = 0; t < n; t++) ret[t] = adv[t] + values[t];
  return vr_algo_whiten(adv, n);
}

/* Responses of the group of r, in order: the group ids are compared directly (O(n^2) in the
 * worst case; batches are thousands of responses). */
static void group_stats(const double *score, const int64_t *group, uint32_t n, uint32_t r, double *mean,
                        double *std, uint32_t *k) {
  double s = 0;
  uint32_t c = 0;
  for (uint32_t i = 0; i < n; i++)
    if (group[i] == group[r]) s += score[i], c++;
  const double m = s / c; /* torch.mean */
  double q = 0;
  for (uint32_t i = 0; i < n; i++)
    if (group[i] == group[r]) q += (score[i] - m) * (score[i] - m);
  *mean = m;
  *std = c > 1 ? sqrt(q / (c - 1)) : 0; /* torch.std: unbiased */
  *k = c;
}

void vr_algo_grpo(const double *score, const int64_t *group, uint32_t n_resp, double eps, int norm_by_std,
                  double *adv) {
  for (uint32_t r = 0; r < n_resp; r++) {
    double mean, std;
    uint32_t k;
    group_stats(score, group, n_resp, r, &mean, &std, &k);
    if (k == 1) mean = 0, std = 1;
    adv[r] = norm_by_std ? (score[r] - mean) / (std + eps) : score[r] - mean;
  }
}

void vr_algo_rloo(const double *score, const int64_t *group, uint32_t n_resp, double *adv) {
  for (uint32_t r = 0; r < n_resp; r++) {
    double mean, std;
    uint32_t k;
    group_stats(score, group, n_resp, r, &mean, &std, &k);
    adv[r] = k > 1 ? score[r] * k / (k - 1) - mean * k / (k - 1) : score[r];
  }
}

int vr_algo_reinforce_pp(const double *rewards, const uint32_t *cu, uint32_t n_resp, double gamma, double *adv,
                         double *ret) {
  for (uint32_t r = 0; r < n_resp; r++) {
    double running = 0;
    for (uint32_t t = cu[r + 1]; t-- > cu[r];) {
      running = rewards[t] + gamma * running;
      ret[t] = running;
    }
  }
  const size_t n = cu[n_resp];
  memcpy(adv, ret, n * sizeof *adv);
  return vr_algo_whiten(adv, n);
}

/* ---- KL ------------------------------------------------------------------------------------ */

int vr_kl_parse(const char *s, vr_kl_est_t *out) {
  static const struct {
    const char *name;
    vr_kl_type_t t;
  } tab[] = {{"kl", VR_KL_K1},  {"k1", VR_KL_K1},         {"abs", VR_KL_ABS}, {"mse", VR_KL_K2},
             {"k2", VR_KL_K2}, {"low_var_kl", VR_KL_K3}, {"k3", VR_KL_K3}};
  if (!s) return -1;
  size_t n = strlen(s);
  int plus = n > 0 && s[n - 1] == '+';
  for (size_t i = 0; i < sizeof tab / sizeof *tab; i++)
    if (strlen(tab[i].name) == n - (size_t)plus && strncmp(s, tab[i].name, n - (size_t)plus) == 0) {
      out->type = tab[i].t;
      /* verl: "mse"/"k2" with "+" is k2 itself */
      out->straight_through = plus && tab[i].t != VR_KL_K2;
      return 0;
    }
  return -1;
}

static double clampd(double x, double lo, double hi, int *inside) {
  *inside = x >= lo && x <= hi;
  return x < lo ? lo : x > hi ? hi : x;
}

double vr_kl_value(const vr_kl_est_t *k, double lp, double ref, double *grad) {
  const double d = lp - ref;
  double v = 0, g = 0;
  switch (k->type) {
    case VR_KL_K1: v = d, g = 1; break;
    case VR_KL_ABS: v = fabs(d), g = d > 0 ? 1 : d < 0 ? -1 : 0; break;
    case VR_KL_K2: v = 0.5 * d * d, g = d; break;
    case VR_KL_K3: {
      int in1, in2;
      const double kl = clampd(ref - lp, -20, 20, &in1);
      const double ratio = exp(kl);
      v = clampd(ratio - kl - 1, -10, 10, &in2);
      g = in1 && in2 ? 1 - ratio : 0; /* d/dlp of (exp(ref - lp) - (ref - lp) - 1) */
      break;
    }
  }
  if (k->straight_through) g = d;
  if (grad) *grad = g;
  return v;
}

/* ---- aggregation ----------------------------------------------------------------------------- */

static const char *const vr_agg_names[] = {"token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                           "seq-mean-token-sum-norm"};

int vr_agg_parse(const char *s) {
  for (int i = 0; i < (int)(sizeof vr_agg_names / sizeof *vr_agg_names); i++)
    if (s && strcmp(s, vr_agg_names[i]) == 0) return i;
  return -1;
}

const char *vr_agg_name(vr_agg_mode_t m) {
  return (unsigned)m < sizeof vr_agg_names / sizeof *vr_agg_names ? vr_agg_names[m] : "?";
}

void vr_agg_weights(vr_agg_mode_t m, const uint32_t *cu, uint32_t n_resp, double horizon, double *w) {
  const size_t n_tok = cu[n_resp];
  uint32_t n_seq = 0;
  for (uint32_t r = 0; r < n_resp; r++) n_seq += cu[r + 1] > cu[r];
  for (uint32_t r = 0; r < n_resp; r++) {
    const uint32_t len = cu[r + 1] - cu[r];
    double x = 0;
    switch (m) {
      case VR_AGG_TOKEN_MEAN: x = 1.0 / (double)n_tok; break;
      case VR_AGG_SEQ_MEAN_TOKEN_SUM: x = 1.0 / n_seq; break;
      case VR_AGG_SEQ_MEAN_TOKEN_MEAN: x = 1.0 / ((double)len + 1e-8) / n_seq; break;
      case VR_AGG_SEQ_MEAN_TOKEN_SUM_NORM: x = 1.0 / n_seq / horizon; break;
    }
    for (uint32_t t = cu[r]; t < cu[r + 1]; t++) w[t] = x;
  }
}

double vr_agg_apply(const double *w, const double *x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += w[i] * x[i];
  return s;
}

/* ---- policy and value losses ------------------------------------------------------------------ */

/* d max(a, b) / d a for torch.maximum (ties split in half) */
static double dmax_a(double a, double b) { return a > b ? 1 : a < b ? 0 : 0.5; }

double vr_pg_token(const vr_pg_clip_t *c, double lp, double old, double adv, double *grad, int *clipped,
                   int *clipped_lower, double *neg_kl) {
  int in_kl, in_ratio;
  const double nkl = clampd(lp - old, -20, 20, &in_kl);
  const double ratio = exp(nkl);
  const double dratio = in_kl ? ratio : 0; /* d ratio / d lp */
  const double l1 = -adv * ratio, dl1 = -adv * dratio;
  const double rc = clampd(ratio, 1 - c->clip_ratio_low, 1 + c->clip_ratio_high, &in_ratio);
  const double l2 = -adv * rc, dl2 = in_ratio ? -adv * dratio : 0;
  const double c1 = l1 > l2 ? l1 : l2;
  const double a1 = dmax_a(l1, l2), dc1 = a1 * dl1 + (1 - a1) * dl2;
  const double l3 = -adv * c->clip_ratio_c;
  const double c2 = c1 < l3 ? c1 : l3;
  const double dc2 = dmax_a(-c1, -l3) * dc1; /* min(l3, c1) = -max(-c1, -l3) */
  const double loss = adv < 0 ? c2 : c1;
  if (grad) *grad = adv < 0 ? dc2 : dc1;
  if (clipped) *clipped = l2 > l1;
  if (clipped_lower) *clipped_lower = c1 > l3 && adv < 0;
  if (neg_kl) *neg_kl = nkl;
  return loss;
}

double vr_vf_token(double v, double ret, double old, double cliprange_value, double *grad, int *clipped) {
  int in;
  const double vc = clampd(v, old - cliprange_value, old + cliprange_value, &in);
  const double l1 = (v - ret) * (v - ret), l2 = (vc - ret) * (vc - ret);
  const double d1 = 2 * (v - ret), d2 = in ? 2 * (vc - ret) : 0;
  const double a = dmax_a(l1, l2);
  if (grad) *grad = a * d1 + (1 - a) * d2;
  if (clipped) *clipped = l2 > l1;
  return l1 > l2 ? l1 : l2;
}

void vr_kl_ctrl_update(vr_kl_ctrl_t *k, double current_kl, double n_steps) {
  if (!k->adaptive) return;
  double e = current_kl / k->target - 1;
  e = e < -0.2 ? -0.2 : e > 0.2 ? 0.2 : e;
  k->value *= 1 + e * n_steps / k->horizon;
}
