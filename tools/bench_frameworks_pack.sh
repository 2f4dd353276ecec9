#!/usr/bin/env bash
# bench_frameworks_pack.sh BUILD DEST: what tools/bench_frameworks_device.sh needs on the GPU
# machine, under DEST (for `run`: DEST inside the checkout it sends, carried):
#   DEST/src       this checkout's HEAD (git archive): tools/, tests/python/ (the verl stand-ins), python/
#   DEST/pack.tgz  bin/verl-reward-server and lib/ (libverl_reward_client.so + the shared libraries the
#                  server links that a bare machine may lack: libevent, msgpack-c, cJSON, pcre2, utf8proc, gomp)
# BUILD: a build folder configured with -DVR_CUDA=ON holding verl-reward-server and verl_reward_client.
set -eu
B=${1:?usage: bench_frameworks_pack.sh BUILD DEST}
D=${2:?usage: bench_frameworks_pack.sh BUILD DEST}
R=$(git rev-parse --show-toplevel)
rm -rf "$D/src" "$D/pack" && mkdir -p "$D/src" "$D/pack/bin" "$D/pack/lib"
git -C "$R" archive HEAD | tar x -C "$D/src"
cp "$B/bin/verl-reward-server" "$D/pack/bin/"
cp -P "$B"/lib/libverl_reward_client.so* "$D/pack/lib/"
ldd "$B/bin/verl-reward-server" | awk '/libevent|libmsgpackc|libcjson|libpcre2|libutf8proc|libgomp/ {print $3}' |
  while read -r l; do cp -L "$l" "$D/pack/lib/"; done
tar czf "$D/pack.tgz" -C "$D/pack" bin lib && rm -rf "$D/pack"
echo "$D/src and $D/pack.tgz ($(du -sh "$D/pack.tgz" | cut -f1)); on the GPU machine:"
echo "  cd $D/src && VR_CUDA_PACK=\$PWD/../pack.tgz PYTHONPATH=\$PWD/python OUT=\$OUT bash tools/bench_frameworks_device.sh"
