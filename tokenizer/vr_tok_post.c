/* vr_tok_post.c: post-processors (single sequence): TemplateProcessing, RobertaProcessing,
 * BertProcessing, ByteLevel (ids unchanged: it only trims offsets), Sequence. */
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_tok_internal.h"

void vr_tok_post_free(vr_tok_post_t *p) {
  if (!p) return;
  free(p->pre);
  free(p->post);
  for (size_t i = 0; i < p->nsub; i++) vr_tok_post_free(p->sub[i]);
  free(p->sub);
  free(p);
}

static int append_ids(int32_t **v, size_t *n, const int32_t *src, size_t k) {
  int32_t *w = realloc(*v, (*n + k + 1) * sizeof *w);
  if (!w) return VR_ERR_NOMEM;
  memcpy(w + *n, src, k * sizeof *w);
  *v = w;
  *n += k;
  return 0;
}

/* ["[CLS]", 101] */
static int parse_pair(const cJSON *j, const char *key, const char *file, const char *comp, int32_t *id, char *err,
                      size_t errlen) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, key);
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 2 || !cJSON_IsString(a->child) ||
      !cJSON_IsNumber(a->child->next) || a->child->next->valuedouble < 0 || a->child->next->valuedouble > 16777216.0) {
    vr_tok_seterr(err, errlen, "%s: post_processor %s: \"%s\" is not [token, id]", file, comp, key);
    return VR_ERR_MODEL_FORMAT;
  }
  *id = (int32_t)a->child->next->valuedouble;
  return 0;
}

static int parse_template(const cJSON *j, const char *file, vr_tok_post_t *p, char *err, size_t errlen) {
  const cJSON *single = cJSON_GetObjectItemCaseSensitive(j, "single");
  const cJSON *sp = cJSON_GetObjectItemCaseSensitive(j, "special_tokens");
  if (!cJSON_IsArray(single)) {
    vr_tok_seterr(err, errlen, "%s: post_processor TemplateProcessing: \"single\" is not a list", file);
    return VR_ERR_MODEL_FORMAT;
  }
  int seen_a = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, single) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
    const cJSON *sq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
    if (sq) {
      const char *sid = vr_tok_jstr(sq, "id");
      if (!sid || strcmp(sid, "A") || seen_a) {
        vr_tok_seterr(err, errlen, "%s: post_processor TemplateProcessing: single must hold sequence A once", file);
        return VR_ERR_MODEL_FORMAT;
      }
      seen_a = 1;
    } else if (st) {
      const char *name = vr_tok_jstr(st, "id");
      const cJSON *def = name && cJSON_IsObject(sp) ? cJSON_GetObjectItemCaseSensitive(sp, name) : NULL;
      const cJSON *ids = def ? cJSON_GetObjectItemCaseSensitive(def, "ids") : NULL;
      if (!cJSON_IsArray(ids)) {
        vr_tok_seterr(err, errlen, "%s: post_processor TemplateProcessing: special token '%.60s' has no ids in "
                      "special_tokens", file, name ? name : "?");
        return VR_ERR_MODEL_FORMAT;
      }
      const cJSON *x;
      cJSON_ArrayForEach(x, ids) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 16777216.0) {
          vr_tok_seterr(err, errlen, "%s: post_processor TemplateProcessing: '%.60s' has a bad id", file, name);
          return VR_ERR_MODEL_FORMAT;
        }
        int32_t v = (int32_t)x->valuedouble;
        if (seen_a ? append_ids(&p->post, &p->npost, &v, 1) : append_ids(&p->pre, &p->npre, &v, 1))
          return VR_ERR_NOMEM;
      }
    } else {
      vr_tok_seterr(err, errlen, "%s: post_processor TemplateProcessing: an item of single is neither SpecialToken nor "
                    "Sequence", file);
      return VR_ERR_MODEL_FORMAT;
    }
  }
  if (!seen_a) {
    vr_tok_seterr(err, errlen, "%s: post_processor TemplateProcessing: single has no sequence A", file);
    return VR_ERR_MODEL_FORMAT;
  }
  return 0;
}

int vr_tok_post_parse(const cJSON *j, const char *file, vr_tok_post_t **out, char *err, size_t errlen) {
  *out = NULL;
  const char *type = vr_tok_jstr(j, "type");
  if (!type) {
    vr_tok_seterr(err, errlen, "%s: post_processor: no \"type\"", file);
    return VR_ERR_MODEL_FORMAT;
  }
  vr_tok_post_t *p = calloc(1, sizeof *p);
  if (!p) return VR_ERR_NOMEM;
  int rc = 0;
  if (!strcmp(type, "TemplateProcessing")) {
    p->type = VR_TOK_POST_TEMPLATE;
    rc = parse_template(j, file, p, err, errlen);
  } else if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
    p->type = type[0] == 'R' ? VR_TOK_POST_ROBERTA : VR_TOK_POST_BERT;
    int32_t cls, sep;
    rc = parse_pair(j, "cls", file, type, &cls, err, errlen);
    if (!rc) rc = parse_pair(j, "sep", file, type, &sep, err, errlen);
    if (!rc && (append_ids(&p->pre, &p->npre, &cls, 1) || append_ids(&p->post, &p->npost, &sep, 1))) rc = VR_ERR_NOMEM;
  } else if (!strcmp(type, "ByteLevel")) {
    p->type = VR_TOK_POST_BYTELEVEL;
  } else if (!strcmp(type, "Sequence")) {
    p->type = VR_TOK_POST_SEQUENCE;
    const cJSON *arr, *e;
    rc = vr_tok_jlist(j, "processors", file, "post_processor", &arr, &p->sub, sizeof *p->sub, err, errlen);
    if (!rc) cJSON_ArrayForEach(e, arr) {
        if ((rc = vr_tok_post_parse(e, file, &p->sub[p->nsub], err, errlen))) break;
        p->nsub++;
      }
  } else {
    vr_tok_seterr(err, errlen, "%s: post_processor %s is not supported (supported: TemplateProcessing "
                  "RobertaProcessing BertProcessing ByteLevel Sequence)", file, type);
    rc = VR_ERR_UNSUPPORTED;
  }
  if (rc) {
    vr_tok_post_free(p);
    return rc;
  }
  *out = p;
  return 0;
}

int vr_tok_post_apply(const vr_tok_post_t *p, vr_tok_ids_t *ids) {
  if (p->type == VR_TOK_POST_SEQUENCE) {
    for (size_t i = 0; i < p->nsub; i++) {
      int rc = vr_tok_post_apply(p->sub[i], ids);
      if (rc) return rc;
    }
    return 0;
  }
  if (!p->npre && !p->npost) return 0;
  size_t n = ids->n;
  for (size_t i = 0; i < p->npre + p->npost; i++)
    if (vr_tok_ids_push(ids, 0)) return VR_ERR_NOMEM;
  memmove(ids->v + p->npre, ids->v, n * sizeof *ids->v);
  if (p->npre) memcpy(ids->v, p->pre, p->npre * sizeof *ids->v);
  if (p->npost) memcpy(ids->v + p->npre + n, p->post, p->npost * sizeof *ids->v);
  return 0;
}
