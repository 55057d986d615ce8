"""The thesis' Table 1, measured: latency and initiation interval of the thesis CNN.

For each parallelism row of the 2021 thesis (processing elements of conv 1, conv 2, dense),
emit the design at 1,7,8, run N test images back to back through the Clash simulation
(bit-exact against the golden model, or the script fails), and print the measured latency
(first input pixel accepted -> output) beside the thesis' figure.

    .venv/bin/python examples/thesis_cnn/table1.py [-n 20] [--out build/table1]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

import keras2clash as k2c

HERE = Path(__file__).resolve().parent
THESIS_ROWS = {(1, 1, 1): 2804, (2, 2, 2): 1631, (4, 4, 2): 1047, (8, 8, 5): 755}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20, help="images back to back per row")
    parser.add_argument("--out", type=Path, default=Path("build/table1"))
    args = parser.parse_args()
    rows = []
    for parallelism, thesis in THESIS_ROWS.items():
        project = k2c.emit(
            HERE / "thesis_cnn.keras",
            "1,7,8",
            args.out / "_".join(map(str, parallelism)),
            list(parallelism),
            force=True,
        )
        comp = k2c.simulate(project, HERE / "test.npz", args.n, keras=False, show=False)
        if comp.bit_exact != comp.samples:
            raise SystemExit(f"{parallelism}: simulation differs from the golden model")
        rows.append(
            {
                "parallelism": list(parallelism),
                "latency": comp.first_latency,
                "thesis_latency": thesis,
                "interval": comp.interval,
                "multipliers": comp.multipliers,
                "bit_exact": f"{comp.bit_exact}/{comp.samples}",
            }
        )
    table = Table(title=f"Thesis CNN at 1,7,8: Table 1, measured in Clash simulation ({args.n} images back to back)")
    for column in (
        "parallelism",
        "latency (cycles)",
        "thesis latency",
        "initiation interval",
        "multipliers",
        "bit-exact",
    ):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            ",".join(map(str, row["parallelism"])),
            str(row["latency"]),
            str(row["thesis_latency"]),
            f"{row['interval']:.0f}",
            str(row["multipliers"]),
            row["bit_exact"],
        )
    Console().print(table)
    (args.out / "table1.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
