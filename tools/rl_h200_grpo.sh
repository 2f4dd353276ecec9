#!/usr/bin/env bash
# rl_h200_grpo.sh: issue 22's GPU run: GRPO on a Qwen2-0.5B-shaped policy (random weights, the
# real Qwen3 tokenizer of tests/fixtures/tokenizers/qwen3 with its chat template), rewards from a
# GPU verl-reward-server (roberta-base-shaped RobertaForSequenceClassification, random weights)
# plus the gsm8k rule, 64 prompts x 4 responses x 256 new tokens per step, every role colocated on
# cuda:0 of one H200. Writes the metrics, the timing_s/* breakdown, tokens/s and device memory
# under OUT.
#
# Needs a CUDA build (the CUDA training and rollout backends); its numbers are in
# docs/benchmarks.md "RL loop on one H200".
#
#   tools/rl_h200_grpo.sh BUILD_DIR OUT [STEPS]
#     BUILD_DIR: a CUDA build (cmake -DVR_CUDA=ON) with bin/verl-trainer and bin/verl-reward-server
#     OUT: results (metrics.jsonl, timing.txt, nvidia-smi.log: per-GPU memory every 0.5 s, logs)
# On the lent machine (device README): pack BUILD_DIR/bin and the .so files it needs into
# .device/rl/, carry [".device/rl"], then run
#   export NCCL_NVLS_ENABLE=0; bash .device/rl/src/tools/rl_h200_grpo.sh .device/rl/build $OUT 5
# The models are made there with torch + transformers (no downloads).
set -uo pipefail
BUILD=${1:?usage: rl_h200_grpo.sh BUILD_DIR OUT [STEPS]}
OUT=${2:?usage: rl_h200_grpo.sh BUILD_DIR OUT [STEPS]}
STEPS=${3:-5}
SRC=$(cd "$(dirname "$0")/.." && pwd)
# the models, the server, the config and the bounded steps are tools/rl_multi_lib.sh's (shared with
# the multi-GPU runs rl_h200_x2.sh / rl_h200_x8.sh)
# shellcheck source=tools/rl_multi_lib.sh
. "$SRC/tools/rl_multi_lib.sh"
mlib_init

# 1. models: Qwen2-0.5B shape (vocab 151936, 24 layers, hidden 896, 14 heads / 2 KV, FFN 4864,
#    qkv bias, tied embeddings) and a roberta-base-shaped reward model, random init; 64 prompts
make_models qwen2_0.5b 64 || { cat "$OUT/models.log"; exit 1; }

# 2. the reward server on the same GPU (the issue's layout: all roles colocated)
start_server server vr_rl_h200 0 cuda:0 || { cat "$OUT/server.log"; exit 1; }
mkdir -p "$OUT/configs"
cat > "$OUT/configs/device_map.yaml" <<'EOF'
actor:     {device_group: [0], placement_policy: hybrid}
rollout:   {device_group: [0]}
reference: {device_group: [0]}
reward:    {shared_mem_name: vr_rl_h200}
colocate:  [actor, rollout, reference]
EOF
write_config trainer device_map.yaml grpo "$STEPS" 64 16 16 false
smi_start nvidia-smi
rl_run trainer 1800
RC=$?
smi_stop
stop_bg "$SERVER_PID"
cp "$OUT/trainer.metrics.jsonl" "$OUT/metrics.jsonl" 2>/dev/null
tail -20 "$OUT/trainer.log"
if [ $RC -ne 0 ]; then echo "verl-trainer exited $RC (see $OUT/trainer.log)"; exit $RC; fi

# 3. the breakdown: mean timing_s/* over the steps after the first (warm-up), reward share, tokens/s
python3 - "$OUT" <<'EOF' | tee "$OUT/timing.txt"
import json, sys
out = sys.argv[1]
m = [json.loads(l) for l in open(f"{out}/metrics.jsonl")]
steady = m[1:] or m
keys = sorted({k for r in steady for k in r if k.startswith("timing_s/")})
step = sum(r["timing_s/step"] for r in steady) / len(steady)
for k in keys:
    v = sum(r.get(k, 0) for r in steady) / len(steady)
    print(f"{k:28s} {v:9.3f} s  {100 * v / step:5.1f} %")
print(f"tokens/s (perf/throughput)   {sum(r['perf/throughput'] for r in steady) / len(steady):9.0f}")
print(f"reward share of the step     {100 * sum(r['timing_s/reward'] for r in steady) / len(steady) / step:5.2f} %"
      " (target < 5 %)")
EOF
report smi "$OUT/nvidia-smi.log" | tee -a "$OUT/timing.txt"
