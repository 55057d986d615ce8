"""A trace: every layer's fixed-point output beside Keras' float output of the same layer.

hls4ml users find where a quantized network goes wrong by comparing layer by layer; this
is that view for the golden model (which the hardware equals bit for bit). `debug.trace`
builds a `Trace`; here are its numbers (`error_stats`), its views (a rich table, a PNG of
the per-layer error) and the question a user asks first: where do the outputs first
diverge (`Trace.first_divergence`)?
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from keras2clash.errors import K2CError
from keras2clash.fsutil import write_output_file
from keras2clash.quant.formats import FixedFormat


@dataclass(frozen=True)
class ErrorStats:
    """Fixed point minus Keras float over every value of a layer's output (all samples).

    `max_lsb` is `max_abs` in units of the layer's output LSB: rounding alone gives 0.5, so
    a layer far above that has lost more than its output resolution. `saturated` counts
    values at the format's minimum or maximum raw value (clipped, or exactly there)."""

    max_abs: float
    mean_abs: float
    mse: float
    max_lsb: float
    saturated: int
    values: int

    def metric(self, name: str) -> float:
        if name not in METRICS:
            raise K2CError(f"unknown metric {name!r}; choose from {', '.join(METRICS)}")
        return float(getattr(self, name))


METRICS = ("max_lsb", "max_abs", "mean_abs", "mse")
"""What `first_divergence` can compare with a threshold."""


def error_stats(fixed: np.ndarray, keras: np.ndarray, fmt: FixedFormat, raw: np.ndarray) -> ErrorStats:
    """Statistics of `fixed - keras` (reals of the same shape); non-finite Keras values
    (an overflow in float32) count as an infinite error."""
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(np.asarray(fixed, dtype=np.float64) - np.asarray(keras, dtype=np.float64))
    err = np.where(np.isnan(err), np.inf, err)
    if err.size == 0:
        return ErrorStats(0.0, 0.0, 0.0, 0.0, 0, 0)
    max_abs = float(err.max())
    return ErrorStats(
        max_abs=max_abs,
        mean_abs=float(err.mean()),
        mse=float(np.mean(err**2)),
        max_lsb=max_abs / fmt.resolution,
        saturated=int(np.sum((raw == fmt.raw_min) | (raw == fmt.raw_max))),
        values=int(err.size),
    )


@dataclass(frozen=True)
class LayerTrace:
    """One hardware layer (or the input): its output in fixed point and in Keras."""

    name: str  # the IR record's name (the Keras layer's, or e.g. 'sep_depthwise')
    kind: str  # the hardware kind (dense, conv2d, ..., or 'input')
    keras_class: str  # class of the Keras layer compared with ('' when none)
    keras_layer: str | None  # the Keras layer whose output is compared (None: no Keras tensor)
    fused: tuple[str, ...]  # Keras layers folded or fused into this record
    note: str  # how the record maps to Keras, in words
    fmt: FixedFormat  # its output format
    raw: np.ndarray  # (N, values) int64
    fixed: np.ndarray  # (N, values) float64: raw * 2^-frac
    keras: np.ndarray | None  # (N, values) float64, Keras' float32 output
    stats: ErrorStats | None


@dataclass(frozen=True)
class Trace:
    model: str
    samples: int
    layers: list[LayerTrace]

    def __getitem__(self, name: str) -> LayerTrace:
        for row in self.layers:
            if row.name == name:
                return row
        raise KeyError(name)

    def first_divergence(self, threshold: float, metric: str = "max_lsb") -> LayerTrace | None:
        """The first layer (in the order the network computes them) whose `metric` exceeds
        `threshold`, or None when every compared layer stays within it."""
        for row in self.layers:
            if row.stats is not None and row.stats.metric(metric) > threshold:
                return row
        return None

    def plot(
        self, path: str | Path, *, threshold: float | None = None, metric: str = "max_lsb", force: bool = True
    ) -> Path:
        """A PNG of the per-layer error (max and mean absolute error; max error in LSBs with
        the threshold), written whole (a temporary file, then a rename)."""
        write_output_file(path, _plot_png(self, threshold, metric), force)
        return Path(path)


def _plot_png(trace: Trace, threshold: float | None, metric: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in trace.layers if r.stats is not None]
    if not rows:
        raise K2CError("no layer has a Keras output to compare with: nothing to plot")
    xs = np.arange(len(rows))
    labels = [r.name for r in rows]
    top_values = [[r.stats.max_abs for r in rows], [r.stats.mean_abs for r in rows]]
    lsb_values = [r.stats.max_lsb for r in rows]
    # an exact layer (error 0) sits on the log axis' floor, a decade under the smallest error, marked "0"
    floor_abs = _floor(top_values[0] + top_values[1] + [r.fmt.resolution / 2 for r in rows])
    floor_lsb = _floor(lsb_values + ([threshold] if threshold is not None and metric == "max_lsb" else []))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(6.0, 0.55 * len(rows) + 2), 6.4), sharex=True)
    top.semilogy(xs, [max(v, floor_abs) for v in top_values[0]], "o-", label="max |fixed - Keras|")
    top.semilogy(xs, [max(v, floor_abs) for v in top_values[1]], "s--", label="mean |fixed - Keras|")
    top.semilogy(xs, [r.fmt.resolution / 2 for r in rows], ":", color="grey", label="half an output LSB")
    if threshold is not None and metric in ("max_abs", "mean_abs"):
        top.axhline(threshold, color="#c0392b", lw=1, label=f"threshold ({metric}) {threshold:g}")
    top.set_ylim(bottom=floor_abs / 2)
    top.set_ylabel("error (real units)")
    top.legend(fontsize=8)
    top.grid(alpha=0.3, which="both")
    over = [threshold is not None and r.stats.metric(metric) > threshold for r in rows]
    bottom.bar(xs, [max(v, floor_lsb) for v in lsb_values], color=["#c0392b" if o else "#2c5aa0" for o in over])
    for x, v in zip(xs, lsb_values):
        if v == 0:
            bottom.annotate("0", (x, floor_lsb), ha="center", va="bottom", fontsize=8)
    bottom.set_ylim(bottom=floor_lsb / 2)
    bottom.set_yscale("log")
    if threshold is not None and metric == "max_lsb":
        bottom.axhline(threshold, color="#c0392b", lw=1, label=f"threshold {threshold:g} LSB")
        bottom.legend(fontsize=8)
    bottom.set_ylabel("max error (output LSBs)")
    bottom.grid(alpha=0.3, which="both", axis="y")
    bottom.set_xticks(xs, labels, rotation=45, ha="right", fontsize=8)
    fig.suptitle(f"{trace.model}: fixed point vs Keras float per layer ({trace.samples} samples)")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def _floor(values: list[float]) -> float:
    """A log axis' floor: a decade under the smallest positive finite value (1e-3 if none)."""
    positive = [v for v in values if 0 < v < np.inf]
    return min(positive) / 10 if positive else 1e-3


def _num(v: float) -> str:
    return "inf" if not np.isfinite(v) else "0" if v == 0 else f"{v:.3g}"


def render(
    trace: Trace, console: Console | None = None, *, threshold: float | None = None, metric: str = "max_lsb"
) -> LayerTrace | None:
    """Print the per-layer table (how each row maps to Keras as numbered notes below it)
    and, with a threshold, the first layer beyond it (returned)."""
    console = console or Console()
    table = Table(title=f"{trace.model}: fixed point (golden model = hardware) vs Keras float, {trace.samples} samples")
    for column in ("layer", "kind", "Keras", "format", "max |err|", "mean |err|", "MSE", "max LSB", "sat."):
        table.add_column(column, justify="left" if column in ("layer", "kind", "Keras", "format") else "right")
    first = trace.first_divergence(threshold, metric) if threshold is not None else None
    notes: list[str] = []
    for row in trace.layers:
        s = row.stats
        name = row.name
        if row.note:
            notes.append(row.note)
            name += f" ({len(notes)})"
        cells = [name, row.kind, row.keras_layer or "-", str(row.fmt)]
        cells += (
            ["-"] * 5
            if s is None
            else [_num(s.max_abs), _num(s.mean_abs), _num(s.mse), _num(s.max_lsb), str(s.saturated)]
        )
        table.add_row(*cells, style="bold red" if first is not None and row is first else None)
    console.print(table)
    for k, note in enumerate(notes, 1):
        console.print(f"({k}) {note}")
    console.print(
        "max LSB: the largest error in units of the layer's output LSB (rounding alone: 0.5); "
        "sat.: values at the format's limits"
    )
    if threshold is not None:
        if first is None:
            console.print(f"no layer exceeds {metric} {threshold:g}")
        else:
            assert first.stats is not None
            console.print(
                f"[red]first divergence:[/red] layer '{first.name}' ({first.kind}) with {metric} "
                f"{_num(first.stats.metric(metric))} > {threshold:g}"
            )
    return first
