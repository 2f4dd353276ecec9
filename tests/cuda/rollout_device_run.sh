#!/usr/bin/env bash
# rollout_device_run.sh: the rollout engine's CUDA checks and benchmark on the GPU machine in one call
# (run from a folder holding bin/ (test_cuda_rollout, cuda_rollout_bench, built elsewhere with
# -DVR_CUDA=ON), lib/ (the .so files the GPU machine lacks: libcjson.so.1, libgomp.so.1) and
# rollout_bench_hf.py (tools/)). Logs and JSON under $OUT; a summary on stdout. PART selects:
#   T   test_cuda_rollout, then its kernel half under compute-sanitizer memcheck (MEMCHECK=0: not)
#   B   cuda_rollout_bench on llama-1b and qwen2-0.5b (64 prompts x 128 tokens, 256 new, greedy);
#       VARIANTS_LLAMA / VARIANTS_QWEN: the bench's --variants lists (default: the engine's defaults)
#   X   cuda_rollout_bench's other workloads on llama-1b: 8 prompts x 8 responses (prefix sharing,
#       sampled at T 1), 16 prompts of 4096 tokens (XRUNS: a subset of n8,p4k; VARIANTS_X: their
#       --variants list)
#   H   transformers generate on the same shapes, dynamic and static cache (HF_SHAPES, HF_CACHES)
#   P   nsys (when installed): the kernels of a llama-1b run of 64 new tokens, graph nodes traced,
#       summed per kernel name into $OUT/kern_sum.csv (the report itself stays in /tmp)
# (default: T, B, H, in that order; X when named).
set -u
OUT=${OUT:-/tmp/vr-rollout-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/lib:${LD_LIBRARY_PATH:-}
PART=${PART:-TBH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader
t0=$SECONDS
if [[ $PART == *T* ]]; then
  timeout 120 bin/test_cuda_rollout > $OUT/test.log 2>&1; echo "test_cuda_rollout rc=$? ($((SECONDS-t0))s)"
  grep -E "^FAIL|passed|FAILED|^     " $OUT/test.log | head -30; echo "$(grep -c '^ok' $OUT/test.log) ok lines"
  if [[ ${MEMCHECK:-1} == 1 ]]; then
    VR_ROLL_TEST_KERNELS_ONLY=1 timeout 120 compute-sanitizer --tool memcheck bin/test_cuda_rollout > $OUT/memcheck.log 2>&1
    echo "memcheck (kernels) rc=$? ($((SECONDS-t0))s)"; tail -2 $OUT/memcheck.log
  fi
fi
if [[ $PART == *B* ]]; then
  for s in llama-1b qwen2-0.5b; do
    v=${VARIANTS_LLAMA:-1}; [[ $s == qwen2-0.5b ]] && v=${VARIANTS_QWEN:-1}
    timeout ${BENCH_TIMEOUT:-120} bin/cuda_rollout_bench --shape $s --variants $v --json $OUT/bench_$s.json > $OUT/bench_$s.log 2>&1
    echo "bench $s rc=$? ($((SECONDS-t0))s)"; cat $OUT/bench_$s.log | grep -v "^20..-"
  done
fi
if [[ $PART == *X* ]]; then
  x() { local tag=$1; shift
    timeout 150 bin/cuda_rollout_bench --shape llama-1b "$@" --variants ${VARIANTS_X:-1} --json $OUT/bench_$tag.json \
      > $OUT/bench_$tag.log 2>&1
    echo "bench $tag ($*) rc=$? ($((SECONDS-t0))s)"; grep -v "^20..-" $OUT/bench_$tag.log | grep -v "^  M=" | head -8; }
  [[ ${XRUNS:-n8,p4k} == *n8* ]] && x n8 --prompts 8 --n 8 --temperature 1
  [[ ${XRUNS:-n8,p4k} == *p4k* ]] && x p4k --prompts 16 --prompt-len 4096
fi
if [[ $PART == *H* ]]; then
  PYTHONUNBUFFERED=1 timeout ${HF_TIMEOUT:-240} python3 rollout_bench_hf.py --shapes ${HF_SHAPES:-llama-1b,qwen2-0.5b} \
    --caches ${HF_CACHES:-dynamic,static} --json $OUT/hf.json > $OUT/hf.log 2>&1
  echo "transformers rc=$? ($((SECONDS-t0))s)"; grep -vi "warn" $OUT/hf.log | tail -8
fi
if [[ $PART == *P* ]]; then
  if command -v nsys > /dev/null; then
    timeout ${PROF_TIMEOUT:-90} nsys profile --cuda-graph-trace=node -o /tmp/vr_roll_prof --force-overwrite true \
      bin/cuda_rollout_bench --shape llama-1b --new 64 > $OUT/prof_run.log 2>&1
    echo "nsys rc=$? ($((SECONDS-t0))s)"
    nsys stats --report cuda_gpu_kern_sum --format csv -o /tmp/vr_roll_prof /tmp/vr_roll_prof.nsys-rep > /dev/null 2>&1
    cp /tmp/vr_roll_prof_cuda_gpu_kern_sum.csv $OUT/kern_sum.csv 2>/dev/null && head -25 $OUT/kern_sum.csv | cut -c1-220
  else
    echo "nsys: not installed"
  fi
fi
echo "total $((SECONDS-t0))s"
