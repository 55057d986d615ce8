"""ROC AUC of the digits autoencoder's anomaly score, in Keras float and in hardware.

Emits the model (`--format`, default 1,7,8), runs the Clash simulation of the whole test set
(which must equal the golden model bit for bit on every output pixel), and scores each image
by its mean squared reconstruction error, computed from Keras float outputs and from the
hardware's. Run after train.py: `python examples/digits_autoencoder/score.py [--format F]`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402

import keras2clash as k2c  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from train import anomaly_scores  # noqa: E402


def scores(fmt: str, folder: Path, simulate: bool = True) -> dict[str, float | int]:
    """Float and hardware ROC AUC on test.npz; the bit-exact count when `simulate`."""
    data = HERE / "test.npz"
    with np.load(data) as arrays:
        x, anomaly = arrays["x"], arrays["anomaly"]
    model_path = HERE / "digits_autoencoder.keras"
    project = k2c.emit(model_path, fmt, folder / "digits_autoencoder", show=False)
    hardware = k2c.predict(project, x).values
    floats = keras.saving.load_model(model_path).predict(x, verbose=0)
    result: dict[str, float | int] = {
        "float_auc": float(roc_auc_score(anomaly, anomaly_scores(floats, x))),
        "hardware_auc": float(roc_auc_score(anomaly, anomaly_scores(hardware, x))),
        "max_abs_error": float(np.max(np.abs(hardware - floats.reshape(len(x), -1)))),
        "images": len(x),
    }
    if simulate:
        result["bit_exact"] = k2c.simulate(project, data, show=False).bit_exact
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", default="1,7,8")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        r = scores(args.format, Path(tmp))
    print(f"ROC AUC, 4s as anomalies, {r['images']} test images:")
    print(f"  Keras float          {r['float_auc']:.4f}")
    print(
        f"  hardware {args.format:<11} {r['hardware_auc']:.4f}  (Clash simulation bit-exact on {r['bit_exact']}/{r['images']})"
    )
    print(f"  max |hardware - float| per pixel {r['max_abs_error']:.5f}")


if __name__ == "__main__":
    main()
