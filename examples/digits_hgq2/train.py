"""Train a small HGQ2 CNN, built with HGQ2's default quantizers, on sklearn's 8x8 digits.

8x8x1 -> QConv2D 8 3x3 relu -> MaxPooling2D 2x2 -> QConv2D 12 2x2 relu -> Flatten
-> QDense 10 (logits).

Every quantizer is HGQ2's default (no `QuantizerConfigScope`): each layer's input quantizer
is per element (heterogeneous: every pixel and channel of its input has its own trained
fraction bits, RND, WRAP), its weight quantizers per weight. Training learns the bit-widths
with HGQ2's resource penalty (`beta0`, small); then `hgq.utils.trace_minmax` sets each
element's sign and integer bits from the training set (WRAP quantizers are not trained
there). keras2clash builds each input quantizer as a per-element stage (kinds.quantize,
K2C.Requant) and the network equals HGQ2's own forward pass bit for bit.

The inputs are the 8x8 images of sklearn's bundled `load_digits()` (0..16) scaled to [0, 1]
by /16 (multiples of 1/16: HGQ2's float32 input rounding is exact on them); stratified 80/20
split (`random_state=2021`, the same split as the other digits examples).

Run: `python examples/digits_hgq2/train.py [--epochs N] [--out DIR]` (about a minute on one
core; needs `hgq2`, `pip install 'keras2clash[hgq]'`). Writes `digits_hgq2.keras` and
`test.npz` (x float32 (n, 8, 8, 1), y int64) to DIR (default: beside this script) and prints
the test accuracy of the HGQ2 model (which the hardware computes exactly).
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

EPOCHS, BATCH = 30, 32
BETA = 1e-6  # HGQ2's resource (EBOPs) penalty on the trained bit-widths


def build_model() -> keras.Model:
    from hgq.config import LayerConfigScope
    from hgq.layers import QConv2D, QDense

    layers = keras.layers
    with LayerConfigScope(beta0=BETA):
        image = keras.Input(shape=(8, 8, 1), name="image")
        x = QConv2D(8, 3, activation="relu", name="conv1")(image)
        x = layers.MaxPooling2D(2, name="pool")(x)
        x = QConv2D(12, 2, activation="relu", name="conv2")(x)
        x = layers.Flatten(name="flatten")(x)
        logits = QDense(10, name="dense")(x)
    return keras.Model(image, logits, name="digits_hgq2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--out", type=Path, default=HERE, help="output directory (default: here)")
    args = parser.parse_args()

    from hgq.utils import trace_minmax

    keras.utils.set_random_seed(SEED)
    x_train, x_test, y_train, y_test = digits_8x8()
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(0.003),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit(x_train, y_train, epochs=args.epochs, batch_size=BATCH, verbose=0)
    trace_minmax(model, x_train, batch_size=256, verbose=0)  # WRAP quantizers: sign and integer bits
    predicted = np.argmax(np.asarray(model.predict(x_test, verbose=0)), axis=1)
    args.out.mkdir(parents=True, exist_ok=True)
    save_reproducibly(model, args.out / "digits_hgq2.keras")
    np.savez(args.out / "test.npz", x=x_test.astype(np.float32), y=y_test.astype(np.int64))
    print(f"digits_hgq2: HGQ2 test accuracy {float(np.mean(predicted == y_test)):.4f} on {len(x_test)} samples")


if __name__ == "__main__":
    main()
