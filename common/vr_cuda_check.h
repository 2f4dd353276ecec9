/* vr_cuda_check.h: check macros for CUDA, cuBLAS(Lt) and NCCL calls.
 *
 * A failing call is a broken invariant on the device (a GPU fault, a bad
 * launch): the macro logs the call text, file, line, device ordinal and the
 * library's own error string, then aborts. Include only from CUDA sources.
 * VR_CUDA_TRY is the non-aborting variant for start-up paths that must turn
 * a failure (no device, out of memory) into a vr_status_t. */
#ifndef VR_CUDA_CHECK_H
#define VR_CUDA_CHECK_H

#include <cuda_runtime.h>
#include <stdlib.h>

#include "vr_log.h"

static inline int vr_cuda_current_device_(void) {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) d = -1;
  return d;
}

#define VR_CUDA_CHECK(call)                                                                  \
  do {                                                                                       \
    cudaError_t vr_e_ = (call);                                                              \
    if (vr_e_ != cudaSuccess) {                                                              \
      vr_log_impl(VR_LOG_FATAL, __func__, "CUDA error %s (%s) in %s at %s:%d on device %d", \
                  cudaGetErrorName(vr_e_), cudaGetErrorString(vr_e_), #call, __FILE__,      \
                  __LINE__, vr_cuda_current_device_());                                      \
      abort();                                                                               \
    }                                                                                        \
  } while (0)

/* After every kernel launch. */
#define VR_CUDA_CHECK_LAUNCH() VR_CUDA_CHECK(cudaGetLastError())

/* Evaluates to 0 on success; logs (ERROR) and evaluates to VR_ERR_DEVICE otherwise. */
#define VR_CUDA_TRY(call)                                                                     \
  __extension__({                                                                             \
    cudaError_t vr_e_ = (call);                                                               \
    int vr_rc_ = 0;                                                                           \
    if (vr_e_ != cudaSuccess) {                                                               \
      vr_log_impl(VR_LOG_ERROR, __func__, "CUDA error %s (%s) in %s at %s:%d on device %d",  \
                  cudaGetErrorName(vr_e_), cudaGetErrorString(vr_e_), #call, __FILE__,       \
                  __LINE__, vr_cuda_current_device_());                                       \
      vr_rc_ = -21; /* VR_ERR_DEVICE */                                                       \
    }                                                                                         \
    vr_rc_;                                                                                   \
  })

#ifdef VR_WITH_CUBLAS
#include <cublasLt.h>
#include <cublas_v2.h>
#define VR_CUBLAS_CHECK(call)                                                                 \
  do {                                                                                        \
    cublasStatus_t vr_s_ = (call);                                                            \
    if (vr_s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
      vr_log_impl(VR_LOG_FATAL, __func__, "cuBLAS error %d (%s) in %s at %s:%d on device %d", \
                  (int)vr_s_, cublasGetStatusString(vr_s_), #call, __FILE__, __LINE__,        \
                  vr_cuda_current_device_());                                                 \
      abort();                                                                                \
    }                                                                                         \
  } while (0)
#endif

#ifdef VR_WITH_NCCL
#include <nccl.h>
#define VR_NCCL_CHECK(call)                                                                  \
  do {                                                                                       \
    ncclResult_t vr_r_ = (call);                                                             \
    if (vr_r_ != ncclSuccess) {                                                              \
      vr_log_impl(VR_LOG_FATAL, __func__, "NCCL error %d (%s) in %s at %s:%d on device %d", \
                  (int)vr_r_, ncclGetErrorString(vr_r_), #call, __FILE__, __LINE__,          \
                  vr_cuda_current_device_());                                                \
      abort();                                                                               \
    }                                                                                        \
  } while (0)
#endif

#endif /* VR_CUDA_CHECK_H */
