/* test_shm_validate: vr_shm_accept() (descriptor validation) against a plain
 * reference written from the protocol text, on hand-made cases and on
 * 200,000 random descriptors biased towards the edges (offsets near the arena
 * end, counts near the limits and near 2^32); then the libFuzzer harness's
 * own invariants on random bytes (the harness runs under clang's libFuzzer as
 * test_shm_fuzz_desc when clang is available). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "shm_test_util.h"
#include "vr_shm_validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ARENA 4096u

/* Reference: the verdict by the rules of docs/protocol.md, in 128-bit math. */
static vr_desc_verdict_t reference(const vr_shm_req_desc_t *d, const uint8_t *arena, const vr_shm_vlimits_t *lim,
                                   int32_t *status) {
  if (d->n_seqs == 0) return *status = VR_ERR_MALFORMED, VR_DESC_REJECT;
  if (d->n_seqs > lim->max_seqs_per_request) return *status = VR_ERR_TOO_LARGE, VR_DESC_REJECT;
  if (d->flags) return *status = VR_ERR_MALFORMED, VR_DESC_REJECT;
  unsigned __int128 plen = (unsigned __int128)4 * d->n_tokens + (unsigned __int128)4 * (d->n_seqs + 1ull);
  if (d->extras_bytes) plen += (unsigned __int128)4 * (d->n_seqs + 1ull) + d->extras_bytes;
  unsigned __int128 rlen = (unsigned __int128)36 * d->n_seqs;
  if (d->payload_off % 4 || d->result_off % 4) return VR_DESC_CORRUPT;
  if ((unsigned __int128)d->payload_off + plen > lim->arena_bytes) return VR_DESC_CORRUPT;
  if ((unsigned __int128)d->result_off + rlen > lim->arena_bytes) return VR_DESC_CORRUPT;
  if (d->payload_off < d->result_off + rlen && d->result_off < d->payload_off + plen) return VR_DESC_CORRUPT;
  const uint32_t *cu = (const uint32_t *)(arena + d->payload_off + 4ull * d->n_tokens);
  const int32_t *tok = (const int32_t *)(arena + d->payload_off);
  const uint32_t *xo = d->extras_bytes ? cu + d->n_seqs + 1 : NULL;
  if (cu[0] != 0 || cu[d->n_seqs] != d->n_tokens) return *status = VR_ERR_MALFORMED, VR_DESC_REJECT;
  for (uint32_t i = 0; i < d->n_seqs; i++) {
    if (cu[i + 1] < cu[i] || cu[i + 1] > d->n_tokens) return *status = VR_ERR_MALFORMED, VR_DESC_REJECT;
    if (cu[i + 1] == cu[i]) return *status = VR_ERR_EMPTY_SEQ, VR_DESC_REJECT;
    if (cu[i + 1] - cu[i] > lim->max_seq_len) return *status = VR_ERR_SEQ_TOO_LONG, VR_DESC_REJECT;
    if (xo && ((i == 0 && xo[0] != 0) || xo[i + 1] < xo[i] || xo[i + 1] > d->extras_bytes ||
               (i + 1 == d->n_seqs && xo[i + 1] != d->extras_bytes)))
      return *status = VR_ERR_MALFORMED, VR_DESC_REJECT;
  }
  for (uint32_t t = 0; lim->vocab_size && t < d->n_tokens; t++)
    if (tok[t] < 0 || (uint32_t)tok[t] >= lim->vocab_size) return *status = VR_ERR_TOKEN_RANGE, VR_DESC_REJECT;
  return VR_DESC_OK;
}

static uint32_t edge32(uint64_t *rng, uint32_t around) {
  switch (tu_rand(rng) % 6) {
    case 0: return around;
    case 1: return around + 1;
    case 2: return around ? around - 1 : 0;
    case 3: return 0xffffffffu - (uint32_t)(tu_rand(rng) % 4);
    case 4: return (uint32_t)(tu_rand(rng) % 16);
    default: return (uint32_t)tu_rand(rng) % (2 * around + 2);
  }
}

static void test_against_reference(void **state) {
  (void)state;
  vr_shm_vlimits_t lim = {.max_seqs_per_request = 8, .max_seq_len = 64, .vocab_size = 0, .arena_bytes = ARENA};
  uint32_t *arena32 = malloc(ARENA);
  uint8_t *arena = (uint8_t *)arena32;
  uint64_t rng = 7;
  int counts[3] = {0};
  for (int it = 0; it < 200000; it++) {
    lim.vocab_size = it % 3 ? 0 : 1000;
    vr_shm_req_desc_t d;
    memset(&d, 0, sizeof d);
    d.n_seqs = edge32(&rng, 1 + (uint32_t)(tu_rand(&rng) % 8));
    d.n_tokens = edge32(&rng, (uint32_t)(tu_rand(&rng) % 200));
    d.extras_bytes = tu_rand(&rng) % 3 ? 0 : edge32(&rng, 40);
    d.flags = tu_rand(&rng) % 50 ? 0 : 1;
    d.payload_off = tu_rand(&rng) % 4 ? 4 * (tu_rand(&rng) % 64) : (tu_rand(&rng) % 2 ? ARENA - 4 : tu_rand(&rng));
    d.result_off = tu_rand(&rng) % 4 ? 3072 + 4 * (tu_rand(&rng) % 8) : tu_rand(&rng) % (ARENA + 8);
    /* a plausible payload most of the time, noise otherwise */
    for (uint32_t k = 0; k < ARENA / 4; k++) arena32[k] = (uint32_t)(tu_rand(&rng) % 1100);
    if (tu_rand(&rng) % 4 && d.n_seqs <= 8 && d.n_tokens < 200 && d.payload_off % 4 == 0 && d.payload_off < 2048) {
      uint32_t *cu = (uint32_t *)(arena + d.payload_off + 4ull * d.n_tokens);
      cu[0] = 0;
      for (uint32_t i = 1; i <= d.n_seqs; i++)
        cu[i] = i == d.n_seqs ? d.n_tokens : cu[i - 1] + (uint32_t)(tu_rand(&rng) % (d.n_tokens / d.n_seqs + 2));
      if (d.extras_bytes && d.extras_bytes < 64) {
        uint32_t *xo = cu + d.n_seqs + 1;
        for (uint32_t i = 0; i <= d.n_seqs; i++) xo[i] = i == d.n_seqs ? d.extras_bytes : d.extras_bytes * i / d.n_seqs;
      }
    }
    int32_t want_status = 0;
    vr_desc_verdict_t want = reference(&d, arena, &lim, &want_status);
    vr_shm_accepted_t acc;
    char why[256];
    vr_desc_verdict_t got = vr_shm_accept(&d, arena, &lim, 0, &acc, why, sizeof why);
    if (got != want || (got == VR_DESC_REJECT && acc.status != want_status)) {
      fprintf(stderr, "iteration %d: n_seqs %u n_tokens %u extras %u off %llu res %llu: got %d/%d want %d/%d (%s)\n",
              it, d.n_seqs, d.n_tokens, d.extras_bytes, (unsigned long long)d.payload_off,
              (unsigned long long)d.result_off, got, acc.status, want, want_status, why);
      fail();
    }
    if (got == VR_DESC_OK) {
      assert_memory_equal(acc.token_ids, arena + d.payload_off, 4ull * d.n_tokens);
      free(acc.buf);
    }
    counts[got]++;
  }
  printf("verdicts: %d accepted, %d rejected, %d corrupt\n", counts[0], counts[1], counts[2]);
  assert_true(counts[0] > 1000 && counts[1] > 1000 && counts[2] > 1000);
  free(arena32);
}

static void test_fuzz_harness_random(void **state) {
  (void)state;
  uint64_t rng = 11;
  uint8_t buf[16 + 64 + 2048];
  for (int it = 0; it < 50000; it++) {
    size_t n = 16 + 64 + (size_t)(tu_rand(&rng) % 2048);
    for (size_t k = 0; k < n; k += 8) {
      uint64_t x = tu_rand(&rng);
      if (tu_rand(&rng) % 2) x %= 64; /* small numbers are interesting counts */
      memcpy(buf + k, &x, k + 8 <= n ? 8 : n - k);
    }
    assert_int_equal(LLVMFuzzerTestOneInput(buf, n), 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_against_reference),
                                     cmocka_unit_test(test_fuzz_harness_random)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
