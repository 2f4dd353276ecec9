/* vr_time.h: monotonic clocks (header-only). */
#ifndef VR_TIME_H
#define VR_TIME_H
#include <stdint.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC. */
static inline uint64_t vr_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static inline uint64_t vr_now_us(void) { return vr_now_ns() / 1000u; }
#endif
