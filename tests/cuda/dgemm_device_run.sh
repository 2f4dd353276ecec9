#!/usr/bin/env bash
# dgemm_device_run.sh: the Hopper decode GEMM's checks and benchmarks on the GPU machine in one call
# (run from a folder holding bin/ (test_cuda_rollout, cuda_rollout_bench built with -DVR_CUDA=ON and
# an sm_90a target), lib/ (libcjson.so.1, libgomp.so.1) and fixtures/lm). Logs under $OUT:
#   gemm.log      cuda_rollout_bench --gemm (every decode GEMM shape, ours vs cuBLASLt, from HBM)
#   test.log      test_cuda_rollout (kernels + engines; the engines on the backend's default GEMMs)
#   memcheck.log  the decode GEMM's tests under compute-sanitizer memcheck
#   bench_*.log   cuda_rollout_bench --shape S --variants (VARIANTS_LLAMA / VARIANTS_QWEN)
set -u
OUT=${OUT:-/tmp/vr-dgemm-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/lib:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
PART=${PART:-GTMB}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader
t0=$SECONDS
if [[ $PART == *G* ]]; then
  timeout 90 bin/cuda_rollout_bench --gemm > $OUT/gemm.log 2>&1; echo "gemm bench rc=$? ($((SECONDS-t0))s)"
  cat $OUT/gemm.log
fi
if [[ $PART == *T* ]]; then
  VR_FIXTURES=$PWD/fixtures timeout 120 bin/test_cuda_rollout > $OUT/test.log 2>&1; echo "test_cuda_rollout rc=$? ($((SECONDS-t0))s)"
  grep -E "^FAIL|passed|FAILED|dgemm" $OUT/test.log | head -40; echo "$(grep -c '^ok' $OUT/test.log) ok lines"
fi
if [[ $PART == *M* ]]; then
  VR_ROLL_TEST_DGEMM_ONLY=1 timeout 90 compute-sanitizer --tool memcheck bin/test_cuda_rollout > $OUT/memcheck.log 2>&1
  echo "memcheck (decode GEMM) rc=$? ($((SECONDS-t0))s)"; grep -E "FAIL|passed" $OUT/memcheck.log | tail -3; tail -2 $OUT/memcheck.log
fi
if [[ $PART == *B* ]]; then
  for s in llama-1b qwen2-0.5b; do
    v=${VARIANTS_LLAMA:-1}; [[ $s == qwen2-0.5b ]] && v=${VARIANTS_QWEN:-1}
    timeout ${BENCH_TIMEOUT:-120} bin/cuda_rollout_bench --shape $s --variants $v --json $OUT/bench_$s.json > $OUT/bench_$s.log 2>&1
    echo "bench $s rc=$? ($((SECONDS-t0))s)"; grep -E "tokens/s|ms/step|copy rate|graph|ours|->" $OUT/bench_$s.log | grep -v "^20..-" | cut -c1-400
  done
fi
echo "total $((SECONDS-t0))s"
