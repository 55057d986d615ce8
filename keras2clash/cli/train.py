"""Training: the golden trainer beside Keras float SGD (`train`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from keras2clash.cli import params
from keras2clash.cli.common import app, check_reports, err
from keras2clash.errors import K2CError
from keras2clash.fsutil import write_output_file
from keras2clash.quant.formats import parse_format
from keras2clash.train.golden import LayerFormats, Sgd
from keras2clash.train.run import plot as plot_png
from keras2clash.train.run import train as run_train
from keras2clash.train.run import weights_npz


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
    epochs: Annotated[int, typer.Option("--epochs", min=1, help="Passes over the training samples.")] = 10,
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
    if json_out is not None:
        write_output_file(json_out, result.to_json() + "\n", force)
    if plot is not None:
        write_output_file(plot, plot_png(result), force)
    if save_weights is not None:
        write_output_file(save_weights, weights_npz(trainer), force)
