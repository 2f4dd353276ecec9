#!/usr/bin/env bash
# svc_device_run.sh: issue 24's packed-throughput item through the service, in one GPU call:
# the server's GPU tests (test_server.py TestGpu, test_replicas.py TestReplicasGpu) on the new
# binary, then tools/bench_vs_transformers.sh on roberta-base 256 x U[64,512]: transformers
# padded and length-sorted, our runner (cuda_bench_runner, max batch 131072 and 16384), and the
# workload through verl-reward-server + 4 shm client threads for the base and the new server
# binaries at each SVC_MBT max batch tokens, with the server's own batch / busy metrics.
# Run from a folder holding bin/ (verl-reward-server, verl-reward-server-base,
# vr_test_shm_client, verl-reward-score, cuda_bench_runner; -DVR_CUDA=ON), lib/ (the .so files
# the machine lacks) and src/ (the source tree: tests/, tools/); logs under $OUT.
# STEPS (default "bench gpu"); SVC_MBT (default "16384,131072"); SVC_REQ_SEQS (default "0,16":
# one request per thread, then requests of 16 sequences); SVC_ITERS timed rounds (10).
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/svc-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
B=$PWD/bin
S=$PWD/src
STEPS=" ${STEPS:-bench gpu} "
has() { [[ "$STEPS" == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader
t0=$SECONDS
export VR_BIN_DIR=$B VR_TEST_BIN=$B VR_SOURCE_DIR=$S VR_FIXTURES=$S/tests/fixtures
if has bench; then
  VR_BENCH_RUNNER=$B/cuda_bench_runner OUT=$OUT/bench timeout ${BENCH_TIMEOUT:-110} $S/tools/bench_vs_transformers.sh \
    --only roberta-base --workloads "roberta-base 256xU[64,512]" \
    --server base=$B/verl-reward-server-base --server new=$B/verl-reward-server --shm-client $B/vr_test_shm_client \
    --service-max-batch-tokens "${SVC_MBT:-16384,131072}" --service-req-seqs "${SVC_REQ_SEQS:-0,16}" --service-iters "${SVC_ITERS:-10}" > $OUT/bench.log 2>&1
  echo "bench rc=$? ($((SECONDS-t0))s)"
  grep -E "^   (transformers|ours|service) " $OUT/bench.log | cut -c1-420; tail -14 $OUT/bench.log
fi
if has gpu; then
  timeout ${GPU_TIMEOUT:-60} python3 $S/tests/server/test_server.py -v TestGpu > $OUT/test_gpu.log 2>&1
  echo "TestGpu rc=$? ($((SECONDS-t0))s)"; tail -3 $OUT/test_gpu.log
  timeout ${REPL_TIMEOUT:-30} python3 $S/tests/server/test_replicas.py -v TestReplicasGpu > $OUT/test_replicas_gpu.log 2>&1
  echo "TestReplicasGpu rc=$? ($((SECONDS-t0))s)"; tail -3 $OUT/test_replicas_gpu.log
fi
echo "total $((SECONDS-t0))s"
