/* vr_cutrain_lmhead.cu: the fused LM head + log-softmax at a temperature (log p of the
 * targets, entropy) and its backward, chunked over tokens so that at most (chunk, V) logits
 * exist at once; on Hopper the forward is one GEMM with the statistics in its epilogue
 * (vr_cutrain_lmhead_sm90.cuh) and no logits at all. Contracts in vr_cutrain_ops.h. */
#include <math.h>
#include <string.h>

#include "vr_cuda_common.cuh"
#include "vr_cutrain_ops.h"
#include "vr_cutrain_lmhead_sm90.cuh"

#define LSM_THREADS 512

/* ---------------------------------------------------------------- kernels */

/* Softmax statistics of a set of z: max m, s = sum e^(z - m), w = sum e^(z - m) z. */
struct lsm_acc {
  float m, s, w;
};

__device__ __forceinline__ lsm_acc lsm_merge(lsm_acc a, lsm_acc b) {
  if (b.m == -INFINITY) return a;
  if (a.m == -INFINITY) return b;
  const float m = fmaxf(a.m, b.m), ra = __expf(a.m - m), rb = __expf(b.m - m);
  lsm_acc o = {m, a.s * ra + b.s * rb, a.w * ra + b.w * rb};
  return o;
}

/* One block per row: lse, ent, logp of z = logits * inv_temp, read once. The row is taken in
 * segments of VR_CUTRAIN_LSM_SEG (128) elements, one per warp and iteration (float4 per lane
 * when V % 4 == 0, else 4 strided elements), the next segment's loads issued before this one's
 * arithmetic; the segment's max m_s (a warp max) keeps the warp's running statistics uniform
 * across its lanes. lp16 (row pitch V) non-NULL: bf16(z - m_s) of every element and m_s into
 * lpmax (row pitch vr_cutrain_lsm_segs(V)) in the same pass: since z <= m_s <= max z <= lse,
 * |z - m_s| <= |z - lse| = |log p|, so the bf16 rounding errs by at most |log p| 2^-8 as a
 * stored bf16(z - lse) would, and the row is not read a second time. */
template <int V4>
__global__ void __launch_bounds__(LSM_THREADS)
    k_logsoftmax_rows(float *logp, float *ent, float *lse, const float *logits, const int32_t *tgt, int V,
                      float inv_temp, uint16_t *lp16, float *lpmax) {
  __shared__ lsm_acc red[LSM_THREADS / 32];
  const size_t r = blockIdx.x;
  const float *lr = logits + r * V;
  const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5, nw = (int)blockDim.x >> 5;
  const int nseg = (V + VR_CUTRAIN_LSM_SEG - 1) / VR_CUTRAIN_LSM_SEG;
  uint16_t *o = lp16 ? lp16 + r * V : NULL;
  float *om = lp16 ? lpmax + r * (size_t)nseg : NULL;
  /* lane's elements of segment sg: V4 4 sg 32 + 4 lane + e, else 128 sg + lane + 32 e */
  auto load = [&](int sg, float (&z)[4]) {
    if (sg >= nseg) return;
    if (V4) {
      const int i = sg * 32 + lane;
      if (4 * i < V) {
        const float4 v = reinterpret_cast<const float4 *>(lr)[i];
        z[0] = v.x, z[1] = v.y, z[2] = v.z, z[3] = v.w;
      } else {
        z[0] = z[1] = z[2] = z[3] = -INFINITY;
      }
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = sg * VR_CUTRAIN_LSM_SEG + lane + 32 * e;
        z[e] = j < V ? lr[j] : -INFINITY;
      }
    }
  };
  float m = -INFINITY, s = 0.f, w = 0.f; /* m: the same in every lane of the warp */
  float nx[4];
  load(warp, nx);
  for (int sg = warp; sg < nseg; sg += nw) {
    float z[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) z[e] = nx[e] * inv_temp; /* -inf stays -inf */
    load(sg + nw, nx);
    float mx = fmaxf(fmaxf(z[0], z[1]), fmaxf(z[2], z[3]));
    for (int k = 16; k > 0; k >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, k));
    /* mx is finite: the segment's first element exists */
    const float mn = fmaxf(m, mx), rs = __expf(m - mn); /* m = -inf: rs = 0 */
    s *= rs, w *= rs;
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (z[e] != -INFINITY) {
        const float ex = __expf(z[e] - mn);
        s += ex, w = fmaf(ex, z[e], w);
      }
    m = mn;
    if (o) {
      if (V4) {
        const int i = sg * 32 + lane;
        if (4 * i < V) {
          const uint16_t q[4] = {to_bf(z[0] - mx), to_bf(z[1] - mx), to_bf(z[2] - mx), to_bf(z[3] - mx)};
          *reinterpret_cast<uint2 *>(o + 4 * i) = *reinterpret_cast<const uint2 *>(q);
        }
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = sg * VR_CUTRAIN_LSM_SEG + lane + 32 * e;
          if (j < V) o[j] = to_bf(z[e] - mx);
        }
      }
      if (lane == 0) om[sg] = mx;
    }
  }
  for (int k = 16; k > 0; k >>= 1) {
    s += __shfl_xor_sync(0xffffffffu, s, k);
    w += __shfl_xor_sync(0xffffffffu, w, k);
  }
  if (lane == 0) {
    const lsm_acc a = {m, s, w};
    red[warp] = a;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    lsm_acc t = red[0];
    for (int k = 1; k < nw; ++k) t = lsm_merge(t, red[k]);
    const float l = t.m + logf(t.s);
    lse[r] = l;
    if (ent) ent[r] = l - t.w / t.s;
    if (logp) {
      const int y = tgt[r];
      logp[r] = y >= 0 ? lr[y] * inv_temp - l : 0.f;
    }
  }
}

/* One warp per row: lse, ent, logp from the fused forward's per-tile statistics (k_lmhead_sm90):
 * lane l merges tiles l, l + 32, ... in order, then the lanes merge in a fixed butterfly
 * (lsm_merge is commutative bit for bit: every lane ends with the same sums). */
__global__ void k_lmhead_combine(float *logp, float *ent, float *lse, const float4 *stats, const float *zt,
                                 const int32_t *tgt, int rows, int NB) {
  const int r = (int)(blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)), lane = (int)threadIdx.x & 31;
  if (r >= rows) return;
  lsm_acc a = {-INFINITY, 0.f, 0.f};
  for (int i = lane; i < NB; i += 32) {
    const float4 q = stats[(size_t)r * NB + i];
    const lsm_acc b = {q.x, q.y, q.z};
    a = lsm_merge(a, b);
  }
  for (int k = 16; k > 0; k >>= 1) {
    const lsm_acc b = {__shfl_xor_sync(0xffffffffu, a.m, k), __shfl_xor_sync(0xffffffffu, a.s, k),
                       __shfl_xor_sync(0xffffffffu, a.w, k)};
    a = lsm_merge(a, b);
  }
  if (lane == 0) {
    const float l = a.m + logf(a.s);
    lse[r] = l;
    if (ent) ent[r] = l - a.w / a.s;
    if (logp) {
      const int y = tgt[r];
      logp[r] = y >= 0 ? zt[r] - l : 0.f;
    }
  }
}

/* dlogits[r, j] = bf16(inv_temp * (glp (j == y) - p_j (glp + gent (log p_j + ent)))),
 * log p_j = z_j - lse, or from the stored log-softmax (LP16; logits unused):
 * log p_j = lp16[r, j] + lpmax[r, j / 128] - lse. A block per row (rows strided over the grid),
 * the row's scalars read once; its threads take W = 4 elements (V % 4 == 0) or 1 at a time, four
 * such loads in flight before their arithmetic. In place (dl == lp16): every element is read and
 * then written by the same thread. */
#define DL_THREADS 256
#define DL_UNROLL 4
template <int V4, int LP16>
__global__ void __launch_bounds__(DL_THREADS)
    k_dlogits_rows(uint16_t *dl, const float *logits, const uint16_t *lp16, const float *lpmax, const float *glp,
                   const float *gent, const float *lse, const float *ent, const int32_t *tgt, int rows, int V,
                   float inv_temp) {
  const int W = V4 ? 4 : 1, vpr = V / W, nseg = (V + VR_CUTRAIN_LSM_SEG - 1) / VR_CUTRAIN_LSM_SEG;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const int y = tgt[r];
    const float gl = y >= 0 ? glp[r] : 0.f, ge = gent ? gent[r] : 0.f, l = lse[r], h = ent ? ent[r] : 0.f;
    const size_t base = (size_t)r * V;
    for (int i0 = threadIdx.x; i0 < vpr; i0 += DL_UNROLL * DL_THREADS) {
      float v[DL_UNROLL][4]; /* log p */
#pragma unroll
      for (int u = 0; u < DL_UNROLL; ++u) {
        const int i = i0 + u * DL_THREADS, j0 = i * W;
        if (i >= vpr) continue;
        if (LP16) {
          /* the segment's offset: all W elements share it (j0 % 4 == 0 when W == 4) */
          const float off = lpmax[(size_t)r * nseg + j0 / VR_CUTRAIN_LSM_SEG] - l;
          if (V4) {
            const uint2 q = *reinterpret_cast<const uint2 *>(lp16 + base + j0);
            const uint16_t *h4 = reinterpret_cast<const uint16_t *>(&q);
            v[u][0] = bf(h4[0]) + off, v[u][1] = bf(h4[1]) + off, v[u][2] = bf(h4[2]) + off,
            v[u][3] = bf(h4[3]) + off;
          } else {
            v[u][0] = bf(lp16[base + j0]) + off;
          }
        } else if (V4) {
          const float4 q = *reinterpret_cast<const float4 *>(logits + base + j0);
          v[u][0] = q.x * inv_temp - l, v[u][1] = q.y * inv_temp - l, v[u][2] = q.z * inv_temp - l,
          v[u][3] = q.w * inv_temp - l;
        } else {
          v[u][0] = logits[base + j0] * inv_temp - l;
        }
      }
#pragma unroll
      for (int u = 0; u < DL_UNROLL; ++u) {
        const int i = i0 + u * DL_THREADS, j0 = i * W;
        if (i >= vpr) continue;
        uint16_t o[4];
#pragma unroll
        for (int e = 0; e < W; ++e) {
          const float lp = v[u][e], p = __expf(lp);
          const float dz = (j0 + e == y ? gl : 0.f) - p * (gl + ge * (lp + h));
          o[e] = to_bf(dz * inv_temp);
        }
        if (V4)
          *reinterpret_cast<uint2 *>(dl + base + j0) = *reinterpret_cast<const uint2 *>(o);
        else
          dl[base + j0] = o[0];
      }
    }
  }
}

/* -------------------------------------------------------------- launchers */

extern "C" void vr_cutrain_logsoftmax_rows(float *logp, float *ent, float *lse, const float *logits, const int32_t *tgt,
                                           int rows, int V, float temp, uint16_t *lp16, float *lpmax, cudaStream_t s) {
  if (rows <= 0) return;
  VR_ASSERT(!lp16 || lpmax);
  if (V % 4 == 0)
    k_logsoftmax_rows<1><<<rows, LSM_THREADS, 0, s>>>(logp, ent, lse, logits, tgt, V, 1.f / temp, lp16, lpmax);
  else
    k_logsoftmax_rows<0><<<rows, LSM_THREADS, 0, s>>>(logp, ent, lse, logits, tgt, V, 1.f / temp, lp16, lpmax);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cutrain_dlogits_rows(uint16_t *dlogits, const float *logits, const uint16_t *lp16,
                                        const float *lpmax, const float *glp, const float *gent, const float *lse,
                                        const float *ent, const int32_t *tgt, int rows, int V, float temp,
                                        cudaStream_t s) {
  const size_t n = (size_t)rows * V;
  if (n == 0) return;
  VR_ASSERT(!lp16 || lpmax);
  const float it = 1.f / temp;
  const unsigned g = (unsigned)(rows < 8192 ? rows : 8192);
  if (V % 4 == 0 && lp16)
    k_dlogits_rows<1, 1><<<g, DL_THREADS, 0, s>>>(dlogits, logits, lp16, lpmax, glp, gent, lse, ent, tgt, rows, V, it);
  else if (V % 4 == 0)
    k_dlogits_rows<1, 0><<<g, DL_THREADS, 0, s>>>(dlogits, logits, lp16, lpmax, glp, gent, lse, ent, tgt, rows, V, it);
  else if (lp16)
    k_dlogits_rows<0, 1><<<g, DL_THREADS, 0, s>>>(dlogits, logits, lp16, lpmax, glp, gent, lse, ent, tgt, rows, V, it);
  else
    k_dlogits_rows<0, 0><<<g, DL_THREADS, 0, s>>>(dlogits, logits, lp16, lpmax, glp, gent, lse, ent, tgt, rows, V, it);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" int vr_cutrain_lmhead_fused_available(int C, int V) {
#ifdef VR_CUTRAIN_HAVE_SM90
  if (C < LH_BK || C % LH_BK || V < 1) return 0;
  return vr_sm90_current_device();
#else
  (void)C, (void)V;
  return 0;
#endif
}

#ifdef VR_CUTRAIN_HAVE_SM90
/* Clusters of two blocks of k_lmhead_sm90<LH_PP2> the current device holds at once (cached per
 * device; 0 when the query fails: then the pair form is not used). */
static int lmhead_pair_clusters(void) {
  static int cache[64];
  const int dev = vr_cuda_current_device_(), di = dev >= 0 && dev < 64 ? dev : 0;
  if (cache[di]) return cache[di] - 1;
  int n = 0;
  cudaLaunchConfig_t lc = {};
  cudaLaunchAttribute at;
  lc.gridDim = dim3(2);
  lc.blockDim = dim3(LH_THREADS);
  lc.dynamicSmemBytes = lh_form<LH_PP2>::SMEM;
  at.id = cudaLaunchAttributeClusterDimension;
  at.val.clusterDim.x = 2, at.val.clusterDim.y = 1, at.val.clusterDim.z = 1;
  lc.attrs = &at, lc.numAttrs = 1;
  if (cudaFuncSetAttribute(k_lmhead_sm90<LH_PP2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           (int)lh_form<LH_PP2>::SMEM) != cudaSuccess ||
      cudaOccupancyMaxActiveClusters(&n, k_lmhead_sm90<LH_PP2>, &lc) != cudaSuccess)
    n = 0;
  (void)cudaGetLastError();
  cache[di] = n + 1;
  return n;
}

/* The fused forward over rows [0, T) in launches of as many rows as the workspace holds
 * (ws_floats: the (rows, NB) float4 statistics and the (rows) target z of one launch), in the
 * form FORM (lh_form). 0, or -1 when the workspace holds fewer rows than a tile, a tensor map is
 * refused or the device holds no cluster of the pair form (nothing launched). */
template <int FORM>
static int lmhead_fwd_fused(float *logp, float *ent, float *lse, const uint16_t *x, const uint16_t *W,
                            const int32_t *tgt, int T, int C, int V, float temp, float *ws, size_t ws_floats,
                            uint16_t *lp16, float *lpmax, cudaStream_t s) {
  using F = lh_form<FORM>;
  const int NB = (V + LH_BN - 1) / LH_BN, nseg = vr_cutrain_lsm_segs(V);
  size_t cap = ws_floats / (4 * (size_t)NB + 1);
  if (cap < (size_t)T) cap -= cap % F::BM;
  if (cap < (size_t)F::BM && cap < (size_t)T) return -1;
  const int R = cap < (size_t)T ? (int)cap : T;
  if (((uintptr_t)x | (uintptr_t)W) % 16) return -1;
  const int clusters = F::CL > 1 ? lmhead_pair_clusters() : 0;
  if (F::CL > 1 && clusters < 1) return -1;
  CUtensorMap tw; /* the pair form's blocks load half of a stage's W rows each */
  if (vr_sm90_tensor_map(&tw, W, C, V, C, LH_BK, LH_BN / F::CL)) return -1;
  float4 *stats = reinterpret_cast<float4 *>(ws);
  float *zt = ws + (size_t)R * NB * 4;
  static g90_launch_cache cache;
  for (int t0 = 0; t0 < T; t0 += R) {
    const int rows = T - t0 < R ? T - t0 : R;
    CUtensorMap tx, tl;
    if (vr_sm90_tensor_map(&tx, x + (size_t)t0 * C, C, rows, C, LH_BK, F::BM)) return -1;
    memset(&tl, 0, sizeof tl);
    /* lp16 through bulk tensor stores where its rows are 16-byte multiples */
    const int tma_lp = lp16 && V % 8 == 0 && ((uintptr_t)lp16 % 16) == 0 &&
                       vr_sm90_tensor_map(&tl, lp16 + (size_t)t0 * V, V, rows, V, 64, 64) == 0;
    lh_params p;
    p.lp16 = lp16 ? lp16 + (size_t)t0 * V : NULL;
    p.lpmax = lp16 ? lpmax + (size_t)t0 * nseg : NULL;
    p.stats = stats, p.zt = zt, p.tgt = tgt + t0;
    /* MB: row blocks, or in the pair form pairs of them (a pair's second block may lie past the
     * rows: its x box comes in as zeros and its epilogue writes nothing) */
    const int MB = (rows + F::BM - 1) / F::BM;
    p.T = rows, p.V = V, p.nk = C / LH_BK, p.MB = (MB + F::CL - 1) / F::CL, p.NB = NB;
    p.GM = g90_band_rows(C, p.MB, F::BM * F::CL), p.nseg = nseg, p.tiles = p.MB * NB, p.inv_temp = 1.f / temp;
    p.tma_lp = tma_lp;
    if (F::CL > 1) { /* its shared-memory attribute set by lmhead_pair_clusters */
      cudaLaunchConfig_t lc = {};
      cudaLaunchAttribute at;
      lc.gridDim = dim3((unsigned)(F::CL * (p.tiles < clusters ? p.tiles : clusters)));
      lc.blockDim = dim3(LH_THREADS);
      lc.dynamicSmemBytes = F::SMEM;
      lc.stream = s;
      at.id = cudaLaunchAttributeClusterDimension;
      at.val.clusterDim.x = F::CL, at.val.clusterDim.y = 1, at.val.clusterDim.z = 1;
      lc.attrs = &at, lc.numAttrs = 1;
      VR_CUDA_CHECK(cudaLaunchKernelEx(&lc, k_lmhead_sm90<FORM>, tx, tw, tl, p));
    } else {
      const int grid = g90_grid((const void *)k_lmhead_sm90<FORM>, F::SMEM, cache, p.tiles);
      k_lmhead_sm90<FORM><<<grid, LH_THREADS, F::SMEM, s>>>(tx, tw, tl, p);
    }
    VR_CUDA_CHECK_LAUNCH();
    k_lmhead_combine<<<(rows + 7) / 8, 256, 0, s>>>(logp ? logp + t0 : NULL, ent ? ent + t0 : NULL, lse + t0, stats,
                                                    zt, tgt + t0, rows, NB);
    VR_CUDA_CHECK_LAUNCH();
  }
  return 0;
}
#endif

extern "C" int vr_cutrain_lmhead_fwd(vr_cuda_gemm_t *g, float *logp, float *ent, float *lse, const uint16_t *x,
                                     const uint16_t *W, const int32_t *tgt, int T, int C, int V, float temp, int chunk,
                                     float *logits, uint16_t *lp16, float *lpmax, int fused, cudaStream_t s) {
  VR_ASSERT(chunk > 0 && lse);
  VR_ASSERT(!lp16 || lpmax);
#ifdef VR_CUTRAIN_HAVE_SM90
  if (T <= 0) return fused && vr_cutrain_lmhead_fused_available(C, V) ? fused : 0;
  if (fused && vr_cutrain_lmhead_fused_available(C, V)) {
    const size_t wsf = (size_t)chunk * V;
    if (fused == VR_CUTRAIN_LMHEAD_FORM_PP2 &&
        lmhead_fwd_fused<LH_PP2>(logp, ent, lse, x, W, tgt, T, C, V, temp, logits, wsf, lp16, lpmax, s) == 0)
      return VR_CUTRAIN_LMHEAD_FORM_PP2;
    if (fused != VR_CUTRAIN_LMHEAD_FORM_COOP && /* also the pair form's fallback */
        lmhead_fwd_fused<LH_PP>(logp, ent, lse, x, W, tgt, T, C, V, temp, logits, wsf, lp16, lpmax, s) == 0)
      return VR_CUTRAIN_LMHEAD_FORM_PP;
    if (lmhead_fwd_fused<LH_COOP>(logp, ent, lse, x, W, tgt, T, C, V, temp, logits, wsf, lp16, lpmax, s) == 0)
      return VR_CUTRAIN_LMHEAD_FORM_COOP;
  }
#else
  (void)fused;
#endif
  for (int t0 = 0; t0 < T; t0 += chunk) {
    const int rows = T - t0 < chunk ? T - t0 : chunk;
    vr_cuda_gemm(g, logits, 1, x + (size_t)t0 * C, W, NULL, rows, V, C, 0.f, s); /* (rows, V) */
    vr_cutrain_logsoftmax_rows(logp ? logp + t0 : NULL, ent ? ent + t0 : NULL, lse + t0, logits, tgt + t0, rows, V,
                               temp, lp16 ? lp16 + (size_t)t0 * V : NULL,
                               lp16 ? lpmax + (size_t)t0 * vr_cutrain_lsm_segs(V) : NULL, s);
  }
  return 0;
}

extern "C" void vr_cutrain_lmhead_bwd(vr_cuda_gemm_t *g, float *dx, float *dW, const float *glp, const float *gent,
                                      const float *lse, const float *ent, const uint16_t *x, const uint16_t *W,
                                      const int32_t *tgt, int T, int C, int V, float temp, int chunk, float *logits,
                                      uint16_t *dlogits, uint16_t *lp16, const float *lpmax, float dw_beta,
                                      cudaStream_t s) {
  VR_ASSERT(chunk > 0);
  if (lp16) {
    /* the stored log-softmax becomes dlogits in place (each element read, then written by the
     * same thread), then the two GEMMs over all T rows at once: the (V, C) fp32 dW is read and
     * written once instead of once per chunk, and the GEMMs are T rows tall */
    vr_cutrain_dlogits_rows(lp16, NULL, lp16, lpmax, glp, gent, lse, ent, tgt, T, V, temp, s);
    vr_cuda_gemm_op(g, VR_CUDA_OP_N, VR_CUDA_OP_N, dx, 1, lp16, W, NULL, 0, NULL, T, C, V, 0.f, s);
    vr_cuda_gemm_op(g, VR_CUDA_OP_T, VR_CUDA_OP_N, dW, 1, lp16, x, NULL, 0, NULL, V, C, T, dw_beta, s);
    return;
  }
  for (int t0 = 0; t0 < T; t0 += chunk) {
    const int rows = T - t0 < chunk ? T - t0 : chunk;
    const uint16_t *xc = x + (size_t)t0 * C;
    vr_cuda_gemm(g, logits, 1, xc, W, NULL, rows, V, C, 0.f, s); /* recomputed */
    vr_cutrain_dlogits_rows(dlogits, logits, NULL, NULL, glp + t0, gent ? gent + t0 : NULL, lse + t0, ent + t0,
                            tgt + t0, rows, V, temp, s);
    /* dx (rows, C) = dlogits (rows, V) . W (V, C) */
    vr_cuda_gemm_op(g, VR_CUDA_OP_N, VR_CUDA_OP_N, dx + (size_t)t0 * C, 1, dlogits, W, NULL, 0, NULL, rows, C, V, 0.f,
                    s);
    /* dW (V, C) += dlogits^T (V, rows) . x (rows, C) */
    vr_cuda_gemm_op(g, VR_CUDA_OP_T, VR_CUDA_OP_N, dW, 1, dlogits, xc, NULL, 0, NULL, V, C, rows,
                    t0 ? 1.f : dw_beta, s);
  }
}
