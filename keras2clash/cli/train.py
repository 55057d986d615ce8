"""Training: the golden trainer beside Keras float SGD (`train`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from keras2clash.backend.emitter import hdl_name
from keras2clash.cli import params
from keras2clash.cli.common import app, check_reports, err
from keras2clash.errors import K2CError
from keras2clash.fpga.devices import DEVICES, multiplier_budget
from keras2clash.fsutil import write_output_file
from keras2clash.quant.formats import parse_format
from keras2clash.train.golden import LayerFormats, Sgd
from keras2clash.train.run import CoreRequest, weights_npz
from keras2clash.train.run import plot as plot_png
from keras2clash.train.run import train as run_train


def _parallelism(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise K2CError(f"--parallelism {text!r}: outputs a cycle per layer, e.g. 14,8,5") from None
    return values


def _rate(text: str) -> float:
    """A learning rate: a number, or 2^-k."""
    t = text.strip().replace(" ", "")
    try:
        if t.startswith("2^"):
            return 2.0 ** float(t[2:])
        return float(t)
    except ValueError:
        raise K2CError(f"--lr {text!r}: a number (0.03125) or a power of two (2^-5)") from None


@app.command()
def train(
    model: params.Model,
    data: Annotated[Path, typer.Option("--data", "-d", help="Training samples: .npz with x/y or x_train/y_train.")],
    test: Annotated[
        Path | None,
        typer.Option("--test", help="Test samples (.npz, x/y or x_test/y_test): accuracy after each epoch."),
    ] = None,
    epochs: Annotated[
        int, typer.Option("--epochs", min=0, help="Passes over the training samples (0: only --core).")
    ] = 10,
    lr: Annotated[
        str, typer.Option("--lr", help="Learning rate: 0.03125 or 2^-5 (a power of two is a shift).")
    ] = "2^-5",
    momentum: Annotated[float, typer.Option("--momentum", help="SGD momentum (Keras' SGD), 0 for none.")] = 0.0,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Samples a step (their gradients summed).")] = 1,
    input_format: Annotated[str, typer.Option("--input-format", help="Format of the samples.")] = "1,5,12",
    a_format: Annotated[str, typer.Option("--a-format", help="Activations (every layer).")] = "1,5,12",
    w_format: Annotated[str, typer.Option("--w-format", help="Weights (every layer).")] = "1,0,17",
    b_format: Annotated[str, typer.Option("--b-format", help="Biases (every layer).")] = "1,0,17",
    g_format: Annotated[str, typer.Option("--g-format", help="Gradients by the pre-activations.")] = "1,0,17",
    v_format: Annotated[str, typer.Option("--v-format", help="Momentum's velocity.")] = "1,0,17",
    layer_format: Annotated[
        list[str] | None,
        typer.Option("--layer-format", help="One layer's formats: NAME:KEY=FORMAT[;KEY=FORMAT], KEY a|w|b|g|v."),
    ] = None,
    auto_bits: Annotated[
        int | None,
        typer.Option(
            "--auto-bits",
            min=4,
            max=32,
            help="Formats of N bits chosen per layer from a profile of one epoch at 24 bits (instead of the *-format options).",
        ),
    ] = None,
    loss: Annotated[
        str | None,
        typer.Option("--loss", help="categorical_crossentropy (softmax output) or mse. Default: by the output."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sample order (one permutation per epoch).")] = 0,
    core: Annotated[
        Path | None,
        typer.Option(
            "--core",
            help="Write the training core (a Clash project: the model's initial weights, these formats and SGD) to this folder.",
        ),
    ] = None,
    parallelism: Annotated[
        str | None, typer.Option("--parallelism", "-p", help="The core's outputs a cycle, one per layer (14,8,5).")
    ] = None,
    dsp_budget: params.DspBudget = None,
    core_steps: Annotated[
        int,
        typer.Option(
            "--core-steps", min=0, help="Simulate the core's first N steps (Clash) against the golden trainer."
        ),
    ] = 0,
    keras: Annotated[bool, typer.Option("--keras/--no-keras", help="Train the same in Keras float beside it.")] = True,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write both runs' epochs as JSON.")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Plot loss and accuracy per epoch (PNG).")] = None,
    save_weights: Annotated[
        Path | None, typer.Option("--save-weights", help="Write the trained weights (.npz).")
    ] = None,
    force: params.ForceReports = False,
) -> None:
    """Train a Dense network with the golden trainer (fixed-point SGD, bit for bit what a training core computes) beside Keras float."""
    check_reports(force, json_out, plot, save_weights)
    if (parallelism or dsp_budget or core_steps) and core is None:
        raise K2CError("--parallelism, --dsp-budget and --core-steps describe the training core: give --core FOLDER")
    if parallelism and dsp_budget:
        raise K2CError("give either --parallelism or --dsp-budget, not both")
    request = None
    if core is not None:
        request = CoreRequest(
            core,
            hdl_name(model.stem) + "_train",
            parallelism=_parallelism(parallelism) if parallelism else None,
            dsp_budget=multiplier_budget(dsp_budget) if dsp_budget else None,
            device=DEVICES.get(dsp_budget.strip().lower()) if dsp_budget else None,
            steps=core_steps,
            force=force,
        )
    formats = LayerFormats(*(parse_format(t) for t in (a_format, w_format, b_format, g_format, v_format)))
    with err.status("loading the model") as status:
        result, trainer = run_train(
            model,
            data,
            test=test,
            epochs=epochs,
            sgd=Sgd(_rate(lr), momentum, batch),
            formats=formats,
            layer_specs=layer_format or (),
            x_format=input_format,
            loss=loss,
            seed=seed,
            keras=keras,
            auto_bits=auto_bits,
            core=request,
            progress=status.update,
        )
    table = Table(
        title=f"{result.model} {'-'.join(map(str, result.sizes))}: {result.samples} samples, "
        f"lr/batch {result.scale}, batch {result.sgd.batch}, momentum {result.sgd.momentum:g}"
    )
    table.add_column("epoch", justify="right")
    runs = [("golden", result.golden)] + ([("Keras", result.keras)] if result.keras else [])
    for name, _ in runs:
        table.add_column(f"{name} loss", justify="right")
        table.add_column(f"{name} acc.", justify="right")
        table.add_column(f"{name} test", justify="right")
    for i in range(len(result.golden)):
        row = [str(i + 1)]
        for _, epochs_ in runs:
            e = epochs_[i]
            row += [
                f"{e.loss:.4f}",
                f"{100 * e.accuracy:.2f}%",
                "-" if e.test_accuracy is None else f"{100 * e.test_accuracy:.2f}%",
            ]
        table.add_row(*row)
    Console().print(table)
    for line in result.formats:
        err.print(f"formats {line}", highlight=False)
    err.print(", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items()), highlight=False)
    if result.core:
        c = result.core
        line = (
            f"training core: {c['project']}, parallelism {','.join(map(str, c['parallelism']))} "  # type: ignore[call-overload]
            f"({c['multipliers']} multipliers, {c['block_rams']} DP16KD), {c['step_cycles']:,} cycles a step"
        )
        if "checked_steps" in c:
            exact = "bit-exact" if c["bit_exact"] else "DIFFERS: " + "; ".join(c["mismatches"])  # type: ignore[arg-type]
            cycles = "as the cycle model counts" if c["cycles_match_model"] else f"cycles {c['simulated_step_cycles']}"
            line += f"; {c['checked_steps']} steps simulated: {exact}, {cycles}"
        err.print(line, highlight=False)
    if json_out is not None:
        write_output_file(json_out, result.to_json() + "\n", force)
    if plot is not None:
        write_output_file(plot, plot_png(result), force)
    if save_weights is not None:
        write_output_file(save_weights, weights_npz(trainer), force)
