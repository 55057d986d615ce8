"""Balanced allocation: both knobs of every compute layer within a multiplier budget.

A hand designer balances a pipeline: the layer that sets the pace gets more multipliers,
a layer that would sit idle gets fewer. Here, with a layer's own busy cycles per image
`windows x G x b` (`G = ceil(F / pe)`, `b` = cycles; its multipliers `pe x ceil(K / b)`):

1. for a target interval `T`, every layer takes its cheapest (pe, b) with busy cycles
   `<= T` (fewest multipliers; then fewest busy cycles);
2. the smallest `T` whose total fits the budget is found by binary search over the
   layers' distinct busy-cycle values (the total is monotone in `T`);
3. the layers' busy cycles are a lower bound of the II, not the II (the input's beat rate,
   the window generators' bursts and the flatten's collect cycle add to it), so the exact
   model (`hwmodel`) then evaluates the allocations of the feasible targets, fastest first,
   and keeps the one with the smallest exact II (then the shortest latency, then fewest
   multipliers);
4. a local search then moves each layer up to two steps along its own front (faster and
   dearer, or slower and cheaper) at once, within the budget, while the exact II improves:
   it gives a layer whose windows arrive in bursts (after pooling) the extra multipliers
   its bursts need, which a per-image busy-cycles target cannot see.

Because the busy cycles bound the II from below, steps 3 and 4 never run the exact model
on an allocation whose slowest layer is busy longer than the best II found: it could not
be chosen. That keeps the search to seconds where the model of a network with joins takes
tens of milliseconds an allocation.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from keras2clash.errors import K2CError
from keras2clash.hw.fronts import LayerFront, Picks, bound, own_front, picks_at
from keras2clash.hw.hwmodel import MAX_WINDOW_FIFO, figures, figures_many, queued, with_deep_branch_fifos, with_fifos
from keras2clash.hw.plan import LATENCY_STRATEGY, LayerPlan
from keras2clash.hw.planner import with_knobs
from keras2clash.hw.resources import HwFigures


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


LATENCY_LABEL = "L"
"""A latency-strategy layer in a configuration's label (its pe and cycles are its own)."""


def config_label(pes: Sequence[int], cycles: Sequence[int], strategies: Sequence[str] = ()) -> str:
    """`8:1,8:1,5:1` (pe:cycles per compute layer, the form --config takes), `L` for a layer
    at the latency strategy."""
    built = list(strategies) or [""] * len(pes)
    return ",".join(LATENCY_LABEL if s == LATENCY_STRATEGY else f"{p}:{b}" for p, b, s in zip(pes, cycles, built))


CANDIDATE_BATCH = 8
"""Feasible targets' allocations the exact model ranks together (`balanced`, step 3)."""


def layer_front(plan: LayerPlan) -> LayerFront:
    """Every (pe, b) of the layer, on its own front of (busy cycles per image, multipliers); its
    own alone, with its own multipliers, when its strategy fixes them."""
    windows = plan.windows_per_image
    if plan.fixed_knobs:
        knobs = plan.engine_knobs
        return own_front([((knobs.pe, knobs.cycles), windows * plan.steps, plan.multipliers - plan.fixed_multipliers)])
    return own_front(
        ((p, b), windows * _ceil(plan.filters, p) * b, p * _ceil(plan.window, b))
        for p in range(1, plan.filters + 1)
        for b in range(1, plan.window + 1)
    )


@dataclass(frozen=True)
class Allocation:
    budget: int
    target: int  # the busy-cycles target whose allocation was chosen
    figures: HwFigures
    min_target: int  # the smallest feasible target (a lower bound of the II at this budget)
    evaluated: int  # allocations checked with the exact model

    @property
    def parallelism(self) -> list[int]:
        return self.figures.parallelism

    @property
    def cycles(self) -> list[int]:
        return self.figures.cycles

    def summary(self) -> str:
        f = self.figures
        label = config_label(f.parallelism, f.cycles, f.strategies)
        return (
            f"balanced within {self.budget} multipliers: pe:cycles {label} -> II {f.ii:g} cycles "
            f"(layers' busy bound {self.min_target}), latency {f.latency}, {f.multipliers} multipliers, "
            f"multiplier efficiency {100 * f.efficiency:.1f}% ({self.evaluated} allocations checked "
            f"with the exact model)"
        )


def balanced(plans: Sequence[LayerPlan], budget: int, progress: Callable[[str], object] | None = None) -> Allocation:
    """The balanced (pe, cycles) of every compute layer within `budget` multipliers.

    The budget counts every multiplier of the design: the layers outside the filter engines
    that multiply (BatchNormalization blocks, element-wise products) take theirs first.
    Candidates are ranked with deep FIFOs of windows before every convolution's engine and
    deep branch FIFOs before every join (the II `hwmodel.window_fifos` and
    `hwmodel.fifo_depths` reach at emit time); the chosen one's figures are then its own,
    with the FIFOs it gets, as `network.plan_network` sizes them. `progress` is told how
    many allocations the exact model has checked."""

    geometry = plans
    plans = with_deep_branch_fifos(
        [queued(p, windows=MAX_WINDOW_FIFO) if p.is_compute and p.is_windowed else p for p in plans]
    )
    compute = [p for p in plans if p.is_compute]
    if not compute:
        raise K2CError("the model has no dense/conv2d layer to allocate multipliers to")
    fixed = {
        f"{p.name} beside its engine" if p.is_compute else p.name: p.fixed_multipliers
        if p.is_compute
        else p.multipliers
        for p in plans
    }
    fixed = {name: n for name, n in fixed.items() if n}  # what the engines' knobs do not change
    fronts = [layer_front(p) for p in compute]
    floor = sum(f.multipliers[-1] for f in fronts)
    if budget < floor + sum(fixed.values()):
        others = f" and {sum(fixed.values())} in {', '.join(fixed)}" if fixed else ""
        raise K2CError(
            f"multiplier budget {budget} too small: the model needs at least "
            f"{floor + sum(fixed.values())} (one multiplier per dense/conv2d layer{others})"
        )
    shared = budget - sum(fixed.values())  # what the engines may share
    targets = sorted({b for f in fronts for b in f.busy})

    def allocation(target: int) -> Picks | None:
        return picks_at(fronts, target)

    def cost(picks: Picks) -> int:
        return sum(f.multipliers[i] for f, i in zip(fronts, picks))

    lo, hi = 0, len(targets) - 1  # targets[hi] is feasible (every layer at its cheapest)
    while lo < hi:
        mid = (lo + hi) // 2
        picks = allocation(targets[mid])
        if picks is not None and cost(picks) <= shared:
            hi = mid
        else:
            lo = mid + 1
    feasible = targets[lo:]
    candidates: dict[tuple[tuple[int, int], ...], int] = {}
    for target in feasible:
        picks = allocation(target)
        assert picks is not None
        key = tuple(f.knobs[i] for f, i in zip(fronts, picks))
        candidates.setdefault(key, target)
    index = [{k: i for i, k in enumerate(f.knobs)} for f in fronts]
    known: dict[tuple[tuple[int, int], ...], HwFigures] = {}

    def evaluate(keys: list[tuple[tuple[int, int], ...]]) -> list[HwFigures]:
        new = [k for k in dict.fromkeys(keys) if k not in known]
        known.update(zip(new, figures_many(plans, [_config(k) for k in new])))
        if progress is not None:
            progress(f"balancing within {budget} multipliers: {len(known):,} allocations checked")
        return [known[k] for k in keys]

    rank = lambda f: (f.ii, f.latency, f.multipliers)  # noqa: E731
    # Fastest targets first, a few at a time: a target above the best exact II found cannot
    # give a shorter one (the busy cycles bound the II from below), nor can any after it.
    keys = sorted(candidates, key=lambda k: candidates[k])
    key, fig = keys[0], evaluate(keys[:1])[0]
    for start in range(1, len(keys), CANDIDATE_BATCH):
        batch = [k for k in keys[start : start + CANDIDATE_BATCH] if candidates[k] <= fig.ii]
        if not batch:
            break
        for k, f in zip(batch, evaluate(batch)):
            if rank(f) < rank(fig):
                key, fig = k, f
    target = candidates[key]
    for _ in range(20):
        here = [index[j][k] for j, k in enumerate(key)]
        moves = []
        for shifts in itertools.product(range(-2, 3), repeat=len(fronts)):
            picks = tuple(h + s for h, s in zip(here, shifts))
            if any(not 0 <= i < len(f.knobs) for i, f in zip(picks, fronts)) or cost(picks) > shared:
                continue
            moves.append(picks)
        # A move whose slowest layer is busy longer than the II cannot shorten it (the busy
        # cycles bound the II from below): only the others are worth the exact model.
        near = [tuple(f.knobs[i] for f, i in zip(fronts, m)) for m in moves[:4096] if bound(fronts, m) <= fig.ii]
        if not near:
            break
        figs = evaluate(near)
        i = min(range(len(near)), key=lambda i: rank(figs[i]))
        if rank(figs[i]) >= rank(fig):
            break
        key, fig = near[i], figs[i]
    exact = with_fifos(with_knobs(geometry, *_config(key)))
    return Allocation(budget, target, figures(exact), targets[lo], len(known))


def _config(key: tuple[tuple[int, int], ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(k[0] for k in key), tuple(k[1] for k in key)
