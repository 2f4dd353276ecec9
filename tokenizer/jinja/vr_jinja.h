/* vr_jinja.h: the Jinja2 subset that Hugging Face chat templates use, rendered exactly as
 * transformers' apply_chat_template renders them (jinja2 ImmutableSandboxedEnvironment with
 * trim_blocks=True, lstrip_blocks=True, the loopcontrols extension, default Undefined, the
 * globals raise_exception / strftime_now / namespace / range / dict and transformers' own
 * tojson: json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...)).
 *
 * What is supported is listed in tokenizer/jinja/README.md. Anything else is an error that names
 * the construct and the template line; the engine never renders a prompt it is unsure of. The
 * template and the context are untrusted: recursion depth, steps (statements + expressions
 * evaluated), memory and output size are bounded (vr_jinja_opts_t); exceeding a bound is an
 * error (VR_ERR_TOO_LARGE), never a crash or a truncated prompt.
 *
 * Values: JSON from the context maps to Python values (object -> dict, keys in document order;
 * array -> list; string -> str; true/false -> bool; null -> None; a number that is integral and
 * within +-2^53 -> int, any other -> float). cJSON keeps no trace of "1.0" vs "1", so a JSON
 * number 1.0 is the int 1 here where Python's json would give the float 1.0.
 * Strings are UTF-8; length, indexing and slicing count code points as Python does. Case
 * mapping (upper/lower/title/capitalize) is ASCII; it is an error on text with non-ASCII
 * letters, rather than a silently different prompt.
 *
 * Return values: 0 (VR_OK) or a negative vr_status_t from verl_reward/status.h:
 *   VR_ERR_PARSE        the template does not compile (syntax), message "line N: ..."
 *   VR_ERR_UNSUPPORTED  a construct jinja2 has but this engine does not (named, with its line)
 *   VR_ERR_INVAL        a runtime error of the template: a type error, an undefined value used
 *                       as an object, raise_exception("...") (message "line N: template raised:
 *                       ..."), a bad argument
 *   VR_ERR_TOO_LARGE    a bound of vr_jinja_opts_t exceeded
 *   VR_ERR_NOMEM        allocation failed
 * On error, err (if errlen > 0) holds a NUL-terminated message; *out is left NULL.
 *
 * Threading: a compiled vr_jinja_t is immutable; any number of threads may render the same
 * template concurrently. No function logs; every message goes to err. */
#ifndef VR_JINJA_H
#define VR_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vr_jinja vr_jinja_t;

/* Bounds and clock of one render. Fill with vr_jinja_opts_default, then change fields. */
typedef struct vr_jinja_opts {
  size_t max_output;   /* bytes of rendered text (default 16 MiB) */
  size_t max_memory;   /* bytes of values allocated during one render (default 256 MiB) */
  uint64_t max_steps;  /* statements + expressions evaluated, loop iterations included
                          (default 50,000,000) */
  int max_depth;       /* nesting of macro calls and expression evaluation (default 256) */
  int64_t now_s;       /* the clock of strftime_now: seconds since the epoch, rendered in local
                          time as datetime.now() does; < 0 (the default) reads the real clock */
} vr_jinja_opts_t;

void vr_jinja_opts_default(vr_jinja_opts_t *opts);

/* Compiles src[0..len) (UTF-8; need not be NUL-terminated). Newlines are normalised and one
 * trailing newline is dropped, as jinja2 does (keep_trailing_newline=False). Unknown filters and
 * tests are compile errors as in jinja2; jinja2 filters this engine lacks compile and fail when
 * they run (VR_ERR_UNSUPPORTED). The template nesting is bounded (256 levels).
 * On success *out owns the template (free with vr_jinja_free). */
int vr_jinja_compile(const char *src, size_t len, vr_jinja_t **out, char *err, size_t errlen);

/* Frees a template; NULL is fine. */
void vr_jinja_free(vr_jinja_t *t);

/* Renders t with the variables of context (a JSON object, or NULL for none); opts NULL means
 * defaults. On success *out is a NUL-terminated malloc'd string the caller frees (the text may
 * contain NUL bytes only if the template put them there; *outlen is its length in bytes). */
int vr_jinja_render(const vr_jinja_t *t, const cJSON *context, const vr_jinja_opts_t *opts,
                    char **out, size_t *outlen, char *err, size_t errlen);

/* The variables transformers' apply_chat_template passes to the template. */
typedef struct vr_jinja_chat {
  const cJSON *messages;      /* required: JSON array of message objects, passed as is */
  int add_generation_prompt;  /* 0 or 1 */
  const char *bos_token;      /* NULL: the variable is undefined (a tokenizer without one) */
  const char *eos_token;      /* NULL: undefined */
  const cJSON *tools;         /* JSON array or NULL: NULL gives `tools` = None, as transformers */
  const cJSON *documents;     /* JSON array or NULL: NULL gives `documents` = None */
  const cJSON *extra;         /* JSON object or NULL: further variables (the other special
                                 tokens: pad_token, unk_token, ...; template kwargs such as
                                 enable_thinking, date_string); applied last, so they override */
} vr_jinja_chat_t;

/* apply_chat_template(messages, tokenize=False, ...) for one conversation: builds the context
 * from chat and renders t into *out (as vr_jinja_render). As transformers 5 checks first:
 * messages must be a non-empty array, tools and documents arrays of objects (VR_ERR_INVAL
 * otherwise, the message names the field). To get apply_chat_template(tokenize=True)'s ids,
 * encode the text with add_special_tokens=False: the template writes BOS/EOS itself. */
int vr_jinja_chat(const vr_jinja_t *t, const vr_jinja_chat_t *chat, const vr_jinja_opts_t *opts,
                  char **out, size_t *outlen, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* VR_JINJA_H */
