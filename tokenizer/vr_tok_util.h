/* vr_tok_util.h: the tokenizer's small shared parts (internal, not installed).
 *
 * - vr_tok_buf_t: a growable byte buffer (the arena that pieces of text point into by offset).
 * - vr_tok_map_t: an open-addressing hash map from byte strings to int32 values; keys are
 *   copied into the map's own arena. Built once at load, then only read (thread-safe to read).
 * - UTF-8 decode/encode/validate and the Unicode predicates that Rust's `char` methods give
 *   Hugging Face tokenizers (is_whitespace = White_Space, is_alphanumeric, is_numeric,
 *   punctuation), on top of utf8proc's category table.
 * - vr_tok_seterr: the one way an error text is written into the caller's (err, errlen). */
#ifndef VR_TOK_UTIL_H
#define VR_TOK_UTIL_H

#include <stddef.h>
#include <stdint.h>

typedef struct vr_tok_buf {
  char *p;
  size_t n, cap;
} vr_tok_buf_t;

/* 0 or VR_ERR_NOMEM. Appending keeps earlier offsets valid (pointers may move). */
int vr_tok_buf_reserve(vr_tok_buf_t *b, size_t extra);
int vr_tok_buf_put(vr_tok_buf_t *b, const void *s, size_t n);
int vr_tok_buf_putc(vr_tok_buf_t *b, char c);
int vr_tok_buf_put_cp(vr_tok_buf_t *b, uint32_t cp); /* UTF-8 of one code point */
void vr_tok_buf_free(vr_tok_buf_t *b);
/* Grows the array *p of *cap elements of elem bytes to hold need (doubling). 0 or VR_ERR_NOMEM. */
int vr_tok_grow(void **p, size_t *cap, size_t need, size_t elem);

typedef struct vr_tok_map {
  uint32_t *slots;  /* index+1 into keys (0 = empty), capacity cap (power of two) */
  uint32_t *hashes; /* per slot */
  uint32_t cap, count;
  uint32_t *koff, *klen; /* (count,) key offset/length in arena */
  int32_t *val;          /* (count,) */
  uint32_t kcap;
  vr_tok_buf_t arena;
} vr_tok_map_t;

uint32_t vr_tok_hash(const void *s, size_t n);
/* Inserts or overwrites. 0 or VR_ERR_NOMEM. */
int vr_tok_map_put(vr_tok_map_t *m, const char *k, size_t n, int32_t v);
/* The value, or -1 when absent (values stored are >= 0 or the caller's own negatives). */
int32_t vr_tok_map_get(const vr_tok_map_t *m, const char *k, size_t n, int *found);
/* Key of entry i (insertion order). */
static inline const char *vr_tok_map_key(const vr_tok_map_t *m, uint32_t i, size_t *n) {
  *n = m->klen[i];
  return m->arena.p + m->koff[i];
}
void vr_tok_map_free(vr_tok_map_t *m);

/* UTF-8. vr_tok_utf8_dec reads one code point of a string already validated (s[0] is a lead). */
static inline uint32_t vr_tok_utf8_dec(const unsigned char *s, size_t *len) {
  unsigned c = s[0];
  if (c < 0x80) { *len = 1; return c; }
  if (c < 0xE0) { *len = 2; return ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu); }
  if (c < 0xF0) { *len = 3; return ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu); }
  *len = 4;
  return ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
}
static inline size_t vr_tok_utf8_len(unsigned char c) {
  return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}
/* Byte offset of the first invalid sequence, or n when s is valid UTF-8 (no surrogates, no
 * overlongs, nothing above U+10FFFF). */
size_t vr_tok_utf8_check(const char *s, size_t n);
/* Appends s as Rust's String::from_utf8_lossy does (one U+FFFD per maximal invalid subpart). */
int vr_tok_utf8_lossy(vr_tok_buf_t *out, const char *s, size_t n);

/* Rust char predicates as HF tokenizers uses them. */
int vr_tok_is_whitespace(uint32_t c);   /* char::is_whitespace (White_Space) */
int vr_tok_is_numeric(uint32_t c);      /* char::is_numeric (Nd Nl No) */
int vr_tok_is_alphanumeric(uint32_t c); /* char::is_alphanumeric (approx.: L*, N*, Mn/Mc of letters) */
int vr_tok_is_punctuation(uint32_t c);  /* is_ascii_punctuation || P* */
int vr_tok_is_mark_nonspacing(uint32_t c); /* Mn */
int vr_tok_is_other(uint32_t c);        /* C* (Cc Cf Cs Co Cn) */
int vr_tok_is_chinese(uint32_t c);      /* BERT's CJK ranges */
/* Appends char::to_lowercase of c (full mapping: U+0130 gives two code points). */
int vr_tok_lower_cp(vr_tok_buf_t *b, uint32_t c);

void vr_tok_seterr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif /* VR_TOK_UTIL_H */
