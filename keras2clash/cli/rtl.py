"""Verification in the HDLs: testbenches, RTL simulation, a synthesis smoke test."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from keras2clash import api
from keras2clash.backend.project import load_project
from keras2clash.backend.weightbus import messages_text, parse_beats
from keras2clash.cli import params
from keras2clash.cli.common import app, err
from keras2clash.errors import K2CError
from keras2clash.fsutil import check_output_file, write_output_file
from keras2clash.verify.rtlsim import RtlResult


@app.command()
def testbench(
    project: params.Project,
    data: params.TestData,
    n: params.Limit = None,
    gap_max: params.GapMax = 0,
    seed: params.GapSeed = 1,
) -> None:
    """Write Verilog and VHDL testbenches (inputs, golden outputs, AXI drivers) to PROJECT/tb/."""
    api.testbench(project, data, n, gap_max=gap_max, seed=seed)


@app.command()
def rtlsim(
    project: params.Project,
    data: params.TestData,
    sim: Annotated[
        str, typer.Option("--sim", help="verilator (default: whole test set), icarus or ghdl (default: 5 samples).")
    ] = "verilator",
    n: params.Limit = None,
    gap_max: params.GapMax = 0,
    seed: params.GapSeed = 1,
    max_cycles: Annotated[
        int | None,
        typer.Option("--max-cycles", min=1, help="Refuse runs estimated longer (default: icarus 200k, ghdl 500k)."),
    ] = None,
    all_rows: Annotated[bool, typer.Option("--all", help="List every sample, not only failures (long runs).")] = False,
) -> None:
    """Simulate PROJECT's HDL (generated if missing) in an RTL simulator against the golden model."""
    result = api.rtlsim(project, data, sim, n, gap_max=gap_max, seed=seed, max_cycles=max_cycles, all_rows=all_rows)
    if not result.ok:
        failed = len(result.samples) - result.passed
        raise K2CError(
            f"RTL simulation in {sim}: {failed} of {len(result.samples)} sample(s) differ from the golden model"
            + (f"; {'; '.join(result.messages)}" if result.messages else ""),
            exit_code=1,
        )


@app.command()
def synth(project: params.Project) -> None:
    """Run yosys synth on PROJECT's Verilog (generated if missing): cells, flip-flops, multipliers."""
    api.synth(project)


NewWeights = Annotated[
    Path,
    typer.Argument(
        help="The new weights: a Keras model of the design's architecture, or an .npz of raw constants as the "
        "project's golden.npz holds them (<layer>/kernel, <layer>/bias)."
    ),
]


@app.command("weight-messages")
def weight_messages(
    project: params.Project,
    weights: NewWeights,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the messages here (default: stdout).")] = None,
    changed_only: Annotated[
        bool, typer.Option("--changed-only", help="Only the layers whose memory words change.")
    ] = False,
    force: params.ForceOut = False,
) -> None:
    """The weight port's messages that load WEIGHTS into PROJECT (emitted with --writable-weights):
    a line per layer, its 32-bit beats in hex, the header first, tlast on the last."""
    check_output_file(out, force)  # before the new weights are loaded
    messages = api.weight_messages(project, weights, changed_only=changed_only)
    _write_text(messages_text(messages), out, force)
    for message in messages:
        err.print(f"layer {message.index} {message.layer}: {len(message.beats)} beats")


def _write_text(text: str, out: Path | None, force: bool) -> None:
    """`text` on stdout, or written whole to `out` (refused if it exists, unless `force`)."""
    if out is None:
        sys.stdout.write(text)
    else:
        write_output_file(out, text, force)


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise K2CError(f"cannot read {path} ({type(exc).__name__}: {exc})") from None


ReadLayers = Annotated[
    list[str] | None,
    typer.Option("--layer", "-l", help="A memory to read, by its layer's name; repeatable (default: every one)."),
]


@app.command("read-messages")
def read_messages(
    project: params.Project,
    layers: ReadLayers = None,
    first: Annotated[int, typer.Option("--first", min=0, help="With one --layer: the first word to read.")] = 0,
    count: Annotated[
        int | None, typer.Option("--count", min=1, help="With one --layer: the words to read (default: to the end).")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the messages here (default: stdout).")] = None,
    force: params.ForceOut = False,
) -> None:
    """The weight port's read messages of PROJECT (emitted with --writable-weights
    --readable-weights): a line per memory read, its two 32-bit beats in hex (the header with
    bit 23 set, the word count), tlast on the second. The answers come on m_axis_weights;
    read-answer decodes them."""
    check_output_file(out, force)
    messages = api.weight_reads(project, layers, first=first, count=count)
    _write_text(messages_text(messages), out, force)
    for message in messages:
        err.print(f"layer {message.index} {message.layer}: an answer of {message.answer_beats} beats")


@app.command("read-answer")
def read_answer(
    project: params.Project,
    answers: Annotated[
        Path,
        typer.Argument(
            help="The answers: a line per memory read whole (read-messages' order), its 32-bit beats in hex."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Write the raw constants here (.npz).")],
    layers: ReadLayers = None,
    force: params.ForceOut = False,
) -> None:
    """Decode the weight port's answers to PROJECT's whole-memory reads (read-messages with the
    same --layer options) into raw constants: an .npz as PROJECT's golden.npz holds them
    (<layer>/kernel, <layer>/bias; the layers not read as the design has them), which
    weight-messages and reload take as new weights."""
    check_output_file(out, force)
    weights = api.read_back_weights(project, parse_beats(_read_text(answers)), layers)
    api.save_weights(out, weights, force=force)
    design = load_project(project).params
    for name, layer in weights.items():
        same = np.array_equal(layer.kernel, design[name].kernel) and np.array_equal(layer.bias, design[name].bias)
        err.print(f"{name}: {'as' if same else 'other than'} the design's weights")


@app.command()
def reload(
    project: params.Project,
    weights: NewWeights,
    data: params.TestData,
    at: Annotated[int, typer.Option("--at", min=0, help="The sample the new weights are loaded before.")],
    sim: Annotated[
        str, typer.Option("--sim", help="clash (the Clash simulation, default), verilator, icarus or ghdl.")
    ] = "clash",
    n: params.Limit = None,
    gap_max: params.GapMax = 0,
    seed: params.GapSeed = 1,
) -> None:
    """Simulate PROJECT with a weight reload before sample --at: golden model of the design's weights
    before it, of WEIGHTS from it on, against the hardware, bit for bit; and, for a design that
    reads its weights back (--readable-weights), every memory read back before and after the
    writes, against the design's words and WEIGHTS' words."""
    readable = load_project(project).readable_weights
    if sim == "clash":
        check = api.simulate_reload(project, data, weights, at, n, gap_max=gap_max, seed=seed)
        passed, total = int(np.all(check.sim.outputs == check.expected, axis=1).sum()), len(check.expected)
        ok = check.exact
        if readable:
            err.print(
                f"clash: the memories read back before and after the writes: "
                f"{'the words due, bit for bit' if check.read_back_exact else 'WRONG words'}"
            )
    else:
        result = api.rtlsim(
            project, data, sim, n, gap_max=gap_max, seed=seed, reload=api.weight_reload(project, weights, at)
        )
        if not isinstance(result, RtlResult):  # a writable design has one input and one output port
            raise K2CError(f"design {project} has several ports: no weight port to reload")
        passed, total, ok = result.passed, len(result.samples), result.ok
        for message in result.messages:
            err.print(message)
    err.print(
        f"{sim}: {passed}/{total} samples equal the golden model "
        f"({at} with the design's weights, {total - at} with the new ones)"
    )
    if not ok:
        raise K2CError(
            f"{sim}: {total - passed} sample(s) differ from the golden model after the reload"
            + ("" if passed < total or not readable else ", or a read-back's words differ from those due"),
            exit_code=1,
        )
    err.print("[bold green]golden == hardware after the reload: BIT-EXACT[/bold green]")
