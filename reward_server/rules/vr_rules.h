/* vr_rules.h: rule-based rewards (verifiable scorers), reward specs and mixing.
 *
 * Library vr_rules (reward_server/rules/): self-contained, no server state.
 * Three parts:
 *   1. Per-sequence extras (data_source, solution_str, ground_truth, extra_info)
 *      parsed from untrusted msgpack (shm / HTTP msgpack body) or cJSON (HTTP
 *      JSON body), and packed to msgpack for clients, tests and benchmarks.
 *   2. Reward specs: "model:0.7,gsm8k:0.3", "gsm8k", "overlong(max_len=4096,buffer=512):1".
 *   3. Scorers (gsm8k, math, exact_match, overlong, auto, contains_word) and the weighted mix.
 * The exact rule of every scorer is written next to its kind below and in
 * docs/operations.md ("## Rule-based rewards").
 *
 * Threading: no global mutable state. A vr_extras_t or vr_reward_spec_t is
 * not thread-safe to modify; scoring (vr_rule_score) only reads its inputs and
 * may run concurrently on any number of threads with shared rules/extras.
 * Errors: functions returning int give 0 (VR_OK) or a negative vr_status_t
 * (include/verl_reward/status.h) and, when err != NULL && errlen > 0, write a
 * NUL-terminated message naming what was wrong (truncated to errlen). */
#ifndef VR_RULES_H
#define VR_RULES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cJSON cJSON; /* from <cjson/cJSON.h>; only pointers are used here */

/* ---- limits (every blob/string read from a client is checked against these) ---- */
#define VR_EXTRAS_MAX_BLOB (4u << 20)          /* one msgpack extras blob, bytes */
#define VR_EXTRAS_MAX_TEXT (1u << 20)          /* solution_str / ground_truth, bytes (UTF-8) */
#define VR_EXTRAS_MAX_SOURCE 256u              /* data_source, bytes (UTF-8) */
#define VR_EXTRAS_MAX_INFO (256u << 10)        /* extra_info, raw encoded bytes */
#define VR_EXTRAS_MAX_DEPTH 16u                /* nesting of maps/arrays inside a blob */
#define VR_EXTRAS_MAX_KEYS 64u                 /* top-level keys (unknown keys are ignored) */

/* ---- extras ------------------------------------------------------------------ */

/* One text field. When present: ptr points to len bytes of valid UTF-8 with
 * ptr[len] == '\0' (the text itself contains no NUL: a NUL byte is rejected).
 * When absent: present == 0, len == 0 (ptr may still hold a reusable buffer).
 * Memory: owned by the vr_extras_t (cap bytes allocated); freed by vr_extras_free. */
typedef struct vr_text {
  char *ptr;
  uint32_t len;
  uint32_t cap;
  uint8_t present;
} vr_text_t;

/* Encoding of extra_info's raw bytes. */
typedef enum vr_info_format {
  VR_INFO_NONE = 0,    /* absent */
  VR_INFO_MSGPACK = 1, /* the value's own msgpack encoding, copied verbatim */
  VR_INFO_JSON = 2,    /* the value printed as compact JSON (cJSON_PrintUnformatted) */
} vr_info_format_t;

/* Per-sequence extras. Initialise with vr_extras_init (or = {0}), reuse across
 * parses (buffers only grow), release with vr_extras_free. A parse that fails
 * leaves the struct valid but with unspecified field contents (all buffers
 * still owned and freed by vr_extras_free).
 * Wire keys (msgpack map / JSON object): "data_source" (str), "solution_str"
 * (str), "ground_truth" (str, or an integer/float which is converted to its
 * decimal text: 42 -> "42", 2.5 -> "2.5"), "extra_info" (any value, kept raw).
 * msgpack bin is accepted where str is (it must hold valid UTF-8). nil (JSON
 * null) for a key means absent. Unknown keys are ignored; a duplicated known
 * key, a non-string map key, or a wrong value type is an error. */
typedef struct vr_extras {
  vr_text_t data_source;
  vr_text_t solution_str;
  vr_text_t ground_truth;
  vr_text_t extra_info; /* raw bytes (NOT text; may contain NULs), format below */
  vr_info_format_t extra_info_format;
} vr_extras_t;

void vr_extras_init(vr_extras_t *ex);
/* Frees every buffer; the struct is then as after vr_extras_init. NULL is a no-op. */
void vr_extras_free(vr_extras_t *ex);
/* Marks every field absent, keeping buffers for reuse. */
void vr_extras_clear(vr_extras_t *ex);

/* Sets one text field from (s, len) (copied). Validates UTF-8, no NUL, and the
 * field's limit. s == NULL marks it absent. Returns 0, VR_ERR_MALFORMED
 * (bad UTF-8 / NUL), VR_ERR_TOO_LARGE or VR_ERR_NOMEM. For clients/tests. */
int vr_extras_set_text(vr_text_t *field, const char *s, size_t len, uint32_t max_len);
/* Convenience for clients/tests/bench: sets the three text fields from
 * NUL-terminated strings (NULL = absent) with the standard limits; clears extra_info. */
int vr_extras_set(vr_extras_t *ex, const char *data_source, const char *solution_str,
                  const char *ground_truth);

/* Sets extra_info from raw bytes (copied): fmt VR_INFO_MSGPACK needs exactly
 * one well-formed msgpack object (depth <= VR_EXTRAS_MAX_DEPTH), VR_INFO_JSON
 * valid UTF-8 without NUL; VR_INFO_NONE (or raw == NULL) marks it absent.
 * Returns 0, VR_ERR_MALFORMED, VR_ERR_TOO_LARGE (> VR_EXTRAS_MAX_INFO),
 * VR_ERR_INVAL or VR_ERR_NOMEM. For clients/tests that forward extra_info. */
int vr_extras_set_info(vr_extras_t *ex, vr_info_format_t fmt, const void *raw, size_t len);

/* Parses one msgpack map (the per-sequence blob a client writes into the shm
 * payload arena or an HTTP msgpack body) of exactly len bytes (trailing bytes
 * are an error). buf is untrusted: it is first walked by a bounds-checking
 * validator (depth <= VR_EXTRAS_MAX_DEPTH, every container count bounded by
 * the bytes left, len <= VR_EXTRAS_MAX_BLOB); then msgpack-c decodes the
 * keys and the scalar values of known keys (extra_info and unknown keys are
 * never expanded). buf is not retained and must not change during the call
 * (the checks and the decode read it twice): copy a blob out of a shared
 * segment first, as vr_shm_request_t's extras already are. Returns 0, VR_ERR_MALFORMED (bad structure,
 * wrong type, bad UTF-8, duplicate key), VR_ERR_TOO_LARGE or VR_ERR_NOMEM. */
int vr_extras_parse_msgpack(const uint8_t *buf, size_t len, vr_extras_t *out, char *err,
                            size_t errlen);

/* Packs extras as one msgpack map with the present fields only (extra_info is
 * emitted verbatim when its format is VR_INFO_MSGPACK, as a str holding the
 * JSON text when VR_INFO_JSON). *out is malloc'd (caller free()s), *out_len set.
 * Returns 0 or VR_ERR_NOMEM / VR_ERR_INVAL. Round-trips through vr_extras_parse_msgpack. */
int vr_extras_pack_msgpack(const vr_extras_t *ex, uint8_t **out, size_t *out_len);

/* Fills extras from one JSON object (one element of an HTTP request's
 * "extras" array), same keys and rules as msgpack; extra_info is kept as its
 * compact JSON text. obj is not retained. Returns 0, VR_ERR_MALFORMED,
 * VR_ERR_TOO_LARGE or VR_ERR_NOMEM. */
int vr_extras_from_json(const cJSON *obj, vr_extras_t *out, char *err, size_t errlen);

/* ---- rules and reward specs ---------------------------------------------------- */

typedef enum vr_rule_kind {
  /* The reward model's score; not computed here (vr_rule_score returns 0 with
   * VR_REASON_NOT_A_RULE); the server fills its component from the model. */
  VR_RULE_MODEL = 0,
  /* gsm8k (verl utils/reward_score/gsm8k.py): look only at the last 300
   * characters (code points) of solution_str. strict: the answer is the last
   * match of "#### " followed by -?[0-9.,]+ ; flexible: the last match of
   * -?[0-9.,]+ anywhere that is not "" or ".". Commas and '$' are removed
   * from the answer and from ground_truth (and surrounding spaces from
   * ground_truth); equal strings score 1, else if both are decimal numbers
   * equal in value ("72" vs "72.0") score 1; otherwise 0. No answer: 0 with
   * VR_REASON_NO_ANSWER. Names "gsm8k" (strict) and "gsm8k_flexible";
   * option mode=strict|flexible. */
  VR_RULE_GSM8K = 1,
  /* math (verl utils/reward_score/math.py, Hendrycks MATH): the answer is the
   * content of the last "\boxed{...}" (or "\boxed <x>" up to '$', or "\fbox{...}")
   * with balanced braces; both it and ground_truth are normalised
   * (vr_math_normalize, rules in docs/operations.md) and compared as strings.
   * 1 if equal, else 0 (VR_REASON_MISMATCH; VR_REASON_NO_ANSWER when there is
   * no complete box). */
  VR_RULE_MATH = 2,
  /* exact_match: solution_str == ground_truth byte for byte; "exact_match_ci"
   * (options ignore_case=1, ignore_space=1): ASCII case folded and whitespace
   * runs collapsed to one space, leading/trailing whitespace dropped. 1 or 0. */
  VR_RULE_EXACT_MATCH = 3,
  /* overlong (DAPO soft overlong punishment, verl DAPORewardManager) over the
   * response token count L: expected = max_len - buffer;
   *   score = min(-(L - expected) / buffer * factor, 0)
   * exactly as DAPO (no clamp: beyond max_len the penalty keeps growing
   * linearly, -factor at L == max_len). Reason VR_REASON_TOO_LONG when the
   * score is < 0, else VR_REASON_OK. Needs no extras. Defaults max_len=4096,
   * buffer=512, factor=1.0. */
  VR_RULE_OVERLONG = 4,
  /* auto: verl's default_compute_score dispatch on data_source: "openai/gsm8k"
   * -> gsm8k strict; "lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval",
   * "HuggingFaceH4/MATH-500" -> math; anything else: 0 with
   * VR_REASON_UNKNOWN_SOURCE. */
  VR_RULE_AUTO = 5,
  /* contains_word: 1 when ground_truth occurs in solution_str as a whole word
   * (delimited by ASCII whitespace or the ends of the string), else 0
   * (VR_REASON_MISMATCH); an empty ground_truth never matches. For synthetic
   * tasks ("say the token the prompt names"): the trainer's learning test. */
  VR_RULE_CONTAINS_WORD = 6,
} vr_rule_kind_t;

#define VR_RULE_NAME_MAX 32

/* One component of a reward spec. Plain data: copy freely. */
typedef struct vr_rule {
  vr_rule_kind_t kind;
  char name[VR_RULE_NAME_MAX]; /* component name in responses and /metrics */
  float weight;                /* finite, |weight| <= 1e6 */
  /* gsm8k */
  uint8_t flexible;            /* 0 strict, 1 flexible */
  /* exact_match */
  uint8_t ignore_case;
  uint8_t ignore_space;
  /* overlong */
  uint32_t max_len;
  uint32_t buffer;             /* 1 <= buffer <= max_len */
  float factor;                /* finite, >= 0 */
} vr_rule_t;

#define VR_REWARD_MAX_COMPONENTS 8

typedef struct vr_reward_spec {
  uint32_t n;                                /* 1..VR_REWARD_MAX_COMPONENTS */
  vr_rule_t rules[VR_REWARD_MAX_COMPONENTS]; /* in spec order */
  int model_index;  /* index of the "model" component, or -1: no model needed */
  uint8_t needs_extras; /* some rule reads solution_str/ground_truth/data_source */
} vr_reward_spec_t;

/* Parses a reward spec:
 *   spec      := component ("," component)*
 *   component := name [ "(" key "=" value ("," key "=" value)* ")" ] [ ":" weight ]
 * Names: model, gsm8k, gsm8k_flexible, math, exact_match, exact_match_ci,
 * overlong, auto, contains_word. Options: gsm8k(mode=strict|flexible);
 * exact_match(ignore_case=0|1, ignore_space=0|1);
 * overlong(max_len=N, buffer=N, factor=F). weight defaults to 1. Spaces around
 * tokens are allowed. Every component name may appear once. Errors
 * (VR_ERR_INVAL + message): empty spec, unknown name/option, bad number,
 * non-finite or out-of-range weight, duplicate component, too many components. */
int vr_reward_spec_parse(const char *spec, vr_reward_spec_t *out, char *err, size_t errlen);

/* Writes the canonical form ("model:0.7,gsm8k:0.3,overlong(max_len=4096,buffer=512,factor=1):1")
 * into buf (always NUL-terminated when buflen > 0); returns the length it
 * needed (snprintf semantics). Parsing the output gives an equal spec. */
size_t vr_reward_spec_format(const vr_reward_spec_t *spec, char *buf, size_t buflen);

/* Why a rule gave its score. Stable numbers (they may travel in responses). */
typedef enum vr_reason {
  VR_REASON_OK = 0,             /* scored normally (correct, or no penalty) */
  VR_REASON_NO_ANSWER = 1,      /* no extractable answer in solution_str */
  VR_REASON_PARSE_ERROR = 2,    /* answer/ground truth could not be processed */
  VR_REASON_MISMATCH = 3,       /* answer extracted but wrong */
  VR_REASON_MISSING_FIELD = 4,  /* extras NULL or solution_str/ground_truth absent */
  VR_REASON_TOO_LONG = 5,       /* overlong: penalty applied */
  VR_REASON_UNKNOWN_SOURCE = 6, /* auto: data_source has no scorer */
  VR_REASON_NOT_A_RULE = 7,     /* kind model: scored by the model, not here */
  VR_REASON_COUNT_ = 8,
} vr_reason_t;

/* "ok", "no_answer", ...; never NULL ("unknown" otherwise). Static string. */
const char *vr_reason_name(int reason);

/* Scores one sequence with one rule. ex may be NULL (rules that need it then
 * give 0 with VR_REASON_MISSING_FIELD). response_tokens is the number of
 * response tokens (overlong). Never crashes on any input, never allocates
 * more than O(len of the texts), returns a finite float; *reason (if non-NULL)
 * gets a vr_reason_t. Thread-safe (reads only). */
float vr_rule_score(const vr_rule_t *rule, const vr_extras_t *ex, uint32_t response_tokens,
                    int *reason);

/* total = sum over i < spec->n of rules[i].weight * scores[i] (scores in spec
 * order, the model's score at model_index). Non-finite scores count as 0. */
float vr_reward_mix(const vr_reward_spec_t *spec, const float *scores);

/* ---- building blocks, exposed for tests and tools -------------------------------- */

/* Content of the last \boxed{...} / \boxed <x> / \fbox{...} in s (verl math.py
 * last_boxed_only_string + remove_boxed). Returns 1 and sets *start and *len
 * (pointing into s) or 0 when there is none or its braces never close. */
int vr_math_last_boxed(const char *s, size_t n, size_t *start, size_t *len);

/* Normalises a math answer (verl math.py strip_string plus trailing-zero,
 * plain '$'/'%' and trailing \text{unit} removal, see docs). Writes a
 * NUL-terminated result into out (at most outcap-1 bytes). Returns the result
 * length, or -1 when outcap is too small or memory ran out (the result may be
 * longer than the input: "\frac12" -> "\frac{1}{2}"). */
long vr_math_normalize(const char *s, size_t n, char *out, size_t outcap);

/* gsm8k answer extraction (verl gsm8k.py extract_solution, commas/'$' removed).
 * Returns 1 and writes the NUL-terminated answer into out (<= outcap-1 bytes,
 * truncated never: returns -1 if it does not fit; 320 bytes always suffice),
 * or 0 when there is no answer. */
int vr_gsm8k_extract(const char *s, size_t n, int flexible, char *out, size_t outcap);

/* 1 if s is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF), else 0. */
int vr_utf8_valid(const char *s, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* VR_RULES_H */
