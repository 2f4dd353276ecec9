/* vr_shm_validate.h: descriptor validation, the server's untrusted-input
 * boundary (vr_shm_validate.c). Server side only: used by vr_shm.c and the
 * validation tests and fuzzer; the client library never includes it (it
 * builds descriptors, it does not accept them). The byte layout it checks is
 * in verl_reward/protocol.h. Not a public header. */
#ifndef VR_SHM_VALIDATE_H
#define VR_SHM_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#include "verl_reward/protocol.h"

typedef struct vr_shm_vlimits {
  uint32_t max_seqs_per_request;
  uint32_t max_seq_len;
  uint32_t vocab_size;           /* 0: no token range check */
  uint64_t arena_bytes;
} vr_shm_vlimits_t;

typedef enum vr_desc_verdict {
  VR_DESC_OK = 0,      /* accepted: out holds validated copies */
  VR_DESC_REJECT = 1,  /* well-formed descriptor, bad content: answer with out->status */
  VR_DESC_CORRUPT = 2, /* offsets/lengths outside the lane: reset the lane */
} vr_desc_verdict_t;

/* One accepted request: the descriptor copy plus the payload copied out of the
 * arena into buf (malloc'd; owned by the caller; the first `prefix` bytes of
 * buf are left for the caller's own record). */
typedef struct vr_shm_accepted {
  vr_shm_req_desc_t desc;
  void *buf;
  int32_t *token_ids;          /* n_tokens */
  uint32_t *cu_seqlens;        /* n_seqs + 1 */
  uint32_t *extras_off;        /* n_seqs + 1, NULL without extras */
  uint8_t *extras;             /* extras_bytes, NULL without extras */
  int32_t status;              /* REJECT: the error to answer with */
  int32_t bad_seq;             /* REJECT: first failing sequence or -1 */
} vr_shm_accepted_t;

/* Copies the descriptor at `slot` once, checks it, copies the payload out of
 * `arena` (arena_bytes readable), checks the copy. On VR_DESC_OK out->buf is
 * malloc'd (free() it); otherwise out->buf is NULL. why gets a message for
 * REJECT/CORRUPT. VR_DESC_REJECT with VR_ERR_NOMEM when malloc fails. */
vr_desc_verdict_t vr_shm_accept(const vr_shm_req_desc_t *slot, const uint8_t *arena,
                                const vr_shm_vlimits_t *lim, size_t prefix, vr_shm_accepted_t *out,
                                char *why, size_t whyn);

#endif /* VR_SHM_VALIDATE_H */
