/* vr_jinja_filters.c: jinja2's builtin filters and tests that chat templates use, transformers'
 * tojson, and the Python methods of str, dict and list that templates call (the sandbox's
 * immutable subset: modifying methods are errors, as jinja2's ImmutableSandboxedEnvironment
 * makes them). Case mapping is ASCII only and refuses text whose letters are outside ASCII but
 * could change case, instead of guessing. */
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_jinja_internal.h"

/* ---- name tables ------------------------------------------------------------------------- */
enum {
  F_ABS = 1, F_ATTR, F_BATCH, F_CAPITALIZE, F_COUNT, F_DEFAULT, F_DICTSORT, F_ESCAPE, F_FIRST,
  F_FLOAT, F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX,
  F_MIN, F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR,
  F_SORT, F_STRING, F_SUM, F_TITLE, F_TOJSON, F_TRIM, F_UNIQUE, F_UPPER,
};

static const struct {
  const char *name;
  int id;
} FILTERS[] = {
    {"abs", F_ABS}, {"attr", F_ATTR}, {"batch", F_BATCH}, {"capitalize", F_CAPITALIZE},
    {"count", F_LENGTH}, {"d", F_DEFAULT}, {"default", F_DEFAULT}, {"dictsort", F_DICTSORT},
    {"e", F_ESCAPE}, {"escape", F_ESCAPE}, {"forceescape", F_ESCAPE}, {"first", F_FIRST},
    {"float", F_FLOAT}, {"indent", F_INDENT}, {"int", F_INT}, {"items", F_ITEMS},
    {"join", F_JOIN}, {"last", F_LAST}, {"length", F_LENGTH}, {"list", F_LIST},
    {"lower", F_LOWER}, {"map", F_MAP}, {"max", F_MAX}, {"min", F_MIN}, {"reject", F_REJECT},
    {"rejectattr", F_REJECTATTR}, {"replace", F_REPLACE}, {"reverse", F_REVERSE},
    {"round", F_ROUND}, {"safe", F_SAFE}, {"select", F_SELECT}, {"selectattr", F_SELECTATTR},
    {"sort", F_SORT}, {"string", F_STRING}, {"sum", F_SUM}, {"title", F_TITLE},
    {"tojson", F_TOJSON}, {"trim", F_TRIM}, {"unique", F_UNIQUE}, {"upper", F_UPPER},
    /* jinja2 has these; this engine does not: they compile and fail when they run */
    {"center", -1}, {"filesizeformat", -1}, {"format", -1}, {"groupby", -1}, {"pprint", -1},
    {"random", -1}, {"slice", -1}, {"striptags", -1}, {"truncate", -1}, {"urlencode", -1},
    {"urlize", -1}, {"wordcount", -1}, {"wordwrap", -1}, {"xmlattr", -1},
};

enum {
  T_BOOLEAN = 1, T_CALLABLE, T_DEFINED, T_DIVISIBLEBY, T_EQ, T_ESCAPED, T_EVEN, T_FALSE,
  T_FILTER, T_FLOAT, T_GE, T_GT, T_IN, T_INTEGER, T_ITERABLE, T_LE, T_LOWER, T_LT, T_MAPPING,
  T_NE, T_NONE, T_NUMBER, T_ODD, T_SAMEAS, T_SEQUENCE, T_STRING, T_TEST, T_TRUE, T_UNDEFINED,
  T_UPPER,
};

static const struct {
  const char *name;
  int id;
} TESTS[] = {
    {"boolean", T_BOOLEAN}, {"callable", T_CALLABLE}, {"defined", T_DEFINED},
    {"divisibleby", T_DIVISIBLEBY}, {"eq", T_EQ}, {"equalto", T_EQ}, {"==", T_EQ},
    {"escaped", T_ESCAPED}, {"even", T_EVEN}, {"false", T_FALSE}, {"filter", T_FILTER},
    {"float", T_FLOAT}, {"ge", T_GE}, {">=", T_GE}, {"gt", T_GT}, {"greaterthan", T_GT},
    {">", T_GT}, {"in", T_IN}, {"integer", T_INTEGER}, {"iterable", T_ITERABLE}, {"le", T_LE},
    {"<=", T_LE}, {"lower", T_LOWER}, {"lt", T_LT}, {"lessthan", T_LT}, {"<", T_LT},
    {"mapping", T_MAPPING}, {"ne", T_NE}, {"!=", T_NE}, {"none", T_NONE}, {"number", T_NUMBER},
    {"odd", T_ODD}, {"sameas", T_SAMEAS}, {"sequence", T_SEQUENCE}, {"string", T_STRING},
    {"test", T_TEST}, {"true", T_TRUE}, {"undefined", T_UNDEFINED}, {"upper", T_UPPER},
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

int jj_filter_id(jj_str_t name) {
  for (size_t i = 0; i < NELEM(FILTERS); i++)
    if (jj_streq(name, FILTERS[i].name)) return FILTERS[i].id;
  return 0;
}

int jj_test_id(jj_str_t name) {
  for (size_t i = 0; i < NELEM(TESTS); i++)
    if (jj_streq(name, TESTS[i].name)) return TESTS[i].id;
  return 0;
}

/* ---- helpers ----------------------------------------------------------------------------- */
#define SPN(s) (int)((s).n > 100 ? 100 : (s).n), (s).p

static jj_val_t sv(jj_ctx_t *c, jj_buf_t *b) {
  (void)c;
  return jj_strv(b->p ? b->p : "", b->n);
}

__attribute__((noreturn)) static void fail_undef(jj_ctx_t *c, jj_val_t u) {
  jj_rt_fail(c, VR_ERR_INVAL, "%.*s", (int)u.u.s.n, u.u.s.p);
}

static bool isnum(jj_val_t v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double numf(jj_val_t v) {
  return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.t == JV_BOOL ? (double)v.u.b : 0.0;
}

/* Binds positional + keyword arguments to named slots; unknown keywords, duplicates and
 * surplus positionals are errors naming the callee. out[i] is NULL when not given. */
static void bind(jj_ctx_t *c, const char *callee, const char *const *names, size_t nnames,
                 jj_val_t *args, size_t nargs, jj_str_t *kwn, jj_val_t *kwv, size_t nkw,
                 jj_val_t **out) {
  for (size_t i = 0; i < nnames; i++) out[i] = NULL;
  if (nargs > nnames)
    jj_rt_fail(c, VR_ERR_INVAL, "%s takes at most %zu argument(s), %zu given", callee, nnames,
               nargs);
  for (size_t i = 0; i < nargs; i++) out[i] = &args[i];
  for (size_t k = 0; k < nkw; k++) {
    size_t i;
    for (i = 0; i < nnames; i++)
      if (jj_streq(kwn[k], names[i])) break;
    if (i == nnames)
      jj_rt_fail(c, VR_ERR_INVAL, "%s got an unexpected keyword argument '%.*s'", callee,
                 SPN(kwn[k]));
    if (out[i])
      jj_rt_fail(c, VR_ERR_INVAL, "%s got multiple values for argument '%s'", callee, names[i]);
    out[i] = &kwv[k];
  }
}

static jj_str_t need_str(jj_ctx_t *c, const char *what, jj_val_t v) {
  if (v.t == JV_UNDEF) fail_undef(c, v);
  if (v.t != JV_STR)
    jj_rt_fail(c, VR_ERR_INVAL, "%s: expected a string, got %s", what, jj_type_name(v));
  return v.u.s;
}

static int64_t need_int(jj_ctx_t *c, const char *what, jj_val_t v) {
  if (v.t == JV_INT) return v.u.i;
  if (v.t == JV_BOOL) return v.u.b;
  if (v.t == JV_UNDEF) fail_undef(c, v);
  jj_rt_fail(c, VR_ERR_INVAL, "%s: expected an integer, got %s", what, jj_type_name(v));
}

/* len() */
static int64_t py_len(jj_ctx_t *c, jj_val_t v) {
  switch (v.t) {
  case JV_UNDEF: return 0;
  case JV_STR: return (int64_t)jj_utf8_len(v.u.s);
  case JV_LIST:
    if (v.u.l->kind == JL_GEN) jj_rt_fail(c, VR_ERR_INVAL, "object of type 'generator' has no len()");
    return (int64_t)v.u.l->n;
  case JV_DICT: return (int64_t)v.u.d->n;
  case JV_LOOP: return (int64_t)v.u.loop->items->n;
  default: jj_rt_fail(c, VR_ERR_INVAL, "object of type '%s' has no len()", jj_type_name(v));
  }
}

/* ---- case mapping (ASCII; refuses letters beyond ASCII that may have case) ---------------- */
static bool maybe_cased(uint32_t cp) {
  return (cp >= 0xB5 && cp <= 0x24F && cp != 0xD7 && cp != 0xF7 && (cp == 0xB5 || cp >= 0xC0)) ||
         (cp >= 0x250 && cp <= 0x2AF) || (cp >= 0x345 && cp <= 0x58F) ||
         (cp >= 0x10A0 && cp <= 0x10FF) || (cp >= 0x13A0 && cp <= 0x13FF) ||
         (cp >= 0x1C80 && cp <= 0x1CBF) || (cp >= 0x1D00 && cp <= 0x1FFF) ||
         (cp >= 0x2100 && cp <= 0x218F) || (cp >= 0x24B6 && cp <= 0x24E9) ||
         (cp >= 0x2C00 && cp <= 0x2D2F) || (cp >= 0xA640 && cp <= 0xA69F) ||
         (cp >= 0xA720 && cp <= 0xA7FF) || (cp >= 0xAB30 && cp <= 0xABBF) ||
         (cp >= 0xFB00 && cp <= 0xFB17) || (cp >= 0xFF21 && cp <= 0xFF5A) ||
         (cp >= 0x10400 && cp <= 0x104FF) || (cp >= 0x10570 && cp <= 0x105BF) ||
         (cp >= 0x10C80 && cp <= 0x10CFF) || (cp >= 0x118A0 && cp <= 0x118DF) ||
         (cp >= 0x16E40 && cp <= 0x16E7F) || (cp >= 0x1E900 && cp <= 0x1E94F);
}

static void check_caseable(jj_ctx_t *c, const char *what, jj_str_t s) {
  size_t i = 0, adv;
  while (i < s.n) {
    if ((unsigned char)s.p[i] < 0x80) {
      i++;
      continue;
    }
    uint32_t cp = jj_utf8_next(s.p + i, s.n - i, &adv);
    if (maybe_cased(cp))
      jj_rt_fail(c, VR_ERR_UNSUPPORTED,
                 "%s of text with the non-ASCII letter U+%04X is not supported (case mapping is "
                 "ASCII only)", what, (unsigned)cp);
    i += adv;
  }
}

static bool is_lower(char ch) { return ch >= 'a' && ch <= 'z'; }
static bool is_upper(char ch) { return ch >= 'A' && ch <= 'Z'; }
static char to_upper(char ch) { return is_lower(ch) ? (char)(ch - 32) : ch; }
static char to_lower(char ch) { return is_upper(ch) ? (char)(ch + 32) : ch; }

enum { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_PYTITLE, CASE_JTITLE };

static jj_val_t map_case(jj_ctx_t *c, jj_str_t s, int mode, const char *what) {
  check_caseable(c, what, s);
  char *o = jj_alloc(c, s.n + 1);
  bool prev_cased = false;
  for (size_t i = 0; i < s.n; i++) {
    char ch = s.p[i];
    switch (mode) {
    case CASE_UPPER: o[i] = to_upper(ch); break;
    case CASE_LOWER: o[i] = to_lower(ch); break;
    case CASE_CAPITALIZE: o[i] = i == 0 ? to_upper(ch) : to_lower(ch); break;
    case CASE_PYTITLE: /* str.title(): a cased letter after a cased one is lowered */
      o[i] = prev_cased ? to_lower(ch) : to_upper(ch);
      prev_cased = is_lower(ch) || is_upper(ch);
      break;
    case CASE_JTITLE: { /* jinja2 do_title: words start after [-\s({\[<]+ */
      bool start = i == 0 || strchr("-({[< \t\n\r\v\f", s.p[i - 1]) != NULL;
      o[i] = start ? to_upper(ch) : to_lower(ch);
      break;
    }
    }
  }
  return jj_strv(o, s.n);
}

/* ---- strip / split / replace ------------------------------------------------------------- */

static bool in_chars(uint32_t cp, const jj_str_t *chars) {
  if (!chars) return jj_py_isspace(cp);
  size_t i = 0, adv;
  while (i < chars->n) {
    if (jj_utf8_next(chars->p + i, chars->n - i, &adv) == cp) return true;
    i += adv;
  }
  return false;
}

static jj_str_t do_strip(jj_str_t s, const jj_str_t *chars, bool left, bool right) {
  size_t b = 0, e = s.n, adv;
  if (left)
    while (b < e) {
      uint32_t cp = jj_utf8_next(s.p + b, e - b, &adv);
      if (!in_chars(cp, chars)) break;
      b += adv;
    }
  if (right)
    while (e > b) {
      size_t k = e - 1;
      while (k > b && ((unsigned char)s.p[k] & 0xC0) == 0x80) k--;
      uint32_t cp = jj_utf8_next(s.p + k, e - k, &adv);
      if (!in_chars(cp, chars)) break;
      e = k;
    }
  return (jj_str_t){s.p + b, e - b};
}

static const char *find_sub(jj_str_t h, size_t from, jj_str_t nd) {
  if (nd.n == 0) return h.p + from;
  for (size_t i = from; i + nd.n <= h.n; i++)
    if (!memcmp(h.p + i, nd.p, nd.n)) return h.p + i;
  return NULL;
}

static const char *rfind_sub(jj_str_t h, size_t end, jj_str_t nd) {
  if (nd.n > end) return NULL;
  for (size_t i = end - nd.n + 1; i-- > 0;)
    if (!memcmp(h.p + i, nd.p, nd.n)) return h.p + i;
  return NULL;
}

static jj_val_t list_from(jj_ctx_t *c, jj_val_t *items, size_t n) {
  jj_list_t *l = jj_list_new(c, n);
  if (n) memcpy(l->v, items, n * sizeof *items);
  return jj_listv(l);
}

/* str.split / str.rsplit */
static jj_val_t do_split(jj_ctx_t *c, jj_str_t s, const jj_str_t *sep, int64_t maxsplit, bool rev) {
  size_t cap = 8, n = 0;
  jj_val_t *parts = jj_alloc(c, cap * sizeof *parts);
#define PUSH(p_, n_)                                                                    \
  do {                                                                                  \
    if (n == cap) {                                                                     \
      jj_val_t *np = jj_alloc(c, cap * 2 * sizeof *np);                                 \
      memcpy(np, parts, n * sizeof *np);                                                \
      parts = np;                                                                       \
      cap *= 2;                                                                         \
    }                                                                                   \
    parts[n++] = jj_strv((p_), (n_));                                                   \
  } while (0)
  if (sep) {
    if (sep->n == 0) jj_rt_fail(c, VR_ERR_INVAL, "split: empty separator");
    if (!rev) {
      size_t pos = 0;
      const char *f;
      while ((maxsplit < 0 || (int64_t)n < maxsplit) && (f = find_sub(s, pos, *sep))) {
        PUSH(s.p + pos, (size_t)(f - s.p) - pos);
        pos = (size_t)(f - s.p) + sep->n;
      }
      PUSH(s.p + pos, s.n - pos);
    } else {
      size_t end = s.n;
      const char *f;
      while ((maxsplit < 0 || (int64_t)n < maxsplit) && (f = rfind_sub(s, end, *sep))) {
        size_t at = (size_t)(f - s.p);
        PUSH(s.p + at + sep->n, end - at - sep->n);
        end = at;
      }
      PUSH(s.p, end);
      for (size_t i = 0; i < n / 2; i++) {
        jj_val_t t = parts[i];
        parts[i] = parts[n - 1 - i];
        parts[n - 1 - i] = t;
      }
    }
  } else { /* runs of whitespace; no empty strings */
    if (!rev) {
      size_t i = 0, adv;
      while (i < s.n) {
        while (i < s.n && jj_py_isspace(jj_utf8_next(s.p + i, s.n - i, &adv))) i += adv;
        if (i >= s.n) break;
        if (maxsplit >= 0 && (int64_t)n >= maxsplit) { /* the rest as it is */
          PUSH(s.p + i, s.n - i);
          break;
        }
        size_t st = i;
        while (i < s.n && !jj_py_isspace(jj_utf8_next(s.p + i, s.n - i, &adv))) i += adv;
        PUSH(s.p + st, i - st);
      }
    } else {
      jj_val_t tmp = do_split(c, s, NULL, -1, false);
      jj_list_t *all = tmp.u.l;
      if (maxsplit < 0 || (size_t)maxsplit >= all->n || all->n == 0) return tmp;
      /* the last maxsplit words; before them the head, right-stripped only */
      size_t keep = (size_t)maxsplit;
      const char *first_kept = all->v[all->n - keep].u.s.p;
      jj_str_t head = do_strip((jj_str_t){s.p, (size_t)(first_kept - s.p)}, NULL, false, true);
      PUSH(head.p, head.n);
      for (size_t k = all->n - keep; k < all->n; k++) PUSH(all->v[k].u.s.p, all->v[k].u.s.n);
    }
  }
#undef PUSH
  return list_from(c, parts, n);
}

static jj_val_t do_replace(jj_ctx_t *c, jj_str_t s, jj_str_t old, jj_str_t new_, int64_t count) {
  jj_buf_t b = {0};
  if (old.n == 0) { /* Python inserts new between every character (and at both ends) */
    size_t i = 0, adv;
    int64_t k = 0;
    if (count != 0) {
      jj_buf_put(c, &b, new_.p, new_.n);
      k++;
    }
    while (i < s.n) {
      jj_utf8_next(s.p + i, s.n - i, &adv);
      jj_buf_put(c, &b, s.p + i, adv);
      i += adv;
      if (i < s.n + 1 && (count < 0 || k < count) && i <= s.n) {
        if (i == s.n) {
          if (count < 0 || k < count) jj_buf_put(c, &b, new_.p, new_.n);
          break;
        }
        jj_buf_put(c, &b, new_.p, new_.n);
        k++;
      }
    }
    return sv(c, &b);
  }
  size_t pos = 0;
  int64_t k = 0;
  const char *f;
  while ((count < 0 || k < count) && (f = find_sub(s, pos, old))) {
    jj_buf_put(c, &b, s.p + pos, (size_t)(f - s.p) - pos);
    jj_buf_put(c, &b, new_.p, new_.n);
    pos = (size_t)(f - s.p) + old.n;
    k++;
  }
  jj_buf_put(c, &b, s.p + pos, s.n - pos);
  return sv(c, &b);
}

/* str.splitlines() boundaries: \n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029 */
static jj_val_t do_splitlines(jj_ctx_t *c, jj_str_t s) {
  size_t cap = 8, n = 0, i = 0, st = 0, adv;
  jj_val_t *parts = jj_alloc(c, cap * sizeof *parts);
  while (i < s.n) {
    uint32_t cp = jj_utf8_next(s.p + i, s.n - i, &adv);
    bool br = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) ||
              cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (br) {
      if (n == cap) {
        jj_val_t *np = jj_alloc(c, cap * 2 * sizeof *np);
        memcpy(np, parts, n * sizeof *np);
        parts = np;
        cap *= 2;
      }
      parts[n++] = jj_strv(s.p + st, i - st);
      if (cp == '\r' && i + 1 < s.n && s.p[i + 1] == '\n') adv = 2;
      st = i + adv;
    }
    i += adv;
  }
  if (st < s.n) {
    if (n == cap) {
      jj_val_t *np = jj_alloc(c, (cap + 1) * sizeof *np);
      memcpy(np, parts, n * sizeof *np);
      parts = np;
    }
    parts[n++] = jj_strv(s.p + st, s.n - st);
  }
  return list_from(c, parts, n);
}

/* ---- attribute getter of map/selectattr/sort (dotted, integer parts index) --------------- */
static jj_val_t get_path(jj_ctx_t *c, jj_val_t v, jj_val_t attr) {
  if (attr.t == JV_INT) return jj_getitem(c, v, attr);
  jj_str_t a = need_str(c, "attribute", attr);
  size_t st = 0;
  for (size_t i = 0; i <= a.n; i++) {
    if (i == a.n || a.p[i] == '.') {
      jj_str_t part = {a.p + st, i - st};
      bool digits = part.n > 0;
      int64_t idx = 0;
      for (size_t k = 0; k < part.n; k++) {
        if (part.p[k] < '0' || part.p[k] > '9') digits = false;
        else if (idx < 100000000) idx = idx * 10 + (part.p[k] - '0');
      }
      v = digits ? jj_getitem(c, v, jj_int(idx)) : jj_getitem(c, v, jj_strv(part.p, part.n));
      st = i + 1;
    }
  }
  return v;
}

/* ---- sorting (stable merge sort) --------------------------------------------------------- */
typedef struct sortkey {
  jj_val_t key;
  jj_val_t item;
} sortkey_t;

static jj_val_t fold_case(jj_ctx_t *c, jj_val_t v, bool case_sensitive) {
  if (case_sensitive || v.t != JV_STR) return v;
  return map_case(c, v.u.s, CASE_LOWER, "case-insensitive comparison");
}

/* eq_first: jinja2's sort filter compares one-element key lists, so equal keys (two Undefined,
 * two equal dicts) never reach '<'; dictsort compares the keys themselves */
static void merge_sort(jj_ctx_t *c, sortkey_t *a, sortkey_t *tmp, size_t n, bool reverse, bool eq_first) {
  if (n < 2) return;
  size_t h = n / 2;
  merge_sort(c, a, tmp, h, reverse, eq_first);
  merge_sort(c, a + h, tmp, n - h, reverse, eq_first);
  size_t i = 0, j = h, k = 0;
  while (i < h && j < n) {
    int r = (eq_first && jj_equal(a[j].key, a[i].key)) ? 0 : jj_compare(c, a[j].key, a[i].key);
    bool take_right = reverse ? r > 0 : r < 0;
    tmp[k++] = take_right ? a[j++] : a[i++];
  }
  while (i < h) tmp[k++] = a[i++];
  while (j < n) tmp[k++] = a[j++];
  memcpy(a, tmp, n * sizeof *a);
}

/* ---- filters ----------------------------------------------------------------------------- */

static jj_val_t filt_select(jj_ctx_t *c, jj_val_t v, jj_val_t *args, size_t nargs, bool attr,
                            bool want) {
  if (!jj_truthy(v)) return jj_listv(jj_list_new(c, 0)); /* jinja2: `if value:` first */
  jj_list_t *items = jj_iter_items(c, v);
  size_t off = attr ? 1 : 0;
  if (attr && nargs < 1) jj_rt_fail(c, VR_ERR_INVAL, "selectattr/rejectattr need an attribute");
  jj_list_t *out = jj_list_new(c, items->n);
  size_t k = 0;
  out->n = 0;
  c->lazy_out = out; /* what is produced so far, if an item fails */
  for (size_t i = 0; i < items->n; i++) {
    jj_val_t x = attr ? get_path(c, items->v[i], args[0]) : items->v[i];
    bool r;
    if (nargs > off) {
      jj_str_t tn = need_str(c, "select test name", args[off]);
      r = jj_test_by_name(c, tn, x, args + off + 1, nargs - off - 1);
    } else {
      r = jj_truthy(x);
    }
    if (r == want) {
      out->v[k++] = items->v[i];
      out->n = k;
    }
  }
  out->n = k;
  return jj_listv(out);
}

static jj_val_t filt_indent(jj_ctx_t *c, jj_val_t v, jj_val_t **p) {
  /* jinja2 does `s += "\n"` on the value itself: anything but a string fails there */
  if (v.t == JV_UNDEF) fail_undef(c, v);
  if (v.t != JV_STR) jj_rt_fail(c, VR_ERR_INVAL, "indent: expected a string, got %s", jj_type_name(v));
  jj_str_t s = v.u.s;
  jj_str_t ind;
  if (!p[0]) ind = (jj_str_t){"    ", 4};
  else if (p[0]->t == JV_STR) ind = p[0]->u.s;
  else {
    int64_t w = need_int(c, "indent width", *p[0]);
    if (w < 0) w = 0;
    if (w > 4096) jj_rt_fail(c, VR_ERR_TOO_LARGE, "indent width too large");
    char *sp = jj_alloc(c, (size_t)w + 1);
    memset(sp, ' ', (size_t)w);
    ind = (jj_str_t){sp, (size_t)w};
  }
  bool first = p[1] && jj_truthy(*p[1]), blank = p[2] && jj_truthy(*p[2]);
  /* jinja2: s += "\n"; lines = s.splitlines() */
  jj_buf_t t = {0};
  jj_buf_put(c, &t, s.p, s.n);
  jj_buf_putc(c, &t, '\n');
  jj_list_t *lines = do_splitlines(c, (jj_str_t){t.p, t.n}).u.l;
  jj_buf_t o = {0};
  if (first) jj_buf_put(c, &o, ind.p, ind.n);
  for (size_t i = 0; i < lines->n; i++) {
    jj_str_t ln = lines->v[i].u.s;
    if (i > 0) {
      jj_buf_putc(c, &o, '\n');
      if (blank || ln.n) jj_buf_put(c, &o, ind.p, ind.n);
    }
    jj_buf_put(c, &o, ln.p, ln.n);
  }
  return sv(c, &o);
}

static jj_val_t filt_tojson(jj_ctx_t *c, jj_val_t v, jj_val_t **p) {
  jj_json_opts_t o = {.item_sep = {", ", 2}, .key_sep = {": ", 2}};
  o.ensure_ascii = p[0] && jj_truthy(*p[0]);
  if (p[1] && p[1]->t != JV_NONE) {
    o.pretty = true;
    if (p[1]->t == JV_STR) o.indent = p[1]->u.s;
    else {
      int64_t w = need_int(c, "tojson indent", *p[1]);
      if (w < 0) w = 0;
      if (w > 256) jj_rt_fail(c, VR_ERR_TOO_LARGE, "tojson indent too large");
      char *sp = jj_alloc(c, (size_t)w + 1);
      memset(sp, ' ', (size_t)w);
      o.indent = (jj_str_t){sp, (size_t)w};
    }
    o.item_sep = (jj_str_t){",", 1};
  }
  if (p[2] && p[2]->t != JV_NONE) {
    if (p[2]->t != JV_LIST || p[2]->u.l->n != 2)
      jj_rt_fail(c, VR_ERR_INVAL, "tojson separators: expected (item_separator, key_separator)");
    o.item_sep = need_str(c, "tojson separators", p[2]->u.l->v[0]);
    o.key_sep = need_str(c, "tojson separators", p[2]->u.l->v[1]);
  }
  o.sort_keys = p[3] && jj_truthy(*p[3]);
  jj_buf_t b = {0};
  jj_json(c, &b, v, &o, 0);
  return sv(c, &b);
}

/* Python int(str): optional whitespace and sign, digits with single underscores between */
static bool parse_int_str(jj_str_t s, int base, int64_t *out) {
  s = do_strip(s, NULL, true, true);
  size_t i = 0;
  bool neg = false;
  if (i < s.n && (s.p[i] == '+' || s.p[i] == '-')) neg = s.p[i++] == '-';
  if (i >= s.n) return false;
  /* a 0x / 0o / 0b prefix matching the base (or picking it, for base 0) */
  if (i + 1 < s.n && s.p[i] == '0') {
    char k = (char)(s.p[i + 1] | 0x20);
    int pb = k == 'x' ? 16 : k == 'o' ? 8 : k == 'b' ? 2 : 0;
    if (pb && (base == pb || base == 0)) {
      base = pb;
      i += 2;
      if (i < s.n && s.p[i] == '_') i++;
    }
  }
  if (base == 0) {
    if (s.n - i > 1 && s.p[i] == '0') return false; /* Python: no leading zeros in base 0 */
    base = 10;
  }
  uint64_t v = 0;
  bool any = false, last_us = false;
  for (; i < s.n; i++) {
    char ch = s.p[i];
    if (ch == '_') {
      if (!any || last_us) return false;
      last_us = true;
      continue;
    }
    int d = (ch >= '0' && ch <= '9') ? ch - '0' : ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z') ? (ch | 0x20) - 'a' + 10 : 99;
    if (d >= base) return false;
    if (v > (uint64_t)INT64_MAX / (uint64_t)base) return false;
    v = v * (uint64_t)base + (uint64_t)d;
    if (v > (uint64_t)INT64_MAX) return false;
    any = true;
    last_us = false;
  }
  if (!any || last_us) return false;
  *out = neg ? -(int64_t)v : (int64_t)v;
  return true;
}

static bool parse_float_str(jj_ctx_t *c, jj_str_t s, double *out) {
  s = do_strip(s, NULL, true, true);
  if (s.n == 0 || s.n > 300) return false;
  jj_val_t z = jj_mkstr(c, s.p, s.n);
  for (size_t i = 0; i < s.n; i++)
    if (!strchr("0123456789+-.eEinfatyINFATY_", s.p[i])) return false;
  char *end;
  double d = strtod(z.u.s.p, &end);
  if (end != z.u.s.p + s.n) return false;
  *out = d;
  return true;
}

static jj_val_t filt_round(jj_ctx_t *c, jj_val_t v, jj_val_t **p) {
  int64_t prec = p[0] ? need_int(c, "round precision", *p[0]) : 0;
  jj_str_t method = p[1] ? need_str(c, "round method", *p[1]) : (jj_str_t){"common", 6};
  if (!isnum(v)) jj_rt_fail(c, VR_ERR_INVAL, "round: expected a number, got %s", jj_type_name(v));
  if (prec < 0 || prec > 15) jj_rt_fail(c, VR_ERR_UNSUPPORTED, "round: precision %lld", (long long)prec);
  double x = numf(v);
  if (jj_streq(method, "common")) {
    if (v.t != JV_FLOAT) return v.t == JV_BOOL ? jj_int(v.u.b) : v; /* round(int, n) is the int */
    char tmp[400];
    snprintf(tmp, sizeof tmp, "%.*f", (int)prec, x); /* exact value, half to even: Python's */
    return jj_float(strtod(tmp, NULL));
  }
  double m = pow(10.0, (double)prec);
  if (jj_streq(method, "ceil")) return jj_float(ceil(x * m) / m);
  if (jj_streq(method, "floor")) return jj_float(floor(x * m) / m);
  jj_rt_fail(c, VR_ERR_INVAL, "round: method must be common, ceil or floor");
}

static jj_val_t filter_eager(jj_ctx_t *c, const jj_node_t *n, jj_val_t v, jj_val_t *args,
                             size_t nargs, jj_str_t *kwn, jj_val_t *kwv, size_t nkw) {
  jj_val_t *p[6];
#define BIND(...)                                                                          \
  do {                                                                                     \
    static const char *const names_[] = {__VA_ARGS__};                                     \
    bind(c, fname, names_, NELEM(names_), args, nargs, kwn, kwv, nkw, p);                  \
  } while (0)
#define NOARGS() bind(c, fname, NULL, 0, args, nargs, kwn, kwv, nkw, p)
  char fname[64];
  snprintf(fname, sizeof fname, "filter '%.*s'", (int)(n->name.n > 40 ? 40 : n->name.n), n->name.p);
  switch (n->fid) {
  case F_ABS:
    NOARGS();
    if (v.t == JV_INT) {
      if (v.u.i == INT64_MIN) jj_rt_fail(c, VR_ERR_UNSUPPORTED, "abs: integer overflow");
      return jj_int(v.u.i < 0 ? -v.u.i : v.u.i);
    }
    if (v.t == JV_BOOL) return jj_int(v.u.b);
    if (v.t == JV_FLOAT) return jj_float(fabs(v.u.f));
    jj_rt_fail(c, VR_ERR_INVAL, "bad operand type for abs(): '%s'", jj_type_name(v));
  case F_ATTR: { /* Python getattr only: a dict's keys are not its attributes */
    BIND("name");
    if (!p[0]) jj_rt_fail(c, VR_ERR_INVAL, "attr needs a name");
    jj_str_t an = need_str(c, "attr", *p[0]);
    if (v.t == JV_NS || v.t == JV_LOOP || v.t == JV_UNDEF || jj_has_method(v, an))
      return jj_getattr(c, v, an);
    return jj_undef((jj_str_t){"attr: no such attribute", 23});
  }
  case F_BATCH: {
    BIND("linecount", "fill_with");
    if (!p[0]) jj_rt_fail(c, VR_ERR_INVAL, "batch needs linecount");
    int64_t k = need_int(c, "batch", *p[0]);
    if (k <= 0) jj_rt_fail(c, VR_ERR_INVAL, "batch: linecount must be positive");
    jj_list_t *items = jj_iter_items(c, v);
    size_t nb = (items->n + (size_t)k - 1) / (size_t)k;
    jj_list_t *out = jj_list_new(c, nb);
    for (size_t b = 0; b < nb; b++) {
      size_t st = b * (size_t)k, cnt = items->n - st < (size_t)k ? items->n - st : (size_t)k;
      size_t len = (cnt < (size_t)k && p[1]) ? (size_t)k : cnt;
      jj_list_t *row = jj_list_new(c, len);
      for (size_t i = 0; i < len; i++) row->v[i] = i < cnt ? items->v[st + i] : *p[1];
      out->v[b] = jj_listv(row);
    }
    return jj_listv(out);
  }
  case F_CAPITALIZE:
    NOARGS();
    return map_case(c, jj_tostr(c, v).u.s, CASE_CAPITALIZE, "capitalize");
  case F_DEFAULT:
    BIND("default_value", "boolean");
    if (v.t == JV_UNDEF || (p[1] && jj_truthy(*p[1]) && !jj_truthy(v)))
      return p[0] ? *p[0] : jj_strv("", 0);
    return v;
  case F_DICTSORT: {
    BIND("case_sensitive", "by", "reverse");
    if (v.t != JV_DICT) jj_rt_fail(c, VR_ERR_INVAL, "dictsort: expected a dict, got %s", jj_type_name(v));
    bool cs = p[0] && jj_truthy(*p[0]), rev = p[2] && jj_truthy(*p[2]);
    bool by_value = false;
    if (p[1]) {
      jj_str_t by = need_str(c, "dictsort by", *p[1]);
      if (jj_streq(by, "value")) by_value = true;
      else if (!jj_streq(by, "key")) jj_rt_fail(c, VR_ERR_INVAL, "dictsort: by must be 'key' or 'value'");
    }
    size_t m = v.u.d->n;
    sortkey_t *a = jj_alloc(c, (m + 1) * sizeof *a), *tmp = jj_alloc(c, (m + 1) * sizeof *a);
    for (size_t i = 0; i < m; i++) {
      jj_list_t *pair = jj_list_new(c, 2);
      pair->kind = JL_TUPLE;
      pair->v[0] = jj_strv(v.u.d->k[i].p, v.u.d->k[i].n);
      pair->v[1] = v.u.d->v[i];
      a[i].item = jj_listv(pair);
      a[i].key = fold_case(c, pair->v[by_value ? 1 : 0], cs);
    }
    merge_sort(c, a, tmp, m, rev, false);
    jj_list_t *out = jj_list_new(c, m);
    for (size_t i = 0; i < m; i++) out->v[i] = a[i].item;
    return jj_listv(out);
  }
  case F_ESCAPE: {
    NOARGS();
    jj_str_t s = jj_tostr(c, v).u.s;
    jj_buf_t b = {0};
    for (size_t i = 0; i < s.n; i++) {
      switch (s.p[i]) {
      case '&': jj_buf_put(c, &b, "&amp;", 5); break;
      case '<': jj_buf_put(c, &b, "&lt;", 4); break;
      case '>': jj_buf_put(c, &b, "&gt;", 4); break;
      case '"': jj_buf_put(c, &b, "&#34;", 5); break;
      case '\'': jj_buf_put(c, &b, "&#39;", 5); break;
      default: jj_buf_putc(c, &b, s.p[i]);
      }
    }
    return sv(c, &b);
  }
  case F_FIRST: {
    NOARGS();
    /* a generator that failed after producing something: first() never reached the failure */
    if (v.t == JV_LIST && v.u.l->err_status && v.u.l->n > 0) return v.u.l->v[0];
    jj_list_t *items = jj_iter_items(c, v);
    if (items->n == 0) return jj_undef((jj_str_t){"No first item, sequence was empty.", 34});
    return items->v[0];
  }
  case F_LAST: {
    NOARGS();
    if (v.t == JV_LIST && v.u.l->kind == JL_GEN)
      jj_rt_fail(c, VR_ERR_INVAL, "last: 'generator' object is not reversible");
    jj_list_t *items = jj_iter_items(c, v);
    if (items->n == 0) return jj_undef((jj_str_t){"No last item, sequence was empty.", 33});
    return items->v[items->n - 1];
  }
  case F_FLOAT: {
    BIND("default");
    jj_val_t def = p[0] ? *p[0] : jj_float(0.0);
    if (v.t == JV_UNDEF) fail_undef(c, v); /* float(Undefined) raises */
    if (v.t == JV_FLOAT) return v;
    if (v.t == JV_INT || v.t == JV_BOOL) return jj_float(numf(v));
    double d;
    if (v.t == JV_STR && parse_float_str(c, v.u.s, &d)) return jj_float(d);
    return def;
  }
  case F_INT: {
    BIND("default", "base");
    jj_val_t def = p[0] ? *p[0] : jj_int(0);
    int64_t base = p[1] ? need_int(c, "int base", *p[1]) : 10;
    if (v.t == JV_UNDEF) fail_undef(c, v); /* int(Undefined) raises */
    if (v.t == JV_INT) return v;
    if (v.t == JV_BOOL) return jj_int(v.u.b);
    if (v.t == JV_FLOAT) {
      if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18) return def;
      return jj_int((int64_t)v.u.f);
    }
    if (v.t == JV_STR) {
      int64_t r;
      if ((base == 0 || (base >= 2 && base <= 36)) && parse_int_str(v.u.s, (int)base, &r))
        return jj_int(r);
      double d;
      if (parse_float_str(c, v.u.s, &d) && isfinite(d) && fabs(d) < 9.2e18) return jj_int((int64_t)d);
    }
    return def;
  }
  case F_ITEMS: {
    NOARGS();
    if (v.t == JV_UNDEF) return jj_listv(jj_list_new(c, 0));
    if (v.t != JV_DICT) jj_rt_fail(c, VR_ERR_INVAL, "items: can only get item pairs from a mapping");
    jj_val_t r = jj_call_method(c, v, (jj_str_t){"items", 5}, NULL, 0, NULL, NULL, 0);
    r.u.l->kind = JL_LIST; /* made a generator by the caller */
    return r;
  }
  case F_JOIN: {
    BIND("d", "attribute");
    jj_str_t sep = p[0] ? jj_tostr(c, *p[0]).u.s : (jj_str_t){"", 0};
    jj_list_t *items = jj_iter_items(c, v);
    jj_buf_t b = {0};
    for (size_t i = 0; i < items->n; i++) {
      if (i) jj_buf_put(c, &b, sep.p, sep.n);
      jj_val_t x = p[1] ? get_path(c, items->v[i], *p[1]) : items->v[i];
      jj_print(c, &b, x);
    }
    return sv(c, &b);
  }
  case F_LENGTH:
    NOARGS();
    return jj_int(py_len(c, v));
  case F_LIST: {
    NOARGS();
    jj_list_t *items = jj_iter_items(c, v);
    return list_from(c, items->v, items->n);
  }
  case F_LOWER:
    NOARGS();
    return map_case(c, jj_tostr(c, v).u.s, CASE_LOWER, "lower");
  case F_UPPER:
    NOARGS();
    return map_case(c, jj_tostr(c, v).u.s, CASE_UPPER, "upper");
  case F_TITLE:
    NOARGS();
    return map_case(c, jj_tostr(c, v).u.s, CASE_JTITLE, "title");
  case F_MAP: {
    if (!jj_truthy(v)) return jj_listv(jj_list_new(c, 0)); /* jinja2: `if value:` first */
    jj_list_t *items = jj_iter_items(c, v);
    jj_list_t *out = jj_list_new(c, items->n);
    bool by_attr = false;
    jj_val_t attr = {0}, def = {0};
    bool has_def = false;
    for (size_t k = 0; k < nkw; k++) {
      if (jj_streq(kwn[k], "attribute")) {
        by_attr = true;
        attr = kwv[k];
      } else if (jj_streq(kwn[k], "default")) {
        has_def = true;
        def = kwv[k];
      } else {
        jj_rt_fail(c, VR_ERR_INVAL, "map got an unexpected keyword argument '%.*s'", SPN(kwn[k]));
      }
    }
    if (!by_attr && nargs == 0) jj_rt_fail(c, VR_ERR_INVAL, "map: give a filter name or attribute=");
    if (by_attr && nargs) jj_rt_fail(c, VR_ERR_INVAL, "map: attribute= takes no positional arguments");
    out->n = 0;
    for (size_t i = 0; i < items->n; i++) {
      c->lazy_out = out; /* (re)set: a filter named by map may be lazy itself */
      out->n = i;
      if (by_attr) {
        jj_val_t x = get_path(c, items->v[i], attr);
        out->v[i] = (x.t == JV_UNDEF && has_def) ? def : x;
      } else {
        jj_str_t fn = need_str(c, "map filter name", args[0]);
        out->v[i] = jj_filter_by_name(c, fn, items->v[i], args + 1, nargs - 1);
      }
    }
    out->n = items->n;
    return jj_listv(out);
  }
  case F_MAX:
  case F_MIN: {
    BIND("case_sensitive", "attribute");
    jj_list_t *items = jj_iter_items(c, v);
    if (items->n == 0)
      return jj_undef((jj_str_t){"No aggregated item, sequence was empty.", 39});
    bool cs = p[0] && jj_truthy(*p[0]);
    size_t best = 0;
    jj_val_t bk = fold_case(c, p[1] ? get_path(c, items->v[0], *p[1]) : items->v[0], cs);
    for (size_t i = 1; i < items->n; i++) {
      jj_val_t k = fold_case(c, p[1] ? get_path(c, items->v[i], *p[1]) : items->v[i], cs);
      int r = jj_compare(c, k, bk);
      if (n->fid == F_MAX ? r > 0 : r < 0) {
        best = i;
        bk = k;
      }
    }
    return items->v[best];
  }
  case F_REJECT: return filt_select(c, v, args, nargs, false, false);
  case F_SELECT: return filt_select(c, v, args, nargs, false, true);
  case F_REJECTATTR: return filt_select(c, v, args, nargs, true, false);
  case F_SELECTATTR: return filt_select(c, v, args, nargs, true, true);
  case F_REPLACE: {
    BIND("old", "new", "count");
    if (!p[0] || !p[1]) jj_rt_fail(c, VR_ERR_INVAL, "replace needs old and new");
    int64_t cnt = (p[2] && p[2]->t != JV_NONE) ? need_int(c, "replace count", *p[2]) : -1;
    return do_replace(c, jj_tostr(c, v).u.s, jj_tostr(c, *p[0]).u.s, jj_tostr(c, *p[1]).u.s, cnt);
  }
  case F_REVERSE: {
    NOARGS();
    if (v.t == JV_STR) {
      jj_list_t *ch = jj_iter_items(c, v);
      jj_buf_t b = {0};
      for (size_t i = ch->n; i-- > 0;) jj_buf_put(c, &b, ch->v[i].u.s.p, ch->v[i].u.s.n);
      return sv(c, &b);
    }
    /* reversed(x) for lists, tuples and views is an iterator; a generator is not
       reversible, so jinja2 falls back to a reversed list */
    bool was_gen = v.t == JV_LIST && v.u.l->kind == JL_GEN;
    jj_list_t *items = jj_iter_items(c, v);
    jj_list_t *out = jj_list_new(c, items->n);
    for (size_t i = 0; i < items->n; i++) out->v[i] = items->v[items->n - 1 - i];
    out->kind = (was_gen || v.t != JV_LIST) ? JL_LIST : JL_GEN;
    /* reversed() works on dicts and on Undefined (it has __len__ and __getitem__): an iterator */
    if (v.t == JV_DICT || v.t == JV_UNDEF) out->kind = JL_GEN;
    return jj_listv(out);
  }
  case F_ROUND:
    BIND("precision", "method");
    return filt_round(c, v, p);
  case F_SAFE:
  case F_STRING:
    NOARGS();
    return jj_tostr(c, v);
  case F_SORT:
  case F_UNIQUE: {
    if (n->fid == F_SORT) BIND("reverse", "case_sensitive", "attribute");
    else {
      BIND("case_sensitive", "attribute");
      p[2] = p[1];
      p[1] = p[0];
      p[0] = NULL;
    }
    jj_list_t *items = jj_iter_items(c, v);
    bool rev = p[0] && jj_truthy(*p[0]), cs = p[1] && jj_truthy(*p[1]);
    size_t m = items->n;
    sortkey_t *a = jj_alloc(c, (m + 1) * sizeof *a), *tmp = jj_alloc(c, (m + 1) * sizeof *a);
    for (size_t i = 0; i < m; i++) {
      a[i].item = items->v[i];
      a[i].key = fold_case(c, p[2] ? get_path(c, items->v[i], *p[2]) : items->v[i], cs);
    }
    jj_list_t *out = jj_list_new(c, m);
    if (n->fid == F_SORT) {
      merge_sort(c, a, tmp, m, rev, true);
      for (size_t i = 0; i < m; i++) out->v[i] = a[i].item;
      return jj_listv(out);
    }
    size_t k = 0;
    for (size_t i = 0; i < m; i++) {
      jj_val_t key = a[i].key; /* do_unique keeps a set of the keys seen */
      if (key.t == JV_DICT || (key.t == JV_LIST && key.u.l->kind != JL_TUPLE && key.u.l->kind != JL_GEN &&
                               key.u.l->kind != JL_VALUES))
        jj_rt_fail(c, VR_ERR_INVAL, "unique: unhashable type: '%s'", jj_type_name(key));
      bool seen = false;
      for (size_t j = 0; j < i && !seen; j++) seen = jj_equal(a[j].key, a[i].key);
      if (!seen) out->v[k++] = a[i].item;
    }
    out->n = k;
    return jj_listv(out);
  }
  case F_SUM: {
    BIND("attribute", "start");
    jj_list_t *items = jj_iter_items(c, v);
    jj_val_t acc = p[1] ? *p[1] : jj_int(0);
    for (size_t i = 0; i < items->n; i++) {
      jj_val_t x = p[0] ? get_path(c, items->v[i], *p[0]) : items->v[i];
      if (!isnum(x) || !isnum(acc))
        jj_rt_fail(c, VR_ERR_INVAL, "sum: unsupported operand types '%s' and '%s'",
                   jj_type_name(acc), jj_type_name(x));
      if (acc.t == JV_FLOAT || x.t == JV_FLOAT) {
        acc = jj_float(numf(acc) + numf(x));
      } else {
        int64_t a0 = acc.t == JV_INT ? acc.u.i : acc.u.b, x0 = x.t == JV_INT ? x.u.i : x.u.b, r;
        if (__builtin_add_overflow(a0, x0, &r))
          jj_rt_fail(c, VR_ERR_UNSUPPORTED, "sum: integer overflow (beyond 64 bits)");
        acc = jj_int(r);
      }
    }
    return acc;
  }
  case F_TOJSON:
    BIND("ensure_ascii", "indent", "separators", "sort_keys");
    return filt_tojson(c, v, p);
  case F_TRIM: {
    BIND("chars");
    jj_str_t s = jj_tostr(c, v).u.s;
    if (p[0] && p[0]->t != JV_NONE) {
      jj_str_t ch = need_str(c, "trim chars", *p[0]);
      jj_str_t r = do_strip(s, &ch, true, true);
      return jj_strv(r.p, r.n);
    }
    jj_str_t r = do_strip(s, NULL, true, true);
    return jj_strv(r.p, r.n);
  }
  case F_INDENT:
    BIND("width", "first", "blank");
    return filt_indent(c, v, p);
  case -1:
    jj_rt_fail(c, VR_ERR_UNSUPPORTED, "the filter '%.*s' is not supported", SPN(n->name));
  }
#undef BIND
#undef NOARGS
  jj_rt_fail(c, VR_ERR_INTERNAL, "filter '%.*s' has no implementation", SPN(n->name));
}

/* The filters that are generators in jinja2: their result is a JL_GEN, and an error while
 * making it is kept in the generator and raised only when something consumes it (a template
 * that merely tests `{% if xs | select(...) %}` never fails, and is always true, in jinja2).
 * Bounds (VR_ERR_TOO_LARGE) and allocation failures are raised at once. */
static bool is_lazy(int fid) {
  return fid == F_MAP || fid == F_SELECT || fid == F_REJECT || fid == F_SELECTATTR ||
         fid == F_REJECTATTR || fid == F_UNIQUE || fid == F_ITEMS || fid == F_BATCH;
}

jj_val_t jj_apply_filter(jj_ctx_t *c, const jj_node_t *n, jj_val_t v, jj_val_t *args,
                         size_t nargs, jj_str_t *kwn, jj_val_t *kwv, size_t nkw) {
  if (!is_lazy(n->fid)) return filter_eager(c, n, v, args, nargs, kwn, kwv, nkw);
  jmp_buf saved;
  memcpy(&saved, &c->err.jb, sizeof saved);
  int depth = c->depth, line = c->line;
  jj_buf_t *out = c->out;
  jj_list_t *outer_lazy = c->lazy_out;
  c->lazy_out = NULL;
  if (setjmp(c->err.jb)) {
    memcpy(&c->err.jb, &saved, sizeof saved);
    c->depth = depth;
    c->line = line;
    c->out = out;
    jj_list_t *partial = c->lazy_out;
    c->lazy_out = outer_lazy;
    if (c->err.status == VR_ERR_TOO_LARGE || c->err.status == VR_ERR_NOMEM) longjmp(c->err.jb, 1);
    jj_list_t *g = partial ? partial : jj_list_new(c, 0);
    g->kind = JL_GEN;
    g->err_status = c->err.status;
    g->err_msg = jj_mkstr(c, c->msg, strlen(c->msg)).u.s.p;
    return jj_listv(g);
  }
  jj_val_t r = filter_eager(c, n, v, args, nargs, kwn, kwv, nkw);
  memcpy(&c->err.jb, &saved, sizeof saved);
  c->lazy_out = outer_lazy;
  r.u.l->kind = JL_GEN;
  return r;
}

/* ---- tests ------------------------------------------------------------------------------- */

static bool str_all(jj_str_t s, bool upper) {
  bool any = false;
  for (size_t i = 0; i < s.n; i++) {
    if (is_lower(s.p[i])) {
      if (upper) return false;
      any = true;
    } else if (is_upper(s.p[i])) {
      if (!upper) return false;
      any = true;
    }
  }
  return any;
}

bool jj_apply_test(jj_ctx_t *c, const jj_node_t *n, jj_val_t v, jj_val_t *args, size_t nargs) {
  size_t want = 0;
  switch (n->fid) {
  case T_DIVISIBLEBY: case T_EQ: case T_GE: case T_GT: case T_IN: case T_LE: case T_LT:
  case T_NE: case T_SAMEAS: want = 1; break;
  default: break;
  }
  if (nargs != want)
    jj_rt_fail(c, VR_ERR_INVAL, "test '%.*s' takes %zu argument(s), %zu given", SPN(n->name), want,
               nargs);
  switch (n->fid) {
  case T_BOOLEAN: return v.t == JV_BOOL;
  case T_CALLABLE: return v.t == JV_MACRO || v.t == JV_FUNC || v.t == JV_METHOD;
  case T_DEFINED: return v.t != JV_UNDEF;
  case T_UNDEFINED: return v.t == JV_UNDEF;
  case T_NONE: return v.t == JV_NONE;
  case T_TRUE: return v.t == JV_BOOL && v.u.b;
  case T_FALSE: return v.t == JV_BOOL && !v.u.b;
  case T_INTEGER: return v.t == JV_INT;
  case T_FLOAT: return v.t == JV_FLOAT;
  case T_NUMBER: return isnum(v);
  case T_STRING: return v.t == JV_STR;
  case T_MAPPING: return v.t == JV_DICT;
  case T_ITERABLE: return v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
  case T_SEQUENCE: return v.t == JV_STR || jj_is_seq(v) || v.t == JV_DICT || v.t == JV_UNDEF;
  case T_ESCAPED: return false;
  case T_ODD:
  case T_EVEN: {
    if (!isnum(v)) {
      if (v.t == JV_UNDEF) fail_undef(c, v);
      jj_rt_fail(c, VR_ERR_INVAL, "test '%.*s': expected a number, got %s", SPN(n->name), jj_type_name(v));
    }
    double m = fmod(numf(v), 2.0);
    if (m < 0) m += 2.0;
    return n->fid == T_ODD ? m == 1.0 : m == 0.0;
  }
  case T_DIVISIBLEBY: {
    if (!isnum(v) || !isnum(args[0]))
      jj_rt_fail(c, VR_ERR_INVAL, "divisibleby: expected numbers");
    if (numf(args[0]) == 0) jj_rt_fail(c, VR_ERR_INVAL, "integer division or modulo by zero");
    return fmod(numf(v), numf(args[0])) == 0;
  }
  case T_EQ: return jj_equal(v, args[0]);
  case T_NE: return !jj_equal(v, args[0]);
  case T_LT: case T_LE: case T_GT: case T_GE: {
    if (v.t == JV_UNDEF) fail_undef(c, v);
    if (args[0].t == JV_UNDEF) fail_undef(c, args[0]);
    int r = jj_compare(c, v, args[0]);
    return n->fid == T_LT ? r < 0 : n->fid == T_LE ? r <= 0 : n->fid == T_GT ? r > 0 : r >= 0;
  }
  case T_IN: {
    jj_val_t seq = args[0];
    if (seq.t == JV_STR) {
      jj_str_t h = seq.u.s, nd = need_str(c, "'in <string>'", v);
      return find_sub(h, 0, nd) != NULL;
    }
    jj_list_t *items = jj_iter_items(c, seq);
    if (seq.t == JV_DICT) return v.t == JV_STR && jj_dict_get(seq.u.d, v.u.s);
    for (size_t i = 0; i < items->n; i++)
      if (jj_equal(items->v[i], v)) return true;
    return false;
  }
  case T_SAMEAS: {
    jj_val_t o = args[0];
    if (v.t != o.t) return false;
    switch (v.t) {
    case JV_NONE: case JV_UNDEF: return true;
    case JV_BOOL: return v.u.b == o.u.b;
    case JV_LIST: return v.u.l == o.u.l;
    case JV_DICT: case JV_NS: return v.u.d == o.u.d;
    default:
      jj_rt_fail(c, VR_ERR_UNSUPPORTED, "'sameas' on a %s (Python identity) is not supported", jj_type_name(v));
    }
  }
  case T_LOWER: return str_all(jj_tostr(c, v).u.s, false);
  case T_UPPER: return str_all(jj_tostr(c, v).u.s, true);
  case T_FILTER: return v.t == JV_STR && jj_filter_id(v.u.s) > 0;
  case T_TEST: return v.t == JV_STR && jj_test_id(v.u.s) > 0;
  }
  jj_rt_fail(c, VR_ERR_INTERNAL, "test '%.*s' has no implementation", SPN(n->name));
}

/* ---- methods ----------------------------------------------------------------------------- */

static const char *const STR_METHODS[] = {
    "strip", "lstrip", "rstrip", "startswith", "endswith", "split", "rsplit", "replace", "upper",
    "lower", "title", "capitalize", "find", "rfind", "count", "join", "splitlines", "isdigit",
    "isalpha", "isalnum", "isspace", "islower", "isupper", "index", "rindex",
    /* Python has these; not supported here */
    "format", "format_map", "center", "ljust", "rjust", "zfill", "partition", "rpartition",
    "expandtabs", "casefold", "swapcase", "encode", "translate", "removeprefix", "removesuffix",
    "istitle", "isnumeric", "isdecimal", "isidentifier", "isprintable", "isascii",
};
static const char *const DICT_METHODS[] = {
    "items", "keys", "values", "get", "copy",
    "pop", "popitem", "setdefault", "update", "clear", "fromkeys",
};
static const char *const LIST_METHODS[] = {
    "index", "count", "copy",
    "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
};

static bool name_in(jj_str_t name, const char *const *tab, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (jj_streq(name, tab[i])) return true;
  return false;
}

bool jj_has_method(jj_val_t self, jj_str_t name) {
  switch (self.t) {
  case JV_STR: return name_in(name, STR_METHODS, NELEM(STR_METHODS));
  case JV_DICT: return name_in(name, DICT_METHODS, NELEM(DICT_METHODS));
  case JV_LIST: return name_in(name, LIST_METHODS, NELEM(LIST_METHODS));
  default: return false;
  }
}

static bool prefix_match(jj_ctx_t *c, jj_str_t s, jj_val_t arg, bool suffix) {
  if (arg.t == JV_LIST && arg.u.l->kind == JL_TUPLE) {
    for (size_t i = 0; i < arg.u.l->n; i++)
      if (prefix_match(c, s, arg.u.l->v[i], suffix)) return true;
    return false;
  }
  jj_str_t p = need_str(c, suffix ? "endswith" : "startswith", arg);
  if (p.n > s.n) return false;
  return memcmp(suffix ? s.p + s.n - p.n : s.p, p.p, p.n) == 0;
}

static jj_val_t str_method(jj_ctx_t *c, jj_str_t s, jj_str_t name, jj_val_t *args, size_t nargs,
                           jj_str_t *kwn, jj_val_t *kwv, size_t nkw) {
  jj_val_t *p[4];
  char fname[64];
  snprintf(fname, sizeof fname, "str.%.*s", (int)(name.n > 40 ? 40 : name.n), name.p);
#define BINDM(...)                                                                         \
  do {                                                                                     \
    static const char *const names_[] = {__VA_ARGS__};                                     \
    bind(c, fname, names_, NELEM(names_), args, nargs, kwn, kwv, nkw, p);                  \
  } while (0)
#define NOARGSM() bind(c, fname, NULL, 0, args, nargs, kwn, kwv, nkw, p)
  bool l = jj_streq(name, "lstrip"), r = jj_streq(name, "rstrip");
  if (l || r || jj_streq(name, "strip")) {
    BINDM("chars");
    jj_str_t chars, *cp = NULL;
    if (p[0] && p[0]->t != JV_NONE) {
      chars = need_str(c, fname, *p[0]);
      cp = &chars;
    }
    jj_str_t o = do_strip(s, cp, !r, !l);
    return jj_strv(o.p, o.n);
  }
  if (jj_streq(name, "startswith") || jj_streq(name, "endswith")) {
    BINDM("prefix", "start", "end");
    if (!p[0]) jj_rt_fail(c, VR_ERR_INVAL, "%s takes at least 1 argument", fname);
    if (p[1] || p[2]) jj_rt_fail(c, VR_ERR_UNSUPPORTED, "%s with start/end is not supported", fname);
    return jj_bool(prefix_match(c, s, *p[0], name.p[0] == 'e'));
  }
  if (jj_streq(name, "split") || jj_streq(name, "rsplit")) {
    BINDM("sep", "maxsplit");
    jj_str_t sep, *sp = NULL;
    if (p[0] && p[0]->t != JV_NONE) {
      sep = need_str(c, fname, *p[0]);
      sp = &sep;
    }
    int64_t ms = p[1] ? need_int(c, fname, *p[1]) : -1;
    return do_split(c, s, sp, ms, name.p[0] == 'r');
  }
  if (jj_streq(name, "replace")) {
    BINDM("old", "new", "count");
    if (!p[0] || !p[1]) jj_rt_fail(c, VR_ERR_INVAL, "%s needs old and new", fname);
    int64_t cnt = p[2] ? need_int(c, fname, *p[2]) : -1;
    return do_replace(c, s, need_str(c, fname, *p[0]), need_str(c, fname, *p[1]), cnt);
  }
  if (jj_streq(name, "upper")) { NOARGSM(); return map_case(c, s, CASE_UPPER, fname); }
  if (jj_streq(name, "lower")) { NOARGSM(); return map_case(c, s, CASE_LOWER, fname); }
  if (jj_streq(name, "title")) { NOARGSM(); return map_case(c, s, CASE_PYTITLE, fname); }
  if (jj_streq(name, "capitalize")) { NOARGSM(); return map_case(c, s, CASE_CAPITALIZE, fname); }
  if (jj_streq(name, "find") || jj_streq(name, "rfind") || jj_streq(name, "index") ||
      jj_streq(name, "rindex") || jj_streq(name, "count")) {
    BINDM("sub", "start", "end");
    if (!p[0]) jj_rt_fail(c, VR_ERR_INVAL, "%s takes at least 1 argument", fname);
    if (p[1] || p[2]) jj_rt_fail(c, VR_ERR_UNSUPPORTED, "%s with start/end is not supported", fname);
    jj_str_t sub = need_str(c, fname, *p[0]);
    if (jj_streq(name, "count")) {
      if (sub.n == 0) return jj_int((int64_t)jj_utf8_len(s) + 1);
      int64_t k = 0;
      size_t pos = 0;
      const char *f;
      while ((f = find_sub(s, pos, sub))) {
        k++;
        pos = (size_t)(f - s.p) + sub.n;
      }
      return jj_int(k);
    }
    const char *f = name.p[0] == 'r' ? rfind_sub(s, s.n, sub) : find_sub(s, 0, sub);
    if (!f) {
      if (jj_streq(name, "index") || jj_streq(name, "rindex"))
        jj_rt_fail(c, VR_ERR_INVAL, "%s: substring not found", fname);
      return jj_int(-1);
    }
    return jj_int((int64_t)jj_utf8_len((jj_str_t){s.p, (size_t)(f - s.p)}));
  }
  if (jj_streq(name, "join")) {
    BINDM("iterable");
    if (!p[0]) jj_rt_fail(c, VR_ERR_INVAL, "%s takes exactly one argument", fname);
    jj_list_t *items = jj_iter_items(c, *p[0]);
    jj_buf_t b = {0};
    for (size_t i = 0; i < items->n; i++) {
      if (i) jj_buf_put(c, &b, s.p, s.n);
      jj_str_t x = need_str(c, fname, items->v[i]);
      jj_buf_put(c, &b, x.p, x.n);
    }
    return sv(c, &b);
  }
  if (jj_streq(name, "splitlines")) {
    BINDM("keepends");
    if (p[0] && jj_truthy(*p[0])) jj_rt_fail(c, VR_ERR_UNSUPPORTED, "%s(keepends=True) is not supported", fname);
    return do_splitlines(c, s);
  }
  if (jj_streq(name, "isdigit") || jj_streq(name, "isalpha") || jj_streq(name, "isalnum") ||
      jj_streq(name, "isspace") || jj_streq(name, "islower") || jj_streq(name, "isupper")) {
    NOARGSM();
    if (jj_streq(name, "islower") || jj_streq(name, "isupper")) {
      check_caseable(c, fname, s);
      return jj_bool(str_all(s, name.p[2] == 'u'));
    }
    if (s.n == 0) return jj_bool(false);
    size_t i = 0, adv;
    while (i < s.n) {
      uint32_t cp = jj_utf8_next(s.p + i, s.n - i, &adv);
      bool ok;
      if (name.p[2] == 's') ok = jj_py_isspace(cp);
      else {
        if (cp >= 0x80)
          jj_rt_fail(c, VR_ERR_UNSUPPORTED, "%s on non-ASCII text is not supported", fname);
        bool dig = cp >= '0' && cp <= '9', alpha = (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
        ok = name.p[2] == 'd' ? dig : jj_streq(name, "isalpha") ? alpha : (dig || alpha);
      }
      if (!ok) return jj_bool(false);
      i += adv;
    }
    return jj_bool(true);
  }
#undef BINDM
#undef NOARGSM
  jj_rt_fail(c, VR_ERR_UNSUPPORTED, "the string method '%.*s' is not supported", SPN(name));
}

jj_val_t jj_call_method(jj_ctx_t *c, jj_val_t self, jj_str_t name, jj_val_t *args,
                        size_t nargs, jj_str_t *kwn, jj_val_t *kwv, size_t nkw) {
  jj_val_t *p[2];
  if (self.t == JV_STR) return str_method(c, self.u.s, name, args, nargs, kwn, kwv, nkw);
  if (self.t == JV_DICT) {
    jj_dict_t *d = self.u.d;
    if (jj_streq(name, "items") || jj_streq(name, "keys") || jj_streq(name, "values")) {
      bind(c, "dict method", NULL, 0, args, nargs, kwn, kwv, nkw, p);
      jj_list_t *l = jj_list_new(c, d->n);
      l->kind = name.p[0] == 'k' ? JL_KEYS : name.p[0] == 'v' ? JL_VALUES : JL_ITEMS;
      for (size_t i = 0; i < d->n; i++) {
        jj_val_t k = jj_strv(d->k[i].p, d->k[i].n);
        if (name.p[0] == 'k') l->v[i] = k;
        else if (name.p[0] == 'v') l->v[i] = d->v[i];
        else {
          jj_list_t *pair = jj_list_new(c, 2);
          pair->kind = JL_TUPLE;
          pair->v[0] = k;
          pair->v[1] = d->v[i];
          l->v[i] = jj_listv(pair);
        }
      }
      return jj_listv(l);
    }
    if (jj_streq(name, "get")) {
      static const char *const names[] = {"key", "default"};
      bind(c, "dict.get", names, 2, args, nargs, kwn, kwv, nkw, p);
      if (!p[0]) jj_rt_fail(c, VR_ERR_INVAL, "dict.get expected at least 1 argument");
      if (p[0]->t == JV_STR) {
        jj_val_t *v = jj_dict_get(d, p[0]->u.s);
        if (v) return *v;
      }
      return p[1] ? *p[1] : jj_none();
    }
    if (jj_streq(name, "copy")) return self;
    jj_rt_fail(c, VR_ERR_INVAL, "dict.%.*s is unsafe: the sandbox does not allow modifying a dict",
               SPN(name));
  }
  if (self.t == JV_LIST) {
    jj_list_t *l = self.u.l;
    if (jj_streq(name, "copy")) return self;
    if (jj_streq(name, "count") || jj_streq(name, "index")) {
      if (nargs != 1 || nkw) jj_rt_fail(c, VR_ERR_INVAL, "list.%.*s takes one argument", SPN(name));
      int64_t k = 0;
      for (size_t i = 0; i < l->n; i++)
        if (jj_equal(l->v[i], args[0])) {
          if (name.p[0] == 'i') return jj_int((int64_t)i);
          k++;
        }
      if (name.p[0] == 'i') jj_rt_fail(c, VR_ERR_INVAL, "list.index(x): x not in list");
      return jj_int(k);
    }
    jj_rt_fail(c, VR_ERR_INVAL, "list.%.*s is unsafe: the sandbox does not allow modifying a list",
               SPN(name));
  }
  jj_rt_fail(c, VR_ERR_INVAL, "'%s' object has no method '%.*s'", jj_type_name(self), SPN(name));
}
