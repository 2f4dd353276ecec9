/* vr_jinja_value.c: arena, values, Python's str()/repr() and json.dumps of them, comparisons,
 * UTF-8 helpers. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_jinja_internal.h"

/* ---- arena ------------------------------------------------------------------------------- */
struct jj_block {
  jj_block_t *next;
  size_t size, used;
  _Alignas(16) unsigned char data[];
};

#define JJ_BLOCK_MIN (64u * 1024u)

void *jj_arena_alloc(jj_arena_t *a, size_t n) {
  n = (n + 15u) & ~(size_t)15u;
  if (n == 0) n = 16;
  jj_block_t *b = a->head;
  if (!b || b->size - b->used < n) {
    size_t sz = n > JJ_BLOCK_MIN ? n : JJ_BLOCK_MIN;
    if (a->cap && (a->used + sz + sizeof *b > a->cap || sz > a->cap)) return NULL;
    b = malloc(sizeof *b + sz);
    if (!b) return NULL;
    b->size = sz;
    b->used = 0;
    b->next = a->head;
    a->head = b;
    a->used += sz + sizeof *b;
  }
  void *p = b->data + b->used;
  b->used += n;
  memset(p, 0, n);
  return p;
}

void jj_arena_free(jj_arena_t *a) {
  jj_block_t *b = a->head;
  while (b) {
    jj_block_t *nx = b->next;
    free(b);
    b = nx;
  }
  a->head = NULL;
  a->used = 0;
}

/* ---- errors ------------------------------------------------------------------------------ */
void jj_fail(jj_errbuf_t *e, int status, const char *fmt, ...) {
  if (e->buf && e->len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->buf, e->len, fmt, ap);
    va_end(ap);
  }
  e->status = status;
  longjmp(e->jb, 1);
}

void jj_rt_fail(jj_ctx_t *c, int status, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  jj_fail(&c->err, status, "line %d: %s", c->line, msg);
}

void *jj_alloc(jj_ctx_t *c, size_t n) {
  void *p = jj_arena_alloc(&c->arena, n);
  if (!p) {
    if (c->arena.cap && c->arena.used + n + JJ_BLOCK_MIN > c->arena.cap)
      jj_rt_fail(c, VR_ERR_TOO_LARGE, "the render needs more than max_memory (%zu bytes)",
                 c->arena.cap);
    jj_rt_fail(c, VR_ERR_NOMEM, "out of memory");
  }
  return p;
}

/* ---- constructors ------------------------------------------------------------------------ */
jj_val_t jj_strv(const char *p, size_t n) {
  jj_val_t v = {.t = JV_STR};
  v.u.s.p = p;
  v.u.s.n = n;
  return v;
}
jj_val_t jj_mkstr(jj_ctx_t *c, const char *p, size_t n) {
  char *d = jj_alloc(c, n + 1);
  if (n) memcpy(d, p, n);
  return jj_strv(d, n);
}
jj_val_t jj_int(int64_t i) {
  jj_val_t v = {.t = JV_INT};
  v.u.i = i;
  return v;
}
jj_val_t jj_float(double f) {
  jj_val_t v = {.t = JV_FLOAT};
  v.u.f = f;
  return v;
}
jj_val_t jj_bool(bool b) {
  jj_val_t v = {.t = JV_BOOL};
  v.u.b = b;
  return v;
}
jj_val_t jj_none(void) { return (jj_val_t){.t = JV_NONE}; }
jj_val_t jj_undef(jj_str_t name) {
  jj_val_t v = {.t = JV_UNDEF};
  v.u.s = name;
  return v;
}
jj_list_t *jj_list_new(jj_ctx_t *c, size_t n) {
  jj_list_t *l = jj_alloc(c, sizeof *l);
  l->n = n;
  if (n) {
    if (n > SIZE_MAX / sizeof(jj_val_t)) jj_rt_fail(c, VR_ERR_TOO_LARGE, "list too long");
    l->v = jj_alloc(c, n * sizeof(jj_val_t));
  }
  return l;
}
jj_val_t jj_listv(jj_list_t *l) {
  jj_val_t v = {.t = JV_LIST};
  v.u.l = l;
  return v;
}
bool jj_is_seq(jj_val_t v) {
  return v.t == JV_LIST && (v.u.l->kind == JL_LIST || v.u.l->kind == JL_TUPLE);
}
jj_dict_t *jj_dict_new(jj_ctx_t *c) { return jj_alloc(c, sizeof(jj_dict_t)); }

bool jj_streq(jj_str_t a, const char *lit) {
  size_t n = strlen(lit);
  return a.n == n && memcmp(a.p, lit, n) == 0;
}
static bool str_eq(jj_str_t a, jj_str_t b) { return a.n == b.n && (a.n == 0 || !memcmp(a.p, b.p, a.n)); }

jj_val_t *jj_dict_get(const jj_dict_t *d, jj_str_t k) {
  for (size_t i = 0; i < d->n; i++)
    if (str_eq(d->k[i], k)) return &d->v[i];
  return NULL;
}

void jj_dict_set(jj_ctx_t *c, jj_dict_t *d, jj_str_t k, jj_val_t v) {
  jj_val_t *e = jj_dict_get(d, k);
  if (e) {
    *e = v;
    return;
  }
  if (d->n == d->cap) {
    size_t nc = d->cap ? d->cap * 2 : 4;
    jj_str_t *nk = jj_alloc(c, nc * sizeof *nk);
    jj_val_t *nv = jj_alloc(c, nc * sizeof *nv);
    if (d->n) {
      memcpy(nk, d->k, d->n * sizeof *nk);
      memcpy(nv, d->v, d->n * sizeof *nv);
    }
    d->k = nk;
    d->v = nv;
    d->cap = nc;
  }
  d->k[d->n] = k;
  d->v[d->n++] = v;
}

bool jj_is_undef(jj_val_t v) { return v.t == JV_UNDEF; }

bool jj_truthy(jj_val_t v) {
  switch (v.t) {
  case JV_UNDEF: case JV_NONE: return false;
  case JV_BOOL: return v.u.b;
  case JV_INT: return v.u.i != 0;
  case JV_FLOAT: return v.u.f != 0.0;
  case JV_STR: return v.u.s.n > 0;
  case JV_LIST: return v.u.l->kind == JL_GEN || v.u.l->n > 0; /* a generator is always true */
  case JV_DICT: return v.u.d->n > 0;
  default: return true;
  }
}

const char *jj_type_name(jj_val_t v) {
  switch (v.t) {
  case JV_UNDEF: return "Undefined";
  case JV_NONE: return "NoneType";
  case JV_BOOL: return "bool";
  case JV_INT: return "int";
  case JV_FLOAT: return "float";
  case JV_STR: return "str";
  case JV_LIST: {
    static const char *const names[] = {"list", "tuple", "generator", "dict_keys", "dict_values",
                                        "dict_items"};
    return names[v.u.l->kind];
  }
  case JV_DICT: return "dict";
  case JV_NS: return "Namespace";
  case JV_MACRO: return "Macro";
  case JV_FUNC: return "function";
  case JV_METHOD: return "builtin_function_or_method";
  case JV_LOOP: return "LoopContext";
  }
  return "object";
}

static bool is_num(jj_val_t v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double num_f(jj_val_t v) {
  return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.t == JV_BOOL ? (double)v.u.b : 0.0;
}
static int64_t num_i(jj_val_t v) { return v.t == JV_INT ? v.u.i : v.t == JV_BOOL ? (int64_t)v.u.b : 0; }

bool jj_equal(jj_val_t a, jj_val_t b) {
  if (is_num(a) && is_num(b)) {
    if (a.t == JV_FLOAT || b.t == JV_FLOAT) return num_f(a) == num_f(b);
    return num_i(a) == num_i(b);
  }
  if (a.t != b.t) return false;
  switch (a.t) {
  case JV_UNDEF: case JV_NONE: return true;
  case JV_STR: return str_eq(a.u.s, b.u.s);
  case JV_LIST:
    if (a.u.l == b.u.l) return true;
    if (a.u.l->kind != b.u.l->kind || a.u.l->kind == JL_GEN) return false;
    if (a.u.l->n != b.u.l->n) return false;
    for (size_t i = 0; i < a.u.l->n; i++)
      if (!jj_equal(a.u.l->v[i], b.u.l->v[i])) return false;
    return true;
  case JV_DICT: {
    if (a.u.d->n != b.u.d->n) return false;
    for (size_t i = 0; i < a.u.d->n; i++) {
      jj_val_t *o = jj_dict_get(b.u.d, a.u.d->k[i]);
      if (!o || !jj_equal(a.u.d->v[i], *o)) return false;
    }
    return true;
  }
  case JV_NS: return a.u.d == b.u.d;
  case JV_MACRO: return a.u.m == b.u.m;
  case JV_FUNC: return a.u.fn == b.u.fn;
  default: return false;
  }
}

int jj_compare(jj_ctx_t *c, jj_val_t a, jj_val_t b) {
  if (is_num(a) && is_num(b)) {
    if (a.t == JV_FLOAT || b.t == JV_FLOAT) {
      double x = num_f(a), y = num_f(b);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    int64_t x = num_i(a), y = num_i(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.t == JV_STR && b.t == JV_STR) {
    size_t m = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
    int r = m ? memcmp(a.u.s.p, b.u.s.p, m) : 0; /* UTF-8 byte order = code point order */
    if (r) return r;
    return a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n ? 1 : 0;
  }
  if (jj_is_seq(a) && jj_is_seq(b) && a.u.l->kind == b.u.l->kind) {
    size_t m = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
    for (size_t i = 0; i < m; i++) {
      if (jj_equal(a.u.l->v[i], b.u.l->v[i])) continue;
      return jj_compare(c, a.u.l->v[i], b.u.l->v[i]);
    }
    return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n ? 1 : 0;
  }
  jj_rt_fail(c, VR_ERR_INVAL, "ordering not supported between instances of '%s' and '%s'",
             jj_type_name(a), jj_type_name(b));
}

/* ---- UTF-8 ------------------------------------------------------------------------------- */
uint32_t jj_utf8_next(const char *p, size_t n, size_t *adv) {
  const unsigned char *s = (const unsigned char *)p;
  if (n == 0) {
    *adv = 0;
    return 0;
  }
  unsigned char c = s[0];
  if (c < 0x80) {
    *adv = 1;
    return c;
  }
  int len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
  if ((size_t)len > n || len == 1) {
    *adv = 1;
    return 0xFFFD;
  }
  uint32_t cp = c & (0x7F >> len);
  for (int i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) {
      *adv = 1;
      return 0xFFFD;
    }
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  *adv = (size_t)len;
  return cp;
}

size_t jj_utf8_len(jj_str_t s) {
  size_t k = 0, i = 0, adv;
  while (i < s.n) {
    jj_utf8_next(s.p + i, s.n - i, &adv);
    i += adv;
    k++;
  }
  return k;
}

size_t jj_utf8_offset(jj_str_t s, size_t cp) {
  size_t i = 0, adv;
  while (cp > 0 && i < s.n) {
    jj_utf8_next(s.p + i, s.n - i, &adv);
    i += adv;
    cp--;
  }
  return i;
}

bool jj_py_isspace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* ---- output buffers ---------------------------------------------------------------------- */
void jj_buf_put(jj_ctx_t *c, jj_buf_t *b, const char *p, size_t n) {
  if (n == 0) return;
  if (b->n + n > c->opts.max_output)
    jj_rt_fail(c, VR_ERR_TOO_LARGE, "the rendered text exceeds max_output (%zu bytes)",
               c->opts.max_output);
  if (b->n + n + 1 > b->cap) {
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->n + n + 1) nc *= 2;
    char *np = jj_alloc(c, nc);
    if (b->n) memcpy(np, b->p, b->n);
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
  b->p[b->n] = 0;
}
void jj_buf_putc(jj_ctx_t *c, jj_buf_t *b, char ch) { jj_buf_put(c, b, &ch, 1); }
static void buf_puts(jj_ctx_t *c, jj_buf_t *b, const char *s) { jj_buf_put(c, b, s, strlen(s)); }

/* Python's repr(float) */
static void put_float(jj_ctx_t *c, jj_buf_t *b, double f, bool json) {
  if (isnan(f)) {
    buf_puts(c, b, json ? "NaN" : "nan");
    return;
  }
  if (isinf(f)) {
    buf_puts(c, b, f < 0 ? (json ? "-Infinity" : "-inf") : (json ? "Infinity" : "inf"));
    return;
  }
  char tmp[64];
  int prec;
  for (prec = 1; prec <= 17; prec++) {
    snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
    if (strtod(tmp, NULL) == f) break;
  }
  /* tmp: [-]d[.ddd]e[+-]XX */
  char digits[32];
  int nd = 0, exp10;
  const char *p = tmp;
  bool neg = false;
  if (*p == '-') {
    neg = true;
    p++;
  }
  for (; *p && *p != 'e'; p++)
    if (*p >= '0' && *p <= '9') digits[nd++] = *p;
  exp10 = atoi(p + 1);
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  char out[64];
  int o = 0;
  if (neg) out[o++] = '-';
  if (exp10 >= -4 && exp10 < 16) {
    if (exp10 < 0) {
      out[o++] = '0';
      out[o++] = '.';
      for (int k = 0; k < -exp10 - 1; k++) out[o++] = '0';
      for (int k = 0; k < nd; k++) out[o++] = digits[k];
    } else {
      for (int k = 0; k <= exp10; k++) out[o++] = k < nd ? digits[k] : '0';
      out[o++] = '.';
      if (nd > exp10 + 1)
        for (int k = exp10 + 1; k < nd; k++) out[o++] = digits[k];
      else
        out[o++] = '0';
    }
  } else {
    out[o++] = digits[0];
    if (nd > 1) {
      out[o++] = '.';
      for (int k = 1; k < nd; k++) out[o++] = digits[k];
    }
    o += snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", exp10 < 0 ? '-' : '+',
                  exp10 < 0 ? -exp10 : exp10);
  }
  jj_buf_put(c, b, out, (size_t)o);
}

static void put_int(jj_ctx_t *c, jj_buf_t *b, int64_t i) {
  char tmp[32];
  int n = snprintf(tmp, sizeof tmp, "%lld", (long long)i);
  jj_buf_put(c, b, tmp, (size_t)n);
}

/* characters Python's str.isprintable() rejects (beyond ASCII controls): the common ones */
static bool py_unprintable(uint32_t cp) {
  return (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
         (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF ||
         (cp >= 0xFFF9 && cp <= 0xFFFB) || (cp >= 0xE000 && cp <= 0xF8FF) ||
         (cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F ||
         cp == 0x180E || (cp >= 0xE0000 && cp <= 0xE0FFF) || cp >= 0xF0000;
}

static void repr_str(jj_ctx_t *c, jj_buf_t *b, jj_str_t s) {
  bool has_sq = memchr(s.p, '\'', s.n) != NULL, has_dq = memchr(s.p, '"', s.n) != NULL;
  char q = (has_sq && !has_dq) ? '"' : '\'';
  jj_buf_putc(c, b, q);
  size_t i = 0, adv;
  while (i < s.n) {
    uint32_t cp = jj_utf8_next(s.p + i, s.n - i, &adv);
    char tmp[16];
    if (cp == (uint32_t)q || cp == '\\') {
      tmp[0] = '\\';
      tmp[1] = (char)cp;
      jj_buf_put(c, b, tmp, 2);
    } else if (cp == '\n') jj_buf_put(c, b, "\\n", 2);
    else if (cp == '\r') jj_buf_put(c, b, "\\r", 2);
    else if (cp == '\t') jj_buf_put(c, b, "\\t", 2);
    else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xFF && py_unprintable(cp))) {
      snprintf(tmp, sizeof tmp, "\\x%02x", (unsigned)cp);
      jj_buf_put(c, b, tmp, 4);
    } else if (cp > 0xFF && py_unprintable(cp)) {
      int n = cp > 0xFFFF ? snprintf(tmp, sizeof tmp, "\\U%08x", (unsigned)cp)
                          : snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned)cp);
      jj_buf_put(c, b, tmp, (size_t)n);
    } else {
      jj_buf_put(c, b, s.p + i, adv);
    }
    i += adv;
  }
  jj_buf_putc(c, b, q);
}

void jj_repr(jj_ctx_t *c, jj_buf_t *b, jj_val_t v) {
  switch (v.t) {
  case JV_STR: repr_str(c, b, v.u.s); return;
  case JV_UNDEF: jj_buf_put(c, b, "Undefined", 9); return; /* repr(Undefined) */
  default: jj_print(c, b, v); return;
  }
}

void jj_print(jj_ctx_t *c, jj_buf_t *b, jj_val_t v) {
  switch (v.t) {
  case JV_UNDEF: return;
  case JV_NONE: buf_puts(c, b, "None"); return;
  case JV_BOOL: buf_puts(c, b, v.u.b ? "True" : "False"); return;
  case JV_INT: put_int(c, b, v.u.i); return;
  case JV_FLOAT: put_float(c, b, v.u.f, false); return;
  case JV_STR: jj_buf_put(c, b, v.u.s.p, v.u.s.n); return;
  case JV_LIST: {
    jj_list_kind_t k = v.u.l->kind;
    if (k == JL_GEN)
      jj_rt_fail(c, VR_ERR_UNSUPPORTED,
                 "printing a generator (the result of map/select/unique/items/batch/reverse "
                 "without |list) is not supported: jinja2 prints its memory address");
    if (k >= JL_KEYS) buf_puts(c, b, k == JL_KEYS ? "dict_keys(" : k == JL_VALUES ? "dict_values(" : "dict_items(");
    jj_buf_putc(c, b, k == JL_TUPLE ? '(' : '[');
    for (size_t i = 0; i < v.u.l->n; i++) {
      if (i) jj_buf_put(c, b, ", ", 2);
      jj_repr(c, b, v.u.l->v[i]);
    }
    if (k == JL_TUPLE && v.u.l->n == 1) jj_buf_putc(c, b, ',');
    jj_buf_putc(c, b, k == JL_TUPLE ? ')' : ']');
    if (k >= JL_KEYS) jj_buf_putc(c, b, ')');
    return;
  }
  case JV_DICT:
    jj_buf_putc(c, b, '{');
    for (size_t i = 0; i < v.u.d->n; i++) {
      if (i) jj_buf_put(c, b, ", ", 2);
      repr_str(c, b, v.u.d->k[i]);
      jj_buf_put(c, b, ": ", 2);
      jj_repr(c, b, v.u.d->v[i]);
    }
    jj_buf_putc(c, b, '}');
    return;
  default:
    jj_rt_fail(c, VR_ERR_UNSUPPORTED, "printing a %s is not supported", jj_type_name(v));
  }
}

jj_val_t jj_tostr(jj_ctx_t *c, jj_val_t v) {
  if (v.t == JV_STR) return v;
  jj_buf_t b = {0};
  jj_print(c, &b, v);
  return jj_strv(b.p ? b.p : "", b.n);
}

/* ---- json.dumps ------------------------------------------------------------------------ */
static void json_str(jj_ctx_t *c, jj_buf_t *b, jj_str_t s, bool ensure_ascii) {
  jj_buf_putc(c, b, '"');
  size_t start = 0, i = 0;
  while (i < s.n) {
    unsigned char ch = (unsigned char)s.p[i];
    const char *esc = NULL;
    char tmp[16];
    size_t adv = 1;
    if (ch == '"') esc = "\\\"";
    else if (ch == '\\') esc = "\\\\";
    else if (ch == '\n') esc = "\\n";
    else if (ch == '\r') esc = "\\r";
    else if (ch == '\t') esc = "\\t";
    else if (ch == '\b') esc = "\\b";
    else if (ch == '\f') esc = "\\f";
    else if (ch < 0x20) {
      snprintf(tmp, sizeof tmp, "\\u%04x", ch);
      esc = tmp;
    } else if (ensure_ascii && ch >= 0x80) {
      uint32_t cp = jj_utf8_next(s.p + i, s.n - i, &adv);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xD800 + (unsigned)(cp >> 10),
                 0xDC00 + (unsigned)(cp & 0x3FF));
      } else {
        snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned)cp);
      }
      esc = tmp;
    }
    if (esc) {
      jj_buf_put(c, b, s.p + start, i - start);
      buf_puts(c, b, esc);
      start = i + adv;
    }
    i += adv;
  }
  jj_buf_put(c, b, s.p + start, s.n - start);
  jj_buf_putc(c, b, '"');
}

static void json_newline(jj_ctx_t *c, jj_buf_t *b, const jj_json_opts_t *o, int level) {
  jj_buf_putc(c, b, '\n');
  for (int l = 0; l < level; l++) jj_buf_put(c, b, o->indent.p, o->indent.n);
}

static int cmp_keys(const void *x, const void *y) {
  const jj_str_t *a = *(const jj_str_t *const *)x, *b = *(const jj_str_t *const *)y;
  size_t m = a->n < b->n ? a->n : b->n;
  int r = m ? memcmp(a->p, b->p, m) : 0;
  return r ? r : (a->n < b->n ? -1 : a->n > b->n);
}

void jj_json(jj_ctx_t *c, jj_buf_t *b, jj_val_t v, const jj_json_opts_t *o, int level) {
  if (level > c->opts.max_depth)
    jj_rt_fail(c, VR_ERR_TOO_LARGE, "tojson: value nested deeper than max_depth");
  switch (v.t) {
  case JV_NONE: buf_puts(c, b, "null"); return;
  case JV_BOOL: buf_puts(c, b, v.u.b ? "true" : "false"); return;
  case JV_INT: put_int(c, b, v.u.i); return;
  case JV_FLOAT: put_float(c, b, v.u.f, true); return;
  case JV_STR: json_str(c, b, v.u.s, o->ensure_ascii); return;
  case JV_LIST:
    if (!jj_is_seq(v))
      jj_rt_fail(c, VR_ERR_INVAL, "tojson: Object of type %s is not JSON serializable",
                 jj_type_name(v));
    if (v.u.l->n == 0) {
      buf_puts(c, b, "[]");
      return;
    }
    jj_buf_putc(c, b, '[');
    for (size_t i = 0; i < v.u.l->n; i++) {
      if (i) jj_buf_put(c, b, o->item_sep.p, o->item_sep.n);
      if (o->pretty) json_newline(c, b, o, level + 1);
      jj_json(c, b, v.u.l->v[i], o, level + 1);
    }
    if (o->pretty) json_newline(c, b, o, level);
    jj_buf_putc(c, b, ']');
    return;
  case JV_DICT: {
    jj_dict_t *d = v.u.d;
    if (d->n == 0) {
      buf_puts(c, b, "{}");
      return;
    }
    jj_str_t **order = jj_alloc(c, d->n * sizeof *order);
    for (size_t i = 0; i < d->n; i++) order[i] = &d->k[i];
    if (o->sort_keys) qsort(order, d->n, sizeof *order, cmp_keys);
    jj_buf_putc(c, b, '{');
    for (size_t i = 0; i < d->n; i++) {
      if (i) jj_buf_put(c, b, o->item_sep.p, o->item_sep.n);
      if (o->pretty) json_newline(c, b, o, level + 1);
      json_str(c, b, *order[i], o->ensure_ascii);
      jj_buf_put(c, b, o->key_sep.p, o->key_sep.n);
      jj_json(c, b, d->v[order[i] - d->k], o, level + 1);
    }
    if (o->pretty) json_newline(c, b, o, level);
    jj_buf_putc(c, b, '}');
    return;
  }
  default:
    jj_rt_fail(c, VR_ERR_INVAL, "tojson: Object of type %s is not JSON serializable",
               jj_type_name(v));
  }
}

jj_val_t jj_from_cjson(jj_ctx_t *c, const cJSON *j, int depth) {
  if (depth > c->opts.max_depth)
    jj_rt_fail(c, VR_ERR_TOO_LARGE, "context JSON nested deeper than max_depth");
  if (cJSON_IsNull(j)) return jj_none();
  if (cJSON_IsTrue(j)) return jj_bool(true);
  if (cJSON_IsFalse(j)) return jj_bool(false);
  if (cJSON_IsNumber(j)) {
    double d = j->valuedouble;
    if (isfinite(d) && d == floor(d) && fabs(d) <= 9007199254740992.0) return jj_int((int64_t)d);
    return jj_float(d);
  }
  if (cJSON_IsString(j)) {
    const char *s = j->valuestring ? j->valuestring : "";
    return jj_strv(s, strlen(s));
  }
  if (cJSON_IsArray(j)) {
    size_t n = (size_t)cJSON_GetArraySize(j), i = 0;
    jj_list_t *l = jj_list_new(c, n);
    for (const cJSON *e = j->child; e && i < n; e = e->next) l->v[i++] = jj_from_cjson(c, e, depth + 1);
    return jj_listv(l);
  }
  if (cJSON_IsObject(j)) {
    jj_dict_t *d = jj_dict_new(c);
    for (const cJSON *e = j->child; e; e = e->next) {
      const char *k = e->string ? e->string : "";
      /* json.loads keeps the last of duplicate keys, at the first one's position */
      jj_dict_set(c, d, (jj_str_t){k, strlen(k)}, jj_from_cjson(c, e, depth + 1));
    }
    jj_val_t v = {.t = JV_DICT};
    v.u.d = d;
    return v;
  }
  jj_rt_fail(c, VR_ERR_INVAL, "context: unsupported JSON value");
}
