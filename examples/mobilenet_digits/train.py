"""Train a MobileNet-style CNN on sklearn's 8x8 digits.

8x8x1 -> Conv2D 8 3x3 same no-bias -> BN -> ReLU6
-> [DepthwiseConv2D 3x3 same no-bias -> BN -> ReLU6 -> Conv2D 16 1x1 no-bias -> BN -> ReLU6]
-> ZeroPadding2D 1 -> SeparableConv2D 24 3x3 stride 2 valid -> BN -> ReLU6
-> GlobalAveragePooling2D -> Dropout 0.2 -> Dense 10 softmax.

MobileNet v1's building blocks at toy size: a depthwise-separable block written out
(depthwise, batch norm, ReLU6, pointwise), a SeparableConv2D with stride 2 behind an explicit
ZeroPadding2D, batch normalisation after every convolution (folded into it), ReLU6
(`ReLU(max_value=6)`) and global average pooling instead of Flatten. Same data and split as
resnet_digits (sklearn digits 8x8, /16 to [0, 1], stratified 80/20, `random_state=2021`).

Run: `python examples/mobilenet_digits/train.py [--epochs N] [--out DIR]`. Writes
`mobilenet_digits.keras` and `test.npz` (x float32 (n, 8, 8, 1), y int64) to DIR (default:
beside this script) and prints the float test accuracy. A re-run on CPU gives identical files.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # examples/: the shared digits8 and digits14 modules
from digits8 import train_example  # noqa: E402


def build_model() -> keras.Model:
    layers = keras.layers

    def relu6(name: str) -> keras.layers.Layer:
        return layers.ReLU(max_value=6.0, name=name)

    return keras.Sequential(
        [
            keras.Input(shape=(8, 8, 1), name="image"),
            layers.Conv2D(8, 3, padding="same", use_bias=False, name="conv_1"),
            layers.BatchNormalization(name="bn_1"),
            relu6("relu6_1"),
            layers.DepthwiseConv2D(3, padding="same", use_bias=False, name="dw_2"),
            layers.BatchNormalization(name="bn_2"),
            relu6("relu6_2"),
            layers.Conv2D(16, 1, use_bias=False, name="pw_2"),
            layers.BatchNormalization(name="bn_3"),
            relu6("relu6_3"),
            layers.ZeroPadding2D(1, name="pad_4"),
            layers.SeparableConv2D(24, 3, strides=2, name="sep_4"),
            layers.BatchNormalization(name="bn_4"),
            relu6("relu6_4"),
            layers.GlobalAveragePooling2D(name="gap"),
            layers.Dropout(0.2, name="dropout"),
            layers.Dense(10, activation="softmax", name="dense"),
        ],
        name="mobilenet_digits",
    )


if __name__ == "__main__":
    train_example("mobilenet_digits", build_model, HERE, __doc__, epochs=150, fixed_point_check=False)
