/* vr_cutrain_act.cu: the backward of the elementwise forward ops (SwiGLU; RoPE through the
 * forward kernel with negated angles). Contracts in vr_cutrain_ops.h. */
#include "vr_cuda_common.cuh"
#include "vr_cutrain_ops.h"

/* ---------------------------------------------------------------- kernels */

/* silu(g) = g * sig(g); silu'(g) = sig(g) * (1 + g * (1 - sig(g))). 8 bf16 per access when
 * I % 8 == 0 (V8), else one. */
template <int V8>
__global__ void k_swiglu_bwd(uint16_t *dgu, const uint16_t *dout, const uint16_t *gu, int T, int I) {
  const int W = V8 ? 8 : 1;
  const size_t vpr = (size_t)I / W, total = (size_t)T * vpr;
  for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total; idx += (size_t)gridDim.x * blockDim.x) {
    const size_t t = idx / vpr, i0 = (idx - t * vpr) * W;
    const uint16_t *gr = gu + t * 2 * I, *dr = dout + t * I;
    uint16_t *dgr = dgu + t * 2 * I;
    uint16_t g8[8], u8[8], d8[8], og[8], ou[8];
    if (V8) {
      *reinterpret_cast<uint4 *>(g8) = *reinterpret_cast<const uint4 *>(gr + i0);
      *reinterpret_cast<uint4 *>(u8) = *reinterpret_cast<const uint4 *>(gr + I + i0);
      *reinterpret_cast<uint4 *>(d8) = *reinterpret_cast<const uint4 *>(dr + i0);
    } else {
      g8[0] = gr[i0], u8[0] = gr[I + i0], d8[0] = dr[i0];
    }
#pragma unroll
    for (int e = 0; e < W; ++e) {
      const float g = bf(g8[e]), u = bf(u8[e]), d = bf(d8[e]);
      const float sg = 1.f / (1.f + __expf(-g));
      og[e] = to_bf(d * u * sg * (1.f + g * (1.f - sg)));
      ou[e] = to_bf(d * g * sg);
    }
    if (V8) {
      *reinterpret_cast<uint4 *>(dgr + i0) = *reinterpret_cast<const uint4 *>(og);
      *reinterpret_cast<uint4 *>(dgr + I + i0) = *reinterpret_cast<const uint4 *>(ou);
    } else {
      dgr[i0] = og[0], dgr[I + i0] = ou[0];
    }
  }
}

/* -------------------------------------------------------------- launchers */

extern "C" void vr_cutrain_swiglu_bwd(uint16_t *dgu, const uint16_t *dout, const uint16_t *gu, int T, int I,
                                      cudaStream_t s) {
  const size_t n = (size_t)T * I;
  if (n == 0) return;
  if (I % 8 == 0)
    k_swiglu_bwd<1><<<grid_for(n / 8, 256), 256, 0, s>>>(dgu, dout, gu, T, I);
  else
    k_swiglu_bwd<0><<<grid_for(n, 256), 256, 0, s>>>(dgu, dout, gu, T, I);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cutrain_rope_bwd(uint16_t *dqkv, int ld, int q_off, int k_off, int H, int Hkv, int D,
                                    const int32_t *pos, const float *neg_inv_freq, float attn_scaling, int T,
                                    cudaStream_t s) {
  vr_cuda_rope(dqkv, ld, q_off, k_off, H, Hkv, D, pos, neg_inv_freq, attn_scaling, T, s);
}
