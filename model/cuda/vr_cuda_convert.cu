/* vr_cuda_convert.cu: weight conversions at load (f32 / f16 / bf16 files to the backend's
 * bf16 and fp32 tensors). Contracts in vr_cuda_ops.h. */
#include <cuda_fp16.h>

#include <atomic>

#include "vr_backend.h" /* vr_dtype_t */
#include "vr_cuda_common.cuh"

/* ---------------------------------------------------------------- kernels */

__device__ __forceinline__ float load_any(const void *src, int dtype, size_t i) {
  if (dtype == VR_DTYPE_F32) return reinterpret_cast<const float *>(src)[i];
  if (dtype == VR_DTYPE_F16) return __half2float(reinterpret_cast<const __half *>(src)[i]);
  return bf(reinterpret_cast<const uint16_t *>(src)[i]);
}

__global__ void k_convert_bf16(uint16_t *dst, const void *src, int dtype, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = to_bf(load_any(src, dtype, i));
}

__global__ void k_convert_f32(float *dst, const void *src, int dtype, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = load_any(src, dtype, i);
}

/* -------------------------------------------------------------- launchers */

extern "C" void vr_cuda_convert_to_bf16(uint16_t *dst, const void *src, int src_dtype, size_t n,
                                        cudaStream_t s) {
  if (n == 0) return;
  k_convert_bf16<<<grid_for(n, 256), 256, 0, s>>>(dst, src, src_dtype, n);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_convert_to_f32(float *dst, const void *src, int src_dtype, size_t n,
                                       cudaStream_t s) {
  if (n == 0) return;
  k_convert_f32<<<grid_for(n, 256), 256, 0, s>>>(dst, src, src_dtype, n);
  VR_CUDA_CHECK_LAUNCH();
}

/* ------------------------------------------------- the PDL switch (vr_cuda_launch.cuh) */

/* The process-wide switch behind vr_cuda_launch_pdl: one word, read at every launch. */
static std::atomic<int> &pdl_word() {
  static std::atomic<int> on{0};
  return on;
}
extern "C" int vr_cuda_launch_pdl(void) { return pdl_word().load(std::memory_order_relaxed); }
extern "C" void vr_cuda_set_launch_pdl(int on) { pdl_word().store(on != 0, std::memory_order_relaxed); }
