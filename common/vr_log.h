/* vr_log.h: the one logging sink of the project.
 *
 * One line per event: "2026-12-01T02:30:00.123Z W [component] message".
 * The level comes from vr_log_set_level() (--log-level) or, before that is
 * called, from the VR_LOG_LEVEL environment variable (default "info").
 * The sink is replaceable (tests capture lines; a server could send them
 * to syslog). Thread-safe: a line is formatted into a local buffer and handed
 * to the sink in one call; the default sink writes it with one write(2). */
#ifndef VR_LOG_H
#define VR_LOG_H

#include <stdarg.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vr_log_level {
  VR_LOG_TRACE = 0,
  VR_LOG_DEBUG = 1,
  VR_LOG_INFO = 2,
  VR_LOG_WARN = 3,
  VR_LOG_ERROR = 4,
  VR_LOG_FATAL = 5,
  VR_LOG_OFF = 6,
} vr_log_level_t;

/* A sink gets the level and the complete line (no trailing newline). */
typedef void (*vr_log_sink_fn)(vr_log_level_t level, const char *line, void *user);

void vr_log_set_level(vr_log_level_t level);
vr_log_level_t vr_log_get_level(void);
/* Parses "trace|debug|info|warn|error|fatal|off" (case-insensitive).
 * Returns 0 and sets *out, or -1 on an unknown name. */
int vr_log_level_parse(const char *name, vr_log_level_t *out);
const char *vr_log_level_name(vr_log_level_t level);
/* Replace the sink; NULL restores the default (stderr). */
void vr_log_set_sink(vr_log_sink_fn sink, void *user);
/* True when a message at this level would be emitted (to skip costly formatting). */
int vr_log_enabled(vr_log_level_t level);

void vr_log_impl(vr_log_level_t level, const char *func, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void vr_log_vimpl(vr_log_level_t level, const char *func, const char *fmt, va_list ap);

/* vr_log(VR_LOG_WARN, "lane %d reset: %s", i, why); the function name is added. */
#define vr_log(level, ...)                                  \
  do {                                                      \
    if (vr_log_enabled(level)) vr_log_impl((level), __func__, __VA_ARGS__); \
  } while (0)

/* Broken invariant: log with file/line and abort (never for bad input). */
#define VR_ASSERT(cond)                                                               \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      vr_log_impl(VR_LOG_FATAL, __func__, "assertion failed: %s (%s:%d)", #cond,      \
                  __FILE__, __LINE__);                                                \
      abort();                                                                        \
    }                                                                                 \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif /* VR_LOG_H */
