/* vr_cutrain_optim.cu: AdamW over the contiguous fp32 master buffers (multi-tensor chunks, one
 * launch), the deterministic sum of squares the clip reads on the device, and fills. Contracts
 * in vr_cutrain_ops.h. */
#include <math.h>

#include "vr_cuda_common.cuh"
#include "vr_cutrain_ops.h"

#define SQ_THREADS 256

/* ---------------------------------------------------------------- kernels */

/* Sum over the block in double (blockDim.x a multiple of 32); red: 32 doubles. */
__device__ double block_sum_d(double v, double *red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  double t = lane < nw ? red[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

/* Pass 1: block b's threads sum x[i]^2 (double) in a fixed order: x 16-byte aligned, the first
 * n4 = n / 4 groups of 4 as float4 (two in flight per thread: group q = b * 256 + tid + k *
 * (blocks * 256)), then the rest one element each; unaligned x (n4 = 0): every element so. */
__global__ void __launch_bounds__(SQ_THREADS) k_sumsq_partial(double *partial, const float *x, size_t n, size_t n4) {
  __shared__ double red[32];
  double a = 0.0;
  const size_t step = (size_t)gridDim.x * blockDim.x, q0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const float4 *x4 = reinterpret_cast<const float4 *>(x);
  size_t q = q0;
  for (; q + step < n4; q += 2 * step) {
    const float4 u = x4[q], v = x4[q + step];
    a += (double)u.x * u.x + (double)u.y * u.y + (double)u.z * u.z + (double)u.w * u.w;
    a += (double)v.x * v.x + (double)v.y * v.y + (double)v.z * v.z + (double)v.w * v.w;
  }
  if (q < n4) {
    const float4 u = x4[q];
    a += (double)u.x * u.x + (double)u.y * u.y + (double)u.z * u.z + (double)u.w * u.w;
  }
  for (size_t i = 4 * n4 + q0; i < n; i += step) a += (double)x[i] * x[i];
  a = block_sum_d(a, red);
  if (threadIdx.x == 0) partial[blockIdx.x] = a;
}

__global__ void __launch_bounds__(SQ_THREADS) k_sumsq_final(double *out, const double *partial, int n) {
  __shared__ double red[32];
  double a = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) a += partial[i];
  a = block_sum_d(a, red);
  if (threadIdx.x == 0) out[0] = a;
}

struct adamw_k {
  float lr, b1, b2, eps, clip, wd, bc1, bc2s; /* bc1 = 1 - b1^step, bc2s = sqrt(1 - b2^step) */
  float pre; /* the gradients' pending factor (vr_cutrain_adamw_t.grad_scale; 1: none) */
};

/* Block b: chunk b. torch.optim.AdamW's update (its foreach form):
 * p *= 1 - lr wd; m += (1 - b1) (g - m) (torch's lerp); v = b2 v + (1 - b2) g^2;
 * p -= (lr / bc1) m / (sqrt(v) / bc2s + eps). m, v are indexed from moff (the shard's start). */
/* One element's update (the same arithmetic in the scalar and the 4-wide loops). */
__device__ __forceinline__ void adamw_one(float &p, float &m, float &v, float g, float gs, float decay, float step,
                                          const adamw_k &k) {
  const float gi = (g * k.pre) * gs; /* pre 1: g * gs exactly; gs 1: fl(g * pre), the bits of g scaled in place */
  m += (1.f - k.b1) * (gi - m);
  v = k.b2 * v + (1.f - k.b2) * gi * gi;
  p = p * decay;
  p -= step * (m / (sqrtf(v) / k.bc2s + k.eps));
}

/* Block b: chunk b; 4 elements per thread and load when the chunk and the moments' offset
 * are 16-byte aligned (the bits do not depend on it). */
__global__ void k_adamw(float *p, uint16_t *p16, float *m, float *v, const float *g, int64_t moff, const int64_t *off,
                        const int64_t *len, const float *wd, const double *sumsq, adamw_k k) {
  const int64_t o = off[blockIdx.x], n = len[blockIdx.x];
  float gs = 1.f;
  if (k.clip > 0.f && sumsq) gs = fminf(1.f, k.clip / ((float)sqrt(sumsq[0]) + 1e-6f));
  const float decay = 1.f - k.lr * k.wd * (wd ? wd[blockIdx.x] : 1.f), step = k.lr / k.bc1;
  int64_t j0 = 0;
  if (((o | moff) & 3) == 0) {
    const int64_t n4 = n / 4;
    float4 *p4 = reinterpret_cast<float4 *>(p + o), *m4 = reinterpret_cast<float4 *>(m + (o - moff)),
           *v4 = reinterpret_cast<float4 *>(v + (o - moff));
    const float4 *g4 = reinterpret_cast<const float4 *>(g + o);
    for (int64_t j = threadIdx.x; j < n4; j += blockDim.x) {
      float4 pp = p4[j], mm = m4[j], vv = v4[j];
      const float4 gg = g4[j];
      adamw_one(pp.x, mm.x, vv.x, gg.x, gs, decay, step, k);
      adamw_one(pp.y, mm.y, vv.y, gg.y, gs, decay, step, k);
      adamw_one(pp.z, mm.z, vv.z, gg.z, gs, decay, step, k);
      adamw_one(pp.w, mm.w, vv.w, gg.w, gs, decay, step, k);
      p4[j] = pp, m4[j] = mm, v4[j] = vv;
      if (p16) {
        const uint16_t q[4] = {to_bf(pp.x), to_bf(pp.y), to_bf(pp.z), to_bf(pp.w)};
        *reinterpret_cast<uint2 *>(p16 + o + 4 * j) = *reinterpret_cast<const uint2 *>(q);
      }
    }
    j0 = n4 * 4;
  }
  for (int64_t j = j0 + threadIdx.x; j < n; j += blockDim.x) {
    const int64_t i = o + j, im = i - moff;
    float pi = p[i], mi = m[im], vi = v[im];
    adamw_one(pi, mi, vi, g[i], gs, decay, step, k);
    m[im] = mi, v[im] = vi, p[i] = pi;
    if (p16) p16[i] = to_bf(pi);
  }
}

/* Row t of out (C floats) = rows ids[t] of the table at p + off after k_adamw's update of it
 * (no per-chunk weight-decay multiplier: wd NULL there), computed from p, m, v, g and written
 * nowhere else: what the update will store, for a reader that comes before it. */
__global__ void k_adamw_rows(float *out, const float *p, const float *m, const float *v, const float *g, int64_t moff,
                             int64_t off, const int32_t *ids, int C, const float *wd, const double *sumsq, adamw_k k) {
  float gs = 1.f;
  if (k.clip > 0.f && sumsq) gs = fminf(1.f, k.clip / ((float)sqrt(sumsq[0]) + 1e-6f));
  /* wd is NULL: k_adamw's expression as it stands, so that the compiler contracts it alike */
  const float decay = 1.f - k.lr * k.wd * (wd ? wd[0] : 1.f), step = k.lr / k.bc1;
  const int64_t r = off + (int64_t)ids[blockIdx.x] * C;
  float *o = out + (size_t)blockIdx.x * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float pi = p[r + c], mi = m[r + c - moff], vi = v[r + c - moff];
    adamw_one(pi, mi, vi, g[r + c], gs, decay, step, k);
    o[c] = pi;
  }
}

/* splitmix64 of (seed, i) to a uniform in [-1, 1). */
__global__ void k_fill_uniform(float *x, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    x[i] = scale * ((float)(z >> 40) * (2.f / 16777216.f) - 1.f);
  }
}

__global__ void k_scale(float *x, size_t n, float a) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] *= a;
}

__global__ void k_fill(float *x, size_t n, float value) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = value;
}

/* Block b zeroes x[off[b], off[b] + len[b]). */
__global__ void k_zero_chunks(float *x, const int64_t *off, const int64_t *len) {
  float *p = x + off[blockIdx.x];
  const int64_t n = len[blockIdx.x];
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) p[i] = 0.f;
}

/* -------------------------------------------------------------- launchers */

static adamw_k adamw_k_of(const vr_cutrain_adamw_t *hp) {
  VR_ASSERT(hp->step >= 1);
  const adamw_k k = {hp->lr,
                     hp->beta1,
                     hp->beta2,
                     hp->eps,
                     hp->clip,
                     hp->weight_decay,
                     (float)(1.0 - pow((double)hp->beta1, (double)hp->step)),
                     (float)sqrt(1.0 - pow((double)hp->beta2, (double)hp->step)),
                     hp->grad_scale != 0.f ? hp->grad_scale : 1.f};
  return k;
}

extern "C" void vr_cutrain_sumsq(double *out, const float *x, size_t n, double *scratch, cudaStream_t s) {
  const size_t n4 = ((uintptr_t)x & 15) == 0 ? n / 4 : 0;
  k_sumsq_partial<<<VR_CUTRAIN_SUMSQ_BLOCKS, SQ_THREADS, 0, s>>>(scratch, x, n, n4);
  VR_CUDA_CHECK_LAUNCH();
  k_sumsq_final<<<1, SQ_THREADS, 0, s>>>(out, scratch, VR_CUTRAIN_SUMSQ_BLOCKS);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" int vr_cutrain_adamw_chunks(size_t lo, size_t hi, int64_t *off, int64_t *len, int max_chunks) {
  int n = 0;
  for (size_t o = lo; o < hi; o += VR_CUTRAIN_ADAMW_CHUNK) {
    if (n >= max_chunks) return -1;
    off[n] = (int64_t)o;
    len[n] = (int64_t)(hi - o < VR_CUTRAIN_ADAMW_CHUNK ? hi - o : VR_CUTRAIN_ADAMW_CHUNK);
    ++n;
  }
  return n;
}

extern "C" void vr_cutrain_adamw(float *p, uint16_t *p16, float *m, float *v, const float *g, int64_t moff,
                                 const int64_t *off, const int64_t *len, const float *wd, int n_chunks,
                                 const double *sumsq, const vr_cutrain_adamw_t *hp, cudaStream_t s) {
  if (n_chunks <= 0) return;
  k_adamw<<<n_chunks, 512, 0, s>>>(p, p16, m, v, g, moff, off, len, wd, sumsq, adamw_k_of(hp));
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cutrain_adamw_rows(float *out, const float *p, const float *m, const float *v, const float *g,
                                      int64_t moff, int64_t off, const int32_t *ids, int T, int C, const double *sumsq,
                                      const vr_cutrain_adamw_t *hp, cudaStream_t s) {
  if (T <= 0) return;
  k_adamw_rows<<<T, 256, 0, s>>>(out, p, m, v, g, moff, off, ids, C, NULL, sumsq, adamw_k_of(hp));
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cutrain_zero_chunks(float *x, const int64_t *off, const int64_t *len, int n_chunks,
                                       cudaStream_t s) {
  if (n_chunks <= 0) return;
  k_zero_chunks<<<n_chunks, 512, 0, s>>>(x, off, len);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cutrain_fill_uniform(float *x, size_t n, uint64_t seed, float scale, cudaStream_t s) {
  if (n == 0) return;
  k_fill_uniform<<<grid_for(n, 256), 256, 0, s>>>(x, n, seed, scale);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cutrain_fill(float *x, size_t n, float value, cudaStream_t s) {
  if (n == 0) return;
  k_fill<<<grid_for(n, 256), 256, 0, s>>>(x, n, value);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cutrain_scale(float *x, size_t n, float a, cudaStream_t s) {
  if (n == 0) return;
  k_scale<<<grid_for(n, 256), 256, 0, s>>>(x, n, a);
  VR_CUDA_CHECK_LAUNCH();
}
