/* vr_text.h: text and conversations in POST /v1/score, tokenised with the reward model's own
 * tokenizer (the model directory's tokenizer.json + tokenizer_config.json, tokenizer/).
 *
 * Request forms (JSON and msgpack alike), alternatives to "input_ids":
 *   {"text": ["...", ...]}  or  {"text": "..."}           texts; encoded as transformers'
 *       tokenizer(text)["input_ids"] (add_special_tokens true unless "add_special_tokens": false)
 *   {"messages": [[{"role": ..., "content": ...}, ...], ...]}  or  {"messages": [{...}, ...]}
 *       conversations (a list whose first item is an object is one conversation); each is
 *       rendered with the tokenizer's chat_template as apply_chat_template(messages,
 *       add_generation_prompt=...) renders it and encoded with add_special_tokens false, as
 *       apply_chat_template(tokenize=True) does (the template writes BOS itself)
 *   "add_generation_prompt": bool (messages only; default false)
 *   "chat_template_kwargs": {...} (messages only): further template variables
 *                                  (enable_thinking, tools, date_string, ...)
 * Exactly one of input_ids, text, messages; "extras" as with input_ids (one per item).
 *
 * Parsing (vr_text_from_*) is cheap and runs on the HTTP thread; encoding (vr_text_encode)
 * renders templates and runs the tokenizer, so the server calls it on its text worker thread.
 * All functions are pure functions of their inputs (thread-safe); the tokenizer is only read. */
#ifndef VR_TEXT_H
#define VR_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <msgpack.h>

struct vr_tok;
struct vr_req_error;

typedef enum vr_text_kind {
  VR_TEXT_NONE = 0, /* the request has neither "text" nor "messages" */
  VR_TEXT_PLAIN = 1,
  VR_TEXT_CHAT = 2,
} vr_text_kind_t;

typedef struct vr_text_req {
  vr_text_kind_t kind;
  uint32_t n;                /* items */
  char **items;              /* n: the texts, or each conversation as a JSON array (malloc'd) */
  size_t *lens;              /* n: bytes of items[i] */
  int add_generation_prompt; /* VR_TEXT_CHAT */
  int add_special_tokens;    /* VR_TEXT_PLAIN (default 1) */
  char *template_kwargs;     /* VR_TEXT_CHAT: a JSON object's text, or NULL */
} vr_text_req_t;

/* Reads "text" / "messages" (+ options) of a request object. Returns 0 with t->kind NONE when
 * neither is present, 0 with t filled, or a negative status with e set (the field named:
 * "text[2] must be a string", "messages[1][0] must be an object with \"role\"", ...).
 * max_items bounds n (VR_ERR_TOO_LARGE). */
int vr_text_from_json(const cJSON *root, uint32_t max_items, vr_text_req_t *t, struct vr_req_error *e);
int vr_text_from_msgpack(const msgpack_object *root, uint32_t max_items, vr_text_req_t *t,
                         struct vr_req_error *e);

/* Encodes every item with tok: *ids (malloc'd, n_tokens entries) and cu (t->n + 1 entries,
 * caller-allocated). Template and tokenizer errors name the item (e->sequence) and the reason
 * (VR_ERR_INVAL for a template's raise_exception or bad messages, VR_ERR_TOO_LARGE for more
 * than UINT32_MAX tokens, ...). */
int vr_text_encode(const struct vr_tok *tok, const vr_text_req_t *t, int32_t **ids, uint32_t *cu,
                   uint64_t *n_tokens, struct vr_req_error *e);

void vr_text_free(vr_text_req_t *t);

#endif /* VR_TEXT_H */
