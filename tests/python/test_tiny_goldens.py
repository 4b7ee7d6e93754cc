"""The tiny checkpoints against Transformers' goldens (tests/fixtures/models/*/golden.json), through the Python API:
model(input_ids).logits, greedy generate, left-padded batches, eos stopping and repetition penalty."""

import json
import os

import numpy as np
import pytest

import tessera

from conftest import MODELS, TINY, golden, recurrent

_loaded = {}


def model(name):
    if name not in _loaded:
        _loaded[name] = tessera.AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, name), dtype="float32")
    return _loaded[name]


@pytest.mark.parametrize("name", TINY)
def test_forward_logits(name):
    g = golden(name)
    m = model(name)
    for case in g["forward"]:
        logits = m(np.array([case["input_ids"]])).logits
        assert logits.shape == (1, len(case["input_ids"]), m.config.vocab_size)
        assert logits.dtype == np.float32
        np.testing.assert_allclose(logits[0], np.array(case["logits"], dtype=np.float32), atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", TINY)
def test_greedy_and_repetition_penalty(name):
    g = golden(name)
    m = model(name)
    for case in g["greedy"]:
        out = m.generate(input_ids=np.array([case["input_ids"]]), do_sample=False,
                         max_new_tokens=case["max_new_tokens"], eos_token_id=[])
        assert out.dtype == np.int64
        assert out[0].tolist() == case["output_ids"]
    for case in g["repetition_penalty"]:
        cfg = tessera.GenerationConfig(do_sample=False, max_new_tokens=case["max_new_tokens"], eos_token_id=[],
                                       repetition_penalty=case["repetition_penalty"])
        out = m.generate(input_ids=[case["input_ids"]], generation_config=cfg)
        assert out[0].tolist() == case["output_ids"]


@pytest.mark.parametrize("name", TINY)
def test_an_assistant_model_gives_the_golden_greedy_tokens(name):
    # Transformers' generate(assistant_model=...): the model drafting for itself changes no token.
    g = golden(name)
    m = model(name)
    if recurrent(name):  # refused by name: a recurrent state cannot be rewound past rejected drafts
        with pytest.raises(tessera.TesseraError, match="recurrent state"):
            m.generate(input_ids=np.array([[5, 6]]), assistant_model=m, max_new_tokens=2)
        return
    for case in g["greedy"]:
        out = m.generate(input_ids=np.array([case["input_ids"]]), do_sample=False, assistant_model=m,
                         num_assistant_tokens=5, max_new_tokens=case["max_new_tokens"], eos_token_id=[])
        assert out[0].tolist() == case["output_ids"]
        assert m.last_stats["draft_tokens"] > 0
    with pytest.raises(ValueError, match="assistant_model"):
        m.generate(input_ids=np.array([[5, 6]]), assistant_model="small", max_new_tokens=2)
    with pytest.raises(ValueError, match="num_assistant_tokens"):
        m.generate(input_ids=np.array([[5, 6]]), assistant_model=m, num_assistant_tokens=0, max_new_tokens=2)


@pytest.mark.parametrize("name", TINY)
def test_prompt_lookup_gives_the_golden_greedy_tokens(name):
    # Transformers' prompt_lookup_num_tokens: speculative decoding that changes no token.
    g = golden(name)
    m = model(name)
    for case in g["greedy"]:
        out = m.generate(input_ids=np.array([case["input_ids"]]), do_sample=False, prompt_lookup_num_tokens=4,
                         max_matching_ngram_size=2, max_new_tokens=case["max_new_tokens"], eos_token_id=[])
        assert out[0].tolist() == case["output_ids"]
    with pytest.raises(ValueError, match="prompt_lookup_num_tokens"):
        m.generate(input_ids=np.array([[5, 6]]), prompt_lookup_num_tokens=-1, max_new_tokens=2)


@pytest.mark.parametrize("name", TINY)
def test_left_padded_batch_and_eos(name):
    g = golden(name)
    m = model(name)
    b = g["batched"]
    out = m.generate(input_ids=np.array(b["input_ids"]), attention_mask=np.array(b["attention_mask"]),
                     do_sample=False, max_new_tokens=b["max_new_tokens"], eos_token_id=[],
                     pad_token_id=b["pad_token_id"])
    assert out.tolist() == b["output_ids"]
    e = g["eos"]
    out = m.generate(input_ids=np.array(e["batched"]["input_ids"]),
                     attention_mask=np.array(e["batched"]["attention_mask"]), do_sample=False,
                     max_new_tokens=e["max_new_tokens"], eos_token_id=e["eos_token_id"],
                     pad_token_id=e["pad_token_id"])
    assert out.tolist() == e["batched"]["output_ids"]


def test_xla_cpu_device_map():
    if "xla-cpu" not in tessera.devices():
        pytest.skip("no XLA CPU plugin (scripts/setup.sh installs it into .venv)")
    g = golden("qwen3_tied")
    m = tessera.AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, "qwen3_tied"), dtype="float32",
                                                     device_map="xla-cpu")
    assert m.device == "xla-cpu"
    case = g["forward"][1]
    np.testing.assert_allclose(m([case["input_ids"]]).logits[0], np.array(case["logits"], dtype=np.float32),
                               atol=1e-4, rtol=0)
    case = g["greedy"][0]
    out = m.generate(input_ids=[case["input_ids"]], do_sample=False, max_new_tokens=case["max_new_tokens"],
                     eos_token_id=[])
    assert out[0].tolist() == case["output_ids"]


def test_rope_scalings_past_the_original_length():
    """The dynamic / longrope / yarn variants (tests/fixtures/variants) through the Python API: logits at every
    position of a 300-token prompt and greedy tokens as Transformers computes them, and the context limit."""
    variants = os.path.join(os.path.dirname(MODELS), "variants")
    for name in ("llama_dynamic", "phi3_longrope", "qwen3_yarn_long"):
        d = os.path.join(variants, name)
        with open(os.path.join(d, "golden.json")) as f:
            g = json.load(f)
        m = tessera.AutoModelForCausalLM.from_pretrained(d, dtype="float32")
        case = g["forward"][1]
        logits = m(np.array([case["input_ids"]])).logits
        np.testing.assert_allclose(logits[0], np.array(case["logits"], dtype=np.float32), atol=1e-4, rtol=0)
        for case in g["greedy"]:
            out = m.generate(input_ids=np.array([case["input_ids"]]), do_sample=False,
                             max_new_tokens=case["max_new_tokens"], eos_token_id=[])
            assert out[0].tolist() == case["output_ids"], name
        assert m.config.context_limit >= m.config.max_position_embeddings
    dynamic = tessera.AutoModelForCausalLM.from_pretrained(os.path.join(variants, "llama_dynamic"))
    assert dynamic.config.context_limit > 1 << 20


def test_kv_cache_dtype():
    """from_pretrained(kv_cache_dtype=...) (vLLM's name): q8_0 and fp8 caches report themselves and give logits
    near the float32 cache's; an unknown name is an error naming it."""
    d = os.path.join(MODELS, "qwen3_tied")
    ids = np.array([[5, 9, 17, 33, 2, 71, 40, 8, 100, 3, 11, 64]])
    ref = tessera.AutoModelForCausalLM.from_pretrained(d, dtype="float32")
    assert ref.kv_cache_dtype == "float32"
    want = ref(ids).logits[0]
    for kv, name, bound in (("q8_0", "q8_0", 0.02), ("fp8", "float8_e4m3fn", 0.08)):
        m = tessera.AutoModelForCausalLM.from_pretrained(d, dtype="float32", kv_cache_dtype=kv)
        assert m.kv_cache_dtype == name
        got = m(ids).logits[0]
        gap = np.abs(got - want).max() / np.abs(want).max()
        assert 0 < gap <= bound, (kv, gap)
    with pytest.raises(Exception, match="'int4'"):
        tessera.AutoModelForCausalLM.from_pretrained(d, kv_cache_dtype="int4")
    if "xla-cpu" in tessera.devices():  # PJRT: the same q8_0 bytes, quantised in the compiled step
        cpu = tessera.AutoModelForCausalLM.from_pretrained(d, dtype="float32", kv_cache_dtype="q8_0")
        x = tessera.AutoModelForCausalLM.from_pretrained(d, dtype="float32", kv_cache_dtype="q8_0",
                                                         device_map="xla-cpu")
        assert x.kv_cache_dtype == "q8_0"
        near = cpu(ids).logits[0]
        assert np.abs(x(ids).logits[0] - near).max() / np.abs(near).max() <= 2e-3
