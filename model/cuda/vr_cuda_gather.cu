/* vr_cuda_gather.cu: row gathers (the score rows of the last layer's compact pass). Contract
 * in vr_cuda_ops.h. */
#include "vr_cuda_common.cuh"

/* ---------------------------------------------------------------- kernels */

/* One block per destination row; 4-byte words when the row allows, else 2-byte. */
template <typename W>
__global__ void k_gather_rows(W *dst, const W *src, const int32_t *rows, const int32_t *meta, int n, int words) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  const int m = min(n, meta[VR_CUDA_META_N_SEQS]);
  for (int j = blockIdx.x; j < m; j += gridDim.x) {
    const W *a = src + (size_t)rows[j] * words;
    W *b = dst + (size_t)j * words;
    for (int i = threadIdx.x; i < words; i += blockDim.x) b[i] = a[i];
  }
}

/* -------------------------------------------------------------- launchers */

extern "C" void vr_cuda_gather_rows(void *dst, const void *src, const int32_t *rows, const int32_t *meta, int n,
                                    int row_bytes, cudaStream_t s) {
  if (n <= 0 || row_bytes <= 0) return;
  const unsigned blocks = n < 65535 ? (unsigned)n : 65535u;
  if (row_bytes % 4 == 0)
    vr_launch(k_gather_rows<uint32_t>, dim3(blocks), dim3(128), 0, s, (uint32_t *)dst, (const uint32_t *)src, rows, meta, n, row_bytes / 4);
  else
    vr_launch(k_gather_rows<uint16_t>, dim3(blocks), dim3(128), 0, s, (uint16_t *)dst, (const uint16_t *)src, rows, meta, n, row_bytes / 2);
  VR_CUDA_CHECK_LAUNCH();
}
