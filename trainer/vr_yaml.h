/* vr_yaml.h: the trainer's small YAML files (device map, topology) through libyaml's document
 * API (yaml_parser_load), with checks that report into a vr_diag_t at the node's line and
 * column (libyaml's marks are 0-based; messages are 1-based).
 *
 * The helpers walk only what a schema names, never the whole graph: an alias may make a node
 * its own child (`&a [*a]`), which is harmless as long as nothing recurses generically.
 *
 * Threading: plain data; one document per thread. */
#ifndef VR_YAML_H
#define VR_YAML_H

#include <stddef.h>
#include <yaml.h>

#include "vr_text.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VR_YAML_MAX_BYTES (1u << 20) /* a larger file is refused: these files are a few lines */
#define VR_YAML_MAX_DEPTH 32         /* deeper nesting of lists / mappings is refused (see vr_yaml.c) */

typedef struct vr_yaml {
  yaml_document_t doc;
  int loaded;
  vr_diag_t *diag;
} vr_yaml_t;

/* Reads path into a malloc'd, NUL-terminated buffer (free() it). Returns 0, or -1 after one
 * error in d (cannot open / read, larger than VR_YAML_MAX_BYTES). */
int vr_yaml_read_file(const char *path, char **text, size_t *len, vr_diag_t *d);
/* The same for a loader's first step: the text (free() it), or NULL after writing the one
 * problem into err as a finished diagnostic ("path: error: ... HINT: ..."). */
char *vr_yaml_read_path(const char *path, size_t *len, char *err, size_t cap);

/* Parses text[len] (need not be NUL-terminated) as exactly one YAML document whose root is a
 * mapping. Returns 0 (then vr_yaml_free() it), or -1 after one error in d: larger than
 * VR_YAML_MAX_BYTES, nesting deeper than VR_YAML_MAX_DEPTH, libyaml's own problem at its line
 * and column, an empty file, a second
 * document, a root that is not a mapping. y->diag is d afterwards (the helpers report there). */
int vr_yaml_load(vr_yaml_t *y, const char *text, size_t len, vr_diag_t *d);
void vr_yaml_free(vr_yaml_t *y);

yaml_node_t *vr_yaml_root(vr_yaml_t *y);
yaml_node_t *vr_yaml_node(vr_yaml_t *y, int id);
int vr_yaml_line(const yaml_node_t *n); /* 1-based */
int vr_yaml_col(const yaml_node_t *n);  /* 1-based */
/* Error / warning at a node's position. */
void vr_yaml_error(vr_yaml_t *y, const yaml_node_t *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* "a mapping", "a list", "a string", "a number", "empty" (a null scalar): for "must be X, not Y". */
const char *vr_yaml_kind(const yaml_node_t *n);
int vr_yaml_is_null(const yaml_node_t *n); /* plain "", "~", "null", "Null", "NULL" */
int vr_yaml_is_seq(const yaml_node_t *n);
int vr_yaml_is_map(const yaml_node_t *n);
/* The text of a scalar that is not null and holds no NUL byte; NULL otherwise. */
const char *vr_yaml_str(const yaml_node_t *n);
/* Parses s as a decimal integer in [lo, hi] (digits, optional leading '-'). 0, or -1. */
int vr_yaml_parse_int(const char *s, long lo, long hi, long *out);

/* The element node ids of a sequence: items[0 .. n). */
int vr_yaml_seq_len(const yaml_node_t *seq);
yaml_node_t *vr_yaml_seq_at(vr_yaml_t *y, const yaml_node_t *seq, int i);

/* One key a mapping may hold: vr_yaml_fields() sets key and value (NULL when absent). */
typedef struct vr_yaml_field {
  const char *name;
  yaml_node_t *key;
  yaml_node_t *value;
} vr_yaml_field_t;

/* Checks map's keys against f[0 .. n) and fills their key / value nodes. Errors: a key that is
 * not a string, a key named twice (the first one wins), a key not in f (with the closest known
 * key when one is near, and the list of keys). where names the mapping in messages ("the
 * device map", "actor"). Returns the number of errors it reported. */
int vr_yaml_fields(vr_yaml_t *y, const yaml_node_t *map, const char *where, vr_yaml_field_t *f, int n);

/* The index in names[0 .. n) of the scalar n's text, or -1 after an error naming what (the
 * key, e.g. "actor.placement_policy"), the allowed values and the closest one. */
int vr_yaml_enum(vr_yaml_t *y, const yaml_node_t *node, const char *what, const char *const *names, int n);

/* The element of names[0 .. n) closest to word by edit distance, or NULL when none is within
 * max(2, strlen(word) / 2) edits (so "acter" -> "actor", "xyz" -> nothing). */
const char *vr_yaml_closest(const char *word, const char *const *names, int n);
/* Levenshtein distance, case-sensitive (both strings cut at 64 bytes). */
int vr_yaml_edit_distance(const char *a, const char *b);

#ifdef __cplusplus
}
#endif
#endif /* VR_YAML_H */
