/* vr_tok_bpe.c: the BPE model, as Hugging Face tokenizers runs it on one pre-token.
 *
 * Merges are a rank map (a_id, b_id) -> (rank, new_id); a word's symbols merge lowest rank first
 * (ties: leftmost), with a binary heap and a linked list, exactly HF's Word::merge_all without
 * dropout. Unknown characters: byte_fallback (<0xXX> tokens), then unk (fused when fuse_unk),
 * else dropped, in HF's order. ignore_merges: a word that is itself in the vocab is one token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_tok_internal.h"

/* ---- merges ------------------------------------------------------------------------------ */

static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

static int merges_put(vr_tok_model_t *m, int32_t a, int32_t b, int32_t rank, int32_t nid) {
  uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
  uint32_t j = (uint32_t)mix64(key) & (m->mcap - 1);
  while (m->mkeys[j] && m->mkeys[j] != key) j = (j + 1) & (m->mcap - 1);
  m->mkeys[j] = key;
  m->mrank[j] = rank;
  m->mnew[j] = nid;
  return 0;
}

static inline int merges_get(const vr_tok_model_t *m, int32_t a, int32_t b, int32_t *rank, int32_t *nid) {
  if (!m->mcap) return 0;
  uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
  uint32_t j = (uint32_t)mix64(key) & (m->mcap - 1);
  while (m->mkeys[j]) {
    if (m->mkeys[j] == key) {
      *rank = m->mrank[j];
      *nid = m->mnew[j];
      return 1;
    }
    j = (j + 1) & (m->mcap - 1);
  }
  return 0;
}

/* ---- BPE --------------------------------------------------------------------------------- */


typedef struct hitem {
  int32_t rank, pos, nid;
} hitem_t;

static inline int hless(const hitem_t *x, const hitem_t *y) {
  return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void hpush(hitem_t *h, size_t *n, hitem_t it) {
  size_t i = (*n)++;
  h[i] = it;
  while (i) {
    size_t p = (i - 1) / 2;
    if (!hless(&h[i], &h[p])) break;
    hitem_t t = h[i];
    h[i] = h[p];
    h[p] = t;
    i = p;
  }
}

static hitem_t hpop(hitem_t *h, size_t *n) {
  hitem_t top = h[0];
  h[0] = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, s = i;
    if (l < *n && hless(&h[l], &h[s])) s = l;
    if (r < *n && hless(&h[r], &h[s])) s = r;
    if (s == i) break;
    hitem_t t = h[i];
    h[i] = h[s];
    h[s] = t;
    i = s;
  }
  return top;
}

int vr_tok_bpe_encode(const vr_tok_model_t *m, vr_tok_ctx_t *c, const char *s, size_t n, vr_tok_ids_t *out,
                      char *err, size_t errlen) {
  if (!n) return 0;
  if (m->ignore_merges) {
    int found;
    int32_t id = vr_tok_map_get(&m->vocab, s, n, &found);
    if (found) return vr_tok_ids_push(out, id);
  }
  /* one symbol per char, at most one per byte (byte fallback) plus a pending unk */
  if (vr_tok_grow(&c->sym, &c->sym_cap, n + 2, sizeof(vr_tok_sym_t)) || vr_tok_grow(&c->heap, &c->heap_cap, n + 2, sizeof(hitem_t)))
    return VR_ERR_NOMEM;
  vr_tok_sym_t *sy = c->sym;
  size_t ns = 0;
  int32_t unk = -1;
  uint32_t unk_len = 0;
  const unsigned char *p = (const unsigned char *)s;
  int plain = !m->cont_prefix_n && !m->eow_suffix_n;
#define ADD(ID, LEN)                                                  \
  do {                                                                \
    sy[ns] = (vr_tok_sym_t){(ID), (int32_t)ns - 1, (int32_t)ns + 1, (LEN)}; \
    ns++;                                                             \
  } while (0)
  for (size_t i = 0; i < n;) {
    size_t l;
    uint32_t cp = vr_tok_utf8_dec(p + i, &l);
    int32_t id;
    if (plain && cp < 0x800) {
      id = m->small_id[cp];
    } else if (plain) {
      id = vr_tok_vocab_id(m, s + i, l);
    } else {
      vr_tok_buf_t *t = &c->tmp;
      t->n = 0;
      if ((i && vr_tok_buf_put(t, m->cont_prefix, m->cont_prefix_n)) || vr_tok_buf_put(t, s + i, l) ||
          (i + l == n && vr_tok_buf_put(t, m->eow_suffix, m->eow_suffix_n)))
        return VR_ERR_NOMEM;
      id = vr_tok_vocab_id(m, t->p, t->n);
    }
    if (id >= 0) {
      if (unk >= 0) {
        ADD(unk, unk_len);
        unk = -1;
      }
      ADD(id, (uint32_t)l);
    } else {
      int done = 0;
      if (m->byte_fallback) {
        int all = 1;
        for (size_t k = 0; k < l; k++) all &= m->byte_id[p[i + k]] >= 0;
        if (all) {
          for (size_t k = 0; k < l; k++) ADD(m->byte_id[p[i + k]], 1);
          done = 1;
        }
      }
      if (!done && m->unk_id >= 0) {
        if (unk >= 0 && m->fuse_unk) {
          unk_len += (uint32_t)l;
        } else {
          if (unk >= 0) ADD(unk, unk_len);
          unk = m->unk_id;
          unk_len = (uint32_t)l;
        }
      }
    }
    i += l;
  }
  if (unk >= 0) ADD(unk, unk_len);
#undef ADD
  if (!ns) return 0;
  sy[ns - 1].next = -1;
  /* merge_all */
  hitem_t *h = c->heap;
  size_t hn = 0;
  int32_t rank, nid;
  for (size_t i = 0; i + 1 < ns; i++)
    if (merges_get(m, sy[i].id, sy[i + 1].id, &rank, &nid)) hpush(h, &hn, (hitem_t){rank, (int32_t)i, nid});
  while (hn) {
    hitem_t top = hpop(h, &hn);
    vr_tok_sym_t *cur = &sy[top.pos];
    if (!cur->len || cur->next < 0) continue;
    vr_tok_sym_t *right = &sy[cur->next];
    int32_t r2, n2;
    if (!merges_get(m, cur->id, right->id, &r2, &n2) || n2 != top.nid) continue;
    cur->id = top.nid;
    cur->len += right->len;
    right->len = 0;
    cur->next = right->next;
    if (right->next >= 0) sy[right->next].prev = top.pos;
    if (cur->prev >= 0 && merges_get(m, sy[cur->prev].id, cur->id, &r2, &n2)) {
      if (vr_tok_grow(&c->heap, &c->heap_cap, hn + 1, sizeof(hitem_t))) return VR_ERR_NOMEM;
      h = c->heap;
      hpush(h, &hn, (hitem_t){r2, cur->prev, n2});
    }
    if (cur->next >= 0 && merges_get(m, cur->id, sy[cur->next].id, &r2, &n2)) {
      if (vr_tok_grow(&c->heap, &c->heap_cap, hn + 1, sizeof(hitem_t))) return VR_ERR_NOMEM;
      h = c->heap;
      hpush(h, &hn, (hitem_t){r2, top.pos, n2});
    }
  }
  for (size_t i = 0; i < ns; i++)
    if (sy[i].len && vr_tok_ids_push(out, sy[i].id)) return VR_ERR_NOMEM;
  (void)err;
  (void)errlen;
  return 0;
}

/* ---- parsing ------------------------------------------------------------------------------- */

int vr_tok_bpe_parse(const cJSON *j, const char *file, vr_tok_model_t *m, char *err, size_t errlen) {
  int rc = vr_tok_model_parse_vocab(cJSON_GetObjectItemCaseSensitive(j, "vocab"), file, "BPE", m, err, errlen);
  if (rc) return rc;
  const cJSON *dr = cJSON_GetObjectItemCaseSensitive(j, "dropout");
  if (dr && !cJSON_IsNull(dr) && !(cJSON_IsNumber(dr) && dr->valuedouble == 0.0)) {
    vr_tok_seterr(err, errlen, "%s: model BPE: dropout %g is not supported (encode must be deterministic)", file,
                  cJSON_IsNumber(dr) ? dr->valuedouble : -1.0);
    return VR_ERR_UNSUPPORTED;
  }
  if ((rc = vr_tok_model_parse_unk(j, file, "BPE", m, err, errlen))) return rc;
  if (vr_tok_jdup(j, "continuing_subword_prefix", &m->cont_prefix, &m->cont_prefix_n) ||
      vr_tok_jdup(j, "end_of_word_suffix", &m->eow_suffix, &m->eow_suffix_n))
    return VR_ERR_NOMEM;
  m->fuse_unk = vr_tok_jbool(j, "fuse_unk", 0);
  m->byte_fallback = vr_tok_jbool(j, "byte_fallback", 0);
  m->ignore_merges = vr_tok_jbool(j, "ignore_merges", 0);
  if (m->fuse_unk < 0 || m->byte_fallback < 0 || m->ignore_merges < 0) {
    vr_tok_seterr(err, errlen, "%s: model BPE: fuse_unk/byte_fallback/ignore_merges is not a boolean", file);
    return VR_ERR_MODEL_FORMAT;
  }
  const cJSON *mg = cJSON_GetObjectItemCaseSensitive(j, "merges");
  if (!cJSON_IsArray(mg)) {
    vr_tok_seterr(err, errlen, "%s: model BPE: \"merges\" is not a list", file);
    return VR_ERR_MODEL_FORMAT;
  }
  size_t nm = (size_t)cJSON_GetArraySize(mg);
  m->mcap = 1024;
  while (m->mcap < nm * 2 + 2) m->mcap *= 2;
  m->mkeys = calloc(m->mcap, sizeof *m->mkeys);
  m->mrank = malloc(m->mcap * sizeof *m->mrank);
  m->mnew = malloc(m->mcap * sizeof *m->mnew);
  if (!m->mkeys || !m->mrank || !m->mnew) return VR_ERR_NOMEM;
  vr_tok_buf_t t = {0};
  int32_t rank = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, mg) {
    const char *a, *b;
    size_t an, bn;
    if (cJSON_IsString(e)) {
      a = e->valuestring;
      const char *sp = strchr(a, ' ');
      if (!sp || strchr(sp + 1, ' ')) {
        vr_tok_seterr(err, errlen, "%s: model BPE: merge %d '%.60s' is not two tokens separated by one space", file,
                      rank, a);
        rc = VR_ERR_MODEL_FORMAT;
        break;
      }
      an = (size_t)(sp - a);
      b = sp + 1;
      bn = strlen(b);
    } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
               cJSON_IsString(e->child->next)) {
      a = e->child->valuestring;
      an = strlen(a);
      b = e->child->next->valuestring;
      bn = strlen(b);
    } else {
      vr_tok_seterr(err, errlen, "%s: model BPE: merge %d is neither \"a b\" nor [a, b]", file, rank);
      rc = VR_ERR_MODEL_FORMAT;
      break;
    }
    int32_t ia = vr_tok_vocab_id(m, a, an), ib = vr_tok_vocab_id(m, b, bn);
    size_t pl = m->cont_prefix_n;
    if (ia < 0 || ib < 0 || (pl && (bn < pl || memcmp(b, m->cont_prefix, pl)))) {
      vr_tok_seterr(err, errlen, "%s: model BPE: merge %d '%.*s' '%.*s': a part is not in the vocab", file, rank,
                    (int)(an > 60 ? 60 : an), a, (int)(bn > 60 ? 60 : bn), b);
      rc = VR_ERR_MODEL_FORMAT;
      break;
    }
    t.n = 0;
    if (vr_tok_buf_put(&t, a, an) || vr_tok_buf_put(&t, b + pl, bn - pl)) {
      rc = VR_ERR_NOMEM;
      break;
    }
    int32_t nid = vr_tok_vocab_id(m, t.p, t.n);
    if (nid < 0) {
      vr_tok_seterr(err, errlen, "%s: model BPE: merge %d gives '%.60s', which is not in the vocab", file, rank, t.p);
      rc = VR_ERR_MODEL_FORMAT;
      break;
    }
    merges_put(m, ia, ib, rank, nid);
    rank++;
  }
  vr_tok_buf_free(&t);
  return rc;
}
