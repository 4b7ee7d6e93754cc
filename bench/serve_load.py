#!/usr/bin/env python3
"""Load generator for OpenAI-compatible servers (tessera serve, llama-server, vLLM): asyncio, standard library only.

Sweeps concurrency levels; at each, C clients each send R streamed greedy /v1/completions requests one after
another (a prompt of token ids, so every engine sees the same tokens) and the script reports aggregate output
tokens/s, time to first token and inter-token latency (p50/p99), one JSON line per level and a Markdown table.

  bench/serve_load.py --url http://127.0.0.1:8080 --model smollm2 --clients 1,4,16 [--prompt-tokens 128]
                      [--new-tokens 128] [--requests-per-client 2] [--label tessera] [--extra-body JSON]
"""
import argparse
import asyncio
import json
import random
import statistics
import sys
import time
import urllib.parse


def pct(xs, p):
    xs = sorted(x for x in xs if x == x)  # NaN: a request that streamed no text has no first-token time
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


async def one_request(host, port, path, body, timeout):
    """Streams one request; returns (ttft_s, [inter-token gaps], completion_tokens)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    data = json.dumps(body).encode()
    writer.write(
        (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
         f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data)
    await writer.drain()
    t0 = time.perf_counter()
    status = await asyncio.wait_for(reader.readline(), timeout)
    if b" 200 " not in status:
        rest = await reader.read()
        raise RuntimeError(f"{status.decode().strip()}: {rest[-300:]!r}")
    chunked = False
    while True:
        line = await asyncio.wait_for(reader.readline(), timeout)
        if line in (b"\r\n", b""):
            break
        if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
            chunked = True
    buf = b""
    first = None
    last = None
    gaps = []
    tokens = 0
    chunks = 0  # text chunks: the token count where a server sends no usage chunk (one token a chunk)
    done = False

    async def read_more():
        if not chunked:
            return await asyncio.wait_for(reader.read(65536), timeout)
        size_line = await asyncio.wait_for(reader.readline(), timeout)
        size = int(size_line.strip() or b"0", 16)
        if size == 0:
            return b""
        chunk = await asyncio.wait_for(reader.readexactly(size + 2), timeout)
        return chunk[:-2]

    while not done:
        more = await read_more()
        if not more:
            break
        buf += more
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if not event.startswith(b"data: "):
                continue
            payload = event[6:]
            if payload == b"[DONE]":
                done = True
                break
            j = json.loads(payload)
            if "error" in j:
                raise RuntimeError(str(j["error"]))
            if j.get("usage"):
                tokens = j["usage"]["completion_tokens"]
            for c in j.get("choices", []):
                if c.get("text"):
                    chunks += 1
                    now = time.perf_counter()
                    if first is None:
                        first = now - t0
                    else:
                        gaps.append(now - last)
                    last = now
    writer.close()
    return first if first is not None else float("nan"), gaps, tokens or chunks


async def level(args, clients):
    u = urllib.parse.urlparse(args.url)
    rng = random.Random(clients)
    ttft, itl = [], []
    total_tokens = 0
    errors = 0

    async def client(ci):
        nonlocal total_tokens, errors
        for _ in range(args.requests_per_client):
            if args.text_prompt:  # llama-cpp-python's server takes text only: the same text for every engine
                words = ["the", "river", "north", "city", "old", "bridge", "light", "market", "stone", "winter"]
                prompt = " ".join(rng.choice(words) for _ in range(args.prompt_tokens - 1))
            else:
                prompt = [rng.randrange(100, args.vocab) for _ in range(args.prompt_tokens)]
            body = {"prompt": prompt, "max_tokens": args.new_tokens, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}}
            if args.model:
                body["model"] = args.model
            if args.ignore_eos:
                body["ignore_eos"] = True
            body.update(args.extra_body)
            try:
                f, g, n = await one_request(u.hostname, u.port, "/v1/completions", body, args.timeout)
                ttft.append(f)
                itl.extend(g)
                total_tokens += n
            except Exception as e:  # noqa: BLE001 - reported, counted
                errors += 1
                print(f"client {ci}: {e}", file=sys.stderr)

    t0 = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    wall = time.perf_counter() - t0
    return {"label": args.label, "clients": clients, "requests": clients * args.requests_per_client,
            "errors": errors, "output_tokens": total_tokens, "wall_s": round(wall, 3),
            "output_tokens_per_s": round(total_tokens / wall, 2) if wall > 0 else 0,
            "ttft_p50_s": round(pct(ttft, 50), 4), "ttft_p99_s": round(pct(ttft, 99), 4),
            "itl_p50_s": round(pct(itl, 50), 5), "itl_p99_s": round(pct(itl, 99), 5)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", default="")
    ap.add_argument("--label", default="server")
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=49152, help="prompt ids are drawn from [100, VOCAB)")
    ap.add_argument("--ignore-eos", action="store_true", help="send ignore_eos (llama-server, vLLM)")
    ap.add_argument("--text-prompt", action="store_true",
                    help="a text prompt of about --prompt-tokens words instead of token ids (llama-cpp-python)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--extra-body", type=json.loads, default={},
                    help='JSON merged into every request, e.g. \'{"structured_outputs": {"regex": "(.|\\\\n)*"}}\'')
    args = ap.parse_args()
    rows = []
    for c in [int(x) for x in args.clients.split(",") if x]:
        r = asyncio.run(level(args, c))
        print(json.dumps(r), flush=True)
        rows.append(r)
    print("\n| engine | clients | output tok/s | TTFT p50 s | TTFT p99 s | ITL p50 ms | ITL p99 ms | errors |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['label']} | {r['clients']} | {r['output_tokens_per_s']:.1f} | {r['ttft_p50_s']:.3f} | "
              f"{r['ttft_p99_s']:.3f} | {1000 * r['itl_p50_s']:.1f} | {1000 * r['itl_p99_s']:.1f} | {r['errors']} |")


if __name__ == "__main__":
    main()
