"""Lint of the generated Verilog: the first check an FPGA engineer would run.

Verilator `--lint-only` with two waivers, every other warning fatal:
- `-Wno-WIDTH`: Clash indexes its ROM arrays with an address wider or narrower than the
  array needs (TOOLCHAIN gotcha 11); that is Clash's idiom, not ours.
- `-Wno-UNOPTFLAT`: Clash packs a stream stage's (data, ready) pair into one vector, and
  a fork/join (K2C.Branch) makes one branch's valid depend on another's ready, and a
  window generator's valid follows its input's (K2C.Window: the window is offered in its
  last pixel's cycle), so Verilator, which tracks whole vectors, sees a circle that no
  single bit follows (a Pad before a Window is enough). Since that waiver would also hide
  a real loop, every design is checked for combinational loops bit by bit with yosys
  (`check -assert` after `proc; flatten`).
"""

from __future__ import annotations

from pathlib import Path

from keras2clash.errors import K2CError
from keras2clash.verify.toolchain import _run, hdl_files, require_tool

LINT_WAIVERS = ["-Wno-WIDTH", "-Wno-UNOPTFLAT"]


def verilator_lint(project: Path, top: str) -> None:
    """Run `verilator --lint-only` on DIR/hdl/verilog with `top` as the top module; raise
    with Verilator's messages on any warning other than the waived ones, then the
    bit-level loop check (`loop_check`)."""
    verilator = require_tool("verilator")
    files = hdl_files(project, "verilog")
    if not files:
        raise K2CError(f"no Verilog in {project / 'hdl' / 'verilog'}; run 'keras2clash hdl --verilog' first")
    cmd = [verilator, "--lint-only", *LINT_WAIVERS, f"-I{files[0].parent}", "--top-module", top, *map(str, files)]
    _run(cmd, files[0].parent, "verilator --lint-only")
    loop_check(files, top)


def loop_check(files: list[Path], top: str) -> None:
    """Fail on any combinational loop, bit by bit (yosys; about 5 s on the ResNet example)."""
    yosys = require_tool("yosys")
    script = f"read_verilog -sv {' '.join(f.name for f in files)}; hierarchy -top {top}; proc; flatten; check -assert"
    _run([yosys, "-q", "-p", script], files[0].parent, "yosys combinational-loop check")
