/* vr_model_options.c: the model options' defaults and the CUDA tuning's text form (vr_model.h).
 *
 * One table names every CUDA option, its values and its help line; the front ends (server
 * flags and config file, verl-reward-score, the bench runner) parse through it, so a flag has
 * one spelling and one set of values everywhere. */
#include <stdio.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_model.h"

void vr_model_options_init(vr_model_options_t *opt) {
  memset(opt, 0, sizeof *opt);
  opt->device = "cpu";
  opt->cuda.graphs = 1;
  opt->cuda.warmup = 1;
  opt->cuda.exact_size = 1;
  opt->cuda.autotune = VR_CUDA_AUTOTUNE_OFF;
  opt->cuda.residual = VR_CUDA_RESIDUAL_AUTO;
}

/* Table order = k_cuda_opts order. */
typedef enum cuda_opt_id { OPT_GRAPHS, OPT_WARMUP, OPT_EXACT_SIZE, OPT_AUTOTUNE, OPT_RESIDUAL, N_CUDA_OPTS } cuda_opt_id_t;

static const char *const k_onoff[] = {"off", "on"};
static const char *const k_autotune[] = {"off", "small", "all"}; /* index = vr_cuda_autotune_t */
static const char *const k_residual[] = {"auto", "f32", "bf16"}; /* index = vr_cuda_residual_t */

static const struct cuda_opt {
  vr_cuda_option_info_t info;
  const char *const *values; /* value text by the field's value */
  int n_values;
} k_cuda_opts[N_CUDA_OPTS] = {
    [OPT_GRAPHS] = {{"cuda-graphs", "on|off",
                     "cuda: replay a CUDA graph per token bucket (off: every batch eager at its exact size, no warm-up)"},
                    k_onoff, 2},
    [OPT_WARMUP] = {{"cuda-warmup", "on|off", "cuda: run and capture every token bucket at load (off: on first use)"},
                    k_onoff, 2},
    [OPT_EXACT_SIZE] = {{"cuda-exact-size", "on|off",
                         "cuda: a batch smaller than a large bucket runs eagerly at its exact size (off: padded graph)"},
                        k_onoff, 2},
    [OPT_AUTOTUNE] = {{"cuda-autotune", "off|small|all",
                       "cuda: time cuBLASLt's candidate GEMM algorithms at warm-up, for buckets of <= 4096 rows (small) or all"},
                      k_autotune, 3},
    [OPT_RESIDUAL] = {{"cuda-residual", "auto|f32|bf16",
                       "cuda: encoders' residual stream dtype (auto: bf16 from hidden size 256, else f32; decoders: f32)"},
                      k_residual, 3},
};

static int get_val(const vr_cuda_options_t *o, cuda_opt_id_t id) {
  switch (id) {
    case OPT_GRAPHS: return o->graphs;
    case OPT_WARMUP: return o->warmup;
    case OPT_EXACT_SIZE: return o->exact_size;
    case OPT_AUTOTUNE: return (int)o->autotune;
    default: return (int)o->residual;
  }
}

static void set_val(vr_cuda_options_t *o, cuda_opt_id_t id, int v) {
  switch (id) {
    case OPT_GRAPHS: o->graphs = v; break;
    case OPT_WARMUP: o->warmup = v; break;
    case OPT_EXACT_SIZE: o->exact_size = v; break;
    case OPT_AUTOTUNE: o->autotune = (vr_cuda_autotune_t)v; break;
    default: o->residual = (vr_cuda_residual_t)v; break;
  }
}

/* "cuda_graphs" and "cuda-graphs" name the same option. */
static int name_eq(const char *a, const char *b) {
  for (; *a && *b; a++, b++) {
    const char ca = *a == '_' ? '-' : *a, cb = *b == '_' ? '-' : *b;
    if (ca != cb) return 0;
  }
  return *a == *b;
}

static int find(const char *name) {
  for (int i = 0; name && i < N_CUDA_OPTS; i++)
    if (name_eq(name, k_cuda_opts[i].info.name)) return i;
  return -1;
}

int vr_cuda_options_set(vr_cuda_options_t *o, const char *name, const char *value, char *err, size_t errlen) {
  const int i = find(name);
  if (i < 0) return VR_ERR_NOT_FOUND;
  const struct cuda_opt *c = &k_cuda_opts[i];
  for (int v = 0; value && v < c->n_values; v++) {
    if (strcmp(value, c->values[v]) == 0) {
      set_val(o, (cuda_opt_id_t)i, v);
      return 0;
    }
  }
  if (err && errlen) snprintf(err, errlen, "%s: '%s' is not %s", c->info.name, value ? value : "", c->info.values);
  return VR_ERR_INVAL;
}

int vr_cuda_options_get(const vr_cuda_options_t *o, const char *name, char *buf, size_t n) {
  const int i = find(name);
  if (i < 0) return VR_ERR_NOT_FOUND;
  const int v = get_val(o, (cuda_opt_id_t)i);
  snprintf(buf, n, "%s", v >= 0 && v < k_cuda_opts[i].n_values ? k_cuda_opts[i].values[v] : "?");
  return 0;
}

int vr_cuda_options_check(const vr_cuda_options_t *o, char *err, size_t errlen) {
  for (int i = 0; i < N_CUDA_OPTS; i++) {
    const int v = get_val(o, (cuda_opt_id_t)i);
    if (v < 0 || v >= k_cuda_opts[i].n_values) {
      if (err && errlen) snprintf(err, errlen, "%s: value %d is not %s", k_cuda_opts[i].info.name, v, k_cuda_opts[i].info.values);
      return VR_ERR_INVAL;
    }
  }
  return 0;
}

void vr_cuda_options_format(const vr_cuda_options_t *o, char *buf, size_t n) {
  size_t len = 0;
  if (n) buf[0] = 0;
  for (int i = 0; i < N_CUDA_OPTS && len < n; i++) {
    char v[16];
    vr_cuda_options_get(o, k_cuda_opts[i].info.name, v, sizeof v);
    const int w = snprintf(buf + len, n - len, "%s%s=%s", i ? " " : "", k_cuda_opts[i].info.name, v);
    if (w < 0) break;
    len += (size_t)w;
  }
}

const vr_cuda_option_info_t *vr_cuda_option_at(size_t i) { return i < N_CUDA_OPTS ? &k_cuda_opts[i].info : NULL; }
