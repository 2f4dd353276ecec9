/* vr_cutrain_lmhead_sm90.cuh: the LM head's forward on Hopper (sm_90a) as one GEMM whose epilogue
 * takes the log-softmax statistics from the accumulators, so no (rows, V) fp32 logits exist
 * (included by vr_cutrain_lmhead.cu; contract of vr_cutrain_lmhead_fwd in vr_cutrain_ops.h).
 *
 * k_lmhead_sm90: a persistent grid (one block per multiprocessor) over output tiles of
 * LH_BM x LH_BN = 128 x 256 of z = x W^T / temp. A block is three warpgroups: warpgroup 0's first
 * thread is the producer (bulk tensor copies, 128-byte swizzle, of each LH_BK = 64-wide k-chunk:
 * x's 128 x 64 box and W's 256 x 64 box, into a ring of LH_STAGES stages guarded by full / empty
 * mbarriers, running ahead across tiles, so the next tile's first chunks load during this tile's
 * epilogue); warpgroups 1 and 2 each own 64 rows of the tile (one m64n256k16 wgmma per 16 of K,
 * 128 fp32 accumulators a thread). Rows past T and columns past V come in as zeros (the tensor
 * maps' bounds); the epilogue masks those columns to -inf and skips those rows.
 *
 * Epilogue, per row and 128-column segment s (VR_CUTRAIN_LSM_SEG) of the tile (the four threads
 * of a quad hold a row's segment, 32 values each; quad shuffles): m_s = max z, s_s = sum
 * e^(z - m_s), w_s = sum e^(z - m_s) z; lp16 given: bf16(z - m_s) into lp16 and m_s into lpmax
 * (the stored log-softmax of k_logsoftmax_rows, the same segments); the target's z (fp32) into zt
 * when the target column is in the tile; the tile's (m, s, w) (its two segments merged in order)
 * into stats (rows, NB) float4. k_lmhead_combine then merges a row's NB tiles in a fixed order
 * (deterministic: no atomics, the same bits for any schedule) into lse, ent, logp.
 *
 * Tile order (lh_tile): bands of GM row blocks; inside a band the row block varies fastest, so the
 * ~132 tiles running at once share two or three W column blocks (W streams from HBM once per
 * band) while the band's x (GM * 128 * C bf16) stays in L2. Only sm_90a code has the body. */
#ifndef VR_CUTRAIN_LMHEAD_SM90_CUH
#define VR_CUTRAIN_LMHEAD_SM90_CUH

#include "vr_cuda_sm90.cuh"

#define LH_BM 128
#define LH_BN 256
#define LH_BK 64
#define LH_STAGES 4
#define LH_THREADS 384 /* the producer warpgroup + two consumer warpgroups */
#define LH_REG_PRODUCER 40
#define LH_REG_CONSUMER 232

namespace {

constexpr uint32_t LH_A_BYTES = LH_BM * 128, LH_B_BYTES = LH_BN * 128, LH_STAGE = LH_A_BYTES + LH_B_BYTES;
constexpr uint32_t LH_BAR_OFF = LH_STAGES * LH_STAGE;
constexpr size_t LH_SMEM = LH_BAR_OFF + 16 * LH_STAGES + 1024; /* + alignment slack */
static_assert(LH_BN == 2 * VR_CUTRAIN_LSM_SEG, "a tile holds two stored-log-softmax segments");

struct lh_params {
  uint16_t *lp16; /* (rows, V) or NULL */
  float *lpmax;   /* (rows, nseg) */
  float4 *stats;  /* (rows, NB): m, s, w of each tile */
  float *zt;      /* (rows): z of the target */
  const int32_t *tgt;
  int T, V, nk, MB, NB, GM, nseg, tiles;
  float inv_temp;
};

/* Tile t's row block mb and column block nb (band-major, row block fastest inside a band). */
__device__ __forceinline__ void lh_tile(const lh_params &p, int t, int &mb, int &nb) {
  const int per_band = p.GM * p.NB, band = t / per_band, mb0 = band * p.GM;
  const int rows_b = p.MB - mb0 < p.GM ? p.MB - mb0 : p.GM, local = t - band * per_band;
  nb = local / rows_b;
  mb = mb0 + local % rows_b;
}

__global__ void __launch_bounds__(LH_THREADS, 1)
    k_lmhead_sm90(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw, lh_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char lh_smem_raw[];
  const uint32_t base = ((uint32_t)__cvta_generic_to_shared(lh_smem_raw) + 1023u) & ~1023u;
  const uint32_t full = base + LH_BAR_OFF, empty = full + 8 * LH_STAGES;
  const int wg = (int)threadIdx.x >> 7;
  if (threadIdx.x == 0) {
    for (int s = 0; s < LH_STAGES; ++s) {
      mb_init(full + 8 * s, 1);
      mb_init(empty + 8 * s, 256);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (wg == 0) { /* producer */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(LH_REG_PRODUCER) : "memory");
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tx)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tw)) : "memory");
      int it = 0;
      for (int t = blockIdx.x; t < p.tiles; t += gridDim.x) {
        int mb, nb;
        lh_tile(p, t, mb, nb);
        for (int k = 0; k < p.nk; ++k, ++it) {
          const int s = it % LH_STAGES;
          const uint32_t st = base + s * LH_STAGE;
          mb_wait(empty + 8 * s, ((it / LH_STAGES) & 1) ^ 1); /* a fresh barrier passes parity 1 */
          mb_expect_tx(full + 8 * s, LH_STAGE);
          tma_box(st, &tx, k * LH_BK, mb * LH_BM, full + 8 * s);
          tma_box(st + LH_A_BYTES, &tw, k * LH_BK, nb * LH_BN, full + 8 * s);
        }
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(LH_REG_CONSUMER) : "memory");
  const int cw = wg - 1, warp = ((int)threadIdx.x >> 5) & 3, lane = (int)threadIdx.x & 31, g = lane >> 2,
            tq = lane & 3;
  const float it_ = p.inv_temp;
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
  int it = 0;
  for (int t = blockIdx.x; t < p.tiles; t += gridDim.x) {
    int mb, nb;
    lh_tile(p, t, mb, nb);
    for (int k = 0; k < p.nk; ++k, ++it) {
      const int s = it % LH_STAGES;
      const uint32_t a_at = base + s * LH_STAGE + cw * (64 * 128), b_at = base + s * LH_STAGE + LH_A_BYTES;
      uint64_t da[4], db[4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        da[kk] = f3_desc(a_at + kk * 32, 16, 1024);
        db[kk] = f3_desc(b_at + kk * 32, 16, 1024);
        asm volatile("" : "+l"(da[kk]), "+l"(db[kk]));
      }
      mb_wait(full + 8 * s, (it / LH_STAGES) & 1);
      f3_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wg_ss256(acc, da[kk], db[kk], (k | kk) != 0);
      f3_commit();
      if (k > 0) { /* one chunk's products in flight: the previous chunk's stage is free */
        f3_wait<1>();
        mb_arrive(empty + 8 * ((it - 1) % LH_STAGES));
      }
    }
    f3_wait<0>();
    f3_pin(acc);
    mb_arrive(empty + 8 * ((it - 1) % LH_STAGES));
    /* epilogue: acc[4 j + 2 h + e] is row 64 cw + 16 warp + g + 8 h, column 8 j + 2 tq + e of the tile */
    const int n0 = nb * LH_BN;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = mb * LH_BM + cw * 64 + warp * 16 + g + 8 * h;
      const bool rv = row < p.T;
      const int y = rv ? p.tgt[row] : -1;
      float M = -INFINITY, S = 0.f, Wz = 0.f;
#pragma unroll
      for (int sg = 0; sg < 2; ++sg) {
        const int c0 = n0 + sg * VR_CUTRAIN_LSM_SEG;
        if (c0 < p.V) { /* the segment exists (uniform across the warp) */
          float mx = -INFINITY;
#pragma unroll
          for (int j = 16 * sg; j < 16 * sg + 16; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int col = n0 + 8 * j + 2 * tq + e;
              float &z = acc[4 * j + 2 * h + e];
              z = col < p.V ? z * it_ : -INFINITY;
              mx = fmaxf(mx, z);
              if (col == y) p.zt[row] = z;
            }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2)); /* finite: column c0 exists */
          float ss = 0.f, ww = 0.f;
#pragma unroll
          for (int j = 16 * sg; j < 16 * sg + 16; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float z = acc[4 * j + 2 * h + e];
              if (z != -INFINITY) {
                const float ex = __expf(z - mx);
                ss += ex, ww = fmaf(ex, z, ww);
              }
            }
          ss += __shfl_xor_sync(0xffffffffu, ss, 1);
          ww += __shfl_xor_sync(0xffffffffu, ww, 1);
          ss += __shfl_xor_sync(0xffffffffu, ss, 2);
          ww += __shfl_xor_sync(0xffffffffu, ww, 2);
          if (p.lp16 && rv) {
            uint16_t *o = p.lp16 + (size_t)row * p.V;
#pragma unroll
            for (int j = 16 * sg; j < 16 * sg + 16; ++j) {
              const int col = n0 + 8 * j + 2 * tq;
              const uint16_t q0 = to_bf(acc[4 * j + 2 * h] - mx), q1 = to_bf(acc[4 * j + 2 * h + 1] - mx);
              if (col + 1 < p.V && !(p.V & 1)) {
                *reinterpret_cast<uint32_t *>(o + col) = (uint32_t)q0 | ((uint32_t)q1 << 16);
              } else {
                if (col < p.V) o[col] = q0;
                if (col + 1 < p.V) o[col + 1] = q1;
              }
            }
            if (tq == 0) p.lpmax[(size_t)row * p.nseg + c0 / VR_CUTRAIN_LSM_SEG] = mx;
          }
          /* merge into the tile's statistics (lsm_merge's formula; M = -inf at the first) */
          if (M == -INFINITY) {
            M = mx, S = ss, Wz = ww;
          } else {
            const float mn = fmaxf(M, mx), ra = __expf(M - mn), rb = __expf(mx - mn);
            S = S * ra + ss * rb, Wz = Wz * ra + ww * rb, M = mn;
          }
        }
      }
      if (rv && tq == 0) p.stats[(size_t)row * p.NB + nb] = make_float4(M, S, Wz, 0.f);
    }
  }
#endif
}

} /* namespace */
#endif /* VR_CUTRAIN_LMHEAD_SM90_CUH */
