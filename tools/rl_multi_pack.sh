#!/usr/bin/env bash
# rl_multi_pack.sh BUILD DEST: what tools/rl_h200_x2.sh and rl_h200_x8.sh need on a lent GPU
# machine, under DEST (inside the checkout `run` sends, e.g. /work/main/.device/multi; carry it):
#   DEST/src       this checkout's HEAD (git archive): the scripts, docs/examples, the tokenizer fixture
#   DEST/pack.tgz  bin/ (verl-trainer, verl-reward-server, verl-reward-bench), tests/test_train_dp
#                  (the per-tensor data-parallel check on two GPUs) and lib/ (the shared
#                  libraries they link that a bare machine may lack; Open MPI's in lib/mpi, used only
#                  where the machine has no libmpi.so.40: tools/rl_multi_lib.sh sets LD_LIBRARY_PATH)
# BUILD: a build folder configured with -DVR_CUDA=ON (CUDA training and rollout engines, NCCL).
set -eu
B=${1:?usage: rl_multi_pack.sh BUILD DEST}
D=${2:?usage: rl_multi_pack.sh BUILD DEST}
R=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
rm -rf "$D/src" "$D/pack" && mkdir -p "$D/src" "$D/pack/bin" "$D/pack/lib/mpi"
git -C "$R" archive HEAD | tar x -C "$D/src"
for b in verl-trainer verl-reward-server verl-reward-bench; do cp "$B/bin/$b" "$D/pack/bin/"; done
mkdir -p "$D/pack/tests" && cp "$B/tests/test_train_dp" "$D/pack/tests/"  # x2's per-tensor DP check
for b in "$D"/pack/bin/* "$D"/pack/tests/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    case $name in
      libmpi.so*|libopen-rte.so*|libopen-pal.so*|libhwloc.so*|libevent_core*|libevent_pthreads*) cp -L "$path" "$D/pack/lib/mpi/" ;;
      libyaml*|libgomp*|libpcre2*|libutf8proc*|libcjson*|libevent-*|libmsgpackc*|libcmocka*) cp -L "$path" "$D/pack/lib/" ;;
    esac
  done
# libevent_core / _pthreads serve the server and the bench too (outside Open MPI)
cp "$D"/pack/lib/mpi/libevent_* "$D/pack/lib/" 2>/dev/null || true
tar czf "$D/pack.tgz" -C "$D/pack" bin lib tests && rm -rf "$D/pack"
echo "$D/src and $D/pack.tgz ($(du -sh "$D/pack.tgz" | cut -f1)); on the GPU machine, from DEST:"
echo "  mkdir -p build && tar xzf pack.tgz -C build && bash src/tools/rl_h200_x2.sh \$PWD/build \$OUT"
