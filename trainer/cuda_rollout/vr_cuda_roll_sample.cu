/* vr_cuda_roll_sample.cu: trainer/vr_sample.h's sampling rule on the device, one block per row,
 * greedy rows optionally over several blocks (launcher contract in vr_cuda_roll_ops.h).
 *
 * Per row, with z = l / T (float division, as the CPU):
 *   (A) finiteness, max and argmax of z (the lowest id among equal maxima);
 *   (B) S = sum exp(z - max) (expf, summed in double; the CPU takes exp in double: the log-probs
 *       agree to ~1e-7): the log-prob z_tok - max - log S (greedy rows stop here, with T = 1; they
 *       read (A) and (B) 4 logits a load when the row allows: the same token, S summed in
 *       another order);
 *   (C) top-k: the k-th largest z by a radix select on order-preserving 32-bit keys (4 passes of
 *       8-bit integer histograms); survivors are z >= it, ties kept;
 *   (D) top-p over the survivors in (z, id) ascending order, as the CPU's sort: a survivor is
 *       dropped iff the mass of the survivors after it in that order is >= p * total. The same
 *       radix descent on histograms of the mass (2^32 fixed point, integer atomics) finds the
 *       boundary value; within the tie group at the boundary the higher ids are the later ones,
 *       so the kept ones are the group's top ids (a radix select on ids);
 *   (E) inverse CDF over the survivors in id order: every thread owns a contiguous range of ids,
 *       the ranges' double sums are scanned in a fixed order, the owner of u * total walks its
 *       range; survivors of weight 0 are skipped (the CPU's walk skips them too).
 * (D)'s masses and comparisons are exactly vr_sample.c's (its top-p cut is defined on these
 * integers), so the kept set is the CPU's, tie groups at the cut included.
 * tests/trainer/test_sample_ties.c transcribes these steps to C (emu_roll_sample) and checks them
 * against the CPU rule without a GPU: change the two together. */
#include <math.h>

#include "vr_cuda_common.cuh"
#include "vr_cuda_roll_ops.h"

#define NT VR_ROLL_SAMPLE_THREADS
#define NWARPS (NT / 32)

namespace {

__device__ __forceinline__ uint32_t fkey(float f) {
  if (f == 0.f) f = 0.f; /* -0 == +0, as the CPU's comparison */
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ uint64_t fixed32(double e) { return (uint64_t)(e * 4294967296.0); }

/* (value, index) argmax over the block: larger value wins, lower index among equal ones. */
__device__ void block_argmax(float &v, int &ix, float *rv, int *ri) {
  for (int o = 16; o > 0; o >>= 1) {
    const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
    const int i2 = __shfl_xor_sync(0xffffffffu, ix, o);
    if (v2 > v || (v2 == v && i2 < ix)) v = v2, ix = i2;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) rv[warp] = v, ri[warp] = ix;
  __syncthreads();
  v = rv[lane];
  ix = ri[lane];
  for (int o = 16; o > 0; o >>= 1) {
    const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
    const int i2 = __shfl_xor_sync(0xffffffffu, ix, o);
    if (v2 > v || (v2 == v && i2 < ix)) v = v2, ix = i2;
  }
}

template <typename X>
__device__ X block_sum_t(X v, X *red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  X t = red[lane];
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

struct smem_t {
  float rv[32];
  int ri[32];
  double rd[32];
  unsigned long long ru[32];
  uint32_t cnt[256];
  unsigned long long mass[256];
  double scan[NT];
  uint32_t prefix;
  int rem;
  unsigned long long above;
  int found;
};

/* The key of the k-th largest (1-based) among elements with sel(i), keyf(i) their 32-bit keys,
 * by 8-bit digits from bit `top` down. Every thread returns it. */
template <typename Sel, typename Key>
__device__ uint32_t radix_kth(int V, int k, int top, Sel sel, Key keyf, smem_t &sm) {
  const int tid = threadIdx.x;
  uint32_t prefix = 0, mask = 0;
  if (tid == 0) sm.rem = k;
  for (int shift = top; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += NT) sm.cnt[i] = 0;
    __syncthreads();
    for (int i = tid; i < V; i += NT)
      if (sel(i)) {
        const uint32_t key = keyf(i);
        if ((key & mask) == prefix) atomicAdd(&sm.cnt[(key >> shift) & 255u], 1u);
      }
    __syncthreads();
    if (tid == 0) {
      int rem = sm.rem;
      uint32_t d = 255;
      for (; d > 0; --d) {
        if ((int)sm.cnt[d] >= rem) break;
        rem -= (int)sm.cnt[d];
      }
      sm.rem = rem;
      sm.prefix = prefix | (d << shift);
    }
    __syncthreads();
    prefix = sm.prefix;
    mask |= 255u << shift;
  }
  return prefix;
}

/* ---- greedy rows over several blocks (vr_cuda_roll_sample_ws) ----
 * k_roll_greedy_part: block (c, b) does (A) and (B) of greedy row b over ids [c * PCH, (c + 1) * PCH)
 * with its own maximum m_c: the chunk's max, lowest argmax, S_c = sum expf(z - m_c) (double), or
 * am = PBAD when it holds NaN / +Inf. k_roll_sample then merges a greedy row's chunks in one warp:
 * M = max m_c, the lowest argmax among the chunks at M, S = sum S_c * exp(m_c - M) (double, a fixed
 * shuffle tree). The chunk count depends on V only, so a row's result does not depend on the batch. */
#define PNT 256
#define PCH 8192
#define PBAD (-2)

struct roll_part_t {
  float m;
  int am;
  double s;
};

__device__ __forceinline__ void warp_argmax(float &v, int &ix) {
  for (int o = 16; o > 0; o >>= 1) {
    const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
    const int i2 = __shfl_xor_sync(0xffffffffu, ix, o);
    if (v2 > v || (v2 == v && i2 < ix)) v = v2, ix = i2;
  }
}

__global__ void __launch_bounds__(PNT) k_roll_greedy_part(const float *logits, const vr_cuda_roll_sample_row_t *rows,
                                                          int V, roll_part_t *parts) {
  __shared__ float rv[PNT / 32];
  __shared__ int ri[PNT / 32];
  __shared__ double rd[PNT / 32];
  const int c = blockIdx.x, b = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const vr_cuda_roll_sample_row_t prm = rows[b];
  if (prm.temperature != 0.f) return;
  const float *l = logits + (size_t)prm.row * V;
  const int i0 = c * PCH, i1 = min(V, i0 + PCH);
  const int vec = V % 4 == 0 && (reinterpret_cast<uintptr_t>(l) & 15u) == 0; /* i0 is a multiple of 4 */
  float m = -INFINITY;
  int am = 0x7fffffff, bad = 0;
  if (vec) {
    const float4 *l4 = reinterpret_cast<const float4 *>(l);
    for (int i = i0 / 4 + tid; i < i1 / 4; i += PNT) {
      const float4 q = l4[i];
      const float v[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (isnan(v[e]) || v[e] == INFINITY) bad = 1;
        if (v[e] > m) m = v[e], am = 4 * i + e;
      }
    }
  } else {
    for (int i = i0 + tid; i < i1; i += PNT) {
      const float v = l[i];
      if (isnan(v) || v == INFINITY) bad = 1;
      if (v > m) m = v, am = i;
    }
  }
  bad = __syncthreads_or(bad);
  warp_argmax(m, am);
  if (lane == 0) rv[warp] = m, ri[warp] = am;
  __syncthreads();
  m = lane < PNT / 32 ? rv[lane] : -INFINITY;
  am = lane < PNT / 32 ? ri[lane] : 0x7fffffff;
  warp_argmax(m, am);
  double se = 0.0;
  if (m > -INFINITY && !bad) {
    if (vec) {
      const float4 *l4 = reinterpret_cast<const float4 *>(l);
      for (int i = i0 / 4 + tid; i < i1 / 4; i += PNT) {
        const float4 q = l4[i];
        se += (double)expf(q.x - m) + (double)expf(q.y - m) + (double)expf(q.z - m) + (double)expf(q.w - m);
      }
    } else {
      for (int i = i0 + tid; i < i1; i += PNT) se += (double)expf(l[i] - m);
    }
  }
  for (int o = 16; o > 0; o >>= 1) se += __shfl_xor_sync(0xffffffffu, se, o);
  if (lane == 0) rd[warp] = se;
  __syncthreads();
  if (tid == 0) {
    double t = 0.0;
    for (int w = 0; w < PNT / 32; ++w) t += rd[w];
    parts[(size_t)b * gridDim.x + c] = roll_part_t{m, bad ? PBAD : am, t};
  }
}

/* A greedy row's token and log-prob from its np chunks (warp 0 of the row's block). */
__device__ void greedy_merge(const roll_part_t *pp, int np, const float *l, int32_t *token, float *logprob) {
  const int lane = threadIdx.x & 31;
  float m = -INFINITY;
  int am = 0x7fffffff, bad = 0;
  for (int c = lane; c < np; c += 32) {
    const roll_part_t q = pp[c];
    if (q.am == PBAD) bad = 1;
    else if (q.m > m) m = q.m, am = q.am; /* chunks in id order: the first at a value has its lowest id */
  }
  bad = __any_sync(0xffffffffu, bad);
  warp_argmax(m, am);
  if (bad || m == -INFINITY) {
    if (lane == 0) *token = -1, *logprob = NAN;
    return;
  }
  double S = 0.0;
  for (int c = lane; c < np; c += 32) {
    const roll_part_t q = pp[c];
    if (q.m > -INFINITY) S += q.s * exp((double)q.m - (double)m);
  }
  for (int o = 16; o > 0; o >>= 1) S += __shfl_xor_sync(0xffffffffu, S, o);
  if (lane == 0) *token = am, *logprob = (float)((double)l[am] - (double)m - log(S));
}

__global__ void __launch_bounds__(NT) k_roll_sample(int32_t *tokens, float *logprobs, const float *logits,
                                                     const vr_cuda_roll_sample_row_t *rows, int V,
                                                     const roll_part_t *parts, int np) {
  __shared__ smem_t sm;
  const int b = blockIdx.x, tid = threadIdx.x;
  const vr_cuda_roll_sample_row_t prm = rows[b];
  const float *l = logits + (size_t)prm.row * V;
  const int greedy = prm.temperature == 0.f;
  const float T = greedy ? 1.f : prm.temperature;
  if (greedy && parts) { /* the chunks of k_roll_greedy_part */
    if (tid < 32) greedy_merge(parts + (size_t)b * np, np, l, &tokens[b], &logprobs[b]);
    return;
  }

  /* (A); greedy rows of 16-byte aligned width read 4 logits a load (each thread still visits its
   * ids in increasing order, so the first maximum it keeps is its lowest id; z = l / 1 = l) */
  const int vec = greedy && V % 4 == 0 && (reinterpret_cast<uintptr_t>(l) & 15u) == 0;
  float m = -INFINITY;
  int am = 0x7fffffff, bad = 0, any = 0;
  if (vec) {
    const float4 *l4 = reinterpret_cast<const float4 *>(l);
    for (int i = tid; i < V / 4; i += NT) {
      const float4 q = l4[i];
      const float v[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (isnan(v[e]) || v[e] == INFINITY) bad = 1;
        any |= v[e] > -INFINITY;
        if (v[e] > m) m = v[e], am = 4 * i + e;
      }
    }
  } else {
    for (int i = tid; i < V; i += NT) {
      const float v = l[i];
      if (isnan(v) || v == INFINITY) bad = 1;
      any |= v > -INFINITY;
      const float z = v / T;
      if (z > m) m = z, am = i;
    }
  }
  bad = __syncthreads_or(bad);
  any = __syncthreads_or(any);
  if (bad || !any) {
    if (tid == 0) tokens[b] = -1, logprobs[b] = NAN;
    return;
  }
  block_argmax(m, am, sm.rv, sm.ri);
  /* (B) */
  double se = 0.0;
  if (vec) {
    const float4 *l4 = reinterpret_cast<const float4 *>(l);
    for (int i = tid; i < V / 4; i += NT) {
      const float4 q = l4[i];
      se += (double)expf(q.x - m) + (double)expf(q.y - m) + (double)expf(q.z - m) + (double)expf(q.w - m);
    }
  } else {
    for (int i = tid; i < V; i += NT) se += (double)expf(l[i] / T - m); /* float exp, double sum */
  }
  const double logS = log(block_sum_t<double>(se, sm.rd));
  if (greedy) {
    if (tid == 0) tokens[b] = am, logprobs[b] = (float)((double)(l[am] / T) - (double)m - logS);
    return;
  }
  auto zkey = [&](int i) { return fkey(l[i] / T); };
  auto all = [](int) { return true; };
  uint32_t kmin = 0; /* survivors: key > kmin, or key == kmin and id >= id_min */
  int id_min = 0;
  /* (C) */
  if (prm.top_k > 0 && prm.top_k < V) kmin = radix_kth(V, prm.top_k, 24, all, zkey, sm);
  /* (D) */
  if (prm.top_p < 1.f) {
    unsigned long long tot = 0;
    for (int i = tid; i < V; i += NT) {
      const float z = l[i] / T;
      if (fkey(z) >= kmin) tot += fixed32(exp((double)z - (double)m));
    }
    tot = block_sum_t<unsigned long long>(tot, sm.ru);
    const double P = (double)prm.top_p * (double)tot; /* vr_sample.c's expression, bit for bit */
    uint32_t prefix = 0, mask = 0;
    if (tid == 0) sm.above = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += NT) sm.cnt[i] = 0, sm.mass[i] = 0;
      __syncthreads();
      for (int i = tid; i < V; i += NT) {
        const float z = l[i] / T;
        const uint32_t key = fkey(z);
        if (key >= kmin && (key & mask) == prefix) {
          const uint32_t d = (key >> shift) & 255u;
          atomicAdd(&sm.cnt[d], 1u);
          atomicAdd(&sm.mass[d], fixed32(exp((double)z - (double)m)));
        }
      }
      __syncthreads();
      if (tid == 0) {
        unsigned long long acc = sm.above, chosen_acc = sm.above;
        int chosen = -1;
        for (int d = 255; d >= 0; --d) {
          if (sm.cnt[d] == 0) continue;
          if (!((double)acc < P)) break;
          chosen = d, chosen_acc = acc;
          acc += sm.mass[d];
        }
        if (chosen < 0) chosen = 255; /* unreachable: the top bucket has acc = above < P */
        sm.above = chosen_acc;
        sm.prefix = prefix | ((uint32_t)chosen << shift);
        if (shift == 0) { /* the boundary value's tie group: its top ids survive */
          const unsigned long long c = sm.cnt[chosen], e = sm.mass[chosen] / c;
          unsigned long long keep = c;
          if (e > 0) {
            keep = 0;
            while (keep < c && (double)(chosen_acc + keep * e) < P) ++keep;
          }
          sm.rem = (int)keep;
          sm.found = (int)(c - keep); /* ids of the group to drop (the lowest ones) */
        }
      }
      __syncthreads();
      prefix = sm.prefix;
      mask |= 255u << shift;
    }
    kmin = prefix;
    const int keep = sm.rem, dropn = sm.found;
    __syncthreads();
    if (dropn > 0) {
      const uint32_t kb = kmin;
      id_min = (int)radix_kth(V, keep, 24, [&](int i) { return zkey(i) == kb; }, [](int i) { return (uint32_t)i; },
                              sm);
    }
  }
  /* (E) inverse CDF in id order over contiguous per-thread ranges; survivors of weight 0 (-inf,
   * or exp underflowing double) are never drawn, as on the CPU: not even as a range's last one */
  const int chunk = (V + NT - 1) / NT, i0 = min(V, tid * chunk), i1 = min(V, i0 + chunk);
  double loc = 0.0;
  int last_here = -1;
  for (int i = i0; i < i1; ++i) {
    const float z = l[i] / T;
    const uint32_t key = fkey(z);
    if (key > kmin || (key == kmin && i >= id_min)) {
      const double e = exp((double)z - (double)m);
      if (e > 0.0) loc += e, last_here = i;
    }
  }
  sm.scan[tid] = loc;
  __syncthreads();
  if (tid == 0) { /* fixed-order exclusive scan of the ranges' sums */
    double run = 0.0;
    for (int t = 0; t < NT; ++t) {
      const double x = sm.scan[t];
      sm.scan[t] = run;
      run += x;
    }
    sm.rd[0] = run;
    sm.found = 0x7fffffff;
  }
  __syncthreads();
  const double total = sm.rd[0], target = prm.u * total, start = sm.scan[tid];
  int tok = -1;
  if (last_here >= 0 && start + loc > target) { /* this range holds the crossing (or one past it) */
    double cum = start;
    for (int i = i0; i < i1 && tok < 0; ++i) {
      const float z = l[i] / T;
      const uint32_t key = fkey(z);
      if (key > kmin || (key == kmin && i >= id_min)) {
        const double e = exp((double)z - (double)m);
        cum += e;
        if (e > 0.0 && cum > target) tok = i;
      }
    }
    if (tok < 0) tok = last_here; /* the walk's sums rounded below start + loc: its last one */
    atomicMin(&sm.found, tok);
  }
  int last = last_here;
  for (int o = 16; o > 0; o >>= 1) last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
  if ((tid & 31) == 0) sm.ri[tid >> 5] = last;
  __syncthreads();
  if (tid == 0) {
    int t = sm.found;
    if (t == 0x7fffffff) { /* u * total rounded up to the total: the last survivor */
      t = -1;
      for (int w = 0; w < NWARPS; ++w) t = max(t, sm.ri[w]);
    }
    tokens[b] = t;
    logprobs[b] = (float)((double)(l[t] / T) - (double)m - logS);
  }
}

} /* namespace */

/* -------------------------------------------------------------- launchers */

extern "C" void vr_cuda_roll_sample(int32_t *tokens, float *logprobs, const float *logits,
                                    const vr_cuda_roll_sample_row_t *rows, int n, int V, cudaStream_t s) {
  vr_cuda_roll_sample_ws(tokens, logprobs, logits, rows, n, V, NULL, s);
}

extern "C" size_t vr_cuda_roll_sample_ws_bytes(int n, int V) {
  return n > 0 && V > 0 ? (size_t)n * (size_t)((V + PCH - 1) / PCH) * sizeof(roll_part_t) : 0;
}

extern "C" void vr_cuda_roll_sample_ws(int32_t *tokens, float *logprobs, const float *logits,
                                       const vr_cuda_roll_sample_row_t *rows, int n, int V, void *ws, cudaStream_t s) {
  if (n <= 0) return;
  VR_ASSERT(V > 0);
  roll_part_t *parts = reinterpret_cast<roll_part_t *>(ws);
  const int np = (V + PCH - 1) / PCH;
  if (parts) {
    k_roll_greedy_part<<<dim3((unsigned)np, (unsigned)n), PNT, 0, s>>>(logits, rows, V, parts);
    VR_CUDA_CHECK_LAUNCH();
  }
  k_roll_sample<<<(unsigned)n, NT, 0, s>>>(tokens, logprobs, logits, rows, V, parts, np);
  VR_CUDA_CHECK_LAUNCH();
}

namespace {
__global__ void k_roll_feed(int32_t *ids, const int32_t *feed, const int32_t *prev, int n, int V) {
  const int q = (int)(blockIdx.x * blockDim.x + threadIdx.x);
  if (q >= n || feed[q] < 0) return;
  const int32_t t = prev[feed[q]];
  ids[q] = t < 0 || t >= V ? 0 : t;
}
} /* namespace */

extern "C" void vr_cuda_roll_feed_ids(int32_t *ids, const int32_t *feed, const int32_t *prev, int n, int V,
                                      cudaStream_t s) {
  if (n <= 0) return;
  k_roll_feed<<<(unsigned)((n + 127) / 128), 128, 0, s>>>(ids, feed, prev, n, V);
  VR_CUDA_CHECK_LAUNCH();
}

namespace {
/* Words [0, 4 B) of the concatenated ranges: rows 0..B of the four per-row arrays at seg[0..4) of dst
 * (the first one the ids, fed as k_roll_feed does), read from sseg[0..4) of src; then span words
 * from span0 of dst, read from sspan0 of src (the feed words lie in the span: row r's at feed + r of
 * dst, so at sspan0 + feed - span0 + r of src). src: the pinned host block through its device
 * mapping or its packed device copy, read uncached either way (the host rewrote the block since the
 * last launch; a copy engine wrote the device copy). */
__global__ void k_roll_stage(int32_t *dst, const int32_t *src, int4 seg, int4 sseg, long long span0, long long sspan0,
                             int span, long long feed, const int32_t *prev, int B, int V) {
  const int total = 4 * B + span;
  for (int i = (int)(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += (int)(gridDim.x * blockDim.x)) {
    if (i < 4 * B) {
      const int g = i / B, r = i - g * B;
      const long long off = (g == 0 ? seg.x : g == 1 ? seg.y : g == 2 ? seg.z : seg.w) + r;
      int32_t v = __ldcv(src + (g == 0 ? sseg.x : g == 1 ? sseg.y : g == 2 ? sseg.z : sseg.w) + r);
      if (g == 0) {
        const int32_t f = __ldcv(src + sspan0 + (feed - span0) + r);
        if (f >= 0) {
          const int32_t t = prev[f];
          v = t < 0 || t >= V ? 0 : t;
        }
      }
      dst[off] = v;
    } else {
      dst[span0 + (i - 4 * B)] = __ldcv(src + sspan0 + (i - 4 * B));
    }
  }
}

__global__ void k_roll_copy_out(int32_t *dst, const int32_t *src, int n) {
  for (int i = (int)(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += (int)(gridDim.x * blockDim.x)) dst[i] = src[i];
}
} /* namespace */

extern "C" void vr_cuda_roll_stage_decode(int32_t *meta_d, const size_t seg[4], size_t span0, size_t span, size_t feed,
                                          const int32_t *src, const size_t sseg[4], size_t sspan0, const int32_t *prev,
                                          int B, int V, cudaStream_t s) {
  if (B <= 0) return;
  VR_ASSERT(feed >= span0 && feed + (size_t)B <= span0 + span);
  const int total = 4 * B + (int)span, nt = 256;
  int nb = (total + nt - 1) / nt;
  if (nb > 256) nb = 256;
  k_roll_stage<<<(unsigned)nb, nt, 0, s>>>(meta_d, src, make_int4((int)seg[0], (int)seg[1], (int)seg[2], (int)seg[3]),
                                           make_int4((int)sseg[0], (int)sseg[1], (int)sseg[2], (int)sseg[3]),
                                           (long long)span0, (long long)sspan0, (int)span, (long long)feed, prev, B, V);
  VR_CUDA_CHECK_LAUNCH();
}

extern "C" void vr_cuda_roll_copy_out(int32_t *dst, const int32_t *src, int n, cudaStream_t s) {
  if (n <= 0) return;
  k_roll_copy_out<<<(unsigned)((n + 255) / 256 < 8 ? (n + 255) / 256 : 8), 256, 0, s>>>(dst, src, n);
  VR_CUDA_CHECK_LAUNCH();
}
