"""End to end through the real toolchain: emit -> ghc-compiled Clash simulation -> compare.

Every test asserts bit-exactness against the golden model on every sample, and the cycle
figures of dense chains against the engine's schedule (K2C.Engine): latency
sum(G*b + 1) from input accepted to output, one output every max(G*b) cycles.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import keras2clash as k2c
from helpers import needs_toolchain, random_dense_model
from keras2clash.backend.project import load_project
from keras2clash.verify import toolchain

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [needs_toolchain, pytest.mark.toolchain]


def _expected_cycles(project_dir: Path) -> tuple[int, int]:
    """A dense chain's closed form (K2C.Dense): each layer G*b steps, D pipeline cycles and
    one into its output queue; one more for each of Top's input and output FIFOs; Top's class
    (and an output softmax) d register stages and one into their queue (K2C.Pipe)."""
    from keras2clash.hw.blocks import class_depth, is_softmax
    from keras2clash.hw.events import softmax_depth

    plans = load_project(project_dir).compute_plans
    last = plans[-1]
    top = (
        class_depth(last.filters) + 1 + (softmax_depth(last.out_fmt.frac, last.filters) + 1 if is_softmax(last) else 0)
    )
    return sum(p.rom_depth + p.pipe_depth + 1 for p in plans) + 2 + top, max(p.rom_depth for p in plans)


def _random_data(path: Path, shape: tuple[int, ...], n_classes: int, n: int, seed: int, spread: float) -> Path:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, spread, (n, *shape)).astype("float32")
    x[0] = 0.0
    x[1] = 1e6  # saturates the input format
    x[2] = -1e6
    np.savez(path, x=x, y=rng.integers(0, n_classes, n))
    return path


@pytest.mark.parametrize(
    ("fmt", "parallelism", "cycles", "layers", "seed"),
    [
        ("1,7,8", [2, 3], [1, 1], [(5, "relu"), (3, "sigmoid")], 3),
        ("1,3,4", [4, 1, 2], [4, 1, 3], [(7, "relu"), (4, "linear"), (3, "softmax")], 4),
        ("1,2,9", [1, 5], [6, 9], [(9, "sigmoid"), (5, "relu")], 5),
    ],
)
def test_random_networks_are_bit_exact(tmp_path: Path, fmt, parallelism, cycles, layers, seed) -> None:
    model = random_dense_model(layers, n_in=6, seed=seed, scale=1.5)
    project = k2c.emit(model, fmt, tmp_path / "net", parallelism, cycles=cycles)
    data = _random_data(tmp_path / "d.npz", (6,), layers[-1][0], 60, seed, spread=4.0)
    comp = k2c.simulate(project, data, keras=False, show=False)
    assert comp.samples == 60
    assert comp.bit_exact == 60
    assert comp.class_match == 60
    latency, interval = _expected_cycles(project)
    assert comp.first_latency == latency
    assert comp.interval == interval


def test_idle_gaps_and_output_stalls_stay_bit_exact(tmp_path: Path) -> None:
    model = random_dense_model([(6, "relu"), (4, "sigmoid")], n_in=5, seed=11, scale=1.5)
    project = k2c.emit(model, "1,4,7", tmp_path / "net", [4, 3])
    data = _random_data(tmp_path / "d.npz", (5,), 4, 80, 11, spread=3.0)
    steady = k2c.simulate(project, data, keras=False, show=False)
    stalled = k2c.simulate(project, data, keras=False, show=False, gap_max=9, seed=5)
    assert steady.bit_exact == stalled.bit_exact == 80
    assert stalled.output_cycles_last > steady.output_cycles_last  # the stalls really happened


def test_flatten_of_a_2d_input(tmp_path: Path) -> None:
    import keras

    rng = np.random.default_rng(7)
    model = keras.Sequential(
        [
            keras.Input((3, 4)),
            keras.layers.Flatten(name="flatten"),
            keras.layers.Dense(5, activation="relu", name="dense"),
            keras.layers.Dense(2, name="out"),
        ]
    )
    model.set_weights([rng.normal(0, 1, w.shape).astype("float32") for w in model.get_weights()])
    project = k2c.emit(model, "1,5,6", tmp_path / "net", [3, 2])
    assert "flatten =\n  Collect.collect (SNat @3)" in (project / "Network.hs").read_text()
    data = _random_data(tmp_path / "d.npz", (3, 4), 2, 25, 7, spread=3.0)
    comp = k2c.simulate(project, data, keras=False, show=False)
    assert comp.bit_exact == 25


def test_iris_example_through_simulation_and_verilog(tmp_path: Path) -> None:
    example = ROOT / "examples" / "iris"
    project = k2c.emit(example / "iris.keras", "1,7,8", tmp_path / "iris", [3, 2])
    comp = k2c.simulate(project, example / "test.npz", show=False)
    assert comp.samples == 45  # the stratified 30% test split of Iris
    assert comp.bit_exact == comp.samples
    assert comp.keras_float_accuracy is not None
    assert comp.sim_accuracy >= comp.keras_float_accuracy - 0.01
    hdl = k2c.hdl(project, ["verilog"])  # includes verilator --lint-only
    assert (hdl["verilog"] / "Top.topEntity" / "iris.v").exists()


def test_demo_digits_all_hdls_via_cli(tmp_path: Path) -> None:
    example = ROOT / "examples" / "digits_dense"
    out = tmp_path / "digits"
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "keras2clash"),
            "run",
            str(example / "digits_dense.keras"),
            "--data",
            str(example / "test.npz"),
            "--out",
            str(out),
            "--json",
            str(report),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    import json

    comp = json.loads(report.read_text())
    assert comp["bit_exact"] == comp["samples"] == 360
    assert comp["sim_accuracy"] >= comp["keras_float_accuracy"] - 0.01
    for language in ("verilog", "vhdl", "systemverilog"):
        assert toolchain.hdl_files(out, language)


def test_cabal_route_works_offline(tmp_path: Path) -> None:
    model = random_dense_model([(3, "relu")], n_in=2, seed=9)
    project = k2c.emit(model, "1,7,8", tmp_path / "net", name="sequential_12")  # digits in the name
    assert (project / ".cabal" / "config").is_file()  # the repository-free config ships with the project
    proc = subprocess.run(
        ["cabal", "run", "clash", "--", "-iclash_lib", "Top", "--verilog", "-fclash-hdldir", "hdl-cabal"],
        cwd=project,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "CABAL_DIR": str(project / ".cabal")},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list((project / "hdl-cabal").rglob("*.v"))


def test_layer_names_that_clash_prelude_exports(tmp_path: Path) -> None:
    import keras

    rng = np.random.default_rng(1)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3, activation="relu", name="d1"), keras.layers.Dense(2, name="map")],
        name="register",
    )
    model.set_weights([rng.normal(0, 1, w.shape).astype("float32") for w in model.get_weights()])
    project = k2c.emit(model, "1,7,8", tmp_path / "net")
    assert "d1_layer p_d1_layer b_d1_layer" in (project / "Network.hs").read_text()
    comp = k2c.simulate(project, _random_data(tmp_path / "d.npz", (4,), 2, 10, 1, 2.0), keras=False, show=False)
    assert comp.bit_exact == 10
