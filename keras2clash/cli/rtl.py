"""Verification in the HDLs: testbenches, RTL simulation, a synthesis smoke test."""

from __future__ import annotations

from typing import Annotated

import typer

from keras2clash import api
from keras2clash.cli import params
from keras2clash.cli.common import app
from keras2clash.errors import K2CError


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
