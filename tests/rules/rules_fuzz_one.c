/* rules_fuzz_one.c: one fuzz input through every untrusted-input entry point
 * of vr_rules, checking invariants; shared by the libFuzzer target
 * (fuzz_rules.c, VR_FUZZ=ON with clang) and the deterministic mutation test
 * (test_rules_fuzz.c, always in ctest). A broken invariant aborts with a
 * message (the sanitizers catch memory errors on their own). */
#include "rules_fuzz_one.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vr_rules.h"

#define CHECK(cond)                                                             \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      abort();                                                                  \
    }                                                                           \
  } while (0)

static void check_text(const vr_text_t *t, uint32_t max, int is_text) {
  if (!t->present) {
    CHECK(t->len == 0);
    return;
  }
  CHECK(t->ptr != NULL);
  CHECK(t->len <= max);
  CHECK(t->len < t->cap);
  CHECK(t->ptr[t->len] == '\0');
  if (is_text) {
    CHECK(memchr(t->ptr, '\0', t->len) == NULL);
    CHECK(vr_utf8_valid(t->ptr, t->len));
  }
}

static void check_extras(const vr_extras_t *ex) {
  check_text(&ex->data_source, VR_EXTRAS_MAX_SOURCE, 1);
  check_text(&ex->solution_str, VR_EXTRAS_MAX_TEXT, 1);
  check_text(&ex->ground_truth, VR_EXTRAS_MAX_TEXT, 1);
  check_text(&ex->extra_info, VR_EXTRAS_MAX_INFO, ex->extra_info_format == VR_INFO_JSON);
  CHECK((ex->extra_info_format != VR_INFO_NONE) == (ex->extra_info.present != 0));
}

static int text_eq(const vr_text_t *a, const vr_text_t *b) {
  if (a->present != b->present) return 0;
  return !a->present || (a->len == b->len && memcmp(a->ptr, b->ptr, a->len) == 0);
}

/* Every rule over the extras: finite score, known reason. */
static void score_all(const vr_extras_t *ex, uint32_t tokens) {
  static const char *const specs[] = {"gsm8k", "gsm8k_flexible", "math", "exact_match",
                                      "exact_match_ci", "auto", "overlong(max_len=64,buffer=16)",
                                      "model"};
  for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
    vr_reward_spec_t sp;
    CHECK(vr_reward_spec_parse(specs[i], &sp, NULL, 0) == 0);
    int reason = -1;
    float s = vr_rule_score(&sp.rules[0], ex, tokens, &reason);
    CHECK(isfinite(s) && s <= 1.0f);
    CHECK(reason >= 0 && reason < VR_REASON_COUNT_);
  }
}

static void fuzz_msgpack(const uint8_t *data, size_t len) {
  vr_extras_t ex, back;
  vr_extras_init(&ex);
  vr_extras_init(&back);
  char err[256];
  err[0] = '\0';
  int rc = vr_extras_parse_msgpack(data, len, &ex, err, sizeof(err));
  if (rc == 0) {
    check_extras(&ex);
    uint8_t *buf = NULL;
    size_t blen = 0;
    CHECK(vr_extras_pack_msgpack(&ex, &buf, &blen) == 0);
    CHECK(vr_extras_parse_msgpack(buf, blen, &back, err, sizeof(err)) == 0);
    CHECK(text_eq(&ex.data_source, &back.data_source));
    CHECK(text_eq(&ex.solution_str, &back.solution_str));
    CHECK(text_eq(&ex.ground_truth, &back.ground_truth));
    CHECK(text_eq(&ex.extra_info, &back.extra_info));
    CHECK(ex.extra_info_format == back.extra_info_format);
    free(buf);
    score_all(&ex, (uint32_t)len * 3);
  } else {
    CHECK(rc < 0);
    CHECK(err[0] != '\0'); /* every failure says why */
    CHECK(!ex.solution_str.present && !ex.ground_truth.present);
  }
  vr_extras_free(&ex);
  vr_extras_free(&back);
}

static void fuzz_json(const char *text, size_t len) {
  cJSON *root = cJSON_ParseWithLength(text, len);
  if (!root) return;
  vr_extras_t ex;
  vr_extras_init(&ex);
  char err[256];
  const cJSON *items[8];
  size_t n = 0;
  if (cJSON_IsArray(root)) {
    for (const cJSON *it = root->child; it && n < 8; it = it->next) items[n++] = it;
  } else {
    items[n++] = root;
  }
  for (size_t i = 0; i < n; i++) {
    err[0] = '\0';
    int rc = vr_extras_from_json(items[i], &ex, err, sizeof(err));
    if (rc == 0) {
      check_extras(&ex);
      score_all(&ex, (uint32_t)len);
    } else {
      CHECK(rc < 0 && err[0] != '\0');
    }
  }
  vr_extras_free(&ex);
  cJSON_Delete(root);
}

static void fuzz_text(const char *s, size_t n) {
  size_t st = 0, bl = 0;
  if (vr_math_last_boxed(s, n, &st, &bl)) CHECK(st <= n && bl <= n - st);
  size_t cap = 4 * n + 64;
  char *a = malloc(cap), *b = malloc(cap);
  CHECK(a && b);
  long la = vr_math_normalize(s, n, a, cap);
  CHECK(la >= 0 && (size_t)la < cap && a[la] == '\0');
  long lb = vr_math_normalize(a, (size_t)la, b, cap); /* normalising twice must not crash */
  CHECK(lb >= -1);
  if (la > 0) CHECK(vr_math_normalize(s, n, b, (size_t)la) == -1); /* too small: refused */
  free(a);
  free(b);
  char ans[1300];
  for (int flex = 0; flex <= 1; flex++) {
    int g = vr_gsm8k_extract(s, n, flex, ans, sizeof(ans));
    CHECK(g >= 0 && g <= 1);
    if (g) CHECK(strlen(ans) < sizeof(ans));
  }
  /* as a reward spec (bounded: specs are short) */
  char spec[256];
  size_t sl = n < sizeof(spec) - 1 ? n : sizeof(spec) - 1;
  memcpy(spec, s, sl);
  spec[sl] = '\0';
  vr_reward_spec_t sp, sp2;
  char err[256] = "";
  if (vr_reward_spec_parse(spec, &sp, err, sizeof(err)) == 0) {
    CHECK(sp.n >= 1 && sp.n <= VR_REWARD_MAX_COMPONENTS);
    char canon[1024];
    size_t need = vr_reward_spec_format(&sp, canon, sizeof(canon));
    CHECK(need < sizeof(canon));
    CHECK(vr_reward_spec_parse(canon, &sp2, err, sizeof(err)) == 0);
    CHECK(sp2.n == sp.n && sp2.model_index == sp.model_index);
  } else {
    CHECK(err[0] != '\0');
  }
  /* as solution text against itself and a fixed truth */
  if (vr_utf8_valid(s, n) && !memchr(s, '\0', n) && n <= VR_EXTRAS_MAX_TEXT) {
    vr_extras_t ex;
    vr_extras_init(&ex);
    char *z = malloc(n + 1);
    CHECK(z);
    memcpy(z, s, n);
    z[n] = '\0';
    CHECK(vr_extras_set(&ex, "openai/gsm8k", z, z) == 0);
    score_all(&ex, (uint32_t)n);
    vr_reward_spec_t em;
    CHECK(vr_reward_spec_parse("exact_match_ci", &em, NULL, 0) == 0);
    CHECK(vr_rule_score(&em.rules[0], &ex, 0, NULL) == 1.0f); /* reflexive */
    free(z);
    vr_extras_free(&ex);
  }
}

int vr_rules_fuzz_one(const uint8_t *data, size_t len) {
  fuzz_msgpack(data, len);
  fuzz_json((const char *)data, len);
  fuzz_text((const char *)data, len);
  return 0;
}
