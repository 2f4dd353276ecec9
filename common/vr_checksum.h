/* vr_checksum.h: the checksum "model" for transport tests and benchmarks.
 *
 * A deterministic, order-sensitive function of a sequence's token ids (and its
 * length), so a client can verify every score against the request it sent.
 * The value is k / 2^24 with k an integer in [0, 2^24): exactly representable
 * as a float, so scores compare with ==, across processes and languages
 * (Python: see docs/protocol.md for the same function). Header-only,
 * thread-safe, no allocation. Used by the server (--model checksum), the
 * tests, verl-reward-bench and verl-shm-bench; it belongs to no transport. */
#ifndef VR_CHECKSUM_H
#define VR_CHECKSUM_H

#include <stdint.h>

/* splitmix64 finaliser */
static inline uint64_t vr_checksum_mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/* 64-bit hash of (n, ids[0..n)): h = mix(h * P + (uint32)id + 1) per token. */
static inline uint64_t vr_checksum_u64(const int32_t *ids, uint32_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
  for (uint32_t i = 0; i < n; i++) h = (h ^ ((uint64_t)(uint32_t)ids[i] + 1u)) * 0x100000001b3ull;
  return vr_checksum_mix64(h);
}

/* Score in [0, 1): the top 24 bits of the hash over 2^24. */
static inline float vr_checksum_score(const int32_t *ids, uint32_t n) {
  return (float)(uint32_t)(vr_checksum_u64(ids, n) >> 40) * (1.0f / 16777216.0f);
}

#endif /* VR_CHECKSUM_H */
