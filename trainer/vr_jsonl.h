/* vr_jsonl.h: one JSON lines record, parsed strictly (the trainer's token-id lines, vr_tids.h,
 * and the RL prompt rows, vr_dataset.h).
 *
 * cJSON_ParseWithLength stops after the first value and ignores the rest of the buffer, so
 * '{"input_ids": [1]} junk', '{...}\0...' and two objects on one line would pass with everything
 * after the first value silently dropped. vr_jsonl_parse takes the line only when it is exactly
 * one JSON value with nothing but blanks (space, tab, CR, LF) after it. cJSON keeps every member
 * of an object and finds the first; Python's json (how verl reads a row) keeps the last, so a key
 * the caller reads must appear once (vr_jsonl_dup).
 *
 * Header-only (static inline): the two readers live in different libraries. Threading: none. */
#ifndef VR_JSONL_H
#define VR_JSONL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <string.h>

/* The value of line[0, len), or NULL with *why set ("malformed JSON" or "text after the JSON
 * value"; *at its byte offset). The caller owns the value (cJSON_Delete). */
static inline cJSON *vr_jsonl_parse(const char *line, size_t len, const char **why, size_t *at) {
  const char *end = NULL;
  cJSON *v = cJSON_ParseWithLengthOpts(line, len, &end, 0);
  *at = 0;
  if (!v) {
    *why = "malformed JSON";
    return NULL;
  }
  size_t i = end && end >= line && end <= line + len ? (size_t)(end - line) : len;
  while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n')) i++;
  if (i < len) {
    cJSON_Delete(v);
    *why = "text after the JSON value";
    *at = i;
    return NULL;
  }
  return v;
}

/* 1 when the object o has the member name more than once. */
static inline int vr_jsonl_dup(const cJSON *o, const char *name) {
  int k = 0;
  for (const cJSON *c = o ? o->child : NULL; c; c = c->next) k += c->string && !strcmp(c->string, name);
  return k > 1;
}

#endif /* VR_JSONL_H */
