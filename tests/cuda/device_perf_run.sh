#!/usr/bin/env bash
# device_perf_run.sh: the CUDA backend's performance + correctness run in one call on the GPU
# machine (run from the repository root; results under $OUT, a short table on stdout):
#   random-weight roberta-base (tests/cuda/make_random_model.py, numpy only), fixed-shape
#   latency / pipelined throughput (cuda_bench_runner --shapes) with the defaults twice,
#   test_cuda_kernels,
#   test_cuda_model on every fixture, compute-sanitizer memcheck on two fixtures, and an
#   ncu per-kernel breakdown of eager 1x256 and 64x256 forwards (tests/cuda/ncu_summary.py).
# Binaries from VR_CUDA_BIN (default .device/cuda-perf/bin, with env.sh and the carried
# libraries one folder up), built elsewhere with -DVR_CUDA=ON.
set -u
B=${VR_CUDA_BIN:-$PWD/.device/cuda-perf/bin}
[ -f "$B/../env.sh" ] && source "$B/../env.sh"
OUT=${OUT:-/tmp/vr-perf-out}
mkdir -p "$OUT"
export VR_FIXTURES=$PWD/tests/fixtures
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw,driver_version --format=csv,noheader
python3 tests/cuda/make_random_model.py /tmp/rb > $OUT/make.log 2>&1 || { echo "make model failed"; cat $OUT/make.log; }
R="$B/cuda_bench_runner --model /tmp/rb --max-batch-tokens 16384 --iters 300 --shapes 1x256,8x256,64x256,1x512"
run() { n=$1; shift; echo "== $n $*"; env "$@" timeout 60 $R --shapes-out $OUT/shapes_$n.json > $OUT/bench_$n.log 2>&1; echo rc=$?; grep -E "^shape|warm-up|loaded in" $OUT/bench_$n.log | sed 's/^.*\] //'; }
run final VR_X=1
run final_again VR_X=1
timeout 60 $B/test_cuda_kernels > $OUT/kernels.log 2>&1; echo "kernels rc=$?"; grep -E "FAIL|passed|gelu epilogue|score encoder" $OUT/kernels.log | head -20
timeout 150 $B/test_cuda_model > $OUT/model.log 2>&1; echo "model rc=$?"; grep -E "FAIL|passed" $OUT/model.log | head -30; grep -E " rel " $OUT/model.log | grep -E "transformers|cpu" | sort -k7 -g | tail -4
VR_CUDA_TEST_ONLY=roberta,llama_gqa_bf16 timeout 70 compute-sanitizer --tool memcheck $B/test_cuda_model > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -1 $OUT/memcheck.log
timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel $B/cuda_bench_runner --cuda-graphs off --model /tmp/rb --iters 1 --shapes 1x256,64x256 > $OUT/ncu.log 2>&1; echo "ncu rc=$?"
python3 tests/cuda/ncu_summary.py $OUT/ncu.log
(cd $OUT && tar czf all.tgz *.log *.json && rm -f *.log *.json)
