/* vr_yaml.c: libyaml document loading and schema helpers; see vr_yaml.h. */
#include "vr_yaml.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int vr_yaml_read_file(const char *path, char **text, size_t *len, vr_diag_t *d) {
  *text = NULL;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) {
    vr_diag_error(d, 0, 0, "cannot open: %s. HINT: check the path (it is read relative to the working directory)",
                  strerror(errno));
    return -1;
  }
  /* read one byte past the limit instead of trusting a size from stat (pipes, /proc files) */
  char *buf = malloc(VR_YAML_MAX_BYTES + 2);
  if (!buf) {
    fclose(f);
    vr_diag_error(d, 0, 0, "out of memory reading the file. HINT: none; the machine is out of memory");
    return -1;
  }
  size_t n = fread(buf, 1, VR_YAML_MAX_BYTES + 1, f);
  int bad = ferror(f);
  int saved = errno;
  fclose(f);
  if (bad) {
    free(buf);
    vr_diag_error(d, 0, 0, "cannot read: %s. HINT: is it a regular file?", strerror(saved));
    return -1;
  }
  if (n > VR_YAML_MAX_BYTES) {
    free(buf);
    vr_diag_error(d, 0, 0, "file is larger than %u bytes (1 MiB). HINT: this file holds a few lines of YAML; "
                  "is it the right file?", VR_YAML_MAX_BYTES);
    return -1;
  }
  buf[n] = '\0';
  *text = buf;
  *len = n;
  return 0;
}

char *vr_yaml_read_path(const char *path, size_t *len, char *err, size_t cap) {
  vr_diag_t d;
  vr_diag_init(&d, path, err, cap);
  char *text;
  if (vr_yaml_read_file(path, &text, len, &d)) text = NULL;
  vr_diag_finish(&d);
  return text;
}

/* 1-based line and column of byte offset off of text (libyaml's reader errors give an offset). */
static void offset_pos(const char *text, size_t len, size_t off, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < off && i < len; i++) {
    if (text[i] == '\n') {
      (*line)++;
      *col = 1;
    } else {
      (*col)++;
    }
  }
}

static void parser_error(const yaml_parser_t *p, const char *text, size_t len, vr_diag_t *d) {
  int line = (int)p->problem_mark.line + 1, col = (int)p->problem_mark.column + 1;
  const char *problem = p->problem ? p->problem : "unknown problem";
  if (p->error == YAML_MEMORY_ERROR) {
    vr_diag_error(d, 0, 0, "out of memory parsing the YAML. HINT: none; the machine is out of memory");
    return;
  }
  if (p->error == YAML_READER_ERROR) {
    offset_pos(text, len, p->problem_offset, &line, &col);
    vr_diag_error(d, line, col, "not a YAML text: %s (byte 0x%02x). HINT: the file must be UTF-8 text", problem,
                  (unsigned)(p->problem_value & 0xff));
    return;
  }
  if (p->context)
    vr_diag_error(d, line, col, "not valid YAML: %s (%s at line %d, column %d). HINT: check the indentation, "
                  "the ':' after each key and the brackets and quotes around this place",
                  problem, p->context, (int)p->context_mark.line + 1, (int)p->context_mark.column + 1);
  else
    vr_diag_error(d, line, col, "not valid YAML: %s. HINT: check the indentation, the ':' after each key and the "
                  "brackets and quotes around this place", problem);
}

/* libyaml's scanner revisits every open flow level for each token, so a text of nested
 * brackets costs time quadratic in its depth (minutes for 1 MiB of '['). A pass over the events
 * stops at the first level deeper than VR_YAML_MAX_DEPTH, before yaml_parser_load() builds
 * anything. A syntax error is left to yaml_parser_load(), which reports it. */
static int depth_ok(const char *text, size_t len, vr_diag_t *d) {
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p)) return 1;
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  int depth = 0, ok = 1;
  for (;;) {
    yaml_event_t e;
    if (!yaml_parser_parse(&p, &e)) break;
    yaml_event_type_t t = e.type;
    if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) {
      if (++depth > VR_YAML_MAX_DEPTH) {
        vr_diag_error(d, (int)e.start_mark.line + 1, (int)e.start_mark.column + 1,
                      "lists and mappings nested deeper than %d levels. HINT: these files nest 3 or 4 levels; "
                      "check the brackets", VR_YAML_MAX_DEPTH);
        ok = 0;
      }
    } else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) {
      depth--;
    }
    yaml_event_delete(&e);
    if (!ok || t == YAML_STREAM_END_EVENT) break;
  }
  yaml_parser_delete(&p);
  return ok;
}

int vr_yaml_load(vr_yaml_t *y, const char *text, size_t len, vr_diag_t *d) {
  memset(y, 0, sizeof *y);
  y->diag = d;
  if (len > VR_YAML_MAX_BYTES) {
    vr_diag_error(d, 0, 0, "text is larger than %u bytes (1 MiB). HINT: this file holds a few lines of YAML; "
                  "is it the right file?", VR_YAML_MAX_BYTES);
    return -1;
  }
  if (!depth_ok(text, len, d)) return -1;
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p)) {
    vr_diag_error(d, 0, 0, "cannot start the YAML parser (out of memory). HINT: none");
    return -1;
  }
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  if (!yaml_parser_load(&p, &y->doc)) {
    parser_error(&p, text, len, d);
    yaml_parser_delete(&p);
    return -1;
  }
  y->loaded = 1;
  yaml_node_t *root = yaml_document_get_root_node(&y->doc);
  int rc = 0;
  if (!root || vr_yaml_is_null(root)) {
    vr_diag_error(d, 0, 0, "the file is empty (no YAML document). HINT: write the mapping it describes, "
                  "e.g. `actor: {device_group: [0]}`");
    rc = -1;
  } else {
    yaml_document_t next;
    if (!yaml_parser_load(&p, &next)) {
      parser_error(&p, text, len, d);
      rc = -1;
    } else {
      yaml_node_t *r2 = yaml_document_get_root_node(&next);
      if (r2) {
        vr_diag_error(d, (int)r2->start_mark.line + 1, (int)r2->start_mark.column + 1,
                      "a second YAML document (after `---`). HINT: one file holds one document; remove the `---` "
                      "and what follows, or merge the two");
        rc = -1;
      }
      yaml_document_delete(&next);
    }
    if (rc == 0 && root->type != YAML_MAPPING_NODE) {
      vr_yaml_error(y, root, "the top level is %s, not a mapping. HINT: the file is a mapping of keys, "
                    "one `key: value` per line", vr_yaml_kind(root));
      rc = -1;
    }
  }
  yaml_parser_delete(&p);
  if (rc) vr_yaml_free(y);
  return rc;
}

void vr_yaml_free(vr_yaml_t *y) {
  if (y->loaded) yaml_document_delete(&y->doc);
  y->loaded = 0;
}

yaml_node_t *vr_yaml_root(vr_yaml_t *y) { return yaml_document_get_root_node(&y->doc); }
yaml_node_t *vr_yaml_node(vr_yaml_t *y, int id) { return yaml_document_get_node(&y->doc, id); }
int vr_yaml_line(const yaml_node_t *n) { return (int)n->start_mark.line + 1; }
int vr_yaml_col(const yaml_node_t *n) { return (int)n->start_mark.column + 1; }

void vr_yaml_error(vr_yaml_t *y, const yaml_node_t *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vr_diag_vadd(y->diag, "error", n ? vr_yaml_line(n) : 0, n ? vr_yaml_col(n) : 0, fmt, ap);
  va_end(ap);
}

int vr_yaml_is_null(const yaml_node_t *n) {
  if (!n || n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
  const char *s = (const char *)n->data.scalar.value;
  return n->data.scalar.length == 0 || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
         !strcmp(s, "NULL");
}
int vr_yaml_is_seq(const yaml_node_t *n) { return n && n->type == YAML_SEQUENCE_NODE; }
int vr_yaml_is_map(const yaml_node_t *n) { return n && n->type == YAML_MAPPING_NODE; }

const char *vr_yaml_str(const yaml_node_t *n) {
  if (!n || n->type != YAML_SCALAR_NODE || vr_yaml_is_null(n)) return NULL;
  if (memchr(n->data.scalar.value, '\0', n->data.scalar.length)) return NULL;
  return (const char *)n->data.scalar.value;
}

int vr_yaml_parse_int(const char *s, long lo, long hi, long *out) {
  if (!s) return -1;
  const char *p = s;
  int neg = 0;
  if (*p == '-') {
    neg = 1;
    p++;
  }
  if (!*p) return -1;
  long v = 0;
  for (; *p; p++) {
    if (*p < '0' || *p > '9') return -1;
    if (v > (LONG_MAX - 9) / 10) return -1;
    v = v * 10 + (*p - '0');
  }
  if (neg) v = -v;
  if (v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

const char *vr_yaml_kind(const yaml_node_t *n) {
  if (!n) return "absent";
  if (n->type == YAML_MAPPING_NODE) return "a mapping";
  if (n->type == YAML_SEQUENCE_NODE) return "a list";
  if (vr_yaml_is_null(n)) return "empty";
  long v;
  if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
      vr_yaml_parse_int(vr_yaml_str(n), LONG_MIN + 1, LONG_MAX, &v) == 0)
    return "a number";
  return "a string";
}

int vr_yaml_seq_len(const yaml_node_t *seq) {
  return (int)(seq->data.sequence.items.top - seq->data.sequence.items.start);
}

yaml_node_t *vr_yaml_seq_at(vr_yaml_t *y, const yaml_node_t *seq, int i) {
  return vr_yaml_node(y, seq->data.sequence.items.start[i]);
}

/* names[0 .. n) as "a, b, c" into buf. */
static void join_names(const char *const *names, int n, char *buf, size_t cap) {
  vr_text_t t;
  vr_text_init(&t, buf, cap);
  for (int i = 0; i < n; i++) vr_text_add(&t, "%s%s", i ? ", " : "", names[i]);
}

/* A scalar for a message (a fuzzed key can be 1 MiB long, or hold a newline). */
static const char *shown(const char *s, char *buf, size_t cap) {
  return s ? vr_text_clip(s, buf, cap) : "(not a string)";
}

int vr_yaml_fields(vr_yaml_t *y, const yaml_node_t *map, const char *where, vr_yaml_field_t *f, int n) {
  int errors = 0;
  const char *names[32];
  int nn = n < 32 ? n : 32;
  for (int i = 0; i < n; i++) {
    f[i].key = f[i].value = NULL;
    if (i < nn) names[i] = f[i].name;
  }
  char list[512], sb[80];
  join_names(names, nn, list, sizeof list);
  for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top; pr++) {
    yaml_node_t *k = vr_yaml_node(y, pr->key), *v = vr_yaml_node(y, pr->value);
    const char *ks = vr_yaml_str(k);
    if (!k || !v) continue;
    if (!ks) {
      vr_yaml_error(y, k, "a key of %s is %s, not a name. HINT: keys of %s are %s", where, vr_yaml_kind(k), where,
                    list);
      errors++;
      continue;
    }
    int idx = -1;
    for (int i = 0; i < n; i++)
      if (!strcmp(ks, f[i].name)) idx = i;
    if (idx < 0 && vr_diag_full(y->diag)) {
      errors++; /* only counted from here on: skip the edit distances */
    } else if (idx < 0) {
      const char *near = vr_yaml_closest(ks, names, nn);
      if (near)
        vr_yaml_error(y, k, "unknown key '%s' in %s. HINT: did you mean '%s'? (keys: %s)", shown(ks, sb, sizeof sb),
                      where, near, list);
      else
        vr_yaml_error(y, k, "unknown key '%s' in %s. HINT: the key%s %s %s", shown(ks, sb, sizeof sb), where,
                      nn == 1 ? "" : "s", nn == 1 ? "is" : "are", list);
      errors++;
    } else if (f[idx].key) {
      vr_yaml_error(y, k, "duplicate key '%s' in %s (first at line %d). HINT: keep one '%s' and remove the other",
                    ks, where, vr_yaml_line(f[idx].key), ks);
      errors++;
    } else {
      f[idx].key = k;
      f[idx].value = v;
    }
  }
  return errors;
}

int vr_yaml_enum(vr_yaml_t *y, const yaml_node_t *node, const char *what, const char *const *names, int n) {
  const char *s = vr_yaml_str(node);
  if (s && node->type == YAML_SCALAR_NODE)
    for (int i = 0; i < n; i++)
      if (!strcmp(s, names[i])) return i;
  char list[256], sb[80];
  join_names(names, n, list, sizeof list);
  const char *near = s ? vr_yaml_closest(s, names, n) : NULL;
  if (!s || node->type != YAML_SCALAR_NODE)
    vr_yaml_error(y, node, "%s is %s, not one of %s. HINT: write one of them, e.g. `%s: %s`", what,
                  vr_yaml_kind(node), list, strrchr(what, '.') ? strrchr(what, '.') + 1 : what, names[0]);
  else if (near)
    vr_yaml_error(y, node, "%s '%s' is not one of %s. HINT: did you mean '%s'? (values are lowercase, as listed)",
                  what, shown(s, sb, sizeof sb), list, near);
  else
    vr_yaml_error(y, node, "%s '%s' is not one of %s. HINT: write one of %s", what, shown(s, sb, sizeof sb), list,
                  list);
  return -1;
}

int vr_yaml_edit_distance(const char *a, const char *b) {
  size_t la = strnlen(a, 64), lb = strnlen(b, 64);
  int row[65];
  for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int up = row[j];
      int best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

const char *vr_yaml_closest(const char *word, const char *const *names, int n) {
  size_t len = strnlen(word, 64);
  int limit = len / 2 > 2 ? (int)(len / 2) : 2;
  const char *best = NULL;
  int best_d = limit + 1;
  for (int i = 0; i < n; i++) {
    int dd = vr_yaml_edit_distance(word, names[i]);
    if (dd < best_d) {
      best_d = dd;
      best = names[i];
    }
  }
  return best;
}
