/* vr_cuda_attention_fa.cuh: the FlashAttention-2 kernel family on mma.sync m16n8k16 (bf16 in,
 * fp32 accumulate) and what its relatives share: the parameter block, the tile list, cp.async /
 * ldmatrix / mma wrappers, the online softmax of a 16-row m-tile, the launch and occupancy
 * helpers. Included by vr_cuda_attention.cu (the library, which instantiates the kernel the
 * automatic choice uses) and by tests/cuda/cuda_attention_bench.cu (the comparison variants:
 * other template arguments and the earlier kernels). Everything is in an anonymous namespace:
 * each including file has its own copies of the kernels and of their once-per-device flags.
 *
 * Fragment layouts of mma.sync m16n8k16 (g = lane / 4, t = lane % 4):
 *   A 16x16: a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
 *   B 16x8:  b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
 *   C 16x8:  c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
 * S = Q K^T accumulates in the C layout, whose row pairs are exactly the A-operand layout of
 * the P V product, so P never touches shared memory. K rows give B of Q K^T directly
 * (B[k][n] = K[n][k]); V gives B of P V through ldmatrix.trans. Row pitch D + 8 bf16 keeps
 * both access patterns free of bank conflicts. */
#ifndef VR_CUDA_ATTENTION_FA_CUH
#define VR_CUDA_ATTENTION_FA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "vr_cuda_check.h"
#include "vr_cuda_launch.cuh"
#include "vr_cuda_ops.h"

#define BM VR_CUDA_ATTN_BM
#define BN 64
#define NWARP 4

namespace {

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float bfv(const bf16 v) { return __bfloat162float(v); }

struct attn_params {
  const bf16 *qkv;
  bf16 *out;
  const int32_t *cu, *tiles, *meta;
  int ld, q_off, k_off, v_off, ld_out;
  int H, Hkv, causal, window;
  float scale_log2; /* scale * log2(e) */
  float *lse;       /* (T, H) log2-domain logsumexp of the scaled scores, or NULL (k_attn_fa only) */
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

/* Shared-memory row pitch of a 64-row tile of D dims (the mma.sync kernels). */
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

/* Rows [r0, r0 + ROWS) of one head (D bf16 at column col) into a tile of pitch D + 8 by a block
 * of NW warps, 16-byte cp.async; rows at or past `valid` are zero-filled (src-size 0: nothing
 * is read). */
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

/* Max / sum over the 4 lanes of a quad (t = lane % 4): one row's columns in the mma.sync C
 * layout. */
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  return v;
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}

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
  mx0 = quad_max(mx0);
  mx1 = quad_max(mx1);
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
  rs0 = quad_sum(rs0);
  rs1 = quad_sum(rs1);
  l0 = l0 * al0 + rs0;
  l1 = l1 * al1 + rs1;
}

/* NW warps of MT m16 tiles each: query tiles of TM = NW * MT * 16 rows (64, or 128: the
 * host then lists 128-row tiles, vr_cuda_attention_tile_rows); MINB: blocks per
 * multiprocessor the register allocation must allow (1: no bound); QSM: Q fragments read
 * from shared memory at every key tile instead of kept in registers. Shared memory:
 * fa_smem<D, TM>. A 128-row tile reads each K/V tile from L2 once for twice the query rows. */
template <int D, int NW, int MT, int MINB, bool QSM>
__global__ void __launch_bounds__(NW * 32, MINB) k_attn_fa(attn_params p) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
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
      if (p.lse && t == 0) { /* m, l are the quad's row values: one lane writes (training's backward) */
        if (qr0 < len) p.lse[(s0 + qr0) * (size_t)p.H + h] = m[mt][0] + log2f(l[mt][0]);
        if (qr1 < len) p.lse[(s0 + qr1) * (size_t)p.H + h] = m[mt][1] + log2f(l[mt][1]);
      }
    }
  }
  cp_async_wait<0>();
}

template <int D, int TM>
struct fa_smem {
  static constexpr size_t bytes = (size_t)(2 * TM + 4 * 64) * mma_smem<D>::LD * 2; /* Q[2], K[2], V[2] */
};

/* -------------------------------------------------------------- host helpers */

/* Raises kernel's dynamic shared-memory limit to bytes, once per device: the attribute
 * belongs to the function on the current device; done: the calling launcher's flags. */
template <typename K>
static void set_smem_once(K kernel, size_t bytes, int (&done)[64]) {
  const int dev = vr_cuda_current_device_();
  if (dev >= 0 && dev < 64 && done[dev]) return;
  VR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  if (dev >= 0 && dev < 64) done[dev] = 1;
}

/* Blocks of kernel (threads, sh bytes of dynamic shared memory) one multiprocessor holds at
 * once (occupancy query; >= 1). */
template <typename K>
static int resident_of(K kernel, int threads, int sh) {
  int n = 0;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sh) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, (size_t)sh) != cudaSuccess)
    n = 0;
  (void)cudaGetLastError();
  return n > 0 ? n : 1;
}

template <int D, int NW, int MT, int MINB, bool QSM>
static void fa_launch(const attn_params &p, dim3 grid, cudaStream_t s) {
  const size_t sh = fa_smem<D, NW * MT * 16>::bytes;
  static int attr_set[64];
  set_smem_once(k_attn_fa<D, NW, MT, MINB, QSM>, sh, attr_set);
  vr_launch(k_attn_fa<D, NW, MT, MINB, QSM>, dim3(grid), dim3(NW * 32), sh, s, p);
  VR_CUDA_CHECK_LAUNCH();
}

template <int D, int NW, int MT, int MINB, bool QSM>
static int fa_resident(void) {
  return resident_of(k_attn_fa<D, NW, MT, MINB, QSM>, NW * 32, (int)fa_smem<D, NW * MT * 16>::bytes);
}

/* The parameter block of one launch (arguments as vr_cuda_attention's). */
static attn_params attn_params_make(const uint16_t *qkv, int ld, int q_off, int k_off, int v_off, uint16_t *out,
                                    int ld_out, const int32_t *cu, const int32_t *tiles, const int32_t *meta, int H,
                                    int Hkv, int causal, int window, float scale) {
  const attn_params p = {reinterpret_cast<const bf16 *>(qkv), reinterpret_cast<bf16 *>(out), cu, tiles, meta, ld,
                         q_off, k_off, v_off, ld_out, H, Hkv, causal, window,
                         scale * 1.4426950408889634f /* scale * log2(e) */, NULL};
  return p;
}

} /* namespace */

#endif /* VR_CUDA_ATTENTION_FA_CUH */
