/* vr_lm.c: the causal-LM handle (vr_lm.h): load through model/'s loader into one fp32
 * buffer laid out by the tensor table, save as HF safetensors + config.json. */
#include "vr_lm.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "verl_reward/status.h"
#include "vr_backend.h"
#include "vr_jsonl.h"
#include "vr_log.h"
#include "vr_model_weights.h"

#define VR_LM_PATH_MAX 4096 /* Linux PATH_MAX: a checkpoint file's path, NUL included */

struct vr_lm {
  vr_lm_config_t cfg;
  float *inv_freq;               /* cfg.rope_inv_freq (owned) */
  vr_lm_tensor_t *t;
  size_t n_t, cap_t;
  vr_lm_index_t index;
  vr_lm_layer_index_t *layers;
  float *params;                 /* n_floats, 64-byte aligned */
  size_t n_floats;
  char dir[1024];
  char *config_json;             /* the source config.json (NUL-terminated) */
};

const char *vr_lm_arch_name(vr_lm_family_t f, vr_lm_head_t h) {
  static const char *const names[3][2] = {{"LlamaForCausalLM", "LlamaForTokenClassification"},
                                          {"MistralForCausalLM", "MistralForTokenClassification"},
                                          {"Qwen2ForCausalLM", "Qwen2ForTokenClassification"}};
  return names[f > VR_LM_QWEN2 ? 0 : f][h == VR_LM_HEAD_VALUE];
}

/* Appends a table entry; returns its position or -1 on OOM. */
/* config.json's tree as the loader (vr_config_parse) and transformers read it: a key given twice
 * is its last (cJSON's lookups and deletes would find the first, and a saved config would keep
 * the stale copy that Python then reads). NULL when out of memory (the text parsed at load). */
static cJSON *vr_lm_config_tree(const vr_lm_t *lm) {
  char err[256];
  return vr_json_parse_file(lm->config_json, strlen(lm->config_json), "config.json", VR_JSON_DUP_LAST, err, sizeof err);
}

static int vr_lm_add(vr_lm_t *lm, const char *name, int64_t d0, int64_t d1) {
  if (lm->n_t == lm->cap_t) {
    size_t cap = lm->cap_t ? 2 * lm->cap_t : 64;
    vr_lm_tensor_t *nt = realloc(lm->t, cap * sizeof *nt);
    if (!nt) return -1;
    lm->t = nt;
    lm->cap_t = cap;
  }
  vr_lm_tensor_t *e = &lm->t[lm->n_t];
  memset(e, 0, sizeof *e);
  snprintf(e->name, sizeof e->name, "%s", name);
  e->ndim = d1 > 0 ? 2 : 1;
  e->shape[0] = d0;
  e->shape[1] = d1 > 0 ? d1 : 1;
  e->numel = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
  e->offset = lm->n_floats;
  lm->n_floats += (e->numel + VR_LM_ALIGN - 1) / VR_LM_ALIGN * VR_LM_ALIGN;
  return (int)lm->n_t++;
}

/* Builds the table for lm->cfg (order of vr_lm.h). 0 or VR_ERR_NOMEM. */
static int vr_lm_layout(vr_lm_t *lm) {
  const vr_lm_config_t *c = &lm->cfg;
  int64_t C = c->hidden_size, F = c->intermediate_size, QD = (int64_t)c->num_heads * c->head_dim,
          KD = (int64_t)c->num_kv_heads * c->head_dim;
  lm->layers = calloc((size_t)c->num_layers, sizeof *lm->layers);
  if (!lm->layers) return VR_ERR_NOMEM;
  int bad = 0;
#define ADD(dst, d0, d1, ...)                       \
  do {                                              \
    char nm_[80];                                   \
    snprintf(nm_, sizeof nm_, __VA_ARGS__);         \
    (dst) = vr_lm_add(lm, nm_, (d0), (d1));         \
    bad |= (dst) < 0;                               \
  } while (0)
  ADD(lm->index.embed, c->vocab_size, C, "model.embed_tokens.weight");
  for (int l = 0; l < c->num_layers; l++) {
    vr_lm_layer_index_t *L = &lm->layers[l];
    memset(L, 0xff, sizeof *L); /* every entry -1 */
    const char *p = "model.layers";
    /* the weights of q, k, v (and of gate, up) adjacent, their biases after them: a backend runs
     * each group as one GEMM over the adjacent weights (and one bias epilogue) */
    ADD(L->q_w, QD, C, "%s.%d.self_attn.q_proj.weight", p, l);
    ADD(L->k_w, KD, C, "%s.%d.self_attn.k_proj.weight", p, l);
    ADD(L->v_w, KD, C, "%s.%d.self_attn.v_proj.weight", p, l);
    if (c->qkv_bias) ADD(L->q_b, QD, 0, "%s.%d.self_attn.q_proj.bias", p, l);
    if (c->qkv_bias) ADD(L->k_b, KD, 0, "%s.%d.self_attn.k_proj.bias", p, l);
    if (c->qkv_bias) ADD(L->v_b, KD, 0, "%s.%d.self_attn.v_proj.bias", p, l);
    ADD(L->o_w, C, QD, "%s.%d.self_attn.o_proj.weight", p, l);
    if (c->o_bias) ADD(L->o_b, C, 0, "%s.%d.self_attn.o_proj.bias", p, l);
    ADD(L->gate_w, F, C, "%s.%d.mlp.gate_proj.weight", p, l);
    ADD(L->up_w, F, C, "%s.%d.mlp.up_proj.weight", p, l);
    if (c->mlp_bias) ADD(L->gate_b, F, 0, "%s.%d.mlp.gate_proj.bias", p, l);
    if (c->mlp_bias) ADD(L->up_b, F, 0, "%s.%d.mlp.up_proj.bias", p, l);
    ADD(L->down_w, C, F, "%s.%d.mlp.down_proj.weight", p, l);
    if (c->mlp_bias) ADD(L->down_b, C, 0, "%s.%d.mlp.down_proj.bias", p, l);
    ADD(L->norm1, C, 0, "%s.%d.input_layernorm.weight", p, l);
    ADD(L->norm2, C, 0, "%s.%d.post_attention_layernorm.weight", p, l);
  }
  ADD(lm->index.final_norm, C, 0, "model.norm.weight");
  lm->index.lm_head = lm->index.score_w = lm->index.score_b = -1;
  if (c->head == VR_LM_HEAD_LM && !c->tie_word_embeddings) ADD(lm->index.lm_head, c->vocab_size, C, "lm_head.weight");
  if (c->head == VR_LM_HEAD_VALUE) {
    ADD(lm->index.score_w, 1, C, "score.weight");
    ADD(lm->index.score_b, 1, 0, "score.bias");
  }
#undef ADD
  lm->index.layers = lm->layers;
  return bad ? VR_ERR_NOMEM : 0;
}

/* Copies (converting to fp32) a loader tensor into table entry i; shapes were checked by the
 * loader, the element count is checked again here. */
static int vr_lm_fill(vr_lm_t *lm, int i, const vr_tensor_t *src) {
  vr_lm_tensor_t *e = &lm->t[i];
  size_t n = src->nbytes / (src->dtype == VR_DTYPE_F32 ? 4 : 2);
  if (n != e->numel) {
    vr_log(VR_LOG_ERROR, "%s: tensor '%s' has %zu elements, expected %zu", lm->dir, e->name, n, e->numel);
    return VR_ERR_MODEL_FORMAT;
  }
  float *f = vr_tensor_to_f32(src);
  if (!f) return VR_ERR_NOMEM;
  memcpy(lm->params + e->offset, f, n * sizeof(float));
  free(f);
  return 0;
}

/* splitmix64 -> uniform in (0, 1) */
static double vr_lm_uniform(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return ((double)(z >> 11) + 0.5) / 9007199254740992.0;
}

static int vr_lm_copy_weights(vr_lm_t *lm, const vr_model_config_t *mc, const vr_model_weights_t *w,
                              uint64_t seed) {
  const vr_lm_config_t *c = &lm->cfg;
  int rc = vr_lm_fill(lm, lm->index.embed, w->tok_emb);
  for (int l = 0; l < c->num_layers && rc == 0; l++) {
    const vr_layer_weights_t *s = &w->layers[l];
    const vr_lm_layer_index_t *L = &lm->layers[l];
    const struct { int i; const vr_tensor_t *t; } m[] = {
        {L->q_w, s->q_w}, {L->q_b, s->q_b}, {L->k_w, s->k_w}, {L->k_b, s->k_b}, {L->v_w, s->v_w},
        {L->v_b, s->v_b}, {L->o_w, s->o_w}, {L->o_b, s->o_b}, {L->gate_w, s->gate_w},
        {L->gate_b, s->gate_b}, {L->up_w, s->up_w}, {L->up_b, s->up_b}, {L->down_w, s->down_w},
        {L->down_b, s->down_b}, {L->norm1, s->norm1_w}, {L->norm2, s->norm2_w}};
    for (size_t k = 0; k < sizeof m / sizeof m[0] && rc == 0; k++)
      if (m[k].i >= 0) rc = m[k].t ? vr_lm_fill(lm, m[k].i, m[k].t) : VR_ERR_MODEL_FORMAT;
  }
  if (rc == 0) rc = vr_lm_fill(lm, lm->index.final_norm, w->final_norm_w);
  if (rc == 0 && lm->index.lm_head >= 0) rc = vr_lm_fill(lm, lm->index.lm_head, w->head2_w);
  if (rc == 0 && c->head == VR_LM_HEAD_VALUE) {
    float *sw = lm->params + lm->t[lm->index.score_w].offset;
    float *sb = lm->params + lm->t[lm->index.score_b].offset;
    if (mc->task == VR_TASK_CAUSAL_LM) {
      uint64_t st = seed;
      for (int i = 0; i < c->hidden_size; i++) { /* Box-Muller, one normal per pair of draws */
        double u1 = vr_lm_uniform(&st), u2 = vr_lm_uniform(&st);
        sw[i] = (float)(c->initializer_range * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
      }
      sb[0] = 0.0f;
    } else {
      if (w->head2_w->shape[0] != 1) {
        vr_log(VR_LOG_ERROR, "%s: score.weight has %lld rows; a value head needs num_labels = 1", lm->dir,
               (long long)w->head2_w->shape[0]);
        return VR_ERR_UNSUPPORTED;
      }
      rc = vr_lm_fill(lm, lm->index.score_w, w->head2_w);
      if (rc == 0 && w->head2_b) rc = vr_lm_fill(lm, lm->index.score_b, w->head2_b);
      else if (rc == 0) sb[0] = 0.0f;
    }
  }
  return rc;
}

int vr_lm_load(const char *dir, const vr_lm_load_options_t *opt, vr_lm_t **out) {
  if (!dir || !out) return VR_ERR_INVAL;
  *out = NULL;
  vr_lm_load_options_t o = {0};
  if (opt) o = *opt;
  vr_model_t *m = NULL;
  int rc = vr_model_weights_open(dir, &m);
  if (rc != 0) return rc;
  const vr_model_config_t *mc = vr_model_weights_config(m);
  const vr_model_info_t *info = vr_model_info(m);
  if (o.head == VR_LM_HEAD_LM && mc->task != VR_TASK_CAUSAL_LM) {
    vr_log(VR_LOG_ERROR, "%s: %s has no lm_head; the actor/reference needs a *ForCausalLM checkpoint", dir,
           info->architecture);
    vr_model_free(m);
    return VR_ERR_UNSUPPORTED;
  }
  vr_lm_t *lm = calloc(1, sizeof *lm);
  if (!lm) {
    vr_model_free(m);
    return VR_ERR_NOMEM;
  }
  snprintf(lm->dir, sizeof lm->dir, "%s", dir);
  vr_lm_config_t *c = &lm->cfg;
  c->family = mc->arch == VR_ARCH_QWEN2 ? VR_LM_QWEN2 : mc->arch == VR_ARCH_MISTRAL ? VR_LM_MISTRAL : VR_LM_LLAMA;
  c->head = o.head;
  snprintf(c->model_type, sizeof c->model_type, "%s", info->model_type);
  c->vocab_size = mc->vocab_size;
  c->hidden_size = mc->hidden_size;
  c->num_layers = mc->num_layers;
  c->num_heads = mc->num_heads;
  c->num_kv_heads = mc->num_kv_heads;
  c->head_dim = mc->head_dim;
  c->intermediate_size = mc->intermediate_size;
  c->max_position_embeddings = mc->max_position_embeddings;
  c->rms_norm_eps = mc->norm_eps;
  c->tie_word_embeddings = o.head == VR_LM_HEAD_LM ? mc->tie_word_embeddings : 0;
  c->qkv_bias = mc->attention_bias;
  c->o_bias = mc->o_bias;
  c->mlp_bias = mc->mlp_bias;
  c->sliding_window = mc->sliding_window;
  c->rope_theta = mc->rope_theta;
  c->rope_attention_scaling = mc->rope_attention_scaling;
  c->initializer_range = 0.02f;
  size_t jlen = 0;
  const char *json = vr_model_weights_config_json(m, &jlen);
  lm->config_json = malloc(jlen + 1);
  lm->inv_freq = malloc((size_t)(c->head_dim / 2) * sizeof(float));
  rc = lm->config_json && lm->inv_freq ? 0 : VR_ERR_NOMEM;
  if (rc == 0) {
    memcpy(lm->config_json, json, jlen);
    lm->config_json[jlen] = 0;
    memcpy(lm->inv_freq, mc->rope_inv_freq, (size_t)(c->head_dim / 2) * sizeof(float));
    c->rope_inv_freq = lm->inv_freq;
    cJSON *root = vr_lm_config_tree(lm);
    const cJSON *ir = root ? cJSON_GetObjectItemCaseSensitive(root, "initializer_range") : NULL;
    if (cJSON_IsNumber(ir) && ir->valuedouble > 0 && ir->valuedouble < 10) c->initializer_range = (float)ir->valuedouble;
    cJSON_Delete(root);
    rc = vr_lm_layout(lm);
  }
  if (rc == 0) {
    size_t bytes = (lm->n_floats * sizeof(float) + 63) & ~(size_t)63;
    lm->params = aligned_alloc(64, bytes ? bytes : 64);
    if (!lm->params) rc = VR_ERR_NOMEM;
    else memset(lm->params, 0, bytes);
  }
  if (rc == 0) rc = vr_lm_copy_weights(lm, mc, vr_model_weights_tensors(m), o.seed);
  vr_model_free(m);
  if (rc != 0) {
    if (rc == VR_ERR_NOMEM) vr_log(VR_LOG_ERROR, "%s: out of memory for %zu parameters", dir, lm->n_floats);
    vr_lm_free(lm);
    return rc;
  }
  *out = lm;
  return 0;
}

void vr_lm_free(vr_lm_t *lm) {
  if (!lm) return;
  free(lm->inv_freq);
  free(lm->t);
  free(lm->layers);
  free(lm->params);
  free(lm->config_json);
  free(lm);
}

/* ---- save ---------------------------------------------------------------------------- */

int vr_lm_write_file(const char *path, const void *const *parts, const size_t *lens, int n_parts) {
  char tmp[VR_LM_PATH_MAX + 8];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return VR_ERR_INVAL; /* vr_lm_save checked */
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    vr_log(VR_LOG_ERROR, "%s: cannot create: %s", tmp, strerror(errno));
    return VR_ERR_IO;
  }
  int ok = 1;
  for (int i = 0; i < n_parts && ok; i++) ok = fwrite(parts[i], 1, lens[i], f) == lens[i];
  ok = fflush(f) == 0 && ok;
  ok = fsync(fileno(f)) == 0 && ok;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    vr_log(VR_LOG_ERROR, "%s: write failed: %s", path, strerror(errno));
    unlink(tmp);
    return VR_ERR_IO;
  }
  return 0;
}

static int vr_lm_save_safetensors(const vr_lm_t *lm, const char *path) {
  cJSON *h = cJSON_CreateObject();
  cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
  cJSON_AddStringToObject(meta, "format", "pt");
  uint64_t off = 0;
  for (size_t i = 0; i < lm->n_t; i++) {
    const vr_lm_tensor_t *e = &lm->t[i];
    cJSON *o = cJSON_AddObjectToObject(h, e->name);
    cJSON_AddStringToObject(o, "dtype", "F32");
    cJSON *sh = cJSON_AddArrayToObject(o, "shape");
    for (int d = 0; d < e->ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)e->shape[d]));
    cJSON *dof = cJSON_AddArrayToObject(o, "data_offsets");
    cJSON_AddItemToArray(dof, cJSON_CreateNumber((double)off));
    off += e->numel * sizeof(float);
    cJSON_AddItemToArray(dof, cJSON_CreateNumber((double)off));
  }
  char *js = cJSON_PrintUnformatted(h);
  cJSON_Delete(h);
  if (!js) return VR_ERR_NOMEM;
  size_t jl = strlen(js), padded = (jl + 7) / 8 * 8;
  char *hdr = malloc(8 + padded);
  if (!hdr) {
    free(js);
    return VR_ERR_NOMEM;
  }
  uint64_t n = padded;
  for (int b = 0; b < 8; b++) hdr[b] = (char)((n >> (8 * b)) & 0xff);
  memcpy(hdr + 8, js, jl);
  memset(hdr + 8 + jl, ' ', padded - jl);
  free(js);
  size_t np = 1 + lm->n_t;
  const void **parts = malloc(np * sizeof *parts);
  size_t *lens = malloc(np * sizeof *lens);
  int rc = VR_ERR_NOMEM;
  if (parts && lens) {
    parts[0] = hdr;
    lens[0] = 8 + padded;
    for (size_t i = 0; i < lm->n_t; i++) {
      parts[1 + i] = lm->params + lm->t[i].offset;
      lens[1 + i] = lm->t[i].numel * sizeof(float);
    }
    rc = vr_lm_write_file(path, parts, lens, (int)np);
  }
  free(parts);
  free(lens);
  free(hdr);
  return rc;
}

static int vr_lm_save_config(const vr_lm_t *lm, const char *path) {
  cJSON *root = vr_lm_config_tree(lm);
  if (!root) return VR_ERR_NOMEM; /* it parsed at load */
  cJSON_DeleteItemFromObjectCaseSensitive(root, "architectures");
  cJSON *a = cJSON_AddArrayToObject(root, "architectures");
  cJSON_AddItemToArray(a, cJSON_CreateString(vr_lm_arch_name(lm->cfg.family, lm->cfg.head)));
  cJSON_DeleteItemFromObjectCaseSensitive(root, "torch_dtype");
  cJSON_DeleteItemFromObjectCaseSensitive(root, "dtype");
  cJSON_AddStringToObject(root, "dtype", "float32");
  if (lm->cfg.head == VR_LM_HEAD_VALUE) {
    cJSON_DeleteItemFromObjectCaseSensitive(root, "num_labels");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "id2label");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "label2id");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "id2label"), "0", "LABEL_0");
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(root, "label2id"), "LABEL_0", 0);
  }
  char *js = cJSON_Print(root);
  cJSON_Delete(root);
  if (!js) return VR_ERR_NOMEM;
  const void *parts[2] = {js, "\n"};
  size_t lens[2] = {strlen(js), 1};
  int rc = vr_lm_write_file(path, parts, lens, 2);
  free(js);
  return rc;
}

/* Copies src to dst when src exists (0 when it does not). */
static int vr_lm_copy_optional(const char *src, const char *dst) {
  FILE *f = fopen(src, "rb");
  if (!f) return errno == ENOENT ? 0 : VR_ERR_IO;
  char *buf = NULL;
  size_t len = 0, cap = 0, got;
  char chunk[65536];
  int rc = 0;
  while ((got = fread(chunk, 1, sizeof chunk, f)) > 0 && rc == 0) {
    if (len + got > cap) {
      cap = (len + got) * 2;
      char *nb = realloc(buf, cap);
      if (!nb) rc = VR_ERR_NOMEM;
      else buf = nb;
    }
    if (rc == 0) memcpy(buf + len, chunk, got), len += got;
  }
  fclose(f);
  if (rc == 0) {
    const void *parts[1] = {buf ? buf : ""};
    rc = vr_lm_write_file(dst, parts, &len, 1);
  }
  free(buf);
  return rc;
}

int vr_lm_save(const vr_lm_t *lm, const char *dir) {
  if (!lm || !dir) return VR_ERR_INVAL;
  char path[VR_LM_PATH_MAX], src[VR_LM_PATH_MAX];
  /* the longest name written, with its temporary suffix, must fit: no file under a cut name */
  if (snprintf(path, sizeof path, "%s/generation_config.json.tmp", dir) >= (int)sizeof path) {
    vr_log(VR_LOG_ERROR, "checkpoint directory path too long (%zu bytes; its files' paths must stay under %d): %s",
           strlen(dir), VR_LM_PATH_MAX, dir);
    return VR_ERR_INVAL;
  }
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    vr_log(VR_LOG_ERROR, "%s: cannot create the checkpoint directory: %s", dir, strerror(errno));
    return VR_ERR_IO;
  }
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  int rc = vr_lm_save_safetensors(lm, path);
  if (rc == 0) {
    snprintf(path, sizeof path, "%s/config.json", dir);
    rc = vr_lm_save_config(lm, path);
  }
  if (rc == 0) {
    snprintf(src, sizeof src, "%s/generation_config.json", lm->dir);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (strcmp(src, path) != 0) rc = vr_lm_copy_optional(src, path);
    if (rc != 0) vr_log(VR_LOG_ERROR, "%s: cannot copy generation_config.json to %s", lm->dir, dir);
  }
  return rc;
}

/* ---- accessors ------------------------------------------------------------------------- */

const vr_lm_config_t *vr_lm_config(const vr_lm_t *lm) { return &lm->cfg; }
const vr_lm_index_t *vr_lm_index(const vr_lm_t *lm) { return &lm->index; }
size_t vr_lm_n_tensors(const vr_lm_t *lm) { return lm->n_t; }
const vr_lm_tensor_t *vr_lm_tensor(const vr_lm_t *lm, size_t i) { return i < lm->n_t ? &lm->t[i] : NULL; }
const char *vr_lm_dir(const vr_lm_t *lm) { return lm->dir; }
float *vr_lm_params(vr_lm_t *lm) { return lm->params; }
const float *vr_lm_params_const(const vr_lm_t *lm) { return lm->params; }
size_t vr_lm_n_floats(const vr_lm_t *lm) { return lm->n_floats; }

void vr_lm_offsets_v1(const vr_lm_t *lm, size_t *off) {
  size_t at = 0;
  /* the table's first layout: every tensor in model.named_parameters() order, each bias right
   * after its weight (-1 entries: absent) */
#define AT(i)                                                                           \
  do {                                                                                  \
    if ((i) >= 0) {                                                                     \
      off[(i)] = at;                                                                    \
      at += (lm->t[(i)].numel + VR_LM_ALIGN - 1) / VR_LM_ALIGN * VR_LM_ALIGN;           \
    }                                                                                   \
  } while (0)
  const vr_lm_index_t *ix = &lm->index;
  AT(ix->embed);
  for (int l = 0; l < lm->cfg.num_layers; l++) {
    const vr_lm_layer_index_t *L = &ix->layers[l];
    const int order[] = {L->q_w,    L->q_b,    L->k_w,  L->k_b,  L->v_w,    L->v_b,  L->o_w, L->o_b,
                         L->gate_w, L->gate_b, L->up_w, L->up_b, L->down_w, L->down_b, L->norm1, L->norm2};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) AT(order[k]);
  }
  AT(ix->final_norm);
  AT(ix->lm_head);
  AT(ix->score_w);
  AT(ix->score_b);
#undef AT
}

int vr_lm_find(const vr_lm_t *lm, const char *name) {
  for (size_t i = 0; i < lm->n_t; i++)
    if (strcmp(lm->t[i].name, name) == 0) return (int)i;
  return -1;
}

size_t vr_lm_n_params(const vr_lm_t *lm) {
  size_t n = 0;
  for (size_t i = 0; i < lm->n_t; i++) n += lm->t[i].numel;
  return n;
}

int vr_lm_set_params(vr_lm_t *lm, const float *src, size_t n) {
  if (!lm || !src || n != lm->n_floats) return VR_ERR_INVAL;
  memcpy(lm->params, src, n * sizeof(float));
  return 0;
}

int vr_lm_get_params(const vr_lm_t *lm, float *dst, size_t n) {
  if (!lm || !dst || n != lm->n_floats) return VR_ERR_INVAL;
  memcpy(dst, lm->params, n * sizeof(float));
  return 0;
}
