#!/usr/bin/env python3
"""What a quantised checkpoint should become on a PJRT device, measured on XLA's CPU compiler (issue 15, item 4).

Tessera dequantises a GGUF's block-quantised matrices once, at upload, to the model's float dtype; the
alternative is to upload the blocks' integers with their scales and dequantise inside the compiled program on
every step. This times the matrices of a Qwen3-0.6B-shaped model (28 layers: q 2048x1024, k and v 1024x1024,
o 1024x2048, gate and up 3072x1024, down 1024x3072) in the forms the program could take, as XLA compiles them:

  f32     float32 weights, dot at HIGHEST precision (the PJRT backend's dequantised float32 upload)
  bf16    bfloat16 weights converted to float32 in the program, then the same dot (its bfloat16 upload)
  q8      int8 weights and one float32 scale per 32 values, w = q * d in the program (Q8_0 as stored)
  q4      two 4-bit values per byte with a float32 scale and offset per 32, w = q * d + m in the program
          (Q4_1 / Q4_K sub-blocks as stored)

for a decode step (1 row) and a prefill (--prefill-rows rows), each form in its own jitted function over all
28 layers' matrices, forms alternated within each round so the machine's weather reaches them alike; medians of
--rounds. Reports milliseconds per step, the bytes each form keeps on the device, and the ratio to f32.
No threshold: the figures go to bench/results.md.

The programs run on the PJRT plugin Tessera's xla-cpu device loads (PyPI xla-cpu-pjrt, in .venv; --plugin for
another), driven through jax, which loads a PJRT plugin as Tessera does; --plugin jax runs them on jaxlib's own
(newer) XLA CPU instead, whose code generation differs.
    venv-bench/bin/pip install jax==0.10.2 jaxlib==0.10.2
    venv-bench/bin/python bench/pjrt_quant.py [--plugin PATH|jax] [--rounds 5] [--prefill-rows 128]
        [--layers 28] [--json]
"""

import argparse
import glob
import json
import os
import statistics
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plugin", default="", help="PJRT plugin .so (default: .venv's xla-cpu-pjrt), or 'jax'")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prefill-rows", type=int, default=128)
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.rounds < 1 or a.prefill_rows < 1 or a.layers < 1:
        ap.error("--rounds, --prefill-rows and --layers must be positive")
    if not a.plugin:
        found = sorted(glob.glob(os.path.join(ROOT, ".venv/lib/python3*/site-packages/xla_plugins/xla_cpu_pjrt/*.so")))
        if not found:
            ap.error("no xla-cpu-pjrt plugin in .venv (run scripts/setup.sh), or pass --plugin PATH|jax")
        a.plugin = found[0]
    if a.plugin != "jax":
        if not os.path.isfile(a.plugin):
            ap.error(f"--plugin {a.plugin}: no such file")
        # jax reads this when it starts its backends: the plugin becomes platform 'plugin'.
        os.environ["PJRT_NAMES_AND_LIBRARY_PATHS"] = f"plugin:{a.plugin}"
    return a


ARGS = parse_args() if __name__ == "__main__" else None

try:
    import numpy as np  # noqa: E402
    import jax  # noqa: E402
    import jax.numpy as jnp  # noqa: E402
    from jax import lax  # noqa: E402
except ImportError:
    sys.exit("bench/pjrt_quant.py needs numpy and jax: venv-bench/bin/pip install jax==0.10.2 jaxlib==0.10.2")

SHAPES = [(2048, 1024), (1024, 1024), (1024, 1024), (1024, 2048), (3072, 1024), (3072, 1024), (1024, 3072)]
GROUP = 32


def dot(x, w):
    # x [R, in] . w[out, in]^T, float32 accumulation at full precision, as the StableHLO emitter writes it.
    return lax.dot_general(x, w, (((1,), (1,)), ((), ())), precision=lax.Precision.HIGHEST,
                           preferred_element_type=jnp.float32)


def as_f32(form, t):
    if form in ("f32", "bf16"):
        return t[0].astype(jnp.float32)
    q, d = t  # q8
    n, k = q.shape
    return (q.astype(jnp.float32).reshape(n, k // GROUP, GROUP) * d[:, :, None]).reshape(n, k)


def q4_matmul(x, t):
    # Byte j of a group of 32 values holds value j (low nibble) and value j + 16 (high nibble). Unpacking both
    # into one matrix needs a concatenate; instead each nibble plane is its own matrix over half of each
    # group's columns of x: x . w^T = x_lo . w_lo^T + x_hi . w_hi^T, and each plane's w = q * d + m is
    # elementwise on the stored bytes.
    q, d, m = t
    n, kb = q.shape
    g = kb * 2 // GROUP
    x3 = x[:, : kb * 2].reshape(x.shape[0], g, GROUP)
    y = None
    for plane, xs in (((q & 0xF), x3[:, :, : GROUP // 2]), ((q >> 4), x3[:, :, GROUP // 2:])):
        w = (plane.reshape(n, g, GROUP // 2).astype(jnp.float32) * d[:, :, None] + m[:, :, None]).reshape(n, kb)
        part = dot(xs.reshape(x.shape[0], kb), w)
        y = part if y is None else y + part
    return y


def make_step(form):
    def step(x, layers):
        acc = jnp.zeros((), jnp.float32)
        for mats in layers:
            for t in mats:
                if form == "q4":
                    y = q4_matmul(x, t)
                else:
                    w = as_f32(form, t)
                    y = dot(x[:, : w.shape[1]], w)  # x is as wide as the widest input (3072)
                acc = acc + y[0, 0]
        return acc

    return jax.jit(step)


def weights(form, rng, layers):
    out = []
    for _ in range(layers):
        mats = []
        for n, k in SHAPES:
            if form == "f32":
                mats.append((np.asarray(rng.standard_normal((n, k), np.float32) * 0.02),))
            elif form == "bf16":
                mats.append(((rng.standard_normal((n, k), np.float32) * 0.02).astype(jnp.bfloat16),))
            elif form == "q8":
                mats.append((np.asarray(rng.integers(-127, 128, (n, k), np.int8)),
                             np.asarray(rng.random((n, k // GROUP), np.float32) * 1e-3)))
            else:
                mats.append((np.asarray(rng.integers(0, 256, (n, k // 2), np.uint8)),
                             np.asarray(rng.random((n, k // GROUP), np.float32) * 1e-2),
                             np.asarray(-rng.random((n, k // GROUP), np.float32) * 1e-1)))
        out.append(mats)
    return out


def nbytes(tree):
    return sum(a.nbytes for a in jax.tree_util.tree_leaves(tree))


def main():
    a = ARGS
    dev = jax.devices("plugin" if a.plugin != "jax" else "cpu")[0]
    forms = ["f32", "bf16", "q8", "q4"]
    rng = np.random.default_rng(0)
    ws = {f: jax.device_put(weights(f, rng, a.layers), dev) for f in forms}
    steps = {f: make_step(f) for f in forms}
    xs = {r: jax.device_put(rng.standard_normal((r, 3072), np.float32), dev) for r in (1, a.prefill_rows)}
    for f in forms:  # compile and warm every (form, rows) pair before timing
        for x in xs.values():
            steps[f](x, ws[f]).block_until_ready()
    times = {(f, r): [] for f in forms for r in xs}
    for _ in range(a.rounds):
        for r, x in xs.items():
            for f in forms:
                t0 = time.perf_counter()
                steps[f](x, ws[f]).block_until_ready()
                times[(f, r)].append(time.perf_counter() - t0)
    rows = []
    for r in xs:
        base = statistics.median(times[("f32", r)])
        for f in forms:
            med = statistics.median(times[(f, r)])
            rows.append({"form": f, "rows": r, "ms": med * 1e3, "vs_f32": base / med,
                         "device_mb": nbytes(ws[f]) / 1e6})
    if a.json:
        print(json.dumps({"jax": jax.__version__, "plugin": a.plugin, "layers": a.layers,
                          "rounds": a.rounds, "results": rows}))
        return
    where = "jaxlib's XLA CPU" if a.plugin == "jax" else os.path.basename(a.plugin)
    print(f"{where} through jax {jax.__version__}, {a.layers} layers of Qwen3-0.6B-shaped matrices, "
          f"median of {a.rounds} alternated rounds")
    print("| form | rows | ms per step | f32 time / this | weights on device MB |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['form']} | {row['rows']} | {row['ms']:.1f} | {row['vs_f32']:.2f}x | {row['device_mb']:.0f} |")


if __name__ == "__main__":
    main()
