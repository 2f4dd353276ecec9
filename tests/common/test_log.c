/* Logging: level filtering, parsing, env default, one line per event through the sink. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vr_log.h"

static char last[4096];
static int count;
static vr_log_level_t last_level;

static void capture(vr_log_level_t level, const char *line, void *user) {
  (void)user;
  snprintf(last, sizeof last, "%s", line);
  last_level = level;
  count++;
}

static void test_filtering(void **state) {
  (void)state;
  vr_log_set_sink(capture, NULL);
  vr_log_set_level(VR_LOG_WARN);
  count = 0;
  vr_log(VR_LOG_DEBUG, "hidden %d", 1);
  vr_log(VR_LOG_INFO, "hidden %d", 2);
  assert_int_equal(count, 0);
  vr_log(VR_LOG_WARN, "shown %d", 3);
  assert_int_equal(count, 1);
  assert_int_equal(last_level, VR_LOG_WARN);
  assert_non_null(strstr(last, "shown 3"));
  assert_non_null(strstr(last, " W [test_filtering] "));
  vr_log(VR_LOG_ERROR, "multi\nline");
  assert_int_equal(count, 2);
  assert_null(strchr(last, '\n'));
  vr_log_set_level(VR_LOG_OFF);
  vr_log(VR_LOG_FATAL, "nothing");
  assert_int_equal(count, 2);
  vr_log_set_level(VR_LOG_TRACE);
  vr_log(VR_LOG_TRACE, "all");
  assert_int_equal(count, 3);
  vr_log_set_sink(NULL, NULL);
}

static void test_parse(void **state) {
  (void)state;
  vr_log_level_t lv;
  assert_int_equal(vr_log_level_parse("DEBUG", &lv), 0);
  assert_int_equal(lv, VR_LOG_DEBUG);
  assert_int_equal(vr_log_level_parse("warning", &lv), 0);
  assert_int_equal(lv, VR_LOG_WARN);
  assert_int_equal(vr_log_level_parse("loud", &lv), -1);
  assert_int_equal(vr_log_level_parse(NULL, &lv), -1);
  assert_string_equal(vr_log_level_name(VR_LOG_ERROR), "error");
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_filtering), cmocka_unit_test(test_parse)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
