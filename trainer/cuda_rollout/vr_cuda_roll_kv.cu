/* vr_cuda_roll_kv.cu: K/V of new tokens into the paged cache (contract and layout in
 * vr_cuda_roll_ops.h). */
#include "vr_cuda_check.h"
#include "vr_cuda_roll_ops.h"

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
