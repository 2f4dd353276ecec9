/* vr_log_limit: at most burst lines per window per cause, then one count line, on a clock
 * the test drives (the _at calls); thread-safe counting. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "verl_reward/status.h"
#include "vr_log_limit.h"

#define MAX_LINES 64
static char lines[MAX_LINES][512];
static vr_log_level_t levels[MAX_LINES];
static int n_lines;

static void capture(vr_log_level_t level, const char *line, void *user) {
  (void)user;
  if (n_lines < MAX_LINES) {
    snprintf(lines[n_lines], sizeof lines[0], "%s", line);
    levels[n_lines] = level;
  }
  n_lines++;
}

static int setup(void **state) {
  (void)state;
  n_lines = 0;
  vr_log_set_sink(capture, NULL);
  vr_log_set_level(VR_LOG_INFO);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  vr_log_set_sink(NULL, NULL);
  return 0;
}

static void test_burst_then_count_line(void **state) {
  (void)state;
  vr_log_limit_t l;
  assert_int_equal(vr_log_limit_init(&l, "bad descriptor", 3, 1000), 0);
  int printed = 0;
  for (int i = 0; i < 10; i++) printed += vr_log_limited_at(&l, (uint64_t)i * 10, VR_LOG_WARN, "f", "line %d", i);
  assert_int_equal(printed, 3);
  assert_int_equal(n_lines, 3);
  for (int i = 0; i < 3; i++) {
    char want[32];
    snprintf(want, sizeof want, "line %d", i);
    assert_non_null(strstr(lines[i], want));
    assert_int_equal(levels[i], VR_LOG_WARN);
  }
  /* 999 ns after the window opened: still the same window */
  assert_int_equal(vr_log_limited_at(&l, 999, VR_LOG_WARN, "f", "line x"), 0);
  assert_int_equal(n_lines, 3);
  /* the window ended: the count line first, then this line, which opens the next window */
  assert_int_equal(vr_log_limited_at(&l, 1500, VR_LOG_WARN, "f", "line next"), 1);
  assert_int_equal(n_lines, 5);
  assert_non_null(strstr(lines[3], "suppressed 8 similar messages (bad descriptor) in the last 0.0 s"));
  assert_int_equal(levels[3], VR_LOG_WARN);
  assert_non_null(strstr(lines[4], "line next"));
  /* the new window has its own burst */
  assert_int_equal(vr_log_limited_at(&l, 1600, VR_LOG_WARN, "f", "a"), 1);
  assert_int_equal(vr_log_limited_at(&l, 1700, VR_LOG_WARN, "f", "b"), 1);
  assert_int_equal(vr_log_limited_at(&l, 1800, VR_LOG_WARN, "f", "c"), 0);
  assert_int_equal(n_lines, 7);
  vr_log_limit_free(&l); /* reports the one still counted */
  assert_int_equal(n_lines, 8);
  assert_non_null(strstr(lines[7], "suppressed 1 similar messages (bad descriptor)"));
}

static void test_no_count_line_without_drops(void **state) {
  (void)state;
  vr_log_limit_t l;
  assert_int_equal(vr_log_limit_init(&l, "quiet", 2, 1000), 0);
  for (uint64_t t = 0; t < 10000; t += 1000) assert_int_equal(vr_log_limited_at(&l, t, VR_LOG_INFO, "f", "x"), 1);
  vr_log_limit_flush_at(&l, 50000, 1);
  vr_log_limit_free(&l);
  assert_int_equal(n_lines, 10);
  for (int i = 0; i < 10; i++) assert_null(strstr(lines[i], "suppressed"));
}

static void test_flush(void **state) {
  (void)state;
  vr_log_limit_t l;
  assert_int_equal(vr_log_limit_init(&l, "accept", 1, 1000), 0);
  for (int i = 0; i < 5; i++) vr_log_limited_at(&l, 100, VR_LOG_ERROR, "f", "accept failed");
  assert_int_equal(n_lines, 1);
  vr_log_limit_flush_at(&l, 500, 0); /* window still open: nothing */
  assert_int_equal(n_lines, 1);
  vr_log_limit_flush_at(&l, 1100, 0); /* ended: the count, at the dropped lines' level */
  assert_int_equal(n_lines, 2);
  assert_non_null(strstr(lines[1], "suppressed 4 similar messages (accept) in the last 0.0 s"));
  assert_int_equal(levels[1], VR_LOG_ERROR);
  vr_log_limit_flush_at(&l, 5000, 1); /* nothing left */
  vr_log_limit_free(&l);
  assert_int_equal(n_lines, 2);
}

static void test_filtered_level_not_counted(void **state) {
  (void)state;
  vr_log_limit_t l;
  assert_int_equal(vr_log_limit_init(&l, "debug", 1, 1000), 0);
  for (int i = 0; i < 5; i++) assert_int_equal(vr_log_limited_at(&l, 1, VR_LOG_DEBUG, "f", "hidden"), 0);
  vr_log_limit_free(&l);
  assert_int_equal(n_lines, 0);
}

static void test_bad_args(void **state) {
  (void)state;
  vr_log_limit_t l;
  assert_int_equal(vr_log_limit_init(&l, "x", 0, 1000), VR_ERR_INVAL);
  assert_int_equal(vr_log_limit_init(&l, "x", 1, 0), VR_ERR_INVAL);
  assert_int_equal(vr_log_limit_init(&l, NULL, 1, 1), VR_ERR_INVAL);
  assert_int_equal(vr_log_limit_init(NULL, "x", 1, 1), VR_ERR_INVAL);
}

#define THREADS 4
#define PER_THREAD 2000
static void *hammer(void *arg) {
  vr_log_limit_t *l = arg;
  long printed = 0;
  for (int i = 0; i < PER_THREAD; i++) printed += vr_log_limited_at(l, 7, VR_LOG_WARN, "t", "from a thread");
  return (void *)printed;
}

static void test_threads(void **state) {
  (void)state;
  vr_log_limit_t l;
  assert_int_equal(vr_log_limit_init(&l, "threads", 10, 1000), 0);
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&th[i], NULL, hammer, &l), 0);
  long printed = 0;
  for (int i = 0; i < THREADS; i++) {
    void *r;
    pthread_join(th[i], &r);
    printed += (long)r;
  }
  assert_int_equal(printed, 10);
  assert_int_equal(n_lines, 10);
  vr_log_limit_flush_at(&l, 2000, 0);
  assert_int_equal(n_lines, 11);
  char want[96];
  snprintf(want, sizeof want, "suppressed %d similar messages (threads)", THREADS * PER_THREAD - 10);
  assert_non_null(strstr(lines[10], want));
  vr_log_limit_free(&l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_burst_then_count_line, setup, teardown),
      cmocka_unit_test_setup_teardown(test_no_count_line_without_drops, setup, teardown),
      cmocka_unit_test_setup_teardown(test_flush, setup, teardown),
      cmocka_unit_test_setup_teardown(test_filtered_level_not_counted, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_args, setup, teardown),
      cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
