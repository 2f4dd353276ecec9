/* vr_tok_pre.c: tokenizer.json pre-tokenizers, as Hugging Face tokenizers splits.
 *
 * Every split goes through one routine (split_piece): the pattern yields matches, the text
 * between them fills the gaps (HF's find_matches), `invert` flips which parts count as matches,
 * the behavior merges or drops them, and empty parts are dropped. Char predicates (whitespace,
 * punctuation, digits, the Metaspace replacement) yield one match per matching character,
 * as HF's `Fn(char) -> bool` pattern does. */
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_tok_internal.h"

static const char GPT2_RE[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char WHITESPACE_RE[] = "\\w+|[^\\w\\s]+";

/* ---- ByteLevel's table (GPT-2 bytes_to_unicode) ---------------------------------------- */

uint32_t vr_tok_bytelevel_cp(unsigned char b) {
  if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
  /* the others in order get 256, 257, ...: 0x00-0x20, 0x7F-0xA0, 0xAD */
  if (b <= 0x20) return 256u + b;
  if (b >= 0x7F && b <= 0xA0) return 256u + 33u + (b - 0x7Fu);
  return 256u + 33u + 34u; /* 0xAD */
}

int vr_tok_bytelevel_byte(uint32_t cp) {
  if ((cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
  if (cp >= 256 && cp <= 256 + 32) return (int)(cp - 256);
  if (cp >= 256 + 33 && cp <= 256 + 33 + 33) return (int)(0x7F + cp - 256 - 33);
  if (cp == 256 + 67) return 0xAD;
  return -1;
}

/* ---- the split routine ------------------------------------------------------------------ */

typedef struct span {
  uint32_t a, e;
  uint8_t m;
} span_t;

typedef struct spans {
  span_t *v;
  size_t n, cap;
  uint32_t last; /* end of the previous match (fills gaps) */
} spans_t;

static int spans_push(spans_t *s, uint32_t a, uint32_t e, uint8_t m) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 16;
    span_t *v = realloc(s->v, cap * sizeof *v);
    if (!v) return VR_ERR_NOMEM;
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = (span_t){a, e, m};
  return 0;
}

static int match_cb(void *u, size_t a, size_t e) {
  spans_t *s = u;
  if (s->last < a && spans_push(s, s->last, (uint32_t)a, 0)) return VR_ERR_NOMEM;
  if (spans_push(s, (uint32_t)a, (uint32_t)e, 1)) return VR_ERR_NOMEM;
  s->last = (uint32_t)e;
  return 0;
}

typedef int (*char_pred)(uint32_t cp, const vr_tok_pre_t *p);

static int pred_ws(uint32_t cp, const vr_tok_pre_t *p) { return vr_tok_is_whitespace(cp); }
static int pred_punct(uint32_t cp, const vr_tok_pre_t *p) { return vr_tok_is_punctuation(cp); }
static int pred_digit(uint32_t cp, const vr_tok_pre_t *p) { return vr_tok_is_numeric(cp); }
static int pred_eq(uint32_t cp, const vr_tok_pre_t *p) { return cp == p->replacement; }

/* Splits piece `pc` (text at c->arena) into c->b by re or pred with behavior; invert flips. */
static int split_piece(vr_tok_ctx_t *c, const vr_tok_piece_t *pc, const vr_tok_re_t *re, char_pred pred,
                       const vr_tok_pre_t *p, vr_tok_behavior_t beh, int invert) {
  spans_t sp = {0};
  const char *s = c->arena.p + pc->off;
  int rc = 0;
  if (re) {
    rc = vr_tok_re_each(re, c->re, s, pc->len, match_cb, &sp);
  } else {
    const unsigned char *q = (const unsigned char *)s;
    for (uint32_t i = 0; i < pc->len && !rc;) {
      size_t l;
      uint32_t cp = vr_tok_utf8_dec(q + i, &l);
      if (pred(cp, p)) rc = match_cb(&sp, i, i + l);
      i += (uint32_t)l;
    }
  }
  if (!rc && sp.last < pc->len) rc = spans_push(&sp, sp.last, pc->len, 0);
  if (rc) {
    free(sp.v);
    return rc;
  }
  if (invert)
    for (size_t i = 0; i < sp.n; i++) sp.v[i].m = !sp.v[i].m;
  /* behavior: produce the kept spans in place (k of them), m = 0 for kept */
  size_t k = 0;
  switch (beh) {
  case VR_TOK_REMOVED:
    for (size_t i = 0; i < sp.n; i++)
      if (!sp.v[i].m) sp.v[k++] = sp.v[i];
    break;
  case VR_TOK_ISOLATED: k = sp.n; break;
  case VR_TOK_MERGED_WITH_PREVIOUS: {
    int prev = 0;
    for (size_t i = 0; i < sp.n; i++) {
      span_t x = sp.v[i];
      if (x.m && !prev && k) sp.v[k - 1].e = x.e;
      else sp.v[k++] = x;
      prev = x.m;
    }
    break;
  }
  case VR_TOK_MERGED_WITH_NEXT: {
    /* HF folds from the right: a match not preceded (on its right) by a match joins the span
     * after it */
    int prev = 0;
    size_t w = sp.n; /* write downwards from the end */
    for (size_t i = sp.n; i-- > 0;) {
      span_t x = sp.v[i];
      if (x.m && !prev && w < sp.n) sp.v[w].a = x.a;
      else sp.v[--w] = x;
      prev = x.m;
    }
    if (sp.n - w) memmove(sp.v, sp.v + w, (sp.n - w) * sizeof *sp.v);
    k = sp.n - w;
    break;
  }
  case VR_TOK_CONTIGUOUS: {
    int prev = 0;
    for (size_t i = 0; i < sp.n; i++) {
      span_t x = sp.v[i];
      if (x.m == prev && k) sp.v[k - 1].e = x.e;
      else sp.v[k++] = x;
      prev = x.m;
    }
    break;
  }
  }
  for (size_t i = 0; i < k && !rc; i++) {
    if (sp.v[i].a == sp.v[i].e) continue;
    rc = vr_tok_pieces_push(&c->b, pc->off + sp.v[i].a, sp.v[i].e - sp.v[i].a, -1,
                            (uint8_t)(pc->origin && sp.v[i].a == 0));
  }
  free(sp.v);
  return rc;
}

/* Runs fn over every piece without an id of c->a, collecting into c->b, then swaps. */
typedef int (*piece_fn)(const vr_tok_pre_t *p, vr_tok_ctx_t *c, const vr_tok_piece_t *pc);

static int for_pieces(const vr_tok_pre_t *p, vr_tok_ctx_t *c, piece_fn fn) {
  c->b.n = 0;
  int rc = 0;
  for (size_t i = 0; i < c->a.n && !rc; i++) {
    vr_tok_piece_t pc = c->a.v[i];
    if (pc.id >= 0) rc = vr_tok_pieces_push(&c->b, pc.off, pc.len, pc.id, pc.origin);
    else rc = fn(p, c, &pc);
  }
  vr_tok_pieces_t t = c->a;
  c->a = c->b;
  c->b = t;
  return rc;
}

/* ---- the pre-tokenizers ---------------------------------------------------------------- */

static int bytelevel_fn(const vr_tok_pre_t *p, vr_tok_ctx_t *c, const vr_tok_piece_t *pc0) {
  vr_tok_piece_t pc = *pc0;
  if (p->add_prefix_space && (pc.len == 0 || c->arena.p[pc.off] != ' ')) {
    uint32_t off = (uint32_t)c->arena.n;
    if (vr_tok_buf_reserve(&c->arena, pc.len + 2)) return VR_ERR_NOMEM;
    c->arena.p[c->arena.n++] = ' ';
    memcpy(c->arena.p + c->arena.n, c->arena.p + pc.off, pc.len);
    c->arena.n += pc.len;
    pc.off = off;
    pc.len++;
  }
  size_t first = c->b.n;
  int rc = p->use_regex ? split_piece(c, &pc, p->re, NULL, p, VR_TOK_ISOLATED, 0)
                        : vr_tok_pieces_push(&c->b, pc.off, pc.len, -1, pc.origin);
  /* map every byte of the new pieces to its code point */
  for (size_t i = first; i < c->b.n && !rc; i++) {
    vr_tok_piece_t *q = &c->b.v[i];
    uint32_t off = (uint32_t)c->arena.n;
    if (vr_tok_buf_reserve(&c->arena, (size_t)q->len * 2 + 1)) return VR_ERR_NOMEM;
    for (uint32_t k = 0; k < q->len; k++) {
      uint32_t cp = vr_tok_bytelevel_cp((unsigned char)c->arena.p[q->off + k]);
      char *w = c->arena.p + c->arena.n;
      if (cp < 0x80) {
        w[0] = (char)cp;
        c->arena.n += 1;
      } else {
        w[0] = (char)(0xC0 | (cp >> 6));
        w[1] = (char)(0x80 | (cp & 0x3F));
        c->arena.n += 2;
      }
    }
    q->off = off;
    q->len = (uint32_t)(c->arena.n - off);
  }
  return rc;
}

static int split_fn(const vr_tok_pre_t *p, vr_tok_ctx_t *c, const vr_tok_piece_t *pc) {
  return split_piece(c, pc, p->re, NULL, p, p->behavior, p->invert);
}

static int metaspace_fn(const vr_tok_pre_t *p, vr_tok_ctx_t *c, const vr_tok_piece_t *pc) {
  /* replace ' ' by the replacement, prepend it per scheme, split before each one */
  char rep[4];
  size_t rn;
  {
    uint32_t r = p->replacement;
    if (r < 0x80) { rep[0] = (char)r; rn = 1; }
    else if (r < 0x800) { rep[0] = (char)(0xC0 | (r >> 6)); rep[1] = (char)(0x80 | (r & 0x3F)); rn = 2; }
    else if (r < 0x10000) {
      rep[0] = (char)(0xE0 | (r >> 12)); rep[1] = (char)(0x80 | ((r >> 6) & 0x3F)); rep[2] = (char)(0x80 | (r & 0x3F));
      rn = 3;
    } else {
      rep[0] = (char)(0xF0 | (r >> 18)); rep[1] = (char)(0x80 | ((r >> 12) & 0x3F));
      rep[2] = (char)(0x80 | ((r >> 6) & 0x3F)); rep[3] = (char)(0x80 | (r & 0x3F));
      rn = 4;
    }
  }
  uint32_t off = (uint32_t)c->arena.n;
  if (vr_tok_buf_reserve(&c->arena, (size_t)pc->len * 4 + 8)) return VR_ERR_NOMEM;
  const char *s = c->arena.p + pc->off;
  int starts = pc->len >= rn && memcmp(s, rep, rn) == 0;
  /* after replacement the text starts with the replacement also when it started with ' ' */
  if (pc->len && s[0] == ' ') starts = 1;
  int pre = !starts && (p->prepend_scheme == VR_TOK_PREPEND_ALWAYS ||
                        (p->prepend_scheme == VR_TOK_PREPEND_FIRST && pc->origin));
  char *w = c->arena.p + c->arena.n;
  size_t k = 0;
  if (pre) {
    memcpy(w, rep, rn);
    k = rn;
  }
  for (uint32_t i = 0; i < pc->len; i++) {
    if (s[i] == ' ') {
      memcpy(w + k, rep, rn);
      k += rn;
    } else {
      w[k++] = s[i];
    }
  }
  c->arena.n += k;
  vr_tok_piece_t np = {off, (uint32_t)k, -1, pc->origin};
  if (!p->split) return vr_tok_pieces_push(&c->b, np.off, np.len, -1, np.origin);
  return split_piece(c, &np, NULL, pred_eq, p, VR_TOK_MERGED_WITH_NEXT, 0);
}

static int bert_ws_fn(const vr_tok_pre_t *p, vr_tok_ctx_t *c, const vr_tok_piece_t *pc) {
  return split_piece(c, pc, NULL, pred_ws, p, VR_TOK_REMOVED, 0);
}
static int punct_fn(const vr_tok_pre_t *p, vr_tok_ctx_t *c, const vr_tok_piece_t *pc) {
  return split_piece(c, pc, NULL, pred_punct, p, p->type == VR_TOK_PRE_BERT ? VR_TOK_ISOLATED : p->behavior, 0);
}
static int digits_fn(const vr_tok_pre_t *p, vr_tok_ctx_t *c, const vr_tok_piece_t *pc) {
  return split_piece(c, pc, NULL, pred_digit, p, p->individual_digits ? VR_TOK_ISOLATED : VR_TOK_CONTIGUOUS, 0);
}
static int whitespace_fn(const vr_tok_pre_t *p, vr_tok_ctx_t *c, const vr_tok_piece_t *pc) {
  return split_piece(c, pc, p->re, NULL, p, VR_TOK_REMOVED, 1);
}
static int chardelim_fn(const vr_tok_pre_t *p, vr_tok_ctx_t *c, const vr_tok_piece_t *pc) {
  return split_piece(c, pc, NULL, pred_eq, p, VR_TOK_REMOVED, 0);
}

int vr_tok_pre_apply(const vr_tok_pre_t *p, vr_tok_ctx_t *c) {
  switch (p->type) {
  case VR_TOK_PRE_BYTELEVEL: return for_pieces(p, c, bytelevel_fn);
  case VR_TOK_PRE_SPLIT: return for_pieces(p, c, split_fn);
  case VR_TOK_PRE_METASPACE: return for_pieces(p, c, metaspace_fn);
  case VR_TOK_PRE_BERT: {
    int rc = for_pieces(p, c, bert_ws_fn);
    return rc ? rc : for_pieces(p, c, punct_fn);
  }
  case VR_TOK_PRE_DIGITS: return for_pieces(p, c, digits_fn);
  case VR_TOK_PRE_PUNCTUATION: return for_pieces(p, c, punct_fn);
  case VR_TOK_PRE_WHITESPACE: return for_pieces(p, c, whitespace_fn);
  case VR_TOK_PRE_WHITESPACE_SPLIT: return for_pieces(p, c, bert_ws_fn);
  case VR_TOK_PRE_CHAR_DELIMITER: return for_pieces(p, c, chardelim_fn);
  case VR_TOK_PRE_SEQUENCE:
    for (size_t i = 0; i < p->nsub; i++) {
      int rc = vr_tok_pre_apply(p->sub[i], c);
      if (rc) return rc;
    }
    return 0;
  }
  return VR_ERR_INTERNAL;
}

/* ---- parsing ------------------------------------------------------------------------------ */

void vr_tok_pre_free(vr_tok_pre_t *p) {
  if (!p) return;
  vr_tok_re_free(p->re);
  for (size_t i = 0; i < p->nsub; i++) vr_tok_pre_free(p->sub[i]);
  free(p->sub);
  free(p);
}

static int parse_behavior(const cJSON *j, const char *file, const char *comp, vr_tok_behavior_t *b, char *err,
                          size_t errlen) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "behavior");
  if (!v || cJSON_IsNull(v)) return 0; /* keep the default */
  const char *s = cJSON_IsString(v) ? v->valuestring : NULL;
  if (s && !strcmp(s, "Removed")) *b = VR_TOK_REMOVED;
  else if (s && !strcmp(s, "Isolated")) *b = VR_TOK_ISOLATED;
  else if (s && !strcmp(s, "MergedWithPrevious")) *b = VR_TOK_MERGED_WITH_PREVIOUS;
  else if (s && !strcmp(s, "MergedWithNext")) *b = VR_TOK_MERGED_WITH_NEXT;
  else if (s && !strcmp(s, "Contiguous")) *b = VR_TOK_CONTIGUOUS;
  else {
    vr_tok_seterr(err, errlen, "%s: pre_tokenizer %s: behavior %s is not one of Removed, Isolated, "
                  "MergedWithPrevious, MergedWithNext, Contiguous", file, comp, s ? s : "(not a string)");
    return VR_ERR_MODEL_FORMAT;
  }
  return 0;
}

/* Metaspace (and its decoder): replacement + prepend_scheme, or the legacy add_prefix_space. */
int vr_tok_parse_metaspace(const cJSON *j, const char *file, const char *comp, uint32_t *rep,
                           vr_tok_prepend_t *scheme, char *err, size_t errlen);
int vr_tok_parse_metaspace(const cJSON *j, const char *file, const char *comp, uint32_t *rep,
                           vr_tok_prepend_t *scheme, char *err, size_t errlen) {
  const char *r = vr_tok_jstr(j, "replacement");
  if (!r || !*r || vr_tok_utf8_check(r, strlen(r)) != strlen(r) || vr_tok_utf8_len((unsigned char)r[0]) != strlen(r)) {
    vr_tok_seterr(err, errlen, "%s: %s Metaspace: replacement must be one character", file, comp);
    return VR_ERR_MODEL_FORMAT;
  }
  size_t l;
  *rep = vr_tok_utf8_dec((const unsigned char *)r, &l);
  *scheme = VR_TOK_PREPEND_ALWAYS;
  const char *ps = vr_tok_jstr(j, "prepend_scheme");
  if (ps) {
    if (!strcmp(ps, "always")) *scheme = VR_TOK_PREPEND_ALWAYS;
    else if (!strcmp(ps, "first")) *scheme = VR_TOK_PREPEND_FIRST;
    else if (!strcmp(ps, "never")) *scheme = VR_TOK_PREPEND_NEVER;
    else {
      vr_tok_seterr(err, errlen, "%s: %s Metaspace: prepend_scheme %s is not always/first/never", file, comp, ps);
      return VR_ERR_MODEL_FORMAT;
    }
  } else {
    int aps = vr_tok_jbool(j, "add_prefix_space", 1);
    if (aps < 0) {
      vr_tok_seterr(err, errlen, "%s: %s Metaspace: add_prefix_space is not a boolean", file, comp);
      return VR_ERR_MODEL_FORMAT;
    }
    *scheme = aps ? VR_TOK_PREPEND_ALWAYS : VR_TOK_PREPEND_NEVER;
  }
  return 0;
}

int vr_tok_pre_parse(const cJSON *j, const char *file, vr_tok_pre_t **out, char *err, size_t errlen) {
  *out = NULL;
  const char *type = vr_tok_jstr(j, "type");
  if (!type) {
    vr_tok_seterr(err, errlen, "%s: pre_tokenizer: no \"type\"", file);
    return VR_ERR_MODEL_FORMAT;
  }
  vr_tok_pre_t *p = calloc(1, sizeof *p);
  if (!p) return VR_ERR_NOMEM;
  int rc = 0;
  if (!strcmp(type, "ByteLevel")) {
    p->type = VR_TOK_PRE_BYTELEVEL;
    p->add_prefix_space = vr_tok_jbool(j, "add_prefix_space", 1);
    p->use_regex = vr_tok_jbool(j, "use_regex", 1);
    if (p->add_prefix_space < 0 || p->use_regex < 0) {
      vr_tok_seterr(err, errlen, "%s: pre_tokenizer ByteLevel: add_prefix_space/use_regex not a boolean", file);
      rc = VR_ERR_MODEL_FORMAT;
    } else if (p->use_regex) {
      rc = vr_tok_re_compile(GPT2_RE, sizeof GPT2_RE - 1, 0, &p->re, err, errlen);
    }
  } else if (!strcmp(type, "Split")) {
    p->type = VR_TOK_PRE_SPLIT;
    p->behavior = VR_TOK_ISOLATED;
    p->invert = vr_tok_jbool(j, "invert", 0);
    rc = vr_tok_jpattern(j, file, "pre_tokenizer Split", &p->re, err, errlen);
    if (!rc) rc = parse_behavior(j, file, "Split", &p->behavior, err, errlen);
    if (!rc && p->invert < 0) {
      vr_tok_seterr(err, errlen, "%s: pre_tokenizer Split: invert is not a boolean", file);
      rc = VR_ERR_MODEL_FORMAT;
    }
  } else if (!strcmp(type, "Metaspace")) {
    p->type = VR_TOK_PRE_METASPACE;
    rc = vr_tok_parse_metaspace(j, file, "pre_tokenizer", &p->replacement, &p->prepend_scheme, err, errlen);
    p->split = vr_tok_jbool(j, "split", 1);
    if (!rc && p->split < 0) {
      vr_tok_seterr(err, errlen, "%s: pre_tokenizer Metaspace: split is not a boolean", file);
      rc = VR_ERR_MODEL_FORMAT;
    }
  } else if (!strcmp(type, "BertPreTokenizer")) {
    p->type = VR_TOK_PRE_BERT;
  } else if (!strcmp(type, "Digits")) {
    p->type = VR_TOK_PRE_DIGITS;
    p->individual_digits = vr_tok_jbool(j, "individual_digits", 0);
    if (p->individual_digits < 0) {
      vr_tok_seterr(err, errlen, "%s: pre_tokenizer Digits: individual_digits is not a boolean", file);
      rc = VR_ERR_MODEL_FORMAT;
    }
  } else if (!strcmp(type, "Punctuation")) {
    p->type = VR_TOK_PRE_PUNCTUATION;
    p->behavior = VR_TOK_ISOLATED;
    rc = parse_behavior(j, file, "Punctuation", &p->behavior, err, errlen);
  } else if (!strcmp(type, "Whitespace")) {
    p->type = VR_TOK_PRE_WHITESPACE;
    rc = vr_tok_re_compile(WHITESPACE_RE, sizeof WHITESPACE_RE - 1, 0, &p->re, err, errlen);
  } else if (!strcmp(type, "WhitespaceSplit")) {
    p->type = VR_TOK_PRE_WHITESPACE_SPLIT;
  } else if (!strcmp(type, "CharDelimiterSplit")) {
    p->type = VR_TOK_PRE_CHAR_DELIMITER;
    const char *d = vr_tok_jstr(j, "delimiter");
    if (!d || !*d || vr_tok_utf8_check(d, strlen(d)) != strlen(d) || vr_tok_utf8_len((unsigned char)d[0]) != strlen(d)) {
      vr_tok_seterr(err, errlen, "%s: pre_tokenizer CharDelimiterSplit: delimiter must be one character", file);
      rc = VR_ERR_MODEL_FORMAT;
    } else {
      size_t l;
      p->replacement = vr_tok_utf8_dec((const unsigned char *)d, &l);
    }
  } else if (!strcmp(type, "Sequence")) {
    p->type = VR_TOK_PRE_SEQUENCE;
    const cJSON *arr, *e;
    rc = vr_tok_jlist(j, "pretokenizers", file, "pre_tokenizer", &arr, &p->sub, sizeof *p->sub, err, errlen);
    if (!rc) cJSON_ArrayForEach(e, arr) {
        if ((rc = vr_tok_pre_parse(e, file, &p->sub[p->nsub], err, errlen))) break;
        p->nsub++;
      }
  } else {
    vr_tok_seterr(err, errlen, "%s: pre_tokenizer %s is not supported (supported: ByteLevel Split Metaspace "
                  "BertPreTokenizer Digits Punctuation Whitespace WhitespaceSplit CharDelimiterSplit Sequence)",
                  file, type);
    rc = VR_ERR_UNSUPPORTED;
  }
  if (rc) {
    vr_tok_pre_free(p);
    return rc;
  }
  *out = p;
  return 0;
}
