#!/usr/bin/env python3
"""`tessera serve` against the clients people use: the `openai` Python package (pinned in
scripts/requirements-test.txt) and curl. Starts the server on a free port of 127.0.0.1 with the default model,
checks chat and completions, streaming and not, the usage chunk, stop strings, n, seed reproducibility and the
refusal of unsupported fields, then stops it with SIGTERM (exit 0). Bounded: every request has a timeout and
the server is killed if it does not stop. Exit 0 = pass, 77 = skipped (no openai package), 1 = failure.

  tests/serve_openai_client.py --tessera build/tessera
"""
import argparse
import json
import subprocess
import sys

from serve_client_util import check, exit_status, start
from serve_client_util import stop as stop_server  # `stop` names a stop string below

try:
    import openai
except ImportError:
    print("SKIP: the openai package is not installed (scripts/test.sh installs it into .venv-test)")
    sys.exit(77)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    args = ap.parse_args()
    proc, port, _ = start(args.tessera, ["--max-num-seqs", "4", "--max-model-len", "256"])
    base = f"http://127.0.0.1:{port}/v1"
    try:
        client = openai.OpenAI(base_url=base, api_key="unused", timeout=120, max_retries=0)
        check([m.id for m in client.models.list().data] == ["smollm2"], "/v1/models lists the served name")
        msgs = [{"role": "user", "content": "What is the capital of France?"}]
        r = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=12, temperature=0)
        text = r.choices[0].message.content
        check(r.object == "chat.completion" and text, "chat completion has text")
        check(r.usage.completion_tokens <= 12 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens,
              "usage adds up")
        pieces, usage, finish = [], None, None
        for chunk in client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=12, temperature=0,
                                                    stream=True, stream_options={"include_usage": True}):
            if chunk.usage:
                usage = chunk.usage
                check(chunk.choices == [], "the usage chunk has no choices")
            for c in chunk.choices:
                if c.delta.content:
                    pieces.append(c.delta.content)
                if c.finish_reason:
                    finish = c.finish_reason
        check("".join(pieces) == text, f"streamed text equals the whole: {''.join(pieces)!r} vs {text!r}")
        check(usage is not None and usage.completion_tokens == r.usage.completion_tokens, "stream usage chunk")
        check(finish in ("stop", "length"), f"finish_reason {finish!r}")
        # n = 2 sampled with a seed: the same request twice gives the same two choices.
        kw = dict(model="smollm2", messages=msgs, max_tokens=10, temperature=0.9, seed=1234, n=2)
        a = [c.message.content for c in client.chat.completions.create(**kw).choices]
        b = [c.message.content for c in client.chat.completions.create(**kw).choices]
        check(len(a) == 2 and a == b, f"seeded n=2 repeats: {a} vs {b}")
        # Completions with a stop string taken from the greedy text: the text stops before it.
        c = client.completions.create(model="smollm2", prompt="The capital of France is", max_tokens=16, temperature=0)
        full = c.choices[0].text
        check(c.object == "text_completion" and len(full) > 6, f"completion text {full!r}")
        stop = full[3:6]
        s = client.completions.create(model="smollm2", prompt="The capital of France is", max_tokens=16,
                                      temperature=0, stop=[stop])
        check(s.choices[0].text == full[:full.find(stop)] and s.choices[0].finish_reason == "stop",
              f"stop {stop!r}: {s.choices[0].text!r}")
        # logprobs: one entry per token, the greedy token the likeliest, streamed equal to whole.
        lp = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=8, temperature=0,
                                            logprobs=True, top_logprobs=3)
        content = lp.choices[0].logprobs.content
        check(len(content) == lp.usage.completion_tokens and all(len(t.top_logprobs) == 3 for t in content),
              f"chat logprobs: {len(content)} entries for {lp.usage.completion_tokens} tokens")
        check("".join(t.token for t in content).startswith(lp.choices[0].message.content.rstrip()[:4]),
              "logprob tokens spell the text")
        check(all(t.logprob <= 0 and t.top_logprobs[0].logprob >= t.logprob and
                  bytes(t.bytes).decode("utf-8", "replace") == t.token for t in content), "logprob values")
        streamed_lp = []
        for chunk in client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=8, temperature=0,
                                                    logprobs=True, top_logprobs=3, stream=True):
            for c in chunk.choices:
                if c.logprobs and c.logprobs.content:
                    streamed_lp += [(t.token, round(t.logprob, 4)) for t in c.logprobs.content]
        check(streamed_lp == [(t.token, round(t.logprob, 4)) for t in content], "streamed logprobs equal whole")
        cl = client.completions.create(model="smollm2", prompt="The capital of France is", max_tokens=4,
                                       temperature=0, logprobs=2)
        check(len(cl.choices[0].logprobs.tokens) == 4 and len(cl.choices[0].logprobs.top_logprobs[0]) <= 2 and
              cl.choices[0].logprobs.text_offset[0] == 0, f"completions logprobs: {cl.choices[0].logprobs}")
        try:
            client.chat.completions.create(model="smollm2", messages=msgs, tools=[
                {"type": "function", "function": {"name": "no spaces allowed", "parameters": {"type": "object"}}}])
            check(False, "a bad tool name accepted")
        except openai.BadRequestError as e:
            check(e.body and e.body.get("param") == "tools[0].function.name", f"bad tool refused naming the field: {e.body}")
        try:
            client.chat.completions.create(model="other", messages=msgs)
            check(False, "another model name accepted")
        except openai.NotFoundError:
            pass
        # curl, streaming: raw SSE framing.
        out = subprocess.run(["curl", "-sN", "--max-time", "60", f"{base}/completions", "-H",
                              "Content-Type: application/json", "-d",
                              json.dumps({"prompt": "Hello", "max_tokens": 5, "temperature": 0, "stream": True})],
                             capture_output=True, text=True, timeout=90).stdout
        events = [e for e in out.split("\n\n") if e]
        check(events and events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events),
              f"curl sees SSE events ending in [DONE]: {out[-200:]!r}")
    finally:
        code = stop_server(proc)
        check(code == 0, f"SIGTERM: exit {code}")
    return exit_status("all checks passed")


if __name__ == "__main__":
    sys.exit(main())
