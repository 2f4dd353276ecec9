/* vr_tok_regex.h: the regexes of tokenizer.json (Split, Replace) through PCRE2 (internal).
 *
 * Hugging Face tokenizers compiles these patterns with Oniguruma (Ruby syntax, UTF-8).
 * We compile them with PCRE2_UTF | PCRE2_UCP, JIT when available, after a translation
 * that keeps Oniguruma's meaning where the two engines differ:
 *   \s  -> the White_Space set [\t\n\v\f\r \x85\xA0\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}
 *          \x{202F}\x{205F}\x{3000}] (PCRE2's UCP \s also takes U+180E; Oniguruma does not)
 *   \S  -> the complement of that set (outside a character class)
 *   \w  -> [\p{L}\p{M}\p{N}\p{Pc}] (Oniguruma's Unicode word; PCRE2 10.42 lacks marks)
 *   \W  -> the complement (outside a class)
 *   \h  -> [0-9a-fA-F] (Ruby's hex digit; PCRE2's \h is horizontal space), \H its complement
 * Inside a class, \s and \w expand to their members. \p{L}, \p{N}, (?i:...), lookahead
 * (\s+(?!\S)), {m,n} and alternation mean the same in both engines. Matches are found left
 * to right as Oniguruma's find_iter does (an empty match right after the previous one is
 * skipped by advancing one character).
 *
 * A compiled regex is immutable and may be shared by threads; each thread matches with its own
 * vr_tok_re_scratch_t. */
#ifndef VR_TOK_REGEX_H
#define VR_TOK_REGEX_H

#include <stddef.h>

typedef struct vr_tok_re vr_tok_re_t;
typedef struct vr_tok_re_scratch vr_tok_re_scratch_t;

/* literal: the pattern is a plain string (matched byte for byte). 0, or a negative vr_status_t
 * with err naming the pattern and PCRE2's reason. */
int vr_tok_re_compile(const char *pat, size_t n, int literal, vr_tok_re_t **out, char *err, size_t errlen);
void vr_tok_re_free(vr_tok_re_t *re);

/* One per thread/call; NULL on allocation failure. */
vr_tok_re_scratch_t *vr_tok_re_scratch_new(void);
void vr_tok_re_scratch_free(vr_tok_re_scratch_t *sc);

/* Calls cb(user, start, end) for each match of re in s[0..n) (s valid UTF-8), in order.
 * Returns 0, the callback's nonzero return, or a negative vr_status_t (match failure). */
typedef int (*vr_tok_re_cb)(void *user, size_t start, size_t end);
int vr_tok_re_each(const vr_tok_re_t *re, vr_tok_re_scratch_t *sc, const char *s, size_t n, vr_tok_re_cb cb,
                   void *user);

/* Exposed for tests: the PCRE2 text a pattern is translated to (malloc'd, NUL-terminated). */
char *vr_tok_re_translate(const char *pat, size_t n);

#endif /* VR_TOK_REGEX_H */
