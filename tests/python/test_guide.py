"""The guide's TPU examples (shared/seed/google-tpu.pt.md), run as it shows them with only the imports changed
(`from transformers import` -> `from tessera import`, `import torch` -> `import tessera as torch`) and the model
ids and devices pointed at the project's checkpoints: SmolLM2 (the default model) for the inference example, and
for tensor parallelism qwen3_tp4 with the tiny GPT-2 tokenizer beside it, and the glm4 fixture (2 key-value heads,
as GLM-4-9B-0414) for the replication rules. Each runs as a script in its own interpreter (under `tessera launch`
for tensor parallelism) and is held to Transformers' outputs for the same calls (tests/fixtures/guide/golden.json,
made by tools/make_guide_goldens.py) or to the model goldens.

Where an example cannot be held to a golden as written, a variant says what it changes: do_sample=True draws
from another generator than torch's, and two correct bfloat16 implementations' greedy paths part within a step
or two (the golden's float32 top-2 margins fall below bfloat16's own logit error at step 1 on SmolLM2 and step 0
on qwen3_tp4), so the token-exact comparisons run the same code with do_sample=False / dtype float32.
return_tensors="pt" needs torch; without it the examples run with "np" instead."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tessera

from conftest import MODELS, ROOT, golden

GUIDE = os.path.join(ROOT, "..", "shared", "seed", "google-tpu.pt.md")

# The guide's code, verbatim.
ACCELERATOR = """import torch

print(torch.accelerator.is_available(), torch.accelerator.device_count())
"""

INFERENCE = """from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen3-0.6B")
model = AutoModelForCausalLM.from_pretrained(
    "Qwen/Qwen3-0.6B", dtype="bfloat16", device_map="tpu"
)

# leave the inputs on CPU
inputs = tokenizer("The French Bread Law states", return_tensors="pt")
output = model.generate(
    **inputs, do_sample=True, max_new_tokens=50, cache_implementation="static"
)
print(tokenizer.decode(output[0], skip_special_tokens=True))
"""

TENSOR_PARALLEL = """import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DistributedConfig

tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen3-8B")
model = AutoModelForCausalLM.from_pretrained(
    "Qwen/Qwen3-8B",
    dtype=torch.bfloat16,
    distributed_config=DistributedConfig(tp_size=4),
)

# leave the inputs on CPU
inputs = tokenizer("The French Bread Law states", return_tensors="pt")
output = model.generate(
    **inputs, do_sample=False, max_new_tokens=50, cache_implementation="static"
)
if torch.distributed.get_rank() == 0:
    print(tokenizer.decode(output[0], skip_special_tokens=True))
"""

REPLICATION = """model = AutoModelForCausalLM.from_pretrained(
    "zai-org/GLM-4-9B-0414",
    dtype=torch.bfloat16,
    distributed_config=DistributedConfig(
        tp_size=4,
        tp_plan={
            "layers.*.self_attn.q_proj": "replicated_with_grad_allreduce",
            "layers.*.self_attn.k_proj": "replicated_with_grad_allreduce",
            "layers.*.self_attn.v_proj": "replicated_with_grad_allreduce",
            "layers.*.self_attn.o_proj": "replicated_with_grad_allreduce",
        },
    ),
)
"""
# The guide shows the replication example without its imports: those of the tensor-parallelism example.
REPLICATION_IMPORTS = """import torch
from transformers import AutoModelForCausalLM, DistributedConfig

"""


def have_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def transcribe(code, models, device=None, tensors=None, edits=()):
    """The guide's `code` for Tessera: the imports changed, model ids replaced per `models`, device_map="tpu"
    pointed at `device`, return_tensors="pt" kept when torch is here (else "np"), and any `edits` (old, new)
    of a variant, each of which must apply."""
    out = code.replace("from transformers import ", "from tessera import ")
    out = out.replace("import torch\n", "import tessera as torch\n")
    for guide_id, path in models.items():
        assert f'"{guide_id}"' in out
        out = out.replace(f'"{guide_id}"', repr(path))
    if device is not None:
        assert 'device_map="tpu"' in out
        out = out.replace('device_map="tpu"', f'device_map="{device}"')
    tensors = tensors or ("pt" if have_torch() else "np")
    out = out.replace('return_tensors="pt"', f'return_tensors="{tensors}"')
    for old, new in edits:
        assert old in out, old
        out = out.replace(old, new)
    return out


# After an example: its variables as one JSON line on stderr, for the test to compare (rank 0 only).
DUMP = """
import json as _json, sys as _sys
import numpy as _np
if __import__("tessera").distributed.get_rank() == 0:
    _sys.stderr.write("GUIDE-RESULT " + _json.dumps({_k: _np.asarray(_v).tolist() for _k, _v in {DUMPED}.items()})
                      + "\\n")
"""


def dump(**names):
    return DUMP.replace("{DUMPED}", "{" + ", ".join(f"{k!r}: {v}" for k, v in names.items()) + "}")


def run_script(tmp_path, code, launch=None, ranks=1, expect_ok=True):
    script = tmp_path / "example.py"
    script.write_text(code)
    cmd = [sys.executable, str(script)]
    if launch is not None:
        cmd = [launch, "launch", "--nproc-per-node", str(ranks), "--", *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    if expect_ok:
        assert r.returncode == 0, r.stderr
    result = None
    for line in r.stderr.splitlines():
        if line.startswith("GUIDE-RESULT "):
            result = json.loads(line[len("GUIDE-RESULT "):])
    return r, result


def devices():
    return ["cpu"] + (["xla-cpu"] if "xla-cpu" in tessera.devices() else [])


@pytest.fixture(scope="session")
def guide_golden():
    return golden(os.path.join("..", "guide", "golden.json"))


@pytest.fixture(scope="session")
def tiny_with_tokenizer(tmp_path_factory):
    """qwen3_tp4 with the tiny GPT-2 tokenizer beside it (as tools/make_guide_goldens.py assembles it)."""
    d = tmp_path_factory.mktemp("qwen3_tp4_tiny_gpt2")
    for f in ("config.json", "generation_config.json", "model.safetensors"):
        os.symlink(os.path.join(MODELS, "qwen3_tp4", f), d / f)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        os.symlink(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "tiny_gpt2", f), d / f)
    return str(d)


def test_transcriptions_are_the_guides_code():
    if not os.path.isfile(GUIDE):
        pytest.skip("the guide (shared/seed/google-tpu.pt.md) is not beside this checkout")
    with open(GUIDE, encoding="utf-8") as f:
        text = f.read()
    for code in (ACCELERATOR, INFERENCE, TENSOR_PARALLEL, REPLICATION):
        assert code.strip() in text


def test_accelerator_check(tmp_path):
    r, _ = run_script(tmp_path, transcribe(ACCELERATOR, {}))
    # What torch.accelerator would print here: whether a TPU or GPU is present, and how many.
    assert r.stdout == f"{tessera.accelerator.is_available()} {tessera.accelerator.device_count()}\n"


@pytest.mark.parametrize("device", devices())
def test_inference_example_as_written(tmp_path, smollm2, guide_golden, device):
    g = guide_golden["smollm2"]
    code = transcribe(INFERENCE, {"Qwen/Qwen3-0.6B": smollm2}, device) + dump(output="output[0]")
    r, res = run_script(tmp_path, code)
    ids = res["output"]
    n = len(g["input_ids"])
    assert ids[:n] == g["input_ids"]  # the prompt as Transformers' tokenizer encodes it, then the new tokens
    assert n < len(ids) <= n + 50 and (len(ids) == n + 50 or ids[-1] == g["eos_token_id"])
    assert r.stdout.startswith(guide_golden["prompt"]) and r.stdout.endswith("\n")


# disable_compile matters where generate compiles (xla-cpu); on cpu it changes nothing.
@pytest.mark.parametrize("device,disable_compile",
                         [("cpu", False)] + [(d, c) for d in devices()[1:] for c in (False, True)])
def test_inference_example_greedy_float32_equals_transformers(tmp_path, smollm2, guide_golden, device,
                                                              disable_compile):
    g = guide_golden["smollm2"]["float32"]
    edits = [('dtype="bfloat16"', 'dtype="float32"'), ("do_sample=True", "do_sample=False")]
    if disable_compile:  # the guide: "pass disable_compile=True to generate to turn it off"
        edits.append(('cache_implementation="static"', 'cache_implementation="static", disable_compile=True'))
    code = transcribe(INFERENCE, {"Qwen/Qwen3-0.6B": smollm2}, device, edits=edits) + dump(output="output[0]")
    r, res = run_script(tmp_path, code)
    assert res["output"] == g["output_ids"]
    assert r.stdout == g["text"] + "\n"


def test_pipeline_with_device(smollm2, guide_golden):
    # The guide: pass device="tpu" to the pipeline (here the test's device).
    g = guide_golden["smollm2"]["float32"]
    pipe = tessera.pipeline("text-generation", model=smollm2, device="cpu", dtype="float32")
    out = pipe(guide_golden["prompt"], do_sample=False, max_new_tokens=50, cache_implementation="static")
    assert out == [{"generated_text": g["text"]}]


def test_tensor_parallel_example_as_written(tmp_path, cli, tiny_with_tokenizer, guide_golden):
    g = guide_golden["qwen3_tp4_tiny_gpt2"]
    code = transcribe(TENSOR_PARALLEL, {"Qwen/Qwen3-8B": tiny_with_tokenizer}) + dump(
        output="output[0]", tp="[model.tp_rank, model.tp_size]")
    r, res = run_script(tmp_path, code, launch=cli, ranks=4)
    assert res["tp"] == [0, 4]
    n = len(g["input_ids"])
    assert res["output"][:n] == g["input_ids"] and len(res["output"]) == n + 50
    # bfloat16: the same tokens as one process running the same example code (no launcher, tp_size=1).
    one = transcribe(TENSOR_PARALLEL, {"Qwen/Qwen3-8B": tiny_with_tokenizer},
                     edits=[("DistributedConfig(tp_size=4)", "DistributedConfig(tp_size=1)")])
    r1, res1 = run_script(tmp_path, one + dump(output="output[0]"))
    assert res["output"] == res1["output"] and r.stdout == r1.stdout


def test_tensor_parallel_example_float32_equals_transformers(tmp_path, cli, tiny_with_tokenizer, guide_golden):
    g = guide_golden["qwen3_tp4_tiny_gpt2"]["float32"]
    code = transcribe(TENSOR_PARALLEL, {"Qwen/Qwen3-8B": tiny_with_tokenizer},
                      edits=[("dtype=torch.bfloat16", "dtype=torch.float32")]) + dump(output="output[0]")
    r, res = run_script(tmp_path, code, launch=cli, ranks=4)
    assert res["output"] == g["output_ids"]
    assert r.stdout == g["text"] + "\n"


def test_replication_example(tmp_path, cli):
    # GLM-4's 2 key-value heads on 4 ranks: the attention projections replicated, the MLP split.
    g = golden("glm4")
    case = g["forward"][2]
    code = transcribe(REPLICATION_IMPORTS + REPLICATION, {"zai-org/GLM-4-9B-0414": os.path.join(MODELS, "glm4")})
    code += f"logits = model([{case['input_ids']}]).logits[0]\n" + dump(logits="logits",
                                                                         tp="[model.tp_rank, model.tp_size]")
    r, res = run_script(tmp_path, code, launch=cli, ranks=4)
    assert res["tp"] == [0, 4]
    hf_own = g["forward_bf16_vs_fp32_max_abs"]  # Transformers' own bfloat16 error; the C++ tests' bound
    got = np.array(res["logits"], dtype=np.float32)
    assert np.abs(got - np.array(g["forward_bf16"][2]["logits"], dtype=np.float32)).max() <= 2 * hf_own
    assert np.abs(got - np.array(case["logits"], dtype=np.float32)).max() <= 1.25 * hf_own


def test_replication_needed_without_the_rules(tmp_path, cli):
    # The guide: without the rules, a model whose KV heads tp_size does not divide cannot split its attention.
    code = transcribe(REPLICATION_IMPORTS + REPLICATION, {"zai-org/GLM-4-9B-0414": os.path.join(MODELS, "glm4")},
                      edits=[('"replicated_with_grad_allreduce"', '"colwise"')])
    code = code.replace('"layers.*.self_attn.o_proj": "colwise"', '"layers.*.self_attn.o_proj": "rowwise"')
    r, _ = run_script(tmp_path, code, launch=cli, ranks=4, expect_ok=False)
    assert r.returncode != 0
    assert "2 key-value heads, which tp_size 4 does not divide" in r.stderr
