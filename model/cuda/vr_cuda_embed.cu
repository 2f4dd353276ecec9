/* vr_cuda_embed.cu: token (+ position + type) embeddings and the first norm of the residual
 * stream. Contracts in vr_cuda_ops.h. */
#include "vr_cuda_common.cuh"

/* ---------------------------------------------------------------- kernels */

__device__ __forceinline__ float emb_at(const uint16_t *e, size_t i) { return bf(e[i]); }
__device__ __forceinline__ float emb_at(const float *e, size_t i) { return e[i]; }

/* One block per token row; E = uint16_t (bf16 tables) or float (fp32 tables). */
template <typename E>
__global__ void k_embed_norm(float *x, uint16_t *xn, const int32_t *ids, const int32_t *pos,
                             const E *tok, const E *pos_emb, const E *type_emb,
                             const float *w, const float *b, int C, float eps) {
  vr_pdl_wait(); /* first: see vr_cuda_launch.cuh */
  __shared__ float red[32];
  const size_t t = blockIdx.x;
  float *xr = x + t * C;
  uint16_t *xnr = xn + t * C;
  const E *te = tok + (size_t)ids[t] * C;
  if (pos_emb) { /* encoder: LayerNorm of the three embeddings */
    const E *pe = pos_emb + (size_t)pos[t] * C;
    float s = 0.f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      const float v = emb_at(te, c) + emb_at(pe, c) + (type_emb ? emb_at(type_emb, c) : 0.f);
      xr[c] = v;
      s += v;
    }
    layernorm_row(xr, xnr, w, b, C, eps, s, red);
  } else { /* decoder: raw embedding into the residual, RMSNorm of layer 0 into xn */
    float q = 0.f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      const float v = emb_at(te, c);
      xr[c] = v;
      q += v * v;
    }
    const float r = rsqrtf(block_sum(q, red) / C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x) xnr[c] = to_bf(xr[c] * r * w[c]);
  }
}

/* -------------------------------------------------------------- launchers */

extern "C" void vr_cuda_embed_norm(float *x, uint16_t *xn, const int32_t *ids, const int32_t *pos,
                                   const void *tok, const void *pos_emb, const void *type_emb,
                                   int emb_f32, const float *w, const float *b, int T, int C,
                                   float eps, cudaStream_t s) {
  if (T <= 0) return;
  if (emb_f32)
    vr_launch(k_embed_norm<float>, dim3(T), dim3(norm_threads(C)), 0, s, x, xn, ids, pos, (const float *)tok, (const float *)pos_emb,
                                                      (const float *)type_emb, w, b, C, eps);
  else
    vr_launch(k_embed_norm<uint16_t>, dim3(T), dim3(norm_threads(C)), 0, s, x, xn, ids, pos, (const uint16_t *)tok,
                                                         (const uint16_t *)pos_emb, (const uint16_t *)type_emb,
                                                         w, b, C, eps);
  VR_CUDA_CHECK_LAUNCH();
}
