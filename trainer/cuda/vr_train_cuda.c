/* vr_train_cuda.c: the CUDA backend of the training engine (vr_train_backend_cuda, the table of
 * vr_train.h) over the CUDA training engine (vr_cutrain.h). What it adds: vr_lm's tensor table
 * as the engine's offsets (the same buffer layout, so the engine's all-reduce, ZeRO-1 shards
 * and broadcasts work unchanged), the device from "cuda[:N]", and the token semantics of
 * vr_train.h on top of the engine's rows (out[t] is row t - 1's log-prob of ids[t]; masked
 * tokens give 0 and no gradient).
 *
 * Both heads: the LM head (log-probs, entropy) and the value head (the critic: one value per
 * token). opt->recompute: per-layer activation recomputation (vr_cutrain.h). backward_ready:
 * the engine's staged backward (vr_cutrain_backward_cb), so the DP all-reduce of the top
 * layers' buckets overlaps the backward of the lower ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "verl_reward/status.h"
#include "vr_cutrain.h"
#include "vr_log.h"
#include "vr_train.h"

typedef struct {
  vr_cutrain_t *e;
  int T_max;
  int32_t *tgt;         /* (T_max) the kept forward's row targets (value head: 0 wanted, -1 not) */
  float *row_a, *row_b; /* (T_max) row outputs / row gradients */
  int T, value;
  int layers;
  size_t *off_layer, off_fnorm; /* each layer's first tensor (q_w), the final norm: backward_ready's lo */
  int in_ready;                 /* inside backward_ready's callback: grads() must not wait for the stream */
} vr_tcuda_t;

static size_t off_of(const vr_lm_t *lm, int i) { return i < 0 ? VR_CUTRAIN_NONE : vr_lm_tensor(lm, (size_t)i)->offset; }

/* The index of value (NULL: 0, the default) among names[0..n), the option's numbering
 * (VR_CUTRAIN_MLP_AUTO / CUBLAS / FUSED; vr_cutrain_tune_gemms' 0 / 1 / 2); -1, logged, if absent. */
static int option_index(const char *what, const char *value, const char *const *names, int n) {
  if (!value) return 0;
  for (int i = 0; i < n; ++i)
    if (!strcmp(value, names[i])) return i;
  char list[128] = "";
  for (int i = 0, at = 0; i < n && at < (int)sizeof list; ++i)
    at += snprintf(list + at, sizeof list - (size_t)at, "%s%s", i ? "|" : "", names[i]);
  vr_log(VR_LOG_ERROR, "%s \"%s\" is not %s", what, value, list);
  return -1;
}
_Static_assert(VR_CUTRAIN_MLP_AUTO == 0 && VR_CUTRAIN_MLP_CUBLAS == 1 && VR_CUTRAIN_MLP_FUSED == 2,
               "option_index numbers cuda-mlp's values in this order");
_Static_assert(VR_CUTRAIN_OPTIM_AUTO == 0 && VR_CUTRAIN_OPTIM_OVERLAP == 1 && VR_CUTRAIN_OPTIM_SERIAL == 2,
               "option_index numbers cuda-optim's values in this order");

static void vr_tcuda_free(void *state) {
  vr_tcuda_t *s = state;
  if (!s) return;
  vr_cutrain_free(s->e);
  free(s->tgt), free(s->row_a), free(s->row_b), free(s->off_layer);
  free(s);
}

static int vr_tcuda_init(const vr_lm_t *lm, const vr_train_options_t *opt, size_t lo, size_t hi, void **state) {
  *state = NULL;
  const vr_lm_config_t *c = vr_lm_config(lm);
  const vr_lm_index_t *ix = vr_lm_index(lm);
  static const char *const mlps[] = {"auto", "cublas", "fused"}, *const tunes[] = {"off", "same-bits", "any"},
                           *const optims[] = {"auto", "overlap", "serial"};
  const int mlp = option_index("cuda-mlp", opt->cuda_mlp, mlps, 3);
  const int tune = option_index("cuda-gemm-tune", opt->cuda_gemm_tune, tunes, 3);
  const int optim = option_index("cuda-optim", opt->cuda_optim, optims, 3);
  if (mlp < 0 || tune < 0 || optim < 0) return VR_ERR_INVAL;
  int dev = 0;
  if (opt->device && opt->device[4] == ':') {
    char *end = NULL;
    const long v = strtol(opt->device + 5, &end, 10);
    if (!end || *end || v < 0 || v > 1024) {
      vr_log(VR_LOG_ERROR, "device \"%s\": the GPU index must be a number (cuda:N)", opt->device);
      return VR_ERR_INVAL;
    }
    dev = (int)v;
  }
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || dev >= n_dev) {
    vr_log(VR_LOG_ERROR, "device \"%s\": %d CUDA device(s) visible", opt->device, n_dev);
    (void)cudaGetLastError();
    return VR_ERR_NO_DEVICE;
  }
  if (cudaSetDevice(dev) != cudaSuccess) return VR_ERR_DEVICE;
  vr_tcuda_t *s = calloc(1, sizeof *s);
  vr_cutrain_layer_off_t *L = calloc((size_t)c->num_layers, sizeof *L);
  const int T = opt->max_tokens ? (int)opt->max_tokens : 8192;
  if (s) {
    s->T_max = T;
    s->tgt = malloc((size_t)T * sizeof *s->tgt);
    s->row_a = malloc((size_t)T * sizeof *s->row_a);
    s->row_b = malloc((size_t)T * sizeof *s->row_b);
    s->off_layer = malloc((size_t)c->num_layers * sizeof *s->off_layer);
  }
  if (!s || !L || !s->tgt || !s->row_a || !s->row_b || !s->off_layer) {
    free(L);
    vr_tcuda_free(s);
    return VR_ERR_NOMEM;
  }
  for (int l = 0; l < c->num_layers; ++l) {
    const vr_lm_layer_index_t *y = &ix->layers[l];
    const vr_cutrain_layer_off_t o = {
        off_of(lm, y->q_w),    off_of(lm, y->q_b),    off_of(lm, y->k_w),   off_of(lm, y->k_b),
        off_of(lm, y->v_w),    off_of(lm, y->v_b),    off_of(lm, y->o_w),   off_of(lm, y->o_b),
        off_of(lm, y->gate_w), off_of(lm, y->gate_b), off_of(lm, y->up_w),  off_of(lm, y->up_b),
        off_of(lm, y->down_w), off_of(lm, y->down_b), off_of(lm, y->norm1), off_of(lm, y->norm2)};
    L[l] = o;
    s->off_layer[l] = o.q_w;
  }
  s->layers = c->num_layers;
  s->off_fnorm = off_of(lm, ix->final_norm);
  vr_cutrain_desc_t d = {.vocab = c->vocab_size,
                         .hidden = c->hidden_size,
                         .layers = c->num_layers,
                         .heads = c->num_heads,
                         .kv_heads = c->num_kv_heads,
                         .head_dim = c->head_dim,
                         .inter = c->intermediate_size,
                         .window = c->sliding_window,
                         .rms_eps = c->rms_norm_eps,
                         .rope_scaling = c->rope_attention_scaling,
                         .rope_inv_freq = c->rope_inv_freq,
                         .n_floats = vr_lm_n_floats(lm),
                         .embed = off_of(lm, ix->embed),
                         .final_norm = off_of(lm, ix->final_norm),
                         .lm_head = off_of(lm, ix->lm_head),
                         .layer = L,
                         .score_w = off_of(lm, ix->score_w),
                         .score_b = off_of(lm, ix->score_b)};
  s->value = c->head == VR_LM_HEAD_VALUE;
  d.recompute = opt->recompute;
  d.forward_only = opt->forward_only;
  d.mlp = mlp;
  d.optim = optim;
  int rc = vr_cutrain_create(&d, vr_lm_params_const(lm), T, 0, lo, hi, &s->e);
  free(L);
  if (rc) {
    vr_tcuda_free(s);
    return rc;
  }
  if (tune) vr_cutrain_tune_gemms(s->e, tune);
  *state = s;
  return 0;
}

/* LM head: row r of the engine predicts token r + 1 of its sequence, its target when that token
 * is wanted (mask, or every token but a sequence's first); out[r + 1] = the row's log-prob.
 * Value head: row t is token t, wanted by the mask or always; out[t] = its value. */
static int vr_tcuda_forward(void *state, const vr_train_batch_t *b, float tau, float *out, float *ent, int keep) {
  vr_tcuda_t *s = state;
  const uint32_t n = b->n_seqs, T = n ? b->cu_seqlens[n] : 0;
  s->T = 0;
  if (T == 0) return 0;
  if (T > (uint32_t)s->T_max) return VR_ERR_TOO_LARGE;
  for (uint32_t q = 0; q < n; ++q)
    for (uint32_t t = b->cu_seqlens[q]; t < b->cu_seqlens[q + 1]; ++t) {
      if (s->value) {
        s->tgt[t] = !b->mask || b->mask[t] ? 0 : -1;
        continue;
      }
      const uint32_t nx = t + 1;
      const int want = nx < b->cu_seqlens[q + 1] && (!b->mask || b->mask[nx]);
      s->tgt[t] = want ? b->ids[nx] : -1;
    }
  int rc = vr_cutrain_forward(s->e, b->ids, b->cu_seqlens, (int)n, s->tgt, tau, s->row_a, ent ? s->row_b : NULL, keep);
  if (rc) return rc;
  memset(out, 0, T * sizeof *out);
  if (ent) memset(ent, 0, T * sizeof *ent);
  for (uint32_t r = 0; r < T; ++r) {
    if (s->tgt[r] < 0) continue;
    if (s->value) {
      out[r] = s->row_a[r];
      continue;
    }
    out[r + 1] = s->row_a[r];
    if (ent) ent[r + 1] = s->row_b[r];
  }
  s->T = keep ? (int)T : 0;
  return 0;
}

/* backward_ready's callback bundle: the engine's stage -> vr_train.h's lo. */
typedef struct {
  vr_tcuda_t *s;
  void (*ready)(void *ctx, size_t lo);
  void *ctx;
} ready_ctx_t;

static void stage_done(void *p, int stage) {
  ready_ctx_t *r = p;
  const vr_tcuda_t *s = r->s;
  r->ready(r->ctx, stage < 0 ? 0 : stage >= s->layers ? s->off_fnorm : s->off_layer[stage]);
}

/* backward_ready (vr_train.h): the engine's staged backward; ready(ctx, lo) once the stage's
 * gradients are final on the device (the engine waited for them), so the comm's collectives on
 * their own stream read final values; grads() inside ready does not wait for the stream (the
 * rest of the backward is queued on it). ready NULL: the plain backward. */
static int vr_tcuda_backward_ready(void *state, const float *dout, const float *dent,
                                   void (*ready)(void *ctx, size_t lo), void *ctx) {
  vr_tcuda_t *s = state;
  if (s->T == 0) return vr_cutrain_backward(s->e, s->row_a, NULL); /* logs the missing forward */
  for (int r = 0; r < s->T; ++r) {
    const int w = s->tgt[r] >= 0, t = s->value ? r : r + 1;
    s->row_a[r] = w ? dout[t] : 0.f;
    s->row_b[r] = w && dent && !s->value ? dent[t] : 0.f;
  }
  s->T = 0;
  if (!ready) return vr_cutrain_backward(s->e, s->row_a, dent ? s->row_b : NULL);
  ready_ctx_t rc = {s, ready, ctx};
  s->in_ready = 1;
  const int err = vr_cutrain_backward_cb(s->e, s->row_a, dent ? s->row_b : NULL, stage_done, &rc);
  s->in_ready = 0;
  return err;
}

static int vr_tcuda_backward(void *state, const float *dout, const float *dent) {
  return vr_tcuda_backward_ready(state, dout, dent, NULL, NULL);
}

static int vr_tcuda_zero_grad(void *state) { return vr_cutrain_zero_grad(((vr_tcuda_t *)state)->e); }
/* As params: the backward's kernels finish before a collective on the comm's stream reads them
 * (inside backward_ready's callback the engine has waited for the part reported ready). */
static float *vr_tcuda_grads(void *state) {
  vr_tcuda_t *s = state;
  if (s->in_ready) return vr_cutrain_grads(s->e);
  return vr_cutrain_sync(s->e) == 0 ? vr_cutrain_grads(s->e) : NULL;
}
static int vr_tcuda_params_written(void *state, size_t lo, size_t hi) {
  return vr_cutrain_params_written(((vr_tcuda_t *)state)->e, lo, hi);
}
/* The step's AdamW runs asynchronously on the engine's stream: wait for it, so that whoever reads
 * the buffer next (a device-to-device weight sync on another stream, a ZeRO-1 broadcast on the
 * comm's stream) sees the updated parameters. */
static float *vr_tcuda_params(void *state) {
  vr_cutrain_t *e = ((vr_tcuda_t *)state)->e;
  return vr_cutrain_sync(e) == 0 ? vr_cutrain_params(e) : NULL;
}

static int vr_tcuda_grad_sqnorm(void *state, size_t lo, size_t hi, double *out) {
  return vr_cutrain_grad_sqnorm(((vr_tcuda_t *)state)->e, lo, hi, out);
}

static int vr_tcuda_scale_grads(void *state, float f) { return vr_cutrain_scale_grads(((vr_tcuda_t *)state)->e, f); }

static int vr_tcuda_adamw(void *state, const vr_adamw_t *h, int64_t step) {
  return vr_cutrain_adamw_step(((vr_tcuda_t *)state)->e, h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, 0.f, step);
}

static int vr_tcuda_get_params(void *state, float *dst) { return vr_cutrain_get_params(((vr_tcuda_t *)state)->e, dst); }
static int vr_tcuda_set_params(void *state, const float *src) {
  return vr_cutrain_set_params(((vr_tcuda_t *)state)->e, src);
}
static int vr_tcuda_get_grads(void *state, float *dst) { return vr_cutrain_get_grads(((vr_tcuda_t *)state)->e, dst); }
static int vr_tcuda_get_moments(void *state, float *m, float *v) {
  return vr_cutrain_get_moments(((vr_tcuda_t *)state)->e, m, v);
}
static int vr_tcuda_set_moments(void *state, const float *m, const float *v) {
  return vr_cutrain_set_moments(((vr_tcuda_t *)state)->e, m, v);
}

const vr_train_backend_ops_t vr_train_backend_cuda = {
    .name = "cuda",
    .init = vr_tcuda_init,
    .free = vr_tcuda_free,
    .forward = vr_tcuda_forward,
    .backward = vr_tcuda_backward,
    .zero_grad = vr_tcuda_zero_grad,
    .grads = vr_tcuda_grads,
    .grad_sqnorm = vr_tcuda_grad_sqnorm,
    .scale_grads = vr_tcuda_scale_grads,
    .adamw = vr_tcuda_adamw,
    .params = vr_tcuda_params,
    .params_written = vr_tcuda_params_written,
    .get_params = vr_tcuda_get_params,
    .set_params = vr_tcuda_set_params,
    .get_grads = vr_tcuda_get_grads,
    .get_moments = vr_tcuda_get_moments,
    .set_moments = vr_tcuda_set_moments,
    .backward_ready = vr_tcuda_backward_ready,
};
