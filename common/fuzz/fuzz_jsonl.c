/* fuzz_jsonl.c: libFuzzer harness for vr_jsonl.h (strict JSON of every line and file reader).
 * Input: the first byte picks the duplicate rule (bit 0: VR_JSON_DUP_REFUSE), the rest is the
 * text. Checks, on every input: an accepted text holds no control byte JSON forbids and still
 * parses with a blank appended but not with "x" appended; after VR_JSON_DUP_LAST no
 * object holds a key twice (a REFUSE pass over the result finds nothing) and each object kept
 * exactly its distinct keys; a refused text names a byte offset inside it. Build: CC=clang
 * cmake -DVR_FUZZ=ON; run: build/bin/fuzz_jsonl -max_total_time=60 [corpus dir]. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vr_jsonl.h"

/* distinct keys of the object o (quadratic: fuzz inputs are small) */
static int distinct(const cJSON *o) {
  int n = 0;
  for (const cJSON *c = o->child; c; c = c->next) {
    int seen = 0;
    for (const cJSON *d = o->child; d != c && !seen; d = d->next) seen = !strcmp(d->string, c->string);
    n += !seen;
  }
  return n;
}

/* every object of v counted by distinct() before the LAST pass; checked after it */
static void check_unique(const cJSON *v) {
  for (const cJSON *c = v->child; c; c = c->next) check_unique(c);
  if (cJSON_IsObject(v) && distinct(v) != cJSON_GetArraySize(v)) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 4096) return 0;
  const vr_json_dup_rule_t rule = (data[0] & 1) ? VR_JSON_DUP_REFUSE : VR_JSON_DUP_LAST;
  const char *text = (const char *)data + 1;
  const size_t len = size - 1;
  const char *why = NULL;
  size_t at = 0;
  cJSON *v = vr_jsonl_parse(text, len, &why, &at);
  if (!v) {
    if (at > len || !why) __builtin_trap();
    return 0;
  }
  if (vr_jsonl_lexical(text, len, &why) != len) __builtin_trap();
  char *more = malloc(len + 2);
  if (!more) abort();
  memcpy(more, text, len);
  more[len] = ' ';
  cJSON *w = vr_jsonl_parse(more, len + 1, &why, &at);
  if (!w) __builtin_trap();
  cJSON_Delete(w);
  more[len] = 'x';
  w = vr_jsonl_parse(more, len + 1, &why, &at);
  if (w) __builtin_trap(); /* the value and its blanks were the whole text: "x" is text after it */
  cJSON_Delete(w);
  free(more);
  cJSON_Delete(v);
  char err[1400], dup[128];
  v = vr_json_parse_file(text, len, "fuzz", rule, err, sizeof err);
  if (v && rule == VR_JSON_DUP_LAST) {
    check_unique(v);
    if (vr_json_dups(v, VR_JSON_DUP_REFUSE, dup, sizeof dup) != 0) __builtin_trap();
  }
  cJSON_Delete(v);
  return 0;
}
