/* fuzz_shm_desc: libFuzzer harness for vr_shm_accept(), the validation of a
 * request descriptor and its payload read from a client's lane.
 * Input: 16 bytes of limits, 64 bytes of descriptor, the rest is the arena
 * (allocated at exactly its size, so ASan catches any read past it). Checks
 * the verdict's promises: an accepted request's copy is consistent with the
 * limits; a rejected or corrupt one owns no memory.
 * Built with clang -fsanitize=fuzzer (tests/shm/CMakeLists.txt); also linked
 * into test_shm_validate, which feeds it random inputs under gcc. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_shm_validate.h"

#define CHECK(c) do { if (!(c)) abort(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 16 + sizeof(vr_shm_req_desc_t)) return 0;
  vr_shm_vlimits_t lim;
  uint32_t l[4];
  memcpy(l, data, 16);
  lim.max_seqs_per_request = 1 + l[0] % 2048;
  lim.max_seq_len = 1 + l[1] % 16384;
  lim.vocab_size = l[2] % 4 == 0 ? 0 : l[2] % 200000;
  size_t arena_len = size - 16 - sizeof(vr_shm_req_desc_t);
  lim.arena_bytes = arena_len & ~(uint64_t)3; /* a multiple of 4, as in a real lane (64) */
  vr_shm_req_desc_t *slot = malloc(sizeof *slot);
  memcpy(slot, data + 16, sizeof *slot);
  uint8_t *arena = malloc(arena_len ? arena_len : 1);
  memcpy(arena, data + 16 + sizeof *slot, arena_len);
  vr_shm_accepted_t acc;
  char why[256];
  vr_desc_verdict_t v = vr_shm_accept(slot, arena, &lim, 24, &acc, why, sizeof why);
  CHECK(memcmp(&acc.desc, slot, sizeof *slot) == 0);
  const vr_shm_req_desc_t *d = &acc.desc;
  if (v == VR_DESC_OK) {
    CHECK(acc.buf != NULL);
    CHECK(d->n_seqs >= 1 && d->n_seqs <= lim.max_seqs_per_request);
    CHECK(d->payload_off + vr_shm_payload_bytes(d->n_seqs, d->n_tokens, d->extras_bytes) <= lim.arena_bytes);
    CHECK(d->result_off + vr_shm_result_bytes(d->n_seqs) <= lim.arena_bytes);
    CHECK(acc.cu_seqlens[0] == 0 && acc.cu_seqlens[d->n_seqs] == d->n_tokens);
    for (uint32_t i = 0; i < d->n_seqs; i++) {
      uint32_t len = acc.cu_seqlens[i + 1] - acc.cu_seqlens[i];
      CHECK(acc.cu_seqlens[i + 1] > acc.cu_seqlens[i] && len <= lim.max_seq_len);
      if (acc.extras_off) CHECK(acc.extras_off[i] <= acc.extras_off[i + 1] && acc.extras_off[i + 1] <= d->extras_bytes);
    }
    for (uint32_t t = 0; lim.vocab_size && t < d->n_tokens; t++)
      CHECK(acc.token_ids[t] >= 0 && (uint32_t)acc.token_ids[t] < lim.vocab_size);
    /* the copy is what the arena held */
    CHECK(memcmp(acc.token_ids, arena + d->payload_off, 4ull * d->n_tokens) == 0);
    volatile uint8_t sink = 0;
    if (acc.extras_off) for (uint32_t k = 0; k < d->extras_bytes; k++) sink ^= acc.extras[k];
    (void)sink;
    free(acc.buf);
  } else if (v == VR_DESC_REJECT) {
    CHECK(acc.buf == NULL);
    CHECK(acc.status == VR_ERR_MALFORMED || acc.status == VR_ERR_TOO_LARGE || acc.status == VR_ERR_EMPTY_SEQ ||
          acc.status == VR_ERR_SEQ_TOO_LONG || acc.status == VR_ERR_TOKEN_RANGE || acc.status == VR_ERR_NOMEM);
    CHECK(acc.bad_seq >= -1 && (acc.bad_seq < 0 || (uint32_t)acc.bad_seq < d->n_seqs));
    CHECK(why[0] != '\0');
  } else {
    CHECK(v == VR_DESC_CORRUPT && acc.buf == NULL && why[0] != '\0');
  }
  free(slot);
  free(arena);
  return 0;
}
