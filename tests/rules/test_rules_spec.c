/* Reward spec parsing: valid specs give the expected components; every kind of
 * bad spec fails with VR_ERR_INVAL and a message naming the problem; the
 * canonical form parses back to the same spec. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "verl_reward/status.h"
#include "vr_rules.h"

static void test_valid(void **state) {
  (void)state;
  vr_reward_spec_t sp;
  char err[256] = "";
  assert_int_equal(vr_reward_spec_parse("model:0.7,gsm8k:0.3", &sp, err, sizeof(err)), 0);
  assert_int_equal(sp.n, 2);
  assert_int_equal(sp.model_index, 0);
  assert_int_equal(sp.needs_extras, 1);
  assert_int_equal(sp.rules[0].kind, VR_RULE_MODEL);
  assert_string_equal(sp.rules[0].name, "model");
  assert_float_equal(sp.rules[0].weight, 0.7f, 1e-7f);
  assert_int_equal(sp.rules[1].kind, VR_RULE_GSM8K);
  assert_int_equal(sp.rules[1].flexible, 0);
  assert_float_equal(sp.rules[1].weight, 0.3f, 1e-7f);

  assert_int_equal(vr_reward_spec_parse("gsm8k", &sp, err, sizeof(err)), 0);
  assert_int_equal(sp.n, 1);
  assert_int_equal(sp.model_index, -1); /* rules only: no model needed */
  assert_float_equal(sp.rules[0].weight, 1.0f, 0);

  assert_int_equal(vr_reward_spec_parse("overlong(max_len=4096,buffer=512,factor=1.0):1", &sp, err, sizeof(err)), 0);
  assert_int_equal(sp.rules[0].kind, VR_RULE_OVERLONG);
  assert_int_equal(sp.rules[0].max_len, 4096);
  assert_int_equal(sp.rules[0].buffer, 512);
  assert_float_equal(sp.rules[0].factor, 1.0f, 0);
  assert_int_equal(sp.needs_extras, 0);
  assert_int_equal(sp.model_index, -1);

  assert_int_equal(vr_reward_spec_parse(" model : 1 , math:0.5 , overlong ( max_len = 100 , buffer = 20 ) : -0.5 ", &sp, err, sizeof(err)), 0);
  assert_int_equal(sp.n, 3);
  assert_int_equal(sp.rules[2].max_len, 100);
  assert_int_equal(sp.rules[2].buffer, 20);
  assert_float_equal(sp.rules[2].factor, 1.0f, 0); /* default */
  assert_float_equal(sp.rules[2].weight, -0.5f, 0);

  assert_int_equal(vr_reward_spec_parse("gsm8k(mode=flexible),gsm8k_flexible:2,exact_match_ci:0,exact_match(ignore_case=true),auto,math", &sp, err, sizeof(err)), 0);
  assert_int_equal(sp.n, 6);
  assert_int_equal(sp.rules[0].flexible, 1);
  assert_int_equal(sp.rules[1].flexible, 1);
  assert_string_equal(sp.rules[1].name, "gsm8k_flexible");
  assert_int_equal(sp.rules[2].ignore_case, 1);
  assert_int_equal(sp.rules[2].ignore_space, 1);
  assert_float_equal(sp.rules[2].weight, 0.0f, 0);
  assert_int_equal(sp.rules[3].ignore_case, 1);
  assert_int_equal(sp.rules[3].ignore_space, 0);
  assert_int_equal(sp.rules[4].kind, VR_RULE_AUTO);
  assert_int_equal(sp.rules[5].kind, VR_RULE_MATH);

  assert_int_equal(vr_reward_spec_parse("math:1e-3,model:2", &sp, err, sizeof(err)), 0);
  assert_int_equal(sp.model_index, 1);
  assert_float_equal(sp.rules[0].weight, 1e-3f, 1e-9f);
}

static void test_errors(void **state) {
  (void)state;
  static const struct { const char *spec, *msg; } t[] = {
      {"", "empty"},
      {"   ", "empty"},
      {"foo", "unknown component 'foo'"},
      {"model:0.7,bogus:1", "unknown component 'bogus'"},
      {"gsm8k,gsm8k", "given twice"},
      {"model:abc", "bad weight for model"},
      {"model:", "bad weight for model"},
      {"model:nan", "bad weight"},
      {"model:inf", "bad weight"},
      {"model:1e400", "bad weight"},
      {"model:1e7", "out of range"},
      {"model:1,", "expected a component name"},
      {",model", "expected a component name"},
      {"model;gsm8k", "unexpected ';'"},
      {"model 1", "unexpected '1'"},
      {"model(x=1)", "has no option 'x'"},
      {"gsm8k(mode=fuzzy)", "strict|flexible"},
      {"gsm8k_flexible(mode=strict)", "has no option 'mode'"},
      {"exact_match(ignore_case=2)", "want 0|1"},
      {"overlong(max_len=0)", "overlong.max_len"},
      {"overlong(max_len=-5)", "overlong.max_len"},
      {"overlong(max_len=99999999999)", "overlong.max_len"},
      {"overlong(buffer=5000)", "exceeds max_len"},
      {"overlong(factor=-1)", "overlong.factor"},
      {"overlong(factor=x)", "overlong.factor"},
      {"overlong(max_len=10", "expected ',' or ')'"},
      {"overlong(max_len)", "expected '='"},
      {"overlong(=5)", "expected an option name"},
      {"overlong(max_len=)", "missing or too long value"},
      {"overlong()", "expected an option name"},
      {"math:1,gsm8k:1,gsm8k_flexible:1,exact_match:1,exact_match_ci:1,overlong:1,auto:1,model:1,"
       "math:1", "given twice"},
      {"averyveryveryveryveryveryverylongname", "name too long"},
  };
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
    vr_reward_spec_t sp;
    char err[256] = "";
    int rc = vr_reward_spec_parse(t[i].spec, &sp, err, sizeof(err));
    if (rc != VR_ERR_INVAL || !strstr(err, t[i].msg))
      fail_msg("spec case %zu '%s': rc %d err '%s', want VR_ERR_INVAL with '%s'", i, t[i].spec, rc,
               err, t[i].msg);
  }
  vr_reward_spec_t sp;
  assert_int_equal(vr_reward_spec_parse(NULL, &sp, NULL, 0), VR_ERR_INVAL);
  assert_int_equal(vr_reward_spec_parse("model", NULL, NULL, 0), VR_ERR_INVAL);
  /* messages are truncated, never overflow */
  char small[8];
  assert_int_equal(vr_reward_spec_parse("nonsense", &sp, small, sizeof(small)), VR_ERR_INVAL);
  assert_int_equal(strlen(small), sizeof(small) - 1);
}

static void test_too_many(void **state) {
  (void)state;
  /* 8 distinct names is the maximum; all 8 built-ins fit */
  vr_reward_spec_t sp;
  char err[256] = "";
  assert_int_equal(vr_reward_spec_parse("math,gsm8k,gsm8k_flexible,exact_match,exact_match_ci,overlong,auto,model", &sp, err, sizeof(err)), 0);
  assert_int_equal(sp.n, VR_REWARD_MAX_COMPONENTS);
}

static void test_format_round_trip(void **state) {
  (void)state;
  static const char *const specs[] = {
      "model:0.7,gsm8k:0.3",
      "gsm8k",
      "overlong(max_len=4096,buffer=512,factor=1.0):1",
      "gsm8k(mode=flexible):0.25,exact_match(ignore_space=1):3,exact_match_ci(ignore_case=0):1",
      "math:0.1,overlong(max_len=20000,buffer=4000,factor=0.3):0.333333333,auto:-2,model:1e-5",
  };
  for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
    vr_reward_spec_t a, b;
    char buf[512], err[256] = "";
    assert_int_equal(vr_reward_spec_parse(specs[i], &a, err, sizeof(err)), 0);
    size_t need = vr_reward_spec_format(&a, buf, sizeof(buf));
    assert_int_equal(need, strlen(buf));
    if (vr_reward_spec_parse(buf, &b, err, sizeof(err))) fail_msg("'%s' -> '%s': %s", specs[i], buf, err);
    assert_int_equal(a.n, b.n);
    assert_int_equal(a.model_index, b.model_index);
    assert_int_equal(a.needs_extras, b.needs_extras);
    for (uint32_t k = 0; k < a.n; k++) {
      assert_string_equal(a.rules[k].name, b.rules[k].name);
      assert_int_equal(a.rules[k].kind, b.rules[k].kind);
      assert_true(a.rules[k].weight == b.rules[k].weight);
      assert_int_equal(a.rules[k].flexible, b.rules[k].flexible);
      assert_int_equal(a.rules[k].ignore_case, b.rules[k].ignore_case);
      assert_int_equal(a.rules[k].ignore_space, b.rules[k].ignore_space);
      if (a.rules[k].kind == VR_RULE_OVERLONG) {
        assert_int_equal(a.rules[k].max_len, b.rules[k].max_len);
        assert_int_equal(a.rules[k].buffer, b.rules[k].buffer);
        assert_true(a.rules[k].factor == b.rules[k].factor);
      }
    }
    /* a short buffer: NUL-terminated prefix, full length reported */
    char tiny[6];
    assert_int_equal(vr_reward_spec_format(&a, tiny, sizeof(tiny)), need);
    assert_true(strlen(tiny) < sizeof(tiny));
  }
  vr_reward_spec_t sp;
  char buf[128];
  assert_int_equal(vr_reward_spec_parse("model:0.7,gsm8k:0.3", &sp, NULL, 0), 0);
  vr_reward_spec_format(&sp, buf, sizeof(buf));
  assert_string_equal(buf, "model:0.7,gsm8k:0.3");
  assert_int_equal(vr_reward_spec_parse("overlong", &sp, NULL, 0), 0);
  vr_reward_spec_format(&sp, buf, sizeof(buf));
  assert_string_equal(buf, "overlong(max_len=4096,buffer=512,factor=1):1");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_valid),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_too_many),
      cmocka_unit_test(test_format_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
