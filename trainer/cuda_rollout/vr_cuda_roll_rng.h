/* vr_cuda_roll_rng.h: the rollout sampler's definition, shared by the CUDA kernels
 * (vr_cuda_roll_sample.cu) and any host implementation that must pick the same tokens
 * (the test's reference; the CPU engine may include it). Plain C11 and CUDA: every function is
 * an inline usable on the host and on the device. No state: the random numbers are a pure
 * function of (seed, request, position, token), so a response does not depend on which other
 * requests share its batch, on the batch size or on the device.
 *
 * The sampler, for one row of logits l (V) with temperature T, top_k k, top_p p:
 *   greedy (T <= 0): the token of the largest logit (lowest index among equal ones);
 *     its log-prob is l_tok - logsumexp(l) (temperature 1).
 *   otherwise, with z_i = l_i / T:
 *   1. top-k (0 < k < V): keep the tokens whose logit is >= the k-th largest logit (ties kept,
 *      as vLLM's comparison with the k-th sorted value does).
 *   2. top-p (0 < p < 1): among those, with f_i = fixed(exp((l_i - max l) / T)) (2^32 scale,
 *      truncated: vr_roll_fixed), keep token i iff the sum of f_j over kept tokens with a
 *      strictly larger logit is < p * sum(f_j over kept tokens) (compared in double; exact, the
 *      sums are integers below 2^53). That is vLLM's rule (sort ascending, drop while the
 *      cumulative probability is <= 1 - p, keep the last) with ties at the boundary kept, in
 *      integer arithmetic so that the kept set does not depend on summation order.
 *   3. the token is argmax over kept i of z_i + g_i, g_i = -log(-log(u_i)) (Gumbel-max: the
 *      same distribution as sampling softmax(z) restricted to the kept set), u_i =
 *      vr_roll_uniform(vr_roll_key(seed, request, position), i); ties -> lowest index.
 *   log-prob of the token: z_tok - logsumexp(z) over the whole vocabulary (the training
 *      engine's log_softmax(logits / T), so the PPO ratio starts at 1).
 * Host and device agree exactly on steps 1 and 2 given the same logits (integer keys and
 * sums; exp is only compared after truncation to 2^-32, so they can differ only where an
 * expf result straddles a 2^-32 step) and on step 3 except where two candidates' z + g are
 * within an ulp of logf of each other. */
#ifndef VR_CUDA_ROLL_RNG_H
#define VR_CUDA_ROLL_RNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define VR_ROLL_HD static __host__ __device__ __forceinline__
#else
#define VR_ROLL_HD static inline
#endif

/* splitmix64's finaliser (Steele, Lea, Flood 2014). */
VR_ROLL_HD uint64_t vr_roll_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The key of one sampling event: request = the response's id (prompt index * n + sample
 * index, as the engine numbers them), position = index of the token within the response. */
VR_ROLL_HD uint64_t vr_roll_key(uint64_t seed, uint64_t request, uint64_t position) {
  return vr_roll_mix64(seed ^ vr_roll_mix64(request * 0x9e3779b97f4a7c15ull ^ vr_roll_mix64(position + 1)));
}

/* u in (0, 1): the top 24 bits of mix64(key + golden * (token + 1)), plus one half. */
VR_ROLL_HD float vr_roll_uniform(uint64_t key, uint32_t token) {
  const uint64_t h = vr_roll_mix64(key + 0x9e3779b97f4a7c15ull * ((uint64_t)token + 1));
  return ((float)(uint32_t)(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

/* The order-preserving map of a float onto uint32 (larger float <-> larger key). */
VR_ROLL_HD uint32_t vr_roll_fkey(float f) {
  uint32_t u;
#ifdef __CUDA_ARCH__
  u = __float_as_uint(f);
#else
  __builtin_memcpy(&u, &f, 4);
#endif
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* e in [0, 1] -> 2^32 fixed point, truncated. */
VR_ROLL_HD uint64_t vr_roll_fixed(float e) { return (uint64_t)((double)e * 4294967296.0); }

/* Per-row sampling parameters, as the device reads them (one per batch row). */
typedef struct vr_roll_sample_param {
  float temperature; /* <= 0: greedy */
  float top_p;       /* (0, 1]; >= 1: off */
  int32_t top_k;     /* <= 0 or >= V: off */
  int32_t _pad;
  uint64_t seed, request, position;
} vr_roll_sample_param_t;

#endif /* VR_CUDA_ROLL_RNG_H */
