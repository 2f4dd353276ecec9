/* vr_line.h: one line of a text file, with a bound on what is kept in memory.
 *
 * getline() keeps the whole line whatever its length: a file with no newline (a binary file given
 * as --input, a 10 GB JSON dump) would be read into memory in full before any length check could
 * refuse it. vr_line_read keeps at most max bytes of a line, reads past the rest to the newline
 * (counting it) and says the line was too long, so the caller can name the line and move on.
 *
 * Threading: none; buf/cap are the caller's (free(*buf) when done, as with getline). */
#ifndef VR_LINE_H
#define VR_LINE_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VR_LINE_EOF (-1)      /* end of file (or a read error: check ferror) before any byte */
#define VR_LINE_TOO_LONG (-2) /* the line had more than max bytes; *len is its full length */
#define VR_LINE_NOMEM (-3)    /* *buf could not grow (what was read of the line is lost) */

/* Reads one line of f into *buf (grown with realloc, NUL-terminated, the '\n' kept as getline
 * does). 0 with *len its length (<= max; NUL bytes inside count), VR_LINE_TOO_LONG (the line
 * consumed through its '\n', *buf holds its first max bytes), VR_LINE_EOF or VR_LINE_NOMEM. */
int vr_line_read(FILE *f, size_t max, char **buf, size_t *cap, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* VR_LINE_H */
