/* vr_rules_internal.h: helpers shared by the vr_rules sources (not installed). */
#ifndef VR_RULES_INTERNAL_H
#define VR_RULES_INTERNAL_H

#include <stddef.h>

/* Growable NUL-terminated byte string. Zero-initialise; on allocation failure
 * 'oom' is set and further writes are dropped (check oom once at the end). */
typedef struct vr_sb {
  char *p;
  size_t n, cap;
  int oom;
} vr_sb_t;

void vr_sb_putn(vr_sb_t *b, const char *s, size_t n);
void vr_sb_free(vr_sb_t *b);
/* Offset of needle in hay[from..n), or n when absent. */
size_t vr_find(const char *hay, size_t n, size_t from, const char *needle);
/* Writes the printf-formatted message into err (when err && errlen > 0,
 * truncated, NUL-terminated) and returns code. */
int vr_rules_fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Full math normalisation into *res (owned by the caller: vr_sb_free). 0, or -1 on OOM. */
int vr_math_normalize_sb(const char *s, size_t n, vr_sb_t *res);

#endif /* VR_RULES_INTERNAL_H */
