/* Deterministic random-mutation fuzzing of vr_rules' untrusted inputs: seeds
 * (valid msgpack extras blobs, JSON extras, math/gsm8k answers, reward specs)
 * are mutated with a fixed-seed PRNG (bit flips, msgpack "interesting" bytes,
 * inserted tokens, deletions, truncation, splices) and each result goes through
 * rules_fuzz_one.c, which checks invariants. Runs VR_RULES_FUZZ_ITERS
 * (default 200000) inputs, the same ones on every machine however fast it is;
 * VR_RULES_FUZZ_SECONDS=S additionally stops after S seconds (long local runs
 * with a large VR_RULES_FUZZ_ITERS). Meant to run under ASan+UBSan
 * (tools/test.sh second pass). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "rules_fuzz_one.h"
#include "vr_rules.h"

#define MAX_INPUT 4096

typedef struct {
  uint8_t *p;
  size_t n;
} blob_t;

static blob_t g_seeds[64];
static size_t g_nseeds;

static void add_seed(const void *p, size_t n) {
  if (g_nseeds >= sizeof(g_seeds) / sizeof(g_seeds[0]) || n > MAX_INPUT) return;
  g_seeds[g_nseeds].p = malloc(n ? n : 1);
  assert_non_null(g_seeds[g_nseeds].p);
  memcpy(g_seeds[g_nseeds].p, p, n);
  g_seeds[g_nseeds].n = n;
  g_nseeds++;
}

static void add_str(const char *s) { add_seed(s, strlen(s)); }

static void add_extras(const char *src, const char *sol, const char *gt, const uint8_t *info,
                       size_t info_len) {
  vr_extras_t ex;
  vr_extras_init(&ex);
  assert_int_equal(vr_extras_set(&ex, src, sol, gt), 0);
  if (info) assert_int_equal(vr_extras_set_info(&ex, VR_INFO_MSGPACK, info, info_len), 0);
  uint8_t *buf;
  size_t len;
  assert_int_equal(vr_extras_pack_msgpack(&ex, &buf, &len), 0);
  add_seed(buf, len);
  free(buf);
  vr_extras_free(&ex);
}

static void make_seeds(void) {
  static const uint8_t nested[] = {0x83, 0xa1, 'a', 0x93, 0x01, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0,
                                   0xc0, 0xa1, 'b', 0x81, 0xa1, 'c', 0xc4, 0x02, 0xff, 0x00, 0xa1,
                                   'd', 0xd6, 0xff, 0x01, 0x02, 0x03, 0x04};
  add_extras("openai/gsm8k", "Step 1: 48/2 = 24\n#### 72", "72", NULL, 0);
  add_extras("lighteval/MATH", "so \\boxed{\\dfrac{1}{2}} and \\fbox{3}", "\\frac12", nested,
             sizeof(nested));
  add_extras(NULL, "Paris", "paris", NULL, 0);
  add_extras("x", "\xc3\xa9\xe2\x9c\x93 #### -1,234.50 $", "-1234.5", NULL, 0);
  add_extras(NULL, NULL, NULL, NULL, 0);
  /* hand-made msgpack with wide headers and numbers */
  static const uint8_t wide[] = {0xde, 0x00, 0x03, 0xd9, 0x0c, 's', 'o', 'l', 'u', 't', 'i', 'o',
                                 'n', '_', 's', 't', 'r', 0xda, 0x00, 0x03, '#', '#', '#', 0xac,
                                 'g', 'r', 'o', 'u', 'n', 'd', '_', 't', 'r', 'u', 't', 'h', 0xd3,
                                 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 0xa1, 'z', 0xdc,
                                 0x00, 0x02, 0xca, 0x3f, 0x80, 0x00, 0x00, 0xc3};
  add_seed(wide, sizeof(wide));
  add_str("{\"data_source\":\"openai/gsm8k\",\"solution_str\":\"#### 5\",\"ground_truth\":5,"
          "\"extra_info\":{\"a\":[1,2,{\"b\":null}]}}");
  add_str("[{\"solution_str\":\"\\\\boxed{2}\",\"ground_truth\":\"2\"},{\"ground_truth\":1.5e3}]");
  add_str("\\boxed{\\left( \\frac12, \\sqrt3 \\right)} = 0.50 \\text{ cm} 90^\\circ \\$5 x=3/4");
  add_str("#### 1,000 then 2. and 3.0 -4 $5 ,., ####");
  add_str("model:0.7,gsm8k:0.3,overlong(max_len=4096,buffer=512,factor=1.0):1");
  add_str("exact_match_ci(ignore_case=1,ignore_space=0):2 , math , auto:-1");
}

/* xorshift64*: deterministic across platforms */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 2685821657736338717ull;
}
static size_t rnd_below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

static const char *const k_tokens[] = {
    "\x81", "\x8f", "\x9f", "\xdc\xff\xff", "\xdd\xff\xff\xff\xff", "\xdf\x00\x00\x00\x10",
    "\xdb\x00\x10\x00\x00", "\xc6\xff\xff\xff\xff", "\xc9\x00\x00\x00\x05\x01", "\xc1", "\xc0",
    "\xa3" "abc", "\xacsolution_str", "\xacground_truth", "\xab" "data_source", "\xaa" "extra_info",
    "\\boxed{", "\\fbox{", "\\boxed ", "{", "}", "\\frac", "\\dfrac", "\\sqrt", "\\left", "\\right",
    "\\text{ ", "\\text{", "^\\circ", "\\%", "$", "#### ", "-", ".", ",", "=", "/", "0", "9",
    "\xc3\xa9", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\"", "\\u0000", ":", "(", ")", "null", "1e308",
};

static size_t mutate(uint8_t *buf, size_t n) {
  int rounds = 1 + (int)rnd_below(8);
  for (int r = 0; r < rounds; r++) {
    switch (rnd_below(8)) {
      case 0: /* flip a bit */
        if (n) buf[rnd_below(n)] ^= (uint8_t)(1u << rnd_below(8));
        break;
      case 1: { /* an interesting byte */
        static const uint8_t v[] = {0x00, 0xff, 0x7f, 0x80, 0xc0, 0xc1, 0xc3, 0xd9, 0xdc,
                                    0xdd, 0xde, 0xdf, 0x90, 0x91, 0xa0, 0xbf, '{', '}'};
        if (n) buf[rnd_below(n)] = v[rnd_below(sizeof(v))];
        break;
      }
      case 2: { /* insert a token */
        const char *t = k_tokens[rnd_below(sizeof(k_tokens) / sizeof(k_tokens[0]))];
        size_t tl = strlen(t), at = rnd_below(n + 1);
        if (n + tl > MAX_INPUT) break;
        memmove(buf + at + tl, buf + at, n - at);
        memcpy(buf + at, t, tl);
        n += tl;
        break;
      }
      case 3: { /* delete a range */
        if (!n) break;
        size_t at = rnd_below(n), l = 1 + rnd_below(n - at < 16 ? n - at : 16);
        memmove(buf + at, buf + at + l, n - at - l);
        n -= l;
        break;
      }
      case 4: /* truncate */
        n = rnd_below(n + 1);
        break;
      case 5: { /* duplicate a chunk */
        if (!n) break;
        size_t at = rnd_below(n), l = 1 + rnd_below(n - at < 32 ? n - at : 32);
        if (n + l > MAX_INPUT) break;
        size_t to = rnd_below(n + 1);
        uint8_t tmp[32];
        memcpy(tmp, buf + at, l);
        memmove(buf + to + l, buf + to, n - to);
        memcpy(buf + to, tmp, l);
        n += l;
        break;
      }
      case 6: { /* splice from another seed */
        const blob_t *s = &g_seeds[rnd_below(g_nseeds)];
        if (!s->n) break;
        size_t at = rnd_below(s->n), l = 1 + rnd_below(s->n - at);
        size_t to = rnd_below(n + 1);
        if (to + l > MAX_INPUT) break;
        memcpy(buf + to, s->p + at, l);
        if (to + l > n) n = to + l;
        break;
      }
      default: /* random byte */
        if (n) buf[rnd_below(n)] = (uint8_t)rnd();
        break;
    }
  }
  return n;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_fuzz(void **state) {
  (void)state;
  make_seeds();
  assert_true(g_nseeds >= 10);
  double seconds = 0; /* no time limit unless asked for */
  long iters = 200000;
  const char *e = getenv("VR_RULES_FUZZ_SECONDS");
  if (e) seconds = atof(e);
  e = getenv("VR_RULES_FUZZ_ITERS");
  if (e) iters = atol(e);
  /* every seed as is first: they must parse where they are well-formed */
  for (size_t i = 0; i < g_nseeds; i++) vr_rules_fuzz_one(g_seeds[i].p, g_seeds[i].n);
  vr_extras_t ex;
  vr_extras_init(&ex);
  for (size_t i = 0; i < 6; i++) /* the msgpack seeds are valid */
    assert_int_equal(vr_extras_parse_msgpack(g_seeds[i].p, g_seeds[i].n, &ex, NULL, 0), 0);
  vr_extras_free(&ex);

  uint8_t *buf = malloc(MAX_INPUT);
  assert_non_null(buf);
  double t0 = now_s();
  long done = 0, parsed_ok = 0;
  for (; done < iters; done++) {
    if (seconds > 0 && (done & 255) == 0 && now_s() - t0 > seconds) break;
    const blob_t *s = &g_seeds[rnd_below(g_nseeds)];
    memcpy(buf, s->p, s->n);
    size_t n = mutate(buf, s->n);
    /* exact-size heap copy so ASan sees any read past the end */
    uint8_t *in = malloc(n ? n : 1);
    assert_non_null(in);
    memcpy(in, buf, n);
    vr_rules_fuzz_one(in, n);
    if (vr_extras_parse_msgpack(in, n, &ex, NULL, 0) == 0) parsed_ok++;
    vr_extras_free(&ex);
    free(in);
  }
  free(buf);
  printf("# fuzz: %ld mutated inputs in %.1f s, %ld parsed as valid msgpack extras\n", done,
         now_s() - t0, parsed_ok);
  if (seconds <= 0) assert_int_equal(done, iters);
  assert_true(parsed_ok > 0); /* the mutator keeps some inputs valid: it is not only noise */
  for (size_t i = 0; i < g_nseeds; i++) free(g_seeds[i].p);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_fuzz)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
