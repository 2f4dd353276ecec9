/* verl-reward-score: score token sequences offline with the model runtime.
 *
 *   verl-reward-score --model DIR [--device cpu|cuda[:N]] [--dtype auto|f32|bf16] [--input FILE]
 *                     [--threads N] [--cpu-gemm auto|generic|avx2+fma] [--max-batch-tokens N]
 *                     [--max-seqs N] [--stats] [--log-level L] [--cuda-OPTION VALUE]...   (the server's CUDA tuning flags)
 *
 * Input: JSON lines (stdin by default), each one of
 *   {"input_ids": [int, ...]}  or  [int, ...]                  one sequence
 *   {"input_ids": [[int, ...], ...]}  or  [[int, ...], ...]    a batch line (at most 256 sequences)
 * (a list whose first item is a number is one sequence); blank lines are skipped. A line is
 * exactly one JSON value (text after it is an error, not dropped), a key read (input_ids, text,
 * messages, add_generation_prompt, add_special_tokens) may appear once (Python keeps the last of
 * a repeat, cJSON the first), and a line past VR_SCORE_MAX_LINE bytes is an error line (only that
 * much of it is held in memory).
 * When the model directory holds a tokenizer (tokenizer.json), also
 *   {"text": "..."} / {"text": ["...", ...]}                    one text / a batch of texts
 *   {"messages": [{"role", "content"}, ...]} / {"messages": [[...], ...]}   one conversation / a batch
 * with optional "add_special_tokens" (text; default true) and "add_generation_prompt"
 * (messages; default false): texts are encoded as tokenizer(text), conversations rendered with
 * the tokenizer's chat template and encoded as apply_chat_template(tokenize=True), as the
 * server does (docs/protocol.md).
 * Output (stdout): one line per input line, in order: {"score": x} for one sequence,
 * {"scores": [x, ...]} for a batch line, or {"error": "line N: reason", "line": N} for a
 * line that could not be scored (malformed JSON, bad ids, too long, ...); a batch line
 * with a bad sequence j is one error line, "line N: sequence j: reason", with "sequence": j. --max-seqs caps the sequences per forward
 * (1: every sequence scored alone). Errors are also logged to stderr and
 * make the exit status 1; a model that does not load gives status 2, as does a bad command line
 * (unknown flag, missing or bad value: every value is checked before the model loads).
 * --stats prints tokens, sequences, wall time, tokens/s and peak RSS to stderr
 * (the numbers docs/benchmarks.md records). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "verl_reward/status.h"
#include "vr_cli.h"
#include "vr_jsonl.h"
#include "vr_line.h"
#include "vr_log.h"
#include "vr_model.h"
#include "vr_time.h"
#include "vr_tok_chat.h"
#include "vr_tokenizer.h"
#include <unistd.h>

#define VR_SCORE_CHUNK_SEQS 256   /* sequences scored per vr_model_score call */
#define VR_SCORE_MAX_LINE (64u << 20) /* bytes of one input line kept in memory */

typedef struct vr_score_batch {
  int32_t *ids;
  size_t n_ids, cap_ids;
  uint32_t cu[VR_SCORE_CHUNK_SEQS + 1];
  uint64_t line[VR_SCORE_CHUNK_SEQS]; /* input line of each sequence */
  int32_t seq[VR_SCORE_CHUNK_SEQS];   /* index in its batch line, -1 for a one-sequence line */
  uint32_t of[VR_SCORE_CHUNK_SEQS];   /* sequences on its line */
  char *err[VR_SCORE_CHUNK_SEQS];     /* parse error of an entry (owned), or NULL */
  uint32_t n;
} vr_score_batch_t;

static void usage(FILE *f) {
  fprintf(f,
          "usage: verl-reward-score --model DIR [--device cpu|cuda[:N]] [--dtype auto|f32|bf16] [--input FILE]\n"
          "                         [--threads N] [--cpu-gemm auto|generic|avx2+fma] [--max-batch-tokens N]\n"
          "                         [--max-seqs N] [--stats]\n"
          "                         [--log-level L] [--cuda-OPTION VALUE]...\n"
          "       verl-reward-score --version | --help\n"
          "Reads JSON lines {\"input_ids\": [ids]} or [ids] (one sequence: writes {\"score\": x}) or\n"
          "{\"input_ids\": [[ids], ...]} or [[ids], ...] (a batch: writes {\"scores\": [x, ...]}), one output line\n"
          "per input line, in order.\n"
          "CUDA tuning (--device cuda), as verl-reward-server takes it:\n");
  for (size_t i = 0; vr_cuda_option_at(i); i++) {
    char flag[96];
    snprintf(flag, sizeof flag, "--%s %s", vr_cuda_option_at(i)->name, vr_cuda_option_at(i)->values);
    fprintf(f, "  %-32s %s\n", flag, vr_cuda_option_at(i)->help);
  }
}

#define VR_SCORE_OPT_CUDA 1000 /* getopt value of the first --cuda-* option (vr_cuda_option_at order) */

/* The sequences one input line holds (see the top of the file for the forms). */
typedef struct vr_score_line {
  cJSON *root;
  const cJSON *first; /* the first sequence (an array), or NULL */
  int flat;           /* first is the line's only sequence */
  uint32_t n;         /* sequences on the line (1 for a line that cannot be scored) */
  char *why;          /* malloc'd reason the whole line cannot be scored, or NULL */
} vr_score_line_t;

/* The tokenizer of the model directory (NULL: none; why says why). */
typedef struct vr_score_tok {
  vr_tok_t *tok;
  char why[1024];
} vr_score_tok_t;

/* A {"text"} / {"messages"} line becomes {"input_ids": [[...], ...]} (or one flat list for a
 * single text / conversation); returns NULL or a malloc'd reason. */
static char *vr_score_encode_line(cJSON *root, const vr_score_tok_t *tk) {
  const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text");
  const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
  const cJSON *agp = cJSON_GetObjectItemCaseSensitive(root, "add_generation_prompt");
  const cJSON *ast = cJSON_GetObjectItemCaseSensitive(root, "add_special_tokens");
  char msg[1200];
  if (text && msgs) return strdup("give one of \"input_ids\", \"text\" and \"messages\"");
  if (cJSON_GetObjectItemCaseSensitive(root, "input_ids")) return strdup("give one of \"input_ids\", \"text\" and \"messages\"");
  if (!tk->tok) {
    snprintf(msg, sizeof msg, "text and messages need a tokenizer: %s", tk->why);
    return strdup(msg);
  }
  if ((agp && !cJSON_IsBool(agp)) || (ast && !cJSON_IsBool(ast)))
    return strdup("\"add_generation_prompt\" / \"add_special_tokens\" must be booleans");
  const cJSON *items = text ? text : msgs;
  int single = text ? cJSON_IsString(text) : (cJSON_IsArray(msgs) && msgs->child && cJSON_IsObject(msgs->child));
  if (!single && !cJSON_IsArray(items))
    return strdup(text ? "\"text\" must be a string or a list of strings" : "\"messages\" must be a list of conversations");
  if (!single && cJSON_GetArraySize(items) > VR_SCORE_CHUNK_SEQS) {
    snprintf(msg, sizeof msg, "%d sequences on one line, more than %d", cJSON_GetArraySize(items), VR_SCORE_CHUNK_SEQS);
    return strdup(msg);
  }
  cJSON *out = cJSON_CreateArray();
  uint32_t k = 0;
  for (const cJSON *it = single ? items : items->child; it; it = single ? NULL : it->next, k++) {
    char err[512] = "";
    char *rendered = NULL;
    size_t rlen = 0;
    const char *src = NULL;
    int rc = 0, add_special = ast ? cJSON_IsTrue(ast) : 1;
    if (text) {
      if (!cJSON_IsString(it)) {
        snprintf(msg, sizeof msg, "text[%u] must be a string", k);
        cJSON_Delete(out);
        return strdup(msg);
      }
      src = it->valuestring;
      rlen = strlen(src);
    } else {
      char *js = cJSON_IsArray(it) ? cJSON_PrintUnformatted(it) : NULL;
      if (!js) {
        snprintf(msg, sizeof msg, "messages[%u] must be a list of message objects", k);
        cJSON_Delete(out);
        return strdup(msg);
      }
      rc = vr_tok_apply_chat_template_ex(tk->tok, NULL, js, agp && cJSON_IsTrue(agp), NULL, &rendered, &rlen, err,
                                         sizeof err);
      free(js);
      src = rendered;
      add_special = 0; /* apply_chat_template(tokenize=True): the template writes BOS itself */
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (!rc) rc = vr_tok_encode(tk->tok, src, rlen, add_special, &ids, &n, err, sizeof err);
    free(rendered);
    if (rc) {
      snprintf(msg, sizeof msg, "%s[%u]: %s", text ? "text" : "messages", k, err);
      cJSON_Delete(out);
      return strdup(msg);
    }
    cJSON *seq = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(seq, cJSON_CreateNumber(ids[i]));
    free(ids);
    if (single) {
      cJSON_Delete(out);
      out = seq;
    } else {
      cJSON_AddItemToArray(out, seq);
    }
  }
  cJSON_AddItemToObject(root, "input_ids", out);
  return NULL;
}

static void vr_score_line_read(const char *text, size_t len, const vr_score_tok_t *tk, vr_score_line_t *l) {
  memset(l, 0, sizeof *l);
  l->n = 1;
  const char *bad = NULL;
  size_t at = 0;
  char msg[160];
  l->root = vr_jsonl_parse(text, len, &bad, &at);
  if (!l->root && (at || bad[0] != 'm')) {
    snprintf(msg, sizeof msg, "%s at byte %zu (one JSON value per line)", bad, at + 1);
    l->why = strdup(msg);
    return;
  }
  static const char *const read_keys[] = {"input_ids", "text", "messages", "add_generation_prompt",
                                          "add_special_tokens"};
  for (size_t i = 0; cJSON_IsObject(l->root) && i < sizeof read_keys / sizeof *read_keys; i++)
    if (vr_jsonl_dup(l->root, read_keys[i])) {
      snprintf(msg, sizeof msg, "\"%s\" appears more than once", read_keys[i]);
      l->why = strdup(msg);
      return;
    }
  if (cJSON_IsObject(l->root) && (cJSON_GetObjectItemCaseSensitive(l->root, "text") ||
                                  cJSON_GetObjectItemCaseSensitive(l->root, "messages"))) {
    if ((l->why = vr_score_encode_line(l->root, tk))) return;
  }
  const cJSON *arr = l->root;
  if (l->root && cJSON_IsObject(l->root)) arr = cJSON_GetObjectItemCaseSensitive(l->root, "input_ids");
  if (!l->root || !(cJSON_IsObject(l->root) || cJSON_IsArray(l->root))) {
    l->why = strdup("malformed JSON (expected {\"input_ids\": [...]} or a bare list)");
  } else if (!cJSON_IsArray(arr)) {
    l->why = strdup("no \"input_ids\" array");
  } else if (!arr->child || !cJSON_IsArray(arr->child)) { /* one sequence (or an empty one) */
    l->flat = 1;
    l->first = arr;
  } else {
    int n = cJSON_GetArraySize(arr);
    if (n > VR_SCORE_CHUNK_SEQS) {
      char msg[96];
      snprintf(msg, sizeof msg, "%d sequences on one line, more than %d", n, VR_SCORE_CHUNK_SEQS);
      l->why = strdup(msg);
    } else {
      l->first = arr->child;
      l->n = (uint32_t)n;
    }
  }
}

/* Appends sequence k of its line (`seq`: an id array, or NULL) to b; returns NULL or a malloc'd reason. */
static char *vr_score_append(const cJSON *seq, int flat, uint32_t k, vr_score_batch_t *b) {
  char msg[96];
  if (!cJSON_IsArray(seq)) {
    snprintf(msg, sizeof msg, "input_ids[%u] is not a list of token ids", k);
    return strdup(msg);
  }
  size_t n = (size_t)cJSON_GetArraySize(seq), i = 0;
  if (b->n_ids + n > b->cap_ids) {
    size_t cap = (b->n_ids + n) * 2 + 1024;
    int32_t *p = realloc(b->ids, cap * sizeof *p);
    if (!p) return strdup("out of memory");
    b->ids = p;
    b->cap_ids = cap;
  }
  for (const cJSON *it = seq->child; it; it = it->next, i++) {
    double d = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!(d >= -2147483648.0 && d <= 2147483647.0) || floor(d) != d) {
      if (flat) snprintf(msg, sizeof msg, "input_ids[%zu] is not an integer token id", i);
      else snprintf(msg, sizeof msg, "input_ids[%u][%zu] is not an integer token id", k, i);
      return strdup(msg);
    }
    b->ids[b->n_ids + i] = (int32_t)d;
  }
  b->n_ids += n;
  return NULL;
}

/* Adds every sequence of line l (the batch has room for l->n) and frees l. */
static void vr_score_add_line(vr_score_line_t *l, uint64_t lineno, vr_score_batch_t *b) {
  const cJSON *seq = l->first;
  for (uint32_t k = 0; k < l->n; k++) {
    b->err[b->n] = l->why ? (k ? NULL : strdup(l->why)) : vr_score_append(seq, l->flat, k, b);
    b->line[b->n] = lineno;
    b->seq[b->n] = l->flat || l->why ? -1 : (int32_t)k;
    b->of[b->n] = l->n;
    b->cu[b->n + 1] = (uint32_t)b->n_ids;
    b->n++;
    if (seq) seq = seq->next;
  }
  free(l->why);
  cJSON_Delete(l->root);
}

static void vr_score_print_error(uint64_t line, int32_t seq, const char *reason) {
  char msg[320];
  if (seq < 0) snprintf(msg, sizeof msg, "line %llu: %s", (unsigned long long)line, reason);
  else snprintf(msg, sizeof msg, "line %llu: sequence %d: %s", (unsigned long long)line, seq, reason);
  vr_log(VR_LOG_ERROR, "%s", msg);
  cJSON *o = cJSON_CreateObject();
  char *js = NULL;
  if (o && cJSON_AddStringToObject(o, "error", msg) && cJSON_AddNumberToObject(o, "line", (double)line) &&
      (seq < 0 || cJSON_AddNumberToObject(o, "sequence", seq)))
    js = cJSON_PrintUnformatted(o); /* escapes the quotes of the reason */
  printf("%s\n", js ? js : "{\"error\": \"out of memory\"}");
  free(js);
  cJSON_Delete(o);
}

/* Scores the batch and prints one line per entry; returns the number of failed lines. */
static int vr_score_flush(vr_model_t *m, vr_score_batch_t *b, float *scores, int32_t *st) {
  int failed = 0;
  if (b->n == 0) return 0;
  int rc = vr_model_score(m, b->ids, b->cu, b->n, scores, st);
  for (uint32_t i = 0; i < b->n; i += b->seq[i] < 0 ? 1 : b->of[i]) {
    uint32_t k = b->seq[i] < 0 ? 1 : b->of[i]; /* entries i .. i+k-1 are one input line */
    char reason[256] = "";
    int32_t bad = -1;
    for (uint32_t j = i; j < i + k && !reason[0]; j++) {
      if (b->err[j]) snprintf(reason, sizeof reason, "%s", b->err[j]);
      else if (rc != 0) snprintf(reason, sizeof reason, "scoring failed: %s", vr_strerror(rc));
      else if (st[j] != 0) snprintf(reason, sizeof reason, "%s", vr_strerror(st[j]));
      else if (!isfinite(scores[j])) /* vr_model_score says NONFINITE first; never print nan/inf */
        snprintf(reason, sizeof reason, "%s", vr_strerror(VR_ERR_NONFINITE));
      if (reason[0]) bad = b->seq[j];
    }
    if (reason[0]) {
      failed++;
      vr_score_print_error(b->line[i], bad, reason);
    } else if (b->seq[i] < 0) {
      printf("{\"score\": %.9g}\n", scores[i]);
    } else {
      printf("{\"scores\": [");
      for (uint32_t j = i; j < i + k; j++) printf("%s%.9g", j > i ? ", " : "", scores[j]);
      printf("]}\n");
    }
    for (uint32_t j = i; j < i + k; j++) {
      free(b->err[j]);
      b->err[j] = NULL;
    }
  }
  b->n = 0;
  b->n_ids = 0;
  b->cu[0] = 0;
  return failed;
}

int main(int argc, char **argv) {
  const char *model_dir = NULL, *input = NULL;
  vr_model_options_t opt;
  vr_model_options_init(&opt);
  int stats = 0;
  static const struct option base_opts[] = {
      {"model", required_argument, 0, 'm'},        {"model_name_or_path", required_argument, 0, 'm'},
      {"device", required_argument, 0, 'd'},       {"input", required_argument, 0, 'i'},
      {"threads", required_argument, 0, 't'},      {"max-batch-tokens", required_argument, 0, 'b'},
      {"cpu-gemm", required_argument, 0, 'g'},
      {"max-seqs", required_argument, 0, 'q'},     {"stats", no_argument, 0, 's'},
      {"log-level", required_argument, 0, 'l'},   {"dtype", required_argument, 0, 'D'},
      {"version", no_argument, 0, 'V'},           {"help", no_argument, 0, 'h'}};
  enum { N_BASE = sizeof base_opts / sizeof base_opts[0], MAX_CUDA = 16 };
  struct option longopts[N_BASE + MAX_CUDA + 1];
  size_t nl = 0;
  for (; nl < N_BASE; nl++) longopts[nl] = base_opts[nl];
  for (size_t i = 0; i < MAX_CUDA && vr_cuda_option_at(i); i++)
    longopts[nl++] = (struct option){vr_cuda_option_at(i)->name, required_argument, 0, VR_SCORE_OPT_CUDA + (int)i};
  longopts[nl] = (struct option){0, 0, 0, 0};
  static const char prog[] = "verl-reward-score";
  char device[32] = "cpu", dtype[16] = "auto", verr[384];
  uint64_t v;
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":m:d:i:t:b:q:g:sl:h", longopts, NULL)) != -1) {
    if (c >= VR_SCORE_OPT_CUDA && vr_cuda_option_at((size_t)(c - VR_SCORE_OPT_CUDA))) {
      char err[160];
      if (vr_cuda_options_set(&opt.cuda, vr_cuda_option_at((size_t)(c - VR_SCORE_OPT_CUDA))->name, optarg, err,
                              sizeof err) != 0) {
        return vr_cli_usage_error(prog, "--%s", err);
      }
      continue;
    }
    switch (c) {
      case 'm': model_dir = optarg; break;
      case 'd':
        if (vr_model_device_parse(optarg, device, sizeof device, verr, sizeof verr) != 0)
          return vr_cli_usage_error(prog, "%s", verr);
        break;
      case 'D':
        if (vr_model_dtype_parse(optarg, dtype, sizeof dtype, verr, sizeof verr) != 0)
          return vr_cli_usage_error(prog, "%s", verr);
        break;
      case 'g':
        if (vr_model_cpu_gemm_parse(optarg, verr, sizeof verr) != 0) return vr_cli_usage_error(prog, "%s", verr);
        opt.cpu_gemm = optarg;
        break;
      case 'i': input = optarg; break;
      case 't':
        if (vr_cli_parse_u64(prog, "--threads", optarg, 0, 4096, &v)) return VR_EXIT_USAGE;
        opt.n_threads = (int)v;
        break;
      case 'b':
        if (vr_cli_parse_u64(prog, "--max-batch-tokens", optarg, 1, 1u << 26, &v)) return VR_EXIT_USAGE;
        opt.max_batch_tokens = (uint32_t)v;
        break;
      case 'q':
        if (vr_cli_parse_u64(prog, "--max-seqs", optarg, 1, 1u << 26, &v)) return VR_EXIT_USAGE;
        opt.max_seqs = (uint32_t)v;
        break;
      case 's': stats = 1; break;
      case 'l': {
        vr_log_level_t lv;
        if (vr_log_level_parse(optarg, &lv) != 0)
          return vr_cli_usage_error(prog, "--log-level '%s' is not trace|debug|info|warn|error|fatal|off", optarg);
        vr_log_set_level(lv);
        break;
      }
      case 'V': {
        char rt[128];
        vr_cli_version(stdout, prog, vr_model_runtime_versions(rt, sizeof rt));
        return 0;
      }
      case 'h': usage(stdout); return 0;
      default: return vr_cli_getopt_error(prog, c, argv, optind, optopt);
    }
  }
  if (optind != argc) return vr_cli_usage_error(prog, "unexpected argument '%s'", argv[optind]);
  if (!model_dir) return vr_cli_usage_error(prog, "--model DIR is required");
  if (vr_model_dir_check(model_dir, verr, sizeof verr) != 0 ||
      vr_model_device_dtype_check(device, dtype, verr, sizeof verr) != 0)
    return vr_cli_usage_error(prog, "%s", verr);
  opt.device = device;
  opt.dtype = dtype;
  FILE *in = stdin;
  if (input && strcmp(input, "-") != 0) {
    in = fopen(input, "r");
    if (!in) {
      return vr_cli_usage_error(prog, "--input '%s': %s", input, strerror(errno));
    }
  }
  vr_model_t *m = NULL;
  int rc = vr_model_load(model_dir, &opt, &m);
  if (rc != 0) {
    fprintf(stderr, "verl-reward-score: cannot load model %s on %s: %s. HINT: %s\n", model_dir, device,
            vr_strerror(rc), vr_model_load_hint(rc));
    if (in != stdin) fclose(in);
    return 2;
  }
  vr_score_tok_t tk = {0};
  char tpath[4096];
  snprintf(tpath, sizeof tpath, "%s/tokenizer.json", model_dir);
  if (access(tpath, F_OK) != 0) {
    snprintf(tk.why, sizeof tk.why, "the model directory %s has no tokenizer.json", model_dir);
  } else if (vr_tok_load(model_dir, &tk.tok, verr, sizeof verr) != 0) {
    tk.tok = NULL;
    snprintf(tk.why, sizeof tk.why, "the tokenizer of %s did not load: %s", model_dir, verr);
    vr_log(VR_LOG_WARN, "%s; text and messages lines fail, input_ids lines are scored", tk.why);
  }
  vr_score_batch_t b = {0};
  float scores[VR_SCORE_CHUNK_SEQS];
  int32_t st[VR_SCORE_CHUNK_SEQS];
  char *line = NULL;
  size_t cap = 0, len = 0;
  uint64_t lineno = 0, tokens = 0, seqs = 0, t0 = vr_now_ns();
  int failed = 0, r;
  while ((r = vr_line_read(in, VR_SCORE_MAX_LINE, &line, &cap, &len)) != VR_LINE_EOF) {
    lineno++;
    size_t l = len;
    vr_score_line_t sl;
    if (r != 0) { /* one error line; the reader went on to the next line */
      char msg[96];
      snprintf(msg, sizeof msg, "line of %zu bytes is longer than %u", len, VR_SCORE_MAX_LINE);
      if (r == VR_LINE_NOMEM) snprintf(msg, sizeof msg, "out of memory");
      memset(&sl, 0, sizeof sl);
      sl.n = 1;
      sl.why = strdup(msg);
      l = 0;
    }
    while (l > 0 && (line[l - 1] == '\n' || line[l - 1] == '\r' || line[l - 1] == ' ' || line[l - 1] == '\t')) l--;
    size_t k = 0;
    while (k < l && (line[k] == ' ' || line[k] == '\t')) k++;
    if (r == 0 && k == l) continue; /* blank line */
    if (r == 0) vr_score_line_read(line + k, l - k, &tk, &sl);
    if (b.n + sl.n > VR_SCORE_CHUNK_SEQS) failed += vr_score_flush(m, &b, scores, st); /* a line stays in one chunk */
    uint32_t from = b.n;
    vr_score_add_line(&sl, lineno, &b);
    tokens += b.cu[b.n] - b.cu[from];
    seqs += b.n - from;
    if (b.n == VR_SCORE_CHUNK_SEQS) failed += vr_score_flush(m, &b, scores, st);
  }
  failed += vr_score_flush(m, &b, scores, st);
  double secs = (double)(vr_now_ns() - t0) / 1e9;
  if (stats) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const vr_model_info_t *info = vr_model_info(m);
    fprintf(stderr,
            "stats: model %s device %s sequences %llu tokens %llu seconds %.3f tokens_per_s %.1f "
            "max_rss_mib %.1f host_bytes_mib %.1f\n",
            info->architecture, info->device_name, (unsigned long long)seqs, (unsigned long long)tokens,
            secs, secs > 0 ? (double)tokens / secs : 0.0, (double)ru.ru_maxrss / 1024.0,
            (double)info->host_bytes / (1024.0 * 1024.0));
  }
  free(line);
  free(b.ids);
  if (in != stdin) fclose(in);
  vr_model_free(m);
  vr_tok_free(tk.tok);
  fflush(stdout);
  return failed ? 1 : 0;
}
