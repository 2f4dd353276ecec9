/* vr_cutrain_norm.cu: RMSNorm backward (dx and the dw partial sums of a block's rows in one
 * pass over dy and x, then the blocks' sums in order; hidden sizes above 4096: dx per row and
 * dw in two further passes) and the bias gradient's column sums. Contracts in vr_cutrain_ops.h. */
#include "vr_cuda_common.cuh"
#include "vr_cutrain_ops.h"

#define CHUNK VR_CUTRAIN_NORM_CHUNK
/* the fused RMSNorm backward: rows per block, threads per block, most columns per thread */
#define FUSED_ROWS 16
#define FUSED_THREADS 256
#define FUSED_MAX_K 16
/* the final pass of the column sums: columns x chunk groups per block (8 columns a block: C / 8
 * blocks, 112 at C 896; 32 columns gave 28 blocks and ~10 us a call, latency-bound) */
#define FIN_X 8
#define FIN_Y 64

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

/* The fused backward of ROWS consecutive rows per block (NT threads, each holding K columns
 * c = tid + k NT in registers, C <= K NT; dy fp32 or bf16): per row dx as k_rmsnorm_bwd_dx and the row's
 * dy * x * r added into the thread's column sums, in row order; the block's sums go to
 * partial[block, c] (the first of the two dw passes, without reading dy and x again). */
static __device__ __forceinline__ float ld_dy(const float *p, size_t i) { return p[i]; }
static __device__ __forceinline__ float ld_dy(const uint16_t *p, size_t i) { return bf(p[i]); }

template <int K, typename DY>
__global__ void __launch_bounds__(FUSED_THREADS)
    k_rmsnorm_bwd_fused(float *dx, uint16_t *dx16, float *partial, const DY *dy, const float *x, const float *w,
                        int T, int C, float eps, int accumulate) {
  __shared__ float2 red[FUSED_THREADS / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float wv[K], acc[K], xv[K], dv[K], ov[K];
  const int t0 = blockIdx.x * FUSED_ROWS, t1 = min(T, t0 + FUSED_ROWS);
  /* row t's x, dy (and dx when accumulating) into registers: issued one row ahead, so the loads
   * of the next row are in flight during this row's reduction */
#define LOAD_ROW(t)                                                     \
  do {                                                                  \
    const size_t b_ = (size_t)(t) * C;                                  \
    _Pragma("unroll") for (int k = 0; k < K; ++k) {                     \
      const int c = tid + k * FUSED_THREADS;                            \
      xv[k] = c < C ? x[b_ + c] : 0.f;                                  \
      dv[k] = c < C ? ld_dy(dy, b_ + c) : 0.f;                          \
      ov[k] = c < C && accumulate ? dx[b_ + c] : 0.f;                   \
    }                                                                   \
  } while (0)
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int c = tid + k * FUSED_THREADS;
    wv[k] = c < C ? w[c] : 0.f;
    acc[k] = 0.f;
  }
  if (t0 < t1) LOAD_ROW(t0);
  for (int t = t0; t < t1; ++t) {
    const size_t base = (size_t)t * C;
    float cx[K], cd[K], co[K];
    float q = 0.f, d = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      cx[k] = xv[k], cd[k] = dv[k], co[k] = ov[k];
      q += cx[k] * cx[k];
      d += cd[k] * wv[k] * cx[k];
    }
    if (t + 1 < t1) LOAD_ROW(t + 1);
    for (int o = 16; o > 0; o >>= 1) {
      q += __shfl_xor_sync(0xffffffffu, q, o);
      d += __shfl_xor_sync(0xffffffffu, d, o);
    }
    __syncthreads(); /* red of the previous row read by every warp */
    if (lane == 0) red[warp] = make_float2(q, d);
    __syncthreads();
    float2 tot = lane < FUSED_THREADS / 32 ? red[lane] : make_float2(0.f, 0.f);
    for (int o = 16; o > 0; o >>= 1) {
      tot.x += __shfl_xor_sync(0xffffffffu, tot.x, o);
      tot.y += __shfl_xor_sync(0xffffffffu, tot.y, o);
    }
    const float r = rsqrtf(tot.x / C + eps), kk = r * r * r * tot.y / C;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int c = tid + k * FUSED_THREADS;
      if (c >= C) continue;
      float v = r * cd[k] * wv[k] - cx[k] * kk;
      if (accumulate) v += co[k];
      dx[base + c] = v;
      if (dx16) dx16[base + c] = to_bf(v);
      acc[k] += cd[k] * cx[k] * r;
    }
  }
#undef LOAD_ROW
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int c = tid + k * FUSED_THREADS;
    if (c < C) partial[(size_t)blockIdx.x * C + c] = acc[k];
  }
}

/* The same for narrow rows (C % 4 == 0, C <= 4 * 32 * VEC_MAX_K4, 16-byte aligned x, dx and w,
 * 8-byte aligned bf16 dy): a warp per row, no block barriers. Block b's FUSED_ROWS rows are dealt
 * to its VEC_WARPS warps (warp w: rows t0 + w, t0 + w + VEC_WARPS, ...); lane l holds the column
 * groups 4 (l + 32 k), k < K4, as float4 (x, dy and, in the second pass, the dx it adds to); the
 * row's two sums are warp shuffles. Each warp sums dy * x * r of its rows per column in row
 * order, then the block adds its warps' sums in warp order into partial[block, c] (a fixed
 * order: deterministic, and the bf16-dy form gives the fp32 form's bits on widened dy). At
 * C 896 the block form's per-row barriers left it at ~60% of the copy rate (Qwen2-0.5B's two
 * norms, 95 us a call at T 16384, docs/benchmarks.md). */
#define VEC_WARPS 8
#define VEC_MAX_K4 7 /* 8 spilled (C up to 1024) */
static __device__ __forceinline__ float4 ld_dy4(const float *p, size_t i) {
  return *reinterpret_cast<const float4 *>(p + i);
}
static __device__ __forceinline__ float4 ld_dy4(const uint16_t *p, size_t i) {
  const uint2 u = *reinterpret_cast<const uint2 *>(p + i);
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                     __uint_as_float(u.y & 0xffff0000u));
}

template <int K4, typename DY>
__global__ void __launch_bounds__(VEC_WARPS * 32, 2)
    k_rmsnorm_bwd_vec(float *dx, uint16_t *dx16, float *partial, const DY *dy, const float *x, const float *w, int T,
                      int C, float eps, int accumulate) {
  extern __shared__ float vec_sh[]; /* VEC_WARPS x C: the warps' column sums */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, C4 = C >> 2;
  const int t0 = blockIdx.x * FUSED_ROWS, t1 = min(T, t0 + FUSED_ROWS);
  float4 acc[K4];
#pragma unroll
  for (int k = 0; k < K4; ++k) acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
  const float4 *w4 = reinterpret_cast<const float4 *>(w);
  for (int t = t0 + warp; t < t1; t += VEC_WARPS) {
    const size_t base = (size_t)t * C;
    const float4 *x4 = reinterpret_cast<const float4 *>(x + base);
    float4 xv[K4], dv[K4];
    float q = 0.f, d = 0.f;
#pragma unroll
    for (int k = 0; k < K4; ++k) {
      const int g = lane + 32 * k;
      if (g < C4) {
        xv[k] = x4[g], dv[k] = ld_dy4(dy, base + 4 * (size_t)g);
      } else {
        xv[k] = dv[k] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
#pragma unroll
    for (int k = 0; k < K4; ++k) {
      const int g = lane + 32 * k;
      const float4 wv = g < C4 ? w4[g] : make_float4(0.f, 0.f, 0.f, 0.f);
      q += xv[k].x * xv[k].x + xv[k].y * xv[k].y + xv[k].z * xv[k].z + xv[k].w * xv[k].w;
      d += dv[k].x * wv.x * xv[k].x + dv[k].y * wv.y * xv[k].y + dv[k].z * wv.z * xv[k].z + dv[k].w * wv.w * xv[k].w;
    }
    for (int o = 16; o > 0; o >>= 1) {
      q += __shfl_xor_sync(0xffffffffu, q, o);
      d += __shfl_xor_sync(0xffffffffu, d, o);
    }
    const float r = rsqrtf(q / C + eps), kk = r * r * r * d / C;
    float4 *dx4 = reinterpret_cast<float4 *>(dx + base);
#pragma unroll
    for (int k = 0; k < K4; ++k) {
      const int g = lane + 32 * k;
      if (g >= C4) continue;
      const float4 wv = w4[g];
      float4 v = make_float4(r * dv[k].x * wv.x - xv[k].x * kk, r * dv[k].y * wv.y - xv[k].y * kk,
                             r * dv[k].z * wv.z - xv[k].z * kk, r * dv[k].w * wv.w - xv[k].w * kk);
      if (accumulate) {
        const float4 o = dx4[g];
        v.x += o.x, v.y += o.y, v.z += o.z, v.w += o.w;
      }
      dx4[g] = v;
      if (dx16) {
        uint2 u;
        u.x = (uint32_t)to_bf(v.x) | (uint32_t)to_bf(v.y) << 16;
        u.y = (uint32_t)to_bf(v.z) | (uint32_t)to_bf(v.w) << 16;
        *reinterpret_cast<uint2 *>(dx16 + base + 4 * (size_t)g) = u;
      }
      acc[k].x += dv[k].x * xv[k].x * r, acc[k].y += dv[k].y * xv[k].y * r;
      acc[k].z += dv[k].z * xv[k].z * r, acc[k].w += dv[k].w * xv[k].w * r;
    }
  }
#pragma unroll
  for (int k = 0; k < K4; ++k) {
    const int g = lane + 32 * k;
    if (g < C4) reinterpret_cast<float4 *>(vec_sh + (size_t)warp * C)[g] = acc[k];
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += VEC_WARPS * 32) {
    float a = 0.f;
#pragma unroll
    for (int v = 0; v < VEC_WARPS; ++v) a += vec_sh[(size_t)v * C + c];
    partial[(size_t)blockIdx.x * C + c] = a;
  }
}

/* Pass 1 of a column reduction: partial[chunk, c] = sum over the chunk's rows t (in order) of
 * dy[t, c] * x[t, c] * rstd[t]; with x == NULL of dy[t, c] * rstd[t] (rstd NULL: 1). Grid
 * (ceil(C / 256), chunks). */
__global__ void k_colsum_partial(float *partial, const float *dy, const float *x, const float *rstd, int T, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int t0 = blockIdx.y * CHUNK, t1 = min(T, t0 + CHUNK);
  float a = 0.f;
  if (x) {
    for (int t = t0; t < t1; ++t) a += dy[(size_t)t * C + c] * x[(size_t)t * C + c] * rstd[t];
  } else { /* rstd: row weights, or NULL (1) */
    for (int t = t0; t < t1; ++t) a += dy[(size_t)t * C + c] * (rstd ? rstd[t] : 1.f);
  }
  partial[(size_t)blockIdx.y * C + c] = a;
}

/* Pass 1 for a bf16 matrix dyb (row pitch ld): partial[chunk, c] = sum over the chunk's rows in
 * order of dyb[t, c], W columns a thread: W 8 with 16-byte loads (N % 8 == 0, ld % 8 == 0, dyb and
 * partial 16-byte aligned; Qwen2's q/k/v bias gradient: 2-byte loads left that pass at ~2 TB/s),
 * else W 1. The same sums in the same order either way, so the same bits. Grid
 * (ceil(N / W / 128), chunks), 128 threads. */
template <int W>
__global__ void k_colsum_partial_bf16(float *partial, const uint16_t *dyb, int ld, int T, int N) {
  const int c0 = W * (blockIdx.x * blockDim.x + threadIdx.x);
  if (c0 >= N) return;
  const int t0 = blockIdx.y * CHUNK, t1 = min(T, t0 + CHUNK);
  float a[W];
#pragma unroll
  for (int k = 0; k < W; ++k) a[k] = 0.f;
#pragma unroll 8
  for (int t = t0; t < t1; ++t) {
    const uint16_t *row = dyb + (size_t)t * ld + c0;
    if constexpr (W == 8) {
      const uint4 u = *reinterpret_cast<const uint4 *>(row);
      const uint32_t v[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        a[2 * k] += __uint_as_float(v[k] << 16);
        a[2 * k + 1] += __uint_as_float(v[k] & 0xffff0000u);
      }
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) a[k] += bf(row[k]);
    }
  }
  float *dst = partial + (size_t)blockIdx.y * N + c0;
#pragma unroll
  for (int k = 0; k < W; ++k) dst[k] = a[k];
}

/* Pass 2: out[c] += sum over chunks of partial[chunk, c]: block (FIN_X, FIN_Y), thread (x, y)
 * sums the chunks y, y + FIN_Y, ... of column c in order, then the FIN_Y sums are added pairwise
 * in a fixed tree (y + h into y for h = FIN_Y / 2, ..., 1): a fixed order, deterministic. */
__global__ void __launch_bounds__(FIN_X * FIN_Y) k_colsum_final(float *out, const float *partial, int chunks, int C) {
  __shared__ float red[FIN_Y][FIN_X];
  const int c = blockIdx.x * FIN_X + threadIdx.x;
  float a = 0.f;
  if (c < C)
    for (int k = threadIdx.y; k < chunks; k += FIN_Y) a += partial[(size_t)k * C + c];
  red[threadIdx.y][threadIdx.x] = a;
  __syncthreads();
#pragma unroll
  for (int h = FIN_Y / 2; h > 0; h >>= 1) {
    if (threadIdx.y < h) red[threadIdx.y][threadIdx.x] += red[threadIdx.y + h][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < C) out[c] += red[0][threadIdx.x];
}

static void colsum_final(float *out, const float *partial, int chunks, int C, cudaStream_t s) {
  k_colsum_final<<<(C + FIN_X - 1) / FIN_X, dim3(FIN_X, FIN_Y), 0, s>>>(out, partial, chunks, C);
  VR_CUDA_CHECK_LAUNCH();
}

/* -------------------------------------------------------------- launchers */

static int chunks_of(int T) { return (T + CHUNK - 1) / CHUNK; }

static int fused_blocks(int T) { return (T + FUSED_ROWS - 1) / FUSED_ROWS; }

extern "C" size_t vr_cutrain_rmsnorm_bwd_scratch(int T, int C) {
  const size_t two = (size_t)chunks_of(T) * C + (size_t)T, one = (size_t)fused_blocks(T) * C;
  return two > one ? two : one;
}

extern "C" size_t vr_cutrain_colsum_scratch(int T, int N) { return (size_t)chunks_of(T) * N; }

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* The fused kernel (C <= FUSED_THREADS * FUSED_MAX_K; the warp-per-row form where C and the
 * pointers allow it), then the blocks' dw sums in order. */
template <typename DY>
static void rmsnorm_bwd_fused(float *dx, uint16_t *dx16, float *dw, const DY *dy, const float *x, const float *w,
                              int T, int C, float eps, int accumulate, float *scratch, cudaStream_t s) {
  const int K = (C + FUSED_THREADS - 1) / FUSED_THREADS, nb = fused_blocks(T);
  const int K4 = (C / 4 + 31) / 32;
  if (C % 4 == 0 && K4 <= VEC_MAX_K4 && aligned16(x) && aligned16(dx) && aligned16(w) &&
      ((uintptr_t)dy & (sizeof(DY) == 2 ? 7 : 15)) == 0 && ((uintptr_t)dx16 & 7) == 0) {
    const size_t sh = (size_t)VEC_WARPS * C * sizeof(float);
    if (K4 <= 2)
      k_rmsnorm_bwd_vec<2><<<nb, VEC_WARPS * 32, sh, s>>>(dx, dx16, scratch, dy, x, w, T, C, eps, accumulate);
    else if (K4 <= 4)
      k_rmsnorm_bwd_vec<4><<<nb, VEC_WARPS * 32, sh, s>>>(dx, dx16, scratch, dy, x, w, T, C, eps, accumulate);
    else
      k_rmsnorm_bwd_vec<7><<<nb, VEC_WARPS * 32, sh, s>>>(dx, dx16, scratch, dy, x, w, T, C, eps, accumulate);
    VR_CUDA_CHECK_LAUNCH();
    colsum_final(dw, scratch, nb, C, s);
    return;
  }
  if (K <= 1)
    k_rmsnorm_bwd_fused<1><<<nb, FUSED_THREADS, 0, s>>>(dx, dx16, scratch, dy, x, w, T, C, eps, accumulate);
  else if (K <= 2)
    k_rmsnorm_bwd_fused<2><<<nb, FUSED_THREADS, 0, s>>>(dx, dx16, scratch, dy, x, w, T, C, eps, accumulate);
  else if (K <= 4)
    k_rmsnorm_bwd_fused<4><<<nb, FUSED_THREADS, 0, s>>>(dx, dx16, scratch, dy, x, w, T, C, eps, accumulate);
  else if (K <= 8)
    k_rmsnorm_bwd_fused<8><<<nb, FUSED_THREADS, 0, s>>>(dx, dx16, scratch, dy, x, w, T, C, eps, accumulate);
  else
    k_rmsnorm_bwd_fused<16><<<nb, FUSED_THREADS, 0, s>>>(dx, dx16, scratch, dy, x, w, T, C, eps, accumulate);
  VR_CUDA_CHECK_LAUNCH();
  colsum_final(dw, scratch, nb, C, s);
}

extern "C" void vr_cutrain_rmsnorm_bwd(float *dx, uint16_t *dx16, float *dw, const float *dy, const float *x,
                                       const float *w, int T, int C, float eps, int accumulate, float *scratch,
                                       cudaStream_t s) {
  if (T <= 0) return;
  if (C <= FUSED_THREADS * FUSED_MAX_K) { /* one pass over dy and x, then the chunks' sums in order */
    rmsnorm_bwd_fused(dx, dx16, dw, dy, x, w, T, C, eps, accumulate, scratch, s);
    return;
  }
  const int chunks = chunks_of(T);
  float *partial = scratch, *rstd = scratch + (size_t)chunks * C;
  k_rmsnorm_bwd_dx<<<T, norm_threads(C), 0, s>>>(dx, dx16, rstd, dy, x, w, C, eps, accumulate);
  VR_CUDA_CHECK_LAUNCH();
  const dim3 g1((unsigned)((C + 255) / 256), (unsigned)chunks);
  k_colsum_partial<<<g1, 256, 0, s>>>(partial, dy, x, rstd, T, C);
  VR_CUDA_CHECK_LAUNCH();
  colsum_final(dw, partial, chunks, C, s);
}

extern "C" void vr_cutrain_rmsnorm_bwd16(float *dx, uint16_t *dx16, float *dw, const uint16_t *dy, const float *x,
                                         const float *w, int T, int C, float eps, int accumulate, float *scratch,
                                         cudaStream_t s) {
  VR_ASSERT(C <= FUSED_THREADS * FUSED_MAX_K && C <= VR_CUTRAIN_NORM_BWD16_MAX_C);
  if (T > 0) rmsnorm_bwd_fused(dx, dx16, dw, dy, x, w, T, C, eps, accumulate, scratch, s);
}

extern "C" void vr_cutrain_colsum_bf16(float *db, const uint16_t *dy, int ld, int T, int N, float *scratch,
                                       cudaStream_t s) {
  if (T <= 0) return;
  const int chunks = chunks_of(T);
  if (N % 8 == 0 && ld % 8 == 0 && aligned16(dy) && aligned16(scratch))
    k_colsum_partial_bf16<8><<<dim3((unsigned)((N / 8 + 127) / 128), (unsigned)chunks), 128, 0, s>>>(scratch, dy, ld,
                                                                                                      T, N);
  else
    k_colsum_partial_bf16<1><<<dim3((unsigned)((N + 127) / 128), (unsigned)chunks), 128, 0, s>>>(scratch, dy, ld, T, N);
  VR_CUDA_CHECK_LAUNCH();
  colsum_final(db, scratch, chunks, N, s);
}

extern "C" void vr_cutrain_colsum_weighted(float *out, const float *x, const float *wgt, int T, int C, float *scratch,
                                           cudaStream_t s) {
  if (T <= 0) return;
  const int chunks = chunks_of(T);
  const dim3 g1((unsigned)((C + 255) / 256), (unsigned)chunks);
  k_colsum_partial<<<g1, 256, 0, s>>>(scratch, x, NULL, wgt, T, C);
  VR_CUDA_CHECK_LAUNCH();
  colsum_final(out, scratch, chunks, C, s);
}
