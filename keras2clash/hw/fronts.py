"""Fronts of a network's configurations without enumerating their product.

A network's configurations are the product of its compute layers' choices of (pe, cycles):
7,260 for the jet tagger with `pe` alone, 1.6 million with the cycles knob too, 29 billion
for resnet_digits. The exact model takes about a millisecond a configuration, so the product
is out of reach; two facts keep the search small.

- A layer's busy cycles per image (`windows x G x b`) bound the network's II from below, and
  a configuration's multipliers are the sum of its layers'. The cheapest configuration
  whose layers are all busy at most `T` cycles takes each layer's cheapest choice meeting
  `T`, so sweeping `T` over the layers' distinct busy cycles gives the whole product's front
  of (multipliers, slowest layer's busy cycles) in at most the sum of the layers' choices
  (`threshold_picks`, equal to the brute force: tests/test_fronts.py).
- The exact II is not always the slowest layer's (windows arrive in bursts after a pooling,
  FIFOs and joins hold layers back), and the latency adds every layer's fill. So the exact
  model evaluates those picks, and a Pareto local search (`pareto_search`) moves each layer
  of every configuration on either exact front one or two steps along its own front, until
  no move adds a point to a front. On the examples whose product can be enumerated this
  finds the brute force's interval front whole and its latency front to within a few
  cycles at the fully parallel end (tests/test_fronts.py).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

Picks = tuple[int, ...]
"""A configuration: per compute layer, an index into that layer's `LayerFront`."""

V = TypeVar("V")


@dataclass(frozen=True)
class LayerFront:
    """One layer's choices on its own front: busy cycles ascending, multipliers strictly
    descending (a choice no faster and no cheaper than another is left out)."""

    busy: list[int]
    multipliers: list[int]
    knobs: list[tuple[int, int]]

    def cheapest(self, target: int) -> int | None:
        """Index of the cheapest choice with busy <= target (None: none is that fast)."""
        i = bisect.bisect_right(self.busy, target) - 1
        return None if i < 0 else i

    def __len__(self) -> int:
        return len(self.knobs)


def own_front(choices: Iterable[tuple[tuple[int, int], int, int]]) -> LayerFront:
    """The front of one layer's (knobs, busy, multipliers) choices; of equal figures the
    smallest knobs."""
    best: dict[int, tuple[int, tuple[int, int]]] = {}  # busy -> (multipliers, knobs)
    for knobs, busy, mult in choices:
        if busy not in best or (mult, knobs) < best[busy]:
            best[busy] = (mult, knobs)
    front = LayerFront([], [], [])
    for busy in sorted(best):
        mult, knobs = best[busy]
        if front.multipliers and mult >= front.multipliers[-1]:
            continue  # slower and no cheaper than a faster choice
        front.busy.append(busy)
        front.multipliers.append(mult)
        front.knobs.append(knobs)
    return front


def picks_at(fronts: Sequence[LayerFront], target: int) -> Picks | None:
    """Every layer's cheapest choice with busy <= target (None: some layer is never that fast)."""
    picks = [f.cheapest(target) for f in fronts]
    return None if any(i is None for i in picks) else tuple(picks)  # type: ignore[arg-type]


def threshold_picks(fronts: Sequence[LayerFront]) -> dict[Picks, int]:
    """The front of (multipliers, slowest layer's busy cycles) over the product of the
    layers' choices: one configuration per distinct busy value `T` a layer has (the layers'
    cheapest choices meeting it), each with the smallest `T` that gives it."""
    out: dict[Picks, int] = {}
    for target in sorted({b for f in fronts for b in f.busy}):
        picks = picks_at(fronts, target)
        if picks is not None:
            out.setdefault(picks, target)
    return out


def cost(fronts: Sequence[LayerFront], picks: Picks) -> int:
    """The layers' multipliers."""
    return sum(f.multipliers[i] for f, i in zip(fronts, picks))


def bound(fronts: Sequence[LayerFront], picks: Picks) -> int:
    """The slowest layer's busy cycles: a lower bound of the exact II."""
    return max(f.busy[i] for f, i in zip(fronts, picks))


def front_flags(points: Sequence[tuple[float, ...]]) -> list[bool]:
    """Which points are Pareto-optimal: no other point is <= in every figure and < in one
    (equal points are optimal together). A point is (cost, time), or (logic, cost, time)
    with few distinct logic values (one per set of layers built as adder graphs: the 2-D
    fronts of each logic value and of those below it)."""
    if not points or len(points[0]) == 2:
        return _flags_2d([(p[0], p[-1]) for p in points])
    flags = [False] * len(points)
    stair: list[tuple[float, float]] = []  # the front of the points at lower logic values
    for level in sorted({p[0] for p in points}):
        here = [i for i, p in enumerate(points) if p[0] == level]
        pairs = [(points[i][1], points[i][2]) for i in here]
        costs = [c for c, _ in stair]
        for i, (cost, when), own in zip(here, pairs, _flags_2d(pairs)):
            j = bisect.bisect_right(costs, cost) - 1  # the fastest point below costing no more
            flags[i] = own and not (j >= 0 and stair[j][1] <= when)
        merged = [*stair, *pairs]
        stair = sorted({merged[k] for k, on in enumerate(_flags_2d(merged)) if on})
    return flags


def _flags_2d(points: Sequence[tuple[float, float]]) -> list[bool]:
    order = sorted(range(len(points)), key=lambda i: points[i])
    flags = [False] * len(points)
    best = float("inf")
    for i in order:
        if points[i][1] < best:
            flags[i] = True
            best = points[i][1]
    seen = {points[i] for i in range(len(points)) if flags[i]}
    return [flags[i] or points[i] in seen for i in range(len(points))]


STEPS = (-2, -1, 1, 2)


def neighbours(fronts: Sequence[LayerFront], picks: Picks, steps: Sequence[int] | None = None) -> list[Picks]:
    """Configurations that move one layer of `picks` by `steps` along its own front."""
    out = []
    for j, (f, i) in enumerate(zip(fronts, picks)):
        for s in STEPS if steps is None else steps:
            if 0 <= i + s < len(f):
                out.append((*picks[:j], i + s, *picks[j + 1 :]))
    return out


MAX_EVALUATIONS = 200_000
"""Configurations `pareto_search` evaluates at most (minutes of the exact model)."""

BATCH = 1024
"""Configurations the exact model evaluates together (one vectorised run); the time limit is
checked between batches."""


@dataclass
class Search(Generic[V]):
    """What `pareto_search` evaluated, and whether it ended because no move was left (not at
    its time or evaluation limit)."""

    values: dict[Picks, V]
    complete: bool


def pareto_search(
    fronts: Sequence[LayerFront],
    start: Iterable[Picks],
    evaluate: Callable[[list[Picks]], list[V]],
    objectives: Sequence[Callable[[V], tuple[float, float]]],
    progress: Callable[[int, int], object] | None = None,
    seconds: float | None = None,
    limit: int = MAX_EVALUATIONS,
) -> Search[V]:
    """The configurations evaluated on the way to the fronts of `objectives` (each the
    (multipliers, time) of an evaluated value), from `start`: each round evaluates the
    neighbours of every configuration on a front that has not had its turn, until there is
    none (or `seconds` or `limit` run out). A round takes the configurations on a front in
    an order spread along the fronts (every fourth first), so a round cut short by the time
    limit has moved along the whole front. `progress(evaluated, on_fronts)` after each batch."""
    stop = None if seconds is None else time.monotonic() + seconds
    seen: dict[Picks, V] = {}
    on_front: set[Picks] = set()

    def out_of_time() -> bool:
        return len(seen) >= limit or (stop is not None and time.monotonic() > stop)

    def run(batch: list[Picks]) -> None:
        batch = [p for p in dict.fromkeys(batch) if p not in seen]
        for i in range(0, len(batch), BATCH):
            if out_of_time():
                return
            chunk = batch[i : i + BATCH][: limit - len(seen)]
            seen.update(zip(chunk, evaluate(chunk)))
            if progress is not None:
                progress(len(seen), len(on_front))

    def fronts_of_seen() -> list[Picks]:
        keys = list(seen)
        on: list[Picks] = []
        for objective in objectives:
            flags = front_flags([objective(seen[k]) for k in keys])
            on.extend(sorted((k for k, f in zip(keys, flags) if f), key=lambda k: objective(seen[k])))
        return list(dict.fromkeys(on))

    run(list(start))
    expanded: set[Picks] = set()
    while True:
        front = fronts_of_seen()
        on_front = set(front)
        todo = [k for k in front if k not in expanded]
        if not todo or out_of_time():
            return Search(seen, not todo)
        todo = [k for r in range(4) for k in todo[r::4]]
        expanded.update(todo)
        run([n for k in todo for n in neighbours(fronts, k)])
