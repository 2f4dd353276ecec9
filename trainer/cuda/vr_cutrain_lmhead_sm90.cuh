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
 * Epilogue (lh_epilogue; not overlapped with the next tile's products: the consumers do it in
 * turn, the producer's loads run on), per row and 128-column segment s (VR_CUTRAIN_LSM_SEG) of
 * the tile (the four threads of a quad hold a row's segment, 32 values each; quad shuffles):
 * m_s = max z, s_s = sum e^(z - m_s), w_s = sum e^(z - m_s) z (in base 2: one ex2 each); lp16
 * given: bf16(z - m_s) into lp16 and m_s into lpmax (the stored log-softmax of k_logsoftmax_rows,
 * the same segments), staged in shared memory and written by bulk tensor stores when V % 8 == 0
 * (full lines, asynchronous), else by plain stores; the target's z (fp32) into zt when the target
 * column is in the tile; the tile's (m, s, w) (its two segments merged in order) into stats
 * (rows, NB) float4. k_lmhead_combine then merges a row's NB tiles in a fixed order
 * (deterministic: no atomics, the same bits for any schedule) into lse, ent, logp. On the H200
 * the main loop alone (a measurement build without the epilogue) took 4.4 ms of the 7.3 ms of
 * Qwen2-0.5B's log-prob forward (docs/benchmarks.md): the epilogue is most of the rest.
 *
 * Tile order (g90_tile, vr_cutrain_gemm_sm90.cuh, which also has the main loop): bands of GM row
 * blocks; inside a band the row block varies fastest, so the ~132 tiles running at once share two
 * or three W column blocks (W streams from HBM once per band) while the band's x (GM * 128 * C
 * bf16) stays in L2. Only sm_90a code has the body. */
#ifndef VR_CUTRAIN_LMHEAD_SM90_CUH
#define VR_CUTRAIN_LMHEAD_SM90_CUH

#include "vr_cutrain_gemm_sm90.cuh"

#define LH_BM G90_BM
#define LH_BN G90_BN
#define LH_BK G90_BK
#define LH_STAGES 4
#define LH_THREADS G90_THREADS

namespace {

constexpr uint32_t LH_A_BYTES = G90_A_BYTES, LH_STAGE = G90_STAGE;
/* After the ring, each consumer warpgroup's staging of one segment of its lp16 rows (64 rows x
 * 128 bf16 = two 64 x 64 boxes of the 128-byte swizzle) for the bulk tensor stores. */
constexpr uint32_t LH_STG_BYTES = 64 * VR_CUTRAIN_LSM_SEG * 2;
constexpr uint32_t LH_STG_OFF = LH_STAGES * LH_STAGE, LH_BAR_OFF = LH_STG_OFF + 2 * LH_STG_BYTES;
constexpr size_t LH_SMEM = LH_BAR_OFF + 16 * LH_STAGES + 1024; /* + alignment slack */
static_assert(LH_SMEM <= 227 * 1024, "the shared memory of one block");
static_assert(LH_BN == 2 * VR_CUTRAIN_LSM_SEG, "a tile holds two stored-log-softmax segments");

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
__device__ __forceinline__ uint32_t lh_bf2(float a, float b) { /* bf16(a) | bf16(b) << 16, round to nearest even */
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t *>(&h);
}

/* The epilogue of one consumer warpgroup's 64 rows of a tile (acc: the raw x W^T). In the
 * base-2 domain: z2 = acc inv_temp log2(e), so each exponential is one ex2 (z - m = (z2 - m2) ln 2);
 * the statistics return to the natural domain where they are stored. FULL: every column of the
 * tile is < V (no masking). Loop order: segment, then the thread's two rows, every step unrolled. */
template <bool FULL>
__device__ __forceinline__ void lh_epilogue(float (&acc)[128], const lh_params &p, const CUtensorMap *tl,
                                            uint32_t stg, int mb, int nb, int cw, int warp, int g, int tq) {
  const int n0 = nb * LH_BN, r0 = mb * LH_BM + cw * 64 + warp * 16 + g;
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
    if (!FULL && c0 >= p.V) break; /* uniform across the block */
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
        /* the segment's bf16(z - m_s) into the staging (128-byte swizzle: 16-byte chunk
         * (c / 8) ^ (r % 8) of row r), then two 64 x 64 bulk tensor stores (rows past T and
         * columns past V are clipped by the tensor map) */
        if (threadIdx.x % 128 == 0) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + cw) : "memory");
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = warp * 16 + g + 8 * h;
#pragma unroll
          for (int jj = 0; jj < 16; ++jj) {
            const int j = 16 * sg + jj, b = jj >> 3, ch = jj & 7;
            const uint32_t v = lh_bf2((acc[4 * j + 2 * h] - mx[h]) * LH_LN2, (acc[4 * j + 2 * h + 1] - mx[h]) * LH_LN2);
            const uint32_t a = stg + b * 8192 + r * 128 + ((ch ^ (r & 7)) << 4) + tq * 4;
            asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a), "r"(v) : "memory");
          }
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + cw) : "memory");
        if (threadIdx.x % 128 == 0) {
          const int rt = mb * LH_BM + cw * 64;
#pragma unroll
          for (int b = 0; b < 2; ++b)
            asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                             reinterpret_cast<uint64_t>(tl)),
                         "r"(c0 + 64 * b), "r"(rt), "r"(stg + b * 8192)
                         : "memory");
          asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
        }
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = r0 + 8 * h;
          if (row >= p.T) continue;
          uint16_t *o = p.lp16 + (size_t)row * p.V;
#pragma unroll
          for (int j = 16 * sg; j < 16 * sg + 16; ++j) {
            const int col = n0 + 8 * j + 2 * tq;
            const uint32_t v = lh_bf2((acc[4 * j + 2 * h] - mx[h]) * LH_LN2, (acc[4 * j + 2 * h + 1] - mx[h]) * LH_LN2);
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

__global__ void __launch_bounds__(LH_THREADS, 1)
    k_lmhead_sm90(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw,
                  const __grid_constant__ CUtensorMap tl, lh_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char lh_smem_raw[];
  const uint32_t base = ((uint32_t)__cvta_generic_to_shared(lh_smem_raw) + 1023u) & ~1023u;
  const uint32_t full = base + LH_BAR_OFF, empty = full + 8 * LH_STAGES;
  const int wg = (int)threadIdx.x >> 7;
  g90_init_barriers(full, LH_STAGES);
  __syncthreads();
  if (wg == 0) { /* producer */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(G90_REG_PRODUCER) : "memory");
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tx)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tw)) : "memory");
      int it = 0;
      for (int t = blockIdx.x; t < p.tiles; t += gridDim.x) {
        int mb, nb;
        g90_tile(t, p.GM, p.MB, p.NB, mb, nb);
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
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(G90_REG_CONSUMER) : "memory");
  const int cw = wg - 1, warp = ((int)threadIdx.x >> 5) & 3, lane = (int)threadIdx.x & 31, g = lane >> 2,
            tq = lane & 3;
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
  int it = 0;
  for (int t = blockIdx.x; t < p.tiles; t += gridDim.x) {
    int mb, nb;
    g90_tile(t, p.GM, p.MB, p.NB, mb, nb);
    g90_consume_tile<LH_STAGES>(acc, base, full, empty, p.nk, it, cw * (64 * 128));
    /* epilogue: acc[4 j + 2 h + e] is row 64 cw + 16 warp + g + 8 h, column 8 j + 2 tq + e of the tile */
    const uint32_t stg = base + LH_STG_OFF + cw * LH_STG_BYTES;
    if ((nb + 1) * LH_BN <= p.V)
      lh_epilogue<true>(acc, p, &tl, stg, mb, nb, cw, warp, g, tq);
    else
      lh_epilogue<false>(acc, p, &tl, stg, mb, nb, cw, warp, g, tq);
  }
  if (threadIdx.x % 128 == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); /* staging read */
#endif
}

} /* namespace */
#endif /* VR_CUTRAIN_LMHEAD_SM90_CUH */
