/* vr_tok_norm.c: tokenizer.json normalizers, as Hugging Face tokenizers applies them.
 *
 * Precompiled (SentencePiece's charsmap) format, as base64 in "precompiled_charsmap":
 *   u32 LE  trie_size (bytes)
 *   trie_size bytes: a Darts-clone double array of u32 LE units; a unit's fields:
 *     has_leaf = bit 8; value = bits 0..30; label = unit & (1<<31 | 0xFF);
 *     offset = (unit >> 10) << ((unit & (1 << 9)) >> 6)
 *   the rest: NUL-terminated replacement strings; a key's value is the byte offset of its string.
 * Text is taken grapheme by grapheme (extended clusters): a grapheme shorter than 6 bytes whose
 * bytes start with a key is replaced whole by the string of the shortest such key (HF's
 * spm_precompiled takes results[0] of the common-prefix search); otherwise each code point
 * is looked up alone. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "verl_reward/status.h"
#include "vr_tok_internal.h"

static int b64_val(int c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Decodes standard base64 (with or without padding). NULL on bad input or no memory. */
static unsigned char *b64_decode(const char *s, size_t *outn) {
  size_t n = strlen(s);
  unsigned char *o = malloc(n / 4 * 3 + 3);
  if (!o) return NULL;
  size_t k = 0;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '=') break;
    int v = b64_val((unsigned char)s[i]);
    if (v < 0) {
      free(o);
      return NULL;
    }
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      o[k++] = (unsigned char)(acc >> bits);
    }
  }
  *outn = k;
  return o;
}

static int parse_precompiled(const cJSON *j, const char *file, vr_tok_norm_t *nm, char *err, size_t errlen) {
  const char *b = vr_tok_jstr(j, "precompiled_charsmap");
  if (!b) {
    vr_tok_seterr(err, errlen, "%s: normalizer Precompiled: precompiled_charsmap is missing or not a string", file);
    return VR_ERR_MODEL_FORMAT;
  }
  size_t n = 0;
  unsigned char *raw = b64_decode(b, &n);
  if (!raw) {
    vr_tok_seterr(err, errlen, "%s: normalizer Precompiled: precompiled_charsmap is not base64", file);
    return VR_ERR_MODEL_FORMAT;
  }
  uint32_t tsz = n >= 4 ? (uint32_t)raw[0] | (uint32_t)raw[1] << 8 | (uint32_t)raw[2] << 16 | (uint32_t)raw[3] << 24 : 0;
  if (n < 4 || tsz % 4 || tsz > n - 4 || tsz < 4) {
    free(raw);
    vr_tok_seterr(err, errlen, "%s: normalizer Precompiled: charsmap of %zu bytes has a trie size %u that does not fit",
                  file, n, tsz);
    return VR_ERR_MODEL_FORMAT;
  }
  nm->trie_n = tsz / 4;
  nm->trie = malloc(tsz);
  nm->normalized_n = n - 4 - tsz;
  nm->normalized = malloc(nm->normalized_n + 1);
  if (!nm->trie || !nm->normalized) {
    free(raw);
    return VR_ERR_NOMEM;
  }
  for (size_t i = 0; i < nm->trie_n; i++) {
    const unsigned char *u = raw + 4 + 4 * i;
    nm->trie[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
  }
  memcpy(nm->normalized, raw + 4 + tsz, nm->normalized_n);
  nm->normalized[nm->normalized_n] = 0;
  free(raw);
  return 0;
}

/* Shortest key that is a prefix of s[0..n): its replacement (NUL-terminated) or NULL. Every array
 * index is bounds-checked: the charsmap is untrusted. */
static const char *precompiled_lookup(const vr_tok_norm_t *nm, const unsigned char *s, size_t n) {
  const uint32_t *a = nm->trie;
  size_t sz = nm->trie_n;
  size_t pos = 0;
  uint32_t unit = a[0];
  pos ^= (size_t)((unit >> 10) << ((unit & (1u << 9)) >> 6));
  for (size_t i = 0; i < n; i++) {
    unsigned c = s[i];
    if (!c) break;
    pos ^= c;
    if (pos >= sz) return NULL;
    unit = a[pos];
    if ((unit & ((1u << 31) | 0xFFu)) != c) return NULL;
    pos ^= (size_t)((unit >> 10) << ((unit & (1u << 9)) >> 6));
    if (pos >= sz) return NULL;
    if ((unit >> 8) & 1u) {
      uint32_t v = a[pos] & ((1u << 31) - 1);
      if (v >= nm->normalized_n) return NULL;
      return nm->normalized + v;
    }
  }
  return NULL;
}

static int apply_precompiled(const vr_tok_norm_t *nm, const char *s, size_t n, vr_tok_buf_t *out) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    /* one extended grapheme cluster [i, j) */
    size_t l;
    utf8proc_int32_t prev = (utf8proc_int32_t)vr_tok_utf8_dec(p + i, &l);
    utf8proc_int32_t state = 0;
    size_t j = i + l;
    while (j < n) {
      size_t l2;
      utf8proc_int32_t cp = (utf8proc_int32_t)vr_tok_utf8_dec(p + j, &l2);
      if (utf8proc_grapheme_break_stateful(prev, cp, &state)) break;
      prev = cp;
      j += l2;
    }
    const char *r = j - i < 6 ? precompiled_lookup(nm, p + i, j - i) : NULL;
    if (r) {
      if (vr_tok_buf_put(out, r, strlen(r))) return VR_ERR_NOMEM;
    } else {
      for (size_t k = i; k < j;) {
        size_t lk = vr_tok_utf8_len(p[k]);
        const char *rk = precompiled_lookup(nm, p + k, lk);
        if (rk ? vr_tok_buf_put(out, rk, strlen(rk)) : vr_tok_buf_put(out, s + k, lk)) return VR_ERR_NOMEM;
        k += lk;
      }
    }
    i = j;
  }
  return 0;
}

static int all_ascii(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] >= 0x80) return 0;
  return 1;
}

static int apply_unicode(int opts, const char *s, size_t n, vr_tok_buf_t *out) {
  if (all_ascii(s, n)) return vr_tok_buf_put(out, s, n);
  utf8proc_uint8_t *dst = NULL;
  utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, opts);
  if (r < 0) return r == UTF8PROC_ERROR_NOMEM ? VR_ERR_NOMEM : VR_ERR_INVAL;
  int rc = vr_tok_buf_put(out, dst, (size_t)r);
  free(dst);
  return rc;
}

typedef struct repl_st {
  const char *s;
  size_t last;
  const vr_tok_norm_t *nm;
  vr_tok_buf_t *out;
} repl_st_t;

static int repl_cb(void *u, size_t a, size_t e) {
  repl_st_t *st = u;
  if (vr_tok_buf_put(st->out, st->s + st->last, a - st->last) ||
      vr_tok_buf_put(st->out, st->nm->content, st->nm->content_n))
    return VR_ERR_NOMEM;
  st->last = e;
  return 0;
}

int vr_tok_norm_apply(const vr_tok_norm_t *nm, vr_tok_ctx_t *c, const char *s, size_t n, vr_tok_buf_t *out) {
  const unsigned char *p = (const unsigned char *)s;
  switch (nm->type) {
  case VR_TOK_NORM_NFC: return apply_unicode(UTF8PROC_STABLE | UTF8PROC_COMPOSE, s, n, out);
  case VR_TOK_NORM_NFD: return apply_unicode(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, s, n, out);
  case VR_TOK_NORM_NFKC: return apply_unicode(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, s, n, out);
  case VR_TOK_NORM_NFKD: return apply_unicode(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, s, n, out);
  case VR_TOK_NORM_LOWERCASE:
    for (size_t i = 0; i < n;) {
      size_t l;
      uint32_t cp = vr_tok_utf8_dec(p + i, &l);
      if (vr_tok_lower_cp(out, cp)) return VR_ERR_NOMEM;
      i += l;
    }
    return 0;
  case VR_TOK_NORM_STRIP_ACCENTS:
    for (size_t i = 0; i < n;) {
      size_t l;
      uint32_t cp = vr_tok_utf8_dec(p + i, &l);
      utf8proc_category_t k = cp < 0x300 ? UTF8PROC_CATEGORY_LL : utf8proc_category((utf8proc_int32_t)cp);
      if (k != UTF8PROC_CATEGORY_MN && k != UTF8PROC_CATEGORY_MC && k != UTF8PROC_CATEGORY_ME &&
          vr_tok_buf_put(out, s + i, l))
        return VR_ERR_NOMEM;
      i += l;
    }
    return 0;
  case VR_TOK_NORM_BERT: {
    vr_tok_buf_t *t = &c->tmp;
    t->n = 0;
    for (size_t i = 0; i < n;) {
      size_t l;
      uint32_t cp = vr_tok_utf8_dec(p + i, &l);
      i += l;
      if (nm->clean_text) {
        int ws = cp == '\t' || cp == '\n' || cp == '\r' || vr_tok_is_whitespace(cp);
        int ctl = !(cp == '\t' || cp == '\n' || cp == '\r') && vr_tok_is_other(cp);
        if (cp == 0 || cp == 0xFFFD || ctl) continue;
        if (ws) cp = ' ';
      }
      if (nm->chinese && vr_tok_is_chinese(cp)) {
        if (vr_tok_buf_putc(t, ' ') || vr_tok_buf_put_cp(t, cp) || vr_tok_buf_putc(t, ' ')) return VR_ERR_NOMEM;
      } else if (vr_tok_buf_put_cp(t, cp)) {
        return VR_ERR_NOMEM;
      }
    }
    if (nm->strip_accents) {
      vr_tok_buf_t *t2 = &c->tmp2;
      t2->n = 0;
      int rc = apply_unicode(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, t->p ? t->p : "", t->n, t2);
      if (rc) return rc;
      t->n = 0;
      const unsigned char *q = (const unsigned char *)t2->p;
      for (size_t i = 0; i < t2->n;) {
        size_t l;
        uint32_t cp = vr_tok_utf8_dec(q + i, &l);
        if (!vr_tok_is_mark_nonspacing(cp) && vr_tok_buf_put(t, t2->p + i, l)) return VR_ERR_NOMEM;
        i += l;
      }
    }
    if (nm->lowercase) {
      const unsigned char *q = (const unsigned char *)t->p;
      for (size_t i = 0; i < t->n;) {
        size_t l;
        uint32_t cp = vr_tok_utf8_dec(q + i, &l);
        if (vr_tok_lower_cp(out, cp)) return VR_ERR_NOMEM;
        i += l;
      }
      return 0;
    }
    return vr_tok_buf_put(out, t->p ? t->p : "", t->n);
  }
  case VR_TOK_NORM_REPLACE: {
    repl_st_t st = {s, 0, nm, out};
    int rc = vr_tok_re_each(nm->re, c->re, s, n, repl_cb, &st);
    if (rc) return rc;
    return vr_tok_buf_put(out, s + st.last, n - st.last);
  }
  case VR_TOK_NORM_PREPEND:
    if (n && vr_tok_buf_put(out, nm->content, nm->content_n)) return VR_ERR_NOMEM;
    return vr_tok_buf_put(out, s, n);
  case VR_TOK_NORM_STRIP: {
    size_t a = 0, e = n;
    if (nm->left) {
      while (a < e) {
        size_t l;
        uint32_t cp = vr_tok_utf8_dec(p + a, &l);
        if (!vr_tok_is_whitespace(cp)) break;
        a += l;
      }
    }
    if (nm->right) {
      while (e > a) {
        size_t k = e - 1;
        while (k > a && (p[k] & 0xC0) == 0x80) k--;
        size_t l;
        uint32_t cp = vr_tok_utf8_dec(p + k, &l);
        if (!vr_tok_is_whitespace(cp)) break;
        e = k;
      }
    }
    return vr_tok_buf_put(out, s + a, e - a);
  }
  case VR_TOK_NORM_PRECOMPILED: return apply_precompiled(nm, s, n, out);
  case VR_TOK_NORM_SEQUENCE: {
    /* each step reads the previous step's text; two private buffers alternate */
    vr_tok_buf_t x = {0}, y = {0};
    int rc = vr_tok_buf_put(&x, s, n);
    for (size_t i = 0; !rc && i < nm->nsub; i++) {
      y.n = 0;
      rc = vr_tok_buf_reserve(&y, 1);
      if (!rc) rc = vr_tok_norm_apply(nm->sub[i], c, x.p, x.n, &y);
      vr_tok_buf_t t = x;
      x = y;
      y = t;
    }
    if (!rc) rc = vr_tok_buf_put(out, x.p, x.n);
    vr_tok_buf_free(&x);
    vr_tok_buf_free(&y);
    return rc;
  }
  }
  return VR_ERR_INTERNAL;
}

void vr_tok_norm_free(vr_tok_norm_t *n) {
  if (!n) return;
  vr_tok_re_free(n->re);
  free(n->content);
  free(n->trie);
  free(n->normalized);
  for (size_t i = 0; i < n->nsub; i++) vr_tok_norm_free(n->sub[i]);
  free(n->sub);
  free(n);
}

int vr_tok_norm_parse(const cJSON *j, const char *file, vr_tok_norm_t **out, char *err, size_t errlen) {
  *out = NULL;
  const char *type = vr_tok_jstr(j, "type");
  if (!type) {
    vr_tok_seterr(err, errlen, "%s: normalizer: no \"type\"", file);
    return VR_ERR_MODEL_FORMAT;
  }
  vr_tok_norm_t *nm = calloc(1, sizeof *nm);
  if (!nm) return VR_ERR_NOMEM;
  int rc = 0;
  if (!strcmp(type, "NFC")) nm->type = VR_TOK_NORM_NFC;
  else if (!strcmp(type, "NFD")) nm->type = VR_TOK_NORM_NFD;
  else if (!strcmp(type, "NFKC")) nm->type = VR_TOK_NORM_NFKC;
  else if (!strcmp(type, "NFKD")) nm->type = VR_TOK_NORM_NFKD;
  else if (!strcmp(type, "Lowercase")) nm->type = VR_TOK_NORM_LOWERCASE;
  else if (!strcmp(type, "StripAccents")) nm->type = VR_TOK_NORM_STRIP_ACCENTS;
  else if (!strcmp(type, "BertNormalizer")) {
    nm->type = VR_TOK_NORM_BERT;
    nm->clean_text = vr_tok_jbool(j, "clean_text", 1);
    nm->chinese = vr_tok_jbool(j, "handle_chinese_chars", 1);
    nm->lowercase = vr_tok_jbool(j, "lowercase", 1);
    nm->strip_accents = vr_tok_jbool(j, "strip_accents", nm->lowercase); /* null: follows lowercase */
    if (nm->clean_text < 0 || nm->chinese < 0 || nm->lowercase < 0 || nm->strip_accents < 0) {
      vr_tok_seterr(err, errlen, "%s: normalizer BertNormalizer: a flag is not a boolean", file);
      rc = VR_ERR_MODEL_FORMAT;
    }
  } else if (!strcmp(type, "Replace")) {
    nm->type = VR_TOK_NORM_REPLACE;
    rc = vr_tok_jpattern(j, file, "normalizer Replace", &nm->re, err, errlen);
    if (!rc && vr_tok_jdup(j, "content", &nm->content, &nm->content_n)) rc = VR_ERR_NOMEM;
    if (!rc && !nm->content) {
      vr_tok_seterr(err, errlen, "%s: normalizer Replace: content is missing or not a string", file);
      rc = VR_ERR_MODEL_FORMAT;
    }
  } else if (!strcmp(type, "Prepend")) {
    nm->type = VR_TOK_NORM_PREPEND;
    if (vr_tok_jdup(j, "prepend", &nm->content, &nm->content_n)) rc = VR_ERR_NOMEM;
    if (!rc && !nm->content) {
      vr_tok_seterr(err, errlen, "%s: normalizer Prepend: prepend is missing or not a string", file);
      rc = VR_ERR_MODEL_FORMAT;
    }
  } else if (!strcmp(type, "Strip")) {
    nm->type = VR_TOK_NORM_STRIP;
    nm->left = vr_tok_jbool(j, "strip_left", 1);
    nm->right = vr_tok_jbool(j, "strip_right", 1);
    if (nm->left < 0 || nm->right < 0) {
      vr_tok_seterr(err, errlen, "%s: normalizer Strip: strip_left/strip_right not a boolean", file);
      rc = VR_ERR_MODEL_FORMAT;
    }
  } else if (!strcmp(type, "Precompiled")) {
    nm->type = VR_TOK_NORM_PRECOMPILED;
    rc = parse_precompiled(j, file, nm, err, errlen);
  } else if (!strcmp(type, "Sequence")) {
    nm->type = VR_TOK_NORM_SEQUENCE;
    const cJSON *arr, *e;
    rc = vr_tok_jlist(j, "normalizers", file, "normalizer", &arr, &nm->sub, sizeof *nm->sub, err, errlen);
    if (!rc) cJSON_ArrayForEach(e, arr) {
        if ((rc = vr_tok_norm_parse(e, file, &nm->sub[nm->nsub], err, errlen))) break;
        nm->nsub++;
      }
  } else {
    vr_tok_seterr(err, errlen, "%s: normalizer %s is not supported (supported: NFC NFD NFKC NFKD Lowercase StripAccents "
                  "BertNormalizer Replace Prepend Strip Precompiled Sequence)", file, type);
    rc = VR_ERR_UNSUPPORTED;
  }
  if (rc) {
    vr_tok_norm_free(nm);
    return rc;
  }
  *out = nm;
  return 0;
}
