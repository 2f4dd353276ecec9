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
 * submit / collect (one thread at a time; forward = submit + collect): two
 * slots, each with pinned host and device copies of one batch's metadata
 * (ids, positions, cu_seqlens, score rows, attention tiles: one contiguous
 * block, one copy) and pinned scores. submit builds the metadata into the
 * slot, copies it on the upload stream, makes the compute stream wait for
 * that copy's event, enqueues the forward and the scores' copy back, records
 * the slot's done event and returns; collect waits for the oldest slot's
 * event. So while batch N computes, batch N+1 is assembled and uploaded.
 * Batches are padded up to a token bucket (make_buckets: at most 25% padding up
 * to 2048 tokens, then steps of max(1024, max_tokens / 16 or / 32)) and replayed from a
 * CUDA graph per (bucket, slot); the padding rows are no sequence's tokens
 * and are never scored. A batch in a large bucket (exact_threshold(): 8192 rows, or more
 * than 2048 rows of a model with milliseconds of GEMM work per bucket) runs eagerly at
 * its exact size instead, on GEMM plans for that size (vr_cuda_gemm_set_plan_rows), and so
 * does a batch holding a sequence of VR_CUDA_LONG_SEQ tokens (its attention configuration
 * follows its longest sequence, which a bucket's graph cannot). At load
 * every bucket runs once eagerly (which also times the cuBLASLt candidates of its GEMMs with
 * cuda-autotune) and its graphs are captured, so nothing is allocated or planned on the hot
 * path. The tuning (vr_cuda_options_t: cuda-graphs off = eager forwards at the exact size,
 * cuda-warmup off = buckets warmed and captured on first use, ...) is read once, in
 * cuda_init, and logged there. Encoders: the up projection's bias + GELU run in the GEMM
 * epilogue (cuBLASLt GELU_BIAS, tanh form, bf16 bias; the exact-form kernel when the model
 * has no up bias or cuBLASLt has no such epilogue for the shape).
 *
 * Activations: decoders keep the residual stream x in fp32 (T, C); GEMM inputs
 * are bf16. The residual add and the bias are fused into the output GEMM's
 * epilogue (D = x + A W^T + b, fp32 C/D), then the norm kernel writes the next
 * bf16 input. Encoders (post-norm) keep the residual stream in bf16, as a
 * transformers bf16 forward does: the LayerNorm output xn is both the next
 * GEMM's input and the next residual; the output GEMM writes y16 = A W^T + b and
 * the norm computes xn = LN(y16 + xn) in place; the last norm also writes fp32 x for the
 * score head. That halves the bytes of the two norms and of the two residual epilogues per
 * layer; encoders narrower than VR_RES_BF16_MIN_C keep the fp32 stream (cuda-residual
 * f32 / bf16 forces either).
 * Scores: decoders at the row the loader's rule picks (see
 * score_row()), encoders at the sequence's first token.
 *
 * A forward is trunk + head: enqueue_trunk (embeddings -> layers, the last layer's output in
 * fp32 x; the score path's eager forwards run the last layer on the score rows only), then
 * enqueue_head (the score head on the score rows; decoders' final RMSNorm is fused into it).
 * cuda_hidden, the backend's .hidden entry (the trunk other components build on), runs the
 * trunk eagerly at the exact size on every row, then decoders' final RMSNorm on every row in
 * fp32, and copies the (T, C) fp32 hidden states to the caller. */
#include <cublas_v2.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_backend.h"
#include "vr_cuda_check.h"
#include "vr_cuda_ops.h"
#include "vr_progress.h"

#define VR_CUDA_MAX_BUCKETS 64
#define VR_CUDA_GEMM_WORKSPACE (32u << 20)
#define VR_CUDA_MAX_ALLOCS 4096
/* Exact-size forwards: a batch smaller than its bucket runs eagerly at its exact size
 * instead of the padded graph when the bucket holds at least VR_CUDA_EXACT_MIN_T rows, or
 * more than 2048 rows (where buckets are far apart) of a model whose bucket forward is at
 * least VR_CUDA_EXACT_MIN_MACS multiply-adds of GEMM work (8192 tokens of roberta-base,
 * milliseconds of GPU work): below that the graph's saved launch overhead is worth more than
 * the padding, above it the padding costs more (a big model's tail batch padded to the next
 * bucket: docs/benchmarks.md, "Numbers behind the CUDA backend's code"). cuda-exact-size
 * off: graphs only. */
#define VR_CUDA_EXACT_MIN_T 8192
#define VR_CUDA_EXACT_MIN_MACS 7.0e11
/* A batch holding a sequence of at least this many tokens runs eagerly at its exact size too
 * (with cuda-exact-size, the default), whatever its bucket (cuda_submit): the graph's launch
 * savings are nothing beside its tens of milliseconds, the eager forward prunes its last layer
 * and runs attention one block per tile and with the longest sequence known
 * (vr_cuda_attention_maxlen: FA3's three consumers at head_dim 64). The same length as the
 * attention's VR_CUDA_ATTN_FA3_C3_MIN_LEN, so such batches get both. */
#define VR_CUDA_LONG_SEQ VR_CUDA_ATTN_FA3_C3_MIN_LEN
/* Narrowest encoder that keeps its residual stream in bf16 by default. The rounding of the
 * stream averages out over the hidden width: on roberta-base (768) the bf16 stream stays
 * closer to fp32 transformers than transformers' own bf16 forward does, while on the 32-wide
 * 2-layer roberta fixture it doubled the error against fp32 transformers and took cuda vs
 * cpu on fresh sequences over the 1e-2 parity bound (docs/benchmarks.md, "Numbers behind
 * the CUDA backend's code"). */
#define VR_RES_BF16_MIN_C 256

typedef struct vr_cuda_layer {
  uint16_t *wqkv;  /* (Nqkv, C) */
  uint16_t *wo;    /* (C, H*D) */
  uint16_t *wup;   /* enc: (I, C); dec: gate|up (2I, C) */
  uint16_t *wdown; /* (C, I) */
  uint16_t *bqkv;  /* bf16 (Nqkv) or NULL */
  float *bo;       /* fp32 (C) or NULL */
  uint16_t *bo16, *bdown16; /* enc, bf16 residual: bf16 copies of bo / bdown, or NULL */
  uint16_t *bgu;   /* dec: bf16 (2I) or NULL */
  float *bup;      /* enc: fp32 (I) or NULL */
  uint16_t *bup16; /* enc: bf16 copy of bup for the GELU_BIAS epilogue, or NULL */
  float *bdown;    /* fp32 (C) or NULL */
  float *n1w, *n1b, *n2w, *n2b;
} vr_cuda_layer_t;

#define VR_CUDA_SLOTS 2
/* A bucket also has graphs for batches of at most this many sequences that run the last layer
 * on the score rows only (the eager path's pruning, enqueue_trunk, with this many compact rows).
 * It pays where the bucket's rows cost more than 8 rows do in a GEMM (a 2048-row bucket), not at
 * 256 rows, where cuBLASLt takes about as long either way (docs/benchmarks.md, "Issue 24: small
 * batches"). */
#define VR_CUDA_PRUNE_GRAPH_SEQS 8

/* Word offsets of one batch's metadata block (in_h / in_d of a slot). */
typedef struct vr_cuda_layout {
  uint32_t ids, pos, cu, rows, tiles, ltiles, lrows, words;
} vr_cuda_layout_t;

typedef struct vr_cuda_bucket {
  uint32_t T;
  int uses;
  int grid_tiles, grid_seqs; /* upper bounds the graphs are captured with */
  vr_cuda_layout_t lay;
  cudaGraphExec_t exec[VR_CUDA_SLOTS];
  int prune_seqs;                         /* > 0: exec_p exists for batches of at most this many */
  cudaGraphExec_t exec_p[VR_CUDA_SLOTS];  /* the last layer on prune_seqs compact rows */
} vr_cuda_bucket_t;

typedef struct vr_cuda_slot {
  int32_t *in_h, *in_d; /* pinned host / device metadata block */
  float *scores_h;      /* pinned */
  cudaEvent_t uploaded, done;
  uint32_t n;
  int busy;
} vr_cuda_slot_t;

typedef struct vr_cuda_state {
  vr_model_config_t cfg; /* copy; cfg.rope_inv_freq is not used after init */
  int device, num_sms, nqkv;
  char device_name[64];
  cudaStream_t stream, upload; /* compute (forward) stream; metadata uploads */
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
  float *head_partial; /* encoders: (max_seqs) x vr_cuda_score_encoder_blocks(C) */
  int split_attn;       /* cuda-split-attn and a head_dim the split kernel runs */
  int split_wave;       /* its blocks along the item axis: one resident wave over the heads */
  float *attn_part;     /* split attention scratch (vr_cuda_attention_split_scratch) */
  int32_t *attn_cnt;
  uint16_t *xn, *qkv, *ao, *mlp, *act;
  uint16_t *y16;        /* encoders with res_bf16: (T, C) pre-norm sums */
  int res_bf16;         /* encoders: bf16 residual stream (see the top comment) */
  size_t in_words;      /* capacity of each slot's metadata block */
  vr_cuda_slot_t slots[VR_CUDA_SLOTS];
  int head, tail, n_busy; /* next slot to submit into / oldest outstanding */
  int32_t *tile_tmp;    /* host scratch for sorting tiles */
  uint64_t *tile_key;   /* host scratch: encoders' (work << 32 | index) sort keys */
  int use_graphs;       /* cuda-graphs */
  int warmup;           /* cuda-warmup */
  vr_cuda_autotune_t autotune;
  int exact_large;      /* cuda-exact-size: batches in buckets >= exact_min_T rows run eagerly at their size */
  uint32_t exact_min_T; /* see exact_threshold() */
  vr_cuda_bucket_t buckets[VR_CUDA_MAX_BUCKETS];
  int n_buckets;
} vr_cuda_state_t;

/* Metadata block of Tp rows, at most n_seqs sequences and n_tiles tiles:
 * meta[4] | ids[Tp] | pos[Tp] | cu[n_seqs + 1] | rows[n_seqs] | tiles[2 * n_tiles] |
 * ltiles[2 * n_seqs] (one attention tile holding each score row) | lrows[n_seqs] (0, 1, ...). */
static vr_cuda_layout_t layout_for(uint32_t Tp, uint32_t n_seqs, uint32_t n_tiles) {
  vr_cuda_layout_t l;
  l.ids = 4;
  l.pos = l.ids + Tp;
  l.cu = l.pos + Tp;
  l.rows = l.cu + n_seqs + 1;
  l.tiles = l.rows + n_seqs;
  l.ltiles = l.tiles + 2 * n_tiles;
  l.lrows = l.ltiles + 2 * n_seqs;
  l.words = l.lrows + n_seqs;
  return l;
}

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
    if ((rc = new_bf16(st, &L->bup16, lw->up_b, I, WHAT("up bias"), 0))) return rc;
    if (st->res_bf16 && ((rc = new_bf16(st, &L->bo16, lw->o_b, C, WHAT("o bias"), 0)) ||
                         (rc = new_bf16(st, &L->bdown16, lw->down_b, C, WHAT("down bias"), 0))))
      return rc;
  }
  if ((rc = new_bf16(st, &L->wdown, lw->down_w, C * I, WHAT("down weight"), 1))) return rc;
  if ((rc = new_f32(st, &L->bdown, lw->down_b, C, WHAT("down bias"), 0))) return rc;
#undef WHAT
  return 0;
}

/* File bytes of one layer's tensors (what its upload reads), for the progress line. */
static uint64_t layer_file_bytes(const vr_layer_weights_t *lw) {
  const vr_tensor_t *t[] = {lw->q_w, lw->q_b, lw->k_w, lw->k_b, lw->v_w, lw->v_b, lw->o_w, lw->o_b,
                            lw->norm1_w, lw->norm1_b, lw->norm2_w, lw->norm2_b, lw->gate_w, lw->gate_b,
                            lw->up_w, lw->up_b, lw->down_w, lw->down_b};
  uint64_t b = 0;
  for (size_t i = 0; i < sizeof t / sizeof t[0]; ++i) b += t[i] ? t[i]->nbytes : 0;
  return b;
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
  /* the layers are the bulk of the upload: one progress step per layer (bytes read from the
   * mapping, converted and copied; the copies are async, so the stream is synchronised at the end) */
  uint64_t total = 0;
  for (int l = 0; l < c->num_layers; ++l) total += layer_file_bytes(&w->layers[l]);
  char what[48];
  snprintf(what, sizeof what, "cuda:%d weights upload", st->device);
  vr_progress_t p;
  vr_progress_begin(&p, what, "layers", (uint32_t)c->num_layers, total);
  for (int l = 0; l < c->num_layers; ++l) {
    if ((rc = load_layer(st, &w->layers[l], &st->layers[l], l))) return rc;
    vr_progress_step(&p, 1, layer_file_bytes(&w->layers[l]));
  }
  if ((rc = VR_CUDA_TRY(cudaStreamSynchronize(st->stream)))) return rc;
  vr_progress_end(&p);
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
  if (st->res_bf16 && !(st->y16 = (uint16_t *)dalloc(st, T * C * 2))) return VR_ERR_NOMEM;
  if (!(st->scores_d = (float *)dalloc(st, (size_t)st->max_seqs * 4))) return VR_ERR_NOMEM;
  if (!c->is_decoder &&
      !(st->head_partial = (float *)dalloc(st, (size_t)st->max_seqs * vr_cuda_score_encoder_blocks((int)C) * 4)))
    return VR_ERR_NOMEM;
  if (st->split_attn) {
    size_t cnt_bytes = 0;
    const size_t part_bytes = vr_cuda_attention_split_scratch(c->num_heads, c->head_dim, &cnt_bytes);
    if (!(st->attn_part = (float *)dalloc(st, part_bytes))) return VR_ERR_NOMEM;
    if (!(st->attn_cnt = (int32_t *)dalloc(st, cnt_bytes))) return VR_ERR_NOMEM;
    VR_CUDA_CHECK(cudaMemsetAsync(st->attn_cnt, 0, cnt_bytes, st->stream)); /* every launch leaves it zero */
    const int wave = vr_cuda_attention_split_resident(c->head_dim) * st->num_sms / c->num_heads;
    st->split_wave = wave > 1 ? wave : 1;
  }
  st->in_words = layout_for(st->max_tokens, st->max_seqs, st->max_tiles).words;
  /* Defined contents everywhere: padding rows of a graph bucket read them. */
  VR_CUDA_CHECK(cudaMemsetAsync(st->x, 0, T * C * 4, st->stream));
  VR_CUDA_CHECK(cudaMemsetAsync(st->xn, 0, T * C * 2, st->stream));
  VR_CUDA_CHECK(cudaMemsetAsync(st->ao, 0, T * nq * 2, st->stream));
  if (st->y16) VR_CUDA_CHECK(cudaMemsetAsync(st->y16, 0, T * C * 2, st->stream));
  for (int i = 0; i < VR_CUDA_SLOTS; ++i) {
    vr_cuda_slot_t *sl = &st->slots[i];
    if (!(sl->in_d = (int32_t *)dalloc(st, st->in_words * 4))) return VR_ERR_NOMEM;
    VR_CUDA_CHECK(cudaMemsetAsync(sl->in_d, 0, st->in_words * 4, st->stream));
    if (VR_CUDA_TRY(cudaMallocHost((void **)&sl->in_h, st->in_words * 4)) != 0) return VR_ERR_NOMEM;
    if (VR_CUDA_TRY(cudaMallocHost((void **)&sl->scores_h, (size_t)st->max_seqs * 4)) != 0) return VR_ERR_NOMEM;
    if (VR_CUDA_TRY(cudaEventCreateWithFlags(&sl->uploaded, cudaEventDisableTiming)) != 0) return VR_ERR_DEVICE;
    if (VR_CUDA_TRY(cudaEventCreateWithFlags(&sl->done, cudaEventDisableTiming)) != 0) return VR_ERR_DEVICE;
    st->host_bytes += st->in_words * 4 + (size_t)st->max_seqs * 4;
    memset(sl->in_h, 0, st->in_words * 4);
  }
  st->tile_tmp = (int32_t *)malloc(2 * (size_t)st->max_tiles * sizeof(int32_t));
  st->tile_key = (uint64_t *)malloc((size_t)st->max_tiles * sizeof(uint64_t));
  if (!st->tile_tmp || !st->tile_key) return VR_ERR_NOMEM;
  st->host_bytes += 2 * (size_t)st->max_tiles * sizeof(int32_t) + (size_t)st->max_tiles * sizeof(uint64_t);
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
    if (st->upload) (void)VR_CUDA_TRY(cudaStreamSynchronize(st->upload));
    for (int i = 0; i < st->n_buckets; ++i)
      for (int j = 0; j < VR_CUDA_SLOTS; ++j)
        for (int v = 0; v < 2; ++v) {
          cudaGraphExec_t e = v ? st->buckets[i].exec_p[j] : st->buckets[i].exec[j];
          if (e) (void)VR_CUDA_TRY(cudaGraphExecDestroy(e));
        }
    vr_cuda_gemm_free(st->gemm);
    for (int i = 0; i < st->n_allocs; ++i) (void)VR_CUDA_TRY(cudaFree(st->allocs[i]));
    if (st->staging) (void)VR_CUDA_TRY(cudaFree(st->staging));
    for (int i = 0; i < VR_CUDA_SLOTS; ++i) {
      vr_cuda_slot_t *sl = &st->slots[i];
      if (sl->in_h) (void)VR_CUDA_TRY(cudaFreeHost(sl->in_h));
      if (sl->scores_h) (void)VR_CUDA_TRY(cudaFreeHost(sl->scores_h));
      if (sl->uploaded) (void)VR_CUDA_TRY(cudaEventDestroy(sl->uploaded));
      if (sl->done) (void)VR_CUDA_TRY(cudaEventDestroy(sl->done));
    }
    if (st->stream) (void)VR_CUDA_TRY(cudaStreamDestroy(st->stream));
    if (st->upload) (void)VR_CUDA_TRY(cudaStreamDestroy(st->upload));
  }
  free(st->tile_tmp);
  free(st->tile_key);
  free(st->layers);
  free(st);
}

/* ------------------------------------------------------------------ init */

static void make_buckets(vr_cuda_state_t *st);
static int warm_up(vr_cuda_state_t *st);
static uint32_t exact_threshold(const vr_model_config_t *c);

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
  if (!vr_cuda_attention_kernel_fits(VR_CUDA_ATTN_KERNEL_GENERIC, c->head_dim) || (c->is_decoder && c->head_dim % 2)) {
    vr_log(VR_LOG_ERROR, "head_dim %d is not supported by the cuda backend (1..256, even for RoPE)", c->head_dim);
    return VR_ERR_UNSUPPORTED;
  }
  if (((size_t)(c->num_heads + 2 * c->num_kv_heads) * c->head_dim) % 8 || c->hidden_size % 8 ||
      c->intermediate_size % 8) {
    /* cuBLASLt and the 16-byte tile loads want rows that are multiples of 8 bf16 */
    if (vr_cuda_attention_kernel(c->head_dim, 0) != VR_CUDA_ATTN_KERNEL_GENERIC) {
      vr_log(VR_LOG_ERROR, "hidden %d / intermediate %d / qkv width must be multiples of 8 on cuda",
             c->hidden_size, c->intermediate_size);
      return VR_ERR_UNSUPPORTED;
    }
  }
  return 0;
}

extern "C" int vr_cuda_device_count(char *why, size_t whyn) {
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev <= 0) {
    int drv = 0;
    char driver[48] = "no CUDA driver";
    if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0)
      snprintf(driver, sizeof driver, "driver %d.%d", drv / 1000, drv % 1000 / 10);
    snprintf(why, whyn, "%s: %s", driver, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 0;
  }
  return ndev;
}

extern "C" int vr_cuda_device_memory(int index, uint64_t *free_bytes, uint64_t *total_bytes) {
  *free_bytes = *total_bytes = 0;
  int ndev = 0, cur = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || index < 0 || index >= ndev) return VR_ERR_NO_DEVICE;
  if (cudaGetDevice(&cur) != cudaSuccess || cudaSetDevice(index) != cudaSuccess) return VR_ERR_DEVICE;
  size_t f = 0, t = 0;
  cudaError_t e = cudaMemGetInfo(&f, &t);
  cudaSetDevice(cur);
  if (e != cudaSuccess) return VR_ERR_DEVICE;
  *free_bytes = f;
  *total_bytes = t;
  return 0;
}

extern "C" void vr_cuda_runtime_versions(char *buf, size_t n) {
  int rt = 0, major = 0, minor = 0;
  cudaRuntimeGetVersion(&rt);
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  snprintf(buf, n, "CUDA %d.%d / cuBLAS %d.%d", rt / 1000, rt % 1000 / 10, major, minor);
}

static int cuda_init(const vr_model_config_t *cfg, const vr_model_weights_t *w, const vr_model_options_t *opt,
                     int device_index, void **state) {
  *state = NULL;
  if (!opt) return VR_ERR_INVAL;
  int rc = check_config(cfg);
  if (rc) return rc;
  if (opt->dtype && strcmp(opt->dtype, "auto") && strcmp(opt->dtype, "bf16")) {
    vr_log(VR_LOG_ERROR, "compute dtype '%s' is not supported on cuda (bf16 only). HINT: --dtype bf16 or use --device cpu",
           opt->dtype);
    return VR_ERR_UNSUPPORTED;
  }
  char why[160];
  int ndev = vr_cuda_device_count(why, sizeof why);
  if (ndev <= 0) {
    vr_log(VR_LOG_ERROR, "no usable CUDA device (%s). HINT: --device cpu, or check the driver and CUDA_VISIBLE_DEVICES",
           why);
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
  st->max_tokens = opt->max_batch_tokens ? opt->max_batch_tokens : 16384u;
  st->max_seqs = opt->max_seqs ? opt->max_seqs : st->max_tokens;
  if (st->max_seqs > st->max_tokens) st->max_seqs = st->max_tokens;
  if ((rc = VR_CUDA_TRY(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking)))) goto fail;
  if ((rc = VR_CUDA_TRY(cudaStreamCreateWithFlags(&st->upload, cudaStreamNonBlocking)))) goto fail;
  {
    /* the tuning, read once (vr_model_load checked its ranges) */
    const vr_cuda_options_t *co = &opt->cuda;
    st->use_graphs = co->graphs;
    st->warmup = co->warmup;
    st->exact_large = co->exact_size;
    st->autotune = co->autotune;
    vr_cuda_set_launch_pdl(co->pdl); /* process-wide (vr_cuda_ops.h) */
    st->split_attn = co->split_attn && vr_cuda_attention_split_fits(cfg->head_dim, 1);
    /* bf16 residual stream for encoders at least VR_RES_BF16_MIN_C wide (see the top comment) */
    st->res_bf16 = !cfg->is_decoder && (co->residual == VR_CUDA_RESIDUAL_BF16 ||
                                        (co->residual == VR_CUDA_RESIDUAL_AUTO && cfg->hidden_size >= VR_RES_BF16_MIN_C));
    st->exact_min_T = exact_threshold(&st->cfg);
    vr_cuda_options_t eff = *co; /* the effective values: residual resolved for this model */
    eff.residual = st->res_bf16 ? VR_CUDA_RESIDUAL_BF16 : VR_CUDA_RESIDUAL_F32;
    char line[256];
    vr_cuda_options_format(&eff, line, sizeof line);
    vr_log(VR_LOG_INFO, "cuda:%d options: %s (exact-size forwards from %u rows)", device_index, line, st->exact_min_T);
  }
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
  make_buckets(st);
  if (st->use_graphs && st->warmup && (rc = warm_up(st))) goto fail;
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

static int cmp_u64_desc(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x < y) - (x > y);
}

/* Fills slot sl's metadata block (layout lay) for a batch of T real tokens padded to Tp;
 * returns n_tiles or a negative vr_status_t for ids/positions outside the model (defence
 * in depth: vr_model validated them already). */
static int build_batch(vr_cuda_state_t *st, vr_cuda_slot_t *sl, const int32_t *ids, const uint32_t *cu, uint32_t n,
                       uint32_t Tp, int max_len, const vr_cuda_layout_t *lay) {
  const vr_model_config_t *c = &st->cfg;
  int32_t *hid = sl->in_h + lay->ids, *hpos = sl->in_h + lay->pos, *hcu = sl->in_h + lay->cu;
  int32_t *hrows = sl->in_h + lay->rows;
  const uint32_t T = cu[n];
  /* roberta: positions count the non-pad tokens from padding_idx + 1 (= pad_token_id + 1),
   * pad tokens sit at padding_idx (transformers' create_position_ids_from_input_ids) */
  const int roberta = c->arch == VR_ARCH_ROBERTA && c->pad_token_id >= 0;
  const int max_pos = c->is_decoder ? INT32_MAX : c->max_seq_len + c->position_offset;
  /* the attention launch of this Tp-row forward (longest sequence max_len, 0 in a graph) takes
   * tiles of this many rows; the last layer's score-rows-only launch (rows hint 1) takes ltile_rows */
  const uint32_t tile_rows = (uint32_t)vr_cuda_attention_tile_rows_maxlen(c->head_dim, (int)Tp, max_len);
  const uint32_t ltile_rows = (uint32_t)vr_cuda_attention_tile_rows(c->head_dim, 1);
  int32_t *hlt = sl->in_h + lay->ltiles, *hlr = sl->in_h + lay->lrows;
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
    hlt[2 * i] = (int32_t)i;
    hlt[2 * i + 1] = (int32_t)(((uint32_t)hrows[i] - s0) / ltile_rows * ltile_rows);
    hlr[i] = (int32_t)i;
    for (uint32_t q0 = 0; q0 < s1 - s0; q0 += tile_rows) {
      st->tile_tmp[2 * nt] = (int32_t)i;
      st->tile_tmp[2 * nt + 1] = (int32_t)q0;
      ++nt;
    }
  }
  if (lay->tiles + 2 * nt > lay->ltiles) return VR_ERR_INTERNAL; /* layout bound broken */
  hcu[n] = (int32_t)T;
  for (uint32_t t = T; t < Tp; ++t) {
    hid[t] = 0;
    hpos[t] = roberta ? c->pad_token_id : 0;
  }
  /* Most work first: the attention blocks take tiles round-robin (tile b, b + grid, ...),
   * so with the heavy tiles in the first rounds every block ends within about one light
   * tile of the others. Causal tiles deep in long sequences are the most work; a
   * bidirectional tile costs its sequence's key tiles (in sequence order, a packed batch
   * of mixed lengths left some blocks with several long tiles at the end). */
  if (c->is_decoder) {
    qsort(st->tile_tmp, nt, 2 * sizeof(int32_t), cmp_tile_desc);
    memcpy(sl->in_h + lay->tiles, st->tile_tmp, 2 * (size_t)nt * sizeof(int32_t));
  } else {
    for (uint32_t k = 0; k < nt; ++k) {
      const uint32_t seq = (uint32_t)st->tile_tmp[2 * k], len = cu[seq + 1] - cu[seq];
      st->tile_key[k] = ((uint64_t)((len + VR_CUDA_ATTN_BM - 1) / VR_CUDA_ATTN_BM) << 32) | (nt - 1 - k);
    }
    qsort(st->tile_key, nt, sizeof(uint64_t), cmp_u64_desc); /* ties: batch order */
    int32_t *dst = sl->in_h + lay->tiles;
    for (uint32_t k = 0; k < nt; ++k) {
      const uint32_t j = nt - 1 - (uint32_t)(st->tile_key[k] & 0xFFFFFFFFu);
      dst[2 * k] = st->tile_tmp[2 * j];
      dst[2 * k + 1] = st->tile_tmp[2 * j + 1];
    }
  }
  sl->in_h[VR_CUDA_META_N_SEQS] = (int32_t)n;
  sl->in_h[VR_CUDA_META_N_TILES] = (int32_t)nt;
  sl->in_h[VR_CUDA_META_N_LTILES] = (int32_t)n;
  return (int)nt;
}

/* The longest of the n sequences of cu. */
static uint32_t longest(const uint32_t *cu, uint32_t n) {
  uint32_t m = 0;
  for (uint32_t i = 0; i < n; ++i)
    if (cu[i + 1] - cu[i] > m) m = cu[i + 1] - cu[i];
  return m;
}

static uint32_t count_tiles(const uint32_t *cu, uint32_t n) {
  uint32_t nt = 0;
  for (uint32_t i = 0; i < n; ++i) nt += (cu[i + 1] - cu[i] + VR_CUDA_ATTN_BM - 1) / VR_CUDA_ATTN_BM;
  return nt;
}

/* The activations one pass over the layers works on, R rows each: x (R, C) fp32 (decoders:
 * the residual stream; encoders: the norm output, the residual stream itself with the fp32
 * stream), xn (R, C) bf16 (the next GEMM's input; encoders' bf16 stream: also the residual),
 * y16 (R, C) bf16 (encoders' bf16 stream: the pre-norm sums; NULL otherwise). The full-size
 * buffers of the state, or the compact score rows of a pruned last layer (prune_rows). */
typedef struct vr_cuda_acts {
  float *x;
  uint16_t *xn, *y16;
} vr_cuda_acts_t;

/* Encoders' post-norm residual block: xn = LN(xn + A W^T + b) (A: R x K), in the configured
 * residual form (see the top comment); with the bf16 stream the fp32 result also goes to x
 * when last (the head and the trunk's output read x; the fp32 stream always writes it). */
static void enc_add_norm(vr_cuda_state_t *st, const vr_cuda_acts_t *a, const uint16_t *A, const uint16_t *W,
                         const uint16_t *b16, const float *b32, int K, const float *nw, const float *nb, int last, int R,
                         cudaStream_t s) {
  const int C = st->cfg.hidden_size;
  const float eps = st->cfg.norm_eps;
  if (!st->res_bf16) { /* x += A W^T + b (fp32); x = LN(x), xn = bf16(x) */
    vr_cuda_gemm(st->gemm, a->x, 1, A, W, b32, R, C, K, 1.f, s);
    vr_cuda_layernorm(a->x, a->xn, nw, nb, R, C, eps, s);
  } else { /* y16 = A W^T + b; xn = LN(y16 + xn) */
    vr_cuda_gemm(st->gemm, a->y16, 0, A, W, b16, R, C, K, 0.f, s);
    vr_cuda_layernorm_b16(a->y16, a->xn, a->xn, last ? a->x : NULL, nw, nb, R, C, eps, s);
  }
}

/* One layer after its attention, on R rows: the output projection of ao (R, H*D), the norms
 * and the MLP, reading and writing the residual stream in a. Decoders: the next layer's input
 * norm (n1w_next; NULL after the last layer) ends it. */
static void layer_rest(vr_cuda_state_t *st, const vr_cuda_layer_t *L, const vr_cuda_acts_t *a, const uint16_t *ao,
                       int R, int last, const float *n1w_next, cudaStream_t s) {
  const vr_model_config_t *c = &st->cfg;
  const int C = c->hidden_size, I = c->intermediate_size, nq = c->num_heads * c->head_dim;
  if (c->is_decoder) {
    vr_cuda_gemm(st->gemm, a->x, 1, ao, L->wo, L->bo, R, C, nq, 1.f, s); /* x += O(attn) + bo */
    vr_cuda_rmsnorm(a->x, a->xn, L->n2w, R, C, c->norm_eps, s);
    vr_cuda_gemm(st->gemm, st->mlp, 0, a->xn, L->wup, L->bgu, R, 2 * I, C, 0.f, s);
    vr_cuda_swiglu(st->act, st->mlp, R, I, s);
    vr_cuda_gemm(st->gemm, a->x, 1, st->act, L->wdown, L->bdown, R, C, I, 1.f, s);
    if (n1w_next) vr_cuda_rmsnorm(a->x, a->xn, n1w_next, R, C, c->norm_eps, s);
  } else {
    const int tanh_gelu = c->act == VR_ACT_GELU_TANH;
    enc_add_norm(st, a, ao, L->wo, L->bo16, L->bo, nq, L->n1w, L->n1b, 0, R, s);
    if (L->bup16) { /* bias + GELU in the GEMM epilogue */
      vr_cuda_gemm_ex(st->gemm, st->mlp, 0, a->xn, L->wup, L->bup16, tanh_gelu ? 2 : 1, R, I, C, 0.f, s);
    } else {
      vr_cuda_gemm(st->gemm, st->mlp, 0, a->xn, L->wup, NULL, R, I, C, 0.f, s);
      vr_cuda_bias_gelu(st->mlp, L->bup, R, I, tanh_gelu, s);
    }
    enc_add_norm(st, a, st->mlp, L->wdown, L->bdown16, L->bdown, I, L->n2w, L->n2b, last, R, s);
  }
}

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

/* The compact rows of a pruned last layer for n sequences, in the QKV buffer (dead once the
 * last attention has run), each part 256-byte aligned (cuBLASLt's default):
 * ao (n, nq) bf16 | x (n, C) fp32 | xn (n, C) bf16 | y16 (n, C) bf16. Returns their bytes;
 * ao / a (either may be NULL) get the pointers. */
static size_t prune_rows(vr_cuda_state_t *st, int n, uint16_t **ao, vr_cuda_acts_t *a) {
  const size_t C = (size_t)st->cfg.hidden_size, nq = (size_t)st->cfg.num_heads * st->cfg.head_dim;
  const size_t o_x = align256((size_t)n * nq * 2), o_xn = o_x + align256((size_t)n * C * 4),
               o_y = o_xn + align256((size_t)n * C * 2), bytes = o_y + align256((size_t)n * C * 2);
  unsigned char *cb = (unsigned char *)st->qkv;
  if (ao) *ao = (uint16_t *)cb;
  if (a) {
    a->x = (float *)(cb + o_x);
    a->xn = (uint16_t *)(cb + o_xn);
    a->y16 = st->y16 ? (uint16_t *)(cb + o_y) : NULL;
  }
  return bytes;
}

/* Whether the score path's eager forward of n_seqs sequences in T rows prunes its last layer:
 * at most half the rows are score rows and the compact rows fit in the QKV buffer's T rows. */
static int prune_fits(vr_cuda_state_t *st, int T, int n_seqs) {
  return n_seqs > 0 && 2 * n_seqs <= T && prune_rows(st, n_seqs, NULL, NULL) <= (size_t)T * (size_t)st->nqkv * 2;
}

/* The trunk on T rows reading the metadata block in_d (layout lay): embeddings, then every
 * layer. grid_tiles bounds the attention grid (device-side counts decide the real work);
 * hint_T is the attention's rows hint (the bucket's rows), max_len the batch's longest sequence
 * (0 in a graph; both as build_batch had them: they pick the attention's tile rows). Returns the buffers whose x (fp32)
 * holds the last layer's output, T rows (decoders: before the final norm, which the score
 * head fuses on its rows and cuda_hidden runs on all of them).
 *
 * prune_seqs > 0 (prune_fits; the score path's eager forwards, whose batch has exactly that
 * many sequences, and the pruned graphs of a bucket, whose batches have at most that many:
 * the gathers, the pruned attention and the head read the real count from meta): the last
 * layer on the score rows only. A sequence's score
 * depends on the final hidden state of its score row alone, so after the last layer's K/V
 * (the QKV GEMM and RoPE still run on every row) only one row per sequence matters.
 * Attention runs on one tile per sequence (the tile holding its score row, lay->ltiles);
 * the attention output and residual rows of the score rows are gathered into prune_seqs
 * compact rows (prune_rows), and the output projection, norms and MLP run on those (on
 * roberta-base 256 x U[64,512] that is 256 rows instead of 69,724 in the last of 12 layers).
 * The returned buffers are then the compact rows: row j = sequence j's score row. */
static vr_cuda_acts_t enqueue_trunk(vr_cuda_state_t *st, const int32_t *in_d, const vr_cuda_layout_t *lay, int T,
                                    int hint_T, int max_len, int grid_tiles, int prune_seqs) {
  const vr_model_config_t *c = &st->cfg;
  cudaStream_t s = st->stream;
  const int C = c->hidden_size, H = c->num_heads, Hkv = c->num_kv_heads, D = c->head_dim;
  const int nq = H * D, ld = st->nqkv;
  const int32_t *ids = in_d + lay->ids, *pos = in_d + lay->pos, *cu = in_d + lay->cu;
  const int32_t *rows = in_d + lay->rows, *tiles = in_d + lay->tiles, *meta = in_d;
  const float scale = 1.f / sqrtf((float)D);
  vr_cuda_acts_t a = {st->x, st->xn, st->y16};
  if (c->is_decoder)
    vr_cuda_embed_norm(a.x, a.xn, ids, pos, st->tok, NULL, NULL, st->emb_f32, st->layers[0].n1w, NULL, T, C,
                       c->norm_eps, s);
  else
    vr_cuda_embed_norm(a.x, a.xn, ids, pos, st->tok, st->pos_emb, st->type_emb, st->emb_f32, st->emb_w, st->emb_b, T,
                       C, c->norm_eps, s);
  for (int l = 0; l < c->num_layers; ++l) {
    const vr_cuda_layer_t *L = &st->layers[l];
    const int last = l + 1 == c->num_layers, sub = last && prune_seqs > 0;
    vr_cuda_gemm(st->gemm, st->qkv, 0, a.xn, L->wqkv, L->bqkv, T, ld, C, 0.f, s);
    if (c->is_decoder)
      vr_cuda_rope(st->qkv, ld, 0, nq, H, Hkv, D, pos, st->inv_freq, c->rope_attention_scaling, T, s);
    const uint16_t *ao = st->ao;
    int R = T; /* rows from here on */
    if (!sub && st->split_attn && vr_cuda_attention_split_fits(D, hint_T)) { /* short batches */
      const int items = vr_cuda_attention_split_items(grid_tiles);
      vr_cuda_attention_split(st->qkv, ld, 0, nq, nq + Hkv * D, st->ao, nq, cu, tiles, meta,
                              items < st->split_wave ? items : st->split_wave, H, Hkv, D, c->is_decoder,
                              c->is_decoder ? c->sliding_window : 0, scale, st->attn_part, st->attn_cnt, s);
    } else if (!sub) {
      vr_cuda_attention_maxlen(st->qkv, ld, 0, nq, nq + Hkv * D, st->ao, nq, cu, tiles, meta, grid_tiles, H, Hkv, D,
                               c->is_decoder, c->is_decoder ? c->sliding_window : 0, scale, hint_T, max_len, s);
    } else {
      vr_cuda_attention(st->qkv, ld, 0, nq, nq + Hkv * D, st->ao, nq, cu, in_d + lay->ltiles,
                        meta + (VR_CUDA_META_N_LTILES - VR_CUDA_META_N_TILES), prune_seqs, H, Hkv, D, c->is_decoder,
                        c->is_decoder ? c->sliding_window : 0, scale, 1, s);
      uint16_t *ao_s;
      vr_cuda_acts_t a_s;
      prune_rows(st, prune_seqs, &ao_s, &a_s);
      vr_cuda_gather_rows(ao_s, st->ao, rows, meta, prune_seqs, nq * 2, s);
      if (c->is_decoder || !st->res_bf16) /* the fp32 residual stream */
        vr_cuda_gather_rows(a_s.x, a.x, rows, meta, prune_seqs, C * 4, s);
      else /* encoders' bf16 stream: the residual is xn */
        vr_cuda_gather_rows(a_s.xn, a.xn, rows, meta, prune_seqs, C * 2, s);
      a = a_s;
      ao = ao_s;
      R = prune_seqs;
    }
    layer_rest(st, L, &a, ao, R, last, last ? NULL : st->layers[l + 1].n1w, s);
  }
  return a;
}

/* The score head on the rows rows[i] of x (fp32) for each sequence i < meta[0]: decoders the
 * final RMSNorm fused with the score dot product, encoders dense + tanh + out_proj. */
static void enqueue_head(vr_cuda_state_t *st, const float *x, const int32_t *rows, const int32_t *meta, int grid_seqs) {
  const vr_model_config_t *c = &st->cfg;
  const int C = c->hidden_size;
  if (c->is_decoder)
    vr_cuda_score_decoder(st->scores_d, x, rows, meta, st->final_w, st->head2_w, C, c->norm_eps, grid_seqs, st->stream);
  else
    vr_cuda_score_encoder(st->scores_d, x, rows, meta, st->head1_w, st->head1_b, st->head2_w, st->head2_b, C,
                          grid_seqs, st->head_partial, st->stream);
}

/* The score path for T rows reading in_d (layout lay): the trunk, pruned when a bound on the
 * batch's sequence count is known (n_seqs > 0: eager forwards, the pruned graphs; 0: the full
 * graphs) and prune_fits,
 * then the head on the score rows. grid_tiles / grid_seqs bound the attention and head grids. */
static void enqueue_scores(vr_cuda_state_t *st, const int32_t *in_d, const vr_cuda_layout_t *lay, int T, int hint_T,
                           int max_len, int grid_tiles, int grid_seqs, int n_seqs) {
  const int prune = prune_fits(st, T, n_seqs);
  const vr_cuda_acts_t h = enqueue_trunk(st, in_d, lay, T, hint_T, max_len, grid_tiles, prune ? n_seqs : 0);
  /* pruned: the head reads compact row j for sequence j (lrows = 0, 1, ...) */
  enqueue_head(st, h.x, in_d + (prune ? lay->lrows : lay->rows), in_d, grid_seqs);
}

/* Smallest bucket (rows) whose batches run at their exact size (see VR_CUDA_EXACT_MIN_MACS). */
static uint32_t exact_threshold(const vr_model_config_t *c) {
  const double h = c->hidden_size, q = (double)c->num_heads * c->head_dim, kv = (double)c->num_kv_heads * c->head_dim;
  const double per_token = c->num_layers * (h * (q + 2 * kv) + q * h + (c->is_decoder ? 3.0 : 2.0) * h * c->intermediate_size);
  if (per_token <= 0) return VR_CUDA_EXACT_MIN_T;
  const double t = VR_CUDA_EXACT_MIN_MACS / per_token;
  return t >= VR_CUDA_EXACT_MIN_T ? VR_CUDA_EXACT_MIN_T : t <= 2048 ? 2049 : (uint32_t)ceil(t);
}

/* Token buckets: a batch is padded up to the next bucket, so the spacing bounds the
 * wasted rows: 64, 128, 192, then four per octave from 256 to 2048 (at most 25% padding
 * where launch overhead matters most), then multiples of max(1024, max_tokens / 16)
 * (decoders) or max(1024, max_tokens / 32) (encoders, whose warm-up of each bucket is
 * cheap; at 131072 max tokens a 69,724-token batch was padded 8.7% with /16), rounded up
 * to 64, and max_tokens itself last. (Powers of two alone padded a 5x256 batch
 * to 2048 rows: 60% of the forward's GEMM work was padding.) */
static void add_bucket(vr_cuda_state_t *st, uint32_t T) {
  if (T > st->max_tokens || st->n_buckets >= VR_CUDA_MAX_BUCKETS - 1) return;
  if (st->n_buckets > 0 && st->buckets[st->n_buckets - 1].T >= T) return;
  st->buckets[st->n_buckets++].T = T;
}

static void make_buckets(vr_cuda_state_t *st) {
  st->n_buckets = 0;
  for (uint32_t b = 64; b < 256; b += 64) add_bucket(st, b);
  for (uint32_t oct = 256; oct < 2048; oct *= 2)
    for (uint32_t k = 0; k < 4; ++k) add_bucket(st, oct + k * (oct / 4));
  add_bucket(st, 2048);
  const uint32_t div = st->cfg.is_decoder ? 16 : 32;
  const uint32_t step = st->max_tokens / div > 1024 ? (st->max_tokens / div + 63) / 64 * 64 : 1024;
  for (uint32_t b = 2048 + step; b < st->max_tokens; b += step) add_bucket(st, b);
  if (st->n_buckets == 0 || st->buckets[st->n_buckets - 1].T < st->max_tokens)
    st->buckets[st->n_buckets++].T = st->max_tokens;
  /* Graph grids are upper bounds (the kernels loop over the batch's real tiles / sequences),
   * and every block past the real work still starts, reads the counts and exits: decoders
   * keep 16 blocks a multiprocessor (long causal tiles, sorted by work, balance better over
   * many blocks); encoders get one resident wave (a 1x256 forward launched 2112 mostly
   * empty attention blocks per layer). */
  const int H = st->cfg.num_heads;
  const int dec_cap = (16 * st->num_sms) / H > 64 ? (16 * st->num_sms) / H : 64;
  for (int i = 0; i < st->n_buckets; ++i) {
    vr_cuda_bucket_t *bk = &st->buckets[i];
    /* one resident wave of the attention kernel this bucket launches */
    const int wave = (vr_cuda_attention_resident_blocks(st->cfg.head_dim, (int)bk->T) * st->num_sms + H - 1) / H;
    const int cap = st->cfg.is_decoder ? dec_cap : (wave > 1 ? wave : 1);
    const uint32_t seq_bound = bk->T < st->max_seqs ? bk->T : st->max_seqs;
    const uint32_t tiles = bk->T / VR_CUDA_ATTN_BM + seq_bound;
    bk->grid_tiles = (int)(tiles < (uint32_t)cap ? tiles : (uint32_t)cap);
    bk->grid_seqs = seq_bound < 1024 ? (int)seq_bound : 1024;
    bk->lay = layout_for(bk->T, seq_bound, tiles);
    /* (buckets whose smaller batches run eagerly at their exact size, pruned there, get none) */
    const int np = seq_bound < VR_CUDA_PRUNE_GRAPH_SEQS ? (int)seq_bound : VR_CUDA_PRUNE_GRAPH_SEQS;
    const int eager_below = st->exact_large && bk->T >= st->exact_min_T;
    bk->prune_seqs = !eager_below && prune_fits(st, (int)bk->T, np) ? np : 0;
  }
}

/* Captures the bucket's forwards reading slot si's metadata (not launched): every row, and
 * with bk->prune_seqs the last layer on that many compact rows (the device-side counts say how
 * many of them are real: the gathers and the pruned attention read meta; the rows past the
 * batch's sequences hold stale finite values that no score reads). */
static void capture(vr_cuda_state_t *st, vr_cuda_bucket_t *bk, int si) {
  for (int v = 0; v < (bk->prune_seqs ? 2 : 1); ++v) {
    cudaGraph_t graph;
    VR_CUDA_CHECK(cudaStreamBeginCapture(st->stream, cudaStreamCaptureModeThreadLocal));
    enqueue_scores(st, st->slots[si].in_d, &bk->lay, (int)bk->T, (int)bk->T, 0, bk->grid_tiles, bk->grid_seqs,
                   v ? bk->prune_seqs : 0);
    VR_CUDA_CHECK(cudaStreamEndCapture(st->stream, &graph));
    VR_CUDA_CHECK(cudaGraphInstantiate(v ? &bk->exec_p[si] : &bk->exec[si], graph, 0));
    VR_CUDA_CHECK(cudaGraphDestroy(graph));
  }
  vr_log(VR_LOG_DEBUG, "captured CUDA graphs for the %u-token bucket (slot %d, pruned for <= %d sequences)", bk->T,
         si, bk->prune_seqs);
}

/* The input contract of forward/submit/hidden: 0, VR_ERR_INVAL or VR_ERR_TOO_LARGE (logged). */
static int check_batch(const vr_cuda_state_t *st, const int32_t *ids, const uint32_t *cu_seqlens, uint32_t n_seqs) {
  if (!st || !ids || !cu_seqlens || n_seqs == 0) return VR_ERR_INVAL;
  const uint32_t T = cu_seqlens[n_seqs];
  if (cu_seqlens[0] != 0 || T == 0 || T > st->max_tokens || n_seqs > st->max_seqs) {
    vr_log(VR_LOG_ERROR, "batch of %u tokens / %u sequences exceeds the workspace (%u / %u)", T, n_seqs,
           st->max_tokens, st->max_seqs);
    return VR_ERR_TOO_LARGE;
  }
  return 0;
}

/* Builds slot sl's metadata for the batch padded to Tp rows (layout lay), copies it on the
 * upload stream and makes the compute stream wait for the copy. The slot's previous batch was
 * collected, so its upload and forward are complete. Returns n_tiles or a negative
 * vr_status_t (nothing enqueued). */
static int stage_batch(vr_cuda_state_t *st, vr_cuda_slot_t *sl, const int32_t *ids, const uint32_t *cu_seqlens,
                       uint32_t n_seqs, uint32_t Tp, int max_len, const vr_cuda_layout_t *lay) {
  const int nt = build_batch(st, sl, ids, cu_seqlens, n_seqs, Tp, max_len, lay);
  if (nt < 0) {
    vr_log(VR_LOG_ERROR, "batch rejected: %s", vr_strerror(nt));
    return nt;
  }
  VR_CUDA_CHECK(cudaMemcpyAsync(sl->in_d, sl->in_h, (size_t)lay->words * 4, cudaMemcpyHostToDevice, st->upload));
  VR_CUDA_CHECK(cudaEventRecord(sl->uploaded, st->upload));
  VR_CUDA_CHECK(cudaStreamWaitEvent(st->stream, sl->uploaded, 0));
  return nt;
}

static int cuda_submit(void *state, const int32_t *ids, const uint32_t *cu_seqlens, uint32_t n_seqs) {
  vr_cuda_state_t *st = (vr_cuda_state_t *)state;
  const int crc = check_batch(st, ids, cu_seqlens, n_seqs);
  if (crc) return crc;
  const uint32_t T = cu_seqlens[n_seqs];
  if (st->n_busy >= VR_CUDA_SLOTS) return VR_ERR_BUSY;
  const int si = st->head;
  vr_cuda_slot_t *sl = &st->slots[si];
  VR_CUDA_CHECK(cudaSetDevice(st->device));
  vr_cuda_bucket_t *bk = NULL;
  if (st->use_graphs)
    for (int i = 0; i < st->n_buckets; ++i)
      if (T <= st->buckets[i].T) {
        bk = &st->buckets[i];
        break;
      }
  const uint32_t Tp = bk ? bk->T : T;
  const vr_cuda_layout_t lay = bk ? bk->lay : layout_for(T, n_seqs, count_tiles(cu_seqlens, n_seqs));
  const uint32_t max_len = longest(cu_seqlens, n_seqs);
  /* a large batch runs eagerly at its exact size (launch cost is hidden behind milliseconds of
   * GPU work; padding to the bucket would not be), GEMM plans for the exact size
   * (vr_cuda_gemm_set_plan_rows), attention with one block per tile: the hardware then balances
   * uneven (causal) tiles, which the graphs' persistent grids cannot (llama-8b packed,
   * docs/benchmarks.md). So does a batch holding a sequence of VR_CUDA_LONG_SEQ tokens, whatever
   * its bucket: its attention then knows the longest sequence (vr_cuda_attention_maxlen), and
   * its last layer runs on the score rows only. Graphs serve any batch of their bucket, so they
   * are captured and replayed with max_len 0. */
  const int warm = bk && bk->uses >= 1;
  const int exact = warm && st->exact_large &&
                    ((bk->T >= st->exact_min_T && T < bk->T) || max_len >= VR_CUDA_LONG_SEQ);
  const int graph = warm && !exact;
  const int ml = graph ? 0 : (int)max_len;
  const int nt = stage_batch(st, sl, ids, cu_seqlens, n_seqs, Tp, ml, &lay);
  if (nt < 0) return nt;
  if (exact) {
    vr_cuda_gemm_set_plan_rows(st->gemm, (int)bk->T);
    enqueue_scores(st, sl->in_d, &lay, (int)T, (int)Tp, ml, nt, (int)n_seqs, (int)n_seqs);
    vr_cuda_gemm_set_plan_rows(st->gemm, 0);
  } else if (graph) {
    if (!bk->exec[si]) capture(st, bk, si);
    VR_CUDA_CHECK(cudaGraphLaunch(n_seqs <= (uint32_t)bk->prune_seqs ? bk->exec_p[si] : bk->exec[si], st->stream));
  } else { /* no graphs, or the bucket's first batch (eager at the bucket's rows: its plans) */
    enqueue_scores(st, sl->in_d, &lay, (int)Tp, (int)Tp, ml, nt, (int)n_seqs, (int)n_seqs);
  }
  if (bk) bk->uses++;
  VR_CUDA_CHECK(cudaMemcpyAsync(sl->scores_h, st->scores_d, (size_t)n_seqs * 4, cudaMemcpyDeviceToHost, st->stream));
  VR_CUDA_CHECK(cudaEventRecord(sl->done, st->stream));
  sl->n = n_seqs;
  sl->busy = 1;
  st->head = (si + 1) % VR_CUDA_SLOTS;
  st->n_busy++;
  return 0;
}

static int cuda_collect(void *state, float *scores) {
  vr_cuda_state_t *st = (vr_cuda_state_t *)state;
  if (!st || st->n_busy == 0) return VR_ERR_INVAL;
  vr_cuda_slot_t *sl = &st->slots[st->tail];
  const int rc = VR_CUDA_TRY(cudaEventSynchronize(sl->done));
  if (rc == 0 && scores) memcpy(scores, sl->scores_h, (size_t)sl->n * 4);
  sl->busy = 0;
  st->tail = (st->tail + 1) % VR_CUDA_SLOTS;
  st->n_busy--;
  return rc;
}

static int cuda_forward(void *state, const int32_t *ids, const uint32_t *cu_seqlens, uint32_t n_seqs,
                        float *scores) {
  vr_cuda_state_t *st = (vr_cuda_state_t *)state;
  if (!st || !scores) return VR_ERR_INVAL;
  if (st->n_busy > 0) return VR_ERR_BUSY;
  const int rc = cuda_submit(state, ids, cu_seqlens, n_seqs);
  return rc ? rc : cuda_collect(state, scores);
}

/* The trunk alone (vr_backend_ops_t.hidden): one eager forward at the exact size, every row
 * (no pruning, no graph, no head), then decoders' final RMSNorm (model.norm) in fp32 on every
 * row, in place; the fp32 hidden states (T, C) are copied into the caller's buffer and the
 * call waits for them. Uses the next submit slot's metadata buffers (nothing is outstanding). */
static int cuda_hidden(void *state, const int32_t *ids, const uint32_t *cu_seqlens, uint32_t n_seqs, float *hidden) {
  vr_cuda_state_t *st = (vr_cuda_state_t *)state;
  const int crc = check_batch(st, ids, cu_seqlens, n_seqs);
  if (crc) return crc;
  if (!hidden) return VR_ERR_INVAL;
  if (st->n_busy > 0) return VR_ERR_BUSY;
  const vr_model_config_t *c = &st->cfg;
  const uint32_t T = cu_seqlens[n_seqs];
  vr_cuda_slot_t *sl = &st->slots[st->head];
  VR_CUDA_CHECK(cudaSetDevice(st->device));
  const vr_cuda_layout_t lay = layout_for(T, n_seqs, count_tiles(cu_seqlens, n_seqs));
  const int max_len = (int)longest(cu_seqlens, n_seqs);
  const int nt = stage_batch(st, sl, ids, cu_seqlens, n_seqs, T, max_len, &lay);
  if (nt < 0) return nt;
  const vr_cuda_acts_t h = enqueue_trunk(st, sl->in_d, &lay, (int)T, (int)T, max_len, nt, 0);
  if (c->is_decoder) vr_cuda_rmsnorm_f32(h.x, h.x, st->final_w, (int)T, c->hidden_size, c->norm_eps, st->stream);
  VR_CUDA_CHECK(cudaMemcpyAsync(hidden, h.x, (size_t)T * (size_t)c->hidden_size * sizeof(float),
                                cudaMemcpyDeviceToHost, st->stream));
  return VR_CUDA_TRY(cudaStreamSynchronize(st->stream));
}

/* Load-time warm-up: every bucket runs once eagerly (timing its GEMMs' cuBLASLt
 * candidates with cuda-autotune small when the bucket is at most 4096 tokens, or every
 * bucket with cuda-autotune all; otherwise larger GEMMs keep the heuristic's choice,
 * their candidates would cost seconds on big models), then
 * its graphs are captured for both slots. The batch: sequences of min(512, longest allowed)
 * tokens (at most max_seqs of them) of non-pad token ids. */
static int warm_up(vr_cuda_state_t *st) {
  const vr_model_config_t *c = &st->cfg;
  const int tune = st->autotune == VR_CUDA_AUTOTUNE_SMALL, tune_all = st->autotune == VR_CUDA_AUTOTUNE_ALL;
  /* sequences of at most 512 tokens: the GEMM shapes and graphs depend only on the bucket,
   * and one 32K-token causal sequence per bucket would cost seconds of attention on 8B */
  uint32_t maxlen = c->max_seq_len > 0 && (uint32_t)c->max_seq_len < st->max_tokens ? (uint32_t)c->max_seq_len
                                                                                    : st->max_tokens;
  if (maxlen > 512) maxlen = 512;
  int32_t *ids = (int32_t *)malloc((size_t)st->max_tokens * sizeof(int32_t));
  uint32_t *cu = (uint32_t *)malloc(((size_t)st->max_seqs + 1) * sizeof(uint32_t));
  float *scores = (float *)malloc((size_t)st->max_seqs * sizeof(float));
  int rc = ids && cu && scores ? 0 : VR_ERR_NOMEM;
  const double t0 = (double)clock() / CLOCKS_PER_SEC;
  /* Tuning times the candidates with their operands in HBM, as a forward streams every layer's
   * weights once (a flush buffer of twice the L2 is overwritten before each timed run), and
   * widens the search to the heuristic's split-K variants (vr_cuda_gemm_set_tune_opts); the
   * buffer is freed after the warm-up. */
  void *flush = NULL;
  size_t flush_bytes = 0;
  if (rc == 0 && (tune || tune_all)) {
    int l2 = 0;
    if (cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, st->device) == cudaSuccess && l2 > 0 &&
        cudaMalloc(&flush, 2 * (size_t)l2) == cudaSuccess)
      flush_bytes = 2 * (size_t)l2;
    else
      flush = NULL;
    (void)cudaGetLastError();
    vr_cuda_gemm_set_tune_opts(st->gemm, flush, flush_bytes, 1);
    /* only candidates with the heuristic's first choice's bits: a score never depends on
     * whether (or how) the load tuned (the split-K variants, which round differently, are then
     * taken only where they give those bits; none was faster in the runs measured) */
    vr_cuda_gemm_set_tune_same_bits(st->gemm, 1);
  }
  for (uint32_t t = 0; rc == 0 && t < st->max_tokens; ++t) {
    int32_t id = (int32_t)((t * 7919u + 3u) % (uint32_t)c->vocab_size);
    if (id == c->pad_token_id) id = (id + 1) % c->vocab_size;
    ids[t] = id;
  }
  char what[48];
  snprintf(what, sizeof what, "cuda:%d warm-up", st->device);
  vr_progress_t p;
  vr_progress_begin(&p, what, "token buckets", (uint32_t)st->n_buckets, 0);
  /* a bucket's forward costs about its tokens: the ETA counts tokens, not buckets */
  for (int i = 0; i < st->n_buckets; ++i) p.total_work += st->buckets[i].T;
  for (int i = 0; rc == 0 && i < st->n_buckets; ++i) {
    if (i) { /* bucket i-1 ran and was captured */
      vr_progress_work(&p, st->buckets[i - 1].T);
      vr_progress_step(&p, 1, 0);
    }
    vr_cuda_bucket_t *bk = &st->buckets[i];
    uint32_t n = 0;
    cu[0] = 0;
    while (cu[n] < bk->T && n < st->max_seqs) {
      const uint32_t len = bk->T - cu[n] < maxlen ? bk->T - cu[n] : maxlen;
      cu[n + 1] = cu[n] + len;
      ++n;
    }
    vr_cuda_gemm_set_tuning(st->gemm, tune_all || (tune && bk->T <= 4096));
    rc = cuda_forward(st, ids, cu, n, scores);
    vr_cuda_gemm_set_tuning(st->gemm, 0);
    for (int si = 0; rc == 0 && si < VR_CUDA_SLOTS; ++si)
      if (!bk->exec[si]) capture(st, bk, si);
  }
  if (rc == 0) rc = VR_CUDA_TRY(cudaStreamSynchronize(st->stream));
  if (tune || tune_all) {
    vr_cuda_gemm_set_tune_opts(st->gemm, NULL, 0, 0);
    vr_cuda_gemm_set_tune_same_bits(st->gemm, 0);
    if (flush) (void)VR_CUDA_TRY(cudaFree(flush));
  }
  if (rc == 0) {
    vr_progress_work(&p, st->buckets[st->n_buckets - 1].T);
    vr_progress_step(&p, 1, 0);
    vr_progress_end(&p);
  }
  if (rc == 0)
    vr_log(VR_LOG_INFO, "cuda:%d warm-up: %d token buckets (%u..%u) run and captured, %llu GEMM plans (%llu tuned), exact-size forwards from %u tokens, cpu %.2fs",
           st->device, st->n_buckets, st->buckets[0].T, st->buckets[st->n_buckets - 1].T,
           (unsigned long long)vr_cuda_gemm_plans_created(st->gemm),
           (unsigned long long)vr_cuda_gemm_plans_tuned(st->gemm), st->exact_min_T, (double)clock() / CLOCKS_PER_SEC - t0);
  free(ids), free(cu), free(scores);
  return rc;
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
    .hidden = cuda_hidden,
    .free = cuda_free,
    .describe = cuda_describe,
    .submit = cuda_submit,
    .collect = cuda_collect,
    .max_inflight = VR_CUDA_SLOTS,
};
