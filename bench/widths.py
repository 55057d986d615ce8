#!/usr/bin/env python3
"""Accuracy of the examples against total bits (a script, not a test): writes bench/widths.json.

    .venv/bin/python bench/widths.py [--examples thesis_cnn,...] [--formats SPEC] [--out bench/widths.json]

For every classifier example, on its test set and at uniform formats of growing width: Keras
float (the reference), Keras' float outputs rounded to the output format ("Keras rounded"),
float inference with the weights and biases rounded ("Keras weights rounded") and the golden
model (== the hardware, bit for bit) with the default weight format (`fit`). Each example is
one call of the bit-width sweep (`keras2clash.report.sweep.sweep`, the `keras2clash sweep`
command: docs/guide/formats.md, "Bit-width sweep"), so the figures are the sweep's own.

The widths. The sweep's default `1,2,3:1,16,17` (the 2021 thesis' Table 3: fraction bits =
integer bits + 1) starts at 6 bits, where some examples are already within a point of Keras
float: it misses where they collapse. The default here extends the same family down to 2 bits,
`1,0,1:1,16,17` (2, 4, ..., 34 bits), where most examples are near chance, and fills in the
odd widths with the extra bit in the fraction, `1,0,2:1,15,17` (3, 5, ..., 33 bits: fraction
= integer + 2), so every width from 2 to 34 has one format and the plot shows where each
example collapses and where it levels off (the top end keeps the thesis' range). A sweep
costs one golden-model run per format, so the whole range takes minutes.
Adjacent widths differ in their integer/fraction split as well as in width, so a curve
need not be monotone.

jet_hgq is left out, as in bench/accuracy.py: its formats come from the quantization-aware
model, not from uniform formats.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from accuracy import EXAMPLES, chosen_examples  # noqa: E402  (the same classifier examples)

FORMATS = "1,0,1:1,16,17;1,0,2:1,15,17"
"""Every width from 2 to 34 bits (see the module docstring)."""


def _count(accuracy: float, images: int) -> int:
    """The sweep's accuracy (a mean over the test set) back as images right."""
    return int(round(accuracy * images))


def example_rows(name: str, formats: str) -> dict:
    """One example: its test set swept over `formats` (the sweep's API, no Clash simulation)."""
    from keras2clash.report.sweep import sweep

    folder = ROOT / "examples" / name
    result = sweep(folder / f"{name}.keras", folder / "test.npz", [formats], show=False)
    n = result.samples
    return {
        "example": name,
        "images": n,
        "keras_float": _count(result.keras_float, n),
        "seconds": round(result.seconds, 1),
        "rows": [
            {
                "format": r.label,
                "bits": r.bits,
                "keras_rounded": _count(r.keras_rounded, n),
                "keras_weights_rounded": _count(r.keras_weights_rounded, n),
                "golden": _count(r.golden, n),
                "saturated_params": r.saturated_params,
                "saturated_values": r.saturated_values,
            }
            for r in result.rows
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", default=",".join(EXAMPLES))
    parser.add_argument("--formats", default=FORMATS, help=f"a sweep format list (default {FORMATS})")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "widths.json")
    args = parser.parse_args()
    names = chosen_examples(parser, args.examples)

    from rich.console import Console
    from rich.table import Table

    from keras2clash.fsutil import atomic_write_text
    from keras2clash.quant.autoformat import DEFAULT_WEIGHT_FORMAT
    from keras2clash.report.sweep import parse_format_specs

    formats = [str(f) for f in parse_format_specs([args.formats])]
    console = Console(stderr=True)
    started = time.perf_counter()
    examples = []
    for k, name in enumerate(names, 1):
        console.print(f"[{k}/{len(names)}] {name}: {len(formats)} formats ...", soft_wrap=True)
        row = example_rows(name, args.formats)
        examples.append(row)
        best = max(r["golden"] for r in row["rows"])
        console.print(
            f"[{k}/{len(names)}] {name}: {row['seconds']:.1f} s; Keras float "
            f"{row['keras_float']}/{row['images']}, golden {min(r['golden'] for r in row['rows'])} "
            f"to {best}/{row['images']}  (total {time.perf_counter() - started:.0f} s)",
            soft_wrap=True,
        )
    total = time.perf_counter() - started

    table = Table(title=f"golden model (weights {DEFAULT_WEIGHT_FORMAT}): accuracy on the test set against total bits")
    table.add_column("format")
    table.add_column("bits", justify="right")
    for row in examples:
        table.add_column(row["example"], justify="right")
    table.add_row("Keras float", "", *(f"{100 * r['keras_float'] / r['images']:.1f}" for r in examples))
    for i, fmt in enumerate(examples[0]["rows"] if examples else []):
        table.add_row(
            fmt["format"], str(fmt["bits"]), *(f"{100 * r['rows'][i]['golden'] / r['images']:.1f}" for r in examples)
        )
    Console().print(table)

    results = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
        },
        "formats": args.formats,
        "weight_format": DEFAULT_WEIGHT_FORMAT,
        "seconds": round(total, 1),
        "examples": examples,
    }
    atomic_write_text(args.out, json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out} in {total:.0f} s")


if __name__ == "__main__":
    main()
