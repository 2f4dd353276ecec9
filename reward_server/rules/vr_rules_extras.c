/* vr_rules_extras.c: per-sequence extras (data_source, solution_str,
 * ground_truth, extra_info) from untrusted msgpack / JSON, and back to msgpack.
 *
 * msgpack input is handled in two passes: mp_skip() walks the raw bytes with
 * explicit bounds and depth checks (so msgpack-c never sees a container whose
 * declared count exceeds the bytes present: a 5-byte "array of 4e9 items"
 * would otherwise make it allocate gigabytes), and records each top-level
 * value's byte range (extra_info is kept verbatim); then msgpack-c decodes
 * only the keys and the scalar values of known keys (unknown keys and
 * extra_info are never expanded into msgpack objects, so memory stays O(len)
 * bytes of copies, not O(items) objects). */
#include "vr_rules.h"
#include "vr_rules_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"

int vr_rules_fail(char *err, size_t errlen, int code, const char *fmt, ...) {
  if (err && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

/* ---- UTF-8 ------------------------------------------------------------------ */

int vr_utf8_valid(const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t need;
    unsigned cp, min;
    if (c >= 0xc2 && c <= 0xdf) {
      need = 1, cp = c & 0x1f, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
      need = 2, cp = c & 0x0f, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
      need = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return 0; /* continuation byte, 0xc0/0xc1 (overlong) or > 0xf4 */
    }
    if (n - i - 1 < need) return 0;
    for (size_t k = 1; k <= need; k++) {
      unsigned cc = s[i + k];
      if ((cc & 0xc0) != 0x80) return 0;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    i += need + 1;
  }
  return 1;
}

/* ---- lifecycle / setters ------------------------------------------------------ */

void vr_extras_init(vr_extras_t *ex) { memset(ex, 0, sizeof(*ex)); }

static void text_free(vr_text_t *t) {
  free(t->ptr);
  memset(t, 0, sizeof(*t));
}

void vr_extras_free(vr_extras_t *ex) {
  if (!ex) return;
  text_free(&ex->data_source);
  text_free(&ex->solution_str);
  text_free(&ex->ground_truth);
  text_free(&ex->extra_info);
  ex->extra_info_format = VR_INFO_NONE;
}

static void text_clear(vr_text_t *t) {
  t->present = 0;
  t->len = 0;
  if (t->ptr) t->ptr[0] = '\0';
}

void vr_extras_clear(vr_extras_t *ex) {
  text_clear(&ex->data_source);
  text_clear(&ex->solution_str);
  text_clear(&ex->ground_truth);
  text_clear(&ex->extra_info);
  ex->extra_info_format = VR_INFO_NONE;
}

/* Copies len raw bytes (+ NUL) into t, growing its buffer. len <= max checked by callers. */
static int text_store(vr_text_t *t, const void *s, size_t len) {
  if (len >= UINT32_MAX) return VR_ERR_TOO_LARGE;
  if (!t->ptr || t->cap < len + 1) {
    size_t cap = len + 1 < 64 ? 64 : len + 1;
    char *p = realloc(t->ptr, cap);
    if (!p) return VR_ERR_NOMEM;
    t->ptr = p;
    t->cap = (uint32_t)cap;
  }
  if (len) memcpy(t->ptr, s, len);
  t->ptr[len] = '\0';
  t->len = (uint32_t)len;
  t->present = 1;
  return VR_OK;
}

int vr_extras_set_text(vr_text_t *field, const char *s, size_t len, uint32_t max_len) {
  if (!field) return VR_ERR_INVAL;
  if (!s) {
    text_clear(field);
    return VR_OK;
  }
  if (len > max_len) return VR_ERR_TOO_LARGE;
  if (memchr(s, '\0', len) || !vr_utf8_valid(s, len)) return VR_ERR_MALFORMED;
  return text_store(field, s, len);
}

int vr_extras_set(vr_extras_t *ex, const char *data_source, const char *solution_str,
                  const char *ground_truth) {
  if (!ex) return VR_ERR_INVAL;
  int rc;
  if ((rc = vr_extras_set_text(&ex->data_source, data_source,
                               data_source ? strlen(data_source) : 0, VR_EXTRAS_MAX_SOURCE)) ||
      (rc = vr_extras_set_text(&ex->solution_str, solution_str,
                               solution_str ? strlen(solution_str) : 0, VR_EXTRAS_MAX_TEXT)) ||
      (rc = vr_extras_set_text(&ex->ground_truth, ground_truth,
                               ground_truth ? strlen(ground_truth) : 0, VR_EXTRAS_MAX_TEXT)))
    return rc;
  text_clear(&ex->extra_info);
  ex->extra_info_format = VR_INFO_NONE;
  return VR_OK;
}

/* ---- shared field logic --------------------------------------------------------- */

enum { F_SOURCE, F_SOLUTION, F_TRUTH, F_INFO, F_COUNT_ };
static const char *const k_field_names[F_COUNT_] = {"data_source", "solution_str",
                                                    "ground_truth", "extra_info"};
static const uint32_t k_field_max[F_COUNT_] = {VR_EXTRAS_MAX_SOURCE, VR_EXTRAS_MAX_TEXT,
                                               VR_EXTRAS_MAX_TEXT, VR_EXTRAS_MAX_INFO};

static int field_index(const char *key, size_t len) {
  for (int i = 0; i < F_COUNT_; i++)
    if (strlen(k_field_names[i]) == len && memcmp(k_field_names[i], key, len) == 0) return i;
  return -1;
}

static vr_text_t *field_ptr(vr_extras_t *ex, int f) {
  switch (f) {
    case F_SOURCE: return &ex->data_source;
    case F_SOLUTION: return &ex->solution_str;
    case F_TRUTH: return &ex->ground_truth;
    default: return &ex->extra_info;
  }
}

/* Stores a text value for field f after the limit/UTF-8/NUL checks. */
static int field_set_text(vr_extras_t *ex, int f, const char *s, size_t len, char *err,
                          size_t errlen) {
  if (len > k_field_max[f])
    return vr_rules_fail(err, errlen, VR_ERR_TOO_LARGE, "%s is %zu bytes, limit %u",
                   k_field_names[f], len, k_field_max[f]);
  if (memchr(s, '\0', len))
    return vr_rules_fail(err, errlen, VR_ERR_MALFORMED, "%s contains a NUL byte",
                   k_field_names[f]);
  if (!vr_utf8_valid(s, len))
    return vr_rules_fail(err, errlen, VR_ERR_MALFORMED, "%s is not valid UTF-8",
                   k_field_names[f]);
  int rc = text_store(field_ptr(ex, f), s, len);
  if (rc) return vr_rules_fail(err, errlen, rc, "out of memory for %s", k_field_names[f]);
  return VR_OK;
}

/* ground_truth given as a number: the integer when integral, else the
 * shortest decimal text that reads back to the same double (float32 when
 * is_f32: 0.1f -> "0.1"), like Python's str(float) in the usual cases. */
static void number_text(double v, int is_f32, char *buf, size_t cap) {
  if (v == floor(v) && fabs(v) < 9007199254740992.0) {
    snprintf(buf, cap, "%lld", (long long)v);
    return;
  }
  for (int prec = is_f32 ? 6 : 15; prec <= 17; prec++) {
    snprintf(buf, cap, "%.*g", prec, v);
    if (is_f32 ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v) return;
  }
}

/* ---- msgpack: structural validation -------------------------------------------------- */

static uint64_t be_read(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = (v << 8) | p[i];
  return v;
}

/* Skips one msgpack object starting at *off in buf[0..len). On success *off is
 * past it and 0 is returned; -1 on truncation, reserved byte 0xc1, a container
 * count larger than the bytes left, or depth beyond max_depth (recursion is
 * bounded by max_depth <= VR_EXTRAS_MAX_DEPTH). */
static int mp_skip(const uint8_t *buf, size_t len, size_t *off, unsigned depth,
                   const char **why) {
  if (depth > VR_EXTRAS_MAX_DEPTH) {
    *why = "nesting deeper than the limit";
    return -1;
  }
  size_t o = *off;
  if (o >= len) {
    *why = "truncated";
    return -1;
  }
  uint8_t b = buf[o++];
  uint64_t body = 0, items = 0;
  int hdr = 0; /* bytes of length field that follow b */
  if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
    body = 0;
  } else if (b >= 0x80 && b <= 0x8f) {
    items = 2u * (b & 0x0f);
  } else if (b >= 0x90 && b <= 0x9f) {
    items = b & 0x0f;
  } else if (b >= 0xa0 && b <= 0xbf) {
    body = b & 0x1f;
  } else {
    switch (b) {
      case 0xc4: case 0xd9: hdr = 1; break;                 /* bin8, str8 */
      case 0xc5: case 0xda: hdr = 2; break;                 /* bin16, str16 */
      case 0xc6: case 0xdb: hdr = 4; break;                 /* bin32, str32 */
      case 0xc7: hdr = 1; body = 1; break;                  /* ext8: + type byte */
      case 0xc8: hdr = 2; body = 1; break;
      case 0xc9: hdr = 4; body = 1; break;
      case 0xca: body = 4; break;
      case 0xcb: body = 8; break;
      case 0xcc: case 0xd0: body = 1; break;
      case 0xcd: case 0xd1: body = 2; break;
      case 0xce: case 0xd2: body = 4; break;
      case 0xcf: case 0xd3: body = 8; break;
      case 0xd4: body = 2; break; /* fixext1: type + 1 */
      case 0xd5: body = 3; break;
      case 0xd6: body = 5; break;
      case 0xd7: body = 9; break;
      case 0xd8: body = 17; break;
      case 0xdc: hdr = 2; items = 0; break;
      case 0xdd: hdr = 4; items = 0; break;
      case 0xde: hdr = 2; items = 0; break;
      case 0xdf: hdr = 4; items = 0; break;
      default: *why = "reserved type byte 0xc1"; return -1;
    }
    if (hdr) {
      if (len - o < (size_t)hdr) {
        *why = "truncated length field";
        return -1;
      }
      uint64_t n = be_read(buf + o, hdr);
      o += (size_t)hdr;
      if (b >= 0xdc && b <= 0xdd) items = n;
      else if (b >= 0xde) items = 2 * n;
      else body += n;
    }
  }
  if (body > len - o) {
    *why = "value runs past the end";
    return -1;
  }
  o += (size_t)body;
  if (items > len - o) { /* every item needs at least one byte */
    *why = "container count larger than the bytes present";
    return -1;
  }
  for (uint64_t i = 0; i < items; i++)
    if (mp_skip(buf, len, &o, depth + 1, why)) return -1;
  *off = o;
  return 0;
}

int vr_extras_set_info(vr_extras_t *ex, vr_info_format_t fmt, const void *raw, size_t len) {
  if (!ex || (fmt != VR_INFO_NONE && fmt != VR_INFO_MSGPACK && fmt != VR_INFO_JSON))
    return VR_ERR_INVAL;
  if (fmt == VR_INFO_NONE || !raw) {
    text_clear(&ex->extra_info);
    ex->extra_info_format = VR_INFO_NONE;
    return VR_OK;
  }
  if (len > VR_EXTRAS_MAX_INFO) return VR_ERR_TOO_LARGE;
  if (fmt == VR_INFO_MSGPACK) {
    size_t off = 0;
    const char *why;
    if (mp_skip(raw, len, &off, 1, &why) || off != len) return VR_ERR_MALFORMED;
  } else if (memchr(raw, '\0', len) || !vr_utf8_valid(raw, len)) {
    return VR_ERR_MALFORMED;
  }
  int rc = text_store(&ex->extra_info, raw, len);
  if (rc) return rc;
  ex->extra_info_format = fmt;
  return VR_OK;
}

/* ---- msgpack: parse ------------------------------------------------------------------ */

static int mp_is_str(uint8_t b) { return (b >= 0xa0 && b <= 0xbf) || (b >= 0xd9 && b <= 0xdb); }
static int mp_is_container(uint8_t b) { return (b >= 0x80 && b <= 0x9f) || (b >= 0xdc && b <= 0xdf); }

static int info_store_raw(vr_extras_t *ex, const uint8_t *raw, size_t raw_len, char *err,
                          size_t errlen) {
  if (raw_len > VR_EXTRAS_MAX_INFO)
    return vr_rules_fail(err, errlen, VR_ERR_TOO_LARGE, "extra_info is %zu bytes, limit %u",
                         raw_len, VR_EXTRAS_MAX_INFO);
  if (text_store(&ex->extra_info, raw, raw_len))
    return vr_rules_fail(err, errlen, VR_ERR_NOMEM, "out of memory for extra_info");
  ex->extra_info_format = VR_INFO_MSGPACK;
  return VR_OK;
}

/* A scalar value (decoded by msgpack-c) for text field f. */
static int mp_set_field(vr_extras_t *ex, int f, const msgpack_object *v, char *err, size_t errlen) {
  char num[64];
  switch (v->type) {
    case MSGPACK_OBJECT_STR:
      return field_set_text(ex, f, v->via.str.ptr, v->via.str.size, err, errlen);
    case MSGPACK_OBJECT_BIN:
      return field_set_text(ex, f, v->via.bin.ptr, v->via.bin.size, err, errlen);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
      if (f != F_TRUTH) break;
      snprintf(num, sizeof(num), "%llu", (unsigned long long)v->via.u64);
      return field_set_text(ex, f, num, strlen(num), err, errlen);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
      if (f != F_TRUTH) break;
      snprintf(num, sizeof(num), "%lld", (long long)v->via.i64);
      return field_set_text(ex, f, num, strlen(num), err, errlen);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
      if (f != F_TRUTH) break;
      if (!isfinite(v->via.f64))
        return vr_rules_fail(err, errlen, VR_ERR_MALFORMED, "ground_truth is not finite");
      number_text(v->via.f64, v->type == MSGPACK_OBJECT_FLOAT32, num, sizeof(num));
      return field_set_text(ex, f, num, strlen(num), err, errlen);
    default:
      break;
  }
  return vr_rules_fail(err, errlen, VR_ERR_MALFORMED, "%s has msgpack type %d, want %s",
                 k_field_names[f], (int)v->type,
                 f == F_TRUTH ? "str, bin or number" : "str or bin");
}

int vr_extras_parse_msgpack(const uint8_t *buf, size_t len, vr_extras_t *out, char *err,
                            size_t errlen) {
  if (!out || (!buf && len)) return vr_rules_fail(err, errlen, VR_ERR_INVAL, "NULL argument");
  vr_extras_clear(out);
  if (len == 0) return vr_rules_fail(err, errlen, VR_ERR_MALFORMED, "empty msgpack blob");
  if (len > VR_EXTRAS_MAX_BLOB)
    return vr_rules_fail(err, errlen, VR_ERR_TOO_LARGE, "msgpack blob is %zu bytes, limit %u",
                   len, VR_EXTRAS_MAX_BLOB);
  const uint8_t b0 = buf[0];
  if (!((b0 >= 0x80 && b0 <= 0x8f) || b0 == 0xde || b0 == 0xdf))
    return vr_rules_fail(err, errlen, VR_ERR_MALFORMED,
                   "msgpack blob is not a map (first byte 0x%02x)", b0);
  /* Pass 1: the whole structure (bounds, counts, depth, no trailing bytes). */
  size_t off = 0;
  const char *why = "";
  if (mp_skip(buf, len, &off, 0, &why))
    return vr_rules_fail(err, errlen, VR_ERR_MALFORMED, "malformed msgpack: %s", why);
  if (off != len)
    return vr_rules_fail(err, errlen, VR_ERR_MALFORMED,
                   "%zu trailing bytes after the msgpack map", len - off);
  size_t pos = 1; /* past the map header */
  uint64_t npairs = b0 <= 0x8f ? (uint64_t)(b0 & 0x0f) : be_read(buf + 1, b0 == 0xde ? 2 : 4);
  if (b0 == 0xde) pos = 3;
  if (b0 == 0xdf) pos = 5;
  if (npairs > VR_EXTRAS_MAX_KEYS)
    return vr_rules_fail(err, errlen, VR_ERR_TOO_LARGE, "map has %llu keys, limit %u",
                   (unsigned long long)npairs, VR_EXTRAS_MAX_KEYS);
  /* Pass 2: per pair, msgpack-c decodes the key and, for a known key, its
   * value, but only scalars: extra_info stays raw and unknown keys are never
   * decoded, so msgpack-c allocates O(1) per pair whatever the blob holds. */
  unsigned seen = 0;
  int rc = VR_OK;
  for (uint64_t i = 0; i < npairs && rc == VR_OK; i++) {
    size_t ks = pos, vs, ve;
    if (mp_skip(buf, len, &pos, 1, &why)) /* validated above: cannot fail */
      return vr_rules_fail(err, errlen, VR_ERR_INTERNAL, "%s", why);
    vs = pos;
    if (mp_skip(buf, len, &pos, 1, &why))
      return vr_rules_fail(err, errlen, VR_ERR_INTERNAL, "%s", why);
    ve = pos;
    if (!mp_is_str(buf[ks])) {
      rc = vr_rules_fail(err, errlen, VR_ERR_MALFORMED, "map key #%llu is not a string",
                         (unsigned long long)i);
      break;
    }
    msgpack_unpacked key;
    msgpack_unpacked_init(&key);
    int f = -1;
    size_t koff = 0;
    msgpack_unpack_return ur = msgpack_unpack_next(&key, (const char *)buf + ks, vs - ks, &koff);
    if (ur == MSGPACK_UNPACK_SUCCESS && key.data.type == MSGPACK_OBJECT_STR)
      f = field_index(key.data.via.str.ptr, key.data.via.str.size);
    else
      rc = vr_rules_fail(err, errlen, VR_ERR_MALFORMED, "msgpack-c rejected key #%llu (%d)",
                         (unsigned long long)i, (int)ur);
    msgpack_unpacked_destroy(&key);
    if (rc || f < 0) continue; /* unknown key: ignored (forward compatibility) */
    if (seen & (1u << f)) {
      rc = vr_rules_fail(err, errlen, VR_ERR_MALFORMED, "duplicate key %s", k_field_names[f]);
      break;
    }
    seen |= 1u << f;
    if (buf[vs] == 0xc0) continue; /* nil: absent */
    if (f == F_INFO) {
      rc = info_store_raw(out, buf + vs, ve - vs, err, errlen);
      continue;
    }
    if (mp_is_container(buf[vs])) {
      rc = vr_rules_fail(err, errlen, VR_ERR_MALFORMED, "%s is a msgpack %s, want %s",
                         k_field_names[f], buf[vs] <= 0x8f || buf[vs] >= 0xde ? "map" : "array",
                         f == F_TRUTH ? "str, bin or number" : "str or bin");
      break;
    }
    msgpack_unpacked val;
    msgpack_unpacked_init(&val);
    size_t voff = 0;
    ur = msgpack_unpack_next(&val, (const char *)buf + vs, ve - vs, &voff);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
      rc = vr_rules_fail(err, errlen, VR_ERR_NOMEM, "out of memory decoding %s",
                         k_field_names[f]);
    else if (ur != MSGPACK_UNPACK_SUCCESS || voff != ve - vs)
      rc = vr_rules_fail(err, errlen, VR_ERR_MALFORMED, "msgpack-c rejected %s (%d)",
                         k_field_names[f], (int)ur);
    else
      rc = mp_set_field(out, f, &val.data, err, errlen);
    msgpack_unpacked_destroy(&val);
  }
  if (rc) vr_extras_clear(out);
  return rc;
}

/* ---- msgpack: pack ------------------------------------------------------------------ */

int vr_extras_pack_msgpack(const vr_extras_t *ex, uint8_t **out, size_t *out_len) {
  if (!ex || !out || !out_len) return VR_ERR_INVAL;
  *out = NULL;
  *out_len = 0;
  const vr_text_t *fields[F_COUNT_] = {&ex->data_source, &ex->solution_str, &ex->ground_truth,
                                       &ex->extra_info};
  size_t n = 0;
  for (int f = 0; f < F_COUNT_; f++) {
    if (f == F_INFO && ex->extra_info_format == VR_INFO_NONE) continue;
    if (fields[f]->present && fields[f]->ptr) n++;
  }
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  int bad = msgpack_pack_map(&pk, n);
  for (int f = 0; f < F_COUNT_ && !bad; f++) {
    const vr_text_t *t = fields[f];
    if (!t->present || !t->ptr || (f == F_INFO && ex->extra_info_format == VR_INFO_NONE)) continue;
    size_t kl = strlen(k_field_names[f]);
    bad |= msgpack_pack_str(&pk, kl) || msgpack_pack_str_body(&pk, k_field_names[f], kl);
    if (f == F_INFO && ex->extra_info_format == VR_INFO_MSGPACK)
      bad |= msgpack_sbuffer_write(&sb, t->ptr, t->len); /* already msgpack */
    else
      bad |= msgpack_pack_str(&pk, t->len) || msgpack_pack_str_body(&pk, t->ptr, t->len);
  }
  if (bad) {
    msgpack_sbuffer_destroy(&sb);
    return VR_ERR_NOMEM;
  }
  *out_len = sb.size;
  *out = (uint8_t *)msgpack_sbuffer_release(&sb);
  if (!*out) { /* empty map still has one byte, so data is never NULL here */
    *out_len = 0;
    return VR_ERR_NOMEM;
  }
  return VR_OK;
}

/* ---- JSON --------------------------------------------------------------------------- */

int vr_extras_from_json(const cJSON *obj, vr_extras_t *out, char *err, size_t errlen) {
  if (!out || !obj) return vr_rules_fail(err, errlen, VR_ERR_INVAL, "NULL argument");
  vr_extras_clear(out);
  if (!cJSON_IsObject(obj))
    return vr_rules_fail(err, errlen, VR_ERR_MALFORMED, "element is not a JSON object");
  unsigned seen = 0, nkeys = 0;
  int rc = VR_OK;
  char num[64];
  for (const cJSON *it = obj->child; it && rc == VR_OK; it = it->next) {
    if (++nkeys > VR_EXTRAS_MAX_KEYS) {
      rc = vr_rules_fail(err, errlen, VR_ERR_TOO_LARGE, "object has more than %u keys",
                   VR_EXTRAS_MAX_KEYS);
      break;
    }
    if (!it->string) continue;
    int f = field_index(it->string, strlen(it->string));
    if (f < 0) continue;
    if (seen & (1u << f)) {
      rc = vr_rules_fail(err, errlen, VR_ERR_MALFORMED, "duplicate key %s", k_field_names[f]);
      break;
    }
    seen |= 1u << f;
    if (cJSON_IsNull(it)) continue;
    if (f == F_INFO) {
      char *txt = cJSON_PrintUnformatted(it);
      if (!txt) {
        rc = vr_rules_fail(err, errlen, VR_ERR_NOMEM, "out of memory printing extra_info");
        break;
      }
      size_t tl = strlen(txt);
      if (tl > VR_EXTRAS_MAX_INFO)
        rc = vr_rules_fail(err, errlen, VR_ERR_TOO_LARGE, "extra_info is %zu bytes, limit %u",
                     tl, VR_EXTRAS_MAX_INFO);
      else if (!vr_utf8_valid(txt, tl)) /* cJSON passes raw bytes of strings through */
        rc = vr_rules_fail(err, errlen, VR_ERR_MALFORMED, "extra_info is not valid UTF-8");
      else if (text_store(&out->extra_info, txt, tl))
        rc = vr_rules_fail(err, errlen, VR_ERR_NOMEM, "out of memory for extra_info");
      else
        out->extra_info_format = VR_INFO_JSON;
      cJSON_free(txt);
    } else if (cJSON_IsString(it) && it->valuestring) {
      rc = field_set_text(out, f, it->valuestring, strlen(it->valuestring), err, errlen);
    } else if (f == F_TRUTH && cJSON_IsNumber(it)) {
      if (!isfinite(it->valuedouble)) {
        rc = vr_rules_fail(err, errlen, VR_ERR_MALFORMED, "ground_truth is not finite");
        break;
      }
      number_text(it->valuedouble, 0, num, sizeof(num));
      rc = field_set_text(out, f, num, strlen(num), err, errlen);
    } else {
      rc = vr_rules_fail(err, errlen, VR_ERR_MALFORMED, "%s has the wrong JSON type (want %s)",
                   k_field_names[f], f == F_TRUTH ? "string or number" : "string");
    }
  }
  if (rc) vr_extras_clear(out);
  return rc;
}
