/* bench_train_dp.c: the data-parallel training step on a cpu group, with the gradient all-reduce
 * after the backward (vr_train_backward + vr_train_step) and overlapping it
 * (vr_train_backward_last), timed side by side in one run. Run under mpirun:
 *
 *   mpirun -np 3 bench_train_dp MODEL_DIR [SEQS_PER_RANK SEQ_LEN STEPS BUCKET_FLOATS ZERO1]
 *
 * (defaults 2, 128, 5, 1<<20, 0; ZERO1 1: optimizer sharded, gradients reduce-scattered). Each
 * rank trains on its own random tokens (seed = rank), one micro-batch; a barrier before each step; per mode the median of STEPS step times
 * (forward + backward + all-reduce + AdamW) on rank 0, the medians of its parts (forward; backward,
 * which in the overlapped mode starts the buckets; step: the all-reduce or the wait for it, then
 * clipping and AdamW), and whether both modes' parameters are bit-identical (they must be). Exit status 0 = ran and the parameters agreed. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_train.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* STEPS steps; overlap 1: backward_last; per step s, times[4 s + k]: whole step, forward,
 * backward, step. */
static int bench(vr_train_t *t, const vr_train_batch_t *b, int steps, int overlap, double *times) {
  const uint32_t T = b->cu_seqlens[b->n_seqs];
  float *lp = malloc(T * sizeof *lp), *d = calloc(T, sizeof *d);
  if (!lp || !d) return VR_ERR_NOMEM;
  for (uint32_t q = 0; q < b->n_seqs; q++)
    for (uint32_t i = b->cu_seqlens[q] + 1; i < b->cu_seqlens[q + 1]; i++) d[i] = -1e-3f;
  vr_adamw_t h;
  vr_adamw_init(&h);
  int rc = 0;
  for (int s = 0; s < steps && rc == 0; s++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    rc = vr_train_zero_grad(t);
    if (rc == 0) rc = vr_train_forward(t, b, 1.0f, lp, NULL, 1);
    double t1 = MPI_Wtime();
    if (rc == 0) rc = overlap ? vr_train_backward_last(t, d, NULL) : vr_train_backward(t, d, NULL);
    double t2 = MPI_Wtime();
    if (rc == 0) rc = vr_train_step(t, &h, 1.0f, NULL);
    double t3 = MPI_Wtime();
    times[4 * s] = t3 - t0, times[4 * s + 1] = t1 - t0, times[4 * s + 2] = t2 - t1, times[4 * s + 3] = t3 - t2;
  }
  free(lp);
  free(d);
  return rc;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm world = MPI_COMM_WORLD;
  int rank, size;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  if (argc < 2) {
    if (rank == 0) fprintf(stderr, "usage: bench_train_dp MODEL_DIR [SEQS_PER_RANK SEQ_LEN STEPS BUCKET_FLOATS ZERO1]\n");
    MPI_Finalize();
    return 2;
  }
  const int nseq = argc > 2 ? atoi(argv[2]) : 2, len = argc > 3 ? atoi(argv[3]) : 128;
  const int steps = argc > 4 ? atoi(argv[4]) : 5;
  const int per = (steps + 1) / 2, total = 2 * per; /* per mode: two interleaved rounds of per steps */
  const size_t bucket = argc > 5 ? strtoull(argv[5], NULL, 10) : (size_t)1 << 20;
  vr_lm_t *lm = NULL;
  int rc = nseq > 0 && len > 1 && steps > 0 ? vr_lm_load(argv[1], NULL, &lm) : VR_ERR_INVAL;
  vr_train_t *t[2] = {NULL, NULL};
  vr_train_options_t o;
  vr_train_options_init(&o);
  vr_train_comm_mpi(&o.comm, &world);
  o.bucket_floats = bucket;
  o.zero1 = argc > 6 ? atoi(argv[6]) != 0 : 0;
  o.max_tokens = (uint32_t)(nseq * len);
  for (int k = 0; k < 2 && rc == 0; k++) rc = vr_train_init(lm, &o, &t[k]);
  int32_t *ids = malloc((size_t)nseq * len * sizeof *ids);
  uint32_t *cu = malloc(((size_t)nseq + 1) * sizeof *cu);
  double *times = malloc(8 * (size_t)(total > 0 ? total : 1) * sizeof *times), med[2][4] = {{0}};
  if (rc == 0 && (!ids || !cu || !times)) rc = VR_ERR_NOMEM;
  if (rc == 0) {
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
    const int V = vr_lm_config(lm)->vocab_size;
    for (int i = 0; i < nseq * len; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      ids[i] = (int32_t)(x % (uint64_t)V);
    }
    for (int q = 0; q <= nseq; q++) cu[q] = (uint32_t)(q * len);
    vr_train_batch_t b = {ids, cu, (uint32_t)nseq, NULL};
    rc = bench(t[0], &b, 1, 0, times); /* warm-up: workspaces, pages */
    if (rc == 0) rc = bench(t[1], &b, 1, 1, times);
    for (int r = 0; r < 2 && rc == 0; r++) /* interleaved rounds, so load changes hit both */
      for (int k = 0; k < 2 && rc == 0; k++) rc = bench(t[k], &b, per, k, times + 4 * (k * total + r * per));
  }
  int rc_all = rc;
  MPI_Allreduce(&rc, &rc_all, 1, MPI_INT, MPI_MIN, world);
  int same = 0;
  if (rc_all == 0) {
    size_t n = vr_train_n_floats(t[0]);
    float *p0 = malloc(n * sizeof *p0), *p1 = malloc(n * sizeof *p1);
    same = p0 && p1 && vr_train_get_params(t[0], p0, n) == 0 && vr_train_get_params(t[1], p1, n) == 0 &&
           memcmp(p0, p1, n * sizeof *p0) == 0;
    free(p0);
    free(p1);
    if (rank == 0) {
      double *col = malloc((size_t)total * sizeof *col);
      for (int k = 0; k < 2; k++)
        for (int j = 0; j < 4; j++) {
          if (!col) break;
          for (int s = 0; s < total; s++) col[s] = times[4 * (k * total + s) + j];
          qsort(col, (size_t)total, sizeof *col, cmp_double);
          med[k][j] = col[total / 2];
        }
      printf("{\"ranks\": %d, \"zero1\": %d, \"tokens_per_rank\": %d, \"n_floats\": %zu, \"bucket_floats\": %zu, \"steps\": %d, "
             "\"step_s_after_backward\": %.4f, \"step_s_overlapped\": %.4f, \"params_bit_equal\": %s,\n"
             " \"after_backward\": {\"forward\": %.4f, \"backward\": %.4f, \"step\": %.4f},\n"
             " \"overlapped\": {\"forward\": %.4f, \"backward\": %.4f, \"step\": %.4f}}\n",
             size, o.zero1, nseq * len, n, bucket, total, med[0][0], med[1][0], same ? "true" : "false", med[0][1], med[0][2],
             med[0][3], med[1][1], med[1][2], med[1][3]);
      free(col);
    }
  } else if (rank == 0) {
    fprintf(stderr, "bench_train_dp: failed: %s\n", vr_strerror(rc_all));
  }
  vr_train_free(t[0]);
  vr_train_free(t[1]);
  vr_lm_free(lm);
  free(ids);
  free(cu);
  free(times);
  MPI_Finalize();
  return rc_all == 0 && same ? 0 : 1;
}
