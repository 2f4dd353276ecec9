/* vr_cuda_gemm.cu: the backend's one GEMM, through cuBLASLt (contract in vr_cuda_ops.h).
 *
 * Row-major D (T, N) = A (T, K) . W (N, K)^T is, in cuBLASLt's column-major
 * terms, D^T (N x T, ld N) = op(W)^T (N x K) . A^T (K x T): matrix "A" of the
 * call is W with TRANSA = T (K x N, ld K), "B" is the activations (K x T, ld K).
 * A bias epilogue then adds bias[n] along m = N, i.e. per output feature.
 *
 * Plans (descriptor, layouts, heuristic algorithm) live in a direct-mapped
 * cache keyed by the full shape; a colliding key replaces the old plan. The
 * bias pointer is set on the descriptor at every call (descriptors are host
 * objects, read when the call is enqueued, so this is capture-safe).
 * Not thread-safe: one gemm context per model, used by its forward thread. */
#include <string.h>

#define VR_WITH_CUBLAS
#include "vr_cuda_check.h"
#include "vr_cuda_ops.h"

#define VR_GEMM_CACHE 256

typedef struct vr_gemm_plan {
  int used;
  int T, N, K, out_f32, has_bias, beta1;
  int bias_fallback; /* the heuristic rejected the bias epilogue: plain GEMM + add_bias */
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
} vr_gemm_plan_t;

struct vr_cuda_gemm {
  cublasLtHandle_t lt;
  void *workspace;
  size_t workspace_bytes;
  uint64_t plans_created;
  vr_gemm_plan_t cache[VR_GEMM_CACHE];
};

/* Logs (does not abort on) a failed teardown call. */
static void lt_try(cublasStatus_t st, const char *what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    vr_log(VR_LOG_ERROR, "%s failed: %s (device %d)", what, cublasGetStatusString(st), vr_cuda_current_device_());
}

static void plan_destroy(vr_gemm_plan_t *p) {
  if (!p->used) return;
  lt_try(cublasLtMatrixLayoutDestroy(p->la), "cublasLtMatrixLayoutDestroy");
  lt_try(cublasLtMatrixLayoutDestroy(p->lb), "cublasLtMatrixLayoutDestroy");
  lt_try(cublasLtMatrixLayoutDestroy(p->lc), "cublasLtMatrixLayoutDestroy");
  lt_try(cublasLtMatmulDescDestroy(p->desc), "cublasLtMatmulDescDestroy");
  p->used = 0;
}

/* Builds desc + layouts; with_bias selects the BIAS epilogue. Returns 1 when
 * the heuristic found an algorithm, 0 otherwise (the plan is then destroyed). */
static int plan_build(vr_cuda_gemm_t *g, vr_gemm_plan_t *p, int with_bias) {
  const cudaDataType_t dt = p->out_f32 ? CUDA_R_32F : CUDA_R_16BF;
  VR_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  VR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  VR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (with_bias) {
    const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
    VR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
    const cudaDataType_t bt = dt;
    VR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
  }
  VR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, (uint64_t)p->K, (uint64_t)p->N, (int64_t)p->K));
  VR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, (uint64_t)p->K, (uint64_t)p->T, (int64_t)p->K));
  VR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lc, dt, (uint64_t)p->N, (uint64_t)p->T, (int64_t)p->N));
  p->used = 1;

  cublasLtMatmulPreference_t pref;
  VR_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = g->workspace_bytes;
  VR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t res;
  int n = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &n);
  lt_try(cublasLtMatmulPreferenceDestroy(pref), "cublasLtMatmulPreferenceDestroy");
  g->plans_created++;
  if (st != CUBLAS_STATUS_SUCCESS || n < 1) {
    plan_destroy(p);
    return 0;
  }
  p->algo = res.algo;
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
  *out = g;
  return 0;
}

extern "C" void vr_cuda_gemm_free(vr_cuda_gemm_t *g) {
  if (!g) return;
  for (int i = 0; i < VR_GEMM_CACHE; ++i) plan_destroy(&g->cache[i]);
  if (g->workspace) (void)VR_CUDA_TRY(cudaFree(g->workspace));
  lt_try(cublasLtDestroy(g->lt), "cublasLtDestroy");
  free(g);
}

extern "C" uint64_t vr_cuda_gemm_plans_created(const vr_cuda_gemm_t *g) { return g->plans_created; }
extern "C" size_t vr_cuda_gemm_workspace_bytes(const vr_cuda_gemm_t *g) { return g->workspace_bytes; }

static vr_gemm_plan_t *plan_get(vr_cuda_gemm_t *g, int T, int N, int K, int out_f32, int has_bias, int beta1) {
  uint32_t h = 2166136261u;
  const int key[6] = {T, N, K, out_f32, has_bias, beta1};
  for (int i = 0; i < 6; ++i) h = (h ^ (uint32_t)key[i]) * 16777619u;
  vr_gemm_plan_t *p = &g->cache[h % VR_GEMM_CACHE];
  if (p->used && p->T == T && p->N == N && p->K == K && p->out_f32 == out_f32 &&
      p->has_bias == has_bias && p->beta1 == beta1)
    return p;
  plan_destroy(p);
  p->T = T;
  p->N = N;
  p->K = K;
  p->out_f32 = out_f32;
  p->has_bias = has_bias;
  p->beta1 = beta1;
  p->bias_fallback = 0;
  if (plan_build(g, p, has_bias)) return p;
  if (has_bias) {
    p->bias_fallback = 1;
    if (plan_build(g, p, 0)) {
      vr_log(VR_LOG_DEBUG, "no bias-epilogue algorithm for T=%d N=%d K=%d: GEMM + bias kernel", T, N, K);
      return p;
    }
  }
  vr_log(VR_LOG_FATAL, "cuBLASLt found no algorithm for bf16 GEMM T=%d N=%d K=%d out=%s on device %d",
         T, N, K, out_f32 ? "f32" : "bf16", vr_cuda_current_device_());
  abort();
}

extern "C" void vr_cuda_gemm(vr_cuda_gemm_t *g, void *D, int out_f32, const uint16_t *A,
                             const uint16_t *W, const void *bias, int T, int N, int K, float beta,
                             cudaStream_t s) {
  if (T <= 0 || N <= 0) return;
  VR_ASSERT(K > 0 && (beta == 0.f || beta == 1.f));
  vr_gemm_plan_t *p = plan_get(g, T, N, K, out_f32, bias != NULL, beta != 0.f);
  if (bias && !p->bias_fallback)
    VR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  const float alpha = 1.f;
  VR_CUBLAS_CHECK(cublasLtMatmul(g->lt, p->desc, &alpha, W, p->la, A, p->lb, &beta, D, p->lc, D, p->lc,
                                 &p->algo, g->workspace, g->workspace_bytes, s));
  if (bias && p->bias_fallback) vr_cuda_add_bias(D, out_f32, bias, T, N, s);
}
