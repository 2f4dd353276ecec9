/* vr_cuda_roll_gemm.cu: the decode step's skinny GEMMs (M = the batch bucket, at most 64 rows), a
 * weight-streaming kernel on mma.sync (contract in vr_cuda_roll_ops.h).
 *
 * k_skinny<MT>: a block of SG_WARPS warps owns SG_BN output columns and one of `splits` ranges of
 * K; each warp owns SG_NT tiles of 8 columns and all MT tiles of 16 rows (M <= 16 * MT), so W is
 * read once from HBM and A (small, L2/L1-resident) once per warp. No shared memory: every
 * operand goes from global memory straight into mma.sync m16n8k16 fragments with 16-byte loads.
 * That works because a dot product may visit K in any order as long as A and W agree: a k-chunk
 * of 32 is split over the quad's 4 threads as 8 consecutive elements each (one 16-byte load of
 * an A row or a W row), and mma step 0 takes each thread's elements 0-3, step 1 elements 4-7, in
 * the fragment slots of the thread's own k indices (tig * 2 + {0, 1}, tig * 2 + 8 + {0, 1}).
 * W loads run one stage ahead (double-buffered in registers; a stage is 4 chunks, 2 when M > 16). With splits > 1 each split's fp32
 * partial goes to ws (splits, M, N) and k_skinny_reduce sums them in split order (deterministic)
 * and applies the epilogue; otherwise the epilogue is the kernel's: + bias, + D (beta 1, fp32), to
 * bf16 or fp32. */
#include "vr_cuda_common.cuh"
#include "vr_cuda_roll_ops.h"

#define SG_WARPS 4
#define SG_NT 4                          /* 8-column tiles per warp */
#define SG_BN (SG_WARPS * SG_NT * 8)     /* columns per block: 128 */

namespace {

struct sg_params {
  void *D;
  const uint16_t *A, *W;
  const void *bias;
  float *ws;
  int M, N, K, out_f32, beta1, splits;
};

__device__ __forceinline__ void mma16816(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* The epilogue of two adjacent columns (col, col + 1) of row r. */
__device__ __forceinline__ void sg_store(const sg_params &p, int r, int col, float v0, float v1) {
  const size_t i = (size_t)r * p.N + col;
  if (p.out_f32) {
    float *d = static_cast<float *>(p.D);
    if (p.bias) {
      v0 += static_cast<const float *>(p.bias)[col];
      v1 += static_cast<const float *>(p.bias)[col + 1];
    }
    if (p.beta1) {
      const float2 o = *reinterpret_cast<const float2 *>(d + i);
      v0 += o.x;
      v1 += o.y;
    }
    *reinterpret_cast<float2 *>(d + i) = make_float2(v0, v1);
  } else {
    uint16_t *d = static_cast<uint16_t *>(p.D);
    if (p.bias) {
      v0 += bf(static_cast<const uint16_t *>(p.bias)[col]);
      v1 += bf(static_cast<const uint16_t *>(p.bias)[col + 1]);
    }
    *reinterpret_cast<uint32_t *>(d + i) = (uint32_t)to_bf(v0) | ((uint32_t)to_bf(v1) << 16);
  }
}

template <int MT>
__global__ void __launch_bounds__(SG_WARPS * 32) k_skinny(sg_params p) {
  constexpr int SG_U = MT == 1 ? 4 : 2; /* k-chunks of 32 per pipeline stage (registers: 2 stages in flight) */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, tig = lane & 3;
  const int n_w = blockIdx.x * SG_BN + warp * SG_NT * 8; /* the warp's first column */
  const int split = blockIdx.y, nch = p.K / 32;
  const int c0 = (int)((long long)nch * split / p.splits), c1 = (int)((long long)nch * (split + 1) / p.splits);
  const uint4 z4 = make_uint4(0u, 0u, 0u, 0u);
  /* one base pointer each, tiles at constant offsets: thread (g, tig) reads W row n_w + nt*8 + g
   * and A rows mt*16 + h*8 + g, 8 elements from tig*8 of each 32-chunk */
  const uint16_t *wbase = p.W + (size_t)(n_w + g) * p.K + tig * 8;
  const uint16_t *abase = p.A + (size_t)g * p.K + tig * 8;
  unsigned wok = 0, aok = 0; /* bit nt: the tile exists (N % 8 == 0: all in or all out); bit 2mt+h: the row */
#pragma unroll
  for (int nt = 0; nt < SG_NT; ++nt) wok |= (n_w + nt * 8 < p.N ? 1u : 0u) << nt;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) aok |= (mt * 16 + h * 8 + g < p.M ? 1u : 0u) << (2 * mt + h);
  const size_t K8 = (size_t)8 * p.K;
  float acc[MT][SG_NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < SG_NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
  uint4 wb[SG_U][SG_NT];
#pragma unroll
  for (int u = 0; u < SG_U; ++u)
#pragma unroll
    for (int nt = 0; nt < SG_NT; ++nt)
      wb[u][nt] = c0 + u < c1 && (wok >> nt & 1u)
                      ? __ldg(reinterpret_cast<const uint4 *>(wbase + nt * K8 + (size_t)(c0 + u) * 32))
                      : z4;
  for (int c = c0; c < c1; c += SG_U) {
    uint4 wn[SG_U][SG_NT]; /* the next stage, in flight while this one multiplies */
#pragma unroll
    for (int u = 0; u < SG_U; ++u)
#pragma unroll
      for (int nt = 0; nt < SG_NT; ++nt) {
        const int cc = c + SG_U + u;
        wn[u][nt] =
            cc < c1 && (wok >> nt & 1u) ? __ldg(reinterpret_cast<const uint4 *>(wbase + nt * K8 + (size_t)cc * 32)) : z4;
      }
#pragma unroll
    for (int u = 0; u < SG_U; ++u) {
      const int cc = c + u;
      if (cc < c1) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const uint16_t *a = abase + (size_t)mt * 2 * K8 + (size_t)cc * 32;
          const uint4 lo = aok >> (2 * mt) & 1u ? __ldg(reinterpret_cast<const uint4 *>(a)) : z4;
          const uint4 hi = aok >> (2 * mt + 1) & 1u ? __ldg(reinterpret_cast<const uint4 *>(a + K8)) : z4;
#pragma unroll
          for (int nt = 0; nt < SG_NT; ++nt) {
            mma16816(acc[mt][nt], lo.x, hi.x, lo.y, hi.y, wb[u][nt].x, wb[u][nt].y);
            mma16816(acc[mt][nt], lo.z, hi.z, lo.w, hi.w, wb[u][nt].z, wb[u][nt].w);
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < SG_U; ++u)
#pragma unroll
      for (int nt = 0; nt < SG_NT; ++nt) wb[u][nt] = wn[u][nt];
  }
  /* accumulator slots: (row g, cols tig*2, +1) and (row g + 8, the same cols) of each tile */
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < SG_NT; ++nt) {
      if (!(wok >> nt & 1u)) continue;
      const int col = n_w + nt * 8 + tig * 2;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = mt * 16 + h * 8 + g;
        if (r >= p.M) continue;
        if (p.splits > 1)
          *reinterpret_cast<float2 *>(p.ws + ((size_t)split * p.M + r) * p.N + col) =
              make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
        else
          sg_store(p, r, col, acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
      }
    }
}

/* One thread per two adjacent outputs: the splits' partials summed in order, then the epilogue. */
__global__ void k_skinny_reduce(sg_params p) {
  const size_t n2 = (size_t)p.M * p.N / 2;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n2; i += (size_t)gridDim.x * blockDim.x) {
    const size_t e = 2 * i;
    float2 v = *reinterpret_cast<const float2 *>(p.ws + e);
    for (int s = 1; s < p.splits; ++s) {
      const float2 w = *reinterpret_cast<const float2 *>(p.ws + (size_t)s * p.M * p.N + e);
      v.x += w.x;
      v.y += w.y;
    }
    sg_store(p, (int)(e / p.N), (int)(e % p.N), v.x, v.y);
  }
}

/* res[0] = max |a - b|, res[1] = max |b| as float bits (non-negative floats order as unsigned;
 * a NaN difference compares above every finite one). */
__global__ void k_skinny_cmp(const void *a, const void *b, int f32, size_t n, unsigned *res) {
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

} /* namespace */

/* -------------------------------------------------------------- launchers */

extern "C" int vr_cuda_roll_gemm_supported(int M, int N, int K, int splits) {
  return M >= 1 && M <= VR_ROLL_GEMM_MAX_M && N >= 8 && N % 8 == 0 && K >= 32 && K % 32 == 0 && splits >= 1 &&
         splits <= K / 32;
}

extern "C" void vr_cuda_roll_gemm(void *D, int out_f32, const uint16_t *A, const uint16_t *W, const void *bias, int M,
                                  int N, int K, float beta, int splits, float *ws, cudaStream_t s) {
  VR_ASSERT(vr_cuda_roll_gemm_supported(M, N, K, splits) && (beta == 0.f || (beta == 1.f && out_f32)));
  VR_ASSERT(splits == 1 || ws);
  VR_ASSERT(((uintptr_t)A | (uintptr_t)W) % 16 == 0 && (uintptr_t)D % 8 == 0);
  const sg_params p = {D, A, W, bias, ws, M, N, K, out_f32, beta == 1.f, splits};
  const dim3 grid((unsigned)((N + SG_BN - 1) / SG_BN), (unsigned)splits);
  const int mt = (M + 15) / 16;
  if (mt == 1) k_skinny<1><<<grid, SG_WARPS * 32, 0, s>>>(p);
  else if (mt == 2) k_skinny<2><<<grid, SG_WARPS * 32, 0, s>>>(p);
  else k_skinny<4><<<grid, SG_WARPS * 32, 0, s>>>(p);
  VR_CUDA_CHECK_LAUNCH();
  if (splits > 1) {
    k_skinny_reduce<<<grid_for((size_t)M * N / 2, 256), 256, 0, s>>>(p);
    VR_CUDA_CHECK_LAUNCH();
  }
}

extern "C" void vr_cuda_roll_gemm_compare(const void *a, const void *b, int out_f32, size_t n, unsigned *res,
                                          cudaStream_t s) {
  VR_CUDA_CHECK(cudaMemsetAsync(res, 0, 2 * sizeof(unsigned), s));
  if (n == 0) return;
  k_skinny_cmp<<<grid_for(n, 256) < 264 ? grid_for(n, 256) : 264, 256, 0, s>>>(a, b, out_f32, n, res);
  VR_CUDA_CHECK_LAUNCH();
}
