/* vr_log_limit.h: rate-limited logging for causes a peer can trigger at will (a client
 * writing garbage into its lane, accept() failing at the fd limit).
 *
 * One vr_log_limit_t per cause, owned by the caller (a field of the server's context, no
 * file-scope state). Within a window of window_ns starting at the first line, at most burst
 * lines are printed; the rest are counted. The count is reported as one line at the same
 * level -- "suppressed K similar messages (cause) in the last S s" -- by the first call after
 * the window ended (before its own line) or by vr_log_limit_flush() / vr_log_limit_free().
 * So a flood of L lines in one window gives burst lines plus one count line.
 *
 * Thread-safe: every call on one limiter takes its mutex; the count line and the line that
 * follows it are written in that order. The _at variants take the time (ns, any monotonic
 * origin) so tests drive the clock; the others use vr_now_ns(). */
#ifndef VR_LOG_LIMIT_H
#define VR_LOG_LIMIT_H

#include <pthread.h>
#include <stdint.h>

#include "vr_log.h"
#include "vr_time.h"

typedef struct vr_log_limit {
  const char *cause;    /* names the count line; a static string */
  uint32_t burst;       /* lines printed per window */
  uint64_t window_ns;
  pthread_mutex_t mu;
  int started;          /* a window is open */
  uint64_t start_ns;    /* when it opened */
  uint32_t printed;     /* lines printed in it */
  uint64_t suppressed;  /* lines dropped in it */
  vr_log_level_t level; /* level of the last dropped line (the count line's) */
} vr_log_limit_t;

/* burst >= 1; window_ns > 0. Returns 0 or VR_ERR_INVAL. */
int vr_log_limit_init(vr_log_limit_t *l, const char *cause, uint32_t burst, uint64_t window_ns);
/* Reports what is still counted (whatever the window), then destroys the mutex. */
void vr_log_limit_free(vr_log_limit_t *l);

/* Logs fmt (as vr_log would, func naming the caller) unless this window's burst is spent.
 * Returns 1 when the line was printed, 0 when it was counted. */
int vr_log_limited_at(vr_log_limit_t *l, uint64_t now_ns, vr_log_level_t level, const char *func, const char *fmt,
                      ...) __attribute__((format(printf, 5, 6)));
#define vr_log_limited(l, level, ...) vr_log_limited_at((l), vr_now_ns(), (level), __func__, __VA_ARGS__)

/* Prints the count line if lines were dropped and the window ended by now_ns (force: even
 * if it has not), and closes the window. For a caller that ticks anyway (a heartbeat). */
void vr_log_limit_flush_at(vr_log_limit_t *l, uint64_t now_ns, int force);
#define vr_log_limit_flush(l) vr_log_limit_flush_at((l), vr_now_ns(), 0)

#endif /* VR_LOG_LIMIT_H */
