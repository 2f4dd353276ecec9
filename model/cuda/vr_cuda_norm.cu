/* vr_cuda_norm.cu: LayerNorm (encoders, fp32 and bf16 residual streams) and RMSNorm
 * (decoders). Contracts in vr_cuda_ops.h. */
#include "vr_cuda_common.cuh"

/* ---------------------------------------------------------------- kernels */

__global__ void k_layernorm(float *x, uint16_t *xn, const float *w, const float *b, int C, float eps) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  __shared__ float red[32];
  const size_t t = blockIdx.x;
  float *xr = x + t * C;
  uint16_t *xnr = xn + t * C;
  float s = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += xr[c];
  layernorm_row(xr, xnr, w, b, C, eps, s, red);
}

/* This thread's VPT float4 of a row of C4 float4 (threadIdx.x + k blockDim.x), zeros past its end. */
template <int VPT>
__device__ __forceinline__ void row4_load(const float4 *xr, int C4, float4 (&v)[VPT]) {
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    v[k] = c < C4 ? xr[c] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

/* Vectorised LayerNorm: C % 4 == 0; each thread keeps VPT float4 of the row in registers
 * (one read of x, one write of x and xn); blockDim.x * VPT * 4 >= C. */
template <int VPT>
__global__ void k_layernorm_vec(float *x, uint16_t *xn, const float *w, const float *b, int C, float eps) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  __shared__ float red[32];
  const size_t t = blockIdx.x;
  float4 *xr = reinterpret_cast<float4 *>(x + t * C);
  uint2 *xnr = reinterpret_cast<uint2 *>(xn + t * C);
  const int C4 = C / 4;
  float4 v[VPT];
  row4_load<VPT>(xr, C4, v);
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
  const float mean = block_sum(s, red) / C;
  float q = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c < C4) {
      const float a = v[k].x - mean, bb = v[k].y - mean, cc = v[k].z - mean, d = v[k].w - mean;
      q += (a * a + bb * bb) + (cc * cc + d * d);
    }
  }
  const float rstd = rsqrtf(block_sum(q, red) / C + eps);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c < C4) {
      const float4 wv = reinterpret_cast<const float4 *>(w)[c], bv = reinterpret_cast<const float4 *>(b)[c];
      float4 o;
      o.x = (v[k].x - mean) * rstd * wv.x + bv.x;
      o.y = (v[k].y - mean) * rstd * wv.y + bv.y;
      o.z = (v[k].z - mean) * rstd * wv.z + bv.z;
      o.w = (v[k].w - mean) * rstd * wv.w + bv.w;
      xr[c] = o;
      uint2 h;
      h.x = (uint32_t)to_bf(o.x) | ((uint32_t)to_bf(o.y) << 16);
      h.y = (uint32_t)to_bf(o.z) | ((uint32_t)to_bf(o.w) << 16);
      xnr[c] = h;
    }
  }
}

/* LayerNorm of a bf16 row (the encoders' bf16 residual stream): xn = bf16(LN(y [+ r]) * w + b),
 * and x = the same in fp32 when x != NULL (the last layer, for the score head); r (bf16,
 * may be xn itself: each lane reads its elements before writing them) or NULL. One warp
 * per row, 8 bf16 (16 bytes) per load, VPT loads per lane: C % 8 == 0, C <= 256 * VPT. */
template <int VPT>
__global__ void k_layernorm_b16(const uint16_t *y, const uint16_t *r, uint16_t *xn, float *x, const float *w,
                                const float *b, int T, int C, float eps) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  const int lane = threadIdx.x & 31;
  const size_t t = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (t >= (size_t)T) return;
  const int C8 = C / 8;
  const uint4 *yr = reinterpret_cast<const uint4 *>(y + t * C);
  float v[VPT][8];
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int c = lane + 32 * k;
    uint4 u = c < C8 ? yr[c] : make_uint4(0, 0, 0, 0);
    uint4 ru = make_uint4(0, 0, 0, 0);
    if (r && c < C8) ru = reinterpret_cast<const uint4 *>(r + t * C)[c];
    const uint32_t wd[4] = {u.x, u.y, u.z, u.w}, rd[4] = {ru.x, ru.y, ru.z, ru.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      v[k][2 * e] = __uint_as_float(wd[e] << 16) + __uint_as_float(rd[e] << 16);
      v[k][2 * e + 1] = __uint_as_float(wd[e] & 0xFFFF0000u) + __uint_as_float(rd[e] & 0xFFFF0000u);
      s += v[k][2 * e] + v[k][2 * e + 1];
    }
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float mean = s / C;
  float q = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; ++k)
    if (lane + 32 * k < C8)
#pragma unroll
      for (int e = 0; e < 8; ++e) q += (v[k][e] - mean) * (v[k][e] - mean);
  for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
  const float rstd = rsqrtf(q / C + eps);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int c = lane + 32 * k;
    if (c >= C8) continue;
    const float4 w0 = reinterpret_cast<const float4 *>(w)[2 * c], w1 = reinterpret_cast<const float4 *>(w)[2 * c + 1];
    const float4 b0 = reinterpret_cast<const float4 *>(b)[2 * c], b1 = reinterpret_cast<const float4 *>(b)[2 * c + 1];
    const float wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
    const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
    float r[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) r[e] = (v[k][e] - mean) * rstd * wv[e] + bv[e];
    uint4 h;
    h.x = (uint32_t)to_bf(r[0]) | ((uint32_t)to_bf(r[1]) << 16);
    h.y = (uint32_t)to_bf(r[2]) | ((uint32_t)to_bf(r[3]) << 16);
    h.z = (uint32_t)to_bf(r[4]) | ((uint32_t)to_bf(r[5]) << 16);
    h.w = (uint32_t)to_bf(r[6]) | ((uint32_t)to_bf(r[7]) << 16);
    reinterpret_cast<uint4 *>(xn + t * C)[c] = h;
    if (x) {
      float4 *xr = reinterpret_cast<float4 *>(x + t * C);
      xr[2 * c] = make_float4(r[0], r[1], r[2], r[3]);
      xr[2 * c + 1] = make_float4(r[4], r[5], r[6], r[7]);
    }
  }
}

/* Any C: one block per row, two passes over the bf16 row. */
__global__ void k_layernorm_b16_any(const uint16_t *y, const uint16_t *r, uint16_t *xn, float *x, const float *w,
                                    const float *b, int C, float eps) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  __shared__ float red[32];
  const size_t t = blockIdx.x;
  const uint16_t *yr = y + t * C, *rr = r ? r + t * C : NULL;
  float s = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += bf(yr[c]) + (rr ? bf(rr[c]) : 0.f);
  const float mean = block_sum(s, red) / C;
  float q = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = bf(yr[c]) + (rr ? bf(rr[c]) : 0.f) - mean;
    q += d * d;
  }
  const float rstd = rsqrtf(block_sum(q, red) / C + eps);
  __syncthreads(); /* r may be xn: every thread has read its row before any writes */
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = (bf(yr[c]) + (rr ? bf(rr[c]) : 0.f) - mean) * rstd * w[c] + b[c];
    xn[t * C + c] = to_bf(v);
    if (x) x[t * C + c] = v;
  }
}

/* A norm's output element in the output's type. */
template <typename O>
__device__ __forceinline__ O norm_out(float v);
template <>
__device__ __forceinline__ uint16_t norm_out<uint16_t>(float v) { return to_bf(v); }
template <>
__device__ __forceinline__ float norm_out<float>(float v) { return v; }

/* O = uint16_t: the next GEMM's bf16 input; O = float: the final norm's fp32 hidden states,
 * xn may be x (each thread reads its elements before the reduction and writes them after). */
template <typename O>
__global__ void k_rmsnorm(const float *x, O *xn, const float *w, int C, float eps) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  __shared__ float red[32];
  const size_t t = blockIdx.x;
  const float *xr = x + t * C;
  O *xnr = xn + t * C;
  float q = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) q += xr[c] * xr[c];
  const float r = rsqrtf(block_sum(q, red) / C + eps);
  for (int c = threadIdx.x; c < C; c += blockDim.x) xnr[c] = norm_out<O>(xr[c] * r * w[c]);
}

/* Vectorised RMSNorm: C % 4 == 0, x / xn / w 16 / 8-byte aligned; each thread keeps VPT float4 of the
 * row in registers (one read of x), blockDim.x * VPT * 4 >= C; bf16 out 4 at a time. The scalar
 * k_rmsnorm's 2-byte stores and second read of x left it under the copy rate. */
template <int VPT>
__global__ void k_rmsnorm_vec(const float *x, uint16_t *xn, const float *w, int C, float eps) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  __shared__ float red[32];
  const size_t t = blockIdx.x;
  const float4 *xr = reinterpret_cast<const float4 *>(x + t * C);
  uint2 *xnr = reinterpret_cast<uint2 *>(xn + t * C);
  const int C4 = C / 4;
  float4 v[VPT];
  row4_load<VPT>(xr, C4, v);
  float q = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) q += (v[k].x * v[k].x + v[k].y * v[k].y) + (v[k].z * v[k].z + v[k].w * v[k].w);
  const float r = rsqrtf(block_sum(q, red) / C + eps);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c < C4) {
      const float4 wv = reinterpret_cast<const float4 *>(w)[c];
      uint2 h;
      h.x = (uint32_t)to_bf(v[k].x * r * wv.x) | ((uint32_t)to_bf(v[k].y * r * wv.y) << 16);
      h.y = (uint32_t)to_bf(v[k].z * r * wv.z) | ((uint32_t)to_bf(v[k].w * r * wv.w) << 16);
      xnr[c] = h;
    }
  }
}

/* -------------------------------------------------------------- launchers */

extern "C" void vr_cuda_layernorm(float *x, uint16_t *xn, const float *w, const float *b, int T,
                                  int C, float eps, cudaStream_t s) {
  if (T <= 0) return;
  const int C4 = C / 4;
  const unsigned th = norm_threads(C4);
  const int vpt = (int)((C4 + th - 1) / th);
  const int aligned = ((uintptr_t)x | (uintptr_t)xn | (uintptr_t)w | (uintptr_t)b) % 16 == 0;
  if (C % 4 == 0 && aligned && vpt <= 4) {
    if (vpt == 1) vr_launch(k_layernorm_vec<1>, dim3(T), dim3(th), 0, s, x, xn, w, b, C, eps);
    else if (vpt == 2) vr_launch(k_layernorm_vec<2>, dim3(T), dim3(th), 0, s, x, xn, w, b, C, eps);
    else if (vpt == 3) vr_launch(k_layernorm_vec<3>, dim3(T), dim3(th), 0, s, x, xn, w, b, C, eps);
    else vr_launch(k_layernorm_vec<4>, dim3(T), dim3(th), 0, s, x, xn, w, b, C, eps);
    VR_CUDA_CHECK_LAUNCH();
    return;
  }
  vr_launch(k_layernorm, dim3(T), dim3(norm_threads(C)), 0, s, x, xn, w, b, C, eps);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_layernorm_b16(const uint16_t *y, const uint16_t *r, uint16_t *xn, float *x, const float *w,
                                      const float *b, int T, int C, float eps, cudaStream_t s) {
  if (T <= 0) return;
  const int aligned =
      ((uintptr_t)y | (uintptr_t)r | (uintptr_t)xn | (uintptr_t)x | (uintptr_t)w | (uintptr_t)b) % 16 == 0;
  const int vpt = (C / 8 + 31) / 32;
  if (C % 8 == 0 && aligned && vpt >= 1 && vpt <= 4) {
    const unsigned rows = 8, grid = (unsigned)((T + rows - 1) / rows); /* 8 warps, one row each */
    if (vpt == 1) vr_launch(k_layernorm_b16<1>, dim3(grid), dim3(rows * 32), 0, s, y, r, xn, x, w, b, T, C, eps);
    else if (vpt == 2) vr_launch(k_layernorm_b16<2>, dim3(grid), dim3(rows * 32), 0, s, y, r, xn, x, w, b, T, C, eps);
    else if (vpt == 3) vr_launch(k_layernorm_b16<3>, dim3(grid), dim3(rows * 32), 0, s, y, r, xn, x, w, b, T, C, eps);
    else vr_launch(k_layernorm_b16<4>, dim3(grid), dim3(rows * 32), 0, s, y, r, xn, x, w, b, T, C, eps);
  } else {
    vr_launch(k_layernorm_b16_any, dim3(T), dim3(norm_threads(C)), 0, s, y, r, xn, x, w, b, C, eps);
  }
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_rmsnorm(const float *x, uint16_t *xn, const float *w, int T, int C,
                                float eps, cudaStream_t s) {
  if (T <= 0) return;
  const int C4 = C / 4;
  const unsigned th = norm_threads(C4);
  const int vpt = (int)((C4 + th - 1) / th);
  const int aligned = ((uintptr_t)x | (uintptr_t)w) % 16 == 0 && (uintptr_t)xn % 8 == 0;
  if (C % 4 == 0 && aligned && vpt <= 4) {
    if (vpt == 1) vr_launch(k_rmsnorm_vec<1>, dim3(T), dim3(th), 0, s, x, xn, w, C, eps);
    else if (vpt == 2) vr_launch(k_rmsnorm_vec<2>, dim3(T), dim3(th), 0, s, x, xn, w, C, eps);
    else if (vpt == 3) vr_launch(k_rmsnorm_vec<3>, dim3(T), dim3(th), 0, s, x, xn, w, C, eps);
    else vr_launch(k_rmsnorm_vec<4>, dim3(T), dim3(th), 0, s, x, xn, w, C, eps);
    VR_CUDA_CHECK_LAUNCH();
    return;
  }
  vr_launch(k_rmsnorm<uint16_t>, dim3(T), dim3(norm_threads(C)), 0, s, x, xn, w, C, eps);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_rmsnorm_f32(const float *x, float *y, const float *w, int T, int C, float eps,
                                    cudaStream_t s) {
  if (T <= 0) return;
  vr_launch(k_rmsnorm<float>, dim3(T), dim3(norm_threads(C)), 0, s, x, y, w, C, eps);
  VR_CUDA_CHECK_LAUNCH();
}
