#!/usr/bin/env bash
# small_device_run.sh: issue 24's small-batch latency run in one call on the GPU machine (run
# from a folder holding bin/, lib/, fixtures/models and this repository's tests/cuda scripts;
# results under $OUT, a short table on stdout):
#   test_cuda_kernels, test_cuda_model (every fixture; graphs on == off, pipelined == alone),
#   the model test again with the non-default knobs on (cuda-split-attn on, cuda-pdl on: both
#   are off by default since 8a81221 / 2cd869d, so the default run covers neither),
#   compute-sanitizer memcheck of the model test on two fixtures with the key-split attention on,
#   cuda_bench_runner --shapes on random-weight roberta-base and llama-1b
#   (make_random_model.py) with the defaults and with each knob flipped (cuda-pdl on,
#   cuda-split-attn on) in the same binary, GEMM candidate times from HBM (cuda-autotune small +
#   debug log, roberta-base; llama-1b tuned), the end-to-end shm p50 at one client
#   (verl-reward-server + verl-reward-bench, 1 x 256 tokens, defaults and split attention on),
#   and ncu per-kernel breakdowns of an eager 1x256 with and without the split attention.
# STEPS (default "tests bench gemm lltune e2e ncu") selects parts.
set -u
ROOT=${VR_SMALL_ROOT:-$PWD}
B=$ROOT/bin
export LD_LIBRARY_PATH=$ROOT/lib:${LD_LIBRARY_PATH:-}
export VR_FIXTURES=$ROOT/fixtures NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/vr-small-out}
STEPS=${STEPS:-tests bench gemm lltune e2e ncu}
ITERS=${ITERS:-300}
mkdir -p "$OUT"
has() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw,driver_version --format=csv,noheader
S=$ROOT/tests/cuda
python3 $S/make_random_model.py /tmp/rb > $OUT/make_rb.log 2>&1 &
P_RB=$!
python3 $S/make_random_model.py /tmp/ll --arch llama > $OUT/make_ll.log 2>&1 &
P_LL=$!
if has tests; then
  timeout 120 $B/test_cuda_kernels > $OUT/kernels.log 2>&1; echo "kernels rc=$?"
  grep -E "FAIL|passed|PDL|key-split" $OUT/kernels.log | head -20
  timeout 150 $B/test_cuda_model > $OUT/model.log 2>&1; echo "model rc=$?"
  grep -E "FAIL|passed" $OUT/model.log | head -20
  VR_CUDA_TEST_OPTS=cuda-split-attn=on,cuda-pdl=on timeout 150 $B/test_cuda_model > $OUT/model_knobs.log 2>&1
  echo "model (split on, pdl on) rc=$?"; grep -E "FAIL|passed" $OUT/model_knobs.log | head -20
  VR_CUDA_TEST_OPTS=cuda-split-attn=on VR_CUDA_TEST_ONLY=llama3_mqa,roberta timeout 90 \
    compute-sanitizer --tool memcheck $B/test_cuda_model > $OUT/memcheck.log 2>&1
  echo "memcheck rc=$?"; tail -1 $OUT/memcheck.log
fi
wait $P_RB; echo "roberta model: $(tail -1 $OUT/make_rb.log)"
R="$B/cuda_bench_runner --max-batch-tokens 16384 --iters $ITERS"
bench() { n=$1; m=$2; sh=$3; shift 3; echo "== $n $*"
  timeout 90 $R --model $m --shapes $sh --shapes-out $OUT/shapes_$n.json "$@" > $OUT/bench_$n.log 2>&1; echo "rc=$?"
  grep -E "^shape|loaded in" $OUT/bench_$n.log | sed 's/^.*\] //'; }
if has bench; then
  bench rb_default /tmp/rb 1x256,8x256,64x256,1x512
  bench rb_pdl /tmp/rb 1x256,8x256,64x256,1x512 --cuda-pdl on
  bench rb_split /tmp/rb 1x256,8x256,1x512 --cuda-split-attn on
  bench rb_eager /tmp/rb 1x256,1x512 --cuda-graphs off
fi
if has gemm; then
  VR_LOG_LEVEL=debug bench rb_tuned /tmp/rb 1x256,8x256,1x512 --cuda-autotune small
  grep -E "gemm T=256 " $OUT/bench_rb_tuned.log | sed 's/^.*\] //' | head -120 > $OUT/gemm256.txt
  grep -c candidate $OUT/gemm256.txt; grep -E "T=256 .*candidate [0-9]+ of" $OUT/bench_rb_tuned.log | sed 's/^.*\] //'
fi
wait $P_LL; echo "llama model: $(tail -1 $OUT/make_ll.log)"
if has bench; then
  bench ll_default /tmp/ll 1x256,8x256,1x512
  bench ll_split /tmp/ll 1x256,8x256,1x512 --cuda-split-attn on
  bench ll_pdl /tmp/ll 1x256,1x512 --cuda-pdl on
fi
if has lltune; then
  bench ll_tuned /tmp/ll 1x256,1x512 --cuda-autotune small
fi
if has e2e; then
  e2e() { n=$1; shift; rm -f /tmp/vr_ready; echo "== e2e $n $*"
    $B/verl-reward-server --model /tmp/rb --device cuda:0 --shm-name vr_small_$n --port 18431 --max-batch-tokens 16384 \
      --max-wait-us 0 --ready-file /tmp/vr_ready --log-level warn "$@" > $OUT/server_$n.log 2>&1 &
    sp=$!
    for i in $(seq 1 300); do [ -f /tmp/vr_ready ] && break; sleep 0.1; done
    timeout 30 $B/verl-reward-bench --shm-name vr_small_$n --batch 1 --lengths fixed:256 --concurrency 1 --duration 4 \
      --warmup 1 --json $OUT/e2e_$n.json --log-level warn > $OUT/e2e_$n.log 2>&1; echo "bench rc=$?"
    tail -4 $OUT/e2e_$n.log
    kill -TERM $sp; wait $sp; }
  e2e default
  e2e split --cuda-split-attn on
fi
if has ncu; then
  for v in on off; do
    timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
      $B/cuda_bench_runner --cuda-graphs off --cuda-split-attn $v --model /tmp/rb --iters 1 --shapes 1x256 \
      > $OUT/ncu_split_$v.log 2>&1; echo "ncu split $v rc=$?"
    python3 $S/ncu_summary.py $OUT/ncu_split_$v.log | tee $OUT/ncu_split_$v.txt
  done
fi
(cd $OUT && tar czf all.tgz *.log *.json *.txt 2>/dev/null && rm -f *.log *.json *.txt)
