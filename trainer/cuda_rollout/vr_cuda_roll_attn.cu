/* vr_cuda_roll_attn.cu: decode attention over the paged KV cache, GQA-grouped and split over
 * keys (flash-decoding), plus the combine kernel (contract and cache layout in
 * vr_cuda_roll_ops.h).
 *
 * k_roll_decode<D>: a block of NW warps owns (sequence b, kv head hk, up to MAXG query heads of
 * hk's group, one partition of `part` keys), so each K/V byte is read once for all the query
 * heads sharing it. Three passes over the partition, scores in shared memory:
 *   1. scores: a warp takes one cache block (16 keys) at a time; lane pair (j, j + 16) owns key
 *      j, the two lanes taking alternate 8-element chunks of the head. Thanks to the cache's
 *      (D/8, 16, 8) key layout every chunk load of a half-warp is 256 contiguous bytes; each
 *      lane dots its chunks with every query of the group (q in shared memory, pre-scaled by
 *      scale * log2(e)), one shuffle joins the halves.
 *   2. softmax per query head over the partition (warp per head): max m, exp2, sum l.
 *   3. P.V: a warp takes one cache block at a time, D/8 lanes per token row (16-byte loads),
 *      32 / (D/8) tokens side by side; shuffles then shared memory sum the warps' partials.
 * A single-partition sequence writes bf16 out = O / l; otherwise O / l, m, l go to the
 * scratch for k_roll_combine, which weights the partitions by l * 2^(m - max m). */
#include <math.h>

#include "vr_cuda_common.cuh"
#include "vr_cuda_roll_ops.h"

#define NW 4   /* warps per attention block */
#define MAXG 8 /* query heads per block */
#define SMEM_LIMIT (48u * 1024u)

namespace {

struct roll_attn_params {
  uint16_t *out;
  int ld_out;
  const uint16_t *qkv;
  int ld, q_off;
  const uint16_t *kc, *vc;
  const int32_t *bt, *bt_row;
  int max_blocks;
  const int32_t *lens;
  int H, Hkv, window, part, max_parts, n_gchunks;
  float scale_log2;
  float *po, *pml;
};

__device__ __forceinline__ void unpack8(const uint4 v, float *f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

template <int D>
__global__ void __launch_bounds__(NW * 32) k_roll_decode(roll_attn_params p) {
  constexpr int NC = D / 8;                /* 16-byte chunks per head */
  constexpr int LPT = NC < 32 ? NC : 32;   /* pass 3: lanes per token row */
  constexpr int TPW = 32 / LPT;            /* pass 3: token rows per warp step */
  extern __shared__ float sm[];
  const int G = p.H / p.Hkv, MG = G < MAXG ? G : MAXG;
  const int hk = blockIdx.x / p.n_gchunks, g0 = (blockIdx.x % p.n_gchunks) * MAXG;
  const int ng = min(MAXG, G - g0), h0 = hk * G + g0;
  const int b = blockIdx.y, pi = blockIdx.z;
  const int len = p.lens[b];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (len <= 0) { /* padding row: zeros, once */
    if (pi == 0)
      for (int i = tid; i < ng * D; i += NW * 32) p.out[(size_t)b * p.ld_out + (size_t)h0 * D + i] = 0;
    return;
  }
  const int p0 = pi * p.part;
  if (p0 >= len) return;
  const int p1 = min(len, p0 + p.part), nparts = (len + p.part - 1) / p.part;
  const int k0 = max(p0, p.window > 0 ? len - p.window : 0); /* first key of the partition that counts */
  float *qs = sm;                                 /* (MG, D) */
  float *ss = sm + MG * D;                        /* (MG, part): scores, then probabilities */
  float *red = ss;                                /* (NW, MG, D) after pass 3 (aliases ss) */
  const int regB = max(MG * p.part, NW * MG * D);
  float *ml = ss + regB;                          /* (MG, 2) */

  const uint16_t *q = p.qkv + (size_t)b * p.ld + p.q_off + (size_t)h0 * D;
  for (int i = tid; i < ng * D; i += NW * 32) qs[i] = bf(q[i]) * p.scale_log2;
  __syncthreads();

  const int32_t *bt = p.bt + (size_t)(p.bt_row ? p.bt_row[b] : b) * p.max_blocks;
  const int kb0 = k0 / VR_ROLL_BLOCK, kb1 = (p1 - 1) / VR_ROLL_BLOCK; /* cache blocks, inclusive */
  /* pass 1: scores */
  {
    const int j = lane & 15, hp = lane >> 4;
    for (int kb = kb0 + warp; kb <= kb1; kb += NW) {
      const size_t head = (size_t)bt[kb] * p.Hkv + hk;
      const uint16_t *kbase = p.kc + head * NC * VR_ROLL_BLOCK * 8;
      float acc[MAXG];
#pragma unroll
      for (int g = 0; g < MAXG; ++g) acc[g] = 0.f;
#pragma unroll
      for (int ci = 0; ci < (NC + 1) / 2; ++ci) {
        const int c = 2 * ci + hp;
        if (c < NC) {
          const uint4 kv = *reinterpret_cast<const uint4 *>(kbase + ((size_t)c * VR_ROLL_BLOCK + j) * 8);
          float k8[8];
          unpack8(kv, k8);
#pragma unroll
          for (int g = 0; g < MAXG; ++g) {
            if (g < ng) {
              const float4 qa = *reinterpret_cast<const float4 *>(qs + g * D + c * 8);
              const float4 qb = *reinterpret_cast<const float4 *>(qs + g * D + c * 8 + 4);
              acc[g] += qa.x * k8[0] + qa.y * k8[1] + qa.z * k8[2] + qa.w * k8[3] + qb.x * k8[4] + qb.y * k8[5] +
                        qb.z * k8[6] + qb.w * k8[7];
            }
          }
        }
      }
#pragma unroll
      for (int g = 0; g < MAXG; ++g) acc[g] += __shfl_xor_sync(0xffffffffu, acc[g], 16);
      const int key = kb * VR_ROLL_BLOCK + j;
      if (hp == 0 && key >= k0 && key < p1) {
#pragma unroll
        for (int g = 0; g < MAXG; ++g)
          if (g < ng) ss[g * p.part + (key - p0)] = acc[g];
      }
    }
  }
  __syncthreads();
  /* pass 2: softmax over the partition, one warp per query head */
  for (int g = warp; g < ng; g += NW) {
    float m = -INFINITY;
    for (int i = k0 - p0 + lane; i < p1 - p0; i += 32) m = fmaxf(m, ss[g * p.part + i]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float l = 0.f;
    for (int i = k0 - p0 + lane; i < p1 - p0; i += 32) {
      const float e = exp2f(ss[g * p.part + i] - m);
      ss[g * p.part + i] = e;
      l += e;
    }
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (lane == 0) {
      ml[2 * g] = m;
      ml[2 * g + 1] = l;
    }
  }
  __syncthreads();
  /* pass 3: P.V */
  float o[MAXG][8];
#pragma unroll
  for (int g = 0; g < MAXG; ++g)
#pragma unroll
    for (int e = 0; e < 8; ++e) o[g][e] = 0.f;
  const int sub = lane / LPT, cc = lane % LPT;
  for (int kb = kb0 + warp; kb <= kb1; kb += NW) {
    const size_t head = (size_t)bt[kb] * p.Hkv + hk;
    const uint16_t *vbase = p.vc + head * VR_ROLL_BLOCK * D;
#pragma unroll
    for (int t0 = 0; t0 < VR_ROLL_BLOCK; t0 += TPW) {
      const int t = t0 + sub, key = kb * VR_ROLL_BLOCK + t;
      if (t < VR_ROLL_BLOCK && key >= k0 && key < p1) {
        const uint4 vv = *reinterpret_cast<const uint4 *>(vbase + (size_t)t * D + cc * 8);
        float v8[8];
        unpack8(vv, v8);
#pragma unroll
        for (int g = 0; g < MAXG; ++g) {
          if (g < ng) {
            const float pj = ss[g * p.part + (key - p0)];
#pragma unroll
            for (int e = 0; e < 8; ++e) o[g][e] += pj * v8[e];
          }
        }
      }
    }
  }
#pragma unroll
  for (int off = LPT; off < 32; off <<= 1)
#pragma unroll
    for (int g = 0; g < MAXG; ++g)
#pragma unroll
      for (int e = 0; e < 8; ++e) o[g][e] += __shfl_xor_sync(0xffffffffu, o[g][e], off);
  __syncthreads(); /* everyone is done with ss before red overwrites it */
  if (sub == 0) {
#pragma unroll
    for (int g = 0; g < MAXG; ++g)
      if (g < ng)
#pragma unroll
        for (int e = 0; e < 8; ++e) red[(warp * MG + g) * D + cc * 8 + e] = o[g][e];
  }
  __syncthreads();
  for (int i = tid; i < ng * D; i += NW * 32) {
    const int g = i / D, d = i - g * D;
    float acc = 0.f;
#pragma unroll
    for (int w = 0; w < NW; ++w) acc += red[(w * MG + g) * D + d];
    const float m = ml[2 * g], l = ml[2 * g + 1];
    if (nparts == 1) {
      p.out[(size_t)b * p.ld_out + (size_t)(h0 + g) * D + d] = to_bf(acc / l);
    } else {
      const size_t idx = ((size_t)b * p.H + h0 + g) * p.max_parts + pi;
      p.po[idx * D + d] = l > 0.f ? acc / l : 0.f;
      if (d == 0) {
        p.pml[2 * idx] = m;
        p.pml[2 * idx + 1] = l;
      }
    }
  }
}

/* One block per (sequence, query head): merges the partitions of sequences that had more than one. */
__global__ void k_roll_combine(uint16_t *out, int ld_out, const int32_t *lens, int H, int D, int part, int max_parts,
                               const float *po, const float *pml) {
  const int b = blockIdx.x / H, h = blockIdx.x % H;
  const int len = lens[b];
  const int np = (len + part - 1) / part;
  if (np <= 1) return;
  const size_t base = ((size_t)b * H + h) * max_parts;
  float M = -INFINITY;
  for (int i = 0; i < np; ++i)
    if (pml[2 * (base + i) + 1] > 0.f) M = fmaxf(M, pml[2 * (base + i)]);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.f, ws = 0.f;
    for (int i = 0; i < np; ++i) {
      const float l = pml[2 * (base + i) + 1];
      if (l > 0.f) {
        const float w = l * exp2f(pml[2 * (base + i)] - M);
        acc += w * po[(base + i) * D + d];
        ws += w;
      }
    }
    out[(size_t)b * ld_out + (size_t)h * D + d] = to_bf(acc / ws);
  }
}

template <int D>
void launch_decode(const roll_attn_params &p, dim3 grid, size_t smem, cudaStream_t s) {
  k_roll_decode<D><<<grid, NW * 32, smem, s>>>(p);
  VR_CUDA_CHECK_LAUNCH();
}

} /* namespace */

/* -------------------------------------------------------------- launchers */

extern "C" size_t vr_cuda_roll_attention_smem(int H, int Hkv, int D, int part) {
  const int G = H / Hkv, MG = G < MAXG ? G : MAXG;
  const int regB = MG * part > NW * MG * D ? MG * part : NW * MG * D;
  return ((size_t)MG * D + (size_t)regB + 2 * MAXG) * sizeof(float);
}

extern "C" int vr_cuda_roll_pick_part(int B, int H, int Hkv, int D, int n_sms) {
  const int G = H / Hkv, gch = (G + MAXG - 1) / MAXG;
  const long blocks = (long)B * Hkv * gch;
  int part = blocks >= 2L * n_sms ? 512 : blocks >= n_sms ? 256 : blocks * 4 >= n_sms ? 128 : 64;
  while (part > VR_ROLL_BLOCK && vr_cuda_roll_attention_smem(H, Hkv, D, part) > SMEM_LIMIT) part /= 2;
  return part;
}

extern "C" void vr_cuda_roll_decode_attention(uint16_t *out, int ld_out, const uint16_t *qkv, int ld, int q_off,
                                              const uint16_t *kc, const uint16_t *vc, const int32_t *block_tables,
                                              int max_blocks, const int32_t *bt_row, const int32_t *lens, int B, int H, int Hkv, int D,
                                              int window, float scale, int part, int max_parts, float *po, float *pml,
                                              cudaStream_t s) {
  if (B <= 0) return;
  VR_ASSERT(H > 0 && Hkv > 0 && H % Hkv == 0 && max_parts >= 1);
  VR_ASSERT(part >= VR_ROLL_BLOCK && part <= VR_ROLL_MAX_PART && part % VR_ROLL_BLOCK == 0);
  const size_t smem = vr_cuda_roll_attention_smem(H, Hkv, D, part);
  VR_ASSERT(smem <= SMEM_LIMIT);
  const int G = H / Hkv, gch = (G + MAXG - 1) / MAXG;
  roll_attn_params p = {out, ld_out, qkv, ld, q_off, kc, vc, block_tables, bt_row, max_blocks, lens, H, Hkv, window,
                        part, max_parts, gch, scale * 1.4426950408889634f, po, pml};
  const dim3 grid((unsigned)(Hkv * gch), (unsigned)B, (unsigned)max_parts);
  switch (D) {
    case 8: launch_decode<8>(p, grid, smem, s); break;
    case 16: launch_decode<16>(p, grid, smem, s); break;
    case 32: launch_decode<32>(p, grid, smem, s); break;
    case 64: launch_decode<64>(p, grid, smem, s); break;
    case 128: launch_decode<128>(p, grid, smem, s); break;
    case 256: launch_decode<256>(p, grid, smem, s); break;
    default: VR_ASSERT(!"decode attention: head_dim must be 8, 16, 32, 64, 128 or 256");
  }
  if (max_parts > 1) {
    k_roll_combine<<<(unsigned)(B * H), 128, 0, s>>>(out, ld_out, lens, H, D, part, max_parts, po, pml);
    VR_CUDA_CHECK_LAUNCH();
  }
}
