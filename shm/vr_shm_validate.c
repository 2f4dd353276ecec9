/* vr_shm_validate.c: descriptor validation, the untrusted-input boundary of
 * the shm channel. The descriptor is copied once; every later decision uses
 * the copy. Bounds are checked in 64-bit arithmetic from 32-bit counts, so
 * nothing overflows; the payload is copied out before its content is checked,
 * so a client rewriting its arena concurrently cannot change what was checked. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_shm_validate.h"

/* Region [off, off + len) inside [0, arena) and 4-byte aligned? */
static int region_ok(uint64_t off, uint64_t len, uint64_t arena) {
  return (off & 3u) == 0 && off <= arena && len <= arena - off;
}

static vr_desc_verdict_t reject(vr_shm_accepted_t *out, int32_t status, int32_t bad_seq) {
  free(out->buf);
  out->buf = NULL;
  out->status = status;
  out->bad_seq = bad_seq;
  return VR_DESC_REJECT;
}

vr_desc_verdict_t vr_shm_accept(const vr_shm_req_desc_t *slot, const uint8_t *arena,
                                const vr_shm_vlimits_t *lim, size_t prefix, vr_shm_accepted_t *out,
                                char *why, size_t whyn) {
  memset(out, 0, sizeof *out);
  out->bad_seq = -1;
  memcpy(&out->desc, slot, sizeof out->desc); /* the one read of the shared slot */
  const vr_shm_req_desc_t *d = &out->desc;
  if (whyn) why[0] = '\0';

  /* counts first: a descriptor that is well-formed but asks too much is
   * answered with an error (no result area is written) */
  if (d->n_seqs == 0) {
    snprintf(why, whyn, "request %llu has 0 sequences", (unsigned long long)d->req_id);
    return reject(out, VR_ERR_MALFORMED, -1);
  }
  if (d->n_seqs > lim->max_seqs_per_request) {
    snprintf(why, whyn, "request %llu has %u sequences (max %u)", (unsigned long long)d->req_id,
             d->n_seqs, lim->max_seqs_per_request);
    return reject(out, VR_ERR_TOO_LARGE, -1);
  }
  if (d->flags != 0) {
    snprintf(why, whyn, "request %llu has unknown flags 0x%x", (unsigned long long)d->req_id, d->flags);
    return reject(out, VR_ERR_MALFORMED, -1);
  }

  /* structure: both areas inside the arena, not overlapping */
  uint64_t plen = vr_shm_payload_bytes(d->n_seqs, d->n_tokens, d->extras_bytes);
  uint64_t rlen = vr_shm_result_bytes(d->n_seqs);
  if (!region_ok(d->payload_off, plen, lim->arena_bytes)) {
    snprintf(why, whyn, "request %llu: payload [%llu, +%llu) outside the %llu-byte arena or misaligned",
             (unsigned long long)d->req_id, (unsigned long long)d->payload_off,
             (unsigned long long)plen, (unsigned long long)lim->arena_bytes);
    return VR_DESC_CORRUPT;
  }
  if (!region_ok(d->result_off, rlen, lim->arena_bytes)) {
    snprintf(why, whyn, "request %llu: result area [%llu, +%llu) outside the %llu-byte arena or misaligned",
             (unsigned long long)d->req_id, (unsigned long long)d->result_off,
             (unsigned long long)rlen, (unsigned long long)lim->arena_bytes);
    return VR_DESC_CORRUPT;
  }
  if (d->payload_off < d->result_off + rlen && d->result_off < d->payload_off + plen) {
    snprintf(why, whyn, "request %llu: result area overlaps the payload", (unsigned long long)d->req_id);
    return VR_DESC_CORRUPT;
  }

  /* copy out: [prefix][tokens][cu][extras_off][extras] in one allocation */
  uint64_t tok_b = 4ull * d->n_tokens, cu_b = 4ull * ((uint64_t)d->n_seqs + 1);
  size_t pre = (prefix + 7u) & ~(size_t)7u;
  out->buf = malloc(pre + plen);
  if (!out->buf) {
    snprintf(why, whyn, "request %llu: out of memory copying %llu bytes", (unsigned long long)d->req_id,
             (unsigned long long)plen);
    return reject(out, VR_ERR_NOMEM, -1);
  }
  uint8_t *p = (uint8_t *)out->buf + pre;
  memcpy(p, arena + d->payload_off, plen);
  out->token_ids = (int32_t *)p;
  out->cu_seqlens = (uint32_t *)(p + tok_b);
  if (d->extras_bytes) {
    out->extras_off = (uint32_t *)(p + tok_b + cu_b);
    out->extras = p + tok_b + 2 * cu_b;
  }

  /* content of the copy */
  const uint32_t *cu = out->cu_seqlens;
  if (cu[0] != 0 || cu[d->n_seqs] != d->n_tokens) {
    snprintf(why, whyn, "request %llu: cu_seqlens must run from 0 to n_tokens=%u (got %u..%u)",
             (unsigned long long)d->req_id, d->n_tokens, cu[0], cu[d->n_seqs]);
    return reject(out, VR_ERR_MALFORMED, -1);
  }
  for (uint32_t i = 0; i < d->n_seqs; i++) {
    if (cu[i + 1] < cu[i] || cu[i + 1] > d->n_tokens) {
      snprintf(why, whyn, "request %llu: cu_seqlens[%u]=%u not in [%u, %u]", (unsigned long long)d->req_id,
               i + 1, cu[i + 1], cu[i], d->n_tokens);
      return reject(out, VR_ERR_MALFORMED, (int32_t)i);
    }
    uint32_t len = cu[i + 1] - cu[i];
    if (len == 0) {
      snprintf(why, whyn, "request %llu: sequence %u is empty", (unsigned long long)d->req_id, i);
      return reject(out, VR_ERR_EMPTY_SEQ, (int32_t)i);
    }
    if (len > lim->max_seq_len) {
      snprintf(why, whyn, "request %llu: sequence %u has %u tokens (max %u)", (unsigned long long)d->req_id, i,
               len, lim->max_seq_len);
      return reject(out, VR_ERR_SEQ_TOO_LONG, (int32_t)i);
    }
    if (out->extras_off) {
      const uint32_t *xo = out->extras_off;
      if ((i == 0 && xo[0] != 0) || xo[i + 1] < xo[i] || xo[i + 1] > d->extras_bytes ||
          (i + 1 == d->n_seqs && xo[i + 1] != d->extras_bytes)) {
        snprintf(why, whyn, "request %llu: extras offsets of sequence %u out of order or past %u bytes",
                 (unsigned long long)d->req_id, i, d->extras_bytes);
        return reject(out, VR_ERR_MALFORMED, (int32_t)i);
      }
    }
  }
  if (lim->vocab_size) {
    for (uint32_t i = 0; i < d->n_seqs; i++) {
      for (uint32_t t = cu[i]; t < cu[i + 1]; t++) {
        int32_t id = out->token_ids[t];
        if (id < 0 || (uint32_t)id >= lim->vocab_size) {
          snprintf(why, whyn, "request %llu: sequence %u token %u has id %d (vocab %u)",
                   (unsigned long long)d->req_id, i, t - cu[i], id, lim->vocab_size);
          return reject(out, VR_ERR_TOKEN_RANGE, (int32_t)i);
        }
      }
    }
  }
  return VR_DESC_OK;
}
