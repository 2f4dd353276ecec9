/* test_train_ops.c: finite-difference checks of every backward op of the cpu training backend
 * (trainer/cpu/vr_tcpu_ops.h) on tiny shapes. Each op's output y feeds L = sum r . y (r random,
 * L summed in double); the analytic gradient of every input must match central differences
 * (step 1e-2) within 1e-3 of the tensor's largest gradient. The chunked LM head also equals a
 * dense log-softmax computed in double. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "vr_tcpu_ops.h"
#include "vr_test_seed.h"

#define H_STEP 1e-2f
#define FD_TOL 1e-3

static uint64_t g_rng;

static float frand(void) { return (float)vr_test_rand(&g_rng, 2000001) / 1000000.0f - 1.0f; }
static float *rnd(size_t n) {
  float *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = frand();
  return p;
}

static vr_tcpu_ctx_t ctx(int threads) {
  vr_tcpu_ctx_t c = {vr_cpu_gemm_best(), threads, NULL, 64, NULL, 1 << 16};
  c.pack = aligned_alloc(64, (size_t)threads * VR_CPU_GEMM_PACK_FLOATS(64) * sizeof(float));
  c.tmp = malloc(c.tmp_floats * sizeof(float));
  return c;
}
static void ctx_free(vr_tcpu_ctx_t *c) { free(c->pack), free(c->tmp); }

/* The op under test: computes L (double) from the current inputs. */
typedef double (*loss_fn)(void *env);

/* Compares analytic gradient an (n) of input x (n) with central differences of f. */
static void fd_check(const char *what, float *x, const float *an, size_t n, loss_fn f, void *env) {
  double mx = 0, md = 0;
  for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(an[i]));
  for (size_t i = 0; i < n; i++) {
    float x0 = x[i];
    x[i] = x0 + H_STEP;
    double lp = f(env);
    x[i] = x0 - H_STEP;
    double lm = f(env);
    x[i] = x0;
    double fd = (lp - lm) / (2.0 * H_STEP);
    md = fmax(md, fabs(fd - an[i]));
  }
  printf("  %-28s max |grad| %.3g, max |fd - grad| %.3g\n", what, mx, md);
  assert_true(mx > 0);
  assert_true(md <= FD_TOL * mx);
}

static double dot(const float *r, const float *y, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)r[i] * y[i];
  return s;
}

/* ---- linear ---- */
typedef struct { vr_tcpu_ctx_t c; float *x, *w, *b, *y, *r; int T, in, out; } lin_env;
static double lin_loss(void *e) {
  lin_env *v = e;
  vr_tcpu_linear(&v->c, v->x, v->w, v->b, v->T, v->in, v->out, v->y);
  return dot(v->r, v->y, (size_t)v->T * v->out);
}
static void test_linear(void **state) {
  (void)state;
  lin_env v = {ctx(2), NULL, NULL, NULL, NULL, NULL, 5, 7, 3};
  v.x = rnd(35), v.w = rnd(21), v.b = rnd(3), v.y = malloc(15 * sizeof(float)), v.r = rnd(15);
  float *dx = calloc(35, sizeof(float)), *gw = calloc(21, sizeof(float)), *gb = calloc(3, sizeof(float));
  vr_tcpu_linear_bwd(&v.c, v.x, v.w, v.r, v.T, v.in, v.out, dx, 0, gw, gb);
  fd_check("linear dx", v.x, dx, 35, lin_loss, &v);
  fd_check("linear dW", v.w, gw, 21, lin_loss, &v);
  fd_check("linear db", v.b, gb, 3, lin_loss, &v);
  float *dx2 = calloc(35, sizeof(float));
  for (int i = 0; i < 35; i++) dx2[i] = 1.0f;
  vr_tcpu_linear_bwd(&v.c, v.x, v.w, v.r, v.T, v.in, v.out, dx2, 1, gw, gb); /* add_dx adds */
  for (int i = 0; i < 35; i++) assert_float_equal(dx2[i], dx[i] + 1.0f, 1e-6);
  free(v.x), free(v.w), free(v.b), free(v.y), free(v.r), free(dx), free(dx2), free(gw), free(gb);
  ctx_free(&v.c);
}

/* ---- rmsnorm ---- */
typedef struct { float *x, *w, *y, *rs, *r; int T, C; } rms_env;
static double rms_loss(void *e) {
  rms_env *v = e;
  vr_tcpu_rmsnorm(v->x, v->w, v->T, v->C, 1e-5f, v->y, v->rs);
  return dot(v->r, v->y, (size_t)v->T * v->C);
}
static void test_rmsnorm(void **state) {
  (void)state;
  rms_env v = {rnd(24), rnd(6), malloc(24 * sizeof(float)), malloc(4 * sizeof(float)), rnd(24), 4, 6};
  float *dx = calloc(24, sizeof(float)), *gw = calloc(6, sizeof(float));
  rms_loss(&v);
  vr_tcpu_rmsnorm_bwd(v.x, v.w, v.rs, v.r, v.T, v.C, dx, gw);
  fd_check("rmsnorm dx", v.x, dx, 24, rms_loss, &v);
  fd_check("rmsnorm dw", v.w, gw, 6, rms_loss, &v);
  free(v.x), free(v.w), free(v.y), free(v.rs), free(v.r), free(dx), free(gw);
}

/* ---- rope: the backward is the transpose of the rotation ---- */
typedef struct { float *x, *y, *r, *cs, *sn; const uint32_t *cu; } rope_env;
static double rope_loss(void *e) {
  rope_env *v = e;
  memcpy(v->y, v->x, 5 * 2 * 4 * sizeof(float));
  vr_tcpu_rope(v->y, 2, 4, v->cu, 2, v->cs, v->sn, 0);
  return dot(v->r, v->y, 40);
}
static void test_rope(void **state) {
  (void)state;
  static const uint32_t cu[] = {0, 2, 5};
  rope_env v = {rnd(40), malloc(40 * sizeof(float)), rnd(40), malloc(8 * 2 * sizeof(float)),
                malloc(8 * 2 * sizeof(float)), cu};
  for (int p = 0; p < 8; p++)
    for (int i = 0; i < 2; i++) v.cs[p * 2 + i] = cosf(p * (i + 1) * 0.7f), v.sn[p * 2 + i] = sinf(p * (i + 1) * 0.7f);
  float *d = malloc(40 * sizeof(float));
  memcpy(d, v.r, 40 * sizeof(float));
  vr_tcpu_rope(d, 2, 4, cu, 2, v.cs, v.sn, 1);
  fd_check("rope dx", v.x, d, 40, rope_loss, &v);
  free(v.x), free(v.y), free(v.r), free(v.cs), free(v.sn), free(d);
}

/* ---- swiglu ---- */
typedef struct { float *g, *u, *a, *r; } sw_env;
static double sw_loss(void *e) {
  sw_env *v = e;
  vr_tcpu_swiglu(v->g, v->u, 12, v->a);
  return dot(v->r, v->a, 12);
}
static void test_swiglu(void **state) {
  (void)state;
  sw_env v = {rnd(12), rnd(12), malloc(12 * sizeof(float)), rnd(12)};
  for (int i = 0; i < 12; i++) v.g[i] *= 3.0f;
  float *dg = malloc(12 * sizeof(float)), *du = malloc(12 * sizeof(float));
  vr_tcpu_swiglu_bwd(v.g, v.u, v.r, 12, dg, du);
  fd_check("swiglu dgate", v.g, dg, 12, sw_loss, &v);
  fd_check("swiglu dup", v.u, du, 12, sw_loss, &v);
  free(v.g), free(v.u), free(v.a), free(v.r), free(dg), free(du);
}

/* ---- attention (GQA, two sequences, with and without a window) ---- */
enum { AH = 4, AKV = 2, AD = 4, AT = 12 };
typedef struct { vr_tcpu_ctx_t c; float *q, *k, *v, *o, *lse, *r, *s; const uint32_t *cu; int window; } att_env;
static double att_loss(void *e) {
  att_env *a = e;
  vr_tcpu_attention(&a->c, a->q, a->k, a->v, AH, AKV, AD, a->window, a->cu, 2, a->o, a->lse, a->s);
  return dot(a->r, a->o, AT * AH * AD);
}
static void attention_case(int window, int threads) {
  static const uint32_t cu[] = {0, 5, 12};
  att_env a = {ctx(threads), rnd(AT * AH * AD), rnd(AT * AKV * AD), rnd(AT * AKV * AD),
               malloc(AT * AH * AD * sizeof(float)), malloc(AT * AH * sizeof(float)), rnd(AT * AH * AD), NULL, cu,
               window};
  for (int i = 0; i < AT * AH * AD; i++) a.q[i] *= 2.0f; /* peaked softmax rows */
  a.s = malloc(vr_tcpu_attn_scratch(cu, 2, threads, AD) * sizeof(float));
  att_loss(&a);
  float *dq = malloc(AT * AH * AD * sizeof(float)), *dk = malloc(AT * AKV * AD * sizeof(float)),
        *dv = malloc(AT * AKV * AD * sizeof(float));
  vr_tcpu_attention_bwd(&a.c, a.q, a.k, a.v, a.o, a.lse, a.r, AH, AKV, AD, window, cu, 2, dq, dk, dv, a.s);
  printf(" window %d, %d thread(s)\n", window, threads);
  fd_check("attention dq", a.q, dq, AT * AH * AD, att_loss, &a);
  fd_check("attention dk", a.k, dk, AT * AKV * AD, att_loss, &a);
  fd_check("attention dv", a.v, dv, AT * AKV * AD, att_loss, &a);
  free(a.q), free(a.k), free(a.v), free(a.o), free(a.lse), free(a.r), free(a.s), free(dq), free(dk), free(dv);
  ctx_free(&a.c);
}
static void test_attention(void **state) {
  (void)state;
  attention_case(0, 1);
  attention_case(3, 2);
}

/* ---- LM head: log-probs and entropy at a temperature, chunked ---- */
enum { LR = 5, LC = 6, LV = 13, LCHUNK = 5 };
typedef struct { vr_tcpu_ctx_t c; float *h, *W, *lp, *ent, *lse, *z, *a, *b; int32_t tgt[LR]; float tau; } lm_env;
static double lm_loss(void *e) {
  lm_env *v = e;
  vr_tcpu_lmhead(&v->c, v->h, v->tgt, LR, LC, v->W, LV, v->tau, LCHUNK, v->lp, v->ent, v->lse, v->z);
  return dot(v->a, v->lp, LR) + dot(v->b, v->ent, LR);
}
static void test_lmhead(void **state) {
  (void)state;
  lm_env v = {ctx(2), rnd(LR * LC), rnd(LV * LC), malloc(LR * 4), malloc(LR * 4), malloc(LR * 4),
              malloc(VR_TCPU_LM_ROWS * LCHUNK * sizeof(float)), rnd(LR), rnd(LR), {0, 4, 5, 9, 12}, 0.7f};
  for (int i = 0; i < LV * LC; i++) v.W[i] *= 2.0f;
  lm_loss(&v);
  /* against a dense log-softmax in double */
  for (int r = 0; r < LR; r++) {
    double z[LV], mx = -1e300, s = 0, ent = 0;
    for (int j = 0; j < LV; j++) {
      double acc = 0;
      for (int i = 0; i < LC; i++) acc += (double)v.h[r * LC + i] * v.W[j * LC + i];
      z[j] = acc / v.tau;
      mx = fmax(mx, z[j]);
    }
    for (int j = 0; j < LV; j++) s += exp(z[j] - mx);
    double lse = mx + log(s);
    for (int j = 0; j < LV; j++) ent -= exp(z[j] - lse) * (z[j] - lse);
    assert_true(fabs(v.lp[r] - (z[v.tgt[r]] - lse)) < 1e-5);
    assert_true(fabs(v.ent[r] - ent) < 1e-5);
  }
  float *dh = malloc(LR * LC * sizeof(float)), *gW = calloc(LV * LC, sizeof(float));
  vr_tcpu_lmhead_bwd(&v.c, v.h, v.tgt, LR, LC, v.W, LV, v.tau, LCHUNK, v.lse, v.ent, v.a, v.b, dh, gW, v.z);
  fd_check("lm head dh", v.h, dh, LR * LC, lm_loss, &v);
  fd_check("lm head dW", v.W, gW, LV * LC, lm_loss, &v);
  free(v.h), free(v.W), free(v.lp), free(v.ent), free(v.lse), free(v.z), free(v.a), free(v.b), free(dh), free(gW);
  ctx_free(&v.c);
}

int main(void) {
  g_rng = vr_test_seed("test_train_ops", 20);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_linear),  cmocka_unit_test(test_rmsnorm),   cmocka_unit_test(test_rope),
      cmocka_unit_test(test_swiglu),  cmocka_unit_test(test_attention), cmocka_unit_test(test_lmhead),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
