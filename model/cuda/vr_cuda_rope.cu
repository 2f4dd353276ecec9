/* vr_cuda_rope.cu: rotary position embeddings (rotate_half) on the q and k heads. Contract in
 * vr_cuda_ops.h. */
#include "vr_cuda_common.cuh"

/* ---------------------------------------------------------------- kernels */

/* cs_sn[i] = cos, cs_sn[half + i] = sin of angle p * inv_freq[i], both times scaling, for the
 * block's token; returns after the block's barrier. */
__device__ __forceinline__ void rope_angles(float *cs_sn, float p, const float *inv_freq, int half, float scaling) {
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float sn, cs;
    sincosf(p * inv_freq[i], &sn, &cs);
    cs_sn[i] = cs * scaling;
    cs_sn[half + i] = sn * scaling;
  }
  __syncthreads();
}

/* One block per token: the D/2 angles once into shared memory (dynamic, D
 * floats), then every (head, i) pair of the token's q and k heads. */
__global__ void k_rope(uint16_t *qkv, int ld, int q_off, int k_off, int H, int Hkv, int D,
                       const int32_t *pos, const float *inv_freq, float scaling) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  extern __shared__ float cs_sn[];
  const int half = D / 2, nh = H + Hkv;
  const size_t t = blockIdx.x;
  rope_angles(cs_sn, (float)pos[t], inv_freq, half, scaling);
  uint16_t *row = qkv + t * ld;
  for (int idx = threadIdx.x; idx < nh * half; idx += blockDim.x) {
    const int j = idx / half, i = idx - j * half;
    uint16_t *base = row + (j < H ? q_off + j * D : k_off + (j - H) * D);
    const float cs = cs_sn[i], sn = cs_sn[half + i];
    const float x1 = bf(base[i]), x2 = bf(base[i + half]);
    base[i] = to_bf(x1 * cs - x2 * sn);
    base[i + half] = to_bf(x2 * cs + x1 * sn);
  }
}

/* The same with 8 pairs (two 16-byte loads, two stores) per thread and step: D % 16 == 0, ld,
 * q_off and k_off multiples of 8, qkv 16-byte aligned. The same operations per element as
 * k_rope (the same bits); the scalar kernel's 2-byte accesses left it far under the copy rate
 * at 16k-token batches. */
__global__ void k_rope8(uint16_t *qkv, int ld, int q_off, int k_off, int H, int Hkv, int D, const int32_t *pos,
                        const float *inv_freq, float scaling) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  extern __shared__ float cs_sn[];
  const int half = D / 2, h8 = half / 8, nh = H + Hkv;
  const size_t t = blockIdx.x;
  rope_angles(cs_sn, (float)pos[t], inv_freq, half, scaling);
  uint16_t *row = qkv + t * ld;
  for (int idx = threadIdx.x; idx < nh * h8; idx += blockDim.x) {
    const int j = idx / h8, i0 = (idx - j * h8) * 8;
    uint16_t *base = row + (j < H ? q_off + j * D : k_off + (j - H) * D);
    uint4 a = *reinterpret_cast<const uint4 *>(base + i0), b = *reinterpret_cast<const uint4 *>(base + half + i0);
    uint16_t *a8 = reinterpret_cast<uint16_t *>(&a), *b8 = reinterpret_cast<uint16_t *>(&b);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float cs = cs_sn[i0 + e], sn = cs_sn[half + i0 + e];
      const float x1 = bf(a8[e]), x2 = bf(b8[e]);
      a8[e] = to_bf(x1 * cs - x2 * sn);
      b8[e] = to_bf(x2 * cs + x1 * sn);
    }
    *reinterpret_cast<uint4 *>(base + i0) = a;
    *reinterpret_cast<uint4 *>(base + half + i0) = b;
  }
}

/* -------------------------------------------------------------- launchers */

extern "C" void vr_cuda_rope(uint16_t *qkv, int ld, int q_off, int k_off, int H, int Hkv, int D,
                             const int32_t *pos, const float *inv_freq, float attn_scaling, int T,
                             cudaStream_t s) {
  if (T <= 0 || D < 2) return;
  if (D % 16 == 0 && ld % 8 == 0 && q_off % 8 == 0 && k_off % 8 == 0 && (uintptr_t)qkv % 16 == 0) {
    vr_launch(k_rope8, dim3(T), dim3(128), (size_t)D * sizeof(float), s, qkv, ld, q_off, k_off, H, Hkv, D, pos,
              inv_freq, attn_scaling);
    VR_CUDA_CHECK_LAUNCH();
    return;
  }
  vr_launch(k_rope, dim3(T), dim3(128), (size_t)D * sizeof(float), s, qkv, ld, q_off, k_off, H, Hkv, D, pos, inv_freq,
                                                   attn_scaling);
  VR_CUDA_CHECK_LAUNCH();
}
