#!/usr/bin/env python3
"""OpenAI's Responses API (POST /v1/responses) from `tessera serve` through the `openai` client's
`responses.create`, whole and streamed (typed events), on the default model: text with instructions and
message items, text.format json_schema (validated with `jsonschema`), max_output_tokens giving an incomplete
response, function tools with tool_choice required (function_call items, then their output sent back as input
items), the stream's events in order with deltas that add up to the whole response, a greedy answer the same
through /v1/responses and /v1/chat/completions, and the stateful parts refused by name. Bounded: every request
has a timeout and the server is killed if it does not stop. Exit 0 = pass, 77 = skipped, 1 = failure.

  tests/serve_responses_client.py --tessera build/tessera
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

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 130}},
          "required": ["name", "age"], "additionalProperties": False}
WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
                          "required": ["city"], "additionalProperties": False}}


def events_of(client, **kw):
    return list(client.responses.create(**kw, stream=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    a = ap.parse_args()
    proc, port, _ = start(a.tessera, ["--max-num-seqs", "2"])
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=120, max_retries=0)
    try:
        kw = dict(model="smollm2", instructions="Answer briefly.", input="What is the capital of France?",
                  max_output_tokens=24, temperature=0)
        r = client.responses.create(**kw)
        check(r.object == "response" and r.id.startswith("resp_") and r.status in ("completed", "incomplete"),
              f"response: {r.object} {r.id} {r.status}")
        check(bool(r.output_text) and r.output[0].type == "message" and r.output[0].role == "assistant",
              f"output: {r.output}")
        check(r.usage.input_tokens > 0 and r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens,
              f"usage: {r.usage}")
        # The same greedy request through chat completions gives the same text.
        c = client.chat.completions.create(model="smollm2", max_tokens=24, temperature=0, messages=[
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "What is the capital of France?"}])
        check(c.choices[0].message.content == r.output_text,
              f"responses vs chat: {r.output_text!r} vs {c.choices[0].message.content!r}")
        # Streamed: typed events in order; the deltas add up to the whole text; completed carries it.
        ev = events_of(client, **kw)
        types = [e.type for e in ev]
        check(types[:2] == ["response.created", "response.in_progress"], f"first events: {types[:3]}")
        check(types[-1] in ("response.completed", "response.incomplete"), f"last event: {types[-1]}")
        check([e.sequence_number for e in ev] == list(range(len(ev))), "sequence numbers count up from 0")
        deltas = "".join(e.delta for e in ev if e.type == "response.output_text.delta")
        check(deltas == r.output_text, f"streamed deltas {deltas!r} vs {r.output_text!r}")
        check(ev[-1].response.output_text == r.output_text, "the final event's response holds the text")
        for t in ("response.output_item.added", "response.content_part.added", "response.output_text.done",
                  "response.content_part.done", "response.output_item.done"):
            check(t in types, f"stream lacks {t}: {types}")

        # Message items (with input_text parts) and a cut-short answer.
        r = client.responses.create(model="smollm2", max_output_tokens=4, temperature=0, input=[
            {"role": "user", "content": [{"type": "input_text", "text": "Tell me a long story."}]}])
        check(r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens",
              f"max_output_tokens: {r.status} {r.incomplete_details}")

        # text.format json_schema.
        r = client.responses.create(model="smollm2", input="Describe a person.", max_output_tokens=120,
                                    temperature=0, text={"format": {"type": "json_schema", "name": "person",
                                                                    "schema": PERSON, "strict": True}})
        try:
            errors = list(jsonschema.Draft202012Validator(PERSON).iter_errors(json.loads(r.output_text)))
            check(not errors and r.status == "completed", f"json_schema: {r.output_text!r} {errors}")
        except json.JSONDecodeError:
            check(False, f"json_schema: {r.output_text!r} is not JSON")

        # Function tools: a forced call, then its output sent back.
        kw = dict(model="smollm2", input="Weather in Paris?", tools=[WEATHER], tool_choice="required",
                  max_output_tokens=80, temperature=0)
        r = client.responses.create(**kw)
        calls = [o for o in r.output if o.type == "function_call"]
        check(len(calls) >= 1 and calls[0].name == "get_weather" and calls[0].call_id.startswith("call_"),
              f"function_call items: {r.output}")
        if calls:
            check("city" in json.loads(calls[0].arguments), f"arguments: {calls[0].arguments}")
            ev = events_of(client, **kw)
            first = next(e.item.id for e in ev if e.type == "response.output_item.added" and e.item.type == "function_call")
            args = "".join(e.delta for e in ev if e.type == "response.function_call_arguments.delta" and e.item_id == first)
            check(args == calls[0].arguments, f"streamed arguments {args!r} vs {calls[0].arguments!r}")
            added = [e.item.type for e in ev if e.type == "response.output_item.added"]
            check("function_call" in added, f"items added: {added}")
            follow = client.responses.create(model="smollm2", max_output_tokens=16, temperature=0, tools=[WEATHER],
                                             input=[{"role": "user", "content": "Weather in Paris?"},
                                                    {"type": "function_call", "call_id": calls[0].call_id,
                                                     "name": calls[0].name, "arguments": calls[0].arguments},
                                                    {"type": "function_call_output", "call_id": calls[0].call_id,
                                                     "output": '{"temperature": 18}'}])
            check(bool(follow.output_text), f"answer after the tool's output: {follow.output}")

        # Refused by name.
        for extra, param in ((dict(previous_response_id="resp_1"), "previous_response_id"),
                             (dict(store=True), "store"),
                             (dict(tools=[{"type": "web_search"}]), "tools[0].type"),
                             (dict(text={"format": {"type": "json_schema", "name": "x",
                                                    "schema": {"type": "array", "uniqueItems": True}}}),
                              "text.format"),
                             (dict(max_output_tokens=0), "max_output_tokens")):
            try:
                client.responses.create(model="smollm2", input="hi", **extra)
                check(False, f"{param}: accepted")
            except openai.BadRequestError as e:
                check((e.body or {}).get("param") == param, f"{param}: refused as {e.body}")
    finally:
        code = stop(proc)
    check(code == 0, f"SIGTERM: exit {code}")
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
