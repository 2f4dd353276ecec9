#!/usr/bin/env bash
# tools/demo.sh: the README's main command. Installs and builds like tools/test.sh,
# starts verl-reward-server on the bundled demo model (tests/fixtures) on a fresh
# shm name (CUDA when a GPU is visible, else CPU), drives it for a few seconds
# through shared memory with verl-reward-bench, prints the report and stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
source "$ROOT/tools/deps.sh"
[ "${VR_SKIP_INSTALL:-0}" = 1 ] || vr_install_deps
cmake -S "$ROOT" -B "$ROOT/build" >/dev/null
cmake --build "$ROOT/build" -j "$(nproc)"
for b in verl-reward-server verl-reward-bench; do
  if [ ! -x "$ROOT/build/bin/$b" ]; then
    echo "demo: build/bin/$b was not built (its component has not landed yet)" >&2
    exit 1
  fi
done
echo "demo: see README" # completed by the server and load-tester issues
