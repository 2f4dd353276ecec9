/* vr_cuda_attention.cu: variable-length attention over packed sequences, no padding
 * (contract in vr_cuda_ops.h). First the kernels, then the launchers.
 *
 * Tensor-core path (D in 16/32/64/128): k_attn_fa (vr_cuda_attention_fa.cuh), FlashAttention-2
 * on mma.sync: a block owns one query tile of one (sequence, head), K/V tiles of 64 keys are
 * double-buffered in shared memory with cp.async, S, P and O live in registers, online
 * softmax in fp32 with the scale folded into ex2; keys past the sequence end, above the
 * diagonal (causal) or outside the sliding window are masked. Two configurations, picked by
 * shape (vr_cuda_attention_kernel): 128-row tiles of 4 warps x 32 rows (VR_CUDA_ATTN_KERNEL_FA128,
 * head_dim <= 64 in batches of VR_ATTN_FA128_MIN_ROWS rows or more) and 64-row tiles of 4 warps
 * x 16 rows (VR_CUDA_ATTN_KERNEL_FA64, smaller batches and head_dim 128). The kernels they were
 * chosen against are in tests/cuda/cuda_attention_bench.cu.
 *
 * Hopper path (D 64/128, sm_90a builds on compute 9.0 devices, batches of VR_ATTN_FA3_MIN_ROWS
 * rows or more): k_attn_fa3 (vr_cuda_attention_fa3.cu, VR_CUDA_ATTN_KERNEL_FA3), TMA + wgmma,
 * warp-specialised, 128-row tiles.
 *
 * Fallback path (any D <= 256, VR_CUDA_ATTN_KERNEL_GENERIC): one warp per query row, fp32, keys
 * 32 at a time (lane j scores key j, then the warp accumulates lane-owned dims).
 *
 * Every kernel takes the same tile list and loops over it (blockIdx.x stride gridDim.x), so a
 * graph captured with an upper-bound grid serves any batch. */
#include "vr_cuda_attention_fa.cuh"

namespace {

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

} /* namespace */

/* -------------------------------------------------------------- launchers */

/* FA128 for D <= 64 in batches of at least this many rows (or an unknown count); below it,
 * and for D = 128, FA64: with few tiles the GPU is not full and a smaller tile spreads the
 * work over more blocks (docs/benchmarks.md, "Numbers behind the CUDA backend's code"). */
#define VR_ATTN_FA128_MIN_ROWS 4096
/* FA3 (Hopper) from this many rows (docs/benchmarks.md, "Issue 24: FA3-class attention") */
#define VR_ATTN_FA3_MIN_ROWS 4096
/* k_attn_fa's configurations in the library: FA_NW warps of FA64_MT / FA128_MT m16 tiles, no
 * register bound, Q fragments in registers */
#define FA_NW 4
#define FA64_MT 1
#define FA128_MT 2

extern "C" int vr_cuda_attention_kernel_fits(vr_cuda_attn_kernel_t k, int D) {
  switch (k) {
    case VR_CUDA_ATTN_KERNEL_FA3: return vr_cuda_attention_fa3_ok(D);
    case VR_CUDA_ATTN_KERNEL_GENERIC: return D >= 1 && D <= 256;
    case VR_CUDA_ATTN_KERNEL_FA64: return D == 16 || D == 32 || D == 64 || D == 128;
    case VR_CUDA_ATTN_KERNEL_FA128: return D == 16 || D == 32 || D == 64;
  }
  return 0;
}

extern "C" const char *vr_cuda_attention_kernel_name(vr_cuda_attn_kernel_t k) {
  switch (k) {
    case VR_CUDA_ATTN_KERNEL_GENERIC: return "generic";
    case VR_CUDA_ATTN_KERNEL_FA64: return "fa64";
    case VR_CUDA_ATTN_KERNEL_FA128: return "fa128";
    case VR_CUDA_ATTN_KERNEL_FA3: return "fa3";
  }
  return "?";
}

extern "C" vr_cuda_attn_kernel_t vr_cuda_attention_kernel(int D, int rows_hint) {
  if (!vr_cuda_attention_kernel_fits(VR_CUDA_ATTN_KERNEL_FA64, D)) return VR_CUDA_ATTN_KERNEL_GENERIC;
  if (rows_hint >= VR_ATTN_FA3_MIN_ROWS && vr_cuda_attention_fa3_ok(D)) return VR_CUDA_ATTN_KERNEL_FA3;
  return D <= 64 && (rows_hint <= 0 || rows_hint >= VR_ATTN_FA128_MIN_ROWS) ? VR_CUDA_ATTN_KERNEL_FA128
                                                                           : VR_CUDA_ATTN_KERNEL_FA64;
}

extern "C" int vr_cuda_attention_kernel_rows(vr_cuda_attn_kernel_t k) {
  return k == VR_CUDA_ATTN_KERNEL_FA128 || k == VR_CUDA_ATTN_KERNEL_FA3 ? 128 : BM;
}

extern "C" int vr_cuda_attention_tile_rows(int D, int rows_hint) {
  return vr_cuda_attention_kernel_rows(vr_cuda_attention_kernel(D, rows_hint));
}

/* The tensor-core kernels of head_dim D (FA128 only instantiated for D <= 64). */
template <int D>
static void launch_fa(vr_cuda_attn_kernel_t k, const attn_params &p, dim3 grid, cudaStream_t s) {
  if (k == VR_CUDA_ATTN_KERNEL_FA128) fa_launch<D <= 64 ? D : 64, FA_NW, FA128_MT, 1, false>(p, grid, s);
  else fa_launch<D, FA_NW, FA64_MT, 1, false>(p, grid, s);
}

template <int D>
static int resident_fa(vr_cuda_attn_kernel_t k) {
  if (k == VR_CUDA_ATTN_KERNEL_FA128) return fa_resident<D <= 64 ? D : 64, FA_NW, FA128_MT, 1, false>();
  return fa_resident<D, FA_NW, FA64_MT, 1, false>();
}

extern "C" int vr_cuda_attention_kernel_resident(vr_cuda_attn_kernel_t k, int D) {
  if (k == VR_CUDA_ATTN_KERNEL_FA3) return vr_cuda_attention_fa3_resident(D);
  if (k != VR_CUDA_ATTN_KERNEL_GENERIC && vr_cuda_attention_kernel_fits(k, D)) {
    switch (D) {
      case 16: return resident_fa<16>(k);
      case 32: return resident_fa<32>(k);
      case 64: return resident_fa<64>(k);
      case 128: return resident_fa<128>(k);
      default: break;
    }
  }
  return 4;
}

extern "C" int vr_cuda_attention_resident_blocks(int D, int rows_hint) {
  return vr_cuda_attention_kernel_resident(vr_cuda_attention_kernel(D, rows_hint), D);
}

extern "C" void vr_cuda_attention_run(vr_cuda_attn_kernel_t k, const uint16_t *qkv, int ld, int q_off, int k_off,
                                      int v_off, uint16_t *out, int ld_out, const int32_t *cu, const int32_t *tiles,
                                      const int32_t *meta, int grid_tiles, int H, int Hkv, int D, int causal,
                                      int window, float scale, int rows, cudaStream_t s) {
  if (grid_tiles <= 0) return;
  VR_ASSERT(H > 0 && Hkv > 0 && H % Hkv == 0 && vr_cuda_attention_kernel_fits(k, D));
  if (k == VR_CUDA_ATTN_KERNEL_FA3) {
    vr_cuda_attention_fa3(qkv, ld, rows, q_off, k_off, v_off, out, ld_out, NULL, cu, tiles, meta, grid_tiles, H, Hkv, D,
                          causal, window, scale, 0, s);
    return;
  }
  const attn_params p =
      attn_params_make(qkv, ld, q_off, k_off, v_off, out, ld_out, cu, tiles, meta, H, Hkv, causal, window, scale);
  const dim3 grid((unsigned)grid_tiles, (unsigned)H);
  if (k != VR_CUDA_ATTN_KERNEL_GENERIC) {
    switch (D) {
      case 16: launch_fa<16>(k, p, grid, s); return;
      case 32: launch_fa<32>(k, p, grid, s); return;
      case 64: launch_fa<64>(k, p, grid, s); return;
      case 128: launch_fa<128>(k, p, grid, s); return;
      default: break;
    }
  }
  k_attn_generic<<<grid, NWARP * 32, NWARP * D * sizeof(float), s>>>(p, D);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_attention(const uint16_t *qkv, int ld, int q_off, int k_off, int v_off,
                                  uint16_t *out, int ld_out, const int32_t *cu,
                                  const int32_t *tiles, const int32_t *meta, int grid_tiles, int H,
                                  int Hkv, int D, int causal, int window, float scale, int rows_hint,
                                  cudaStream_t s) {
  vr_cuda_attention_run(vr_cuda_attention_kernel(D, rows_hint), qkv, ld, q_off, k_off, v_off, out, ld_out, cu, tiles,
                        meta, grid_tiles, H, Hkv, D, causal, window, scale, rows_hint, s);
}

extern "C" void vr_cuda_attention_lse(const uint16_t *qkv, int ld, int q_off, int k_off, int v_off, uint16_t *out,
                                      int ld_out, float *lse, const int32_t *cu, const int32_t *tiles,
                                      const int32_t *meta, int grid_tiles, int H, int Hkv, int D, int causal,
                                      int window, float scale, int rows_hint, cudaStream_t s) {
  if (grid_tiles <= 0) return;
  const vr_cuda_attn_kernel_t k = vr_cuda_attention_kernel(D, rows_hint);
  VR_ASSERT(H > 0 && Hkv > 0 && H % Hkv == 0 && k != VR_CUDA_ATTN_KERNEL_GENERIC && lse);
  if (k == VR_CUDA_ATTN_KERNEL_FA3) {
    vr_cuda_attention_fa3(qkv, ld, rows_hint, q_off, k_off, v_off, out, ld_out, lse, cu, tiles, meta, grid_tiles, H,
                          Hkv, D, causal, window, scale, 0, s);
    return;
  }
  attn_params p = attn_params_make(qkv, ld, q_off, k_off, v_off, out, ld_out, cu, tiles, meta, H, Hkv, causal, window, scale);
  p.lse = lse;
  const dim3 grid((unsigned)grid_tiles, (unsigned)H);
  switch (D) {
    case 16: launch_fa<16>(k, p, grid, s); return;
    case 32: launch_fa<32>(k, p, grid, s); return;
    case 64: launch_fa<64>(k, p, grid, s); return;
    case 128: launch_fa<128>(k, p, grid, s); return;
    default: VR_ASSERT(0 && "no tensor-core kernel for this head_dim");
  }
}
