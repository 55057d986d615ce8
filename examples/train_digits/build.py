"""The on-chip training examples: untrained networks and their digits, for `keras2clash train`.

- `digits28.keras`: 784-98-64-10 (ReLU, softmax), the shape of the training accelerator this
  follows, on sklearn's digits resized to 28x28 (bilinear, as the LeNet-style examples do);
- `digits8.keras`: 64-16-10 on the 8x8 digits, small enough for CI.

The weights are Keras' He-normal initialisation under a fixed seed (the trainer's initial
weights); the data is the examples' stratified 80/20 split, saved as `train*.npz` and
`test*.npz` (`x`, `y`). Run from the repository root:

    .venv/bin/python examples/train_digits/build.py
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import keras  # noqa: E402
import numpy as np  # noqa: E402
from digits8 import digits_8x8  # noqa: E402
from digits14 import SEED, save_reproducibly  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402


def digits_28x28() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """sklearn digits, /16 to [0, 1], bilinear 8x8 -> 28x28, flattened, stratified 80/20 split."""
    data = load_digits()
    images = (data.images / 16.0).astype(np.float32)[..., None]
    resized = keras.ops.image.resize(images, (28, 28), interpolation="bilinear")
    x = np.clip(keras.ops.convert_to_numpy(resized), 0.0, 1.0).astype(np.float32).reshape(len(images), -1)
    return train_test_split(x, data.target, test_size=0.2, stratify=data.target, random_state=SEED)


def untrained(name: str, sizes: list[int]) -> keras.Model:
    keras.utils.set_random_seed(SEED)
    inputs = keras.Input((sizes[0],), name="pixels")
    h = inputs
    for i, n in enumerate(sizes[1:-1]):
        h = keras.layers.Dense(n, activation="relu", kernel_initializer="he_normal", name=f"hidden_{i + 1}")(h)
    outputs = keras.layers.Dense(sizes[-1], activation="softmax", kernel_initializer="he_normal", name="classes")(h)
    return keras.Model(inputs, outputs, name=name)


def main() -> None:
    for name, sizes, split in (
        ("digits28", [784, 98, 64, 10], digits_28x28()),
        ("digits8", [64, 16, 10], tuple(a.reshape(len(a), -1) if a.ndim > 1 else a for a in digits_8x8())),
    ):
        x_train, x_test, y_train, y_test = split
        save_reproducibly(untrained(name, sizes), HERE / f"{name}.keras")
        np.savez_compressed(HERE / f"train_{name}.npz", x=x_train.astype(np.float32), y=y_train.astype(np.int64))
        np.savez_compressed(HERE / f"test_{name}.npz", x=x_test.astype(np.float32), y=y_test.astype(np.int64))
        print(f"{name}: {len(x_train)} training and {len(x_test)} test samples")


if __name__ == "__main__":
    main()
