/* vr_cutrain_lmhead_sm90.cuh: the LM head's forward on Hopper (sm_90a) as one GEMM whose epilogue
 * takes the log-softmax statistics from the accumulators, so no (rows, V) fp32 logits exist
 * (included by vr_cutrain_lmhead.cu; contract of vr_cutrain_lmhead_fwd in vr_cutrain_ops.h).
 *
 * k_lmhead_sm90<FORM>: a persistent grid (one block per multiprocessor) over output tiles of
 * z = x W^T / temp, LH_BN = 256 columns wide. A block is three warpgroups: warpgroup 0's first
 * thread is the producer (bulk tensor copies, 128-byte swizzle, of each LH_BK = 64-wide k-chunk:
 * x's box and W's 256 x 64 box, into a ring of LH_STAGES stages guarded by full / empty
 * mbarriers, running ahead across tiles, so the next tile's first chunks load during this tile's
 * epilogue); warpgroups 1 and 2 are the consumers (one m64n256k16 wgmma per 16 of K, 128 fp32
 * accumulators a thread). Forms (lh_form): LH_COOP (the engine's), a tile is 128 rows, 64 for
 * each consumer, and the tensor cores wait while both do the epilogue (on the H200 the main loop
 * alone took 4.4 ms of this form's 7.3 ms Qwen2-0.5B log-prob forward); LH_PP, ping-pong: a tile
 * is 64 rows and one consumer's, the block's tiles alternating, so one's epilogue runs under the
 * other's products; LH_PP2, the same in clusters of two blocks that multicast W. Both ping-pong
 * forms measured slower (docs/benchmarks.md: 8.5 and 11.7 ms against 7.2 on that forward): a
 * 64-row tile brings as many W bytes into shared memory as a 128-row one, so the ring must move
 * 1.7x the bytes per product, and the one-block forms' ring traffic (~11-12 TB/s over the card)
 * already bounds the main loop (the pairs halve the L2 reads of W but not the shared-memory
 * fill, and each pair waits for its slower block). Rows past T and columns past V come in as
 * zeros (the tensor maps' bounds); the epilogue masks those columns to -inf and skips those rows.
 *
 * Epilogue (lh_epilogue), per row and 128-column segment s (VR_CUTRAIN_LSM_SEG) of
 * the tile (the four threads of a quad hold a row's segment, 32 values each; quad shuffles):
 * m_s = max z, s_s = sum e^(z - m_s), w_s = sum e^(z - m_s) z (in base 2: one ex2 each); lp16
 * given: bf16(z - m_s) into lp16 and m_s into lpmax (the stored log-softmax of k_logsoftmax_rows,
 * the same segments), staged in shared memory and written by bulk tensor stores when V % 8 == 0
 * (full lines, asynchronous), else by plain stores; the target's z (fp32) into zt when the target
 * column is in the tile; the tile's (m, s, w) (its two segments merged in order) into stats
 * (rows, NB) float4. k_lmhead_combine then merges a row's NB tiles in a fixed order
 * (deterministic: no atomics, the same bits for any schedule or form) into lse, ent, logp.
 *
 * Tile order (g90_tile, vr_cutrain_gemm_sm90.cuh, which also has the main loop): bands of GM row
 * blocks; inside a band the row block varies fastest, so the ~132-264 tiles running at once share
 * two or three W column blocks (W streams from HBM once per band) while the band's x (GM * 128 * C
 * bf16) stays in L2. Only sm_90a code has the body. */
#ifndef VR_CUTRAIN_LMHEAD_SM90_CUH
#define VR_CUTRAIN_LMHEAD_SM90_CUH

#include "vr_cutrain_gemm_sm90.cuh"

#define LH_BM G90_BM /* rows of the cooperative form's tile; the ping-pong form's: LH_BM_PP */
#define LH_BM_PP 64
#define LH_BN G90_BN
#define LH_BK G90_BK
#define LH_STAGES 4
#define LH_THREADS G90_THREADS

namespace {

/* The kernel's forms (lh_form<FORM>): LH_COOP, two consumer warpgroups on each 128-row tile;
 * LH_PP, ping-pong over 64-row tiles; LH_PP2, ping-pong in clusters of two blocks on neighbouring
 * row blocks that share each W column block: each block loads half of the 256 W rows of a stage
 * and multicasts it to both, so W is read from L2 once per 128 rows as in LH_COOP. A form's layout: a stage is x's box (the tile's rows
 * x 64) then W's 256 x 64 box; after the ring, each consumer warpgroup's staging of one segment of
 * its lp16 rows (64 rows x 128 bf16 = two 64 x 64 boxes of the 128-byte swizzle) for the bulk
 * tensor stores, then the barriers. */
enum { LH_COOP = 0, LH_PP = 1, LH_PP2 = 2 };
template <int FORM>
struct lh_form {
  static constexpr int BM = FORM == LH_COOP ? LH_BM : LH_BM_PP, CL = FORM == LH_PP2 ? 2 : 1;
  static constexpr uint32_t A_BYTES = BM * 128, STAGE = A_BYTES + G90_B_BYTES;
  static constexpr uint32_t STG_BYTES = 64 * VR_CUTRAIN_LSM_SEG * 2, STG_OFF = LH_STAGES * STAGE;
  static constexpr uint32_t BAR_OFF = STG_OFF + 2 * STG_BYTES;
  static constexpr size_t SMEM = BAR_OFF + 16 * LH_STAGES + 1024; /* + alignment slack */
  static_assert(SMEM <= 227 * 1024, "the shared memory of one block");
};

struct lh_params {
  uint16_t *lp16; /* (rows, V) or NULL */
  float *lpmax;   /* (rows, nseg) */
  float4 *stats;  /* (rows, NB): m, s, w of each tile */
  float *zt;      /* (rows): z of the target */
  const int32_t *tgt;
  int T, V, nk, MB, NB, GM, nseg, tiles;
  float inv_temp;
  int tma_lp; /* lp16 through the staging and bulk tensor stores (tl), else plain stores */
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LH_LOG2E 1.4426950408889634f
#define LH_LN2 0.6931471805599453f
__device__ __forceinline__ float lh_ex2(float x) { /* 2^x, ex2.approx (as __expf's core); 2^-inf = 0 */
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* The epilogue of one consumer warpgroup's 64 rows of a tile (acc: the raw x W^T). In the
 * base-2 domain: z2 = acc inv_temp log2(e), so each exponential is one ex2 (z - m = (z2 - m2) ln 2);
 * the statistics return to the natural domain where they are stored. FULL: every column of the
 * tile is < V (no masking). rt: the warpgroup's first row. Loop order: segment, then the thread's
 * two rows, every step unrolled. */
template <bool FULL>
__device__ __forceinline__ void lh_epilogue(float (&acc)[128], const lh_params &p, const CUtensorMap *tl,
                                            uint32_t stg, int rt, int nb, int cw, int warp, int g, int tq) {
  const int n0 = nb * LH_BN, r0 = rt + warp * 16 + g;
  const float k2 = p.inv_temp * LH_LOG2E;
  float M[2], S[2], Wz[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = r0 + 8 * h, y = row < p.T ? p.tgt[row] : -1;
    if (y >= n0 && y < n0 + LH_BN) { /* the target's z from the raw accumulator, as the row kernel's */
#pragma unroll
      for (int j = 0; j < 32; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (n0 + 8 * j + 2 * tq + e == y) p.zt[row] = acc[4 * j + 2 * h + e] * p.inv_temp;
    }
    M[h] = -INFINITY, S[h] = 0.f, Wz[h] = 0.f;
  }
#pragma unroll
  for (int sg = 0; sg < 2; ++sg) {
    const int c0 = n0 + sg * VR_CUTRAIN_LSM_SEG;
    if (!FULL && c0 >= p.V) break; /* uniform across the warpgroup (named barrier 1 + cw) */
    float mx[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float q[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}; /* four chains for the latency */
#pragma unroll
      for (int j = 16 * sg; j < 16 * sg + 16; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float &z = acc[4 * j + 2 * h + e];
          z = FULL || n0 + 8 * j + 2 * tq + e < p.V ? z * k2 : -INFINITY;
          q[(j & 1) * 2 + e] = fmaxf(q[(j & 1) * 2 + e], z);
        }
      mx[h] = fmaxf(fmaxf(q[0], q[1]), fmaxf(q[2], q[3]));
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2)); /* finite: column c0 exists */
    }
    if (p.lp16) {
      if (p.tma_lp) {
        /* the segment's bf16(z - m_s) through the staging: two 64 x 64 bulk tensor stores (rows
         * past T and columns past V are clipped by the tensor map) */
        uint32_t v[2][16];
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int jj = 0; jj < 16; ++jj) {
            const int j = 16 * sg + jj;
            v[h][jj] = g90_bf2((acc[4 * j + 2 * h] - mx[h]) * LH_LN2, (acc[4 * j + 2 * h + 1] - mx[h]) * LH_LN2);
          }
        g90_store_round(v, tl, stg, c0, rt, cw, warp, g, tq);
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = r0 + 8 * h;
          if (row >= p.T) continue;
          uint16_t *o = p.lp16 + (size_t)row * p.V;
#pragma unroll
          for (int j = 16 * sg; j < 16 * sg + 16; ++j) {
            const int col = n0 + 8 * j + 2 * tq;
            const uint32_t v = g90_bf2((acc[4 * j + 2 * h] - mx[h]) * LH_LN2, (acc[4 * j + 2 * h + 1] - mx[h]) * LH_LN2);
            if ((FULL || col + 1 < p.V) && !(p.V & 1)) {
              *reinterpret_cast<uint32_t *>(o + col) = v;
            } else {
              if (FULL || col < p.V) o[col] = (uint16_t)v;
              if (FULL || col + 1 < p.V) o[col + 1] = (uint16_t)(v >> 16);
            }
          }
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h)
        if (tq == 0 && r0 + 8 * h < p.T) p.lpmax[(size_t)(r0 + 8 * h) * p.nseg + c0 / VR_CUTRAIN_LSM_SEG] = mx[h] * LH_LN2;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float ss[2] = {0.f, 0.f}, ww[2] = {0.f, 0.f};
#pragma unroll
      for (int j = 16 * sg; j < 16 * sg + 16; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float z = acc[4 * j + 2 * h + e];
          if (FULL || n0 + 8 * j + 2 * tq + e < p.V) {
            const float ex = lh_ex2(z - mx[h]);
            ss[j & 1] += ex, ww[j & 1] = fmaf(ex, z, ww[j & 1]);
          }
        }
      float s2 = ss[0] + ss[1], w2 = ww[0] + ww[1];
      s2 += __shfl_xor_sync(0xffffffffu, s2, 1);
      w2 += __shfl_xor_sync(0xffffffffu, w2, 1);
      s2 += __shfl_xor_sync(0xffffffffu, s2, 2);
      w2 += __shfl_xor_sync(0xffffffffu, w2, 2);
      /* merge into the row's tile statistics (base 2; M = -inf at the first segment) */
      if (sg == 0) {
        M[h] = mx[h], S[h] = s2, Wz[h] = w2;
      } else {
        const float mn = fmaxf(M[h], mx[h]), ra = lh_ex2(M[h] - mn), rb = lh_ex2(mx[h] - mn);
        S[h] = S[h] * ra + s2 * rb, Wz[h] = Wz[h] * ra + w2 * rb, M[h] = mn;
      }
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h)
    if (tq == 0 && r0 + 8 * h < p.T)
      p.stats[(size_t)(r0 + 8 * h) * p.NB + nb] = make_float4(M[h] * LH_LN2, S[h], Wz[h] * LH_LN2, 0.f);
}
#endif

template <int FORM>
__global__ void __launch_bounds__(LH_THREADS, 1)
    k_lmhead_sm90(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw,
                  const __grid_constant__ CUtensorMap tl, lh_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using F = lh_form<FORM>;
  constexpr bool PP = FORM != LH_COOP, CLU = F::CL > 1;
  extern __shared__ unsigned char lh_smem_raw[];
  uint32_t base;
  /* a stage is released by its consumer warpgroup(s) in this block and, in a pair, the peer's */
  const int wg = g90_start(lh_smem_raw, base, F::BAR_OFF, LH_STAGES, (PP ? 128 : 256) * F::CL, CLU);
  const uint32_t full = base + F::BAR_OFF, empty = full + 8 * LH_STAGES;
  const int rank = CLU ? (int)(blockIdx.x % F::CL) : 0;
  /* in a pair, p.MB counts pairs of row blocks and the tile sequence is the pair's */
  const g90_sched sc = {p.tiles, (int)blockIdx.x / F::CL, (int)gridDim.x / F::CL, p.GM, p.MB, p.NB, F::CL, rank};
  if (wg == 0) { /* producer */
    g90_producer_regs();
    g90_produce<LH_STAGES, F::STAGE>(base, full, empty, sc, p.nk, &tx, &tw,
                                     [&](uint32_t st, int k, int mb, int nb, uint32_t bar) {
                                       tma_box(st, &tx, k * LH_BK, mb * F::BM, bar);
                                       if constexpr (CLU) /* this block's half of W's rows, to both */
                                         g90_tma_mc(st + F::A_BYTES + rank * (LH_BN / 2 * 128), &tw, k * LH_BK,
                                                    nb * LH_BN + rank * (LH_BN / 2), bar, 0x3);
                                       else
                                         tma_box(st + F::A_BYTES, &tw, k * LH_BK, nb * LH_BN, bar);
                                     });
    if constexpr (CLU) g90_cluster_sync(); /* no block leaves while its peer may still write to it */
    return;
  }
  g90_consumer_regs();
  {
    const int cw = wg - 1, warp = ((int)threadIdx.x >> 5) & 3, lane = (int)threadIdx.x & 31, g = lane >> 2,
              tq = lane & 3;
    const uint32_t stg = base + F::STG_OFF + cw * F::STG_BYTES;
    const uint32_t peer_empty = CLU ? g90_peer(empty, (uint32_t)(rank ^ 1)) : 0u;
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.f;
    /* epilogue: acc[4 j + 2 h + e] is row rt + 16 warp + g + 8 h, column 8 j + 2 tq + e of the tile */
    auto epi = [&](float(&a)[128], int mb, int nb) {
      const int rt = mb * F::BM + (PP ? 0 : cw * 64);
      if ((nb + 1) * LH_BN <= p.V)
        lh_epilogue<true>(a, p, &tl, stg, rt, nb, cw, warp, g, tq);
      else
        lh_epilogue<false>(a, p, &tl, stg, rt, nb, cw, warp, g, tq);
    };
    if constexpr (PP) {
      g90_pingpong<LH_STAGES, F::STAGE, F::A_BYTES>(acc, base, full, empty, peer_empty, sc, p.nk, cw, epi);
    } else {
      int it = 0;
      for (int t = sc.t0; t < sc.tiles; t += sc.step) {
        int mb, nb;
        sc.at(t, mb, nb);
        g90_consume_tile<LH_STAGES, F::STAGE, F::A_BYTES>(acc, base, full, empty, p.nk, it, cw * (64 * 128));
        epi(acc, mb, nb);
      }
    }
    g90_store_drain(); /* the staging's last reads */
  }
  if constexpr (CLU) g90_cluster_sync(); /* nor while its peer may still arrive on its barriers */
#endif
}

} /* namespace */
#endif /* VR_CUTRAIN_LMHEAD_SM90_CUH */
