/* vr_jsonl.h: JSON from untrusted input parsed strictly, as its Python / Rust peers read it: JSON
 * lines records (the trainer's token-id lines and prompt rows, verl-tokenize, verl-reward-score,
 * the bench workload) and whole files (config.json, generation_config.json, tokenizer.json,
 * tokenizer_config.json, special_tokens_map.json, model.safetensors.index.json, the safetensors
 * header).
 *
 * cJSON_ParseWithLength stops after the first value and ignores the rest of the buffer, so
 * '{"input_ids": [1]} junk', '{...}\0...' and two objects on one line would pass with everything
 * after the first value silently dropped. vr_jsonl_parse takes the text only when it is exactly
 * one JSON value with nothing but blanks (space, tab, CR, LF: JSON's whitespace, what Python's
 * json.loads and serde_json::from_str skip) after it; anything else is Python's "Extra data" and
 * serde_json's "trailing characters". cJSON also takes every byte below 0x20 (NUL, \f, \v, ...)
 * as whitespace between tokens and raw control bytes inside strings; JSON, Python's json (strict)
 * and serde_json refuse both, so vr_jsonl_parse does too, and numbers JSON's grammar does not
 * allow that cJSON's strtod takes ("01", "-01", "1.", "1.e5") (vr_jsonl_lexical).
 *
 * Duplicate keys: cJSON keeps every member of an object and its lookups find the FIRST; Python's
 * json (transformers' config / tokenizer_config / generation_config / index loaders, verl's rows)
 * keeps the LAST. A JSON lines reader refuses a key it reads given twice (vr_jsonl_dup); a whole
 * file read by Python in HF is made to read as Python reads it (VR_JSON_DUP_LAST: the earlier
 * members of a repeated key are deleted, at every depth); a file read by serde into structs in HF
 * (tokenizer.json, the safetensors header: serde's derived structs fail with "duplicate field",
 * its maps keep the last) is refused when any key repeats (VR_JSON_DUP_REFUSE), since no one rule
 * matches there.
 *
 * Header-only (static inline): readers in several libraries use it. Threading: none. */
#ifndef VR_JSONL_H
#define VR_JSONL_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 when t[0, n) is a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static inline int vr_jsonl_number_ok(const char *t, size_t n) {
  size_t i = t[0] == '-';
#define VR_JSONL_DIGITS(first_needed)                                                                        \
  do {                                                                                                       \
    if ((first_needed) && (i >= n || t[i] < '0' || t[i] > '9')) return 0;                                    \
    while (i < n && t[i] >= '0' && t[i] <= '9') i++;                                                         \
  } while (0)
  if (i < n && t[i] == '0') i++;
  else VR_JSONL_DIGITS(1);
  if (i < n && t[i] == '.') {
    i++;
    VR_JSONL_DIGITS(1);
  }
  if (i < n && (t[i] == 'e' || t[i] == 'E')) {
    i++;
    if (i < n && (t[i] == '+' || t[i] == '-')) i++;
    VR_JSONL_DIGITS(1);
  }
#undef VR_JSONL_DIGITS
  return i == n;
}

/* The offset of the first byte of text[0, len) (a text cJSON parsed) that JSON does not allow, or
 * len: a control byte (< 0x20; any inside a string, any but tab / LF / CR outside one; *why "a
 * control byte in the JSON") or the start of a number outside its grammar (*why "a number JSON
 * does not allow"). */
static inline size_t vr_jsonl_lexical(const char *text, size_t len, const char **why) {
  int in_str = 0;
  for (size_t i = 0; i < len; i++) {
    const unsigned char c = (unsigned char)text[i];
    if (in_str && c == '\\') {
      i++; /* the escaped byte is checked by the parser (and is not a quote) */
    } else if (c == '"') {
      in_str = !in_str;
    } else if (c < 0x20 && (in_str || (c != '\t' && c != '\n' && c != '\r'))) {
      *why = "a control byte in the JSON"; /* JSON allows tab, LF and CR between tokens, none in a string */
      return i;
    } else if (!in_str && (c == '-' || (c >= '0' && c <= '9'))) { /* cJSON's number bytes, then the grammar */
      size_t j = i;
      while (j < len && text[j] && strchr("0123456789+-eE.", text[j])) j++;
      if (!vr_jsonl_number_ok(text + i, j - i)) {
        *why = "a number JSON does not allow"; /* a leading zero, '.' / an exponent without digits */
        return i;
      }
      i = j - 1;
    }
  }
  return len;
}

/* The value of line[0, len), or NULL with *why set ("malformed JSON", "text after the JSON
 * value", or vr_jsonl_lexical's reasons, both starting with 'a'; *at its byte offset, 0-based: where the parse failed, the
 * control byte, or the first byte after the value that is not a blank; tell the cases apart by
 * *why, not by *at, which is 0 when the parse failed at the first byte). The caller owns the
 * value (cJSON_Delete). */
static inline cJSON *vr_jsonl_parse(const char *line, size_t len, const char **why, size_t *at) {
  const char *end = NULL;
  cJSON *v = cJSON_ParseWithLengthOpts(line, len, &end, 0);
  size_t i = end && end >= line && end <= line + len ? (size_t)(end - line) : len;
  const char *lex = NULL;
  const size_t bad = v ? vr_jsonl_lexical(line, i, &lex) : i;
  *at = 0;
  if (bad < i) {
    cJSON_Delete(v);
    *why = lex;
    *at = bad;
    return NULL;
  }
  if (!v) {
    *why = "malformed JSON";
    *at = end ? i : 0;
    return NULL;
  }
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

typedef enum vr_json_dup_rule { VR_JSON_DUP_LAST, VR_JSON_DUP_REFUSE } vr_json_dup_rule_t;

typedef struct vr_json_member {
  const char *key;
  size_t pos; /* place among the object's members */
  cJSON *item;
} vr_json_member_t;

static inline int vr_json_member_cmp(const void *a, const void *b) {
  const vr_json_member_t *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  return c ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

/* Applies rule to every object in v (depth first). 0; 1 under VR_JSON_DUP_REFUSE with the first
 * repeated key copied into dup (an inner object is checked before the one holding it); -1 when out of memory. */
static inline int vr_json_dups(cJSON *v, vr_json_dup_rule_t rule, char *dup, size_t cap) {
  if (!v) return 0;
  size_t n = 0;
  for (cJSON *c = v->child; c; c = c->next) {
    int rc = vr_json_dups(c, rule, dup, cap);
    if (rc) return rc;
    n++;
  }
  if (!cJSON_IsObject(v) || n < 2) return 0;
  vr_json_member_t *m = malloc(n * sizeof *m);
  if (!m) return -1;
  size_t k = 0;
  for (cJSON *c = v->child; c; c = c->next, k++) m[k] = (vr_json_member_t){c->string ? c->string : "", k, c};
  qsort(m, n, sizeof *m, vr_json_member_cmp);
  int rc = 0;
  for (size_t i = 0; i + 1 < n && !rc; i++) {
    if (strcmp(m[i].key, m[i + 1].key) != 0) continue;
    if (rule == VR_JSON_DUP_REFUSE) {
      snprintf(dup, cap, "%s", m[i].key);
      rc = 1;
    } else {
      cJSON_Delete(cJSON_DetachItemViaPointer(v, m[i].item)); /* m[i + 1] comes later: it stays */
    }
  }
  free(m);
  return rc;
}

/* A whole file's text[0, len) as its HF reader takes it: exactly one JSON value (blanks after it),
 * duplicate keys by rule. NULL with err = "<path>: <reason> at byte offset N" (0-based, as Python's
 * "(char N)") or
 * "<path>: key \"k\" appears more than once" (a path past 1000 bytes is cut); the caller owns the value (cJSON_Delete). */
static inline cJSON *vr_json_parse_file(const char *text, size_t len, const char *path, vr_json_dup_rule_t rule,
                                        char *err, size_t cap) {
  const char *why = NULL;
  size_t at = 0;
  cJSON *v = vr_jsonl_parse(text, len, &why, &at);
  if (!v) {
    snprintf(err, cap, "%.1000s: %s at byte offset %zu%s", path, why, at,
             why[0] == 't' ? " (one JSON value per file: Python's json calls this 'Extra data', serde_json 'trailing characters')" : "");
    return NULL;
  }
  char dup[128] = "";
  int rc = vr_json_dups(v, rule, dup, sizeof dup);
  if (rc) {
    if (rc < 0) snprintf(err, cap, "%.1000s: out of memory", path);
    else snprintf(err, cap, "%.1000s: key \"%s\" appears more than once in an object (refused: its readers disagree on which one counts)", path, dup);
    cJSON_Delete(v);
    return NULL;
  }
  return v;
}

#endif /* VR_JSONL_H */
