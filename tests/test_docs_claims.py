"""The documentation's claims checked against the tool: the iris timing paragraph and its
diagram (docs/guide/integration.md) against the Clash simulation and the hardware model, the
offline cabal recipe against an emitted project, the blocks' offline cabal recipe
(docs/architecture/verification.md) against the cabal file, the exit codes
docs/reference/project.md states.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

import keras2clash
from helpers import needs_toolchain, random_dense_model
from keras2clash import procs

ROOT = Path(__file__).resolve().parent.parent
IRIS = ROOT / "examples" / "iris"


@pytest.fixture(scope="module")
def tiny_project(tmp_path_factory, tiny_model: Path) -> Path:
    return keras2clash.emit(tiny_model, "1,7,8", tmp_path_factory.mktemp("p") / "net", show=False)


INTEGRATION_PAGE = ROOT / "docs" / "guide" / "integration.md"


def _docs_timing_claim() -> tuple[re.Match, str]:
    """The iris timing paragraph of docs/guide/integration.md: (parallelism, pipeline, softmax)
    and the text after it."""
    text = INTEGRATION_PAGE.read_text()
    head = re.search(r"Iris emitted at parallelism `([\d,]+)`, `--pipeline (\d+)`, `--softmax (\w+)`", text)
    assert head, "the iris timing paragraph of docs/guide/integration.md"
    return head, text[head.end() :]


def _docs_timing_diagram() -> tuple[dict[str, list[str]], dict[str, list[int]]]:
    """(rows, marker cycles) of the iris timing diagram of docs/guide/integration.md."""
    _, after = _docs_timing_claim()
    block = after.split("```", 2)[1]
    lines = block.strip("\n").splitlines()[1:]  # without the block's language tag
    cycles = lines[0].split()[1:]
    assert cycles == [str(c) for c in range(len(cycles))]
    first = lines[0].index(" 0") + 1  # the column of cycle 0 (values are right-aligned, 5 wide)
    rows: dict[str, list[str]] = {}
    markers: dict[str, list[int]] = {}
    for line in lines[2:]:
        name = line[: first - 1].strip()
        if "^" in line:
            columns = [i - first for i, ch in enumerate(line) if ch == "^"]
            assert all(c % 5 == 0 for c in columns), f"a '^' of {name!r} between two cycles"
            markers[name] = [c // 5 for c in columns]
        else:
            rows[name] = line[first - 3 :].split()
    assert all(len(v) == len(cycles) for v in rows.values())
    return rows, markers


@needs_toolchain
def test_docs_iris_timing_matches_the_simulation(tmp_path: Path) -> None:
    """The diagram's handshakes are the Clash simulation's, cycle for cycle: the beats' and
    results' moves, tready, tvalid and tdata; its latency (first beat to first result) and
    interval (between results) are the simulation's and the hardware model's."""
    head, _ = _docs_timing_claim()
    parallelism, pipeline, softmax = head.group(1), int(head.group(2)), head.group(3)
    project = keras2clash.emit(
        IRIS / "iris.keras", "1,7,8", tmp_path / "iris", parallelism, show=False, pipeline=pipeline, softmax=softmax
    )
    comp = keras2clash.simulate(project, IRIS / "test.npz", 8, keras=False, show=False)
    rows, markers = _docs_timing_diagram()
    moves, results = markers["beat moves"], markers["result moves"]
    assert len(results) >= 2, "the diagram shows two results: a latency and an interval"
    assert (comp.first_latency, comp.interval) == (results[0] - moves[0], results[1] - results[0])
    import json

    from keras2clash.backend.project import load_project
    from keras2clash.data import load_dataset
    from keras2clash.quant import golden
    from keras2clash.verify import simulate, toolchain

    p = load_project(project)
    design = json.loads((p.root / "manifest.json").read_text())["design"]  # the hardware model's figures
    assert (design["latency"], design["interval"]) == (comp.first_latency, comp.interval)
    data = load_dataset(IRIS / "test.npz", p.input_shape, p.n_out).head(8)
    sim = simulate.run_simulator(
        toolchain.build_simulator(p.root), p.root, golden.quantize_inputs(p.plans, data.x), p.n_out
    )
    shown = len(rows["s_axis_tready"])
    accepts = [int(c) for c in sim.accept_cycle if c < shown]
    outputs = [int(c) for c in sim.output_cycle if c < shown]
    assert moves == accepts
    assert results == outputs
    assert [i for i, v in enumerate(rows["s_axis_tready"]) if v == "1"] == accepts
    assert [i for i, v in enumerate(rows["m_axis_tvalid"]) if v == "1"] == outputs
    assert [i for i, v in enumerate(rows["m_axis_tdata"]) if v != "-"] == outputs
    # input k is shown from the cycle after input k-1 moved until it moves
    expected = [f"x{sum(1 for a in accepts if a < c)}" for c in range(shown)]
    assert rows["s_axis_tdata"] == expected


def _docs_cabal_recipe() -> list[str]:
    """The sh block of the offline cabal section of docs/guide/integration.md."""
    text = INTEGRATION_PAGE.read_text()
    part = text[text.index("### Offline build with cabal") :]
    return part.split("```sh", 1)[1].split("```", 1)[0].strip().splitlines()


def test_emitted_project_ships_a_repository_free_cabal_config(tiny_project: Path) -> None:
    config = tiny_project / ".cabal" / "config"
    assert config.is_file()
    assert not re.search(r"^\s*repository\b", config.read_text(), re.M)
    recipe = _docs_cabal_recipe()
    assert recipe and all("CABAL_DIR=$PWD/.cabal" in line for line in recipe if "cabal " in line)
    assert not any("touch" in line for line in recipe)  # nothing to prepare: the config is there


@needs_toolchain
def test_cabal_recipe_works_after_a_plain_cabal_run(tmp_path: Path) -> None:
    """A first `cabal run` with CABAL_DIR but without preparing a config (which makes cabal
    write its default, Hackage-naming config), then the docs' offline recipe (docs/guide/integration.md)."""
    model = random_dense_model([(3, "relu")], n_in=2, seed=9)
    project = keras2clash.emit(model, "1,7,8", tmp_path / "net", show=False)
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    first = subprocess.run(
        ["cabal", "run", "clash", "--", "-iclash_lib", "Top", "--verilog", "-fclash-hdldir", "first"],
        cwd=project,
        env={**env, "CABAL_DIR": str(project / ".cabal")},
        capture_output=True,
        text=True,
        timeout=900,
    )
    recipe = " && ".join(line.replace("build/iris", str(project)) for line in _docs_cabal_recipe())
    proc = subprocess.run(["bash", "-c", recipe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (first.stderr[-1500:], proc.stderr[-2000:])
    assert list((project / "verilog").rglob("*.v"))
    config = (project / ".cabal" / "config").read_text()
    assert not re.search(r"^\s*repository\b", config, re.M)


VERIFICATION_PAGE = ROOT / "docs" / "architecture" / "verification.md"


def _docs_blocks_recipe() -> str:
    """The sh block of docs/architecture/verification.md's section on the blocks' test benches."""
    text = VERIFICATION_PAGE.read_text()
    part = text[text.index("## The blocks' test benches") :]
    return part.split("```sh", 1)[1].split("```", 1)[0].strip()


def test_blocks_recipe_runs_every_test_suite_offline() -> None:
    """The recipe runs every test-suite of the blocks' cabal file, offline, with the
    repository's repository-free config: the one tests/test_blocks.py runs the suites with,
    comments only, like an emitted project's."""
    recipe = _docs_blocks_recipe()
    prefix = "CABAL_DIR=$PWD/.cabal cabal --offline test "
    assert recipe.startswith(prefix) and "\n" not in recipe
    suites = re.findall(r"^test-suite (\S+)", (ROOT / "clash_lib" / "keras2clash-blocks.cabal").read_text(), re.M)
    assert suites and recipe.removeprefix(prefix).split() == suites
    config = (ROOT / ".cabal" / "config").read_text()
    assert all(not line.strip() or line.startswith("--") for line in config.splitlines())
    assert '".cabal" / "config"' in (ROOT / "tests" / "test_blocks.py").read_text()


def test_usage_and_interrupt_codes_are_in_the_docs() -> None:
    """docs/reference/project.md states the exit codes the CLI uses (procs.py's constants)."""
    text = (ROOT / "docs" / "reference" / "project.md").read_text()
    assert f"exits with code {procs.INTERRUPT_EXIT_CODE}" in text
    assert f"{128 + signal.SIGTERM} " in text  # SIGTERM
