/* verl-tokenize: Hugging Face tokenizer encode/decode over JSON lines (docs/operations.md,
 * "Tokenizers").
 *
 *   verl-tokenize --tokenizer DIR [--no-special-tokens] [--decode] [--skip-special-tokens]
 *   stdin, one JSON object a line; stdout, one JSON line each, in order:
 *     {"text": "..."}                 -> {"input_ids": [...]}
 *     {"input_ids": [...]} (--decode) -> {"text": "..."}
 *     {"messages": [...], "add_generation_prompt": true} -> {"text": "...", "input_ids": [...]}
 *       (when built with the chat-template engine, tokenizer/jinja)
 *   A bad line (not JSON, text after its object, a read key given twice, a line longer than
 *   VR_TOKENIZE_MAX_LINE bytes, invalid UTF-8, an id outside the vocabulary) stops the run: exit 1
 *   with "verl-tokenize: <stdin>:LINE: reason" on stderr. A tokenizer that does not load exits 1
 *   naming the file, the component and the reason.
 *
 *   verl-tokenize --tokenizer DIR --bench FILE [--threads N] [--repeat R]
 *     FILE holds JSON lines {"text": ...}; prints one JSON line: load_ms, bytes, single-thread
 *     MB/s, N-thread MB/s (each thread encodes its share of the texts, R passes). */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vr_cli.h"
#include "vr_jsonl.h"
#include "vr_line.h"
#include "vr_tokenizer.h"
#ifdef VR_HAVE_JINJA
#include "vr_tok_chat.h"
#endif

static const char *prog = "verl-tokenize";

#define VR_TOKENIZE_MAX_LINE (64u << 20) /* bytes of one input line kept in memory */

static void usage(FILE *f) {
  fprintf(f,
          "usage: %s --tokenizer DIR [--no-special-tokens] [--decode] [--skip-special-tokens]\n"
          "       %s --tokenizer DIR --bench FILE [--threads N] [--repeat R]\n"
          "Reads JSON lines on stdin: {\"text\"} -> {\"input_ids\"}; with --decode {\"input_ids\"} -> {\"text\"};\n"
          "{\"messages\", \"add_generation_prompt\"} -> {\"text\", \"input_ids\"} (chat template).\n"
          "  --help, --version\n",
          prog, prog);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fail_line(size_t line, const char *fmt, const char *why) {
  fprintf(stderr, "%s: <stdin>:%zu: ", prog, line);
  fprintf(stderr, fmt, why);
  fputc('\n', stderr);
  return VR_EXIT_FAIL;
}

static cJSON *ids_json(const int32_t *ids, size_t n) {
  cJSON *a = cJSON_CreateArray();
  for (size_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
  return a;
}

static int emit(cJSON *o) {
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!s) return -1;
  fputs(s, stdout);
  fputc('\n', stdout);
  free(s);
  return 0;
}

/* One input line -> one output line; nonzero exit code on a bad line. */
static int do_line(const vr_tok_t *tok, vr_tok_scratch_t *sc, const char *buf, size_t len, size_t line,
                   int add_special, int decode, int skip_special) {
  char err[512] = "";
  const char *why = NULL;
  size_t at = 0;
  cJSON *in = vr_jsonl_parse(buf, len, &why, &at);
  if (!in && (at || why[0] != 'm')) {
    snprintf(err, sizeof err, "%s at byte %zu (one JSON object per line)", why, at + 1);
    return fail_line(line, "%s", err);
  }
  if (!cJSON_IsObject(in)) {
    cJSON_Delete(in);
    return fail_line(line, "%s", "not a JSON object");
  }
  /* Python's json keeps the last of a repeated key, cJSON finds the first: a key read is refused */
  static const char *const read_keys[] = {"text", "input_ids", "messages", "add_generation_prompt"};
  for (size_t i = 0; i < sizeof read_keys / sizeof *read_keys; i++)
    if (vr_jsonl_dup(in, read_keys[i])) {
      cJSON_Delete(in);
      snprintf(err, sizeof err, "\"%s\" appears more than once", read_keys[i]);
      return fail_line(line, "%s", err);
    }
  int rc = VR_EXIT_OK;
  const cJSON *text = cJSON_GetObjectItemCaseSensitive(in, "text");
  const cJSON *ids = cJSON_GetObjectItemCaseSensitive(in, "input_ids");
  const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(in, "messages");
  if (decode) {
    if (!cJSON_IsArray(ids)) {
      rc = fail_line(line, "%s", "--decode needs {\"input_ids\": [...]}");
    } else {
      size_t n = (size_t)cJSON_GetArraySize(ids), k = 0;
      int32_t *v = malloc((n ? n : 1) * sizeof *v);
      const cJSON *e;
      cJSON_ArrayForEach(e, ids) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 2147483647.0 ||
            e->valuedouble != (double)(int32_t)e->valuedouble) {
          rc = fail_line(line, "%s", "input_ids holds something that is not a token id");
          break;
        }
        v[k++] = (int32_t)e->valuedouble;
      }
      char *out = NULL;
      size_t on = 0;
      if (!rc && vr_tok_decode(tok, v, k, skip_special, &out, &on, err, sizeof err)) rc = fail_line(line, "decode: %s", err);
      if (!rc) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "text", out);
        emit(o);
      }
      free(out);
      free(v);
    }
  } else if (cJSON_IsString(text)) {
    int32_t *v = NULL;
    size_t n = 0;
    if (vr_tok_encode_with(tok, sc, text->valuestring, strlen(text->valuestring), add_special, &v, &n, err, sizeof err)) {
      rc = fail_line(line, "text: %s", err);
    } else {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddItemToObject(o, "input_ids", ids_json(v, n));
      emit(o);
    }
    free(v);
  } else if (msgs) {
#ifdef VR_HAVE_JINJA
    int agp = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(in, "add_generation_prompt"));
    char *mj = cJSON_PrintUnformatted(msgs);
    char *rendered = NULL;
    if (!mj || vr_tok_apply_chat_template(tok, mj, agp, &rendered, err, sizeof err)) {
      rc = fail_line(line, "messages: %s", mj ? err : "out of memory");
    } else {
      int32_t *v = NULL;
      size_t n = 0;
      /* transformers' apply_chat_template(tokenize=True) encodes the rendered text without
       * adding special tokens (the template writes them) */
      if (vr_tok_encode_with(tok, sc, rendered, strlen(rendered), 0, &v, &n, err, sizeof err)) {
        rc = fail_line(line, "rendered template: %s", err);
      } else {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "text", rendered);
        cJSON_AddItemToObject(o, "input_ids", ids_json(v, n));
        emit(o);
      }
      free(v);
    }
    free(rendered);
    free(mj);
#else
    rc = fail_line(line, "%s", "messages: this build has no chat-template engine (tokenizer/jinja)");
#endif
  } else {
    rc = fail_line(line, "%s", decode ? "expected {\"input_ids\": [...]}" : "expected {\"text\": \"...\"} or {\"messages\": [...]}");
  }
  cJSON_Delete(in);
  return rc;
}

/* ---- --bench ------------------------------------------------------------------------------ */

typedef struct bench_job {
  const vr_tok_t *tok;
  char **texts;
  size_t *lens;
  size_t from, to, step;
  int repeat;
  size_t tokens;
  int rc;
} bench_job_t;

static void *bench_thread(void *u) {
  bench_job_t *j = u;
  vr_tok_scratch_t *sc = vr_tok_scratch_new();
  char err[256];
  for (int r = 0; r < j->repeat && sc; r++)
    for (size_t i = j->from; i < j->to; i += j->step) {
      int32_t *ids = NULL;
      size_t n = 0;
      if (vr_tok_encode_with(j->tok, sc, j->texts[i], j->lens[i], 1, &ids, &n, err, sizeof err)) j->rc = 1;
      j->tokens += n;
      free(ids);
    }
  vr_tok_scratch_free(sc);
  return NULL;
}

static int bench(const char *dir, const char *file, int threads, int repeat) {
  char err[512];
  double t0 = now_s();
  vr_tok_t *tok = NULL;
  if (vr_tok_load(dir, &tok, err, sizeof err)) {
    fprintf(stderr, "%s: %s\n", prog, err);
    return VR_EXIT_FAIL;
  }
  double load_ms = (now_s() - t0) * 1e3;
  FILE *f = fopen(file, "r");
  if (!f) {
    fprintf(stderr, "%s: --bench %s: cannot open\n", prog, file);
    vr_tok_free(tok);
    return VR_EXIT_FAIL;
  }
  char **texts = NULL;
  size_t *lens = NULL, nt = 0, bytes = 0;
  char *line = NULL;
  size_t cap = 0, got = 0, lineno = 0;
  int r, bad = 0;
  while (!bad && (r = vr_line_read(f, VR_TOKENIZE_MAX_LINE, &line, &cap, &got)) != VR_LINE_EOF) {
    lineno++;
    size_t k = 0;
    while (r == 0 && k < got && strchr(" \t\r\n", line[k]) && line[k]) k++;
    if (r == 0 && k == got) continue; /* a blank line */
    const char *why = r == VR_LINE_TOO_LONG ? "longer than the line bound" : "out of memory";
    size_t at = 0;
    cJSON *o = r == 0 ? vr_jsonl_parse(line, got, &why, &at) : NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "text");
    if (!o || vr_jsonl_dup(o, "text")) {
      fprintf(stderr, "%s: --bench %s:%zu: %s at byte %zu (one JSON object per line)\n", prog, file, lineno,
              o ? "\"text\" appears more than once" : why, at + 1);
      bad = 1;
    } else if (cJSON_IsString(t)) {
      texts = realloc(texts, (nt + 1) * sizeof *texts);
      lens = realloc(lens, (nt + 1) * sizeof *lens);
      texts[nt] = strdup(t->valuestring);
      lens[nt] = strlen(t->valuestring);
      bytes += lens[nt++];
    }
    cJSON_Delete(o);
  }
  free(line);
  fclose(f);
  if (bad) {
    for (size_t i = 0; i < nt; i++) free(texts[i]);
    free(texts);
    free(lens);
    vr_tok_free(tok);
    return VR_EXIT_FAIL;
  }
  bench_job_t one = {tok, texts, lens, 0, nt, 1, repeat, 0, 0};
  double t1 = now_s();
  bench_thread(&one);
  double single = now_s() - t1;
  if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  bench_job_t *jobs = calloc((size_t)threads, sizeof *jobs);
  pthread_t *th = calloc((size_t)threads, sizeof *th);
  double t2 = now_s();
  for (int i = 0; i < threads; i++) {
    jobs[i] = (bench_job_t){tok, texts, lens, (size_t)i, nt, (size_t)threads, repeat, 0, 0};
    pthread_create(&th[i], NULL, bench_thread, &jobs[i]);
  }
  size_t mtok = 0;
  int rc = one.rc;
  for (int i = 0; i < threads; i++) {
    pthread_join(th[i], NULL);
    mtok += jobs[i].tokens;
    rc |= jobs[i].rc;
  }
  double multi = now_s() - t2;
  double mb = (double)bytes * repeat / 1e6;
  printf("{\"tokenizer\": \"%s\", \"load_ms\": %.1f, \"texts\": %zu, \"bytes\": %zu, \"repeat\": %d, \"tokens\": %zu, "
         "\"single_MBps\": %.2f, \"threads\": %d, \"multi_tokens\": %zu, \"multi_MBps\": %.2f, \"errors\": %d}\n",
         dir, load_ms, nt, bytes, repeat, one.tokens, mb / single, threads, mtok, mb / multi, rc);
  for (size_t i = 0; i < nt; i++) free(texts[i]);
  free(texts);
  free(lens);
  free(jobs);
  free(th);
  vr_tok_free(tok);
  return rc ? VR_EXIT_FAIL : VR_EXIT_OK;
}

int main(int argc, char **argv) {
  const char *dir = NULL, *bench_file = NULL;
  int add_special = 1, decode = 0, skip_special = 0, threads = 0, repeat = 1;
  static const struct option longopts[] = {
      {"tokenizer", required_argument, NULL, 't'},     {"no-special-tokens", no_argument, NULL, 'n'},
      {"decode", no_argument, NULL, 'd'},              {"skip-special-tokens", no_argument, NULL, 's'},
      {"bench", required_argument, NULL, 'b'},         {"threads", required_argument, NULL, 'j'},
      {"repeat", required_argument, NULL, 'r'},        {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},             {NULL, 0, NULL, 0}};
  opterr = 0;
  int c;
  uint64_t v;
  while ((c = getopt_long(argc, argv, ":t:ndsb:j:r:hV", longopts, NULL)) != -1) {
    switch (c) {
    case 't': dir = optarg; break;
    case 'n': add_special = 0; break;
    case 'd': decode = 1; break;
    case 's': skip_special = 1; break;
    case 'b': bench_file = optarg; break;
    case 'j':
      if (vr_cli_parse_u64(prog, "--threads", optarg, 0, 4096, &v)) return VR_EXIT_USAGE;
      threads = (int)v;
      break;
    case 'r':
      if (vr_cli_parse_u64(prog, "--repeat", optarg, 1, 100000, &v)) return VR_EXIT_USAGE;
      repeat = (int)v;
      break;
    case 'h': usage(stdout); return VR_EXIT_OK;
    case 'V': vr_cli_version(stdout, prog, NULL); return VR_EXIT_OK;
    default: return vr_cli_getopt_error(prog, c, argv, optind, optopt);
    }
  }
  if (optind < argc) return vr_cli_usage_error(prog, "unexpected argument '%s'", argv[optind]);
  if (!dir) return vr_cli_usage_error(prog, "--tokenizer DIR is required");
  if (bench_file) return bench(dir, bench_file, threads, repeat);
  char err[1024];
  vr_tok_t *tok = NULL;
  if (vr_tok_load(dir, &tok, err, sizeof err)) {
    fprintf(stderr, "%s: %s\n", prog, err);
    return VR_EXIT_FAIL;
  }
  vr_tok_scratch_t *sc = vr_tok_scratch_new();
  char *line = NULL;
  size_t cap = 0, lineno = 0, got = 0;
  int rc = sc ? VR_EXIT_OK : VR_EXIT_FAIL, r;
  while (!rc && (r = vr_line_read(stdin, VR_TOKENIZE_MAX_LINE, &line, &cap, &got)) != VR_LINE_EOF) {
    lineno++;
    if (r == VR_LINE_NOMEM || r == VR_LINE_TOO_LONG) {
      snprintf(err, sizeof err, "line of %zu bytes is longer than %u", got, VR_TOKENIZE_MAX_LINE);
      rc = fail_line(lineno, "%s", r == VR_LINE_NOMEM ? "out of memory" : err);
      break;
    }
    size_t n = got;
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
    if (!n) continue;
    rc = do_line(tok, sc, line, n, lineno, add_special, decode, skip_special);
  }
  free(line);
  vr_tok_scratch_free(sc);
  vr_tok_free(tok);
  if (fflush(stdout) != 0) rc = VR_EXIT_FAIL;
  return rc;
}
