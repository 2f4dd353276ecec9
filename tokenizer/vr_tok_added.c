/* vr_tok_added.c: the added vocabulary (tokenizer.json added_tokens, the config's additions).
 *
 * Added tokens are matched as HF's AddedVocabulary does: leftmost-longest over the token
 * contents (HF uses aho-corasick with MatchKind::LeftmostLongest; we walk a byte trie from each
 * position, which finds the same matches), first the normalized=false tokens on the raw text,
 * then the normalized=true ones (their contents normalized) on each normalized piece. A match
 * of a single_word token needs a non-word character (or the text's edge) on both sides; lstrip
 * / rstrip tokens take the whitespace before / after them into the match. */
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_tok_internal.h"

/* ---- trie of added tokens ---------------------------------------------------------------- */

static int trie_node(vr_tok_trie_t *t, unsigned char b) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 256;
    vr_tok_trie_node_t *v = realloc(t->v, cap * sizeof *v);
    if (!v) return -1;
    t->v = v;
    t->cap = cap;
  }
  t->v[t->n] = (vr_tok_trie_node_t){-1, -1, -1, b};
  return (int)t->n++;
}

int vr_tok_trie_add(vr_tok_trie_t *t, const char *s, size_t n, int32_t term) {
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
static int32_t trie_longest(const vr_tok_trie_t *t, const char *s, size_t n, size_t i, size_t *end) {
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
int vr_tok_split_added(const vr_tok_t *tok, const vr_tok_trie_t *t, vr_tok_ctx_t *c, uint32_t off, uint32_t n,
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
    const vr_tok_added_t *a = &tok->added[ai];
    if (tok->split_special && a->special) {
      i = end; /* HF skips the match; the text is tokenized as any other */
      continue;
    }
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

int vr_tok_add_token(vr_tok_t *tok, const char *content, int32_t id, int special, int lstrip, int rstrip,
                     int single_word, int normalized) {
  int found;
  vr_tok_map_get(&tok->added_by_content, content, strlen(content), &found);
  for (size_t i = 0; i < tok->nadded; i++)
    if (tok->added[i].id == id) return 0; /* already there (tokenizer.json wins over the config) */
  vr_tok_added_t *v = realloc(tok->added, (tok->nadded + 1) * sizeof *v);
  if (!v) return VR_ERR_NOMEM;
  tok->added = v;
  vr_tok_added_t *a = &v[tok->nadded];
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
int vr_tok_parse_added_obj(vr_tok_t *tok, const cJSON *e, int32_t id, const char *file, const char *where, char *err,
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
  return vr_tok_add_token(tok, content, id, special, lstrip, rstrip, single, normalized);
}
