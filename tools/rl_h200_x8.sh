#!/usr/bin/env bash
# rl_h200_x8.sh: issue 26's run on eight H200s (`nvidia-h200-x8`), everything the issue asks for
# in one device call where it fits (by estimate 10-12 minutes, nothing has run yet: PARTS="probe
# main trap" and PARTS="colo nodes" split it over two calls):
#   probe  nvidia-smi topo -m beside verl-trainer --check's verdict on the seed's map against the
#          machine, the P2P copy rate (torch: GPU 0 to every other GPU, 0 <-> 1 both ways), and
#          verl-trainer --comm-check on the seed's map (NCCL bus bandwidth per group and of the
#          weight sync)
#   main   the seed's layout (docs/examples/device_map_8gpu.yaml: actor 0-3 data parallel with
#          ZeRO-1, hybrid; critic 4; rollout 5-7; reference 4; verl-reward-server --device cuda:4 over
#          shm), PPO (critic on) for STEPS steps on a Qwen2-1.5B-shaped policy: timing_s/* per step,
#          nvidia-smi dmon (utilisation, PCIe) and per-GPU memory sampling, NVLink counters before
#          and after, the server's device memory over the run and its request-latency histogram,
#          timing_s/reward p50/p99 as the trainer waited, VERL_COMM_PROFILE=1
#   colo   the same policy with every role on all eight GPUs (device_map_8gpu_colocated.yaml; actor
#          and critic DP 8 with ZeRO-1), the server on cuda:0
#   trap   the actor on 0,2,4,6 (device_map_8gpu_trap.yaml): --check against the machine, against a
#          two-NVLink-domain topology (topology_2x4_nvlink.yaml: the warning), --strict-topology's
#          exit status, and a comm check of that layout beside the seed's
#   nodes  a simulated two-node launch on this host: device_map_2node.yaml (node-qualified ids)
#          under mpirun -np 9 started by hand, each rank's node named by VR_TRAINER_HOST with its
#          own CUDA_VISIBLE_DEVICES (0-3 node0, 4-7 node1), --topology topology_2node.yaml: the
#          comm check (and again with NCCL_HOSTID per node, so NCCL sees two hosts), then 3 PPO steps
#
#   tools/rl_h200_x8.sh BUILD_DIR OUT [STEPS]      (STEPS default 20; PARTS="probe main" to choose)
#   DRY=1 tools/rl_h200_x8.sh BUILD_DIR OUT        writes the configs, checks them with
#                                                  verl-trainer --check --gpus 8, prints the commands
# BUILD_DIR: a CUDA build; OUT: every log, metrics file and table (summary.md, and on stdout).
# On the lent machine (docs/operations.md "Multi-GPU runs"): tools/rl_multi_pack.sh CUDA_BUILD
# /work/main/.device/multi here, then run with carry [".device/multi"], kind nvidia-h200-x8, timeout_s 600:
#   cd .device/multi && mkdir -p build && tar xzf pack.tgz -C build && bash src/tools/rl_h200_x8.sh $PWD/build $OUT
set -uo pipefail
BUILD=${1:?usage: rl_h200_x8.sh BUILD_DIR OUT [STEPS]}
OUT=${2:?usage: rl_h200_x8.sh BUILD_DIR OUT [STEPS]}
STEPS=${3:-20}
PARTS=${PARTS:-probe main colo trap nodes}
SRC=$(cd "$(dirname "$0")/.." && pwd)
EX="$SRC/docs/examples"
# shellcheck source=tools/rl_multi_lib.sh
. "$SRC/tools/rl_multi_lib.sh"
mlib_init
PORT=8080            # device_map_8gpu.yaml's service_url; GET /metrics at the end of a run

make_models qwen2_1.5b 64

write_config x8_ppo device_map_8gpu.yaml gae "$STEPS" 64 16 8 true
write_config x8_colo_ppo device_map_8gpu_colocated.yaml gae "$STEPS" 64 16 8 true
write_config node2_ppo device_map_2node.yaml gae 3 64 16 8 true
cp "$EX/topology_2node.yaml" "$EX/topology_2x4_nvlink.yaml" "$OUT/configs/"
check_config x8_ppo --gpus 8
check_config x8_colo_ppo --gpus 8
check_config node2_ppo --topology "$EX/topology_2node.yaml"

say "## Issue 26 on $(hostname) ($(date -u +%Y-%m-%dT%H:%MZ)), $("$TRAINER" --version 2>/dev/null | head -1)"
report_machine
say ""

if has probe; then
  step topo 30 nvidia-smi topo -m
  step check_local 60 "$TRAINER" --device-map "$EX/device_map_8gpu.yaml" --check
  p2p_probe "$OUT/p2p.json"
  comm_check commcheck_seed device_map_8gpu.yaml 5 268435456 2147483648
fi

if has main; then
  bg dmon_x8_ppo nvidia-smi dmon -s ut -d 1 -o T
  DMON_PID=$BG_PID
  step nvlink_before 30 nvidia-smi nvlink -gt d
  run_with_server x8_ppo cuda:4 "$PORT" 480 VERL_COMM_PROFILE=1 VERL_COMM_PROFILE_PATH="$OUT/comm_profile"
  step nvlink_after 30 nvidia-smi nvlink -gt d
  stop_bg "$DMON_PID"
fi

if has colo; then
  run_with_server x8_colo_ppo cuda:0 "$PORT" 480
fi

if has trap; then
  step trap_local 60 "$TRAINER" --device-map "$EX/device_map_8gpu_trap.yaml" --check
  step trap_planned 60 "$TRAINER" --device-map "$EX/device_map_8gpu_trap.yaml" --check \
    --topology "$EX/topology_2x4_nvlink.yaml"
  step trap_strict 60 "$TRAINER" --device-map "$EX/device_map_8gpu_trap.yaml" --check \
    --topology "$EX/topology_2x4_nvlink.yaml" --strict-topology
  step seed_planned 60 "$TRAINER" --device-map "$EX/device_map_8gpu.yaml" --check \
    --topology "$EX/topology_2x4_nvlink.yaml"
  comm_check commcheck_trap device_map_8gpu_trap.yaml 5 268435456 268435456
fi

# sim_node_launch NAME HOSTID CMD_ARGS...: mpirun -np 9 on this host, ranks 1-4 as node0 (GPUs 0-3),
# ranks 5-8 as node1 (GPUs 4-7; the map's node1:N is CUDA_VISIBLE_DEVICES' N); HOSTID 1: NCCL_HOSTID
# per node too, so NCCL treats the two as different hosts (network transport, over lo).
sim_node_launch() {
  local name=$1 hostid=$2
  shift 2
  # shellcheck disable=SC2016  # expanded by the ranks' shell
  local wrap='n=0; d=0,1,2,3; if [ "$OMPI_COMM_WORLD_RANK" -ge 5 ]; then n=1; d=4,5,6,7; fi
export VR_TRAINER_HOST=simnode$n CUDA_VISIBLE_DEVICES=$d NCCL_NVLS_ENABLE=0
if [ "$SIM_HOSTID" = 1 ]; then export NCCL_HOSTID=simnode$n NCCL_SOCKET_IFNAME=lo; fi
exec "$0" "$@"'
  step "$name" 300 env SIM_HOSTID="$hostid" mpirun -np 9 --oversubscribe --bind-to none \
    bash -c "$wrap" "$TRAINER" "$@" --topology "$EX/topology_2node.yaml"
}

if has nodes; then
  comm_cfg() { # a comm check of device_map_2node.yaml
    cp "$EX/device_map_2node.yaml" "$OUT/configs/"
    cat > "$OUT/configs/$1.yaml" <<EOF
trainer: {device_map: device_map_2node.yaml, total_training_steps: 3, comm_timeout_s: 120,
          comm_check_allreduce_bytes: 67108864, comm_check_sync_bytes: 268435456, metrics_file: $OUT/$1.metrics.jsonl}
EOF
  }
  comm_cfg node2_comm
  comm_cfg node2_comm_hostid
  sim_node_launch node2_comm 0 --config "$OUT/configs/node2_comm.yaml" --comm-check
  sim_node_launch node2_comm_hostid 1 --config "$OUT/configs/node2_comm_hostid.yaml" --comm-check
  start_server server_node2 verl_reward_shm 0 cuda:4 --lanes 8
  sim_node_launch node2_ppo 0 --config "$OUT/configs/node2_ppo.yaml"
  stop_bg "$SERVER_PID"
fi

[ "${DRY:-0}" = 1 ] && exit 0

report_calls
if has probe; then
  report_topology "Topology: nvidia-smi topo -m and the check's verdict on the seed's map" check_local
fi
if has main; then
  report_rl x8_ppo commcheck_seed "The seed's layout, PPO, $STEPS steps"
  say ""
  report dmon "$OUT/dmon_x8_ppo.log"
  say "NVLink counters: nvlink_before.log / nvlink_after.log (nvidia-smi nvlink -gt d)"
fi
if has main || has colo; then
  say ""
  report phases "seed layout=$OUT/x8_ppo.metrics.jsonl" "all colocated on 0-7=$OUT/x8_colo_ppo.metrics.jsonl"
fi
if has colo; then
  report smi "$OUT/smi_x8_colo.log"
fi
if has trap; then
  say ""
  say "### The trap: actor on 0,2,4,6"
  say '```'
  say "# against this machine:"
  say_cmd grep -E '^\[INFO\] topology|^warning: ' "$OUT/trap_local.log"
  say "# against topology_2x4_nvlink.yaml (two NVLink domains):"
  say_cmd grep -E '^\[INFO\] topology|^warning: actor' "$OUT/trap_planned.log"
  say "# --strict-topology: exit $(awk -F'\t' '$1 == "trap_strict" {print $2}' "$OUT/steps.tsv")"
  say '```'
  for c in commcheck_seed commcheck_trap; do
    say_cmd python3 -c 'import json, sys
m = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][1:]
v = [r["comm/actor/allreduce_busbw_gbps"] for r in m if "comm/actor/allreduce_busbw_gbps" in r]
print(f"| {sys.argv[2]}: actor all-reduce bus bandwidth (comm check, steps 2..N) | "
      f"{sum(v) / len(v):.1f} GB/s |" if v else f"| {sys.argv[2]} | no comm check metrics |")' \
      "$OUT/$c.metrics.jsonl" "$c"
  done
fi
if has nodes; then
  say ""
  say "### Simulated two nodes on one host"
  say '```'
  say_cmd resolved_block "$OUT/node2_comm.log"
  say '```'
  for n in node2_comm node2_comm_hostid node2_ppo; do
    say "| $n | exit $(awk -F'\t' -v n=$n '$1 == n {print $2}' "$OUT/steps.tsv") | $(wc -l < "$OUT/$n.metrics.jsonl" 2>/dev/null || echo 0) steps |"
  done
fi
exit 0
