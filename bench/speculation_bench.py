#!/usr/bin/env python3
"""Speculative decoding by prompt lookup (--prompt-lookup-num-tokens), single stream, on this machine: decode
tok/s with it / without it on workloads whose answer repeats its input (editing a given code file, summarising
a given text) and on ones that do not (free writing), alternated round by round in one run. Each pair must give
the same tokens (the run fails otherwise). Standard library only.

  bench/speculation_bench.py [--model FILE] [--rounds N] [--lookup K] [--new-tokens N]
Environment: TESSERA (default build/tessera)."""

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CODE = '''import math


def area(width, height):
    """The area of a width x height rectangle."""
    return width * height


def perimeter(width, height):
    """The perimeter of a width x height rectangle."""
    return 2 * (width + height)


def diagonal(width, height):
    """The length of a width x height rectangle's diagonal."""
    return math.sqrt(width * width + height * height)


def describe(width, height):
    return (f"{width} x {height}: area {area(width, height)}, perimeter {perimeter(width, height)}, "
            f"diagonal {diagonal(width, height):.2f}")


if __name__ == "__main__":
    for w, h in [(3, 4), (5, 12), (8, 15)]:
        print(describe(w, h))
'''

TEXT = ("The Rhine is one of the major rivers of Europe. It begins in the Swiss Alps, flows through Lake "
        "Constance, forms part of the border between Germany and France, and crosses the Netherlands before it "
        "reaches the North Sea. For centuries the Rhine has been an important trade route: barges carry coal, "
        "grain and containers between the port of Rotterdam and the industrial cities of the Ruhr. The river "
        "also gave its name to a wine region, where vineyards climb the steep slopes of the Rhine gorge between "
        "Bingen and Koblenz, a landscape that UNESCO lists as a World Heritage Site.")

WORKLOADS = [
    ("edit code", "lookup-friendly",
     "Here is a Python file:\n\n```python\n" + CODE + "```\n\nRewrite the file so that `area` is called "
     "`rect_area`. Output only the code."),
    ("summarise", "lookup-friendly", "Summarise this text in three sentences:\n\n" + TEXT),
    ("free writing", "random", "Write a short story about a lighthouse keeper who finds a message in a bottle."),
    ("list", "random", "Give me ten ideas for a weekend trip, one line each."),
]


def run(tessera, model, prompt, new_tokens, lookup):
    cmd = [tessera, "generate"] + ([model] if model else []) + [
        "--prompt", prompt, "--chat", "--greedy", "--max-new-tokens", str(new_tokens), "--json", "--quiet"]
    if lookup:
        cmd += ["--prompt-lookup-num-tokens", str(lookup)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"speculation_bench: {' '.join(cmd[:3])} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lookup", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=192)
    a = ap.parse_args()
    tessera = os.environ.get("TESSERA", os.path.join(ROOT, "build", "tessera"))
    print(f"# {bench_common.machine()}; model: {a.model or 'default (SmolLM2-135M Q4_1)'}")
    print(f"# greedy, {a.new_tokens} new tokens at most, --prompt-lookup-num-tokens {a.lookup}, "
          f"{a.rounds} rounds alternated; decode tok/s median")
    print("| workload | kind | tokens | plain tok/s | lookup tok/s | ratio | steps plain / lookup | accepted / drafted |")
    print("|---|---|---|---|---|---|---|---|")
    for label, kind, prompt in WORKLOADS:
        plain, spec = [], []
        for _ in range(a.rounds):
            p = run(tessera, a.model, prompt, a.new_tokens, 0)
            s = run(tessera, a.model, prompt, a.new_tokens, a.lookup)
            if p["ids"] != s["ids"]:
                sys.exit(f"speculation_bench: {label}: the tokens differ with prompt lookup")
            plain.append(p)
            spec.append(s)
        pt = statistics.median(r["decode_tokens_per_s"] for r in plain)
        st = statistics.median(r["decode_tokens_per_s"] for r in spec)
        print(f"| {label} | {kind} | {plain[0]['new_tokens']} | {pt:.1f} | {st:.1f} | {st / pt:.2f} | "
              f"{plain[0]['decode_steps']} / {spec[0]['decode_steps']} | "
              f"{spec[0]['accepted_tokens']} / {spec[0]['draft_tokens']} |")


if __name__ == "__main__":
    main()
