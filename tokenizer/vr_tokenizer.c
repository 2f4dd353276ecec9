/* vr_tokenizer.c: load, encode and decode (see vr_tokenizer.h); the added vocabulary is in
 * vr_tok_added.c, tokenizer_config.json and transformers' class rules in vr_tok_config.c. */
#include "vr_tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "verl_reward/status.h"
#include "vr_jsonl.h"
#include "vr_tok_internal.h"

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

int vr_tok_jlist(const cJSON *j, const char *key, const char *file, const char *comp, const cJSON **arr,
                 void *sub, size_t elem, char *err, size_t errlen) {
  *arr = cJSON_GetObjectItemCaseSensitive(j, key);
  if (!cJSON_IsArray(*arr)) {
    vr_tok_seterr(err, errlen, "%s: %s Sequence: \"%s\" is not a list", file, comp, key);
    return VR_ERR_MODEL_FORMAT;
  }
  size_t k = (size_t)cJSON_GetArraySize(*arr);
  void *v = calloc(k ? k : 1, elem);
  if (!v) return VR_ERR_NOMEM;
  memcpy(sub, &v, sizeof v);
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
  vr_tok_map_free(&c->cache);
  free(c->cache_ids.v);
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

/* ---- encode -------------------------------------------------------------------------------- */

enum { CACHE_MAX_WORD = 256, CACHE_MAX_WORDS = 1 << 16 };

/* The model on one pre-token, through the ctx's word cache (words up to CACHE_MAX_WORD bytes;
 * the cache is emptied when it holds CACHE_MAX_WORDS words). */
static int model_cached(const vr_tok_t *tok, vr_tok_ctx_t *c, const char *s, size_t n, vr_tok_ids_t *ids, char *err,
                        size_t errlen) {
  if (n > CACHE_MAX_WORD) return vr_tok_model_encode(&tok->model, c, s, n, ids, err, errlen);
  int found;
  int32_t at = vr_tok_map_get(&c->cache, s, n, &found);
  if (found) {
    const int32_t *v = c->cache_ids.v + at;
    for (int32_t k = 1; k <= v[0]; k++)
      if (vr_tok_ids_push(ids, v[k])) return VR_ERR_NOMEM;
    return 0;
  }
  size_t first = ids->n;
  int rc = vr_tok_model_encode(&tok->model, c, s, n, ids, err, errlen);
  if (rc) return rc;
  if (c->cache.count >= CACHE_MAX_WORDS || c->cache_ids.n > (size_t)INT32_MAX / 2) {
    vr_tok_map_free(&c->cache);
    c->cache_ids.n = 0;
  }
  size_t off = c->cache_ids.n;
  if (vr_tok_ids_push(&c->cache_ids, (int32_t)(ids->n - first))) return VR_ERR_NOMEM;
  for (size_t k = first; k < ids->n; k++)
    if (vr_tok_ids_push(&c->cache_ids, ids->v[k])) return VR_ERR_NOMEM;
  return vr_tok_map_put(&c->cache, s, n, (int32_t)off);
}

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
  if (len) rc = vr_tok_split_added(tok, &tok->raw, c, 0, (uint32_t)len, 1, &c->b);
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
    if (n) rc = vr_tok_split_added(tok, &tok->normd, c, off, n, pc.origin, &c->a);
  }
  /* 3. pre-tokenize, 4. model */
  if (!rc && tok->pre) rc = vr_tok_pre_apply(tok->pre, c);
  for (size_t i = 0; i < c->a.n && !rc; i++) {
    vr_tok_piece_t pc = c->a.v[i];
    if (pc.id >= 0) rc = vr_tok_ids_push(ids, pc.id);
    else if (pc.len) rc = model_cached(tok, c, c->arena.p + pc.off, pc.len, ids, err, errlen);
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
    const vr_tok_added_t *a = &tok->added[tok->added_by_id[id]];
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

static int parse_tokenizer_json(vr_tok_t *tok, const char *json, size_t len, const char *file, char *err,
                                size_t errlen) {
  /* HF reads the file with serde_json, which takes UTF-8 only; every string below is then UTF-8 */
  size_t bad = vr_tok_utf8_check(json, len);
  if (bad != len) {
    vr_tok_seterr(err, errlen, "%s: not a tokenizer: not valid UTF-8 (byte %zu)", file, bad);
    return VR_ERR_MODEL_FORMAT;
  }
  /* serde: derived structs fail on a repeated field, maps keep the last: a repeat is refused */
  char jerr[1400];
  cJSON *root = vr_json_parse_file(json, len, file, VR_JSON_DUP_REFUSE, jerr, sizeof jerr);
  if (!root) { /* jerr is "<file>: <reason>" */
    const size_t fl = strlen(file);
    vr_tok_seterr(err, errlen, "%s: not a tokenizer: %s", file, strncmp(jerr, file, fl) ? jerr : jerr + fl + 2);
    return VR_ERR_MODEL_FORMAT;
  }
  if (!cJSON_IsObject(root)) {
    vr_tok_seterr(err, errlen, "%s: not a tokenizer: not a JSON object", file);
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
      if ((rc = vr_tok_parse_added_obj(tok, e, (int32_t)id->valuedouble, file, "added_tokens", err, errlen))) break;
    }
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
    vr_tok_added_t *a = &tok->added[i];
    if (tok->added_by_id[a->id] < 0) tok->added_by_id[a->id] = (int32_t)i;
    if (!a->normalized || !tok->norm) {
      rc = vr_tok_trie_add(a->normalized ? &tok->normd : &tok->raw, a->content, a->n, (int32_t)i);
    } else {
      vr_tok_buf_t nb = {0};
      rc = vr_tok_norm_apply(tok->norm, &c, a->content, a->n, &nb);
      if (!rc) rc = vr_tok_trie_add(&tok->normd, nb.p ? nb.p : "", nb.n, (int32_t)i);
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
      rc = vr_tok_parse_config(tok, cj, n, path, err, errlen);
    } else {
      /* transformers reads it with json.load: one value, the last of a repeated key */
      char jerr[1400] = "";
      cJSON *root = vr_tok_utf8_check(cj, n) == n
                        ? vr_json_parse_file(cj, n, path, VR_JSON_DUP_LAST, jerr, sizeof jerr)
                        : NULL;
      if (!cJSON_IsObject(root)) {
        if (jerr[0]) vr_tok_seterr(err, errlen, "%s", jerr);
        else vr_tok_seterr(err, errlen, "%s: not a JSON object", path);
        rc = VR_ERR_MODEL_FORMAT;
      }
      for (int i = 0; i < 4 && !rc; i++) rc = vr_tok_set_special(tok, i, cJSON_GetObjectItemCaseSensitive(root, vr_tok_special_keys[i]));
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
