/* vr_cutrain_norm.cu: RMSNorm backward (dx per row, dw in two deterministic passes) and the
 * bias gradient's column sums. Contracts in vr_cutrain_ops.h. */
#include "vr_cuda_common.cuh"
#include "vr_cutrain_ops.h"

#define CHUNK VR_CUTRAIN_NORM_CHUNK

/* ---------------------------------------------------------------- kernels */

/* One block per row t: r = rsqrt(mean(x^2) + eps), dot = sum(dy * w * x);
 * dx = r * dy * w - x * r^3 * dot / C; rstd[t] = r for the dw pass. */
__global__ void k_rmsnorm_bwd_dx(float *dx, uint16_t *dx16, float *rstd, const float *dy, const float *x,
                                 const float *w, int C, float eps, int accumulate) {
  __shared__ float red[32];
  const size_t t = blockIdx.x;
  const float *xr = x + t * C, *dyr = dy + t * C;
  float q = 0.f, d = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xv = xr[c];
    q += xv * xv;
    d += dyr[c] * w[c] * xv;
  }
  const float ms = block_sum(q, red) / C;
  const float dot = block_sum(d, red);
  const float r = rsqrtf(ms + eps), k = r * r * r * dot / C;
  float *dxr = dx + t * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float v = r * dyr[c] * w[c] - xr[c] * k;
    if (accumulate) v += dxr[c];
    dxr[c] = v;
    if (dx16) dx16[t * C + c] = to_bf(v);
  }
  if (threadIdx.x == 0) rstd[t] = r;
}

/* Pass 1 of a column reduction: partial[chunk, c] = sum over the chunk's rows t (in order) of
 * dy[t, c] * x[t, c] * rstd[t]; with x == NULL of dy[t, c] * rstd[t] (rstd NULL: 1), or with
 * dyb given of the bf16 matrix dyb (row pitch ld). Grid (ceil(C / 256), chunks). */
__global__ void k_colsum_partial(float *partial, const float *dy, const float *x, const float *rstd,
                                 const uint16_t *dyb, int ld, int T, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int t0 = blockIdx.y * CHUNK, t1 = min(T, t0 + CHUNK);
  float a = 0.f;
  if (dyb) {
    for (int t = t0; t < t1; ++t) a += bf(dyb[(size_t)t * ld + c]);
  } else if (x) {
    for (int t = t0; t < t1; ++t) a += dy[(size_t)t * C + c] * x[(size_t)t * C + c] * rstd[t];
  } else { /* rstd: row weights, or NULL (1) */
    for (int t = t0; t < t1; ++t) a += dy[(size_t)t * C + c] * (rstd ? rstd[t] : 1.f);
  }
  partial[(size_t)blockIdx.y * C + c] = a;
}

/* Pass 2: out[c] += sum over chunks (in order) of partial[chunk, c]. */
__global__ void k_colsum_final(float *out, const float *partial, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float a = 0.f;
  for (int k = 0; k < chunks; ++k) a += partial[(size_t)k * C + c];
  out[c] += a;
}

/* -------------------------------------------------------------- launchers */

static int chunks_of(int T) { return (T + CHUNK - 1) / CHUNK; }

extern "C" size_t vr_cutrain_rmsnorm_bwd_scratch(int T, int C) { return (size_t)chunks_of(T) * C + (size_t)T; }

extern "C" size_t vr_cutrain_colsum_scratch(int T, int N) { return (size_t)chunks_of(T) * N; }

extern "C" void vr_cutrain_rmsnorm_bwd(float *dx, uint16_t *dx16, float *dw, const float *dy, const float *x,
                                       const float *w, int T, int C, float eps, int accumulate, float *scratch,
                                       cudaStream_t s) {
  if (T <= 0) return;
  const int chunks = chunks_of(T);
  float *partial = scratch, *rstd = scratch + (size_t)chunks * C;
  k_rmsnorm_bwd_dx<<<T, norm_threads(C), 0, s>>>(dx, dx16, rstd, dy, x, w, C, eps, accumulate);
  VR_CUDA_CHECK_LAUNCH();
  const dim3 g1((unsigned)((C + 255) / 256), (unsigned)chunks);
  k_colsum_partial<<<g1, 256, 0, s>>>(partial, dy, x, rstd, NULL, C, T, C);
  VR_CUDA_CHECK_LAUNCH();
  k_colsum_final<<<(C + 255) / 256, 256, 0, s>>>(dw, partial, chunks, C);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cutrain_colsum_bf16(float *db, const uint16_t *dy, int ld, int T, int N, float *scratch,
                                       cudaStream_t s) {
  if (T <= 0) return;
  const int chunks = chunks_of(T);
  const dim3 g1((unsigned)((N + 255) / 256), (unsigned)chunks);
  k_colsum_partial<<<g1, 256, 0, s>>>(scratch, NULL, NULL, NULL, dy, ld, T, N);
  VR_CUDA_CHECK_LAUNCH();
  k_colsum_final<<<(N + 255) / 256, 256, 0, s>>>(db, scratch, chunks, N);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cutrain_colsum_weighted(float *out, const float *x, const float *wgt, int T, int C, float *scratch,
                                           cudaStream_t s) {
  if (T <= 0) return;
  const int chunks = chunks_of(T);
  const dim3 g1((unsigned)((C + 255) / 256), (unsigned)chunks);
  k_colsum_partial<<<g1, 256, 0, s>>>(scratch, x, NULL, wgt, NULL, C, T, C);
  VR_CUDA_CHECK_LAUNCH();
  k_colsum_final<<<(C + 255) / 256, 256, 0, s>>>(out, scratch, chunks, C);
  VR_CUDA_CHECK_LAUNCH();
}
