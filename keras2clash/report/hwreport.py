"""`keras2clash report`: chosen configurations side by side, like the thesis' Tables 1 and 2.

For each configuration of an emitted project (or of a model file): latency, initiation
interval (II) and images per second at a clock, from the exact model (`hwmodel`);
multipliers from the model and, measured by Yosys on the generated Verilog, `$mul` cells
before techmapping, DSP blocks, LUTs, flip-flops and memory bits; and the multiplier
efficiency `MACs / (multipliers x II)`. Written as markdown, JSON and a PNG chart of the
space-time trade-off (II and latency against multipliers over every useful configuration,
the Pareto front highlighted, the reported configurations labelled).

Yosys per configuration: `read_verilog; hierarchy; proc; flatten; opt; stat` (the coarse
netlist: `$mul` cells and the memories' bits: ROMs and line buffers), then `synth_ice40
-dsp` (default: SB_MAC16 DSP blocks, LUT4s; seconds for a small network, minutes for the
thesis CNN), `synth_xilinx -family xc7` (DSP48E1) or plain `synth` (generic gates,
multipliers as gates: slow), then `stat`. Clash compiles each configuration to Verilog
first (tens of seconds for a CNN).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from keras2clash.backend.emitter import hdl_name, write_project
from keras2clash.backend.project import MANIFEST, load_project, write_project_data
from keras2clash.errors import K2CError
from keras2clash.fsutil import atomic_directory
from keras2clash.hw.allocate import balanced, config_label
from keras2clash.hw.hwmodel import figures
from keras2clash.hw.options import explore
from keras2clash.hw.plan import LayerPlan
from keras2clash.hw.planner import with_knobs  # noqa: F401  (with_knobs re-exported)
from keras2clash.hw.resources import HwFigures
from keras2clash.network import load_network
from keras2clash.verify.rtlsim import ensure_hdl
from keras2clash.verify.synth import run_yosys_stats, stat_cells

DSP_TARGETS = {
    "ice40": ("synth_ice40 -dsp", "SB_MAC16"),
    "xilinx": ("synth_xilinx -family xc7", "DSP48"),
    "none": ("synth", None),
}


def check_dsp(dsp: str) -> str:
    """The --dsp target, checked before any work (Clash runs before Yosys needs it)."""
    if dsp not in DSP_TARGETS:
        raise K2CError(f"bad --dsp {dsp!r}: one of {', '.join(DSP_TARGETS)}")
    return dsp


def parse_config(text: str, n_layers: int) -> tuple[list[int], list[int]]:
    """`8:1,8:1,5:1` (or `8,8,5`: cycles 1) -> (pes, cycles)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) != n_layers:
        raise K2CError(
            f"bad --config {text!r}: {len(parts)} value(s), the model has {n_layers} dense/conv2d layer(s); "
            "give PE:CYCLES per layer, e.g. 8:1,8:1,5:1"
        )
    pes, cycles = [], []
    for part in parts:
        try:
            pe, _, b = part.partition(":")
            pes.append(int(pe))
            cycles.append(int(b) if b else 1)
        except ValueError:
            raise K2CError(f"bad --config {text!r}: expected PE:CYCLES per layer, e.g. 8:1,8:1,5:1") from None
    return pes, cycles


@dataclass
class YosysFigures:
    target: str
    seconds: float
    mul_cells: int  # $mul before techmap
    memory_bits: int  # memories in the coarse netlist (ROMs, line buffers)
    dsp_blocks: int | None
    luts: int
    flip_flops: int
    cells: int
    cell_types: dict[str, int] = field(default_factory=dict)


@dataclass
class ReportRow:
    label: str
    parallelism: list[int]
    cycles: list[int]
    latency: int
    ii: float
    images_per_second: float
    multipliers: int
    macs: int
    efficiency: float
    memory_bits: int
    rom_bits: int
    line_buffer_bits: int
    register_bits: int
    fifo_bits: int = 0  # LUT RAM FIFOs: engine output queues, branch FIFOs
    block_fifo_bits: int = 0  # block RAM FIFOs: branch FIFOs that hold an image
    balanced: bool = False
    project: str | None = None
    yosys: YosysFigures | None = None
    clash_seconds: float | None = None


@dataclass
class Report:
    model: str
    clock_mhz: float
    dsp: str
    rows: list[ReportRow]
    seconds: float
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def _stat_block(text: str) -> tuple[dict[str, int], dict[str, int]]:
    """(summary figures, cell counts) of the last module in a yosys `stat` report."""
    tail = text.rsplit("===", 1)[-1]
    summary = {
        m.group(1).strip(): int(m.group(2)) for m in re.finditer(r"^\s+Number of ([a-z ]+):\s+(\d+)\s*$", tail, re.M)
    }
    return summary, stat_cells(tail) or {}


def run_yosys(folder: Path, top: str, dsp: str = "ice40", log_dir: Path | None = None) -> YosysFigures:
    """Yosys on the Verilog in `folder` (module docstring)."""
    check_dsp(dsp)
    command, dsp_cell = DSP_TARGETS[dsp]
    log_dir = log_dir or folder
    log_dir.mkdir(parents=True, exist_ok=True)
    coarse, final, log = log_dir / "yosys_coarse.txt", log_dir / f"yosys_{dsp}.txt", log_dir / f"yosys_{dsp}.log"
    seconds, coarse_text, final_text = run_yosys_stats(folder, top, f"{command} -top {top}", coarse, final, log)
    summary, coarse_cells = _stat_block(coarse_text)
    _, cells = _stat_block(final_text)
    dsps = None if dsp_cell is None else sum(n for name, n in cells.items() if name.startswith(dsp_cell))
    return YosysFigures(
        target=command,
        seconds=seconds,
        mul_cells=coarse_cells.get("$mul", 0),
        memory_bits=summary.get("memory bits", 0),
        dsp_blocks=dsps,
        luts=sum(n for name, n in cells.items() if "LUT" in name.upper()),
        flip_flops=sum(n for name, n in cells.items() if re.search(r"DFF|^FD[CPRS]E?$", name.upper())),
        cells=sum(cells.values()),
        cell_types=cells,
    )


@dataclass
class Source:
    """What a report starts from: a network (plans + quantized parameters) and its name."""

    name: str
    top: str
    plans: list[LayerPlan]
    params: dict
    project: Any | None = None  # project.Project when the source is an emitted project
    extra: dict[str, Any] = field(default_factory=dict)
    auto: list[bool] = field(default_factory=list)  # compute layers left to --strategy auto (network.Network.auto)


def load_source(path: Path, fmt: str = "1,7,8", weights: Path | None = None, strategy: str | None = None) -> Source:
    """An emitted project directory (its own strategies), or a model file at a uniform format
    and `strategy` (design.DesignOptions.strategy)."""
    path = Path(path)
    if (path / MANIFEST).is_file():
        if strategy is not None:
            raise K2CError(f"{path} is a project, built at its own strategies: give --strategy with a model file")
        project = load_project(path)
        manifest = json.loads((project.root / MANIFEST).read_text())
        extra = {k: manifest[k] for k in ("precision",) if k in manifest}
        return Source(project.name, project.top, project.plans, project.params, project, extra)

    network = load_network(path, fmt, weights=weights, strategy=strategy, choose=False)
    name = hdl_name(network.name)
    return Source(name, name, network.plans, network.params, auto=network.auto)


def _same_project(root: Path, plans: Sequence[LayerPlan]) -> bool:
    """`root` holds an intact emitted project with the knobs of `plans`."""
    if not (root / "manifest.json").is_file():
        return False
    try:
        return _knobs(load_project(root).plans) == _knobs(plans)
    except K2CError:
        return False  # damaged or edited: emit it again


def config_project(source: Source, plans: Sequence[LayerPlan], out: Path, reuse: Path | None = None) -> Path:
    """An emitted project for `plans` (the source's own directory when the knobs match).

    `reuse`: where an earlier report put this configuration's project; copied (with its
    HDL) instead of emitted and compiled again when it is intact and its knobs match."""
    import shutil

    if source.project is not None and _knobs(source.project.plans) == _knobs(plans):
        return source.project.root
    if out.exists() and _same_project(out, plans):
        return out  # reuse: the same configuration emitted by an earlier report
    if reuse is not None and not out.exists() and _same_project(reuse, plans):
        shutil.copytree(reuse, out, symlinks=True)
        return out
    with atomic_directory(out, force=True) as tmp:
        write_project(tmp, source.top, plans, source.params)
        write_project_data(tmp, source.name, source.top, list(plans), source.params, extra=source.extra)
    return out


def _knobs(plans: Sequence[LayerPlan]) -> list[tuple[int, int, int]]:
    return [(k.pe, k.cycles, k.pipeline) for k in (p.engine_knobs for p in plans if p.is_compute)]


def build_report(
    source: Source,
    configs: Sequence[tuple[list[int], list[int]]],
    *,
    clock_mhz: float = 100.0,
    yosys: bool = True,
    dsp: str = "ice40",
    out_dir: Path | None = None,
    budget: int | None = None,
    status: Callable[[str], object] | None = None,
    reuse_dir: Path | None = None,
) -> Report:
    check_dsp(dsp)
    t0 = time.perf_counter()
    notes = []
    todo = [(list(p), list(c), False) for p, c in configs]
    if budget is not None:
        alloc = balanced(source.plans, budget, progress=status)
        notes.append(alloc.summary())
        todo = [(p, c, b) for p, c, b in todo if (p, c) != (alloc.parallelism, alloc.cycles)]
        todo.append((alloc.parallelism, alloc.cycles, True))
    if yosys and out_dir is None and source.project is None:
        raise K2CError("report with --yosys on a model file needs --out-dir (the configurations' projects go there)")
    rows = []
    for pes, cyc, is_balanced in todo:
        plans = with_knobs(source.plans, pes, cyc)
        fig: HwFigures = figures(plans)
        label = config_label(pes, cyc)
        row = ReportRow(
            label=label,
            parallelism=pes,
            cycles=cyc,
            latency=fig.latency,
            ii=fig.ii,
            images_per_second=fig.images_per_second(clock_mhz),
            multipliers=fig.multipliers,
            macs=fig.macs,
            efficiency=fig.efficiency,
            memory_bits=fig.memory_bits,
            rom_bits=fig.rom_bits,
            line_buffer_bits=fig.line_buffer_bits,
            register_bits=fig.register_bits,
            fifo_bits=fig.fifo_bits,
            block_fifo_bits=fig.block_fifo_bits,
            balanced=is_balanced,
        )
        if yosys:
            base = Path(out_dir) if out_dir is not None else source.project.root / ".build" / "report"
            folder_name = label.replace(",", "_").replace(":", "x")
            reuse = Path(reuse_dir) / "configs" / folder_name if reuse_dir is not None else None
            root = config_project(source, plans, base / "configs" / folder_name, reuse)
            project = load_project(root)
            if status is not None:
                status(f"clash --verilog ({label})")
            t1 = time.monotonic()
            folder = ensure_hdl(project, "verilog")
            row.clash_seconds = time.monotonic() - t1
            if status is not None:
                status(f"yosys {DSP_TARGETS[dsp][0]} ({label})")
            row.yosys = run_yosys(folder, project.top, dsp, log_dir=root / ".build" / "report")
            row.project = str(root)
        rows.append(row)
    return Report(source.name, clock_mhz, dsp, rows, time.perf_counter() - t0, notes)


HEADER = [
    "pe:cycles",
    "latency",
    "II",
    "images/s",
    "multipliers (model)",
    "$mul (yosys)",
    "DSP",
    "LUTs",
    "flip-flops",
    "memory bits (model)",
    "memory bits (yosys)",
    "MAC eff.",
]


YOSYS_COLUMNS = {"$mul (yosys)", "DSP", "LUTs", "flip-flops", "memory bits (yosys)"}


def header(report: Report) -> list[str]:
    """HEADER without the Yosys columns when nothing was synthesized."""
    if any(r.yosys for r in report.rows):
        return HEADER
    return [h for h in HEADER if h not in YOSYS_COLUMNS]


def table_rows(report: Report) -> list[list[str]]:
    keep = [i for i, h in enumerate(HEADER) if h in header(report)]
    return [[row[i] for i in keep] for row in _full_rows(report)]


def _full_rows(report: Report) -> list[list[str]]:
    out = []
    for r in report.rows:
        y = r.yosys
        dash = "-"
        out.append(
            [
                r.label + (" (budget)" if r.balanced else ""),
                f"{r.latency:,}",
                f"{r.ii:,.0f}" if float(r.ii).is_integer() else f"{r.ii:,.2f}",
                f"{r.images_per_second:,.0f}",
                f"{r.multipliers:,}",
                dash if y is None else f"{y.mul_cells:,}",
                dash if y is None or y.dsp_blocks is None else f"{y.dsp_blocks:,}",
                dash if y is None else f"{y.luts:,}",
                dash if y is None else f"{y.flip_flops:,}",
                f"{r.rom_bits + r.line_buffer_bits + r.fifo_bits + r.block_fifo_bits:,} (+{r.register_bits:,} reg)",
                dash if y is None else f"{y.memory_bits:,}",
                f"{100 * r.efficiency:.1f}%",
            ]
        )
    return out


def caption(report: Report) -> str:
    target = DSP_TARGETS[report.dsp][0]
    ys = [r.yosys.seconds for r in report.rows if r.yosys]
    extra = f"; yosys `{target}` {sum(ys):.0f} s" if ys else ""
    return (
        f"{report.model}: latency (first input beat accepted -> output) and II (steady state, back to back) "
        f"in cycles from the exact model; images/s at {report.clock_mhz:g} MHz{extra}"
    )


def to_markdown(report: Report) -> str:
    cols = header(report)
    lines = [caption(report), "", "| " + " | ".join(cols) + " |", "|---|" + "---:|" * (len(cols) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(report)]
    lines += [
        "",
        "memory bits (model): ROM, line buffers and FIFOs (what Yosys infers as memories), plus data registers. "
        "MAC eff. = MACs / (multipliers x II).",
    ]
    lines += [f"- {n}" for n in report.notes]
    return "\n".join(lines) + "\n"


def render(report: Report, console: Any = None) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    # one column per configuration (the figures as rows), so a few configurations fit 80 columns
    table = Table(title=caption(report), box=box.SIMPLE_HEAD)
    table.add_column("figure", no_wrap=True)
    for r in report.rows:
        table.add_column(
            r.label + (" *" if r.balanced else ""), justify="right", style="bold green" if r.balanced else None
        )
    cells = table_rows(report)
    for i, name in enumerate(header(report)[1:], start=1):
        table.add_row(name, *(row[i] for row in cells))
    table.caption = "*: the --dsp-budget choice" if any(r.balanced for r in report.rows) else None
    console.print(table)
    for note in report.notes:
        console.print(f"* {note}")


def plot(report: Report, plans: Sequence[LayerPlan], path: Path, cycles_too: bool = False) -> Path:
    """II and latency against multipliers: every useful configuration (grey), the Pareto
    fronts (lines), the reported configurations (labelled)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cycles_too = cycles_too or any(b > 1 for r in report.rows for b in r.cycles)
    space = explore(plans, report.model, cycles_too=cycles_too)
    from matplotlib.ticker import ScalarFormatter

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, what, flag in ((axes[0], "ii", "pareto_ii"), (axes[1], "latency", "pareto_latency")):
        xs = [o.figures.multipliers for o in space.options]
        ys = [getattr(o.figures, what) for o in space.options]
        ax.scatter(
            xs, ys, s=8, color="#bbbbbb", label=f"{len(xs)} configurations ({'pe and cycles' if cycles_too else 'pe'})"
        )
        front = sorted((o.figures.multipliers, getattr(o.figures, what)) for o in space.options if getattr(o, flag))
        ax.step(
            [f[0] for f in front],
            [f[1] for f in front],
            where="post",
            color="#2c5aa0",
            lw=1.5,
            marker="o",
            ms=3,
            label="Pareto front",
        )
        for r in report.rows:
            y = r.ii if what == "ii" else r.latency
            ax.scatter([r.multipliers], [y], s=60, color="#d35400" if r.balanced else "#c0392b", zorder=3)
            ax.annotate(
                r.label + (" (budget)" if r.balanced else ""),
                (r.multipliers, y),
                fontsize=7,
                xytext=(4, 4),
                textcoords="offset points",
            )
        for axis, values in ((ax.xaxis, xs), (ax.yaxis, ys)):
            if max(values) > 20 * max(min(values), 1):
                (ax.set_xscale if axis is ax.xaxis else ax.set_yscale)("log")
                axis.set_major_formatter(ScalarFormatter())
        ax.set_xlabel("multipliers")
        ax.set_ylabel("initiation interval (cycles)" if what == "ii" else "latency (cycles)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.suptitle(f"{report.model}: space-time trade-off (exact model)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


OUTPUT_FILES = ("report.md", "report.json", "report.png")


def report_to(
    source: Source,
    configs: Sequence[tuple[list[int], list[int]]],
    out_dir: Path | None,
    *,
    force: bool = False,
    **options: Any,
) -> Report:
    """`build_report`, and with `out_dir` its files and the configurations' projects written
    as one whole folder (keras2clash.fsutil: refused if non-empty unless `force`; projects of
    an earlier report there are reused when their knobs match)."""
    if out_dir is None:
        return build_report(source, configs, **options)
    import os

    final = Path(os.path.abspath(out_dir))
    real = Path(os.path.realpath(final))
    if source.project is not None and (real == source.project.root or real in source.project.root.parents):
        raise K2CError(f"--out-dir {out_dir} holds the project {source.project.root}; give another folder")
    with atomic_directory(final, force=force) as tmp:
        report = build_report(source, configs, out_dir=tmp, reuse_dir=final if final.is_dir() else None, **options)
        for row in report.rows:
            if row.project is not None and Path(row.project).is_relative_to(tmp):
                row.project = str(final / Path(row.project).relative_to(tmp))
        write_outputs(report, source.plans, tmp)
    return report


def write_outputs(report: Report, plans: Sequence[LayerPlan], out_dir: Path) -> dict[str, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out_dir / "report.md", "json": out_dir / "report.json", "png": out_dir / "report.png"}
    paths["markdown"].write_text(to_markdown(report))
    paths["json"].write_text(report.to_json() + "\n")
    plot(report, plans, paths["png"])
    return paths
