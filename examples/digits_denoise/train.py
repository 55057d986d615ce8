"""Train a denoising autoencoder on 8x8 digits whose decoder is two transposed convolutions.

8x8x1 noisy digit, raw 0..16 -> Rescaling 1/16 -> Conv2D 16 3x3 stride 2 same relu (4x4)
-> Conv2D 16 3x3 stride 2 same relu (2x2x16, the code) -> Conv2DTranspose 16 3x3 stride 2
same relu (4x4) -> Conv2DTranspose 8 3x3 stride 2 same relu (8x8) -> Conv2D 1 3x3 same
sigmoid -> 8x8x1, the clean digit in [0, 1].

The input is the digit with Gaussian noise (sigma `NOISE` in pixel units of 0..16, clipped
to 0..16 and rounded to whole levels, as a 4-bit sensor would give it); the target is the
clean digit /16. The `Rescaling` layer stays in the model, and the transposed convolutions
upsample without multiplying inserted zeros in hardware. `score.py` reports the mean squared
error to the clean digits for the noisy input, Keras float and the hardware.

sklearn's digits, the stratified 80/20 split of the other digit examples. Every training
image appears `COPIES` times with different noise. Run: `python
examples/digits_denoise/train.py [--epochs N] [--out DIR]`. Writes `digits_denoise.keras`
and `test.npz` (x float32 (n, 8, 8, 1) noisy 0..16; y float32 (n, 8, 8, 1) clean /16) to
DIR (default: beside this script) and prints the float MSE. A re-run on CPU gives identical
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
sys.path.insert(0, str(HERE.parent))  # examples/: the shared digits modules
from digits8 import digits_8x8  # noqa: E402
from digits14 import SEED, save_reproducibly  # noqa: E402

NOISE = 3.0
"""Standard deviation of the added noise, in the digits' pixel levels (0..16)."""
COPIES = 4
"""Noisy copies of each training image."""


def noisy(clean: np.ndarray, seed: int) -> np.ndarray:
    """`clean` (in [0, 1]) as raw levels 0..16 with Gaussian noise, clipped and rounded."""
    rng = np.random.default_rng(seed)
    levels = clean * 16.0 + rng.normal(0.0, NOISE, clean.shape)
    return np.clip(np.round(levels), 0.0, 16.0).astype(np.float32)


def build_model() -> keras.Model:
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input(shape=(8, 8, 1), name="noisy"),
            layers.Rescaling(1.0 / 16.0, name="levels"),
            layers.Conv2D(16, 3, strides=2, padding="same", activation="relu", name="enc_1"),
            layers.Conv2D(16, 3, strides=2, padding="same", activation="relu", name="code"),
            layers.Conv2DTranspose(16, 3, strides=2, padding="same", activation="relu", name="dec_1"),
            layers.Conv2DTranspose(8, 3, strides=2, padding="same", activation="relu", name="dec_2"),
            layers.Conv2D(1, 3, padding="same", activation="sigmoid", name="pixels"),
        ],
        name="digits_denoise",
    )


def mse(images: np.ndarray, clean: np.ndarray) -> float:
    """Mean squared error per pixel against the clean digits (both in [0, 1])."""
    return float(np.mean((np.reshape(images, clean.shape) - clean) ** 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--out", type=Path, default=HERE, help="output directory (default: here)")
    args = parser.parse_args()

    keras.utils.set_random_seed(SEED)
    x_train, x_test, _, _ = digits_8x8()
    clean_train = np.concatenate([x_train] * COPIES)
    noisy_train = noisy(clean_train, SEED)
    x, y = noisy(x_test, SEED + 1), x_test.astype(np.float32)
    model = build_model()
    model.compile(optimizer=keras.optimizers.Adam(0.003), loss="mse")
    model.fit(noisy_train, clean_train, epochs=args.epochs, batch_size=32, verbose=0)
    args.out.mkdir(parents=True, exist_ok=True)
    save_reproducibly(model, args.out / "digits_denoise.keras")
    np.savez(args.out / "test.npz", x=x, y=y)
    print(
        f"digits_denoise: MSE to the clean digits, {len(x)} test images: noisy input {mse(x / 16.0, y):.5f}, "
        f"Keras float {mse(model.predict(x, verbose=0), y):.5f}"
    )


if __name__ == "__main__":
    main()
