"""Train an MLP with tanh, LeakyReLU and BatchNormalization after the activations on sklearn's 8x8 digits.

8x8x1 -> Flatten -> Dense 32 tanh -> BatchNormalization -> Dense 24 -> LeakyReLU(0.1)
-> BatchNormalization -> Dropout 0.2 -> Dense 10 softmax.

The layers hls4ml users bring in an MLP and that keras2clash cannot fold away: the
BatchNormalization layers come *after* a non-linear activation, so they are per-feature
multiply-adds in hardware; tanh is a table, LeakyReLU a quantized slope, softmax a real
softmax at the output (exponent table, reciprocal). Same data and split as digits_dense
(sklearn digits, /16 to [0, 1], stratified 80/20, `random_state=2021`).

Run: `python examples/mlp_tanh/train.py [--epochs N] [--out DIR]`. Writes `mlp_tanh.keras`
and `test.npz` (x float32 (n, 8, 8, 1), y int64) to DIR (default: beside this script) and
prints the float test accuracy. A re-run on CPU gives identical files.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # examples/: the shared digits8 and digits14 modules
from digits8 import train_example  # noqa: E402


def build_model() -> keras.Model:
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input(shape=(8, 8, 1), name="image"),
            layers.Flatten(name="flatten"),
            layers.Dense(32, activation="tanh", name="dense_1"),
            layers.BatchNormalization(name="bn_1"),
            layers.Dense(24, name="dense_2"),
            layers.LeakyReLU(negative_slope=0.1, name="leaky_2"),
            layers.BatchNormalization(name="bn_2"),
            layers.Dropout(0.2, name="dropout"),
            layers.Dense(10, activation="softmax", name="dense_3"),
        ],
        name="mlp_tanh",
    )


if __name__ == "__main__":
    train_example("mlp_tanh", build_model, HERE, __doc__, epochs=80, fixed_point_check=False)
