"""Train a small CNN with a DenseNet block on sklearn's 8x8 digits.

8x8x1 -> stem Conv2D 8 3x3 'same' relu
-> dense block: grow1 Conv2D 4 3x3 'same' relu on the stem's map; cat1 = Concatenate
   [stem, grow1]; grow2 Conv2D 4 3x3 'same' relu on cat1; cat2 = Concatenate
   [stem, grow1, grow2] (the stem's map read again two layers later)
-> MaxPooling2D 2x2 -> Flatten -> Dropout 0.3 -> Dense 10 softmax.

A functional-API model that is not series-parallel (the stem and grow1 feed both
concatenations): the hardware wires it by name, a fork per tensor with several readers and a
FIFO on every merge input, sized by the hardware model. The inputs are the 8x8 images of
sklearn's bundled `load_digits()` (0..16) scaled to [0, 1] by /16 (no resize); stratified
80/20 split (`random_state=2021`, the same split as the other digits examples).

Run: `python examples/densenet_digits/train.py [--epochs N] [--out DIR]`. Writes
`densenet_digits.keras` and `test.npz` (x float32 (n, 8, 8, 1), y int64) to DIR (default:
beside this script) and prints the float test accuracy, and the accuracy of the same network
with every weight, bias and layer output rounded (half up) to a multiple of 2^-8 and saturated
to [-128, 128) (the 1,7,8 fixed-point format). A re-run on CPU gives identical files.
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
    stem = out(layers.Conv2D(8, 3, padding="same", activation="relu", name="stem")(image))
    grow1 = out(layers.Conv2D(4, 3, padding="same", activation="relu", name="grow1")(stem))
    cat1 = out(layers.Concatenate(name="cat1")([stem, grow1]))
    grow2 = out(layers.Conv2D(4, 3, padding="same", activation="relu", name="grow2")(cat1))
    x = out(layers.Concatenate(name="cat2")([stem, grow1, grow2]))
    x = out(layers.MaxPooling2D(2, name="pool")(x))
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dropout(0.3, name="dropout")(x)
    logits = out(layers.Dense(10, activation=None if quantized else "softmax", name="dense")(x))
    return keras.Model(image, logits, name="densenet_digits")


if __name__ == "__main__":
    train_example("densenet_digits", build_model, HERE, __doc__)
