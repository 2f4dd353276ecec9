/* vr_tok_chat.h: a tokenizer's chat template applied to a conversation, as transformers'
 * apply_chat_template(messages, tokenize=False, add_generation_prompt=...) renders it
 * (library vr_tok_chat: vr_tokenizer + the Jinja engine of tokenizer/jinja).
 *
 * The template is tokenizer_config.json's chat_template (the default one, or the named one of
 * a list). The variables: messages, add_generation_prompt, bos_token / eos_token / pad_token /
 * unk_token as the config names them (undefined when unset), tools = documents = None, then
 * the caller's extra kwargs (enable_thinking, ...). To get ids as apply_chat_template(
 * tokenize=True) does, encode the text with add_special_tokens = 0 (the template writes the
 * special tokens itself).
 *
 * Returns 0 or a negative vr_status_t with err: VR_ERR_NOT_FOUND (no such template),
 * VR_ERR_INVAL (messages not a JSON array, a template runtime error, raise_exception),
 * VR_ERR_PARSE / VR_ERR_UNSUPPORTED (the template does not compile / a construct the engine
 * lacks, named with its line), VR_ERR_TOO_LARGE, VR_ERR_NOMEM. *text is malloc'd.
 * Thread-safe (the template is compiled per call; the tokenizer is only read). */
#ifndef VR_TOK_CHAT_H
#define VR_TOK_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "vr_tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

/* One conversation as the servers and clients accept it before rendering: a non-empty JSON
 * array of objects, each with a string "role" and a "content" that is a string, a list of
 * parts, an object or null when present. Returns 0, or VR_ERR_MALFORMED with err naming the
 * place from `at` (the caller's name of conv, e.g. "messages[2]"): "at[1].role is missing". */
int vr_tok_chat_check_conversation(const struct cJSON *conv, const char *at, char *err, size_t errlen);

/* Appends ids[0..n) to the packed buffer *all (capacity *cap ids, *total used), growing it by
 * doubling (from 1024): the packing loop of a batch of encodes. Returns 0, or VR_ERR_NOMEM with
 * *all, *cap and *total unchanged (the caller still owns and frees *all). */
int vr_tok_ids_append(int32_t **all, uint64_t *cap, uint64_t *total, const int32_t *ids, size_t n);

int vr_tok_apply_chat_template(const vr_tok_t *tok, const char *messages_json, int add_generation_prompt,
                               char **text, char *err, size_t errlen);

/* template_name: NULL for the default; extra_json: NULL or a JSON object of further variables. */
int vr_tok_apply_chat_template_ex(const vr_tok_t *tok, const char *template_name, const char *messages_json,
                                  int add_generation_prompt, const char *extra_json, char **text, size_t *len,
                                  char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* VR_TOK_CHAT_H */
