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
from typing import TypeAlias

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.hw.inputs import network_inputs, several_inputs
from keras2clash.hw.output import is_vector, output_plans, splits_output
from keras2clash.hw.plan import LayerPlan
from keras2clash.ir.graph import GraphLike, as_graph
from keras2clash.kinds import kind_of
from keras2clash.quant.exact import INT64_SAFE_BITS, QuantizedLayer
from keras2clash.quant.formats import FixedFormat, quantize, saturate


def quantize_params(plans: Sequence[LayerPlan], ir: GraphLike | None = None) -> dict[str, QuantizedLayer]:
    """Round every compute layer's kernel and bias to its formats (contract: quantize).

    The weights come from each plan's IR record; `ir` (a Graph or dictionary IR) supplies
    them for plans read back without records."""
    records = as_graph(ir).by_name() if ir is not None else {}
    params: dict[str, QuantizedLayer] = {}
    for plan in plans:
        if not plan.has_params:
            continue
        assert plan.kind is not None
        record = plan.layer if plan.layer is not None else records[plan.name]
        params[plan.name] = plan.kind.quantize(record, plan)
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


def layer(plan: LayerPlan, params: Mapping[str, QuantizedLayer], xs: Sequence[np.ndarray]) -> np.ndarray:
    """One layer on its inputs' raw values (batch first, shapes without the batch axis)."""
    home = kind_of(plan.type)
    if home is None:
        raise ValueError(f"no golden model for layer type {plan.type!r}")
    return home.golden(plan, xs, params.get(plan.name))


Inputs: TypeAlias = np.ndarray | Sequence[np.ndarray] | Mapping[str, np.ndarray]
"""A network's inputs: one array (N, *input_shape) for a model of one input; for a model of
several, one array per input, in the model's order (a tuple or list) or by input name (a dict)."""


def input_arrays(plans: Sequence[LayerPlan], x: Inputs) -> list[np.ndarray]:
    """`x` as one array per network input (`hw.inputs.network_inputs`, in the model's order),
    every input with the same number of samples; one clear error otherwise."""
    ports = network_inputs(plans)
    if not several_inputs(plans):
        return [np.asarray(x)]
    names = [port.name for port in ports]
    if isinstance(x, Mapping):
        missing = [n for n in names if n not in x]
        unknown = [str(n) for n in x if n not in names]
        if missing or unknown:
            raise K2CError(
                f"the inputs are named {', '.join(map(repr, names))}; "
                + (f"missing {', '.join(missing)}" if missing else f"no input is named {', '.join(unknown)}")
            )
        arrays = [np.asarray(x[n]) for n in names]
    elif isinstance(x, (list, tuple)):
        if len(x) != len(ports):
            raise K2CError(f"the model has {len(ports)} inputs ({', '.join(names)}); {len(x)} arrays were given")
        arrays = [np.asarray(a) for a in x]
    else:
        raise K2CError(
            f"the model has {len(ports)} inputs ({', '.join(names)}): give one array per input "
            "(a list in the model's order, or a dict by input name)"
        )
    sizes = {len(a) if a.ndim else 0 for a in arrays}
    if len(sizes) != 1:
        raise K2CError(
            "the inputs have different numbers of samples: "
            + ", ".join(f"{n} {len(a) if a.ndim else 0}" for n, a in zip(names, arrays))
        )
    return arrays


def run_all(
    plans: Sequence[LayerPlan],
    params: Mapping[str, QuantizedLayer],
    x_raw: Inputs,
) -> dict[str, np.ndarray]:
    """Every layer's raw output on raw inputs (`Inputs`), keyed by layer name; each network
    input is under its own name (`hw.inputs.network_inputs`)."""
    values = {}
    for port, raw in zip(network_inputs(plans), input_arrays(plans, x_raw)):
        values[port.name] = np.asarray(raw, dtype=np.int64).reshape(len(raw), *port.shape)
    previous = network_inputs(plans)[0].name
    for plan in plans:
        inputs = plan.inputs or (previous,)
        values[plan.name] = layer(plan, params, [values[t] for t in inputs])
        previous = plan.name
    return values


def run(
    plans: Sequence[LayerPlan],
    params: Mapping[str, QuantizedLayer],
    x_raw: Inputs,
) -> np.ndarray:
    """The whole network on raw inputs (`Inputs`) -> raw outputs (N, n_out)."""
    out = run_all(plans, params, x_raw)[plans[-1].name]
    return out.reshape(len(out), -1)


def quantize_inputs(plans: Sequence[LayerPlan], x: Inputs) -> np.ndarray | tuple[np.ndarray, ...]:
    """Real inputs to the raw integers the hardware reads (shapes kept): one array for a
    model of one input; for a model of several, a tuple of arrays in the model's order, each
    input in its own format.

    Inputs too large for `x * 2^frac` in float64 become +-inf there and saturate like any
    other out-of-range input: no overflow warning is due."""
    with np.errstate(over="ignore"):
        if not several_inputs(plans):
            return quantize(np.asarray(x), plans[0].in_fmt)
        return tuple(quantize(a, port.fmt) for port, a in zip(network_inputs(plans), input_arrays(plans, x)))


def predict_classes(raw_out: np.ndarray) -> np.ndarray:
    """Argmax per sample, lowest index on ties (the hardware's argmax block does the same)."""
    return np.argmax(np.asarray(raw_out, dtype=np.int64), axis=1)


def output_logits(
    plans: Sequence[LayerPlan],
    params: Mapping[str, QuantizedLayer],
    values: Mapping[str, np.ndarray],
    head: LayerPlan | None = None,
) -> np.ndarray:
    """The output layer's (or output `head`'s) values before its monotone activation
    (`hw.output.splits_output`), from `run_all`'s tensors; the outputs themselves when it has none."""
    last = plans[-1] if head is None else head
    k = next(i for i, p in enumerate(plans) if p.name == last.name)
    inputs = last.inputs or (plans[k - 1].name if k > 0 else "input",)
    if not splits_output(last):
        out = values[last.name]
    elif last.activation_only:
        out = values[inputs[0]]
    else:
        out = layer(replace(last, activation="linear"), params, [values[t] for t in inputs])
    return np.asarray(out).reshape(len(out), -1)


def predict(
    plans: Sequence[LayerPlan], params: Mapping[str, QuantizedLayer], x_raw: Inputs
) -> tuple[np.ndarray, np.ndarray]:
    """The outputs (N, n_out) and the predicted classes: the argmax of the output layer's
    values before a monotone activation (docs/guide/contract.md, predicted class), as the Top does."""
    values = run_all(plans, params, x_raw)
    out = values[plans[-1].name]
    return out.reshape(len(out), -1), predict_classes(output_logits(plans, params, values))


def predict_outputs(
    plans: Sequence[LayerPlan], params: Mapping[str, QuantizedLayer], x_raw: Inputs
) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """Every output of the network (`hw.output.output_plans`, in the model's order): its raw
    values (N, n_out) and, for a vector (`hw.output.is_vector`), the predicted classes as
    `predict` takes them (the Top's, or a test set's of values sent without one); None for an
    image or sequence output."""
    values = run_all(plans, params, x_raw)
    results: list[tuple[np.ndarray, np.ndarray | None]] = []
    for head in output_plans(plans):
        out = np.asarray(values[head.name])
        classes = predict_classes(output_logits(plans, params, values, head)) if is_vector(head) else None
        results.append((out.reshape(len(out), -1), classes))
    return results
