"""Train a small CNN that exercises the convolution variants keras2clash supports.

14x14x1 -> Conv2D 8 3x3 'same' no-bias -> BatchNormalization -> ReLU -> AveragePooling2D 2x2
-> Conv2D 16 3x2 stride 2 'same' relu -> MaxPooling2D 3x3 stride 2 'same' -> Flatten
-> Dense 32 no-bias -> BatchNormalization -> ReLU -> Dense 10 softmax.

In one network: 'same' padding with symmetric and asymmetric pads (conv_2: (1, 1, 0, 1),
pool_2: (0, 1, 0, 1)), stride 2, a non-square kernel, average pooling, max pooling with
padding, BatchNormalization folded into a bias-less Conv2D and a bias-less Dense, separate
ReLU layers. Same data and split as thesis_cnn (sklearn digits, bilinear 8x8 -> 14x14,
[0, 1], stratified 80/20, `random_state=2021`).

Run: `python examples/cnn_variants/train.py [--epochs N] [--out DIR]`. Writes
`cnn_variants.keras` and `test.npz` (x float32 (n, 14, 14, 1), y int64) to DIR (default:
beside this script) and prints the float test accuracy. A re-run on CPU gives identical
files.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # examples/: the shared digits14 module
from digits14 import SEED, SIZE, digits_14x14, save_reproducibly  # noqa: E402


def build_model() -> keras.Model:
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input(shape=(SIZE, SIZE, 1), name="image"),
            layers.Conv2D(8, 3, padding="same", use_bias=False, name="conv_1"),
            layers.BatchNormalization(name="bn_1"),
            layers.ReLU(name="relu_1"),
            layers.AveragePooling2D(2, name="pool_1"),
            layers.Conv2D(16, (3, 2), strides=2, padding="same", activation="relu", name="conv_2"),
            layers.MaxPooling2D(3, strides=2, padding="same", name="pool_2"),
            layers.Flatten(name="flatten"),
            layers.Dense(32, use_bias=False, name="dense_1"),
            layers.BatchNormalization(name="bn_2"),
            layers.ReLU(name="relu_2"),
            layers.Dense(10, activation="softmax", name="dense_2"),
        ],
        name="cnn_variants",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--out", type=Path, default=HERE, help="output directory (default: here)")
    args = parser.parse_args()

    keras.utils.set_random_seed(SEED)
    x_train, x_test, y_train, y_test = digits_14x14()
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(0.003),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    model.fit(x_train, y_train, epochs=args.epochs, batch_size=32, verbose=0)
    predicted = np.argmax(model.predict(x_test, verbose=0), axis=1)
    accuracy = float(np.mean(predicted == y_test))
    args.out.mkdir(parents=True, exist_ok=True)
    save_reproducibly(model, args.out / "cnn_variants.keras")
    np.savez(args.out / "test.npz", x=x_test.astype(np.float32), y=y_test.astype(np.int64))
    print(f"cnn_variants: float test accuracy {accuracy:.4f} on {len(x_test)} samples")


if __name__ == "__main__":
    main()
