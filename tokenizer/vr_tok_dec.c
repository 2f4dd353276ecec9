/* vr_tok_dec.c: decoders, each a decode_chain over the list of token strings as in Hugging Face
 * tokenizers; the final text is the concatenation of what the chain leaves. */
#define _GNU_SOURCE 1 /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_tok_internal.h"

int vr_tok_parse_metaspace(const cJSON *j, const char *file, const char *comp, uint32_t *rep,
                           vr_tok_prepend_t *scheme, char *err, size_t errlen);

int vr_tok_strs_push(vr_tok_strs_t *s, const char *p, size_t n) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    uint32_t *o = realloc(s->off, cap * sizeof *o);
    if (!o) return VR_ERR_NOMEM;
    s->off = o;
    uint32_t *l = realloc(s->len, cap * sizeof *l);
    if (!l) return VR_ERR_NOMEM;
    s->len = l;
    s->cap = cap;
  }
  if (s->buf.n + n + 1 > UINT32_MAX) return VR_ERR_NOMEM;
  s->off[s->n] = (uint32_t)s->buf.n;
  s->len[s->n] = (uint32_t)n;
  if (vr_tok_buf_put(&s->buf, p, n)) return VR_ERR_NOMEM;
  s->n++;
  return 0;
}

void vr_tok_strs_clear(vr_tok_strs_t *s) {
  s->n = 0;
  s->buf.n = 0;
}

void vr_tok_strs_free(vr_tok_strs_t *s) {
  vr_tok_buf_free(&s->buf);
  free(s->off);
  free(s->len);
  memset(s, 0, sizeof *s);
}

#define TOK(S, I) ((S)->buf.p + (S)->off[I])

/* Rust's s.replace(a, b) for a non-empty a (a, b NUL-terminated); an empty a (Rust would put b
 * between all characters; no real tokenizer has an empty suffix, pad or delimiter) changes nothing */
static int replace_all(vr_tok_buf_t *out, const char *s, size_t n, const char *a, const char *b) {
  size_t an = strlen(a), bn = strlen(b), i = 0;
  if (!an) return vr_tok_buf_put(out, s, n);
  while (i < n) {
    const char *f = an <= n - i ? memmem(s + i, n - i, a, an) : NULL;
    if (!f) break;
    if (vr_tok_buf_put(out, s + i, (size_t)(f - s) - i) || vr_tok_buf_put(out, b, bn)) return VR_ERR_NOMEM;
    i = (size_t)(f - s) + an;
  }
  return vr_tok_buf_put(out, s + i, n - i);
}

int vr_tok_cleanup(vr_tok_buf_t *out, const char *s, size_t n, int wordpiece) {
  static const char *const tf[][2] = {{" .", "."},   {" ?", "?"},   {" !", "!"},   {" ,", ","},   {" ' ", "'"},
                                      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  static const char *const wp[][2] = {{" .", "."},   {" ?", "?"},   {" !", "!"},          {" ,", ","},
                                      {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},     {" do not", " don't"},
                                      {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  const char *const(*t)[2] = wordpiece ? wp : tf;
  size_t k = wordpiece ? sizeof wp / sizeof wp[0] : sizeof tf / sizeof tf[0];
  vr_tok_buf_t a = {0}, b = {0};
  int rc = vr_tok_buf_put(&a, s, n);
  for (size_t i = 0; i < k && !rc; i++) {
    b.n = 0;
    rc = replace_all(&b, a.p, a.n, t[i][0], t[i][1]);
    vr_tok_buf_t x = a;
    a = b;
    b = x;
  }
  if (!rc) rc = vr_tok_buf_put(out, a.p, a.n);
  vr_tok_buf_free(&a);
  vr_tok_buf_free(&b);
  return rc;
}

typedef struct rstate {
  vr_tok_buf_t *out;
  const char *s;
  size_t last;
  const vr_tok_dec_t *d;
} rstate_t;

static int rcb(void *u, size_t a, size_t e) {
  rstate_t *r = u;
  if (vr_tok_buf_put(r->out, r->s + r->last, a - r->last) || vr_tok_buf_put(r->out, r->d->content, r->d->content_n))
    return VR_ERR_NOMEM;
  r->last = e;
  return 0;
}

static int one(const vr_tok_dec_t *d, vr_tok_ctx_t *c, const vr_tok_strs_t *in, vr_tok_strs_t *o) {
  vr_tok_buf_t *t = &c->tmp;
  int rc = 0;
  switch (d->type) {
  case VR_TOK_DEC_BYTELEVEL: {
    t->n = 0;
    for (size_t i = 0; i < in->n && !rc; i++) {
      const unsigned char *s = (const unsigned char *)TOK(in, i);
      size_t n = in->len[i], mark = t->n;
      for (size_t k = 0; k < n;) {
        size_t l;
        int b = vr_tok_bytelevel_byte(vr_tok_utf8_dec(s + k, &l));
        if (b < 0) { /* a char outside the table: the whole token as it is */
          t->n = mark;
          rc = vr_tok_buf_put(t, s, n);
          break;
        }
        if ((rc = vr_tok_buf_putc(t, (char)b))) break;
        k += l;
      }
    }
    if (rc) return rc;
    vr_tok_buf_t *t2 = &c->tmp2;
    t2->n = 0;
    if ((rc = vr_tok_utf8_lossy(t2, t->p ? t->p : "", t->n))) return rc;
    return vr_tok_strs_push(o, t2->p ? t2->p : "", t2->n);
  }
  case VR_TOK_DEC_METASPACE:
    for (size_t i = 0; i < in->n && !rc; i++) {
      const unsigned char *s = (const unsigned char *)TOK(in, i);
      t->n = 0;
      for (size_t k = 0; k < in->len[i] && !rc;) {
        size_t l;
        uint32_t cp = vr_tok_utf8_dec(s + k, &l);
        if (cp == d->strip_cp) {
          if (!(i == 0 && d->prepend_scheme != VR_TOK_PREPEND_NEVER)) rc = vr_tok_buf_putc(t, ' ');
        } else {
          rc = vr_tok_buf_put(t, s + k, l);
        }
        k += l;
      }
      if (!rc) rc = vr_tok_strs_push(o, t->p ? t->p : "", t->n);
    }
    return rc;
  case VR_TOK_DEC_WORDPIECE:
    for (size_t i = 0; i < in->n && !rc; i++) {
      const char *s = TOK(in, i);
      size_t n = in->len[i];
      t->n = 0;
      if (i) {
        if (n >= d->prefix_n && !memcmp(s, d->prefix, d->prefix_n)) { /* replacen(prefix, "", 1) at the start */
          s += d->prefix_n;
          n -= d->prefix_n;
        } else if ((rc = vr_tok_buf_putc(t, ' '))) {
          break;
        }
      }
      if ((rc = vr_tok_buf_put(t, s, n))) break;
      if (d->cleanup) {
        vr_tok_buf_t *t2 = &c->tmp2;
        t2->n = 0;
        if ((rc = vr_tok_cleanup(t2, t->p, t->n, 1))) break;
        rc = vr_tok_strs_push(o, t2->p ? t2->p : "", t2->n);
      } else {
        rc = vr_tok_strs_push(o, t->p ? t->p : "", t->n);
      }
    }
    return rc;
  case VR_TOK_DEC_BYTE_FALLBACK: {
    t->n = 0; /* pending bytes */
    for (size_t i = 0; i <= in->n && !rc; i++) {
      const char *s = i < in->n ? TOK(in, i) : NULL;
      int byte = -1;
      if (s && in->len[i] == 6 && !memcmp(s, "<0x", 3) && s[5] == '>') {
        unsigned v;
        char hex[3] = {s[3], s[4], 0};
        char *e;
        v = (unsigned)strtoul(hex, &e, 16);
        /* Rust's from_str_radix: two hex digits, no sign */
        if (*e == 0 && hex[0] != '+' && hex[0] != '-' && hex[0] != ' ' && hex[1] != ' ') byte = (int)v;
      }
      if (byte >= 0) {
        rc = vr_tok_buf_putc(t, (char)byte);
        continue;
      }
      if (t->n) {
        if (vr_tok_utf8_check(t->p, t->n) == t->n) {
          rc = vr_tok_strs_push(o, t->p, t->n);
        } else {
          for (size_t k = 0; k < t->n && !rc; k++) rc = vr_tok_strs_push(o, "\xEF\xBF\xBD", 3);
        }
        t->n = 0;
      }
      if (s && !rc) rc = vr_tok_strs_push(o, s, in->len[i]);
    }
    return rc;
  }
  case VR_TOK_DEC_FUSE:
    t->n = 0;
    for (size_t i = 0; i < in->n && !rc; i++) rc = vr_tok_buf_put(t, TOK(in, i), in->len[i]);
    return rc ? rc : vr_tok_strs_push(o, t->p ? t->p : "", t->n);
  case VR_TOK_DEC_STRIP:
    for (size_t i = 0; i < in->n && !rc; i++) {
      const unsigned char *s = (const unsigned char *)TOK(in, i);
      size_t n = in->len[i], a = 0, e = n;
      for (int k = 0; k < d->start && a < n; k++) {
        size_t l;
        if (vr_tok_utf8_dec(s + a, &l) != d->strip_cp) break;
        a += l;
      }
      for (int k = 0; k < d->stop && e > a; k++) {
        size_t b = e - 1;
        while (b > a && (s[b] & 0xC0) == 0x80) b--;
        size_t l;
        if (vr_tok_utf8_dec(s + b, &l) != d->strip_cp) break;
        e = b;
      }
      rc = vr_tok_strs_push(o, (const char *)s + a, e - a);
    }
    return rc;
  case VR_TOK_DEC_REPLACE:
    for (size_t i = 0; i < in->n && !rc; i++) {
      t->n = 0;
      rstate_t r = {t, TOK(in, i), 0, d};
      rc = vr_tok_re_each(d->re, c->re, r.s, in->len[i], rcb, &r);
      if (!rc) rc = vr_tok_buf_put(t, r.s + r.last, in->len[i] - r.last);
      if (!rc) rc = vr_tok_strs_push(o, t->p, t->n);
    }
    return rc;
  case VR_TOK_DEC_BPE:
    for (size_t i = 0; i < in->n && !rc; i++) {
      t->n = 0;
      rc = replace_all(t, TOK(in, i), in->len[i], d->suffix, i + 1 == in->n ? "" : " ");
      if (!rc) rc = vr_tok_strs_push(o, t->p ? t->p : "", t->n);
    }
    return rc;
  case VR_TOK_DEC_CTC:
    for (size_t i = 0; i < in->n && !rc; i++) {
      if (i && in->len[i] == in->len[i - 1] && !memcmp(TOK(in, i), TOK(in, i - 1), in->len[i])) continue; /* dedup */
      t->n = 0;
      rc = replace_all(t, TOK(in, i), in->len[i], d->pad, "");
      if (!rc && d->cleanup) {
        vr_tok_buf_t *t2 = &c->tmp2, t3 = {0};
        t2->n = 0;
        rc = vr_tok_cleanup(&t3, t->p ? t->p : "", t->n, 1);
        if (!rc) rc = replace_all(t2, t3.p ? t3.p : "", t3.n, d->delim, " ");
        vr_tok_buf_free(&t3);
        if (!rc && t2->n) rc = vr_tok_strs_push(o, t2->p, t2->n);
      } else if (!rc && t->n) {
        rc = vr_tok_strs_push(o, t->p, t->n);
      }
    }
    return rc;
  case VR_TOK_DEC_SEQUENCE: break;
  }
  return VR_ERR_INTERNAL;
}

int vr_tok_dec_apply(const vr_tok_dec_t *d, vr_tok_ctx_t *c, vr_tok_strs_t *toks) {
  if (d->type == VR_TOK_DEC_SEQUENCE) {
    for (size_t i = 0; i < d->nsub; i++) {
      int rc = vr_tok_dec_apply(d->sub[i], c, toks);
      if (rc) return rc;
    }
    return 0;
  }
  vr_tok_strs_t o = {0};
  int rc = one(d, c, toks, &o);
  if (rc) {
    vr_tok_strs_free(&o);
    return rc;
  }
  vr_tok_strs_free(toks);
  *toks = o;
  return 0;
}

void vr_tok_dec_free(vr_tok_dec_t *d) {
  if (!d) return;
  vr_tok_re_free(d->re);
  free(d->content);
  free(d->prefix);
  free(d->suffix);
  free(d->pad);
  free(d->delim);
  for (size_t i = 0; i < d->nsub; i++) vr_tok_dec_free(d->sub[i]);
  free(d->sub);
  free(d);
}

static int one_char(const char *s, uint32_t *cp) {
  size_t n = strlen(s), l;
  if (!n || vr_tok_utf8_check(s, n) != n || vr_tok_utf8_len((unsigned char)s[0]) != n) return -1;
  *cp = vr_tok_utf8_dec((const unsigned char *)s, &l);
  return 0;
}

static int jint(const cJSON *j, const char *key, int def, int *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
  if (!v || cJSON_IsNull(v)) {
    *out = def;
    return 0;
  }
  if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e6) return -1;
  *out = (int)v->valuedouble;
  return 0;
}

int vr_tok_dec_parse(const cJSON *j, const char *file, vr_tok_dec_t **out, char *err, size_t errlen) {
  *out = NULL;
  const char *type = vr_tok_jstr(j, "type");
  if (!type) {
    vr_tok_seterr(err, errlen, "%s: decoder: no \"type\"", file);
    return VR_ERR_MODEL_FORMAT;
  }
  vr_tok_dec_t *d = calloc(1, sizeof *d);
  if (!d) return VR_ERR_NOMEM;
  int rc = 0;
  if (!strcmp(type, "ByteLevel")) {
    d->type = VR_TOK_DEC_BYTELEVEL;
  } else if (!strcmp(type, "Metaspace")) {
    d->type = VR_TOK_DEC_METASPACE;
    rc = vr_tok_parse_metaspace(j, file, "decoder", &d->strip_cp, &d->prepend_scheme, err, errlen);
  } else if (!strcmp(type, "WordPiece")) {
    d->type = VR_TOK_DEC_WORDPIECE;
    if (vr_tok_jdup(j, "prefix", &d->prefix, &d->prefix_n)) rc = VR_ERR_NOMEM;
    if (!rc && !d->prefix) {
      d->prefix = strdup("##");
      d->prefix_n = 2;
      if (!d->prefix) rc = VR_ERR_NOMEM;
    }
    d->cleanup = vr_tok_jbool(j, "cleanup", 1);
  } else if (!strcmp(type, "ByteFallback")) {
    d->type = VR_TOK_DEC_BYTE_FALLBACK;
  } else if (!strcmp(type, "Fuse")) {
    d->type = VR_TOK_DEC_FUSE;
  } else if (!strcmp(type, "Strip")) {
    d->type = VR_TOK_DEC_STRIP;
    const char *ct = vr_tok_jstr(j, "content");
    if (!ct || one_char(ct, &d->strip_cp) || jint(j, "start", 0, &d->start) || jint(j, "stop", 0, &d->stop)) {
      vr_tok_seterr(err, errlen, "%s: decoder Strip: needs content (one character), start and stop (counts)", file);
      rc = VR_ERR_MODEL_FORMAT;
    }
  } else if (!strcmp(type, "Replace")) {
    d->type = VR_TOK_DEC_REPLACE;
    rc = vr_tok_jpattern(j, file, "decoder Replace", &d->re, err, errlen);
    if (!rc && vr_tok_jdup(j, "content", &d->content, &d->content_n)) rc = VR_ERR_NOMEM;
    if (!rc && !d->content) {
      vr_tok_seterr(err, errlen, "%s: decoder Replace: content is missing or not a string", file);
      rc = VR_ERR_MODEL_FORMAT;
    }
  } else if (!strcmp(type, "BPEDecoder")) {
    d->type = VR_TOK_DEC_BPE;
    if (vr_tok_jdup(j, "suffix", &d->suffix, &d->suffix_n)) rc = VR_ERR_NOMEM;
    if (!rc && !d->suffix) {
      d->suffix = strdup("</w>");
      d->suffix_n = 4;
      if (!d->suffix) rc = VR_ERR_NOMEM;
    }
  } else if (!strcmp(type, "CTC")) {
    d->type = VR_TOK_DEC_CTC;
    if (vr_tok_jdup(j, "pad_token", &d->pad, &d->pad_n) || vr_tok_jdup(j, "word_delimiter_token", &d->delim, &d->delim_n))
      rc = VR_ERR_NOMEM;
    if (!rc && !d->pad) d->pad = strdup("<pad>"), d->pad_n = 5;
    if (!rc && !d->delim) d->delim = strdup("|"), d->delim_n = 1;
    if (!rc && (!d->pad || !d->delim)) rc = VR_ERR_NOMEM;
    d->cleanup = vr_tok_jbool(j, "cleanup", 1);
  } else if (!strcmp(type, "Sequence")) {
    d->type = VR_TOK_DEC_SEQUENCE;
    const cJSON *arr, *e;
    rc = vr_tok_jlist(j, "decoders", file, "decoder", &arr, &d->sub, sizeof *d->sub, err, errlen);
    if (!rc) cJSON_ArrayForEach(e, arr) {
        if ((rc = vr_tok_dec_parse(e, file, &d->sub[d->nsub], err, errlen))) break;
        d->nsub++;
      }
  } else {
    vr_tok_seterr(err, errlen, "%s: decoder %s is not supported (supported: ByteLevel Metaspace WordPiece ByteFallback "
                  "Fuse Strip Replace BPEDecoder CTC Sequence)", file, type);
    rc = VR_ERR_UNSUPPORTED;
  }
  if (!rc && d->cleanup < 0) {
    vr_tok_seterr(err, errlen, "%s: decoder %s: cleanup is not a boolean", file, type);
    rc = VR_ERR_MODEL_FORMAT;
  }
  if (rc) {
    vr_tok_dec_free(d);
    return rc;
  }
  *out = d;
  return 0;
}
