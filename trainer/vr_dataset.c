/* vr_dataset.c: the RL prompt dataset and its sampler (vr_dataset.h). */
#include "vr_dataset.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "verl_reward/status.h"
#include "vr_jsonl.h"
#include "vr_line.h"
#include "vr_rlconfig.h"
#include "vr_tok_chat.h"
#include "vr_tok_util.h"
#include "vr_tokenizer.h"

#define MAX_LINE (16u << 20)

int64_t vr_dataset_truncate(int32_t *ids, size_t n, size_t max, int truncation) {
  if (n <= max) return (int64_t)n;
  switch (truncation) {
    case VR_TRUNC_LEFT: memmove(ids, ids + (n - max), max * sizeof *ids); return (int64_t)max;
    case VR_TRUNC_RIGHT: return (int64_t)max;
    case VR_TRUNC_MIDDLE: {
      const size_t left = max / 2, right = max - left;
      memmove(ids + left, ids + (n - right), right * sizeof *ids);
      return (int64_t)max;
    }
    default: return -1;
  }
}

static int fail(char *err, size_t cap, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t cap, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, cap, fmt, ap);
  va_end(ap);
  return code;
}

static char *dup_str(const char *s) {
  size_t n = strlen(s);
  char *d = malloc(n + 1);
  if (d) memcpy(d, s, n + 1);
  return d;
}

void vr_prompt_row_free(vr_prompt_row_t *r) {
  free(r->ids), free(r->data_source), free(r->ground_truth), free(r->extra_info);
  memset(r, 0, sizeof *r);
}

/* One parsed line into r. why gets the problem (without file:line). */
static int parse_row(const cJSON *o, const vr_dataset_options_t *opt, vr_prompt_row_t *r, char *why, size_t wn) {
  memset(r, 0, sizeof *r);
  if (!cJSON_IsObject(o)) return fail(why, wn, VR_ERR_PARSE, "not a JSON object");
  const char *read_keys[] = {"input_ids", opt->prompt_key ? opt->prompt_key : "prompt", "data_source", "reward_model",
                             "extra_info"};
  for (size_t i = 0; i < sizeof read_keys / sizeof *read_keys; i++)
    if (vr_jsonl_dup(o, read_keys[i]))
      return fail(why, wn, VR_ERR_PARSE, "\"%s\" appears more than once", read_keys[i]);
  const cJSON *ids = cJSON_GetObjectItemCaseSensitive(o, "input_ids");
  const cJSON *pr = cJSON_GetObjectItemCaseSensitive(o, opt->prompt_key ? opt->prompt_key : "prompt");
  size_t n = 0;
  if (ids) {
    if (!cJSON_IsArray(ids)) return fail(why, wn, VR_ERR_PARSE, "\"input_ids\" is not a list");
    n = (size_t)cJSON_GetArraySize(ids);
    r->ids = malloc((n ? n : 1) * sizeof *r->ids);
    if (!r->ids) return VR_ERR_NOMEM;
    size_t i = 0;
    for (const cJSON *x = ids->child; x; x = x->next, i++) {
      const double v = x->valuedouble;
      if (!cJSON_IsNumber(x) || v != floor(v) || v < 0 || v > 2147483647.0)
        return fail(why, wn, VR_ERR_PARSE, "input_ids[%zu] is not a token id", i);
      r->ids[i] = (int32_t)v;
    }
  } else if (pr) {
    if (!opt->tok)
      return fail(why, wn, VR_ERR_UNSUPPORTED, "\"%s\" needs the policy's tokenizer (tokenizer.json in the model "
                  "directory). HINT: add it, or give pre-tokenised \"input_ids\"", opt->prompt_key);
    char *msgs = cJSON_PrintUnformatted(pr), *text = NULL, e[512];
    if (!msgs) return VR_ERR_NOMEM;
    int rc = cJSON_IsArray(pr) ? vr_tok_apply_chat_template(opt->tok, msgs, 1, &text, e, sizeof e) : VR_ERR_INVAL;
    free(msgs);
    if (rc != 0)
      return fail(why, wn, rc, "\"%s\": %s", opt->prompt_key, cJSON_IsArray(pr) ? e : "not a list of chat messages");
    rc = vr_tok_encode(opt->tok, text, strlen(text), 0, &r->ids, &n, e, sizeof e);
    free(text);
    if (rc != 0) return fail(why, wn, rc, "encoding the rendered prompt: %s", e);
  } else {
    return fail(why, wn, VR_ERR_PARSE, "neither \"%s\" (chat messages) nor \"input_ids\"", opt->prompt_key);
  }
  if (n == 0) return fail(why, wn, VR_ERR_EMPTY_SEQ, "the prompt has no tokens");
  for (size_t i = 0; i < n; i++)
    if (opt->vocab_size > 0 && r->ids[i] >= opt->vocab_size)
      return fail(why, wn, VR_ERR_TOKEN_RANGE, "token %zu is %d, outside the vocabulary (%d)", i, r->ids[i],
                  opt->vocab_size);
  int64_t k = vr_dataset_truncate(r->ids, n, opt->max_prompt_length, opt->truncation);
  if (k < 0)
    return fail(why, wn, VR_ERR_SEQ_TOO_LONG, "the prompt has %zu tokens, more than data.max_prompt_length %u. "
                "HINT: data.truncation left|right|middle, or a larger max_prompt_length", n, opt->max_prompt_length);
  r->n_ids = (uint32_t)k;
  const cJSON *ds = cJSON_GetObjectItemCaseSensitive(o, "data_source");
  if (ds && !cJSON_IsNull(ds) && !cJSON_IsString(ds)) return fail(why, wn, VR_ERR_PARSE, "data_source is not a string");
  r->data_source = dup_str(cJSON_IsString(ds) ? ds->valuestring : "");
  const cJSON *rm = cJSON_GetObjectItemCaseSensitive(o, "reward_model");
  const cJSON *gt = cJSON_IsObject(rm) ? cJSON_GetObjectItemCaseSensitive(rm, "ground_truth") : NULL;
  if (rm && !cJSON_IsNull(rm) && !cJSON_IsObject(rm)) return fail(why, wn, VR_ERR_PARSE, "reward_model is not an object");
  if (cJSON_IsString(gt)) r->ground_truth = dup_str(gt->valuestring);
  else if (cJSON_IsNumber(gt)) r->ground_truth = cJSON_PrintUnformatted(gt);
  else if (gt && !cJSON_IsNull(gt))
    return fail(why, wn, VR_ERR_PARSE, "reward_model.ground_truth is not a string or a number");
  const cJSON *ei = cJSON_GetObjectItemCaseSensitive(o, "extra_info");
  if (ei && !cJSON_IsNull(ei)) r->extra_info = cJSON_PrintUnformatted(ei);
  if (!r->data_source) return VR_ERR_NOMEM;
  return n > r->n_ids ? 1 : 0;
}

int vr_dataset_parse_line(const char *line, size_t len, const vr_dataset_options_t *opt, vr_prompt_row_t *row,
                          char *why, size_t wn) {
  memset(row, 0, sizeof *row);
  const size_t bad_utf8 = vr_tok_utf8_check(line, len);
  if (bad_utf8 < len) return fail(why, wn, VR_ERR_PARSE, "byte %zu is not valid UTF-8", bad_utf8 + 1);
  const char *bad = NULL;
  size_t at = 0;
  cJSON *o = vr_jsonl_parse(line, len, &bad, &at);
  if (!o && bad[0] != 'm') return fail(why, wn, VR_ERR_PARSE, "%s at byte %zu (one JSON object per line)", bad, at + 1);
  if (!o) return fail(why, wn, VR_ERR_PARSE, "not valid JSON");
  int rc = parse_row(o, opt, row, why, wn);
  cJSON_Delete(o);
  if (rc < 0) vr_prompt_row_free(row);
  return rc;
}

int vr_dataset_load(const char *path, const vr_dataset_options_t *opt, vr_dataset_t *ds, char *err, size_t cap) {
  memset(ds, 0, sizeof *ds);
  FILE *f = fopen(path, "rb");
  struct stat sb;
  if (f && fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) fclose(f), f = NULL, errno = EISDIR;
  if (!f) return fail(err, cap, VR_ERR_IO, "%s: cannot open the dataset (data.train_files): %s", path, strerror(errno));
  char *line = NULL;
  size_t lcap = 0, len = 0;
  uint32_t lineno = 0, cap_rows = 0;
  int rc = 0, r;
  while ((r = vr_line_read(f, MAX_LINE, &line, &lcap, &len)) != VR_LINE_EOF) {
    lineno++;
    if (r == VR_LINE_NOMEM) {
      rc = fail(err, cap, VR_ERR_NOMEM, "%s:%u: out of memory", path, lineno);
      break;
    }
    if (r == VR_LINE_TOO_LONG) { /* only its first MAX_LINE bytes were kept */
      rc = fail(err, cap, VR_ERR_TOO_LARGE, "%s:%u: the line (%zu bytes) is longer than %u bytes", path, lineno, len,
                MAX_LINE);
      break;
    }
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\n' || line[i] == '\r')) i++;
    if (i == len) continue;
    if (ds->n_rows == cap_rows) {
      cap_rows = cap_rows ? cap_rows * 2 : 256;
      vr_prompt_row_t *nr = realloc(ds->rows, cap_rows * sizeof *nr);
      if (!nr) {
        rc = VR_ERR_NOMEM;
        break;
      }
      ds->rows = nr;
    }
    char why[768];
    int pr = vr_dataset_parse_line(line, len, opt, &ds->rows[ds->n_rows], why, sizeof why);
    if (pr < 0) {
      rc = fail(err, cap, pr, "%s:%u: %s", path, lineno, why);
      break;
    }
    ds->n_truncated += pr == 1;
    ds->n_rows++;
  }
  const int read_errno = errno;
  if (rc == 0 && ferror(f))
    rc = fail(err, cap, VR_ERR_IO, "%s: read error after line %u: %s", path, lineno, strerror(read_errno));
  free(line);
  fclose(f);
  if (rc == 0 && ds->n_rows == 0) rc = fail(err, cap, VR_ERR_EMPTY_SEQ, "%s: no prompts in the dataset", path);
  if (rc != 0) vr_dataset_free(ds);
  return rc;
}

void vr_dataset_free(vr_dataset_t *ds) {
  for (uint32_t i = 0; i < ds->n_rows; i++) vr_prompt_row_free(&ds->rows[i]);
  free(ds->rows);
  memset(ds, 0, sizeof *ds);
}

/* ---- sampler ------------------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int vr_sampler_init(vr_sampler_t *s, uint32_t n_rows, uint32_t batch, uint64_t seed, int shuffle) {
  memset(s, 0, sizeof *s);
  if (batch == 0 || batch > n_rows) return VR_ERR_INVAL;
  s->n_rows = n_rows, s->batch = batch, s->seed = seed, s->shuffle = shuffle;
  return 0;
}

uint32_t vr_sampler_batches_per_epoch(const vr_sampler_t *s) { return s->n_rows / s->batch; }

int vr_sampler_next(vr_sampler_t *s, uint32_t *rows, uint64_t *epoch) {
  /* the epoch's permutation, recomputed per call: O(n) and stateless, so resuming needs only
   * (epoch, index) */
  uint32_t *perm = malloc(s->n_rows * sizeof *perm);
  if (!perm) return VR_ERR_NOMEM;
  for (uint32_t i = 0; i < s->n_rows; i++) perm[i] = i;
  if (s->shuffle) {
    uint64_t x = s->seed ^ (0xa0761d6478bd642full * (s->epoch + 1));
    for (uint32_t i = s->n_rows - 1; i > 0; i--) {
      uint32_t j = (uint32_t)(splitmix64(&x) % (i + 1));
      uint32_t t = perm[i];
      perm[i] = perm[j], perm[j] = t;
    }
  }
  memcpy(rows, perm + s->index * s->batch, s->batch * sizeof *rows);
  free(perm);
  if (epoch) *epoch = s->epoch;
  if (++s->index == vr_sampler_batches_per_epoch(s)) s->index = 0, s->epoch++;
  return 0;
}
