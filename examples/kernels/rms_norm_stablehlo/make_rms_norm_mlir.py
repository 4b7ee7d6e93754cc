#!/usr/bin/env python3
"""Writes rms_norm.mlir, the example PJRT kernel package's StableHLO (README "Kernels loaded at run time").

One public function per shape the tests run (a StableHLO function has static shapes: one per prompt bucket, as
tools/export_kernel.py would write with jax.export): rms_norm over groups of `dim` of x [rows, cols] with the
weight [dim], eps baked in, written in the generic MLIR form with the same ops, in the same order, as Tessera's
built-in lowering (src/backends/pjrt/stablehlo_emitter.cpp), so on xla-cpu the logits stay within 1e-5.
Standard library only:  python3 examples/kernels/rms_norm_stablehlo/make_rms_norm_mlir.py
"""
import os

EPS = 1e-6  # qwen3_tied's rms_norm_eps (kernel.json's "shapes" accepts only it)
ROWS = [1, 7, 16, 19]  # decode, the prefill bucket of generate and forward's exact lengths in the tests
COLS_DIM = [(64, 64), (128, 32), (64, 32)]  # qwen3_tied: hidden norms, q norm (4 heads), k norm (2 kv heads)


def t(shape):
    return "tensor<" + "".join(f"{d}x" for d in shape) + "f32>"


def lit(x):
    return "%.8e" % x


def function(rows, cols, dim):
    groups = rows * cols // dim
    x, w, gd, g1 = t([rows, cols]), t([dim]), t([groups, dim]), t([groups])
    s = t([])
    return f"""  func.func public @rms_norm_{rows}x{cols}_{dim}(%x: {x}, %w: {w}) -> {x} {{
    %xg = "stablehlo.reshape"(%x) : ({x}) -> {gd}
    %sq = "stablehlo.multiply"(%xg, %xg) : ({gd}, {gd}) -> {gd}
    %zero = "stablehlo.constant"() {{value = dense<{lit(0.0)}> : {s}}} : () -> {s}
    %sum = "stablehlo.reduce"(%sq, %zero) ({{
    ^bb0(%a: {s}, %b: {s}):
      %c = "stablehlo.add"(%a, %b) : ({s}, {s}) -> {s}
      "stablehlo.return"(%c) : ({s}) -> ()
    }}) {{dimensions = array<i64: 1>}} : ({gd}, {s}) -> {g1}
    %n = "stablehlo.constant"() {{value = dense<{lit(float(dim))}> : {g1}}} : () -> {g1}
    %mean = "stablehlo.divide"(%sum, %n) : ({g1}, {g1}) -> {g1}
    %eps = "stablehlo.constant"() {{value = dense<{lit(EPS)}> : {g1}}} : () -> {g1}
    %var = "stablehlo.add"(%mean, %eps) : ({g1}, {g1}) -> {g1}
    %sd = "stablehlo.sqrt"(%var) : ({g1}) -> {g1}
    %one = "stablehlo.constant"() {{value = dense<{lit(1.0)}> : {g1}}} : () -> {g1}
    %inv = "stablehlo.divide"(%one, %sd) : ({g1}, {g1}) -> {g1}
    %invb = "stablehlo.broadcast_in_dim"(%inv) {{broadcast_dimensions = array<i64: 0>}} : ({g1}) -> {gd}
    %y0 = "stablehlo.multiply"(%xg, %invb) : ({gd}, {gd}) -> {gd}
    %wb = "stablehlo.broadcast_in_dim"(%w) {{broadcast_dimensions = array<i64: 1>}} : ({w}) -> {gd}
    %y1 = "stablehlo.multiply"(%y0, %wb) : ({gd}, {gd}) -> {gd}
    %y = "stablehlo.reshape"(%y1) : ({gd}) -> {x}
    "func.return"(%y) : ({x}) -> ()
  }}
"""


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rms_norm.mlir")
    with open(out, "w") as f:
        f.write("// Written by make_rms_norm_mlir.py: rms_norm (eps %g) for qwen3_tied's shapes.\n" % EPS)
        f.write("module @rms_norm_kernels {\n")
        for rows in ROWS:
            for cols, dim in COLS_DIM:
                f.write(function(rows, cols, dim))
        f.write("}\n")


if __name__ == "__main__":
    main()
