#!/usr/bin/env bash
# bench_frameworks_device.sh: issue 17's benchmark on the GPU machine in one call (run from the
# repository root of a source tree; results under $OUT, the JSON lines on stdout):
#   a roberta-base-shaped random model (tools/make_fixtures.py --size base, stdlib only), the
#   server on cuda:0 (shared memory + HTTP), then tools/bench_frameworks.py: batch vs 1,024
#   concurrent run_single coroutines (verl 0.9.0 stand-in, torch tensors when importable) vs the
#   same through the server's own POST /classify, at 256 and 512 tokens per sequence.
# Binaries: VR_CUDA_BIN (a folder with verl-reward-server built with -DVR_CUDA=ON, and lib/ one
# folder up with libverl_reward_client.so) or VR_CUDA_PACK (a .tgz of bin/ and lib/ as
# tests/cuda/device_check_run.sh takes it). PYTHONPATH must reach the verl_reward package
# (python/ of this tree works: the library comes from VERL_REWARD_LIB, set here).
# Knobs (for a dry run elsewhere): FWB_DEVICE (cuda:0), FWB_MODEL (a model directory or
# "checksum"; default the generated one), FWB_N (1024), FWB_LENS ("256 512"), FWB_REPS (5).
set -u
OUT=${OUT:-/tmp/vr-fwbench-out}
mkdir -p "$OUT"
if [ -n "${VR_CUDA_PACK:-}" ]; then
  mkdir -p /tmp/vr-fwbench && tar xzf "$VR_CUDA_PACK" -C /tmp/vr-fwbench
  B=/tmp/vr-fwbench/bin
  export LD_LIBRARY_PATH=/tmp/vr-fwbench/lib:${LD_LIBRARY_PATH:-}
else
  B=${VR_CUDA_BIN:?set VR_CUDA_BIN or VR_CUDA_PACK}
fi
export VERL_REWARD_LIB=${VERL_REWARD_LIB:-$B/../lib/libverl_reward_client.so}
export PYTHONPATH=${PYTHONPATH:-$PWD/python}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
M=${FWB_MODEL:-/tmp/vr-fwbench-model}
if [ -z "${FWB_MODEL:-}" ] && [ ! -f $M/model.safetensors ]; then
  python3 tools/make_fixtures.py --size base --out $M > $OUT/make.log 2>&1 \
    || { echo "make model failed"; cat $OUT/make.log; exit 1; }
fi
P=18731
$B/verl-reward-server --model $M --device ${FWB_DEVICE:-cuda:0} --shm-name vr_fwbench --port $P --log-level warn \
  > $OUT/server.log 2>&1 &
S=$!
for _ in $(seq 600); do curl -sf localhost:$P/ready > /dev/null && break; sleep 0.2; done
curl -sf localhost:$P/ready > /dev/null || { echo "server not ready"; tail -20 $OUT/server.log; kill $S; exit 1; }
rc=0
for L in ${FWB_LENS:-256 512}; do
  echo "== seq_len $L"
  timeout 280 python3 tools/bench_frameworks.py --shm-name vr_fwbench --url http://127.0.0.1:$P --n ${FWB_N:-1024} \
    --seq-len $L --vocab 50265 --reps ${FWB_REPS:-5} --json-out $OUT/bench_frameworks_$L.jsonl || rc=$?
done
curl -s localhost:$P/metrics | grep -E "^verl_reward_(requests_total|batch_sequences_(sum|count))" > $OUT/metrics.txt
kill -TERM $S; wait $S
echo "server exit $? bench rc=$rc"
