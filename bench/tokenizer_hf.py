#!/usr/bin/env python3
"""Encode throughput of Hugging Face `tokenizers` (Rust) on ONE thread, same protocol as
bench_tokenizer: each document encoded with one encode() call, no special tokens, one warm-up
pass, best of N passes.

usage: tokenizer_hf.py TOKENIZER_DIR_OR_GGUF CORPUS.jsonl [passes]
"""
import os

# Must be set before tokenizers is imported: one thread, no parallelism.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["RAYON_RS_NUM_CPUS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import tokenizers  # noqa: E402


def load(path):
    if path.endswith(".gguf"):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path)).backend_tokenizer
    if path.endswith(".json"):
        return tokenizers.Tokenizer.from_file(path)
    return tokenizers.Tokenizer.from_file(os.path.join(path, "tokenizer.json"))


def main():
    tok = load(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f if line.strip()]
    passes = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    nbytes = sum(len(d.encode()) for d in docs)
    best, tokens = float("inf"), 0
    for p in range(passes + 1):
        t0 = time.perf_counter()
        n = 0
        for d in docs:
            n += len(tok.encode(d, add_special_tokens=False).ids)
        s = time.perf_counter() - t0
        if p > 0:
            best = min(best, s)
        tokens = n
    print(f"hf-tokenizers {tokenizers.__version__}: {len(docs)} docs, {nbytes / 1e6:.2f} MB, {tokens} tokens, "
          f"best of {passes}: {best:.3f} s, {nbytes / 1e6 / best:.2f} MB/s, {tokens / best:.0f} tokens/s")


if __name__ == "__main__":
    main()
