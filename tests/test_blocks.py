"""The Clash blocks' own test benches (clash_lib/test/*), run in CI.

Each bench is a cabal test-suite of clash_lib/keras2clash-blocks.cabal (`stream`, `branch`,
`engine`): a randomized simulation of its blocks in Clash, every value and every cycle checked
against an independent reference, that exits non-zero on the first difference. They run here
through cabal, offline, with the repository's repository-free cabal config (.cabal/config), and
build outside the checkout. Then come the HDL checks of the same benches, which need Clash's
Verilog and the simulators: `clash --verilog` of small tops, Verilator lint and yosys' loop
check, and the Clash simulation replayed cycle for cycle on the Verilog in Icarus and Verilator.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import needs_toolchain

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "clash_lib"
TESTS = LIB / "test"
CABAL_FILE = LIB / "keras2clash-blocks.cabal"
SUITES = ("stream", "branch", "engine")
LOOPS = re.compile(r"UNOPTFLAT|ALWCOMBORDER|Circular combinational")


def _run(cmd: list[str], cwd: Path, what: str, timeout: int = 1800, **kwargs) -> str:
    """Run a tool; fail the test with its output's tail when it exits non-zero."""
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout, **kwargs)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{what} failed (exit {proc.returncode})\n{output[-3000:]}"
    return output


def _stanza(kind: str, name: str = "") -> str:
    """The text of one stanza of the cabal file (up to the next unindented line)."""
    text = CABAL_FILE.read_text()
    match = re.search(rf"^{kind}{' ' + name if name else ''}\n((?:[ \t].*\n|--.*\n|\n)*)", text, re.M)
    assert match, f"no '{kind} {name}' in {CABAL_FILE.name}"
    return match.group(1)


def _field(stanza: str, field: str) -> list[str]:
    """A field's values (comma or space separated, continued on more indented lines)."""
    lines = stanza.splitlines()
    for i, line in enumerate(lines):
        match = re.match(rf"(\s*){field}:(.*)", line)
        if match:
            values = match.group(2)
            for more in lines[i + 1 :]:
                if more.strip().startswith("--"):
                    continue
                if not more.strip() or len(more) - len(more.lstrip()) <= len(match.group(1)):
                    break
                values += " " + more
            return [v for v in re.split(r"[\s,]+", values) if v]
    raise AssertionError(f"no {field}")


# --------------------------------------------------------------------- no toolchain needed


def test_library_exposes_every_block() -> None:
    """`cabal build` compiles every K2C block, the engine's parts included."""
    blocks = sorted(f"K2C.{path.stem}" for path in (LIB / "K2C").glob("*.hs"))
    assert sorted(_field(_stanza("library"), "exposed-modules")) == blocks


def test_every_bench_is_a_test_suite() -> None:
    suites = re.findall(r"^test-suite (\S+)", CABAL_FILE.read_text(), re.M)
    assert tuple(suites) == SUITES
    assert not list(TESTS.rglob("*.sh")), "a bench script outside cabal"


def test_engine_case_modules_are_up_to_date(tmp_path: Path) -> None:
    """The committed case modules of the engine suite are what reference.py generates, and the
    cabal file lists each."""
    subprocess.run([sys.executable, TESTS / "engine" / "reference.py", "haskell", tmp_path], check=True)
    generated = {path.name: path.read_text() for path in tmp_path.glob("*.hs")}
    committed = {path.name: path.read_text() for path in (TESTS / "engine").glob("Cases*.hs")}
    assert generated == committed, "run: cd clash_lib/test/engine && python3 reference.py haskell ."
    modules = set(_field(_stanza("test-suite", "engine"), "other-modules"))
    assert {name.removesuffix(".hs") for name in generated} <= modules


# --------------------------------------------------------------------- cabal


@pytest.fixture(scope="module")
def cabal(tmp_path_factory):
    """Run `cabal --offline test SUITE`: the repository's repository-free config copied into a
    temporary CABAL_DIR, the build folder outside the checkout, shared by the suites (the
    library is built once)."""
    root = tmp_path_factory.mktemp("cabal")
    (root / "home").mkdir()
    shutil.copyfile(ROOT / ".cabal" / "config", root / "home" / "config")
    env = {**os.environ, "CABAL_DIR": str(root / "home")}

    def test(suite: str, *options: object, cwd: Path = ROOT, builddir: Path = root / "dist") -> str:
        cmd = [
            "cabal",
            "--offline",
            "test",
            suite,
            f"--builddir={builddir}",
            "--test-show-details=direct",
            *(f"--test-option={option}" for option in options),
        ]
        return _run(cmd, cwd, f"cabal test {suite}", timeout=3600, env=env)

    test.env = env
    return test


def _clash_verilog(source: Path, out: Path, *search: Path, cwd: Path = LIB) -> Path:
    """`clash --verilog` of SOURCE with the blocks and SEARCH on the search path; the HDL
    folder (one subfolder per top entity)."""
    out.mkdir(parents=True, exist_ok=True)
    _run(
        [
            "clash",
            f"-i{LIB}",
            *(f"-i{path}" for path in search),
            source,
            "--verilog",
            "-fclash-no-cache",
            "-fclash-hdldir",
            out / "hdl",
            "-outputdir",
            out / "obj",
        ],
        cwd,
        f"clash --verilog {source.name}",
    )
    return out / "hdl"


def _verilog_of(hdl: Path, top: str) -> Path:
    """The Verilog file that defines module TOP."""
    found = [path for path in hdl.rglob("*.v") if re.search(rf"^module {top}\b", path.read_text(), re.M)]
    assert len(found) == 1, f"module {top}: {found}"
    return found[0]


def _vectors(folder: Path) -> list[tuple[str, Path]]:
    """(top, testbench) of every replay the simulation wrote."""
    return [(tb.stem.removeprefix("tb_"), tb) for tb in sorted(folder.glob("tb_*.v"))]


@needs_toolchain
def test_stream_bench(cabal, tmp_path: Path) -> None:
    """Window, Pad, Pool, Collect: the simulation against the Haskell references, then each
    top's Verilog: Verilator lint, no combinational loop (yosys, bit by bit), and the
    simulation replayed in Icarus."""
    vectors = tmp_path / "cosim"
    vectors.mkdir()
    print(cabal("stream", "--vectors", vectors))

    hdl = _clash_verilog(TESTS / "stream" / "Tops.hs", tmp_path / "tops", TESTS / "stream")
    tops = sorted(hdl.glob("Tops.*"))
    assert tops
    for folder in tops:
        verilog = sorted(p.name for p in folder.glob("*.v"))
        # -Wno-UNOPTFLAT: a window generator's valid follows its input's valid, and Clash packs a
        # stage's (data, ready) pair into one vector, so Verilator (whole vectors) sees a circle
        # through a Pad and its Window that no bit follows; yosys checks bit by bit instead.
        _run(["verilator", "--lint-only", "-Wno-WIDTH", "-Wno-UNOPTFLAT", *verilog], folder, f"lint {folder.name}")
        top = next(folder.glob("*.sdc")).stem  # Clash writes one constraints file, named after the top
        _run(
            [
                "yosys",
                "-q",
                "-p",
                f"read_verilog -sv {' '.join(verilog)}; hierarchy -top {top}; proc; flatten; check -assert",
            ],
            folder,
            f"yosys loop check {folder.name}",
        )

    replays = _vectors(vectors)
    assert len(replays) >= 8
    for top, tb in replays:
        _run(["iverilog", "-o", f"sim_{top}", tb, _verilog_of(hdl, top)], vectors, f"iverilog {top}")
        out = _run(["vvp", "-n", f"sim_{top}"], vectors, f"vvp {top}")
        assert " 0 mismatches" in out, f"{top}: Icarus differs from the Clash simulation\n{out[-2000:]}"


@needs_toolchain
def test_branch_bench(cabal, tmp_path: Path) -> None:
    """Fifo, Branch (fork/join), Merge: the simulation against the cycle rules and Integer
    arithmetic; the tops' Verilog without a combinational loop while a deliberate one is caught;
    the simulation replayed in Icarus and Verilator, and a corrupted expectation caught."""
    vectors = tmp_path / "cosim"
    vectors.mkdir()
    print(cabal("branch", "--vectors", vectors))

    here = TESTS / "branch"
    hdl = _clash_verilog(here / "Tops.hs", tmp_path / "tops", here)
    loop = _clash_verilog(here / "LoopTop.hs", tmp_path / "loop", here)
    for folder in [*sorted(hdl.glob("Tops.*")), *sorted(loop.glob("LoopTop.*"))]:
        verilog = sorted(p.name for p in folder.glob("*.v"))
        lint = _run(["verilator", "--lint-only", "-Wall", "-Wno-fatal", *verilog], folder, f"lint {folder.name}")
        if folder.name.startswith("LoopTop."):
            assert LOOPS.search(lint), f"negative control: no loop reported for {folder.name}"
        else:
            assert not LOOPS.search(lint), f"combinational loop in {folder.name}\n{lint[-2000:]}"
    assert "divSigned" not in _verilog_of(hdl, "average_shift_top").read_text(), "average by 4 built a divider"
    assert "divSigned" in _verilog_of(hdl, "average_divide_top").read_text(), "average by 3: no divider?"

    beats = dict(re.findall(r"^(\w+): (\d+) output beats", (vectors / "beats.txt").read_text(), re.M))
    replays = _vectors(vectors)
    assert sorted(top for top, _ in replays) == sorted(beats)
    for top, tb in replays:
        verilog = _verilog_of(hdl, top)
        _run(["iverilog", "-o", f"ivl_{top}", tb, verilog], vectors, f"iverilog {top}")
        _run(
            [
                "verilator",
                "--binary",
                "--timing",
                "-Wno-fatal",
                "-Wno-WIDTH",
                "-Wno-UNUSEDSIGNAL",
                "--top-module",
                "tb",
                "-Mdir",
                f"vl_{top}",
                "-MAKEFLAGS",
                "OPT_FAST=-O1",
                tb,
                verilog,
            ],
            vectors,
            f"verilator {top}",
        )
        for sim in (["vvp", "-n", f"ivl_{top}"], [vectors / f"vl_{top}" / "Vtb"]):
            out = _run(sim, vectors, f"{sim[0]} {top}")
            assert f" {beats[top]} output beats, 0 mismatches" in out, f"{sim[0]} {top}\n{out[-2000:]}"

    # The replay must be able to fail: one data bit of a valid output flipped.
    corrupt = vectors / "corrupt"
    corrupt.mkdir()
    shutil.copyfile(vectors / "residual_top.in", corrupt / "residual_top.in")
    lines = (vectors / "residual_top.expect").read_text().splitlines()
    row = next(i for i, line in enumerate(lines) if i >= 50 and line.startswith("1") and "0" in line)
    lines[row] = lines[row].replace("0", "1", 1)
    (corrupt / "residual_top.expect").write_text("\n".join(lines) + "\n")
    out = _run(["vvp", "-n", vectors / "ivl_residual_top"], corrupt, "vvp (corrupted expectation)")
    assert "mismatches" in out and " 0 mismatches" not in out, "corrupted expectation not caught"


@needs_toolchain
def test_engine_bench(cabal, tmp_path: Path) -> None:
    """Engine, Dense, Conv: the cases of reference.py in the simulation, every value and cycle
    checked by reference.py; then the case `convtop` (ConvTop.hs) and the hand-written example
    (clash_lib/example) through Clash and Verilator, their traces equal to the simulation's."""
    cases = tmp_path / "cases"
    print(cabal("engine", cases))
    here = TESTS / "engine"

    convtop = tmp_path / "convtop"
    convtop.mkdir()
    shutil.copyfile(cases / "convtop.mem", convtop / "convtop.mem")
    verilog = _clash_verilog(here / "ConvTop.hs", convtop, here, cwd=convtop) / "ConvTop.topEntity"
    trace = _verilator_run(verilog, "convtop", here / "convtop_tb.cpp", convtop / "obj", [cases / "convtop.in"])
    want = [line for line in (cases / "convtop.out").read_text().splitlines() if line[:2] in ("A ", "O ")]
    assert trace.splitlines() == want, "convtop: the Verilator trace differs from the Clash simulation"
    assert sum(line.startswith("O ") for line in want) > 0

    example = tmp_path / "example"
    # Only the blocks on the search path: the example's folder is the working directory already
    # (naming it too would make Clash see each weight file twice).
    verilog = _clash_verilog(LIB / "example" / "Top.hs", example, cwd=LIB / "example")
    out = _verilator_run(
        verilog / "Top.topEntity",
        "network",
        here / "example_tb.cpp",
        example / "obj",
        [],
        stdin=(LIB / "example" / "input.txt").read_text(),
    )
    assert out == (LIB / "example" / "expected.txt").read_text(), "example: Verilator output differs from expected.txt"


def _verilator_run(
    folder: Path, top: str, testbench: Path, objdir: Path, args: list[Path], stdin: str | None = None
) -> str:
    """Lint FOLDER's Verilog, build it with a C++ testbench, run it from FOLDER (where the
    weight files are); its standard output."""
    verilog = sorted(p.name for p in folder.glob("*.v"))
    _run(["verilator", "--lint-only", "-Wno-WIDTH", "--top-module", top, *verilog], folder, f"lint {top}")
    _run(
        [
            "verilator",
            "--cc",
            "--exe",
            "--build",
            "-Wno-WIDTH",
            "-Wno-fatal",
            "--top-module",
            top,
            "-Mdir",
            objdir,
            "-MAKEFLAGS",
            "OPT_FAST=-O1",
            *verilog,
            testbench,
        ],
        folder,
        f"verilator {top}",
    )
    proc = subprocess.run(
        [str(objdir / f"V{top}"), *map(str, args)], cwd=folder, input=stdin, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


# --------------------------------------------------------------------- mutants

MUTANTS = [
    (
        "fifo-ready-when-full",
        "Fifo.hs",
        "readyIn  = register True  (step <$> accepted <*> removed <*> readyIn <*> (not <$> nearFull) <*> pure True)",
        "readyIn  = register True  (step <$> accepted <*> removed <*> readyIn <*> pure True <*> pure True)",
    ),
    (
        "fifo-ready-passthrough",
        "Fifo.hs",
        "fifo SNat (input, readyOut) = (output, readyIn)",
        "fifo SNat (input, readyOut) = (output, readyIn .||. readyOut)",
    ),
    ("fork-ungated", "Branch.hs", "offer otherReady = mux otherReady input (pure Nothing)", "offer _ = input"),
    ("join-ungated", "Branch.hs", "take1  = readyOut .&&. valid2", "take1  = readyOut"),
    (
        "average-ties-down",
        "Merge.hs",
        "+ fromInteger (shiftL count (natToNum @f))",
        "+ fromInteger (shiftL count (natToNum @f)) - 1",
    ),
    (
        "widen-no-shift",
        "Merge.hs",
        "shiftL (resize (unSF x)) (natToNum @fo - natToNum @f)",
        "shiftL (resize (unSF x)) 0",
    ),
]


@pytest.mark.slow
@needs_toolchain
@pytest.mark.parametrize(("name", "block", "rule", "broken"), MUTANTS, ids=[m[0] for m in MUTANTS])
def test_branch_bench_catches_a_broken_rule(
    cabal, tmp_path: Path, name: str, block: str, rule: str, broken: str
) -> None:
    """A copy of the blocks with one rule of Fifo, Branch or Merge broken: the `branch` suite
    must fail (a test that cannot fail proves nothing). A whole library build each."""
    copy = tmp_path / "clash_lib"
    shutil.copytree(LIB, copy, ignore=shutil.ignore_patterns("dist-newstyle"))
    source = copy / "K2C" / block
    text = source.read_text()
    assert text.count(rule) == 1, f"mutant {name} does not apply"
    source.write_text(text.replace(rule, broken))
    proc = subprocess.run(
        [
            "cabal",
            "--offline",
            "test",
            "branch",
            f"--builddir={tmp_path / 'dist'}",
            "--disable-optimization",
            "--test-show-details=direct",
        ],
        cwd=copy,
        env=cabal.env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"mutant {name} survived"
    assert re.search(r"^FAIL ", output, re.M), (
        f"mutant {name}: the suite failed without a failing case\n{output[-2000:]}"
    )
