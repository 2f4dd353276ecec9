/* vr_cuda_launch.cuh: how the backend's kernels are launched, with programmatic dependent
 * launch (PDL, compute 9.0+). A kernel launched through vr_launch may start while the kernel
 * before it in the stream is still draining; it calls vr_pdl_wait() as its first statement,
 * in every block (also blocks that have no work: a kernel whose blocks all exited without
 * waiting could complete before its predecessor, and its own successor would then wait on
 * the wrong kernel), and only after that reads or writes global memory. The wait returns
 * once the previous kernel has completed and its writes are visible, so results are the
 * same as with plain launches (bit for bit). Stream capture records such a launch as a
 * programmatic edge of the graph (tests/cuda/test_cuda_kernels.c checks it). On devices
 * below compute 9.0 the attribute and the wait have no effect.
 *
 * The attribute is off unless vr_cuda_set_launch_pdl (vr_cuda_ops.h) turns it on for the whole
 * process (cuda-pdl on; it did not pay on the H200: docs/benchmarks.md, "Issue 24: small
 * batches"); the kernels' waits stay either way and are no-ops after a plain launch. */
#ifndef VR_CUDA_LAUNCH_CUH
#define VR_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>

#include "vr_cuda_check.h"
#include "vr_cuda_ops.h"

static __device__ __forceinline__ void vr_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/* kernel<<<grid, block, smem, s>>>(args...), with the PDL attribute while vr_cuda_launch_pdl();
 * checks the launch. */
template <typename... KArgs, typename... Args>
static inline void vr_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                             Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = vr_cuda_launch_pdl() ? 1 : 0;
  VR_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...));
}

#endif /* VR_CUDA_LAUNCH_CUH */
