/* vr_tokenizer.h: Hugging Face tokenizers in C (public API of libvr_tokenizer).
 *
 * Loads a model directory as transformers does (tokenizer.json, plus tokenizer_config.json and
 * special_tokens_map.json when present) and encodes / decodes with the same ids and text as
 * `tokenizers` + `transformers` (AutoTokenizer(...)(text, add_special_tokens=...)["input_ids"],
 * tokenizer.decode(ids, skip_special_tokens=...)). Supported components are listed in
 * docs/operations.md ("Tokenizers"); any other component, or a malformed file, fails the load
 * with an error text naming the file, the component and the reason; nothing falls back silently.
 *
 * Errors: functions return 0 or a negative vr_status_t (include/verl_reward/status.h) and, when
 * err != NULL, write a one-line reason into err[errlen]:
 *   VR_ERR_IO            a file cannot be read            VR_ERR_MODEL_FORMAT  a file is malformed
 *   VR_ERR_UNSUPPORTED   a component we do not implement  VR_ERR_INVAL         bad input (invalid UTF-8)
 *   VR_ERR_TOKEN_RANGE   decode of an id the tokenizer does not have
 *   VR_ERR_NOMEM         out of memory
 *
 * Threading: a vr_tok_t is immutable after vr_tok_load returns: every function taking a
 * `const vr_tok_t *` may be called from any number of threads at once. A vr_tok_scratch_t is
 * per thread (not thread-safe); functions without one allocate their own per call.
 *
 * Ownership: arrays and strings returned through out-parameters are malloc'd and owned by the
 * caller (free()); `const char *` returns point into the tokenizer and live as long as it. */
#ifndef VR_TOKENIZER_H
#define VR_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vr_tok vr_tok_t;
typedef struct vr_tok_scratch vr_tok_scratch_t;

/* dir holds tokenizer.json (required), tokenizer_config.json and special_tokens_map.json
 * (optional). *out is set on success only. */
int vr_tok_load(const char *dir, vr_tok_t **out, char *err, size_t errlen);
/* The same from a tokenizer.json text in memory (no config files); name appears in errors. */
int vr_tok_load_json(const char *json, size_t len, const char *name, vr_tok_t **out, char *err, size_t errlen);
void vr_tok_free(vr_tok_t *tok);

/* Encodes text[0..len) (UTF-8; invalid UTF-8 is VR_ERR_INVAL naming the byte offset).
 * add_special_tokens: run the post-processor (BOS/EOS/CLS/SEP as the template says).
 * *ids (malloc'd, may be NULL when *n == 0) and *n on success. */
int vr_tok_encode(const vr_tok_t *tok, const char *text, size_t len, int add_special_tokens, int32_t **ids,
                  size_t *n, char *err, size_t errlen);
/* Per-thread scratch that saves vr_tok_encode's per-call allocations and keeps a word cache
 * (pre-token -> ids, bounded) across calls; results equal vr_tok_encode's. */
vr_tok_scratch_t *vr_tok_scratch_new(void);
void vr_tok_scratch_free(vr_tok_scratch_t *sc);
int vr_tok_encode_with(const vr_tok_t *tok, vr_tok_scratch_t *sc, const char *text, size_t len,
                       int add_special_tokens, int32_t **ids, size_t *n, char *err, size_t errlen);

/* Decodes ids as transformers' decode: decoder chain, then clean_up_tokenization when the
 * config's clean_up_tokenization_spaces is true and the model is not BPE (transformers 5 ignores
 * the flag for BPE). skip_special_tokens drops special added tokens.
 * An id the tokenizer has no token for is VR_ERR_TOKEN_RANGE (HF silently drops it).
 * *text is malloc'd and NUL-terminated; *len excludes the NUL. */
int vr_tok_decode(const vr_tok_t *tok, const int32_t *ids, size_t n, int skip_special_tokens, char **text,
                  size_t *len, char *err, size_t errlen);

/* len(tokenizer) in transformers: the largest id + 1 over the model vocab and added tokens. */
size_t vr_tok_vocab_size(const vr_tok_t *tok);
/* Added tokens first, then the model vocab; -1 when absent. */
int32_t vr_tok_token_to_id(const vr_tok_t *tok, const char *token, size_t len);
/* NULL when the id has no token; *len gets the length. */
const char *vr_tok_id_to_token(const vr_tok_t *tok, int32_t id, size_t *len);
/* 1 when id is a special added token (what skip_special_tokens drops). */
int vr_tok_is_special(const vr_tok_t *tok, int32_t id);

typedef enum vr_tok_special {
  VR_TOK_BOS = 0, VR_TOK_EOS = 1, VR_TOK_PAD = 2, VR_TOK_UNK = 3,
} vr_tok_special_t;
/* The special token's text from tokenizer_config.json (or special_tokens_map.json), NULL when
 * unset (e.g. Qwen's bos_token: null); *id gets its id or -1. */
const char *vr_tok_special_token(const vr_tok_t *tok, vr_tok_special_t which, int32_t *id);
/* What encode(add_special_tokens=1) adds around the text, as transformers applies it: the ids
 * before (e.g. BOS) and after (e.g. EOS/SEP). Pointers into the tokenizer. add_bos semantics:
 * a chat template that already writes the BOS text gets it twice when encoded with
 * add_special_tokens=1, exactly as in transformers. */
void vr_tok_special_affixes(const vr_tok_t *tok, const int32_t **pre, size_t *npre, const int32_t **post,
                            size_t *npost);
/* 1 when encode(add_special_tokens=1) starts with the BOS id. */
int vr_tok_adds_bos(const vr_tok_t *tok);

/* tokenizer_config.json's chat_template: a string, or a list of {name, template}. name NULL
 * or "default": the default one. NULL when there is none of that name. */
const char *vr_tok_chat_template(const vr_tok_t *tok, const char *name);
size_t vr_tok_chat_template_count(const vr_tok_t *tok);
/* The i-th template's name ("default" for a plain string) and text. */
const char *vr_tok_chat_template_at(const vr_tok_t *tok, size_t i, const char **text);

/* The directory / name the tokenizer was loaded from (for messages). */
const char *vr_tok_source(const vr_tok_t *tok);

#ifdef __cplusplus
}
#endif
#endif /* VR_TOKENIZER_H */
