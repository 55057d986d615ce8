"""Compare a digits search with examples/digits_dense, the hand-made design.

The reference is computed, not copied: digits_dense at 1,7,8 with one PE per layer, its
golden-model test accuracy and its exact hardware figures. A search candidate beats it when
its golden test accuracy is at least the reference's, at a format no wider than 1,7,8, with
fewer multipliers or a smaller II. The candidates are listed twice: those on the search's
Pareto front (chosen on the validation split, the honest pick), and every evaluated one
(looking at the test set to choose is a selection on the test set: shown for context).

Run: `python examples/search_digits/compare.py DIR` (DIR: a `keras2clash search run --out`).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
REFERENCE = HERE.parent / "digits_dense"


def reference() -> tuple[float, int, float]:
    from keras2clash.hw.hwmodel import figures
    from keras2clash.network import load_network
    from keras2clash.quant import golden

    network = load_network(REFERENCE / "digits_dense.keras", "1,7,8")
    with np.load(REFERENCE / "test.npz") as data:
        x, y = data["x"], data["y"]
    classes = golden.predict(network.plans, network.params, golden.quantize_inputs(network.plans, x))[1]
    fig = figures(network.plans)
    return float(np.mean(classes == y)), fig.multipliers, fig.ii


def narrow(fmt_text: str) -> bool:
    """Every format of the candidate no wider than 1,7,8 in integer and fraction bits."""
    return all(int(i) <= 7 and int(f) <= 8 for _, i, f in (t.split(",") for t in fmt_text.split("/")))


def main() -> None:
    from keras2clash.search.results import collect
    from keras2clash.search.study import open_folder

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    acc, mults, ii = reference()
    folder = open_folder(args.folder)
    res = collect(folder, folder.description())

    def beats(r) -> bool:
        ev = r.evaluation
        fmt = ev.hardware.split(";")[0].strip()
        return ev.test_accuracy >= acc and narrow(fmt) and (ev.multipliers < mults or ev.ii < ii)

    print(
        f"reference examples/digits_dense at 1,7,8, pe 1,1,1: golden test accuracy {100 * acc:.2f}%, "
        f"{mults} multipliers, II {ii:g}\n"
    )
    for title, rows in (
        ("on the Pareto front (selected on validation or cross-validation)", res.best),
        (
            "among every trained feasible candidate (selected on test: context only)",
            sorted(
                (r for r in res.rows if r.usable), key=lambda r: (-r.evaluation.test_accuracy, r.evaluation.multipliers)
            ),
        ),
    ):
        winners = [r for r in rows if beats(r)]
        print(f"{len(winners)} candidate(s) {title} at least as accurate with fewer multipliers or a smaller II:\n")
        print("| trial | network | format | pe:cycles | mult. | II | accuracy (val./CV) | accuracy (test) |")
        print("|---|---|---|---|---:|---:|---:|---:|")
        for r in winners[:10]:
            ev = r.evaluation
            print(
                f"| {r.number} | {ev.network} | {ev.hardware.split(';')[0]} | "
                f"{','.join(f'{p}:{c}' for p, c in zip(ev.parallelism, ev.cycles))} | {ev.multipliers} | "
                f"{ev.ii:g} | {100 * ev.accuracy:.2f}% | {100 * ev.test_accuracy:.2f}% |"
            )
        print()


if __name__ == "__main__":
    main()
