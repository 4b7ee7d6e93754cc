#!/usr/bin/env python3
"""Automatic prefix caching through `tessera serve`, on this machine: a two-turn conversation over a long
history (default ~2000 tokens), the second turn's prompt being the first turn's prompt, its answer and a new
question. Reports each turn's time to first token with the cache (the default) and without it
(--no-enable-prefix-caching), a fresh history every round so that turn 1 is always a miss, rounds alternated
between the two servers. Standard library only.

  bench/prefix_cache_bench.py [--model FILE] [--rounds N] [--history-words N] [--new-tokens N]
Environment: TESSERA (default build/tessera)."""

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ("the river north city old bridge light market stone winter harbour tower garden road school music "
         "paper window forest mountain evening morning letter station island village summer kitchen table "
         "story doctor engine picture").split()


def start_server(tessera, model, extra):
    cmd = [tessera, "serve"] + ([model] if model else []) + [
        "--port", "0", "--max-num-seqs", "2", "--max-model-len", "4096", "--served-model-name", "m"] + extra
    return bench_common.start_tessera_server(cmd, "prefix_cache_bench")


def complete(port, prompt, new_tokens):
    """One streamed greedy completion: (time to first token in s, text)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": new_tokens, "temperature": 0,
                       "stream": True})
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        sys.exit(f"prefix_cache_bench: HTTP {r.status}: {r.read()[:300]!r}")
    first, text = None, ""
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for ch in json.loads(line[6:]).get("choices", []):
            if ch.get("text"):
                if first is None:
                    first = time.perf_counter() - t0
                text += ch["text"]
    c.close()
    return first if first is not None else float("nan"), text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--history-words", type=int, default=1700)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--block", type=int, default=0, help="--prefix-cache-block (default: the server's)")
    a = ap.parse_args()
    tessera = os.environ.get("TESSERA", os.path.join(ROOT, "build", "tessera"))
    print(f"# {bench_common.machine()}; model: {a.model or 'default (SmolLM2-135M Q4_1)'}; "
          f"history {a.history_words} words, {a.new_tokens} new tokens a turn, {a.rounds} rounds")
    servers = {"cache": start_server(tessera, a.model,
                                     ["--prefix-cache-block", str(a.block)] if a.block else []),
               "no cache": start_server(tessera, a.model, ["--no-enable-prefix-caching"])}
    times = {k: ([], []) for k in servers}
    try:
        for rnd in range(a.rounds):
            rng = random.Random(rnd)
            history = " ".join(rng.choice(WORDS) for _ in range(a.history_words))
            first = f"Notes:\n{history}\n\nQuestion: which places do the notes name?\nAnswer:"
            for label, (_, port) in servers.items():
                t1, answer = complete(port, first, a.new_tokens)
                second = first + answer + "\n\nQuestion: and which seasons?\nAnswer:"
                t2, _ = complete(port, second, a.new_tokens)
                times[label][0].append(t1)
                times[label][1].append(t2)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=60)
    print("| server | turn 1 TTFT s (miss) | turn 2 TTFT s | turn 1 / turn 2 |")
    print("|---|---|---|---|")
    med = {k: (statistics.median(v[0]), statistics.median(v[1])) for k, v in times.items()}
    for k, (t1, t2) in med.items():
        print(f"| {k} | {t1:.3f} | {t2:.3f} | {t1 / t2:.1f}x |")
    print(f"\nturn 2 TTFT without / with the cache: {med['no cache'][1] / med['cache'][1]:.1f}x; "
          f"turn 1 (both miss) with / without: {med['cache'][0] / med['no cache'][0]:.2f}")


if __name__ == "__main__":
    main()
