/* test_cuda_train_backend.c: the CUDA training backend (vr_train_backend_cuda) on the training
 * fixtures (tests/fixtures/lm/: llama with GQA, qwen2 tied with qkv biases, mistral with a
 * sliding window) against transformers' float64 goldens and against the cpu engine, within
 * bf16 tolerances:
 *   log-probs and entropy (temperatures 1 and 0.7): absolute LOGP_TOL;
 *   gradients of the token-mean NLL and of the mixed log-prob / entropy objective: per tensor
 *     max |diff| / max |golden| <= GRAD_TOL (tr_grads_check), and the same against the cpu
 *     engine's gradients;
 *   log-probs after 3 AdamW steps (lr 1e-3, wd 0.1), with and without clipping: LOGP_TOL;
 *   a masked batch: unwanted tokens are 0 and the gradients match the cpu engine's;
 *   two backward passes of one batch: the same bits (no atomics anywhere);
 *   per-layer recomputation (opt.recompute): the NLL gradients against the golden and the
 *     engine without it;
 *   the critic (qwen2_critic, value head): values and the gradients of sum w * value;
 *   a random Qwen2 written here with q/k/v weights and biases adjacent (the real models' layout:
 *     one qkv GEMM with its bias epilogue) and an intermediate size the fused gate/up + SwiGLU
 *     GEMM takes (on Hopper): log-probs and gradients against the cpu engine, with and without
 *     per-layer recomputation, on the default engine and (where the fused LM head runs) with
 *     cuda_mlp "fused"; an unknown cuda_mlp refused;
 *   backward_ready (both heads): one ready call per stage, lo falling to 0, the gradients a
 *     one-rank comm copies at each call already final, the same bits as the plain backward;
 *   two backward passes accumulated against one pass of their sum; zero_grad with no backward
 *     after it: every gradient 0;
 *   a forward-only engine (opt.forward_only, the reference policy): the full engine's outputs bit
 *     for bit, less device memory, backward refused.
 * Exit code 77 without a GPU (ctest: skipped). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime.h>

#include "model_test_util.h"
#include "train_test_util.h"
#include "verl_reward/status.h"
#include "vr_log.h"

/* bf16 compute (8 significant bits). These fixtures' logits span several units (log-probs
 * down to -11), so the rounding of the final hidden state and of the LM-head weights alone moves
 * a logit by up to ~8 x 2^-8 = 0.03; the first GPU run measured max |logp diff| 0.018 (llama),
 * 0.036 (qwen2), 0.026 (mistral, temperature 0.7) against the float64 goldens. */
#define LOGP_TOL 6e-2
#define GRAD_TOL 5e-2

/* cuda_mlp, cuda_gemm_tune: vr_train_options_t's, NULL the defaults; vr_train_init's status */
static int engine_init(const vr_lm_t *lm, const char *device, int recompute, const char *cuda_mlp,
                       const char *gemm_tune, vr_train_t **t) {
  vr_train_options_t o;
  vr_train_options_init(&o);
  o.device = device;
  o.max_tokens = 1024;
  o.recompute = recompute;
  o.cuda_mlp = cuda_mlp;
  o.cuda_gemm_tune = gemm_tune;
  *t = NULL;
  return vr_train_init(lm, &o, t);
}

static vr_train_t *engine_mlp(const vr_lm_t *lm, const char *device, int recompute, const char *cuda_mlp) {
  vr_train_t *t = NULL;
  assert_int_equal(engine_init(lm, device, recompute, cuda_mlp, NULL, &t), 0);
  return t;
}

static vr_train_t *engine_opt(const vr_lm_t *lm, const char *device, int recompute) {
  return engine_mlp(lm, device, recompute, NULL);
}

static vr_train_t *engine(const vr_lm_t *lm, const char *device) { return engine_opt(lm, device, 0); }

/* Forward (keep) + backward of sum dout * logp + dent * entropy; grads into out (n_floats). */
static void grads_of(vr_train_t *t, const vr_train_batch_t *b, float tau, const float *dout, const float *dent,
                     float *out, uint32_t T) {
  float *lp = calloc(T, sizeof *lp), *ent = calloc(T, sizeof *ent);
  assert_int_equal(vr_train_forward(t, b, tau, lp, ent, 1), 0);
  assert_int_equal(vr_train_zero_grad(t), 0);
  assert_int_equal(vr_train_backward(t, dout, dent), 0);
  assert_int_equal(vr_train_get_grads(t, out, vr_train_n_floats(t)), 0);
  free(lp), free(ent);
}

/* max over tensors of max |a - b| / max |b| (b: the engine named `what`'s). */
static double grads_vs(const vr_lm_t *lm, const float *a, const float *b, const char *what) {
  const char *wname = "";
  const double worst = tr_grads_vs(lm, a, b, &wname);
  printf("  cuda vs %s gradients: worst tensor %s at %.3g (tolerance %g)\n", what, wname, worst, GRAD_TOL);
  return worst;
}

/* backward_ready through the backend table alone, with a one-rank "comm" in the callback: it
 * takes the buffer from grads() as the engine's all-reduce would and copies the range that
 * became ready, [lo, previous lo), to the host right then (cudaMemcpy on the legacy stream,
 * which the engine's non-blocking stream does not wait for: whatever is still being written
 * would be copied half done). The copies must equal the final gradients, and those the plain
 * backward's (want) bit for bit; lo must fall from the final norm's offset to 0, one call per
 * stage (head + final norm, each layer, the embeddings). */
typedef struct {
  void *st;
  float *seen;
  size_t prev;
  int calls, ordered;
  size_t first;
} ready_rec_t;

static void rec_ready(void *ctx, size_t lo) {
  ready_rec_t *r = ctx;
  if (r->calls == 0) r->first = lo;
  r->ordered &= lo < r->prev || (lo == 0 && r->prev == 0 && r->calls == 0);
  float *g = vr_train_backend_cuda.grads(r->st);
  if (g && lo < r->prev)
    assert_int_equal(cudaMemcpy(r->seen + lo, g + lo, (r->prev - lo) * sizeof *g, cudaMemcpyDeviceToHost), cudaSuccess);
  r->prev = lo < r->prev ? lo : r->prev;
  r->calls++;
}

static void check_backward_ready(const vr_lm_t *lm, const vr_train_batch_t *b, uint32_t T, const float *dout,
                                 const float *want) {
  vr_train_options_t o;
  vr_train_options_init(&o);
  o.device = "cuda";
  o.max_tokens = 1024;
  const size_t n = vr_lm_n_floats(lm);
  ready_rec_t r = {.seen = malloc(n * sizeof(float)), .prev = n, .ordered = 1};
  float *fin = malloc(n * sizeof *fin), *out = calloc(T, sizeof *out);
  assert_int_equal(vr_train_backend_cuda.init(lm, &o, 0, n, &r.st), 0);
  assert_int_equal(vr_train_backend_cuda.zero_grad(r.st), 0);
  assert_int_equal(vr_train_backend_cuda.forward(r.st, b, 1.0f, out, NULL, 1), 0);
  assert_non_null(vr_train_backend_cuda.backward_ready);
  assert_int_equal(vr_train_backend_cuda.backward_ready(r.st, dout, NULL, rec_ready, &r), 0);
  assert_int_equal(vr_train_backend_cuda.get_grads(r.st, fin), 0);
  const vr_lm_index_t *ix = vr_lm_index(lm);
  const int stages = vr_lm_config(lm)->num_layers + 2;
  const int seen_final = memcmp(r.seen, fin, n * sizeof *fin) == 0, same = memcmp(fin, want, n * sizeof *fin) == 0;
  printf("  cuda backward_ready: %d calls (want %d), lo %zu first (final norm %zu), falling %s, 0 last %s; gradients "
         "seen at ready %s, %s the plain backward's\n",
         r.calls, stages, r.first, vr_lm_tensor(lm, (size_t)ix->final_norm)->offset, r.ordered ? "yes" : "NO",
         r.prev == 0 ? "yes" : "NO", seen_final ? "final" : "NOT FINAL", same ? "same bits as" : "DIFFER from");
  assert_int_equal(r.calls, stages);
  assert_true(r.ordered && r.prev == 0);
  assert_int_equal(r.first, vr_lm_tensor(lm, (size_t)ix->final_norm)->offset);
  assert_true(seen_final && same);
  vr_train_backend_cuda.free(r.st);
  free(r.seen), free(fin), free(out);
}

/* zero_grad's lazy form (the weight GEMMs overwrite in the next backward, accumulate in later
 * ones): two backward passes accumulated (dout, then 0.5 dout) against one pass of 1.5 dout
 * within GRAD_TOL, and zero_grad with no backward after it reads all zero. */
static void check_accumulate(const vr_lm_t *lm, const vr_train_batch_t *b, uint32_t T, const float *dout) {
  const size_t n = vr_lm_n_floats(lm);
  float *g2 = malloc(n * sizeof *g2), *g1 = malloc(n * sizeof *g1), *dd = malloc(T * sizeof *dd);
  float *lp = calloc(T, sizeof *lp);
  vr_train_t *t = engine(lm, "cuda");
  for (uint32_t i = 0; i < T; i++) dd[i] = 0.5f * dout[i];
  assert_int_equal(vr_train_zero_grad(t), 0);
  assert_int_equal(vr_train_forward(t, b, 1.0f, lp, NULL, 1), 0);
  assert_int_equal(vr_train_backward(t, dout, NULL), 0);
  assert_int_equal(vr_train_forward(t, b, 1.0f, lp, NULL, 1), 0);
  assert_int_equal(vr_train_backward(t, dd, NULL), 0);
  assert_int_equal(vr_train_get_grads(t, g2, n), 0);
  for (uint32_t i = 0; i < T; i++) dd[i] = 1.5f * dout[i];
  grads_of(t, b, 1.0f, dd, NULL, g1, T);
  assert_true(grads_vs(lm, g2, g1, "cuda of one pass of the sum (two accumulated passes)") <= GRAD_TOL);
  assert_int_equal(vr_train_zero_grad(t), 0);
  assert_int_equal(vr_train_get_grads(t, g1, n), 0);
  size_t nz = 0;
  for (size_t i = 0; i < n; i++) nz += g1[i] != 0.0f;
  printf("  cuda gradients after zero_grad alone: %zu nonzero\n", nz);
  assert_int_equal(nz, 0);
  vr_train_free(t);
  free(g2), free(g1), free(dd), free(lp);
}

static void check_adamw(const vr_lm_t *lm, tr_golden_t *g, const char *key, float clip) {
  vr_train_t *t = engine(lm, "cuda");
  const size_t n = vr_train_n_floats(t);
  float *grads = malloc(n * sizeof *grads), *d = calloc(g->T, sizeof *d);
  const uint32_t N = g->T - g->n;
  for (uint32_t q = 0; q < g->n; q++)
    for (uint32_t i = g->cu[q] + 1; i < g->cu[q + 1]; i++) d[i] = -1.0f / (float)N;
  vr_adamw_t h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f};
  const cJSON *ref = cJSON_GetObjectItem(g->root, key);
  const cJSON *norms = cJSON_GetObjectItem(ref, "grad_norms");
  vr_train_batch_t b = {g->ids, g->cu, g->n, NULL};
  for (int s = 0; s < 3; s++) {
    grads_of(t, &b, 1.0f, d, NULL, grads, g->T);
    double norm = 0;
    assert_int_equal(vr_train_step(t, &h, clip, &norm), 0);
    if (clip > 0) {
      const double want = cJSON_GetArrayItem(norms, s)->valuedouble;
      printf("  cuda %s step %d: grad norm %.6g (transformers %.6g)\n", key, s + 1, norm, want);
      assert_true(fabs(norm - want) <= GRAD_TOL * want);
    }
  }
  float *lp = calloc(g->T, sizeof *lp);
  double *want = calloc(g->T, sizeof *want);
  assert_int_equal(vr_train_forward(t, &b, 1.0f, lp, NULL, 0), 0);
  tr_golden_rows(cJSON_GetObjectItem(ref, "logprobs"), g, 1, want);
  const double dd = tr_max_abs_diff(lp, want, g->T);
  printf("  cuda %s: log-probs after 3 AdamW steps, max |diff| %.3g\n", key, dd);
  assert_true(dd <= LOGP_TOL);
  free(lp), free(want), free(grads), free(d);
  vr_train_free(t);
}

static void run_lm(const char *name) {
  printf("%s\n", name);
  tr_golden_t g;
  tr_golden_load(name, &g);
  vr_lm_t *lm = tr_lm_load(name, VR_LM_HEAD_LM);
  vr_train_t *tc = engine(lm, "cuda"), *tp = engine(lm, "cpu");
  tr_check_logprobs(tc, &g, "logprobs_t1", "entropy_t1", 1.0f, LOGP_TOL, "cuda ");
  tr_check_logprobs(tc, &g, "logprobs_t07", "entropy_t07", 0.7f, LOGP_TOL, "cuda ");
  const size_t n = vr_train_n_floats(tc);
  float *gc = malloc(n * sizeof *gc), *gp = malloc(n * sizeof *gp), *gc2 = malloc(n * sizeof *gc2);
  float *d = calloc(g.T, sizeof *d), *de = calloc(g.T, sizeof *de);
  const uint32_t N = g.T - g.n;
  for (uint32_t q = 0; q < g.n; q++)
    for (uint32_t i = g.cu[q] + 1; i < g.cu[q + 1]; i++) d[i] = -1.0f / (float)N;
  vr_train_batch_t b = {g.ids, g.cu, g.n, NULL};
  /* token-mean NLL */
  grads_of(tc, &b, 1.0f, d, NULL, gc, g.T);
  assert_true(tr_grads_check(lm, gc, &g, "nll") <= GRAD_TOL);
  grads_of(tp, &b, 1.0f, d, NULL, gp, g.T);
  assert_true(grads_vs(lm, gc, gp, "cpu") <= GRAD_TOL);
  grads_of(tc, &b, 1.0f, d, NULL, gc2, g.T);
  printf("  cuda gradients of two identical passes: %s\n", memcmp(gc, gc2, n * sizeof *gc) ? "DIFFER" : "same bits");
  assert_memory_equal(gc, gc2, n * sizeof *gc);
  check_backward_ready(lm, &b, g.T, d, gc);
  /* per-layer recomputation (the LM head's logits recomputed too, where the engine above read
   * its stored bf16 log-softmax): against the golden and the engine above */
  vr_train_t *tr = engine_opt(lm, "cuda", 1);
  grads_of(tr, &b, 1.0f, d, NULL, gc2, g.T);
  vr_train_free(tr);
  assert_true(tr_grads_check(lm, gc2, &g, "nll") <= GRAD_TOL);
  assert_true(grads_vs(lm, gc2, gc, "cuda without recomputation") <= GRAD_TOL);
  check_accumulate(lm, &b, g.T, d);
  /* the mixed objective: sum a logp + b entropy at the golden's temperature */
  const cJSON *mixed = cJSON_GetObjectItem(g.root, "mixed");
  if (mixed) {
    const float tau = (float)cJSON_GetObjectItem(mixed, "temperature")->valuedouble;
    double *a = calloc(g.T, sizeof *a), *bb = calloc(g.T, sizeof *bb);
    tr_golden_rows(cJSON_GetObjectItem(mixed, "a"), &g, 1, a);
    tr_golden_rows(cJSON_GetObjectItem(mixed, "b"), &g, 1, bb);
    for (uint32_t i = 0; i < g.T; i++) d[i] = (float)a[i], de[i] = (float)bb[i];
    grads_of(tc, &b, tau, d, de, gc, g.T);
    assert_true(tr_grads_check(lm, gc, &g, "mixed") <= GRAD_TOL);
    grads_of(tp, &b, tau, d, de, gp, g.T);
    assert_true(grads_vs(lm, gc, gp, "cpu") <= GRAD_TOL);
    free(a), free(bb);
  }
  /* a mask: the second half of every sequence only */
  uint8_t *mask = calloc(g.T, 1);
  for (uint32_t q = 0; q < g.n; q++) {
    const uint32_t a0 = g.cu[q], e0 = g.cu[q + 1];
    for (uint32_t i = a0 + (e0 - a0) / 2 + 1; i < e0; i++) mask[i] = 1, d[i] = -0.1f, de[i] = 0.01f;
  }
  vr_train_batch_t bm = {g.ids, g.cu, g.n, mask};
  float *lp = calloc(g.T, sizeof *lp);
  assert_int_equal(vr_train_forward(tc, &bm, 1.0f, lp, NULL, 0), 0);
  int zeros_ok = 1;
  for (uint32_t i = 0; i < g.T; i++) zeros_ok &= mask[i] || lp[i] == 0.0f;
  printf("  cuda masked forward: unwanted tokens %s\n", zeros_ok ? "are 0" : "NOT 0");
  assert_true(zeros_ok);
  grads_of(tc, &bm, 1.0f, d, de, gc, g.T);
  grads_of(tp, &bm, 1.0f, d, de, gp, g.T);
  assert_true(grads_vs(lm, gc, gp, "cpu") <= GRAD_TOL);
  vr_train_free(tc);
  vr_train_free(tp);
  check_adamw(lm, &g, "adamw", 0.0f);
  check_adamw(lm, &g, "adamw_clip", 0.05f);
  free(gc), free(gp), free(gc2), free(d), free(de), free(mask), free(lp);
  vr_lm_free(lm);
  tr_golden_free(&g);
}

/* The critic: values per token and the gradients of sum w * value, against the golden and the
 * cpu engine. */
static void test_critic(void **state) {
  (void)state;
  tr_golden_t g;
  tr_golden_load("qwen2_critic", &g);
  vr_lm_t *lm = tr_lm_load("qwen2_critic", VR_LM_HEAD_VALUE);
  vr_train_t *tc = engine(lm, "cuda"), *tp = engine(lm, "cpu");
  vr_train_batch_t b = {g.ids, g.cu, g.n, NULL};
  float *val = calloc(g.T, sizeof *val), *dw = calloc(g.T, sizeof *dw);
  double *want = calloc(g.T, sizeof *want), *w = calloc(g.T, sizeof *w);
  assert_int_equal(vr_train_forward(tc, &b, 1.0f, val, NULL, 0), 0);
  tr_golden_rows(cJSON_GetObjectItem(g.root, "values"), &g, 0, want);
  const double d = tr_max_abs_diff(val, want, g.T);
  printf("qwen2_critic\n  cuda values: max |diff| %.3g (tolerance %g)\n", d, LOGP_TOL);
  assert_true(d <= LOGP_TOL);
  tr_golden_rows(cJSON_GetObjectItem(g.root, "w"), &g, 0, w);
  for (uint32_t i = 0; i < g.T; i++) dw[i] = (float)w[i];
  const size_t n = vr_train_n_floats(tc);
  float *gc = malloc(n * sizeof *gc), *gp = malloc(n * sizeof *gp);
  grads_of(tc, &b, 1.0f, dw, NULL, gc, g.T);
  assert_true(tr_grads_check(lm, gc, &g, "value") <= GRAD_TOL);
  check_backward_ready(lm, &b, g.T, dw, gc);
  grads_of(tp, &b, 1.0f, dw, NULL, gp, g.T);
  assert_true(grads_vs(lm, gc, gp, "cpu") <= GRAD_TOL);
  check_accumulate(lm, &b, g.T, dw); /* the value head's zeroed parts: score, the untied embedding */
  free(val), free(dw), free(want), free(w), free(gc), free(gp);
  vr_train_free(tc);
  vr_train_free(tp);
  vr_lm_free(lm);
  tr_golden_free(&g);
}

/* Device memory an engine takes (cudaMemGetInfo before and after its init; *t gets it). */
static size_t used_by(const vr_lm_t *lm, int forward_only, vr_train_t **t) {
  size_t f0 = 0, f1 = 0, total = 0;
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  assert_int_equal(cudaMemGetInfo(&f0, &total), cudaSuccess);
  vr_train_options_t o;
  vr_train_options_init(&o);
  o.device = "cuda";
  o.max_tokens = 1024;
  o.forward_only = forward_only;
  *t = NULL;
  assert_int_equal(vr_train_init(lm, &o, t), 0);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  assert_int_equal(cudaMemGetInfo(&f1, &total), cudaSuccess);
  return f0 > f1 ? f0 - f1 : 0;
}

/* A forward-only engine (the reference policy): the same bits as the full engine's forward at
 * two temperatures (its activations shared by every layer, two residual streams), less device
 * memory (no gradients, moments or backward scratch), and a backward refused. */
static void forward_only_case(const char *name, vr_lm_head_t head) {
  tr_golden_t g;
  tr_golden_load(name, &g);
  vr_lm_t *lm = tr_lm_load(name, head);
  vr_train_t *full = NULL, *fo = NULL;
  const size_t u_full = used_by(lm, 0, &full), u_fo = used_by(lm, 1, &fo);
  vr_train_batch_t b = {g.ids, g.cu, g.n, NULL};
  float *a = calloc(g.T, sizeof *a), *ea = calloc(g.T, sizeof *ea), *c = calloc(g.T, sizeof *c),
        *ec = calloc(g.T, sizeof *ec);
  const float taus[2] = {1.0f, 0.7f};
  int same = 1;
  for (int k = 0; k < 2; k++) {
    memset(c, 0xff, g.T * sizeof *c), memset(ec, 0xff, g.T * sizeof *ec);
    assert_int_equal(vr_train_forward(full, &b, taus[k], a, ea, 0), 0);
    assert_int_equal(vr_train_forward(fo, &b, taus[k], c, ec, 0), 0);
    same &= memcmp(a, c, g.T * sizeof *a) == 0;
    if (head == VR_LM_HEAD_LM) same &= memcmp(ea, ec, g.T * sizeof *ea) == 0;
  }
  printf("%s forward-only: outputs %s the full engine's; device memory %.1f MiB vs %.1f MiB\n", name,
         same ? "equal" : "DIFFER from", u_fo / 1048576.0, u_full / 1048576.0);
  assert_true(same);
  assert_true(u_fo < u_full);
  float *d = calloc(g.T, sizeof *d);
  assert_int_equal(vr_train_forward(fo, &b, 1.0f, c, NULL, 1), VR_ERR_UNSUPPORTED);
  assert_int_equal(vr_train_backward(fo, d, NULL), VR_ERR_UNSUPPORTED);
  free(a), free(ea), free(c), free(ec), free(d);
  vr_train_free(fo);
  vr_train_free(full);
  vr_lm_free(lm);
  tr_golden_free(&g);
}

static void test_forward_only(void **state) {
  (void)state;
  forward_only_case("llama_lm", VR_LM_HEAD_LM);
  forward_only_case("qwen2_lm", VR_LM_HEAD_LM);
  forward_only_case("mistral_lm", VR_LM_HEAD_LM);
  forward_only_case("qwen2_critic", VR_LM_HEAD_VALUE);
}

/* A random Qwen2 checkpoint written here at a shape whose q/k/v weights and biases are each
 * adjacent in vr_lm's layout (every size a multiple of VR_LM_ALIGN), as in the real Qwen2 / 2.5
 * models, so the engine runs qkv as one GEMM with the bias in its epilogue and the bias gradient
 * as one column sum (the qwen2_lm fixture's 16-float biases are padded apart: split path): its
 * log-probs and NLL gradients against the cpu engine's. */
static void put_tensor(FILE *hf, FILE *df, size_t *at, int *first, const char *name, int d0, int d1, uint64_t *z,
                       float scale) {
  const size_t n = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
  fprintf(hf, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d%s%.0d],\"data_offsets\":[%zu,%zu]}", *first ? "" : ",", name,
          d0, d1 > 0 ? "," : "", d1 > 0 ? d1 : 0, *at, *at + n * 4);
  *first = 0;
  for (size_t i = 0; i < n; i++) {
    *z = *z * 6364136223846793005ull + 1442695040888963407ull;
    const float v = scale < 0 ? 1.0f : scale * ((float)(*z >> 40) / 8388608.0f - 1.0f);
    fwrite(&v, 4, 1, df);
  }
  *at += n * 4;
}

static void test_qwen2_fused(void **state) {
  (void)state;
  char dir[1300], path[1400];
  mt_tmpdir(dir, sizeof dir);
  const int C = 128, H = 4, KV = 2, D = 32, F = 256, L = 2, V = 160; /* F: two 128-column MLP tiles */
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "{\"architectures\":[\"Qwen2ForCausalLM\"],\"model_type\":\"qwen2\",\"hidden_size\":%d,"
          "\"num_attention_heads\":%d,\"num_key_value_heads\":%d,\"intermediate_size\":%d,\"num_hidden_layers\":%d,"
          "\"vocab_size\":%d,\"max_position_embeddings\":256,\"rms_norm_eps\":1e-6,\"rope_theta\":1000000.0,"
          "\"tie_word_embeddings\":true,\"hidden_act\":\"silu\",\"dtype\":\"float32\"}",
          C, H, KV, F, L, V);
  fclose(f);
  char hname[1400], dname[1400];
  snprintf(hname, sizeof hname, "%s/h.json", dir);
  snprintf(dname, sizeof dname, "%s/d.bin", dir);
  FILE *hf = fopen(hname, "w+"), *df = fopen(dname, "w+");
  assert_true(hf && df);
  size_t at = 0;
  int first = 1;
  uint64_t z = 99;
  fputc('{', hf);
  put_tensor(hf, df, &at, &first, "model.embed_tokens.weight", V, C, &z, 0.05f);
  for (int l = 0; l < L; l++) {
    char nm[128];
    const struct { const char *what; int d0, d1; float scale; } t[] = {
        {"self_attn.q_proj.weight", H * D, C, 0.1f}, {"self_attn.q_proj.bias", H * D, 0, 0.1f},
        {"self_attn.k_proj.weight", KV * D, C, 0.1f}, {"self_attn.k_proj.bias", KV * D, 0, 0.1f},
        {"self_attn.v_proj.weight", KV * D, C, 0.1f}, {"self_attn.v_proj.bias", KV * D, 0, 0.1f},
        {"self_attn.o_proj.weight", C, H * D, 0.1f},  {"mlp.gate_proj.weight", F, C, 0.1f},
        {"mlp.up_proj.weight", F, C, 0.1f},           {"mlp.down_proj.weight", C, F, 0.1f},
        {"input_layernorm.weight", C, 0, -1.0f},      {"post_attention_layernorm.weight", C, 0, -1.0f}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
      snprintf(nm, sizeof nm, "model.layers.%d.%s", l, t[i].what);
      put_tensor(hf, df, &at, &first, nm, t[i].d0, t[i].d1, &z, t[i].scale);
    }
  }
  put_tensor(hf, df, &at, &first, "model.norm.weight", C, 0, &z, -1.0f);
  fputc('}', hf);
  const long hl = ftell(hf);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  FILE *out = fopen(path, "wb");
  assert_non_null(out);
  const uint64_t hlen = (uint64_t)hl;
  fwrite(&hlen, 8, 1, out);
  char *buf = malloc(at > (size_t)hl ? at : (size_t)hl);
  rewind(hf), rewind(df);
  assert_int_equal(fread(buf, 1, (size_t)hl, hf), (size_t)hl);
  fwrite(buf, 1, (size_t)hl, out);
  assert_int_equal(fread(buf, 1, at, df), at);
  fwrite(buf, 1, at, out);
  fclose(out), fclose(hf), fclose(df), free(buf);
  vr_lm_t *lm = NULL;
  assert_int_equal(vr_lm_load(dir, NULL, &lm), 0);
  const vr_lm_layer_index_t *ix = &vr_lm_index(lm)->layers[0];
  const size_t qo = vr_lm_tensor(lm, (size_t)ix->q_w)->offset, ko = vr_lm_tensor(lm, (size_t)ix->k_w)->offset,
               qbo = vr_lm_tensor(lm, (size_t)ix->q_b)->offset, kbo = vr_lm_tensor(lm, (size_t)ix->k_b)->offset;
  printf("qwen2 (written here, hidden %d): q/k weights adjacent %s, q/k biases adjacent %s\n", C,
         qo + (size_t)H * D * C == ko ? "yes" : "NO", qbo + (size_t)H * D == kbo ? "yes" : "NO");
  assert_true(qo + (size_t)H * D * C == ko && qbo + (size_t)H * D == kbo);
  /* two sequences of random ids */
  uint32_t cu[3] = {0, 37, 80};
  int32_t ids[80];
  for (int i = 0; i < 80; i++) z = z * 6364136223846793005ull + 1442695040888963407ull, ids[i] = (int32_t)((z >> 33) % V);
  vr_train_batch_t b = {ids, cu, 2, NULL};
  float d[80], lc[80], lp[80], ec[80], ep[80];
  for (int i = 0; i < 80; i++) d[i] = (i == 0 || i == 37) ? 0.f : -1.0f / 78.f;
  mt_log_start();
  vr_log_set_level(VR_LOG_INFO); /* the engine's layout line */
  vr_train_t *tc = engine(lm, "cuda");
  const int fused = strstr(mt_log_text(), "qkv fused") != NULL;
  /* the gate/up + SwiGLU path the engine chose (the fused Hopper GEMM is opt-in: cuda_mlp "fused",
   * checked below where it runs); on an sm_90a build on Hopper the LM head is the fused GEMM */
  const int mlp_fused = strstr(mt_log_text(), "gate/up + SwiGLU fused") != NULL,
            lm_fused = strstr(mt_log_text(), "LM-head forward fused") != NULL;
  mt_log_stop();
  vr_log_set_level(VR_LOG_INFO);
  printf("  cuda engine: qkv %s, gate/up + SwiGLU %s\n", fused ? "fused (one GEMM)" : "NOT FUSED",
         mlp_fused ? "fused (one GEMM)" : "cuBLASLt + kernel");
  assert_true(fused);
  vr_train_t *tp = engine(lm, "cpu");
  assert_int_equal(vr_train_forward(tc, &b, 1.0f, lc, ec, 0), 0);
  assert_int_equal(vr_train_forward(tp, &b, 1.0f, lp, ep, 0), 0);
  double md = 0, nll = 0;
  for (int i = 0; i < 80; i++) {
    assert_true(isfinite(lc[i]) && isfinite(ec[i]) && isfinite(lp[i]) && isfinite(ep[i]));
    md = fmax(md, fmax(fabs((double)lc[i] - lp[i]), fabs((double)ec[i] - ep[i])));
    nll -= d[i] != 0.f ? lp[i] / 78.0 : 0.0;
  }
  printf("  cpu NLL %.4f (ln V = %.4f)\n", nll, log((double)V));
  assert_true(nll > 0.5 * log((double)V) && nll < 2 * log((double)V));
  printf("  cuda vs cpu log-probs / entropy: max |diff| %.3g (tolerance %g)\n", md, LOGP_TOL);
  assert_true(md <= LOGP_TOL);
  const size_t n = vr_lm_n_floats(lm);
  float *gc = malloc(n * sizeof *gc), *gp = malloc(n * sizeof *gp);
  grads_of(tc, &b, 1.0f, d, NULL, gc, 80);
  grads_of(tp, &b, 1.0f, d, NULL, gp, 80);
  assert_true(grads_vs(lm, gc, gp, "cpu") <= GRAD_TOL);
  vr_train_t *tr = engine_opt(lm, "cuda", 1); /* per-layer recomputation: gu written by the recomputation */
  grads_of(tr, &b, 1.0f, d, NULL, gc, 80);
  assert_true(grads_vs(lm, gc, gp, "cpu (recomputing engine)") <= GRAD_TOL);
  vr_train_free(tr);
  /* cuda_gemm_tune "same-bits": the GEMMs timed on their first calls (the forward's and the
   * backward's, in-place weight-gradient accumulations among them) give the untuned engine's
   * log-probs and gradients bit for bit */
  {
    vr_train_t *tt = NULL;
    assert_int_equal(engine_init(lm, "cuda", 0, NULL, "same-bits", &tt), 0);
    float lt[80], et[80], l0[80], e0[80];
    assert_int_equal(vr_train_forward(tc, &b, 1.0f, l0, e0, 0), 0);
    assert_int_equal(vr_train_forward(tt, &b, 1.0f, lt, et, 0), 0);
    float *gt = malloc(n * sizeof *gt);
    grads_of(tc, &b, 1.0f, d, NULL, gc, 80);
    grads_of(tt, &b, 1.0f, d, NULL, gt, 80);
    const int same_lp = !memcmp(lt, l0, sizeof lt) && !memcmp(et, e0, sizeof et);
    const int same_g = !memcmp(gt, gc, n * sizeof *gt);
    printf("  cuda engine, cuda_gemm_tune same-bits: log-probs %s, gradients %s the untuned engine's\n",
           same_lp ? "equal to" : "DIFFER from", same_g ? "equal to" : "DIFFER from");
    assert_true(same_lp && same_g);
    free(gt);
    vr_train_free(tt);
  }
  /* cuda_mlp "fused": where the fused LM head runs (an sm_90a build on Hopper) this model's
   * gate/up projection is the Hopper GEMM with SwiGLU in its epilogue, and its forward, backward
   * (its gu) and recomputation go through it */
  for (int rec = 0; lm_fused && rec < 2; ++rec) {
    mt_log_start();
    vr_log_set_level(VR_LOG_INFO);
    vr_train_t *tf = engine_mlp(lm, "cuda", rec, "fused");
    const int took = strstr(mt_log_text(), "gate/up + SwiGLU fused") != NULL;
    mt_log_stop();
    vr_log_set_level(VR_LOG_INFO);
    printf("  cuda engine, cuda_mlp fused%s: gate/up + SwiGLU %s\n", rec ? ", recomputing" : "",
           took ? "fused (one GEMM)" : "NOT FUSED");
    assert_true(took);
    float lf[80], ef[80];
    assert_int_equal(vr_train_forward(tf, &b, 1.0f, lf, ef, 0), 0);
    double mf = 0;
    for (int i = 0; i < 80; i++) {
      assert_true(isfinite(lf[i]) && isfinite(ef[i]));
      mf = fmax(mf, fmax(fabs((double)lf[i] - lp[i]), fabs((double)ef[i] - ep[i])));
    }
    printf("  cuda (fused MLP) vs cpu log-probs / entropy: max |diff| %.3g (tolerance %g)\n", mf, LOGP_TOL);
    assert_true(mf <= LOGP_TOL);
    /* a forward kept for backward writes gu, one not kept does not: the same outputs bit for bit
     * (the PPO ratio of old log-probs against the update's starts at 1) */
    float lk[80], ek[80];
    assert_int_equal(vr_train_forward(tf, &b, 1.0f, lk, ek, 1), 0);
    const int kept_same = !memcmp(lk, lf, sizeof lk) && !memcmp(ek, ef, sizeof ek);
    printf("  cuda (fused MLP): kept forward == forward not kept, bit for bit: %s\n", kept_same ? "yes" : "NO");
    assert_true(kept_same);
    assert_int_equal(vr_train_zero_grad(tf), 0);
    assert_int_equal(vr_train_backward(tf, d, NULL), 0);
    assert_int_equal(vr_train_get_grads(tf, gc, n), 0);
    assert_true(grads_vs(lm, gc, gp, rec ? "cpu (fused MLP, recomputing engine)" : "cpu (fused MLP)") <= GRAD_TOL);
    vr_train_free(tf);
  }
  {
    vr_train_t *bad = NULL;
    assert_int_equal(engine_init(lm, "cuda", 0, "fast", NULL, &bad), VR_ERR_INVAL);
    assert_null(bad);
    assert_int_equal(engine_init(lm, "cuda", 0, NULL, "yes", &bad), VR_ERR_INVAL);
    assert_null(bad);
  }
  check_accumulate(lm, &b, 80, d);
  /* a forward-only engine (the reference policy) at this hidden size: on an sm_90a build on Hopper
   * its LM head is the fused GEMM with only that kernel's workspace allocated; the same bits as
   * the full engine's forward */
  mt_log_start();
  vr_log_set_level(VR_LOG_INFO);
  vr_train_t *fo = NULL;
  (void)used_by(lm, 1, &fo);
  const int fo_fused = strstr(mt_log_text(), "LM-head forward fused") != NULL;
  mt_log_stop();
  vr_log_set_level(VR_LOG_INFO);
  float lf[80], ef[80];
  assert_int_equal(vr_train_forward(tc, &b, 0.8f, lc, ec, 0), 0);
  assert_int_equal(vr_train_forward(fo, &b, 0.8f, lf, ef, 0), 0);
  const int same = memcmp(lf, lc, sizeof lf) == 0 && memcmp(ef, ec, sizeof ef) == 0;
  printf("  forward-only cuda engine (LM head %s): outputs %s the full engine's\n", fo_fused ? "fused" : "cuBLASLt",
         same ? "equal to" : "DIFFER from");
  assert_true(same);
  vr_train_free(fo);
  vr_train_free(tc), vr_train_free(tp);
  free(gc), free(gp);
  vr_lm_free(lm);
  mt_tmpdir_remove(dir);
}

static void test_llama(void **state) { (void)state, run_lm("llama_lm"); }
static void test_qwen2(void **state) { (void)state, run_lm("qwen2_lm"); }
static void test_mistral(void **state) { (void)state, run_lm("mistral_lm"); }

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_llama),
      cmocka_unit_test(test_qwen2),
      cmocka_unit_test(test_mistral),
      cmocka_unit_test(test_critic),
      cmocka_unit_test(test_qwen2_fused),
      cmocka_unit_test(test_forward_only),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
