"""The Typer app every command module registers on, the console for messages, and what
several commands do alike: report files checked before any work and written after it, the
HDLs chosen, a Clash simulation that must equal the golden model."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from keras2clash.errors import K2CError
from keras2clash.fsutil import check_output_file, write_output_file
from keras2clash.report.comparison import Comparison, to_markdown

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Compile a trained Keras network to Clash, Verilog and VHDL, and verify it bit-exact.",
)
err = Console(stderr=True)
"""Progress and confirmations (stderr); tables go to stdout."""


def check_reports(force: bool, *paths: Path | None) -> None:
    """Report files are checked before any work (fsutil: the output policy)."""
    for path in paths:
        check_output_file(path, force)


def write_reports(
    comp: Comparison | list[Comparison], json_out: Path | None, markdown: Path | None, force: bool = False
) -> None:
    """The comparison as JSON and Markdown; a design of several outputs has one comparison per
    output: a JSON list, the Markdown tables one after another."""
    comps = comp if isinstance(comp, list) else [comp]
    if json_out is not None:
        text = comps[0].to_json() if len(comps) == 1 else "[\n" + ",\n".join(c.to_json() for c in comps) + "\n]"
        write_output_file(json_out, text + "\n", force)
    if markdown is not None:
        write_output_file(markdown, "\n".join(to_markdown(c) for c in comps), force)


def require_exact(comp: Comparison | list[Comparison]) -> None:
    """Exit code 1 when the Clash simulation differs from the golden model (on any output)."""
    for one in comp if isinstance(comp, list) else [comp]:
        if not one.all_exact:
            raise K2CError(
                f"simulation of {one.model} differs from the golden model on "
                f"{one.samples - (one.bit_exact or 0)} sample(s)",
                exit_code=1,
            )


def languages(verilog: bool, vhdl: bool, systemverilog: bool, default: tuple[str, ...]) -> list[str]:
    """The HDLs the flags choose, or `default` when none is given."""
    chosen = [name for name, on in (("verilog", verilog), ("vhdl", vhdl), ("systemverilog", systemverilog)) if on]
    return chosen or list(default)
