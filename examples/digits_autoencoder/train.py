"""Train a convolutional autoencoder for anomaly detection on 8x8 digits.

8x8x1 -> Conv2D 8 k3 same relu -> MaxPooling2D 2 -> Conv2D 8 k3 same relu -> MaxPooling2D 2
-> Conv2D 4 k1 relu (the code: 2x2x4, 16 values) -> UpSampling2D 2 -> Conv2D 8 k3 same relu
-> UpSampling2D 2 -> Conv2D 8 k3 same relu -> Conv2D 1 k3 same sigmoid -> 8x8x1.

The network reconstructs its input, so its output is an image: the hardware streams the
64 output pixels out as it streams the input in. It is trained on every digit but one
(`ANOMALY`, the 4s); an image's score is its mean squared reconstruction error, and the 4s,
never seen in training, reconstruct worse. `score.py` reports the ROC AUC of that score on
the test set for Keras float and for the hardware's outputs.

sklearn's digits (/16 to [0, 1]), the stratified 80/20 split of the other digit examples;
the test set keeps all ten digits. Run: `python examples/digits_autoencoder/train.py
[--epochs N] [--out DIR]`. Writes `digits_autoencoder.keras` and `test.npz` (x float32
(n, 8, 8, 1); y = x, the reconstruction targets; anomaly bool (n,), the 4s) to DIR (default:
beside this script) and prints the float ROC AUC. A re-run on CPU gives identical files.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # examples/: the shared digits modules
from digits8 import digits_8x8  # noqa: E402
from digits14 import SEED, save_reproducibly  # noqa: E402

ANOMALY = 4
"""The digit left out of training: the anomalies of the test set."""


def build_model() -> keras.Model:
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input(shape=(8, 8, 1), name="image"),
            layers.Conv2D(8, 3, padding="same", activation="relu", name="enc_1"),
            layers.MaxPooling2D(2, name="pool_1"),
            layers.Conv2D(8, 3, padding="same", activation="relu", name="enc_2"),
            layers.MaxPooling2D(2, name="pool_2"),
            layers.Conv2D(4, 1, activation="relu", name="code"),
            layers.UpSampling2D(2, name="up_1"),
            layers.Conv2D(8, 3, padding="same", activation="relu", name="dec_1"),
            layers.UpSampling2D(2, name="up_2"),
            layers.Conv2D(8, 3, padding="same", activation="relu", name="dec_2"),
            layers.Conv2D(1, 3, padding="same", activation="sigmoid", name="pixels"),
        ],
        name="digits_autoencoder",
    )


def anomaly_scores(reconstructed: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Each image's mean squared reconstruction error."""
    n = len(x)
    return np.mean((np.reshape(reconstructed, (n, -1)) - np.reshape(x, (n, -1))) ** 2, axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=80)
    parser.add_argument("--out", type=Path, default=HERE, help="output directory (default: here)")
    args = parser.parse_args()

    keras.utils.set_random_seed(SEED)
    x_train, x_test, y_train, y_test = digits_8x8()
    normal = x_train[y_train != ANOMALY]
    model = build_model()
    model.compile(optimizer=keras.optimizers.Adam(0.003), loss="mse")
    model.fit(normal, normal, epochs=args.epochs, batch_size=32, verbose=0)
    anomaly = y_test == ANOMALY
    auc = roc_auc_score(anomaly, anomaly_scores(model.predict(x_test, verbose=0), x_test))
    args.out.mkdir(parents=True, exist_ok=True)
    save_reproducibly(model, args.out / "digits_autoencoder.keras")
    x = x_test.astype(np.float32)
    np.savez(args.out / "test.npz", x=x, y=x, anomaly=anomaly)
    print(f"digits_autoencoder: float ROC AUC {auc:.4f} ({int(anomaly.sum())} anomalies in {len(x)} test images)")


if __name__ == "__main__":
    main()
