"""Verilator lint of the generated Verilog: the first check an FPGA engineer would run.

`-Wno-WIDTH` (only) is passed: Clash indexes its ROM arrays with an address wider or
narrower than the array needs (TOOLCHAIN gotcha 11); that is Clash's idiom, not ours, and
every other warning stays fatal.
"""

from __future__ import annotations

from pathlib import Path

from .errors import K2CError
from .toolchain import _run, hdl_files, require_tool

LINT_WAIVERS = ["-Wno-WIDTH"]


def verilator_lint(project: Path) -> None:
    """Run `verilator --lint-only` over DIR/hdl/verilog; raise with its messages on failure."""
    verilator = require_tool("verilator")
    files = hdl_files(project, "verilog")
    if not files:
        raise K2CError(f"no Verilog in {project / 'hdl' / 'verilog'}; run 'keras2clash hdl --verilog' first")
    top = _top_module(files)
    cmd = [verilator, "--lint-only", *LINT_WAIVERS, f"-I{files[0].parent}", "--top-module", top, *map(str, files)]
    _run(cmd, files[0].parent, "verilator --lint-only")


def _top_module(files: list[Path]) -> str:
    """Clash names the top file after the top entity, and puts it in its own folder."""
    folder = files[0].parent.name  # <Module>.<topEntity name> in Clash 1.6
    stem = folder.split(".")[-1]
    names = {f.stem for f in files}
    return stem if stem in names else files[0].stem
