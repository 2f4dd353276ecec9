#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "vr_log.h"

static int count;
static void capture(vr_log_level_t level, const char *line, void *user) { (void)level; (void)line; (void)user; count++; }

static void test_env_level(void **state) {
  (void)state;
  vr_log_set_sink(capture, NULL);
  assert_int_equal(vr_log_get_level(), VR_LOG_ERROR);
  vr_log(VR_LOG_WARN, "filtered");
  assert_int_equal(count, 0);
  vr_log(VR_LOG_ERROR, "kept");
  assert_int_equal(count, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_env_level)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
