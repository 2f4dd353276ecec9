#!/usr/bin/env bash
# fa3_device_run.sh: issue 24's FA3 attention on the GPU machine in one call: the kernel's
# correctness (test_cuda_kernels' fa3 suite, then the whole kernel test and the model test with
# the new kernel chosen), its rate in cuda_attention_bench / cuda_kernel_bench, and PyTorch SDPA
# (tests/cuda/attn_bench_torch.py) on the same shapes in the same call. Run from a folder
# holding bin/ (the five binaries, built with -DVR_CUDA=ON), lib/ (the .so files the machine
# lacks), fixtures/models and attn_bench_torch.py; logs under $OUT. PART=perf: rates only.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/fa3-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0 VR_FIXTURES=$PWD/fixtures
B=$PWD/bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader
t0=$SECONDS
if [ "${PART:-all}" != perf ]; then
  VR_TEST_ATTN_KERNEL=fa3 timeout 60 $B/test_cuda_kernels > $OUT/k_fa3.log 2>&1; echo "fa3 suite rc=$? ($((SECONDS-t0))s)"
  grep -E "FAIL|passed|FAILED|fa3" $OUT/k_fa3.log | head -60
fi
timeout 90 $B/cuda_attention_bench fa3 10 > $OUT/attn_fa3.log 2>&1; echo "attention bench fa3 rc=$? ($((SECONDS-t0))s)"; grep -E "^FAIL|^attention|FAILED" $OUT/attn_fa3.log
timeout 90 $B/cuda_kernel_bench 10 > $OUT/kbench.log 2>&1; echo "kbench rc=$? ($((SECONDS-t0))s)"; grep -E "^attention" $OUT/kbench.log
timeout 90 python3 attn_bench_torch.py 10 > $OUT/torch.log 2>&1; echo "torch sdpa rc=$? ($((SECONDS-t0))s)"; cat $OUT/torch.log
if [ "${PART:-all}" != perf ]; then
  timeout 120 $B/test_cuda_kernels > $OUT/kernels.log 2>&1; echo "test_cuda_kernels rc=$? ($((SECONDS-t0))s)"; grep -E "FAIL|passed|FAILED" $OUT/kernels.log | head
  timeout 120 $B/test_cuda_model > $OUT/model.log 2>&1; echo "test_cuda_model rc=$? ($((SECONDS-t0))s)"; grep -E "FAIL|passed|FAILED" $OUT/model.log | head
  timeout 60 $B/cuda_attention_bench fa64 10 > $OUT/attn_fa64.log 2>&1; echo "attention bench fa64 rc=$? ($((SECONDS-t0))s)"; grep -E "^FAIL|^attention.*16384|FAILED" $OUT/attn_fa64.log
fi
echo "total $((SECONDS-t0))s"
