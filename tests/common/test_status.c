/* Status table: every code has a distinct value, a name and a message; unknown codes are handled. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "verl_reward/status.h"

static const struct { int value; const char *name; const char *msg; } table[] = {
#define ROW(n, v, m) {v, #n, m},
    VR_STATUS_TABLE(ROW)
#undef ROW
};
enum { N = sizeof table / sizeof table[0] };

static void test_round_trip(void **state) {
  (void)state;
  for (int i = 0; i < N; i++) {
    assert_string_equal(vr_status_name(table[i].value), table[i].name);
    assert_string_equal(vr_strerror(table[i].value), table[i].msg);
    assert_true(table[i].value <= 0);
    for (int j = i + 1; j < N; j++) assert_int_not_equal(table[i].value, table[j].value);
  }
  assert_int_equal(VR_OK, 0);
  assert_string_equal(vr_strerror(VR_ERR_TIMEOUT), "timed out");
}

static void test_unknown(void **state) {
  (void)state;
  assert_string_equal(vr_strerror(12345), "unknown status");
  assert_string_equal(vr_status_name(-9999), "VR_ERR_UNKNOWN");
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_round_trip), cmocka_unit_test(test_unknown)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
