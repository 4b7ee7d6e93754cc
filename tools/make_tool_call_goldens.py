#!/usr/bin/env python3
"""Goldens for src/serve/tool_calls.cpp's parser: what vLLM's own tool parsers (and, where it has one,
Transformers' response parser) make of realistic model outputs in each format. Writes
tests/fixtures/tool_calls/goldens.json, which tests/test_serve_tool_calls.cpp compares against.

The cases are well-formed outputs and plain prose, where the formats leave no room for interpretation.
(Malformed and unfinished calls are not here: vLLM keeps parts of them, or drops them, where tessera returns
them as content verbatim; the C++ tests cover those from the formats themselves.)

Needs Transformers 5 (its utils.chat_parsing) and vLLM's Python sources; vLLM need not be installed or
built: its wheel unpacked, plus the few pure-Python packages its tool parsers import, is enough and runs on a
CPU. For example, with the Python of /work/venv-gold:

  PY=/work/venv-gold/bin/python
  $PY -m pip download vllm==0.34.0 --no-deps -d /tmp/vllm-dl
  mkdir -p /tmp/vllm-pkg && unzip -q -o /tmp/vllm-dl/vllm-0.34.0-*.whl 'vllm/*' -d /tmp/vllm-pkg
  $PY -m pip install --target /tmp/vllm-deps openai pyzmq aiohttp fastapi pillow pybase64 cachetools \
      prometheus_client openai-harmony cbor2 msgspec cloudpickle uvloop py-cpuinfo partial-json-parser \
      xgrammar ijson mistral-common
  PYTHONPATH=/tmp/vllm-pkg:/tmp/vllm-deps $PY tools/make_tool_call_goldens.py

The tokenizer the parsers are built with is the repository's tiny Llama-3 fixture, with each format's marker
tokens added as special tokens (the parsers look them up in the vocabulary; vLLM's Mistral parser reads the
array form when the vocabulary has no [ARGS], the NAME[ARGS]{...} form when it has).
"""

import argparse
import json
import logging
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "tiny_llama3")
OUT = os.path.join(ROOT, "tests", "fixtures", "tool_calls", "goldens.json")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "filters": {"type": "object"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "exact": {"type": "boolean"},
                    "limit": {"type": ["integer", "null"]},
                    "score": {"type": "number"},
                },
                "required": ["query"],
            },
        },
    },
]

WEATHER = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
TIME = '{"name": "get_time", "arguments": {}}'
NESTED_ARGS = (
    '{"query": "caf\u00e9 \u6771\u4eac \U0001f600", "filters": {"lang": "fr", "range": {"min": 1, "max": 2.5}}, '
    '"tags": ["a", "b"], "exact": true, "limit": null}'
)
PROSE = "The weather in Paris is sunny today, around 21 degrees."

# (our format name, vLLM parser, tokenizer markers, also Transformers, text)
CASES = [
    ("hermes", "hermes", [], True, f"<tool_call>\n{WEATHER}\n</tool_call>"),
    ("hermes", "hermes", [], True, f"<tool_call>\n{WEATHER}\n</tool_call>\n<tool_call>\n{TIME}\n</tool_call>"),
    ("hermes", "hermes", [], True, f"I'll check the weather for you.\n\n<tool_call>\n{WEATHER}\n</tool_call>"),
    ("hermes", "hermes", [], True, '<tool_call>{"name":"get_time","arguments":{}}</tool_call>'),
    ("hermes", "hermes", [], True, f'<tool_call>\n{{"name": "search", "arguments": {NESTED_ARGS}}}\n</tool_call>'),
    ("hermes", "hermes", [], True, PROSE),
    ("llama3_json", "llama3_json", ["<|python_tag|>"], False, '{"name": "get_weather", "parameters": {"city": "Paris"}}'),
    ("llama3_json", "llama3_json", ["<|python_tag|>"], False,
     '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}'),
    ("llama3_json", "llama3_json", ["<|python_tag|>"], False,
     '{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_time", "parameters": {}}'),
    ("llama3_json", "llama3_json", ["<|python_tag|>"], False, f'{{"name": "search", "parameters": {NESTED_ARGS}}}'),
    ("llama3_json", "llama3_json", ["<|python_tag|>"], False, '{"name": "get_weather", "arguments": {"city": "Rome"}}'),
    ("llama3_json", "llama3_json", ["<|python_tag|>"], False, PROSE),
    ("mistral", "mistral", ["[TOOL_CALLS]"], False, f"[TOOL_CALLS] [{WEATHER}]"),
    ("mistral", "mistral", ["[TOOL_CALLS]"], False, f"[TOOL_CALLS][{WEATHER}, {TIME}]"),
    ("mistral", "mistral", ["[TOOL_CALLS]"], False,
     f'[TOOL_CALLS][{{"name": "search", "arguments": {NESTED_ARGS}}}]'),
    ("mistral", "mistral", ["[TOOL_CALLS]", "[ARGS]"], False, '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'),
    ("mistral", "mistral", ["[TOOL_CALLS]", "[ARGS]"], False,
     '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "unit": "celsius"}[TOOL_CALLS]get_time[ARGS]{}'),
    ("mistral", "mistral", ["[TOOL_CALLS]", "[ARGS]"], False, f"[TOOL_CALLS]search[ARGS]{NESTED_ARGS}"),
    ("mistral", "mistral", ["[TOOL_CALLS]", "[ARGS]"], False,
     'Let me look that up.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'),
    ("mistral", "mistral", ["[TOOL_CALLS]", "[ARGS]"], False, PROSE),
    ("pythonic", "pythonic", [], True, '[get_weather(city="Paris")]'),
    ("pythonic", "pythonic", [], True, "[get_weather(city='Paris', days=3), get_time()]"),
    ("pythonic", "pythonic", [], True,
     "[search(query='caf\u00e9 \u6771\u4eac', filters={'lang': 'fr', 'range': {'min': 1, 'max': 2.5}}, "
     "tags=['a', 'b'], exact=True, limit=None, score=-0.5)]"),
    ("pythonic", "pythonic", [], False, PROSE),
    ("pythonic", "llama4_pythonic", ["<|python_start|>", "<|python_end|>"], False,
     '<|python_start|>[get_weather(city="Paris")]<|python_end|>'),
    ("glm45", "glm45", ["<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"], False,
     "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"),
    ("glm45", "glm45", ["<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"], False,
     "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
     "<arg_value>3</arg_value>\n</tool_call>\n<tool_call>get_time\n</tool_call>"),
    ("glm45", "glm45", ["<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"], False,
     "Let me check.\n<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>caf\u00e9</arg_value>\n"
     '<arg_key>filters</arg_key>\n<arg_value>{"lang": "fr"}</arg_value>\n<arg_key>exact</arg_key>\n'
     "<arg_value>true</arg_value>\n</tool_call>"),
    ("glm45", "glm45", ["<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"], False, PROSE),
]


def vllm_parse(parser_name, markers, text):
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers import ToolParserManager

    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    extra = ["<tool_call>", "</tool_call>"] + markers
    tok.add_special_tokens({"additional_special_tokens": extra})
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS)
    cls = ToolParserManager.get_tool_parser(parser_name)
    try:
        parser = cls(tok, request.tools)
    except TypeError:
        parser = cls(tok)
    r = parser.extract_tool_calls(text, request)
    calls = [{"name": c.function.name, "arguments": json.loads(c.function.arguments)} for c in r.tool_calls]
    return {"content": r.content or "", "calls": calls}


def transformers_parse(fmt, text):
    if fmt == "hermes":
        from transformers.cli.serving.utils import _RESPONSE_TEMPLATE_FALLBACKS
        from transformers.utils.chat_parsing import parse_response

        template = next(v for k, v in _RESPONSE_TEMPLATE_FALLBACKS.items() if "qwen3" in k)
        m = parse_response(text, template, prefix="")
        calls = [
            {"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in m.get("tool_calls", [])
        ]
        return {"content": m.get("content", ""), "calls": calls}
    from transformers.utils.chat_parsing.content_parsers import parse_content

    return {"content": "", "calls": parse_content(text, "python-call-list", {})}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    import transformers
    import vllm.tool_parsers  # noqa: F401  (fails here, not half-way, without vLLM's sources)

    from importlib.metadata import PackageNotFoundError, version

    try:
        vllm_version = version("vllm")
    except PackageNotFoundError:  # an unpacked wheel has no metadata: the version from its file name
        vllm_version = "0.34.0"
    goldens = []
    for fmt, parser_name, markers, with_transformers, text in CASES:
        got = vllm_parse(parser_name, markers, text)
        goldens.append({"format": fmt, "source": f"vllm {vllm_version} {parser_name}", "text": text, **got})
        if with_transformers:
            got = transformers_parse(fmt, text)
            goldens.append({"format": fmt, "source": f"transformers {transformers.__version__}", "text": text, **got})
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(goldens, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(goldens)} goldens -> {os.path.relpath(args.out, ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
