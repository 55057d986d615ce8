"""What a person reads from a search: the table of the best candidates, the Pareto plot,
the results as JSON and markdown, and `emit` of a candidate by its trial number.

The rows come from the storage only (every trial's evaluation is stored with it), so
`search show` works on a search that is still running, from any machine that can reach
the storage. The best candidates are the goals' Pareto front among the feasible trained
candidates (a weighted goal: the highest fitness); the plot shows accuracy against
multipliers and against images/s with each plane's own front.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from keras2clash.errors import K2CError
from keras2clash.fsutil import atomic_write_text
from keras2clash.hw.allocate import config_label
from keras2clash.search.description import METRICS, Description
from keras2clash.search.evaluate import Evaluation, fitness, publish
from keras2clash.search.study import SearchFolder, open_storage

RESULT_FILES = ("results.md", "results.json", "pareto.png")


@dataclass
class TrialRow:
    number: int
    state: str  # COMPLETE, FAIL, RUNNING, ...
    base: bool  # a base design of the description
    params: dict[str, Any]
    evaluation: Evaluation | None
    fitness: float | None = None
    best: bool = False  # on the goals' Pareto front (or the best fitness)

    @property
    def usable(self) -> bool:
        """Finished, trained, every constraint met."""
        ev = self.evaluation
        return self.state == "COMPLETE" and ev is not None and ev.trained and ev.feasible


@dataclass
class SearchResults:
    name: str
    storage: str
    objectives: list[str]
    rows: list[TrialRow]
    clock_mhz: float

    @property
    def best(self) -> list[TrialRow]:
        """The best candidates: the Pareto front, most accurate first; for a weighted goal,
        every feasible trained candidate, highest fitness first."""
        if self.objectives == ["fitness"]:
            return sorted((r for r in self.rows if r.usable), key=lambda r: (-r.fitness, r.number))
        return sorted(
            (r for r in self.rows if r.best),
            key=lambda r: (-r.evaluation.accuracy, r.evaluation.multipliers, r.evaluation.ii, r.number),
        )

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.state] = out.get(r.state, 0) + 1
        out["feasible"] = sum(1 for r in self.rows if r.usable)
        return out

    def to_json(self) -> str:
        data = {
            "name": self.name,
            "storage": self.storage,
            "objectives": self.objectives,
            "clock_mhz": self.clock_mhz,
            "counts": self.counts(),
            "best": [r.number for r in self.best],
            "trials": [asdict(r) for r in self.rows],
        }
        return json.dumps(data, indent=2)


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """`a` at least as good everywhere and better somewhere (values already oriented:
    larger is better)."""
    return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))


def front(points: Sequence[Sequence[float]]) -> list[int]:
    """Indices of the non-dominated points (larger is better on every axis)."""
    return [i for i, p in enumerate(points) if not any(dominates(q, p) for j, q in enumerate(points) if j != i)]


def oriented(ev: Evaluation, metric: str) -> float:
    value = ev.value(metric)
    return value if METRICS[metric] == "maximize" else -value


def collect(folder: SearchFolder, desc: Description) -> SearchResults:
    """Every trial of the study, with its evaluation, and which ones are the best."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=folder.study_name, storage=open_storage(folder.storage))
    except KeyError:
        raise K2CError(f"no study {folder.study_name!r} in {folder.storage}") from None
    rows = []
    for t in study.get_trials(deepcopy=False):
        data = t.user_attrs.get("evaluation")
        ev = Evaluation(**data) if data else None
        rows.append(
            TrialRow(
                t.number,
                t.state.name,
                bool(t.user_attrs.get("base")),
                dict(t.params),
                ev,
                fitness(ev, desc.goals) if ev is not None and desc.goals.weights else None,
            )
        )
    usable = [r for r in rows if r.usable]
    if desc.goals.pareto:
        points = [[oriented(r.evaluation, m) for m in desc.goals.pareto] for r in usable]
        for i in front(points):
            usable[i].best = True
    elif usable:
        top = max(r.fitness for r in usable)
        for r in usable:
            r.best = r.fitness == top
    return SearchResults(desc.name, folder.storage, list(desc.goals.objectives), rows, desc.constraints.clock_mhz)


HEADER = [
    "trial",
    "network",
    "format",
    "pe:cycles",
    "pipe",
    "mult.",
    "logic",
    "II",
    "latency",
    "images/s",
    "memory bits",
    "accuracy (val./CV)",
    "accuracy (test)",
    "Keras (test)",
]
"""accuracy: the golden model (the hardware, bit for bit) at the candidate's formats on the
validation split or cross-validation (what the search selects on) and on the test set;
Keras: float, test set. pe:cycles shows `L` for a layer at the latency strategy; logic: its
adder graphs' LUT4 cells (estimate)."""
TERMINAL = (
    "trial",
    "network",
    "format",
    "pe:cycles",
    "mult.",
    "II",
    "images/s",
    "accuracy (val./CV)",
    "accuracy (test)",
)
"""The columns `render` shows (a terminal is narrower than a markdown table)."""


def _pct(v: float) -> str:
    return f"{100 * v:.2f}%"


def table_rows(rows: Sequence[TrialRow]) -> list[list[str]]:
    out = []
    for r in rows:
        ev = r.evaluation
        assert ev is not None
        fmt, _, pipe = (part.strip() for part in ev.hardware.split(";"))
        out.append(
            [
                f"{r.number}{' (base)' if r.base else ''}",
                ev.network,
                fmt,
                config_label(ev.parallelism, ev.cycles, ev.strategies),
                pipe.replace("pipeline ", ""),
                str(ev.multipliers),
                f"{ev.logic_cells:,}",
                f"{ev.ii:g}",
                str(ev.latency),
                f"{ev.images_per_second:,.0f}",
                f"{ev.memory_bits:,}",
                _pct(ev.accuracy),
                _pct(ev.test_accuracy),
                _pct(ev.keras_accuracy),
            ]
        )
    return out


def caption(res: SearchResults) -> str:
    c = res.counts()
    what = "Pareto front of " + ", ".join(res.objectives) if res.objectives != ["fitness"] else "by fitness"
    return (
        f"search {res.name}: {c.get('COMPLETE', 0)} finished trials ({c['feasible']} trained within the "
        f"constraints, {c.get('FAIL', 0)} failed, {c.get('RUNNING', 0)} running); {what}; images/s at "
        f"{res.clock_mhz:g} MHz"
    )


def render(res: SearchResults, console: Any = None, limit: int = 15) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=caption(res))
    keep = [HEADER.index(c) for c in TERMINAL]
    for i in keep:
        table.add_column(HEADER[i], justify="left" if i < 5 else "right")
    for row in table_rows(res.best[:limit]):
        table.add_row(*(row[i] for i in keep))
    console.print(table)


def to_markdown(res: SearchResults, limit: int = 15) -> str:
    lines = [caption(res), "", "| " + " | ".join(HEADER) + " |", "|---|---|---|---|---:|" + "---:|" * (len(HEADER) - 5)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(res.best[:limit])]
    return "\n".join(lines) + "\n"


def plot(res: SearchResults, path: Path) -> Path:
    """Accuracy (golden model, what the search selects on) against multipliers and against
    images/s: every trained feasible candidate, each plane's Pareto front (numbered by
    trial), the base designs marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    usable = [r for r in res.rows if r.usable]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), sharey=True)
    colours = {"dense": "#2c5aa0", "cnn": "#d35400", "recurrent": "#27864a"}
    for ax, metric, label, sign in (
        (axes[0], "multipliers", "multipliers", -1),
        (axes[1], "images_per_second", f"images/s at {res.clock_mhz:g} MHz", 1),
    ):
        for template, colour in colours.items():
            pts = [r for r in usable if r.evaluation.network.startswith(template)]
            if pts:
                ax.scatter(
                    [r.evaluation.value(metric) for r in pts],
                    [100 * r.evaluation.accuracy for r in pts],
                    s=18,
                    color=colour,
                    alpha=0.45,
                    label=f"{template} candidates",
                )
        idx = front([[sign * r.evaluation.value(metric), r.evaluation.accuracy] for r in usable])
        points: dict[tuple[float, float], TrialRow] = {}  # one label per point: the first trial there
        for r in sorted((usable[i] for i in idx), key=lambda r: r.number):
            points.setdefault((r.evaluation.value(metric), r.evaluation.accuracy), r)
        members = sorted(points.values(), key=lambda r: r.evaluation.value(metric))
        if members:
            ax.step(
                [r.evaluation.value(metric) for r in members],
                [100 * r.evaluation.accuracy for r in members],
                where="post" if sign < 0 else "pre",
                color="black",
                lw=1.2,
                label="Pareto front",
            )
            ax.scatter(
                [r.evaluation.value(metric) for r in members],
                [100 * r.evaluation.accuracy for r in members],
                s=40,
                facecolors="none",
                edgecolors="black",
            )
            for r in members:
                ax.annotate(
                    str(r.number),
                    (r.evaluation.value(metric), 100 * r.evaluation.accuracy),
                    fontsize=7,
                    xytext=(3, -9),
                    textcoords="offset points",
                )
        bases = [r for r in usable if r.base]
        if bases:
            ax.scatter(
                [r.evaluation.value(metric) for r in bases],
                [100 * r.evaluation.accuracy for r in bases],
                marker="s",
                s=60,
                facecolors="none",
                edgecolors="#c0392b",
                lw=1.5,
                label="base designs",
            )
        if metric == "images_per_second":
            ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy, golden model, validation or CV (%)")
    accs = [100 * r.evaluation.accuracy for r in usable]
    if accs:  # the bulk of the candidates and every front member in view; far outliers off
        import numpy as np

        fronts = [100 * r.evaluation.accuracy for r in usable if r.best]
        low = min([float(np.percentile(accs, 5)), *fronts])
        axes[0].set_ylim(low - 1, max(accs) + 1)
    axes[1].legend(loc="lower left", fontsize=8)
    c = res.counts()
    fig.suptitle(
        f"search {res.name}: {c['feasible']} trained candidates within the constraints, of "
        f"{c.get('COMPLETE', 0)} finished trials; fronts numbered by trial",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_results(res: SearchResults, root: Path) -> dict[str, Path]:
    """results.md, results.json and pareto.png in the search folder (each written whole,
    replacing the previous: the search goes on and they are regenerated)."""
    import os
    import tempfile

    root = Path(root)
    paths = {name: root / name for name in RESULT_FILES}
    atomic_write_text(paths["results.md"], to_markdown(res))
    atomic_write_text(paths["results.json"], res.to_json() + "\n")
    fd, tmp = tempfile.mkstemp(prefix=".pareto.", suffix=".png", dir=root)
    os.close(fd)
    try:
        plot(res, Path(tmp))
        publish(tmp, paths["pareto.png"])
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return paths
