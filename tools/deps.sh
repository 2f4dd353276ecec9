# tools/deps.sh: sourced by tools/test.sh and tools/demo.sh.
# vr_install_deps: installs the Debian packages the build and tests need, skipping
# what is present; as root (or with sudo) it runs apt-get, otherwise it prints the
# exact command and fails.
# clang: the libFuzzer harness test_shm_fuzz_desc; python3-pip/-setuptools/-wheel: python_install;
# python3-numpy: python_server's numpy-input test (torch stays optional: not installed here);
# python3-msgpack: the client's msgpack package codec (python_numpy; the pure codec is the fallback);
# libyaml-dev, libopenmpi-dev, openmpi-bin: verl-trainer (device maps, processes, its tests);
# librsvg2-bin: rsvg-convert, for verl-reward-bench --plot FILE.png (and its test);
# systemd (systemd-analyze), python3-yaml: tests/deploy (the unit file, the Kubernetes manifest);
# libpcre2-dev, libutf8proc-dev, xz-utils: tokenizer/ (regexes, normalization; fixtures are .xz).
VR_DEB_PACKAGES=(cmake make gcc pkg-config python3 libevent-dev libmsgpack-dev
                 libcjson-dev libyaml-dev libopenmpi-dev openmpi-bin libcmocka-dev valgrind clang procps
                 python3-pip python3-setuptools python3-wheel python3-numpy python3-msgpack librsvg2-bin systemd python3-yaml
                 libpcre2-dev libutf8proc-dev xz-utils)
# python3-jinja2: tests/jinja's differential test renders random templates with real jinja2
VR_DEB_PACKAGES+=(python3-jinja2)
# shellcheck: rl_multi_scripts lints tools/rl_h200_x2.sh, rl_h200_x8.sh and rl_multi_lib.sh
VR_DEB_PACKAGES+=(shellcheck)

vr_install_deps() {
  local missing=() p
  for p in "${VR_DEB_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "== dependencies present"
    return 0
  fi
  echo "== installing: ${missing[*]}"
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
      sudo=(sudo)
    else
      echo "missing packages; run as root:" >&2
      echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
      return 1
    fi
  fi
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# vr_gpu_visible: true when a CUDA GPU can be used (nvidia-smi lists one).
vr_gpu_visible() {
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}
