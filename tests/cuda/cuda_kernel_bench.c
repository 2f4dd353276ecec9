/* cuda_kernel_bench.c: times the backend's attention kernel and its cuBLASLt
 * GEMM on model-sized shapes (random bf16 data, CUDA events, median of
 * repeats) and prints TFLOP/s. A benchmark program, not a test: prints numbers,
 * asserts nothing about speed. Usage: cuda_kernel_bench [reps] */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vr_cuda_check.h"
#include "vr_cuda_ops.h"

#define CK(call) VR_CUDA_CHECK(call) /* the project's check: logs call, file, line, device; aborts */

static uint16_t *rand_dev_bf16(size_t n) {
  uint16_t *h = malloc(n * 2), *d;
  uint64_t r = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < n; ++i) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    float f = (float)((r >> 40) / 16777216.0 * 2.0 - 1.0);
    uint32_t u;
    memcpy(&u, &f, 4);
    h[i] = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  CK(cudaMalloc((void **)&d, n * 2));
  CK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

static int cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static float median_ms(float *t, int n) {
  qsort(t, n, sizeof *t, cmpf);
  return t[n / 2];
}

static void bench_attention(int n_seqs, int len, int H, int Hkv, int D, int causal, int reps) {
  const int T = n_seqs * len, ld = (H + 2 * Hkv) * D;
  uint16_t *qkv = rand_dev_bf16((size_t)T * ld), *out;
  CK(cudaMalloc((void **)&out, (size_t)T * H * D * 2));
  int32_t *cu = malloc((n_seqs + 1) * 4), *tiles = malloc((size_t)2 * (T / 64 + n_seqs + 1) * 4), meta[4];
  int nt = 0;
  cu[0] = 0;
  for (int i = 0; i < n_seqs; ++i) cu[i + 1] = cu[i] + len;
  const int tr = vr_cuda_attention_tile_rows(D, T);
  for (int q0 = len - 1 - (len - 1) % tr; q0 >= 0; q0 -= tr) /* longest work first */
    for (int i = 0; i < n_seqs; ++i) tiles[2 * nt] = i, tiles[2 * nt + 1] = q0, ++nt;
  meta[0] = n_seqs, meta[1] = nt, meta[2] = meta[3] = 0;
  int32_t *dcu, *dt, *dm;
  CK(cudaMalloc((void **)&dcu, (n_seqs + 1) * 4));
  CK(cudaMalloc((void **)&dt, (size_t)2 * nt * 4));
  CK(cudaMalloc((void **)&dm, 16));
  CK(cudaMemcpy(dcu, cu, (n_seqs + 1) * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dt, tiles, (size_t)2 * nt * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dm, meta, 16, cudaMemcpyHostToDevice));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  float *ms = malloc(reps * sizeof(float));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  /* one block per tile, then the graphs' persistent grid (one resident wave over the heads) */
  const int persistent = (vr_cuda_attention_resident_blocks(D, T) * sms + H - 1) / H;
  for (int mode = 0; mode < 2; ++mode) {
    const int grid = mode == 0 ? nt : (persistent < nt ? persistent : nt);
    for (int r = -2; r < reps; ++r) {
      CK(cudaEventRecord(a, 0));
      vr_cuda_attention(qkv, ld, 0, H * D, (H + Hkv) * D, out, H * D, dcu, dt, dm, grid, H, Hkv, D, causal, 0,
                        0.125f, T, 0);
      CK(cudaEventRecord(b, 0));
      CK(cudaEventSynchronize(b));
      if (r >= 0) CK(cudaEventElapsedTime(&ms[r], a, b));
    }
    const float m = median_ms(ms, reps);
    const double flops = 4.0 * n_seqs * (double)len * len * D * H * (causal ? 0.5 : 1.0);
    printf("attention %2d x %4d H%d/%d D%-3d %-6s grid %5d x %-2d %8.3f ms %7.1f TFLOP/s\n", n_seqs, len, H, Hkv, D,
           causal ? "causal" : "bidir", grid, H, m, flops / (m * 1e-3) / 1e12);
  }
  CK(cudaFree(qkv)); CK(cudaFree(out)); CK(cudaFree(dcu)); CK(cudaFree(dt)); CK(cudaFree(dm));
  free(cu), free(tiles), free(ms);
}

/* out_f32: fp32 D += A W^T (the fp32 residual); res (bf16): D = A W^T + C with C a
 * separate bf16 buffer (the encoders' bf16 residual); else bf16 D = A W^T. */
static void bench_gemm_ex(vr_cuda_gemm_t *g, int T, int N, int K, int out_f32, int res, int reps) {
  uint16_t *A = rand_dev_bf16((size_t)T * K), *W = rand_dev_bf16((size_t)N * K);
  void *D;
  CK(cudaMalloc(&D, (size_t)T * N * (out_f32 ? 4 : 2)));
  CK(cudaMemset(D, 0, (size_t)T * N * (out_f32 ? 4 : 2)));
  uint16_t *C = res ? rand_dev_bf16((size_t)T * N) : NULL;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  float *ms = malloc(reps * sizeof(float));
  for (int r = -2; r < reps; ++r) {
    CK(cudaEventRecord(a, 0));
    if (C)
      vr_cuda_gemm_res(g, D, 0, A, W, NULL, C, T, N, K, 0);
    else
      vr_cuda_gemm(g, D, out_f32, A, W, NULL, T, N, K, out_f32 ? 1.f : 0.f, 0);
    CK(cudaEventRecord(b, 0));
    CK(cudaEventSynchronize(b));
    if (r >= 0) CK(cudaEventElapsedTime(&ms[r], a, b));
  }
  const float m = median_ms(ms, reps);
  printf("gemm T%-6d N%-6d K%-6d out %-9s %8.3f ms %7.1f TFLOP/s\n", T, N, K,
         out_f32 ? "f32 +=" : res ? "bf16 + C" : "bf16", m, 2.0 * T * N * K / (m * 1e-3) / 1e12);
  CK(cudaFree(A)); CK(cudaFree(W)); CK(cudaFree(D));
  if (C) CK(cudaFree(C));
  free(ms);
}

static void bench_gemm(vr_cuda_gemm_t *g, int T, int N, int K, int out_f32, int reps) {
  bench_gemm_ex(g, T, N, K, out_f32, 0, reps);
}

int main(int argc, char **argv) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA device\n");
    return 77;
  }
  const int reps = argc > 1 ? atoi(argv[1]) : 10;
  static const char *names[] = {"wmma (first version)", "mma.sync, 4 warps x 16 rows (first version)",
                                 "fa, 2 warps x 32 rows (D <= 64)", "fa, 4 warps x 16 rows",
                                 "fa, 4 warps x 16 rows, registers for 4 blocks/SM",
                                 "fa, 128-row tiles, 4 warps x 32 rows (D <= 64)", "default (auto)",
                                 "fa, 128-row tiles, Q from shared memory", "fa, 4 warps x 16 rows, Q from shared memory",
                                 "wgmma (head_dim 64)"};
  for (int impl = vr_cuda_attention_has_wgmma() ? 9 : 8; impl >= 0; --impl) {
    vr_cuda_attention_set_impl(impl);
    printf("-- attention kernel: %s\n", names[impl]);
    bench_attention(8, 2048, 32, 8, 128, 1, reps);
    bench_attention(16, 1024, 32, 8, 64, 1, reps);
    bench_attention(32, 512, 12, 12, 64, 0, reps);
    bench_attention(64, 256, 12, 12, 64, 0, reps);
    bench_attention(1, 512, 12, 12, 64, 0, reps);
  }
  vr_cuda_attention_set_impl(6);
  vr_cuda_gemm_t *g;
  if (vr_cuda_gemm_init(&g, 32u << 20)) return 1;
  bench_gemm(g, 16384, 6144, 4096, 0, reps);  /* 8B qkv */
  bench_gemm(g, 16384, 28672, 4096, 0, reps); /* 8B gate|up */
  bench_gemm(g, 16384, 4096, 14336, 1, reps); /* 8B down, fp32 residual accumulate */
  bench_gemm(g, 16384, 4096, 4096, 1, reps);  /* 8B o */
  bench_gemm(g, 512, 2304, 768, 0, reps);     /* roberta-base qkv, 1 x 512 */
  bench_gemm(g, 16384, 2304, 768, 0, reps);   /* roberta-base qkv, 16384 tokens */
  bench_gemm(g, 16384, 768, 768, 1, reps);    /* o, fp32 residual */
  bench_gemm_ex(g, 16384, 768, 768, 0, 1, reps); /* o, bf16 residual */
  bench_gemm(g, 16384, 3072, 768, 0, reps);   /* up */
  bench_gemm(g, 16384, 768, 3072, 1, reps);   /* down, fp32 residual */
  bench_gemm_ex(g, 16384, 768, 3072, 0, 1, reps); /* down, bf16 residual */
  vr_cuda_gemm_free(g);
  return 0;
}
