/* vr_cutrain_gemm_sm90.cuh: what the training engine's persistent Hopper GEMMs with their own
 * epilogues share (vr_cutrain_lmhead_sm90.cuh: the LM head with the log-softmax statistics;
 * vr_cutrain_mlp.cu: the gate/up projection with SwiGLU): a block is a producer warpgroup (its
 * first thread issues the bulk tensor copies of each 64-wide k-chunk into a ring of stages guarded
 * by full / empty mbarriers) and two consumer warpgroups, each owning 64 rows of a 128 x 256
 * output tile (one m64n256k16 wgmma per 16 of K, 128 fp32 accumulators a thread: acc[4 j + 2 h + e]
 * is row 16 warp + g + 8 h of the warpgroup's 64, column 8 j + 2 tq + e of the tile, g = lane / 4,
 * tq = lane % 4). A stage holds A's 128 x 64 box, then B's 256 rows x 64 (128-byte swizzle: rows of
 * 128 bytes, 8-row atoms of 1024), both K-major. Only sm_90a code has the bodies. */
#ifndef VR_CUTRAIN_GEMM_SM90_CUH
#define VR_CUTRAIN_GEMM_SM90_CUH

#include "vr_cuda_sm90.cuh"

#define G90_BM 128
#define G90_BN 256
#define G90_BK 64
#define G90_THREADS 384 /* the producer warpgroup + two consumer warpgroups */
#define G90_REG_PRODUCER 40
#define G90_REG_CONSUMER 232

namespace {

constexpr uint32_t G90_A_BYTES = G90_BM * 128, G90_B_BYTES = G90_BN * 128, G90_STAGE = G90_A_BYTES + G90_B_BYTES;

/* Tile t's row block mb and column block nb over bands of GM row blocks (MB row blocks, NB column
 * blocks); inside a band the row block varies fastest, so the ~132 tiles running at once share a
 * few B column blocks (B streams from HBM once per band) while the band's A stays in L2. */
__device__ __forceinline__ void g90_tile(int t, int GM, int MB, int NB, int &mb, int &nb) {
  const int per_band = GM * NB, band = t / per_band, mb0 = band * GM;
  const int rows_b = MB - mb0 < GM ? MB - mb0 : GM, local = t - band * per_band;
  nb = local / rows_b;
  mb = mb0 + local % rows_b;
}

/* Row bands of about 16 MiB of A (C columns of bf16): the band stays in L2 while B's column blocks
 * stream (the LM head on the H200: bands of 16 row blocks as fast, of 4 up to 5 % slower, one band
 * of all rows up to 10 % slower at C 2048); at most MB (row blocks of bm rows). */
static inline int g90_band_rows(int C, int MB, int bm = G90_BM) {
  int GM = (int)((16u << 20) / ((size_t)bm * C * 2));
  if (GM < 1) GM = 1;
  return GM < MB ? GM : MB;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* The ring's barriers (stages of them: full at bars, empty after; `consumers` threads release a
 * stage), by thread 0, before the block's first __syncthreads. */
__device__ __forceinline__ void g90_init_barriers(uint32_t bars, int stages, int consumers = 256) {
  if (threadIdx.x != 0) return;
  for (int s = 0; s < stages; ++s) {
    mb_init(bars + 8 * s, 1);
    mb_init(bars + 8 * (stages + s), consumers);
  }
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* One consumer warpgroup's products of a tile: acc = A B^T over nk k-chunks from the ring (stage
 * it % STAGES at base + stage * STAGE_BYTES, B at A_BYTES into it, the warpgroup's 64 rows of A at
 * a_off; it counts the block's chunks across tiles and advances by nk). Each stage is released as
 * soon as the next chunk's products are in flight; on return every product has landed (acc
 * pinned) and every stage of the tile is released. */
template <int STAGES, uint32_t STAGE_BYTES = G90_STAGE, uint32_t A_BYTES = G90_A_BYTES>
__device__ __forceinline__ void g90_consume_tile(float (&acc)[128], uint32_t base, uint32_t full, uint32_t empty,
                                                 int nk, int &it, uint32_t a_off) {
  for (int k = 0; k < nk; ++k, ++it) {
    const int s = it % STAGES;
    const uint32_t a_at = base + s * STAGE_BYTES + a_off, b_at = base + s * STAGE_BYTES + A_BYTES;
    uint64_t da[4], db[4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      da[kk] = f3_desc(a_at + kk * 32, 16, 1024);
      db[kk] = f3_desc(b_at + kk * 32, 16, 1024);
      asm volatile("" : "+l"(da[kk]), "+l"(db[kk]));
    }
    mb_wait(full + 8 * s, (it / STAGES) & 1);
    f3_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wg_ss256(acc, da[kk], db[kk], (k | kk) != 0);
    f3_commit();
    if (k > 0) { /* one chunk's products in flight: the previous chunk's stage is free */
      f3_wait<1>();
      mb_arrive(empty + 8 * ((it - 1) % STAGES));
    }
  }
  f3_wait<0>();
  f3_pin(acc);
  mb_arrive(empty + 8 * ((it - 1) % STAGES));
}
#endif

} /* namespace */
#endif /* VR_CUTRAIN_GEMM_SM90_CUH */
