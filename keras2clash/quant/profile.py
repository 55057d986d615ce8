"""Profiling: the value ranges a network really uses, and the integer bits each needs.

`float_forward` runs the IR in float64 numpy (the same layers, in the same order, as the
hardware: BatchNormalization and activations already fused, Dropout removed), returning
every compute layer's pre-activation sums and every layer's outputs. It equals Keras'
`predict` up to float32 rounding (tested), and it is the calibration source for
`autoformat`. `profile` turns that into per-layer statistics of weights, biases,
pre-activations and outputs; `render`, `write_outputs` show them as a table, CSV/JSON and a
histogram figure (like the thesis' weight histogram).

"Integer bits needed" is the smallest `int` such that every value lies in the range of a
signed format `1,int,frac` for fine enough `frac`: `-2^int <= min` and `max < 2^int`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.ir.graph import Graph, GraphLike, as_graph
from keras2clash.ir.layers import Layer
from keras2clash.kinds import kind_of
from keras2clash.quant.activations import keras_float, parse

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from rich.console import Console

PERCENTILES = (0.1, 1.0, 50.0, 99.0, 99.9)
KINDS = ("weights", "bias", "pre-activation", "output")


@dataclass(frozen=True)
class LayerTrace:
    """One IR layer on a batch, in float: `pre` is the pre-activation sum (compute layers)."""

    name: str
    type: str
    activation: str
    pre: np.ndarray | None
    out: np.ndarray


def float_activation(z: np.ndarray, activation: str) -> np.ndarray:
    """An activation (canonical text) as Keras computes it, in float64."""
    return keras_float(parse(activation), z)


def layer_params(layer: Layer) -> tuple[np.ndarray, np.ndarray]:
    """The constants a layer stores: a Dense/Conv2D's kernel and bias, a BatchNormalization's
    per-channel scale (stored in the weight format) and offset (in the bias format)."""
    home = kind_of(layer.type)
    assert home is not None and home.has_params
    return home.constants(layer)


FloatInputs = np.ndarray | Sequence[np.ndarray] | Mapping[str, np.ndarray]
"""Inputs of the float model: one array, or for a model of several inputs one array per input
in the model's order (a list) or by input name (a dict)."""


def input_values(graph: Graph, x: FloatInputs) -> dict[str, np.ndarray]:
    """Every input of `graph` by name as float64 (N, *shape), from one array or, for several
    inputs, a list in the model's order or a dict by name; one error line otherwise."""
    if len(graph.inputs) == 1:
        one = np.asarray(next(iter(x.values())) if isinstance(x, Mapping) else x, dtype=np.float64)
        return {graph.input_name: one.reshape(len(one), *graph.input_shape)}
    names = graph.input_names
    if isinstance(x, Mapping):
        missing = [n for n in names if n not in x]
        if missing:
            raise K2CError(f"model '{graph.name}' has inputs {', '.join(names)}: missing {', '.join(missing)}")
        arrays = [x[n] for n in names]
    elif isinstance(x, np.ndarray) or len(x) != len(names):
        raise K2CError(f"model '{graph.name}' has {len(names)} inputs ({', '.join(names)}): give one array per input")
    else:
        arrays = list(x)
    return {
        name: np.asarray(a, dtype=np.float64).reshape(len(a), *shape) for (name, shape), a in zip(graph.inputs, arrays)
    }


def float_forward(
    ir: GraphLike,
    x: FloatInputs,
    params: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None,
) -> list[LayerTrace]:
    """The IR (a Graph or dictionary IR) in float64 on inputs `x` (N, *input_shape; several
    inputs: `input_values`), one trace per layer in graph order; `params` may replace a
    compute layer's (kernel, bias), e.g. by their quantized values ("weights rounded")."""
    graph = as_graph(ir)
    values = input_values(graph, x)
    with np.errstate(over="ignore", invalid="ignore"):  # float semantics: inf and NaN propagate
        return _float_forward(graph, values, params)


def require_finite(traces: Sequence[LayerTrace], x: FloatInputs, what: str = "calibration data") -> None:
    """One clear error when the float model overflows float64 on `x` (ranges and formats
    cannot be fitted to inf or NaN)."""
    arrays = [x] if isinstance(x, np.ndarray) else list(x.values()) if isinstance(x, Mapping) else list(x)
    for trace in traces:
        for values in (trace.pre, trace.out):
            if values is not None and not np.all(np.isfinite(values)):
                with np.errstate(over="ignore"):
                    largest = max((float(np.max(np.abs(a))) for a in arrays if np.size(a)), default=0.0)
                raise K2CError(
                    f"{what}: layer '{trace.name}' overflows float64 (inf or NaN) on these inputs "
                    f"(largest |input| {largest:.3g}); value ranges and formats cannot be fitted to them"
                )


def _float_forward(
    graph: Graph,
    inputs: Mapping[str, np.ndarray],
    params: Mapping[str, tuple[np.ndarray, np.ndarray]] | None,
) -> list[LayerTrace]:
    values = dict(inputs)
    traces: list[LayerTrace] = []
    for layer in graph:
        kind = layer.type
        home = kind_of(kind)
        if home is None:
            raise ValueError(f"no float model for layer type {kind!r}")
        own = params.get(layer.name) if params is not None else None
        pre, h = home.float_step(layer, [values[t] for t in layer.inputs], own)
        values[layer.name] = h
        traces.append(LayerTrace(layer.name, kind, layer.activation, pre, h))
    return traces


def int_bits_needed(values: np.ndarray) -> int:
    """Smallest int >= 0 with -2^int <= min(values) and max(values) < 2^int."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return 0
    hi, lo = float(values.max()), float(values.min())
    bits = 0
    if hi > 0:
        bits = max(bits, math.floor(math.log2(hi)) + 1)
    if lo < 0:
        bits = max(bits, math.ceil(math.log2(-lo)))
    return max(bits, 0)


@dataclass(frozen=True)
class Stats:
    layer: str
    kind: str  # one of KINDS, or "input"
    count: int
    min: float
    max: float
    abs_max: float
    mean: float
    std: float
    percentiles: dict[str, float]
    int_bits: int

    @staticmethod
    def of(layer: str, kind: str, values: np.ndarray) -> Stats:
        v = np.asarray(values, dtype=np.float64).ravel()
        with np.errstate(over="ignore", invalid="ignore"):  # huge inputs: a mean of inf or NaN is the truth
            return Stats._of(layer, kind, v)

    @staticmethod
    def _of(layer: str, kind: str, v: np.ndarray) -> Stats:
        pct = np.percentile(v, PERCENTILES) if v.size else [0.0] * len(PERCENTILES)
        return Stats(
            layer=layer,
            kind=kind,
            count=int(v.size),
            min=float(v.min()) if v.size else 0.0,
            max=float(v.max()) if v.size else 0.0,
            abs_max=float(np.abs(v).max()) if v.size else 0.0,
            mean=float(v.mean()) if v.size else 0.0,
            std=float(v.std()) if v.size else 0.0,
            percentiles={f"p{p:g}": float(q) for p, q in zip(PERCENTILES, pct)},
            int_bits=int_bits_needed(v),
        )


@dataclass(frozen=True)
class Profile:
    model: str
    samples: int
    stats: list[Stats]
    values: dict[tuple[str, str], np.ndarray]  # (layer, kind) -> the values (for histograms)

    def to_json(self) -> str:
        return json.dumps(
            {"model": self.model, "samples": self.samples, "stats": [asdict(s) for s in self.stats]}, indent=2
        )


def profile(ir: GraphLike, x: FloatInputs, model: str = "model") -> Profile:
    """Statistics of the inputs (a model of several: a row per input, named after it), and
    of each compute layer's weights, biases, pre-activations and outputs (float, on the
    calibration inputs `x`)."""
    stats: list[Stats] = []
    values: dict[tuple[str, str], np.ndarray] = {}

    def add(layer: str, kind: str, v: np.ndarray) -> None:
        values[(layer, kind)] = np.asarray(v, dtype=np.float64).ravel()
        stats.append(Stats.of(layer, kind, v))

    graph = as_graph(ir)
    inputs = input_values(graph, x)
    for name, v in inputs.items():
        add(name if len(inputs) > 1 else "input", "input", v)
    traces = float_forward(graph, inputs)
    require_finite(traces, inputs)
    for layer, trace in zip(graph, traces):
        if trace.pre is None:
            continue
        weights, bias = layer_params(layer)
        add(layer.name, "weights", weights)
        add(layer.name, "bias", bias)
        add(layer.name, "pre-activation", trace.pre)
        add(layer.name, "output", trace.out)
    return Profile(model, len(next(iter(inputs.values()))), stats, values)


def _num(v: float) -> str:
    return f"{v:.4g}"


def rows(prof: Profile) -> list[list[str]]:
    header = ["layer", "values", "count", "min", "max", "abs max", "p1", "p99", "int bits"]
    out = [header]
    for s in prof.stats:
        out.append(
            [
                s.layer,
                s.kind,
                str(s.count),
                _num(s.min),
                _num(s.max),
                _num(s.abs_max),
                _num(s.percentiles["p1"]),
                _num(s.percentiles["p99"]),
                str(s.int_bits),
            ]
        )
    return out


def render(prof: Profile, console: Console | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"{prof.model}: value ranges on {prof.samples} calibration samples (float)")
    header, *body = rows(prof)
    for i, col in enumerate(header):
        table.add_column(col, justify="left" if i < 2 else "right")
    for row in body:
        table.add_row(*row)
    console.print(table)
    console.print("int bits: smallest int with -2^int <= min and max < 2^int (format 1,int,frac).")


def to_markdown(prof: Profile) -> str:
    header, *body = rows(prof)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * 2 + "---:|" * (len(header) - 2)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines) + "\n"


def to_csv(prof: Profile) -> str:
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf)
    pct_keys = [f"p{p:g}" for p in PERCENTILES]
    writer.writerow(["layer", "values", "count", "min", "max", "abs_max", "mean", "std", *pct_keys, "int_bits"])
    for s in prof.stats:
        writer.writerow(
            [
                s.layer,
                s.kind,
                s.count,
                s.min,
                s.max,
                s.abs_max,
                s.mean,
                s.std,
                *(s.percentiles[k] for k in pct_keys),
                s.int_bits,
            ]
        )
    return buf.getvalue()


def plot(prof: Profile, path: Path) -> Path:
    """Histograms: one row per layer, columns weights / bias / pre-activation / output."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = [s.layer for s in prof.stats if s.kind == "weights"]
    n_rows = 1 + len(layers)
    fig, axes = plt.subplots(n_rows, len(KINDS), figsize=(4 * len(KINDS), 2.4 * n_rows), squeeze=False)
    inputs = [s.layer for s in prof.stats if s.kind == "input"][: len(KINDS)]  # the first row: the inputs
    for ax in axes[0, len(inputs) :]:
        ax.axis("off")
    for c, name in enumerate(inputs):
        _hist(axes[0, c], prof.values[(name, "input")], name)
    for r, layer in enumerate(layers, start=1):
        for c, kind in enumerate(KINDS):
            _hist(axes[r, c], prof.values[(layer, kind)], f"{layer}: {kind}")
    fig.suptitle(f"{prof.model}: values on {prof.samples} calibration samples")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _hist(ax: Axes, values: np.ndarray, title: str) -> None:
    ax.hist(values, bins=60, color="#3a6ea5")
    ax.set_title(title, fontsize=9)
    ax.set_yscale("log")
    ax.tick_params(labelsize=7)
    if values.size:
        bits = int_bits_needed(values)
        for edge in (-(2.0**bits), 2.0**bits):  # the range of 1,bits,frac
            ax.axvline(edge, color="#c0392b", lw=0.8, ls="--")


def write_outputs(prof: Profile, out_dir: Path) -> dict[str, Path]:
    """profile.md, profile.csv, profile.json and profile.png in `out_dir` (created)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "markdown": out_dir / "profile.md",
        "csv": out_dir / "profile.csv",
        "json": out_dir / "profile.json",
        "png": out_dir / "profile.png",
    }
    paths["markdown"].write_text(to_markdown(prof))
    paths["csv"].write_text(to_csv(prof))
    paths["json"].write_text(prof.to_json() + "\n")
    plot(prof, paths["png"])
    return paths
