#!/usr/bin/env python3
"""Writes the tokenizer benchmark corpus: JSONL, one {"text": ...} document per line.

Deterministic on a given Python install: the first Python standard-library sources in
sorted order (English prose in docstrings + code, one document per file) up to ~3 MB,
plus multilingual documents built from the golden corpus (tests/fixtures/tokenizer/corpus.json),
each repeated into ~4 KB documents with a counter so words differ.

usage: tokenizer_corpus.py OUT.jsonl [megabytes]
"""
import glob
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    out = sys.argv[1]
    budget = int(float(sys.argv[2]) * 1e6) if len(sys.argv) > 2 else 4_000_000
    docs = []
    size = 0
    for path in sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py"))):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        docs.append(text)
        size += len(text.encode())
        if size > budget * 3 // 4:
            break
    with open(os.path.join(REPO, "tests", "fixtures", "tokenizer", "corpus.json")) as f:
        cases = [bytes.fromhex(c["hex"]).decode("utf-8", "replace") for c in json.load(f)]
    i = 0
    while size < budget:
        doc = []
        while sum(len(d) for d in doc) < 4000:
            doc.append(f"{i}: {cases[i % len(cases)]}")
            i += 1
        text = "\n".join(doc)
        docs.append(text)
        size += len(text.encode())
    with open(out, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    print(f"{out}: {len(docs)} documents, {size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
