# rl_multi_lib.sh: what tools/rl_h200_x2.sh and rl_h200_x8.sh (issues 25, 26) share; sourced, not
# run. Every step is bounded (timeout -k), logged under $OUT, and recorded in $OUT/steps.tsv
# (name, exit status, seconds); a failed step never stops the script, so one device call brings
# back everything that worked. DRY=1: write the configs, run the CPU-safe checks
# (verl-trainer --check --gpus N), and print every other command instead of running it.
#
# The caller sets BUILD, OUT, SRC before sourcing, and calls mlib_init.
# shellcheck shell=bash

mlib_init() {
  mkdir -p "$OUT"
  : > "$OUT/steps.tsv"
  : > "$OUT/summary.md"
  W=$(mktemp -d /tmp/rl_multi.XXXXXX)
  export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
  unset OMPI_COMM_WORLD_SIZE PMI_SIZE PMIX_RANK SLURM_PROCID VERL_COMM_PROFILE
  MLIB_BG=()
  trap mlib_cleanup EXIT
  # the libraries of a pack (tools/rl_multi_pack.sh): ours first; Open MPI's only where the machine
  # has none of its own; NCCL from wherever the machine keeps it (torch's wheel ships libnccl.so.2)
  local nccl
  [ -d "$BUILD/lib" ] && LD_LIBRARY_PATH="$BUILD/lib:${LD_LIBRARY_PATH:-}"
  if [ -d "$BUILD/lib/mpi" ] && ! ldconfig -p 2>/dev/null | grep -q libmpi.so.40; then
    LD_LIBRARY_PATH="$BUILD/lib/mpi:$LD_LIBRARY_PATH"
  fi
  if [ "${DRY:-0}" != 1 ] && ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2; then
    nccl=$(timeout 60 find / -name libnccl.so.2 -not -path '/proc/*' 2>/dev/null | head -1)
    [ -n "$nccl" ] && LD_LIBRARY_PATH="$(dirname "$nccl"):${LD_LIBRARY_PATH:-}"
  fi
  export LD_LIBRARY_PATH
  TRAINER="$BUILD/bin/verl-trainer"
  SERVER_BIN="$BUILD/bin/verl-reward-server"
  # shellcheck disable=SC2034  # used by the scripts that source this file
  BENCH="$BUILD/bin/verl-reward-bench"
  if [ "${DRY:-0}" = 1 ]; then
    echo "# DRY=1: nothing below runs on a GPU; the commands are printed, the configs are in $OUT/configs"
  fi
}

# has PART: PART is one of the words of $PARTS (the script's parts to run).
has() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# The tables (tools/rl_multi_report.py), appended to the summary.
report() { python3 "$SRC/tools/rl_multi_report.py" "$@" 2>&1 | tee -a "$OUT/summary.md"; }

# GET http://127.0.0.1:PORT/metrics of a reward server into FILE (python: curl may be missing).
scrape_metrics() {
  python3 -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
    "http://127.0.0.1:$1/metrics" > "$2" 2>&1 || true
}

# Stops the background processes this script started (by their pids), removes the scratch dir.
mlib_cleanup() {
  local p
  for p in "${MLIB_BG[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${MLIB_BG[@]}"; do wait "$p" 2>/dev/null || true; done
  [ -n "${W:-}" ] && rm -rf "$W"
}

# Appends to the summary (stdout and $OUT/summary.md, so a killed call still brings it back).
say() { printf '%s\n' "$*" | tee -a "$OUT/summary.md"; }
say_cmd() { "$@" 2>&1 | tee -a "$OUT/summary.md"; }

# step NAME TIMEOUT_S CMD...: runs CMD (stdout + stderr into $OUT/NAME.log) under timeout; DRY=1
# prints it. Returns CMD's status (124/137: timed out) without stopping the script.
step() {
  local name=$1 t=$2
  shift 2
  if [ "${DRY:-0}" = 1 ]; then
    printf '[dry] %s (timeout %ss): %s\n' "$name" "$t" "$*"
    return 0
  fi
  local t0 rc ms
  t0=$(date +%s%N)
  echo "[$(date -u +%H:%M:%S)] $name: $*" >&2
  timeout -k 15 "$t" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  printf '%s\t%s\t%d.%03d\n' "$name" "$rc" $((ms / 1000)) $((ms % 1000)) >> "$OUT/steps.tsv"
  [ $rc -eq 0 ] || echo "[$(date -u +%H:%M:%S)] $name: exit $rc (see $OUT/$name.log)" >&2
  return $rc
}

# bg NAME CMD...: a background process (its pid in BG_PID), output into $OUT/NAME.log; stopped
# at exit. DRY=1 prints it.
bg() {
  local name=$1
  shift
  BG_PID=
  if [ "${DRY:-0}" = 1 ]; then
    printf '[dry] %s (background): %s\n' "$name" "$*"
    return 0
  fi
  "$@" > "$OUT/$name.log" 2>&1 &
  BG_PID=$!
  MLIB_BG+=("$BG_PID")
}

stop_bg() { # stop_bg PID: SIGTERM, then SIGKILL after 20 s
  local p=$1
  [ -n "$p" ] || return 0
  kill "$p" 2>/dev/null || return 0
  for _ in $(seq 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
}

# start_server NAME SHM PORT DEVICE [more flags]: verl-reward-server with the reward model of
# make_models; waits (at most 180 s) for its "ready" line. SERVER_PID; returns 1 if it did not start.
start_server() {
  local name=$1 shm=$2 port=$3 dev=$4
  shift 4
  bg "$name" "$SERVER_BIN" --model "$W/rm" --device "$dev" --reward "model:0.5,gsm8k:0.5" --shm-name "$shm" \
    --port "$port" "$@"
  SERVER_PID=$BG_PID
  [ "${DRY:-0}" = 1 ] && return 0
  for _ in $(seq 1800); do
    grep -q "] ready: " "$OUT/$name.log" && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "verl-reward-server ($name) did not get ready; see $OUT/$name.log" >&2
  stop_bg "$SERVER_PID"
  SERVER_PID=
  return 1
}

# smi_start NAME: per-GPU memory and utilisation every 500 ms (rl_multi_report.py smi), and every
# compute process's device memory (procmem), until smi_stop.
smi_start() {
  local name=$1
  bg "$name" nvidia-smi --query-gpu=timestamp,index,memory.used,memory.total,utilization.gpu \
    --format=csv,noheader,nounits -lms 500
  SMI_PID=$BG_PID
  bg "$name-apps" bash -c 'while :; do nvidia-smi --query-compute-apps=timestamp,pid,used_memory \
    --format=csv,noheader,nounits; sleep 0.5; done'
  SMI_APPS_PID=$BG_PID
}
smi_stop() { stop_bg "$SMI_PID"; stop_bg "$SMI_APPS_PID"; }

# make_models POLICY_SHAPE N_PROMPTS: policy (random init, Qwen2 shape qwen2_0.5b or qwen2_1.5b,
# with the Qwen3 tokenizer fixture and chat template), a roberta-base-shaped bf16 reward model and
# GSM8K-style chat prompts, under $W (torch + transformers; no downloads). Writes $W/n_params.
make_models() {
  local shape=$1 n=$2
  if [ "${DRY:-0}" = 1 ]; then
    printf '[dry] models: %s policy, roberta-base-shaped reward model, %s prompts into %s\n' "$shape" "$n" "$W"
    echo 0 > "$W/n_params"
    return 0
  fi
  step models 300 python3 - "$W" "$SRC" "$shape" "$n" <<'EOF'
import json, lzma, shutil, sys
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, RobertaConfig, RobertaForSequenceClassification
w, src, shape, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
torch.manual_seed(0)
shapes = {  # Qwen2-0.5B and Qwen2-1.5B (their config.json), tied embeddings
    "qwen2_0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                       num_key_value_heads=2),
    "qwen2_1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                       num_key_value_heads=2)}
cfg = Qwen2Config(vocab_size=151936, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645, **shapes[shape])
m = Qwen2ForCausalLM(cfg)
m.save_pretrained(f"{w}/policy")
open(f"{w}/n_params", "w").write(str(sum(p.numel() for p in m.parameters())))
tok = f"{src}/tests/fixtures/tokenizers/qwen3"
with lzma.open(f"{tok}/tokenizer.json.xz") as f, open(f"{w}/policy/tokenizer.json", "wb") as g:
    g.write(f.read())
shutil.copy(f"{tok}/tokenizer_config.json", f"{w}/policy/")
json.dump({"eos_token_id": [151645, 151643]}, open(f"{w}/policy/generation_config.json", "w"))
rcfg = RobertaConfig(num_labels=1, vocab_size=151936, max_position_embeddings=1026)
RobertaForSequenceClassification(rcfg).to(torch.bfloat16).save_pretrained(f"{w}/rm")
with open(f"{w}/prompts.jsonl", "w") as f:
    for i in range(n):
        a, b = 3 + i, 7 + 2 * i
        f.write(json.dumps({"prompt": [{"role": "user", "content": f"Tom has {a} apples and buys {b} more. How "
                            "many apples does he have? Let's think step by step and output the final answer "
                            "after \"####\"."}], "data_source": "openai/gsm8k",
                            "reward_model": {"ground_truth": str(a + b), "style": "rule"},
                            "extra_info": {"index": i}}) + "\n")
print("policy", shape, sum(p.numel() for p in m.parameters()), "parameters")
EOF
}

# write_config NAME MAP EST STEPS BATCH MINI MICRO ZERO1: $OUT/configs/NAME.yaml, the RL run of MAP
# (a docs/examples device map, copied beside it) with metrics into $OUT/NAME.metrics.jsonl. EST gae
# (PPO with the critic) or grpo; BATCH prompts per step (x 4 responses), MINI per optimizer step,
# MICRO sequences per forward/backward; ZERO1 true|false for the actor and the critic.
write_config() {
  local name=$1 map=$2 est=$3 steps=$4 batch=$5 mini=$6 micro=$7 zero1=$8
  local d="$OUT/configs"
  mkdir -p "$d"
  [ -f "$SRC/docs/examples/$map" ] && cp "$SRC/docs/examples/$map" "$d/$map"
  cat > "$d/$name.yaml" <<EOF
# $name: written by $(basename "$0") (tools/rl_multi_lib.sh write_config)
data: {train_files: $W/prompts.jsonl, train_batch_size: $batch, max_prompt_length: 256, max_response_length: 256,
       truncation: left, seed: 1}
actor_rollout_ref:
  model: {path: $W/policy}
  actor: {ppo_mini_batch_size: $mini, ppo_micro_batch_size_per_gpu: $micro, use_kl_loss: true, kl_loss_type: low_var_kl,
          kl_loss_coef: 0.001, loss_agg_mode: token-mean, optim: {lr: 1.0e-6, zero1: $zero1}}
  rollout: {n: 4, temperature: 1.0, top_p: 1.0, kv_cache_bytes: 8589934592, max_num_seqs: 256}
critic: {ppo_mini_batch_size: $mini, ppo_micro_batch_size_per_gpu: $micro, optim: {lr: 1.0e-5, zero1: $zero1}}
algorithm: {adv_estimator: $est}
trainer: {device_map: $map, total_training_steps: $steps, save_freq: -1, resume_mode: disable,
          default_local_dir: $W/ckpt_$name, metrics_file: $OUT/$name.metrics.jsonl, comm_timeout_s: 300,
          reward_timeout_s: 120}
EOF
}

# check_config NAME MACHINE_FLAGS...: verl-trainer --config --check against the machine the flags
# describe (--gpus N or --topology FILE; no GPU touched; runs in DRY mode too): every key of the
# config and the device map (not the model directory, which --check does not open).
check_config() {
  local name=$1
  shift
  local saved=${DRY:-0}
  DRY=0 step "check_$name" 60 "$TRAINER" --config "$OUT/configs/$name.yaml" --check "$@"
  local rc=$?
  DRY=$saved
  if [ "$saved" = 1 ]; then
    printf '[checked] %s: verl-trainer --config %s --check %s: exit %s\n' "$name" "$OUT/configs/$name.yaml" "$*" "$rc"
    [ $rc -eq 0 ] || cat "$OUT/check_$name.log"
  fi
  return $rc
}

# rl_run NAME TIMEOUT_S [env VAR=V ...]: the RL loop of $OUT/configs/NAME.yaml (metrics, log, the
# "Device mapping resolved" block and the topology verdict in $OUT/NAME.log).
rl_run() {
  local name=$1 t=$2
  shift 2
  step "$name" "$t" env "$@" "$TRAINER" --config "$OUT/configs/$name.yaml" --timeout 300
}

# p2p_probe OUTFILE: the copy rate between every ordered pair of GPUs (torch: a 1 GiB tensor
# copied with tensor.copy_ between devices, CUDA events, after warm-up; one direction, then both
# at once) and the device-local copy rate, as JSON. The P2P rate NCCL's bus bandwidth is
# compared with: nccl-tests are not on the lent machines.
p2p_probe() {
  step p2p 180 python3 - "$1" <<'EOF'
import itertools, json, sys
import torch
n = torch.cuda.device_count()
B = 1 << 30
out = {"method": "torch copy_ of 1 GiB between devices, CUDA events, median of 5", "gpus": n}
bufs = [torch.empty(B, dtype=torch.uint8, device=f"cuda:{i}") for i in range(n)]
dst = [torch.empty(B, dtype=torch.uint8, device=f"cuda:{i}") for i in range(n)]
def rate(pairs):
    times = []
    for _ in range(6):
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in pairs]
        streams = [torch.cuda.Stream(device=f"cuda:{s}") for s, _ in pairs]
        for (s, d), st, (e0, e1) in zip(pairs, streams, ev):
            with torch.cuda.device(s), torch.cuda.stream(st):
                e0.record(st); dst[d].copy_(bufs[s], non_blocking=True); e1.record(st)
        for i in range(n): torch.cuda.synchronize(i)
        times.append(max(e0.elapsed_time(e1) for e0, e1 in ev) / 1e3)
    t = sorted(times[1:])[len(times[1:]) // 2]
    return len(pairs) * B / t / 1e9
for i in range(n):  # device-local copy (read + write counted once, as verl-trainer's device copy rate)
    with torch.cuda.device(i):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dst[i].copy_(bufs[i]); e0.record(); dst[i].copy_(bufs[i]); e1.record(); torch.cuda.synchronize(i)
        out[f"local_{i}_gbps"] = B / (e0.elapsed_time(e1) / 1e3) / 1e9
for a, b in itertools.permutations(range(n), 2):
    if n > 4 and a != 0:  # on 8 GPUs: from GPU 0 to every other, and the pairs both ways below
        continue
    out[f"p2p_{a}_to_{b}_gbps"] = rate([(a, b)])
if n >= 2:
    out["p2p_0_1_bidirectional_gbps"] = rate([(0, 1), (1, 0)])
json.dump(out, open(sys.argv[1], "w"), indent=1)
print(json.dumps(out, indent=1))
EOF
}

# comm_check NAME MAP STEPS AR_BYTES SYNC_BYTES [flags]: verl-trainer --comm-check over MAP's groups
# (every result checked by the program; comm/*/busbw_gbps per step into $OUT/NAME.metrics.jsonl).
comm_check() {
  local name=$1 map=$2 steps=$3 ar=$4 sync=$5
  shift 5
  mkdir -p "$OUT/configs"
  cp "$SRC/docs/examples/$map" "$OUT/configs/$map"
  cat > "$OUT/configs/$name.yaml" <<EOF
trainer: {device_map: $map, total_training_steps: $steps, comm_timeout_s: 120,
          comm_check_allreduce_bytes: $ar, comm_check_sync_bytes: $sync, metrics_file: $OUT/$name.metrics.jsonl}
EOF
  step "$name" 240 "$TRAINER" --config "$OUT/configs/$name.yaml" --comm-check "$@"
}

# The "Device mapping resolved" block and the topology lines of a run's log.
resolved_block() {
  [ -f "$1" ] || { echo "(no log $1)"; return 0; }
  sed -n '/Device mapping resolved/,/^\[INFO\] device_map /p' "$1" | grep -v '^\[INFO\] device_map '
  grep -E '^\[INFO\] topology|^warning: ' "$1" || true
}

# ---- the summary's sections (rl_multi_report.py tables) -----------------------------------------

# The machine: GPUs and driver, the NCCL the processes load, Open MPI, torch (into the summary).
report_machine() {
  [ "${DRY:-0}" = 1 ] && return 0
  say '```'
  say_cmd nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
  say "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  say_cmd bash -c 'mpirun --version 2>&1 | head -1; python3 -c "import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"nccl\", torch.cuda.nccl.version())" 2>&1 | tail -1'
  say '```'
}

# The steps of this call: name, exit status, seconds.
report_calls() {
  say ""
  say "### Steps of this call (name, exit status, seconds)"
  say '```'
  say_cmd cat "$OUT/steps.tsv"
  say '```'
}

# report_topology TITLE CHECK_STEP: nvidia-smi topo -m beside the check's resolved block and verdict.
report_topology() {
  say "### $1"
  say '```'
  say_cmd cat "$OUT/topo.log"
  say_cmd resolved_block "$OUT/$2.log"
  say '```'
}

# report_rl NAME COMM_CHECK TITLE: one RL run of run_with_server: its resolved block, timing_s/* per
# step, the weight sync against the comm check, the P2P probe and the profile, the reward latency,
# the server's device memory (SERVER_PID_OF_RUN), per-GPU memory and utilisation.
report_rl() {
  local name=$1 cc=$2
  say "### $3"
  say '```'
  say_cmd resolved_block "$OUT/$name.log"
  say '```'
  report steps "$OUT/$name.metrics.jsonl"
  say ""
  report weights --metrics "$OUT/$name.metrics.jsonl" --n-params "$(cat "$W/n_params" 2>/dev/null || echo 0)" \
    --comm-check "$OUT/$cc.metrics.jsonl" --p2p "$OUT/p2p.json" --profile "$OUT/comm_profile/summary.txt"
  say ""
  report rewardwait "$OUT/$name.metrics.jsonl"
  report latency "$OUT/server_$name.metrics.txt"
  report procmem "$OUT/smi_$name-apps.log" "$(cat "$OUT/server_$name.pid" 2>/dev/null || echo 0)"
  say ""
  report smi "$OUT/smi_$name.log"
  say ""
  report trace "$OUT/comm_profile/nccl_trace.json"
  say "The trace: comm_profile/nccl_trace.json (chrome://tracing, ui.perfetto.dev)"
}

# run_with_server NAME DEVICE PORT TIMEOUT [env ...]: the reward server on DEVICE (shm MLIB_SHM,
# default verl_reward_shm: the docs/examples maps' name), nvidia-smi sampling, the RL run of configs/NAME.yaml, the
# server's /metrics at the end (server_NAME.metrics.txt; its pid in server_NAME.pid).
run_with_server() {
  local name=$1 dev=$2 port=$3 t=$4
  shift 4
  start_server "server_$name" "${MLIB_SHM:-verl_reward_shm}" "$port" "$dev" --lanes 8 || return 1
  smi_start "smi_$name"
  rl_run "$name" "$t" "$@"
  if [ "${DRY:-0}" != 1 ]; then
    scrape_metrics "$port" "$OUT/server_$name.metrics.txt"
    echo "$SERVER_PID" > "$OUT/server_$name.pid"
  fi
  smi_stop
  stop_bg "$SERVER_PID"
}
