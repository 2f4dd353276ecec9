/* vr_cutrain_gemm_sm90.cuh: what the training engine's persistent Hopper GEMMs with their own
 * epilogues share (vr_cutrain_lmhead_sm90.cuh: the LM head with the log-softmax statistics;
 * vr_cutrain_mlp.cu: the gate/up projection with SwiGLU): a block is a producer warpgroup (its
 * first thread issues the bulk tensor copies of each 64-wide k-chunk into a ring of stages guarded
 * by full / empty mbarriers, g90_produce) and two consumer warpgroups (g90_consumer_regs), each
 * with 128 fp32 accumulators a thread from one m64n256k16 wgmma per 16 of K (g90_consume_tile:
 * acc[4 j + 2 h + e] is row 16 warp + g + 8 h of the warpgroup's 64, column 8 j + 2 tq + e of the
 * tile, g = lane / 4, tq = lane % 4). Two schedules: cooperative (both warpgroups on one 128-row
 * tile, 64 rows each; the epilogue stalls the tensor cores) and ping-pong (g90_pingpong: a tile is
 * 64 rows and one warpgroup's, the block's tiles alternating, so one warpgroup's epilogue runs
 * under the other's products). A stage holds A's box (128 or 64 rows x 64), then B's 256 rows x
 * 64 (128-byte swizzle: rows of 128 bytes, 8-row atoms of 1024), both K-major. Epilogues write
 * bf16 through g90_store_round (staged in shared memory, bulk tensor stores). Only sm_90a code has
 * the bodies. */
#ifndef VR_CUTRAIN_GEMM_SM90_CUH
#define VR_CUTRAIN_GEMM_SM90_CUH

#include <cuda_bf16.h>

#include "vr_cuda_check.h"
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

/* A block's tiles: t = t0, t0 + step, ... < tiles, tile t at (mb, nb) by g90_tile over MB row
 * blocks, or, in a cluster of cl blocks along the rows (cl 2: a pair of row blocks shares each W
 * column block, multicast), over MB row-block groups of which the block takes row block cl mb +
 * rank (the group's blocks step through the same tiles together; t0 and step count clusters). */
struct g90_sched {
  int tiles, t0, step, GM, MB, NB, cl, rank;
  __device__ __forceinline__ void at(int t, int &mb, int &nb) const {
    g90_tile(t, GM, MB, NB, mb, nb);
    mb = mb * cl + rank;
  }
};

/* Row bands of about 16 MiB of A (C columns of bf16): the band stays in L2 while B's column blocks
 * stream (the LM head on the H200: bands of 16 row blocks as fast, of 4 up to 5 % slower, one band
 * of all rows up to 10 % slower at C 2048); at most MB (row blocks of bm rows). */
static inline int g90_band_rows(int C, int MB, int bm = G90_BM) {
  int GM = (int)((16u << 20) / ((size_t)bm * C * 2));
  if (GM < 1) GM = 1;
  return GM < MB ? GM : MB;
}

/* The launch of a persistent kernel on the current device: its dynamic shared memory raised to
 * smem (once per device: `set`, the caller's static per-kernel record) and the grid, one block
 * per multiprocessor or fewer when there are fewer tiles. */
struct g90_launch_cache {
  int set[64], sms[64];
};
static inline int g90_grid(const void *kernel, size_t smem, g90_launch_cache &c, int tiles) {
  const int dev = vr_cuda_current_device_(), di = dev >= 0 && dev < 64 ? dev : 0;
  if (!c.set[di]) {
    VR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    VR_CUDA_CHECK(cudaDeviceGetAttribute(&c.sms[di], cudaDevAttrMultiProcessorCount, dev));
    c.set[di] = 1;
  }
  return tiles < c.sms[di] ? tiles : c.sms[di];
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

/* The release of stage s: the local empty barrier, and in a cluster the peer's (peer_empty: its
 * empty barriers in the cluster's shared window, g90_peer; 0 without a peer), whose producer's
 * multicast writes this block's copy of the stage too: a warp's lane 0 arrives there for its 32
 * threads, all past the warpgroup-wide wgmma wait that precedes every release. */
__device__ __forceinline__ void g90_release(uint32_t empty, uint32_t peer_empty, int s) {
  mb_arrive(empty + 8 * s);
  if (peer_empty && (threadIdx.x & 31) == 0) /* the warp's 32 arrivals in one (after the warpgroup's wgmma wait) */
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0], 32;\n" ::"r"(peer_empty + 8 * s)
                 : "memory");
}
/* The address of this block's shared-memory address a in the cluster's block `rank`. */
__device__ __forceinline__ uint32_t g90_peer(uint32_t a, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
  return r;
}
/* A 2D box of the tensor map into the same offset dst of every block of mask in the cluster,
 * completing on the barrier at offset bar in each. */
__device__ __forceinline__ void g90_tma_mc(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar,
                                           uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, "
      "%3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
      : "memory");
}

/* One consumer warpgroup's products of a tile: acc = A B^T over nk k-chunks from the ring (stage
 * it % STAGES at base + stage * STAGE_BYTES, B at A_BYTES into it, the warpgroup's 64 rows of A at
 * a_off; it counts the block's chunks across tiles and advances by nk). Each stage is released
 * (g90_release) as soon as the next chunk's products are in flight; on return every product has
 * landed (acc pinned) and every stage of the tile is released. */
template <int STAGES, uint32_t STAGE_BYTES = G90_STAGE, uint32_t A_BYTES = G90_A_BYTES>
__device__ __forceinline__ void g90_consume_tile(float (&acc)[128], uint32_t base, uint32_t full, uint32_t empty,
                                                 int nk, int &it, uint32_t a_off, uint32_t peer_empty = 0) {
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
      g90_release(empty, peer_empty, (it - 1) % STAGES);
    }
  }
  f3_wait<0>();
  f3_pin(acc);
  g90_release(empty, peer_empty, (it - 1) % STAGES);
}

/* Every thread of the cluster's blocks (warps converged). */
__device__ __forceinline__ void g90_cluster_sync() {
  __syncwarp();
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

/* The block's start: the 1024-aligned base of the dynamic shared memory (smem_raw), the ring's
 * barriers at base + bar_off (g90_init_barriers; consumers: the threads that release a stage),
 * then the thread's warpgroup (0: the producer). cluster: a cluster barrier instead of the
 * block's, and each branch of the kernel ends with g90_cluster_sync (no block leaves while a peer
 * may still write to it). */
__device__ __forceinline__ int g90_start(const unsigned char *smem_raw, uint32_t &base, uint32_t bar_off, int stages,
                                         int consumers, bool cluster = false) {
  base = ((uint32_t)__cvta_generic_to_shared(smem_raw) + 1023u) & ~1023u;
  g90_init_barriers(base + bar_off, stages, consumers);
  if (cluster) /* the peers' barriers initialised before any multicast or remote arrival */
    g90_cluster_sync();
  else
    __syncthreads();
  return (int)threadIdx.x >> 7;
}
/* The register split, first thing in each branch of the kernel (ptxas gives the consumers their
 * 232 registers only in code that the increase dominates): the producer warpgroup down to
 * G90_REG_PRODUCER, the consumers up to G90_REG_CONSUMER. */
__device__ __forceinline__ void g90_producer_regs() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(G90_REG_PRODUCER) : "memory");
}
__device__ __forceinline__ void g90_consumer_regs() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(G90_REG_CONSUMER) : "memory");
}

/* The producer (thread 0 of warpgroup 0; the others return at once): the block's tiles (sc) in
 * order, each tile's nk k-chunks into the ring (stage it % STAGES at base + stage * STAGE_BYTES,
 * running ahead across tiles by the ring's depth); load(st, k, mb, nb, bar) issues the stage's
 * boxes, completing STAGE_BYTES on bar (in a cluster, the peers' multicast parts included).
 * ta / tb: the maps to prefetch. */
template <int STAGES, uint32_t STAGE_BYTES, class Load>
__device__ __forceinline__ void g90_produce(uint32_t base, uint32_t full, uint32_t empty, const g90_sched &sc, int nk,
                                            const CUtensorMap *ta, const CUtensorMap *tb, Load load) {
  if (threadIdx.x != 0) return;
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(ta)) : "memory");
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tb)) : "memory");
  int it = 0;
  for (int t = sc.t0; t < sc.tiles; t += sc.step) {
    int mb, nb;
    sc.at(t, mb, nb);
    for (int k = 0; k < nk; ++k, ++it) {
      const int s = it % STAGES;
      mb_wait(empty + 8 * s, ((it / STAGES) & 1) ^ 1); /* a fresh barrier passes parity 1 */
      mb_expect_tx(full + 8 * s, STAGE_BYTES);
      load(base + s * STAGE_BYTES, k, mb, nb, full + 8 * s);
    }
  }
}

/* The ping-pong consumers (the ring's stages released by 128 threads of each block, A_BYTES of
 * 64 rows): the block's i-th tile is consumer warpgroup i % 2's (cw = warpgroup - 1), so the ring
 * hands the two their chunks in turn and one's epilogue, epi(acc, mb, nb), runs under the other's
 * products. Tile i's products start only after tile i - 1's have (named barrier 3 + i % 2, the
 * other warpgroup arriving): a warpgroup that waited on a stage's full barrier more than one phase
 * ahead would take the parity of an older phase for its own (mbarrier waits see parity alone).
 * peer_empty: g90_consume_tile's. The epilogue may use named barrier 1 + cw. */
template <int STAGES, uint32_t STAGE_BYTES, uint32_t A_BYTES, class Epi>
__device__ __forceinline__ void g90_pingpong(float (&acc)[128], uint32_t base, uint32_t full, uint32_t empty,
                                             uint32_t peer_empty, const g90_sched &sc, int nk, int cw, Epi epi) {
  for (int i = cw;; i += 2) {
    const int t = sc.t0 + i * sc.step;
    if (t >= sc.tiles) break;
    int mb, nb, it = i * nk;
    sc.at(t, mb, nb);
    if (i > 0) asm volatile("bar.sync %0, 256;\n" ::"r"(3 + (i & 1)) : "memory");
    g90_consume_tile<STAGES, STAGE_BYTES, A_BYTES>(acc, base, full, empty, nk, it, 0, peer_empty);
    if (t + sc.step < sc.tiles) asm volatile("bar.arrive %0, 256;\n" ::"r"(3 + ((i + 1) & 1)) : "memory");
    epi(acc, mb, nb);
  }
}

/* One round of a consumer warpgroup's staged store: v[h][jj] (bf16 pairs: row 16 warp + g + 8 h,
 * columns 8 jj + 2 tq, + 1 of a 64 x 128 block) into the staging stg (two 64 x 64 boxes, 128-byte
 * swizzle: 16-byte chunk (c / 8) ^ (r % 8) of row r), then two bulk tensor stores to (c0, rt) and
 * (c0 + 64, rt) of map (rows and columns past the matrix clipped). The staging is rewritten only
 * after the previous round's stores have read it; the stores themselves run on behind the next
 * rounds and the next tile's products (the kernel waits for them before it exits: g90_store_drain).
 * Named barrier 1 + cw: the warpgroup's 128 threads. */
__device__ __forceinline__ void g90_store_round(const uint32_t (&v)[2][16], const CUtensorMap *map, uint32_t stg,
                                                int c0, int rt, int cw, int warp, int g, int tq) {
  if (threadIdx.x % 128 == 0) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + cw) : "memory");
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + g + 8 * h;
#pragma unroll
    for (int jj = 0; jj < 16; ++jj) {
      const uint32_t a = stg + (jj >> 3) * 8192 + r * 128 + (((jj & 7) ^ (r & 7)) << 4) + tq * 4;
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a), "r"(v[h][jj]) : "memory");
    }
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + cw) : "memory");
  if (threadIdx.x % 128 == 0) {
#pragma unroll
    for (int b = 0; b < 2; ++b)
      asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                       reinterpret_cast<uint64_t>(map)),
                   "r"(c0 + 64 * b), "r"(rt), "r"(stg + b * 8192)
                   : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
  }
}
/* Before a consumer warpgroup exits: its bulk stores have read their staging. */
__device__ __forceinline__ void g90_store_drain() {
  if (threadIdx.x % 128 == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

__device__ __forceinline__ uint32_t g90_bf2(float a, float b) { /* bf16(a) | bf16(b) << 16, round to nearest even */
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t *>(&h);
}
#endif

} /* namespace */
#endif /* VR_CUTRAIN_GEMM_SM90_CUH */
