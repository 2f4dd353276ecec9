/* vr_test_seed.h: the seed of a test's pseudo-random inputs (header-only).
 * A test draws from its fixed seed by default, so every run on every machine sees the
 * same inputs; VR_TEST_SEED=N (decimal, or 0x hex) replaces it, to explore other inputs
 * or to replay a run. The seed in use is printed either way, so a failure's output names
 * the seed that reproduces it. */
#ifndef VR_TEST_SEED_H
#define VR_TEST_SEED_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Returns VR_TEST_SEED when set, else fixed; prints "<what>: seed N ..." to stdout. */
static inline uint64_t vr_test_seed(const char *what, uint64_t fixed) {
  const char *e = getenv("VR_TEST_SEED");
  const int from_env = e && *e;
  const int hex = from_env && e[0] == '0' && (e[1] == 'x' || e[1] == 'X');
  const uint64_t seed = from_env ? strtoull(e, NULL, hex ? 16 : 10) : fixed;
  printf("%s: seed %llu (%s; VR_TEST_SEED=%llu replays this run)\n", what, (unsigned long long)seed,
         from_env ? "from VR_TEST_SEED" : "fixed", (unsigned long long)seed);
  fflush(stdout);
  return seed;
}

/* A uniform-enough draw in [0, n) from *state (splitmix64), for test inputs. */
static inline uint32_t vr_test_rand(uint64_t *state, uint32_t n) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (uint32_t)((z ^ (z >> 31)) % n);
}

#endif
