#!/usr/bin/env python3
"""Attention at length, side by side: Tessera (`tessera bench --json`) and native llama.cpp (`llama-bench`, built
by bench/build_llamacpp.sh, flash attention on) on the same GGUF, at several context lengths, alternated per
length. For each: prefill tok/s of a prompt of that length, decode tok/s with that prompt in the cache (the end of
the context), peak RSS; ratios are Tessera / llama.cpp. The CPU model and ISA head the table.

A quantised KV cache on both sides: --kv-cache-dtype q8_0 --llama-args '-fa 1 -ctk q8_0 -ctv q8_0'. The table
gives Tessera's KV bytes per position (every layer's keys and values) for the dtype it ran.

Usage: bench/long_context.py MODEL.gguf --bin build/llama.cpp-native/bin [--contexts 4096,16384,32768]
       [--tessera-model DIR]
       [--new-tokens 32] [--threads N] [--tessera build/tessera] [--kv-cache-dtype auto] [--llama-args '-fa 1']
       [--out FILE]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--bin", required=True, help="directory holding llama-bench")
    ap.add_argument("--contexts", default="4096,16384,32768")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--tessera", default=os.path.join(HERE, "..", "build", "tessera"))
    ap.add_argument("--llama-args", default="-fa 1")
    ap.add_argument("--kv-cache-dtype", default="auto", help="Tessera's --kv-cache-dtype")
    ap.add_argument("--tessera-model", default="",
                    help="what Tessera loads, when not MODEL itself: the same weights in another file, e.g. the "
                         "Transformers checkpoint MODEL.gguf was converted from")
    ap.add_argument("--one-pass-from", type=int, default=0,
                    help="contexts of at least this many tokens measure llama.cpp with llama-batched-bench, one "
                         "prefill per figure pair (bench_llamacpp_native.py --one-pass); 0: never")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    rows = []
    for n in (int(x) for x in a.contexts.split(",")):
        t = bench_common.run_json([a.tessera, "bench", a.tessera_model or a.model, "--json", "--repeats", "1", "--threads",
                                   str(a.threads), "--prompt-tokens", str(n), "--new-tokens", str(a.new_tokens),
                                   "--kv-cache-dtype", a.kv_cache_dtype], "long_context")
        l = bench_common.run_json([sys.executable, os.path.join(HERE, "bench_llamacpp_native.py"), a.model, "--bin",
                                   a.bin, "--threads", str(a.threads), "--prompt-tokens", str(n), "--new-tokens",
                                   str(a.new_tokens), "--repeats", "1", "--llama-args", a.llama_args,
                                   *(["--one-pass"] if a.one_pass_from and n >= a.one_pass_from else [])],
                                  "long_context")
        rows.append((n, t, l))
        print(f"context {n}: tessera prefill {t['prefill_tokens_per_s']:.1f} decode {t['decode_tokens_per_s']:.2f} "
              f"rss {t['peak_rss_mb']:.0f} MB | llama.cpp prefill {l['prefill_tokens_per_s']:.1f} decode "
              f"{l['decode_tokens_per_s']:.2f} rss {l['peak_rss_mb']:.0f} MB", file=sys.stderr, flush=True)
    kv = rows[0][1]
    tess_model = f" (Tessera: {os.path.basename(os.path.normpath(a.tessera_model))})" if a.tessera_model else ""
    lines = [f"Long context, {os.path.basename(a.model)}{tess_model}, {a.threads} threads, {a.new_tokens} new tokens; "
             f"Tessera KV cache {kv.get('kv_cache_dtype', '?')} ({kv.get('kv_bytes_per_token', 0)} bytes per "
             f"position); llama.cpp `llama-bench {a.llama_args}` ({rows[0][2].get('version', '?')})"
             + (f"; contexts of {a.one_pass_from}+ tokens by `llama-batched-bench` (one prefill, then the decode)"
                if a.one_pass_from else "") + "; machine: "
             f"{bench_common.machine()}", "",
             "| context | prefill tok/s Tessera / llama.cpp | ratio | decode tok/s at the end | ratio | "
             "peak RSS MB | ratio |", "|---|---|---|---|---|---|---|"]
    for n, t, l in rows:
        lines.append(f"| {n} | {t['prefill_tokens_per_s']:.1f} / {l['prefill_tokens_per_s']:.1f} | "
                     f"{t['prefill_tokens_per_s'] / l['prefill_tokens_per_s']:.2f}x | "
                     f"{t['decode_tokens_per_s']:.2f} / {l['decode_tokens_per_s']:.2f} | "
                     f"{t['decode_tokens_per_s'] / l['decode_tokens_per_s']:.2f}x | "
                     f"{t['peak_rss_mb']:.0f} / {l['peak_rss_mb']:.0f} | "
                     f"{t['peak_rss_mb'] / l['peak_rss_mb']:.2f}x |")
    bench_common.emit(lines, a.out)


if __name__ == "__main__":
    main()
