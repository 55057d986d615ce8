"""Convolutional networks end to end: golden model == Clash simulation, bit for bit.

In CI: the thesis CNN on its whole test set, its Table 1
configurations against the thesis' latencies (20 images back to back each), idle gaps and
output stalls, and small random networks for every layer option (same padding, strides,
average and max pooling, batch-norm folding, no bias, non-divisor parallelism, cycles > 1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import keras2clash as k2c
from helpers import needs_toolchain
from keras2clash.frontend.keras_ref import keras_outputs

ROOT = Path(__file__).resolve().parent.parent
THESIS = ROOT / "examples" / "thesis_cnn"
VARIANTS = ROOT / "examples" / "cnn_variants"
pytestmark = [needs_toolchain, pytest.mark.toolchain]

THESIS_TABLE1 = {(1, 1, 1): 2804, (2, 2, 2): 1631, (4, 4, 2): 1047, (8, 8, 5): 755}
"""The 2021 thesis' Table 1: latency in cycles from the first input pixel to the output."""


@pytest.mark.parametrize("images", [pytest.param(360, marks=pytest.mark.slow), 90])
def test_thesis_cnn_test_set_bit_exact(tmp_path: Path, images: int) -> None:
    """The thesis CNN's Clash simulation equals the golden model on `images` of the test set (all
    360 under -m slow), and the golden model's accuracy on the whole set is within 1 pt of Keras'."""
    data = np.load(THESIS / "test.npz")
    project = k2c.emit(THESIS / "thesis_cnn.keras", "1,7,8", tmp_path / "cnn", [8, 8, 5])
    comp = k2c.simulate(project, THESIS / "test.npz", images, keras=False, show=False)
    assert comp.samples == comp.bit_exact == images
    golden_classes = k2c.predict(project, data["x"]).classes
    keras_classes = np.argmax(keras_outputs(THESIS / "thesis_cnn.keras", data["x"]), axis=1)
    assert np.mean(golden_classes == data["y"]) >= np.mean(keras_classes == data["y"]) - 0.01


@pytest.mark.parametrize("parallelism", list(THESIS_TABLE1))
def test_thesis_table1_latency_at_most_the_thesis(tmp_path: Path, parallelism) -> None:
    project = k2c.emit(THESIS / "thesis_cnn.keras", "1,7,8", tmp_path / "cnn", list(parallelism))
    comp = k2c.simulate(project, THESIS / "test.npz", 20, keras=False, show=False)
    assert comp.bit_exact == 20  # 20 images back to back, no reset
    assert comp.first_latency <= THESIS_TABLE1[parallelism]
    assert comp.interval <= comp.first_latency


def test_thesis_cnn_with_idle_gaps_and_stalls(tmp_path: Path) -> None:
    project = k2c.emit(THESIS / "thesis_cnn.keras", "1,7,8", tmp_path / "cnn", [4, 3, 2], cycles=[3, 16, 7])
    steady = k2c.simulate(project, THESIS / "test.npz", 24, keras=False, show=False)
    gaps = k2c.simulate(project, THESIS / "test.npz", 24, keras=False, show=False, gap_max=6, seed=9)
    assert steady.bit_exact == gaps.bit_exact == 24
    assert gaps.output_cycles_last > steady.output_cycles_last


def test_cnn_variants_example_bit_exact(tmp_path: Path) -> None:
    project = k2c.emit(VARIANTS / "cnn_variants.keras", "1,7,8", tmp_path / "v")
    comp = k2c.simulate(project, VARIANTS / "test.npz", 60, show=False)
    assert comp.bit_exact == 60
    assert comp.sim_accuracy >= comp.keras_float_accuracy - 0.05  # 60 samples: 3 may flip


def _random_cnn(layers, input_shape, seed):
    import keras

    rng = np.random.default_rng(seed)
    model = keras.Sequential([keras.Input(input_shape), *layers])
    model.set_weights(
        [
            rng.normal(0, 0.7, w.shape).astype("float32")
            if "variance" not in v.path
            else rng.uniform(0.5, 2.0, w.shape).astype("float32")
            for w, v in zip(model.get_weights(), model.weights)
        ]
    )
    return model


def _cases():
    from keras import layers as L

    return {
        "same_stride2_nobias": (
            [
                L.Conv2D(3, 3, strides=2, padding="same", use_bias=False, activation="relu", name="c"),
                L.Flatten(name="f"),
                L.Dense(3, name="d"),
            ],
            (7, 6, 2),
            [2, 3],
            [5, 4],
        ),
        "avgpool_batchnorm": (
            [
                L.Conv2D(4, (2, 3), name="c"),
                L.BatchNormalization(name="bn"),
                L.ReLU(name="r"),
                L.AveragePooling2D(2, name="p"),
                L.Flatten(name="f"),
                L.Dense(2, activation="sigmoid", name="d"),
            ],
            (7, 9, 1),
            [3, 1],
            [1, 2],
        ),
        "maxpool_same_strides": (
            [
                L.Conv2D(2, 3, padding="same", name="c", activation="sigmoid"),
                L.MaxPooling2D(3, strides=2, padding="same", name="p"),
                L.Conv2D(3, 1, name="c1"),
                L.Flatten(name="f"),
                L.Dense(4, name="d"),
            ],
            (6, 5, 3),
            [2, 3, 3],
            [27, 1, 7],
        ),
    }


@pytest.mark.parametrize("case", ["same_stride2_nobias", "avgpool_batchnorm", "maxpool_same_strides"])
def test_random_cnns_for_every_layer_option(tmp_path: Path, case: str) -> None:
    layers, shape, pes, cycles = _cases()[case]
    model = _random_cnn(layers, shape, seed=len(case))
    project = k2c.emit(model, "1,4,7", tmp_path / "net", pes, cycles=cycles)
    rng = np.random.default_rng(3)
    x = rng.normal(0, 3, (25, *shape)).astype("float32")
    x[0] = 100.0  # saturates the input format
    n_out = model.output_shape[-1]
    np.savez(tmp_path / "d.npz", x=x, y=rng.integers(0, n_out, 25))
    comp = k2c.simulate(project, tmp_path / "d.npz", keras=False, show=False, gap_max=3)
    assert comp.bit_exact == 25
