"""Train a CNN with two heads on sklearn's 8x8 digits: the digit (a classifier head) and its
value as a number (a regression head), on one trunk.

8x8x1 -> Conv2D 8 3x3 'same' relu -> MaxPooling2D 2x2 -> Flatten -> Dense 24 relu (the trunk)
-> digit: Dense 10 softmax; value: Dense 8 relu -> Dense 1 linear (the digit / 9, in [0, 1]).

The model has two outputs, so the hardware has two AXI4-Stream master ports: `m0_axis`
carries the digit's scores and class, `m1_axis` the value. The inputs are the 8x8 images of
sklearn's bundled `load_digits()` (0..16) scaled to [0, 1] by /16; stratified 80/20 split
(`random_state=2021`, the same split as the other digits examples). Loss: sparse categorical
cross-entropy on the digit plus mean squared error on the value.

Run: `python examples/digits_heads/train.py [--epochs N] [--out DIR]`. Writes
`digits_heads.keras` and `test.npz` (x float32 (n, 8, 8, 1), y_digit int64 labels, y_value
float32 (n, 1) targets: the keys `simulate` reads per output) to DIR (default: beside this
script) and prints the float test accuracy of the digit head and the mean absolute error
of the value head. A re-run on CPU gives identical files.
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
sys.path.insert(0, str(HERE.parent))  # examples/: the shared digits8 and digits14 modules
from digits8 import digits_8x8  # noqa: E402
from digits14 import SEED, save_reproducibly  # noqa: E402


def build_model() -> keras.Model:
    layers = keras.layers
    image = keras.Input(shape=(8, 8, 1), name="image")
    x = layers.Conv2D(8, 3, padding="same", activation="relu", name="conv")(image)
    x = layers.MaxPooling2D(2, name="pool")(x)
    x = layers.Flatten(name="flatten")(x)
    trunk = layers.Dense(24, activation="relu", name="trunk")(x)
    digit = layers.Dense(10, activation="softmax", name="digit")(trunk)
    hidden = layers.Dense(8, activation="relu", name="hidden")(trunk)
    value = layers.Dense(1, name="value")(hidden)
    return keras.Model(image, [digit, value], name="digits_heads")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--out", type=Path, default=HERE, help="output directory (default: here)")
    args = parser.parse_args()

    keras.utils.set_random_seed(SEED)
    x_train, x_test, y_train, y_test = digits_8x8()
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(0.003),
        loss={"digit": "sparse_categorical_crossentropy", "value": "mse"},
    )
    model.fit(x_train, {"digit": y_train, "value": y_train / 9.0}, epochs=args.epochs, batch_size=32, verbose=0)
    digit, value = model.predict(x_test, verbose=0)
    accuracy = float(np.mean(np.argmax(digit, axis=1) == y_test))
    error = float(np.mean(np.abs(value[:, 0] - y_test / 9.0)))
    args.out.mkdir(parents=True, exist_ok=True)
    save_reproducibly(model, args.out / "digits_heads.keras")
    np.savez(
        args.out / "test.npz",
        x=x_test.astype(np.float32),
        y_digit=y_test.astype(np.int64),
        y_value=(y_test / 9.0).astype(np.float32)[:, None],
    )
    print(f"digits_heads: digit head float test accuracy {accuracy:.4f} on {len(x_test)} samples")
    print(f"digits_heads: value head float mean |error| {error:.4f} (values in [0, 1])")


if __name__ == "__main__":
    main()
