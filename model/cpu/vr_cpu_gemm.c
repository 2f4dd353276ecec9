/* vr_cpu_gemm.c: deterministic fp32 GEMMs for the cpu backend (contract in vr_cpu_gemm.h).
 *
 * NT: B is packed one panel of 16 columns at a time into (K, 16) scratch, then register tiles
 * of VR_GEMM_MR rows x 16 columns accumulate one k at a time (A broadcast, two 8-lane vectors
 * of B), each element in one vector lane. Edge tiles (fewer rows, fewer columns: the panel is
 * zero-padded) and the unpacked small-M path run the same per-element sequence as full tiles:
 * the tile shape changes which elements are computed together, never how one is computed. Rows
 * are blocked by VR_GEMM_MB so a block of A stays in cache while one thread's panels pass.
 * Two variants of the kernels (vr_cpu_gemm_kernel.h): avx2 + fma (fused steps) and generic
 * (baseline x86-64 or any other CPU: multiply, then add); the caller names one per call.
 * Compiled with -O3 -ffp-contract=off (model/CMakeLists.txt). */
#include "vr_cpu_gemm.h"

#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

typedef float vr_v8 __attribute__((vector_size(32)));
typedef float vr_v8u __attribute__((vector_size(32), aligned(4))); /* unaligned stores */

#define VR_GEMM_MR 6                    /* rows of a register tile */
#define VR_GEMM_MB 192                  /* rows of A per cache block (a multiple of VR_GEMM_MR) */
#define VR_GEMM_MIN_PARALLEL (1L << 18) /* multiply-adds below which threads cost more than they give */

/* ---- generic variant: multiply, then add --------------------------------------------- */
#define VR_K(name) vr_gemm_##name##_generic
#define VR_KTARGET
#define VR_MADD(c, a, b) ((c) + (a) * (b))
#define VR_SMADD(c, a, b) ((c) + (a) * (b))
#define VR_SPLAT(x) ((vr_v8){(x), (x), (x), (x), (x), (x), (x), (x)})
#include "vr_cpu_gemm_kernel.h"
#undef VR_K
#undef VR_KTARGET
#undef VR_MADD
#undef VR_SMADD
#undef VR_SPLAT

/* ---- avx2 + fma variant: one fused multiply-add per step ------------------------------- */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define VR_HAVE_FMA_VARIANT 1
#define VR_K(name) vr_gemm_##name##_fma
#define VR_KTARGET __attribute__((target("avx2,fma")))
#define VR_MADD(c, a, b) ((vr_v8)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#define VR_SMADD(c, a, b) __builtin_fmaf((a), (b), (c))
#define VR_SPLAT(x) ((vr_v8)_mm256_set1_ps(x))
#include "vr_cpu_gemm_kernel.h"
#undef VR_K
#undef VR_KTARGET
#undef VR_MADD
#undef VR_SMADD
#undef VR_SPLAT
#endif

/* ---- dispatch ---------------------------------------------------------------------------- */

typedef void (*vr_nt_cols_fn)(int, int, int, int, float, const float *, int, const float *, int, const float *,
                              float *, int, float *);
typedef void (*vr_nn_rows_fn)(int, int, int, int, const float *, int, const float *, int, float *, int);

static int vr_cpu_has_fma(void) {
#ifdef VR_HAVE_FMA_VARIANT
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return 0;
#endif
}

vr_cpu_gemm_variant_t vr_cpu_gemm_best(void) { return vr_cpu_has_fma() ? VR_CPU_GEMM_FMA : VR_CPU_GEMM_GENERIC; }

int vr_cpu_gemm_supported(vr_cpu_gemm_variant_t v) {
  return v == VR_CPU_GEMM_GENERIC || (v == VR_CPU_GEMM_FMA && vr_cpu_has_fma());
}

const char *vr_cpu_gemm_name(vr_cpu_gemm_variant_t v) { return v == VR_CPU_GEMM_FMA ? "avx2+fma" : "generic"; }

int vr_cpu_gemm_parse(const char *s, vr_cpu_gemm_variant_t *v) {
  if (!s || !strcmp(s, "auto")) {
    *v = vr_cpu_gemm_best();
  } else if (!strcmp(s, "generic")) {
    *v = VR_CPU_GEMM_GENERIC;
  } else if (!strcmp(s, "avx2+fma")) {
    *v = VR_CPU_GEMM_FMA;
  } else {
    return -1;
  }
  return 0;
}

static vr_nt_cols_fn vr_nt_cols(vr_cpu_gemm_variant_t v) {
#ifdef VR_HAVE_FMA_VARIANT
  if (v == VR_CPU_GEMM_FMA) return vr_gemm_nt_cols_fma;
#endif
  (void)v;
  return vr_gemm_nt_cols_generic;
}

static vr_nn_rows_fn vr_nn_rows(vr_cpu_gemm_variant_t v) {
#ifdef VR_HAVE_FMA_VARIANT
  if (v == VR_CPU_GEMM_FMA) return vr_gemm_nn_rows_fma;
#endif
  (void)v;
  return vr_gemm_nn_rows_generic;
}

static int vr_gemm_threads(long macs, int n_threads) {
#ifdef _OPENMP
  if (n_threads > 1 && macs >= VR_GEMM_MIN_PARALLEL && !omp_in_parallel()) return n_threads;
#endif
  (void)macs;
  (void)n_threads;
  return 1;
}

void vr_cpu_gemm_nt(vr_cpu_gemm_variant_t v, int M, int N, int K, float alpha, const float *a, int lda, const float *b, int ldb,
                    const float *bias, float *y, int ldy, float *pack, int n_threads) {
  if (M <= 0 || N <= 0) return;
  const vr_nt_cols_fn f = vr_nt_cols(v);
  const int panels = (N + 15) / 16;
  int nt = vr_gemm_threads((long)M * N * K, n_threads);
  if (nt > panels) nt = panels;
  if (nt <= 1) {
    f(M, 0, N, K, alpha, a, lda, b, ldb, bias, y, ldy, pack);
    return;
  }
  /* whole 16-column panels per thread */
  const int per = (panels + nt - 1) / nt;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int t = 0; t < nt; t++) {
    const int j0 = t * per * 16, j1 = (t + 1) * per * 16 < N ? (t + 1) * per * 16 : N;
    if (j0 < j1) f(M, j0, j1, K, alpha, a, lda, b, ldb, bias, y, ldy, pack + (size_t)t * VR_CPU_GEMM_PACK_FLOATS(K));
  }
}

void vr_cpu_gemm_nn(vr_cpu_gemm_variant_t v, int M, int N, int K, const float *a, int lda, const float *b, int ldb, float *y, int ldy,
                    int n_threads) {
  if (M <= 0 || N <= 0) return;
  const vr_nn_rows_fn f = vr_nn_rows(v);
  int nt = vr_gemm_threads((long)M * N * K, n_threads);
  if (nt > M) nt = M;
  if (nt <= 1) {
    f(0, M, N, K, a, lda, b, ldb, y, ldy);
    return;
  }
  const int chunk = (M + nt - 1) / nt;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int t = 0; t < nt; t++) {
    const int i0 = t * chunk, i1 = i0 + chunk < M ? i0 + chunk : M;
    if (i0 < i1) f(i0, i1, N, K, a, lda, b, ldb, y, ldy);
  }
}
