/* vr_log.c: level filter + replaceable sink; see vr_log.h for the contract. */
#define _GNU_SOURCE
#include "vr_log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static const char *const level_names[] = {"trace", "debug", "info", "warn", "error", "fatal", "off"};
static const char level_chars[] = "TDIWEF-";

/* The logger's settings: the one mutable file-scope object in common/ (a
 * process has one log). Atomics: set from any thread, read by every vr_log. */
static struct {
  _Atomic int level;             /* vr_log_level_t; -1 = not yet read from VR_LOG_LEVEL */
  _Atomic(vr_log_sink_fn) sink;  /* NULL = stderr; left to zero-initialisation: clang rejects NULL for an _Atomic function pointer */
  void *_Atomic sink_user;
} g_log = {.level = -1};

int vr_log_level_parse(const char *name, vr_log_level_t *out) {
  if (!name) return -1;
  for (int i = 0; i <= VR_LOG_OFF; i++) {
    if (strcasecmp(name, level_names[i]) == 0) {
      *out = (vr_log_level_t)i;
      return 0;
    }
  }
  if (strcasecmp(name, "warning") == 0) {
    *out = VR_LOG_WARN;
    return 0;
  }
  return -1;
}

const char *vr_log_level_name(vr_log_level_t level) {
  if ((int)level < 0 || level > VR_LOG_OFF) return "?";
  return level_names[level];
}

static int level_now(void) {
  int lv = atomic_load_explicit(&g_log.level, memory_order_relaxed);
  if (lv >= 0) return lv;
  vr_log_level_t parsed = VR_LOG_INFO;
  const char *env = getenv("VR_LOG_LEVEL");
  if (env && vr_log_level_parse(env, &parsed) != 0) parsed = VR_LOG_INFO;
  int expected = -1;
  atomic_compare_exchange_strong(&g_log.level, &expected, (int)parsed);
  return atomic_load(&g_log.level);
}

void vr_log_set_level(vr_log_level_t level) { atomic_store(&g_log.level, (int)level); }
vr_log_level_t vr_log_get_level(void) { return (vr_log_level_t)level_now(); }
int vr_log_enabled(vr_log_level_t level) { return (int)level >= level_now() && level < VR_LOG_OFF; }

void vr_log_set_sink(vr_log_sink_fn sink, void *user) {
  atomic_store(&g_log.sink_user, user);
  atomic_store(&g_log.sink, sink);
}

void vr_log_vimpl(vr_log_level_t level, const char *func, const char *fmt, va_list ap) {
  if (!vr_log_enabled(level)) return;
  char line[2048];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %c [%s] ",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                   tm.tm_sec, ts.tv_nsec / 1000000, level_chars[level], func ? func : "-");
  if (n < 0) return;
  if ((size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  /* one event = one line: newlines inside a message become spaces */
  for (char *p = line; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
  vr_log_sink_fn sink = atomic_load(&g_log.sink);
  if (sink) {
    sink(level, line, atomic_load(&g_log.sink_user));
    return;
  }
  size_t len = strlen(line);
  char out[sizeof line + 1];
  memcpy(out, line, len);
  out[len] = '\n';
  ssize_t w = write(STDERR_FILENO, out, len + 1);
  (void)w;
}

void vr_log_impl(vr_log_level_t level, const char *func, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vr_log_vimpl(level, func, fmt, ap);
  va_end(ap);
}
