#!/usr/bin/env python3
"""Makes tests/fixtures/io/tiny_kquants.gguf and its golden with the real libraries (gguf, transformers): a
2-layer Qwen3 GGUF (hidden 256, so every matrix is whole blocks of 256) whose matrices are stored in each
block type the cpu backend computes from as stored, other than those the older fixtures cover: Q4_K, Q5_K,
Q6_K (random blocks with scales that give weights of a trained model's size: gguf-py cannot quantise
K-quants), Q5_0 and Q5_1 (gguf-py's quantisers). The tied embedding / LM head is Q6_K, as in llama.cpp's
Q4_K_M files.

  tiny_kquants.gguf            the model
  tiny_kquants_expected.json   transformers' config, tensor names, the float32 logits of
                               AutoModelForCausalLM.from_pretrained(dir, gguf_file=...) at every position of
                               one prompt, and its 16 greedy tokens (transformers dequantises every block with
                               gguf-py)

Run: venv/bin/python tools/make_kquant_fixture.py
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_io_fixtures import OUT, hf_load_gguf, qwen_gguf_writer, write_gguf  # noqa: E402

rng = np.random.default_rng(4242)


def k_blocks(qtype, rows, cols):
    """Random K-quant blocks: random quants and sub-scales, f16 scales sized so that weights are about 0.05."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    nb = cols // block
    raw = rng.integers(0, 256, size=(rows, nb, size), dtype=np.uint8)

    def f16(lo, hi):
        return rng.uniform(lo, hi, size=(rows, nb)).astype(np.float16).view(np.uint8).reshape(rows, nb, 2)

    if qtype == Q.Q6_K:  # d * scale * (q - 32): scale int8, q - 32 in [-32, 31]
        raw[:, :, 208:210] = f16(1e-5, 3e-5)
    else:  # d * sc * q - dmin * m: sc, m in [0, 63]; q in [0, 15] (Q4_K) or [0, 31] (Q5_K); mean about 0
        qmid = 7.5 if qtype == Q.Q4_K else 15.5
        d = rng.uniform(1e-4, 2e-4, size=(rows, nb)) / (qmid / 7.5)
        raw[:, :, 0:2] = d.astype(np.float16).view(np.uint8).reshape(rows, nb, 2)
        raw[:, :, 2:4] = (d * qmid).astype(np.float16).view(np.uint8).reshape(rows, nb, 2)
    return raw.reshape(rows, -1)


def main():
    path = os.path.join(OUT, "tiny_kquants.gguf")
    # Transformers reads no head_dim from a qwen3 GGUF (Qwen3Config's default, 128, applies): the file says 128.
    hidden, heads, kv_heads, head_dim, ffn, vocab, layers = 256, 4, 2, 128, 512, 64, 2
    w = qwen_gguf_writer(path, "qwen3", hidden, heads, kv_heads, head_dim, ffn, vocab, layers)

    def add(name, shape, qtype, scale=0.05, offset=0.0):
        if qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
            raw = k_blocks(qtype, *shape)
        else:
            data = (rng.standard_normal(shape) * scale + offset).astype(np.float32)
            raw = data if qtype == Q.F32 else gguf.quants.quantize(data, qtype)
        w.add_tensor(name, raw, raw_dtype=qtype)

    # Per layer: q, k, v, o, gate, up, down.
    types = [[Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q5_0, Q.Q4_K, Q.Q5_1, Q.Q6_K],
             [Q.Q6_K, Q.Q4_K, Q.Q5_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q4_K]]
    add("token_embd.weight", (vocab, hidden), Q.Q6_K)
    for b in range(layers):
        p = f"blk.{b}."
        tq, tk, tv, to, tg, tu, td = types[b]
        add(p + "attn_norm.weight", (hidden,), Q.F32, 0.1, 1.0)
        add(p + "attn_q.weight", (heads * head_dim, hidden), tq)
        add(p + "attn_k.weight", (kv_heads * head_dim, hidden), tk)
        add(p + "attn_v.weight", (kv_heads * head_dim, hidden), tv)
        add(p + "attn_q_norm.weight", (head_dim,), Q.F32, 0.1, 1.0)
        add(p + "attn_k_norm.weight", (head_dim,), Q.F32, 0.1, 1.0)
        add(p + "attn_output.weight", (hidden, heads * head_dim), to)
        add(p + "ffn_norm.weight", (hidden,), Q.F32, 0.1, 1.0)
        add(p + "ffn_gate.weight", (ffn, hidden), tg)
        add(p + "ffn_up.weight", (ffn, hidden), tu)
        add(p + "ffn_down.weight", (hidden, ffn), td)
    add("output_norm.weight", (hidden,), Q.F32, 0.1, 1.0)
    write_gguf(w)

    import torch
    from transformers import AutoModelForCausalLM
    parsed = hf_load_gguf(path)
    model = AutoModelForCausalLM.from_pretrained(OUT, gguf_file=os.path.basename(path), dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    ids = [3, 17, 5, 40, 11, 29, 7, 2, 33, 61, 12]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].numpy().astype(np.float64)
        greedy = model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False, eos_token_id=None,
                                pad_token_id=0)[0].tolist()
    cfg = {k: v for k, v in parsed["config"].items() if isinstance(v, (int, float, str, bool, list))}
    counts = {}
    for row in types:
        for t in row:
            counts[t.name.lower()] = counts.get(t.name.lower(), 0) + 1
    counts["q6_k"] += 1  # the embedding (tied LM head)
    out = {"config": cfg, "tensors": sorted(parsed["tensors"]), "input_ids": ids,
           "logits": [[float(x) for x in row] for row in logits], "greedy_ids": greedy[len(ids):],
           "block_matrices": counts, "model_class": type(model).__name__,
           "load": "AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., dtype=torch.float32, "
                   "attn_implementation='eager'); generate(max_new_tokens=16, do_sample=False)"}
    with open(os.path.join(OUT, "tiny_kquants_expected.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    print("logits range", float(logits.min()), float(logits.max()), "std", float(logits.std()),
          "greedy", greedy[len(ids):], "size", os.path.getsize(path))


if __name__ == "__main__":
    main()
