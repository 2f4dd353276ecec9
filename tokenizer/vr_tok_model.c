/* vr_tok_model.c: the models of tokenizer.json: BPE, WordPiece, Unigram, each as Hugging Face
 * tokenizers runs it on one pre-token.
 *
 * BPE is in vr_tok_bpe.c; this file holds the vocab, WordPiece, Unigram and the parsing.
 * WordPiece: greedy longest-match-first with the continuing_subword_prefix; a word longer than
 * max_input_chars_per_word characters, or one that does not split, is the unk token.
 * Unigram: Viterbi over all vocab pieces that start at each character, unk scored as
 * min_score - 10 for characters no piece covers; consecutive unks fuse; byte_fallback for
 * pieces not in the vocab. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_tok_internal.h"

/* ---- vocab ------------------------------------------------------------------------------- */

static int set_id(vr_tok_model_t *m, int32_t id, uint32_t entry) {
  if ((uint32_t)id >= m->id_n) {
    uint32_t n = m->id_n ? m->id_n : 1024;
    while (n <= (uint32_t)id) n *= 2;
    uint32_t *v = realloc(m->id_entry, n * sizeof *v);
    if (!v) return VR_ERR_NOMEM;
    for (uint32_t i = m->id_n; i < n; i++) v[i] = UINT32_MAX;
    m->id_entry = v;
    m->id_n = n;
  }
  m->id_entry[id] = entry;
  return 0;
}

static int vocab_add(vr_tok_model_t *m, const char *tok, size_t n, int32_t id) {
  int found;
  vr_tok_map_get(&m->vocab, tok, n, &found);
  if (vr_tok_map_put(&m->vocab, tok, n, id)) return VR_ERR_NOMEM;
  uint32_t entry = found ? UINT32_MAX : m->vocab.count - 1;
  if (found) { /* same token twice: the map keeps the last id; find its entry */
    for (uint32_t i = 0; i < m->vocab.count; i++) {
      size_t kn;
      const char *k = vr_tok_map_key(&m->vocab, i, &kn);
      if (kn == n && !memcmp(k, tok, n)) entry = i;
    }
  }
  return set_id(m, id, entry);
}

const char *vr_tok_model_token(const vr_tok_model_t *m, int32_t id, size_t *n) {
  if (id < 0 || (uint32_t)id >= m->id_n || m->id_entry[id] == UINT32_MAX) return NULL;
  return vr_tok_map_key(&m->vocab, m->id_entry[id], n);
}

/* ---- WordPiece ----------------------------------------------------------------------------- */

static int wordpiece_encode(const vr_tok_model_t *m, vr_tok_ctx_t *c, const char *s, size_t n, vr_tok_ids_t *out,
                            char *err, size_t errlen) {
  size_t chars = 0;
  for (size_t i = 0; i < n; i++) chars += ((unsigned char)s[i] & 0xC0) != 0x80;
  if (chars > m->max_input_chars) {
    if (m->unk_id < 0) goto no_unk;
    return vr_tok_ids_push(out, m->unk_id);
  }
  size_t first = out->n;
  size_t start = 0;
  while (start < n) {
    size_t end = n;
    int32_t id = -1;
    while (start < end) {
      vr_tok_buf_t *t = &c->tmp;
      t->n = 0;
      if ((start && vr_tok_buf_put(t, m->cont_prefix, m->cont_prefix_n)) || vr_tok_buf_put(t, s + start, end - start))
        return VR_ERR_NOMEM;
      id = vr_tok_vocab_id(m, t->p, t->n);
      if (id >= 0) break;
      end--;
      while (end > start && ((unsigned char)s[end] & 0xC0) == 0x80) end--;
    }
    if (id < 0) {
      out->n = first;
      if (m->unk_id < 0) goto no_unk;
      return vr_tok_ids_push(out, m->unk_id);
    }
    if (vr_tok_ids_push(out, id)) return VR_ERR_NOMEM;
    start = end;
  }
  return 0;
no_unk:
  vr_tok_seterr(err, errlen, "WordPiece: '%.*s' needs the unk token, which is not in the vocab", (int)(n > 40 ? 40 : n), s);
  return VR_ERR_INVAL;
}

/* ---- Unigram ------------------------------------------------------------------------------- */

typedef struct lnode {
  double score;
  int32_t start; /* -1: not reached */
  int32_t id;
} lnode_t;

static int push_piece_ids(const vr_tok_model_t *m, const char *s, size_t n, vr_tok_ids_t *out) {
  int32_t id = vr_tok_vocab_id(m, s, n);
  if (id >= 0) return vr_tok_ids_push(out, id);
  if (m->byte_fallback) {
    int all = 1;
    for (size_t k = 0; k < n; k++) all &= m->byte_id[(unsigned char)s[k]] >= 0;
    if (all) {
      for (size_t k = 0; k < n; k++)
        if (vr_tok_ids_push(out, m->byte_id[(unsigned char)s[k]])) return VR_ERR_NOMEM;
      return 0;
    }
  }
  return vr_tok_ids_push(out, m->unk_id);
}

static int unigram_encode(const vr_tok_model_t *m, vr_tok_ctx_t *c, const char *s, size_t n, vr_tok_ids_t *out,
                          char *err, size_t errlen) {
  if (!n) return 0;
  if (vr_tok_grow(&c->lat, &c->lat_cap, n + 1, sizeof(lnode_t))) return VR_ERR_NOMEM;
  lnode_t *best = c->lat;
  for (size_t i = 0; i <= n; i++) best[i] = (lnode_t){0.0, -1, -1};
  double unk_score = m->min_score - 10.0;
  const unsigned char *p = (const unsigned char *)s;
  for (size_t st = 0; st < n;) {
    double here = best[st].score;
    size_t mblen = vr_tok_utf8_len(p[st]);
    int single = 0;
    size_t maxl = n - st < m->max_piece ? n - st : m->max_piece;
    for (size_t l = 1; l <= maxl; l++) {
      int found;
      int32_t id = vr_tok_map_get(&m->prefixes, s + st, l, &found);
      if (!found) break;
      if (id < 0) continue;
      lnode_t *t = &best[st + l];
      double cand = m->scores[id] + here;
      if (t->start < 0 || cand > t->score) *t = (lnode_t){cand, (int32_t)st, id};
      if (l == mblen) single = 1;
    }
    if (!single) {
      if (m->unk_id < 0) {
        vr_tok_seterr(err, errlen, "Unigram: a character needs the unk token and the model has no unk_id");
        return VR_ERR_INVAL;
      }
      lnode_t *t = &best[st + mblen];
      double cand = unk_score + here;
      if (t->start < 0 || cand > t->score) *t = (lnode_t){cand, (int32_t)st, m->unk_id};
    }
    st += mblen;
  }
  /* backtrack: collect pieces end to start (as (start, end) pairs), fusing unks */
  size_t first = out->n;
  size_t end = n;
  size_t fuse_end = 0;
  int fusing = 0;
  /* pieces are pushed reversed as (start,end) in c->sym, then emitted forward */
  if (vr_tok_grow(&c->sym, &c->sym_cap, n + 1, sizeof(vr_tok_sym_t))) return VR_ERR_NOMEM;
  vr_tok_sym_t *pc = c->sym;
  size_t np = 0;
  while (end > 0) {
    lnode_t *nd = &best[end];
    size_t st = (size_t)nd->start;
    if (m->unk_id >= 0 && nd->id == m->unk_id) {
      if (!fusing) {
        fusing = 1;
        fuse_end = end;
      }
    } else {
      if (fusing) {
        pc[np++] = (vr_tok_sym_t){(int32_t)end, (int32_t)fuse_end, 0, 0};
        fusing = 0;
      }
      pc[np++] = (vr_tok_sym_t){(int32_t)st, (int32_t)end, 0, 0};
    }
    end = st;
  }
  if (fusing) pc[np++] = (vr_tok_sym_t){0, (int32_t)fuse_end, 0, 0};
  for (size_t i = np; i-- > 0;) {
    int rc = push_piece_ids(m, s + pc[i].id, (size_t)(pc[i].prev - pc[i].id), out);
    if (rc) {
      out->n = first;
      return rc;
    }
  }
  return 0;
}

int vr_tok_model_encode(const vr_tok_model_t *m, vr_tok_ctx_t *c, const char *s, size_t n, vr_tok_ids_t *out,
                        char *err, size_t errlen) {
  switch (m->type) {
  case VR_TOK_MODEL_BPE: return vr_tok_bpe_encode(m, c, s, n, out, err, errlen);
  case VR_TOK_MODEL_WORDPIECE: return wordpiece_encode(m, c, s, n, out, err, errlen);
  case VR_TOK_MODEL_UNIGRAM: return unigram_encode(m, c, s, n, out, err, errlen);
  }
  return VR_ERR_INTERNAL;
}

/* ---- parsing ------------------------------------------------------------------------------- */

void vr_tok_model_free(vr_tok_model_t *m) {
  vr_tok_map_free(&m->vocab);
  vr_tok_map_free(&m->prefixes);
  free(m->id_entry);
  free(m->mkeys);
  free(m->mrank);
  free(m->mnew);
  free(m->cont_prefix);
  free(m->eow_suffix);
  free(m->scores);
  memset(m, 0, sizeof *m);
}

int vr_tok_model_parse_vocab(const cJSON *v, const char *file, const char *comp, vr_tok_model_t *m, char *err,
                              size_t errlen) {
  if (!cJSON_IsObject(v)) {
    vr_tok_seterr(err, errlen, "%s: model %s: \"vocab\" is not an object of token -> id", file, comp);
    return VR_ERR_MODEL_FORMAT;
  }
  const cJSON *e;
  cJSON_ArrayForEach(e, v) {
    if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 16777216.0 ||
        e->valuedouble != floor(e->valuedouble)) {
      vr_tok_seterr(err, errlen, "%s: model %s: vocab entry '%.60s' has an id that is not an integer in [0, 2^24]",
                    file, comp, e->string);
      return VR_ERR_MODEL_FORMAT;
    }
    if (vocab_add(m, e->string, strlen(e->string), (int32_t)e->valuedouble)) return VR_ERR_NOMEM;
  }
  return 0;
}

static int fill_byte_ids(vr_tok_model_t *m) {
  for (int b = 0; b < 256; b++) {
    char t[8];
    snprintf(t, sizeof t, "<0x%02X>", b);
    m->byte_id[b] = vr_tok_vocab_id(m, t, 6);
  }
  return 0;
}

int vr_tok_model_parse_unk(const cJSON *j, const char *file, const char *comp, vr_tok_model_t *m, char *err, size_t errlen) {
  m->unk_id = -1;
  const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "unk_token");
  if (!u || cJSON_IsNull(u)) return 0;
  if (!cJSON_IsString(u)) {
    vr_tok_seterr(err, errlen, "%s: model %s: unk_token is not a string", file, comp);
    return VR_ERR_MODEL_FORMAT;
  }
  m->unk_id = vr_tok_vocab_id(m, u->valuestring, strlen(u->valuestring));
  if (m->unk_id < 0 && m->type == VR_TOK_MODEL_WORDPIECE) {
    vr_tok_seterr(err, errlen, "%s: model %s: unk_token '%.60s' is not in the vocab", file, comp, u->valuestring);
    return VR_ERR_MODEL_FORMAT;
  }
  return 0;
}

static int parse_wordpiece(const cJSON *j, const char *file, vr_tok_model_t *m, char *err, size_t errlen) {
  int rc = vr_tok_model_parse_vocab(cJSON_GetObjectItemCaseSensitive(j, "vocab"), file, "WordPiece", m, err, errlen);
  if (rc) return rc;
  if ((rc = vr_tok_model_parse_unk(j, file, "WordPiece", m, err, errlen))) return rc;
  if (vr_tok_jdup(j, "continuing_subword_prefix", &m->cont_prefix, &m->cont_prefix_n)) return VR_ERR_NOMEM;
  if (!m->cont_prefix) {
    m->cont_prefix = strdup("##");
    if (!m->cont_prefix) return VR_ERR_NOMEM;
    m->cont_prefix_n = 2;
  }
  m->max_input_chars = 100;
  const cJSON *mx = cJSON_GetObjectItemCaseSensitive(j, "max_input_chars_per_word");
  if (cJSON_IsNumber(mx) && mx->valuedouble >= 0) m->max_input_chars = (size_t)mx->valuedouble;
  return 0;
}

static int parse_unigram(const cJSON *j, const char *file, vr_tok_model_t *m, char *err, size_t errlen) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "vocab");
  if (!cJSON_IsArray(v)) {
    vr_tok_seterr(err, errlen, "%s: model Unigram: \"vocab\" is not a list of [piece, score]", file);
    return VR_ERR_MODEL_FORMAT;
  }
  size_t n = (size_t)cJSON_GetArraySize(v);
  m->scores = malloc((n ? n : 1) * sizeof *m->scores);
  if (!m->scores) return VR_ERR_NOMEM;
  m->min_score = INFINITY;
  int32_t id = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, v) {
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !cJSON_IsString(e->child) ||
        !cJSON_IsNumber(e->child->next)) {
      vr_tok_seterr(err, errlen, "%s: model Unigram: vocab entry %d is not [piece, score]", file, id);
      return VR_ERR_MODEL_FORMAT;
    }
    const char *pc = e->child->valuestring;
    size_t pn = strlen(pc);
    double sc = e->child->next->valuedouble;
    m->scores[id] = sc;
    if (sc < m->min_score) m->min_score = sc;
    int found;
    vr_tok_map_get(&m->vocab, pc, pn, &found);
    if (!found && vocab_add(m, pc, pn, id)) return VR_ERR_NOMEM;
    if (found && set_id(m, id, UINT32_MAX)) return VR_ERR_NOMEM;
    /* every prefix: -1 unless a piece (a piece seen later keeps its own id) */
    for (size_t l = 1; l <= pn; l++) {
      int f2;
      int32_t old = vr_tok_map_get(&m->prefixes, pc, l, &f2);
      int32_t val = l == pn ? (f2 && old >= 0 ? old : id) : (f2 ? old : -1);
      if ((!f2 || val != old) && vr_tok_map_put(&m->prefixes, pc, l, val)) return VR_ERR_NOMEM;
    }
    if (pn > m->max_piece) m->max_piece = pn;
    id++;
  }
  m->unk_id = -1;
  const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "unk_id");
  if (u && !cJSON_IsNull(u)) {
    if (!cJSON_IsNumber(u) || u->valuedouble < 0 || u->valuedouble >= (double)n) {
      vr_tok_seterr(err, errlen, "%s: model Unigram: unk_id is not an index into the vocab of %zu", file, n);
      return VR_ERR_MODEL_FORMAT;
    }
    m->unk_id = (int32_t)u->valuedouble;
  }
  m->byte_fallback = vr_tok_jbool(j, "byte_fallback", 0);
  m->fuse_unk = 1;
  if (m->byte_fallback < 0) {
    vr_tok_seterr(err, errlen, "%s: model Unigram: byte_fallback is not a boolean", file);
    return VR_ERR_MODEL_FORMAT;
  }
  return 0;
}

int vr_tok_model_parse(const cJSON *j, const char *file, vr_tok_model_t *m, char *err, size_t errlen) {
  memset(m, 0, sizeof *m);
  m->unk_id = -1;
  const char *type = vr_tok_jstr(j, "type");
  int rc;
  if (!type) {
    /* old files: a BPE has "merges", a WordPiece "continuing_subword_prefix" without merges */
    if (cJSON_GetObjectItemCaseSensitive(j, "merges")) type = "BPE";
    else if (cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "vocab"))) type = "Unigram";
    else if (cJSON_GetObjectItemCaseSensitive(j, "continuing_subword_prefix")) type = "WordPiece";
  }
  if (!type) {
    vr_tok_seterr(err, errlen, "%s: model: no \"type\" (and not recognizable as BPE, WordPiece or Unigram)", file);
    return VR_ERR_MODEL_FORMAT;
  }
  if (!strcmp(type, "BPE")) {
    m->type = VR_TOK_MODEL_BPE;
    rc = vr_tok_bpe_parse(j, file, m, err, errlen);
  } else if (!strcmp(type, "WordPiece")) {
    m->type = VR_TOK_MODEL_WORDPIECE;
    rc = parse_wordpiece(j, file, m, err, errlen);
  } else if (!strcmp(type, "Unigram")) {
    m->type = VR_TOK_MODEL_UNIGRAM;
    rc = parse_unigram(j, file, m, err, errlen);
  } else {
    vr_tok_seterr(err, errlen, "%s: model %s is not supported (supported: BPE, WordPiece, Unigram)", file, type);
    rc = VR_ERR_UNSUPPORTED;
  }
  if (rc) {
    vr_tok_model_free(m);
    return rc;
  }
  fill_byte_ids(m);
  for (uint32_t cp = 0; cp < 0x800; cp++) {
    char u[2];
    size_t l = 1;
    if (cp < 0x80) u[0] = (char)cp;
    else {
      u[0] = (char)(0xC0 | (cp >> 6));
      u[1] = (char)(0x80 | (cp & 0x3F));
      l = 2;
    }
    m->small_id[cp] = vr_tok_vocab_id(m, u, l);
  }
  return 0;
}
