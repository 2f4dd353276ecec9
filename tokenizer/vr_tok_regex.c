/* vr_tok_regex.c: Oniguruma-compatible pattern translation + PCRE2 matching (see the header). */
#define _GNU_SOURCE 1 /* memmem */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "vr_tok_regex.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_tok_util.h"

struct vr_tok_re {
  pcre2_code *code; /* NULL for a literal */
  int jit;
  char *lit;
  size_t litn;
};

struct vr_tok_re_scratch {
  pcre2_match_data *md;
  pcre2_match_context *mc;
  pcre2_jit_stack *js;
};

#define WS_MEMBERS "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define W_MEMBERS "\\p{L}\\p{M}\\p{N}\\p{Pc}"
#define H_MEMBERS "0-9a-fA-F"

char *vr_tok_re_translate(const char *pat, size_t n) {
  vr_tok_buf_t b = {0};
  int in_class = 0; /* depth of [...] */
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    char c = pat[i];
    if (c == '\\' && i + 1 < n) {
      char e = pat[i + 1];
      const char *mem = e == 's' || e == 'S' ? WS_MEMBERS : e == 'w' || e == 'W' ? W_MEMBERS
                      : e == 'h' || e == 'H' ? H_MEMBERS : NULL;
      int neg = e == 'S' || e == 'W' || e == 'H';
      if (mem && in_class && !neg) {
        rc = vr_tok_buf_put(&b, mem, strlen(mem));
      } else if (mem && !in_class) {
        rc = vr_tok_buf_put(&b, neg ? "[^" : "[", neg ? 2 : 1);
        if (!rc) rc = vr_tok_buf_put(&b, mem, strlen(mem));
        if (!rc) rc = vr_tok_buf_putc(&b, ']');
      } else {
        rc = vr_tok_buf_put(&b, pat + i, 2); /* any other escape: same meaning in both */
      }
      i++;
      continue;
    }
    if (c == '[') {
      in_class++;
      rc = vr_tok_buf_putc(&b, c);
      /* a ']' right after '[' or '[^' is a literal member */
      if (!rc && i + 1 < n && pat[i + 1] == '^') rc = vr_tok_buf_putc(&b, pat[++i]);
      if (!rc && i + 1 < n && pat[i + 1] == ']') rc = vr_tok_buf_put(&b, "\\]", 2), i++;
      continue;
    }
    if (c == ']' && in_class) in_class--;
    rc = vr_tok_buf_putc(&b, c);
  }
  if (rc || vr_tok_buf_putc(&b, 0)) {
    vr_tok_buf_free(&b);
    return NULL;
  }
  return b.p;
}

int vr_tok_re_compile(const char *pat, size_t n, int literal, vr_tok_re_t **out, char *err, size_t errlen) {
  vr_tok_re_t *re = calloc(1, sizeof *re);
  if (!re) return VR_ERR_NOMEM;
  if (literal) {
    re->lit = malloc(n + 1);
    if (!re->lit) {
      free(re);
      return VR_ERR_NOMEM;
    }
    memcpy(re->lit, pat, n);
    re->lit[n] = 0;
    re->litn = n;
    *out = re;
    return 0;
  }
  char *t = vr_tok_re_translate(pat, n);
  if (!t) {
    free(re);
    return VR_ERR_NOMEM;
  }
  int ec;
  PCRE2_SIZE eo;
  re->code = pcre2_compile((PCRE2_SPTR)t, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
  if (!re->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(ec, msg, sizeof msg);
    vr_tok_seterr(err, errlen, "regex '%.200s' does not compile (PCRE2 at offset %zu of '%.200s': %s)", pat,
                  (size_t)eo, t, (char *)msg);
    free(t);
    free(re);
    return VR_ERR_UNSUPPORTED;
  }
  free(t);
  re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
  *out = re;
  return 0;
}

void vr_tok_re_free(vr_tok_re_t *re) {
  if (!re) return;
  if (re->code) pcre2_code_free(re->code);
  free(re->lit);
  free(re);
}

vr_tok_re_scratch_t *vr_tok_re_scratch_new(void) {
  vr_tok_re_scratch_t *sc = calloc(1, sizeof *sc);
  if (!sc) return NULL;
  sc->md = pcre2_match_data_create(1, NULL);
  sc->mc = pcre2_match_context_create(NULL);
  sc->js = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
  if (!sc->md || !sc->mc || !sc->js) {
    vr_tok_re_scratch_free(sc);
    return NULL;
  }
  pcre2_jit_stack_assign(sc->mc, NULL, sc->js);
  return sc;
}

void vr_tok_re_scratch_free(vr_tok_re_scratch_t *sc) {
  if (!sc) return;
  if (sc->md) pcre2_match_data_free(sc->md);
  if (sc->mc) pcre2_match_context_free(sc->mc);
  if (sc->js) pcre2_jit_stack_free(sc->js);
  free(sc);
}

int vr_tok_re_each(const vr_tok_re_t *re, vr_tok_re_scratch_t *sc, const char *s, size_t n, vr_tok_re_cb cb,
                   void *user) {
  if (re->lit) {
    if (!re->litn) return 0;
    size_t i = 0;
    while (i + re->litn <= n) {
      const char *f = memmem(s + i, n - i, re->lit, re->litn);
      if (!f) break;
      size_t a = (size_t)(f - s);
      int r = cb(user, a, a + re->litn);
      if (r) return r;
      i = a + re->litn;
    }
    return 0;
  }
  size_t pos = 0;
  size_t last_end = (size_t)-1;
  while (pos <= n) {
    int rc = re->jit ? pcre2_jit_match(re->code, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, sc->md, sc->mc)
                     : pcre2_match(re->code, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, sc->md, sc->mc);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) return VR_ERR_INTERNAL;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sc->md);
    size_t a = ov[0], e = ov[1];
    if (a == e && a == last_end) { /* empty match right after the last one: step one char */
      if (a >= n) return 0;
      pos = a + vr_tok_utf8_len((unsigned char)s[a]);
      continue;
    }
    int r = cb(user, a, e);
    if (r) return r;
    last_end = e;
    if (e == a) {
      if (a >= n) return 0;
      pos = a + vr_tok_utf8_len((unsigned char)s[a]);
    } else {
      pos = e;
    }
  }
  return 0;
}
