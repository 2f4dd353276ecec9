/* vr_cutrain_embed.cu: the embedding's backward, a deterministic scatter-add by sorted token
 * segments (no atomics), and the host counting sort that makes the segments. Contracts in
 * vr_cutrain_ops.h. */
#include <string.h>

#include "vr_cuda_common.cuh"
#include "vr_cutrain_ops.h"

/* ---------------------------------------------------------------- kernels */

/* Block u: row uniq[u] of dW += the segment's rows of dx, in segment order. */
__global__ void k_embed_bwd(float *dW, const float *dx, const int32_t *order, const int32_t *seg, const int32_t *uniq,
                            int C) {
  const int u = blockIdx.x, b = seg[u], e = seg[u + 1];
  float *wr = dW + (size_t)uniq[u] * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float a = 0.f;
    for (int j = b; j < e; ++j) a += dx[(size_t)order[j] * C + c];
    wr[c] += a;
  }
}

/* -------------------------------------------------------------- launchers */

extern "C" void vr_cutrain_embed_bwd(float *dW, const float *dx, const int32_t *order, const int32_t *seg,
                                     const int32_t *uniq, int n_uniq, int C, cudaStream_t s) {
  if (n_uniq <= 0) return;
  k_embed_bwd<<<n_uniq, norm_threads(C), 0, s>>>(dW, dx, order, seg, uniq, C);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" int vr_cutrain_embed_segments(const int32_t *ids, int T, int V, int32_t *order, int32_t *seg, int32_t *uniq,
                                         int32_t *count) {
  memset(count, 0, (size_t)V * sizeof(int32_t));
  for (int t = 0; t < T; ++t) {
    if (ids[t] < 0 || ids[t] >= V) return -1;
    count[ids[t]]++;
  }
  int nu = 0, at = 0;
  for (int v = 0; v < V; ++v) { /* count[v] becomes the next free slot of token v */
    if (!count[v]) continue;
    uniq[nu] = v;
    seg[nu++] = at;
    const int c = count[v];
    count[v] = at;
    at += c;
  }
  seg[nu] = at;
  for (int t = 0; t < T; ++t) order[count[ids[t]]++] = t; /* stable: rows in token order */
  return nu;
}
