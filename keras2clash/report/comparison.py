"""The verification ladder side by side: Keras float, Keras rounded, golden, Clash simulation.

The comparison is computed here from arrays; printing (rich table), markdown and JSON are
views of the same `Comparison`, so what the demo prints and what tests assert are one thing.
A classifier's rungs are accuracies; a regression model's (or an autoencoder's) are the
output values' maximum absolute error and mean squared error against Keras float and
against the targets (`RungErrors`); the bit-exact count is the same for both.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np
from rich.console import Console
from rich.table import Table


@dataclass(frozen=True)
class ErrorFigures:
    """`a - b` over every output value of every sample."""

    max_abs: float
    mse: float


def error_figures(a: np.ndarray, b: np.ndarray) -> ErrorFigures:
    """Max |a - b| and mean (a - b)^2; a NaN (a float32 overflow in Keras) counts as infinite."""
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
        err = np.where(np.isnan(err), np.inf, err)
        return ErrorFigures(max_abs=float(err.max()), mse=float(np.mean(err**2)))


@dataclass(frozen=True)
class RungErrors:
    """One rung of a regression ladder: its outputs against Keras float and the targets."""

    vs_keras: ErrorFigures | None  # None: no Keras model to compare with (or the Keras rung itself)
    vs_targets: ErrorFigures | None  # None: the test set has no targets


@dataclass(frozen=True)
class Comparison:
    model: str
    format: str
    parallelism: list[int]
    cycles: list[int]
    samples: int
    keras_float_accuracy: float | None
    keras_rounded_accuracy: float | None
    golden_accuracy: float | None  # None for a regression model
    sim_accuracy: float | None
    bit_exact: int | None  # samples where simulation == golden in every output bit
    class_match: int | None  # samples where the hardware argmax == golden argmax
    first_latency: int | None  # cycles, input accepted -> output, empty pipeline
    interval: float | None  # cycles between outputs, back to back
    multipliers: int
    output_cycles_last: int | None = None  # cycle the last output left (whole run length)
    task: str = "classifier"  # or "regression" (data.TASKS): which figures the rungs have
    keras_float_errors: RungErrors | None = None  # regression only, from here on
    keras_rounded_errors: RungErrors | None = None
    golden_errors: RungErrors | None = None
    sim_errors: RungErrors | None = None

    @property
    def all_exact(self) -> bool:
        return self.bit_exact == self.samples

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @property
    def has_targets(self) -> bool:
        return self.golden_errors is not None and self.golden_errors.vs_targets is not None

    def columns(self) -> tuple[str, ...]:
        """The table's header: accuracy for a classifier, error figures for regression."""
        if self.task != "regression":
            return ("rung", "accuracy", "note")
        return (
            "rung",
            "max |err| vs Keras",
            "MSE vs Keras",
            *(("MSE vs targets",) if self.has_targets else ()),
            "note",
        )

    def rows(self) -> list[tuple[str, ...]]:
        """One row per rung (`columns()`), in ladder order."""
        if self.task == "regression":
            return self._regression_rows()

        def pct(v: float | None) -> str:
            return "-" if v is None else f"{100 * v:.2f}%"

        rows = [
            ("Keras float", pct(self.keras_float_accuracy), "float32 reference"),
            (
                f"Keras outputs rounded to {self.format}",
                pct(self.keras_rounded_accuracy),
                "the thesis' 'after rounding'",
            ),
            (f"golden model {self.format}", pct(self.golden_accuracy), "numpy integers, docs/guide/contract.md"),
        ]
        if self.sim_accuracy is not None:
            rows.append(
                (
                    "Clash simulation",
                    pct(self.sim_accuracy),
                    f"bit-exact vs golden: {self.bit_exact}/{self.samples}",
                )
            )
        return rows

    def _regression_rows(self) -> list[tuple[str, ...]]:
        def num(v: float | None) -> str:
            return "-" if v is None else "inf" if not np.isfinite(v) else f"{v:.4g}"

        def cells(errors: RungErrors | None) -> tuple[str, ...]:
            keras = errors.vs_keras if errors is not None else None
            target = errors.vs_targets if errors is not None else None
            values = (num(keras and keras.max_abs), num(keras and keras.mse))
            return values + ((num(target and target.mse),) if self.has_targets else ())

        rows = [
            ("Keras float", *cells(self.keras_float_errors), "float32 reference"),
            (
                f"Keras outputs rounded to {self.format}",
                *cells(self.keras_rounded_errors),
                "the output resolution alone",
            ),
            (f"golden model {self.format}", *cells(self.golden_errors), "numpy integers, docs/guide/contract.md"),
        ]
        if self.sim_errors is not None:
            rows.append(
                ("Clash simulation", *cells(self.sim_errors), f"bit-exact vs golden: {self.bit_exact}/{self.samples}")
            )
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
    columns = comp.columns()
    for k, column in enumerate(columns):
        table.add_column(column, justify="left" if k in (0, len(columns) - 1) else "right")
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
    columns = comp.columns()
    lines = ["| " + " | ".join(columns) + " |", "|---|" + "---:|" * (len(columns) - 2) + "---|"]
    lines += ["| " + " | ".join(row) + " |" for row in comp.rows()]
    if comp.first_latency is not None:
        lines.append("")
        lines.append(
            f"Latency {comp.first_latency} cycles, initiation interval {comp.interval:.1f} cycles, "
            f"{comp.multipliers} multipliers."
        )
    return "\n".join(lines) + "\n"
