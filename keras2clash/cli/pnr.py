"""Place and route on an FPGA (keras2clash.fpga): yosys, then nextpnr."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from keras2clash.cli import params
from keras2clash.cli.common import app, check_reports, err
from keras2clash.fpga.devices import ECP5_MAX_FANOUT, get_device
from keras2clash.fsutil import write_output_file

DspRegisters = Annotated[
    bool,
    typer.Option(
        "--dsp-registers/--no-dsp-registers",
        help="ECP5: move the multipliers' operand and product flip-flops into the MULT18X18D blocks.",
    ),
]
BramRegisters = Annotated[
    bool,
    typer.Option(
        "--bram-registers/--no-bram-registers",
        help="ECP5: move the flip-flops after each block-RAM read into the DP16KD's output register (REGMODE=OUTREG).",
    ),
]
CheckRegisters = Annotated[
    int,
    typer.Option(
        "--check-dsp-registers",
        min=0,
        metavar="CYCLES",
        help="ECP5: first simulate the netlist before and after those moves (DSP and block-RAM registers) side "
        "by side for CYCLES random cycles (Icarus Verilog) and stop if any output differs.",
    ),
]


@app.command()
def pnr(
    project: params.Project,
    fpga: Annotated[str, typer.Option("--fpga", help="ecp5-85k | ecp5-45k | ecp5-25k | ice40-up5k | ice40-hx8k")],
    freq: Annotated[float, typer.Option("--freq", help="Target clock in MHz (nextpnr --freq).")] = 100.0,
    seed: Annotated[int, typer.Option("--seed", help="Placer seed (nextpnr --seed).")] = 1,
    placer: Annotated[
        str | None,
        typer.Option(
            "--placer",
            help="nextpnr's placer: ecp5-* static (the default: spreads the design, so the routers "
            "converge), heap or sa; ice40-* heap (the default) or sa.",
        ),
    ] = None,
    router: Annotated[
        str,
        typer.Option(
            "--router",
            help="nextpnr's router: router1 (timing-driven, its default) or router2 (negotiated "
            "congestion: converges where router1 stalls on a congested design).",
        ),
    ] = "router1",
    no_route: Annotated[
        bool, typer.Option("--no-route", help="Stop after placement: a post-placement timing estimate (much quicker).")
    ] = False,
    json_out: params.ReportJson = None,
    markdown: params.ReportMarkdown = None,
    force: params.ForcePnr = False,
    dsp_registers: DspRegisters = True,
    bram_registers: BramRegisters = True,
    check_dsp_registers: CheckRegisters = 0,
    max_fanout: Annotated[
        int | None,
        typer.Option(
            "--max-fanout",
            min=0,
            metavar="N",
            help="Copy every flip-flop and LUT driving more than N pins so each copy drives at most N, readers "
            "grouped in name order (fpga/fanout.py). Default: 64 on ECP5, 0 (off) on iCE40.",
        ),
    ] = None,
    fanout_placement: Annotated[
        bool,
        typer.Option(
            "--fanout-placement",
            help="With --max-fanout: group each copy's readers by a first placement (one more nextpnr run) "
            "instead of by name.",
        ),
    ] = False,
    block_roms: Annotated[
        bool,
        typer.Option(
            "--block-roms/--no-block-roms",
            help="ECP5: put every registered ROM (the weights) in block RAM, unless they would not fit; "
            "--no-block-roms leaves the choice to yosys (LUTs for shallow ROMs).",
        ),
    ] = True,
    ff_queues: Annotated[
        int,
        typer.Option(
            "--ff-queues",
            min=0,
            metavar="WORDS",
            help="ECP5: build every queue (a memory with a write port) of at most WORDS words from flip-flops "
            "instead of LUT RAM; 0: all in LUT RAM.",
        ),
    ] = 0,
    ports: Annotated[
        str,
        typer.Option(
            "--ports",
            help="Where the top's ports go: pins (the package's IO pins), scan (a scan harness: every port a "
            "register of a shift chain behind four pins, the design measured as a block inside a larger "
            "one), auto (pins when there are enough).",
        ),
    ] = "auto",
) -> None:
    """Synthesise (yosys) and place and route (nextpnr) PROJECT on an FPGA: utilisation, Fmax, critical path, latency in ns."""
    # the synthesis and place-and-route flow: imported when the command runs (start-up time)
    from keras2clash.fpga import flow
    from keras2clash.fpga.report import render, to_markdown

    get_device(fpga)  # an unknown name is refused before anything else
    check_reports(force, json_out, markdown)
    with _StepProgress() as steps:
        report = flow.pnr(
            project,
            fpga,
            freq_mhz=freq,
            seed=seed,
            router=router,
            placer=placer,
            route=not no_route,
            force=force,
            dsp_registers=dsp_registers,
            bram_registers=bram_registers,
            check_cycles=check_dsp_registers,
            block_roms=block_roms,
            max_fanout=max_fanout,
            fanout_placement=fanout_placement,
            ff_queues=ff_queues,
            ports=ports,
            progress=steps.update,
        )
    render(report, Console())
    if json_out is not None:
        write_output_file(json_out, report.to_json() + "\n", force)
    if markdown is not None:
        write_output_file(markdown, to_markdown(report), force)
    err.print(f"[green]✓[/green] logs and report in {escape(report.logs)}")


@app.command()
def netlist(
    design: Annotated[
        Path,
        typer.Argument(
            help="yosys' JSON netlist of an ECP5 design (`synth_ecp5 ...; write_json DESIGN`).", show_default=False
        ),
    ],
    top: Annotated[str, typer.Option("--top", help="The netlist's top module (yours, when the core sits inside it).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The rewritten netlist, for nextpnr-ecp5 --json.")],
    dsp_registers: DspRegisters = True,
    bram_registers: BramRegisters = True,
    check_dsp_registers: CheckRegisters = 0,
    max_fanout: Annotated[
        int,
        typer.Option(
            "--max-fanout",
            min=0,
            metavar="N",
            help="Copy every flip-flop and LUT driving more than N pins so each copy drives at most N, readers "
            "grouped in name order; 0: off.",
        ),
    ] = ECP5_MAX_FANOUT,
    force: params.ForceOutFile = False,
) -> None:
    """Rewrite a yosys ECP5 netlist as `pnr` does before nextpnr: DSP and block-RAM registers inside the blocks, fan-out copies."""
    from keras2clash.fpga import flow

    done = flow.rewrite_netlist(
        design,
        out,
        top,
        dsp_registers=dsp_registers,
        bram_registers=bram_registers,
        max_fanout=max_fanout,
        check_cycles=check_dsp_registers,
        force=force,
    )
    for line in done.lines():
        err.print(escape(line))
    err.print(f"[green]✓[/green] {escape(str(out))}")


class _StepProgress:
    """One line per step of `pnr` with a spinner and the elapsed time; a finished step keeps
    its line with a tick (or 'skipped')."""

    def __init__(self) -> None:
        self.bar = Progress(
            SpinnerColumn(finished_text="[green]✓[/green]"),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=err,
        )
        self.tasks: dict[str, int] = {}

    def __enter__(self) -> _StepProgress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def update(self, step: str, detail: str) -> None:
        if step not in self.tasks:
            self.tasks[step] = self.bar.add_task(step, total=1)
        task = self.tasks[step]
        if detail == "done":
            self.bar.update(task, completed=1)
        elif detail == "skipped":
            self.bar.update(task, completed=1, description=f"{step} (skipped)")
        else:
            self.bar.update(task, description=f"{step}: {escape(detail)}")
