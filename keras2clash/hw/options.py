"""`keras2clash options`: every useful space-time configuration of a network, with its cost.

The 2021 thesis left users to find by trial which parallelism is worth its multipliers
(its Table 2 listed 48 configurations of its CNN). Here the exact hardware model
(`hwmodel`) gives, for every configuration, the latency, the initiation interval (II), the
multipliers, the on-chip memory and the multiplier efficiency, and marks the Pareto-optimal
ones: no other configuration has as few multipliers and as short an II (or latency) with one
of the two strictly better.

Which configurations ("useful"): for a compute layer with F filters, only the `pe` values
that change `G = ceil(F / pe)`, each the smallest `pe` giving its G (more PEs for the same G
cost multipliers and save nothing); `cycles` 1. With `cycles_too`, also the cycles knob `b`:
the values that change the chunk `ch = ceil(K / b)`, each the smallest `b` giving its
chunk, and of all (pe, b) pairs of a layer only those on the layer's own Pareto front of
(multipliers `pe * ch`, steps per window `G * b`) — a pair that needs more multipliers for
no fewer steps than another is never useful.

Which of them are evaluated: all of them when their product is at most `EXHAUSTIVE` and
the model gets through them within the time limit; otherwise (the product of a deep
network's choices runs to millions) those `hw.fronts` finds on the way to the two fronts,
from each layer's own front. Every figure shown is the exact model's for its row either
way.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from keras2clash.errors import K2CError
from keras2clash.hw.allocate import LATENCY_LABEL, balanced, config_label
from keras2clash.hw.fronts import LayerFront, Picks, front_flags, own_front, pareto_search, threshold_picks
from keras2clash.hw.hwmodel import figures_many
from keras2clash.hw.plan import LayerPlan
from keras2clash.hw.resources import HwFigures
from keras2clash.hw.strategy import Candidates, balanced_strategies, candidates, latency_sets, with_latency
from keras2clash.jsontypes import Json, JsonObject

if TYPE_CHECKING:
    from rich.console import Console

SORT_KEYS = ("latency", "interval", "multipliers")

EXHAUSTIVE = 4096
"""Networks with at most this many useful configurations have every one evaluated (a few
seconds of the exact model at most); larger ones the fronts' (`front_configs`)."""

SEARCH_SECONDS = 3.0
"""How long `explore` searches the fronts of a network with more than `EXHAUSTIVE`
configurations (`--time-limit`)."""

EVERY_BATCH = 256
"""Configurations `every_config` evaluates together (the time limit is checked between)."""

Progress = Callable[[str], object]
"""Told what a long run is doing (the command line shows it)."""


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def useful_pes(filters: int) -> list[int]:
    """The smallest pe for each distinct G = ceil(filters / pe), fewest PEs first."""
    groups = sorted({_ceil(filters, p) for p in range(1, filters + 1)}, reverse=True)
    return [_ceil(filters, g) for g in groups]


def useful_cycles(window: int) -> list[int]:
    """The smallest b for each distinct chunk ch = ceil(window / b), b = 1 first."""
    chunks = sorted({_ceil(window, b) for b in range(1, window + 1)}, reverse=True)
    return [_ceil(window, ch) for ch in chunks]


def layer_choices(plan: LayerPlan, cycles_too: bool = False) -> list[tuple[int, int]]:
    """(pe, cycles) pairs worth trying for one compute layer (module docstring); its own alone
    when its strategy fixes them."""
    if plan.fixed_knobs:
        return [(plan.engine_knobs.pe, plan.engine_knobs.cycles)]
    pes = useful_pes(plan.filters)
    if not cycles_too:
        return [(p, 1) for p in pes]
    pairs: dict[tuple[int, int], tuple[int, int]] = {}
    for p in pes:
        for b in useful_cycles(plan.window):
            mult, steps = p * _ceil(plan.window, b), _ceil(plan.filters, p) * b
            key = (mult, steps)
            if key not in pairs or (p, b) < pairs[key]:
                pairs[key] = (p, b)
    front, best = [], None
    for (_mult, steps), pb in sorted(pairs.items()):
        if best is None or steps < best:
            front.append(pb)
            best = steps
    return front


def all_configs(plans: Sequence[LayerPlan], cycles_too: bool = False) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    per_layer = [layer_choices(p, cycles_too) for p in plans if p.is_compute]
    return [(tuple(pb[0] for pb in combo), tuple(pb[1] for pb in combo)) for combo in itertools.product(*per_layer)]


def count_configs(plans: Sequence[LayerPlan], cycles_too: bool = False) -> int:
    """How many useful configurations the network has (the product of its layers' choices)."""
    return math.prod(len(layer_choices(p, cycles_too)) for p in plans if p.is_compute)


def layer_fronts(plans: Sequence[LayerPlan], cycles_too: bool = False) -> list[LayerFront]:
    """Each compute layer's useful choices as its own front of (busy cycles per image,
    multipliers) (`hw.fronts`)."""
    return [
        own_front(
            ((pe, b), p.windows_per_image * _ceil(p.filters, pe) * b, 0 if p.fixed_knobs else pe * _ceil(p.window, b))
            for pe, b in layer_choices(p, cycles_too)
        )
        for p in plans
        if p.is_compute
    ]


def _config(fronts: Sequence[LayerFront], picks: Picks) -> tuple[tuple[int, ...], tuple[int, ...]]:
    knobs = [f.knobs[i] for f, i in zip(fronts, picks)]
    return tuple(k[0] for k in knobs), tuple(k[1] for k in knobs)


def every_config(
    plans: Sequence[LayerPlan],
    cycles_too: bool = False,
    progress: Progress | None = None,
    seconds: float | None = SEARCH_SECONDS,
) -> tuple[list[HwFigures], bool]:
    """The figures of every useful configuration, a batch at a time; and whether all of them
    were evaluated within `seconds` (a network whose model has long transients, such as
    digits_autoencoder's, can take tens of milliseconds a configuration)."""
    configs = all_configs(plans, cycles_too)
    stop = None if seconds is None else time.monotonic() + seconds
    figs: list[HwFigures] = []
    for i in range(0, len(configs), EVERY_BATCH):
        if stop is not None and time.monotonic() > stop:
            return figs, False
        figs += figures_many(plans, configs[i : i + EVERY_BATCH])
        if progress is not None:
            progress(f"exact model: {len(figs):,} of {len(configs):,} configurations")
    return figs, True


def front_configs(
    plans: Sequence[LayerPlan],
    cycles_too: bool = False,
    progress: Progress | None = None,
    seconds: float | None = SEARCH_SECONDS,
) -> tuple[list[HwFigures], bool]:
    """The figures of the configurations `hw.fronts.pareto_search` evaluates on the way to
    the fronts of II and of latency against multipliers, from the front of the layers'
    slowest busy cycles; and whether the search ended by itself (not at `seconds`)."""
    fronts = layer_fronts(plans, cycles_too)

    def evaluate(batch: list[Picks]) -> list[HwFigures]:
        return figures_many(plans, [_config(fronts, p) for p in batch])

    def report(evaluated: int, on_fronts: int) -> None:
        if progress is not None:
            progress(f"searching the fronts: {evaluated:,} configurations evaluated, {on_fronts:,} on a front")

    found = pareto_search(
        fronts,
        threshold_picks(fronts),
        evaluate,
        [lambda f: (f.multipliers, f.ii), lambda f: (f.multipliers, f.latency)],
        progress=report,
        seconds=seconds,
    )
    return list(found.values.values()), found.complete


@dataclass
class Option:
    figures: HwFigures
    pareto_ii: bool = False
    pareto_latency: bool = False
    balanced: bool = False  # the --dsp-budget choice

    @property
    def label(self) -> str:
        f = self.figures
        return config_label(f.parallelism, f.cycles, f.strategies)

    def to_json(self) -> JsonObject:
        f = self.figures
        return {
            "parallelism": list(f.parallelism),
            "cycles": list(f.cycles),
            "latency": f.latency,
            "ii": f.ii,
            "strategies": list[Json](f.strategies),
            "multipliers": f.multipliers,
            "logic_cells": f.logic_cells,
            "macs": f.macs,
            "efficiency": f.efficiency,
            "memory_bits": f.memory_bits,
            "rom_bits": f.rom_bits,
            "line_buffer_bits": f.line_buffer_bits,
            "register_bits": f.register_bits,
            "pareto_ii": self.pareto_ii,
            "pareto_latency": self.pareto_latency,
            "balanced": self.balanced,
        }


@dataclass
class OptionsResult:
    model: str
    layers: list[str]
    options: list[Option]
    seconds: float
    cycles_too: bool
    budget: int | None = None
    notes: list[str] = field(default_factory=list)
    configurations: int = 0  # useful configurations: `options` holds all of them or the fronts' (`front_configs`)

    @property
    def complete(self) -> bool:
        """Whether every useful configuration was evaluated."""
        return len(self.options) >= self.configurations

    def sorted(self, key: str = "interval") -> list[Option]:
        if key not in SORT_KEYS:
            raise K2CError(f"bad sort key {key!r}: one of {', '.join(SORT_KEYS)}")

        def k(o: Option) -> tuple[float | list[int], ...]:
            f = o.figures
            figs = {"latency": f.latency, "interval": f.ii, "multipliers": f.multipliers}
            return (figs[key], *(figs[x] for x in SORT_KEYS if x != key), f.parallelism, f.cycles)

        return sorted(self.options, key=k)

    def to_json(self) -> str:
        return json.dumps(
            {
                "model": self.model,
                "compute_layers": self.layers,
                "cycles_too": self.cycles_too,
                "configurations": self.configurations,
                "evaluated": len(self.options),
                "seconds": self.seconds,
                "dsp_budget": self.budget,
                "notes": self.notes,
                "options": [o.to_json() for o in self.sorted("multipliers")],
            },
            indent=2,
        )

    def to_csv(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf)
        cols = [
            "config",
            "parallelism",
            "cycles",
            "latency",
            "ii",
            "strategies",
            "multipliers",
            "logic_cells",
            "macs",
            "efficiency",
            "memory_bits",
            "rom_bits",
            "line_buffer_bits",
            "register_bits",
            "pareto_ii",
            "pareto_latency",
            "balanced",
        ]
        writer.writerow(cols)
        for o in self.sorted("multipliers"):
            row = o.to_json()
            row["config"] = o.label
            row["parallelism"] = ",".join(map(str, o.figures.parallelism))
            row["cycles"] = ",".join(map(str, o.figures.cycles))
            row["strategies"] = ",".join(o.figures.strategies)
            writer.writerow([row[c] for c in cols])
        return buf.getvalue()


def explore(
    plans: Sequence[LayerPlan],
    model: str = "",
    cycles_too: bool = False,
    budget: int | None = None,
    progress: Progress | None = None,
    seconds: float | None = SEARCH_SECONDS,
    auto: Sequence[bool] = (),
    logic_budget: int | None = None,
) -> OptionsResult:
    """The useful configurations of the network `plans` (its own knobs are ignored): every
    one (`every_config`), or for more than `EXHAUSTIVE`, or more than the model evaluates in
    `seconds`, the fronts' (`front_configs`, searched for at most `seconds` more; None:
    until each ends by itself). The compute layers flagged in `auto` are tried at both
    strategies (`hw.strategy`: each set of them at latency within `logic_budget` LUT4 cells,
    the time shared between the sets)."""
    t0 = time.perf_counter()
    found = candidates(plans, auto, progress) if any(auto) else Candidates({}, [])
    sets = latency_sets(plans, found, logic_budget)
    share = None if seconds is None else seconds / len(sets)
    notes = list(found.notes)
    total, figs, cut = 0, [], []
    for chosen in sets:
        network = with_latency(plans, found, chosen)
        count = count_configs(network, cycles_too)
        got, complete = _configurations(network, count, cycles_too, progress, share)
        total += count
        figs += got
        if not complete:
            cut.append(chosen)
    figs = list({config_key(f): f for f in figs}.values())
    if cut:
        notes.append(
            f"the fronts were searched for {share:g} s ({len(figs):,} of {total:,} configurations evaluated): "
            "a longer --time-limit may find better points"
        )
    opts = [Option(f) for f in figs]
    mark_pareto(opts)
    if budget is not None:
        if progress is not None:
            progress(f"balancing within {budget} multipliers")
        if found.plans:
            chose = balanced_strategies(plans, found, budget, logic_budget, progress)
            alloc, summary = chose.allocation, chose.summary()
        else:
            alloc = balanced(plans, budget, progress=progress)
            summary = alloc.summary()
        hit = [o for o in opts if config_key(o.figures) == config_key(alloc.figures)]
        if hit:
            hit[0].balanced = True
        else:
            opts.append(Option(alloc.figures, balanced=True))
            mark_pareto(opts)
        notes.append(summary)
    seconds = time.perf_counter() - t0
    layers = [p.name for p in plans if p.is_compute]
    return OptionsResult(model, layers, opts, seconds, cycles_too, budget, notes, configurations=total)


def _configurations(
    plans: Sequence[LayerPlan], total: int, cycles_too: bool, progress: Progress | None, seconds: float | None
) -> tuple[list[HwFigures], bool]:
    """Every configuration of a network of `total`, or the fronts' (`explore`); and whether
    the search was complete."""
    figs, every = every_config(plans, cycles_too, progress, seconds) if total <= EXHAUSTIVE else ([], False)
    if every:
        return figs, True
    found, complete = front_configs(plans, cycles_too, progress, seconds)
    return list({config_key(f): f for f in [*figs, *found]}.values()), complete


def config_key(f: HwFigures) -> tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]:
    """What tells configurations apart: each compute layer's strategy and knobs."""
    return tuple(f.strategies), tuple(f.parallelism), tuple(f.cycles)


def mark_pareto(opts: Sequence[Option]) -> None:
    """Pareto-optimal in II, and in latency, against multipliers and the adder graphs' logic."""
    ii = front_flags([(o.figures.logic_cells, o.figures.multipliers, o.figures.ii) for o in opts])
    lat = front_flags([(o.figures.logic_cells, o.figures.multipliers, o.figures.latency) for o in opts])
    for o, a, b in zip(opts, ii, lat):
        o.pareto_ii, o.pareto_latency = a, b


def _pareto_text(o: Option) -> str:
    marks = [m for m, on in (("II", o.pareto_ii), ("lat", o.pareto_latency)) if on]
    return "+".join(marks)


def render(
    result: OptionsResult,
    console: Console | None = None,
    sort: str = "interval",
    max_rows: int | None = 40,
    pareto_only: bool = False,
) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    rows = result.sorted(sort)
    if pareto_only:
        rows = [o for o in rows if o.pareto_ii or o.pareto_latency or o.balanced]
    if result.budget is not None:
        rows = [o for o in rows if o.figures.multipliers <= result.budget or o.balanced]
    shown = rows if max_rows is None else rows[:max_rows]
    n_pareto = sum(1 for o in result.options if o.pareto_ii or o.pareto_latency)
    knobs = "pe and cycles" if result.cycles_too else "pe"
    counted = (
        f"{result.configurations:,} configurations ({knobs})"
        if result.complete
        else f"{result.configurations:,} configurations ({knobs}), {len(result.options):,} evaluated towards the fronts"
    )
    title = (
        f"{result.model}: {counted}, "
        f"{n_pareto} Pareto-optimal, model {1000 * result.seconds:.0f} ms; sorted by {sort}"
        + (f"; showing {len(shown)} of {len(rows)}" if len(shown) < len(rows) else "")
    )
    from rich import box

    logic = any(o.figures.logic_cells for o in result.options)
    caption = f"pe:cycles of {', '.join(result.layers)}" + (f" ({LATENCY_LABEL}: latency strategy)" if logic else "")
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD)
    table.add_column("pe:cycles", no_wrap=True)
    for col in ("latency", "II", "mult.", *(("LUT4 est.",) if logic else ()), "memory bits", "MAC eff."):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("Pareto")
    for o in shown:
        f = o.figures
        style = "bold green" if o.balanced else ("cyan" if o.pareto_ii else None)
        table.add_row(
            o.label + (" *" if o.balanced else ""),
            f"{f.latency:,}",
            _ii_text(f.ii),
            f"{f.multipliers:,}",
            *((f"{f.logic_cells:,}",) if logic else ()),
            f"{f.memory_bits:,}",
            f"{100 * f.efficiency:.1f}%",
            _pareto_text(o),
            style=style,
        )
    console.print(table)
    console.print(
        "cycles: latency = first input beat accepted -> output; II = steady-state cycles per image, "
        "back to back. MAC eff. = MACs / (multipliers x II). Pareto: II or latency vs multipliers"
        + (" and the adder graphs' LUT4 cells (estimated)." if logic else ".")
    )
    for note in result.notes:
        console.print(f"* {note}")


def _ii_text(ii: float) -> str:
    return f"{ii:,.0f}" if float(ii).is_integer() else f"{ii:,.2f}"
