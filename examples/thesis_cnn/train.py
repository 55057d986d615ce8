"""Train the convolutional network of the 2021 thesis on sklearn's digits, resized to 14x14.

14x14x1 -> Conv2D 16 3x3 relu -> MaxPooling2D 2x2 -> Conv2D 16 3x3 relu -> MaxPooling2D 2x2
-> Flatten -> Dropout 0.5 -> Dense 10 sigmoid, the thesis' CNN (which used MNIST downscaled
to 14x14). The inputs are the 8x8 images of sklearn's bundled `load_digits()` (0..16),
scaled to [0, 1] by /16 and resized to 14x14 by bilinear interpolation
(`keras.ops.image.resize`, half-pixel centres, no antialiasing); stratified 80/20 split
(`random_state=2021`, the same split as digits_dense). The sigmoid output is trained
one-vs-rest on one-hot targets (binary cross-entropy), as the thesis did.

Run: `python examples/thesis_cnn/train.py [--epochs N] [--out DIR]`. Writes
`thesis_cnn.keras` and `test.npz` (x float32 (n, 14, 14, 1), y int64) to DIR (default:
beside this script) and prints the float test accuracy. Every seed is fixed and the saved
archive is normalised (`save_reproducibly`), so a re-run on CPU gives identical files.
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
    return keras.Sequential(
        [
            keras.Input(shape=(SIZE, SIZE, 1), name="image"),
            keras.layers.Conv2D(16, 3, activation="relu", name="conv_1"),
            keras.layers.MaxPooling2D(2, name="pool_1"),
            keras.layers.Conv2D(16, 3, activation="relu", name="conv_2"),
            keras.layers.MaxPooling2D(2, name="pool_2"),
            keras.layers.Flatten(name="flatten"),
            keras.layers.Dropout(0.5, name="dropout"),
            keras.layers.Dense(10, activation="sigmoid", name="dense"),
        ],
        name="thesis_cnn",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--out", type=Path, default=HERE, help="output directory (default: here)")
    args = parser.parse_args()

    keras.utils.set_random_seed(SEED)
    x_train, x_test, y_train, y_test = digits_14x14()
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(0.003),
        loss="binary_crossentropy",
        metrics=["categorical_accuracy"],
    )
    model.fit(x_train, keras.utils.to_categorical(y_train, 10), epochs=args.epochs, batch_size=32, verbose=0)
    predicted = np.argmax(model.predict(x_test, verbose=0), axis=1)
    accuracy = float(np.mean(predicted == y_test))
    args.out.mkdir(parents=True, exist_ok=True)
    save_reproducibly(model, args.out / "thesis_cnn.keras")
    np.savez(args.out / "test.npz", x=x_test.astype(np.float32), y=y_test.astype(np.int64))
    print(f"thesis_cnn: float test accuracy {accuracy:.4f} on {len(x_test)} samples")


if __name__ == "__main__":
    main()
