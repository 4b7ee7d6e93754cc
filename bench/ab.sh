#!/usr/bin/env bash
# Alternated A/B of two Tessera builds on the same model: bench/ab.sh OLD_TESSERA NEW_TESSERA [ROUNDS] [-- bench args]
# Runs `tessera bench --json` with each binary in turn (old, new, old, new, ...) so both see the same machine
# weather, then prints per-round figures, the medians and the ratios new / old. No thresholds: it reports.
# Default bench args: --prompt-tokens 512 --new-tokens 128 --dtype bfloat16 --repeats 1 (the default model).
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: bench/ab.sh OLD_TESSERA NEW_TESSERA [ROUNDS] [-- tessera bench args]" >&2
  exit 2
fi
OLD=$1 NEW=$2
shift 2
ROUNDS=3
if [[ $# -gt 0 && $1 != "--" ]]; then ROUNDS=$1; shift; fi
[[ $# -gt 0 && $1 == "--" ]] && shift
ARGS=("$@")
[[ ${#ARGS[@]} -eq 0 ]] && ARGS=(--prompt-tokens 512 --new-tokens 128 --dtype bfloat16 --repeats 1)
for b in "$OLD" "$NEW"; do
  [[ -x $b ]] || { echo "bench/ab.sh: $b is not an executable" >&2; exit 2; }
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "bench/ab.sh: ROUNDS must be a positive integer, got '$ROUNDS'" >&2; exit 2; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  for side in old new; do
    bin=$OLD; [[ $side == new ]] && bin=$NEW
    "$bin" bench "${ARGS[@]}" --json > "$OUT/$side-$r.json"
  done
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {s: [json.load(open(f"{out}/{s}-{r}.json")) for r in range(1, rounds + 1)] for s in ("old", "new")}
print("| round | old prefill tok/s | new prefill tok/s | old decode tok/s | new decode tok/s |")
print("|---|---|---|---|---|")
for r in range(rounds):
    o, n = rows["old"][r], rows["new"][r]
    print(f"| {r + 1} | {o['prefill_tokens_per_s']:.1f} | {n['prefill_tokens_per_s']:.1f} | "
          f"{o['decode_tokens_per_s']:.2f} | {n['decode_tokens_per_s']:.2f} |")
med = {s: {k: statistics.median(x[k] for x in rows[s]) for k in ("prefill_tokens_per_s", "decode_tokens_per_s")}
       for s in rows}
print(f"| median | {med['old']['prefill_tokens_per_s']:.1f} | {med['new']['prefill_tokens_per_s']:.1f} | "
      f"{med['old']['decode_tokens_per_s']:.2f} | {med['new']['decode_tokens_per_s']:.2f} |")
print(f"\nnew / old: prefill {med['new']['prefill_tokens_per_s'] / med['old']['prefill_tokens_per_s']:.3f}, "
      f"decode {med['new']['decode_tokens_per_s'] / med['old']['decode_tokens_per_s']:.3f} "
      f"(model {rows['new'][0]['model']}, {rows['new'][0]['dtype']}, {rows['new'][0]['threads']} threads)")
PY
