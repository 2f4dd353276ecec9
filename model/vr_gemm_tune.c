/* vr_gemm_tune.c: the GEMM-choice cache file (vr_gemm_tune.h). */
#define _GNU_SOURCE /* O_CLOEXEC, O_NOFOLLOW */
#include "vr_gemm_tune.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "verl_reward/status.h"
#include "vr_jsonl.h"

const char *const vr_gemm_tune_key_names[VR_GEMM_TUNE_KEY] = {
    "m", "n", "k", "out_f32", "bias", "beta1", "gelu", "op_a", "op_b", "bias_fallback", "candidates", "cold",
    "workspace_4k"};
static const double key_lo[VR_GEMM_TUNE_KEY] = {1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0};
static const double key_hi[VR_GEMM_TUNE_KEY] = {2147483647, 2147483647, 2147483647, 1, 1, 1, 2, 1, 1, 1, 64, 1,
                                                2147483647};
/* every member an entry has: the 5 device ones, the key, algo, us */
#define N_MEMBERS (5 + VR_GEMM_TUNE_KEY + 2)

void vr_gemm_tune_set_free(vr_gemm_tune_set_t *s) {
  if (!s) return;
  free(s->e);
  memset(s, 0, sizeof *s);
}

int vr_gemm_tune_same_key(const vr_gemm_tune_entry_t *a, const vr_gemm_tune_entry_t *b) {
  return a->cc_major == b->cc_major && a->cc_minor == b->cc_minor && a->sms == b->sms && a->cublaslt == b->cublaslt &&
         !memcmp(a->key, b->key, sizeof a->key) && !strcmp(a->device, b->device);
}

long vr_gemm_tune_find(const vr_gemm_tune_set_t *s, const vr_gemm_tune_entry_t *e) {
  for (size_t i = 0; i < s->n; i++)
    if (vr_gemm_tune_same_key(&s->e[i], e)) return (long)i;
  return -1;
}

int vr_gemm_tune_append(vr_gemm_tune_set_t *s, const vr_gemm_tune_entry_t *e) {
  if (s->n >= VR_GEMM_TUNE_MAX_ENTRIES) return VR_ERR_TOO_LARGE;
  if (s->n == s->cap) {
    const size_t cap = s->cap ? 2 * s->cap : 64;
    vr_gemm_tune_entry_t *ne = realloc(s->e, cap * sizeof *ne);
    if (!ne) return VR_ERR_NOMEM;
    s->e = ne, s->cap = cap;
  }
  s->e[s->n++] = *e;
  return 0;
}

int vr_gemm_tune_merge(vr_gemm_tune_set_t *into, const vr_gemm_tune_set_t *mine, size_t *added) {
  size_t k = 0;
  int rc = 0;
  for (size_t i = 0; i < mine->n && rc == 0; i++) {
    const vr_gemm_tune_entry_t *e = &mine->e[i];
    if (e->fresh <= 0) continue;
    const long j = vr_gemm_tune_find(into, e);
    if (j >= 0 && e->fresh == 2 && memcmp(into->e[j].algo, e->algo, sizeof e->algo)) {
      into->e[j] = *e;
      k++;
    } else if (j < 0 && (rc = vr_gemm_tune_append(into, e)) == 0) {
      k++;
    }
  }
  if (added) *added = k;
  return rc;
}

/* ---- parsing */

/* An integral number in [lo, hi] into *v: 0, else -1. */
static int int_member(const cJSON *o, const char *name, double lo, double hi, int64_t *v) {
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, name);
  if (!cJSON_IsNumber(m)) return -1;
  const double d = m->valuedouble;
  if (!(d >= lo && d <= hi) || d != floor(d)) return -1;
  *v = (int64_t)d;
  return 0;
}

static int hex_word(const char *s, uint64_t *v) {
  if (!s || strlen(s) != 16) return -1;
  uint64_t x = 0;
  for (int i = 0; i < 16; i++) {
    const char c = s[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    x = x << 4 | (uint64_t)d;
  }
  *v = x;
  return 0;
}

/* One entry object into *e: 0, or -1 with what (a static text) and *member naming the culprit. */
static int parse_entry(const cJSON *o, vr_gemm_tune_entry_t *e, const char **what, const char **member) {
  memset(e, 0, sizeof *e);
  *member = NULL;
  if (!cJSON_IsObject(o)) return *what = "is not an object", -1;
  int n = 0;
  for (const cJSON *c = o->child; c; c = c->next) n++;
  const cJSON *dev = cJSON_GetObjectItemCaseSensitive(o, "device");
  *member = "device";
  if (!cJSON_IsString(dev) || !dev->valuestring[0] || strlen(dev->valuestring) >= VR_GEMM_TUNE_DEVICE)
    return *what = "must be a string of 1..255 bytes", -1;
  snprintf(e->device, sizeof e->device, "%s", dev->valuestring);
  static const char *const dnames[] = {"cc_major", "cc_minor", "sms", "cublaslt"};
  static const double dlo[] = {0, 0, 1, 1}, dhi[] = {99, 99, 65535, 2147483647};
  int64_t v[4];
  for (int i = 0; i < 4; i++) {
    *member = dnames[i];
    if (int_member(o, dnames[i], dlo[i], dhi[i], &v[i])) return *what = "must be an integer in range", -1;
  }
  e->cc_major = (int32_t)v[0], e->cc_minor = (int32_t)v[1], e->sms = (int32_t)v[2], e->cublaslt = v[3];
  for (int i = 0; i < VR_GEMM_TUNE_KEY; i++) {
    int64_t x;
    *member = vr_gemm_tune_key_names[i];
    if (int_member(o, vr_gemm_tune_key_names[i], key_lo[i], key_hi[i], &x))
      return *what = "must be an integer in range", -1;
    e->key[i] = (int32_t)x;
  }
  const cJSON *algo = cJSON_GetObjectItemCaseSensitive(o, "algo");
  *member = "algo";
  if (!cJSON_IsArray(algo) || cJSON_GetArraySize(algo) != VR_GEMM_TUNE_ALGO)
    return *what = "must be an array of 8 strings of 16 lowercase hex digits", -1;
  int w = 0;
  for (const cJSON *c = algo->child; c; c = c->next, w++)
    if (!cJSON_IsString(c) || hex_word(c->valuestring, &e->algo[w]))
      return *what = "must be an array of 8 strings of 16 lowercase hex digits", -1;
  const cJSON *us = cJSON_GetObjectItemCaseSensitive(o, "us");
  *member = "us";
  if (!cJSON_IsNumber(us) || !(us->valuedouble >= 0 && us->valuedouble <= 1e12))
    return *what = "must be a number >= 0", -1;
  e->us = us->valuedouble;
  *member = NULL;
  if (n != N_MEMBERS) { /* every required one is there: so one is not ours */
    for (const cJSON *c = o->child; c; c = c->next) {
      int known = !strcmp(c->string, "device") || !strcmp(c->string, "algo") || !strcmp(c->string, "us");
      for (int i = 0; i < 4 && !known; i++) known = !strcmp(c->string, dnames[i]);
      for (int i = 0; i < VR_GEMM_TUNE_KEY && !known; i++) known = !strcmp(c->string, vr_gemm_tune_key_names[i]);
      if (!known) {
        *member = c->string;
        break;
      }
    }
    return *what = "is not a member of an entry", -1;
  }
  return 0;
}

typedef struct {
  const vr_gemm_tune_entry_t *e;
  size_t i;
} keyref_t;

static int key_cmp(const vr_gemm_tune_entry_t *a, const vr_gemm_tune_entry_t *b) {
  int c = strcmp(a->device, b->device);
  if (c) return c;
  const int64_t x[4] = {a->cc_major, a->cc_minor, a->sms, a->cublaslt}, y[4] = {b->cc_major, b->cc_minor, b->sms,
                                                                                 b->cublaslt};
  for (int i = 0; i < 4; i++)
    if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
  for (int i = 0; i < VR_GEMM_TUNE_KEY; i++)
    if (a->key[i] != b->key[i]) return a->key[i] < b->key[i] ? -1 : 1;
  return 0;
}

static int keyref_cmp(const void *a, const void *b) {
  const keyref_t *x = a, *y = b;
  const int c = key_cmp(x->e, y->e);
  return c ? c : (x->i > y->i) - (x->i < y->i);
}

int vr_gemm_tune_parse(const char *text, size_t len, const char *path, vr_gemm_tune_set_t *out, char *err,
                       size_t cap) {
  memset(out, 0, sizeof *out);
  if (len > VR_GEMM_TUNE_MAX_BYTES) {
    snprintf(err, cap, "%.1000s: %zu bytes, more than the %u a cache file may have", path, len,
             VR_GEMM_TUNE_MAX_BYTES);
    return VR_ERR_PARSE;
  }
  cJSON *v = vr_json_parse_file(text, len, path, VR_JSON_DUP_REFUSE, err, cap);
  if (!v) return VR_ERR_PARSE;
  int rc = VR_ERR_PARSE;
  int64_t ver = 0;
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(v, "format");
  const cJSON *ents = cJSON_GetObjectItemCaseSensitive(v, "entries");
  if (!cJSON_IsObject(v) || cJSON_GetArraySize(v) != 3 || !cJSON_IsString(fmt) ||
      strcmp(fmt->valuestring, VR_GEMM_TUNE_FORMAT) || !cJSON_IsArray(ents)) {
    snprintf(err, cap, "%.1000s: not a GEMM-choice cache (want exactly {\"format\": \"%s\", \"version\": %d, "
             "\"entries\": [...]})", path, VR_GEMM_TUNE_FORMAT, VR_GEMM_TUNE_VERSION);
    goto done;
  }
  if (int_member(v, "version", 0, 1e9, &ver) || ver < 1) {
    snprintf(err, cap, "%.1000s: \"version\" must be an integer >= 1 (this build writes %d)", path,
             VR_GEMM_TUNE_VERSION);
    goto done;
  }
  if (ver != VR_GEMM_TUNE_VERSION) { /* a newer build's file: not ours to read, nor to overwrite */
    snprintf(err, cap, "%.1000s: version %lld, written by a newer verl-reward (this build reads and writes %d): "
             "left as it is", path, (long long)ver, VR_GEMM_TUNE_VERSION);
    rc = VR_ERR_UNSUPPORTED;
    goto done;
  }
  const int n = cJSON_GetArraySize(ents);
  if (n > VR_GEMM_TUNE_MAX_ENTRIES) {
    snprintf(err, cap, "%.1000s: %d entries, more than %d", path, n, VR_GEMM_TUNE_MAX_ENTRIES);
    goto done;
  }
  if (n > 0 && !(out->e = malloc((size_t)n * sizeof *out->e))) {
    snprintf(err, cap, "%.1000s: out of memory", path);
    rc = VR_ERR_NOMEM;
    goto done;
  }
  out->cap = (size_t)n;
  int i = 0;
  for (const cJSON *c = ents->child; c; c = c->next, i++) {
    const char *what = NULL, *member = NULL;
    if (parse_entry(c, &out->e[i], &what, &member)) {
      if (member) snprintf(err, cap, "%.1000s: entry %d: \"%.100s\" %s", path, i, member, what);
      else snprintf(err, cap, "%.1000s: entry %d %s", path, i, what);
      goto done;
    }
    out->n++;
  }
  if (n > 1) { /* no key twice: sorted references, neighbours compared */
    keyref_t *r = malloc((size_t)n * sizeof *r);
    if (!r) {
      snprintf(err, cap, "%.1000s: out of memory", path);
      rc = VR_ERR_NOMEM;
      goto done;
    }
    for (int k = 0; k < n; k++) r[k] = (keyref_t){&out->e[k], (size_t)k};
    qsort(r, (size_t)n, sizeof *r, keyref_cmp);
    for (int k = 0; k + 1 < n; k++)
      if (!key_cmp(r[k].e, r[k + 1].e)) {
        snprintf(err, cap, "%.1000s: entry %zu has the key of entry %zu", path, r[k + 1].i, r[k].i);
        free(r);
        goto done;
      }
    free(r);
  }
  rc = 0;
done:
  cJSON_Delete(v);
  if (rc) vr_gemm_tune_set_free(out);
  return rc;
}

/* ---- writing */

static cJSON *entry_json(const vr_gemm_tune_entry_t *e) {
  cJSON *o = cJSON_CreateObject();
  cJSON *a = cJSON_CreateArray();
  if (!o || !a) {
    cJSON_Delete(o), cJSON_Delete(a);
    return NULL;
  }
  int ok = cJSON_AddStringToObject(o, "device", e->device) && cJSON_AddNumberToObject(o, "cc_major", e->cc_major) &&
           cJSON_AddNumberToObject(o, "cc_minor", e->cc_minor) && cJSON_AddNumberToObject(o, "sms", e->sms) &&
           cJSON_AddNumberToObject(o, "cublaslt", (double)e->cublaslt);
  for (int i = 0; i < VR_GEMM_TUNE_KEY && ok; i++) ok = !!cJSON_AddNumberToObject(o, vr_gemm_tune_key_names[i], e->key[i]);
  for (int i = 0; i < VR_GEMM_TUNE_ALGO && ok; i++) {
    char h[17];
    snprintf(h, sizeof h, "%016llx", (unsigned long long)e->algo[i]);
    cJSON *s = cJSON_CreateString(h);
    ok = s && cJSON_AddItemToArray(a, s);
  }
  ok = ok && cJSON_AddItemToObject(o, "algo", a);
  if (!ok) cJSON_Delete(a);
  const double us = isfinite(e->us) && e->us >= 0 && e->us <= 1e12 ? e->us : 0;
  if (ok && cJSON_AddNumberToObject(o, "us", us)) return o;
  cJSON_Delete(o);
  return NULL;
}

char *vr_gemm_tune_serialise(const vr_gemm_tune_set_t *s, size_t *len) {
  size_t cap = 256, n = 0;
  char *buf = malloc(cap);
  if (!buf) return NULL;
  n = (size_t)snprintf(buf, cap, "{\"format\": \"%s\", \"version\": %d, \"entries\": [", VR_GEMM_TUNE_FORMAT,
                       VR_GEMM_TUNE_VERSION);
  for (size_t i = 0; i < s->n; i++) {
    cJSON *o = entry_json(&s->e[i]);
    char *t = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    const size_t tl = t ? strlen(t) : 0;
    if (t && n + tl + 8 > cap) {
      size_t nc = cap;
      while (n + tl + 8 > nc) nc *= 2;
      char *nb = realloc(buf, nc);
      if (nb) buf = nb, cap = nc;
      else cJSON_free(t), t = NULL;
    }
    if (!t) {
      free(buf);
      return NULL;
    }
    n += (size_t)snprintf(buf + n, cap - n, "%s\n%s", i ? "," : "", t);
    cJSON_free(t);
  }
  if (n + 4 > cap) {
    char *nb = realloc(buf, n + 4);
    if (!nb) {
      free(buf);
      return NULL;
    }
    buf = nb;
  }
  memcpy(buf + n, "]}\n", 4);
  *len = n + 3;
  return buf;
}

/* ---- where it lives */

int vr_gemm_tune_resolve(const char *configured, const char *env, const char *xdg, const char *home, char *out,
                         size_t cap) {
  const char *p = configured && configured[0] ? configured : env && env[0] ? env : NULL;
  if (p && !strcmp(p, "off")) {
    snprintf(out, cap, "off");
    return 1;
  }
  int n;
  if (p) n = snprintf(out, cap, "%s", p);
  else if (xdg && xdg[0] == '/') n = snprintf(out, cap, "%s/verl-reward/gemm-tune.json", xdg);
  else if (home && home[0]) n = snprintf(out, cap, "%s/.cache/verl-reward/gemm-tune.json", home);
  else {
    snprintf(out, cap, "neither XDG_CACHE_HOME nor HOME is set");
    return -1;
  }
  if (n < 0 || (size_t)n >= cap) {
    snprintf(out, cap, "the path is longer than %zu bytes", cap - 1);
    return -1;
  }
  return 0;
}

/* The directory part of path into dir ("." when none). */
static void dir_of(const char *path, char *dir, size_t cap) {
  const char *sl = strrchr(path, '/');
  if (!sl) snprintf(dir, cap, ".");
  else if (sl == path) snprintf(dir, cap, "/");
  else snprintf(dir, cap, "%.*s", (int)(sl - path), path);
}

/* Makes path's directory when missing (each level 0700), opens it and checks the open directory
 * (fstat, so no rename between the check and the use changes what was checked): ours, not writable
 * by group or others. 0 with *dfd (the caller closes it) and *base (the file's name in it). */
static int open_dir(const char *path, int *dfd, const char **base, char *err, size_t cap) {
  char dir[4096];
  if (strlen(path) >= sizeof dir) { /* a cut directory would not be the file's */
    snprintf(err, cap, "%.1000s...: path too long", path);
    return VR_ERR_INVAL;
  }
  dir_of(path, dir, sizeof dir);
  struct stat st;
  if (stat(dir, &st) != 0) { /* make each missing level, 0700 */
    for (char *p = dir + 1;; ++p) {
      const char c = *p;
      if (c != '/' && c != '\0') continue;
      *p = '\0';
      if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        const int e = errno; /* before snprintf, which may change errno */
        snprintf(err, cap, "cannot create the directory %.1000s for the GEMM-choice cache %.1000s: %s", dir, path,
                 strerror(e));
        return e == EACCES || e == EPERM ? VR_ERR_PERM : VR_ERR_IO;
      }
      *p = c;
      if (!c) break;
    }
  }
  const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  const char *why = NULL;
  if (fd < 0) {
    const int e = errno;
    why = e == ELOOP || e == ENOTDIR ? "not a directory (a symlink?)" : strerror(e);
  } else if (fstat(fd, &st) != 0) {
    why = strerror(errno);
  } else {
    why = !S_ISDIR(st.st_mode) ? "not a directory" : st.st_uid != geteuid() ? "owned by another user"
          : (st.st_mode & 0022) ? "writable by group or others" : NULL;
  }
  if (why) {
    snprintf(err, cap, "refusing the directory %.1000s of the GEMM-choice cache %.1000s: %s. HINT: a directory of this "
             "user's that group and others cannot write (the default one is made 0700), or another path "
             "(VERL_GEMM_CACHE, --gemm-cache, actor_rollout_ref.rollout.gemm_cache), or off",
             dir, path, why);
    if (fd >= 0) close(fd);
    return VR_ERR_PERM;
  }
  const char *sl = strrchr(path, '/');
  *dfd = fd;
  *base = sl ? sl + 1 : path;
  return 0;
}

int vr_gemm_tune_prepare(const char *path, char *err, size_t cap) {
  int dfd = -1;
  const char *base = NULL;
  const int rc = open_dir(path, &dfd, &base, err, cap);
  if (rc == 0) close(dfd);
  return rc;
}

/* Checks an open file (fstat): a regular file of ours nobody else can write, at most the limit. */
static int check_fd(int fd, const char *path, size_t *size, char *err, size_t cap) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    snprintf(err, cap, "%.1000s: %s", path, strerror(errno));
    return VR_ERR_IO;
  }
  const char *why = !S_ISREG(st.st_mode) ? "not a regular file" : st.st_uid != geteuid() ? "owned by another user"
                    : (st.st_mode & 0022) ? "writable by group or others" : NULL;
  if (why) {
    snprintf(err, cap, "refusing the GEMM-choice cache %.1000s: %s. HINT: remove it (it is rewritten, mode 0600) or "
             "give another path", path, why);
    return VR_ERR_PERM;
  }
  if ((uint64_t)st.st_size > VR_GEMM_TUNE_MAX_BYTES) {
    snprintf(err, cap, "%.1000s: %llu bytes, more than the %u a cache file may have", path,
             (unsigned long long)st.st_size, VR_GEMM_TUNE_MAX_BYTES);
    return VR_ERR_TOO_LARGE;
  }
  *size = (size_t)st.st_size;
  return 0;
}

/* vr_gemm_tune_load of name in the directory dfd (AT_FDCWD: the working one); path names it in err. */
static int load_at(int dfd, const char *name, const char *path, vr_gemm_tune_set_t *out, int *exists, char *err,
                   size_t cap) {
  memset(out, 0, sizeof *out);
  *exists = 0;
  /* O_NONBLOCK: a FIFO or device at the path must not block the open (check_fd refuses it);
   * O_NOCTTY: a terminal there never becomes ours. Regular files ignore both. */
  const int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return 0;
    snprintf(err, cap, "%.1000s: %s%s", path, strerror(e), e == ELOOP ? " (a symlink: refused)" : "");
    return e == ELOOP || e == EACCES ? VR_ERR_PERM : VR_ERR_IO;
  }
  *exists = 1;
  size_t size = 0;
  int rc = check_fd(fd, path, &size, err, cap);
  char *buf = rc ? NULL : malloc(size + 1);
  if (!rc && !buf) {
    snprintf(err, cap, "%.1000s: out of memory", path);
    rc = VR_ERR_NOMEM;
  }
  size_t got = 0;
  while (!rc && got < size) {
    const ssize_t r = read(fd, buf + got, size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) { /* an error, not a short file: never parsed (a store would replace the file) */
      snprintf(err, cap, "reading %.1000s: %s", path, strerror(errno));
      rc = VR_ERR_IO;
      break;
    }
    if (r == 0) break; /* shorter than fstat said: what was read */
    got += (size_t)r;
  }
  close(fd);
  if (!rc) rc = vr_gemm_tune_parse(buf, got, path, out, err, cap);
  free(buf);
  return rc;
}

int vr_gemm_tune_load(const char *path, vr_gemm_tune_set_t *out, int *exists, char *err, size_t cap) {
  return load_at(AT_FDCWD, path, path, out, exists, err, cap);
}

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w, n -= (size_t)w;
  }
  return 0;
}

int vr_gemm_tune_store(const char *path, const vr_gemm_tune_set_t *mine, size_t *added, size_t *total,
                       int *replaced, char *err, size_t cap) {
  *added = *total = 0;
  if (replaced) *replaced = 0;
  err[0] = '\0';
  /* lp / tp name the lock and temporary files in messages; every operation is relative to the
   * directory checked by open_dir (dfd), by the names ln / tn / base in it */
  char lp[4200], tp[4200];
  if ((size_t)snprintf(lp, sizeof lp, "%s.lock", path) >= sizeof lp ||
      (size_t)snprintf(tp, sizeof tp, "%s.tmp.%d", path, (int)getpid()) >= sizeof tp) {
    snprintf(err, cap, "%.1000s: path too long", path);
    return VR_ERR_INVAL;
  }
  int dfd = -1;
  const char *base = NULL;
  int rc = open_dir(path, &dfd, &base, err, cap);
  if (rc) return rc;
  const char *ln = lp + (base - path), *tn = tp + (base - path);
  const int lfd = openat(dfd, ln, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (lfd < 0) {
    snprintf(err, cap, "lock file %.1000s of the GEMM-choice cache: %s", lp, strerror(errno));
    close(dfd);
    return VR_ERR_IO;
  }
  /* a bounded wait: a writer stopped (SIGSTOP) or hung while holding the lock must not hang this
   * process's rollout (the CUDA side calls this with its choices' mutex held) */
  for (int waited_ms = 0; flock(lfd, LOCK_EX | LOCK_NB) != 0;) {
    const int e = errno;
    if (e == EINTR) continue;
    if (e != EWOULDBLOCK || waited_ms >= VR_GEMM_TUNE_LOCK_WAIT_MS) {
      if (e == EWOULDBLOCK)
        snprintf(err, cap, "lock file %.1000s of the GEMM-choice cache: held by another process for %d ms: not "
                 "written. HINT: a stopped or hung process holds it (fuser %.1000s)", lp, waited_ms, lp);
      else snprintf(err, cap, "flock %.1000s: %s", lp, strerror(e));
      close(lfd), close(dfd);
      return e == EWOULDBLOCK ? VR_ERR_BUSY : VR_ERR_IO;
    }
    (void)usleep(20 * 1000);
    waited_ms += 20;
  }
  vr_gemm_tune_set_t file;
  int exists = 0;
  char lerr[1200] = "";
  rc = load_at(dfd, base, path, &file, &exists, lerr, sizeof lerr);
  if (rc == VR_ERR_PARSE || rc == VR_ERR_TOO_LARGE) { /* a bad file: ours to replace */
    snprintf(err, cap, "%s", lerr);
    if (replaced) *replaced = 1;
    rc = 0;
  } else if (rc) {
    snprintf(err, cap, "%s", lerr);
  }
  char *text = NULL;
  size_t len = 0;
  if (!rc) {
    const int mrc = vr_gemm_tune_merge(&file, mine, added);
    if (mrc == VR_ERR_NOMEM) rc = mrc, snprintf(err, cap, "%.1000s: out of memory", path);
    if (mrc == VR_ERR_TOO_LARGE) { /* the file is full: what fit is written, the rest said so */
      size_t fresh = 0, lost = 0;
      for (size_t i = 0; i < mine->n; i++)
        if (mine->e[i].fresh > 0) fresh++, lost += vr_gemm_tune_find(&file, &mine->e[i]) < 0;
      snprintf(err, cap, "%.1000s: full (%d entries): %zu of this process's %zu new choices not written. HINT: "
               "remove the file (it is rebuilt by timing)", path, VR_GEMM_TUNE_MAX_ENTRIES, lost, fresh);
    }
  }
  if (!rc && *added == 0 && exists && !(replaced && *replaced)) { /* nothing new: leave it */
    *total = file.n;
    vr_gemm_tune_set_free(&file);
    close(lfd), close(dfd);
    return 0;
  }
  if (!rc && !(text = vr_gemm_tune_serialise(&file, &len))) rc = VR_ERR_NOMEM, snprintf(err, cap, "out of memory");
  if (!rc) {
    (void)unlinkat(dfd, tn, 0); /* a dead writer's of our pid: the lock is ours */
    const int fd = openat(dfd, tn, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || write_all(fd, text, len) != 0 || fsync(fd) != 0) {
      snprintf(err, cap, "writing %.1000s: %s", tp, strerror(errno));
      rc = VR_ERR_IO;
    }
    if (fd >= 0 && close(fd) != 0 && !rc) {
      snprintf(err, cap, "writing %.1000s: %s", tp, strerror(errno));
      rc = VR_ERR_IO;
    }
    if (!rc && renameat(dfd, tn, dfd, base) != 0) {
      snprintf(err, cap, "renaming %.1000s to %.1000s: %s", tp, path, strerror(errno));
      rc = VR_ERR_IO;
    }
    if (rc) (void)unlinkat(dfd, tn, 0);
    else (void)fsync(dfd); /* the rename itself on disk (best effort) */
  }
  if (!rc) *total = file.n;
  free(text);
  vr_gemm_tune_set_free(&file);
  close(lfd); /* releases the lock */
  close(dfd);
  return rc;
}
