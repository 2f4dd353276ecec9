/* vr_tok_util.c: buffer, hash map, UTF-8 and Unicode predicates (see vr_tok_util.h). */
#include "vr_tok_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "verl_reward/status.h"

int vr_tok_buf_reserve(vr_tok_buf_t *b, size_t extra) {
  if (b->n + extra <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < b->n + extra) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) return VR_ERR_NOMEM;
  b->p = p;
  b->cap = cap;
  return 0;
}

int vr_tok_buf_put(vr_tok_buf_t *b, const void *s, size_t n) {
  if (vr_tok_buf_reserve(b, n + 1)) return VR_ERR_NOMEM;
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
  return 0;
}

int vr_tok_buf_putc(vr_tok_buf_t *b, char c) { return vr_tok_buf_put(b, &c, 1); }

int vr_tok_buf_put_cp(vr_tok_buf_t *b, uint32_t c) {
  char u[4];
  size_t n;
  if (c < 0x80) {
    u[0] = (char)c;
    n = 1;
  } else if (c < 0x800) {
    u[0] = (char)(0xC0 | (c >> 6));
    u[1] = (char)(0x80 | (c & 0x3F));
    n = 2;
  } else if (c < 0x10000) {
    u[0] = (char)(0xE0 | (c >> 12));
    u[1] = (char)(0x80 | ((c >> 6) & 0x3F));
    u[2] = (char)(0x80 | (c & 0x3F));
    n = 3;
  } else {
    u[0] = (char)(0xF0 | (c >> 18));
    u[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    u[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    u[3] = (char)(0x80 | (c & 0x3F));
    n = 4;
  }
  return vr_tok_buf_put(b, u, n);
}

void vr_tok_buf_free(vr_tok_buf_t *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

int vr_tok_grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q) return VR_ERR_NOMEM;
  *p = q;
  *cap = c;
  return 0;
}

/* ---- hash map ------------------------------------------------------------------------- */

uint32_t vr_tok_hash(const void *s, size_t n) {
  /* FNV-1a, 64-bit state folded: cheap for the short keys (tokens) that dominate */
  const unsigned char *p = s;
  uint64_t h = 1469598103934665603ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
    h ^= h >> 29;
  }
  for (; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  h ^= h >> 32;
  return (uint32_t)h;
}

static int map_grow(vr_tok_map_t *m) {
  uint32_t cap = m->cap ? m->cap * 2 : 1024;
  uint32_t *slots = calloc(cap, sizeof *slots), *hashes = malloc(cap * sizeof *hashes);
  if (!slots || !hashes) {
    free(slots);
    free(hashes);
    return VR_ERR_NOMEM;
  }
  for (uint32_t i = 0; i < m->cap; i++) {
    if (!m->slots[i]) continue;
    uint32_t j = m->hashes[i] & (cap - 1);
    while (slots[j]) j = (j + 1) & (cap - 1);
    slots[j] = m->slots[i];
    hashes[j] = m->hashes[i];
  }
  free(m->slots);
  free(m->hashes);
  m->slots = slots;
  m->hashes = hashes;
  m->cap = cap;
  return 0;
}

int vr_tok_map_put(vr_tok_map_t *m, const char *k, size_t n, int32_t v) {
  if ((uint64_t)(m->count + 1) * 4 >= (uint64_t)m->cap * 3 && map_grow(m)) return VR_ERR_NOMEM;
  uint32_t h = vr_tok_hash(k, n), j = h & (m->cap - 1);
  while (m->slots[j]) {
    uint32_t e = m->slots[j] - 1;
    if (m->hashes[j] == h && m->klen[e] == n && memcmp(m->arena.p + m->koff[e], k, n) == 0) {
      m->val[e] = v;
      return 0;
    }
    j = (j + 1) & (m->cap - 1);
  }
  if (m->count == m->kcap) {
    uint32_t kc = m->kcap ? m->kcap * 2 : 1024;
    uint32_t *ko = realloc(m->koff, kc * sizeof *ko);
    if (!ko) return VR_ERR_NOMEM;
    m->koff = ko;
    uint32_t *kl = realloc(m->klen, kc * sizeof *kl);
    if (!kl) return VR_ERR_NOMEM;
    m->klen = kl;
    int32_t *vv = realloc(m->val, kc * sizeof *vv);
    if (!vv) return VR_ERR_NOMEM;
    m->val = vv;
    m->kcap = kc;
  }
  if (m->arena.n + n + 1 > UINT32_MAX) return VR_ERR_NOMEM;
  uint32_t off = (uint32_t)m->arena.n;
  if (vr_tok_buf_put(&m->arena, k, n)) return VR_ERR_NOMEM;
  m->koff[m->count] = off;
  m->klen[m->count] = (uint32_t)n;
  m->val[m->count] = v;
  m->slots[j] = ++m->count;
  m->hashes[j] = h;
  return 0;
}

int32_t vr_tok_map_get(const vr_tok_map_t *m, const char *k, size_t n, int *found) {
  if (m->cap) {
    uint32_t h = vr_tok_hash(k, n), j = h & (m->cap - 1);
    while (m->slots[j]) {
      uint32_t e = m->slots[j] - 1;
      if (m->hashes[j] == h && m->klen[e] == n && memcmp(m->arena.p + m->koff[e], k, n) == 0) {
        if (found) *found = 1;
        return m->val[e];
      }
      j = (j + 1) & (m->cap - 1);
    }
  }
  if (found) *found = 0;
  return -1;
}

void vr_tok_map_free(vr_tok_map_t *m) {
  free(m->slots);
  free(m->hashes);
  free(m->koff);
  free(m->klen);
  free(m->val);
  vr_tok_buf_free(&m->arena);
  memset(m, 0, sizeof *m);
}

/* ---- UTF-8 ------------------------------------------------------------------------------ */

/* Length of the valid sequence at s[0..n), or 0 with *bad = length of the maximal invalid
 * subpart (at least 1), following the Unicode "maximal subpart" rule Rust's lossy decoder uses. */
static size_t utf8_one(const unsigned char *s, size_t n, size_t *bad) {
  unsigned c = s[0];
  *bad = 1;
  if (c < 0x80) return 1;
  size_t need;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) need = 2;
  else if (c == 0xE0) { need = 3; lo = 0xA0; }
  else if (c >= 0xE1 && c <= 0xEC) need = 3;
  else if (c == 0xED) { need = 3; hi = 0x9F; }
  else if (c >= 0xEE && c <= 0xEF) need = 3;
  else if (c == 0xF0) { need = 4; lo = 0x90; }
  else if (c >= 0xF1 && c <= 0xF3) need = 4;
  else if (c == 0xF4) { need = 4; hi = 0x8F; }
  else return 0;
  for (size_t i = 1; i < need; i++) {
    if (i >= n) { *bad = i; return 0; }
    unsigned d = s[i];
    unsigned l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (d < l || d > h) { *bad = i; return 0; }
  }
  return need;
}

size_t vr_tok_utf8_check(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0, bad;
  while (i < n) {
    if (p[i] < 0x80) { i++; continue; }
    size_t k = utf8_one(p + i, n - i, &bad);
    if (!k) return i;
    i += k;
  }
  return n;
}

int vr_tok_utf8_lossy(vr_tok_buf_t *out, const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0, start = 0, bad;
  while (i < n) {
    if (p[i] < 0x80) { i++; continue; }
    size_t k = utf8_one(p + i, n - i, &bad);
    if (k) { i += k; continue; }
    if (vr_tok_buf_put(out, s + start, i - start) || vr_tok_buf_put(out, "\xEF\xBF\xBD", 3))
      return VR_ERR_NOMEM;
    i += bad;
    start = i;
  }
  return vr_tok_buf_put(out, s + start, n - start);
}

/* ---- Unicode predicates -------------------------------------------------------------- */

int vr_tok_is_whitespace(uint32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  if (c < 0x85) return 0;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

int vr_tok_is_numeric(uint32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

int vr_tok_is_alphanumeric(uint32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
  utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
         (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

int vr_tok_is_punctuation(uint32_t c) {
  if (c < 0x80)
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

int vr_tok_is_mark_nonspacing(uint32_t c) {
  return c >= 0x300 && utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_MN;
}

int vr_tok_is_other(uint32_t c) {
  utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
  return k == UTF8PROC_CATEGORY_CN || (k >= UTF8PROC_CATEGORY_CC && k <= UTF8PROC_CATEGORY_CO);
}

int vr_tok_is_chinese(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

int vr_tok_lower_cp(vr_tok_buf_t *b, uint32_t c) {
  if (c < 0x80) return vr_tok_buf_putc(b, (char)((c >= 'A' && c <= 'Z') ? c + 32 : c));
  if (c == 0x130) return vr_tok_buf_put(b, "i\xCC\x87", 3); /* the one multi-char lowercase */
  return vr_tok_buf_put_cp(b, (uint32_t)utf8proc_tolower((utf8proc_int32_t)c));
}

void vr_tok_seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}
