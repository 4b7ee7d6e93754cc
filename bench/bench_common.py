"""Shared by bench/bench_hf.py: the prompt, medians, peak RSS, the JSON record.

The record has the fields `tessera bench --json` prints (load_s, ttft_s, prefill_tokens_per_s,
decode_tokens_per_s, peak_rss_mb, runs), so bench/compare_table.py treats every engine alike.
"""
import json
import resource
import statistics

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
