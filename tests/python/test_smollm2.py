"""SmolLM2 (the default GGUF): tokenizer, chat template, greedy generation and logits against Transformers'
goldens (tests/fixtures/models/smollm2_golden.json), and the same inputs through the `tessera` CLI."""

import json
import subprocess

import numpy as np

import tessera

CHAT = [{"role": "user", "content": "What is 2+2?"}]  # the golden's chat prompt (fixtures README)


def prompt(g, kind):
    return next(p for p in g["prompts"] if p["kind"] == kind)


def test_tokenizer_matches_transformers(smol_tok, smol_golden):
    tok = smol_tok
    t = smol_golden["tokenizer"]
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (
        t["bos_token_id"], t["eos_token_id"], t["pad_token_id"])
    for p in smol_golden["prompts"]:
        assert tok.encode(p["text"], add_special_tokens=p["add_special_tokens"]) == p["input_ids"]
        enc = tok(p["text"], add_special_tokens=p["add_special_tokens"])
        assert enc["input_ids"] == p["input_ids"] and enc.attention_mask == [1] * len(p["input_ids"])
        assert tok.decode(p["greedy_no_eos"]["output_ids"][len(p["input_ids"]):]) == p["greedy_no_eos"]["text"]


def test_chat_template_matches_transformers(smol_tok, smol_golden):
    p = prompt(smol_golden, "chat")
    assert smol_tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False) == p["text"]
    enc = smol_tok.apply_chat_template(CHAT, add_generation_prompt=True, return_tensors="np")
    assert enc["input_ids"].tolist() == [p["input_ids"]]
    assert smol_tok.apply_chat_template(CHAT, add_generation_prompt=True, return_dict=False) == p["input_ids"]


def test_padding_left_batch(smol_tok, smol_golden):
    texts = [p["text"] for p in smol_golden["prompts"] if p["kind"] != "chat"]
    enc = smol_tok(texts, return_tensors="np", padding=True, padding_side="left")
    width = max(len(smol_tok.encode(t)) for t in texts)
    assert enc["input_ids"].shape == (2, width) and enc["input_ids"].dtype == np.int64
    for row, mask, t in zip(enc["input_ids"], enc["attention_mask"], texts):
        ids = smol_tok.encode(t)
        assert row[width - len(ids):].tolist() == ids
        assert (row[: width - len(ids)] == smol_tok.pad_token_id).all()
        assert mask.tolist() == [0] * (width - len(ids)) + [1] * len(ids)


def test_greedy_and_logits_match_transformers(smol_f32, smol_golden):
    for kind in ("plain", "chat"):
        p = prompt(smol_golden, kind)
        g = p["greedy_no_eos"]
        out = smol_f32.generate(input_ids=np.array([p["input_ids"]]), do_sample=False,
                                max_new_tokens=g["max_new_tokens"], eos_token_id=[])
        assert out[0].tolist() == g["output_ids"], kind
    p = prompt(smol_golden, "chat")
    s = p["greedy_eos_stop"]
    out = smol_f32.generate(input_ids=[p["input_ids"]], max_new_tokens=s["max_new_tokens"], do_sample=False)
    assert out[0].tolist() == s["output_ids"]
    p = prompt(smol_golden, "plain")
    logits = smol_f32(np.array([p["input_ids"]])).logits[0, -1]
    top = p["last_logits_top100"]
    assert np.abs(logits[top["ids"]] - np.array(top["values"])).max() <= 1e-3  # the C++ test's tolerance


def run_cli(cli, *args, stdin=None):
    r = subprocess.run([cli, *args], input=stdin, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_generate_equals_cli(cli, smollm2, smol_f32, smol_tok):
    text = "Name three colours:"
    cli_out = json.loads(run_cli(cli, "generate", smollm2, "--prompt", text, "--greedy", "--max-new-tokens", "12",
                                 "--dtype", "float32", "--json", "--quiet"))
    enc = smol_tok(text, return_tensors="np")
    out = smol_f32.generate(**enc, do_sample=False, max_new_tokens=12)
    assert out[0].tolist() == cli_out["ids"]
    chat = [{"role": "user", "content": "Say hello."}]
    cli_out = json.loads(run_cli(cli, "generate", smollm2, "--chat", "--prompt", "Say hello.", "--greedy",
                                 "--max-new-tokens", "12", "--dtype", "float32", "--json", "--quiet"))
    enc = smol_tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="np")
    out = smol_f32.generate(**enc, do_sample=False, max_new_tokens=12)
    assert out[0].tolist() == cli_out["ids"]


def test_tokenize_equals_cli(cli, smollm2, smol_tok):
    text = "Héllo wörld — 123 tokens, ünïcode 🙂"
    cli_ids = [int(x) for x in run_cli(cli, "tokenize", smollm2, stdin=text).split()]
    assert smol_tok.encode(text, add_special_tokens=False) == cli_ids
    ids = ",".join(str(i) for i in cli_ids)
    assert smol_tok.decode(cli_ids) == run_cli(cli, "detokenize", smollm2, stdin=ids)
