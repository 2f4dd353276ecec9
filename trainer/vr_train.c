/* vr_train.c: the training engine over a backend table (vr_train.h): input checks, data
 * parallel gradient all-reduce (reduce-scatter under ZeRO-1 where the comm has one) in buckets,
 * started during the last backward (vr_train_backward_last) or in the step, global-norm clipping,
 * AdamW with ZeRO-1 shards, optimizer state files, micro-batch splitting. */
#include "vr_train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verl_reward/status.h"
#include "vr_log.h"

struct vr_train {
  const vr_train_backend_ops_t *ops;
  void *state;
  vr_train_options_t opt;
  vr_lm_config_t cfg;              /* rope_inv_freq not used here */
  size_t n_floats, lo, hi;         /* this rank's shard */
  int64_t step;
  int pending;                     /* a kept forward awaits backward */
  /* data parallel: gradient buckets [bk[i], bk[i+1]), i < n_bk, reduced from the top down */
  size_t *bk;
  int n_bk, next;                  /* next bucket to start (descending; -1: all started) */
  void **req;                      /* per bucket: a started non-blocking all-reduce or NULL */
  char *done;                      /* per bucket: test said complete */
  int inflight, comm_rc;           /* backward_last started the reduction; first failure */
  int rs;                          /* ZeRO-1 with the comm's reduce-scatter: buckets reduce-scattered */
  size_t *off;                     /* (size + 1) a bucket's pieces per rank (reduce-scatter) */
  double *sq;                      /* (size) the ranks' shard sums of squares (reduce-scatter) */
  /* per table tensor: its offset, its offset in the first layout (vr_lm_offsets_v1), numel:
   * to read version-1 optimizer state files */
  size_t (*mv)[3];
  size_t n_mv;
};

void vr_train_options_init(vr_train_options_t *o) {
  memset(o, 0, sizeof *o);
  o->device = "cpu";
  o->max_tokens = 8192;
  o->bucket_floats = (size_t)1 << 22;
}

void vr_adamw_init(vr_adamw_t *h) {
  h->lr = 1e-3f;
  h->beta1 = 0.9f;
  h->beta2 = 0.999f;
  h->eps = 1e-8f;
  h->weight_decay = 0.01f;
}

/* Shard r of R over n floats, split at VR_LM_ALIGN boundaries. */
static void vr_train_shard(size_t n, int r, int R, size_t *lo, size_t *hi) {
  size_t units = n / VR_LM_ALIGN;
  *lo = units * (size_t)r / (size_t)R * VR_LM_ALIGN;
  *hi = r + 1 == R ? n : units * (size_t)(r + 1) / (size_t)R * VR_LM_ALIGN;
}

/* The gradient buckets (vr_train_backward_last): cut points 0, every layer's first tensor, the
 * final norm and n_floats; from the top, a bucket closes at the first cut that makes it at least
 * B floats (or at 0), then is split into pieces of at most B. */
static int vr_train_plan(vr_train_t *t, const vr_lm_t *lm) {
  const vr_lm_index_t *ix = vr_lm_index(lm);
  const int L = t->cfg.num_layers;
  size_t B = t->opt.bucket_floats < (size_t)1 << 30 ? t->opt.bucket_floats : (size_t)1 << 30;
  size_t ncut = (size_t)L + 3, *cut = malloc(ncut * sizeof *cut), k = 0;
  size_t cap = t->n_floats / B + ncut + 1, nb = 0, *desc = malloc(cap * sizeof *desc);
  if (!cut || !desc) {
    free(cut), free(desc);
    return VR_ERR_NOMEM;
  }
  cut[k++] = 0;
  for (int l = 0; l < L; l++) cut[k++] = vr_lm_tensor(lm, (size_t)ix->layers[l].q_w)->offset;
  cut[k++] = vr_lm_tensor(lm, (size_t)ix->final_norm)->offset;
  cut[k++] = t->n_floats;
  size_t hi = t->n_floats;
  for (size_t i = k - 1; i-- > 0;) {
    if (hi - cut[i] < B && i > 0) continue;
    for (size_t e = hi; e > cut[i];) { /* pieces of at most B from cut[i] up, listed top down */
      size_t a = cut[i] + (e - cut[i] - 1) / B * B;
      desc[nb++] = a;
      e = a;
    }
    hi = cut[i];
  }
  free(cut);
  t->bk = malloc((nb + 1) * sizeof *t->bk);
  t->req = calloc(nb ? nb : 1, sizeof *t->req);
  t->done = calloc(nb ? nb : 1, 1);
  if (!t->bk || !t->req || !t->done) {
    free(desc);
    return VR_ERR_NOMEM;
  }
  for (size_t i = 0; i < nb; i++) t->bk[i] = desc[nb - 1 - i];
  t->bk[nb] = t->n_floats;
  t->n_bk = (int)nb;
  free(desc);
  return 0;
}

int vr_train_init(const vr_lm_t *lm, const vr_train_options_t *opt_in, vr_train_t **out) {
  if (!lm || !out) return VR_ERR_INVAL;
  *out = NULL;
  vr_train_options_t opt;
  if (opt_in) opt = *opt_in;
  else vr_train_options_init(&opt);
  if (!opt.device) opt.device = "cpu";
  if (opt.max_tokens == 0) opt.max_tokens = 8192;
  if (opt.bucket_floats == 0) opt.bucket_floats = (size_t)1 << 22;
  if (opt.comm.size <= 0) opt.comm.size = 1, opt.comm.rank = 0;
  if (opt.forward_only && opt.comm.size > 1) {
    vr_log(VR_LOG_ERROR, "training engine: a forward-only engine takes no data-parallel group (comm of %d ranks)",
           opt.comm.size);
    return VR_ERR_INVAL;
  }
  if (opt.comm.rank < 0 || opt.comm.rank >= opt.comm.size ||
      (opt.comm.size > 1 && (!opt.comm.allreduce_sum || !opt.comm.bcast)) ||
      (opt.comm.iallreduce_sum == NULL) != (opt.comm.wait == NULL) ||
      (opt.comm.ireduce_scatter_sum && (!opt.comm.wait || !opt.comm.reduce_scatter_sum))) {
    vr_log(VR_LOG_ERROR, "training engine: comm rank %d of %d without collectives", opt.comm.rank, opt.comm.size);
    return VR_ERR_INVAL;
  }
  const vr_train_backend_ops_t *ops = NULL;
  if (strcmp(opt.device, "cpu") == 0) {
    ops = &vr_train_backend_cpu;
  } else if (strncmp(opt.device, "cuda", 4) == 0 && (opt.device[4] == 0 || opt.device[4] == ':')) {
#ifdef VR_HAVE_CUDA
    ops = &vr_train_backend_cuda;
#else
    vr_log(VR_LOG_ERROR, "device \"%s\": this build has no CUDA training backend (configure with -DVR_CUDA=ON). "
           "HINT: --device cpu", opt.device);
    return VR_ERR_UNSUPPORTED;
#endif
  } else {
    vr_log(VR_LOG_ERROR, "device \"%s\" not understood (cpu or cuda[:N])", opt.device);
    return VR_ERR_INVAL;
  }
  vr_train_t *t = calloc(1, sizeof *t);
  if (!t) return VR_ERR_NOMEM;
  t->ops = ops;
  t->opt = opt;
  t->cfg = *vr_lm_config(lm);
  t->cfg.rope_inv_freq = NULL;
  t->n_floats = vr_lm_n_floats(lm);
  t->n_mv = vr_lm_n_tensors(lm);
  t->mv = malloc((t->n_mv ? t->n_mv : 1) * sizeof *t->mv);
  size_t *v1 = malloc((t->n_mv ? t->n_mv : 1) * sizeof *v1);
  if (!t->mv || !v1) {
    free(t->mv), free(v1), free(t);
    return VR_ERR_NOMEM;
  }
  vr_lm_offsets_v1(lm, v1);
  for (size_t i = 0; i < t->n_mv; i++) {
    const vr_lm_tensor_t *x = vr_lm_tensor(lm, i);
    t->mv[i][0] = x->offset, t->mv[i][1] = v1[i], t->mv[i][2] = x->numel;
  }
  free(v1);
  if (opt.zero1 && opt.comm.size > 1) vr_train_shard(t->n_floats, opt.comm.rank, opt.comm.size, &t->lo, &t->hi);
  else if (opt.forward_only) t->lo = t->hi = 0; /* no optimizer state */
  else t->lo = 0, t->hi = t->n_floats;
  int rc = opt.comm.size > 1 ? vr_train_plan(t, lm) : 0;
  t->rs = opt.zero1 && opt.comm.size > 1 && opt.comm.reduce_scatter_sum;
  if (rc == 0 && t->rs) {
    t->off = malloc(((size_t)opt.comm.size + 1) * sizeof *t->off);
    t->sq = malloc((size_t)opt.comm.size * sizeof *t->sq);
    if (!t->off || !t->sq) rc = VR_ERR_NOMEM;
  }
  if (rc == 0) rc = ops->init(lm, &t->opt, t->lo, t->hi, &t->state);
  if (rc != 0) {
    free(t->bk), free(t->req), free(t->done), free(t->off), free(t->sq), free(t->mv);
    free(t);
    return rc;
  }
  *out = t;
  return 0;
}

/* Starts the all-reduce of every bucket not yet started that lies in [lo, n_floats). */
static void vr_train_launch(vr_train_t *t, size_t lo) {
  const vr_train_comm_t *c = &t->opt.comm;
  float *g = t->ops->grads(t->state);
  if (!g && t->comm_rc == 0) {
    t->comm_rc = VR_ERR_INTERNAL;
    vr_log(VR_LOG_ERROR, "training: the backend's gradient buffer is not available for the all-reduce");
  }
  for (; t->next >= 0 && t->bk[t->next] >= lo; t->next--) {
    const int i = t->next;
    if (t->comm_rc != 0) continue; /* after a failure nothing more is started */
    size_t a = t->bk[i], n = t->bk[i + 1] - a;
    t->done[i] = 0;
    int rc;
    if (t->rs) { /* rank r's piece: the bucket within its shard */
      for (int r = 0; r <= c->size; r++) {
        size_t lo = t->n_floats, hi;
        if (r < c->size) vr_train_shard(t->n_floats, r, c->size, &lo, &hi);
        t->off[r] = lo < a ? 0 : lo > a + n ? n : lo - a;
      }
      rc = c->ireduce_scatter_sum ? c->ireduce_scatter_sum(c->ctx, g + a, n, t->off, &t->req[i])
                                  : c->reduce_scatter_sum(c->ctx, g + a, n, t->off);
    } else {
      rc = c->iallreduce_sum ? c->iallreduce_sum(c->ctx, g + a, n, &t->req[i]) : c->allreduce_sum(c->ctx, g + a, n);
    }
    if (rc != 0) {
      t->req[i] = NULL;
      t->comm_rc = rc;
      vr_log(VR_LOG_ERROR, "training: gradient all-reduce of [%zu, %zu) failed (%d)", a, a + n, rc);
    }
  }
  for (int i = t->n_bk - 1; c->test && i > t->next; i--) /* progress for the started ones */
    if (t->req[i] && !t->done[i]) {
      int d = 0;
      if (c->test(c->ctx, t->req[i], &d) == 0 && d) t->done[i] = 1;
    }
}

static void vr_train_ready(void *ctx, size_t lo) { vr_train_launch(ctx, lo); }

/* Completes the reduction backward_last (or step) started; 0 or the first failure. */
static int vr_train_wait(vr_train_t *t) {
  const vr_train_comm_t *c = &t->opt.comm;
  for (int i = t->n_bk - 1; i >= 0; i--) {
    if (!t->req[i]) continue;
    int rc = c->wait(c->ctx, t->req[i]);
    t->req[i] = NULL;
    if (rc != 0 && t->comm_rc == 0) {
      t->comm_rc = rc;
      vr_log(VR_LOG_ERROR, "training: gradient all-reduce of [%zu, %zu) failed (%d)", t->bk[i], t->bk[i + 1], rc);
    }
  }
  int rc = t->comm_rc;
  t->inflight = 0, t->comm_rc = 0;
  return rc;
}

void vr_train_free(vr_train_t *t) {
  if (!t) return;
  if (t->inflight) vr_train_wait(t);
  t->ops->free(t->state);
  free(t->bk), free(t->req), free(t->done), free(t->off), free(t->sq), free(t->mv);
  free(t);
}

/* The input contract of forward (vr_train.h); logs the first problem. */
static int vr_train_check(const vr_train_t *t, const vr_train_batch_t *b, float tau) {
  if (!b || (b->n_seqs && (!b->cu_seqlens || !b->ids))) {
    vr_log(VR_LOG_ERROR, "training forward: NULL batch arrays");
    return VR_ERR_INVAL;
  }
  if (t->cfg.head == VR_LM_HEAD_LM && !(tau > 0.0f && isfinite(tau))) {
    vr_log(VR_LOG_ERROR, "training forward: temperature %g must be a positive number", tau);
    return VR_ERR_INVAL;
  }
  if (b->n_seqs == 0) return 0;
  if (b->cu_seqlens[0] != 0) {
    vr_log(VR_LOG_ERROR, "training forward: cu_seqlens[0] is %u, must be 0", b->cu_seqlens[0]);
    return VR_ERR_INVAL;
  }
  for (uint32_t q = 0; q < b->n_seqs; q++) {
    uint32_t a = b->cu_seqlens[q], e = b->cu_seqlens[q + 1];
    if (e < a) {
      vr_log(VR_LOG_ERROR, "training forward: cu_seqlens decreases at sequence %u", q);
      return VR_ERR_INVAL;
    }
    if (e == a) {
      vr_log(VR_LOG_ERROR, "training forward: sequence %u is empty", q);
      return VR_ERR_EMPTY_SEQ;
    }
    if (e - a > (uint32_t)t->cfg.max_position_embeddings) {
      vr_log(VR_LOG_ERROR, "training forward: sequence %u has %u tokens, more than max_position_embeddings %d", q,
             e - a, t->cfg.max_position_embeddings);
      return VR_ERR_SEQ_TOO_LONG;
    }
    if (e > t->opt.max_tokens) {
      vr_log(VR_LOG_ERROR, "training forward: batch of %u+ tokens is larger than max_tokens %u. HINT: split it (vr_train_split)",
             e, t->opt.max_tokens);
      return VR_ERR_TOO_LARGE;
    }
    for (uint32_t i = a; i < e; i++) {
      if (b->ids[i] < 0 || b->ids[i] >= t->cfg.vocab_size) {
        vr_log(VR_LOG_ERROR, "training forward: sequence %u token %u is id %d, outside the vocabulary [0, %d)", q,
               i - a, b->ids[i], t->cfg.vocab_size);
        return VR_ERR_TOKEN_RANGE;
      }
    }
    if (b->mask && t->cfg.head == VR_LM_HEAD_LM && b->mask[a]) {
      vr_log(VR_LOG_ERROR, "training forward: mask selects the first token of sequence %u, which has no log-prob", q);
      return VR_ERR_INVAL;
    }
  }
  return 0;
}

/* Nonzero (logged) when t is a forward-only engine, which cannot do what. */
static int vr_train_fwd_only(const vr_train_t *t, const char *what) {
  if (!t->opt.forward_only) return 0;
  vr_log(VR_LOG_ERROR, "training engine: %s on a forward-only engine (log-probs only: it holds no gradients or "
         "optimizer state)", what);
  return VR_ERR_UNSUPPORTED;
}

int vr_train_forward(vr_train_t *t, const vr_train_batch_t *b, float temperature, float *out, float *entropy,
                     int keep) {
  if (!t || !out) return VR_ERR_INVAL;
  if (keep && vr_train_fwd_only(t, "a forward kept for backward")) return VR_ERR_UNSUPPORTED;
  t->pending = 0;
  int rc = vr_train_check(t, b, temperature);
  if (rc != 0) return rc;
  rc = t->ops->forward(t->state, b, temperature, out, t->cfg.head == VR_LM_HEAD_LM ? entropy : NULL, keep);
  if (rc == 0) t->pending = keep != 0;
  return rc;
}

static int vr_train_backward_check(vr_train_t *t, const float *dout) {
  if (!t || !dout) return VR_ERR_INVAL;
  if (vr_train_fwd_only(t, "backward")) return VR_ERR_UNSUPPORTED;
  if (t->inflight) {
    vr_log(VR_LOG_ERROR, "training backward: the gradients are being reduced (backward_last); step or zero_grad first");
    return VR_ERR_INVAL;
  }
  if (!t->pending) {
    vr_log(VR_LOG_ERROR, "training backward: no forward with keep = 1 is pending");
    return VR_ERR_INVAL;
  }
  t->pending = 0;
  return 0;
}

int vr_train_backward(vr_train_t *t, const float *dout, const float *dent) {
  int rc = vr_train_backward_check(t, dout);
  if (rc != 0) return rc;
  return t->ops->backward(t->state, dout, t->cfg.head == VR_LM_HEAD_LM ? dent : NULL);
}

int vr_train_backward_last(vr_train_t *t, const float *dout, const float *dent) {
  int rc = vr_train_backward_check(t, dout);
  if (rc != 0) return rc;
  dent = t->cfg.head == VR_LM_HEAD_LM ? dent : NULL;
  if (t->opt.comm.size <= 1) return t->ops->backward(t->state, dout, dent);
  t->next = t->n_bk - 1, t->comm_rc = 0, t->inflight = 1;
  if (t->ops->backward_ready) rc = t->ops->backward_ready(t->state, dout, dent, vr_train_ready, t);
  else rc = t->ops->backward(t->state, dout, dent);
  vr_train_launch(t, 0); /* the rest; also after a failure, so the group's collectives stay matched */
  return rc;
}

int vr_train_zero_grad(vr_train_t *t) {
  if (!t) return VR_ERR_INVAL;
  if (vr_train_fwd_only(t, "zero_grad")) return VR_ERR_UNSUPPORTED;
  int rc = t->inflight ? vr_train_wait(t) : 0;
  int z = t->ops->zero_grad(t->state);
  return rc != 0 ? rc : z;
}

int vr_train_grad_norm(vr_train_t *t, double *norm) {
  if (!t || !norm) return VR_ERR_INVAL;
  if (vr_train_fwd_only(t, "grad_norm")) return VR_ERR_UNSUPPORTED;
  if (t->inflight) {
    int rc = vr_train_wait(t);
    if (rc != 0) return rc;
  }
  double sq = 0;
  int rc = t->ops->grad_sqnorm(t->state, 0, t->n_floats, &sq);
  if (rc == 0) *norm = sqrt(sq);
  return rc;
}

int vr_train_step(vr_train_t *t, const vr_adamw_t *h, float clip, double *grad_norm) {
  if (!t || !h) return VR_ERR_INVAL;
  if (vr_train_fwd_only(t, "an optimizer step")) return VR_ERR_UNSUPPORTED;
  const vr_train_comm_t *c = &t->opt.comm;
  int rc = 0;
  if (c->size > 1) { /* sum the gradients over the group, bucket by bucket (unless backward_last did) */
    if (!t->inflight) {
      t->next = t->n_bk - 1, t->comm_rc = 0, t->inflight = 1;
      vr_train_launch(t, 0);
    }
    rc = vr_train_wait(t);
    if (rc != 0) {
      vr_log(VR_LOG_ERROR, "training step: gradient all-reduce failed (%d)", rc);
      return rc;
    }
  }
  double norm = 0;
  if (t->rs) { /* each shard's sum of squares to every rank, summed in rank order */
    rc = t->ops->grad_sqnorm(t->state, t->lo, t->hi, &t->sq[c->rank]);
    for (int r = 0; r < c->size && rc == 0; r++) rc = c->bcast(c->ctx, &t->sq[r], sizeof t->sq[r], r);
    if (rc != 0) {
      vr_log(VR_LOG_ERROR, "training step: gradient norm exchange failed (%d)", rc);
      return rc;
    }
    double sq = 0;
    for (int r = 0; r < c->size; r++) sq += t->sq[r];
    norm = sqrt(sq);
  } else {
    rc = vr_train_grad_norm(t, &norm);
  }
  if (rc != 0) return rc;
  if (grad_norm) *grad_norm = norm;
  if (!isfinite(norm)) {
    vr_log(VR_LOG_ERROR, "training step %lld: gradient norm is %g; step skipped", (long long)t->step + 1, norm);
    return VR_ERR_NONFINITE;
  }
  if (clip > 0.0f) { /* torch.nn.utils.clip_grad_norm_ */
    double coef = (double)clip / (norm + 1e-6);
    if (coef < 1.0) rc = t->ops->scale_grads(t->state, (float)coef);
    if (rc != 0) return rc;
  }
  rc = t->ops->adamw(t->state, h, t->step + 1);
  if (rc != 0) return rc;
  t->step++;
  if (t->opt.zero1 && c->size > 1) { /* every rank's updated shard to every rank */
    float *p = t->ops->params(t->state);
    if (!p) rc = VR_ERR_INTERNAL; /* the backend's wait failed (logged) */
    for (int r = 0; r < c->size && rc == 0; r++) {
      size_t lo, hi;
      vr_train_shard(t->n_floats, r, c->size, &lo, &hi);
      rc = c->bcast(c->ctx, p + lo, (hi - lo) * sizeof(float), r);
      if (rc == 0 && r != c->rank && t->ops->params_written) rc = t->ops->params_written(t->state, lo, hi);
    }
    if (rc != 0) vr_log(VR_LOG_ERROR, "training step: parameter broadcast failed (%d)", rc);
  }
  return rc;
}

size_t vr_train_n_floats(const vr_train_t *t) { return t->n_floats; }
void vr_train_shard_range(const vr_train_t *t, size_t *lo, size_t *hi) { *lo = t->lo, *hi = t->hi; }
float *vr_train_param_buffer(vr_train_t *t) { return t->ops->params(t->state); }
float *vr_train_grad_buffer(vr_train_t *t) { return vr_train_fwd_only(t, "the gradient buffer") ? NULL : t->ops->grads(t->state); }
const char *vr_train_device(const vr_train_t *t) { return t->ops->name; }
int64_t vr_train_step_count(const vr_train_t *t) { return t->step; }

int vr_train_get_params(vr_train_t *t, float *dst, size_t n) {
  if (!t || !dst || n != t->n_floats) return VR_ERR_INVAL;
  return t->ops->get_params(t->state, dst);
}

int vr_train_set_params(vr_train_t *t, const float *src, size_t n) {
  if (!t || !src || n != t->n_floats) return VR_ERR_INVAL;
  t->pending = 0;
  return t->ops->set_params(t->state, src);
}

int vr_train_get_grads(vr_train_t *t, float *dst, size_t n) {
  if (!t || !dst || n != t->n_floats) return VR_ERR_INVAL;
  if (vr_train_fwd_only(t, "get_grads")) return VR_ERR_UNSUPPORTED;
  int rc = t->inflight ? vr_train_wait(t) : 0;
  if (rc != 0) return rc;
  return t->ops->get_grads(t->state, dst);
}

/* ---- optimizer state file ----------------------------------------------------------------- */

#define VR_TRAIN_OPT_MAGIC "VRAD"
/* 2: the moments in vr_lm's table layout with q/k/v's and gate/up's biases after their weights;
 * 1: the same file with every bias right after its weight (vr_lm_offsets_v1), still read */
#define VR_TRAIN_OPT_VERSION 2u

typedef struct vr_train_opt_header {
  char magic[4];
  uint32_t version;
  int64_t step;
  uint64_t n_floats, lo, hi;
} vr_train_opt_header_t;

int vr_train_optimizer_snapshot(vr_train_t *t, vr_train_optsnap_t *s) {
  s->bytes = NULL, s->n_bytes = 0;
  if (vr_train_fwd_only(t, "an optimizer snapshot")) return VR_ERR_UNSUPPORTED;
  const size_t n = t->hi - t->lo;
  s->n_bytes = sizeof(vr_train_opt_header_t) + 2 * n * sizeof(float);
  s->bytes = malloc(s->n_bytes);
  if (!s->bytes) {
    s->n_bytes = 0;
    return VR_ERR_NOMEM;
  }
  const vr_train_opt_header_t h = {{'V', 'R', 'A', 'D'}, VR_TRAIN_OPT_VERSION, t->step, t->n_floats, t->lo, t->hi};
  memcpy(s->bytes, &h, sizeof h);
  float *m = (float *)((char *)s->bytes + sizeof h);
  int rc = t->ops->get_moments(t->state, m, m + n);
  if (rc != 0) vr_train_optimizer_snap_free(s);
  return rc;
}

int vr_train_optimizer_write(const vr_train_optsnap_t *s, const char *path) {
  if (strlen(path) + sizeof ".tmp" > 4096 + 8) { /* as vr_lm_write_file's bound, with this message */
    vr_log(VR_LOG_ERROR, "%s: optimizer state path too long", path);
    return VR_ERR_INVAL;
  }
  const void *parts[1] = {s->bytes};
  return vr_lm_write_file(path, parts, &s->n_bytes, 1);
}

void vr_train_optimizer_snap_free(vr_train_optsnap_t *s) {
  free(s->bytes);
  s->bytes = NULL;
  s->n_bytes = 0;
}

int vr_train_save_optimizer(vr_train_t *t, const char *path) {
  vr_train_optsnap_t s = {0};
  int rc = vr_train_optimizer_snapshot(t, &s);
  if (rc == 0) rc = vr_train_optimizer_write(&s, path);
  vr_train_optimizer_snap_free(&s);
  return rc;
}

/* A version-1 file's moments m, v (the shard [lo, hi) of the first layout) moved in place to
 * this layout: each tensor's elements in the shard now come from the same elements of that
 * tensor in the first layout. Refused when one of them lies outside the file's shard there (a
 * ZeRO-1 cut near a tensor the two layouts place differently: the moments are on another rank). */
static int vr_train_opt_from_v1(vr_train_t *t, const char *path, float *m, float *v) {
  const size_t n = t->hi - t->lo;
  float *tm = calloc(n ? n : 1, sizeof *tm), *tv = calloc(n ? n : 1, sizeof *tv);
  int rc = tm && tv ? 0 : VR_ERR_NOMEM;
  for (size_t i = 0; i < t->n_mv && rc == 0; i++) {
    const size_t a = t->mv[i][0], b = t->mv[i][1], k = t->mv[i][2];
    const size_t x = a > t->lo ? a : t->lo, y = a + k < t->hi ? a + k : t->hi; /* its part of the shard */
    if (x >= y) continue;
    const size_t from = b + (x - a), to = b + (y - a);
    if (from < t->lo || to > t->hi) {
      vr_log(VR_LOG_ERROR,
             "%s: a version-1 optimizer state of shard [%zu, %zu): table tensor %zu's moments at [%zu, %zu) of this "
             "layout were at [%zu, %zu) in version 1's, outside the file's shard (on another rank): they cannot be "
             "moved here; start the optimizer state fresh",
             path, t->lo, t->hi, i, x, y, from, to);
      rc = VR_ERR_MODEL_FORMAT;
      break;
    }
    memcpy(tm + (x - t->lo), m + (from - t->lo), (y - x) * sizeof *tm);
    memcpy(tv + (x - t->lo), v + (from - t->lo), (y - x) * sizeof *tv);
  }
  if (rc == 0) {
    memcpy(m, tm, n * sizeof *m), memcpy(v, tv, n * sizeof *v);
    vr_log(VR_LOG_INFO, "%s: version-1 optimizer state moved to this build's layout", path);
  }
  free(tm), free(tv);
  return rc;
}

int vr_train_load_optimizer(vr_train_t *t, const char *path) {
  if (vr_train_fwd_only(t, "loading optimizer state")) return VR_ERR_UNSUPPORTED;
  FILE *f = fopen(path, "rb");
  if (!f) {
    vr_log(VR_LOG_ERROR, "%s: cannot open the optimizer state: %s", path, strerror(errno));
    return errno == ENOENT ? VR_ERR_NOT_FOUND : VR_ERR_IO;
  }
  vr_train_opt_header_t h;
  int rc = 0;
  if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, VR_TRAIN_OPT_MAGIC, 4) != 0) {
    vr_log(VR_LOG_ERROR, "%s: not an optimizer state file (magic \"VRAD\" missing)", path);
    rc = VR_ERR_MODEL_FORMAT;
  } else if (h.version != VR_TRAIN_OPT_VERSION && h.version != 1u) {
    vr_log(VR_LOG_ERROR, "%s: version %u, this build reads versions 1 and %u", path, h.version, VR_TRAIN_OPT_VERSION);
    rc = VR_ERR_MODEL_FORMAT;
  } else if (h.n_floats != t->n_floats || h.lo != t->lo || h.hi != t->hi || h.step < 0) {
    vr_log(VR_LOG_ERROR, "%s: %s differs (file: n_floats %llu shard [%llu, %llu) step %lld; engine: n_floats %zu shard [%zu, %zu))",
           path, h.n_floats != t->n_floats ? "n_floats (another model)" : h.step < 0 ? "step" : "the shard (another DP size or rank)",
           (unsigned long long)h.n_floats, (unsigned long long)h.lo, (unsigned long long)h.hi, (long long)h.step,
           t->n_floats, t->lo, t->hi);
    rc = VR_ERR_MODEL_FORMAT;
  }
  size_t n = t->hi - t->lo;
  float *m = NULL, *v = NULL;
  if (rc == 0) {
    m = malloc((n ? n : 1) * sizeof *m), v = malloc((n ? n : 1) * sizeof *v);
    if (!m || !v) rc = VR_ERR_NOMEM;
  }
  if (rc == 0 && (fread(m, sizeof *m, n, f) != n || fread(v, sizeof *v, n, f) != n || fgetc(f) != EOF)) {
    vr_log(VR_LOG_ERROR, "%s: truncated or too long (want %zu moments each of m and v)", path, n);
    rc = VR_ERR_MODEL_FORMAT;
  }
  fclose(f);
  if (rc == 0 && h.version == 1u) rc = vr_train_opt_from_v1(t, path, m, v);
  if (rc == 0) rc = t->ops->set_moments(t->state, m, v);
  if (rc == 0) t->step = h.step;
  free(m);
  free(v);
  return rc;
}

uint32_t vr_train_split(const uint32_t *cu, uint32_t n, uint32_t budget, uint32_t *starts) {
  uint32_t k = 0, q = 0;
  while (q < n) {
    starts[k++] = q;
    uint32_t first = q;
    q++;
    while (q < n && cu[q + 1] - cu[first] <= budget) q++;
  }
  starts[k] = n;
  return k;
}
