/* vr_tids.c: token-id JSON lines (vr_tids.h). */
#include "vr_tids.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "verl_reward/status.h"
#include "vr_jsonl.h"
#include "vr_line.h"
#include "vr_log.h"

static int vr_tids_grow(vr_tids_t *t, size_t add) {
  /* cu holds 32-bit offsets (the engines' cu_seqlens): past 2^32 - 1 tokens or sequences in all
   * the offsets would wrap */
  if (add > UINT32_MAX - t->T || t->n >= UINT32_MAX - 1) return VR_ERR_TOO_LARGE;
  if (t->n + 1 >= t->cap_n) {
    uint32_t cap = !t->cap_n ? 64 : t->cap_n > UINT32_MAX / 2 - 1 ? UINT32_MAX - 1 : 2 * t->cap_n;
    uint32_t *cu = realloc(t->cu, (size_t)(cap + 1) * sizeof *cu);
    if (!cu) return VR_ERR_NOMEM;
    t->cu = cu;
    uint32_t *ln = realloc(t->line, (size_t)cap * sizeof *ln);
    if (!ln) return VR_ERR_NOMEM;
    t->line = ln;
    t->cap_n = cap;
    if (t->n == 0) t->cu[0] = 0;
  }
  if (t->T + add > t->cap_T) {
    size_t cap = t->cap_T ? 2 * t->cap_T : 4096;
    while (cap < t->T + add) cap *= 2;
    int32_t *ids = realloc(t->ids, cap * sizeof *ids);
    if (!ids) return VR_ERR_NOMEM;
    t->ids = ids;
    t->cap_T = cap;
  }
  return 0;
}

int vr_tids_parse_line(const char *line, size_t len, int vocab, int max_len, uint32_t lineno, vr_tids_t *out,
                       char *why, size_t whylen) {
  char dummy[8];
  if (!why) why = dummy, whylen = sizeof dummy;
  const char *bad = NULL;
  size_t at = 0;
  cJSON *root = vr_jsonl_parse(line, len, &bad, &at);
  const cJSON *arr = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "input_ids") : NULL;
  int rc = 0;
  if (!root && bad[0] != 'm') { /* text after the value, a control byte, a number outside the grammar */
    snprintf(why, whylen, "%s at byte %zu (one {\"input_ids\": [...]} object per line)", bad, at + 1);
    rc = VR_ERR_PARSE;
  } else if (!root || !cJSON_IsObject(root)) {
    snprintf(why, whylen, "malformed JSON (expected {\"input_ids\": [...]})");
    rc = VR_ERR_PARSE;
  } else if (vr_jsonl_dup(root, "input_ids")) {
    snprintf(why, whylen, "\"input_ids\" appears more than once");
    rc = VR_ERR_PARSE;
  } else if (!cJSON_IsArray(arr)) {
    snprintf(why, whylen, "no \"input_ids\" list");
    rc = VR_ERR_PARSE;
  }
  size_t n = rc == 0 ? (size_t)cJSON_GetArraySize(arr) : 0;
  if (rc == 0 && n == 0) {
    snprintf(why, whylen, "input_ids is empty");
    rc = VR_ERR_EMPTY_SEQ;
  } else if (rc == 0 && n > (size_t)max_len) {
    snprintf(why, whylen, "%zu tokens, more than the model's max_position_embeddings %d", n, max_len);
    rc = VR_ERR_SEQ_TOO_LONG;
  }
  if (rc == 0) rc = vr_tids_grow(out, n);
  if (rc == VR_ERR_NOMEM) snprintf(why, whylen, "out of memory");
  if (rc == VR_ERR_TOO_LARGE)
    snprintf(why, whylen, "the input would pass 2^32 - 1 tokens (or sequences) in all, the most one run takes "
                          "(32-bit cu_seqlens offsets): split the file");
  size_t i = 0;
  for (const cJSON *v = rc == 0 ? arr->child : NULL; v; v = v->next, i++) {
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= -2147483648.0 && d <= 2147483647.0) || floor(d) != d) {
      snprintf(why, whylen, "input_ids[%zu] is not an integer token id", i);
      rc = VR_ERR_PARSE;
      break;
    }
    if (d < 0 || d >= vocab) {
      snprintf(why, whylen, "input_ids[%zu] = %.0f is outside the vocabulary [0, %d)", i, d, vocab);
      rc = VR_ERR_TOKEN_RANGE;
      break;
    }
    out->ids[out->T + i] = (int32_t)d;
  }
  cJSON_Delete(root);
  if (rc != 0) return rc;
  out->T += n;
  out->line[out->n] = lineno;
  out->cu[++out->n] = (uint32_t)out->T;
  return 0;
}

int vr_tids_read(FILE *f, const char *name, int vocab, int max_len, vr_tids_t *out) {
  char *buf = NULL;
  size_t cap = 0, got = 0;
  uint32_t lineno = 0;
  int rc = 0, r;
  while (rc == 0 && (r = vr_line_read(f, VR_TIDS_MAX_LINE, &buf, &cap, &got)) != VR_LINE_EOF) {
    lineno++;
    char why[160];
    if (r == VR_LINE_NOMEM) {
      vr_log(VR_LOG_ERROR, "%s:%u: out of memory", name, lineno);
      rc = VR_ERR_NOMEM;
      break;
    }
    if (r == VR_LINE_TOO_LONG) { /* only its first VR_TIDS_MAX_LINE bytes were kept */
      snprintf(why, sizeof why, "line of %zu bytes is longer than %u", got, VR_TIDS_MAX_LINE);
      vr_log(VR_LOG_ERROR, "%s:%u: %s", name, lineno, why);
      rc = VR_ERR_PARSE;
      break;
    }
    size_t len = got;
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' ' || buf[len - 1] == '\t'))
      len--;
    size_t s = 0;
    while (s < len && (buf[s] == ' ' || buf[s] == '\t')) s++;
    if (s == len) continue;
    rc = vr_tids_parse_line(buf, len, vocab, max_len, lineno, out, why, sizeof why);
    if (rc != 0) vr_log(VR_LOG_ERROR, "%s:%u: %s", name, lineno, why);
  }
  const int e = errno;
  free(buf);
  if (rc == 0 && ferror(f)) {
    vr_log(VR_LOG_ERROR, "%s: read error: %s", name, strerror(e));
    rc = VR_ERR_IO;
  }
  return rc;
}

FILE *vr_tids_open(const char *path, char *why, size_t whylen) {
  if (!path || strcmp(path, "-") == 0) return stdin;
  FILE *f = fopen(path, "r");
  struct stat sb;
  if (f && fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
    fclose(f);
    f = NULL;
    errno = EISDIR;
  }
  if (!f) snprintf(why, whylen, "cannot open %s: %s", path, strerror(errno));
  return f;
}

void vr_tids_free(vr_tids_t *t) {
  if (!t) return;
  free(t->ids);
  free(t->cu);
  free(t->line);
  memset(t, 0, sizeof *t);
}
