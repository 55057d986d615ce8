"""Verilator lint of the generated Verilog: the first check an FPGA engineer would run.

`-Wno-WIDTH` (only) is passed: Clash indexes its ROM arrays with an address wider or
narrower than the array needs (TOOLCHAIN gotcha 11); that is Clash's idiom, not ours, and
every other warning stays fatal.
"""

from __future__ import annotations

from pathlib import Path

from keras2clash.errors import K2CError
from keras2clash.verify.toolchain import _run, hdl_files, require_tool

LINT_WAIVERS = ["-Wno-WIDTH"]


def verilator_lint(project: Path, top: str) -> None:
    """Run `verilator --lint-only` on DIR/hdl/verilog with `top` as the top module; raise
    with Verilator's messages on any warning other than the waived ones."""
    verilator = require_tool("verilator")
    files = hdl_files(project, "verilog")
    if not files:
        raise K2CError(f"no Verilog in {project / 'hdl' / 'verilog'}; run 'keras2clash hdl --verilog' first")
    cmd = [verilator, "--lint-only", *LINT_WAIVERS, f"-I{files[0].parent}", "--top-module", top, *map(str, files)]
    _run(cmd, files[0].parent, "verilator --lint-only")

