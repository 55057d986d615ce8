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


def _design(
    format: str | None,
    layer_format: list[str] | None,
    layer_formats: Path | None,
    input_format: str | None,
    bits: int | None,
    calibration: Path | None,
    softmax: str,
    weights: Path | None,
    weight_format: str | None,
) -> DesignOptions | None:
    """The design the options state for a model file; None when none is given (a project
    refuses any)."""
    design = params.design_options(
        format,
        layer_formats=layer_formats,
        layer_format=layer_format,
        input_format=input_format,
        bits=bits,
        calibration=calibration,
        softmax=softmax,
        weight_format=weight_format,
        weights=weights,
    )
    return None if format is None and design == DesignOptions() else design


@app.command()
def trace(
    model: params.DebugModel,
    data: Annotated[Path, typer.Option("--data", "-d", help="Inputs .npz with an array x (labels are not needed).")],
    format: params.DebugFormat = None,
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
    layer_format: params.LayerFormat = None,
    layer_formats: params.LayerFormats = None,
    input_format: params.InputFormat = None,
    bits: params.Bits = None,
    calibration: params.Calibration = None,
    softmax: params.Softmax = "exact",
    weights: params.Weights = None,
    weight_format: params.DebugWeightFormat = None,
) -> None:
    """Every layer's fixed-point output (the golden model, = the hardware) against Keras' float output of the same layer."""
    if metric not in METRICS:
        raise K2CError(f"unknown --metric {metric!r}; choose from {', '.join(METRICS)}")
    check_reports(force, plot)
    read_npz(data, "data")  # before the slow model load
    design = _design(
        format, layer_format, layer_formats, input_format, bits, calibration, softmax, weights, weight_format
    )
    result = debug.trace(model, data, design, limit=n)
    first = render(result, Console(width=max(Console().width, 120)), threshold=threshold, metric=metric)
    if plot is not None:
        result.plot(plot, threshold=threshold, metric=metric, force=force)
        err.print(f"[green]✓[/green] wrote {escape(str(plot))}")
    if first is not None:
        raise K2CError(f"layer '{first.name}' is the first whose {metric} exceeds {threshold:g}", exit_code=1)


@app.command()
def predict(
    model: params.DebugModel,
    data: Annotated[Path, typer.Option("--data", "-d", help="Inputs .npz with an array x.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Write raw, values, classes (and input_raw) to this .npz.")],
    format: params.DebugFormat = None,
    n: params.Limit = None,
    force: params.ForceOutFile = False,
    layer_format: params.LayerFormat = None,
    layer_formats: params.LayerFormats = None,
    input_format: params.InputFormat = None,
    bits: params.Bits = None,
    calibration: params.Calibration = None,
    softmax: params.Softmax = "exact",
    weights: params.Weights = None,
    weight_format: params.DebugWeightFormat = None,
) -> None:
    """The golden model's (= the hardware's) outputs for the inputs in --data, as an .npz."""
    check_reports(force, out)
    read_npz(data, "data")
    design = _design(
        format, layer_format, layer_formats, input_format, bits, calibration, softmax, weights, weight_format
    )
    result = debug.predict(model, data, design, limit=n)
    buffer = io.BytesIO()
    np.savez(
        buffer,
        raw=result.raw,
        values=result.values,
        classes=result.classes,
        input_raw=result.input_raw,
        output_format=np.array(str(result.output_format)),
        input_format=np.array(str(result.input_format)),
    )
    write_output_file(out, buffer.getvalue(), force)
    err.print(f"[green]✓[/green] {len(result)} samples, outputs in {result.output_format}: {escape(str(out))}")
