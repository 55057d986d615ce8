"""Fronts without the product: `hw.fronts` against brute force.

The threshold sweep gives the whole product's front of (multipliers, slowest layer's busy
cycles), for any layers' choices (hypothesis); the Pareto search on the exact model finds
the brute force's interval and latency fronts of small networks whole; the balanced
allocation stays within its budget.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras2clash.hw import fronts, hwmodel, options
from keras2clash.hw.allocate import balanced
from keras2clash.hw.planner import make_plan
from keras2clash.quant.formats import parse_format

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

choice = st.tuples(st.integers(1, 40), st.integers(1, 40))  # (busy, multipliers)
layers = st.lists(st.lists(choice, min_size=1, max_size=6), min_size=1, max_size=4)


def _front(points):
    """(cost, time) points on the Pareto front, as a sorted list without repeats."""
    points = sorted(set(points))
    flags = fronts.front_flags(points)
    return [p for p, f in zip(points, flags) if f and not any(q[0] == p[0] and q[1] < p[1] for q in points)]


@settings(max_examples=200, deadline=None)
@given(layers)
def test_threshold_sweep_gives_the_products_front(choices) -> None:
    per_layer = [fronts.own_front(((i, 1), busy, mult) for i, (busy, mult) in enumerate(ch)) for ch in choices]
    for f in per_layer:
        assert f.busy == sorted(set(f.busy)) and f.multipliers == sorted(set(f.multipliers), reverse=True)
    brute = [(sum(m for _, m in combo), max(b for b, _ in combo)) for combo in itertools.product(*choices)]
    swept = [(fronts.cost(per_layer, p), fronts.bound(per_layer, p)) for p in fronts.threshold_picks(per_layer)]
    assert _front(swept) == _front(brute)


def test_front_flags() -> None:
    assert fronts.front_flags([(1, 10), (2, 5), (2, 6), (3, 5), (4, 1), (4, 1)]) == [
        True,
        True,
        False,
        False,
        True,
        True,
    ]


def _plans(name: str):
    from keras2clash.frontend.convert import load_keras_model, to_ir

    return make_plan(to_ir(load_keras_model(EXAMPLES / name / f"{name}.keras")), parse_format("1,7,8"))


@pytest.mark.parametrize(("name", "cycles_too"), [("thesis_cnn", False), ("iris", True), ("digits_dense", False)])
def test_search_finds_the_brute_force_fronts(name, cycles_too) -> None:
    """Every point of both fronts of the whole product, with a fraction of it evaluated."""
    plans = _plans(name)
    brute = hwmodel.figures_many(plans, options.all_configs(plans, cycles_too))
    found, complete = options.front_configs(plans, cycles_too, seconds=None)
    assert complete and len(found) < len(brute)
    for what in ("ii", "latency"):
        want = _front([(f.multipliers, getattr(f, what)) for f in brute])
        assert _front([(f.multipliers, getattr(f, what)) for f in found]) == want
    # the figures are the exact model's for each configuration
    by_config = {(tuple(f.parallelism), tuple(f.cycles)): f for f in brute}
    for f in found:
        assert f == by_config[(tuple(f.parallelism), tuple(f.cycles))]


def test_explore_searches_a_large_product() -> None:
    """digits_dense with the cycles knob: 39,520 configurations, not enumerated; the search
    ends by itself and marks both fronts among what it evaluated."""
    plans = _plans("digits_dense")
    result = options.explore(plans, "digits_dense", cycles_too=True, seconds=None)
    assert result.configurations == options.count_configs(plans, True) > options.EXHAUSTIVE
    assert not result.complete and len(result.options) < result.configurations // 10
    assert not result.notes  # the search was not cut short
    assert any(o.pareto_ii for o in result.options) and any(o.pareto_latency for o in result.options)


@settings(max_examples=12, deadline=None)
@given(st.integers(16, 400))
def test_balanced_meets_the_budget(budget) -> None:
    plans = _plans("digits_dense")
    alloc = balanced(plans, budget)
    assert alloc.figures.multipliers <= budget
    assert alloc.figures.ii >= alloc.min_target  # the layers' busy cycles bound the II
