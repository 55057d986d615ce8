"""Train two stacked GRUs on synthetic waveforms (sine, square, triangle, sawtooth).

32x1 -> GRU 16 (every step's state) -> GRU 16 (the last step's) -> Dense 4 softmax.

A stacked recurrent sequence classifier on conv1d_waves' data (generated with the same fixed
seed, no download), each window taken every other sample (32 steps): the first GRU's states
are the second's input sequence, and the second's last state is classified.

Run: `python examples/waves_gru/train.py [--epochs N] [--out DIR]`. Writes `waves_gru.keras`
and `test.npz` (x float32 (n, 32, 1), y int64) to DIR (default: beside this script) and
prints the float test accuracy. A re-run on CPU gives identical files.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # examples/: the shared digits8 and digits14 modules
from digits8 import train_example  # noqa: E402

STEPS = 32
CLASSES = 4


def _conv1d_waves():
    """examples/conv1d_waves/train.py as a module (its `waveforms`)."""
    spec = importlib.util.spec_from_file_location("conv1d_waves_train", HERE.parent / "conv1d_waves" / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def waves() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """conv1d_waves' windows, every other sample: (x_train, x_test, y_train, y_test), x (n, 32, 1)."""
    x_train, x_test, y_train, y_test = _conv1d_waves().waveforms()
    return x_train[:, ::2], x_test[:, ::2], y_train, y_test


def build_model() -> keras.Model:
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input(shape=(STEPS, 1), name="signal"),
            layers.GRU(16, return_sequences=True, name="gru_1"),
            layers.GRU(16, name="gru_2"),
            layers.Dense(CLASSES, activation="softmax", name="dense"),
        ],
        name="waves_gru",
    )


if __name__ == "__main__":
    train_example("waves_gru", build_model, HERE, __doc__, data=waves, epochs=80, fixed_point_check=False)
