#!/usr/bin/env python3
"""Markdown table of one bench/compare.sh run (its JSON lines): every engine's medians, ratios Tessera ÷ other
engine, Tessera's decode bandwidth fraction and prefill FLOP fraction, with date, machine and versions.

Usage: compare_table.py RESULTS.jsonl [--tessera BIN] [--py PYTHON] [--quick 0|1]   (standard library only)
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_NAMES = {"smollm2": "SmolLM2-135M", "qwen3": "Qwen3-0.6B-shaped (random)", "qwen3_4b": "Qwen3-4B-shaped (random)",
               "qwen3_moe": "Qwen3-30B-A3B-shaped, 4 of 48 layers (random)",
               "qwen3_tied": "qwen3_tied fixture"}
ENGINE_ORDER = ["tessera", "llama.cpp", "transformers-eager", "transformers-compile"]


def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def git_sha():
    sha = sh("git", "-C", ROOT, "rev-parse", "--short", "HEAD") or "unknown"
    dirty = sh("git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no")
    return sha + ("+dirty" if dirty else "")


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_isa():
    """The SIMD extensions that decide the kernels (both engines dispatch on them), from /proc/cpuinfo."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                names = ["avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
                         "amx_int8", "amx_bf16"]
                return " ".join(n.upper() for n in names if n in flags) or "no AVX2"
    except OSError:
        pass
    return "unknown ISA"


def fmt(v, digits=1):
    if v is None:
        return "—"
    if v >= 100:
        return f"{v:.0f}"
    return f"{v:.{digits}f}" if v >= 1 else f"{v:.{digits + 2}f}".rstrip("0").rstrip(".") or "0"


def ratio(ours, theirs, higher_is_better=True):
    if not ours or not theirs:
        return "—"
    return f"{ours / theirs:.2f}×"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("jsonl")
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "tessera"))
    ap.add_argument("--py", default="")
    ap.add_argument("--quick", default="0")
    a = ap.parse_args()
    rows = [json.loads(line) for line in open(a.jsonl) if line.strip()]
    ours = {(r["model_key"], r["dtype"]): r for r in rows if r["engine"] == "tessera" and "error" not in r}
    # Ceilings: the FLOP peaks are the best each probe achieved across the run's Tessera records (contention
    # only lowers them, and they agree to ~1%). Read bandwidth is the median of the records' probes (each the
    # fastest of its passes): single passes on this VM now and then read far above what any other pass or the
    # kernels reach (67 GB/s once against 34-36), and one outlier would set the ceiling.
    probes = [r["machine"] for r in ours.values() if "machine" in r]
    machine = dict(probes[0]) if probes else {}
    bw_range = None
    for k in ("read_bandwidth_gbs", "peak_f32_gflops", "peak_bf16_gflops"):
        vals = sorted(p[k] for p in probes if p.get(k) is not None)
        if k == "read_bandwidth_gbs" and vals:
            machine[k] = statistics.median(vals)
            bw_range = (vals[0], vals[-1])
        else:
            machine[k] = max(vals) if vals else None
    versions = {"tessera": (sh(a.tessera, "--version") or "tessera ?") + f" (git {git_sha()})"}
    for r in rows:
        if r["engine"] == "llama.cpp" and "version" in r:
            v = r["version"]
            versions["llama.cpp"] = v if v.startswith("llama.cpp") else f"llama-cpp-python {v}"
        if r["engine"].startswith("transformers") and "torch" in r:
            versions["torch"] = f"torch {r['torch']}"
            versions["transformers"] = f"transformers {r['transformers']}"
    loads = [r[k] for r in rows for k in ("load_before", "load_after") if k in r]
    others = [r["others_before"] for r in rows if "others_before" in r]
    first = next((r for r in rows if "prompt_tokens" in r), {})
    out = []
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out.append(f"Measured {now}{' (quick mode: CI smoke run, not a measurement)' if a.quick == '1' else ''} by "
               "`bench/compare.sh`.  ")
    out.append(f"Machine: {machine.get('cpu') or cpu_name()} ({cpu_isa()}), {os.cpu_count()} cores; load average "
               f"{min(loads, default=0):.2f}–{max(loads, default=0):.2f} during the runs (it counts the benchmark's "
               "own threads)" + (f"; other runnable jobs just before each run: at most {max(others)}" if others else "")
               + ".  ")
    if others and max(others) >= 1:
        out.append(f"**Warning: up to {max(others)} other job(s) were running on {os.cpu_count()} cores when engines "
                   "started, so some figures (and ratios between engines measured minutes apart) reflect contention "
                   "as much as the engines. Re-run on an idle machine before drawing conclusions.**  ")
    elif not others and loads and max(loads) > 0.5 * (os.cpu_count() or 1):
        out.append(f"**Warning: the load average reached {max(loads):.1f} on {os.cpu_count()} cores, so other jobs held "
                   "cores during these runs: the figures (and ratios between engines measured minutes apart) "
                   "reflect contention as much as the engines. Re-run on an idle machine before drawing "
                   "conclusions.**  ")
    out.append("Versions: " + ", ".join(versions.values()) + ".  ")
    if machine:
        bf16 = machine.get("peak_bf16_gflops")
        bw_note = (f" (median of the runs' probes, {bw_range[0]:.1f}–{bw_range[1]:.1f})"
                   if bw_range and bw_range[0] != bw_range[1] else "")
        out.append(f"Ceilings (from the `tessera bench` probes in this run; the fractions below use them): read bandwidth {machine['read_bandwidth_gbs']:.1f} GB/s{bw_note}, "
                   f"f32 FMA peak {machine['peak_f32_gflops']:.0f} GFLOP/s ({machine.get('peak_f32_isa', '?')}), "
                   f"bf16 peak {'n/a (no AVX512_BF16)' if bf16 is None else f'{bf16:.0f} GFLOP/s (vdpbf16ps)'}.  ")
    out.append(f"Batch 1, prompt {first.get('prompt_tokens', '?')} token ids, {first.get('new_tokens', '?')} greedy "
               f"tokens (eos ignored), {first.get('threads', '?')} threads, median of {first.get('repeats', '?')} runs; "
               "ratios are Tessera ÷ that engine (tokens/s: above 1 means Tessera is faster).")
    out.append("")
    out.append("| model | dtype | engine | load s | first token s | prefill tok/s | decode tok/s | peak RSS MB "
               "| prefill ratio | decode ratio | load avg (other jobs) |")
    out.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    keys = []
    for r in rows:
        if (r["model_key"], r["dtype"]) not in keys:
            keys.append((r["model_key"], r["dtype"]))
    for key in keys:
        group = sorted((r for r in rows if (r["model_key"], r["dtype"]) == key),
                       key=lambda r: ENGINE_ORDER.index(r["engine"]) if r["engine"] in ENGINE_ORDER else 99)
        t = ours.get(key)
        for r in group:
            name = MODEL_NAMES.get(key[0], key[0])
            if "error" in r:
                out.append(f"| {name} | {key[1]} | {r['engine']} | failed: {r['error'][:120]} |||||||| |")
                continue
            mine = r["engine"] == "tessera"
            load = f"{r.get('load_before', 0):.1f}–{r.get('load_after', 0):.1f}"
            if "others_before" in r:
                load += f" ({r['others_before']})"
            extra = f" (+{r['compile_s']:.0f} s compile)" if "compile_s" in r else ""
            out.append(
                f"| {name} | {key[1]} | {r['engine']} | {fmt(r['load_s'], 2)}{extra} | {fmt(r['ttft_s'], 2)} | "
                f"{fmt(r['prefill_tokens_per_s'])} | {fmt(r['decode_tokens_per_s'])} | {fmt(r['peak_rss_mb'])} | "
                f"{'—' if mine or not t else ratio(t['prefill_tokens_per_s'], r['prefill_tokens_per_s'])} | "
                f"{'—' if mine or not t else ratio(t['decode_tokens_per_s'], r['decode_tokens_per_s'])} | {load} |")
    if ours and machine:
        out.append("")
        out.append("Tessera against the machine's ceilings (decode: tokens/s × bytes of weight matrices read per "
                   "token — every layer matrix and the lm_head in the weight dtype — ÷ read bandwidth; \"+KV\" adds "
                   "the KV cache read at the average context (bfloat16 for bf16 models, else float32); prefill: FLOPs of the prompt — 2 × layer "
                   "matrix parameters × tokens + the last row's lm_head + causal attention — per second ÷ peak):")
        out.append("")
        out.append("| model | dtype | MB read per token | decode % of bandwidth limit | +KV | prefill GFLOP/s "
                   "| % of f32 peak | % of bf16 peak |")
        out.append("|---|---|---:|---:|---:|---:|---:|---:|")
        bw, f32, bf16 = machine["read_bandwidth_gbs"] * 1e9, machine["peak_f32_gflops"], machine["peak_bf16_gflops"]
        for key, t in ours.items():
            if "decode_weight_bytes_per_token" not in t or "prefill_gflops" not in t:
                continue
            dec = t["decode_tokens_per_s"]
            t["decode_bandwidth_fraction"] = dec * t["decode_weight_bytes_per_token"] / bw
            t["decode_bandwidth_fraction_with_kv"] = dec * (t["decode_weight_bytes_per_token"] +
                                                            t["decode_kv_bytes_per_token"]) / bw
            t["prefill_f32_peak_fraction"] = t["prefill_gflops"] / f32
            bf = None if bf16 is None else t["prefill_gflops"] / bf16
            out.append(f"| {MODEL_NAMES.get(key[0], key[0])} | {key[1]} | {t['decode_weight_bytes_per_token'] / 1e6:.0f} | "
                       f"{100 * t['decode_bandwidth_fraction']:.0f}% | {100 * t['decode_bandwidth_fraction_with_kv']:.0f}% | "
                       f"{t['prefill_gflops']:.1f} | {100 * t['prefill_f32_peak_fraction']:.0f}% | "
                       f"{'n/a' if bf is None else f'{100 * bf:.0f}%'} |")
    out.append("")
    out.append("Definitions: load = `from_pretrained` / `Llama()` wall time (Transformers on SmolLM2 dequantises "
               "the GGUF at load); first token = prefill of the prompt and choice of the first token; decode tok/s "
               "= (new tokens − 1) ÷ time after the first token; peak RSS = the process's `ru_maxrss` (Python "
               "engines include the interpreter and libraries). Same weights everywhere: SmolLM2's Q4_1 GGUF "
               "dequantised to BF16/F32 GGUFs, the Qwen3 checkpoint as bf16 safetensors and its GGUF conversions "
               "(`tools/make_bench_models.py`). llama.cpp keeps its default f16 KV cache; Tessera keeps bfloat16 for bf16 models and float32 for f32 ones.")
    print("\n".join(out))


if __name__ == "__main__":
    main()
