"""The planner: the pass that gives every layer of the graph its formats and knobs (the
`LayerPlan`s, `hw.plan`), in graph order; each layer's kind (`keras2clash.kinds`) plans it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from keras2clash.errors import K2CError
from keras2clash.hw.output import output_plans, splits_output
from keras2clash.hw.plan import (
    DEFAULT_PIPELINE,
    DEFAULT_STRATEGY,
    STRATEGIES,
    Common,
    Knobs,
    LayerFormats,
    LayerPlan,
)
from keras2clash.ir.graph import GraphLike, as_graph
from keras2clash.ir.layers import Layer
from keras2clash.kinds import kind_of
from keras2clash.quant.activations import check as check_activation
from keras2clash.quant.formats import FixedFormat


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
            plan = plan.with_knobs(pe, b)
        out.append(plan)
    return out


def compute_layers(graph: GraphLike) -> list[Layer]:
    """The records with the space-time knobs (`Kind.has_knobs`), in graph order."""
    return [layer for layer in as_graph(graph) if (home := kind_of(layer.type)) is not None and home.has_knobs]


def make_plan(
    graph: GraphLike,
    fmt: FixedFormat,
    parallelism: Sequence[int] | None = None,
    layer_formats: Mapping[str, FixedFormat | LayerFormats] | None = None,
    cycles: Sequence[int] | None = None,
    input_fmt: FixedFormat | None = None,
    pipeline: int | Sequence[int] | None = None,
    strategy: str | Sequence[str] | None = None,
    classify: bool = True,
) -> list[LayerPlan]:
    """Give every layer of the graph (or dictionary IR) its formats and knobs, in graph order.

    `fmt` is the default for inputs, weights, biases and outputs; `layer_formats` overrides a
    compute or merge layer's formats by name (a bare FixedFormat sets weight, bias and
    output). `parallelism` and `cycles` give one value per compute layer (dense, conv2d, depthwise2d), in
    order: pe from 1 to the layer's filters/neurons, cycles from 1 to its window size K.
    `pipeline` gives the adder levels per register stage (0: not pipelined), one value for
    all compute layers or one per compute layer; default `DEFAULT_PIPELINE`. `strategy` (one of
    `STRATEGIES`) likewise, for all or one per compute layer; default `DEFAULT_STRATEGY`.
    A layer's input format is its producer's output format; a merge has one per input.
    Every network input takes `input_fmt` (default `fmt`); in a model of several inputs, a
    `layer_formats` entry named after an input sets that input's format alone (its output
    format, or a bare FixedFormat). `classify=False`: the Top sends an output vector's values
    without taking its class (`LayerPlan.output_class`).
    """
    graph = as_graph(graph)
    computes = compute_layers(graph)
    pes = list(parallelism) if parallelism is not None else [1] * len(computes)
    cyc = list(cycles) if cycles is not None else [1] * len(computes)
    if pipeline is None:
        pipeline = DEFAULT_PIPELINE
    levels = [pipeline] * len(computes) if isinstance(pipeline, int) else list(pipeline)
    strategy = DEFAULT_STRATEGY if strategy is None else strategy
    strategies = [strategy] * len(computes) if isinstance(strategy, str) else list(strategy)
    for values, what in ((pes, "parallelism"), (cyc, "cycles"), (levels, "pipeline"), (strategies, "strategy")):
        if len(values) != len(computes):
            raise K2CError(
                f"{what} has {len(values)} value(s), the model has {len(computes)} dense/conv2d/depthwise2d layer(s)"
            )
    overrides = {
        name: (o if isinstance(o, LayerFormats) else LayerFormats(o, o, o)) for name, o in (layer_formats or {}).items()
    }
    inputs = set(graph.input_names) if len(graph.inputs) > 1 else set()
    unknown = set(overrides) - {layer.name for layer in graph} - inputs
    if unknown:
        raise K2CError(f"format given for unknown layer(s): {', '.join(sorted(unknown))}")

    plans: list[LayerPlan] = []
    out_fmts: dict[str, FixedFormat] = {
        name: _input_format(name, overrides, input_fmt or fmt) for name in graph.input_names
    }
    unknown_strategies = sorted(set(strategies) - set(STRATEGIES))
    if unknown_strategies:
        raise K2CError(f"unknown strategy {unknown_strategies[0]!r}: choose {' or '.join(STRATEGIES)}")
    knobs = iter(zip(pes, cyc, levels, strategies))
    for layer in graph:
        home = kind_of(layer.type)
        if home is None:
            raise K2CError(f"layer '{layer.name}': type {layer.type!r} has no hardware block")
        in_fmts = tuple(out_fmts[t] for t in layer.inputs)
        common = Common(layer, in_fmts, Knobs(*next(knobs)) if home.has_knobs else None)
        plan = home.plan(common, overrides.get(layer.name), fmt)
        home.check(plan)
        _check_activation(plan, layer)
        if layer.name in graph.heads:
            plan = replace(plan, output_port=graph.heads.index(layer.name))
        plans.append(plan if classify else replace(plan, output_class=False))
        out_fmts[layer.name] = plan.out_fmt
    if len(graph.inputs) > 1:
        plans[0] = replace(plans[0], network_inputs=tuple((n, shape, out_fmts[n]) for n, shape in graph.inputs))
    return _mark_top_activation(plans)


def _input_format(name: str, overrides: Mapping[str, LayerFormats], fmt: FixedFormat) -> FixedFormat:
    """A network input's format: its own entry's (the output field) or the input format."""
    own = overrides.get(name)
    if own is None:
        return fmt
    if own.output is None:
        raise K2CError(f"input '{name}': give its format as the output format (the value it streams in)")
    return own.output


def _mark_top_activation(plans: list[LayerPlan]) -> list[LayerPlan]:
    """Mark each output layer whose activation the Top applies after taking the class
    (hw.output.splits_output): its engine finishes with the values before it."""
    last = {plan.name for plan in output_plans(plans)} if plans else set()
    return [replace(p, top_activation=True) if p.name in last and splits_output(p) else p for p in plans]


def _check_activation(plan: LayerPlan, layer: Layer) -> None:
    """One clear error, naming the layer, for an activation its formats cannot take."""
    kind = getattr(layer, "source_class", None) or layer.keras_class
    check_activation(plan.activation, plan.act_in_fmt, f"layer '{plan.name}' ({kind}): ")
