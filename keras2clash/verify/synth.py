"""Synthesizability smoke test: Yosys' generic `synth` on the generated Verilog.

Not an FPGA flow (no vendor cell library, no timing): it proves that the Verilog Clash
generated elaborates, that its ROMs and arithmetic map to gates, and counts what came out.
Yosys runs from the HDL folder so the ROM initialisation files resolve. Reported:

- `$mul` cells after `proc; flatten; opt` (before `synth` merges multipliers and adders into
  `$macc` and then into gates): the design's multipliers, comparable with the plan's figure;
- flip-flops (single-bit `$_*DFF*_` cells after `synth`) and all cells after `synth`.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from keras2clash import procs
from keras2clash.backend.project import load_project
from keras2clash.errors import K2CError
from keras2clash.fsutil import work_dir
from keras2clash.verify.rtlsim import check_weight_files, ensure_hdl

YOSYS_PACKAGE = "yosys"


@dataclass(frozen=True)
class SynthResult:
    top: str
    cells: int  # after synth (generic gates and flip-flops)
    flip_flops: int
    multipliers: int  # $mul before synth
    cell_types: dict[str, int]  # after synth
    seconds: float
    log: Path


def stat_cells(stat_text: str) -> dict[str, int] | None:
    """Cell counts of the last module block of a yosys `stat` report (None: no statistics)."""
    block = stat_text.rsplit("Number of cells:", 1)
    if len(block) != 2:
        return None
    counts: dict[str, int] = {}
    for line in block[1].splitlines()[1:]:
        match = re.match(r"\s+(\S+)\s+(\d+)\s*$", line)
        if not match:
            if line.strip():
                break
            continue
        counts[match.group(1)] = int(match.group(2))
    return counts


def _cells(stat_text: str) -> dict[str, int]:
    counts = stat_cells(stat_text)
    if counts is None:
        raise K2CError("yosys printed no cell statistics")
    return counts


def require_yosys() -> str:
    """The yosys executable, or one clear error naming the Debian package."""
    import shutil

    yosys = shutil.which("yosys")
    if yosys is None:
        raise K2CError(
            f"'yosys' not found on PATH; install the Debian package '{YOSYS_PACKAGE}' "
            f"(apt-get install {YOSYS_PACKAGE}) or run ./scripts/setup.sh"
        )
    return yosys


def run_yosys_stats(
    folder: Path, top: str, synth_command: str, coarse: Path, final: Path, log: Path
) -> tuple[float, str, str]:
    """Yosys on the Verilog in `folder`: read, elaborate, `stat` before synthesis (`$mul`
    cells = multipliers) into `coarse`, `synth_command`, `stat` after it into `final`.
    Returns (seconds, coarse stat text, final stat text); shared by `synth` and `report`."""
    yosys = require_yosys()
    sources = sorted(p.name for p in folder.glob("*.v"))
    script = "; ".join(
        [
            "read_verilog " + " ".join(sources),
            f"hierarchy -check -top {top}",
            "proc",
            "flatten",
            "opt",
            f"tee -q -o {coarse} stat",
            synth_command,
            f"tee -q -o {final} stat",
        ]
    )
    t0 = time.monotonic()
    proc = procs.run([yosys, "-q", "-l", str(log), "-p", script], folder)
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise K2CError(f"yosys failed (exit {proc.returncode}):\n{tail}", exit_code=1)
    return seconds, coarse.read_text(), final.read_text()


def synth(project_dir: str | Path, status=None) -> SynthResult:
    """Run Yosys on DIR's Verilog (generating it first if missing or stale)."""
    require_yosys()
    project = load_project(project_dir)
    folder = ensure_hdl(project, "verilog", status)
    check_weight_files(project, folder, "verilog")

    build = work_dir(project.root / ".build" / "synth")
    log = build / "yosys.log"
    if status is not None:
        status(f"yosys synth ({project.name})")
    seconds, coarse_text, final_text = run_yosys_stats(
        folder, project.top, f"synth -top {project.top}", build / "coarse.txt", build / "synth.txt", log
    )
    coarse, cells = _cells(coarse_text), _cells(final_text)
    return SynthResult(
        top=project.top,
        cells=sum(cells.values()),
        flip_flops=sum(n for name, n in cells.items() if "DFF" in name.upper()),
        multipliers=coarse.get("$mul", 0),
        cell_types=cells,
        seconds=seconds,
        log=log,
    )


def render(result: SynthResult, console) -> None:
    from rich.table import Table

    table = Table(title=f"{result.top}: yosys synth (generic gates), {result.seconds:.0f} s")
    table.add_column("figure")
    table.add_column("count", justify="right")
    table.add_row("cells after synth", f"{result.cells:,}")
    table.add_row("flip-flops", f"{result.flip_flops:,}")
    table.add_row("$mul before synth (multipliers)", f"{result.multipliers:,}")
    for name, n in sorted(result.cell_types.items(), key=lambda kv: -kv[1])[:8]:
        table.add_row(f"  {name}", f"{n:,}")
    console.print(table)
    console.print(f"yosys log: {result.log}")
