/* cuda_kernel_bench.c: times the backend's attention (the kernel its automatic choice takes
 * for each shape) and its cuBLASLt GEMM on model-sized shapes (random bf16 data, CUDA events,
 * median of repeats) and prints TFLOP/s. A benchmark program, not a test: prints numbers,
 * asserts nothing about speed. The attention kernels the choice was made against:
 * cuda_attention_bench. Usage: cuda_kernel_bench [reps] */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_bench_util.h"
#include "vr_cuda_check.h"
#include "vr_cuda_ops.h"

typedef struct attn_call {
  const bench_attn_t *a;
  int grid, max_len;
} attn_call_t;

static void run_attention(void *ctx) {
  const attn_call_t *c = (const attn_call_t *)ctx;
  const bench_attn_t *a = c->a;
  vr_cuda_attention_maxlen(a->qkv, a->ld, 0, a->H * a->D, (a->H + a->Hkv) * a->D, a->out, a->H * a->D, a->cu,
                           a->tiles, a->meta, c->grid, a->H, a->Hkv, a->D, a->causal, 0, 0.125f, a->T, c->max_len, 0);
}

static void bench_attention(int n_seqs, int len, int H, int Hkv, int D, int causal, int reps) {
  int *lens = malloc((size_t)n_seqs * sizeof *lens);
  for (int i = 0; i < n_seqs; ++i) lens[i] = len;
  bench_attn_t a;
  bench_attn_init(&a, lens, n_seqs, H, Hkv, D, causal, 0);
  /* one block per tile with the longest sequence known (the backend's eager forwards: the
   * configuration vr_cuda_attention_maxlen picks), then the graphs' persistent grid (one resident
   * wave over the heads; a graph serves any batch: max_len 0) */
  for (int mode = 0; mode < 2; ++mode) {
    const int ml = mode == 0 ? len : 0, rows = vr_cuda_attention_tile_rows_maxlen(D, a.T, ml);
    bench_attn_tiles(&a, rows);
    attn_call_t c = {&a, mode == 0 ? a.nt : bench_attn_persistent_grid(&a, vr_cuda_attention_resident_blocks(D, a.T)), ml};
    const float m = bench_time_ms(run_attention, &c, reps);
    printf("attention %-7s %2d x %5d H%d/%d D%-3d %-6s %3d-row tiles grid %5d x %-2d %8.3f ms %7.1f TFLOP/s\n",
           vr_cuda_attention_kernel_name(vr_cuda_attention_kernel(D, a.T)), n_seqs, len, H, Hkv, D, causal ? "causal" : "bidir",
           rows, c.grid, H, m, bench_attn_flops(&a) / (m * 1e-3) / 1e12);
  }
  bench_attn_free(&a);
  free(lens);
}

typedef struct gemm_call {
  vr_cuda_gemm_t *g;
  void *D;
  const uint16_t *A, *W, *C;
  int T, N, K, out_f32;
} gemm_call_t;

static void run_gemm(void *ctx) {
  const gemm_call_t *c = (const gemm_call_t *)ctx;
  if (c->C)
    vr_cuda_gemm_res(c->g, c->D, 0, c->A, c->W, NULL, c->C, c->T, c->N, c->K, 0);
  else
    vr_cuda_gemm(c->g, c->D, c->out_f32, c->A, c->W, NULL, c->T, c->N, c->K, c->out_f32 ? 1.f : 0.f, 0);
}

/* out_f32: fp32 D += A W^T (the fp32 residual); res (bf16): D = A W^T + C with C a
 * separate bf16 buffer (the encoders' bf16 residual); else bf16 D = A W^T. */
static void bench_gemm_ex(vr_cuda_gemm_t *g, int T, int N, int K, int out_f32, int res, int reps) {
  uint16_t *A = bench_rand_bf16((size_t)T * K), *W = bench_rand_bf16((size_t)N * K);
  void *D;
  VR_CUDA_CHECK(cudaMalloc(&D, (size_t)T * N * (out_f32 ? 4 : 2)));
  VR_CUDA_CHECK(cudaMemset(D, 0, (size_t)T * N * (out_f32 ? 4 : 2)));
  uint16_t *C = res ? bench_rand_bf16((size_t)T * N) : NULL;
  gemm_call_t c = {g, D, A, W, C, T, N, K, out_f32};
  const float m = bench_time_ms(run_gemm, &c, reps);
  printf("gemm T%-6d N%-6d K%-6d out %-9s %8.3f ms %7.1f TFLOP/s\n", T, N, K,
         out_f32 ? "f32 +=" : res ? "bf16 + C" : "bf16", m, 2.0 * T * N * K / (m * 1e-3) / 1e12);
  VR_CUDA_CHECK(cudaFree(A));
  VR_CUDA_CHECK(cudaFree(W));
  VR_CUDA_CHECK(cudaFree(D));
  if (C) VR_CUDA_CHECK(cudaFree(C));
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
  if (reps < 1) {
    fprintf(stderr, "usage: %s [reps >= 1]\n", argv[0]);
    return 2;
  }
  bench_attention(8, 2048, 32, 8, 128, 1, reps);
  bench_attention(16, 1024, 32, 8, 64, 1, reps);
  bench_attention(32, 512, 12, 12, 64, 0, reps);
  bench_attention(64, 256, 12, 12, 64, 0, reps);
  bench_attention(1, 512, 12, 12, 64, 0, reps);
  /* issue 24's long sequences (tests/cuda/attn_bench_torch.py times PyTorch SDPA on these):
   * llama-8b 2 x 16384, llama-1b 4 x 16384, 16k tokens at 2048 wide bidirectional */
  bench_attention(2, 16384, 32, 8, 128, 1, reps);
  bench_attention(4, 16384, 32, 8, 64, 1, reps);
  bench_attention(1, 16384, 16, 16, 128, 0, reps);
  bench_attention(1, 16384, 32, 32, 64, 0, reps);
  bench_attention(1, 16384, 16, 16, 128, 1, reps);
  bench_attention(1, 16384, 32, 32, 64, 1, reps);
  vr_cuda_gemm_t *g;
  if (vr_cuda_gemm_init(&g, 32u << 20)) return 1;
  bench_gemm(g, 16384, 6144, 4096, 0, reps);  /* 8B qkv */
  bench_gemm(g, 16384, 28672, 4096, 0, reps); /* 8B gate|up */
  bench_gemm(g, 16384, 4096, 14336, 1, reps); /* 8B down, fp32 residual accumulate */
  bench_gemm(g, 16384, 4096, 4096, 1, reps);  /* 8B o */
  /* the long-sequence forwards' 32768-row batches (llama-8b 2 x 16384, llama-1b 2 of 4 x 16384) */
  bench_gemm(g, 32768, 6144, 4096, 0, reps);  /* 8B qkv */
  bench_gemm(g, 32768, 28672, 4096, 0, reps); /* 8B gate|up */
  bench_gemm(g, 32768, 4096, 14336, 1, reps); /* 8B down */
  bench_gemm(g, 32768, 4096, 4096, 1, reps);  /* 8B o */
  bench_gemm(g, 32768, 3072, 2048, 0, reps);  /* 1B qkv */
  bench_gemm(g, 32768, 16384, 2048, 0, reps); /* 1B gate|up */
  bench_gemm(g, 32768, 2048, 8192, 1, reps);  /* 1B down */
  bench_gemm(g, 32768, 2048, 2048, 1, reps);  /* 1B o */
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
