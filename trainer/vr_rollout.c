/* vr_rollout.c: the rollout engine's scheduler (vr_rollout.h).
 *
 * Every response is a sequence: its tokens (prompt, then generated), len (tokens known), ctx (tokens
 * whose K/V are in the cache) and a block table. A sequence that is decoding has ctx == len - 1:
 * its last sampled token is fed by the next step. The loop, until every response is finished:
 *   1. admission (prefill first, as vLLM): waiting sequences, preempted ones first (in the order
 *      they were first admitted), then fresh prompts in order, join while the running set stays
 *      within max_seqs, the packed prefill within max_batch_tokens (a longer prompt runs alone, in
 *      chunks) and the free blocks cover their prompt plus one block for every running sequence (so
 *      the next decode step need not preempt at once). With nothing running the first waiting
 *      sequence is always admitted: generate() checked that one sequence fits in the whole cache.
 *      A fresh prompt is prefilled once; its n responses then share its blocks (reference counts)
 *      and sample their first tokens from the same logits row, each with its own RNG stream.
 *   2. otherwise one decode step for every running sequence: each gets the slot of its next
 *      position (a new block at a block boundary, a private copy of a shared block: copy on write);
 *      when no block is free the most recently admitted running sequence is preempted (its blocks
 *      released, its tokens kept, recomputed by a prefill when it is admitted again).
 *      With a backend that has decode_launch (opt.decode_pipeline, vr_gen_decode_pipe) the decode
 *      steps of one batch run one step late: the next step is launched before this one's tokens
 *      are back, its input tokens fed on the backend, as long as it is the batch the plain loop
 *      would run next; a stop seen late drops that step, so the kept steps are the plain ones.
 * Sampling reads the logits of the sequence's last position and the RNG key (prompt key, response
 * index, position): a recompute after preemption gives the same logits (the cpu backend's forward
 * is row-independent) and the same draw, so the output does not depend on the schedule. */
#include "vr_rollout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_gemm_tune.h"
#include "vr_kvcache.h"
#include "vr_log.h"
#include "vr_time.h"

#define VR_ROLLOUT_DEFAULT_KV (64ull << 20)

struct vr_rollout {
  const vr_model_config_t *cfg;
  const vr_rollout_backend_t *be;
  void *state;
  vr_rollout_options_t opt;
  vr_kvcache_t kv;
  uint32_t max_blocks; /* per sequence */
  /* the init view, kept as offsets: its pointers are only compared with init_base as integers */
  uintptr_t init_base;
  size_t n_params;
  vr_rollout_weights_t view;
  vr_rollout_layer_w_t *layers;
  float *staging;      /* weight-sync receive buffer for backends without param_buffer (lazily) */
  char gemm_cache[4096]; /* opt.gemm_cache resolved (vr_gemm_tune_resolve): a path or "off" */
};

void vr_rollout_options_init(vr_rollout_options_t *opt) {
  memset(opt, 0, sizeof *opt);
  opt->device = "cpu";
  opt->kv_cache_bytes = VR_ROLLOUT_DEFAULT_KV;
  opt->block_size = 16;
  opt->max_seqs = 256;
  opt->max_batch_tokens = 2048;
}

void vr_gen_params_init(vr_gen_params_t *gp) {
  memset(gp, 0, sizeof *gp);
  gp->sample.temperature = 0.0f;
  gp->sample.top_k = -1;
  gp->sample.top_p = 1.0f;
  gp->n = 1;
  gp->max_new_tokens = 16;
}

void vr_gen_output_free(vr_gen_output_t *o) {
  if (!o) return;
  free(o->cu), free(o->tokens), free(o->logprobs), free(o->finish);
  memset(o, 0, sizeof *o);
}

uint64_t vr_rollout_block_bytes(const vr_model_config_t *cfg, uint32_t block_size, uint32_t bytes_per_value) {
  return 2ull * (uint64_t)cfg->num_layers * block_size * (uint64_t)cfg->num_kv_heads * (uint64_t)cfg->head_dim *
         bytes_per_value;
}

static const vr_rollout_backend_t *vr_rollout_pick(const char *device, int *index) {
  *index = 0;
  if (!device || strcmp(device, "cpu") == 0) return &vr_rollout_backend_cpu;
  if (strncmp(device, "cuda", 4) == 0 && (device[4] == 0 || device[4] == ':')) {
#ifdef VR_HAVE_CUDA_ROLLOUT
    if (device[4] == ':') *index = atoi(device + 5);
    return &vr_rollout_backend_cuda;
#else
    vr_log(VR_LOG_ERROR, "rollout: device \"%s\": this build has no cuda rollout backend yet. HINT: --device cpu", device);
    return NULL;
#endif
  }
  vr_log(VR_LOG_ERROR, "rollout: device \"%s\" not understood (cpu, cuda, cuda:N)", device);
  return NULL;
}

int vr_rollout_init(const vr_model_config_t *cfg, const float *params, size_t n_params, const vr_rollout_weights_t *w,
                    const vr_rollout_options_t *opt, vr_rollout_t **out) {
  *out = NULL;
  int index;
  const vr_rollout_backend_t *be = vr_rollout_pick(opt ? opt->device : NULL, &index);
  if (!be) return VR_ERR_UNSUPPORTED;
  return vr_rollout_init_backend(be, cfg, params, n_params, w, opt, out);
}

int vr_rollout_init_backend(const vr_rollout_backend_t *be, const vr_model_config_t *cfg, const float *params,
                            size_t n_params, const vr_rollout_weights_t *w, const vr_rollout_options_t *opt,
                            vr_rollout_t **out) {
  *out = NULL;
  if (!cfg->is_decoder || !cfg->rope_inv_freq) {
    vr_log(VR_LOG_ERROR, "rollout: the model is not a decoder (Llama/Qwen2/Mistral)");
    return VR_ERR_UNSUPPORTED;
  }
  if (cfg->num_heads / cfg->num_kv_heads > 64) {
    vr_log(VR_LOG_ERROR, "rollout: %d query heads per KV head (at most 64)", cfg->num_heads / cfg->num_kv_heads);
    return VR_ERR_UNSUPPORTED;
  }
  vr_rollout_t *r = calloc(1, sizeof *r);
  if (!r) return VR_ERR_NOMEM;
  r->cfg = cfg;
  r->be = be;
  if (opt) r->opt = *opt;
  else vr_rollout_options_init(&r->opt);
  vr_rollout_options_t d;
  vr_rollout_options_init(&d);
  if (!r->opt.kv_cache_bytes) r->opt.kv_cache_bytes = d.kv_cache_bytes;
  if (!r->opt.block_size) r->opt.block_size = d.block_size;
  if (!r->opt.max_seqs) r->opt.max_seqs = d.max_seqs;
  if (!r->opt.max_batch_tokens) r->opt.max_batch_tokens = d.max_batch_tokens;
  if (!r->opt.max_model_len || r->opt.max_model_len > (uint32_t)cfg->max_seq_len)
    r->opt.max_model_len = (uint32_t)cfg->max_seq_len;
  r->max_blocks = (r->opt.max_model_len + r->opt.block_size - 1) / r->opt.block_size;
  if (r->opt.gemm_tune == 0) r->opt.gemm_tune = 1;
  /* the one place the environment is read for the engine: deployment-level, as VR_LOG_LEVEL */
  if (vr_gemm_tune_resolve(r->opt.gemm_cache, getenv("VERL_GEMM_CACHE"), getenv("XDG_CACHE_HOME"), getenv("HOME"),
                           r->gemm_cache, sizeof r->gemm_cache) < 0) {
    if (r->opt.gemm_tune > 0 && strcmp(be->name, "cpu") != 0)
      vr_log(VR_LOG_WARN, "rollout: no GEMM-choice cache file (%s): tuned choices are kept for this process only. "
             "HINT: set VERL_GEMM_CACHE or --gemm-cache", r->gemm_cache);
    snprintf(r->gemm_cache, sizeof r->gemm_cache, "off");
  }
  r->opt.gemm_cache = r->gemm_cache;
  r->init_base = (uintptr_t)params;
  r->n_params = n_params;
  r->view = *w;
  r->layers = malloc((size_t)cfg->num_layers * sizeof *r->layers);
  if (!r->layers) {
    vr_rollout_free(r);
    return VR_ERR_NOMEM;
  }
  memcpy(r->layers, w->layers, (size_t)cfg->num_layers * sizeof *r->layers);
  r->view.layers = r->layers;
  uint32_t nb = 0;
  int index = 0;
  if (r->opt.device && strncmp(r->opt.device, "cuda:", 5) == 0) index = atoi(r->opt.device + 5);
  int rc = be->init(cfg, &r->opt, index, &r->state, &nb);
  if (rc == 0) rc = vr_kvcache_init(&r->kv, nb, r->opt.block_size);
  if (rc == 0) rc = be->set_weights(r->state, params, n_params, w);
  if (rc != 0) {
    vr_rollout_free(r);
    return rc;
  }
  vr_log(VR_LOG_INFO, "rollout: %s backend, %u K/V blocks of %u tokens (%llu bytes each), max %u sequences, %u-token prefill",
         be->name, nb, r->opt.block_size, (unsigned long long)vr_rollout_block_bytes(cfg, r->opt.block_size, 4),
         r->opt.max_seqs, r->opt.max_batch_tokens);
  *out = r;
  return 0;
}

void vr_rollout_free(vr_rollout_t *r) {
  if (!r) return;
  if (r->state) r->be->free(r->state);
  vr_kvcache_free(&r->kv);
  free(r->layers);
  free(r->staging);
  free(r);
}

void vr_rollout_get_info(const vr_rollout_t *r, vr_rollout_info_t *info) {
  info->backend = r->be->name;
  info->num_blocks = r->kv.num_blocks;
  info->block_size = r->opt.block_size;
  info->max_seqs = r->opt.max_seqs;
  info->max_batch_tokens = r->opt.max_batch_tokens;
  info->max_model_len = r->opt.max_model_len;
  info->kv_bytes_per_block = vr_rollout_block_bytes(r->cfg, r->opt.block_size, 4);
}

void *vr_rollout_backend_state(vr_rollout_t *r) { return r->state; }

int vr_rollout_set_weights(vr_rollout_t *r, const float *params, size_t n_params, const vr_rollout_weights_t *w,
                           double *seconds) {
  uint64_t t0 = vr_now_ns();
  int rc = r->be->set_weights(r->state, params, n_params, w);
  if (seconds) *seconds = (double)(vr_now_ns() - t0) * 1e-9;
  return rc;
}

/* p (a pointer of the init view) moved onto base. */
static const float *vr_rollout_move(const vr_rollout_t *r, const float *p, const float *base) {
  return p ? base + ((uintptr_t)p - r->init_base) / sizeof(float) : NULL;
}

int vr_rollout_set_params(vr_rollout_t *r, const float *params, size_t n_params, double *seconds) {
  if (n_params != r->n_params) {
    vr_log(VR_LOG_ERROR, "rollout: new parameters have %zu floats, the engine was built for %zu", n_params, r->n_params);
    return VR_ERR_INVAL;
  }
  const int L = r->cfg->num_layers;
  vr_rollout_layer_w_t *layers = malloc((size_t)L * sizeof *layers);
  if (!layers) return VR_ERR_NOMEM;
  vr_rollout_weights_t w = r->view;
  w.tok_emb = vr_rollout_move(r, w.tok_emb, params);
  w.final_norm_w = vr_rollout_move(r, w.final_norm_w, params);
  w.lm_head = vr_rollout_move(r, w.lm_head, params);
  for (int l = 0; l < L; l++) {
    const vr_rollout_layer_w_t *a = &r->layers[l];
    vr_rollout_layer_w_t *d = &layers[l];
    d->q_w = vr_rollout_move(r, a->q_w, params), d->q_b = vr_rollout_move(r, a->q_b, params);
    d->k_w = vr_rollout_move(r, a->k_w, params), d->k_b = vr_rollout_move(r, a->k_b, params);
    d->v_w = vr_rollout_move(r, a->v_w, params), d->v_b = vr_rollout_move(r, a->v_b, params);
    d->o_w = vr_rollout_move(r, a->o_w, params), d->o_b = vr_rollout_move(r, a->o_b, params);
    d->norm1_w = vr_rollout_move(r, a->norm1_w, params), d->norm2_w = vr_rollout_move(r, a->norm2_w, params);
    d->gate_w = vr_rollout_move(r, a->gate_w, params), d->gate_b = vr_rollout_move(r, a->gate_b, params);
    d->up_w = vr_rollout_move(r, a->up_w, params), d->up_b = vr_rollout_move(r, a->up_b, params);
    d->down_w = vr_rollout_move(r, a->down_w, params), d->down_b = vr_rollout_move(r, a->down_b, params);
  }
  w.layers = layers;
  int rc = vr_rollout_set_weights(r, params, n_params, &w, seconds);
  free(layers);
  return rc;
}

/* The backend's parameter storage (NULL when it has none) and whether it is device memory. */
float *vr_rollout_param_buffer(vr_rollout_t *r, size_t *n_params, int *on_device) {
  if (!r->be->param_buffer) return NULL;
  return r->be->param_buffer(r->state, n_params, on_device);
}

int vr_rollout_params_updated(vr_rollout_t *r) {
  return r->be->params_updated ? r->be->params_updated(r->state) : 0;
}

/* A host buffer of n_params floats for receiving weights, allocated on first use, kept. */
float *vr_rollout_staging(vr_rollout_t *r) {
  if (!r->staging) r->staging = malloc((r->n_params ? r->n_params : 1) * sizeof(float));
  return r->staging;
}

size_t vr_rollout_n_params(const vr_rollout_t *r) { return r->n_params; }

int vr_rollout_set_params_device(vr_rollout_t *r, const float *src, size_t off, size_t len, double *seconds) {
  if (seconds) *seconds = 0;
  if (!r->be->set_weights_device) {
    vr_log(VR_LOG_ERROR, "rollout: the %s backend takes no weight update from device memory", r->be->name);
    return VR_ERR_UNSUPPORTED;
  }
  if (off > r->n_params || len > r->n_params - off) {
    vr_log(VR_LOG_ERROR, "rollout: device weight update of [%zu, +%zu), the engine holds %zu floats", off, len,
           r->n_params);
    return VR_ERR_INVAL;
  }
  const uint64_t t0 = vr_now_ns();
  int rc = r->be->set_weights_device(r->state, src, off, len);
  if (seconds) *seconds = (double)(vr_now_ns() - t0) * 1e-9;
  return rc;
}

int vr_rollout_has_device_update(const vr_rollout_t *r) { return r->be->set_weights_device != NULL; }

void vr_rollout_set_decode_pipeline(vr_rollout_t *r, int mode) { r->opt.decode_pipeline = mode; }

float *vr_rollout_device_chunk(vr_rollout_t *r, size_t *n_floats) {
  *n_floats = 0;
  return r->be->device_chunk ? r->be->device_chunk(r->state, n_floats) : NULL;
}

/* ---- generate --------------------------------------------------------------------------------------- */

enum { SQ_WAIT = 0, SQ_FOLLOW = 1, SQ_RUN = 2, SQ_DONE = 3 };

typedef struct vr_rseq {
  uint32_t prompt, j, plen, cap; /* cap: most tokens it may reach */
  int state;
  int fresh;                     /* a group leader not prefilled yet: its n - 1 followers come along */
  uint32_t len, ctx, n_blocks;
  int32_t *tokens;               /* (cap) */
  float *lps;                    /* (cap - plen) */
  int32_t *table;                /* (max_blocks) */
  uint64_t admitted;             /* admission order (first time), 0 = never */
  uint8_t finish;
} vr_rseq_t;

typedef struct vr_gen {
  vr_rollout_t *r;
  const vr_gen_params_t *gp;
  uint32_t n_seqs;
  vr_rseq_t *s;
  uint64_t *keys;      /* (n_prompts) */
  uint32_t *run, n_run; /* running, in admission order */
  uint64_t admit_clock;
  /* one forward's arrays */
  int32_t *ids, *bt;
  uint32_t *cu, *ctx, *members;
  vr_sample_req_t *req;
  int32_t *tok;
  float *lp;
  uint32_t *who;       /* (reqs) sequence index of each request */
  int32_t *feed;       /* (max_seqs) the pipeline's feed rows */
  uint32_t *nb0;       /* (max_seqs) the pipeline's table sizes before growing for the step after */
  uint32_t n_done;
  vr_gen_stats_t *st;
} vr_gen_t;

static int vr_gen_is_stop(const vr_gen_params_t *gp, int32_t t) {
  for (uint32_t i = 0; i < gp->n_stop; i++)
    if (gp->stop_ids[i] == t) return 1;
  return 0;
}

static void vr_gen_finish(vr_gen_t *g, uint32_t i, uint8_t why) {
  vr_rseq_t *q = &g->s[i];
  vr_kvcache_release(&g->r->kv, q->table, &q->n_blocks);
  q->ctx = 0;
  q->state = SQ_DONE;
  q->finish = why;
  g->n_done++;
}

/* Appends a sampled token; finishes the sequence on a stop id or at its length limit. */
static void vr_gen_append(vr_gen_t *g, uint32_t i, int32_t tok, float lp) {
  vr_rseq_t *q = &g->s[i];
  q->lps[q->len - q->plen] = lp;
  q->tokens[q->len++] = tok;
  if (vr_gen_is_stop(g->gp, tok)) vr_gen_finish(g, i, VR_FINISH_STOP);
  else if (q->len >= q->cap) vr_gen_finish(g, i, VR_FINISH_LENGTH);
}

static void vr_gen_drop_done(vr_gen_t *g) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < g->n_run; i++)
    if (g->s[g->run[i]].state == SQ_RUN) g->run[k++] = g->run[i];
  g->n_run = k;
}

static vr_sample_req_t vr_gen_req(const vr_gen_t *g, const vr_rseq_t *q, uint32_t row) {
  vr_sample_req_t rq;
  rq.row = row;
  rq.p = g->gp->sample;
  rq.key = g->keys[q->prompt];
  rq.stream = q->j;
  rq.position = q->len;
  return rq;
}

/* Copies sequence q's table into row k of the batch's block tables. */
static void vr_gen_table_row(vr_gen_t *g, uint32_t k, const vr_rseq_t *q) {
  memcpy(g->bt + (size_t)k * g->r->max_blocks, q->table, (size_t)q->n_blocks * sizeof(int32_t));
}

/* decode: 0 prefill, 1 decode, 2 decode + sample of g->req into g->tok / g->lp (be->decode_sample). */
static int vr_gen_forward(vr_gen_t *g, uint32_t n, int decode) {
  vr_rollout_batch_t b = {.n_seqs = n, .ids = g->ids, .cu_q = g->cu, .ctx_len = g->ctx, .block_tables = g->bt,
                          .max_blocks = g->r->max_blocks};
  const vr_rollout_backend_t *be = g->r->be;
  uint64_t t0 = vr_now_ns();
  int rc = decode == 2            ? be->decode_sample(g->r->state, &b, g->req, g->tok, g->lp)
           : decode && be->decode ? be->decode(g->r->state, &b)
                                  : be->prefill(g->r->state, &b);
  double dt = (double)(vr_now_ns() - t0) * 1e-9;
  if (decode) {
    g->st->decode_s += dt;
    g->st->decode_calls++;
    g->st->decode_tokens += n;
  } else {
    g->st->prefill_s += dt;
    g->st->prefill_calls++;
    g->st->prefill_tokens += g->cu[n];
  }
  if (rc != 0) vr_log(VR_LOG_ERROR, "rollout: %s forward of %u sequences failed: %s", decode ? "decode" : "prefill", n,
                      vr_strerror(rc));
  return rc;
}

static int vr_gen_sample(vr_gen_t *g, uint32_t n_req) {
  uint64_t t0 = vr_now_ns();
  int rc = g->r->be->sample(g->r->state, n_req, g->req, g->tok, g->lp);
  g->st->sample_s += (double)(vr_now_ns() - t0) * 1e-9;
  if (rc != 0) {
    const vr_rseq_t *q = &g->s[g->who[0]];
    vr_log(VR_LOG_ERROR, "rollout: sampling failed (prompt %u response %u at position %u among %u rows): %s", q->prompt,
           q->j, q->len, n_req, vr_strerror(rc));
  }
  return rc;
}

/* The waiting sequence to admit next: preempted ones (admitted before) first, in admission order,
 * then fresh prompts in prompt order. UINT32_MAX when none waits. */
static uint32_t vr_gen_next_waiting(const vr_gen_t *g) {
  uint32_t best = UINT32_MAX;
  for (uint32_t i = 0; i < g->n_seqs; i++) {
    const vr_rseq_t *q = &g->s[i];
    if (q->state != SQ_WAIT) continue;
    if (best == UINT32_MAX) {
      best = i;
      continue;
    }
    const vr_rseq_t *b = &g->s[best];
    if (q->admitted && (!b->admitted || q->admitted < b->admitted)) best = i;
  }
  return best;
}

/* Prefills the admitted sequences adm[0..n) (ctx 0 each, blocks held), samples their next tokens,
 * forks the followers of fresh prompts. One sequence longer than the token budget runs in chunks. */
static int vr_gen_prefill(vr_gen_t *g, const uint32_t *adm, uint32_t n) {
  vr_rollout_t *r = g->r;
  const uint32_t budget = r->opt.max_batch_tokens;
  int rc;
  if (n == 1 && g->s[adm[0]].len > budget) {
    vr_rseq_t *q = &g->s[adm[0]];
    while (q->ctx < q->len) {
      uint32_t c = q->len - q->ctx < budget ? q->len - q->ctx : budget;
      memcpy(g->ids, q->tokens + q->ctx, c * sizeof(int32_t));
      g->cu[0] = 0;
      g->cu[1] = c;
      g->ctx[0] = q->ctx + c;
      vr_gen_table_row(g, 0, q);
      if ((rc = vr_gen_forward(g, 1, 0)) != 0) return rc;
      q->ctx += c;
    }
  } else {
    g->cu[0] = 0;
    for (uint32_t k = 0; k < n; k++) {
      vr_rseq_t *q = &g->s[adm[k]];
      memcpy(g->ids + g->cu[k], q->tokens, q->len * sizeof(int32_t));
      g->cu[k + 1] = g->cu[k] + q->len;
      g->ctx[k] = q->len;
      vr_gen_table_row(g, k, q);
    }
    if ((rc = vr_gen_forward(g, n, 0)) != 0) return rc;
    for (uint32_t k = 0; k < n; k++) g->s[adm[k]].ctx = g->s[adm[k]].len;
  }
  /* requests: each admitted sequence, plus the followers of fresh prompts on their leader's row */
  uint32_t n_req = 0;
  for (uint32_t k = 0; k < n; k++) {
    vr_rseq_t *q = &g->s[adm[k]];
    g->who[n_req] = adm[k];
    g->req[n_req++] = vr_gen_req(g, q, k);
    if (!q->fresh) continue;
    q->fresh = 0;
    for (uint32_t j = 1; j < g->gp->n; j++) {
      uint32_t fi = adm[k] + j; /* followers sit right after their leader */
      vr_rseq_t *f = &g->s[fi];
      vr_kvcache_fork(&r->kv, q->table, f->table, q->n_blocks);
      f->n_blocks = q->n_blocks;
      f->ctx = q->ctx;
      f->state = SQ_RUN;
      f->admitted = ++g->admit_clock;
      g->run[g->n_run++] = fi;
      g->who[n_req] = fi;
      g->req[n_req++] = vr_gen_req(g, f, k);
    }
  }
  if ((rc = vr_gen_sample(g, n_req)) != 0) return rc;
  for (uint32_t i = 0; i < n_req; i++) vr_gen_append(g, g->who[i], g->tok[i], g->lp[i]);
  vr_gen_drop_done(g);
  return 0;
}

/* Admission; returns the number of sequences prefilled (0: none could join) or a negative status. */
static int vr_gen_admit(vr_gen_t *g, uint32_t *adm) {
  vr_rollout_t *r = g->r;
  uint32_t n = 0, tokens = 0, joining = 0;
  for (;;) {
    uint32_t i = vr_gen_next_waiting(g);
    if (i == UINT32_MAX) break;
    vr_rseq_t *q = &g->s[i];
    const uint32_t group = q->fresh ? g->gp->n : 1, busy = g->n_run + joining;
    const uint32_t blocks = vr_kvcache_blocks_for(&r->kv, q->len);
    if (busy > 0) {
      if (tokens + q->len > r->opt.max_batch_tokens || busy + group > r->opt.max_seqs || n + 1 > r->opt.max_seqs)
        break;
      if (vr_kvcache_n_free(&r->kv) < blocks + busy + group) break;
    }
    if (vr_kvcache_grow(&r->kv, q->table, &q->n_blocks, q->len) != 0) break; /* only when busy > 0 */
    q->state = SQ_RUN;
    if (!q->admitted) q->admitted = ++g->admit_clock;
    g->run[g->n_run++] = i;
    adm[n++] = i;
    tokens += q->len;
    joining += group - 1;
    if (tokens >= r->opt.max_batch_tokens) break;
  }
  if (n == 0) return 0;
  int rc = vr_gen_prefill(g, adm, n);
  return rc ? rc : (int)n;
}

static void vr_gen_preempt(vr_gen_t *g, uint32_t i) {
  vr_rseq_t *q = &g->s[i];
  vr_kvcache_release(&g->r->kv, q->table, &q->n_blocks);
  q->ctx = 0;
  q->state = SQ_WAIT;
  g->st->preemptions++;
  g->n_run--; /* the victim is always the last running sequence */
}

/* The slot of every running sequence's next position (a new block at a block boundary, a private
 * copy of a shared block); a sequence that cannot get one preempts the latest admitted (possibly
 * itself). */
static int vr_gen_slots(vr_gen_t *g) {
  vr_rollout_t *r = g->r;
  for (uint32_t k = 0; k < g->n_run; k++) {
    uint32_t i = g->run[k];
    vr_rseq_t *q = &g->s[i];
    for (;;) {
      uint32_t need = vr_kvcache_need(&r->kv, q->table, q->n_blocks, q->ctx, q->ctx + 1);
      if (need <= vr_kvcache_n_free(&r->kv)) break;
      uint32_t victim = g->run[g->n_run - 1];
      vr_gen_preempt(g, victim);
      if (victim == i) break;
    }
    if (q->state != SQ_RUN) break; /* it was the last one */
    if (vr_kvcache_grow(&r->kv, q->table, &q->n_blocks, q->ctx + 1) != 0) return VR_ERR_INTERNAL;
    uint32_t from, to;
    int c = vr_kvcache_cow(&r->kv, q->table, q->ctx, &from, &to);
    if (c < 0) return VR_ERR_INTERNAL;
    if (c == 1) {
      int rc = r->be->copy_blocks(r->state, &from, &to, 1);
      if (rc != 0) return rc;
      g->st->cow_copies++;
    }
  }
  if (g->n_run > g->st->peak_running) g->st->peak_running = g->n_run;
  const uint32_t used = r->kv.num_blocks - vr_kvcache_n_free(&r->kv);
  if (used > g->st->peak_blocks) g->st->peak_blocks = used;
  return 0;
}

/* Row k of a decode batch: sequence i feeding its last token (ahead 0), or (ahead 1, the pipeline)
 * the token the step in flight samples for it, one position further. */
static void vr_gen_row(vr_gen_t *g, uint32_t k, uint32_t i, uint32_t ahead) {
  const vr_rseq_t *q = &g->s[i];
  g->ids[k] = ahead ? 0 : q->tokens[q->len - 1];
  g->cu[k + 1] = k + 1;
  g->ctx[k] = q->len + ahead;
  vr_gen_table_row(g, k, q);
  g->who[k] = i;
  g->req[k] = vr_gen_req(g, q, k);
  g->req[k].position += ahead;
}

/* The results of a decode step of rows who[0..n): ctx catches up, the tokens are appended. */
static void vr_gen_take(vr_gen_t *g, const uint32_t *who, uint32_t n) {
  for (uint32_t k = 0; k < n; k++) {
    g->s[who[k]].ctx = g->s[who[k]].len;
    vr_gen_append(g, who[k], g->tok[k], g->lp[k]);
  }
}

/* Whether the plain scheduler's next step would be the same batch as the step in flight, one
 * position further, for rows who[0..n) (their lengths before the step in flight appends): none of
 * them reaches its length cap with that step, and their next positions need no copy of a shared
 * block and no more blocks than are free (so no preemption). Then grows their tables for it. */
static int vr_gen_can_follow(vr_gen_t *g, const uint32_t *who, uint32_t n) {
  vr_kvcache_t *kv = &g->r->kv;
  uint32_t need = 0;
  for (uint32_t k = 0; k < n; k++) {
    const vr_rseq_t *q = &g->s[who[k]];
    if (q->len + 1 >= q->cap) return 0;
    const uint32_t nb = vr_kvcache_blocks_for(kv, q->len + 1), grow = nb > q->n_blocks ? nb - q->n_blocks : 0;
    const uint32_t nk = vr_kvcache_need(kv, q->table, q->n_blocks, q->len, q->len + 1);
    if (nk != grow) return 0; /* the block of position len is shared */
    need += nk;
  }
  if (need > vr_kvcache_n_free(kv)) return 0;
  for (uint32_t k = 0; k < n; k++) {
    vr_rseq_t *q = &g->s[who[k]];
    g->nb0[k] = q->n_blocks;
    if (vr_kvcache_grow(kv, q->table, &q->n_blocks, q->len + 1) != 0) return 0; /* cannot fail: counted */
  }
  return 1;
}

/* Undoes vr_gen_can_follow's growth of the rows still running (the plain scheduler admits and
 * preempts by the free count it would have). */
static void vr_gen_unfollow(vr_gen_t *g, const uint32_t *who, uint32_t n) {
  for (uint32_t k = 0; k < n; k++) {
    vr_rseq_t *q = &g->s[who[k]];
    if (q->state != SQ_RUN || q->n_blocks <= g->nb0[k]) continue; /* a finished one released all */
    uint32_t extra = q->n_blocks - g->nb0[k];
    vr_kvcache_release(&g->r->kv, q->table + g->nb0[k], &extra);
    q->n_blocks = g->nb0[k];
  }
}

/* decode_launch / decode_wait with the decode statistics (a dropped step counts in decode_dropped,
 * not in decode_calls). */
static int vr_gen_launch(vr_gen_t *g, uint32_t n, const int32_t *feed) {
  vr_rollout_batch_t b = {.n_seqs = n, .ids = g->ids, .cu_q = g->cu, .ctx_len = g->ctx, .block_tables = g->bt,
                          .max_blocks = g->r->max_blocks};
  const uint64_t t0 = vr_now_ns();
  const int rc = g->r->be->decode_launch(g->r->state, &b, g->req, feed);
  g->st->decode_s += (double)(vr_now_ns() - t0) * 1e-9;
  if (rc != 0 && !(rc == VR_ERR_UNSUPPORTED && !feed))
    vr_log(VR_LOG_ERROR, "rollout: decode launch of %u sequences failed: %s", n, vr_strerror(rc));
  return rc;
}

static int vr_gen_wait(vr_gen_t *g, uint32_t n, int kept) {
  const uint64_t t0 = vr_now_ns();
  const int rc = g->r->be->decode_wait(g->r->state, g->tok, g->lp);
  g->st->decode_s += (double)(vr_now_ns() - t0) * 1e-9;
  if (kept) {
    g->st->decode_calls++;
    g->st->decode_tokens += n;
  } else {
    g->st->decode_dropped++;
  }
  if (rc != 0) vr_log(VR_LOG_ERROR, "rollout: decode step of %u sequences failed: %s", n, vr_strerror(rc));
  return rc;
}

/* The one-step-late pipeline over the n running sequences (one batch), after vr_gen_slots: the
 * step is launched, then while the plain scheduler's next step would be the same batch one position
 * further (vr_gen_can_follow), that step is launched before this one's tokens are back: the same
 * rows, each fed on the device the token this step samples for it, while the host waits for this
 * step and appends its tokens. A response that stops (a stop id: known only now) ends the streak
 * and drops the step launched after it, whose results the plain scheduler would not have computed
 * (its rows' K/V at their next positions are written again when the plain schedule gets there; the
 * stopped response's blocks are reused only by later forwards, which the backend runs after it);
 * so is a step that cannot follow. Every kept step is the plain scheduler's: the same outputs, bit
 * for bit. *launched 0: the backend refused the batch (nothing ran). */
static int vr_gen_decode_pipe(vr_gen_t *g, int *launched) {
  const uint32_t n = g->n_run;
  uint32_t *who = g->members; /* the streak's rows (g->who is rewritten by vr_gen_row) */
  for (uint32_t k = 0; k < n; k++) {
    who[k] = g->run[k];
    vr_gen_row(g, k, who[k], 0);
  }
  g->cu[0] = 0;
  int rc = vr_gen_launch(g, n, NULL);
  *launched = rc != VR_ERR_UNSUPPORTED;
  if (rc != 0) return *launched ? rc : 0;
  int pending = 1;
  for (;;) {
    const int follow = vr_gen_can_follow(g, who, n);
    if (follow) {
      for (uint32_t k = 0; k < n; k++) vr_gen_row(g, k, who[k], 1);
      for (uint32_t k = 0; k < n; k++) g->feed[k] = (int32_t)k;
      if ((rc = vr_gen_launch(g, n, g->feed)) != 0) break;
      pending++;
      g->st->decode_ahead++;
    }
    rc = vr_gen_wait(g, n, 1);
    pending--;
    if (rc != 0) break;
    const uint32_t done0 = g->n_done;
    vr_gen_take(g, who, n);
    if (!follow) break;
    if (g->n_done != done0) { /* a stop id: the plain scheduler changes the batch now */
      rc = vr_gen_wait(g, n, 0);
      pending--;
      vr_gen_unfollow(g, who, n);
      break;
    }
  }
  while (pending-- > 0) (void)vr_gen_wait(g, n, 0); /* after an error: nothing left in flight */
  vr_gen_drop_done(g);
  return rc;
}

/* One decode step over every running sequence (in chunks of max_seqs), or a pipelined streak of
 * them (vr_gen_decode_pipe) when the backend has decode_launch, opt.decode_pipeline allows it for
 * this request and the running set is one batch. */
static int vr_gen_decode(vr_gen_t *g) {
  vr_rollout_t *r = g->r;
  int rc = vr_gen_slots(g);
  if (rc != 0) return rc;
  const int mode = r->opt.decode_pipeline;
  if (r->be->decode_launch && g->n_run > 0 && g->n_run <= r->opt.max_seqs &&
      (mode == 2 || (mode >= 0 && g->gp->n_stop == 0))) {
    int launched = 0;
    rc = vr_gen_decode_pipe(g, &launched);
    if (rc != 0 || launched) return rc;
  }
  for (uint32_t k0 = 0; k0 < g->n_run; k0 += r->opt.max_seqs) {
    uint32_t n = g->n_run - k0 < r->opt.max_seqs ? g->n_run - k0 : r->opt.max_seqs;
    g->cu[0] = 0;
    for (uint32_t k = 0; k < n; k++) vr_gen_row(g, k, g->run[k0 + k], 0);
    if (r->be->decode_sample) {
      rc = vr_gen_forward(g, n, 2); /* the decode time then holds the sampling */
    } else {
      rc = vr_gen_forward(g, n, 1);
      if (rc == 0) rc = vr_gen_sample(g, n);
    }
    if (rc != 0) return rc;
    vr_gen_take(g, g->who, n);
  }
  vr_gen_drop_done(g);
  return 0;
}

static int vr_gen_check(vr_rollout_t *r, const int32_t *ids, const uint32_t *cu, uint32_t n_prompts,
                        const vr_gen_params_t *gp) {
  char why[128];
  if (vr_sample_check(&gp->sample, why, sizeof why) != 0) {
    vr_log(VR_LOG_ERROR, "rollout: %s", why);
    return VR_ERR_INVAL;
  }
  if (n_prompts && (!ids || !cu || cu[0] != 0)) {
    vr_log(VR_LOG_ERROR, "rollout: prompts need ids and cu_seqlens starting at 0");
    return VR_ERR_INVAL;
  }
  if (gp->n == 0 || gp->max_new_tokens == 0 || (gp->n_stop && !gp->stop_ids)) {
    vr_log(VR_LOG_ERROR, "rollout: n and max_new_tokens must be >= 1 (n %u, max_new_tokens %u)", gp->n,
           gp->max_new_tokens);
    return VR_ERR_INVAL;
  }
  const uint32_t ML = r->opt.max_model_len;
  for (uint32_t p = 0; p < n_prompts; p++) {
    if (cu[p + 1] < cu[p]) return VR_ERR_INVAL;
    const uint32_t len = cu[p + 1] - cu[p];
    if (len == 0) {
      vr_log(VR_LOG_ERROR, "rollout: prompt %u is empty", p);
      return VR_ERR_EMPTY_SEQ;
    }
    for (uint32_t t = cu[p]; t < cu[p + 1]; t++) {
      if (ids[t] < 0 || ids[t] >= r->cfg->vocab_size) {
        vr_log(VR_LOG_ERROR, "rollout: prompt %u token %u is %d, outside the vocabulary [0, %d)", p, t - cu[p], ids[t],
               r->cfg->vocab_size);
        return VR_ERR_TOKEN_RANGE;
      }
    }
    if (len >= ML) {
      vr_log(VR_LOG_ERROR, "rollout: prompt %u has %u tokens; max_model_len %u leaves no room for a response", p, len, ML);
      return VR_ERR_SEQ_TOO_LONG;
    }
    uint64_t most = (uint64_t)len + gp->max_new_tokens;
    if (most > ML) most = ML;
    if (vr_kvcache_blocks_for(&r->kv, (uint32_t)most) > r->kv.num_blocks) {
      vr_log(VR_LOG_ERROR, "rollout: prompt %u needs %u K/V blocks for %llu tokens; the cache has %u. HINT: raise --kv-cache-bytes "
             "or lower --max-new-tokens", p, vr_kvcache_blocks_for(&r->kv, (uint32_t)most), (unsigned long long)most,
             r->kv.num_blocks);
      return VR_ERR_TOO_LARGE;
    }
  }
  return 0;
}

static void vr_gen_release(vr_gen_t *g) {
  free(g->s);
  free(g->keys), free(g->run), free(g->ids), free(g->bt), free(g->cu), free(g->ctx), free(g->members);
  free(g->req), free(g->tok), free(g->lp), free(g->who), free(g->feed), free(g->nb0);
}

int vr_rollout_generate(vr_rollout_t *r, const int32_t *ids, const uint32_t *cu, uint32_t n_prompts,
                        const vr_gen_params_t *gp, vr_gen_output_t *out) {
  memset(out, 0, sizeof *out);
  uint64_t t_start = vr_now_ns();
  int rc = vr_gen_check(r, ids, cu, n_prompts, gp);
  if (rc != 0) return rc;
  if ((uint64_t)n_prompts * gp->n > UINT32_MAX / 2) return VR_ERR_TOO_LARGE;
  vr_gen_t g = {.r = r, .gp = gp, .n_seqs = n_prompts * gp->n, .st = &out->stats};
  const uint32_t ML = r->opt.max_model_len, S = g.n_seqs, MS = r->opt.max_seqs;
  /* per-sequence storage: tokens, log-probs and block tables in three arenas */
  uint64_t tok_total = 0;
  for (uint32_t p = 0; p < n_prompts; p++) {
    uint64_t c = (uint64_t)(cu[p + 1] - cu[p]) + gp->max_new_tokens;
    tok_total += (c > ML ? ML : c) * gp->n;
  }
  const uint32_t wsT = r->opt.max_batch_tokens > MS ? r->opt.max_batch_tokens : MS;
  int32_t *tok_arena = malloc((tok_total ? tok_total : 1) * sizeof(int32_t));
  float *lp_arena = malloc((tok_total ? tok_total : 1) * sizeof(float));
  int32_t *tables = malloc(((size_t)S * r->max_blocks + 1) * sizeof(int32_t));
  g.s = calloc(S ? S : 1, sizeof *g.s);
  g.keys = malloc((n_prompts ? n_prompts : 1) * sizeof *g.keys);
  g.run = malloc((S ? S : 1) * sizeof *g.run);
  g.ids = malloc((size_t)wsT * sizeof *g.ids);
  g.bt = malloc((size_t)MS * r->max_blocks * sizeof *g.bt);
  g.cu = malloc(((size_t)MS + 1) * sizeof *g.cu);
  g.ctx = malloc((size_t)MS * sizeof *g.ctx);
  g.members = malloc((size_t)MS * sizeof *g.members);
  const size_t n_req = (size_t)MS * gp->n + S; /* upper bound of one step's sample requests */
  g.req = malloc(n_req * sizeof *g.req);
  g.tok = malloc(n_req * sizeof *g.tok);
  g.lp = malloc(n_req * sizeof *g.lp);
  g.who = malloc(n_req * sizeof *g.who);
  g.feed = malloc((size_t)MS * sizeof *g.feed);
  g.nb0 = malloc((size_t)MS * sizeof *g.nb0);
  if (!tok_arena || !lp_arena || !tables || !g.s || !g.keys || !g.run || !g.ids || !g.bt || !g.cu || !g.ctx ||
      !g.members || !g.req || !g.tok || !g.lp || !g.who || !g.feed || !g.nb0) {
    rc = VR_ERR_NOMEM;
    goto done;
  }
  {
    uint64_t off = 0;
    for (uint32_t p = 0; p < n_prompts; p++) {
      g.keys[p] = gp->seeds ? gp->seeds[p] : vr_sample_prompt_key(gp->seed, p);
      const uint32_t plen = cu[p + 1] - cu[p];
      uint64_t c = (uint64_t)plen + gp->max_new_tokens;
      if (c > ML) c = ML;
      for (uint32_t j = 0; j < gp->n; j++) {
        uint32_t i = p * gp->n + j;
        vr_rseq_t *q = &g.s[i];
        q->prompt = p;
        q->j = j;
        q->plen = q->len = plen;
        q->cap = (uint32_t)c;
        q->tokens = tok_arena + off;
        q->lps = lp_arena + off;
        off += c;
        q->table = tables + (size_t)i * r->max_blocks;
        memcpy(q->tokens, ids + cu[p], plen * sizeof(int32_t));
        q->state = j == 0 ? SQ_WAIT : SQ_FOLLOW;
        q->fresh = j == 0;
      }
    }
  }
  vr_kvcache_reset(&r->kv);
  while (g.n_done < S) {
    int n = vr_gen_admit(&g, g.members);
    if (n < 0) {
      rc = n;
      goto done;
    }
    if (n > 0) continue;
    if (g.n_run == 0) {
      vr_log(VR_LOG_ERROR, "rollout: scheduler stalled with %u of %u responses unfinished", S - g.n_done, S);
      rc = VR_ERR_INTERNAL;
      goto done;
    }
    if ((rc = vr_gen_decode(&g)) != 0) goto done;
  }
  /* pack the responses */
  out->n_resp = S;
  out->cu = malloc(((size_t)S + 1) * sizeof *out->cu);
  out->finish = malloc((S ? S : 1) * sizeof *out->finish);
  uint64_t total = 0;
  for (uint32_t i = 0; i < S; i++) total += g.s[i].len - g.s[i].plen;
  out->tokens = malloc((total ? total : 1) * sizeof *out->tokens);
  out->logprobs = malloc((total ? total : 1) * sizeof *out->logprobs);
  if (!out->cu || !out->finish || !out->tokens || !out->logprobs) {
    rc = VR_ERR_NOMEM;
    goto done;
  }
  out->cu[0] = 0;
  for (uint32_t i = 0; i < S; i++) {
    const vr_rseq_t *q = &g.s[i];
    const uint32_t n = q->len - q->plen;
    memcpy(out->tokens + out->cu[i], q->tokens + q->plen, n * sizeof(int32_t));
    memcpy(out->logprobs + out->cu[i], q->lps, n * sizeof(float));
    out->cu[i + 1] = out->cu[i] + n;
    out->finish[i] = q->finish;
  }
  out->stats.peak_blocks = out->stats.peak_blocks > r->kv.peak_used ? out->stats.peak_blocks : r->kv.peak_used;
done:
  vr_kvcache_reset(&r->kv);
  free(tok_arena), free(lp_arena), free(tables);
  vr_gen_release(&g);
  out->stats.total_s = (double)(vr_now_ns() - t_start) * 1e-9;
  if (rc != 0) {
    vr_gen_stats_t st = out->stats;
    vr_gen_output_free(out);
    out->stats = st;
  }
  return rc;
}
