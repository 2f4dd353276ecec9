/* vr_safetensors.c: safetensors header parser and file mapping (format in vr_safetensors.h). */
#include "vr_safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "verl_reward/status.h"
#include "vr_jsonl.h"
#include "vr_log.h"

static const struct {
  const char *name;
  size_t size;
} vr_st_dtypes[] = {
    {"F32", 4},  {"F16", 2},  {"BF16", 2}, {"F64", 8},     {"I64", 8},     {"U64", 8},
    {"I32", 4},  {"U32", 4},  {"I16", 2},  {"U16", 2},     {"I8", 1},      {"U8", 1},
    {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1}, {"C64", 8},
};

size_t vr_st_dtype_size(const char *name) {
  for (size_t i = 0; i < sizeof vr_st_dtypes / sizeof vr_st_dtypes[0]; i++)
    if (strcmp(name, vr_st_dtypes[i].name) == 0) return vr_st_dtypes[i].size;
  return 0;
}

/* A JSON number that is a non-negative integer below 2^53 (exact in a double). */
static int vr_st_get_u64(const cJSON *j, uint64_t *out) {
  if (!cJSON_IsNumber(j)) return -1;
  double d = j->valuedouble;
  if (!(d >= 0.0) || d > 9007199254740992.0 || floor(d) != d) return -1;
  *out = (uint64_t)d;
  return 0;
}

static int vr_st_cmp_name(const void *a, const void *b) {
  return strcmp(((const vr_st_entry_t *)a)->name, ((const vr_st_entry_t *)b)->name);
}

static int vr_st_cmp_begin(const void *a, const void *b) {
  const vr_st_entry_t *x = *(const vr_st_entry_t *const *)a, *y = *(const vr_st_entry_t *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

void vr_st_entries_free(vr_st_entry_t *e, size_t n) {
  if (!e) return;
  for (size_t i = 0; i < n; i++) free(e[i].name);
  free(e);
}

/* Fills one entry from its header object; logs and returns VR_ERR_MODEL_FORMAT on error. */
static int vr_st_parse_entry(const cJSON *item, uint64_t data_size, const char *what,
                             vr_st_entry_t *e) {
  const char *nm = item->string;
  if (!cJSON_IsObject(item)) {
    vr_log(VR_LOG_ERROR, "%s: tensor '%s': header entry is not an object", what, nm);
    return VR_ERR_MODEL_FORMAT;
  }
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
  const cJSON *of = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
  if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of)) {
    vr_log(VR_LOG_ERROR, "%s: tensor '%s': needs string \"dtype\", array \"shape\" and array \"data_offsets\"",
           what, nm);
    return VR_ERR_MODEL_FORMAT;
  }
  size_t esize = vr_st_dtype_size(dt->valuestring);
  if (esize == 0) {
    vr_log(VR_LOG_ERROR, "%s: tensor '%s': unknown dtype \"%.16s\"", what, nm, dt->valuestring);
    return VR_ERR_MODEL_FORMAT;
  }
  snprintf(e->dtype_name, sizeof e->dtype_name, "%s", dt->valuestring);
  if (strcmp(dt->valuestring, "F32") == 0) {
    e->t.dtype = VR_DTYPE_F32, e->supported = 1;
  } else if (strcmp(dt->valuestring, "F16") == 0) {
    e->t.dtype = VR_DTYPE_F16, e->supported = 1;
  } else if (strcmp(dt->valuestring, "BF16") == 0) {
    e->t.dtype = VR_DTYPE_BF16, e->supported = 1;
  }
  int nd = cJSON_GetArraySize(sh);
  if (nd > 4) {
    vr_log(VR_LOG_ERROR, "%s: tensor '%s': %d dimensions (at most 4 supported)", what, nm, nd);
    return VR_ERR_MODEL_FORMAT;
  }
  e->t.ndim = nd;
  /* element count with overflow checks: every product stays below 2^62 */
  uint64_t count = 1;
  for (int d = 0; d < nd; d++) {
    uint64_t v;
    if (vr_st_get_u64(cJSON_GetArrayItem(sh, d), &v) != 0 || v > ((uint64_t)1 << 40)) {
      vr_log(VR_LOG_ERROR, "%s: tensor '%s': shape[%d] is not a valid dimension", what, nm, d);
      return VR_ERR_MODEL_FORMAT;
    }
    e->t.shape[d] = (int64_t)v;
    if (v != 0 && count > (((uint64_t)1 << 62) / v)) {
      vr_log(VR_LOG_ERROR, "%s: tensor '%s': shape too large", what, nm);
      return VR_ERR_MODEL_FORMAT;
    }
    count *= v;
  }
  if (count > (((uint64_t)1 << 62) / esize)) {
    vr_log(VR_LOG_ERROR, "%s: tensor '%s': shape too large", what, nm);
    return VR_ERR_MODEL_FORMAT;
  }
  uint64_t nbytes = count * esize;
  if (cJSON_GetArraySize(of) != 2 || vr_st_get_u64(cJSON_GetArrayItem(of, 0), &e->begin) != 0 ||
      vr_st_get_u64(cJSON_GetArrayItem(of, 1), &e->end) != 0) {
    vr_log(VR_LOG_ERROR, "%s: tensor '%s': data_offsets must be two non-negative integers", what, nm);
    return VR_ERR_MODEL_FORMAT;
  }
  if (e->begin > e->end || e->end > data_size) {
    vr_log(VR_LOG_ERROR,
           "%s: tensor '%s': data_offsets [%llu, %llu] outside the data section (%llu bytes; truncated file?)",
           what, nm, (unsigned long long)e->begin, (unsigned long long)e->end,
           (unsigned long long)data_size);
    return VR_ERR_MODEL_FORMAT;
  }
  if (e->end - e->begin != nbytes) {
    vr_log(VR_LOG_ERROR, "%s: tensor '%s': %llu bytes at data_offsets but dtype %s x shape needs %llu",
           what, nm, (unsigned long long)(e->end - e->begin), e->dtype_name,
           (unsigned long long)nbytes);
    return VR_ERR_MODEL_FORMAT;
  }
  e->t.nbytes = (size_t)nbytes;
  return 0;
}

int vr_st_parse_header(const char *json, size_t json_len, uint64_t data_size, const char *what,
                       vr_st_entry_t **out, size_t *n_out) {
  *out = NULL;
  *n_out = 0;
  char jerr[1400];
  cJSON *root = vr_json_parse_file(json, json_len, what, VR_JSON_DUP_REFUSE, jerr, sizeof jerr);
  if (!root) {
    vr_log(VR_LOG_ERROR, "%s (the header)", jerr);
    return VR_ERR_MODEL_FORMAT;
  }
  if (!cJSON_IsObject(root)) {
    vr_log(VR_LOG_ERROR, "%s: header is not a JSON object (malformed JSON)", what);
    cJSON_Delete(root);
    return VR_ERR_MODEL_FORMAT;
  }
  size_t n = 0;
  for (const cJSON *it = root->child; it; it = it->next)
    if (!it->string || strcmp(it->string, "__metadata__") != 0) n++;
  vr_st_entry_t *e = calloc(n ? n : 1, sizeof *e);
  vr_st_entry_t **by_off = calloc(n ? n : 1, sizeof *by_off);
  int rc = 0;
  if (!e || !by_off) {
    rc = VR_ERR_NOMEM;
    goto done;
  }
  size_t k = 0;
  for (const cJSON *it = root->child; it && rc == 0; it = it->next) {
    if (!it->string) {
      rc = VR_ERR_MODEL_FORMAT;
      break;
    }
    if (strcmp(it->string, "__metadata__") == 0) continue;
    e[k].name = strdup(it->string);
    if (!e[k].name) {
      rc = VR_ERR_NOMEM;
      break;
    }
    e[k].t.name = e[k].name;
    rc = vr_st_parse_entry(it, data_size, what, &e[k]);
    k++;
  }
  if (rc != 0) goto done;
  qsort(e, n, sizeof *e, vr_st_cmp_name);
  for (size_t i = 0; i < n; i++) {
    e[i].t.name = e[i].name;
    if (i > 0 && strcmp(e[i - 1].name, e[i].name) == 0) {
      vr_log(VR_LOG_ERROR, "%s: tensor '%s' appears twice in the header", what, e[i].name);
      rc = VR_ERR_MODEL_FORMAT;
      goto done;
    }
    by_off[i] = &e[i];
  }
  /* no two non-empty tensors may share bytes */
  qsort(by_off, n, sizeof *by_off, vr_st_cmp_begin);
  const vr_st_entry_t *prev = NULL;
  for (size_t i = 0; i < n; i++) {
    if (by_off[i]->begin == by_off[i]->end) continue;
    if (prev && by_off[i]->begin < prev->end) {
      vr_log(VR_LOG_ERROR, "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap", what,
             prev->name, (unsigned long long)prev->begin, (unsigned long long)prev->end,
             by_off[i]->name, (unsigned long long)by_off[i]->begin,
             (unsigned long long)by_off[i]->end);
      rc = VR_ERR_MODEL_FORMAT;
      goto done;
    }
    prev = by_off[i];
  }
done:
  if (rc == VR_ERR_NOMEM) vr_log(VR_LOG_ERROR, "%s: out of memory parsing the header", what);
  free(by_off);
  cJSON_Delete(root);
  if (rc != 0) {
    vr_st_entries_free(e, n);
    return rc;
  }
  *out = e;
  *n_out = n;
  return 0;
}

int vr_st_open(const char *path, vr_st_file_t *out) {
  vr_st_file_t f = {0};
  int rc = 0;
  f.path = strdup(path);
  if (!f.path) return VR_ERR_NOMEM;
  const char *slash = strrchr(f.path, '/');
  f.base = slash ? (char *)slash + 1 : f.path;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    vr_log(VR_LOG_ERROR, "%s: cannot open: %s", path, strerror(errno));
    free(f.path);
    return errno == ENOENT ? VR_ERR_NOT_FOUND : VR_ERR_IO;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    vr_log(VR_LOG_ERROR, "%s: not a regular file", path);
    rc = VR_ERR_MODEL_FORMAT;
    goto fail;
  }
  f.size = (size_t)st.st_size;
  if (f.size < 8) {
    vr_log(VR_LOG_ERROR, "%s: %zu bytes, too short for a safetensors file (truncated?)", path, f.size);
    rc = VR_ERR_MODEL_FORMAT;
    goto fail;
  }
  f.map = mmap(NULL, f.size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (f.map == MAP_FAILED) {
    f.map = NULL;
    vr_log(VR_LOG_ERROR, "%s: mmap of %zu bytes failed: %s", path, f.size, strerror(errno));
    rc = VR_ERR_IO;
    goto fail;
  }
  close(fd);
  fd = -1;
  const uint8_t *p = f.map;
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
  if (hlen > f.size - 8 || hlen > VR_ST_MAX_HEADER) {
    vr_log(VR_LOG_ERROR, "%s: header length %llu beyond the file (%zu bytes) or above %u: truncated or not safetensors",
           path, (unsigned long long)hlen, f.size, VR_ST_MAX_HEADER);
    rc = VR_ERR_MODEL_FORMAT;
    goto fail;
  }
  f.data = p + 8 + hlen;
  rc = vr_st_parse_header((const char *)p + 8, (size_t)hlen, f.size - 8 - hlen, path, &f.entries,
                          &f.n_entries);
  if (rc != 0) goto fail;
  for (size_t i = 0; i < f.n_entries; i++) {
    f.entries[i].t.data = f.data + f.entries[i].begin;
    f.entries[i].file = f.base;
  }
  *out = f;
  return 0;
fail:
  if (fd >= 0) close(fd);
  if (f.map) munmap(f.map, f.size);
  free(f.path);
  return rc;
}

void vr_st_close(vr_st_file_t *f) {
  if (!f) return;
  vr_st_entries_free(f->entries, f->n_entries);
  if (f->map) munmap(f->map, f->size);
  free(f->path);
  memset(f, 0, sizeof *f);
}
