/* vr_safetensors.h: reading safetensors files (internal to model/).
 *
 * File format (https://github.com/huggingface/safetensors), byte by byte:
 *   [0, 8)           N: header length, unsigned 64-bit little endian
 *   [8, 8 + N)       header: UTF-8 JSON object, maybe padded with trailing spaces; as the
 *                    safetensors crate's serde_json::from_str, any JSON blank (space, tab,
 *                    CR, LF) may follow the object and nothing else (a NUL pad, a second
 *                    value: refused, naming the byte offset inside the header); a key given
 *                    twice anywhere in it is refused (vr_jsonl.h, VR_JSON_DUP_REFUSE)
 *                      "__metadata__": {string: string}          (optional, ignored)
 *                      "<tensor name>": {"dtype": "F32"|"F16"|"BF16"|...,
 *                                        "shape": [d0, d1, ...],
 *                                        "data_offsets": [begin, end]}
 *   [8 + N, size)    data section; a tensor's bytes are data[begin, end), row-major,
 *                    little endian; end - begin = prod(shape) * element size.
 * Everything in a file is untrusted: the header length must fit the file, offsets
 * must lie inside the data section and must not overlap, the byte count must match
 * the shape, names must be unique. Dtypes other than F32/F16/BF16 are accepted in
 * the table (e.g. an I64 position_ids buffer of old BERT checkpoints) and rejected
 * only if the architecture needs that tensor; an unknown dtype string is an error.
 *
 * Threading: a parsed file is immutable and may be read from any thread. */
#ifndef VR_SAFETENSORS_H
#define VR_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "vr_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest header we accept (the reference implementation's limit). */
#define VR_ST_MAX_HEADER (100u * 1024u * 1024u)

/* One header entry. t.dtype is meaningful only when supported != 0. */
typedef struct vr_st_entry {
  vr_tensor_t t;          /* t.name points into name; t.data is NULL until the file is mapped */
  char *name;             /* owned */
  char dtype_name[16];    /* as written in the header, e.g. "BF16", "I64" */
  int supported;          /* 1: F32, F16 or BF16 */
  uint64_t begin, end;    /* data_offsets, relative to the data section */
  const char *file;       /* file name for messages (points at the owning vr_st_file_t) */
} vr_st_entry_t;

/* Parses a header (json, json_len bytes, not NUL-terminated) against a data
 * section of data_size bytes. On success returns 0 and a malloc'd array of
 * *n_out entries sorted by name (free with vr_st_entries_free). On failure
 * returns VR_ERR_MODEL_FORMAT (or VR_ERR_NOMEM) and logs "<what>: <problem>"
 * naming the tensor. The parser for the fuzz harness. */
int vr_st_parse_header(const char *json, size_t json_len, uint64_t data_size, const char *what,
                       vr_st_entry_t **out, size_t *n_out);
void vr_st_entries_free(vr_st_entry_t *e, size_t n);

/* A mapped safetensors file. */
typedef struct vr_st_file {
  char *path;             /* owned */
  char *base;             /* file name within the model directory (points into path) */
  void *map;              /* mmap of the whole file (PROT_READ, MAP_PRIVATE) */
  size_t size;
  const uint8_t *data;    /* start of the data section */
  vr_st_entry_t *entries; /* sorted by name; entries[i].t.data point into the mapping */
  size_t n_entries;
} vr_st_file_t;

/* Maps and parses path. On error returns a negative vr_status_t and logs the
 * file and problem; *out is untouched. */
int vr_st_open(const char *path, vr_st_file_t *out);
void vr_st_close(vr_st_file_t *f);

/* Element size of a dtype name ("F32" -> 4), 0 if unknown. */
size_t vr_st_dtype_size(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* VR_SAFETENSORS_H */
