/* cuda_bench_util.h: what the CUDA benchmark programs share (cuda_kernel_bench.c,
 * cuda_attention_bench.cu): random bf16 device data, CUDA-event timing (median of repeats)
 * and packed attention batches. Header-only (static inline), for C and CUDA C++. Every CUDA
 * call goes through VR_CUDA_CHECK (abort with file/line). */
#ifndef CUDA_BENCH_UTIL_H
#define CUDA_BENCH_UTIL_H

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vr_cuda_check.h"
#include "vr_cuda_ops.h"

/* n random bf16 values in [-1, 1) on the device (a fixed sequence: every run sees the same data). */
static inline uint16_t *bench_rand_bf16(size_t n) {
  uint16_t *h = (uint16_t *)malloc(n * 2), *d;
  uint64_t r = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < n; ++i) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    float f = (float)((r >> 40) / 16777216.0 * 2.0 - 1.0);
    uint32_t u;
    memcpy(&u, &f, 4);
    h[i] = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  VR_CUDA_CHECK(cudaMalloc((void **)&d, n * 2));
  VR_CUDA_CHECK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

static inline int bench_cmpf(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Median milliseconds of reps calls of fn(ctx) on the legacy stream (two more before, not
 * measured), each timed alone with CUDA events. */
static inline float bench_time_ms(void (*fn)(void *ctx), void *ctx, int reps) {
  cudaEvent_t a, b;
  VR_CUDA_CHECK(cudaEventCreate(&a));
  VR_CUDA_CHECK(cudaEventCreate(&b));
  float *ms = (float *)malloc((size_t)reps * sizeof(float));
  for (int r = -2; r < reps; ++r) {
    VR_CUDA_CHECK(cudaEventRecord(a, 0));
    fn(ctx);
    VR_CUDA_CHECK(cudaEventRecord(b, 0));
    VR_CUDA_CHECK(cudaEventSynchronize(b));
    if (r >= 0) VR_CUDA_CHECK(cudaEventElapsedTime(&ms[r], a, b));
  }
  qsort(ms, (size_t)reps, sizeof *ms, bench_cmpf);
  const float m = ms[reps / 2];
  free(ms);
  VR_CUDA_CHECK(cudaEventDestroy(a));
  VR_CUDA_CHECK(cudaEventDestroy(b));
  return m;
}

/* One packed attention batch on the device: n_seqs sequences of lens[i] tokens, H query and
 * Hkv key/value heads of D dims in one random bf16 qkv (T, (H + 2 Hkv) D) (q, then k, then v
 * heads), out (T, H D), cu and meta, and a tile list of tile_rows-row tiles (bench_attn_tiles;
 * longest work first, as the backend sorts causal tiles). */
typedef struct bench_attn {
  int n_seqs, T, H, Hkv, D, causal, window, ld, nt, tile_rows;
  uint16_t *qkv, *out;        /* device */
  int32_t *cu, *tiles, *meta; /* device */
  int32_t *cu_h;              /* host copy of cu */
} bench_attn_t;

/* (Re)builds the tile list for tile_rows-row tiles: q0 from the largest down, every sequence
 * long enough at each q0. */
static inline void bench_attn_tiles(bench_attn_t *a, int tile_rows) {
  int maxlen = 0;
  for (int i = 0; i < a->n_seqs; ++i)
    if (a->cu_h[i + 1] - a->cu_h[i] > maxlen) maxlen = a->cu_h[i + 1] - a->cu_h[i];
  int32_t *t = (int32_t *)malloc(((size_t)2 * (a->T / tile_rows + a->n_seqs) + 2) * sizeof(int32_t));
  int nt = 0;
  for (int q0 = (maxlen - 1) / tile_rows * tile_rows; q0 >= 0; q0 -= tile_rows)
    for (int i = 0; i < a->n_seqs; ++i)
      if (q0 < a->cu_h[i + 1] - a->cu_h[i]) t[2 * nt] = i, t[2 * nt + 1] = q0, ++nt;
  const int32_t meta[4] = {a->n_seqs, nt, 0, 0};
  if (a->tiles) VR_CUDA_CHECK(cudaFree(a->tiles));
  VR_CUDA_CHECK(cudaMalloc((void **)&a->tiles, (size_t)2 * (nt ? nt : 1) * sizeof(int32_t)));
  VR_CUDA_CHECK(cudaMemcpy(a->tiles, t, (size_t)2 * nt * sizeof(int32_t), cudaMemcpyHostToDevice));
  VR_CUDA_CHECK(cudaMemcpy(a->meta, meta, sizeof meta, cudaMemcpyHostToDevice));
  a->nt = nt;
  a->tile_rows = tile_rows;
  free(t);
}

static inline void bench_attn_init(bench_attn_t *a, const int *lens, int n_seqs, int H, int Hkv, int D, int causal,
                                   int window) {
  memset(a, 0, sizeof *a);
  a->n_seqs = n_seqs, a->H = H, a->Hkv = Hkv, a->D = D, a->causal = causal, a->window = window;
  a->ld = (H + 2 * Hkv) * D;
  a->cu_h = (int32_t *)malloc(((size_t)n_seqs + 1) * sizeof(int32_t));
  a->cu_h[0] = 0;
  for (int i = 0; i < n_seqs; ++i) a->cu_h[i + 1] = a->cu_h[i] + lens[i];
  a->T = a->cu_h[n_seqs];
  a->qkv = bench_rand_bf16((size_t)a->T * a->ld);
  VR_CUDA_CHECK(cudaMalloc((void **)&a->out, (size_t)a->T * H * D * 2));
  VR_CUDA_CHECK(cudaMalloc((void **)&a->cu, ((size_t)n_seqs + 1) * sizeof(int32_t)));
  VR_CUDA_CHECK(cudaMemcpy(a->cu, a->cu_h, ((size_t)n_seqs + 1) * sizeof(int32_t), cudaMemcpyHostToDevice));
  VR_CUDA_CHECK(cudaMalloc((void **)&a->meta, 4 * sizeof(int32_t)));
  bench_attn_tiles(a, VR_CUDA_ATTN_BM);
}

static inline void bench_attn_free(bench_attn_t *a) {
  VR_CUDA_CHECK(cudaFree(a->qkv));
  VR_CUDA_CHECK(cudaFree(a->out));
  VR_CUDA_CHECK(cudaFree(a->cu));
  VR_CUDA_CHECK(cudaFree(a->tiles));
  VR_CUDA_CHECK(cudaFree(a->meta));
  free(a->cu_h);
  memset(a, 0, sizeof *a);
}

/* Multiply-adds x 2 of the batch's attention (Q K^T and P V; causal: half). */
static inline double bench_attn_flops(const bench_attn_t *a) {
  double f = 0;
  for (int i = 0; i < a->n_seqs; ++i) {
    const double len = a->cu_h[i + 1] - a->cu_h[i];
    f += 4.0 * len * len * a->D * a->H * (a->causal ? 0.5 : 1.0);
  }
  return f;
}

/* The grid of the graphs' persistent launch: one resident wave of a kernel with `resident`
 * blocks per multiprocessor over the heads, at most one block per tile. */
static inline int bench_attn_persistent_grid(const bench_attn_t *a, int resident) {
  int sms = 0;
  VR_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int g = (resident * sms + a->H - 1) / a->H;
  return g < a->nt ? g : a->nt;
}

#endif /* CUDA_BENCH_UTIL_H */
