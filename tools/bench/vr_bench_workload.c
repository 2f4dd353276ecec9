/* vr_bench_workload.c: length distributions, token generation, JSONL corpus. */
#include "vr_bench_workload.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_jsonl.h"
#include "vr_line.h"
#include "vr_log.h"

#define VR_WORKLOAD_MAX_LINE (64u << 20) /* bytes of one corpus line kept in memory */

static int parse_u32(const char *s, char **end, uint32_t *out) {
  if (*s < '0' || *s > '9') return -1;
  errno = 0;
  unsigned long long v = strtoull(s, end, 10);
  if (errno || v == 0 || v > UINT32_MAX) return -1;
  *out = (uint32_t)v;
  return 0;
}

int vr_len_dist_parse(const char *s, vr_len_dist_t *out) {
  memset(out, 0, sizeof(*out));
  char *end = NULL;
  if (strncmp(s, "fixed:", 6) == 0) {
    out->kind = VR_LEN_FIXED;
    if (parse_u32(s + 6, &end, &out->a) == 0 && *end == '\0') {
      out->b = out->a;
      return 0;
    }
  } else if (strncmp(s, "uniform:", 8) == 0) {
    out->kind = VR_LEN_UNIFORM;
    if (parse_u32(s + 8, &end, &out->a) == 0 && *end == '-' &&
        parse_u32(end + 1, &end, &out->b) == 0 && *end == '\0' && out->a <= out->b)
      return 0;
  } else if (strncmp(s, "lognormal:", 10) == 0) {
    out->kind = VR_LEN_LOGNORMAL;
    errno = 0;
    out->mean = strtod(s + 10, &end);
    if (!errno && end != s + 10 && *end == ',' && out->mean >= 1.0 && isfinite(out->mean)) {
      const char *p = end + 1;
      out->sigma = strtod(p, &end);
      if (!errno && end != p && *end == '\0' && out->sigma >= 0.0 && out->sigma <= 10.0) return 0;
    }
  }
  vr_log(VR_LOG_ERROR, "bad length distribution '%s' (want fixed:L, uniform:A-B with 1 <= A <= B, "
         "or lognormal:MEAN,SIGMA with MEAN >= 1, 0 <= SIGMA <= 10)", s);
  return VR_ERR_PARSE;
}

void vr_len_dist_format(const vr_len_dist_t *d, char *buf, size_t n) {
  switch (d->kind) {
  case VR_LEN_FIXED: snprintf(buf, n, "fixed:%u", d->a); break;
  case VR_LEN_UNIFORM: snprintf(buf, n, "uniform:%u-%u", d->a, d->b); break;
  case VR_LEN_LOGNORMAL: snprintf(buf, n, "lognormal:%g,%g", d->mean, d->sigma); break;
  }
}

/* xorshift64* ; state never 0 */
static uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

double vr_rng_uniform(uint64_t *state) { return (double)(rng_next(state) >> 11) * 0x1.0p-53; }

double vr_rng_exp(uint64_t *state) { return -log1p(-vr_rng_uniform(state)); }

static double rng_normal(uint64_t *s) {
  double u1 = vr_rng_uniform(s), u2 = vr_rng_uniform(s);
  return sqrt(-2.0 * log1p(-u1)) * cos(2.0 * M_PI * u2);
}

void vr_reqbuf_init(vr_reqbuf_t *r, uint64_t seed) {
  memset(r, 0, sizeof(*r));
  /* splitmix64 of the seed: distinct, non-zero states for nearby seeds */
  uint64_t z = seed + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  r->rng = z ? z : 1;
  r->corpus_pos = seed;
}

void vr_reqbuf_free(vr_reqbuf_t *r) {
  free(r->ids);
  free(r->cu);
  memset(r, 0, sizeof(*r));
}

static int reserve(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : 64;
  while (n < need) n *= 2;
  void *q = realloc(*p, n * elem);
  if (!q) return VR_ERR_NOMEM;
  *p = q;
  *cap = n;
  return 0;
}

static uint32_t draw_len(const vr_workload_t *w, uint64_t *rng) {
  double l = 1.0;
  switch (w->len.kind) {
  case VR_LEN_FIXED: l = w->len.a; break;
  case VR_LEN_UNIFORM:
    l = w->len.a + (double)(rng_next(rng) % ((uint64_t)w->len.b - w->len.a + 1u));
    break;
  case VR_LEN_LOGNORMAL: {
    double mu = log(w->len.mean) - 0.5 * w->len.sigma * w->len.sigma;
    l = floor(exp(mu + w->len.sigma * rng_normal(rng)) + 0.5);
    break;
  }
  }
  if (!(l >= 1.0)) l = 1.0;
  if (w->max_seq_len && l > w->max_seq_len) l = w->max_seq_len;
  if (l > UINT32_MAX) l = UINT32_MAX;
  return (uint32_t)l;
}

int vr_workload_next(const vr_workload_t *w, vr_reqbuf_t *r) {
  uint32_t k = w->batch ? w->batch : 1;
  if (reserve((void **)&r->cu, &r->cu_cap, (size_t)k + 1u, sizeof(uint32_t))) return VR_ERR_NOMEM;
  r->n_seqs = k;
  r->n_tokens = 0;
  r->cu[0] = 0;
  for (uint32_t i = 0; i < k; i++) {
    const int32_t *src = NULL;
    uint32_t len;
    if (w->corpus_n) {
      uint64_t s = r->corpus_pos++ % w->corpus_n;
      src = w->corpus_ids + w->corpus_off[s];
      len = (uint32_t)(w->corpus_off[s + 1] - w->corpus_off[s]);
    } else {
      len = draw_len(w, &r->rng);
    }
    if (r->n_tokens + len > UINT32_MAX) return VR_ERR_NOMEM;
    if (reserve((void **)&r->ids, &r->ids_cap, r->n_tokens + len, sizeof(int32_t))) return VR_ERR_NOMEM;
    int32_t *dst = r->ids + r->n_tokens;
    if (src) {
      memcpy(dst, src, (size_t)len * sizeof(int32_t));
    } else {
      uint32_t v = w->vocab ? w->vocab : 1;
      for (uint32_t j = 0; j < len; j++) dst[j] = (int32_t)(rng_next(&r->rng) % v);
    }
    r->n_tokens += len;
    r->cu[i + 1] = (uint32_t)r->n_tokens;
  }
  return 0;
}

/* ---- JSONL corpus ---------------------------------------------------------- */

typedef struct corpus_acc {
  int32_t *ids;
  size_t n_ids, ids_cap;
  uint64_t *off;
  size_t n_seqs, off_cap;
} corpus_acc_t;

/* Appends one sequence from a JSON array; returns 0 or a status (logged). */
static int add_seq(corpus_acc_t *a, const cJSON *arr, const vr_workload_t *w, const char *path,
                   size_t line) {
  int n = cJSON_GetArraySize(arr);
  if (n <= 0) {
    vr_log(VR_LOG_ERROR, "%s:%zu: empty sequence", path, line);
    return VR_ERR_PARSE;
  }
  if (w->max_seq_len && (uint32_t)n > w->max_seq_len) {
    vr_log(VR_LOG_ERROR, "%s:%zu: sequence of %d tokens exceeds the server's max_seq_len %u", path,
           line, n, w->max_seq_len);
    return VR_ERR_SEQ_TOO_LONG;
  }
  if (reserve((void **)&a->ids, &a->ids_cap, a->n_ids + (size_t)n, sizeof(int32_t)) ||
      reserve((void **)&a->off, &a->off_cap, a->n_seqs + 2u, sizeof(uint64_t)))
    return VR_ERR_NOMEM;
  int j = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, arr) {
    double d = cJSON_IsNumber(it) ? it->valuedouble : -1.0;
    if (!cJSON_IsNumber(it) || d != floor(d) || d < 0 || d > INT32_MAX) {
      vr_log(VR_LOG_ERROR, "%s:%zu: token %d is not a non-negative 32-bit integer", path, line, j);
      return VR_ERR_PARSE;
    }
    if (w->vocab && d >= w->vocab) {
      vr_log(VR_LOG_ERROR, "%s:%zu: token %d = %.0f outside the server's vocabulary (%u)", path,
             line, j, d, w->vocab);
      return VR_ERR_TOKEN_RANGE;
    }
    a->ids[a->n_ids + (size_t)j++] = (int32_t)d;
  }
  if (a->n_seqs == 0) a->off[0] = 0;
  a->n_ids += (size_t)n;
  a->off[++a->n_seqs] = a->n_ids;
  return 0;
}

int vr_workload_load_jsonl(vr_workload_t *w, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    vr_log(VR_LOG_ERROR, "cannot open %s: %s", path, strerror(errno));
    return VR_ERR_IO;
  }
  corpus_acc_t a = {0};
  char *line = NULL;
  size_t cap = 0, lineno = 0, len = 0;
  int rc = 0, r;
  while (rc == 0 && (r = vr_line_read(f, VR_WORKLOAD_MAX_LINE, &line, &cap, &len)) != VR_LINE_EOF) {
    lineno++;
    if (r != 0) {
      if (r == VR_LINE_NOMEM) vr_log(VR_LOG_ERROR, "%s:%zu: out of memory", path, lineno);
      else vr_log(VR_LOG_ERROR, "%s:%zu: line of %zu bytes is longer than %u", path, lineno, len, VR_WORKLOAD_MAX_LINE);
      rc = r == VR_LINE_NOMEM ? VR_ERR_NOMEM : VR_ERR_PARSE;
      break;
    }
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\n' || line[i] == '\r')) i++;
    if (i == len) continue;
    const char *why = NULL;
    size_t at = 0;
    cJSON *j = vr_jsonl_parse(line, len, &why, &at);
    if (!j) {
      vr_log(VR_LOG_ERROR, "%s:%zu: not valid JSON (%s at byte %zu; one JSON value per line)", path, lineno, why, at + 1);
      rc = VR_ERR_PARSE;
      break;
    }
    if (vr_jsonl_dup(j, "input_ids")) {
      vr_log(VR_LOG_ERROR, "%s:%zu: \"input_ids\" appears more than once", path, lineno);
      cJSON_Delete(j);
      rc = VR_ERR_PARSE;
      break;
    }
    const cJSON *ids = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "input_ids") : j;
    if (!cJSON_IsArray(ids)) {
      vr_log(VR_LOG_ERROR, "%s:%zu: want an array of token ids or an object with \"input_ids\"", path, lineno);
      rc = VR_ERR_PARSE;
    } else if (cJSON_GetArraySize(ids) > 0 && cJSON_IsArray(cJSON_GetArrayItem(ids, 0))) {
      const cJSON *s;
      cJSON_ArrayForEach(s, ids) {
        if (!cJSON_IsArray(s)) {
          vr_log(VR_LOG_ERROR, "%s:%zu: \"input_ids\" mixes arrays and numbers", path, lineno);
          rc = VR_ERR_PARSE;
          break;
        }
        if ((rc = add_seq(&a, s, w, path, lineno)) != 0) break;
      }
    } else {
      rc = add_seq(&a, ids, w, path, lineno);
    }
    cJSON_Delete(j);
  }
  free(line);
  fclose(f);
  if (rc == 0 && a.n_seqs == 0) {
    vr_log(VR_LOG_ERROR, "%s: no sequences", path);
    rc = VR_ERR_PARSE;
  }
  if (rc != 0) {
    free(a.ids);
    free(a.off);
    return rc;
  }
  w->corpus_ids = a.ids;
  w->corpus_off = a.off;
  w->corpus_n = a.n_seqs;
  return 0;
}

void vr_workload_free(vr_workload_t *w) {
  free(w->corpus_ids);
  free(w->corpus_off);
  w->corpus_ids = NULL;
  w->corpus_off = NULL;
  w->corpus_n = 0;
}
