/* vr_line: bounded line reading against getline on the same bytes: lines at, one under and one
 * over the bound, NUL bytes inside a line, a last line without '\n', an empty file, and the line
 * after a too-long one read whole (the too-long one consumed through its newline, its length
 * counted, never more than the bound kept). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vr_line.h"

static FILE *from(const char *bytes, size_t n) {
  FILE *f = tmpfile();
  assert_non_null(f);
  assert_int_equal(fwrite(bytes, 1, n, f), n);
  rewind(f);
  return f;
}

static void test_bounds_and_nul(void **state) {
  (void)state;
  /* lines of 4 ("abc\n"), 5 ("abcd\n": one over a bound of 4), 6 with a NUL, then "xy" (no '\n') */
  static const char bytes[] = "abc\nabcd\nab\0cd\nxy";
  FILE *f = from(bytes, sizeof bytes - 1);
  char *buf = NULL;
  size_t cap = 0, len = 0;
  assert_int_equal(vr_line_read(f, 4, &buf, &cap, &len), 0);
  assert_int_equal(len, 4);
  assert_memory_equal(buf, "abc\n", 5);
  assert_int_equal(vr_line_read(f, 4, &buf, &cap, &len), VR_LINE_TOO_LONG);
  assert_int_equal(len, 5);
  assert_memory_equal(buf, "abcd", 5); /* the first 4 bytes, NUL-terminated */
  assert_true(cap <= 5);                /* never more than the bound (+ NUL) kept */
  assert_int_equal(vr_line_read(f, 64, &buf, &cap, &len), 0);
  assert_int_equal(len, 6);
  assert_memory_equal(buf, "ab\0cd\n", 7);
  assert_int_equal(vr_line_read(f, 64, &buf, &cap, &len), 0);
  assert_int_equal(len, 2);
  assert_string_equal(buf, "xy");
  assert_int_equal(vr_line_read(f, 64, &buf, &cap, &len), VR_LINE_EOF);
  fclose(f);
  free(buf);
}

static void test_matches_getline(void **state) {
  (void)state;
  /* seeded bytes with newlines at random places: every line equals getline's when under the bound */
  char bytes[20000];
  uint64_t x = 12345;
  for (size_t i = 0; i < sizeof bytes; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    bytes[i] = (x >> 60) == 0 ? '\n' : (char)(x >> 33);
  }
  FILE *a = from(bytes, sizeof bytes), *b = from(bytes, sizeof bytes);
  char *buf = NULL, *ref = NULL;
  size_t cap = 0, rcap = 0, len = 0, lines = 0, long_lines = 0;
  for (;;) {
    ssize_t n = getline(&ref, &rcap, b);
    int r = vr_line_read(a, 40, &buf, &cap, &len);
    if (n < 0) {
      assert_int_equal(r, VR_LINE_EOF);
      break;
    }
    assert_int_equal(len, (size_t)n);
    if ((size_t)n <= 40) {
      assert_int_equal(r, 0);
      assert_memory_equal(buf, ref, (size_t)n);
    } else {
      assert_int_equal(r, VR_LINE_TOO_LONG);
      assert_memory_equal(buf, ref, 40);
      long_lines++;
    }
    lines++;
  }
  assert_true(lines > 100 && long_lines > 10); /* both kinds were seen */
  fclose(a), fclose(b);
  free(buf), free(ref);
  FILE *e = from("", 0);
  assert_int_equal(vr_line_read(e, 8, &buf, &cap, &len), VR_LINE_EOF);
  fclose(e);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_bounds_and_nul), cmocka_unit_test(test_matches_getline)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
