/* vr_time.h: monotonic clocks (header-only). */
#ifndef VR_TIME_H
#define VR_TIME_H
#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC. */
static inline uint64_t vr_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static inline uint64_t vr_now_us(void) { return vr_now_ns() / 1000u; }

/* A vr_now_ns() deadline as the timespec pthread_cond_timedwait takes (for a
 * condition variable made by vr_cond_init_monotonic). */
static inline struct timespec vr_timespec_at(uint64_t deadline_ns) {
  struct timespec ts;
  ts.tv_sec = (time_t)(deadline_ns / 1000000000u);
  ts.tv_nsec = (long)(deadline_ns % 1000000000u);
  return ts;
}

/* Initialises cv to time its waits on CLOCK_MONOTONIC (the vr_now_ns clock). */
static inline int vr_cond_init_monotonic(pthread_cond_t *cv) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
  return rc;
}
#endif
