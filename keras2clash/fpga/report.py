"""The result of a place and route: utilisation, Fmax, critical path, latency in nanoseconds.

Read from nextpnr's `--report` JSON (keys `utilization`, `fmax`, `critical_paths`):

- utilisation: LUT4, flip-flops, multipliers (MULT18X18D / SB_MAC16), block RAM (DP16KD /
  SB_RAM40_4K), used against the device's available count; on iCE40 the LUT4 row is nextpnr's
  logic cells (one LUT4 + one flip-flop each) and flip-flops are counted in the synthesised
  netlist (nextpnr-ice40 does not report them apart);
- Fmax: the lowest achieved frequency over the design's clocks, against the `--freq` target;
- critical path: the register-to-register path of that clock (the one that sets Fmax): from,
  to, delay, and its logic levels = the number of cells the path goes through (nextpnr's
  "logic" steps; the launching and capturing flip-flops are not counted);
- latency and throughput from the exact hardware model: latency cycles / Fmax, images/s =
  Fmax / initiation interval.

Paths from or to the design's ports (unconstrained IO paths) are listed apart: an
out-of-context block's ports are registered (or not) by whoever instantiates it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from keras2clash.errors import K2CError
from keras2clash.fpga.devices import Device

ASYNC = "<async>"


@dataclass(frozen=True)
class Utilisation:
    resource: str  # "LUT4", "flip-flops", "multipliers", "block RAM"
    cell: str  # the device's cell name
    used: int
    available: int

    @property
    def percent(self) -> float:
        return 100.0 * self.used / self.available if self.available else 0.0


@dataclass(frozen=True)
class TimingPath:
    from_clock: str
    to_clock: str
    start: str  # launching cell (port)
    end: str  # capturing cell (port)
    delay_ns: float
    logic_ns: float
    routing_ns: float
    logic_levels: int  # cells the path goes through


@dataclass(frozen=True)
class ClockFmax:
    clock: str
    achieved_mhz: float
    target_mhz: float


@dataclass
class PnrReport:
    project: str
    top: str
    device: str
    part: str
    package: str
    routed: bool  # False: --no-route (post-placement estimate)
    out_of_context: bool
    port_bits: int
    io_pins: int
    target_mhz: float
    seed: int
    utilisation: list[Utilisation]
    clocks: list[ClockFmax]
    critical_path: TimingPath | None
    io_paths: list[TimingPath]
    latency_cycles: int
    interval_cycles: float
    seconds: dict[str, float] = field(default_factory=dict)  # step -> wall time
    harness_flip_flops: int = 0  # a scan harness's (fpga/harness.py), included in the utilisation
    dsp_registers: str = ""  # what fpga/dspregs.py moved into the DSP blocks ("" = nothing / not ECP5)
    bram_registers: str = ""  # what fpga/bramregs.py moved into the block RAMs ("" = nothing / not ECP5)
    weight_roms: str = ""  # where the registered ROMs went (ECP5: block RAM, unless they would not fit)
    queues: str = ""  # which write-port memories became flip-flops (pnr --ff-queues; "" = none)
    router: str = "router1"  # nextpnr --router
    placer: str = ""  # nextpnr --placer
    fanout: str = ""  # what fpga/fanout.py copied ("" = not asked)
    tools: dict[str, str] = field(default_factory=dict)  # role -> executable
    logs: str = ""  # folder with synth.log, pnr.log, report.json, design.json

    @property
    def fmax_mhz(self) -> float | None:
        return min((c.achieved_mhz for c in self.clocks), default=None)

    @property
    def met(self) -> bool | None:
        return None if self.fmax_mhz is None else self.fmax_mhz >= self.target_mhz

    @property
    def latency_ns(self) -> float | None:
        return None if not self.fmax_mhz else self.latency_cycles * 1000.0 / self.fmax_mhz

    @property
    def images_per_second(self) -> float | None:
        return None if not self.fmax_mhz else self.fmax_mhz * 1e6 / self.interval_cycles

    def utilisation_of(self, resource: str) -> Utilisation:
        for u in self.utilisation:
            if u.resource == resource:
                return u
        raise KeyError(resource)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["utilisation"] = [{**asdict(u), "percent": round(u.percent, 2)} for u in self.utilisation]
        data.update(
            fmax_mhz=self.fmax_mhz, met=self.met, latency_ns=self.latency_ns, images_per_second=self.images_per_second
        )
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


# --- nextpnr's report.json ---------------------------------------------------------------


def _path(entry: dict[str, Any]) -> TimingPath:
    steps = entry.get("path") or []
    logic = [s for s in steps if s.get("type") == "logic"]
    routing = [s for s in steps if s.get("type") == "routing"]

    def where(step: dict[str, Any] | None, side: str) -> str:
        if not step:
            return "?"
        end = step.get(side) or {}
        return f"{end.get('cell', '?')}.{end.get('port', '?')}"

    return TimingPath(
        from_clock=str(entry.get("from", "")),
        to_clock=str(entry.get("to", "")),
        start=where(steps[0] if steps else None, "from"),
        end=where(steps[-1] if steps else None, "to"),
        delay_ns=float(sum(s.get("delay", 0.0) for s in steps)),
        logic_ns=float(sum(s.get("delay", 0.0) for s in logic)),
        routing_ns=float(sum(s.get("delay", 0.0) for s in routing)),
        logic_levels=len(logic),
    )


def parse_nextpnr(
    data: dict[str, Any], device: Device, netlist_flip_flops: int | None = None
) -> tuple[list[Utilisation], list[ClockFmax], TimingPath | None, list[TimingPath]]:
    """(utilisation, clocks, critical register path, IO paths) of a nextpnr `--report` JSON."""
    if not isinstance(data, dict) or "utilization" not in data:
        raise K2CError("nextpnr's report has no 'utilization' section (not a nextpnr --report file?)")
    util = data["utilization"]

    def row(resource: str, cell: str | None, available: int) -> Utilisation:
        figures = util.get(cell, {}) if cell else {}
        return Utilisation(resource, cell or "", int(figures.get("used", 0)), int(figures.get("available", available)))

    rows = [row("LUT4", device.lut_resource, device.luts)]
    if device.ff_resource is not None:
        rows.append(row("flip-flops", device.ff_resource, device.flip_flops))
    else:
        rows.append(
            Utilisation(
                "flip-flops",
                "SB_DFF*",
                netlist_flip_flops or 0,
                int(util.get(device.lut_resource, {}).get("available", device.flip_flops)),
            )
        )
    mult = row("multipliers", device.multiplier_cell, device.multipliers)
    rows.append(mult if device.multiplier_cell in util else Utilisation("multipliers", device.multiplier_cell, 0, 0))
    rows.append(row("block RAM", device.block_ram_cell, device.block_rams))
    if device.spram_kbits:
        rows.append(row("SPRAM", "ICESTORM_SPRAM", device.spram_kbits // 256))

    clocks = [
        ClockFmax(name, float(v.get("achieved", 0.0)), float(v.get("constraint", 0.0)))
        for name, v in sorted((data.get("fmax") or {}).items())
    ]
    paths = [_path(p) for p in data.get("critical_paths") or []]
    register = [p for p in paths if ASYNC not in (p.from_clock, p.to_clock)]
    slowest = min(clocks, key=lambda c: c.achieved_mhz, default=None)
    critical = None
    if register:
        same = [
            p for p in register if slowest is not None and slowest.clock in p.from_clock and slowest.clock in p.to_clock
        ]
        critical = max(same or register, key=lambda p: p.delay_ns)
    io = [p for p in paths if ASYNC in (p.from_clock, p.to_clock)]
    return rows, clocks, critical, io


_LOG_FMAX = re.compile(r"Max frequency for clock '([^']+)': ([\d.]+) MHz \((?:PASS|FAIL) at ([\d.]+) MHz\)")


def log_fmax(log_text: str) -> list[ClockFmax]:
    """Each clock's last "Max frequency" line of a nextpnr log: after --no-route the report's
    `fmax` is empty and the log's post-placement estimate is all there is."""
    last: dict[str, ClockFmax] = {}
    for m in _LOG_FMAX.finditer(log_text):
        last[m.group(1)] = ClockFmax(m.group(1), float(m.group(2)), float(m.group(3)))
    return [last[name] for name in sorted(last)]


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1) :]


def to_markdown(report: PnrReport) -> str:
    """The report as a markdown page (tables: utilisation, timing; the critical path)."""
    mode = "routed" if report.routed else "placed only (--no-route: post-placement estimate)"
    ctx = ", out of context (no IO buffers)" if report.out_of_context else ""
    if report.harness_flip_flops:
        ctx = (
            f", behind a scan harness (every port a register of a shift chain; "
            f"its {report.harness_flip_flops} flip-flops are included below)"
        )
    lines = [
        f"# {report.project} on {report.device} ({report.part}, {report.package})",
        "",
        f"{mode}{ctx}; top `{report.top}` has {report.port_bits} port bits, the package {report.io_pins} IO pins; "
        f"seed {report.seed}, " + (f"placer {report.placer}, " if report.placer else "") + f"{report.router}.",
        "",
        "| resource | cell | used | available | % |",
        "|---|---|--:|--:|--:|",
    ]
    for u in report.utilisation:
        lines.append(f"| {u.resource} | {u.cell} | {u.used:,} | {u.available:,} | {u.percent:.1f} |")
    if report.dsp_registers:
        lines += ["", f"DSP registers: {report.dsp_registers}."]
    if report.bram_registers:
        lines += ["", f"Block-RAM registers: {report.bram_registers}."]
    if report.weight_roms:
        lines += ["", f"Weight ROMs: {report.weight_roms}."]
    if report.queues:
        lines += ["", f"Queues: {report.queues}."]
    if report.fanout:
        lines += ["", f"Fan-out: {report.fanout}."]
    lines += ["", "| timing | value |", "|---|--:|"]
    fmax = report.fmax_mhz
    lines.append(f"| target clock | {report.target_mhz:g} MHz |")
    if fmax is None:
        lines.append("| Fmax | no clocked path |")
    else:
        lines.append(f"| Fmax | {fmax:.2f} MHz ({'met' if report.met else 'NOT met'}) |")
    lines.append(
        f"| latency | {report.latency_cycles} cycles"
        + (f" = {report.latency_ns:,.1f} ns |" if report.latency_ns is not None else " |")
    )
    lines.append(
        f"| initiation interval | {report.interval_cycles:g} cycles"
        + (f" = {report.images_per_second:,.0f} images/s |" if report.images_per_second else " |")
    )
    cp = report.critical_path
    if cp is None and not report.routed:
        lines += [
            "",
            "Critical path: nextpnr reports paths after routing only; Fmax above is its post-placement estimate.",
        ]
    if cp is not None:
        lines += [
            "",
            f"Critical path: {cp.delay_ns:.2f} ns ({cp.logic_ns:.2f} ns logic, {cp.routing_ns:.2f} ns routing), "
            f"{cp.logic_levels} logic levels",
            "",
            f"- from `{_short(cp.start)}`",
            f"- to `{_short(cp.end)}`",
        ]
    if report.io_paths:
        lines += ["", "Unclocked IO paths (port to register, register to port, port to port):", ""]
        for p in report.io_paths:
            lines.append(f"- {p.from_clock} -> {p.to_clock}: {p.delay_ns:.2f} ns, {p.logic_levels} logic levels")
    if report.seconds:
        lines += ["", "Run time: " + ", ".join(f"{step} {s:.0f} s" for step, s in report.seconds.items())]
    if report.logs:
        lines += ["", f"Logs: {report.logs}"]
    return "\n".join(lines) + "\n"


def render(report: PnrReport, console) -> None:
    """Tables on the terminal."""
    from rich.table import Table

    title = (
        f"{report.project} on {report.device} ({report.part}): "
        + ("routed" if report.routed else "placed (estimate)")
        + (", out of context" if report.out_of_context else "")
        + (f", scan harness (+{report.harness_flip_flops} flip-flops)" if report.harness_flip_flops else "")
    )
    table = Table(title=title)
    for column in ("resource", "cell", "used", "available", "%"):
        table.add_column(column, justify="left" if column in ("resource", "cell") else "right")
    for u in report.utilisation:
        table.add_row(u.resource, u.cell, f"{u.used:,}", f"{u.available:,}", f"{u.percent:.1f}")
    console.print(table)
    if report.dsp_registers:
        console.print(f"DSP registers: {report.dsp_registers}", highlight=False)
    if report.bram_registers:
        console.print(f"Block-RAM registers: {report.bram_registers}", highlight=False)
    if report.weight_roms:
        console.print(f"Weight ROMs: {report.weight_roms}", highlight=False)
    if report.queues:
        console.print(f"Queues: {report.queues}", highlight=False)
    if report.fanout:
        console.print(f"Fan-out: {report.fanout}", highlight=False)
    fmax = report.fmax_mhz
    if fmax is None:
        console.print("Fmax: no clocked path")
    else:
        verdict = "[green]met[/green]" if report.met else "[red]not met[/red]"
        console.print(
            f"Fmax {fmax:.2f} MHz (target {report.target_mhz:g} MHz: {verdict}); latency "
            f"{report.latency_cycles} cycles = {report.latency_ns:,.1f} ns; II {report.interval_cycles:g} "
            f"cycles = {report.images_per_second:,.0f} images/s"
        )
    cp = report.critical_path
    if cp is not None:
        console.print(
            f"critical path {cp.delay_ns:.2f} ns, {cp.logic_levels} logic levels: "
            f"{_short(cp.start)} -> {_short(cp.end)}",
            highlight=False,
        )
    if report.seconds:
        console.print("time: " + ", ".join(f"{step} {s:.0f} s" for step, s in report.seconds.items()))
    console.print(f"logs: {report.logs}", highlight=False)
