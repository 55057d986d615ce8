"""RTL simulation of the generated HDL (Verilator, Icarus, GHDL) against the golden model,
the AXI4-Stream handshake under random backpressure, the testbench's own checks, Yosys
synthesis, and the error cases of `testbench` / `rtlsim` / `synth`.

Each example is emitted and put through Clash once (module-scoped fixture); adding an
example is one line in EXAMPLES.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import keras2clash as k2c
from helpers import needs_toolchain
from keras2clash.backend.project import load_project
from keras2clash.errors import K2CError
from keras2clash.verify import rtlsim, testbench, toolchain
from keras2clash.verify.simulate import run_simulator

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [needs_toolchain, pytest.mark.toolchain]

# (example folder, model file, parallelism): one line per example
EXAMPLES = [
    pytest.param(("iris", "iris.keras", [3, 2]), id="iris"),
    pytest.param(("digits_dense", "digits_dense.keras", None), id="digits_dense"),
    # a CNN's Verilog and VHDL build and its whole test set under backpressure take minutes;
    # CNNs reach the RTL simulators in the default run through test_multi_beat_images_in_icarus
    # and the examples' Verilator checks (tests/test_examples.py)
    pytest.param(("thesis_cnn", "thesis_cnn.keras", [8, 8, 5]), id="thesis_cnn", marks=pytest.mark.slow),
]
BACKPRESSURE_IMAGES = 200
GAP_MAX, SEED = 5, 7


@pytest.fixture(scope="module", params=EXAMPLES)
def example(request, tmp_path_factory):
    """(project dir, test set) with Verilog and VHDL generated."""
    folder, model, parallelism = request.param
    data = ROOT / "examples" / folder / "test.npz"
    project = k2c.emit(
        ROOT / "examples" / folder / model, "1,7,8", tmp_path_factory.mktemp(folder) / "net", parallelism
    )
    for language in ("verilog", "vhdl"):
        toolchain.generate_hdl(project, language)
    return Path(project), data


def _tiled(data: Path, out: Path, at_least: int) -> Path:
    """The test set repeated until it has `at_least` images (a long stream of known answers)."""
    with np.load(data) as archive:
        x, y = archive["x"], archive["y"]
    reps = -(-at_least // len(x))
    np.savez(out, x=np.concatenate([x] * reps), y=np.concatenate([y] * reps))
    return out


def _clash_cycles(project: Path, data: Path, limit: int | None, gap_max: int, seed: int):
    """The Clash simulation's (accept, output) cycles and raw outputs for the same stream."""
    from keras2clash.data import load_dataset
    from keras2clash.quant import golden

    p = load_project(project)
    x = golden.quantize_inputs(p.plans, load_dataset(data, p.input_shape, p.n_out).head(limit).x)
    extra = ["--gap-max", str(gap_max), "--seed", str(seed)] if gap_max else []
    return run_simulator(toolchain.build_simulator(project), project, x, p.n_out, extra)


def test_verilator_whole_test_set_under_random_backpressure(example, tmp_path: Path) -> None:
    """The whole test set (tiled to >= 200 images) through Verilator with random tvalid gaps
    and random m_axis_tready: every image once, in order, bit-exact; and the same cycles as
    the Clash simulation fed the same schedule."""
    project, data = example
    stream = _tiled(data, tmp_path / "stream.npz", BACKPRESSURE_IMAGES)
    result = rtlsim.rtlsim(project, stream, "verilator", gap_max=GAP_MAX, seed=SEED)
    n = len(result.samples)
    assert n >= BACKPRESSURE_IMAGES
    assert result.messages == []  # no extra output beat, no tlast_error, no X, no timeout
    assert result.passed == n, [s for s in result.samples if not s.passed][:3]
    assert result.ok
    clash = _clash_cycles(project, stream, None, GAP_MAX, SEED)
    np.testing.assert_array_equal(result.accept_cycles(), clash.accept_cycle)
    np.testing.assert_array_equal(result.output_cycles(), clash.output_cycle)
    back_to_back = _clash_cycles(project, stream, None, 0, 1)
    assert result.output_cycles()[-1] > back_to_back.output_cycle[-1]  # the stalls really happened


@pytest.mark.parametrize("simulator", ["icarus", "ghdl"])
def test_slow_simulators_on_a_handful(example, simulator: str) -> None:
    """Icarus (Verilog) and GHDL (VHDL) on the default handful of samples, back to back:
    bit-exact, and cycle for cycle the Clash simulation."""
    project, data = example
    if simulator == "icarus" and data.parent.name == "thesis_cnn":
        pytest.skip("Icarus runs ~10 cycles/s on the CNN's wide ROM words: see test_icarus_on_the_thesis_cnn (slow)")
    _handful(project, data, simulator)


@pytest.mark.slow
def test_icarus_on_the_thesis_cnn(tmp_path: Path) -> None:
    """The thesis CNN in Icarus: two images back to back (Icarus runs ~10 cycles/s on its
    wide ROM words; run with -m slow)."""
    folder = ROOT / "examples" / "thesis_cnn"
    project = k2c.emit(folder / "thesis_cnn.keras", "1,7,8", tmp_path / "net", [8, 8, 5])
    toolchain.generate_hdl(project, "verilog")
    _handful(Path(project), folder / "test.npz", "icarus", limit=2)


def _handful(project: Path, data: Path, simulator: str, limit: int | None = None) -> None:
    """The simulator's default handful (or `limit` samples): bit-exact, cycle for cycle the Clash
    simulation."""
    result = rtlsim.rtlsim(project, data, simulator, limit)
    expected = rtlsim.SIMULATORS[simulator].default_samples if limit is None else limit
    assert len(result.samples) == expected
    assert result.ok, (result.messages, [s for s in result.samples if not s.passed])
    clash = _clash_cycles(project, data, expected, 0, 1)
    np.testing.assert_array_equal(result.output_cycles(), clash.output_cycle)
    np.testing.assert_array_equal(result.accept_cycles(), clash.accept_cycle)


def test_clash_simulation_under_random_backpressure(example, tmp_path: Path) -> None:
    """The same >= 200-image stream with gaps and stalls through the Clash simulation."""
    project, data = example
    stream = _tiled(data, tmp_path / "stream.npz", BACKPRESSURE_IMAGES)
    comp = k2c.simulate(project, stream, keras=False, show=False, gap_max=GAP_MAX, seed=SEED + 1)
    assert comp.samples >= BACKPRESSURE_IMAGES
    assert comp.bit_exact == comp.samples


def test_multi_beat_images_in_icarus(tmp_path: Path) -> None:
    """An input (3, 4) is 3 beats of 4 values with tlast on the third: Icarus under random
    gaps and stalls, bit-exact and cycle for cycle the Clash simulation."""
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
    project = Path(k2c.emit(model, "1,5,6", tmp_path / "net", [3, 2]))
    data = tmp_path / "d.npz"
    np.savez(data, x=rng.normal(0, 3, (12, 3, 4)).astype("float32"), y=rng.integers(0, 2, 12))
    result = rtlsim.rtlsim(project, data, "icarus", 12, gap_max=4, seed=9)
    assert result.ok and result.passed == 12
    tb = testbench.read_spec(project)
    assert (tb.beats, tb.beat_width) == (3, 4)
    clash = _clash_cycles(project, data, 12, 4, 9)
    np.testing.assert_array_equal(result.accept_cycles(), clash.accept_cycle)
    np.testing.assert_array_equal(result.output_cycles(), clash.output_cycle)


# --- the testbench checks what it claims to check (iris, Icarus: fast) ------------------------


@pytest.fixture(scope="module")
def iris(tmp_path_factory):
    project = k2c.emit(ROOT / "examples" / "iris" / "iris.keras", "1,7,8", tmp_path_factory.mktemp("iris") / "net")
    toolchain.generate_hdl(project, "verilog")
    return Path(project), ROOT / "examples" / "iris" / "test.npz"


def _edit_line(path: Path, index: int, edit) -> None:
    lines = path.read_text().splitlines()
    lines[index] = edit(lines[index])
    path.write_text("\n".join(lines) + "\n")


def test_testbench_reports_a_wrong_expected_value(iris) -> None:
    project, data = iris
    tb = testbench.write_testbench(project, data, 3)
    _edit_line(tb.directory / "expected.hex", 1, lambda h: f"{int(h, 16) ^ 1:0{len(h)}x}")
    result = rtlsim.run_testbench(load_project(project), "icarus", tb)
    assert [s.passed for s in result.samples] == [True, False, True]
    assert result.samples[1].note == "testbench FAIL"  # Python's own decode agrees with golden
    assert not result.ok


def test_misplaced_tlast_raises_the_sticky_error(iris) -> None:
    project, data = iris
    tb = testbench.write_testbench(project, data, 3)
    spec = tb.spec
    # clear tlast on the first beat (a vector input: every beat is an image's last); the
    # sticky flag is a register: it is high from the next cycle on
    _edit_line(tb.directory / "input.hex", 0, lambda h: f"{int(h, 16) & ~(1 << spec.tdata_in):0{len(h)}x}")
    result = rtlsim.run_testbench(load_project(project), "icarus", tb)
    assert any("tlast_error rose in cycle 1" in m for m in result.messages)
    assert not result.ok


def test_synth_counts_the_planned_multipliers(iris) -> None:
    project, _ = iris
    result = k2c.api.synth(project, show=False)
    planned = sum(p.multipliers for p in load_project(project).plans if getattr(p, "multipliers", 0))
    assert result.multipliers == planned > 0
    assert result.flip_flops > 0
    assert result.cells > result.flip_flops


# --- error cases ------------------------------------------------------------------------------


def test_missing_simulator_names_the_package(iris, monkeypatch) -> None:
    project, data = iris
    real = rtlsim.shutil.which
    monkeypatch.setattr(rtlsim.shutil, "which", lambda tool: None if tool == "ghdl" else real(tool))
    with pytest.raises(K2CError, match=r"'ghdl' not found.*Debian package 'ghdl'"):
        rtlsim.rtlsim(project, data, "ghdl")


def test_too_long_for_icarus_is_refused_before_writing(iris) -> None:
    project, data = iris
    tb_dir = project / testbench.TB_DIR
    before = sorted(tb_dir.iterdir()) if tb_dir.exists() else None
    with pytest.raises(K2CError, match=r"above the limit of 100 for icarus"):
        rtlsim.rtlsim(project, data, "icarus", 45, max_cycles=100)
    assert (sorted(tb_dir.iterdir()) if tb_dir.exists() else None) == before


def test_data_that_does_not_fit_is_refused_whole(iris, tmp_path: Path) -> None:
    project, _ = iris
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros((4, 5)), y=np.zeros(4, dtype=int))  # iris has 4 inputs
    before = sorted(p.name for p in project.iterdir())
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "keras2clash"), "testbench", str(project), "--data", str(bad)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "the model expects (N, 4)" in proc.stderr
    assert sorted(p.name for p in project.iterdir()) == before  # nothing half-written
    with pytest.raises(K2CError, match="the model expects"):
        rtlsim.rtlsim(project, bad, "verilator")


@pytest.mark.parametrize("damage", ["missing", "empty", "stale"])
def test_weight_file_problems_are_caught(iris, damage: str) -> None:
    project, _ = iris
    p = load_project(project)
    folder = rtlsim.hdl_folder(p, "verilog")
    victim = sorted(folder.glob("*.mem"))[0]
    saved = victim.read_text()
    try:
        if damage == "missing":
            victim.unlink()
        elif damage == "empty":
            victim.write_text("")
        else:
            victim.write_text(saved.replace("0", "1", 1))
        with pytest.raises(K2CError, match={"missing": "is missing", "empty": "is empty", "stale": "differs"}[damage]):
            rtlsim.check_weight_files(p, folder, "verilog")
    finally:
        victim.write_text(saved)
    assert rtlsim.check_weight_files(p, folder, "verilog") == sorted(f.name for f in folder.glob("*.mem"))
