/* vr_cuda_roll_backend.cu: the rollout engine's cuda backend (vr_cuda_roll_backend.h says what it
 * does; the table's contract is trainer/vr_rollout.h's). Kernels: model/cuda/vr_cuda_ops.h (GEMM
 * plans, embeddings, RMSNorm, RoPE, SwiGLU, varlen attention, row gathers) and
 * vr_cuda_roll_ops.h (K/V append, paged decode attention, sampling). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_cuda_check.h"
#include "vr_cuda_ops.h"
#include "vr_cuda_roll_backend.h"
#include "vr_cuda_roll_ops.h"
#include "vr_log.h"

#define RCU_MAX_ALLOCS 256
#define RCU_MAX_BUCKETS 24
#define RCU_GEMM_WORKSPACE (32u << 20)
#define RCU_STAGE_FLOATS (8u << 20) /* two pinned + two device staging chunks of 32 MiB */
#define RCU_MAX_SG 128                /* decode GEMM shapes with a kernel choice */

typedef struct rcu_layer {
  uint16_t *wqkv;  /* (Nqkv, C) q | k | v rows */
  uint16_t *wo;    /* (C, QD) */
  uint16_t *wgu;   /* (2F, C) gate | up rows */
  uint16_t *wdown; /* (C, F) */
  uint16_t *bqkv;  /* (Nqkv) bf16 or NULL */
  uint16_t *bgu;   /* (2F) bf16 or NULL */
  float *bo, *bdown; /* (C) or NULL */
  float *n1w, *n2w;  /* (C) */
} rcu_layer_t;

/* The kernel of one decode GEMM shape (vr_cuda_roll_gemm vs cuBLASLt), chosen at its bucket's
 * warm-up when VR_CUDA_ROLL_DGEMM_TIMED: ours 1 = vr_cuda_roll_gemm with cfg, 0 = cuBLASLt. */
typedef struct rcu_sg {
  int M, N, K, out_f32, bias, beta1;
  int ours;
  vr_cuda_roll_gemm_cfg_t cfg;
  float lt_us, sg_us; /* the timings behind the choice (sg_us 0: ours failed the check) */
} rcu_sg_t;

/* A decode bucket: B rows; its steps run at partition length part << k (class k, k <
 * VR_CUDA_ROLL_PART_LENGTHS), k picked per step from the live contexts (vr_cuda_roll_pick_part_ctx;
 * always 0 when the length is fixed: vr_cuda_roll_set_part), one graph per class captured at the
 * class's first step. */
typedef struct rcu_bucket {
  int B, part; /* part: class 0's length (vr_cuda_roll_pick_part of B, or the fixed one) */
  int cls;     /* the last step's class */
  int warm;    /* ran eagerly once (plans exist) */
  int sample;  /* its step ends with the sampler (fixed at the first step: st->fuse_sample then) */
  int io;      /* st->graph_io at the first step when it samples, else 0: 1 or 2, the step stages its
                * metadata from the pinned block (1) or from its device copy (2) and copies its
                * results back by kernels (rcu_decode_step) */
  int par;     /* the last step's host block (st->mk), the graph of io steps */
  /* class k's graph; io buckets: one per host block (exec[k][mk], each reading its own block or
   * its own device copy) */
  cudaGraphExec_t exec[VR_CUDA_ROLL_PART_LENGTHS][2];
} rcu_bucket_t;

/* Word offsets of the metadata block (pinned host mirror and device copy). */
typedef struct rcu_layout {
  size_t ids, pos, slots, lens, srow, feed, bt, btrow, cu, last, meta, tiles, words;
} rcu_layout_t;

typedef struct rcu {
  const vr_model_config_t *c;
  vr_rollout_options_t opt;
  int device, n_sms;
  cudaStream_t s;
  vr_cuda_gemm_t *gemm;
  void *allocs[RCU_MAX_ALLOCS];
  int n_allocs;
  size_t dev_weight_bytes, dev_kv_bytes, dev_work_bytes;
  int QD, KD, NQKV, F, C, V;
  uint32_t num_blocks, max_blocks, WT, S, max_ctx, max_tiles;
  /* weights */
  uint16_t *tok, *head;
  float *final_w, *inv_freq;
  rcu_layer_t *L;
  size_t n_params; /* 0 until the first set_weights */
  struct rcu_wt *wl; /* the first set_weights' tensor list with their offsets (set_weights_device) */
  int n_wl;
  /* K/V pool: per layer (num_blocks, Hkv, ...) K and V */
  uint16_t *kpool, *vpool;
  size_t layer_elems;
  /* workspaces (WT rows) */
  float *x, *xl, *logits, *po, *pml;
  size_t scratch_rows; /* rows of po / pml: (sequence, partition) pairs of the largest decode grid */
  uint16_t *xn, *qkv, *ao, *mlp, *act, *xnl;
  uint32_t n_logits;
  /* metadata */
  rcu_layout_t lay;
  int32_t *meta_h, *meta_d;
  cudaEvent_t meta_ev; /* the last metadata upload: meta_h may be rewritten once it completed */
  int32_t *meta_hb[2]; /* meta_h, meta_ev: one of these pairs, alternating per forward (rcu_fill) */
  cudaEvent_t meta_evb[2];
  int mk;
  /* sampling; sout: a fused step's tokens (B) then log-probs (B, as float bits) */
  vr_cuda_roll_sample_row_t *srow_h, *srow_d;
  int32_t *sout_d;
  /* decode_launch / decode_wait: launched steps' results (tokens then log-probs, 2 B words) come back
   * into sout_hb[k], k = (p_head + i) % 2 for the i-th pending step, out_ev[k] after the copy */
  int32_t *sout_hb[2];
  cudaEvent_t out_ev[2];
  int32_t *meta_hd[2], *sout_hd[2]; /* meta_hb / sout_hb through their device mappings (io steps) */
  int graph_io;                     /* vr_cuda_roll_graph_io (default 2) */
  /* io 2 steps: the words of meta_hb[k] a step stages, packed at its bucket's width (rcu_upload),
   * copied on the copy stream cs; db_ev[k] after the step that read meta_db[k] */
  cudaStream_t cs;
  int32_t *meta_db[2];
  cudaEvent_t db_ev[2];
  /* vr_cuda_roll_time_steps: per launched step (ring of 4 by p_seq) events at its first stream op,
   * before and after its graph (or eager kernels), after its last op; sums over waited steps */
  int time_steps;
  cudaEvent_t tev[4][4];
  uint64_t p_seq, p_sq[2];
  double ts_sum[3];
  uint64_t ts_n, ts_np, ts_last;
  int ts_have;
  int p_slot[2]; /* the host slot (sout_hb / out_ev) of the i-th pending step, at (p_head + i) % 2 */
  int p_B[2];
  uint32_t p_n[2], p_head, p_count, p_lastn; /* p_lastn: the last launched step's rows (feed bound) */
  int fuse_sample;
  void *sws;        /* the multi-block greedy sampler's chunks (vr_cuda_roll_sample_ws) */
  int split_sample; /* 1: greedy rows over several blocks (sws); 0: one block per row */
  /* decode GEMM tuning (vr_cuda_roll_set_tuning): operands from HBM while timed, split-K variants */
  int tune_cold, tune_splitk;
  unsigned attn_flags; /* the decode step's attention: VR_ROLL_ATTN_* (vr_cuda_roll_set_attn) */
  int part_mode;       /* vr_cuda_roll_set_part: 0 by the live contexts, -1 by the bucket only, > 0 fixed */
  int part_sms;        /* the SM count behind vr_cuda_roll_pick_part_ctx (vr_cuda_roll_set_part_rule; the
                        * rule gets vr_cuda_roll_part_sms of it) */
  uint64_t part_steps[VR_CUDA_ROLL_PART_LENGTHS]; /* decode steps per partition length 16 << i */
  void *flush;
  size_t flush_bytes;

  int32_t *stok_h, *stok_d;
  float *slp_h, *slp_d;
  /* weight staging */
  float *stage_h[2], *stage_d[2];
  cudaEvent_t stage_ev[2];
  int stage_k;
  /* decode graphs */
  rcu_bucket_t buckets[RCU_MAX_BUCKETS];
  int n_buckets, use_graphs;
  cudaEvent_t dec_ev0, dec_ev1;
  int dec_timed;
  unsigned skip; /* vr_cuda_roll_profile_decode's variants: RCU_SKIP_* ops left out; 0 otherwise */
  /* decode GEMM choices */
  rcu_sg_t sg[RCU_MAX_SG];
  int n_sg, in_decode, sg_tuning;
  unsigned dgemm;  /* VR_CUDA_ROLL_DGEMM_* */
  int dgemm_ok;    /* vr_cuda_roll_gemm_available on this device */
  void *sg_scratch;
  size_t sg_scratch_bytes;
  unsigned *sg_res_d;
  cudaEvent_t sg_ev0, sg_ev1;
} rcu_t;

#define RCU_SKIP_ATTN 1u  /* decode attention (in a decode step with the RoPE and the K/V append) */
#define RCU_SKIP_GEMM 2u  /* the layers' GEMMs */
#define RCU_SKIP_SMALL 4u /* norms, SwiGLU, embeddings (prefill: RoPE, K/V append too) */
#define RCU_SKIP_HEAD 8u  /* final norm + LM head (+ the fused sampler) */

static void *rcu_dalloc(rcu_t *st, size_t bytes, size_t *acct) {
  if (st->n_allocs >= RCU_MAX_ALLOCS) return NULL;
  void *p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  st->allocs[st->n_allocs++] = p;
  if (acct) *acct += bytes;
  return p;
}

static void rcu_free(void *state) {
  rcu_t *st = (rcu_t *)state;
  if (!st) return;
  if (st->s) (void)cudaStreamSynchronize(st->s);
  if (st->cs) (void)cudaStreamSynchronize(st->cs);
  for (int i = 0; i < st->n_buckets; ++i)
    for (int k = 0; k < VR_CUDA_ROLL_PART_LENGTHS; ++k)
      for (int j = 0; j < 2; ++j)
        if (st->buckets[i].exec[k][j]) (void)cudaGraphExecDestroy(st->buckets[i].exec[k][j]);
  for (int i = 0; i < st->n_allocs; ++i) (void)cudaFree(st->allocs[i]);
  for (int k = 0; k < 2; ++k) {
    if (st->meta_hb[k]) (void)cudaFreeHost(st->meta_hb[k]);
    if (st->meta_evb[k]) (void)cudaEventDestroy(st->meta_evb[k]);
    if (st->sout_hb[k]) (void)cudaFreeHost(st->sout_hb[k]);
    if (st->out_ev[k]) (void)cudaEventDestroy(st->out_ev[k]);
    if (st->db_ev[k]) (void)cudaEventDestroy(st->db_ev[k]);
  }
  if (st->srow_h) (void)cudaFreeHost(st->srow_h);
  if (st->stok_h) (void)cudaFreeHost(st->stok_h);
  if (st->slp_h) (void)cudaFreeHost(st->slp_h);
  for (int k = 0; k < 2; ++k) {
    if (st->stage_h[k]) (void)cudaFreeHost(st->stage_h[k]);
    if (st->stage_ev[k]) (void)cudaEventDestroy(st->stage_ev[k]);
  }
  if (st->dec_ev0) (void)cudaEventDestroy(st->dec_ev0);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      if (st->tev[i][j]) (void)cudaEventDestroy(st->tev[i][j]);
  if (st->dec_ev1) (void)cudaEventDestroy(st->dec_ev1);
  if (st->sg_ev0) (void)cudaEventDestroy(st->sg_ev0);
  if (st->sg_ev1) (void)cudaEventDestroy(st->sg_ev1);
  if (st->gemm) vr_cuda_gemm_free(st->gemm);
  if (st->s) (void)cudaStreamDestroy(st->s);
  if (st->cs) (void)cudaStreamDestroy(st->cs);
  free(st->L);
  free(st->wl);
  free(st);
}

static rcu_layout_t rcu_layout(uint32_t WT, uint32_t S, uint32_t MB, uint32_t max_tiles) {
  rcu_layout_t l;
  l.ids = 0;
  l.pos = l.ids + WT;
  l.slots = l.pos + WT;
  l.lens = l.slots + WT;
  static_assert(sizeof(vr_cuda_roll_sample_row_t) % 8 == 0, "sample rows: whole 8-byte words");
  l.srow = l.lens + WT; /* even: 8-byte aligned rows (their u is a double) */
  l.feed = l.srow + (size_t)S * (sizeof(vr_cuda_roll_sample_row_t) / sizeof(int32_t));
  l.bt = l.feed + S;
  l.btrow = l.bt + (size_t)S * MB;
  l.cu = l.btrow + WT;
  l.last = l.cu + S + 1;
  l.meta = l.last + S;
  l.tiles = l.meta + 4;
  l.words = l.tiles + 2 * (size_t)max_tiles;
  return l;
}

/* The words an io step of B rows stages after its four per-row arrays: the sampling rows, the feed
 * words and B block-table rows, from lay.srow on. */
static size_t rcu_span(const rcu_t *st, int B) { return st->lay.bt + (size_t)B * st->max_blocks - st->lay.srow; }

/* part <= 0: vr_cuda_roll_pick_part's */
static void rcu_set_part(const rcu_t *st, rcu_bucket_t *b, int part) {
  b->part = part > 0 ? part : vr_cuda_roll_pick_part(b->B, st->c->num_heads, st->c->num_kv_heads, st->c->head_dim, st->n_sms);
}

/* Bucket b's partition length in class k and its grid's partition axis (every length up to max_ctx). */
static int rcu_part(const rcu_bucket_t *b, int k) { return b->part << k; }
static int rcu_max_parts(const rcu_t *st, const rcu_bucket_t *b, int k) {
  const int mp = (int)((st->max_ctx + (uint32_t)rcu_part(b, k) - 1) / (uint32_t)rcu_part(b, k));
  return mp < 1 ? 1 : mp;
}

/* The class of a decode step of bucket bk over the contexts ctx (n sequences). */
static int rcu_part_class(const rcu_t *st, const rcu_bucket_t *bk, const uint32_t *ctx, uint32_t n) {
  if (st->part_mode != 0) return 0;
  const vr_model_config_t *c = st->c;
  const int sms = vr_cuda_roll_part_sms(c->num_heads / c->num_kv_heads, c->head_dim, st->attn_flags, st->part_sms);
  const int p = vr_cuda_roll_pick_part_ctx(bk->part, c->num_heads, c->num_kv_heads, c->head_dim, sms, ctx, (int)n,
                                           c->sliding_window);
  int k = 0;
  while (rcu_part(bk, k) < p && k + 1 < VR_CUDA_ROLL_PART_LENGTHS) ++k;
  return k;
}

static void rcu_add_bucket(rcu_t *st, int B) {
  rcu_bucket_t *b = &st->buckets[st->n_buckets++];
  memset(b, 0, sizeof *b);
  b->B = B;
  rcu_set_part(st, b, 0);
}

/* The gemm context's tuning options from tune_cold / tune_splitk (cold without a flush buffer: hot). */
static void rcu_apply_tuning(rcu_t *st) {
  vr_cuda_gemm_set_tune_opts(st->gemm, st->tune_cold ? st->flush : NULL, st->tune_cold ? st->flush_bytes : 0,
                             st->tune_splitk);
}

static int rcu_init(const vr_model_config_t *c, const vr_rollout_options_t *opt, int device_index, void **state,
                    uint32_t *num_blocks) {
  *state = NULL;
  if (opt->block_size != VR_ROLL_BLOCK) {
    vr_log(VR_LOG_ERROR, "rollout cuda: block_size %u is not supported (the cache kernels use %d-token blocks). "
           "HINT: --block-size %d", opt->block_size, VR_ROLL_BLOCK, VR_ROLL_BLOCK);
    return VR_ERR_UNSUPPORTED;
  }
  const int D = c->head_dim;
  if (D % 8 || D > 256 || (D & (D - 1)) || c->num_heads % c->num_kv_heads) {
    vr_log(VR_LOG_ERROR, "rollout cuda: head_dim %d is not supported (8, 16, 32, 64, 128 or 256)", D);
    return VR_ERR_UNSUPPORTED;
  }
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || device_index < 0 || device_index >= n_dev) {
    (void)cudaGetLastError();
    vr_log(VR_LOG_ERROR, "rollout cuda: no CUDA device %d (%d visible)", device_index, n_dev);
    return VR_ERR_DEVICE;
  }
  rcu_t *st = (rcu_t *)calloc(1, sizeof *st);
  if (!st) return VR_ERR_NOMEM;
  st->c = c;
  st->opt = *opt;
  st->device = device_index;
  st->use_graphs = 1;
  st->dgemm = VR_CUDA_ROLL_DGEMM_DEFAULT; /* cuBLASLt: ours lost on every decode shape (docs/benchmarks.md) */
  st->fuse_sample = 1;
  st->graph_io = 2;
  st->split_sample = 1;
  st->tune_cold = 1; /* vr_cuda_roll_set_tuning; one choice per key in the process (vr_cuda_gemm.cu) */
  st->tune_splitk = 1;
  st->attn_flags = 0; /* the attention kernel by group size; no PDL (measured no faster) */
  int rc = 0;
#define TRY(call)                        \
  do {                                   \
    if ((rc = VR_CUDA_TRY(call)) != 0) { \
      rcu_free(st);                      \
      return rc;                         \
    }                                    \
  } while (0)
  TRY(cudaSetDevice(device_index));
  TRY(cudaDeviceGetAttribute(&st->n_sms, cudaDevAttrMultiProcessorCount, device_index));
  st->part_sms = st->n_sms;
  st->dgemm_ok = vr_cuda_roll_gemm_available(device_index);
  TRY(cudaStreamCreateWithFlags(&st->s, cudaStreamNonBlocking));
  TRY(cudaStreamCreateWithFlags(&st->cs, cudaStreamNonBlocking));
  if ((rc = vr_cuda_gemm_init(&st->gemm, RCU_GEMM_WORKSPACE)) != 0) {
    rcu_free(st);
    return rc;
  }
  /* the choices earlier processes tuned (opt.gemm_tune, gemm_cache: vr_rollout.h); a bad file is
   * warned about and tuning goes on, so its status is not ours */
  if (opt->gemm_tune >= 0) (void)vr_cuda_gemm_cache_open(opt->gemm_cache);
  const size_t C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size, V = (size_t)c->vocab_size;
  const size_t H = (size_t)c->num_heads, KV = (size_t)c->num_kv_heads, Lc = (size_t)c->num_layers;
  st->C = (int)C, st->F = (int)F, st->V = (int)V;
  st->QD = (int)(H * D), st->KD = (int)(KV * D), st->NQKV = st->QD + 2 * st->KD;
  const uint64_t bb = vr_rollout_block_bytes(c, opt->block_size, 2);
  const uint64_t nb = bb ? opt->kv_cache_bytes / bb : 0;
  if (nb == 0 || nb > (uint64_t)INT32_MAX / VR_ROLL_BLOCK) {
    vr_log(VR_LOG_ERROR, "rollout cuda: a K/V budget of %llu bytes holds %llu blocks of %u tokens (%llu bytes each). "
           "HINT: raise --kv-cache-bytes", (unsigned long long)opt->kv_cache_bytes, (unsigned long long)nb,
           opt->block_size, (unsigned long long)bb);
    rcu_free(st);
    return nb == 0 ? VR_ERR_NOMEM : VR_ERR_INVAL;
  }
  st->num_blocks = (uint32_t)nb;
  st->max_blocks = (opt->max_model_len + VR_ROLL_BLOCK - 1) / VR_ROLL_BLOCK;
  st->S = opt->max_seqs;
  st->WT = opt->max_batch_tokens > opt->max_seqs ? opt->max_batch_tokens : opt->max_seqs;
  st->max_ctx = opt->max_model_len;
  if ((uint64_t)st->max_ctx > (uint64_t)st->num_blocks * VR_ROLL_BLOCK) st->max_ctx = st->num_blocks * VR_ROLL_BLOCK;
  st->max_tiles = st->WT / VR_CUDA_ATTN_BM + st->S + 1;
  st->L = (rcu_layer_t *)calloc(Lc, sizeof *st->L);
  if (!st->L) {
    rcu_free(st);
    return VR_ERR_NOMEM;
  }
  int oom = 0;
#define DA(ptr, type, n, acct) \
  if (!oom && !((ptr) = (type *)rcu_dalloc(st, (size_t)(n) * sizeof(type), &st->acct))) oom = 1
  /* weights */
  DA(st->tok, uint16_t, V * C, dev_weight_bytes);
  if (c->tie_word_embeddings) st->head = st->tok;
  else DA(st->head, uint16_t, V * C, dev_weight_bytes);
  DA(st->final_w, float, C, dev_weight_bytes);
  DA(st->inv_freq, float, D / 2, dev_weight_bytes);
  for (size_t l = 0; l < Lc; ++l) {
    rcu_layer_t *Ly = &st->L[l];
    DA(Ly->wqkv, uint16_t, (size_t)st->NQKV * C, dev_weight_bytes);
    DA(Ly->wo, uint16_t, C * st->QD, dev_weight_bytes);
    DA(Ly->wgu, uint16_t, 2 * F * C, dev_weight_bytes);
    DA(Ly->wdown, uint16_t, C * F, dev_weight_bytes);
    DA(Ly->n1w, float, C, dev_weight_bytes);
    DA(Ly->n2w, float, C, dev_weight_bytes);
    if (c->attention_bias) DA(Ly->bqkv, uint16_t, st->NQKV, dev_weight_bytes);
    if (c->o_bias) DA(Ly->bo, float, C, dev_weight_bytes);
    if (c->mlp_bias) {
      DA(Ly->bgu, uint16_t, 2 * F, dev_weight_bytes);
      DA(Ly->bdown, float, C, dev_weight_bytes);
    }
  }
  /* K/V pool */
  st->layer_elems = (size_t)st->num_blocks * KV * VR_ROLL_BLOCK * D;
  DA(st->kpool, uint16_t, Lc * st->layer_elems, dev_kv_bytes);
  DA(st->vpool, uint16_t, Lc * st->layer_elems, dev_kv_bytes);
  /* workspaces */
  const size_t WT = st->WT, S = st->S;
  DA(st->x, float, WT * C, dev_work_bytes);
  DA(st->xn, uint16_t, WT * C, dev_work_bytes);
  DA(st->qkv, uint16_t, WT * st->NQKV, dev_work_bytes);
  DA(st->ao, uint16_t, WT * st->QD, dev_work_bytes);
  DA(st->mlp, uint16_t, WT * 2 * F, dev_work_bytes);
  DA(st->act, uint16_t, WT * F, dev_work_bytes);
  DA(st->xl, float, S * C, dev_work_bytes);
  DA(st->xnl, uint16_t, S * C, dev_work_bytes);
  DA(st->logits, float, S * V, dev_work_bytes);
  /* decode buckets (1, 2, 4, ... below max_seqs, then max_seqs); the paged-attention scratch fits
   * the largest of them and the chunked-prefill path (WT rows) */
  for (uint32_t B = 1; B < st->S && st->n_buckets < RCU_MAX_BUCKETS - 1; B *= 2) rcu_add_bucket(st, (int)B);
  rcu_add_bucket(st, (int)st->S);
  const int part_wt = vr_cuda_roll_pick_part((int)WT, (int)H, (int)KV, D, st->n_sms);
  size_t scratch_rows = WT * (size_t)((st->max_ctx + part_wt - 1) / part_wt);
  for (int i = 0; i < st->n_buckets; ++i) {
    const size_t r = (size_t)st->buckets[i].B * rcu_max_parts(st, &st->buckets[i], 0); /* class 0: the most */
    if (r > scratch_rows) scratch_rows = r;
  }
  st->scratch_rows = scratch_rows;
  DA(st->po, float, scratch_rows * H * D, dev_work_bytes);
  DA(st->pml, float, scratch_rows * H * 2, dev_work_bytes);
  st->lay = rcu_layout(st->WT, st->S, st->max_blocks, st->max_tiles);
  DA(st->meta_d, int32_t, st->lay.words, dev_work_bytes);
  for (int k = 0; k < 2; ++k) DA(st->meta_db[k], int32_t, 4 * S + rcu_span(st, (int)S), dev_work_bytes);
  DA(st->srow_d, vr_cuda_roll_sample_row_t, S * 64, dev_work_bytes);
  DA(st->stok_d, int32_t, S * 64, dev_work_bytes);
  DA(st->slp_d, float, S * 64, dev_work_bytes);
  DA(st->sout_d, int32_t, 2 * S, dev_work_bytes);
  DA(st->sws, double, vr_cuda_roll_sample_ws_bytes((int)(S * 64), (int)V) / sizeof(double) + 1, dev_work_bytes);
  for (int k = 0; k < 2; ++k) DA(st->stage_d[k], float, RCU_STAGE_FLOATS, dev_work_bytes);
  { /* the decode GEMM: an output to check it against cuBLASLt at a timed warm-up */
    const size_t m = S < VR_ROLL_GEMM_MAX_M ? S : VR_ROLL_GEMM_MAX_M;
    size_t n = (size_t)st->NQKV > C ? (size_t)st->NQKV : C;
    n = n > 2 * F ? n : 2 * F;
    n = n > V ? n : V;
    st->sg_scratch_bytes = m * n * sizeof(float);
    DA(st->sg_scratch, float, m * n, dev_work_bytes);
    DA(st->sg_res_d, unsigned, 2, dev_work_bytes);
  }
#undef DA
  if (oom) {
    vr_log(VR_LOG_ERROR, "rollout cuda: out of device memory (weights %llu, K/V pool %llu, workspaces %llu bytes so far). "
           "HINT: lower --kv-cache-bytes, --max-seqs or --max-batch-tokens",
           (unsigned long long)st->dev_weight_bytes, (unsigned long long)st->dev_kv_bytes,
           (unsigned long long)st->dev_work_bytes);
    rcu_free(st);
    return VR_ERR_NOMEM;
  }
  for (int k = 0; k < 2; ++k) {
    TRY(cudaMallocHost((void **)&st->meta_hb[k], st->lay.words * sizeof(int32_t)));
    TRY(cudaEventCreateWithFlags(&st->meta_evb[k], cudaEventDisableTiming));
    TRY(cudaMallocHost((void **)&st->sout_hb[k], 2 * S * sizeof(int32_t)));
    TRY(cudaEventCreateWithFlags(&st->out_ev[k], cudaEventDisableTiming));
    TRY(cudaEventCreateWithFlags(&st->db_ev[k], cudaEventDisableTiming));
    if (cudaHostGetDevicePointer((void **)&st->meta_hd[k], st->meta_hb[k], 0) != cudaSuccess ||
        cudaHostGetDevicePointer((void **)&st->sout_hd[k], st->sout_hb[k], 0) != cudaSuccess) {
      (void)cudaGetLastError();
      st->graph_io = 0; /* no device mapping of pinned memory: the stream operations */
      vr_log(VR_LOG_WARN, "rollout cuda: pinned host memory is not mapped on the device; decode steps upload and "
             "download around their graphs");
    }
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) TRY(cudaEventCreate(&st->tev[i][j]));
  st->meta_h = st->meta_hb[0];
  st->meta_ev = st->meta_evb[0];
  TRY(cudaMallocHost((void **)&st->srow_h, S * 64 * sizeof(vr_cuda_roll_sample_row_t)));
  TRY(cudaMallocHost((void **)&st->stok_h, S * 64 * sizeof(int32_t)));
  TRY(cudaMallocHost((void **)&st->slp_h, S * 64 * sizeof(float)));
  for (int k = 0; k < 2; ++k) {
    TRY(cudaMallocHost((void **)&st->stage_h[k], RCU_STAGE_FLOATS * sizeof(float)));
    TRY(cudaEventCreateWithFlags(&st->stage_ev[k], cudaEventDisableTiming));
  }
  TRY(cudaEventCreate(&st->dec_ev0));
  TRY(cudaEventCreate(&st->dec_ev1));
  TRY(cudaEventCreate(&st->sg_ev0));
  TRY(cudaEventCreate(&st->sg_ev1));
  { /* the GEMM tuning's flush buffer: the gate/up output rows past the largest decode bucket, which
     * no decode step uses (rows < S), when they span at least the L2 (at most twice it) */
    int l2 = 0;
    TRY(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device_index));
    const size_t spare = (WT - S) * 2 * F * sizeof(uint16_t);
    if (l2 > 0 && spare >= (size_t)l2) {
      st->flush = st->mlp + S * 2 * F;
      st->flush_bytes = spare < 2 * (size_t)l2 ? spare : 2 * (size_t)l2;
    }
    rcu_apply_tuning(st);
  }
  TRY(cudaMemcpyAsync(st->inv_freq, c->rope_inv_freq, (size_t)(D / 2) * sizeof(float), cudaMemcpyHostToDevice, st->s));
  TRY(cudaMemsetAsync(st->kpool, 0, Lc * st->layer_elems * 2, st->s));
  TRY(cudaMemsetAsync(st->vpool, 0, Lc * st->layer_elems * 2, st->s));
  TRY(cudaStreamSynchronize(st->s));
#undef TRY
  *state = st;
  *num_blocks = st->num_blocks;
  return 0;
}

/* ---- weights ------------------------------------------------------------------------------------ */

typedef struct rcu_wt {
  const float *src; /* in the view */
  size_t at;        /* src's offset in the parameter buffer (kept list only) */
  size_t n;
  void *dst;
  int bf16;
  int required;
  const char *what;
  int layer;
} rcu_wt_t;

/* The tensors of the view in upload order; returns their count (items has room for 16 per layer
 * + 4). */
static int rcu_weight_list(const rcu_t *st, const vr_rollout_weights_t *w, rcu_wt_t *it) {
  const vr_model_config_t *c = st->c;
  const size_t C = st->C, F = st->F, V = st->V, QD = st->QD, KD = st->KD;
  int n = 0;
#define ADD(s_, n_, d_, b_, r_, w_, l_) \
  do {                                   \
    rcu_wt_t *e_ = &it[n++];             \
    e_->src = (s_);                      \
    e_->n = (n_);                        \
    e_->dst = (void *)(d_);              \
    e_->bf16 = (b_);                     \
    e_->required = (r_);                 \
    e_->what = (w_);                     \
    e_->layer = (l_);                    \
  } while (0)
  ADD(w->tok_emb, V * C, st->tok, 1, 1, "tok_emb", -1);
  ADD(w->final_norm_w, C, st->final_w, 0, 1, "final_norm_w", -1);
  if (!c->tie_word_embeddings) ADD(w->lm_head, V * C, st->head, 1, 1, "lm_head", -1);
  for (int l = 0; l < c->num_layers; ++l) {
    const vr_rollout_layer_w_t *a = &w->layers[l];
    const rcu_layer_t *d = &st->L[l];
    ADD(a->q_w, QD * C, d->wqkv, 1, 1, "q_w", l);
    ADD(a->k_w, KD * C, d->wqkv + QD * C, 1, 1, "k_w", l);
    ADD(a->v_w, KD * C, d->wqkv + (QD + KD) * C, 1, 1, "v_w", l);
    ADD(a->o_w, C * QD, d->wo, 1, 1, "o_w", l);
    ADD(a->norm1_w, C, d->n1w, 0, 1, "norm1_w", l);
    ADD(a->norm2_w, C, d->n2w, 0, 1, "norm2_w", l);
    ADD(a->gate_w, F * C, d->wgu, 1, 1, "gate_w", l);
    ADD(a->up_w, F * C, d->wgu + F * C, 1, 1, "up_w", l);
    ADD(a->down_w, C * F, d->wdown, 1, 1, "down_w", l);
    if (c->attention_bias) {
      ADD(a->q_b, QD, d->bqkv, 1, 1, "q_b", l);
      ADD(a->k_b, KD, d->bqkv + QD, 1, 1, "k_b", l);
      ADD(a->v_b, KD, d->bqkv + QD + KD, 1, 1, "v_b", l);
    }
    if (c->o_bias) ADD(a->o_b, C, d->bo, 0, 1, "o_b", l);
    if (c->mlp_bias) {
      ADD(a->gate_b, F, d->bgu, 1, 1, "gate_b", l);
      ADD(a->up_b, F, d->bgu + F, 1, 1, "up_b", l);
      ADD(a->down_b, C, d->bdown, 0, 1, "down_b", l);
    }
  }
#undef ADD
  return n;
}

/* Checks every tensor of the view lies inside base[0 .. n_params) (and tied heads are tied). */
static int rcu_check_view(const rcu_t *st, const float *base, size_t n_params, const vr_rollout_weights_t *w,
                          rcu_wt_t *it, int n) {
  if (st->c->tie_word_embeddings && w->lm_head != w->tok_emb) {
    vr_log(VR_LOG_ERROR, "rollout cuda: the config ties the embeddings but the weights view has its own lm_head");
    return VR_ERR_INVAL;
  }
  for (int i = 0; i < n; ++i) {
    const float *p = it[i].src;
    if (!p || p < base || (size_t)(p - base) > n_params || it[i].n > n_params - (size_t)(p - base)) {
      vr_log(VR_LOG_ERROR, "rollout cuda: weights view's %s (layer %d, %zu floats) is %s", it[i].what, it[i].layer,
             it[i].n, p ? "not inside the parameter buffer" : "missing");
      return VR_ERR_INVAL;
    }
  }
  return 0;
}

static void rcu_convert(rcu_t *st, const rcu_wt_t *t, size_t off, const float *dsrc, size_t len) {
  if (t->bf16) vr_cuda_convert_to_bf16((uint16_t *)t->dst + off, dsrc, 0, len, st->s);
  else VR_CUDA_CHECK(cudaMemcpyAsync((float *)t->dst + off, dsrc, len * sizeof(float), cudaMemcpyDeviceToDevice, st->s));
}

static int rcu_set_weights(void *state, const float *params, size_t n_params, const vr_rollout_weights_t *w) {
  rcu_t *st = (rcu_t *)state;
  if (st->n_params && n_params != st->n_params) {
    vr_log(VR_LOG_ERROR, "rollout cuda: new parameters have %zu floats, the engine was built for %zu", n_params,
           st->n_params);
    return VR_ERR_INVAL;
  }
  rcu_wt_t *it = (rcu_wt_t *)malloc(sizeof(rcu_wt_t) * (16 * (size_t)st->c->num_layers + 4));
  if (!it) return VR_ERR_NOMEM;
  const int n = rcu_weight_list(st, w, it);
  int rc = rcu_check_view(st, params, n_params, w, it, n);
  /* through two pinned chunks: while one is copied and converted, the host fills the other */
  for (int i = 0; i < n && !rc; ++i) {
    for (size_t off = 0; off < it[i].n; off += RCU_STAGE_FLOATS) {
      const size_t len = it[i].n - off < RCU_STAGE_FLOATS ? it[i].n - off : RCU_STAGE_FLOATS;
      const int k = st->stage_k;
      st->stage_k ^= 1;
      VR_CUDA_CHECK(cudaEventSynchronize(st->stage_ev[k]));
      memcpy(st->stage_h[k], it[i].src + off, len * sizeof(float));
      VR_CUDA_CHECK(cudaMemcpyAsync(st->stage_d[k], st->stage_h[k], len * sizeof(float), cudaMemcpyHostToDevice, st->s));
      rcu_convert(st, &it[i], off, st->stage_d[k], len);
      VR_CUDA_CHECK(cudaEventRecord(st->stage_ev[k], st->s));
    }
  }
  if (rc) {
    free(it);
    return rc;
  }
  VR_CUDA_CHECK(cudaStreamSynchronize(st->s));
  if (!st->wl) { /* the layout, for set_weights_device */
    for (int i = 0; i < n; ++i) it[i].at = (size_t)(it[i].src - params), it[i].src = NULL;
    st->wl = it, st->n_wl = n;
  } else {
    free(it);
  }
  st->n_params = n_params;
  return 0;
}

/* The kept tensors' parts inside [off, off + len), converted from src (device) into the weights. */
static int rcu_set_weights_device(void *state, const float *src, size_t off, size_t len) {
  rcu_t *st = (rcu_t *)state;
  if (!st->wl || off > st->n_params || len > st->n_params - off) {
    vr_log(VR_LOG_ERROR, "rollout cuda: device weight update of [%zu, +%zu), the engine holds %zu floats%s", off, len,
           st->n_params, st->wl ? "" : " (set_weights first)");
    return VR_ERR_INVAL;
  }
  for (int i = 0; i < st->n_wl; ++i) {
    const rcu_wt_t *t = &st->wl[i];
    const size_t lo = t->at > off ? t->at : off;
    const size_t hi = t->at + t->n < off + len ? t->at + t->n : off + len;
    if (lo < hi) rcu_convert(st, t, lo - t->at, src + (lo - off), hi - lo);
  }
  VR_CUDA_CHECK(cudaGetLastError());
  VR_CUDA_CHECK(cudaStreamSynchronize(st->s));
  st->dec_timed = 0;
  return 0;
}

static float *rcu_device_chunk(void *state, size_t *n_floats) {
  rcu_t *st = (rcu_t *)state;
  *n_floats = RCU_STAGE_FLOATS;
  return st->stage_d[0];
}

extern "C" int vr_cuda_roll_set_weights_device(void *state, const float *dparams, size_t n_params,
                                               const float *host_base, const vr_rollout_weights_t *w,
                                               double *seconds) {
  rcu_t *st = (rcu_t *)state;
  if (!st->n_params || n_params != st->n_params) {
    vr_log(VR_LOG_ERROR, "rollout cuda: device weight update of %zu floats, the engine holds %zu (set_weights first)",
           n_params, st->n_params);
    return VR_ERR_INVAL;
  }
  rcu_wt_t *it = (rcu_wt_t *)malloc(sizeof(rcu_wt_t) * (16 * (size_t)st->c->num_layers + 4));
  if (!it) return VR_ERR_NOMEM;
  const int n = rcu_weight_list(st, w, it);
  int rc = rcu_check_view(st, host_base, n_params, w, it, n);
  if (!rc) {
    VR_CUDA_CHECK(cudaEventRecord(st->dec_ev0, st->s));
    for (int i = 0; i < n; ++i) rcu_convert(st, &it[i], 0, dparams + (it[i].src - host_base), it[i].n);
    VR_CUDA_CHECK(cudaEventRecord(st->dec_ev1, st->s));
    VR_CUDA_CHECK(cudaEventSynchronize(st->dec_ev1));
    float ms = 0;
    VR_CUDA_CHECK(cudaEventElapsedTime(&ms, st->dec_ev0, st->dec_ev1));
    if (seconds) *seconds = ms * 1e-3;
    st->dec_timed = 0;
  }
  free(it);
  return rc;
}

/* ---- forwards ------------------------------------------------------------------------------------ */

typedef enum { RCU_ATTN_DECODE = 0, RCU_ATTN_VARLEN = 1, RCU_ATTN_PAGED_ROWS = 2 } rcu_attn_t;

/* Device time (us, median of 3 after one untimed run) of one decode GEMM: cuBLASLt (cfg NULL) or
 * vr_cuda_roll_gemm with *cfg; with the flush buffer (when there is one) overwritten before each
 * run, so the weights come from HBM as in a step. */
static float rcu_sg_time(rcu_t *st, const vr_cuda_roll_gemm_cfg_t *cfg, void *D, int out_f32, const uint16_t *A,
                         const uint16_t *W, const void *bias, int T, int N, int K, float beta) {
  float t[3];
  for (int r = -1; r < 3; ++r) {
    if (st->flush) VR_CUDA_CHECK(cudaMemsetAsync(st->flush, r + 2, st->flush_bytes, st->s));
    if (r >= 0) VR_CUDA_CHECK(cudaEventRecord(st->sg_ev0, st->s));
    if (cfg) vr_cuda_roll_gemm(D, out_f32, A, W, bias, T, N, K, beta, *cfg, st->s);
    else vr_cuda_gemm(st->gemm, D, out_f32, A, W, bias, T, N, K, beta, st->s);
    if (r < 0) continue;
    VR_CUDA_CHECK(cudaEventRecord(st->sg_ev1, st->s));
    VR_CUDA_CHECK(cudaEventSynchronize(st->sg_ev1));
    VR_CUDA_CHECK(cudaEventElapsedTime(&t[r], st->sg_ev0, st->sg_ev1));
  }
  const float lo = fminf(t[0], fminf(t[1], t[2])), hi = fmaxf(t[0], fmaxf(t[1], t[2]));
  return (t[0] + t[1] + t[2] - lo - hi) * 1e3f;
}

/* Our decode GEMM's configuration for (N, K): the fixed rule, PDL as the flags say. */
static vr_cuda_roll_gemm_cfg_t rcu_dgemm_cfg(const rcu_t *st, int N, int K) {
  vr_cuda_roll_gemm_cfg_t c = vr_cuda_roll_gemm_pick(N, K, st->n_sms);
  c.pdl = (st->dgemm & VR_CUDA_ROLL_DGEMM_PDL) != 0;
  return c;
}

/* A decode GEMM shape's first call in a bucket's warm-up pass (its values are garbage anyway):
 * cuBLASLt tunes its candidates and is timed; ours is timed in every configuration of
 * vr_cuda_roll_gemm_candidates, and the fastest is checked against cuBLASLt on zeroed outputs (max
 * |difference| within 1e-3 of the largest output for fp32, 1/64 for bf16, the rounding of one bf16
 * ulp); ours wins if it beats cuBLASLt by 3%. NULL when the table is full. */
static rcu_sg_t *rcu_sg_tune(rcu_t *st, void *D, int out_f32, const uint16_t *A, const uint16_t *W, const void *bias,
                             int T, int N, int K, float beta) {
  const size_t bytes = (size_t)T * N * (out_f32 ? 4 : 2);
  if (st->n_sg >= RCU_MAX_SG || bytes > st->sg_scratch_bytes) return NULL;
  rcu_sg_t *e = &st->sg[st->n_sg++];
  memset(e, 0, sizeof *e);
  e->M = T, e->N = N, e->K = K, e->out_f32 = out_f32, e->bias = bias != NULL, e->beta1 = beta == 1.f;
  vr_cuda_gemm(st->gemm, D, out_f32, A, W, bias, T, N, K, beta, st->s); /* cuBLASLt's own tuning */
  e->lt_us = rcu_sg_time(st, NULL, D, out_f32, A, W, bias, T, N, K, beta);
  vr_cuda_roll_gemm_cfg_t cand[96];
  const int nc = vr_cuda_roll_gemm_candidates(N, K, st->n_sms, cand, 96);
  float best = 0.f;
  e->cfg = rcu_dgemm_cfg(st, N, K);
  for (int i = 0; i < nc && i < 96; ++i) { /* timed on the scratch (D is garbage until the reference below) */
    cand[i].pdl = e->cfg.pdl;
    const float us = rcu_sg_time(st, &cand[i], st->sg_scratch, out_f32, A, W, bias, T, N, K, 0.f);
    if (best == 0.f || us < best) best = us, e->cfg = cand[i];
  }
  VR_CUDA_CHECK(cudaMemsetAsync(D, 0, bytes, st->s));
  vr_cuda_gemm(st->gemm, D, out_f32, A, W, bias, T, N, K, beta, st->s); /* the reference: D = A W^T + bias */
  VR_CUDA_CHECK(cudaMemsetAsync(st->sg_scratch, 0, bytes, st->s));
  vr_cuda_roll_gemm(st->sg_scratch, out_f32, A, W, bias, T, N, K, beta, e->cfg, st->s);
  vr_cuda_roll_gemm_compare(st->sg_scratch, D, out_f32, (size_t)T * N, st->sg_res_d, st->s);
  unsigned res[2];
  VR_CUDA_CHECK(cudaMemcpyAsync(res, st->sg_res_d, sizeof res, cudaMemcpyDeviceToHost, st->s));
  VR_CUDA_CHECK(cudaStreamSynchronize(st->s));
  float dmax, ymax;
  memcpy(&dmax, &res[0], sizeof dmax);
  memcpy(&ymax, &res[1], sizeof ymax);
  if (!(dmax <= (out_f32 ? 1e-3f : 1.f / 64.f) * ymax) || !isfinite(ymax)) {
    vr_log(VR_LOG_WARN, "rollout cuda: decode GEMM M=%d N=%d K=%d differs from cuBLASLt by %g (outputs up to %g): "
           "not used", T, N, K, dmax, ymax);
  } else {
    e->sg_us = best;
  }
  e->ours = e->sg_us > 0.f && e->sg_us < 0.97f * e->lt_us;
  vr_log(VR_LOG_DEBUG, "rollout cuda: decode GEMM M=%d N=%d K=%d: cuBLASLt %.1f us, ours %.1f us -> %s", T, N, K,
         e->lt_us, e->sg_us, e->ours ? "ours" : "cuBLASLt");
  return e;
}

/* Every GEMM of the forwards: in a decode step (M <= VR_ROLL_GEMM_MAX_M) ours where the flags ask
 * for it (the layers' and / or the LM head's, by rule, or per shape by the warm-up's timing: the
 * choice made there while st->sg_tuning), else cuBLASLt. */
static void rcu_gemm(rcu_t *st, void *D, int out_f32, const uint16_t *A, const uint16_t *W, const void *bias, int T,
                     int N, int K, float beta) {
  const unsigned want = W == st->head ? VR_CUDA_ROLL_DGEMM_HEAD : VR_CUDA_ROLL_DGEMM_LAYERS;
  if (st->in_decode && (st->dgemm & want) && st->dgemm_ok && vr_cuda_roll_gemm_supported(T, N, K) &&
      ((uintptr_t)A | (uintptr_t)W) % 16 == 0) {
    if (!(st->dgemm & VR_CUDA_ROLL_DGEMM_TIMED)) {
      vr_cuda_roll_gemm(D, out_f32, A, W, bias, T, N, K, beta, rcu_dgemm_cfg(st, N, K), st->s);
      return;
    }
    rcu_sg_t *e = NULL;
    for (int i = 0; i < st->n_sg && !e; ++i) {
      rcu_sg_t *c = &st->sg[i];
      if (c->M == T && c->N == N && c->K == K && c->out_f32 == out_f32 && c->bias == (bias != NULL) &&
          c->beta1 == (beta == 1.f))
        e = c;
    }
    if (!e && st->sg_tuning) e = rcu_sg_tune(st, D, out_f32, A, W, bias, T, N, K, beta);
    if (e && e->ours) {
      vr_cuda_roll_gemm(D, out_f32, A, W, bias, T, N, K, beta, e->cfg, st->s);
      return;
    }
  }
  vr_cuda_gemm(st->gemm, D, out_f32, A, W, bias, T, N, K, beta, st->s);
}

/* Embeddings and every layer on T rows of the metadata block; attention by mode (decode: part /
 * max_parts are the bucket's; varlen: n_tiles tiles). x (fp32) holds the last layer's output. */
static void rcu_trunk(rcu_t *st, int T, rcu_attn_t mode, int part, int max_parts, int n_tiles) {
  const vr_model_config_t *c = st->c;
  cudaStream_t s = st->s;
  const int C = st->C, F = st->F, H = c->num_heads, Hkv = c->num_kv_heads, D = c->head_dim;
  const int QD = st->QD, KD = st->KD, NQ = st->NQKV;
  const int32_t *md = st->meta_d;
  const rcu_layout_t *ly = &st->lay;
  const float scale = 1.f / sqrtf((float)D);
  const int gemm = !(st->skip & RCU_SKIP_GEMM), small = !(st->skip & RCU_SKIP_SMALL), attn = !(st->skip & RCU_SKIP_ATTN);
  if (small)
    vr_cuda_embed_norm(st->x, st->xn, md + ly->ids, md + ly->pos, st->tok, NULL, NULL, 0, st->L[0].n1w, NULL, T, C,
                       c->norm_eps, s);
  for (int l = 0; l < c->num_layers; ++l) {
    const rcu_layer_t *Ly = &st->L[l];
    uint16_t *kc = st->kpool + (size_t)l * st->layer_elems, *vc = st->vpool + (size_t)l * st->layer_elems;
    if (gemm) rcu_gemm(st, st->qkv, 0, st->xn, Ly->wqkv, Ly->bqkv, T, NQ, C, 0.f);
    if (small && mode != RCU_ATTN_DECODE) /* a decode step's attention applies the rope and appends */
      vr_cuda_roll_rope_append(kc, vc, st->qkv, NQ, 0, QD, QD + KD, md + ly->pos, md + ly->slots, st->inv_freq,
                               c->rope_attention_scaling, T, H, Hkv, D, s);
    if (!attn) {
    } else if (mode == RCU_ATTN_DECODE) {
      vr_cuda_roll_decode_attention_rope(st->ao, QD, st->qkv, NQ, 0, QD, QD + KD, kc, vc, md + ly->bt,
                                         (int)st->max_blocks, md + ly->lens, md + ly->pos, md + ly->slots, st->inv_freq,
                                         c->rope_attention_scaling, T, H, Hkv, D, c->sliding_window, scale, part,
                                         max_parts, st->po, st->pml, st->attn_flags, s);
    } else if (mode == RCU_ATTN_VARLEN) {
      vr_cuda_attention(st->qkv, NQ, 0, QD, QD + KD, st->ao, QD, md + ly->cu, md + ly->tiles, md + ly->meta, n_tiles, H,
                        Hkv, D, 1, c->sliding_window, scale, T, s);
    } else {
      vr_cuda_roll_decode_attention(st->ao, QD, st->qkv, NQ, 0, kc, vc, md + ly->bt, (int)st->max_blocks,
                                    md + ly->btrow, md + ly->lens, T, H, Hkv, D,
                                    c->sliding_window, scale, part, max_parts, st->po, st->pml,
                                    st->attn_flags & ~VR_ROLL_ATTN_PDL, s);
    }
    if (gemm) rcu_gemm(st, st->x, 1, st->ao, Ly->wo, Ly->bo, T, C, QD, 1.f);
    if (small) vr_cuda_rmsnorm(st->x, st->xn, Ly->n2w, T, C, c->norm_eps, s);
    if (gemm) rcu_gemm(st, st->mlp, 0, st->xn, Ly->wgu, Ly->bgu, T, 2 * F, C, 0.f);
    if (small) vr_cuda_swiglu(st->act, st->mlp, T, F, s);
    if (gemm) rcu_gemm(st, st->x, 1, st->act, Ly->wdown, Ly->bdown, T, C, F, 1.f);
    if (small && l + 1 < c->num_layers) vr_cuda_rmsnorm(st->x, st->xn, st->L[l + 1].n1w, T, C, c->norm_eps, s);
  }
}

/* Final norm + LM head on R rows of x (rows R = T, decode) or on the gathered last rows (prefill). */
static void rcu_head(rcu_t *st, const float *x, int R) {
  if (st->skip & RCU_SKIP_HEAD) return;
  vr_cuda_rmsnorm(x, st->xnl, st->final_w, R, st->C, st->c->norm_eps, st->s);
  rcu_gemm(st, st->logits, 1, st->xnl, st->head, NULL, R, st->V, st->C, 0.f);
}

/* One decode step of bucket b in partition class k: trunk, head and, when the bucket samples, the
 * sampler on its B rows (the metadata block's rows; tokens into sout_d, log-probs after them). */
static void rcu_decode_enqueue(rcu_t *st, const rcu_bucket_t *b, int k) {
  st->in_decode = 1;
  rcu_trunk(st, b->B, RCU_ATTN_DECODE, rcu_part(b, k), rcu_max_parts(st, b, k), 0);
  rcu_head(st, st->x, b->B);
  if (b->sample && !(st->skip & RCU_SKIP_HEAD))
    vr_cuda_roll_sample_ws(st->sout_d, reinterpret_cast<float *>(st->sout_d + b->B), st->logits,
                           reinterpret_cast<const vr_cuda_roll_sample_row_t *>(st->meta_d + st->lay.srow), b->B, st->V,
                           st->split_sample ? st->sws : NULL, st->s);
  st->in_decode = 0;
}

/* An io step's first kernel: the metadata of b's B rows into meta_d, from host block p (its device
 * mapping) or from its device copy meta_db[p] (io 2, rcu_upload's packing), fed rows' ids from the
 * previous step's tokens (sout_d). */
static void rcu_stage(rcu_t *st, const rcu_bucket_t *b, int p) {
  const rcu_layout_t *ly = &st->lay;
  const size_t seg[4] = {ly->ids, ly->pos, ly->slots, ly->lens}, B = (size_t)b->B;
  const size_t packed[4] = {0, B, 2 * B, 3 * B};
  const int dev = b->io == 2;
  vr_cuda_roll_stage_decode(st->meta_d, seg, ly->srow, rcu_span(st, b->B), ly->feed, dev ? st->meta_db[p] : st->meta_hd[p],
                            dev ? packed : seg, dev ? 4 * B : ly->srow, st->sout_d, b->B, st->V, st->s);
}

/* An io 2 step's upload, at its launch on the copy stream (so that it overlaps the step still
 * running): host block p's words that rcu_stage reads into meta_db[p], the four per-row arrays
 * (spaced by the prefill width WT in the block) packed at b's width, then the span; once the step
 * that last read meta_db[p] has read it. meta_ev (the host block's) after the copy; the main stream
 * waits for it before the step. */
static void rcu_upload(rcu_t *st, const rcu_bucket_t *b, int p) {
  const rcu_layout_t *ly = &st->lay;
  const size_t B = (size_t)b->B, pitch = (ly->pos - ly->ids) * sizeof(int32_t);
  VR_ASSERT(ly->slots - ly->pos == ly->pos - ly->ids && ly->lens - ly->slots == ly->pos - ly->ids);
  VR_CUDA_CHECK(cudaStreamWaitEvent(st->cs, st->db_ev[p], 0));
  VR_CUDA_CHECK(cudaMemcpy2DAsync(st->meta_db[p], B * sizeof(int32_t), st->meta_h + ly->ids, pitch, B * sizeof(int32_t),
                                  4, cudaMemcpyHostToDevice, st->cs));
  VR_CUDA_CHECK(cudaMemcpyAsync(st->meta_db[p] + 4 * B, st->meta_h + ly->srow, rcu_span(st, b->B) * sizeof(int32_t),
                                cudaMemcpyHostToDevice, st->cs));
  VR_CUDA_CHECK(cudaEventRecord(st->meta_ev, st->cs));
  VR_CUDA_CHECK(cudaStreamWaitEvent(st->s, st->meta_ev, 0));
}

/* An io step's graph: stage from host block p (or its device copy), the step, its results into host
 * slot p. */
static void rcu_decode_enqueue_io(rcu_t *st, const rcu_bucket_t *b, int k, int p) {
  rcu_stage(st, b, p);
  rcu_decode_enqueue(st, b, k);
  vr_cuda_roll_copy_out(st->sout_hd[p], st->sout_d, 2 * b->B, st->s);
}

/* Validates the batch against the state and fills the per-token rows of the metadata block
 * (ids, positions, slots, lengths = position + 1, block-table row), the block tables and the
 * last rows, into the host block not used by the previous forward (whose upload may still be
 * pending). feed (decode steps, NULL = none): the rows whose id the device fills in (their b->ids
 * are not read) into the feed words. Returns 0 or VR_ERR_INVAL / VR_ERR_TOO_LARGE (logged). */
static int rcu_fill(rcu_t *st, const vr_rollout_batch_t *b, const int32_t *feed, int *fresh) {
  const uint32_t n = b->n_seqs;
  if (n == 0 || n > st->S || !b->cu_q || b->cu_q[0] != 0 || b->cu_q[n] > st->WT || b->max_blocks != st->max_blocks) {
    vr_log(VR_LOG_ERROR, "rollout cuda: batch of %u sequences / %u tokens / table stride %u exceeds the engine's "
           "%u / %u / %u", n, b->cu_q ? b->cu_q[n] : 0, b->max_blocks, st->S, st->WT, st->max_blocks);
    return VR_ERR_TOO_LARGE;
  }
  st->mk ^= 1;
  st->meta_h = st->meta_hb[st->mk];
  st->meta_ev = st->meta_evb[st->mk];
  VR_CUDA_CHECK(cudaEventSynchronize(st->meta_ev)); /* the upload before the previous one has read it */
  int32_t *m = st->meta_h;
  const rcu_layout_t *ly = &st->lay;
  *fresh = 1;
  for (uint32_t q = 0; q < n; ++q) {
    const uint32_t q0 = b->cu_q[q], q1 = b->cu_q[q + 1], ctx = b->ctx_len[q];
    if (q1 <= q0 || q1 - q0 > ctx || ctx > st->opt.max_model_len) {
      vr_log(VR_LOG_ERROR, "rollout cuda: sequence %u feeds %u tokens with a context of %u (max_model_len %u)", q,
             q1 - q0, ctx, st->opt.max_model_len);
      return VR_ERR_INVAL;
    }
    if (ctx != q1 - q0) *fresh = 0;
    const int32_t *tab = b->block_tables + (size_t)q * st->max_blocks;
    for (uint32_t j = 0; j < (ctx + VR_ROLL_BLOCK - 1) / VR_ROLL_BLOCK; ++j)
      if (tab[j] < 0 || (uint32_t)tab[j] >= st->num_blocks) {
        vr_log(VR_LOG_ERROR, "rollout cuda: sequence %u's block %u is %d (pool of %u)", q, j, tab[j], st->num_blocks);
        return VR_ERR_INVAL;
      }
    memcpy(m + ly->bt + (size_t)q * st->max_blocks, tab, sizeof(int32_t) * st->max_blocks);
    const int fed = feed && feed[q] >= 0;
    if (feed) m[ly->feed + q] = fed ? feed[q] : -1;
    for (uint32_t t = q0; t < q1; ++t) {
      const uint32_t p = ctx - (q1 - q0) + (t - q0);
      if (!fed && (b->ids[t] < 0 || b->ids[t] >= st->V)) {
        vr_log(VR_LOG_ERROR, "rollout cuda: token id %d at row %u is outside the vocabulary (%d)", b->ids[t], t, st->V);
        return VR_ERR_INVAL;
      }
      m[ly->ids + t] = fed ? 0 : b->ids[t];
      m[ly->pos + t] = (int32_t)p;
      m[ly->slots + t] = tab[p / VR_ROLL_BLOCK] * VR_ROLL_BLOCK + (int32_t)(p % VR_ROLL_BLOCK);
      m[ly->lens + t] = (int32_t)p + 1;
      m[ly->btrow + t] = (int32_t)q;
    }
    m[ly->last + q] = (int32_t)q1 - 1;
  }
  m[ly->meta + VR_CUDA_META_N_SEQS] = (int32_t)n;
  return 0;
}

static int cmp_tile_q0_desc(const void *a, const void *b) {
  const int32_t *x = (const int32_t *)a, *y = (const int32_t *)b;
  return (y[1] > x[1]) - (y[1] < x[1]);
}

static int rcu_prefill(void *state, const vr_rollout_batch_t *b) {
  rcu_t *st = (rcu_t *)state;
  int fresh = 0, rc = rcu_fill(st, b, NULL, &fresh);
  if (rc) return rc;
  const uint32_t n = b->n_seqs, T = b->cu_q[n];
  const rcu_layout_t *ly = &st->lay;
  int32_t *m = st->meta_h;
  int n_tiles = 0;
  if (fresh) {
    const int rows = vr_cuda_attention_tile_rows(st->c->head_dim, (int)T);
    for (uint32_t q = 0; q <= n; ++q) m[ly->cu + q] = (int32_t)b->cu_q[q];
    for (uint32_t q = 0; q < n; ++q)
      for (uint32_t q0 = 0; q0 < b->cu_q[q + 1] - b->cu_q[q]; q0 += (uint32_t)rows) {
        m[ly->tiles + 2 * n_tiles] = (int32_t)q;
        m[ly->tiles + 2 * n_tiles + 1] = (int32_t)q0;
        ++n_tiles;
      }
    qsort(m + ly->tiles, (size_t)n_tiles, 2 * sizeof(int32_t), cmp_tile_q0_desc); /* longest work first */
    m[ly->meta + VR_CUDA_META_N_TILES] = n_tiles;
  }
  VR_CUDA_CHECK(cudaMemcpyAsync(st->meta_d, m, ly->words * sizeof(int32_t), cudaMemcpyHostToDevice, st->s));
  VR_CUDA_CHECK(cudaEventRecord(st->meta_ev, st->s));
  const int part = vr_cuda_roll_pick_part((int)st->WT, st->c->num_heads, st->c->num_kv_heads, st->c->head_dim, st->n_sms);
  uint32_t mx = 0;
  for (uint32_t q = 0; q < n; ++q) mx = b->ctx_len[q] > mx ? b->ctx_len[q] : mx;
  const int max_parts = (int)((mx + (uint32_t)part - 1) / (uint32_t)part);
  vr_cuda_gemm_set_plan_rows(st->gemm, 0);
  rcu_trunk(st, (int)T, fresh ? RCU_ATTN_VARLEN : RCU_ATTN_PAGED_ROWS, part, max_parts, n_tiles);
  vr_cuda_gather_rows(st->xl, st->x, st->meta_d + ly->last, st->meta_d + ly->meta, (int)n, st->C * (int)sizeof(float),
                      st->s);
  rcu_head(st, st->xl, (int)n);
  st->n_logits = n;
  st->dec_timed = 0;
  return 0;
}

/* The decode bucket of n rows: the smallest holding them (the last one holds max_seqs). */
static rcu_bucket_t *rcu_bucket_for(rcu_t *st, uint32_t n) {
  for (int i = 0; i < st->n_buckets; ++i)
    if ((uint32_t)st->buckets[i].B >= n) return &st->buckets[i];
  return NULL;
}

/* The device form of a sampling request (its uniform drawn here, as vr_sample_row's). */
static vr_cuda_roll_sample_row_t rcu_srow(const vr_sample_req_t *r, uint32_t row) {
  vr_cuda_roll_sample_row_t o;
  o.row = (int32_t)row;
  o.temperature = r ? r->p.temperature : 0.f;
  o.top_k = r ? r->p.top_k : -1;
  o.top_p = r ? r->p.top_p : 1.f;
  o.u = r ? vr_sample_uniform(r->key, r->stream, r->position) : 0.0;
  return o;
}

/* The sampler's results (k rows) to the caller: token -1 (a row of NaN / +Inf / only -Inf) reads
 * as 0 and makes the call VR_ERR_NONFINITE. */
static int rcu_take_samples(const int32_t *tok, const float *lp, uint32_t k, int32_t *tokens, float *logprobs) {
  int rc = 0;
  for (uint32_t i = 0; i < k; ++i) {
    tokens[i] = tok[i] < 0 ? 0 : tok[i];
    logprobs[i] = lp[i];
    if (tok[i] < 0) rc = VR_ERR_NONFINITE;
  }
  return rc;
}

/* One decode step of b (q_len 1 for every sequence): the metadata block (with the sampler's rows
 * when bk samples: rows[q] for q < n, NULL = greedy; padding rows greedy) uploaded, then bk's
 * graph of the step's partition class (rcu_part_class of b's contexts), or eagerly on bk's first
 * step (which captures that class's graph for the next ones); a class's first step in a warm
 * bucket captures its graph and replays it. Graph and eager run the same kernels with the same
 * partition length: the same bits. An io bucket (bk->io) has the step's first kernel stage the
 * block (rcu_stage, feeding the fed rows' ids) and its last one copy the tokens and log-probs into
 * host slot mk, both inside the graph (one graph per host block). io 1 stages from the host block
 * itself, so the block is free again only after the step (meta_ev after the graph); io 2 from its
 * device copy, uploaded first on the copy stream (rcu_upload), so the block is free after that copy
 * and the device copy after the step (db_ev). */
static int rcu_decode_step(rcu_t *st, const vr_rollout_batch_t *b, const vr_sample_req_t *rows, rcu_bucket_t *bk,
                           const int32_t *feed) {
  int fresh = 0, rc = rcu_fill(st, b, feed, &fresh);
  if (rc) return rc;
  const uint32_t n = b->n_seqs;
  const rcu_layout_t *ly = &st->lay;
  int32_t *m = st->meta_h;
  for (uint32_t r = n; r < (uint32_t)bk->B; ++r) { /* padding rows */
    m[ly->ids + r] = 0;
    m[ly->pos + r] = 0;
    m[ly->slots + r] = -1;
    m[ly->lens + r] = 0;
    m[ly->feed + r] = -1;
  }
  if (!bk->warm) {
    bk->sample = st->fuse_sample;
    bk->io = bk->sample ? st->graph_io : 0;
  }
  if (bk->sample) {
    vr_cuda_roll_sample_row_t *sr = reinterpret_cast<vr_cuda_roll_sample_row_t *>(m + ly->srow);
    for (uint32_t r = 0; r < (uint32_t)bk->B; ++r) sr[r] = rcu_srow(rows && r < n ? &rows[r] : NULL, r);
  }
  const int p = st->mk, io = bk->io;
  cudaEvent_t *tv = st->time_steps ? st->tev[st->p_seq % 4] : NULL;
  if (tv) VR_CUDA_CHECK(cudaEventRecord(tv[0], st->s));
  int fed = 0;
  for (uint32_t q = 0; feed && q < n; ++q) fed |= feed[q] >= 0;
  if (io) { /* the stage kernel reads every row's feed word */
    for (uint32_t q = 0; !feed && q < n; ++q) m[ly->feed + q] = -1;
    if (io == 2) rcu_upload(st, bk, p);
  } else {
    VR_CUDA_CHECK(cudaMemcpyAsync(st->meta_d, m, (ly->bt + (size_t)bk->B * st->max_blocks) * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, st->s));
    VR_CUDA_CHECK(cudaEventRecord(st->meta_ev, st->s));
    if (fed) /* the previous step's tokens (sout_d, which its download has read) into this step's ids */
      vr_cuda_roll_feed_ids(st->meta_d + ly->ids, st->meta_d + ly->feed, st->sout_d, (int)n, st->V, st->s);
  }
  const int k = rcu_part_class(st, bk, b->ctx_len, n);
  bk->cls = k;
  bk->par = io ? p : 0;
  int li = 0; /* part_steps' index: 16 << li */
  while ((VR_ROLL_BLOCK << li) < rcu_part(bk, k) && li + 1 < VR_CUDA_ROLL_PART_LENGTHS) ++li;
  st->part_steps[li]++;
  VR_CUDA_CHECK(cudaEventRecord(st->dec_ev0, st->s));
  if (tv) VR_CUDA_CHECK(cudaEventRecord(tv[1], st->s));
  const int was_warm = bk->warm;
  cudaGraphExec_t *ex = &bk->exec[k][bk->par];
  if (!was_warm || !st->use_graphs) {
    vr_cuda_gemm_set_plan_rows(st->gemm, 0);
    if (io) rcu_stage(st, bk, p);
    if (!was_warm && st->opt.gemm_tune >= 0) {
      /* the bucket's first step: a pass that times the cuBLASLt candidates of its GEMMs (runs each
       * several times, so the residual stream and the K/V it appends are garbage), then the real
       * pass, which starts from the embeddings and rewrites every slot the first one wrote. The
       * choices go into the GEMM-choice cache file for later processes (gemm_tune -1: no timing,
       * the heuristic's first algorithms) */
      vr_cuda_gemm_set_tuning(st->gemm, 1);
      st->sg_tuning = 1;
      rcu_decode_enqueue(st, bk, k);
      st->sg_tuning = 0;
      vr_cuda_gemm_set_tuning(st->gemm, 0);
      (void)vr_cuda_gemm_cache_save(); /* warned about inside; file I/O once per bucket */
    }
    rcu_decode_enqueue(st, bk, k); /* eager: this step's result */
    if (io) vr_cuda_roll_copy_out(st->sout_hd[p], st->sout_d, 2 * bk->B, st->s);
    bk->warm = 1;
  }
  if (st->use_graphs && !*ex) { /* capture this class's graph (the capture does not run) */
    vr_cuda_gemm_set_plan_rows(st->gemm, 0);
    cudaGraph_t g;
    VR_CUDA_CHECK(cudaStreamBeginCapture(st->s, cudaStreamCaptureModeThreadLocal));
    if (io) rcu_decode_enqueue_io(st, bk, k, p);
    else rcu_decode_enqueue(st, bk, k);
    VR_CUDA_CHECK(cudaStreamEndCapture(st->s, &g));
    VR_CUDA_CHECK(cudaGraphInstantiate(ex, g, 0));
    VR_CUDA_CHECK(cudaGraphDestroy(g));
  }
  if (was_warm && st->use_graphs) VR_CUDA_CHECK(cudaGraphLaunch(*ex, st->s));
  VR_CUDA_CHECK(cudaEventRecord(st->dec_ev1, st->s));
  if (tv) VR_CUDA_CHECK(cudaEventRecord(tv[2], st->s));
  if (io) /* the stage kernel has read the host block (io 1) or its device copy (io 2) */
    VR_CUDA_CHECK(cudaEventRecord(io == 2 ? st->db_ev[p] : st->meta_ev, st->s));
  st->n_logits = n;
  st->dec_timed = 1;
  return 0;
}

static int rcu_decode(void *state, const vr_rollout_batch_t *b) {
  rcu_t *st = (rcu_t *)state;
  for (uint32_t q = 0; q < b->n_seqs; ++q)
    if (b->cu_q[q + 1] - b->cu_q[q] != 1) return rcu_prefill(state, b);
  rcu_bucket_t *bk = rcu_bucket_for(st, b->n_seqs);
  if (!bk) return rcu_prefill(state, b); /* too many sequences: rcu_fill says so */
  return rcu_decode_step(st, b, NULL, bk, NULL);
}

static int rcu_sample(void *state, uint32_t n, const vr_sample_req_t *rows, int32_t *tokens, float *logprobs);

/* decode_launch: a decode step that ends with the sampler (the direct form: q_len 1, rows[q].row
 * == q, a sampling bucket), its tokens and log-probs copied back into a host slot after it without
 * waiting; feed rows take the previous launch's tokens on the device (rcu_decode_step). */
static int rcu_decode_launch(void *state, const vr_rollout_batch_t *b, const vr_sample_req_t *rows,
                             const int32_t *feed) {
  rcu_t *st = (rcu_t *)state;
  const uint32_t n = b->n_seqs;
  int direct = st->p_count < 2;
  for (uint32_t q = 0; q < n; ++q)
    if (b->cu_q[q + 1] - b->cu_q[q] != 1 || rows[q].row != q) direct = 0;
  rcu_bucket_t *bk = direct ? rcu_bucket_for(st, n) : NULL;
  if (!bk || !(bk->warm ? bk->sample : st->fuse_sample)) return !feed && st->p_count == 0 ? VR_ERR_UNSUPPORTED : VR_ERR_INVAL;
  for (uint32_t q = 0; feed && q < n; ++q)
    if (feed[q] >= 0 && (uint32_t)feed[q] >= st->p_lastn) {
      vr_log(VR_LOG_ERROR, "rollout cuda: row %u is fed from row %d of a step of %u rows", q, feed[q], st->p_lastn);
      return VR_ERR_INVAL;
    }
  if (st->p_count >= 2) return VR_ERR_INVAL;
  const int rc = rcu_decode_step(st, b, rows, bk, feed);
  if (rc) return rc;
  const uint32_t k = (st->p_head + st->p_count) % 2;
  /* io steps' results come back into the slot of their host block (the kernel in their graph); two
   * launches in flight alternate blocks (rcu_fill), so their slots differ */
  const int slot = bk->io ? st->mk : (int)k;
  if (st->p_count && st->p_slot[st->p_head] == slot) return VR_ERR_INVAL; /* cannot happen: see above */
  if (!bk->io)
    VR_CUDA_CHECK(cudaMemcpyAsync(st->sout_hb[slot], st->sout_d, 2 * (size_t)bk->B * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, st->s));
  if (st->time_steps) VR_CUDA_CHECK(cudaEventRecord(st->tev[st->p_seq % 4][3], st->s));
  VR_CUDA_CHECK(cudaEventRecord(st->out_ev[slot], st->s));
  st->p_slot[k] = slot;
  st->p_sq[k] = st->p_seq++;
  st->p_B[k] = bk->B;
  st->p_n[k] = n;
  st->p_count++;
  st->p_lastn = n;
  return 0;
}

/* vr_cuda_roll_time_steps' sums for the waited step q (its events complete): its stream ops (first
 * to last), its graph, and the period from the previous step's first op (when that was step q - 1). */
static void rcu_time_step(rcu_t *st, uint64_t q) {
  cudaEvent_t *e = st->tev[q % 4];
  float a = 0, g = 0, d = 0;
  VR_CUDA_CHECK(cudaEventElapsedTime(&a, e[0], e[3]));
  VR_CUDA_CHECK(cudaEventElapsedTime(&g, e[1], e[2]));
  st->ts_sum[0] += a;
  st->ts_sum[1] += g;
  st->ts_n++;
  if (st->ts_have && st->ts_last + 1 == q) { /* step q - 1's events: re-recorded at launch q + 3 */
    VR_CUDA_CHECK(cudaEventElapsedTime(&d, st->tev[(q - 1) % 4][0], e[0]));
    st->ts_sum[2] += d;
    st->ts_np++;
  }
  st->ts_last = q;
  st->ts_have = 1;
}

static int rcu_decode_wait(void *state, int32_t *tokens, float *logprobs) {
  rcu_t *st = (rcu_t *)state;
  if (st->p_count == 0) return VR_ERR_INVAL;
  const uint32_t k = st->p_head;
  const int slot = st->p_slot[k];
  VR_CUDA_CHECK(cudaEventSynchronize(st->out_ev[slot]));
  if (st->time_steps) rcu_time_step(st, st->p_sq[k]);
  st->p_head = (k + 1) % 2;
  st->p_count--;
  return rcu_take_samples(st->sout_hb[slot], reinterpret_cast<const float *>(st->sout_hb[slot] + st->p_B[k]),
                          st->p_n[k], tokens, logprobs);
}

/* decode + sample of rows[q] (row q) in one call: with a sampling bucket the sampler is the
 * graph's last kernel and the step costs one upload, one download and one synchronisation. */
static int rcu_decode_sample(void *state, const vr_rollout_batch_t *b, const vr_sample_req_t *rows, int32_t *tokens,
                             float *logprobs) {
  const int rc = rcu_decode_launch(state, b, rows, NULL);
  if (rc == VR_ERR_UNSUPPORTED) {
    const int r2 = rcu_decode(state, b);
    return r2 ? r2 : rcu_sample(state, b->n_seqs, rows, tokens, logprobs);
  }
  return rc ? rc : rcu_decode_wait(state, tokens, logprobs);
}

extern "C" double vr_cuda_roll_last_decode_ms(void *state) {
  rcu_t *st = (rcu_t *)state;
  if (!st->dec_timed) return 0.0;
  float ms = 0;
  VR_CUDA_CHECK(cudaEventSynchronize(st->dec_ev1));
  VR_CUDA_CHECK(cudaEventElapsedTime(&ms, st->dec_ev0, st->dec_ev1));
  return ms;
}

extern "C" void vr_cuda_roll_use_graphs(void *state, int on) { ((rcu_t *)state)->use_graphs = on != 0; }

extern "C" void vr_cuda_roll_graph_io(void *state, int form) {
  rcu_t *st = (rcu_t *)state;
  const int out = st->sout_hd[0] && st->sout_hd[1], in = st->meta_hd[0] && st->meta_hd[1];
  st->graph_io = form == 2 && out ? 2 : form == 1 && out && in ? 1 : 0;
}

extern "C" void vr_cuda_roll_time_steps(void *state, int on) {
  rcu_t *st = (rcu_t *)state;
  st->time_steps = on != 0;
  st->ts_sum[0] = st->ts_sum[1] = st->ts_sum[2] = 0;
  st->ts_n = st->ts_np = 0;
  st->ts_have = 0;
}

extern "C" int vr_cuda_roll_step_times(void *state, double ms[3]) {
  const rcu_t *st = (const rcu_t *)state;
  if (!st->ts_n || !st->ts_np) return VR_ERR_INVAL;
  ms[0] = st->ts_sum[2] / (double)st->ts_np;
  ms[1] = st->ts_sum[0] / (double)st->ts_n;
  ms[2] = st->ts_sum[1] / (double)st->ts_n;
  return 0;
}

extern "C" void vr_cuda_roll_use_dgemm(void *state, unsigned flags) { ((rcu_t *)state)->dgemm = flags; }

extern "C" void vr_cuda_roll_fuse_sample(void *state, int on) { ((rcu_t *)state)->fuse_sample = on != 0; }

extern "C" void vr_cuda_roll_split_sample(void *state, int on) { ((rcu_t *)state)->split_sample = on != 0; }

extern "C" void vr_cuda_roll_set_tuning(void *state, int cold, int splitk) {
  rcu_t *st = (rcu_t *)state;
  st->tune_cold = cold != 0;
  st->tune_splitk = splitk != 0;
  rcu_apply_tuning(st);
}

extern "C" void vr_cuda_roll_set_attn(void *state, int kernel, int pdl) {
  static const unsigned k[] = {VR_ROLL_ATTN_REGS, VR_ROLL_ATTN_RING, VR_ROLL_ATTN_MMA, VR_ROLL_ATTN_OLD_RULE};
  ((rcu_t *)state)->attn_flags = (kernel < 0 || kernel > 3 ? 0u : k[kernel]) | (pdl ? VR_ROLL_ATTN_PDL : 0u);
}

extern "C" int vr_cuda_roll_time_attention(void *state, uint32_t n, int reps, unsigned flags, int part, double *ms) {
  rcu_t *st = (rcu_t *)state;
  rcu_bucket_t *bk = rcu_bucket_for(st, n);
  if (!bk || !bk->warm || reps < 1) return VR_ERR_INVAL;
  const vr_model_config_t *c = st->c;
  const rcu_layout_t *ly = &st->lay;
  const int32_t *md = st->meta_d;
  int max_parts = rcu_max_parts(st, bk, bk->cls);
  if (part > 0) {
    if (part < VR_ROLL_BLOCK || part > VR_ROLL_MAX_PART || part % VR_ROLL_BLOCK) return VR_ERR_INVAL;
    max_parts = (int)((st->max_ctx + (uint32_t)part - 1) / (uint32_t)part);
    if ((size_t)bk->B * max_parts > st->scratch_rows) return VR_ERR_INVAL;
  } else {
    part = rcu_part(bk, bk->cls);
  }
  for (int r = -2; r < reps; ++r) {
    if (r == 0) VR_CUDA_CHECK(cudaEventRecord(st->dec_ev0, st->s));
    vr_cuda_roll_decode_attention_rope(st->ao, st->QD, st->qkv, st->NQKV, 0, st->QD, st->QD + st->KD, st->kpool,
                                       st->vpool, md + ly->bt, (int)st->max_blocks, md + ly->lens, md + ly->pos,
                                       md + ly->slots, st->inv_freq, c->rope_attention_scaling, bk->B, c->num_heads,
                                       c->num_kv_heads, c->head_dim, c->sliding_window, 1.f / sqrtf((float)c->head_dim),
                                       part, max_parts, st->po, st->pml, flags & ~VR_ROLL_ATTN_PDL, st->s);
  }
  VR_CUDA_CHECK(cudaEventRecord(st->dec_ev1, st->s));
  VR_CUDA_CHECK(cudaEventSynchronize(st->dec_ev1));
  float t = 0;
  VR_CUDA_CHECK(cudaEventElapsedTime(&t, st->dec_ev0, st->dec_ev1));
  *ms = t / reps;
  st->dec_timed = 0;
  return 0;
}

extern "C" int vr_cuda_roll_set_part(void *state, int part) {
  rcu_t *st = (rcu_t *)state;
  if (part < -1 || (part > 0 && (part < VR_ROLL_BLOCK || part > VR_ROLL_MAX_PART || part % VR_ROLL_BLOCK ||
                                 vr_cuda_roll_attention_smem(st->c->num_heads, st->c->num_kv_heads, st->c->head_dim,
                                                             part) > 48u * 1024u)))
    return VR_ERR_INVAL;
  for (int i = 0; i < st->n_buckets; ++i) {
    rcu_bucket_t b = st->buckets[i];
    rcu_set_part(st, &b, part);
    if (b.warm || (size_t)b.B * rcu_max_parts(st, &b, 0) > st->scratch_rows) return VR_ERR_INVAL;
  }
  for (int i = 0; i < st->n_buckets; ++i) rcu_set_part(st, &st->buckets[i], part);
  st->part_mode = part;
  return 0;
}

extern "C" void vr_cuda_roll_set_part_rule(void *state, int n_sms) {
  rcu_t *st = (rcu_t *)state;
  st->part_sms = n_sms > 0 ? n_sms : st->n_sms;
}

extern "C" void vr_cuda_roll_part_steps(void *state, uint64_t steps[VR_CUDA_ROLL_PART_LENGTHS]) {
  memcpy(steps, ((rcu_t *)state)->part_steps, sizeof(uint64_t) * VR_CUDA_ROLL_PART_LENGTHS);
}

extern "C" size_t vr_cuda_roll_gemm_report(void *state, char *buf, size_t n) {
  rcu_t *st = (rcu_t *)state;
  size_t off = 0;
  if (n) buf[0] = 0;
  for (int i = 0; i < st->n_sg; ++i) {
    const rcu_sg_t *e = &st->sg[i];
    const int w = snprintf(buf + (off < n ? off : n), off < n ? n - off : 0,
                           "  M=%d N=%d K=%d%s: cuBLASLt %.1f us, ours %.1f us (bn %d, kc %d, splits %d) -> %s\n", e->M,
                           e->N, e->K, e->beta1 ? " +=" : "", e->lt_us, e->sg_us, e->cfg.bn, e->cfg.kc, e->cfg.splits,
                           e->ours ? "ours" : "cuBLASLt");
    if (w > 0) off += (size_t)w;
  }
  for (int i = 0; i < st->n_buckets; ++i) /* cuBLASLt's timed choices per warm decode bucket */
    if (st->buckets[i].warm)
      off += vr_cuda_gemm_report(st->gemm, st->buckets[i].B, buf + (off < n ? off : n), off < n ? n - off : 0);
  return off;
}

extern "C" int vr_cuda_roll_profile_decode(void *state, uint32_t n, int reps, double ms[6]) {
  rcu_t *st = (rcu_t *)state;
  rcu_bucket_t *bk = rcu_bucket_for(st, n);
  if (!bk || !bk->warm || !bk->exec[bk->cls][bk->par] || reps < 1) return VR_ERR_INVAL;
  static const unsigned variants[5] = {0, RCU_SKIP_ATTN, RCU_SKIP_GEMM, RCU_SKIP_SMALL, RCU_SKIP_HEAD};
  for (int v = 0; v < 6; ++v) {
    for (int r = -2; r < reps; ++r) {
      if (r == 0) VR_CUDA_CHECK(cudaEventRecord(st->dec_ev0, st->s));
      if (v == 5) {
        VR_CUDA_CHECK(cudaGraphLaunch(bk->exec[bk->cls][bk->par], st->s));
      } else {
        st->skip = variants[v];
        rcu_decode_enqueue(st, bk, bk->cls);
        st->skip = 0;
      }
    }
    VR_CUDA_CHECK(cudaEventRecord(st->dec_ev1, st->s));
    VR_CUDA_CHECK(cudaEventSynchronize(st->dec_ev1));
    float t = 0;
    VR_CUDA_CHECK(cudaEventElapsedTime(&t, st->dec_ev0, st->dec_ev1));
    ms[v] = t / reps;
  }
  st->dec_timed = 0;
  return 0;
}

/* ---- sampling, blocks, logits ---------------------------------------------------------------- */

static int rcu_sample(void *state, uint32_t n, const vr_sample_req_t *rows, int32_t *tokens, float *logprobs) {
  rcu_t *st = (rcu_t *)state;
  const uint32_t cap = st->S * 64;
  int rc = 0;
  for (uint32_t i0 = 0; i0 < n; i0 += cap) {
    const uint32_t k = n - i0 < cap ? n - i0 : cap;
    for (uint32_t i = 0; i < k; ++i) {
      const vr_sample_req_t *r = &rows[i0 + i];
      if (r->row >= st->n_logits) return VR_ERR_INVAL;
      st->srow_h[i] = rcu_srow(r, r->row);
    }
    VR_CUDA_CHECK(cudaMemcpyAsync(st->srow_d, st->srow_h, k * sizeof(vr_cuda_roll_sample_row_t), cudaMemcpyHostToDevice,
                                  st->s));
    vr_cuda_roll_sample_ws(st->stok_d, st->slp_d, st->logits, st->srow_d, (int)k, st->V,
                           st->split_sample ? st->sws : NULL, st->s);
    VR_CUDA_CHECK(cudaMemcpyAsync(st->stok_h, st->stok_d, k * sizeof(int32_t), cudaMemcpyDeviceToHost, st->s));
    VR_CUDA_CHECK(cudaMemcpyAsync(st->slp_h, st->slp_d, k * sizeof(float), cudaMemcpyDeviceToHost, st->s));
    VR_CUDA_CHECK(cudaStreamSynchronize(st->s));
    const int r = rcu_take_samples(st->stok_h, st->slp_h, k, tokens + i0, logprobs + i0);
    if (r && !rc) rc = r;
  }
  return rc;
}

static int rcu_copy_blocks(void *state, const uint32_t *src, const uint32_t *dst, uint32_t n) {
  rcu_t *st = (rcu_t *)state;
  const size_t blk = (size_t)st->c->num_kv_heads * VR_ROLL_BLOCK * st->c->head_dim; /* elements per block per layer */
  for (uint32_t i = 0; i < n; ++i) {
    if (src[i] >= st->num_blocks || dst[i] >= st->num_blocks) return VR_ERR_INVAL;
    for (int l = 0; l < st->c->num_layers; ++l) {
      const size_t o = (size_t)l * st->layer_elems;
      VR_CUDA_CHECK(cudaMemcpyAsync(st->kpool + o + dst[i] * blk, st->kpool + o + src[i] * blk, blk * 2,
                                    cudaMemcpyDeviceToDevice, st->s));
      VR_CUDA_CHECK(cudaMemcpyAsync(st->vpool + o + dst[i] * blk, st->vpool + o + src[i] * blk, blk * 2,
                                    cudaMemcpyDeviceToDevice, st->s));
    }
  }
  return 0;
}

static int rcu_logits(void *state, uint32_t n_rows, float *out) {
  rcu_t *st = (rcu_t *)state;
  if (n_rows > st->n_logits) return VR_ERR_INVAL;
  VR_CUDA_CHECK(cudaMemcpyAsync(out, st->logits, (size_t)n_rows * st->V * sizeof(float), cudaMemcpyDeviceToHost, st->s));
  VR_CUDA_CHECK(cudaStreamSynchronize(st->s));
  return 0;
}

static void rcu_describe(void *state, uint64_t *weight_bytes, uint64_t *kv_bytes, uint64_t *work_bytes, char *device,
                         size_t device_n) {
  rcu_t *st = (rcu_t *)state;
  *weight_bytes = st->dev_weight_bytes;
  *kv_bytes = st->dev_kv_bytes;
  *work_bytes = st->dev_work_bytes;
  snprintf(device, device_n, "cuda:%d", st->device);
}

extern "C" const vr_rollout_backend_t vr_rollout_backend_cuda = {
    .name = "cuda",
    .init = rcu_init,
    .free = rcu_free,
    .set_weights = rcu_set_weights,
    .prefill = rcu_prefill,
    .decode = rcu_decode,
    .sample = rcu_sample,
    .decode_sample = rcu_decode_sample, /* the sampler inside the step's graph */
    .decode_launch = rcu_decode_launch, /* the same, not waited for: the one-step-late pipeline */
    .decode_wait = rcu_decode_wait,
    .copy_blocks = rcu_copy_blocks,
    .set_weights_device = rcu_set_weights_device, /* the colocated actor's buffer, or NCCL chunks */
    .device_chunk = rcu_device_chunk,             /* stage_d[0]: chunks received into it */
    .logits = rcu_logits,
    .describe = rcu_describe,
};
