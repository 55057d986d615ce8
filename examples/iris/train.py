"""Train the Iris example: 4 -> Dense 8 relu -> Dense 3 softmax.

The features are standardised with the training split's mean and standard deviation and
the standardised values are what `test.npz` holds: the hardware sees exactly the model's
input, and the model itself stays a plain chain of Dense layers (no Normalization layer,
which keras2clash does not convert).

Run from anywhere: `python examples/iris/train.py`. Writes `iris.keras` and `test.npz`
beside this script and prints the float test accuracy.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_iris  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

SEED = 1
HERE = Path(__file__).resolve().parent


def build_model() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input(shape=(4,), name="features"),
            keras.layers.Dense(8, activation="relu", name="hidden"),
            keras.layers.Dense(3, activation="softmax", name="output"),
        ],
        name="iris",
    )


def main() -> None:
    keras.utils.set_random_seed(SEED)
    data = load_iris()
    x_train, x_test, y_train, y_test = train_test_split(
        data.data, data.target, test_size=0.3, stratify=data.target, random_state=SEED
    )
    mean, std = x_train.mean(axis=0), x_train.std(axis=0)
    x_train = ((x_train - mean) / std).astype(np.float32)
    x_test = ((x_test - mean) / std).astype(np.float32)

    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    model.fit(x_train, y_train, epochs=150, batch_size=16, verbose=0)
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    model.save(HERE / "iris.keras")
    np.savez(HERE / "test.npz", x=x_test, y=y_test.astype(np.int64))
    print(f"iris: float test accuracy {accuracy:.4f} on {len(x_test)} samples")


if __name__ == "__main__":
    main()
