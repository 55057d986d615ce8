"""Train a small CNN with a squeeze-and-excitation block on sklearn's 8x8 digits.

8x8x1 -> stem Conv2D 8 3x3 'same' relu
-> squeeze-and-excitation: GlobalAveragePooling2D -> Dense 4 relu -> Dense 8 sigmoid
   -> Reshape (1, 1, 8); Multiply with the stem's map (each channel scaled per image)
-> Conv2D 12 3x3 'same' relu -> MaxPooling2D 2x2 -> Flatten -> Dropout 0.3 -> Dense 10 softmax.

A functional-API model whose merge broadcasts a per-image gate over a map: the hardware
repeats the gate's one beat at each of the map's 64 positions while the map waits for it in
its branch FIFO. The inputs are the 8x8 images of sklearn's bundled `load_digits()` (0..16)
scaled to [0, 1] by /16 (no resize); stratified 80/20 split (`random_state=2021`, the same
split as the other digits examples).

Run: `python examples/se_digits/train.py [--epochs N] [--out DIR]`. Writes
`se_digits.keras` and `test.npz` (x float32 (n, 8, 8, 1), y int64) to DIR (default: beside
this script) and prints the float test accuracy, and the accuracy of the same network with
every weight, bias and layer output rounded (half up) to a multiple of 2^-8 and saturated to
[-128, 128) (the 1,7,8 fixed-point format). A re-run on CPU gives identical files.
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

    image = keras.Input(shape=(8, 8, 1), name="image")
    x = out(layers.Conv2D(8, 3, padding="same", activation="relu", name="stem")(image))

    # squeeze-and-excitation: one scale per channel and image, computed from the map itself
    g = out(layers.GlobalAveragePooling2D(name="squeeze")(x))
    g = out(layers.Dense(4, activation="relu", name="reduce")(g))
    g = out(layers.Dense(8, activation="sigmoid", name="excite")(g))
    g = layers.Reshape((1, 1, 8), name="gate")(g)
    x = out(layers.Multiply(name="scale")([x, g]))

    x = out(layers.Conv2D(12, 3, padding="same", activation="relu", name="conv")(x))
    x = out(layers.MaxPooling2D(2, name="pool")(x))
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dropout(0.3, name="dropout")(x)
    logits = out(layers.Dense(10, activation=None if quantized else "softmax", name="dense")(x))
    return keras.Model(image, logits, name="se_digits")


if __name__ == "__main__":
    train_example("se_digits", build_model, HERE, __doc__)
