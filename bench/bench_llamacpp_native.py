#!/usr/bin/env python3
"""Native llama.cpp (llama-bench, built by bench/build_llamacpp.sh) on one GGUF; one JSON line like
`tessera bench --json`, so bench/compare_table.py treats it as every other engine.

Two llama-bench runs, each with its own repetitions: prefill of a P-token prompt (`-p P -n 0`), and decode of N
tokens after a P-token prompt is in the cache (`-p 0 -n N -d P`, the state Tessera's decode figure is measured
in). Per-repetition rates come from llama-bench's own samples; the medians are reported. Peak RSS is the largest
of the llama-bench processes (RUSAGE_CHILDREN). llama-bench does not time loading: load_s is left empty.

With --one-pass (long contexts): one `llama-batched-bench` run per repetition instead (`-npp P -ntg N -npl 1`),
which prefills the P-token prompt once, timed, then decodes N tokens after it: the same two figures from one
prefill, where llama-bench spends three (its full-length warm-up, the timed prompt, the depth run), 20+ minutes
each at 32k on two cores. Its warm-up is 16 tokens. llama-bench flags in --llama-args are given in
llama-batched-bench's spelling (`-fa 1` -> `-fa on`).

Usage: bench_llamacpp_native.py MODEL.gguf --bin DIR --dtype q4_k_m --threads 2 --prompt-tokens 512
       --new-tokens 128 --repeats 3 [--llama-args '-fa 1 -ctk q8_0 -ctv q8_0'] [--one-pass]
"""
import argparse
import json
import resource
import statistics
import subprocess
import sys


def llama_bench(binary, model, threads, repeats, extra):
    cmd = [binary, "-m", model, "-t", str(threads), "-r", str(repeats), "-o", "json", "-ngl", "0", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"bench_llamacpp_native: {' '.join(cmd)} failed ({p.returncode}): {tail}")
    runs = json.loads(p.stdout)
    if len(runs) != 1:
        raise SystemExit(f"bench_llamacpp_native: expected one test from {' '.join(cmd)}, got {len(runs)}")
    return runs[0]


def batched_bench(binary, model, threads, prompt, new, extra):
    """One llama-batched-bench run: (prefill tok/s, decode tok/s) of one sequence."""
    flags = []
    it = iter(extra)
    for f in it:  # llama-bench's -fa 0/1 is -fa off/on here
        flags.append(f)
        if f in ("-fa", "--flash-attn"):
            v = next(it, "1")
            flags.append({"1": "on", "0": "off"}.get(v, v))
    cmd = [binary, "-m", model, "-t", str(threads), "-c", str(prompt + new + 64), "-b", "2048", "-ub", "512",
           "-npp", str(prompt), "-ntg", str(new), "-npl", "1", "--output-format", "jsonl", *flags]
    p = subprocess.run(cmd, capture_output=True, text=True)
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or len(rows) != 1:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"bench_llamacpp_native: {' '.join(cmd)} failed ({p.returncode}): {tail}")
    return float(rows[0]["speed_pp"]), float(rows[0]["speed_tg"])


def version_of(binary):
    p = subprocess.run([binary, "--version"], capture_output=True, text=True)
    line = next((x for x in (p.stdout + p.stderr).splitlines() if x.startswith("version:")), "")
    return f"llama.cpp {line.split('commit ')[-1].rstrip(')')} (llama-batched-bench), native" if line else "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--bin", required=True, help="directory holding llama-bench (bench/build_llamacpp.sh prints it)")
    ap.add_argument("--dtype", default="")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--llama-args", default="", help="more llama-bench flags for both runs, e.g. '-fa 1'")
    ap.add_argument("--one-pass", action="store_true",
                    help="llama-batched-bench: one timed prefill, then the decode after it (long contexts)")
    a = ap.parse_args()
    more = a.llama_args.split()
    if a.one_pass:
        binary = f"{a.bin}/llama-batched-bench"
        pairs = [batched_bench(binary, a.model, a.threads, a.prompt_tokens, a.new_tokens, more)
                 for _ in range(a.repeats)]
        prefill, decode = [p for p, _ in pairs], [d for _, d in pairs]
        pp = dict(version=version_of(binary))
    else:
        binary = f"{a.bin}/llama-bench"
        pp = llama_bench(binary, a.model, a.threads, a.repeats, ["-p", str(a.prompt_tokens), "-n", "0", *more])
        tg = llama_bench(binary, a.model, a.threads, a.repeats,
                         ["-p", "0", "-n", str(a.new_tokens), "-d", str(a.prompt_tokens), *more])
        prefill = [float(x) for x in pp["samples_ts"]]
        decode = [float(x) for x in tg["samples_ts"]]
        pp["version"] = f"llama.cpp {pp.get('build_commit', '?')} (build {pp.get('build_number', '?')}), native"
    runs = [dict(prefill_tokens_per_s=p, decode_tokens_per_s=d, prefill_s=a.prompt_tokens / p,
                 decode_s=(a.new_tokens - 1) / d) for p, d in zip(prefill, decode)]
    pre = statistics.median(prefill)
    out = dict(engine="llama.cpp", model=a.model, dtype=a.dtype, threads=a.threads, prompt_tokens=a.prompt_tokens,
               new_tokens=a.new_tokens, repeats=len(runs), load_s=None, ttft_s=a.prompt_tokens / pre,
               prefill_s=a.prompt_tokens / pre, prefill_tokens_per_s=pre,
               decode_tokens_per_s=statistics.median(decode),
               decode_s=(a.new_tokens - 1) / statistics.median(decode),
               peak_rss_mb=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0, runs=runs,
               version=pp["version"],
               cpu_info=pp.get("cpu_info", ""))
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
