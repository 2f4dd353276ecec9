/* vr_model_options.c: the model options' defaults and the CUDA tuning's text form (vr_model.h).
 *
 * One table names every CUDA option, its values and its help line; the front ends (server
 * flags and config file, verl-reward-score, the bench runner) parse through it, so a flag has
 * one spelling and one set of values everywhere. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "verl_reward/status.h"
#include "cpu/vr_cpu_gemm.h"
#include "vr_config.h"
#include "vr_model.h"

void vr_model_options_init(vr_model_options_t *opt) {
  memset(opt, 0, sizeof *opt);
  opt->device = "cpu";
  opt->cuda.graphs = 1;
  opt->cuda.warmup = 1;
  opt->cuda.exact_size = 1;
  opt->cuda.autotune = VR_CUDA_AUTOTUNE_OFF;
  opt->cuda.residual = VR_CUDA_RESIDUAL_AUTO;
  opt->cuda.pdl = 0; /* measured no gain (docs/benchmarks.md, "Small batches") */
  opt->cuda.split_attn = 0; /* slower than FA64 where measured (docs/benchmarks.md, "Small batches") */
}

/* Table order = k_cuda_opts order. */
typedef enum cuda_opt_id { OPT_GRAPHS, OPT_WARMUP, OPT_EXACT_SIZE, OPT_AUTOTUNE, OPT_RESIDUAL, OPT_PDL, OPT_SPLIT_ATTN,
                                 N_CUDA_OPTS } cuda_opt_id_t;

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
    [OPT_PDL] = {{"cuda-pdl", "on|off",
                  "cuda: programmatic dependent launch for the backend's own kernels (each may start while the previous drains)"},
                 k_onoff, 2},
    [OPT_SPLIT_ATTN] = {{"cuda-split-attn", "on|off",
                         "cuda: batches of <= 512 rows split attention over key ranges (off: one block per 64-row query tile)"},
                        k_onoff, 2},
};

static int get_val(const vr_cuda_options_t *o, cuda_opt_id_t id) {
  switch (id) {
    case OPT_GRAPHS: return o->graphs;
    case OPT_WARMUP: return o->warmup;
    case OPT_EXACT_SIZE: return o->exact_size;
    case OPT_AUTOTUNE: return (int)o->autotune;
    case OPT_PDL: return o->pdl;
    case OPT_SPLIT_ATTN: return o->split_attn;
    default: return (int)o->residual;
  }
}

static void set_val(vr_cuda_options_t *o, cuda_opt_id_t id, int v) {
  switch (id) {
    case OPT_GRAPHS: o->graphs = v; break;
    case OPT_WARMUP: o->warmup = v; break;
    case OPT_EXACT_SIZE: o->exact_size = v; break;
    case OPT_AUTOTUNE: o->autotune = (vr_cuda_autotune_t)v; break;
    case OPT_PDL: o->pdl = v; break;
    case OPT_SPLIT_ATTN: o->split_attn = v; break;
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

/* ---- command-line values (vr_model.h) ---------------------------------------------------- */

int vr_model_device_parse(const char *text, char *out, size_t n, char *err, size_t errlen) {
  const char *t = text ? text : "";
  int has_cuda = strstr(vr_model_backends(), "cuda") != NULL;
  if (strcmp(t, "cpu") == 0) {
    snprintf(out, n, "cpu");
    return 0;
  }
  if (strncmp(t, "cuda", 4) == 0 && (t[4] == 0 || t[4] == ':')) {
    if (t[4] == ':') {
      char *end = NULL;
      errno = 0;
      long v = isdigit((unsigned char)t[5]) ? strtol(t + 5, &end, 10) : -1;
      if (v < 0 || v > 1023 || errno || !end || *end) {
        snprintf(err, errlen, "--device '%s': the device number must be 0..1023 (cuda:0, cuda:1, ...)", t);
        return VR_ERR_INVAL;
      }
    }
    if (!has_cuda) {
      snprintf(err, errlen, "--device '%s': this build has no CUDA backend (backends: %s). HINT: --device cpu, or "
               "build with nvcc and -DVR_CUDA=ON", t, vr_model_backends());
      return VR_ERR_UNSUPPORTED;
    }
    snprintf(out, n, "%s", t);
    return 0;
  }
  const char *hint = strcmp(t, "gpu") == 0 || strncmp(t, "gpu:", 4) == 0 ? "cuda or cuda:N (the GPU's index)"
                                                                         : "cpu, cuda or cuda:N";
  snprintf(err, errlen, "--device '%s' is not a device. HINT: --device %s", t, hint);
  return VR_ERR_INVAL;
}

int vr_model_dtype_parse(const char *text, char *out, size_t n, char *err, size_t errlen) {
  static const struct { const char *spelling, *canon; } k_dtypes[] = {
      {"auto", "auto"}, {"f32", "f32"}, {"float32", "f32"}, {"fp32", "f32"}, {"float", "f32"},
      {"bf16", "bf16"}, {"bfloat16", "bf16"}};
  const char *t = text ? text : "";
  const char *name = strncmp(t, "torch.", 6) == 0 ? t + 6 : t; /* torch.bfloat16 as in config.json */
  for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++) {
    if (strcmp(name, k_dtypes[i].spelling) == 0) {
      snprintf(out, n, "%s", k_dtypes[i].canon);
      return 0;
    }
  }
  if (!strcmp(name, "f16") || !strcmp(name, "fp16") || !strcmp(name, "float16") || !strcmp(name, "half")) {
    snprintf(err, errlen, "--dtype '%s': no backend computes in f16 (f16 weights are read and converted). "
             "HINT: --dtype bf16 on cuda, f32 on cpu, or auto", t);
    return VR_ERR_UNSUPPORTED;
  }
  snprintf(err, errlen, "--dtype '%s' is not a compute dtype. HINT: --dtype auto, f32 (float32) or bf16 (bfloat16)", t);
  return VR_ERR_INVAL;
}

int vr_model_device_dtype_check(const char *device, const char *dtype, char *err, size_t errlen) {
  const char *d = device ? device : "", *t = dtype ? dtype : "auto";
  if (!strcmp(d, "cpu") && !strcmp(t, "bf16")) {
    snprintf(err, errlen, "--dtype bf16 with --device cpu: the cpu backend computes in f32 only. HINT: --dtype auto "
             "(or f32), or --device cuda");
    return VR_ERR_UNSUPPORTED;
  }
  if (!strncmp(d, "cuda", 4) && !strcmp(t, "f32")) {
    snprintf(err, errlen, "--dtype f32 with --device %s: the cuda backend computes in bf16 only. HINT: --dtype auto "
             "(or bf16), or --device cpu for f32", d);
    return VR_ERR_UNSUPPORTED;
  }
  return 0;
}

int vr_model_cpu_gemm_parse(const char *text, char *err, size_t errlen) {
  const char *t = text ? text : "";
  vr_cpu_gemm_variant_t v;
  if (text && vr_cpu_gemm_parse(text, &v) == 0) return 0;
  snprintf(err, errlen, "--cpu-gemm '%s' is not a GEMM variant. HINT: --cpu-gemm auto, generic or avx2+fma", t);
  return VR_ERR_INVAL;
}

int vr_model_dir_check(const char *dir, char *err, size_t errlen) {
  struct stat sb;
  const int st = stat(dir, &sb);
  if (st != 0 || !S_ISDIR(sb.st_mode)) {
    snprintf(err, errlen, "--model '%s': %s. HINT: --model takes a Hugging Face model directory "
             "(config.json + *.safetensors)", dir, st != 0 ? strerror(errno) : "not a directory");
    return VR_ERR_NOT_FOUND;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/config.json", dir);
  if (access(path, R_OK) != 0) {
    snprintf(err, errlen, "--model '%s' has no readable config.json (%s). HINT: --model takes a Hugging Face "
             "model directory, as save_pretrained() writes it", dir, strerror(errno));
    return VR_ERR_NOT_FOUND;
  }
  return 0;
}

const char *vr_model_load_hint(int rc) {
  switch (rc) {
    case VR_ERR_NOT_FOUND:
      return "--model takes a Hugging Face directory (config.json + model.safetensors or "
             "model.safetensors.index.json), 'checksum', or omit it with a rules-only --reward";
    case VR_ERR_UNSUPPORTED:
      return "verl-reward serves sequence-classification reward models with one output (num_labels = 1) of: "
             VR_SUPPORTED_ARCHS;
    case VR_ERR_MODEL_FORMAT:
      return "the file named above is damaged or does not match config.json; re-save the model with "
             "save_pretrained(safe_serialization=True)";
    case VR_ERR_NO_DEVICE: return "--device cpu, or check the driver, nvidia-smi and CUDA_VISIBLE_DEVICES";
    case VR_ERR_DEVICE: return "check nvidia-smi (memory in use by other processes, Xid errors), or --device cpu";
    case VR_ERR_NOMEM: return "a smaller --max-batch-tokens, another device, or more memory";
    case VR_ERR_IO: case VR_ERR_PERM: return "check that the model files are readable by this user";
    default: return "the line before this one names the file, tensor or field";
  }
}
