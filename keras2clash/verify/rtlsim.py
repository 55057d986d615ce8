"""RTL simulation of the generated HDL in Icarus, Verilator or GHDL, checked against the golden model.

`rtlsim` writes the testbench (keras2clash.testbench), generates the HDL if it is missing or
older than the project's Haskell and weight files, checks the weight files the HDL reads
(a missing one makes Verilator run with zeros and Icarus with x, both exiting 0: TOOLCHAIN
gotcha 10), builds the simulation in DIR/.build/rtl-<simulator>/ and runs it from the HDL
folder (where Clash put the weight files). Every output beat is decoded and compared with
the golden model here, independently of the testbench's own PASS/FAIL.

Icarus and GHDL are slow on Clash's wide vectors (measured here, 2 cores: on digits_dense,
64 inputs x 16 bits in one beat, Icarus ~80 cycles/s and GHDL ~170 cycles/s; on iris
~2.7k and ~400; Verilator ~250k cycles/s on digits), so they default to 5 samples and refuse
runs whose estimated cycle count (`testbench.estimate_cycles`, conservative) exceeds
`--max-cycles`: 20,000 for Icarus and 50,000 for GHDL by default (a few minutes at the
speeds above), instead of running for hours. Verilator's limit is 200 million.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from keras2clash import procs
from keras2clash.backend.project import Project, load_project
from keras2clash.data import load_test_set
from keras2clash.errors import K2CError
from keras2clash.fsutil import work_dir
from keras2clash.hw.inputs import several_inputs
from keras2clash.hw.output import several_outputs
from keras2clash.verify import toolchain
from keras2clash.verify.simulate import samples as sample_count
from keras2clash.verify.testbench import (
    TB_DIR,
    TB_MODULE,
    HeadsTestbench,
    Reload,
    Testbench,
    estimate_cycles,
    heads_inputs,
    unpack_result,
    write_heads_testbench,
    write_testbench,
)


@dataclass(frozen=True)
class Simulator:
    name: str
    language: str  # which generated HDL it reads
    tools: tuple[str, ...]  # executables it needs
    package: str  # the Debian package that provides them
    default_samples: int | None  # None: the whole test set
    max_cycles: int  # refuse estimated runs longer than this (a stated limit)


SIMULATORS = {
    "verilator": Simulator("verilator", "verilog", ("verilator", "make", "g++"), "verilator", None, 200_000_000),
    "icarus": Simulator("icarus", "verilog", ("iverilog", "vvp"), "iverilog", 5, 20_000),
    "ghdl": Simulator("ghdl", "vhdl", ("ghdl",), "ghdl", 5, 50_000),
}

HDL_SUFFIX = {"verilog": ".v", "vhdl": ".vhdl"}


def require_simulator(sim: Simulator) -> dict[str, str]:
    """Paths of the simulator's tools, or one clear error naming the missing one and its package."""
    found = {}
    for tool in sim.tools:
        path = shutil.which(tool)
        if path is None:
            package = sim.package if tool not in ("make", "g++") else tool.replace("g++", "g++ (build-essential)")
            raise K2CError(
                f"{sim.name}: '{tool}' not found on PATH; install the Debian package '{package}' "
                f"(apt-get install {package.split()[0]}) or run ./scripts/setup.sh"
            )
        found[tool] = path
    return found


# --- the HDL to simulate -------------------------------------------------------------------


def hdl_folder(project: Project, language: str) -> Path:
    """The folder holding the top entity's HDL and the weight files Clash copied."""
    suffix = HDL_SUFFIX[language]
    for path in sorted((project.root / "hdl" / language).rglob(f"{project.top}{suffix}")):
        return path.parent
    raise K2CError(f"no {language} top entity {project.top}{suffix} under {project.root / 'hdl' / language}")


def _hdl_is_current(project: Project, language: str) -> bool:
    base = project.root / "hdl" / language
    manifests = list(base.rglob("clash-manifest.json")) if base.is_dir() else []
    if not manifests:
        return False
    built = min(m.stat().st_mtime for m in manifests)
    sources = list(project.root.glob("*.hs")) + list((project.root / "clash_lib").rglob("*.hs"))
    sources += list((project.root / "weights").glob("*"))
    if any(src.stat().st_mtime > built for src in sources):
        return False
    try:
        folder = hdl_folder(project, language)
    except K2CError:
        return False
    top = (folder / f"{project.top}{HDL_SUFFIX[language]}").read_text()
    return "s_axis_tdata" in top  # an HDL from before the AXI ports is stale too


def ensure_hdl(project: Project, language: str, status: Callable[[str], object] | None = None) -> Path:
    """The HDL folder, generating the HDL with Clash first if it is missing or stale."""
    if not _hdl_is_current(project, language):
        if status is not None:
            status(f"clash --{language} ({project.name})")
        toolchain.generate_hdl(project.root, language)
    return hdl_folder(project, language)


_WEIGHT_REFS = [
    re.compile(r'\$readmem[bh]\s*\(\s*"([^"]+)"'),  # Verilog / SystemVerilog
    re.compile(r'FromFile\w*\s*\(\s*"([^"]+)"'),  # Clash's VHDL ROM initialisation
]


def check_weight_files(project: Project, folder: Path, language: str) -> list[str]:
    """Every file the HDL loads must be in `folder`, non-empty, and equal to the project's
    weights/ copy. Returns the names; raises naming the first problem."""
    names: set[str] = set()
    for source in folder.glob(f"*{HDL_SUFFIX[language]}"):
        text = source.read_text(errors="replace")
        for pattern in _WEIGHT_REFS:
            names.update(pattern.findall(text))
    project_files = {p.name: p for p in (project.root / "weights").glob("*")}
    missing_refs = sorted(set(project_files) - names)
    if missing_refs:
        raise K2CError(
            f"the {language} in {folder} does not read weight file(s) {', '.join(missing_refs)}; "
            f"regenerate it with 'keras2clash hdl {project.root} --{language}'"
        )
    for name in sorted(names):
        path = folder / name
        if not path.is_file():
            raise K2CError(
                f"weight file {path} is missing (the simulator would run with zeros or x); "
                f"regenerate the HDL with 'keras2clash hdl {project.root} --{language}'"
            )
        text = path.read_text()
        if not text.strip():
            raise K2CError(f"weight file {path} is empty (the simulator would run with zeros or x)")
        if name in project_files and project_files[name].read_text() != text:
            raise K2CError(
                f"weight file {path} differs from {project_files[name]}: the HDL is stale; "
                f"regenerate it with 'keras2clash hdl {project.root} --{language}'"
            )
    return sorted(names)


# --- build and run -------------------------------------------------------------------------


def build_testbench(sim: Simulator, tools: dict[str, str], folder: Path, tb_dir: Path, build: Path) -> list[str]:
    """Compile the testbench and the design; return the command that runs it (from `folder`)."""
    shutil.rmtree(build, ignore_errors=True)
    work_dir(build)
    sources = sorted(str(p) for p in folder.glob(f"*{HDL_SUFFIX[sim.language]}"))
    if sim.name == "icarus":
        exe = build / "tb.vvp"
        toolchain._run(
            [tools["iverilog"], "-g2005", "-s", TB_MODULE, "-o", str(exe), str(tb_dir / "tb.v"), *sources],
            folder,
            "iverilog",
            log=build / "build.log",
        )
        return [tools["vvp"], "-n", str(exe)]
    if sim.name == "verilator":
        toolchain._run(
            [
                tools["verilator"],
                "--binary",
                "--timing",
                "-Wno-WIDTH",
                "-Wno-fatal",
                "-O3",
                "-MAKEFLAGS",
                "OPT_FAST=-O2",
                "-j",
                "2",
                "--top-module",
                TB_MODULE,
                "--Mdir",
                str(build),
                "-o",
                TB_MODULE,
                str(tb_dir / "tb.v"),
                *sources,
            ],
            folder,
            "verilator --binary",
            log=build / "build.log",
        )
        return [str(build / TB_MODULE)]
    # ghdl: import everything, let -m find the order, run (mcode: -r elaborates and runs)
    flags = ["--std=08", f"--workdir={build}", "-frelaxed"]
    toolchain._run(
        [tools["ghdl"], "-i", *flags, *sources, str(tb_dir / "tb.vhdl")], folder, "ghdl -i", log=build / "import.log"
    )
    toolchain._run([tools["ghdl"], "-m", *flags, TB_MODULE], folder, "ghdl -m", log=build / "build.log")
    # Clash's datapath registers have no reset: numeric_std warns about their 'U' bits until
    # data arrives; the handshake outputs are checked for X by the testbench itself.
    return [tools["ghdl"], "-r", *flags, TB_MODULE, "--ieee-asserts=disable"]


@dataclass
class SampleResult:
    index: int
    passed: bool
    accept_cycle: int | None = None
    output_cycle: int | None = None
    got_class: int | None = None
    got: np.ndarray | None = None
    expected_class: int = 0
    expected: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    note: str = ""

    @property
    def latency(self) -> int | None:
        if self.accept_cycle is None or self.output_cycle is None:
            return None
        return self.output_cycle - self.accept_cycle


@dataclass
class RtlResult:
    simulator: str
    project: str
    samples: list[SampleResult]
    cycles: int | None  # cycles simulated (testbench's count), None if it never finished
    seconds: float  # wall time of the simulation run (not the build)
    build_seconds: float
    messages: list[str]  # ERROR / TIMEOUT lines and anything unexpected
    gap_max: int = 0
    classifies: bool = True  # the output has a class (one beat of scores and class per image)

    @property
    def passed(self) -> int:
        return sum(s.passed for s in self.samples)

    @property
    def ok(self) -> bool:
        return self.passed == len(self.samples) and not self.messages and self.cycles is not None

    @property
    def cycles_per_second(self) -> float | None:
        return None if not self.cycles or self.seconds <= 0 else self.cycles / self.seconds

    def accept_cycles(self) -> np.ndarray:
        return np.array([s.accept_cycle for s in self.samples])

    def output_cycles(self) -> np.ndarray:
        return np.array([s.output_cycle for s in self.samples])


def parse_output(lines: list[str], tb: Testbench) -> tuple[list[SampleResult], int | None, list[str]]:
    """Decode the testbench's lines and compare every output with the golden model."""
    results = [
        SampleResult(i, False, expected_class=int(tb.classes[i]), expected=tb.expected[i], note="no output")
        for i in range(tb.spec.samples)
    ]
    cycles: int | None = None
    messages: list[str] = []
    spec = tb.spec
    wrong: dict[int, dict[int, str]] = {}  # image -> its output beats that differ (BEAT lines)
    for line in lines:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "BEAT" and len(parts) == 4:
            wrong.setdefault(int(parts[1]), {})[int(parts[2])] = parts[3]
        elif parts[0] == "OUT" and len(parts) == 6:
            i = int(parts[1])
            r = results[i]
            r.accept_cycle, r.output_cycle = int(parts[2]), int(parts[3])
            words = {**wrong.pop(i, {}), spec.out_beats - 1: parts[4]}
            bad = [w for w in words.values() if not re.fullmatch(r"[0-9a-fA-F]+", w)]
            if bad:
                r.note = f"undefined bits in m_axis_tdata: {bad[0]}"
                continue
            if spec.class_bits:
                r.got, got_class = unpack_result(int(parts[4], 16), spec)
                r.got_class = int(got_class)
            else:  # the expected beats, with the ones the testbench saw differ replaced
                got = np.array(r.expected, dtype=np.int64).reshape(spec.out_beats, spec.out_width)
                for b, w in words.items():
                    got[b] = unpack_result(int(w, 16), spec)[0]
                r.got = got.reshape(-1)
            same = bool(np.array_equal(r.got, r.expected)) and r.got_class == (
                r.expected_class if spec.class_bits else None
            )
            r.passed = same and parts[5] == "PASS"
            r.note = "" if r.passed else ("testbench FAIL" if same else "mismatch")
        elif parts[0] == "DONE" and len(parts) == 4:
            cycles = int(parts[3])
        elif parts[0] in ("ERROR", "TIMEOUT"):
            messages.append(line.strip())
        elif "error" in line.lower() or "warning" in line.lower():
            messages.append(line.strip())
    return results, cycles, messages


def rtlsim(
    project_dir: str | Path,
    data: str | Path,
    simulator: str = "verilator",
    limit: int | None = None,
    *,
    gap_max: int = 0,
    seed: int = 1,
    max_cycles: int | None = None,
    status: Callable[[str], object] | None = None,
    progress: Callable[[int, int], object] | None = None,
    reload: Reload | None = None,
) -> RtlResult | HeadsRtlResult:
    """Testbench -> HDL (if needed) -> build -> run -> compare. Raises K2CError on any
    problem before the run; a finished run with mismatches is returned (see `RtlResult.ok`).
    A design of several outputs runs its testbench of every port (`HeadsRtlResult`).
    `reload`: weight messages between two images (`testbench.Reload`), the images after
    them checked against the golden model of the new weights."""
    if simulator not in SIMULATORS:
        raise K2CError(f"unknown simulator {simulator!r}; choose from {', '.join(SIMULATORS)}")
    sim = SIMULATORS[simulator]
    require_simulator(sim)  # before any work: a missing simulator is one error line
    project = load_project(project_dir)
    if limit is None:
        limit = sim.default_samples
    limit_cycles = sim.max_cycles if max_cycles is None else max_cycles
    # check the size before writing anything
    n_data = _count_samples(project, data, limit)
    estimate = estimate_cycles(project, n_data, gap_max)
    if estimate > limit_cycles:
        raise K2CError(
            f"{sim.name}: {n_data} samples need about {estimate} cycles, above the limit of "
            f"{limit_cycles} for {sim.name} (it is slow on wide vectors); use fewer samples (-n) "
            f"or raise --max-cycles"
        )
    if several_outputs(project.plans) or several_inputs(project.plans):
        x = heads_inputs(project, data, limit)
        heads_tb = write_heads_testbench(project.root, x, gap_max=gap_max, seed=seed)
        if status is not None:
            status(f"{sim.name}: building and simulating {heads_tb.spec.samples} samples")
        return run_heads_testbench(project, sim.name, heads_tb)
    tb = write_testbench(project.root, data, limit, gap_max=gap_max, seed=seed, reload=reload)
    return run_testbench(project, sim.name, tb, status=status, progress=progress)


def run_testbench(
    project: Project,
    simulator: str,
    tb: Testbench,
    *,
    status: Callable[[str], object] | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> RtlResult:
    """Build and run an already written testbench (DIR/tb/) and compare its outputs."""
    sim = SIMULATORS[simulator]
    tools = require_simulator(sim)
    folder = ensure_hdl(project, sim.language, status)
    check_weight_files(project, folder, sim.language)
    build = project.root / toolchain.BUILD_DIR / f"rtl-{sim.name}"
    if status is not None:
        status(f"building the {sim.name} simulation")
    t0 = time.monotonic()
    cmd = build_testbench(sim, tools, folder, project.root / TB_DIR, build)
    t1 = time.monotonic()
    if status is not None:
        status(f"{sim.name}: simulating {tb.spec.samples} samples")
    lines = _run_streaming(cmd, folder, tb.spec.samples, progress)
    t2 = time.monotonic()
    (build / "run.log").write_text("\n".join(lines) + "\n")
    samples, cycles, messages = parse_output(lines, tb)
    return RtlResult(
        sim.name, project.name, samples, cycles, t2 - t1, t1 - t0, messages, tb.spec.gap_max, bool(tb.spec.class_bits)
    )


@dataclass
class HeadsRtlResult:
    """An RTL run of a design of several outputs or inputs: per output port, each sample's
    accept and output cycles and whether its beats equalled the golden model's (the
    testbench's PASS)."""

    simulator: str
    project: str
    accept_cycle: list[np.ndarray]  # per port, (N,)
    output_cycle: list[np.ndarray]  # per port, (N,)
    passed: list[np.ndarray]  # per port, (N,) bool
    cycles: int | None
    messages: list[str]

    @property
    def samples(self) -> list[bool]:
        """Every (port, sample) result, port by port: whether it equalled the golden model."""
        return [bool(v) for port in self.passed for v in port]

    @property
    def ok(self) -> bool:
        return all(self.samples) and not self.messages and self.cycles is not None


def render_heads(result: HeadsRtlResult, console) -> None:
    """One row per output port: bit-exact samples, first latency, last output cycle."""
    from rich.table import Table

    table = Table(title=f"{result.project}: RTL simulation in {result.simulator}, one row per output port")
    for name in ("port", "bit-exact", "first latency", "last output cycle"):
        table.add_column(name, justify="right")
    for k, (acc, out, ok) in enumerate(zip(result.accept_cycle, result.output_cycle, result.passed)):
        port = f"m{k}_axis" if len(result.passed) > 1 else "m_axis"  # one output beside several inputs
        table.add_row(port, f"{int(ok.sum())}/{len(ok)}", str(int(out[0] - acc[0])), str(int(out[-1])))
    console.print(table)
    for message in result.messages:
        console.print(f"[red]{message}[/red]")


def run_heads_testbench(project: Project, simulator: str, tb: HeadsTestbench) -> HeadsRtlResult:
    """Build and run the testbench of a design of several outputs (DIR/tb/,
    `testbench.write_heads_testbench`) in Icarus, Verilator or GHDL; its OUT lines per port."""
    sim = SIMULATORS[simulator]
    tools = require_simulator(sim)
    folder = ensure_hdl(project, sim.language)
    check_weight_files(project, folder, sim.language)
    build = project.root / toolchain.BUILD_DIR / f"rtl-{sim.name}"
    cmd = build_testbench(sim, tools, folder, project.root / TB_DIR, build)
    lines = _run_streaming(cmd, folder, tb.spec.samples * len(tb.ports), None)
    (build / "run.log").write_text("\n".join(lines) + "\n")
    n, ports = tb.spec.samples, len(tb.ports)
    accept = [np.full(n, -1, dtype=np.int64) for _ in range(ports)]
    output = [np.full(n, -1, dtype=np.int64) for _ in range(ports)]
    passed = [np.zeros(n, dtype=bool) for _ in range(ports)]
    cycles, messages = None, []
    for line in lines:
        parts = line.split()
        if parts[:1] == ["OUT"] and len(parts) == 7:
            k, i = int(parts[1]), int(parts[2])
            accept[k][i], output[k][i], passed[k][i] = int(parts[3]), int(parts[4]), parts[6] == "PASS"
        elif parts[:1] == ["DONE"] and len(parts) == 4:
            cycles = int(parts[3])
        elif parts[:1] in (["ERROR"], ["TIMEOUT"]):
            messages.append(line.strip())
    return HeadsRtlResult(sim.name, project.name, accept, output, passed, cycles, messages)


def _count_samples(project: Project, data: str | Path, limit: int | None) -> int:
    if several_outputs(project.plans) or several_inputs(project.plans):
        return sample_count(heads_inputs(project, data, limit))
    dataset = load_test_set(data, project.input_shape, project.n_out, project.plans[-1].activation).head(limit)
    return len(dataset)


def _big_stack() -> None:
    """Verilator's generated C++ evaluates a large design in deeply nested calls: the default
    8 MB stack overflows on the pipelined CNNs (inception_digits: SIGSEGV at the first cycle),
    so the testbench runs with the largest stack the system allows."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_STACK)
    resource.setrlimit(resource.RLIMIT_STACK, (hard, hard))


def _run_streaming(cmd: list[str], cwd: Path, total: int, progress) -> list[str]:
    lines: list[str] = []
    outs = 0
    with procs.child(
        cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=_big_stack
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("OUT "):
                outs += 1
                if progress is not None:
                    progress(outs, total)
        code = proc.wait()
    if code != 0 and not any(line.startswith("DONE") for line in lines):
        tail = "\n".join(lines[-20:])
        raise K2CError(f"{Path(cmd[0]).name} exited with {code}:\n{tail}", exit_code=1)
    return lines


# --- the report ----------------------------------------------------------------------------

ALL_ROWS_UP_TO = 40
"""Runs with up to this many samples list every sample; longer runs list the failures only."""


def render(result: RtlResult, console, all_rows: bool = False) -> None:
    from rich.table import Table

    title = f"{result.project}: RTL simulation in {result.simulator}, {len(result.samples)} samples"
    if result.gap_max:
        title += f", random gaps/stalls up to {result.gap_max}"
    table = Table(title=title)
    columns: tuple[tuple[str, Literal["left", "right"]], ...] = (
        ("sample", "right"),
        ("result", "left"),
        ("class", "right"),
        ("accept", "right"),
        ("output", "right"),
        ("latency", "right"),
        ("expected vs got", "left"),
    )
    for name, justify in columns:
        table.add_column(name, justify=justify)
    shown = [s for s in result.samples if all_rows or len(result.samples) <= ALL_ROWS_UP_TO or not s.passed]
    for s in shown[:200]:
        detail = ""
        if not s.passed:
            detail = f"{s.note}: {_difference(s, result.classifies)}"
        table.add_row(
            str(s.index),
            "[green]pass[/green]" if s.passed else "[red]FAIL[/red]",
            "-" if s.got_class is None else f"{s.got_class}",
            _num(s.accept_cycle),
            _num(s.output_cycle),
            _num(s.latency),
            detail,
        )
    if shown:
        if len(shown) < len(result.samples):
            table.caption = f"{len(result.samples) - len(shown)} passing samples not listed (--all lists them)"
        console.print(table)
    for message in result.messages:
        console.print(f"[red]{message}[/red]")
    speed = result.cycles_per_second
    lat = [s.latency for s in result.samples if s.latency is not None]
    console.print(
        f"{result.simulator}: {result.passed}/{len(result.samples)} samples equal the golden model"
        + (f"; {result.cycles} cycles in {result.seconds:.2f} s" if result.cycles is not None else "")
        + (f" ({speed:,.0f} cycles/s; build {result.build_seconds:.1f} s)" if speed else "")
        + (f"; first latency {lat[0]} cycles" if lat else "")
    )
    verdict = (
        "[bold green]RTL == golden model: BIT-EXACT[/bold green]"
        if result.ok
        else "[bold red]RTL simulation FAILED[/bold red]"
    )
    console.print(verdict)


def _difference(s: SampleResult, classifies: bool) -> str:
    """A failing sample's values: all of a classifier's; where an image's first differ."""
    if classifies:
        text = f"expected {s.expected.tolist()} class {s.expected_class}"
        return text if s.got is None else text + f"; got {s.got.tolist()} class {s.got_class}"
    if s.got is None:
        return f"expected {s.expected.size} values"
    differ = np.flatnonzero(s.got != s.expected)
    if not differ.size:
        return "the values are equal"
    k = int(differ[0])
    return f"{differ.size} of {s.expected.size} values differ; value {k}: expected {s.expected[k]}, got {s.got[k]}"


def _num(v: int | None) -> str:
    return "-" if v is None else str(v)
