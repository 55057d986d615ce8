"""Train an LSTM that reads the 8x8 digits row by row.

8 steps of 8 pixels -> LSTM 24 (tanh, sigmoid gates) -> Dense 10 softmax.

The recurrent classifier of the examples: each image row is one time step, the LSTM's state
carries what the rows before it showed, and the last step's state is classified. Same data
and split as digits_dense (sklearn's digits, /16 to [0, 1], stratified 80/20).

Run: `python examples/digits_lstm/train.py [--epochs N] [--out DIR]`. Writes
`digits_lstm.keras` and `test.npz` (x float32 (n, 8, 8), y int64) to DIR (default: beside
this script) and prints the float test accuracy. A re-run on CPU gives identical files.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # examples/: the shared digits8 and digits14 modules
from digits8 import digits_8x8, train_example  # noqa: E402

UNITS = 24


def rows() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The digits as sequences of their 8 rows: (x_train, x_test, y_train, y_test), x (n, 8, 8)."""
    x_train, x_test, y_train, y_test = digits_8x8()
    return x_train[..., 0], x_test[..., 0], y_train, y_test


def build_model() -> keras.Model:
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input(shape=(8, 8), name="rows"),
            layers.LSTM(UNITS, name="lstm"),
            layers.Dense(10, activation="softmax", name="dense"),
        ],
        name="digits_lstm",
    )


if __name__ == "__main__":
    train_example("digits_lstm", build_model, HERE, __doc__, data=rows, epochs=60, fixed_point_check=False)
