/* vr_cutrain_value.cu: the critic's value head (score . h[t] + bias per token) and its backward.
 * Contracts in vr_cutrain_ops.h. */
#include "vr_cuda_common.cuh"
#include "vr_cutrain_ops.h"

/* ---------------------------------------------------------------- kernels */

/* One warp per row t: val[t] = dot(h[t], w) + b[0]. */
__global__ void k_value_fwd(float *val, const float *h, const float *w, const float *b, int T, int C) {
  const size_t t = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (t >= (size_t)T) return;
  float a = 0.f;
  for (int c = lane; c < C; c += 32) a += h[t * C + c] * w[c];
  for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
  if (lane == 0) val[t] = a + b[0];
}

/* dh[t, c] = g[t] * w[c]. */
__global__ void k_value_bwd_dh(float *dh, const float *g, const float *w, int T, int C) {
  const size_t total = (size_t)T * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
    dh[i] = g[i / C] * w[i % C];
}

/* -------------------------------------------------------------- launchers */

extern "C" void vr_cutrain_value_fwd(float *val, const float *h, const float *w, const float *b, int T, int C,
                                     cudaStream_t s) {
  if (T <= 0) return;
  k_value_fwd<<<(unsigned)((T + 7) / 8), 256, 0, s>>>(val, h, w, b, T, C);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cutrain_value_bwd(float *dh, float *dw, float *db, const float *gv, const float *h, const float *w,
                                     int T, int C, float *scratch, cudaStream_t s) {
  if (T <= 0) return;
  k_value_bwd_dh<<<grid_for((size_t)T * C, 256), 256, 0, s>>>(dh, gv, w, T, C);
  VR_CUDA_CHECK_LAUNCH();
  vr_cutrain_colsum_weighted(dw, h, gv, T, C, scratch, s);    /* dw[c] += sum_t gv[t] h[t, c] */
  vr_cutrain_colsum_weighted(db, gv, NULL, T, 1, scratch, s); /* db += sum_t gv[t] */
}
