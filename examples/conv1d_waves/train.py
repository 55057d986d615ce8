"""Train a Conv1D sequence classifier on synthetic waveforms (sine, square, triangle, sawtooth).

64x1 -> Conv1D 8 k5 causal relu -> MaxPooling1D 2 -> Conv1D 12 k3 dilation 2 same relu
-> AveragePooling1D 2 -> ZeroPadding1D 1 -> Conv1D 16 k3 stride 2 valid relu
-> GlobalMaxPooling1D -> Dense 4 softmax.

A time-series model of the kind people put next to a sensor: 1-D convolutions with causal
and 'same' padding, a dilated convolution, a strided one behind an explicit ZeroPadding1D,
1-D max and average pooling and global max pooling. The data is generated here with a fixed
seed (no download): 2400 waveforms of 64 samples, 600 per class, each with a random
frequency (1.5 to 5 periods per window), phase and amplitude (0.5 to 1), plus Gaussian noise
(standard deviation 0.1); stratified split (`random_state=2021`) with 360 test samples.

Run: `python examples/conv1d_waves/train.py [--epochs N] [--out DIR]`. Writes
`conv1d_waves.keras` and `test.npz` (x float32 (n, 64, 1), y int64) to DIR (default: beside
this script) and prints the float test accuracy. A re-run on CPU gives identical files.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # examples/: the shared digits8 and digits14 modules
from digits8 import train_example  # noqa: E402
from digits14 import SEED  # noqa: E402

STEPS = 64
PER_CLASS = 600
CLASSES = ("sine", "square", "triangle", "sawtooth")


def waveforms() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The synthetic data set: (x_train, x_test, y_train, y_test), x as (n, 64, 1) float32."""
    rng = np.random.default_rng(SEED)
    t = np.arange(STEPS) / STEPS
    xs, ys = [], []
    for label in range(len(CLASSES)):
        periods = rng.uniform(1.5, 5.0, size=(PER_CLASS, 1))
        phase = rng.uniform(0.0, 1.0, size=(PER_CLASS, 1))
        amplitude = rng.uniform(0.5, 1.0, size=(PER_CLASS, 1))
        u = (periods * t + phase) % 1.0  # position within the period, 0..1
        wave = [np.sin(2 * np.pi * u), np.where(u < 0.5, 1.0, -1.0), 4 * np.abs(u - 0.5) - 1, 2 * u - 1][label]
        xs.append(amplitude * wave + rng.normal(0.0, 0.1, size=wave.shape))
        ys.append(np.full(PER_CLASS, label))
    x = np.concatenate(xs).astype(np.float32)[..., None]
    y = np.concatenate(ys).astype(np.int64)
    return train_test_split(x, y, test_size=360, stratify=y, random_state=SEED)


def build_model() -> keras.Model:
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input(shape=(STEPS, 1), name="signal"),
            layers.Conv1D(8, 5, padding="causal", activation="relu", name="conv_1"),
            layers.MaxPooling1D(2, name="pool_1"),
            layers.Conv1D(12, 3, padding="same", dilation_rate=2, activation="relu", name="conv_2"),
            layers.AveragePooling1D(2, name="pool_2"),
            layers.ZeroPadding1D(1, name="pad_3"),
            layers.Conv1D(16, 3, strides=2, activation="relu", name="conv_3"),
            layers.GlobalMaxPooling1D(name="gmp"),
            layers.Dense(len(CLASSES), activation="softmax", name="dense"),
        ],
        name="conv1d_waves",
    )


if __name__ == "__main__":
    train_example("conv1d_waves", build_model, HERE, __doc__, data=waveforms, epochs=80, fixed_point_check=False)
