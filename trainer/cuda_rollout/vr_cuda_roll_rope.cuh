/* vr_cuda_roll_rope.cuh: the rotary embedding's arithmetic (model/cuda/vr_cuda_rope.cu's:
 * rotate_half, times attn_scaling), shared by the kernels that apply it (vr_cuda_roll_kv.cu's
 * rope + append, vr_cuda_roll_attn.cu's decode attention with the rope fused) so that both give the
 * same bits. */
#ifndef VR_CUDA_ROLL_ROPE_CUH
#define VR_CUDA_ROLL_ROPE_CUH

#include "vr_cuda_common.cuh"

/* cos and sin of position p at frequency inv_freq, times scaling. */
__device__ __forceinline__ void roll_rope_angle(float p, float inv_freq, float scaling, float *cs, float *sn) {
  float s, c;
  sincosf(p * inv_freq, &s, &c);
  *cs = c * scaling;
  *sn = s * scaling;
}

/* The rotated pair (x1, x2) = (x[i], x[i + D/2]) at angles (cs, sn): y1 into *y1, y2 into *y2. */
__device__ __forceinline__ void roll_rope_pair(float x1, float x2, float cs, float sn, uint16_t *y1, uint16_t *y2) {
  *y1 = to_bf(x1 * cs - x2 * sn);
  *y2 = to_bf(x2 * cs + x1 * sn);
}

#endif /* VR_CUDA_ROLL_ROPE_CUH */
