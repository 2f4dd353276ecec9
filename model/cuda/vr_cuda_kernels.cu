/* vr_cuda_kernels.cu: conversions, embeddings, norms, RoPE, activations and the
 * score heads of the CUDA backend (see vr_cuda_ops.h for the contracts).
 * First the kernels, then the launchers (explicit stream, launch checked).
 * All arithmetic is fp32; bf16 only at the storage boundary. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "vr_cuda_check.h"
#include "vr_cuda_ops.h"

typedef __nv_bfloat16 bf16;

#define VR_NORM_THREADS 256

/* ---------------------------------------------------------------- helpers */

__device__ __forceinline__ float bf(const uint16_t v) { return __uint_as_float(((uint32_t)v) << 16); }

__device__ __forceinline__ uint16_t to_bf(float f) {
  bf16 h = __float2bfloat16_rn(f);
  return *reinterpret_cast<uint16_t *>(&h);
}

__device__ __forceinline__ float load_any(const void *src, int dtype, size_t i) {
  if (dtype == 0) return reinterpret_cast<const float *>(src)[i];
  if (dtype == 1) return __half2float(reinterpret_cast<const __half *>(src)[i]);
  return bf(reinterpret_cast<const uint16_t *>(src)[i]);
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024). red: 32 floats of
 * shared memory; every thread gets the result. */
__device__ float block_sum(float v, float *red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  __syncthreads(); /* red may still be read by a previous call */
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = lane < nw ? red[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

/* ---------------------------------------------------------------- kernels */

/* The rest of a block's LayerNorm of row xr (this thread's partial sum s already taken):
 * xr = LN(xr) * w + b in place (fp32), xnr = bf16 of it. */
__device__ void layernorm_row(float *xr, uint16_t *xnr, const float *w, const float *b, int C, float eps, float s,
                              float *red) {
  const float mean = block_sum(s, red) / C;
  float q = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = xr[c] - mean;
    q += d * d;
  }
  const float rstd = rsqrtf(block_sum(q, red) / C + eps);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = (xr[c] - mean) * rstd * w[c] + b[c];
    xr[c] = v;
    xnr[c] = to_bf(v);
  }
}


__global__ void k_convert_bf16(uint16_t *dst, const void *src, int dtype, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = to_bf(load_any(src, dtype, i));
}

__global__ void k_convert_f32(float *dst, const void *src, int dtype, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = load_any(src, dtype, i);
}

__device__ __forceinline__ float emb_at(const uint16_t *e, size_t i) { return bf(e[i]); }
__device__ __forceinline__ float emb_at(const float *e, size_t i) { return e[i]; }

/* One block per token row; E = uint16_t (bf16 tables) or float (fp32 tables). */
template <typename E>
__global__ void k_embed_norm(float *x, uint16_t *xn, const int32_t *ids, const int32_t *pos,
                             const E *tok, const E *pos_emb, const E *type_emb,
                             const float *w, const float *b, int C, float eps) {
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

__global__ void k_layernorm(float *x, uint16_t *xn, const float *w, const float *b, int C, float eps) {
  __shared__ float red[32];
  const size_t t = blockIdx.x;
  float *xr = x + t * C;
  uint16_t *xnr = xn + t * C;
  float s = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += xr[c];
  layernorm_row(xr, xnr, w, b, C, eps, s, red);
}

/* Vectorised LayerNorm: C % 4 == 0; each thread keeps VPT float4 of the row in registers
 * (one read of x, one write of x and xn); blockDim.x * VPT * 4 >= C. */
template <int VPT>
__global__ void k_layernorm_vec(float *x, uint16_t *xn, const float *w, const float *b, int C, float eps) {
  __shared__ float red[32];
  const size_t t = blockIdx.x;
  float4 *xr = reinterpret_cast<float4 *>(x + t * C);
  uint2 *xnr = reinterpret_cast<uint2 *>(xn + t * C);
  const int C4 = C / 4;
  float4 v[VPT];
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    v[k] = c < C4 ? xr[c] : make_float4(0.f, 0.f, 0.f, 0.f);
    s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
  }
  const float mean = block_sum(s, red) / C;
  float q = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c < C4) {
      const float a = v[k].x - mean, bb = v[k].y - mean, cc = v[k].z - mean, d = v[k].w - mean;
      q += (a * a + bb * bb) + (cc * cc + d * d);
    }
  }
  const float rstd = rsqrtf(block_sum(q, red) / C + eps);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c < C4) {
      const float4 wv = reinterpret_cast<const float4 *>(w)[c], bv = reinterpret_cast<const float4 *>(b)[c];
      float4 o;
      o.x = (v[k].x - mean) * rstd * wv.x + bv.x;
      o.y = (v[k].y - mean) * rstd * wv.y + bv.y;
      o.z = (v[k].z - mean) * rstd * wv.z + bv.z;
      o.w = (v[k].w - mean) * rstd * wv.w + bv.w;
      xr[c] = o;
      uint2 h;
      h.x = (uint32_t)to_bf(o.x) | ((uint32_t)to_bf(o.y) << 16);
      h.y = (uint32_t)to_bf(o.z) | ((uint32_t)to_bf(o.w) << 16);
      xnr[c] = h;
    }
  }
}

/* LayerNorm of a bf16 row (the encoders' bf16 residual stream): xn = bf16(LN(y [+ r]) * w + b),
 * and x = the same in fp32 when x != NULL (the last layer, for the score head); r (bf16,
 * may be xn itself: each lane reads its elements before writing them) or NULL. One warp
 * per row, 8 bf16 (16 bytes) per load, VPT loads per lane: C % 8 == 0, C <= 256 * VPT. */
template <int VPT>
__global__ void k_layernorm_b16(const uint16_t *y, const uint16_t *r, uint16_t *xn, float *x, const float *w,
                                const float *b, int T, int C, float eps) {
  const int lane = threadIdx.x & 31;
  const size_t t = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (t >= (size_t)T) return;
  const int C8 = C / 8;
  const uint4 *yr = reinterpret_cast<const uint4 *>(y + t * C);
  float v[VPT][8];
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int c = lane + 32 * k;
    uint4 u = c < C8 ? yr[c] : make_uint4(0, 0, 0, 0);
    uint4 ru = make_uint4(0, 0, 0, 0);
    if (r && c < C8) ru = reinterpret_cast<const uint4 *>(r + t * C)[c];
    const uint32_t wd[4] = {u.x, u.y, u.z, u.w}, rd[4] = {ru.x, ru.y, ru.z, ru.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      v[k][2 * e] = __uint_as_float(wd[e] << 16) + __uint_as_float(rd[e] << 16);
      v[k][2 * e + 1] = __uint_as_float(wd[e] & 0xFFFF0000u) + __uint_as_float(rd[e] & 0xFFFF0000u);
      s += v[k][2 * e] + v[k][2 * e + 1];
    }
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float mean = s / C;
  float q = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; ++k)
    if (lane + 32 * k < C8)
#pragma unroll
      for (int e = 0; e < 8; ++e) q += (v[k][e] - mean) * (v[k][e] - mean);
  for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
  const float rstd = rsqrtf(q / C + eps);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int c = lane + 32 * k;
    if (c >= C8) continue;
    const float4 w0 = reinterpret_cast<const float4 *>(w)[2 * c], w1 = reinterpret_cast<const float4 *>(w)[2 * c + 1];
    const float4 b0 = reinterpret_cast<const float4 *>(b)[2 * c], b1 = reinterpret_cast<const float4 *>(b)[2 * c + 1];
    const float wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
    const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
    float r[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) r[e] = (v[k][e] - mean) * rstd * wv[e] + bv[e];
    uint4 h;
    h.x = (uint32_t)to_bf(r[0]) | ((uint32_t)to_bf(r[1]) << 16);
    h.y = (uint32_t)to_bf(r[2]) | ((uint32_t)to_bf(r[3]) << 16);
    h.z = (uint32_t)to_bf(r[4]) | ((uint32_t)to_bf(r[5]) << 16);
    h.w = (uint32_t)to_bf(r[6]) | ((uint32_t)to_bf(r[7]) << 16);
    reinterpret_cast<uint4 *>(xn + t * C)[c] = h;
    if (x) {
      float4 *xr = reinterpret_cast<float4 *>(x + t * C);
      xr[2 * c] = make_float4(r[0], r[1], r[2], r[3]);
      xr[2 * c + 1] = make_float4(r[4], r[5], r[6], r[7]);
    }
  }
}

/* Any C: one block per row, two passes over the bf16 row. */
__global__ void k_layernorm_b16_any(const uint16_t *y, const uint16_t *r, uint16_t *xn, float *x, const float *w,
                                    const float *b, int C, float eps) {
  __shared__ float red[32];
  const size_t t = blockIdx.x;
  const uint16_t *yr = y + t * C, *rr = r ? r + t * C : NULL;
  float s = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += bf(yr[c]) + (rr ? bf(rr[c]) : 0.f);
  const float mean = block_sum(s, red) / C;
  float q = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = bf(yr[c]) + (rr ? bf(rr[c]) : 0.f) - mean;
    q += d * d;
  }
  const float rstd = rsqrtf(block_sum(q, red) / C + eps);
  __syncthreads(); /* r may be xn: every thread has read its row before any writes */
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = (bf(yr[c]) + (rr ? bf(rr[c]) : 0.f) - mean) * rstd * w[c] + b[c];
    xn[t * C + c] = to_bf(v);
    if (x) x[t * C + c] = v;
  }
}

__global__ void k_rmsnorm(const float *x, uint16_t *xn, const float *w, int C, float eps) {
  __shared__ float red[32];
  const size_t t = blockIdx.x;
  const float *xr = x + t * C;
  uint16_t *xnr = xn + t * C;
  float q = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) q += xr[c] * xr[c];
  const float r = rsqrtf(block_sum(q, red) / C + eps);
  for (int c = threadIdx.x; c < C; c += blockDim.x) xnr[c] = to_bf(xr[c] * r * w[c]);
}

/* One block per token: the D/2 angles once into shared memory (dynamic, D
 * floats), then every (head, i) pair of the token's q and k heads. */
__global__ void k_rope(uint16_t *qkv, int ld, int q_off, int k_off, int H, int Hkv, int D,
                       const int32_t *pos, const float *inv_freq, float scaling) {
  extern __shared__ float cs_sn[];
  const int half = D / 2, nh = H + Hkv;
  const size_t t = blockIdx.x;
  const float p = (float)pos[t];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float sn, cs;
    sincosf(p * inv_freq[i], &sn, &cs);
    cs_sn[i] = cs * scaling;
    cs_sn[half + i] = sn * scaling;
  }
  __syncthreads();
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

__global__ void k_swiglu8(uint16_t *out, const uint16_t *gu, int T, int I) {
  const uint32_t vpr = (uint32_t)I / 8, total = (uint32_t)T * vpr;
  for (uint32_t idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += gridDim.x * blockDim.x) {
    const uint32_t t = idx / vpr, v = idx - t * vpr;
    const uint4 gv = *reinterpret_cast<const uint4 *>(gu + (size_t)t * 2 * I + v * 8);
    const uint4 uv = *reinterpret_cast<const uint4 *>(gu + (size_t)t * 2 * I + I + v * 8);
    const uint16_t *g8 = reinterpret_cast<const uint16_t *>(&gv), *u8 = reinterpret_cast<const uint16_t *>(&uv);
    uint4 ov;
    uint16_t *o8 = reinterpret_cast<uint16_t *>(&ov);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float g = bf(g8[e]);
      o8[e] = to_bf(g / (1.f + __expf(-g)) * bf(u8[e]));
    }
    *reinterpret_cast<uint4 *>(out + (size_t)idx * 8) = ov;
  }
}

__global__ void k_bias_gelu8(uint16_t *h, const float *b, int T, int I, int tanh_approx) {
  const uint32_t vpr = (uint32_t)I / 8, total = (uint32_t)T * vpr;
  for (uint32_t idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += gridDim.x * blockDim.x) {
    const uint32_t v = idx % vpr;
    uint4 hv = *reinterpret_cast<const uint4 *>(h + (size_t)idx * 8);
    uint16_t *h8 = reinterpret_cast<uint16_t *>(&hv);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float x = bf(h8[e]) + (b ? b[v * 8 + e] : 0.f);
      const float gl = tanh_approx ? 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)))
                                   : 0.5f * x * (1.f + erff(x * 0.7071067811865476f));
      h8[e] = to_bf(gl);
    }
    *reinterpret_cast<uint4 *>(h + (size_t)idx * 8) = hv;
  }
}

__global__ void k_swiglu(uint16_t *out, const uint16_t *gu, int T, int I) {
  const size_t total = (size_t)T * I;
  for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
       idx += (size_t)gridDim.x * blockDim.x) {
    const size_t t = idx / I, i = idx % I;
    const float g = bf(gu[t * 2 * I + i]), u = bf(gu[t * 2 * I + I + i]);
    out[idx] = to_bf(g / (1.f + expf(-g)) * u);
  }
}

__global__ void k_bias_gelu(uint16_t *h, const float *b, int T, int I, int tanh_approx) {
  const size_t total = (size_t)T * I;
  for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
       idx += (size_t)gridDim.x * blockDim.x) {
    const float v = bf(h[idx]) + (b ? b[idx % I] : 0.f);
    float g;
    if (tanh_approx)
      g = 0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    else
      g = 0.5f * v * (1.f + erff(v * 0.7071067811865476f));
    h[idx] = to_bf(g);
  }
}

__global__ void k_add_bias(void *y, int y_f32, const void *b, int T, int N) {
  const size_t total = (size_t)T * N;
  for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
       idx += (size_t)gridDim.x * blockDim.x) {
    const size_t n = idx % N;
    if (y_f32) {
      reinterpret_cast<float *>(y)[idx] += reinterpret_cast<const float *>(b)[n];
    } else {
      uint16_t *yy = reinterpret_cast<uint16_t *>(y);
      yy[idx] = to_bf(bf(yy[idx]) + bf(reinterpret_cast<const uint16_t *>(b)[n]));
    }
  }
}

/* One block per sequence (looping when the grid is smaller than meta[0]). */
__global__ void k_score_decoder(float *scores, const float *x, const int32_t *rows, const int32_t *meta,
                                const float *norm_w, const float *score_w, int C, float eps) {
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

/* Encoder head, part 1. Block (jb, y) takes the 64 dense rows j of block jb for the
 * sequences i = y, y + gridDim.y, ...: partial[i * gridDim.x + jb] =
 * sum_j w2[j] * tanh(w1[j] . x[rows[i]] + b1[j]) (fixed order: deterministic).
 * 8 warps x 8 rows; dynamic shared memory: C floats (the row). */
__global__ void k_score_enc1(float *partial, const float *x, const int32_t *rows, const int32_t *meta,
                             const float *w1, const float *b1, const float *w2, int C) {
  extern __shared__ float xs[];
  __shared__ float wsum[8];
  const int n = meta[VR_CUDA_META_N_SEQS], nb = gridDim.x, jb = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int i = blockIdx.y; i < n; i += gridDim.y) {
    const float *xr = x + (size_t)rows[i] * C;
    __syncthreads(); /* xs / wsum of the previous sequence consumed */
    for (int c = threadIdx.x; c < C; c += blockDim.x) xs[c] = xr[c];
    __syncthreads();
    float acc = 0.f;
    for (int r = 0; r < 8; ++r) {
      const int j = jb * 64 + warp * 8 + r;
      if (j >= C) break;
      const float *wr = w1 + (size_t)j * C;
      float d = 0.f;
      for (int c = lane; c < C; c += 32) d += wr[c] * xs[c];
      for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
      acc += tanhf(d + (b1 ? b1[j] : 0.f)) * w2[j];
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
  const int n = meta[VR_CUDA_META_N_SEQS];
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float t = 0.f;
    for (int k = 0; k < nb; ++k) t += partial[(size_t)i * nb + k];
    scores[i] = t + (b2 ? b2[0] : 0.f);
  }
}

/* -------------------------------------------------------------- launchers */

static unsigned grid_for(size_t n, unsigned threads) {
  size_t g = (n + threads - 1) / threads;
  if (g > 65535u * 16u) g = 65535u * 16u; /* grid-stride loops cover the rest */
  if (g == 0) g = 1;
  return (unsigned)g;
}

static unsigned norm_threads(int C) {
  unsigned t = (unsigned)((C + 31) / 32 * 32);
  if (t > VR_NORM_THREADS) t = VR_NORM_THREADS;
  if (t < 32) t = 32;
  return t;
}

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

extern "C" void vr_cuda_embed_norm(float *x, uint16_t *xn, const int32_t *ids, const int32_t *pos,
                                   const void *tok, const void *pos_emb, const void *type_emb,
                                   int emb_f32, const float *w, const float *b, int T, int C,
                                   float eps, cudaStream_t s) {
  if (T <= 0) return;
  if (emb_f32)
    k_embed_norm<float><<<T, norm_threads(C), 0, s>>>(x, xn, ids, pos, (const float *)tok, (const float *)pos_emb,
                                                      (const float *)type_emb, w, b, C, eps);
  else
    k_embed_norm<uint16_t><<<T, norm_threads(C), 0, s>>>(x, xn, ids, pos, (const uint16_t *)tok,
                                                         (const uint16_t *)pos_emb, (const uint16_t *)type_emb,
                                                         w, b, C, eps);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_layernorm(float *x, uint16_t *xn, const float *w, const float *b, int T,
                                  int C, float eps, cudaStream_t s) {
  if (T <= 0) return;
  const int C4 = C / 4;
  const unsigned th = norm_threads(C4);
  const int vpt = (int)((C4 + th - 1) / th);
  const int aligned = ((uintptr_t)x | (uintptr_t)xn | (uintptr_t)w | (uintptr_t)b) % 16 == 0;
  if (C % 4 == 0 && aligned && vpt <= 4) {
    if (vpt == 1) k_layernorm_vec<1><<<T, th, 0, s>>>(x, xn, w, b, C, eps);
    else if (vpt == 2) k_layernorm_vec<2><<<T, th, 0, s>>>(x, xn, w, b, C, eps);
    else if (vpt == 3) k_layernorm_vec<3><<<T, th, 0, s>>>(x, xn, w, b, C, eps);
    else k_layernorm_vec<4><<<T, th, 0, s>>>(x, xn, w, b, C, eps);
    VR_CUDA_CHECK_LAUNCH();
    return;
  }
  k_layernorm<<<T, norm_threads(C), 0, s>>>(x, xn, w, b, C, eps);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_layernorm_b16(const uint16_t *y, const uint16_t *r, uint16_t *xn, float *x, const float *w,
                                      const float *b, int T, int C, float eps, cudaStream_t s) {
  if (T <= 0) return;
  const int aligned =
      ((uintptr_t)y | (uintptr_t)r | (uintptr_t)xn | (uintptr_t)x | (uintptr_t)w | (uintptr_t)b) % 16 == 0;
  const int vpt = (C / 8 + 31) / 32;
  if (C % 8 == 0 && aligned && vpt >= 1 && vpt <= 4) {
    const unsigned rows = 8, grid = (unsigned)((T + rows - 1) / rows); /* 8 warps, one row each */
    if (vpt == 1) k_layernorm_b16<1><<<grid, rows * 32, 0, s>>>(y, r, xn, x, w, b, T, C, eps);
    else if (vpt == 2) k_layernorm_b16<2><<<grid, rows * 32, 0, s>>>(y, r, xn, x, w, b, T, C, eps);
    else if (vpt == 3) k_layernorm_b16<3><<<grid, rows * 32, 0, s>>>(y, r, xn, x, w, b, T, C, eps);
    else k_layernorm_b16<4><<<grid, rows * 32, 0, s>>>(y, r, xn, x, w, b, T, C, eps);
  } else {
    k_layernorm_b16_any<<<T, norm_threads(C), 0, s>>>(y, r, xn, x, w, b, C, eps);
  }
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_rmsnorm(const float *x, uint16_t *xn, const float *w, int T, int C,
                                float eps, cudaStream_t s) {
  if (T <= 0) return;
  k_rmsnorm<<<T, norm_threads(C), 0, s>>>(x, xn, w, C, eps);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_rope(uint16_t *qkv, int ld, int q_off, int k_off, int H, int Hkv, int D,
                             const int32_t *pos, const float *inv_freq, float attn_scaling, int T,
                             cudaStream_t s) {
  if (T <= 0 || D < 2) return;
  k_rope<<<T, 128, (size_t)D * sizeof(float), s>>>(qkv, ld, q_off, k_off, H, Hkv, D, pos, inv_freq,
                                                   attn_scaling);
  VR_CUDA_CHECK_LAUNCH();
}

/* One block per destination row; 4-byte words when the row allows, else 2-byte. */
template <typename W>
__global__ void k_gather_rows(W *dst, const W *src, const int32_t *rows, const int32_t *meta, int n, int words) {
  const int m = min(n, meta[VR_CUDA_META_N_SEQS]);
  for (int j = blockIdx.x; j < m; j += gridDim.x) {
    const W *a = src + (size_t)rows[j] * words;
    W *b = dst + (size_t)j * words;
    for (int i = threadIdx.x; i < words; i += blockDim.x) b[i] = a[i];
  }
}

extern "C" void vr_cuda_gather_rows(void *dst, const void *src, const int32_t *rows, const int32_t *meta, int n,
                                    int row_bytes, cudaStream_t s) {
  if (n <= 0 || row_bytes <= 0) return;
  const unsigned blocks = n < 65535 ? (unsigned)n : 65535u;
  if (row_bytes % 4 == 0)
    k_gather_rows<uint32_t><<<blocks, 128, 0, s>>>((uint32_t *)dst, (const uint32_t *)src, rows, meta, n, row_bytes / 4);
  else
    k_gather_rows<uint16_t><<<blocks, 128, 0, s>>>((uint16_t *)dst, (const uint16_t *)src, rows, meta, n, row_bytes / 2);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_swiglu(uint16_t *out, const uint16_t *gu, int T, int I, cudaStream_t s) {
  const size_t n = (size_t)T * I;
  if (n == 0) return;
  if (I % 8 == 0 && n / 8 < (1u << 31))
    k_swiglu8<<<grid_for(n / 8, 256), 256, 0, s>>>(out, gu, T, I);
  else
    k_swiglu<<<grid_for(n, 256), 256, 0, s>>>(out, gu, T, I);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_bias_gelu(uint16_t *h, const float *b, int T, int I, int tanh_approx,
                                  cudaStream_t s) {
  const size_t n = (size_t)T * I;
  if (n == 0) return;
  if (I % 8 == 0 && n / 8 < (1u << 31))
    k_bias_gelu8<<<grid_for(n / 8, 256), 256, 0, s>>>(h, b, T, I, tanh_approx);
  else
    k_bias_gelu<<<grid_for(n, 256), 256, 0, s>>>(h, b, T, I, tanh_approx);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_add_bias(void *y, int y_f32, const void *b, int T, int N, cudaStream_t s) {
  const size_t n = (size_t)T * N;
  if (n == 0) return;
  k_add_bias<<<grid_for(n, 256), 256, 0, s>>>(y, y_f32, b, T, N);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_score_decoder(float *scores, const float *x, const int32_t *rows,
                                      const int32_t *meta, const float *norm_w,
                                      const float *score_w, int C, float eps, int grid,
                                      cudaStream_t s) {
  if (grid <= 0) return;
  k_score_decoder<<<grid, norm_threads(C), 0, s>>>(scores, x, rows, meta, norm_w, score_w, C, eps);
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
  k_score_enc1<<<g1, 256, sh, s>>>(partial, x, rows, meta, w1, b1, w2, C);
  VR_CUDA_CHECK_LAUNCH();
  const int g2 = (grid + 127) / 128;
  k_score_enc2<<<g2 < 64 ? g2 : 64, 128, 0, s>>>(scores, partial, meta, b2, nb);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" int vr_cuda_score_encoder_blocks(int C) { return (C + 63) / 64; }
