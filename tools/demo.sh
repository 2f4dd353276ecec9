#!/usr/bin/env bash
# tools/demo.sh: the README's main command. Installs and builds like tools/test.sh,
# starts verl-reward-server on the bundled demo model (tests/fixtures) on a fresh
# shm name (CUDA when a GPU is visible, else CPU), drives it for a few seconds
# through shared memory (and HTTP, for comparison) with verl-reward-bench, prints
# the report and stops the server cleanly (SIGTERM; exit 0, segment removed).
# Env: VR_SKIP_INSTALL=1, VR_JOBS, VR_BUILD_DIR (default build), VR_DEMO_MODEL (a model
# directory), VR_DEMO_DURATION (seconds per run).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=${VR_JOBS:-$(nproc)}
source "$ROOT/tools/deps.sh"
[ "${VR_SKIP_INSTALL:-0}" = 1 ] || vr_install_deps
echo "== build"
BUILD="$ROOT/${VR_BUILD_DIR:-build}"
cmake -S "$ROOT" -B "$BUILD" >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target verl-reward-server verl-reward-bench >/dev/null
BIN="$BUILD/bin"
for b in verl-reward-server verl-reward-bench; do
  [ -x "$BIN/$b" ] || { echo "demo: build/bin/$b was not built" >&2; exit 1; }
done

MODEL=${VR_DEMO_MODEL:-$ROOT/tests/fixtures/models/llama_gqa}
DURATION=${VR_DEMO_DURATION:-3}
if vr_gpu_visible && grep -q '^VR_CUDA:BOOL=ON' "$BUILD/CMakeCache.txt"; then DEVICE=cuda; else DEVICE=cpu; fi
NAME="verl_reward_demo_$$"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
RUN=$(mktemp -d /tmp/verl-reward-demo.XXXXXX)
LOG="$RUN/server.log"
SERVER_PID=

cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then kill -KILL "$SERVER_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT

echo "== start: verl-reward-server --model ${MODEL#$ROOT/} --device $DEVICE --shm-name $NAME --port $PORT"
"$BIN/verl-reward-server" --model "$MODEL" --device "$DEVICE" --shm-name "$NAME" --port "$PORT" \
  --pid-file "$RUN/server.pid" >"$LOG" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 600); do
  grep -q '] ready: ' "$LOG" && break
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    cat "$LOG" >&2
    echo "demo: the server exited during start-up" >&2
    exit 1
  fi
  sleep 0.1
done
grep -q '] ready: ' "$LOG" || { cat "$LOG" >&2; echo "demo: server not ready after 60 s" >&2; exit 1; }
grep '] ready: ' "$LOG" | sed 's/^[^]]*] /server /'
MAXLEN=$(sed -n 's/.* max_seq_len=\([0-9]*\) .*/\1/p' "$LOG" | tail -1)
HI=$(( MAXLEN < 128 ? MAXLEN : 128 ))
LO=$(( HI / 4 > 0 ? HI / 4 : 1 ))

echo "== load: ${DURATION}s per run, shared memory and HTTP, 1 and 4 clients, 4 sequences of $LO-$HI tokens per request"
"$BIN/verl-reward-bench" --shm-name "$NAME" --url "127.0.0.1:$PORT" --transport shm,http \
  --duration "$DURATION" --warmup 1 --concurrency 1,4 --batch 4 --lengths "uniform:$LO-$HI" \
  --json "$RUN/bench.json" --log-level warn

echo "== server metrics"
python3 - "$PORT" <<'EOF'
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
for line in text.splitlines():
    if line.startswith(("verl_reward_requests_total", "verl_reward_sequences_total", "verl_reward_batches_total",
                        "verl_reward_batch_sequences_sum", "verl_reward_lanes_in_use")):
        print("  " + line)
EOF

echo "== stop (SIGTERM)"
kill -TERM "$SERVER_PID"
rc=0
wait "$SERVER_PID" || rc=$?
SERVER_PID=
tail -n 3 "$LOG" | sed 's/^[^]]*] /server /'
# a clean stop leaves nothing listening and no socket file (/run/verl-reward or /run/user/UID)
if [ "$rc" != 0 ] || grep -Eq "verl-reward/$NAME(\.sock)?\$" /proc/net/unix ||
   [ -e "/run/verl-reward/$NAME.sock" ] || [ -e "/run/user/$(id -u)/verl-reward/$NAME.sock" ]; then
  echo "demo: the server did not stop cleanly (exit $rc)" >&2
  exit 1
fi
echo "== done: report JSON in $RUN/bench.json, server log in $LOG"
