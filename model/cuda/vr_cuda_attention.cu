/* vr_cuda_attention.cu: variable-length attention over packed sequences, no
 * padding (contract in vr_cuda_ops.h).
 *
 * Tensor-core paths (D in 16/32/64/128): k_attn_mma (default, below) and the
 * first version, k_attn_wmma, kept for comparison (VR_CUDA_ATTN=wmma):
 * FlashAttention-2 style: a block of 4
 * warps owns one tile of 64 query rows of one (sequence, head); each warp owns
 * 16 rows. Key/value tiles of 64 rows stream through shared memory; S = Q K^T
 * with wmma bf16 (fp32 accumulate), online softmax in fp32 (running max m and
 * sum l per row, kept in registers: two lanes per row), P rounded to bf16,
 * O += P V with wmma into an fp32 accumulator in shared memory that the
 * softmax step rescales. Keys past the sequence end, above the diagonal
 * (causal) or outside the sliding window are masked.
 *
 * Fallback path (any D <= 256): one warp per query row, fp32, keys 32 at a
 * time (lane j scores key j, then the warp accumulates lane-owned dims).
 *
 * Both paths take the same tile list and loop over it (blockIdx.x stride
 * gridDim.x), so a graph captured with an upper-bound grid serves any batch. */
#include <cuda_bf16.h>
#include <mma.h>
#include <stdlib.h>
#include <string.h>

#include "vr_cuda_check.h"
#include "vr_cuda_ops.h"

using namespace nvcuda;
typedef __nv_bfloat16 bf16;

#define BM VR_CUDA_ATTN_BM
#define BN 64
#define NWARP 4

__device__ __forceinline__ float bfv(const bf16 v) { return __bfloat162float(v); }

struct attn_params {
  const bf16 *qkv;
  bf16 *out;
  const int32_t *cu, *tiles, *meta;
  int ld, q_off, k_off, v_off, ld_out;
  int H, Hkv, causal, window;
  float scale_log2; /* scale * log2(e) */
};

/* One work item of the tile list: query rows [q0, q0 + rows) of sequence seq (rows at
 * s0 .. s0 + len of qkv), against key tiles kbeg .. kbeg + nkv * BN (causal: up to the
 * tile's last row; sliding window: from the first key any of its rows sees). */
struct tile_span {
  size_t s0;
  int seq, q0, len, kbeg, nkv;
};

__device__ __forceinline__ tile_span tile_at(const attn_params &p, int tile, int rows) {
  tile_span w;
  w.seq = p.tiles[2 * tile];
  w.q0 = p.tiles[2 * tile + 1];
  w.s0 = (size_t)p.cu[w.seq];
  w.len = p.cu[w.seq + 1] - p.cu[w.seq];
  const int kend = p.causal ? min(w.len, w.q0 + rows) : w.len;
  w.kbeg = p.window > 0 ? max(0, w.q0 - p.window + 1) / BN * BN : 0;
  w.nkv = (kend - w.kbeg + BN - 1) / BN;
  return w;
}

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

/* ---- FlashAttention-2 path on mma.sync m16n8k16 (bf16 in, fp32 accumulate) ----
 * A block of 4 warps owns a 64-row query tile of one (sequence, head); warp w
 * owns rows 16w .. 16w+15. K/V tiles of 64 keys are double-buffered in shared
 * memory with cp.async (zero-filled past the sequence end). S, P and O live in
 * registers: S = Q K^T accumulates in the mma C layout, whose row pairs are
 * exactly the A-operand layout of the P V product, so P never touches shared
 * memory. Fragment layouts (g = lane / 4, t = lane % 4):
 *   A 16x16: a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
 *   B 16x8:  b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
 *   C 16x8:  c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
 * K rows give B of Q K^T directly (B[k][n] = K[n][k]: 2 consecutive dims = one
 * 32-bit load); V gives B of P V through ldmatrix.trans. Row pitch D + 8 bf16
 * keeps both access patterns free of bank conflicts. */
template <int D>
struct mma_smem {
  static constexpr int LD = D + 8;
  static constexpr size_t tile = (size_t)64 * LD * 2;
  static constexpr size_t bytes = 5 * tile; /* Q, K[2], V[2] */
};

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3,
                                                  const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_u32(p)));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x = lo (low half), .y = hi */
  return *reinterpret_cast<uint32_t *>(&v);
}

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
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
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
      rs0 += __shfl_xor_sync(0xffffffffu, rs0, 1);
      rs0 += __shfl_xor_sync(0xffffffffu, rs0, 2);
      rs1 += __shfl_xor_sync(0xffffffffu, rs1, 1);
      rs1 += __shfl_xor_sync(0xffffffffu, rs1, 2);
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

/* ---- Two-warp variant for head_dim <= 64 (default there; VR_CUDA_ATTN=mma selects the
 * kernel above) ----
 * Same 64-row query tile, same double-buffered 64-key K/V tiles, but 2 warps of 32 query
 * rows (two m16 tiles each) instead of 4 warps of 16: every K and V fragment read from
 * shared memory feeds two mma instead of one (the 4-warp kernel issued one 32-bit shared
 * load per mma for K, i.e. shared-memory bandwidth bound at D = 64), K fragments come
 * from ldmatrix (x4: two 16-dim steps of one 8-key n-tile), and the softmax uses the
 * scale folded into one FFMA and the hardware ex2 (P is rounded to bf16 anyway). */

__device__ __forceinline__ void ldmatrix_x4(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_u32(p)));
}

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* As cp_tile, for a block of NW warps. */
template <int D, int NW, int ROWS = 64>
__device__ __forceinline__ void cp_tile2(bf16 *dst, const bf16 *qkv, int ld, size_t row0, int col, int r0,
                                         int valid) {
  constexpr int VPR = D / 8;
  for (int i = threadIdx.x; i < ROWS * VPR; i += NW * 32) {
    const int r = i / VPR, c = (i % VPR) * 8;
    const bool ok = r0 + r < valid;
    const bf16 *src = qkv + (row0 + (ok ? r0 + r : 0)) * (size_t)ld + col + c;
    cp_async16(dst + r * mma_smem<D>::LD + c, src, ok ? 16 : 0);
  }
}

/* NW warps of MT m16 tiles each: query tiles of TM = NW * MT * 16 rows (64, or 128: the
 * host then lists 128-row tiles, vr_cuda_attention_tile_rows); MINB: blocks per
 * multiprocessor the register allocation must allow (1: no bound). Shared memory:
 * fa_smem_bytes<D, TM>. A 128-row tile reads each K/V tile from L2 once for twice the
 * query rows. */
/* Pairwise reduction of 8 values (depth 3 instead of a chain of 7). */
struct op_max {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct op_add {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
template <typename F>
__device__ __forceinline__ float tree8(const float (&v)[8], F f) {
  return f(f(f(v[0], v[1]), f(v[2], v[3])), f(f(v[4], v[5]), f(v[6], v[7])));
}

/* Mask and online softmax of one 64-key tile (keys from n0) for 16 query rows (qr0 = row g,
 * qr1 = row g + 8) in the mma.sync m16n8 C layout, sc[j][e]: rows g / g + 8 for e < 2 / >= 2,
 * key n0 + 8 j + 2 t + (e & 1). Updates the running max m (log2-scaled domain) and sum l,
 * writes P as the next P V's A fragments (one per 16-key step) and the factors al0 / al1 the
 * accumulated O rows must be scaled by. Per n-tile maxima and sums, then trees (short
 * dependency chains); ex2.approx with the scale folded into one FFMA. */
__device__ __forceinline__ void softmax_rows16(const attn_params &p, float (&sc)[8][4], uint32_t (&pa)[4][4], int n0,
                                               int len, bool need_mask, int qr0, int qr1, float &m0, float &m1,
                                               float &l0, float &l1, float &al0, float &al1) {
  const int t = threadIdx.x & 3;
  float px0[8], px1[8];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    if (need_mask) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int kp = n0 + nt * 8 + 2 * t + (e & 1), qp = e < 2 ? qr0 : qr1;
        bool ok = kp < len;
        if (p.causal) ok = ok && kp <= qp;
        if (p.window > 0) ok = ok && qp - kp < p.window && kp - qp < p.window;
        if (!ok) sc[nt][e] = -INFINITY;
      }
    }
    px0[nt] = fmaxf(sc[nt][0], sc[nt][1]);
    px1[nt] = fmaxf(sc[nt][2], sc[nt][3]);
  }
  float mx0 = tree8(px0, op_max()), mx1 = tree8(px1, op_max());
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  /* scale > 0, so max(raw) * scale is the max of the scaled scores */
  const float mn0 = fmaxf(m0, mx0 * p.scale_log2), mn1 = fmaxf(m1, mx1 * p.scale_log2);
  const float mu0 = mn0 == -INFINITY ? 0.f : mn0, mu1 = mn1 == -INFINITY ? 0.f : mn1;
  al0 = ex2_approx(m0 - mu0), al1 = ex2_approx(m1 - mu1);
  m0 = mn0, m1 = mn1;
  float ps0[8], ps1[8];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const float e0 = ex2_approx(fmaf(sc[nt][0], p.scale_log2, -mu0));
    const float e1 = ex2_approx(fmaf(sc[nt][1], p.scale_log2, -mu0));
    const float e2 = ex2_approx(fmaf(sc[nt][2], p.scale_log2, -mu1));
    const float e3 = ex2_approx(fmaf(sc[nt][3], p.scale_log2, -mu1));
    ps0[nt] = e0 + e1;
    ps1[nt] = e2 + e3;
    pa[nt >> 1][(nt & 1) * 2 + 0] = pack_bf16(e0, e1);
    pa[nt >> 1][(nt & 1) * 2 + 1] = pack_bf16(e2, e3);
  }
  float rs0 = tree8(ps0, op_add()), rs1 = tree8(ps1, op_add());
  rs0 += __shfl_xor_sync(0xffffffffu, rs0, 1);
  rs0 += __shfl_xor_sync(0xffffffffu, rs0, 2);
  rs1 += __shfl_xor_sync(0xffffffffu, rs1, 1);
  rs1 += __shfl_xor_sync(0xffffffffu, rs1, 2);
  l0 = l0 * al0 + rs0;
  l1 = l1 * al1 + rs1;
}

template <int D, int NW, int MT, int MINB, bool QSM>
__global__ void __launch_bounds__(NW * 32, MINB) k_attn_fa(attn_params p) {
  constexpr int TM = NW * MT * 16;
  static_assert(TM == 64 || TM == 128, "64- or 128-row query tiles");
  constexpr int LD = mma_smem<D>::LD, KS = D / 16, NT = D / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *sQ0 = reinterpret_cast<bf16 *>(smem); /* Q[2] (current / next tile), K[2], V[2] */
  bf16 *sK0 = sQ0 + 2 * TM * LD, *sV0 = sK0 + 2 * 64 * LD;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int mat = lane >> 3, mrow = lane & 7; /* ldmatrix: which 8x8 matrix / row this lane addresses */
  const int h = blockIdx.y, hk = h / (p.H / p.Hkv);
  const int n_tiles = p.meta[VR_CUDA_META_N_TILES];

  /* Persistent loop with the next tile's Q and first K/V tile prefetched during the last
   * key iteration of the current one (short sequences have few key iterations, so an
   * exposed load per tile would cost a large share of the block's time). */
  int kvb = 0, qb = 0, prefetched = 0; /* K/V buffer of the tile's first keys, its Q buffer */
  for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const tile_span w = tile_at(p, tile, TM);
    const size_t s0 = w.s0;
    const int q0 = w.q0, len = w.len, kbeg = w.kbeg, nkv = w.nkv;
    const bf16 *sQ = sQ0 + qb * TM * LD;
    if (!prefetched) {
      cp_async_wait<0>(); /* nothing of this block's may still land in these buffers */
      __syncthreads();    /* the previous tile is done with every buffer */
      cp_tile2<D, NW, TM>(sQ0 + qb * TM * LD, p.qkv, p.ld, s0, p.q_off + h * D, q0, len);
      cp_tile2<D, NW>(sK0 + kvb * 64 * LD, p.qkv, p.ld, s0, p.k_off + hk * D, kbeg, len);
      cp_tile2<D, NW>(sV0 + kvb * 64 * LD, p.qkv, p.ld, s0, p.v_off + hk * D, kbeg, len);
      cp_async_commit();
    }
    prefetched = 0;
    const int next = tile + (int)gridDim.x;

    uint32_t qa[QSM ? 1 : MT][QSM ? 1 : KS][4]; /* Q fragments in registers (QSM: read from sQ) */
    float o[MT][NT][4];
    float m[MT][2], l[MT][2]; /* rows g and g + 8 of each m-tile; m in the log2-scaled domain */
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int i = 0; i < NT; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
      m[mt][0] = m[mt][1] = -INFINITY;
      l[mt][0] = l[mt][1] = 0.f;
    }
    const int wr0 = q0 + warp * MT * 16; /* this warp's first query row */

    for (int it = 0; it < nkv; ++it) {
      const int n0 = kbeg + it * BN, buf = kvb ^ (it & 1);
      if (it + 1 < nkv) {
        cp_tile2<D, NW>(sK0 + (buf ^ 1) * 64 * LD, p.qkv, p.ld, s0, p.k_off + hk * D, n0 + BN, len);
        cp_tile2<D, NW>(sV0 + (buf ^ 1) * 64 * LD, p.qkv, p.ld, s0, p.v_off + hk * D, n0 + BN, len);
      } else if (next < n_tiles) { /* the next tile's Q and first keys, into the free buffers */
        const tile_span nw = tile_at(p, next, TM);
        cp_tile2<D, NW, TM>(sQ0 + (qb ^ 1) * TM * LD, p.qkv, p.ld, nw.s0, p.q_off + h * D, nw.q0, nw.len);
        cp_tile2<D, NW>(sK0 + (buf ^ 1) * 64 * LD, p.qkv, p.ld, nw.s0, p.k_off + hk * D, nw.kbeg, nw.len);
        cp_tile2<D, NW>(sV0 + (buf ^ 1) * 64 * LD, p.qkv, p.ld, nw.s0, p.v_off + hk * D, nw.kbeg, nw.len);
        prefetched = 1;
      }
      cp_async_commit();
      cp_async_wait<1>();
      __syncthreads();
      if (!QSM && it == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const bf16 *qw = sQ + (warp * MT * 16 + mt * 16) * LD;
#pragma unroll
          for (int kk = 0; kk < KS; ++kk) {
            ldmatrix_x4(qa[QSM ? 0 : mt][QSM ? 0 : kk][0], qa[QSM ? 0 : mt][QSM ? 0 : kk][1],
                        qa[QSM ? 0 : mt][QSM ? 0 : kk][2], qa[QSM ? 0 : mt][QSM ? 0 : kk][3],
                        qw + (lane & 15) * LD + kk * 16 + 8 * (lane >> 4));
          }
        }
      }
      const bf16 *sK = sK0 + buf * 64 * LD, *sV = sV0 + buf * 64 * LD;
      /* S = Q K^T (raw scores), one 16-dim step at a time: 8 key n-tiles of 8, each K
       * fragment (ldmatrix x4: two n-tiles, both 8-dim halves) feeding every m-tile */
      float sc[MT][8][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) sc[mt][nt][0] = sc[mt][nt][1] = sc[mt][nt][2] = sc[mt][nt][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        uint32_t qf[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if (QSM)
            ldmatrix_x4(qf[mt][0], qf[mt][1], qf[mt][2], qf[mt][3],
                        sQ + (warp * MT * 16 + mt * 16 + (lane & 15)) * LD + kk * 16 + 8 * (lane >> 4));
          else
#pragma unroll
            for (int r = 0; r < 4; ++r) qf[mt][r] = qa[QSM ? 0 : mt][QSM ? 0 : kk][r];
        }
#pragma unroll
        for (int nt = 0; nt < 8; nt += 2) { /* matrices: (nt, lo), (nt, hi), (nt+1, lo), (nt+1, hi) */
          uint32_t b0, b1, b2, b3;
          ldmatrix_x4(b0, b1, b2, b3, sK + ((nt + (mat >> 1)) * 8 + mrow) * LD + kk * 16 + 8 * (mat & 1));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16(sc[mt][nt], qf[mt], b0, b1);
            mma_bf16(sc[mt][nt + 1], qf[mt], b2, b3);
          }
        }
      }
      const bool need_mask = n0 + BN > len || (p.causal && n0 + BN - 1 > wr0) || p.window > 0;
      uint32_t pa[MT][4][4]; /* P as A fragments, one per 16-key step */
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int qr0 = wr0 + mt * 16 + g, qr1 = qr0 + 8;
        float al0, al1;
        softmax_rows16(p, sc[mt], pa[mt], n0, len, need_mask, qr0, qr1, m[mt][0], m[mt][1], l[mt][0], l[mt][1], al0, al1);
#pragma unroll
        for (int i = 0; i < NT; ++i) o[mt][i][0] *= al0, o[mt][i][1] *= al0, o[mt][i][2] *= al1, o[mt][i][3] *= al1;
      }
      /* O += P V: one ldmatrix.trans (two dim n-tiles) feeds both m-tiles */
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int nn = 0; nn < NT; nn += 2) {
          uint32_t b0, b1, b2, b3;
          ldmatrix_x4_trans(b0, b1, b2, b3, sV + (j * 16 + mrow + 8 * (mat & 1)) * LD + nn * 8 + 8 * (mat >> 1));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16(o[mt][nn], pa[mt][j], b0, b1);
            mma_bf16(o[mt][nn + 1], pa[mt][j], b2, b3);
          }
        }
      }
      __syncthreads(); /* this buffer may be refilled by the next iteration's prefetch */
    }
    kvb ^= nkv & 1; /* the buffer after the last one used holds the prefetched keys */
    if (prefetched) qb ^= 1;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int qr0 = wr0 + mt * 16 + g, qr1 = qr0 + 8;
      const float inv0 = l[mt][0] > 0.f ? 1.f / l[mt][0] : 0.f, inv1 = l[mt][1] > 0.f ? 1.f / l[mt][1] : 0.f;
#pragma unroll
      for (int nn = 0; nn < NT; ++nn) {
        const int c = h * D + nn * 8 + 2 * t;
        if (qr0 < len)
          *reinterpret_cast<uint32_t *>(p.out + (s0 + qr0) * (size_t)p.ld_out + c) =
              pack_bf16(o[mt][nn][0] * inv0, o[mt][nn][1] * inv0);
        if (qr1 < len)
          *reinterpret_cast<uint32_t *>(p.out + (s0 + qr1) * (size_t)p.ld_out + c) =
              pack_bf16(o[mt][nn][2] * inv1, o[mt][nn][3] * inv1);
      }
    }
  }
  cp_async_wait<0>();
}

/* ---- wgmma path (sm_90a; VR_CUDA_ATTN=wgmma, head_dim 64) ----
 * One warpgroup (4 warps, 16 query rows each) per 64-row query tile; 3 blocks per SM (137
 * registers; bounding them for 4 spilled and measured the same).
 * Measured on the H200 it is SLOWER than the mma.sync kernels it would replace (32 x 512
 * roberta-base heads: 127 TFLOP/s against 184 for k_attn_fa, roberta-base 256 packed 29.5
 * against 28.2 ms), so it is not selected by default: kept, tested, behind
 * VR_CUDA_ATTN=wgmma, as the base for a TMA / warp-specialised version.
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
#endif

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

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
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
  __trap(); /* built without sm_90a code: vr_cuda_attention never selects this kernel then */
#endif
}

/* Fallback: one warp per query row; dynamic shared memory NWARP * D floats (q). */
__global__ void __launch_bounds__(NWARP * 32) k_attn_generic(attn_params p, int D) {
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

/* -------------------------------------------------------------- launchers */

extern "C" int vr_cuda_attention_path(int D);

/* Raises kernel's dynamic shared-memory limit to bytes, once per device: the attribute
 * belongs to the function on the current device; done: the calling launcher's flags. */
template <typename K>
static void set_smem_once(K kernel, size_t bytes, int (&done)[64]) {
  const int dev = vr_cuda_current_device_();
  if (dev >= 0 && dev < 64 && done[dev]) return;
  VR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  if (dev >= 0 && dev < 64) done[dev] = 1;
}

/* Which tensor-core kernel runs (vr_cuda_attention_set_impl overrides; the environment
 * VR_CUDA_ATTN is read once): 6 (default, "auto") see fa_for; 5 ("fa128") k_attn_fa with
 * 4 warps x 32 rows on 128-row tiles; 2 ("fa2") 2 warps x 32 rows; 3 ("fa4") 4 warps x 16
 * rows; 4 ("fa4r") the same with registers bounded for 4 blocks per SM; 1 ("mma")
 * k_attn_mma; 0 ("wmma") k_attn_wmma. */
static int g_attn_impl = -1;

extern "C" void vr_cuda_attention_set_impl(int impl) { g_attn_impl = impl; }

extern "C" int vr_cuda_attention_has_wgmma(void) {
#ifdef VR_CUDA_HAVE_WGMMA
  return 1;
#else
  return 0;
#endif
}

static int attn_impl(void) {
  if (g_attn_impl < 0) {
    const char *e = getenv("VR_CUDA_ATTN");
    g_attn_impl = !e                    ? 6
                  : !strcmp(e, "wmma")  ? 0
                  : !strcmp(e, "mma")   ? 1
                  : !strcmp(e, "fa2")   ? 2
                  : !strcmp(e, "fa4")   ? 3
                  : !strcmp(e, "fa4r")  ? 4
                  : !strcmp(e, "fa128") ? 5
                  : !strcmp(e, "fa128q") ? 7
                  : !strcmp(e, "fa4q")  ? 8
                  : !strcmp(e, "wgmma") ? 9
                                        : 6;
  }
  return g_attn_impl;
}

/* auto (6): 128-row tiles for D <= 64 in batches of at least this many rows (or an unknown
 * count); below it, and for D = 128, four warps of 16 rows on 64-row tiles: with few tiles
 * the GPU is not full and a smaller tile spreads the work over more blocks (H200, 1 x 512
 * roberta-base heads: 16 us four-warp, 18 us 128-row, 17 us two-warp). */
#define VR_ATTN2_MIN_ROWS 4096

template <int D, int TM>
struct fa_smem {
  static constexpr size_t bytes = (size_t)(2 * TM + 4 * 64) * mma_smem<D>::LD * 2; /* Q[2], K[2], V[2] */
};

/* The k_attn_fa variants by impl number (2..5); D-independent shape parameters. */
template <int D, int IMPL>
struct fa_cfg;
template <int D>
struct fa_cfg<D, 2> { /* 2 warps x 32 rows (D <= 64: 255 registers at D = 64) */
  static constexpr int NW = 2, MT = 2, MINB = 1;
  static constexpr bool QSM = false;
};
template <int D>
struct fa_cfg<D, 3> { /* 4 warps x 16 rows */
  static constexpr int NW = 4, MT = 1, MINB = 1;
  static constexpr bool QSM = false;
};
template <int D>
struct fa_cfg<D, 4> { /* 4 warps x 16 rows, registers bounded for 4 blocks (16 warps) per SM */
  static constexpr int NW = 4, MT = 1, MINB = 4;
  static constexpr bool QSM = false;
};
template <int D>
struct fa_cfg<D, 5> { /* 4 warps x 32 rows: 128-row query tiles (D <= 64) */
  static constexpr int NW = 4, MT = 2, MINB = 1;
  static constexpr bool QSM = false;
};
template <int D>
struct fa_cfg<D, 7> { /* 128-row tiles, Q fragments read from shared memory each key tile */
  static constexpr int NW = 4, MT = 2, MINB = 1;
  static constexpr bool QSM = true;
};
template <int D>
struct fa_cfg<D, 8> { /* 4 warps x 16 rows, Q from shared memory, registers for 3 blocks per SM */
  static constexpr int NW = 4, MT = 1, MINB = 3;
  static constexpr bool QSM = true;
};

/* The kernel a launch takes: its k_attn_fa impl number (2..5), or 0 for k_attn_mma /
 * k_attn_wmma (impl 1 / 0). Two m-tiles per warp (2, 5) need D <= 64; D = 128 takes 3. */
static int fa_for(int D, int rows_hint) {
  if (vr_cuda_attention_path(D) != 1) return 0; /* the fp32 fallback */
  int i = attn_impl();
#ifdef VR_CUDA_HAVE_WGMMA
  if (i == 9) return D == 64 ? 9 : 3; /* the wgmma kernel: head_dim 64 only */
#else
  if (i == 9) { /* built without sm_90a code (the CUDA architectures are not exactly 90a) */
    static int told;
    if (!told) vr_log(VR_LOG_WARN, "VR_CUDA_ATTN=wgmma: this build has no sm_90a code (configure with -DVR_CUDA_ARCH=90a); using fa4");
    told = 1;
    i = 3;
  }
#endif
  if (i == 6) i = D <= 64 && (rows_hint <= 0 || rows_hint >= VR_ATTN2_MIN_ROWS) ? 5 : 3;
  if ((i == 2 || i == 5 || i == 7) && D > 64) i = 3;
  return i >= 2 ? i : 0;
}

extern "C" int vr_cuda_attention_tile_rows(int D, int rows_hint) {
  const int fa = fa_for(D, rows_hint);
  return fa == 5 || fa == 7 ? 128 : 64;
}

template <int D, int IMPL>
static void launch_fa_impl(const attn_params &p, dim3 grid, cudaStream_t s) {
  typedef fa_cfg<D, IMPL> F;
  const size_t sh = fa_smem<D, F::NW * F::MT * 16>::bytes;
  static int attr_set[64];
  set_smem_once(k_attn_fa<D, F::NW, F::MT, F::MINB, F::QSM>, sh, attr_set);
  k_attn_fa<D, F::NW, F::MT, F::MINB, F::QSM><<<grid, F::NW * 32, sh, s>>>(p);
  VR_CUDA_CHECK_LAUNCH();
}

template <int D>
static void launch_mma(const attn_params &p, dim3 grid, cudaStream_t s) {
  const size_t sh = mma_smem<D>::bytes;
  static int attr_set[64];
  set_smem_once(k_attn_mma<D>, sh, attr_set);
  k_attn_mma<D><<<grid, NWARP * 32, sh, s>>>(p);
  VR_CUDA_CHECK_LAUNCH();
}

static void launch_wg64(const attn_params &p, dim3 grid, cudaStream_t s) {
  static int attr_set[64];
  set_smem_once(k_attn_wg64, WG_SMEM_BYTES, attr_set);
  k_attn_wg64<<<grid, 128, WG_SMEM_BYTES, s>>>(p);
  VR_CUDA_CHECK_LAUNCH();
}

template <int D>
static void launch_fa(int impl, const attn_params &p, dim3 grid, cudaStream_t s) {
  if (impl == 9) {
    launch_wg64(p, grid, s);
    return;
  }
  if (impl == 2) launch_fa_impl<D <= 64 ? D : 64, 2>(p, grid, s);
  else if (impl == 5) launch_fa_impl<D <= 64 ? D : 64, 5>(p, grid, s);
  else if (impl == 7) launch_fa_impl<D <= 64 ? D : 64, 7>(p, grid, s);
  else if (impl == 8) launch_fa_impl<D, 8>(p, grid, s);
  else if (impl == 3) launch_fa_impl<D, 3>(p, grid, s);
  else launch_fa_impl<D, 4>(p, grid, s);
}

template <int D>
static void launch_wmma(const attn_params &p, dim3 grid, int rows_hint, cudaStream_t s) {
  const int fa = fa_for(D, rows_hint);
  if (fa) {
    launch_fa<D>(fa, p, grid, s);
    return;
  }
  if (attn_impl() >= 1) {
    launch_mma<D>(p, grid, s);
    return;
  }
  const size_t sh = attn_smem<D>::bytes;
  static int attr_set[64];
  set_smem_once(k_attn_wmma<D>, sh, attr_set);
  k_attn_wmma<D><<<grid, NWARP * 32, sh, s>>>(p);
  VR_CUDA_CHECK_LAUNCH();
}

template <typename K>
static int resident_of(K kernel, int threads, int sh) {
  int n = 0;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sh) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, (size_t)sh) != cudaSuccess)
    n = 0;
  (void)cudaGetLastError();
  return n > 0 ? n : 1;
}

template <int D, int IMPL>
static int resident_fa(void) {
  typedef fa_cfg<D, IMPL> F;
  return resident_of(k_attn_fa<D, F::NW, F::MT, F::MINB, F::QSM>, F::NW * 32,
                     (int)fa_smem<D, F::NW * F::MT * 16>::bytes);
}

template <int D>
static int resident_mma(int rows_hint) {
  constexpr int DD = D <= 64 ? D : 64;
  switch (fa_for(D, rows_hint)) {
    case 2: return resident_fa<DD, 2>();
    case 5: return resident_fa<DD, 5>();
    case 7: return resident_fa<DD, 7>();
    case 3: return resident_fa<D, 3>();
    case 4: return resident_fa<D, 4>();
    case 8: return resident_fa<D, 8>();
    case 9: return resident_of(k_attn_wg64, 128, (int)WG_SMEM_BYTES);
    default: break;
  }
  return resident_of(k_attn_mma<D>, NWARP * 32, (int)mma_smem<D>::bytes);
}

extern "C" int vr_cuda_attention_resident_blocks(int D, int rows_hint) {
  if (attn_impl() == 0) return 2;
  switch (D) {
    case 16: return resident_mma<16>(rows_hint);
    case 32: return resident_mma<32>(rows_hint);
    case 64: return resident_mma<64>(rows_hint);
    case 128: return resident_mma<128>(rows_hint);
    default: return 4;
  }
}

extern "C" int vr_cuda_attention_path(int D) {
  if (D == 16 || D == 32 || D == 64 || D == 128) return 1;
  if (D >= 1 && D <= 256) return 0;
  return -1;
}

extern "C" void vr_cuda_attention(const uint16_t *qkv, int ld, int q_off, int k_off, int v_off,
                                  uint16_t *out, int ld_out, const int32_t *cu,
                                  const int32_t *tiles, const int32_t *meta, int grid_tiles, int H,
                                  int Hkv, int D, int causal, int window, float scale, int rows_hint,
                                  cudaStream_t s) {
  if (grid_tiles <= 0) return;
  VR_ASSERT(H > 0 && Hkv > 0 && H % Hkv == 0 && vr_cuda_attention_path(D) >= 0);
  attn_params p;
  p.qkv = reinterpret_cast<const bf16 *>(qkv);
  p.out = reinterpret_cast<bf16 *>(out);
  p.cu = cu;
  p.tiles = tiles;
  p.meta = meta;
  p.ld = ld;
  p.q_off = q_off;
  p.k_off = k_off;
  p.v_off = v_off;
  p.ld_out = ld_out;
  p.H = H;
  p.Hkv = Hkv;
  p.causal = causal;
  p.window = window;
  p.scale_log2 = scale * 1.4426950408889634f;
  const dim3 grid((unsigned)grid_tiles, (unsigned)H);
  switch (D) {
    case 16: launch_wmma<16>(p, grid, rows_hint, s); return;
    case 32: launch_wmma<32>(p, grid, rows_hint, s); return;
    case 64: launch_wmma<64>(p, grid, rows_hint, s); return;
    case 128: launch_wmma<128>(p, grid, rows_hint, s); return;
    default:
      k_attn_generic<<<grid, NWARP * 32, NWARP * D * sizeof(float), s>>>(p, D);
      VR_CUDA_CHECK_LAUNCH();
  }
}
