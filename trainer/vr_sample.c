/* vr_sample.c: the sampling rule and Philox (vr_sample.h). */
#define _GNU_SOURCE /* qsort_r */
#include "vr_sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"

void vr_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    if (r) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0, hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

double vr_sample_uniform(uint64_t key, uint32_t stream, uint32_t position) {
  const uint32_t ctr[4] = {position, 0, stream, 0}, k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
  uint32_t o[4];
  vr_philox4x32(ctr, k, o);
  uint64_t bits = (((uint64_t)o[0] << 32) | o[1]) >> 11;
  return (double)bits * (1.0 / 9007199254740992.0);
}

uint64_t vr_sample_prompt_key(uint64_t seed, uint64_t p) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (p + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int vr_sample_check(const vr_sample_params_t *p, char *err, size_t errlen) {
  const char *bad = NULL;
  if (!(p->temperature >= 0.0f) || !isfinite(p->temperature)) bad = "temperature must be a finite number >= 0";
  else if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) bad = "top_p must be in (0, 1]";
  if (!bad) return 0;
  if (err && errlen) snprintf(err, errlen, "%s", bad);
  return VR_ERR_INVAL;
}

/* Ascending by value, equal values by id (a total order: the result does not depend on qsort). */
static int vr_sample_cmp(const void *a, const void *b, void *ctx) {
  const float *z = ctx;
  int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
  if (z[i] < z[j]) return -1;
  if (z[i] > z[j]) return 1;
  return (i > j) - (i < j);
}

/* Scratch layout: q (V doubles), z (V floats), idx (V int32). */
typedef struct {
  double *q;
  float *z;
  int32_t *idx;
} vr_sample_ws_t;

static vr_sample_ws_t vr_sample_ws(void *scratch, int32_t V) {
  vr_sample_ws_t w;
  w.q = scratch;
  w.z = (float *)(w.q + V);
  w.idx = (int32_t *)(w.z + V);
  return w;
}

/* A survivor's top-p mass: exp(z - max) in 2^-32 units, rounded down (vr_sample.h). */
static uint64_t vr_sample_mass(float z, float mx) { return (uint64_t)(exp((double)z - mx) * 4294967296.0); }

/* Fills w.q with the unnormalised weights exp(z - max) of the surviving tokens (0 elsewhere) and
 * returns their sum (double, ascending id order). T > 0. */
static double vr_sample_weights(const float *logits, int32_t V, const vr_sample_params_t *p, vr_sample_ws_t w) {
  float mx = -INFINITY;
  for (int32_t i = 0; i < V; i++) {
    w.z[i] = logits[i] / p->temperature;
    if (w.z[i] > mx) mx = w.z[i];
  }
  const int topk = p->top_k > 0 && p->top_k < V, topp = p->top_p < 1.0f;
  for (int32_t i = 0; i < V; i++) w.q[i] = 0.0;
  if (!topk && !topp) {
    for (int32_t i = 0; i < V; i++) w.q[i] = exp((double)w.z[i] - mx);
  } else {
    for (int32_t i = 0; i < V; i++) w.idx[i] = i;
    qsort_r(w.idx, (size_t)V, sizeof *w.idx, vr_sample_cmp, w.z);
    int32_t cut = 0; /* survivors are sorted positions cut .. V-1 */
    if (topk) {
      const float thr = w.z[w.idx[V - p->top_k]];
      while (w.z[w.idx[cut]] < thr) cut++;
    }
    if (topp) { /* integer masses: exact sums, so a tie group's cut is exact and order-free */
      uint64_t tot = 0, after = 0;
      for (int32_t s = cut; s < V; s++) tot += vr_sample_mass(w.z[w.idx[s]], mx);
      const double P = (double)p->top_p * (double)tot;
      int32_t s = V - 1; /* after = the mass above sorted position s; the largest always stays */
      for (; s > cut; s--) {
        const uint64_t a = after + vr_sample_mass(w.z[w.idx[s]], mx);
        if (!((double)a < P)) break; /* position s - 1 has p * total above it: dropped */
        after = a;
      }
      cut = s;
    }
    for (int32_t s = cut; s < V; s++) w.q[w.idx[s]] = exp((double)w.z[w.idx[s]] - mx);
  }
  double sum = 0.0;
  for (int32_t i = 0; i < V; i++) sum += w.q[i];
  return sum;
}

static int vr_sample_finite(const float *l, int32_t V) {
  int any = 0;
  for (int32_t i = 0; i < V; i++) {
    if (isnan(l[i]) || l[i] == INFINITY) return 0;
    any |= l[i] > -INFINITY;
  }
  return any;
}

double vr_sample_logprob(const float *logits, int32_t V, float temperature, int32_t token) {
  const float T = temperature > 0.0f ? temperature : 1.0f; /* x / 1.0f == x: greedy is the raw row */
  double mx = -INFINITY, sum = 0.0;
  for (int32_t i = 0; i < V; i++)
    if ((double)(logits[i] / T) > mx) mx = (double)(logits[i] / T);
  for (int32_t i = 0; i < V; i++) sum += exp((double)(logits[i] / T) - mx);
  return (double)(logits[token] / T) - mx - log(sum);
}

int vr_sample_row(const float *logits, int32_t V, const vr_sample_params_t *p, uint64_t key, uint32_t stream,
                  uint32_t position, void *scratch, int32_t *token, float *logprob) {
  if (!vr_sample_finite(logits, V)) {
    *token = 0;
    *logprob = NAN;
    return VR_ERR_NONFINITE;
  }
  int32_t tok = 0;
  if (p->temperature == 0.0f) {
    for (int32_t i = 1; i < V; i++)
      if (logits[i] > logits[tok]) tok = i;
  } else {
    vr_sample_ws_t w = vr_sample_ws(scratch, V);
    const double sum = vr_sample_weights(logits, V, p, w);
    const double target = vr_sample_uniform(key, stream, position) * sum;
    double cum = 0.0;
    int32_t last = 0;
    tok = -1;
    for (int32_t i = 0; i < V; i++) {
      if (w.q[i] == 0.0) continue;
      last = i;
      cum += w.q[i];
      if (cum > target) {
        tok = i;
        break;
      }
    }
    if (tok < 0) tok = last; /* u * sum rounded up to the total: the last survivor */
  }
  *token = tok;
  *logprob = (float)vr_sample_logprob(logits, V, p->temperature, tok);
  return 0;
}

void vr_sample_probs(const float *logits, int32_t V, const vr_sample_params_t *p, void *scratch, double *probs) {
  if (p->temperature == 0.0f) {
    int32_t tok = 0;
    for (int32_t i = 1; i < V; i++)
      if (logits[i] > logits[tok]) tok = i;
    for (int32_t i = 0; i < V; i++) probs[i] = i == tok;
    return;
  }
  vr_sample_ws_t w = vr_sample_ws(scratch, V);
  const double sum = vr_sample_weights(logits, V, p, w);
  for (int32_t i = 0; i < V; i++) probs[i] = w.q[i] / sum;
}
