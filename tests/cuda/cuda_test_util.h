/* cuda_test_util.h: what the CUDA kernel tests share (header-only, one test program per
 * including file): the test's pass/fail flag and pseudo-random stream, bf16 <-> fp32 on the
 * host (round to nearest even), device buffers poisoned with NaN (0xFF bytes) so an unwritten
 * element fails a check, and the relative-error check that prints one line per tensor. */
#ifndef CUDA_TEST_UTIL_H
#define CUDA_TEST_UTIL_H

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vr_cuda_check.h"

static int g_fail = 0;
static uint64_t g_rng = 88172645463325252ull;

#define CK(call) VR_CUDA_CHECK(call) /* the project's check: logs call, file, line, device; aborts */

static inline uint64_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}
static inline float frand(void) { return (float)((rnd() >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0); }
static inline int irand(int n) { return (int)(rnd() % (uint64_t)n); }

static inline uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline float bf2f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline void *dmalloc(size_t n) {
  void *p = NULL;
  CK(cudaMalloc(&p, n));
  CK(cudaMemset(p, 0xFF, n)); /* poison: NaN in bf16 and fp32 */
  return p;
}
static inline void *todev(const void *h, size_t n) {
  void *p = dmalloc(n);
  CK(cudaMemcpy(p, h, n, cudaMemcpyHostToDevice));
  return p;
}
static inline void tohost(void *h, const void *d, size_t n) {
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
}
/* Random bf16 array (values in [-a, a]) and its float view. */
static inline uint16_t *rand_bf(size_t n, float a, float **asf) {
  uint16_t *b = malloc(n * 2);
  float *f = malloc(n * 4);
  for (size_t i = 0; i < n; ++i) {
    b[i] = f2bf(frand() * a);
    f[i] = bf2f(b[i]);
  }
  *asf = f;
  return b;
}
static inline float *rand_f(size_t n, float lo, float hi) {
  float *f = malloc(n * 4);
  for (size_t i = 0; i < n; ++i) f[i] = lo + (hi - lo) * (frand() * 0.5f + 0.5f);
  return f;
}

/* ||got - ref|| / ||ref|| with NaN detection; prints one line. */
static inline void check_rel(const char *what, const double *ref, const float *got, size_t n, double tol) {
  double num = 0, den = 0, maxd = 0;
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!isfinite(got[i])) {
      ++bad;
      continue;
    }
    const double d = got[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    if (fabs(d) > maxd) maxd = fabs(d);
  }
  const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  const int ok = bad == 0 && rel <= tol;
  printf("%-4s %-58s rel %.2e maxabs %.2e%s\n", ok ? "ok" : "FAIL", what, rel, maxd,
         bad ? " (non-finite / unwritten elements)" : "");
  if (!ok) g_fail = 1;
}
static inline float *bf_arr_to_f(const uint16_t *b, size_t n) {
  float *f = malloc(n * 4);
  for (size_t i = 0; i < n; ++i) f[i] = bf2f(b[i]);
  return f;
}

#endif /* CUDA_TEST_UTIL_H */
