/* vr_cpu_gemm.h: the cpu backend's fp32 matrix products, deterministic by construction.
 *
 * Contract (what docs/protocol.md promises for cpu scores rests on it): every output element
 * is a fixed function of the one row of A and the one row (NT) or column (NN) of B it combines,
 * evaluated in the same order of operations whatever M, N, the thread count or the position of
 * the row in the batch. So a token's result does not depend on which other tokens share its
 * GEMM, and a sequence's score does not depend on the batch it was scored in or on --threads.
 *   NT: y[i][j] = acc * alpha (+ bias[j]), acc = +0 then acc = acc + a[i][k] * b[j][k] for
 *       k = 0..K-1 in order; on a CPU with AVX2 + FMA each step is one fused multiply-add,
 *       elsewhere a multiply then an add. The variant is picked once per process from the CPU's
 *       features, so results are fixed on a machine and may differ in the last bits between a
 *       machine with FMA and one without. The caller picks the variant (the backend state holds
 *       it, from the cpu_gemm model option): the library keeps no process-wide choice.
 *   NN: y[i][d] = sum over j = 0..K-1, in order, of a[i][j] * b[j][d] (multiply, then add).
 * Each element is computed by exactly one thread; threads split the output columns (NT) or
 * rows (NN). The file is compiled with -ffp-contract=off so the compiler fuses nothing on its
 * own.
 *
 * Threading: n_threads <= 1 runs on the calling thread (safe inside an outer parallel region);
 * otherwise an OpenMP team of up to n_threads. y never aliases a or b. */
#ifndef VR_CPU_GEMM_H
#define VR_CPU_GEMM_H

#include <stddef.h>

typedef enum vr_cpu_gemm_variant {
  VR_CPU_GEMM_GENERIC = 0, /* multiply, then add: the same bits on every x86-64 (and other) CPU */
  VR_CPU_GEMM_FMA = 1,     /* AVX2 + FMA: fused steps */
} vr_cpu_gemm_variant_t;

/* The fastest variant this CPU runs (FMA where AVX2 + FMA are present). */
vr_cpu_gemm_variant_t vr_cpu_gemm_best(void);
/* 1 when this CPU and build can run v. */
int vr_cpu_gemm_supported(vr_cpu_gemm_variant_t v);
/* "generic" / "avx2+fma". */
const char *vr_cpu_gemm_name(vr_cpu_gemm_variant_t v);
/* "auto" (or NULL: vr_cpu_gemm_best), "generic", "avx2+fma" -> 0; -1 for anything else. */
int vr_cpu_gemm_parse(const char *s, vr_cpu_gemm_variant_t *v);

/* Floats of packing scratch one thread needs for an NT GEMM of inner dimension K. */
#define VR_CPU_GEMM_PACK_FLOATS(K) ((size_t)16 * (size_t)(K))

/* y (M, N; row stride ldy) = alpha * a (M, K; lda) . b (N, K; ldb)^T  [+ bias (N)]
 * bias NULL: none. pack: n_threads * VR_CPU_GEMM_PACK_FLOATS(K) floats (at least one
 * thread's worth), 32-byte aligned, scratch owned by the caller. */
void vr_cpu_gemm_nt(vr_cpu_gemm_variant_t v, int M, int N, int K, float alpha, const float *a, int lda, const float *b, int ldb,
                    const float *bias, float *y, int ldy, float *pack, int n_threads);

/* y (M, N; ldy) = a (M, K; lda) . b (K, N; ldb) */
void vr_cpu_gemm_nn(vr_cpu_gemm_variant_t v, int M, int N, int K, const float *a, int lda, const float *b, int ldb, float *y, int ldy,
                    int n_threads);

#endif /* VR_CPU_GEMM_H */
