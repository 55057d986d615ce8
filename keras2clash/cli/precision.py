"""Precision: accuracy against bit width (sweep) and the value ranges a format must hold
(profile)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from keras2clash.cli import params
from keras2clash.cli.common import app, err
from keras2clash.errors import K2CError
from keras2clash.fsutil import atomic_directory, check_writable_target
from keras2clash.network import load_model
from keras2clash.quant import profile as prof
from keras2clash.quant.layerformats import load_calibration, load_named_calibration
from keras2clash.report.sweep import DEFAULT_FORMATS
from keras2clash.report.sweep import sweep as run_sweep


@app.command()
def sweep(
    model: params.Model,
    data: params.TestData,
    formats: Annotated[
        list[str] | None,
        typer.Option(
            "--formats",
            "--format",
            "-f",
            help="Formats: 1,7,8 | '1,5,6;1,7,8' | a range 1,2,3:1,16,17 (int and frac step by one together) "
            "| auto (with --bits); repeatable. Default: 1,2,3:1,16,17.",
        ),
    ] = None,
    bits: Annotated[str | None, typer.Option("--bits", help="Widths for --formats auto, e.g. 6,12,16.")] = None,
    auto: Annotated[bool, typer.Option("--auto", help="Also sweep auto per-layer formats at every width.")] = False,
    calibration: Annotated[
        Path | None, typer.Option("--calibration", help="Calibration .npz for auto formats (default: --data).")
    ] = None,
    confirm: Annotated[
        list[str] | None, typer.Option("--confirm", help="Confirm this format in the Clash simulation (repeatable).")
    ] = None,
    confirm_bits: Annotated[
        str | None, typer.Option("--confirm-bits", help="Confirm every swept format of these widths, e.g. 6,12,16.")
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out-dir", "-o", help="Write sweep.md/.csv/.json/.png (and confirmed projects) here."),
    ] = None,
    force: params.ForceOutDir = False,
    n: params.Limit = None,
    weights: params.Weights = None,
) -> None:
    """Accuracy against bit width: Keras rounded, weights rounded, golden model (hardware), Clash simulation."""
    result = run_sweep(
        model,
        data,
        formats or [DEFAULT_FORMATS],
        bits=bits,
        auto=auto,
        calibration=calibration,
        confirm=confirm or (),
        confirm_bits=confirm_bits,
        out_dir=out_dir,
        force=force,
        limit=n,
        weights=weights,
    )
    if out_dir is not None:
        err.print(f"[green]✓[/green] wrote {out_dir}/sweep.md, .csv, .json, .png")
    bad = [r.label for r in result.rows if r.bit_exact is not None and r.bit_exact != r.sim_samples]
    if bad:
        raise K2CError(f"simulation differs from the golden model at {', '.join(bad)}", exit_code=1)


@app.command()
def profile(
    model: params.Model,
    data: Annotated[
        Path, typer.Option("--data", "-d", help="Calibration .npz (array x; several inputs: x_<input name> each).")
    ],
    out_dir: Annotated[
        Path | None, typer.Option("--out-dir", "-o", help="Write profile.md/.csv/.json/.png here.")
    ] = None,
    n: params.Limit = None,
    weights: params.Weights = None,
    force: params.ForceOutDir = False,
) -> None:
    """Value ranges and histograms of weights, biases and activations; the integer bits each needs."""
    if out_dir is not None:
        check_writable_target(out_dir, force)
    keras_model, graph = load_model(model, weights)
    if len(graph.inputs) > 1:  # x_<input name> per input
        xs, _ = load_named_calibration(data, graph.inputs)
        result = prof.profile(graph, [a[:n] if n else a for a in xs], keras_model.name)
    else:
        x, _ = load_calibration(data, tuple(graph.input_shape))
        result = prof.profile(graph, x[:n] if n else x, keras_model.name)
    prof.render(result)
    if out_dir is not None:
        with atomic_directory(out_dir, force=force) as tmp:
            paths = prof.write_outputs(result, tmp)
        err.print(f"[green]✓[/green] wrote {', '.join(str(out_dir / p.name) for p in paths.values())}")
