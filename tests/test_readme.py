"""The README's claims checked against the tool: the iris timing paragraph and its diagram
against the Clash simulation, the offline cabal recipe against an emitted project, the exit
codes it states.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

import keras2clash

from helpers import needs_toolchain, random_dense_model

ROOT = Path(__file__).resolve().parent.parent
IRIS = ROOT / "examples" / "iris"



@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("m") / "tiny.keras"
    random_dense_model([(3, "relu"), (2, "sigmoid")], n_in=4, seed=2).save(path)
    return path

@pytest.fixture(scope="module")
def tiny_project(tmp_path_factory, tiny_model: Path) -> Path:
    return keras2clash.emit(tiny_model, "1,7,8", tmp_path_factory.mktemp("p") / "net", show=False)


def _readme_timing_claim() -> tuple[re.Match, str]:
    """The README's iris timing paragraph: (parallelism, latency, interval) and the text after it."""
    text = (ROOT / "README.md").read_text()
    head = re.search(r"Timing of the iris example at parallelism `([\d,]+)`, `--pipeline (\d+)`, `--softmax (\w+)` "
                     r"\(latency (\d+), a new input every (\d+) cycles\)", text)
    assert head, "the README's iris timing paragraph"
    return head, text[head.end():]

def _readme_timing_diagram() -> tuple[dict[str, list[str]], dict[str, list[int]]]:
    """(rows, marker cycles) of the README's iris timing diagram."""
    _, after = _readme_timing_claim()
    block = after.split("```", 2)[1]
    lines = block.strip("\n").splitlines()
    cycles = lines[0].split()[1:]
    first = lines[0].index(" 0") + 1  # the column of cycle 0 (values are right-aligned, 5 wide)
    rows: dict[str, list[str]] = {}
    markers: dict[str, list[int]] = {}
    for line in lines[2:]:
        name = line[:first - 1].strip()
        if "^" in line:
            columns = [i - first for i, ch in enumerate(line) if ch == "^"]
            assert all(c % 5 == 0 for c in columns), f"a '^' of {name!r} between two cycles"
            markers[name] = [c // 5 for c in columns]
        else:
            rows[name] = line[first - 3:].split()
    assert all(len(v) == len(cycles) for v in rows.values())
    return rows, markers

@needs_toolchain
def test_readme_iris_timing_matches_the_simulation(tmp_path: Path) -> None:
    head, _ = _readme_timing_claim()
    parallelism, pipeline, softmax = head.group(1), int(head.group(2)), head.group(3)
    latency, interval = int(head.group(4)), int(head.group(5))
    project = keras2clash.emit(IRIS / "iris.keras", "1,7,8", tmp_path / "iris", parallelism, show=False,
                               pipeline=pipeline, softmax=softmax)
    comp = keras2clash.simulate(project, IRIS / "test.npz", 8, keras=False, show=False)
    assert (comp.first_latency, comp.interval) == (latency, interval)
    rows, markers = _readme_timing_diagram()
    from keras2clash.backend.project import load_project
    from keras2clash.data import load_dataset
    from keras2clash.quant import golden
    from keras2clash.verify import simulate, toolchain

    p = load_project(project)
    data = load_dataset(IRIS / "test.npz", p.input_shape, p.n_out).head(8)
    sim = simulate.run_simulator(toolchain.build_simulator(p.root), p.root, golden.quantize_inputs(p.plans, data.x),
                                 p.n_out)
    shown = len(rows["s_axis_tready"])
    accepts = [int(c) for c in sim.accept_cycle if c < shown]
    outputs = [int(c) for c in sim.output_cycle if c < shown]
    assert markers["beat moves"] == accepts
    assert markers["result moves"] == outputs
    assert [i for i, v in enumerate(rows["s_axis_tready"]) if v == "1"] == accepts
    assert [i for i, v in enumerate(rows["m_axis_tvalid"]) if v == "1"] == outputs
    assert [i for i, v in enumerate(rows["m_axis_tdata"]) if v != "-"] == outputs
    # input k is shown from the cycle after input k-1 moved until it moves
    expected = [f"x{sum(1 for a in accepts if a < c)}" for c in range(shown)]
    assert rows["s_axis_tdata"] == expected

def _readme_cabal_recipe() -> list[str]:
    text = (ROOT / "README.md").read_text()
    part = text[text.index("offline with cabal"):]
    return part.split("```sh", 1)[1].split("```", 1)[0].strip().splitlines()

def test_emitted_project_ships_a_repository_free_cabal_config(tiny_project: Path) -> None:
    config = tiny_project / ".cabal" / "config"
    assert config.is_file()
    assert not re.search(r"^\s*repository\b", config.read_text(), re.M)
    recipe = _readme_cabal_recipe()
    assert not any("touch" in line for line in recipe)  # nothing to prepare: the config is there

@needs_toolchain
def test_cabal_recipe_works_after_a_plain_cabal_run(tmp_path: Path) -> None:
    """A first `cabal run` with CABAL_DIR but without preparing a config (which makes cabal
    write its default, Hackage-naming config), then the README's offline recipe."""
    model = random_dense_model([(3, "relu")], n_in=2, seed=9)
    project = keras2clash.emit(model, "1,7,8", tmp_path / "net", show=False)
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    first = subprocess.run(["cabal", "run", "clash", "--", "-iclash_lib", "Top", "--verilog", "-fclash-hdldir", "first"],
                           cwd=project, env={**env, "CABAL_DIR": str(project / ".cabal")},
                           capture_output=True, text=True, timeout=900)
    recipe = " && ".join(line.replace("build/net", str(project)) for line in _readme_cabal_recipe())
    proc = subprocess.run(["bash", "-c", recipe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (first.stderr[-1500:], proc.stderr[-2000:])
    assert list((project / "verilog").rglob("*.v"))
    config = (project / ".cabal" / "config").read_text()
    assert not re.search(r"^\s*repository\b", config, re.M)

def test_usage_and_interrupt_codes_are_in_the_readme() -> None:
    text = (ROOT / "README.md").read_text()
    assert "exits with code 130" in text
