/* vr_tids.h: token-id JSON lines, the input of verl-trainer logprobs / sft (and generate).
 *
 * One sequence per line: {"input_ids": [int, ...]} (other keys are ignored; blank lines are
 * skipped). Everything is untrusted: every id must be an integer in [0, vocab), every sequence
 * 1..max_len tokens, a line at most VR_TIDS_MAX_LINE bytes. Errors name the file, the line and,
 * for ids, the position and the value.
 *
 * Threading: no shared state; a vr_tids_t is owned by its caller. */
#ifndef VR_TIDS_H
#define VR_TIDS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VR_TIDS_MAX_LINE (64u << 20)

typedef struct vr_tids {
  int32_t *ids;      /* (T) every sequence, concatenated */
  uint32_t *cu;      /* (n + 1) cu[0] = 0 */
  uint32_t n;        /* sequences */
  uint32_t *line;    /* (n) the line each sequence came from (1-based) */
  size_t T, cap_T;
  uint32_t cap_n;
} vr_tids_t;

/* Parses one line (len bytes, need not be NUL-terminated) and appends its sequence to out.
 * 0, or VR_ERR_PARSE (malformed JSON, no "input_ids" list, a non-integer entry),
 * VR_ERR_PARSE also for text after the object (a second object, a NUL, junk: the line must be
 * exactly one JSON object) and for "input_ids" given twice;
 * VR_ERR_EMPTY_SEQ, VR_ERR_SEQ_TOO_LONG, VR_ERR_TOKEN_RANGE, VR_ERR_TOO_LARGE (past 2^32 - 1
 * tokens or sequences in all: cu is 32-bit), VR_ERR_NOMEM; why (may be NULL)
 * gets the problem without the file and line. out is unchanged on error. */
int vr_tids_parse_line(const char *line, size_t len, int vocab, int max_len, uint32_t lineno, vr_tids_t *out,
                       char *why, size_t whylen);
/* Reads every line of f (name for messages); on the first bad line logs "name:LINE: problem"
 * and returns its code (out keeps the lines before it; free it either way). */
int vr_tids_read(FILE *f, const char *name, int vocab, int max_len, vr_tids_t *out);
/* path opened for reading (NULL or "-": stdin), or NULL with why = "cannot open PATH: reason"
 * (a directory is refused here: fopen takes one and only the first read fails). */
FILE *vr_tids_open(const char *path, char *why, size_t whylen);
void vr_tids_free(vr_tids_t *t);

#ifdef __cplusplus
}
#endif
#endif /* VR_TIDS_H */
