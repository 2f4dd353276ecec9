/* test_cuda_train_kernels.c: every kernel of the CUDA training engine (trainer/cuda/,
 * vr_cutrain_ops.h) against a plain host computation in double precision on pseudo-random
 * inputs (fixed seed unless VR_TEST_SEED is set: tests/common/vr_test_seed.h), on small and
 * medium shapes; the backward formulas additionally by central finite differences on tiny
 * shapes (of the fp32 GPU forward where one exists: RMSNorm, log-softmax; of the double host
 * forward otherwise: SwiGLU, attention, whose GPU forwards are bf16).
 *
 * Tolerances (relative error norm ||got - ref|| / ||ref||, check_rel):
 *   fp32 kernels (RMSNorm backward, column sums, embedding backward, sum of squares, AdamW,
 *     log-softmax statistics): 1e-5 (summation order and __expf only);
 *   bf16 outputs of fp32 arithmetic (SwiGLU, RoPE backward, dlogits): 8e-3 (half a bf16 ulp is
 *     2^-9 = 2e-3 relative per element);
 *   fused LM-head backward (bf16 dlogits into the GEMMs): 1e-2; attention forward 1e-2 and
 *     backward 2e-2 (bf16 P, dS and operands, as FlashAttention-2's own tests allow);
 *   finite differences: 2e-3 of the fp32 GPU forwards (h = 1e-2), 1e-6 of the host forwards.
 * Value head: 1e-5 (fp32).
 * Reductions are checked bit-for-bit across two runs (the determinism the headers promise).
 * Exit code: 0 pass, 1 fail, 77 no GPU (ctest: skipped). */
#include "vr_cutrain_ops.h"
#include "vr_test_seed.h"
#include "cuda_test_util.h"

static void dfree(void *p) { CK(cudaFree(p)); }

static double *dcalloc(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

/* check_rel of a bf16 device-produced array. */
static void check_rel_bf(const char *what, const double *ref, const uint16_t *got, size_t n, double tol) {
  float *f = bf_arr_to_f(got, n);
  check_rel(what, ref, f, n, tol);
  free(f);
}

static void check_same_bits(const char *what, const void *a, const void *b, size_t n) {
  const int ok = memcmp(a, b, n) == 0;
  printf("%-4s %-58s (two runs, %zu bytes)\n", ok ? "ok" : "FAIL", what, n);
  if (!ok) g_fail = 1;
}

/* ------------------------------------------------------------ RMSNorm backward */

static void test_rmsnorm_bwd(int T, int C) {
  const float eps = 1e-6f;
  const size_t n = (size_t)T * C;
  float *x = rand_f(n, -2, 2), *w = rand_f(C, 0.5f, 1.5f), *dy = rand_f(n, -1, 1), *dx0 = rand_f(n, -1, 1),
        *dw0 = rand_f(C, -1, 1);
  double *rdx = dcalloc(n), *rdw = dcalloc(C);
  for (int c = 0; c < C; ++c) rdw[c] = dw0[c];
  for (int t = 0; t < T; ++t) {
    const float *xr = x + (size_t)t * C, *gr = dy + (size_t)t * C;
    double ms = 0, dot = 0;
    for (int c = 0; c < C; ++c) ms += (double)xr[c] * xr[c], dot += (double)gr[c] * w[c] * xr[c];
    const double r = 1.0 / sqrt(ms / C + eps);
    for (int c = 0; c < C; ++c) {
      rdx[(size_t)t * C + c] = dx0[(size_t)t * C + c] + r * gr[c] * w[c] - xr[c] * r * r * r * dot / C;
      rdw[c] += (double)gr[c] * xr[c] * r;
    }
  }
  float *d_x = todev(x, n * 4), *d_w = todev(w, C * 4), *d_dy = todev(dy, n * 4), *d_dx = todev(dx0, n * 4),
        *d_dw = todev(dw0, C * 4), *d_s = dmalloc(vr_cutrain_rmsnorm_bwd_scratch(T, C) * 4);
  vr_cutrain_rmsnorm_bwd(d_dx, NULL, d_dw, d_dy, d_x, d_w, T, C, eps, 1, d_s, 0);
  float *gdx = malloc(n * 4), *gdw = malloc(C * 4), *gdw2 = malloc(C * 4);
  tohost(gdx, d_dx, n * 4);
  tohost(gdw, d_dw, C * 4);
  char what[128];
  snprintf(what, sizeof what, "rmsnorm_bwd dx (+=) T%d C%d", T, C);
  check_rel(what, rdx, gdx, n, 1e-5);
  snprintf(what, sizeof what, "rmsnorm_bwd dw (+=) T%d C%d", T, C);
  check_rel(what, rdw, gdw, C, 1e-5);
  CK(cudaMemcpy(d_dw, dw0, C * 4, cudaMemcpyHostToDevice));
  uint16_t *d_dx16 = dmalloc(n * 2);
  vr_cutrain_rmsnorm_bwd(d_dx, d_dx16, d_dw, d_dy, d_x, d_w, T, C, eps, 0, d_s, 0);
  tohost(gdw2, d_dw, C * 4);
  snprintf(what, sizeof what, "rmsnorm_bwd dw deterministic T%d C%d", T, C);
  check_same_bits(what, gdw, gdw2, C * 4);
  /* accumulate = 0: dx alone */
  tohost(gdx, d_dx, n * 4);
  for (size_t i = 0; i < n; ++i) rdx[i] -= dx0[i];
  snprintf(what, sizeof what, "rmsnorm_bwd dx (=) T%d C%d", T, C);
  check_rel(what, rdx, gdx, n, 1e-5);
  /* the bf16 copy is bf16(dx) exactly */
  uint16_t *g16 = malloc(n * 2), *want16 = malloc(n * 2);
  tohost(g16, d_dx16, n * 2);
  for (size_t i = 0; i < n; ++i) want16[i] = f2bf(gdx[i]);
  snprintf(what, sizeof what, "rmsnorm_bwd dx16 = bf16(dx) T%d C%d", T, C);
  check_same_bits(what, want16, g16, n * 2);
  free(g16), free(want16), dfree(d_dx16);
  dfree(d_x), dfree(d_w), dfree(d_dy), dfree(d_dx), dfree(d_dw), dfree(d_s);
  free(x), free(w), free(dy), free(dx0), free(dw0), free(rdx), free(rdw), free(gdx), free(gdw), free(gdw2);
}

/* vr_cutrain_rmsnorm_bwd16 (dy bf16) against vr_cutrain_rmsnorm_bwd on dy's values widened to
 * fp32: dx (+=), dx16 and dw the same bits; and dx against the double reference. */
static void test_rmsnorm_bwd16(int T, int C) {
  const float eps = 1e-6f;
  const size_t n = (size_t)T * C;
  float *x = rand_f(n, -2, 2), *w = rand_f(C, 0.5f, 1.5f), *dyr = rand_f(n, -1, 1), *dx0 = rand_f(n, -1, 1),
        *dw0 = rand_f(C, -1, 1);
  uint16_t *dy16 = malloc(n * 2);
  for (size_t i = 0; i < n; ++i) dy16[i] = f2bf(dyr[i]);
  float *dy = bf_arr_to_f(dy16, n);
  double *rdx = dcalloc(n);
  for (int t = 0; t < T; ++t) {
    const float *xr = x + (size_t)t * C, *gr = dy + (size_t)t * C;
    double ms = 0, dot = 0;
    for (int c = 0; c < C; ++c) ms += (double)xr[c] * xr[c], dot += (double)gr[c] * w[c] * xr[c];
    const double r = 1.0 / sqrt(ms / C + eps);
    for (int c = 0; c < C; ++c) rdx[(size_t)t * C + c] = dx0[(size_t)t * C + c] + r * gr[c] * w[c] - xr[c] * r * r * r * dot / C;
  }
  float *d_x = todev(x, n * 4), *d_w = todev(w, C * 4), *d_dy = todev(dy, n * 4), *d_s = dmalloc(vr_cutrain_rmsnorm_bwd_scratch(T, C) * 4);
  uint16_t *d_dy16 = todev(dy16, n * 2), *d_a16 = dmalloc(n * 2), *d_b16 = dmalloc(n * 2);
  float *d_dxa = todev(dx0, n * 4), *d_dxb = todev(dx0, n * 4), *d_dwa = todev(dw0, C * 4), *d_dwb = todev(dw0, C * 4);
  vr_cutrain_rmsnorm_bwd(d_dxa, d_a16, d_dwa, d_dy, d_x, d_w, T, C, eps, 1, d_s, 0);
  vr_cutrain_rmsnorm_bwd16(d_dxb, d_b16, d_dwb, d_dy16, d_x, d_w, T, C, eps, 1, d_s, 0);
  float *ga = malloc(n * 4), *gb = malloc(n * 4), *wa = malloc(C * 4), *wb = malloc(C * 4);
  uint16_t *ha = malloc(n * 2), *hb = malloc(n * 2);
  tohost(ga, d_dxa, n * 4), tohost(gb, d_dxb, n * 4), tohost(wa, d_dwa, C * 4), tohost(wb, d_dwb, C * 4);
  tohost(ha, d_a16, n * 2), tohost(hb, d_b16, n * 2);
  char what[128];
  snprintf(what, sizeof what, "rmsnorm_bwd16 dx (+=) T%d C%d", T, C);
  check_rel(what, rdx, gb, n, 1e-5);
  snprintf(what, sizeof what, "rmsnorm_bwd16 dx = fp32 kernel's on widened dy T%d C%d", T, C);
  check_same_bits(what, ga, gb, n * 4);
  snprintf(what, sizeof what, "rmsnorm_bwd16 dx16 = fp32 kernel's T%d C%d", T, C);
  check_same_bits(what, ha, hb, n * 2);
  snprintf(what, sizeof what, "rmsnorm_bwd16 dw = fp32 kernel's T%d C%d", T, C);
  check_same_bits(what, wa, wb, C * 4);
  dfree(d_x), dfree(d_w), dfree(d_dy), dfree(d_s), dfree(d_dy16), dfree(d_a16), dfree(d_b16), dfree(d_dxa), dfree(d_dxb),
      dfree(d_dwa), dfree(d_dwb);
  free(x), free(w), free(dyr), free(dx0), free(dw0), free(dy16), free(dy), free(rdx), free(ga), free(gb), free(wa),
      free(wb), free(ha), free(hb);
}

/* L(x, w) = sum dy * rmsnorm_f32(x, w) on the GPU; its central differences against the
 * backward kernel's dx and dw. */
static double rms_loss(float *d_x, float *d_w, float *d_y, const float *dy, int T, int C, float *y) {
  vr_cuda_rmsnorm_f32(d_x, d_y, d_w, T, C, 1e-6f, 0);
  tohost(y, d_y, (size_t)T * C * 4);
  double L = 0;
  for (size_t i = 0; i < (size_t)T * C; ++i) L += (double)dy[i] * y[i];
  return L;
}

static void test_rmsnorm_fd(int T, int C) {
  const size_t n = (size_t)T * C;
  const float h = 1e-2f;
  float *x = rand_f(n, -2, 2), *w = rand_f(C, 0.5f, 1.5f), *dy = rand_f(n, -1, 1), *y = malloc(n * 4);
  float *d_x = todev(x, n * 4), *d_w = todev(w, C * 4), *d_y = dmalloc(n * 4), *d_dy = todev(dy, n * 4),
        *d_dx = dmalloc(n * 4), *d_dw = dmalloc(C * 4), *d_s = dmalloc(vr_cutrain_rmsnorm_bwd_scratch(T, C) * 4);
  CK(cudaMemset(d_dw, 0, C * 4));
  vr_cutrain_rmsnorm_bwd(d_dx, NULL, d_dw, d_dy, d_x, d_w, T, C, 1e-6f, 0, d_s, 0);
  float *gdx = malloc(n * 4), *gdw = malloc(C * 4);
  tohost(gdx, d_dx, n * 4);
  tohost(gdw, d_dw, C * 4);
  double *fdx = dcalloc(n), *fdw = dcalloc(C);
  for (size_t i = 0; i < n; ++i) {
    const float x0 = x[i];
    x[i] = x0 + h;
    CK(cudaMemcpy(d_x, x, n * 4, cudaMemcpyHostToDevice));
    const double lp = rms_loss(d_x, d_w, d_y, dy, T, C, y);
    x[i] = x0 - h;
    CK(cudaMemcpy(d_x, x, n * 4, cudaMemcpyHostToDevice));
    const double lm = rms_loss(d_x, d_w, d_y, dy, T, C, y);
    x[i] = x0;
    fdx[i] = (lp - lm) / (2.0 * h);
  }
  CK(cudaMemcpy(d_x, x, n * 4, cudaMemcpyHostToDevice));
  for (int c = 0; c < C; ++c) {
    const float w0 = w[c];
    w[c] = w0 + h;
    CK(cudaMemcpy(d_w, w, C * 4, cudaMemcpyHostToDevice));
    const double lp = rms_loss(d_x, d_w, d_y, dy, T, C, y);
    w[c] = w0 - h;
    CK(cudaMemcpy(d_w, w, C * 4, cudaMemcpyHostToDevice));
    const double lm = rms_loss(d_x, d_w, d_y, dy, T, C, y);
    w[c] = w0;
    fdw[c] = (lp - lm) / (2.0 * h);
  }
  char what[128];
  snprintf(what, sizeof what, "rmsnorm_bwd dx vs finite differences T%d C%d", T, C);
  check_rel(what, fdx, gdx, n, 2e-3);
  snprintf(what, sizeof what, "rmsnorm_bwd dw vs finite differences T%d C%d", T, C);
  check_rel(what, fdw, gdw, C, 2e-3);
  dfree(d_x), dfree(d_w), dfree(d_y), dfree(d_dy), dfree(d_dx);
  dfree(d_dw), dfree(d_s);
  free(x), free(w), free(dy), free(y), free(gdx), free(gdw), free(fdx), free(fdw);
}

static void test_colsum(int T, int N) {
  float *f;
  uint16_t *m = rand_bf((size_t)T * N, 1.f, &f);
  float *b0 = rand_f(N, -1, 1);
  double *ref = dcalloc(N);
  for (int c = 0; c < N; ++c) ref[c] = b0[c];
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < N; ++c) ref[c] += f[(size_t)t * N + c];
  uint16_t *d_m = todev(m, (size_t)T * N * 2);
  float *d_b = todev(b0, N * 4), *d_s = dmalloc(vr_cutrain_colsum_scratch(T, N) * 4), *g = malloc(N * 4);
  vr_cutrain_colsum_bf16(d_b, d_m, N, T, N, d_s, 0);
  tohost(g, d_b, N * 4);
  char what[128];
  snprintf(what, sizeof what, "colsum_bf16 (bias grad) T%d N%d", T, N);
  check_rel(what, ref, g, N, 1e-5);
  dfree(d_m), dfree(d_b), dfree(d_s);
  free(m), free(f), free(b0), free(ref), free(g);
}

/* The 16-byte form of the bf16 column sums (N, ld multiples of 8) against the 2-byte one (the same
 * matrix at a row pitch ld % 8 == 4): the same bits. */
static void test_colsum_forms(int T, int N) {
  float *f;
  uint16_t *m = rand_bf((size_t)T * N, 1.f, &f), *m4 = calloc((size_t)T * (N + 4), 2);
  for (int t = 0; t < T; ++t) memcpy(m4 + (size_t)t * (N + 4), m + (size_t)t * N, (size_t)N * 2);
  float *b0 = rand_f(N, -1, 1), *ga = malloc(N * 4), *gb = malloc(N * 4);
  uint16_t *d_m = todev(m, (size_t)T * N * 2), *d_m4 = todev(m4, (size_t)T * (N + 4) * 2);
  float *d_a = todev(b0, N * 4), *d_b = todev(b0, N * 4), *d_s = dmalloc(vr_cutrain_colsum_scratch(T, N) * 4);
  vr_cutrain_colsum_bf16(d_a, d_m, N, T, N, d_s, 0);
  vr_cutrain_colsum_bf16(d_b, d_m4, N + 4, T, N, d_s, 0);
  tohost(ga, d_a, N * 4), tohost(gb, d_b, N * 4);
  char what[128];
  snprintf(what, sizeof what, "colsum_bf16 16-byte form = 2-byte form T%d N%d", T, N);
  check_same_bits(what, ga, gb, N * 4);
  dfree(d_m), dfree(d_m4), dfree(d_a), dfree(d_b), dfree(d_s);
  free(m), free(m4), free(f), free(b0), free(ga), free(gb);
}

/* The value head: val = h w + b and its backward (dh, dw +=, db +=). */
static void test_value(int T, int C) {
  float *h = rand_f((size_t)T * C, -2, 2), *w = rand_f(C, -1, 1), *b = rand_f(1, -1, 1), *gv = rand_f(T, -1, 1);
  float *w0 = rand_f(C, -1, 1), *b0 = rand_f(1, -1, 1);
  double *rv = dcalloc(T), *rdh = dcalloc((size_t)T * C), *rdw = dcalloc(C), rdb = b0[0];
  for (int c = 0; c < C; ++c) rdw[c] = w0[c];
  for (int t = 0; t < T; ++t) {
    double a = b[0];
    for (int c = 0; c < C; ++c) {
      a += (double)h[(size_t)t * C + c] * w[c];
      rdh[(size_t)t * C + c] = (double)gv[t] * w[c];
      rdw[c] += (double)gv[t] * h[(size_t)t * C + c];
    }
    rv[t] = a;
    rdb += gv[t];
  }
  float *d_h = todev(h, (size_t)T * C * 4), *d_w = todev(w, C * 4), *d_b = todev(b, 4), *d_gv = todev(gv, T * 4),
        *d_v = dmalloc(T * 4), *d_dh = dmalloc((size_t)T * C * 4), *d_dw = todev(w0, C * 4), *d_db = todev(b0, 4),
        *d_s = dmalloc(vr_cutrain_colsum_scratch(T, C) * 4);
  vr_cutrain_value_fwd(d_v, d_h, d_w, d_b, T, C, 0);
  vr_cutrain_value_bwd(d_dh, d_dw, d_db, d_gv, d_h, d_w, T, C, d_s, 0);
  float *gv_ = malloc(T * 4), *gdh = malloc((size_t)T * C * 4), *gdw = malloc(C * 4), gdb;
  char what[96];
  tohost(gv_, d_v, T * 4);
  snprintf(what, sizeof what, "value_fwd T%d C%d", T, C);
  check_rel(what, rv, gv_, T, 1e-5);
  tohost(gdh, d_dh, (size_t)T * C * 4);
  snprintf(what, sizeof what, "value_bwd dh T%d C%d", T, C);
  check_rel(what, rdh, gdh, (size_t)T * C, 1e-6);
  tohost(gdw, d_dw, C * 4);
  snprintf(what, sizeof what, "value_bwd dw (+=) T%d C%d", T, C);
  check_rel(what, rdw, gdw, C, 1e-5);
  tohost(&gdb, d_db, 4);
  { /* db is one sum whose terms cancel: bound its error by the terms' size, not the result's
     * (fp32 accumulation, any order: T ulp of the largest partial sum at most) */
    double mag = fabs((double)b0[0]);
    for (int t = 0; t < T; ++t) mag += fabs((double)gv[t]);
    const double err = fabs((double)gdb - rdb), bound = 1e-6 * mag + 1e-30;
    const int ok = isfinite(gdb) && err <= bound;
    printf("%-4s value_bwd db (+=) T%-5d |err| %.3g <= 1e-6 x sum|terms| %.3g\n", ok ? "ok" : "FAIL", T, err, bound);
    if (!ok) g_fail = 1;
  }
  dfree(d_h), dfree(d_w), dfree(d_b), dfree(d_gv), dfree(d_v), dfree(d_dh), dfree(d_dw), dfree(d_db), dfree(d_s);
  free(h), free(w), free(b), free(gv), free(w0), free(b0), free(rv), free(rdh), free(rdw), free(gv_), free(gdh),
      free(gdw);
}

/* ------------------------------------------------------------ SwiGLU, RoPE */

static double silu(double g) { return g / (1.0 + exp(-g)); }

static void test_swiglu_bwd(int T, int I) {
  float *guf, *dof;
  uint16_t *gu = rand_bf((size_t)T * 2 * I, 4.f, &guf), *dout = rand_bf((size_t)T * I, 1.f, &dof);
  double *ref = dcalloc((size_t)T * 2 * I);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < I; ++i) {
      const double g = guf[(size_t)t * 2 * I + i], u = guf[(size_t)t * 2 * I + I + i], d = dof[(size_t)t * I + i];
      const double sg = 1.0 / (1.0 + exp(-g));
      ref[(size_t)t * 2 * I + i] = d * u * sg * (1.0 + g * (1.0 - sg));
      ref[(size_t)t * 2 * I + I + i] = d * silu(g);
    }
  uint16_t *d_gu = todev(gu, (size_t)T * 2 * I * 2), *d_do = todev(dout, (size_t)T * I * 2),
           *d_dgu = dmalloc((size_t)T * 2 * I * 2), *g = malloc((size_t)T * 2 * I * 2);
  vr_cutrain_swiglu_bwd(d_dgu, d_do, d_gu, T, I, 0);
  tohost(g, d_dgu, (size_t)T * 2 * I * 2);
  char what[128];
  snprintf(what, sizeof what, "swiglu_bwd T%d I%d", T, I);
  check_rel_bf(what, ref, g, (size_t)T * 2 * I, 8e-3);
  /* the formula itself against central differences of silu(g) u (host, double) */
  double *fd = dcalloc((size_t)T * 2 * I), h = 1e-5;
  float *gf = malloc((size_t)T * 2 * I * 4);
  for (int t = 0; t < T && t < 4; ++t)
    for (int i = 0; i < I; ++i) {
      const size_t a = (size_t)t * 2 * I + i, b = a + I;
      const double gg = guf[a], u = guf[b], d = dof[(size_t)t * I + i];
      fd[a] = d * (silu(gg + h) * u - silu(gg - h) * u) / (2 * h);
      fd[b] = d * (silu(gg) * (u + h) - silu(gg) * (u - h)) / (2 * h);
      gf[a] = (float)ref[a], gf[b] = (float)ref[b];
    }
  const size_t nfd = (size_t)(T < 4 ? T : 4) * 2 * I;
  snprintf(what, sizeof what, "swiglu_bwd formula vs finite differences I%d", I);
  check_rel(what, fd, gf, nfd, 1e-6);
  dfree(d_gu), dfree(d_do), dfree(d_dgu);
  free(gu), free(guf), free(dout), free(dof), free(ref), free(g), free(fd), free(gf);
}

/* The gate/up projection with SwiGLU in its epilogue (vr_cutrain_gu_swiglu_fwd) against a
 * double host GEMM; act also bit for bit against vr_cuda_swiglu on the kernel's own gu and against
 * the run without gu; the rows past T (a sentinel) untouched. */
static void test_gu_swiglu(int T, int C, int F) {
  char what[128];
  if (!vr_cutrain_gu_swiglu_available(C, F)) {
    printf("     gu_swiglu T%d C%d F%d: no fused kernel on this build / device\n", T, C, F);
    return;
  }
  const size_t nx = (size_t)T * C, nw = (size_t)2 * F * C, pad = 128;
  float *xf, *wf;
  uint16_t *x = rand_bf(nx, 1.f, &xf), *W = rand_bf(nw, 1.7f / sqrtf((float)C), &wf);
  double *rgu = dcalloc((size_t)T * 2 * F), *ract = dcalloc((size_t)T * F);
  for (int t = 0; t < T; ++t)
    for (int n = 0; n < 2 * F; ++n) {
      double acc = 0;
      for (int c = 0; c < C; ++c) acc += (double)xf[(size_t)t * C + c] * wf[(size_t)n * C + c];
      rgu[(size_t)t * 2 * F + n] = acc;
    }
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < F; ++i)
      ract[(size_t)t * F + i] = silu(rgu[(size_t)t * 2 * F + i]) * rgu[(size_t)t * 2 * F + F + i];
  const size_t act_b = ((size_t)T + pad) * F * 2, gu_b = ((size_t)T + pad) * 2 * F * 2;
  uint16_t *d_x = todev(x, nx * 2), *d_W = todev(W, nw * 2), *d_act = dmalloc(act_b), *d_gu = dmalloc(gu_b),
           *d_act2 = dmalloc(act_b), *d_act3 = dmalloc(act_b);
  CK(cudaMemset(d_act, 0xff, act_b));
  CK(cudaMemset(d_gu, 0xff, gu_b));
  CK(cudaMemset(d_act3, 0xff, act_b));
  const int ran = vr_cutrain_gu_swiglu_fwd(d_act, d_gu, d_x, d_W, T, C, F, 0) &&
                  vr_cutrain_gu_swiglu_fwd(d_act3, NULL, d_x, d_W, T, C, F, 0);
  vr_cuda_swiglu(d_act2, d_gu, T, F, 0);
  CK(cudaDeviceSynchronize());
  uint16_t *act = malloc(act_b), *gu = malloc(gu_b), *act2 = malloc(act_b), *act3 = malloc(act_b);
  tohost(act, d_act, act_b), tohost(gu, d_gu, gu_b), tohost(act2, d_act2, (size_t)T * F * 2);
  tohost(act3, d_act3, act_b);
  if (!ran) {
    printf("FAIL gu_swiglu T%d C%d F%d: the fused kernel refused an available shape\n", T, C, F);
    g_fail = 1;
  }
  snprintf(what, sizeof what, "gu_swiglu gu T%d C%d F%d", T, C, F);
  check_rel_bf(what, rgu, gu, (size_t)T * 2 * F, 4e-3);
  snprintf(what, sizeof what, "gu_swiglu act T%d C%d F%d", T, C, F);
  check_rel_bf(what, ract, act, (size_t)T * F, 8e-3);
  snprintf(what, sizeof what, "gu_swiglu act = vr_cuda_swiglu(gu) T%d F%d", T, F);
  check_same_bits(what, act, act2, (size_t)T * F * 2);
  snprintf(what, sizeof what, "gu_swiglu act without gu T%d F%d", T, F);
  check_same_bits(what, act, act3, act_b);
  size_t bad = 0;
  for (size_t i = (size_t)T * F; i < (size_t)(T + pad) * F; ++i) bad += act[i] != 0xffff;
  for (size_t i = (size_t)T * 2 * F; i < (size_t)(T + pad) * 2 * F; ++i) bad += gu[i] != 0xffff;
  printf("%-4s gu_swiglu rows past T%d untouched (%zu written)\n", bad ? "FAIL" : "ok", T, bad);
  if (bad) g_fail = 1;
  dfree(d_x), dfree(d_W), dfree(d_act), dfree(d_gu), dfree(d_act2), dfree(d_act3);
  free(x), free(xf), free(W), free(wf), free(rgu), free(ract), free(act), free(gu), free(act2), free(act3);
}

static void test_rope_bwd(int T, int H, int Hkv, int D) {
  const int ld = (H + 2 * Hkv) * D, koff = H * D, half = D / 2;
  const float scaling = 1.25f;
  float *dyf;
  uint16_t *dy = rand_bf((size_t)T * ld, 1.f, &dyf);
  int32_t *pos = malloc(T * 4);
  float *inv = malloc(half * 4), *neg = malloc(half * 4);
  for (int t = 0; t < T; ++t) pos[t] = irand(4096);
  for (int i = 0; i < half; ++i) inv[i] = (float)pow(10000.0, -2.0 * i / D), neg[i] = -inv[i];
  double *ref = dcalloc((size_t)T * ld);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < ld; ++c) ref[(size_t)t * ld + c] = dyf[(size_t)t * ld + c];
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < H + Hkv; ++j) {
      const int base = j < H ? j * D : koff + (j - H) * D;
      for (int i = 0; i < half; ++i) {
        const double a = (double)pos[t] * inv[i], cs = cos(a) * scaling, sn = sin(a) * scaling;
        const double g1 = dyf[(size_t)t * ld + base + i], g2 = dyf[(size_t)t * ld + base + i + half];
        ref[(size_t)t * ld + base + i] = g1 * cs + g2 * sn; /* R^T: the transpose of [[c, -s], [s, c]] */
        ref[(size_t)t * ld + base + i + half] = -g1 * sn + g2 * cs;
      }
    }
  uint16_t *d_dy = todev(dy, (size_t)T * ld * 2), *g = malloc((size_t)T * ld * 2);
  int32_t *d_pos = todev(pos, T * 4);
  float *d_neg = todev(neg, half * 4);
  vr_cutrain_rope_bwd(d_dy, ld, 0, koff, H, Hkv, D, d_pos, d_neg, scaling, T, 0);
  tohost(g, d_dy, (size_t)T * ld * 2);
  char what[128];
  snprintf(what, sizeof what, "rope_bwd T%d H%d/%d D%d", T, H, Hkv, D);
  check_rel_bf(what, ref, g, (size_t)T * ld, 8e-3);
  dfree(d_dy), dfree(d_pos), dfree(d_neg);
  free(dy), free(dyf), free(pos), free(inv), free(neg), free(ref), free(g);
}

/* ------------------------------------------------------------ embedding backward */

static void test_embed_bwd(int T, int V, int C) {
  int32_t *ids = malloc(T * 4), *order = malloc(T * 4), *seg = malloc((T + 1) * 4), *uniq = malloc(T * 4),
          *count = malloc(V * 4);
  for (int t = 0; t < T; ++t) ids[t] = irand(3) ? irand(V < 40 ? V : 40) : irand(V); /* many repeats */
  const int nu = vr_cutrain_embed_segments(ids, T, V, order, seg, uniq, count);
  float *dx = rand_f((size_t)T * C, -1, 1), *w0 = rand_f((size_t)V * C, -1, 1);
  double *ref = dcalloc((size_t)V * C);
  for (size_t i = 0; i < (size_t)V * C; ++i) ref[i] = w0[i];
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) ref[(size_t)ids[t] * C + c] += dx[(size_t)t * C + c];
  float *d_dx = todev(dx, (size_t)T * C * 4), *d_w = todev(w0, (size_t)V * C * 4), *g = malloc((size_t)V * C * 4);
  int32_t *d_o = todev(order, T * 4), *d_seg = todev(seg, (nu + 1) * 4), *d_u = todev(uniq, (nu ? nu : 1) * 4);
  vr_cutrain_embed_bwd(d_w, d_dx, d_o, d_seg, d_u, nu, C, 0);
  tohost(g, d_w, (size_t)V * C * 4);
  char what[128];
  snprintf(what, sizeof what, "embed_bwd T%d V%d C%d (%d distinct)", T, V, C, nu);
  check_rel(what, ref, g, (size_t)V * C, 1e-5);
  int bad_id = -1;
  ids[T / 2] = V; /* out of range: refused */
  bad_id = vr_cutrain_embed_segments(ids, T, V, order, seg, uniq, count);
  printf("%-4s embed_segments refuses an id outside the vocabulary\n", bad_id == -1 ? "ok" : "FAIL");
  if (bad_id != -1) g_fail = 1;
  dfree(d_dx), dfree(d_w), dfree(d_o), dfree(d_seg), dfree(d_u);
  free(ids), free(order), free(seg), free(uniq), free(count), free(dx), free(w0), free(ref), free(g);
}

/* ------------------------------------------------------------ log-softmax */

/* Reference statistics of one row of z = l / temp: lse, entropy, log p(y). */
static void ref_row(const double *l, int V, double temp, int y, double *lse, double *ent, double *lp) {
  double m = -INFINITY;
  for (int j = 0; j < V; ++j) m = fmax(m, l[j] / temp);
  double s = 0, w = 0;
  for (int j = 0; j < V; ++j) {
    const double e = exp(l[j] / temp - m);
    s += e, w += e * l[j] / temp;
  }
  *lse = m + log(s);
  *ent = *lse - w / s;
  *lp = y >= 0 ? l[y] / temp - *lse : 0.0;
}

/* dz of one row: glp (onehot - p) - gent p (log p + ent), divided by temp. */
static void ref_dlogits(const double *l, int V, double temp, int y, double glp, double gent, double *out) {
  double lse, ent, lp;
  ref_row(l, V, temp, y, &lse, &ent, &lp);
  for (int j = 0; j < V; ++j) {
    const double lpj = l[j] / temp - lse, p = exp(lpj);
    out[j] = ((j == y && y >= 0 ? glp : 0.0) - p * ((y >= 0 ? glp : 0.0) + gent * (lpj + ent))) / temp;
  }
}

static void test_logsoftmax(int rows, int V, float temp) {
  const size_t n = (size_t)rows * V;
  float *l = rand_f(n, -6, 6), *glp = rand_f(rows, -1, 1), *gent = rand_f(rows, -1, 1);
  int32_t *tgt = malloc(rows * 4);
  for (int r = 0; r < rows; ++r) tgt[r] = r == rows - 1 ? -1 : irand(V);
  double *rl = dcalloc(V), *rlse = dcalloc(rows), *rent = dcalloc(rows), *rlp = dcalloc(rows), *rdl = dcalloc(n);
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < V; ++j) rl[j] = l[(size_t)r * V + j];
    ref_row(rl, V, temp, tgt[r], &rlse[r], &rent[r], &rlp[r]);
    ref_dlogits(rl, V, temp, tgt[r], glp[r], gent[r], rdl + (size_t)r * V);
  }
  float *d_l = todev(l, n * 4), *d_lp = dmalloc(rows * 4), *d_ent = dmalloc(rows * 4), *d_lse = dmalloc(rows * 4),
        *d_glp = todev(glp, rows * 4), *d_gent = todev(gent, rows * 4);
  int32_t *d_tgt = todev(tgt, rows * 4);
  uint16_t *d_dl = dmalloc(n * 2), *gdl = malloc(n * 2);
  uint16_t *d_lp16 = dmalloc(n * 2), *glp16 = malloc(n * 2);
  const int nseg = vr_cutrain_lsm_segs(V);
  float *d_lpmax = dmalloc((size_t)rows * nseg * 4), *gmax = malloc((size_t)rows * nseg * 4);
  vr_cutrain_logsoftmax_rows(d_lp, d_ent, d_lse, d_l, d_tgt, rows, V, temp, d_lp16, d_lpmax, 0);
  vr_cutrain_dlogits_rows(d_dl, d_l, NULL, NULL, d_glp, d_gent, d_lse, d_ent, d_tgt, rows, V, temp, 0);
  float *g = malloc(rows * 4);
  char what[128];
  tohost(g, d_lse, rows * 4);
  snprintf(what, sizeof what, "logsoftmax lse rows%d V%d temp%.2f", rows, V, temp);
  check_rel(what, rlse, g, rows, 1e-5);
  tohost(g, d_ent, rows * 4);
  snprintf(what, sizeof what, "logsoftmax entropy rows%d V%d temp%.2f", rows, V, temp);
  check_rel(what, rent, g, rows, 1e-5);
  tohost(g, d_lp, rows * 4);
  snprintf(what, sizeof what, "logsoftmax logp rows%d V%d temp%.2f", rows, V, temp);
  check_rel(what, rlp, g, rows, 1e-5);
  tohost(gdl, d_dl, n * 2);
  snprintf(what, sizeof what, "dlogits rows%d V%d temp%.2f", rows, V, temp);
  check_rel_bf(what, rdl, gdl, n, 8e-3);
  /* the stored bf16 log-softmax, and dlogits from it */
  double *rlsm = dcalloc(n);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < V; ++j) rlsm[(size_t)r * V + j] = l[(size_t)r * V + j] / (double)temp - rlse[r];
  tohost(glp16, d_lp16, n * 2);
  tohost(gmax, d_lpmax, (size_t)rows * nseg * 4);
  tohost(g, d_lse, rows * 4);
  /* log p = stored + segment max - lse; each element within |log p| 2^-8 (bf16's unit roundoff, + fp32 noise) */
  float *lsm = malloc(n * 4);
  size_t over = 0;
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < V; ++j) {
      const size_t i = (size_t)r * V + j;
      lsm[i] = bf2f(glp16[i]) + gmax[(size_t)r * nseg + j / VR_CUTRAIN_LSM_SEG] - g[r];
      if (fabs(lsm[i] - rlsm[i]) > fabs(rlsm[i]) * 0x1p-8 + 2e-5) ++over;
    }
  snprintf(what, sizeof what, "logsoftmax stored bf16 log p rows%d V%d temp%.2f", rows, V, temp);
  check_rel(what, rlsm, lsm, n, 8e-3);
  snprintf(what, sizeof what, "logsoftmax stored log p per element rows%d V%d temp%.2f", rows, V, temp);
  printf("%-4s %-58s %zu over |log p| 2^-8\n", over ? "FAIL" : "ok", what, over);
  if (over) g_fail = 1;
  free(lsm), free(gmax);
  CK(cudaMemset(d_dl, 0xFF, n * 2));
  vr_cutrain_dlogits_rows(d_dl, NULL, d_lp16, d_lpmax, d_glp, d_gent, d_lse, d_ent, d_tgt, rows, V, temp, 0);
  tohost(gdl, d_dl, n * 2);
  snprintf(what, sizeof what, "dlogits from stored log p rows%d V%d temp%.2f", rows, V, temp);
  check_rel_bf(what, rdl, gdl, n, 1e-2);
  /* in place over the stored log p (the LM-head backward's form): the same bits */
  vr_cutrain_dlogits_rows(d_lp16, NULL, d_lp16, d_lpmax, d_glp, d_gent, d_lse, d_ent, d_tgt, rows, V, temp, 0);
  tohost(glp16, d_lp16, n * 2);
  snprintf(what, sizeof what, "dlogits in place over stored log p rows%d V%d", rows, V);
  check_same_bits(what, gdl, glp16, n * 2);
  free(rlsm), free(glp16), dfree(d_lp16), dfree(d_lpmax);
  dfree(d_l), dfree(d_lp), dfree(d_ent), dfree(d_lse), dfree(d_glp);
  dfree(d_gent), dfree(d_tgt), dfree(d_dl);
  free(l), free(glp), free(gent), free(tgt), free(rl), free(rlse), free(rent), free(rlp), free(rdl), free(gdl), free(g);
}

/* L = sum glp logp + gent ent through the fp32 GPU forward; central differences over every
 * logit against dlogits. */
static void test_logsoftmax_fd(int rows, int V, float temp) {
  const size_t n = (size_t)rows * V;
  const float h = 1e-2f;
  float *l = rand_f(n, -3, 3), *glp = rand_f(rows, -1, 1), *gent = rand_f(rows, -1, 1);
  int32_t *tgt = malloc(rows * 4);
  for (int r = 0; r < rows; ++r) tgt[r] = irand(V);
  float *d_l = todev(l, n * 4), *d_lp = dmalloc(rows * 4), *d_ent = dmalloc(rows * 4), *d_lse = dmalloc(rows * 4),
        *d_glp = todev(glp, rows * 4), *d_gent = todev(gent, rows * 4), *lp = malloc(rows * 4), *en = malloc(rows * 4);
  int32_t *d_tgt = todev(tgt, rows * 4);
  uint16_t *d_dl = dmalloc(n * 2), *gdl = malloc(n * 2);
  vr_cutrain_logsoftmax_rows(d_lp, d_ent, d_lse, d_l, d_tgt, rows, V, temp, NULL, NULL, 0);
  vr_cutrain_dlogits_rows(d_dl, d_l, NULL, NULL, d_glp, d_gent, d_lse, d_ent, d_tgt, rows, V, temp, 0);
  tohost(gdl, d_dl, n * 2);
  double *fd = dcalloc(n);
  for (size_t i = 0; i < n; ++i) {
    double L[2];
    for (int sgn = 0; sgn < 2; ++sgn) {
      const float v = l[i] + (sgn ? -h : h);
      CK(cudaMemcpy(d_l + i, &v, 4, cudaMemcpyHostToDevice));
      vr_cutrain_logsoftmax_rows(d_lp, d_ent, d_lse, d_l, d_tgt, rows, V, temp, NULL, NULL, 0);
      tohost(lp, d_lp, rows * 4);
      tohost(en, d_ent, rows * 4);
      L[sgn] = 0;
      for (int r = 0; r < rows; ++r) L[sgn] += (double)glp[r] * lp[r] + (double)gent[r] * en[r];
    }
    CK(cudaMemcpy(d_l + i, l + i, 4, cudaMemcpyHostToDevice));
    fd[i] = (L[0] - L[1]) / (2.0 * h);
  }
  char what[128];
  snprintf(what, sizeof what, "dlogits vs finite differences rows%d V%d temp%.2f", rows, V, temp);
  check_rel_bf(what, fd, gdl, n, 1e-2); /* bf16 output: the FD tolerance gives way to the bf16 one */
  dfree(d_l), dfree(d_lp), dfree(d_ent), dfree(d_lse), dfree(d_glp);
  dfree(d_gent), dfree(d_tgt), dfree(d_dl);
  free(l), free(glp), free(gent), free(tgt), free(lp), free(en), free(gdl), free(fd);
}

/* One row of logits in double: l[j] = x . W[j] (x (C), W (V, C)). */
static void ref_logits(const float *x, const float *W, int C, int V, double *l) {
  for (int j = 0; j < V; ++j) {
    double a = 0;
    for (int c = 0; c < C; ++c) a += (double)x[c] * W[(size_t)j * C + c];
    l[j] = a;
  }
}

/* The fused LM head: logits through the GEMM in chunks (the last one partial), then backward. */
static void test_lmhead(vr_cuda_gemm_t *gm, int T, int C, int V, int chunk, float temp) {
  float *xf, *wf;
  uint16_t *x = rand_bf((size_t)T * C, 1.f, &xf), *W = rand_bf((size_t)V * C, 0.3f, &wf);
  float *glp = rand_f(T, -1, 1), *gent = rand_f(T, -1, 1), *dw0 = rand_f((size_t)V * C, -1, 1);
  int32_t *tgt = malloc(T * 4);
  for (int t = 0; t < T; ++t) tgt[t] = t % 97 == 96 ? -1 : irand(V);
  double *rl = dcalloc(V), *rlse = dcalloc(T), *rent = dcalloc(T), *rlp = dcalloc(T), *dz = dcalloc(V);
  double *rdx = dcalloc((size_t)T * C), *rdw = dcalloc((size_t)V * C);
  for (size_t i = 0; i < (size_t)V * C; ++i) rdw[i] = dw0[i];
  for (int t = 0; t < T; ++t) {
    ref_logits(xf + (size_t)t * C, wf, C, V, rl);
    ref_row(rl, V, temp, tgt[t], &rlse[t], &rent[t], &rlp[t]);
    ref_dlogits(rl, V, temp, tgt[t], glp[t], gent[t], dz);
    for (int j = 0; j < V; ++j) {
      if (dz[j] == 0) continue;
      for (int c = 0; c < C; ++c) {
        rdx[(size_t)t * C + c] += dz[j] * wf[(size_t)j * C + c];
        rdw[(size_t)j * C + c] += dz[j] * xf[(size_t)t * C + c];
      }
    }
  }
  uint16_t *d_x = todev(x, (size_t)T * C * 2), *d_W = todev(W, (size_t)V * C * 2),
           *d_dl = dmalloc((size_t)chunk * V * 2);
  float *d_lp = dmalloc(T * 4), *d_ent = dmalloc(T * 4), *d_lse = dmalloc(T * 4),
        *d_logits = dmalloc((size_t)chunk * V * 4), *d_glp = todev(glp, T * 4), *d_gent = todev(gent, T * 4),
        *d_dx = dmalloc((size_t)T * C * 4), *d_dw = todev(dw0, (size_t)V * C * 4);
  int32_t *d_tgt = todev(tgt, T * 4);
  uint16_t *d_lp16 = dmalloc((size_t)T * V * 2);
  float *d_lpmax = dmalloc((size_t)T * vr_cutrain_lsm_segs(V) * 4);
  float *g = malloc(T * 4), *gdx = malloc((size_t)T * C * 4), *gdw = malloc((size_t)V * C * 4);
  for (size_t i = 0; i < (size_t)V * C; ++i) rdw[i] -= dw0[i]; /* the increment */
  /* logits recomputed in backward, or the stored log p; dW accumulated into (+=), or overwritten
   * (=) over a buffer of NaNs that must never be read; the forward through cuBLASLt + the row
   * kernel, or the fused Hopper GEMM where it runs (elsewhere the same path twice) */
  const int fused_ok = vr_cutrain_lmhead_fused_available(C, V);
  for (int mode = 0; mode < (fused_ok ? 8 : 4); ++mode) {
    const int stored = mode & 1, over = (mode >> 1) & 1, fused = mode >> 2;
    uint16_t *lp16 = stored ? d_lp16 : NULL;
    const char *how = fused ? (stored ? "stored logp, fused fwd" : "recomputed, fused fwd")
                            : stored ? "stored logp" : "recomputed";
    if (over)
      CK(cudaMemset(d_dw, 0xff, (size_t)V * C * 4));
    else
      CK(cudaMemcpy(d_dw, dw0, (size_t)V * C * 4, cudaMemcpyHostToDevice));
    const int ran = vr_cutrain_lmhead_fwd(gm, d_lp, d_ent, d_lse, d_x, d_W, d_tgt, T, C, V, temp, chunk, d_logits, lp16,
                                          d_lpmax, fused, 0);
    if (ran != fused) {
      printf("FAIL lmhead_fwd T%d C%d V%d: the %s path ran, asked for the other\n", T, C, V, ran ? "fused" : "cuBLASLt");
      g_fail = 1;
    }
    vr_cutrain_lmhead_bwd(gm, d_dx, d_dw, d_glp, d_gent, d_lse, d_ent, d_x, d_W, d_tgt, T, C, V, temp, chunk, d_logits,
                          d_dl, lp16, d_lpmax, over ? 0.f : 1.f, 0);
    char what[128];
    tohost(g, d_lp, T * 4);
    snprintf(what, sizeof what, "lmhead_fwd logp T%d C%d V%d chunk%d %s", T, C, V, chunk, how);
    check_rel(what, rlp, g, T, 1e-4);
    tohost(g, d_ent, T * 4);
    snprintf(what, sizeof what, "lmhead_fwd entropy T%d C%d V%d chunk%d %s", T, C, V, chunk, how);
    check_rel(what, rent, g, T, 1e-4);
    tohost(gdx, d_dx, (size_t)T * C * 4);
    snprintf(what, sizeof what, "lmhead_bwd dx T%d C%d V%d chunk%d %s", T, C, V, chunk, how);
    check_rel(what, rdx, gdx, (size_t)T * C, 1e-2);
    tohost(gdw, d_dw, (size_t)V * C * 4);
    for (size_t i = 0; i < (size_t)V * C && !over; ++i) gdw[i] -= dw0[i];
    snprintf(what, sizeof what, "lmhead_bwd dW (%s) T%d C%d V%d chunk%d %s", over ? "=" : "+=", T, C, V, chunk, how);
    check_rel(what, rdw, gdw, (size_t)V * C, 1e-2);
  }
  dfree(d_lp16), dfree(d_lpmax);
  dfree(d_x), dfree(d_W), dfree(d_dl), dfree(d_lp), dfree(d_ent);
  dfree(d_lse), dfree(d_logits), dfree(d_glp), dfree(d_gent), dfree(d_dx);
  dfree(d_dw), dfree(d_tgt);
  free(x), free(xf), free(W), free(wf), free(glp), free(gent), free(dw0), free(tgt), free(rl), free(rlse), free(rent);
  free(rlp), free(dz), free(rdx), free(rdw), free(g), free(gdx), free(gdw);
}

/* The fused forward (k_lmhead_sm90) against the cuBLASLt path and a double-precision host
 * reference: lse / entropy / log p of targets at the first and last column, in the last
 * (padded) tile and -1; the stored log-softmax per element within |log p| 2^-8 (+ the fp32
 * logits' noise); the fused outputs' bits across two runs. chunk: the workspace (chunk * V
 * floats; small: several launches over the rows). Skipped (one line) where it does not run. */
static void test_lmhead_fused(vr_cuda_gemm_t *gm, int T, int C, int V, int chunk, float temp) {
  if (!vr_cutrain_lmhead_fused_available(C, V)) {
    printf("skip lmhead fused T%d C%d V%d: not an sm_90a build on compute 9.0\n", T, C, V);
    return;
  }
  float *xf, *wf;
  uint16_t *x = rand_bf((size_t)T * C, 1.f, &xf), *W = rand_bf((size_t)V * C, 0.3f, &wf);
  int32_t *tgt = malloc(T * 4);
  const int last_tile = (V - 1) / 256 * 256;
  for (int t = 0; t < T; ++t) {
    const int k = t % 5;
    tgt[t] = k == 0 ? 0 : k == 1 ? V - 1 : k == 2 ? -1 : k == 3 ? last_tile + irand(V - last_tile) : irand(V);
  }
  const size_t n = (size_t)T * V;
  const int nseg = vr_cutrain_lsm_segs(V);
  double *rl = dcalloc(V), *rlse = dcalloc(T), *rent = dcalloc(T), *rlp = dcalloc(T), *rlsm = dcalloc(n);
  for (int t = 0; t < T; ++t) {
    ref_logits(xf + (size_t)t * C, wf, C, V, rl);
    ref_row(rl, V, temp, tgt[t], &rlse[t], &rent[t], &rlp[t]);
    for (int j = 0; j < V; ++j) rlsm[(size_t)t * V + j] = rl[j] / temp - rlse[t];
  }
  uint16_t *d_x = todev(x, (size_t)T * C * 2), *d_W = todev(W, (size_t)V * C * 2), *d_lp16 = dmalloc(n * 2);
  float *d_lp = dmalloc(T * 4), *d_ent = dmalloc(T * 4), *d_lse = dmalloc(T * 4),
        *d_logits = dmalloc((size_t)chunk * V * 4), *d_lpmax = dmalloc((size_t)T * nseg * 4);
  int32_t *d_tgt = todev(tgt, T * 4);
  float *g[2][3], *gmax = malloc((size_t)T * nseg * 4), *lsm = malloc(n * 4);
  uint16_t *glp16 = malloc(n * 2), *glp16b = malloc(n * 2);
  static const char *const names[2] = {"cuBLASLt", "fused"};
  for (int fused = 0; fused < 2; ++fused) {
    char what[128];
    CK(cudaMemset(d_lp16, 0xff, n * 2));
    const int ran = vr_cutrain_lmhead_fwd(gm, d_lp, d_ent, d_lse, d_x, d_W, d_tgt, T, C, V, temp, chunk, d_logits,
                                          d_lp16, d_lpmax, fused, 0);
    if (ran != fused) {
      printf("FAIL lmhead fused T%d C%d V%d chunk%d: the %s path ran\n", T, C, V, chunk, ran ? "fused" : "cuBLASLt");
      g_fail = 1;
    }
    float **o = g[fused];
    for (int k = 0; k < 3; ++k) o[k] = malloc(T * 4);
    tohost(o[0], d_lse, T * 4);
    tohost(o[1], d_ent, T * 4);
    tohost(o[2], d_lp, T * 4);
    snprintf(what, sizeof what, "lmhead %s lse T%d C%d V%d temp%.2f", names[fused], T, C, V, temp);
    check_rel(what, rlse, o[0], T, 1e-5);
    snprintf(what, sizeof what, "lmhead %s entropy T%d C%d V%d temp%.2f", names[fused], T, C, V, temp);
    check_rel(what, rent, o[1], T, 1e-4);
    snprintf(what, sizeof what, "lmhead %s logp T%d C%d V%d temp%.2f", names[fused], T, C, V, temp);
    check_rel(what, rlp, o[2], T, 1e-4);
    size_t bad_lp = 0;
    for (int t = 0; t < T; ++t)
      if (tgt[t] < 0 ? o[2][t] != 0.f : !(fabs(o[2][t] - rlp[t]) <= 1e-3 * fabs(rlp[t]) + 1e-3)) ++bad_lp;
    snprintf(what, sizeof what, "lmhead %s logp per target (first/last/padded/-1)", names[fused]);
    printf("%-4s %-58s %zu off\n", bad_lp ? "FAIL" : "ok", what, bad_lp);
    if (bad_lp) g_fail = 1;
    tohost(glp16, d_lp16, n * 2);
    tohost(gmax, d_lpmax, (size_t)T * nseg * 4);
    size_t over = 0;
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < V; ++j) {
        const size_t i = (size_t)t * V + j;
        lsm[i] = bf2f(glp16[i]) + gmax[(size_t)t * nseg + j / VR_CUTRAIN_LSM_SEG] - o[0][t];
        if (!(fabs(lsm[i] - rlsm[i]) <= fabs(rlsm[i]) * 0x1p-8 + 2e-4)) ++over;
      }
    snprintf(what, sizeof what, "lmhead %s stored log p T%d C%d V%d", names[fused], T, C, V);
    check_rel(what, rlsm, lsm, n, 8e-3);
    snprintf(what, sizeof what, "lmhead %s stored log p per element T%d V%d", names[fused], T, V);
    printf("%-4s %-58s %zu over |log p| 2^-8\n", over ? "FAIL" : "ok", what, over);
    if (over) g_fail = 1;
  }
  /* the two paths beside each other, and the fused one's bits again */
  double *ref = dcalloc(T);
  char what[128];
  for (int k = 0; k < 3; ++k) {
    static const char *const q[3] = {"lse", "entropy", "logp"};
    for (int t = 0; t < T; ++t) ref[t] = g[0][k][t];
    snprintf(what, sizeof what, "lmhead fused vs cuBLASLt %s T%d C%d V%d", q[k], T, C, V);
    check_rel(what, ref, g[1][k], T, 1e-5);
  }
  vr_cutrain_lmhead_fwd(gm, d_lp, d_ent, d_lse, d_x, d_W, d_tgt, T, C, V, temp, chunk, d_logits, d_lp16, d_lpmax, 1, 0);
  float *again = malloc(T * 4);
  tohost(again, d_lse, T * 4);
  tohost(glp16b, d_lp16, n * 2);
  snprintf(what, sizeof what, "lmhead fused lse deterministic T%d V%d", T, V);
  check_same_bits(what, g[1][0], again, T * 4);
  snprintf(what, sizeof what, "lmhead fused stored log p deterministic T%d V%d", T, V);
  check_same_bits(what, glp16, glp16b, n * 2);
  /* the ping-pong forms, single blocks and pairs: the cooperative form's bits (each row's
   * statistics do not depend on which consumer warpgroup, block or tile shape took it) */
  float *gmax2 = malloc((size_t)T * nseg * 4);
  for (int f = 0; f < 2; ++f) {
    const int form = f ? VR_CUTRAIN_LMHEAD_FORM_PP2 : VR_CUTRAIN_LMHEAD_FORM_PP;
    const char *fn = f ? "ping-pong pairs" : "ping-pong";
    /* every output and the statistics workspace overwritten first: no check may pass on the
     * cooperative run's values */
    CK(cudaMemset(d_lp16, 0xff, n * 2));
    CK(cudaMemset(d_lpmax, 0xff, (size_t)T * nseg * 4));
    CK(cudaMemset(d_logits, 0xff, (size_t)chunk * V * 4));
    CK(cudaMemset(d_lse, 0xff, T * 4));
    CK(cudaMemset(d_ent, 0xff, T * 4));
    CK(cudaMemset(d_lp, 0xff, T * 4));
    const int ran = vr_cutrain_lmhead_fwd(gm, d_lp, d_ent, d_lse, d_x, d_W, d_tgt, T, C, V, temp, chunk, d_logits,
                                          d_lp16, d_lpmax, form, 0);
    if (ran != form) {
      printf("FAIL lmhead fused %s T%d C%d V%d chunk%d: form %d ran\n", fn, T, C, V, chunk, ran);
      g_fail = 1;
    }
    for (int k = 0; k < 3; ++k) {
      static const char *const q[3] = {"lse", "entropy", "logp"};
      tohost(again, k == 0 ? d_lse : k == 1 ? d_ent : d_lp, T * 4);
      snprintf(what, sizeof what, "lmhead %s = cooperative %s T%d C%d V%d", fn, q[k], T, C, V);
      check_same_bits(what, g[1][k], again, T * 4);
    }
    tohost(glp16b, d_lp16, n * 2);
    tohost(gmax2, d_lpmax, (size_t)T * nseg * 4);
    snprintf(what, sizeof what, "lmhead %s = cooperative stored log p T%d V%d", fn, T, V);
    check_same_bits(what, glp16, glp16b, n * 2);
    snprintf(what, sizeof what, "lmhead %s = cooperative segment maxima T%d V%d", fn, T, V);
    check_same_bits(what, gmax, gmax2, (size_t)T * nseg * 4);
  }
  free(gmax2);
  free(again), free(ref);
  for (int f = 0; f < 2; ++f)
    for (int k = 0; k < 3; ++k) free(g[f][k]);
  dfree(d_x), dfree(d_W), dfree(d_lp16), dfree(d_lp), dfree(d_ent), dfree(d_lse), dfree(d_logits), dfree(d_lpmax);
  dfree(d_tgt);
  free(x), free(xf), free(W), free(wf), free(tgt), free(rl), free(rlse), free(rent), free(rlp), free(rlsm);
  free(gmax), free(lsm), free(glp16), free(glp16b);
}

/* ------------------------------------------------------------ attention */

/* Host reference of causal GQA attention over packed sequences (qkv float view (T, ld)):
 * O (T, H*D), lse2 (T, H) log2-domain; with dO given, dqkv (T, ld) (q, k, v columns). */
typedef struct {
  int H, Hkv, D, ld, koff, voff, window; /* window > 0: keys j of query i with i - j < window */
} attn_shape;

static void ref_attention(const attn_shape *a, const float *qkv, const int32_t *cu, int n, const float *dO, double *O,
                          double *lse2, double *dqkv) {
  const int H = a->H, D = a->D, ld = a->ld, G = a->H / a->Hkv;
  const double scale = 1.0 / sqrt((double)D);
  int maxlen = 0;
  for (int s = 0; s < n; ++s) maxlen = cu[s + 1] - cu[s] > maxlen ? cu[s + 1] - cu[s] : maxlen;
  double *P = malloc((size_t)maxlen * sizeof(double)), *dP = malloc((size_t)maxlen * sizeof(double));
  for (int s = 0; s < n; ++s)
    for (int h = 0; h < H; ++h) {
      const int hk = h / G;
      for (int i = 0; i < cu[s + 1] - cu[s]; ++i) {
        const size_t ti = (size_t)cu[s] + i;
        const float *q = qkv + ti * ld + h * D;
        double m = -INFINITY;
        const int j0 = a->window > 0 && i - a->window + 1 > 0 ? i - a->window + 1 : 0;
        for (int j = j0; j <= i; ++j) {
          const float *k = qkv + ((size_t)cu[s] + j) * ld + a->koff + hk * D;
          double d = 0;
          for (int c = 0; c < D; ++c) d += (double)q[c] * k[c];
          P[j] = d * scale;
          m = fmax(m, P[j]);
        }
        double z = 0;
        for (int j = j0; j <= i; ++j) z += exp(P[j] - m);
        for (int j = j0; j <= i; ++j) P[j] = exp(P[j] - m) / z;
        if (lse2) lse2[ti * H + h] = (m + log(z)) / log(2.0);
        double *o = O + ti * H * D + h * D;
        for (int c = 0; c < D; ++c) o[c] = 0;
        for (int j = j0; j <= i; ++j) {
          const float *v = qkv + ((size_t)cu[s] + j) * ld + a->voff + hk * D;
          for (int c = 0; c < D; ++c) o[c] += P[j] * v[c];
        }
        if (!dO) continue;
        const float *go = dO + ti * H * D + h * D;
        double delta = 0;
        for (int c = 0; c < D; ++c) delta += (double)go[c] * o[c];
        for (int j = j0; j <= i; ++j) {
          const size_t tj = (size_t)cu[s] + j;
          const float *v = qkv + tj * ld + a->voff + hk * D, *k = qkv + tj * ld + a->koff + hk * D;
          double d = 0;
          for (int c = 0; c < D; ++c) d += (double)go[c] * v[c];
          dP[j] = P[j] * (d - delta) * scale; /* d(score) */
          double *dq = dqkv + ti * ld + h * D, *dk = dqkv + tj * ld + a->koff + hk * D,
                 *dv = dqkv + tj * ld + a->voff + hk * D;
          for (int c = 0; c < D; ++c) {
            dq[c] += dP[j] * k[c];
            dk[c] += dP[j] * q[c];
            dv[c] += P[j] * go[c];
          }
        }
      }
    }
  free(P), free(dP);
}

/* generic_fwd: the generic forward even where the tensor-core one runs D. split: the dK / dV
 * kernel per query head (the split table; tensor-core path with H > Hkv only). */
static void test_attention_train(int H, int Hkv, int D, int window, int generic_fwd, int split, const int *lens,
                                 int n) {
  int T = 0;
  for (int i = 0; i < n; ++i) T += lens[i];
  attn_shape a = {H, Hkv, D, (H + 2 * Hkv) * D, H * D, (H + Hkv) * D, window};
  const int ld = a.ld, HD = H * D;
  const int fa = !generic_fwd && (D == 16 || D == 32 || D == 64 || D == 128);
  float *qf, *dof;
  uint16_t *qkv = rand_bf((size_t)T * ld, 2.f, &qf), *dO = rand_bf((size_t)T * HD, 1.f, &dof);
  int32_t *cu = malloc((n + 1) * 4), *tiles = malloc((size_t)2 * (T + n) * 4),
          *btiles = malloc((size_t)2 * (T + n) * 4);
  cu[0] = 0;
  for (int i = 0; i < n; ++i) cu[i + 1] = cu[i] + lens[i];
  const int nt = vr_cutrain_attention_tiles(cu, n, vr_cuda_attention_tile_rows(D, T), tiles, T + n);
  const int nbt = vr_cutrain_attention_tiles(cu, n, 64, btiles, T + n);
  int32_t meta[4] = {n, nt, 0, 0};
  double *O = dcalloc((size_t)T * HD), *lse = dcalloc((size_t)T * H), *dq = dcalloc((size_t)T * ld);
  ref_attention(&a, qf, cu, n, dof, O, lse, dq);
  uint16_t *d_qkv = todev(qkv, (size_t)T * ld * 2), *d_o = dmalloc((size_t)T * HD * 2),
           *d_do = todev(dO, (size_t)T * HD * 2), *d_dq = dmalloc((size_t)T * ld * 2);
  float *d_lse = dmalloc((size_t)T * H * 4), *d_delta = dmalloc((size_t)T * H * 4);
  int32_t *d_cu = todev(cu, (n + 1) * 4), *d_t = todev(tiles, (size_t)2 * nt * 4),
          *d_bt = todev(btiles, (size_t)2 * nbt * 4), *d_meta = todev(meta, 16);
  const float scale = 1.f / sqrtf((float)D);
  split = split && vr_cutrain_attention_bwd_tc(D, window) && H > Hkv;
  float *d_split = split ? dmalloc(vr_cutrain_attention_bwd_split_scratch(T, H, D) * 4) : NULL;
  if (fa)
    vr_cuda_attention_lse(d_qkv, ld, 0, a.koff, a.voff, d_o, HD, d_lse, d_cu, d_t, d_meta, nt, H, Hkv, D, 1, window,
                          scale, T, 0);
  else
    vr_cutrain_attention_fwd_generic(d_o, HD, d_lse, d_qkv, ld, 0, a.koff, a.voff, d_cu, d_bt, nbt, H, Hkv, D, window,
                                     scale, 0);
  uint16_t *go = malloc((size_t)T * HD * 2), *gd = malloc((size_t)T * ld * 2), *gd2 = malloc((size_t)T * ld * 2);
  float *gl = malloc((size_t)T * H * 4);
  tohost(go, d_o, (size_t)T * HD * 2);
  tohost(gl, d_lse, (size_t)T * H * 4);
  char what[192], shape[96];
  snprintf(shape, sizeof shape, "H%d/%d D%d win%d n%d T%d", H, Hkv, D, window, n, T);
  snprintf(what, sizeof what, "attention_lse out %s %s", fa ? "fa" : "generic", shape);
  check_rel_bf(what, O, go, (size_t)T * HD, 1e-2);
  snprintf(what, sizeof what, "attention_lse lse %s %s", fa ? "fa" : "generic", shape);
  check_rel(what, lse, gl, (size_t)T * H, 1e-3);
  /* each backward kernel that runs this shape here: the tensor-core ones where they apply (mma.sync
   * anywhere, wgmma on an sm_90a build on Hopper), else the generic one */
  static const char *const knames[] = {"auto",     "generic",  "mma",       "wgmma",    "wgmma-ss",
                                       "wgmma-ra", "wgmma-co", "wgmma-cop", "wgmma-co4", "wgmma-co4h"};
  int kernels[10], nk = 0;
  if (!vr_cutrain_attention_bwd_tc(D, window)) kernels[nk++] = VR_CUTRAIN_ATTN_BWD_GENERIC;
  else {
    kernels[nk++] = VR_CUTRAIN_ATTN_BWD_MMA;
    if (vr_cutrain_attention_bwd_wgmma_ok(D, window)) {
      kernels[nk++] = VR_CUTRAIN_ATTN_BWD_WGMMA;
      kernels[nk++] = VR_CUTRAIN_ATTN_BWD_WGMMA_SS;
      kernels[nk++] = VR_CUTRAIN_ATTN_BWD_WGMMA_RA;
      kernels[nk++] = VR_CUTRAIN_ATTN_BWD_WGMMA_CO;
      kernels[nk++] = VR_CUTRAIN_ATTN_BWD_WGMMA_COP;
      kernels[nk++] = VR_CUTRAIN_ATTN_BWD_WGMMA_CO4;
      kernels[nk++] = VR_CUTRAIN_ATTN_BWD_WGMMA_CO4H;
    }
  }
  for (int ki = 0; ki < nk; ++ki) {
    const int kernel = kernels[ki];
    char kshape[128];
    snprintf(kshape, sizeof kshape, "%s/%s%s %s", fa ? "fa" : "generic", knames[kernel], split ? "-split" : "", shape);
    CK(cudaMemset(d_dq, 0, (size_t)T * ld * 2));
    vr_cutrain_attention_bwd(d_dq, d_qkv, ld, 0, a.koff, a.voff, d_o, d_do, HD, d_lse, d_delta, d_cu, d_bt, NULL, nbt,
                             H, Hkv, D, window, scale, d_split, T, kernel, 0);
    tohost(gd, d_dq, (size_t)T * ld * 2);
    /* dq, dk, dv separately (each has its own scale) */
    const char *names[3] = {"dq", "dk", "dv"};
    const int offs[3] = {0, a.koff, a.voff}, widths[3] = {HD, Hkv * D, Hkv * D};
    for (int part = 0; part < 3; ++part) {
      const size_t m = (size_t)T * widths[part];
      double *r = dcalloc(m);
      uint16_t *gp = malloc(m * 2);
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < widths[part]; ++c) {
          r[(size_t)t * widths[part] + c] = dq[(size_t)t * ld + offs[part] + c];
          gp[(size_t)t * widths[part] + c] = gd[(size_t)t * ld + offs[part] + c];
        }
      snprintf(what, sizeof what, "attention_bwd %s %s", names[part], kshape);
      check_rel_bf(what, r, gp, m, 2e-2);
      free(r), free(gp);
    }
    /* again with each kernel's tiles heaviest first (the engine's order): the same bits */
    int32_t *kt = malloc((size_t)2 * nbt * 4), *qt = malloc((size_t)2 * nbt * 4);
    uint64_t *sc = malloc((size_t)2 * nbt * 8);
    memcpy(kt, btiles, (size_t)2 * nbt * 4), memcpy(qt, btiles, (size_t)2 * nbt * 4);
    vr_cutrain_attention_tiles_sort(cu, kt, nbt, 1, sc);
    vr_cutrain_attention_tiles_sort(cu, qt, nbt, 0, sc);
    int32_t *d_kt = todev(kt, (size_t)2 * nbt * 4), *d_qt = todev(qt, (size_t)2 * nbt * 4);
    CK(cudaMemset(d_dq, 0xFF, (size_t)T * ld * 2));
    vr_cutrain_attention_bwd(d_dq, d_qkv, ld, 0, a.koff, a.voff, d_o, d_do, HD, d_lse, d_delta, d_cu, d_kt, d_qt, nbt,
                             H, Hkv, D, window, scale, d_split, T, kernel, 0);
    dfree(d_kt), dfree(d_qt);
    free(kt), free(qt), free(sc);
    tohost(gd2, d_dq, (size_t)T * ld * 2);
    snprintf(what, sizeof what, "attention_bwd deterministic, any tile order %s", kshape);
    check_same_bits(what, gd, gd2, (size_t)T * ld * 2);
    if (split && kernel == VR_CUTRAIN_ATTN_BWD_MMA) {
      /* dqkv 4 bytes past an 8-byte boundary: the split table's group sums one column a thread
       * (the 4-column form needs 8-byte stores), the same bits */
      uint16_t *d_dq2 = dmalloc((size_t)T * ld * 2 + 4);
      CK(cudaMemset(d_dq2, 0xFF, (size_t)T * ld * 2 + 4));
      vr_cutrain_attention_bwd(d_dq2 + 2, d_qkv, ld, 0, a.koff, a.voff, d_o, d_do, HD, d_lse, d_delta, d_cu, d_bt, NULL,
                               nbt, H, Hkv, D, window, scale, d_split, T, kernel, 0);
      tohost(gd2, d_dq2 + 2, (size_t)T * ld * 2);
      dfree(d_dq2);
      snprintf(what, sizeof what, "attention_bwd group sums 1 column a thread = 4 %s", kshape);
      check_same_bits(what, gd, gd2, (size_t)T * ld * 2);
    }
  }
  dfree(d_qkv), dfree(d_o), dfree(d_do), dfree(d_dq), dfree(d_lse);
  dfree(d_delta), dfree(d_cu), dfree(d_t), dfree(d_bt), dfree(d_meta);
  if (d_split) dfree(d_split);
  free(qkv), free(qf), free(dO), free(dof), free(cu), free(tiles), free(btiles), free(O), free(lse), free(dq);
  free(go), free(gd), free(gd2), free(gl);
}

/* The host reference's backward against central differences of its own forward
 * (L = sum dO . O) on a tiny GQA shape: the formulas the GPU is held to are right. */
static void test_attention_ref_fd(void) {
  const int n = 2, T = 8; /* lengths 3 and 5 */
  attn_shape a = {4, 2, 4, (4 + 4) * 4, 16, 24, 3};
  const int32_t cu[3] = {0, 3, 8};
  float *q = rand_f((size_t)T * a.ld, -1, 1), *dO = rand_f((size_t)T * a.H * a.D, -1, 1);
  double *O = dcalloc((size_t)T * a.H * a.D), *g = dcalloc((size_t)T * a.ld), *fd = dcalloc((size_t)T * a.ld);
  ref_attention(&a, q, cu, n, dO, O, NULL, g);
  const float h = 1e-3f;
  for (size_t i = 0; i < (size_t)T * a.ld; ++i) {
    double L[2];
    const float q0 = q[i], qs[2] = {q0 + h, q0 - h}; /* the steps as stored in fp32 */
    for (int sgn = 0; sgn < 2; ++sgn) {
      q[i] = qs[sgn];
      ref_attention(&a, q, cu, n, NULL, O, NULL, NULL);
      L[sgn] = 0;
      for (size_t k = 0; k < (size_t)T * a.H * a.D; ++k) L[sgn] += dO[k] * O[k];
    }
    q[i] = q0;
    fd[i] = (L[0] - L[1]) / ((double)qs[0] - qs[1]);
  }
  float *gf = malloc((size_t)T * a.ld * 4);
  for (size_t i = 0; i < (size_t)T * a.ld; ++i) gf[i] = (float)g[i];
  check_rel("attention reference backward vs finite differences H4/2 D4 win3", fd, gf, (size_t)T * a.ld, 1e-5);
  free(q), free(dO), free(O), free(g), free(fd), free(gf);
}

/* ------------------------------------------------------------ optimizer, reductions */

/* n elements from offset skip of the device buffer (skip 1: not 16-byte aligned, the scalar
 * loop alone; 0: the float4 loop, then the tail). */
static void test_sumsq(size_t n, size_t skip) {
  float *x = rand_f(n + skip, -1, 1), *d_x = todev(x, (n + skip) * 4);
  double r = 0, g[2], *d_o = dmalloc(8), *d_s = dmalloc(VR_CUTRAIN_SUMSQ_BLOCKS * 8);
  for (size_t i = skip; i < n + skip; ++i) r += (double)x[i] * x[i];
  vr_cutrain_sumsq(d_o, d_x + skip, n, d_s, 0);
  tohost(&g[0], d_o, 8);
  vr_cutrain_sumsq(d_o, d_x + skip, n, d_s, 0);
  tohost(&g[1], d_o, 8);
  const float gf = (float)g[0];
  char what[96];
  snprintf(what, sizeof what, "sumsq n%zu from +%zu (double)", n, skip);
  check_rel(what, &r, &gf, 1, 1e-7);
  snprintf(what, sizeof what, "sumsq deterministic n%zu from +%zu", n, skip);
  check_same_bits(what, &g[0], &g[1], 8);
  dfree(d_x), dfree(d_o), dfree(d_s);
  free(x);
}

static void test_adamw(void) {
  /* three tensors (weight decay 0.1, 0, 0.1) in one buffer, chunks of at most 65536 */
  const int64_t sizes[3] = {100003, 77, 150000};
  const float wds[3] = {1.f, 0.f, 1.f}; /* multipliers of weight_decay 0.1 */
  int64_t n = 0, off[16], len[16];
  float wd[16];
  int nc = 0;
  for (int k = 0; k < 3; ++k) {
    for (int64_t o = 0; o < sizes[k]; o += 65536) {
      off[nc] = n + o;
      len[nc] = sizes[k] - o < 65536 ? sizes[k] - o : 65536;
      wd[nc++] = wds[k];
    }
    n += sizes[k];
  }
  float *p = rand_f(n, -1, 1);
  double *rp = dcalloc(n), *rm = dcalloc(n), *rv = dcalloc(n);
  for (int64_t i = 0; i < n; ++i) rp[i] = p[i];
  float *d_p = todev(p, n * 4), *d_m = dmalloc(n * 4), *d_v = dmalloc(n * 4), *d_g = dmalloc(n * 4),
        *d_wd = todev(wd, nc * 4);
  double *d_sq = dmalloc(8), *d_s = dmalloc(VR_CUTRAIN_SUMSQ_BLOCKS * 8);
  int64_t *d_off = todev(off, nc * 8), *d_len = todev(len, nc * 8);
  uint16_t *d_p16 = dmalloc(n * 2);
  CK(cudaMemset(d_m, 0, n * 4));
  CK(cudaMemset(d_v, 0, n * 4));
  vr_cutrain_adamw_t hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 0, 0.f};
  for (int step = 1; step <= 3; ++step) {
    float *g = rand_f(n, -0.01f * step, 0.02f); /* norm ~ 3: the clip is active */
    CK(cudaMemcpy(d_g, g, n * 4, cudaMemcpyHostToDevice));
    vr_cutrain_sumsq(d_sq, d_g, n, d_s, 0);
    hp.step = step;
    vr_cutrain_adamw(d_p, d_p16, d_m, d_v, d_g, 0, d_off, d_len, d_wd, nc, d_sq, &hp, 0);
    double nrm = 0;
    for (int64_t i = 0; i < n; ++i) nrm += (double)g[i] * g[i];
    const double gs = fmin(1.0, hp.clip / (sqrt(nrm) + 1e-6));
    /* the hyperparameters as the kernel holds them (fp32): 1 - 0.999f is 1.3e-5 away from 0.001 */
    const double b1 = hp.beta1, b2 = hp.beta2, lr = hp.lr, eps = hp.eps;
    const double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
    for (int c = 0; c < nc; ++c)
      for (int64_t i = off[c]; i < off[c] + len[c]; ++i) {
        const double gi = g[i] * gs;
        rm[i] = b1 * rm[i] + (1 - b1) * gi;
        rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
        rp[i] = rp[i] * (1 - lr * hp.weight_decay * wd[c]) - (lr / bc1) * rm[i] / (sqrt(rv[i]) / sqrt(bc2) + eps);
      }
    free(g);
  }
  float *gp = malloc(n * 4), *gm = malloc(n * 4), *gv = malloc(n * 4);
  uint16_t *g16 = malloc(n * 2);
  tohost(gp, d_p, n * 4);
  tohost(gm, d_m, n * 4);
  tohost(gv, d_v, n * 4);
  tohost(g16, d_p16, n * 2);
  check_rel("adamw params after 3 clipped steps", rp, gp, n, 1e-5);
  check_rel("adamw first moments", rm, gm, n, 1e-5);
  check_rel("adamw second moments", rv, gv, n, 1e-5);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += g16[i] != f2bf(gp[i]);
  printf("%-4s adamw bf16 compute copy = bf16(params) (%lld differ)\n", bad ? "FAIL" : "ok", (long long)bad);
  if (bad) g_fail = 1;
  /* A pending gradient factor (grad_scale, clip 0) gives the bits of the gradients scaled in place
   * first; and vr_cutrain_adamw_rows (wd NULL) gives rows of the table as the update leaves them. */
  {
    float *g = rand_f(n, -0.02f, 0.02f), *p2 = malloc(n * 4), *m2 = malloc(n * 4), *v2 = malloc(n * 4);
    float *d_p2 = todev(gp, n * 4), *d_m2 = todev(gm, n * 4), *d_v2 = todev(gv, n * 4), *d_g2 = todev(g, n * 4);
    CK(cudaMemcpy(d_g, g, n * 4, cudaMemcpyHostToDevice));
    const int C = 96, R = (int)(n / C), nid = 500;
    int32_t ids[500];
    for (int i = 0; i < nid; ++i) ids[i] = i > 0 && i % 7 == 0 ? ids[i / 7] : irand(R); /* repeats too */
    int32_t *d_ids = todev(ids, sizeof ids);
    float *d_rows = dmalloc((size_t)nid * C * 4), *rows = malloc((size_t)nid * C * 4);
    vr_cutrain_adamw_t h2 = hp;
    h2.clip = 0.f, h2.step = 4, h2.grad_scale = 0.37f;
    vr_cutrain_adamw_rows(d_rows, d_p2, d_m2, d_v2, d_g2, 0, 0, d_ids, nid, C, NULL, &h2, 0);
    vr_cutrain_adamw(d_p2, NULL, d_m2, d_v2, d_g2, 0, d_off, d_len, NULL, nc, NULL, &h2, 0); /* the factor */
    vr_cutrain_scale(d_g, n, 0.37f, 0);                                                     /* in place */
    h2.grad_scale = 0.f;
    vr_cutrain_adamw(d_p, NULL, d_m, d_v, d_g, 0, d_off, d_len, NULL, nc, NULL, &h2, 0);
    tohost(gp, d_p, n * 4), tohost(gm, d_m, n * 4), tohost(gv, d_v, n * 4);
    tohost(p2, d_p2, n * 4), tohost(m2, d_m2, n * 4), tohost(v2, d_v2, n * 4);
    tohost(rows, d_rows, (size_t)nid * C * 4);
    const int same = !memcmp(gp, p2, n * 4) && !memcmp(gm, m2, n * 4) && !memcmp(gv, v2, n * 4);
    printf("%-4s adamw with grad_scale 0.37 == gradients scaled in place, then adamw (bit for bit)\n",
           same ? "ok" : "FAIL");
    int64_t rb = 0;
    for (int i = 0; i < nid; ++i) rb += memcmp(rows + (size_t)i * C, gp + (size_t)ids[i] * C, (size_t)C * 4) != 0;
    printf("%-4s adamw_rows: %d rows of the table before the update == the rows after it (%lld differ)\n",
           rb ? "FAIL" : "ok", nid, (long long)rb);
    if (!same || rb) g_fail = 1;
    dfree(d_p2), dfree(d_m2), dfree(d_v2), dfree(d_g2), dfree(d_ids), dfree(d_rows);
    free(g), free(p2), free(m2), free(v2), free(rows);
  }
  dfree(d_p), dfree(d_m), dfree(d_v), dfree(d_g), dfree(d_sq), dfree(d_s);
  dfree(d_wd), dfree(d_off), dfree(d_len), dfree(d_p16);
  free(p), free(rp), free(rm), free(rv), free(gp), free(gm), free(gv), free(g16);
}

static void test_convert(size_t n) {
  float *x = rand_f(n, -100, 100);
  for (size_t i = 0; i < n; i += 7) x[i] *= 1e-30f; /* tiny and denormal-adjacent values too */
  float *d_x = todev(x, n * 4), *d_back = dmalloc(n * 4), *back = malloc(n * 4);
  uint16_t *d_b = dmalloc(n * 2), *b = malloc(n * 2);
  vr_cuda_convert_to_bf16(d_b, d_x, 0, n, 0);
  vr_cuda_convert_to_f32(d_back, d_b, 2, n, 0);
  tohost(b, d_b, n * 2);
  tohost(back, d_back, n * 4);
  size_t bad = 0, bad2 = 0;
  for (size_t i = 0; i < n; ++i) {
    bad += b[i] != f2bf(x[i]);
    bad2 += back[i] != bf2f(b[i]);
  }
  printf("%-4s fp32 -> bf16 round to nearest even, bf16 -> fp32 exact (n%zu: %zu / %zu differ)\n",
         bad || bad2 ? "FAIL" : "ok", n, bad, bad2);
  if (bad || bad2) g_fail = 1;
  dfree(d_x), dfree(d_back), dfree(d_b);
  free(x), free(back), free(b);
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  g_rng = vr_test_seed("test_cuda_train_kernels", 20);
  if (!g_rng) g_rng = 1;
  test_rmsnorm_bwd(5, 64);
  test_rmsnorm_bwd(300, 896);
  test_rmsnorm_bwd(131, 1000);
  test_rmsnorm_fd(3, 16);
  test_colsum(200, 1152);
  test_colsum(7, 13);
  test_value(300, 896);
  test_value(5, 32);
  test_swiglu_bwd(33, 4864);
  test_swiglu_bwd(5, 13);
  test_rope_bwd(70, 14, 2, 64);
  test_rope_bwd(9, 8, 8, 128);
  test_embed_bwd(500, 1000, 96);
  test_embed_bwd(64, 7, 33);
  test_logsoftmax(7, 50000, 0.7f);
  test_logsoftmax(5, 1001, 1.0f);
  test_logsoftmax_fd(2, 33, 0.8f);
  vr_cuda_gemm_t *gm = NULL;
  if (vr_cuda_gemm_init(&gm, 32u << 20) != 0) {
    printf("FAIL cuBLASLt init\n");
    return 1;
  }
  test_lmhead(gm, 300, 128, 5000, 128, 1.0f);
  test_lmhead(gm, 64, 64, 1024, 64, 0.6f);
  test_lmhead(gm, 37, 32, 257, 37, 1.0f); /* the training fixtures' odd vocabulary: ld 257 in every GEMM */
  test_lmhead(gm, 300, 896, 4099, 300, 0.8f); /* the fused forward's shapes through the backward too */
  /* the fused forward: V past a multiple of 256 / 128, T past the 128-row tile, C 64 / 896 / 2048,
   * temperatures, the real vocabularies on few rows, a workspace of several launches */
  test_lmhead_fused(gm, 300, 64, 97, 300, 0.7f);
  test_lmhead_fused(gm, 129, 896, 1000, 129, 1.0f);
  test_lmhead_fused(gm, 200, 2048, 4099, 200, 1.3f);
  test_lmhead_fused(gm, 300, 128, 1000, 3, 1.0f); /* 3 x 1000 floats: launches of 128, 128, 44 rows */
  test_lmhead_fused(gm, 700, 64, 12000, 700, 0.9f); /* 517 tiles: several a block, a partial last row tile */
  test_lmhead_fused(gm, 5, 896, 151936, 5, 1.0f);
  test_lmhead_fused(gm, 3, 2048, 128256, 3, 0.6f);
  vr_cuda_gemm_free(gm);
  test_attention_ref_fd();
  static const int small[] = {1, 17, 64, 65, 130, 200};
  static const int medium_a[] = {300, 513}, medium_b[] = {257, 700, 64};
  test_attention_train(4, 4, 64, 0, 0, 0, small, 6);
  test_attention_train(8, 2, 64, 0, 0, 0, small, 6);
  test_attention_train(8, 1, 64, 0, 0, 0, small, 6);
  test_attention_train(4, 4, 128, 0, 0, 0, small, 6);
  test_attention_train(8, 2, 128, 0, 0, 0, small, 6);
  test_attention_train(8, 1, 128, 0, 0, 0, small, 6);
  test_attention_train(16, 2, 128, 0, 0, 0, medium_a, 2);
  test_attention_train(14, 2, 64, 0, 0, 0, medium_b, 3);
  /* the split dK / dV (the engine's choice for few key heads) */
  test_attention_train(8, 2, 64, 0, 0, 1, small, 6);
  test_attention_train(8, 1, 128, 0, 0, 1, small, 6);
  test_attention_train(14, 2, 64, 0, 0, 1, medium_b, 3);
  /* the generic kernels: head dims without tensor-core kernels, sliding windows */
  test_attention_train(4, 2, 8, 0, 0, 0, small, 6);
  test_attention_train(4, 1, 16, 4, 0, 0, small, 6);
  test_attention_train(8, 2, 64, 37, 0, 0, small, 6);
  test_attention_train(4, 4, 96, 0, 0, 0, small, 6);
  test_attention_train(8, 2, 64, 0, 1, 0, small, 6);
  test_sumsq(3000017, 0);
  test_sumsq(3000017, 1);
  test_sumsq(5, 0);
  test_sumsq(4 * 262144 * 2 + 8, 0); /* the float4 loop's last round with one group of the pair */
  test_adamw();
  test_convert(100003);
  /* after the older checks (their random inputs stay those of the fixed seed) */
  test_rmsnorm_bwd(37, 2048); /* the fused kernel at 8 columns per thread, the last block partial */
  test_rmsnorm_bwd(77, 96);   /* the warp-per-row form (C % 4 == 0, C <= 896): one group a lane, partial blocks */
  test_rmsnorm_bwd(23, 516);  /* the warp-per-row form with its last column groups masked */
  test_rmsnorm_bwd(40, 130);  /* C % 4 != 0: the block form */
  test_rmsnorm_bwd(9, 4500);  /* above the fused kernel's 4096 columns: the per-row kernel + two dw passes */
  test_rmsnorm_bwd16(5, 64);
  test_rmsnorm_bwd16(300, 896);
  test_rmsnorm_bwd16(131, 1000);
  test_rmsnorm_bwd16(37, 2048);
  test_rmsnorm_bwd16(23, 516);
  test_rmsnorm_bwd16(17, 4096); /* the largest hidden size it takes */
  test_colsum(3000, 130);     /* more chunks than the final pass's 16 row groups, a partial column block */
  test_colsum_forms(3000, 1032);
  test_colsum_forms(65, 8);
  test_logsoftmax(3, 4100, 0.25f); /* |z| up to 24: the stored log p's bound where it matters */
  /* the fused gate/up + SwiGLU: T past the 64-row tile and below it, one row, C 64 / 896 / 2048,
   * F one tile / Qwen2-0.5B's 4864 (38 tile columns), several bands, more tiles than multiprocessors */
  test_gu_swiglu(300, 64, 128);
  test_gu_swiglu(129, 896, 4864);
  test_gu_swiglu(1, 2048, 256);
  test_gu_swiglu(130, 2048, 1024);
  test_gu_swiglu(4200, 2048, 128); /* 66 row blocks of 64: two bands of 64 */
  test_gu_swiglu(2000, 256, 1280); /* 320 tiles: 2-3 a block, both consumer warpgroups, several bands */
  test_gu_swiglu(1100, 128, 2048); /* 288 tiles */
  /* batches of 4096+ rows: on an sm_90a build on Hopper the forward (with its lse, which the
   * backward reads) is the FA3 kernel (vr_cuda_attention_kernel), elsewhere FA64 / FA128 */
  static const int large[] = {2900, 1200, 17};
  printf("     attention forward kernel at T=%d: D64 %s, D128 %s\n", 4117,
         vr_cuda_attention_kernel_name(vr_cuda_attention_kernel(64, 4117)),
         vr_cuda_attention_kernel_name(vr_cuda_attention_kernel(128, 4117)));
  test_attention_train(2, 1, 64, 0, 0, 0, large, 3);
  test_attention_train(2, 2, 128, 0, 0, 0, large, 3);
  /* the wgmma kernels' edges (each shape also runs the mma.sync ones): lengths around the
   * 64-row tile and the stage ring (1, 63, 64, 65, 127, 129, several tiles of one key tile's
   * query loop), the Qwen2 / Llama group shapes, split and not */
  static const int edges[] = {63, 1, 129, 64, 127, 65, 2, 391};
  test_attention_train(14, 2, 64, 0, 0, 1, edges, 8);
  test_attention_train(32, 8, 64, 0, 0, 0, edges, 8);
  test_attention_train(8, 2, 128, 0, 0, 1, edges, 8);
  test_attention_train(6, 3, 128, 0, 0, 0, edges, 8);
  test_attention_train(2, 1, 64, 0, 0, 1, large, 3);
  printf("%s\n", g_fail ? "FAILED" : "all training kernel checks passed");
  return g_fail;
}
