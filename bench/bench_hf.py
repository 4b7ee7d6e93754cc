#!/usr/bin/env python3
"""Transformers + PyTorch on CPU: load, generate() of a token-id prompt, greedy, exactly --new-tokens tokens
(eos ignored); one JSON line like `tessera bench --json`. Times come from a streamer: its first put() is the
prompt, the second the first new token (time to first token = prefill), the rest are decode steps.

  --mode eager    dynamic cache, no compilation; each repeat loads the model afresh
  --mode compile  static cache + torch.compile of the decode step (Transformers' CompileConfig, forced on CPU);
                  one load, one warm-up generate (reported as compile_s), then the timed repeats

Usage: bench_hf.py MODEL [--gguf-file F] --dtype bfloat16 --threads 2 --prompt-tokens 512 --new-tokens 128
"""
import argparse
import gc
import os
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, CompileConfig

from bench_common import bench_prompt, record


class Clock:
    """A generate() streamer that only records when tokens arrive."""

    def __init__(self):
        self.times = []

    def put(self, value):
        self.times.append(time.perf_counter())

    def end(self):
        pass


def load(a):
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[a.dtype]
    kw = dict(dtype=dtype)
    if a.gguf_file:
        kw["gguf_file"] = a.gguf_file
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(a.model, **kw).eval()
    return model, time.perf_counter() - t0


def generate(model, ids, a, compile_cfg):
    kw = dict(max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens, do_sample=False, eos_token_id=None,
              pad_token_id=0, attention_mask=torch.ones_like(ids))
    if compile_cfg is not None:
        kw.update(cache_implementation="static", compile_config=compile_cfg)
    else:
        kw.update(disable_compile=True)
    clock = Clock()
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, streamer=clock, **kw)
    t_end = time.perf_counter()
    assert out.shape[1] == ids.shape[1] + a.new_tokens, out.shape
    t_first = clock.times[1]  # times[0]: the prompt
    return dict(ttft_s=t_first - t0, prefill_s=t_first - t0, decode_s=t_end - t_first)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--gguf-file", default=None)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--mode", default="eager", choices=["eager", "compile"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    runs, extra = [], {}
    if a.mode == "eager":
        for _ in range(a.repeats):
            model, load_s = load(a)
            ids = torch.tensor([bench_prompt(a.prompt_tokens, model.config.vocab_size)])
            runs.append(dict(load_s=load_s, **generate(model, ids, a, None)))
            del model
            gc.collect()
    else:
        cc = CompileConfig()
        cc._compile_all_devices = True  # Transformers compiles only on accelerators unless told
        model, load_s = load(a)
        ids = torch.tensor([bench_prompt(a.prompt_tokens, model.config.vocab_size)])
        t0 = time.perf_counter()
        generate(model, ids, a, cc)
        extra["compile_s"] = time.perf_counter() - t0  # the warm-up generate, compilation included
        for _ in range(a.repeats):
            runs.append(dict(load_s=load_s, **generate(model, ids, a, cc)))
    print(record(f"transformers-{a.mode}", a.model + (f"/{a.gguf_file}" if a.gguf_file else ""), a.dtype,
                 a.threads, a.prompt_tokens, a.new_tokens, runs, torch=torch.__version__,
                 transformers=transformers.__version__, **extra))


if __name__ == "__main__":
    main()
