#!/usr/bin/env bash
# Mistral's sliding window: is the full-length static cache with masking slow where a ring buffer would not
# be? (issue 16). Models from tools/make_bench_models.py --only mistral (the same random weights, window 256
# and none). Alternated rounds of `tessera bench --json`, medians:
#   window     the sliding model, prompt P > window: a full-length cache, keys beyond the window masked (the
#              kernel reads only the window's keys: kernels_attention.cpp starts each row at its window)
#   full       the same weights without a window and the same prompt: what masking saves
#   ring       the model without a window and a prompt of the window's length: attention over `window` keys
#              in a cache of about that length, which is what a ring buffer of the window's size would read
# Usage: [THREADS=N] bench/sliding_window.sh [TESSERA] [ROUNDS] [PROMPT] [NEW]   (defaults: build/tessera 3 2048 64)
set -euo pipefail
BIN=${1:-build/tessera}
ROUNDS=${2:-3}
PROMPT=${3:-2048}
NEW=${4:-64}
MODELS=${MODELS:-build/bench-models}
WINDOW=256
EXTRA=()
[[ -n ${THREADS:-} ]] && EXTRA=(--threads "$THREADS")
for d in "$MODELS/mistral-sw$WINDOW" "$MODELS/mistral-swnone"; do
  [[ -f $d/config.json ]] || { echo "bench/sliding_window.sh: no $d (tools/make_bench_models.py --only mistral)" >&2; exit 2; }
done
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  "$BIN" bench "$MODELS/mistral-sw$WINDOW" --prompt-tokens "$PROMPT" --new-tokens "$NEW" --repeats 1 "${EXTRA[@]}" --json > "$OUT/window-$r.json"
  "$BIN" bench "$MODELS/mistral-swnone" --prompt-tokens "$PROMPT" --new-tokens "$NEW" --repeats 1 "${EXTRA[@]}" --json > "$OUT/full-$r.json"
  "$BIN" bench "$MODELS/mistral-swnone" --prompt-tokens "$WINDOW" --new-tokens "$NEW" --repeats 1 "${EXTRA[@]}" --json > "$OUT/ring-$r.json"
done
python3 - "$OUT" "$ROUNDS" "$PROMPT" "$NEW" "$WINDOW" <<'PY'
import json, statistics, sys
out, rounds, prompt, new, window = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
rows = {}
for side in ("window", "full", "ring"):
    runs = [json.load(open(f"{out}/{side}-{r}.json")) for r in range(1, rounds + 1)]
    rows[side] = {k: statistics.median(x[k] for x in runs) for k in ("prefill_tokens_per_s", "decode_tokens_per_s")}
    rows[side]["decode_all"] = [round(x["decode_tokens_per_s"], 2) for x in runs]
    rows[side]["decode_best"] = max(x["decode_tokens_per_s"] for x in runs)  # least disturbed by other load
print(f"Mistral-shaped (hidden 1024, 8 layers, 16/8 heads), bf16, window {window}, {new} new tokens, {rounds} rounds")
for side, label in (("window", f"window {window}, prompt {prompt} (masked full-length cache)"),
                    ("full", f"no window, prompt {prompt}"),
                    ("ring", f"no window, prompt {window} (a ring buffer's keys)")):
    r = rows[side]
    print(f"  {label:55s} prefill {r['prefill_tokens_per_s']:8.1f} tok/s  decode {r['decode_tokens_per_s']:7.2f} tok/s  {r['decode_all']}")
for stat in ("decode_tokens_per_s", "decode_best"):
    print(f"  {'median' if stat == 'decode_tokens_per_s' else 'best'} decode window / ring: "
          f"{rows['window'][stat] / rows['ring'][stat]:.3f}   window / full: {rows['window'][stat] / rows['full'][stat]:.3f}")
PY
