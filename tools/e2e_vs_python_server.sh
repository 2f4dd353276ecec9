#!/usr/bin/env bash
# e2e_vs_python_server.sh: issue 10's side-by-side run on one GPU machine:
# verl-reward-server (CUDA, shm, driven by verl-reward-bench) against the Python HTTP
# reward server users run today (tools/peer/peer_reward_server.py), same weights, same
# requests. Builds the project (build-e2e/, -DVR_CUDA=ON) unless VR_E2E_BIN names a
# folder holding prebuilt verl-reward-server + verl-reward-bench (e.g. built on another
# machine and carried over). Results: $OUT (or ./e2e-out)/e2e.json + e2e.log; table last.
#   tools/e2e_vs_python_server.sh [--only roberta-base,llama-1b] [--duration 5]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${VR_E2E_BIN:-}
if [[ -z "$BIN" ]]; then
  cmake -S "$ROOT" -B "$ROOT/build-e2e" -DVR_CUDA=ON -DVR_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$ROOT/build-e2e" --target verl-reward-server verl-reward-bench -j"$(nproc)" >/dev/null
  BIN=$ROOT/build-e2e/bin
fi
for b in verl-reward-server verl-reward-bench; do
  [[ -x "$BIN/$b" ]] || { echo "e2e: $BIN/$b not found" >&2; exit 1; }
done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
PYTHONUNBUFFERED=1 exec python3 "$ROOT/tools/e2e/e2e_vs_python_server.py" --bin-dir "$BIN" "$@"
