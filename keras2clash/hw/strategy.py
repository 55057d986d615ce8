"""Each compute layer's strategy chosen with its knobs (`--strategy auto`).

A layer built at the latency strategy (its constant weights in an adder graph, one window a
cycle) takes no multiplier and is as fast as its input can feed it; what it costs is logic,
the adder graph's carry chains (`Kind.logic_cells`). Which layers to build so is therefore a
choice of logic against multipliers and time, made with the exact model like the knobs:

- each layer left to `auto` whose kind builds it at latency gets its latency plan (its graph
  solved once, then cached); a layer whose kind cannot stays at resource, with a note why;
- the sets of those layers to build at latency (`latency_sets`) within the logic budget:
  every such set when there are at most `EVERY_SET` layers, otherwise the sets a greedy
  knapsack grows, taking the layers in order of the multiply-accumulates each takes off the
  multipliers per logic cell, each layer that still fits one more;
- each set is then a network of fixed strategies whose knobs `hw.allocate.balanced` balances
  (`balanced_strategies`) or `hw.options` explores.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from keras2clash.errors import K2CError
from keras2clash.hw.allocate import Allocation, balanced
from keras2clash.hw.plan import AUTO_STRATEGY, DEFAULT_STRATEGY, LATENCY_STRATEGY, LayerPlan

EVERY_SET = 4
"""Up to this many layers that may be built at latency, every set of them is tried (16);
beyond, the greedy prefixes (one more layer each)."""

Progress = Callable[[str], object]


def split_auto(strategy: str | Sequence[str] | None, n_compute: int) -> tuple[str | list[str] | None, list[bool]]:
    """`--strategy` with `auto` taken out: the strategies to plan with (`auto` planned at
    resource) and which compute layers were left to `auto`."""
    if strategy is None:
        return None, [False] * n_compute
    values = [strategy] * n_compute if isinstance(strategy, str) else list(strategy)
    if len(values) != n_compute:  # make_plan names the mismatch
        return list(values), [False] * n_compute
    auto = [v == AUTO_STRATEGY for v in values]
    return [DEFAULT_STRATEGY if a else v for v, a in zip(values, auto)], auto


@dataclass(frozen=True)
class Candidates:
    """The latency plans of the layers left to `auto` (by index in the network's plans) and a
    note for each such layer that stays at resource."""

    plans: dict[int, LayerPlan]
    notes: list[str]


def candidates(plans: Sequence[LayerPlan], auto: Sequence[bool], progress: Progress | None = None) -> Candidates:
    """Each compute layer marked in `auto` (one flag per compute layer) at the latency strategy
    where its kind builds it so."""
    compute = [i for i, p in enumerate(plans) if p.is_compute]
    out: dict[int, LayerPlan] = {}
    notes = []
    for i, flagged in zip(compute, auto, strict=True):
        if not flagged:
            continue
        if progress is not None:
            progress(f"the adder graph of layer '{plans[i].name}' (solved once, then cached)")
        try:
            out[i] = plans[i].with_strategy(LATENCY_STRATEGY)
        except K2CError as e:
            notes.append(f"{plans[i].name} stays at resource: {e}")
    return Candidates(out, notes)


def latency_sets(plans: Sequence[LayerPlan], found: Candidates, logic_budget: int | None) -> list[frozenset[int]]:
    """The sets of candidate layers to build at latency (module docstring), the empty set first;
    only those whose adder graphs fit `logic_budget` LUT4 cells (None: every one)."""
    layers = sorted(found.plans)

    def fits(chosen: frozenset[int]) -> bool:
        return logic_budget is None or logic(found, chosen) <= logic_budget

    if len(layers) <= EVERY_SET:
        every = (frozenset(c) for r in range(len(layers) + 1) for c in itertools.combinations(layers, r))
        return [s for s in every if fits(s)]

    def worth(i: int) -> float:
        return plans[i].macs / max(found.plans[i].logic_cells, 1)

    sets = [frozenset[int]()]
    for i in sorted(layers, key=worth, reverse=True):
        if fits(sets[-1] | {i}):
            sets.append(sets[-1] | {i})
    return sets


def logic(found: Candidates, chosen: frozenset[int]) -> int:
    """LUT4 cells of the adder graphs of the layers in `chosen`."""
    return sum(found.plans[i].logic_cells for i in chosen)


def with_latency(plans: Sequence[LayerPlan], found: Candidates, chosen: frozenset[int]) -> list[LayerPlan]:
    """The network with the layers in `chosen` at their latency plans."""
    return [found.plans[i] if i in chosen else p for i, p in enumerate(plans)]


@dataclass(frozen=True)
class StrategyAllocation:
    """The strategies and balanced knobs `balanced_strategies` chose, and what it compared."""

    allocation: Allocation
    strategies: list[str]
    logic_budget: int | None
    sets: int  # sets of latency layers balanced
    notes: list[str]

    def summary(self) -> str:
        f = self.allocation.figures
        latency = [p for p, s in zip(self.layers, self.strategies) if s == LATENCY_STRATEGY]
        built = (
            f"{', '.join(latency)} at latency ({f.logic_cells:,} LUT4 cells)" if latency else "every layer at resource"
        )
        within = "" if self.logic_budget is None else f" within {self.logic_budget:,} LUT4 cells of adder graphs"
        return (
            f"strategies chosen{within} ({self.sets} set(s) of layers compared): {built}; " + self.allocation.summary()
        )

    @property
    def layers(self) -> list[str]:
        return [r.name for r in self.allocation.figures.layers if r.strategy]


def balanced_strategies(
    plans: Sequence[LayerPlan],
    found: Candidates,
    budget: int,
    logic_budget: int | None,
    progress: Progress | None = None,
) -> StrategyAllocation:
    """The strategy of every candidate layer (`candidates`), and every layer's balanced knobs,
    within `budget` multipliers and `logic_budget` LUT4 cells of adder graphs (None: no bound):
    of the latency sets (`latency_sets`) the one whose balanced allocation has the shortest
    exact II, then latency, then fewest multipliers, then least logic."""
    best: tuple[tuple[float, int, int, int], Allocation] | None = None
    sets = latency_sets(plans, found, logic_budget)
    refusals = []
    for chosen in sets:
        try:
            alloc = balanced(with_latency(plans, found, chosen), budget, progress=progress)
        except K2CError as e:  # too few multipliers for the layers left at resource
            refusals.append(str(e))
            continue
        f = alloc.figures
        rank = (f.ii, f.latency, f.multipliers, f.logic_cells)
        if best is None or rank < best[0]:
            best = (rank, alloc)
    if best is None:
        raise K2CError(refusals[0])
    alloc = best[1]
    return StrategyAllocation(alloc, alloc.figures.strategies, logic_budget, len(sets), found.notes)
