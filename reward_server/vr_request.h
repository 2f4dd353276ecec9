/* vr_request.h: parsing and validating a POST /v1/score body (JSON or msgpack).
 *
 * Body (both encodings, same shape):
 *   {"input_ids": [[int, ...], ...], "extras": [{...} | null, ...]}   a batch
 *   {"input_ids": [int, ...], "extras": [{...} | null]}                one sequence (flat form)
 *   {"text": [...]} / {"messages": [[...], ...]} instead of input_ids: see vr_text.h; the parse
 *   then leaves ids NULL and text filled, and the caller encodes (vr_text_encode) and checks
 *   (vr_request_check_seqs) before scoring
 * input_ids is the flat form when its first item is a number: every item must
 * then be an integer, and the request is a batch of one (n_seqs 1; the reply
 * is still a list of one score). An empty list is an empty batch (rejected).
 * input_ids may be omitted only when no model is configured (rules-only
 * server): then "extras" alone gives the sequences (each with 0 tokens).
 * The body is untrusted: msgpack is walked by a bounds-checking validator
 * before msgpack-c decodes it; every sequence is checked with
 * vr_scorer_check_seq. Pure functions of their inputs; thread-safe. */
#ifndef VR_REQUEST_H
#define VR_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "vr_rules.h"
#include "vr_scorer.h"
#include "vr_text.h"

typedef struct vr_score_req {
  uint32_t n_seqs;
  uint64_t n_tokens;
  int32_t *ids;                    /* n_tokens (malloc; may be NULL when 0) */
  uint32_t *cu;                    /* n_seqs + 1 */
  vr_extras_t *extras;             /* n_seqs parsed extras, or NULL when none sent */
  const vr_extras_t **extras_ptrs; /* n_seqs: &extras[i], NULL for a null entry; NULL when none sent */
  vr_text_req_t text;              /* kind VR_TEXT_NONE unless the request sent text/messages */
} vr_score_req_t;

/* A parse failure: the status, the sequence it concerns (-1: the request) and a message. */
typedef struct vr_req_error {
  int status;       /* VR_ERR_PARSE, VR_ERR_MALFORMED, VR_ERR_TOO_LARGE, VR_ERR_EMPTY_SEQ, ... */
  int64_t sequence;
  char message[256];
} vr_req_error_t;

/* Fills *e (status, sequence, printf message) and returns status: the parsers' error helper. */
__attribute__((format(printf, 4, 5))) int vr_req_fail(vr_req_error_t *e, int status, int64_t seq, const char *fmt,
                                                      ...);

/* A JSON request body as Python's json.loads reads it (vr_jsonl.h): exactly one value with only
 * whitespace after it (else VR_ERR_PARSE, "malformed JSON: trailing data at byte N"), and a key
 * given twice at any depth counts once, the last. 0 with *root (the caller's, cJSON_Delete), or
 * the status with *e set. */
struct cJSON;
int vr_request_parse_body(const char *body, size_t len, struct cJSON **root, vr_req_error_t *e);

/* Parse + validate. max_seqs bounds the sequence count (VR_ERR_TOO_LARGE).
 * Returns 0 and fills *out (free with vr_request_free), or the status with *e set. */
int vr_request_parse_json(const char *body, size_t len, const vr_scorer_t *sc, uint32_t max_seqs,
                          vr_score_req_t *out, vr_req_error_t *e);
int vr_request_parse_msgpack(const uint8_t *body, size_t len, const vr_scorer_t *sc, uint32_t max_seqs,
                             vr_score_req_t *out, vr_req_error_t *e);
void vr_request_free(vr_score_req_t *r);

/* Checks every sequence of r (ids and cu filled) against the scorer's limits, naming the first
 * bad one; what the parsers run on input_ids. 0 or the status with *e set. */
int vr_request_check_seqs(const vr_score_req_t *r, const vr_scorer_t *sc, vr_req_error_t *e);

/* Validates that buf[0..len) holds exactly one well-formed msgpack object whose
 * container counts fit in the bytes present, nested at most max_depth. 0 or -1. */
int vr_msgpack_validate(const uint8_t *buf, size_t len, int max_depth);

#endif /* VR_REQUEST_H */
