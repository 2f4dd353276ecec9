/* vr_cutrain_mlp.cu: the MLP's gate/up projection with SwiGLU in its epilogue on Hopper (sm_90a),
 * so the (T, 2F) projection is not read back by a separate activation kernel. Contract in
 * vr_cutrain_ops.h (vr_cutrain_gu_swiglu_fwd).
 *
 * k_gu_swiglu_sm90: a persistent GEMM (the producer and main loop of vr_cutrain_gemm_sm90.cuh) in
 * the ping-pong form: a tile is 64 rows x 128 intermediate columns n0..n0+127 and belongs to one
 * consumer warpgroup, the block's tiles alternating between the two, so one warpgroup's epilogue
 * runs while the other's products use the tensor cores (in the cooperative form, both warpgroups
 * on one 128-row tile, the epilogue stalled them both: on the H200 the Llama-1B MLP forward took
 * 43.6 ms with bulk-stored epilogues, 48.8 with plain stores, against cuBLASLt + the SwiGLU
 * kernel's 41.7-42.8). A stage's B is gate rows n0.. (W's rows n0..n0+127) then up rows F + n0..
 * (two 128 x 64 boxes, one after the other: the 256 x 64 box of the main loop), so a thread's
 * accumulators j < 16 are gate columns and j + 16 the up columns of the same intermediate index
 * (8 j + 2 tq + e). Epilogue per row and pair of columns: g, u rounded to bf16 (into gu when
 * asked), then bf16(silu(g) u) from the rounded values with vr_cuda_swiglu's arithmetic (the same
 * bits as that kernel on this kernel's gu), each of g, u, act staged in shared memory and written
 * by bulk tensor stores that run on behind the next products. Rows past T come in as zeros (the
 * tensor map) and are clipped from the stores. Only sm_90a code has the body. */
#include <string.h>

#include "vr_cuda_common.cuh"
#include "vr_cutrain_ops.h"
#ifdef VR_CUTRAIN_HAVE_SM90
#include "vr_cutrain_gemm_sm90.cuh"
#endif

/* ---------------------------------------------------------------- kernels */

#ifdef VR_CUTRAIN_HAVE_SM90
#define GU_STAGES 4
#define GU_BN 128 /* intermediate columns a tile: 128 gate + 128 up */

namespace {

/* Ping-pong: a tile is 64 rows, one consumer warpgroup's; a stage holds its 64 x 64 A box and the
 * 256 x 64 B box. After the ring, each consumer warpgroup's staging of one 64 x 128 bf16 block (two
 * 64 x 64 boxes) for the bulk tensor stores. */
#define GU_BM 64
constexpr uint32_t GU_A_BYTES = GU_BM * 128, GU_STAGE = GU_A_BYTES + G90_B_BYTES;
constexpr uint32_t GU_STG_BYTES = 64 * GU_BN * 2, GU_STG_OFF = GU_STAGES * GU_STAGE;
constexpr uint32_t GU_BAR_OFF = GU_STG_OFF + 2 * GU_STG_BYTES;
constexpr size_t GU_SMEM = GU_BAR_OFF + 16 * GU_STAGES + 1024; /* + alignment slack */
static_assert(GU_SMEM <= 227 * 1024, "the shared memory of one block");
static_assert(2 * GU_BN == G90_BN, "a tile's B: the gate block, then the up block");

struct gu_params {
  uint16_t *act; /* (T, F) */
  uint16_t *gu;  /* (T, 2F) or NULL */
  int T, F, nk, MB, NB, GM, tiles;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ float gu_silu_mul(float g, float u) { return g / (1.f + __expf(-g)) * u; }

/* One consumer warpgroup's 64 rows of a tile (acc: the raw x W^T of the gate and up blocks):
 * g and u into gu (when kept), then act, each a staged round. */
__device__ __forceinline__ void gu_epilogue(const float (&acc)[128], const gu_params &p, const CUtensorMap *ta,
                                            const CUtensorMap *tg, uint32_t stg, int mb, int nb, int cw, int warp,
                                            int g, int tq) {
  const int n0 = nb * GU_BN, rt = mb * GU_BM;
  uint32_t gb[2][16], ub[2][16];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      gb[h][j] = g90_bf2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      ub[h][j] = g90_bf2(acc[4 * (j + 16) + 2 * h], acc[4 * (j + 16) + 2 * h + 1]);
    }
  if (p.gu) {
    g90_store_round(gb, tg, stg, n0, rt, cw, warp, g, tq);
    g90_store_round(ub, tg, stg, p.F + n0, rt, cw, warp, g, tq);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float g0 = __uint_as_float(gb[h][j] << 16), g1 = __uint_as_float(gb[h][j] & 0xffff0000u);
      const float u0 = __uint_as_float(ub[h][j] << 16), u1 = __uint_as_float(ub[h][j] & 0xffff0000u);
      gb[h][j] = g90_bf2(gu_silu_mul(g0, u0), gu_silu_mul(g1, u1));
    }
  g90_store_round(gb, ta, stg, n0, rt, cw, warp, g, tq);
}
#endif

__global__ void __launch_bounds__(G90_THREADS, 1)
    k_gu_swiglu_sm90(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw,
                     const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tg, gu_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char gu_smem_raw[];
  uint32_t base;
  const int wg = g90_start(gu_smem_raw, base, GU_BAR_OFF, GU_STAGES, 128); /* a stage is one consumer warpgroup's */
  const uint32_t full = base + GU_BAR_OFF, empty = full + 8 * GU_STAGES;
  const g90_sched sc = {p.tiles, (int)blockIdx.x, (int)gridDim.x, p.GM, p.MB, p.NB, 1, 0};
  if (wg == 0) { /* producer: x's 64 rows, the gate block, the up block */
    g90_producer_regs();
    g90_produce<GU_STAGES, GU_STAGE>(base, full, empty, sc, p.nk, &tx, &tw,
                                     [&](uint32_t st, int k, int mb, int nb, uint32_t bar) {
                                       tma_box(st, &tx, k * G90_BK, mb * GU_BM, bar);
                                       tma_box(st + GU_A_BYTES, &tw, k * G90_BK, nb * GU_BN, bar);
                                       tma_box(st + GU_A_BYTES + GU_BN * 128, &tw, k * G90_BK, p.F + nb * GU_BN, bar);
                                     });
    return;
  }
  g90_consumer_regs();
  const int cw = wg - 1, warp = ((int)threadIdx.x >> 5) & 3, lane = (int)threadIdx.x & 31, g = lane >> 2,
            tq = lane & 3;
  const uint32_t stg = base + GU_STG_OFF + cw * GU_STG_BYTES;
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
  g90_pingpong<GU_STAGES, GU_STAGE, GU_A_BYTES>(acc, base, full, empty, 0, sc, p.nk, cw,
                                                [&](const float(&a)[128], int mb, int nb) {
                                                  gu_epilogue(a, p, &ta, &tg, stg, mb, nb, cw, warp, g, tq);
                                                });
  g90_store_drain();
#endif
}

} /* namespace */
#endif /* VR_CUTRAIN_HAVE_SM90 */

/* ---------------------------------------------------------------- launchers */

extern "C" int vr_cutrain_gu_swiglu_available(int C, int F) {
#ifdef VR_CUTRAIN_HAVE_SM90
  if (C < G90_BK || C % G90_BK || F < GU_BN || F % GU_BN) return 0;
  return vr_sm90_current_device();
#else
  (void)C, (void)F;
  return 0;
#endif
}

extern "C" int vr_cutrain_gu_swiglu_fwd(uint16_t *act, uint16_t *gu, const uint16_t *x, const uint16_t *W, int T,
                                        int C, int F, cudaStream_t s) {
#ifdef VR_CUTRAIN_HAVE_SM90
  if (!vr_cutrain_gu_swiglu_available(C, F)) return 0;
  if (((uintptr_t)x | (uintptr_t)W | (uintptr_t)act | (uintptr_t)gu) % 16) return 0;
  if (T <= 0) return 1;
  CUtensorMap tx, tw, ta, tg;
  memset(&tg, 0, sizeof tg);
  if (vr_sm90_tensor_map(&tx, x, C, T, C, G90_BK, GU_BM) || vr_sm90_tensor_map(&tw, W, C, 2 * F, C, G90_BK, GU_BN) ||
      vr_sm90_tensor_map(&ta, act, F, T, F, 64, 64) || (gu && vr_sm90_tensor_map(&tg, gu, 2 * F, T, 2 * F, 64, 64)))
    return 0;
  gu_params p;
  p.act = act, p.gu = gu, p.T = T, p.F = F, p.nk = C / G90_BK;
  p.MB = (T + GU_BM - 1) / GU_BM, p.NB = F / GU_BN, p.GM = g90_band_rows(C, p.MB, GU_BM), p.tiles = p.MB * p.NB;
  static g90_launch_cache cache;
  const int grid = g90_grid((const void *)k_gu_swiglu_sm90, GU_SMEM, cache, p.tiles);
  k_gu_swiglu_sm90<<<grid, G90_THREADS, GU_SMEM, s>>>(tx, tw, ta, tg, p);
  VR_CUDA_CHECK_LAUNCH();
  return 1;
#else
  (void)act, (void)gu, (void)x, (void)W, (void)T, (void)C, (void)F, (void)s;
  return 0;
#endif
}
