"""Train a small Inception-style CNN (one block of three parallel branches) on sklearn's 8x8 digits.

8x8x1 -> stem Conv2D 8 3x3 'same' relu
-> Inception block, three branches of the stem's output joined by Concatenate (channels):
   branch1x1:  Conv2D 6 1x1 relu
   branch3x3:  Conv2D 6 1x1 relu -> Conv2D 10 3x3 'same' relu
   branchpool: MaxPooling2D 3x3 stride 1 'same' -> Conv2D 4 1x1 relu
   -> 6 + 10 + 4 = 20 channels
-> MaxPooling2D 2x2 -> Flatten -> Dropout 0.3 -> Dense 10 softmax.

A functional-API model whose graph forks into branches of different depths and channel
counts and joins them again, for the frontend, golden model and hardware tests. The inputs
are the 8x8 images of sklearn's bundled `load_digits()` (0..16) scaled to [0, 1] by /16 (no
resize); stratified 80/20 split (`random_state=2021`, the same split as the other digits
examples).

Run: `python examples/inception_digits/train.py [--epochs N] [--out DIR]`. Writes
`inception_digits.keras` and `test.npz` (x float32 (n, 8, 8, 1), y int64) to DIR (default:
beside this script) and prints the float test accuracy, and the accuracy of the same network
with every weight, bias and layer output rounded (half up) to a multiple of 2^-8 and
saturated to [-128, 128) (the 1,7,8 fixed-point format). A re-run on CPU gives identical
files.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # examples/: the shared digits8 and digits14 modules
from digits8 import fixed, train_example  # noqa: E402


def build_model(quantized: bool = False) -> keras.Model:
    """The network; `quantized=True` rounds every layer output with `fixed` (Lambda layers)
    and ends in linear logits instead of softmax (the hardware drops the final softmax)."""
    layers = keras.layers

    def out(tensor):
        return layers.Lambda(fixed)(tensor) if quantized else tensor

    def conv(filters: int, kernel: int, name: str) -> keras.layers.Layer:
        return layers.Conv2D(filters, kernel, padding="same", activation="relu", name=name)

    image = keras.Input(shape=(8, 8, 1), name="image")
    stem = out(conv(8, 3, "stem")(image))

    branch1x1 = out(conv(6, 1, "branch1x1")(stem))
    branch3x3 = out(conv(6, 1, "branch3x3_reduce")(stem))
    branch3x3 = out(conv(10, 3, "branch3x3")(branch3x3))
    branchpool = out(layers.MaxPooling2D(3, strides=1, padding="same", name="branchpool")(stem))
    branchpool = out(conv(4, 1, "branchpool_proj")(branchpool))
    x = out(layers.Concatenate(axis=-1, name="mixed")([branch1x1, branch3x3, branchpool]))

    x = out(layers.MaxPooling2D(2, name="pool")(x))
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dropout(0.3, name="dropout")(x)
    logits = out(layers.Dense(10, activation=None if quantized else "softmax", name="dense")(x))
    return keras.Model(image, logits, name="inception_digits")


if __name__ == "__main__":
    train_example("inception_digits", build_model, HERE, __doc__)
