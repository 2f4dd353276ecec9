#!/usr/bin/env bash
# device_check_run.sh: the CUDA backend's full check on the GPU machine in one call (run from the
# repository root; results under $OUT as all.tgz, a summary on stdout). PART selects:
#   A (default)  test_cuda_kernels, test_cuda_model, compute-sanitizer memcheck (kernel test and
#                three fixtures), the server's gpu test, cuda_kernel_bench, the transformers
#                comparison for roberta-base + llama-1b, fixed-shape latency (roberta-base)
#   B            the transformers comparison for llama-8b (about 20 GB of model files under /tmp)
#   T            verl-trainer's gpu test (NCCL on one GPU, every role colocated) with the comm trace
#   R            the server with two model replicas on one GPU (--device cuda:0,cuda:0; issue 24)
# Binaries: VR_CUDA_BIN (a folder with cuda_bench_runner, cuda_kernel_bench, cuda_attention_bench, test_cuda_kernels,
# test_cuda_model, test_cuda_determinism, vr_test_shm_client, verl-reward-server, verl-reward-score, verl-reward-bench,
# built elsewhere with -DVR_CUDA=ON) or VR_CUDA_PACK (a .tgz of bin/ and lib/, extracted to
# /tmp/vr-check; lib/ holds the .so files the GPU machine lacks and goes on LD_LIBRARY_PATH).
# The same steps as the second session's calls 9-15 in docs/benchmarks.md; this form ran as the
# third session's final call 7 (PART=A, then PART=B, with VR_CUDA_PACK) on the H200.
set -u
OUT=${OUT:-/tmp/vr-check-out}
mkdir -p "$OUT"
if [ -n "${VR_CUDA_PACK:-}" ]; then
  mkdir -p /tmp/vr-check && tar xzf "$VR_CUDA_PACK" -C /tmp/vr-check
  B=/tmp/vr-check/bin
  export LD_LIBRARY_PATH=/tmp/vr-check/lib:${LD_LIBRARY_PATH:-}
else
  B=${VR_CUDA_BIN:?set VR_CUDA_BIN or VR_CUDA_PACK}
fi
export VR_FIXTURES=$PWD/tests/fixtures
M=/tmp/vr-bench-models
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader
t0=$SECONDS
if [ "${PART:-A}" = A ]; then
  timeout 120 $B/test_cuda_kernels > $OUT/kernels.log 2>&1; echo "test_cuda_kernels rc=$? ($((SECONDS-t0))s)"; grep -E "FAIL|passed" $OUT/kernels.log | head
  timeout 180 $B/test_cuda_model > $OUT/model.log 2>&1; echo "test_cuda_model rc=$? ($((SECONDS-t0))s)"; grep -E "FAIL|passed" $OUT/model.log | head; grep -E "hidden" $OUT/model.log | head -4
  timeout 180 $B/test_cuda_determinism > $OUT/det.log 2>&1; echo "test_cuda_determinism rc=$? ($((SECONDS-t0))s)"; grep -E "FAIL|passed" $OUT/det.log | head
  VR_TEST_SEED=11 timeout 200 compute-sanitizer --tool memcheck $B/test_cuda_kernels > $OUT/memcheck_kernels.log 2>&1; echo "memcheck kernels rc=$? ($((SECONDS-t0))s)"; tail -1 $OUT/memcheck_kernels.log
  VR_CUDA_TEST_ONLY=roberta,bert,llama_gqa_bf16 timeout 150 compute-sanitizer --tool memcheck $B/test_cuda_model > $OUT/memcheck_model.log 2>&1; echo "memcheck model rc=$? ($((SECONDS-t0))s)"; tail -1 $OUT/memcheck_model.log
  VR_BIN_DIR=$B VR_TEST_BIN=$B timeout 200 python3 tests/server/test_server.py -v TestGpu > $OUT/server_gpu.log 2>&1; echo "server TestGpu rc=$? ($((SECONDS-t0))s)"; tail -3 $OUT/server_gpu.log
  VR_BIN_DIR=$B VR_TEST_BIN=$B timeout 200 python3 tests/server/test_replicas.py -v TestReplicasGpu > $OUT/replicas_gpu.log 2>&1; echo "server TestReplicasGpu rc=$? ($((SECONDS-t0))s)"; tail -3 $OUT/replicas_gpu.log
  timeout 90 $B/cuda_kernel_bench 10 > $OUT/kbench.log 2>&1; echo "kbench rc=$? ($((SECONDS-t0))s)"; grep -E "^(attention|gemm)" $OUT/kbench.log
  timeout 200 $B/cuda_attention_bench 10 > $OUT/attn_bench.log 2>&1; echo "attention variants rc=$? ($((SECONDS-t0))s)"; grep -E "^FAIL|^attention|^done|^FAILED" $OUT/attn_bench.log
  VR_BENCH_RUNNER=$B/cuda_bench_runner OUT=$OUT/bench timeout 300 tools/bench_vs_transformers.sh --only roberta-base,llama-1b --keep-models > $OUT/bench_console.log 2>&1; echo "bench rc=$? ($((SECONDS-t0))s)"; tail -10 $OUT/bench_console.log
  VR_CUDA_DET_MODELS=$M/roberta-base,$M/llama-1b timeout 240 $B/test_cuda_determinism > $OUT/det_big.log 2>&1; echo "test_cuda_determinism (roberta-base, llama-1b) rc=$? ($((SECONDS-t0))s)"; grep -E "^(ok|FAIL).*vr-bench|passed|FAILED" $OUT/det_big.log | head
  timeout 60 $B/cuda_bench_runner --model $M/roberta-base --max-batch-tokens 16384 --iters 300 --shapes 1x256,8x256,64x256,1x512 --shapes-out $OUT/shapes.json > $OUT/shapes.log 2>&1; echo "shapes rc=$?"; grep -E "^shape" $OUT/shapes.log
elif [ "${PART:-A}" = R ]; then
  VR_BIN_DIR=$B VR_TEST_BIN=$B timeout 200 python3 tests/server/test_replicas.py -v TestReplicasGpu > $OUT/replicas_gpu.log 2>&1; echo "server TestReplicasGpu rc=$? ($((SECONDS-t0))s)"; tail -30 $OUT/replicas_gpu.log
elif [ "${PART:-A}" = T ]; then
  # verl-trainer on NCCL (one GPU, every role colocated): the gpu test and a 20-step comm check
  # with the trace; NCCL comes from the machine (torch's wheel ships libnccl.so.2)
  NCCL_DIR=$(dirname "$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)")
  export LD_LIBRARY_PATH=$NCCL_DIR:$LD_LIBRARY_PATH NCCL_NVLS_ENABLE=0
  echo "libnccl from $NCCL_DIR; $(mpirun --version | head -1)"
  VR_BIN_DIR=$B timeout 300 python3 tests/trainer/test_trainer_run.py -v TestGpu > $OUT/trainer_gpu.log 2>&1; echo "trainer TestGpu rc=$? ($((SECONDS-t0))s)"; tail -30 $OUT/trainer_gpu.log
else
  VR_BENCH_RUNNER=$B/cuda_bench_runner OUT=$OUT/bench timeout 560 tools/bench_vs_transformers.sh --only llama-8b > $OUT/bench_console.log 2>&1; echo "bench 8b rc=$? ($((SECONDS-t0))s)"; tail -8 $OUT/bench_console.log
fi
echo "total $((SECONDS-t0))s"
cd $OUT && tar czf all.tgz *.log *.json bench 2>/dev/null; rm -rf *.log *.json bench
