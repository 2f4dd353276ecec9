/* trainer_test_util.c: see trainer_test_util.h. */
#include "trainer_test_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vr_yaml.h"

void tt_fixture(char *path, size_t cap, const char *rel) {
  const char *root = getenv("VR_FIXTURES");
  snprintf(path, cap, "%s/%s", root ? root : "tests/fixtures", rel);
}

char *tt_read(const char *path, size_t *len) {
  char err[1300];
  size_t n;
  char *text = vr_yaml_read_path(path, &n, err, sizeof err); /* fixtures are far below its 1 MiB */
  if (!text) fail_msg("cannot read fixture: %s", err);
  if (len) *len = n;
  return text;
}

int tt_count(const char *err, const char *what) {
  int n = 0;
  for (const char *p = err; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

/* Calls fn on every line of err (without its '\n'). */
static void each_line(const char *err, void (*fn)(const char *line, size_t len, void *arg), void *arg) {
  for (const char *p = err; *p;) {
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    fn(p, n, arg);
    p += n + (e != NULL);
  }
}

typedef struct want {
  char prefix[1200];
  const char *frag;
  int found;
} want_t;

static void match_line(const char *line, size_t len, void *arg) {
  want_t *w = arg;
  char copy[4096];
  snprintf(copy, sizeof copy, "%.*s", (int)len, line);
  if (!strncmp(copy, w->prefix, strlen(w->prefix)) && strstr(copy, w->frag)) w->found = 1;
}

void tt_expect_line(const char *err, const char *name, int line, const char *frag) {
  want_t w = {.frag = frag};
  if (line > 0) snprintf(w.prefix, sizeof w.prefix, "%s:%d:", name, line);
  else snprintf(w.prefix, sizeof w.prefix, "%s: error:", name);
  each_line(err, match_line, &w);
  if (!w.found) fail_msg("no line starting \"%s\" with \"%s\" in:\n%s", w.prefix, frag, err);
}

static void format_line(const char *line, size_t len, void *arg) {
  const char *name = arg;
  char copy[4096];
  snprintf(copy, sizeof copy, "%.*s", (int)len, line);
  if (strncmp(copy, name, strlen(name)) || copy[strlen(name)] != ':') fail_msg("line does not name %s: %s", name, copy);
  const char *e = strstr(copy, ": error: ");
  if (e && !strstr(e, ". HINT: ")) fail_msg("error line without \". HINT: \": %s", copy);
  if (!e && !strstr(copy, ": warning: ") && !strstr(copy, ": note: ")) fail_msg("line is no message: %s", copy);
}

void tt_check_format(const char *err, const char *name) { each_line(err, format_line, (void *)name); }
