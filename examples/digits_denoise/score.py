"""Mean squared error of the digits denoiser to the clean digits, in Keras float and in hardware.

Emits the model (`--format`, default 1,7,8), runs the Clash simulation of the whole test set
(which must equal the golden model bit for bit on every output pixel), and compares each
output with the clean digit, for the noisy input itself, Keras float and the hardware.
Run after train.py: `python examples/digits_denoise/score.py [--format F]`.
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

import keras2clash as k2c  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from train import mse  # noqa: E402


def scores(fmt: str, folder: Path, simulate: bool = True) -> dict[str, float | int]:
    """MSE to the clean digits of the noisy input, Keras float and the hardware on test.npz;
    the bit-exact count when `simulate`."""
    data = HERE / "test.npz"
    with np.load(data) as arrays:
        x, clean = arrays["x"], arrays["y"]
    model_path = HERE / "digits_denoise.keras"
    project = k2c.emit(model_path, fmt, folder / "digits_denoise", show=False)
    hardware = k2c.predict(project, x).values
    floats = keras.saving.load_model(model_path).predict(x, verbose=0)
    result: dict[str, float | int] = {
        "noisy_mse": mse(x / 16.0, clean),
        "float_mse": mse(floats, clean),
        "hardware_mse": mse(hardware, clean),
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
    print(f"MSE to the clean digits, {r['images']} test images:")
    print(f"  noisy input          {r['noisy_mse']:.5f}")
    print(f"  Keras float          {r['float_mse']:.5f}")
    print(
        f"  hardware {args.format:<11} {r['hardware_mse']:.5f}  (Clash simulation bit-exact on {r['bit_exact']}/{r['images']})"
    )
    print(f"  max |hardware - float| per pixel {r['max_abs_error']:.5f}")


if __name__ == "__main__":
    main()
