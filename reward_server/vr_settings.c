/* vr_settings.c: defaults, flag table, command line and config file parsing. */
#define _GNU_SOURCE
#include "vr_settings.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verl_reward/protocol.h"
#include "verl_reward/status.h"
#include "vr_cli.h"
#include "vr_log.h"
#include "vr_rules.h"

/* OPT_STR takes any text; the typed strings are checked (and HF spellings canonicalised) as they
 * are set, so the config file and the command line are validated alike and before anything loads. */
typedef enum opt_type {
  OPT_STR, OPT_U32, OPT_U64, OPT_PORT, OPT_INT, OPT_OCTAL, OPT_TRUNCATE, OPT_LOGLEVEL,
  OPT_DEVICE,  /* vr_settings_devices: cpu, cuda, cuda:N, or a list of replicas' devices */
  OPT_DTYPE,   /* vr_model_dtype_parse: auto, f32/float32, bf16/bfloat16 */
  OPT_GEMM,    /* vr_model_cpu_gemm_parse */
  OPT_SHM,     /* vr_shm_path's rule; "" disables shm */
  OPT_REWARD,  /* vr_reward_spec_parse; "" = model */
  OPT_FILE,    /* a path that must exist (checked when set) */
  OPT_UIDS,    /* vr_settings_ids: comma-separated user names / uids */
  OPT_GIDS,    /* the same for groups */
} opt_type_t;

typedef struct opt {
  const char *name;   /* long flag without "--" */
  const char *alias;  /* second accepted name or NULL */
  opt_type_t type;
  size_t off;         /* offset in vr_settings_t */
  size_t size;        /* for OPT_STR: buffer size */
  uint64_t min, max;  /* for numeric types */
  const char *arg;    /* argument name shown in --help */
  const char *help;
} opt_t;

#define F(field) offsetof(vr_settings_t, field), sizeof(((vr_settings_t *)0)->field)

/* The one table of flags: --help, argv and the config file all come from it. */
static const opt_t k_opts[] = {
    {"model", "model_name_or_path", OPT_STR, F(model), 0, 0, "DIR|checksum",
     "Hugging Face model directory; 'checksum' = transport test scorer (no model); "
     "omit with a rules-only --reward"},
    {"shm-name", "shared_mem_name", OPT_SHM, F(shm_name), 0, 0, "NAME",
     "shared-memory service name: NAME (socket DIR/NAME.sock, DIR from --shm-socket-dir), a socket path "
     "(has a '/'), or @NAME (abstract socket: any local user can take it first); empty disables shm"},
    {"shm-socket-dir", NULL, OPT_STR, F(shm_socket_dir), 0, 0, "DIR",
     "directory of a plain --shm-name's socket, made 0755 if missing, refused unless ours and not writable by "
     "others (unset: /run/verl-reward for root or when it is this user's, else /run/user/UID/verl-reward)"},
    {"port", NULL, OPT_PORT, F(port), 0, 65535, "N", "HTTP port; 0 disables HTTP"},
    {"host", NULL, OPT_STR, F(host), 0, 0, "ADDR", "HTTP listen address"},
    {"device", NULL, OPT_DEVICE, F(device), 0, 0, "cpu|cuda[:N][,...]",
     "device; unset: the first visible GPU, else cpu. A comma-separated list runs one model replica per entry "
     "behind the one segment and port (cuda:0,1,2,3; cuda:0,cuda:0 two on one GPU; cpu,cpu)"},
    {"dtype", NULL, OPT_DTYPE, F(dtype), 0, 0, "auto|f32|bf16", "compute dtype (auto: cpu f32, cuda bf16; float32, bfloat16 accepted)"},
    {"max-batch-tokens", NULL, OPT_U32, F(max_batch_tokens), 1, 1u << 24, "N", "token budget of one packed batch"},
    {"max-wait-us", NULL, OPT_U32, F(max_wait_us), 0, 60000000, "US", "longest wait for more work before a batch starts (0: start as soon as the batcher is free; what arrives during a forward joins the next batch)"},
    {"batch-linger-us", NULL, OPT_U32, F(batch_linger_us), 0, 1000000, "US", "after a batch of N requests is answered, wait up to this long for N requests to be queued again before the next batch starts (closed-loop clients resubmit together; 0: off)"},
    {"max-seq-len", NULL, OPT_U32, F(max_seq_len), 1, 1u << 20, "N",
     "longest sequence (capped by the model's max positions)"},
    {"truncate", NULL, OPT_TRUNCATE, F(truncate), 0, 0, "left|right|error",
     "longer sequences: keep the last (left) / first (right) max-seq-len tokens, or reject"},
    {"spin-us", NULL, OPT_U32, F(spin_us), 0, 1000000, "US", "server busy-poll before parking on the futex"},
    {"lanes", NULL, OPT_U32, F(lanes), 1, 1024, "N", "client lanes in the segment"},
    {"shm-mode", NULL, OPT_OCTAL, F(shm_mode), 0, 0777, "MODE",
     "who may attach, read as file modes (octal): 0600 the server's uid, 0660 also its group, 0666 anyone"},
    {"allow-uid", NULL, OPT_UIDS, F(allow_uid), 0, 0, "LIST",
     "further users (names or uids, comma-separated) whose clients may attach"},
    {"allow-gid", NULL, OPT_GIDS, F(allow_gid), 0, 0, "LIST",
     "further groups (names or gids, comma-separated): a client in one of them (primary or supplementary) may attach"},
    {"max-lanes-per-uid", NULL, OPT_U32, F(max_lanes_per_uid), 0, 1024, "N",
     "shm lanes one user may hold at once (0: all of --lanes when only the server's uid may attach, else half)"},
    {"ring-slots", NULL, OPT_U32, F(ring_slots), 1, 4096, "N", "requests in flight per lane (power of two)"},
    {"arena-mb", NULL, OPT_U32, F(arena_mb), 1, 4096, "MB", "payload arena per lane"},
    {"max-seqs-per-request", NULL, OPT_U32, F(max_seqs_per_request), 1, 1u << 20, "N", "sequences per request"},
    {"log-level", NULL, OPT_LOGLEVEL, F(log_level), 0, 0, "LEVEL", "trace|debug|info|warn|error"},
    {"pid-file", NULL, OPT_STR, F(pid_file), 0, 0, "FILE", "write the pid here (removed at exit)"},
    {"ready-file", NULL, OPT_STR, F(ready_file), 0, 0, "FILE",
     "created (write + rename) once ready to score, removed at exit: for supervisors without sd_notify"},
    {"reward", NULL, OPT_REWARD, F(reward), 0, 0, "SPEC",
     "reward components and weights, e.g. model:0.7,gsm8k:0.3 or gsm8k (rules only); unset: model"},
    {"max-body-bytes", NULL, OPT_U64, F(max_body_bytes), 0, 1ull << 32, "N",
     "largest HTTP request body (413 beyond); 0: derived from the request limits, "
     "max-seqs-per-request x (max-seq-len x 12 + 1024) + 64 KiB"},
    {"max-queue-per-client", NULL, OPT_U32, F(max_queue_per_client), 0, 1u << 20, "N",
     "requests one client (a shm lane, an HTTP connection) may have queued; beyond: overloaded for that client "
     "only (0: no limit of its own)"},
    {"max-connections", NULL, OPT_U32, F(max_connections), 0, 1u << 20, "N",
     "HTTP connections open at once; the newest beyond are closed (0: the fd limit, ulimit -n, less 64)"},
    {"request-timeout-s", NULL, OPT_U32, F(request_timeout_s), 1, 86400, "S",
     "an HTTP connection that completes no request within S seconds of its accept or its last reply is closed "
     "(a whole-request deadline, not per byte)"},
    {"max-queue", NULL, OPT_U32, F(max_queue), 1, 1u << 20, "N",
     "requests accepted but not yet batched; beyond: overloaded (HTTP 429, shm VR_ERR_OVERLOADED)"},
    {"threads", NULL, OPT_INT, F(threads), 0, 4096, "N", "cpu backend threads (0 = all cores)"},
    {"cpu-gemm", NULL, OPT_GEMM, F(cpu_gemm), 0, 0, "auto|generic|avx2+fma",
     "cpu backend GEMMs (auto: avx2+fma where the CPU has it; generic: the same score bits on every CPU)"},
    {"drain-ms", NULL, OPT_U32, F(drain_ms), 0, 600000, "MS", "on SIGTERM: time to finish accepted work"},
    {"admin-token-file", NULL, OPT_FILE, F(admin_token_file), 0, 0, "FILE",
     "enables POST /admin/reload for requests with 'Authorization: Bearer <the file's first line>'"},
    {"config", NULL, OPT_FILE, F(config), 0, 0, "FILE", "read 'key: value' lines (same keys as the flags)"},
};
#define N_OPTS (sizeof k_opts / sizeof k_opts[0])

void vr_settings_init(vr_settings_t *s) {
  memset(s, 0, sizeof *s);
  strcpy(s->shm_name, "verl_reward_shm");
  s->port = 8080;
  strcpy(s->host, "127.0.0.1");
  strcpy(s->dtype, "auto");
  strcpy(s->cpu_gemm, "auto");
  s->max_batch_tokens = 16384;
  s->max_wait_us = 0;
  s->batch_linger_us = 100;
  s->max_seq_len = 8192;
  s->truncate = VR_TRUNCATE_ERROR;
  s->spin_us = 50;
  s->lanes = 32;
  s->shm_mode = 0600;
  s->ring_slots = 64;
  s->arena_mb = 4;
  s->max_seqs_per_request = 1024;
  strcpy(s->log_level, "info");
  s->max_body_bytes = 0; /* derived (vr_settings_body_limit) */
  s->max_queue = 4096;
  s->max_connections = 0;
  s->max_queue_per_client = 1024;
  s->request_timeout_s = 60;
  s->threads = 0;
  s->drain_ms = 10000;
  vr_model_options_t mo; /* the model runtime owns the CUDA tuning's defaults */
  vr_model_options_init(&mo);
  s->cuda = mo.cuda;
}

const char *vr_truncate_name(vr_truncate_t t) {
  switch (t) {
    case VR_TRUNCATE_LEFT: return "left";
    case VR_TRUNCATE_RIGHT: return "right";
    default: return "error";
  }
}

/* "max_batch_tokens" and "max-batch-tokens" name the same option. */
static int name_eq(const char *a, const char *b) {
  for (; *a && *b; a++, b++) {
    char ca = *a == '_' ? '-' : *a, cb = *b == '_' ? '-' : *b;
    if (ca != cb) return 0;
  }
  return *a == *b;
}

static const opt_t *find_opt(const char *key) {
  for (size_t i = 0; i < N_OPTS; i++)
    if (name_eq(key, k_opts[i].name) || (k_opts[i].alias && name_eq(key, k_opts[i].alias))) return &k_opts[i];
  return NULL;
}

static void opt_default_text(const opt_t *o, const vr_settings_t *d, char *buf, size_t n) {
  const char *p = (const char *)d + o->off;
  switch (o->type) {
    case OPT_STR: case OPT_LOGLEVEL: case OPT_DEVICE: case OPT_DTYPE: case OPT_GEMM: case OPT_SHM:
    case OPT_REWARD: case OPT_FILE: case OPT_UIDS: case OPT_GIDS: snprintf(buf, n, "%s", *p ? p : "(none)"); break;
    case OPT_U32: snprintf(buf, n, "%u", *(const uint32_t *)p); break;
    case OPT_U64: snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case OPT_PORT: case OPT_INT: snprintf(buf, n, "%d", *(const int *)p); break;
    case OPT_OCTAL: snprintf(buf, n, "0%o", *(const uint32_t *)p); break;
    case OPT_TRUNCATE: snprintf(buf, n, "%s", vr_truncate_name(*(const vr_truncate_t *)p)); break;
  }
}

int vr_settings_set(vr_settings_t *s, const char *key, const char *value, char *err, size_t errlen) {
  char dummy[8];
  if (!err) { err = dummy; errlen = sizeof dummy; }
  const opt_t *o = find_opt(key);
  if (!o) {
    const int rc = vr_cuda_options_set(&s->cuda, key, value, err, errlen); /* --cuda-*: model/'s table */
    if (rc == VR_ERR_NOT_FOUND)
      snprintf(err, errlen, "unknown key '%s' (the keys are the long flags without the dashes)", key);
    return rc;
  }
  char *p = (char *)s + o->off;
  uint64_t x = 0;
  const int text = o->type == OPT_STR || o->type >= OPT_DEVICE; /* held inline in a char[] */
  if (text && strlen(value) >= o->size) {
    snprintf(err, errlen, "--%s: value longer than %zu bytes", o->name, o->size - 1);
    return VR_ERR_INVAL;
  }
  char canon[64], why[256] = "";
  switch (o->type) {
    case OPT_STR:
      strcpy(p, value);
      return 0;
    case OPT_DEVICE: {
      char devs[VR_SETTINGS_MAX_REPLICAS][16];
      uint32_t nd = 0;
      if (vr_settings_devices(value, devs, &nd, err, errlen) != 0) return VR_ERR_INVAL;
      size_t at = 0;
      p[0] = 0;
      for (uint32_t i = 0; i < nd; i++) /* fits: VR_SETTINGS_MAX_REPLICAS entries of < 16 bytes */
        at += (size_t)snprintf(p + at, o->size - at, "%s%s", i ? "," : "", devs[i]);
      return 0;
    }
    case OPT_DTYPE:
      if (vr_model_dtype_parse(value, canon, sizeof canon, err, errlen) != 0) return VR_ERR_INVAL;
      snprintf(p, o->size, "%s", canon);
      return 0;
    case OPT_GEMM:
      if (vr_model_cpu_gemm_parse(value, err, errlen) != 0) return VR_ERR_INVAL;
      strcpy(p, value);
      return 0;
    case OPT_SHM:
      if (value[0] && vr_shm_path(value, canon, sizeof canon, why, sizeof why) != 0) {
        snprintf(err, errlen, "--shm-name '%s': %s. HINT: a plain name such as verl_reward_shm (the socket "
                 "/run/verl-reward/NAME.sock), a socket path, or '' to disable shm", value, why);
        return VR_ERR_INVAL;
      }
      strcpy(p, value);
      return 0;
    case OPT_REWARD: {
      vr_reward_spec_t spec;
      if (value[0] && vr_reward_spec_parse(value, &spec, why, sizeof why) != 0) {
        snprintf(err, errlen, "--reward '%s': %s", value, why);
        return VR_ERR_INVAL;
      }
      strcpy(p, value);
      return 0;
    }
    case OPT_UIDS: case OPT_GIDS: {
      uint32_t ids[VR_SETTINGS_MAX_IDS], n;
      if (vr_settings_ids(value, o->type == OPT_GIDS, ids, VR_SETTINGS_MAX_IDS, &n, why, sizeof why) != 0) {
        snprintf(err, errlen, "--%s '%s': %s", o->name, value, why);
        return VR_ERR_INVAL;
      }
      strcpy(p, value);
      return 0;
    }
    case OPT_FILE:
      if (access(value, R_OK) != 0) {
        snprintf(err, errlen, "--%s '%s': %s", o->name, value, strerror(errno));
        return VR_ERR_INVAL;
      }
      strcpy(p, value);
      return 0;
    case OPT_LOGLEVEL: {
      vr_log_level_t lv;
      if (vr_log_level_parse(value, &lv) != 0) {
        snprintf(err, errlen, "--%s '%s' is not trace|debug|info|warn|error|fatal|off", o->name, value);
        return VR_ERR_INVAL;
      }
      snprintf(p, o->size, "%s", vr_log_level_name(lv));
      return 0;
    }
    case OPT_TRUNCATE:
      if (strcmp(value, "left") == 0) *(vr_truncate_t *)p = VR_TRUNCATE_LEFT;
      else if (strcmp(value, "right") == 0) *(vr_truncate_t *)p = VR_TRUNCATE_RIGHT;
      else if (strcmp(value, "error") == 0) *(vr_truncate_t *)p = VR_TRUNCATE_ERROR;
      else {
        snprintf(err, errlen, "--%s '%s' is not left|right|error", o->name, value);
        return VR_ERR_INVAL;
      }
      return 0;
    default: break;
  }
  if (vr_cli_strtou64(value, o->type == OPT_OCTAL ? 8 : 10, &x) != 0 || x < o->min || x > o->max) {
    snprintf(err, errlen, "--%s '%s' is not a%s number in [%llu, %llu]", o->name, value,
             o->type == OPT_OCTAL ? "n octal" : "", (unsigned long long)o->min, (unsigned long long)o->max);
    return VR_ERR_INVAL;
  }
  switch (o->type) {
    case OPT_U32: case OPT_OCTAL: *(uint32_t *)p = (uint32_t)x; break;
    case OPT_U64: *(uint64_t *)p = x; break;
    default: *(int *)p = (int)x; break;
  }
  return 0;
}

int vr_settings_devices(const char *text, char (*out)[16], uint32_t *n, char *err, size_t errlen) {
  *n = 0;
  if (!text[0]) {
    if (out) out[0][0] = 0;
    *n = 1;
    return 0;
  }
  for (const char *c = text, *e;; c = e + 1) { /* the list's shape first: an empty entry is named as such */
    e = strchr(c, ',');
    uint32_t k = 1;
    for (const char *q = text; q < c; q++) k += *q == ',';
    if ((e ? e == c : !*c)) {
      snprintf(err, errlen, "--device '%s': entry %u is empty. HINT: a comma-separated list such as cuda:0,cuda:1 "
               "(or cuda:0,1), cpu,cpu", text, k);
      return VR_ERR_INVAL;
    }
    if (!e) break;
  }
  int cpu = 0, cuda = 0, bare_cuda = 0;
  const char *t = text;
  for (uint32_t i = 0;; i++) {
    const char *e = strchr(t, ',');
    size_t len = e ? (size_t)(e - t) : strlen(t);
    char ent[32], canon[16], why[256];
    if (i >= VR_SETTINGS_MAX_REPLICAS) {
      snprintf(err, errlen, "--device '%s': more than %d entries (replicas)", text, VR_SETTINGS_MAX_REPLICAS);
      return VR_ERR_INVAL;
    }
    if (len >= sizeof ent) len = sizeof ent - 1; /* longer than any device: refused below */
    memcpy(ent, t, len);
    ent[len] = 0;
    if (isdigit((unsigned char)ent[0]) && cuda) { /* cuda:0,1,2: the bare numbers are GPUs too */
      char full[40];
      snprintf(full, sizeof full, "cuda:%s", ent);
      snprintf(ent, sizeof ent, "%.31s", full);
    }
    int rc = vr_model_device_parse(ent, canon, sizeof canon, why, sizeof why);
    if (rc != 0) {
      if (text == t && !e) snprintf(err, errlen, "%s", why); /* one device: the model's own message */
      else snprintf(err, errlen, "--device '%s': entry %u '%s': %s", text, i + 1, ent, why);
      return rc;
    }
    if (strcmp(canon, "cpu") == 0) cpu++;
    else cuda++;
    if (strcmp(canon, "cuda") == 0) bare_cuda++;
    if (out) snprintf(out[i], 16, "%s", canon);
    *n = i + 1;
    if (!e) break;
    t = e + 1;
  }
  if (bare_cuda && *n > 1) {
    snprintf(err, errlen, "--device '%s': 'cuda' (the first visible GPU) names no GPU in a list. HINT: write each "
             "replica's GPU, cuda:0,cuda:1 (cuda:0,cuda:0 for two replicas on one GPU)", text);
    return VR_ERR_INVAL;
  }
  if (cpu && cuda) {
    snprintf(err, errlen, "--device '%s': cpu and cuda replicas do not mix (their scores differ in the last bits, "
             "so a score would depend on the replica). HINT: all cpu or all cuda:N", text);
    return VR_ERR_INVAL;
  }
  return 0;
}

const char *vr_settings_first_difference(const vr_settings_t *a, const vr_settings_t *b, const char *const *allowed) {
  for (size_t i = 0; i < N_OPTS; i++) {
    const opt_t *o = &k_opts[i];
    const char *pa = (const char *)a + o->off, *pb = (const char *)b + o->off;
    const int text = o->type == OPT_STR || o->type >= OPT_DEVICE;
    if (text ? strncmp(pa, pb, o->size) == 0 : memcmp(pa, pb, o->size) == 0) continue;
    int ok = 0;
    for (const char *const *n = allowed; n && *n && !ok; n++) ok = strcmp(*n, o->name) == 0;
    if (!ok) return o->name;
  }
  return memcmp(&a->cuda, &b->cuda, sizeof a->cuda) == 0 ? NULL : "cuda-*";
}

uint64_t vr_settings_body_limit(const vr_settings_t *s) {
  if (s->max_body_bytes) return s->max_body_bytes;
  /* a JSON token id takes at most 12 bytes ("-2147483648,"); 1 KiB per sequence for its
   * brackets and extras; 64 KiB for the rest */
  uint64_t b = (uint64_t)s->max_seqs_per_request * ((uint64_t)s->max_seq_len * 12 + 1024) + (64u << 10);
  return b < (1ull << 32) ? b : (1ull << 32);
}

int vr_settings_ids(const char *text, int groups, uint32_t *out, uint32_t max, uint32_t *n, char *err, size_t errlen) {
  *n = 0;
  char buf[256];
  if (strlen(text) >= sizeof buf) {
    snprintf(err, errlen, "list longer than %zu bytes", sizeof buf - 1);
    return VR_ERR_INVAL;
  }
  strcpy(buf, text);
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    while (isspace((unsigned char)*t)) t++;
    char *e = t + strlen(t);
    while (e > t && isspace((unsigned char)e[-1])) *--e = '\0';
    if (!*t) continue;
    uint64_t x;
    if (vr_cli_strtou64(t, 10, &x) == 0) {
      if (x >= UINT32_MAX) {
        snprintf(err, errlen, "id %s out of range", t);
        return VR_ERR_INVAL;
      }
    } else if (groups) {
      struct group *g = getgrnam(t);
      if (!g) {
        snprintf(err, errlen, "no group '%s'", t);
        return VR_ERR_INVAL;
      }
      x = g->gr_gid;
    } else {
      struct passwd *pw = getpwnam(t);
      if (!pw) {
        snprintf(err, errlen, "no user '%s'", t);
        return VR_ERR_INVAL;
      }
      x = pw->pw_uid;
    }
    if (*n >= max) {
      snprintf(err, errlen, "more than %u entries", max);
      return VR_ERR_INVAL;
    }
    out[(*n)++] = (uint32_t)x;
  }
  return 0;
}

static char *trim(char *t) {
  while (isspace((unsigned char)*t)) t++;
  size_t n = strlen(t);
  while (n && isspace((unsigned char)t[n - 1])) t[--n] = 0;
  return t;
}

int vr_settings_load_file(vr_settings_t *s, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "verl-reward-server: cannot read config %s: %s\n", path, strerror(errno));
    return VR_ERR_IO;
  }
  char line[4096];
  int lineno = 0, rc = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    if (!strchr(line, '\n') && !feof(f)) {
      fprintf(stderr, "verl-reward-server: %s:%d: line too long\n", path, lineno);
      rc = VR_ERR_INVAL;
      break;
    }
    char *t = trim(line);
    if (!*t || *t == '#' || strcmp(t, "---") == 0) continue;
    /* key: value | key = value; the first ':' or '=' separates */
    char *sep = t + strcspn(t, ":=");
    if (!*sep) {
      fprintf(stderr, "verl-reward-server: %s:%d: expected 'key: value', got '%s'\n", path, lineno, t);
      rc = VR_ERR_INVAL;
      break;
    }
    *sep = 0;
    char *key = trim(t), *val = trim(sep + 1);
    /* a trailing " # comment" outside quotes is dropped */
    if (*val != '"' && *val != '\'') {
      char *hash = strstr(val, " #");
      if (hash) *hash = 0;
      val = trim(val);
    } else {
      char q = *val;
      char *end = strrchr(val + 1, q);
      if (!end) {
        fprintf(stderr, "verl-reward-server: %s:%d: unterminated quote\n", path, lineno);
        rc = VR_ERR_INVAL;
        break;
      }
      *end = 0;
      val++;
    }
    if (name_eq(key, "config")) {
      fprintf(stderr, "verl-reward-server: %s:%d: 'config' cannot be nested\n", path, lineno);
      rc = VR_ERR_INVAL;
      break;
    }
    char err[256];
    if (vr_settings_set(s, key, val, err, sizeof err) != 0) {
      fprintf(stderr, "verl-reward-server: %s:%d: %s\n", path, lineno, err);
      rc = VR_ERR_INVAL;
      break;
    }
  }
  fclose(f);
  if (rc == 0) snprintf(s->config, sizeof s->config, "%s", path);
  return rc;
}

void vr_settings_usage(FILE *f, const char *prog) {
  vr_settings_t d;
  vr_settings_init(&d);
  fprintf(f,
          "usage: %s [--model DIR|checksum] [--shm-name NAME] [--port N] [options]\n"
          "Serves reward-model scores over shared memory and HTTP.\n\n",
          prog);
  for (size_t i = 0; i < N_OPTS; i++) {
    const opt_t *o = &k_opts[i];
    char flag[96], def[64];
    snprintf(flag, sizeof flag, "--%s %s", o->name, o->arg);
    opt_default_text(o, &d, def, sizeof def);
    fprintf(f, "  %-36s %s (default: %s)\n", flag, o->help, def);
    if (o->alias) {
      snprintf(flag, sizeof flag, "--%s %s", o->alias, o->arg);
      fprintf(f, "  %-36s alias of --%s\n", flag, o->name);
    }
  }
  for (size_t i = 0; vr_cuda_option_at(i); i++) {
    const vr_cuda_option_info_t *c = vr_cuda_option_at(i);
    char flag[96], def[64];
    snprintf(flag, sizeof flag, "--%s %s", c->name, c->values);
    vr_cuda_options_get(&d.cuda, c->name, def, sizeof def);
    fprintf(f, "  %-36s %s (default: %s)\n", flag, c->help, def);
  }
  fprintf(f, "  %-36s this text\n", "--help");
  fprintf(f, "  %-36s version, git commit, build type, CUDA/cuBLAS versions\n\n", "--version");
  fprintf(f,
          "Flags take '--flag value' or '--flag=value'. The --config file holds 'key: value' or\n"
          "'key = value' lines with the same keys ('#' comments); flags override the file.\n"
          "Every value is checked before anything loads. Exit status: 0 after a clean stop (or --help,\n"
          "--version), 1 when start-up or serving failed (model load, segment, port), 2 for a bad flag,\n"
          "value or config line.\n");
}

/* A flag of the table or a --cuda-* option (model/'s table). */
static int known_flag(const char *key) {
  vr_cuda_options_t c;
  char buf[32];
  memset(&c, 0, sizeof c);
  return find_opt(key) != NULL || vr_cuda_options_get(&c, key, buf, sizeof buf) == 0;
}

/* Splits "--key=value" / "--key value"; returns the index of the next arg, or -1 when the value
 * is missing (end of argv, or the next argument is itself a flag: a value that starts with "--"
 * is given as --key=value). */
static int next_flag(int argc, char **argv, int i, char *key, size_t keylen, const char **val) {
  const char *name = argv[i] + 2;
  const char *eq = strchr(name, '=');
  size_t n = eq ? (size_t)(eq - name) : strlen(name);
  if (n >= keylen) n = keylen - 1;
  memcpy(key, name, n);
  key[n] = 0;
  if (eq) {
    *val = eq + 1;
    return i + 1;
  }
  if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0) return -1;
  *val = argv[i + 1];
  return i + 2;
}

#define PROG "verl-reward-server"

int vr_settings_check(const vr_settings_t *s, char *err, size_t errlen) {
  vr_reward_spec_t spec;
  char why[256];
  const char *rs = s->reward[0] ? s->reward : "model";
  if (vr_reward_spec_parse(rs, &spec, why, sizeof why) != 0) { /* set() checked it; a default cannot fail */
    snprintf(err, errlen, "--reward '%s': %s", rs, why);
    return VR_ERR_INVAL;
  }
  const int wants_model = spec.model_index >= 0;
  if (wants_model && !s->model[0]) {
    snprintf(err, errlen, "--reward '%s' needs a model. HINT: pass --model DIR (or --model checksum), or a "
             "rules-only --reward such as gsm8k", rs);
    return VR_ERR_INVAL;
  }
  if (wants_model && strcmp(s->model, "checksum") == 0) {
    if (strncmp(s->device, "cuda", 4) == 0) {
      snprintf(err, errlen, "--model checksum runs on the cpu, but --device %s asks for a GPU. HINT: drop --device "
               "(or --device cpu), or --model DIR to score with a model on the GPU", s->device);
      return VR_ERR_INVAL;
    }
  } else if (wants_model && vr_model_dir_check(s->model, err, errlen) != 0) {
    return VR_ERR_INVAL;
  }
  char first[16] = ""; /* every entry of a device list has the same backend (vr_settings_devices) */
  snprintf(first, sizeof first, "%.*s", (int)strcspn(s->device, ","), s->device);
  if (wants_model && strcmp(s->model, "checksum") != 0 &&
      vr_model_device_dtype_check(first, s->dtype, err, errlen) != 0)
    return VR_ERR_INVAL;
  if (s->pid_file[0]) { /* written once ready: its folder must exist now, not after the model loaded */
    char dir[VR_SETTINGS_STR];
    snprintf(dir, sizeof dir, "%s", s->pid_file);
    char *slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = 0;
    else snprintf(dir, sizeof dir, ".");
    if (access(dir, W_OK) != 0) {
      snprintf(err, errlen, "--pid-file '%s': cannot write in %s (%s)", s->pid_file, dir, strerror(errno));
      return VR_ERR_INVAL;
    }
  }
  if (s->ring_slots & (s->ring_slots - 1)) {
    snprintf(err, errlen, "--ring-slots %u is not a power of two. HINT: 16, 32, 64, ...", s->ring_slots);
    return VR_ERR_INVAL;
  }
  return 0;
}

int vr_settings_parse(vr_settings_t *s, int argc, char **argv) {
  /* pass 1: --help, --version, then every argument's shape (unknown flag, missing value), --config */
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      vr_settings_usage(stdout, PROG);
      return 1;
    }
    if (strcmp(argv[i], "--version") == 0) {
      char rt[128];
      vr_cli_version(stdout, PROG, vr_model_runtime_versions(rt, sizeof rt));
      return 1;
    }
  }
  for (int i = 1; i < argc;) {
    if (strncmp(argv[i], "--", 2) != 0) {
      vr_cli_usage_error(PROG, "unexpected argument '%s' (flags are --name value)", argv[i]);
      return VR_ERR_INVAL;
    }
    char key[128];
    const char *val = NULL;
    int next = next_flag(argc, argv, i, key, sizeof key, &val);
    if (!known_flag(key)) {
      vr_cli_usage_error(PROG, "unknown option --%s", key);
      return VR_ERR_INVAL;
    }
    if (next < 0) {
      vr_cli_usage_error(PROG, "--%s needs a value", key);
      return VR_ERR_INVAL;
    }
    if (name_eq(key, "config")) {
      int rc = vr_settings_load_file(s, val);
      if (rc != 0) return VR_ERR_INVAL;
    }
    i = next;
  }
  /* pass 2: flags override the file */
  for (int i = 1; i < argc;) {
    char key[128], err[512];
    const char *val = NULL;
    int next = next_flag(argc, argv, i, key, sizeof key, &val);
    if (!name_eq(key, "config") && vr_settings_set(s, key, val, err, sizeof err) != 0) {
      vr_cli_usage_error(PROG, "%s", err);
      return VR_ERR_INVAL;
    }
    i = next;
  }
  char err[512];
  if (vr_settings_check(s, err, sizeof err) != 0) {
    vr_cli_usage_error(PROG, "%s", err);
    return VR_ERR_INVAL;
  }
  return 0;
}
