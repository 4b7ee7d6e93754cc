#!/usr/bin/env python3
"""Tool calls from `tessera serve` through the `openai` Python client (pinned in scripts/requirements-test.txt),
arguments validated with `jsonschema`.

The default model (SmolLM2-135M) cannot format a call by itself and its chat template has no tools, so the
server uses the hermes format (<tool_call>{...}</tool_call>) and only the constraint of tool_choice "required"
or a named function makes these calls: checked whole and streamed (OpenAI's deltas: index, id, type and name
first, then the arguments; no call text leaking into content), parallel_tool_calls false giving one call, a
conversation carrying the assistant's tool_calls and the tool's answer back, tool_choice "auto" and "none"
answering in text. tool_choice "auto" parsing is driven end to end by forcing the model's text with a regex
(structured_outputs) that writes a call in hermes format around prose. Bounded: every request has a timeout
and the server is killed if it does not stop. Exit 0 = pass, 77 = skipped (no openai/jsonschema), 1 = failure.

  tests/serve_tools_client.py --tessera build/tessera
"""
import argparse
import json
import sys

try:
    import jsonschema
    import openai
except ImportError as e:
    print(f"SKIP: {e.name} is not installed (scripts/test.sh installs it into .venv-test)")
    sys.exit(77)

from serve_client_util import check, exit_status, start, stop  # noqa: E402 (the script's directory)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a timezone",
    "parameters": {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 40}},
                   "required": ["timezone"], "additionalProperties": False}}}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}


def valid_call(name, arguments, where):
    check(name in SCHEMAS, f"{where}: unknown function {name!r}")
    check(isinstance(arguments, str), f"{where}: arguments is not a string: {arguments!r}")
    try:
        args = json.loads(arguments)
    except (json.JSONDecodeError, TypeError):
        check(False, f"{where}: arguments are not JSON: {arguments!r}")
        return
    if name in SCHEMAS:
        errors = [e.message for e in jsonschema.Draft202012Validator(SCHEMAS[name]).iter_errors(args)]
        check(not errors, f"{where}: {arguments} does not validate: {errors}")


def streamed(chat, **kw):
    """Content, calls {index: {id, name, arguments}} and finish_reason of a streamed answer."""
    content, calls, finish, order_ok = "", {}, None, True
    for chunk in chat(**kw, stream=True):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            if tc.index not in calls:
                order_ok = order_ok and bool(tc.id) and tc.type == "function" and bool(tc.function.name)
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
            calls[tc.index]["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return content, calls, finish, order_ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    a = ap.parse_args()
    proc, port, ready = start(a.tessera, ["--max-num-seqs", "4"])
    check("tool call parser hermes" in ready, f"ready line: {ready!r}")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=120, max_retries=0)
    chat = client.chat.completions.create
    msgs = [{"role": "user", "content": "What's the weather in Paris?"}]
    try:
        # One call (parallel_tool_calls false; a named function is always one call): SmolLM2 given the
        # choice repeats its call until max_tokens, as any engine's grammar lets it.
        for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
            kw = dict(model="smollm2", messages=msgs, tools=[WEATHER, TIME], tool_choice=choice, max_tokens=200,
                      temperature=0, parallel_tool_calls=False)
            r = chat(**kw)
            m = r.choices[0].message
            check(r.choices[0].finish_reason == "tool_calls", f"{choice}: finish_reason {r.choices[0].finish_reason}")
            check(m.content is None, f"{choice}: content {m.content!r}")
            check(bool(m.tool_calls), f"{choice}: no tool_calls")
            for tc in m.tool_calls or []:
                check(tc.type == "function" and tc.id.startswith("call_"), f"{choice}: call {tc}")
                valid_call(tc.function.name, tc.function.arguments, str(choice))
            if isinstance(choice, dict):
                check(all(tc.function.name == "get_time" for tc in m.tool_calls or []), "named: another function")
            content, calls, finish, order_ok = streamed(chat, **kw)
            check(content == "" and finish == "tool_calls" and order_ok,
                  f"{choice} streamed: content {content!r}, finish {finish}, id/name first {order_ok}")
            check([(c["name"], c["arguments"]) for _, c in sorted(calls.items())] ==
                  [(tc.function.name, tc.function.arguments) for tc in m.tool_calls or []],
                  f"{choice}: streamed calls {calls} vs {m.tool_calls}")
            check(len({c["id"] for c in calls.values()}) == len(calls), f"{choice}: call ids not unique")

        # Parallel calls allowed: one or more, each valid; a call cut by max_tokens comes back as content.
        r = chat(model="smollm2", messages=msgs, tools=[WEATHER, TIME], tool_choice="required", max_tokens=120,
                 temperature=0)
        calls = r.choices[0].message.tool_calls or []
        check(len(calls) >= 1 and r.choices[0].finish_reason in ("tool_calls", "length"),
              f"parallel: {len(calls)} calls, finish {r.choices[0].finish_reason}")
        for tc in calls:
            valid_call(tc.function.name, tc.function.arguments, "parallel")
        check(len({tc.id for tc in calls}) == len(calls), "parallel: call ids not unique")
        call = calls[0]

        # The call and its result back in the conversation: rendered, answered in text.
        follow = msgs + [{"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
                         {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 18}'}]
        r = chat(model="smollm2", messages=follow, tools=[WEATHER, TIME], max_tokens=20, temperature=0)
        check(r.choices[0].finish_reason in ("stop", "length") and r.choices[0].message.content,
              f"after the tool's answer: {r.choices[0]}")

        # auto / none: the model answers in text (it formats no call by itself).
        for choice in ("auto", "none"):
            r = chat(model="smollm2", messages=msgs, tools=[WEATHER], tool_choice=choice, max_tokens=16, temperature=0)
            check(not r.choices[0].message.tool_calls and r.choices[0].message.content,
                  f"{choice}: {r.choices[0].message}")

        # auto parsing end to end: the text is forced to prose + a hermes call + prose.
        forced = (r'Let me check\. <tool_call>\n\{"name": "get_weather", "arguments": '
                  r'\{"city": "Paris", "unit": "celsius"\}\}\n</tool_call>')
        kw = dict(model="smollm2", messages=msgs, tools=[WEATHER, TIME], tool_choice="auto", max_tokens=80,
                  temperature=0, extra_body={"structured_outputs": {"regex": forced}})
        r = chat(**kw)
        m = r.choices[0].message
        check(m.content is not None and m.content.strip() == "Let me check.", f"auto: content {m.content!r}")
        check([(tc.function.name, json.loads(tc.function.arguments)) for tc in m.tool_calls or []] ==
              [("get_weather", {"city": "Paris", "unit": "celsius"})], f"auto: calls {m.tool_calls}")
        check(r.choices[0].finish_reason == "tool_calls", f"auto: finish {r.choices[0].finish_reason}")
        content, calls, finish, order_ok = streamed(chat, **kw)
        check("<tool_call>" not in content and content.strip() == "Let me check." and finish == "tool_calls",
              f"auto streamed: content {content!r} finish {finish}")
        check([(c["name"], json.loads(c["arguments"])) for c in calls.values()] ==
              [("get_weather", {"city": "Paris", "unit": "celsius"})] and order_ok, f"auto streamed calls {calls}")
        # A malformed call stays content, never a 500.
        broken = r'<tool_call>\n\{"name": "get_weather", "arguments": \{"city": \n</tool_call>'
        r = chat(model="smollm2", messages=msgs, tools=[WEATHER], max_tokens=60, temperature=0,
                 extra_body={"structured_outputs": {"regex": broken}})
        check(not r.choices[0].message.tool_calls and "<tool_call>" in (r.choices[0].message.content or ""),
              f"malformed call: {r.choices[0].message}")
        # tool_choice required and a response_format at once: a 400 naming the field.
        try:
            chat(model="smollm2", messages=msgs, tools=[WEATHER], tool_choice="required",
                 response_format={"type": "json_object"})
            check(False, "required + response_format accepted")
        except openai.BadRequestError as e:
            check((e.body or {}).get("param") == "response_format", f"required + response_format: {e.body}")
    finally:
        code = stop(proc)
    check(code == 0, f"SIGTERM: exit {code}")
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
