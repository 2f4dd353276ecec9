/* verl_reward/text.h: texts and chat conversations into the shared-memory client, tokenised on
 * the client side with the reward model's own tokenizer (libverl_reward_text).
 *
 * The shm protocol carries token ids only; text never crosses it. This library loads the
 * reward model's tokenizer (tokenizer.json + tokenizer_config.json of its model directory, or
 * of a separate tokenizer directory), turns texts or conversations into exactly the ids the
 * server's HTTP text path (POST /v1/score {"text"} / {"messages"}) and `verl-tokenize` give,
 * and scores them through vr_client_score (client.h), so the token-id fast path is unchanged:
 *   texts:          tokenizer(text, add_special_tokens=...)["input_ids"] (default true)
 *   conversations:  apply_chat_template(messages, add_generation_prompt=..., tokenize=True):
 *                   the tokenizer's chat template renders the conversation, the text is
 *                   encoded with add_special_tokens=False (the template writes BOS itself)
 *
 *   vr_client_text_t *tt;
 *   if (vr_client_text_load("/models/rm", &tt)) fprintf(stderr, "%s\n", vr_client_text_last_error());
 *   const char *texts[2] = {"the answer is 4", "the answer is 5"};
 *   vr_text_batch_t b = {.n = 2, .items = texts};
 *   float scores[2];
 *   int rc = vr_client_text_score(tt, client, VR_TEXT_INPUT_PLAIN, &b, NULL, scores, NULL, NULL);
 *   vr_client_text_free(tt);
 *
 * Link libverl_reward_text (.so or .a; it links libverl_reward_client and the tokenizer).
 * Errors are negative vr_status_t codes; vr_client_text_last_error() gives the detail (the
 * calling thread's, as vr_client_last_error()). Threading: a vr_client_text_t is immutable
 * after load: every function may be called from any number of threads at once. */
#ifndef VERL_REWARD_TEXT_H
#define VERL_REWARD_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "verl_reward/client.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vr_client_text vr_client_text_t;

typedef enum vr_text_input {
  VR_TEXT_INPUT_PLAIN = 1, /* items are UTF-8 texts */
  VR_TEXT_INPUT_CHAT = 2,  /* items are conversations: each a JSON array of {"role", "content"} */
} vr_text_input_t;

typedef struct vr_text_options {
  int add_special_tokens;           /* PLAIN: default 1 (BOS/EOS as the post-processor says) */
  int add_generation_prompt;        /* CHAT: default 0 */
  const char *chat_template_kwargs; /* CHAT: NULL or a JSON object of further template variables */
  const char *chat_template;        /* CHAT: NULL for the default template, or a named one */
} vr_text_options_t;

/* Fills defaults (add_special_tokens 1, add_generation_prompt 0, no kwargs, default template). */
void vr_text_options_init(vr_text_options_t *opt);

/* A batch of n texts or conversations. lens NULL: items are NUL-terminated; else lens[i] bytes.
 * extras / extras_len as in vr_batch_t (optional, one per item). The caller keeps ownership. */
typedef struct vr_text_batch {
  uint32_t n;
  const char *const *items;
  const size_t *lens;
  const uint8_t *const *extras;
  const uint32_t *extras_len;
} vr_text_batch_t;

/* Loads the tokenizer of dir (a model directory, or a tokenizer directory: tokenizer.json
 * required, tokenizer_config.json / special_tokens_map.json when present). *out on success.
 * Errors: VR_ERR_NOT_FOUND (no tokenizer.json in dir), VR_ERR_IO, VR_ERR_MODEL_FORMAT,
 * VR_ERR_UNSUPPORTED (a tokenizer component the library lacks), VR_ERR_NOMEM. */
int vr_client_text_load(const char *dir, vr_client_text_t **out);
void vr_client_text_free(vr_client_text_t *tt); /* NULL is a no-op */

/* len(tokenizer) in transformers: the largest id + 1. */
uint32_t vr_client_text_vocab_size(const vr_client_text_t *tt);
/* 1 when the tokenizer has a chat template (CHAT input needs one). */
int vr_client_text_has_chat_template(const vr_client_text_t *tt);

/* Checks the tokenizer against the server c is connected to: VR_ERR_INVAL when the tokenizer
 * has ids the server's model does not (vocab_size beyond vr_limits_t.vocab_size; a server
 * without a model, vocab_size 0, is not checked). vr_client_text_score calls it. */
int vr_client_text_check(const vr_client_text_t *tt, vr_client_t *c);

/* Encodes the batch: *ids (malloc'd, *n_tokens entries; NULL when 0) and *cu_seqlens (malloc'd,
 * b->n + 1 entries, cu[0] = 0), both owned by the caller (free()). opt NULL: defaults.
 * Errors name the item ("text[2]: ...", "messages[1][0].role is missing", "messages[0]: template
 * raised: ..."): VR_ERR_MALFORMED (a conversation that is not JSON, or not a list of message
 * objects with a string "role"), VR_ERR_INVAL (invalid UTF-8, a template's raise_exception),
 * VR_ERR_NOT_FOUND (CHAT without a chat template), VR_ERR_UNSUPPORTED (a template construct
 * the engine lacks), VR_ERR_TOO_LARGE (more than UINT32_MAX tokens), VR_ERR_NOMEM. */
int vr_client_text_encode(const vr_client_text_t *tt, vr_text_input_t kind, const vr_text_batch_t *b,
                          const vr_text_options_t *opt, int32_t **ids, uint32_t **cu_seqlens, uint64_t *n_tokens);

/* One conversation (a JSON array, len bytes; len 0: NUL-terminated) rendered with the chat
 * template as apply_chat_template(tokenize=False) renders it: *text (malloc'd, NUL-terminated,
 * *text_len bytes without the NUL). Errors as vr_client_text_encode's. */
int vr_client_text_render(const vr_client_text_t *tt, const char *conversation, size_t len,
                          const vr_text_options_t *opt, char **text, size_t *text_len);

/* tokenizer_config.json's bos_token text, NULL when unset (Qwen's bos_token: null). */
const char *vr_client_text_bos_token(const vr_client_text_t *tt);

/* free() for the buffers this library returned (for bindings that cannot call free). */
void vr_client_text_buffer_free(void *p);

/* Checks (vr_client_text_check), encodes and scores through vr_client_score(c, ...): scores,
 * components and info as there. Returns 0, an encode error (info, when given, then has that
 * status and bad_seq = the item), or the request's error (its detail copied into
 * vr_client_text_last_error()). */
int vr_client_text_score(const vr_client_text_t *tt, vr_client_t *c, vr_text_input_t kind, const vr_text_batch_t *b,
                         const vr_text_options_t *opt, float *scores, float *components, vr_request_info_t *info);

/* The calling thread's last error detail of this library ("" if none). */
const char *vr_client_text_last_error(void);
/* The item of the calling thread's last vr_client_text_encode error, -1 if none. */
int32_t vr_client_text_last_bad_item(void);

#ifdef __cplusplus
}
#endif
#endif /* VERL_REWARD_TEXT_H */
