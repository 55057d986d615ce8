"""The accuracy criterion: at 1,7,8, with emit's defaults, the hardware's accuracy on
every digits example (each has a sigmoid or softmax output) is within 0.25 pt of Keras float.

The hardware's classes are the golden model's (bit for bit: tests/test_examples.py and
tests/test_e2e.py on whole test sets, tests/test_layers_*.py on random models), so they are
counted with the golden model here, on all 1,797 digits (examples/all_digits.py): a test set
of 360 counts in steps of 0.28 pt, too coarse for the criterion. bench/accuracy.py prints
both counts for every example.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CRITERION_POINTS = 0.25


@pytest.fixture(scope="module")
def all_digits():
    sys.path.insert(0, str(EXAMPLES))
    try:
        from all_digits import all_digits
    finally:
        sys.path.remove(str(EXAMPLES))
    return all_digits


@pytest.mark.parametrize(
    "example",
    [
        "digits_dense",
        "thesis_cnn",
        "cnn_variants",
        "mobilenet_digits",
        "resnet_digits",
        "inception_digits",
        "mlp_tanh",
        "se_digits",
        "densenet_digits",
        "digits_lstm",
    ],
)
def test_hardware_accuracy_within_a_quarter_point_of_keras_float(all_digits, example: str) -> None:
    import keras

    from keras2clash import debug

    path = EXAMPLES / example / f"{example}.keras"
    x, y = all_digits(EXAMPLES / example)
    assert len(y) == 1797 and np.array_equal(np.bincount(y), np.bincount(np.asarray(_digit_labels())))
    keras_right = int(
        np.sum(np.argmax(keras.models.load_model(path, compile=False).predict(x, verbose=0), axis=1) == y)
    )
    hardware_right = int(np.sum(debug.predict(path, x, "1,7,8").classes == y))
    below = 100.0 * (keras_right - hardware_right) / len(y)
    assert below <= CRITERION_POINTS, (
        f"{example}: {hardware_right} right against Keras float's {keras_right} ({below:.2f} pt)"
    )
    assert keras_right >= 0.97 * len(y)  # a trained model, not an untrained one agreeing with itself


def _digit_labels() -> np.ndarray:
    from sklearn.datasets import load_digits

    return load_digits().target


def test_all_digits_refuses_a_test_set_that_is_not_the_split(all_digits, tmp_path: Path) -> None:
    folder = tmp_path / "other"
    folder.mkdir()
    test = np.load(EXAMPLES / "thesis_cnn" / "test.npz")
    np.savez(folder / "test.npz", x=test["x"][::-1], y=test["y"][::-1])
    with pytest.raises(ValueError, match="not the digits split"):
        all_digits(folder)
