/* vr_cpu_gemm_kernel.h: the GEMM kernels of vr_cpu_gemm.c, included there once per instruction
 * set (not a public header). The includer defines:
 *   VR_K(name)        the function name with the variant's suffix
 *   VR_KTARGET        the target attribute of every function here (empty for the generic one)
 *   VR_MADD(c, a, b)  one lane step c + a * b on vr_v8 (fused or not: the variant decides)
 *   VR_SMADD(c, a, b) the same step on one float, with the same rounding as VR_MADD
 *   VR_SPLAT(x)       a vr_v8 with x in every lane
 * Every output element is acc = +0, then acc = VR_MADD(acc, a[i][k], b[j][k]) for k = 0..K-1 in
 * order, then y = acc * alpha (+ bias[j]): the packed tiles run it in one vector lane, the
 * small-M path in a float, to the same bits. */

/* R x 16 tile (R <= VR_GEMM_MR, a compile-time constant at every call) of y from the panel bp
 * (K, 16), columns [0, cn) stored. */
static inline __attribute__((always_inline)) VR_KTARGET void VR_K(tile)(const int R, int K, float alpha,
                                                                        const float *a, int lda,
                                                                        const float *bp,
                                                                        const float *bias, float *y,
                                                                        int ldy, int cn) {
  vr_v8 c0[VR_GEMM_MR], c1[VR_GEMM_MR];
  for (int r = 0; r < R; r++) c0[r] = c1[r] = (vr_v8){0};
  for (int k = 0; k < K; k++) {
    const vr_v8 b0 = *(const vr_v8 *)(bp + (size_t)k * 16), b1 = *(const vr_v8 *)(bp + (size_t)k * 16 + 8);
    for (int r = 0; r < R; r++) {
      const vr_v8 av = VR_SPLAT(a[(size_t)r * lda + k]);
      c0[r] = VR_MADD(c0[r], av, b0);
      c1[r] = VR_MADD(c1[r], av, b1);
    }
  }
  for (int r = 0; r < R; r++) {
    float t[16];
    *(vr_v8u *)t = c0[r];
    *(vr_v8u *)(t + 8) = c1[r];
    for (int c = 0; c < cn; c++) {
      float s = t[c] * alpha;
      if (bias) s += bias[c];
      y[(size_t)r * ldy + c] = s;
    }
  }
}

/* Columns [j0, j1) of y = alpha * a . b^T (+ bias); pack holds 16 * K floats, 32-byte aligned. */
static VR_KTARGET void VR_K(nt_cols)(int M, int j0, int j1, int K, float alpha, const float *a, int lda,
                                     const float *b, int ldb, const float *bias, float *y, int ldy,
                                     float *pack) {
  if (M < VR_GEMM_MR) { /* too few rows to pay for packing: one float per element */
    for (int i = 0; i < M; i++)
      for (int j = j0; j < j1; j++) {
        const float *ar = a + (size_t)i * lda, *br = b + (size_t)j * ldb;
        float s = 0.0f;
        for (int k = 0; k < K; k++) s = VR_SMADD(s, ar[k], br[k]);
        s *= alpha;
        if (bias) s += bias[j];
        y[(size_t)i * ldy + j] = s;
      }
    return;
  }
  for (int i0 = 0; i0 < M; i0 += VR_GEMM_MB) {
    const int i1 = M - i0 < VR_GEMM_MB ? M : i0 + VR_GEMM_MB;
    for (int j = j0; j < j1; j += 16) {
      const int cn = j1 - j < 16 ? j1 - j : 16;
      for (int k = 0; k < K; k++) {
        float *p = pack + (size_t)k * 16;
        int c = 0;
        for (; c < cn; c++) p[c] = b[(size_t)(j + c) * ldb + k];
        for (; c < 16; c++) p[c] = 0.0f;
      }
      const float *bb = bias ? bias + j : NULL;
      int i = i0;
      for (; i + VR_GEMM_MR <= i1; i += VR_GEMM_MR)
        VR_K(tile)(VR_GEMM_MR, K, alpha, a + (size_t)i * lda, lda, pack, bb, y + (size_t)i * ldy + j, ldy, cn);
      switch (i1 - i) {
        case 5: VR_K(tile)(5, K, alpha, a + (size_t)i * lda, lda, pack, bb, y + (size_t)i * ldy + j, ldy, cn); break;
        case 4: VR_K(tile)(4, K, alpha, a + (size_t)i * lda, lda, pack, bb, y + (size_t)i * ldy + j, ldy, cn); break;
        case 3: VR_K(tile)(3, K, alpha, a + (size_t)i * lda, lda, pack, bb, y + (size_t)i * ldy + j, ldy, cn); break;
        case 2: VR_K(tile)(2, K, alpha, a + (size_t)i * lda, lda, pack, bb, y + (size_t)i * ldy + j, ldy, cn); break;
        case 1: VR_K(tile)(1, K, alpha, a + (size_t)i * lda, lda, pack, bb, y + (size_t)i * ldy + j, ldy, cn); break;
        default: break;
      }
    }
  }
}

/* Rows [i0, i1) of y = a . b, each element summed over j in order (multiply, then add: no
 * fused step, so both variants give the same bits here). */
static VR_KTARGET void VR_K(nn_rows)(int i0, int i1, int N, int K, const float *a, int lda, const float *b,
                                     int ldb, float *y, int ldy) {
  for (int i = i0; i < i1; i++) {
    float *yr = y + (size_t)i * ldy;
    const float *ar = a + (size_t)i * lda;
    for (int d = 0; d < N; d++) yr[d] = 0.0f;
    for (int j = 0; j < K; j++) {
      const float p = ar[j];
      const float *br = b + (size_t)j * ldb;
      for (int d = 0; d < N; d++) yr[d] += p * br[d];
    }
  }
}
