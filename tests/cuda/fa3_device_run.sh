#!/usr/bin/env bash
# fa3_device_run.sh: issue 24's FA3 attention on the GPU machine in one call: the kernel's
# correctness (test_cuda_kernels' fa3 suite, the whole kernel test, the model test), its rate in
# cuda_attention_bench / cuda_kernel_bench, PyTorch SDPA (attn_bench_torch.py) on the same
# shapes in the same call, and the end-to-end comparison with transformers. Run from a folder
# holding bin/ (test_cuda_kernels, test_cuda_model, cuda_kernel_bench, cuda_attention_bench,
# cuda_bench_runner, built with -DVR_CUDA=ON), lib/ (the .so files the machine lacks),
# fixtures/models, attn_bench_torch.py and tools/bench_vs_transformers.{sh,py}; logs under $OUT.
# bin/ may also hold test_cuda_train_kernels (STEPS train).
# STEPS (default "fa3 bench kbench torch kernels model"): any of those, train (test_cuda_train_kernels) and e2e (E2E_ONLY: the
# shapes, one bench_vs_transformers.sh --only call each, default llama-1b; E2E_TIMEOUT seconds each; E2E_WORKLOADS: --workloads).
# BENCH_VARIANTS: the cuda_attention_bench variants, timed in one process (default "fa3 fa3c2").
# MEMCHECK=1: also compute-sanitizer memcheck of the fa3 suite (after the other steps; only when
# fewer than MEMCHECK_BEFORE seconds have passed; MEMCHECK_TIMEOUT, default 60). Step timeouts:
# FA3_TIMEOUT, BENCH_TIMEOUT, TORCH_TIMEOUT, TRAIN_TIMEOUT, MODEL_TIMEOUT.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/fa3-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0 VR_FIXTURES=$PWD/fixtures
B=$PWD/bin
STEPS=" ${STEPS:-fa3 bench kbench torch kernels model} "
has() { [[ "$STEPS" == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader
t0=$SECONDS
if has fa3; then
  VR_TEST_ATTN_KERNEL=fa3 timeout ${FA3_TIMEOUT:-90} $B/test_cuda_kernels > $OUT/k_fa3.log 2>&1; echo "fa3 suite rc=$? ($((SECONDS-t0))s)"
  grep -E "FAIL|passed|FAILED" $OUT/k_fa3.log | head -20; grep -c "^ok" $OUT/k_fa3.log
fi
if has bench; then
  timeout ${BENCH_TIMEOUT:-120} $B/cuda_attention_bench ${BENCH_VARIANTS:-fa3 fa3c2} 10 > $OUT/attn.log 2>&1
  echo "attention bench ${BENCH_VARIANTS:-fa3 fa3c2} rc=$? ($((SECONDS-t0))s)"; grep -E "^FAIL|^attention|FAILED" $OUT/attn.log
fi
if has kbench; then
  timeout 90 $B/cuda_kernel_bench 10 > $OUT/kbench.log 2>&1; echo "kbench rc=$? ($((SECONDS-t0))s)"; grep -E "^attention" $OUT/kbench.log
fi
if has torch; then
  timeout ${TORCH_TIMEOUT:-90} python3 attn_bench_torch.py 10 > $OUT/torch.log 2>&1; echo "torch sdpa rc=$? ($((SECONDS-t0))s)"; cat $OUT/torch.log
fi
if has kernels; then
  timeout 120 $B/test_cuda_kernels > $OUT/kernels.log 2>&1; echo "test_cuda_kernels rc=$? ($((SECONDS-t0))s)"; grep -E "FAIL|passed|FAILED" $OUT/kernels.log | head
fi
if has train; then # FA3's lse (the training forward) at 4117 rows against the reference
  timeout ${TRAIN_TIMEOUT:-120} $B/test_cuda_train_kernels > $OUT/train.log 2>&1; echo "test_cuda_train_kernels rc=$? ($((SECONDS-t0))s)"; grep -E "FAIL|fa3|passed|FAILED" $OUT/train.log | head
fi
if has model; then
  timeout ${MODEL_TIMEOUT:-120} $B/test_cuda_model > $OUT/model.log 2>&1; echo "test_cuda_model rc=$? ($((SECONDS-t0))s)"; grep -E "FAIL|passed|FAILED" $OUT/model.log | head
fi
if has e2e; then
  for m in ${E2E_ONLY:-llama-1b}; do
    VR_BENCH_RUNNER=$B/cuda_bench_runner OUT=$OUT/bench-$m timeout ${E2E_TIMEOUT:-220} tools/bench_vs_transformers.sh --only $m ${E2E_WORKLOADS:+--workloads "$E2E_WORKLOADS"} > $OUT/bench_$m.log 2>&1
    echo "bench $m rc=$? ($((SECONDS-t0))s)"; grep -E "^   (transformers|ours) " $OUT/bench_$m.log | cut -c1-300; tail -8 $OUT/bench_$m.log
  done
fi
if [[ "${MEMCHECK:-0}" == 1 && $((SECONDS-t0)) -lt ${MEMCHECK_BEFORE:-100000} ]]; then
  VR_TEST_ATTN_KERNEL=fa3 timeout ${MEMCHECK_TIMEOUT:-60} compute-sanitizer --tool memcheck $B/test_cuda_kernels > $OUT/memcheck.log 2>&1
  echo "memcheck fa3 suite rc=$? ($((SECONDS-t0))s)"; grep -E "ERROR SUMMARY|FAILED|passed" $OUT/memcheck.log | tail -3
fi
echo "total $((SECONDS-t0))s"
