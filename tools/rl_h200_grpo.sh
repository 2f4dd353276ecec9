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
#     OUT: results (metrics.jsonl, timing.txt, nvidia-smi.csv, logs)
# On the lent machine (device README): pack BUILD_DIR/bin and the .so files it needs into
# .device/rl/, carry [".device/rl"], then run
#   export NCCL_NVLS_ENABLE=0; bash .device/rl/src/tools/rl_h200_grpo.sh .device/rl/build $OUT 5
# The models are made there with torch + transformers (no downloads).
set -euo pipefail
BUILD=${1:?usage: rl_h200_grpo.sh BUILD_DIR OUT [STEPS]}
OUT=${2:?usage: rl_h200_grpo.sh BUILD_DIR OUT [STEPS]}
STEPS=${3:-5}
SRC=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d /tmp/rl_h200.XXXXXX)
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# 1. models: Qwen2-0.5B shape (vocab 151936, 24 layers, hidden 896, 14 heads / 2 KV, FFN 4864,
#    qkv bias, tied embeddings) and a roberta-base-shaped reward model, random init, fp32/bf16
python3 - "$W" "$SRC" <<'EOF'
import json, lzma, os, shutil, sys
import torch
from transformers import (Qwen2Config, Qwen2ForCausalLM, RobertaConfig, RobertaForSequenceClassification)
w, src = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                  rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=151643,
                  eos_token_id=151645)
Qwen2ForCausalLM(cfg).save_pretrained(f"{w}/policy")
tok = f"{src}/tests/fixtures/tokenizers/qwen3"
with lzma.open(f"{tok}/tokenizer.json.xz") as f, open(f"{w}/policy/tokenizer.json", "wb") as g:
    g.write(f.read())
shutil.copy(f"{tok}/tokenizer_config.json", f"{w}/policy/")
json.dump({"eos_token_id": [151645, 151643]}, open(f"{w}/policy/generation_config.json", "w"))
rcfg = RobertaConfig(num_labels=1, vocab_size=151936, max_position_embeddings=1026)
RobertaForSequenceClassification(rcfg).to(torch.bfloat16).save_pretrained(f"{w}/rm")
# 64 GSM8K-style prompts as verl writes them
with open(f"{w}/prompts.jsonl", "w") as f:
    for i in range(64):
        a, b = 3 + i, 7 + 2 * i
        f.write(json.dumps({"prompt": [{"role": "user", "content": f"Tom has {a} apples and buys {b} more. How "
                            "many apples does he have? Let's think step by step and output the final answer "
                            "after \"####\"."}], "data_source": "openai/gsm8k",
                            "reward_model": {"ground_truth": str(a + b), "style": "rule"},
                            "extra_info": {"index": i}}) + "\n")
EOF

# 2. the reward server on the same GPU (the issue's layout: all roles colocated)
"$BUILD/bin/verl-reward-server" --model "$W/rm" --device cuda:0 --reward "model:0.5,gsm8k:0.5" \
    --shm-name vr_rl_h200 --port 0 > "$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; rm -rf "$W"' EXIT
for _ in $(seq 600); do grep -q "] ready: " "$OUT/server.log" && break; kill -0 $SERVER 2>/dev/null || { cat "$OUT/server.log"; exit 1; }; sleep 0.1; done

cat > "$W/device_map.yaml" <<'EOF'
actor:     {device_group: [0], placement_policy: hybrid}
rollout:   {device_group: [0]}
reference: {device_group: [0]}
reward:    {shared_mem_name: vr_rl_h200}
colocate:  [actor, rollout, reference]
EOF
cat > "$W/ppo.yaml" <<EOF
data: {train_files: prompts.jsonl, train_batch_size: 64, max_prompt_length: 256, max_response_length: 256,
       truncation: left, seed: 1}
actor_rollout_ref:
  model: {path: policy}
  actor: {ppo_mini_batch_size: 16, ppo_micro_batch_size_per_gpu: 16, use_kl_loss: true, kl_loss_type: low_var_kl,
          kl_loss_coef: 0.001, loss_agg_mode: token-mean, optim: {lr: 1.0e-6}}
  rollout: {n: 4, temperature: 1.0, top_p: 1.0, kv_cache_bytes: 8589934592, max_num_seqs: 256}
algorithm: {adv_estimator: grpo}
trainer: {device_map: device_map.yaml, total_training_steps: $STEPS, save_freq: -1, resume_mode: disable,
          default_local_dir: ckpt, metrics_file: $OUT/metrics.jsonl}
EOF
nvidia-smi --query-gpu=timestamp,memory.used,memory.total,utilization.gpu --format=csv -lms 500 \
    > "$OUT/nvidia-smi.csv" 2>/dev/null &
SMI=$!
set +e
( cd "$W" && "$BUILD/bin/verl-trainer" --config ppo.yaml ) > "$OUT/trainer.log" 2>&1
RC=$?
set -e
kill $SMI 2>/dev/null || true
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
mem = [l.split(",") for l in open(f"{out}/nvidia-smi.csv").read().splitlines()[1:] if l.count(",") >= 3]
if mem:
    print("peak device memory          ", max(int(x[1].split()[0]) for x in mem), "MiB of", mem[0][2].strip())
EOF
