"""Automatic per-layer formats for a total width of N bits (`--format auto --bits N`).

The rule (docs/guide/formats.md): with every value's width fixed at N bits, each extra
integer bit costs a fraction bit, so each quantity gets the *fewest integer bits such that
nothing saturates on the calibration data*, and all remaining bits go to the fraction:

- the input format: the calibration inputs;
- per compute layer, weights: the kernel's values; bias: the bias values;
- per compute layer, output: the pre-activation sums on the calibration data (float), as
  far as their saturation can change the result: the hardware saturates the requantized
  sum to the output format and then applies the activation (docs/guide/contract.md, steps 4-5),
  so for `relu` only positive sums count (negatives become 0 either way), for `sigmoid`
  sums are clipped to [-5, 5] (PLAN is flat beyond) and its outputs (up to 1.0) must fit,
  for `linear`/`softmax` every sum counts;
- accumulators stay exact (never saturate).

"Fits" is tested with the real quantizer (`formats.count_saturated`), so the format's
asymmetric range (`-2^int .. 2^int - 2^-frac`) and rounding up at the top are both
accounted for: 1.0 does not fit `1,0,frac`. When even N-1 integer bits are not enough the
widest split is taken and the remaining saturations are reported.

`choose_formats` is a pure function of the IR, the calibration inputs and N. `auto_formats`
adds the comparison with the best uniform N-bit format (highest golden-model accuracy on
the calibration data when labels are given, else fewest saturated values): how many values
each would saturate, and both accuracies. `resolve_formats` puts a design's format settings
together: the formats given, or the automatic choice with the ones given on top.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.hw.plan import LayerFormats, LayerPlan
from keras2clash.hw.planner import make_plan
from keras2clash.ir.graph import GraphLike, as_graph
from keras2clash.jsontypes import JsonObject
from keras2clash.kinds import kind_of
from keras2clash.quant import golden
from keras2clash.quant.formats import FixedFormat, count_saturated, make_format, parse_format
from keras2clash.quant.layerformats import (
    FormatConfig,
    ResolvedFormats,
    is_auto,
    load_calibration,
    load_named_calibration,
    merge_layer_formats,
    resolve_user_formats,
)
from keras2clash.quant.profile import FloatInputs, LayerTrace, float_forward, input_values, layer_params, require_finite

if TYPE_CHECKING:
    from rich.console import Console

SIGMOID_FLAT = 5.0
"""PLAN's sigmoid is constant (0 or 1) beyond |x| >= 5: saturating there changes nothing."""


def _joins(type_name: str) -> bool:
    """A merge: its formats are its output's only, fitted to its values."""
    home = kind_of(type_name)
    return home is not None and home.joins


def split(bits: int, int_bits: int) -> FixedFormat:
    """The format `1,int,N-1-int`."""
    return make_format(1, int_bits, bits - 1 - int_bits)


def fit_int_bits(values: np.ndarray, bits: int) -> tuple[int, int]:
    """(fewest integer bits so that no value saturates in an N-bit format, saturated count
    with it); (N-1, count) when no split fits."""
    values = np.asarray(values, dtype=np.float64).ravel()
    if bits < 1:
        raise K2CError(f"bad --bits {bits}: at least 1")
    for int_bits in range(bits):
        over, _ = _count(values, split(bits, int_bits))
        if over == 0:
            return int_bits, 0
    return bits - 1, _count(values, split(bits, bits - 1))[0]


def output_values(trace: LayerTrace) -> np.ndarray:
    """The values of a compute layer whose saturation in the output format matters."""
    assert trace.pre is not None
    z = trace.pre.ravel()
    if trace.activation == "relu":
        return np.maximum(z, 0.0)
    if trace.activation in ("sigmoid", "tanh", "softmax", "hard_sigmoid"):
        out = trace.out.ravel()  # bounded; NaN only where infinite inputs met (softmax: inf - inf)
        return np.concatenate([np.clip(z, -SIGMOID_FLAT, SIGMOID_FLAT), out[~np.isnan(out)]])
    return z


@dataclass(frozen=True)
class Saturation:
    """Values that do not fit their format, per layer (worst absolute error in brackets)."""

    layer: str
    weights: int = 0
    bias: int = 0
    outputs: int = 0
    inputs: int = 0  # only on the "input" row
    worst: float = 0.0

    @property
    def total(self) -> int:
        return self.weights + self.bias + self.outputs + self.inputs


def _count(values: np.ndarray, fmt: FixedFormat) -> tuple[int, float]:
    with np.errstate(over="ignore", invalid="ignore"):  # too large for x * 2^frac: they saturate
        over, worst = count_saturated(values, fmt)
    return over, (worst if over else 0.0)


def saturation(
    ir: GraphLike,
    traces: Sequence[LayerTrace],
    x: FloatInputs,
    input_fmt: FixedFormat,
    formats: Mapping[str, LayerFormats],
    default: FixedFormat | None = None,
) -> list[Saturation]:
    """Saturated calibration values with the given formats: inputs (a model of several: the
    first as "input", each other under its name, in the format a `formats` entry named after
    it gives, else `input_fmt`), then per compute layer weights, biases and outputs (output
    values as in `output_values`)."""
    graph = as_graph(ir)
    values = list(input_values(graph, x).values())
    over, worst = _count(values[0], input_fmt)
    rows = [Saturation("input", inputs=over, worst=worst)]
    for name, v in zip(graph.input_names[1:], values[1:]):
        over, worst = _count(v, formats.get(name, LayerFormats()).output or input_fmt)
        rows.append(Saturation(name, inputs=over, worst=worst))
    for layer, trace in zip(graph, traces):
        if _joins(trace.type):
            o_fmt = formats.get(layer.name, LayerFormats()).output or default
            assert o_fmt is not None
            o, ow = _count(trace.out, o_fmt)
            rows.append(Saturation(layer.name, outputs=o, worst=ow))
            continue
        if trace.pre is None:
            continue
        lf = formats.get(layer.name, LayerFormats())
        w_fmt = lf.weight or default
        b_fmt = lf.bias or w_fmt
        o_fmt = lf.output or default
        assert w_fmt is not None and b_fmt is not None and o_fmt is not None
        kernel, bias = layer_params(layer)
        w, ww = _count(kernel, w_fmt)
        b, bw = _count(bias, b_fmt)
        o, ow = _count(output_values(trace), o_fmt)
        rows.append(Saturation(layer.name, weights=w, bias=b, outputs=o, worst=max(ww, bw, ow)))
    return rows


@dataclass(frozen=True)
class AutoFormats:
    """The chosen formats: what `make_plan` takes, and what they saturate (should be 0)."""

    bits: int
    input_fmt: FixedFormat
    layers: dict[str, LayerFormats]
    saturation: list[Saturation]

    @property
    def saturated(self) -> int:
        return sum(s.total for s in self.saturation)

    def describe(self) -> list[tuple[str, str, str, str]]:
        """(layer, weights, bias, output) format labels, the input first."""
        rows = [("input", "", "", str(self.input_fmt))]
        for name, lf in self.layers.items():
            rows.append((name, str(lf.weight), str(lf.bias), str(lf.output)))
        return rows

    def to_json(self) -> JsonObject:
        return {
            "bits": self.bits,
            "input": str(self.input_fmt),
            "layers": {
                n: {"weight": str(lf.weight), "bias": str(lf.bias), "output": str(lf.output)}
                for n, lf in self.layers.items()
            },
            "saturation": [asdict(s) for s in self.saturation],
        }


def choose_formats(
    ir: GraphLike,
    x: FloatInputs,
    bits: int,
    *,
    input_format: FixedFormat | None = None,
    traces: Sequence[LayerTrace] | None = None,
) -> AutoFormats:
    """Per-layer N-bit formats with the fewest integer bits that saturate nothing on `x`
    (calibration inputs). `input_format` fixes the input instead of choosing it. A model of
    several inputs gets a format per input: the first is `input_fmt`, each other a `layers`
    entry named after it (its output field, as `hw.planner.make_plan` reads it)."""
    if not 1 <= bits <= 64:
        raise K2CError(f"bad --bits {bits}: between 1 and 64")
    graph = as_graph(ir)
    traces = list(traces) if traces is not None else float_forward(graph, x)
    require_finite(traces, x)
    inputs = input_values(graph, x)
    chosen = {name: input_format or split(bits, fit_int_bits(v, bits)[0]) for name, v in inputs.items()}
    input_fmt = chosen[graph.input_names[0]]
    layers: dict[str, LayerFormats] = {name: LayerFormats(output=chosen[name]) for name in graph.input_names[1:]}
    for layer, trace in zip(graph, traces):
        if _joins(trace.type):
            layers[layer.name] = LayerFormats(output=split(bits, fit_int_bits(trace.out, bits)[0]))
            continue
        if trace.pre is None:
            continue
        kernel, bias = layer_params(layer)
        w = split(bits, fit_int_bits(kernel, bits)[0])
        b = split(bits, fit_int_bits(bias, bits)[0])
        o = split(bits, fit_int_bits(output_values(trace), bits)[0])
        layers[layer.name] = LayerFormats(weight=w, bias=b, output=o)
    return AutoFormats(bits, input_fmt, layers, saturation(ir, traces, x, input_fmt, layers))


WEIGHT_FORMATS = ("same", "fit")
DEFAULT_WEIGHT_FORMAT = "fit"
"""`--weight-format`: `fit` (the default) keeps the layer format's width and gives each
layer's weights the fewest integer bits that hold its largest weight, the rest to the
fraction (`fitted_weights`); `same` keeps every weight in the layer's format (the 2021
thesis' contract)."""


def fitted_weights(ir: GraphLike, fmt: FixedFormat) -> dict[str, LayerFormats]:
    """Per layer with weights (Dense, Conv, Depthwise, an unfolded BatchNormalization's
    scale): its weights in `fmt`'s width with the fewest integer bits that saturate none.

    Why: a data format such as 1,7,8 keeps 7 integer bits for activations, but trained
    weights rarely reach 2, so six of the weights' sixteen bits held only sign copies; with
    them in the fraction the weights' rounding error shrinks 64-fold at no cost in memory or
    multipliers (the word and multiplier widths stay). Measured at 1,7,8 on the examples:
    the output layer's largest error vs Keras falls in 7 of 9 (digits_dense 0.020 -> 0.008,
    cnn_variants 0.055 -> 0.013). Biases keep `fmt` (they are added once, not multiplied, and
    a bias format otherwise defaults to the weights'). Never a negative integer field: its
    container would be wider than `fmt`."""
    layers: dict[str, LayerFormats] = {}
    for layer in as_graph(ir):
        home = kind_of(layer.type)
        if not (home.has_params if home is not None else getattr(layer, "kernel", None) is not None):
            continue
        kernel, _ = layer_params(layer)
        if kernel.size:
            layers[layer.name] = LayerFormats(weight=split(fmt.bits, fit_int_bits(kernel, fmt.bits)[0]), bias=fmt)
    return layers


def golden_accuracy(
    ir: GraphLike,
    x: FloatInputs,
    y: np.ndarray,
    default: FixedFormat,
    layers: Mapping[str, LayerFormats] | None = None,
    input_fmt: FixedFormat | None = None,
) -> float:
    """Hardware (golden-model) accuracy of a format choice on labelled data."""
    plans = make_plan(ir, default, layer_formats=layers, input_fmt=input_fmt)
    params = golden.quantize_params(plans, ir)
    pred = golden.predict(plans, params, golden.quantize_inputs(plans, x))[1]
    return float(np.mean(pred == np.asarray(y)))


@dataclass(frozen=True)
class AutoReport:
    """Auto formats next to the best uniform format of the same width."""

    auto: AutoFormats
    uniform: FixedFormat
    uniform_saturation: list[Saturation]
    auto_accuracy: float | None = None  # golden model, calibration data
    uniform_accuracy: float | None = None
    uniform_candidates: dict[str, float] = field(default_factory=dict)  # format -> accuracy
    chosen: AutoFormats | None = None  # what is used: `auto`, or the uniform format if it did better

    @property
    def kept_uniform(self) -> bool:
        """True when the best uniform format beat the per-layer choice on the calibration
        data (golden-model accuracy) and was therefore used instead."""
        return self.chosen is not None and self.chosen is not self.auto

    @property
    def uniform_saturated(self) -> int:
        return sum(s.total for s in self.uniform_saturation)

    def to_json(self) -> JsonObject:
        return {
            "auto": self.auto.to_json(),
            "auto_accuracy": self.auto_accuracy,
            "best_uniform": str(self.uniform),
            "best_uniform_accuracy": self.uniform_accuracy,
            "best_uniform_saturation": [asdict(s) for s in self.uniform_saturation],
            "uniform_candidates": cast(JsonObject, self.uniform_candidates),  # floats: JSON (dict is invariant)
            "kept_uniform": self.kept_uniform,
        }


def auto_formats(
    ir: GraphLike,
    x: FloatInputs,
    bits: int,
    y: np.ndarray | None = None,
    *,
    input_format: FixedFormat | None = None,
) -> AutoReport:
    """`choose_formats` plus the comparison with every uniform N-bit format `1,i,N-1-i`."""
    traces = float_forward(ir, x)
    auto = choose_formats(ir, x, bits, input_format=input_format, traces=traces)
    candidates: list[tuple[FixedFormat, list[Saturation], float | None]] = []
    for int_bits in range(bits):
        fmt = split(bits, int_bits)
        sat = saturation(ir, traces, x, input_format or fmt, {}, default=fmt)
        acc = golden_accuracy(ir, x, y, fmt, input_fmt=input_format) if y is not None else None
        candidates.append((fmt, sat, acc))

    def key(c: tuple[FixedFormat, list[Saturation], float | None]) -> tuple[float, int]:
        return (-(c[2] or 0.0), sum(s.total for s in c[1]))

    best = min(candidates, key=key)
    auto_acc = golden_accuracy(ir, x, y, auto.input_fmt, auto.layers, auto.input_fmt) if y is not None else None
    chosen = auto
    if auto_acc is not None and best[2] is not None and best[2] > auto_acc:
        # Never worse than a uniform format on the data we are allowed to look at.
        uniform, sat = best[0], best[1]
        inputs = set(as_graph(ir).input_names)
        chosen = AutoFormats(
            bits,
            input_format or uniform,
            {
                name: LayerFormats(
                    weight=uniform if given.weight else None,
                    bias=uniform if given.bias else None,
                    output=(input_format or uniform) if name in inputs else uniform,
                )
                for name, given in auto.layers.items()
            },
            sat,
        )
    return AutoReport(
        auto=auto,
        uniform=best[0],
        uniform_saturation=best[1],
        auto_accuracy=auto_acc,
        uniform_accuracy=best[2],
        uniform_candidates={str(f): a for f, _, a in candidates if a is not None},
        chosen=chosen,
    )


def resolve_formats(
    ir: GraphLike,
    fmt: str | FixedFormat,
    *,
    layer_formats: str | Path | Mapping[str, object] | FormatConfig | None = None,
    input_format: str | FixedFormat | None = None,
    bits: int | None = None,
    calibration: str | Path | None = None,
) -> ResolvedFormats:
    """`fmt` (a format, or "auto" with `bits` and `calibration`), a config / overrides and
    an input format -> the default format, per-layer formats and input format to plan with.

    With "auto", the automatic choice (`choose_formats` on the calibration inputs)
    comes first and the user's per-layer formats and input format are applied on top."""
    config = resolve_user_formats(layer_formats, None, input_format)
    if not is_auto(fmt):
        if bits is not None:
            raise K2CError("--bits is only used with --format auto")
        default = config.default or (fmt if isinstance(fmt, FixedFormat) else parse_format(str(fmt)))
        return ResolvedFormats(default, dict(config.layers), config.input)
    if bits is None:
        raise K2CError("--format auto needs --bits N (the total width of every value)")
    if calibration is None:
        raise K2CError(
            "--format auto needs calibration data (--calibration CALIB.npz): the layer outputs' ranges come from it"
        )
    graph = as_graph(ir)
    x: FloatInputs
    if len(graph.inputs) > 1:
        x, y = load_named_calibration(calibration, graph.inputs)
    else:
        x, y = load_calibration(calibration, tuple(graph.input_shape))
    report = auto_formats(ir, x, int(bits), y, input_format=config.input)
    chosen = report.chosen or report.auto
    layers = {
        name: merge_layer_formats(lf, config.layers.get(name, LayerFormats())) for name, lf in chosen.layers.items()
    }
    layers.update({n: lf for n, lf in config.layers.items() if n not in layers})
    return ResolvedFormats(chosen.input_fmt, layers, config.input or chosen.input_fmt, report, Path(calibration).name)


def render(report: AutoReport, console: Console | None = None) -> None:
    """The chosen formats and the saturation comparison as rich tables."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(stderr=True)
    auto = report.auto
    table = Table(title=f"auto formats for {auto.bits} bits (fewest integer bits, nothing saturates)")
    for col in ("layer", "weights", "bias", "output", "saturated (auto)", f"saturated ({report.uniform})"):
        table.add_column(col, justify="left" if col == "layer" else "right")
    uni = {s.layer: s for s in report.uniform_saturation}
    for (name, w, b, o), sat in zip(auto.describe(), auto.saturation):
        table.add_row(name, w, b, o, str(sat.total), str(uni[name].total if name in uni else "-"))
    console.print(table)
    line = (
        f"saturated calibration values: auto {auto.saturated}, best uniform {report.uniform} {report.uniform_saturated}"
    )
    if report.auto_accuracy is not None and report.uniform_accuracy is not None:
        line += (
            f"; golden accuracy on the calibration data: auto {100 * report.auto_accuracy:.2f}%, "
            f"{report.uniform} {100 * report.uniform_accuracy:.2f}%"
        )
    console.print(line)
    if report.kept_uniform:
        console.print(
            f"[yellow]auto keeps the uniform format {report.uniform}: it did better on the "
            "calibration data than the per-layer choice above[/yellow]"
        )


# --------------------------------------------------------------------------------------
# Overflow of the stored parameters (reported by every emit, stored in manifest.json)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParamOverflow:
    """Weights/biases of one layer that do not fit their formats (saturated when stored)."""

    layer: str
    w_fmt: str
    b_fmt: str
    weights: int
    weights_total: int
    weights_worst: float  # worst absolute error of the stored values (all of them)
    bias: int
    bias_total: int
    bias_worst: float

    @property
    def saturated(self) -> int:
        return self.weights + self.bias


def parameter_overflow(plans: Sequence[LayerPlan], ir: GraphLike) -> list[ParamOverflow]:
    """Per compute layer: how many weights and biases saturate, and the worst error."""
    by_name = as_graph(ir).by_name()
    rows = []
    for plan in plans:
        if not plan.has_params:
            continue
        assert plan.w_fmt is not None and plan.b_fmt is not None  # a layer with constants has their formats
        kernel, bias = layer_params(by_name[plan.name])
        w, ww = count_saturated(kernel, plan.w_fmt)
        b, bw = count_saturated(bias, plan.b_fmt)
        rows.append(
            ParamOverflow(plan.name, str(plan.w_fmt), str(plan.b_fmt), w, int(kernel.size), ww, b, int(bias.size), bw)
        )
    return rows


def overflow_to_json(rows: Sequence[ParamOverflow]) -> list[JsonObject]:
    return [asdict(r) for r in rows]


def warn_overflow(rows: Sequence[ParamOverflow], console: Console | None = None) -> bool:
    """Print a warning table if any parameter saturates; True if one did."""
    bad = [r for r in rows if r.saturated]
    if not bad:
        return False
    from rich.console import Console
    from rich.table import Table

    console = console or Console(stderr=True)
    table = Table(title="[yellow]warning: parameters that do not fit their format (saturated)[/yellow]")
    for col in ("layer", "weight format", "weights saturated", "bias format", "biases saturated", "worst error"):
        table.add_column(col, justify="left" if col == "layer" else "right")
    for r in bad:
        table.add_row(
            r.layer,
            r.w_fmt,
            f"{r.weights}/{r.weights_total}",
            r.b_fmt,
            f"{r.bias}/{r.bias_total}",
            f"{max(r.weights_worst if r.weights else 0.0, r.bias_worst if r.bias else 0.0):.4g}",
        )
    console.print(table)
    console.print(
        "[yellow]More integer bits (--layer-format NAME:w=...:b=...) or --format auto avoid this; "
        "see 'keras2clash profile'.[/yellow]"
    )
    return True
