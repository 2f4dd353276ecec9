/* vr_cutrain_lmhead.cu: the fused LM head + log-softmax at a temperature (log p of the
 * targets, entropy) and its backward, chunked over tokens so that at most (chunk, V) logits
 * exist at once. Contracts in vr_cutrain_ops.h. */
#include <math.h>

#include "vr_cuda_common.cuh"
#include "vr_cutrain_ops.h"

#define LSM_THREADS 512

/* ---------------------------------------------------------------- kernels */

/* Online softmax statistics of a set of z: running max m, s = sum e^(z - m),
 * w = sum e^(z - m) z. */
struct lsm_acc {
  float m, s, w;
};

__device__ __forceinline__ void lsm_add(lsm_acc &a, float z) {
  if (z > a.m) {
    const float r = __expf(a.m - z); /* a.m = -inf: r = 0 */
    a.s = a.s * r + 1.f;
    a.w = a.w * r + z;
    a.m = z;
  } else {
    const float e = __expf(z - a.m);
    a.s += e;
    a.w += e * z;
  }
}

__device__ __forceinline__ lsm_acc lsm_merge(lsm_acc a, lsm_acc b) {
  if (b.m == -INFINITY) return a;
  if (a.m == -INFINITY) return b;
  const float m = fmaxf(a.m, b.m), ra = __expf(a.m - m), rb = __expf(b.m - m);
  lsm_acc o = {m, a.s * ra + b.s * rb, a.w * ra + b.w * rb};
  return o;
}

/* One block per row: lse, ent, logp of z = logits * inv_temp; lp16 (row pitch V) non-NULL:
 * bf16(z - lse) of the row too (a second pass over the row, read again). */
__global__ void __launch_bounds__(LSM_THREADS)
    k_logsoftmax_rows(float *logp, float *ent, float *lse, const float *logits, const int32_t *tgt, int V,
                      float inv_temp, uint16_t *lp16) {
  __shared__ lsm_acc red[LSM_THREADS / 32];
  __shared__ float row_lse;
  const size_t r = blockIdx.x;
  const float *lr = logits + r * V;
  lsm_acc a = {-INFINITY, 0.f, 0.f};
  if ((V & 3) == 0) {
    const float4 *l4 = reinterpret_cast<const float4 *>(lr);
    for (int i = threadIdx.x; i < V / 4; i += blockDim.x) {
      const float4 v = l4[i];
      lsm_add(a, v.x * inv_temp);
      lsm_add(a, v.y * inv_temp);
      lsm_add(a, v.z * inv_temp);
      lsm_add(a, v.w * inv_temp);
    }
  } else {
    for (int i = threadIdx.x; i < V; i += blockDim.x) lsm_add(a, lr[i] * inv_temp);
  }
  for (int o = 16; o > 0; o >>= 1) {
    lsm_acc b = {__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o),
                 __shfl_xor_sync(0xffffffffu, a.w, o)};
    a = lsm_merge(a, b);
  }
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = a;
  __syncthreads();
  if (threadIdx.x == 0) {
    lsm_acc t = red[0];
    for (int k = 1; k < (int)(blockDim.x >> 5); ++k) t = lsm_merge(t, red[k]);
    const float l = t.m + logf(t.s);
    lse[r] = l;
    row_lse = l;
    if (ent) ent[r] = l - t.w / t.s;
    if (logp) {
      const int y = tgt[r];
      logp[r] = y >= 0 ? lr[y] * inv_temp - l : 0.f;
    }
  }
  if (!lp16) return;
  __syncthreads();
  const float l = row_lse;
  uint16_t *o = lp16 + r * V;
  /* the second pass walks the row backwards: the part read last, the likeliest still in L2,
   * comes first */
  const int tid = (int)threadIdx.x, bd = (int)blockDim.x;
  if ((V & 3) == 0) {
    const float4 *l4 = reinterpret_cast<const float4 *>(lr);
    const int n4 = V / 4;
    for (int i = tid < n4 ? tid + (n4 - 1 - tid) / bd * bd : -1; i >= 0; i -= bd) {
      const float4 v = l4[i];
      const uint16_t q[4] = {to_bf(v.x * inv_temp - l), to_bf(v.y * inv_temp - l), to_bf(v.z * inv_temp - l),
                             to_bf(v.w * inv_temp - l)};
      *reinterpret_cast<uint2 *>(o + 4 * i) = *reinterpret_cast<const uint2 *>(q);
    }
  } else {
    for (int i = tid < V ? tid + (V - 1 - tid) / bd * bd : -1; i >= 0; i -= bd) o[i] = to_bf(lr[i] * inv_temp - l);
  }
}

/* dlogits[r, j] = bf16(inv_temp * (glp (j == y) - p_j (glp + gent (log p_j + ent)))),
 * log p_j = z_j - lse, or the stored bf16 log p_j of lp16 (LP16; logits unused); 4 elements
 * per thread (V % 4 == 0) or 1. */
template <int V4, int LP16>
__global__ void k_dlogits_rows(uint16_t *dl, const float *logits, const uint16_t *lp16, const float *glp,
                               const float *gent, const float *lse, const float *ent, const int32_t *tgt, int rows,
                               int V, float inv_temp) {
  const int W = V4 ? 4 : 1;
  const size_t vpr = (size_t)V / W, total = (size_t)rows * vpr;
  for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total; idx += (size_t)gridDim.x * blockDim.x) {
    const size_t r = idx / vpr;
    const int j0 = (int)(idx - r * vpr) * W, y = tgt[r];
    const float gl = y >= 0 ? glp[r] : 0.f, ge = gent ? gent[r] : 0.f, l = lse[r], h = ent ? ent[r] : 0.f;
    float v[4]; /* log p */
    if (LP16) {
      if (V4) {
        const uint2 q = *reinterpret_cast<const uint2 *>(lp16 + r * V + j0);
        const uint16_t *h4 = reinterpret_cast<const uint16_t *>(&q);
        v[0] = bf(h4[0]), v[1] = bf(h4[1]), v[2] = bf(h4[2]), v[3] = bf(h4[3]);
      } else {
        v[0] = bf(lp16[r * V + j0]);
      }
    } else if (V4) {
      const float4 q = *reinterpret_cast<const float4 *>(logits + r * V + j0);
      v[0] = q.x * inv_temp - l, v[1] = q.y * inv_temp - l, v[2] = q.z * inv_temp - l, v[3] = q.w * inv_temp - l;
    } else {
      v[0] = logits[r * V + j0] * inv_temp - l;
    }
    uint16_t o[4];
#pragma unroll
    for (int e = 0; e < W; ++e) {
      const float lp = v[e], p = __expf(lp);
      const float dz = (j0 + e == y ? gl : 0.f) - p * (gl + ge * (lp + h));
      o[e] = to_bf(dz * inv_temp);
    }
    if (V4)
      *reinterpret_cast<uint2 *>(dl + r * V + j0) = *reinterpret_cast<const uint2 *>(o);
    else
      dl[r * V + j0] = o[0];
  }
}

/* -------------------------------------------------------------- launchers */

extern "C" void vr_cutrain_logsoftmax_rows(float *logp, float *ent, float *lse, const float *logits, const int32_t *tgt,
                                           int rows, int V, float temp, uint16_t *lp16, cudaStream_t s) {
  if (rows <= 0) return;
  k_logsoftmax_rows<<<rows, LSM_THREADS, 0, s>>>(logp, ent, lse, logits, tgt, V, 1.f / temp, lp16);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cutrain_dlogits_rows(uint16_t *dlogits, const float *logits, const uint16_t *lp16, const float *glp,
                                        const float *gent, const float *lse, const float *ent, const int32_t *tgt,
                                        int rows, int V, float temp, cudaStream_t s) {
  const size_t n = (size_t)rows * V;
  if (n == 0) return;
  const float it = 1.f / temp;
  const unsigned g4 = grid_for(n / 4, 256), g1 = grid_for(n, 256);
  if (V % 4 == 0 && lp16)
    k_dlogits_rows<1, 1><<<g4, 256, 0, s>>>(dlogits, logits, lp16, glp, gent, lse, ent, tgt, rows, V, it);
  else if (V % 4 == 0)
    k_dlogits_rows<1, 0><<<g4, 256, 0, s>>>(dlogits, logits, lp16, glp, gent, lse, ent, tgt, rows, V, it);
  else if (lp16)
    k_dlogits_rows<0, 1><<<g1, 256, 0, s>>>(dlogits, logits, lp16, glp, gent, lse, ent, tgt, rows, V, it);
  else
    k_dlogits_rows<0, 0><<<g1, 256, 0, s>>>(dlogits, logits, lp16, glp, gent, lse, ent, tgt, rows, V, it);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cutrain_lmhead_fwd(vr_cuda_gemm_t *g, float *logp, float *ent, float *lse, const uint16_t *x,
                                      const uint16_t *W, const int32_t *tgt, int T, int C, int V, float temp, int chunk,
                                      float *logits, uint16_t *lp16, cudaStream_t s) {
  VR_ASSERT(chunk > 0 && lse);
  for (int t0 = 0; t0 < T; t0 += chunk) {
    const int rows = T - t0 < chunk ? T - t0 : chunk;
    vr_cuda_gemm(g, logits, 1, x + (size_t)t0 * C, W, NULL, rows, V, C, 0.f, s); /* (rows, V) */
    vr_cutrain_logsoftmax_rows(logp ? logp + t0 : NULL, ent ? ent + t0 : NULL, lse + t0, logits, tgt + t0, rows, V,
                               temp, lp16 ? lp16 + (size_t)t0 * V : NULL, s);
  }
}

extern "C" void vr_cutrain_lmhead_bwd(vr_cuda_gemm_t *g, float *dx, float *dW, const float *glp, const float *gent,
                                      const float *lse, const float *ent, const uint16_t *x, const uint16_t *W,
                                      const int32_t *tgt, int T, int C, int V, float temp, int chunk, float *logits,
                                      uint16_t *dlogits, uint16_t *lp16, cudaStream_t s) {
  VR_ASSERT(chunk > 0);
  if (lp16) {
    /* the stored log-softmax becomes dlogits in place (each element read, then written by the
     * same thread), then the two GEMMs over all T rows at once: the (V, C) fp32 dW is read and
     * written once instead of once per chunk, and the GEMMs are T rows tall */
    vr_cutrain_dlogits_rows(lp16, NULL, lp16, glp, gent, lse, ent, tgt, T, V, temp, s);
    vr_cuda_gemm_op(g, VR_CUDA_OP_N, VR_CUDA_OP_N, dx, 1, lp16, W, NULL, 0, NULL, T, C, V, 0.f, s);
    vr_cuda_gemm_op(g, VR_CUDA_OP_T, VR_CUDA_OP_N, dW, 1, lp16, x, NULL, 0, NULL, V, C, T, 1.f, s);
    return;
  }
  for (int t0 = 0; t0 < T; t0 += chunk) {
    const int rows = T - t0 < chunk ? T - t0 : chunk;
    const uint16_t *xc = x + (size_t)t0 * C;
    vr_cuda_gemm(g, logits, 1, xc, W, NULL, rows, V, C, 0.f, s); /* recomputed */
    vr_cutrain_dlogits_rows(dlogits, logits, NULL, glp + t0, gent ? gent + t0 : NULL, lse + t0, ent + t0, tgt + t0,
                            rows, V, temp, s);
    /* dx (rows, C) = dlogits (rows, V) . W (V, C) */
    vr_cuda_gemm_op(g, VR_CUDA_OP_N, VR_CUDA_OP_N, dx + (size_t)t0 * C, 1, dlogits, W, NULL, 0, NULL, rows, C, V, 0.f,
                    s);
    /* dW (V, C) += dlogits^T (V, rows) . x (rows, C) */
    vr_cuda_gemm_op(g, VR_CUDA_OP_T, VR_CUDA_OP_N, dW, 1, dlogits, xc, NULL, 0, NULL, V, C, rows, 1.f, s);
  }
}
