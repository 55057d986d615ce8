#!/usr/bin/env python3
"""Accuracy of the examples at 1,7,8 against Keras float (a script, not a test): writes bench/accuracy.json.

    .venv/bin/python bench/accuracy.py [--examples thesis_cnn,...] [--format 1,7,8] [--out bench/accuracy.json]

For every classifier example: images right out of its test set for Keras float and for the
golden model (== the hardware, bit for bit: tests/test_examples.py, tests/test_e2e.py) with
the weights fitted to their width (`--weight-format fit`, the default) and in the layer's
format (`same`, the 2021 thesis' contract). The digits examples are also counted on all
1,797 digits (examples/all_digits.py): their test sets of 360 count in steps of 0.28 points,
coarser than the 0.25 pt criterion (hardware within 0.25 pt of Keras float), so there one
float near-tie decides it.
jet_hgq is left out: its formats come from the quantization-aware model, not from --format.
digits_autoencoder is not a classifier: its score (ROC AUC, float and hardware) is its own
script, examples/digits_autoencoder/score.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

EXAMPLES = (
    "iris",
    "digits_dense",
    "thesis_cnn",
    "cnn_variants",
    "mobilenet_digits",
    "resnet_digits",
    "inception_digits",
    "se_digits",
    "densenet_digits",
    "mlp_tanh",
    "conv1d_waves",
    "digits_lstm",
    "waves_gru",
    "jet_transformer",
)
DIGITS = {
    "digits_dense",
    "thesis_cnn",
    "cnn_variants",
    "mobilenet_digits",
    "resnet_digits",
    "inception_digits",
    "se_digits",
    "densenet_digits",
    "mlp_tanh",
    "digits_lstm",
}
WEIGHT_FORMATS = ("fit", "same")


def _counts(model, networks: dict, x: np.ndarray, y: np.ndarray) -> dict[str, int]:
    """Images right: Keras float, then the golden model of each weight format's planned network."""
    from keras2clash import debug

    right = {"keras_float": int(np.sum(np.argmax(model.predict(x, verbose=0, batch_size=512), axis=1) == y))}
    for weights, network in networks.items():
        right[weights] = int(np.sum(debug.predict(network, x).classes == y))
    return right


def _points(right: dict[str, int], n: int) -> dict[str, float]:
    """Keras float minus each weight format, in accuracy points (positive: the hardware loses)."""
    return {w: round(100.0 * (right["keras_float"] - right[w]) / n, 3) for w in WEIGHT_FORMATS}


def chosen_examples(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """The `--examples` list (comma-separated), each one of EXAMPLES, or the parser's error."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(EXAMPLES))
    if unknown:
        parser.error(f"--examples: unknown {', '.join(unknown)} (known: {', '.join(EXAMPLES)})")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", default=",".join(EXAMPLES))
    parser.add_argument("--format", default="1,7,8")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "accuracy.json")
    args = parser.parse_args()
    names = chosen_examples(parser, args.examples)

    import keras
    from all_digits import all_digits
    from rich.console import Console
    from rich.progress import track
    from rich.table import Table

    from keras2clash.fsutil import atomic_write_text
    from keras2clash.network import load_network

    rows = []
    for name in track(names, description="golden model and Keras"):
        folder = ROOT / "examples" / name
        path = folder / f"{name}.keras"
        model = keras.models.load_model(path, compile=False)
        networks = {w: load_network(model, args.format, weight_format=w) for w in WEIGHT_FORMATS}  # planned once
        test = np.load(folder / "test.npz")
        row = {"example": name, "test": {"images": int(len(test["y"]))}}
        row["test"]["right"] = _counts(model, networks, test["x"].astype(np.float32), test["y"])
        row["test"]["points_below_float"] = _points(row["test"]["right"], row["test"]["images"])
        if name in DIGITS:
            x, y = all_digits(folder)
            row["all_digits"] = {"images": int(len(y)), "right": _counts(model, networks, x, y)}
            row["all_digits"]["points_below_float"] = _points(row["all_digits"]["right"], len(y))
        rows.append(row)

    table = Table(title=f"images right at {args.format}")
    for column in ("example", "images", "Keras float", "fit (default)", "same", "fit below float"):
        table.add_column(column, justify="left" if column == "example" else "right")
    for row in rows:
        for part, label in (("test", row["example"]), ("all_digits", "  all digits")):
            if part in row:
                r = row[part]["right"]
                table.add_row(
                    label,
                    f"{row[part]['images']:,}",
                    str(r["keras_float"]),
                    str(r["fit"]),
                    str(r["same"]),
                    f"{row[part]['points_below_float']['fit']:+.2f} pt",
                )
    Console().print(table)
    results = {"format": args.format, "date": time.strftime("%Y-%m-%d"), "examples": rows}
    atomic_write_text(args.out, json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
