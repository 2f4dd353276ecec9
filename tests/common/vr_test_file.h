/* vr_test_file.h: a whole (fixture) file read into memory, for the tests' golden files.
 * Header-only: the tests that use it link different libraries. */
#ifndef VR_TEST_FILE_H
#define VR_TEST_FILE_H

#include <stdio.h>
#include <stdlib.h>

/* path's bytes, malloc'd and NUL-terminated (*len, when len is not NULL: their count), or NULL
 * when it cannot be opened, sized, read whole or allocated. The caller frees it. */
static inline char *vr_test_slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  char *b = n >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)n + 1) : NULL;
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  if (b) {
    b[n] = 0;
    if (len) *len = (size_t)n;
  }
  return b;
}

#endif /* VR_TEST_FILE_H */
