"""Each compute layer's strategy chosen with its knobs (`--strategy auto`, hw.strategy): the
allocator compares the sets of layers built as adder graphs within a logic budget and keeps
the one with the best exact II; `options` lists both strategies of every such layer, with the
adder graphs' LUT4 cells as a third figure of its fronts. The chosen design is bit-exact in
Clash like any other."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import keras2clash as k2c
from helpers import assert_clash_matches_golden, needs_toolchain, random_dense_model
from keras2clash.backend.project import load_project
from keras2clash.design import DesignOptions
from keras2clash.errors import K2CError
from keras2clash.fpga.devices import DEVICES, LOGIC_SHARE
from keras2clash.hw import allocate, hwmodel, options, strategy
from keras2clash.hw.fronts import front_flags
from keras2clash.network import load_network

LAYERS = [(6, "relu"), (5, "relu"), (3, "linear")]


def _model(seed=3):
    return random_dense_model(LAYERS, n_in=6, seed=seed, scale=1.5)


def _brute_flags(points):
    def dominates(a, b):
        return all(x <= y for x, y in zip(a, b)) and a != b

    return [not any(dominates(q, p) for q in points) for p in points]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 10, 25]), st.integers(0, 6), st.integers(0, 6)), max_size=30))
def test_three_figure_fronts_equal_the_brute_force(points):
    assert front_flags(points) == _brute_flags(points)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=30))
def test_two_figure_fronts_equal_the_brute_force(points):
    assert front_flags(points) == _brute_flags(points)


def test_auto_chooses_the_best_set_of_latency_layers_within_the_budgets():
    """Every set of layers at latency balanced by hand: the allocator's choice has the best
    (II, latency, multipliers, logic) of those within the logic budget."""
    model = _model()
    base = load_network(model, "1,2,3", strategy="auto", choose=False)
    assert base.auto == [True, True, True]
    found = strategy.candidates(base.plans, base.auto)
    cells = {i: p.logic_cells for i, p in found.plans.items()}
    assert all(c > 0 for c in cells.values())
    for logic_budget in (sum(cells.values()), min(cells.values()), 1):
        rows = []
        for r in range(4):
            for chosen in itertools.combinations(sorted(cells), r):
                if sum(cells[i] for i in chosen) > logic_budget:
                    continue
                f = allocate.balanced(strategy.with_latency(base.plans, found, frozenset(chosen)), 4).figures
                rows.append((f.ii, f.latency, f.multipliers, f.logic_cells, f.strategies))
        net = load_network(model, "1,2,3", strategy="auto", dsp_budget=4, logic_budget=logic_budget)
        got = hwmodel.figures(net.plans)
        assert (got.ii, got.latency, got.multipliers, got.logic_cells, got.strategies) == min(rows)
        assert got.logic_cells <= logic_budget and got.multipliers <= 4
    everything = load_network(model, "1,2,3", strategy="auto", dsp_budget=4)
    assert hwmodel.figures(everything.plans).strategies == ["latency"] * 3  # they fit the default budget
    assert hwmodel.figures(everything.plans).ii == 1


def test_auto_per_layer_leaves_the_others_as_given():
    net = load_network(_model(), "1,2,3", strategy="resource,auto,latency", dsp_budget=5, logic_budget=1)
    assert [p.engine_knobs.strategy for p in net.plans if p.is_compute] == ["resource", "resource", "latency"]
    net = load_network(_model(), "1,2,3", strategy="resource,auto,latency", dsp_budget=5)
    assert [p.engine_knobs.strategy for p in net.plans if p.is_compute] == ["resource", "latency", "latency"]


def test_many_candidates_grow_one_greedy_set_within_the_logic_budget():
    """Beyond four candidates, the sets are a greedy knapsack's: each the last plus one layer,
    in order of MACs per logic cell, skipping a layer that no longer fits."""
    model = random_dense_model([(6, "relu"), (5, "relu"), (7, "relu"), (4, "relu"), (3, "linear")], 6, seed=2)
    base = load_network(model, "1,2,3", strategy="auto", choose=False)
    found = strategy.candidates(base.plans, base.auto)
    assert len(found.plans) == 5
    cells = {i: p.logic_cells for i, p in found.plans.items()}
    budget = sum(cells.values()) - min(cells.values()) // 2
    sets = strategy.latency_sets(base.plans, found, budget)
    assert sets[0] == frozenset() and all(a < b and len(b - a) == 1 for a, b in zip(sets, sets[1:]))
    assert all(strategy.logic(found, s) <= budget for s in sets) and len(sets) == 5
    worth = [base.plans[i].macs / cells[i] for i in sorted(cells, key=lambda i: -base.plans[i].macs / cells[i])]
    added = [base.plans[next(iter(b - a))].macs / cells[next(iter(b - a))] for a, b in zip(sets, sets[1:])]
    assert added == sorted(added, reverse=True) and set(added) <= set(worth)
    net = load_network(model, "1,2,3", strategy="auto", dsp_budget=8, logic_budget=budget)
    assert hwmodel.figures(net.plans).logic_cells <= budget


def test_options_list_both_strategies_with_their_logic():
    base = load_network(_model(), "1,2,3", strategy="auto", choose=False)
    result = options.explore(base.plans, "net", auto=base.auto, seconds=None)
    found = strategy.candidates(base.plans, base.auto)
    per_layer = [found.plans[i].logic_cells for i in sorted(found.plans)]
    # the product of both strategies: each layer's resource pe choices, or its one latency choice
    dense = [p for p in base.plans if p.is_compute]
    assert result.configurations == np.prod([len(options.layer_choices(p)) + 1 for p in dense])
    assert len(result.options) == result.configurations
    by_label = {o.label: o for o in result.options}
    assert by_label["L,L,L"].figures.multipliers == 0 and by_label["L,L,L"].figures.ii == 1
    assert by_label["L,L,L"].figures.logic_cells == sum(per_layer)
    mixed = by_label["L,5:1,L"].figures
    assert (mixed.logic_cells, mixed.multipliers) == (per_layer[0] + per_layer[2], 30)
    assert mixed.efficiency == pytest.approx(dense[1].macs / (30 * mixed.ii))  # the multipliers' MACs only
    # fronts of three figures: the cheapest all-resource design and the all-latency one are on both
    assert by_label["L,L,L"].pareto_ii and by_label["1:1,1:1,1:1"].pareto_ii
    flags = _brute_flags([(o.figures.logic_cells, o.figures.multipliers, o.figures.ii) for o in result.options])
    assert [o.pareto_ii for o in result.options] == flags
    data = json.loads(result.to_json())
    row = next(r for r in data["options"] if r["strategies"] == ["latency", "resource", "latency"])
    assert row["logic_cells"] == per_layer[0] + per_layer[2]
    # a logic budget keeps only the sets that fit it
    small = options.explore(base.plans, "net", auto=base.auto, logic_budget=min(per_layer), seconds=None)
    assert max(o.figures.logic_cells for o in small.options) == min(per_layer)


def test_a_layer_not_built_at_latency_stays_at_resource_with_a_note():
    import keras

    model = keras.Sequential(
        [
            keras.Input((8, 8, 2)),
            keras.layers.Conv2D(3, 3, dilation_rate=2, name="dilated"),
            keras.layers.Flatten(),
            keras.layers.Dense(4, name="head"),
        ]
    )
    base = load_network(model, "1,3,4", strategy="auto", choose=False)
    found = strategy.candidates(base.plans, base.auto)
    assert [base.plans[i].name for i in found.plans] == ["head"]
    assert len(found.notes) == 1 and found.notes[0].startswith("dilated stays at resource: layer 'dilated' (conv2d)")


def test_auto_and_the_logic_budget_are_refused_in_one_line():
    with pytest.raises(K2CError, match="--strategy auto chooses each layer's strategy with the multipliers"):
        load_network(_model(), "1,2,3", strategy="auto")
    with pytest.raises(K2CError, match="bad --logic-budget 'lots': a number of LUT4 cells"):
        DesignOptions.of(logic_budget="lots")
    with pytest.raises(K2CError, match="bad --logic-budget '0'"):
        DesignOptions.of(logic_budget=0)
    assert DesignOptions.of(logic_budget="ecp5-85k").logic_budget == int(LOGIC_SHARE * DEVICES["ecp5-85k"].luts)
    assert DesignOptions.of(strategy="auto,latency").strategy == ("auto", "latency")


@needs_toolchain
@pytest.mark.toolchain
def test_an_auto_chosen_design_bit_exact_in_clash(tmp_path):
    """The logic budget fits one layer's adder graph: a design of both strategies."""
    model = _model(seed=5)
    base = load_network(model, "1,2,3", strategy="auto", choose=False)
    found = strategy.candidates(base.plans, base.auto)
    budget = min(p.logic_cells for p in found.plans.values())
    root = k2c.emit(model, "1,2,3", tmp_path / "net", strategy="auto", dsp_budget=6, logic_budget=budget, show=False)
    project = load_project(root)
    built = [p.engine_knobs.strategy for p in project.plans if p.is_compute]
    assert sorted(built) == ["latency", "resource", "resource"]
    first = project.plans[0].in_fmt
    x = np.random.default_rng(5).integers(first.raw_min, first.raw_max + 1, (30, 6))
    assert_clash_matches_golden(project, x, 5)
