/* vr_cuda_roll_sample.cu: greedy / temperature / top-k / top-p sampling and the sampled
 * token's log-prob, one block per row of logits. The definition (and the RNG) is
 * vr_cuda_roll_rng.h's; the launcher's contract is in vr_cuda_roll_ops.h.
 *
 * Per row: (A) max and argmax, (B) Z = sum exp((l - max) / T) for the log-prob; greedy rows stop
 * there. Sampled rows: (C) top-k threshold by a radix select on the order-preserving keys
 * (4 passes of 8 bits, integer histograms), (D) top-p threshold by the same descent on
 * histograms of 2^32-fixed-point probability mass, (E) the Gumbel-max argmax over the kept
 * tokens. Integer atomics and fixed-shape reductions only, so a row's result is the same in any
 * batch and on every run. */
#include <math.h>

#include "vr_cuda_common.cuh"
#include "vr_cuda_roll_ops.h"

#define NT VR_ROLL_SAMPLE_THREADS

namespace {

/* (value, index) argmax over the block: larger value wins, lower index among equal ones. */
__device__ void block_argmax(float &v, int &ix, float *rv, int *ri) {
  for (int o = 16; o > 0; o >>= 1) {
    const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
    const int i2 = __shfl_xor_sync(0xffffffffu, ix, o);
    if (v2 > v || (v2 == v && i2 < ix)) {
      v = v2;
      ix = i2;
    }
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) {
    rv[warp] = v;
    ri[warp] = ix;
  }
  __syncthreads();
  v = rv[lane];
  ix = ri[lane];
  for (int o = 16; o > 0; o >>= 1) {
    const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
    const int i2 = __shfl_xor_sync(0xffffffffu, ix, o);
    if (v2 > v || (v2 == v && i2 < ix)) {
      v = v2;
      ix = i2;
    }
  }
}

__device__ unsigned long long block_sum_u64(unsigned long long v, unsigned long long *red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  unsigned long long t = red[lane];
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

__global__ void __launch_bounds__(NT) k_roll_sample(int32_t *tokens, float *logprobs, const float *logits,
                                                     const vr_roll_sample_param_t *params, int V) {
  __shared__ float rv[32];
  __shared__ int ri[32];
  __shared__ unsigned long long ru[32];
  __shared__ uint32_t cnt[256];
  __shared__ unsigned long long mass[256];
  __shared__ uint32_t s_prefix;
  __shared__ unsigned long long s_above;
  __shared__ int s_rem;
  const int b = blockIdx.x, tid = threadIdx.x;
  const float *l = logits + (size_t)b * V;
  const vr_roll_sample_param_t prm = params[b];
  const int greedy = !(prm.temperature > 0.f);
  const float T = greedy ? 1.f : prm.temperature;

  /* (A) max, argmax */
  float m = -INFINITY;
  int am = 0x7fffffff;
  for (int i = tid; i < V; i += NT) {
    const float v = l[i];
    if (v > m) {
      m = v;
      am = i;
    }
  }
  block_argmax(m, am, rv, ri);
  /* (B) log Z at temperature T */
  float z = 0.f;
  for (int i = tid; i < V; i += NT) z += expf((l[i] - m) / T);
  const float logZ = logf(block_sum(z, rv));
  if (greedy) {
    if (tid == 0) {
      tokens[b] = am;
      logprobs[b] = (l[am] - m) - logZ;
    }
    return;
  }
  uint32_t thr = 0; /* keep keys >= thr */
  /* (C) top-k: the key of the k-th largest logit */
  if (prm.top_k > 0 && prm.top_k < V) {
    uint32_t prefix = 0, mask = 0;
    if (tid == 0) s_rem = prm.top_k;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += NT) cnt[i] = 0;
      __syncthreads();
      for (int i = tid; i < V; i += NT) {
        const uint32_t key = vr_roll_fkey(l[i]);
        if ((key & mask) == prefix) atomicAdd(&cnt[(key >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (tid == 0) {
        int rem = s_rem;
        uint32_t d = 255;
        for (;; --d) {
          if ((int)cnt[d] >= rem || d == 0) break;
          rem -= (int)cnt[d];
        }
        s_rem = rem;
        s_prefix = prefix | (d << shift);
      }
      __syncthreads();
      prefix = s_prefix;
      mask |= 255u << shift;
    }
    thr = prefix;
  }
  /* (D) top-p over the top-k survivors, in 2^32 fixed point */
  if (prm.top_p > 0.f && prm.top_p < 1.f) {
    unsigned long long zf = 0;
    for (int i = tid; i < V; i += NT)
      if (vr_roll_fkey(l[i]) >= thr) zf += vr_roll_fixed(expf((l[i] - m) / T));
    zf = block_sum_u64(zf, ru);
    const double P = (double)prm.top_p * (double)zf;
    uint32_t prefix = 0, mask = 0;
    if (tid == 0) s_above = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += NT) {
        cnt[i] = 0;
        mass[i] = 0;
      }
      __syncthreads();
      for (int i = tid; i < V; i += NT) {
        const uint32_t key = vr_roll_fkey(l[i]);
        if (key >= thr && (key & mask) == prefix) {
          const uint32_t d = (key >> shift) & 255u;
          atomicAdd(&cnt[d], 1u);
          atomicAdd(&mass[d], vr_roll_fixed(expf((l[i] - m) / T)));
        }
      }
      __syncthreads();
      if (tid == 0) {
        unsigned long long acc = s_above, chosen_acc = s_above;
        int chosen = -1;
        for (int d = 255; d >= 0; --d) {
          if (cnt[d] == 0) continue;
          if ((double)acc < P) {
            chosen = d;
            chosen_acc = acc;
          } else {
            break;
          }
          acc += mass[d];
        }
        if (chosen < 0) chosen = 0; /* unreachable: the top bucket has acc = above < P */
        s_above = chosen_acc;
        s_prefix = prefix | ((uint32_t)chosen << shift);
      }
      __syncthreads();
      prefix = s_prefix;
      mask |= 255u << shift;
    }
    if (prefix > thr) thr = prefix;
  }
  /* (E) Gumbel-max over the kept tokens */
  const uint64_t key = vr_roll_key(prm.seed, prm.request, prm.position);
  float best = -INFINITY;
  int bi = 0x7fffffff;
  for (int i = tid; i < V; i += NT) {
    const float v = l[i];
    if (vr_roll_fkey(v) >= thr) {
      const float g = -logf(-logf(vr_roll_uniform(key, (uint32_t)i)));
      const float s = v / T + g;
      if (s > best) {
        best = s;
        bi = i;
      }
    }
  }
  block_argmax(best, bi, rv, ri);
  if (tid == 0) {
    tokens[b] = bi;
    logprobs[b] = (l[bi] - m) / T - logZ;
  }
}

} /* namespace */

/* -------------------------------------------------------------- launchers */

extern "C" void vr_cuda_roll_sample(int32_t *tokens, float *logprobs, const float *logits,
                                    const vr_roll_sample_param_t *params, int B, int V, cudaStream_t s) {
  if (B <= 0) return;
  VR_ASSERT(V > 0);
  k_roll_sample<<<(unsigned)B, NT, 0, s>>>(tokens, logprobs, logits, params, V);
  VR_CUDA_CHECK_LAUNCH();
}
