/* Extras parsing from msgpack (hand-made blobs, including malformed and
 * hostile ones) and JSON, and msgpack packing round trips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <msgpack.h>

#include "verl_reward/status.h"
#include "vr_rules.h"

/* ---- a tiny msgpack writer for hand-made blobs ---------------------------------------- */

typedef struct {
  msgpack_sbuffer sb;
  msgpack_packer pk;
} mp_t;

static void mp_init(mp_t *m) {
  msgpack_sbuffer_init(&m->sb);
  msgpack_packer_init(&m->pk, &m->sb, msgpack_sbuffer_write);
}
static void mp_str(mp_t *m, const char *s) {
  size_t n = strlen(s);
  msgpack_pack_str(&m->pk, n);
  msgpack_pack_str_body(&m->pk, s, n);
}

static int parse(mp_t *m, vr_extras_t *ex, char *err, size_t errlen) {
  return vr_extras_parse_msgpack((const uint8_t *)m->sb.data, m->sb.size, ex, err, errlen);
}

static void test_msgpack_valid(void **state) {
  (void)state;
  vr_extras_t ex;
  vr_extras_init(&ex);
  char err[256] = "";
  mp_t m;
  mp_init(&m);
  msgpack_pack_map(&m.pk, 6);
  mp_str(&m, "data_source"), mp_str(&m, "openai/gsm8k");
  mp_str(&m, "solution_str"), mp_str(&m, "so #### 72");
  mp_str(&m, "ground_truth"), msgpack_pack_int(&m.pk, 72);
  mp_str(&m, "unknown_key"), msgpack_pack_array(&m.pk, 2), msgpack_pack_nil(&m.pk), msgpack_pack_true(&m.pk);
  mp_str(&m, "extra_info");
  size_t info_at = m.sb.size;
  msgpack_pack_map(&m.pk, 1), mp_str(&m, "index"), msgpack_pack_int(&m.pk, 3);
  size_t info_end = m.sb.size;
  mp_str(&m, "other"), msgpack_pack_double(&m.pk, 1.5);
  assert_int_equal(parse(&m, &ex, err, sizeof(err)), 0);
  assert_true(ex.data_source.present);
  assert_string_equal(ex.data_source.ptr, "openai/gsm8k");
  assert_int_equal(ex.data_source.len, 12);
  assert_string_equal(ex.solution_str.ptr, "so #### 72");
  assert_string_equal(ex.ground_truth.ptr, "72");
  assert_int_equal(ex.extra_info_format, VR_INFO_MSGPACK);
  assert_int_equal(ex.extra_info.len, info_end - info_at);
  assert_memory_equal(ex.extra_info.ptr, m.sb.data + info_at, info_end - info_at);

  /* the parsed extras score */
  vr_reward_spec_t sp;
  assert_int_equal(vr_reward_spec_parse("auto", &sp, NULL, 0), 0);
  assert_true(vr_rule_score(&sp.rules[0], &ex, 0, NULL) == 1.0f);

  /* reuse of the same struct: absent fields become absent again */
  msgpack_sbuffer_clear(&m.sb);
  msgpack_pack_map(&m.pk, 3);
  mp_str(&m, "solution_str"), msgpack_pack_bin(&m.pk, 3), msgpack_pack_bin_body(&m.pk, "abc", 3);
  mp_str(&m, "ground_truth"), msgpack_pack_double(&m.pk, 2.5);
  mp_str(&m, "data_source"), msgpack_pack_nil(&m.pk);
  assert_int_equal(parse(&m, &ex, err, sizeof(err)), 0);
  assert_false(ex.data_source.present);
  assert_string_equal(ex.solution_str.ptr, "abc");
  assert_string_equal(ex.ground_truth.ptr, "2.5");
  assert_false(ex.extra_info.present);
  assert_int_equal(ex.extra_info_format, VR_INFO_NONE);

  msgpack_sbuffer_clear(&m.sb);
  msgpack_pack_map(&m.pk, 2);
  mp_str(&m, "ground_truth"), msgpack_pack_int64(&m.pk, -7);
  mp_str(&m, "solution_str"), mp_str(&m, "Ünïcode ✓ 😀");
  assert_int_equal(parse(&m, &ex, err, sizeof(err)), 0);
  assert_string_equal(ex.ground_truth.ptr, "-7");
  assert_string_equal(ex.solution_str.ptr, "Ünïcode ✓ 😀");

  msgpack_sbuffer_clear(&m.sb);
  msgpack_pack_map(&m.pk, 1);
  mp_str(&m, "ground_truth"), msgpack_pack_float(&m.pk, 0.1f);
  assert_int_equal(parse(&m, &ex, err, sizeof(err)), 0);
  assert_string_equal(ex.ground_truth.ptr, "0.1"); /* float32: shortest text that reads back as that float */

  msgpack_sbuffer_clear(&m.sb);
  msgpack_pack_map(&m.pk, 0); /* empty map: valid, nothing present */
  assert_int_equal(parse(&m, &ex, err, sizeof(err)), 0);
  assert_false(ex.solution_str.present);
  msgpack_sbuffer_destroy(&m.sb);
  vr_extras_free(&ex);
  vr_extras_free(&ex); /* idempotent */
  vr_extras_free(NULL);
}

/* Each hostile blob fails with the given status and a message containing 'msg'. */
static void test_msgpack_malformed(void **state) {
  (void)state;
#define BLOB(lit) lit, sizeof(lit) - 1
  static const struct { const char *name; const char *bytes; size_t len; int rc; const char *msg; } t[] = {
      {"empty", BLOB(""), VR_ERR_MALFORMED, "empty"},
      {"array root", BLOB("\x91\x01"), VR_ERR_MALFORMED, "not a map"},
      {"int root", BLOB("\x05"), VR_ERR_MALFORMED, "not a map"},
      {"truncated map", BLOB("\x81\xa1" "a"), VR_ERR_MALFORMED, "truncated"},
      {"truncated str", BLOB("\x81\xacsolution_str\xa5" "ab"), VR_ERR_MALFORMED, "past the end"},
      {"trailing bytes", BLOB("\x80\x00"), VR_ERR_MALFORMED, "trailing"},
      {"huge array count", BLOB("\x81\xa1x\xdd\xff\xff\xff\xff"), VR_ERR_MALFORMED, "container count"},
      {"huge map32 root", BLOB("\xdf\xff\xff\xff\xff"), VR_ERR_MALFORMED, "container count"},
      {"huge str32", BLOB("\x81\xa1x\xdb\xff\xff\xff\xff"), VR_ERR_MALFORMED, "past the end"},
      {"huge bin32", BLOB("\x81\xa1x\xc6\x7f\xff\xff\xff"), VR_ERR_MALFORMED, "past the end"},
      {"huge ext32", BLOB("\x81\xa1x\xc9\x7f\xff\xff\xff\x01"), VR_ERR_MALFORMED, "past the end"},
      {"reserved 0xc1", BLOB("\x81\xa1x\xc1"), VR_ERR_MALFORMED, "0xc1"},
      {"truncated len", BLOB("\x81\xa1x\xda\x00"), VR_ERR_MALFORMED, "length field"},
      {"solution int", BLOB("\x81\xacsolution_str\x05"), VR_ERR_MALFORMED, "solution_str has msgpack type"},
      {"source array", BLOB("\x81\xab" "data_source\x90"), VR_ERR_MALFORMED, "data_source"},
      {"truth bool", BLOB("\x81\xacground_truth\xc3"), VR_ERR_MALFORMED, "ground_truth"},
      {"truth map", BLOB("\x81\xacground_truth\x80"), VR_ERR_MALFORMED, "ground_truth"},
      {"bad utf8", BLOB("\x81\xacsolution_str\xa2\xc3\x28"), VR_ERR_MALFORMED, "UTF-8"},
      {"overlong utf8", BLOB("\x81\xacsolution_str\xa2\xc0\xaf"), VR_ERR_MALFORMED, "UTF-8"},
      {"surrogate", BLOB("\x81\xacsolution_str\xa3\xed\xa0\x80"), VR_ERR_MALFORMED, "UTF-8"},
      {"nul byte", BLOB("\x81\xacsolution_str\xa3" "a\0b"), VR_ERR_MALFORMED, "NUL"},
      {"int key", BLOB("\x81\x01\x02"), VR_ERR_MALFORMED, "not a string"},
      {"duplicate", BLOB("\x82\xacground_truth\xa1" "1\xacground_truth\xa1" "2"), VR_ERR_MALFORMED, "duplicate key ground_truth"},
      {"nan truth", BLOB("\x81\xacground_truth\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00"), VR_ERR_MALFORMED, "not finite"},
  };
  vr_extras_t ex;
  vr_extras_init(&ex);
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
    char err[256] = "";
    assert_int_equal(vr_extras_set(&ex, "x", "y", "z"), 0); /* must be cleared by a failed parse */
    int rc = vr_extras_parse_msgpack((const uint8_t *)t[i].bytes, t[i].len, &ex, err, sizeof(err));
    if (rc != t[i].rc || !strstr(err, t[i].msg))
      fail_msg("msgpack case '%s': rc %d err '%s', want %d with '%s'", t[i].name, rc, err, t[i].rc, t[i].msg);
    assert_false(ex.solution_str.present);
    assert_false(ex.ground_truth.present);
  }
  assert_int_equal(vr_extras_parse_msgpack(NULL, 5, &ex, NULL, 0), VR_ERR_INVAL);
  assert_int_equal(vr_extras_parse_msgpack((const uint8_t *)"\x80", 1, NULL, NULL, 0), VR_ERR_INVAL);
  vr_extras_free(&ex);
}

static void test_msgpack_limits(void **state) {
  (void)state;
  vr_extras_t ex;
  vr_extras_init(&ex);
  char err[256] = "";
  mp_t m;
  /* nesting: VR_EXTRAS_MAX_DEPTH levels inside extra_info are fine, one more is not */
  for (int extra = 0; extra <= 1; extra++) {
    mp_init(&m);
    msgpack_pack_map(&m.pk, 1);
    mp_str(&m, "extra_info");
    int levels = (int)VR_EXTRAS_MAX_DEPTH - 1 + extra; /* root map is depth 0, extra_info depth 1 */
    for (int i = 0; i < levels; i++) msgpack_pack_array(&m.pk, 1);
    msgpack_pack_int(&m.pk, 1);
    int rc = parse(&m, &ex, err, sizeof(err));
    if (extra == 0) assert_int_equal(rc, 0);
    else {
      assert_int_equal(rc, VR_ERR_MALFORMED);
      assert_non_null(strstr(err, "nesting"));
    }
    msgpack_sbuffer_destroy(&m.sb);
  }
  /* a very deep blob (100000 levels) fails fast without recursing that deep */
  size_t n = 100000;
  uint8_t *deep = malloc(n + 16);
  assert_non_null(deep);
  memcpy(deep, "\x81\xa1x", 3);
  memset(deep + 3, 0x91, n);
  deep[3 + n] = 0x01;
  assert_int_equal(vr_extras_parse_msgpack(deep, n + 4, &ex, err, sizeof(err)), VR_ERR_MALFORMED);
  free(deep);

  /* a known key holding a huge container is refused by type without being
   * expanded; an unknown key holding one is skipped */
  for (int known = 0; known <= 1; known++) {
    mp_init(&m);
    msgpack_pack_map(&m.pk, 2);
    mp_str(&m, known ? "solution_str" : "some_future_key");
    msgpack_pack_array(&m.pk, 1000000);
    for (int i = 0; i < 1000000; i++) msgpack_pack_nil(&m.pk);
    mp_str(&m, "ground_truth"), mp_str(&m, "7");
    int rc = parse(&m, &ex, err, sizeof(err));
    if (known) {
      assert_int_equal(rc, VR_ERR_MALFORMED);
      assert_non_null(strstr(err, "solution_str is a msgpack array"));
    } else {
      assert_int_equal(rc, 0);
      assert_string_equal(ex.ground_truth.ptr, "7");
      assert_false(ex.solution_str.present);
    }
    msgpack_sbuffer_destroy(&m.sb);
  }

  /* text limits */
  char *big = malloc(VR_EXTRAS_MAX_TEXT + 2);
  assert_non_null(big);
  memset(big, 'a', VR_EXTRAS_MAX_TEXT + 1);
  big[VR_EXTRAS_MAX_TEXT + 1] = '\0';
  for (int over = 0; over <= 1; over++) {
    mp_init(&m);
    msgpack_pack_map(&m.pk, 1);
    mp_str(&m, "solution_str");
    msgpack_pack_str(&m.pk, VR_EXTRAS_MAX_TEXT + (size_t)over);
    msgpack_pack_str_body(&m.pk, big, VR_EXTRAS_MAX_TEXT + (size_t)over);
    int rc = parse(&m, &ex, err, sizeof(err));
    if (!over) {
      assert_int_equal(rc, 0);
      assert_int_equal(ex.solution_str.len, VR_EXTRAS_MAX_TEXT);
    } else {
      assert_int_equal(rc, VR_ERR_TOO_LARGE);
      assert_non_null(strstr(err, "solution_str"));
    }
    msgpack_sbuffer_destroy(&m.sb);
  }
  mp_init(&m);
  msgpack_pack_map(&m.pk, 1);
  mp_str(&m, "data_source");
  msgpack_pack_str(&m.pk, VR_EXTRAS_MAX_SOURCE + 1);
  msgpack_pack_str_body(&m.pk, big, VR_EXTRAS_MAX_SOURCE + 1);
  assert_int_equal(parse(&m, &ex, err, sizeof(err)), VR_ERR_TOO_LARGE);
  msgpack_sbuffer_destroy(&m.sb);
  mp_init(&m);
  msgpack_pack_map(&m.pk, 1);
  mp_str(&m, "extra_info");
  msgpack_pack_str(&m.pk, VR_EXTRAS_MAX_INFO);
  msgpack_pack_str_body(&m.pk, big, VR_EXTRAS_MAX_INFO);
  assert_int_equal(parse(&m, &ex, err, sizeof(err)), VR_ERR_TOO_LARGE);
  assert_non_null(strstr(err, "extra_info"));
  msgpack_sbuffer_destroy(&m.sb);
  free(big);

  /* whole blob over VR_EXTRAS_MAX_BLOB: refused before looking inside */
  uint8_t one = 0x80;
  assert_int_equal(vr_extras_parse_msgpack(&one, (size_t)VR_EXTRAS_MAX_BLOB + 1, &ex, err, sizeof(err)), VR_ERR_TOO_LARGE);

  /* too many keys */
  mp_init(&m);
  msgpack_pack_map(&m.pk, VR_EXTRAS_MAX_KEYS + 1);
  for (unsigned i = 0; i <= VR_EXTRAS_MAX_KEYS; i++) msgpack_pack_int(&m.pk, (int)i), msgpack_pack_nil(&m.pk);
  assert_int_equal(parse(&m, &ex, err, sizeof(err)), VR_ERR_TOO_LARGE);
  msgpack_sbuffer_destroy(&m.sb);
  vr_extras_free(&ex);
}

static void test_pack_round_trip(void **state) {
  (void)state;
  vr_extras_t a, b;
  vr_extras_init(&a);
  vr_extras_init(&b);
  char err[256] = "";
  assert_int_equal(vr_extras_set(&a, "lighteval/MATH", "\\boxed{\\frac12} ✓", "0.5"), 0);
  uint8_t *buf;
  size_t len;
  assert_int_equal(vr_extras_pack_msgpack(&a, &buf, &len), 0);
  assert_int_equal(vr_extras_parse_msgpack(buf, len, &b, err, sizeof(err)), 0);
  assert_string_equal(b.data_source.ptr, "lighteval/MATH");
  assert_string_equal(b.solution_str.ptr, "\\boxed{\\frac12} ✓");
  assert_string_equal(b.ground_truth.ptr, "0.5");
  assert_false(b.extra_info.present);
  free(buf);
  /* msgpack extra_info travels verbatim; absent fields stay absent */
  const uint8_t info[] = {0x82, 0xa1, 'i', 0x03, 0xa1, 'k', 0x92, 0xc2, 0xc0};
  assert_int_equal(vr_extras_set(&a, NULL, "s", NULL), 0);
  assert_int_equal(vr_extras_set_info(&a, VR_INFO_MSGPACK, info, sizeof(info)), 0);
  /* set_info checks that raw msgpack is exactly one well-formed object */
  assert_int_equal(vr_extras_set_info(&a, VR_INFO_MSGPACK, info, sizeof(info) - 1), VR_ERR_MALFORMED);
  assert_int_equal(vr_extras_set_info(&a, VR_INFO_MSGPACK, "\x01\x02", 2), VR_ERR_MALFORMED);
  assert_int_equal(vr_extras_set_info(&a, VR_INFO_JSON, "\xff", 1), VR_ERR_MALFORMED);
  assert_int_equal(vr_extras_set_info(&a, VR_INFO_MSGPACK, info, sizeof(info)), 0);
  assert_int_equal(vr_extras_pack_msgpack(&a, &buf, &len), 0);
  assert_int_equal(vr_extras_parse_msgpack(buf, len, &b, err, sizeof(err)), 0);
  assert_false(b.data_source.present);
  assert_false(b.ground_truth.present);
  assert_string_equal(b.solution_str.ptr, "s");
  assert_int_equal(b.extra_info_format, VR_INFO_MSGPACK);
  assert_int_equal(b.extra_info.len, sizeof(info));
  assert_memory_equal(b.extra_info.ptr, info, sizeof(info));
  free(buf);
  /* JSON extra_info is packed as a string holding the JSON text */
  assert_int_equal(vr_extras_set_info(&a, VR_INFO_JSON, "{\"i\":3}", 7), 0);
  assert_int_equal(vr_extras_pack_msgpack(&a, &buf, &len), 0);
  assert_int_equal(vr_extras_parse_msgpack(buf, len, &b, err, sizeof(err)), 0);
  assert_int_equal(b.extra_info_format, VR_INFO_MSGPACK);
  assert_int_equal(b.extra_info.len, 8); /* fixstr header + 7 bytes */
  assert_memory_equal(b.extra_info.ptr + 1, "{\"i\":3}", 7);
  free(buf);
  /* empty extras pack to an empty map */
  vr_extras_clear(&a);
  assert_int_equal(vr_extras_pack_msgpack(&a, &buf, &len), 0);
  assert_int_equal(len, 1);
  assert_int_equal(buf[0], 0x80);
  free(buf);
  assert_int_equal(vr_extras_pack_msgpack(NULL, &buf, &len), VR_ERR_INVAL);
  /* setters validate */
  assert_int_equal(vr_extras_set(&a, NULL, "\xff", NULL), VR_ERR_MALFORMED);
  assert_int_equal(vr_extras_set_text(&a.solution_str, "abc", 3, 2), VR_ERR_TOO_LARGE);
  assert_int_equal(vr_extras_set_text(NULL, "abc", 3, 2), VR_ERR_INVAL);
  vr_extras_free(&a);
  vr_extras_free(&b);
}

static void test_json(void **state) {
  (void)state;
  vr_extras_t ex;
  vr_extras_init(&ex);
  char err[256] = "";
  cJSON *o = cJSON_Parse("{\"data_source\":\"openai/gsm8k\",\"solution_str\":\"#### 1,234\","
                         "\"ground_truth\":1234,\"extra_info\":{\"split\":\"test\",\"index\":[1,2]},"
                         "\"other\":true}");
  assert_non_null(o);
  assert_int_equal(vr_extras_from_json(o, &ex, err, sizeof(err)), 0);
  assert_string_equal(ex.data_source.ptr, "openai/gsm8k");
  assert_string_equal(ex.solution_str.ptr, "#### 1,234");
  assert_string_equal(ex.ground_truth.ptr, "1234");
  assert_int_equal(ex.extra_info_format, VR_INFO_JSON);
  assert_string_equal(ex.extra_info.ptr, "{\"split\":\"test\",\"index\":[1,2]}");
  vr_reward_spec_t sp;
  assert_int_equal(vr_reward_spec_parse("gsm8k", &sp, NULL, 0), 0);
  assert_true(vr_rule_score(&sp.rules[0], &ex, 0, NULL) == 1.0f);
  cJSON_Delete(o);

  o = cJSON_Parse("{\"solution_str\":\"x\",\"ground_truth\":2.5,\"extra_info\":null,\"data_source\":null}");
  assert_int_equal(vr_extras_from_json(o, &ex, err, sizeof(err)), 0);
  assert_string_equal(ex.ground_truth.ptr, "2.5");
  assert_false(ex.extra_info.present);
  assert_false(ex.data_source.present);
  cJSON_Delete(o);

  static const struct { const char *json, *msg; int rc; } bad[] = {
      {"[1,2]", "not a JSON object", VR_ERR_MALFORMED},
      {"\"str\"", "not a JSON object", VR_ERR_MALFORMED},
      {"{\"solution_str\":5}", "solution_str has the wrong JSON type", VR_ERR_MALFORMED},
      {"{\"ground_truth\":true}", "ground_truth has the wrong JSON type", VR_ERR_MALFORMED},
      {"{\"ground_truth\":[1]}", "ground_truth", VR_ERR_MALFORMED},
      {"{\"data_source\":{}}", "data_source", VR_ERR_MALFORMED},
      {"{\"ground_truth\":\"1\",\"ground_truth\":\"2\"}", "duplicate key ground_truth", VR_ERR_MALFORMED},
      {"{\"solution_str\":\"\xc3\x28\"}", "UTF-8", VR_ERR_MALFORMED},
      {"{\"extra_info\":{\"k\":\"\xff\"}}", "extra_info is not valid UTF-8", VR_ERR_MALFORMED},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    o = cJSON_Parse(bad[i].json);
    assert_non_null(o);
    int rc = vr_extras_from_json(o, &ex, err, sizeof(err));
    if (rc != bad[i].rc || !strstr(err, bad[i].msg))
      fail_msg("json case %zu %s: rc %d err '%s', want %d '%s'", i, bad[i].json, rc, err, bad[i].rc, bad[i].msg);
    assert_false(ex.solution_str.present);
    cJSON_Delete(o);
  }
  assert_int_equal(vr_extras_from_json(NULL, &ex, err, sizeof(err)), VR_ERR_INVAL);
  /* too long text and too many keys */
  cJSON *big = cJSON_CreateObject();
  char *s = malloc(VR_EXTRAS_MAX_TEXT + 2);
  memset(s, 'a', VR_EXTRAS_MAX_TEXT + 1);
  s[VR_EXTRAS_MAX_TEXT + 1] = '\0';
  cJSON_AddStringToObject(big, "solution_str", s);
  assert_int_equal(vr_extras_from_json(big, &ex, err, sizeof(err)), VR_ERR_TOO_LARGE);
  free(s);
  cJSON_Delete(big);
  big = cJSON_CreateObject();
  for (unsigned i = 0; i <= VR_EXTRAS_MAX_KEYS; i++) {
    char k[16];
    snprintf(k, sizeof(k), "k%u", i);
    cJSON_AddNumberToObject(big, k, i);
  }
  assert_int_equal(vr_extras_from_json(big, &ex, err, sizeof(err)), VR_ERR_TOO_LARGE);
  cJSON_Delete(big);
  vr_extras_free(&ex);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_msgpack_valid),   cmocka_unit_test(test_msgpack_malformed),
      cmocka_unit_test(test_msgpack_limits),  cmocka_unit_test(test_pack_round_trip),
      cmocka_unit_test(test_json),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
