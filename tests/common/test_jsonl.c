/* vr_jsonl.h: one JSON value and blanks, nothing else (cJSON_ParseWithLength took the first value
 * and dropped the rest); duplicate keys as Python's json reads them (the last, at every depth) or
 * refused with the key named; a whole file's error names the path and the byte offset. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vr_jsonl.h"

static void test_one_value_only(void **state) {
  (void)state;
  static const struct {
    const char *text;
    size_t len; /* 0: strlen */
    int ok;
    size_t at;
  } cases[] = {
      {"{\"a\": 1}", 0, 1, 0},          {"{\"a\": 1} \t\r\n", 0, 1, 0}, {"{\"a\": 1} junk", 0, 0, 9},
      {"{\"a\": 1}{\"a\": 2}", 0, 0, 8}, {"{\"a\": 1}\0{}", 11, 0, 8},  {"{\"a\": 1}  \f", 0, 0, 10},
      {"[1] [2]", 0, 0, 4},              {"{\"a\": ", 0, 0, 5},          {"", 0, 0, 0},
      /* cJSON skips every byte below 0x20 between tokens and keeps raw ones in strings */
      {"{\"a\":\f1}", 0, 0, 5},           {"{\"a\":\0001}", 8, 0, 5},      {"{\"a\": \"x\ty\"}", 0, 0, 8},
      {"{\"a\\\"\": \"\\\"\"}\r\n", 0, 1, 0},
      /* numbers: cJSON's strtod takes these, JSON (Python, serde) does not */
      {"[01]", 0, 0, 1}, {"[1.]", 0, 0, 1}, {"[2, -01.5]", 0, 0, 4}, {"{\"a\": 1.e5}", 0, 0, 6},
      {"[0, -0, 0.5, 1e5, 1E+05, -12.25e-3, \"01\", 10]", 0, 1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *why = NULL;
    size_t at = 99, n = cases[i].len ? cases[i].len : strlen(cases[i].text);
    cJSON *v = vr_jsonl_parse(cases[i].text, n, &why, &at);
    assert_int_equal(v != NULL, cases[i].ok);
    if (!cases[i].ok && at != cases[i].at) fail_msg("case %zu: at %zu, want %zu", i, at, cases[i].at);
    if (!cases[i].ok && cases[i].at && cases[i].text[cases[i].at - 1] == '}')
      assert_string_equal(why, "text after the JSON value");
    cJSON_Delete(v);
  }
}

static void test_duplicates(void **state) {
  (void)state;
  static const char text[] = "{\"k\": 1, \"o\": {\"x\": \"first\", \"y\": 0, \"x\": \"last\"}, \"k\": 2, \"a\": [{\"z\": 1, "
                             "\"z\": 3}], \"k\": 3}";
  char err[1400] = "";
  cJSON *v = vr_json_parse_file(text, strlen(text), "cfg.json", VR_JSON_DUP_LAST, err, sizeof err);
  assert_non_null(v);
  /* Python: json.loads(text) == {"k": 3, "o": {"x": "last", "y": 0}, "a": [{"z": 3}]} */
  char *s = cJSON_PrintUnformatted(v);
  assert_string_equal(s, "{\"o\":{\"y\":0,\"x\":\"last\"},\"a\":[{\"z\":3}],\"k\":3}");
  free(s);
  cJSON_Delete(v);
  v = vr_json_parse_file(text, strlen(text), "tokenizer.json", VR_JSON_DUP_REFUSE, err, sizeof err);
  assert_null(v);
  assert_non_null(strstr(err, "tokenizer.json: key \"x\" appears more than once"));
  /* an object of many members (the sort path), one repeat at the end */
  char big[64 * 1024];
  size_t o = (size_t)snprintf(big, sizeof big, "{");
  for (int i = 0; i < 3000; i++) o += (size_t)snprintf(big + o, sizeof big - o, "\"t%d\": %d, ", i, i);
  o += (size_t)snprintf(big + o, sizeof big - o, "\"t17\": -1}");
  v = vr_json_parse_file(big, o, "vocab", VR_JSON_DUP_LAST, err, sizeof err);
  assert_non_null(v);
  assert_int_equal(cJSON_GetArraySize(v), 3000);
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(v, "t17")->valueint, -1);
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(v, "t18")->valueint, 18);
  cJSON_Delete(v);
  assert_null(vr_json_parse_file(big, o, "vocab", VR_JSON_DUP_REFUSE, err, sizeof err));
  assert_non_null(strstr(err, "\"t17\""));
}

static void test_file_messages(void **state) {
  (void)state;
  char err[1400] = "";
  assert_null(vr_json_parse_file("{\"a\": 1}\n}", 10, "/m/config.json", VR_JSON_DUP_LAST, err, sizeof err));
  assert_string_equal(err, "/m/config.json: text after the JSON value at byte offset 9 (one JSON value per file: "
                           "Python's json calls this 'Extra data', serde_json 'trailing characters')");
  assert_null(vr_json_parse_file("{\"a\": }", 7, "/m/config.json", VR_JSON_DUP_LAST, err, sizeof err));
  assert_string_equal(err, "/m/config.json: malformed JSON at byte offset 6");
  assert_int_equal(vr_jsonl_dup(NULL, "a"), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_one_value_only), cmocka_unit_test(test_duplicates),
                                     cmocka_unit_test(test_file_messages)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
