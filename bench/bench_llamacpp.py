#!/usr/bin/env python3
"""llama.cpp (through llama-cpp-python's C API bindings) on one GGUF: load, prefill of a token-id prompt,
greedy decode with eos ignored; one JSON line like `tessera bench --json`.

Usage: bench_llamacpp.py MODEL.gguf --dtype bfloat16 --threads 2 --prompt-tokens 512 --new-tokens 128 --repeats 3
(--dtype only labels the record: the GGUF's tensor types decide.)
"""
import argparse
import gc
import time

import llama_cpp
import numpy as np

from bench_common import bench_prompt, record


def gguf_vocab_size(path):
    import gguf

    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    if f"{arch}.vocab_size" in r.fields:
        return int(r.fields[f"{arch}.vocab_size"].contents())
    return len(r.fields["tokenizer.ggml.tokens"].contents())


def one_run(path, ids, new_tokens, threads):
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=path, n_ctx=len(ids) + new_tokens, n_batch=max(512, len(ids)),
                          n_ubatch=max(512, len(ids)), n_threads=threads, n_threads_batch=threads, verbose=False)
    load_s = time.perf_counter() - t0
    ctx, n_vocab = llm._ctx.ctx, llm.n_vocab()

    def step(tokens):  # decode `tokens` after the cache contents; greedy choice from the last position
        arr = (llama_cpp.llama_token * len(tokens))(*tokens)
        if llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(arr, len(tokens))) != 0:
            raise SystemExit("bench_llamacpp: llama_decode failed")
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
        return int(logits.argmax())

    t0 = time.perf_counter()
    tok = step(ids)
    t1 = time.perf_counter()
    for _ in range(new_tokens - 1):
        tok = step([tok])
    t2 = time.perf_counter()
    del llm
    gc.collect()
    return dict(load_s=load_s, ttft_s=t1 - t0, prefill_s=t1 - t0, decode_s=t2 - t1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--dtype", default="")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    llama_cpp.llama_backend_init()
    ids = bench_prompt(a.prompt_tokens, gguf_vocab_size(a.model))
    runs = [one_run(a.model, ids, a.new_tokens, a.threads) for _ in range(a.repeats)]
    print(record("llama.cpp", a.model, a.dtype, a.threads, a.prompt_tokens, a.new_tokens, runs,
                 version=llama_cpp.__version__))


if __name__ == "__main__":
    main()
