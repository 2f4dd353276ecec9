/* test_tids.c: the token-id line parser's bounds that the CLI tests cannot reach (vr_tids.h):
 * past 2^32 - 1 tokens in all the 32-bit cu offsets would wrap, so the line is refused with
 * VR_ERR_TOO_LARGE, out unchanged and nothing allocated; an ordinary line still parses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "verl_reward/status.h"
#include "vr_tids.h"

static const char LINE[] = "{\"input_ids\": [5, 6, 7]}";

static void test_one_line(void **state) {
  (void)state;
  char why[256] = "";
  vr_tids_t t;
  memset(&t, 0, sizeof t);
  assert_int_equal(vr_tids_parse_line(LINE, strlen(LINE), 100, 16, 1, &t, why, sizeof why), 0);
  assert_true(t.n == 1 && t.T == 3 && t.cu[1] == 3 && t.ids[2] == 7 && t.line[0] == 1);
  vr_tids_free(&t);
}

/* a run already holding 2^32 - 2 tokens (as if read before): three more would wrap cu */
static void test_past_2_32_tokens(void **state) {
  (void)state;
  char why[256] = "";
  vr_tids_t t;
  memset(&t, 0, sizeof t);
  t.T = UINT32_MAX - 1;
  assert_int_equal(vr_tids_parse_line(LINE, strlen(LINE), 100, 16, 7, &t, why, sizeof why), VR_ERR_TOO_LARGE);
  assert_non_null(strstr(why, "2^32"));
  assert_true(t.n == 0 && t.T == UINT32_MAX - 1 && t.ids == NULL && t.cu == NULL);
  t.T = 0;
  vr_tids_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_one_line), cmocka_unit_test(test_past_2_32_tokens)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
