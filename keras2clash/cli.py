"""The `keras2clash` command line: emit, hdl, simulate, run.

User mistakes (`K2CError`) become one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from . import api
from .errors import K2CError
from .report import to_markdown

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Compile a trained Keras network to Clash, Verilog and VHDL, and verify it bit-exact.",
)
err = Console(stderr=True)

FORMAT_HELP = "Fixed-point format sign,int,frac (the thesis' notation): 1,7,8 = 16 bits = SFixed 8 8."
PAR_HELP = "Processing elements per dense/conv2d layer, e.g. 1,2,5 (each 1..filters; default 1 each)."
CYC_HELP = "Cycles per window per dense/conv2d layer, e.g. 1,9,1 (each 1..window size; default 1 each)."


def _languages(verilog: bool, vhdl: bool, systemverilog: bool, default: tuple[str, ...]) -> list[str]:
    chosen = [name for name, on in (("verilog", verilog), ("vhdl", vhdl), ("systemverilog", systemverilog)) if on]
    return chosen or list(default)


@app.command()
def emit(
    model: Path = typer.Argument(..., help="A .keras, legacy .h5, or JSON config (+ pickled weights)."),
    format: str = typer.Option("1,7,8", "--format", "-f", help=FORMAT_HELP),
    out: Path = typer.Option(Path("build/net"), "--out", "-o", help="Project directory to create."),
    parallelism: Optional[str] = typer.Option(None, "--parallelism", "-p", help=PAR_HELP),
    cycles: Optional[str] = typer.Option(None, "--cycles", "-c", help=CYC_HELP),
    weights: Optional[Path] = typer.Option(None, "--weights", help="Pickled weight list for a JSON config."),
    name: Optional[str] = typer.Option(None, "--name", help="Name of the top entity (default: the Keras model name)."),
    force: bool = typer.Option(False, "--force", help="Replace a non-empty output directory."),
) -> None:
    """Parse MODEL and write a Clash project (network, weights, memory files) to --out."""
    path = api.emit(model, format, out, parallelism, cycles=cycles, weights=weights, name=name, force=force)
    err.print(f"[green]✓[/green] emitted {path}")


@app.command()
def hdl(
    project: Path = typer.Argument(..., help="A directory written by 'keras2clash emit'."),
    verilog: bool = typer.Option(False, "--verilog", help="Generate Verilog."),
    vhdl: bool = typer.Option(False, "--vhdl", help="Generate VHDL."),
    systemverilog: bool = typer.Option(False, "--systemverilog", help="Generate SystemVerilog."),
    lint: bool = typer.Option(True, "--lint/--no-lint", help="verilator --lint-only the Verilog."),
) -> None:
    """Run Clash on PROJECT: HDL lands in PROJECT/hdl/<language>/ (default: Verilog)."""
    api.hdl(project, _languages(verilog, vhdl, systemverilog, ("verilog",)), lint=lint)


@app.command()
def simulate(
    project: Path = typer.Argument(..., help="A directory written by 'keras2clash emit'."),
    data: Path = typer.Option(..., "--data", "-d", help="Test set .npz with arrays x and y."),
    n: Optional[int] = typer.Option(None, "-n", min=1, help="Use only the first N samples."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the comparison as JSON."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Also write the comparison as markdown."),
    gap_max: int = typer.Option(0, "--gap-max", min=0, help="Random idle cycles (0..K) between inputs and random output stalls."),
    seed: int = typer.Option(1, "--seed", help="Seed for --gap-max."),
) -> None:
    """Simulate PROJECT in Clash (GHC-compiled) and compare with the golden model and Keras."""
    comp = api.simulate(project, data, n, gap_max=gap_max, seed=seed)
    _write_reports(comp, json_out, markdown)
    if not comp.all_exact:
        raise K2CError(f"simulation differs from the golden model on {comp.samples - (comp.bit_exact or 0)} sample(s)", exit_code=1)


@app.command()
def run(
    model: Path = typer.Argument(..., help="A .keras, legacy .h5, or JSON config (+ pickled weights)."),
    data: Path = typer.Option(..., "--data", "-d", help="Test set .npz with arrays x and y."),
    format: str = typer.Option("1,7,8", "--format", "-f", help=FORMAT_HELP),
    out: Path = typer.Option(Path("build/net"), "--out", "-o", help="Project directory to create."),
    parallelism: Optional[str] = typer.Option(None, "--parallelism", "-p", help=PAR_HELP),
    cycles: Optional[str] = typer.Option(None, "--cycles", "-c", help=CYC_HELP),
    verilog: bool = typer.Option(False, "--verilog", help="Generate Verilog."),
    vhdl: bool = typer.Option(False, "--vhdl", help="Generate VHDL."),
    systemverilog: bool = typer.Option(False, "--systemverilog", help="Generate SystemVerilog."),
    n: Optional[int] = typer.Option(None, "-n", min=1, help="Use only the first N samples."),
    weights: Optional[Path] = typer.Option(None, "--weights", help="Pickled weight list for a JSON config."),
    force: bool = typer.Option(False, "--force", help="Replace a non-empty output directory."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the comparison as JSON."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Also write the comparison as markdown."),
) -> None:
    """emit -> hdl -> simulate in one go (default: all three HDLs)."""
    langs = _languages(verilog, vhdl, systemverilog, ("verilog", "vhdl", "systemverilog"))
    comp = api.run(model, data, format, out, parallelism, cycles=cycles, languages=langs, limit=n, weights=weights, force=force)
    _write_reports(comp, json_out, markdown)
    if not comp.all_exact:
        raise K2CError(f"simulation differs from the golden model on {comp.samples - (comp.bit_exact or 0)} sample(s)", exit_code=1)


def _write_reports(comp, json_out: Optional[Path], markdown: Optional[Path]) -> None:
    if json_out is not None:
        json_out.write_text(comp.to_json() + "\n")
    if markdown is not None:
        markdown.write_text(to_markdown(comp))


def main() -> None:
    """Console entry point: user errors are one line and a non-zero exit, no traceback."""
    try:
        app(standalone_mode=False)
    except K2CError as exc:
        err.print(f"[bold red]error:[/bold red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except Exception as exc:  # click usage errors in non-standalone mode
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Exit):
            sys.exit(exc.exit_code)
        raise


if __name__ == "__main__":
    main()
