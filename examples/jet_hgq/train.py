"""Train the jet-tagging-shaped MLP twice: quantization-aware with HGQ2, and in float.

The network is hls4ml's jet-tagging benchmark MLP, 16 -> 64 -> 32 -> 32 -> 5 with ReLU
between the layers (the last layer's logits are the output; the class is their argmax).

Data: no jet data set can be downloaded here, so `make_dataset` draws a synthetic one of the
same shape: 16 features, 5 classes (named after the benchmark's g, q, W, Z, t jets), each
class a mixture of two correlated Gaussians in 16-D (random means and covariances from a
fixed seed, overlapping so that even the float network stays below ~90% like the real
task); features standardised on the training set, clipped to [-6, 6] and rounded to
multiples of 2^-10 (HGQ2 rounds its float32 input as `floor(x 2^f + 1/2)` in float32, exact
on such values: docs/guide/quantization-aware.md). 20,000 training and 2,000 test samples.

(a) `jet_qat.keras`: the same network of HGQ2 layers (`QDense`), trained quantization-aware:
    weights 6 bits (KBI b=5 plus the sign, i=1: steps of 1/16 in [-2, 2), SAT_SYM, not
    trained), biases HGQ2's default (8 bits, WRAP, integer bits traced), activations per
    tensor (`heterogeneous_axis=()`, so every activation has one format and the network is
    built exactly), WRAP, starting at f=3 fraction bits, their bit-widths trained with a
    small resource penalty (beta 3e-6); then their sign and integer bits are traced on the
    training set (`hgq.utils.trace_minmax`): the quantizers after a ReLU become unsigned,
    5 to 6 bits each (compare.py's table lists them).
(b) `jet_float.keras`: the same network of float `Dense` layers, trained the same way; it
    is quantized after training by `compare.py` with keras2clash's `--format auto --bits 6`
    (per-layer formats calibrated on the training set).

Run: `python examples/jet_hgq/train.py [--out DIR]` (about 45 s on two cores).
Writes jet_qat.keras, jet_float.keras, test.npz (x, y) and calib.npz (x: 2,000 training
samples, the PTQ calibration set) to DIR (default: beside this script).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

SEED = 13
HERE = Path(__file__).resolve().parent
CLASSES = ("g", "q", "W", "Z", "t")
N_FEATURES, N_TRAIN, N_TEST = 16, 20_000, 2_000
MEAN_SPREAD = 0.18  # class means' spread, in units of the within-class spread: sets the overlap
INPUT_FRAC = 10  # features are multiples of 2^-10
EPOCHS, BATCH = 30, 256
WEIGHT_BITS, WEIGHT_INT = 5, 1  # KBI: bits without the sign, integer bits
ACT_FRAC = 3  # initial fraction bits of every activation quantizer (trained)
BETA = 3e-6  # HGQ2's resource (EBOPs) penalty on the trained bit-widths: small, so they stay near 6


def make_dataset(seed: int = SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): the synthetic 16-feature, 5-class set above."""
    rng = np.random.default_rng(seed)
    n = N_TRAIN + N_TEST
    y = rng.integers(0, len(CLASSES), n)
    component = rng.integers(0, 2, n)
    means = rng.normal(0.0, MEAN_SPREAD, (len(CLASSES), 2, N_FEATURES))
    mixing = rng.normal(0.0, 1.0, (len(CLASSES), 2, N_FEATURES, N_FEATURES)) / np.sqrt(N_FEATURES)
    noise = rng.normal(size=(n, N_FEATURES))
    x = means[y, component] + np.einsum("nij,nj->ni", mixing[y, component], noise)
    train, test = slice(0, N_TRAIN), slice(N_TRAIN, n)
    mean, std = x[train].mean(axis=0), x[train].std(axis=0)
    x = np.clip((x - mean) / std, -6.0, 6.0)
    x = (np.round(x * 2**INPUT_FRAC) / 2**INPUT_FRAC).astype(np.float32)
    return x[train], y[train], x[test], y[test]


def float_model() -> keras.Model:
    return keras.Sequential([
        keras.Input((N_FEATURES,), name="features"),
        keras.layers.Dense(64, activation="relu", name="dense_1"),
        keras.layers.Dense(32, activation="relu", name="dense_2"),
        keras.layers.Dense(32, activation="relu", name="dense_3"),
        keras.layers.Dense(len(CLASSES), name="logits"),
    ], name="jet_float")


def qat_model() -> keras.Model:
    from hgq.config import LayerConfigScope, QuantizerConfigScope
    from hgq.layers import QDense

    with LayerConfigScope(beta0=BETA), QuantizerConfigScope(place="weight", q_type="kbi", b0=WEIGHT_BITS, i0=WEIGHT_INT, trainable=False), \
            QuantizerConfigScope(place="datalane", q_type="kif", heterogeneous_axis=(), f0=ACT_FRAC):
        return keras.Sequential([
            keras.Input((N_FEATURES,), name="features"),
            QDense(64, activation="relu", name="dense_1"),
            QDense(32, activation="relu", name="dense_2"),
            QDense(32, activation="relu", name="dense_3"),
            QDense(len(CLASSES), name="logits"),
        ], name="jet_qat")


def train(model: keras.Model, x: np.ndarray, y: np.ndarray) -> None:
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(x, y, epochs=EPOCHS, batch_size=BATCH, validation_split=0.1, verbose=0,
              callbacks=[keras.callbacks.ReduceLROnPlateau(patience=3, factor=0.5, verbose=0)])


def accuracy(model: keras.Model, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.argmax(np.asarray(model.predict(x, verbose=0)), axis=1) == y))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    x_train, y_train, x_test, y_test = make_dataset()

    keras.utils.set_random_seed(SEED)
    fmodel = float_model()
    train(fmodel, x_train, y_train)
    print(f"float: test accuracy {accuracy(fmodel, x_test, y_test):.4f}")

    from hgq.utils import trace_minmax

    keras.utils.set_random_seed(SEED)
    qmodel = qat_model()
    train(qmodel, x_train, y_train)
    trace_minmax(qmodel, x_train, batch_size=1024, verbose=0)  # WRAP quantizers: sign and integer bits
    print(f"QAT (HGQ2): test accuracy {accuracy(qmodel, x_test, y_test):.4f}")

    for name, model in (("jet_float.keras", fmodel), ("jet_qat.keras", qmodel)):
        tmp = args.out / f".{name}.tmp.keras"
        model.save(tmp)
        tmp.replace(args.out / name)
    rng = np.random.default_rng(SEED)
    calib = x_train[rng.choice(len(x_train), 2_000, replace=False)]
    for name, arrays in (("test.npz", dict(x=x_test, y=y_test)), ("calib.npz", dict(x=calib))):
        tmp = args.out / f".{name}.tmp.npz"
        np.savez_compressed(tmp, **arrays)
        tmp.replace(args.out / name)
    print(f"wrote jet_float.keras, jet_qat.keras, test.npz, calib.npz to {args.out}")


if __name__ == "__main__":
    main()
