"""Train a small ResNet-style CNN (two residual blocks) on sklearn's 8x8 digits.

8x8x1 -> stem Conv2D 8 3x3 'same' relu
-> block 1: Conv2D 8 3x3 'same' relu -> Conv2D 8 3x3 'same' linear; Add with the block
   input (identity shortcut); ReLU
-> block 2: Conv2D 12 3x3 'same' relu -> Conv2D 12 3x3 'same' linear; Add with a 1x1
   Conv2D 12 linear of the block input (projection shortcut, 8 -> 12 channels); ReLU
-> MaxPooling2D 2x2 -> Flatten -> Dropout 0.3 -> Dense 10 softmax.

A functional-API model whose graph branches and joins again (two Add layers), for the
frontend, golden model and hardware tests. The inputs are the 8x8 images of sklearn's
bundled `load_digits()` (0..16) scaled to [0, 1] by /16 (no resize); stratified 80/20 split
(`random_state=2021`, the same split as the other digits examples).

Run: `python examples/resnet_digits/train.py [--epochs N] [--out DIR]`. Writes
`resnet_digits.keras` and `test.npz` (x float32 (n, 8, 8, 1), y int64) to DIR (default:
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

    def conv(filters: int, kernel: int, name: str, activation: str | None = None) -> keras.layers.Layer:
        return layers.Conv2D(filters, kernel, padding="same", activation=activation, name=name)

    image = keras.Input(shape=(8, 8, 1), name="image")
    x = out(conv(8, 3, "stem", "relu")(image))

    # block 1: identity shortcut
    y = out(conv(8, 3, "block1_conv1", "relu")(x))
    y = out(conv(8, 3, "block1_conv2")(y))
    x = out(layers.Add(name="block1_add")([y, x]))
    x = out(layers.ReLU(name="block1_relu")(x))

    # block 2: 1x1 projection shortcut, 8 -> 12 channels
    y = out(conv(12, 3, "block2_conv1", "relu")(x))
    y = out(conv(12, 3, "block2_conv2")(y))
    shortcut = out(conv(12, 1, "block2_shortcut")(x))
    x = out(layers.Add(name="block2_add")([y, shortcut]))
    x = out(layers.ReLU(name="block2_relu")(x))

    x = out(layers.MaxPooling2D(2, name="pool")(x))
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dropout(0.3, name="dropout")(x)
    logits = out(layers.Dense(10, activation=None if quantized else "softmax", name="dense")(x))
    return keras.Model(image, logits, name="resnet_digits")


if __name__ == "__main__":
    train_example("resnet_digits", build_model, HERE, __doc__)
