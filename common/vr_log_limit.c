/* vr_log_limit.c: see vr_log_limit.h. */
#include "vr_log_limit.h"

#include <stdarg.h>

#include "verl_reward/status.h"

int vr_log_limit_init(vr_log_limit_t *l, const char *cause, uint32_t burst, uint64_t window_ns) {
  if (!l || !cause || burst == 0 || window_ns == 0) return VR_ERR_INVAL;
  *l = (vr_log_limit_t){.cause = cause, .burst = burst, .window_ns = window_ns, .level = VR_LOG_INFO};
  return pthread_mutex_init(&l->mu, NULL) == 0 ? 0 : VR_ERR_NOMEM;
}

/* Lock held: the count line when lines were dropped, then no window is open. */
static void close_window(vr_log_limit_t *l, uint64_t now_ns, const char *func) {
  if (l->suppressed > 0 && vr_log_enabled(l->level))
    vr_log_impl(l->level, func, "suppressed %llu similar messages (%s) in the last %.1f s",
                (unsigned long long)l->suppressed, l->cause,
                (now_ns > l->start_ns ? now_ns - l->start_ns : 0) / 1e9);
  l->started = 0;
  l->printed = 0;
  l->suppressed = 0;
}

int vr_log_limited_at(vr_log_limit_t *l, uint64_t now_ns, vr_log_level_t level, const char *func, const char *fmt,
                      ...) {
  if (!vr_log_enabled(level)) return 0;
  pthread_mutex_lock(&l->mu);
  if (l->started && now_ns - l->start_ns >= l->window_ns) close_window(l, now_ns, func);
  if (!l->started) {
    l->started = 1;
    l->start_ns = now_ns;
  }
  int print = l->printed < l->burst;
  if (print) {
    l->printed++;
    va_list ap;
    va_start(ap, fmt);
    vr_log_vimpl(level, func, fmt, ap);
    va_end(ap);
  } else {
    l->suppressed++;
    l->level = level;
  }
  pthread_mutex_unlock(&l->mu);
  return print;
}

void vr_log_limit_flush_at(vr_log_limit_t *l, uint64_t now_ns, int force) {
  pthread_mutex_lock(&l->mu);
  if (l->started && (force || now_ns - l->start_ns >= l->window_ns)) close_window(l, now_ns, "vr_log_limit_flush");
  pthread_mutex_unlock(&l->mu);
}

void vr_log_limit_free(vr_log_limit_t *l) {
  if (!l || !l->cause) return;
  vr_log_limit_flush_at(l, vr_now_ns(), 1);
  pthread_mutex_destroy(&l->mu);
  l->cause = NULL;
}
