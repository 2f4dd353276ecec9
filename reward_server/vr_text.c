/* vr_text.c: "text" / "messages" score requests into token ids (see vr_text.h). */
#define _GNU_SOURCE
#include "vr_text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_request.h"
#include "vr_tok_chat.h"
#include "vr_tokenizer.h"

__attribute__((format(printf, 4, 5))) static int fail(vr_req_error_t *e, int status, int64_t seq, const char *fmt,
                                                      ...) {
  e->status = status;
  e->sequence = seq;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  return status;
}

void vr_text_free(vr_text_req_t *t) {
  if (!t) return;
  for (uint32_t i = 0; t->items && i < t->n; i++) free(t->items[i]);
  free(t->items);
  free(t->lens);
  free(t->template_kwargs);
  memset(t, 0, sizeof *t);
}

static int alloc_items(vr_text_req_t *t, uint64_t n, uint32_t max_items, const char *field, vr_req_error_t *e) {
  if (n == 0) return fail(e, VR_ERR_MALFORMED, -1, "\"%s\" is empty: no sequences to score", field);
  if (n > max_items)
    return fail(e, VR_ERR_TOO_LARGE, -1, "%llu sequences, more than the limit %u (--max-seqs-per-request)",
                (unsigned long long)n, max_items);
  t->n = (uint32_t)n;
  t->items = calloc(n, sizeof *t->items);
  t->lens = calloc(n, sizeof *t->lens);
  if (!t->items || !t->lens) return fail(e, VR_ERR_NOMEM, -1, "out of memory for %llu texts", (unsigned long long)n);
  return 0;
}

static int set_item(vr_text_req_t *t, uint32_t i, const char *s, size_t len, vr_req_error_t *e) {
  t->items[i] = malloc(len + 1);
  if (!t->items[i]) return fail(e, VR_ERR_NOMEM, i, "out of memory");
  if (len) memcpy(t->items[i], s, len);
  t->items[i][len] = 0;
  t->lens[i] = len;
  return 0;
}

/* One conversation (vr_tok_chat_check_conversation says what it must be). */
static int check_conversation(const cJSON *conv, uint32_t i, int flat, vr_req_error_t *e) {
  char at[32], err[160];
  if (flat) snprintf(at, sizeof at, "messages");
  else snprintf(at, sizeof at, "messages[%u]", i);
  int rc = vr_tok_chat_check_conversation(conv, at, err, sizeof err);
  return rc ? fail(e, rc, i, "%s", err) : 0;
}

static int take_options(const cJSON *agp, const cJSON *ast, const cJSON *kw, vr_text_req_t *t, vr_req_error_t *e) {
  if (agp && !cJSON_IsBool(agp)) return fail(e, VR_ERR_MALFORMED, -1, "\"add_generation_prompt\" must be a boolean");
  if (ast && !cJSON_IsBool(ast)) return fail(e, VR_ERR_MALFORMED, -1, "\"add_special_tokens\" must be a boolean");
  if (kw && !cJSON_IsObject(kw) && !cJSON_IsNull(kw))
    return fail(e, VR_ERR_MALFORMED, -1, "\"chat_template_kwargs\" must be an object");
  if (t->kind == VR_TEXT_PLAIN && (agp || (kw && !cJSON_IsNull(kw))))
    return fail(e, VR_ERR_MALFORMED, -1, "\"add_generation_prompt\" / \"chat_template_kwargs\" go with \"messages\", not \"text\"");
  if (t->kind == VR_TEXT_CHAT && ast)
    return fail(e, VR_ERR_MALFORMED, -1,
                "\"add_special_tokens\" goes with \"text\": a conversation is encoded without them (the template writes them)");
  t->add_generation_prompt = agp && cJSON_IsTrue(agp);
  t->add_special_tokens = ast ? cJSON_IsTrue(ast) : 1;
  if (kw && cJSON_IsObject(kw)) {
    t->template_kwargs = cJSON_PrintUnformatted(kw);
    if (!t->template_kwargs) return fail(e, VR_ERR_NOMEM, -1, "out of memory");
  }
  return 0;
}

static int from_json(const cJSON *root, uint32_t max_items, vr_text_req_t *t, vr_req_error_t *e) {
  const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text");
  const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
  if (!text && !msgs) return 0;
  if (text && msgs) return fail(e, VR_ERR_MALFORMED, -1, "give one of \"input_ids\", \"text\" and \"messages\", not several");
  int rc;
  if (text) {
    t->kind = VR_TEXT_PLAIN;
    if (cJSON_IsString(text)) {
      if ((rc = alloc_items(t, 1, max_items, "text", e))) return rc;
      return set_item(t, 0, text->valuestring, strlen(text->valuestring), e);
    }
    if (!cJSON_IsArray(text)) return fail(e, VR_ERR_MALFORMED, -1, "\"text\" must be a string or a list of strings (wrong type)");
    if ((rc = alloc_items(t, (uint64_t)cJSON_GetArraySize(text), max_items, "text", e))) return rc;
    uint32_t i = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, text) {
      if (!cJSON_IsString(s)) return fail(e, VR_ERR_MALFORMED, i, "text[%u] must be a string (wrong type)", i);
      if ((rc = set_item(t, i, s->valuestring, strlen(s->valuestring), e))) return rc;
      i++;
    }
    return 0;
  }
  t->kind = VR_TEXT_CHAT;
  if (!cJSON_IsArray(msgs))
    return fail(e, VR_ERR_MALFORMED, -1, "\"messages\" must be a list of conversations (lists of message objects) (wrong type)");
  int flat = msgs->child && cJSON_IsObject(msgs->child); /* one conversation */
  if ((rc = alloc_items(t, flat ? 1 : (uint64_t)cJSON_GetArraySize(msgs), max_items, "messages", e))) return rc;
  uint32_t i = 0;
  for (const cJSON *conv = flat ? msgs : msgs->child; conv; conv = flat ? NULL : conv->next) {
    if ((rc = check_conversation(conv, i, flat, e))) return rc;
    char *js = cJSON_PrintUnformatted(conv);
    if (!js) return fail(e, VR_ERR_NOMEM, i, "out of memory");
    t->items[i] = js;
    t->lens[i] = strlen(js);
    i++;
  }
  return 0;
}

int vr_text_from_json(const cJSON *root, uint32_t max_items, vr_text_req_t *t, vr_req_error_t *e) {
  memset(t, 0, sizeof *t);
  int rc = from_json(root, max_items, t, e);
  if (rc == 0 && t->kind != VR_TEXT_NONE)
    rc = take_options(cJSON_GetObjectItemCaseSensitive(root, "add_generation_prompt"),
                      cJSON_GetObjectItemCaseSensitive(root, "add_special_tokens"),
                      cJSON_GetObjectItemCaseSensitive(root, "chat_template_kwargs"), t, e);
  if (rc) vr_text_free(t);
  return rc;
}

/* msgpack -> cJSON (maps need string keys); the body was validated (depth <= 32) already */
static cJSON *mp_to_json(const msgpack_object *o) {
  switch (o->type) {
    case MSGPACK_OBJECT_NIL: return cJSON_CreateNull();
    case MSGPACK_OBJECT_BOOLEAN: return cJSON_CreateBool(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER: return cJSON_CreateNumber((double)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return cJSON_CreateNumber((double)o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return cJSON_CreateNumber(o->via.f64);
    case MSGPACK_OBJECT_STR: {
      char *s = strndup(o->via.str.ptr, o->via.str.size);
      if (!s) return NULL;
      if (strlen(s) != o->via.str.size) { /* an embedded NUL: cJSON strings cannot hold one */
        free(s);
        return NULL;
      }
      cJSON *j = cJSON_CreateString(s);
      free(s);
      return j;
    }
    case MSGPACK_OBJECT_ARRAY: {
      cJSON *a = cJSON_CreateArray();
      for (uint32_t i = 0; a && i < o->via.array.size; i++) {
        cJSON *x = mp_to_json(&o->via.array.ptr[i]);
        if (!x) {
          cJSON_Delete(a);
          return NULL;
        }
        cJSON_AddItemToArray(a, x);
      }
      return a;
    }
    case MSGPACK_OBJECT_MAP: {
      cJSON *m = cJSON_CreateObject();
      for (uint32_t i = 0; m && i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        char *k = kv->key.type == MSGPACK_OBJECT_STR ? strndup(kv->key.via.str.ptr, kv->key.via.str.size) : NULL;
        cJSON *x = k ? mp_to_json(&kv->val) : NULL;
        if (!x) {
          free(k);
          cJSON_Delete(m);
          return NULL;
        }
        cJSON_AddItemToObject(m, k, x);
        free(k);
      }
      return m;
    }
    default: return NULL; /* bin, ext */
  }
}

int vr_text_from_msgpack(const msgpack_object *root, uint32_t max_items, vr_text_req_t *t, vr_req_error_t *e) {
  memset(t, 0, sizeof *t);
  /* the few keys that matter, as JSON: then the JSON path checks and copies them */
  static const char *const keys[] = {"text", "messages", "add_generation_prompt", "add_special_tokens",
                                     "chat_template_kwargs"};
  cJSON *obj = cJSON_CreateObject();
  if (!obj) return fail(e, VR_ERR_NOMEM, -1, "out of memory");
  int any = 0;
  for (uint32_t k = 0; k < root->via.map.size; k++) {
    const msgpack_object_kv *kv = &root->via.map.ptr[k];
    if (kv->key.type != MSGPACK_OBJECT_STR) continue;
    for (size_t q = 0; q < sizeof keys / sizeof keys[0]; q++) {
      if (kv->key.via.str.size != strlen(keys[q]) || memcmp(kv->key.via.str.ptr, keys[q], kv->key.via.str.size)) continue;
      cJSON *v = mp_to_json(&kv->val);
      if (!v) {
        cJSON_Delete(obj);
        return fail(e, VR_ERR_MALFORMED, -1,
                    "\"%s\": holds a value JSON cannot (bin/ext, a non-string map key, a NUL in a string)", keys[q]);
      }
      cJSON_AddItemToObject(obj, keys[q], v);
      any |= q < 2;
    }
  }
  int rc = any ? vr_text_from_json(obj, max_items, t, e) : 0;
  cJSON_Delete(obj);
  return rc;
}

int vr_text_encode(const vr_tok_t *tok, const vr_text_req_t *t, int32_t **ids_out, uint32_t *cu,
                   uint64_t *n_tokens, vr_req_error_t *e) {
  *ids_out = NULL;
  *n_tokens = 0;
  cu[0] = 0;
  int32_t *all = NULL;
  uint64_t total = 0, cap = 0;
  int rc = 0;
  vr_tok_scratch_t *sc = vr_tok_scratch_new();
  for (uint32_t i = 0; i < t->n && !rc; i++) {
    char err[512] = "";
    char *text = NULL;
    size_t tlen = 0;
    const char *src = t->items[i];
    size_t slen = t->lens[i];
    int add_special = t->add_special_tokens;
    if (t->kind == VR_TEXT_CHAT) {
      rc = vr_tok_apply_chat_template_ex(tok, NULL, t->items[i], t->add_generation_prompt, t->template_kwargs, &text,
                                         &tlen, err, sizeof err);
      if (rc) {
        rc = fail(e, rc == VR_ERR_NOMEM || rc == VR_ERR_TOO_LARGE ? rc : VR_ERR_INVAL, i,
                  "messages[%u]: %s", i, err);
        break;
      }
      src = text;
      slen = tlen;
      add_special = 0; /* apply_chat_template(tokenize=True): add_special_tokens=False */
    }
    int32_t *ids = NULL;
    size_t n = 0;
    rc = sc ? vr_tok_encode_with(tok, sc, src, slen, add_special, &ids, &n, err, sizeof err)
            : vr_tok_encode(tok, src, slen, add_special, &ids, &n, err, sizeof err);
    free(text);
    if (rc) {
      rc = fail(e, rc == VR_ERR_NOMEM ? rc : VR_ERR_INVAL, i, "%s[%u]: %s", t->kind == VR_TEXT_CHAT ? "messages" : "text",
                i, err);
      break;
    }
    if (total + n > UINT32_MAX) {
      free(ids);
      rc = fail(e, VR_ERR_TOO_LARGE, i, "too many tokens in the request");
      break;
    }
    const int ar = vr_tok_ids_append(&all, &cap, &total, ids, n);
    free(ids);
    if (ar) {
      rc = fail(e, VR_ERR_NOMEM, i, "out of memory for %llu tokens", (unsigned long long)(total + n));
      break;
    }
    cu[i + 1] = (uint32_t)total;
  }
  vr_tok_scratch_free(sc);
  if (rc) {
    free(all);
    return rc;
  }
  *ids_out = all;
  *n_tokens = total;
  return 0;
}
