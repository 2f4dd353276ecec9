/* vr_test_tie_rows.h: rows of tied logits for the sampler tests (header-only), the same rows for
 * the CPU test of the CUDA sampler's algorithm (tests/trainer/test_sample_ties.c) and for the
 * CUDA sampler itself (tests/cuda/test_cuda_rollout.c).
 *
 * Row r (V logits, V >= 400) holds a group of n1 equal maxima, a second tie group of n2 equal
 * values 0.25..0.75 below it and a tail that is, by r % 3: random multiples of 0.25 below the
 * second group (more ties), -inf (masses exactly 0), or 40 below the maximum (exp underflows
 * 2^-32 but not double). Its parameters put the cuts on the ties: top-k off, inside the maxima
 * (k <= n1: the threshold is the maximum and all n1 stay), exactly at n1, inside the second
 * group, or in the tail; top-p dyadic with p * n1 an integer where one is (the cut falls exactly
 * on a boundary inside the maxima when nothing else survives), m / n1 rounded to float
 * (within 2^-24 of one), a few usual values, or off; temperatures 0.3 .. 2, and greedy.
 *
 * Everything comes from the caller's state *rs (splitmix64, vr_test_seed.h), so the rows do not
 * depend on what other tests drew. Not thread-safe on one state. */
#ifndef VR_TEST_TIE_ROWS_H
#define VR_TEST_TIE_ROWS_H

#include <math.h>
#include <stdint.h>

#include "vr_sample.h"
#include "vr_test_seed.h"

/* The generator state of the tied rows for a test seeded with seed. */
static inline uint64_t vr_test_tie_state(uint64_t seed) { return seed ^ 0x7469652d726f7773ull; /* "tie-rows" */ }

/* Draw d of tied row r (logits row r of the caller's table): the sampling coordinates. */
static inline vr_sample_req_t vr_test_tie_req(uint64_t seed, int r, int d, const vr_sample_params_t *p) {
  vr_sample_req_t q;
  q.row = (uint32_t)r;
  q.p = *p;
  q.key = vr_sample_prompt_key(seed, (uint64_t)r);
  q.stream = (uint32_t)(d % 4);
  q.position = (uint32_t)(3 + 5 * d);
  return q;
}

/* Fills row (V floats) and *p for tied row r; V >= 400. */
static inline void vr_test_tie_row(uint64_t *rs, int r, int V, float *row, vr_sample_params_t *p) {
  static const int n1s[] = {2, 4, 8, 16, 18, 20, 24, 32, 40, 64, 3, 12};
  static const float temps[] = {0.3f, 0.5f, 0.7f, 1.0f, 1.3f, 2.0f, 0.0f};
  static const float dyadic[] = {0.5f, 0.25f, 0.75f, 0.125f, 0.875f, 0.375f, 0.625f, 0.0625f, 0.9375f};
  static const float usual[] = {0.9f, 0.7f, 0.95f, 0.05f, 0.999f};
  const int n1 = n1s[r % 12], n2 = 1 + (int)vr_test_rand(rs, 40), tail = r % 3;
  const float a = 2.0f + 0.25f * (float)vr_test_rand(rs, 17), b = a - 0.25f * (float)(1 + vr_test_rand(rs, 3));
  for (int i = 0; i < V; ++i) {
    if (tail == 1) row[i] = -INFINITY;
    else if (tail == 2) row[i] = a - 40.0f;
    else row[i] = b - 0.25f * (float)(1 + vr_test_rand(rs, 40));
  }
  /* n1 + n2 distinct ids: a random id, then the next free one upward (wrapping) */
  for (int g = 0; g < n1 + n2; ++g) {
    int i = (int)vr_test_rand(rs, (uint32_t)V);
    while (row[i] == a || row[i] == b) i = (i + 1) % V;
    row[i] = g < n1 ? a : b;
  }
  p->temperature = temps[(r / 12) % 7];
  switch ((r / 3) % 5) {
  case 0: p->top_k = 0; break;
  case 1: p->top_k = 1 + (int)vr_test_rand(rs, (uint32_t)n1); break;
  case 2: p->top_k = n1; break;
  case 3: p->top_k = n1 + 1 + (int)vr_test_rand(rs, (uint32_t)n2); break;
  default: p->top_k = n1 + n2 + 1 + (int)vr_test_rand(rs, 50); break;
  }
  switch (vr_test_rand(rs, 8)) {
  case 0: p->top_p = 1.0f; break;
  case 1: p->top_p = usual[vr_test_rand(rs, 5)]; break;
  case 2:
  case 3: p->top_p = (float)(1 + vr_test_rand(rs, (uint32_t)n1 - 1)) / (float)n1; break;
  default: { /* dyadic, p * n1 an integer where one is */
    const uint32_t d0 = vr_test_rand(rs, 9);
    uint32_t d = d0;
    while (fmodf(dyadic[d] * (float)n1, 1.0f) != 0.0f && (d = (d + 1) % 9) != d0) {
    }
    p->top_p = dyadic[d];
    break;
  }
  }
}

/* test_cuda_rollout's random logits: frand() * 6 in [-6, 6) (frand = its [-1, 1) draw), rounded
 * to multiples of quant when quant > 0. */
static inline void vr_test_random_logits(uint64_t *rs, float *l, size_t n, float quant) {
  for (size_t i = 0; i < n; ++i) {
    float v = ((float)vr_test_rand(rs, 1u << 30) / (float)(1u << 29) - 1.f) * 6.f;
    if (quant > 0) v = roundf(v / quant) * quant;
    l[i] = v;
  }
}

/* The ends of the inverse CDF: a random row (V >= 1000) whose first 1..300 and last 1..300 ids
 * are -inf (weight 0, yet survivors when top-k and top-p are off), its parameters, and the
 * uniforms VR_TEST_U_ENDS (0, and 1 - 2^-53 .. 1 - 2^-45: u * total within rounding of the
 * total). A draw must be the first id of nonzero weight at u = 0, and one of nonzero weight with
 * less than 1e-6 of the mass after it otherwise. */
#define VR_TEST_U_ENDS {0.0, 1.0 - 0x1p-53, 1.0 - 0x1p-52, 1.0 - 0x1p-50, 1.0 - 0x1p-45}
static inline void vr_test_u_ends_row(uint64_t *rs, int r, int V, float *row, vr_sample_params_t *p) {
  static const vr_sample_params_t ps[] = {{1.0f, 0, 1.0f}, {0.7f, 0, 1.0f}, {1.3f, 0, 1.0f}, {1.0f, 0, 0.999f}};
  vr_test_random_logits(rs, row, (size_t)V, r % 2 ? 0.25f : 0.0f);
  const int head = 1 + (int)vr_test_rand(rs, 300), tail = 1 + (int)vr_test_rand(rs, 300);
  for (int i = 0; i < head; ++i) row[i] = -INFINITY;
  for (int i = V - tail; i < V; ++i) row[i] = -INFINITY;
  *p = ps[r % 4];
}

/* 1 when token t is a valid draw at uniform u for probs (V, vr_sample_probs'), by the rule above. */
static inline int vr_test_u_ends_ok(const double *probs, int V, double u, int t) {
  if (t < 0 || t >= V || !(probs[t] > 0)) return 0;
  if (u == 0.0) {
    for (int i = 0; i < t; ++i)
      if (probs[i] > 0) return 0;
    return 1;
  }
  double after = 0;
  for (int i = t + 1; i < V; ++i) after += probs[i];
  return after < 1e-6;
}

/* H12's report: row 50 of test_cuda_rollout's test_sample_rows(1000, 400, 0.25) when the rope and
 * skinny-GEMM tests of commit 5638935 shifted its generator (seed 20261201: the state is then the
 * seed plus 135,203,563 + 50 * 1000 draws). Values frand() * 6 rounded to multiples of 0.25; 18
 * of them are the maximum 6.0; T 0.7, top-k 5 (all 18 stay), top-p 0.5 (the 9 highest ids stay,
 * 669 .. 999), u 0.470215 picks the 5th of them, 884. The CPU once kept 10 (its running double
 * sum of 1/18 passed 0.5 a term early) and drew 787. row holds VR_TEST_H12_V floats. */
enum { VR_TEST_H12_V = 1000, VR_TEST_H12_TOKEN = 884 };
static inline void vr_test_h12_row(float *row, vr_sample_req_t *q) {
  uint64_t rs = 20261201ull + (135203563ull + 50ull * VR_TEST_H12_V) * 0x9e3779b97f4a7c15ull;
  vr_test_random_logits(&rs, row, VR_TEST_H12_V, 0.25f);
  q->row = 0;
  q->p = (vr_sample_params_t){0.7f, 5, 0.5f};
  q->key = vr_sample_prompt_key(1234, 50 % 3);
  q->stream = 50 % 5;
  q->position = 50 * 7;
}

#endif
