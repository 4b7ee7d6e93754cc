#!/usr/bin/env bash
# Side-by-side CPU benchmark, one run: Tessera (`tessera bench --json`), native llama.cpp (`llama-bench`, built
# with GGML_NATIVE=ON by bench/build_llamacpp.sh from the source the pinned llama-cpp-python release vendors; not
# the Python binding, whose per-token overhead would flatter Tessera) and Transformers + PyTorch (eager; static
# cache + torch.compile), same weights, same token counts, as many threads as cores. Medians of repeated runs;
# ratios are Tessera ÷ the other engine. The table records the CPU model and its ISA extensions.
# Writes a Markdown table to stdout and to bench/results.md (raw JSON lines next to it in build/).
#
#   bench/compare.sh                  full comparison (SmolLM2-135M and a Qwen3-0.6B-shaped random model,
#                                     bf16 and f32, and quantised: SmolLM2's own Q4_1 file, the Qwen3 shape
#                                     in Q8_0, Q4_0 and Q4_K_M (the last written by llama.cpp's quantiser);
#                                     prompt 512, 128 new tokens, 3 repeats). Quantised rows: Tessera and
#                                     llama.cpp read the same file (Tessera with no --dtype keeps its blocks);
#                                     Transformers, which dequantises GGUF to float, is left out of them.
#   bench/compare.sh --quick          CI: tiny fixture model, few tokens, Tessera only (keeps the harness working)
# Options: --repeats N  --threads N  --prompt-tokens N  --new-tokens N  --no-compile  --out FILE
#          --models smollm2,qwen3,qwen3_4b,qwen3_moe,gpt_oss  --dtypes bfloat16,float32,q4_1,q8_0,q4_0,q4_k_m,mxfp4 (a
#          quantised dtype runs on the models that have it: q4_1 on smollm2, q8_0, q4_0 and q4_k_m on qwen3,
#          qwen3_4b and qwen3_moe (Qwen3-30B-A3B's shape with 4 layers, make_bench_models.py --only
#          qwen3-moe-gguf: q8_0 and q4_k_m; gpt_oss: gpt-oss-20b's shape with 4 layers, --only gpt-oss-gguf,
#          dtype mxfp4); qwen3_4b, qwen3_moe and gpt_oss have quantised files only)  --no-make (use the files already in BENCH_MODELS, e.g. from
#          make_bench_models.py --only qwen3-gguf / qwen3-4b-gguf, which need no torch)  --no-transformers
#          (Tessera and llama.cpp only: no torch needed, PY may be any python with gguf)
# Environment: TESSERA (the binary; default build/tessera), BENCH_RESULTS (raw JSON lines; build/bench-results),
#              COMPILE_TIMEOUT (s, default 900), COMPILE_MODELS (which models get the torch.compile run), PY (python with torch, transformers,
#              llama-cpp-python, gguf; default venv-bench/bin/python, made by: python3 -m venv venv-bench &&
#              venv-bench/bin/pip install -r bench/requirements.txt), BENCH_MODELS (build/bench-models).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TESSERA="${TESSERA:-$ROOT/build/tessera}"
PY="${PY:-$ROOT/venv-bench/bin/python}"
MODELS="${BENCH_MODELS:-$ROOT/build/bench-models}"
QUICK=0 REPEATS=3 THREADS="$(nproc)" PROMPT=512 NEW=128 COMPILE=1 OUT="$ROOT/bench/results.md" MAKE=1 HF=1
WHICH="smollm2,qwen3" DTYPES="bfloat16,float32,q4_1,q8_0,q4_0,q4_k_m"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --repeats) REPEATS="$2"; shift ;;
    --threads) THREADS="$2"; shift ;;
    --prompt-tokens) PROMPT="$2"; shift ;;
    --new-tokens) NEW="$2"; shift ;;
    --no-compile) COMPILE=0 ;;
    --no-make) MAKE=0 ;;
    --no-transformers) HF=0 ;;
    --models) WHICH="$2"; shift ;;
    --dtypes) DTYPES="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    *) echo "compare.sh: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
  shift
done
[[ -x "$TESSERA" ]] || { echo "compare.sh: $TESSERA not built (cmake --build build, or set TESSERA=)" >&2; exit 1; }

TESSERA_FAILED=0
RESULTS="${BENCH_RESULTS:-$ROOT/build/bench-results}"
mkdir -p "$RESULTS"
JSONL="$RESULTS/$(date -u +%Y%m%dT%H%M%SZ).jsonl"
: >"$JSONL"

# CPU-bound jobs on the machine right now: the fewest runnable tasks seen in ten samples over a second, less
# the sampler itself (between engine runs nothing of the benchmark is running; a job that holds a core is
# runnable in every sample, short blips are not). The load average cannot tell this: it includes the
# benchmark's own threads and decays over minutes.
others_running() {
  local fewest=1000 n
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    n="$(awk '/^procs_running/ {print $2}' /proc/stat)"
    (( n < fewest )) && fewest=$n
    sleep 0.1
  done
  echo $((fewest > 0 ? fewest - 1 : 0))
}

# run LABEL MODEL_KEY DTYPE ENGINE CMD...: one engine's JSON line, tagged, with the load average around it and
# the other jobs running just before it.
run() {
  local model_key="$1" dtype="$2" engine="$3"; shift 3
  local load_before load_after line others
  others="$(others_running)"
  load_before="$(cut -d' ' -f1 /proc/loadavg)"
  echo "compare.sh: $model_key $dtype $engine ..." >&2
  if line="$("$@" 2>"$RESULTS/last.err" | tail -n 1)" && [[ "$line" == "{"* ]]; then
    load_after="$(cut -d' ' -f1 /proc/loadavg)"
    printf '%s\n' "$line" | "$PYJSON" -c 'import json,sys
j=json.loads(sys.stdin.read()); j.update(model_key=sys.argv[1], dtype=sys.argv[2], engine=sys.argv[3],
load_before=float(sys.argv[4]), load_after=float(sys.argv[5]), others_before=int(sys.argv[6])); print(json.dumps(j))' \
      "$model_key" "$dtype" "$engine" "$load_before" "$load_after" "$others" >>"$JSONL"
  else
    local why
    why="$(grep -v '^\s*$' "$RESULTS/last.err" | tail -n 1 | cut -c1-200)"
    echo "compare.sh: $engine failed on $model_key $dtype: $why" >&2
    [[ $engine != tessera ]] || TESSERA_FAILED=1  # other engines' failures are reported in the table only
    "$PYJSON" -c 'import json,sys; print(json.dumps(dict(model_key=sys.argv[1], dtype=sys.argv[2],
engine=sys.argv[3], error=sys.argv[4])))' "$model_key" "$dtype" "$engine" "${why:-no output}" >>"$JSONL"
  fi
}

if [[ $QUICK == 1 ]]; then
  PYJSON="$(command -v python3)"
  run qwen3_tied float32 tessera "$TESSERA" bench "$ROOT/tests/fixtures/models/qwen3_tied" --quick --json \
    --threads "$THREADS"
else
  PYJSON="$PY"
  LLAMA_BIN="${LLAMA_BIN:-$("$ROOT/bench/build_llamacpp.sh")}"
  [[ $MAKE == 0 ]] || "$PY" "$ROOT/tools/make_bench_models.py" --out "$MODELS" >&2
  SMOLLM2_GGUF="$("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import make_bench_models as m
print(m.default_smollm2_gguf())' "$ROOT/tools")"
  cd "$ROOT/bench"  # the Python engines import bench_common
  for key in ${WHICH//,/ }; do
    for dtype in ${DTYPES//,/ }; do
      common=(--threads "$THREADS" --prompt-tokens "$PROMPT" --new-tokens "$NEW" --repeats "$REPEATS")
      if [[ $dtype == q* || $dtype == mxfp4 ]]; then  # quantised: the same file for both engines, Transformers left out
        if [[ $key == smollm2 && $dtype == q4_1 ]]; then gguf="$SMOLLM2_GGUF"
        elif [[ $key == qwen3 && $dtype != q4_1 ]]; then gguf="$MODELS/qwen3-0.6b-random-$dtype.gguf"
        elif [[ $key == qwen3_4b && $dtype != q4_1 ]]; then gguf="$MODELS/qwen3-4b-random-$dtype.gguf"
        elif [[ $key == qwen3_moe && $dtype != q4_1 ]]; then gguf="$MODELS/qwen3-30b-a3b-4l-random-$dtype.gguf"
        elif [[ $key == gpt_oss && $dtype == mxfp4 ]]; then gguf="$MODELS/gpt-oss-20b-4l-random-mxfp4.gguf"
        else continue; fi
        [[ -f $gguf ]] || { echo "compare.sh: $gguf missing, $key $dtype skipped" >&2; continue; }
        run "$key" "$dtype" tessera "$TESSERA" bench "$gguf" --json "${common[@]}"
        run "$key" "$dtype" llama.cpp "$PY" bench_llamacpp_native.py "$gguf" --bin "$LLAMA_BIN" --dtype "$dtype" \
          "${common[@]}"
        continue
      fi
      [[ $key != qwen3_4b && $key != qwen3_moe && $key != gpt_oss ]] || continue  # quantised files only
      short="$([[ $dtype == bfloat16 ]] && echo bf16 || echo f32)"
      if [[ $key == smollm2 ]]; then
        ours=("$MODELS/smollm2-135m-$short.gguf"); gguf="$MODELS/smollm2-135m-$short.gguf"
        hf=("$MODELS" --gguf-file "smollm2-135m-$short.gguf")
      else
        ours=("$MODELS/qwen3-0.6b-random"); gguf="$MODELS/qwen3-0.6b-random-$short.gguf"
        hf=("$MODELS/qwen3-0.6b-random")
        [[ -d ${ours[0]} ]] || ours=("$gguf")  # GGUF-only models (--only qwen3-gguf): both engines read the file
      fi
      run "$key" "$dtype" tessera "$TESSERA" bench "${ours[@]}" --dtype "$dtype" --json "${common[@]}"
      run "$key" "$dtype" llama.cpp "$PY" bench_llamacpp_native.py "$gguf" --bin "$LLAMA_BIN" --dtype "$dtype" \
        "${common[@]}"
      [[ $HF == 1 ]] || continue
      run "$key" "$dtype" transformers-eager "$PY" bench_hf.py "${hf[@]}" --dtype "$dtype" --mode eager "${common[@]}"
      if [[ $COMPILE == 1 && ",${COMPILE_MODELS:-smollm2,qwen3}," == *",$key,"* ]]; then
        run "$key" "$dtype" transformers-compile timeout "${COMPILE_TIMEOUT:-900}" "$PY" bench_hf.py "${hf[@]}" --dtype "$dtype" \
          --mode compile "${common[@]}"
      fi
    done
  done
fi

"$PYJSON" "$ROOT/bench/compare_table.py" "$JSONL" --tessera "$TESSERA" --py "$PY" --quick "$QUICK" | tee "$OUT"
echo "compare.sh: raw results in $JSONL; table in $OUT" >&2
exit "$TESSERA_FAILED"
