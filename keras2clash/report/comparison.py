"""The verification ladder side by side: Keras float, Keras rounded, golden, Clash simulation.

The comparison is computed here from arrays; printing (rich table), markdown and JSON are
views of the same `Comparison`, so what the demo prints and what tests assert are one thing.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np
from rich.console import Console
from rich.table import Table


@dataclass(frozen=True)
class Comparison:
    model: str
    format: str
    parallelism: list[int]
    cycles: list[int]
    samples: int
    keras_float_accuracy: float | None
    keras_rounded_accuracy: float | None
    golden_accuracy: float
    sim_accuracy: float | None
    bit_exact: int | None  # samples where simulation == golden in every output bit
    class_match: int | None  # samples where the hardware argmax == golden argmax
    first_latency: int | None  # cycles, input accepted -> output, empty pipeline
    interval: float | None  # cycles between outputs, back to back
    multipliers: int
    output_cycles_last: int | None = None  # cycle the last output left (whole run length)

    @property
    def all_exact(self) -> bool:
        return self.bit_exact == self.samples

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def rows(self) -> list[tuple[str, str, str]]:
        """(rung, accuracy, note) rows, in ladder order."""
        def pct(v: float | None) -> str:
            return "-" if v is None else f"{100 * v:.2f}%"

        rows = [
            ("Keras float", pct(self.keras_float_accuracy), "float32 reference"),
            (f"Keras outputs rounded to {self.format}", pct(self.keras_rounded_accuracy), "the thesis' 'after rounding'"),
            (f"golden model {self.format}", pct(self.golden_accuracy), "numpy integers, docs/contract.md"),
        ]
        if self.sim_accuracy is not None:
            rows.append((
                "Clash simulation",
                pct(self.sim_accuracy),
                f"bit-exact vs golden: {self.bit_exact}/{self.samples}",
            ))
        return rows


def accuracy(pred: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.asarray(pred) == np.asarray(labels)))


def render(comp: Comparison, console: Console | None = None) -> None:
    """Print the comparison as a rich table plus the cycle figures."""
    console = console or Console()
    title = (
        f"{comp.model} at {comp.format}, parallelism {','.join(map(str, comp.parallelism))}, "
        f"{comp.samples} test samples"
    )
    table = Table(title=title)
    table.add_column("rung")
    table.add_column("accuracy", justify="right")
    table.add_column("note")
    for row in comp.rows():
        table.add_row(*row)
    console.print(table)
    if comp.first_latency is not None:
        console.print(
            f"cycles per inference: latency {comp.first_latency} (input accepted -> output), "
            f"initiation interval {comp.interval:.1f} back to back; multipliers {comp.multipliers}"
        )
    if comp.bit_exact is not None:
        verdict = "[green]BIT-EXACT[/green]" if comp.all_exact else "[red]MISMATCH[/red]"
        console.print(f"simulation == golden model: {comp.bit_exact}/{comp.samples} {verdict}")


def to_markdown(comp: Comparison) -> str:
    lines = ["| rung | accuracy | note |", "|---|---:|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in comp.rows()]
    if comp.first_latency is not None:
        lines.append("")
        lines.append(
            f"Latency {comp.first_latency} cycles, initiation interval {comp.interval:.1f} cycles, "
            f"{comp.multipliers} multipliers."
        )
    return "\n".join(lines) + "\n"
