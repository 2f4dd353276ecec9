#!/usr/bin/env bash
# train_device_run.sh: the CUDA training engine's checks and benchmarks on the GPU machine in one
# call (run from the repository root; logs under $OUT, a summary on stdout):
#   test_cuda_train_kernels, test_cuda_train_backend, verl-trainer logprobs / sft on --device cpu
#   and cuda for the three training fixtures (cpu vs cuda log-probs, before and after 3 sft steps),
#   cuda_train_bench (Qwen2-0.5B and Llama-3.2-1B shapes), then train_bench_torch.py eager and,
#   with the time left of BUDGET seconds (default 175), compiled.
# Binaries: VR_CUDA_BIN, a folder with test_cuda_train_kernels, test_cuda_train_backend,
# cuda_train_bench and verl-trainer built elsewhere with -DVR_CUDA=ON; VR_CUDA_LIB (optional) the
# .so files the GPU machine lacks (libyaml, libgomp, libcjson, libcmocka; Open MPI's when the
# machine has no libmpi.so.40, in VR_CUDA_LIB/mpi). This form ran as helper H5's second call
# (docs/benchmarks.md, "Training engine").
set -u
OUT=${OUT:-/tmp/vr-train-out}
B=${VR_CUDA_BIN:?set VR_CUDA_BIN}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 VR_FIXTURES=$PWD/tests/fixtures
LP=${VR_CUDA_LIB:-}:/usr/local/cuda/lib64
ldconfig -p | grep -q libmpi.so.40 || LP=$LP:${VR_CUDA_LIB:-}/mpi
LP=$LP:$(dirname "$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)")
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
t0=$SECONDS
timeout 60 env LD_LIBRARY_PATH=$LP $B/test_cuda_train_kernels > $OUT/kernels.log 2>&1; echo "test_cuda_train_kernels rc=$? ($((SECONDS-t0))s)"
grep -E "^FAIL|passed|FAILED" $OUT/kernels.log | head -30
timeout 60 env LD_LIBRARY_PATH=$LP $B/test_cuda_train_backend > $OUT/backend.log 2>&1; echo "test_cuda_train_backend rc=$? ($((SECONDS-t0))s)"
grep -E "^  cuda|FAILED|PASSED|ERROR" $OUT/backend.log | head -60
T=$(mktemp -d)
for n in llama_lm qwen2_lm mistral_lm; do
  python3 -c "import json,sys; g=json.load(open('tests/fixtures/lm/$n/golden.json')); sys.stdout.write(''.join(json.dumps({'input_ids': s}) + '\n' for s in g['sequences']))" > $T/$n.jsonl
  for dev in cpu cuda; do
    timeout 20 env LD_LIBRARY_PATH=$LP $B/verl-trainer logprobs --model tests/fixtures/lm/$n --device $dev --input $T/$n.jsonl > $T/lp_$dev.jsonl 2> $T/err || tail -3 $T/err
    timeout 30 env LD_LIBRARY_PATH=$LP $B/verl-trainer sft --model tests/fixtures/lm/$n --data $T/$n.jsonl --save $T/sft_$dev --steps 3 --lr 1e-3 \
      --weight-decay 0.1 --clip 1.0 --device $dev > $T/sft_$dev.log 2>&1 || tail -3 $T/sft_$dev.log
    timeout 20 env LD_LIBRARY_PATH=$LP $B/verl-trainer logprobs --model $T/sft_$dev --device cpu --input $T/$n.jsonl > $T/lp3_$dev.jsonl 2> /dev/null
  done
  python3 - "$T" "$n" <<'PY'
import json, sys
t, n = sys.argv[1], sys.argv[2]
rd = lambda p: [json.loads(l)["logprobs"] for l in open(p)]
for tag, what in (("lp", "logprobs"), ("lp3", "after sft 3 steps (saved, reloaded on cpu)")):
    a, b = rd(f"{t}/{tag}_cpu.jsonl"), rd(f"{t}/{tag}_cuda.jsonl")
    d = max(abs(x - y) for u, v in zip(a, b) for x, y in zip(u, v))
    print(f"CLI {n} {what}: cpu vs cuda max |logp diff| {d:.3g} over {len(a)} sequences")
PY
  grep -h '"step": 3' $T/sft_cpu.log $T/sft_cuda.log
done
rm -rf $T
timeout 70 env LD_LIBRARY_PATH=$LP $B/cuda_train_bench --model all --iters 5 > $OUT/bench.log 2>&1; echo "cuda_train_bench rc=$? ($((SECONDS-t0))s)"
grep -v "^json" $OUT/bench.log | tail -4
timeout 60 python3 tests/cuda/train_bench_torch.py --modes eager --iters 4 > $OUT/torch_eager.log 2>&1
echo "torch eager rc=$? ($((SECONDS-t0))s)"; grep -E "^torch" $OUT/torch_eager.log
left=$((${BUDGET:-175} - SECONDS + t0))
if [ $left -gt 20 ]; then
  timeout $left python3 tests/cuda/train_bench_torch.py --modes compile --iters 3 > $OUT/torch_compile.log 2>&1
  echo "torch compile rc=$? ($((SECONDS-t0))s, limit ${left}s)"; grep -E "^torch" $OUT/torch_compile.log
fi
echo "total $((SECONDS-t0))s"
