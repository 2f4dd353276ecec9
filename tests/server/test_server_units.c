/* test_server_units.c: the server's parsers on their own (request bodies, settings),
 * and the metrics module's rendering (label escaping, status codes, histograms
 * under concurrent updates, the process collectors).
 *
 * Request bodies come from the network: besides a table of bad bodies, every
 * valid body is mutated (bit flips, truncation, insertion, splices) many times
 * and parsed again; under ASan/UBSan any out-of-bounds read shows up here, and
 * every accepted parse must satisfy the output invariants. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <msgpack.h>

#include "verl_reward/status.h"
#include "vr_metrics.h"
#include "vr_request.h"
#include "vr_settings.h"
#include "vr_tok_chat.h"
#include "vr_tokenizer.h"

static vr_scorer_t make_scorer(const char *spec, vr_scorer_kind_t kind, uint32_t vocab, uint32_t max_len) {
  vr_scorer_t sc;
  memset(&sc, 0, sizeof sc);
  sc.kind = kind;
  sc.vocab_size = vocab;
  sc.max_seq_len = max_len;
  sc.truncate = VR_TRUNCATE_ERROR;
  char err[128];
  assert_int_equal(vr_reward_spec_parse(spec, &sc.spec, err, sizeof err), 0);
  sc.has_components = sc.spec.n > 1 || sc.spec.model_index < 0;
  return sc;
}

static void check_invariants(const vr_score_req_t *r, const vr_scorer_t *sc) {
  assert_true(r->n_seqs >= 1);
  assert_int_equal(r->cu[0], 0);
  for (uint32_t i = 0; i < r->n_seqs; i++) {
    assert_true(r->cu[i + 1] >= r->cu[i]);
    uint32_t len = r->cu[i + 1] - r->cu[i];
    assert_true(len <= sc->max_seq_len);
    if (sc->kind != VR_SCORER_NONE) assert_true(len >= 1);
    for (uint32_t j = r->cu[i]; j < r->cu[i + 1]; j++) {
      assert_true(r->ids[j] >= 0);
      if (sc->vocab_size) assert_true((uint32_t)r->ids[j] < sc->vocab_size);
    }
    if (r->extras_ptrs && r->extras_ptrs[i]) assert_ptr_equal(r->extras_ptrs[i], &r->extras[i]);
  }
  assert_int_equal(r->n_tokens, r->cu[r->n_seqs]);
}

static void test_json_valid(void **state) {
  vr_scorer_t sc = make_scorer("model:0.5,gsm8k:0.5", VR_SCORER_CHECKSUM, 1000, 64);
  const char *body = "{\"input_ids\": [[1, 2, 3], [999]], \"extras\": [{\"solution_str\": \"#### 1\","
                     " \"ground_truth\": \"1\"}, null]}";
  vr_score_req_t r;
  vr_req_error_t e;
  assert_int_equal(vr_request_parse_json(body, strlen(body), &sc, 16, &r, &e), 0);
  assert_int_equal(r.n_seqs, 2);
  assert_int_equal(r.n_tokens, 4);
  assert_int_equal(r.cu[1], 3);
  assert_int_equal(r.ids[3], 999);
  assert_non_null(r.extras_ptrs[0]);
  assert_null(r.extras_ptrs[1]);
  assert_string_equal(r.extras_ptrs[0]->ground_truth.ptr, "1");
  check_invariants(&r, &sc);
  vr_request_free(&r);
}

typedef struct bad_case {
  const char *body;
  int status;
  int64_t seq;
  const char *needle;
} bad_case_t;

static void test_json_bad(void **state) {
  vr_scorer_t sc = make_scorer("model", VR_SCORER_MODEL, 100, 8);
  static const bad_case_t cases[] = {
      {"", VR_ERR_PARSE, -1, "malformed JSON"},
      {"{", VR_ERR_PARSE, -1, "malformed JSON"},
      {"{\"input_ids\": [[1]]}}", VR_ERR_PARSE, -1, "trailing data"},
      {"null", VR_ERR_MALFORMED, -1, "JSON object"},
      {"{\"input_ids\": {}}", VR_ERR_MALFORMED, -1, "wrong type"},
      {"{\"input_ids\": [[1], 2]}", VR_ERR_MALFORMED, 1, "input_ids[1] must be a list"},
      {"{\"input_ids\": [[1, true]]}", VR_ERR_MALFORMED, 0, "input_ids[0][1] is not an integer"},
      {"{\"input_ids\": [[1e10]]}", VR_ERR_MALFORMED, 0, "not a 32-bit integer"},
      {"{\"input_ids\": [[0.5]]}", VR_ERR_MALFORMED, 0, "not a 32-bit integer"},
      {"{\"input_ids\": []}", VR_ERR_MALFORMED, -1, "empty batch"},
      {"{\"extras\": [{}]}", VR_ERR_MALFORMED, -1, "missing \"input_ids\""},
      {"{\"input_ids\": [[1], []]}", VR_ERR_EMPTY_SEQ, 1, "sequence 1 is empty"},
      {"{\"input_ids\": [[1, 100]]}", VR_ERR_TOKEN_RANGE, 0, "token id 100 at position 1"},
      {"{\"input_ids\": [[-1]]}", VR_ERR_TOKEN_RANGE, 0, "token id -1 at position 0"},
      {"{\"input_ids\": [[1,2,3,4,5,6,7,8,9]]}", VR_ERR_SEQ_TOO_LONG, 0, "9 tokens, more than max_seq_len 8"},
      {"{\"input_ids\": [[1],[1],[1],[1],[1]]}", VR_ERR_TOO_LARGE, -1, "5 sequences"},
      {"{\"input_ids\": [[1]], \"extras\": [1]}", VR_ERR_MALFORMED, 0, "extras[0]"},
      {"{\"input_ids\": [[1]], \"extras\": [{\"solution_str\": 3}]}", VR_ERR_MALFORMED, 0, "extras[0]"},
      {"{\"input_ids\": [[1]], \"extras\": []}", VR_ERR_MALFORMED, -1, "has 0 entries"},
      /* the flat form: a list whose first item is a number is one sequence */
      {"{\"input_ids\": [1, [2]]}", VR_ERR_MALFORMED, 0, "input_ids[1] is not an integer"},
      {"{\"input_ids\": [1, 0.5]}", VR_ERR_MALFORMED, 0, "input_ids[1] = 0.5 is not a 32-bit integer"},
      {"{\"input_ids\": [1, 2], \"extras\": [{}, {}]}", VR_ERR_MALFORMED, -1, "2 entries but \"input_ids\" has 1"},
      {"{\"input_ids\": [1,2,3,4,5,6,7,8,9]}", VR_ERR_SEQ_TOO_LONG, 0, "9 tokens"},
      {"{\"input_ids\": [1, 100]}", VR_ERR_TOKEN_RANGE, 0, "token id 100 at position 1"},
      {"{\"input_ids\": 3}", VR_ERR_MALFORMED, -1, "one sequence"},
      {"{\"input_ids\": [[1]]}{\"input_ids\": [[2]]}", VR_ERR_PARSE, -1, "trailing data at byte 20"},
      {"{\"input_ids\":\f[[1]]}", VR_ERR_PARSE, -1, "a control byte in the JSON at byte 13"}, /* cJSON took it as a blank */
      {"{\"input_ids\": [[01]]}", VR_ERR_PARSE, -1, "a number JSON does not allow at byte 16"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    vr_score_req_t r;
    vr_req_error_t e;
    int rc = vr_request_parse_json(cases[k].body, strlen(cases[k].body), &sc, 4, &r, &e);
    if (rc != cases[k].status || e.sequence != cases[k].seq || !strstr(e.message, cases[k].needle))
      fail_msg("case %zu '%s': got %s seq %lld '%s'", k, cases[k].body, vr_status_name(rc), (long long)e.sequence,
               e.message);
    assert_null(r.cu);
  }
}

/* A body as Python's json.loads reads it: a NUL after the object is trailing data (it was dropped),
 * and a key given twice counts as its last, at any depth (cJSON found the first). */
static void test_json_python_reading(void **state) {
  (void)state;
  vr_scorer_t sc = make_scorer("model", VR_SCORER_MODEL, 100, 8);
  vr_score_req_t r;
  vr_req_error_t e;
  static const char nul[] = "{\"input_ids\": [[1]]}\0{\"input_ids\": [[2]]}";
  assert_int_equal(vr_request_parse_json(nul, sizeof nul - 1, &sc, 4, &r, &e), VR_ERR_PARSE);
  assert_non_null(strstr(e.message, "trailing data at byte 20"));
  static const char dup[] = "{\"input_ids\": \"x\", \"extras\": 7, \"input_ids\": [[5], [1, 2]], "
                            "\"extras\": [{\"solution_str\": 1, \"solution_str\": \"a\"}, null]}";
  assert_int_equal(vr_request_parse_json(dup, sizeof dup - 1, &sc, 4, &r, &e), 0);
  assert_int_equal(r.n_seqs, 2);
  assert_int_equal(r.n_tokens, 3);
  assert_int_equal(r.ids[2], 2);
  vr_request_free(&r);
}

/* Copies the packed bytes to out (at most cap) and frees the buffer; returns the length. */
static size_t sb_take(msgpack_sbuffer *sb, char *out, size_t cap) {
  assert_true(sb->size <= cap);
  memcpy(out, sb->data, sb->size);
  size_t n = sb->size;
  msgpack_sbuffer_destroy(sb);
  return n;
}

/* {"input_ids": [[...] x n], "extras": [{"solution_str": s, "ground_truth": g} | nil]} */
static size_t pack_body(char *out, size_t cap, int with_extras) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, with_extras ? 2 : 1);
  msgpack_pack_str_with_body(&pk, "input_ids", 9);
  msgpack_pack_array(&pk, 3);
  for (int i = 0; i < 3; i++) {
    msgpack_pack_array(&pk, (size_t)i + 1);
    for (int j = 0; j <= i; j++) msgpack_pack_int(&pk, 10 * i + j);
  }
  if (with_extras) {
    msgpack_pack_str_with_body(&pk, "extras", 6);
    msgpack_pack_array(&pk, 3);
    for (int i = 0; i < 3; i++) {
      if (i == 1) {
        msgpack_pack_nil(&pk);
        continue;
      }
      msgpack_pack_map(&pk, 2);
      msgpack_pack_str_with_body(&pk, "solution_str", 12);
      msgpack_pack_str_with_body(&pk, "#### 42", 7);
      msgpack_pack_str_with_body(&pk, "ground_truth", 12);
      msgpack_pack_str_with_body(&pk, "42", 2);
    }
  }
  return sb_take(&sb, out, cap);
}

static void test_msgpack_valid(void **state) {
  vr_scorer_t sc = make_scorer("model:0.5,gsm8k:0.5", VR_SCORER_CHECKSUM, 100, 8);
  char body[512];
  size_t n = pack_body(body, sizeof body, 1);
  vr_score_req_t r;
  vr_req_error_t e;
  assert_int_equal(vr_request_parse_msgpack((const uint8_t *)body, n, &sc, 16, &r, &e), 0);
  assert_int_equal(r.n_seqs, 3);
  assert_int_equal(r.n_tokens, 6);
  assert_int_equal(r.ids[5], 22);
  assert_null(r.extras_ptrs[1]);
  assert_string_equal(r.extras_ptrs[2]->solution_str.ptr, "#### 42");
  check_invariants(&r, &sc);
  vr_request_free(&r);
}

/* The flat form ({"input_ids": [ids]}) parses to the same request as the batch of one
 * ({"input_ids": [[ids]]}), in JSON and in msgpack, extras included. */
static void assert_same_req(const vr_score_req_t *a, const vr_score_req_t *b) {
  assert_int_equal(a->n_seqs, b->n_seqs);
  assert_int_equal(a->n_tokens, b->n_tokens);
  assert_memory_equal(a->cu, b->cu, ((size_t)a->n_seqs + 1) * sizeof *a->cu);
  assert_memory_equal(a->ids, b->ids, a->n_tokens * sizeof *a->ids);
  assert_int_equal(a->extras_ptrs == NULL, b->extras_ptrs == NULL);
}

static size_t pack_one(char *out, size_t cap, const int *ids, size_t n, int nested) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 1);
  msgpack_pack_str_with_body(&pk, "input_ids", 9);
  if (nested) msgpack_pack_array(&pk, 1);
  msgpack_pack_array(&pk, n);
  for (size_t j = 0; j < n; j++) msgpack_pack_int(&pk, ids[j]);
  return sb_take(&sb, out, cap);
}

static void test_flat_form(void **state) {
  vr_scorer_t sc = make_scorer("model:0.5,gsm8k:0.5", VR_SCORER_CHECKSUM, 1000, 64);
  vr_req_error_t e;
  vr_score_req_t flat, nested, mflat, mnested;
  const char *jf = "{\"input_ids\": [5, 0, 999, 7], \"extras\": [{\"ground_truth\": \"1\"}]}";
  const char *jn = "{\"input_ids\": [[5, 0, 999, 7]], \"extras\": [{\"ground_truth\": \"1\"}]}";
  assert_int_equal(vr_request_parse_json(jf, strlen(jf), &sc, 16, &flat, &e), 0);
  assert_int_equal(vr_request_parse_json(jn, strlen(jn), &sc, 16, &nested, &e), 0);
  assert_int_equal(flat.n_seqs, 1);
  assert_int_equal(flat.ids[2], 999);
  assert_string_equal(flat.extras_ptrs[0]->ground_truth.ptr, "1");
  assert_same_req(&flat, &nested);
  check_invariants(&flat, &sc);
  static const int ids[] = {5, 0, 999, 7};
  char b1[128], b2[128];
  size_t n1 = pack_one(b1, sizeof b1, ids, 4, 0), n2 = pack_one(b2, sizeof b2, ids, 4, 1);
  assert_int_equal(vr_request_parse_msgpack((const uint8_t *)b1, n1, &sc, 16, &mflat, &e), 0);
  assert_int_equal(vr_request_parse_msgpack((const uint8_t *)b2, n2, &sc, 16, &mnested, &e), 0);
  assert_int_equal(mflat.extras_ptrs == NULL, 1);
  vr_request_free(&nested);
  const char *jn2 = "{\"input_ids\": [[5, 0, 999, 7]]}";
  assert_int_equal(vr_request_parse_json(jn2, strlen(jn2), &sc, 16, &nested, &e), 0);
  assert_same_req(&mflat, &mnested);
  assert_same_req(&mflat, &nested);
  /* the flat form in msgpack: a non-integer after the first item names input_ids[j] */
  const char bad[] = "\x81\xa9input_ids\x92\x01\xc3"; /* {"input_ids": [1, true]} */
  vr_score_req_t r;
  assert_int_equal(vr_request_parse_msgpack((const uint8_t *)bad, sizeof bad - 1, &sc, 16, &r, &e), VR_ERR_MALFORMED);
  assert_non_null(strstr(e.message, "input_ids[1] is not an integer"));
  vr_request_free(&flat);
  vr_request_free(&nested);
  vr_request_free(&mflat);
  vr_request_free(&mnested);
}

static void test_msgpack_hostile(void **state) {
  vr_scorer_t sc = make_scorer("model", VR_SCORER_CHECKSUM, 0, 64);
  static const struct { const char *b; size_t n; } cases[] = {
      {"\xdd\xff\xff\xff\xff", 5},                /* array32 claiming 4G elements */
      {"\xdf\xff\xff\xff\xff\x01", 6},            /* map32 claiming 4G pairs */
      {"\xdb\xff\xff\xff\xff", 5},                /* str32 longer than the body */
      {"\xc6\x00\x00\x00\x10\x01", 6},            /* bin32 truncated */
      {"\xc1", 1},                                /* never-used type */
      {"\x81\xa9input_ids\x91\x92\x01", 14},      /* truncated inner array */
      {"\x80\x00", 2},                            /* trailing byte */
      {"", 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    vr_score_req_t r;
    vr_req_error_t e;
    int rc = vr_request_parse_msgpack((const uint8_t *)cases[k].b, cases[k].n, &sc, 16, &r, &e);
    if (rc != VR_ERR_PARSE) fail_msg("case %zu: got %s '%s'", k, vr_status_name(rc), e.message);
  }
  /* 100 nested arrays: deeper than the validator allows */
  uint8_t deep[101];
  memset(deep, 0x91, 100);
  deep[100] = 0x01;
  assert_int_equal(vr_msgpack_validate(deep, sizeof deep, 32), -1);
  assert_int_equal(vr_msgpack_validate(deep + 90, 11, 32), 0);
}

static uint64_t rng_next(uint64_t *s) {
  uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Mutates src into dst (len <= cap); returns the new length. */
static size_t mutate(const char *src, size_t n, char *dst, size_t cap, uint64_t *seed) {
  memcpy(dst, src, n);
  int edits = 1 + (int)(rng_next(seed) % 4);
  for (int k = 0; k < edits; k++) {
    uint64_t r = rng_next(seed);
    size_t at = n ? (size_t)(r >> 8) % n : 0;
    switch (r % 5) {
      case 0: if (n) dst[at] ^= (char)(1u << ((r >> 40) % 8)); break;
      case 1: if (n) dst[at] = (char)(r >> 48); break;
      case 2: n = at; break; /* truncate */
      case 3:
        if (n < cap) {
          memmove(dst + at + 1, dst + at, n - at);
          dst[at] = (char)(r >> 32);
          n++;
        }
        break;
      default:
        if (n > 1) { /* duplicate a span */
          size_t len = 1 + (size_t)(r >> 24) % 8;
          if (at + len > n) len = n - at;
          if (n + len <= cap) {
            memmove(dst + at + len, dst + at, n - at);
            n += len;
          }
        }
        break;
    }
  }
  return n;
}

static void fuzz_one(const vr_scorer_t *sc, const char *seed_body, size_t seed_len, int msgpack, int iters) {
  char buf[1024];
  uint64_t seed = 12345 + (uint64_t)msgpack;
  int accepted = 0;
  for (int i = 0; i < iters; i++) {
    size_t n = mutate(seed_body, seed_len, buf, sizeof buf, &seed);
    char *exact = malloc(n ? n : 1); /* exact-size copy: ASan sees any read past the end */
    memcpy(exact, buf, n);
    vr_score_req_t r;
    vr_req_error_t e;
    int rc = msgpack ? vr_request_parse_msgpack((const uint8_t *)exact, n, sc, 16, &r, &e)
                     : vr_request_parse_json(exact, n, sc, 16, &r, &e);
    if (rc == 0) {
      check_invariants(&r, sc);
      vr_request_free(&r);
      accepted++;
    } else {
      assert_true(rc < 0);
      assert_true(strlen(e.message) > 0);
    }
    free(exact);
  }
  print_message("%s: %d of %d mutants accepted\n", msgpack ? "msgpack" : "json", accepted, iters);
}

static void test_fuzz_bodies(void **state) {
  vr_scorer_t sc = make_scorer("model:0.5,gsm8k:0.5", VR_SCORER_CHECKSUM, 100, 8);
  const char *json = "{\"input_ids\": [[1, 2, 3], [4], [5, 6]], \"extras\": [{\"solution_str\": \"#### 7\","
                     " \"ground_truth\": \"7\", \"extra_info\": {\"a\": [1, 2]}}, null, {\"data_source\": \"x\"}]}";
  fuzz_one(&sc, json, strlen(json), 0, 20000);
  const char *flat = "{\"input_ids\": [1, 2, 3, 4], \"extras\": [{\"solution_str\": \"#### 7\"}]}";
  fuzz_one(&sc, flat, strlen(flat), 0, 5000);
  char body[512];
  size_t n = pack_body(body, sizeof body, 1);
  fuzz_one(&sc, body, n, 1, 20000);
}

/* ---- text / messages bodies (vr_text): parsed, then encoded with a real tokenizer ---- */

static vr_scorer_t text_scorer(void) {
  vr_scorer_t sc = make_scorer("model", VR_SCORER_MODEL, 97, 64);
  const char *fx = getenv("VR_FIXTURES");
  char dir[4096], err[512];
  snprintf(dir, sizeof dir, "%s/server_tokenizer", fx ? fx : "tests/fixtures");
  if (vr_tok_load(dir, &sc.tok, err, sizeof err) != 0) fail_msg("%s", err);
  return sc;
}

/* parse + encode + the sequence checks: what the server's text worker runs */
static int parse_text(const vr_scorer_t *sc, const char *body, size_t n, int msgpack, vr_score_req_t *r,
                      vr_req_error_t *e) {
  int rc = msgpack ? vr_request_parse_msgpack((const uint8_t *)body, n, sc, 16, r, e)
                   : vr_request_parse_json(body, n, sc, 16, r, e);
  if (rc || r->text.kind == VR_TEXT_NONE) return rc;
  int32_t *ids;
  uint64_t nt;
  rc = vr_text_encode(sc->tok, &r->text, &ids, r->cu, &nt, e);
  if (!rc) {
    r->ids = ids;
    r->n_tokens = nt;
    rc = vr_request_check_seqs(r, sc, e);
  }
  if (rc) vr_request_free(r);
  return rc;
}

static void test_text_bodies(void **state) {
  vr_scorer_t sc = text_scorer();
  char err[512];
  /* texts: the ids of vr_tok_encode(text, add_special_tokens=1), in order */
  const char *texts[] = {"the cat sat in a hat", "In the end."};
  const char *body = "{\"text\": [\"the cat sat in a hat\", \"In the end.\"], \"extras\": [null, {\"ground_truth\": \"1\"}]}";
  vr_score_req_t r;
  vr_req_error_t e;
  assert_int_equal(parse_text(&sc, body, strlen(body), 0, &r, &e), 0);
  check_invariants(&r, &sc);
  assert_int_equal(r.n_seqs, 2);
  for (uint32_t i = 0; i < 2; i++) {
    int32_t *ids;
    size_t n;
    assert_int_equal(vr_tok_encode(sc.tok, texts[i], strlen(texts[i]), 1, &ids, &n, err, sizeof err), 0);
    assert_int_equal(n, r.cu[i + 1] - r.cu[i]);
    assert_memory_equal(ids, r.ids + r.cu[i], n * sizeof *ids);
    free(ids);
  }
  assert_non_null(r.extras_ptrs[1]);
  vr_request_free(&r);
  /* a conversation: the template's text, encoded without added special tokens (BOS once) */
  const char *conv = "[{\"role\":\"user\",\"content\":\"Hi there\"},{\"role\":\"assistant\",\"content\":\"the end!\"}]";
  char mbody[512];
  snprintf(mbody, sizeof mbody, "{\"messages\": %s, \"add_generation_prompt\": false}", conv);
  assert_int_equal(parse_text(&sc, mbody, strlen(mbody), 0, &r, &e), 0);
  char *text;
  size_t tl;
  assert_int_equal(vr_tok_apply_chat_template_ex(sc.tok, NULL, conv, 0, NULL, &text, &tl, err, sizeof err), 0);
  int32_t *ids;
  size_t n;
  assert_int_equal(vr_tok_encode(sc.tok, text, tl, 0, &ids, &n, err, sizeof err), 0);
  assert_int_equal(r.n_seqs, 1);
  assert_int_equal(r.n_tokens, n);
  assert_memory_equal(ids, r.ids, n * sizeof *ids);
  assert_int_equal(ids[0], 1); /* the template's <s> */
  free(ids);
  /* the chat-template glue reads one value (text after it was dropped) as Python reads it (a
   * repeated key is its last: cJSON found the first) */
  char *text2 = NULL;
  const char *dup_role = "[{\"role\":\"system\",\"role\":\"user\",\"content\":\"Hi there\"},"
                         "{\"role\":\"assistant\",\"content\":\"the end!\"}]";
  assert_int_equal(vr_tok_apply_chat_template_ex(sc.tok, NULL, dup_role, 0, NULL, &text2, &tl, err, sizeof err), 0);
  assert_string_equal(text2, text);
  free(text2);
  char trail[512];
  snprintf(trail, sizeof trail, "%s []", conv);
  assert_int_equal(vr_tok_apply_chat_template_ex(sc.tok, NULL, trail, 0, NULL, &text2, &tl, err, sizeof err),
                   VR_ERR_INVAL);
  assert_non_null(strstr(err, "messages: text after the JSON value at byte"));
  free(text);
  vr_request_free(&r);
  /* msgpack: {"text": ["the cat sat in a hat"]} gives the JSON form's ids */
  const char mp[] = "\x81\xa4text\x91\xb4the cat sat in a hat";
  assert_int_equal(parse_text(&sc, mp, sizeof mp - 1, 1, &r, &e), 0);
  vr_score_req_t rj;
  const char *jb = "{\"text\": \"the cat sat in a hat\"}";
  assert_int_equal(parse_text(&sc, jb, strlen(jb), 0, &rj, &e), 0);
  assert_int_equal(r.n_tokens, rj.n_tokens);
  assert_memory_equal(r.ids, rj.ids, r.n_tokens * sizeof *r.ids);
  vr_request_free(&r);
  vr_request_free(&rj);
  /* bad bodies name the field */
  static const bad_case_t cases[] = {
      {"{\"text\": [\"a\", 3]}", VR_ERR_MALFORMED, 1, "text[1] must be a string"},
      {"{\"text\": {}}", VR_ERR_MALFORMED, -1, "\"text\" must be a string or a list"},
      {"{\"text\": []}", VR_ERR_MALFORMED, -1, "\"text\" is empty"},
      {"{\"messages\": [[{\"content\": \"x\"}]]}", VR_ERR_MALFORMED, 0, "messages[0][0].role is missing"},
      {"{\"messages\": [{\"role\": \"user\"}, 3]}", VR_ERR_MALFORMED, 0, "messages[1] must be an object"},
      {"{\"messages\": [[{\"role\": \"user\", \"content\": 1}]]}", VR_ERR_MALFORMED, 0, "messages[0][0].content"},
      {"{\"messages\": [[]]}", VR_ERR_MALFORMED, 0, "empty conversation"},
      {"{\"text\": \"a\", \"input_ids\": [1]}", VR_ERR_MALFORMED, -1, "give one of"},
      {"{\"text\": \"a\", \"add_generation_prompt\": true}", VR_ERR_MALFORMED, -1, "go with \"messages\""},
      {"{\"messages\": [[{\"role\": \"user\", \"content\": \"x\"}]], \"add_special_tokens\": true}", VR_ERR_MALFORMED, -1, "goes with \"text\""},
      {"{\"text\": [\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"]}", VR_ERR_TOO_LARGE, -1, "17 sequences"},
      {"{\"text\": [\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"]}", VR_ERR_SEQ_TOO_LONG, 0, "more than max_seq_len 64"},
      {"{\"messages\": [[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]]}", VR_ERR_INVAL, 0, "template raised"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int rc = parse_text(&sc, cases[k].body, strlen(cases[k].body), 0, &r, &e);
    if (rc != cases[k].status || e.sequence != cases[k].seq || !strstr(e.message, cases[k].needle))
      fail_msg("case %zu '%s': got %s seq %lld '%s'", k, cases[k].body, vr_status_name(rc), (long long)e.sequence,
               e.message);
  }
  /* without a tokenizer: refused, naming why */
  vr_scorer_t none = make_scorer("model", VR_SCORER_MODEL, 97, 64);
  snprintf(none.tok_note, sizeof none.tok_note, "the model directory X has no tokenizer.json");
  assert_int_equal(vr_request_parse_json(jb, strlen(jb), &none, 16, &r, &e), VR_ERR_UNSUPPORTED);
  assert_non_null(strstr(e.message, "no tokenizer.json"));
  /* mutated text and messages bodies: every accepted one encodes to valid sequences */
  const char *seeds[] = {body, mbody};
  for (int q = 0; q < 2; q++) {
    char buf[1024];
    uint64_t seed = 777 + (uint64_t)q;
    int accepted = 0;
    for (int i = 0; i < 4000; i++) {
      size_t m = mutate(seeds[q], strlen(seeds[q]), buf, sizeof buf, &seed);
      char *exact = malloc(m ? m : 1);
      memcpy(exact, buf, m);
      int rc = parse_text(&sc, exact, m, 0, &r, &e);
      if (rc == 0) {
        check_invariants(&r, &sc);
        vr_request_free(&r);
        accepted++;
      } else {
        assert_true(rc < 0);
        assert_true(strlen(e.message) > 0);
      }
      free(exact);
    }
    print_message("text seed %d: %d of 4000 mutants accepted\n", q, accepted);
  }
  vr_tok_free(sc.tok);
}

static void test_settings(void **state) {
  vr_settings_t s;
  vr_settings_init(&s);
  assert_int_equal(s.port, 8080);
  assert_string_equal(s.shm_name, "verl_reward_shm");
  char err[256];
  assert_int_equal(vr_settings_set(&s, "max_batch_tokens", "4096", err, sizeof err), 0);
  assert_int_equal(s.max_batch_tokens, 4096);
  assert_int_equal(vr_settings_set(&s, "shared_mem_name", "abc", err, sizeof err), 0);
  assert_string_equal(s.shm_name, "abc");
  assert_int_equal(vr_settings_set(&s, "shm-mode", "0660", err, sizeof err), 0);
  assert_int_equal(s.shm_mode, 0660);
  assert_int_equal(vr_settings_set(&s, "shm-mode", "0999", err, sizeof err), VR_ERR_INVAL);
  assert_int_equal(vr_settings_set(&s, "port", "-1", err, sizeof err), VR_ERR_INVAL);
  assert_int_equal(vr_settings_set(&s, "port", "65536", err, sizeof err), VR_ERR_INVAL);
  assert_int_equal(vr_settings_set(&s, "port", "12x", err, sizeof err), VR_ERR_INVAL);
  assert_non_null(strstr(err, "port"));
  assert_int_equal(vr_settings_set(&s, "truncate", "middle", err, sizeof err), VR_ERR_INVAL);
  assert_int_equal(vr_settings_set(&s, "nope", "1", err, sizeof err), VR_ERR_NOT_FOUND);
  assert_int_equal(vr_settings_set(&s, "max-batch-tokens", "0", err, sizeof err), VR_ERR_INVAL);
  /* the CUDA tuning: model/'s defaults, names and values */
  assert_int_equal(s.cuda.graphs, 1);
  assert_int_equal(s.cuda.warmup, 1);
  assert_int_equal(s.cuda.exact_size, 1);
  assert_int_equal(s.cuda.autotune, VR_CUDA_AUTOTUNE_OFF);
  assert_int_equal(s.cuda.residual, VR_CUDA_RESIDUAL_AUTO);
  assert_int_equal(vr_settings_set(&s, "cuda-graphs", "off", err, sizeof err), 0);
  assert_int_equal(s.cuda.graphs, 0);
  assert_int_equal(vr_settings_set(&s, "cuda_autotune", "all", err, sizeof err), 0);
  assert_int_equal(s.cuda.autotune, VR_CUDA_AUTOTUNE_ALL);
  assert_int_equal(vr_settings_set(&s, "cuda-residual", "bf16", err, sizeof err), 0);
  assert_int_equal(s.cuda.residual, VR_CUDA_RESIDUAL_BF16);
  assert_int_equal(vr_settings_set(&s, "cuda-warmup", "0", err, sizeof err), VR_ERR_INVAL);
  assert_non_null(strstr(err, "cuda-warmup"));
  assert_non_null(strstr(err, "'0'"));
  assert_int_equal(s.cuda.warmup, 1);
  assert_int_equal(vr_settings_set(&s, "cuda-nope", "on", err, sizeof err), VR_ERR_NOT_FOUND);

  /* typed values: checked and canonicalised as they are set (command line and config file alike) */
  static const struct { const char *key, *value; int rc; const char *want; } k_values[] = {
      {"device", "cpu", 0, "cpu"},
      {"device", "gpu", VR_ERR_INVAL, "HINT: --device cuda"},
      {"device", "cuda:x", VR_ERR_INVAL, "'cuda:x'"},
      {"device", "cuda:-1", VR_ERR_INVAL, "'cuda:-1'"},
      /* replica lists (vr_settings_devices): one model replica per entry */
      {"device", "cpu,cpu", 0, "cpu,cpu"},
      {"device", "cpu,cpu,cpu", 0, "cpu,cpu,cpu"},
      {"device", "cpu,", VR_ERR_INVAL, "entry 2 is empty"},
      {"device", ",cpu", VR_ERR_INVAL, "entry 1 is empty"},
      {"device", "cpu,,cpu", VR_ERR_INVAL, "entry 2 is empty"},
      {"device", "cpu,gpu", VR_ERR_INVAL, "entry 2 'gpu'"},
      {"device", "cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu", VR_ERR_INVAL,
       "more than 16 entries"},
      {"device", "cpu,1", VR_ERR_INVAL, "entry 2 '1'"}, /* a bare number follows a cuda entry only */
      {"dtype", "bfloat16", 0, "bf16"},
      {"dtype", "torch.bfloat16", 0, "bf16"},
      {"dtype", "float32", 0, "f32"},
      {"dtype", "fp32", 0, "f32"},
      {"dtype", "auto", 0, "auto"},
      {"dtype", "float16", VR_ERR_INVAL, "no backend computes in f16"},
      {"dtype", "int8", VR_ERR_INVAL, "--dtype 'int8'"},
      {"shm-name", "/run/x/foo.sock", 0, "/run/x/foo.sock"}, /* a socket path */
      {"shm-name", "@foo", 0, "@foo"},                       /* the abstract form */
      {"shm-name", "@fo/o", VR_ERR_INVAL, "must not contain '/'"},
      {"shm-name", "/run/x/", VR_ERR_INVAL, "names a directory"},
      {"shm-name", "this_plain_name_is_longer_than_sixty_four_bytes_which_is_the_limit_x", VR_ERR_INVAL,
       "at most 64 bytes"},
      {"shm-name", "", 0, ""},
      {"shm-name", "ok_name", 0, "ok_name"},
      {"cpu-gemm", "generic", 0, "generic"},
      {"cpu-gemm", "avx512", VR_ERR_INVAL, "--cpu-gemm 'avx512'"},
      {"reward", "gsm9k", VR_ERR_INVAL, "unknown component 'gsm9k'"},
      {"reward", "model:0.5,gsm8k:0.5", 0, "model:0.5,gsm8k:0.5"},
      {"config", "/nonexistent/vr.yaml", VR_ERR_INVAL, "--config '/nonexistent/vr.yaml'"},
      {"port", "x", VR_ERR_INVAL, "--port 'x'"},
  };
  for (size_t i = 0; i < sizeof k_values / sizeof k_values[0]; i++) {
    vr_settings_t t;
    vr_settings_init(&t);
    err[0] = 0;
    int rc = vr_settings_set(&t, k_values[i].key, k_values[i].value, err, sizeof err);
    if (rc != k_values[i].rc) fail_msg("%s=%s: rc %d, want %d (%s)", k_values[i].key, k_values[i].value, rc,
                                       k_values[i].rc, err);
    if (rc == 0 && strcmp(k_values[i].key, "port") != 0) {
      const char *got = !strcmp(k_values[i].key, "device") ? t.device : !strcmp(k_values[i].key, "dtype") ? t.dtype
                      : !strcmp(k_values[i].key, "shm-name") ? t.shm_name : !strcmp(k_values[i].key, "cpu-gemm")
                      ? t.cpu_gemm : t.reward;
      if (strcmp(got, k_values[i].want) != 0) fail_msg("%s=%s: got '%s', want '%s'", k_values[i].key,
                                                       k_values[i].value, got, k_values[i].want);
    } else if (rc != 0 && !strstr(err, k_values[i].want)) {
      fail_msg("%s=%s: error '%s' lacks '%s'", k_values[i].key, k_values[i].value, err, k_values[i].want);
    }
  }
  /* cuda replica lists: what they mean depends on the build, never on the GPUs present */
  {
    vr_settings_t t;
    vr_settings_init(&t);
    const int cuda = strstr(vr_model_backends(), "cuda") != NULL;
    int rc = vr_settings_set(&t, "device", "cpu,cuda:9", err, sizeof err);
    assert_int_equal(rc, VR_ERR_INVAL);
    assert_non_null(strstr(err, cuda ? "cpu and cuda replicas do not mix" : "entry 2 'cuda:9'"));
    if (cuda) {
      assert_int_equal(vr_settings_set(&t, "device", "cuda:0,1,2,3", err, sizeof err), 0);
      assert_string_equal(t.device, "cuda:0,cuda:1,cuda:2,cuda:3");
      assert_int_equal(vr_settings_set(&t, "device", "cuda:0,cuda:0", err, sizeof err), 0);
      assert_string_equal(t.device, "cuda:0,cuda:0");
      assert_int_equal(vr_settings_set(&t, "device", "cuda,cuda", err, sizeof err), VR_ERR_INVAL);
      assert_non_null(strstr(err, "names no GPU in a list"));
      assert_int_equal(vr_settings_set(&t, "device", "cuda:0,,1", err, sizeof err), VR_ERR_INVAL);
      assert_non_null(strstr(err, "entry 2 is empty"));
    } else {
      assert_int_equal(vr_settings_set(&t, "device", "cuda:0,cuda:0", err, sizeof err), VR_ERR_INVAL);
      assert_non_null(strstr(err, "entry 1 'cuda:0'"));
    }
    char devs[VR_SETTINGS_MAX_REPLICAS][16];
    uint32_t n = 0;
    assert_int_equal(vr_settings_devices("cpu,cpu,cpu", devs, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);
    assert_string_equal(devs[2], "cpu");
    assert_int_equal(vr_settings_devices("", devs, &n, err, sizeof err), 0); /* auto: one replica */
    assert_int_equal(n, 1);
    assert_string_equal(devs[0], "");
  }
  /* the checks that need every setting */
  static const struct { const char *model, *device, *dtype, *reward; uint32_t ring_slots; const char *want; } k_checks[] = {
      {"checksum", "", "auto", "", 64, NULL},
      {"", "", "auto", "gsm8k", 64, NULL},
      {"", "", "auto", "", 64, "needs a model"},
      {"checksum", "cuda", "auto", "", 64, "--model checksum runs on the cpu"},
      {"/nonexistent/model", "", "auto", "", 64, "--model '/nonexistent/model'"},
      {"/tmp", "", "auto", "", 64, "has no readable config.json"},
      {"checksum", "", "auto", "", 48, "--ring-slots 48 is not a power of two"},
      {"checksum", "", "auto", "", 64, "--pid-file '/nonexistent/dir/vr.pid': cannot write in /nonexistent/dir"},
  };
  for (size_t i = 0; i < sizeof k_checks / sizeof k_checks[0]; i++) {
    vr_settings_t t;
    vr_settings_init(&t);
    snprintf(t.model, sizeof t.model, "%s", k_checks[i].model);
    snprintf(t.device, sizeof t.device, "%s", k_checks[i].device);
    snprintf(t.dtype, sizeof t.dtype, "%s", k_checks[i].dtype);
    snprintf(t.reward, sizeof t.reward, "%s", k_checks[i].reward);
    t.ring_slots = k_checks[i].ring_slots;
    if (k_checks[i].want && strstr(k_checks[i].want, "--pid-file")) snprintf(t.pid_file, sizeof t.pid_file, "/nonexistent/dir/vr.pid");
    err[0] = 0;
    int rc = vr_settings_check(&t, err, sizeof err);
    if (!k_checks[i].want && rc != 0) fail_msg("check %zu: rc %d (%s)", i, rc, err);
    if (k_checks[i].want && (rc != VR_ERR_INVAL || !strstr(err, k_checks[i].want)))
      fail_msg("check %zu: rc %d, error '%s' lacks '%s'", i, rc, err, k_checks[i].want);
  }

  char path[] = "/tmp/vr_settings_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  const char *text = "---\n# comment\nport: 9001\nmax-wait-us = 250  # inline\nreward: \"model:0.7, gsm8k:0.3\"\n"
                     "\n  truncate: left\ncuda_exact_size: off\n";
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  vr_settings_init(&s);
  assert_int_equal(vr_settings_load_file(&s, path), 0);
  assert_int_equal(s.port, 9001);
  assert_int_equal(s.max_wait_us, 250);
  assert_string_equal(s.reward, "model:0.7, gsm8k:0.3");
  assert_int_equal(s.truncate, VR_TRUNCATE_LEFT);
  assert_int_equal(s.cuda.exact_size, 0);
  /* flags override the file */
  char *argv[] = {"srv", "--config", path, "--port=9002", "--max-wait-us", "7", "--model", "checksum", NULL};
  vr_settings_init(&s);
  assert_int_equal(vr_settings_parse(&s, 8, argv), 0);
  assert_int_equal(s.port, 9002);
  assert_int_equal(s.max_wait_us, 7);
  assert_int_equal(s.truncate, VR_TRUNCATE_LEFT);
  char *bad_argv[] = {"srv", "--port", NULL};
  assert_int_equal(vr_settings_parse(&s, 2, bad_argv), VR_ERR_INVAL);
  unlink(path);
}

static void assert_has(const char *text, const char *line) {
  if (!strstr(text, line)) fail_msg("missing from the exposition: %s", line);
}

static void test_metrics_render(void **state) {
  (void)state;
  static vr_metrics_t m; /* large: not on the stack */
  const char *names[] = {"model"};
  vr_metrics_init(&m, 1, names, NULL);
  vr_metrics_set_info(&m, "cu\"da\\0\n", NULL);
  for (int i = 0; i < 3; i++) vr_metrics_http_response(&m, 200);
  vr_metrics_http_response(&m, 418);
  vr_metrics_http_response(&m, 99);  /* outside 100 .. 599: dropped */
  vr_metrics_http_response(&m, 600);
  vr_metrics_queue_wait(&m, VR_TRANSPORT_HTTP, 0.003);
  vr_metrics_queue_wait(&m, VR_TRANSPORT_HTTP, 0.0004);
  vr_metrics_gauges_t g = {0};
  char *text = vr_metrics_render(&m, &g, NULL);
  assert_non_null(text);
  assert_has(text, "verl_reward_build_info{version=\"");
  assert_has(text, ",device=\"cu\\\"da\\\\0\\n\",model=\"none\"} 1\n");
  assert_has(text, "verl_reward_http_responses_total{code=\"200\"} 3\n");
  assert_has(text, "verl_reward_http_responses_total{code=\"418\"} 1\n");
  assert_has(text, "verl_reward_http_responses_total{code=\"404\"} 0\n"); /* the fixed set, before any */
  assert_null(strstr(text, "code=\"99\""));
  assert_null(strstr(text, "code=\"600\""));
  assert_null(strstr(text, "xx\""));
  assert_has(text, "verl_reward_request_queue_wait_seconds_bucket{transport=\"http\",le=\"0.0005\"} 1\n");
  assert_has(text, "verl_reward_request_queue_wait_seconds_bucket{transport=\"http\",le=\"0.005\"} 2\n");
  assert_has(text, "verl_reward_request_queue_wait_seconds_bucket{transport=\"http\",le=\"+Inf\"} 2\n");
  assert_has(text, "verl_reward_request_queue_wait_seconds_count{transport=\"http\"} 2\n");
  assert_has(text, "verl_reward_request_queue_wait_seconds_count{transport=\"shm\"} 0\n");
  assert_null(strstr(text, "process_")); /* have_process 0: left out */
  free(text);

  assert_int_equal(vr_metrics_process_stats(&g.process), 0);
  g.have_process = 1;
  assert_true(g.process.resident_bytes > 0 && g.process.virtual_bytes >= g.process.resident_bytes);
  assert_true(g.process.open_fds >= 3 && g.process.open_fds <= g.process.max_fds);
  assert_true(g.process.start_time_s > 1.5e9 && g.process.cpu_seconds >= 0);
  text = vr_metrics_render(&m, &g, NULL);
  assert_non_null(text);
  assert_has(text, "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total ");
  assert_has(text, "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds ");
  free(text);
}

enum { OBS_THREADS = 4, OBS_EACH = 50000 };

static void *observe_many(void *arg) {
  vr_metrics_t *m = arg;
  for (int i = 0; i < OBS_EACH; i++) {
    vr_metrics_queue_wait(m, VR_TRANSPORT_SHM, (i & 1) ? 0.25 : 2.0); /* exact in binary: sums are exact */
    vr_metrics_http_response(m, 200);
  }
  return NULL;
}

/* Concurrent updates lose nothing: counts, buckets and sums are exact after the threads join. */
static void test_metrics_threads(void **state) {
  (void)state;
  static vr_metrics_t m;
  vr_metrics_init(&m, 0, NULL, NULL);
  pthread_t t[OBS_THREADS];
  for (int i = 0; i < OBS_THREADS; i++) assert_int_equal(pthread_create(&t[i], NULL, observe_many, &m), 0);
  for (int i = 0; i < OBS_THREADS; i++) pthread_join(t[i], NULL);
  vr_metrics_gauges_t g = {0};
  char *text = vr_metrics_render(&m, &g, NULL);
  assert_non_null(text);
  assert_has(text, "verl_reward_http_responses_total{code=\"200\"} 200000\n");
  assert_has(text, "verl_reward_request_queue_wait_seconds_bucket{transport=\"shm\",le=\"0.25\"} 100000\n");
  assert_has(text, "verl_reward_request_queue_wait_seconds_bucket{transport=\"shm\",le=\"1\"} 100000\n");
  assert_has(text, "verl_reward_request_queue_wait_seconds_bucket{transport=\"shm\",le=\"2.5\"} 200000\n");
  assert_has(text, "verl_reward_request_queue_wait_seconds_sum{transport=\"shm\"} 225000\n");
  assert_has(text, "verl_reward_request_queue_wait_seconds_count{transport=\"shm\"} 200000\n");
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_json_valid),     cmocka_unit_test(test_json_bad),
      cmocka_unit_test(test_json_python_reading),
      cmocka_unit_test(test_msgpack_valid),  cmocka_unit_test(test_msgpack_hostile),
      cmocka_unit_test(test_flat_form),
      cmocka_unit_test(test_fuzz_bodies),    cmocka_unit_test(test_text_bodies),
      cmocka_unit_test(test_settings),
      cmocka_unit_test(test_metrics_render), cmocka_unit_test(test_metrics_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
