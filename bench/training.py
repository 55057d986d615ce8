#!/usr/bin/env python3
"""The golden trainer against Keras float SGD (a script, not a test): writes bench/training.json.

    .venv/bin/python bench/training.py [--examples digits28,digits8] [--epochs 10] [--out bench/training.json]

For each network of examples/train_digits, trained from its initial weights with SGD (batch 1,
no momentum, the learning rate below), the same sample order for every run (one seeded
permutation per epoch): Keras float32, the golden trainer at its default formats (18-bit
operands: activations 1,5,12, weights, biases and gradients 1,0,17), and the golden trainer
with narrower gradients (`g` = 1,0,F for a range of F, everything else at the defaults), each
with its loss and accuracy per epoch and its test accuracy after the last. The samples per
second of each trainer on this machine's CPU are recorded beside (the golden trainer is the
arithmetic's reference, numpy integers; Keras runs float32 on TensorFlow).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from keras2clash.quant.formats import FixedFormat  # noqa: E402
from keras2clash.train.golden import GoldenTrainer, LayerFormats, Sgd  # noqa: E402
from keras2clash.train.reference import keras_fit  # noqa: E402
from keras2clash.train.run import read_samples  # noqa: E402

TRAIN = ROOT / "examples" / "train_digits"
RATES = {"digits28": 2.0**-7, "digits8": 2.0**-7}
"""The learning rate of each network (a power of two: the update is a shift). At 2^-5 and 2^-6,
batch-1 SGD moves these networks' test accuracy by several points from one epoch to the next,
Keras float's as much as the golden trainer's, which hides a one-point comparison; at 2^-7
both settle."""
GRADIENT_FRACS = range(7, 18)
"""Fraction bits of the narrower gradient formats (1,0,F: 8 to 18 bits)."""
SEED = 0


def _net(name: str):  # type: ignore[no-untyped-def]
    from keras2clash.frontend.convert import load_keras_model, to_graph
    from keras2clash.train.net import train_net

    return train_net(to_graph(load_keras_model(TRAIN / f"{name}.keras")))


def _epochs(runs) -> list[dict]:  # type: ignore[no-untyped-def]
    return [asdict(r) for r in runs]


def bench(name: str, epochs: int) -> dict:
    net = _net(name)
    train = read_samples(TRAIN / f"train_{name}.npz", net, "train")
    test = read_samples(TRAIN / f"test_{name}.npz", net, "test")
    sgd = Sgd(RATES[name], 0.0, 1)
    rng = np.random.default_rng(SEED)
    orders = [rng.permutation(len(train.x)) for _ in range(epochs)]
    steps = epochs * len(train.x)

    def golden(formats: LayerFormats) -> dict:
        trainer = GoldenTrainer(net, sgd, [formats] * len(net.layers))
        t0 = time.perf_counter()
        runs = trainer.fit(train.x, train.y, epochs, orders, (test.x, test.y))
        seconds = time.perf_counter() - t0
        print(f"  {name} g={formats.g}: test {100 * runs[-1].test_accuracy:.2f}% ({seconds:.0f} s)", flush=True)
        return {
            "g": str(formats.g),
            "g_bits": formats.g.bits,
            "epochs": _epochs(runs),
            "samples_per_second": steps / seconds,
        }

    start = GoldenTrainer(net, sgd).real_weights()
    t0 = time.perf_counter()
    theirs, _ = keras_fit(net, start, sgd, train.x, train.y, orders, (test.x, test.y))
    keras_seconds = time.perf_counter() - t0
    print(f"  {name} Keras float: test {100 * theirs[-1].test_accuracy:.2f}% ({keras_seconds:.0f} s)", flush=True)
    default = golden(LayerFormats())
    narrower = [golden(replace(LayerFormats(), g=FixedFormat(1, 0, f))) for f in GRADIENT_FRACS if f != 17]
    return {
        "example": name,
        "sizes": net.sizes,
        "train_samples": len(train.x),
        "test_samples": len(test.x),
        "sgd": asdict(sgd),
        "keras_float": {"epochs": _epochs(theirs), "samples_per_second": steps / keras_seconds},
        "golden": default,
        "gradient_widths": sorted([default, *narrower], key=lambda r: r["g_bits"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", default="digits28,digits8")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "training.json")
    args = parser.parse_args()
    rows = []
    for name in args.examples.split(","):
        print(f"{name}: {args.epochs} epochs", flush=True)
        rows.append(bench(name, args.epochs))
    data = {
        "epochs": args.epochs,
        "seed": SEED,
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "examples": rows,
    }
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
