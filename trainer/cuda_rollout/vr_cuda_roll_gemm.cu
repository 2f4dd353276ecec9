/* vr_cuda_roll_gemm.cu: the decode step's skinny GEMMs on Hopper (M = the batch bucket, at most 64
 * rows): weights streamed through shared memory by TMA, multiplied by wgmma (contract in
 * vr_cuda_roll_ops.h). Opt-in in the engine: measured slower than cuBLASLt on every decode shape so
 * far (docs/benchmarks.md, "A Hopper decode GEMM of our own").
 *
 * k_dgemm<BN, KC>: a block of 5 warps owns BN output columns (one m64nBNk16 wgmma tile: all M <= 64
 * rows) and one of `splits` ranges of K's KC-element chunks (KC 64, 128 or 256). Warp 4's lane 0 is the
 * producer: it issues the bulk tensor copies (cp.async.bulk.tensor, 128-byte swizzle, boxes of 64
 * K elements) of each chunk's W tile (BN rows x KC) and A tile (64 rows x KC) into a ring of
 * stages (as many as fit in 200 KiB), each guarded by a full / empty mbarrier pair; the weight loads of the first stages go out before the
 * activations', since only the activations depend on the previous kernel (with programmatic
 * dependent launch the producer waits for that kernel between the two: griddepcontrol.wait).
 * Warps 0-3 (one warpgroup) run KC / 16 wgmma k-steps per chunk on the stage and release it once
 * the next chunk's products are issued (one commit group in flight). Rows past
 * M, columns past N and the K tail past K come in as zeros (the tensor maps' bounds), so any
 * shape with K % 8 == 0 runs on the same path.
 *
 * Split-K: the `splits` blocks of one column tile form a thread-block cluster (1, splits, 1).
 * Each leaves its fp32 partial tile in its own shared memory; after a cluster barrier, block q
 * sums rows [q M / splits, (q + 1) M / splits) of the tile over the cluster's partials in split
 * order 0, 1, ..., splits - 1 (distributed shared memory) and applies the epilogue. No atomics,
 * no workspace, no second kernel: the bits depend on (K, kc, splits) only, never on timing, and not
 * on M or on the other rows. Epilogue: + bias (bf16 for a bf16 D, fp32 for fp32), + D (beta 1,
 * fp32 D: the residual stream), to bf16 or fp32.
 *
 * Only sm_90a code has the body; vr_cuda_roll_gemm_available says whether this build and device
 * run it. */
#include <cooperative_groups.h>

#include "vr_cuda_common.cuh"
#include "vr_cuda_roll_ops.h"
#include "vr_cuda_sm90.cuh"

namespace cg = cooperative_groups;

#define DG_THREADS 160 /* one consumer warpgroup + one producer warp */
#define DG_BOX 64      /* K elements per tensor-map box: one 128-byte swizzle row */

namespace {

struct dg_params {
  void *D;
  const void *bias;
  int M, N, K, out_f32, beta1, splits, nch, pdl;
};

/* BN columns per block, KC elements of K per stage (KC / 64 boxes of A and of W), as many stages
 * as fit in 200 KiB (at most 8). */
template <int BN, int KC>
struct dg_cfg {
  static constexpr int BOXES = KC / DG_BOX;
  static constexpr uint32_t A_BOX = 64 * 128, W_BOX = BN * 128;
  static constexpr uint32_t A_BYTES = BOXES * A_BOX, W_BYTES = BOXES * W_BOX, STAGE = A_BYTES + W_BYTES;
  static constexpr int STAGES = 200 * 1024 / STAGE < 8 ? 200 * 1024 / STAGE : 8;
  static constexpr uint32_t BAR_OFF = STAGES * STAGE;
  static constexpr int RLD = BN + 4; /* floats per row of the partial tile (reuses the ring) */
  static constexpr size_t SMEM = BAR_OFF + 16 * STAGES + 1024; /* + alignment slack */
  static_assert(64 * RLD * 4 <= BAR_OFF, "the partial tile must fit in the ring");
  static_assert(STAGES >= 2, "a chunk's stage is released once the next chunk's products are issued");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* The epilogue of one output element (row r < M, col < N). */
__device__ __forceinline__ void dg_store(const dg_params &p, int r, int col, float v) {
  const size_t i = (size_t)r * p.N + col;
  if (p.out_f32) {
    float *d = static_cast<float *>(p.D);
    if (p.bias) v += static_cast<const float *>(p.bias)[col];
    if (p.beta1) v += d[i];
    d[i] = v;
  } else {
    if (p.bias) v += bf(static_cast<const uint16_t *>(p.bias)[col]);
    static_cast<uint16_t *>(p.D)[i] = to_bf(v);
  }
}

template <int BN>
__device__ __forceinline__ void dg_mma(float (&d)[BN / 2], uint64_t da, uint64_t db);
template <>
__device__ __forceinline__ void dg_mma<256>(float (&d)[128], uint64_t da, uint64_t db) {
  wg_ss256(d, da, db, 1);
}
template <>
__device__ __forceinline__ void dg_mma<128>(float (&d)[64], uint64_t da, uint64_t db) {
  wg_ss128(d, da, db, 1);
}
template <>
__device__ __forceinline__ void dg_mma<64>(float (&d)[32], uint64_t da, uint64_t db) {
  wg_ss64(d, da, db, 1);
}
#endif

template <int BN, int KC>
__global__ void __launch_bounds__(DG_THREADS, 1)
    k_dgemm(const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tw, dg_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  typedef dg_cfg<BN, KC> C;
  constexpr int S = C::STAGES;
  extern __shared__ unsigned char dg_smem_raw[];
  unsigned char *const gbase = dg_smem_raw + ((1024u - ((uint32_t)__cvta_generic_to_shared(dg_smem_raw) & 1023u)) & 1023u);
  const uint32_t base = (uint32_t)__cvta_generic_to_shared(gbase);
  const uint32_t full = base + C::BAR_OFF, empty = full + 8 * S;
  const int n0 = blockIdx.x * BN, split = blockIdx.y;
  const int c0 = (int)((long long)p.nch * split / p.splits), c1 = (int)((long long)p.nch * (split + 1) / p.splits);
  const int nc = c1 - c0;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      mb_init(full + 8 * s, 1);
      mb_init(empty + 8 * s, 128);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
  if (warp == 4) { /* producer */
    if (lane == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tw)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&ta)) : "memory");
      const int pre = nc < S ? nc : S;
      for (int i = 0; i < pre; ++i) { /* weights first: they never depend on the previous kernel */
        const uint32_t st = base + i * C::STAGE;
        mb_expect_tx(full + 8 * i, C::STAGE);
#pragma unroll
        for (int b = 0; b < C::BOXES; ++b)
          tma_box(st + C::A_BYTES + b * C::W_BOX, &tw, (c0 + i) * KC + b * DG_BOX, n0, full + 8 * i);
      }
      if (p.pdl) asm volatile("griddepcontrol.wait;\n" ::: "memory");
      for (int i = 0; i < pre; ++i)
#pragma unroll
        for (int b = 0; b < C::BOXES; ++b)
          tma_box(base + i * C::STAGE + b * C::A_BOX, &ta, (c0 + i) * KC + b * DG_BOX, 0, full + 8 * i);
      for (int i = S; i < nc; ++i) {
        const int s = i % S;
        const uint32_t st = base + s * C::STAGE;
        mb_wait(empty + 8 * s, ((i / S) & 1) ^ 1);
        mb_expect_tx(full + 8 * s, C::STAGE);
#pragma unroll
        for (int b = 0; b < C::BOXES; ++b) {
          tma_box(st + C::A_BYTES + b * C::W_BOX, &tw, (c0 + i) * KC + b * DG_BOX, n0, full + 8 * s);
          tma_box(st + b * C::A_BOX, &ta, (c0 + i) * KC + b * DG_BOX, 0, full + 8 * s);
        }
      }
    }
    if (p.pdl) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  } else { /* consumers: the wgmma tile, KC / 16 k-steps of 16 (32 bytes inside the 128-byte rows of a box) */
    constexpr int KS = KC / 16;
    for (int i = 0; i < nc; ++i) {
      const int s = i % S;
      const uint32_t a_at = base + s * C::STAGE, w_at = a_at + C::A_BYTES;
      uint64_t da[KS], db[KS];
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        da[kk] = f3_desc(a_at + (kk >> 2) * C::A_BOX + (kk & 3) * 32, 16, 1024);
        db[kk] = f3_desc(w_at + (kk >> 2) * C::W_BOX + (kk & 3) * 32, 16, 1024);
        asm volatile("" : "+l"(da[kk]), "+l"(db[kk]));
      }
      mb_wait(full + 8 * s, (i / S) & 1);
      f3_fence();
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) dg_mma<BN>(acc, da[kk], db[kk]);
      f3_commit();
      if (i > 0) { /* one chunk's products in flight: the previous chunk's are done, its stage is free */
        f3_wait<1>();
        mb_arrive(empty + 8 * ((i - 1) % S));
      }
    }
    f3_wait<0>();
    f3_pin(acc);
    if (p.pdl) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  }
  __syncwarp(); /* the producer warp converges again (lane 0 issued the loads) */
  /* accumulator slots (wgmma m64nBN): acc[4 j + e] is row 16 warp + g + 8 (e >> 1), column
   * 8 j + 2 t + (e & 1) of the tile */
  const int g = lane >> 2, t = lane & 3;
  if (p.splits == 1) {
    if (warp == 4) return;
    if (p.pdl) asm volatile("griddepcontrol.wait;\n" ::: "memory"); /* D (residual) of the previous kernel */
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = warp * 16 + g + 8 * (e >> 1), col = n0 + 8 * j + 2 * t + (e & 1);
        if (r < p.M && col < p.N) dg_store(p, r, col, acc[4 * j + e]);
      }
    return;
  }
  cg::cluster_group cluster = cg::this_cluster();
  float *red = reinterpret_cast<float *>(gbase);
  if (warp < 4) {
    asm volatile("bar.sync 1, 128;\n" ::: "memory"); /* every consumer warp's wgmma has read the ring */
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp * 16 + g + 8 * h;
        *reinterpret_cast<float2 *>(red + r * C::RLD + 8 * j + 2 * t) = make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      }
  }
  cluster.sync();
  if (p.pdl) asm volatile("griddepcontrol.wait;\n" ::: "memory");
  {
    const int r0 = (int)((long long)p.M * split / p.splits), r1 = (int)((long long)p.M * (split + 1) / p.splits);
    const int items = (r1 - r0) * (BN / 4);
    for (int it = threadIdx.x; it < items; it += DG_THREADS) {
      const int r = r0 + it / (BN / 4), c = 4 * (it % (BN / 4));
      float4 v = *reinterpret_cast<const float4 *>(cluster.map_shared_rank(red, 0) + r * C::RLD + c);
      for (int q = 1; q < p.splits; ++q) {
        const float4 w = *reinterpret_cast<const float4 *>(cluster.map_shared_rank(red, q) + r * C::RLD + c);
        v.x += w.x;
        v.y += w.y;
        v.z += w.z;
        v.w += w.w;
      }
      const float vv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (n0 + c + e < p.N) dg_store(p, r, n0 + c + e, vv[e]);
    }
  }
  cluster.sync(); /* no block leaves while another reads its partial */
#endif
}

template <int BN, int KC>
void dg_launch(const CUtensorMap &ta, const CUtensorMap &tw, const dg_params &p, cudaStream_t s) {
  static int attr_set[64];
  const int dev = vr_cuda_current_device_();
  if (!(dev >= 0 && dev < 64 && attr_set[dev])) {
    VR_CUDA_CHECK(
        cudaFuncSetAttribute(k_dgemm<BN, KC>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dg_cfg<BN, KC>::SMEM));
    if (dev >= 0 && dev < 64) attr_set[dev] = 1;
  }
  cudaLaunchConfig_t lc = {};
  cudaLaunchAttribute at[2];
  int na = 0;
  lc.gridDim = dim3((unsigned)((p.N + BN - 1) / BN), (unsigned)p.splits);
  lc.blockDim = dim3(DG_THREADS);
  lc.dynamicSmemBytes = dg_cfg<BN, KC>::SMEM;
  lc.stream = s;
  if (p.splits > 1) {
    at[na].id = cudaLaunchAttributeClusterDimension;
    at[na].val.clusterDim.x = 1;
    at[na].val.clusterDim.y = (unsigned)p.splits;
    at[na].val.clusterDim.z = 1;
    ++na;
  }
  if (p.pdl) {
    at[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[na].val.programmaticStreamSerializationAllowed = 1;
    ++na;
  }
  lc.attrs = at;
  lc.numAttrs = (unsigned)na;
  VR_CUDA_CHECK(cudaLaunchKernelEx(&lc, k_dgemm<BN, KC>, ta, tw, p));
  VR_CUDA_CHECK_LAUNCH();
}

/* res[0] = max |a - b|, res[1] = max |b| as float bits (non-negative floats order as unsigned;
 * a NaN difference compares above every finite one). */
__global__ void k_dgemm_cmp(const void *a, const void *b, int f32, size_t n, unsigned *res) {
  unsigned d = 0, m = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const float x = f32 ? static_cast<const float *>(a)[i] : bf(static_cast<const uint16_t *>(a)[i]);
    const float y = f32 ? static_cast<const float *>(b)[i] : bf(static_cast<const uint16_t *>(b)[i]);
    const float df = fabsf(x - y);
    d = max(d, df != df ? 0x7f800001u : __float_as_uint(df));
    m = max(m, __float_as_uint(fabsf(y)));
  }
  for (int o = 16; o > 0; o >>= 1) {
    d = max(d, __shfl_xor_sync(0xffffffffu, d, o));
    m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
  }
  if ((threadIdx.x & 31) == 0) {
    atomicMax(&res[0], d);
    atomicMax(&res[1], m);
  }
}

/* Blocks (splits 1) or clusters of `splits` blocks that the device holds at once for k_dgemm<BN, KC>
 * (occupancy queries, cached per device and splits; 0 when the query fails). */
template <int BN, int KC>
int dg_resident(int splits) {
  static int cache[64][VR_ROLL_GEMM_MAX_SPLITS + 1];
  const int dev = vr_cuda_current_device_();
  if (dev >= 0 && dev < 64 && cache[dev][splits]) return cache[dev][splits] - 1;
  int n = 0;
  if (cudaFuncSetAttribute(k_dgemm<BN, KC>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dg_cfg<BN, KC>::SMEM) ==
      cudaSuccess) {
    if (splits == 1) {
      int sms = 0, per = 0;
      if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_dgemm<BN, KC>, DG_THREADS, dg_cfg<BN, KC>::SMEM) == cudaSuccess)
        n = sms * per;
    } else {
      cudaLaunchConfig_t lc = {};
      cudaLaunchAttribute at;
      lc.gridDim = dim3(1, (unsigned)splits);
      lc.blockDim = dim3(DG_THREADS);
      lc.dynamicSmemBytes = dg_cfg<BN, KC>::SMEM;
      at.id = cudaLaunchAttributeClusterDimension;
      at.val.clusterDim.x = 1;
      at.val.clusterDim.y = (unsigned)splits;
      at.val.clusterDim.z = 1;
      lc.attrs = &at;
      lc.numAttrs = 1;
      if (cudaOccupancyMaxActiveClusters(&n, k_dgemm<BN, KC>, &lc) != cudaSuccess) n = 0;
    }
  }
  (void)cudaGetLastError();
  if (dev >= 0 && dev < 64) cache[dev][splits] = n + 1;
  return n;
}

} /* namespace */

/* -------------------------------------------------------------- launchers */

extern "C" int vr_cuda_roll_gemm_available(int device) {
#ifdef VR_CUDA_HAVE_SM90A
  return vr_sm90_device(device);
#else
  (void)device;
  return 0;
#endif
}

extern "C" int vr_cuda_roll_gemm_supported(int M, int N, int K) {
  return M >= 1 && M <= VR_ROLL_GEMM_MAX_M && N >= 1 && K >= 8 && K % 8 == 0;
}

extern "C" int vr_cuda_roll_gemm_cfg_ok(int N, int K, vr_cuda_roll_gemm_cfg_t c) {
  (void)N;
  if (!(c.bn == 64 || c.bn == 128 || c.bn == 256) || !(c.kc == 64 || c.kc == 128 || (c.kc == 256 && c.bn < 256)))
    return 0;
  const int nch = (K + c.kc - 1) / c.kc;
  return c.splits >= 1 && c.splits <= VR_ROLL_GEMM_MAX_SPLITS && c.splits <= nch;
}

extern "C" int vr_cuda_roll_gemm_candidates(int N, int K, int n_sms, vr_cuda_roll_gemm_cfg_t *out, int max) {
  static const int bns[3] = {64, 128, 256}, kcs[3] = {64, 128, 256};
  int n = 0;
  for (int b = 0; b < 3; ++b)
    for (int k = 0; k < 3; ++k)
      for (int sp = 1; sp <= VR_ROLL_GEMM_MAX_SPLITS; ++sp) {
        const vr_cuda_roll_gemm_cfg_t c = {bns[b], kcs[k], sp, 0};
        const long long blocks = (long long)((N + c.bn - 1) / c.bn) * sp;
        if (!vr_cuda_roll_gemm_cfg_ok(N, K, c) || (sp > 1 && blocks > 2LL * n_sms) || blocks > 8LL * n_sms) continue;
        if (n < max) out[n] = c;
        ++n;
      }
  return n;
}

extern "C" vr_cuda_roll_gemm_cfg_t vr_cuda_roll_gemm_pick(int N, int K, int n_sms) {
  /* the modelled time of (bn, splits): waves of column tiles (as many at once as the device
   * holds blocks, or clusters of `splits` blocks) times what a block streams in one (its chunks
   * of W and A, plus a fixed ramp), plus a cluster reduction's cost per split; ties go to the
   * wider tile and the fewer splits (the order of the loops) */
  const int nch = (K + DG_BOX - 1) / DG_BOX;
  vr_cuda_roll_gemm_cfg_t best = {128, DG_BOX, 1, 0};
  double best_cost = 0;
  static const int bns[2] = {128, 64};
  for (int b = 0; b < 2; ++b)
    for (int sp = 1; sp <= VR_ROLL_GEMM_MAX_SPLITS && sp <= nch; ++sp) {
      int conc = bns[b] == 128 ? dg_resident<128, DG_BOX>(sp) : dg_resident<64, DG_BOX>(sp);
      if (conc <= 0) conc = n_sms / sp > 0 ? n_sms / sp : 1; /* the query failed: one block per SM */
      const long long tiles = (N + bns[b] - 1) / bns[b], waves = (tiles + conc - 1) / conc;
      const double per_block = (double)((nch + sp - 1) / sp) * (bns[b] * 128 + 64 * 128);
      const double cost = (double)waves * (per_block + 48.0 * 1024) + (sp > 1 ? 8.0 * 1024 * sp : 0.0);
      if (best_cost == 0 || cost < best_cost) {
        best_cost = cost;
        best.bn = bns[b];
        best.splits = sp;
      }
    }
  return best;
}

extern "C" void vr_cuda_roll_gemm(void *D, int out_f32, const uint16_t *A, const uint16_t *W, const void *bias, int M,
                                  int N, int K, float beta, vr_cuda_roll_gemm_cfg_t cfg, cudaStream_t s) {
  VR_ASSERT(vr_cuda_roll_gemm_supported(M, N, K) && vr_cuda_roll_gemm_cfg_ok(N, K, cfg));
  VR_ASSERT(beta == 0.f || (beta == 1.f && out_f32));
  VR_ASSERT(((uintptr_t)A | (uintptr_t)W) % 16 == 0);
  CUtensorMap ta, tw;
  const int ea = vr_sm90_tensor_map(&ta, A, K, M, K, DG_BOX, 64);
  const int ew = vr_sm90_tensor_map(&tw, W, K, N, K, DG_BOX, cfg.bn);
  VR_ASSERT(ea == 0 && ew == 0 && "cuTensorMapEncodeTiled failed");
  const dg_params p = {D, bias, M, N, K, out_f32, beta == 1.f, cfg.splits, (K + cfg.kc - 1) / cfg.kc, cfg.pdl != 0};
  if (cfg.kc == 64) {
    if (cfg.bn == 256) dg_launch<256, 64>(ta, tw, p, s);
    else if (cfg.bn == 128) dg_launch<128, 64>(ta, tw, p, s);
    else dg_launch<64, 64>(ta, tw, p, s);
  } else if (cfg.kc == 128) {
    if (cfg.bn == 256) dg_launch<256, 128>(ta, tw, p, s);
    else if (cfg.bn == 128) dg_launch<128, 128>(ta, tw, p, s);
    else dg_launch<64, 128>(ta, tw, p, s);
  } else {
    if (cfg.bn == 128) dg_launch<128, 256>(ta, tw, p, s);
    else dg_launch<64, 256>(ta, tw, p, s);
  }
}

extern "C" void vr_cuda_roll_gemm_compare(const void *a, const void *b, int out_f32, size_t n, unsigned *res,
                                          cudaStream_t s) {
  VR_CUDA_CHECK(cudaMemsetAsync(res, 0, 2 * sizeof(unsigned), s));
  if (n == 0) return;
  k_dgemm_cmp<<<grid_for(n, 256) < 264 ? grid_for(n, 256) : 264, 256, 0, s>>>(a, b, out_f32, n, res);
  VR_CUDA_CHECK_LAUNCH();
}
