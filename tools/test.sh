#!/usr/bin/env bash
# tools/test.sh: the project's test command (README; CI runs exactly this).
#   1. installs missing build/test dependencies (Debian 12; idempotent),
#   2. configures and builds into build/, runs ctest (label gpu only when a GPU is visible),
#   3. builds into build-asan/ with ASan + UBSan and runs the suite again.
# Exit code is the verdict. Env: VR_JOBS (parallel jobs), VR_SKIP_ASAN=1, VR_SKIP_INSTALL=1.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=${VR_JOBS:-$(nproc)}

# shellcheck source=tools/deps.sh
source "$ROOT/tools/deps.sh"
[ "${VR_SKIP_INSTALL:-0}" = 1 ] || vr_install_deps

if vr_gpu_visible; then
  CTEST_FILTER=()
  echo "== GPU visible: running every test including label gpu"
else
  CTEST_FILTER=(-LE gpu)
  echo "== no GPU visible: skipping tests labelled gpu"
fi

run_suite() {
  local dir=$1; shift
  echo "== configure $dir $*"
  cmake -S "$ROOT" -B "$ROOT/$dir" "$@"
  echo "== build $dir"
  cmake --build "$ROOT/$dir" -j "$JOBS"
  echo "== ctest $dir"
  (cd "$ROOT/$dir" && ctest --output-on-failure -j "$JOBS" "${CTEST_FILTER[@]}")
}

run_suite build
if [ "${VR_SKIP_ASAN:-0}" != 1 ]; then
  # The sanitizer pass is CPU-only: ASan and the CUDA runtime do not mix well.
  run_suite build-asan -DVR_SANITIZE=ON -DVR_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug
fi
echo "== all tests passed"
