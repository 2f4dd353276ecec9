/* test_tok_golden: every case of a golden file (tools/fixtures/make_tokenizer_fixtures.py, from
 * transformers 5 + tokenizers 0.23) equal, id for id, and every decode equal.
 *
 *   test_tok_golden TOKENIZER_DIR GOLDEN.json
 * Checks per text: encode with / without special tokens (with a fresh scratch, and with one
 * scratch shared by all texts, whose word cache is warm), decode of both (with and without
 * skip_special_tokens), hence decode(encode(x)) == x wherever HF's is; an HF error expects an
 * error. Per decode case: decode of ids not produced by encode. Prints every mismatch (up to a
 * limit) and exits 1 when there is any; a missing file is a failure. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vr_tokenizer.h"
#include "vr_test_file.h"

static int fails, shown, nul_cases;

static void put_cp(char *o, size_t *k, unsigned c) {
  if (c < 0x80) {
    o[(*k)++] = (char)c;
  } else if (c < 0x800) {
    o[(*k)++] = (char)(0xC0 | (c >> 6));
    o[(*k)++] = (char)(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    o[(*k)++] = (char)(0xE0 | (c >> 12));
    o[(*k)++] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[(*k)++] = (char)(0x80 | (c & 0x3F));
  } else {
    o[(*k)++] = (char)(0xF0 | (c >> 18));
    o[(*k)++] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[(*k)++] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[(*k)++] = (char)(0x80 | (c & 0x3F));
  }
}

static unsigned hex4(const char *p) {
  char h[5] = {p[0], p[1], p[2], p[3], 0};
  return (unsigned)strtoul(h, NULL, 16);
}

/* cJSON strings end at U+0000. When the golden text holds one (its JSON in buf goes on with
 * \u0000 after what cJSON kept), decode the JSON string from buf ourselves: malloc'd, *len set;
 * NULL for the other texts. */
static char *text_with_nul(const char *buf, const cJSON *item, size_t *len) {
  char *j = cJSON_PrintUnformatted(item);
  size_t n = strlen(j);
  j[n - 1] = 0; /* drop the closing quote */
  char *needle = malloc(n + 16);
  snprintf(needle, n + 16, "%s\\u0000", j);
  const char *at = strstr(buf, needle);
  free(needle);
  free(j);
  if (!at) return NULL;
  const char *p = at + 1;
  char *o = malloc(strlen(p) * 4 + 1);
  size_t k = 0;
  while (*p && *p != '"') {
    if (*p != '\\') {
      o[k++] = *p++;
      continue;
    }
    p++;
    char e = *p++;
    if (e == 'u') {
      unsigned c = hex4(p);
      p += 4;
      if (c >= 0xD800 && c < 0xDC00 && p[0] == '\\' && p[1] == 'u') {
        c = 0x10000 + ((c - 0xD800) << 10) + (hex4(p + 2) - 0xDC00);
        p += 6;
      }
      put_cp(o, &k, c);
    } else {
      o[k++] = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b' : e == 'f' ? '\f' : e;
    }
  }
  *len = k;
  return o;
}

static void show_ids(const char *what, const int32_t *v, size_t n) {
  fprintf(stderr, "    %s (%zu):", what, n);
  for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", v[i]);
  fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

static void fail(const char *text, const char *fmt, const char *detail) {
  fails++;
  if (shown++ >= 30) return;
  fprintf(stderr, "MISMATCH text=\"%.80s\"%s: ", text, strlen(text) > 80 ? "..." : "");
  fprintf(stderr, fmt, detail);
  fputc('\n', stderr);
}

static int32_t *json_ids(const cJSON *a, size_t *n) {
  *n = (size_t)cJSON_GetArraySize(a);
  int32_t *v = malloc((*n ? *n : 1) * sizeof *v);
  size_t k = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, a) v[k++] = (int32_t)e->valuedouble;
  return v;
}

/* sc NULL: a fresh scratch (vr_tok_encode); else a scratch shared by all texts, whose word cache
 * then holds every earlier text's words */
static void check_encode(const vr_tok_t *tok, vr_tok_scratch_t *sc, const char *text, size_t tlen, int special,
                         const cJSON *want) {
  int32_t *ids = NULL;
  size_t n = 0;
  char err[512];
  if (sc ? vr_tok_encode_with(tok, sc, text, tlen, special, &ids, &n, err, sizeof err)
         : vr_tok_encode(tok, text, tlen, special, &ids, &n, err, sizeof err)) {
    fail(text, "encode failed: %s", err);
    return;
  }
  size_t wn;
  int32_t *w = json_ids(want, &wn);
  if (wn != n || (n && memcmp(w, ids, n * sizeof *w))) {
    fail(text, "%s", special ? "ids (add_special_tokens=True) differ" : "ids (add_special_tokens=False) differ");
    if (shown <= 30) {
      show_ids("want", w, wn);
      show_ids("got ", ids, n);
    }
  }
  free(w);
  free(ids);
}

static void check_decode(const vr_tok_t *tok, const char *text, const cJSON *ids_j, int skip, const char *want) {
  size_t n;
  int32_t *ids = json_ids(ids_j, &n);
  char *out = NULL;
  size_t on = 0;
  char err[512];
  if (vr_tok_decode(tok, ids, n, skip, &out, &on, err, sizeof err)) {
    fail(text, "decode failed: %s", err);
  } else if (on != strlen(want) || memcmp(out, want, on)) {
    char d[600];
    snprintf(d, sizeof d, "skip=%d want \"%.200s\" got \"%.200s\"", skip, want, out);
    fail(text, "decode differs: %s", d);
  }
  free(out);
  free(ids);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s TOKENIZER_DIR GOLDEN.json\n", argv[0]);
    return 2;
  }
  char err[1024];
  vr_tok_t *tok = NULL;
  if (vr_tok_load(argv[1], &tok, err, sizeof err)) {
    fprintf(stderr, "FAIL: load %s: %s\n", argv[1], err);
    return 1;
  }
  size_t gn;
  char *g = vr_test_slurp(argv[2], &gn);
  cJSON *root = g ? cJSON_ParseWithLength(g, gn) : NULL;
  if (!root) {
    fprintf(stderr, "FAIL: golden file %s missing or not JSON\n", argv[2]);
    return 1;
  }
  const cJSON *cases = cJSON_GetObjectItem(root, "cases"), *c;
  vr_tok_scratch_t *shared = vr_tok_scratch_new();
  int ncases = 0;
  cJSON_ArrayForEach(c, cases) {
    const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
    if (cJSON_GetObjectItem(c, "error")) {
      int32_t *ids = NULL;
      size_t n;
      if (!vr_tok_encode(tok, text, strlen(text), 1, &ids, &n, err, sizeof err)) fail(text, "%s", "HF fails, we encode");
      free(ids);
      continue;
    }
    size_t tlen = strlen(text);
    char *whole = text_with_nul(g, cJSON_GetObjectItem(c, "text"), &tlen);
    ncases++;
    int had_nul = whole != NULL;
    nul_cases += had_nul;
    for (int pass = 0; pass < 3; pass++) { /* fresh scratch, then the shared one twice (warm cache) */
      check_encode(tok, pass ? shared : NULL, whole ? whole : text, tlen, 1, cJSON_GetObjectItem(c, "ids"));
      check_encode(tok, pass ? shared : NULL, whole ? whole : text, tlen, 0, cJSON_GetObjectItem(c, "ids_ns"));
    }
    free(whole);
    if (had_nul) continue; /* its decoded texts hold U+0000 too: cJSON cannot give them */
    check_decode(tok, text, cJSON_GetObjectItem(c, "ids"), 0, cJSON_GetObjectItem(c, "dec")->valuestring);
    check_decode(tok, text, cJSON_GetObjectItem(c, "ids"), 1, cJSON_GetObjectItem(c, "dec_skip")->valuestring);
    check_decode(tok, text, cJSON_GetObjectItem(c, "ids_ns"), 0, cJSON_GetObjectItem(c, "dec_ns")->valuestring);
  }
  int ndec = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "decode")) {
    if (cJSON_GetObjectItem(c, "error")) continue;
    ndec++;
    check_decode(tok, "(decode case)", cJSON_GetObjectItem(c, "ids"), 0, cJSON_GetObjectItem(c, "text")->valuestring);
    check_decode(tok, "(decode case)", cJSON_GetObjectItem(c, "ids"), 1,
                 cJSON_GetObjectItem(c, "text_skip")->valuestring);
  }
  printf("%s: %d texts (x9 checks; %d holding U+0000: encode only), %d decode cases (x2): %d mismatches\n", argv[1],
         ncases, nul_cases, ndec, fails);
  vr_tok_scratch_free(shared);
  cJSON_Delete(root);
  free(g);
  vr_tok_free(tok);
  return fails ? 1 : 0;
}
