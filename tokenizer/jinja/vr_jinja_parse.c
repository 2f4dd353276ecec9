/* vr_jinja_parse.c: tokens -> AST, following jinja2/parser.py rule for rule (precedence:
 * condexpr < or < and < not < compare < + - < ~ < * / // % < ** < unary - + < postfix and
 * filters / tests). Statements: if/elif/else, for (targets, `if` filter, else), set (also a
 * namespace attribute and the block form), macro, call, filter, with, break, continue,
 * generation (transformers' AssistantTracker: rendered as its body), raw (in the lexer).
 * Tags jinja2 has but this engine does not (extends, block, include, import, from, autoescape,
 * print, do, recursive loops) are VR_ERR_UNSUPPORTED naming the tag and line. */
#include <stdio.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_jinja_internal.h"

#define JJ_MAX_NEST 256

typedef struct parser {
  const jj_tok_t *t;
  size_t n, i;
  jj_arena_t *a;
  jj_errbuf_t *e;
  int depth;
  int loops; /* enclosing for loops (break/continue need one) */
} parser_t;

static const char *tok_desc(const jj_tok_t *t) {
  static const char *names[] = {
      [JT_EOF] = "end of template", [JT_DATA] = "template data",
      [JT_VAR_BEGIN] = "'{{'", [JT_VAR_END] = "'}}'", [JT_BLOCK_BEGIN] = "'{%'",
      [JT_BLOCK_END] = "'%}'", [JT_NAME] = "name", [JT_STRING] = "string",
      [JT_INT] = "integer", [JT_FLOAT] = "float", [JT_ADD] = "'+'", [JT_SUB] = "'-'",
      [JT_MUL] = "'*'", [JT_DIV] = "'/'", [JT_FLOORDIV] = "'//'", [JT_MOD] = "'%'",
      [JT_POW] = "'**'", [JT_TILDE] = "'~'", [JT_LBRACKET] = "'['", [JT_RBRACKET] = "']'",
      [JT_LPAREN] = "'('", [JT_RPAREN] = "')'", [JT_LBRACE] = "'{'", [JT_RBRACE] = "'}'",
      [JT_EQ] = "'=='", [JT_NE] = "'!='", [JT_LT] = "'<'", [JT_GT] = "'>'", [JT_LE] = "'<='",
      [JT_GE] = "'>='", [JT_ASSIGN] = "'='", [JT_DOT] = "'.'", [JT_COLON] = "':'",
      [JT_PIPE] = "'|'", [JT_COMMA] = "','", [JT_SEMICOLON] = "';'",
  };
  if ((size_t)t->t < sizeof names / sizeof names[0] && names[t->t]) return names[t->t];
  return "token";
}

static const jj_tok_t *cur(parser_t *P) { return &P->t[P->i < P->n ? P->i : P->n - 1]; }
static const jj_tok_t *look(parser_t *P) {
  return &P->t[P->i + 1 < P->n ? P->i + 1 : P->n - 1];
}
static const jj_tok_t *next(parser_t *P) {
  const jj_tok_t *t = cur(P);
  if (P->i < P->n - 1) P->i++;
  return t;
}
static bool is_name(const jj_tok_t *t, const char *w) {
  return t->t == JT_NAME && jj_streq(t->s, w);
}

__attribute__((noreturn)) static void fail_unexpected(parser_t *P, const char *what) {
  const jj_tok_t *t = cur(P);
  if (t->t == JT_NAME)
    jj_fail(P->e, VR_ERR_PARSE, "line %d: expected %s, got '%.*s'", t->line, what, (int)t->s.n,
            t->s.p);
  jj_fail(P->e, VR_ERR_PARSE, "line %d: expected %s, got %s", t->line, what, tok_desc(t));
}

static const jj_tok_t *expect(parser_t *P, jj_tok_type_t type, const char *what) {
  if (cur(P)->t != type) fail_unexpected(P, what);
  return next(P);
}
static void expect_name(parser_t *P, const char *w) {
  if (!is_name(cur(P), w)) {
    char buf[64];
    snprintf(buf, sizeof buf, "'%s'", w);
    fail_unexpected(P, buf);
  }
  next(P);
}

static jj_node_t *node(parser_t *P, jj_kind_t k, int line) {
  jj_node_t *n = jj_arena_alloc(P->a, sizeof *n);
  if (!n) jj_fail(P->e, VR_ERR_NOMEM, "out of memory parsing the template");
  n->kind = k;
  n->line = line;
  return n;
}

/* a growable node list */
typedef struct nlist {
  jj_node_t **v;
  size_t n, cap;
  jj_str_t *names;
} nlist_t;

static void nl_push(parser_t *P, nlist_t *l, jj_node_t *x, jj_str_t name) {
  if (l->n == l->cap) {
    size_t nc = l->cap ? l->cap * 2 : 4;
    jj_node_t **nv = jj_arena_alloc(P->a, nc * sizeof *nv);
    jj_str_t *nn = jj_arena_alloc(P->a, nc * sizeof *nn);
    if (!nv || !nn) jj_fail(P->e, VR_ERR_NOMEM, "out of memory parsing the template");
    if (l->n) {
      memcpy(nv, l->v, l->n * sizeof *nv);
      memcpy(nn, l->names, l->n * sizeof *nn);
    }
    l->v = nv;
    l->names = nn;
    l->cap = nc;
  }
  l->names[l->n] = name;
  l->v[l->n++] = x;
}

static void enter(parser_t *P) {
  if (++P->depth > JJ_MAX_NEST)
    jj_fail(P->e, VR_ERR_TOO_LARGE, "line %d: template nested deeper than %d levels",
            cur(P)->line, JJ_MAX_NEST);
}
static void leave(parser_t *P) { P->depth--; }

static jj_node_t *parse_expression(parser_t *P, bool with_condexpr);
static jj_node_t *parse_tuple(parser_t *P, bool simplified, bool with_condexpr,
                              const char *extra_end, bool explicit_parens);
static jj_node_t *parse_unary(parser_t *P, bool with_filter);
static jj_node_t *parse_primary(parser_t *P);
static jj_node_t *parse_postfix(parser_t *P, jj_node_t *n);

/* (args, kwargs) of a call: fills n->l1/n1 and n->l2/names/n2 */
static void parse_call_args(parser_t *P, jj_node_t *n) {
  expect(P, JT_LPAREN, "'('");
  nlist_t args = {0}, kw = {0};
  bool require_comma = false;
  while (cur(P)->t != JT_RPAREN) {
    if (require_comma) {
      expect(P, JT_COMMA, "','");
      if (cur(P)->t == JT_RPAREN) break;
    }
    if (cur(P)->t == JT_MUL || cur(P)->t == JT_POW)
      jj_fail(P->e, VR_ERR_UNSUPPORTED, "line %d: *args / **kwargs in a call are not supported",
              cur(P)->line);
    if (cur(P)->t == JT_NAME && look(P)->t == JT_ASSIGN) {
      jj_str_t key = next(P)->s;
      next(P);
      nl_push(P, &kw, parse_expression(P, true), key);
    } else {
      if (kw.n)
        jj_fail(P->e, VR_ERR_PARSE, "line %d: positional argument after a keyword argument",
                cur(P)->line);
      nl_push(P, &args, parse_expression(P, true), (jj_str_t){0});
    }
    require_comma = true;
  }
  expect(P, JT_RPAREN, "')'");
  n->l1 = args.v;
  n->n1 = args.n;
  n->l2 = kw.v;
  n->names = kw.names;
  n->n2 = kw.n;
}

static jj_str_t dotted_name(parser_t *P) {
  const jj_tok_t *t = expect(P, JT_NAME, "a name");
  jj_str_t s = t->s;
  if (cur(P)->t == JT_DOT)
    jj_fail(P->e, VR_ERR_UNSUPPORTED, "line %d: dotted filter / test names are not supported",
            t->line);
  return s;
}

static jj_node_t *parse_filter(parser_t *P, jj_node_t *n, bool start_inline) {
  while (cur(P)->t == JT_PIPE || start_inline) {
    if (!start_inline) next(P);
    int line = cur(P)->line;
    jj_str_t name = dotted_name(P);
    jj_node_t *f = node(P, JN_FILTER, line);
    f->a = n;
    f->name = name;
    f->fid = jj_filter_id(name);
    if (f->fid == 0)
      jj_fail(P->e, VR_ERR_PARSE, "line %d: no filter named '%.*s'", line, (int)name.n, name.p);
    if (cur(P)->t == JT_LPAREN) parse_call_args(P, f);
    n = f;
    start_inline = false;
  }
  return n;
}

static jj_node_t *parse_test(parser_t *P, jj_node_t *n) {
  int line = next(P)->line; /* 'is' */
  bool negated = false;
  if (is_name(cur(P), "not")) {
    next(P);
    negated = true;
  }
  jj_str_t name = dotted_name(P);
  jj_node_t *t = node(P, JN_TEST, line);
  t->a = n;
  t->name = name;
  t->fid = jj_test_id(name);
  if (t->fid == 0)
    jj_fail(P->e, VR_ERR_PARSE, "line %d: no test named '%.*s'", line, (int)name.n, name.p);
  const jj_tok_t *c = cur(P);
  if (c->t == JT_LPAREN) {
    parse_call_args(P, t);
  } else if ((c->t == JT_NAME || c->t == JT_STRING || c->t == JT_INT || c->t == JT_FLOAT ||
              c->t == JT_LBRACKET || c->t == JT_LBRACE) &&
             !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
    if (is_name(c, "is"))
      jj_fail(P->e, VR_ERR_PARSE, "line %d: you cannot chain multiple tests with is", c->line);
    jj_node_t *arg = parse_postfix(P, parse_primary(P));
    t->l1 = jj_arena_alloc(P->a, sizeof *t->l1);
    if (!t->l1) jj_fail(P->e, VR_ERR_NOMEM, "out of memory parsing the template");
    t->l1[0] = arg;
    t->n1 = 1;
  }
  if (negated) {
    jj_node_t *nn = node(P, JN_NOT, line);
    nn->a = t;
    return nn;
  }
  return t;
}

static jj_node_t *parse_subscribed(parser_t *P) {
  int line = cur(P)->line;
  jj_node_t *args[3] = {0};
  if (cur(P)->t == JT_COLON) {
    next(P);
  } else {
    jj_node_t *x = parse_expression(P, true);
    if (cur(P)->t != JT_COLON) return x;
    next(P);
    args[0] = x;
  }
  if (cur(P)->t != JT_COLON && cur(P)->t != JT_RBRACKET && cur(P)->t != JT_COMMA)
    args[1] = parse_expression(P, true);
  if (cur(P)->t == JT_COLON) {
    next(P);
    if (cur(P)->t != JT_RBRACKET && cur(P)->t != JT_COMMA) args[2] = parse_expression(P, true);
  }
  jj_node_t *s = node(P, JN_SLICE, line);
  s->b = args[0];
  s->c = args[1];
  s->d = args[2];
  return s;
}

static jj_node_t *parse_postfix(parser_t *P, jj_node_t *n) {
  for (;;) {
    const jj_tok_t *t = cur(P);
    if (t->t == JT_DOT) {
      next(P);
      const jj_tok_t *at = next(P);
      if (at->t == JT_NAME) {
        jj_node_t *g = node(P, JN_ATTR, t->line);
        g->a = n;
        g->name = at->s;
        n = g;
      } else if (at->t == JT_INT) {
        jj_node_t *k = node(P, JN_CONST, at->line);
        k->val = jj_int(at->i);
        jj_node_t *g = node(P, JN_ITEM, t->line);
        g->a = n;
        g->b = k;
        n = g;
      } else {
        P->i--;
        fail_unexpected(P, "a name or number after '.'");
      }
    } else if (t->t == JT_LBRACKET) {
      next(P);
      nlist_t args = {0};
      while (cur(P)->t != JT_RBRACKET) {
        if (args.n) expect(P, JT_COMMA, "','");
        nl_push(P, &args, parse_subscribed(P), (jj_str_t){0});
      }
      expect(P, JT_RBRACKET, "']'");
      jj_node_t *arg; /* x[] subscripts with the empty tuple, as jinja2 parses it */
      if (args.n == 1) {
        arg = args.v[0];
      } else {
        for (size_t k = 0; k < args.n; k++)
          if (args.v[k]->kind == JN_SLICE)
            jj_fail(P->e, VR_ERR_UNSUPPORTED, "line %d: a slice inside a tuple subscript (x[a:b, c]) is not supported",
                    t->line);
        arg = node(P, JN_TUPLE, t->line);
        arg->l1 = args.v;
        arg->n1 = args.n;
      }
      if (arg->kind == JN_SLICE) {
        arg->a = n;
        n = arg;
      } else {
        jj_node_t *g = node(P, JN_ITEM, t->line);
        g->a = n;
        g->b = arg;
        n = g;
      }
    } else if (t->t == JT_LPAREN) {
      jj_node_t *c = node(P, JN_CALL, t->line);
      c->a = n;
      parse_call_args(P, c);
      n = c;
    } else {
      return n;
    }
  }
}

static jj_node_t *parse_filter_expr(parser_t *P, jj_node_t *n) {
  for (;;) {
    const jj_tok_t *t = cur(P);
    if (t->t == JT_PIPE) {
      n = parse_filter(P, n, false);
    } else if (is_name(t, "is")) {
      n = parse_test(P, n);
    } else if (t->t == JT_LPAREN) {
      jj_node_t *c = node(P, JN_CALL, t->line);
      c->a = n;
      parse_call_args(P, c);
      n = c;
    } else {
      return n;
    }
  }
}

static jj_node_t *parse_primary(parser_t *P) {
  const jj_tok_t *t = cur(P);
  jj_node_t *n;
  switch (t->t) {
  case JT_NAME:
    next(P);
    if (jj_streq(t->s, "true") || jj_streq(t->s, "True") || jj_streq(t->s, "false") ||
        jj_streq(t->s, "False")) {
      n = node(P, JN_CONST, t->line);
      n->val = jj_bool(t->s.p[0] == 't' || t->s.p[0] == 'T');
    } else if (jj_streq(t->s, "none") || jj_streq(t->s, "None")) {
      n = node(P, JN_CONST, t->line);
      n->val = jj_none();
    } else {
      n = node(P, JN_NAME, t->line);
      n->name = t->s;
    }
    return n;
  case JT_STRING: {
    next(P);
    jj_str_t s = t->s;
    if (cur(P)->t == JT_STRING) { /* adjacent literals concatenate */
      size_t total = s.n, k = P->i;
      while (P->t[k].t == JT_STRING) total += P->t[k++].s.n;
      char *buf = jj_arena_alloc(P->a, total + 1);
      if (!buf) jj_fail(P->e, VR_ERR_NOMEM, "out of memory parsing the template");
      memcpy(buf, s.p, s.n);
      size_t o = s.n;
      while (cur(P)->t == JT_STRING) {
        memcpy(buf + o, cur(P)->s.p, cur(P)->s.n);
        o += cur(P)->s.n;
        next(P);
      }
      s = (jj_str_t){buf, o};
    }
    n = node(P, JN_CONST, t->line);
    n->val = jj_strv(s.p, s.n);
    return n;
  }
  case JT_INT:
  case JT_FLOAT:
    next(P);
    n = node(P, JN_CONST, t->line);
    n->val = t->t == JT_INT ? jj_int(t->i) : jj_float(t->f);
    return n;
  case JT_LPAREN:
    next(P);
    n = parse_tuple(P, false, true, NULL, true);
    expect(P, JT_RPAREN, "')'");
    return n;
  case JT_LBRACKET: {
    next(P);
    nlist_t items = {0};
    while (cur(P)->t != JT_RBRACKET) {
      if (items.n) expect(P, JT_COMMA, "','");
      if (cur(P)->t == JT_RBRACKET) break;
      nl_push(P, &items, parse_expression(P, true), (jj_str_t){0});
    }
    expect(P, JT_RBRACKET, "']'");
    n = node(P, JN_LIST, t->line);
    n->l1 = items.v;
    n->n1 = items.n;
    return n;
  }
  case JT_LBRACE: {
    next(P);
    nlist_t keys = {0}, vals = {0};
    while (cur(P)->t != JT_RBRACE) {
      if (keys.n) expect(P, JT_COMMA, "','");
      if (cur(P)->t == JT_RBRACE) break;
      nl_push(P, &keys, parse_expression(P, true), (jj_str_t){0});
      expect(P, JT_COLON, "':'");
      nl_push(P, &vals, parse_expression(P, true), (jj_str_t){0});
    }
    expect(P, JT_RBRACE, "'}'");
    n = node(P, JN_DICT, t->line);
    n->l1 = keys.v;
    n->n1 = keys.n;
    n->l2 = vals.v;
    n->n2 = vals.n;
    return n;
  }
  default:
    fail_unexpected(P, "an expression");
  }
}

static jj_node_t *parse_unary(parser_t *P, bool with_filter) {
  enter(P);
  const jj_tok_t *t = cur(P);
  jj_node_t *n;
  if (t->t == JT_SUB || t->t == JT_ADD) {
    next(P);
    n = node(P, t->t == JT_SUB ? JN_NEG : JN_POS, t->line);
    n->a = parse_unary(P, false);
  } else {
    n = parse_primary(P);
  }
  n = parse_postfix(P, n);
  if (with_filter) n = parse_filter_expr(P, n);
  leave(P);
  return n;
}

static jj_node_t *binop(parser_t *P, int op, jj_node_t *a, jj_node_t *b, int line) {
  jj_node_t *n = node(P, JN_BINOP, line);
  n->op = op;
  n->a = a;
  n->b = b;
  return n;
}

static jj_node_t *parse_pow(parser_t *P) {
  jj_node_t *l = parse_unary(P, true);
  while (cur(P)->t == JT_POW) {
    int line = next(P)->line;
    l = binop(P, JT_POW, l, parse_unary(P, true), line);
  }
  return l;
}

static jj_node_t *parse_math2(parser_t *P) {
  jj_node_t *l = parse_pow(P);
  for (;;) {
    jj_tok_type_t t = cur(P)->t;
    if (t != JT_MUL && t != JT_DIV && t != JT_FLOORDIV && t != JT_MOD) return l;
    int line = next(P)->line;
    l = binop(P, t, l, parse_pow(P), line);
  }
}

static jj_node_t *parse_concat(parser_t *P) {
  jj_node_t *l = parse_math2(P);
  while (cur(P)->t == JT_TILDE) {
    int line = next(P)->line;
    l = binop(P, JT_TILDE, l, parse_math2(P), line);
  }
  return l;
}

static jj_node_t *parse_math1(parser_t *P) {
  jj_node_t *l = parse_concat(P);
  for (;;) {
    jj_tok_type_t t = cur(P)->t;
    if (t != JT_ADD && t != JT_SUB) return l;
    int line = next(P)->line;
    l = binop(P, t, l, parse_concat(P), line);
  }
}

static jj_node_t *parse_compare(parser_t *P) {
  int line = cur(P)->line;
  jj_node_t *expr = parse_math1(P);
  nlist_t rhs = {0};
  int ops[64];
  for (;;) {
    jj_tok_type_t t = cur(P)->t;
    int op;
    if (t == JT_EQ || t == JT_NE || t == JT_LT || t == JT_LE || t == JT_GT || t == JT_GE) {
      next(P);
      op = t;
    } else if (is_name(cur(P), "in")) {
      next(P);
      op = JT_IN;
    } else if (is_name(cur(P), "not") && is_name(look(P), "in")) {
      next(P);
      next(P);
      op = JT_NOTIN;
    } else {
      break;
    }
    if (rhs.n >= 64) jj_fail(P->e, VR_ERR_TOO_LARGE, "line %d: comparison chain too long", line);
    ops[rhs.n] = op;
    nl_push(P, &rhs, parse_math1(P), (jj_str_t){0});
  }
  if (rhs.n == 0) return expr;
  jj_node_t *n = node(P, JN_COMPARE, line);
  n->a = expr;
  n->l1 = rhs.v;
  n->n1 = rhs.n;
  n->ops = jj_arena_alloc(P->a, rhs.n * sizeof(int));
  if (!n->ops) jj_fail(P->e, VR_ERR_NOMEM, "out of memory parsing the template");
  memcpy(n->ops, ops, rhs.n * sizeof(int));
  return n;
}

static jj_node_t *parse_not(parser_t *P) {
  if (is_name(cur(P), "not")) {
    enter(P);
    int line = next(P)->line;
    jj_node_t *n = node(P, JN_NOT, line);
    n->a = parse_not(P);
    leave(P);
    return n;
  }
  return parse_compare(P);
}

static jj_node_t *parse_and(parser_t *P) {
  jj_node_t *l = parse_not(P);
  while (is_name(cur(P), "and")) {
    int line = next(P)->line;
    jj_node_t *n = node(P, JN_AND, line);
    n->a = l;
    n->b = parse_not(P);
    l = n;
  }
  return l;
}

static jj_node_t *parse_or(parser_t *P) {
  jj_node_t *l = parse_and(P);
  while (is_name(cur(P), "or")) {
    int line = next(P)->line;
    jj_node_t *n = node(P, JN_OR, line);
    n->a = l;
    n->b = parse_and(P);
    l = n;
  }
  return l;
}

static jj_node_t *parse_condexpr(parser_t *P) {
  jj_node_t *e1 = parse_or(P);
  while (is_name(cur(P), "if")) {
    enter(P);
    int line = next(P)->line;
    jj_node_t *n = node(P, JN_COND, line);
    n->b = parse_or(P); /* the condition */
    n->a = e1;
    if (is_name(cur(P), "else")) {
      next(P);
      n->c = parse_condexpr(P);
    }
    e1 = n;
    leave(P);
  }
  return e1;
}

static jj_node_t *parse_expression(parser_t *P, bool with_condexpr) {
  enter(P);
  jj_node_t *n = with_condexpr ? parse_condexpr(P) : parse_or(P);
  leave(P);
  return n;
}

static bool is_tuple_end(parser_t *P, const char *extra_end) {
  const jj_tok_t *t = cur(P);
  if (t->t == JT_VAR_END || t->t == JT_BLOCK_END || t->t == JT_RPAREN) return true;
  return extra_end && is_name(t, extra_end);
}

static jj_node_t *parse_tuple(parser_t *P, bool simplified, bool with_condexpr,
                              const char *extra_end, bool explicit_parens) {
  int line = cur(P)->line;
  nlist_t args = {0};
  bool is_tuple = false;
  for (;;) {
    if (args.n) expect(P, JT_COMMA, "','");
    if (is_tuple_end(P, extra_end)) break;
    jj_node_t *x = simplified ? parse_primary(P) : parse_expression(P, with_condexpr);
    nl_push(P, &args, x, (jj_str_t){0});
    if (cur(P)->t == JT_COMMA) is_tuple = true;
    else break;
  }
  if (!is_tuple) {
    if (args.n) return args.v[0];
    if (!explicit_parens) fail_unexpected(P, "an expression");
  }
  jj_node_t *n = node(P, JN_TUPLE, line);
  n->l1 = args.v;
  n->n1 = args.n;
  return n;
}

/* ---- statements -------------------------------------------------------------------------- */

static jj_node_t *subparse(parser_t *P, const char *const *end_tokens);

/* "%}" then the body up to one of end_tokens (left current, or dropped with drop) */
static jj_node_t *parse_statements(parser_t *P, const char *const *end_tokens, bool drop) {
  if (cur(P)->t == JT_COLON) next(P);
  expect(P, JT_BLOCK_END, "'%}'");
  jj_node_t *body = subparse(P, end_tokens);
  if (cur(P)->t == JT_EOF) {
    char buf[160];
    size_t o = 0;
    for (int k = 0; end_tokens[k]; k++)
      o += (size_t)snprintf(buf + o, sizeof buf - o, "%s'%s'", k ? " or " : "", end_tokens[k]);
    jj_fail(P->e, VR_ERR_PARSE, "line %d: unexpected end of template, expected %s",
            cur(P)->line, buf);
  }
  if (drop) next(P);
  return body;
}

static void check_target(parser_t *P, jj_node_t *t) {
  if (t->kind == JN_NAME) return;
  if (t->kind == JN_TUPLE) {
    for (size_t k = 0; k < t->n1; k++)
      if (t->l1[k]->kind != JN_NAME)
        jj_fail(P->e, VR_ERR_UNSUPPORTED, "line %d: nested tuple targets are not supported",
                t->line);
    return;
  }
  jj_fail(P->e, VR_ERR_PARSE, "line %d: cannot assign to this expression", t->line);
}

static jj_node_t *parse_assign_target(parser_t *P, const char *extra_end, bool with_namespace) {
  if (with_namespace && cur(P)->t == JT_NAME && look(P)->t == JT_DOT) {
    const jj_tok_t *nt = next(P);
    next(P);
    const jj_tok_t *at = expect(P, JT_NAME, "an attribute name");
    jj_node_t *n = node(P, JN_NSATTR, nt->line);
    n->name = nt->s;
    n->attr2 = at->s;
    return n;
  }
  jj_node_t *t = parse_tuple(P, true, true, extra_end, false);
  check_target(P, t);
  return t;
}

/* (a, b=default, ...) of a macro or call block: names in n->names, defaults in n->l2 */
static void parse_signature(parser_t *P, jj_node_t *n) {
  expect(P, JT_LPAREN, "'('");
  nlist_t params = {0};
  bool any_default = false;
  while (cur(P)->t != JT_RPAREN) {
    if (params.n) expect(P, JT_COMMA, "','");
    const jj_tok_t *pt = expect(P, JT_NAME, "a parameter name");
    jj_node_t *def = NULL;
    if (cur(P)->t == JT_ASSIGN) {
      next(P);
      def = parse_expression(P, true);
      any_default = true;
    } else if (any_default) {
      jj_fail(P->e, VR_ERR_PARSE, "line %d: non-default argument follows default argument",
              pt->line);
    }
    nl_push(P, &params, def, pt->s);
  }
  expect(P, JT_RPAREN, "')'");
  n->names = params.names;
  n->l2 = params.v;
  n->n2 = params.n;
}

static jj_node_t *parse_if(parser_t *P) {
  static const char *const ends[] = {"elif", "else", "endif", NULL};
  static const char *const endif[] = {"endif", NULL};
  jj_node_t *result = node(P, JN_IF, next(P)->line);
  jj_node_t *n = result;
  for (;;) {
    n->a = parse_tuple(P, false, false, NULL, false);
    n->b = parse_statements(P, ends, false);
    const jj_tok_t *t = next(P);
    if (is_name(t, "elif")) {
      jj_node_t *e = node(P, JN_IF, t->line);
      n->c = e;
      n = e;
      continue;
    }
    if (is_name(t, "else")) n->c = parse_statements(P, endif, true);
    break;
  }
  return result;
}

static jj_node_t *parse_for(parser_t *P) {
  static const char *const ends[] = {"endfor", "else", NULL};
  static const char *const endfor[] = {"endfor", NULL};
  jj_node_t *n = node(P, JN_FOR, next(P)->line);
  n->a = parse_assign_target(P, "in", false);
  expect_name(P, "in");
  n->b = parse_tuple(P, false, false, "recursive", false);
  if (is_name(cur(P), "if")) {
    next(P);
    n->c = parse_expression(P, true);
  }
  if (is_name(cur(P), "recursive"))
    jj_fail(P->e, VR_ERR_UNSUPPORTED, "line %d: recursive for loops are not supported",
            cur(P)->line);
  P->loops++;
  n->d = parse_statements(P, ends, false);
  P->loops--;
  if (is_name(next(P), "else")) n->e = parse_statements(P, endfor, true);
  return n;
}

static jj_node_t *parse_set(parser_t *P) {
  static const char *const ends[] = {"endset", NULL};
  int line = next(P)->line;
  jj_node_t *target = parse_assign_target(P, NULL, true);
  if (cur(P)->t == JT_ASSIGN) {
    next(P);
    jj_node_t *n = node(P, JN_SET, line);
    n->a = target;
    n->b = parse_tuple(P, false, true, NULL, false);
    return n;
  }
  jj_node_t *n = node(P, JN_SETBLOCK, line);
  n->a = target;
  if (cur(P)->t == JT_PIPE) n->b = parse_filter(P, NULL, false);
  n->d = parse_statements(P, ends, true);
  return n;
}

static jj_node_t *parse_macro(parser_t *P) {
  static const char *const ends[] = {"endmacro", NULL};
  jj_node_t *n = node(P, JN_MACRO, next(P)->line);
  n->name = expect(P, JT_NAME, "a macro name")->s;
  parse_signature(P, n);
  int loops = P->loops;
  P->loops = 0;
  n->d = parse_statements(P, ends, true);
  P->loops = loops;
  return n;
}

static jj_node_t *parse_call_block(parser_t *P) {
  static const char *const ends[] = {"endcall", NULL};
  jj_node_t *n = node(P, JN_CALLBLOCK, next(P)->line);
  if (cur(P)->t == JT_LPAREN) parse_signature(P, n);
  n->a = parse_expression(P, true);
  if (n->a->kind != JN_CALL) jj_fail(P->e, VR_ERR_PARSE, "line %d: expected call", n->line);
  int loops = P->loops;
  P->loops = 0;
  n->d = parse_statements(P, ends, true);
  P->loops = loops;
  return n;
}

static jj_node_t *parse_filter_block(parser_t *P) {
  static const char *const ends[] = {"endfilter", NULL};
  jj_node_t *n = node(P, JN_FILTERBLOCK, next(P)->line);
  n->a = parse_filter(P, NULL, true);
  n->d = parse_statements(P, ends, true);
  return n;
}

static jj_node_t *parse_with(parser_t *P) {
  static const char *const ends[] = {"endwith", NULL};
  jj_node_t *n = node(P, JN_WITH, next(P)->line);
  nlist_t vals = {0};
  while (cur(P)->t != JT_BLOCK_END) {
    if (vals.n) expect(P, JT_COMMA, "','");
    const jj_tok_t *t = expect(P, JT_NAME, "a name");
    expect(P, JT_ASSIGN, "'='");
    nl_push(P, &vals, parse_expression(P, true), t->s);
  }
  n->names = vals.names;
  n->l2 = vals.v;
  n->n2 = vals.n;
  n->d = parse_statements(P, ends, true);
  return n;
}

static jj_node_t *parse_statement(parser_t *P) {
  const jj_tok_t *t = cur(P);
  if (t->t != JT_NAME) fail_unexpected(P, "a tag name");
  enter(P);
  jj_node_t *n;
  if (is_name(t, "if")) n = parse_if(P);
  else if (is_name(t, "for")) n = parse_for(P);
  else if (is_name(t, "set")) n = parse_set(P);
  else if (is_name(t, "macro")) n = parse_macro(P);
  else if (is_name(t, "call")) n = parse_call_block(P);
  else if (is_name(t, "filter")) n = parse_filter_block(P);
  else if (is_name(t, "with")) n = parse_with(P);
  else if (is_name(t, "break") || is_name(t, "continue")) {
    if (P->loops == 0)
      jj_fail(P->e, VR_ERR_PARSE, "line %d: '%.*s' outside a for loop", t->line, (int)t->s.n,
              t->s.p);
    n = node(P, is_name(t, "break") ? JN_BREAK : JN_CONTINUE, t->line);
    next(P);
  } else if (is_name(t, "generation")) {
    static const char *const ends[] = {"endgeneration", NULL};
    next(P);
    n = parse_statements(P, ends, true);
  } else if (is_name(t, "extends") || is_name(t, "block") || is_name(t, "include") ||
             is_name(t, "import") || is_name(t, "from") || is_name(t, "autoescape") ||
             is_name(t, "print") || is_name(t, "do") || is_name(t, "trans")) {
    jj_fail(P->e, VR_ERR_UNSUPPORTED, "line %d: the '%.*s' tag is not supported", t->line,
            (int)t->s.n, t->s.p);
  } else {
    jj_fail(P->e, VR_ERR_PARSE, "line %d: encountered unknown tag '%.*s'", t->line, (int)t->s.n,
            t->s.p);
  }
  leave(P);
  return n;
}

static jj_node_t *subparse(parser_t *P, const char *const *end_tokens) {
  nlist_t body = {0};
  int line = cur(P)->line;
  for (;;) {
    const jj_tok_t *t = cur(P);
    if (t->t == JT_EOF) break;
    if (t->t == JT_DATA) {
      jj_node_t *d = node(P, JN_DATA, t->line);
      d->val = jj_strv(t->s.p, t->s.n);
      nl_push(P, &body, d, (jj_str_t){0});
      next(P);
    } else if (t->t == JT_VAR_BEGIN) {
      next(P);
      jj_node_t *o = node(P, JN_OUTPUT, t->line);
      o->a = parse_tuple(P, false, true, NULL, false);
      expect(P, JT_VAR_END, "'}}'");
      nl_push(P, &body, o, (jj_str_t){0});
    } else if (t->t == JT_BLOCK_BEGIN) {
      next(P);
      if (end_tokens) {
        for (int k = 0; end_tokens[k]; k++)
          if (is_name(cur(P), end_tokens[k])) goto done;
      }
      nl_push(P, &body, parse_statement(P), (jj_str_t){0});
      expect(P, JT_BLOCK_END, "'%}'");
    } else {
      fail_unexpected(P, "template data or a tag");
    }
  }
done:;
  jj_node_t *b = node(P, JN_BODY, line);
  b->l1 = body.v;
  b->n1 = body.n;
  return b;
}

int jj_parse(const jj_tok_t *toks, size_t ntoks, jj_arena_t *a, jj_node_t **root, char *err,
             size_t errlen) {
  jj_errbuf_t e = {.buf = err, .len = errlen};
  parser_t P = {.t = toks, .n = ntoks, .a = a, .e = &e};
  if (setjmp(e.jb)) return e.status;
  jj_node_t *r = subparse(&P, NULL);
  if (cur(&P)->t != JT_EOF) {
    const jj_tok_t *t = cur(&P);
    jj_fail(&e, VR_ERR_PARSE, "line %d: unexpected '%.*s' tag", t->line, (int)t->s.n, t->s.p);
  }
  *root = r;
  return 0;
}
