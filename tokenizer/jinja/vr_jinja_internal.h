/* vr_jinja_internal.h: what the lexer, parser, evaluator and filters of vr_jinja share.
 * Not a public header.
 *
 * Memory: everything is allocated from arenas (jj_arena_t). The template's AST lives in the
 * compile arena owned by vr_jinja_t; every value made during one render lives in that render's
 * arena, capped at opts.max_memory and freed at once when the render ends. Values are immutable
 * once built (the sandbox jinja2 runs in forbids list.append and friends), except namespace
 * objects, whose attributes `set ns.x = ...` changes in place.
 *
 * Errors: the parser and the evaluator leave through longjmp to their entry point (compile or
 * render) with the message already written; nothing to free on the way because of the arenas. */
#ifndef VR_JINJA_INTERNAL_H
#define VR_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vr_jinja.h"

/* ---- arena ------------------------------------------------------------------------------- */
typedef struct jj_block jj_block_t;
typedef struct jj_arena {
  jj_block_t *head;
  size_t used;   /* bytes handed out + block overhead, checked against cap */
  size_t cap;    /* 0 = unbounded (the compile arena) */
} jj_arena_t;

void *jj_arena_alloc(jj_arena_t *a, size_t n); /* 16-aligned, zeroed; NULL when over cap/OOM */
void jj_arena_free(jj_arena_t *a);

/* ---- strings ----------------------------------------------------------------------------- */
typedef struct jj_str {
  const char *p;
  size_t n;
} jj_str_t;

/* ---- values ------------------------------------------------------------------------------ */
typedef enum {
  JV_UNDEF = 0, /* s: the name that was undefined (for messages), may be empty */
  JV_NONE,
  JV_BOOL,
  JV_INT,
  JV_FLOAT,
  JV_STR,
  JV_LIST,   /* list, tuple, generator or dict view: jj_list_t.kind says which */
  JV_DICT,
  JV_NS,     /* namespace(): a dict whose entries `set ns.x` may change */
  JV_MACRO,
  JV_FUNC,   /* a global function: range, namespace, dict, raise_exception, strftime_now */
  JV_METHOD, /* a bound method: obj.name not yet called */
  JV_LOOP,   /* the `loop` variable of a for */
} jj_type_t;

typedef struct jj_list jj_list_t;
typedef struct jj_dict jj_dict_t;
typedef struct jj_macro jj_macro_t;
typedef struct jj_loop jj_loop_t;
typedef struct jj_method jj_method_t;

typedef struct jj_val {
  jj_type_t t;
  union {
    bool b;
    int64_t i;
    double f;
    jj_str_t s;
    jj_list_t *l;
    jj_dict_t *d;
    jj_macro_t *m;
    int fn;
    jj_method_t *bm;
    jj_loop_t *loop;
  } u;
} jj_val_t;

/* What Python object a JV_LIST stands for. Filters such as map/select/unique/items/batch
 * return generators in jinja2: always true, no len(), not printable (jinja2 would print an
 * address), not subscriptable; an error while producing one is kept (err) and raised when it
 * is consumed, as Python's laziness would. dict.keys()/values()/items() are views: they print
 * as dict_keys([...]) and have a len() but no subscript. */
typedef enum { JL_LIST = 0, JL_TUPLE, JL_GEN, JL_KEYS, JL_VALUES, JL_ITEMS } jj_list_kind_t;

struct jj_list {
  size_t n;
  jj_val_t *v;
  jj_list_kind_t kind;
  int err_status;      /* JL_GEN: the deferred error (0: none) */
  const char *err_msg;
};

struct jj_dict {
  size_t n, cap;
  jj_str_t *k;
  jj_val_t *v;
};

struct jj_method {
  jj_val_t self;
  jj_str_t name;
};

enum { JF_RANGE = 1, JF_NAMESPACE, JF_DICT, JF_RAISE, JF_STRFTIME, JF_CALLER };

/* ---- AST --------------------------------------------------------------------------------- */
typedef enum {
  /* expressions */
  JN_CONST,    /* val */
  JN_NAME,     /* name */
  JN_ATTR,     /* a.name */
  JN_ITEM,     /* a[b] */
  JN_SLICE,    /* a[b:c:d], absent parts NULL */
  JN_CALL,     /* a(args l1 ; kwargs names/l2) */
  JN_FILTER,   /* a | name(args l1 ; kwargs names/l2); a NULL inside {% filter %} */
  JN_TEST,     /* a is name(args l1 ; kwargs names/l2) */
  JN_NEG, JN_POS, JN_NOT, /* a */
  JN_BINOP,    /* a op b: op is a JT_* operator token */
  JN_AND, JN_OR, /* a, b */
  JN_COMPARE,  /* a, then ops[i] l1[i] pairs (chained) */
  JN_COND,     /* a if b else c (c may be NULL) */
  JN_LIST, JN_TUPLE, /* l1 */
  JN_DICT,     /* keys l1, values l2 */
  /* statements */
  JN_BODY,     /* l1: statements in order */
  JN_DATA,     /* val (a string) */
  JN_OUTPUT,   /* a: an expression to print */
  JN_IF,       /* a test, b body, c else (a JN_IF for elif, or a JN_BODY, or NULL) */
  JN_FOR,      /* a target, b iterable, c filter (or NULL), d body, e else body (or NULL) */
  JN_SET,      /* a target, b value */
  JN_SETBLOCK, /* a target, d body, l1 filters (JN_FILTER chain on NULL, or empty) */
  JN_MACRO,    /* name, names params, l2 defaults (NULL entries = none), d body */
  JN_CALLBLOCK,/* a the call expression, names caller params, l2 defaults, d body */
  JN_FILTERBLOCK, /* a filter chain applied to the rendered d body */
  JN_BREAK, JN_CONTINUE,
  JN_WITH,     /* names targets, l2 values, d body */
  /* assignment targets: JN_NAME, JN_TUPLE of names, JN_NSATTR */
  JN_NSATTR,   /* name.attr2 (set ns.x = ...) */
} jj_kind_t;

typedef struct jj_node jj_node_t;
struct jj_node {
  jj_kind_t kind;
  int line;
  int op;
  jj_node_t *a, *b, *c, *d, *e;
  jj_node_t **l1, **l2;
  size_t n1, n2;
  jj_str_t *names;     /* kwargs names (n2 of them), macro params (n2), with targets */
  int *ops;            /* JN_COMPARE: operator per l1 entry */
  jj_str_t name;
  jj_str_t attr2;
  jj_val_t val;
  int fid;             /* JN_FILTER / JN_TEST: resolved id, < 0 = jinja2 has it, we do not */
};

/* ---- tokens ------------------------------------------------------------------------------ */
typedef enum {
  JT_EOF = 0, JT_DATA, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
  JT_NAME, JT_STRING, JT_INT, JT_FLOAT,
  /* operators */
  JT_ADD, JT_SUB, JT_MUL, JT_DIV, JT_FLOORDIV, JT_MOD, JT_POW, JT_TILDE,
  JT_LBRACKET, JT_RBRACKET, JT_LPAREN, JT_RPAREN, JT_LBRACE, JT_RBRACE,
  JT_EQ, JT_NE, JT_LT, JT_GT, JT_LE, JT_GE, JT_ASSIGN, JT_DOT, JT_COLON, JT_PIPE,
  JT_COMMA, JT_SEMICOLON,
  /* comparison pseudo-operators of JN_COMPARE */
  JT_IN, JT_NOTIN,
} jj_tok_type_t;

typedef struct jj_tok {
  jj_tok_type_t t;
  int line;
  jj_str_t s;     /* DATA / NAME / STRING (decoded) text */
  int64_t i;
  double f;
  bool raw;       /* DATA from {% raw %} */
} jj_tok_t;

typedef struct jj_errbuf {
  char *buf;
  size_t len;
  int status;
  jmp_buf jb;
} jj_errbuf_t;

/* Formats a message into e and longjmps to e->jb. */
__attribute__((noreturn, format(printf, 3, 4)))
void jj_fail(jj_errbuf_t *e, int status, const char *fmt, ...);

/* Lexes src (already newline-normalised by the caller) into a token array in arena a. */
int jj_lex(const char *src, size_t len, jj_arena_t *a, jj_tok_t **toks, size_t *ntoks,
           char *err, size_t errlen);

/* Parses tokens into a JN_BODY root. */
int jj_parse(const jj_tok_t *toks, size_t ntoks, jj_arena_t *a, jj_node_t **root, char *err,
             size_t errlen);

/* Filter / test tables (vr_jinja_filters.c). Returns the id (> 0), -1 for a jinja2 builtin we
 * do not implement, 0 for a name jinja2 does not know either. */
int jj_filter_id(jj_str_t name);
int jj_test_id(jj_str_t name);

/* ---- render context ---------------------------------------------------------------------- */
typedef struct jj_scope jj_scope_t;
struct jj_scope {
  jj_scope_t *parent;
  jj_dict_t vars;
};

typedef struct jj_buf {
  char *p;
  size_t n, cap;
} jj_buf_t;

typedef struct jj_ctx {
  jj_arena_t arena;
  jj_errbuf_t err;     /* err.buf is msg below; copied to the caller's buffer at the end */
  char msg[768];
  int status;
  vr_jinja_opts_t opts;
  uint64_t steps;
  int depth;
  jj_buf_t *out;       /* current output (captures swap it) */
  jj_list_t *lazy_out; /* the list a lazy filter (select, map) is filling: what a generator had
                          produced when an item failed (first/in may use that much) */
  jj_scope_t *globals; /* the context's variables */
  int line;            /* line of the node being evaluated, for messages */
} jj_ctx_t;

struct jj_macro {
  const jj_node_t *def;    /* JN_MACRO or JN_CALLBLOCK */
  jj_scope_t *closure;
  jj_val_t caller;         /* for a macro invoked by {% call %}: the caller macro, else undef */
};

struct jj_loop {
  jj_list_t *items;
  int64_t index0;
  int depth0;
};

/* values.c */
__attribute__((noreturn, format(printf, 3, 4)))
void jj_rt_fail(jj_ctx_t *c, int status, const char *fmt, ...);
void *jj_alloc(jj_ctx_t *c, size_t n);
jj_val_t jj_mkstr(jj_ctx_t *c, const char *p, size_t n); /* copies */
jj_val_t jj_strv(const char *p, size_t n);                /* borrows */
jj_val_t jj_int(int64_t i);
jj_val_t jj_float(double f);
jj_val_t jj_bool(bool b);
jj_val_t jj_none(void);
jj_val_t jj_undef(jj_str_t name);
jj_list_t *jj_list_new(jj_ctx_t *c, size_t n);
jj_val_t jj_listv(jj_list_t *l);
bool jj_is_seq(jj_val_t v);  /* a real list or tuple (not a generator or a view) */
jj_dict_t *jj_dict_new(jj_ctx_t *c);
void jj_dict_set(jj_ctx_t *c, jj_dict_t *d, jj_str_t k, jj_val_t v);
jj_val_t *jj_dict_get(const jj_dict_t *d, jj_str_t k);
bool jj_truthy(jj_val_t v);
bool jj_equal(jj_val_t a, jj_val_t b);
int jj_compare(jj_ctx_t *c, jj_val_t a, jj_val_t b); /* <0 ==0 >0; fails on unorderable */
const char *jj_type_name(jj_val_t v);
bool jj_is_undef(jj_val_t v);
bool jj_streq(jj_str_t a, const char *lit);

void jj_buf_put(jj_ctx_t *c, jj_buf_t *b, const char *p, size_t n);
void jj_buf_putc(jj_ctx_t *c, jj_buf_t *b, char ch);
/* str(v) as Python prints it into b (lists and dicts as their repr) */
void jj_print(jj_ctx_t *c, jj_buf_t *b, jj_val_t v);
jj_val_t jj_tostr(jj_ctx_t *c, jj_val_t v); /* str(v) as a JV_STR */
void jj_repr(jj_ctx_t *c, jj_buf_t *b, jj_val_t v);
/* json.dumps(v, ensure_ascii, indent, separators, sort_keys) */
typedef struct jj_json_opts {
  bool pretty;        /* indent is not None */
  jj_str_t indent;    /* the indent string (" " * n for an int indent) */
  jj_str_t item_sep;  /* ", " or "," with indent, unless separators given */
  jj_str_t key_sep;   /* ": " */
  bool sort_keys;
  bool ensure_ascii;
} jj_json_opts_t;
void jj_json(jj_ctx_t *c, jj_buf_t *b, jj_val_t v, const jj_json_opts_t *o, int level);
/* the items a for loop iterates: list items, dict keys, string characters, nothing for
 * Undefined; an error for other types */
jj_list_t *jj_iter_items(jj_ctx_t *c, jj_val_t v);
jj_val_t jj_from_cjson(jj_ctx_t *c, const cJSON *j, int depth);

/* utf-8 helpers */
size_t jj_utf8_len(jj_str_t s);                          /* code points */
size_t jj_utf8_offset(jj_str_t s, size_t cp);            /* byte offset of code point cp */
uint32_t jj_utf8_next(const char *p, size_t n, size_t *adv);
bool jj_py_isspace(uint32_t cp);

/* filters.c */
jj_val_t jj_apply_filter(jj_ctx_t *c, const jj_node_t *n, jj_val_t v, jj_val_t *args,
                         size_t nargs, jj_str_t *kwn, jj_val_t *kwv, size_t nkw);
bool jj_apply_test(jj_ctx_t *c, const jj_node_t *n, jj_val_t v, jj_val_t *args, size_t nargs);
jj_val_t jj_call_method(jj_ctx_t *c, jj_val_t self, jj_str_t name, jj_val_t *args,
                        size_t nargs, jj_str_t *kwn, jj_val_t *kwv, size_t nkw);
bool jj_has_method(jj_val_t self, jj_str_t name);
jj_val_t jj_getattr(jj_ctx_t *c, jj_val_t obj, jj_str_t name);
jj_val_t jj_getitem(jj_ctx_t *c, jj_val_t obj, jj_val_t key);

/* eval.c: used by filters that call back (map with a filter name, selectattr with a test) */
jj_val_t jj_filter_by_name(jj_ctx_t *c, jj_str_t name, jj_val_t v, jj_val_t *args, size_t nargs);
bool jj_test_by_name(jj_ctx_t *c, jj_str_t name, jj_val_t v, jj_val_t *args, size_t nargs);

#endif /* VR_JINJA_INTERNAL_H */
