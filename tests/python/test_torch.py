"""torch tensors in and out, where Transformers takes and gives them (return_tensors="pt", generate and
model(...) on tensors, torch dtypes), against the same goldens as the numpy path. Skipped without torch: its
PyPI wheel for Linux is the CUDA build (about 540 MB, plus several GB of nvidia-* packages it depends on), too
heavy for scripts/test.sh to install; run these with torch importable (e.g. the tools/requirements.txt venv on
PYTHONPATH)."""

import os

import numpy as np
import pytest

import tessera

from conftest import MODELS, golden

torch = pytest.importorskip("torch")


def test_tokenizer_and_chat_template_return_tensors_pt(smol_tok, smol_golden):
    texts = ["Hello", "The capital of France is"]
    pt = smol_tok(texts, return_tensors="pt", padding=True, padding_side="left")
    np_ = smol_tok(texts, return_tensors="np", padding=True, padding_side="left")
    for k in ("input_ids", "attention_mask"):
        assert isinstance(pt[k], torch.Tensor) and pt[k].dtype == torch.int64
        assert pt[k].tolist() == np_[k].tolist()
    chat = [{"role": "user", "content": "What is 2+2?"}]
    enc = smol_tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt")
    p = next(p for p in smol_golden["prompts"] if p["kind"] == "chat")
    assert isinstance(enc["input_ids"], torch.Tensor) and enc["input_ids"].tolist() == [p["input_ids"]]
    ids = smol_tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=False)
    assert isinstance(ids, torch.Tensor) and ids.tolist() == [p["input_ids"]]
    assert smol_tok.encode("Hello", return_tensors="pt").tolist() == [smol_tok.encode("Hello")]


def test_generate_on_tensors_returns_tensors(smol_f32, smol_tok, smol_golden):
    p = next(p for p in smol_golden["prompts"] if p["kind"] == "plain")
    g = p["greedy_no_eos"]
    ids = torch.tensor([p["input_ids"]])
    out = smol_f32.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                            max_new_tokens=g["max_new_tokens"], eos_token_id=[])
    assert isinstance(out, torch.Tensor) and out.dtype == torch.int64 and out.device == ids.device
    assert out[0].tolist() == g["output_ids"]
    # The decoders take tensors, as Transformers' do.
    assert smol_tok.decode(out[0, len(p["input_ids"]):]) == g["text"]
    assert smol_tok.batch_decode(out[:, len(p["input_ids"]):]) == [g["text"]]


def test_left_padded_tensors_and_streamer(smol_f32, smol_tok):
    texts = ["Hello", "The capital of France is"]
    pt = smol_tok(texts, return_tensors="pt", padding=True, padding_side="left")
    np_ = smol_tok(texts, return_tensors="np", padding=True, padding_side="left")
    a = smol_f32.generate(**pt, do_sample=False, max_new_tokens=6, eos_token_id=[])
    b = smol_f32.generate(**np_, do_sample=False, max_new_tokens=6, eos_token_id=[])
    assert isinstance(a, torch.Tensor) and a.tolist() == b.tolist()
    enc = smol_tok("Hello", return_tensors="pt")
    streamer = tessera.TextIteratorStreamer(smol_tok, skip_prompt=True)
    out = smol_f32.generate(**enc, streamer=streamer, do_sample=False, max_new_tokens=6, eos_token_id=[])
    assert "".join(streamer) == smol_tok.decode(out[0, enc["input_ids"].shape[1]:])


@pytest.mark.parametrize("name", ["qwen3_tied", "llama_gqa"])
def test_logits_on_tensors_and_torch_dtypes(name):
    g = golden(name)
    m = tessera.AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, name), dtype=torch.float32)
    assert m.dtype == "float32"
    case = g["forward"][1]
    logits = m(torch.tensor([case["input_ids"]])).logits
    assert isinstance(logits, torch.Tensor) and logits.dtype == torch.float32
    np.testing.assert_allclose(logits[0].numpy(), np.array(case["logits"], dtype=np.float32), atol=1e-4, rtol=0)
    bf16 = tessera.AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, name), torch_dtype=torch.bfloat16)
    assert bf16.dtype == "bfloat16"
    with pytest.raises(ValueError, match="dtype"):
        tessera.AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, name), dtype=torch.float64)


def test_pipeline_and_errors_with_tensors(smol_f32, smol_tok):
    with pytest.raises(ValueError, match="must hold integers"):
        smol_f32.generate(input_ids=torch.tensor([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="2-D"):
        smol_f32.generate(input_ids=torch.ones((1, 2, 3), dtype=torch.int64))
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="attention_mask has shape"):
        smol_f32.generate(input_ids=ids, attention_mask=torch.ones((1, 2), dtype=torch.int64))
