/* vr_cuda_backend.cu: the "cuda" backend (vr_backend_ops_t vr_backend_cuda).
 *
 * init: selects device N (cudaSetDevice, so CUDA_VISIBLE_DEVICES applies),
 * converts every weight once to bf16 on the device (norms, biases and heads
 * to fp32; embedding tables stay fp32 when the files are f32/f16), fuses q/k/v into one (Nqkv, C) matrix and gate/up into one
 * (2I, C) matrix, and allocates everything a forward needs for
 * max_batch_tokens / max_seqs: activations, the cuBLASLt workspace, a pinned
 * host staging buffer for ids/positions/cu_seqlens/tiles and the scores.
 * After the first forward of each token bucket nothing is allocated again.
 *
 * forward (one thread at a time): builds the packed-batch metadata on the
 * host (positions, score rows, attention tiles), copies it asynchronously
 * from pinned memory, runs the layers, copies the scores back and waits.
 * Batches of at most VR_CUDA_GRAPH_MAX tokens are padded up to a power-of-two
 * bucket and replayed from a CUDA graph captured on the bucket's second use
 * (the first runs eagerly and warms plans and modules); the padding rows are
 * no sequence's tokens and are never scored. VR_CUDA_GRAPHS=0 disables graphs.
 *
 * Activations: residual stream x in fp32 (T, C); GEMM inputs in bf16. The
 * residual add and the bias are fused into the output GEMM's epilogue
 * (D = x + A W^T + b, fp32 C/D), then the norm kernel writes the next bf16
 * input. Scores: decoders at the row the loader's rule picks (see
 * score_row()), encoders at the sequence's first token. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_backend.h"
#include "vr_cuda_check.h"
#include "vr_cuda_ops.h"

#define VR_CUDA_GRAPH_MAX 2048u
#define VR_CUDA_MAX_BUCKETS 8
#define VR_CUDA_GEMM_WORKSPACE (32u << 20)
#define VR_CUDA_MAX_ALLOCS 4096

typedef struct vr_cuda_layer {
  uint16_t *wqkv;  /* (Nqkv, C) */
  uint16_t *wo;    /* (C, H*D) */
  uint16_t *wup;   /* enc: (I, C); dec: gate|up (2I, C) */
  uint16_t *wdown; /* (C, I) */
  uint16_t *bqkv;  /* bf16 (Nqkv) or NULL */
  float *bo;       /* fp32 (C) or NULL */
  uint16_t *bgu;   /* dec: bf16 (2I) or NULL */
  float *bup;      /* enc: fp32 (I) or NULL */
  float *bdown;    /* fp32 (C) or NULL */
  float *n1w, *n1b, *n2w, *n2b;
} vr_cuda_layer_t;

typedef struct vr_cuda_bucket {
  uint32_t T;
  int uses;
  cudaGraphExec_t exec;
} vr_cuda_bucket_t;

typedef struct vr_cuda_state {
  vr_model_config_t cfg; /* copy; cfg.rope_inv_freq is not used after init */
  int device, num_sms, nqkv;
  char device_name[64];
  cudaStream_t stream;
  vr_cuda_gemm_t *gemm;
  void *allocs[VR_CUDA_MAX_ALLOCS];
  int n_allocs;
  size_t device_bytes, host_bytes;
  void *staging;
  size_t staging_bytes;

  void *tok, *pos_emb, *type_emb; /* bf16, or fp32 when emb_f32 */
  int emb_f32;
  float *emb_w, *emb_b, *final_w, *head1_w, *head1_b, *head2_w, *head2_b, *inv_freq;
  vr_cuda_layer_t *layers;

  uint32_t max_tokens, max_seqs, max_tiles;
  float *x, *scores_d;
  uint16_t *xn, *qkv, *ao, *mlp, *act;
  int32_t *in_d, *in_h; /* device / pinned host copies of the batch metadata */
  size_t in_words;
  float *scores_h;
  int32_t *tile_tmp;    /* host scratch for sorting tiles */
  int use_graphs;
  vr_cuda_bucket_t buckets[VR_CUDA_MAX_BUCKETS];
  int n_buckets;
} vr_cuda_state_t;

/* Offsets (int32 words) of the batch metadata in in_h / in_d. */
#define OFF_META 0
#define OFF_IDS 4
#define OFF_POS(st) (OFF_IDS + (st)->max_tokens)
#define OFF_CU(st) (OFF_POS(st) + (st)->max_tokens)
#define OFF_ROWS(st) (OFF_CU(st) + (st)->max_seqs + 1)
#define OFF_TILES(st) (OFF_ROWS(st) + (st)->max_seqs)

/* ------------------------------------------------------------ allocation */

static void *dalloc(vr_cuda_state_t *st, size_t bytes) {
  if (bytes == 0) bytes = 16;
  if (st->n_allocs >= VR_CUDA_MAX_ALLOCS) {
    vr_log(VR_LOG_ERROR, "too many device allocations (%d)", st->n_allocs);
    return NULL;
  }
  void *p = NULL;
  if (VR_CUDA_TRY(cudaMalloc(&p, bytes)) != 0) {
    vr_log(VR_LOG_ERROR, "cannot allocate %zu bytes on cuda:%d (%zu already held). HINT: lower --max-batch-tokens",
           bytes, st->device, st->device_bytes);
    return NULL;
  }
  st->allocs[st->n_allocs++] = p;
  st->device_bytes += bytes;
  return p;
}

static size_t dtype_size(vr_dtype_t d) { return d == VR_DTYPE_F32 ? 4 : 2; }

static size_t tensor_numel(const vr_tensor_t *t) {
  size_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= (size_t)t->shape[i];
  return n;
}

/* Checks a tensor has `numel` elements and a consistent byte size. */
static int check_tensor(const vr_tensor_t *t, size_t numel, const char *what) {
  if (!t) {
    vr_log(VR_LOG_ERROR, "missing tensor %s", what);
    return VR_ERR_MODEL_FORMAT;
  }
  if (t->dtype != VR_DTYPE_F32 && t->dtype != VR_DTYPE_F16 && t->dtype != VR_DTYPE_BF16) {
    vr_log(VR_LOG_ERROR, "tensor %s (%s): unsupported dtype %d", t->name ? t->name : "?", what, (int)t->dtype);
    return VR_ERR_UNSUPPORTED;
  }
  if (tensor_numel(t) != numel || t->nbytes != numel * dtype_size(t->dtype)) {
    vr_log(VR_LOG_ERROR, "tensor %s (%s): %zu elements / %zu bytes, expected %zu elements",
           t->name ? t->name : "?", what, tensor_numel(t), t->nbytes, numel);
    return VR_ERR_MODEL_FORMAT;
  }
  return 0;
}

/* Every upload, memset and conversion of init runs in order on st->stream
 * (the forward's stream, created non-blocking). A plain cudaMemcpy from
 * pageable memory may return before its DMA has landed, and a non-blocking
 * stream does not wait for the legacy stream: a conversion kernel could read
 * a half-copied staging buffer (seen on the H200 as run-to-run score changes). */

/* Copies a host tensor (as-is) into the staging buffer, in stream order. */
static const void *stage(vr_cuda_state_t *st, const vr_tensor_t *t) {
  if (t->nbytes > st->staging_bytes) {
    if (st->staging) VR_CUDA_CHECK(cudaFree(st->staging));
    st->staging = NULL;
    st->staging_bytes = 0;
    if (VR_CUDA_TRY(cudaMalloc(&st->staging, t->nbytes)) != 0) return NULL;
    st->staging_bytes = t->nbytes;
  }
  VR_CUDA_CHECK(cudaMemcpyAsync(st->staging, t->data, t->nbytes, cudaMemcpyHostToDevice, st->stream));
  return st->staging;
}

/* Uploads t (numel elements) to dst as bf16. */
static int up_bf16(vr_cuda_state_t *st, uint16_t *dst, const vr_tensor_t *t, size_t numel, const char *what) {
  int rc = check_tensor(t, numel, what);
  if (rc) return rc;
  if (t->dtype == VR_DTYPE_BF16) {
    VR_CUDA_CHECK(cudaMemcpyAsync(dst, t->data, t->nbytes, cudaMemcpyHostToDevice, st->stream));
    return 0;
  }
  const void *src = stage(st, t);
  if (!src) return VR_ERR_NOMEM;
  vr_cuda_convert_to_bf16(dst, src, (int)t->dtype, numel, st->stream);
  VR_CUDA_CHECK(cudaStreamSynchronize(st->stream));
  return 0;
}

/* Allocates and uploads a bf16 copy; NULL tensor -> *out = NULL (optional). */
static int new_bf16(vr_cuda_state_t *st, uint16_t **out, const vr_tensor_t *t, size_t numel, const char *what,
                    int required) {
  *out = NULL;
  if (!t && !required) return 0;
  int rc = check_tensor(t, numel, what);
  if (rc) return rc;
  if (!(*out = (uint16_t *)dalloc(st, numel * 2))) return VR_ERR_NOMEM;
  return up_bf16(st, *out, t, numel, what);
}

static int new_f32(vr_cuda_state_t *st, float **out, const vr_tensor_t *t, size_t numel, const char *what,
                   int required) {
  *out = NULL;
  if (!t && !required) return 0;
  int rc = check_tensor(t, numel, what);
  if (rc) return rc;
  if (!(*out = (float *)dalloc(st, numel * 4))) return VR_ERR_NOMEM;
  const void *src = stage(st, t);
  if (!src) return VR_ERR_NOMEM;
  vr_cuda_convert_to_f32(*out, src, (int)t->dtype, numel, st->stream);
  VR_CUDA_CHECK(cudaStreamSynchronize(st->stream));
  return 0;
}

/* An embedding table in the backend's embedding dtype (st->emb_f32). */
static int new_emb(vr_cuda_state_t *st, void **out, const vr_tensor_t *t, size_t numel, const char *what) {
  if (st->emb_f32) return new_f32(st, (float **)out, t, numel, what, 1);
  return new_bf16(st, (uint16_t **)out, t, numel, what, 1);
}

/* ---------------------------------------------------------------- weights */

static int load_layer(vr_cuda_state_t *st, const vr_layer_weights_t *lw, vr_cuda_layer_t *L, int li) {
  const vr_model_config_t *c = &st->cfg;
  const size_t C = (size_t)c->hidden_size, D = (size_t)c->head_dim, I = (size_t)c->intermediate_size;
  const size_t nq = (size_t)c->num_heads * D, nkv = (size_t)c->num_kv_heads * D;
  char what[64];
  int rc;
#define WHAT(s) (snprintf(what, sizeof what, "layer %d %s", li, s), what)
  if (!(L->wqkv = (uint16_t *)dalloc(st, (nq + 2 * nkv) * C * 2))) return VR_ERR_NOMEM;
  if ((rc = up_bf16(st, L->wqkv, lw->q_w, nq * C, WHAT("q weight")))) return rc;
  if ((rc = up_bf16(st, L->wqkv + nq * C, lw->k_w, nkv * C, WHAT("k weight")))) return rc;
  if ((rc = up_bf16(st, L->wqkv + (nq + nkv) * C, lw->v_w, nkv * C, WHAT("v weight")))) return rc;
  if (lw->q_b || lw->k_b || lw->v_b) {
    if (!(L->bqkv = (uint16_t *)dalloc(st, (nq + 2 * nkv) * 2))) return VR_ERR_NOMEM;
    VR_CUDA_CHECK(cudaMemsetAsync(L->bqkv, 0, (nq + 2 * nkv) * 2, st->stream));
    if (lw->q_b && (rc = up_bf16(st, L->bqkv, lw->q_b, nq, WHAT("q bias")))) return rc;
    if (lw->k_b && (rc = up_bf16(st, L->bqkv + nq, lw->k_b, nkv, WHAT("k bias")))) return rc;
    if (lw->v_b && (rc = up_bf16(st, L->bqkv + nq + nkv, lw->v_b, nkv, WHAT("v bias")))) return rc;
  }
  if ((rc = new_bf16(st, &L->wo, lw->o_w, C * nq, WHAT("o weight"), 1))) return rc;
  if ((rc = new_f32(st, &L->bo, lw->o_b, C, WHAT("o bias"), 0))) return rc;
  if ((rc = new_f32(st, &L->n1w, lw->norm1_w, C, WHAT("norm1 weight"), 1))) return rc;
  if ((rc = new_f32(st, &L->n2w, lw->norm2_w, C, WHAT("norm2 weight"), 1))) return rc;
  if (c->is_decoder) {
    if (!(L->wup = (uint16_t *)dalloc(st, 2 * I * C * 2))) return VR_ERR_NOMEM;
    if ((rc = up_bf16(st, L->wup, lw->gate_w, I * C, WHAT("gate weight")))) return rc;
    if ((rc = up_bf16(st, L->wup + I * C, lw->up_w, I * C, WHAT("up weight")))) return rc;
    if (lw->gate_b || lw->up_b) { /* llama mlp_bias: one fused (2I) bias, absent halves 0 */
      if (!(L->bgu = (uint16_t *)dalloc(st, 2 * I * 2))) return VR_ERR_NOMEM;
      VR_CUDA_CHECK(cudaMemsetAsync(L->bgu, 0, 2 * I * 2, st->stream));
      if (lw->gate_b && (rc = up_bf16(st, L->bgu, lw->gate_b, I, WHAT("gate bias")))) return rc;
      if (lw->up_b && (rc = up_bf16(st, L->bgu + I, lw->up_b, I, WHAT("up bias")))) return rc;
    }
  } else {
    if ((rc = new_f32(st, &L->n1b, lw->norm1_b, C, WHAT("norm1 bias"), 1))) return rc;
    if ((rc = new_f32(st, &L->n2b, lw->norm2_b, C, WHAT("norm2 bias"), 1))) return rc;
    if ((rc = new_bf16(st, &L->wup, lw->up_w, I * C, WHAT("up weight"), 1))) return rc;
    if ((rc = new_f32(st, &L->bup, lw->up_b, I, WHAT("up bias"), 0))) return rc;
  }
  if ((rc = new_bf16(st, &L->wdown, lw->down_w, C * I, WHAT("down weight"), 1))) return rc;
  if ((rc = new_f32(st, &L->bdown, lw->down_b, C, WHAT("down bias"), 0))) return rc;
#undef WHAT
  return 0;
}

static int load_weights(vr_cuda_state_t *st, const vr_model_weights_t *w) {
  const vr_model_config_t *c = &st->cfg;
  const size_t C = (size_t)c->hidden_size;
  int rc;
  /* Embedding tables stay fp32 when the file has more than bf16 precision: they
   * start the residual stream (which is fp32), and a lookup costs no bandwidth. */
  st->emb_f32 = w->tok_emb && w->tok_emb->dtype != VR_DTYPE_BF16;
  if ((rc = new_emb(st, &st->tok, w->tok_emb, (size_t)c->vocab_size * C, "token embeddings"))) return rc;
  if (c->is_decoder) {
    if ((rc = new_f32(st, &st->final_w, w->final_norm_w, C, "final norm weight", 1))) return rc;
    if ((rc = new_f32(st, &st->head2_w, w->head2_w, C, "score weight", 1))) return rc;
    const size_t half = (size_t)c->head_dim / 2;
    if (!c->rope_inv_freq) {
      vr_log(VR_LOG_ERROR, "decoder config without rope_inv_freq");
      return VR_ERR_INVAL;
    }
    if (!(st->inv_freq = (float *)dalloc(st, half * 4))) return VR_ERR_NOMEM;
    VR_CUDA_CHECK(cudaMemcpyAsync(st->inv_freq, c->rope_inv_freq, half * 4, cudaMemcpyHostToDevice, st->stream));
  } else {
    if (!w->pos_emb) {
      vr_log(VR_LOG_ERROR, "encoder without position embeddings");
      return VR_ERR_MODEL_FORMAT;
    }
    const int64_t npos = w->pos_emb->ndim == 2 ? w->pos_emb->shape[0] : 0;
    if (npos < (int64_t)c->max_seq_len + c->position_offset) {
      vr_log(VR_LOG_ERROR, "position embeddings %s: %lld rows < max_seq_len %d + offset %d",
             w->pos_emb->name ? w->pos_emb->name : "?", (long long)npos, c->max_seq_len, c->position_offset);
      return VR_ERR_MODEL_FORMAT;
    }
    if ((rc = new_emb(st, &st->pos_emb, w->pos_emb, (size_t)npos * C, "position embeddings"))) return rc;
    if (w->type_emb && (rc = new_emb(st, &st->type_emb, w->type_emb, tensor_numel(w->type_emb), "type embeddings")))
      return rc;
    if (st->type_emb && tensor_numel(w->type_emb) < C) return VR_ERR_MODEL_FORMAT;
    if ((rc = new_f32(st, &st->emb_w, w->emb_norm_w, C, "embedding norm weight", 1))) return rc;
    if ((rc = new_f32(st, &st->emb_b, w->emb_norm_b, C, "embedding norm bias", 1))) return rc;
    if ((rc = new_f32(st, &st->head1_w, w->head1_w, C * C, "head dense weight", 1))) return rc;
    if ((rc = new_f32(st, &st->head1_b, w->head1_b, C, "head dense bias", 0))) return rc;
    if ((rc = new_f32(st, &st->head2_w, w->head2_w, C, "head out weight", 1))) return rc;
    if ((rc = new_f32(st, &st->head2_b, w->head2_b, 1, "head out bias", 0))) return rc;
  }
  st->layers = (vr_cuda_layer_t *)calloc((size_t)c->num_layers, sizeof(vr_cuda_layer_t));
  if (!st->layers) return VR_ERR_NOMEM;
  for (int l = 0; l < c->num_layers; ++l)
    if ((rc = load_layer(st, &w->layers[l], &st->layers[l], l))) return rc;
  return 0;
}

/* -------------------------------------------------------------- workspace */

static int alloc_workspace(vr_cuda_state_t *st) {
  const vr_model_config_t *c = &st->cfg;
  const size_t T = st->max_tokens, C = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
  const size_t nq = (size_t)c->num_heads * c->head_dim;
  st->max_tiles = st->max_tokens / VR_CUDA_ATTN_BM + st->max_seqs + 1;
  if (!(st->x = (float *)dalloc(st, T * C * 4))) return VR_ERR_NOMEM;
  if (!(st->xn = (uint16_t *)dalloc(st, T * C * 2))) return VR_ERR_NOMEM;
  if (!(st->qkv = (uint16_t *)dalloc(st, T * (size_t)st->nqkv * 2))) return VR_ERR_NOMEM;
  if (!(st->ao = (uint16_t *)dalloc(st, T * nq * 2))) return VR_ERR_NOMEM;
  if (!(st->mlp = (uint16_t *)dalloc(st, T * (c->is_decoder ? 2 : 1) * I * 2))) return VR_ERR_NOMEM;
  if (c->is_decoder && !(st->act = (uint16_t *)dalloc(st, T * I * 2))) return VR_ERR_NOMEM;
  if (!(st->scores_d = (float *)dalloc(st, (size_t)st->max_seqs * 4))) return VR_ERR_NOMEM;
  st->in_words = OFF_TILES(st) + 2 * (size_t)st->max_tiles;
  if (!(st->in_d = (int32_t *)dalloc(st, st->in_words * 4))) return VR_ERR_NOMEM;
  /* Defined contents everywhere: padding rows of a graph bucket read them. */
  VR_CUDA_CHECK(cudaMemsetAsync(st->x, 0, T * C * 4, st->stream));
  VR_CUDA_CHECK(cudaMemsetAsync(st->xn, 0, T * C * 2, st->stream));
  VR_CUDA_CHECK(cudaMemsetAsync(st->ao, 0, T * nq * 2, st->stream));
  VR_CUDA_CHECK(cudaMemsetAsync(st->in_d, 0, st->in_words * 4, st->stream));
  if (VR_CUDA_TRY(cudaMallocHost((void **)&st->in_h, st->in_words * 4)) != 0) return VR_ERR_NOMEM;
  if (VR_CUDA_TRY(cudaMallocHost((void **)&st->scores_h, (size_t)st->max_seqs * 4)) != 0) return VR_ERR_NOMEM;
  st->host_bytes += st->in_words * 4 + (size_t)st->max_seqs * 4;
  memset(st->in_h, 0, st->in_words * 4);
  st->tile_tmp = (int32_t *)malloc(2 * (size_t)st->max_tiles * sizeof(int32_t));
  if (!st->tile_tmp) return VR_ERR_NOMEM;
  st->host_bytes += 2 * (size_t)st->max_tiles * sizeof(int32_t);
  return 0;
}

/* ------------------------------------------------------------------ free */

static void cuda_free(void *state) {
  vr_cuda_state_t *st = (vr_cuda_state_t *)state;
  if (!st) return;
  /* Teardown failures are logged (VR_CUDA_TRY), not fatal: the process may be
   * shutting down after a device error and must still free the host side. */
  if (VR_CUDA_TRY(cudaSetDevice(st->device)) == 0) {
    if (st->stream) (void)VR_CUDA_TRY(cudaStreamSynchronize(st->stream));
    for (int i = 0; i < st->n_buckets; ++i)
      if (st->buckets[i].exec) (void)VR_CUDA_TRY(cudaGraphExecDestroy(st->buckets[i].exec));
    vr_cuda_gemm_free(st->gemm);
    for (int i = 0; i < st->n_allocs; ++i) (void)VR_CUDA_TRY(cudaFree(st->allocs[i]));
    if (st->staging) (void)VR_CUDA_TRY(cudaFree(st->staging));
    if (st->in_h) (void)VR_CUDA_TRY(cudaFreeHost(st->in_h));
    if (st->scores_h) (void)VR_CUDA_TRY(cudaFreeHost(st->scores_h));
    if (st->stream) (void)VR_CUDA_TRY(cudaStreamDestroy(st->stream));
  }
  free(st->tile_tmp);
  free(st->layers);
  free(st);
}

/* ------------------------------------------------------------------ init */

static int check_config(const vr_model_config_t *c) {
  if (c->num_labels != 1) {
    vr_log(VR_LOG_ERROR, "num_labels %d: only 1 is supported", c->num_labels);
    return VR_ERR_UNSUPPORTED;
  }
  if (c->hidden_size <= 0 || c->num_layers <= 0 || c->num_heads <= 0 || c->num_kv_heads <= 0 ||
      c->num_heads % c->num_kv_heads || c->head_dim <= 0 || c->intermediate_size <= 0 ||
      c->vocab_size <= 0) {
    vr_log(VR_LOG_ERROR, "bad dimensions: hidden %d layers %d heads %d kv_heads %d head_dim %d inter %d vocab %d",
           c->hidden_size, c->num_layers, c->num_heads, c->num_kv_heads, c->head_dim, c->intermediate_size,
           c->vocab_size);
    return VR_ERR_MODEL_FORMAT;
  }
  if (vr_cuda_attention_path(c->head_dim) < 0 || (c->is_decoder && c->head_dim % 2)) {
    vr_log(VR_LOG_ERROR, "head_dim %d is not supported by the cuda backend (1..256, even for RoPE)", c->head_dim);
    return VR_ERR_UNSUPPORTED;
  }
  if (((size_t)(c->num_heads + 2 * c->num_kv_heads) * c->head_dim) % 8 || c->hidden_size % 8 ||
      c->intermediate_size % 8) {
    /* cuBLASLt and the 16-byte tile loads want rows that are multiples of 8 bf16 */
    if (vr_cuda_attention_path(c->head_dim) == 1) {
      vr_log(VR_LOG_ERROR, "hidden %d / intermediate %d / qkv width must be multiples of 8 on cuda",
             c->hidden_size, c->intermediate_size);
      return VR_ERR_UNSUPPORTED;
    }
  }
  return 0;
}

static int cuda_init(const vr_model_config_t *cfg, const vr_model_weights_t *w, const vr_model_options_t *opt,
                     int device_index, void **state) {
  *state = NULL;
  int rc = check_config(cfg);
  if (rc) return rc;
  if (opt && opt->dtype && strcmp(opt->dtype, "auto") && strcmp(opt->dtype, "bf16")) {
    vr_log(VR_LOG_ERROR, "compute dtype '%s' is not supported on cuda (bf16 only). HINT: --dtype bf16 or use --device cpu",
           opt->dtype);
    return VR_ERR_UNSUPPORTED;
  }
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev <= 0) {
    vr_log(VR_LOG_ERROR, "no CUDA device (%s). HINT: check the driver and CUDA_VISIBLE_DEVICES, or use --device cpu",
           e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return VR_ERR_NO_DEVICE;
  }
  if (device_index < 0 || device_index >= ndev) {
    vr_log(VR_LOG_ERROR, "device cuda:%d does not exist (%d visible). HINT: CUDA_VISIBLE_DEVICES renumbers devices from 0",
           device_index, ndev);
    return VR_ERR_NO_DEVICE;
  }
  if (VR_CUDA_TRY(cudaSetDevice(device_index))) return VR_ERR_DEVICE;
  vr_cuda_state_t *st = (vr_cuda_state_t *)calloc(1, sizeof(*st));
  if (!st) return VR_ERR_NOMEM;
  st->cfg = *cfg;
  st->cfg.rope_inv_freq = NULL;
  st->device = device_index;
  st->nqkv = (cfg->num_heads + 2 * cfg->num_kv_heads) * cfg->head_dim;
  cudaDeviceProp prop;
  if ((rc = VR_CUDA_TRY(cudaGetDeviceProperties(&prop, device_index)))) goto fail;
  snprintf(st->device_name, sizeof st->device_name, "%.63s", prop.name);
  st->num_sms = prop.multiProcessorCount;
  st->max_tokens = (opt && opt->max_batch_tokens) ? opt->max_batch_tokens : 16384u;
  st->max_seqs = (opt && opt->max_seqs) ? opt->max_seqs : st->max_tokens;
  if (st->max_seqs > st->max_tokens) st->max_seqs = st->max_tokens;
  if ((rc = VR_CUDA_TRY(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking)))) goto fail;
  {
    const double t0 = (double)clock() / CLOCKS_PER_SEC;
    st->cfg.rope_inv_freq = cfg->rope_inv_freq; /* read during load only */
    rc = load_weights(st, w);
    st->cfg.rope_inv_freq = NULL;
    if (rc) goto fail;
    VR_CUDA_CHECK(cudaStreamSynchronize(st->stream)); /* every upload has landed */
    if (st->staging) {
      VR_CUDA_CHECK(cudaFree(st->staging));
      st->staging = NULL;
      st->staging_bytes = 0;
    }
    const size_t wbytes = st->device_bytes;
    if ((rc = alloc_workspace(st))) goto fail;
    VR_CUDA_CHECK(cudaStreamSynchronize(st->stream)); /* workspace memsets done */
    if ((rc = vr_cuda_gemm_init(&st->gemm, VR_CUDA_GEMM_WORKSPACE))) goto fail;
    st->device_bytes += VR_CUDA_GEMM_WORKSPACE;
    vr_log(VR_LOG_INFO, "cuda:%d %s: weights %.1f MiB bf16, workspace %.1f MiB for %u tokens / %u seqs (cpu %.2fs)",
           device_index, st->device_name, wbytes / 1048576.0, (st->device_bytes - wbytes) / 1048576.0,
           st->max_tokens, st->max_seqs, (double)clock() / CLOCKS_PER_SEC - t0);
  }
  {
    const char *g = getenv("VR_CUDA_GRAPHS");
    st->use_graphs = !(g && !strcmp(g, "0"));
    for (uint32_t b = 64; b <= VR_CUDA_GRAPH_MAX && b <= st->max_tokens && st->n_buckets < VR_CUDA_MAX_BUCKETS; b *= 2)
      st->buckets[st->n_buckets++].T = b;
  }
  *state = st;
  return 0;
fail:
  cuda_free(st);
  return rc ? rc : VR_ERR_DEVICE;
}

/* --------------------------------------------------------------- forward */

/* Row (packed index) whose hidden state gives sequence i's score.
 * Encoders: the first token ([CLS] / <s>). Decoders: transformers'
 * *ForSequenceClassification rule: the last token that is not pad_token_id
 * (a sequence of pad tokens only: its first token; no pad_token_id: the last
 * token), the same rule as the cpu backend. */
static uint32_t score_row(const vr_cuda_state_t *st, const int32_t *ids, const uint32_t *cu, uint32_t i) {
  if (!st->cfg.is_decoder) return cu[i];
  const int32_t pad = st->cfg.pad_token_id;
  if (pad < 0) return cu[i + 1] - 1;
  for (uint32_t t = cu[i + 1]; t > cu[i]; --t)
    if (ids[t - 1] != pad) return t - 1;
  return cu[i];
}

static int cmp_tile_desc(const void *a, const void *b) {
  const int32_t qa = ((const int32_t *)a)[1], qb = ((const int32_t *)b)[1];
  return (qa < qb) - (qa > qb);
}

/* Fills in_h for a batch of T real tokens padded to Tp; returns n_tiles or a
 * negative vr_status_t for ids/positions outside the model (defence in depth:
 * vr_model_score validated them already). */
static int build_batch(vr_cuda_state_t *st, const int32_t *ids, const uint32_t *cu, uint32_t n, uint32_t Tp) {
  const vr_model_config_t *c = &st->cfg;
  int32_t *hid = st->in_h + OFF_IDS, *hpos = st->in_h + OFF_POS(st), *hcu = st->in_h + OFF_CU(st);
  int32_t *hrows = st->in_h + OFF_ROWS(st);
  const uint32_t T = cu[n];
  /* roberta: positions count the non-pad tokens from padding_idx + 1 (= pad_token_id + 1),
   * pad tokens sit at padding_idx (transformers' create_position_ids_from_input_ids) */
  const int roberta = c->arch == VR_ARCH_ROBERTA && c->pad_token_id >= 0;
  const int max_pos = c->is_decoder ? INT32_MAX : c->max_seq_len + c->position_offset;
  uint32_t nt = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t s0 = cu[i], s1 = cu[i + 1];
    if (s1 <= s0 || s1 > T) return VR_ERR_INVAL;
    int32_t run = 0; /* roberta: count of non-pad tokens so far */
    for (uint32_t t = s0; t < s1; ++t) {
      const int32_t id = ids[t];
      if (id < 0 || id >= c->vocab_size) return VR_ERR_TOKEN_RANGE;
      int32_t p;
      if (roberta) {
        if (id == c->pad_token_id) {
          p = c->pad_token_id;
        } else {
          ++run;
          p = c->pad_token_id + run;
        }
      } else {
        p = (int32_t)(t - s0);
      }
      if (p >= max_pos) return VR_ERR_SEQ_TOO_LONG;
      hid[t] = id;
      hpos[t] = p;
    }
    hcu[i] = (int32_t)s0;
    hrows[i] = (int32_t)score_row(st, ids, cu, i);
    for (uint32_t q0 = 0; q0 < s1 - s0; q0 += VR_CUDA_ATTN_BM) {
      st->tile_tmp[2 * nt] = (int32_t)i;
      st->tile_tmp[2 * nt + 1] = (int32_t)q0;
      ++nt;
    }
  }
  hcu[n] = (int32_t)T;
  for (uint32_t t = T; t < Tp; ++t) {
    hid[t] = 0;
    hpos[t] = roberta ? c->pad_token_id : 0;
  }
  /* causal tiles deep in long sequences are the most work: schedule them first */
  if (c->is_decoder) qsort(st->tile_tmp, nt, 2 * sizeof(int32_t), cmp_tile_desc);
  memcpy(st->in_h + OFF_TILES(st), st->tile_tmp, 2 * (size_t)nt * sizeof(int32_t));
  st->in_h[OFF_META + VR_CUDA_META_N_SEQS] = (int32_t)n;
  st->in_h[OFF_META + VR_CUDA_META_N_TILES] = (int32_t)nt;
  return (int)nt;
}

static void upload_batch(vr_cuda_state_t *st, uint32_t n, uint32_t Tp, int nt) {
  cudaStream_t s = st->stream;
#define UP(off, words) \
  VR_CUDA_CHECK(cudaMemcpyAsync(st->in_d + (off), st->in_h + (off), (size_t)(words) * 4, cudaMemcpyHostToDevice, s))
  UP(OFF_META, 4);
  UP(OFF_IDS, Tp);
  UP(OFF_POS(st), Tp);
  UP(OFF_CU(st), n + 1);
  UP(OFF_ROWS(st), n);
  UP(OFF_TILES(st), 2 * (size_t)nt);
#undef UP
}

/* Enqueues the whole forward for T rows; grid_tiles / grid_seqs bound the
 * attention and score grids (device-side counts decide the real work). */
static void enqueue_forward(vr_cuda_state_t *st, int T, int grid_tiles, int grid_seqs) {
  const vr_model_config_t *c = &st->cfg;
  cudaStream_t s = st->stream;
  const int C = c->hidden_size, H = c->num_heads, Hkv = c->num_kv_heads, D = c->head_dim,
            I = c->intermediate_size;
  const int nq = H * D, ld = st->nqkv;
  const int32_t *ids = st->in_d + OFF_IDS, *pos = st->in_d + OFF_POS(st), *cu = st->in_d + OFF_CU(st);
  const int32_t *rows = st->in_d + OFF_ROWS(st), *tiles = st->in_d + OFF_TILES(st), *meta = st->in_d + OFF_META;
  const float scale = 1.f / sqrtf((float)D);
  const int tanh_gelu = c->act == VR_ACT_GELU_TANH;
  if (c->is_decoder)
    vr_cuda_embed_norm(st->x, st->xn, ids, pos, st->tok, NULL, NULL, st->emb_f32, st->layers[0].n1w, NULL, T, C,
                       c->norm_eps, s);
  else
    vr_cuda_embed_norm(st->x, st->xn, ids, pos, st->tok, st->pos_emb, st->type_emb, st->emb_f32, st->emb_w,
                       st->emb_b, T, C, c->norm_eps, s);
  for (int l = 0; l < c->num_layers; ++l) {
    const vr_cuda_layer_t *L = &st->layers[l];
    vr_cuda_gemm(st->gemm, st->qkv, 0, st->xn, L->wqkv, L->bqkv, T, ld, C, 0.f, s);
    if (c->is_decoder)
      vr_cuda_rope(st->qkv, ld, 0, nq, H, Hkv, D, pos, st->inv_freq, c->rope_attention_scaling, T, s);
    vr_cuda_attention(st->qkv, ld, 0, nq, nq + Hkv * D, st->ao, nq, cu, tiles, meta, grid_tiles, H, Hkv, D,
                      c->is_decoder, c->is_decoder ? c->sliding_window : 0, scale, s);
    vr_cuda_gemm(st->gemm, st->x, 1, st->ao, L->wo, L->bo, T, C, nq, 1.f, s); /* x += O(attn) + bo */
    if (c->is_decoder) {
      vr_cuda_rmsnorm(st->x, st->xn, L->n2w, T, C, c->norm_eps, s);
      vr_cuda_gemm(st->gemm, st->mlp, 0, st->xn, L->wup, L->bgu, T, 2 * I, C, 0.f, s);
      vr_cuda_swiglu(st->act, st->mlp, T, I, s);
      vr_cuda_gemm(st->gemm, st->x, 1, st->act, L->wdown, L->bdown, T, C, I, 1.f, s);
      if (l + 1 < c->num_layers) vr_cuda_rmsnorm(st->x, st->xn, st->layers[l + 1].n1w, T, C, c->norm_eps, s);
    } else {
      vr_cuda_layernorm(st->x, st->xn, L->n1w, L->n1b, T, C, c->norm_eps, s);
      vr_cuda_gemm(st->gemm, st->mlp, 0, st->xn, L->wup, NULL, T, I, C, 0.f, s);
      vr_cuda_bias_gelu(st->mlp, L->bup, T, I, tanh_gelu, s);
      vr_cuda_gemm(st->gemm, st->x, 1, st->mlp, L->wdown, L->bdown, T, C, I, 1.f, s);
      vr_cuda_layernorm(st->x, st->xn, L->n2w, L->n2b, T, C, c->norm_eps, s);
    }
  }
  if (c->is_decoder)
    vr_cuda_score_decoder(st->scores_d, st->x, rows, meta, st->final_w, st->head2_w, C, c->norm_eps, grid_seqs, s);
  else
    vr_cuda_score_encoder(st->scores_d, st->x, rows, meta, st->head1_w, st->head1_b, st->head2_w, st->head2_b, C,
                          grid_seqs, s);
}

static int cuda_forward(void *state, const int32_t *ids, const uint32_t *cu_seqlens, uint32_t n_seqs,
                        float *scores) {
  vr_cuda_state_t *st = (vr_cuda_state_t *)state;
  if (!st || !ids || !cu_seqlens || !scores || n_seqs == 0) return VR_ERR_INVAL;
  const uint32_t T = cu_seqlens[n_seqs];
  if (cu_seqlens[0] != 0 || T == 0 || T > st->max_tokens || n_seqs > st->max_seqs) {
    vr_log(VR_LOG_ERROR, "batch of %u tokens / %u sequences exceeds the workspace (%u / %u)", T, n_seqs,
           st->max_tokens, st->max_seqs);
    return VR_ERR_TOO_LARGE;
  }
  VR_CUDA_CHECK(cudaSetDevice(st->device));
  vr_cuda_bucket_t *bk = NULL;
  if (st->use_graphs)
    for (int i = 0; i < st->n_buckets; ++i)
      if (T <= st->buckets[i].T) {
        bk = &st->buckets[i];
        break;
      }
  const uint32_t Tp = bk ? bk->T : T;
  const int nt = build_batch(st, ids, cu_seqlens, n_seqs, Tp);
  if (nt < 0) {
    vr_log(VR_LOG_ERROR, "batch rejected: %s", vr_strerror(nt));
    return nt;
  }
  upload_batch(st, n_seqs, Tp, nt);
  if (bk && bk->exec) {
    VR_CUDA_CHECK(cudaGraphLaunch(bk->exec, st->stream));
  } else if (bk && bk->uses >= 1) {
    /* second use of this bucket: capture with upper-bound grids, then replay */
    const uint32_t seq_bound = bk->T < st->max_seqs ? bk->T : st->max_seqs;
    int gt = (int)(bk->T / VR_CUDA_ATTN_BM + seq_bound);
    const int cap = (16 * st->num_sms) / st->cfg.num_heads > 64 ? (16 * st->num_sms) / st->cfg.num_heads : 64;
    if (gt > cap) gt = cap;
    const int gs = seq_bound < 1024 ? (int)seq_bound : 1024;
    cudaGraph_t graph;
    VR_CUDA_CHECK(cudaStreamBeginCapture(st->stream, cudaStreamCaptureModeThreadLocal));
    enqueue_forward(st, (int)bk->T, gt, gs);
    VR_CUDA_CHECK(cudaStreamEndCapture(st->stream, &graph));
    VR_CUDA_CHECK(cudaGraphInstantiate(&bk->exec, graph, 0));
    VR_CUDA_CHECK(cudaGraphDestroy(graph));
    VR_CUDA_CHECK(cudaGraphLaunch(bk->exec, st->stream));
    vr_log(VR_LOG_DEBUG, "captured CUDA graph for the %u-token bucket", bk->T);
  } else {
    enqueue_forward(st, (int)Tp, nt, (int)n_seqs);
  }
  if (bk) bk->uses++;
  VR_CUDA_CHECK(cudaMemcpyAsync(st->scores_h, st->scores_d, (size_t)n_seqs * 4, cudaMemcpyDeviceToHost, st->stream));
  VR_CUDA_CHECK(cudaStreamSynchronize(st->stream));
  memcpy(scores, st->scores_h, (size_t)n_seqs * 4);
  return 0;
}

static void cuda_describe(void *state, vr_model_info_t *info) {
  const vr_cuda_state_t *st = (const vr_cuda_state_t *)state;
  if (!st || !info) return;
  snprintf(info->device, sizeof info->device, "cuda:%d", st->device);
  snprintf(info->device_name, sizeof info->device_name, "%.63s", st->device_name);
  snprintf(info->compute_dtype, sizeof info->compute_dtype, "bf16");
  info->device_bytes = st->device_bytes;
  info->host_bytes = st->host_bytes;
}

extern "C" const vr_backend_ops_t vr_backend_cuda = {
    .name = "cuda",
    .init = cuda_init,
    .forward = cuda_forward,
    .free = cuda_free,
    .describe = cuda_describe,
};
