"""The planner: the pass that gives every layer of the graph its formats and knobs (the
`LayerPlan`s, `hw.plan`), in graph order; each layer's kind (`keras2clash.kinds`) plans it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from keras2clash.errors import K2CError
from keras2clash.hw.plan import (
    DEFAULT_PIPELINE, LAYER_TYPES, MAX_PIPELINE_LEVELS, REQUANTIZING_TYPES, LayerFormats, LayerPlan,
    accumulator_format,
)
from keras2clash.ir import layers as ir
from keras2clash.ir.graph import Graph, as_graph
from keras2clash.ir.layers import COMPUTE_TYPES, Layer
from keras2clash.kinds import kind_of
from keras2clash.kinds.base import check_requantized_output
from keras2clash.quant.activations import check as check_activation
from keras2clash.quant.formats import FixedFormat
from keras2clash.quant.golden import splits_output


def _narrow_accumulator(exact: FixedFormat, bits: int, layer: str) -> FixedFormat:
    """A user-chosen accumulator width: same fraction bits, fewer integer bits (saturating)."""
    if bits < exact.frac + 1:
        raise K2CError(
            f"accumulator of layer '{layer}': {bits} bits cannot hold its {exact.frac} exact "
            f"fraction bits plus a sign bit (at least {exact.frac + 1})"
        )
    if bits >= exact.bits:
        return exact
    return FixedFormat(1, bits - 1 - exact.frac, exact.frac)


def parse_int_list(text: str | None, n_layers: int, what: str) -> list[int] | None:
    """`"1,2,5"` -> [1, 2, 5], one value per compute layer; None stays None."""
    if text is None or text.strip() == "":
        return None
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise K2CError(
            f"bad {what} {text!r}: expected comma-separated integers, one per dense/conv2d/depthwise2d layer"
        ) from None
    if len(values) != n_layers:
        raise K2CError(
            f"bad {what} {text!r}: {len(values)} value(s) given, the model has "
            f"{n_layers} dense/conv2d/depthwise2d layer(s)"
        )
    return values


def parse_parallelism(text: str | None, n_layers: int) -> list[int] | None:
    return parse_int_list(text, n_layers, "parallelism")


def with_knobs(plans: Sequence[LayerPlan], pes: Sequence[int], cycles: Sequence[int]) -> list[LayerPlan]:
    """The same network and formats with other knobs (range-checked)."""
    knobs = iter(zip(pes, cycles))
    out = []
    for plan in plans:
        if plan.is_compute:
            pe, b = next(knobs)
            if not 1 <= pe <= plan.filters:
                raise K2CError(f"parallelism {pe} out of range for layer '{plan.name}': 1..{plan.filters}")
            if not 1 <= b <= plan.window:
                raise K2CError(f"cycles {b} out of range for layer '{plan.name}': 1..{plan.window}")
            plan = replace(plan, pe=pe, cycles=b)
        out.append(plan)
    return out


def compute_layers(graph: Graph | Sequence[Mapping[str, Any]]) -> list[Layer]:
    """The dense/conv2d/depthwise2d records, in graph order: the layers with knobs."""
    return [layer for layer in as_graph(graph) if layer.type in COMPUTE_TYPES]


def _geometry(layer: Layer) -> dict[str, Any]:
    if isinstance(layer, ir.Conv2D):
        size, extra = layer.kernel_size, {"dilation": tuple(layer.dilation)}
    elif isinstance(layer, ir.DepthwiseConv2D):
        size, extra = layer.kernel_size, {}
    else:
        return {}
    if getattr(layer, "source_class", "") not in ("", layer.keras_class):
        extra["source_class"] = layer.source_class
    return {"kernel_size": tuple(size), "strides": tuple(layer.strides), "pads": tuple(layer.pads), **extra}


def make_plan(
    graph: Graph | Sequence[Mapping[str, Any]],
    fmt: FixedFormat,
    parallelism: Sequence[int] | None = None,
    layer_formats: Mapping[str, FixedFormat | LayerFormats] | None = None,
    cycles: Sequence[int] | None = None,
    input_fmt: FixedFormat | None = None,
    pipeline: int | Sequence[int] | None = None,
) -> list[LayerPlan]:
    """Give every layer of the graph (or dictionary IR) its formats and knobs, in graph order.

    `fmt` is the default for inputs, weights, biases and outputs; `layer_formats` overrides a
    compute or merge layer's formats by name (a bare FixedFormat sets weight, bias and
    output). `parallelism` and `cycles` give one value per compute layer (dense, conv2d, depthwise2d), in
    order: pe from 1 to the layer's filters/neurons, cycles from 1 to its window size K.
    `pipeline` gives the adder levels per register stage (0: not pipelined), one value for
    all compute layers or one per compute layer; default `DEFAULT_PIPELINE`.
    A layer's input format is its producer's output format; a merge has one per input.
    """
    graph = as_graph(graph)
    computes = compute_layers(graph)
    pes = list(parallelism) if parallelism is not None else [1] * len(computes)
    cyc = list(cycles) if cycles is not None else [1] * len(computes)
    if pipeline is None:
        pipeline = DEFAULT_PIPELINE
    levels = [pipeline] * len(computes) if isinstance(pipeline, int) else list(pipeline)
    for values, what in ((pes, "parallelism"), (cyc, "cycles"), (levels, "pipeline")):
        if len(values) != len(computes):
            raise K2CError(
                f"{what} has {len(values)} value(s), the model has {len(computes)} dense/conv2d/depthwise2d layer(s)"
            )
    overrides = {name: (o if isinstance(o, LayerFormats) else LayerFormats(o, o, o))
                 for name, o in (layer_formats or {}).items()}
    unknown = set(overrides) - {layer.name for layer in graph}
    if unknown:
        raise K2CError(f"format given for unknown layer(s): {', '.join(sorted(unknown))}")

    plans: list[LayerPlan] = []
    out_fmts: dict[str, FixedFormat] = {graph.input_name: input_fmt or fmt}
    knobs = iter(zip(pes, cyc, levels))
    for layer in graph:
        kind = layer.type
        home = kind_of(kind)
        if home is None and kind not in LAYER_TYPES:
            raise K2CError(f"layer '{layer.name}': type {kind!r} has no hardware block")
        in_fmts = tuple(out_fmts[t] for t in layer.inputs)
        common = dict(
            name=layer.name, type=kind, input_shape=tuple(layer.input_shape),
            output_shape=tuple(layer.output_shape), activation=layer.activation, in_fmt=in_fmts[0],
            inputs=tuple(layer.inputs), layer=layer,
        )
        if len(in_fmts) > 1:
            common["in_fmts"] = in_fmts
        if home is None:
            common.update(_geometry(layer))
        override = overrides.get(layer.name, LayerFormats())
        if home is not None:
            plan = home.plan(layer, common, overrides.get(layer.name), fmt)
            home.check(plan)
        elif kind not in COMPUTE_TYPES:
            if layer.name in overrides:
                raise K2CError(f"layer '{layer.name}' ({kind}) has no formats of its own; it keeps its input's")
            plan = LayerPlan(out_fmt=in_fmts[0], **common)
        else:
            plan = _compute_plan(common, override, fmt, *next(knobs))
        _check_activation(plan, layer)
        _check_formats(plan)
        plans.append(plan)
        out_fmts[layer.name] = plan.out_fmt
    return _mark_top_activation(plans)


def _mark_top_activation(plans: list[LayerPlan]) -> list[LayerPlan]:
    """Mark the output layer whose activation the Top applies after taking the class
    (golden.splits_output): its engine finishes with the values before it."""
    if plans and splits_output(plans[-1]):
        plans[-1] = replace(plans[-1], top_activation=True)
    return plans


def _check_activation(plan: LayerPlan, layer: Layer) -> None:
    """One clear error, naming the layer, for an activation its formats cannot take."""
    kind = getattr(layer, "source_class", None) or layer.keras_class
    check_activation(plan.activation, plan.act_in_fmt, f"layer '{plan.name}' ({kind}): ")


def _check_formats(plan: LayerPlan) -> None:
    """One clear error, naming the layer and the setting, for a format the hardware cannot
    build exactly: unsigned formats, negative fields and the truncate/wrap modes are built
    for weights, biases, the input and the output of a requantizing layer (docs/guide/contract.md,
    Formats); everything else rounds to nearest and saturates on native formats."""
    if plan.type in REQUANTIZING_TYPES:
        check_requantized_output(plan)


def _compute_plan(common: dict[str, Any], override: LayerFormats, fmt: FixedFormat, pe: int,
                  cycles_per_window: int, levels: int = DEFAULT_PIPELINE) -> LayerPlan:
    w_fmt = override.weight or fmt
    b_fmt = override.bias or w_fmt
    out_fmt = override.output or fmt
    plan = LayerPlan(out_fmt=out_fmt, w_fmt=w_fmt, b_fmt=b_fmt, pe=pe, cycles=cycles_per_window,
                     pipeline=levels, **common)
    if not 0 <= levels <= MAX_PIPELINE_LEVELS:
        raise K2CError(
            f"pipeline {levels} out of range for layer '{plan.name}': it must be between 0 (not "
            f"pipelined) and {MAX_PIPELINE_LEVELS} adder levels per register stage"
        )
    if not 1 <= pe <= plan.filters:
        raise K2CError(
            f"parallelism {pe} out of range for layer '{plan.name}': it must be between 1 "
            f"and {plan.filters} (its {'neuron' if plan.type == 'dense' else 'filter'} count)"
        )
    if not 1 <= cycles_per_window <= plan.window:
        raise K2CError(
            f"cycles {cycles_per_window} out of range for layer '{plan.name}': it must be "
            f"between 1 and {plan.window} (its window size)"
        )
    exact = accumulator_format(plan.in_fmt, w_fmt, plan.window, b_fmt)
    acc = exact if override.accumulator_bits is None else _narrow_accumulator(exact, override.accumulator_bits, plan.name)
    return replace(plan, acc_fmt=acc, exact_accumulator=acc == exact)
