/* verl-reward-rules-bench: CPU cost of the rule-based reward path per sequence:
 * msgpack and JSON extras parsing, and every scorer, on synthetic GSM8K/MATH
 * style responses of a chosen length. Prints a table and writes JSON.
 *   verl-reward-rules-bench [--chars N] [--seconds S] [--json FILE]
 * Single-threaded; numbers are ns per sequence (median of 5 timed rounds). */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vr_cli.h"
#include "vr_rules.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A response of about 'chars' characters of worked solution, ending in the answer. */
static char *make_response(size_t chars, const char *tail) {
  static const char *const words[] = {"Natalia ", "sold ", "48/2 ", "= ", "24 ", "clips ",
                                      "in ", "May. ", "So ", "$x^2 + \\frac{1}{2}$ ", "and ",
                                      "1,234 ", "\\left( 3 \\right) ", "then\n"};
  size_t tl = strlen(tail);
  char *s = malloc(chars + tl + 64);
  if (!s) exit(1);
  size_t n = 0, w = 0;
  while (n < chars) {
    const char *x = words[w++ % (sizeof(words) / sizeof(words[0]))];
    size_t l = strlen(x);
    memcpy(s + n, x, l);
    n += l;
  }
  memcpy(s + n, tail, tl + 1);
  return s;
}

typedef struct {
  const char *name;
  double ns;
} result_t;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median over 5 rounds of the ns per call of fn(arg); each round runs ~seconds/5. */
static double measure(void (*fn)(void *), void *arg, double seconds) {
  double per[5];
  /* warm up and calibrate: as many calls as fit in 20 ms */
  long calib = 0;
  double t0 = now_s(), el;
  do {
    fn(arg);
    calib++;
  } while ((el = now_s() - t0) < 0.02);
  long iters = (long)((double)calib * (seconds / 5.0) / el);
  if (iters < 1) iters = 1;
  for (int r = 0; r < 5; r++) {
    t0 = now_s();
    for (long i = 0; i < iters; i++) fn(arg);
    per[r] = (now_s() - t0) / (double)iters * 1e9;
  }
  qsort(per, 5, sizeof(double), cmp_double);
  return per[2];
}

typedef struct {
  const uint8_t *blob;
  size_t len;
  const cJSON *json;
  vr_extras_t *ex;
  const vr_rule_t *rule;
  volatile float sink;
} ctx_t;

static void run_parse_msgpack(void *p) {
  ctx_t *c = p;
  if (vr_extras_parse_msgpack(c->blob, c->len, c->ex, NULL, 0)) abort();
}
static void run_parse_json(void *p) {
  ctx_t *c = p;
  if (vr_extras_from_json(c->json, c->ex, NULL, 0)) abort();
}
static void run_score(void *p) {
  ctx_t *c = p;
  c->sink = vr_rule_score(c->rule, c->ex, 1000, NULL);
}

int main(int argc, char **argv) {
  size_t chars = 2000;
  double seconds = 1.0;
  const char *json_path = NULL;
  static const char prog[] = "verl-reward-rules-bench";
  static const struct option lo[] = {{"chars", required_argument, 0, 'c'}, {"seconds", required_argument, 0, 's'},
                                     {"json", required_argument, 0, 'j'},  {"version", no_argument, 0, 'V'},
                                     {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
  uint64_t v;
  int opt;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
    switch (opt) {
      case 'c':
        if (vr_cli_parse_u64(prog, "--chars", optarg, 1, VR_EXTRAS_MAX_TEXT - 64, &v)) return VR_EXIT_USAGE;
        chars = (size_t)v;
        break;
      case 's':
        if (vr_cli_parse_double(prog, "--seconds", optarg, 0.001, 3600, &seconds)) return VR_EXIT_USAGE;
        break;
      case 'j': json_path = optarg; break;
      case 'V': vr_cli_version(stdout, prog, NULL); return 0;
      case 'h':
        printf("usage: verl-reward-rules-bench [--chars N] [--seconds S] [--json FILE]\n"
               "       verl-reward-rules-bench --version | --help\n"
               "Times each rule-based reward on a response of N characters (default 2000) for S seconds (1).\n");
        return 0;
      default: return vr_cli_getopt_error(prog, opt, argv, optind, optopt);
    }
  }
  if (optind < argc) return vr_cli_usage_error(prog, "unexpected argument '%s'", argv[optind]);
  if (chars > VR_EXTRAS_MAX_TEXT - 64) chars = VR_EXTRAS_MAX_TEXT - 64;
  static const struct { const char *spec, *source, *tail, *truth; } cases[] = {
      {"gsm8k", "openai/gsm8k", "\n#### 72", "72"},
      {"gsm8k_flexible", "openai/gsm8k", " The answer is 72.", "72"},
      {"math", "lighteval/MATH", " so the answer is \\boxed{\\dfrac{1}{2}}.", "\\frac12"},
      {"exact_match", "x", "Paris", NULL},
      {"exact_match_ci", "x", "  paris ", NULL},
      {"auto", "lighteval/MATH", " \\boxed{\\dfrac{1}{2}}", "0.5"},
      {"overlong", "x", "", ""},
  };
  enum { NC = sizeof(cases) / sizeof(cases[0]) };
  result_t res[2 + NC];
  int nres = 0;
  vr_extras_t ex;
  vr_extras_init(&ex);
  ctx_t c = {0};
  c.ex = &ex;

  /* parsing cost on the MATH-style extras */
  char *resp = make_response(chars, cases[2].tail);
  if (vr_extras_set(&ex, cases[2].source, resp, cases[2].truth)) return 1;
  uint8_t *blob;
  size_t blen;
  if (vr_extras_pack_msgpack(&ex, &blob, &blen)) return 1;
  cJSON *obj = cJSON_CreateObject();
  cJSON_AddStringToObject(obj, "data_source", cases[2].source);
  cJSON_AddStringToObject(obj, "solution_str", resp);
  cJSON_AddStringToObject(obj, "ground_truth", cases[2].truth);
  c.blob = blob, c.len = blen, c.json = obj;
  res[nres++] = (result_t){"parse_msgpack", measure(run_parse_msgpack, &c, seconds)};
  res[nres++] = (result_t){"parse_json", measure(run_parse_json, &c, seconds)};
  free(blob);
  cJSON_Delete(obj);
  free(resp);

  for (int k = 0; k < NC; k++) {
    vr_reward_spec_t sp;
    if (vr_reward_spec_parse(cases[k].spec, &sp, NULL, 0)) return 1;
    resp = make_response(chars, cases[k].tail);
    /* exact_match compares whole texts: the truth is the response itself
     * (upper-cased for the case-insensitive rule), so the full length is read */
    char *truth = strdup(sp.rules[0].kind == VR_RULE_EXACT_MATCH ? resp : cases[k].truth);
    if (!truth) return 1;
    if (sp.rules[0].kind == VR_RULE_EXACT_MATCH && sp.rules[0].ignore_case)
      for (char *q = truth; *q; q++)
        if (*q >= 'a' && *q <= 'z') *q = (char)(*q - 'a' + 'A');
    if (vr_extras_set(&ex, cases[k].source, resp, truth)) return 1;
    free(truth);
    c.rule = &sp.rules[0];
    int reason;
    float s = vr_rule_score(c.rule, &ex, 1000, &reason);
    if (k < NC - 1 && s != 1.0f) {
      fprintf(stderr, "bench case %s scored %g (%s), expected 1\n", cases[k].spec, (double)s,
              vr_reason_name(reason));
      return 1;
    }
    res[nres++] = (result_t){cases[k].spec, measure(run_score, &c, seconds)};
    free(resp);
  }
  vr_extras_free(&ex);

  printf("verl-reward-rules-bench: solution_str ~%zu chars, single thread\n", chars);
  printf("%-16s %12s %14s\n", "what", "ns/seq", "seq/s");
  for (int i = 0; i < nres; i++)
    printf("%-16s %12.0f %14.0f\n", res[i].name, res[i].ns, 1e9 / res[i].ns);
  if (json_path) {
    FILE *f = fopen(json_path, "w");
    if (!f) {
      perror(json_path);
      return 1;
    }
    fprintf(f, "{\"chars\": %zu, \"ns_per_seq\": {", chars);
    for (int i = 0; i < nres; i++) fprintf(f, "%s\"%s\": %.1f", i ? ", " : "", res[i].name, res[i].ns);
    fprintf(f, "}}\n");
    fclose(f);
  }
  return 0;
}
