/* vr_jinja_eval.c: compile (normalise, lex, parse), render (scopes, statements, expressions,
 * macros, loops) and the apply_chat_template context. Semantics follow jinja2 3.1 as
 * transformers configures it; comments note where a Python rule decides the result. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "verl_reward/status.h"
#include "vr_jinja_internal.h"

struct vr_jinja {
  jj_arena_t arena;
  jj_node_t *root;
};

void vr_jinja_opts_default(vr_jinja_opts_t *o) {
  o->max_output = 16u << 20;
  o->max_memory = 256u << 20;
  o->max_steps = 50000000u;
  o->max_depth = 256;
  o->now_s = -1;
}

static void set_err(char *err, size_t errlen, const char *msg) {
  if (err && errlen) snprintf(err, errlen, "%s", msg);
}

int vr_jinja_compile(const char *src, size_t len, vr_jinja_t **out, char *err, size_t errlen) {
  if (out) *out = NULL;
  if (!src || !out) {
    set_err(err, errlen, "vr_jinja_compile: NULL argument");
    return VR_ERR_INVAL;
  }
  vr_jinja_t *t = calloc(1, sizeof *t);
  if (!t) {
    set_err(err, errlen, "out of memory");
    return VR_ERR_NOMEM;
  }
  /* jinja2: newlines normalised ("\r\n", "\r" -> "\n"), one trailing newline dropped */
  char *s = jj_arena_alloc(&t->arena, len + 1);
  if (!s) {
    free(t);
    set_err(err, errlen, "out of memory");
    return VR_ERR_NOMEM;
  }
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    if (src[i] == '\r') {
      s[n++] = '\n';
      if (i + 1 < len && src[i + 1] == '\n') i++;
    } else {
      s[n++] = src[i];
    }
  }
  if (n > 0 && s[n - 1] == '\n') n--;
  s[n] = 0;
  jj_tok_t *toks;
  size_t ntoks;
  int rc = jj_lex(s, n, &t->arena, &toks, &ntoks, err, errlen);
  if (rc == 0) rc = jj_parse(toks, ntoks, &t->arena, &t->root, err, errlen);
  if (rc != 0) {
    vr_jinja_free(t);
    return rc;
  }
  *out = t;
  return 0;
}

void vr_jinja_free(vr_jinja_t *t) {
  if (!t) return;
  jj_arena_free(&t->arena);
  free(t);
}

/* ---- evaluation -------------------------------------------------------------------------- */

typedef struct rt {
  jj_ctx_t *c;
  jj_scope_t *scope;
  jj_val_t filter_base;    /* the text a {% filter %} / {% set x | f %} block rendered */
  jj_val_t pending_caller; /* {% call %}: the caller macro for the next macro call */
} rt_t;

enum { FLOW_NONE = 0, FLOW_BREAK, FLOW_CONTINUE };

static jj_val_t eval(rt_t *R, const jj_node_t *n);
static int exec(rt_t *R, const jj_node_t *n);

static void step(jj_ctx_t *c, const jj_node_t *n) {
  c->line = n->line;
  if (++c->steps > c->opts.max_steps)
    jj_rt_fail(c, VR_ERR_TOO_LARGE, "the render takes more than max_steps (%llu) steps",
               (unsigned long long)c->opts.max_steps);
}

static void enter(jj_ctx_t *c) {
  if (++c->depth > c->opts.max_depth)
    jj_rt_fail(c, VR_ERR_TOO_LARGE, "evaluation nested deeper than max_depth (%d)",
               c->opts.max_depth);
}

static jj_scope_t *scope_new(jj_ctx_t *c, jj_scope_t *parent) {
  jj_scope_t *s = jj_alloc(c, sizeof *s);
  s->parent = parent;
  return s;
}

/* an Undefined that carries the message jinja2 would raise when it is used */
__attribute__((format(printf, 2, 3))) static jj_val_t undef_msg(jj_ctx_t *c, const char *fmt, ...) {
  char tmp[256];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  jj_val_t m = jj_mkstr(c, tmp, k < 0 ? 0 : (size_t)k >= sizeof tmp ? sizeof tmp - 1 : (size_t)k);
  return jj_undef(m.u.s);
}
#define SP(s) (int)((s).n > 100 ? 100 : (s).n), (s).p

__attribute__((noreturn)) static void fail_undef(jj_ctx_t *c, jj_val_t u) {
  jj_rt_fail(c, VR_ERR_INVAL, "%.*s", (int)u.u.s.n, u.u.s.p);
}

static jj_val_t lookup(rt_t *R, jj_str_t name) {
  for (jj_scope_t *s = R->scope; s; s = s->parent) {
    jj_val_t *v = jj_dict_get(&s->vars, name);
    if (v) return *v;
  }
  jj_val_t f = {.t = JV_FUNC};
  if (jj_streq(name, "range")) f.u.fn = JF_RANGE;
  else if (jj_streq(name, "namespace")) f.u.fn = JF_NAMESPACE;
  else if (jj_streq(name, "dict")) f.u.fn = JF_DICT;
  else if (jj_streq(name, "raise_exception")) f.u.fn = JF_RAISE;
  else if (jj_streq(name, "strftime_now")) f.u.fn = JF_STRFTIME;
  else if (jj_streq(name, "cycler") || jj_streq(name, "joiner") || jj_streq(name, "lipsum"))
    jj_rt_fail(R->c, VR_ERR_UNSUPPORTED, "the global '%.*s' is not supported", (int)name.n,
               name.p);
  else return undef_msg(R->c, "'%.*s' is undefined", SP(name));
  return f;
}

/* ---- attribute and item access ----------------------------------------------------------- */

static jj_val_t loop_attr(jj_ctx_t *c, jj_loop_t *L, jj_str_t name) {
  int64_t len = (int64_t)L->items->n, i = L->index0;
  if (jj_streq(name, "index")) return jj_int(i + 1);
  if (jj_streq(name, "index0")) return jj_int(i);
  if (jj_streq(name, "revindex")) return jj_int(len - i);
  if (jj_streq(name, "revindex0")) return jj_int(len - i - 1);
  if (jj_streq(name, "first")) return jj_bool(i == 0);
  if (jj_streq(name, "last")) return jj_bool(i == len - 1);
  if (jj_streq(name, "length")) return jj_int(len);
  if (jj_streq(name, "depth")) return jj_int(L->depth0 + 1);
  if (jj_streq(name, "depth0")) return jj_int(L->depth0);
  if (jj_streq(name, "previtem"))
    return i > 0 ? L->items->v[i - 1] : undef_msg(c, "there is no previous item (first iteration)");
  if (jj_streq(name, "nextitem"))
    return i + 1 < len ? L->items->v[i + 1] : undef_msg(c, "there is no next item (last iteration)");
  if (jj_streq(name, "cycle")) {
    jj_method_t *m = jj_alloc(c, sizeof *m);
    m->self.t = JV_LOOP;
    m->self.u.loop = L;
    m->name = name;
    jj_val_t v = {.t = JV_METHOD};
    v.u.bm = m;
    return v;
  }
  if (jj_streq(name, "changed"))
    jj_rt_fail(c, VR_ERR_UNSUPPORTED, "loop.changed() is not supported");
  return undef_msg(c, "'LoopContext' object has no attribute '%.*s'", SP(name));
}

jj_val_t jj_getattr(jj_ctx_t *c, jj_val_t obj, jj_str_t name) {
  switch (obj.t) {
  case JV_UNDEF: fail_undef(c, obj);
  case JV_LOOP: return loop_attr(c, obj.u.loop, name);
  case JV_NS: {
    jj_val_t *v = jj_dict_get(obj.u.d, name);
    return v ? *v : undef_msg(c, "'Namespace' object has no attribute '%.*s'", SP(name));
  }
  default: break;
  }
  /* jinja2 getattr: the Python attribute first (dict.items, str.strip, ...), then the item */
  if (jj_has_method(obj, name)) {
    jj_method_t *m = jj_alloc(c, sizeof *m);
    m->self = obj;
    m->name = name;
    jj_val_t v = {.t = JV_METHOD};
    v.u.bm = m;
    return v;
  }
  if (obj.t == JV_DICT) {
    jj_val_t *v = jj_dict_get(obj.u.d, name);
    if (v) return *v;
    return undef_msg(c, "'dict object' has no attribute '%.*s'", SP(name));
  }
  return undef_msg(c, "'%s object' has no attribute '%.*s'", jj_type_name(obj), SP(name));
}

jj_val_t jj_getitem(jj_ctx_t *c, jj_val_t obj, jj_val_t key) {
  if (obj.t == JV_UNDEF) fail_undef(c, obj);
  if ((obj.t == JV_DICT || obj.t == JV_NS) && key.t == JV_STR) {
    jj_val_t *v = jj_dict_get(obj.u.d, key.u.s);
    if (v) return *v;
    if (obj.t == JV_DICT && jj_has_method(obj, key.u.s)) return jj_getattr(c, obj, key.u.s);
    return undef_msg(c, "'dict object' has no attribute '%.*s'", SP(key.u.s));
  }
  if ((jj_is_seq(obj) || obj.t == JV_STR) && (key.t == JV_INT || key.t == JV_BOOL)) {
    int64_t i = key.t == JV_INT ? key.u.i : key.u.b;
    int64_t n = obj.t == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)jj_utf8_len(obj.u.s);
    if (i < 0) i += n;
    if (i < 0 || i >= n) return undef_msg(c, "'%s object' has no element %lld", jj_type_name(obj), (long long)(key.t == JV_INT ? key.u.i : key.u.b));
    if (obj.t == JV_LIST) return obj.u.l->v[i];
    size_t off = jj_utf8_offset(obj.u.s, (size_t)i), adv;
    jj_utf8_next(obj.u.s.p + off, obj.u.s.n - off, &adv);
    return jj_strv(obj.u.s.p + off, adv);
  }
  if (key.t == JV_STR) return jj_getattr(c, obj, key.u.s);
  return undef_msg(c, "'%s object' has no element of type %s", jj_type_name(obj), jj_type_name(key));
}

static bool slice_arg(jj_ctx_t *c, jj_val_t v, int64_t *out) {
  if (v.t == JV_NONE || v.t == JV_UNDEF) return false;
  if (v.t == JV_INT) *out = v.u.i;
  else if (v.t == JV_BOOL) *out = v.u.b;
  else jj_rt_fail(c, VR_ERR_INVAL, "slice indices must be integers or None, not %s", jj_type_name(v));
  return true;
}

/* Python's slice.indices + iteration: fills idx (n entries at most), returns the count */
static size_t slice_indices(jj_ctx_t *c, int64_t len, jj_val_t vs, jj_val_t ve, jj_val_t vst,
                            int64_t **idx) {
  int64_t step = 1, start = 0, stop = 0;
  if (slice_arg(c, vst, &step) && step == 0) jj_rt_fail(c, VR_ERR_INVAL, "slice step cannot be zero");
  bool hs = slice_arg(c, vs, &start), he = slice_arg(c, ve, &stop);
  if (step > 0) {
    if (!hs) start = 0;
    else if (start < 0) start = start + len < 0 ? 0 : start + len;
    else if (start > len) start = len;
    if (!he) stop = len;
    else if (stop < 0) stop = stop + len < 0 ? 0 : stop + len;
    else if (stop > len) stop = len;
  } else {
    if (!hs) start = len - 1;
    else if (start < 0) start = start + len < 0 ? -1 : start + len;
    else if (start >= len) start = len - 1;
    if (!he) stop = -1;
    else if (stop < 0) stop = stop + len < 0 ? -1 : stop + len;
    else if (stop >= len) stop = len - 1;
  }
  /* counts in unsigned arithmetic: a step near INT64_MIN/MAX must not overflow */
  uint64_t ustep = step > 0 ? (uint64_t)step : (uint64_t)(-(step + 1)) + 1u;
  size_t n = 0;
  if (step > 0 && start < stop) n = (size_t)((uint64_t)(stop - start - 1) / ustep + 1u);
  if (step < 0 && start > stop) n = (size_t)((uint64_t)(start - stop - 1) / ustep + 1u);
  *idx = n ? jj_alloc(c, n * sizeof(int64_t)) : NULL;
  for (size_t k = 0; k < n; k++) (*idx)[k] = start + (int64_t)k * step;
  return n;
}

static jj_val_t do_slice(jj_ctx_t *c, jj_val_t obj, jj_val_t a, jj_val_t b, jj_val_t s) {
  int64_t *idx;
  if (obj.t == JV_UNDEF) fail_undef(c, obj);
  if (jj_is_seq(obj)) {
    size_t n = slice_indices(c, (int64_t)obj.u.l->n, a, b, s, &idx);
    jj_list_t *l = jj_list_new(c, n);
    for (size_t k = 0; k < n; k++) l->v[k] = obj.u.l->v[idx[k]];
    return jj_listv(l);
  }
  if (obj.t == JV_STR) {
    jj_str_t str = obj.u.s;
    size_t ncp = jj_utf8_len(str);
    /* code point start offsets */
    size_t *off = jj_alloc(c, (ncp + 1) * sizeof(size_t));
    size_t i = 0, k = 0, adv;
    while (i < str.n) {
      off[k++] = i;
      jj_utf8_next(str.p + i, str.n - i, &adv);
      i += adv;
    }
    off[k] = str.n;
    size_t n = slice_indices(c, (int64_t)ncp, a, b, s, &idx);
    jj_buf_t out = {0};
    for (size_t q = 0; q < n; q++)
      jj_buf_put(c, &out, str.p + off[idx[q]], off[idx[q] + 1] - off[idx[q]]);
    return jj_strv(out.p ? out.p : "", out.n);
  }
  jj_rt_fail(c, VR_ERR_INVAL, "'%s' object is not subscriptable", jj_type_name(obj));
}

/* ---- arithmetic -------------------------------------------------------------------------- */

static bool isnum(jj_val_t v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double numf(jj_val_t v) {
  return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.t == JV_BOOL ? (double)v.u.b : 0.0;
}
static int64_t numi(jj_val_t v) { return v.t == JV_INT ? v.u.i : v.t == JV_BOOL ? (int64_t)v.u.b : 0; }

static const char *op_text(int op) {
  switch (op) {
  case JT_ADD: return "+";
  case JT_SUB: return "-";
  case JT_MUL: return "*";
  case JT_DIV: return "/";
  case JT_FLOORDIV: return "//";
  case JT_MOD: return "%";
  case JT_POW: return "**";
  default: return "?";
  }
}

static jj_val_t repeat(jj_ctx_t *c, jj_val_t seq, int64_t k) {
  if (k < 0) k = 0;
  if (seq.t == JV_STR) {
    if (seq.u.s.n && (uint64_t)k > c->opts.max_output / seq.u.s.n)
      jj_rt_fail(c, VR_ERR_TOO_LARGE, "string repetition exceeds max_output");
    jj_buf_t b = {0};
    for (int64_t i = 0; i < k; i++) jj_buf_put(c, &b, seq.u.s.p, seq.u.s.n);
    return jj_strv(b.p ? b.p : "", b.n);
  }
  if (seq.u.l->n && (uint64_t)k > (c->opts.max_memory / sizeof(jj_val_t)) / seq.u.l->n)
    jj_rt_fail(c, VR_ERR_TOO_LARGE, "list repetition exceeds max_memory");
  jj_list_t *l = jj_list_new(c, seq.u.l->n * (size_t)k);
  for (int64_t i = 0; i < k; i++)
    if (seq.u.l->n) memcpy(l->v + (size_t)i * seq.u.l->n, seq.u.l->v, seq.u.l->n * sizeof(jj_val_t));
  return jj_listv(l);
}

static jj_val_t arith(jj_ctx_t *c, int op, jj_val_t a, jj_val_t b) {
  if (op == JT_MOD && a.t == JV_STR)
    jj_rt_fail(c, VR_ERR_UNSUPPORTED, "printf-style string formatting ('%%') is not supported");
  if (a.t == JV_UNDEF) fail_undef(c, a);
  if (b.t == JV_UNDEF) fail_undef(c, b);
  if (isnum(a) && isnum(b)) {
    bool fl = a.t == JV_FLOAT || b.t == JV_FLOAT;
    int64_t x = numi(a), y = numi(b), r;
    double fx = numf(a), fy = numf(b);
    switch (op) {
    case JT_ADD:
      if (fl) return jj_float(fx + fy);
      if (__builtin_add_overflow(x, y, &r)) break;
      return jj_int(r);
    case JT_SUB:
      if (fl) return jj_float(fx - fy);
      if (__builtin_sub_overflow(x, y, &r)) break;
      return jj_int(r);
    case JT_MUL:
      if (fl) return jj_float(fx * fy);
      if (__builtin_mul_overflow(x, y, &r)) break;
      return jj_int(r);
    case JT_DIV:
      if (fy == 0.0) jj_rt_fail(c, VR_ERR_INVAL, "division by zero");
      return jj_float(fx / fy);
    case JT_FLOORDIV:
      if (fy == 0.0) jj_rt_fail(c, VR_ERR_INVAL, "integer division or modulo by zero");
      if (fl) return jj_float(floor(fx / fy));
      if (x == INT64_MIN && y == -1) break;
      r = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) r--;
      return jj_int(r);
    case JT_MOD:
      if (fy == 0.0) jj_rt_fail(c, VR_ERR_INVAL, "integer division or modulo by zero");
      if (fl) {
        double m = fmod(fx, fy);
        if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
        return jj_float(m);
      }
      if (x == INT64_MIN && y == -1) return jj_int(0);
      r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return jj_int(r);
    case JT_POW:
      if (fl || y < 0) return jj_float(pow(fx, fy));
      {
        int64_t acc = 1, base = x, e = y;
        bool ovf = false;
        while (e > 0 && !ovf) {
          if (e & 1) ovf |= __builtin_mul_overflow(acc, base, &acc);
          e >>= 1;
          if (e) ovf |= __builtin_mul_overflow(base, base, &base);
        }
        if (ovf) break;
        return jj_int(acc);
      }
    }
    jj_rt_fail(c, VR_ERR_UNSUPPORTED, "integer overflow in '%s' (beyond 64 bits)", op_text(op));
  }
  if (op == JT_ADD && a.t == JV_STR && b.t == JV_STR) {
    if (a.u.s.n + b.u.s.n > c->opts.max_output)
      jj_rt_fail(c, VR_ERR_TOO_LARGE, "string longer than max_output");
    char *p = jj_alloc(c, a.u.s.n + b.u.s.n + 1);
    if (a.u.s.n) memcpy(p, a.u.s.p, a.u.s.n);
    if (b.u.s.n) memcpy(p + a.u.s.n, b.u.s.p, b.u.s.n);
    return jj_strv(p, a.u.s.n + b.u.s.n);
  }
  if (op == JT_ADD && jj_is_seq(a) && jj_is_seq(b) && a.u.l->kind == b.u.l->kind) {
    jj_list_t *l = jj_list_new(c, a.u.l->n + b.u.l->n);
    if (a.u.l->n) memcpy(l->v, a.u.l->v, a.u.l->n * sizeof(jj_val_t));
    if (b.u.l->n) memcpy(l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(jj_val_t));
    return jj_listv(l);
  }
  if (op == JT_MUL && (a.t == JV_STR || jj_is_seq(a)) && (b.t == JV_INT || b.t == JV_BOOL))
    return repeat(c, a, numi(b));
  if (op == JT_MUL && (b.t == JV_STR || jj_is_seq(b)) && (a.t == JV_INT || a.t == JV_BOOL))
    return repeat(c, b, numi(a));

  jj_rt_fail(c, VR_ERR_INVAL, "unsupported operand type(s) for %s: '%s' and '%s'", op_text(op),
             jj_type_name(a), jj_type_name(b));
}

static bool contains(jj_ctx_t *c, jj_val_t container, jj_val_t item) {
  switch (container.t) {
  case JV_UNDEF: return false; /* iterating Undefined yields nothing */
  case JV_STR:
    if (item.t == JV_UNDEF) fail_undef(c, item);
    if (item.t != JV_STR)
      jj_rt_fail(c, VR_ERR_INVAL, "'in <string>' requires string as left operand, not %s",
                 jj_type_name(item));
    if (item.u.s.n == 0) return true;
    if (item.u.s.n > container.u.s.n) return false;
    for (size_t i = 0; i + item.u.s.n <= container.u.s.n; i++)
      if (!memcmp(container.u.s.p + i, item.u.s.p, item.u.s.n)) return true;
    return false;
  case JV_LIST: {
    /* a generator that failed after producing some items: `in` stops at a match before it */
    for (size_t i = 0; container.u.l->err_status && i < container.u.l->n; i++)
      if (jj_equal(container.u.l->v[i], item)) return true;
    jj_list_t *l = jj_iter_items(c, container);
    for (size_t i = 0; i < l->n; i++)
      if (jj_equal(l->v[i], item)) return true;
    return false;
  }
  case JV_DICT:
    /* Python hashes tuples, generators, dict_values and objects, not lists, dicts, keys/items views */
    if (item.t == JV_DICT || (item.t == JV_LIST && (item.u.l->kind == JL_LIST || item.u.l->kind == JL_KEYS ||
                                                    item.u.l->kind == JL_ITEMS)))
      jj_rt_fail(c, VR_ERR_INVAL, "unhashable type: '%s'", jj_type_name(item));
    return item.t == JV_STR && jj_dict_get(container.u.d, item.u.s) != NULL;
  default:
    jj_rt_fail(c, VR_ERR_INVAL, "argument of type '%s' is not iterable", jj_type_name(container));
  }
}

jj_list_t *jj_iter_items(jj_ctx_t *c, jj_val_t v) {
  switch (v.t) {
  case JV_UNDEF: return jj_list_new(c, 0);
  case JV_LIST:
    if (v.u.l->err_status) /* a generator whose production failed: fails when consumed */
      jj_fail(&c->err, v.u.l->err_status, "%s", v.u.l->err_msg);
    return v.u.l;
  case JV_DICT: {
    jj_list_t *l = jj_list_new(c, v.u.d->n);
    for (size_t i = 0; i < v.u.d->n; i++) l->v[i] = jj_strv(v.u.d->k[i].p, v.u.d->k[i].n);
    return l;
  }
  case JV_STR: {
    size_t n = jj_utf8_len(v.u.s), i = 0, k = 0, adv;
    jj_list_t *l = jj_list_new(c, n);
    while (i < v.u.s.n) {
      jj_utf8_next(v.u.s.p + i, v.u.s.n - i, &adv);
      l->v[k++] = jj_strv(v.u.s.p + i, adv);
      i += adv;
    }
    return l;
  }
  default:
    jj_rt_fail(c, VR_ERR_INVAL, "'%s' object is not iterable", jj_type_name(v));
  }
}

/* ---- calls ------------------------------------------------------------------------------- */

typedef struct args {
  jj_val_t *pos;
  size_t npos;
  jj_str_t *kwn;
  jj_val_t *kwv;
  size_t nkw;
} args_t;

static void eval_args(rt_t *R, const jj_node_t *n, args_t *A) {
  A->npos = n->n1;
  A->nkw = n->n2;
  A->pos = n->n1 ? jj_alloc(R->c, n->n1 * sizeof(jj_val_t)) : NULL;
  A->kwv = n->n2 ? jj_alloc(R->c, n->n2 * sizeof(jj_val_t)) : NULL;
  A->kwn = n->names;
  for (size_t i = 0; i < n->n1; i++) A->pos[i] = eval(R, n->l1[i]);
  for (size_t i = 0; i < n->n2; i++) A->kwv[i] = eval(R, n->l2[i]);
}

static jj_val_t render_body(rt_t *R, const jj_node_t *body, jj_scope_t *scope) {
  jj_buf_t buf = {0}, *saved = R->c->out;
  jj_scope_t *saved_scope = R->scope;
  R->c->out = &buf;
  R->scope = scope;
  exec(R, body);
  R->c->out = saved;
  R->scope = saved_scope;
  return jj_strv(buf.p ? buf.p : "", buf.n);
}

static jj_val_t call_macro(rt_t *R, jj_macro_t *m, const args_t *A, jj_val_t caller) {
  jj_ctx_t *c = R->c;
  const jj_node_t *def = m->def;
  if (A->npos > def->n2)
    jj_rt_fail(c, VR_ERR_INVAL, "macro '%.*s' takes not more than %zu argument(s)",
               (int)def->name.n, def->name.p, def->n2);
  enter(c);
  jj_scope_t *s = scope_new(c, m->closure);
  bool *given = def->n2 ? jj_alloc(c, def->n2 * sizeof(bool)) : NULL;
  for (size_t i = 0; i < A->npos; i++) {
    jj_dict_set(c, &s->vars, def->names[i], A->pos[i]);
    given[i] = true;
  }
  for (size_t k = 0; k < A->nkw; k++) {
    size_t i;
    for (i = 0; i < def->n2; i++)
      if (def->names[i].n == A->kwn[k].n && !memcmp(def->names[i].p, A->kwn[k].p, A->kwn[k].n))
        break;
    if (i == def->n2) {
      if (jj_streq(A->kwn[k], "caller") && def->kind == JN_MACRO) {
        caller = A->kwv[k];
        continue;
      }
      jj_rt_fail(c, VR_ERR_INVAL, "macro '%.*s' takes no keyword argument '%.*s'",
                 (int)def->name.n, def->name.p, (int)A->kwn[k].n, A->kwn[k].p);
    }
    if (given[i])
      jj_rt_fail(c, VR_ERR_INVAL, "macro '%.*s' got multiple values for argument '%.*s'",
                 (int)def->name.n, def->name.p, (int)A->kwn[k].n, A->kwn[k].p);
    jj_dict_set(c, &s->vars, def->names[i], A->kwv[k]);
    given[i] = true;
  }
  jj_scope_t *saved = R->scope;
  R->scope = s; /* defaults see the parameters before them */
  for (size_t i = 0; i < def->n2; i++) {
    if (given[i]) continue;
    jj_val_t v = def->l2[i] ? eval(R, def->l2[i])
                            : undef_msg(c, "parameter '%.*s' was not provided", SP(def->names[i]));
    jj_dict_set(c, &s->vars, def->names[i], v);
  }
  R->scope = saved;
  if (caller.t != JV_UNDEF) jj_dict_set(c, &s->vars, (jj_str_t){"caller", 6}, caller);
  jj_dict_set(c, &s->vars, (jj_str_t){"varargs", 7}, jj_listv(jj_list_new(c, 0)));
  jj_val_t kw = {.t = JV_DICT};
  kw.u.d = jj_dict_new(c);
  jj_dict_set(c, &s->vars, (jj_str_t){"kwargs", 6}, kw);
  int line = c->line;
  jj_val_t r = render_body(R, def->d, s);
  c->line = line;
  c->depth--;
  return r;
}

static jj_val_t call_func(rt_t *R, int fn, const args_t *A) {
  jj_ctx_t *c = R->c;
  switch (fn) {
  case JF_RANGE: {
    if (A->nkw || A->npos < 1 || A->npos > 3)
      jj_rt_fail(c, VR_ERR_INVAL, "range expected 1 to 3 positional arguments");
    int64_t a[3];
    for (size_t i = 0; i < A->npos; i++) {
      if (A->pos[i].t != JV_INT && A->pos[i].t != JV_BOOL)
        jj_rt_fail(c, VR_ERR_INVAL, "range: '%s' object cannot be interpreted as an integer",
                   jj_type_name(A->pos[i]));
      a[i] = numi(A->pos[i]);
    }
    int64_t start = A->npos == 1 ? 0 : a[0], stop = A->npos == 1 ? a[0] : a[1];
    int64_t st = A->npos == 3 ? a[2] : 1;
    if (st == 0) jj_rt_fail(c, VR_ERR_INVAL, "range() arg 3 must not be zero");
    double cnt = st > 0 ? ceil(((double)stop - (double)start) / (double)st)
                        : ceil(((double)start - (double)stop) / (double)-st);
    if (cnt < 0) cnt = 0;
    if (cnt > 100000) /* jinja2.sandbox.MAX_RANGE */
      jj_rt_fail(c, VR_ERR_TOO_LARGE, "range too big, maximum size for range is 100000");
    jj_list_t *l = jj_list_new(c, (size_t)cnt);
    for (size_t i = 0; i < (size_t)cnt; i++) l->v[i] = jj_int(start + (int64_t)i * st);
    return jj_listv(l);
  }
  case JF_NAMESPACE:
  case JF_DICT: {
    jj_dict_t *d = jj_dict_new(c);
    if (A->npos > 1) jj_rt_fail(c, VR_ERR_INVAL, "%s expected at most 1 positional argument",
                                fn == JF_DICT ? "dict" : "namespace");
    if (A->npos == 1) {
      if (A->pos[0].t != JV_DICT && A->pos[0].t != JV_NS)
        jj_rt_fail(c, VR_ERR_UNSUPPORTED, "%s(%s) is not supported (give a dict or keywords)",
                   fn == JF_DICT ? "dict" : "namespace", jj_type_name(A->pos[0]));
      for (size_t i = 0; i < A->pos[0].u.d->n; i++)
        jj_dict_set(c, d, A->pos[0].u.d->k[i], A->pos[0].u.d->v[i]);
    }
    for (size_t i = 0; i < A->nkw; i++) jj_dict_set(c, d, A->kwn[i], A->kwv[i]);
    jj_val_t v = {.t = fn == JF_DICT ? JV_DICT : JV_NS};
    v.u.d = d;
    return v;
  }
  case JF_RAISE: {
    jj_val_t m = A->npos ? jj_tostr(c, A->pos[0]) : jj_strv("", 0);
    jj_rt_fail(c, VR_ERR_INVAL, "template raised: %.*s", (int)(m.u.s.n > 400 ? 400 : m.u.s.n),
               m.u.s.p);
  }
  case JF_STRFTIME: {
    if (A->npos != 1 || A->pos[0].t != JV_STR)
      jj_rt_fail(c, VR_ERR_INVAL, "strftime_now expects one format string");
    time_t now = c->opts.now_s >= 0 ? (time_t)c->opts.now_s : time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm)) jj_rt_fail(c, VR_ERR_INVAL, "strftime_now: bad clock");
    jj_val_t f = jj_mkstr(c, A->pos[0].u.s.p, A->pos[0].u.s.n); /* NUL-terminated */
    if (f.u.s.n > 256) jj_rt_fail(c, VR_ERR_INVAL, "strftime_now: format too long");
    char out[2048];
    size_t k = f.u.s.n ? strftime(out, sizeof out, f.u.s.p, &tm) : 0;
    if (f.u.s.n && k == 0) jj_rt_fail(c, VR_ERR_INVAL, "strftime_now: format gives no text");
    return jj_mkstr(c, out, k);
  }
  }
  jj_rt_fail(c, VR_ERR_INTERNAL, "unknown function");
}

static jj_val_t call_value(rt_t *R, jj_val_t f, const args_t *A, jj_val_t caller) {
  jj_ctx_t *c = R->c;
  switch (f.t) {
  case JV_MACRO: return call_macro(R, f.u.m, A, caller);
  case JV_FUNC: return call_func(R, f.u.fn, A);
  case JV_METHOD:
    if (f.u.bm->self.t == JV_LOOP) { /* loop.cycle(a, b, ...) */
      if (A->npos == 0) jj_rt_fail(c, VR_ERR_INVAL, "loop.cycle: no items for cycling given");
      return A->pos[f.u.bm->self.u.loop->index0 % (int64_t)A->npos];
    }
    return jj_call_method(c, f.u.bm->self, f.u.bm->name, A->pos, A->npos, A->kwn, A->kwv, A->nkw);
  case JV_UNDEF: fail_undef(c, f);
  default: jj_rt_fail(c, VR_ERR_INVAL, "'%s' object is not callable", jj_type_name(f));
  }
}

/* ---- filters and tests by node ----------------------------------------------------------- */

jj_val_t jj_filter_by_name(jj_ctx_t *c, jj_str_t name, jj_val_t v, jj_val_t *args, size_t nargs) {
  jj_node_t fake = {.kind = JN_FILTER, .line = c->line, .name = name, .fid = jj_filter_id(name)};
  if (fake.fid == 0)
    jj_rt_fail(c, VR_ERR_INVAL, "no filter named '%.*s'", (int)name.n, name.p);
  return jj_apply_filter(c, &fake, v, args, nargs, NULL, NULL, 0);
}

bool jj_test_by_name(jj_ctx_t *c, jj_str_t name, jj_val_t v, jj_val_t *args, size_t nargs) {
  jj_node_t fake = {.kind = JN_TEST, .line = c->line, .name = name, .fid = jj_test_id(name)};
  if (fake.fid == 0) jj_rt_fail(c, VR_ERR_INVAL, "no test named '%.*s'", (int)name.n, name.p);
  return jj_apply_test(c, &fake, v, args, nargs);
}

/* ---- expressions ------------------------------------------------------------------------- */

static jj_val_t eval_inner(rt_t *R, const jj_node_t *n) {
  jj_ctx_t *c = R->c;
  switch (n->kind) {
  case JN_CONST: return n->val;
  case JN_NAME: return lookup(R, n->name);
  case JN_ATTR: {
    jj_val_t o = eval(R, n->a);
    c->line = n->line;
    return jj_getattr(c, o, n->name);
  }
  case JN_ITEM: {
    jj_val_t o = eval(R, n->a), k = eval(R, n->b);
    c->line = n->line;
    return jj_getitem(c, o, k);
  }
  case JN_SLICE: {
    jj_val_t o = eval(R, n->a);
    jj_val_t a = n->b ? eval(R, n->b) : jj_none(), b = n->c ? eval(R, n->c) : jj_none();
    jj_val_t s = n->d ? eval(R, n->d) : jj_none();
    c->line = n->line;
    return do_slice(c, o, a, b, s);
  }
  case JN_CALL: {
    jj_val_t f = eval(R, n->a);
    args_t A;
    eval_args(R, n, &A);
    c->line = n->line;
    jj_val_t caller = R->pending_caller;
    R->pending_caller = jj_undef((jj_str_t){"", 0});
    return call_value(R, f, &A, caller);
  }
  case JN_FILTER: {
    jj_val_t v = n->a ? eval(R, n->a) : R->filter_base;
    args_t A;
    eval_args(R, n, &A);
    c->line = n->line;
    return jj_apply_filter(c, n, v, A.pos, A.npos, A.kwn, A.kwv, A.nkw);
  }
  case JN_TEST: {
    jj_val_t v = eval(R, n->a);
    args_t A;
    eval_args(R, n, &A);
    c->line = n->line;
    if (A.nkw) jj_rt_fail(c, VR_ERR_UNSUPPORTED, "keyword arguments to tests are not supported");
    return jj_bool(jj_apply_test(c, n, v, A.pos, A.npos));
  }
  case JN_NEG:
  case JN_POS: {
    jj_val_t v = eval(R, n->a);
    c->line = n->line;
    if (v.t == JV_UNDEF) fail_undef(c, v);
    if (v.t == JV_FLOAT) return jj_float(n->kind == JN_NEG ? -v.u.f : v.u.f);
    if (v.t == JV_INT || v.t == JV_BOOL) {
      int64_t x = numi(v);
      if (n->kind == JN_POS) return jj_int(x);
      if (x == INT64_MIN) jj_rt_fail(c, VR_ERR_UNSUPPORTED, "integer overflow in unary '-'");
      return jj_int(-x);
    }
    jj_rt_fail(c, VR_ERR_INVAL, "bad operand type for unary %s: '%s'",
               n->kind == JN_NEG ? "-" : "+", jj_type_name(v));
  }
  case JN_NOT: return jj_bool(!jj_truthy(eval(R, n->a)));
  case JN_AND: {
    jj_val_t a = eval(R, n->a);
    return jj_truthy(a) ? eval(R, n->b) : a;
  }
  case JN_OR: {
    jj_val_t a = eval(R, n->a);
    return jj_truthy(a) ? a : eval(R, n->b);
  }
  case JN_BINOP: {
    jj_val_t a = eval(R, n->a), b = eval(R, n->b);
    c->line = n->line;
    if (n->op == JT_TILDE) {
      jj_val_t sa = jj_tostr(c, a), sb = jj_tostr(c, b);
      return arith(c, JT_ADD, sa, sb);
    }
    return arith(c, n->op, a, b);
  }
  case JN_COMPARE: {
    jj_val_t left = eval(R, n->a);
    for (size_t i = 0; i < n->n1; i++) {
      jj_val_t right = eval(R, n->l1[i]);
      c->line = n->line;
      bool r;
      switch (n->ops[i]) {
      case JT_EQ: r = jj_equal(left, right); break;
      case JT_NE: r = !jj_equal(left, right); break;
      case JT_IN: r = contains(c, right, left); break;
      case JT_NOTIN: r = !contains(c, right, left); break;
      default: {
        if (left.t == JV_UNDEF) fail_undef(c, left);
        if (right.t == JV_UNDEF) fail_undef(c, right);
        int k = jj_compare(c, left, right);
        r = n->ops[i] == JT_LT ? k < 0 : n->ops[i] == JT_LE ? k <= 0 : n->ops[i] == JT_GT ? k > 0 : k >= 0;
      }
      }
      if (!r) return jj_bool(false);
      left = right;
    }
    return jj_bool(true);
  }
  case JN_COND:
    if (jj_truthy(eval(R, n->b))) return eval(R, n->a);
    return n->c ? eval(R, n->c) : undef_msg(c, "the inline if-expression on line %d evaluated to false and no else section was defined", n->line);
  case JN_LIST:
  case JN_TUPLE: {
    jj_list_t *l = jj_list_new(c, n->n1);
    for (size_t i = 0; i < n->n1; i++) l->v[i] = eval(R, n->l1[i]);
    l->kind = n->kind == JN_TUPLE ? JL_TUPLE : JL_LIST;
    return jj_listv(l);
  }
  case JN_DICT: {
    jj_dict_t *d = jj_dict_new(c);
    for (size_t i = 0; i < n->n1; i++) {
      jj_val_t k = eval(R, n->l1[i]);
      jj_val_t v = eval(R, n->l2[i]);
      c->line = n->line;
      if (k.t != JV_STR)
        jj_rt_fail(c, VR_ERR_UNSUPPORTED, "dict keys other than strings are not supported (%s)",
                   jj_type_name(k));
      jj_dict_set(c, d, k.u.s, v);
    }
    jj_val_t v = {.t = JV_DICT};
    v.u.d = d;
    return v;
  }
  default:
    jj_rt_fail(c, VR_ERR_INTERNAL, "not an expression (node %d)", (int)n->kind);
  }
}

static jj_val_t eval(rt_t *R, const jj_node_t *n) {
  jj_ctx_t *c = R->c;
  step(c, n);
  enter(c);
  jj_val_t v = eval_inner(R, n);
  c->depth--;
  return v;
}

/* ---- statements -------------------------------------------------------------------------- */

static void assign(rt_t *R, jj_scope_t *s, const jj_node_t *target, jj_val_t v) {
  jj_ctx_t *c = R->c;
  if (target->kind == JN_NAME) {
    jj_dict_set(c, &s->vars, target->name, v);
    return;
  }
  if (target->kind == JN_NSATTR) {
    jj_val_t ns = lookup(R, target->name);
    if (ns.t != JV_NS)
      jj_rt_fail(c, VR_ERR_INVAL, "cannot assign attribute on non-namespace object");
    jj_dict_set(c, ns.u.d, target->attr2, v);
    return;
  }
  /* tuple unpacking */
  jj_list_t *items = (v.t == JV_LIST || v.t == JV_STR || v.t == JV_DICT) ? jj_iter_items(c, v) : NULL;
  if (!items)
    jj_rt_fail(c, VR_ERR_INVAL, "cannot unpack non-iterable %s object", jj_type_name(v));
  if (items->n != target->n1)
    jj_rt_fail(c, VR_ERR_INVAL, "%s values to unpack (expected %zu, got %zu)",
               items->n < target->n1 ? "not enough" : "too many", target->n1, items->n);
  for (size_t i = 0; i < target->n1; i++) jj_dict_set(c, &s->vars, target->l1[i]->name, items->v[i]);
}

static int exec_for(rt_t *R, const jj_node_t *n) {
  jj_ctx_t *c = R->c;
  jj_val_t it = eval(R, n->b);
  c->line = n->line;
  jj_list_t *items = jj_iter_items(c, it);
  int depth0 = 0;
  jj_val_t outer = lookup(R, (jj_str_t){"loop", 4});
  (void)outer; /* non-recursive loops: depth is always 1 in jinja2 */
  if (n->c) { /* `for x in xs if cond`: filter first; loop.length counts what is left */
    jj_list_t *kept = jj_list_new(c, items->n);
    size_t k = 0;
    for (size_t i = 0; i < items->n; i++) {
      jj_scope_t *s = scope_new(c, R->scope);
      assign(R, s, n->a, items->v[i]);
      jj_scope_t *saved = R->scope;
      R->scope = s;
      bool keep = jj_truthy(eval(R, n->c));
      R->scope = saved;
      if (keep) kept->v[k++] = items->v[i];
    }
    kept->n = k;
    items = kept;
  }
  if (items->n == 0) {
    if (n->e) {
      jj_scope_t *saved = R->scope;
      R->scope = scope_new(c, saved);
      exec(R, n->e);
      R->scope = saved;
    }
    return FLOW_NONE;
  }
  jj_loop_t *L = jj_alloc(c, sizeof *L);
  L->items = items;
  L->depth0 = depth0;
  jj_val_t lv = {.t = JV_LOOP};
  lv.u.loop = L;
  jj_scope_t *saved = R->scope;
  for (size_t i = 0; i < items->n; i++) {
    step(c, n);
    L->index0 = (int64_t)i;
    jj_scope_t *s = scope_new(c, saved);
    jj_dict_set(c, &s->vars, (jj_str_t){"loop", 4}, lv);
    assign(R, s, n->a, items->v[i]);
    R->scope = s;
    int flow = exec(R, n->d);
    R->scope = saved;
    if (flow == FLOW_BREAK) break;
  }
  return FLOW_NONE;
}

static jj_val_t make_macro(rt_t *R, const jj_node_t *def) {
  jj_macro_t *m = jj_alloc(R->c, sizeof *m);
  m->def = def;
  m->closure = R->scope;
  jj_val_t v = {.t = JV_MACRO};
  v.u.m = m;
  return v;
}

static int exec(rt_t *R, const jj_node_t *n) {
  jj_ctx_t *c = R->c;
  step(c, n);
  switch (n->kind) {
  case JN_BODY:
    for (size_t i = 0; i < n->n1; i++) {
      int f = exec(R, n->l1[i]);
      if (f != FLOW_NONE) return f;
    }
    return FLOW_NONE;
  case JN_DATA:
    jj_buf_put(c, c->out, n->val.u.s.p, n->val.u.s.n);
    return FLOW_NONE;
  case JN_OUTPUT: {
    jj_val_t v = eval(R, n->a);
    c->line = n->line;
    jj_print(c, c->out, v);
    return FLOW_NONE;
  }
  case JN_IF:
    for (const jj_node_t *b = n; b;) {
      if (b->kind != JN_IF) return exec(R, b); /* the else body */
      if (jj_truthy(eval(R, b->a))) return exec(R, b->b);
      b = b->c;
    }
    return FLOW_NONE;
  case JN_FOR: return exec_for(R, n);
  case JN_SET: {
    jj_val_t v = eval(R, n->b);
    c->line = n->line;
    assign(R, R->scope, n->a, v);
    return FLOW_NONE;
  }
  case JN_SETBLOCK: {
    jj_val_t v = render_body(R, n->d, scope_new(c, R->scope));
    if (n->b) {
      jj_val_t saved = R->filter_base;
      R->filter_base = v;
      v = eval(R, n->b);
      R->filter_base = saved;
    }
    c->line = n->line;
    assign(R, R->scope, n->a, v);
    return FLOW_NONE;
  }
  case JN_FILTERBLOCK: {
    jj_val_t v = render_body(R, n->d, scope_new(c, R->scope));
    jj_val_t saved = R->filter_base;
    R->filter_base = v;
    v = eval(R, n->a);
    R->filter_base = saved;
    jj_print(c, c->out, v);
    return FLOW_NONE;
  }
  case JN_MACRO:
    jj_dict_set(c, &R->scope->vars, n->name, make_macro(R, n));
    return FLOW_NONE;
  case JN_CALLBLOCK: {
    jj_val_t caller = make_macro(R, n);
    R->pending_caller = caller;
    const jj_node_t *call = n->a;
    jj_val_t f = eval(R, call->a);
    args_t A;
    eval_args(R, call, &A);
    R->pending_caller = jj_undef((jj_str_t){"", 0});
    c->line = n->line;
    if (f.t != JV_MACRO)
      jj_rt_fail(c, VR_ERR_UNSUPPORTED, "{%% call %%} of a %s (only macros)", jj_type_name(f));
    jj_val_t r = call_macro(R, f.u.m, &A, caller);
    jj_print(c, c->out, r);
    return FLOW_NONE;
  }
  case JN_BREAK: return FLOW_BREAK;
  case JN_CONTINUE: return FLOW_CONTINUE;
  case JN_WITH: {
    jj_scope_t *s = scope_new(c, R->scope);
    for (size_t i = 0; i < n->n2; i++) {
      jj_val_t v = eval(R, n->l2[i]); /* jinja2: values see the outer scope only */
      jj_dict_set(c, &s->vars, n->names[i], v);
    }
    jj_scope_t *saved = R->scope;
    R->scope = s;
    int f = exec(R, n->d);
    R->scope = saved;
    return f;
  }
  default:
    jj_rt_fail(c, VR_ERR_INTERNAL, "not a statement (node %d)", (int)n->kind);
  }
}

/* ---- entry points ------------------------------------------------------------------------ */

/* everything of one render that may longjmp out (kept apart from the setjmp frame) */
static void render_top(jj_ctx_t *c, const vr_jinja_t *t, const cJSON *context,
                       const vr_jinja_chat_t *chat, char **out, size_t *outlen) {
  rt_t R = {.c = c};
  R.pending_caller = jj_undef((jj_str_t){"", 0});
  jj_scope_t *globals = scope_new(c, NULL);
  if (context) {
    if (!cJSON_IsObject(context))
      jj_fail(&c->err, VR_ERR_INVAL, "the render context must be a JSON object");
    jj_val_t d = jj_from_cjson(c, context, 0);
    globals->vars = *d.u.d;
  }
  if (chat) {
    /* apply_chat_template's own checks before it renders */
    if (!chat->messages || !cJSON_IsArray(chat->messages))
      jj_fail(&c->err, VR_ERR_INVAL, "messages: expected a JSON array of message objects");
    if (cJSON_GetArraySize(chat->messages) == 0)
      jj_fail(&c->err, VR_ERR_INVAL, "messages: cannot apply chat template to an empty conversation; "
                                     "provide at least one message");
    if (chat->tools && !cJSON_IsArray(chat->tools) && !cJSON_IsNull(chat->tools))
      jj_fail(&c->err, VR_ERR_INVAL, "tools: expected a JSON array of tool schemas (objects)");
    if (chat->documents && !cJSON_IsArray(chat->documents) && !cJSON_IsNull(chat->documents))
      jj_fail(&c->err, VR_ERR_INVAL, "documents: expected a JSON array of objects");
    const cJSON *it;
    int k = 0;
    if (cJSON_IsArray(chat->tools))
      cJSON_ArrayForEach(it, chat->tools) {
        if (!cJSON_IsObject(it))
          jj_fail(&c->err, VR_ERR_INVAL, "tools[%d]: tools should be JSON schemas (objects)", k);
        k++;
      }
    k = 0;
    if (cJSON_IsArray(chat->documents))
      cJSON_ArrayForEach(it, chat->documents) {
        if (!cJSON_IsObject(it))
          jj_fail(&c->err, VR_ERR_INVAL, "documents[%d]: documents should be objects with 'title' and 'text'", k);
        k++;
      }
    if (chat->extra && !cJSON_IsObject(chat->extra))
      jj_fail(&c->err, VR_ERR_INVAL, "extra template variables: expected a JSON object");
    jj_dict_t *g = &globals->vars;
    jj_dict_set(c, g, (jj_str_t){"messages", 8}, jj_from_cjson(c, chat->messages, 0));
    jj_dict_set(c, g, (jj_str_t){"tools", 5},
                chat->tools ? jj_from_cjson(c, chat->tools, 0) : jj_none());
    jj_dict_set(c, g, (jj_str_t){"documents", 9},
                chat->documents ? jj_from_cjson(c, chat->documents, 0) : jj_none());
    jj_dict_set(c, g, (jj_str_t){"add_generation_prompt", 21},
                jj_bool(chat->add_generation_prompt != 0));
    if (chat->bos_token)
      jj_dict_set(c, g, (jj_str_t){"bos_token", 9},
                  jj_strv(chat->bos_token, strlen(chat->bos_token)));
    if (chat->eos_token)
      jj_dict_set(c, g, (jj_str_t){"eos_token", 9},
                  jj_strv(chat->eos_token, strlen(chat->eos_token)));
    if (chat->extra)
      for (const cJSON *e = chat->extra->child; e; e = e->next)
        jj_dict_set(c, g, (jj_str_t){e->string, strlen(e->string)}, jj_from_cjson(c, e, 1));
  }
  R.scope = scope_new(c, globals);
  jj_buf_t buf = {0};
  c->out = &buf;
  exec(&R, t->root);
  char *res = malloc(buf.n + 1);
  if (!res) jj_fail(&c->err, VR_ERR_NOMEM, "out of memory");
  if (buf.n) memcpy(res, buf.p, buf.n);
  res[buf.n] = 0;
  *out = res;
  if (outlen) *outlen = buf.n;
}

static int render_vals(const vr_jinja_t *t, const cJSON *context, const vr_jinja_chat_t *chat,
                       const vr_jinja_opts_t *opts, char **out, size_t *outlen, char *err,
                       size_t errlen) {
  if (out) *out = NULL;
  if (outlen) *outlen = 0;
  if (!t || !out) {
    set_err(err, errlen, "vr_jinja_render: NULL argument");
    return VR_ERR_INVAL;
  }
  jj_ctx_t *c = calloc(1, sizeof *c);
  if (!c) {
    set_err(err, errlen, "out of memory");
    return VR_ERR_NOMEM;
  }
  if (opts) c->opts = *opts;
  else vr_jinja_opts_default(&c->opts);
  if (c->opts.max_depth < 1) c->opts.max_depth = 1;
  c->arena.cap = c->opts.max_memory;
  c->err.buf = c->msg;
  c->err.len = sizeof c->msg;
  int rc = 0;
  if (setjmp(c->err.jb)) {
    rc = c->err.status;
    set_err(err, errlen, c->msg);
  } else {
    render_top(c, t, context, chat, out, outlen);
  }
  jj_arena_free(&c->arena);
  free(c);
  return rc;
}

int vr_jinja_render(const vr_jinja_t *t, const cJSON *context, const vr_jinja_opts_t *opts,
                    char **out, size_t *outlen, char *err, size_t errlen) {
  return render_vals(t, context, NULL, opts, out, outlen, err, errlen);
}

int vr_jinja_chat(const vr_jinja_t *t, const vr_jinja_chat_t *chat, const vr_jinja_opts_t *opts,
                  char **out, size_t *outlen, char *err, size_t errlen) {
  if (!chat) {
    if (out) *out = NULL;
    set_err(err, errlen, "vr_jinja_chat: NULL argument");
    return VR_ERR_INVAL;
  }
  return render_vals(t, NULL, chat, opts, out, outlen, err, errlen);
}
