"""Train the dense digits example, the 2021 thesis' MNIST net shrunk to sklearn's digits.

64 -> Dense 39 relu -> Dropout 0.2 -> Dense 24 relu -> Dense 10 sigmoid, like the thesis'
dense network (its sigmoid output included). The inputs are the 8x8 images of sklearn's
bundled `load_digits()`, flattened to 64 values and scaled to [0, 1] by /16. The Dropout
layer is there so the example exercises Dropout removal in the frontend.

Optional: `--mnist PATH.npz` (keys x_train, y_train, x_test, y_test, 28x28 images) trains
the same network on real MNIST averaged down to 8x8 (28x28 is padded to 32x32 and each 4x4
block averaged), written to the same output files.

Run: `python examples/digits_dense/train.py [--mnist mnist.npz] [--out DIR]`. Writes
`digits_dense.keras` and `test.npz` to DIR (default: beside this script) and prints the
float test accuracy.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

SEED = 2021
HERE = Path(__file__).resolve().parent


def build_model() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input(shape=(64,), name="pixels"),
            keras.layers.Dense(39, activation="relu", name="dense_1"),
            keras.layers.Dropout(0.2, name="dropout"),
            keras.layers.Dense(24, activation="relu", name="dense_2"),
            keras.layers.Dense(10, activation="sigmoid", name="dense_3"),
        ],
        name="digits_dense",
    )


def digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """sklearn digits, /16 to [0, 1], stratified 80/20 split with a fixed seed."""
    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    return train_test_split(x, data.target, test_size=0.2, stratify=data.target, random_state=SEED)


def downscale_mnist(images: np.ndarray) -> np.ndarray:
    """(N, 28, 28) 0..255 -> (N, 64) in [0, 1]: pad to 32x32, average 4x4 blocks."""
    images = np.asarray(images, dtype=np.float32).reshape(-1, 28, 28) / 255.0
    padded = np.pad(images, ((0, 0), (2, 2), (2, 2)))
    return padded.reshape(-1, 8, 4, 8, 4).mean(axis=(2, 4)).reshape(-1, 64)


def mnist_split(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    with np.load(path) as archive:
        return (
            downscale_mnist(archive["x_train"]),
            downscale_mnist(archive["x_test"]),
            np.asarray(archive["y_train"]).astype(np.int64),
            np.asarray(archive["y_test"]).astype(np.int64),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mnist", type=Path, help="MNIST .npz (x_train, y_train, x_test, y_test)")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--out", type=Path, default=HERE, help="output directory (default: here)")
    args = parser.parse_args()

    keras.utils.set_random_seed(SEED)
    if args.mnist is not None:
        x_train, x_test, y_train, y_test = mnist_split(args.mnist)
        epochs = args.epochs or 10
    else:
        x_train, x_test, y_train, y_test = digits_split()
        epochs = args.epochs or 150

    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(0.003),
        # sigmoid outputs trained one-vs-rest on one-hot targets, as the thesis did
        loss="binary_crossentropy",
        metrics=["categorical_accuracy"],
    )
    y_train_hot = keras.utils.to_categorical(y_train, 10)
    model.fit(x_train, y_train_hot, epochs=epochs, batch_size=16, verbose=0)
    predicted = np.argmax(model.predict(x_test, verbose=0), axis=1)
    accuracy = float(np.mean(predicted == y_test))
    args.out.mkdir(parents=True, exist_ok=True)
    model.save(args.out / "digits_dense.keras")
    np.savez(args.out / "test.npz", x=x_test.astype(np.float32), y=y_test.astype(np.int64))
    print(f"digits_dense: float test accuracy {accuracy:.4f} on {len(x_test)} samples")


if __name__ == "__main__":
    main()
