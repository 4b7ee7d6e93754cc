#!/usr/bin/env python3
"""Exports a JAX function (a Hub kernel's, a Pallas kernel, ...) into a Tessera kernel package with jax.export.

  python3 -m venv venv-jax && venv-jax/bin/pip install -r tools/requirements-export.txt
  venv-jax/bin/python tools/export_kernel.py \\
      --source examples/kernels/pallas_rms_norm/rms_norm.py --function rms_norm --op rms_norm \\
      --name pallas_rms_norm --kwarg eps=1e-6 \\
      --shapes 1x64,64 --shapes 16x64,64 --platform cpu --platform tpu \\
      --out examples/kernels/pallas_rms_norm/package

--source is a Python file or a package folder (e.g. a checkout of a Hub kernel repository); --function names
the callable in it (dotted for a submodule attribute). Each --shapes is one call's argument shapes (float32,
'x'-separated dims, ',' between arguments): one per prompt bucket and decode, since a StableHLO function has
static shapes. Each --platform (cpu, tpu, cuda) gets its own StableHLO file holding one public function per
shape; for cpu, a function taking an `interpret` keyword gets interpret=True (a Pallas kernel then lowers to
plain StableHLO that XLA's CPU compiler runs); for tpu, a Pallas kernel becomes stablehlo.custom_call
@tpu_custom_call with its Mosaic body in backend_config. The manifest (kernel.json) names the op, dtypes, the
shape attributes Tessera checks against the model (rms_norm: dim, and eps from --kwarg eps=...), and one pjrt
implementation per platform.
"""
import argparse
import importlib.util
import inspect
import json
import os
import re
import sys

import jax
import jax.numpy as jnp
from jax import export as jax_export

OPS = {"rms_norm": 2, "matmul": 3, "attention": 6}  # most operands of the op's signature


def fail(msg):
    print(f"export_kernel: error: {msg}", file=sys.stderr)
    sys.exit(1)


def load_function(source, name):
    path = os.path.abspath(source)
    if os.path.isdir(path):
        init = os.path.join(path, "__init__.py")
        if not os.path.isfile(init):
            fail(f"--source {source}: a folder without __init__.py")
        spec = importlib.util.spec_from_file_location(os.path.basename(path), init, submodule_search_locations=[path])
    elif os.path.isfile(path):
        spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    else:
        fail(f"--source {source}: no such file or folder")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    obj = module
    for part in name.split("."):
        if not hasattr(obj, part):
            fail(f"--function {name}: {source} has no attribute '{part}'")
        obj = getattr(obj, part)
    if not callable(obj):
        fail(f"--function {name}: not callable")
    return obj


def parse_shapes(text):
    shapes = []
    for arg in text.split(","):
        try:
            shapes.append(tuple(int(d) for d in arg.split("x")))
        except ValueError:
            fail(f"--shapes {text}: '{arg}' is not dims like 16x64")
        if any(d <= 0 for d in shapes[-1]):
            fail(f"--shapes {text}: dims must be positive")
    return shapes


def parse_kwarg(text):
    if "=" not in text:
        fail(f"--kwarg {text}: expected NAME=VALUE")
    k, v = text.split("=", 1)
    try:
        return k, json.loads(v)
    except json.JSONDecodeError:
        return k, v


def strip_locations(text):
    """The module without debug locations: every ` loc(...)` (balanced, strings skipped) and `#loc` alias line."""
    out, i = [], 0
    while True:
        j = text.find(" loc(", i)
        if j < 0:
            out.append(text[i:])
            break
        out.append(text[i:j])
        k, depth = j + 4, 0
        while k < len(text):
            c = text[k]
            if c == '"':
                k += 1
                while text[k] != '"':
                    k += 2 if text[k] == "\\" else 1
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        i = k + 1
    return "\n".join(line for line in "".join(out).splitlines() if not line.startswith("#loc"))


def function_texts(module_text, suffix):
    """The func.func definitions of one exported module, every symbol it defines renamed NAME -> NAME_suffix."""
    defined = re.findall(r"func\.func\s+(?:public\s+|private\s+)?@([\w$.]+)", module_text)
    if "main" not in defined:
        fail("jax.export produced a module without @main")
    module_text = strip_locations(module_text)
    # The module's body: from the first func.func to the module's closing brace.
    body = module_text[module_text.index("func.func") : module_text.rindex("}")]
    for name in defined:
        body = re.sub(r"@" + re.escape(name) + r"(?![\w$.])", "@" + name + "_" + suffix, body)
    return body.rstrip() + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", required=True)
    ap.add_argument("--function", required=True)
    ap.add_argument("--op", required=True, choices=sorted(OPS))
    ap.add_argument("--name", required=True)
    ap.add_argument("--shapes", action="append", required=True)
    ap.add_argument("--platform", action="append", required=True, choices=["cpu", "tpu", "cuda"])
    ap.add_argument("--kwarg", action="append", default=[])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    fn = load_function(a.source, a.function)
    kwargs = dict(parse_kwarg(k) for k in a.kwarg)
    calls = [parse_shapes(s) for s in a.shapes]
    for c in calls:
        if len(c) > OPS[a.op]:
            fail(f"--shapes {','.join('x'.join(map(str, s)) for s in c)}: {a.op} takes at most {OPS[a.op]} operands")
    takes_interpret = "interpret" in inspect.signature(fn).parameters
    os.makedirs(a.out, exist_ok=True)
    implementations = []
    for platform in a.platform:
        kw = dict(kwargs)
        if platform == "cpu" and takes_interpret:
            kw["interpret"] = True
        texts = []
        for i, shapes in enumerate(calls):
            args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
            exp = jax_export.export(jax.jit(lambda *xs: fn(*xs, **kw)), platforms=[platform])(*args)
            texts.append(function_texts(exp.mlir_module(), "_".join("x".join(map(str, s)) for s in shapes)))
        file = f"{a.name}_{platform}.mlir"
        with open(os.path.join(a.out, file), "w") as f:
            f.write(f"// Exported by tools/export_kernel.py with jax {jax.__version__} for platform {platform}: "
                    f"{a.function} from {os.path.basename(os.path.abspath(a.source))}\n")
            f.write(f"module @{a.name} {{\n")
            for t in texts:
                f.write("  " + t)
            f.write("}\n")
        implementations.append({"backend": "pjrt", "platform": platform, "stablehlo": file})

    manifest = {
        "name": a.name,
        "description": f"{a.function} from {os.path.basename(os.path.abspath(a.source))}, exported by "
                       f"tools/export_kernel.py (jax {jax.__version__})",
        "abi_version": 1,
        "op": a.op,
        "dtypes": ["float32"],
        "implementations": implementations,
    }
    shapes = {}
    if a.op == "rms_norm":
        shapes["dim"] = sorted({c[1][0] for c in calls if len(c) > 1})
        if "eps" in kwargs:
            shapes["eps"] = [kwargs["eps"]]
    if shapes:
        manifest["shapes"] = shapes
    with open(os.path.join(a.out, "kernel.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    print(f"export_kernel: wrote {a.out}/kernel.json and {len(implementations)} StableHLO file(s)")


if __name__ == "__main__":
    main()
