#!/usr/bin/env bash
# Side-by-side encode throughput, one thread: tessera vs HF tokenizers.
# usage: bench/tokenizer_compare.sh [TOKENIZER_DIR_OR_GGUF] [BUILD_DIR] [PYTHON]
# Defaults: ../shared/tokenizers/qwen3, build, venv/bin/python (see tools/requirements.txt).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOK="${1:-$ROOT/../shared/tokenizers/qwen3}"
BUILD="${2:-$ROOT/build}"
PY="${3:-}"
if [[ -z "$PY" ]]; then
  PY="$ROOT/venv/bin/python"
fi
CORPUS="${TESSERA_BENCH_CORPUS:-$BUILD/tokenizer_corpus.jsonl}"
PASSES="${PASSES:-5}"
[[ -f "$CORPUS" ]] || "$PY" "$ROOT/bench/tokenizer_corpus.py" "$CORPUS"
[[ -x "$BUILD/bench_tokenizer" ]] || { echo "build bench_tokenizer first: ninja -C $BUILD bench_tokenizer" >&2; exit 1; }
ours=$(taskset -c 0 "$BUILD/bench_tokenizer" "$TOK" "$CORPUS" "$PASSES" 2>/dev/null || "$BUILD/bench_tokenizer" "$TOK" "$CORPUS" "$PASSES")
theirs=$(taskset -c 0 "$PY" "$ROOT/bench/tokenizer_hf.py" "$TOK" "$CORPUS" "$PASSES" 2>/dev/null || "$PY" "$ROOT/bench/tokenizer_hf.py" "$TOK" "$CORPUS" "$PASSES")
echo "$ours"
echo "$theirs"
a=$(echo "$ours" | sed -E 's/.* ([0-9.]+) MB\/s.*/\1/')
b=$(echo "$theirs" | sed -E 's/.* ([0-9.]+) MB\/s.*/\1/')
ta=$(echo "$ours" | sed -E 's/.* ([0-9]+) tokens,.*/\1/')
tb=$(echo "$theirs" | sed -E 's/.* ([0-9]+) tokens,.*/\1/')
[[ "$ta" == "$tb" ]] || echo "WARNING: token counts differ ($ta vs $tb)"
awk -v a="$a" -v b="$b" 'BEGIN { printf "ratio tessera/hf: %.2fx\n", a / b }'
