/* vr_cuda_act.cu: activations (SwiGLU, bias + GELU) and the bias add of GEMMs whose epilogue
 * has no bias. Contracts in vr_cuda_ops.h. */
#include "vr_cuda_common.cuh"

/* ---------------------------------------------------------------- kernels */

__global__ void k_swiglu8(uint16_t *out, const uint16_t *gu, int T, int I) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  const uint32_t vpr = (uint32_t)I / 8, total = (uint32_t)T * vpr;
  for (uint32_t idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += gridDim.x * blockDim.x) {
    const uint32_t t = idx / vpr, v = idx - t * vpr;
    const uint4 gv = *reinterpret_cast<const uint4 *>(gu + (size_t)t * 2 * I + v * 8);
    const uint4 uv = *reinterpret_cast<const uint4 *>(gu + (size_t)t * 2 * I + I + v * 8);
    const uint16_t *g8 = reinterpret_cast<const uint16_t *>(&gv), *u8 = reinterpret_cast<const uint16_t *>(&uv);
    uint4 ov;
    uint16_t *o8 = reinterpret_cast<uint16_t *>(&ov);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float g = bf(g8[e]);
      o8[e] = to_bf(g / (1.f + __expf(-g)) * bf(u8[e]));
    }
    *reinterpret_cast<uint4 *>(out + (size_t)idx * 8) = ov;
  }
}

__global__ void k_bias_gelu8(uint16_t *h, const float *b, int T, int I, int tanh_approx) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  const uint32_t vpr = (uint32_t)I / 8, total = (uint32_t)T * vpr;
  for (uint32_t idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += gridDim.x * blockDim.x) {
    const uint32_t v = idx % vpr;
    uint4 hv = *reinterpret_cast<const uint4 *>(h + (size_t)idx * 8);
    uint16_t *h8 = reinterpret_cast<uint16_t *>(&hv);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float x = bf(h8[e]) + (b ? b[v * 8 + e] : 0.f);
      const float gl = tanh_approx ? 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)))
                                   : 0.5f * x * (1.f + erff(x * 0.7071067811865476f));
      h8[e] = to_bf(gl);
    }
    *reinterpret_cast<uint4 *>(h + (size_t)idx * 8) = hv;
  }
}

__global__ void k_swiglu(uint16_t *out, const uint16_t *gu, int T, int I) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  const size_t total = (size_t)T * I;
  for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
       idx += (size_t)gridDim.x * blockDim.x) {
    const size_t t = idx / I, i = idx % I;
    const float g = bf(gu[t * 2 * I + i]), u = bf(gu[t * 2 * I + I + i]);
    out[idx] = to_bf(g / (1.f + expf(-g)) * u);
  }
}

__global__ void k_bias_gelu(uint16_t *h, const float *b, int T, int I, int tanh_approx) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  const size_t total = (size_t)T * I;
  for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
       idx += (size_t)gridDim.x * blockDim.x) {
    const float v = bf(h[idx]) + (b ? b[idx % I] : 0.f);
    float g;
    if (tanh_approx)
      g = 0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    else
      g = 0.5f * v * (1.f + erff(v * 0.7071067811865476f));
    h[idx] = to_bf(g);
  }
}

__global__ void k_add_bias(void *y, int y_f32, const void *b, int T, int N) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  const size_t total = (size_t)T * N;
  for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
       idx += (size_t)gridDim.x * blockDim.x) {
    const size_t n = idx % N;
    if (y_f32) {
      reinterpret_cast<float *>(y)[idx] += reinterpret_cast<const float *>(b)[n];
    } else {
      uint16_t *yy = reinterpret_cast<uint16_t *>(y);
      yy[idx] = to_bf(bf(yy[idx]) + bf(reinterpret_cast<const uint16_t *>(b)[n]));
    }
  }
}

/* -------------------------------------------------------------- launchers */

extern "C" void vr_cuda_swiglu(uint16_t *out, const uint16_t *gu, int T, int I, cudaStream_t s) {
  const size_t n = (size_t)T * I;
  if (n == 0) return;
  if (I % 8 == 0 && n / 8 < (1u << 31))
    vr_launch(k_swiglu8, dim3(grid_for(n / 8, 256)), dim3(256), 0, s, out, gu, T, I);
  else
    vr_launch(k_swiglu, dim3(grid_for(n, 256)), dim3(256), 0, s, out, gu, T, I);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_bias_gelu(uint16_t *h, const float *b, int T, int I, int tanh_approx,
                                  cudaStream_t s) {
  const size_t n = (size_t)T * I;
  if (n == 0) return;
  if (I % 8 == 0 && n / 8 < (1u << 31))
    vr_launch(k_bias_gelu8, dim3(grid_for(n / 8, 256)), dim3(256), 0, s, h, b, T, I, tanh_approx);
  else
    vr_launch(k_bias_gelu, dim3(grid_for(n, 256)), dim3(256), 0, s, h, b, T, I, tanh_approx);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_add_bias(void *y, int y_f32, const void *b, int T, int N, cudaStream_t s) {
  const size_t n = (size_t)T * N;
  if (n == 0) return;
  vr_launch(k_add_bias, dim3(grid_for(n, 256)), dim3(256), 0, s, y, y_f32, b, T, N);
  VR_CUDA_CHECK_LAUNCH();
}
