/* vr_jinja_lex.c: template text -> tokens, with jinja2's whitespace rules as transformers
 * configures them (trim_blocks=True, lstrip_blocks=True): see jinja2/lexer.py tokeniter.
 *   - `{%-` / `{{-` / `{#-` strip all whitespace before the tag, `-%}` / `-}}` / `-#}` all after;
 *   - lstrip_blocks: spaces and tabs between a line start and `{%` / `{#` are dropped (not
 *     before `{{`, not with `{%+`);
 *   - trim_blocks: one newline right after `%}` / `#}` is dropped (not after `+%}`).
 * The source given here is already newline-normalised ("\r\n" and "\r" are "\n"). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_jinja_internal.h"

typedef struct lexer {
  const char *s;
  size_t n, pos;
  int line;
  jj_arena_t *a;
  jj_tok_t *toks;
  size_t ntoks, cap;
  jj_errbuf_t *e;
} lexer_t;

static void push(lexer_t *L, jj_tok_t t) {
  if (L->ntoks == L->cap) {
    size_t nc = L->cap ? L->cap * 2 : 256;
    jj_tok_t *nt = jj_arena_alloc(L->a, nc * sizeof *nt);
    if (!nt) jj_fail(L->e, VR_ERR_NOMEM, "out of memory lexing the template");
    if (L->ntoks) memcpy(nt, L->toks, L->ntoks * sizeof *nt);
    L->toks = nt;
    L->cap = nc;
  }
  L->toks[L->ntoks++] = t;
}

static int count_nl(const char *p, size_t n) {
  int k = 0;
  for (size_t i = 0; i < n; i++) k += p[i] == '\n';
  return k;
}

/* Python's str.isspace over UTF-8 at p: length of the whitespace character, 0 if none */
static size_t ws_at(const char *p, size_t n) {
  if (n == 0) return 0;
  unsigned char ch = (unsigned char)p[0];
  if (ch < 0x80) return jj_py_isspace(ch) ? 1 : 0;
  size_t adv;
  uint32_t cp = jj_utf8_next(p, n, &adv);
  return jj_py_isspace(cp) ? adv : 0;
}

/* bytes of whitespace at the end of [p, p+n) */
static size_t ws_suffix(const char *p, size_t n) {
  size_t end = n;
  while (end > 0) {
    size_t k = end - 1;
    while (k > 0 && ((unsigned char)p[k] & 0xC0) == 0x80) k--; /* start of the last char */
    if (ws_at(p + k, end - k) != end - k) break;
    end = k;
  }
  return n - end;
}

static size_t ws_prefix(const char *p, size_t n) {
  size_t i = 0, k;
  while (i < n && (k = ws_at(p + i, n - i)) > 0) i += k;
  return i;
}

static void emit_data(lexer_t *L, const char *p, size_t n, int line, bool raw) {
  if (n == 0) return;
  jj_tok_t t = {.t = JT_DATA, .line = line, .s = {p, n}, .raw = raw};
  push(L, t);
}

static bool is_name_start(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_name_char(unsigned char c) {
  return is_name_start(c) || (c >= '0' && c <= '9');
}
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* A string literal at L->pos (quote char q): decodes Python escapes as jinja2 does
 * (value.encode("ascii", "backslashreplace").decode("unicode-escape")). */
static void lex_string(lexer_t *L) {
  char q = L->s[L->pos];
  size_t i = L->pos + 1;
  int line0 = L->line;
  /* find the end first */
  size_t j = i;
  while (j < L->n && L->s[j] != q) {
    if (L->s[j] == '\\' && j + 1 < L->n) j++;
    j++;
  }
  if (j >= L->n) jj_fail(L->e, VR_ERR_PARSE, "line %d: unterminated string literal", line0);
  char *out = jj_arena_alloc(L->a, j - i + 1);
  if (!out) jj_fail(L->e, VR_ERR_NOMEM, "out of memory lexing the template");
  size_t o = 0;
  for (size_t k = i; k < j; k++) {
    char ch = L->s[k];
    if (ch != '\\') {
      out[o++] = ch;
      continue;
    }
    char x = L->s[++k];
    uint32_t cp = 0;
    int hex = 0;
    switch (x) {
    case 'n': out[o++] = '\n'; break;
    case 't': out[o++] = '\t'; break;
    case 'r': out[o++] = '\r'; break;
    case '\\': out[o++] = '\\'; break;
    case '\'': out[o++] = '\''; break;
    case '"': out[o++] = '"'; break;
    case 'a': out[o++] = '\a'; break;
    case 'b': out[o++] = '\b'; break;
    case 'f': out[o++] = '\f'; break;
    case 'v': out[o++] = '\v'; break;
    case '\n': break; /* line continuation */
    case 'x': hex = 2; break;
    case 'u': hex = 4; break;
    case 'U': hex = 8; break;
    case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
      int d = 0;
      while (d < 3 && k < j && L->s[k] >= '0' && L->s[k] <= '7') {
        cp = cp * 8 + (uint32_t)(L->s[k] - '0');
        k++, d++;
      }
      k--;
      hex = -1;
      break;
    }
    default:
      /* unknown escapes stay as written (Python keeps the backslash); non-ASCII bytes after
         a backslash were backslash-replaced by jinja2 first, so they stay too */
      out[o++] = '\\';
      out[o++] = x;
      break;
    }
    if (hex > 0) {
      for (int d = 0; d < hex; d++) {
        char h = (k + 1 < j) ? L->s[k + 1] : 0;
        int v = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
              : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (v < 0)
          jj_fail(L->e, VR_ERR_PARSE, "line %d: truncated \\%c escape in a string literal",
                  L->line, x);
        cp = cp * 16 + (uint32_t)v;
        k++;
      }
    }
    if (hex != 0) {
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        jj_fail(L->e, VR_ERR_UNSUPPORTED,
                "line %d: string escape U+%04X is not a Unicode scalar value", L->line,
                (unsigned)cp);
      if (cp < 0x80) out[o++] = (char)cp;
      else if (cp < 0x800) {
        out[o++] = (char)(0xC0 | (cp >> 6));
        out[o++] = (char)(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        out[o++] = (char)(0xE0 | (cp >> 12));
        out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[o++] = (char)(0x80 | (cp & 0x3F));
      } else {
        out[o++] = (char)(0xF0 | (cp >> 18));
        out[o++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[o++] = (char)(0x80 | (cp & 0x3F));
      }
    }
  }
  /* the buffer (j - i + 1 bytes) is large enough: no escape writes more bytes than it spans
     (\xHH <= 2, \uHHHH <= 3, \UHHHHHHHH <= 4, octal <= 2, unknown ones 2) */
  jj_tok_t t = {.t = JT_STRING, .line = line0, .s = {out, o}};
  push(L, t);
  L->line += count_nl(L->s + L->pos, j + 1 - L->pos);
  L->pos = j + 1;
}

static void lex_number(lexer_t *L) {
  size_t i = L->pos, n = L->n;
  const char *s = L->s;
  char buf[128];
  size_t b = 0;
  int base = 10;
  if (s[i] == '0' && i + 1 < n && strchr("xXoObB", s[i + 1]) && s[i + 1] != 0) {
    char k = (char)(s[i + 1] | 0x20);
    base = k == 'x' ? 16 : k == 'o' ? 8 : 2;
    i += 2;
    uint64_t v = 0;
    size_t d0 = i;
    for (; i < n; i++) {
      char ch = s[i];
      if (ch == '_') continue;
      int dv = (ch >= '0' && ch <= '9') ? ch - '0' : ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f')
                                                         ? (ch | 0x20) - 'a' + 10 : 99;
      if (dv >= base) break;
      if (v > (UINT64_MAX - (uint64_t)dv) / (uint64_t)base || v * base + dv > INT64_MAX)
        jj_fail(L->e, VR_ERR_UNSUPPORTED, "line %d: integer literal out of 64-bit range", L->line);
      v = v * (uint64_t)base + (uint64_t)dv;
    }
    if (i == d0) jj_fail(L->e, VR_ERR_PARSE, "line %d: malformed number literal", L->line);
    jj_tok_t t = {.t = JT_INT, .line = L->line, .i = (int64_t)v};
    push(L, t);
    L->pos = i;
    return;
  }
  bool isf = false;
  while (i < n && (is_digit((unsigned char)s[i]) || s[i] == '_')) {
    if (s[i] != '_' && b < sizeof buf - 1) buf[b++] = s[i];
    i++;
  }
  if (i + 1 < n && s[i] == '.' && is_digit((unsigned char)s[i + 1])) {
    isf = true;
    buf[b++] = '.';
    i++;
    while (i < n && (is_digit((unsigned char)s[i]) || s[i] == '_')) {
      if (s[i] != '_' && b < sizeof buf - 1) buf[b++] = s[i];
      i++;
    }
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    size_t k = i + 1;
    if (k < n && (s[k] == '+' || s[k] == '-')) k++;
    if (k < n && is_digit((unsigned char)s[k])) {
      isf = true;
      if (b < sizeof buf - 1) buf[b++] = 'e';
      for (size_t m = i + 1; m < k; m++)
        if (b < sizeof buf - 1) buf[b++] = s[m];
      i = k;
      while (i < n && (is_digit((unsigned char)s[i]) || s[i] == '_')) {
        if (s[i] != '_' && b < sizeof buf - 1) buf[b++] = s[i];
        i++;
      }
    }
  }
  if (b >= sizeof buf - 2)
    jj_fail(L->e, VR_ERR_UNSUPPORTED, "line %d: number literal too long", L->line);
  buf[b] = 0;
  jj_tok_t t = {.line = L->line};
  if (isf) {
    t.t = JT_FLOAT;
    t.f = strtod(buf, NULL);
  } else {
    t.t = JT_INT;
    char *end;
    unsigned long long v = strtoull(buf, &end, 10);
    if (b > 19 || v > (unsigned long long)INT64_MAX)
      jj_fail(L->e, VR_ERR_UNSUPPORTED, "line %d: integer literal out of 64-bit range", L->line);
    t.i = (int64_t)v;
  }
  push(L, t);
  L->pos = i;
}

static const struct {
  const char *s;
  jj_tok_type_t t;
} OPS[] = {
    {"//", JT_FLOORDIV}, {"**", JT_POW}, {"==", JT_EQ}, {"!=", JT_NE}, {"<=", JT_LE},
    {">=", JT_GE},       {"+", JT_ADD},  {"-", JT_SUB}, {"*", JT_MUL}, {"/", JT_DIV},
    {"%", JT_MOD},       {"~", JT_TILDE}, {"[", JT_LBRACKET}, {"]", JT_RBRACKET},
    {"(", JT_LPAREN},    {")", JT_RPAREN}, {"{", JT_LBRACE}, {"}", JT_RBRACE}, {"<", JT_LT},
    {">", JT_GT},        {"=", JT_ASSIGN}, {".", JT_DOT}, {":", JT_COLON}, {"|", JT_PIPE},
    {",", JT_COMMA},     {";", JT_SEMICOLON},
};

/* Lexes the inside of a {{ }} or {% %} tag from L->pos up to and including its end. Returns
 * true when the end had a '-' (strip the whitespace after), sets *trim when trim_blocks applies. */
static void lex_tag(lexer_t *L, bool block, bool *strip_after, bool *trim_nl) {
  int depth = 0;
  int line0 = L->line;
  *strip_after = false;
  *trim_nl = false;
  for (;;) {
    if (L->pos >= L->n)
      jj_fail(L->e, VR_ERR_PARSE, "line %d: unexpected end of template inside a %s tag", line0,
              block ? "{% %}" : "{{ }}");
    const char *p = L->s + L->pos;
    size_t left = L->n - L->pos;
    char c = *p;
    if (depth == 0) {
      const char *end = block ? "%}" : "}}";
      if (left >= 3 && c == '-' && p[1] == end[0] && p[2] == end[1]) {
        L->pos += 3;
        *strip_after = true;
        break;
      }
      if (block && left >= 3 && c == '+' && p[1] == '%' && p[2] == '}') {
        L->pos += 3;
        break;
      }
      if (left >= 2 && c == end[0] && p[1] == end[1]) {
        L->pos += 2;
        *trim_nl = block;
        break;
      }
    }
    size_t w = ws_at(p, left);
    if (w) {
      L->line += (c == '\n');
      L->pos += w;
      continue;
    }
    if (c == '\'' || c == '"') {
      lex_string(L);
      continue;
    }
    if (is_digit((unsigned char)c)) {
      lex_number(L);
      continue;
    }
    if (is_name_start((unsigned char)c)) {
      size_t k = 1;
      while (k < left && is_name_char((unsigned char)p[k])) k++;
      jj_tok_t t = {.t = JT_NAME, .line = L->line, .s = {p, k}};
      push(L, t);
      L->pos += k;
      continue;
    }
    bool found = false;
    for (size_t o = 0; o < sizeof OPS / sizeof OPS[0]; o++) {
      size_t ol = strlen(OPS[o].s);
      if (left >= ol && memcmp(p, OPS[o].s, ol) == 0) {
        jj_tok_t t = {.t = OPS[o].t, .line = L->line};
        if (t.t == JT_LBRACKET || t.t == JT_LPAREN || t.t == JT_LBRACE) depth++;
        if ((t.t == JT_RBRACKET || t.t == JT_RPAREN || t.t == JT_RBRACE) && depth > 0) depth--;
        push(L, t);
        L->pos += ol;
        found = true;
        break;
      }
    }
    if (!found)
      jj_fail(L->e, VR_ERR_PARSE, "line %d: unexpected character '%c' in a tag", L->line,
              (c >= 32 && c < 127) ? c : '?');
  }
  jj_tok_t t = {.t = block ? JT_BLOCK_END : JT_VAR_END, .line = L->line};
  push(L, t);
}

/* finds the next "{{", "{%" or "{#" at or after pos; returns its offset or n */
static size_t next_tag(const char *s, size_t n, size_t pos) {
  for (size_t i = pos; i + 1 < n; i++) {
    if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) return i;
  }
  return n;
}

/* is the block tag at s[i] (after "{%" and an optional sign) the word w followed by only
   whitespace and the tag end? returns the end offset (after "%}") or 0 */
static size_t match_word_tag(lexer_t *L, size_t i, const char *w, char *end_sign) {
  const char *s = L->s;
  size_t n = L->n;
  while (i < n && ws_at(s + i, n - i)) i += ws_at(s + i, n - i);
  size_t wl = strlen(w);
  if (i + wl > n || memcmp(s + i, w, wl) != 0) return 0;
  i += wl;
  if (i < n && is_name_char((unsigned char)s[i])) return 0;
  while (i < n && ws_at(s + i, n - i)) i += ws_at(s + i, n - i);
  *end_sign = 0;
  if (i < n && (s[i] == '-' || s[i] == '+')) *end_sign = s[i++];
  if (i + 1 < n && s[i] == '%' && s[i + 1] == '}') return i + 2;
  return 0;
}

int jj_lex(const char *src, size_t len, jj_arena_t *a, jj_tok_t **toks, size_t *ntoks,
           char *err, size_t errlen) {
  jj_errbuf_t e = {.buf = err, .len = errlen};
  lexer_t L = {.s = src, .n = len, .line = 1, .a = a, .e = &e};
  if (setjmp(e.jb)) return e.status;
  bool line_starting = true;
  bool strip_next = false; /* previous tag ended with '-': lstrip the following data */
  bool trim_next = false;  /* previous block ended with plain "%}": drop one '\n' */
  while (L.pos <= L.n) {
    size_t start = L.pos;
    if (strip_next) start += ws_prefix(src + start, L.n - start);
    else if (trim_next && start < L.n && src[start] == '\n') start++;
    /* line_starting: the previous match ended in a newline (jinja2: m.group()[-1:] == "\n") */
    if (start > L.pos) line_starting = src[start - 1] == '\n';
    L.line += count_nl(src + L.pos, start - L.pos);
    L.pos = start;
    strip_next = trim_next = false;
    size_t t = next_tag(src, L.n, L.pos);
    const char *text = src + L.pos;
    size_t tn = t - L.pos;
    int text_line = L.line;
    if (t >= L.n) {
      emit_data(&L, text, tn, text_line, false);
      break;
    }
    char kind = src[t + 1];
    char sign = (t + 2 < L.n && (src[t + 2] == '-' || src[t + 2] == '+')) ? src[t + 2] : 0;
    if (sign == '-') {
      tn -= ws_suffix(text, tn);
    } else if (sign != '+' && kind != '{') {
      size_t l_pos = 0;
      for (size_t k = tn; k > 0; k--)
        if (text[k - 1] == '\n') {
          l_pos = k;
          break;
        }
      if ((l_pos > 0 || line_starting) && tn > l_pos) {
        size_t rest = tn - l_pos;
        if (ws_prefix(text + l_pos, rest) == rest) tn = l_pos;
      }
    }
    L.line += count_nl(src + L.pos, t - L.pos);
    size_t body = t + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      /* comment: up to "#}", "-#}" or "+#}" */
      size_t k = body;
      while (k + 1 < L.n && !(src[k] == '#' && src[k + 1] == '}')) k++;
      if (k + 1 >= L.n)
        jj_fail(&e, VR_ERR_PARSE, "line %d: unterminated comment", L.line);
      char es = (k > body && (src[k - 1] == '-' || src[k - 1] == '+')) ? src[k - 1] : 0;
      emit_data(&L, text, tn, text_line, false);
      L.line += count_nl(src + t, k + 2 - t);
      L.pos = k + 2;
      strip_next = es == '-';
      trim_next = es == 0;
      line_starting = false;
      continue;
    }
    emit_data(&L, text, tn, text_line, false);
    if (kind == '%') {
      char es;
      size_t after = match_word_tag(&L, body, "raw", &es);
      if (after) {
        /* {% raw %}: text up to {% endraw %} verbatim */
        size_t k = after;
        if (es == '-') k += ws_prefix(src + k, L.n - k);
        size_t endtag = 0, endafter = 0;
        char es2 = 0;
        for (size_t m = k; (m = next_tag(src, L.n, m)) < L.n; m++) {
          if (src[m + 1] != '%') continue;
          size_t b2 = m + 2 + ((m + 2 < L.n && (src[m + 2] == '-' || src[m + 2] == '+')) ? 1 : 0);
          size_t ea = match_word_tag(&L, b2, "endraw", &es2);
          if (ea) {
            endtag = m;
            endafter = ea;
            break;
          }
        }
        if (!endafter) jj_fail(&e, VR_ERR_PARSE, "line %d: {%% raw %%} without {%% endraw %%}", L.line);
        size_t rn = endtag - k;
        if (src[endtag + 2] == '-') rn -= ws_suffix(src + k, rn);
        L.line += count_nl(src + t, k - t);
        emit_data(&L, src + k, rn, L.line, true);
        L.line += count_nl(src + k, endafter - k);
        L.pos = endafter;
        strip_next = es2 == '-';
        trim_next = es2 == 0;
        line_starting = false;
        continue;
      }
    }
    jj_tok_t bt = {.t = kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, .line = L.line};
    push(&L, bt);
    L.pos = body;
    bool sa, tr;
    lex_tag(&L, kind == '%', &sa, &tr);
    strip_next = sa;
    trim_next = tr;
    line_starting = false;
  }
  jj_tok_t eof = {.t = JT_EOF, .line = L.line};
  push(&L, eof);
  *toks = L.toks;
  *ntoks = L.ntoks;
  return 0;
}
