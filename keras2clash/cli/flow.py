"""The main flow: emit, hdl, simulate, and run (all three in one go); each is the `api`
function of the same name."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from keras2clash import api
from keras2clash.cli import params
from keras2clash.cli.common import app, check_reports, err, languages, require_exact, write_reports
from keras2clash.design import DesignOptions

PROJECT_DIR = Path("build/net")


@app.command()
@params.design_knobs
def emit(
    model: params.Model,
    design: DesignOptions,
    out: params.ProjectOut = PROJECT_DIR,
    name: Annotated[
        str | None, typer.Option("--name", help="Name of the top entity (default: the Keras model name).")
    ] = None,
    force: params.Force = False,
) -> None:
    """Parse MODEL and write a Clash project (network, weights, memory files) to --out."""
    path = api.emit(model, design, out, name=name, force=force)
    err.print(f"[green]✓[/green] emitted {path}")


@app.command()
def hdl(
    project: params.Project,
    verilog: params.Verilog = False,
    vhdl: params.Vhdl = False,
    systemverilog: params.SystemVerilog = False,
    lint: Annotated[bool, typer.Option("--lint/--no-lint", help="verilator --lint-only the Verilog.")] = True,
) -> None:
    """Run Clash on PROJECT: HDL lands in PROJECT/hdl/<language>/ (default: Verilog)."""
    api.hdl(project, languages(verilog, vhdl, systemverilog, ("verilog",)), lint=lint)


@app.command()
def simulate(
    project: params.Project,
    data: params.TestData,
    n: params.Limit = None,
    json_out: params.ComparisonJson = None,
    markdown: params.ComparisonMarkdown = None,
    gap_max: Annotated[
        int, typer.Option("--gap-max", min=0, help="Random idle cycles (0..K) between inputs and random output stalls.")
    ] = 0,
    seed: params.GapSeed = 1,
    force: params.ForceReports = False,
    task: params.Task = "auto",
) -> None:
    """Simulate PROJECT in Clash (GHC-compiled) and compare with the golden model and Keras."""
    check_reports(force, json_out, markdown)
    comp = api.simulate(project, data, n, gap_max=gap_max, seed=seed, task=task)
    write_reports(comp, json_out, markdown, force)
    require_exact(comp)


@app.command()
@params.run_design_knobs
def run(
    model: params.Model,
    data: params.TestData,
    design: DesignOptions,
    out: params.ProjectOut = PROJECT_DIR,
    verilog: params.Verilog = False,
    vhdl: params.Vhdl = False,
    systemverilog: params.SystemVerilog = False,
    n: params.Limit = None,
    force: params.Force = False,
    json_out: params.ComparisonJson = None,
    markdown: params.ComparisonMarkdown = None,
    task: params.Task = "auto",
) -> None:
    """emit -> hdl -> simulate in one go (default: all three HDLs)."""
    langs = languages(verilog, vhdl, systemverilog, ("verilog", "vhdl", "systemverilog"))
    check_reports(force, json_out, markdown)
    comp = api.run(model, data, design, out, languages=langs, limit=n, force=force, task=task)
    write_reports(comp, json_out, markdown, force)
    require_exact(comp)
