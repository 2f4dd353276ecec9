#!/usr/bin/env bash
# rl_h200_x2.sh: issue 25's run on two H200s (`nvidia-h200-x2`), everything the issue asks for in
# one device call (by estimate about 9 minutes, nothing has run yet: PARTS="probe main colo" and
# PARTS="dp bench" split it over two calls of about 5 and 4):
#   probe  nvidia-smi topo -m, verl-trainer --check against the machine (the topology check's view
#          of the link), the P2P copy rate between the GPUs (torch; nccl-tests are not on the
#          machine), verl-trainer --comm-check on device_map_2gpu.yaml with a weight-sync buffer
#          the policy's size (NCCL bus bandwidth of the broadcast and the all-reduces)
#   main   PPO (critic on) for STEPS steps on a Qwen2-0.5B-shaped policy, actor + critic on GPU 0,
#          rollout + reference on GPU 1 (docs/examples/device_map_2gpu.yaml), rewards from
#          verl-reward-server --device cuda:1 over shm; VERL_COMM_PROFILE=1; nvidia-smi sampling;
#          the server's request-latency histogram at the end
#   colo   the same run with every role on GPU 0 (device_map_1gpu.yaml), the server on cuda:0
#   dp     test_train_dp --device cuda (the actor group on GPUs 0 and 1 over NCCL with ZeRO-1: the
#          reduced gradients against one engine, tensor by tensor), then GRPO, actor DP 1
#          (device_map_2gpu_dp1.yaml) vs DP 2 with ZeRO-1 (actor.optim.zero1, device_map_2gpu_dp2.yaml),
#          rollout and reference on GPU 1 in both: step-1 gradient norm and loss, update throughput
#   bench  verl-reward-bench at 32 and 64 concurrent clients against --device cuda:0 and cuda:0,1
#
#   tools/rl_h200_x2.sh BUILD_DIR OUT [STEPS]      (STEPS default 20; PARTS="probe main" to choose)
#   DRY=1 tools/rl_h200_x2.sh BUILD_DIR OUT        writes the configs, checks them with
#                                                  verl-trainer --check --gpus 2, prints the commands
# BUILD_DIR: a CUDA build (bin/verl-trainer, verl-reward-server, verl-reward-bench); OUT: every log,
# metrics file and table (summary.md; the same on stdout: rows for docs/benchmarks.md).
# On the lent machine (docs/operations.md "Multi-GPU runs"): tools/rl_multi_pack.sh CUDA_BUILD
# /work/main/.device/multi here, then run with carry [".device/multi"], kind nvidia-h200-x2, timeout_s 600:
#   cd .device/multi && mkdir -p build && tar xzf pack.tgz -C build && bash src/tools/rl_h200_x2.sh $PWD/build $OUT
# Every step has a timeout and a log; a failed step is reported and the others still run.
set -uo pipefail
BUILD=${1:?usage: rl_h200_x2.sh BUILD_DIR OUT [STEPS]}
OUT=${2:?usage: rl_h200_x2.sh BUILD_DIR OUT [STEPS]}
STEPS=${3:-20}
PARTS=${PARTS:-probe main colo dp bench}
SRC=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tools/rl_multi_lib.sh
. "$SRC/tools/rl_multi_lib.sh"
mlib_init
PORT=18725           # the server's HTTP port: GET /metrics at the end of a run

make_models qwen2_0.5b 64
NP=$(cat "$W/n_params" 2>/dev/null || echo 0)

write_config x2_ppo device_map_2gpu.yaml gae "$STEPS" 64 16 16 false
write_config x1_ppo device_map_1gpu.yaml gae "$STEPS" 64 16 16 false
write_config dp1_grpo device_map_2gpu_dp1.yaml grpo 6 64 16 16 false
write_config dp2_grpo device_map_2gpu_dp2.yaml grpo 6 64 16 16 true
for c in x2_ppo dp1_grpo dp2_grpo; do check_config $c --gpus 2; done
check_config x1_ppo --gpus 1

say "## Issue 25 on $(hostname) ($(date -u +%Y-%m-%dT%H:%MZ)), $("$TRAINER" --version 2>/dev/null | head -1)"
report_machine
say ""

if has probe; then
  step topo 30 nvidia-smi topo -m
  step check_local 60 "$TRAINER" --device-map "$SRC/docs/examples/device_map_2gpu.yaml" --check
  p2p_probe "$OUT/p2p.json"
  comm_check commcheck_2gpu device_map_2gpu.yaml 6 268435456 $((NP > 0 ? 4 * NP : 1976131584))
fi

if has main; then
  run_with_server x2_ppo cuda:1 "$PORT" 420 VERL_COMM_PROFILE=1 VERL_COMM_PROFILE_PATH="$OUT/comm_profile"
fi
if has colo; then
  run_with_server x1_ppo cuda:0 "$PORT" 420
fi
if has dp; then
  # tensor by tensor: the actor group on GPUs 0 and 1 (NCCL, ZeRO-1) against one engine
  step dp_grads 240 env VR_FIXTURES="$SRC/tests/fixtures" mpirun -np 3 --oversubscribe --bind-to none \
    "$BUILD/tests/test_train_dp" --device cuda
  run_with_server dp1_grpo cuda:1 "$PORT" 240
  run_with_server dp2_grpo cuda:1 "$PORT" 240
fi
if has bench; then
  for dev in cuda:0 cuda:0,1; do
    tag=${dev//[:,]/_}
    step "bench_$tag" 150 "$BENCH" --spawn-server "--model $W/rm --device $dev --reward model" \
      --server-log "$OUT/bench_server_$tag.log" --concurrency 32,64 --duration 10 --warmup 2 \
      --json "$OUT/bench_$tag.json"
  done
fi

[ "${DRY:-0}" = 1 ] && exit 0

report_calls
if has probe; then
  report_topology "Topology: nvidia-smi topo -m and the check's verdict" check_local
fi
if has main; then
  report_rl x2_ppo commcheck_2gpu "Separate groups (actor + critic on GPU 0, rollout + reference + reward server on GPU 1)"
fi
if has main || has colo; then
  say ""
  report phases "2 GPUs, separate groups=$OUT/x2_ppo.metrics.jsonl" "1 GPU, colocated=$OUT/x1_ppo.metrics.jsonl"
fi
if has colo; then
  report smi "$OUT/smi_x1_ppo.log"
fi
if has dp; then
  say ""
  say "### Data parallel actor: test_train_dp --device cuda (exit $(awk -F'\t' '$1 == "dp_grads" {print $2}' "$OUT/steps.tsv"))"
  say '```'
  say_cmd grep -E "DP 2 vs one engine|identical on both|worst tensor|PASSED|FAILED" "$OUT/dp_grads.log"
  say '```'
  report dp --dp1 "$OUT/dp1_grpo.metrics.jsonl" --dp2 "$OUT/dp2_grpo.metrics.jsonl"
fi
if has bench; then
  say ""
  report bench "cuda:0=$OUT/bench_cuda_0.json" "cuda:0,1=$OUT/bench_cuda_0_1.json"
fi
exit 0
