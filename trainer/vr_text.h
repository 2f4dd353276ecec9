/* vr_text.h: bounded text output for the trainer's reports: an appender that truncates instead
 * of overflowing, JSON string escaping, and diagnostics (the "file:line:col: error: ..." lines
 * that the device-map and topology parsers collect).
 *
 * Every buffer handed to these functions stays NUL-terminated; cap 0 (or buf NULL) writes
 * nothing and still counts. Threading: plain data, one writer per object. */
#ifndef VR_TEXT_H
#define VR_TEXT_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An appender over buf[cap]: len is what it holds (at most cap - 1). */
typedef struct vr_text {
  char *buf;
  size_t cap;
  size_t len;
} vr_text_t;

void vr_text_init(vr_text_t *t, char *buf, size_t cap);
/* printf-style append, truncated to what fits. */
void vr_text_add(vr_text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a JSON string literal (quotes included): ", \ and control bytes escaped, other bytes
 * copied as they are (the callers' strings are validated UTF-8 from libyaml); NULL -> null. */
void vr_text_json_str(vr_text_t *t, const char *s);

/* A copy of s fit to quote in a one-line message: control bytes (a newline in a quoted YAML
 * key) become '?', and a text longer than cap - 1 is cut at a UTF-8 character boundary and
 * ends in "...". Returns buf; s NULL gives "". */
const char *vr_text_clip(const char *s, char *buf, size_t cap);

/* Diagnostics of one file. A message is one line
 *   "name:line:col: error: <what>. HINT: <fix>"      (line and col 1-based)
 *   "name: error: <what>. HINT: <fix>"               (line 0: the file as a whole)
 * and warnings the same with "warning:". A line is written whole or not at all; a line that
 * does not fit is counted, so are all after it, and vr_diag_finish() then says how many were left out (the last
 * VR_DIAG_RESERVE bytes are kept for that note). The first line is always written, truncated
 * when even it does not fit, so a failed parse never leaves an empty message when cap > 1. */
#define VR_DIAG_RESERVE 96

typedef struct vr_diag {
  const char *name;
  vr_text_t out;
  int n_errors;
  int n_warnings;
  int n_dropped;
} vr_diag_t;

void vr_diag_init(vr_diag_t *d, const char *name, char *buf, size_t cap);
void vr_diag_error(vr_diag_t *d, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void vr_diag_warning(vr_diag_t *d, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void vr_diag_vadd(vr_diag_t *d, const char *level, int line, int col, const char *fmt, va_list ap);
/* True once a line has been left out: callers may skip costly work for later messages
 * (they are only counted). */
int vr_diag_full(const vr_diag_t *d);
/* Sorts the lines by line and column (whole-file messages first, equal positions in the order
 * they came), then appends "name: note: N more messages not shown ..." when lines were left
 * out. Call it once, last; until then the lines are in the order they were added. */
void vr_diag_finish(vr_diag_t *d);

#ifdef __cplusplus
}
#endif
#endif /* VR_TEXT_H */
