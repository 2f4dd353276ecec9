/* verl-reward-score as users run it (the real binary from $VR_BIN_DIR): JSON lines
 * in, one {"score": x} (or {"scores": [...]} for a batch line) line per input out, in order; bad lines give an error line
 * naming the line and the reason, and exit status 1; a bad model gives status 2. */
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "model_test_util.h"

/* Runs verl-reward-score with args; stdin from in_path (or /dev/null), stdout to
 * mt_tmp/out.jsonl, stderr to mt_tmp/err.txt. Returns the exit status. */
static int run_tool(const char *in_path, const char *const *args) {
  char bin[1200], out[1300], err[1300];
  const char *bd = getenv("VR_BIN_DIR");
  snprintf(bin, sizeof bin, "%s/verl-reward-score", bd && *bd ? bd : "build/bin");
  snprintf(out, sizeof out, "%s/out.jsonl", mt_tmp);
  snprintf(err, sizeof err, "%s/err.txt", mt_tmp);
  const char *argv[16] = {bin};
  int n = 1;
  for (; args[n - 1] && n < 15; n++) argv[n] = args[n - 1];
  argv[n] = NULL;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int fi = open(in_path ? in_path : "/dev/null", O_RDONLY);
    int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fi < 0 || fo < 0 || fe < 0) _exit(126);
    dup2(fi, 0), dup2(fo, 1), dup2(fe, 2);
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  return WEXITSTATUS(status);
}

/* Splits mt_tmp/out.jsonl into lines (each a parsed cJSON). */
static int read_output(cJSON **lines, int cap) {
  char path[1300];
  snprintf(path, sizeof path, "%s/out.jsonl", mt_tmp);
  char *text = mt_read_file(path, NULL);
  int n = 0;
  for (char *save = NULL, *l = strtok_r(text, "\n", &save); l && n < cap; l = strtok_r(NULL, "\n", &save)) {
    lines[n] = cJSON_Parse(l);
    if (!lines[n]) fail_msg("output line %d is not JSON: %s", n + 1, l);
    n++;
  }
  free(text);
  return n;
}

static void append_seq(char *buf, size_t cap, const mt_golden_t *g, uint32_t i) {
  size_t k = strlen(buf);
  k += (size_t)snprintf(buf + k, cap - k, "{\"input_ids\": [");
  for (uint32_t t = g->cu[i]; t < g->cu[i + 1]; t++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%d", t > g->cu[i] ? ", " : "", g->ids[t]);
  snprintf(buf + k, cap - k, "]}\n");
}

static void test_good_and_bad_lines(void **state) {
  (void)state;
  char model[1200], in[1300];
  mt_model_path(model, sizeof model, "llama_gqa");
  mt_golden_t g;
  mt_golden_load(model, &g);
  static char buf[65536];
  buf[0] = 0;
  append_seq(buf, sizeof buf, &g, 0);                       /* line 1 */
  strcat(buf, "\n");                                         /* line 2: blank, skipped */
  strcat(buf, "{\"input_ids\": [1, 2,\n");                   /* line 3: malformed */
  strcat(buf, "{\"input_ids\": [1, 200]}\n");                /* line 4: id >= vocab (97) */
  strcat(buf, "{\"ids\": [1]}\n");                           /* line 5: no input_ids */
  strcat(buf, "{\"input_ids\": [1.5]}\n");                   /* line 6: not an integer */
  append_seq(buf, sizeof buf, &g, 5);                        /* line 7 */
  strcat(buf, "{\"input_ids\": []}");                        /* line 8: empty, no newline at EOF */
  snprintf(in, sizeof in, "%s/in.jsonl", mt_tmp);
  mt_write_file(in, buf, strlen(buf));
  const char *args[] = {"--model", model, "--input", in, "--threads", "1", NULL};
  assert_int_equal(run_tool(NULL, args), 1);
  cJSON *lines[16];
  int n = read_output(lines, 16);
  assert_int_equal(n, 7);
  static const struct {
    int line;
    const char *why;
  } errs[] = {{3, "malformed JSON"}, {4, "outside the model's vocabulary"}, {5, "no \"input_ids\""},
              {6, "input_ids[0] is not an integer"}};
  double s0 = cJSON_GetObjectItem(lines[0], "score")->valuedouble;
  assert_true(mt_rel_err(s0, g.scores[0]) <= MT_TOL_TRANSFORMERS);
  for (int i = 0; i < 4; i++) {
    const cJSON *e = cJSON_GetObjectItem(lines[1 + i], "error");
    assert_true(cJSON_IsString(e));
    char want[32];
    snprintf(want, sizeof want, "line %d: ", errs[i].line);
    if (!strstr(e->valuestring, want) || !strstr(e->valuestring, errs[i].why))
      fail_msg("output %d: \"%s\" lacks \"%s\" / \"%s\"", i + 2, e->valuestring, want, errs[i].why);
    assert_int_equal(cJSON_GetObjectItem(lines[1 + i], "line")->valueint, errs[i].line);
  }
  double s5 = cJSON_GetObjectItem(lines[5], "score")->valuedouble;
  assert_true(mt_rel_err(s5, g.scores[5]) <= MT_TOL_TRANSFORMERS);
  const cJSON *e8 = cJSON_GetObjectItem(lines[6], "error");
  assert_true(cJSON_IsString(e8) && strstr(e8->valuestring, "line 8: empty sequence"));
  for (int i = 0; i < n; i++) cJSON_Delete(lines[i]);
  /* stderr names the lines too */
  char ep[1300];
  snprintf(ep, sizeof ep, "%s/err.txt", mt_tmp);
  char *err = mt_read_file(ep, NULL);
  assert_non_null(strstr(err, "line 3: malformed JSON"));
  free(err);
  mt_golden_free(&g);
}

/* stdin, every golden sequence of an encoder: scores in order, exit 0. */
/* The input forms: {"input_ids": [ids]} and [ids] are one sequence ({"score": x}),
 * {"input_ids": [[ids], ...]} and [[ids], ...] a batch line ({"scores": [...]}, one
 * output line per input line); the cpu backend's scores are the same bits in every form.
 * A bad sequence in a batch line is one error line naming the line and the sequence. */
/* A line is exactly one JSON value (cJSON took the first and dropped the rest: the line was scored
 * as if the text after it were absent) and a key read appears once (Python keeps the last, cJSON
 * found the first). */
static void test_one_value_per_line(void **state) {
  (void)state;
  char model[1200], in[1300];
  mt_model_path(model, sizeof model, "llama_gqa");
  static const char buf[] = "{\"input_ids\": [1, 2]} junk\n"                   /* line 1 */
                            "{\"input_ids\": [1]}\0{\"input_ids\": [2]}\n"     /* line 2 */
                            "[1, 2][3]\n"                                      /* line 3 */
                            "{\"input_ids\": [1], \"input_ids\": [2, 3]}\n"    /* line 4 */
                            "{\"input_ids\":\x0b[1]}\n"                        /* line 5 */
                            "  {\"input_ids\": [1, 2]} \t\r\n";                /* line 6: good */
  snprintf(in, sizeof in, "%s/in.jsonl", mt_tmp);
  mt_write_file(in, buf, sizeof buf - 1);
  const char *args[] = {"--model", model, "--input", in, "--threads", "1", NULL};
  assert_int_equal(run_tool(NULL, args), 1);
  cJSON *lines[8];
  int n = read_output(lines, 8);
  assert_int_equal(n, 6);
  static const char *const want[] = {"line 1: text after the JSON value at byte 23",
                                     "line 2: text after the JSON value at byte 19",
                                     "line 3: text after the JSON value at byte 7",
                                     "line 4: \"input_ids\" appears more than once",
                                     "line 5: a control byte in the JSON at byte 14"};
  for (int i = 0; i < 5; i++) {
    const cJSON *e = cJSON_GetObjectItem(lines[i], "error");
    if (!cJSON_IsString(e) || !strstr(e->valuestring, want[i]))
      fail_msg("output %d: %s, want \"%s\"", i + 1, cJSON_IsString(e) ? e->valuestring : "(a score)", want[i]);
  }
  assert_true(cJSON_IsNumber(cJSON_GetObjectItem(lines[5], "score")));
  for (int i = 0; i < n; i++) cJSON_Delete(lines[i]);
}

static void test_input_forms(void **state) {
  (void)state;
  char model[1200], in[1300];
  mt_model_path(model, sizeof model, "llama_gqa");
  snprintf(in, sizeof in, "%s/in.jsonl", mt_tmp);
  const char *text = "{\"input_ids\": [1, 2, 3]}\n"         /* 1 */
                     "[4, 5]\n"                              /* 2 */
                     "{\"input_ids\": [[1, 2, 3], [4, 5]]}\n" /* 3 */
                     "[[4, 5], [1, 2, 3], [6]]\n"             /* 4 */
                     "[6]\n"                                 /* 5 */
                     "[[1, 2], [1, \"a\"]]\n"               /* 6: bad sequence 1 */
                     "{\"input_ids\": [[1], 2]}\n"            /* 7: sequence 1 is not a list */
                     "[[1], [1, 2, 300]]\n";                  /* 8: id >= vocab in sequence 1 */
  mt_write_file(in, text, strlen(text));
  const char *args[] = {"--model", model, "--input", in, "--threads", "1", NULL};
  assert_int_equal(run_tool(NULL, args), 1);
  cJSON *lines[16];
  assert_int_equal(read_output(lines, 16), 8);
  double a = cJSON_GetObjectItem(lines[0], "score")->valuedouble;
  double b = cJSON_GetObjectItem(lines[1], "score")->valuedouble;
  double c = cJSON_GetObjectItem(lines[4], "score")->valuedouble;
  assert_true(a != b);
  const cJSON *s3 = cJSON_GetObjectItem(lines[2], "scores"), *s4 = cJSON_GetObjectItem(lines[3], "scores");
  assert_int_equal(cJSON_GetArraySize(s3), 2);
  assert_int_equal(cJSON_GetArraySize(s4), 3);
  assert_true(cJSON_GetArrayItem(s3, 0)->valuedouble == a && cJSON_GetArrayItem(s3, 1)->valuedouble == b);
  assert_true(cJSON_GetArrayItem(s4, 0)->valuedouble == b && cJSON_GetArrayItem(s4, 1)->valuedouble == a &&
              cJSON_GetArrayItem(s4, 2)->valuedouble == c);
  static const struct {
    int line;
    const char *msg;
  } errs[] = {{6, "line 6: sequence 1: input_ids[1][1] is not an integer"},
              {7, "line 7: sequence 1: input_ids[1] is not a list"},
              {8, "line 8: sequence 1: "}};
  for (int i = 0; i < 3; i++) {
    const cJSON *e = cJSON_GetObjectItem(lines[5 + i], "error");
    if (!cJSON_IsString(e) || !strstr(e->valuestring, errs[i].msg))
      fail_msg("line %d: want '%s', got %s", errs[i].line, errs[i].msg, e ? e->valuestring : "(no error)");
    assert_int_equal(cJSON_GetObjectItem(lines[5 + i], "line")->valueint, errs[i].line);
    assert_int_equal(cJSON_GetObjectItem(lines[5 + i], "sequence")->valueint, 1);
  }
  for (int i = 0; i < 8; i++) cJSON_Delete(lines[i]);
}

static void test_stdin_all_golden(void **state) {
  (void)state;
  char model[1200], in[1300];
  mt_model_path(model, sizeof model, "roberta");
  mt_golden_t g;
  mt_golden_load(model, &g);
  static char buf[65536];
  buf[0] = 0;
  for (uint32_t i = 0; i < g.n_seqs; i++) append_seq(buf, sizeof buf, &g, i);
  snprintf(in, sizeof in, "%s/in.jsonl", mt_tmp);
  mt_write_file(in, buf, strlen(buf));
  const char *args[] = {"--model", model, "--device", "cpu", "--stats", NULL};
  assert_int_equal(run_tool(in, args), 0);
  cJSON *lines[64];
  int n = read_output(lines, 64);
  assert_int_equal((uint32_t)n, g.n_seqs);
  for (int i = 0; i < n; i++) {
    double s = cJSON_GetObjectItem(lines[i], "score")->valuedouble;
    if (!(mt_rel_err(s, g.scores[i]) <= MT_TOL_TRANSFORMERS))
      fail_msg("line %d: %.9g vs transformers %.9g", i + 1, s, g.scores[i]);
    cJSON_Delete(lines[i]);
  }
  char ep[1300];
  snprintf(ep, sizeof ep, "%s/err.txt", mt_tmp);
  char *err = mt_read_file(ep, NULL);
  assert_non_null(strstr(err, "tokens_per_s"));
  free(err);
  mt_golden_free(&g);
}

static void test_bad_model_and_usage(void **state) {
  (void)state;
  const char *a1[] = {"--model", mt_tmp, NULL}; /* empty directory */
  assert_int_equal(run_tool(NULL, a1), 2);
  char ep[1300];
  snprintf(ep, sizeof ep, "%s/err.txt", mt_tmp);
  char *err = mt_read_file(ep, NULL);
  assert_non_null(strstr(err, "config.json"));
  free(err);
  const char *a2[] = {"--input", "x", NULL}; /* no --model */
  assert_int_equal(run_tool(NULL, a2), 2);
}

/* The determinism promise as a user sees it: on every fixture, --threads 1, --threads 2,
 * --threads 2 --max-seqs 1 (each sequence scored alone) and the input in reverse order on
 * 3 threads print the same score text (%.9g: float round trip) for every sequence. */
static void run_to_text(const char *in, const char *const *args, char **text) {
  assert_int_equal(run_tool(in, args), 0);
  char out[1300];
  snprintf(out, sizeof out, "%s/out.jsonl", mt_tmp);
  *text = mt_read_file(out, NULL);
}

static void test_bit_identical_threads_and_batches(void **state) {
  (void)state;
  static char names[64][64];
  int nm = mt_list_models(names, 64);
  assert_true(nm >= 10);
  for (int k = 0; k < nm; k++) {
    char model[1200], in[1300], rin[1300];
    mt_model_path(model, sizeof model, names[k]);
    mt_golden_t g;
    mt_golden_load(model, &g);
    static char buf[1 << 17], rbuf[1 << 17];
    buf[0] = rbuf[0] = 0;
    for (uint32_t i = 0; i < g.n_seqs; i++) {
      append_seq(buf, sizeof buf, &g, i);
      append_seq(rbuf, sizeof rbuf, &g, g.n_seqs - 1 - i);
    }
    snprintf(in, sizeof in, "%s/in.jsonl", mt_tmp);
    snprintf(rin, sizeof rin, "%s/rin.jsonl", mt_tmp);
    mt_write_file(in, buf, strlen(buf));
    mt_write_file(rin, rbuf, strlen(rbuf));
    const char *a1[] = {"--model", model, "--threads", "1", NULL};
    const char *a2[] = {"--model", model, "--threads", "2", NULL};
    const char *a3[] = {"--model", model, "--threads", "2", "--max-seqs", "1", NULL};
    const char *a4[] = {"--model", model, "--threads", "3", NULL};
    char *t1, *t2, *t3, *t4;
    run_to_text(in, a1, &t1);
    run_to_text(in, a2, &t2);
    run_to_text(in, a3, &t3);
    run_to_text(rin, a4, &t4);
    if (strcmp(t1, t2) != 0) fail_msg("%s: --threads 1 and 2 differ:\n%s\n%s", names[k], t1, t2);
    if (strcmp(t1, t3) != 0) fail_msg("%s: batch and --max-seqs 1 differ:\n%s\n%s", names[k], t1, t3);
    /* reverse the lines of t4 and compare */
    char *lines[256];
    int n = 0;
    for (char *save = NULL, *l = strtok_r(t4, "\n", &save); l && n < 256; l = strtok_r(NULL, "\n", &save))
      lines[n++] = l;
    assert_int_equal((uint32_t)n, g.n_seqs);
    size_t off = 0;
    for (int i = n - 1; i >= 0; i--) {
      size_t len = strlen(lines[i]);
      if (strncmp(t1 + off, lines[i], len) != 0 || t1[off + len] != '\n')
        fail_msg("%s: reversed input, line %d: %s vs %.*s", names[k], n - i, lines[i], (int)len, t1 + off);
      off += len + 1;
    }
    assert_int_equal(off, strlen(t1));
    free(t1), free(t2), free(t3), free(t4);
    mt_golden_free(&g);
  }
}

/* NaN weights (issue 18): a non-finite score is an error line naming the line, every output
 * line is JSON (never {"score": nan}), and the exit status is 1. */
static void test_nonfinite_scores(void **state) {
  (void)state;
  char model[1300], in[1300];
  snprintf(model, sizeof model, "%s/nan_tok", mt_tmp);
  mt_make_nan_model("llama_gqa", model, 5); /* only sequences with token 5 give NaN */
  snprintf(in, sizeof in, "%s/in.jsonl", mt_tmp);
  static const char text[] = "[1, 2, 3]\n[4, 5, 6]\n[[1, 2], [5, 6]]\n";
  mt_write_file(in, text, sizeof text - 1);
  const char *args[] = {"--model", model, "--input", in, NULL};
  assert_int_equal(run_tool(NULL, args), 1);
  cJSON *lines[8];
  assert_int_equal(read_output(lines, 8), 3);
  const cJSON *s0 = cJSON_GetObjectItem(lines[0], "score");
  assert_true(cJSON_IsNumber(s0) && isfinite(s0->valuedouble));
  assert_string_equal(cJSON_GetObjectItem(lines[1], "error")->valuestring, "line 2: score is not finite (NaN/Inf)");
  assert_int_equal(cJSON_GetObjectItem(lines[1], "line")->valueint, 2);
  assert_string_equal(cJSON_GetObjectItem(lines[2], "error")->valuestring,
                      "line 3: sequence 1: score is not finite (NaN/Inf)");
  for (int i = 0; i < 3; i++) cJSON_Delete(lines[i]);

  snprintf(model, sizeof model, "%s/nan_all", mt_tmp); /* every score NaN: every line an error */
  mt_make_nan_model("llama_gqa", model, -1);
  assert_int_equal(run_tool(NULL, args), 1);
  assert_int_equal(read_output(lines, 8), 3);
  for (int i = 0; i < 3; i++) {
    assert_non_null(strstr(cJSON_GetObjectItem(lines[i], "error")->valuestring, "score is not finite (NaN/Inf)"));
    cJSON_Delete(lines[i]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_bit_identical_threads_and_batches, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_good_and_bad_lines, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_one_value_per_line, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_input_forms, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_stdin_all_golden, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_bad_model_and_usage, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_nonfinite_scores, mt_setup_tmp, mt_teardown_tmp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
