"""model(input_ids, attention_mask).logits on padded batches: each row's real positions against Transformers'
goldens (the unpadded forward cases, and the left-padded batch's last-position logits that Transformers computed
with position ids from the mask) and against the same row run alone; 0 at padding; bad masks refused."""

import os

import numpy as np
import pytest

import tessera

from conftest import MODELS, TINY, golden

_loaded = {}


def model(name):
    if name not in _loaded:
        _loaded[name] = tessera.AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, name), dtype="float32")
    return _loaded[name]


def padded(rows, side, pad_id):
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for b, r in enumerate(rows):
        at = slice(width - len(r), width) if side == "left" else slice(0, len(r))
        ids[b, at], mask[b, at] = r, 1
    return ids, mask


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("name", TINY)
def test_padded_rows_equal_transformers_and_alone(name, side):
    g = golden(name)
    m = model(name)
    rows = [case["input_ids"] for case in g["forward"]]
    assert len({len(r) for r in rows}) > 1  # rows of different lengths, so some are padded
    ids, mask = padded(rows, side, pad_id=g["batched"]["pad_token_id"] or 0)
    logits = m(input_ids=ids, attention_mask=mask).logits
    assert logits.shape == (len(rows), ids.shape[1], m.config.vocab_size) and logits.dtype == np.float32
    for b, case in enumerate(g["forward"]):
        real = mask[b].astype(bool)
        np.testing.assert_allclose(logits[b][real], np.array(case["logits"], dtype=np.float32), atol=1e-4, rtol=0)
        alone = m(np.array([case["input_ids"]])).logits[0]
        np.testing.assert_allclose(logits[b][real], alone, atol=1e-4, rtol=0)
        assert not logits[b][~real].any()  # padding positions hold 0


@pytest.mark.parametrize("name", TINY)
def test_left_padded_last_logits_equal_transformers(name):
    b = golden(name)["batched"]
    assert b["padding_side"] == "left" and any(0 in row for row in b["attention_mask"])
    logits = model(name)(np.array(b["input_ids"]), attention_mask=np.array(b["attention_mask"])).logits
    np.testing.assert_allclose(logits[:, -1, :], np.array(b["prefill_last_logits"], dtype=np.float32), atol=1e-4,
                               rtol=0)


def test_tokenizer_left_padding_on_smollm2(smol_f32, smol_tok, smol_golden):
    plain = next(p for p in smol_golden["prompts"] if p["kind"] == "plain")
    texts = ["Hi", plain["text"], "Once upon a time, in a land far away, there lived a"]
    enc = smol_tok(texts, padding=True, padding_side="left", return_tensors="np")
    assert enc["input_ids"][1, enc["attention_mask"][1] == 1].tolist() == plain["input_ids"]
    assert (enc["attention_mask"] == 0).any()
    logits = smol_f32(**enc).logits
    worst = 0.0
    for b, text in enumerate(texts):
        alone = smol_f32(smol_tok(text, return_tensors="np")["input_ids"]).logits[0]
        real = enc["attention_mask"][b].astype(bool)
        worst = max(worst, float(np.abs(logits[b][real] - alone).max()))
        assert not logits[b][~real].any()
    print(f"SmolLM2 left-padded rows against each row alone: max |logit difference| {worst:.3g}")
    assert worst <= 1e-3, worst  # SmolLM2's forward tolerance (test_smollm2.py, the C++ test's)
    top = plain["last_logits_top100"]  # Transformers' float32 logits at the prompt's last position
    assert np.abs(logits[1, -1, top["ids"]] - np.array(top["values"])).max() <= 1e-3


def test_padded_rows_on_xla_cpu():
    if "xla-cpu" not in tessera.devices():
        pytest.skip("no XLA CPU plugin (scripts/setup.sh installs it into .venv)")
    g = golden("qwen3_tied")
    m = tessera.AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, "qwen3_tied"), dtype="float32",
                                                     device_map="xla-cpu")
    b = g["batched"]
    mask = np.array(b["attention_mask"])
    logits = m(np.array(b["input_ids"]), attention_mask=mask).logits
    np.testing.assert_allclose(logits[:, -1, :], np.array(b["prefill_last_logits"], dtype=np.float32), atol=1e-4,
                               rtol=0)
    assert not logits[mask == 0].any()
    ids, mask = padded([case["input_ids"] for case in g["forward"]], "right", pad_id=0)
    logits = m(ids, attention_mask=mask).logits
    for row, case in enumerate(g["forward"]):
        np.testing.assert_allclose(logits[row][mask[row] == 1], np.array(case["logits"], dtype=np.float32),
                                   atol=1e-4, rtol=0)


@pytest.mark.parametrize("mask, message", [
    ([[1, 1, 1]], "shape"),
    ([[1, 2, 1, 1]], "only 0 and 1"),
    ([[0, 0, 0, 0]], "row 0 masks every token"),
    ([[1, 0, 1, 1]], "row 0 has a 0 between real tokens"),
])
def test_bad_masks_are_refused(mask, message):
    m = model(TINY[0])
    with pytest.raises(ValueError, match=message):
        m(np.array([[5, 6, 7, 8]]), attention_mask=np.array(mask))
