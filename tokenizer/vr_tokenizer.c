/* vr_tokenizer.c: load, the added vocabulary, encode and decode (see vr_tokenizer.h).
 *
 * Added tokens are matched as HF's AddedVocabulary does: leftmost-longest over the token
 * contents (HF uses aho-corasick with MatchKind::LeftmostLongest; we walk a byte trie from each
 * position, which finds the same matches), first the normalized=false tokens on the raw text,
 * then the normalized=true ones (their contents normalized) on each normalized piece. A match
 * of a single_word token needs a non-word character (or the text's edge) on both sides; lstrip
 * / rstrip tokens take the whitespace before / after them into the match. */
#include "vr_tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "verl_reward/status.h"
#include "vr_tok_internal.h"

typedef struct added {
  char *content;
  size_t n;
  int32_t id;
  uint8_t special, lstrip, rstrip, single_word, normalized;
} added_t;

typedef struct trie_node {
  int32_t child, sibling; /* first child, next sibling; -1 none */
  int32_t term;           /* index into added, -1 none */
  unsigned char byte;
} trie_node_t;

typedef struct trie {
  trie_node_t *v;
  size_t n, cap;
  uint8_t first[256];
} trie_t;

typedef struct named_template {
  char *name, *text;
} named_template_t;

struct vr_tok {
  char *source;
  vr_tok_norm_t *norm;
  vr_tok_pre_t *pre;
  vr_tok_model_t model;
  vr_tok_post_t *post;
  vr_tok_dec_t *dec;
  added_t *added;
  size_t nadded;
  vr_tok_map_t added_by_content; /* content -> index */
  int32_t *added_by_id;          /* (added_id_n,) id -> index or -1 */
  size_t added_id_n;
  trie_t raw, normd;
  char *special_text[4];
  int32_t special_id[4];
  int clean_up_spaces;
  named_template_t *templates;
  size_t ntemplates;
  size_t vocab_size;
};

struct vr_tok_scratch {
  vr_tok_ctx_t c;
};

/* ---- small shared helpers ------------------------------------------------------------------ */

const char *vr_tok_jstr(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

int vr_tok_jbool(const cJSON *o, const char *key, int def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v || cJSON_IsNull(v)) return def;
  if (!cJSON_IsBool(v)) return -1;
  return cJSON_IsTrue(v);
}

int vr_tok_jdup(const cJSON *o, const char *key, char **out, size_t *n) {
  *out = NULL;
  *n = 0;
  const char *s = vr_tok_jstr(o, key);
  if (!s) return 0;
  *out = strdup(s);
  if (!*out) return VR_ERR_NOMEM;
  *n = strlen(s);
  return 0;
}

int vr_tok_jpattern(const cJSON *o, const char *file, const char *comp, vr_tok_re_t **out, char *err,
                    size_t errlen) {
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pattern");
  const char *s = p ? vr_tok_jstr(p, "String") : NULL;
  const char *r = p ? vr_tok_jstr(p, "Regex") : NULL;
  if (!s && !r) {
    vr_tok_seterr(err, errlen, "%s: %s: \"pattern\" is not {\"String\": ...} or {\"Regex\": ...}", file, comp);
    return VR_ERR_MODEL_FORMAT;
  }
  char e2[300] = "";
  int rc = vr_tok_re_compile(s ? s : r, strlen(s ? s : r), s != NULL, out, e2, sizeof e2);
  if (rc) vr_tok_seterr(err, errlen, "%s: %s: %s", file, comp, e2);
  return rc;
}

int vr_tok_pieces_push(vr_tok_pieces_t *p, uint32_t off, uint32_t len, int32_t id, uint8_t origin) {
  if (p->n == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 64;
    vr_tok_piece_t *v = realloc(p->v, cap * sizeof *v);
    if (!v) return VR_ERR_NOMEM;
    p->v = v;
    p->cap = cap;
  }
  p->v[p->n++] = (vr_tok_piece_t){off, len, id, origin};
  return 0;
}

int vr_tok_ids_push(vr_tok_ids_t *ids, int32_t id) {
  if (ids->n == ids->cap) {
    size_t cap = ids->cap ? ids->cap * 2 : 64;
    int32_t *v = realloc(ids->v, cap * sizeof *v);
    if (!v) return VR_ERR_NOMEM;
    ids->v = v;
    ids->cap = cap;
  }
  ids->v[ids->n++] = id;
  return 0;
}

int vr_tok_ctx_init(vr_tok_ctx_t *c) {
  memset(c, 0, sizeof *c);
  c->re = vr_tok_re_scratch_new();
  return c->re ? 0 : VR_ERR_NOMEM;
}

void vr_tok_ctx_free(vr_tok_ctx_t *c) {
  vr_tok_re_scratch_free(c->re);
  vr_tok_buf_free(&c->arena);
  vr_tok_buf_free(&c->tmp);
  vr_tok_buf_free(&c->tmp2);
  free(c->a.v);
  free(c->b.v);
  free(c->sym);
  free(c->heap);
  free(c->lat);
  memset(c, 0, sizeof *c);
}

vr_tok_scratch_t *vr_tok_scratch_new(void) {
  vr_tok_scratch_t *s = malloc(sizeof *s);
  if (!s) return NULL;
  if (vr_tok_ctx_init(&s->c)) {
    free(s);
    return NULL;
  }
  return s;
}

void vr_tok_scratch_free(vr_tok_scratch_t *sc) {
  if (!sc) return;
  vr_tok_ctx_free(&sc->c);
  free(sc);
}

/* ---- trie of added tokens ---------------------------------------------------------------- */

static int trie_node(trie_t *t, unsigned char b) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 256;
    trie_node_t *v = realloc(t->v, cap * sizeof *v);
    if (!v) return -1;
    t->v = v;
    t->cap = cap;
  }
  t->v[t->n] = (trie_node_t){-1, -1, -1, b};
  return (int)t->n++;
}

static int trie_add(trie_t *t, const char *s, size_t n, int32_t term) {
  if (!n) return 0;
  if (!t->n && trie_node(t, 0) < 0) return VR_ERR_NOMEM;
  int32_t cur = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char b = (unsigned char)s[i];
    int32_t ch = t->v[cur].child;
    while (ch >= 0 && t->v[ch].byte != b) ch = t->v[ch].sibling;
    if (ch < 0) {
      int nn = trie_node(t, b);
      if (nn < 0) return VR_ERR_NOMEM;
      ch = nn;
      t->v[ch].sibling = t->v[cur].child;
      t->v[cur].child = ch;
    }
    cur = ch;
  }
  if (t->v[cur].term < 0) t->v[cur].term = term; /* the same content twice: the first wins */
  t->first[(unsigned char)s[0]] = 1;
  return 0;
}

/* Longest token starting at s[i]: its added index and end, or -1. */
static int32_t trie_longest(const trie_t *t, const char *s, size_t n, size_t i, size_t *end) {
  if (!t->n || !t->first[(unsigned char)s[i]]) return -1;
  int32_t cur = 0, best = -1;
  for (size_t k = i; k < n; k++) {
    unsigned char b = (unsigned char)s[k];
    int32_t ch = t->v[cur].child;
    while (ch >= 0 && t->v[ch].byte != b) ch = t->v[ch].sibling;
    if (ch < 0) break;
    cur = ch;
    if (t->v[cur].term >= 0) {
      best = t->v[cur].term;
      *end = k + 1;
    }
  }
  return best;
}

static int is_word_char(uint32_t c) { return vr_tok_is_alphanumeric(c) || c == '_'; }

static uint32_t last_cp(const char *s, size_t n) {
  size_t k = n - 1, l;
  while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
  return vr_tok_utf8_dec((const unsigned char *)s + k, &l);
}

/* HF find_matches + split_with_indices over s[0..n) (in c->arena at off); pushes pieces into out.
 * origin: s starts the original input. */
static int split_added(const vr_tok_t *tok, const trie_t *t, vr_tok_ctx_t *c, uint32_t off, uint32_t n,
                       uint8_t origin, vr_tok_pieces_t *out) {
  const char *s = c->arena.p + off;
  size_t start_off = 0;
  int rc = 0;
  for (size_t i = 0; i < n && !rc;) {
    size_t end = 0;
    int32_t ai = trie_longest(t, s, n, i, &end);
    if (ai < 0) {
      i++;
      continue;
    }
    const added_t *a = &tok->added[ai];
    size_t ms = i, me = end;
    if (a->single_word) {
      size_t l;
      int sb = ms == 0 || !is_word_char(last_cp(s, ms));
      int se = me == n || !is_word_char(vr_tok_utf8_dec((const unsigned char *)s + me, &l));
      if (!sb || !se) {
        i = end; /* HF skips this match; the automaton goes on after it */
        continue;
      }
    }
    if (a->lstrip) {
      size_t k = ms;
      while (k > 0) {
        size_t p = k - 1;
        while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
        size_t l;
        if (!vr_tok_is_whitespace(vr_tok_utf8_dec((const unsigned char *)s + p, &l))) break;
        k = p;
      }
      ms = k > start_off ? k : start_off;
    }
    if (a->rstrip) {
      while (me < n) {
        size_t l;
        if (!vr_tok_is_whitespace(vr_tok_utf8_dec((const unsigned char *)s + me, &l))) break;
        me += l;
      }
    }
    if (start_off < ms) rc = vr_tok_pieces_push(out, off + (uint32_t)start_off, (uint32_t)(ms - start_off), -1,
                                                (uint8_t)(origin && start_off == 0));
    if (!rc) rc = vr_tok_pieces_push(out, off + (uint32_t)ms, (uint32_t)(me - ms), a->id, 0);
    start_off = me;
    i = end; /* the automaton resumes after the match it reported */
  }
  if (!rc && start_off < n)
    rc = vr_tok_pieces_push(out, off + (uint32_t)start_off, (uint32_t)(n - start_off), -1,
                            (uint8_t)(origin && start_off == 0));
  return rc;
}

/* ---- encode -------------------------------------------------------------------------------- */

static int encode_ctx(const vr_tok_t *tok, vr_tok_ctx_t *c, const char *text, size_t len, int add_special,
                      vr_tok_ids_t *ids, char *err, size_t errlen) {
  size_t bad = vr_tok_utf8_check(text, len);
  if (bad != len) {
    vr_tok_seterr(err, errlen, "text is not valid UTF-8 (byte %zu: 0x%02X)", bad, (unsigned char)text[bad]);
    return VR_ERR_INVAL;
  }
  if (len > UINT32_MAX / 8) {
    vr_tok_seterr(err, errlen, "text of %zu bytes is too long (at most %u)", len, UINT32_MAX / 8);
    return VR_ERR_INVAL;
  }
  c->arena.n = 0;
  c->a.n = c->b.n = 0;
  int rc = vr_tok_buf_put(&c->arena, text, len);
  if (rc) return rc;
  /* 1. non-normalized added tokens on the raw text */
  if (len) rc = split_added(tok, &tok->raw, c, 0, (uint32_t)len, 1, &c->b);
  /* 2. normalize the rest, then the normalized added tokens */
  for (size_t i = 0; i < c->b.n && !rc; i++) {
    vr_tok_piece_t pc = c->b.v[i];
    if (pc.id >= 0) {
      rc = vr_tok_pieces_push(&c->a, pc.off, pc.len, pc.id, 0);
      continue;
    }
    uint32_t off = pc.off, n = pc.len;
    if (tok->norm) {
      c->tmp2.n = 0;
      vr_tok_buf_t nb = {0};
      rc = vr_tok_norm_apply(tok->norm, c, c->arena.p + pc.off, pc.len, &nb);
      if (!rc && nb.n > UINT32_MAX / 8) rc = VR_ERR_INVAL;
      off = (uint32_t)c->arena.n;
      n = (uint32_t)nb.n;
      if (!rc) rc = vr_tok_buf_put(&c->arena, nb.p ? nb.p : "", nb.n);
      vr_tok_buf_free(&nb);
      if (rc) break;
    }
    if (n) rc = split_added(tok, &tok->normd, c, off, n, pc.origin, &c->a);
  }
  /* 3. pre-tokenize, 4. model */
  if (!rc && tok->pre) rc = vr_tok_pre_apply(tok->pre, c);
  for (size_t i = 0; i < c->a.n && !rc; i++) {
    vr_tok_piece_t pc = c->a.v[i];
    if (pc.id >= 0) rc = vr_tok_ids_push(ids, pc.id);
    else if (pc.len) rc = vr_tok_model_encode(&tok->model, c, c->arena.p + pc.off, pc.len, ids, err, errlen);
  }
  /* 5. post-process */
  if (!rc && add_special && tok->post) rc = vr_tok_post_apply(tok->post, ids);
  if (rc == VR_ERR_NOMEM) vr_tok_seterr(err, errlen, "out of memory");
  else if (rc == VR_ERR_INTERNAL) vr_tok_seterr(err, errlen, "regex match failed (PCRE2 limit)");
  return rc;
}

int vr_tok_encode_with(const vr_tok_t *tok, vr_tok_scratch_t *sc, const char *text, size_t len,
                       int add_special_tokens, int32_t **ids, size_t *n, char *err, size_t errlen) {
  vr_tok_ids_t v = {0};
  int rc = encode_ctx(tok, &sc->c, text ? text : "", text ? len : 0, add_special_tokens, &v, err, errlen);
  if (rc) {
    free(v.v);
    return rc;
  }
  *ids = v.v;
  *n = v.n;
  return 0;
}

int vr_tok_encode(const vr_tok_t *tok, const char *text, size_t len, int add_special_tokens, int32_t **ids,
                  size_t *n, char *err, size_t errlen) {
  vr_tok_scratch_t *sc = vr_tok_scratch_new();
  if (!sc) {
    vr_tok_seterr(err, errlen, "out of memory");
    return VR_ERR_NOMEM;
  }
  int rc = vr_tok_encode_with(tok, sc, text, len, add_special_tokens, ids, n, err, errlen);
  vr_tok_scratch_free(sc);
  return rc;
}

/* ---- decode -------------------------------------------------------------------------------- */

const char *vr_tok_id_to_token(const vr_tok_t *tok, int32_t id, size_t *len) {
  if (id >= 0 && (size_t)id < tok->added_id_n && tok->added_by_id[id] >= 0) {
    const added_t *a = &tok->added[tok->added_by_id[id]];
    *len = a->n;
    return a->content;
  }
  return vr_tok_model_token(&tok->model, id, len);
}

int vr_tok_is_special(const vr_tok_t *tok, int32_t id) {
  return id >= 0 && (size_t)id < tok->added_id_n && tok->added_by_id[id] >= 0 &&
         tok->added[tok->added_by_id[id]].special;
}

int vr_tok_decode(const vr_tok_t *tok, const int32_t *ids, size_t n, int skip_special_tokens, char **text,
                  size_t *len, char *err, size_t errlen) {
  vr_tok_strs_t toks = {0};
  vr_tok_ctx_t c;
  int rc = vr_tok_ctx_init(&c);
  for (size_t i = 0; i < n && !rc; i++) {
    size_t tl;
    const char *t = vr_tok_id_to_token(tok, ids[i], &tl);
    if (!t) {
      vr_tok_seterr(err, errlen, "id %d (position %zu) is not in the vocabulary of %zu", ids[i], i, tok->vocab_size);
      rc = VR_ERR_TOKEN_RANGE;
      break;
    }
    if (skip_special_tokens && vr_tok_is_special(tok, ids[i])) continue;
    rc = vr_tok_strs_push(&toks, t, tl);
  }
  if (!rc && tok->dec) rc = vr_tok_dec_apply(tok->dec, &c, &toks);
  vr_tok_buf_t out = {0};
  for (size_t i = 0; i < toks.n && !rc; i++) {
    if (!tok->dec && i && (rc = vr_tok_buf_putc(&out, ' '))) break; /* no decoder: tokens joined by spaces */
    rc = vr_tok_buf_put(&out, toks.buf.p + toks.off[i], toks.len[i]);
  }
  if (!rc) rc = vr_tok_buf_reserve(&out, 1);
  if (!rc && tok->clean_up_spaces) {
    vr_tok_buf_t cl = {0};
    rc = vr_tok_cleanup(&cl, out.p, out.n, 0);
    if (!rc) rc = vr_tok_buf_reserve(&cl, 1);
    vr_tok_buf_free(&out);
    out = cl;
  }
  vr_tok_strs_free(&toks);
  vr_tok_ctx_free(&c);
  if (rc) {
    if (rc == VR_ERR_NOMEM) vr_tok_seterr(err, errlen, "out of memory");
    vr_tok_buf_free(&out);
    return rc;
  }
  out.p[out.n] = 0;
  *text = out.p;
  *len = out.n;
  return 0;
}

/* ---- load -------------------------------------------------------------------------------- */

static char *read_file(const char *path, size_t *n, int *missing) {
  *missing = 0;
  FILE *f = fopen(path, "rb");
  if (!f) {
    *missing = errno == ENOENT;
    return NULL;
  }
  struct stat st;
  char *buf = NULL;
  if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 0 && st.st_size < (1ll << 31)) {
    buf = malloc((size_t)st.st_size + 1);
    if (buf && fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
      free(buf);
      buf = NULL;
    }
    if (buf) {
      buf[st.st_size] = 0;
      *n = (size_t)st.st_size;
    }
  }
  fclose(f);
  return buf;
}

void vr_tok_free(vr_tok_t *tok) {
  if (!tok) return;
  free(tok->source);
  vr_tok_norm_free(tok->norm);
  vr_tok_pre_free(tok->pre);
  vr_tok_model_free(&tok->model);
  vr_tok_post_free(tok->post);
  vr_tok_dec_free(tok->dec);
  for (size_t i = 0; i < tok->nadded; i++) free(tok->added[i].content);
  free(tok->added);
  vr_tok_map_free(&tok->added_by_content);
  free(tok->added_by_id);
  free(tok->raw.v);
  free(tok->normd.v);
  for (int i = 0; i < 4; i++) free(tok->special_text[i]);
  for (size_t i = 0; i < tok->ntemplates; i++) {
    free(tok->templates[i].name);
    free(tok->templates[i].text);
  }
  free(tok->templates);
  free(tok);
}

static int add_token(vr_tok_t *tok, const char *content, int32_t id, int special, int lstrip, int rstrip,
                     int single_word, int normalized) {
  int found;
  vr_tok_map_get(&tok->added_by_content, content, strlen(content), &found);
  for (size_t i = 0; i < tok->nadded; i++)
    if (tok->added[i].id == id) return 0; /* already there (tokenizer.json wins over the config) */
  added_t *v = realloc(tok->added, (tok->nadded + 1) * sizeof *v);
  if (!v) return VR_ERR_NOMEM;
  tok->added = v;
  added_t *a = &v[tok->nadded];
  a->content = strdup(content);
  if (!a->content) return VR_ERR_NOMEM;
  a->n = strlen(content);
  a->id = id;
  a->special = (uint8_t)special;
  a->lstrip = (uint8_t)lstrip;
  a->rstrip = (uint8_t)rstrip;
  a->single_word = (uint8_t)single_word;
  a->normalized = (uint8_t)normalized;
  if (!found && vr_tok_map_put(&tok->added_by_content, content, a->n, (int32_t)tok->nadded)) return VR_ERR_NOMEM;
  tok->nadded++;
  return 0;
}

/* One AddedToken object {id?, content, single_word, lstrip, rstrip, normalized, special}. */
static int parse_added_obj(vr_tok_t *tok, const cJSON *e, int32_t id, const char *file, const char *where, char *err,
                           size_t errlen) {
  const char *content = vr_tok_jstr(e, "content");
  int special = vr_tok_jbool(e, "special", 0);
  int lstrip = vr_tok_jbool(e, "lstrip", 0), rstrip = vr_tok_jbool(e, "rstrip", 0);
  int single = vr_tok_jbool(e, "single_word", 0);
  int normalized = vr_tok_jbool(e, "normalized", !special);
  if (!content || special < 0 || lstrip < 0 || rstrip < 0 || single < 0 || normalized < 0) {
    vr_tok_seterr(err, errlen, "%s: %s: token id %d needs a string content and boolean flags", file, where, id);
    return VR_ERR_MODEL_FORMAT;
  }
  if (vr_tok_utf8_check(content, strlen(content)) != strlen(content)) {
    vr_tok_seterr(err, errlen, "%s: %s: token id %d is not valid UTF-8", file, where, id);
    return VR_ERR_MODEL_FORMAT;
  }
  return add_token(tok, content, id, special, lstrip, rstrip, single, normalized);
}

static int parse_tokenizer_json(vr_tok_t *tok, const char *json, size_t len, const char *file, char *err,
                                size_t errlen) {
  /* HF reads the file with serde_json, which takes UTF-8 only; every string below is then UTF-8 */
  size_t bad = vr_tok_utf8_check(json, len);
  if (bad != len) {
    vr_tok_seterr(err, errlen, "%s: not a tokenizer: not valid UTF-8 (byte %zu)", file, bad);
    return VR_ERR_MODEL_FORMAT;
  }
  cJSON *root = cJSON_ParseWithLength(json, len);
  if (!root || !cJSON_IsObject(root)) {
    const char *at = cJSON_GetErrorPtr();
    vr_tok_seterr(err, errlen, "%s: not a tokenizer: not a JSON object (parse error near byte %zu)", file,
                  at && at >= json && at <= json + len ? (size_t)(at - json) : (size_t)0);
    cJSON_Delete(root);
    return VR_ERR_MODEL_FORMAT;
  }
  int rc = 0;
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  if (!cJSON_IsObject(model)) {
    vr_tok_seterr(err, errlen, "%s: not a tokenizer: no \"model\" object", file);
    rc = VR_ERR_MODEL_FORMAT;
  }
  if (!rc) rc = vr_tok_model_parse(model, file, &tok->model, err, errlen);
  const cJSON *x;
  if (!rc && (x = cJSON_GetObjectItemCaseSensitive(root, "normalizer")) && !cJSON_IsNull(x))
    rc = vr_tok_norm_parse(x, file, &tok->norm, err, errlen);
  if (!rc && (x = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer")) && !cJSON_IsNull(x))
    rc = vr_tok_pre_parse(x, file, &tok->pre, err, errlen);
  if (!rc && (x = cJSON_GetObjectItemCaseSensitive(root, "post_processor")) && !cJSON_IsNull(x))
    rc = vr_tok_post_parse(x, file, &tok->post, err, errlen);
  if (!rc && (x = cJSON_GetObjectItemCaseSensitive(root, "decoder")) && !cJSON_IsNull(x))
    rc = vr_tok_dec_parse(x, file, &tok->dec, err, errlen);
  if (!rc && (x = cJSON_GetObjectItemCaseSensitive(root, "truncation")) && !cJSON_IsNull(x)) {
    vr_tok_seterr(err, errlen, "%s: truncation is set; not supported (transformers leaves it off unless asked)", file);
    rc = VR_ERR_UNSUPPORTED;
  }
  if (!rc && (x = cJSON_GetObjectItemCaseSensitive(root, "padding")) && !cJSON_IsNull(x)) {
    vr_tok_seterr(err, errlen, "%s: padding is set; not supported", file);
    rc = VR_ERR_UNSUPPORTED;
  }
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  if (!rc && added && !cJSON_IsArray(added)) {
    vr_tok_seterr(err, errlen, "%s: added_tokens is not a list", file);
    rc = VR_ERR_MODEL_FORMAT;
  }
  const cJSON *e;
  if (!rc && added) {
    cJSON_ArrayForEach(e, added) {
      const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
      if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 16777216.0) {
        vr_tok_seterr(err, errlen, "%s: added_tokens: an entry has no integer id", file);
        rc = VR_ERR_MODEL_FORMAT;
        break;
      }
      if ((rc = parse_added_obj(tok, e, (int32_t)id->valuedouble, file, "added_tokens", err, errlen))) break;
    }
  }
  cJSON_Delete(root);
  return rc;
}

static int set_special(vr_tok_t *tok, int which, const cJSON *v) {
  if (tok->special_text[which]) return 0;
  const char *s = cJSON_IsString(v) ? v->valuestring : cJSON_IsObject(v) ? vr_tok_jstr(v, "content") : NULL;
  if (!s) return 0;
  tok->special_text[which] = strdup(s);
  return tok->special_text[which] ? 0 : VR_ERR_NOMEM;
}

static const char *const SPECIAL_KEYS[4] = {"bos_token", "eos_token", "pad_token", "unk_token"};

/* Special tokens the config names (and class defaults) become special added tokens when the
 * model vocab holds them, as transformers' from_pretrained does. */
static int add_named_special(vr_tok_t *tok, const cJSON *v) {
  const char *s = cJSON_IsString(v) ? v->valuestring : cJSON_IsObject(v) ? vr_tok_jstr(v, "content") : NULL;
  if (!s) return 0;
  int found;
  vr_tok_map_get(&tok->added_by_content, s, strlen(s), &found);
  if (found) return 0;
  int32_t id = vr_tok_map_get(&tok->model.vocab, s, strlen(s), NULL);
  if (id < 0) return 0;
  return add_token(tok, s, id, 1, 0, 0, 0, 0);
}

/* transformers 5 rebuilds parts of the pipeline in some tokenizer classes instead of taking
 * tokenizer.json as it is (seen with the fixtures of tests/fixtures/tokenizers: the effective pipeline that
 * transformers' backend_tokenizer reports). We apply the same, keyed on tokenizer_class:
 *   LlamaTokenizer(Fast): no normalizer; pre_tokenizer Metaspace("▁", prepend_scheme, split=false)
 *     with prepend_scheme "never" when add_prefix_space is false, else "first" when legacy is
 *     false, else "always" (legacy absent or null counts as true)
 *   GemmaTokenizer(Fast): mask_token "<mask>" by default (a special added token when in vocab)
 * Every class: bos/eos/unk/pad/mask/cls/sep and additional_special_tokens named in the config
 * are special added tokens. Other classes (PreTrainedTokenizerFast, TokenizersBackend,
 * Qwen2Tokenizer, ...) use tokenizer.json's pipeline unchanged. */
static int apply_class_rules(vr_tok_t *tok, const cJSON *root, const char *file, char *err, size_t errlen) {
  const char *cls = vr_tok_jstr(root, "tokenizer_class");
  int rc = 0;
  if (cls && (!strcmp(cls, "LlamaTokenizer") || !strcmp(cls, "LlamaTokenizerFast"))) {
    int aps = vr_tok_jbool(root, "add_prefix_space", 1), legacy = vr_tok_jbool(root, "legacy", 1);
    if (aps < 0 || legacy < 0) {
      vr_tok_seterr(err, errlen, "%s: add_prefix_space / legacy is not a boolean", file);
      return VR_ERR_MODEL_FORMAT;
    }
    vr_tok_pre_t *p = calloc(1, sizeof *p);
    if (!p) return VR_ERR_NOMEM;
    p->type = VR_TOK_PRE_METASPACE;
    p->replacement = 0x2581;
    p->prepend_scheme = !aps ? VR_TOK_PREPEND_NEVER : !legacy ? VR_TOK_PREPEND_FIRST : VR_TOK_PREPEND_ALWAYS;
    p->split = 0;
    vr_tok_norm_free(tok->norm);
    tok->norm = NULL;
    vr_tok_pre_free(tok->pre);
    tok->pre = p;
  }
  if (cls && (!strcmp(cls, "GemmaTokenizer") || !strcmp(cls, "GemmaTokenizerFast")) &&
      !cJSON_GetObjectItemCaseSensitive(root, "mask_token")) {
    cJSON *m = cJSON_CreateString("<mask>");
    rc = m ? add_named_special(tok, m) : VR_ERR_NOMEM;
    cJSON_Delete(m);
  }
  static const char *const keys[] = {"bos_token", "eos_token", "unk_token", "pad_token", "mask_token", "cls_token",
                                     "sep_token"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0] && !rc; i++)
    rc = add_named_special(tok, cJSON_GetObjectItemCaseSensitive(root, keys[i]));
  const cJSON *extra = cJSON_GetObjectItemCaseSensitive(root, "additional_special_tokens"), *e;
  if (cJSON_IsArray(extra)) cJSON_ArrayForEach(e, extra) {
      if (rc) break;
      rc = add_named_special(tok, e);
    }
  return rc;
}

static int parse_config(vr_tok_t *tok, const char *json, size_t len, const char *file, char *err, size_t errlen) {
  cJSON *root = vr_tok_utf8_check(json, len) == len ? cJSON_ParseWithLength(json, len) : NULL;
  if (!root || !cJSON_IsObject(root)) {
    vr_tok_seterr(err, errlen, "%s: not a JSON object", file);
    cJSON_Delete(root);
    return VR_ERR_MODEL_FORMAT;
  }
  int rc = 0;
  for (int i = 0; i < 4 && !rc; i++) rc = set_special(tok, i, cJSON_GetObjectItemCaseSensitive(root, SPECIAL_KEYS[i]));
  int cu = vr_tok_jbool(root, "clean_up_tokenization_spaces", 0);
  if (cu < 0) {
    vr_tok_seterr(err, errlen, "%s: clean_up_tokenization_spaces is not a boolean", file);
    rc = VR_ERR_MODEL_FORMAT;
  }
  /* transformers 5 ignores the flag for BPE models ("destructive for BPE", it warns) */
  tok->clean_up_spaces = cu > 0 && tok->model.type != VR_TOK_MODEL_BPE;
  /* added_tokens_decoder: tokens transformers adds when tokenizer.json lacks them */
  const cJSON *atd = cJSON_GetObjectItemCaseSensitive(root, "added_tokens_decoder");
  const cJSON *e;
  if (!rc && cJSON_IsObject(atd)) {
    cJSON_ArrayForEach(e, atd) {
      char *end;
      long id = strtol(e->string, &end, 10);
      if (*end || id < 0 || id > 16777216 || !cJSON_IsObject(e)) {
        vr_tok_seterr(err, errlen, "%s: added_tokens_decoder: key '%.40s' is not a token id", file, e->string);
        rc = VR_ERR_MODEL_FORMAT;
        break;
      }
      if ((rc = parse_added_obj(tok, e, (int32_t)id, file, "added_tokens_decoder", err, errlen))) break;
    }
  }
  if (!rc) rc = apply_class_rules(tok, root, file, err, errlen);
  const cJSON *ct = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
  if (!rc && cJSON_IsString(ct)) {
    tok->templates = calloc(1, sizeof *tok->templates);
    if (!tok->templates || !(tok->templates[0].name = strdup("default")) ||
        !(tok->templates[0].text = strdup(ct->valuestring)))
      rc = VR_ERR_NOMEM;
    else
      tok->ntemplates = 1;
  } else if (!rc && cJSON_IsArray(ct)) {
    size_t k = (size_t)cJSON_GetArraySize(ct);
    tok->templates = calloc(k ? k : 1, sizeof *tok->templates);
    if (!tok->templates) rc = VR_ERR_NOMEM;
    cJSON_ArrayForEach(e, ct) {
      if (rc) break;
      const char *nm = vr_tok_jstr(e, "name"), *tx = vr_tok_jstr(e, "template");
      if (!nm || !tx) {
        vr_tok_seterr(err, errlen, "%s: chat_template: a list entry is not {name, template}", file);
        rc = VR_ERR_MODEL_FORMAT;
        break;
      }
      named_template_t *t = &tok->templates[tok->ntemplates];
      if (!(t->name = strdup(nm)) || !(t->text = strdup(tx))) rc = VR_ERR_NOMEM;
      tok->ntemplates++;
    }
  } else if (!rc && ct && !cJSON_IsNull(ct)) {
    vr_tok_seterr(err, errlen, "%s: chat_template is neither a string nor a list of {name, template}", file);
    rc = VR_ERR_MODEL_FORMAT;
  }
  cJSON_Delete(root);
  return rc;
}

static int build_tables(vr_tok_t *tok, const char *file, char *err, size_t errlen) {
  size_t maxid = tok->model.id_n;
  while (maxid && tok->model.id_entry[maxid - 1] == UINT32_MAX) maxid--;
  size_t an = 0;
  for (size_t i = 0; i < tok->nadded; i++)
    if ((size_t)tok->added[i].id + 1 > an) an = (size_t)tok->added[i].id + 1;
  tok->vocab_size = an > maxid ? an : maxid;
  tok->added_id_n = an;
  tok->added_by_id = malloc((an ? an : 1) * sizeof *tok->added_by_id);
  if (!tok->added_by_id) return VR_ERR_NOMEM;
  for (size_t i = 0; i < an; i++) tok->added_by_id[i] = -1;
  vr_tok_ctx_t c;
  int rc = vr_tok_ctx_init(&c);
  for (size_t i = 0; i < tok->nadded && !rc; i++) {
    added_t *a = &tok->added[i];
    if (tok->added_by_id[a->id] < 0) tok->added_by_id[a->id] = (int32_t)i;
    if (!a->normalized || !tok->norm) {
      rc = trie_add(a->normalized ? &tok->normd : &tok->raw, a->content, a->n, (int32_t)i);
    } else {
      vr_tok_buf_t nb = {0};
      rc = vr_tok_norm_apply(tok->norm, &c, a->content, a->n, &nb);
      if (!rc) rc = trie_add(&tok->normd, nb.p ? nb.p : "", nb.n, (int32_t)i);
      vr_tok_buf_free(&nb);
    }
  }
  vr_tok_ctx_free(&c);
  if (rc) return rc;
  for (int i = 0; i < 4; i++) {
    tok->special_id[i] = -1;
    if (tok->special_text[i])
      tok->special_id[i] = vr_tok_token_to_id(tok, tok->special_text[i], strlen(tok->special_text[i]));
  }
  (void)file;
  (void)err;
  (void)errlen;
  return 0;
}

int vr_tok_load_json(const char *json, size_t len, const char *name, vr_tok_t **out, char *err, size_t errlen) {
  vr_tok_t *tok = calloc(1, sizeof *tok);
  if (!tok || !(tok->source = strdup(name ? name : "tokenizer.json"))) {
    free(tok);
    vr_tok_seterr(err, errlen, "out of memory");
    return VR_ERR_NOMEM;
  }
  int rc = parse_tokenizer_json(tok, json, len, tok->source, err, errlen);
  if (!rc) rc = build_tables(tok, tok->source, err, errlen);
  if (rc) {
    if (rc == VR_ERR_NOMEM) vr_tok_seterr(err, errlen, "%s: out of memory", tok->source);
    vr_tok_free(tok);
    return rc;
  }
  *out = tok;
  return 0;
}

int vr_tok_load(const char *dir, vr_tok_t **out, char *err, size_t errlen) {
  char path[4096];
  size_t n = 0;
  int missing;
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  char *json = read_file(path, &n, &missing);
  if (!json) {
    vr_tok_seterr(err, errlen, "%s: %s. HINT: --tokenizer names a model directory holding tokenizer.json "
                  "(Hugging Face fast tokenizer)", path, missing ? "no such file" : "cannot be read");
    return VR_ERR_IO;
  }
  vr_tok_t *tok = calloc(1, sizeof *tok);
  if (!tok || !(tok->source = strdup(dir))) {
    free(tok);
    free(json);
    return VR_ERR_NOMEM;
  }
  int rc = parse_tokenizer_json(tok, json, n, path, err, errlen);
  free(json);
  /* tokenizer_config.json, then special_tokens_map.json for what the config leaves unset */
  const char *extra[2] = {"tokenizer_config.json", "special_tokens_map.json"};
  for (int k = 0; k < 2 && !rc; k++) {
    snprintf(path, sizeof path, "%s/%s", dir, extra[k]);
    char *cj = read_file(path, &n, &missing);
    if (!cj) {
      if (missing) continue;
      vr_tok_seterr(err, errlen, "%s: cannot be read", path);
      rc = VR_ERR_IO;
      break;
    }
    if (k == 0) {
      rc = parse_config(tok, cj, n, path, err, errlen);
    } else {
      cJSON *root = vr_tok_utf8_check(cj, n) == n ? cJSON_ParseWithLength(cj, n) : NULL;
      if (!cJSON_IsObject(root)) {
        vr_tok_seterr(err, errlen, "%s: not a JSON object", path);
        rc = VR_ERR_MODEL_FORMAT;
      }
      for (int i = 0; i < 4 && !rc; i++) rc = set_special(tok, i, cJSON_GetObjectItemCaseSensitive(root, SPECIAL_KEYS[i]));
      cJSON_Delete(root);
    }
    free(cj);
  }
  if (!rc) rc = build_tables(tok, dir, err, errlen);
  if (rc) {
    if (rc == VR_ERR_NOMEM) vr_tok_seterr(err, errlen, "%s: out of memory", dir);
    vr_tok_free(tok);
    return rc;
  }
  *out = tok;
  return 0;
}

/* ---- accessors ---------------------------------------------------------------------------- */

size_t vr_tok_vocab_size(const vr_tok_t *tok) { return tok->vocab_size; }

int32_t vr_tok_token_to_id(const vr_tok_t *tok, const char *token, size_t len) {
  int found;
  int32_t i = vr_tok_map_get(&tok->added_by_content, token, len, &found);
  if (found) return tok->added[i].id;
  return vr_tok_map_get(&tok->model.vocab, token, len, NULL);
}

const char *vr_tok_special_token(const vr_tok_t *tok, vr_tok_special_t which, int32_t *id) {
  if ((unsigned)which > 3) {
    if (id) *id = -1;
    return NULL;
  }
  if (id) *id = tok->special_id[which];
  return tok->special_text[which];
}

static void affixes(const vr_tok_post_t *p, const int32_t **pre, size_t *npre, const int32_t **post, size_t *npost) {
  if (!p) return;
  if (p->type == VR_TOK_POST_SEQUENCE) {
    for (size_t i = 0; i < p->nsub; i++) affixes(p->sub[i], pre, npre, post, npost);
    return;
  }
  if (p->npre || p->npost) {
    *pre = p->pre;
    *npre = p->npre;
    *post = p->post;
    *npost = p->npost;
  }
}

void vr_tok_special_affixes(const vr_tok_t *tok, const int32_t **pre, size_t *npre, const int32_t **post,
                            size_t *npost) {
  *pre = *post = NULL;
  *npre = *npost = 0;
  affixes(tok->post, pre, npre, post, npost);
}

int vr_tok_adds_bos(const vr_tok_t *tok) {
  const int32_t *pre, *post;
  size_t npre, npost;
  vr_tok_special_affixes(tok, &pre, &npre, &post, &npost);
  return npre > 0 && tok->special_id[VR_TOK_BOS] >= 0 && pre[0] == tok->special_id[VR_TOK_BOS];
}

const char *vr_tok_chat_template(const vr_tok_t *tok, const char *name) {
  if (!name) name = "default";
  for (size_t i = 0; i < tok->ntemplates; i++)
    if (!strcmp(tok->templates[i].name, name)) return tok->templates[i].text;
  return NULL;
}

size_t vr_tok_chat_template_count(const vr_tok_t *tok) { return tok->ntemplates; }

const char *vr_tok_chat_template_at(const vr_tok_t *tok, size_t i, const char **text) {
  if (i >= tok->ntemplates) return NULL;
  if (text) *text = tok->templates[i].text;
  return tok->templates[i].name;
}

const char *vr_tok_source(const vr_tok_t *tok) { return tok->source; }
