#!/usr/bin/env bash
# End-to-end checks on a GPU through the XLA CUDA PJRT plugin, for a machine that has one (see the
# `device` tool in the developers' guide). Takes under 5 minutes on a 16-core machine:
#   1. installs the CUDA plugin (jax-cuda13-pjrt and the NVIDIA runtime wheels it loads) into .venv,
#      unless TESSERA_XLA_CUDA_PLUGIN already points at one, or PLUGIN_WHEELS=DIR holds wheels to install
#      offline;
#   2. builds build/tessera if it is missing;
#   3. lists devices, compares `forward` logits on cuda with the Transformers goldens of the tiny models,
#      and compares greedy SmolLM2 text on cuda with the native CPU backend.
# Prints one PASS/FAIL line per check and exits non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
DEVICE="${DEVICE:-cuda}"
PY=.venv/bin/python
[[ -x $PY ]] || python3 -m venv .venv
if [[ "$DEVICE" == cuda && -z "${TESSERA_XLA_CUDA_PLUGIN:-}" ]]; then
  if [[ -n "${PLUGIN_WHEELS:-}" ]]; then
    .venv/bin/pip install -q --no-index --find-links "$PLUGIN_WHEELS" jax-cuda13-pjrt || exit 1
  else
    .venv/bin/pip install -q "jax-cuda13-pjrt==0.12.0.1" "jax-cuda13-plugin[with-cuda]==0.12.0.1" 2>/dev/null \
      || .venv/bin/pip install -q "jax-cuda13-pjrt==0.12.0.1" || exit 1
  fi
fi
if [[ ! -x build/tessera ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && ninja -C build tessera_cli >/dev/null || exit 1
fi
T=build/tessera
fails=0
check() {  # name, command...
  local name=$1; shift
  if out=$("$@" 2>&1); then echo "PASS $name"; else echo "FAIL $name"; echo "$out" | tail -5; fails=$((fails + 1)); fi
}
check "devices lists $DEVICE" bash -c "$T devices --json | python3 -c 'import json,sys; d=[x for x in json.load(sys.stdin)[\"devices\"] if x[\"device\"]==\"$DEVICE\"]; sys.exit(0 if d and d[0][\"count\"]>0 else 1)'"
for m in qwen3_tied qwen3_untied llama_gqa llama_bias; do
  check "forward $m on $DEVICE within 1e-4 of Transformers" python3 - "$T" "$DEVICE" "$m" <<'PY'
import json, subprocess, sys
tessera, device, model = sys.argv[1:]
g = json.load(open(f"tests/fixtures/models/{model}/golden.json"))
for case in g["forward"]:
    ids = ",".join(map(str, case["input_ids"]))
    out = subprocess.run([tessera, "forward", f"tests/fixtures/models/{model}", "--device", device, "--dtype", "float32",
                          "--json", "--input-ids", ids], capture_output=True, text=True, check=True).stdout
    got = json.loads(out)["logits"]
    worst = max(abs(a - b) for ra, rb in zip(got, case["logits"]) for a, b in zip(ra, rb))
    print(f"{model} len {len(case['input_ids'])}: max abs {worst:.2e}")
    if worst > 1e-4: sys.exit(1)
PY
done
check "SmolLM2 greedy text on $DEVICE equals native cpu" bash -c "
  a=\$($T generate --device cpu --dtype float32 --max-new-tokens 32 --json --prompt 'The capital of France is' | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"ids\"])')
  b=\$($T generate --device $DEVICE --dtype float32 --max-new-tokens 32 --json --prompt 'The capital of France is' | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"ids\"])')
  [[ \"\$a\" == \"\$b\" ]]"
check "SmolLM2 bf16 decode speed on $DEVICE (report)" bash -c "$T generate --device $DEVICE --max-new-tokens 128 --json --prompt 'Tell me a story.' | python3 -c 'import json,sys; j=json.load(sys.stdin); print(\"decode tok/s\", j[\"decode_tokens_per_s\"])'"
echo "$fails check(s) failed"
exit $((fails > 0))
