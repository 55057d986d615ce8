"""Synthesis and place-and-route of an emitted project's Verilog on one FPGA part.

Steps: (1) the Verilog, generated with Clash if it is missing or stale (as `synth` does);
(2) yosys `synth_ecp5` / `synth_ice40` to a JSON netlist; on ECP5 the multipliers' operand and
product flip-flops then move into the MULT18X18D blocks' own registers (fpga/dspregs.py; yosys
does that on iCE40 itself, not on ECP5), unless `dsp_registers=False`, and the flip-flops after
each block-RAM read into the DP16KD's output register (fpga/bramregs.py), unless
`bram_registers=False`; (3) nextpnr: packing, placement and
(unless --no-route) routing, with `--report report.json --detailed-timing-report`, the target
`--freq`, `--seed`, `--timing-allow-fail` (a missed target is a result to report, not an error).
A top with more port bits than the package has IO pins (any top, with `ports="scan"`) goes behind a scan harness
(fpga/harness.py: every port a register of a shift chain, four pins), whose flip-flops the
report states. Not `--out-of-context`: nextpnr-ice40 has no such mode, and nextpnr-ecp5's also
leaves the clock off the global network (general routing to every flip-flop: digits_dense's
router stalled past 30 minutes with the clock there). Either way the top's clock enable `en`
is tied high (a top that fits the pins sits in a thin wrapper that does only that), as a user
ties it: left on a register or a pin it reaches every flip-flop of the design.

`pnr_verilog` takes the same steps and options for Verilog that is not a keras2clash project
(another compiler's, for a side-by-side bench): a folder, its sources and a top.

Everything lands in PROJECT/pnr/DEVICE/ (`pnr_verilog`: the folder it is given): synth.log,
pnr.log, report.json (nextpnr's), design.json (the netlist), summary.json and summary.md
(keras2clash's report). The folder is
built under a temporary name beside it and renamed into place when the flow has succeeded;
an existing one is replaced only with `force`. When a tool fails, its logs are kept in
PROJECT/pnr/DEVICE.failed/ and the error shows the log's tail.

The WebAssembly tools (yowasp) see the real file system except /tmp (their own scratch
folder), so every path handed to a tool is relative to its working directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from keras2clash import procs
from keras2clash.backend.project import load_project
from keras2clash.errors import K2CError
from keras2clash.fpga import bramregs
from keras2clash.fpga.devices import ECP5_MAX_FANOUT, Device, Tool, get_device
from keras2clash.fpga.dspregs import DspFold, fold_netlist
from keras2clash.fpga.equiv import simulate_equal
from keras2clash.fpga.fanout import FanoutSplit, placed_locations, split_netlist
from keras2clash.fpga.harness import CLOCK, HARNESS_TOP, TIED_TOP, harness, ports, tied
from keras2clash.fpga.report import PnrReport, log_fmax, parse_nextpnr, to_markdown
from keras2clash.fsutil import atomic_directory, check_output_file, check_writable_target, write_output_file
from keras2clash.hw.hwmodel import timing
from keras2clash.hw.plan import has_constant_layers
from keras2clash.procs import find_executable
from keras2clash.verify.rtlsim import check_weight_files, ensure_hdl

PNR_DIR = "pnr"
DEFAULT_FREQ_MHZ = 100.0
LOG_TAIL_LINES = 15

STEPS = ("HDL generation", "synthesis", "placement", "routing")
"""The steps `progress` is told about, in order (routing is skipped with --no-route)."""

Progress = Callable[[str, str], object]
"""progress(step, detail): `step` (one of STEPS) has started or moved on; called again with
"done" as detail when it finished, "skipped" when there was nothing to do."""

_PLACE_MARKERS = (
    "Running main analytical placer",
    "Creating initial analytic placement",
    "Running simulated annealing placer",
    "Placed ",
)
_ROUTE_MARKERS = ("Routing..", "Routing globals", "Running router", "Setting up routing queue")


@dataclass(frozen=True)
class Tools:
    yosys: str
    nextpnr: str


def require(tool: Tool, device: Device) -> str:
    for name in tool.candidates:
        found = find_executable(name)
        if found:
            return found
    raise K2CError(
        f"{' or '.join(repr(n) for n in tool.candidates)} not found (needed for {device.name}): {tool.install}"
    )


def require_tools(device: Device) -> Tools:
    """Both tools for `device`, or one error saying how to install the missing one."""
    return Tools(require(device.yosys, device), require(device.nextpnr, device))


def top_port_bits(verilog: str, top: str) -> int:
    """Bits of the ports of module `top` (ANSI-style header, as Clash writes it)."""
    return sum(port.width for port in ports(verilog, top))


def _synthesise(
    tools: Tools,
    device: Device,
    folder: Path,
    work: Path,
    sources: str,
    top: str,
    block_roms: bool,
    ff_queues: int = 0,
    rw_dont_care: bool = False,
    separate_sums: bool = False,
) -> None:
    """yosys, run from the HDL folder (the ROM files load relative to it), to work/design.json."""
    synth = device.synth_script(
        top, _rel(work / "design.json", folder), block_roms, ff_queues, rw_dont_care, separate_sums
    )
    script = f"read_verilog {sources}; {synth}"
    run_tool([tools.yosys, "-q", "-l", _rel(work / "synth.log", folder), "-p", script], folder, work / "synth.log")


def netlist_cells(design_json: Path, top: str, pattern: str) -> int:
    """Cells of `top` in yosys' JSON netlist whose type matches the regular expression `pattern`
    (from its start; a plain cell name counts that type and any type it prefixes)."""
    data = json.loads(design_json.read_text())
    cells = data.get("modules", {}).get(top, {}).get("cells", {})
    return sum(1 for c in cells.values() if re.match(pattern, str(c.get("type", ""))))


def netlist_flip_flops(design_json: Path, top: str) -> int:
    """Flip-flop cells (SB_DFF*, TRELLIS_FF) in yosys' JSON netlist of `top`."""
    return netlist_cells(design_json, top, r"SB_DFF|TRELLIS_FF")


LINE_CHARS = 240
"""Lines of a failed tool's log longer than this are cut (nextpnr's cell names run to kilobytes)."""


def _cut(line: str) -> str:
    return line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + " …"


def failure_summary(log_text: str, output: str = "") -> str:
    """What a failed tool said: its ERROR lines, any resource used above 100% (nextpnr's
    "Device utilisation"), then the last lines of its log; long lines cut."""
    lines = log_text.splitlines() + output.strip().splitlines()
    errors = list(dict.fromkeys(line.strip() for line in lines if "ERROR" in line))
    over = list(
        dict.fromkeys(
            f"{m.group(1)} {m.group(2)} of {m.group(3)} ({m.group(4)}%)"
            for line in lines
            if (m := re.search(r"Info:\s+(\w+):\s+(\d+)\s*/\s*(\d+)\s+(\d+)%", line)) and int(m.group(4)) > 100
        )
    )
    parts = []
    if errors:
        parts.append("\n".join(_cut(e) for e in errors[:5]))
    if over:
        parts.append("over the device's capacity: " + ", ".join(over))
    parts.append("\n".join(_cut(line) for line in lines[-LOG_TAIL_LINES:]))
    return "\n".join(parts)


def _tail(path: Path, extra: str = "") -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        text = ""
    return failure_summary(text, extra)


def run_tool(cmd: list[str], cwd: Path, log: Path, on_log: Callable[[str], object] | None = None) -> str:
    """Run a tool (its own process group, stopped with Ctrl-C) that writes `log`; call
    `on_log(new_text)` as the log grows. Returns its stdout+stderr."""
    out_path = log.with_suffix(".out")
    seen = 0
    with open(out_path, "w") as out:
        with procs.child(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT) as proc:
            while True:
                try:
                    proc.wait(timeout=0.5)
                    done = True
                except subprocess.TimeoutExpired:
                    done = False
                if on_log is not None and log.is_file():
                    with open(log, errors="replace") as handle:
                        handle.seek(seen)
                        text = handle.read()
                    seen += len(text.encode(errors="replace"))
                    if text:
                        on_log(text)
                if done:
                    break
    text = out_path.read_text(errors="replace")
    out_path.unlink(missing_ok=True)
    if proc.returncode != 0:
        name = Path(cmd[0]).name
        raise _ToolFailed(f"{name} failed (exit {proc.returncode})", log, text)
    return text


class _ToolFailed(Exception):
    def __init__(self, message: str, log: Path, output: str) -> None:
        super().__init__(message)
        self.log = log
        self.output = output


def _rel(path: Path, start: Path) -> str:
    return os.path.relpath(path, start)


PORTS = ("auto", "pins", "scan")
"""Where the top's ports go. `pins`: the package's IO pins (the clock enable tied high in a
thin wrapper on ECP5); `scan`: a scan harness (fpga/harness.py), every port a register of a
shift chain behind four pins, the design measured as the block it is inside a larger one;
`auto`: pins when they are enough, the harness otherwise. A bus on most of the package's pins
measures the package as much as the design: mlp_tanh's 190 port bits on the LFE5U-85F's 205
pins spread its output queue's 160 data registers around the die, and one handshake's clock
enable reaching them is a 13.6 ns route (67.2 MHz, seed 2)."""

ROUTERS = ("router1", "router2")
"""nextpnr's routers. router1 (its default) is timing-driven arc by arc; on a design that
crowds the DSP rows it can stall in its last arcs (mobilenet_digits: 194 arcs left after 20
minutes), where router2 (negotiated congestion) routed in 5."""


@dataclass(frozen=True)
class _Settings:
    """The options of one place and route, checked (`_settings`)."""

    freq_mhz: float
    seed: int
    router: str
    placer: str
    route: bool
    force: bool
    dsp_registers: bool
    bram_registers: bool
    check_cycles: int
    block_roms: bool
    max_fanout: int
    fanout_placement: bool
    ff_queues: int
    ports: str
    rw_dont_care: bool = False
    separate_sums: bool = False  # Device.synth_script's: a design with layers of constants


def _settings(
    device: Device,
    *,
    freq_mhz: float,
    seed: int,
    router: str,
    placer: str | None,
    route: bool,
    force: bool,
    dsp_registers: bool,
    bram_registers: bool,
    check_cycles: int,
    block_roms: bool,
    max_fanout: int | None,
    fanout_placement: bool,
    ff_queues: int,
    ports: str,
) -> _Settings:
    """The options with the device's defaults filled in, or one error naming a bad one."""
    if not freq_mhz > 0:
        raise K2CError(f"bad --freq {freq_mhz}: a clock in MHz above 0")
    if ports not in PORTS:
        raise K2CError(f"bad --ports {ports!r}: one of {', '.join(PORTS)}")
    if router not in ROUTERS:
        raise K2CError(f"bad --router {router!r}: one of {', '.join(ROUTERS)}")
    placer = placer or device.placers[0]
    if placer not in device.placers:
        raise K2CError(f"bad --placer {placer!r} for {device.name}: one of {', '.join(device.placers)}")
    max_fanout = device.max_fanout if max_fanout is None else max_fanout
    if max_fanout < 0:
        raise K2CError(f"bad --max-fanout {max_fanout}: 0 (off) or the most pins a flip-flop may drive")
    if ff_queues < 0:
        raise K2CError(f"bad --ff-queues {ff_queues}: 0 (off) or the most words of a queue built from flip-flops")
    return _Settings(
        freq_mhz=freq_mhz,
        seed=seed,
        router=router,
        placer=placer,
        route=route,
        force=force,
        dsp_registers=dsp_registers,
        bram_registers=bram_registers,
        check_cycles=check_cycles,
        block_roms=block_roms,
        max_fanout=max_fanout,
        fanout_placement=fanout_placement,
        ff_queues=ff_queues,
        ports=ports,
    )


def pnr(
    project_dir: str | Path,
    fpga: str,
    *,
    freq_mhz: float = DEFAULT_FREQ_MHZ,
    seed: int = 1,
    router: str = "router1",
    placer: str | None = None,
    route: bool = True,
    force: bool = False,
    dsp_registers: bool = True,
    bram_registers: bool = True,
    check_cycles: int = 0,
    block_roms: bool = True,
    max_fanout: int | None = None,
    fanout_placement: bool = False,
    ff_queues: int = 0,
    ports: str = "auto",
    progress: Progress | None = None,
) -> PnrReport:
    """Place and route PROJECT on `fpga` (module docstring); returns the report."""
    tell = progress or (lambda step, detail: None)
    device = get_device(fpga)
    settings = _settings(
        device,
        freq_mhz=freq_mhz,
        seed=seed,
        router=router,
        placer=placer,
        route=route,
        force=force,
        dsp_registers=dsp_registers,
        bram_registers=bram_registers,
        check_cycles=check_cycles,
        block_roms=block_roms,
        max_fanout=max_fanout,
        fanout_placement=fanout_placement,
        ff_queues=ff_queues,
        ports=ports,
    )
    tools = require_tools(device)
    project = load_project(project_dir)
    _check_multipliers(project, device)
    out = project.root / PNR_DIR / device.name
    check_writable_target(out, force)
    seconds: dict[str, float] = {}

    t0 = time.monotonic()
    generated = []
    folder = ensure_hdl(project, "verilog", lambda text: (generated.append(text), tell("HDL generation", text)))
    check_weight_files(project, folder, "verilog")
    if generated:
        seconds["HDL generation"] = time.monotonic() - t0
    tell("HDL generation", "done" if generated else "skipped")

    t = timing(list(project.plans))
    sources = sorted(p.name for p in folder.glob("*.v"))
    settings = replace(settings, separate_sums=has_constant_layers(project.plans))
    return _place_and_route(
        tools, device, settings, folder, sources, project.top, out, project.name, t.first_latency, t.ii, seconds, tell
    )


def pnr_verilog(
    folder: str | Path,
    sources: Sequence[str],
    top: str,
    out: str | Path,
    fpga: str,
    *,
    name: str | None = None,
    latency_cycles: int = 0,
    interval_cycles: float = 0.0,
    freq_mhz: float = DEFAULT_FREQ_MHZ,
    seed: int = 1,
    router: str = "router1",
    placer: str | None = None,
    route: bool = True,
    force: bool = False,
    dsp_registers: bool = True,
    bram_registers: bool = True,
    check_cycles: int = 0,
    block_roms: bool = True,
    max_fanout: int | None = None,
    fanout_placement: bool = False,
    ff_queues: int = 0,
    ports: str = "auto",
    rw_dont_care: bool = False,
    separate_sums: bool = False,
    progress: Progress | None = None,
) -> PnrReport:
    """Place and route Verilog that is not a keras2clash project (another compiler's, for a
    side-by-side bench, or a training core) through the steps and options of `pnr`: `sources`
    (paths relative to `folder`, where yosys runs and memory files load from) with module
    `top`; the logs and reports land in `out` (replaced only with `force`). `name` titles the
    report (default: the top); `latency_cycles` and `interval_cycles`, which only the design's
    author knows, give the report's latency in ns and its throughput. A top with no clock
    enable goes on the pins as it is; behind the scan harness it needs a port `clk` (a reset
    `rst` is optional).
    `rw_dont_care`: the design never uses a value read in the cycle its address is written;
    `separate_sums`: each addition its own carry chain, as `pnr` builds a project with layers
    of constants (both `Device.synth_script`)."""
    tell = progress or (lambda step, detail: None)
    device = get_device(fpga)
    settings = _settings(
        device,
        freq_mhz=freq_mhz,
        seed=seed,
        router=router,
        placer=placer,
        route=route,
        force=force,
        dsp_registers=dsp_registers,
        bram_registers=bram_registers,
        check_cycles=check_cycles,
        block_roms=block_roms,
        max_fanout=max_fanout,
        fanout_placement=fanout_placement,
        ff_queues=ff_queues,
        ports=ports,
    )
    settings = replace(settings, rw_dont_care=rw_dont_care, separate_sums=separate_sums)
    tools = require_tools(device)
    folder = Path(folder).resolve()
    if not sources:
        raise K2CError("pnr_verilog: no Verilog sources given")
    missing = [s for s in sources if not (folder / s).is_file()]
    if missing:
        raise K2CError(f"pnr_verilog: no Verilog file {missing[0]} in {folder}")
    out = Path(out)
    check_writable_target(out, force)
    return _place_and_route(
        tools, device, settings, folder, list(sources), top, out, name or top, latency_cycles, interval_cycles, {}, tell
    )


def _top_verilog(folder: Path, sources: Sequence[str], top: str) -> str:
    """The text of the source that defines module `top`: TOP.v (one module a file, as Clash
    writes them), else the first source that declares it."""
    named = [source for source in sources if Path(source).name == f"{top}.v"]
    for source in named + [source for source in sources if source not in named]:
        text = (folder / source).read_text(errors="replace")
        if re.search(rf"\bmodule\s+{re.escape(top)}\b", text):
            return text
    raise K2CError(f"no module {top} in {', '.join(sources)}")


def _place_and_route(
    tools: Tools,
    device: Device,
    s: _Settings,
    folder: Path,
    sources: Sequence[str],
    design_top: str,
    out: Path,
    name: str,
    latency_cycles: int,
    interval_cycles: float,
    seconds: dict[str, float],
    tell: Progress,
) -> PnrReport:
    """yosys and nextpnr on `sources` (relative to `folder`) with top `design_top`, into `out`."""
    top_verilog = _top_verilog(folder, sources, design_top)
    port_bits = top_port_bits(top_verilog, design_top)
    if port_bits > device.io_pins and s.ports == "pins":
        raise K2CError(
            f"--ports pins: {design_top} has {port_bits} port bits, the {device.package} package of "
            f"{device.name} {device.io_pins} IO pins; use --ports scan (or auto)"
        )
    off_pins = port_bits > device.io_pins or s.ports == "scan"
    out_of_context = off_pins and device.out_of_context
    ecp5 = device.family == "ecp5"  # the clock enable tied high (fpga/harness.py: not on iCE40)
    scan = harness(top_verilog, design_top, ecp5) if off_pins and not device.out_of_context else None
    pins = tied(top_verilog, design_top) if not off_pins and ecp5 else None

    with atomic_directory(out, force=s.force) as work:
        try:
            # synthesis, from the HDL folder (the ROM files load relative to it)
            tell("synthesis", f"{Path(tools.yosys).name} {device.synth_command}")
            files = " ".join(sources)
            top = design_top
            if scan is not None:  # no out-of-context mode: the ports go behind a scan harness
                (work / "harness.v").write_text(scan.verilog)
                files += " " + _rel(work / "harness.v", folder)
                top = HARNESS_TOP
            elif pins is not None:
                (work / "pins.v").write_text(pins)
                files += " " + _rel(work / "pins.v", folder)
                top = TIED_TOP
            t1 = time.monotonic()
            block = s.block_roms and device.family == "ecp5"
            queues = s.ff_queues if device.family == "ecp5" else 0  # iCE40 has no LUT RAM
            sums = s.separate_sums and ecp5
            _synthesise(tools, device, folder, work, files, top, block, queues, s.rw_dont_care, sums)
            rom_note = "in block RAM (every registered ROM of two words or more)" if block else ""
            if (
                block
                and (used := netlist_cells(work / "design.json", top, f"{device.block_ram_cell}$")) > device.block_rams
            ):
                rom_note = (
                    f"weight ROMs left to yosys: in block RAM they would need {used} "
                    f"{device.block_ram_cell} of {device.block_rams}"
                )
                tell("synthesis", rom_note)
                _synthesise(tools, device, folder, work, files, top, False, queues, s.rw_dont_care, sums)
            fold = bram_fold = None
            if device.family == "ecp5" and (s.dsp_registers or s.bram_registers):
                fold, bram_fold = _fold_registers(
                    work / "design.json", top, s.check_cycles, tell, dsp=s.dsp_registers, bram=s.bram_registers
                )
            seconds["synthesis"] = time.monotonic() - t1
            tell("synthesis", "done")

            # nextpnr: packing + placement + routing in one run; the log tells where it is
            args = [
                tools.nextpnr,
                *device.nextpnr_args,
                "--package",
                device.package,
                "--json",
                "design.json",
                "--report",
                "report.json",
                "--detailed-timing-report",
                "--freq",
                f"{s.freq_mhz:g}",
                "--seed",
                str(s.seed),
                "--placer",
                s.placer,
                "--router",
                s.router,
                "--timing-allow-fail",
                "-l",
                "pnr.log",
                "-q",
            ]
            if device.family == "ecp5" and device.clock_pin:  # the clock on a primary clock pin
                (work / "pins.lpf").write_text(f'LOCATE COMP "{CLOCK}" SITE "{device.clock_pin}";\n')
                args += ["--lpf", "pins.lpf", "--lpf-allow-unconstrained"]
            if out_of_context:
                args.append("--out-of-context")
            fanout = None
            if s.max_fanout:
                t3 = time.monotonic()
                fanout = _split_fanout(work, top, s.max_fanout, args, tell, s.fanout_placement)
                seconds["fan-out placement"] = time.monotonic() - t3
            if not s.route:
                args.append("--no-route")
            state = {"step": "placement", "since": time.monotonic()}
            tell(
                "placement",
                f"{Path(tools.nextpnr).name} {' '.join(device.nextpnr_args)}"
                + (" --out-of-context" if out_of_context else ""),
            )

            def on_log(text: str) -> None:
                if state["step"] == "placement" and s.route and any(m in text for m in _ROUTE_MARKERS):
                    now = time.monotonic()
                    seconds["placement"] = now - state["since"]
                    tell("placement", "done")
                    state.update(step="routing", since=now)
                    tell("routing", f"{Path(tools.nextpnr).name}")

            t2 = time.monotonic()
            run_tool(args, work, work / "pnr.log", on_log)
            now = time.monotonic()
            seconds[state["step"]] = now - state["since"]
            seconds["place and route"] = now - t2
            tell(state["step"], "done")
            if not s.route:
                tell("routing", "skipped")
        except _ToolFailed as exc:
            failed = _keep_failed(work, out)
            log = failed / exc.log.name
            raise K2CError(
                f"{exc} on {device.name}; its log is {log}:\n{_tail(log, exc.output)}", exit_code=1
            ) from None

        try:
            data = json.loads((work / "report.json").read_text())
        except (OSError, ValueError) as exc:
            failed = _keep_failed(work, out)
            raise K2CError(f"nextpnr wrote no readable report ({exc}); logs kept in {failed}", exit_code=1) from None
        ffs = None if device.ff_resource else netlist_flip_flops(work / "design.json", top)
        util, clocks, critical, io_paths = parse_nextpnr(data, device, ffs)
        if not clocks:  # --no-route: the post-placement estimate is in the log only
            clocks = log_fmax((work / "pnr.log").read_text(errors="replace"))
        report = PnrReport(
            project=name,
            top=design_top,
            device=device.name,
            part=device.part,
            package=device.package,
            routed=s.route,
            out_of_context=out_of_context,
            port_bits=port_bits,
            io_pins=device.io_pins,
            harness_flip_flops=scan.flip_flops if scan is not None else 0,
            dsp_registers=fold.summary if fold is not None else "",
            bram_registers=bram_fold.summary if bram_fold is not None else "",
            weight_roms=rom_note,
            queues=f"up to {queues} words in flip-flops, deeper in LUT RAM" if queues else "",
            fanout=fanout.summary if fanout is not None else "",
            target_mhz=s.freq_mhz,
            seed=s.seed,
            router=s.router,
            placer=s.placer,
            utilisation=util,
            clocks=clocks,
            critical_path=critical,
            io_paths=io_paths,
            latency_cycles=latency_cycles,
            interval_cycles=interval_cycles,
            seconds={k: round(v, 1) for k, v in seconds.items()},
            tools={"yosys": tools.yosys, "nextpnr": tools.nextpnr},
            logs=str(out),
        )
        write_output_file(work / "summary.json", report.to_json() + "\n", force=True)
        write_output_file(work / "summary.md", to_markdown(report), force=True)
    return report


def _split_fanout(work: Path, top: str, limit: int, args: list[str], tell: Progress, by_placement: bool) -> FanoutSplit:
    """fpga/fanout.py on work/design.json, rewritten in place. `by_placement`: a first
    placement (the same nextpnr run without routing, its netlist written to placed.json, log
    place0.log) tells where each reader sits, so each copy serves a compact region of them;
    else readers are grouped in name order."""
    locations = None
    if by_placement:
        tell("placement", "first placement for --max-fanout (readers' locations; log place0.log)")
        renamed = {"pnr.log": "place0.log", "report.json": "place0.json"}  # the main run's files stay its own
        first = [renamed.get(a, a) for a in args if a != "--detailed-timing-report"]
        run_tool([*first, "--no-route", "--write", "placed.json"], work, work / "place0.log", lambda text: None)
        locations = placed_locations(json.loads((work / "placed.json").read_text()))
        (work / "placed.json").unlink()  # as large as the netlist, and not needed again
    netlist = json.loads((work / "design.json").read_text())
    result = split_netlist(netlist, top, limit, locations)
    (work / "design.json").write_text(json.dumps(netlist))
    tell("placement", result.summary)
    return result


def _check_multipliers(project, device) -> None:
    """Refuse before synthesis a design with more multipliers than the part has: yosys would
    map every one to a DSP block anyway and nextpnr fail after minutes of packing. A part
    without DSP blocks (iCE40 HX) builds them in LUTs, so it is not refused."""
    needed = sum(plan.multipliers for plan in project.plans)
    if device.multipliers and needed > device.multipliers:
        raise K2CError(
            f"{project.top} needs {needed} multipliers, the {device.part} has {device.multipliers} "
            f"{device.multiplier_cell}: emit it again with --dsp-budget {device.name} (balanced to the "
            f"part), or fewer processing elements (--parallelism/--cycles)"
        )


def _fold_registers(
    design_json: Path, top: str, check_cycles: int, tell: Progress, *, dsp: bool = True, bram: bool = True
) -> tuple[DspFold | None, bramregs.BramFold | None]:
    """`_fold` on the netlist file `design_json`, rewritten in place."""
    netlist = json.loads(design_json.read_text())
    folds = _fold(netlist, top, check_cycles, tell, design_json.parent, dsp=dsp, bram=bram)
    design_json.write_text(json.dumps(netlist))
    return folds


def _fold(
    netlist: dict, top: str, check_cycles: int, tell: Progress, work: Path, *, dsp: bool = True, bram: bool = True
) -> tuple[DspFold | None, bramregs.BramFold | None]:
    """Rewrite yosys' ECP5 netlist with the multiplier registers inside the DSP blocks (`dsp`)
    and the registers after block-RAM reads inside the block RAMs (`bram`); with
    `check_cycles`, first prove the rewrite on that many cycles of random inputs
    (fpga/equiv.py: both netlists side by side, in work/dsp_check), refusing to go on if any
    output differs."""
    before = json.loads(json.dumps(netlist)) if check_cycles else None
    fold = fold_netlist(netlist, top) if dsp else None
    bram_fold = bramregs.fold_netlist(netlist, top) if bram else None
    if before is not None:
        what = " and ".join(w for w, on in (("DSP", dsp), ("block-RAM", bram)) if on)
        tell("synthesis", f"checking the {what} registers: {check_cycles:,} random cycles, both netlists")
        result = simulate_equal(before, netlist, top, work / "dsp_check", cycles=check_cycles)
        if not result.equal:
            log = work / "dsp_check.log"
            log.write_text(
                f"{result.differ} of {result.cycles} random cycles differ, the first at cycle "
                f"{result.first}; the miter and its testbench are in dsp_check/\n"
            )
            raise _ToolFailed(
                f"the {what}-register rewrite changed {top}'s outputs (run with --no-dsp-registers "
                "or --no-bram-registers, and report it)",
                log,
                "",
            )
        fold = replace(fold, checked_cycles=result.cycles) if fold is not None else None
        bram_fold = replace(bram_fold, checked_cycles=result.cycles) if bram_fold is not None else None
    return fold, bram_fold


@dataclass(frozen=True)
class NetlistRewrite:
    """What `rewrite_netlist` did, one line each ("" where the step was off)."""

    dsp_registers: str
    bram_registers: str
    fanout: str

    def lines(self) -> list[str]:
        return [line for line in (self.dsp_registers, self.bram_registers, self.fanout) if line]


def rewrite_netlist(
    design: Path,
    out: Path,
    top: str,
    *,
    dsp_registers: bool = True,
    bram_registers: bool = True,
    max_fanout: int = ECP5_MAX_FANOUT,
    check_cycles: int = 0,
    force: bool = False,
) -> NetlistRewrite:
    """The rewrites `pnr` makes between yosys and nextpnr, on a user's own ECP5 netlist:
    yosys' JSON (`synth_ecp5 ... ; write_json DESIGN`) in, the netlist for nextpnr-ecp5 out.
    The multipliers' and block RAMs' registers move into the blocks, and every flip-flop or LUT
    driving more than `max_fanout` pins (0: none) is copied, readers grouped in name order (the
    placement-guided grouping needs nextpnr: `pnr --fanout-placement`). `top`: the netlist's
    top module (the user's own, when the core is inside a larger design). `check_cycles`:
    first prove the register moves on that many random cycles (Icarus Verilog)."""
    if max_fanout < 0:
        raise K2CError(f"bad --max-fanout {max_fanout}: 0 (off) or the most pins a flip-flop may drive")
    check_output_file(out, force)
    try:
        netlist = json.loads(Path(design).read_text())
    except (OSError, ValueError) as exc:
        raise K2CError(f"cannot read yosys' JSON netlist {design}: {exc}") from None
    modules = netlist.get("modules") if isinstance(netlist, dict) else None
    if not isinstance(modules, dict) or top not in modules:
        known = ", ".join(sorted(modules)) if isinstance(modules, dict) else "none"
        raise K2CError(f"{design} has no module {top!r} (its modules: {known}); give the synthesised top with --top")
    with tempfile.TemporaryDirectory(prefix="k2c-netlist-") as work:
        try:
            fold, bram_fold = _fold(
                netlist,
                top,
                check_cycles,
                lambda step, detail: None,
                Path(work),
                dsp=dsp_registers,
                bram=bram_registers,
            )
        except _ToolFailed as exc:
            raise K2CError(f"{exc}: {exc.log.read_text().strip()}", exit_code=1) from None
    fanout = split_netlist(netlist, top, max_fanout, None) if max_fanout else None
    write_output_file(out, json.dumps(netlist), force)
    return NetlistRewrite(
        dsp_registers=fold.summary if fold is not None else "",
        bram_registers=bram_fold.summary if bram_fold is not None else "",
        fanout=fanout.summary if fanout is not None else "",
    )


def _keep_failed(work: Path, out: Path) -> Path:
    """Move a failed run's folder to OUT.failed (replacing an earlier failed run's) so its
    logs outlive the temporary folder; returns where they are."""
    failed = out.with_name(out.name + ".failed")
    try:
        if failed.exists():
            shutil.rmtree(failed)
        os.rename(work, failed)
    except OSError:
        return work
    return failed
