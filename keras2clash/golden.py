"""The golden model: docs/contract.md in numpy integers.

This is the reference every hardware simulation must equal bit for bit. It works on raw
integers only (no floats after quantization), vectorised over a whole test set, so a few
thousand samples take well under a second. Layers whose accumulator would not fit int64
fall back to Python integers (object arrays): slower, still exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .formats import FixedFormat, quantize, saturate
from .plan import LayerPlan

INT64_SAFE_BITS = 62
"""Accumulators up to this width are computed in int64 (leaves headroom for rounding)."""


@dataclass(frozen=True)
class QuantizedDense:
    """A dense layer's parameters as the ROM stores them (raw integers in the weight format)."""

    kernel: np.ndarray  # (n_in, n_out) int64
    bias: np.ndarray  # (n_out,) int64


def quantize_params(
    plans: Sequence[LayerPlan], ir: Sequence[Mapping]
) -> dict[str, QuantizedDense]:
    """Round every dense layer's kernel and bias to its weight format (contract: quantize)."""
    by_name = {layer["name"]: layer for layer in ir}
    params: dict[str, QuantizedDense] = {}
    for plan in plans:
        if plan.type != "dense":
            continue
        assert plan.w_fmt is not None
        weights = by_name[plan.name]["weights"]
        params[plan.name] = QuantizedDense(
            kernel=quantize(weights["kernel"], plan.w_fmt),
            bias=quantize(weights["bias"], plan.w_fmt),
        )
    return params


def _round_shift(acc: np.ndarray, shift: int) -> np.ndarray:
    """Contract step 4: divide by 2^shift rounding half up (shift > 0), or scale up exactly."""
    if shift > 0:
        return (acc + (1 << (shift - 1))) >> shift
    return acc << (-shift)


def _plan_constant(numerator: int, denominator: int, frac: int) -> int:
    """c(v) = floor(v * 2^frac + 1/2) for v = numerator/denominator, in integers."""
    return (2 * numerator * (1 << frac) + denominator) // (2 * denominator)


def sigmoid_plan(r: np.ndarray, fmt: FixedFormat) -> np.ndarray:
    """Contract step 5, sigmoid: PLAN (Amin, Curtis, Hayes-Gill 1997) on raw integers."""
    f = fmt.frac
    one = 1 << f
    a = np.abs(r.astype(object) if r.dtype == object else r.astype(np.int64))
    y = np.where(
        a >= 5 * one,
        one,
        np.where(
            a >= _plan_constant(19, 8, f),
            (a >> 5) + _plan_constant(27, 32, f),
            np.where(a >= one, (a >> 3) + _plan_constant(5, 8, f), (a >> 2) + _plan_constant(1, 2, f)),
        ),
    )
    y = np.where(r < 0, one - y, y)
    return saturate(y, fmt)


def activate(r: np.ndarray, activation: str, fmt: FixedFormat) -> np.ndarray:
    """Apply a hardware activation to requantized raw values (all results stay in `fmt`)."""
    if activation == "linear":
        return r
    if activation == "relu":
        return np.maximum(r, 0)
    if activation == "sigmoid":
        return sigmoid_plan(r, fmt)
    raise ValueError(f"no hardware activation {activation!r}")


def dense(x: np.ndarray, plan: LayerPlan, params: QuantizedDense) -> np.ndarray:
    """One dense layer on a batch of raw inputs (N, n_in) -> raw outputs (N, n_out)."""
    assert plan.acc_fmt is not None and plan.w_fmt is not None
    wide = plan.acc_fmt.bits > INT64_SAFE_BITS
    dtype = object if wide else np.int64
    xs = x.astype(dtype)
    kernel = params.kernel.astype(dtype)
    bias = params.bias.astype(dtype) << plan.in_fmt.frac
    acc = xs @ kernel + bias
    r = _round_shift(acc, plan.acc_fmt.frac - plan.out_fmt.frac)
    r = saturate(r, plan.out_fmt)
    y = activate(r, plan.hw_activation, plan.out_fmt)
    return np.asarray(y, dtype=np.int64)  # outputs fit their format, at most 64 bits


def run(
    plans: Sequence[LayerPlan],
    params: Mapping[str, QuantizedDense],
    x_raw: np.ndarray,
) -> np.ndarray:
    """The whole network on raw inputs (N, *input_shape) -> raw outputs (N, n_out)."""
    h = np.asarray(x_raw).reshape(len(x_raw), -1)
    for plan in plans:
        if plan.type == "flatten":
            continue  # row-major reshape: the batch is already kept flat
        h = dense(h, plan, params[plan.name])
    return h


def quantize_inputs(plans: Sequence[LayerPlan], x: np.ndarray) -> np.ndarray:
    """Real inputs to the raw integers the hardware's first layer reads, flattened."""
    return quantize(np.asarray(x).reshape(len(x), -1), plans[0].in_fmt)


def predict_classes(raw_out: np.ndarray) -> np.ndarray:
    """Argmax per sample, lowest index on ties (the hardware's argmax block does the same)."""
    return np.argmax(np.asarray(raw_out, dtype=np.int64), axis=1)
