/* vr_cuda_roll_kv.cu: K/V of new tokens into the paged cache, alone or fused with the rotary
 * embedding of the token's q and k heads (contracts and layout in vr_cuda_roll_ops.h). */
#include "vr_cuda_common.cuh"
#include "vr_cuda_roll_ops.h"
#include "vr_cuda_roll_rope.cuh"

/* ---------------------------------------------------------------- kernels */

/* One thread per (token, kv head, 8-element chunk): one 16-byte load and store each for K
 * and V. */
__global__ void k_roll_kv_append(uint16_t *kc, uint16_t *vc, const uint16_t *qkv, int ld, int k_off, int v_off,
                                 const int32_t *slots, int T, int Hkv, int D) {
  const int nc = D / 8;
  const size_t n = (size_t)T * Hkv * nc;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const int c = (int)(i % nc);
    const int hk = (int)((i / nc) % Hkv);
    const int t = (int)(i / ((size_t)nc * Hkv));
    const int slot = slots[t];
    if (slot < 0) continue;
    const size_t blk = (size_t)(slot / VR_ROLL_BLOCK), off = (size_t)(slot % VR_ROLL_BLOCK);
    const uint16_t *row = qkv + (size_t)t * ld;
    const uint4 kv = *reinterpret_cast<const uint4 *>(row + k_off + hk * D + c * 8);
    const uint4 vv = *reinterpret_cast<const uint4 *>(row + v_off + hk * D + c * 8);
    const size_t head = blk * Hkv + hk;
    *reinterpret_cast<uint4 *>(kc + ((head * nc + c) * VR_ROLL_BLOCK + off) * 8) = kv;
    *reinterpret_cast<uint4 *>(vc + (head * VR_ROLL_BLOCK + off) * D + c * 8) = vv;
  }
}

/* One block per token: the D/2 angles once into shared memory (D floats), every (head, i) pair of
 * the token's q and k heads rotated in place (model/cuda/vr_cuda_rope.cu's arithmetic), the
 * rotated k pairs also into the key cache, then the value heads in 16-byte chunks. */
__global__ void k_roll_rope_append(uint16_t *kc, uint16_t *vc, uint16_t *qkv, int ld, int q_off, int k_off, int v_off,
                                   const int32_t *pos, const int32_t *slots, const float *inv_freq, float scaling,
                                   int H, int Hkv, int D) {
  extern __shared__ float cs_sn[];
  const int half = D / 2, nh = H + Hkv, nc = D / 8;
  const size_t t = blockIdx.x;
  const float p = (float)pos[t];
  for (int i = threadIdx.x; i < half; i += blockDim.x) roll_rope_angle(p, inv_freq[i], scaling, &cs_sn[i], &cs_sn[half + i]);
  __syncthreads();
  uint16_t *row = qkv + t * ld;
  const int slot = slots[t];
  const size_t blk = slot >= 0 ? (size_t)(slot / VR_ROLL_BLOCK) : 0, off = slot >= 0 ? (size_t)(slot % VR_ROLL_BLOCK) : 0;
  for (int idx = threadIdx.x; idx < nh * half; idx += blockDim.x) {
    const int j = idx / half, i = idx - j * half;
    uint16_t *base = row + (j < H ? q_off + j * D : k_off + (j - H) * D);
    const float cs = cs_sn[i], sn = cs_sn[half + i];
    uint16_t y1, y2;
    roll_rope_pair(bf(base[i]), bf(base[i + half]), cs, sn, &y1, &y2);
    base[i] = y1;
    base[i + half] = y2;
    if (j >= H && slot >= 0) {
      const size_t head = blk * Hkv + (size_t)(j - H);
      const int i2 = i + half;
      kc[((head * nc + i / 8) * VR_ROLL_BLOCK + off) * 8 + i % 8] = y1;
      kc[((head * nc + i2 / 8) * VR_ROLL_BLOCK + off) * 8 + i2 % 8] = y2;
    }
  }
  if (slot < 0) return;
  for (int idx = threadIdx.x; idx < Hkv * nc; idx += blockDim.x) {
    const int hk = idx / nc, c = idx - hk * nc;
    const uint4 vv = *reinterpret_cast<const uint4 *>(row + v_off + hk * D + c * 8);
    *reinterpret_cast<uint4 *>(vc + ((blk * Hkv + hk) * VR_ROLL_BLOCK + off) * D + c * 8) = vv;
  }
}

/* -------------------------------------------------------------- launchers */

extern "C" void vr_cuda_roll_kv_append(uint16_t *kc, uint16_t *vc, const uint16_t *qkv, int ld, int k_off,
                                       int v_off, const int32_t *slots, int T, int Hkv, int D, cudaStream_t s) {
  if (T <= 0) return;
  VR_ASSERT(D % 8 == 0 && ld % 8 == 0 && k_off % 8 == 0 && v_off % 8 == 0);
  const size_t n = (size_t)T * Hkv * (D / 8);
  size_t g = (n + 255) / 256;
  if (g > 65535u * 8u) g = 65535u * 8u;
  k_roll_kv_append<<<(unsigned)g, 256, 0, s>>>(kc, vc, qkv, ld, k_off, v_off, slots, T, Hkv, D);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_roll_rope_append(uint16_t *kc, uint16_t *vc, uint16_t *qkv, int ld, int q_off, int k_off,
                                         int v_off, const int32_t *pos, const int32_t *slots, const float *inv_freq,
                                         float attn_scaling, int T, int H, int Hkv, int D, cudaStream_t s) {
  if (T <= 0) return;
  VR_ASSERT(D % 8 == 0 && ld % 8 == 0 && v_off % 8 == 0);
  k_roll_rope_append<<<T, 128, (size_t)D * sizeof(float), s>>>(kc, vc, qkv, ld, q_off, k_off, v_off, pos, slots,
                                                              inv_freq, attn_scaling, H, Hkv, D);
  VR_CUDA_CHECK_LAUNCH();
}
