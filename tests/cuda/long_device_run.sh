#!/usr/bin/env bash
# long_device_run.sh: issue 24's long-context check on the GPU machine in one call (about 225 s):
# test_cuda_model on long_d64 + llama_gqa, then llama-1b 4 x 16384 and llama-8b 2 x 16384 end to end
# beside transformers (tools/bench_vs_transformers.sh with this folder's runner) and main's runner
# (bin/runner_before) on the same saved models and sequences, packed llama-1b / roberta-base shapes
# before and after, ncu per kernel of an eager llama-8b forward, cuda_kernel_bench's 16k attention
# and 32768-row GEMMs beside PyTorch SDPA (attn_bench_torch.py), then the whole test_cuda_kernels.
# Run from a folder two levels under the repository root (e.g. .device/NAME/: ROOT is ../.., for
# tools/) holding bin/ (cuda_bench_runner, test_cuda_model, test_cuda_kernels, cuda_kernel_bench,
# runner_before), lib/ (libcjson.so.1, libgomp.so.1), fixtures/models, make_random_model.py,
# attn_bench_torch.py and ncu_summary.py; logs under $OUT. docs/benchmarks.md, "Issue 24: long context".
set -u
cd "$(dirname "$0")"
ROOT=${ROOT:-$(cd ../.. && pwd)}
export LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} PATH=/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0 VR_FIXTURES=$PWD/fixtures
B=$PWD/bin O=${OUT:-/tmp/lctx-out} M=/tmp/vrm
mkdir -p $O $M
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 make_random_model.py /tmp/rb > $O/mk.log 2>&1 &
VR_CUDA_TEST_ONLY=long_d64,llama_gqa timeout 30 $B/test_cuda_model > $O/model.log 2>&1; echo "test_cuda_model (long_d64,llama_gqa) rc=$? ($((SECONDS-t0))s)"
grep -E "FAIL|long_d64|passed|FAILED" $O/model.log | cut -c1-160 | head -12
before() { # model dir, seq file, tag
  timeout 45 $B/runner_before --model $1 --max-batch-tokens 32768 --warmup 1 --iters 3 --seqs $2 --out $O/before_$3.json > $O/before_$3.log 2>&1
  echo "main's runner $3 rc=$? $(python3 -c "import json;d=json.load(open('$O/before_$3.json'));print('median %.2f ms min %.2f ms scores %s'%(d['latency_median_s']*1e3,d['latency_min_s']*1e3,d['scores'][:4]))" 2>&1 | tail -1) ($((SECONDS-t0))s)"
}
VR_BENCH_RUNNER=$B/cuda_bench_runner VR_BENCH_MODELS=$M OUT=$O/b1 timeout 70 $ROOT/tools/bench_vs_transformers.sh --only llama-1b \
  --workloads "llama-1b 4x16384" --keep-models > $O/bench_1b.log 2>&1; echo "bench llama-1b rc=$? ($((SECONDS-t0))s)"
grep -E "^   (transformers|ours) " $O/bench_1b.log | cut -c1-330
before $M/llama-1b $M/llama-1b-0.seq 1b_4x16384
for v in before after; do # packed llama-1b (the graphs: max_len < 8192) on the same saved model
  bin=$B/cuda_bench_runner; [[ $v == before ]] && bin=$B/runner_before
  timeout 25 $bin --model $M/llama-1b --max-batch-tokens 32768 --iters 10 --shapes 16x2048,64x256 --shapes-out $O/sh_1b_$v.json 2>&1 | grep "^shape" | cut -c1-100 | sed "s/^/llama-1b $v /"
done
rm -rf $M/llama-1b
VR_BENCH_RUNNER=$B/cuda_bench_runner VR_BENCH_MODELS=$M OUT=$O/b8 timeout 110 $ROOT/tools/bench_vs_transformers.sh --only llama-8b \
  --workloads "llama-8b 2x16384" --keep-models > $O/bench_8b.log 2>&1; echo "bench llama-8b rc=$? ($((SECONDS-t0))s)"
grep -E "^   (transformers|ours) " $O/bench_8b.log | cut -c1-330
before $M/llama-8b $M/llama-8b-0.seq 8b_2x16384
timeout 40 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel --launch-skip 66 --launch-count 60 \
  $B/cuda_bench_runner --model $M/llama-8b --max-batch-tokens 32768 --cuda-graphs off --warmup 0 --iters 1 --seqs $M/llama-8b-0.seq \
  --out /tmp/ncu8.json > $O/ncu_8b.log 2>&1; echo "ncu 8b rc=$? ($((SECONDS-t0))s)"
python3 ncu_summary.py $O/ncu_8b.log | tee $O/ncu_8b.txt | cut -c1-150
rm -rf $M/llama-8b
timeout 45 $B/cuda_kernel_bench 5 > $O/kbench.log 2>&1; echo "kbench rc=$? ($((SECONDS-t0))s)"; grep -E "16384|32768" $O/kbench.log
timeout 25 python3 attn_bench_torch.py 5 > $O/torch.log 2>&1; echo "torch rc=$? ($((SECONDS-t0))s)"; cat $O/torch.log
wait
for v in before after; do
  bin=$B/cuda_bench_runner; [[ $v == before ]] && bin=$B/runner_before
  timeout 25 $bin --model /tmp/rb --max-batch-tokens 16384 --iters 50 --shapes 64x256,8x256,1x512 --shapes-out $O/sh_rb_$v.json 2>&1 | grep "^shape" | cut -c1-100 | sed "s/^/rb $v /"
done
timeout 45 $B/test_cuda_kernels > $O/kernels.log 2>&1; echo "test_cuda_kernels rc=$? ($((SECONDS-t0))s)"
grep -E "FAIL|auto, max_len|rope|rmsnorm|choice|passed|FAILED" $O/kernels.log | cut -c1-160 | head -30
echo "total $((SECONDS-t0))s"
