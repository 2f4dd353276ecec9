/* vr_scorer.c: model / checksum / rules-only scoring and component mixing. */
#define _GNU_SOURCE
#include "vr_scorer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <sched.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "verl_reward/status.h"
#include "vr_checksum.h"
#include "vr_log.h"
#include "vr_model.h"
#include "vr_time.h"
#include "vr_tokenizer.h"

/* Bytes of the model directory's weight files as Hugging Face names them: model.safetensors, or
 * the shards model-00001-of-00004.safetensors ... (0 when none is readable). */
static uint64_t weight_file_bytes(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  uint64_t sum = 0;
  for (struct dirent *e; (e = readdir(d));) {
    size_t n = strlen(e->d_name);
    struct stat sb;
    char path[4352];
    if (n < 12 || strcmp(e->d_name + n - 12, ".safetensors") != 0) continue;
    if (strcmp(e->d_name, "model.safetensors") != 0 && !(strncmp(e->d_name, "model-", 6) == 0 &&
                                                         strstr(e->d_name, "-of-")))
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) sum += (uint64_t)sb.st_size;
  }
  closedir(d);
  return sum;
}

/* A cuda replica's memory, checked before its load: the first against the weight files (on the
 * GPU in bf16: at least half the bytes of f32 files, at most the files' bytes), the others
 * against what the first one took (mi->device_bytes: weights + workspace). VR_ERR_NOMEM after an
 * ERROR naming the device, the bytes needed and the bytes free. */
static int check_cuda_memory(const char *model, const char *device, uint32_t r, uint64_t need_exact) {
  int index = strchr(device, ':') ? atoi(strchr(device, ':') + 1) : 0;
  uint64_t fr = 0, tot = 0;
  if (vr_model_cuda_memory(index, &fr, &tot) != 0) return 0; /* the load names a missing device */
  const double gib = 1024.0 * 1024.0 * 1024.0;
  if (need_exact) {
    if (need_exact <= fr) return 0;
    vr_log(VR_LOG_ERROR, "replica %u on %s: the model needs %.2f GiB of device memory (what replica 0 took: "
           "weights + workspace) and %s has %.2f of %.2f GiB free. HINT: fewer replicas on that GPU, a smaller "
           "--max-batch-tokens (smaller workspace), or another GPU", r, device, need_exact / gib, device, fr / gib,
           tot / gib);
    return VR_ERR_NOMEM;
  }
  const uint64_t files = weight_file_bytes(model);
  if (files / 2 <= tot) return 0; /* may fit: the load itself tells when it does not */
  vr_log(VR_LOG_ERROR, "model %s is too large for one GPU: its weight files hold %.2f GiB, so at least %.2f GiB "
         "on the GPU in bf16 (plus workspace), and %s has %.2f GiB in all (%.2f free). HINT: a GPU with more memory; "
         "spreading one model over several GPUs (tensor parallelism) is not supported yet: --device with several "
         "GPUs runs one whole replica on each", model, files / gib, files / 2 / gib, device, tot / gib, fr / gib);
  return VR_ERR_NOMEM;
}

static int load_model(vr_scorer_t *sc, const vr_settings_t *st) {
  vr_model_options_t mo;
  vr_model_options_init(&mo);
  mo.n_threads = st->threads;
  mo.cpu_gemm = st->cpu_gemm;
  mo.max_batch_tokens = st->max_batch_tokens;
  mo.dtype = st->dtype;
  mo.cuda = st->cuda;
  int rc = 0;
  char why[160];
  if (sc->n_replicas == 1 && !sc->devices[0][0]) { /* auto: the first visible GPU, else the cpu */
    if (vr_model_cuda_devices(why, sizeof why) > 0) {
      snprintf(sc->devices[0], sizeof sc->devices[0], "cuda");
    } else {
      snprintf(sc->devices[0], sizeof sc->devices[0], "cpu");
      if (strstr(vr_model_backends(), "cuda"))
        vr_log(VR_LOG_WARN, "no usable CUDA device (%s): running on the cpu. HINT: --device cpu says so, "
               "--device cuda makes it an error", why);
      if (strcmp(st->dtype, "bf16") == 0) {
        vr_log(VR_LOG_WARN, "--dtype bf16 is the cuda backend's; the cpu computes in f32");
        mo.dtype = "auto";
      }
    }
  }
  const int on_cuda = strncmp(sc->devices[0], "cuda", 4) == 0;
  if (!on_cuda && sc->n_replicas > 1 && st->threads == 0) { /* all cores, shared out: no oversubscription */
    cpu_set_t set;
    int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    mo.n_threads = cores / (int)sc->n_replicas > 1 ? cores / (int)sc->n_replicas : 1;
    vr_log(VR_LOG_INFO, "%u cpu replicas on %d cores: %d threads each (--threads sets it)", sc->n_replicas, cores,
           mo.n_threads);
  }
  if (on_cuda && sc->n_replicas > 1) { /* every entry names a GPU this machine has, before any load */
    int ndev = vr_model_cuda_devices(why, sizeof why);
    for (uint32_t r = 0; r < sc->n_replicas; r++) {
      int index = atoi(strchr(sc->devices[r], ':') + 1); /* a list holds cuda:N entries only */
      if (index >= ndev) {
        vr_log(VR_LOG_ERROR, "--device %s: entry %u '%s' is not a GPU of this machine (%d visible%s%s). HINT: "
               "CUDA_VISIBLE_DEVICES renumbers devices from 0", st->device, r + 1, sc->devices[r], ndev,
               ndev ? "" : ": ", ndev ? "" : why);
        return VR_ERR_NO_DEVICE;
      }
    }
  }
  for (uint32_t r = 0; r < sc->n_replicas && rc == 0; r++) {
    mo.device = sc->devices[r];
    if (on_cuda) rc = check_cuda_memory(st->model, mo.device, r, r ? vr_model_info(sc->models[0])->device_bytes : 0);
    if (rc == 0 && sc->n_replicas > 1)
      vr_log(VR_LOG_INFO, "loading replica %u of %u on %s", r + 1, sc->n_replicas, mo.device);
    if (rc == 0) rc = vr_model_load(st->model, &mo, &sc->models[r]);
    if (rc != 0 && rc != VR_ERR_NOMEM)
      vr_log(VR_LOG_ERROR, "cannot load model %s on %s: %s. HINT: %s", st->model, mo.device, vr_strerror(rc),
             vr_model_load_hint(rc));
    else if (rc != 0)
      vr_log(VR_LOG_ERROR, "cannot load model %s on %s: %s", st->model, mo.device, vr_strerror(rc));
  }
  if (rc != 0) { /* all or none */
    for (uint32_t r = 0; r < sc->n_replicas; r++) {
      if (sc->models[r]) vr_model_free(sc->models[r]);
      sc->models[r] = NULL;
    }
    return rc;
  }
  const vr_model_info_t *mi = vr_model_info(sc->models[0]);
  for (uint32_t r = 0; r < sc->n_replicas; r++) /* "cuda" as loaded: cuda:0 */
    snprintf(sc->devices[r], sizeof sc->devices[r], "%s", vr_model_info(sc->models[r])->device);
  sc->vocab_size = mi->vocab_size > 0 ? (uint32_t)mi->vocab_size : 0;
  if (mi->max_positions > 0 && (uint32_t)mi->max_positions < sc->max_seq_len) {
    vr_log(VR_LOG_INFO, "max-seq-len %u capped to the model's %d positions", sc->max_seq_len, mi->max_positions);
    sc->max_seq_len = (uint32_t)mi->max_positions;
  }
  char devs[VR_SETTINGS_DEVICES_STR] = "";
  size_t at = 0;
  uint64_t dev_bytes = 0;
  for (uint32_t r = 0; r < sc->n_replicas; r++) {
    at += (size_t)snprintf(devs + at, sizeof devs - at, "%s%s", r ? "," : "", sc->devices[r]);
    dev_bytes += vr_model_info(sc->models[r])->device_bytes;
  }
  snprintf(sc->description, sizeof sc->description,
           "device=%s [%s] replicas=%u model=%s arch=%s layers=%d hidden=%d heads=%d/%d vocab=%d max_pos=%d "
           "dtype=%s (weights %s) params=%llu host_mem=%.1fMiB device_mem=%.1fMiB",
           devs, mi->device_name, sc->n_replicas, st->model, mi->architecture, mi->num_layers, mi->hidden_size,
           mi->num_heads, mi->num_kv_heads, mi->vocab_size, mi->max_positions, mi->compute_dtype,
           mi->weights_dtype, (unsigned long long)mi->param_count, mi->host_bytes / 1048576.0,
           dev_bytes / 1048576.0);
  return 0;
}

/* The model directory's tokenizer, when it has one: text and messages requests need it. */
static void load_tokenizer(vr_scorer_t *sc, const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  if (access(path, F_OK) != 0) {
    snprintf(sc->tok_note, sizeof sc->tok_note, "the model directory %.300s has no tokenizer.json", dir);
    vr_log(VR_LOG_INFO, "tokenizer: none (%s); requests must send input_ids", sc->tok_note);
    return;
  }
  char err[320] = "";
  uint64_t t0 = vr_now_ns();
  int rc = vr_tok_load(dir, &sc->tok, err, sizeof err);
  if (rc) {
    sc->tok = NULL;
    snprintf(sc->tok_note, sizeof sc->tok_note, "the tokenizer did not load: %.360s", err); /* err names the file */
    vr_log(VR_LOG_WARN, "tokenizer: %s; text and messages requests are refused, input_ids are served", sc->tok_note);
    return;
  }
  vr_log(VR_LOG_INFO, "tokenizer: %s (vocab %zu, chat template %s) loaded in %.1f ms", dir, vr_tok_vocab_size(sc->tok),
         vr_tok_chat_template(sc->tok, NULL) ? "yes" : "no", (vr_now_ns() - t0) / 1e6);
}

int vr_scorer_init(vr_scorer_t *sc, const vr_settings_t *st) {
  memset(sc, 0, sizeof *sc);
  sc->max_seq_len = st->max_seq_len;
  char derr[512];
  if (vr_settings_devices(st->device, sc->devices, &sc->n_replicas, derr, sizeof derr) != 0) {
    vr_log(VR_LOG_ERROR, "%s", derr); /* vr_settings_parse checked it: not reached from the command line */
    return VR_ERR_INVAL;
  }
  sc->truncate = st->truncate;
  char err[256] = "";
  const char *spec = st->reward[0] ? st->reward : "model";
  int rc = vr_reward_spec_parse(spec, &sc->spec, err, sizeof err);
  if (rc != 0) {
    vr_log(VR_LOG_ERROR, "--reward '%s': %s", spec, err);
    return VR_ERR_INVAL;
  }
  int wants_model = sc->spec.model_index >= 0;
  sc->has_components = sc->spec.n > 1 || !wants_model;
  if (!wants_model) {
    if (st->model[0])
      vr_log(VR_LOG_WARN, "--reward '%s' has no model component; --model %s is not loaded", spec, st->model);
    sc->kind = VR_SCORER_NONE;
    snprintf(sc->description, sizeof sc->description, "device=none model=none (rules only) dtype=none");
    return 0;
  }
  if (!st->model[0]) {
    vr_log(VR_LOG_ERROR, "--reward '%s' needs a model (vr_settings_check refuses this)", spec);
    return VR_ERR_INVAL;
  }
  if (strcmp(st->model, "checksum") == 0) {
    sc->kind = VR_SCORER_CHECKSUM;
    snprintf(sc->description, sizeof sc->description,
             "device=cpu replicas=%u model=checksum arch=checksum (transport test scorer) dtype=f32 memory=0",
             sc->n_replicas);
    return 0;
  }
  sc->kind = VR_SCORER_MODEL;
  rc = load_model(sc, st);
  if (rc == 0) load_tokenizer(sc, st->model);
  return rc;
}

void vr_scorer_free(vr_scorer_t *sc) {
  for (uint32_t r = 0; r < VR_SETTINGS_MAX_REPLICAS; r++) {
    if (sc->models[r]) vr_model_free(sc->models[r]);
    sc->models[r] = NULL;
  }
  vr_tok_free(sc->tok);
  sc->tok = NULL;
}

void vr_scorer_window(const vr_scorer_t *sc, uint32_t len, uint32_t *start, uint32_t *kept) {
  *start = 0;
  *kept = len;
  if (len > sc->max_seq_len && sc->truncate != VR_TRUNCATE_ERROR) {
    *kept = sc->max_seq_len;
    if (sc->truncate == VR_TRUNCATE_LEFT) *start = len - sc->max_seq_len;
  }
}

int vr_scorer_check_seq(const vr_scorer_t *sc, const int32_t *ids, uint32_t len, int64_t *bad_pos) {
  if (bad_pos) *bad_pos = -1;
  if (len == 0) return sc->kind == VR_SCORER_NONE ? 0 : VR_ERR_EMPTY_SEQ;
  if (len > sc->max_seq_len && sc->truncate == VR_TRUNCATE_ERROR) return VR_ERR_SEQ_TOO_LONG;
  uint32_t start, kept;
  vr_scorer_window(sc, len, &start, &kept);
  for (uint32_t i = start; i < start + kept; i++) {
    if (ids[i] < 0 || (sc->vocab_size && (uint32_t)ids[i] >= sc->vocab_size)) {
      if (bad_pos) *bad_pos = i;
      return VR_ERR_TOKEN_RANGE;
    }
  }
  return 0;
}

int vr_scorer_pipeline_depth(const vr_scorer_t *sc) {
  if (sc->kind != VR_SCORER_MODEL) return 1;
  int d = vr_model_max_inflight(sc->models[0]); /* every replica has the same backend */
  return d > 1 ? 2 : 1;
}

/* submit_rc values above 0 are private markers between submit and collect. */
enum { SUBMIT_SYNC_DONE = 1 }; /* the batch was scored synchronously inside submit */

int vr_scorer_submit(vr_scorer_t *sc, uint32_t r, const int32_t *ids, const uint32_t *cu, uint32_t n_seqs, float *scores,
                     int32_t *seq_status) {
  for (uint32_t i = 0; i < n_seqs; i++) seq_status[i] = 0;
  if (sc->kind == VR_SCORER_CHECKSUM) {
    for (uint32_t i = 0; i < n_seqs; i++) scores[i] = vr_checksum_score(ids + cu[i], cu[i + 1] - cu[i]);
    return SUBMIT_SYNC_DONE;
  }
  if (sc->kind == VR_SCORER_NONE) {
    for (uint32_t i = 0; i < n_seqs; i++) scores[i] = 0.0f;
    return SUBMIT_SYNC_DONE;
  }
  struct vr_model *model = __atomic_load_n(&sc->models[r], __ATOMIC_ACQUIRE);
  int rc = vr_model_submit(model, ids, cu, n_seqs, scores, seq_status);
  if (rc == VR_ERR_TOO_LARGE) {
    /* one job larger than a forward (the batcher always takes the head job whole):
     * vr_model_score splits it into several forwards, synchronously */
    rc = vr_model_score(model, ids, cu, n_seqs, scores, seq_status);
    return rc == 0 ? SUBMIT_SYNC_DONE : rc;
  }
  return rc;
}

int vr_scorer_collect(vr_scorer_t *sc, uint32_t r, int submit_rc, const uint32_t *cu, uint32_t n_seqs,
                      const vr_extras_t *const *extras, const uint32_t *resp_tokens, float *scores,
                      int32_t *seq_status, float *comps, vr_metrics_t *metrics) {
  const uint32_t nc = sc->spec.n;
  const int mi = sc->spec.model_index;
  int rc = submit_rc;
  if (rc == 0) rc = vr_model_collect(__atomic_load_n(&sc->models[r], __ATOMIC_ACQUIRE)); /* submitted to the model: wait for it */
  else if (rc == SUBMIT_SYNC_DONE) rc = 0;
  if (rc != 0) return rc;
  for (uint32_t i = 0; i < n_seqs; i++) {
    float *row = comps + (size_t)i * nc;
    if (seq_status[i] != 0) {
      for (uint32_t c = 0; c < nc; c++) row[c] = NAN;
      scores[i] = NAN;
      continue;
    }
    const vr_extras_t *ex = extras ? extras[i] : NULL;
    for (uint32_t c = 0; c < nc; c++) {
      int reason = 0;
      if ((int)c == mi) row[c] = scores[i];
      else row[c] = vr_rule_score(&sc->spec.rules[c], ex, resp_tokens ? resp_tokens[i] : cu[i + 1] - cu[i], &reason);
      if (metrics) vr_metrics_component(metrics, c, reason);
    }
    /* a model-only spec keeps the model's score as is (weight 1: no rounding) */
    if (!(nc == 1 && mi == 0 && sc->spec.rules[0].weight == 1.0f)) scores[i] = vr_reward_mix(&sc->spec, row);
  }
  return 0;
}

int vr_scorer_run(vr_scorer_t *sc, uint32_t r, const int32_t *ids, const uint32_t *cu, uint32_t n_seqs,
                  const vr_extras_t *const *extras, const uint32_t *resp_tokens, float *scores,
                  int32_t *seq_status, float *comps, vr_metrics_t *metrics) {
  int rc = vr_scorer_submit(sc, r, ids, cu, n_seqs, scores, seq_status);
  return vr_scorer_collect(sc, r, rc, cu, n_seqs, extras, resp_tokens, scores, seq_status, comps, metrics);
}

int vr_scorer_warm_up(vr_scorer_t *sc, const char *model_name) {
  if (sc->kind != VR_SCORER_MODEL) return 0;
  int32_t ids[8];
  uint32_t n = sc->vocab_size && sc->vocab_size < 8 ? sc->vocab_size : 8;
  if (n > sc->max_seq_len) n = sc->max_seq_len;
  for (uint32_t i = 0; i < n; i++) ids[i] = (int32_t)i;
  uint32_t cu[2] = {0, n};
  float first = NAN;
  for (uint32_t r = 0; r < sc->n_replicas; r++) {
    float score, comps[VR_REWARD_MAX_COMPONENTS];
    int32_t st = 0;
    uint64_t t0 = vr_now_ns();
    int rc = vr_scorer_run(sc, r, ids, cu, 1, NULL, NULL, &score, &st, comps, NULL);
    if (rc == 0 && st == VR_ERR_NONFINITE) {
      vr_log(VR_LOG_ERROR,
             "model %s produced non-finite scores (NaN/Inf) on the warm-up sequence (token ids 0..%u): the weights "
             "are probably corrupt. HINT: check the model files (re-download or re-convert them) and their dtype",
             model_name, n - 1);
      return VR_ERR_NONFINITE;
    }
    if (rc == 0 && st == 0 && r == 0) first = score;
    else if (rc == 0 && st == 0 && memcmp(&score, &first, sizeof score) != 0) {
      /* the cpu backend promises the same bits everywhere; cuda replicas may tune other GEMM
       * algorithms (--cuda-autotune) and differ within the bf16 tolerance */
      const int cpu = strcmp(sc->devices[r], "cpu") == 0;
      vr_log(cpu ? VR_LOG_ERROR : VR_LOG_INFO, "warm-up: replica %u (%s) scored %.9g, replica 0 (%s) %.9g%s", r,
             sc->devices[r], score, sc->devices[0], first, cpu ? ": the cpu replicas must agree bit for bit" : "");
      if (cpu) return VR_ERR_INTERNAL;
    }
    vr_log(VR_LOG_INFO, "warm-up forward%s%s: %s in %.1f ms", sc->n_replicas > 1 ? " on " : "",
           sc->n_replicas > 1 ? sc->devices[r] : "", rc ? vr_strerror(rc) : "ok", (vr_now_ns() - t0) / 1e6);
  }
  return 0;
}
