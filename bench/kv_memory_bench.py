#!/usr/bin/env python3
"""Paged KV memory through `tessera serve`, on this machine: N concurrent requests (default 64) with short
prompts, each generating many tokens (ignore_eos), served by

  A. --max-num-seqs 16 --max-model-len L                          (16 slots, as before paging: N/16 waves)
  B. --max-num-seqs N  --max-model-len L --kv-cache-memory M      (M = what A's 16 slots x L positions take)

and, for each, the server's resident memory while idle and at its highest during the run (sampled from
/proc/PID/status), the KV memory that A's slots would take allocated whole, aggregate output tokens/s, time to
first token, and B's preemptions. Standard library only.

  bench/kv_memory_bench.py [--model FILE] [--clients N] [--max-model-len L] [--prompt-tokens P]
                           [--new-tokens T]
Environment: TESSERA (default build/tessera)."""

import argparse
import asyncio
import json
import os
import re
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402
import serve_load  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_server(tessera, model, flags):
    cmd = [tessera, "serve"] + ([model] if model else []) + ["--port", "0", "--served-model-name", "m"] + flags
    return bench_common.start_tessera_server(cmd, "kv_memory_bench", keep_draining=True)


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def metrics(port):
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    out = {}
    for line in body.splitlines():
        m = re.match(r"tessera:(\w+)(?:\{[^}]*\})?\s+([-0-9.e+]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def run(tessera, model, flags, args, label):
    proc, port = start_server(tessera, model, flags)
    try:
        time.sleep(0.5)
        idle = rss_bytes(proc.pid)
        peak = [idle]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], rss_bytes(proc.pid))
                time.sleep(0.05)

        t = threading.Thread(target=sample, daemon=True)
        t.start()
        load = argparse.Namespace(url=f"http://127.0.0.1:{port}", model="m", label=label,
                                  prompt_tokens=args.prompt_tokens, new_tokens=args.new_tokens,
                                  requests_per_client=1, vocab=args.vocab, ignore_eos=True, text_prompt=False,
                                  timeout=3600, extra_body={})
        result = asyncio.run(serve_load.level(load, args.clients))
        stop.set()
        t.join()
        m = metrics(port)
        result.update({"flags": " ".join(flags), "idle_rss_mb": round(idle / 2**20, 1),
                       "peak_rss_mb": round(peak[0] / 2**20, 1),
                       "kv_rss_mb": round((peak[0] - idle) / 2**20, 1),
                       "preemptions": int(m.get("num_preemptions_total", 0)),
                       "block_tokens": int(m.get("kv_cache_block_tokens", 0)),
                       "block_bytes": int(m.get("kv_cache_block_bytes", 0)),
                       "total_blocks": int(m.get("kv_cache_total_blocks", 0))})
        return result
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="", help="default: the built-in default model")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=49152)
    args = ap.parse_args()
    tessera = os.environ.get("TESSERA", os.path.join(ROOT, "build", "tessera"))
    L = str(args.max_model_len)
    a = run(tessera, args.model, ["--max-num-seqs", "16", "--max-model-len", L], args, "16 slots")
    whole = a["total_blocks"] * a["block_bytes"]  # 16 slots x L positions, allocated whole
    b = run(tessera, args.model, ["--max-num-seqs", str(args.clients), "--max-model-len", L,
                                  "--kv-cache-memory", str(whole)], args, f"{args.clients} slots, capped")
    print(f"# {bench_common.machine()}")
    print(f"# {args.clients} concurrent requests: {args.prompt_tokens}-token prompts, {args.new_tokens} new "
          f"tokens each (ignore_eos); KV of 16 slots x {L} positions allocated whole: {whole / 2**20:.0f} MiB "
          f"({a['block_bytes'] / a['block_tokens']:.0f} bytes a position, blocks of {a['block_tokens']})")
    for r in (a, b):
        print(json.dumps(r))
    print("\n| server | idle RSS MiB | peak RSS MiB | KV (peak - idle) MiB | output tok/s | TTFT p50 s | "
          "TTFT p99 s | preemptions |")
    print("|---|---|---|---|---|---|---|---|")
    for r in (a, b):
        print(f"| {r['flags']} | {r['idle_rss_mb']} | {r['peak_rss_mb']} | {r['kv_rss_mb']} | "
              f"{r['output_tokens_per_s']} | {r['ttft_p50_s']} | {r['ttft_p99_s']} | {r['preemptions']} |")


if __name__ == "__main__":
    main()
