/* vr_model.c: model directory loader, tensor resolution, backend registry and
 * the packed scoring entry point (vr_model.h). */
#include "vr_model.h"

#include <errno.h>
#include <sys/mman.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "verl_reward/status.h"
#include "vr_backend.h"
#include "vr_config.h"
#include "vr_jsonl.h"
#include "vr_log.h"
#include "vr_progress.h"
#include "vr_safetensors.h"
#include "vr_model_weights.h"

#define VR_MODEL_MAX_JSON (64u * 1024u * 1024u) /* config.json / index.json size limit */

struct vr_model {
  vr_model_info_t info;
  vr_model_config_t cfg;
  char dir[1024];
  vr_st_file_t *files;           /* mapped safetensors files */
  size_t n_files;
  const vr_st_entry_t **index;   /* every tensor of every file, sorted by name */
  size_t n_index;
  vr_model_weights_t w;
  vr_layer_weights_t *layers;
  char *config_json;             /* config.json as read (vr_model_weights_open only) */
  size_t config_len;
  int err;                       /* first resolution error (load only) */
  const vr_backend_ops_t *ops;
  void *state;
  uint32_t max_batch_tokens, max_seqs, max_len;
  int32_t *stage_ids;            /* (max_batch_tokens) packed ids of one forward */
  uint32_t *stage_cu;            /* (max_seqs + 1) */
  uint32_t *stage_map;           /* (max_seqs) stage slot -> caller's sequence index */
  float *stage_scores;           /* (max_seqs) */
  /* pipelined batches (vr_model_submit/collect): a ring of max_inflight entries, oldest at
   * pend_head; each remembers where its caller wants the scores */
  struct vr_model_pending {
    float *scores;
    int32_t *seq_status;
    uint32_t n_seqs, count;      /* caller's sequences; good ones sent to the backend */
    uint32_t *map;               /* (max_seqs) backend slot -> caller index unless identity */
    int identity;                /* every sequence was good: backend slot j = caller index j */
    int launched;                /* the backend holds this batch (async submit) */
    int rc;                      /* sync fallback: the forward's result */
  } pend[VR_MODEL_MAX_INFLIGHT];
  uint32_t *pend_maps;           /* max_inflight * max_seqs */
  int max_inflight, pend_head, n_pend;
};

/* ---- backend registry ------------------------------------------------------ */

#if defined(VR_HAVE_CUDA) && defined(VR_MODEL_CUDA)
static const vr_backend_ops_t *const vr_backends[] = {&vr_backend_cpu, &vr_backend_cuda};
#define VR_BACKEND_NAMES "cpu,cuda"
#else
static const vr_backend_ops_t *const vr_backends[] = {&vr_backend_cpu};
#define VR_BACKEND_NAMES "cpu"
#endif

const char *vr_model_backends(void) { return VR_BACKEND_NAMES; }

const char *vr_model_runtime_versions(char *buf, size_t n) {
#if defined(VR_HAVE_CUDA) && defined(VR_MODEL_CUDA)
  vr_cuda_runtime_versions(buf, n);
#else
  snprintf(buf, n, "cpu only");
#endif
  return buf;
}

int vr_model_cuda_devices(char *why, size_t whyn) {
#if defined(VR_HAVE_CUDA) && defined(VR_MODEL_CUDA)
  return vr_cuda_device_count(why, whyn);
#else
  snprintf(why, whyn, "this build has no CUDA backend");
  return 0;
#endif
}

int vr_model_cuda_memory(int index, uint64_t *free_bytes, uint64_t *total_bytes) {
#if defined(VR_HAVE_CUDA) && defined(VR_MODEL_CUDA)
  return vr_cuda_device_memory(index, free_bytes, total_bytes);
#else
  (void)index;
  *free_bytes = *total_bytes = 0;
  return VR_ERR_NO_DEVICE;
#endif
}

/* "cpu" -> cpu/0; "cuda" -> cuda/0; "cuda:N" -> cuda/N. The text is checked by
 * vr_model_device_parse (the rule the front ends check flags with); this only splits it. */
static int vr_model_pick_backend(const char *device, const vr_backend_ops_t **ops, int *index) {
  char canon[16], why[256];
  int rc = vr_model_device_parse(device, canon, sizeof canon, why, sizeof why);
  if (rc == VR_ERR_UNSUPPORTED) {
    vr_log(VR_LOG_ERROR, "device \"%s\": this build has no CUDA backend (backends: %s). HINT: build with nvcc and -DVR_CUDA=ON",
           device, VR_BACKEND_NAMES);
    return rc;
  }
  if (rc != 0) {
    vr_log(VR_LOG_ERROR, "device \"%s\" not understood (use cpu, cuda or cuda:N; backends: %s): %s", device,
           VR_BACKEND_NAMES, why);
    return rc;
  }
  char *colon = strchr(canon, ':');
  *index = colon ? atoi(colon + 1) : 0; /* 0..1023, checked above */
  if (colon) *colon = 0;
  for (size_t i = 0; i < sizeof vr_backends / sizeof vr_backends[0]; i++) {
    if (strcmp(vr_backends[i]->name, canon) == 0) {
      *ops = vr_backends[i];
      return 0;
    }
  }
  vr_log(VR_LOG_ERROR, "device \"%s\": no %s backend in this build (backends: %s)", device, canon, VR_BACKEND_NAMES);
  return VR_ERR_UNSUPPORTED;
}

/* ---- files ------------------------------------------------------------------ */

/* Reads a whole small file; *buf is malloc'd. Missing file: VR_ERR_NOT_FOUND (not logged). */
static int vr_model_read_file(const char *path, char **buf, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (errno == ENOENT) return VR_ERR_NOT_FOUND;
    vr_log(VR_LOG_ERROR, "%s: cannot open: %s", path, strerror(errno));
    return VR_ERR_IO;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > VR_MODEL_MAX_JSON) {
    vr_log(VR_LOG_ERROR, "%s: not a regular file of at most %u bytes", path, VR_MODEL_MAX_JSON);
    fclose(f);
    return VR_ERR_MODEL_FORMAT;
  }
  size_t n = (size_t)st.st_size;
  char *b = malloc(n + 1);
  if (!b) {
    fclose(f);
    return VR_ERR_NOMEM;
  }
  size_t got = fread(b, 1, n, f);
  fclose(f);
  if (got != n) {
    vr_log(VR_LOG_ERROR, "%s: short read (%zu of %zu bytes)", path, got, n);
    free(b);
    return VR_ERR_IO;
  }
  b[n] = 0;
  *buf = b;
  *len = n;
  return 0;
}

static int vr_model_open_file(vr_model_t *m, const char *base) {
  char path[2048];
  if (snprintf(path, sizeof path, "%s/%s", m->dir, base) >= (int)sizeof path) return VR_ERR_INVAL;
  vr_st_file_t *nf = realloc(m->files, (m->n_files + 1) * sizeof *nf);
  if (!nf) return VR_ERR_NOMEM;
  m->files = nf;
  int rc = vr_st_open(path, &m->files[m->n_files]);
  if (rc == 0) m->n_files++;
  return rc;
}

static int vr_model_cmp_entry(const void *a, const void *b) {
  return strcmp((*(const vr_st_entry_t *const *)a)->name, (*(const vr_st_entry_t *const *)b)->name);
}

static const vr_st_entry_t *vr_model_find(const vr_model_t *m, const char *name) {
  size_t lo = 0, hi = m->n_index;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(m->index[mid]->name, name);
    if (c == 0) return m->index[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

/* Merges every file's entries into one sorted index; a name in two files is an error. */
static int vr_model_build_index(vr_model_t *m) {
  size_t n = 0;
  for (size_t i = 0; i < m->n_files; i++) n += m->files[i].n_entries;
  m->index = malloc((n ? n : 1) * sizeof *m->index);
  if (!m->index) return VR_ERR_NOMEM;
  for (size_t i = 0; i < m->n_files; i++)
    for (size_t j = 0; j < m->files[i].n_entries; j++) m->index[m->n_index++] = &m->files[i].entries[j];
  qsort(m->index, m->n_index, sizeof *m->index, vr_model_cmp_entry);
  for (size_t i = 1; i < m->n_index; i++) {
    if (strcmp(m->index[i - 1]->name, m->index[i]->name) == 0) {
      vr_log(VR_LOG_ERROR, "%s: tensor '%s' is in both %s and %s", m->dir, m->index[i]->name,
             m->index[i - 1]->file, m->index[i]->file);
      return VR_ERR_MODEL_FORMAT;
    }
  }
  return 0;
}

/* A shard name from the index must be a plain file name inside the directory. */
static int vr_model_safe_name(const char *s) {
  size_t n = strlen(s);
  return n > 0 && n < 256 && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* model.safetensors.index.json: {"weight_map": {"tensor": "file", ...}}. Opens every
 * file named once and checks that each tensor is in the file the index names. */
static int vr_model_open_sharded(vr_model_t *m, const char *json, size_t len, const char *ipath) {
  char jerr[1400];
  cJSON *root = vr_json_parse_file(json, len, ipath, VR_JSON_DUP_LAST, jerr, sizeof jerr);
  const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
  int rc = 0;
  if (!root) {
    vr_log(VR_LOG_ERROR, "%s", jerr);
    rc = VR_ERR_MODEL_FORMAT;
    goto done;
  }
  if (!cJSON_IsObject(wm)) {
    vr_log(VR_LOG_ERROR, "%s: malformed JSON or no \"weight_map\" object", ipath);
    rc = VR_ERR_MODEL_FORMAT;
    goto done;
  }
  for (const cJSON *it = wm->child; it && rc == 0; it = it->next) {
    if (!cJSON_IsString(it) || !vr_model_safe_name(it->valuestring)) {
      vr_log(VR_LOG_ERROR, "%s: weight_map entry '%s' must name a file in the model directory", ipath,
             it->string ? it->string : "?");
      rc = VR_ERR_MODEL_FORMAT;
      break;
    }
    int seen = 0;
    for (size_t i = 0; i < m->n_files && !seen; i++) seen = strcmp(m->files[i].base, it->valuestring) == 0;
    if (!seen) rc = vr_model_open_file(m, it->valuestring);
  }
  if (rc == 0 && m->n_files == 0) {
    vr_log(VR_LOG_ERROR, "%s: weight_map is empty", ipath);
    rc = VR_ERR_MODEL_FORMAT;
  }
  if (rc == 0) rc = vr_model_build_index(m);
  for (const cJSON *it = rc == 0 ? wm->child : NULL; it; it = it->next) {
    const vr_st_entry_t *e = vr_model_find(m, it->string);
    if (!e || strcmp(e->file, it->valuestring) != 0) {
      vr_log(VR_LOG_ERROR, "%s: index puts tensor '%s' in %s, but %s", ipath, it->string,
             it->valuestring, e ? "it is in another file" : "no file has it");
      rc = VR_ERR_MODEL_FORMAT;
      break;
    }
  }
done:
  cJSON_Delete(root);
  return rc;
}

/* ---- tensor resolution -------------------------------------------------------- */

/* Looks up a tensor by printf-style name and checks dtype and shape (d1 < 0: 1-D;
 * d0 == -2: any number of rows). Old BERT checkpoints name LayerNorm parameters
 * gamma/beta; transformers renames them, so do we. Logs and records the first error. */
static const vr_tensor_t *vr_model_tensor(vr_model_t *m, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static const vr_tensor_t *vr_model_tensor(vr_model_t *m, int64_t d0, int64_t d1, const char *fmt, ...) {
  if (m->err) return NULL;
  char name[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  const vr_st_entry_t *e = vr_model_find(m, name);
  size_t n = strlen(name);
  if (!e && strstr(name, "LayerNorm.") && n > 7) {
    char alt[512];
    if (strcmp(name + n - 7, ".weight") == 0) {
      snprintf(alt, sizeof alt, "%.*s.gamma", (int)(n - 7), name);
      e = vr_model_find(m, alt);
    } else if (n > 5 && strcmp(name + n - 5, ".bias") == 0) {
      snprintf(alt, sizeof alt, "%.*s.beta", (int)(n - 5), name);
      e = vr_model_find(m, alt);
    }
  }
  if (!e) {
    vr_log(VR_LOG_ERROR, "%s: tensor '%s' is missing (looked in %zu safetensors file%s, first %s)",
           m->dir, name, m->n_files, m->n_files == 1 ? "" : "s", m->n_files ? m->files[0].base : "-");
    m->err = VR_ERR_MODEL_FORMAT;
    return NULL;
  }
  if (!e->supported) {
    vr_log(VR_LOG_ERROR, "%s/%s: tensor '%s' has dtype %s (supported: F32, F16, BF16)", m->dir, e->file,
           name, e->dtype_name);
    m->err = VR_ERR_UNSUPPORTED;
    return NULL;
  }
  int want_nd = d1 < 0 ? 1 : 2;
  if (e->t.ndim != want_nd || (d0 != -2 && e->t.shape[0] != d0) || (d1 >= 0 && e->t.shape[1] != d1)) {
    char got[96] = "";
    for (int i = 0; i < e->t.ndim; i++)
      snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)e->t.shape[i]);
    if (d1 < 0)
      vr_log(VR_LOG_ERROR, "%s/%s: tensor '%s' has shape [%s], expected [%lld]", m->dir, e->file, name,
             got, (long long)d0);
    else
      vr_log(VR_LOG_ERROR, "%s/%s: tensor '%s' has shape [%s], expected [%lld, %lld]", m->dir, e->file,
             name, got, (long long)d0, (long long)d1);
    m->err = VR_ERR_MODEL_FORMAT;
    return NULL;
  }
  if (m->info.weights_dtype[0] == 0)
    snprintf(m->info.weights_dtype, sizeof m->info.weights_dtype, "%s",
             e->t.dtype == VR_DTYPE_F32 ? "f32" : e->t.dtype == VR_DTYPE_F16 ? "f16" : "bf16");
  m->info.param_count += e->t.nbytes / (e->t.dtype == VR_DTYPE_F32 ? 4 : 2);
  return &e->t;
}

static void vr_model_resolve_encoder(vr_model_t *m) {
  const vr_model_config_t *c = &m->cfg;
  const char *p = c->arch == VR_ARCH_BERT ? "bert." : "roberta.";
  int64_t C = c->hidden_size, I = c->intermediate_size;
  vr_model_weights_t *w = &m->w;
  w->tok_emb = vr_model_tensor(m, c->vocab_size, C, "%sembeddings.word_embeddings.weight", p);
  w->pos_emb = vr_model_tensor(m, c->max_position_embeddings, C, "%sembeddings.position_embeddings.weight", p);
  w->type_emb = vr_model_tensor(m, c->type_vocab_size, C, "%sembeddings.token_type_embeddings.weight", p);
  w->emb_norm_w = vr_model_tensor(m, C, -1, "%sembeddings.LayerNorm.weight", p);
  w->emb_norm_b = vr_model_tensor(m, C, -1, "%sembeddings.LayerNorm.bias", p);
  for (int l = 0; l < c->num_layers && !m->err; l++) {
    vr_layer_weights_t *L = &m->layers[l];
    char q[96];
    snprintf(q, sizeof q, "%sencoder.layer.%d.", p, l);
    L->q_w = vr_model_tensor(m, C, C, "%sattention.self.query.weight", q);
    L->q_b = vr_model_tensor(m, C, -1, "%sattention.self.query.bias", q);
    L->k_w = vr_model_tensor(m, C, C, "%sattention.self.key.weight", q);
    L->k_b = vr_model_tensor(m, C, -1, "%sattention.self.key.bias", q);
    L->v_w = vr_model_tensor(m, C, C, "%sattention.self.value.weight", q);
    L->v_b = vr_model_tensor(m, C, -1, "%sattention.self.value.bias", q);
    L->o_w = vr_model_tensor(m, C, C, "%sattention.output.dense.weight", q);
    L->o_b = vr_model_tensor(m, C, -1, "%sattention.output.dense.bias", q);
    L->norm1_w = vr_model_tensor(m, C, -1, "%sattention.output.LayerNorm.weight", q);
    L->norm1_b = vr_model_tensor(m, C, -1, "%sattention.output.LayerNorm.bias", q);
    L->up_w = vr_model_tensor(m, I, C, "%sintermediate.dense.weight", q);
    L->up_b = vr_model_tensor(m, I, -1, "%sintermediate.dense.bias", q);
    L->down_w = vr_model_tensor(m, C, I, "%soutput.dense.weight", q);
    L->down_b = vr_model_tensor(m, C, -1, "%soutput.dense.bias", q);
    L->norm2_w = vr_model_tensor(m, C, -1, "%soutput.LayerNorm.weight", q);
    L->norm2_b = vr_model_tensor(m, C, -1, "%soutput.LayerNorm.bias", q);
  }
  if (c->arch == VR_ARCH_BERT) {
    w->head1_w = vr_model_tensor(m, C, C, "bert.pooler.dense.weight");
    w->head1_b = vr_model_tensor(m, C, -1, "bert.pooler.dense.bias");
    w->head2_w = vr_model_tensor(m, -2, C, "classifier.weight");
    if (w->head2_w) w->head2_b = vr_model_tensor(m, w->head2_w->shape[0], -1, "classifier.bias");
  } else {
    w->head1_w = vr_model_tensor(m, C, C, "classifier.dense.weight");
    w->head1_b = vr_model_tensor(m, C, -1, "classifier.dense.bias");
    w->head2_w = vr_model_tensor(m, -2, C, "classifier.out_proj.weight");
    if (w->head2_w) w->head2_b = vr_model_tensor(m, w->head2_w->shape[0], -1, "classifier.out_proj.bias");
  }
}

static void vr_model_resolve_decoder(vr_model_t *m) {
  const vr_model_config_t *c = &m->cfg;
  int64_t C = c->hidden_size, I = c->intermediate_size;
  int64_t QD = (int64_t)c->num_heads * c->head_dim, KD = (int64_t)c->num_kv_heads * c->head_dim;
  vr_model_weights_t *w = &m->w;
  w->tok_emb = vr_model_tensor(m, c->vocab_size, C, "model.embed_tokens.weight");
  for (int l = 0; l < c->num_layers && !m->err; l++) {
    vr_layer_weights_t *L = &m->layers[l];
    char q[64];
    snprintf(q, sizeof q, "model.layers.%d.", l);
    L->q_w = vr_model_tensor(m, QD, C, "%sself_attn.q_proj.weight", q);
    L->k_w = vr_model_tensor(m, KD, C, "%sself_attn.k_proj.weight", q);
    L->v_w = vr_model_tensor(m, KD, C, "%sself_attn.v_proj.weight", q);
    L->o_w = vr_model_tensor(m, C, QD, "%sself_attn.o_proj.weight", q);
    if (c->attention_bias) {
      L->q_b = vr_model_tensor(m, QD, -1, "%sself_attn.q_proj.bias", q);
      L->k_b = vr_model_tensor(m, KD, -1, "%sself_attn.k_proj.bias", q);
      L->v_b = vr_model_tensor(m, KD, -1, "%sself_attn.v_proj.bias", q);
    }
    if (c->o_bias) L->o_b = vr_model_tensor(m, C, -1, "%sself_attn.o_proj.bias", q);
    L->norm1_w = vr_model_tensor(m, C, -1, "%sinput_layernorm.weight", q);
    L->norm2_w = vr_model_tensor(m, C, -1, "%spost_attention_layernorm.weight", q);
    L->gate_w = vr_model_tensor(m, I, C, "%smlp.gate_proj.weight", q);
    L->up_w = vr_model_tensor(m, I, C, "%smlp.up_proj.weight", q);
    L->down_w = vr_model_tensor(m, C, I, "%smlp.down_proj.weight", q);
    if (c->mlp_bias) { /* llama mlp_bias: gate, up and down all have a bias */
      L->gate_b = vr_model_tensor(m, I, -1, "%smlp.gate_proj.bias", q);
      L->up_b = vr_model_tensor(m, I, -1, "%smlp.up_proj.bias", q);
      L->down_b = vr_model_tensor(m, C, -1, "%smlp.down_proj.bias", q);
    }
  }
  w->final_norm_w = vr_model_tensor(m, C, -1, "model.norm.weight");
  if (c->task == VR_TASK_CAUSAL_LM) {
    w->head2_w = c->tie_word_embeddings ? w->tok_emb : vr_model_tensor(m, c->vocab_size, C, "lm_head.weight");
    if (!w->head2_w && !m->err) m->err = VR_ERR_MODEL_FORMAT;
    return;
  }
  w->head2_w = vr_model_tensor(m, -2, C, "score.weight");
  if (c->task == VR_TASK_TOKEN_CLS && w->head2_w)
    w->head2_b = vr_model_tensor(m, w->head2_w->shape[0], -1, "score.bias");
}

/* ---- load / free --------------------------------------------------------------- */

void vr_model_free(vr_model_t *m) {
  if (!m) return;
  while (m->n_pend > 0) (void)vr_model_collect(m);
  if (m->ops && m->state) m->ops->free(m->state);
  free(m->pend_maps);
  for (size_t i = 0; i < m->n_files; i++) vr_st_close(&m->files[i]);
  free(m->files);
  free(m->index);
  free(m->layers);
  free(m->stage_ids);
  free(m->stage_cu);
  free(m->stage_map);
  free(m->stage_scores);
  vr_config_free(&m->cfg);
  free(m->config_json);
  free(m);
}

/* Copies every mapped file into memory of our own (anonymous, read-only once filled), in
 * file order with progress (bytes, tensors, MiB/s, ETA) through vr_progress, and points the
 * tensors there; the file mappings are dropped. The cpu backend uses f32 weights in place:
 * from here on the model does not depend on the files (issue 18: a file truncated or
 * rewritten under a running server used to kill it with SIGBUS or change its scores). It
 * costs the model's size in resident memory beside the page cache. Returns 0 or
 * VR_ERR_NOMEM (logged with a HINT). */
static int vr_model_own_weights(vr_model_t *m) {
  uint64_t total = 0;
  uint32_t n_tensors = 0;
  for (size_t f = 0; f < m->n_files; f++) {
    total += m->files[f].size;
    n_tensors += (uint32_t)m->files[f].n_entries;
  }
  vr_progress_t p;
  char what[80];
  snprintf(what, sizeof what, "reading weights (%zu file%s)", m->n_files, m->n_files == 1 ? "" : "s");
  vr_progress_begin(&p, what, "tensors", n_tensors, total);
  for (size_t f = 0; f < m->n_files; f++) {
    vr_st_file_t *sf = &m->files[f];
    uint8_t *own = mmap(NULL, sf->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (own == MAP_FAILED) {
      vr_log(VR_LOG_ERROR, "%s: no memory for a private copy of its %zu bytes: %s. HINT: the cpu backend holds "
             "its weights in memory of its own; free memory or use a smaller model", sf->path, sf->size,
             strerror(errno));
      return VR_ERR_NOMEM;
    }
    const uint8_t *map = sf->map;
    const size_t data_off = (size_t)(sf->data - map);
    memcpy(own, map, data_off); /* length + header */
    vr_progress_step(&p, 0, data_off);
    for (size_t i = 0; i < sf->n_entries; i++) {
      vr_st_entry_t *e = &sf->entries[i];
      const size_t off = (size_t)((const uint8_t *)e->t.data - map);
      if (e->t.nbytes) memcpy(own + off, map + off, e->t.nbytes);
      e->t.data = own + off;
      vr_progress_step(&p, 1, e->t.nbytes);
    }
    mprotect(own, sf->size, PROT_READ);
    munmap(sf->map, sf->size);
    sf->map = own;
    sf->data = own + data_off;
  }
  vr_progress_end(&p);
  return 0;
}

/* Reads config.json, maps the safetensors files and resolves the architecture's tensors into
 * m (no backend). for_trainer 0: only reward models (VR_TASK_SEQ_CLS) are accepted, a causal
 * LM or token classifier is refused with a message saying so; 1: decoders only, any task,
 * and config.json's text is kept in m->config_json. */
static int vr_model_open_dir(vr_model_t *m, const char *dir, int for_trainer) {
  if (snprintf(m->dir, sizeof m->dir, "%s", dir) >= (int)sizeof m->dir) {
    vr_log(VR_LOG_ERROR, "model path too long: %s", dir);
    return VR_ERR_INVAL;
  }
  char path[2048];
  char *json = NULL;
  size_t len = 0;
  snprintf(path, sizeof path, "%s/config.json", m->dir);
  int rc = vr_model_read_file(path, &json, &len);
  if (rc == VR_ERR_NOT_FOUND) vr_log(VR_LOG_ERROR, "%s: not found (is %s a Hugging Face model directory?)", path, dir);
  if (rc != 0) return rc;
  rc = vr_config_parse(json, len, path, &m->cfg, m->info.architecture, sizeof m->info.architecture,
                       m->info.model_type, sizeof m->info.model_type);
  if (rc == 0 && !for_trainer && m->cfg.task != VR_TASK_SEQ_CLS) {
    vr_log(VR_LOG_ERROR, "%s: %s is a %s, not a reward model: verl-reward serves models with one score head (%s). HINT: the trainer (verl-trainer logprobs/sft) loads causal LMs; for a reward model save %sForSequenceClassification with num_labels=1",
           path, m->info.architecture, m->cfg.task == VR_TASK_CAUSAL_LM ? "causal language model (lm_head)" : "token classifier (one score per token)",
           VR_SUPPORTED_ARCHS, m->cfg.arch == VR_ARCH_LLAMA ? "Llama" : m->cfg.arch == VR_ARCH_QWEN2 ? "Qwen2" : "Mistral");
    rc = VR_ERR_UNSUPPORTED;
  }
  if (rc == 0 && for_trainer && !m->cfg.is_decoder) {
    vr_log(VR_LOG_ERROR, "%s: %s is an encoder; the trainer loads decoders only (%s)", path,
           m->info.architecture, VR_TRAINER_ARCHS);
    rc = VR_ERR_UNSUPPORTED;
  }
  if (rc == 0 && for_trainer) {
    m->config_json = json;
    m->config_len = len;
    json = NULL;
  }
  free(json);
  json = NULL;
  if (rc != 0) return rc;

  snprintf(path, sizeof path, "%s/model.safetensors.index.json", m->dir);
  rc = vr_model_read_file(path, &json, &len);
  if (rc == 0) {
    rc = vr_model_open_sharded(m, json, len, path);
  } else if (rc == VR_ERR_NOT_FOUND) {
    snprintf(path, sizeof path, "%s/model.safetensors", m->dir);
    rc = access(path, F_OK) == 0 || errno != ENOENT ? vr_model_open_file(m, "model.safetensors")
                                                   : VR_ERR_NOT_FOUND;
    if (rc == VR_ERR_NOT_FOUND)
      vr_log(VR_LOG_ERROR, "%s: neither model.safetensors nor model.safetensors.index.json (pytorch_model.bin is not read; HINT: re-save with save_pretrained(safe_serialization=True))",
             dir);
    if (rc == 0) rc = vr_model_build_index(m);
  }
  free(json);
  if (rc != 0) return rc;

  m->layers = calloc((size_t)m->cfg.num_layers, sizeof *m->layers);
  if (!m->layers) return VR_ERR_NOMEM;
  m->w.layers = m->layers;
  if (m->cfg.is_decoder) vr_model_resolve_decoder(m);
  else vr_model_resolve_encoder(m);
  return m->err;
}

int vr_model_load(const char *dir, const vr_model_options_t *opt_in, vr_model_t **out) {
  vr_model_options_t opt;
  if (opt_in) opt = *opt_in;
  else vr_model_options_init(&opt);
  if (!out || !dir) return VR_ERR_INVAL;
  *out = NULL;
  if (!opt.device) opt.device = "cpu";
  if (opt.max_batch_tokens == 0) opt.max_batch_tokens = 16384;
  if (opt.max_seqs == 0 || opt.max_seqs > opt.max_batch_tokens) opt.max_seqs = opt.max_batch_tokens;
  if (opt.max_batch_tokens > (1u << 26)) {
    vr_log(VR_LOG_ERROR, "max_batch_tokens %u too large (at most %u)", opt.max_batch_tokens, 1u << 26);
    return VR_ERR_INVAL;
  }
  char cerr[128];
  if (vr_cuda_options_check(&opt.cuda, cerr, sizeof cerr) != 0) {
    vr_log(VR_LOG_ERROR, "cuda options: %s. HINT: fill them with vr_model_options_init()", cerr);
    return VR_ERR_INVAL;
  }
  const vr_backend_ops_t *ops;
  int device_index;
  int rc = vr_model_pick_backend(opt.device, &ops, &device_index);
  if (rc != 0) return rc;

  vr_model_t *m = calloc(1, sizeof *m);
  if (!m) return VR_ERR_NOMEM;
  rc = vr_model_open_dir(m, dir, 0);
  if (rc != 0) goto fail;
  long long rows = (long long)m->w.head2_w->shape[0];
  if (m->cfg.num_labels >= 0 && m->cfg.num_labels != rows) {
    vr_log(VR_LOG_ERROR, "%s: config.json says num_labels %d but the score head has %lld rows", dir,
           m->cfg.num_labels, rows);
    rc = VR_ERR_MODEL_FORMAT;
    goto fail;
  }
  if (rows != 1) {
    vr_log(VR_LOG_ERROR, "%s: num_labels is %lld; verl-reward serves reward models with one output (num_labels = 1) of: %s",
           dir, rows, VR_SUPPORTED_ARCHS);
    rc = VR_ERR_UNSUPPORTED;
    goto fail;
  }
  m->cfg.num_labels = 1;

  m->max_batch_tokens = opt.max_batch_tokens;
  m->max_seqs = opt.max_seqs;
  m->max_len = (uint32_t)m->cfg.max_seq_len < opt.max_batch_tokens ? (uint32_t)m->cfg.max_seq_len
                                                                   : opt.max_batch_tokens;
  m->stage_ids = malloc(m->max_batch_tokens * sizeof *m->stage_ids);
  m->stage_cu = malloc((m->max_seqs + 1) * sizeof *m->stage_cu);
  m->stage_map = malloc(m->max_seqs * sizeof *m->stage_map);
  m->stage_scores = malloc(m->max_seqs * sizeof *m->stage_scores);
  if (!m->stage_ids || !m->stage_cu || !m->stage_map || !m->stage_scores) {
    rc = VR_ERR_NOMEM;
    goto fail;
  }

  vr_model_info_t *in = &m->info;
  const vr_model_config_t *c = &m->cfg;
  in->is_decoder = c->is_decoder;
  in->vocab_size = c->vocab_size;
  in->hidden_size = c->hidden_size;
  in->num_layers = c->num_layers;
  in->num_heads = c->num_heads;
  in->num_kv_heads = c->num_kv_heads;
  in->head_dim = c->head_dim;
  in->intermediate_size = c->intermediate_size;
  in->max_positions = (int)m->max_len;
  in->num_labels = c->num_labels;
  snprintf(in->compute_dtype, sizeof in->compute_dtype, "f32");
  snprintf(in->device, sizeof in->device, "%s", ops->name);

  opt.max_seqs = m->max_seqs;
  /* the cpu backend uses f32 weights in place: they move into memory of our own now, with
   * progress, so the model never depends on the files again. The cuda backend reads every
   * byte once in its init to upload it to the device (its upload logs the same progress). */
  if (strcmp(ops->name, "cpu") == 0 && (rc = vr_model_own_weights(m)) != 0) goto fail;
  rc = ops->init(&m->cfg, &m->w, &opt, device_index, &m->state);
  if (rc != 0) {
    m->state = NULL;
    goto fail;
  }
  m->ops = ops;
  m->max_inflight = ops->submit && ops->collect && ops->max_inflight > 1 ? ops->max_inflight : 1;
  if (m->max_inflight > VR_MODEL_MAX_INFLIGHT) m->max_inflight = VR_MODEL_MAX_INFLIGHT;
  m->pend_maps = malloc((size_t)m->max_inflight * m->max_seqs * sizeof *m->pend_maps);
  if (!m->pend_maps) {
    rc = VR_ERR_NOMEM;
    goto fail;
  }
  for (int i = 0; i < m->max_inflight; i++) m->pend[i].map = m->pend_maps + (size_t)i * m->max_seqs;
  if (ops->describe) ops->describe(m->state, in);
  vr_log(VR_LOG_INFO, "loaded %s (%s, %d layers, hidden %d, %s weights, %llu params) on %s; max %d tokens per sequence",
         dir, in->architecture, in->num_layers, in->hidden_size, in->weights_dtype,
         (unsigned long long)in->param_count, in->device_name[0] ? in->device_name : in->device,
         in->max_positions);
  *out = m;
  return 0;
fail:
  vr_model_free(m);
  return rc;
}

/* ---- the trainer's entry (vr_model_weights.h) ------------------------------------- */

int vr_model_weights_open(const char *dir, vr_model_t **out) {
  if (!dir || !out) return VR_ERR_INVAL;
  *out = NULL;
  vr_model_t *m = calloc(1, sizeof *m);
  if (!m) return VR_ERR_NOMEM;
  int rc = vr_model_open_dir(m, dir, 1);
  if (rc != 0) {
    vr_model_free(m);
    return rc;
  }
  *out = m;
  return 0;
}

const vr_model_config_t *vr_model_weights_config(const vr_model_t *m) { return &m->cfg; }
const vr_model_weights_t *vr_model_weights_tensors(const vr_model_t *m) { return &m->w; }
const char *vr_model_weights_config_json(const vr_model_t *m, size_t *len) {
  if (len) *len = m->config_len;
  return m->config_json;
}

const vr_model_info_t *vr_model_info(const vr_model_t *m) { return &m->info; }

/* ---- scoring ---------------------------------------------------------------------- */

int vr_model_check_seq(const vr_model_t *m, const int32_t *ids, uint32_t len) {
  if (len == 0) return VR_ERR_EMPTY_SEQ;
  if (len > m->max_len) return VR_ERR_SEQ_TOO_LONG;
  if (!ids) return VR_ERR_INVAL;
  int32_t v = m->cfg.vocab_size;
  for (uint32_t i = 0; i < len; i++)
    if (ids[i] < 0 || ids[i] >= v) return VR_ERR_TOKEN_RANGE;
  return 0;
}

/* Writes sequence i's result: the backend's score, or NaN and a status. A score the
 * backend produced but that is NaN/Inf (corrupt weights, overflow) is that sequence's
 * error (VR_ERR_NONFINITE); the other sequences keep theirs. */
static void vr_model_put(float *scores, int32_t *seq_status, uint32_t i, float score, int rc) {
  if (rc == 0 && !isfinite(score)) rc = VR_ERR_NONFINITE;
  scores[i] = rc == 0 ? score : NAN;
  if (seq_status) seq_status[i] = rc;
}

/* Runs the staged sequences and scatters their scores. */
static int vr_model_flush(vr_model_t *m, uint32_t count, float *scores, int32_t *seq_status) {
  if (count == 0) return 0;
  int rc = m->ops->forward(m->state, m->stage_ids, m->stage_cu, count, m->stage_scores);
  for (uint32_t j = 0; j < count; j++) vr_model_put(scores, seq_status, m->stage_map[j], m->stage_scores[j], rc);
  if (rc != 0) vr_log(VR_LOG_ERROR, "%s forward of %u sequences failed: %s", m->ops->name, count, vr_strerror(rc));
  return rc;
}

int vr_model_score(vr_model_t *m, const int32_t *ids, const uint32_t *cu_seqlens, uint32_t n_seqs,
                   float *scores, int32_t *seq_status) {
  if (!m || (n_seqs && (!cu_seqlens || !scores))) return VR_ERR_INVAL;
  if (m->n_pend > 0) return VR_ERR_BUSY;
  if (n_seqs == 0) return 0;
  if (cu_seqlens[0] != 0) return VR_ERR_INVAL;
  for (uint32_t i = 0; i < n_seqs; i++)
    if (cu_seqlens[i + 1] < cu_seqlens[i]) return VR_ERR_INVAL;
  if (cu_seqlens[n_seqs] > 0 && !ids) return VR_ERR_INVAL;

  uint32_t count = 0, tokens = 0;
  m->stage_cu[0] = 0;
  for (uint32_t i = 0; i < n_seqs; i++) {
    uint32_t len = cu_seqlens[i + 1] - cu_seqlens[i];
    const int32_t *s = ids ? ids + cu_seqlens[i] : NULL;
    int st = vr_model_check_seq(m, s, len);
    if (seq_status) seq_status[i] = st;
    if (st != 0) {
      scores[i] = NAN;
      continue;
    }
    if (count == m->max_seqs || tokens + len > m->max_batch_tokens) {
      int rc = vr_model_flush(m, count, scores, seq_status);
      if (rc != 0) { /* device error: nothing after this point is scored */
        for (uint32_t j = i; j < n_seqs; j++) {
          scores[j] = NAN;
          if (seq_status) seq_status[j] = rc;
        }
        return rc;
      }
      count = tokens = 0;
    }
    memcpy(m->stage_ids + tokens, s, len * sizeof *s);
    tokens += len;
    m->stage_map[count] = i;
    m->stage_cu[++count] = tokens;
  }
  return vr_model_flush(m, count, scores, seq_status);
}

int vr_model_hidden(vr_model_t *m, const int32_t *ids, const uint32_t *cu_seqlens, uint32_t n_seqs,
                    float *hidden) {
  if (!m || !cu_seqlens || (n_seqs && !hidden)) return VR_ERR_INVAL;
  if (m->n_pend > 0) return VR_ERR_BUSY;
  if (n_seqs == 0) return 0;
  if (cu_seqlens[0] != 0 || !ids) return VR_ERR_INVAL;
  if (n_seqs > m->max_seqs) return VR_ERR_TOO_LARGE;
  for (uint32_t i = 0; i < n_seqs; i++) {
    if (cu_seqlens[i + 1] < cu_seqlens[i]) return VR_ERR_INVAL;
    int st = vr_model_check_seq(m, ids + cu_seqlens[i], cu_seqlens[i + 1] - cu_seqlens[i]);
    if (st != 0) return st;
  }
  if (cu_seqlens[n_seqs] > m->max_batch_tokens) return VR_ERR_TOO_LARGE;
  if (!m->ops->hidden) {
    vr_log(VR_LOG_ERROR, "%s backend has no trunk entry point (hidden states)", m->ops->name);
    return VR_ERR_UNSUPPORTED;
  }
  int rc = m->ops->hidden(m->state, ids, cu_seqlens, n_seqs, hidden);
  if (rc != 0) vr_log(VR_LOG_ERROR, "%s trunk forward of %u sequences failed: %s", m->ops->name, n_seqs, vr_strerror(rc));
  return rc;
}

/* ---- pipelined scoring ------------------------------------------------------------ */

int vr_model_max_inflight(const vr_model_t *m) { return m ? m->max_inflight : 0; }

/* Writes the result of a pending batch: scores (from src, the backend's count scores) or
 * NaN, and seq_status rc, for the sequences sent to the backend. */
static void vr_model_scatter(struct vr_model_pending *p, const float *src, int rc) {
  for (uint32_t j = 0; j < p->count; j++)
    vr_model_put(p->scores, p->seq_status, p->identity ? j : p->map[j], rc == 0 ? src[j] : NAN, rc);
}

int vr_model_submit(vr_model_t *m, const int32_t *ids, const uint32_t *cu_seqlens, uint32_t n_seqs,
                    float *scores, int32_t *seq_status) {
  if (!m || (n_seqs && (!cu_seqlens || !scores))) return VR_ERR_INVAL;
  if (m->n_pend >= m->max_inflight) return VR_ERR_BUSY;
  if (n_seqs > 0) {
    if (cu_seqlens[0] != 0) return VR_ERR_INVAL;
    for (uint32_t i = 0; i < n_seqs; i++)
      if (cu_seqlens[i + 1] < cu_seqlens[i]) return VR_ERR_INVAL;
    if (cu_seqlens[n_seqs] > 0 && !ids) return VR_ERR_INVAL;
    if (n_seqs > m->max_seqs || cu_seqlens[n_seqs] > m->max_batch_tokens) return VR_ERR_TOO_LARGE;
  }
  struct vr_model_pending *p = &m->pend[(m->pend_head + m->n_pend) % m->max_inflight];
  p->scores = scores;
  p->seq_status = seq_status;
  p->n_seqs = n_seqs;
  p->count = 0;
  p->identity = 1;
  p->launched = 0;
  p->rc = 0;
  /* check every sequence; all good (the usual case): hand the caller's arrays straight on */
  uint32_t bad = 0;
  for (uint32_t i = 0; i < n_seqs; i++) {
    uint32_t len = cu_seqlens[i + 1] - cu_seqlens[i];
    int st = vr_model_check_seq(m, ids ? ids + cu_seqlens[i] : NULL, len);
    if (seq_status) seq_status[i] = st;
    if (st != 0) {
      scores[i] = NAN;
      bad++;
    }
  }
  const int32_t *b_ids = ids;
  const uint32_t *b_cu = cu_seqlens;
  if (bad > 0) { /* compact the good ones into the stage (the backend copies before returning) */
    uint32_t tokens = 0;
    p->identity = 0;
    m->stage_cu[0] = 0;
    for (uint32_t i = 0; i < n_seqs; i++) {
      uint32_t len = cu_seqlens[i + 1] - cu_seqlens[i];
      if (vr_model_check_seq(m, ids ? ids + cu_seqlens[i] : NULL, len) != 0) continue;
      memcpy(m->stage_ids + tokens, ids + cu_seqlens[i], len * sizeof *ids);
      tokens += len;
      p->map[p->count] = i;
      m->stage_cu[++p->count] = tokens;
    }
    b_ids = m->stage_ids;
    b_cu = m->stage_cu;
  } else {
    p->count = n_seqs;
  }
  if (p->count > 0 && m->max_inflight > 1) {
    int rc = m->ops->submit(m->state, b_ids, b_cu, p->count);
    if (rc != 0) { /* launch failed: nothing outstanding */
      vr_log(VR_LOG_ERROR, "%s submit of %u sequences failed: %s", m->ops->name, p->count, vr_strerror(rc));
      vr_model_scatter(p, NULL, rc);
      return rc;
    }
    p->launched = 1;
  } else if (p->count > 0) { /* synchronous fallback: the forward runs now, collect reports it */
    p->rc = m->ops->forward(m->state, b_ids, b_cu, p->count, m->stage_scores);
    if (p->rc != 0)
      vr_log(VR_LOG_ERROR, "%s forward of %u sequences failed: %s", m->ops->name, p->count, vr_strerror(p->rc));
    vr_model_scatter(p, m->stage_scores, p->rc);
  }
  m->n_pend++;
  return 0;
}

int vr_model_collect(vr_model_t *m) {
  if (!m || m->n_pend == 0) return VR_ERR_INVAL;
  struct vr_model_pending *p = &m->pend[m->pend_head];
  m->pend_head = (m->pend_head + 1) % m->max_inflight;
  m->n_pend--;
  if (!p->launched) return p->rc;
  /* identity: the backend writes straight into the caller's scores */
  float *dst = p->identity ? p->scores : m->stage_scores;
  int rc = m->ops->collect(m->state, dst);
  if (rc != 0) vr_log(VR_LOG_ERROR, "%s forward of %u sequences failed: %s", m->ops->name, p->count, vr_strerror(rc));
  vr_model_scatter(p, dst, rc); /* identity: in place, marks the non-finite ones */
  return rc;
}
