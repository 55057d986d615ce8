"""Outputs that are images or sequences: the core streams one output beat per position out of
AXI4-Stream (m_axis_tlast on an image's last beat), with no class; golden model, Clash
simulation, the HDL testbenches and the hardware model agree on every value and cycle, and the
comparison reports the values' errors as for a regression model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import keras2clash as k2c
from helpers import assert_clash_matches_golden, needs_toolchain, random_dense_model, run_cli
from keras2clash import api
from keras2clash.backend.project import load_project
from keras2clash.errors import K2CError
from keras2clash.hw import hwmodel
from keras2clash.network import load_network
from keras2clash.quant import golden
from keras2clash.report.comparison import error_figures
from keras2clash.verify import rtlsim, testbench, toolchain
from keras2clash.verify.simulate import run_simulator


def conv_autoencoder(seed: int = 0):
    """6x6x1 -> conv, pool -> upsample, conv (sigmoid) -> 6x6x2, random weights."""
    import keras

    layers = keras.layers
    model = keras.Sequential(
        [
            keras.Input((6, 6, 1)),
            layers.Conv2D(3, 3, padding="same", activation="relu", name="enc"),
            layers.MaxPooling2D(2, name="pool"),
            layers.UpSampling2D(2, name="up"),
            layers.Conv2D(2, 3, padding="same", activation="sigmoid", name="dec"),
        ],
        name="tinyae",
    )
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, 0.5, w.shape).astype("float32") for w in model.get_weights()])
    return model


def sequence_tagger(seed: int = 1):
    """A (12, 3) sequence -> causal Conv1D -> Conv1D with a softmax per step: (10, 4) out."""
    import keras

    layers = keras.layers
    model = keras.Sequential(
        [
            keras.Input((12, 3)),
            layers.Conv1D(5, 3, padding="causal", activation="relu", name="feat"),
            layers.Conv1D(4, 3, activation="softmax", name="tags"),
        ],
        name="tagger",
    )
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, 0.6, w.shape).astype("float32") for w in model.get_weights()])
    return model


@pytest.fixture(scope="module")
def autoencoder(tmp_path_factory) -> tuple[Path, Path, np.ndarray]:
    tmp = tmp_path_factory.mktemp("ae")
    model = conv_autoencoder()
    x = np.random.default_rng(2).uniform(0, 1, (12, 6, 6, 1))
    np.savez(tmp / "x.npz", x=x)
    project = k2c.emit(model, "1,4,9", tmp / "net", show=False)
    return project, tmp / "x.npz", model.predict(x, verbose=0).reshape(len(x), -1)


def test_the_plan_streams_an_image_out(autoencoder) -> None:
    """The output is 36 beats of 2 values; the Top has no class and says so in its ports."""
    project_dir, _, _ = autoencoder
    project = load_project(project_dir)
    assert not project.classifies and project.output_beats == 36 and project.n_out == 72
    top = (project.root / "Top.hs").read_text()
    assert "axiStreamBeats" in top and "Classes" not in top and "type OutputBeats = 36" in top
    bits = project.plans[-1].out_fmt.bits
    assert f"m_axis_tdata@  [{2 * bits - 1}:0] out: one beat = 2 output value(s) of {bits} bits" in top


def test_golden_follows_keras_on_an_image_output(autoencoder) -> None:
    project_dir, data, keras_out = autoencoder
    got = k2c.predict(project_dir, data)
    assert got.classes is None and got.output_shape == (6, 6, 2) and got.values.shape == (12, 72)
    assert error_figures(got.values, keras_out).max_abs < 0.01


def test_an_image_output_has_no_class_to_compare(autoencoder) -> None:
    project_dir, data, _ = autoencoder
    with pytest.raises(K2CError, match=r"layer 'dec' is \(6, 6, 2\), not a vector: there is no class"):
        api.simulate(project_dir, data, task="classifier", show=False)


def test_the_testbench_expects_every_output_beat(autoencoder) -> None:
    """expected.hex holds one word per output beat (36 per image), no class bits."""
    project_dir, data, _ = autoencoder
    tb = testbench.write_testbench(project_dir, data, 3)
    bits = load_project(project_dir).plans[-1].out_fmt.hw_bits
    assert (tb.spec.out_beats, tb.spec.out_width, tb.spec.class_bits, tb.spec.tdata_out) == (36, 2, 0, 2 * bits)
    words = (tb.directory / "expected.hex").read_text().split()
    assert len(words) == 3 * 36
    first = testbench.unpack_result(int(words[0], 16), tb.spec)[0]
    assert np.array_equal(first, tb.expected[0, :2])


def test_a_differing_beat_is_reported_with_its_values(autoencoder) -> None:
    """parse_output puts the beats the testbench printed as differing into the sample."""
    project_dir, data, _ = autoencoder
    tb = testbench.write_testbench(project_dir, data, 2)
    spec = tb.spec
    wrong = tb.expected[1].reshape(36, 2).copy()
    wrong[5, 1] += 1
    bad = f"{testbench.pack_values(wrong[5], spec.out_bits):x}"
    last = f"{testbench.pack_values(wrong[35], spec.out_bits):x}"
    first = f"{testbench.pack_values(tb.expected[0, -2:], spec.out_bits):x}"
    lines = ["OUT 0 2 400 " + first + " PASS", "BEAT 1 5 " + bad, "OUT 1 300 700 " + last + " FAIL", "DONE 1 1 800"]
    samples, cycles, messages = rtlsim.parse_output(lines, tb)
    assert [s.passed for s in samples] == [True, False] and cycles == 800 and not messages
    assert samples[1].note == "mismatch" and np.array_equal(samples[1].got, wrong.reshape(-1))


@pytest.mark.toolchain
@needs_toolchain
def test_an_image_output_is_bit_exact_in_clash_and_verilator(autoencoder, capsys) -> None:
    """Clash: golden values and hardware-model cycles (the last output beat of each image),
    back to back and under random gaps and stalls; Verilator: the same values and cycles as
    the Clash simulation under the same stalls; the CLI's table is the regression one."""
    project_dir, data, _ = autoencoder
    project = load_project(project_dir)
    x_raw = golden.quantize_inputs(project.plans, np.load(data)["x"])
    assert_clash_matches_golden(project, x_raw, seed=5)
    timing = hwmodel.timing(project.plans, len(x_raw))
    assert timing.first_latency > 36  # the last of 36 output beats, after the last input beat
    assert hwmodel.timings([project.plans]) == [(timing.first_latency, timing.ii)]  # the batch model too
    exe = toolchain.build_simulator(project.root)
    stressed = run_simulator(
        exe, project.root, x_raw, project.n_out, ["--gap-max", "3", "--seed", "9"], classifies=False
    )
    rtl = api.rtlsim(project_dir, data, "verilator", gap_max=3, seed=9, show=False)
    assert rtl.ok and rtl.passed == len(x_raw)
    assert np.array_equal(rtl.output_cycles(), stressed.output_cycle)
    assert np.array_equal(rtl.accept_cycles(), stressed.accept_cycle)
    code, out = run_cli(["simulate", str(project_dir), "--data", str(data)], capsys)
    assert code == 0 and "max |err| vs Keras" in out and "12/12" in out and "accuracy" not in out


@pytest.mark.toolchain
@needs_toolchain
def test_a_sequence_output_with_a_softmax_per_step(tmp_path: Path) -> None:
    """A Conv1D output (10 steps of 4) with its softmax per step: 10 beats per sequence,
    bit-exact in Clash with the hardware model's cycles; the golden model within the
    output format's resolution and the softmax's table of Keras."""
    model = sequence_tagger()
    x = np.random.default_rng(4).uniform(-1, 1, (8, 12, 3))
    project = load_project(k2c.emit(model, "1,4,11", tmp_path / "net", show=False))
    assert project.output_beats == 10 and project.n_out == 40
    x_raw = golden.quantize_inputs(project.plans, x)
    gold, _ = assert_clash_matches_golden(project, x_raw, seed=2)
    values = project.plans[-1].out_fmt.to_real(gold)
    assert error_figures(values, model.predict(x, verbose=0).reshape(len(x), -1)).max_abs < 0.02


@pytest.mark.toolchain
@needs_toolchain
def test_a_transposed_convolution_decoder_streams_its_image_out(tmp_path: Path) -> None:
    """Strided Conv2D down, Conv2DTranspose (stride 2, 'same') up: an 8x8x1 image out,
    bit-exact in Clash with the hardware model's cycles, close to Keras."""
    import keras

    layers = keras.layers
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            layers.Conv2D(4, 3, strides=2, padding="same", activation="relu", name="down"),
            layers.Conv2DTranspose(3, 3, strides=2, padding="same", activation="relu", name="up"),
            layers.Conv2D(1, 3, padding="same", activation="sigmoid", name="pixels"),
        ],
        name="tdecoder",
    )
    rng = np.random.default_rng(6)
    model.set_weights([rng.normal(0, 0.5, w.shape).astype("float32") for w in model.get_weights()])
    x = rng.uniform(0, 1, (5, 8, 8, 1))
    project = load_project(k2c.emit(model, "1,4,11", tmp_path / "net", show=False))
    assert project.output_beats == 64 and not project.classifies
    gold, _ = assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), seed=4)
    values = project.plans[-1].out_fmt.to_real(gold)
    assert error_figures(values, model.predict(x, verbose=0).reshape(len(x), -1)).max_abs < 0.01


@pytest.mark.toolchain
@needs_toolchain
def test_a_vector_output_without_its_class_is_bit_exact_in_clash_and_verilator(tmp_path, capsys) -> None:
    """`--no-class`: a classifier's scores leave the Top as one beat of values, without the
    class and the comparison tree that takes it, six cycles sooner here (the hardware model's
    figure, which Clash reproduces cycle for cycle): the network is one pipeline, whose input
    register and output queue take the places of Top's two FIFOs; the test set's accuracy is
    the argmax of the scores; Verilator equals both under random gaps and stalls."""
    model = random_dense_model([(6, "relu"), (4, "linear")], n_in=5, seed=4, scale=1.5)
    model.save(tmp_path / "m.keras")
    rng = np.random.default_rng(4)
    x = rng.normal(0, 3, size=(40, 5)).astype(np.float32)
    np.savez(tmp_path / "data.npz", x=x, y=rng.integers(0, 4, 40))
    project_dir = tmp_path / "net"
    args = ["emit", str(tmp_path / "m.keras"), "--format", "1,3,4", "--strategy", "latency", "--no-class"]
    code, out = run_cli([*args, "--out", str(project_dir)], capsys)
    assert code == 0, out
    project = load_project(project_dir)
    assert not project.classifies and project.output_beats == 1 and project.n_out == 4
    top = (project_dir / "Top.hs").read_text()
    assert "K2C.Classify" not in top and "Classes" not in top and "type OutputWidth = 4" in top
    assert "import K2C.Fifo" not in top and "core = network\n" in top
    with_class = load_network(model, "1,3,4", strategy="latency").plans
    assert (hwmodel.timing(with_class).first_latency, hwmodel.timing(project.plans).first_latency) == (14, 8)

    x_raw = golden.quantize_inputs(project.plans, x)
    want, _ = assert_clash_matches_golden(project, x_raw, seed=6)
    code, out = run_cli(["simulate", str(project_dir), "--data", str(tmp_path / "data.npz")], capsys)
    accuracy = np.mean(np.argmax(want, axis=1) == np.load(tmp_path / "data.npz")["y"])
    assert code == 0 and "40/40" in out and f"{100 * accuracy:.2f}%" in out and "latency 8" in out
    k2c.hdl(project_dir, ("verilog",))
    rtl = api.rtlsim(project_dir, tmp_path / "data.npz", "verilator", gap_max=3, seed=4, show=False)
    assert rtl.ok and len(rtl.samples) == rtl.passed == 40
