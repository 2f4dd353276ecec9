/* cuda_attention_bench.cu: the attention kernels the CUDA backend's automatic choice was made
 * against, next to the two the library keeps (as llm.c keeps dev/cuda/attention_forward.cu
 * beside llmc/). Each variant is checked against the library's automatic choice on mixed
 * batches (causal, bidirectional, GQA, MQA, sliding window, partial tiles, one long sequence;
 * NaN-poisoned output, one block per tile and a persistent grid smaller than the tile list),
 * then timed on model-sized shapes (CUDA events, median of repeats) in TFLOP/s. A benchmark:
 * it prints numbers and asserts nothing about speed; a wrong result makes the exit code 1.
 *
 *   cuda_attention_bench [--check] [--shape NxLhH/KVdDc|b]... [VARIANT...|all] [REPS]
 *   (--check: correctness only; --shape, repeatable: time only these shapes, e.g. 16x1024h32/8d64c
 *   for 16 sequences of 1024 tokens, 32 query / 8 key-value heads, head_dim 64, causal; b:
 *   bidirectional)
 *
 * Variants (k_attn_fa is in model/cuda/vr_cuda_attention_fa.cuh, the others below):
 *   fa128   library (VR_CUDA_ATTN_KERNEL_FA128): k_attn_fa, 128-row query tiles of 4 warps x
 *           32 rows, head_dim <= 64; the automatic choice for batches of 4096+ rows
 *   fa64    library (VR_CUDA_ATTN_KERNEL_FA64): k_attn_fa, 64-row tiles of 4 warps x 16 rows;
 *           the automatic choice below that and for head_dim 128
 *   fa2     k_attn_fa, 64-row tiles of 2 warps x 32 rows (head_dim <= 64, near the register
 *           limit at 64): every K/V fragment feeds two m-tiles
 *   fa4r    fa64 with registers bounded for 4 blocks (16 warps) per multiprocessor
 *   fa128q  fa128 with the Q fragments read from shared memory at every key tile
 *   fa4q    fa64 with Q from shared memory, registers bounded for 3 blocks per multiprocessor
 *   mma     k_attn_mma, the first mma.sync kernel: 4 warps x 16 rows on 64-row tiles, K
 *           fragments as one 32-bit shared load per mma (shared-memory bound at head_dim 64),
 *           exp2f, no persistent prefetch of the next tile
 *   wmma    k_attn_wmma, the first tensor-core kernel: wmma 16x16x16, S, P and O through
 *           shared memory, two lanes per softmax row
 *   fa3     library (VR_CUDA_ATTN_KERNEL_FA3): k_attn_fa3 (model/cuda/vr_cuda_attention_fa3.cu),
 *           TMA + wgmma, warp-specialised, head_dim 64 / 128 (the library's configuration:
 *           vr_cuda_attention_fa3_rows); sm_90a builds on compute 9.0 devices
 *   fa3c2   fa3 with two consumer warpgroups on 128-row tiles (VR_CUDA_FA3_C2: the library's
 *           configuration before issue 24's head_dim-64 work; ping-pong at head_dim 128 only)
 *   fa3c3   fa3 with three consumer warpgroups on 192-row tiles (VR_CUDA_FA3_C3, head_dim 64)
 *   fa3h    fa3 with the blocks taking every head of a tile before the next tile
 *           (VR_CUDA_FA3_HEAD_INNER: the heaviest causal tiles of all heads first)
 *   fa3e    fa3 with a quarter of the softmax's exp2 as a cubic on the FMA pipe
 *           (VR_CUDA_FA3_EXP2_POLY); fa3c2e: the same on fa3c2
 *   fa3np   fa3c2 with the two consumer warpgroups issuing their products unordered (no
 *           ping-pong)
 *   fa3pp   fa3c2 with the consumers taking turns (ping-pong)
 *   fa3p    fa3c2 on the persistent schedule (VR_CUDA_FA3_PERSIST: one block per multiprocessor
 *           over the (tile, head) items, heads-outer, Q double-buffered); fa3ph: heads-inner;
 *           fa3pc3: fa3c3 on it. Both grids below give it the same min(items, SMs) blocks.
 *   wgmma   k_attn_wg64, Hopper wgmma for head_dim 64 (no TMA, one warpgroup); only in builds
 *           with an sm_90a target
 * A variant is skipped on head dims it does not take. */
#include <mma.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "cuda_bench_util.h"
#include "vr_cuda_attention_fa.cuh"

using namespace nvcuda;

namespace {

/* ---- k_attn_wmma: the first tensor-core kernel ----
 * FlashAttention-2 style: a block of 4 warps owns one tile of 64 query rows of one
 * (sequence, head); each warp owns 16 rows. Key/value tiles of 64 rows stream through shared
 * memory; S = Q K^T with wmma bf16 (fp32 accumulate), online softmax in fp32 (running max m
 * and sum l per row, kept in registers: two lanes per row), P rounded to bf16, O += P V with
 * wmma into an fp32 accumulator in shared memory that the softmax step rescales. */
template <int D>
struct attn_smem {
  static constexpr int LDB = D + 8;   /* bf16 Q/K/V rows, padded */
  static constexpr int LDS = BN + 4;  /* fp32 S rows */
  static constexpr int LDP = BN + 8;  /* bf16 P rows */
  static constexpr int LDO = D + 4;   /* fp32 O rows */
  static constexpr size_t q = 0;
  static constexpr size_t k = q + (size_t)BM * LDB * 2;
  static constexpr size_t v = k + (size_t)BN * LDB * 2;
  static constexpr size_t s = v + (size_t)BN * LDB * 2;
  static constexpr size_t p = s + (size_t)BM * LDS * 4;
  static constexpr size_t o = p + (size_t)BM * LDP * 2;
  static constexpr size_t bytes = o + (size_t)BM * LDO * 4;
};

/* Copies rows [r0, r0 + ROWS) of a head (D bf16 at column col) of qkv into
 * shared memory; rows at or past `valid` are zero (so that masked keys
 * contribute exactly 0 * 0). 16-byte accesses. */
template <int D, int ROWS>
__device__ __forceinline__ void load_tile(bf16 *dst, const bf16 *qkv, int ld, size_t row0, int col,
                                          int r0, int valid) {
  constexpr int VPR = D / 8; /* 16-byte vectors per row */
  for (int i = threadIdx.x; i < ROWS * VPR; i += NWARP * 32) {
    const int r = i / VPR, c = (i % VPR) * 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r0 + r < valid) val = *reinterpret_cast<const uint4 *>(qkv + (row0 + r0 + r) * (size_t)ld + col + c);
    *reinterpret_cast<uint4 *>(dst + r * attn_smem<D>::LDB + c) = val;
  }
}

template <int D>
__global__ void __launch_bounds__(NWARP * 32) k_attn_wmma(attn_params p) {
  typedef attn_smem<D> L;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *sQ = reinterpret_cast<bf16 *>(smem + L::q);
  bf16 *sK = reinterpret_cast<bf16 *>(smem + L::k);
  bf16 *sV = reinterpret_cast<bf16 *>(smem + L::v);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float *sS = reinterpret_cast<float *>(smem + L::s) + warp * 16 * L::LDS;
  bf16 *sP = reinterpret_cast<bf16 *>(smem + L::p) + warp * 16 * L::LDP;
  float *sO = reinterpret_cast<float *>(smem + L::o) + warp * 16 * L::LDO;
  const int h = blockIdx.y, hk = h / (p.H / p.Hkv);
  const int n_tiles = p.meta[VR_CUDA_META_N_TILES];
  const int row = lane >> 1, half = lane & 1; /* softmax: 2 lanes per query row */

  for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const int seq = p.tiles[2 * tile], q0 = p.tiles[2 * tile + 1];
    const size_t s0 = (size_t)p.cu[seq];
    const int len = p.cu[seq + 1] - p.cu[seq];
    __syncthreads(); /* previous tile done with sQ */
    load_tile<D, BM>(sQ, p.qkv, p.ld, s0, p.q_off + h * D, q0, len);
    for (int i = lane; i < 16 * D; i += 32) sO[(i / D) * L::LDO + (i % D)] = 0.f;
    __syncthreads();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> qf[D / 16];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) wmma::load_matrix_sync(qf[kk], sQ + warp * 16 * L::LDB + kk * 16, L::LDB);

    const int qpos = q0 + warp * 16 + row;
    float m_run = -INFINITY, l_run = 0.f;
    const int kend = p.causal ? min(len, q0 + BM) : len;
    int kbeg = 0;
    if (p.window > 0) kbeg = max(0, q0 - p.window + 1) / BN * BN;
    for (int n0 = kbeg; n0 < kend; n0 += BN) {
      __syncthreads(); /* previous K/V tile fully consumed */
      load_tile<D, BN>(sK, p.qkv, p.ld, s0, p.k_off + hk * D, n0, len);
      load_tile<D, BN>(sV, p.qkv, p.ld, s0, p.v_off + hk * D, n0, len);
      __syncthreads();
      /* S = Q K^T for this warp's 16 rows */
#pragma unroll
      for (int j = 0; j < BN / 16; ++j) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.f);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> kf;
          wmma::load_matrix_sync(kf, sK + j * 16 * L::LDB + kk * 16, L::LDB);
          wmma::mma_sync(acc, qf[kk], kf, acc);
        }
        wmma::store_matrix_sync(sS + j * 16, acc, L::LDS, wmma::mem_row_major);
      }
      __syncwarp();
      /* online softmax: lane owns row `row`, columns half*32 .. +32 */
      float sv[32];
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < 32; ++c) {
        const int kpos = n0 + half * 32 + c;
        bool ok = kpos < len;
        if (p.causal) ok = ok && kpos <= qpos;
        if (p.window > 0) ok = ok && (qpos - kpos < p.window) && (kpos - qpos < p.window);
        const float v = ok ? sS[row * L::LDS + half * 32 + c] * p.scale_log2 : -INFINITY;
        sv[c] = v;
        mx = fmaxf(mx, v);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float m_new = fmaxf(m_run, mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = exp2f(m_run - m_use);
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < 32; ++c) {
        const float e = exp2f(sv[c] - m_use);
        sum += e;
        sP[row * L::LDP + half * 32 + c] = __float2bfloat16_rn(e);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      l_run = l_run * alpha + sum;
      m_run = m_new;
      for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) sO[row * L::LDO + c] *= alpha;
      __syncwarp();
      /* O += P V */
#pragma unroll
      for (int nn = 0; nn < D / 16; ++nn) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::load_matrix_sync(acc, sO + nn * 16, L::LDO, wmma::mem_row_major);
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> pf;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> vf;
          wmma::load_matrix_sync(pf, sP + kk * 16, L::LDP);
          wmma::load_matrix_sync(vf, sV + kk * 16 * L::LDB + nn * 16, L::LDB);
          wmma::mma_sync(acc, pf, vf, acc);
        }
        wmma::store_matrix_sync(sO + nn * 16, acc, L::LDO, wmma::mem_row_major);
      }
      __syncwarp();
    }
    /* O / l for this warp's rows that exist */
    if (qpos < len) {
      const float inv = l_run > 0.f ? 1.f / l_run : 0.f;
      bf16 *o = p.out + (s0 + qpos) * (size_t)p.ld_out + h * D;
      for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) o[c] = __float2bfloat16_rn(sO[row * L::LDO + c] * inv);
    }
  }
}

/* ---- k_attn_mma: the first mma.sync m16n8k16 kernel ----
 * A block of 4 warps owns a 64-row query tile of one (sequence, head); warp w owns rows
 * 16w .. 16w+15. K/V tiles of 64 keys are double-buffered in shared memory with cp.async
 * (zero-filled past the sequence end); S, P and O live in registers (fragment layouts: the
 * top of vr_cuda_attention_fa.cuh). K rows give B of Q K^T as one 32-bit load per mma. */
/* Rows [r0, r0 + 64) of one head into a 64 x D tile (pitch D + 8); rows at or
 * past `valid` are zero-filled (src-size 0: nothing is read). */
template <int D>
__device__ __forceinline__ void cp_tile(bf16 *dst, const bf16 *qkv, int ld, size_t row0, int col, int r0,
                                        int valid) {
  constexpr int VPR = D / 8;
  for (int i = threadIdx.x; i < 64 * VPR; i += NWARP * 32) {
    const int r = i / VPR, c = (i % VPR) * 8;
    const bool ok = r0 + r < valid;
    const bf16 *src = qkv + (row0 + (ok ? r0 + r : 0)) * (size_t)ld + col + c;
    cp_async16(dst + r * mma_smem<D>::LD + c, src, ok ? 16 : 0);
  }
}

template <int D>
__global__ void __launch_bounds__(NWARP * 32) k_attn_mma(attn_params p) {
  constexpr int LD = mma_smem<D>::LD, KS = D / 16, NT = D / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *sQ = reinterpret_cast<bf16 *>(smem);
  bf16 *sK0 = sQ + 64 * LD, *sV0 = sQ + 3 * 64 * LD; /* K[b] = sK0 + b*64*LD, V[b] likewise */
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y, hk = h / (p.H / p.Hkv);
  const int n_tiles = p.meta[VR_CUDA_META_N_TILES];

  for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const tile_span w = tile_at(p, tile, BM);
    const size_t s0 = w.s0;
    const int q0 = w.q0, len = w.len, kbeg = w.kbeg, nkv = w.nkv;
    __syncthreads(); /* the previous tile is done with every buffer */
    cp_tile<D>(sQ, p.qkv, p.ld, s0, p.q_off + h * D, q0, len);
    cp_tile<D>(sK0, p.qkv, p.ld, s0, p.k_off + hk * D, kbeg, len);
    cp_tile<D>(sV0, p.qkv, p.ld, s0, p.v_off + hk * D, kbeg, len);
    cp_async_commit();

    uint32_t qa[KS][4];
    float o[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f; /* rows g and g + 8 */
    const int qr0 = q0 + warp * 16 + g, qr1 = qr0 + 8;

    for (int it = 0; it < nkv; ++it) {
      const int n0 = kbeg + it * BN, buf = it & 1;
      if (it + 1 < nkv) { /* prefetch the next K/V tile into the other buffer */
        cp_tile<D>(sK0 + (buf ^ 1) * 64 * LD, p.qkv, p.ld, s0, p.k_off + hk * D, n0 + BN, len);
        cp_tile<D>(sV0 + (buf ^ 1) * 64 * LD, p.qkv, p.ld, s0, p.v_off + hk * D, n0 + BN, len);
      }
      cp_async_commit();
      cp_async_wait<1>(); /* everything but the prefetch just issued has landed */
      __syncthreads();
      if (it == 0) {
        const bf16 *qw = sQ + warp * 16 * LD;
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
          qa[kk][0] = *reinterpret_cast<const uint32_t *>(qw + g * LD + kk * 16 + 2 * t);
          qa[kk][1] = *reinterpret_cast<const uint32_t *>(qw + (g + 8) * LD + kk * 16 + 2 * t);
          qa[kk][2] = *reinterpret_cast<const uint32_t *>(qw + g * LD + kk * 16 + 8 + 2 * t);
          qa[kk][3] = *reinterpret_cast<const uint32_t *>(qw + (g + 8) * LD + kk * 16 + 8 + 2 * t);
        }
      }
      const bf16 *sK = sK0 + buf * 64 * LD, *sV = sV0 + buf * 64 * LD;
      /* S = Q K^T: 8 key n-tiles of 8 */
      float sc[8][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.f;
        const bf16 *kr = sK + (nt * 8 + g) * LD + 2 * t;
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
          const uint32_t b0 = *reinterpret_cast<const uint32_t *>(kr + kk * 16);
          const uint32_t b1 = *reinterpret_cast<const uint32_t *>(kr + kk * 16 + 8);
          mma_bf16(sc[nt], qa[kk], b0, b1);
        }
      }
      /* scale (log2 domain) and mask */
      const bool need_mask = n0 + BN > len || (p.causal && n0 + BN - 1 > q0 + warp * 16) || p.window > 0;
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = sc[nt][e] * p.scale_log2;
          if (need_mask) {
            const int kp = n0 + nt * 8 + 2 * t + (e & 1), qp = e < 2 ? qr0 : qr1;
            bool ok = kp < len;
            if (p.causal) ok = ok && kp <= qp;
            if (p.window > 0) ok = ok && qp - kp < p.window && kp - qp < p.window;
            if (!ok) v = -INFINITY;
          }
          sc[nt][e] = v;
        }
        mx0 = fmaxf(mx0, fmaxf(sc[nt][0], sc[nt][1]));
        mx1 = fmaxf(mx1, fmaxf(sc[nt][2], sc[nt][3]));
      }
      mx0 = quad_max(mx0);
      mx1 = quad_max(mx1);
      const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
      const float mu0 = mn0 == -INFINITY ? 0.f : mn0, mu1 = mn1 == -INFINITY ? 0.f : mn1;
      const float al0 = exp2f(m0 - mu0), al1 = exp2f(m1 - mu1);
      m0 = mn0, m1 = mn1;
      float rs0 = 0.f, rs1 = 0.f;
      uint32_t pa[4][4]; /* P as A fragments, one per 16-key step */
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const float e0 = exp2f(sc[nt][0] - mu0), e1 = exp2f(sc[nt][1] - mu0);
        const float e2 = exp2f(sc[nt][2] - mu1), e3 = exp2f(sc[nt][3] - mu1);
        rs0 += e0 + e1;
        rs1 += e2 + e3;
        pa[nt >> 1][(nt & 1) * 2 + 0] = pack_bf16(e0, e1);
        pa[nt >> 1][(nt & 1) * 2 + 1] = pack_bf16(e2, e3);
      }
      rs0 = quad_sum(rs0);
      rs1 = quad_sum(rs1);
      l0 = l0 * al0 + rs0;
      l1 = l1 * al1 + rs1;
#pragma unroll
      for (int i = 0; i < NT; ++i) o[i][0] *= al0, o[i][1] *= al0, o[i][2] *= al1, o[i][3] *= al1;
      /* O += P V: ldmatrix.trans gives B fragments of two dim n-tiles per call */
      const int mat = lane >> 3, mrow = lane & 7;
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
    cp_async_wait<0>();
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
    for (int nn = 0; nn < NT; ++nn) {
      const int c = h * D + nn * 8 + 2 * t;
      if (qr0 < len)
        *reinterpret_cast<uint32_t *>(p.out + (s0 + qr0) * (size_t)p.ld_out + c) = pack_bf16(o[nn][0] * inv0, o[nn][1] * inv0);
      if (qr1 < len)
        *reinterpret_cast<uint32_t *>(p.out + (s0 + qr1) * (size_t)p.ld_out + c) = pack_bf16(o[nn][2] * inv1, o[nn][3] * inv1);
    }
  }
}

/* ---- k_attn_wg64: wgmma (sm_90a), head_dim 64 ----
 * One warpgroup (4 warps, 16 query rows each) per 64-row query tile; 3 blocks per SM
 * (bounding the registers for 4 spilled and was no faster). Correct, but slower than the
 * mma.sync kernels it would replace (docs/benchmarks.md, "wgmma attention" and "Numbers
 * behind the CUDA backend's code"), so the library does not carry it; kept as the base for
 * a TMA / warp-specialised version.
 * Q, K and V tiles sit in shared memory in one layout, loaded by cp.async: core matrices of
 * 8 rows x 16 bytes, element (r, c) of a 64 x 64 bf16 tile at
 * (r / 8) * 1024 + (c / 8) * 128 + (r % 8) * 16 + (c % 8) * 2 bytes. For K (B of S = Q K^T,
 * K-major over the head dims) that is the canonical no-swizzle layout with LBO 128 / SBO
 * 1024; V (B of O = P V, keys x dims, dims contiguous) is read as an MN-major operand
 * (transpose-B) with LBO 1024 (between 8-key groups) / SBO 128 (between 8-dim groups). Q
 * goes to registers once per tile (ldmatrix, the mma.sync A layout), so S reads only K from
 * shared memory (an m64n64k16 with both operands there would read 4 KB per 32 tensor
 * cycles: the shared-memory bandwidth of the SM).
 * Per key tile the warpgroup issues S(it) = Q K(it)^T and O += P(it-1) V(it-1) back to back
 * (wgmma, asynchronous), waits for S only, runs the online softmax on it while P V is in
 * flight, then waits for P V and rescales O (FlashAttention-3's intra-warpgroup overlap). The
 * fp32 S fragment of a warp has the mma.sync m16n8 C layout repeated over 8 column blocks, so
 * P feeds the next P V straight from registers (mma.sync A layout). K is double and V triple
 * buffered (V is read one iteration later than K). */
#define WG_TILE_BYTES (64 * 64 * 2)
#define WG_SMEM_BYTES (6 * WG_TILE_BYTES) /* Q, K[2], V[3] */

template <int LBO, int SBO>
__device__ __forceinline__ uint64_t wg_desc(const void *p) {
  const uint64_t a = smem_u32(p);
  return ((a & 0x3FFFFu) >> 4) | ((uint64_t)(LBO >> 4) << 16) | ((uint64_t)(SBO >> 4) << 32);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/* Pins registers in program order around the asynchronous wgmma (accumulators are only
 * valid after wgmma.wait_group; register A operands must not change before it). */
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
__device__ __forceinline__ void fence_regs(uint32_t (&r)[4][4]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) asm volatile("" : "+r"(r[i / 4][i % 4])::"memory");
}

#define WG_D32                                                                                                     \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),       \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),       \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),      \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define WG_DOPS                                                                                                    \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31}"

/* d (+)= A B, A from registers (mma.sync A fragment layout), B from shared memory, K-major
 * (TB 0) or MN-major (TB 1, transpose-B); acc 0: d = A B. */
template <int TB>
__device__ __forceinline__ void wgmma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_DOPS ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : WG_D32
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc), "n"(TB));
}
/* Rows [r0, r0 + 64) of one head (64 dims at column col) into the tile layout above; rows at
 * or past valid are zero-filled. 128 threads. */
__device__ __forceinline__ void cp_canon(unsigned char *dst, const bf16 *qkv, int ld, size_t row0, int col, int r0,
                                         int valid) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int i = threadIdx.x + k * 128, r = i >> 3, c = i & 7;
    const bool ok = r0 + r < valid;
    const bf16 *src = qkv + (row0 + (ok ? r0 + r : 0)) * (size_t)ld + col + c * 8;
    cp_async16(dst + (r >> 3) * 1024 + c * 128 + (r & 7) * 16, src, ok ? 16 : 0);
  }
}

/* Waits for key tile it's K and V, makes them visible to wgmma in every warp, and starts
 * loading tile it + 1 (K double, V triple buffered: V(it - 1) is still being read). The
 * barrier also means S(it - 1) and P V(it - 2) are complete in every warp. */
__device__ __forceinline__ void wg_next_kv(const attn_params &p, unsigned char *sK0, unsigned char *sV0, size_t s0,
                                           int hk, int kbeg, int it, int nkv, int len) {
  cp_async_wait<0>();
  fence_proxy_async();
  __syncthreads();
  if (it + 1 < nkv) {
    const int n1 = kbeg + (it + 1) * BN;
    cp_canon(sK0 + ((it + 1) & 1) * WG_TILE_BYTES, p.qkv, p.ld, s0, p.k_off + hk * 64, n1, len);
    cp_canon(sV0 + ((it + 1) % 3) * WG_TILE_BYTES, p.qkv, p.ld, s0, p.v_off + hk * 64, n1, len);
    cp_async_commit();
  }
}

/* sc = Q K^T over the 64 head dims (4 k-steps of 16 dims = 256 bytes of K); Q from
 * registers (qa, mma.sync A fragments), which halves the shared-memory reads of S. */
__device__ __forceinline__ void wg_qk(float (&sc)[32], const uint32_t (&qa)[4][4], uint64_t dk) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_rs<0>(sc, qa[kk], dk + (uint64_t)(kk * 16), kk);
}

/* o += P V over 64 keys (4 k-steps of 16 keys = 2048 bytes). V (keys x dims, dims
 * contiguous) is an MN-major B: LBO 1024 between 8-key groups, SBO 128 between 8-dim groups. */
__device__ __forceinline__ void wg_pv(float (&o)[32], const uint32_t (&pa)[4][4], const unsigned char *sV) {
  const uint64_t dv = wg_desc<1024, 128>(sV);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_rs<1>(o, pa[kk], dv + (uint64_t)(kk * 128), 1);
}

/* Online softmax of one 64-key tile for this warp's 16 query rows (softmax_rows16); the
 * wgmma accumulator fragment is the mma.sync one of 8 n-tiles, sc[4 j + e] = sc8[j][e]. */
__device__ __forceinline__ void wg_softmax(const attn_params &p, float (&sc)[32], uint32_t (&pn)[4][4], int n0,
                                           int len, int q0, int warp, int qr0, int qr1, float &m0, float &m1,
                                           float &l0, float &l1, float &al0, float &al1) {
  const bool need_mask = n0 + BN > len || (p.causal && n0 + BN - 1 > q0 + warp * 16) || p.window > 0;
  softmax_rows16(p, reinterpret_cast<float(&)[8][4]>(sc), pn, n0, len, need_mask, qr0, qr1, m0, m1, l0, l1, al0, al1);
}
#endif

__global__ void __launch_bounds__(128, 3) k_attn_wg64(attn_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int D = 64;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char *sQ = smem, *sK0 = smem + WG_TILE_BYTES, *sV0 = smem + 3 * WG_TILE_BYTES;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y, hk = h / (p.H / p.Hkv);
  const int n_tiles = p.meta[VR_CUDA_META_N_TILES];

  for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const tile_span w = tile_at(p, tile, 64);
    const size_t s0 = w.s0;
    const int q0 = w.q0, len = w.len, kbeg = w.kbeg, nkv = w.nkv;
    __syncthreads(); /* the previous tile's wgmma reads are complete in every warp */
    cp_canon(sQ, p.qkv, p.ld, s0, p.q_off + h * D, q0, len);
    cp_canon(sK0, p.qkv, p.ld, s0, p.k_off + hk * D, kbeg, len);
    cp_canon(sV0, p.qkv, p.ld, s0, p.v_off + hk * D, kbeg, len);
    cp_async_commit();
    float o[32], sc[32];
    uint32_t pa[4][4]; /* P of the previous key tile, the A operand of its P V */
#pragma unroll
    for (int i = 0; i < 32; ++i) o[i] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    const int qr0 = q0 + warp * 16 + g, qr1 = qr0 + 8;
    float al0, al1;
    /* key tile 0: S only (O is still zero) */
    wg_next_kv(p, sK0, sV0, s0, hk, kbeg, 0, nkv, len);
    uint32_t qa[4][4]; /* this warp's 16 Q rows as A fragments: matrix m of k-step kk is rows
                          8 (m & 1) + 0..7, dims 16 kk + 8 (m >> 1) + 0..7 */
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const int m = lane >> 3, r = warp * 16 + (m & 1) * 8 + (lane & 7), c = kk * 2 + (m >> 1);
      ldmatrix_x4(qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], sQ + (r >> 3) * 1024 + c * 128 + (r & 7) * 16);
    }
    fence_regs<32>(sc);
    wg_fence();
    wg_qk(sc, qa, wg_desc<128, 1024>(sK0));
    wg_commit();
    wg_wait<0>();
    fence_regs<32>(sc);
    wg_softmax(p, sc, pa, kbeg, len, q0, warp, qr0, qr1, m0, m1, l0, l1, al0, al1);
    for (int it = 1; it < nkv; ++it) {
      wg_next_kv(p, sK0, sV0, s0, hk, kbeg, it, nkv, len);
      fence_regs<32>(o);
      fence_regs(pa);
      wg_fence();
      wg_qk(sc, qa, wg_desc<128, 1024>(sK0 + (it & 1) * WG_TILE_BYTES));
      wg_commit();
      wg_pv(o, pa, sV0 + ((it - 1) % 3) * WG_TILE_BYTES);
      wg_commit();
      wg_wait<1>(); /* S(it) */
      fence_regs<32>(sc);
      uint32_t pn[4][4];
      wg_softmax(p, sc, pn, kbeg + it * BN, len, q0, warp, qr0, qr1, m0, m1, l0, l1, al0, al1);
      wg_wait<0>(); /* P V(it - 1) */
      fence_regs<32>(o);
      fence_regs(pa);
#pragma unroll
      for (int j = 0; j < 8; ++j) o[4 * j] *= al0, o[4 * j + 1] *= al0, o[4 * j + 2] *= al1, o[4 * j + 3] *= al1;
#pragma unroll
      for (int i = 0; i < 16; ++i) pa[i / 4][i % 4] = pn[i / 4][i % 4];
    }
    /* the last key tile's P V */
    fence_regs<32>(o);
    fence_regs(pa);
    wg_fence();
    wg_pv(o, pa, sV0 + ((nkv - 1) % 3) * WG_TILE_BYTES);
    wg_commit();
    wg_wait<0>();
    fence_regs<32>(o);
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int c = h * D + j * 8 + 2 * t;
      if (qr0 < len)
        *reinterpret_cast<uint32_t *>(p.out + (s0 + qr0) * (size_t)p.ld_out + c) = pack_bf16(o[4 * j] * inv0, o[4 * j + 1] * inv0);
      if (qr1 < len)
        *reinterpret_cast<uint32_t *>(p.out + (s0 + qr1) * (size_t)p.ld_out + c) = pack_bf16(o[4 * j + 2] * inv1, o[4 * j + 3] * inv1);
    }
  }
#else
  __trap(); /* built without sm_90a code: the bench does not list it then */
#endif
}

/* -------------------------------------------------------------- variants */

/* f(std::integral_constant<int, D>) for the tensor-core head dims. */
template <typename F>
void with_dim(int D, F f) {
  switch (D) {
    case 16: f(std::integral_constant<int, 16>()); return;
    case 32: f(std::integral_constant<int, 32>()); return;
    case 64: f(std::integral_constant<int, 64>()); return;
    case 128: f(std::integral_constant<int, 128>()); return;
    default: fprintf(stderr, "head_dim %d: no tensor-core variant\n", D); abort();
  }
}

/* k_attn_fa with other template arguments (MT 2: head_dim <= 64 only). */
template <int NW, int MT, int MINB, bool QSM>
void launch_fa_v(const attn_params &p, dim3 grid, int D, cudaStream_t s) {
  with_dim(D, [&](auto d) {
    constexpr int DD = decltype(d)::value;
    if constexpr (MT == 1 || DD <= 64) fa_launch<DD, NW, MT, MINB, QSM>(p, grid, s);
    else abort();
  });
}

template <int NW, int MT, int MINB, bool QSM>
int resident_fa_v(int D) {
  int n = 1;
  with_dim(D, [&](auto d) {
    constexpr int DD = decltype(d)::value;
    if constexpr (MT == 1 || DD <= 64) n = fa_resident<DD, NW, MT, MINB, QSM>();
  });
  return n;
}

/* The earlier kernels by head dim: the kernel and its dynamic shared memory. */
typedef void (*attn_kernel_fn)(attn_params);
struct mma_kernel {
  template <int D>
  static attn_kernel_fn fn() { return k_attn_mma<D>; }
  template <int D>
  static size_t smem() { return mma_smem<D>::bytes; }
};
struct wmma_kernel {
  template <int D>
  static attn_kernel_fn fn() { return k_attn_wmma<D>; }
  template <int D>
  static size_t smem() { return attn_smem<D>::bytes; }
};

template <typename K>
void launch_k(const attn_params &p, dim3 grid, int D, cudaStream_t s) {
  with_dim(D, [&](auto d) {
    constexpr int DD = decltype(d)::value;
    const attn_kernel_fn kernel = K::template fn<DD>();
    const size_t sh = K::template smem<DD>();
    static int attr_set[64];
    set_smem_once(kernel, sh, attr_set);
    kernel<<<grid, NWARP * 32, sh, s>>>(p);
    VR_CUDA_CHECK_LAUNCH();
  });
}

template <typename K>
int resident_k(int D) {
  int n = 1;
  with_dim(D, [&](auto d) {
    constexpr int DD = decltype(d)::value;
    n = resident_of(K::template fn<DD>(), NWARP * 32, (int)K::template smem<DD>());
  });
  return n;
}

void launch_wg64(const attn_params &p, dim3 grid, int /* D: 64 */, cudaStream_t s) {
  static int attr_set[64];
  set_smem_once(k_attn_wg64, WG_SMEM_BYTES, attr_set);
  k_attn_wg64<<<grid, 128, WG_SMEM_BYTES, s>>>(p);
  VR_CUDA_CHECK_LAUNCH();
}

int resident_wg64(int /* D: 64 */) { return resident_of(k_attn_wg64, 128, (int)WG_SMEM_BYTES); }

int resident_fa3(int D) { return vr_cuda_attention_fa3_resident(D); }

#ifdef VR_CUDA_HAVE_WGMMA
#define WGMMA_BUILT 1
#else
#define WGMMA_BUILT 0
#endif

struct variant {
  const char *name;
  int min_d, max_d;  /* head dims taken: the tensor-core ones in [min_d, max_d] */
  int tile_rows;
  int library;       /* 1: the library's kernel `kernel` through vr_cuda_attention_run */
  vr_cuda_attn_kernel_t kernel;
  void (*launch)(const attn_params &p, dim3 grid, int D, cudaStream_t s);
  int (*resident)(int D);
  int built;         /* 0: not in this build (wgmma without sm_90a code) */
  int fa3_flags;     /* the FA3 variants other than the library's: vr_cuda_attention_fa3's flags */
};

const variant k_variants[] = {
    {"fa128", 16, 64, 128, 1, VR_CUDA_ATTN_KERNEL_FA128, NULL, NULL, 1},
    {"fa64", 16, 128, 64, 1, VR_CUDA_ATTN_KERNEL_FA64, NULL, NULL, 1},
    /* FA3: tile_rows 0, the configuration's (rows_of) */
    {"fa3", 64, 128, 0, 1, VR_CUDA_ATTN_KERNEL_FA3, NULL, NULL, 1, 0},
    {"fa3c2", 64, 128, 0, 0, VR_CUDA_ATTN_KERNEL_FA3, NULL, resident_fa3, 1, VR_CUDA_FA3_C2},
    {"fa3c3", 64, 64, 0, 0, VR_CUDA_ATTN_KERNEL_FA3, NULL, resident_fa3, 1, VR_CUDA_FA3_C3},
    {"fa3h", 64, 128, 0, 0, VR_CUDA_ATTN_KERNEL_FA3, NULL, resident_fa3, 1, VR_CUDA_FA3_HEAD_INNER},
    {"fa3e", 64, 128, 0, 0, VR_CUDA_ATTN_KERNEL_FA3, NULL, resident_fa3, 1, VR_CUDA_FA3_EXP2_POLY},
    {"fa3c2e", 64, 128, 0, 0, VR_CUDA_ATTN_KERNEL_FA3, NULL, resident_fa3, 1, VR_CUDA_FA3_C2 | VR_CUDA_FA3_EXP2_POLY},
    {"fa3np", 64, 128, 0, 0, VR_CUDA_ATTN_KERNEL_FA3, NULL, resident_fa3, 1, VR_CUDA_FA3_C2 | VR_CUDA_FA3_NO_PINGPONG},
    {"fa3pp", 64, 128, 0, 0, VR_CUDA_ATTN_KERNEL_FA3, NULL, resident_fa3, 1, VR_CUDA_FA3_C2 | VR_CUDA_FA3_PINGPONG},
    {"fa3p", 64, 128, 0, 0, VR_CUDA_ATTN_KERNEL_FA3, NULL, resident_fa3, 1, VR_CUDA_FA3_C2 | VR_CUDA_FA3_PERSIST},
    {"fa3ph", 64, 128, 0, 0, VR_CUDA_ATTN_KERNEL_FA3, NULL, resident_fa3, 1,
     VR_CUDA_FA3_C2 | VR_CUDA_FA3_PERSIST | VR_CUDA_FA3_HEAD_INNER},
    {"fa3pc3", 64, 64, 0, 0, VR_CUDA_ATTN_KERNEL_FA3, NULL, resident_fa3, 1, VR_CUDA_FA3_C3 | VR_CUDA_FA3_PERSIST},
    {"fa2", 16, 64, 64, 0, VR_CUDA_ATTN_KERNEL_FA64, launch_fa_v<2, 2, 1, false>, resident_fa_v<2, 2, 1, false>, 1},
    {"fa4r", 16, 128, 64, 0, VR_CUDA_ATTN_KERNEL_FA64, launch_fa_v<4, 1, 4, false>, resident_fa_v<4, 1, 4, false>, 1},
    {"fa128q", 16, 64, 128, 0, VR_CUDA_ATTN_KERNEL_FA64, launch_fa_v<4, 2, 1, true>, resident_fa_v<4, 2, 1, true>, 1},
    {"fa4q", 16, 128, 64, 0, VR_CUDA_ATTN_KERNEL_FA64, launch_fa_v<4, 1, 3, true>, resident_fa_v<4, 1, 3, true>, 1},
    {"mma", 16, 128, 64, 0, VR_CUDA_ATTN_KERNEL_FA64, launch_k<mma_kernel>, resident_k<mma_kernel>, 1},
    {"wmma", 16, 128, 64, 0, VR_CUDA_ATTN_KERNEL_FA64, launch_k<wmma_kernel>, resident_k<wmma_kernel>, 1},
    {"wgmma", 64, 64, 64, 0, VR_CUDA_ATTN_KERNEL_FA64, launch_wg64, resident_wg64, WGMMA_BUILT},
};
const int k_n_variants = (int)(sizeof k_variants / sizeof k_variants[0]);

int fits(const variant &v, int D) {
  return (D == 16 || D == 32 || D == 64 || D == 128) && D >= v.min_d && D <= v.max_d;
}

/* Query rows of v's tiles at head_dim D. */
int rows_of(const variant &v, int D) {
  return v.tile_rows ? v.tile_rows : vr_cuda_attention_fa3_rows(D, v.fa3_flags);
}

/* One launch of variant v on batch a (tile list already made for rows_of(v, D)). */
void run_variant(const variant &v, const bench_attn_t *a, int grid) {
  const int H = a->H, Hkv = a->Hkv, D = a->D;
  const float scale = 1.f / sqrtf((float)D);
  if (!v.library && v.kernel == VR_CUDA_ATTN_KERNEL_FA3) { /* the library's FA3, configuration forced */
    vr_cuda_attention_fa3(a->qkv, a->ld, a->T, 0, H * D, (H + Hkv) * D, a->out, H * D, NULL, a->cu, a->tiles, a->meta,
                          grid, H, Hkv, D, a->causal, a->window, scale, v.fa3_flags, 0);
    return;
  }
  if (v.library) {
    vr_cuda_attention_run(v.kernel, a->qkv, a->ld, 0, H * D, (H + Hkv) * D, a->out, H * D, a->cu, a->tiles, a->meta,
                          grid, H, Hkv, D, a->causal, a->window, scale, a->T, 0);
    return;
  }
  const attn_params p = attn_params_make(a->qkv, a->ld, 0, H * D, (H + Hkv) * D, a->out, H * D, a->cu, a->tiles,
                                         a->meta, H, Hkv, a->causal, a->window, scale);
  v.launch(p, dim3((unsigned)grid, (unsigned)H), D, 0);
}

int resident(const variant &v, int D) {
  return v.library ? vr_cuda_attention_kernel_resident(v.kernel, D) : v.resident(D);
}

/* The output (T, H D) as floats, after a NaN poison and one launch (variant v, or the
 * library's automatic choice when v is NULL). */
void output_of(const variant *v, bench_attn_t *a, int grid_cap, float *out) {
  const size_t n = (size_t)a->T * a->H * a->D;
  if (v) bench_attn_tiles(a, rows_of(*v, a->D));
  else bench_attn_tiles(a, vr_cuda_attention_tile_rows(a->D, a->T));
  const int grid = grid_cap > 0 && grid_cap < a->nt ? grid_cap : a->nt;
  VR_CUDA_CHECK(cudaMemset(a->out, 0xFF, n * 2));
  if (v) {
    run_variant(*v, a, grid);
  } else {
    vr_cuda_attention(a->qkv, a->ld, 0, a->H * a->D, (a->H + a->Hkv) * a->D, a->out, a->H * a->D, a->cu, a->tiles,
                      a->meta, grid, a->H, a->Hkv, a->D, a->causal, a->window, 1.f / sqrtf((float)a->D), a->T, 0);
  }
  VR_CUDA_CHECK(cudaDeviceSynchronize());
  uint16_t *h = (uint16_t *)malloc(n * 2);
  VR_CUDA_CHECK(cudaMemcpy(h, a->out, n * 2, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = (uint32_t)h[i] << 16;
    memcpy(&out[i], &u, 4);
  }
  free(h);
}

/* v against the library's automatic choice on mixed batches: ||v - lib|| / ||lib|| <= 1e-2,
 * every element written. Returns 0 when every shape passed. */
int check(const variant &v) {
  static const int mixed[] = {65, 1, 200, 37, 130}, one_long[] = {1100};
  static const struct {
    int H, Hkv, D, causal, window, long_seq;
  } shapes[] = {
      {4, 2, 16, 1, 0, 0},  {4, 4, 16, 0, 0, 0},  {4, 2, 32, 1, 0, 0},   {4, 4, 32, 0, 0, 0},
      {4, 2, 64, 1, 0, 0},  {4, 4, 64, 0, 0, 0},  {8, 1, 64, 1, 0, 0},   {4, 2, 64, 1, 40, 0},
      {4, 2, 128, 1, 0, 0}, {4, 4, 128, 0, 0, 0}, {2, 1, 128, 1, 0, 1}, {2, 2, 64, 0, 0, 1},
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
    const int D = shapes[i].D;
    if (!fits(v, D)) continue;
    bench_attn_t a;
    if (shapes[i].long_seq) bench_attn_init(&a, one_long, 1, shapes[i].H, shapes[i].Hkv, D, shapes[i].causal, shapes[i].window);
    else bench_attn_init(&a, mixed, 5, shapes[i].H, shapes[i].Hkv, D, shapes[i].causal, shapes[i].window);
    const size_t n = (size_t)a.T * a.H * D;
    float *ref = (float *)malloc(n * 4), *got = (float *)malloc(n * 4);
    output_of(NULL, &a, 0, ref);
    for (int pass = 0; pass < 2; ++pass) { /* one block per tile; 3 blocks looping over the tiles */
      output_of(&v, &a, pass ? 3 : 0, got);
      double num = 0, den = 0;
      size_t nonfinite = 0;
      for (size_t k = 0; k < n; ++k) {
        if (!isfinite(got[k]) || !isfinite(ref[k])) {
          ++nonfinite;
          continue;
        }
        num += (double)(got[k] - ref[k]) * (got[k] - ref[k]);
        den += (double)ref[k] * ref[k];
      }
      const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
      const int ok = nonfinite == 0 && rel <= 1e-2;
      printf("%-4s check %-7s H%d/%d D%-3d %-6s win%-3d T%-5d grid %s: rel %.2e vs the library%s\n", ok ? "ok" : "FAIL",
             v.name, a.H, a.Hkv, D, a.causal ? "causal" : "bidir", a.window, a.T, pass ? "3" : "per tile", rel,
             nonfinite ? " (non-finite / unwritten elements)" : "");
      bad += !ok;
    }
    free(ref), free(got);
    bench_attn_free(&a);
  }
  return bad;
}

struct timed_call {
  const variant *v;
  const bench_attn_t *a;
  int grid;
};

void run_timed(void *ctx) {
  const timed_call *c = (const timed_call *)ctx;
  run_variant(*c->v, c->a, c->grid);
}

/* The kernel bench's shapes for the variants vs[0 .. nv) (shape by shape, every variant on the
 * same data in turn): one block per tile, then the graphs' persistent grid. */
struct shape {
  int n_seqs, len, H, Hkv, D, causal;
};
/* "NxLhH/KVdDc" (or ...b: bidirectional) into sh; 1 on success. */
int parse_shape(const char *arg, shape *sh) {
  char c = 0;
  if (sscanf(arg, "%dx%dh%d/%dd%d%c", &sh->n_seqs, &sh->len, &sh->H, &sh->Hkv, &sh->D, &c) != 6) return 0;
  sh->causal = c == 'c';
  return (c == 'c' || c == 'b') && sh->n_seqs >= 1 && sh->n_seqs <= 64 && sh->len >= 1 && sh->Hkv >= 1 &&
         sh->H % sh->Hkv == 0;
}

/* sel[0 .. nsel): the shapes to time (none: the table below). */
void time_variants(const variant *const *vs, int nv, int reps, const shape *sel, int nsel) {
  static const shape table[] = {{8, 2048, 32, 8, 128, 1}, {16, 1024, 32, 8, 64, 1}, {32, 512, 12, 12, 64, 0},
                {64, 256, 12, 12, 64, 0}, {1, 512, 12, 12, 64, 0},
                /* below the FA3 threshold (4096 rows): where FA64 and FA3 cross */
                {8, 256, 12, 12, 64, 0}, {4, 512, 12, 12, 64, 0}, {1, 1024, 12, 12, 64, 0},
                {2, 512, 32, 8, 64, 1}, {2, 1024, 32, 8, 64, 1}, {1, 2048, 32, 8, 64, 1},
                {1, 2048, 32, 8, 128, 1},
                /* issue 24's long sequences: llama-8b 2 x 16384, llama-1b 4 x 16384, FA3-paper style
                 * 16k tokens at 2048 wide (bidirectional) */
                {2, 16384, 32, 8, 128, 1}, {4, 16384, 32, 8, 64, 1}, {1, 16384, 16, 16, 128, 0},
                {1, 16384, 32, 32, 64, 0}, {1, 16384, 32, 32, 64, 1}};
  const shape *shapes = nsel ? sel : table;
  const size_t n_shapes = nsel ? (size_t)nsel : sizeof table / sizeof table[0];
  for (size_t i = 0; i < n_shapes; ++i) {
    int any = 0;
    for (int k = 0; k < nv; ++k) any |= fits(*vs[k], shapes[i].D);
    if (!any) continue;
    int lens[64];
    for (int k = 0; k < shapes[i].n_seqs; ++k) lens[k] = shapes[i].len;
    bench_attn_t a;
    bench_attn_init(&a, lens, shapes[i].n_seqs, shapes[i].H, shapes[i].Hkv, shapes[i].D, shapes[i].causal, 0);
    for (int k = 0; k < nv; ++k) {
      const variant &v = *vs[k];
      if (!fits(v, a.D)) continue;
      bench_attn_tiles(&a, rows_of(v, a.D));
      for (int mode = 0; mode < 2; ++mode) {
        timed_call c = {&v, &a, mode == 0 ? a.nt : bench_attn_persistent_grid(&a, resident(v, a.D))};
        const float m = bench_time_ms(run_timed, &c, reps);
        printf("attention %-7s %2d x %5d H%d/%d D%-3d %-6s grid %5d x %-2d %8.3f ms %7.1f TFLOP/s\n", v.name,
               shapes[i].n_seqs, shapes[i].len, a.H, a.Hkv, a.D, a.causal ? "causal" : "bidir", c.grid, a.H, m,
               bench_attn_flops(&a) / (m * 1e-3) / 1e12);
      }
    }
    bench_attn_free(&a);
  }
}

} /* namespace */

int main(int argc, char **argv) {
  int check_only = 0, reps = 10, n_want = 0, known = 1, nsel = 0;
  const char *want[32]; /* the variants named, in order; none: all */
  shape sel[32];
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--check")) {
      check_only = 1;
    } else if (!strcmp(argv[i], "--shape")) {
      known &= i + 1 < argc && nsel < 32 && parse_shape(argv[i + 1], &sel[nsel]);
      ++nsel, ++i;
    } else if (argv[i][0] >= '0' && argv[i][0] <= '9') {
      reps = atoi(argv[i]);
    } else if (strcmp(argv[i], "all")) {
      int k = 0;
      while (k < k_n_variants && strcmp(argv[i], k_variants[k].name)) ++k;
      known &= k < k_n_variants && n_want < 32;
      if (known) want[n_want++] = k_variants[k].name;
    }
  }
  if (!known || reps < 1) {
    fprintf(stderr, "usage: %s [--check] [--shape NxLhH/KVdDc|b]... [VARIANT...|all] [REPS >= 1]; variants:", argv[0]);
    for (int i = 0; i < k_n_variants; ++i) fprintf(stderr, " %s", k_variants[i].name);
    fprintf(stderr, "\n");
    return 2;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA device\n");
    return 77;
  }
  int bad = 0, n_timed = 0;
  const variant *timed[sizeof k_variants / sizeof k_variants[0] + 32]; /* checked and correct, to time */
  for (int w = 0; w < (n_want ? n_want : k_n_variants); ++w) {
    int i = w;
    if (n_want)
      for (i = 0; strcmp(want[w], k_variants[i].name);) ++i;
    const variant &v = k_variants[i];
    if (!v.built) {
      printf("-- %s: not in this build (configure with an sm_90a target, VR_CUDA_ARCH's default)\n", v.name);
      continue;
    }
    if ((v.library || v.kernel == VR_CUDA_ATTN_KERNEL_FA3) && !vr_cuda_attention_kernel_fits(v.kernel, v.max_d)) {
      printf("-- %s: does not run here (an sm_90a build on a compute 9.0 device)\n", v.name);
      continue;
    }
    printf("-- %s\n", v.name);
    const int b = check(v);
    bad += b;
    if (!check_only && b == 0) timed[n_timed++] = &v;
  }
  time_variants(timed, n_timed, reps, sel, nsel);
  printf("%s\n", bad ? "FAILED" : check_only ? "all variants agree with the library" : "done");
  return bad ? 1 : 0;
}
