"""The golden model: docs/guide/contract.md in numpy integers.

This is the reference every hardware simulation must equal bit for bit. It works on raw
integers only (no floats after quantization), vectorised over a whole test set, so a few
thousand samples take well under a second for dense networks and seconds for the CNNs.
Layers whose accumulator would not fit int64 fall back to Python integers (object arrays):
slower, still exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from keras2clash.quant import activations
from keras2clash.quant import exact
from keras2clash.quant.exact import INT64_SAFE_BITS, QuantizedLayer, pad_images, windows
from keras2clash.quant.formats import FixedFormat, quantize, saturate
from keras2clash.hw.plan import LayerPlan, accumulator_format, relu_before_requantize
from keras2clash.ir.graph import as_graph
from keras2clash.kinds import kind_of

def quantize_params(plans: Sequence[LayerPlan], ir: Any = None) -> dict[str, QuantizedLayer]:
    """Round every compute layer's kernel and bias to its formats (contract: quantize).

    The weights come from each plan's IR record; `ir` (a Graph or dictionary IR) supplies
    them for plans read back without records."""
    records = as_graph(ir).by_name() if ir is not None else {}
    params: dict[str, QuantizedLayer] = {}
    for plan in plans:
        if not plan.has_params:
            continue
        assert plan.w_fmt is not None and plan.b_fmt is not None
        record = plan.layer if plan.layer is not None else records[plan.name]
        if plan.kind is not None:
            params[plan.name] = plan.kind.quantize(record, plan)
            continue
        kernel = np.asarray(record.kernel).reshape(plan.window, plan.filters)
        params[plan.name] = QuantizedLayer(
            kernel=quantize(kernel, plan.w_fmt),
            bias=quantize(record.bias, plan.b_fmt),
        )
    return params


def _plan_constant(numerator: int, denominator: int, frac: int) -> int:
    """c(v) = floor(v * 2^frac + 1/2) for v = numerator/denominator, in integers."""
    return (2 * numerator * (1 << frac) + denominator) // (2 * denominator)


def sigmoid_plan(r: np.ndarray, fmt: FixedFormat) -> np.ndarray:
    """Contract step 5, sigmoid: PLAN (Amin, Curtis, Hayes-Gill 1997) on raw integers."""
    f = fmt.frac
    one = 1 << f
    # |r| and the breakpoint 5.0 need up to W + 3 bits: Python integers for wide formats
    wide = r.dtype == object or fmt.bits + 4 > INT64_SAFE_BITS
    a = np.abs(r.astype(object) if wide else r.astype(np.int64))
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


def _matmul(xs: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Every filter over the same window: (M, K) x (K, F) -> (M, F)."""
    return xs @ kernel


def _per_filter(xs: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Each filter over its own window (depthwise): (M, K, F) x (K, F) -> (M, F)."""
    return (xs * kernel).sum(axis=1)


def _accumulate(windows: np.ndarray, plan: LayerPlan, params: QuantizedLayer, dot=_matmul) -> np.ndarray:
    """Contract step 3 on (M, K) windows -> (M, filters) accumulator raw values (frac cf);
    `dot` multiplies window chunks (axis 1) with kernel chunks (axis 0).

    Exact accumulator: one exact sum. A narrower (user-chosen) accumulator saturates after
    each of the `cycles` chunks, in chunk order, exactly as the hardware register does:
    acc_0 = sat(chunk_0 + bias), acc_t = sat(acc_{t-1} + chunk_t).
    """
    assert plan.acc_fmt is not None and plan.w_fmt is not None and plan.b_fmt is not None
    exact = accumulator_format(plan.in_fmt, plan.w_fmt, plan.window, plan.b_fmt)
    wide = max(exact.bits, plan.acc_fmt.bits) > INT64_SAFE_BITS  # every partial sum fits `exact`
    dtype = object if wide else np.int64
    xs = windows.astype(dtype)
    kernel = params.kernel.astype(dtype)
    product_shift = plan.acc_fmt.frac - (plan.in_fmt.raw_frac + plan.w_fmt.raw_frac)
    bias = params.bias.astype(dtype) << (plan.acc_fmt.frac - plan.b_fmt.raw_frac)
    if plan.exact_accumulator:
        return (dot(xs, kernel) << product_shift) + bias
    acc = None
    ch = plan.chunk
    for t in range(plan.cycles):
        part = dot(xs[:, t * ch:(t + 1) * ch], kernel[t * ch:(t + 1) * ch]) << product_shift
        acc = saturate(part + bias, plan.acc_fmt) if acc is None else saturate(acc + part, plan.acc_fmt)
    return acc


def finish(acc: np.ndarray, frac: int, plan: LayerPlan) -> np.ndarray:
    """Contract steps 4 and 5 for `plan` (`exact.finish`)."""
    return exact.finish(acc, frac, plan.out_fmt, plan.hw_activation, relu_before_requantize(plan))


def _neurons(windows: np.ndarray, plan: LayerPlan, params: QuantizedLayer, dot=_matmul) -> np.ndarray:
    """(M, K) windows -> (M, filters) activated raw outputs ((M, K, filters) for `_per_filter`)."""
    acc = _accumulate(windows, plan, params, dot)
    assert plan.acc_fmt is not None
    return finish(acc, plan.acc_fmt.frac, plan)


def dense(x: np.ndarray, plan: LayerPlan, params: QuantizedLayer) -> np.ndarray:
    """One dense layer on a batch of raw inputs (N, n_in) -> raw outputs (N, n_out)."""
    return _neurons(x.reshape(len(x), -1), plan, params)


def windows_of(x: np.ndarray, plan: LayerPlan) -> np.ndarray:
    """All windows of a layer's padded input images (`exact.windows`)."""
    return windows(x, plan.kernel_size, plan.dilation, plan.strides, plan.output_shape[:2])


def conv2d(x: np.ndarray, plan: LayerPlan, params: QuantizedLayer) -> np.ndarray:
    """(N, H, W, C) raw -> (N, H2, W2, F) raw: zero padding, then the dense contract per window."""
    padded = pad_images(x, plan.pads, 0)
    win = windows_of(padded, plan)
    n, h2, w2 = win.shape[:3]
    out = _neurons(win.reshape(n * h2 * w2, plan.window), plan, params)
    return out.reshape(n, h2, w2, plan.filters)


def depthwise2d(x: np.ndarray, plan: LayerPlan, params: QuantizedLayer) -> np.ndarray:
    """(N, H, W, C) raw -> (N, H2, W2, C*m) raw: zero padding, then the dense contract per
    window and output channel f over the K = kh*kw values of input channel f // m."""
    win = windows_of(pad_images(x, plan.pads, 0), plan)  # N, H2, W2, kh, kw, C
    n, h2, w2 = win.shape[:3]
    m = plan.filters // plan.input_shape[-1]
    own = np.repeat(win, m, axis=-1)  # channel c*m + j reads channel c
    out = _neurons(own.reshape(n * h2 * w2, plan.window, plan.filters), plan, params, _per_filter)
    return out.reshape(n, h2, w2, plan.filters)


def layer(plan: LayerPlan, params: Mapping[str, QuantizedLayer], xs: Sequence[np.ndarray]) -> np.ndarray:
    """One layer on its inputs' raw values (batch first, shapes without the batch axis)."""
    home = kind_of(plan.type)
    if home is not None:
        return home.golden(plan, xs, params.get(plan.name))
    h = xs[0]
    if plan.type == "dense":
        return dense(h, plan, params[plan.name])
    if plan.type == "conv2d":
        return conv2d(h, plan, params[plan.name])
    if plan.type == "depthwise2d":
        return depthwise2d(h, plan, params[plan.name])
    raise ValueError(f"no golden model for layer type {plan.type!r}")


def run_all(
    plans: Sequence[LayerPlan],
    params: Mapping[str, QuantizedLayer],
    x_raw: np.ndarray,
) -> dict[str, np.ndarray]:
    """Every layer's raw output on raw inputs (N, *input_shape), keyed by layer name; the
    network input is under its own name (the first plan's first input)."""
    first = plans[0]
    source = first.inputs[0] if first.inputs else "input"
    values = {source: np.asarray(x_raw, dtype=np.int64).reshape(len(x_raw), *first.input_shape)}
    previous = source
    for plan in plans:
        inputs = plan.inputs or (previous,)
        values[plan.name] = layer(plan, params, [values[t] for t in inputs])
        previous = plan.name
    return values


def run(
    plans: Sequence[LayerPlan],
    params: Mapping[str, QuantizedLayer],
    x_raw: np.ndarray,
) -> np.ndarray:
    """The whole network on raw inputs (N, *input_shape) -> raw outputs (N, n_out)."""
    out = run_all(plans, params, x_raw)[plans[-1].name]
    return out.reshape(len(out), -1)


def quantize_inputs(plans: Sequence[LayerPlan], x: np.ndarray) -> np.ndarray:
    """Real inputs to the raw integers the hardware's first layer reads (input shape kept).

    Inputs too large for `x * 2^frac` in float64 become +-inf there and saturate like any
    other out-of-range input: no overflow warning is due."""
    with np.errstate(over="ignore"):
        return quantize(np.asarray(x), plans[0].in_fmt)


def predict_classes(raw_out: np.ndarray) -> np.ndarray:
    """Argmax per sample, lowest index on ties (the hardware's argmax block does the same)."""
    return np.argmax(np.asarray(raw_out, dtype=np.int64), axis=1)


def splits_output(plan: LayerPlan) -> bool:
    """Whether the output layer's activation is applied after the class is taken: a monotone
    one (sigmoid, softmax, tanh, relu, ...) keeps the order of the values before it, and
    taking the argmax there avoids the ties its saturation would create. Not a relu applied
    before a wrapping requantization: that one is part of the requantization."""
    act = activations.parse(plan.activation)
    return act.monotone and not act.is_linear and not relu_before_requantize(plan)


def output_logits(plans: Sequence[LayerPlan], params: Mapping[str, QuantizedLayer],
                  values: Mapping[str, np.ndarray]) -> np.ndarray:
    """The output layer's values before its monotone activation (`splits_output`), from
    `run_all`'s tensors; the outputs themselves when it has none."""
    last = plans[-1]
    if not splits_output(last):
        out = values[last.name]
    elif last.activation_only:
        out = values[last.inputs[0] if last.inputs else plans[-2].name]
    else:
        out = layer(replace(last, activation="linear"), params,
                    [values[t] for t in (last.inputs or (plans[-2].name if len(plans) > 1 else "input",))])
    return np.asarray(out).reshape(len(out), -1)


def predict(plans: Sequence[LayerPlan], params: Mapping[str, QuantizedLayer],
            x_raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The outputs (N, n_out) and the predicted classes: the argmax of the output layer's
    values before a monotone activation (docs/guide/contract.md, predicted class), as the Top does."""
    values = run_all(plans, params, x_raw)
    out = values[plans[-1].name]
    return out.reshape(len(out), -1), predict_classes(output_logits(plans, params, values))
