#!/usr/bin/env bash
# bench_vs_transformers.sh: our CUDA runtime vs transformers (eager, SDPA, bf16,
# right-padded) on random-weight roberta-base / Llama-3.2-1B / Llama-3.1-8B
# shaped models, same weights and sequences, one GPU, one run.
#
#   tools/bench_vs_transformers.sh [--only roberta-base,llama-1b,llama-8b] [--workloads NAME,...] [--seed N]
#       [--server LABEL=BIN ... --shm-client BIN --service-max-batch-tokens N,...]  (bench_vs_transformers.py)
#
# Needs python3 with torch + transformers and a CUDA GPU. Builds the runner
# (build-bench/, -DVR_CUDA=ON) unless VR_BENCH_RUNNER names an existing
# cuda_bench_runner binary (e.g. one built elsewhere and copied over).
# Results: $OUT (or ./bench-out)/bench.json + bench.log; a table is printed last.
# Models are written under VR_BENCH_MODELS (default /tmp/vr-bench-models, about
# 20 GB for the 8B shape) and removed after each shape.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUTDIR=${OUT:-$ROOT/bench-out}
MODELS=${VR_BENCH_MODELS:-/tmp/vr-bench-models}
RUNNER=${VR_BENCH_RUNNER:-}
if [[ -z "$RUNNER" ]]; then
  cmake -S "$ROOT" -B "$ROOT/build-bench" -DVR_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$ROOT/build-bench" --target cuda_bench_runner -j"$(nproc)" >/dev/null
  RUNNER=$ROOT/build-bench/tests/cuda_bench_runner
fi
[[ -x "$RUNNER" ]] || { echo "bench_vs_transformers: runner $RUNNER not found" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader || true
mkdir -p "$OUTDIR"
PYTHONUNBUFFERED=1 exec python3 "$ROOT/tools/bench_vs_transformers.py" --runner "$RUNNER" \
  --models-dir "$MODELS" --out "$OUTDIR" "$@"
