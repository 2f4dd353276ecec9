/* test_cuda_train_optim.c: the CUDA training engine's optimizer schedules (vr_cutrain_desc_t.optim)
 * give the same bits. Two engines over the same random-weight model (a small Qwen2-like decoder:
 * q/k/v biases, GQA, tied embeddings), one with the update overlapped with the next forward, one
 * with it on the engine's stream, make the same calls; after each sequence their log-probs,
 * parameters, moments and gradients are compared bit for bit. The sequences are the ones that meet
 * an update still in flight in another way:
 *   - steps of zero_grad, forward (kept), backward, AdamW with the on-device clip, back to back
 *     (the forward waits for each layer's update; zero_grad defers its zeroing);
 *   - an update, then a read of the parameters (vr_cutrain_get_params, the pointer);
 *   - an update, zero_grad, then the squared gradient norm (the deferred zeroing and the
 *     materialisation: 0);
 *   - two updates with no forward between them;
 *   - an update, then set_params over it;
 *   - an update, then a log-prob forward only (keep 0), then a backward refused, then a step;
 *   - the trainer's clip: scale_grads, then an update without the device clip, with the gradients
 *     read between them on one engine (the factor applied in place) and not on the other (the
 *     factor folded into the update), then read on both;
 * once with the optimizer state over the whole buffer (the input embedding's update deferred to
 * the next forward, which computes its rows from the update's inputs) and once over a shard that
 * cuts the embedding (every stage enqueued at once).
 * Exit code: 0 pass, 1 fail, 77 no GPU. */
#include <math.h>

#include "cuda_test_util.h"
#include "verl_reward/status.h"
#include "vr_cutrain.h"

/* A failed call: the test fails (and what it was is printed). */
#define assert_ok(cond, what)                                  \
  do {                                                         \
    if (!(cond)) {                                             \
      printf("%s:%d: %s: FAIL\n", __FILE__, __LINE__, (what)); \
      g_fail = 1;                                              \
    }                                                          \
  } while (0)

enum { V = 8191, C = 256, L = 3, H = 4, KV = 2, D = 64, F = 640, S = 4, LEN = 129, T = S * LEN };

/* n floats at 64-float alignment (the GEMMs' operands must be 16-byte aligned, as vr_lm lays them
 * out), then a 64-float gap: padding, which the optimizer updates too */
static size_t put(size_t *at, size_t n) {
  const size_t o = *at;
  *at += (n + 63) / 64 * 64 + 64;
  return o;
}

typedef struct {
  vr_cutrain_desc_t d;
  vr_cutrain_layer_off_t lo[L];
  float inv[D / 2];
} model_t;

static void model_init(model_t *m) {
  size_t at = 64;
  memset(m, 0, sizeof *m);
  const size_t embed = put(&at, (size_t)V * C);
  for (int l = 0; l < L; ++l) {
    vr_cutrain_layer_off_t *o = &m->lo[l];
    o->norm1 = put(&at, C);
    o->q_w = at, o->k_w = o->q_w + (size_t)H * D * C, o->v_w = o->k_w + (size_t)KV * D * C; /* adjacent: one GEMM */
    at = o->v_w + (size_t)KV * D * C;
    o->q_b = at, o->k_b = o->q_b + (size_t)H * D, o->v_b = o->k_b + (size_t)KV * D;
    at = o->v_b + (size_t)KV * D + 64;
    o->o_w = put(&at, (size_t)C * H * D), o->o_b = VR_CUTRAIN_NONE;
    o->norm2 = put(&at, C);
    o->gate_w = at, o->up_w = at + (size_t)F * C;
    at += 2 * (size_t)F * C + 64;
    o->down_w = put(&at, (size_t)C * F);
    o->gate_b = o->up_b = o->down_b = VR_CUTRAIN_NONE;
  }
  const size_t fnorm = put(&at, C);
  for (int i = 0; i < D / 2; ++i) m->inv[i] = (float)pow(10000.0, -2.0 * i / D);
  m->d = (vr_cutrain_desc_t){.vocab = V,
                             .hidden = C,
                             .layers = L,
                             .heads = H,
                             .kv_heads = KV,
                             .head_dim = D,
                             .inter = F,
                             .rms_eps = 1e-6f,
                             .rope_scaling = 1.0f,
                             .rope_inv_freq = m->inv,
                             .n_floats = at,
                             .embed = embed,
                             .final_norm = fnorm,
                             .lm_head = VR_CUTRAIN_NONE,
                             .layer = m->lo,
                             .score_w = VR_CUTRAIN_NONE,
                             .score_b = VR_CUTRAIN_NONE};
}

typedef struct {
  int32_t ids[T], tgt[T];
  uint32_t cu[S + 1];
  float glp[T];
} batch_t;

static void batch_init(batch_t *b, uint64_t seed) {
  g_rng = seed;
  for (int q = 0; q <= S; ++q) b->cu[q] = (uint32_t)(q * LEN);
  for (int t = 0; t < T; ++t) b->ids[t] = irand(V);
  for (int t = 0; t < T; ++t) {
    const int last = (t + 1) % LEN == 0;
    b->tgt[t] = last ? -1 : b->ids[t + 1];
    b->glp[t] = last ? 0.f : -1.0f / (float)(S * (LEN - 1));
  }
}

typedef struct {
  vr_cutrain_t *e[2]; /* [0] serial (the reference), [1] overlapped */
  size_t n;
  float *a, *b;
} pair_t;

/* Both engines' n floats of what get(e, out) returns, compared bit for bit. */
static void same(pair_t *p, const char *what, int (*get)(vr_cutrain_t *, float *), size_t n) {
  assert_ok(get(p->e[0], p->a) == 0 && get(p->e[1], p->b) == 0, what);
  size_t diff = 0, first = n;
  for (size_t i = 0; i < n; ++i)
    if (memcmp(&p->a[i], &p->b[i], 4)) {
      if (first == n) first = i;
      ++diff;
    }
  printf("%-64s %s (%zu of %zu floats differ%s)\n", what, diff ? "FAIL" : "ok", diff, n, diff ? ", see below" : "");
  if (diff) {
    printf("  first at %zu: serial %.9g, overlapped %.9g\n", first, p->a[first], p->b[first]);
    g_fail = 1;
  }
}

static int get_params(vr_cutrain_t *e, float *out) { return vr_cutrain_get_params(e, out); }
static int get_grads(vr_cutrain_t *e, float *out) { return vr_cutrain_get_grads(e, out); }
static const batch_t *g_batch;
static int fwd_logp(vr_cutrain_t *e, float *out) {
  return vr_cutrain_forward(e, g_batch->ids, g_batch->cu, S, g_batch->tgt, 1.0f, out, NULL, 0);
}

static void step(pair_t *p, const batch_t *b, int64_t k) {
  for (int i = 0; i < 2; ++i) {
    vr_cutrain_t *e = p->e[i];
    assert_ok(vr_cutrain_zero_grad(e) == 0, "zero_grad");
    assert_ok(vr_cutrain_forward(e, b->ids, b->cu, S, b->tgt, 1.0f, NULL, NULL, 1) == 0, "forward (kept)");
    assert_ok(vr_cutrain_backward(e, b->glp, NULL) == 0, "backward");
    assert_ok(vr_cutrain_adamw_step(e, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.5f, k) == 0, "adamw_step");
  }
}

/* The whole sequence on a pair of engines whose optimizer state covers [lo, hi). */
static void run_pair(const model_t *m, size_t lo, size_t hi, const char *label) {
  printf("-- %s: optimizer shard [%zu, %zu) of %zu\n", label, lo, hi, m->d.n_floats);
  pair_t p = {.n = m->d.n_floats};
  const size_t sh = hi - lo;
  p.a = malloc(p.n * 4), p.b = malloc(p.n * 4);
  float *m0 = malloc(sh * 4), *v0 = malloc(sh * 4), *m1 = malloc(sh * 4), *v1 = malloc(sh * 4);
  for (int i = 0; i < 2; ++i) {
    vr_cutrain_desc_t d = m->d;
    d.optim = i ? VR_CUTRAIN_OPTIM_OVERLAP : VR_CUTRAIN_OPTIM_SERIAL;
    const int rc = vr_cutrain_create(&d, NULL, T, 0, lo, hi, &p.e[i]);
    assert_ok(rc == 0, "vr_cutrain_create");
    if (rc) exit(1);
    vr_cutrain_randomize(p.e[i], 7, 0.05f);
  }
  batch_t b0, b1;
  batch_init(&b0, 11);
  batch_init(&b1, 12);
  g_batch = &b0;

  /* steps back to back, two batches alternating */
  for (int64_t k = 1; k <= 4; ++k) step(&p, k % 2 ? &b0 : &b1, k);
  same(&p, "4 steps (clip 0.5): log-probs of a forward after the last update", fwd_logp, T);
  same(&p, "4 steps: parameters", get_params, p.n);
  same(&p, "4 steps: gradients of the last step", get_grads, p.n);
  for (int i = 0; i < 2; ++i)
    assert_ok(vr_cutrain_get_moments(p.e[i], i ? m1 : m0, i ? v1 : v0) == 0, "get_moments");
  const int mom_same = !memcmp(m0, m1, sh * 4) && !memcmp(v0, v1, sh * 4);
  printf("%-64s %s\n", "4 steps: moments", mom_same ? "ok" : "FAIL");
  if (!mom_same) g_fail = 1;

  /* an update, then the parameters read at once (the copy waits for the update) */
  step(&p, &b1, 5);
  same(&p, "an update, then get_params", get_params, p.n);
  float *dp[2] = {vr_cutrain_params(p.e[0]), vr_cutrain_params(p.e[1])};
  assert_ok(dp[0] && dp[1], "vr_cutrain_params");
  CK(cudaMemcpy(p.a, dp[0], p.n * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(p.b, dp[1], p.n * 4, cudaMemcpyDeviceToHost));
  const int dsame = !memcmp(p.a, p.b, p.n * 4);
  printf("%-64s %s\n", "an update, then the parameters' device pointer read", dsame ? "ok" : "FAIL");
  if (!dsame) g_fail = 1;

  /* an update, zero_grad, then the gradient norm: zero in both */
  step(&p, &b0, 6);
  double sq[2] = {-1, -1};
  for (int i = 0; i < 2; ++i) {
    assert_ok(vr_cutrain_zero_grad(p.e[i]) == 0, "zero_grad");
    assert_ok(vr_cutrain_grad_sqnorm(p.e[i], 0, p.n, &sq[i]) == 0, "grad_sqnorm");
  }
  printf("%-64s %s (%g, %g)\n", "an update, zero_grad, grad_sqnorm: 0", sq[0] == 0 && sq[1] == 0 ? "ok" : "FAIL", sq[0],
         sq[1]);
  if (!(sq[0] == 0 && sq[1] == 0)) g_fail = 1;
  same(&p, "  then the gradients: all zero in both", get_grads, p.n);
  for (size_t i = 0; i < p.n; ++i)
    if (p.b[i] != 0.f) {
      printf("  gradient %zu is %g after zero_grad: FAIL\n", i, p.b[i]);
      g_fail = 1;
      break;
    }

  /* an update, zero_grad, a step (the deferred zeroing meets a backward) */
  step(&p, &b1, 7);
  step(&p, &b0, 8);
  same(&p, "an update, then a step: log-probs", fwd_logp, T);

  /* two updates with no forward between them (the second reads the first's parameters) */
  step(&p, &b1, 9);
  for (int i = 0; i < 2; ++i)
    assert_ok(vr_cutrain_adamw_step(p.e[i], 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.5f, 10) == 0, "adamw_step");
  same(&p, "two updates back to back: parameters", get_params, p.n);

  /* an update, then set_params over it: the engines hold what was set */
  step(&p, &b0, 11);
  for (size_t i = 0; i < p.n; ++i) p.a[i] = 0.01f * (float)((i * 2654435761u) % 1000) / 1000.f;
  memcpy(p.b, p.a, p.n * 4);
  for (int i = 0; i < 2; ++i) assert_ok(vr_cutrain_set_params(p.e[i], i ? p.b : p.a) == 0, "set_params");
  same(&p, "an update, then set_params: log-probs", fwd_logp, T);

  /* an update, a log-prob forward only, a refused backward, a step */
  step(&p, &b1, 12);
  same(&p, "an update, then a log-prob forward", fwd_logp, T);
  for (int i = 0; i < 2; ++i)
    assert_ok(vr_cutrain_backward(p.e[i], b0.glp, NULL) == VR_ERR_INVAL, "backward without a kept forward: refused");
  step(&p, &b0, 13);
  same(&p, "  then a step: parameters", get_params, p.n);
  same(&p, "  and its gradients", get_grads, p.n);

  /* the trainer's clip (vr_train_step): scale_grads, then an update without the device clip. The
   * serial engine reads its gradients between them (the factor applied in place); the overlapped
   * one does not (the factor taken by the update); then both are read. */
  for (int k = 14; k <= 15; ++k) {
    for (int i = 0; i < 2; ++i) {
      vr_cutrain_t *e = p.e[i];
      assert_ok(vr_cutrain_zero_grad(e) == 0 && vr_cutrain_forward(e, b1.ids, b1.cu, S, b1.tgt, 1.f, NULL, NULL, 1) == 0 &&
                    vr_cutrain_backward(e, b1.glp, NULL) == 0 && vr_cutrain_scale_grads(e, 0.3f) == 0,
                "a step to scale_grads");
      if (i == 0) assert_ok(vr_cutrain_get_grads(e, p.a) == 0, "get_grads");
      assert_ok(vr_cutrain_adamw_step(e, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.f, k) == 0, "adamw_step, no clip");
    }
  }
  same(&p, "scale_grads 0.3 then an update (twice): parameters", get_params, p.n);
  same(&p, "  and the gradients: scaled, read before or after the update", get_grads, p.n);
  same(&p, "  then a log-prob forward", fwd_logp, T);

  for (int i = 0; i < 2; ++i) vr_cutrain_free(p.e[i]);
  free(p.a), free(p.b), free(m0), free(v0), free(m1), free(v1);
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  model_t m;
  model_init(&m);
  vr_cutrain_desc_t bad = m.d;
  bad.optim = 3;
  vr_cutrain_t *none = NULL;
  assert_ok(vr_cutrain_create(&bad, NULL, T, 0, 0, m.d.n_floats, &none) == VR_ERR_UNSUPPORTED && !none,
            "an unknown optimizer schedule is refused");
  /* the whole buffer: the embedding's update deferred to the next forward's gather */
  run_pair(&m, 0, m.d.n_floats, "one rank");
  /* a ZeRO-1-like shard that cuts the embedding: every stage enqueued by adamw_step */
  run_pair(&m, m.d.embed + (size_t)V * C / 2 + 5, m.d.n_floats - 1000, "a shard cutting the embedding");
  printf("%s\n", g_fail ? "FAILED" : "all passed");
  return g_fail;
}
