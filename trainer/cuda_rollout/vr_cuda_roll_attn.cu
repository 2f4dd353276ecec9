/* vr_cuda_roll_attn.cu: decode attention over the paged KV cache, GQA-grouped and split over
 * keys (flash-decoding), plus the combine kernel (contract and cache layout in
 * vr_cuda_roll_ops.h).
 *
 * k_roll_decode<D, MG>: a block of NW warps owns (sequence b, kv head hk, up to MAXG query heads of
 * hk's group, one partition of `part` keys), so each K/V byte is read once for all the query
 * heads sharing it (MG: the register tile of query heads, 1, 4 or 8). One pass, online softmax
 * per warp: the block's cache blocks (16 keys each) are dealt to its warps, UNR at a time per
 * warp (2 for D <= 64 with the 1- or 4-head tile, else 1: registers), and for each the warp
 * issues all its loads before the first use: K as lane pair (j, j + 16) owning key j, the two
 * lanes taking alternate 8-element chunks (thanks to the cache's (D/8, 16, 8) key layout each
 * chunk load of a half-warp is 256 contiguous bytes),
 * and V as D/8 lanes per token row (16-byte loads), 32 / (D/8) rows side by side; V rows of keys
 * that do not count are not read. Scores (q in shared memory, pre-scaled by scale * log2(e)), the
 * block's max over the 16 key lanes, rescale of the running sum and output by 2^(m - m'), then
 * P.V with each row's probability shuffled from its key's lane. The warps' (m, l, O) merge in
 * shared memory at the end.
 * A single-partition sequence writes bf16 out = O / l; otherwise O / l, m, l go to the
 * scratch for k_roll_combine, which weights the partitions by l * 2^(m - max m).
 * With the rope fused (the decode step: vr_cuda_roll_decode_attention_rope) every block rotates its
 * query heads at the sequence's position while loading them, and the blocks whose partition holds
 * the new key (position lens - 1) rotate that key, keep it and its value in shared memory and read
 * them from there in place of the cache slot (which the first head chunk's block writes; nobody
 * else reads it in this kernel): the bits of vr_cuda_roll_rope_append + the attention.
 *
 * k_roll_decode_ring<D, MG> (at head dims that are not multiples of 16, the choice for tiles of 1 or
 * 4 heads; VR_ROLL_ATTN_RING / _REGS force one kernel): the same work split,
 * the same arithmetic in the same order (each warp's cache blocks warp, warp + NW, ... one at a
 * time, online softmax, the same merge), but the cache streams through a ring of RING_STAGES(D)
 * cache blocks per warp in shared memory (cp.async, 16 bytes a lane; rows of keys that do not count
 * are zero-filled, not read). Each warp takes its block-table entries straight from global memory
 * (lane n: its n-th cache block) and issues its first RING_STAGES blocks before the prologue (rope
 * angles, the wait for the previous kernel under PDL, queries, new key), so the cache reads overlap
 * the prologue's dependent steps; afterwards every block consumed issues the next, keeping
 * RING_STAGES blocks in flight per warp without holding them in registers. The warps' partial
 * outputs for the merge reuse each warp's own ring. With VR_ROLL_ATTN_PDL (the rope form only) the
 * kernel is launched as a programmatic dependent of the previous kernel (the qkv GEMM): everything
 * up to the first read of qkv (block table, cache loads, rope angles) may run while that kernel
 * drains; griddepcontrol.wait comes before.
 *
 * k_roll_decode_mma<D> (the default wherever D % 16 == 0: vr_cuda_roll_attn_kernel): the ring
 * kernel's split, ring and prologue with QK^T and PV on the tensor cores (described at the kernel). */
#include <math.h>

#include "vr_cuda_common.cuh"
#include "vr_cuda_roll_ops.h"
#include "vr_cuda_roll_rope.cuh"

#define NW 4   /* warps per attention block */
#define MAXG 8 /* query heads per block */
#define SMEM_LIMIT (48u * 1024u)
#define RING_STAGES(D) ((D) <= 64 ? 3 : 2) /* cache blocks in flight per warp in the ring kernel */

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
  /* the fused rope (rope 0: none): positions, slots (B), inv_freq (D/2), the k / v column
   * offsets in qkv, the cache arrays to append to */
  int rope, k_off, v_off;
  const int32_t *pos, *slots;
  const float *inv_freq;
  float rope_scaling;
  uint16_t *kcw, *vcw;
};

/* Element d of the head at x rotated at the angles csn (cos (D/2) | sin (D/2)). */
template <int D>
__device__ __forceinline__ uint16_t rope_elem(const uint16_t *x, int d, const float *csn) {
  constexpr int half = D / 2;
  const int i = d < half ? d : d - half;
  uint16_t y1, y2;
  roll_rope_pair(bf(x[i]), bf(x[i + half]), csn[i], csn[half + i], &y1, &y2);
  return d < half ? y1 : y2;
}

__device__ __forceinline__ void unpack8(const uint4 v, float *f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

/* The rope form's new key (rotated at the angles csn) and value of kv head hk of sequence b into
 * shared memory (nk, nv: D bf16 each); the first head chunk's block (g0 0) also appends them to the
 * cache at slots[b] (negative: none). Every thread of the block takes part. */
template <int D>
__device__ __forceinline__ void roll_new_kv(const roll_attn_params &p, int b, int hk, int g0, const float *csn,
                                            uint16_t *nk, uint16_t *nv, int tid) {
  constexpr int NC = D / 8;
  const uint16_t *kn = p.qkv + (size_t)b * p.ld + p.k_off + (size_t)hk * D;
  const uint16_t *vn = p.qkv + (size_t)b * p.ld + p.v_off + (size_t)hk * D;
  const int slot = p.slots[b];
  const size_t head = (size_t)(slot >= 0 ? slot / VR_ROLL_BLOCK : 0) * p.Hkv + hk;
  const int off = slot >= 0 ? slot % VR_ROLL_BLOCK : 0;
  for (int d = tid; d < D; d += NW * 32) {
    const uint16_t y = rope_elem<D>(kn, d, csn), v = vn[d];
    nk[d] = y;
    nv[d] = v;
    if (g0 == 0 && slot >= 0) {
      p.kcw[((head * NC + d / 8) * VR_ROLL_BLOCK + off) * 8 + d % 8] = y;
      p.vcw[(head * VR_ROLL_BLOCK + off) * D + d] = v;
    }
  }
}

/* The block's result from its NW warps: warp w's running max and sum at wml[2 * (w * MG + g)] (+1)
 * and its unnormalised outputs (MG, D) at red + w * red_stride, merged with weights 2^(m_w - M) in
 * warp order. One partition (nparts 1): bf16 out = O / l; else O / l, M, l into the scratch for
 * k_roll_combine. After a __syncthreads that follows the warps' writes. */
template <int D, int MG>
__device__ __forceinline__ void roll_merge_warps(const roll_attn_params &p, const float *wml, const float *red,
                                                 size_t red_stride, int b, int h0, int ng, int pi, int nparts,
                                                 int tid) {
  for (int i = tid; i < ng * D; i += NW * 32) {
    const int g = i / D, d = i - g * D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < NW; ++w) M = fmaxf(M, wml[2 * (w * MG + g)]);
    float acc = 0.f, l = 0.f;
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      const float mw = wml[2 * (w * MG + g)];
      if (mw != -INFINITY) {
        const float f = exp2f(mw - M);
        acc += red[w * red_stride + g * D + d] * f;
        l += wml[2 * (w * MG + g) + 1] * f;
      }
    }
    if (nparts == 1) {
      p.out[(size_t)b * p.ld_out + (size_t)(h0 + g) * D + d] = to_bf(acc / l);
    } else {
      const size_t idx = ((size_t)b * p.H + h0 + g) * p.max_parts + pi;
      p.po[idx * D + d] = l > 0.f ? acc / l : 0.f;
      if (d == 0) {
        p.pml[2 * idx] = M;
        p.pml[2 * idx + 1] = l;
      }
    }
  }
}

template <int D, int MG>
__global__ void __launch_bounds__(NW * 32, D > 64 ? 1 : MG <= 4 ? 4 : 3) k_roll_decode(roll_attn_params p) {
  constexpr int NC = D / 8;                             /* 16-byte chunks per head */
  constexpr int KCH = (NC + 1) / 2;                     /* K chunks per lane per cache block */
  constexpr int LPT = NC < 32 ? NC : 32;                /* V: lanes per token row */
  constexpr int TPW = 32 / LPT;                         /* V: token rows per warp step */
  constexpr int VST = (VR_ROLL_BLOCK + TPW - 1) / TPW;  /* V loads per lane per cache block */
  constexpr int UNR = D <= 64 && MG <= 4 ? 2 : 1;      /* cache blocks in flight per warp */
  extern __shared__ float sm[];
  const int G = p.H / p.Hkv;
  const int hk = blockIdx.x / p.n_gchunks, g0 = (blockIdx.x % p.n_gchunks) * MAXG;
  const int ng = min(MAXG, G - g0), h0 = hk * G + g0; /* ng <= MG (the launcher's choice) */
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
  float *qs = sm;                  /* (MG, D), rows >= ng zero */
  float *red = qs + MG * D;        /* (NW, MG, D): the warps' unnormalised outputs */
  float *wml = red + NW * MG * D;  /* (NW, MG, 2): the warps' running max and sum */
  int *bts = reinterpret_cast<int *>(wml + 2 * NW * MG); /* the partition's cache blocks */
  float *csn = reinterpret_cast<float *>(bts + VR_ROLL_MAX_PART / VR_ROLL_BLOCK); /* (D) rope cos | sin */
  uint4 *nk4 = reinterpret_cast<uint4 *>(csn + D); /* (NC) the new key, rotated: its cache chunks */
  uint4 *nv4 = nk4 + NC;                           /* (NC) its value */

  const uint16_t *q = p.qkv + (size_t)b * p.ld + p.q_off + (size_t)h0 * D;
  const int newk = p.rope && len - 1 >= p0 ? len - 1 : -1; /* the key read from shared memory */
  if (p.rope) {
    const float pp = (float)p.pos[b];
    for (int i = tid; i < D / 2; i += NW * 32) roll_rope_angle(pp, p.inv_freq[i], p.rope_scaling, &csn[i], &csn[D / 2 + i]);
    __syncthreads();
    for (int i = tid; i < MG * D; i += NW * 32) {
      const int d = i % D;
      qs[i] = i < ng * D ? bf(rope_elem<D>(q + (i - d), d, csn)) * p.scale_log2 : 0.f;
    }
    if (newk >= 0)
      roll_new_kv<D>(p, b, hk, g0, csn, reinterpret_cast<uint16_t *>(nk4), reinterpret_cast<uint16_t *>(nv4), tid);
  } else {
    for (int i = tid; i < MG * D; i += NW * 32) qs[i] = i < ng * D ? bf(q[i]) * p.scale_log2 : 0.f;
  }
  const int32_t *bt = p.bt + (size_t)(p.bt_row ? p.bt_row[b] : b) * p.max_blocks;
  const int kb0 = k0 / VR_ROLL_BLOCK, nkb = (p1 - 1) / VR_ROLL_BLOCK - kb0 + 1; /* <= part / 16 */
  for (int i = tid; i < nkb; i += NW * 32) bts[i] = bt[kb0 + i];
  __syncthreads();

  const int j = lane & 15, hp = lane >> 4;    /* K: key j of the block, chunks of parity hp */
  const int sub = lane / LPT, cc = lane % LPT; /* V: row sub of each step, chunk cc */
  float m_run[MG], l_run[MG], o[MG][8];
#pragma unroll
  for (int g = 0; g < MG; ++g) {
    m_run[g] = -INFINITY;
    l_run[g] = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) o[g][e] = 0.f;
  }
  const uint4 zero4 = make_uint4(0u, 0u, 0u, 0u);
  for (int i = warp; i < nkb; i += NW * UNR) {
    uint4 kr[UNR][KCH], vr[UNR][VST];
    /* every load of the UNR blocks first: K chunks, and V rows of the keys that count (rows past
     * the end of the cache were never written) */
#pragma unroll
    for (int u = 0; u < UNR; ++u) {
      const int ii = i + u * NW;
      const size_t head = (size_t)bts[ii < nkb ? ii : i] * p.Hkv + hk;
      const uint16_t *kbase = p.kc + head * NC * VR_ROLL_BLOCK * 8;
      const uint16_t *vbase = p.vc + head * VR_ROLL_BLOCK * D;
#pragma unroll
      for (int ci = 0; ci < KCH; ++ci) {
        const int c = 2 * ci + hp;
        kr[u][ci] = !(ii < nkb && c < NC)                        ? zero4
                    : (kb0 + ii) * VR_ROLL_BLOCK + j == newk ? nk4[c]
                                                             : __ldg(reinterpret_cast<const uint4 *>(
                                                                   kbase + ((size_t)c * VR_ROLL_BLOCK + j) * 8));
      }
#pragma unroll
      for (int vs = 0; vs < VST; ++vs) {
        const int t = vs * TPW + sub, key = (kb0 + ii) * VR_ROLL_BLOCK + t;
        vr[u][vs] = !(ii < nkb && t < VR_ROLL_BLOCK && key >= k0 && key < p1)
                        ? zero4
                    : key == newk ? nv4[cc]
                                  : __ldg(reinterpret_cast<const uint4 *>(vbase + (size_t)t * D + cc * 8));
      }
    }
#pragma unroll
    for (int u = 0; u < UNR; ++u) {
      const int ii = i + u * NW;
      if (ii >= nkb) break;
      __syncwarp(); /* a fence: the queries are re-read from shared memory, not held in registers */
      float s[MG];
#pragma unroll
      for (int g = 0; g < MG; ++g) s[g] = 0.f;
#pragma unroll
      for (int ci = 0; ci < KCH; ++ci) {
        const int c = 2 * ci + hp;
        if (c < NC) {
          float k8[8];
          unpack8(kr[u][ci], k8);
#pragma unroll
          for (int g = 0; g < MG; ++g) {
            const float4 qa = *reinterpret_cast<const float4 *>(qs + g * D + c * 8);
            const float4 qb = *reinterpret_cast<const float4 *>(qs + g * D + c * 8 + 4);
            s[g] += qa.x * k8[0] + qa.y * k8[1] + qa.z * k8[2] + qa.w * k8[3] + qb.x * k8[4] + qb.y * k8[5] +
                    qb.z * k8[6] + qb.w * k8[7];
          }
        }
      }
      const int key = (kb0 + ii) * VR_ROLL_BLOCK + j;
      const bool valid = key >= k0 && key < p1;
      /* online softmax over the block's 16 keys (lanes j and j + 16 hold the same key) */
#pragma unroll
      for (int g = 0; g < MG; ++g) s[g] += __shfl_xor_sync(0xffffffffu, s[g], 16); /* every lane shuffles */
#pragma unroll
      for (int g = 0; g < MG; ++g) {
        const float sv = valid ? s[g] : -INFINITY;
        float bm = sv;
#pragma unroll
        for (int off = 8; off > 0; off >>= 1) bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, off));
        const float mn = fmaxf(m_run[g], bm);
        const float alpha = mn == -INFINITY ? 1.f : exp2f(m_run[g] - mn);
        const float pj = valid ? exp2f(sv - mn) : 0.f;
        m_run[g] = mn;
        l_run[g] = l_run[g] * alpha + pj;
#pragma unroll
        for (int e = 0; e < 8; ++e) o[g][e] *= alpha;
        s[g] = pj;
      }
      /* P.V: row t's probability from lane t */
#pragma unroll
      for (int vs = 0; vs < VST; ++vs) {
        const int t = vs * TPW + sub;
        float v8[8];
        unpack8(vr[u][vs], v8);
#pragma unroll
        for (int g = 0; g < MG; ++g) {
          const float pt = __shfl_sync(0xffffffffu, s[g], t & 15);
#pragma unroll
          for (int e = 0; e < 8; ++e) o[g][e] += pt * v8[e];
        }
      }
    }
  }
  /* the warp's sums over its 16 key lanes, its outputs over the lanes of one chunk */
#pragma unroll
  for (int g = 0; g < MG; ++g)
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) l_run[g] += __shfl_xor_sync(0xffffffffu, l_run[g], off);
#pragma unroll
  for (int off = LPT; off < 32; off <<= 1)
#pragma unroll
    for (int g = 0; g < MG; ++g)
#pragma unroll
      for (int e = 0; e < 8; ++e) o[g][e] += __shfl_xor_sync(0xffffffffu, o[g][e], off);
  if (sub == 0) {
#pragma unroll
    for (int g = 0; g < MG; ++g)
#pragma unroll
      for (int e = 0; e < 8; ++e) red[(warp * MG + g) * D + cc * 8 + e] = o[g][e];
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < MG; ++g) {
      wml[2 * (warp * MG + g)] = m_run[g];
      wml[2 * (warp * MG + g) + 1] = l_run[g];
    }
  }
  __syncthreads();
  roll_merge_warps<D, MG>(p, wml, red, (size_t)MG * D, b, h0, ng, pi, nparts, tid);
}

/* cp.async of 16 bytes (src_bytes 0: zeros, nothing read), its groups, and the PDL wait (a no-op
 * when the kernel was not launched as a programmatic dependent). */
__device__ __forceinline__ void ring_cp16(void *dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"((uint32_t)__cvta_generic_to_shared(dst)),
               "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void ring_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void ring_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/* One block's share of the ring kernels' work (k_roll_decode_ring, k_roll_decode_mma): kv head hk,
 * its query heads h0 .. h0 + ng - 1 (chunk g0 of the group), sequence b of len keys, partition pi
 * (keys p0.., nparts in all) of which [k0, p1) count; its cache blocks kb0 .. kb0 + nkb - 1 dealt to
 * the warps (warp w: kb0 + w + n * NW, n < nbw <= VR_ROLL_MAX_PART / 16 / NW <= 32), lane n of each
 * warp holding the table entry of its n-th (myblk). Shared memory from sm4 on: the warps' rings (warp
 * w's S stages of (K: CH 16-byte chunks, V: CH chunks) at sm4 + w * S * 2 * CH; ring: this warp's),
 * then the new key (nk4, D / 8 chunks, rotated) and its value (nv4); the kernel's own data after. */
struct ring_work {
  int hk, g0, ng, h0, b, pi, len, p0, p1, nparts, k0, kb0, nkb, nbw, myblk;
  uint4 *ring, *nk4, *nv4;
};

/* Fills w for this block; false (after the PDL wait, every block waits: the grid never ends before
 * the previous kernel; a padding row's zero output by its first partition) when it has nothing to do.
 * Without a window the partition's first block is pi * part / 16 whatever the length, so the table
 * entries load alongside lens[b] (entries past the sequence's blocks are read, not used). */
template <int D, int S>
__device__ __forceinline__ bool ring_setup(const roll_attn_params &p, uint4 *sm4, int tid, int lane, int warp,
                                           ring_work &w) {
  constexpr int CH = VR_ROLL_BLOCK * (D / 8);
  w.ring = sm4 + (size_t)warp * S * 2 * CH;
  w.nk4 = sm4 + (size_t)NW * S * 2 * CH;
  w.nv4 = w.nk4 + D / 8;
  const int G = p.H / p.Hkv;
  w.hk = blockIdx.x / p.n_gchunks;
  w.g0 = (blockIdx.x % p.n_gchunks) * MAXG;
  w.ng = min(MAXG, G - w.g0);
  w.h0 = w.hk * G + w.g0;
  w.b = blockIdx.y;
  w.pi = blockIdx.z;
  const int32_t *bt = p.bt + (size_t)(p.bt_row ? p.bt_row[w.b] : w.b) * p.max_blocks;
  const int pb = w.pi * (p.part / VR_ROLL_BLOCK) + warp + lane * NW;
  w.myblk = p.window <= 0 && warp + lane * NW < p.part / VR_ROLL_BLOCK && pb < p.max_blocks ? bt[pb] : 0;
  w.len = p.lens[w.b];
  if (w.len <= 0) {
    pdl_wait();
    if (w.pi == 0)
      for (int i = tid; i < w.ng * D; i += NW * 32) p.out[(size_t)w.b * p.ld_out + (size_t)w.h0 * D + i] = 0;
    return false;
  }
  w.p0 = w.pi * p.part;
  if (w.p0 >= w.len) {
    pdl_wait();
    return false;
  }
  w.p1 = min(w.len, w.p0 + p.part);
  w.nparts = (w.len + p.part - 1) / p.part;
  w.k0 = max(w.p0, p.window > 0 ? w.len - p.window : 0);
  w.kb0 = w.k0 / VR_ROLL_BLOCK;
  w.nkb = (w.p1 - 1) / VR_ROLL_BLOCK - w.kb0 + 1;
  w.nbw = warp < w.nkb ? (w.nkb - 1 - warp) / NW + 1 : 0;
  if (p.window > 0 && lane < w.nbw) w.myblk = bt[w.kb0 + warp + lane * NW];
  return true;
}

/* The warp's n-th cache block into stage n % S of its ring (S stages of (K: CH 16-byte chunks as
 * the cache holds them, V: CH chunks, row r's chunk c at r * NC + (c ^ (r & SWZ)))); the chunks of
 * keys outside [k0, p1) zero-filled, not read. Always one commit group (empty when n >= nbw). */
template <int D, int S, int SWZ>
__device__ __forceinline__ void ring_issue(const roll_attn_params &p, const ring_work &w, uint4 *ring, int n, int lane,
                                           int warp) {
  constexpr int NC = D / 8, CH = VR_ROLL_BLOCK * NC;
  if (n < w.nbw) {
    uint4 *st = ring + (n % S) * 2 * CH;
    const size_t head = (size_t)__shfl_sync(0xffffffffu, w.myblk, n) * p.Hkv + w.hk;
    const uint4 *ks = reinterpret_cast<const uint4 *>(p.kc + head * NC * VR_ROLL_BLOCK * 8);
    const uint4 *vs = reinterpret_cast<const uint4 *>(p.vc + head * VR_ROLL_BLOCK * D);
    const int key0 = (w.kb0 + warp + n * NW) * VR_ROLL_BLOCK;
#pragma unroll
    for (int r = 0; r < (CH + 31) / 32; ++r) {
      const int c = lane + 32 * r;
      if (c >= CH) break;
      const int vr = c / NC, vc = c % NC; /* K chunk (c / 16, key c % 16); V (row vr, chunk vc) */
      const int kj = key0 + c % VR_ROLL_BLOCK, vt = key0 + vr;
      ring_cp16(st + c, ks + c, kj >= w.k0 && kj < w.p1 ? 16 : 0);
      ring_cp16(st + CH + (SWZ ? vr * NC + (vc ^ (vr & SWZ)) : c), vs + c, vt >= w.k0 && vt < w.p1 ? 16 : 0);
    }
  }
  ring_commit();
}

template <int D, int MG>
__global__ void __launch_bounds__(NW * 32, D > 64 ? 1 : MG <= 4 ? 4 : 3) k_roll_decode_ring(roll_attn_params p) {
  constexpr int NC = D / 8;
  constexpr int KCH = (NC + 1) / 2;
  constexpr int LPT = NC < 32 ? NC : 32;
  constexpr int TPW = 32 / LPT;
  constexpr int VST = (VR_ROLL_BLOCK + TPW - 1) / TPW;
  constexpr int S = RING_STAGES(D);
  constexpr int CH = VR_ROLL_BLOCK * NC; /* 16-byte chunks of one cache block's K (and of its V) */
  extern __shared__ uint4 sm4[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  ring_work w;
  if (!ring_setup<D, S>(p, sm4, tid, lane, warp, w)) return;
  uint4 *ring = w.ring, *nk4 = w.nk4, *nv4 = w.nv4;
  float *qs = reinterpret_cast<float *>(nv4 + NC); /* (MG, D) */
  float *wml = qs + MG * D;                        /* (NW, MG, 2) */
  float *csn = wml + 2 * NW * MG;                  /* (D) rope cos | sin */
  auto issue = [&](int n) { ring_issue<D, S, 0>(p, w, ring, n, lane, warp); };
#pragma unroll
  for (int n = 0; n < S; ++n) issue(n);

  const uint16_t *q = p.qkv + (size_t)w.b * p.ld + p.q_off + (size_t)w.h0 * D;
  const int newk = p.rope && w.len - 1 >= w.p0 ? w.len - 1 : -1;
  if (p.rope) {
    const float pp = (float)p.pos[w.b]; /* metadata: not the previous kernel's */
    for (int i = tid; i < D / 2; i += NW * 32) roll_rope_angle(pp, p.inv_freq[i], p.rope_scaling, &csn[i], &csn[D / 2 + i]);
    pdl_wait();
    __syncthreads();
    for (int i = tid; i < MG * D; i += NW * 32) {
      const int d = i % D;
      qs[i] = i < w.ng * D ? bf(rope_elem<D>(q + (i - d), d, csn)) * p.scale_log2 : 0.f;
    }
    if (newk >= 0)
      roll_new_kv<D>(p, w.b, w.hk, w.g0, csn, reinterpret_cast<uint16_t *>(nk4), reinterpret_cast<uint16_t *>(nv4),
                     tid);
  } else {
    pdl_wait();
    for (int i = tid; i < MG * D; i += NW * 32) qs[i] = i < w.ng * D ? bf(q[i]) * p.scale_log2 : 0.f;
  }
  __syncthreads();

  const int j = lane & 15, hp = lane >> 4;
  const int sub = lane / LPT, cc = lane % LPT;
  float m_run[MG], l_run[MG], o[MG][8];
#pragma unroll
  for (int g = 0; g < MG; ++g) {
    m_run[g] = -INFINITY;
    l_run[g] = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) o[g][e] = 0.f;
  }
  const uint4 zero4 = make_uint4(0u, 0u, 0u, 0u);
  for (int n = 0; n < w.nbw; ++n) {
    ring_wait<S - 1>(); /* this lane's copies of block n have landed */
    __syncwarp();       /* and every lane's */
    const uint4 *kst = ring + (n % S) * 2 * CH, *vst = kst + CH;
    const int key0 = (w.kb0 + warp + n * NW) * VR_ROLL_BLOCK;
    float s[MG];
#pragma unroll
    for (int g = 0; g < MG; ++g) s[g] = 0.f;
#pragma unroll
    for (int ci = 0; ci < KCH; ++ci) {
      const int c = 2 * ci + hp;
      if (c < NC) {
        float k8[8];
        unpack8(key0 + j == newk ? nk4[c] : kst[c * VR_ROLL_BLOCK + j], k8);
#pragma unroll
        for (int g = 0; g < MG; ++g) {
          const float4 qa = *reinterpret_cast<const float4 *>(qs + g * D + c * 8);
          const float4 qb = *reinterpret_cast<const float4 *>(qs + g * D + c * 8 + 4);
          s[g] += qa.x * k8[0] + qa.y * k8[1] + qa.z * k8[2] + qa.w * k8[3] + qb.x * k8[4] + qb.y * k8[5] +
                  qb.z * k8[6] + qb.w * k8[7];
        }
      }
    }
    const int key = key0 + j;
    const bool valid = key >= w.k0 && key < w.p1;
#pragma unroll
    for (int g = 0; g < MG; ++g) s[g] += __shfl_xor_sync(0xffffffffu, s[g], 16);
#pragma unroll
    for (int g = 0; g < MG; ++g) {
      const float sv = valid ? s[g] : -INFINITY;
      float bm = sv;
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, off));
      const float mn = fmaxf(m_run[g], bm);
      const float alpha = mn == -INFINITY ? 1.f : exp2f(m_run[g] - mn);
      const float pj = valid ? exp2f(sv - mn) : 0.f;
      m_run[g] = mn;
      l_run[g] = l_run[g] * alpha + pj;
#pragma unroll
      for (int e = 0; e < 8; ++e) o[g][e] *= alpha;
      s[g] = pj;
    }
#pragma unroll
    for (int vs = 0; vs < VST; ++vs) {
      const int t = vs * TPW + sub;
      float v8[8];
      unpack8(t >= VR_ROLL_BLOCK ? zero4 : key0 + t == newk ? nv4[cc] : vst[t * NC + cc], v8);
#pragma unroll
      for (int g = 0; g < MG; ++g) {
        const float pt = __shfl_sync(0xffffffffu, s[g], t & 15);
#pragma unroll
        for (int e = 0; e < 8; ++e) o[g][e] += pt * v8[e];
      }
    }
    __syncwarp(); /* every lane is done with the stage before it is refilled */
    issue(n + S);
  }
  ring_wait<0>();
  __syncwarp();
#pragma unroll
  for (int g = 0; g < MG; ++g)
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) l_run[g] += __shfl_xor_sync(0xffffffffu, l_run[g], off);
#pragma unroll
  for (int off = LPT; off < 32; off <<= 1)
#pragma unroll
    for (int g = 0; g < MG; ++g)
#pragma unroll
      for (int e = 0; e < 8; ++e) o[g][e] += __shfl_xor_sync(0xffffffffu, o[g][e], off);
  float *red = reinterpret_cast<float *>(ring); /* (MG, D) of this warp, in its own ring */
  if (sub == 0) {
#pragma unroll
    for (int g = 0; g < MG; ++g)
#pragma unroll
      for (int e = 0; e < 8; ++e) red[g * D + cc * 8 + e] = o[g][e];
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < MG; ++g) {
      wml[2 * (warp * MG + g)] = m_run[g];
      wml[2 * (warp * MG + g) + 1] = l_run[g];
    }
  }
  __syncthreads();
  roll_merge_warps<D, MG>(p, wml, reinterpret_cast<const float *>(sm4), (size_t)S * 2 * CH * 4, w.b, w.h0, w.ng, w.pi,
                          w.nparts, tid);
}

/* Tensor-core fragments (mma.sync m16n8k16, bf16 in, fp32 accumulate; PTX ISA "Matrix fragments for
 * mma.m16n8k16"): lane (g = lane / 4, t = lane % 4) holds A rows g, g + 8 x columns 2t, 2t + 1,
 * 2t + 8, 2t + 9 (a0: (g, 2t..), a1: (g + 8, 2t..), a2: (g, 2t + 8..), a3: (g + 8, 2t + 8..)), B
 * rows 2t, 2t + 1 (b0) and 2t + 8, 2t + 9 (b1) of column g, C rows g (c0, c1) and g + 8 (c2, c3)
 * x columns 2t, 2t + 1. */
__device__ __forceinline__ void mma_ldsm4(uint32_t *r, const void *src) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"((uint32_t)__cvta_generic_to_shared(src))
               : "memory");
}
__device__ __forceinline__ void mma_ldsm4_t(uint32_t *r, const void *src) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"((uint32_t)__cvta_generic_to_shared(src))
               : "memory");
}
__device__ __forceinline__ void mma_16816(float *c, const uint32_t *a, const uint32_t *b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
/* The 8x8 b16 matrix whose lane (g, t) holds row g, columns 2t, 2t + 1, transposed across the warp. */
__device__ __forceinline__ uint32_t mma_trans8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

/* k_roll_decode_mma<D> (head_dim D a multiple of 16): the ring kernel's work split, cache ring,
 * early loads and prologue, with both products on the tensor cores and the kv group's (up to MAXG)
 * query heads as the N = 8 columns: per cache block of 16 keys, S^T (16 keys x 8 heads) = K Q^T in
 * D / 16 mmas (K from the ring by ldmatrix: its (D/8, 16, 8) chunks are the A tiles as they lie;
 * Q^T in registers for the whole kernel, unscaled bf16), the online softmax per head on the C
 * fragment (lane t: heads 2t, 2t + 1; keys g, g + 8), P rounded to bf16 and transposed in registers
 * (movmatrix) into the B fragment of O^T (D x 8 heads) += V^T P^T, D / 16 mmas with V^T from the
 * ring by ldmatrix.trans (V's 16-byte chunks stored XOR-swizzled by row so that the 8 rows of one
 * ldmatrix hit distinct banks). The running sum adds the rounded P, as the product uses it. The
 * new key (rope form) overwrites its row in the ring stage once that stage has landed. The warps
 * merge as in the other kernels (roll_merge_warps). */
template <int D>
__global__ void __launch_bounds__(NW * 32, D > 128 ? 1 : 4) k_roll_decode_mma(roll_attn_params p) {
  constexpr int NC = D / 8, KS = D / 16, S = RING_STAGES(D), CH = VR_ROLL_BLOCK * NC;
  constexpr int SWZ = NC < 8 ? NC - 1 : 7; /* V chunk c of row r lies at r * NC + (c ^ (r & SWZ)) */
  /* c ^ (r & SWZ) permutes a row's chunks only when NC is a power of two below 8 or a multiple of 8:
   * at D 48, 80, 96, 112, 160, ... it would land past the row (another row's chunk, or past the ring) */
  static_assert(NC % 8 == 0 || (NC & (NC - 1)) == 0, "k_roll_decode_mma: V swizzle needs NC = 1, 2, 4 or 8k");
  extern __shared__ uint4 sm4[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  ring_work w;
  if (!ring_setup<D, S>(p, sm4, tid, lane, warp, w)) return;
  uint4 *ring = w.ring, *nk4 = w.nk4, *nv4 = w.nv4;
  uint16_t *qh = reinterpret_cast<uint16_t *>(nv4 + NC); /* (MAXG, D) bf16 queries, rows >= ng zero */
  float *wml = reinterpret_cast<float *>(qh + MAXG * D); /* (NW, MAXG, 2) */
  float *csn = wml + 2 * NW * MAXG;                      /* (D) rope cos | sin */
  auto issue = [&](int n) { ring_issue<D, S, SWZ>(p, w, ring, n, lane, warp); };
#pragma unroll
  for (int n = 0; n < S; ++n) issue(n);

  const uint16_t *q = p.qkv + (size_t)w.b * p.ld + p.q_off + (size_t)w.h0 * D;
  const int newk = p.rope && w.len - 1 >= w.p0 ? w.len - 1 : -1;
  if (p.rope) {
    const float pp = (float)p.pos[w.b];
    for (int i = tid; i < D / 2; i += NW * 32) roll_rope_angle(pp, p.inv_freq[i], p.rope_scaling, &csn[i], &csn[D / 2 + i]);
    pdl_wait();
    __syncthreads();
    for (int i = tid; i < MAXG * D; i += NW * 32) {
      const int d = i % D;
      qh[i] = i < w.ng * D ? rope_elem<D>(q + (i - d), d, csn) : (uint16_t)0;
    }
    if (newk >= 0)
      roll_new_kv<D>(p, w.b, w.hk, w.g0, csn, reinterpret_cast<uint16_t *>(nk4), reinterpret_cast<uint16_t *>(nv4),
                     tid);
  } else {
    pdl_wait();
    for (int i = tid; i < MAXG * D; i += NW * 32) qh[i] = i < w.ng * D ? q[i] : (uint16_t)0;
  }
  __syncthreads();

  const int g = lane >> 2, t = lane & 3;
  uint32_t qf[KS][2]; /* B of S^T: Q^T rows (dims) 16ks + 2t.., column (head) g */
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) {
    qf[ks][0] = *reinterpret_cast<const uint32_t *>(qh + g * D + 16 * ks + 2 * t);
    qf[ks][1] = *reinterpret_cast<const uint32_t *>(qh + g * D + 16 * ks + 2 * t + 8);
  }
  const float sl = p.scale_log2;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f; /* heads 2t, 2t + 1; l over this lane's keys */
  float o[KS][4];                                           /* C of O^T: dims 16ks + g (+ 8), heads 2t, 2t + 1 */
#pragma unroll
  for (int ks = 0; ks < KS; ++ks)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[ks][e] = 0.f;
  /* ldmatrix row addresses: K (A of S^T) key lane % 16 of chunk 2ks + lane / 16; V (A of O^T, transposed)
   * row vk of chunk 2ks + (lane / 8) % 2 */
  const int vk = (lane & 7) + ((lane >> 4) << 3), vh = (lane >> 3) & 1;
  for (int n = 0; n < w.nbw; ++n) {
    ring_wait<S - 1>();
    __syncwarp();
    uint4 *kst = ring + (n % S) * 2 * CH, *vst = kst + CH;
    const int key0 = (w.kb0 + warp + n * NW) * VR_ROLL_BLOCK;
    if (newk >= key0 && newk < key0 + VR_ROLL_BLOCK) { /* the new key's row from shared memory */
      const int j = newk - key0;
      for (int c = lane; c < NC; c += 32) {
        kst[c * VR_ROLL_BLOCK + j] = nk4[c];
        vst[j * NC + (c ^ (j & SWZ))] = nv4[c];
      }
      __syncwarp();
    }
    float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      uint32_t a[4];
      mma_ldsm4(a, kst + (2 * ks + (lane >> 4)) * VR_ROLL_BLOCK + (lane & 15));
      mma_16816(s, a, qf[ks]);
    }
    const bool va = key0 + g >= w.k0 && key0 + g < w.p1, vb = key0 + g + 8 >= w.k0 && key0 + g + 8 < w.p1;
    const float s0 = va ? s[0] * sl : -INFINITY, s1 = va ? s[1] * sl : -INFINITY;
    const float s2 = vb ? s[2] * sl : -INFINITY, s3 = vb ? s[3] * sl : -INFINITY;
    float bm0 = fmaxf(s0, s2), bm1 = fmaxf(s1, s3);
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
      bm0 = fmaxf(bm0, __shfl_xor_sync(0xffffffffu, bm0, off));
      bm1 = fmaxf(bm1, __shfl_xor_sync(0xffffffffu, bm1, off));
    }
    const float mn0 = fmaxf(m0, bm0), mn1 = fmaxf(m1, bm1);
    const float al0 = mn0 == -INFINITY ? 1.f : exp2f(m0 - mn0), al1 = mn1 == -INFINITY ? 1.f : exp2f(m1 - mn1);
    const uint16_t e0 = to_bf(va ? exp2f(s0 - mn0) : 0.f), e1 = to_bf(va ? exp2f(s1 - mn1) : 0.f);
    const uint16_t e2 = to_bf(vb ? exp2f(s2 - mn0) : 0.f), e3 = to_bf(vb ? exp2f(s3 - mn1) : 0.f);
    m0 = mn0;
    m1 = mn1;
    l0 = l0 * al0 + (bf(e0) + bf(e2));
    l1 = l1 * al1 + (bf(e1) + bf(e3));
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      o[ks][0] *= al0;
      o[ks][1] *= al1;
      o[ks][2] *= al0;
      o[ks][3] *= al1;
    }
    /* P (keys x heads) rows g, g + 8 -> B of O^T: keys 2t.. (b0) and 2t + 8.. (b1) of head g */
    const uint32_t pb2[2] = {mma_trans8((uint32_t)e0 | ((uint32_t)e1 << 16)),
                             mma_trans8((uint32_t)e2 | ((uint32_t)e3 << 16))};
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      uint32_t a[4];
      const int c = 2 * ks + vh;
      mma_ldsm4_t(a, vst + vk * NC + (c ^ (vk & SWZ)));
      mma_16816(o[ks], a, pb2);
    }
    __syncwarp();
    issue(n + S);
  }
  ring_wait<0>();
  __syncwarp();
#pragma unroll
  for (int off = 4; off < 32; off <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, off);
    l1 += __shfl_xor_sync(0xffffffffu, l1, off);
  }
  float *red = reinterpret_cast<float *>(ring); /* (MAXG, D) of this warp, in its own ring */
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) {
    red[(2 * t) * D + 16 * ks + g] = o[ks][0];
    red[(2 * t + 1) * D + 16 * ks + g] = o[ks][1];
    red[(2 * t) * D + 16 * ks + g + 8] = o[ks][2];
    red[(2 * t + 1) * D + 16 * ks + g + 8] = o[ks][3];
  }
  if (g == 0) {
    wml[2 * (warp * MAXG + 2 * t)] = m0;
    wml[2 * (warp * MAXG + 2 * t) + 1] = l0;
    wml[2 * (warp * MAXG + 2 * t + 1)] = m1;
    wml[2 * (warp * MAXG + 2 * t + 1) + 1] = l1;
  }
  __syncthreads();
  roll_merge_warps<D, MAXG>(p, wml, reinterpret_cast<const float *>(sm4), (size_t)S * 2 * CH * 4, w.b, w.h0, w.ng, w.pi,
                            w.nparts, tid);
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

/* The register tile of query heads for a group of G: 1, 4 or 8 (a block takes at most MAXG). */
inline int tile_heads(int G) { return G <= 1 ? 1 : G <= 4 ? 4 : MAXG; }

/* The ring kernel's dynamic shared memory: the warps' rings, the new key and value, the queries,
 * the warps' (m, l), the rope angles. */
size_t ring_smem(int MG, int D) {
  return ((size_t)NW * RING_STAGES(D) * 2 * VR_ROLL_BLOCK * (D / 8) + 2 * (size_t)(D / 8)) * 16 +
         ((size_t)MG * D + 2 * (size_t)NW * MG + (size_t)D) * sizeof(float);
}

/* The tensor-core kernel's dynamic shared memory: the warps' rings, the new key and value, the
 * bf16 queries, the warps' (m, l), the rope angles. */
size_t mma_smem(int D) {
  return ((size_t)NW * RING_STAGES(D) * 2 * VR_ROLL_BLOCK * (D / 8) + 2 * (size_t)(D / 8)) * 16 +
         (size_t)MAXG * D * sizeof(uint16_t) + (2 * (size_t)NW * MAXG + (size_t)D) * sizeof(float);
}

/* kern with smem bytes of dynamic shared memory (opted in above 48 KiB), as a programmatic
 * dependent of the previous kernel when pdl. */
void launch_ex(void (*kern)(roll_attn_params), size_t smem, const roll_attn_params &p, dim3 grid, int pdl,
               cudaStream_t s) {
  if (smem > SMEM_LIMIT) VR_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(NW * 32);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  VR_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kern, p));
}

template <int D>
void launch_decode(const roll_attn_params &p, int G, dim3 grid, size_t smem, unsigned flags, cudaStream_t s) {
  const int mg = tile_heads(G);
  const int pdl = (flags & VR_ROLL_ATTN_PDL) && p.rope;
  const int kind = vr_cuda_roll_attn_kernel(G, D, flags);
  if (kind == VR_ROLL_ATTN_MMA) {
    if constexpr (D % 16 == 0) launch_ex(k_roll_decode_mma<D>, mma_smem(D), p, grid, pdl, s);
  } else if (kind == VR_ROLL_ATTN_RING) {
    if (mg == 1) launch_ex(k_roll_decode_ring<D, 1>, ring_smem(1, D), p, grid, pdl, s);
    else if (mg == 4) launch_ex(k_roll_decode_ring<D, 4>, ring_smem(4, D), p, grid, pdl, s);
    else launch_ex(k_roll_decode_ring<D, MAXG>, ring_smem(MAXG, D), p, grid, pdl, s);
  } else if (mg == 1) k_roll_decode<D, 1><<<grid, NW * 32, smem, s>>>(p);
  else if (mg == 4) k_roll_decode<D, 4><<<grid, NW * 32, smem, s>>>(p);
  else k_roll_decode<D, MAXG><<<grid, NW * 32, smem, s>>>(p);
  VR_CUDA_CHECK_LAUNCH();
}

} /* namespace */

/* -------------------------------------------------------------- launchers */

extern "C" unsigned vr_cuda_roll_attn_kernel(int G, int D, unsigned flags) {
  const int mma_ok = D % 16 == 0;
  if ((flags & VR_ROLL_ATTN_MMA) && mma_ok) return VR_ROLL_ATTN_MMA;
  if (flags & VR_ROLL_ATTN_RING) return VR_ROLL_ATTN_RING;
  if (flags & VR_ROLL_ATTN_REGS) return VR_ROLL_ATTN_REGS;
  if (flags & VR_ROLL_ATTN_OLD_RULE) return tile_heads(G) <= 4 ? VR_ROLL_ATTN_RING : VR_ROLL_ATTN_REGS;
  return mma_ok ? VR_ROLL_ATTN_MMA : tile_heads(G) <= 4 ? VR_ROLL_ATTN_RING : VR_ROLL_ATTN_REGS;
}

extern "C" size_t vr_cuda_roll_attention_smem(int H, int Hkv, int D, int part) {
  (void)part; /* one pass: the scores stay in registers */
  const int MG = tile_heads(H / Hkv);
  return ((size_t)MG * D * (1 + NW) + 2 * (size_t)NW * MG) * sizeof(float) + VR_ROLL_MAX_PART / VR_ROLL_BLOCK * sizeof(int) +
         (size_t)D * sizeof(float) + 2 * (size_t)D * sizeof(uint16_t); /* the rope's angles, the new key and value */
}

extern "C" int vr_cuda_roll_pick_part(int B, int H, int Hkv, int D, int n_sms) {
  const int G = H / Hkv, gch = (G + MAXG - 1) / MAXG;
  const long blocks = (long)B * Hkv * gch;
  int part = blocks >= 2L * n_sms ? 512 : blocks >= n_sms ? 256 : blocks * 4 >= n_sms ? 128 : 64;
  while (part > VR_ROLL_BLOCK && vr_cuda_roll_attention_smem(H, Hkv, D, part) > SMEM_LIMIT) part /= 2;
  return part;
}

extern "C" int vr_cuda_roll_part_sms(int G, int D, unsigned flags, int n_sms) {
  return vr_cuda_roll_attn_kernel(G, D, flags) == VR_ROLL_ATTN_MMA ? (n_sms + 3) / 4 : n_sms;
}

extern "C" int vr_cuda_roll_pick_part_ctx(int base, int H, int Hkv, int D, int n_sms, const uint32_t *ctx, int n,
                                          int window) {
  const long per_part = (long)Hkv * ((H / Hkv + MAXG - 1) / MAXG); /* blocks per (sequence, partition) */
  int part = base;
  while (part * 2 <= VR_ROLL_MAX_PART && vr_cuda_roll_attention_smem(H, Hkv, D, part * 2) <= SMEM_LIMIT) {
    const uint32_t p2 = (uint32_t)part * 2;
    long parts = 0;
    for (int b = 0; b < n; ++b) {
      const uint32_t keys = window > 0 && ctx[b] > (uint32_t)window ? (uint32_t)window : ctx[b];
      parts += (long)((keys + p2 - 1) / p2);
    }
    if (parts * per_part < 2L * n_sms) break;
    part *= 2;
  }
  return part;
}

namespace {
void decode_attention(roll_attn_params p, int B, int D, unsigned flags, cudaStream_t s) {
  const int H = p.H, Hkv = p.Hkv, part = p.part, max_parts = p.max_parts;
  if (B <= 0) return;
  VR_ASSERT(H > 0 && Hkv > 0 && H % Hkv == 0 && max_parts >= 1);
  VR_ASSERT(part >= VR_ROLL_BLOCK && part <= VR_ROLL_MAX_PART && part % VR_ROLL_BLOCK == 0);
  const size_t smem = vr_cuda_roll_attention_smem(H, Hkv, D, part);
  VR_ASSERT(smem <= SMEM_LIMIT);
  const int G = H / Hkv, gch = (G + MAXG - 1) / MAXG;
  p.n_gchunks = gch;
  const dim3 grid((unsigned)(Hkv * gch), (unsigned)B, (unsigned)max_parts);
  switch (D) {
    case 8: launch_decode<8>(p, G, grid, smem, flags, s); break;
    case 16: launch_decode<16>(p, G, grid, smem, flags, s); break;
    case 32: launch_decode<32>(p, G, grid, smem, flags, s); break;
    case 64: launch_decode<64>(p, G, grid, smem, flags, s); break;
    case 128: launch_decode<128>(p, G, grid, smem, flags, s); break;
    case 256: launch_decode<256>(p, G, grid, smem, flags, s); break;
    default: VR_ASSERT(!"decode attention: head_dim must be 8, 16, 32, 64, 128 or 256");
  }
  if (max_parts > 1) {
    k_roll_combine<<<(unsigned)(B * H), 128, 0, s>>>(p.out, p.ld_out, p.lens, H, D, part, max_parts, p.po, p.pml);
    VR_CUDA_CHECK_LAUNCH();
  }
}
} /* namespace */

extern "C" void vr_cuda_roll_decode_attention(uint16_t *out, int ld_out, const uint16_t *qkv, int ld, int q_off,
                                              const uint16_t *kc, const uint16_t *vc, const int32_t *block_tables,
                                              int max_blocks, const int32_t *bt_row, const int32_t *lens, int B, int H,
                                              int Hkv, int D, int window, float scale, int part, int max_parts,
                                              float *po, float *pml, unsigned flags, cudaStream_t s) {
  roll_attn_params p = {};
  p.out = out, p.ld_out = ld_out, p.qkv = qkv, p.ld = ld, p.q_off = q_off, p.kc = kc, p.vc = vc;
  p.bt = block_tables, p.bt_row = bt_row, p.max_blocks = max_blocks, p.lens = lens;
  p.H = H, p.Hkv = Hkv, p.window = window, p.part = part, p.max_parts = max_parts;
  p.scale_log2 = scale * 1.4426950408889634f, p.po = po, p.pml = pml;
  decode_attention(p, B, D, flags, s);
}

extern "C" void vr_cuda_roll_decode_attention_rope(uint16_t *out, int ld_out, const uint16_t *qkv, int ld, int q_off,
                                                   int k_off, int v_off, uint16_t *kc, uint16_t *vc,
                                                   const int32_t *block_tables, int max_blocks, const int32_t *lens,
                                                   const int32_t *pos, const int32_t *slots, const float *inv_freq,
                                                   float attn_scaling, int B, int H, int Hkv, int D, int window,
                                                   float scale, int part, int max_parts, float *po, float *pml,
                                                   unsigned flags, cudaStream_t s) {
  roll_attn_params p = {};
  p.out = out, p.ld_out = ld_out, p.qkv = qkv, p.ld = ld, p.q_off = q_off, p.kc = kc, p.vc = vc;
  p.bt = block_tables, p.bt_row = NULL, p.max_blocks = max_blocks, p.lens = lens;
  p.H = H, p.Hkv = Hkv, p.window = window, p.part = part, p.max_parts = max_parts;
  p.scale_log2 = scale * 1.4426950408889634f, p.po = po, p.pml = pml;
  p.rope = 1, p.k_off = k_off, p.v_off = v_off, p.pos = pos, p.slots = slots, p.inv_freq = inv_freq;
  p.rope_scaling = attn_scaling, p.kcw = kc, p.vcw = vc;
  decode_attention(p, B, D, flags, s);
}
