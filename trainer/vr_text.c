/* vr_text.c: bounded appender, JSON strings, diagnostics; see vr_text.h. */
#include "vr_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void vr_text_init(vr_text_t *t, char *buf, size_t cap) {
  t->buf = buf;
  t->cap = buf ? cap : 0;
  t->len = 0;
  if (t->cap) t->buf[0] = '\0';
}

static void text_vadd(vr_text_t *t, const char *fmt, va_list ap) {
  if (t->len + 1 >= t->cap) return;
  int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
  if (n < 0) {
    t->buf[t->len] = '\0';
    return;
  }
  t->len += (size_t)n < t->cap - t->len ? (size_t)n : t->cap - t->len - 1;
}

void vr_text_add(vr_text_t *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  text_vadd(t, fmt, ap);
  va_end(ap);
}

void vr_text_json_str(vr_text_t *t, const char *s) {
  if (!s) {
    vr_text_add(t, "null");
    return;
  }
  vr_text_add(t, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') vr_text_add(t, "\\%c", *p);
    else if (*p == '\n') vr_text_add(t, "\\n");
    else if (*p == '\t') vr_text_add(t, "\\t");
    else if (*p < 0x20 || *p == 0x7f) vr_text_add(t, "\\u%04x", *p);
    else vr_text_add(t, "%c", *p);
  }
  vr_text_add(t, "\"");
}

const char *vr_text_clip(const char *s, char *buf, size_t cap) {
  if (!cap) return "";
  buf[0] = '\0';
  if (!s) return buf;
  size_t n = strlen(s), keep = n;
  const char *tail = "";
  if (n + 1 > cap) {
    keep = cap > 4 ? cap - 4 : 0;
    while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80) keep--; /* not inside a character */
    tail = cap > 4 ? "..." : "";
  }
  for (size_t i = 0; i < keep; i++) {
    unsigned char c = (unsigned char)s[i];
    buf[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
  }
  snprintf(buf + keep, cap - keep, "%s", tail);
  return buf;
}

void vr_diag_init(vr_diag_t *d, const char *name, char *buf, size_t cap) {
  memset(d, 0, sizeof *d);
  d->name = name ? name : "(text)";
  vr_text_init(&d->out, buf, cap);
}

void vr_diag_vadd(vr_diag_t *d, const char *level, int line, int col, const char *fmt, va_list ap) {
  if (level[0] == 'e') d->n_errors++;
  else d->n_warnings++;
  if (d->n_dropped) { /* full: once one line is left out, all later ones are (order kept) */
    d->n_dropped++;
    return;
  }
  char msg[2048];
  int n = line > 0 ? snprintf(msg, sizeof msg, "%s:%d:%d: %s: ", d->name, line, col, level)
                   : snprintf(msg, sizeof msg, "%s: %s: ", d->name, level);
  if (n < 0 || (size_t)n >= sizeof msg) n = 0;
  vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
  size_t len = strlen(msg);
  vr_text_t *t = &d->out;
  /* whole lines only, keeping room for vr_diag_finish's note; the first line always goes in */
  if (t->len > 0 && t->len + len + 1 + VR_DIAG_RESERVE >= t->cap) {
    d->n_dropped++;
    return;
  }
  vr_text_add(t, "%s\n", msg);
}

void vr_diag_error(vr_diag_t *d, int line, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vr_diag_vadd(d, "error", line, col, fmt, ap);
  va_end(ap);
}

void vr_diag_warning(vr_diag_t *d, int line, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vr_diag_vadd(d, "warning", line, col, fmt, ap);
  va_end(ap);
}

int vr_diag_full(const vr_diag_t *d) { return d->n_dropped > 0; }

/* One message line of the buffer and where it points in the file. */
typedef struct diag_line {
  const char *s;
  size_t n;
  long line, col;
  int seq;
} diag_line_t;

static int diag_line_cmp(const void *pa, const void *pb) {
  const diag_line_t *a = pa, *b = pb;
  if (a->line != b->line) return a->line < b->line ? -1 : 1;
  if (a->col != b->col) return a->col < b->col ? -1 : 1;
  return a->seq - b->seq;
}

/* Puts the lines in file order (whole-file messages first); the checks report in the order
 * they run. Only whole lines are moved; on a failed allocation the order stays as it is. */
static void diag_sort(vr_diag_t *d) {
  vr_text_t *t = &d->out;
  if (t->len == 0 || t->buf[t->len - 1] != '\n') return;
  int n = 0;
  for (size_t i = 0; i < t->len; i++) n += t->buf[i] == '\n';
  char *copy = malloc(t->len);
  diag_line_t *ls = malloc((size_t)n * sizeof *ls);
  if (copy && ls) {
    memcpy(copy, t->buf, t->len);
    size_t name_len = strlen(d->name), at = 0;
    for (int k = 0; k < n; k++) {
      const char *s = copy + at, *e = memchr(s, '\n', t->len - at);
      diag_line_t *l = &ls[k];
      l->s = s;
      l->n = (size_t)(e - s) + 1;
      l->seq = k;
      l->line = l->col = 0;
      if (l->n > name_len + 1 && s[name_len] == ':' && s[name_len + 1] >= '0' && s[name_len + 1] <= '9') {
        char *end;
        l->line = strtol(s + name_len + 1, &end, 10);
        if (*end == ':') l->col = strtol(end + 1, NULL, 10);
      }
      at += l->n;
    }
    qsort(ls, (size_t)n, sizeof *ls, diag_line_cmp);
    at = 0;
    for (int k = 0; k < n; k++) {
      memcpy(t->buf + at, ls[k].s, ls[k].n);
      at += ls[k].n;
    }
  }
  free(copy);
  free(ls);
}

void vr_diag_finish(vr_diag_t *d) {
  diag_sort(d);
  if (d->n_dropped == 0) return;
  vr_text_add(&d->out, "%s: note: %d more message%s not shown (message buffer full)\n", d->name, d->n_dropped,
              d->n_dropped == 1 ? "" : "s");
}
