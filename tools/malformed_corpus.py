#!/usr/bin/env python3
"""Malformed-input corpus for the tessera CLI: generator and runner in one file.

Every case starts from the committed tiny fixtures (tests/fixtures/models/*, tests/fixtures/io/*.gguf,
tests/fixtures/tokenizer/*), builds one broken input in a fresh temporary directory (one mutation per
case), runs the CLI on it and asserts the project's one error policy:

  - exit code 1 (launch cases whose rank fails: non-zero, the launcher passes the rank's code on);
  - the last stderr line starts with "tessera: error: " and names the file, field, tensor or flag;
  - at most 2 s of CPU time (user + sys of the process and the children it waited for, from wait4)
    and at most 256 MB peak RSS beyond the size of the model files the case uses.
A 20 s wall-clock limit catches hangs; CPU time, not wall time, is the budget, so a busy machine does
not make the corpus flaky. A few inputs are legal but hostile (kind "bounded": a 16 MB added token, 100k
added tokens, a 57 MB safetensors header): they may load or be refused, but only within those limits.
Each case's address space is capped (4 GiB, --mem-cap-mb) so a runaway allocation cannot take the machine
down; the CLI is started from a small helper process so that ru_maxrss measures the CLI, not this runner.

Python 3 standard library only (CI runs it with the system python3).

  python3 tools/malformed_corpus.py --cli build/tessera                 # run everything
  python3 tools/malformed_corpus.py --cli build/tessera --filter config # one class, or an id substring
  python3 tools/malformed_corpus.py --list                              # class and id of every case
  python3 tools/malformed_corpus.py --cli build/tessera --report        # passed/failed per class
  python3 tools/malformed_corpus.py --cli build/tessera -v --filter gguf/rope  # each case's last stderr line
  python3 tools/malformed_corpus.py --self-test                         # the runner catches each failure kind
"""

import argparse
import concurrent.futures
import json
import os
import resource
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")
MODELS = os.path.join(FIX, "models")
GGUF_FIXTURE = os.path.join(FIX, "io", "tiny_llama.gguf")
TOKENIZERS = os.path.join(FIX, "tokenizer")

PREFIX = "tessera: error: "
CPU_LIMIT_S = 2.0
RSS_LIMIT_MB = 256
WALL_LIMIT_S = 20.0  # hang detector only; --timeout changes it
MEM_CAP_MB = 4096  # RLIMIT_AS of each case, so a runaway allocation cannot take the machine down; --mem-cap-mb
CLASSES = ["config", "generation", "safetensors", "gguf", "tokenizer", "files", "cli", "launch"]

# ----------------------------------------------------------------------------------------------------
# Case model


class Case:
    """One malformed input. `build(ctx)` writes files under ctx.tmp and returns the argv after the CLI
    (a list; "{cli}" in an item is replaced by the CLI path). `expect`: items that must all appear in
    the last stderr line; an item that is a tuple is satisfied by any one of its alternatives.
    kind: "error" (exit 1), "rankfail" (non-zero exit naming the rank), "bounded" (exit 0 or 1: the
    input is legal but hostile; only the resource limits and, on exit 1, the message are checked)."""

    def __init__(self, cls, name, build, expect, kind="error", stdin=None, skip=None, why="", env=None):
        assert cls in CLASSES, cls
        self.cls, self.id = cls, cls + "/" + name
        self.build, self.expect, self.kind, self.stdin, self.skip, self.why = build, expect, kind, stdin, skip, why
        self.env = env or {}  # environment variables are inputs too


CASES = []


def case(cls, name, build, expect, **kw):
    c = Case(cls, name, build, expect, **kw)
    assert all(c.id != o.id for o in CASES), "duplicate case id " + c.id
    CASES.append(c)


class Ctx:
    def __init__(self, tmp):
        self.tmp = tmp
        self.extra_model_bytes = 0  # fixtures used in place (not copied into tmp)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)


# ----------------------------------------------------------------------------------------------------
# File helpers


class Raw:
    """A JSON literal written verbatim (1e999, NaN, deep nesting) where json.dumps cannot."""

    def __init__(self, text):
        self.text = text


def dumps(obj):
    """json.dumps (the C encoder: fast for the big cases) with Raw values spliced in verbatim."""
    raws = []

    def placeholder(o):
        if not isinstance(o, Raw):
            raise TypeError("not JSON: %r" % (o,))
        raws.append(o.text)
        return "\x00RAW%d\x00" % (len(raws) - 1)

    text = json.dumps(obj, default=placeholder)
    for i, r in enumerate(raws):
        text = text.replace(json.dumps("\x00RAW%d\x00" % i), r)
    return text


def deep(n=100000, leaf="1"):
    return Raw("[" * n + leaf + "]" * n)


def write(path, data):
    if isinstance(data, str):
        data = data.encode()
    with open(path, "wb") as f:
        f.write(data)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def copy_model(ctx, name="qwen3_tied", sub="model"):
    """Copies a model fixture (without its golden) into ctx.tmp/sub and returns the directory."""
    src, dst = os.path.join(MODELS, name), ctx.path(sub)
    os.makedirs(dst)
    for f in os.listdir(src):
        if f != "golden.json":
            shutil.copyfile(os.path.join(src, f), os.path.join(dst, f))
    return dst


def fixture_model(ctx, name="qwen3_tied"):
    """A fixture used in place, read-only (for cases that break a flag, not the model)."""
    d = os.path.join(MODELS, name)
    ctx.extra_model_bytes += sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f != "golden.json")
    return d


def mutate_json(path, fn):
    obj = read_json(path)
    before = json.dumps(obj, sort_keys=True)
    out = fn(obj)  # mutates obj in place, or returns a replacement dict
    out = out if isinstance(out, dict) else obj
    if json.dumps(out, sort_keys=True, default=lambda r: "RAW:" + r.text) == before:
        raise AssertionError("mutation left %s unchanged (has the fixture changed?)" % os.path.basename(path))
    write(path, dumps(out))


# config.json stores rope settings in one of two layouts: the hub's (top-level rope_theta, rope_scaling,
# partial_rotary_factor) or transformers 5's (one rope_parameters object). The fixtures may be in either;
# rope cases first convert to the layout they test, so they stay meaningful when the fixtures are re-saved.
def to_hub_layout(o):
    rp = o.pop("rope_parameters", None)
    if isinstance(rp, dict):
        rp = dict(rp)
        if "rope_theta" in rp:
            o["rope_theta"] = rp.pop("rope_theta")
        if "partial_rotary_factor" in rp:
            o["partial_rotary_factor"] = rp.pop("partial_rotary_factor")
        o["rope_scaling"] = rp if rp.get("rope_type", rp.get("type", "default")) != "default" else None
    return o


def to_v5_layout(o):
    if isinstance(o.get("rope_parameters"), dict):
        return o
    rp = {"rope_theta": o.pop("rope_theta", 10000.0)}
    rs = o.pop("rope_scaling", None)
    if isinstance(rs, dict):
        rp.update(rs)
    if "partial_rotary_factor" in o:
        rp["partial_rotary_factor"] = o.pop("partial_rotary_factor")
    rp.setdefault("rope_type", "default")
    o["rope_parameters"] = rp
    return o


LAYOUT_BY_PREFIX = {"rope_theta.": to_hub_layout, "rope_scaling.": to_hub_layout, "partial_rotary_factor.": to_hub_layout,
                    "rope_layouts_disagree.": to_hub_layout, "rope_parameters.": to_v5_layout}


def set_key(key, value):
    def fn(o):
        o[key] = value

    return fn


def del_key(key):
    def fn(o):
        o.pop(key, None)

    return fn


def add_tokenizer(ctx, model_dir, name="tiny_gpt2"):
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(TOKENIZERS, name, f), os.path.join(model_dir, f))


# ---- safetensors: u64 header length, JSON header, data


def st_read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def st_write(path, header, body, raw_header=None):
    h = raw_header if raw_header is not None else dumps(header).encode()
    h += b" " * (-len(h) % 8)
    write(path, struct.pack("<Q", len(h)) + h + body)


def st_mutate(path, fn):
    """fn(header, body) -> new body or None (header mutated in place)."""
    h, body = st_read(path)
    out = fn(h, body)
    st_write(path, h, body if out is None else out)


# ---- GGUF (v3, little-endian): see src/io/gguf.cpp for the layout

GT = dict(u8=0, i8=1, u16=2, i16=3, u32=4, i32=5, f32=6, bool=7, str=8, arr=9, u64=10, i64=11, f64=12)
_FMT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class Gguf:
    def __init__(self, path=GGUF_FIXTURE):
        with open(path, "rb") as f:
            d = f.read()
        self.pos = 0
        self.d = d
        assert d[:4] == b"GGUF"
        self.pos = 4
        self.version = self._r("I")
        nt, nk = self._r("Q"), self._r("Q")
        self.kv = []  # [key, type, value]; arrays: value = (elem_type, [items])
        for _ in range(nk):
            k = self._s()
            t = self._r("I")
            self.kv.append([k, t, self._v(t)])
        self.tensors = []  # [name, dims (ggml order, innermost first), type, offset]
        for _ in range(nt):
            name = self._s()
            nd = self._r("I")
            dims = [self._r("Q") for _ in range(nd)]
            self.tensors.append([name, dims, self._r("I"), self._r("Q")])
        align = self.get("general.alignment") or 32
        start = (self.pos + align - 1) // align * align
        self.data = d[start:]
        del self.d

    def _r(self, f):
        (v,) = struct.unpack_from("<" + f, self.d, self.pos)
        self.pos += struct.calcsize("<" + f)
        return v

    def _s(self):
        n = self._r("Q")
        s = self.d[self.pos : self.pos + n]
        self.pos += n
        return s.decode()

    def _v(self, t):
        if t == 8:
            return self._s()
        if t == 9:
            et, n = self._r("I"), self._r("Q")
            return (et, [self._v(et) for _ in range(n)])
        return self._r(_FMT[t])

    def get(self, key):
        for k, t, v in self.kv:
            if k == key:
                return v
        return None

    def set(self, key, type_name, value):
        t = GT[type_name]
        for e in self.kv:
            if e[0] == key:
                e[1], e[2] = t, value
                return self
        self.kv.append([key, t, value])
        return self

    def drop(self, key):
        self.kv = [e for e in self.kv if e[0] != key]
        return self

    def tensor(self, name):
        return next(t for t in self.tensors if t[0] == name)

    @staticmethod
    def _ws(s):
        b = s.encode() if isinstance(s, str) else s
        return struct.pack("<Q", len(b)) + b

    def _wv(self, t, v):
        if t == 8:
            return self._ws(v)
        if t == 9:
            et, items = v
            if et == 8:  # string arrays can be big (vocabularies): one pass, no recursion
                enc = [x.encode() for x in items]
                return struct.pack("<IQ", et, len(items)) + b"".join(struct.pack("<Q", len(x)) + x for x in enc)
            return struct.pack("<IQ", et, len(items)) + b"".join(self._wv(et, x) for x in items)
        return struct.pack("<" + _FMT[t], v)

    def dump(self):
        out = [b"GGUF", struct.pack("<IQQ", self.version, len(self.tensors), len(self.kv))]
        for k, t, v in self.kv:
            out += [self._ws(k), struct.pack("<I", t), self._wv(t, v)]
        for name, dims, ty, off in self.tensors:
            out += [self._ws(name), struct.pack("<I", len(dims))] + [struct.pack("<Q", x) for x in dims]
            out += [struct.pack("<IQ", ty, off)]
        b = b"".join(out)
        align = self.get("general.alignment")
        align = align if isinstance(align, int) and align > 0 and align & (align - 1) == 0 else 32
        b += b"\0" * (-len(b) % align)
        return b + self.data

    def save(self, path):
        write(path, self.dump())
        return path


# ----------------------------------------------------------------------------------------------------
# Commands


def forward(model, *extra):
    return ["forward", model, "--input-ids", "1,2,3", "-q"] + list(extra)


def generate(model, *extra):
    return ["generate", model, "--input-ids", "1,2,3", "--max-new-tokens", "2", "-q"] + list(extra)


def generate_defaults(model, *extra):
    """generate without --max-new-tokens: generation_config.json's values are the effective ones."""
    return ["generate", model, "--input-ids", "1,2,3", "-q"] + list(extra)


HELLO = b"hello world\n"

# ----------------------------------------------------------------------------------------------------
# Class: config (config.json of each architecture)

ARCHS = {"qwen3": "qwen3_tied", "llama": "llama_gqa", "glm4": "glm4"}
REQUIRED_INTS = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"]
HUGE = {
    "hidden_size": 10**10,
    "intermediate_size": 10**12,
    "num_hidden_layers": 10**6,
    "num_attention_heads": 10**9,
    "vocab_size": 10**9,
}


def config_case(arch, name, fn, expect, cmd=forward, **kw):
    fixture = ARCHS[arch]
    layout = next((f for pre, f in LAYOUT_BY_PREFIX.items() if name.startswith(pre)), None)

    def build(ctx):
        d = copy_model(ctx, fixture)
        p = os.path.join(d, "config.json")
        if layout:
            write(p, dumps(layout(read_json(p))))
        mutate_json(p, fn)
        return cmd(d)

    case("config", arch + "." + name, build, expect, **kw)


def raw_config_case(arch, name, text, expect, **kw):
    fixture = ARCHS[arch]

    def build(ctx):
        d = copy_model(ctx, fixture)
        write(os.path.join(d, "config.json"), text)
        return forward(d)

    case("config", arch + "." + name, build, expect, **kw)


def add_config_cases():
    # The file: "config.json", or the model directory followed by "(config)" (the field is named as well).
    CJ = ("config.json", "(config)")
    # Missing required sizes: Transformers fills its class default, which then mismatches the weights;
    # either the field or the mismatching tensor must be named.
    full = {
        "missing": (None, ("weight", "tensor")),
        "string": ("64", None),
        "negative": (-1, None),
        "zero": (0, None),
        "float": (64.5, None),
        "huge": ("HUGE", ("weight", "tensor")),
        "inf": (Raw("1e999"), None),
        "uint64_overflow": (Raw("18446744073709551615"), None),
    }
    short = ["string", "negative", "zero", "huge"]
    for arch in ARCHS:
        for field in REQUIRED_INTS:
            for mut, (value, alt) in full.items():
                if arch != "qwen3" and mut not in short:
                    continue
                want = (field,) + alt if alt else field
                if mut == "inf":  # JSON parsers may refuse the literal itself: naming it is as good as the field
                    want = (field, "1e999")
                if mut == "missing":
                    fn = del_key(field)
                elif value == "HUGE":
                    fn = set_key(field, HUGE[field])
                else:
                    fn = set_key(field, value)
                config_case(arch, "%s.%s" % (field, mut), fn, [CJ, want])

    # num_key_value_heads / head_dim / max_position_embeddings
    for arch, kv in (("qwen3", 3), ("llama", 4), ("glm4", 3)):  # heads 4, 6, 4
        config_case(arch, "num_key_value_heads.not_divisor", set_key("num_key_value_heads", kv), [CJ, "num_key_value_heads"])
    config_case("llama", "num_hidden_layers.more_than_checkpoint", set_key("num_hidden_layers", 3), ["model.layers.2"])
    config_case("llama", "vocab_size.more_than_checkpoint", set_key("vocab_size", 2048), ["embed_tokens"])
    config_case("qwen3", "num_key_value_heads.zero", set_key("num_key_value_heads", 0), [CJ, "num_key_value_heads"])
    config_case("qwen3", "num_key_value_heads.negative", set_key("num_key_value_heads", -2), [CJ, "num_key_value_heads"])
    config_case("qwen3", "num_key_value_heads.string", set_key("num_key_value_heads", "2"), [CJ, "num_key_value_heads"])
    config_case("qwen3", "num_key_value_heads.huge", set_key("num_key_value_heads", 10**6), [CJ, "num_key_value_heads"])
    for arch in ARCHS:
        config_case(arch, "head_dim.zero", set_key("head_dim", 0), [CJ, "head_dim"])
        config_case(arch, "head_dim.string", set_key("head_dim", "16"), [CJ, "head_dim"])
    config_case("qwen3", "head_dim.negative", set_key("head_dim", -32), [CJ, "head_dim"])
    config_case("llama", "head_dim.odd", set_key("head_dim", 17), [CJ, ("head_dim", "rotary", "weight")])
    config_case("qwen3", "head_dim.huge", set_key("head_dim", 10**6), [CJ, ("head_dim", "weight", "tensor")])
    config_case("qwen3", "head_dim.missing_mismatch", del_key("head_dim"), [("head_dim", "weight", "tensor")],
                why="default hidden/heads = 16, the checkpoint has 32")
    config_case("qwen3", "max_position_embeddings.zero", set_key("max_position_embeddings", 0), [CJ, "max_position_embeddings"])
    config_case("qwen3", "max_position_embeddings.negative", set_key("max_position_embeddings", -5), [CJ, "max_position_embeddings"])
    config_case("llama", "max_position_embeddings.string", set_key("max_position_embeddings", "256"), [CJ, "max_position_embeddings"])
    config_case("glm4", "max_position_embeddings.uint64_overflow", set_key("max_position_embeddings", Raw("18446744073709551615")), [CJ, "max_position_embeddings"])
    config_case("qwen3", "max_position_embeddings.float_huge", set_key("max_position_embeddings", Raw("1e300")), [CJ, "max_position_embeddings"])

    # floats that make NaN or are not numbers
    for arch in ARCHS:
        config_case(arch, "rms_norm_eps.negative", set_key("rms_norm_eps", -1e-6), [CJ, "rms_norm_eps"])
        config_case(arch, "rope_theta.zero", set_key("rope_theta", 0.0), [CJ, "rope_theta"])
        config_case(arch, "rope_theta.negative", set_key("rope_theta", -10000.0), [CJ, "rope_theta"])
    config_case("qwen3", "rms_norm_eps.string", set_key("rms_norm_eps", "1e-6"), [CJ, "rms_norm_eps"])
    config_case("qwen3", "rms_norm_eps.inf", set_key("rms_norm_eps", Raw("1e999")), [CJ, ("rms_norm_eps", "1e999")])
    config_case("llama", "rms_norm_eps.bool", set_key("rms_norm_eps", True), [CJ, "rms_norm_eps"])
    config_case("qwen3", "rope_theta.string", set_key("rope_theta", "10000"), [CJ, "rope_theta"])
    config_case("qwen3", "rope_theta.inf", set_key("rope_theta", Raw("1e999")), [CJ, ("rope_theta", "1e999")])
    config_case("glm4", "rope_theta.neg_inf", set_key("rope_theta", Raw("-1e999")), [CJ, ("rope_theta", "1e999")])
    config_case("qwen3", "rms_norm_eps.nan_literal", set_key("rms_norm_eps", Raw("NaN")), ["config.json"])

    # booleans
    config_case("qwen3", "tie_word_embeddings.string", set_key("tie_word_embeddings", "false"), [CJ, "tie_word_embeddings"])
    config_case("llama", "tie_word_embeddings.int", set_key("tie_word_embeddings", 1), [CJ, "tie_word_embeddings"])
    config_case("glm4", "attention_bias.string", set_key("attention_bias", "true"), [CJ, "attention_bias"])
    config_case("llama", "mlp_bias.string", set_key("mlp_bias", "no"), [CJ, "mlp_bias"])
    config_case("qwen3", "attention_bias.true_without_tensors", set_key("attention_bias", True), [("attention_bias", "bias")],
                why="q/k/v bias tensors are absent from the checkpoint")

    # hidden_act: the supported set is silu, gelu, gelu_pytorch_tanh, gelu_new, relu
    for arch in ARCHS:
        config_case(arch, "hidden_act.unknown", set_key("hidden_act", "swishy_glu"), [CJ, "hidden_act"])
    config_case("qwen3", "hidden_act.quick_gelu", set_key("hidden_act", "quick_gelu"), [CJ, "hidden_act"],
                why="a Transformers activation Tessera does not implement: refused, not run as SiLU")
    config_case("llama", "hidden_act.int", set_key("hidden_act", 5), [CJ, "hidden_act"])
    config_case("glm4", "hidden_act.list", set_key("hidden_act", ["silu"]), [CJ, "hidden_act"])

    # dtype / model_type / architectures
    config_case("qwen3", "dtype.int8", set_key("dtype", "int8"), [CJ, ("dtype", "int8")])
    config_case("llama", "torch_dtype.int", lambda o: (o.pop("dtype"), o.update(torch_dtype=5)), [CJ, "torch_dtype"],
                why="without 'dtype': Transformers 5 reads torch_dtype only as a fallback for dtype")
    config_case("qwen3", "model_type.unknown", set_key("model_type", "mamba"), [("model_type", "mamba")])
    config_case("llama", "model_type.int", set_key("model_type", 5), [CJ, "model_type"])
    config_case("glm4", "architectures.int", set_key("architectures", 5), [CJ, "architectures"], kind="bounded",
                why="Transformers' Auto classes dispatch on model_type and never read architectures")

    # rope_scaling (hub layout) and rope_parameters (transformers 5 layout)
    RS = "rope_scaling"
    config_case("qwen3", "rope_scaling.dynamic_factor_missing", set_key(RS, {"rope_type": "dynamic"}),
                [CJ, ("factor", "dynamic")])
    config_case("llama", "rope_scaling.dynamic_factor_zero", set_key(RS, {"rope_type": "dynamic", "factor": 0.0}),
                [CJ, "factor"])
    config_case("qwen3", "rope_scaling.longrope_long_factor_missing",
                set_key(RS, {"rope_type": "longrope", "short_factor": [1.0] * 8,
                             "original_max_position_embeddings": 64}), [CJ, ("long_factor", "longrope")])
    config_case("llama", "rope_scaling.longrope_factors_wrong_length",
                set_key(RS, {"rope_type": "longrope", "short_factor": [1.0, 2.0], "long_factor": [1.0, 2.0],
                             "original_max_position_embeddings": 64}), [CJ, ("short_factor", "rotary pair")])
    config_case("qwen3", "rope_scaling.longrope_factor_negative",
                set_key(RS, {"rope_type": "longrope", "short_factor": [-1.0] * 8, "long_factor": [1.0] * 8,
                             "original_max_position_embeddings": 64}), [CJ, ("short_factor", "positive")])
    config_case("qwen3", "rope_scaling.string", set_key(RS, "linear"), [CJ, RS])
    config_case("qwen3", "rope_scaling.linear_factor_zero", set_key(RS, {"rope_type": "linear", "factor": 0.0}), [CJ, (RS, "factor")])
    config_case("glm4", "rope_scaling.linear_factor_negative", set_key(RS, {"rope_type": "linear", "factor": -2.0}), [CJ, (RS, "factor")])
    config_case("llama", "rope_scaling.linear_factor_missing", set_key(RS, {"rope_type": "linear"}), [CJ, "factor"],
                why="Transformers' rope validation requires 'factor' for linear")
    config_case("llama", "rope_scaling.linear_factor_string", set_key(RS, {"rope_type": "linear", "factor": "2"}), [CJ, "factor"])

    def llama3(**over):
        r = {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 64, "rope_type": "llama3"}
        r.update(over)
        return set_key(RS, r)

    config_case("llama", "rope_scaling.llama3_low_ge_high", llama3(low_freq_factor=4.0, high_freq_factor=1.0), [CJ, ("low_freq_factor", "high_freq_factor")])
    config_case("llama", "rope_scaling.llama3_original_string", llama3(original_max_position_embeddings="64"), [CJ, "original_max_position_embeddings"])
    config_case("llama", "rope_scaling.llama3_original_negative", llama3(original_max_position_embeddings=-64), [CJ, "original_max_position_embeddings"])
    config_case("llama", "rope_scaling.llama3_factor_inf", llama3(factor=Raw("1e999")), [CJ, ("factor", "1e999")])
    config_case("qwen3", "rope_scaling.rope_type_int", set_key(RS, {"rope_type": 3, "factor": 2.0}), [CJ, "rope_type"])
    config_case("qwen3", "rope_scaling.deep", set_key(RS, deep()), ["config.json"])
    RP = "rope_parameters"

    def rp(**kv):  # edits inside rope_parameters (the case first converts to that layout)
        def fn(o):
            for k, v in kv.items():
                if v is None:
                    o[RP].pop(k, None)
                else:
                    o[RP][k] = v

        return fn

    config_case("qwen3", "rope_parameters.theta_negative", rp(rope_theta=-1.0), [CJ, "rope_theta"])
    config_case("llama", "rope_parameters.theta_zero", rp(rope_theta=0.0), [CJ, "rope_theta"])
    config_case("glm4", "rope_parameters.theta_string", rp(rope_theta="10000"), [CJ, "rope_theta"])
    config_case("qwen3", "rope_parameters.theta_inf", rp(rope_theta=Raw("1e999")), [CJ, ("rope_theta", "1e999")])
    config_case("qwen3", "rope_parameters.not_object", set_key(RP, 5), [CJ, RP])
    config_case("glm4", "rope_parameters.unknown_type", rp(rope_type="su"), [CJ, ("rope_type", "su")])
    config_case("qwen3", "rope_parameters.longrope_short_factor_string",
                rp(rope_type="longrope", short_factor="1.0", long_factor=[1.0] * 8, original_max_position_embeddings=64),
                [CJ, "short_factor"])
    config_case("qwen3", "rope_parameters.linear_factor_zero", rp(rope_type="linear", factor=0.0), [CJ, "factor"])
    config_case("llama", "rope_parameters.llama3_low_ge_high", rp(low_freq_factor=4.0, high_freq_factor=1.0),
                [CJ, ("low_freq_factor", "high_freq_factor")])
    config_case("llama", "rope_parameters.llama3_factor_string", rp(factor="8"), [CJ, "factor"])
    for name, v in [("zero", 0.0), ("above_one", 2.0), ("string", "half")]:
        config_case("glm4", "rope_parameters.partial_rotary_factor_" + name, rp(partial_rotary_factor=v),
                    [CJ, ("partial_rotary_factor", "rotary")])

    def both_theta(o):
        o[RP] = {"rope_type": "default", "rope_theta": o["rope_theta"] / 2}  # top-level rope_theta stays

    config_case("qwen3", "rope_layouts_disagree.theta", both_theta, [CJ, "rope_theta"],
                why="both layouts present and different: refused, not one silently preferred")

    def both_type(o):
        o[RS] = {"rope_type": "linear", "factor": 4.0}
        o[RP] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}

    config_case("llama", "rope_layouts_disagree.factor", both_type, [CJ, ("factor", RS, RP)])

    def glm_partial_disagree(o):  # top-level partial_rotary_factor is 0.5
        o[RP] = {"rope_type": "default", "rope_theta": o["rope_theta"], "partial_rotary_factor": 0.25}

    config_case("glm4", "rope_layouts_disagree.partial_rotary_factor", glm_partial_disagree, [CJ, "partial_rotary_factor"])

    # GLM-4 partial rotary factor
    PRF = "partial_rotary_factor"
    for name, v in [("zero", 0.0), ("negative", -0.5), ("above_one", 2.0), ("string", "half"), ("inf", Raw("1e999"))]:
        config_case("glm4", PRF + "." + name, set_key(PRF, v), [CJ, (PRF, "rotary", "1e999")])

    # Qwen3 sliding window fields
    def sliding(**kv):
        def fn(o):
            o.update(kv)

        return fn

    config_case("qwen3", "sliding_window.negative", sliding(use_sliding_window=True, sliding_window=-5), [CJ, "sliding_window"])
    config_case("qwen3", "sliding_window.zero", sliding(use_sliding_window=True, sliding_window=0), [CJ, "sliding_window"])
    config_case("qwen3", "sliding_window.string", sliding(use_sliding_window=True, sliding_window="big"), [CJ, "sliding_window"])
    config_case("qwen3", "use_sliding_window.string", sliding(use_sliding_window="yes"), [CJ, "use_sliding_window"])
    config_case("qwen3", "layer_types.unknown", sliding(layer_types=["full_attention", "chunked_bogus"]), [CJ, "layer_types"])
    config_case("qwen3", "layer_types.wrong_length", sliding(layer_types=["full_attention"]), [CJ, "layer_types"])
    config_case("qwen3", "layer_types.string", sliding(layer_types="full_attention"), [CJ, "layer_types"])
    config_case("qwen3", "max_window_layers.string", sliding(max_window_layers="28"), [CJ, "max_window_layers"])

    # special token ids
    config_case("qwen3", "eos_token_id.2pow40", set_key("eos_token_id", 2**40), [CJ, "eos_token_id"])
    config_case("llama", "eos_token_id.string", set_key("eos_token_id", "2"), [CJ, "eos_token_id"])
    config_case("glm4", "eos_token_id.list_with_string", set_key("eos_token_id", [2, "x"]), [CJ, "eos_token_id"])
    config_case("qwen3", "eos_token_id.float", set_key("eos_token_id", 2.5), [CJ, "eos_token_id"])
    config_case("qwen3", "pad_token_id.string", set_key("pad_token_id", "0"), [CJ, "pad_token_id"])
    config_case("llama", "pad_token_id.2pow40", set_key("pad_token_id", 2**40), [CJ, "pad_token_id"])
    config_case("glm4", "bos_token_id.float", set_key("bos_token_id", 1.5), [CJ, "bos_token_id"])

    # whole-file structure
    raw_config_case("qwen3", "file.list", "[]", [CJ])
    raw_config_case("llama", "file.string", '"config"', [CJ])
    raw_config_case("glm4", "file.empty", "", [CJ])
    raw_config_case("qwen3", "file.truncated", '{"hidden_size": 64, "model_type": "qwen3"', [CJ])
    raw_config_case("qwen3", "file.invalid_utf8", b'{"model_type": "qwen3\xff\xfe", "hidden_size": 64}', [CJ])
    raw_config_case("llama", "file.deep_top", "[" * 100000 + "]" * 100000, [CJ])
    raw_config_case("qwen3", "file.trailing_garbage",
                    open(os.path.join(MODELS, "qwen3_tied", "config.json")).read() + "\n}{", [CJ])
    config_case("qwen3", "file.deep_unknown_key", set_key("x_custom_deep", deep()), [CJ], kind="bounded",
                why="legal JSON in a key Tessera does not read: may load or be refused, but must not crash")


# ----------------------------------------------------------------------------------------------------
# Class: generation (generation_config.json)


def gen_case(name, obj_fn, expect, raw=None, fixture="qwen3_tied", cmd=generate_defaults, **kw):
    def build(ctx):
        d = copy_model(ctx, fixture)
        p = os.path.join(d, "generation_config.json")
        if raw is not None:
            write(p, raw)
        else:
            mutate_json(p, obj_fn)
        return cmd(d)

    case("generation", name, build, expect, **kw)


def add_generation_cases():
    # The file: "generation_config.json", or the model directory followed by "(generation config)".
    GJ = ("generation_config.json", "(generation config)")
    GF = "generation_config.json"  # whole-file cases: the parser must name the file itself

    def upd(**kv):
        def fn(o):
            o.update(kv)

        return fn

    S = dict(do_sample=True)
    gen_case("do_sample.string", upd(do_sample="yes"), [GJ, "do_sample"])
    gen_case("do_sample.int", upd(do_sample=1), [GJ, "do_sample"])
    gen_case("temperature.string", upd(temperature="hot", **S), [GJ, "temperature"])
    gen_case("temperature.negative", upd(temperature=-1.0, **S), [GJ, "temperature"])
    gen_case("temperature.zero_sampling", upd(temperature=0.0, **S), [GJ, "temperature"])
    gen_case("temperature.inf", upd(temperature=Raw("1e999"), **S), [GJ, ("temperature", "1e999")])
    gen_case("top_k.string", upd(top_k="5", **S), [GJ, "top_k"])
    gen_case("top_k.negative", upd(top_k=-3, **S), [GJ, "top_k"])
    gen_case("top_k.float", upd(top_k=1.5, **S), [GJ, "top_k"])
    gen_case("top_k.2pow40", upd(top_k=2**40, **S), [GJ, "top_k"])
    gen_case("top_p.above_one", upd(top_p=1.5, **S), [GJ, "top_p"])
    gen_case("top_p.negative", upd(top_p=-0.1, **S), [GJ, "top_p"])
    gen_case("top_p.string", upd(top_p="0.9", **S), [GJ, "top_p"])
    gen_case("min_p.above_one", upd(min_p=2.0, **S), [GJ, "min_p"])
    gen_case("min_p.negative", upd(min_p=-1.0, **S), [GJ, "min_p"])
    gen_case("min_p.string", upd(min_p="0.1", **S), [GJ, "min_p"])
    gen_case("repetition_penalty.inf", upd(repetition_penalty=Raw("1e999")), [GJ, ("repetition_penalty", "1e999")])
    gen_case("max_length.2pow40", upd(max_length=2**40), [GJ, "max_length"])
    gen_case("do_sample.null_with_bad_top_p", upd(do_sample=None, top_p="high"), [GJ, "top_p"],
             why="a null do_sample is unset, the string top_p is still a type error")
    gen_case("repetition_penalty.zero", upd(repetition_penalty=0.0), [GJ, "repetition_penalty"])
    gen_case("repetition_penalty.negative", upd(repetition_penalty=-1.3), [GJ, "repetition_penalty"])
    gen_case("repetition_penalty.string", upd(repetition_penalty="1.3"), [GJ, "repetition_penalty"])
    gen_case("max_new_tokens.negative", upd(max_new_tokens=-1), [GJ, "max_new_tokens"])
    gen_case("max_new_tokens.string", upd(max_new_tokens="10"), [GJ, "max_new_tokens"])
    gen_case("max_new_tokens.1e300", upd(max_new_tokens=Raw("1e300")), [GJ, ("max_new_tokens", "1e300")])
    gen_case("max_new_tokens.2pow40", upd(max_new_tokens=2**40), [GJ, "max_new_tokens"])
    gen_case("max_length.negative", upd(max_length=-1), [GJ, "max_length"])
    gen_case("max_length.string", upd(max_length="20"), [GJ, "max_length"])
    gen_case("eos_token_id.2pow40", upd(eos_token_id=2**40), [GJ, "eos_token_id"])
    gen_case("eos_token_id.string", upd(eos_token_id="2"), [GJ, "eos_token_id"])
    gen_case("eos_token_id.list_with_string", upd(eos_token_id=[2, "x"]), [GJ, "eos_token_id"])
    gen_case("eos_token_id.float", upd(eos_token_id=1.5), [GJ, "eos_token_id"])
    gen_case("pad_token_id.string", upd(pad_token_id="0"), [GJ, "pad_token_id"])
    gen_case("pad_token_id.2pow40", upd(pad_token_id=2**40), [GJ, "pad_token_id"])
    gen_case("bos_token_id.string", upd(bos_token_id="1"), [GJ, "bos_token_id"])
    gen_case("cache_implementation.unknown", upd(cache_implementation="quantum"), [GJ, "cache_implementation"])
    gen_case("cache_implementation.int", upd(cache_implementation=5), [GJ, "cache_implementation"])
    gen_case("num_beams.4", upd(num_beams=4), [GJ, "num_beams"],
             why="beam search is not implemented: refused, not silently greedy")
    gen_case("num_beams.string", upd(num_beams="1"), [GJ, "num_beams"])
    gen_case("file.list", None, [GJ], raw="[]")
    gen_case("file.empty", None, [GF], raw="",
             why="not JSON; Transformers would log it and fall back to defaults, which silently drops the model's own")
    gen_case("file.truncated", None, [GF], raw='{"do_sample": true, "temperature": 0.6')
    gen_case("file.nan_literal", None, [GF], raw='{"do_sample": true, "temperature": NaN}')
    gen_case("file.deep", None, [GF], raw='{"eos_token_id": ' + "[" * 100000 + "2" + "]" * 100000 + "}")
    gen_case("file.invalid_utf8", None, [GF], raw=b'{"cache_implementation": "st\xffatic"}')
    gen_case("llama.temperature.string", upd(temperature="0.6", **S), [GJ, "temperature"], fixture="llama_gqa",
             cmd=generate)
    gen_case("glm4.top_k.negative", upd(top_k=-1, **S), [GJ, "top_k"], fixture="glm4", cmd=generate)


# ----------------------------------------------------------------------------------------------------
# Class: safetensors (headers, offsets, shards)

W0 = "model.layers.0.self_attn.q_proj.weight"
DOWN1 = "model.layers.1.mlp.down_proj.weight"


def st_case(name, mutate, expect, fixture="qwen3_tied", **kw):
    """mutate(path) rewrites the copied model.safetensors."""

    def build(ctx):
        d = copy_model(ctx, fixture)
        mutate(os.path.join(d, "model.safetensors"))
        return forward(d)

    case("safetensors", name, build, expect, **kw)


def st_header(fn):
    return lambda p: st_mutate(p, fn)


def st_raw(fn):
    def m(p):
        with open(p, "rb") as f:
            data = f.read()
        write(p, fn(data))

    return m


def set_len(n):
    return lambda d: struct.pack("<Q", n) + d[8:]


def st_raw_header(text):
    def m(p):
        _, body = st_read(p)
        st_write(p, None, body, raw_header=text if isinstance(text, bytes) else text.encode())

    return m


def add_safetensors_cases():
    ST = "model.safetensors"
    st_case("header_len.beyond_file", st_raw(lambda d: set_len(len(d))(d)), [ST, "header"])
    st_case("header_len.2pow63", st_raw(set_len(2**63)), [ST, "header"])
    st_case("header_len.zero", st_raw(set_len(0)), [ST, "header"])
    st_case("file.short", st_raw(lambda d: b"abc"), [ST])
    st_case("file.empty", st_raw(lambda d: b""), [ST])
    st_case("file.gguf_content", st_raw(lambda d: open(GGUF_FIXTURE, "rb").read()), [ST])
    st_case("file.truncated_data", st_raw(lambda d: d[: len(d) - 1000]), [ST])
    st_case("header.invalid_json", st_raw_header('{"a": [1, 2'), [ST, "JSON"])
    st_case("header.list", st_raw_header("[]"), [ST, "header"])
    st_case("header.invalid_utf8", st_raw_header(b'{"\xff\xfe": 1}'), [ST])
    st_case("header.deep_metadata", st_raw_header('{"__metadata__": {"x": ' + "[" * 100000 + "]" * 100000 + "}}"), [ST])
    st_case("header.deep_tensor_entry", st_raw_header('{"t": ' + "[" * 100000 + "]" * 100000 + "}"), [ST])
    st_case("metadata.not_object", st_header(lambda h, b: h.update({"__metadata__": 5})), [ST, "__metadata__"])

    def entry(name, **kv):
        def fn(h, b):
            for k, v in kv.items():
                if v is None:
                    h[name].pop(k, None)
                else:
                    h[name][k] = v

        return st_header(fn)

    st_case("dtype.unknown", entry(W0, dtype="F128"), [ST, W0, "dtype"])
    st_case("dtype.missing", entry(W0, dtype=None), [ST, W0, "dtype"])
    st_case("dtype.int", entry(W0, dtype=5), [ST, W0, "dtype"])
    st_case("dtype.i32_weight", entry(W0, dtype="I32"), [W0, ("I32", "dtype")],
            why="same shape and bytes as the F32 original but an integer dtype: not a float weight")
    st_case("dtype.f64_same_bytes", entry(W0, dtype="F64", shape=[64, 64]), [W0])
    st_case("shape.missing", entry(W0, shape=None), [ST, W0, "shape"])
    st_case("shape.string", entry(W0, shape="128x64"), [ST, W0, "shape"])
    st_case("shape.negative_dim", entry(W0, shape=[-128, -64]), [ST, W0])
    st_case("shape.float_dim", entry(W0, shape=[128.0, 64]), [ST, W0])
    st_case("shape.bytes_mismatch", entry(W0, shape=[128, 65]), [ST, W0])
    st_case("shape.overflow", entry(W0, shape=[2**62, 2**62]), [ST, W0])
    st_case("shape.nine_dims", entry(W0, shape=[1] * 7 + [128, 64]), [ST, W0])
    st_case("shape.transposed", entry(W0, shape=[64, 128]), [W0],
            why="same bytes, wrong orientation for the config: the loader must say which tensor")
    st_case("shape.vs_config", entry("model.embed_tokens.weight", shape=[512, 128]), ["model.embed_tokens.weight"])

    def offsets(name, off):
        return entry(name, data_offsets=off)

    st_case("data_offsets.beyond_file", offsets(W0, [0, 10**9]), [ST, W0])
    st_case("data_offsets.end_before_begin", offsets(W0, [32768, 0]), [ST, W0])
    st_case("data_offsets.missing", entry(W0, data_offsets=None), [ST, W0, "data_offsets"])
    st_case("data_offsets.one_item", offsets(W0, [0]), [ST, W0, "data_offsets"])
    st_case("data_offsets.negative", offsets(W0, [-4, 32764]), [ST, W0])
    st_case("data_offsets.float", offsets(W0, [0.0, 32768.0]), [ST, W0])
    st_case("data_offsets.2pow64", offsets(W0, [Raw("18446744073709551615"), Raw("18446744073709551615")]), [ST, W0])

    def overlap(h, b):
        # Point q_proj at the bytes of the tensor that starts first (same size needed: both [128,64] F32?)
        first = min((k for k in h if k not in ("__metadata__", W0)), key=lambda k: h[k]["data_offsets"][0])
        fb, fe = h[first]["data_offsets"]
        w = h[W0]
        size = w["data_offsets"][1] - w["data_offsets"][0]
        w["data_offsets"] = [fb, fb + size]

    st_case("data_offsets.overlap", st_header(overlap), [ST, "overlap"])

    def drop(name):
        return st_header(lambda h, b: (h.pop(name), None)[1])

    st_case("tensor.missing_down_proj", drop(DOWN1), [DOWN1])
    st_case("tensor.missing_embed", drop("model.embed_tokens.weight"), ["model.embed_tokens.weight"])
    st_case("tensor.missing_norm", drop("model.norm.weight"), ["model.norm.weight"])
    st_case("tensor.missing_q_norm", drop("model.layers.0.self_attn.q_norm.weight"), ["model.layers.0.self_attn.q_norm.weight"])
    st_case("tensor.missing_lm_head_untied", drop("lm_head.weight"), ["lm_head.weight"], fixture="qwen3_untied")
    st_case("tensor.missing_bias", drop("model.layers.0.self_attn.q_proj.bias"), ["model.layers.0.self_attn.q_proj.bias"], fixture="glm4")
    st_case("tensor.misshaped_norm", entry("model.norm.weight", shape=[32, 2]), ["model.norm.weight"])

    def nan_weights(h, b):
        e = h["model.norm.weight"]
        s, t = e["data_offsets"]
        return b[:s] + struct.pack("<f", float("nan")) * ((t - s) // 4) + b[t:]

    st_case("values.nan_norm", st_header(nan_weights), [("non-finite", "NaN", "nan")],
            why="weights that make every logit NaN: an error naming the step, never output")

    def nan_case(name, cmd, fill=float("nan"), tensor="model.norm.weight"):
        def mutate(h, b):
            s0, t0 = h[tensor]["data_offsets"]
            return b[:s0] + struct.pack("<f", fill) * ((t0 - s0) // 4) + b[t0:]

        def build(ctx):
            d = copy_model(ctx)
            st_mutate(os.path.join(d, "model.safetensors"), mutate)
            return cmd(d)

        case("safetensors", name, build, [("non-finite", "NaN", "nan", "inf")])

    nan_case("values.nan_norm_forward_json", lambda d: forward(d, "--json"))
    nan_case("values.nan_norm_generate", generate)
    nan_case("values.nan_norm_generate_json", lambda d: generate(d, "--json"))
    nan_case("values.inf_embed_generate", generate, fill=float("inf"), tensor="model.embed_tokens.weight")
    nan_case("values.nan_norm_sampling", lambda d: generate(d, "--do-sample", "--seed", "1"))

    def many_entries(p):  # the header text is written directly: 57 MB through json.dumps is slow
        h, body = st_read(p)
        extra = "".join('"extra.%d":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},' % i for i in range(600000))
        st_write(p, None, body, raw_header=("{" + extra + json.dumps(h)[1:]).encode())

    st_case("header.600k_empty_tensors", many_entries, [(ST, "tensors")], kind="bounded",
            why="600k (unused zero-size) tensors in one file: over the per-file tensor cap, refused before"
                " sorting or validating them, within the time and memory budget")

    # sharded checkpoints (llama_bias: two shards + index)
    IDX = "model.safetensors.index.json"

    def idx_case(name, fn, expect, raw=None, **kw):
        def build(ctx):
            d = copy_model(ctx, "llama_bias")
            p = os.path.join(d, IDX)
            if raw is not None:
                write(p, raw)
            else:
                mutate_json(p, fn)
            return forward(d)

        case("safetensors", name, build, expect, **kw)

    idx_case("index.missing_shard", lambda o: o["weight_map"].update({"model.norm.weight": "model-00003-of-00002.safetensors"}),
             ["model-00003-of-00002.safetensors"])
    idx_case("index.invalid_json", None, [IDX], raw='{"weight_map": {')
    idx_case("index.no_weight_map", lambda o: o.pop("weight_map"), [IDX, "weight_map"])
    idx_case("index.weight_map_list", lambda o: o.update({"weight_map": []}), [IDX, "weight_map"])
    idx_case("index.value_int", lambda o: o["weight_map"].update({"model.norm.weight": 1}), [IDX, "model.norm.weight"])
    idx_case("index.wrong_shard_for_tensor", lambda o: o["weight_map"].update({"model.norm.weight": "model-00001-of-00002.safetensors"}),
             ["model.norm.weight"])
    idx_case("index.path_traversal", lambda o: o["weight_map"].update({"model.norm.weight": "../../../etc/passwd"}),
             [("model.norm.weight", "etc/passwd", "..")],
             why="a shard name must be a file in the model directory")
    idx_case("index.deep", None, [IDX], raw='{"metadata": {}, "weight_map": ' + "[" * 100000 + "]" * 100000 + "}")

    def shard_case(name, fn, expect):
        def build(ctx):
            d = copy_model(ctx, "llama_bias")
            fn(os.path.join(d, "model-00002-of-00002.safetensors"))
            return forward(d)

        case("safetensors", name, build, expect)

    shard_case("shard.truncated", st_raw(lambda d: d[:100]), ["model-00002-of-00002.safetensors"])
    shard_case("shard.header_len_huge", st_raw(set_len(2**40)), ["model-00002-of-00002.safetensors"])


# ----------------------------------------------------------------------------------------------------
# Class: gguf


def gguf_case(name, make, expect, cmd="forward", fname="model.gguf", **kw):
    """make(ctx) -> bytes of the file (or a Gguf to dump)."""

    def build(ctx):
        out = make()
        p = ctx.path(fname)
        write(p, out.dump() if isinstance(out, Gguf) else out)
        if cmd == "forward":
            return forward(p)
        return ["tokenize", p]

    case("gguf", name, build, expect, stdin=HELLO if cmd == "tokenize" else None, **kw)


def gbytes():
    with open(GGUF_FIXTURE, "rb") as f:
        return f.read()


def patch(data, off, b):
    return data[:off] + b + data[off + len(b) :]


def add_gguf_cases():
    F = "model.gguf"
    gguf_case("magic.bad", lambda: patch(gbytes(), 0, b"GGUX"), [F, "magic"])
    gguf_case("magic.safetensors_content", lambda: open(os.path.join(MODELS, "qwen3_tied", "model.safetensors"), "rb").read(), [F])
    gguf_case("magic.text_file", lambda: b"this is not a model\n" * 10, [F])
    gguf_case("version.1", lambda: patch(gbytes(), 4, struct.pack("<I", 1)), [F, "version"])
    gguf_case("version.99", lambda: patch(gbytes(), 4, struct.pack("<I", 99)), [F, "version"])
    gguf_case("version.big_endian", lambda: patch(gbytes(), 4, struct.pack(">I", 3)), [F, ("big-endian", "version")])
    gguf_case("truncated.half", lambda: gbytes()[: len(gbytes()) // 2], [F])
    gguf_case("truncated.header", lambda: gbytes()[:10], [F])
    gguf_case("truncated.in_metadata", lambda: gbytes()[:200], [F])
    gguf_case("truncated.empty", lambda: b"", [F])
    gguf_case("tensor_count.2pow60", lambda: patch(gbytes(), 8, struct.pack("<Q", 2**60)), [F, "tensor"])
    gguf_case("kv_count.2pow60", lambda: patch(gbytes(), 16, struct.pack("<Q", 2**60)), [F, "metadata"])
    gguf_case("kv_count.2pow64_minus1", lambda: patch(gbytes(), 16, struct.pack("<Q", 2**64 - 1)), [F, "metadata"])
    gguf_case("key_length.huge", lambda: patch(gbytes(), 24, struct.pack("<Q", 2**62)), [F])

    def string_value_len_huge():
        d = gbytes()
        # general.architecture is the first key: u64 len(20) + key + u32 type(8) + u64 value length
        off = 24 + 8 + len("general.architecture") + 4
        return patch(d, off, struct.pack("<Q", 2**50))

    gguf_case("string_length.huge", string_value_len_huge, [F, ("general.architecture", "truncated")])

    def g():
        return Gguf()

    def kv(key, t, v):
        return lambda: g().set(key, t, v)

    gguf_case("block_count.string", kv("llama.block_count", "str", "1"), [F, "llama.block_count"])
    gguf_case("block_count.1e6", kv("llama.block_count", "u32", 10**6), [("llama.block_count", "blk.1")])
    gguf_case("block_count.zero", kv("llama.block_count", "u32", 0), [F, "llama.block_count"])
    gguf_case("block_count.u64_max", kv("llama.block_count", "u64", 2**64 - 1), [F, "llama.block_count"])
    gguf_case("embedding_length.float", kv("llama.embedding_length", "f32", 64.0), [F, "llama.embedding_length"])
    gguf_case("embedding_length.1e10", kv("llama.embedding_length", "u64", 10**10), [("llama.embedding_length", "token_embd")])
    gguf_case("head_count.zero", kv("llama.attention.head_count", "u32", 0), [F, "head_count"])
    gguf_case("head_count.string", kv("llama.attention.head_count", "str", "4"), [F, "llama.attention.head_count"])
    gguf_case("head_count_kv.not_divisor", kv("llama.attention.head_count_kv", "u32", 3), [F, "head_count"])
    gguf_case("context_length.array", kv("llama.context_length", "arr", (GT["u32"], [128])), [F, "llama.context_length"])
    gguf_case("context_length.negative", kv("llama.context_length", "i32", -128), [F, "llama.context_length"])
    gguf_case("feed_forward_length.missing", lambda: g().drop("llama.feed_forward_length"), [F, "llama.feed_forward_length"])
    gguf_case("architecture.missing", lambda: g().drop("general.architecture"), [F, "general.architecture"])
    gguf_case("architecture.unknown", kv("general.architecture", "str", "mamba"), [F, ("general.architecture", "mamba")])
    gguf_case("architecture.int", kv("general.architecture", "u32", 7), [F, "general.architecture"])
    gguf_case("alignment.not_pow2", kv("general.alignment", "u32", 3), [F, "general.alignment"])
    gguf_case("alignment.zero", kv("general.alignment", "u32", 0), [F, "general.alignment"])
    RB = "llama.rope.freq_base"
    gguf_case("rope_freq_base.zero", kv(RB, "f32", 0.0), [F, RB])
    gguf_case("rope_freq_base.negative", kv(RB, "f32", -50000.0), [F, RB])
    gguf_case("rope_freq_base.nan", kv(RB, "f32", float("nan")), [F, RB])
    gguf_case("rope_freq_base.inf", kv(RB, "f64", float("inf")), [F, RB])
    gguf_case("rope_freq_base.string", kv(RB, "str", "50000"), [F, RB])
    EPS = "llama.attention.layer_norm_rms_epsilon"
    gguf_case("rms_eps.negative", kv(EPS, "f32", -1e-5), [F, EPS])
    gguf_case("rms_eps.nan", kv(EPS, "f32", float("nan")), [F, EPS])
    gguf_case("rms_eps.missing", lambda: g().drop(EPS), [F, EPS])
    gguf_case("rope_scaling.unknown_type", kv("llama.rope.scaling.type", "str", "yarn"), [F, ("llama.rope.scaling.type", "yarn")])
    gguf_case("array.nested_too_deep",
              kv("x.custom", "arr", (GT["arr"], [(GT["arr"], [(GT["arr"], [(GT["arr"], [(GT["arr"], [])])])])])), [F])
    gguf_case("array.unknown_elem_type", patch_arr_type, [F])
    gguf_case("value.unknown_type", patch_value_type, [F])
    gguf_case("metadata.duplicate_key", dup_key, [F, "general.architecture"])

    def tens(fn):
        def make():
            gg = g()
            fn(gg)
            return gg

        return make

    TE = "token_embd.weight"
    gguf_case("tensor.unknown_type", tens(lambda gg: gg.tensor(TE).__setitem__(2, 99)), [F, TE])
    gguf_case("tensor.data_beyond_file", tens(lambda gg: gg.tensor("output.weight").__setitem__(3, 10**9 * 32)), [F, "output.weight"])
    gguf_case("tensor.offset_misaligned", tens(lambda gg: gg.tensor("output.weight").__setitem__(3, 42241)), [F, "output.weight"])
    gguf_case("tensor.zero_dims", tens(lambda gg: gg.tensor("output_norm.weight").__setitem__(1, [])), [F, "output_norm.weight"])
    gguf_case("tensor.five_dims", tens(lambda gg: gg.tensor("output_norm.weight").__setitem__(1, [64, 1, 1, 1, 1])), [F, "output_norm.weight"])
    gguf_case("tensor.dims_overflow", tens(lambda gg: gg.tensor(TE).__setitem__(1, [2**40, 2**40])), [F, TE])
    gguf_case("tensor.duplicate_name", tens(lambda gg: gg.tensor("output_norm.weight").__setitem__(0, "blk.0.attn_norm.weight")),
              [F, "blk.0.attn_norm.weight"])
    gguf_case("tensor.missing", tens(lambda gg: gg.tensor("blk.0.ffn_down.weight").__setitem__(0, "blk.0.ffn_down.weightX")),
              [("blk.0.ffn_down", "down_proj")])
    gguf_case("tensor.transposed", tens(lambda gg: gg.tensor(TE).__setitem__(1, [32, 64])), [(TE, "embed_tokens")])
    gguf_case("tensor.row_not_block_multiple", tens(lambda gg: gg.tensor("blk.0.attn_q.weight").__setitem__(1, [33, 64])),
              [F, "blk.0.attn_q.weight"])
    # tokenizer metadata, through `tessera tokenize FILE.gguf`
    TK = "tokenizer.ggml.tokens"
    gguf_case("tokenizer.tokens_ints", kv(TK, "arr", (GT["u32"], list(range(32)))), [F, TK], cmd="tokenize")
    gguf_case("tokenizer.tokens_missing", lambda: g().drop(TK), [F, TK], cmd="tokenize")
    gguf_case("tokenizer.model_unknown", kv("tokenizer.ggml.model", "str", "llama"), [F, "tokenizer.ggml.model"], cmd="tokenize")
    gguf_case("tokenizer.bos_out_of_vocab", kv("tokenizer.ggml.bos_token_id", "u32", 10**6), [F, "bos"], cmd="tokenize")
    gguf_case("tokenizer.bos_string", kv("tokenizer.ggml.bos_token_id", "str", "1"), [F, "tokenizer.ggml.bos_token_id"], cmd="tokenize")
    gguf_case("tokenizer.merges_bad", kv("tokenizer.ggml.merges", "arr", (GT["str"], ["abc"])), [F, "tokenizer.ggml.merges"], cmd="tokenize")
    gguf_case("tokenizer.token_type_wrong_count", kv("tokenizer.ggml.token_type", "arr", (GT["i32"], [1, 1])), [F, "tokenizer.ggml.token_type"],
              cmd="tokenize")
    gguf_case("tokenizer.tokens_2M", kv(TK, "arr", (GT["str"], ["t%d" % i for i in range(2000000)])), [F],
              why="2M vocabulary strings vs a 32-row embedding: refused within 2 s and the memory budget")
    gguf_case("suffix.other_name_bad_magic", lambda: patch(gbytes(), 0, b"GGUX"), ["model.bin"], fname="model.bin",
              why="a GGUF without the .gguf suffix is detected by its magic; a bad one is still named")


def _kv_offsets():
    """Byte offsets of each metadata entry's type field in the fixture."""
    d = gbytes()
    pos = 24
    out = []
    gg = Gguf()
    for k, t, v in gg.kv:
        pos += 8 + len(k.encode())
        out.append((k, pos))
        pos += 4 + len(Gguf._wv(gg, t, v))
    return out


def patch_value_type():
    d = gbytes()
    k, off = _kv_offsets()[1]  # llama.context_length
    return patch(d, off, struct.pack("<I", 77))


def patch_arr_type():
    gg = Gguf().set("x.custom", "arr", (GT["u8"], []))
    d = gg.dump()
    # the last key is x.custom: find its array element type right after the type field
    pos = d.rfind(b"x.custom") + len(b"x.custom") + 4
    return patch(d, pos, struct.pack("<I", 55))


def dup_key():
    gg = Gguf()
    gg.kv.append(["general.architecture", GT["str"], "llama"])
    return gg


# ----------------------------------------------------------------------------------------------------
# Class: tokenizer (tokenizer.json, tokenizer_config.json)


def tok_case(name, file, fn, expect, raw=None, src="tiny_gpt2", cmd="tokenize", **kw):
    def build(ctx):
        d = ctx.path("tok")
        os.makedirs(d)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(os.path.join(TOKENIZERS, src, f), os.path.join(d, f))
        p = os.path.join(d, file)
        if raw is not None:
            write(p, raw)
        else:
            mutate_json(p, fn)
        if cmd == "tokenize":
            return ["tokenize", d]
        if cmd == "detokenize":
            return ["detokenize", d]
        # chat: the tokenizer inside a model directory whose vocabulary covers it
        m = copy_model(ctx, "qwen3_tied")
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(os.path.join(d, f), os.path.join(m, f))
        return ["generate", m, "--chat", "--prompt", "hi", "--max-new-tokens", "2", "-q"]

    stdin = b"1 2 3\n" if cmd == "detokenize" else HELLO
    case("tokenizer", name, build, expect, stdin=stdin, **kw)


def tok_files(ctx, fn, src="tiny_gpt2"):
    d = ctx.path("tok")
    os.makedirs(d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(TOKENIZERS, src, f), os.path.join(d, f))
    mutate_json(os.path.join(d, "tokenizer.json"), fn)
    return d


def add_tokenizer_cases():
    TJ, TC = "tokenizer.json", "tokenizer_config.json"

    tok_case("json.invalid", TJ, None, [TJ], raw='{"model": {')
    tok_case("json.empty", TJ, None, [TJ], raw="")
    tok_case("json.list", TJ, None, [TJ], raw="[]")
    tok_case("json.deep", TJ, None, [TJ], raw='{"model": ' + "[" * 100000 + "]" * 100000 + "}")
    tok_case("json.invalid_utf8", TJ, None, [TJ], raw=b'{"model": {"type": "B\xffPE"}}')
    tok_case("model.missing", TJ, lambda o: o.pop("model"), [TJ, "model"])
    tok_case("model.unigram", TJ, lambda o: o["model"].update({"type": "Unigram"}), [TJ, "Unigram"])
    tok_case("model.type_int", TJ, lambda o: o["model"].update({"type": 5}), [TJ, "type"])
    tok_case("model.vocab_list", TJ, lambda o: o["model"].update({"vocab": [1, 2]}), [TJ, "vocab"])
    tok_case("model.vocab_id_string", TJ, lambda o: o["model"]["vocab"].update({"a": "x"}), [TJ, "vocab"])
    tok_case("model.vocab_id_negative", TJ, lambda o: o["model"]["vocab"].update({"a": -5}), [TJ, "vocab"])
    tok_case("model.vocab_id_2pow40", TJ, lambda o: o["model"]["vocab"].update({"a": 2**40}), [TJ, "vocab"])
    tok_case("model.merge_bad", TJ, lambda o: o["model"].update({"merges": ["abc"]}), [TJ, "merge"])
    tok_case("model.merge_ints", TJ, lambda o: o["model"].update({"merges": [[1, 2]]}), [TJ, "merge"])
    tok_case("model.merge_unknown_token", TJ, lambda o: o["model"].update({"merges": ["qqqq zzzz"]}), [TJ, "merge"],
             why="tokenizers refuses a merge whose parts are not in the vocabulary")
    tok_case("model.byte_fallback", TJ, lambda o: o["model"].update({"byte_fallback": True}), [TJ, "byte_fallback"])
    tok_case("added_tokens.not_list", TJ, lambda o: o.update({"added_tokens": {"a": 1}}), [TJ, "added_tokens"])
    tok_case("added_tokens.entry_number", TJ, lambda o: o.update({"added_tokens": [5]}), [TJ, "added_tokens"])
    tok_case("added_tokens.no_content", TJ, lambda o: o.update({"added_tokens": [{"id": 5, "special": True}]}), [TJ, "added_tokens"])
    tok_case("added_tokens.id_string", TJ, lambda o: o["added_tokens"][0].update({"id": "900"}), [TJ, "added_tokens"])
    tok_case("added_tokens.id_negative", TJ, lambda o: o["added_tokens"][0].update({"id": -1}), [TJ, "added_tokens"])
    tok_case("added_tokens.content_int", TJ, lambda o: o["added_tokens"][0].update({"content": 7}), [TJ, "added_tokens"])
    tok_case("added_tokens.huge_token", TJ, lambda o: o["added_tokens"].append(
        {"id": 901, "content": "x" * (16 << 20), "special": True, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False}), [TJ], kind="bounded",
        why="a legal 16 MB added token: accepted or refused, within the memory budget")
    tok_case("normalizer.unknown", TJ, lambda o: o.update({"normalizer": {"type": "Precompiled", "precompiled_charsmap": ""}}),
             [TJ, ("normalizer", "Precompiled")])
    tok_case("pre_tokenizer.unknown", TJ, lambda o: o.update({"pre_tokenizer": {"type": "Whitespacey"}}), [TJ, ("pre_tokenizer", "Whitespacey")])
    tok_case("pre_tokenizer.no_type", TJ, lambda o: o.update({"pre_tokenizer": {"add_prefix_space": False}}), [TJ, "pre_tokenizer"])
    def bad_regex(o):
        o["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(?<unclosed"}, "behavior": "Isolated", "invert": False}

    tok_case("pre_tokenizer.bad_regex", TJ, bad_regex, [TJ, ("Regex", "regex", "pattern")])

    def bad_behavior(o):
        o["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways", "invert": False}

    tok_case("pre_tokenizer.bad_behavior", TJ, bad_behavior, [TJ, "Sideways"])
    tok_case("decoder.unknown", TJ, lambda o: o.update({"decoder": {"type": "WordPiece"}}), [TJ, ("decoder", "WordPiece")])
    tok_case("post_processor.unknown", TJ, lambda o: o.update({"post_processor": {"type": "RobertaProcessingX"}}),
             [TJ, ("post_processor", "RobertaProcessingX")])

    def tp_missing(o):
        o["post_processor"] = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<nope>", "type_id": 0}},
                                                                       {"Sequence": {"id": "A", "type_id": 0}}],
                               "pair": [], "special_tokens": {}}

    tok_case("post_processor.template_missing_special", TJ, tp_missing, [TJ, "<nope>"])
    # tokenizer_config.json
    tok_case("config.invalid_json", TC, None, [TC], raw="{")
    tok_case("config.list", TC, None, [TC], raw="[1]")
    tok_case("config.deep", TC, None, [TC], raw='{"chat_template": ' + "[" * 100000 + "]" * 100000 + "}")

    def atd(entries):
        return lambda o: o.update({"added_tokens_decoder": entries})

    ok_tok = {"content": "<x>", "special": True, "lstrip": False, "rstrip": False, "normalized": False, "single_word": False}
    tok_case("config.added_tokens_decoder_bad_key", TC, atd({"abc": ok_tok}), [TC, "added_tokens_decoder", "abc"])
    tok_case("config.added_tokens_decoder_negative_key", TC, atd({"-1": ok_tok}), [TC, "added_tokens_decoder"])
    tok_case("config.added_tokens_decoder_huge_key", TC, atd({"99999999999999999999": ok_tok}), [TC, "added_tokens_decoder"])
    tok_case("config.added_tokens_decoder_value_int", TC, atd({"901": 5}), [TC, "added_tokens_decoder"])
    tok_case("config.added_tokens_decoder_no_content", TC, atd({"901": {"special": True}}), [TC, "added_tokens_decoder"])
    tok_case("config.added_tokens_decoder_list", TC, atd([ok_tok]), [TC, "added_tokens_decoder"])
    tok_case("config.chat_template_int", TC, lambda o: o.update({"chat_template": 5}), [TC, "chat_template"])
    tok_case("config.chat_template_list_no_default", TC, lambda o: o.update({"chat_template": [{"name": "tool_use", "template": "x"}]}),
             [TC, ("chat_template", "default")])
    tok_case("config.eos_token_int", TC, lambda o: o.update({"eos_token": 5}), [TC, "eos_token"])
    tok_case("config.bos_token_object_bad", TC, lambda o: o.update({"bos_token": {"content": 5}}), [TC, "bos_token"])
    tok_case("chat_template.syntax_error", TC, lambda o: o.update({"chat_template": "{% for m in messages %}{{ m.content }"}),
             [("chat_template", "template")], cmd="chat")
    tok_case("chat_template.unknown_filter", TC, lambda o: o.update({"chat_template": "{{ messages | frobnicate }}"}),
             [("frobnicate",)], cmd="chat")
    tok_case("chat_template.raise_exception", TC, lambda o: o.update({"chat_template": "{{ raise_exception('no system role') }}"}),
             ["no system role"], cmd="chat")
    CT = ("chat_template", "chat template", "template")
    tok_case("chat_template.runaway_loop", TC, lambda o: o.update(
        {"chat_template": "{% for i in range(1000000000) %}{{ messages[0].content }}{% endfor %}"}), [CT], cmd="chat",
        why="a template from the model repository must not run unbounded: output or step limit, then an error")
    tok_case("chat_template.recursive_macro", TC, lambda o: o.update(
        {"chat_template": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"}), [CT], cmd="chat")
    tok_case("chat_template.deep_parens", TC, lambda o: o.update(
        {"chat_template": "{{ " + "(" * 100000 + "1" + ")" * 100000 + " }}"}), [CT], cmd="chat")
    tok_case("chat_template.deep_blocks", TC, lambda o: o.update(
        {"chat_template": "{% if true %}" * 50000 + "x" + "{% endif %}" * 50000}), [CT], cmd="chat", kind="bounded",
        why="legal but 50k nested blocks: rendered or refused, never a stack overflow")
    tok_case("chat_template.string_multiply", TC, lambda o: o.update(
        {"chat_template": "{{ 'x' * 10000000000 }}"}), [CT], cmd="chat")

    def many_added(o):
        base = len(o["model"]["vocab"])
        o["added_tokens"] += [{"id": base + 1 + i, "content": "<extra_%d>" % i, "special": True, "single_word": False,
                               "lstrip": False, "rstrip": False, "normalized": False} for i in range(100000)]

    tok_case("added_tokens.100k", TJ, many_added, [TJ], kind="bounded",
             why="legal: 100k added tokens must not make matching quadratic")

    def catastrophic(o):
        o["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated", "invert": False}

    case("tokenizer", "pre_tokenizer.catastrophic_regex",
         lambda ctx: (tok_files(ctx, catastrophic), ["tokenize", ctx.path("tok")])[1], [(TJ, "pattern")], kind="bounded",
         stdin=b"a" * 40 + b"b\n", why="exponential backtracking: a match limit (an error) or a fast engine")
    # tiny_llama3: Sequence pre-tokenizer and post-processor, TemplateProcessing, added tokens
    L3 = dict(src="tiny_llama3")

    def l3_pre(fn):
        return lambda o: fn(o["pre_tokenizer"]["pretokenizers"])

    tok_case("llama3.pre_tokenizer_sequence_bad_item", TJ, l3_pre(lambda seq: seq.append({"type": "Nope"})),
             [TJ, "Nope"], **L3)
    tok_case("llama3.pre_tokenizer_sequence_not_list", TJ, lambda o: o["pre_tokenizer"].update({"pretokenizers": 5}),
             [TJ, "pre_tokenizer"], **L3)
    tok_case("llama3.pre_tokenizer_regex_bad_escape", TJ, l3_pre(lambda seq: seq[0]["pattern"].update({"Regex": "\\p{Nope}+"})),
             [TJ, ("Regex", "regex", "pattern")], **L3)
    tok_case("llama3.pre_tokenizer_pattern_int", TJ, l3_pre(lambda seq: seq[0].update({"pattern": 5})), [TJ, "pattern"], **L3)

    def l3_tp(fn):
        return lambda o: fn(o["post_processor"]["processors"][1])

    tok_case("llama3.template_special_ids_2pow40", TJ,
             l3_tp(lambda tp: tp["special_tokens"]["<|begin_of_text|>"].update({"ids": [2**40]})),
             [TJ, ("<|begin_of_text|>", "ids", "1099511627776")], **L3)
    tok_case("llama3.template_special_ids_string", TJ,
             l3_tp(lambda tp: tp["special_tokens"]["<|begin_of_text|>"].update({"ids": ["0"]})),
             [TJ, ("<|begin_of_text|>", "ids")], **L3)
    tok_case("llama3.template_item_unknown", TJ, l3_tp(lambda tp: tp["single"].append({"Mystery": {"id": "A"}})),
             [TJ, "TemplateProcessing"], **L3)
    tok_case("llama3.template_single_string", TJ, l3_tp(lambda tp: tp.update({"single": "$A"})), [TJ, ("TemplateProcessing", "single")],
             why="tokenizers writes the parsed form: a list of items", **L3)
    tok_case("llama3.post_processor_sequence_not_list", TJ, lambda o: o["post_processor"].update({"processors": {}}),
             [TJ, "post_processor"], **L3)
    tok_case("llama3.normalizer_unknown", TJ, lambda o: o.update({"normalizer": {"type": "Replace"}}),
             [TJ, ("normalizer", "Replace")], **L3)
    tok_case("llama3.chat_template_entry_not_object", TC, lambda o: o.update({"chat_template": [5]}), [TC, "chat_template"], **L3)
    tok_case("llama3.chat_template_entry_no_template", TC, lambda o: o.update({"chat_template": [{"name": "default"}]}),
             [TC, "chat_template"], **L3)
    # Not cases: an empty added-token content and an eos_token object without "content" both load in
    # tokenizers 0.23.3 / transformers 5.24 (checked), so refusing them would be stricter than the reference.
    tok_case("detokenize.llama3_bad_added", TJ, lambda o: o["added_tokens"][0].update({"id": "x"}), [TJ, "added_tokens"],
             src="tiny_llama3", cmd="detokenize")


# ----------------------------------------------------------------------------------------------------
# Class: files (FIFOs, devices, directories, empty files, links)


def add_files_cases():
    def dir_with(target, make, fixture="qwen3_tied", cmd=None):
        def build(ctx):
            d = copy_model(ctx, fixture)
            p = os.path.join(d, target)
            if os.path.lexists(p):
                os.unlink(p)
            make(p)
            return (cmd or forward)(d)

        return build

    fifo = os.mkfifo

    def devzero(p):
        os.symlink("/dev/zero", p)

    def mkdir(p):
        os.mkdir(p)

    def empty(p):
        write(p, b"")

    def dangling(p):
        os.symlink(p + ".nowhere", p)

    for target in ("config.json", "model.safetensors", "generation_config.json"):
        base = target.replace(".json", "").replace(".", "_")
        cmd = generate if target == "generation_config.json" else None
        case("files", base + ".fifo", dir_with(target, fifo, cmd=cmd), [target])
        case("files", base + ".dev_zero", dir_with(target, devzero, cmd=cmd), [target])
        case("files", base + ".directory", dir_with(target, mkdir, cmd=cmd), [target])
        case("files", base + ".empty", dir_with(target, empty, cmd=cmd), [target])
        case("files", base + ".dangling_symlink", dir_with(target, dangling, cmd=cmd), [target])
    case("files", "index.dev_zero", dir_with("model.safetensors.index.json", devzero, fixture="llama_bias"),
         ["model.safetensors.index.json"])
    case("files", "index.fifo", dir_with("model.safetensors.index.json", fifo, fixture="llama_bias"),
         ["model.safetensors.index.json"])
    case("files", "shard.fifo", dir_with("model-00001-of-00002.safetensors", fifo, fixture="llama_bias"),
         ["model-00001-of-00002.safetensors"])

    def model_as(make, name):
        def build(ctx):
            p = ctx.path(name)
            make(p)
            return forward(p)

        return build

    case("files", "model.fifo_gguf", model_as(fifo, "model.gguf"), ["model.gguf"])
    case("files", "model.fifo_no_suffix", model_as(fifo, "weights"), ["weights"])
    case("files", "model.dev_zero_gguf", model_as(devzero, "model.gguf"), ["model.gguf"])
    case("files", "model.dev_zero_direct", lambda ctx: forward("/dev/zero"), ["/dev/zero"])
    case("files", "model.dev_null_direct", lambda ctx: forward("/dev/null"), ["/dev/null"])
    case("files", "model.empty_gguf", model_as(empty, "model.gguf"), ["model.gguf"])
    case("files", "model.nonexistent", lambda ctx: forward(ctx.path("no_such_model")), ["no_such_model"])
    case("files", "model.empty_dir", model_as(mkdir, "emptydir"), ["emptydir"])
    case("files", "model.dangling_symlink", model_as(dangling, "model.gguf"), ["model.gguf"])

    def tok_dir_with(target, make, cmd="tokenize"):
        def build(ctx):
            d = ctx.path("tok")
            os.makedirs(d)
            for f in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copyfile(os.path.join(TOKENIZERS, "tiny_gpt2", f), os.path.join(d, f))
            p = os.path.join(d, target)
            os.unlink(p)
            make(p)
            return [cmd, d]

        return build

    for target in ("tokenizer.json", "tokenizer_config.json"):
        base = target.replace(".json", "").replace(".", "_")
        case("files", base + ".fifo", tok_dir_with(target, fifo), [target], stdin=HELLO)
        case("files", base + ".dev_zero", tok_dir_with(target, devzero), [target], stdin=HELLO)
        case("files", base + ".directory", tok_dir_with(target, mkdir), [target], stdin=HELLO)
    case("files", "tokenizer.json_path_fifo", lambda ctx: (os.mkfifo(ctx.path("tokenizer.json")), ["tokenize", ctx.path("tokenizer.json")])[1],
         ["tokenizer.json"], stdin=HELLO)

    def tp_plan_with(make):
        def build(ctx):
            p = ctx.path("plan.json")
            make(p)
            return forward(fixture_model(ctx), "--tp-plan", p)

        return build

    case("files", "tp_plan.fifo", tp_plan_with(fifo), ["plan.json"])
    case("files", "tp_plan.dev_zero", tp_plan_with(devzero), ["plan.json"])
    case("files", "tp_plan.directory", tp_plan_with(mkdir), ["plan.json"])

    # Sizes are checked before reading: a 4 GiB (sparse) JSON file is refused, not read into memory.
    def sparse(p, head=b'{"a": 1}'):
        with open(p, "wb") as f:
            f.write(head)
            f.truncate(4 << 30)

    case("files", "config.sparse_4g", dir_with("config.json", sparse), ["config.json"])
    case("files", "generation_config.sparse_4g", dir_with("generation_config.json", sparse, cmd=generate),
         ["generation_config.json"])
    case("files", "index.sparse_4g", dir_with("model.safetensors.index.json", sparse, fixture="llama_bias"),
         ["model.safetensors.index.json"])
    case("files", "tokenizer.sparse_4g", tok_dir_with("tokenizer.json", sparse), ["tokenizer.json"], stdin=HELLO)
    case("files", "tokenizer_config.sparse_4g", tok_dir_with("tokenizer_config.json", sparse), ["tokenizer_config.json"],
         stdin=HELLO)
    case("files", "tp_plan.sparse_4g", tp_plan_with(sparse), ["plan.json"])
    case("files", "model_safetensors.sparse_header_4g",
         dir_with("model.safetensors", lambda p: sparse(p, struct.pack("<Q", (4 << 30) - 8) + b"{")),
         ["model.safetensors"], why="header length within the file but above the 100 MB header cap")

    def loop(p):
        os.symlink(p + ".b", p)
        os.symlink(p, p + ".b")

    case("files", "config.symlink_loop", dir_with("config.json", loop), ["config.json"])
    case("files", "model.symlink_loop", model_as(loop, "model.gguf"), ["model.gguf"])

    # The Hugging Face cache (HF_HOME/hub/models--org--name/{refs/main,snapshots/HASH/...})
    def hub(make):
        def build(ctx):
            repo = ctx.path("hf", "hub", "models--corpus-org--tiny")
            snap = os.path.join(repo, "snapshots", "0" * 40)
            os.makedirs(snap)
            os.makedirs(os.path.join(repo, "refs"))
            write(os.path.join(repo, "refs", "main"), "0" * 40)
            for f in os.listdir(os.path.join(MODELS, "qwen3_tied")):
                if f != "golden.json":
                    shutil.copyfile(os.path.join(MODELS, "qwen3_tied", f), os.path.join(snap, f))
            make(repo, snap)
            return forward("corpus-org/tiny")

        return build

    def refs_fifo(repo, snap):
        os.unlink(os.path.join(repo, "refs", "main"))
        os.mkfifo(os.path.join(repo, "refs", "main"))
        shutil.rmtree(snap)  # nothing else to fall back on

    def blob_missing(repo, snap):
        os.unlink(os.path.join(snap, "config.json"))
        os.symlink("../../blobs/0123456789abcdef", os.path.join(snap, "config.json"))

    def no_snapshots(repo, snap):
        shutil.rmtree(os.path.join(repo, "snapshots"))

    case("files", "hf_cache.refs_main_fifo", hub(refs_fifo), [("refs/main", "corpus-org/tiny")])
    case("files", "hf_cache.config_blob_missing", hub(blob_missing), ["config.json"])
    case("files", "hf_cache.no_snapshots", hub(no_snapshots), ["corpus-org/tiny"])
    case("files", "hf_cache.repo_not_cached", lambda ctx: forward("corpus-org/not-downloaded"), ["corpus-org/not-downloaded"])
    case("files", "hf_cache.repo_id_dotdot", lambda ctx: forward("../etc"), ["../etc"])

    root = hasattr(os, "geteuid") and os.geteuid() == 0

    def unreadable(target):
        def build(ctx):
            d = copy_model(ctx)
            os.chmod(os.path.join(d, target), 0)
            return forward(d)

        return build

    case("files", "config.unreadable", unreadable("config.json"), ["config.json"], skip="root ignores permissions" if root else None)
    case("files", "model.unreadable", unreadable("model.safetensors"), ["model.safetensors"],
         skip="root ignores permissions" if root else None)


# ----------------------------------------------------------------------------------------------------
# Class: cli (every flag of generate, chat, forward, tokenize, detokenize, bench, devices)


def add_cli_cases():
    def fx(fn):
        return lambda ctx: fn(fixture_model(ctx))

    def cli(name, build, expect, **kw):
        case("cli", name, build, expect, **kw)

    cli("no_subcommand", lambda ctx: [], [("subcommand", "generate")])
    cli("unknown_subcommand", lambda ctx: ["frobnicate"], ["frobnicate"])
    cli("unknown_flag.generate", fx(lambda m: generate(m, "--bogus-flag")), ["--bogus-flag"])
    cli("unknown_flag.forward", fx(lambda m: forward(m, "--frob")), ["--frob"])
    cli("unknown_flag.devices", lambda ctx: ["devices", "--bogus"], ["--bogus"])
    cli("extra_positional.forward", fx(lambda m: forward(m, "extra_arg")), ["extra_arg"])
    cli("forward.missing_input_ids", fx(lambda m: ["forward", m]), ["--input-ids"])
    cli("forward.missing_model", lambda ctx: ["forward", "--input-ids", "1,2"], ["model"])
    cli("tokenize.missing_model", lambda ctx: ["tokenize"], ["model"])
    for flag, bad in [("--threads", "0"), ("--threads", "abc"), ("--threads", "99999"), ("--tp-size", "0"),
                      ("--tp-size", "two"), ("--dtype", "int8"), ("--max-new-tokens", "-1"),
                      ("--max-new-tokens", "abc"), ("--max-new-tokens", "99999999999"), ("--max-new-tokens", "1e300"),
                      ("--temperature", "hot"), ("--top-k", "-1"), ("--top-k", "x"), ("--top-p", "abc"),
                      ("--min-p", "2"), ("--repetition-penalty", "0"), ("--repetition-penalty", "-1"), ("--seed", "-1"),
                      ("--seed", "abc"), ("--cache-implementation", "paged"), ("--max-recompiles", "-1"),
                      ("--buckets", "16,x"), ("--buckets", "0"), ("--buckets", "-16"), ("--buckets", "garbage"),
                      ("--collective-timeout", "-1"), ("--collective-timeout", "soon")]:
        cli("generate%s.%s" % (flag, bad), fx(lambda m, flag=flag, bad=bad: generate(m, flag, bad)), [flag])
    cli("generate--threads.missing_value", fx(lambda m: generate(m, "--threads")), ["--threads"])
    cli("generate--threads.float", fx(lambda m: generate(m, "--threads", "1.5")), ["--threads"])
    cli("generate--do-sample.value", fx(lambda m: generate(m, "--do-sample=maybe")), ["--do-sample"])
    cli("generate--exact-bf16-matmul.value", fx(lambda m: generate(m, "--exact-bf16-matmul=banana")), ["--exact-bf16-matmul"])
    cli("generate--tp-plan.empty", fx(lambda m: generate(m, "--tp-plan", "")), ["--tp-plan"])
    cli("tokenize--add-special-tokens.value", lambda ctx: ["tokenize", os.path.join(TOKENIZERS, "tiny_gpt2"),
                                                          "--add-special-tokens=maybe"], ["--add-special-tokens"], stdin=HELLO)
    cli("devices--json.value", lambda ctx: ["devices", "--json=nope"], ["--json"])
    for flag, bad in [("--temperature", "-1"), ("--temperature", "0"), ("--temperature", "nan"), ("--top-p", "0"),
                      ("--top-p", "1.5"), ("--min-p", "-0.5"), ("--top-k", "99999999999")]:
        cli("generate_sampling%s.%s" % (flag, bad), fx(lambda m, flag=flag, bad=bad: generate(m, "--do-sample", flag, bad)), [flag])
    cli("forward--dtype.unknown", fx(lambda m: forward(m, "--dtype", "q4")), ["--dtype"])
    cli("forward--device.unknown", fx(lambda m: forward(m, "--device", "abacus")), [("--device", "abacus")])
    cli("forward--device.pjrt_missing_plugin", fx(lambda m: forward(m, "--device", "pjrt:/nonexistent/plugin.so")),
        ["/nonexistent/plugin.so"])
    cli("forward--device.empty", fx(lambda m: forward(m, "--device", "")), [("--device", "device ''")])
    for name, ids in [("double_comma", "1,,2"), ("negative", "1,-2"), ("letters", "a,b"), ("out_of_vocab", "1,99999"),
                      ("2pow40", "1099511627776"), ("empty", ""), ("trailing_comma", "1,2,"), ("float", "1.5"),
                      ("spaces_only", "  ")]:
        cli("forward--input-ids." + name, fx(lambda m, ids=ids: ["forward", m, "--input-ids", ids, "-q"]),
            [("--input-ids", "99999") if name == "out_of_vocab" else "--input-ids"])
    cli("forward--input-ids.longer_than_context", fx(lambda m: ["forward", m, "--input-ids", ",".join(["5"] * 30000), "-q"]),
        [("--input-ids", "max_position_embeddings")],
        why="30k positions for a 256-position model: [n, n] attention scores alone would need 3.6 GB")
    cli("generate--input-ids.longer_than_context", fx(lambda m: ["generate", m, "--input-ids", ",".join(["5"] * 30000),
                                                                   "--max-new-tokens", "1", "-q"]),
        [("--input-ids", "max_position_embeddings")])
    cli("generate--input-ids.out_of_vocab", fx(lambda m: ["generate", m, "--input-ids", "5000", "-q"]), [("--input-ids", "5000")])
    cli("generate--input-ids.double_comma", fx(lambda m: ["generate", m, "--input-ids", "1,,2", "-q"]), ["--input-ids"])
    cli("generate.prompt_empty", fx(lambda m: ["generate", m, "--prompt", "", "-q"]), ["--prompt"])
    cli("generate.prompt_and_ids", fx(lambda m: ["generate", m, "--prompt", "hi", "--input-ids", "1", "-q"]), ["--prompt"])
    cli("generate.chat_with_ids", fx(lambda m: ["generate", m, "--chat", "--input-ids", "1", "-q"]), ["--chat"])
    cli("generate.prompt_without_tokenizer", fx(lambda m: ["generate", m, "--prompt", "hi", "-q"]), ["tokenizer"])
    cli("chat.without_tokenizer", fx(lambda m: ["chat", m, "-q"]), ["tokenizer"], stdin=b"hi\n")

    def with_tok_no_template(ctx):
        d = copy_model(ctx)
        add_tokenizer(ctx, d)
        mutate_json(os.path.join(d, "tokenizer_config.json"), del_key("chat_template"))
        return ["generate", d, "--chat", "--prompt", "hi", "-q"]

    cli("generate.chat_without_template", with_tok_no_template, [("chat template", "chat_template")])
    cli("tp.size3_heads4", fx(lambda m: forward(m, "--tp-size", "3")), [("--tp-size", "tp_size")])
    cli("tp.size2_outside_launch", fx(lambda m: forward(m, "--tp-size", "2")), [("--tp-size", "tessera launch", "tp_size")])
    cli("tp.rule_bad_style", fx(lambda m: forward(m, "--tp-rule", "layers.*.self_attn.q_proj=diagonal")), ["--tp-rule", "diagonal"])
    cli("tp.rule_no_equals", fx(lambda m: forward(m, "--tp-rule", "layers.*.self_attn.q_proj")), ["--tp-rule"])
    cli("tp.rule_matches_nothing", fx(lambda m: forward(m, "--tp-rule", "layers.*.frobnicator=colwise")), ["--tp-rule", "frobnicator"])
    cli("tp.rule_empty", fx(lambda m: forward(m, "--tp-rule", "")), ["--tp-rule"])

    def plan(text):
        def build(ctx):
            p = ctx.path("plan.json")
            write(p, text)
            return forward(fixture_model(ctx), "--tp-plan", p)

        return build

    cli("tp_plan.invalid_json", plan("{"), ["plan.json"])
    cli("tp_plan.list", plan("[]"), ["plan.json"])
    cli("tp_plan.value_int", plan('{"layers.*.self_attn.q_proj": 5}'), ["plan.json"])
    cli("tp_plan.bad_style", plan('{"layers.*.self_attn.q_proj": "diagonal"}'), ["plan.json", "diagonal"])
    cli("tp_plan.deep", plan('{"a": ' + "[" * 100000 + "]" * 100000 + "}"), ["plan.json"])
    cli("tp_plan.nonexistent", lambda ctx: forward(fixture_model(ctx), "--tp-plan", ctx.path("nope.json")), ["nope.json"])
    cli("detokenize.out_of_vocab", lambda ctx: ["detokenize", os.path.join(TOKENIZERS, "tiny_gpt2")], ["stdin", "99999"],
        stdin=b"1 99999\n")
    cli("detokenize.letters", lambda ctx: ["detokenize", os.path.join(TOKENIZERS, "tiny_gpt2")], ["stdin"], stdin=b"1 abc\n")
    cli("detokenize.double_comma", lambda ctx: ["detokenize", os.path.join(TOKENIZERS, "tiny_gpt2")], ["stdin"], stdin=b"1,,2\n")
    cli("tokenize.jsonl_bad_line", lambda ctx: ["tokenize", os.path.join(TOKENIZERS, "tiny_gpt2"), "--jsonl"], ["stdin line 2"],
        stdin=b'{"text": "ok"}\n{"text": 5}\n')
    cli("tokenize.jsonl_not_json", lambda ctx: ["tokenize", os.path.join(TOKENIZERS, "tiny_gpt2"), "--jsonl"], ["stdin line 1"],
        stdin=b"not json\n")
    cli("bench--prompt-tokens.zero", fx(lambda m: ["bench", m, "--prompt-tokens", "0"]), ["--prompt-tokens"])
    cli("bench--new-tokens.one", fx(lambda m: ["bench", m, "--new-tokens", "1"]), ["--new-tokens"])
    cli("bench--repeats.zero", fx(lambda m: ["bench", m, "--repeats", "0"]), ["--repeats"])
    cli("bench--dtype.unknown", fx(lambda m: ["bench", m, "--dtype", "int4"]), ["--dtype"])
    def envcase(name, var, value, argv_fn, expect):
        cli("env.%s.%s" % (var, name), argv_fn, expect, env={var: value})

    for name, v in [("letters", "abc"), ("zero", "0"), ("negative", "-3"), ("huge", "99999999999")]:
        envcase(name, "TESSERA_NUM_THREADS", v, fx(generate), ["TESSERA_NUM_THREADS"])
    envcase("unknown", "TESSERA_ISA", "sse9", fx(generate), ["TESSERA_ISA"])
    envcase("letters", "TESSERA_MAX_RECOMPILES", "many", fx(generate), ["TESSERA_MAX_RECOMPILES"])
    envcase("negative", "TESSERA_MAX_RECOMPILES", "-5", fx(generate), ["TESSERA_MAX_RECOMPILES"])
    envcase("dev_zero", "TESSERA_DEFAULT_MODEL", "/dev/zero", lambda ctx: ["generate", "--input-ids", "1", "-q"],
            [("TESSERA_DEFAULT_MODEL", "/dev/zero")])
    envcase("missing", "TESSERA_DEFAULT_MODEL", "{tmp}/nowhere.gguf", lambda ctx: ["generate", "--input-ids", "1", "-q"],
            [("TESSERA_DEFAULT_MODEL", "nowhere.gguf")])

    def broken(fn, fixture="qwen3_tied"):
        def build(ctx):
            d = copy_model(ctx, fixture)
            mutate_json(os.path.join(d, "config.json"), fn)
            return d

        return build

    cli("bench.config_hidden_size_string", lambda ctx: ["bench", broken(set_key("hidden_size", "64"))(ctx), "--quick"],
        [("config.json", "(config)"), "hidden_size"])
    cli("bench.config_rope_theta_negative", lambda ctx: ["bench", broken(lambda o: to_hub_layout(o).update(rope_theta=-1.0))(ctx),
                                                          "--quick"],
        [("config.json", "(config)"), "rope_theta"])
    cli("bench.model_fifo", lambda ctx: (os.mkfifo(ctx.path("m.gguf")), ["bench", ctx.path("m.gguf"), "--quick"])[1],
        ["m.gguf"])
    cli("tokenize.model_fifo_gguf", lambda ctx: (os.mkfifo(ctx.path("m.gguf")), ["tokenize", ctx.path("m.gguf")])[1],
        ["m.gguf"], stdin=HELLO)
    cli("tokenize.dev_zero", lambda ctx: ["tokenize", "/dev/zero"], ["/dev/zero"], stdin=HELLO)
    cli("detokenize.dir_without_tokenizer", lambda ctx: ["detokenize", fixture_model(ctx)], ["tokenizer.json"], stdin=b"1 2\n")
    cli("chat--max-new-tokens.negative", fx(lambda m: ["chat", m, "--max-new-tokens", "-5"]), ["--max-new-tokens"], stdin=b"")


# ----------------------------------------------------------------------------------------------------
# Class: launch


def add_launch_cases():
    def L(*args):
        return ["launch", "--no-mpi"] + list(args)

    def la(name, argv, expect, **kw):
        case("launch", name, lambda ctx, argv=argv: list(argv), expect, **kw)

    for flag, bad in [("--nproc-per-node", "0"), ("--nproc-per-node", "-1"), ("--nproc-per-node", "abc"),
                      ("--nproc-per-node", "99999"), ("--nproc-per-node", "1e3"), ("--nnodes", "0"), ("--nnodes", "x"),
                      ("--master-port", "0"), ("--master-port", "70000"), ("--master-port", "http")]:
        la("%s.%s" % (flag, bad), L(flag, bad, "--", "true"), [flag])
    la("--node-rank.out_of_range", L("--nnodes", "1", "--node-rank", "5", "--", "true"), ["--node-rank"])
    la("--node-rank.negative", L("--nnodes", "2", "--master-addr", "127.0.0.1", "--node-rank", "-1", "--", "true"), ["--node-rank"])
    la("no_command", L("--nproc-per-node", "2"), ["command"])
    la("no_command_after_dashes", L("--nproc-per-node", "2", "--"), ["command"])
    la("command_not_found", L("--nproc-per-node", "2", "--", "/nonexistent/bin/tool"), ["/nonexistent/bin/tool"])
    la("command_not_on_path", L("--nproc-per-node", "1", "--", "no-such-tool-xyz"), ["no-such-tool-xyz"])
    la("command_is_directory", L("--nproc-per-node", "2", "--", "/"), [("'/'", "/:")])
    la("nnodes_without_master_addr", L("--nnodes", "2", "--", "true"), ["--master-addr"])
    la("unknown_flag", ["launch", "--bogus-launch-flag", "--", "true"], ["--bogus-launch-flag"])
    la("tpu_without_chips", L("--nproc-per-node", "2", "--", "{cli}", "generate", "--device", "tpu", "--input-ids", "1"),
       [("tpu", "TPU")], why="CI machines have no TPU chip")

    def hostfile(text):
        def build(ctx):
            p = ctx.path("hosts.txt")
            if text is not None:
                write(p, text)
            return ["launch", "--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--hostfile", p, "--", "true"]

        return build

    case("launch", "hostfile.missing", hostfile(None), ["hosts.txt"])
    case("launch", "hostfile.garbage", hostfile("!!! not a host line slots=banana\n"), ["hosts.txt"])
    case("launch", "hostfile.empty", hostfile(""), ["hosts.txt"])
    # Failing ranks: non-zero exit and a message naming the rank
    sh = "/bin/sh"
    case("launch", "rank1_exits_3", lambda ctx: L("--nproc-per-node", "2", "--", sh, "-c",
                                                  'if [ "$RANK" = 1 ]; then exit 3; fi; sleep 5'),
         ["rank 1"], kind="rankfail")
    case("launch", "rank0_exits_3", lambda ctx: L("--nproc-per-node", "2", "--", sh, "-c",
                                                  'if [ "$RANK" = 0 ]; then exit 3; fi; sleep 5'),
         ["rank 0"], kind="rankfail")
    case("launch", "rank1_killed", lambda ctx: L("--nproc-per-node", "2", "--", sh, "-c",
                                                 'if [ "$RANK" = 1 ]; then kill -9 $$; fi; sleep 5'),
         ["rank 1"], kind="rankfail")
    case("launch", "rank1_tessera_error", lambda ctx: L("--nproc-per-node", "2", "--", "{cli}", "forward",
                                                        ctx.path("missing_model"), "--input-ids", "1"),
         [("rank", "missing_model")], kind="rankfail")
    mpirun = shutil.which("mpirun")
    case("launch", "mpi.rank1_exits_3", lambda ctx: ["launch", "--nproc-per-node", "2", "--", sh, "-c",
                                                     'if [ "$RANK" = 1 ]; then exit 3; fi; sleep 5'],
         ["rank 1"], kind="rankfail", skip=None if mpirun else "mpirun not installed",
         why="through mpirun the launcher must still say which rank failed")


add_config_cases()
add_generation_cases()
add_safetensors_cases()
add_gguf_cases()
add_tokenizer_cases()
add_files_cases()
add_cli_cases()
add_launch_cases()

# ----------------------------------------------------------------------------------------------------
# Runner


class Result:
    def __init__(self, case, ok, reason="", last="", rc=None, cpu=0.0, rss_mb=0.0, wall=0.0, skipped=False):
        self.case, self.ok, self.reason, self.last, self.rc = case, ok, reason, last, rc
        self.cpu, self.rss_mb, self.wall, self.skipped = cpu, rss_mb, wall, skipped


def regular_bytes(top):
    total = 0
    for dirpath, dirnames, filenames in os.walk(top):
        for f in filenames:
            st = os.lstat(os.path.join(dirpath, f))
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def last_line(text):
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-1] if lines else ""


def matches(line, expect):
    missing = []
    for item in expect:
        alts = item if isinstance(item, tuple) else (item,)
        if not any(a in line for a in alts):
            missing.append(" or ".join(repr(a) for a in alts))
    return missing


# The CLI is started by a small helper process, not by this runner: a child's ru_maxrss includes the RSS of
# the process it was forked from (the kernel carries the pre-exec high-water mark over), and this runner
# grows while it builds big inputs. The helper stays at the size of a bare interpreter.
SPAWNER_CODE = r"""
import json, os, resource, signal, subprocess, sys, threading
lock = threading.Lock()

def reply(obj):
    with lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

def serve(req):
    try:
        with open(req["stdin"], "rb") as fin, open(req["stdout"], "wb") as fout, open(req["stderr"], "wb") as ferr:
            p = subprocess.Popen(req["argv"], stdin=fin, stdout=fout, stderr=ferr, env=req["env"], cwd=req["cwd"],
                                 start_new_session=True)
    except OSError as e:
        return reply({"id": req["id"], "error": str(e)})
    if req["mem_cap_mb"] > 0:
        try:
            cap = req["mem_cap_mb"] << 20
            resource.prlimit(p.pid, resource.RLIMIT_AS, (cap, cap))
        except (OSError, ValueError):
            pass  # already exited
    timed_out = []

    def kill():
        timed_out.append(True)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass

    timer = threading.Timer(req["timeout"], kill)
    timer.start()
    try:
        _, status, ru = os.wait4(p.pid, 0)
    finally:
        timer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    try:  # stray ranks or grandchildren must not outlive the case
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    reply({"id": req["id"], "rc": p.returncode, "cpu": ru.ru_utime + ru.ru_stime, "maxrss_kb": ru.ru_maxrss,
           "timed_out": bool(timed_out)})

for line in sys.stdin:
    threading.Thread(target=serve, args=(json.loads(line),), daemon=True).start()
"""


class Spawner:
    def __init__(self):
        self.p = None
        self.lock = threading.Lock()
        self.waiting = {}
        self.next_id = 0

    def start(self):
        self.p = subprocess.Popen([sys.executable, "-c", SPAWNER_CODE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, bufsize=1)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            r = json.loads(line)
            with self.lock:
                slot = self.waiting.pop(r["id"])
            slot[1] = r
            slot[0].set()

    def run(self, argv, env, cwd, stdin, stdout, stderr):
        ev = threading.Event()
        with self.lock:
            self.next_id += 1
            rid = self.next_id
            slot = self.waiting[rid] = [ev, None]
            self.p.stdin.write(json.dumps({"id": rid, "argv": argv, "env": env, "cwd": cwd, "stdin": stdin,
                                           "stdout": stdout, "stderr": stderr, "timeout": WALL_LIMIT_S,
                                           "mem_cap_mb": MEM_CAP_MB}) + "\n")
            self.p.stdin.flush()
        ev.wait()
        return slot[1]

    def stop(self):
        if self.p:
            self.p.stdin.close()
            self.p.wait()


SPAWNER = Spawner()


def run_case(c, cli, keep=False):
    if c.skip:
        return Result(c, True, "skipped: " + c.skip, skipped=True)
    if cli is None:  # --dry-run: build the input only
        tmp = tempfile.mkdtemp(prefix="tessera-corpus-")
        try:
            c.build(Ctx(tmp))
            return Result(c, True)
        except Exception as e:
            return Result(c, False, "case generator failed: %r" % (e,))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    tmp = tempfile.mkdtemp(prefix="tessera-corpus-")
    t_start = time.monotonic()
    try:
        ctx = Ctx(tmp)
        try:
            argv = c.build(ctx)
        except Exception as e:  # a generator bug, not an engine failure: report it loudly
            return Result(c, False, "case generator failed: %r" % (e,))
        argv = [cli] + [a.replace("{cli}", cli) for a in argv]
        model_mb = (regular_bytes(tmp) + ctx.extra_model_bytes) / 2**20
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp, "LANG": "C.UTF-8",
               "TESSERA_NUM_THREADS": "1", "HF_HOME": os.path.join(tmp, "hf"), "TMPDIR": tmp,
               "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
        env.update({k: v.replace("{tmp}", tmp) for k, v in c.env.items()})
        stdin_path = os.path.join(tmp, ".stdin")
        write(stdin_path, c.stdin or b"")
        out_path, err_path = os.path.join(tmp, ".stdout"), os.path.join(tmp, ".stderr")
        t0 = time.monotonic()
        r = SPAWNER.run(argv, env, tmp, stdin_path, out_path, err_path)
        wall = time.monotonic() - t0
        if "error" in r:  # e.g. the binary is being relinked
            return Result(c, False, "cannot start %s: %s" % (cli, r["error"]))
        timed_out = r["timed_out"]
        rc = r["rc"]
        cpu = r["cpu"]
        rss_mb = r["maxrss_kb"] / 1024.0
        with open(err_path, "rb") as f:
            err = f.read().decode("utf-8", "replace")
        last = last_line(err)
        if len(last) > 400:
            last = last[:400] + "...(%d chars)" % len(last)
        reasons = []
        if timed_out:
            reasons.append("hang: killed after %.0f s wall" % WALL_LIMIT_S)
        elif rc < 0:
            reasons.append("killed by signal %d (%s)" % (-rc, signal.Signals(-rc).name if -rc in signal.valid_signals() else "?"))
        elif c.kind == "error" and rc != 1:
            reasons.append("exit %d, expected 1" % rc)
        elif c.kind == "rankfail" and rc == 0:
            reasons.append("exit 0, expected the failing rank's non-zero code")
        elif c.kind == "bounded" and rc not in (0, 1):
            reasons.append("exit %d, expected 0 or 1" % rc)
        check_msg = not timed_out and rc != 0 and not (c.kind == "bounded" and rc == 0)
        if check_msg:
            if not last.startswith(PREFIX):
                reasons.append("last stderr line does not start with %r" % PREFIX)
            else:
                miss = matches(last, c.expect)
                if miss:
                    reasons.append("last stderr line does not name " + ", ".join(miss))
            if c.kind == "error" and len([l for l in err.splitlines() if l.startswith(PREFIX)]) > 1:
                reasons.append("more than one error line")
        if cpu > CPU_LIMIT_S:
            reasons.append("cpu %.2f s > %.1f s" % (cpu, CPU_LIMIT_S))
        if rss_mb > RSS_LIMIT_MB + model_mb:
            reasons.append("peak RSS %.0f MB > %d MB + model %.1f MB" % (rss_mb, RSS_LIMIT_MB, model_mb))
        return Result(c, not reasons, "; ".join(reasons), last, rc, cpu, rss_mb, time.monotonic() - t_start)
    finally:
        if keep:
            print("kept %s for %s" % (tmp, c.id), file=sys.stderr)
        else:
            for dirpath, dirnames, filenames in os.walk(tmp):  # chmod 0 files must be removable
                for n in dirnames + filenames:
                    try:
                        os.chmod(os.path.join(dirpath, n), 0o700, follow_symlinks=False)
                    except (OSError, NotImplementedError):
                        pass
            shutil.rmtree(tmp, ignore_errors=True)


def snapshot_cli(path, into):
    """A private copy of the CLI, so that a relink of the build tree mid-run (others building) cannot fail cases.
    Waits for the file to stop changing first."""
    last = None
    for _ in range(120):
        try:
            st = os.stat(path)
            cur = (st.st_size, st.st_mtime_ns)
        except OSError:
            cur = None
        if cur and cur == last and os.access(path, os.X_OK):
            dst = os.path.join(into, os.path.basename(path))
            shutil.copy2(path, dst)
            if os.stat(path).st_mtime_ns == cur[1]:
                return dst
        last = cur
        time.sleep(0.5)
    raise SystemExit("tessera CLI at %s kept changing or is missing" % path)


def self_test():
    """Checks that the runner itself fails each way it should, with /bin/sh standing in for the CLI."""
    global WALL_LIMIT_S
    # Long enough for the CPU probe's 2.3 CPU seconds on a machine loaded several times over (3 s was not, at
    # load 10 on 2 cores, and the probe was killed as a hang); the hang probe then waits this long.
    WALL_LIMIT_S = 10.0
    py = sys.executable
    good = "echo note >&2; echo 'tessera: error: x.json: field f is bad' >&2; exit 1"
    probes = [  # (script, kind, expect, should pass, reason fragment)
        (good, "error", ["x.json", "field f"], True, ""),
        (good, "error", [("nope", "field f")], True, ""),
        (good, "error", ["y.json"], False, "does not name"),
        ("echo 'tessera: error: x.json' >&2; exit 2", "error", ["x.json"], False, "exit 2"),
        ("echo 'error: x.json' >&2; exit 1", "error", ["x.json"], False, "does not start with"),
        ("echo 'tessera: error: a' >&2; echo 'tessera: error: x.json' >&2; exit 1", "error", ["x.json"], False, "more than one"),
        ("exit 0", "error", ["x.json"], False, "exit 0"),
        ("exit 0", "bounded", ["x.json"], True, ""),
        ("echo 'tessera: error: rank 1 exited' >&2; exit 3", "rankfail", ["rank 1"], True, ""),
        ("kill -SEGV $$", "error", ["x"], False, "signal 11"),
        ("sleep 30", "error", ["x"], False, "hang"),
        ("exec %s -c 'import time\nt=time.process_time()\nwhile time.process_time()-t<2.3: pass\nraise SystemExit(1)'" % py,
         "error", ["x"], False, "cpu"),
        ("exec %s -c 'x=b\"y\"*(400<<20); raise SystemExit(1)'" % py, "error", ["x"], False, "peak RSS"),
    ]
    cases = [Case("cli", "selftest.%d" % i, (lambda ctx, sc=sc: ["-c", sc]), expect, kind=kind)
             for i, (sc, kind, expect, _, _) in enumerate(probes)]
    SPAWNER.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
            results = list(ex.map(lambda c: run_case(c, "/bin/sh"), cases))
    finally:
        SPAWNER.stop()
    bad = 0
    for (sc, kind, expect, should_pass, frag), r in zip(probes, results):
        ok = r.ok == should_pass and (should_pass or frag in r.reason)
        bad += not ok
        print("%-4s %-70s -> %s" % ("ok" if ok else "BAD", sc[:70], r.reason or "passed"))
    print("self-test: %d of %d probes behaved" % (len(probes) - bad, len(probes)))
    return 1 if bad else 0


def select(filters, classes):
    out = []
    for c in CASES:
        if classes and c.cls not in classes:
            continue
        # A class name selects that class; anything else is an id substring.
        if filters and not any((f == c.cls) if f in CLASSES else (f in c.id) for f in filters):
            continue
        out.append(c)
    return out


def main():
    global WALL_LIMIT_S, MEM_CAP_MB, CPU_LIMIT_S, RSS_LIMIT_MB
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "tessera"), help="the tessera binary (default build/tessera)")
    ap.add_argument("--filter", action="append", default=[], help="a class name or an id substring (repeatable)")
    ap.add_argument("--class", dest="classes", action="append", default=[], choices=CLASSES, help="exactly this class (repeatable)")
    ap.add_argument("--list", action="store_true", help="print class and id of each case and exit")
    ap.add_argument("-j", type=int, default=2, help="parallel cases (default 2)")
    ap.add_argument("--report", action="store_true", help="print passed/failed counts per class")
    ap.add_argument("--failures-out", help="also write the failure list (id, class, reason, last stderr line) to this file")
    ap.add_argument("--cpu-limit", type=float, default=CPU_LIMIT_S, help="CPU seconds per case (default 2)")
    ap.add_argument("--rss-limit-mb", type=int, default=RSS_LIMIT_MB,
                    help="peak RSS per case beyond the model's size (default 256)")
    ap.add_argument("--timeout", type=float, default=WALL_LIMIT_S, help="wall-clock seconds before a case counts as hung (default 20)")
    ap.add_argument("--mem-cap-mb", type=int, default=MEM_CAP_MB,
                    help="address-space cap per case (default 4096; 0 = none, needed for ASan builds)")
    ap.add_argument("--dry-run", action="store_true", help="build every selected input, run nothing")
    ap.add_argument("--self-test", action="store_true", help="check that the runner catches each kind of failure")
    ap.add_argument("--keep", action="store_true", help="keep each case's temporary directory (debugging)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case's result, cpu and RSS")
    args = ap.parse_args()

    if args.self_test:
        return self_test()
    cases = select(args.filter, args.classes)
    if args.list:
        for c in cases:
            print("%-12s %s%s" % (c.cls, c.id, "  [skip: %s]" % c.skip if c.skip else ""))
            if args.verbose:
                want = ", ".join(" or ".join(map(repr, e if isinstance(e, tuple) else (e,))) for e in c.expect)
                print("             kind %s; last line names %s%s" % (c.kind, want, "; " + c.why if c.why else ""))
        counts = {k: sum(1 for c in cases if c.cls == k) for k in CLASSES}
        print("# %d cases: %s" % (len(cases), ", ".join("%s %d" % kv for kv in counts.items() if kv[1])))
        return 0
    if not cases:
        print("no case matches", file=sys.stderr)
        return 2
    WALL_LIMIT_S, MEM_CAP_MB = args.timeout, args.mem_cap_mb
    CPU_LIMIT_S, RSS_LIMIT_MB = args.cpu_limit, args.rss_limit_mb
    cli = None if args.dry_run else os.path.abspath(args.cli)
    if cli and not os.access(cli, os.X_OK):
        print("tessera CLI not found at %s (build it, or pass --cli)" % cli, file=sys.stderr)
        return 2
    snap_dir = None
    if cli:
        snap_dir = tempfile.mkdtemp(prefix="tessera-corpus-cli-")
        cli = snapshot_cli(cli, snap_dir)
        SPAWNER.start()  # first, while this process is still small
    t0 = time.monotonic()
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.j)) as ex:
            results = list(ex.map(lambda c: run_case(c, cli, args.keep), cases))
    finally:
        SPAWNER.stop()
        if snap_dir:
            shutil.rmtree(snap_dir, ignore_errors=True)
    elapsed = time.monotonic() - t0
    failed = [r for r in results if not r.ok]
    if args.verbose:
        for r in results:
            print("%-4s %-60s rc=%s cpu=%.2fs rss=%.0fMB wall=%.2fs %s" % (
                "ok" if r.ok else "FAIL", r.case.id, r.rc, r.cpu, r.rss_mb, r.wall, r.reason if r.skipped else ""))
            if r.last:
                print("     " + r.last)
    for r in failed:
        print("FAIL %s\n     reason: %s\n     last stderr: %s" % (r.case.id, r.reason, r.last or "(empty)"))
    if args.report or failed:
        print("\n%-12s %6s %6s %6s %7s" % ("class", "cases", "passed", "failed", "skipped"))
        for k in CLASSES:
            rs = [r for r in results if r.case.cls == k]
            if rs:
                print("%-12s %6d %6d %6d %7d" % (k, len(rs), sum(r.ok and not r.skipped for r in rs),
                                                 sum(not r.ok for r in rs), sum(r.skipped for r in rs)))
    worst_cpu = max(results, key=lambda r: r.cpu)
    worst_rss = max(results, key=lambda r: r.rss_mb)
    print("%d cases, %d failed, %d skipped in %.1f s (max cpu %.2f s: %s; max RSS %.0f MB: %s)" % (
        len(results), len(failed), sum(r.skipped for r in results), elapsed, worst_cpu.cpu, worst_cpu.case.id,
        worst_rss.rss_mb, worst_rss.case.id))
    if args.failures_out:
        with open(args.failures_out + ".tmp", "w") as f:
            f.write("# malformed corpus failures, %s, %d of %d cases (tools/malformed_corpus.py)\n" % (
                time.strftime("%Y-%m-%d %H:%M:%S"), len(failed), len(results)))
            f.write("# reproduce one: python3 tools/malformed_corpus.py --cli build/tessera -v --keep --filter ID\n")
            f.write("# id\tclass\treason\tlast stderr line\n")
            for r in failed:
                f.write("%s\t%s\t%s\t%s\n" % (r.case.id, r.case.cls, r.reason, r.last))
        os.replace(args.failures_out + ".tmp", args.failures_out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
