/* vr_cuda_attention.cu: variable-length attention over packed sequences, no padding
 * (contract in vr_cuda_ops.h). First the kernels, then the launchers.
 *
 * Tensor-core path (D in 16/32/64/128): k_attn_fa (vr_cuda_attention_fa.cuh), FlashAttention-2
 * on mma.sync: a block owns one query tile of one (sequence, head), K/V tiles of 64 keys are
 * double-buffered in shared memory with cp.async, S, P and O live in registers, online
 * softmax in fp32 with the scale folded into ex2; keys past the sequence end, above the
 * diagonal (causal) or outside the sliding window are masked. Two configurations, picked by
 * shape (vr_cuda_attention_kernel): 128-row tiles of 4 warps x 32 rows (VR_CUDA_ATTN_KERNEL_FA128,
 * head_dim <= 64 in batches of VR_ATTN_FA128_MIN_ROWS rows or more) and 64-row tiles of 4 warps
 * x 16 rows (VR_CUDA_ATTN_KERNEL_FA64, smaller batches and head_dim 128). The kernels they were
 * chosen against are in tests/cuda/cuda_attention_bench.cu.
 *
 * Hopper path (D 64/128, sm_90a builds on compute 9.0 devices, batches of VR_CUDA_ATTN_FA3_MIN_ROWS
 * rows or more): k_attn_fa3 (vr_cuda_attention_fa3.cu, VR_CUDA_ATTN_KERNEL_FA3), TMA + wgmma,
 * warp-specialised, 128-row tiles; at head_dim 64 192-row tiles of three consumer warpgroups when
 * the batch's longest sequence is known and has VR_CUDA_ATTN_FA3_C3_MIN_LEN+ tokens
 * (vr_cuda_attention_maxlen); otherwise on the persistent schedule (VR_CUDA_FA3_PERSIST: one block
 * per multiprocessor looping over the (tile, head) items, whatever grid_tiles says).
 *
 * Fallback path (any D <= 256, VR_CUDA_ATTN_KERNEL_GENERIC): one warp per query row, fp32, keys
 * 32 at a time (lane j scores key j, then the warp accumulates lane-owned dims).
 *
 * Every kernel takes the same tile list and loops over it (blockIdx.x stride gridDim.x), so a
 * graph captured with an upper-bound grid serves any batch. */
#include "vr_cuda_attention_fa.cuh"

/* k_attn_split: key ranges per query tile, at most this many (docs/benchmarks.md, "Small
 * batches"); batches of at most VR_ATTN_SPLIT_MAX_ROWS rows; the scratch holds the partials of
 * the first VR_ATTN_SPLIT_TILES tiles of the list (a sequence of L > 64 tokens has at most
 * 2 L / 64 tiles, and the tile list puts tiles of several key tiles first, so every tile that
 * splits is among them in such a batch; a tile past them runs whole). */
#define VR_ATTN_SPLITS 4
#define VR_ATTN_SPLIT_MAX_ROWS 512
#define VR_ATTN_SPLIT_TILES (2 * VR_ATTN_SPLIT_MAX_ROWS / VR_CUDA_ATTN_BM)

namespace {

/* Fallback: one warp per query row; dynamic shared memory NWARP * D floats (q). */
__global__ void __launch_bounds__(NWARP * 32) k_attn_generic(attn_params p, int D) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  extern __shared__ float qs_all[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float *qs = qs_all + warp * D;
  const int h = blockIdx.y, hk = h / (p.H / p.Hkv);
  const int n_tiles = p.meta[VR_CUDA_META_N_TILES];
  const int nd = (D + 31) / 32;
  for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const int seq = p.tiles[2 * tile], q0 = p.tiles[2 * tile + 1];
    const size_t s0 = (size_t)p.cu[seq];
    const int len = p.cu[seq + 1] - p.cu[seq];
    for (int qi = q0 + warp; qi < min(len, q0 + BM); qi += NWARP) {
      __syncwarp();
      const bf16 *q = p.qkv + (s0 + qi) * (size_t)p.ld + p.q_off + h * D;
      for (int d = lane; d < D; d += 32) qs[d] = bfv(q[d]);
      __syncwarp();
      float acc[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = 0.f;
      float m_run = -INFINITY, l_run = 0.f;
      const int kend = p.causal ? qi + 1 : len;
      int kbeg = 0;
      if (p.window > 0) kbeg = max(0, qi - p.window + 1);
      const int kstop = p.window > 0 ? min(kend, qi + p.window) : kend;
      for (int k0 = kbeg; k0 < kstop; k0 += 32) {
        const int kj = k0 + lane;
        float sc = -INFINITY;
        if (kj < kstop) {
          const bf16 *k = p.qkv + (s0 + kj) * (size_t)p.ld + p.k_off + hk * D;
          float d = 0.f;
          for (int c = 0; c < D; ++c) d += qs[c] * bfv(k[c]);
          sc = d * p.scale_log2;
        }
        float mx = sc;
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        const float m_new = fmaxf(m_run, mx); /* finite: key k0 is always valid */
        const float alpha = exp2f(m_run - m_new);
        const float e = exp2f(sc - m_new);
        float sum = e;
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        l_run = l_run * alpha + sum;
        m_run = m_new;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] *= alpha;
        const int nk = min(32, kstop - k0);
        for (int jj = 0; jj < nk; ++jj) {
          const float pj = __shfl_sync(0xffffffffu, e, jj);
          const bf16 *v = p.qkv + (s0 + k0 + jj) * (size_t)p.ld + p.v_off + hk * D;
#pragma unroll
          for (int i = 0; i < 8; ++i)
            if (i < nd && lane + 32 * i < D) acc[i] += pj * bfv(v[lane + 32 * i]);
        }
      }
      bf16 *o = p.out + (s0 + qi) * (size_t)p.ld_out + h * D;
      const float inv = 1.f / l_run;
#pragma unroll
      for (int i = 0; i < 8; ++i)
        if (i < nd && lane + 32 * i < D) o[lane + 32 * i] = __float2bfloat16_rn(acc[i] * inv);
    }
  }
}

/* Short batches (vr_cuda_attention_split): one 256-token sequence has 4 query tiles per head,
 * 48 blocks for roberta-base's 12 heads on 132 multiprocessors, each walking all 4 key tiles
 * in turn. Here work item wi = (tile wi / VR_ATTN_SPLITS, split wi % VR_ATTN_SPLITS): a tile
 * with nkv key tiles takes ns = min(VR_ATTN_SPLITS, nkv) items (only tiles listed before
 * max_split: the scratch holds that many; the others, and tiles of one key tile, run
 * whole), item sp walking key tiles [sp nkv / ns, (sp + 1) nkv / ns). A split item writes
 * its unnormalised O rows and their (m, l) to part; the last of a tile's items to finish
 * (a counter per tile and head, reset by that block) combines all ns of them in split order
 * (the same sums whatever the arrival order: deterministic) and writes out. 4 warps x 16
 * query rows, K/V double-buffered like k_attn_fa; dynamic shared memory fa_smem<D, 32>
 * (Q, K[2], V[2] of 64 rows). part: (max_split * VR_ATTN_SPLITS * H) slots of 64 * (D + 2)
 * floats; cnt: max_split * H ints, zero before the first launch (and after every launch). */
template <int D>
__global__ void __launch_bounds__(NWARP * 32) k_attn_split(attn_params p, float *part, int *cnt, int max_split) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  constexpr int LD = mma_smem<D>::LD, KS = D / 16, NT = D / 8, S = VR_ATTN_SPLITS;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_last;
  bf16 *sQ = reinterpret_cast<bf16 *>(smem), *sK0 = sQ + 64 * LD, *sV0 = sK0 + 2 * 64 * LD;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int mat = lane >> 3, mrow = lane & 7;
  const int h = blockIdx.y, hk = h / (p.H / p.Hkv);
  const int n_items = p.meta[VR_CUDA_META_N_TILES] * S;
  for (int wi = blockIdx.x; wi < n_items; wi += gridDim.x) {
    const int tile = wi / S, sp = wi % S;
    const tile_span w = tile_at(p, tile, 64);
    const int ns = tile < max_split ? min(S, w.nkv) : 1;
    if (sp >= ns) continue;
    const int it0 = sp * w.nkv / ns, it1 = (sp + 1) * w.nkv / ns;
    const size_t s0 = w.s0;
    const int q0 = w.q0, len = w.len;
    cp_async_wait<0>();
    __syncthreads(); /* the previous item is done with every buffer (and with s_last) */
    cp_tile2<D, NWARP>(sQ, p.qkv, p.ld, s0, p.q_off + h * D, q0, len);
    cp_tile2<D, NWARP>(sK0, p.qkv, p.ld, s0, p.k_off + hk * D, w.kbeg + it0 * BN, len);
    cp_tile2<D, NWARP>(sV0, p.qkv, p.ld, s0, p.v_off + hk * D, w.kbeg + it0 * BN, len);
    cp_async_commit();
    uint32_t qa[KS][4];
    float o[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    const int wr0 = q0 + warp * 16, qr0 = wr0 + g, qr1 = qr0 + 8;
    for (int it = it0; it < it1; ++it) {
      const int n0 = w.kbeg + it * BN, buf = (it - it0) & 1;
      if (it + 1 < it1) {
        cp_tile2<D, NWARP>(sK0 + (buf ^ 1) * 64 * LD, p.qkv, p.ld, s0, p.k_off + hk * D, n0 + BN, len);
        cp_tile2<D, NWARP>(sV0 + (buf ^ 1) * 64 * LD, p.qkv, p.ld, s0, p.v_off + hk * D, n0 + BN, len);
      }
      cp_async_commit();
      cp_async_wait<1>();
      __syncthreads();
      if (it == it0) {
        const bf16 *qw = sQ + warp * 16 * LD;
#pragma unroll
        for (int kk = 0; kk < KS; ++kk)
          ldmatrix_x4(qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], qw + (lane & 15) * LD + kk * 16 + 8 * (lane >> 4));
      }
      const bf16 *sK = sK0 + buf * 64 * LD, *sV = sV0 + buf * 64 * LD;
      float sc[8][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
        for (int nt = 0; nt < 8; nt += 2) {
          uint32_t b0, b1, b2, b3;
          ldmatrix_x4(b0, b1, b2, b3, sK + ((nt + (mat >> 1)) * 8 + mrow) * LD + kk * 16 + 8 * (mat & 1));
          mma_bf16(sc[nt], qa[kk], b0, b1);
          mma_bf16(sc[nt + 1], qa[kk], b2, b3);
        }
      }
      const bool need_mask = n0 + BN > len || (p.causal && n0 + BN - 1 > wr0) || p.window > 0;
      uint32_t pa[4][4];
      float al0, al1;
      softmax_rows16(p, sc, pa, n0, len, need_mask, qr0, qr1, m0, m1, l0, l1, al0, al1);
#pragma unroll
      for (int i = 0; i < NT; ++i) o[i][0] *= al0, o[i][1] *= al0, o[i][2] *= al1, o[i][3] *= al1;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int nn = 0; nn < NT; nn += 2) {
          uint32_t b0, b1, b2, b3;
          ldmatrix_x4_trans(b0, b1, b2, b3, sV + (j * 16 + mrow + 8 * (mat & 1)) * LD + nn * 8 + 8 * (mat >> 1));
          mma_bf16(o[nn], pa[j], b0, b1);
          mma_bf16(o[nn + 1], pa[j], b2, b3);
        }
      }
      __syncthreads(); /* this buffer may be refilled by the next iteration's prefetch */
    }
    if (ns == 1) { /* the whole key range: normalise and write, as k_attn_fa */
      const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
      for (int nn = 0; nn < NT; ++nn) {
        const int c = h * D + nn * 8 + 2 * t;
        if (qr0 < len)
          *reinterpret_cast<uint32_t *>(p.out + (s0 + qr0) * (size_t)p.ld_out + c) = pack_bf16(o[nn][0] * inv0, o[nn][1] * inv0);
        if (qr1 < len)
          *reinterpret_cast<uint32_t *>(p.out + (s0 + qr1) * (size_t)p.ld_out + c) = pack_bf16(o[nn][2] * inv1, o[nn][3] * inv1);
      }
      continue;
    }
    /* this split's rows: O (64, D) unnormalised, then (m, l) per row */
    const size_t slot_f = (size_t)64 * (D + 2);
    float *po = part + ((size_t)(tile * S + sp) * p.H + h) * slot_f;
    const int r0 = warp * 16 + g, r1 = r0 + 8;
#pragma unroll
    for (int nn = 0; nn < NT; ++nn) {
      const int c = nn * 8 + 2 * t;
      *reinterpret_cast<float2 *>(po + (size_t)r0 * D + c) = make_float2(o[nn][0], o[nn][1]);
      *reinterpret_cast<float2 *>(po + (size_t)r1 * D + c) = make_float2(o[nn][2], o[nn][3]);
    }
    if (t == 0) {
      *reinterpret_cast<float2 *>(po + 64 * D + 2 * r0) = make_float2(m0, l0);
      *reinterpret_cast<float2 *>(po + 64 * D + 2 * r1) = make_float2(m1, l1);
    }
    __threadfence(); /* this block's partial is visible before its count */
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(&cnt[tile * p.H + h], 1) == ns - 1;
    __syncthreads();
    if (!s_last) continue;
    __threadfence(); /* the other splits' partials, counted before ours, are visible */
    const float *pt = part + ((size_t)(tile * S) * p.H + h) * slot_f; /* split k at pt + k * H * slot_f */
    const size_t sstride = (size_t)p.H * slot_f;
    /* two threads a row, D / 2 columns each, CW at a time with every split's loads in flight
     * (one round of L2 latency per chunk, not one per element) */
    constexpr int CH = D / 2, CW = CH < 16 ? CH : 16, NV = CW / 4;
    const int r = threadIdx.x >> 1, half = threadIdx.x & 1;
    if (q0 + r < len) {
      float f[S], l[S], M = -INFINITY;
#pragma unroll
      for (int k = 0; k < S; ++k) {
        const float2 ml = k < ns ? __ldcg(reinterpret_cast<const float2 *>(pt + k * sstride + 64 * D + 2 * r))
                                 : make_float2(-INFINITY, 0.f);
        f[k] = ml.x, l[k] = ml.y;
        M = fmaxf(M, ml.x);
      }
      const float Mu = M == -INFINITY ? 0.f : M;
      float L = 0.f;
#pragma unroll
      for (int k = 0; k < S; ++k) {
        f[k] = k < ns ? exp2f(f[k] - Mu) : 0.f;
        L += f[k] * l[k];
      }
      const float inv = L > 0.f ? 1.f / L : 0.f;
#pragma unroll
      for (int c0 = 0; c0 < CH; c0 += CW) {
        const int c = half * CH + c0;
        float4 v[S][NV];
#pragma unroll
        for (int k = 0; k < S; ++k)
#pragma unroll
          for (int j = 0; j < NV; ++j)
            v[k][j] = k < ns ? __ldcg(reinterpret_cast<const float4 *>(pt + k * sstride + (size_t)r * D + c + 4 * j))
                             : make_float4(0.f, 0.f, 0.f, 0.f);
        uint32_t pk[CW / 2];
#pragma unroll
        for (int j = 0; j < NV; ++j) {
          float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
#pragma unroll
          for (int k = 0; k < S; ++k) { /* split order: the same sums whichever block combines */
            a0 += f[k] * v[k][j].x, a1 += f[k] * v[k][j].y, a2 += f[k] * v[k][j].z, a3 += f[k] * v[k][j].w;
          }
          pk[2 * j] = pack_bf16(a0 * inv, a1 * inv);
          pk[2 * j + 1] = pack_bf16(a2 * inv, a3 * inv);
        }
        uint32_t *dst = reinterpret_cast<uint32_t *>(p.out + (s0 + q0 + r) * (size_t)p.ld_out + h * D + c);
#pragma unroll
        for (int j = 0; j < CW / 2; j += 4) *reinterpret_cast<uint4 *>(dst + j) = make_uint4(pk[j], pk[j + 1], pk[j + 2], pk[j + 3]);
      }
    }
    if (threadIdx.x == 0) cnt[tile * p.H + h] = 0; /* for the next launch (nobody else counts this tile now) */
  }
  cp_async_wait<0>();
}

} /* namespace */

/* -------------------------------------------------------------- launchers */

/* FA128 for D <= 64 in batches of at least this many rows (or an unknown count); below it,
 * and for D = 128, FA64: with few tiles the GPU is not full and a smaller tile spreads the
 * work over more blocks (docs/benchmarks.md, "Numbers behind the CUDA backend's code"). */
#define VR_ATTN_FA128_MIN_ROWS 4096
/* FA3 (Hopper) from VR_CUDA_ATTN_FA3_MIN_ROWS rows, its blocks heads-inner below
 * VR_CUDA_ATTN_FA3_HEAD_INNER_ROWS (vr_cuda_ops.h; docs/benchmarks.md, "Issue 24: FA3 at
 * head_dim 64"). */
/* max_len: the batch's longest sequence (0: unknown). Known long (VR_CUDA_ATTN_FA3_C3_MIN_LEN+
 * tokens: the eager long-context forwards): one block per tile, three consumer warpgroups at
 * head_dim 64 (192-row tiles), heads-inner under VR_CUDA_ATTN_FA3_HEAD_INNER_ROWS rows. Otherwise
 * (short sequences, and the graphs' and the training forward's unknown lengths) the persistent
 * schedule, heads-inner at head_dim 64, heads-outer at 128 (docs/benchmarks.md, "FA3 forward:
 * the persistent schedule"). */
static int fa3_flags(int rows, int D, int max_len) {
  if (!VR_CUDA_ATTN_FA3_PERSIST || max_len >= VR_CUDA_ATTN_FA3_C3_MIN_LEN)
    return (rows < VR_CUDA_ATTN_FA3_HEAD_INNER_ROWS ? VR_CUDA_FA3_HEAD_INNER : 0) |
           (D == 64 && max_len >= VR_CUDA_ATTN_FA3_C3_MIN_LEN ? VR_CUDA_FA3_C3 : 0);
  return VR_CUDA_FA3_PERSIST | (D == 64 ? VR_CUDA_FA3_HEAD_INNER : 0);
}
/* k_attn_fa's configurations in the library: FA_NW warps of FA64_MT / FA128_MT m16 tiles, no
 * register bound, Q fragments in registers */
#define FA_NW 4
#define FA64_MT 1
#define FA128_MT 2

extern "C" int vr_cuda_attention_kernel_fits(vr_cuda_attn_kernel_t k, int D) {
  switch (k) {
    case VR_CUDA_ATTN_KERNEL_FA3: return vr_cuda_attention_fa3_ok(D);
    case VR_CUDA_ATTN_KERNEL_GENERIC: return D >= 1 && D <= 256;
    case VR_CUDA_ATTN_KERNEL_FA64: return D == 16 || D == 32 || D == 64 || D == 128;
    case VR_CUDA_ATTN_KERNEL_FA128: return D == 16 || D == 32 || D == 64;
  }
  return 0;
}

extern "C" const char *vr_cuda_attention_kernel_name(vr_cuda_attn_kernel_t k) {
  switch (k) {
    case VR_CUDA_ATTN_KERNEL_GENERIC: return "generic";
    case VR_CUDA_ATTN_KERNEL_FA64: return "fa64";
    case VR_CUDA_ATTN_KERNEL_FA128: return "fa128";
    case VR_CUDA_ATTN_KERNEL_FA3: return "fa3";
  }
  return "?";
}

extern "C" vr_cuda_attn_kernel_t vr_cuda_attention_kernel(int D, int rows_hint) {
  if (!vr_cuda_attention_kernel_fits(VR_CUDA_ATTN_KERNEL_FA64, D)) return VR_CUDA_ATTN_KERNEL_GENERIC;
  if (rows_hint >= VR_CUDA_ATTN_FA3_MIN_ROWS && vr_cuda_attention_fa3_ok(D)) return VR_CUDA_ATTN_KERNEL_FA3;
  return D <= 64 && (rows_hint <= 0 || rows_hint >= VR_ATTN_FA128_MIN_ROWS) ? VR_CUDA_ATTN_KERNEL_FA128
                                                                           : VR_CUDA_ATTN_KERNEL_FA64;
}

extern "C" int vr_cuda_attention_kernel_rows(vr_cuda_attn_kernel_t k, int D) {
  if (k == VR_CUDA_ATTN_KERNEL_FA3) return vr_cuda_attention_fa3_rows(D, 0);
  return k == VR_CUDA_ATTN_KERNEL_FA128 ? 128 : BM;
}

extern "C" int vr_cuda_attention_tile_rows_maxlen(int D, int rows_hint, int max_len) {
  const vr_cuda_attn_kernel_t k = vr_cuda_attention_kernel(D, rows_hint);
  if (k == VR_CUDA_ATTN_KERNEL_FA3) return vr_cuda_attention_fa3_rows(D, fa3_flags(rows_hint, D, max_len));
  return vr_cuda_attention_kernel_rows(k, D);
}

extern "C" int vr_cuda_attention_tile_rows(int D, int rows_hint) { return vr_cuda_attention_tile_rows_maxlen(D, rows_hint, 0); }

/* The tensor-core kernels of head_dim D (FA128 only instantiated for D <= 64). */
template <int D>
static void launch_fa(vr_cuda_attn_kernel_t k, const attn_params &p, dim3 grid, cudaStream_t s) {
  if (k == VR_CUDA_ATTN_KERNEL_FA128) fa_launch<D <= 64 ? D : 64, FA_NW, FA128_MT, 1, false>(p, grid, s);
  else fa_launch<D, FA_NW, FA64_MT, 1, false>(p, grid, s);
}

template <int D>
static int resident_fa(vr_cuda_attn_kernel_t k) {
  if (k == VR_CUDA_ATTN_KERNEL_FA128) return fa_resident<D <= 64 ? D : 64, FA_NW, FA128_MT, 1, false>();
  return fa_resident<D, FA_NW, FA64_MT, 1, false>();
}

extern "C" int vr_cuda_attention_kernel_resident(vr_cuda_attn_kernel_t k, int D) {
  if (k == VR_CUDA_ATTN_KERNEL_FA3) return vr_cuda_attention_fa3_resident(D);
  if (k != VR_CUDA_ATTN_KERNEL_GENERIC && vr_cuda_attention_kernel_fits(k, D)) {
    switch (D) {
      case 16: return resident_fa<16>(k);
      case 32: return resident_fa<32>(k);
      case 64: return resident_fa<64>(k);
      case 128: return resident_fa<128>(k);
      default: break;
    }
  }
  return 4;
}

extern "C" int vr_cuda_attention_resident_blocks(int D, int rows_hint) {
  return vr_cuda_attention_kernel_resident(vr_cuda_attention_kernel(D, rows_hint), D);
}

extern "C" void vr_cuda_attention_run(vr_cuda_attn_kernel_t k, const uint16_t *qkv, int ld, int q_off, int k_off,
                                      int v_off, uint16_t *out, int ld_out, const int32_t *cu, const int32_t *tiles,
                                      const int32_t *meta, int grid_tiles, int H, int Hkv, int D, int causal,
                                      int window, float scale, int rows, cudaStream_t s) {
  if (grid_tiles <= 0) return;
  VR_ASSERT(H > 0 && Hkv > 0 && H % Hkv == 0 && vr_cuda_attention_kernel_fits(k, D));
  if (k == VR_CUDA_ATTN_KERNEL_FA3) {
    vr_cuda_attention_fa3(qkv, ld, rows, q_off, k_off, v_off, out, ld_out, NULL, cu, tiles, meta, grid_tiles, H, Hkv, D,
                          causal, window, scale, fa3_flags(rows, D, 0), s);
    return;
  }
  const attn_params p =
      attn_params_make(qkv, ld, q_off, k_off, v_off, out, ld_out, cu, tiles, meta, H, Hkv, causal, window, scale);
  const dim3 grid((unsigned)grid_tiles, (unsigned)H);
  if (k != VR_CUDA_ATTN_KERNEL_GENERIC) {
    switch (D) {
      case 16: launch_fa<16>(k, p, grid, s); return;
      case 32: launch_fa<32>(k, p, grid, s); return;
      case 64: launch_fa<64>(k, p, grid, s); return;
      case 128: launch_fa<128>(k, p, grid, s); return;
      default: break;
    }
  }
  vr_launch(k_attn_generic, dim3(grid), dim3(NWARP * 32), NWARP * D * sizeof(float), s, p, D);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_attention_maxlen(const uint16_t *qkv, int ld, int q_off, int k_off, int v_off, uint16_t *out,
                                         int ld_out, const int32_t *cu, const int32_t *tiles, const int32_t *meta,
                                         int grid_tiles, int H, int Hkv, int D, int causal, int window, float scale,
                                         int rows_hint, int max_len, cudaStream_t s) {
  const vr_cuda_attn_kernel_t k = vr_cuda_attention_kernel(D, rows_hint);
  if (k == VR_CUDA_ATTN_KERNEL_FA3) {
    if (grid_tiles <= 0) return;
    vr_cuda_attention_fa3(qkv, ld, rows_hint, q_off, k_off, v_off, out, ld_out, NULL, cu, tiles, meta, grid_tiles, H,
                          Hkv, D, causal, window, scale, fa3_flags(rows_hint, D, max_len), s);
    return;
  }
  vr_cuda_attention_run(k, qkv, ld, q_off, k_off, v_off, out, ld_out, cu, tiles, meta, grid_tiles, H, Hkv, D, causal,
                        window, scale, rows_hint, s);
}

extern "C" void vr_cuda_attention(const uint16_t *qkv, int ld, int q_off, int k_off, int v_off,
                                  uint16_t *out, int ld_out, const int32_t *cu,
                                  const int32_t *tiles, const int32_t *meta, int grid_tiles, int H,
                                  int Hkv, int D, int causal, int window, float scale, int rows_hint,
                                  cudaStream_t s) {
  vr_cuda_attention_maxlen(qkv, ld, q_off, k_off, v_off, out, ld_out, cu, tiles, meta, grid_tiles, H, Hkv, D, causal,
                           window, scale, rows_hint, 0, s);
}

extern "C" void vr_cuda_attention_lse(const uint16_t *qkv, int ld, int q_off, int k_off, int v_off, uint16_t *out,
                                      int ld_out, float *lse, const int32_t *cu, const int32_t *tiles,
                                      const int32_t *meta, int grid_tiles, int H, int Hkv, int D, int causal,
                                      int window, float scale, int rows_hint, cudaStream_t s) {
  if (grid_tiles <= 0) return;
  const vr_cuda_attn_kernel_t k = vr_cuda_attention_kernel(D, rows_hint);
  VR_ASSERT(H > 0 && Hkv > 0 && H % Hkv == 0 && k != VR_CUDA_ATTN_KERNEL_GENERIC && lse);
  if (k == VR_CUDA_ATTN_KERNEL_FA3) {
    vr_cuda_attention_fa3(qkv, ld, rows_hint, q_off, k_off, v_off, out, ld_out, lse, cu, tiles, meta, grid_tiles, H,
                          Hkv, D, causal, window, scale, fa3_flags(rows_hint, D, 0), s);
    return;
  }
  attn_params p = attn_params_make(qkv, ld, q_off, k_off, v_off, out, ld_out, cu, tiles, meta, H, Hkv, causal, window, scale);
  p.lse = lse;
  const dim3 grid((unsigned)grid_tiles, (unsigned)H);
  switch (D) {
    case 16: launch_fa<16>(k, p, grid, s); return;
    case 32: launch_fa<32>(k, p, grid, s); return;
    case 64: launch_fa<64>(k, p, grid, s); return;
    case 128: launch_fa<128>(k, p, grid, s); return;
    default: VR_ASSERT(0 && "no tensor-core kernel for this head_dim");
  }
}

/* ---- short batches: key-split attention (k_attn_split) ---- */

extern "C" int vr_cuda_attention_split_fits(int D, int rows_hint) {
  return (D == 16 || D == 32 || D == 64 || D == 128) && rows_hint > 0 && rows_hint <= VR_ATTN_SPLIT_MAX_ROWS;
}

extern "C" size_t vr_cuda_attention_split_scratch(int H, int D, size_t *cnt_bytes) {
  if (cnt_bytes) *cnt_bytes = (size_t)VR_ATTN_SPLIT_TILES * H * sizeof(int32_t);
  return (size_t)VR_ATTN_SPLIT_TILES * VR_ATTN_SPLITS * H * VR_CUDA_ATTN_BM * (D + 2) * sizeof(float);
}

extern "C" int vr_cuda_attention_split_items(int n_tiles) { return n_tiles * VR_ATTN_SPLITS; }

template <int D>
static void launch_split(const attn_params &p, dim3 grid, float *part, int32_t *cnt, cudaStream_t s) {
  const size_t sh = fa_smem<D, 32>::bytes;
  static int attr_set[64];
  set_smem_once(k_attn_split<D>, sh, attr_set);
  vr_launch(k_attn_split<D>, grid, dim3(NWARP * 32), sh, s, p, part, (int *)cnt, (int)VR_ATTN_SPLIT_TILES);
}

extern "C" int vr_cuda_attention_split_resident(int D) {
  switch (D) {
    case 16: return resident_of(k_attn_split<16>, NWARP * 32, (int)fa_smem<16, 32>::bytes);
    case 32: return resident_of(k_attn_split<32>, NWARP * 32, (int)fa_smem<32, 32>::bytes);
    case 64: return resident_of(k_attn_split<64>, NWARP * 32, (int)fa_smem<64, 32>::bytes);
    case 128: return resident_of(k_attn_split<128>, NWARP * 32, (int)fa_smem<128, 32>::bytes);
    default: return 1;
  }
}

extern "C" void vr_cuda_attention_split(const uint16_t *qkv, int ld, int q_off, int k_off, int v_off, uint16_t *out,
                                        int ld_out, const int32_t *cu, const int32_t *tiles, const int32_t *meta,
                                        int grid_items, int H, int Hkv, int D, int causal, int window, float scale,
                                        float *part, int32_t *cnt, cudaStream_t s) {
  if (grid_items <= 0) return;
  VR_ASSERT(H > 0 && Hkv > 0 && H % Hkv == 0 && part && cnt);
  const attn_params p =
      attn_params_make(qkv, ld, q_off, k_off, v_off, out, ld_out, cu, tiles, meta, H, Hkv, causal, window, scale);
  const dim3 grid((unsigned)grid_items, (unsigned)H);
  switch (D) {
    case 16: launch_split<16>(p, grid, part, cnt, s); return;
    case 32: launch_split<32>(p, grid, part, cnt, s); return;
    case 64: launch_split<64>(p, grid, part, cnt, s); return;
    case 128: launch_split<128>(p, grid, part, cnt, s); return;
    default: VR_ASSERT(0 && "vr_cuda_attention_split: head_dim without a kernel");
  }
}
