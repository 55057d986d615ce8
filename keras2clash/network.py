"""The one loading path: a Keras model in, a planned network out.

Every command (emit, run, sweep, report, options, profile) starts here, so the chain
model file -> Keras model -> graph IR -> formats -> plan -> quantized parameters is written
once. `load_model` stops after the graph IR (for tools that plan many variants, such as
the precision sweep); `plan_network` takes a graph from there to the hardware plan;
`load_network` is both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from keras2clash.design import (
    DEFAULT_FORMAT,
    DEFAULT_LOGIC_BUDGET,
    DesignKnobs,
    DesignOptions,
    SoftmaxMode,
    logic_cells,
    per_layer,
)
from keras2clash.errors import K2CError
from keras2clash.frontend import hgq, qkeras
from keras2clash.frontend.convert import load_keras_model, to_graph
from keras2clash.hw.allocate import balanced
from keras2clash.hw.hwmodel import with_fifos
from keras2clash.hw.lanes import resolve_lanes, with_lanes
from keras2clash.hw.plan import LayerFormats, LayerPlan
from keras2clash.hw.planner import compute_layers, make_plan
from keras2clash.hw.strategy import balanced_strategies, candidates, split_auto
from keras2clash.ir.graph import Graph
from keras2clash.kinds import kind_of
from keras2clash.quant.autoformat import fitted_weights, parameter_overflow, resolve_formats
from keras2clash.quant.autoformat import render as render_auto
from keras2clash.quant.formats import FixedFormat
from keras2clash.quant.golden import QuantizedLayer, quantize_params
from keras2clash.quant.hls4ml import Hls4mlConfig
from keras2clash.quant.hls4ml import resolve as resolve_hls4ml
from keras2clash.quant.layerformats import FormatConfig, is_auto, merge_layer_formats

if TYPE_CHECKING:
    from typing_extensions import Unpack


def is_keras_model(obj: Any) -> bool:
    return type(obj).__module__.startswith("keras") and hasattr(obj, "layers")


def load_model(model: Any, weights: str | Path | None = None) -> tuple[Any, Graph]:
    """A model file or `keras.Model` -> (the Keras model, its graph IR after the passes)."""
    keras_model = model if is_keras_model(model) else load_keras_model(model, weights=weights)
    return keras_model, to_graph(keras_model)


@dataclass(frozen=True)
class Network:
    """A planned network: everything `emit` writes and the golden model needs."""

    graph: Graph
    plans: list[LayerPlan]
    params: dict[str, QuantizedLayer]
    formats: Any = None  # quant.layerformats.ResolvedFormats
    overflow: list[Any] = field(default_factory=list)  # quant.autoformat.ParamOverflow rows
    keras_model: Any = None
    auto: list[bool] = field(default_factory=list)  # compute layers left to --strategy auto, planned at resource

    @property
    def name(self) -> str:
        return self.graph.name


def plan_network(
    graph: Graph,
    design: DesignOptions | str | FixedFormat = DEFAULT_FORMAT,
    *,
    fifos: bool = True,
    console: Console | None = None,
    keras_model: Any = None,
    choose: bool = True,
    **knobs: Unpack[DesignKnobs],
) -> Network:
    """Formats (uniform, per layer, or automatic), knobs (given, or balanced for a
    multiplier budget), the plan, the branch FIFO depths (hardware model) and the quantized
    parameters of a graph, as `design` states them: a `design.DesignOptions`, or just the
    format with the other knobs as keywords (`plan_network(graph, "1,7,8", parallelism="1,2,5")`;
    keywords given with a record replace its fields; `DesignOptions` says what each knob
    does). `fifos=False` skips the FIFO depths (precision tools that never emit).
    `keras_model`: the model the graph came from (a quantization-aware one brings its own
    formats). A layer whose strategy is "auto" gets one with `dsp_budget` (hw.strategy);
    `choose=False` plans it at resource and flags it in `Network.auto` (`options` tries both)."""
    design = DesignOptions.of(design, **knobs)
    _check_several_inputs(graph, keras_model)
    layer_formats, parallelism, cycles = design.layer_formats, design.parallelism, design.cycles
    if design.hls4ml_config is not None:  # its formats first, --layer-formats/--layer-format on top; its knobs
        layer_formats, parallelism, cycles = _with_hls4ml(
            graph, design.hls4ml_config, layer_formats, parallelism, cycles, design.dsp_budget
        )
    lanes = resolve_lanes(design.lanes, design.dsp_budget)
    graph = softmax_mode(graph, design.softmax)
    layer_formats = _model_formats(keras_model, graph, layer_formats, design.format)
    n_compute = len(compute_layers(graph))
    pes = per_layer(parallelism, n_compute, "parallelism")
    cyc = per_layer(cycles, n_compute, "cycles")
    levels = design.pipeline if isinstance(design.pipeline, int) else per_layer(design.pipeline, n_compute, "pipeline")
    strategy = design.strategy
    if isinstance(strategy, tuple) and len(strategy) != n_compute:
        raise K2CError(
            f"bad strategy {','.join(strategy)!r}: {len(strategy)} value(s) given, the model has "
            f"{n_compute} dense/conv2d/depthwise2d layer(s)"
        )
    strategy, auto = split_auto(strategy, n_compute)
    if any(auto) and choose and design.dsp_budget is None:
        raise K2CError(
            "--strategy auto chooses each layer's strategy with the multipliers: give --dsp-budget "
            "(or give each layer latency or resource)"
        )
    formats = resolve_formats(
        graph, design.format, layer_formats=layer_formats, bits=design.bits, calibration=design.calibration
    )
    formats = _weight_formats(graph, formats, design.weight_format)
    if formats.auto is not None and console is not None:
        render_auto(formats.auto, console)
    serial = fifos and lanes == "auto"

    def build(pes, cyc, strategy) -> list[LayerPlan]:
        return make_plan(
            graph,
            formats.default,
            pes,
            cycles=cyc,
            layer_formats=formats.layers or None,
            input_fmt=formats.input,
            pipeline=levels,
            strategy=strategy,
            classify=not design.no_class,
        )

    if design.dsp_budget is None:
        plans = build(pes, cyc, strategy)
        if fifos:
            plans = with_lanes(plans) if serial else with_fifos(plans)
    else:
        plans = _within_budget(graph, formats, design, (pes, cyc, strategy), levels, auto, serial, build, console)
        if fifos and not serial:
            plans = with_fifos(plans)
    if fifos:
        _report_lanes(plans, console)
    return Network(
        graph=graph,
        plans=plans,
        params=quantize_params(plans),
        formats=formats,
        overflow=parameter_overflow(plans, graph),
        keras_model=keras_model,
        auto=auto if not choose else [False] * n_compute,
    )


def _check_several_inputs(graph: Graph, keras_model: Any) -> None:
    """A model of several inputs has a golden model, automatic formats and hardware (one
    slave port per input), each input in its own format; quantization-aware models' formats
    read one input: one error line."""
    if len(graph.inputs) == 1:
        return
    names = ", ".join(graph.input_names)
    what = f"model '{graph.name}' has {len(graph.inputs)} inputs ({names})"
    if keras_model is not None and (hgq.is_hgq_model(keras_model) or qkeras.is_qkeras_model(keras_model)):
        raise K2CError(f"{what}: the formats of a quantization-aware model are read for one input")


def _weight_formats(graph: Graph, formats: Any, weight_format: str) -> Any:
    """`weight_format="fit"`: the weights of every layer whose weight format nobody set (the
    user, an hls4ml config, a quantized model) fitted to the default format's width
    (autoformat.fitted_weights); its other fields set by hand stay on top."""
    from dataclasses import replace

    if weight_format == "same":
        return formats
    layers = dict(formats.layers)
    for name, fit in fitted_weights(graph, formats.default).items():
        given = layers.get(name, LayerFormats())
        if given.weight is None:  # a weight format set by hand or by the model stays as it is
            layers[name] = merge_layer_formats(fit, given)
    return replace(formats, layers=layers)


def _model_formats(
    keras_model: Any, graph: Graph, layer_formats: FormatConfig | None, fmt: FixedFormat | str
) -> FormatConfig | None:
    """A quantization-aware (HGQ2, QKeras) model brings its own formats (frontend.hgq /
    frontend.qkeras format_config; a QKeras model may take the user's input format):
    they replace the uniform format, and formats given as well are refused rather than
    silently mixed with the model's."""
    if keras_model is None:
        return layer_formats

    if qkeras.is_qkeras_model(keras_model):
        given = layer_formats or FormatConfig()
        if given.layers or given.default is not None or is_auto(fmt):
            raise K2CError(
                "a QKeras model brings its own formats (its quantizers); do not give per-layer or "
                "automatic formats with it (only --input-format, when it does not quantize its input)"
            )
        return qkeras.format_config(keras_model, graph, given.input)
    if not hgq.is_hgq_model(keras_model):
        return layer_formats
    if layer_formats is not None or is_auto(fmt):
        raise K2CError(
            "an HGQ2 model brings its own formats (its quantizers); do not give per-layer, "
            "input or automatic formats with it"
        )
    return hgq.format_config(keras_model, graph)


def _with_hls4ml(
    graph: Graph,
    config: Hls4mlConfig,
    layer_formats: FormatConfig | None,
    parallelism: Sequence[int] | None,
    cycles: Sequence[int] | None,
    dsp_budget: int | None,
) -> tuple[FormatConfig, Sequence[int] | None, Sequence[int] | None]:
    """An hls4ml config (quant.hls4ml) matched to the graph: the user's other format settings
    applied on top of its formats, and its reuse factors as the knobs (refused together with
    --parallelism/--cycles/--dsp-budget)."""
    resolved = resolve_hls4ml(config, graph)
    if resolved.parallelism is not None:
        if parallelism is not None or cycles is not None or dsp_budget is not None:
            raise K2CError("the hls4ml config states ReuseFactor: give no --parallelism, --cycles or --dsp-budget")
        parallelism, cycles = resolved.parallelism, resolved.cycles
    return resolved.formats.merged(layer_formats or FormatConfig()), parallelism, cycles


def softmax_mode(graph: Graph, mode: SoftmaxMode) -> Graph:
    """The graph with its output softmaxes removed when `mode` is "argmax" (design.SOFTMAX_MODES)."""
    from dataclasses import replace

    for name in graph.outputs:
        last = graph[name]
        if mode == "exact" or last.activation != "softmax":
            continue
        if (home := kind_of(last.type)) is not None and home.activation_only:
            graph = graph.without(last)
        else:
            graph = graph.replaced(last, replace(last, activation="linear"))
    return graph


def _report_lanes(plans: Sequence[LayerPlan], console: Console | None) -> None:
    """One line for the serial normalizations (hw.lanes)."""
    serial = [p for p in plans if p.lane_chunks > 1]
    if console is not None and serial:
        console.print(
            "serial normalization (the same II): "
            + ", ".join(f"{p.name} {p.channel_lanes} of {p.output_shape[-1]} channels a cycle" for p in serial)
        )


def _within_budget(
    graph: Graph,
    formats: Any,
    design: DesignOptions,
    knobs: tuple[Any, Any, Any],
    levels,
    auto: list[bool],
    serial: bool,
    build: Callable[[Any, Any, Any], list[LayerPlan]],
    console: Console | None,
) -> list[LayerPlan]:
    """--dsp-budget: the plans with the balanced knobs (`_balanced_knobs`). Layers with lanes
    (hw.lanes) are counted at whole beats, and with `--lanes auto` then get the fewest lanes
    that keep the II (fewer multipliers than the budget counted). When whole beats do not fit
    the budget, they are counted at their fewest lanes; `with_lanes` then gives them the
    fewest that keep the II, and when those take more than the budget has, the engines are
    balanced again without the excess (a few times), else the layers stay at their fewest
    lanes (which the balance counted)."""
    assert design.dsp_budget is not None
    try:
        pes, cyc, strategy = _balanced_knobs(graph, formats, design, knobs, levels, auto, console)
    except K2CError:
        if not serial:
            raise
    else:
        plans = build(pes, cyc, strategy)
        return with_lanes(plans) if serial else plans
    budget, reserve = design.dsp_budget, 0
    fewest: list[LayerPlan] | None = None
    for _ in range(3):
        try:
            pes, cyc, strategy = _balanced_knobs(graph, formats, design, knobs, levels, auto, console, reserve, True)
        except K2CError:
            if fewest is None:
                raise
            break
        plans = build(pes, cyc, strategy)
        fewest = fewest or with_fifos([_fewest_lanes(p) for p in plans])
        chosen = with_lanes(plans)
        over = sum(p.multipliers for p in chosen) - budget
        if over <= 0:
            return chosen
        reserve += over
    assert fewest is not None
    return fewest


def _fewest_lanes(plan: LayerPlan) -> LayerPlan:
    """A layer with lanes (`Kind.lanes_knob`) computing one channel a cycle (when it has more)."""
    if plan.kind is None or not plan.kind.lanes_knob or plan.output_shape[-1] == 1:
        return plan
    return plan.kind.with_lanes(plan, 1)


def _balanced_knobs(
    graph: Graph,
    formats: Any,
    design: DesignOptions,
    knobs: tuple[Any, Any, Any],
    levels,
    auto: list[bool],
    console,
    reserve: int = 0,
    serial: bool = False,
) -> tuple[list[int], list[int], Any]:
    """--dsp-budget: the balanced (pe, cycles) of every compute layer (hw.allocate) within the
    budget less `reserve`, ranked with the pipeline the design will have (its depth moves every
    layer's results in time), serial layers at their fewest lanes when `serial`; and the
    strategy of each layer left to "auto" (hw.strategy)."""
    pes, cyc, strategy = knobs
    if pes is not None or cyc is not None:
        raise K2CError("give either --dsp-budget or --parallelism/--cycles, not both")
    assert design.dsp_budget is not None
    budget = design.dsp_budget - reserve
    plans = make_plan(
        graph,
        formats.default,
        layer_formats=formats.layers or None,
        input_fmt=formats.input,
        pipeline=levels,
        strategy=strategy,
        classify=not design.no_class,
    )
    if serial:
        plans = [_fewest_lanes(p) for p in plans]
    status = console.status(f"balancing within {budget} multipliers") if console is not None else nullcontext()
    with status as shown:
        progress = shown.update if shown is not None else None
        if any(auto):
            logic = design.logic_budget if design.logic_budget is not None else logic_cells(DEFAULT_LOGIC_BUDGET)
            chose = balanced_strategies(plans, candidates(plans, auto, progress), budget, logic, progress)
            alloc, summary, notes, strategy = chose.allocation, chose.summary(), chose.notes, chose.strategies
        else:
            alloc = balanced(plans, budget, progress=progress)
            summary, notes = alloc.summary(), []
    if console is not None:
        for line in [*notes, summary]:
            console.print(line)
    return alloc.parallelism, alloc.cycles, strategy


def load_network(
    model: Any,
    design: DesignOptions | str | FixedFormat = DEFAULT_FORMAT,
    *,
    fifos: bool = True,
    console: Console | None = None,
    choose: bool = True,
    **knobs: Unpack[DesignKnobs],
) -> Network:
    """`plan_network(load_model(model))`: see both (the model's weights file, for a JSON
    config, is the design's `weights`)."""
    design = DesignOptions.of(design, **knobs)
    keras_model, graph = load_model(model, design.weights)
    return plan_network(graph, design, fifos=fifos, console=console, keras_model=keras_model, choose=choose)
