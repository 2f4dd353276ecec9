/* vr_rules_math.c: math answers: last \boxed{...} extraction and the answer
 * normalisation of verl's utils/reward_score/math.py (Hendrycks MATH
 * strip_string), with the additions documented in docs/operations.md.
 * All functions are pure and thread-safe; scratch memory is heap-allocated
 * per call and bounded by a small multiple of the input length. */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>

#include "vr_rules.h"
#include "vr_rules_internal.h"

/* ---- growable string ----------------------------------------------------------- */

void vr_sb_free(vr_sb_t *b) {
  free(b->p);
  b->p = NULL;
  b->n = b->cap = 0;
}

static int sb_reserve(vr_sb_t *b, size_t extra) {
  if (b->oom) return -1;
  if (extra > SIZE_MAX / 2 - b->n) {
    b->oom = 1;
    return -1;
  }
  size_t want = b->n + extra + 1;
  if (want <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < want) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) {
    b->oom = 1;
    return -1;
  }
  b->p = p;
  b->cap = cap;
  return 0;
}

void vr_sb_putn(vr_sb_t *b, const char *s, size_t n) {
  if (sb_reserve(b, n)) return;
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
}

static void sb_puts(vr_sb_t *b, const char *s) { vr_sb_putn(b, s, strlen(s)); }

/* Finds needle in hay[0..n) from offset 'from'; returns its offset or n when absent. */
size_t vr_find(const char *hay, size_t n, size_t from, const char *needle) {
  size_t m = strlen(needle);
  if (m == 0 || from >= n || m > n - from) return n;
  const char *p = memmem(hay + from, n - from, needle, m); /* GNU; gnu11 build */
  return p ? (size_t)(p - hay) : n;
}

/* Bytes of the UTF-8 sequence at s (1 for ASCII or a stray byte), clipped to n. */
static size_t u8_len(const char *s, size_t n) {
  unsigned char c = (unsigned char)s[0];
  size_t l = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
  return l > n ? n : l;
}

/* Number of UTF-8 code points in s[0..n) (Python's len of the text). */
static size_t u8_count(const char *s, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xc0) != 0x80;
  return c;
}

/* ---- \boxed extraction --------------------------------------------------------------- */

static size_t find_last(const char *s, size_t n, const char *needle) {
  size_t last = n, i = 0;
  while ((i = vr_find(s, n, i, needle)) < n) last = i++;
  return last;
}

int vr_math_last_boxed(const char *s, size_t n, size_t *start, size_t *len) {
  if (!s) return 0;
  static const char *const forms[3] = {"\\boxed{", "\\fbox{", "\\boxed "};
  size_t best = n;
  int which = -1;
  for (int f = 0; f < 3; f++) {
    size_t at = find_last(s, n, forms[f]);
    if (at < n && (best == n || at > best)) best = at, which = f;
  }
  if (which < 0) return 0;
  size_t open = best + strlen(forms[which]);
  if (which == 2) { /* "\boxed x$": up to the first '$' (verl math.py) */
    size_t end = vr_find(s, n, open, "$");
    *start = open;
    *len = end - open;
    return 1;
  }
  size_t depth = 1;
  for (size_t i = open; i < n; i++) {
    if (s[i] == '{') depth++;
    else if (s[i] == '}' && --depth == 0) {
      *start = open;
      *len = i - open;
      return 1;
    }
  }
  return 0; /* braces never close */
}

/* ---- normalisation steps: each reads (in, n) and writes out ------------------------- */

static void replace_all(const char *in, size_t n, const char *from, const char *to, vr_sb_t *out) {
  size_t fl = strlen(from), i = 0;
  while (i < n) {
    size_t at = vr_find(in, n, i, from);
    vr_sb_putn(out, in + i, at - i);
    if (at >= n) break;
    sb_puts(out, to);
    i = at + fl;
  }
}

/* Index of the '}' closing the '{' at open-1 (depth 1 at open), or n. */
static size_t close_brace(const char *s, size_t n, size_t open) {
  size_t depth = 1;
  for (size_t i = open; i < n; i++) {
    if (s[i] == '{') depth++;
    else if (s[i] == '}' && --depth == 0) return i;
  }
  return n;
}

static int is_space_only(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ') return 0;
  return 1;
}

/* Units: verl cuts at "\text{ " (a unit after a space: "5 \text{ cm}");
 * we also drop a trailing "\text{...}" group ("5\text{cm}") when something
 * other than spaces is left before it. */
static void remove_units(const char *in, size_t n, vr_sb_t *out) {
  size_t at = vr_find(in, n, 0, "\\text{ ");
  if (at < n) n = at;
  size_t last = find_last(in, n, "\\text{");
  if (last < n && close_brace(in, n, last + 6) == n - 1 && !is_space_only(in, last)) n = last;
  vr_sb_putn(out, in, n);
}

/* "\sqrt3" -> "\sqrt{3}": one character after \sqrt that is not '{' gets braces. */
static void fix_sqrt(const char *in, size_t n, vr_sb_t *out) {
  size_t i = 0;
  while (i < n) {
    size_t at = vr_find(in, n, i, "\\sqrt");
    vr_sb_putn(out, in + i, at - i);
    if (at >= n) break;
    sb_puts(out, "\\sqrt");
    i = at + 5;
    if (i < n && in[i] != '{') {
      size_t cl = u8_len(in + i, n - i);
      sb_puts(out, "{");
      vr_sb_putn(out, in + i, cl);
      sb_puts(out, "}");
      i += cl;
    }
  }
}

/* verl _fix_fracs: "\frac12" -> "\frac{1}{2}", "\frac1{72}" -> "\frac{1}{72}";
 * a "\frac" followed by fewer than two characters leaves the whole string as is. */
static void fix_fracs(const char *in, size_t n, vr_sb_t *out) {
  size_t at = vr_find(in, n, 0, "\\frac");
  size_t start_n = out->n;
  vr_sb_putn(out, in, at);
  while (at < n) {
    size_t seg = at + 5;
    size_t next = vr_find(in, n, seg, "\\frac");
    const char *sub = in + seg;
    size_t sl = next - seg;
    sb_puts(out, "\\frac");
    if (sl > 0 && sub[0] == '{') {
      vr_sb_putn(out, sub, sl);
    } else {
      size_t al = sl ? u8_len(sub, sl) : 0;
      size_t bl = sl > al ? u8_len(sub + al, sl - al) : 0;
      if (al == 0 || bl == 0) { /* fewer than two characters: unchanged */
        out->n = start_n;
        vr_sb_putn(out, in, n);
        return;
      }
      sb_puts(out, "{");
      vr_sb_putn(out, sub, al);
      sb_puts(out, "}");
      if (sub[al] != '{') {
        sb_puts(out, "{");
        vr_sb_putn(out, sub + al, bl);
        sb_puts(out, "}");
      } else {
        vr_sb_putn(out, sub + al, bl);
      }
      vr_sb_putn(out, sub + al + bl, sl - al - bl);
    }
    at = next;
  }
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Addition to verl: in every number "D+.D*" not touching another digit or '.',
 * trailing zeros of the fraction are dropped ("2.50" -> "2.5", "3.0" -> "3");
 * a bare trailing '.' is dropped only at the end of the string ("5." -> "5"). */
static void trim_decimal_zeros(const char *in, size_t n, vr_sb_t *out) {
  size_t i = 0;
  while (i < n) {
    if (!is_digit(in[i]) || (i > 0 && (is_digit(in[i - 1]) || in[i - 1] == '.'))) {
      vr_sb_putn(out, in + i, 1);
      i++;
      continue;
    }
    size_t j = i;
    while (j < n && is_digit(in[j])) j++;
    if (j >= n || in[j] != '.') {
      vr_sb_putn(out, in + i, j - i);
      i = j;
      continue;
    }
    size_t k = j + 1;
    while (k < n && is_digit(in[k])) k++;
    if (k < n && in[k] == '.') { /* "1.2.3": not a plain number, copy as is */
      vr_sb_putn(out, in + i, k - i);
      i = k;
      continue;
    }
    size_t fe = k;
    while (fe > j + 1 && in[fe - 1] == '0') fe--;
    vr_sb_putn(out, in + i, j - i);
    if (fe > j + 1) vr_sb_putn(out, in + j, fe - j);
    else if (k == j + 1 && k < n) vr_sb_putn(out, ".", 1); /* "5.x": keep the '.' */
    i = k;
  }
}

/* Addition to verl (as math_dapo): "1,000" -> "1000" when only digits and commas. */
static int digits_and_commas(const char *s, size_t n) {
  int digit = 0;
  for (size_t i = 0; i < n; i++) {
    if (is_digit(s[i])) digit = 1;
    else if (s[i] != ',') return 0;
  }
  return digit;
}

/* -?(0|[1-9][0-9]*) but not "-0": what Python's "{}".format(int(x)) == x accepts. */
static int is_canonical_int(const char *s, size_t n) {
  size_t i = 0;
  if (n && s[0] == '-') i = 1;
  if (i >= n) return 0;
  if (s[i] == '0') return n == i + 1 && i == 0;
  for (; i < n; i++)
    if (!is_digit(s[i])) return 0;
  return 1;
}

/* verl _fix_a_slash_b: "3/4" -> "\frac{3}{4}" when both sides are plain integers. */
static void fix_a_slash_b(const char *in, size_t n, vr_sb_t *out) {
  size_t sl = vr_find(in, n, 0, "/");
  if (sl < n && vr_find(in, n, sl + 1, "/") == n && is_canonical_int(in, sl) &&
      is_canonical_int(in + sl + 1, n - sl - 1)) {
    sb_puts(out, "\\frac{");
    vr_sb_putn(out, in, sl);
    sb_puts(out, "}{");
    vr_sb_putn(out, in + sl + 1, n - sl - 1);
    sb_puts(out, "}");
    return;
  }
  vr_sb_putn(out, in, n);
}

/* Runs the pipeline; result in *res (caller frees). Returns 0 or -1 on OOM. */
int vr_math_normalize_sb(const char *s, size_t n, vr_sb_t *res) {
  vr_sb_t a = {0}, b = {0};
  vr_sb_putn(&a, s, n);
  static const char *const subst[][2] = {
      {"\n", ""},        {"\\!", ""},          {"\\\\", "\\"},     {"tfrac", "frac"},
      {"dfrac", "frac"}, {"\\left", ""},       {"\\right", ""},    {"^{\\circ}", ""},
      {"^\\circ", ""},   {"\\$", ""},          {"$", ""},
  };
#define VR_STEP(call)                  \
  do {                                 \
    b.n = 0;                           \
    if (b.p) b.p[0] = '\0';            \
    call;                              \
    vr_sb_t t_ = a;                    \
    a = b;                             \
    b = t_;                            \
  } while (0)
  for (size_t k = 0; k < sizeof(subst) / sizeof(subst[0]); k++)
    VR_STEP(replace_all(a.p, a.n, subst[k][0], subst[k][1], &b));
  VR_STEP(remove_units(a.p, a.n, &b));
  VR_STEP(replace_all(a.p, a.n, "\\%", "", &b));
  VR_STEP(replace_all(a.p, a.n, "%", "", &b));
  VR_STEP(replace_all(a.p, a.n, " .", " 0.", &b));
  VR_STEP(replace_all(a.p, a.n, "{.", "{0.", &b));
  if (a.n > 0 && !a.oom) {
    if (a.p[0] == '.') VR_STEP((vr_sb_putn(&b, "0", 1), vr_sb_putn(&b, a.p, a.n)));
    size_t eq = vr_find(a.p, a.n, 0, "=");
    if (eq < a.n && vr_find(a.p, a.n, eq + 1, "=") == a.n && u8_count(a.p, eq) <= 2)
      VR_STEP(vr_sb_putn(&b, a.p + eq + 1, a.n - eq - 1)); /* "x = 5" -> " 5" */
    VR_STEP(fix_sqrt(a.p, a.n, &b));
    VR_STEP(replace_all(a.p, a.n, " ", "", &b));
    VR_STEP(fix_fracs(a.p, a.n, &b));
    if (digits_and_commas(a.p, a.n)) VR_STEP(replace_all(a.p, a.n, ",", "", &b));
    VR_STEP(trim_decimal_zeros(a.p, a.n, &b));
    if (a.n == 3 && memcmp(a.p, "0.5", 3) == 0) VR_STEP(sb_puts(&b, "\\frac{1}{2}"));
    VR_STEP(fix_a_slash_b(a.p, a.n, &b));
  }
#undef VR_STEP
  int oom = a.oom || b.oom;
  vr_sb_free(&b);
  if (oom) {
    vr_sb_free(&a);
    return -1;
  }
  if (!a.p) vr_sb_putn(&a, "", 0);
  if (a.oom) {
    vr_sb_free(&a);
    return -1;
  }
  *res = a;
  return 0;
}

long vr_math_normalize(const char *s, size_t n, char *out, size_t outcap) {
  if (!s || !out || outcap == 0) return -1;
  vr_sb_t r = {0};
  if (vr_math_normalize_sb(s, n, &r)) return -1;
  long rv = -1;
  if (r.n < outcap) {
    memcpy(out, r.p, r.n + 1);
    rv = (long)r.n;
  }
  vr_sb_free(&r);
  return rv;
}
