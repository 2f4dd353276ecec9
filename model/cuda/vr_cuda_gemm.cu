/* vr_cuda_gemm.cu: the backend's one GEMM, through cuBLASLt (contract in vr_cuda_ops.h).
 *
 * Row-major D (M, N) = op_a(A) (M, K) . op_b(B) (K, N) is, in cuBLASLt's column-major terms,
 * D^T (N x M, ld N) = op_b(B)^T (N x K) . op_a(A)^T (K x M): matrix "A" of the call is our B,
 * matrix "B" is our A. A row-major matrix stored (r, c) is the column-major (c x r, ld c), so:
 *   our B, op_b T (stored (N, K), the forward's weights W): cuBLASLt A = (K x N, ld K), TRANSA T;
 *   our B, op_b N (stored (K, N)):                          cuBLASLt A = (N x K, ld N), TRANSA N;
 *   our A, op_a N (stored (M, K), the activations):        cuBLASLt B = (K x M, ld K), TRANSB N;
 *   our A, op_a T (stored (K, M)):                          cuBLASLt B = (M x K, ld M), TRANSB T.
 * The forward's D = A W^T is (op_a N, op_b T). A bias epilogue adds bias[n] along cuBLASLt's
 * m = N, i.e. per output feature.
 *
 * Plans (descriptor, layouts, heuristic algorithm) live in a cache keyed by the operand
 * layouts and the full shape (4-way probing; a colliding key replaces an old plan),
 * exact-size plans in a cache of their own. The bias pointer is set on the descriptor at
 * every call (descriptors are host objects, read when the call is enqueued, so this is
 * capture-safe).
 * Algorithms: the heuristic's candidates (up to VR_GEMM_CANDIDATES) are kept per plan; while
 * tuning is on (vr_cuda_gemm_set_tuning, the backend's warm-up at load) a plan's first eager
 * call times every candidate on the call's own buffers (CUDA events, median of 3 after one
 * warm-up run) and keeps the fastest; otherwise the heuristic's first choice is used. Tuning
 * runs the GEMM several times, so it is only for warm-up data (beta = 1 accumulates).
 * Tuning options (vr_cuda_gemm_set_tune_opts, off by default): a flush buffer overwritten before
 * every timed run, so the candidates read their operands from HBM as in a forward that streams
 * every layer's weights once (timed hot, a small GEMM's weights sit in L2 and the timing ranks
 * latency, not streaming); and a wider search for the bucket plans built from then on: up to
 * VR_GEMM_WIDE heuristic candidates plus split-K variants (2, 4, 8, 16 ranges, reduced out of place
 * in the workspace: deterministic) of each that cublasLtMatmulAlgoCheck accepts.
 * A tuned choice is kept per process (choices(), behind its mutex: the file's one mutable state
 * outside a context): a later plan of the same key (device model, shape, operand layouts, epilogue,
 * output type, timing options, workspace, candidate count) in any context takes it without timing,
 * so two engines or models over the same weights in one process run the same algorithms and give
 * the same bits (timing alone picks among near-equal candidates by noise, and split-K variants
 * round differently). With a GEMM-choice cache file (vr_cuda_gemm_cache_open, model/vr_gemm_tune.h)
 * the choices of earlier processes are loaded into that table and new ones written back
 * (vr_cuda_gemm_cache_save), so later processes make the first one's choices too.
 * Not thread-safe: one gemm context per model, used by its forward thread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#define VR_WITH_CUBLAS
#include "vr_cuda_check.h"
#include "vr_cuda_ops.h"
#include "vr_gemm_tune.h"

#define VR_GEMM_CACHE 1024
#define VR_GEMM_CACHE_BUSY_TRIES 3 /* saves in a row that may find the cache file's lock held */
#define VR_GEMM_XCACHE 256 /* exact-size plans: their own cache, so they never evict bucket plans */
#define VR_GEMM_CANDIDATES 12 /* the heuristic's */
#define VR_GEMM_WIDE 24       /* the heuristic's with split-K variants on */
#define VR_GEMM_MAX_ALGOS 64  /* with the split-K variants */

typedef struct vr_gemm_plan {
  int used; /* 0 free, 1 a plan, 2 (exact cache) no algorithm for this key */
  int T, N, K, out_f32, has_bias, beta1, gelu; /* T: rows of D (M) */
  vr_cuda_op_t op_a, op_b;
  int bias_fallback; /* the heuristic rejected the bias (/gelu) epilogue: plain GEMM + kernels */
  int tuned;         /* candidates timed (or only one) */
  int n_algos;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo; /* the one in use */
  cublasLtMatmulAlgo_t cand[VR_GEMM_MAX_ALGOS];
  int cand_split[VR_GEMM_MAX_ALGOS]; /* its split-K ranges (1: none, 0: unknown) */
  int algo_split;                    /* algo's split-K ranges (cand_split of the choice) */
  float tuned_us;                    /* the choice's median time when tuned by timing, else 0 */
} vr_gemm_plan_t;

struct vr_cuda_gemm {
  cublasLtHandle_t lt;
  void *workspace;
  size_t workspace_bytes;
  uint64_t plans_created, plans_tuned;
  int tuning;
  int plan_T; /* > 0: exact-size mode, see vr_cuda_gemm_set_plan_rows */
  void *flush; /* tuning options: vr_cuda_gemm_set_tune_opts */
  size_t flush_bytes;
  int splitk;
  int same_bits; /* tuning keeps only candidates whose output equals the first candidate's */
  cudaEvent_t ev0, ev1;
  vr_gemm_plan_t cache[VR_GEMM_CACHE];
  vr_gemm_plan_t xcache[VR_GEMM_XCACHE];
};

/* Logs (does not abort on) a failed teardown call. */
static void lt_try(cublasStatus_t st, const char *what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    vr_log(VR_LOG_ERROR, "%s failed: %s (device %d)", what, cublasGetStatusString(st), vr_cuda_current_device_());
}

static void plan_destroy(vr_gemm_plan_t *p) {
  if (p->used != 1) {
    p->used = 0;
    return;
  }
  lt_try(cublasLtMatrixLayoutDestroy(p->la), "cublasLtMatrixLayoutDestroy");
  lt_try(cublasLtMatrixLayoutDestroy(p->lb), "cublasLtMatrixLayoutDestroy");
  lt_try(cublasLtMatrixLayoutDestroy(p->lc), "cublasLtMatrixLayoutDestroy");
  lt_try(cublasLtMatmulDescDestroy(p->desc), "cublasLtMatmulDescDestroy");
  p->used = 0;
}

/* The split-K ranges an algorithm is configured with (0 when cuBLASLt does not say). */
static int split_of(const cublasLtMatmulAlgo_t *a) {
  int32_t v = 0;
  size_t w = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &v, sizeof(v), &w) !=
      CUBLAS_STATUS_SUCCESS)
    return 0;
  return v;
}

/* Appends to p's candidates the split-K variants of its heuristic ones that the algorithm check
 * accepts within the workspace, without duplicates (up to VR_GEMM_MAX_ALGOS). */
static void add_splitk(vr_cuda_gemm_t *g, vr_gemm_plan_t *p) {
  static const int32_t splits[] = {2, 4, 8, 16};
  const int n0 = p->n_algos;
  for (int i = 0; i < n0; ++i)
    for (size_t k = 0; k < sizeof(splits) / sizeof(splits[0]) && p->n_algos < VR_GEMM_MAX_ALGOS; ++k) {
      cublasLtMatmulAlgo_t a = p->cand[i];
      const uint32_t red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits[k], sizeof(splits[k])) !=
              CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof(red)) !=
              CUBLAS_STATUS_SUCCESS)
        continue;
      cublasLtMatmulHeuristicResult_t chk;
      if (cublasLtMatmulAlgoCheck(g->lt, p->desc, p->la, p->lb, p->lc, p->lc, &a, &chk) != CUBLAS_STATUS_SUCCESS ||
          chk.workspaceSize > g->workspace_bytes)
        continue;
      int dup = 0;
      for (int j = 0; j < p->n_algos && !dup; ++j) dup = !memcmp(&p->cand[j], &a, sizeof(a));
      if (dup) continue;
      p->cand_split[p->n_algos] = splits[k];
      p->cand[p->n_algos++] = a;
    }
  vr_log(VR_LOG_DEBUG, "gemm T=%d N=%d K=%d: %d heuristic candidates + %d split-K variants", p->T, p->N, p->K, n0,
         p->n_algos - n0);
}

/* Builds desc + layouts; with_bias selects the BIAS epilogue (GELU_BIAS when p->gelu).
 * Returns 1 when the heuristic found an algorithm, 0 otherwise (the plan is then destroyed). */
static int plan_build(vr_cuda_gemm_t *g, vr_gemm_plan_t *p, int with_bias, int exact) {
  const cudaDataType_t dt = p->out_f32 ? CUDA_R_32F : CUDA_R_16BF;
  VR_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  /* cuBLASLt's A is our B, its B our A (see the top comment) */
  const cublasOperation_t ta = p->op_b == VR_CUDA_OP_T ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = p->op_a == VR_CUDA_OP_T ? CUBLAS_OP_T : CUBLAS_OP_N;
  VR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  VR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (with_bias) {
    const cublasLtEpilogue_t ep = p->gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    VR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
    const cudaDataType_t bt = dt;
    VR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
  }
  if (p->op_b == VR_CUDA_OP_T)
    VR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, (uint64_t)p->K, (uint64_t)p->N, (int64_t)p->K));
  else
    VR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, (uint64_t)p->N, (uint64_t)p->K, (int64_t)p->N));
  if (p->op_a == VR_CUDA_OP_N)
    VR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, (uint64_t)p->K, (uint64_t)p->T, (int64_t)p->K));
  else
    VR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, (uint64_t)p->T, (uint64_t)p->K, (int64_t)p->T));
  VR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lc, dt, (uint64_t)p->N, (uint64_t)p->T, (int64_t)p->N));
  p->used = 1;

  cublasLtMatmulPreference_t pref;
  VR_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = g->workspace_bytes;
  VR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t res[VR_GEMM_WIDE];
  int n = 0;
  const int want = g->splitk && !exact ? VR_GEMM_WIDE : VR_GEMM_CANDIDATES;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, want, res, &n);
  lt_try(cublasLtMatmulPreferenceDestroy(pref), "cublasLtMatmulPreferenceDestroy");
  g->plans_created++;
  if (st != CUBLAS_STATUS_SUCCESS || n < 1) {
    plan_destroy(p);
    return 0;
  }
  p->n_algos = 0;
  for (int i = 0; i < n; ++i)
    if (res[i].state == CUBLAS_STATUS_SUCCESS) p->cand[p->n_algos++] = res[i].algo;
  if (p->n_algos == 0) {
    plan_destroy(p);
    return 0;
  }
  for (int i = 0; i < p->n_algos; ++i) p->cand_split[i] = split_of(&p->cand[i]);
  if (g->splitk && !exact) add_splitk(g, p);
  p->algo = p->cand[0];
  p->algo_split = p->cand_split[0];
  p->tuned_us = 0.f;
  p->tuned = p->n_algos == 1;
  if (exact) {
    /* exact-size mode: the heuristic's first choice for this size, never tuned (it beat the
     * algorithms of the bucket plans, and device memory stayed the same: docs/benchmarks.md) */
    vr_log(VR_LOG_DEBUG, "exact-size gemm T=%d N=%d K=%d: the first of %d candidates", p->T, p->N, p->K, p->n_algos);
    p->tuned = 1;
  }
  return 1;
}

extern "C" int vr_cuda_gemm_init(vr_cuda_gemm_t **out, size_t workspace_bytes) {
  *out = NULL;
  vr_cuda_gemm_t *g = (vr_cuda_gemm_t *)calloc(1, sizeof(*g));
  if (!g) return -2; /* VR_ERR_NOMEM */
  if (cublasLtCreate(&g->lt) != CUBLAS_STATUS_SUCCESS) {
    vr_log(VR_LOG_ERROR, "cublasLtCreate failed on device %d", vr_cuda_current_device_());
    free(g);
    return -21; /* VR_ERR_DEVICE */
  }
  if (workspace_bytes && VR_CUDA_TRY(cudaMalloc(&g->workspace, workspace_bytes)) != 0) {
    lt_try(cublasLtDestroy(g->lt), "cublasLtDestroy");
    free(g);
    return -21;
  }
  g->workspace_bytes = workspace_bytes;
  if (VR_CUDA_TRY(cudaEventCreate(&g->ev0)) || VR_CUDA_TRY(cudaEventCreate(&g->ev1))) {
    vr_cuda_gemm_free(g);
    return -21;
  }
  *out = g;
  return 0;
}

extern "C" void vr_cuda_gemm_set_tuning(vr_cuda_gemm_t *g, int on) { g->tuning = on; }
extern "C" void vr_cuda_gemm_set_tune_opts(vr_cuda_gemm_t *g, void *flush, size_t flush_bytes, int splitk) {
  g->flush = flush_bytes ? flush : NULL;
  g->flush_bytes = flush ? flush_bytes : 0;
  g->splitk = splitk != 0;
}
extern "C" void vr_cuda_gemm_set_tune_same_bits(vr_cuda_gemm_t *g, int on) { g->same_bits = on != 0; }
extern "C" uint64_t vr_cuda_gemm_plans_tuned(const vr_cuda_gemm_t *g) { return g->plans_tuned; }

extern "C" void vr_cuda_gemm_free(vr_cuda_gemm_t *g) {
  if (!g) return;
  for (int i = 0; i < VR_GEMM_CACHE; ++i) plan_destroy(&g->cache[i]);
  for (int i = 0; i < VR_GEMM_XCACHE; ++i) plan_destroy(&g->xcache[i]);
  if (g->workspace) (void)VR_CUDA_TRY(cudaFree(g->workspace));
  if (g->ev0) (void)VR_CUDA_TRY(cudaEventDestroy(g->ev0));
  if (g->ev1) (void)VR_CUDA_TRY(cudaEventDestroy(g->ev1));
  if (g->lt) lt_try(cublasLtDestroy(g->lt), "cublasLtDestroy");
  free(g);
}

extern "C" uint64_t vr_cuda_gemm_plans_created(const vr_cuda_gemm_t *g) { return g->plans_created; }

extern "C" size_t vr_cuda_gemm_report(const vr_cuda_gemm_t *g, int T, char *buf, size_t n) {
  size_t len = 0;
  if (n) buf[0] = 0;
  for (int i = 0; i < VR_GEMM_CACHE; ++i) {
    const vr_gemm_plan_t *p = &g->cache[i];
    if (p->used != 1 || p->T != T || p->tuned_us <= 0.f) continue;
    char line[160];
    const int k = snprintf(line, sizeof line, "  gemm M=%d N=%d K=%d%s: %d candidates, split-K %d, %.1f us%s\n", p->T,
                           p->N, p->K, p->beta1 ? " +=" : "", p->n_algos, p->algo_split, p->tuned_us,
                           g->flush ? " (timed from HBM)" : " (timed hot)");
    if (k > 0 && len + (size_t)k < n) memcpy(buf + len, line, (size_t)k + 1);
    if (k > 0) len += (size_t)k;
  }
  return len;
}
extern "C" size_t vr_cuda_gemm_workspace_bytes(const vr_cuda_gemm_t *g) { return g->workspace_bytes; }

/* exact 0: a bucket plan (cache). exact 1: an exact-size forward's plan (xcache) on the
 * heuristic's first choice; NULL when there is none (remembered, so it is asked once per
 * key; no bias-kernel fallback). exact 2: an
 * exact-size plan on any algorithm (xcache; replaces a remembered miss), for a call the
 * bucket plan is not valid for; like exact 0 it never returns NULL. */
static vr_gemm_plan_t *plan_get(vr_cuda_gemm_t *g, vr_cuda_op_t op_a, vr_cuda_op_t op_b, int T, int N, int K,
                                int out_f32, int has_bias, int beta1, int gelu, int exact) {
  uint32_t h = 2166136261u;
  const int key[7] = {T, N, K, out_f32, has_bias, beta1, gelu};
  for (int i = 0; i < 7; ++i) h = (h ^ (uint32_t)key[i]) * 16777619u;
  /* the forward's (N, T) hashes as it did before the operand layouts were part of the key */
  if (op_a != VR_CUDA_OP_N || op_b != VR_CUDA_OP_T) h = (h ^ (uint32_t)(4 | op_a | op_b << 1)) * 16777619u;
  /* 4-way probing: a model's ~4 GEMM shapes per token bucket must not evict each other */
  vr_gemm_plan_t *cache = exact ? g->xcache : g->cache;
  const uint32_t n_cache = exact ? VR_GEMM_XCACHE : VR_GEMM_CACHE;
  vr_gemm_plan_t *p = NULL;
  for (int w = 0; w < 4; ++w) {
    vr_gemm_plan_t *q = &cache[(h + (uint32_t)w) % n_cache];
    if (q->used && q->T == T && q->N == N && q->K == K && q->out_f32 == out_f32 && q->has_bias == has_bias &&
        q->beta1 == beta1 && q->gelu == gelu && q->op_a == op_a && q->op_b == op_b) {
      if (q->used == 1) return q;
      if (exact == 1) return NULL;
      p = q; /* exact 2: rebuild the remembered miss */
      break;
    }
    if (!q->used && !p) p = q;
  }
  if (!p) p = &cache[h % n_cache];
  plan_destroy(p);
  p->T = T;
  p->N = N;
  p->K = K;
  p->out_f32 = out_f32;
  p->has_bias = has_bias;
  p->beta1 = beta1;
  p->gelu = gelu;
  p->op_a = op_a;
  p->op_b = op_b;
  p->bias_fallback = 0;
  p->tuned = 0;
  if (plan_build(g, p, has_bias, exact)) return p;
  if (exact == 1) {
    p->used = 2;
    return NULL;
  }
  if (has_bias) {
    p->bias_fallback = 1;
    if (plan_build(g, p, 0, exact)) {
      vr_log(VR_LOG_DEBUG, "no bias-epilogue algorithm for T=%d N=%d K=%d: GEMM + bias kernel", T, N, K);
      return p;
    }
  }
  vr_log(VR_LOG_FATAL, "cuBLASLt found no algorithm for bf16 GEMM T=%d N=%d K=%d ops %c%c out=%s on device %d", T,
         N, K, op_a == VR_CUDA_OP_T ? 'T' : 'N', op_b == VR_CUDA_OP_T ? 'T' : 'N', out_f32 ? "f32" : "bf16",
         vr_cuda_current_device_());
  abort();
}

/* C: the beta term's input (D itself for an in-place accumulate). W: our B (cuBLASLt's A). */
static cublasStatus_t run_algo(vr_cuda_gemm_t *g, vr_gemm_plan_t *p, const cublasLtMatmulAlgo_t *algo, void *D,
                               const void *C, const uint16_t *A, const uint16_t *W, float beta, cudaStream_t s) {
  const float alpha = 1.f;
  return cublasLtMatmul(g->lt, p->desc, &alpha, W, p->la, A, p->lb, &beta, C, p->lc, D, p->lc, algo, g->workspace,
                        g->workspace_bytes, s);
}

/* ---- the process's tuned choices, and the GEMM-choice cache file (vr_gemm_tune.h) that carries
 * them to later processes. An entry's key is the device's identity (name, compute capability, SM
 * count: two GPUs of one model share their choices), the cuBLASLt version and the plan's key; its
 * algorithm is cublasLtMatmulAlgo_t's bytes. A loaded entry is taken only when its bytes equal one
 * of the candidates the heuristic returned for the plan (the file is untrusted: its bytes are never
 * handed to cuBLASLt); else it is ignored with a warning, the plan is timed and the new choice
 * replaces the entry in the file. */
static_assert(sizeof(cublasLtMatmulAlgo_t) == VR_GEMM_TUNE_ALGO * sizeof(uint64_t), "cublasLtMatmulAlgo_t size");
#define VR_GEMM_DEVS 64
typedef struct {
  int known;
  char name[VR_GEMM_TUNE_DEVICE];
  int major, minor, sms;
} vr_gemm_dev_t;
typedef struct {
  vr_gemm_tune_set_t set; /* fresh -1: loaded and not valid here (replaced when tuned: 2) */
  char path[4096];        /* the file; "" none */
  int opened;
  size_t unsaved; /* fresh entries not yet stored */
  int busy;       /* saves in a row that found the file's lock held (VR_GEMM_CACHE_BUSY_TRIES: given up) */
  int64_t ltver;
  vr_gemm_dev_t dev[VR_GEMM_DEVS];
} vr_gemm_choices_t;

/* The table and its mutex: the file's one mutable state outside a context. */
static vr_gemm_choices_t *choices(pthread_mutex_t **mu) {
  static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  static vr_gemm_choices_t tab;
  *mu = &m;
  return &tab;
}

/* p's key into e (the table's mutex held: the device identities are filled on first use). */
static void choice_key(vr_gemm_choices_t *t, const vr_cuda_gemm_t *g, const vr_gemm_plan_t *p,
                       vr_gemm_tune_entry_t *e) {
  memset(e, 0, sizeof *e);
  int dev = 0;
  (void)VR_CUDA_TRY(cudaGetDevice(&dev));
  vr_gemm_dev_t tmp = {}, *d = dev >= 0 && dev < VR_GEMM_DEVS ? &t->dev[dev] : &tmp;
  if (!d->known) {
    cudaDeviceProp prop;
    if (VR_CUDA_TRY(cudaGetDeviceProperties(&prop, dev)) == 0) {
      snprintf(d->name, sizeof d->name, "%s", prop.name);
      d->major = prop.major, d->minor = prop.minor, d->sms = prop.multiProcessorCount;
    } else {
      snprintf(d->name, sizeof d->name, "device %d", dev);
    }
    d->known = 1;
  }
  if (!t->ltver) t->ltver = (int64_t)cublasLtGetVersion();
  memcpy(e->device, d->name, sizeof e->device);
  e->cc_major = d->major, e->cc_minor = d->minor, e->sms = d->sms;
  e->cublaslt = t->ltver;
  const int32_t k[VR_GEMM_TUNE_KEY] = {p->T, p->N, p->K, p->out_f32, p->has_bias, p->beta1, p->gelu, (int32_t)p->op_a,
                                       (int32_t)p->op_b, p->bias_fallback, p->n_algos,
                                       (g->flush != NULL) | g->same_bits << 1,
                                       (int32_t)(g->workspace_bytes >> 12)};
  memcpy(e->key, k, sizeof k);
}

/* p takes the table's choice for its key when that is among its candidates: 1; else 0. */
static int choice_take(vr_cuda_gemm_t *g, vr_gemm_plan_t *p) {
  pthread_mutex_t *mu;
  vr_gemm_choices_t *t = choices(&mu);
  int found = 0;
  pthread_mutex_lock(mu);
  vr_gemm_tune_entry_t key;
  choice_key(t, g, p, &key);
  const long i = vr_gemm_tune_find(&t->set, &key);
  if (i >= 0) {
    vr_gemm_tune_entry_t *c = &t->set.e[i];
    for (int j = 0; j < p->n_algos && !found; ++j)
      if (!memcmp(&p->cand[j], c->algo, sizeof(cublasLtMatmulAlgo_t))) {
        p->algo = p->cand[j];
        p->algo_split = p->cand_split[j];
        p->tuned_us = (float)c->us;
        p->tuned = 1;
        found = 1;
        g->plans_tuned++;
      }
    if (!found && c->fresh == 0) {
      vr_log(VR_LOG_WARN, "GEMM-choice cache %s: the choice for M=%d N=%d K=%d on %s (cuBLASLt %lld) is not among "
             "cuBLASLt's %d candidates here: ignored (timed again; the entry is replaced)", t->path, p->T, p->N, p->K,
             c->device, (long long)c->cublaslt, p->n_algos);
      c->fresh = -1;
    }
  }
  pthread_mutex_unlock(mu);
  return found;
}

/* Records p's tuned choice for its key (the first one recorded stays, except over an entry found
 * not valid here). */
static void choice_put(const vr_cuda_gemm_t *g, const vr_gemm_plan_t *p) {
  pthread_mutex_t *mu;
  vr_gemm_choices_t *t = choices(&mu);
  pthread_mutex_lock(mu);
  vr_gemm_tune_entry_t e;
  choice_key(t, g, p, &e);
  memcpy(e.algo, &p->algo, sizeof e.algo);
  e.us = p->tuned_us;
  const long i = vr_gemm_tune_find(&t->set, &e);
  if (i >= 0 && t->set.e[i].fresh == -1) {
    e.fresh = 2;
    t->set.e[i] = e;
    t->unsaved++;
  } else if (i < 0) {
    e.fresh = 1;
    if (vr_gemm_tune_append(&t->set, &e) == 0) t->unsaved++; /* full: this key is tuned per context */
  }
  pthread_mutex_unlock(mu);
}

extern "C" int vr_cuda_gemm_cache_open(const char *path) {
  if (!path || !path[0] || !strcmp(path, "off")) return 0;
  pthread_mutex_t *mu;
  vr_gemm_choices_t *t = choices(&mu);
  int rc = 0;
  pthread_mutex_lock(mu);
  if (t->opened) {
    if (strcmp(t->path, path))
      vr_log(VR_LOG_WARN, "GEMM-choice cache %s: this process already uses %s; kept", path,
             t->path[0] ? t->path : "none");
    pthread_mutex_unlock(mu);
    return 0;
  }
  t->opened = 1;
  if (strlen(path) >= sizeof t->path) {
    vr_log(VR_LOG_WARN, "GEMM-choice cache: a path of %zu bytes is too long: none used", strlen(path));
    pthread_mutex_unlock(mu);
    return VR_ERR_INVAL;
  }
  snprintf(t->path, sizeof t->path, "%s", path);
  vr_gemm_tune_set_t got;
  int exists = 0;
  char err[2200] = "";
  rc = vr_gemm_tune_load(path, &got, &exists, err, sizeof err);
  if (rc == 0) {
    size_t n = 0;
    for (size_t i = 0; i < got.n; ++i)
      if (vr_gemm_tune_find(&t->set, &got.e[i]) < 0 && vr_gemm_tune_append(&t->set, &got.e[i]) == 0) ++n;
    if (exists) vr_log(VR_LOG_INFO, "GEMM-choice cache %s: %zu choices loaded", path, n);
    else vr_log(VR_LOG_INFO, "GEMM-choice cache %s: not there yet (written after the first tuning)", path);
  } else if (rc == VR_ERR_PARSE || rc == VR_ERR_TOO_LARGE) {
    vr_log(VR_LOG_WARN, "GEMM-choice cache: %s: ignored (the GEMMs are timed again and the file rewritten)", err);
  } else {
    vr_log(VR_LOG_WARN, "GEMM-choice cache: %s: not used (choices kept for this process only)", err);
    t->path[0] = '\0';
  }
  vr_gemm_tune_set_free(&got);
  pthread_mutex_unlock(mu);
  return rc;
}

extern "C" int vr_cuda_gemm_cache_save(void) {
  pthread_mutex_t *mu;
  vr_gemm_choices_t *t = choices(&mu);
  int rc = 0;
  pthread_mutex_lock(mu);
  if (t->path[0] && t->unsaved) {
    size_t added = 0, total = 0;
    int replaced = 0;
    char err[2200] = "";
    rc = vr_gemm_tune_store(t->path, &t->set, &added, &total, &replaced, err, sizeof err);
    if (rc == 0) {
      if (replaced) vr_log(VR_LOG_WARN, "GEMM-choice cache: %s: replaced", err);
      else if (err[0]) vr_log(VR_LOG_WARN, "GEMM-choice cache: %s", err); /* e.g. the file is full */
      vr_log(VR_LOG_INFO, "GEMM-choice cache %s: %zu choices added (%zu in the file)", t->path, added, total);
      for (size_t i = 0; i < t->set.n; ++i)
        if (t->set.e[i].fresh > 0) t->set.e[i].fresh = 0;
      t->busy = 0;
    } else if (rc == VR_ERR_BUSY && ++t->busy < VR_GEMM_CACHE_BUSY_TRIES) {
      /* another process's save holds the lock: passing, so the next save tries again */
      vr_log(VR_LOG_WARN, "GEMM-choice cache: %s (tried again at the next save)", err);
      pthread_mutex_unlock(mu);
      return rc;
    } else {
      vr_log(VR_LOG_WARN, "GEMM-choice cache: %s: not written (choices kept for this process only)", err);
      t->path[0] = '\0';
    }
    t->unsaved = 0;
  }
  pthread_mutex_unlock(mu);
  return rc;
}

/* Adds to *cnt the count of the n 16-bit words where a and b differ (atomically; *cnt zeroed by the
 * caller). */
__global__ void k_count_neq16(const uint16_t *__restrict__ a, const uint16_t *__restrict__ b, size_t n,
                              unsigned long long *cnt) {
  unsigned long long c = 0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    c += a[i] != b[i];
  for (int o = 16; o; o >>= 1) c += __shfl_down_sync(0xffffffffu, c, o);
  if ((threadIdx.x & 31) == 0 && c) atomicAdd(cnt, c);
}

/* Times every candidate of p on these buffers and keeps the fastest. D's contents are kept: when
 * the call accumulates in place (beta 1, C == D), D is copied first and put back after the
 * timing, so the call that follows (gemm_run) gives the result it would have given untuned. With
 * g->same_bits, a candidate is eligible only when its output on this call equals the first
 * candidate's (the heuristic's choice) bit for bit, so tuning cannot change any result. Without
 * device memory for those copies the heuristic's first choice is kept, untimed. */
static void plan_tune(vr_cuda_gemm_t *g, vr_gemm_plan_t *p, void *D, const void *C, const uint16_t *A,
                      const uint16_t *W, float beta, cudaStream_t s) {
  const size_t bytes = (size_t)p->T * (size_t)p->N * (p->out_f32 ? 4u : 2u);
  const int inplace = beta != 0.f && C == D;
  void *save = NULL, *ref = NULL;
  unsigned long long *cnt = NULL;
  int mem_ok = 1;
  if (inplace) mem_ok = cudaMalloc(&save, bytes) == cudaSuccess;
  if (mem_ok && g->same_bits)
    mem_ok = cudaMalloc(&ref, bytes) == cudaSuccess && cudaMalloc((void **)&cnt, sizeof *cnt) == cudaSuccess;
  if (!mem_ok) {
    (void)cudaGetLastError(); /* the failed allocation's error */
    vr_log(VR_LOG_WARN, "gemm T=%d N=%d K=%d: no device memory for the tuning's copies (%zu bytes): the heuristic's "
           "first choice is kept, untimed", p->T, p->N, p->K, bytes);
    if (save) VR_CUDA_CHECK(cudaFree(save));
    if (ref) VR_CUDA_CHECK(cudaFree(ref));
    if (cnt) VR_CUDA_CHECK(cudaFree(cnt));
    p->tuned = 1;
    return;
  }
  if (save) VR_CUDA_CHECK(cudaMemcpyAsync(save, D, bytes, cudaMemcpyDeviceToDevice, s));
  if (ref) { /* the first candidate's output: the bits every eligible candidate must give */
    VR_CUBLAS_CHECK(run_algo(g, p, &p->cand[0], D, C, A, W, beta, s));
    VR_CUDA_CHECK(cudaMemcpyAsync(ref, D, bytes, cudaMemcpyDeviceToDevice, s));
  }
  float best = 1e30f;
  int best_i = 0, n_same = 0;
  for (int i = 0; i < p->n_algos; ++i) {
    if (save) VR_CUDA_CHECK(cudaMemcpyAsync(D, save, bytes, cudaMemcpyDeviceToDevice, s));
    if (run_algo(g, p, &p->cand[i], D, C, A, W, beta, s) != CUBLAS_STATUS_SUCCESS) continue;
    unsigned long long differ = 0;
    if (ref) {
      VR_CUDA_CHECK(cudaMemsetAsync(cnt, 0, sizeof *cnt, s));
      k_count_neq16<<<264, 256, 0, s>>>((const uint16_t *)D, (const uint16_t *)ref, bytes / 2, cnt);
      VR_CUDA_CHECK(cudaGetLastError());
      VR_CUDA_CHECK(cudaMemcpyAsync(&differ, cnt, sizeof differ, cudaMemcpyDeviceToHost, s));
      VR_CUDA_CHECK(cudaStreamSynchronize(s));
      n_same += differ == 0;
    }
    float t[3];
    int ok = 1;
    for (int r = 0; r < 3 && ok; ++r) {
      if (g->flush) VR_CUDA_CHECK(cudaMemsetAsync(g->flush, r + 1, g->flush_bytes, s)); /* operands from HBM */
      VR_CUDA_CHECK(cudaEventRecord(g->ev0, s));
      ok = run_algo(g, p, &p->cand[i], D, C, A, W, beta, s) == CUBLAS_STATUS_SUCCESS;
      VR_CUDA_CHECK(cudaEventRecord(g->ev1, s));
      VR_CUDA_CHECK(cudaEventSynchronize(g->ev1));
      VR_CUDA_CHECK(cudaEventElapsedTime(&t[r], g->ev0, g->ev1));
    }
    if (!ok) continue;
    const float lo = fminf(t[0], fminf(t[1], t[2])), hi = fmaxf(t[0], fmaxf(t[1], t[2]));
    const float med = t[0] + t[1] + t[2] - lo - hi;
    if (med < best && differ == 0) best = med, best_i = i;
    if (vr_log_enabled(VR_LOG_DEBUG)) { /* what a rule for these shapes would be made from */
      uint32_t tile = 0, stages = 0;
      size_t w = 0;
      (void)cublasLtMatmulAlgoConfigGetAttribute(&p->cand[i], CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
      (void)cublasLtMatmulAlgoConfigGetAttribute(&p->cand[i], CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
      vr_log(VR_LOG_DEBUG, "gemm T=%d N=%d K=%d candidate %d: tile %u stages %u split-K %d, %.2f us%s", p->T, p->N,
             p->K, i, tile, stages, p->cand_split[i], med * 1e3f,
             !ref ? "" : differ ? " (other bits: not eligible)" : " (same bits)");
      if (ref && differ) vr_log(VR_LOG_DEBUG, "  %llu of %zu values differ from candidate 0's", differ, bytes / 2);
    }
  }
  VR_CUDA_CHECK(cudaGetLastError());
  if (save) VR_CUDA_CHECK(cudaMemcpyAsync(D, save, bytes, cudaMemcpyDeviceToDevice, s)); /* as before the tuning */
  if (save || ref) VR_CUDA_CHECK(cudaStreamSynchronize(s));
  if (save) VR_CUDA_CHECK(cudaFree(save));
  if (ref) VR_CUDA_CHECK(cudaFree(ref));
  if (cnt) VR_CUDA_CHECK(cudaFree(cnt));
  p->algo = p->cand[best_i];
  p->algo_split = p->cand_split[best_i];
  p->tuned_us = best < 1e30f ? best * 1e3f : 0.f;
  p->tuned = 1;
  g->plans_tuned++;
  vr_log(VR_LOG_DEBUG, "gemm T=%d N=%d K=%d%s%s: candidate %d of %d (split-K %d), %.1f us%s", p->T, p->N, p->K,
         p->gelu ? " gelu" : "", p->beta1 ? " +=" : "", best_i, p->n_algos, p->cand_split[best_i], best * 1e3f,
         g->flush ? " from HBM" : "");
  if (ref) vr_log(VR_LOG_DEBUG, "gemm T=%d N=%d K=%d: %d of %d candidates give candidate 0's bits", p->T, p->N, p->K,
                  n_same, p->n_algos);
}

extern "C" void vr_cuda_gemm(vr_cuda_gemm_t *g, void *D, int out_f32, const uint16_t *A,
                             const uint16_t *W, const void *bias, int T, int N, int K, float beta,
                             cudaStream_t s) {
  vr_cuda_gemm_ex(g, D, out_f32, A, W, bias, 0, T, N, K, beta, s);
}

/* Rows (T: the column count of cuBLASLt's B and C/D) of a plan's layouts. */
static void set_cols(vr_gemm_plan_t *p, uint64_t T) {
  VR_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(p->lb, CUBLASLT_MATRIX_LAYOUT_COLS, &T, sizeof(T)));
  VR_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(p->lc, CUBLASLT_MATRIX_LAYOUT_COLS, &T, sizeof(T)));
}

extern "C" void vr_cuda_gemm_set_plan_rows(vr_cuda_gemm_t *g, int T) { g->plan_T = T > 0 ? T : 0; }

/* The one entry: D = op_a(A) op_b(W) [+ bias] [+ C when beta = 1] (C may be D); T = M rows. */
static void gemm_run(vr_cuda_gemm_t *g, vr_cuda_op_t op_a, vr_cuda_op_t op_b, void *D, const void *C, int out_f32,
                     const uint16_t *A, const uint16_t *W, const void *bias, int gelu, int T, int N, int K, float beta,
                     cudaStream_t s) {
  if (T <= 0 || N <= 0) return;
  VR_ASSERT(K > 0 && (beta == 0.f || beta == 1.f));
  VR_ASSERT(!gelu || (bias && !out_f32 && beta == 0.f));
  /* exact-size mode (plan_T > T): a plan for exactly T rows, else (no algorithm for it) the
   * plan_T-row plan with its row count set to T for this call. Only for op_a N: with op_a T
   * the row count is the leading dimension of A, which a plan cannot change per call. */
  vr_gemm_plan_t *p = NULL;
  int PT = T;
  if (g->plan_T > T && op_a == VR_CUDA_OP_N) {
    p = plan_get(g, op_a, op_b, T, N, K, out_f32, bias != NULL, beta != 0.f, gelu, 1);
    if (!p) PT = g->plan_T;
  }
  if (!p) p = plan_get(g, op_a, op_b, PT, N, K, out_f32, bias != NULL, beta != 0.f, gelu, 0);
  if (PT != T) {
    set_cols(p, (uint64_t)T);
    cublasLtMatmulHeuristicResult_t chk;
    if (cublasLtMatmulAlgoCheck(g->lt, p->desc, p->la, p->lb, p->lc, p->lc, &p->algo, &chk) !=
            CUBLAS_STATUS_SUCCESS ||
        chk.workspaceSize > g->workspace_bytes) { /* not valid at T rows: a plan of T's own, any algorithm */
      set_cols(p, (uint64_t)PT);
      p = plan_get(g, op_a, op_b, T, N, K, out_f32, bias != NULL, beta != 0.f, gelu, 2);
      PT = T;
    }
  }
  if (bias && !p->bias_fallback)
    VR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (g->tuning && !p->tuned && PT == T) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    VR_CUDA_CHECK(cudaStreamIsCapturing(s, &cs));
    if (cs == cudaStreamCaptureStatusNone && !choice_take(g, p)) {
      plan_tune(g, p, D, C, A, W, beta, s);
      choice_put(g, p);
    }
  }
  VR_CUBLAS_CHECK(run_algo(g, p, &p->algo, D, C, A, W, beta, s));
  if (PT != T) set_cols(p, (uint64_t)PT); /* the call has read the layouts */
  if (bias && p->bias_fallback) {
    vr_cuda_add_bias(D, out_f32, bias, T, N, s);
    if (gelu) vr_cuda_bias_gelu((uint16_t *)D, NULL, T, N, gelu == 2, s);
  }
}

extern "C" void vr_cuda_gemm_ex(vr_cuda_gemm_t *g, void *D, int out_f32, const uint16_t *A, const uint16_t *W,
                                const void *bias, int gelu, int T, int N, int K, float beta, cudaStream_t s) {
  gemm_run(g, VR_CUDA_OP_N, VR_CUDA_OP_T, D, D, out_f32, A, W, bias, gelu, T, N, K, beta, s);
}

extern "C" void vr_cuda_gemm_res(vr_cuda_gemm_t *g, void *D, int out_f32, const uint16_t *A, const uint16_t *W,
                                 const void *bias, const void *C, int T, int N, int K, cudaStream_t s) {
  gemm_run(g, VR_CUDA_OP_N, VR_CUDA_OP_T, D, C, out_f32, A, W, bias, 0, T, N, K, 1.f, s);
}

extern "C" void vr_cuda_gemm_op(vr_cuda_gemm_t *g, vr_cuda_op_t op_a, vr_cuda_op_t op_b, void *D, int out_f32,
                                const uint16_t *A, const uint16_t *B, const void *bias, int gelu, const void *C, int M,
                                int N, int K, float beta, cudaStream_t s) {
  VR_ASSERT((op_a == VR_CUDA_OP_N || op_a == VR_CUDA_OP_T) && (op_b == VR_CUDA_OP_N || op_b == VR_CUDA_OP_T));
  gemm_run(g, op_a, op_b, D, C ? C : D, out_f32, A, B, bias, gelu, M, N, K, beta, s);
}
