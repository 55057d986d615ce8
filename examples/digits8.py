"""Shared by the graph examples (resnet_digits, inception_digits): sklearn's digits at 8x8,
the 1,7,8 fixed-point check, and the training recipe.

`train_example` is the whole script once an example has its `build_model(quantized)`:
fixed seeds, Adam (lr 0.003), sparse categorical cross-entropy, batch 32, then the model
and `test.npz` saved reproducibly (identical bytes on a re-run on CPU).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import keras
import numpy as np
from digits14 import SEED, save_reproducibly
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

FRAC_BITS = 8
"""Fractional bits of the fixed-point check (format 1,7,8: step 2^-8, range [-128, 128))."""


def digits_8x8() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """sklearn digits as (n, 8, 8, 1) images, /16 to [0, 1], stratified 80/20 split."""
    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)[..., None]
    return train_test_split(x, data.target, test_size=0.2, stratify=data.target, random_state=SEED)


def fixed(x, frac: int = FRAC_BITS):
    """Round half up to a multiple of 2^-frac, saturate to [-128, 128 - 2^-frac]."""
    step = 2.0**-frac
    return keras.ops.clip(keras.ops.floor(x / step + 0.5) * step, -128.0, 128.0 - step)


def fixed_point_accuracy(
    build_model: Callable[..., keras.Model], model: keras.Model, x: np.ndarray, y: np.ndarray
) -> float:
    """Accuracy with weights, biases and every layer output in the 1,7,8 format
    (`build_model(quantized=True)` rounds every layer output and ends in linear logits)."""
    quantized = build_model(quantized=True)
    for layer in model.layers:
        weights = layer.get_weights()
        if weights:
            rounded = [keras.ops.convert_to_numpy(fixed(w)) for w in weights]
            quantized.get_layer(layer.name).set_weights(rounded)
    predicted = np.argmax(quantized.predict(keras.ops.convert_to_numpy(fixed(x)), verbose=0), axis=1)
    return float(np.mean(predicted == y))


def train_example(
    name: str,
    build_model: Callable[..., keras.Model],
    here: Path,
    doc: str,
    data: Callable[[], tuple[np.ndarray, ...]] = digits_8x8,
    epochs: int = 60,
    fixed_point_check: bool = True,
) -> None:
    """Parse `--epochs`/`--out`, train, save `<name>.keras` and `test.npz`, print accuracies.

    `data()` returns (x_train, x_test, y_train, y_test); `fixed_point_check` needs a
    `build_model(quantized=True)` (the newer examples leave that check to keras2clash's own
    golden model, which covers every layer they use)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--out", type=Path, default=here, help="output directory (default: here)")
    args = parser.parse_args()

    keras.utils.set_random_seed(SEED)
    x_train, x_test, y_train, y_test = data()
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(0.003),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    model.fit(x_train, y_train, epochs=args.epochs, batch_size=32, verbose=0)
    predicted = np.argmax(model.predict(x_test, verbose=0), axis=1)
    accuracy = float(np.mean(predicted == y_test))
    args.out.mkdir(parents=True, exist_ok=True)
    save_reproducibly(model, args.out / f"{name}.keras")
    np.savez(args.out / "test.npz", x=x_test.astype(np.float32), y=y_test.astype(np.int64))
    print(f"{name}: float test accuracy {accuracy:.4f} on {len(x_test)} samples")
    if fixed_point_check:
        print(f"{name}: fixed-point 1,7,8 accuracy {fixed_point_accuracy(build_model, model, x_test, y_test):.4f}")
