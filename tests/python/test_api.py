"""Streamers, the pipeline, the device queries and the errors of the Python API (on SmolLM2, greedy, short)."""

import os
import threading

import numpy as np
import pytest

import tessera

from conftest import MODELS


def test_text_iterator_streamer_while_another_thread_generates(smol_f32, smol_tok):
    enc = smol_tok("The capital of France is", return_tensors="np")
    streamer = tessera.TextIteratorStreamer(smol_tok, skip_prompt=True)
    results = {}

    def streamed():
        results["streamed"] = smol_f32.generate(**enc, streamer=streamer, do_sample=False, max_new_tokens=10,
                                                eos_token_id=[])

    def other():
        other_enc = smol_tok("Once upon a time", return_tensors="np")
        results["other"] = smol_f32.generate(**other_enc, do_sample=False, max_new_tokens=10, eos_token_id=[])

    threads = [threading.Thread(target=streamed), threading.Thread(target=other)]
    for t in threads:
        t.start()
    pieces = list(streamer)  # iterated here while both threads compute (the engine releases the GIL)
    for t in threads:
        t.join()
    new = results["streamed"][0, enc["input_ids"].shape[1]:]
    assert len(pieces) >= 1 and "".join(pieces) == smol_tok.decode(new)
    alone = smol_f32.generate(**smol_tok("Once upon a time", return_tensors="np"), do_sample=False,
                              max_new_tokens=10, eos_token_id=[])
    assert results["other"].tolist() == alone.tolist()


def test_text_streamer_prints_prompt_and_reply(smol_f32, smol_tok, capsys):
    text = "The capital of France is"
    out = smol_f32.generate(**smol_tok(text, return_tensors="np"), streamer=tessera.TextStreamer(smol_tok),
                            do_sample=False, max_new_tokens=6, eos_token_id=[])
    assert capsys.readouterr().out == smol_tok.decode(out[0]) + "\n"


def test_pipeline_string_list_and_chat(smol_f32, smol_tok):
    pipe = tessera.pipeline("text-generation", model=smol_f32, tokenizer=smol_tok, do_sample=False)
    text = "The capital of France is"
    out = smol_f32.generate(**smol_tok(text, return_tensors="np"), do_sample=False, max_new_tokens=8)
    expected = text + smol_tok.decode(out[0, len(smol_tok.encode(text)):], skip_special_tokens=True)
    assert pipe(text, max_new_tokens=8) == [{"generated_text": expected}]
    assert pipe([text, text], max_new_tokens=8) == [[{"generated_text": expected}]] * 2
    chat = [{"role": "user", "content": "What is 2+2?"}]
    enc = smol_tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="np")
    out = smol_f32.generate(**enc, do_sample=False, max_new_tokens=8)
    reply = smol_tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    assert pipe(chat, max_new_tokens=8) == [{"generated_text": chat + [{"role": "assistant", "content": reply}]}]


def test_sampling_is_seeded_and_batched(smol_f32, smol_tok):
    enc = smol_tok(["Hello", "The capital of France is"], return_tensors="np", padding=True, padding_side="left")
    cfg = tessera.GenerationConfig(do_sample=True, temperature=0.7, top_k=20, top_p=0.9, min_p=0.05, seed=7,
                                   max_new_tokens=5, cache_implementation="static")
    a = smol_f32.generate(**enc, generation_config=cfg)
    b = smol_f32.generate(**enc, generation_config=cfg)
    assert a.shape == (2, enc["input_ids"].shape[1] + 5) and (a == b).all()
    assert (a[:, : enc["input_ids"].shape[1]] == enc["input_ids"]).all()


def test_devices():
    assert "cpu" in tessera.devices()
    assert isinstance(tessera.accelerator.is_available(), bool)
    assert tessera.accelerator.device_count() >= 0
    counts = dict(tessera._tessera.probe_devices())  # what device_count() reads for an accelerator
    assert counts["cpu"] == 1 and set(counts) == set(tessera.devices())


def test_errors(smol_f32, smol_tok):
    missing = os.path.join(MODELS, "no_such_model")
    with pytest.raises(FileNotFoundError) as e:
        tessera.AutoModelForCausalLM.from_pretrained(missing)
    assert isinstance(e.value, tessera.TesseraError) and "\n" not in str(e.value)
    with pytest.raises(FileNotFoundError):
        tessera.AutoTokenizer.from_pretrained(missing)
    with pytest.raises(ValueError, match="dtype"):
        tessera.AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, "qwen3_tied"), dtype="float64")
    ids = smol_tok("Hello", return_tensors="np")["input_ids"]
    with pytest.raises(ValueError, match="num_beams"):
        smol_f32.generate(input_ids=ids, num_beams=4)
    with pytest.raises(ValueError, match="unequal"):
        smol_f32.generate(input_ids=[[1, 2, 3], [4, 5]])
    with pytest.raises(ValueError, match="padding=True"):
        smol_tok(["Hello", "Hello there, world"], return_tensors="np")
    with pytest.raises(ValueError, match="top_p") as e:
        smol_f32.generate(input_ids=ids, do_sample=True, top_p=0.0)
    assert isinstance(e.value, tessera.TesseraError)
    with pytest.raises(ValueError):
        tessera.GenerationConfig(typical_p=0.5)
    with pytest.raises(tessera.TesseraError):
        smol_f32.generate(input_ids=ids, max_length=1)  # the prompt already reaches max_length


def test_streamer_exception_stops_generation(smol_f32, smol_tok):
    class Failing(tessera.TextStreamer):
        def on_finalized_text(self, text, stream_end=False):
            if not stream_end:
                raise KeyError("from the streamer")

    with pytest.raises(KeyError, match="from the streamer"):
        smol_f32.generate(**smol_tok("Hello", return_tensors="np"), streamer=Failing(smol_tok, skip_prompt=True),
                          do_sample=False, max_new_tokens=5, eos_token_id=[])
