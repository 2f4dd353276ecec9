/* vr_progress: the line's fields (bytes, items, rate, ETA) from a given clock, and the rate limit
 * (interval_ns set by the test, so nothing depends on how fast this machine runs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "vr_log.h"
#include "vr_progress.h"

static char lines[8][256];
static int count;

static void capture(vr_log_level_t level, const char *line, void *user) {
  (void)user;
  assert_int_equal(level, VR_LOG_INFO);
  if (count < 8) snprintf(lines[count], sizeof lines[count], "%s", line);
  count++;
}

static void test_format(void **state) {
  (void)state;
  vr_progress_t p;
  vr_progress_begin(&p, "cuda:0 weights upload", "layers", 32, 1024ull << 20);
  p.done_bytes = 256ull << 20;
  p.done_items = 8;
  char buf[256];
  vr_progress_format(&p, p.t0_ns + 2000000000ull, 0, buf, sizeof buf);
  /* a quarter in 2 s: 128 MiB/s, 6 s left */
  assert_string_equal(buf, "cuda:0 weights upload: 256.0/1024.0 MiB (25.0%), 8/32 layers, 128.0 MiB/s, ETA 6.0 s");
  vr_progress_format(&p, p.t0_ns + 2000000000ull, 1, buf, sizeof buf);
  assert_string_equal(buf, "cuda:0 weights upload: done, 256.0 MiB, 8 layers in 2.0 s (128.0 MiB/s)");
  /* no byte total: the ETA from the items */
  vr_progress_begin(&p, "cuda:0 warm-up", "token buckets", 10, 0);
  p.done_items = 4;
  vr_progress_format(&p, p.t0_ns + 4000000000ull, 0, buf, sizeof buf);
  assert_string_equal(buf, "cuda:0 warm-up: 4/10 token buckets (40.0%), ETA 6.0 s");
  p.done_items = 0;
  vr_progress_format(&p, p.t0_ns + 1000000000ull, 0, buf, sizeof buf);
  assert_string_equal(buf, "cuda:0 warm-up: 0/10 token buckets (0.0%), ETA unknown");
  /* work weights: 3 of 4 buckets done but only 1/8 of the tokens (the big one is left) */
  vr_progress_begin(&p, "cuda:0 warm-up", "token buckets", 4, 0);
  p.total_work = 64 + 128 + 256 + 3648;
  vr_progress_work(&p, 64 + 128 + 256);
  p.done_items = 3;
  vr_progress_format(&p, p.t0_ns + 1000000000ull, 0, buf, sizeof buf);
  assert_string_equal(buf, "cuda:0 warm-up: 3/4 token buckets (10.9%), ETA 8.1 s");
}

static void test_rate_limit(void **state) {
  (void)state;
  vr_log_set_sink(capture, NULL);
  vr_log_set_level(VR_LOG_INFO);
  vr_progress_t p;
  /* an interval nobody reaches: silent steps, and a short job's end is silent too */
  count = 0;
  vr_progress_begin(&p, "quick", "tensors", 3, 300);
  p.interval_ns = UINT64_MAX / 2;
  for (int i = 0; i < 3; i++) vr_progress_step(&p, 1, 100);
  vr_progress_end(&p);
  assert_int_equal(count, 0);
  assert_int_equal(p.done_items, 3);
  assert_int_equal(p.done_bytes, 300);
  /* interval 0: every step prints, then the final line */
  count = 0;
  vr_progress_begin(&p, "slow", "tensors", 2, 200);
  p.interval_ns = 0;
  vr_progress_step(&p, 1, 100);
  vr_progress_step(&p, 1, 100);
  vr_progress_end(&p);
  assert_int_equal(count, 3);
  assert_non_null(strstr(lines[0], "slow: 0.0/0.0 MiB (50.0%), 1/2 tensors"));
  assert_non_null(strstr(lines[1], "2/2 tensors"));
  assert_non_null(strstr(lines[2], "slow: done, 0.0 MiB, 2 tensors in "));
  vr_log_set_sink(NULL, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_format), cmocka_unit_test(test_rate_limit)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
