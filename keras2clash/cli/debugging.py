"""Debugging: the golden model's outputs (predict) and every layer's error against Keras
(trace), for a model file or an emitted project (keras2clash.debug)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.markup import escape

from keras2clash import debug
from keras2clash.cli import params
from keras2clash.cli.common import app, check_reports, err
from keras2clash.data import read_npz
from keras2clash.design import DesignOptions
from keras2clash.errors import K2CError
from keras2clash.fsutil import write_output_file
from keras2clash.report.trace import METRICS, render


@app.command()
@params.debug_design_knobs
def trace(
    model: params.DebugModel,
    data: Annotated[Path, typer.Option("--data", "-d", help="Inputs .npz with an array x (labels are not needed).")],
    threshold: Annotated[
        float | None,
        typer.Option(
            "--threshold", "-t", min=0, help="Report the first layer whose --metric exceeds this; exit 1 if one does."
        ),
    ] = None,
    metric: Annotated[
        str, typer.Option("--metric", help="max_lsb (largest error in output LSBs) | max_abs | mean_abs | mse.")
    ] = "max_lsb",
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a PNG of the per-layer error.")] = None,
    n: params.Limit = None,
    force: params.ForcePlot = False,
    *,
    design: DesignOptions | None,
) -> None:
    """Every layer's fixed-point output (the golden model, = the hardware) against Keras' float output of the same layer."""
    if metric not in METRICS:
        raise K2CError(f"unknown --metric {metric!r}; choose from {', '.join(METRICS)}")
    check_reports(force, plot)
    read_npz(data, "data")  # before the slow model load
    result = debug.trace(model, data, design, limit=n)
    first = render(result, Console(width=max(Console().width, 120)), threshold=threshold, metric=metric)
    if plot is not None:
        result.plot(plot, threshold=threshold, metric=metric, force=force)
        err.print(f"[green]✓[/green] wrote {escape(str(plot))}")
    if first is not None:
        raise K2CError(f"layer '{first.name}' is the first whose {metric} exceeds {threshold:g}", exit_code=1)


def _inputs_fields(result: debug.Prediction) -> dict[str, np.ndarray]:
    """The quantized inputs and their formats: `input_raw`, `input_format`; for a model of
    several inputs `input_raw_<name>`, `input_format_<name>` per input."""
    if not isinstance(result.input_raw, tuple):
        return {"input_raw": result.input_raw, "input_format": np.array(str(result.input_format))}
    fields: dict[str, np.ndarray] = {}
    for name, raw, fmt in zip(result.input_names, result.input_raw, result.input_formats):
        fields[f"input_raw_{name}"] = raw
        fields[f"input_format_{name}"] = np.array(str(fmt))
    return fields


@app.command()
@params.debug_design_knobs
def predict(
    model: params.DebugModel,
    data: Annotated[Path, typer.Option("--data", "-d", help="Inputs .npz with an array x (x_<input name> per input).")],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Write raw, values, classes (a classifier's) and input_raw to this .npz "
            "(raw_<output layer>, ... per output; input_raw_<name> per input).",
        ),
    ],
    n: params.Limit = None,
    force: params.ForceOutFile = False,
    *,
    design: DesignOptions | None,
) -> None:
    """The golden model's (= the hardware's) outputs for the inputs in --data, as an .npz."""
    check_reports(force, out)
    read_npz(data, "data")
    result = debug.predict(model, data, design, limit=n)
    results = result if isinstance(result, list) else [result]
    fields: dict[str, np.ndarray] = dict(_inputs_fields(results[0]))
    for one in results:
        # a model of several outputs names each output's arrays after its layer
        suffix = f"_{one.output_name}" if isinstance(result, list) else ""
        fields[f"raw{suffix}"] = one.raw
        fields[f"values{suffix}"] = one.values
        if one.classes is not None:
            fields[f"classes{suffix}"] = one.classes
        fields[f"output_format{suffix}"] = np.array(str(one.output_format))
    buffer = io.BytesIO()
    np.savez(buffer, **fields)
    write_output_file(out, buffer.getvalue(), force)
    formats = ", ".join(str(one.output_format) for one in results)
    err.print(f"[green]✓[/green] {len(results[0])} samples, outputs in {formats}: {escape(str(out))}")
