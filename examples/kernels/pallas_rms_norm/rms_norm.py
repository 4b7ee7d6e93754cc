"""An RMSNorm written as a Pallas kernel, shaped like a Hub TPU kernel's JAX function: the example that
tools/export_kernel.py exports into the package in package/ (README "Kernels loaded at run time").

rms_norm(x [rows, cols], w [dim]) normalises x over groups of `dim` columns, in float32, in the order Tessera's
built-in kernels use: y = (x * (1 / sqrt(mean(x^2) + eps))) * w. `interpret=True` runs the kernel in Pallas's
interpret mode (plain StableHLO: what a cpu lowering needs); otherwise a TPU lowering makes it a Mosaic kernel
(stablehlo.custom_call @tpu_custom_call).
"""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(x_ref, w_ref, o_ref, *, eps):
    x = x_ref[...]  # [groups, dim]
    mean = jnp.sum(x * x, axis=1, keepdims=True) / x.shape[1]
    inv = 1.0 / jnp.sqrt(mean + eps)
    o_ref[...] = (x * inv) * w_ref[...]


def rms_norm(x, w, *, eps=1e-6, interpret=False):
    rows, cols = x.shape
    dim = w.shape[0]
    groups = rows * cols // dim
    y = pl.pallas_call(
        functools.partial(_kernel, eps=eps),
        out_shape=jax.ShapeDtypeStruct((groups, dim), x.dtype),
        interpret=interpret,
    )(x.reshape(groups, dim), w.reshape(1, dim))
    return y.reshape(rows, cols)
