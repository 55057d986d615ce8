"""The shipped examples with branches, depthwise or 1-D layers, each on its whole test set:
golden == Verilator under random backpressure on every image, hardware accuracy within
0.5 pt of Keras float; golden == Clash simulation (back to back, and under random input gaps
and output stalls) and the hardware model's accept and output cycles equal to the
simulation's on the first `clash_images` images, 20 by default (the Clash simulation costs
about a third of a second per image of these networks; Verilator runs the whole set in seconds).

mobilenet_digits (depthwise, separable, ReLU6, BatchNorm, zero padding, global pooling,
softmax), digits_lstm (a recurrent layer) and jet_transformer (attention, layer normalization)
run by default; inception_digits and resnet_digits (their Concatenate and residual
Adds are in the random graphs of tests/test_graph.py by default, the branch blocks' Verilog in
the block bench of tests/test_blocks.py), mlp_tanh, conv1d_waves, se_digits (its gated
Multiply is in tests/test_graph.py by default), densenet_digits (its wiring is in
tests/test_dag.py by default) and digits_hgq2 (its golden model against HGQ2 on the whole set
and a per-element quantized CNN in Clash are in tests/test_hgq_elements.py by default) with
`-m slow`, where the Clash simulation takes the whole set too (and digits_lstm's,
jet_transformer's balanced to 96 multipliers as bench/fpga.py places and routes it, with
serial layer normalizations, and waves_gru: two stacked GRUs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers import needs_toolchain
from keras2clash.hw import hwmodel
from keras2clash.quant import golden

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


WHOLE = 360
"""Images of every example's test set."""


@needs_toolchain
@pytest.mark.parametrize(
    ("example", "parallelism", "clash_images"),
    [
        pytest.param("resnet_digits", [4, 4, 4, 6, 6, 6, 5], WHOLE, marks=pytest.mark.slow),
        pytest.param("inception_digits", [4, 3, 3, 5, 2, 5], WHOLE, marks=pytest.mark.slow),
        ("mobilenet_digits", [4, 4, 8, 4, 6, 5], 20),
        pytest.param("mlp_tanh", [8, 6, 5], WHOLE, marks=pytest.mark.slow),
        pytest.param("se_digits", [4, 2, 4, 6, 5], WHOLE, marks=pytest.mark.slow),
        pytest.param("densenet_digits", [4, 2, 2, 5], WHOLE, marks=pytest.mark.slow),
        pytest.param("conv1d_waves", [4, 6, 4, 2], WHOLE, marks=pytest.mark.slow),
        pytest.param("digits_hgq2", [4, 4, 5], WHOLE, marks=pytest.mark.slow),
        ("digits_lstm", [8, 4], 20),
        pytest.param("digits_lstm", [8, 4], WHOLE, marks=pytest.mark.slow, id="digits_lstm-whole"),
        pytest.param("waves_gru", [4, 8, 2], WHOLE, marks=pytest.mark.slow),
        ("jet_transformer", [2, 1, 1, 1, 2, 2, 2, 1], 20),
        pytest.param("jet_transformer", "96", WHOLE, marks=pytest.mark.slow, id="jet_transformer-whole"),
    ],
)
def test_example_whole_test_set(tmp_path: Path, example: str, parallelism: list[int] | str, clash_images: int) -> None:
    """`parallelism`: each compute layer's, or the multiplier budget (a device or a number) the
    design is balanced to (`--dsp-budget`: the design placed and routed, with serial
    normalizations)."""
    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.data import load_dataset
    from keras2clash.frontend.keras_ref import keras_outputs
    from keras2clash.verify import toolchain
    from keras2clash.verify.simulate import run_simulator

    out = tmp_path / example
    knobs = {"dsp_budget": parallelism} if isinstance(parallelism, str) else {"parallelism": parallelism}
    api.emit(EXAMPLES / example / f"{example}.keras", "1,7,8", out, show=False, **knobs)
    data = EXAMPLES / example / "test.npz"
    project = load_project(out)
    dataset = load_dataset(data, project.input_shape, project.n_out)
    assert len(dataset.x) == WHOLE

    rtl = api.rtlsim(out, data, "verilator", gap_max=3, seed=11, show=False)
    assert rtl.ok and len(rtl.samples) == rtl.passed == WHOLE
    x_raw = golden.quantize_inputs(project.plans, dataset.x)
    _, classes = golden.predict(project.plans, project.params, x_raw)
    keras_classes = np.argmax(keras_outputs(project.source_model, dataset.x), axis=1)
    assert np.mean(keras_classes == dataset.y) - np.mean(classes == dataset.y) <= 0.005

    comparison = api.simulate(out, data, clash_images, keras=False, show=False)
    assert comparison.samples == comparison.bit_exact == clash_images
    t = hwmodel.timing(project.plans, clash_images)
    sim = run_simulator(toolchain.build_simulator(project.root), project.root, x_raw[:clash_images], project.n_out)
    assert np.array_equal(sim.accept_cycle, t.accept_cycle) and np.array_equal(sim.output_cycle, t.output_cycle)
    stressed = api.simulate(out, data, clash_images, gap_max=5, seed=7, keras=False, show=False)
    assert stressed.bit_exact == clash_images


def _image_example(tmp_path: Path, example: str, clash_images: int, verilator: bool):
    """An image-output example at 1,7,8: the Clash simulation equals the golden model on
    every output pixel of its first `clash_images` images, back to back and under random gaps
    and stalls, with the hardware model's cycles; with `verilator`, Verilator too on the whole
    test set under random backpressure. Returns the test set's arrays, the hardware's outputs
    (the golden model's, as reals) and Keras float's."""
    from helpers import assert_clash_matches_golden
    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.frontend.keras_ref import keras_outputs

    folder = EXAMPLES / example
    out, data = tmp_path / example, folder / "test.npz"
    api.emit(folder / f"{example}.keras", "1,7,8", out, show=False)
    project = load_project(out)
    with np.load(data) as loaded:
        arrays = dict(loaded)
    x = arrays["x"]
    assert len(x) == WHOLE and project.output_beats == 64

    x_raw = golden.quantize_inputs(project.plans, x)
    if clash_images:
        assert_clash_matches_golden(project, x_raw[:clash_images], seed=7)
    if verilator:
        rtl = api.rtlsim(out, data, "verilator", gap_max=3, seed=11, show=False)
        assert rtl.ok and len(rtl.samples) == rtl.passed == WHOLE
    hardware = project.plans[-1].out_fmt.to_real(golden.run(project.plans, project.params, x_raw))
    return arrays, hardware, keras_outputs(project.source_model, x)


@needs_toolchain
@pytest.mark.parametrize(("clash_images", "verilator"), [(3, False), pytest.param(WHOLE, True, marks=pytest.mark.slow)])
def test_the_autoencoder_example_scores_anomalies_as_keras_does(
    tmp_path: Path, clash_images: int, verilator: bool
) -> None:
    """digits_autoencoder (an image output, pooling and upsampling): `_image_example` on 3
    images (about four seconds an image in Clash: the whole test set with -m slow, where
    Verilator runs it too); the hardware's anomaly score has the ROC AUC of Keras float
    within 0.005 on the whole test set."""
    from sklearn.metrics import roc_auc_score

    from helpers import script_module

    folder = EXAMPLES / "digits_autoencoder"
    anomaly_scores = script_module(folder / "train.py", "digits_autoencoder_train").anomaly_scores
    arrays, hardware, floats = _image_example(tmp_path, "digits_autoencoder", clash_images, verilator)
    x, anomaly = arrays["x"], arrays["anomaly"]
    float_auc = roc_auc_score(anomaly, anomaly_scores(floats, x))
    hardware_auc = roc_auc_score(anomaly, anomaly_scores(hardware, x))
    assert float_auc > 0.9 and abs(hardware_auc - float_auc) <= 0.005


@needs_toolchain
@pytest.mark.parametrize(("clash_images", "verilator"), [(0, False), pytest.param(WHOLE, True, marks=pytest.mark.slow)])
def test_the_denoising_example_cleans_digits_as_keras_does(tmp_path: Path, clash_images: int, verilator: bool) -> None:
    """digits_denoise (Rescaling at the input, two stride-2 Conv2DTranspose layers, an image
    output): by default the golden model on the whole test set (the transposed convolution's
    Clash build is in tests/test_layers_transpose.py), with -m slow `_image_example` on the
    whole test set in Clash and Verilator. The hardware's outputs are as close to the clean
    digits as Keras float's (mean squared error within 2% of float's, which is more than
    40% below the noisy input's)."""
    from helpers import script_module

    mse = script_module(EXAMPLES / "digits_denoise" / "train.py", "digits_denoise_train").mse
    arrays, hardware, floats = _image_example(tmp_path, "digits_denoise", clash_images, verilator)
    x, clean = arrays["x"], arrays["y"]
    noisy, float_mse, hardware_mse = mse(x / 16.0, clean), mse(floats, clean), mse(hardware, clean)
    assert float_mse < 0.6 * noisy and abs(hardware_mse - float_mse) <= 0.02 * float_mse
    assert np.max(np.abs(hardware - floats.reshape(hardware.shape))) < 0.02
