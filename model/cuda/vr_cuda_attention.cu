/* vr_cuda_attention.cu: variable-length attention over packed sequences, no
 * padding (contract in vr_cuda_ops.h).
 *
 * Tensor-core path (D in 16/32/64/128), FlashAttention-2 style: a block of 4
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

template <int D>
static void launch_wmma(const attn_params &p, dim3 grid, cudaStream_t s) {
  const size_t sh = attn_smem<D>::bytes;
  /* The attribute belongs to the function on the current device: set it once per device. */
  static int attr_set[64];
  const int dev = vr_cuda_current_device_();
  if (dev < 0 || dev >= 64 || !attr_set[dev]) {
    VR_CUDA_CHECK(cudaFuncSetAttribute(k_attn_wmma<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sh));
    if (dev >= 0 && dev < 64) attr_set[dev] = 1;
  }
  k_attn_wmma<D><<<grid, NWARP * 32, sh, s>>>(p);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" int vr_cuda_attention_path(int D) {
  if (D == 16 || D == 32 || D == 64 || D == 128) return 1;
  if (D >= 1 && D <= 256) return 0;
  return -1;
}

extern "C" void vr_cuda_attention(const uint16_t *qkv, int ld, int q_off, int k_off, int v_off,
                                  uint16_t *out, int ld_out, const int32_t *cu,
                                  const int32_t *tiles, const int32_t *meta, int grid_tiles, int H,
                                  int Hkv, int D, int causal, int window, float scale,
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
    case 16: launch_wmma<16>(p, grid, s); return;
    case 32: launch_wmma<32>(p, grid, s); return;
    case 64: launch_wmma<64>(p, grid, s); return;
    case 128: launch_wmma<128>(p, grid, s); return;
    default:
      k_attn_generic<<<grid, NWARP * 32, NWARP * D * sizeof(float), s>>>(p, D);
      VR_CUDA_CHECK_LAUNCH();
  }
}
