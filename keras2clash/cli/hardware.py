"""Hardware figures before any HDL: the exact model's configurations (options) and chosen
configurations side by side, measured (report)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from keras2clash.cli import params
from keras2clash.cli.common import app, check_reports, err
from keras2clash.design import dsp_budget as multipliers
from keras2clash.design import logic_cells
from keras2clash.errors import K2CError
from keras2clash.fsutil import check_writable_target, write_output_file
from keras2clash.hw import options as opts


@app.command()
def options(
    model: Annotated[
        Path, typer.Argument(help="A model file (.keras, .h5, JSON config) or an emitted project directory.")
    ],
    format: params.SourceFormat = params.DEFAULT_FORMAT,
    sort: Annotated[str, typer.Option("--sort", help="latency | interval | multipliers")] = "interval",
    cycles_too: Annotated[
        bool, typer.Option("--cycles-too", help="Also vary the cycles knob (layer-wise Pareto-pruned).")
    ] = False,
    max_rows: Annotated[
        int, typer.Option("--max", min=1, help="Show at most N rows (JSON/CSV hold every configuration).")
    ] = 40,
    pareto: Annotated[bool, typer.Option("--pareto", help="Show only Pareto-optimal configurations.")] = False,
    time_limit: Annotated[
        float,
        typer.Option(
            "--time-limit",
            min=0.1,
            help=f"Seconds for the fronts' search, where the model cannot evaluate every configuration "
            f"(more than {opts.EXHAUSTIVE:,}, or not within this time).",
        ),
    ] = opts.SEARCH_SECONDS,
    dsp_budget: params.DspBudgetShown = None,
    strategy: params.Strategy = None,
    logic_budget: params.LogicBudget = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write every configuration as JSON.")] = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Write every configuration as CSV.")] = None,
    weights: params.Weights = None,
    force: params.ForceTables = False,
) -> None:
    """Every useful parallelism configuration with its exact latency, II, multipliers, memory, efficiency."""
    # report.hwreport brings the synthesis flow: imported when the command runs (start-up time)
    from keras2clash.report.hwreport import load_source

    check_reports(force, json_out, csv_out)
    if sort not in opts.SORT_KEYS:
        raise K2CError(f"bad --sort {sort!r}: one of {', '.join(opts.SORT_KEYS)}")
    budget = multipliers(dsp_budget)
    with err.status("loading the model") as status:
        source = load_source(model, format, weights, strategy)
        status.update("the exact hardware model")
        result = opts.explore(
            source.plans,
            source.name,
            cycles_too=cycles_too,
            budget=budget,
            progress=status.update,
            seconds=time_limit,
            auto=source.auto,
            logic_budget=logic_cells(logic_budget),
        )
    opts.render(result, Console(), sort=sort, max_rows=max_rows, pareto_only=pareto)
    if json_out is not None:
        write_output_file(json_out, result.to_json() + "\n", force)
    if csv_out is not None:
        write_output_file(csv_out, result.to_csv(), force)


@app.command()
def report(
    source_path: Annotated[
        Path, typer.Argument(metavar="DIR", help="An emitted project directory, or a model file (with --format).")
    ],
    config: Annotated[
        list[str] | None,
        typer.Option(
            "--config",
            help="PE:CYCLES per dense/conv2d layer, e.g. 8:1,8:1,5:1 (repeatable). Default: the project's own.",
        ),
    ] = None,
    clock_mhz: Annotated[float, typer.Option("--clock-mhz", min=0.001, help="Clock for images/s.")] = 100.0,
    yosys: Annotated[
        bool, typer.Option("--yosys/--no-yosys", help="Measure each configuration with Clash + Yosys.")
    ] = True,
    dsp: Annotated[
        str,
        typer.Option(
            "--dsp",
            help="Yosys target: ice40 (synth_ice40 -dsp), xilinx (synth_xilinx, DSP48E1) or none "
            "(generic synth; slow).",
        ),
    ] = "ice40",
    out_dir: Annotated[
        Path | None,
        typer.Option("--out-dir", "-o", help="Write report.md/.json/.png (and the configurations' projects) here."),
    ] = None,
    dsp_budget: params.DspBudgetAdded = None,
    format: params.SourceFormat = params.DEFAULT_FORMAT,
    weights: params.Weights = None,
    force: params.ForceOutDir = False,
) -> None:
    """Chosen configurations side by side: model latency/II/images/s, Yosys multipliers/DSPs/LUTs/FFs/memory, efficiency."""
    # the synthesis flow behind the report: imported when the command runs (start-up time)
    from keras2clash.report import hwreport as reportcmd

    reportcmd.check_dsp(dsp)
    if out_dir is not None:
        check_writable_target(out_dir, force)
    source = reportcmd.load_source(source_path, format, weights)
    n = sum(1 for p in source.plans if p.is_compute)
    configs = [reportcmd.parse_config(c, n) for c in (config or [])]
    if not configs and dsp_budget is None:
        knobs = [p.engine_knobs for p in source.plans if p.is_compute]
        configs = [([k.pe for k in knobs], [k.cycles for k in knobs])]
    with err.status("report") as status:
        result = reportcmd.report_to(
            source,
            configs,
            out_dir,
            force=force,
            clock_mhz=clock_mhz,
            yosys=yosys,
            dsp=dsp,
            budget=multipliers(dsp_budget),
            status=status.update,
        )
    reportcmd.render(result, Console())
    if out_dir is not None:
        err.print(f"[green]✓[/green] wrote {', '.join(str(out_dir / n) for n in reportcmd.OUTPUT_FILES)}")
