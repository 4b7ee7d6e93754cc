"""Shared by the Python benchmarks: the prompt, medians, peak RSS, the JSON record, the machine line.

The record has the fields `tessera bench --json` prints (load_s, ttft_s, prefill_tokens_per_s,
decode_tokens_per_s, peak_rss_mb, runs), so bench/compare_table.py treats every engine alike.
"""
import json
import os
import resource
import statistics
import subprocess
import sys

MASK64 = (1 << 64) - 1


def bench_prompt(n, vocab):
    """The ids of src/bench/bench_model.cpp bench_prompt(): splitmix64, ids in [10, vocab)."""
    s, ids = 0x9E3779B97F4A7C15, []
    for _ in range(n):
        s = (s + 0x9E3779B97F4A7C15) & MASK64
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        z ^= z >> 31
        ids.append(10 + z % (vocab - 10))
    return ids


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kilobytes


def record(engine, model, dtype, threads, prompt_tokens, new_tokens, runs, **extra):
    """runs: dicts with load_s, ttft_s, prefill_s, decode_s (seconds for new_tokens - 1 decode steps)."""
    for r in runs:
        r["prefill_tokens_per_s"] = prompt_tokens / r["prefill_s"]
        r["decode_tokens_per_s"] = (new_tokens - 1) / r["decode_s"]
    out = dict(engine=engine, model=model, dtype=dtype, threads=threads, prompt_tokens=prompt_tokens,
               new_tokens=new_tokens, repeats=len(runs))
    for k in ("load_s", "ttft_s", "prefill_s", "prefill_tokens_per_s", "decode_s", "decode_tokens_per_s"):
        out[k] = statistics.median(r[k] for r in runs)
    out["peak_rss_mb"] = peak_rss_mb()
    out["runs"] = runs
    out.update(extra)
    return json.dumps(out)


def machine():
    """'CPU model; N cores; ISA flags': what every figure records (the machines here vary)."""
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("Model name")), "?")
    with open("/proc/cpuinfo") as f:
        flags = f.read()
    isa = " ".join(f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_int8")
                   if f" {f}" in flags)
    return f"{name}; {os.cpu_count()} cores; {isa}"


def start_tessera_server(cmd, who, keep_draining=False):
    """Starts `cmd` (a `tessera serve ... --port 0` command line) and waits until it says it is ready; returns
    (process, port). keep_draining: a thread keeps reading its stderr (a long run would fill the pipe)."""
    import re
    import threading
    import time
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    port = None
    deadline = time.time() + 300
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "ready" in line and port:
            if keep_draining:
                threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, port
    proc.kill()
    sys.exit(f"{who}: {' '.join(cmd)} did not become ready")


def run_json(cmd, who):
    """Runs cmd and returns the JSON object on its last stdout line; a failure stops the script naming the
    command, its exit status and its last stderr line."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"{who}: {' '.join(cmd)} failed ({p.returncode}): {tail}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def emit(lines, out=""):
    """Prints a report's lines (a Markdown table and its heading) and writes them to `out` too where given."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)
