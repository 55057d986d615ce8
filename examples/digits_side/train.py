"""Train a classifier of two inputs on sklearn's 8x8 digits: the image, and a vector of side
features (its ink profile: the mean of each row and of each column), merged after a trunk each.

image 8x8x1 -> Conv2D 8 3x3 'same' relu -> MaxPooling2D 2x2 -> Flatten -> Dense 16 relu;
profile (16,) -> Dense 8 relu; Concatenate -> Dense 10 softmax.

The model has two inputs, so the hardware has two AXI4-Stream slave ports: `s0_axis` takes the
image a pixel a beat, `s1_axis` the profile in one beat, each in its own format. The images are
sklearn's bundled `load_digits()` (0..16) scaled to [0, 1] by /16; stratified 80/20 split
(`random_state=2021`, the same split as the other digits examples).

Run: `python examples/digits_side/train.py [--epochs N] [--out DIR]`. Writes `digits_side.keras`
and `test.npz` (x_image float32 (n, 8, 8, 1), x_profile float32 (n, 16), y int64 labels: the
keys `simulate` reads per input) to DIR (default: beside this script) and prints the float
test accuracy. A re-run on CPU gives identical files.
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


def ink_profile(images: np.ndarray) -> np.ndarray:
    """The mean of each row, then of each column, of (n, 8, 8, 1) images: (n, 16)."""
    x = images[..., 0]
    return np.concatenate([x.mean(axis=2), x.mean(axis=1)], axis=1).astype(np.float32)


def build_model() -> keras.Model:
    layers = keras.layers
    image = keras.Input(shape=(8, 8, 1), name="image")
    profile = keras.Input(shape=(16,), name="profile")
    x = layers.Conv2D(8, 3, padding="same", activation="relu", name="conv")(image)
    x = layers.MaxPooling2D(2, name="pool")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(16, activation="relu", name="embed")(x)
    p = layers.Dense(8, activation="relu", name="profile_embed")(profile)
    merged = layers.Concatenate(name="merge")([x, p])
    out = layers.Dense(10, activation="softmax", name="digit")(merged)
    return keras.Model([image, profile], out, name="digits_side")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--out", type=Path, default=HERE, help="output directory (default: here)")
    args = parser.parse_args()

    keras.utils.set_random_seed(SEED)
    x_train, x_test, y_train, y_test = digits_8x8()
    model = build_model()
    model.compile(optimizer=keras.optimizers.Adam(0.003), loss="sparse_categorical_crossentropy")
    model.fit([x_train, ink_profile(x_train)], y_train, epochs=args.epochs, batch_size=32, verbose=0)
    scores = model.predict([x_test, ink_profile(x_test)], verbose=0)
    accuracy = float(np.mean(np.argmax(scores, axis=1) == y_test))
    args.out.mkdir(parents=True, exist_ok=True)
    save_reproducibly(model, args.out / "digits_side.keras")
    np.savez(
        args.out / "test.npz",
        x_image=x_test.astype(np.float32),
        x_profile=ink_profile(x_test),
        y=y_test.astype(np.int64),
    )
    print(f"digits_side: float test accuracy {accuracy:.4f} on {len(x_test)} samples")


if __name__ == "__main__":
    main()
