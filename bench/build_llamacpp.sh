#!/usr/bin/env bash
# Native llama.cpp for the benchmarks: llama-bench, llama-server and llama-quantize built with -DGGML_NATIVE=ON
# (every ISA extension of this CPU) from the llama.cpp source that the pinned llama-cpp-python release vendors —
# its source distribution on PyPI carries the whole tree — so the peer is the same release as before, measured
# without the Python binding's per-token overhead. Built once into build/llama.cpp-native/ and reused while the
# release and this CPU's flags are the same (a stamp file records both). Prints the directory of the programs.
#
#   bench/build_llamacpp.sh            build if needed, print e.g. /repo/build/llama.cpp-native/bin
# Environment: LLAMA_CPP_PYTHON_VERSION (default: the pin in bench/requirements.txt), JOBS (default nproc).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PIN="$(sed -n 's/^llama-cpp-python\(\[[a-z]*\]\)\{0,1\}==\([0-9.]*\).*/\2/p' "$ROOT/bench/requirements.txt")"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-$PIN}"
[[ -n "$VERSION" ]] || { echo "build_llamacpp.sh: no llama-cpp-python pin in bench/requirements.txt" >&2; exit 1; }
OUT="$ROOT/build/llama.cpp-native"
FLAGS="$(grep -m1 '^flags' /proc/cpuinfo | md5sum | cut -c1-16)"
WANT="llama-cpp-python==$VERSION GGML_NATIVE=ON cpu-flags=$FLAGS"
TOOLS=(llama-bench llama-server llama-quantize)

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
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=ON >&2
ninja -C "$OUT/cmake" -j"${JOBS:-$(nproc)}" "${TOOLS[@]}" >&2
mkdir -p "$OUT/bin"
for t in "${TOOLS[@]}"; do cp "$OUT/cmake/bin/$t" "$OUT/bin/"; done
echo "$WANT" >"$OUT/stamp"
echo "$OUT/bin"
