#!/usr/bin/env python3
"""Writes rms_norm_ffi.mlir, the StableHLO of the example FFI kernel package (README "Kernels loaded at run time").

One public function per shape the tests run (the shapes of ../rms_norm_stablehlo/make_rms_norm_mlir.py), each a
single typed FFI custom call (api_version 4) of the handler in rms_norm_ffi.cc, eps passed as an attribute.
Standard library only:  python3 examples/kernels/rms_norm_ffi/make_rms_norm_ffi_mlir.py
"""
import os

TARGET = "tessera_rms_norm_f32"  # kernel.json's ffi_handlers[0].target
EPS = 1e-6  # qwen3_tied's rms_norm_eps (kernel.json's "shapes" accepts only it)
ROWS = [1, 7, 16, 19]
COLS_DIM = [(64, 64), (128, 32), (64, 32)]


def t(shape):
    return "tensor<" + "".join(f"{d}x" for d in shape) + "f32>"


def function(rows, cols, dim):
    x, w = t([rows, cols]), t([dim])
    return f"""  func.func public @rms_norm_{rows}x{cols}_{dim}(%x: {x}, %w: {w}) -> {x} {{
    %y = stablehlo.custom_call @{TARGET}(%x, %w) {{api_version = 4 : i32, backend_config = {{eps = {EPS:e} : f32}}}} : ({x}, {w}) -> {x}
    return %y : {x}
  }}
"""


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rms_norm_ffi.mlir")
    with open(out, "w") as f:
        f.write("// Written by make_rms_norm_ffi_mlir.py: rms_norm (eps %g) for qwen3_tied's shapes, as FFI calls.\n" % EPS)
        f.write("module @rms_norm_ffi_kernels {\n")
        for rows in ROWS:
            for cols, dim in COLS_DIM:
                f.write(function(rows, cols, dim))
        f.write("}\n")


if __name__ == "__main__":
    main()
