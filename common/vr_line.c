/* vr_line.c: bounded line reading (vr_line.h). */
#include "vr_line.h"

#include <stdlib.h>

int vr_line_read(FILE *f, size_t max, char **buf, size_t *cap, size_t *len) {
  size_t n = 0, kept = 0;
  int c;
  flockfile(f);
  while ((c = getc_unlocked(f)) != EOF) {
    if (kept < max) {
      if (kept + 2 > *cap) { /* room for this byte and the NUL */
        size_t nc = *cap ? *cap * 2 : 256;
        while (nc < kept + 2) nc *= 2;
        if (nc > max + 1) nc = max + 1 > kept + 2 ? max + 1 : kept + 2;
        char *nb = realloc(*buf, nc);
        if (!nb) {
          funlockfile(f);
          return VR_LINE_NOMEM;
        }
        *buf = nb, *cap = nc;
      }
      (*buf)[kept++] = (char)c;
    }
    n++;
    if (c == '\n') break;
  }
  funlockfile(f);
  if (n == 0) return VR_LINE_EOF;
  if (*buf) (*buf)[kept] = 0;
  *len = n;
  return n > max ? VR_LINE_TOO_LONG : 0;
}
