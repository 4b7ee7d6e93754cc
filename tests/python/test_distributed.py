"""Tensor parallelism from Python: DistributedConfig(tp_size=2) and tp_plan="auto" in a script run under
`tessera launch --nproc-per-node 2` give the greedy tokens and logits of one process (and of Transformers'
goldens); tessera.distributed's rank and world size; the errors (a tp_size that is not the launched world size,
no launcher, bad plans)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tessera

from conftest import MODELS, golden

SCRIPT = """
import json, sys
import numpy as np
import tessera

model = tessera.AutoModelForCausalLM.from_pretrained({path!r}, dtype="float32", {how})
g = json.load(open({golden!r}))
ids = [c["input_ids"] for c in g["greedy"]]
out = [model.generate(input_ids=[i], do_sample=False, max_new_tokens=32, eos_token_id=[])[0].tolist() for i in ids]
b = g["batched"]
batched = model.generate(input_ids=np.array(b["input_ids"]), attention_mask=np.array(b["attention_mask"]),
                         do_sample=False, max_new_tokens=b["max_new_tokens"], eos_token_id=[],
                         pad_token_id=b["pad_token_id"]).tolist()
logits = model([g["forward"][2]["input_ids"]]).logits[0]
if tessera.distributed.get_rank() == 0:
    print(json.dumps({{"greedy": out, "batched": batched, "logits": logits.tolist(),
                      "tp": [model.tp_rank, model.tp_size], "rank": tessera.distributed.get_rank(),
                      "world": tessera.distributed.get_world_size()}}))
"""


def launch(cli, tmp_path, code, ranks=2):
    script = tmp_path / "tp.py"
    script.write_text(code)
    return subprocess.run([cli, "launch", "--nproc-per-node", str(ranks), "--", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name,how", [
    ("qwen3_tp4", "distributed_config=tessera.DistributedConfig(tp_size=2)"),
    ("llama_tp4", 'tp_plan="auto"'),
    # glm4's 2 key-value heads split over 2 ranks; its plan rules as DistributedConfig.tp_plan
    ("glm4", 'distributed_config=tessera.DistributedConfig(tp_size=2, tp_plan={"layers.*.mlp.down_proj": "rowwise"})'),
])
def test_tp2_equals_one_process_and_transformers(cli, tmp_path, name, how):
    g = golden(name)
    code = SCRIPT.format(path=os.path.join(MODELS, name), how=how, golden=os.path.join(MODELS, name, "golden.json"))
    r = launch(cli, tmp_path, code)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["tp"] == [0, 2] and got["rank"] == 0 and got["world"] == 2
    one = tessera.AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, name), dtype="float32")
    for case, ids in zip(g["greedy"], got["greedy"]):
        alone = one.generate(input_ids=[case["input_ids"]], do_sample=False, max_new_tokens=32, eos_token_id=[])
        assert ids == alone[0].tolist() == case["output_ids"]
    assert got["batched"] == g["batched"]["output_ids"]
    logits = np.array(got["logits"], dtype=np.float32)
    np.testing.assert_allclose(logits, one([g["forward"][2]["input_ids"]]).logits[0], atol=1e-4, rtol=0)
    np.testing.assert_allclose(logits, np.array(g["forward"][2]["logits"], dtype=np.float32), atol=1e-4, rtol=0)


def test_tp_size_other_than_the_launched_ranks(cli, tmp_path):
    code = ("import tessera\ntessera.AutoModelForCausalLM.from_pretrained("
            f"{os.path.join(MODELS, 'qwen3_tp4')!r}, distributed_config=tessera.DistributedConfig(tp_size=4))\n")
    r = launch(cli, tmp_path, code)
    assert r.returncode != 0
    assert "tp_size 4 but this job has 2 ranks; start the script with tessera launch --nproc-per-node 4" in r.stderr


def test_errors_outside_a_launcher(monkeypatch):
    for v in ("WORLD_SIZE", "RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(v, raising=False)
    path = os.path.join(MODELS, "qwen3_tp4")
    with pytest.raises(ValueError, match=r"not started by a launcher; run: tessera launch --nproc-per-node 2 --"):
        tessera.AutoModelForCausalLM.from_pretrained(path, distributed_config=tessera.DistributedConfig(tp_size=2))
    with pytest.raises(ValueError, match="not started by a launcher"):
        tessera.AutoModelForCausalLM.from_pretrained(path, tp_plan="auto")
    with pytest.raises(ValueError, match="not started by a launcher"):
        tessera.AutoModelForCausalLM.from_pretrained(path, distributed_config=tessera.DistributedConfig())
    # tp_size 1 is one process, launched or not.
    m = tessera.AutoModelForCausalLM.from_pretrained(path, distributed_config=tessera.DistributedConfig(tp_size=1))
    assert (m.tp_rank, m.tp_size) == (0, 1)
    assert tessera.distributed.get_rank() == 0 and tessera.distributed.get_world_size() == 1
    assert not tessera.distributed.is_initialized()


def test_rank_and_world_from_the_launcher(monkeypatch):
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE", raising=False)
    monkeypatch.delenv("OMPI_COMM_WORLD_RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    assert (tessera.distributed.get_rank(), tessera.distributed.get_world_size()) == (3, 4)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")  # mpirun's numbering wins, as the tessera command reads it
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    assert (tessera.distributed.get_rank(), tessera.distributed.get_world_size()) == (1, 2)
    assert tessera.distributed.is_initialized()
    monkeypatch.setenv("RANK", "x")
    monkeypatch.delenv("OMPI_COMM_WORLD_RANK")
    with pytest.raises(ValueError, match="RANK='x'"):
        tessera.distributed.get_rank()


def test_bad_distributed_arguments():
    path = os.path.join(MODELS, "qwen3_tp4")
    with pytest.raises(ValueError, match="tp_size must be an integer >= 1"):
        tessera.DistributedConfig(tp_size=0)
    with pytest.raises(ValueError, match="unsupported arguments"):
        tessera.DistributedConfig(tp_size=2, enable_expert_parallel=True)
    with pytest.raises(ValueError, match="unknown style 'colwize'"):
        tessera.DistributedConfig(tp_size=2, tp_plan={"layers.*.mlp.up_proj": "colwize"})
    with pytest.raises(ValueError, match="must be a dict"):
        tessera.DistributedConfig(tp_size=2, tp_plan=["layers.*.mlp.up_proj"])
    with pytest.raises(ValueError, match="distributed_config must be a tessera.DistributedConfig"):
        tessera.AutoModelForCausalLM.from_pretrained(path, distributed_config={"tp_size": 2})
    with pytest.raises(ValueError, match='tp_plan must be "auto" or a dict'):
        tessera.AutoModelForCausalLM.from_pretrained(path, tp_plan="balanced")
    # A plan rule matching no module is the engine's error, as a TesseraError.
    with pytest.raises(tessera.TesseraError, match="nothing"):
        tessera.AutoModelForCausalLM.from_pretrained(
            path, distributed_config=tessera.DistributedConfig(tp_size=1, tp_plan={"layers.*.nothing": "colwise"}))


def test_dtype_constants():
    path = os.path.join(MODELS, "qwen3_tied")
    assert tessera.AutoModelForCausalLM.from_pretrained(path, dtype=tessera.bfloat16).dtype == "bfloat16"
    assert tessera.AutoModelForCausalLM.from_pretrained(path, dtype=tessera.float32).dtype == "float32"
    assert repr(tessera.float16) == "tessera.float16"


def test_dtype_quantised_at_load():
    # dtype="q8_0" as the command's --dtype q8_0: the float checkpoint's matrices quantised at load; logits near
    # the float32 load's (the C++ suite bounds them against Transformers: test_quantize_at_load.cpp).
    path = os.path.join(MODELS, "qwen3_tied")
    q = tessera.AutoModelForCausalLM.from_pretrained(path, dtype="q8_0")
    assert q.dtype == "q8_0"
    f = tessera.AutoModelForCausalLM.from_pretrained(path, dtype="float32")
    ids = np.array([[3, 17, 5, 40, 11, 29, 7, 2, 33]])
    diff = np.abs(q(ids).logits - f(ids).logits).max()
    assert 0 < diff < 0.35, diff
    if "xla-cpu" in tessera.devices():
        # On a PJRT device the blocks go up as int8 and scales, dequantised in the program: the same values, so
        # logits as near the float32 load's (the C++ suite compares the two devices within 1e-5).
        x = tessera.AutoModelForCausalLM.from_pretrained(path, dtype="q8_0", device_map="xla-cpu")
        assert x.dtype == "q8_0"
        assert 0 < np.abs(x(ids).logits - f(ids).logits).max() < 0.35
    # q4_k: blocks of 256, so on this 64-wide model every matrix stays float32 (the logits are the float load's).
    k = tessera.AutoModelForCausalLM.from_pretrained(path, dtype="q4_k")
    assert k.dtype == "q4_k"
    assert np.array_equal(k(ids).logits, f(ids).logits)


def test_collective_timeout_from_the_environment(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("TESSERA_COLLECTIVE_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="TESSERA_COLLECTIVE_TIMEOUT='soon' is not a number of seconds"):
        tessera.AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, "qwen3_tp4"), tp_plan="auto")
    monkeypatch.setenv("TESSERA_COLLECTIVE_TIMEOUT", "7.5")
    assert tessera.distributed.resolve(None, "auto", "cpu")["collective_timeout_s"] == 7.5


def test_ranks_started_without_mpi(monkeypatch):
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE", raising=False)
    monkeypatch.delenv("OMPI_COMM_WORLD_RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ValueError, match="needs the ranks started through MPI"):
        tessera.AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, "qwen3_tp4"), tp_plan="auto")


def test_gguf_blocks_kept_are_listed():
    # A GGUF's block matrices stay as stored on the cpu device; info() lists them by format, as --json does.
    path = os.path.join(os.path.dirname(MODELS), "io", "tiny_kquants.gguf")
    info = tessera.AutoModelForCausalLM.from_pretrained(path)._lm.info()
    with open(os.path.join(os.path.dirname(MODELS), "io", "tiny_kquants_expected.json")) as f:
        assert info["quantized_matrices"] == json.load(f)["block_matrices"]
    assert tessera.AutoModelForCausalLM.from_pretrained(path, dtype="float32")._lm.info()["quantized_matrices"] == {}
