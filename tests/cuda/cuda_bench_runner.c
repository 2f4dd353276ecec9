/* cuda_bench_runner.c: our side of tools/bench_vs_transformers.sh. Loads a
 * model directory once (timed); then for each workload (--seqs FILE --out JSON
 * --warmup N --iters N, repeatable, in order) scores its packed batch `warmup`
 * times, then `iters` times (each vr_model_score call is synchronous, timed
 * with the monotonic clock), and writes JSON: load seconds, median / min
 * latency, tokens/s, device memory, and the scores.
 *
 * Usage: cuda_bench_runner --model DIR [--device cuda:0] [--max-batch-tokens N] [--cuda-OPTION VALUE]...
 *        {--warmup N --iters N --seqs FILE --out JSON}... [--shapes NxL,... --shapes-out JSON]
 * --cuda-OPTION: the server's CUDA tuning flags (--cuda-graphs off, ...: vr_cuda_options_set).
 * --shapes: fixed-shape latency and pipelining (the server's batcher's view): for each
 * shape N sequences of L fresh random tokens (8 different batches, rotated), vr_model_score
 * one batch at a time (median / p99 of `iters` calls), then `iters` batches through
 * vr_model_submit / vr_model_collect with max_inflight outstanding (batches/s), and the
 * pipelined scores checked against the one-at-a-time ones.
 * Sequence file (little-endian, written by tools/bench_vs_transformers.py):
 *   8 bytes "VRSEQ1\0\0", uint32 n, uint32 len[n], int32 ids[sum(len)].
 * The file is checked (sizes against the file length, no overflow). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "verl_reward/status.h"
#include "vr_model.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int read_seqs(const char *path, uint32_t *n_out, uint32_t **cu_out, int32_t **ids_out) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return -1;
  }
  fseek(f, 0, SEEK_END);
  const long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  char magic[8];
  uint32_t n = 0;
  if (sz < 12 || fread(magic, 1, 8, f) != 8 || memcmp(magic, "VRSEQ1\0\0", 8) || fread(&n, 4, 1, f) != 1 ||
      n == 0 || (uint64_t)n * 4 > (uint64_t)sz - 12) {
    fprintf(stderr, "%s: not a sequence file (magic / count)\n", path);
    fclose(f);
    return -1;
  }
  uint32_t *cu = calloc((size_t)n + 1, sizeof *cu);
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t len;
    if (fread(&len, 4, 1, f) != 1) break;
    total += len;
    if (total > UINT32_MAX) break;
    cu[i + 1] = (uint32_t)total;
  }
  if (total * 4 != (uint64_t)sz - 12 - (uint64_t)n * 4) {
    fprintf(stderr, "%s: lengths do not match the file size\n", path);
    free(cu);
    fclose(f);
    return -1;
  }
  int32_t *ids = malloc(total ? total * 4 : 4);
  if (fread(ids, 4, total, f) != total) {
    fprintf(stderr, "%s: short read\n", path);
    free(cu), free(ids);
    fclose(f);
    return -1;
  }
  fclose(f);
  *n_out = n, *cu_out = cu, *ids_out = ids;
  return 0;
}

#define MAX_WORK 16

typedef struct work {
  const char *seqs, *out;
  int warmup, iters;
} work_t;

static int run_work(vr_model_t *m, const work_t *w, const char *model, uint32_t max_tokens, double load_s,
                    size_t free0) {
  uint32_t n;
  uint32_t *cu;
  int32_t *ids;
  if (read_seqs(w->seqs, &n, &cu, &ids)) return 1;
  float *scores = calloc(n, sizeof *scores);
  int32_t *st = calloc(n, sizeof *st);
  int rc = 0;
  for (int i = 0; i < w->warmup; ++i)
    if ((rc = vr_model_score(m, ids, cu, n, scores, st))) break;
  double *lat = calloc((size_t)w->iters, sizeof *lat);
  for (int i = 0; rc == 0 && i < w->iters; ++i) {
    const double a = now_s();
    rc = vr_model_score(m, ids, cu, n, scores, st);
    lat[i] = now_s() - a;
  }
  for (uint32_t i = 0; rc == 0 && i < n; ++i)
    if (st[i]) rc = st[i];
  if (rc) {
    fprintf(stderr, "score %s: %s\n", w->seqs, vr_strerror(rc));
    return 1;
  }
  size_t free1 = 0, total_mem = 0;
  if (free0 && cudaMemGetInfo(&free1, &total_mem) != cudaSuccess) free1 = 0;
  qsort(lat, (size_t)w->iters, sizeof *lat, cmpd);
  const double med = lat[w->iters / 2];
  const vr_model_info_t *info = vr_model_info(m);
  FILE *f = fopen(w->out, "w");
  if (!f) {
    fprintf(stderr, "cannot write %s\n", w->out);
    return 1;
  }
  fprintf(f, "{\"model\": \"%s\", \"device\": \"%s\", \"device_name\": \"%s\", \"n_seqs\": %u, \"tokens\": %u,\n",
          model, info->device, info->device_name, n, cu[n]);
  fprintf(f, " \"max_batch_tokens\": %u, \"load_s\": %.4f, \"warmup\": %d, \"iters\": %d,\n", max_tokens, load_s,
          w->warmup, w->iters);
  fprintf(f, " \"latency_median_s\": %.6f, \"latency_min_s\": %.6f, \"tokens_per_s\": %.1f,\n", med, lat[0],
          cu[n] / med);
  fprintf(f, " \"device_bytes_backend\": %llu, \"device_bytes_used_process\": %llu,\n",
          (unsigned long long)info->device_bytes, (unsigned long long)(free0 > free1 ? free0 - free1 : 0));
  fprintf(f, " \"scores\": [");
  for (uint32_t i = 0; i < n; ++i) fprintf(f, "%s%.7g", i ? ", " : "", scores[i]);
  fprintf(f, "]}\n");
  fclose(f);
  printf("%s: %u seqs %u tokens median %.3f ms (%.0f tok/s)\n", w->seqs, n, cu[n], med * 1e3, cu[n] / med);
  free(scores), free(st), free(lat), free(cu), free(ids);
  return 0;
}

static int cmpd_f(const void *a, const void *b) { return cmpd(a, b); }

#define N_ROT 8

/* One fixed shape: sync latency, then pipelined throughput; appends a JSON object to f. */
static int run_shape(vr_model_t *m, uint32_t n, uint32_t L, int iters, FILE *f, int first) {
  const vr_model_info_t *info = vr_model_info(m);
  uint32_t *cu = malloc((n + 1) * sizeof *cu);
  int32_t *ids[N_ROT];
  float *sync_sc[N_ROT], *pipe_sc[N_ROT];
  int32_t *st = malloc(n * sizeof *st);
  static uint64_t rng = 0x9E3779B97F4A7C15ull; /* fixed: every run times the same token ids */
  for (uint32_t i = 0; i <= n; ++i) cu[i] = i * L;
  for (int r = 0; r < N_ROT; ++r) {
    ids[r] = malloc((size_t)n * L * sizeof(int32_t));
    sync_sc[r] = malloc(n * sizeof(float));
    pipe_sc[r] = malloc(n * sizeof(float));
    for (size_t t = 0; t < (size_t)n * L; ++t) {
      rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
      ids[r][t] = (int32_t)(3 + (rng >> 11) % (uint64_t)(info->vocab_size - 3));
    }
  }
  int rc = 0;
  for (int r = 0; r < N_ROT && rc == 0; ++r) rc = vr_model_score(m, ids[r], cu, n, sync_sc[r], st);
  double *lat = calloc((size_t)iters, sizeof *lat);
  for (int i = 0; rc == 0 && i < iters; ++i) {
    const double a = now_s();
    rc = vr_model_score(m, ids[i % N_ROT], cu, n, pipe_sc[0], st);
    lat[i] = now_s() - a;
  }
  /* pipelined: keep max_inflight batches outstanding */
  const int inflight = vr_model_max_inflight(m);
  int sub = 0, col = 0;
  const double p0 = now_s();
  while (rc == 0 && col < iters) {
    while (rc == 0 && sub < iters && sub - col < inflight) {
      rc = vr_model_submit(m, ids[sub % N_ROT], cu, n, pipe_sc[sub % N_ROT], NULL);
      sub++;
    }
    if (rc == 0) rc = vr_model_collect(m);
    col++;
  }
  const double pipe_s = now_s() - p0;
  double maxdiff = 0;
  for (int r = 0; rc == 0 && r < N_ROT && r < iters; ++r)
    for (uint32_t i = 0; i < n; ++i) {
      const double d = fabs((double)pipe_sc[r][i] - sync_sc[r][i]);
      if (!(d <= maxdiff)) maxdiff = d;
    }
  if (rc) {
    fprintf(stderr, "shape %ux%u: %s\n", n, L, vr_strerror(rc));
  } else {
    qsort(lat, (size_t)iters, sizeof *lat, cmpd_f);
    const double med = lat[iters / 2], p99 = lat[(int)(iters * 0.99)], mean_pipe = pipe_s / iters;
    printf("shape %3ux%-4u sync median %8.1f us  p99 %8.1f us  min %8.1f us | pipelined (%d in flight) %8.1f us/batch "
           "%8.0f tok/s | max |pipelined - sync| %.2g\n",
           n, L, med * 1e6, p99 * 1e6, lat[0] * 1e6, inflight, mean_pipe * 1e6, n * L / mean_pipe, maxdiff);
    fprintf(f, "%s{\"n\": %u, \"len\": %u, \"iters\": %d, \"sync_median_us\": %.2f, \"sync_p99_us\": %.2f, "
               "\"sync_min_us\": %.2f, \"inflight\": %d, \"pipelined_us_per_batch\": %.2f, \"pipelined_tok_s\": %.0f, "
               "\"sync_tok_s\": %.0f, \"max_abs_diff_pipelined_vs_sync\": %.3g}",
            first ? "" : ",\n ", n, L, iters, med * 1e6, p99 * 1e6, lat[0] * 1e6, inflight, mean_pipe * 1e6,
            n * L / mean_pipe, n * L / med, maxdiff);
    if (maxdiff > 1e-3) {
      fprintf(stderr, "shape %ux%u: pipelined scores differ from one-at-a-time by %.3g\n", n, L, maxdiff);
      rc = 1;
    }
  }
  for (int r = 0; r < N_ROT; ++r) free(ids[r]), free(sync_sc[r]), free(pipe_sc[r]);
  free(cu), free(st), free(lat);
  return rc;
}

int main(int argc, char **argv) {
  const char *model = NULL, *device = "cuda:0";
  uint32_t max_tokens = 16384;
  work_t work[MAX_WORK];
  int nw = 0, warmup = 2, iters = 10;
  const char *seqs = NULL, *shapes = NULL, *shapes_out = NULL;
  vr_model_options_t opt;
  vr_model_options_init(&opt);
  for (int i = 1; i + 1 < argc; i += 2) {
    char err[160];
    int crc;
    if (!strcmp(argv[i], "--model")) model = argv[i + 1];
    else if (!strcmp(argv[i], "--seqs")) seqs = argv[i + 1];
    else if (!strcmp(argv[i], "--out") && seqs && nw < MAX_WORK) {
      work[nw++] = (work_t){seqs, argv[i + 1], warmup, iters};
      seqs = NULL;
    } else if (!strcmp(argv[i], "--device")) device = argv[i + 1];
    else if (!strcmp(argv[i], "--max-batch-tokens")) max_tokens = (uint32_t)strtoul(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--shapes")) shapes = argv[i + 1];
    else if (!strcmp(argv[i], "--shapes-out")) shapes_out = argv[i + 1];
    else if (!strncmp(argv[i], "--", 2) &&
             (crc = vr_cuda_options_set(&opt.cuda, argv[i] + 2, argv[i + 1], err, sizeof err)) != VR_ERR_NOT_FOUND) {
      if (crc) {
        fprintf(stderr, "--%s\n", err);
        return 2;
      }
    } else {
      fprintf(stderr, "unexpected option %s (each --out must follow its --seqs; at most %d workloads)\n", argv[i],
              MAX_WORK);
      return 2;
    }
  }
  if (!model || (nw == 0 && !shapes) || iters < 1 || warmup < 0) {
    fprintf(stderr, "usage: %s --model DIR [--device cuda:0] [--max-batch-tokens N] "
                    "{--warmup N --iters N --seqs FILE --out JSON}...\n", argv[0]);
    return 2;
  }
  size_t free0 = 0, total_mem = 0;
  if (!strncmp(device, "cuda", 4)) { /* create the context before measuring memory */
    cudaError_t e = cudaFree(0);
    if (e == cudaSuccess) e = cudaMemGetInfo(&free0, &total_mem);
    if (e != cudaSuccess) {
      fprintf(stderr, "CUDA: %s\n", cudaGetErrorString(e));
      return 1;
    }
  }
  opt.device = device;
  opt.max_batch_tokens = max_tokens;
  vr_model_t *m = NULL;
  const double t0 = now_s();
  int rc = vr_model_load(model, &opt, &m);
  const double load_s = now_s() - t0;
  if (rc) {
    fprintf(stderr, "load %s: %s\n", model, vr_strerror(rc));
    return 1;
  }
  printf("%s: loaded in %.2f s\n", model, load_s);
  for (int i = 0; i < nw && rc == 0; ++i) rc = run_work(m, &work[i], model, max_tokens, load_s, free0);
  if (shapes && rc == 0) {
    FILE *f = fopen(shapes_out ? shapes_out : "/dev/null", "w");
    if (!f) {
      fprintf(stderr, "cannot write %s\n", shapes_out);
      rc = 1;
    } else {
      const vr_model_info_t *info = vr_model_info(m);
      fprintf(f, "{\"model\": \"%s\", \"device_name\": \"%s\", \"load_s\": %.4f, \"max_batch_tokens\": %u, \"shapes\": [",
              model, info->device_name, load_s, max_tokens);
      int first = 1;
      for (const char *p = shapes; rc == 0 && *p;) {
        unsigned n = 0, L = 0;
        int used = 0;
        if (sscanf(p, "%ux%u%n", &n, &L, &used) != 2 || n == 0 || L == 0 || (uint64_t)n * L > max_tokens) {
          fprintf(stderr, "bad shape at '%s' (NxL with N*L <= max batch tokens)\n", p);
          rc = 1;
          break;
        }
        rc = run_shape(m, n, L, iters, f, first);
        first = 0;
        p += used;
        if (*p == ',') ++p;
      }
      size_t free1 = 0, tot = 0;
      if (free0 && cudaMemGetInfo(&free1, &tot) == cudaSuccess)
        fprintf(f, "], \"device_bytes_used_process\": %llu}\n", (unsigned long long)(free0 - free1));
      else
        fprintf(f, "]}\n");
      fclose(f);
    }
  }
  vr_model_free(m);
  return rc;
}
