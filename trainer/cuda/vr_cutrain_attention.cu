/* vr_cutrain_attention.cu: the backward of variable-length causal attention with GQA,
 * FlashAttention-2 style: P is recomputed from the forward's saved logsumexp
 * (vr_cuda_attention_lse), never stored. Contracts in vr_cutrain_ops.h.
 *
 * On 64-row tiles (seq, t0) of the same tile list:
 *   k_attn_delta (k_attn_delta8: 16-byte loads at D 64 / 128): delta[t, h] = sum_d dout[t, h, d] * o[t, h, d];
 *   k_bwd_dkdv_mma (vr_cutrain_attention_mma.cuh): a block owns a 64-key tile of one key head;
 *     it loops over the query heads of the head's group and the query tiles at or after its
 *     keys, recomputing S^T = K Q^T, P^T, dP^T = V dO^T, dS^T = P^T (dP^T - delta); dV += P^T dO
 *     and dK += dS^T Q stay in registers (one sum per key head: GQA without atomics); with few
 *     key heads (split) a block per query head instead (or per 2 query heads: bwd_params.np),
 *     its fp32 dK / dV into a (T, Hkv np, 2 D) table that k_attn_dkdv_reduce sums over each
 *     group in part order (still no atomics: deterministic);
 *   k_bwd_dq_mma: a block owns a 64-query tile of one head and loops over its key tiles:
 *     S, P, dP, dS again, dQ += dS K.
 * mma.sync m16n8k16 bf16 with fp32 accumulation, P and dS as A fragments in registers (bf16);
 * on Hopper the same two kernels on wgmma with TMA-fed shared memory instead
 * (vr_cutrain_attention_sm90.cuh: k_bwd_dkdv_wg, k_bwd_dq_wg), by vr_cutrain_attention_bwd_kernel's rule.
 * Scores in the log2 domain: P = 2^(scale log2(e) q.k - lse2).
 *
 * Head dims other than 64 / 128 and sliding windows take the generic path (one warp per row,
 * fp32; with a generic forward that saves lse for the head dims the tensor-core forward lacks). */
#include <algorithm>

/* the mma.sync wrappers; its host helper for the forward's parameters is unused here */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "vr_cuda_attention_fa.cuh"
#pragma GCC diagnostic pop
#include "vr_cuda_common.cuh"
#include "vr_cuda_sm90.cuh"
#include "vr_cutrain_ops.h"

#define ABM 64 /* rows of every tile */

namespace {

struct bwd_params {
  const bf16 *qkv, *o, *dout;
  const float *lse;
  float *delta;
  bf16 *dqkv;
  float *part; /* split dK / dV: (T, Hkv np, 2 D) fp32 per part of a query group, or NULL (one block per key head) */
  const int32_t *cu, *tiles, *tiles_q; /* the dK/dV kernels' tile order, the dQ kernels' */
  int ld, q_off, k_off, v_off, ld_o, H, Hkv;
  int np; /* with part: the parts of each query group (G: one a query head; fewer: a smaller table) */
  float scale, scale_log2;
};

/* One warp per (row t, head h): delta = sum_d dout * o. */
__global__ void k_attn_delta(bwd_params p, int T, int D) {
  const size_t w = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (w >= (size_t)T * p.H) return;
  const size_t t = w / p.H;
  const int h = (int)(w - t * p.H);
  const bf16 *o = p.o + t * p.ld_o + h * D, *d = p.dout + t * p.ld_o + h * D;
  float a = 0.f;
  for (int c = lane; c < D; c += 32) a += __bfloat162float(o[c]) * __bfloat162float(d[c]);
  for (int k = 16; k > 0; k >>= 1) a += __shfl_xor_sync(0xffffffffu, a, k);
  if (lane == 0) p.delta[w] = a;
}

/* The same with 16-byte loads: G = D / 8 lanes per (t, h), the products summed over the G lanes
 * (rows of pitch ld_o % 8 == 0 and 16-byte aligned o, dout; D 64 or 128): one 128-byte line of
 * each tensor per 8 lanes where the warp-per-row form issued 2-byte loads. */
template <int G>
__global__ void k_attn_delta8(bwd_params p, int T) {
  const size_t gid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, w = gid / G;
  const int sub = (int)(gid % G);
  float a = 0.f;
  if (w < (size_t)T * p.H) {
    const size_t t = w / p.H;
    const int h = (int)(w - t * p.H);
    const size_t at = t * p.ld_o + (size_t)h * (G * 8) + (size_t)sub * 8;
    const uint4 ov = *reinterpret_cast<const uint4 *>(p.o + at), dv = *reinterpret_cast<const uint4 *>(p.dout + at);
    const __nv_bfloat162 *o2 = reinterpret_cast<const __nv_bfloat162 *>(&ov),
                         *d2 = reinterpret_cast<const __nv_bfloat162 *>(&dv);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 of = __bfloat1622float2(o2[k]), df = __bfloat1622float2(d2[k]);
      a = fmaf(of.x, df.x, a);
      a = fmaf(of.y, df.y, a);
    }
  }
  for (int k = G / 2; k > 0; k >>= 1) a += __shfl_xor_sync(0xffffffffu, a, k); /* within the G-lane group */
  if (w < (size_t)T * p.H && sub == 0) p.delta[w] = a;
}

/* The split table's group sums: dqkv[t, k / v of key head hk] = bf16(sum over j in order of
 * part[t, hk np + j, :]); one thread per (t, hk) and W consecutive c < 2 D: W 4 (ld, k_off, v_off
 * multiples of 4, as the tensor-core paths assert, part 16-byte and dqkv 8-byte aligned) with
 * float4 reads and one 8-byte store, else W 1. The same sums in the same order either way (the
 * same bits). */
template <int W>
__global__ void k_attn_dkdv_reduce(bwd_params p, int T, int D) {
  const int G = 2 * D / W; /* column groups of a key head */
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, w = (size_t)p.Hkv * G;
  if (i >= (size_t)T * w) return;
  const size_t t = i / w;
  const int rest = (int)(i - t * w), hk = rest / G, c = W * (rest - hk * G), np = p.np;
  const float *src = p.part + (t * p.Hkv * np + (size_t)hk * np) * 2 * D + c;
  float a[W];
#pragma unroll
  for (int k = 0; k < W; ++k) a[k] = 0.f;
  for (int j = 0; j < np; ++j) {
    const float *r = src + (size_t)j * 2 * D;
    if constexpr (W == 4) {
      const float4 v = *reinterpret_cast<const float4 *>(r);
      a[0] += v.x, a[1] += v.y, a[2] += v.z, a[3] += v.w;
    } else {
      a[0] += r[0];
    }
  }
  const int col = c < D ? p.k_off + hk * D + c : p.v_off + hk * D + (c - D);
  bf16 *dst = p.dqkv + t * p.ld + col;
  if constexpr (W == 4) {
    uint2 u;
    u.x = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(a[0])) |
          (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(a[1])) << 16;
    u.y = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(a[2])) |
          (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(a[3])) << 16;
    *reinterpret_cast<uint2 *>(dst) = u;
  } else {
    dst[0] = __float2bfloat16_rn(a[0]);
  }
}

/* ---- generic path: any D <= 256, sliding windows (small models, the tests' fixtures) ----
 * One warp per row, lanes own dims lane + 32 k (k < GDPL), fp32 throughout; blocks of 8 warps
 * over a 64-row tile of one head (forward, dQ) or key head (dK, dV). Keys j of query i:
 * j <= i and, with window > 0, i - j < window. */
#define GNW 8
#define GDPL 8

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ void load_row(float (&r)[GDPL], const bf16 *src, int D) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int k = 0; k < GDPL; ++k) r[k] = lane + 32 * k < D ? __bfloat162float(src[lane + 32 * k]) : 0.f;
}

__device__ __forceinline__ float dot_row(const float (&a)[GDPL], const bf16 *b, int D) {
  const int lane = threadIdx.x & 31;
  float d = 0.f;
#pragma unroll
  for (int k = 0; k < GDPL; ++k)
    if (lane + 32 * k < D) d += a[k] * __bfloat162float(b[lane + 32 * k]);
  return warp_sum(d);
}

__device__ __forceinline__ void store_row(bf16 *dst, const float (&r)[GDPL], float mul, int D) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int k = 0; k < GDPL; ++k)
    if (lane + 32 * k < D) dst[lane + 32 * k] = __float2bfloat16_rn(r[k] * mul);
}

/* Grid (n_tiles, H): o, lse of the tile's query rows. */
__global__ void __launch_bounds__(GNW * 32) k_attn_fwd_generic(bwd_params p, bf16 *o, float *lse, int D, int window) {
  const int seq = p.tiles[2 * blockIdx.x], t0 = p.tiles[2 * blockIdx.x + 1], h = blockIdx.y;
  const int hk = h / (p.H / p.Hkv), len = p.cu[seq + 1] - p.cu[seq];
  const size_t s0 = (size_t)p.cu[seq];
  for (int i = t0 + (threadIdx.x >> 5); i < min(len, t0 + ABM); i += GNW) {
    float q[GDPL], acc[GDPL];
    load_row(q, p.qkv + (s0 + i) * p.ld + p.q_off + h * D, D);
#pragma unroll
    for (int k = 0; k < GDPL; ++k) acc[k] = 0.f;
    float m = -INFINITY, l = 0.f;
    for (int j = window > 0 ? max(0, i - window + 1) : 0; j <= i; ++j) {
      const size_t rj = (s0 + j) * p.ld;
      const float sc = dot_row(q, p.qkv + rj + p.k_off + hk * D, D) * p.scale_log2;
      const float mn = fmaxf(m, sc), corr = exp2f(m - mn), e = exp2f(sc - mn);
      float v[GDPL];
      load_row(v, p.qkv + rj + p.v_off + hk * D, D);
#pragma unroll
      for (int k = 0; k < GDPL; ++k) acc[k] = acc[k] * corr + e * v[k];
      l = l * corr + e;
      m = mn;
    }
    store_row(o + (s0 + i) * p.ld_o + h * D, acc, 1.f / l, D);
    if ((threadIdx.x & 31) == 0) lse[(s0 + i) * p.H + h] = m + log2f(l);
  }
}

/* Grid (n_tiles, H): dQ of the tile's query rows. */
__global__ void __launch_bounds__(GNW * 32) k_attn_bwd_dq_generic(bwd_params p, int D, int window) {
  const int seq = p.tiles_q[2 * blockIdx.x], t0 = p.tiles_q[2 * blockIdx.x + 1], h = blockIdx.y;
  const int hk = h / (p.H / p.Hkv), len = p.cu[seq + 1] - p.cu[seq];
  const size_t s0 = (size_t)p.cu[seq];
  for (int i = t0 + (threadIdx.x >> 5); i < min(len, t0 + ABM); i += GNW) {
    float q[GDPL], go[GDPL], dq[GDPL];
    load_row(q, p.qkv + (s0 + i) * p.ld + p.q_off + h * D, D);
    load_row(go, p.dout + (s0 + i) * p.ld_o + h * D, D);
#pragma unroll
    for (int k = 0; k < GDPL; ++k) dq[k] = 0.f;
    const float lse = p.lse[(s0 + i) * p.H + h], del = p.delta[(s0 + i) * p.H + h];
    for (int j = window > 0 ? max(0, i - window + 1) : 0; j <= i; ++j) {
      const size_t rj = (s0 + j) * p.ld;
      const float pr = exp2f(dot_row(q, p.qkv + rj + p.k_off + hk * D, D) * p.scale_log2 - lse);
      const float ds = pr * (dot_row(go, p.qkv + rj + p.v_off + hk * D, D) - del);
      float k_[GDPL];
      load_row(k_, p.qkv + rj + p.k_off + hk * D, D);
#pragma unroll
      for (int k = 0; k < GDPL; ++k) dq[k] += ds * k_[k];
    }
    store_row(p.dqkv + (s0 + i) * p.ld + p.q_off + h * D, dq, p.scale, D);
  }
}

/* Grid (n_tiles, Hkv): dK, dV of the tile's key rows, summed over the key head's query group. */
__global__ void __launch_bounds__(GNW * 32) k_attn_bwd_dkdv_generic(bwd_params p, int D, int window) {
  const int seq = p.tiles[2 * blockIdx.x], t0 = p.tiles[2 * blockIdx.x + 1], hk = blockIdx.y, G = p.H / p.Hkv;
  const int len = p.cu[seq + 1] - p.cu[seq];
  const size_t s0 = (size_t)p.cu[seq];
  for (int j = t0 + (threadIdx.x >> 5); j < min(len, t0 + ABM); j += GNW) {
    float kr[GDPL], vr[GDPL], dk[GDPL], dv[GDPL];
    load_row(kr, p.qkv + (s0 + j) * p.ld + p.k_off + hk * D, D);
    load_row(vr, p.qkv + (s0 + j) * p.ld + p.v_off + hk * D, D);
#pragma unroll
    for (int k = 0; k < GDPL; ++k) dk[k] = dv[k] = 0.f;
    const int iend = window > 0 ? min(len, j + window) : len;
    for (int gi = 0; gi < G; ++gi) {
      const int h = hk * G + gi;
      for (int i = j; i < iend; ++i) {
        const size_t ri = s0 + i;
        const float pr =
            exp2f(dot_row(kr, p.qkv + ri * p.ld + p.q_off + h * D, D) * p.scale_log2 - p.lse[ri * p.H + h]);
        const float ds = pr * (dot_row(vr, p.dout + ri * p.ld_o + h * D, D) - p.delta[ri * p.H + h]);
        float q[GDPL], go[GDPL];
        load_row(q, p.qkv + ri * p.ld + p.q_off + h * D, D);
        load_row(go, p.dout + ri * p.ld_o + h * D, D);
#pragma unroll
        for (int k = 0; k < GDPL; ++k) dk[k] += ds * q[k], dv[k] += pr * go[k];
      }
    }
    store_row(p.dqkv + (s0 + j) * p.ld + p.k_off + hk * D, dk, p.scale, D);
    store_row(p.dqkv + (s0 + j) * p.ld + p.v_off + hk * D, dv, 1.f, D);
  }
}

#include "vr_cutrain_attention_mma.cuh"
#include "vr_cutrain_attention_sm90.cuh"

/* The wgmma kernels' launch attributes, once per device: their shared memory, and the largest
 * carveout (MINB blocks a multiprocessor need it). */
template <typename K>
void wg_attrs_once(K kernel, size_t bytes, int (&done)[64]) {
  const int dev = vr_cuda_current_device_();
  if (dev >= 0 && dev < 64 && done[dev]) return;
  VR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  set_smem_once(kernel, bytes, done);
}

/* The split table's group sums after the dK / dV kernel (p.part only). */
inline void launch_dkdv_reduce(const bwd_params &p, int T, int D, cudaStream_t s) {
  if (!p.part) return;
  const bool w4 = p.ld % 4 == 0 && p.k_off % 4 == 0 && p.v_off % 4 == 0 && ((uintptr_t)p.dqkv & 7) == 0 &&
                  ((uintptr_t)p.part & 15) == 0;
  const size_t n = (size_t)T * p.Hkv * 2 * D / (w4 ? 4 : 1);
  if (w4)
    k_attn_dkdv_reduce<4><<<(unsigned)((n + 255) / 256), 256, 0, s>>>(p, T, D);
  else
    k_attn_dkdv_reduce<1><<<(unsigned)((n + 255) / 256), 256, 0, s>>>(p, T, D);
  VR_CUDA_CHECK_LAUNCH();
}

/* One form of the wgmma kernels (tm: the tensor maps of qkv and dout): the dK / dV kernel with
 * register A (RKV), pipelined (PKV), co-issued S^T / dP^T (CO); the dQ kernel with RQ, PQ and
 * MQ blocks a multiprocessor (wg_bwd_cfg's MB). */
template <int D, bool RKV, bool PKV, bool CO, bool RQ, bool PQ, int MQ = 0>
void launch_wg(const bwd_params &p, dim3 g_kv, dim3 g_q, int T, const CUtensorMap *tm, cudaStream_t s) {
  const size_t wsh = wg_bwd_cfg<D>::SMEM, wsq = wg_bwd_cfg<D, MQ>::SMEM;
  static int set_kv[64], set_q[64];
  wg_attrs_once(k_bwd_dkdv_wg<D, RKV, PKV, CO>, wsh, set_kv);
  k_bwd_dkdv_wg<D, RKV, PKV, CO><<<g_kv, 128, wsh, s>>>(tm[0], tm[1], p);
  VR_CUDA_CHECK_LAUNCH();
  launch_dkdv_reduce(p, T, D, s);
  wg_attrs_once(k_bwd_dq_wg<D, RQ, PQ, MQ>, wsq, set_q);
  k_bwd_dq_wg<D, RQ, PQ, MQ><<<g_q, 128, wsq, s>>>(tm[0], tm[1], p);
  VR_CUDA_CHECK_LAUNCH();
}

/* The tensor-core backward at head dim D: the mma.sync kernels, or with tm (the tensor maps of
 * qkv and dout) the wgmma ones in form `kernel` (VR_CUTRAIN_ATTN_BWD_WGMMA*, vr_cutrain_ops.h;
 * register A operands where wg_bwd_ra says). */
template <int D>
void launch_bwd(const bwd_params &p, int n_tiles, int T, const CUtensorMap *tm, int kernel, cudaStream_t s) {
  const dim3 g_kv((unsigned)n_tiles, (unsigned)(p.part ? p.Hkv * p.np : p.Hkv)), g_q((unsigned)n_tiles, (unsigned)p.H);
  constexpr bool RKV = wg_bwd_ra<D>::kv, RQ = wg_bwd_ra<D>::q;
  if (tm) {
    switch (kernel) {
      case VR_CUTRAIN_ATTN_BWD_WGMMA: launch_wg<D, RKV, true, false, RQ, true>(p, g_kv, g_q, T, tm, s); break;
      case VR_CUTRAIN_ATTN_BWD_WGMMA_RA: launch_wg<D, RKV, false, false, RQ, false>(p, g_kv, g_q, T, tm, s); break;
      case VR_CUTRAIN_ATTN_BWD_WGMMA_CO: launch_wg<D, false, false, true, false, false>(p, g_kv, g_q, T, tm, s); break;
      case VR_CUTRAIN_ATTN_BWD_WGMMA_COP: launch_wg<D, RKV, true, true, RQ, true>(p, g_kv, g_q, T, tm, s); break;
      case VR_CUTRAIN_ATTN_BWD_WGMMA_CO4: /* D 128: as WGMMA_CO (4 blocks do not fit) */
      case VR_CUTRAIN_ATTN_BWD_WGMMA_CO4H: /* the same kernels; p.np set by the caller */
        launch_wg<D, false, false, true, false, false, D == 64 ? 4 : 0>(p, g_kv, g_q, T, tm, s);
        break;
      default: launch_wg<D, false, false, false, false, false>(p, g_kv, g_q, T, tm, s); break; /* WGMMA_SS */
    }
    return;
  }
  const size_t sh = mma_bwd_smem<D>::bytes;
  static int set_kv[64], set_q[64];
  set_smem_once(k_bwd_dkdv_mma<D>, sh, set_kv);
  set_smem_once(k_bwd_dq_mma<D>, sh, set_q);
  k_bwd_dkdv_mma<D><<<g_kv, 128, sh, s>>>(p);
  VR_CUDA_CHECK_LAUNCH();
  launch_dkdv_reduce(p, T, D, s);
  k_bwd_dq_mma<D><<<g_q, 128, sh, s>>>(p);
  VR_CUDA_CHECK_LAUNCH();
}

} /* namespace */

/* -------------------------------------------------------------- launchers */

static bwd_params params_make(uint16_t *dqkv, const uint16_t *qkv, int ld, int q_off, int k_off, int v_off,
                              const uint16_t *o, const uint16_t *dout, int ld_o, const float *lse, float *delta,
                              const int32_t *cu, const int32_t *tiles, const int32_t *tiles_q, int H, int Hkv,
                              float scale) {
  VR_ASSERT(H > 0 && Hkv > 0 && H % Hkv == 0);
  bwd_params p;
  p.qkv = reinterpret_cast<const bf16 *>(qkv), p.o = reinterpret_cast<const bf16 *>(o);
  p.dout = reinterpret_cast<const bf16 *>(dout), p.lse = lse, p.delta = delta, p.dqkv = reinterpret_cast<bf16 *>(dqkv);
  p.cu = cu, p.tiles = tiles, p.tiles_q = tiles_q ? tiles_q : tiles;
  p.ld = ld, p.q_off = q_off, p.k_off = k_off, p.v_off = v_off, p.ld_o = ld_o, p.H = H, p.Hkv = Hkv;
  p.scale = scale, p.scale_log2 = scale * 1.4426950408889634f;
  p.part = NULL, p.np = H / Hkv;
  return p;
}

extern "C" int vr_cutrain_attention_bwd_tc(int D, int window) { return (D == 64 || D == 128) && window <= 0; }

extern "C" int vr_cutrain_attention_bwd_wgmma_ok(int D, int window) {
#ifdef VR_CUTRAIN_HAVE_SM90
  if (!vr_cutrain_attention_bwd_tc(D, window)) return 0;
  return vr_sm90_current_device();
#else
  (void)D, (void)window;
  return 0;
#endif
}

extern "C" int vr_cutrain_attention_bwd_kernel(int D, int window) {
  if (!vr_cutrain_attention_bwd_tc(D, window)) return VR_CUTRAIN_ATTN_BWD_GENERIC;
  return vr_cutrain_attention_bwd_wgmma_ok(D, window) ? VR_CUTRAIN_ATTN_BWD_HOPPER : VR_CUTRAIN_ATTN_BWD_MMA;
}

extern "C" size_t vr_cutrain_attention_bwd_split_scratch(int T, int H, int D) { return (size_t)T * H * 2 * D; }

extern "C" void vr_cutrain_attention_fwd_generic(uint16_t *o, int ld_o, float *lse, const uint16_t *qkv, int ld,
                                                 int q_off, int k_off, int v_off, const int32_t *cu,
                                                 const int32_t *tiles, int n_tiles, int H, int Hkv, int D, int window,
                                                 float scale, cudaStream_t s) {
  if (n_tiles <= 0) return;
  VR_ASSERT(D >= 1 && D <= 32 * GDPL);
  bwd_params p =
      params_make(NULL, qkv, ld, q_off, k_off, v_off, NULL, NULL, ld_o, NULL, NULL, cu, tiles, NULL, H, Hkv, scale);
  k_attn_fwd_generic<<<dim3((unsigned)n_tiles, (unsigned)H), GNW * 32, 0, s>>>(p, reinterpret_cast<bf16 *>(o), lse, D,
                                                                               window);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cutrain_attention_bwd(uint16_t *dqkv, const uint16_t *qkv, int ld, int q_off, int k_off, int v_off,
                                         const uint16_t *o, const uint16_t *dout, int ld_o, const float *lse,
                                         float *delta, const int32_t *cu, const int32_t *tiles, const int32_t *tiles_q,
                                         int n_tiles, int H, int Hkv, int D, int window, float scale, float *split,
                                         int T, int kernel, cudaStream_t s) {
  if (T <= 0 || n_tiles <= 0) return;
  if (kernel == VR_CUTRAIN_ATTN_BWD_AUTO) kernel = vr_cutrain_attention_bwd_kernel(D, window);
  VR_ASSERT((kernel == VR_CUTRAIN_ATTN_BWD_GENERIC || vr_cutrain_attention_bwd_tc(D, window)) &&
            "tensor-core attention backward: head dim 64 or 128, no window");
  VR_ASSERT((kernel < VR_CUTRAIN_ATTN_BWD_WGMMA || vr_cutrain_attention_bwd_wgmma_ok(D, window)) &&
            "the wgmma attention backward needs an sm_90a build on a compute 9.0 device");
  bwd_params p =
      params_make(dqkv, qkv, ld, q_off, k_off, v_off, o, dout, ld_o, lse, delta, cu, tiles, tiles_q, H, Hkv, scale);
  if (H > Hkv) p.part = split; /* the generic kernels ignore it */
  if (kernel == VR_CUTRAIN_ATTN_BWD_WGMMA_CO4H) p.np = (H / Hkv + 1) / 2; /* parts of 2 query heads */
  const size_t warps = (size_t)T * H;
  const int vec = (D == 64 || D == 128) && ld_o % 8 == 0 && ((uintptr_t)o & 15) == 0 && ((uintptr_t)dout & 15) == 0;
  if (vec && D == 64)
    k_attn_delta8<8><<<(unsigned)((warps * 8 + 255) / 256), 256, 0, s>>>(p, T);
  else if (vec)
    k_attn_delta8<16><<<(unsigned)((warps * 16 + 255) / 256), 256, 0, s>>>(p, T);
  else
    k_attn_delta<<<(unsigned)((warps + 7) / 8), 256, 0, s>>>(p, T, D);
  VR_CUDA_CHECK_LAUNCH();
  if (kernel != VR_CUTRAIN_ATTN_BWD_GENERIC) {
    VR_ASSERT(ld % 8 == 0 && ld_o % 8 == 0 && q_off % 8 == 0 && k_off % 8 == 0 && v_off % 8 == 0);
    CUtensorMap tm[2];
    const CUtensorMap *tmp = NULL;
    if (kernel >= VR_CUTRAIN_ATTN_BWD_WGMMA) {
      VR_ASSERT(((uintptr_t)qkv & 15) == 0 && ((uintptr_t)dout & 15) == 0);
      const int e0 = vr_sm90_tensor_map(&tm[0], qkv, ld, T, ld, 64, 64);
      const int e1 = vr_sm90_tensor_map(&tm[1], dout, ld_o, T, ld_o, 64, 64);
      VR_ASSERT(e0 == 0 && e1 == 0 && "cuTensorMapEncodeTiled failed");
      tmp = tm;
    }
    if (D == 64)
      launch_bwd<64>(p, n_tiles, T, tmp, kernel, s);
    else
      launch_bwd<128>(p, n_tiles, T, tmp, kernel, s);
    return;
  }
  VR_ASSERT(D >= 1 && D <= 32 * GDPL);
  k_attn_bwd_dkdv_generic<<<dim3((unsigned)n_tiles, (unsigned)Hkv), GNW * 32, 0, s>>>(p, D, window);
  VR_CUDA_CHECK_LAUNCH();
  k_attn_bwd_dq_generic<<<dim3((unsigned)n_tiles, (unsigned)H), GNW * 32, 0, s>>>(p, D, window);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" int vr_cutrain_attention_tiles(const int32_t *cu, int n_seqs, int rows, int32_t *tiles, int max_tiles) {
  int n = 0;
  for (int i = 0; i < n_seqs; ++i)
    for (int t0 = 0; t0 < cu[i + 1] - cu[i]; t0 += rows) {
      if (n >= max_tiles) return -1;
      tiles[2 * n] = i;
      tiles[2 * n + 1] = t0;
      ++n;
    }
  return n;
}

extern "C" void vr_cutrain_attention_tiles_sort(const int32_t *cu, int32_t *tiles, int n_tiles, int for_keys,
                                                uint64_t *scratch) {
  for (int i = 0; i < n_tiles; ++i) {
    const int seq = tiles[2 * i], t0 = tiles[2 * i + 1], len = cu[seq + 1] - cu[seq];
    /* work of a key tile: the queries at or after it; of a query tile: the keys up to its end */
    const uint64_t work = (uint64_t)(for_keys ? len - t0 : (t0 + ABM < len ? t0 + ABM : len));
    scratch[i] = (~work & 0xffffffffull) << 32 | (uint64_t)i; /* ascending = most work first, then list order */
  }
  std::sort(scratch, scratch + n_tiles);
  int32_t *copy = reinterpret_cast<int32_t *>(scratch + n_tiles); /* 2 n_tiles int32 after the keys */
  for (int i = 0; i < 2 * n_tiles; ++i) copy[i] = tiles[i];
  for (int i = 0; i < n_tiles; ++i) {
    const int k = (int)(scratch[i] & 0xffffffffull);
    tiles[2 * i] = copy[2 * k], tiles[2 * i + 1] = copy[2 * k + 1];
  }
}
