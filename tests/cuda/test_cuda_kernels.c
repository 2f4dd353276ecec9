/* test_cuda_kernels.c: every kernel of the CUDA backend against a plain CPU
 * computation in double precision on pseudo-random inputs (a fixed seed unless
 * VR_TEST_SEED is set; the seed is printed: tests/common/vr_test_seed.h).
 * Outputs are poisoned (NaN) before each launch so an unwritten element fails
 * the check.
 * Exit code: 0 pass, 1 fail, 77 no GPU (ctest: skipped). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <fcntl.h>
#include <unistd.h>

#include "vr_cuda_check.h"
#include "vr_cuda_ops.h"
#include "verl_reward/status.h"
#include "vr_gemm_tune.h"
#include "vr_test_seed.h"
#include "cuda_test_util.h"

/* ------------------------------------------------------------ attention */

/* Every element within tol of ref (a bf16 output of values in [-2, 2]: a few bf16 ulps). */
static void check_maxabs(const char *what, const double *ref, const float *got, size_t n, double tol) {
  double maxd = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = fabs(got[i] - ref[i]);
    if (!(d <= maxd)) maxd = d; /* NaN counts as over */
  }
  if (!(maxd <= tol)) {
    printf("FAIL %-58s maxabs %.2e > %.1e\n", what, maxd, tol);
    g_fail = 1;
  }
}

/* The configuration flags of the FA3 kernel as " c2 head-inner ..." into buf (a test's name). */
static void fa3_flag_names(int flags, char *buf, size_t n) {
  snprintf(buf, n, "%s%s%s%s%s%s", flags & VR_CUDA_FA3_C2 ? " c2" : "", flags & VR_CUDA_FA3_C3 ? " c3" : "",
           flags & VR_CUDA_FA3_HEAD_INNER ? " head-inner" : "", flags & VR_CUDA_FA3_EXP2_POLY ? " poly" : "",
           flags & VR_CUDA_FA3_PINGPONG ? " pp" : flags & VR_CUDA_FA3_NO_PINGPONG ? " np" : "",
           flags & VR_CUDA_FA3_PERSIST ? " persist" : "");
}

/* force: the kernel to run (vr_cuda_attention_run), or NULL for the automatic choice
 * (vr_cuda_attention with the batch's rows as the hint). split: the short batches' key-split
 * kernel instead (vr_cuda_attention_split, 64-row tiles; force ignored); its two passes (one
 * block per item, then 3 blocks looping) must also agree bit for bit. fa3_flags: with force
 * FA3 and nonzero, that configuration (vr_cuda_attention_fa3 and its tile rows). */
static void test_attention_k(const vr_cuda_attn_kernel_t *force, int split, int fa3_flags, int H, int Hkv, int D,
                             int causal, int window, const int *lens, int n) {
  int T = 0;
  for (int i = 0; i < n; ++i) T += lens[i];
  const int ld = (H + 2 * Hkv) * D, qoff = 0, koff = H * D, voff = (H + Hkv) * D;
  float *qf;
  uint16_t *qkv = rand_bf((size_t)T * ld, 2.0f, &qf);
  int32_t *cu = malloc((n + 1) * 4), *tiles = malloc((size_t)2 * (T + n) * 4), meta[4] = {n, 0, 0, 0};
  cu[0] = 0;
  int nt = 0;
  const vr_cuda_attn_kernel_t kernel =
      split ? VR_CUDA_ATTN_KERNEL_FA64 : force ? *force : vr_cuda_attention_kernel(D, T); /* its tile rows */
  const int fa3_cfg = kernel == VR_CUDA_ATTN_KERNEL_FA3 && fa3_flags;
  const int tile_rows = fa3_cfg ? vr_cuda_attention_fa3_rows(D, fa3_flags) : vr_cuda_attention_kernel_rows(kernel, D);
  for (int i = 0; i < n; ++i) {
    cu[i + 1] = cu[i] + lens[i];
    for (int q0 = 0; q0 < lens[i]; q0 += tile_rows) {
      tiles[2 * nt] = i;
      tiles[2 * nt + 1] = q0;
      ++nt;
    }
  }
  meta[1] = nt;
  double *ref = calloc((size_t)T * H * D, sizeof(double));
  const double scale = 1.0 / sqrt((double)D);
  double *sc = malloc((size_t)T * sizeof(double));
  for (int s = 0; s < n; ++s)
    for (int h = 0; h < H; ++h) {
      const int hk = h / (H / Hkv);
      for (int i = 0; i < lens[s]; ++i) {
        const float *q = qf + (size_t)(cu[s] + i) * ld + qoff + h * D;
        double mx = -INFINITY;
        for (int j = 0; j < lens[s]; ++j) {
          int ok = 1;
          if (causal && j > i) ok = 0;
          if (window > 0 && (i - j >= window || j - i >= window)) ok = 0;
          sc[j] = -INFINITY;
          if (!ok) continue;
          const float *k = qf + (size_t)(cu[s] + j) * ld + koff + hk * D;
          double d = 0;
          for (int c = 0; c < D; ++c) d += (double)q[c] * k[c];
          sc[j] = d * scale;
          if (sc[j] > mx) mx = sc[j];
        }
        double sum = 0;
        for (int j = 0; j < lens[s]; ++j) sum += sc[j] == -INFINITY ? 0 : exp(sc[j] - mx);
        double *o = ref + (size_t)(cu[s] + i) * H * D + h * D;
        for (int j = 0; j < lens[s]; ++j) {
          if (sc[j] == -INFINITY) continue;
          const double p = exp(sc[j] - mx) / sum;
          const float *v = qf + (size_t)(cu[s] + j) * ld + voff + hk * D;
          for (int c = 0; c < D; ++c) o[c] += p * v[c];
        }
      }
    }
  uint16_t *d_qkv = todev(qkv, (size_t)T * ld * 2);
  int32_t *d_cu = todev(cu, (n + 1) * 4), *d_tiles = todev(tiles, (size_t)2 * nt * 4), *d_meta = todev(meta, 16);
  uint16_t *d_out = dmalloc((size_t)T * H * D * 2);
  uint16_t *out = malloc((size_t)T * H * D * 2), *out0 = malloc((size_t)T * H * D * 2);
  float *d_part = NULL;
  int32_t *d_cnt = NULL;
  if (split) {
    size_t cnt_bytes = 0;
    d_part = dmalloc(vr_cuda_attention_split_scratch(H, D, &cnt_bytes));
    d_cnt = dmalloc(cnt_bytes);
    CK(cudaMemset(d_cnt, 0, cnt_bytes));
  }
  char what[160], cfg[48] = "";
  if (fa3_cfg) fa3_flag_names(fa3_flags, cfg, sizeof cfg);
  for (int pass = 0; pass < 2; ++pass) {
    const int grid = pass == 0 ? nt : 3; /* pass 1: fewer blocks than tiles (graph mode) */
    CK(cudaMemset(d_out, 0xFF, (size_t)T * H * D * 2));
    if (split)
      vr_cuda_attention_split(d_qkv, ld, qoff, koff, voff, d_out, H * D, d_cu, d_tiles, d_meta,
                              pass == 0 ? vr_cuda_attention_split_items(nt) : 3, H, Hkv, D, causal, window,
                              (float)scale, d_part, d_cnt, 0);
    else if (fa3_cfg)
      vr_cuda_attention_fa3(d_qkv, ld, T, qoff, koff, voff, d_out, H * D, NULL, d_cu, d_tiles, d_meta, grid, H, Hkv, D,
                            causal, window, (float)scale, fa3_flags, 0);
    else if (force)
      vr_cuda_attention_run(kernel, d_qkv, ld, qoff, koff, voff, d_out, H * D, d_cu, d_tiles, d_meta, grid, H, Hkv, D,
                            causal, window, (float)scale, T, 0);
    else
      vr_cuda_attention(d_qkv, ld, qoff, koff, voff, d_out, H * D, d_cu, d_tiles, d_meta, grid, H, Hkv, D, causal,
                        window, (float)scale, T, 0);
    tohost(out, d_out, (size_t)T * H * D * 2);
    float *of = bf_arr_to_f(out, (size_t)T * H * D);
    snprintf(what, sizeof what, "attention %s%s H%d/%d D%d %s win%d n%d T%d grid%d%s",
             split ? "split" : vr_cuda_attention_kernel_name(kernel), force || split ? "" : " (auto)", H, Hkv, D,
             causal ? "causal" : "bidir", window, n, T, grid, cfg);
    check_rel(what, ref, of, (size_t)T * H * D, 1e-2);
    check_maxabs(what, ref, of, (size_t)T * H * D, 3e-2);
    free(of);
    if (pass == 0) memcpy(out0, out, (size_t)T * H * D * 2);
    else if (split && memcmp(out0, out, (size_t)T * H * D * 2)) {
      printf("FAIL %-58s grid %d and grid 3 differ (not deterministic)\n", what, nt);
      g_fail = 1;
    }
  }
  if (split) {
    int32_t cnt0[4];
    tohost(cnt0, d_cnt, sizeof cnt0);
    if (cnt0[0] || cnt0[1] || cnt0[2] || cnt0[3]) {
      printf("FAIL %-58s counters not left zero\n", what);
      g_fail = 1;
    }
    CK(cudaFree(d_part));
    CK(cudaFree(d_cnt));
  }
  free(out0);
  CK(cudaFree(d_qkv));
  CK(cudaFree(d_cu));
  CK(cudaFree(d_tiles));
  CK(cudaFree(d_meta));
  CK(cudaFree(d_out));
  free(qkv), free(qf), free(cu), free(tiles), free(ref), free(sc), free(out);
}

static void test_attention(const vr_cuda_attn_kernel_t *force, int H, int Hkv, int D, int causal, int window,
                           const int *lens, int n) {
  test_attention_k(force, 0, 0, H, Hkv, D, causal, window, lens, n);
}

/* The short batches' key-split kernel against the double reference: one sequence of 256
 * (roberta-base's 1x256 shape, 4 tiles of 4 key tiles), ragged batches (tiles of 1..5 key
 * tiles, sequences of one tile), causal (tiles of 1..4 key tiles, ranges of unequal length),
 * GQA / MQA, a sliding window, and 1100 rows (18 tiles: those past the scratch's 16 run
 * whole). */
static void attention_split_suite(void) {
  printf("-- attention: key-split kernel (short batches)\n");
  const int one256[1] = {256}, ragged[5] = {300, 1, 130, 64, 65}, one1100[1] = {1100};
  const int dims[] = {16, 32, 64, 128};
  for (size_t di = 0; di < sizeof dims / sizeof dims[0]; ++di) {
    const int D = dims[di];
    test_attention_k(NULL, 1, 0, 4, 4, D, 0, 0, one256, 1);
    test_attention_k(NULL, 1, 0, 4, 2, D, 1, 0, ragged, 5);
  }
  test_attention_k(NULL, 1, 0, 12, 12, 64, 0, 0, one256, 1); /* roberta-base heads */
  test_attention_k(NULL, 1, 0, 8, 2, 64, 1, 0, one256, 1);   /* llama-1b-like GQA, causal */
  test_attention_k(NULL, 1, 0, 8, 1, 64, 0, 0, ragged, 5);   /* MQA */
  test_attention_k(NULL, 1, 0, 4, 2, 64, 1, 100, ragged, 5); /* sliding window */
  test_attention_k(NULL, 1, 0, 2, 2, 64, 0, 0, one1100, 1);
  test_attention_k(NULL, 1, 0, 2, 1, 128, 1, 0, one1100, 1);
  int ok = vr_cuda_attention_split_fits(64, 256) && vr_cuda_attention_split_fits(128, 512) &&
           !vr_cuda_attention_split_fits(64, 513) && !vr_cuda_attention_split_fits(64, 0) &&
           !vr_cuda_attention_split_fits(8, 256) && !vr_cuda_attention_split_fits(80, 256);
  printf("%s key-split attention: head dims 16/32/64/128, batches of 1..512 rows\n", ok ? "ok  " : "FAIL");
  if (!ok) g_fail = 1;
}

/* The automatic choice by shape (host only). */
static void test_attention_choice(void) {
  static const struct {
    int D, rows;
    vr_cuda_attn_kernel_t want;
  } cases[] = {
      {64, 4096, VR_CUDA_ATTN_KERNEL_FA128},  {64, 0, VR_CUDA_ATTN_KERNEL_FA128},
      {16, 1 << 20, VR_CUDA_ATTN_KERNEL_FA128}, {64, 4095, VR_CUDA_ATTN_KERNEL_FA64},
      {32, 1, VR_CUDA_ATTN_KERNEL_FA64},      {128, 1 << 20, VR_CUDA_ATTN_KERNEL_FA64},
      {80, 4096, VR_CUDA_ATTN_KERNEL_GENERIC}, {8, 64, VR_CUDA_ATTN_KERNEL_GENERIC},
      {128, 4095, VR_CUDA_ATTN_KERNEL_FA64},  {64, 511, VR_CUDA_ATTN_KERNEL_FA64},
      {128, 511, VR_CUDA_ATTN_KERNEL_FA64},   {64, 512, VR_CUDA_ATTN_KERNEL_FA64},
      {128, 512, VR_CUDA_ATTN_KERNEL_FA64},
  };
  int ok = 1;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    vr_cuda_attn_kernel_t want = cases[i].want;
    /* where the Hopper kernel runs (sm_90a build, compute 9.0 device) it takes D 64 / 128 from
     * VR_CUDA_ATTN_FA3_MIN_ROWS rows */
    if (cases[i].rows >= VR_CUDA_ATTN_FA3_MIN_ROWS && vr_cuda_attention_kernel_fits(VR_CUDA_ATTN_KERNEL_FA3, cases[i].D))
      want = VR_CUDA_ATTN_KERNEL_FA3;
    const vr_cuda_attn_kernel_t got = vr_cuda_attention_kernel(cases[i].D, cases[i].rows);
    if (got != want) {
      printf("FAIL attention choice D%d rows %d: %s, expected %s\n", cases[i].D, cases[i].rows, vr_cuda_attention_kernel_name(got),
             vr_cuda_attention_kernel_name(want));
      ok = 0;
    }
  }
  ok &= vr_cuda_attention_kernel_rows(VR_CUDA_ATTN_KERNEL_FA128, 64) == 128 &&
        vr_cuda_attention_kernel_rows(VR_CUDA_ATTN_KERNEL_FA64, 128) == 64 &&
        vr_cuda_attention_kernel_rows(VR_CUDA_ATTN_KERNEL_GENERIC, 80) == 64;
  /* FA3: the library's configuration is one of the selectable ones */
  ok &= vr_cuda_attention_fa3_rows(64, VR_CUDA_FA3_C2) == 128 && vr_cuda_attention_fa3_rows(64, VR_CUDA_FA3_C3) == 192 &&
        vr_cuda_attention_fa3_rows(128, VR_CUDA_FA3_C2) == 128 && vr_cuda_attention_fa3_rows(128, 0) == 128;
  for (int D = 64; D <= 128; D += 64) {
    const int r = vr_cuda_attention_kernel_rows(VR_CUDA_ATTN_KERNEL_FA3, D);
    ok &= r == vr_cuda_attention_fa3_rows(D, 0) && (r == 128 || r == 192) && r % VR_CUDA_ATTN_BM == 0;
  }
  /* the longest sequence known (vr_cuda_attention_maxlen): FA3's three consumers at head_dim 64
   * from VR_CUDA_ATTN_FA3_C3_MIN_LEN tokens, nothing else changes */
  const int fa3_64 = vr_cuda_attention_kernel_fits(VR_CUDA_ATTN_KERNEL_FA3, 64);
  const int L = VR_CUDA_ATTN_FA3_C3_MIN_LEN;
  ok &= vr_cuda_attention_tile_rows_maxlen(64, 2 * L, L) == (fa3_64 ? 192 : vr_cuda_attention_tile_rows(64, 2 * L)) &&
        vr_cuda_attention_tile_rows_maxlen(64, 2 * L, L - 1) == vr_cuda_attention_tile_rows(64, 2 * L) &&
        vr_cuda_attention_tile_rows_maxlen(64, 2 * L, 0) == vr_cuda_attention_tile_rows(64, 2 * L) &&
        vr_cuda_attention_tile_rows_maxlen(128, 2 * L, 2 * L) == vr_cuda_attention_tile_rows(128, 2 * L) &&
        vr_cuda_attention_tile_rows_maxlen(32, 2 * L, 2 * L) == vr_cuda_attention_tile_rows(32, 2 * L);
  ok &= !vr_cuda_attention_kernel_fits(VR_CUDA_ATTN_KERNEL_FA128, 128) &&
        !vr_cuda_attention_kernel_fits(VR_CUDA_ATTN_KERNEL_GENERIC, 257) &&
        !vr_cuda_attention_kernel_fits(VR_CUDA_ATTN_KERNEL_FA3, 32);
  printf("%s attention kernel choice by head_dim, rows and longest sequence\n", ok ? "ok  " : "FAIL");
  if (!ok) g_fail = 1;
}

/* force: as test_attention; the head dims a forced kernel does not fit are skipped. */
static void attention_suite(const vr_cuda_attn_kernel_t *force) {
  const int dims[] = {16, 32, 64, 128, 8, 24, 80};
  for (size_t di = 0; di < sizeof dims / sizeof dims[0]; ++di) {
    const int D = dims[di];
    if (force && !vr_cuda_attention_kernel_fits(*force, D)) continue;
    int lens[6];
    const int n = 1 + irand(5);
    for (int i = 0; i < n; ++i) lens[i] = 1 + irand(D >= 128 ? 200 : 300);
    lens[0] = 64 + irand(2) * 1; /* a full tile and a tile + 1 row */
    if (n > 1) lens[1] = 1;
    test_attention(force, 4, 2, D, 1, 0, lens, n);
    test_attention(force, 4, 4, D, 0, 0, lens, n);
    if (D == 64) {
      test_attention(force, 8, 1, D, 1, 0, lens, n);  /* MQA */
      test_attention(force, 4, 2, D, 1, 40, lens, n); /* sliding window */
    }
  }
  const int one[1] = {1100}; /* one long causal sequence (many key tiles) */
  if (!force || vr_cuda_attention_kernel_fits(*force, 128)) test_attention(force, 2, 1, 128, 1, 0, one, 1);
  if (!force || vr_cuda_attention_kernel_fits(*force, 64)) test_attention(force, 2, 2, 64, 0, 0, one, 1);
}

/* The automatic choice (these batches are under 4096 rows: FA64, or FA3 from
 * VR_CUDA_ATTN_FA3_MIN_ROWS where it runs, GENERIC for other head dims),
 * then each tensor-core kernel forced on every head dim it fits. The kernels the choice was
 * made against are checked by tests/cuda/cuda_attention_bench.cu (--check). */
static void attention_suites(void) {
  printf("-- attention: automatic choice\n");
  attention_suite(NULL);
  static const vr_cuda_attn_kernel_t forced[] = {VR_CUDA_ATTN_KERNEL_FA128, VR_CUDA_ATTN_KERNEL_FA64};
  for (size_t i = 0; i < sizeof forced / sizeof forced[0]; ++i) {
    printf("-- attention: %s forced\n", vr_cuda_attention_kernel_name(forced[i]));
    attention_suite(&forced[i]);
  }
}

/* The tile list (seq, q0) of rows-row tiles over n sequences; returns its length. */
static int attn_tiles(const int *lens, int n, int rows, int32_t *tiles) {
  int nt = 0;
  for (int i = 0; i < n; ++i)
    for (int q0 = 0; q0 < lens[i]; q0 += rows) tiles[2 * nt] = i, tiles[2 * nt + 1] = q0, ++nt;
  return nt;
}

/* FA3 against FA64 (itself checked against the CPU above) on long sequences, where a double
 * reference would take minutes: both on the same device data, FA3 once per tile and with a
 * persistent grid of 5 blocks; flags: 0 (the library's configuration, vr_cuda_attention_run),
 * VR_TEST_FA3_MAXLEN (the library's choice with the batch's longest sequence known:
 * vr_cuda_attention_maxlen and its tile rows, as the backend's eager forwards run it) or
 * vr_cuda_attention_fa3's. */
#define VR_TEST_FA3_MAXLEN (-1)
static void test_attention_fa3_long(int flags, int H, int Hkv, int D, int causal, const int *lens, int n) {
  int T = 0;
  for (int i = 0; i < n; ++i) T += lens[i];
  const int ld = (H + 2 * Hkv) * D;
  float *qf;
  uint16_t *qkv = rand_bf((size_t)T * ld, 2.0f, &qf);
  int32_t *cu = malloc((n + 1) * 4), *t64 = malloc((size_t)2 * (T + n) * 4), *t128 = malloc((size_t)2 * (T + n) * 4);
  cu[0] = 0;
  for (int i = 0; i < n; ++i) cu[i + 1] = cu[i] + lens[i];
  int max_len = 0;
  for (int i = 0; i < n; ++i) max_len = lens[i] > max_len ? lens[i] : max_len;
  const int rows = flags == VR_TEST_FA3_MAXLEN ? vr_cuda_attention_tile_rows_maxlen(D, T, max_len)
                                               : vr_cuda_attention_fa3_rows(D, flags);
  const int n64 = attn_tiles(lens, n, 64, t64), n128 = attn_tiles(lens, n, rows, t128);
  const int32_t m64[4] = {n, n64, 0, 0}, m128[4] = {n, n128, 0, 0};
  uint16_t *d_qkv = todev(qkv, (size_t)T * ld * 2);
  int32_t *d_cu = todev(cu, (n + 1) * 4), *d_t64 = todev(t64, (size_t)2 * n64 * 4), *d_t128 = todev(t128, (size_t)2 * n128 * 4);
  int32_t *d_m64 = todev(m64, 16), *d_m128 = todev(m128, 16);
  const size_t no = (size_t)T * H * D;
  uint16_t *d_out = dmalloc(no * 2), *out = malloc(no * 2);
  const float scale = 1.f / sqrtf((float)D);
  vr_cuda_attention_run(VR_CUDA_ATTN_KERNEL_FA64, d_qkv, ld, 0, H * D, (H + Hkv) * D, d_out, H * D, d_cu, d_t64, d_m64,
                        n64, H, Hkv, D, causal, 0, scale, T, 0);
  tohost(out, d_out, no * 2);
  float *rf = bf_arr_to_f(out, no);
  double *ref = malloc(no * sizeof(double));
  for (size_t i = 0; i < no; ++i) ref[i] = rf[i];
  char what[160];
  for (int pass = 0; pass < 2; ++pass) {
    CK(cudaMemset(d_out, 0xFF, no * 2));
    if (flags == VR_TEST_FA3_MAXLEN)
      vr_cuda_attention_maxlen(d_qkv, ld, 0, H * D, (H + Hkv) * D, d_out, H * D, d_cu, d_t128, d_m128, pass ? 5 : n128,
                               H, Hkv, D, causal, 0, scale, T, max_len, 0);
    else if (flags)
      vr_cuda_attention_fa3(d_qkv, ld, T, 0, H * D, (H + Hkv) * D, d_out, H * D, NULL, d_cu, d_t128, d_m128,
                            pass ? 5 : n128, H, Hkv, D, causal, 0, scale, flags, 0);
    else
      vr_cuda_attention_run(VR_CUDA_ATTN_KERNEL_FA3, d_qkv, ld, 0, H * D, (H + Hkv) * D, d_out, H * D, d_cu, d_t128,
                            d_m128, pass ? 5 : n128, H, Hkv, D, causal, 0, scale, T, 0);
    tohost(out, d_out, no * 2);
    float *of = bf_arr_to_f(out, no);
    char cfg[48];
    if (flags == VR_TEST_FA3_MAXLEN) snprintf(cfg, sizeof cfg, " (auto, max_len %d: %d-row tiles)", max_len, rows);
    else fa3_flag_names(flags, cfg, sizeof cfg);
    snprintf(what, sizeof what, "attention fa3%s vs fa64 H%d/%d D%d %s n%d T%d grid%d", cfg, H, Hkv, D,
             causal ? "causal" : "bidir", n, T, pass ? 5 : n128);
    check_rel(what, ref, of, no, 1e-2);
    check_maxabs(what, ref, of, no, 3e-2);
    free(of);
  }
  CK(cudaFree(d_qkv));
  CK(cudaFree(d_cu));
  CK(cudaFree(d_t64));
  CK(cudaFree(d_t128));
  CK(cudaFree(d_m64));
  CK(cudaFree(d_m128));
  CK(cudaFree(d_out));
  free(qkv), free(qf), free(cu), free(t64), free(t128), free(out), free(rf), free(ref);
}

/* The Hopper kernel (where this build and device run it): ragged batches against the CPU on
 * head dims 64 / 128, causal and bidirectional, GQA ratios 1 / 4 / 8, sliding windows, then
 * 16384-token sequences against FA64. */
static void attention_fa3_suite(void) {
  if (!vr_cuda_attention_kernel_fits(VR_CUDA_ATTN_KERNEL_FA3, 64)) {
    printf("-- attention: fa3 not run (needs an sm_90a build on a compute 9.0 device)\n");
    return;
  }
  printf("-- attention: fa3 forced\n");
  const vr_cuda_attn_kernel_t k = VR_CUDA_ATTN_KERNEL_FA3;
  static const int ragged[] = {1, 17, 255, 128, 129, 300, 64};
  static const int gqa[][2] = {{8, 8}, {8, 2}, {8, 1}};
  for (int D = 64; D <= 128; D += 64)
    for (int gi = 0; gi < 3; ++gi)
      for (int causal = 0; causal < 2; ++causal) test_attention(&k, gqa[gi][0], gqa[gi][1], D, causal, 0, ragged, 7);
  test_attention(&k, 4, 2, 64, 1, 40, ragged, 7);   /* sliding window, causal */
  test_attention(&k, 4, 2, 128, 0, 200, ragged, 7); /* sliding window, bidirectional */
  /* both head_dim-64 configurations by name (one of them is the library's), the heads-inner
   * block order, the forced schedules */
  static const int cfgs[] = {VR_CUDA_FA3_C2,
                             VR_CUDA_FA3_C2 | VR_CUDA_FA3_HEAD_INNER, /* the library's under 4096 rows */
                             VR_CUDA_FA3_C3,
                             VR_CUDA_FA3_C3 | VR_CUDA_FA3_HEAD_INNER,
                             VR_CUDA_FA3_C3 | VR_CUDA_FA3_EXP2_POLY,
                             VR_CUDA_FA3_C2 | VR_CUDA_FA3_EXP2_POLY,
                             VR_CUDA_FA3_C2 | VR_CUDA_FA3_PINGPONG,
                             /* the persistent schedule (one block per multiprocessor over the
                              * items; the small grid: 3 H blocks), both orders, both shapes */
                             VR_CUDA_FA3_C2 | VR_CUDA_FA3_PERSIST,
                             VR_CUDA_FA3_C2 | VR_CUDA_FA3_PERSIST | VR_CUDA_FA3_HEAD_INNER,
                             VR_CUDA_FA3_C3 | VR_CUDA_FA3_PERSIST,
                             VR_CUDA_FA3_C2 | VR_CUDA_FA3_PINGPONG | VR_CUDA_FA3_PERSIST};
  for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ++ci) {
    test_attention_k(&k, 0, cfgs[ci], 8, 2, 64, 1, 0, ragged, 7);
    test_attention_k(&k, 0, cfgs[ci], 4, 4, 64, 0, 0, ragged, 7);
    test_attention_k(&k, 0, cfgs[ci], 4, 2, 64, 1, 40, ragged, 7);
    test_attention_k(&k, 0, cfgs[ci], 4, 2, 64, 0, 200, ragged, 7);
  }
  test_attention_k(&k, 0, VR_CUDA_FA3_HEAD_INNER, 8, 2, 128, 1, 0, ragged, 7);
  test_attention_k(&k, 0, VR_CUDA_FA3_EXP2_POLY, 8, 2, 128, 1, 0, ragged, 7);
  test_attention_k(&k, 0, VR_CUDA_FA3_EXP2_POLY, 4, 2, 128, 0, 200, ragged, 7);
  test_attention_k(&k, 0, VR_CUDA_FA3_PERSIST, 8, 2, 128, 1, 0, ragged, 7);
  test_attention_k(&k, 0, VR_CUDA_FA3_PERSIST | VR_CUDA_FA3_HEAD_INNER, 4, 4, 128, 0, 200, ragged, 7);
  test_attention_k(&k, 0, VR_CUDA_FA3_PERSIST | VR_CUDA_FA3_NO_PINGPONG, 8, 1, 128, 1, 40, ragged, 7);
  static const int long1[] = {16384}, mixed[] = {16384, 1, 17, 255, 3000};
  test_attention_fa3_long(0, 8, 1, 128, 1, long1, 1);
  test_attention_fa3_long(0, 8, 2, 128, 0, mixed, 5);
  test_attention_fa3_long(0, 8, 8, 64, 1, mixed, 5);
  test_attention_fa3_long(0, 8, 1, 64, 0, long1, 1);
  test_attention_fa3_long(VR_CUDA_FA3_C2, 8, 8, 64, 1, mixed, 5);
  test_attention_fa3_long(VR_CUDA_FA3_C3, 8, 8, 64, 1, mixed, 5);
  test_attention_fa3_long(VR_CUDA_FA3_C3 | VR_CUDA_FA3_HEAD_INNER, 8, 2, 64, 1, long1, 1);
  test_attention_fa3_long(VR_CUDA_FA3_C3, 8, 1, 64, 0, mixed, 5);
  test_attention_fa3_long(VR_CUDA_FA3_C3 | VR_CUDA_FA3_EXP2_POLY, 8, 8, 64, 1, mixed, 5);
  test_attention_fa3_long(VR_CUDA_FA3_EXP2_POLY, 8, 2, 128, 1, long1, 1);
  test_attention_fa3_long(VR_CUDA_FA3_C2 | VR_CUDA_FA3_PERSIST, 8, 2, 64, 1, mixed, 5);
  test_attention_fa3_long(VR_CUDA_FA3_C2 | VR_CUDA_FA3_PERSIST | VR_CUDA_FA3_HEAD_INNER, 8, 8, 64, 0, mixed, 5);
  test_attention_fa3_long(VR_CUDA_FA3_C3 | VR_CUDA_FA3_PERSIST, 8, 1, 64, 1, long1, 1);
  test_attention_fa3_long(VR_CUDA_FA3_PERSIST, 8, 2, 128, 1, mixed, 5);
  /* the library's choice with the longest sequence known: three consumers at head_dim 64,
   * two at 128 */
  test_attention_fa3_long(VR_TEST_FA3_MAXLEN, 8, 8, 64, 1, mixed, 5);
  test_attention_fa3_long(VR_TEST_FA3_MAXLEN, 8, 1, 64, 0, long1, 1);
  test_attention_fa3_long(VR_TEST_FA3_MAXLEN, 8, 2, 128, 1, mixed, 5);
}

/* ---------------------------------------------------------------- norms */

static void test_norms(int T, int C) {
  char what[128];
  float *x = rand_f((size_t)T * C, -3, 3), *w = rand_f(C, 0.5f, 1.5f), *b = rand_f(C, -0.5f, 0.5f);
  const float eps = 1e-5f;
  double *ref = malloc((size_t)T * C * sizeof(double));
  /* layernorm: x -> LN(x) (fp32) and bf16 copy */
  for (int t = 0; t < T; ++t) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[(size_t)t * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[(size_t)t * C + c] - m) * (x[(size_t)t * C + c] - m);
    v /= C;
    for (int c = 0; c < C; ++c) ref[(size_t)t * C + c] = (x[(size_t)t * C + c] - m) / sqrt(v + eps) * w[c] + b[c];
  }
  float *d_x = todev(x, (size_t)T * C * 4), *d_w = todev(w, C * 4), *d_b = todev(b, C * 4);
  uint16_t *d_xn = dmalloc((size_t)T * C * 2), *xn = malloc((size_t)T * C * 2);
  float *xo = malloc((size_t)T * C * 4);
  vr_cuda_layernorm(d_x, d_xn, d_w, d_b, T, C, eps, 0);
  tohost(xo, d_x, (size_t)T * C * 4);
  tohost(xn, d_xn, (size_t)T * C * 2);
  snprintf(what, sizeof what, "layernorm fp32 T%d C%d", T, C);
  check_rel(what, ref, xo, (size_t)T * C, 1e-5);
  float *xnf = bf_arr_to_f(xn, (size_t)T * C);
  snprintf(what, sizeof what, "layernorm bf16 T%d C%d", T, C);
  check_rel(what, ref, xnf, (size_t)T * C, 1e-2);
  free(xnf);
  /* layernorm of a bf16 residual row: y (bf16) -> xn (bf16), and fp32 x when asked */
  {
    float *yf;
    uint16_t *y = rand_bf((size_t)T * C, 3, &yf);
    for (int t = 0; t < T; ++t) {
      double m = 0, v = 0;
      const float *yr = yf + (size_t)t * C;
      for (int c = 0; c < C; ++c) m += yr[c];
      m /= C;
      for (int c = 0; c < C; ++c) v += (yr[c] - m) * (yr[c] - m);
      v /= C;
      for (int c = 0; c < C; ++c) ref[(size_t)t * C + c] = (yr[c] - m) / sqrt(v + eps) * w[c] + b[c];
    }
    uint16_t *d_y = todev(y, (size_t)T * C * 2);
    for (int with_x = 0; with_x < 2; ++with_x) {
      CK(cudaMemset(d_xn, 0xFF, (size_t)T * C * 2));
      CK(cudaMemset(d_x, 0xFF, (size_t)T * C * 4));
      vr_cuda_layernorm_b16(d_y, NULL, d_xn, with_x ? d_x : NULL, d_w, d_b, T, C, eps, 0);
      tohost(xn, d_xn, (size_t)T * C * 2);
      xnf = bf_arr_to_f(xn, (size_t)T * C);
      snprintf(what, sizeof what, "layernorm of bf16 rows -> bf16 T%d C%d%s", T, C, with_x ? " (+fp32)" : "");
      check_rel(what, ref, xnf, (size_t)T * C, 1e-2);
      free(xnf);
      if (with_x) {
        tohost(xo, d_x, (size_t)T * C * 4);
        snprintf(what, sizeof what, "layernorm of bf16 rows -> fp32 T%d C%d", T, C);
        check_rel(what, ref, xo, (size_t)T * C, 1e-5);
      } else { /* x == NULL: the fp32 buffer must be untouched (still the NaN poison) */
        tohost(xo, d_x, (size_t)T * C * 4);
        int untouched = 1;
        for (size_t i = 0; i < (size_t)T * C; ++i) untouched &= isnan(xo[i]) != 0;
        printf("%s layernorm of bf16 rows leaves x alone when x == NULL (T%d C%d)\n", untouched ? "ok  " : "FAIL",
               T, C);
        if (!untouched) g_fail = 1;
      }
    }
    /* y + r with r in xn itself (in place): y split as (y - r) + r, r random bf16 */
    {
      float *rf, *df = malloc((size_t)T * C * 4);
      uint16_t *r = rand_bf((size_t)T * C, 1, &rf), *dd = malloc((size_t)T * C * 2);
      for (size_t i = 0; i < (size_t)T * C; ++i) dd[i] = f2bf(yf[i] - rf[i]), df[i] = bf2f(dd[i]);
      for (int t = 0; t < T; ++t) { /* reference on the rounded parts, summed in double */
        double m = 0, v = 0;
        for (int c = 0; c < C; ++c) m += (double)df[(size_t)t * C + c] + rf[(size_t)t * C + c];
        m /= C;
        for (int c = 0; c < C; ++c) {
          const double d = (double)df[(size_t)t * C + c] + rf[(size_t)t * C + c] - m;
          v += d * d;
        }
        v /= C;
        for (int c = 0; c < C; ++c)
          ref[(size_t)t * C + c] = ((double)df[(size_t)t * C + c] + rf[(size_t)t * C + c] - m) / sqrt(v + eps) * w[c] + b[c];
      }
      uint16_t *d_d = todev(dd, (size_t)T * C * 2);
      CK(cudaMemcpy(d_xn, r, (size_t)T * C * 2, cudaMemcpyHostToDevice));
      vr_cuda_layernorm_b16(d_d, d_xn, d_xn, NULL, d_w, d_b, T, C, eps, 0);
      tohost(xn, d_xn, (size_t)T * C * 2);
      xnf = bf_arr_to_f(xn, (size_t)T * C);
      snprintf(what, sizeof what, "layernorm of bf16 y + residual (in place) T%d C%d", T, C);
      check_rel(what, ref, xnf, (size_t)T * C, 1e-2);
      free(xnf);
      CK(cudaFree(d_d));
      free(rf), free(df), free(r), free(dd);
    }
    CK(cudaFree(d_y));
    free(y), free(yf);
  }
  /* rmsnorm */
  CK(cudaMemcpy(d_x, x, (size_t)T * C * 4, cudaMemcpyHostToDevice));
  for (int t = 0; t < T; ++t) {
    double q = 0;
    for (int c = 0; c < C; ++c) q += (double)x[(size_t)t * C + c] * x[(size_t)t * C + c];
    const double r = 1.0 / sqrt(q / C + eps);
    for (int c = 0; c < C; ++c) ref[(size_t)t * C + c] = x[(size_t)t * C + c] * r * w[c];
  }
  CK(cudaMemset(d_xn, 0xFF, (size_t)T * C * 2));
  vr_cuda_rmsnorm(d_x, d_xn, d_w, T, C, eps, 0);
  tohost(xn, d_xn, (size_t)T * C * 2);
  xnf = bf_arr_to_f(xn, (size_t)T * C);
  snprintf(what, sizeof what, "rmsnorm bf16 T%d C%d", T, C);
  check_rel(what, ref, xnf, (size_t)T * C, 1e-2);
  free(xnf);
  vr_cuda_rmsnorm_f32(d_x, d_x, d_w, T, C, eps, 0); /* fp32, in place (the final norm) */
  tohost(xo, d_x, (size_t)T * C * 4);
  snprintf(what, sizeof what, "rmsnorm fp32 in place T%d C%d", T, C);
  check_rel(what, ref, xo, (size_t)T * C, 1e-5);

  /* embeddings: encoder (tok + pos + type, LN) and decoder (tok, RMS) */
  const int V = 97, P = 130;
  float *tokf, *posf, *typf;
  uint16_t *tok = rand_bf((size_t)V * C, 1, &tokf), *pe = rand_bf((size_t)P * C, 1, &posf),
           *ty = rand_bf((size_t)C, 1, &typf);
  int32_t *ids = malloc(T * 4), *pos = malloc(T * 4);
  for (int t = 0; t < T; ++t) ids[t] = irand(V), pos[t] = irand(P);
  uint16_t *d_tok = todev(tok, (size_t)V * C * 2), *d_pe = todev(pe, (size_t)P * C * 2), *d_ty = todev(ty, C * 2);
  int32_t *d_ids = todev(ids, T * 4), *d_pos = todev(pos, T * 4);
  for (int t = 0; t < T; ++t) {
    double m = 0, v = 0;
    double *r = ref + (size_t)t * C;
    for (int c = 0; c < C; ++c) r[c] = (double)tokf[(size_t)ids[t] * C + c] + posf[(size_t)pos[t] * C + c] + typf[c], m += r[c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (r[c] - m) * (r[c] - m);
    v /= C;
    for (int c = 0; c < C; ++c) r[c] = (r[c] - m) / sqrt(v + eps) * w[c] + b[c];
  }
  CK(cudaMemset(d_x, 0xFF, (size_t)T * C * 4));
  vr_cuda_embed_norm(d_x, d_xn, d_ids, d_pos, d_tok, d_pe, d_ty, 0, d_w, d_b, T, C, eps, 0);
  tohost(xo, d_x, (size_t)T * C * 4);
  snprintf(what, sizeof what, "embed+layernorm T%d C%d", T, C);
  check_rel(what, ref, xo, (size_t)T * C, 1e-5);
  for (int t = 0; t < T; ++t) {
    double q = 0;
    for (int c = 0; c < C; ++c) q += (double)tokf[(size_t)ids[t] * C + c] * tokf[(size_t)ids[t] * C + c];
    const double r = 1.0 / sqrt(q / C + eps);
    for (int c = 0; c < C; ++c) ref[(size_t)t * C + c] = tokf[(size_t)ids[t] * C + c] * r * w[c];
  }
  CK(cudaMemset(d_xn, 0xFF, (size_t)T * C * 2));
  vr_cuda_embed_norm(d_x, d_xn, d_ids, d_pos, d_tok, NULL, NULL, 0, d_w, NULL, T, C, eps, 0);
  tohost(xn, d_xn, (size_t)T * C * 2);
  xnf = bf_arr_to_f(xn, (size_t)T * C);
  snprintf(what, sizeof what, "embed+rmsnorm T%d C%d", T, C);
  check_rel(what, ref, xnf, (size_t)T * C, 1e-2);
  tohost(xo, d_x, (size_t)T * C * 4);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) ref[(size_t)t * C + c] = tokf[(size_t)ids[t] * C + c];
  snprintf(what, sizeof what, "embed raw residual T%d C%d", T, C);
  check_rel(what, ref, xo, (size_t)T * C, 1e-7);
  { /* fp32 tables (f32 files): the residual gets the exact fp32 rows */
    float *tok32 = rand_f((size_t)V * C, -1, 1);
    float *d_tok32 = todev(tok32, (size_t)V * C * 4);
    CK(cudaMemset(d_x, 0xFF, (size_t)T * C * 4));
    vr_cuda_embed_norm(d_x, d_xn, d_ids, d_pos, d_tok32, NULL, NULL, 1, d_w, NULL, T, C, eps, 0);
    tohost(xo, d_x, (size_t)T * C * 4);
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) ref[(size_t)t * C + c] = tok32[(size_t)ids[t] * C + c];
    snprintf(what, sizeof what, "embed fp32 table raw residual T%d C%d", T, C);
    check_rel(what, ref, xo, (size_t)T * C, 1e-7);
    CK(cudaFree(d_tok32));
    free(tok32);
  }
  free(xnf);
  CK(cudaFree(d_x)); CK(cudaFree(d_w)); CK(cudaFree(d_b)); CK(cudaFree(d_xn)); CK(cudaFree(d_tok));
  CK(cudaFree(d_pe)); CK(cudaFree(d_ty)); CK(cudaFree(d_ids)); CK(cudaFree(d_pos));
  free(x), free(w), free(b), free(ref), free(xn), free(xo), free(tok), free(pe), free(ty), free(tokf), free(posf);
  free(typf), free(ids), free(pos);
}

/* ----------------------------------------------------------- elementwise */

static void test_act(int T, int I);

/* RoPE on T tokens of H / Hkv heads of D against the double reference: D % 16 == 0 takes the
 * 8-pair kernel, other head dims the scalar one. */
static void test_rope(int T, int H, int Hkv, int D) {
  const int ld = (H + 2 * Hkv) * D;
  float *qf;
  uint16_t *qkv = rand_bf((size_t)T * ld, 2, &qf);
  int32_t *pos = malloc((size_t)T * sizeof *pos);
  float *inv = malloc((size_t)D / 2 * sizeof *inv);
  for (int t = 0; t < T; ++t) pos[t] = irand(4000);
  for (int i = 0; i < D / 2; ++i) inv[i] = (float)pow(10000.0, -2.0 * i / D);
  const float sc = 1.25f;
  double *ref = malloc((size_t)T * ld * sizeof(double));
  for (size_t i = 0; i < (size_t)T * ld; ++i) ref[i] = qf[i];
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < H + Hkv; ++j) {
      const int base = j < H ? j * D : H * D + (j - H) * D;
      for (int i = 0; i < D / 2; ++i) {
        const double a = (double)(float)((float)pos[t] * inv[i]);
        const double c = cos(a) * sc, s = sin(a) * sc;
        const double x1 = qf[(size_t)t * ld + base + i], x2 = qf[(size_t)t * ld + base + i + D / 2];
        ref[(size_t)t * ld + base + i] = x1 * c - x2 * s;
        ref[(size_t)t * ld + base + i + D / 2] = x2 * c + x1 * s;
      }
    }
  uint16_t *d_qkv = todev(qkv, (size_t)T * ld * 2);
  int32_t *d_pos = todev(pos, T * 4);
  float *d_inv = todev(inv, (size_t)D / 2 * sizeof *inv);
  vr_cuda_rope(d_qkv, ld, 0, H * D, H, Hkv, D, d_pos, d_inv, sc, T, 0);
  tohost(qkv, d_qkv, (size_t)T * ld * 2);
  float *of = bf_arr_to_f(qkv, (size_t)T * ld);
  char what[80];
  snprintf(what, sizeof what, "rope q+k (v untouched) T%d H%d/%d D%d", T, H, Hkv, D);
  check_rel(what, ref, of, (size_t)T * ld, 1e-2);
  free(of);
  CK(cudaFree(d_qkv)); CK(cudaFree(d_pos)); CK(cudaFree(d_inv));
  free(qkv), free(qf), free(ref), free(pos), free(inv);
}

static void test_elementwise(void) {
  test_rope(37, 4, 2, 64);
  test_rope(37, 4, 2, 128);
  test_rope(37, 4, 2, 24); /* the scalar kernel */
  for (int I = 200; I <= 201; ++I) test_act(37, I);
}

/* swiglu and bias + gelu (erf, tanh): I = 200 takes the 8-wide kernels, 201 the scalar ones */
static void test_act(int T, int I) {
  char what[96];
  float *of;
  float *guf;
  uint16_t *gu = rand_bf((size_t)T * 2 * I, 4, &guf);
  double *r2 = malloc((size_t)T * I * sizeof(double));
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < I; ++i) {
      const double g = guf[(size_t)t * 2 * I + i], u = guf[(size_t)t * 2 * I + I + i];
      r2[(size_t)t * I + i] = g / (1 + exp(-g)) * u;
    }
  uint16_t *d_gu = todev(gu, (size_t)T * 2 * I * 2), *d_o = dmalloc((size_t)T * I * 2), *o = malloc((size_t)T * I * 2);
  vr_cuda_swiglu(d_o, d_gu, T, I, 0);
  tohost(o, d_o, (size_t)T * I * 2);
  of = bf_arr_to_f(o, (size_t)T * I);
  snprintf(what, sizeof what, "swiglu T%d I%d", T, I);
  check_rel(what, r2, of, (size_t)T * I, 1e-2);
  free(of);
  /* bias + gelu, erf and tanh */
  float *bias = rand_f(I, -1, 1);
  float *d_bias = todev(bias, I * 4);
  for (int approx = 0; approx < 2; ++approx) {
    float *hf;
    uint16_t *h = rand_bf((size_t)T * I, 4, &hf);
    for (size_t i = 0; i < (size_t)T * I; ++i) {
      const double v = hf[i] + bias[i % I];
      r2[i] = approx ? 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))) : 0.5 * v * (1 + erf(v / sqrt(2)));
    }
    uint16_t *d_h = todev(h, (size_t)T * I * 2);
    vr_cuda_bias_gelu(d_h, d_bias, T, I, approx, 0);
    tohost(h, d_h, (size_t)T * I * 2);
    of = bf_arr_to_f(h, (size_t)T * I);
    snprintf(what, sizeof what, "bias+gelu(%s) T%d I%d", approx ? "tanh" : "erf", T, I);
    check_rel(what, r2, of, (size_t)T * I, 1e-2);
    free(of), free(h), free(hf);
    CK(cudaFree(d_h));
  }
  /* conversions from each file dtype */
  {
    const size_t n = 1000;
    float *src = rand_f(n, -100, 100);
    double *rr = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; ++i) rr[i] = src[i];
    float *d_src = todev(src, n * 4), *d_f = dmalloc(n * 4), *f = malloc(n * 4);
    uint16_t *d_b = dmalloc(n * 2), *bb = malloc(n * 2);
    vr_cuda_convert_to_f32(d_f, d_src, 0, n, 0);
    tohost(f, d_f, n * 4);
    check_rel("convert f32->f32", rr, f, n, 0);
    vr_cuda_convert_to_bf16(d_b, d_src, 0, n, 0);
    tohost(bb, d_b, n * 2);
    int exact = 1;
    for (size_t i = 0; i < n; ++i) exact &= bb[i] == f2bf(src[i]);
    printf("%-4s convert f32->bf16 rounds to nearest even like the host\n", exact ? "ok" : "FAIL");
    if (!exact) g_fail = 1;
    /* bf16 source -> f32: exact */
    vr_cuda_convert_to_f32(d_f, d_b, 2, n, 0);
    tohost(f, d_f, n * 4);
    for (size_t i = 0; i < n; ++i) rr[i] = bf2f(bb[i]);
    check_rel("convert bf16->f32", rr, f, n, 0);
    CK(cudaFree(d_src)); CK(cudaFree(d_f)); CK(cudaFree(d_b));
    free(src), free(rr), free(f), free(bb);
  }
  CK(cudaFree(d_gu)); CK(cudaFree(d_o));
  CK(cudaFree(d_bias));
  free(gu), free(guf), free(r2), free(o), free(bias);
}

/* ----------------------------------------------------------------- gemm */

/* D (T, N) = op_a(A) op_b(W) [+ bias] [+ C]: ops (N, T) go through vr_cuda_gemm / vr_cuda_gemm_res
 * (the forward's D = A W^T, A stored (T, K), W (N, K)), other ops through vr_cuda_gemm_op with A
 * stored (K, T) for op_a T and W stored (K, N) for op_b N. beta1: 0 none, 1 D += (C = D),
 * 2 C in its own buffer. */
static void test_gemm_ops(vr_cuda_gemm_t *g, vr_cuda_op_t op_a, vr_cuda_op_t op_b, int T, int N, int K, int out_f32,
                          int with_bias, int beta1) {
  const int fwd = op_a == VR_CUDA_OP_N && op_b == VR_CUDA_OP_T;
  float *af, *wf, *bfv;
  uint16_t *a = rand_bf((size_t)T * K, 1, &af), *w = rand_bf((size_t)N * K, 1, &wf), *bb = rand_bf(N, 1, &bfv);
  float *d0 = rand_f((size_t)T * N, -2, 2);
  double *ref = malloc((size_t)T * N * sizeof(double));
#define A_AT(t, k) (op_a == VR_CUDA_OP_N ? af[(size_t)(t) * K + (k)] : af[(size_t)(k) * T + (t)])
#define W_AT(n, k) (op_b == VR_CUDA_OP_T ? wf[(size_t)(n) * K + (k)] : wf[(size_t)(k) * N + (n)])
  for (int t = 0; t < T; ++t)
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += (double)A_AT(t, k) * W_AT(n, k);
      if (with_bias) s += bfv[n];
      if (beta1) s += d0[(size_t)t * N + n];
      ref[(size_t)t * N + n] = s;
    }
  uint16_t *d_a = todev(a, (size_t)T * K * 2), *d_w = todev(w, (size_t)N * K * 2);
  void *d_bias = NULL;
  if (with_bias) d_bias = out_f32 ? todev(bfv, N * 4) : todev(bb, N * 2);
  void *d_d;
  if (out_f32) {
    d_d = beta1 ? todev(d0, (size_t)T * N * 4) : dmalloc((size_t)T * N * 4);
  } else {
    uint16_t *d0b = malloc((size_t)T * N * 2);
    for (size_t i = 0; i < (size_t)T * N; ++i) d0b[i] = f2bf(d0[i]), d0[i] = bf2f(d0b[i]);
    if (beta1) /* reference with the bf16-rounded C */
      for (int t = 0; t < T; ++t)
        for (int n = 0; n < N; ++n) {
          double s = 0;
          for (int k = 0; k < K; ++k) s += (double)A_AT(t, k) * W_AT(n, k);
          ref[(size_t)t * N + n] = s + (with_bias ? bfv[n] : 0) + d0[(size_t)t * N + n];
        }
    d_d = beta1 ? todev(d0b, (size_t)T * N * 2) : dmalloc((size_t)T * N * 2);
    free(d0b);
  }
#undef A_AT
#undef W_AT
  void *d_c = NULL; /* beta1 == 2: C in its own buffer, D written elsewhere */
  if (beta1 == 2) {
    const size_t bytes = (size_t)T * N * (out_f32 ? 4 : 2);
    d_c = d_d;
    d_d = dmalloc(bytes);
  }
  if (!fwd)
    vr_cuda_gemm_op(g, op_a, op_b, d_d, out_f32, d_a, d_w, d_bias, 0, d_c, T, N, K, beta1 ? 1.f : 0.f, 0);
  else if (beta1 == 2)
    vr_cuda_gemm_res(g, d_d, out_f32, d_a, d_w, d_bias, d_c, T, N, K, 0);
  else
    vr_cuda_gemm(g, d_d, out_f32, d_a, d_w, d_bias, T, N, K, beta1 ? 1.f : 0.f, 0);
  float *got = malloc((size_t)T * N * 4);
  if (out_f32) {
    tohost(got, d_d, (size_t)T * N * 4);
  } else {
    uint16_t *gb = malloc((size_t)T * N * 2);
    tohost(gb, d_d, (size_t)T * N * 2);
    for (size_t i = 0; i < (size_t)T * N; ++i) got[i] = bf2f(gb[i]);
    free(gb);
  }
  char what[128];
  snprintf(what, sizeof what, "gemm %c%c T%d N%d K%d out %s bias %d beta %d", op_a == VR_CUDA_OP_T ? 'T' : 'N',
           op_b == VR_CUDA_OP_T ? 'T' : 'N', T, N, K, out_f32 ? "f32" : "bf16", with_bias, beta1);
  check_rel(what, ref, got, (size_t)T * N, out_f32 ? 1e-5 : 1e-2);
  if (d_c) { /* C is only read */
    const size_t n = (size_t)T * N;
    float *c = malloc(n * 4);
    if (out_f32) {
      tohost(c, d_c, n * 4);
    } else {
      uint16_t *cb = malloc(n * 2);
      tohost(cb, d_c, n * 2);
      for (size_t i = 0; i < n; ++i) c[i] = bf2f(cb[i]);
      free(cb);
    }
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += c[i] != d0[i];
    printf("%s gemm residual form leaves C unchanged (%zu of %zu changed)\n", bad ? "FAIL" : "ok  ", bad, n);
    if (bad) g_fail = 1;
    free(c);
    CK(cudaFree(d_c));
  }
  CK(cudaFree(d_a)); CK(cudaFree(d_w)); CK(cudaFree(d_d));
  if (d_bias) CK(cudaFree(d_bias));
  free(a), free(af), free(w), free(wf), free(bb), free(bfv), free(d0), free(ref), free(got);
}

static void test_gemm(vr_cuda_gemm_t *g, int T, int N, int K, int out_f32, int with_bias, int beta1) {
  test_gemm_ops(g, VR_CUDA_OP_N, VR_CUDA_OP_T, T, N, K, out_f32, with_bias, beta1);
}

/* ---------------------------------------------------------------- heads */

static void test_heads(int C) {
  const int T = 50, n = 5;
  float *x = rand_f((size_t)T * C, -2, 2), *nw = rand_f(C, 0.5, 1.5), *sw = rand_f(C, -1, 1);
  float *w1 = rand_f((size_t)C * C, -0.2f, 0.2f), *b1 = rand_f(C, -0.5, 0.5), *b2 = rand_f(1, -1, 1);
  int32_t rows[5] = {3, 49, 0, 17, 17}, meta[4] = {n, 0, 0, 0};
  double ref[5];
  for (int i = 0; i < n; ++i) {
    const float *xr = x + (size_t)rows[i] * C;
    double q = 0, d = 0;
    for (int c = 0; c < C; ++c) q += (double)xr[c] * xr[c];
    const double r = 1 / sqrt(q / C + 1e-6);
    for (int c = 0; c < C; ++c) d += xr[c] * r * nw[c] * sw[c];
    ref[i] = d;
  }
  float *d_x = todev(x, (size_t)T * C * 4), *d_nw = todev(nw, C * 4), *d_sw = todev(sw, C * 4);
  float *d_w1 = todev(w1, (size_t)C * C * 4), *d_b1 = todev(b1, C * 4), *d_b2 = todev(b2, 4);
  int32_t *d_rows = todev(rows, sizeof rows), *d_meta = todev(meta, sizeof meta);
  float *d_s = dmalloc(n * 4), got[5];
  vr_cuda_score_decoder(d_s, d_x, d_rows, d_meta, d_nw, d_sw, C, 1e-6f, 2, 0);
  tohost(got, d_s, sizeof got);
  check_rel("score decoder (final RMSNorm + score row), grid < n", ref, got, n, 1e-5);
  for (int i = 0; i < n; ++i) {
    const float *xr = x + (size_t)rows[i] * C;
    double s = b2[0];
    for (int j = 0; j < C; ++j) {
      double d = b1[j];
      for (int c = 0; c < C; ++c) d += (double)w1[(size_t)j * C + c] * xr[c];
      s += sw[j] * tanh(d);
    }
    ref[i] = s;
  }
  CK(cudaMemset(d_s, 0xFF, n * 4));
  float *d_part = dmalloc((size_t)n * vr_cuda_score_encoder_blocks(C) * 4);
  vr_cuda_score_encoder(d_s, d_x, d_rows, d_meta, d_w1, d_b1, d_sw, d_b2, C, 64, d_part, 0);
  tohost(got, d_s, sizeof got);
  check_rel("score encoder (dense + tanh + out_proj)", ref, got, n, 1e-5);
  CK(cudaMemset(d_s, 0xFF, n * 4));
  vr_cuda_score_encoder(d_s, d_x, d_rows, d_meta, d_w1, d_b1, d_sw, d_b2, C, 2, d_part, 0); /* grid < n */
  tohost(got, d_s, sizeof got);
  check_rel("score encoder, grid < n", ref, got, n, 1e-5);
  CK(cudaFree(d_part));
  CK(cudaFree(d_x)); CK(cudaFree(d_nw)); CK(cudaFree(d_sw)); CK(cudaFree(d_w1)); CK(cudaFree(d_b1));
  CK(cudaFree(d_b2)); CK(cudaFree(d_rows)); CK(cudaFree(d_meta)); CK(cudaFree(d_s));
  free(x), free(nw), free(sw), free(w1), free(b1), free(b2);
}

/* The GEMM-choice cache's save while another process's save holds the file's lock: BUSY (after
 * vr_gemm_tune_store's bounded wait), the choices kept unsaved, and the next save writes them (the
 * file was given up for the process on the first BUSY before). The process's first cache open:
 * nothing before this opens one. */
static void test_gemm_cache_busy(void) {
  char dir[] = "/tmp/vr-gemm-cache-XXXXXX", path[256], lock[272];
  if (!mkdtemp(dir)) {
    printf("FAIL gemm cache busy: mkdtemp\n");
    g_fail = 1;
    return;
  }
  snprintf(path, sizeof path, "%s/gemm-tune.json", dir);
  snprintf(lock, sizeof lock, "%s.lock", path);
  int ok = vr_cuda_gemm_cache_open(path) == 0;
  vr_cuda_gemm_t *g = NULL;
  ok = ok && vr_cuda_gemm_init(&g, 32u << 20) == 0;
  const int T = 96, N = 160, K = 192; /* a shape no other test plans */
  uint16_t *A = (uint16_t *)dmalloc((size_t)T * K * 2), *W = (uint16_t *)dmalloc((size_t)N * K * 2);
  float *D = (float *)dmalloc((size_t)T * N * 4);
  CK(cudaMemset(A, 0, (size_t)T * K * 2));
  CK(cudaMemset(W, 0, (size_t)N * K * 2));
  if (ok) {
    vr_cuda_gemm_set_tuning(g, 1);
    vr_cuda_gemm(g, D, 1, A, W, NULL, T, N, K, 0.f, 0); /* timed: a fresh choice */
    CK(cudaDeviceSynchronize());
  }
  const int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ok = ok && lfd >= 0 && flock(lfd, LOCK_EX) == 0; /* another open file: the save's flock conflicts */
  const int busy = ok ? vr_cuda_gemm_cache_save() : -1;
  if (lfd >= 0) close(lfd);
  const int again = ok ? vr_cuda_gemm_cache_save() : -1;
  vr_gemm_tune_set_t got;
  memset(&got, 0, sizeof got);
  int exists = 0;
  char err[512] = "";
  const int lrc = vr_gemm_tune_load(path, &got, &exists, err, sizeof err);
  const int pass = ok && busy == VR_ERR_BUSY && again == 0 && lrc == 0 && exists && got.n >= 1;
  printf("%-4s gemm cache: save under a held lock BUSY (%d), the next save writes (%d), file %s with %zu choices\n",
         pass ? "ok" : "FAIL", busy, again, exists ? "there" : "missing", got.n);
  if (!pass) g_fail = 1;
  vr_gemm_tune_set_free(&got);
  CK(cudaFree(A));
  CK(cudaFree(W));
  CK(cudaFree(D));
  if (g) vr_cuda_gemm_free(g);
  unlink(path), unlink(lock), rmdir(dir);
}

/* Tuning on an in-place accumulation (the training engine's weight gradients: D += A^T B, fp32,
 * beta 1, C == D) with the split-K variants in the search: the tuned call's result must be the
 * untuned call's from the same D (the tuning copies D and puts it back; before, its ~4 runs per
 * candidate accumulated into D). With same-bits on the chosen candidate must also give the
 * heuristic's first choice's bits, so the result equals an untuned context's bit for bit; with it
 * off, within rounding of it. */
static void test_gemm_tune_inplace(int same_bits) {
  const int M = 384, N = 256, Kd = 8192; /* split-K variants are valid at this K */
  float *af, *bf;
  uint16_t *a = rand_bf((size_t)Kd * M, 1, &af), *b = rand_bf((size_t)Kd * N, 1, &bf);
  float *d0 = rand_f((size_t)M * N, -4, 4);
  uint16_t *d_a = todev(a, (size_t)Kd * M * 2), *d_b = todev(b, (size_t)Kd * N * 2);
  float *d_ref = todev(d0, (size_t)M * N * 4), *d_tun = todev(d0, (size_t)M * N * 4);
  float *ref = malloc((size_t)M * N * 4), *tun = malloc((size_t)M * N * 4);
  vr_cuda_gemm_t *g0 = NULL, *g1 = NULL;
  int ok = vr_cuda_gemm_init(&g0, 64u << 20) == 0 && vr_cuda_gemm_init(&g1, 64u << 20) == 0;
  if (ok) {
    vr_cuda_gemm_op(g0, VR_CUDA_OP_T, VR_CUDA_OP_N, d_ref, 1, d_a, d_b, NULL, 0, NULL, M, N, Kd, 1.f, 0);
    vr_cuda_gemm_set_tune_opts(g1, NULL, 0, 1);
    vr_cuda_gemm_set_tune_same_bits(g1, same_bits);
    vr_cuda_gemm_set_tuning(g1, 1);
    vr_cuda_gemm_op(g1, VR_CUDA_OP_T, VR_CUDA_OP_N, d_tun, 1, d_a, d_b, NULL, 0, NULL, M, N, Kd, 1.f, 0);
    CK(cudaDeviceSynchronize());
    tohost(ref, d_ref, (size_t)M * N * 4);
    tohost(tun, d_tun, (size_t)M * N * 4);
  }
  size_t differ = 0;
  double worst = 0, scale = 0;
  for (size_t i = 0; ok && i < (size_t)M * N; ++i) {
    differ += memcmp(&ref[i], &tun[i], 4) != 0;
    worst = fmax(worst, fabs((double)ref[i] - tun[i]));
    scale = fmax(scale, fabs((double)ref[i]));
  }
  const uint64_t tuned = ok ? vr_cuda_gemm_plans_tuned(g1) : 0;
  const int pass = ok && tuned == 1 && (same_bits ? differ == 0 : worst <= 1e-4 * scale);
  printf("%-4s gemm tuning, in-place += (M%d N%d K%d, split-K in the search, same-bits %s): %zu values differ from "
         "the untuned call, max |diff| %.3g of %.3g, %llu plan tuned\n", pass ? "ok" : "FAIL", M, N, Kd,
         same_bits ? "on" : "off", differ, worst, scale, (unsigned long long)tuned);
  if (!pass) g_fail = 1;
  if (g0) vr_cuda_gemm_free(g0);
  if (g1) vr_cuda_gemm_free(g1);
  CK(cudaFree(d_a)); CK(cudaFree(d_b)); CK(cudaFree(d_ref)); CK(cudaFree(d_tun));
  free(a), free(af), free(b), free(bf), free(d0), free(ref), free(tun);
}

/* GEMM with the GELU_BIAS epilogue (bf16 out, bf16 bias) against the exact erf GELU of
 * the double-precision product: the epilogue's tanh form is within bf16 rounding. */
static void test_gemm_gelu(vr_cuda_gemm_t *g, int T, int N, int K) {
  float *af, *wf, *bfv;
  uint16_t *a = rand_bf((size_t)T * K, 1, &af), *w = rand_bf((size_t)N * K, 1, &wf), *bb = rand_bf(N, 1, &bfv);
  double *ref = malloc((size_t)T * N * sizeof(double));
  /* A scaled by 1/sqrt(K) (then rounded to bf16) keeps the products in GELU's curved range */
  const float sc = 1.f / sqrtf((float)K);
  for (size_t i = 0; i < (size_t)T * K; ++i) a[i] = f2bf(af[i] * sc);
  for (int n = 0; n < N; ++n) bfv[n] = bf2f(bb[n]);
  for (int t = 0; t < T; ++t) /* reference on the scaled bf16 A exactly as the device sees it */
    for (int n = 0; n < N; ++n) {
      double v = bfv[n];
      for (int k = 0; k < K; ++k) v += (double)bf2f(a[(size_t)t * K + k]) * wf[(size_t)n * K + k];
      ref[(size_t)t * N + n] = 0.5 * v * (1 + erf(v / sqrt(2)));
    }
  uint16_t *d_a = todev(a, (size_t)T * K * 2), *d_w = todev(w, (size_t)N * K * 2), *d_b = todev(bb, N * 2);
  uint16_t *d_d = dmalloc((size_t)T * N * 2), *gb = malloc((size_t)T * N * 2);
  CK(cudaMemset(d_d, 0xFF, (size_t)T * N * 2));
  vr_cuda_gemm_ex(g, d_d, 0, d_a, d_w, d_b, 1, T, N, K, 0.f, 0);
  tohost(gb, d_d, (size_t)T * N * 2);
  float *got = bf_arr_to_f(gb, (size_t)T * N);
  char what[128];
  snprintf(what, sizeof what, "gemm + bias + gelu epilogue T%d N%d K%d vs erf gelu", T, N, K);
  check_rel(what, ref, got, (size_t)T * N, 1e-2);
  CK(cudaFree(d_a)); CK(cudaFree(d_w)); CK(cudaFree(d_b)); CK(cudaFree(d_d));
  free(a), free(af), free(w), free(wf), free(bb), free(bfv), free(ref), free(gb), free(got);
}

/* Programmatic dependent launch (vr_cuda_launch.cuh): two of the backend's kernels where the
 * second reads the first's output, captured into a graph with PDL on: the edge between them
 * must be programmatic, and the graph's result equal bit for bit the plain launches' (PDL
 * off). A wait missing from the second kernel would let it read stale rows. */
static void test_pdl_graph(void) {
  const int T = 257, C = 768;
  float *yf;
  uint16_t *y = rand_bf((size_t)T * C, 2.0f, &yf);
  float *w = rand_f(C, 0.5f, 1.5f), *b = rand_f(C, -0.5f, 0.5f);
  uint16_t *d_y = todev(y, (size_t)T * C * 2), *d_a = dmalloc((size_t)T * C * 2), *d_o = dmalloc((size_t)T * C * 2);
  float *d_w = todev(w, C * 4), *d_b = todev(b, C * 4);
  uint16_t *plain = malloc((size_t)T * C * 2), *graph = malloc((size_t)T * C * 2);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int was = vr_cuda_launch_pdl();
  vr_cuda_set_launch_pdl(0);
  vr_cuda_layernorm_b16(d_y, NULL, d_a, NULL, d_w, d_b, T, C, 1e-5f, s);
  vr_cuda_layernorm_b16(d_a, d_y, d_o, NULL, d_w, d_b, T, C, 1e-5f, s);
  CK(cudaStreamSynchronize(s));
  tohost(plain, d_o, (size_t)T * C * 2);
  CK(cudaMemset(d_a, 0xFF, (size_t)T * C * 2));
  CK(cudaMemset(d_o, 0xFF, (size_t)T * C * 2));
  vr_cuda_set_launch_pdl(1);
  cudaGraph_t gr;
  cudaGraphExec_t ex;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  vr_cuda_layernorm_b16(d_y, NULL, d_a, NULL, d_w, d_b, T, C, 1e-5f, s);
  vr_cuda_layernorm_b16(d_a, d_y, d_o, NULL, d_w, d_b, T, C, 1e-5f, s);
  CK(cudaStreamEndCapture(s, &gr));
  cudaGraphNode_t from[4], to[4];
  cudaGraphEdgeData ed[4];
  size_t ne = 4;
  CK(cudaGraphGetEdges(gr, from, to, ed, &ne));
  int prog = 0;
  for (size_t i = 0; i < ne; ++i) prog += ed[i].type == cudaGraphDependencyTypeProgrammatic;
  int dev = 0, major = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CK(cudaGraphInstantiate(&ex, gr, 0));
  for (int r = 0; r < 3; ++r) CK(cudaGraphLaunch(ex, s));
  CK(cudaStreamSynchronize(s));
  tohost(graph, d_o, (size_t)T * C * 2);
  vr_cuda_set_launch_pdl(was);
  const int same = !memcmp(plain, graph, (size_t)T * C * 2);
  const int ok = same && ne == 1 && prog == 1;
  printf("%s PDL: captured edge %s (%zu edge(s), compute %d.x), graph == plain launches bitwise: %s\n",
         ok ? "ok  " : "FAIL", prog ? "programmatic" : "plain", ne, major, same ? "yes" : "no");
  if (!ok) g_fail = 1;
  CK(cudaGraphExecDestroy(ex));
  CK(cudaGraphDestroy(gr));
  CK(cudaStreamDestroy(s));
  CK(cudaFree(d_y)); CK(cudaFree(d_a)); CK(cudaFree(d_o)); CK(cudaFree(d_w)); CK(cudaFree(d_b));
  free(y), free(yf), free(w), free(b), free(plain), free(graph);
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  g_rng = vr_test_seed("test_cuda_kernels", 1);
  if (!g_rng) g_rng = 1; /* xorshift: 0 stays 0 */
  test_attention_choice();
  /* VR_TEST_ATTN_KERNEL=auto|fa64|fa128|generic|fa3: that attention suite alone (sanitizer runs) */
  const char *only = getenv("VR_TEST_ATTN_KERNEL");
  if (only) {
    static const vr_cuda_attn_kernel_t all[] = {VR_CUDA_ATTN_KERNEL_GENERIC, VR_CUDA_ATTN_KERNEL_FA64,
                                                VR_CUDA_ATTN_KERNEL_FA128, VR_CUDA_ATTN_KERNEL_FA3};
    const vr_cuda_attn_kernel_t *k = NULL;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
      if (!strcmp(only, vr_cuda_attention_kernel_name(all[i]))) k = &all[i];
    if (!k && strcmp(only, "auto")) {
      printf("FAIL VR_TEST_ATTN_KERNEL=%s: not auto|fa64|fa128|generic|fa3\n", only);
      return 1;
    }
    printf("-- attention: %s only (VR_TEST_ATTN_KERNEL)\n", only);
    attention_suite(k);
    if (k && *k == VR_CUDA_ATTN_KERNEL_FA3) attention_fa3_suite();
    printf("%s\n", g_fail ? "FAILED" : "all kernel checks passed");
    return g_fail;
  }
  attention_suites();
  attention_split_suite();
  attention_fa3_suite();
  test_pdl_graph();
  test_norms(33, 768);
  test_norms(5, 4096);
  test_norms(7, 40);
  test_norms(3, 42); /* C % 4 != 0: the scalar RMSNorm */
  test_elementwise();
  vr_cuda_gemm_t *g;
  if (vr_cuda_gemm_init(&g, 32u << 20)) return 1;
  test_gemm(g, 37, 48, 64, 0, 0, 0);
  test_gemm(g, 37, 48, 64, 0, 1, 0);
  test_gemm(g, 37, 48, 64, 1, 1, 1);
  test_gemm(g, 300, 1024, 512, 1, 0, 1);
  test_gemm(g, 129, 96, 200, 0, 1, 0);
  test_gemm(g, 64, 256, 128, 1, 1, 0);
  test_gemm(g, 37, 48, 64, 0, 0, 0); /* cached plan */
  test_gemm(g, 300, 768, 768, 0, 1, 2); /* residual form, bf16 C -> D (the encoders' stream) */
  vr_cuda_gemm_set_plan_rows(g, 300); /* exact-size mode: fewer rows, known algorithms or the 300-row plan */
  test_gemm(g, 211, 768, 768, 0, 1, 2);
  test_gemm(g, 299, 768, 768, 0, 1, 2);
  vr_cuda_gemm_set_plan_rows(g, 0);
  test_gemm(g, 37, 48, 64, 0, 0, 2);
  test_gemm(g, 129, 96, 200, 1, 1, 2);  /* residual form, fp32 */
  /* the other operand layouts (a training step's dX = dY W and dW = dY^T X), then the
   * forward's again, its plans now cached beside theirs */
  /* (leading dimensions are feature sizes, multiples of 8 as in the backend; the token count,
   * M of dX or K of dW, is any number) */
  test_gemm_ops(g, VR_CUDA_OP_N, VR_CUDA_OP_N, 37, 48, 64, 0, 0, 0);
  test_gemm_ops(g, VR_CUDA_OP_N, VR_CUDA_OP_N, 300, 768, 1024, 1, 0, 1);  /* dX += dY W, fp32 */
  test_gemm_ops(g, VR_CUDA_OP_T, VR_CUDA_OP_N, 768, 256, 300, 1, 0, 0);   /* dW = dY^T X: M = N out, K = T */
  test_gemm_ops(g, VR_CUDA_OP_T, VR_CUDA_OP_N, 96, 200, 129, 1, 0, 1);    /* dW += dY^T X */
  test_gemm_ops(g, VR_CUDA_OP_T, VR_CUDA_OP_T, 64, 48, 40, 0, 1, 2);     /* bias + separate C */
  test_gemm(g, 37, 48, 64, 0, 0, 0); /* the (N, T) plan is still the cached one */
  vr_cuda_gemm_set_plan_rows(g, 300); /* exact-size mode leaves op_a T alone */
  test_gemm_ops(g, VR_CUDA_OP_T, VR_CUDA_OP_N, 216, 96, 64, 1, 1, 0);
  vr_cuda_gemm_set_plan_rows(g, 0);
  test_gemm_gelu(g, 77, 256, 64);
  test_gemm_gelu(g, 256, 3072, 768);
  vr_cuda_gemm_free(g);
  test_heads(96);
  test_heads(768); /* roberta-base: 96 blocks of 8 dense rows */
  test_gemm_cache_busy();
  test_gemm_tune_inplace(1);
  test_gemm_tune_inplace(0);
  CK(cudaDeviceSynchronize());
  printf("%s\n", g_fail ? "FAILED" : "all kernel checks passed");
  return g_fail;
}
