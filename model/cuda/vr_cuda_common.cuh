/* vr_cuda_common.cuh: what the op-family kernels of the CUDA backend share (vr_cuda_convert.cu,
 * vr_cuda_embed.cu, vr_cuda_norm.cu, vr_cuda_rope.cu, vr_cuda_act.cu, vr_cuda_gather.cu,
 * vr_cuda_head.cu): bf16 <-> fp32 at the storage boundary (all arithmetic is fp32), the block
 * reduction, the LayerNorm tail the embedding and norm kernels have in common, and the
 * launchers' grid sizes. Contracts of the launchers: vr_cuda_ops.h. */
#ifndef VR_CUDA_COMMON_CUH
#define VR_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "vr_cuda_check.h"
#include "vr_cuda_launch.cuh"
#include "vr_cuda_ops.h"

typedef __nv_bfloat16 bf16;

#define VR_NORM_THREADS 256

static __device__ __forceinline__ float bf(const uint16_t v) { return __uint_as_float(((uint32_t)v) << 16); }

static __device__ __forceinline__ uint16_t to_bf(float f) {
  bf16 h = __float2bfloat16_rn(f);
  return *reinterpret_cast<uint16_t *>(&h);
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024). red: 32 floats of
 * shared memory; every thread gets the result. */
static __device__ inline float block_sum(float v, float *red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  __syncthreads(); /* red may still be read by a previous call */
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = lane < nw ? red[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

/* The rest of a block's LayerNorm of row xr (this thread's partial sum s already taken):
 * xr = LN(xr) * w + b in place (fp32), xnr = bf16 of it. */
static __device__ inline void layernorm_row(float *xr, uint16_t *xnr, const float *w, const float *b, int C,
                                            float eps, float s, float *red) {
  const float mean = block_sum(s, red) / C;
  float q = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = xr[c] - mean;
    q += d * d;
  }
  const float rstd = rsqrtf(block_sum(q, red) / C + eps);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = (xr[c] - mean) * rstd * w[c] + b[c];
    xr[c] = v;
    xnr[c] = to_bf(v);
  }
}

static inline unsigned grid_for(size_t n, unsigned threads) {
  size_t g = (n + threads - 1) / threads;
  if (g > 65535u * 16u) g = 65535u * 16u; /* grid-stride loops cover the rest */
  if (g == 0) g = 1;
  return (unsigned)g;
}

static inline unsigned norm_threads(int C) {
  unsigned t = (unsigned)((C + 31) / 32 * 32);
  if (t > VR_NORM_THREADS) t = VR_NORM_THREADS;
  if (t < 32) t = 32;
  return t;
}

#endif /* VR_CUDA_COMMON_CUH */
