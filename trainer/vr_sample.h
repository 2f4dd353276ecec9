/* vr_sample.h: the rollout's sampling rule and its counter-based RNG (the reference every backend's
 * sample() follows).
 *
 * One row of logits l (V floats) and parameters (T = temperature, k = top_k, p = top_p):
 *   T == 0 (greedy): the token is argmax l (the lowest id among equal maxima, as torch.argmax);
 *       its log-prob is log_softmax(l)[token] (temperature 1).
 *   T > 0: z = l / T (float division, as vLLM's logits.div_(temperature)); then, as vLLM's
 *       apply_top_k_top_p: top-k keeps every z >= the k-th largest z (ties at the threshold kept);
 *       top-p sorts the kept z ascending (equal values by id), takes q = softmax over them,
 *       drops the ascending prefix whose cumulative sum is <= 1 - p (the largest one always
 *       stays). The cut is computed on integers, so that every backend makes it at the same
 *       place, ties exactly on the boundary included (18 equal survivors and p = 0.5: exactly 9
 *       dropped; a running double sum of 1/18 is 0.5000000000000001 after 9 terms and dropped
 *       only 8): each kept token's mass is floor(2^32 * exp(z - max z)) as a 64-bit integer
 *       (sums exact in any order), M = the sum over the kept, and a token is dropped iff the
 *       mass after it in that ascending order, A, has (double)A >= (double)p * (double)M (the
 *       rule cumsum <= 1 - p, with masses under 2^-32 of the largest counted as 0). The token is
 *       drawn from softmax over the survivors: u = vr_sample_uniform(key, stream, position) in
 *       [0, 1); walking the survivors in ascending id order, the first token whose cumulative
 *       probability exceeds u (sums in double; a token of weight 0, a -inf z, is never drawn).
 *       Its log-prob is log_softmax(z)[token] over the WHOLE vocabulary: the temperature-scaled distribution before
 *       top-k/top-p truncation. This is what verl's actor recomputes as old_log_prob (logits /
 *       temperature, log_softmax, gather), so the PPO ratio starts at 1; vLLM's default
 *       logprobs_mode "raw_logprobs" would ignore the temperature instead.
 *   Log-probs: max + log(sum exp(z - max)) in double over the row, returned as float.
 *
 * RNG: Philox4x32-10 (Salmon et al. 2011, the generator of curand and of torch's CUDA RNG) with
 * key = the prompt's 64-bit key and counter = (position, stream), stream = the response index j
 * within its prompt: the draw for a token depends only on (key, j, position), never on what else
 * is batched, on preemption or on the backend. vr_sample_prompt_key(seed, p) derives prompt p's
 * key from a run seed (splitmix64), so a run is reproducible from one --seed.
 *
 * Threading: pure functions; scratch is the caller's. */
#ifndef VR_SAMPLE_H
#define VR_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vr_sample_params {
  float temperature; /* 0: greedy; else > 0 */
  int32_t top_k;     /* <= 0 or >= V: off (vLLM -1) */
  float top_p;       /* (0, 1]; 1: off */
} vr_sample_params_t;

/* One row to sample (the backend table's sample()). */
typedef struct vr_sample_req {
  uint32_t row;       /* logits row of the last forward */
  vr_sample_params_t p;
  uint64_t key;       /* the prompt's RNG key */
  uint32_t stream;    /* response index within the prompt */
  uint32_t position;  /* position of the token being sampled (= tokens before it) */
} vr_sample_req_t;

/* Philox4x32-10 of counter ctr[4] under key[2] into out[4]. */
void vr_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* Uniform double in [0, 1) with 53 random bits: counter (position, 0, stream, 0), key (key lo, hi);
 * out[0]:out[1] >> 11, times 2^-53. */
double vr_sample_uniform(uint64_t key, uint32_t stream, uint32_t position);
/* splitmix64(seed + golden * (p + 1)): prompt p's key for a run seeded with seed. */
uint64_t vr_sample_prompt_key(uint64_t seed, uint64_t p);

/* 0 when the parameters are valid (temperature >= 0 and finite, top_p in (0, 1]); else
 * VR_ERR_INVAL with err (may be NULL) naming the field. */
int vr_sample_check(const vr_sample_params_t *p, char *err, size_t errlen);

/* Floats of scratch vr_sample_row needs for a vocabulary of V (z, and the sort's index). */
#define VR_SAMPLE_SCRATCH_BYTES(V) ((size_t)(V) * (sizeof(float) + sizeof(int32_t) + sizeof(double)))

/* Samples one token from logits (V) by the rule above; writes *token and *logprob. scratch holds
 * VR_SAMPLE_SCRATCH_BYTES(V) bytes, 8-byte aligned (malloc'd). Non-finite logits: NaN sorts nowhere
 * sensible, so a row holding NaN returns VR_ERR_NONFINITE (token 0, logprob NaN); +-Inf are
 * treated as numbers. Returns 0. */
int vr_sample_row(const float *logits, int32_t V, const vr_sample_params_t *p, uint64_t key, uint32_t stream,
                  uint32_t position, void *scratch, int32_t *token, float *logprob);

/* The probabilities vr_sample_row draws from (V doubles into probs; 0 for dropped tokens): the
 * formula itself, for tests and for backends that check themselves. Greedy: one-hot. Same scratch. */
void vr_sample_probs(const float *logits, int32_t V, const vr_sample_params_t *p, void *scratch, double *probs);

/* log_softmax(logits / T)[token] in double (T = 1 when temperature is 0). */
double vr_sample_logprob(const float *logits, int32_t V, float temperature, int32_t token);

#ifdef __cplusplus
}
#endif
#endif /* VR_SAMPLE_H */
