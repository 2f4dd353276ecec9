/* Table-driven cases for every rule scorer: math normalisation and \boxed
 * extraction, gsm8k strict/flexible, exact_match modes, overlong boundaries,
 * auto dispatch, missing fields, and the weighted mix. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vr_rules.h"

/* Builds a rule from a spec string with one component (fails the test on error). */
static vr_rule_t rule_of(const char *spec) {
  vr_reward_spec_t sp;
  char err[256] = "";
  int rc = vr_reward_spec_parse(spec, &sp, err, sizeof(err));
  if (rc) fail_msg("spec '%s': %s", spec, err);
  assert_int_equal(sp.n, 1);
  return sp.rules[0];
}

typedef struct {
  const char *solution, *truth;
  float score;
  int reason;
} score_case_t;

static void run_cases(const char *spec, const score_case_t *c, size_t n) {
  vr_rule_t r = rule_of(spec);
  vr_extras_t ex;
  vr_extras_init(&ex);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(vr_extras_set(&ex, NULL, c[i].solution, c[i].truth), 0);
    int reason = -1;
    float s = vr_rule_score(&r, &ex, 0, &reason);
    if (s != c[i].score || reason != c[i].reason)
      fail_msg("%s case %zu: solution='%.80s' truth='%s': got %g (%s), want %g (%s)", spec, i,
               c[i].solution, c[i].truth, (double)s, vr_reason_name(reason), (double)c[i].score,
               vr_reason_name(c[i].reason));
  }
  vr_extras_free(&ex);
}

/* ---- math ------------------------------------------------------------------------ */

static void test_math_normalize(void **state) {
  (void)state;
  static const struct { const char *in, *out; } t[] = {
      {"\\frac12", "\\frac{1}{2}"},
      {"\\dfrac{3}{4}", "\\frac{3}{4}"},
      {"\\tfrac{3}{4}", "\\frac{3}{4}"},
      {"\\left( 1, 2 \\right)", "(1,2)"},
      {"3/4", "\\frac{3}{4}"},
      {"-3/4", "\\frac{-3}{4}"},
      {"03/4", "03/4"},
      {"1/2/3", "1/2/3"},
      {"0.5", "\\frac{1}{2}"},
      {".5", "\\frac{1}{2}"},
      {"2.0", "2"},
      {"2.50", "2.5"},
      {"3.14159", "3.14159"},
      {"1.2.0", "1.2.0"},
      {"5.", "5"},
      {"10 \\text{ cm}", "10"},
      {"5\\text{cm}", "5"},
      {"\\text{(A)}", "\\text{(A)}"},
      {"90^\\circ", "90"},
      {"90^{\\circ}", "90"},
      {"50\\%", "50"},
      {"50%", "50"},
      {"\\$5", "5"},
      {"$x$", "x"},
      {"x = 5", "5"},
      {"k=\\frac{1}{2}", "\\frac{1}{2}"},
      {"abc=5", "abc=5"},
      {"a=b=c", "a=b=c"},
      {"é)=5", "5"}, /* two characters (code points) before '=', not bytes */
      {"éé)=5", "éé)=5"},
      {"\\sqrt2", "\\sqrt{2}"},
      {"\\sqrt{2}", "\\sqrt{2}"},
      {"\\frac1{72}", "\\frac{1}{72}"},
      {"\\frac{72}1", "\\frac{72}1"},
      {"\\frac", "\\frac"},
      {"\\frac1", "\\frac1"},
      {"a\\!b", "ab"},
      {"", ""},
      {"\n5\n", "5"},
      {"\\\\frac12", "\\frac{1}{2}"},
      {"1,000", "1000"},
      {"(1,2)", "(1,2)"},
      {"\\frac{\\sqrt3}{2}", "\\frac{\\sqrt{3}}{2}"},
      {"\\sqrt", "\\sqrt"},
      {"\\frac{1}{2.0}", "\\frac{1}{2}"},
      {"é/2", "é/2"},
      {"\\fracéb", "\\frac{é}{b}"},
  };
  char out[512];
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
    long n = vr_math_normalize(t[i].in, strlen(t[i].in), out, sizeof(out));
    if (n < 0 || strcmp(out, t[i].out) != 0)
      fail_msg("normalize case %zu '%s': got '%s' (%ld), want '%s'", i, t[i].in, n < 0 ? "" : out,
               n, t[i].out);
    assert_int_equal((size_t)n, strlen(t[i].out));
  }
  /* too small an output buffer is an error, not a truncation */
  assert_int_equal(vr_math_normalize("\\frac12", 7, out, 5), -1);
  assert_int_equal(vr_math_normalize("\\frac12", 7, out, 12), 11);
}

static void test_math_boxed(void **state) {
  (void)state;
  static const struct { const char *in, *content; } t[] = {
      {"The answer is \\boxed{5}.", "5"},
      {"\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"},
      {"\\boxed{1} then \\boxed{2}", "2"},
      {"\\boxed{a}}}", "a"},
      {"\\boxed{}", ""},
      {"\\fbox{7}", "7"},
      {"\\boxed{1} \\fbox{8}", "8"},
      {"so \\boxed 5$ done", "5"},
      {"so \\boxed 5", "5"},
      {"\\boxed{\\{1,2\\}}", "\\{1,2\\}"},
      {"\\boxed{{{x}}}", "{{x}}"},
      {"\\boxed{\\frac{1}{2}", NULL},  /* never closes */
      {"\\boxed{1} \\boxed{2", NULL},  /* the last box is incomplete */
      {"no box here 5", NULL},
      {"\\boxed", NULL},
      {"\\boxedx{5}", NULL},
      {"", NULL},
  };
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
    size_t st = 0, len = 0;
    int got = vr_math_last_boxed(t[i].in, strlen(t[i].in), &st, &len);
    if (!t[i].content) {
      if (got) fail_msg("boxed case %zu '%s': found '%.*s', want none", i, t[i].in, (int)len, t[i].in + st);
      continue;
    }
    if (!got) fail_msg("boxed case %zu '%s': none, want '%s'", i, t[i].in, t[i].content);
    assert_int_equal(len, strlen(t[i].content));
    assert_memory_equal(t[i].in + st, t[i].content, len);
  }
}

static void test_math_score(void **state) {
  (void)state;
  static const score_case_t t[] = {
      {"So the answer is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}", 1, VR_REASON_OK},
      {"\\boxed{\\dfrac12}", "\\frac{1}{2}", 1, VR_REASON_OK},
      {"\\boxed{0.5}", "\\frac12", 1, VR_REASON_OK},
      {"\\boxed{1/2}", "\\frac{1}{2}", 1, VR_REASON_OK},
      {"\\boxed{2.0}", "2", 1, VR_REASON_OK},
      {"\\boxed{10 \\text{ cm}}", "10", 1, VR_REASON_OK},
      {"\\boxed{90^\\circ}", "90", 1, VR_REASON_OK},
      {"\\boxed{\\left(1,2\\right)}", "(1, 2)", 1, VR_REASON_OK},
      {"\\boxed{x = 3}", "3", 1, VR_REASON_OK},
      {"\\boxed{\\$18.90}", "18.9", 1, VR_REASON_OK},
      {"\\boxed{1}\\boxed{2}", "2", 1, VR_REASON_OK},
      {"\\boxed{1}\\boxed{2}", "1", 0, VR_REASON_MISMATCH},
      {"\\fbox{7}", "7", 1, VR_REASON_OK},
      {"\\boxed{3}", "4", 0, VR_REASON_MISMATCH},
      {"\\boxed{}", "", 0, VR_REASON_NO_ANSWER},
      {"\\boxed{ }", "5", 0, VR_REASON_NO_ANSWER},
      {"\\boxed{\\frac{1}{2}", "\\frac{1}{2}", 0, VR_REASON_NO_ANSWER},
      {"the answer is 5", "5", 0, VR_REASON_NO_ANSWER},
      {"\\boxed{}}}}{{{", "5", 0, VR_REASON_NO_ANSWER},
      {"\\boxed{\\sqrt2}", "\\sqrt{2}", 1, VR_REASON_OK},
      {"\\boxed{50\\%}", "50", 1, VR_REASON_OK},
      {"\\boxed{1,000}", "1000", 1, VR_REASON_OK},
  };
  run_cases("math", t, sizeof(t) / sizeof(t[0]));
}

/* Deep nesting and huge inputs: linear work, correct answer, no crash. */
static void test_math_huge(void **state) {
  (void)state;
  const size_t depth = 100000;
  size_t cap = 16 + 2 * depth + 8;
  char *s = malloc(cap);
  assert_non_null(s);
  size_t k = 0;
  k += (size_t)sprintf(s, "\\boxed{");
  for (size_t i = 0; i < depth; i++) s[k++] = '{';
  s[k++] = '7';
  for (size_t i = 0; i < depth; i++) s[k++] = '}';
  s[k++] = '}';
  s[k] = '\0';
  size_t st, len;
  assert_int_equal(vr_math_last_boxed(s, k, &st, &len), 1);
  assert_int_equal(len, 2 * depth + 1);
  vr_rule_t r = rule_of("math");
  vr_extras_t ex;
  vr_extras_init(&ex);
  assert_int_equal(vr_extras_set(&ex, NULL, s, "7"), 0);
  int reason;
  assert_true(vr_rule_score(&r, &ex, 0, &reason) == 0.0f);
  assert_int_equal(reason, VR_REASON_MISMATCH);
  s[k - 1] = '\0'; /* drop the last brace: unbalanced */
  assert_int_equal(vr_extras_set(&ex, NULL, s, "7"), 0);
  assert_true(vr_rule_score(&r, &ex, 0, &reason) == 0.0f);
  assert_int_equal(reason, VR_REASON_NO_ANSWER);
  free(s);

  /* 1 MiB (the limit) of prose with the answer boxed at the end */
  size_t n = VR_EXTRAS_MAX_TEXT;
  s = malloc(n + 1);
  assert_non_null(s);
  for (size_t i = 0; i < n; i++) s[i] = "ab \\frac12 $.{} "[i % 16];
  memcpy(s + n - 20, " so \\boxed{\\dfrac12}", 20);
  s[n] = '\0';
  assert_int_equal(vr_extras_set(&ex, NULL, s, "0.5"), 0);
  assert_true(vr_rule_score(&r, &ex, 0, &reason) == 1.0f);
  assert_int_equal(reason, VR_REASON_OK);
  /* normalising all of it works and stays bounded */
  char *out = malloc(4 * n + 16);
  assert_non_null(out);
  long m = vr_math_normalize(s, n, out, 4 * n + 16);
  assert_true(m > 0 && (size_t)m < 4 * n);
  free(out);
  /* over the limit: rejected when set, never scored */
  s = realloc(s, n + 2);
  assert_non_null(s);
  s[n] = 'x';
  s[n + 1] = '\0';
  assert_int_equal(vr_extras_set(&ex, NULL, s, "1"), -8 /* VR_ERR_TOO_LARGE */);
  free(s);
  vr_extras_free(&ex);
}

/* ---- gsm8k ----------------------------------------------------------------------- */

static void test_gsm8k_strict(void **state) {
  (void)state;
  static const score_case_t t[] = {
      {"Natalia sold 48/2 = 24 clips in May.\n#### 72", "72", 1, VR_REASON_OK},
      {"#### 1,234", "1234", 1, VR_REASON_OK},
      {"#### 1,234", "1,234", 1, VR_REASON_OK},
      {"#### 72.0", "72", 1, VR_REASON_OK},
      {"#### 072", "72", 1, VR_REASON_OK},
      {"#### -3", "-3", 1, VR_REASON_OK},
      {"#### 72", " 72\n", 1, VR_REASON_OK},
      {"#### 1234", "$1,234", 1, VR_REASON_OK},
      {"#### 5 and later #### 6", "6", 1, VR_REASON_OK},
      {"#### 5 and later #### 6", "5", 0, VR_REASON_MISMATCH},
      {"#### 72", "73", 0, VR_REASON_MISMATCH},
      {"#### 72", "seventy-two", 0, VR_REASON_MISMATCH},
      {"#### $1,234", "1234", 0, VR_REASON_NO_ANSWER},
      {"The answer is 72", "72", 0, VR_REASON_NO_ANSWER},
      {"####72", "72", 0, VR_REASON_NO_ANSWER},
      {"#### -", "72", 0, VR_REASON_NO_ANSWER},
      {"#### 72 then #### ,", "72", 0, VR_REASON_NO_ANSWER},
      {"", "72", 0, VR_REASON_NO_ANSWER},
      {"#### 3.5", "3.50", 1, VR_REASON_OK},
      {"#### 3.5", "3.05", 0, VR_REASON_MISMATCH},
  };
  run_cases("gsm8k", t, sizeof(t) / sizeof(t[0]));
}

static void test_gsm8k_flexible(void **state) {
  (void)state;
  static const score_case_t t[] = {
      {"The answer is 72.", "72", 1, VR_REASON_OK},
      {"I think 5, no 7", "7", 1, VR_REASON_OK},
      {"Total: 1,234 dollars", "1234", 1, VR_REASON_OK},
      {"answer -5", "-5", 1, VR_REASON_OK},
      {"3 and ...", "3", 1, VR_REASON_OK},
      {"#### 72", "72", 1, VR_REASON_OK},
      {"5-3", "-3", 1, VR_REASON_OK},
      {"no numbers here", "1", 0, VR_REASON_NO_ANSWER},
      {"value . , -", "1", 0, VR_REASON_NO_ANSWER},
      {"it is 8 not 9", "8", 0, VR_REASON_MISMATCH},
  };
  run_cases("gsm8k_flexible", t, sizeof(t) / sizeof(t[0]));
  run_cases("gsm8k(mode=flexible)", t, sizeof(t) / sizeof(t[0]));
}

/* verl clips solution_str to its last 300 characters (code points, not bytes). */
static void test_gsm8k_clip(void **state) {
  (void)state;
  char s[2048];
  vr_rule_t r = rule_of("gsm8k");
  vr_extras_t ex;
  vr_extras_init(&ex);
  int reason;
  /* "#### 72 " (8 chars) + 292 x 'é' (2 bytes each) = 300 chars: inside the window */
  size_t k = (size_t)sprintf(s, "#### 72 ");
  for (int i = 0; i < 292; i++) k += (size_t)sprintf(s + k, "\xc3\xa9");
  assert_int_equal(vr_extras_set(&ex, NULL, s, "72"), 0);
  assert_true(vr_rule_score(&r, &ex, 0, &reason) == 1.0f);
  /* one more character pushes the leading '#' out of the window */
  k += (size_t)sprintf(s + k, "x");
  assert_int_equal(vr_extras_set(&ex, NULL, s, "72"), 0);
  assert_true(vr_rule_score(&r, &ex, 0, &reason) == 0.0f);
  assert_int_equal(reason, VR_REASON_NO_ANSWER);
  char ans[16];
  assert_int_equal(vr_gsm8k_extract("#### 1,5", 8, 0, ans, sizeof(ans)), 1);
  assert_string_equal(ans, "15");
  assert_int_equal(vr_gsm8k_extract("#### 123456", 11, 0, ans, 4), -1);
  vr_extras_free(&ex);
}

/* ---- exact_match ------------------------------------------------------------------- */

static void test_exact_match(void **state) {
  (void)state;
  static const score_case_t exact[] = {
      {"Paris", "Paris", 1, VR_REASON_OK},
      {"paris", "Paris", 0, VR_REASON_MISMATCH},
      {"Paris ", "Paris", 0, VR_REASON_MISMATCH},
      {"", "", 1, VR_REASON_OK},
      {"Ünï", "Ünï", 1, VR_REASON_OK},
  };
  static const score_case_t ci[] = {
      {"paris", "Paris", 1, VR_REASON_OK},
      {"  New   York \n", "new york", 1, VR_REASON_OK},
      {"New\tYork", "new york", 1, VR_REASON_OK},
      {"NewYork", "new york", 0, VR_REASON_MISMATCH},
      {"ab", "a b", 0, VR_REASON_MISMATCH},
      {"Ünï", "ünï", 0, VR_REASON_MISMATCH}, /* ASCII-only case folding */
      {"   ", "", 1, VR_REASON_OK},
      {"x", "", 0, VR_REASON_MISMATCH},
  };
  static const score_case_t case_only[] = {
      {"PARIS", "paris", 1, VR_REASON_OK},
      {"A  b", "a b", 0, VR_REASON_MISMATCH},
  };
  static const score_case_t space_only[] = {
      {" A  b ", "A b", 1, VR_REASON_OK},
      {"a b", "A b", 0, VR_REASON_MISMATCH},
  };
  run_cases("exact_match", exact, sizeof(exact) / sizeof(exact[0]));
  run_cases("exact_match_ci", ci, sizeof(ci) / sizeof(ci[0]));
  run_cases("exact_match(ignore_case=1)", case_only, sizeof(case_only) / sizeof(case_only[0]));
  run_cases("exact_match(ignore_space=1)", space_only, sizeof(space_only) / sizeof(space_only[0]));
}

static void test_contains_word(void **state) {
  (void)state;
  static const score_case_t c[] = {
      {"3 7 5", "7", 1, VR_REASON_OK},        {"7", "7", 1, VR_REASON_OK},
      {"17 5", "7", 0, VR_REASON_MISMATCH},   {"3 71", "7", 0, VR_REASON_MISMATCH},
      {"a\tb\nc", "c", 1, VR_REASON_OK},      {"say 12", "12", 1, VR_REASON_OK},
      {"x", "", 0, VR_REASON_MISMATCH},       {"", "1", 0, VR_REASON_MISMATCH},
      {"ab ab", "ab ab", 1, VR_REASON_OK},    {"ab abc", "ab ab", 0, VR_REASON_MISMATCH},
  };
  run_cases("contains_word", c, sizeof(c) / sizeof(c[0]));
}

/* ---- overlong ---------------------------------------------------------------------- */

static void test_overlong(void **state) {
  (void)state;
  static const struct { const char *spec; uint32_t len; double score; int reason; } t[] = {
      {"overlong", 0, 0.0, VR_REASON_OK},
      {"overlong", 3584, 0.0, VR_REASON_OK},            /* = max_len - buffer */
      {"overlong", 3585, -1.0 / 512, VR_REASON_TOO_LONG},
      {"overlong", 3840, -0.5, VR_REASON_TOO_LONG},
      {"overlong", 4096, -1.0, VR_REASON_TOO_LONG},     /* = max_len */
      {"overlong", 4608, -2.0, VR_REASON_TOO_LONG},     /* DAPO formula: no clamp */
      {"overlong(factor=0.5)", 4096, -0.5, VR_REASON_TOO_LONG},
      {"overlong(factor=0)", 9999, 0.0, VR_REASON_OK},
      {"overlong(max_len=100,buffer=100)", 0, 0.0, VR_REASON_OK},
      {"overlong(max_len=100,buffer=100)", 1, -0.01, VR_REASON_TOO_LONG},
      {"overlong(max_len=100,buffer=10,factor=2)", 95, -1.0, VR_REASON_TOO_LONG},
      {"overlong(max_len=100,buffer=10,factor=2)", 90, 0.0, VR_REASON_OK},
      {"overlong(max_len=1,buffer=1)", UINT32_MAX, -4294967295.0, VR_REASON_TOO_LONG},
  };
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
    vr_rule_t r = rule_of(t[i].spec);
    int reason = -1;
    float s = vr_rule_score(&r, NULL, t[i].len, &reason); /* needs no extras */
    if (fabs((double)s - t[i].score) > 1e-6 * fmax(1.0, fabs(t[i].score)) || reason != t[i].reason)
      fail_msg("overlong case %zu (%s, len %u): got %.9g (%s), want %.9g (%s)", i, t[i].spec,
               t[i].len, (double)s, vr_reason_name(reason), t[i].score, vr_reason_name(t[i].reason));
  }
}

/* ---- auto dispatch, missing fields, model kind, reasons, mix ------------------------- */

static void test_auto_and_missing(void **state) {
  (void)state;
  vr_rule_t r = rule_of("auto");
  vr_extras_t ex;
  vr_extras_init(&ex);
  int reason;
  assert_int_equal(vr_extras_set(&ex, "openai/gsm8k", "so #### 18", "18"), 0);
  assert_true(vr_rule_score(&r, &ex, 0, &reason) == 1.0f);
  assert_int_equal(reason, VR_REASON_OK);
  assert_int_equal(vr_extras_set(&ex, "lighteval/MATH", "\\boxed{\\frac12}", "0.5"), 0);
  assert_true(vr_rule_score(&r, &ex, 0, &reason) == 1.0f);
  assert_int_equal(vr_extras_set(&ex, "HuggingFaceH4/MATH-500", "\\boxed{3}", "4"), 0);
  assert_true(vr_rule_score(&r, &ex, 0, &reason) == 0.0f);
  assert_int_equal(reason, VR_REASON_MISMATCH);
  assert_int_equal(vr_extras_set(&ex, "my/dataset", "#### 18", "18"), 0);
  assert_true(vr_rule_score(&r, &ex, 0, &reason) == 0.0f);
  assert_int_equal(reason, VR_REASON_UNKNOWN_SOURCE);
  assert_int_equal(vr_extras_set(&ex, NULL, "#### 18", "18"), 0);
  assert_true(vr_rule_score(&r, &ex, 0, &reason) == 0.0f);
  assert_int_equal(reason, VR_REASON_MISSING_FIELD);

  static const char *const specs[] = {"gsm8k", "math", "exact_match", "auto"};
  for (size_t i = 0; i < 4; i++) {
    vr_rule_t q = rule_of(specs[i]);
    assert_true(vr_rule_score(&q, NULL, 0, &reason) == 0.0f);
    assert_int_equal(reason, VR_REASON_MISSING_FIELD);
    assert_int_equal(vr_extras_set(&ex, "openai/gsm8k", NULL, "1"), 0);
    assert_true(vr_rule_score(&q, &ex, 0, &reason) == 0.0f);
    assert_int_equal(reason, VR_REASON_MISSING_FIELD);
    assert_int_equal(vr_extras_set(&ex, "openai/gsm8k", "#### 1", NULL), 0);
    assert_true(vr_rule_score(&q, &ex, 0, NULL) == 0.0f); /* NULL reason is allowed */
  }
  vr_rule_t m = rule_of("model");
  assert_true(vr_rule_score(&m, &ex, 10, &reason) == 0.0f);
  assert_int_equal(reason, VR_REASON_NOT_A_RULE);
  assert_true(vr_rule_score(NULL, &ex, 10, &reason) == 0.0f);
  vr_extras_free(&ex);

  assert_string_equal(vr_reason_name(VR_REASON_OK), "ok");
  assert_string_equal(vr_reason_name(VR_REASON_TOO_LONG), "too_long");
  assert_string_equal(vr_reason_name(VR_REASON_NOT_A_RULE), "not_a_rule");
  assert_string_equal(vr_reason_name(-1), "unknown");
  assert_string_equal(vr_reason_name(VR_REASON_COUNT_), "unknown");
}

static void test_mix(void **state) {
  (void)state;
  vr_reward_spec_t sp;
  assert_int_equal(vr_reward_spec_parse("model:0.7,gsm8k:0.3", &sp, NULL, 0), 0);
  float s1[] = {0.5f, 1.0f};
  assert_float_equal(vr_reward_mix(&sp, s1), 0.65f, 1e-6f);
  float s2[] = {NAN, 1.0f}; /* a non-finite component counts as 0 */
  assert_float_equal(vr_reward_mix(&sp, s2), 0.3f, 1e-6f);
  assert_int_equal(vr_reward_spec_parse("math:1, overlong(max_len=10,buffer=5):0.5", &sp, NULL, 0), 0);
  float s3[] = {1.0f, -1.0f};
  assert_float_equal(vr_reward_mix(&sp, s3), 0.5f, 1e-6f);
  assert_true(vr_reward_mix(NULL, s3) == 0.0f);
  assert_true(vr_reward_mix(&sp, NULL) == 0.0f);
  /* mixed end to end: total = weighted sum of the components the rules give */
  assert_int_equal(vr_reward_spec_parse("gsm8k:0.6,exact_match_ci:0.3,overlong(max_len=8,buffer=4):2", &sp, NULL, 0), 0);
  vr_extras_t ex;
  vr_extras_init(&ex);
  assert_int_equal(vr_extras_set(&ex, NULL, "#### 42", "#### 42"), 0);
  float comp[3];
  for (uint32_t i = 0; i < sp.n; i++) comp[i] = vr_rule_score(&sp.rules[i], &ex, 7, NULL);
  assert_true(comp[0] == 0.0f); /* "#### 42" as ground truth is not the number 42 */
  assert_true(comp[1] == 1.0f);
  assert_float_equal(comp[2], -0.75f, 1e-6f);
  assert_float_equal(vr_reward_mix(&sp, comp), 0.3f - 1.5f, 1e-6f);
  vr_extras_free(&ex);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_math_normalize), cmocka_unit_test(test_math_boxed),
      cmocka_unit_test(test_math_score),     cmocka_unit_test(test_math_huge),
      cmocka_unit_test(test_gsm8k_strict),   cmocka_unit_test(test_gsm8k_flexible),
      cmocka_unit_test(test_gsm8k_clip),     cmocka_unit_test(test_exact_match),
      cmocka_unit_test(test_contains_word),
      cmocka_unit_test(test_overlong),       cmocka_unit_test(test_auto_and_missing),
      cmocka_unit_test(test_mix),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
