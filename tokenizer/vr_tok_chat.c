/* vr_tok_chat.c: apply_chat_template glue between vr_tokenizer and vr_jinja (see vr_tok_chat.h). */
#include "vr_tok_chat.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_jinja.h"
#include "vr_jsonl.h"

int vr_tok_chat_check_conversation(const cJSON *conv, const char *at, char *err, size_t errlen) {
  if (!cJSON_IsArray(conv)) {
    snprintf(err, errlen, "%s must be a list of message objects (wrong type)", at);
    return VR_ERR_MALFORMED;
  }
  if (!conv->child) {
    snprintf(err, errlen, "%s is an empty conversation", at);
    return VR_ERR_MALFORMED;
  }
  unsigned j = 0;
  const cJSON *m;
  cJSON_ArrayForEach(m, conv) {
    if (!cJSON_IsObject(m)) {
      snprintf(err, errlen, "%s[%u] must be an object with \"role\" and \"content\" (wrong type)", at, j);
      return VR_ERR_MALFORMED;
    }
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    if (!cJSON_IsString(role)) {
      snprintf(err, errlen, "%s[%u].role %s", at, j, role ? "must be a string" : "is missing");
      return VR_ERR_MALFORMED;
    }
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (content && !cJSON_IsString(content) && !cJSON_IsArray(content) && !cJSON_IsObject(content) &&
        !cJSON_IsNull(content)) {
      snprintf(err, errlen, "%s[%u].content must be a string, a list of parts or null", at, j);
      return VR_ERR_MALFORMED;
    }
    j++;
  }
  return 0;
}

int vr_tok_apply_chat_template_ex(const vr_tok_t *tok, const char *template_name, const char *messages_json,
                                  int add_generation_prompt, const char *extra_json, char **text, size_t *len,
                                  char *err, size_t errlen) {
  *text = NULL;
  const char *src = vr_tok_chat_template(tok, template_name);
  if (!src) {
    snprintf(err, errlen, "%s: tokenizer_config.json has no chat_template%s%s", vr_tok_source(tok),
             template_name ? " named " : "", template_name ? template_name : "");
    return VR_ERR_NOT_FOUND;
  }
  /* exactly one value each (text after it is refused, not dropped); a key given twice counts
   * once, the last, as in the Python dicts transformers renders from (vr_jsonl.h) */
  const char *why = NULL;
  size_t at = 0, at2 = 0;
  cJSON *msgs = vr_jsonl_parse(messages_json ? messages_json : "", messages_json ? strlen(messages_json) : 0, &why, &at);
  const char *why2 = NULL;
  cJSON *extra = extra_json ? vr_jsonl_parse(extra_json, strlen(extra_json), &why2, &at2) : cJSON_CreateObject();
  int rc = 0;
  if (!msgs && at) {
    snprintf(err, errlen, "messages: %s at byte %zu", why, at);
    rc = VR_ERR_INVAL;
  } else if (!cJSON_IsArray(msgs)) {
    snprintf(err, errlen, "messages is not a JSON array");
    rc = VR_ERR_INVAL;
  } else if (!extra && at2) {
    snprintf(err, errlen, "extra template variables: %s at byte %zu", why2, at2);
    rc = VR_ERR_INVAL;
  } else if (!cJSON_IsObject(extra)) {
    snprintf(err, errlen, "extra template variables are not a JSON object");
    rc = VR_ERR_INVAL;
  } else if (vr_json_dups(msgs, VR_JSON_DUP_LAST, NULL, 0) || vr_json_dups(extra, VR_JSON_DUP_LAST, NULL, 0)) {
    snprintf(err, errlen, "out of memory");
    rc = VR_ERR_NOMEM;
  }
  /* the other special tokens, unless the caller set them */
  static const struct { vr_tok_special_t w; const char *name; } more[] = {{VR_TOK_PAD, "pad_token"},
                                                                          {VR_TOK_UNK, "unk_token"}};
  for (size_t i = 0; !rc && i < sizeof more / sizeof more[0]; i++) {
    const char *s = vr_tok_special_token(tok, more[i].w, NULL);
    if (s && !cJSON_GetObjectItemCaseSensitive(extra, more[i].name) && !cJSON_AddStringToObject(extra, more[i].name, s))
      rc = VR_ERR_NOMEM;
  }
  vr_jinja_t *t = NULL;
  if (!rc) {
    char e2[512] = "";
    rc = vr_jinja_compile(src, strlen(src), &t, e2, sizeof e2);
    if (rc) snprintf(err, errlen, "%s: chat_template: %s", vr_tok_source(tok), e2);
  }
  if (!rc) {
    vr_jinja_chat_t chat = {.messages = msgs, .add_generation_prompt = add_generation_prompt != 0,
                            .bos_token = vr_tok_special_token(tok, VR_TOK_BOS, NULL),
                            .eos_token = vr_tok_special_token(tok, VR_TOK_EOS, NULL),
                            .tools = NULL, .documents = NULL, .extra = extra};
    size_t n = 0;
    char e2[512] = "";
    rc = vr_jinja_chat(t, &chat, NULL, text, &n, e2, sizeof e2);
    if (rc) snprintf(err, errlen, "%s: chat_template: %s", vr_tok_source(tok), e2);
    else if (len) *len = n;
  }
  vr_jinja_free(t);
  cJSON_Delete(msgs);
  cJSON_Delete(extra);
  return rc;
}

int vr_tok_apply_chat_template(const vr_tok_t *tok, const char *messages_json, int add_generation_prompt,
                               char **text, char *err, size_t errlen) {
  return vr_tok_apply_chat_template_ex(tok, NULL, messages_json, add_generation_prompt, NULL, text, NULL, err,
                                       errlen);
}

int vr_tok_ids_append(int32_t **all, uint64_t *cap, uint64_t *total, const int32_t *ids, size_t n) {
  if (*total + n > *cap) {
    uint64_t nc = *cap ? *cap * 2 : 1024;
    while (nc < *total + n) nc *= 2;
    int32_t *na = realloc(*all, nc * sizeof *na);
    if (!na) return VR_ERR_NOMEM;
    *all = na;
    *cap = nc;
  }
  if (n) memcpy(*all + *total, ids, n * sizeof *ids);
  *total += n;
  return 0;
}
