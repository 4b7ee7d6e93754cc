#!/usr/bin/env python3
"""Structured output from `tessera serve` through the `openai` Python client (pinned in
scripts/requirements-test.txt), every JSON answer validated with the `jsonschema` package.

Starts the server on a free port of 127.0.0.1 with the default model (SmolLM2-135M, which cannot keep to a
schema by itself, so only the constraint makes these pass) and checks: response_format json_schema on each
schema of tests/fixtures/schemas (streamed and not, the same text), json_object, structured_outputs regex /
choice / grammar (vLLM's spelling, also on /v1/completions), finish_reason "length" when max_tokens cuts a
constrained answer, refusals naming the field (unsupported schema keywords, GBNF, two constraints at once), a
greedy request's text unchanged while constrained ones run beside it; then a second server that cannot find
llguidance answers constrained requests with a 400 saying how to install it, and serves the rest. Bounded:
every request has a timeout and each server is killed if it does not stop. Exit 0 = pass, 77 = skipped (no
openai/jsonschema package), 1 = failure (also when llguidance, which scripts/setup.sh installs, is missing).

  tests/serve_structured_client.py --tessera build/tessera --schemas tests/fixtures/schemas
"""
import argparse
import concurrent.futures
import glob
import json
import os
import re
import sys

from serve_client_util import check, exit_status, refused, start, stop

try:
    import jsonschema
    import openai
except ImportError as e:
    print(f"SKIP: {e.name} is not installed (scripts/test.sh installs it into .venv-test)")
    sys.exit(77)

def validator(schema):
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--schemas", required=True)
    a = ap.parse_args()

    proc, port, ready = start(a.tessera, ["--max-num-seqs", "4"])
    if "constrained decoding on" not in ready:
        stop(proc)
        print("FAIL: the server has no constrained decoding (scripts/setup.sh installs llguidance into .venv): "
              + ready.strip())
        sys.exit(1)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=120, max_retries=0)
    chat = client.chat.completions.create
    try:
        # Every schema of the corpus: the answer parses and validates, streamed and not alike.
        schemas = sorted(p for p in glob.glob(os.path.join(a.schemas, "*.json"))
                         if not os.path.basename(p).startswith("unsupported_"))
        check(len(schemas) >= 10, f"schema corpus has {len(schemas)} schemas")
        for path in schemas:
            name = os.path.basename(path)[:-5]
            schema = json.load(open(path))
            kw = dict(model="smollm2", max_tokens=400, temperature=0,
                      messages=[{"role": "user", "content": f"Give me an example {name.replace('_', ' ')} as JSON."}],
                      response_format={"type": "json_schema",
                                       "json_schema": {"name": name, "schema": schema, "strict": True}})
            r = chat(**kw)
            text = r.choices[0].message.content
            check(r.choices[0].finish_reason == "stop", f"{name}: finish_reason {r.choices[0].finish_reason}")
            try:
                errors = [e.message for e in validator(schema).iter_errors(json.loads(text))]
                check(not errors, f"{name}: {text!r} does not validate: {errors}")
            except json.JSONDecodeError as e:
                check(False, f"{name}: {text!r} is not JSON: {e}")
            pieces, finish = [], None
            for chunk in chat(**kw, stream=True):
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)
                if chunk.choices and chunk.choices[0].finish_reason:
                    finish = chunk.choices[0].finish_reason
            check("".join(pieces) == text and finish == "stop",
                  f"{name}: streamed {''.join(pieces)!r} ({finish}) vs {text!r}")

        msgs = [{"role": "user", "content": "Describe a cat."}]
        r = chat(model="smollm2", messages=msgs, max_tokens=200, temperature=0, response_format={"type": "json_object"})
        try:
            check(isinstance(json.loads(r.choices[0].message.content), dict), "json_object gives an object")
        except json.JSONDecodeError:
            check(False, f"json_object: {r.choices[0].message.content!r} is not JSON")
        # Sampled too: whatever the draw, the answer keeps to the schema.
        person = json.load(open(os.path.join(a.schemas, "person.json")))
        for seed in (1, 2):
            r = chat(model="smollm2", messages=msgs, max_tokens=200, temperature=1.0, seed=seed,
                     response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": person}})
            check(r.choices[0].finish_reason == "stop" and not list(validator(person).iter_errors(
                json.loads(r.choices[0].message.content))), f"sampled seed {seed}: {r.choices[0].message.content!r}")

        phone = r"\(\d{3}\) \d{3}-\d{4}"
        r = chat(model="smollm2", messages=[{"role": "user", "content": "Your phone number?"}], max_tokens=30,
                 temperature=0, extra_body={"structured_outputs": {"regex": phone}})
        check(re.fullmatch(phone, r.choices[0].message.content) and r.choices[0].finish_reason == "stop",
              f"regex: {r.choices[0].message.content!r} {r.choices[0].finish_reason}")
        options = ["Paris", "London", "New York (USA)", "a.b*c"]
        r = chat(model="smollm2", messages=[{"role": "user", "content": "Capital of France?"}], max_tokens=20,
                 temperature=0, extra_body={"structured_outputs": {"choice": options}})
        check(r.choices[0].message.content in options, f"choice: {r.choices[0].message.content!r}")
        r = chat(model="smollm2", messages=[{"role": "user", "content": "Is the sky blue?"}], max_tokens=20,
                 temperature=0, extra_body={"structured_outputs": {"grammar": 'start: ("yes" | "no") "!"'}})
        check(r.choices[0].message.content in ("yes!", "no!"), f"grammar: {r.choices[0].message.content!r}")
        c = client.completions.create(model="smollm2", prompt="The capital of France is", max_tokens=10,
                                      temperature=0, extra_body={"guided_choice": ["Paris", "Rome"]})
        check(c.choices[0].text in ("Paris", "Rome"), f"completions guided_choice: {c.choices[0].text!r}")

        # max_tokens cuts the answer: "length", and the text is a prefix of what the constraint allows.
        r = chat(model="smollm2", messages=msgs, max_tokens=3, temperature=0,
                 response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": person}})
        check(r.choices[0].finish_reason == "length" and r.choices[0].message.content.lstrip().startswith("{"),
              f"cut short: {r.choices[0].message.content!r} {r.choices[0].finish_reason}")

        # Refusals, each a 400 naming the field.
        for path in sorted(glob.glob(os.path.join(a.schemas, "unsupported_*.json"))):
            keyword = {"unsupported_unique_items.json": "uniqueItems", "unsupported_not.json": "not"}[
                os.path.basename(path)]
            why = refused(openai, lambda: chat(model="smollm2", messages=msgs, max_tokens=5, response_format={
                "type": "json_schema", "json_schema": {"name": "x", "schema": json.load(open(path))}}),
                "response_format", [keyword])
            check(why is None, f"{os.path.basename(path)}: {why}")
        why = refused(openai, lambda: chat(model="smollm2", messages=msgs, max_tokens=5,
                                   extra_body={"structured_outputs": {"grammar": 'root ::= "a"'}}),
                      "structured_outputs.grammar", ["GBNF", "Lark"])
        check(why is None, f"GBNF grammar: {why}")
        why = refused(openai, lambda: chat(model="smollm2", messages=msgs, max_tokens=5, response_format={"type": "json_object"},
                                   extra_body={"structured_outputs": {"regex": "a"}}),
                      "structured_outputs.regex", ["both"])
        check(why is None, f"two constraints: {why}")
        why = refused(openai, lambda: chat(model="smollm2", messages=msgs, max_tokens=5,
                                   extra_body={"structured_outputs": {"regex": "(unclosed"}}),
                      "structured_outputs.regex", ["regex"])
        check(why is None, f"a bad regex: {why}")
        why = refused(openai, lambda: chat(model="smollm2", messages=msgs, max_tokens=5, response_format={"type": "xml"}),
                      "response_format.type", ["xml"])
        check(why is None, f"unknown response_format type: {why}")

        # A greedy request's text is the same alone and beside constrained requests.
        plain = dict(model="smollm2", messages=[{"role": "user", "content": "Tell me about the sea."}],
                     max_tokens=40, temperature=0)
        alone = chat(**plain).choices[0].message.content
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            others = [pool.submit(chat, model="smollm2", messages=msgs, max_tokens=60, temperature=0,
                                  response_format={"type": "json_schema",
                                                   "json_schema": {"name": "p", "schema": person}})
                      for _ in range(3)]
            beside = pool.submit(chat, **plain)
            together = beside.result().choices[0].message.content
            texts = [f.result().choices[0].message.content for f in others]
        check(together == alone, f"greedy text beside constrained requests: {together!r} vs {alone!r}")
        check(len(set(texts)) == 1, f"identical constrained requests in one batch differ: {texts}")
    finally:
        code = stop(proc)
    check(code == 0, f"SIGTERM: exit {code}")

    # Without llguidance: a 400 that says how to install it; everything else still works.
    env = dict(os.environ, TESSERA_LLGUIDANCE="/nonexistent/llguidance/_lib.abi3.so")
    proc, port, ready = start(a.tessera, [], env)
    try:
        check("constrained decoding off" in ready, f"ready line without llguidance: {ready!r}")
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=60, max_retries=0)
        why = refused(openai, lambda: client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=5,
                                                             response_format={"type": "json_object"}),
                      "response_format", ["pip install llguidance"])
        check(why is None, f"without llguidance: {why}")
        r = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=5, temperature=0,
                                           response_format={"type": "text"})
        check(bool(r.choices[0].message.content), "response_format text still served")
    finally:
        code = stop(proc)
    check(code == 0, f"SIGTERM (second server): exit {code}")
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
