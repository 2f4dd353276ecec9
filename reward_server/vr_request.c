/* vr_request.c: POST /v1/score bodies (cJSON, msgpack-c) into packed token ids + extras. */
#define _GNU_SOURCE
#include "vr_request.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_jsonl.h"

int vr_req_fail(vr_req_error_t *e, int status, int64_t seq, const char *fmt, ...) {
  e->status = status;
  e->sequence = seq;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  return status;
}

#define fail vr_req_fail /* this file's short name for it */

void vr_request_free(vr_score_req_t *r) {
  if (!r) return;
  if (r->extras)
    for (uint32_t i = 0; i < r->n_seqs; i++) vr_extras_free(&r->extras[i]);
  free(r->extras);
  free(r->extras_ptrs);
  free(r->ids);
  free(r->cu);
  vr_text_free(&r->text);
  memset(r, 0, sizeof *r);
}

/* Allocates cu (n + 1, zeroed) and, when with_extras, the extras arrays. */
static int alloc_req(vr_score_req_t *r, uint32_t n, int with_extras, vr_req_error_t *e) {
  r->n_seqs = n;
  r->cu = calloc((size_t)n + 1, sizeof *r->cu);
  if (!r->cu) return fail(e, VR_ERR_NOMEM, -1, "out of memory for %u sequences", n);
  if (with_extras) {
    r->extras = calloc(n ? n : 1, sizeof *r->extras);
    r->extras_ptrs = calloc(n ? n : 1, sizeof *r->extras_ptrs);
    if (!r->extras || !r->extras_ptrs) return fail(e, VR_ERR_NOMEM, -1, "out of memory for extras");
    for (uint32_t i = 0; i < n; i++) vr_extras_init(&r->extras[i]);
  }
  return 0;
}

static int alloc_ids(vr_score_req_t *r, vr_req_error_t *e) {
  r->n_tokens = r->cu[r->n_seqs];
  if (!r->n_tokens) return 0;
  r->ids = malloc(r->n_tokens * sizeof *r->ids);
  if (!r->ids) return fail(e, VR_ERR_NOMEM, -1, "out of memory for %llu tokens", (unsigned long long)r->n_tokens);
  return 0;
}

/* Checks every sequence against the scorer's limits, naming the first bad one. */
int vr_request_check_seqs(const vr_score_req_t *r, const vr_scorer_t *sc, vr_req_error_t *e) {
  for (uint32_t i = 0; i < r->n_seqs; i++) {
    uint32_t len = r->cu[i + 1] - r->cu[i];
    int64_t pos;
    int rc = vr_scorer_check_seq(sc, r->ids ? r->ids + r->cu[i] : NULL, len, &pos);
    if (rc == VR_ERR_EMPTY_SEQ) return fail(e, rc, i, "sequence %u is empty", i);
    if (rc == VR_ERR_SEQ_TOO_LONG)
      return fail(e, rc, i, "sequence %u has %u tokens, more than max_seq_len %u (--truncate left|right to cut)", i,
                  len, sc->max_seq_len);
    if (rc == VR_ERR_TOKEN_RANGE)
      return fail(e, rc, i, "sequence %u: token id %d at position %lld is outside the vocabulary [0, %u)", i,
                  r->ids[r->cu[i] + pos], (long long)pos, sc->vocab_size ? sc->vocab_size : (uint32_t)INT32_MAX);
    if (rc) return fail(e, rc, i, "sequence %u: %s", i, vr_strerror(rc));
  }
  return 0;
}

static int check_counts(uint64_t n_ids, int has_ids, uint64_t n_ex, int has_ex, const vr_scorer_t *sc,
                        uint32_t max_seqs, uint32_t *n, vr_req_error_t *e) {
  if (!has_ids && sc->kind != VR_SCORER_NONE)
    return fail(e, VR_ERR_MALFORMED, -1, "missing \"input_ids\" (a list of token-id lists)");
  if (!has_ids && !has_ex) return fail(e, VR_ERR_MALFORMED, -1, "missing \"extras\" (rules-only server)");
  if (has_ids && has_ex && n_ids != n_ex)
    return fail(e, VR_ERR_MALFORMED, -1, "\"extras\" has %llu entries but \"input_ids\" has %llu sequences",
                (unsigned long long)n_ex, (unsigned long long)n_ids);
  uint64_t cnt = has_ids ? n_ids : n_ex;
  if (cnt == 0) return fail(e, VR_ERR_MALFORMED, -1, "empty batch: no sequences to score");
  if (cnt > max_seqs)
    return fail(e, VR_ERR_TOO_LARGE, -1, "%llu sequences, more than the limit %u (--max-seqs-per-request)",
                (unsigned long long)cnt, max_seqs);
  *n = (uint32_t)cnt;
  return 0;
}

/* text / messages need a model whose directory holds a tokenizer, and replace input_ids */
static int text_allowed(int has_ids, const vr_scorer_t *sc, vr_req_error_t *e) {
  if (has_ids) return fail(e, VR_ERR_MALFORMED, -1, "give one of \"input_ids\", \"text\" and \"messages\", not several");
  if (sc->kind != VR_SCORER_MODEL || !sc->tok)
    return fail(e, VR_ERR_UNSUPPORTED, -1, "this server takes token ids only: %s; send \"input_ids\"",
                sc->kind != VR_SCORER_MODEL ? "no model is loaded" : sc->tok_note);
  return 0;
}

/* ---------------------------------------------------------------- JSON */

/* "input_ids[i][j]" for a batch, "input_ids[j]" for one flat sequence (i is then 0). */
static const char *tok_name(char *buf, size_t n, int flat, uint32_t i, uint32_t j) {
  if (flat) snprintf(buf, n, "input_ids[%u]", j);
  else snprintf(buf, n, "input_ids[%u][%u]", i, j);
  return buf;
}

static int json_token(const cJSON *t, int flat, uint32_t i, uint32_t j, int32_t *out, vr_req_error_t *e) {
  char nm[48];
  if (!cJSON_IsNumber(t))
    return fail(e, VR_ERR_MALFORMED, i, "%s is not an integer (wrong type)", tok_name(nm, sizeof nm, flat, i, j));
  double d = t->valuedouble;
  if (!(d == floor(d)) || d < -2147483648.0 || d > 2147483647.0)
    return fail(e, VR_ERR_MALFORMED, i, "%s = %g is not a 32-bit integer", tok_name(nm, sizeof nm, flat, i, j), d);
  *out = (int32_t)d;
  return 0;
}

int vr_request_parse_body(const char *body, size_t len, cJSON **root, vr_req_error_t *e) {
  const char *why = NULL;
  size_t at = 0;
  *root = vr_jsonl_parse(body, len, &why, &at);
  if (!*root && why[0] == 'm') return fail(e, VR_ERR_PARSE, -1, "malformed JSON near byte %zu", at);
  if (!*root && why[0] == 'a') return fail(e, VR_ERR_PARSE, -1, "malformed JSON: %s at byte %zu", why, at);
  if (!*root) return fail(e, VR_ERR_PARSE, -1, "malformed JSON: trailing data at byte %zu (one JSON value per body)", at);
  /* a key given twice counts once, the last, as Python's json (the peers' servers) reads it */
  if (vr_json_dups(*root, VR_JSON_DUP_LAST, NULL, 0) != 0) {
    cJSON_Delete(*root);
    *root = NULL;
    return fail(e, VR_ERR_NOMEM, -1, "out of memory");
  }
  return 0;
}

int vr_request_parse_json(const char *body, size_t len, const vr_scorer_t *sc, uint32_t max_seqs,
                          vr_score_req_t *out, vr_req_error_t *e) {
  memset(out, 0, sizeof *out);
  memset(e, 0, sizeof *e);
  cJSON *root = NULL;
  int prc = vr_request_parse_body(body, len, &root, e); /* only whitespace may follow the value */
  if (prc) return prc;
  int rc = 0;
  if (!cJSON_IsObject(root)) {
    rc = fail(e, VR_ERR_MALFORMED, -1, "body must be a JSON object with \"input_ids\"");
    goto out;
  }
  const cJSON *ids = cJSON_GetObjectItemCaseSensitive(root, "input_ids");
  const cJSON *ex = cJSON_GetObjectItemCaseSensitive(root, "extras");
  if (ids && !cJSON_IsArray(ids)) {
    rc = fail(e, VR_ERR_MALFORMED, -1, "\"input_ids\" must be a list of token ids (one sequence) or of token-id lists (wrong type)");
    goto out;
  }
  if (ex && !cJSON_IsArray(ex) && !cJSON_IsNull(ex)) {
    rc = fail(e, VR_ERR_MALFORMED, -1, "\"extras\" must be a list of objects (wrong type)");
    goto out;
  }
  if (ex && cJSON_IsNull(ex)) ex = NULL;
  if ((rc = vr_text_from_json(root, max_seqs, &out->text, e))) goto out;
  if (out->text.kind != VR_TEXT_NONE && (rc = text_allowed(ids != NULL, sc, e))) goto out;
  /* a list whose first item is a number is one sequence (flat form) */
  int flat = ids && ids->child && cJSON_IsNumber(ids->child);
  uint32_t n = 0;
  if (out->text.kind != VR_TEXT_NONE)
    rc = check_counts(out->text.n, 1, ex ? (uint64_t)cJSON_GetArraySize(ex) : 0, ex != NULL, sc, max_seqs, &n, e);
  else
    rc = check_counts(ids ? (flat ? 1 : (uint64_t)cJSON_GetArraySize(ids)) : 0, ids != NULL,
                      ex ? (uint64_t)cJSON_GetArraySize(ex) : 0, ex != NULL, sc, max_seqs, &n, e);
  if (rc) goto out;
  if ((rc = alloc_req(out, n, ex != NULL, e))) goto out;
  if (ids) {
    uint32_t i = 0;
    const cJSON *first = flat ? ids : ids->child, *seq;
    for (seq = first; seq; seq = flat ? NULL : seq->next) {
      if (!cJSON_IsArray(seq)) {
        rc = fail(e, VR_ERR_MALFORMED, i, "input_ids[%u] must be a list of integers (wrong type)", i);
        goto out;
      }
      uint64_t c = (uint64_t)out->cu[i] + (uint64_t)cJSON_GetArraySize(seq);
      if (c > UINT32_MAX) {
        rc = fail(e, VR_ERR_TOO_LARGE, i, "too many tokens in the request");
        goto out;
      }
      out->cu[++i] = (uint32_t)c;
    }
    if ((rc = alloc_ids(out, e))) goto out;
    i = 0;
    for (seq = first; seq; seq = flat ? NULL : seq->next) {
      uint32_t j = 0;
      const cJSON *t;
      cJSON_ArrayForEach(t, seq) {
        if ((rc = json_token(t, flat, i, j, &out->ids[out->cu[i] + j], e))) goto out;
        j++;
      }
      i++;
    }
  }
  if (ex) {
    uint32_t i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, ex) {
      if (cJSON_IsNull(item)) {
        out->extras_ptrs[i++] = NULL;
        continue;
      }
      char err[200] = "";
      int r = cJSON_IsObject(item) ? vr_extras_from_json(item, &out->extras[i], err, sizeof err) : VR_ERR_MALFORMED;
      if (r) {
        rc = fail(e, r == VR_ERR_NOMEM ? r : VR_ERR_MALFORMED, i, "extras[%u]: %s", i,
                  *err ? err : "must be an object or null (wrong type)");
        goto out;
      }
      out->extras_ptrs[i] = &out->extras[i];
      i++;
    }
  }
  if (out->text.kind == VR_TEXT_NONE) rc = vr_request_check_seqs(out, sc, e);
out:
  cJSON_Delete(root);
  if (rc) vr_request_free(out);
  return rc;
}

/* ---------------------------------------------------------------- msgpack */

static int need(size_t pos, size_t n, size_t len) { return n <= len && pos <= len - n; }

static int be_len(const uint8_t *b, size_t pos, size_t len, int bytes, uint64_t *v) {
  if (!need(pos, (size_t)bytes, len)) return -1;
  uint64_t x = 0;
  for (int i = 0; i < bytes; i++) x = (x << 8) | b[pos + (size_t)i];
  *v = x;
  return 0;
}

/* Skips one object at *pos; container counts must fit in the remaining bytes. */
static int mp_skip(const uint8_t *b, size_t len, size_t *pos, int depth) {
  if (depth <= 0 || *pos >= len) return -1;
  uint8_t t = b[(*pos)++];
  uint64_t n = 0, items = 0;
  if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) return 0;
  if (t >= 0xa0 && t <= 0xbf) n = t & 0x1f;
  else if (t >= 0x90 && t <= 0x9f) items = t & 0x0f;
  else if (t >= 0x80 && t <= 0x8f) items = 2u * (t & 0x0f);
  else switch (t) {
      case 0xcc: case 0xd0: n = 1; break;
      case 0xcd: case 0xd1: n = 2; break;
      case 0xce: case 0xd2: case 0xca: n = 4; break;
      case 0xcf: case 0xd3: case 0xcb: n = 8; break;
      case 0xd4: n = 2; break;
      case 0xd5: n = 3; break;
      case 0xd6: n = 5; break;
      case 0xd7: n = 9; break;
      case 0xd8: n = 17; break;
      case 0xc4: case 0xd9: if (be_len(b, *pos, len, 1, &n)) return -1; *pos += 1; break;
      case 0xc5: case 0xda: if (be_len(b, *pos, len, 2, &n)) return -1; *pos += 2; break;
      case 0xc6: case 0xdb: if (be_len(b, *pos, len, 4, &n)) return -1; *pos += 4; break;
      case 0xc7: if (be_len(b, *pos, len, 1, &n)) return -1; *pos += 1; n += 1; break;
      case 0xc8: if (be_len(b, *pos, len, 2, &n)) return -1; *pos += 2; n += 1; break;
      case 0xc9: if (be_len(b, *pos, len, 4, &n)) return -1; *pos += 4; n += 1; break;
      case 0xdc: if (be_len(b, *pos, len, 2, &items)) return -1; *pos += 2; break;
      case 0xdd: if (be_len(b, *pos, len, 4, &items)) return -1; *pos += 4; break;
      case 0xde: if (be_len(b, *pos, len, 2, &items)) return -1; *pos += 2; items *= 2; break;
      case 0xdf: if (be_len(b, *pos, len, 4, &items)) return -1; *pos += 4; items *= 2; break;
      default: return -1; /* 0xc1 never used */
    }
  if (n) {
    if (!need(*pos, n, len)) return -1;
    *pos += n;
    return 0;
  }
  if (items > len - *pos) return -1; /* every element takes at least one byte */
  for (uint64_t i = 0; i < items; i++)
    if (mp_skip(b, len, pos, depth - 1)) return -1;
  return 0;
}

int vr_msgpack_validate(const uint8_t *buf, size_t len, int max_depth) {
  size_t pos = 0;
  if (mp_skip(buf, len, &pos, max_depth)) return -1;
  return pos == len ? 0 : -1;
}

static int mp_key_is(const msgpack_object *k, const char *s) {
  size_t n = strlen(s);
  return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n && memcmp(k->via.str.ptr, s, n) == 0;
}

static int mp_is_int(const msgpack_object *t) {
  return t->type == MSGPACK_OBJECT_POSITIVE_INTEGER || t->type == MSGPACK_OBJECT_NEGATIVE_INTEGER;
}

static int mp_token(const msgpack_object *t, int flat, uint32_t i, uint32_t j, int32_t *out, vr_req_error_t *e) {
  char nm[48];
  if (t->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
    if (t->via.u64 > INT32_MAX)
      return fail(e, VR_ERR_MALFORMED, i, "%s is not a 32-bit integer", tok_name(nm, sizeof nm, flat, i, j));
    *out = (int32_t)t->via.u64;
    return 0;
  }
  if (t->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
    if (t->via.i64 < INT32_MIN)
      return fail(e, VR_ERR_MALFORMED, i, "%s is not a 32-bit integer", tok_name(nm, sizeof nm, flat, i, j));
    *out = (int32_t)t->via.i64;
    return 0;
  }
  return fail(e, VR_ERR_MALFORMED, i, "%s is not an integer (wrong type)", tok_name(nm, sizeof nm, flat, i, j));
}

static int mp_extras(const msgpack_object *item, uint32_t i, vr_score_req_t *out, vr_req_error_t *e) {
  if (item->type == MSGPACK_OBJECT_NIL) {
    out->extras_ptrs[i] = NULL;
    return 0;
  }
  if (item->type != MSGPACK_OBJECT_MAP)
    return fail(e, VR_ERR_MALFORMED, i, "extras[%u] must be a map or nil (wrong type)", i);
  /* the rules library parses a blob: re-encode this element */
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  int rc = msgpack_pack_object(&pk, *item) == 0 ? 0 : VR_ERR_NOMEM;
  char err[200] = "";
  if (!rc) rc = vr_extras_parse_msgpack((const uint8_t *)sb.data, sb.size, &out->extras[i], err, sizeof err);
  msgpack_sbuffer_destroy(&sb);
  if (rc) return fail(e, rc == VR_ERR_NOMEM ? rc : VR_ERR_MALFORMED, i, "extras[%u]: %s", i, *err ? err : vr_strerror(rc));
  out->extras_ptrs[i] = &out->extras[i];
  return 0;
}

int vr_request_parse_msgpack(const uint8_t *body, size_t len, const vr_scorer_t *sc, uint32_t max_seqs,
                             vr_score_req_t *out, vr_req_error_t *e) {
  memset(out, 0, sizeof *out);
  memset(e, 0, sizeof *e);
  if (vr_msgpack_validate(body, len, 32) != 0)
    return fail(e, VR_ERR_PARSE, -1, "malformed msgpack body (truncated, bad type byte, trailing data or nested deeper than 32)");
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  int rc = 0;
  if (msgpack_unpack_next(&u, (const char *)body, len, &off) != MSGPACK_UNPACK_SUCCESS || off != len) {
    rc = fail(e, VR_ERR_PARSE, -1, "malformed msgpack body");
    goto out;
  }
  const msgpack_object *root = &u.data;
  if (root->type != MSGPACK_OBJECT_MAP) {
    rc = fail(e, VR_ERR_MALFORMED, -1, "body must be a msgpack map with \"input_ids\"");
    goto out;
  }
  const msgpack_object *ids = NULL, *ex = NULL;
  for (uint32_t k = 0; k < root->via.map.size; k++) {
    const msgpack_object_kv *kv = &root->via.map.ptr[k];
    if (mp_key_is(&kv->key, "input_ids")) ids = &kv->val;
    else if (mp_key_is(&kv->key, "extras")) ex = &kv->val;
  }
  if (ids && ids->type != MSGPACK_OBJECT_ARRAY) {
    rc = fail(e, VR_ERR_MALFORMED, -1, "\"input_ids\" must be an array of integers (one sequence) or of integer arrays (wrong type)");
    goto out;
  }
  if (ex && ex->type == MSGPACK_OBJECT_NIL) ex = NULL;
  if (ex && ex->type != MSGPACK_OBJECT_ARRAY) {
    rc = fail(e, VR_ERR_MALFORMED, -1, "\"extras\" must be an array of maps (wrong type)");
    goto out;
  }
  if ((rc = vr_text_from_msgpack(root, max_seqs, &out->text, e))) goto out;
  if (out->text.kind != VR_TEXT_NONE && (rc = text_allowed(ids != NULL, sc, e))) goto out;
  /* an array whose first item is an integer is one sequence (flat form) */
  int flat = ids && ids->via.array.size > 0 && mp_is_int(&ids->via.array.ptr[0]);
  uint32_t n = 0;
  if (out->text.kind != VR_TEXT_NONE)
    rc = check_counts(out->text.n, 1, ex ? ex->via.array.size : 0, ex != NULL, sc, max_seqs, &n, e);
  else
    rc = check_counts(ids ? (flat ? 1 : ids->via.array.size) : 0, ids != NULL, ex ? ex->via.array.size : 0, ex != NULL,
                      sc, max_seqs, &n, e);
  if (rc) goto out;
  if ((rc = alloc_req(out, n, ex != NULL, e))) goto out;
  if (ids) {
    for (uint32_t i = 0; i < n; i++) {
      const msgpack_object *seq = flat ? ids : &ids->via.array.ptr[i];
      if (seq->type != MSGPACK_OBJECT_ARRAY) {
        rc = fail(e, VR_ERR_MALFORMED, i, "input_ids[%u] must be an array of integers (wrong type)", i);
        goto out;
      }
      uint64_t c = (uint64_t)out->cu[i] + seq->via.array.size;
      if (c > UINT32_MAX) {
        rc = fail(e, VR_ERR_TOO_LARGE, i, "too many tokens in the request");
        goto out;
      }
      out->cu[i + 1] = (uint32_t)c;
    }
    if ((rc = alloc_ids(out, e))) goto out;
    for (uint32_t i = 0; i < n; i++) {
      const msgpack_object *seq = flat ? ids : &ids->via.array.ptr[i];
      for (uint32_t j = 0; j < seq->via.array.size; j++)
        if ((rc = mp_token(&seq->via.array.ptr[j], flat, i, j, &out->ids[out->cu[i] + j], e))) goto out;
    }
  }
  if (ex)
    for (uint32_t i = 0; i < n; i++)
      if ((rc = mp_extras(&ex->via.array.ptr[i], i, out, e))) goto out;
  if (out->text.kind == VR_TEXT_NONE) rc = vr_request_check_seqs(out, sc, e);
out:
  msgpack_unpacked_destroy(&u);
  if (rc) vr_request_free(out);
  return rc;
}
