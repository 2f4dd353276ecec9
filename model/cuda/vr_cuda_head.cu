/* vr_cuda_head.cu: the score heads on the score rows (decoders: the final RMSNorm fused with
 * the score dot product; encoders: dense + tanh + out_proj). Contracts in vr_cuda_ops.h. */
#include "vr_cuda_common.cuh"

/* ---------------------------------------------------------------- kernels */

#define VR_HEAD_ROWS 8 /* dense rows (warps) per block of the encoder head */

/* One block per sequence (looping when the grid is smaller than meta[0]). */
__global__ void k_score_decoder(float *scores, const float *x, const int32_t *rows, const int32_t *meta,
                                const float *norm_w, const float *score_w, int C, float eps) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  __shared__ float red[32];
  const int n = meta[VR_CUDA_META_N_SEQS];
  for (int i = blockIdx.x; i < n; i += gridDim.x) {
    const float *xr = x + (size_t)rows[i] * C;
    float q = 0.f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) q += xr[c] * xr[c];
    const float r = rsqrtf(block_sum(q, red) / C + eps);
    float d = 0.f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) d += xr[c] * r * norm_w[c] * score_w[c];
    d = block_sum(d, red);
    if (threadIdx.x == 0) scores[i] = d;
  }
}

/* Encoder head, part 1. Block (jb, y) takes the VR_HEAD_ROWS dense rows j of block jb for the
 * sequences i = y, y + gridDim.y, ...: partial[i * gridDim.x + jb] =
 * sum_j w2[j] * tanh(w1[j] . x[rows[i]] + b1[j]) (fixed order: deterministic).
 * VR_HEAD_ROWS warps, one dense row each (roberta-base: 96 blocks, each reading 8 rows of W1;
 * with 64 rows a block, 12 blocks took 25.7 us of a 1x256 forward); dynamic shared memory: C
 * floats (the row). */
__global__ void k_score_enc1(float *partial, const float *x, const int32_t *rows, const int32_t *meta,
                             const float *w1, const float *b1, const float *w2, int C) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  extern __shared__ float xs[];
  __shared__ float wsum[VR_HEAD_ROWS];
  const int n = meta[VR_CUDA_META_N_SEQS], nb = gridDim.x, jb = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int i = blockIdx.y; i < n; i += gridDim.y) {
    const float *xr = x + (size_t)rows[i] * C;
    __syncthreads(); /* xs / wsum of the previous sequence consumed */
    for (int c = threadIdx.x; c < C; c += blockDim.x) xs[c] = xr[c];
    __syncthreads();
    float acc = 0.f;
    const int j = jb * VR_HEAD_ROWS + warp;
    if (j < C) {
      const float *wr = w1 + (size_t)j * C;
      float d = 0.f;
      for (int c = lane; c < C; c += 32) d += wr[c] * xs[c];
      for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
      acc = tanhf(d + (b1 ? b1[j] : 0.f)) * w2[j];
    }
    if (lane == 0) wsum[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      float t = 0.f;
      for (int w = 0; w < (int)(blockDim.x >> 5); ++w) t += wsum[w];
      partial[(size_t)i * nb + jb] = t;
    }
  }
}

/* Encoder head, part 2: scores[i] = sum_jb partial[i * nb + jb] + b2 (one thread a sequence). */
__global__ void k_score_enc2(float *scores, const float *partial, const int32_t *meta, const float *b2, int nb) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  const int n = meta[VR_CUDA_META_N_SEQS];
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float t = 0.f;
    for (int k = 0; k < nb; ++k) t += partial[(size_t)i * nb + k];
    scores[i] = t + (b2 ? b2[0] : 0.f);
  }
}

/* -------------------------------------------------------------- launchers */

extern "C" void vr_cuda_score_decoder(float *scores, const float *x, const int32_t *rows,
                                      const int32_t *meta, const float *norm_w,
                                      const float *score_w, int C, float eps, int grid,
                                      cudaStream_t s) {
  if (grid <= 0) return;
  vr_launch(k_score_decoder, dim3(grid), dim3(norm_threads(C)), 0, s, scores, x, rows, meta, norm_w, score_w, C, eps);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_score_encoder(float *scores, const float *x, const int32_t *rows,
                                      const int32_t *meta, const float *w1, const float *b1,
                                      const float *w2, const float *b2, int C, int grid, float *partial,
                                      cudaStream_t s) {
  if (grid <= 0) return;
  const size_t sh = (size_t)C * sizeof(float);
  if (sh > 48 * 1024)
    VR_CUDA_CHECK(cudaFuncSetAttribute(k_score_enc1, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sh));
  const int nb = vr_cuda_score_encoder_blocks(C);
  const dim3 g1((unsigned)nb, (unsigned)(grid < 64 ? grid : 64)); /* sequences loop past 64 */
  vr_launch(k_score_enc1, dim3(g1), dim3(VR_HEAD_ROWS * 32), sh, s, partial, x, rows, meta, w1, b1, w2, C);
  VR_CUDA_CHECK_LAUNCH();
  const int g2 = (grid + 127) / 128;
  vr_launch(k_score_enc2, dim3(g2 < 64 ? g2 : 64), dim3(128), 0, s, scores, partial, meta, b2, nb);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" int vr_cuda_score_encoder_blocks(int C) { return (C + VR_HEAD_ROWS - 1) / VR_HEAD_ROWS; }
