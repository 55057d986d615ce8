"""The exact hardware model: hwmodel == Clash simulation, options, balanced
allocation, report.

The model must equal the Clash simulation exactly: every image's accept cycle and output
cycle (so the first latency and the mean interval too), images back to back, on twelve
configurations across the examples (thesis CNN with cycles > 1, backpressure and G = 1
engines; cnn_variants with same padding, strides and average pooling; digits_dense with a
fast layer stalled by a slow one; iris), including the --dsp-budget choice.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import needs_toolchain
from keras2clash.hw import hwmodel
from keras2clash.hw.planner import make_plan
from keras2clash.quant.formats import parse_format

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

MEASURED = {  # (latency, II, multipliers) of the thesis CNN at 1,7,8, cycles 1,1,1, not
    # pipelined, without FIFOs, by the processing elements (p1, p2, p3) of conv_1, conv_2, dense.
    # Multipliers: 9 p1 + 144 p2 + 64 p3, each engine's elements times its window (3x3x1,
    # 3x3x16, 64 values). II: conv_1 is busy 144 windows x 16 / p1 filter groups per image;
    # its window generator holds one window, so without FIFOs it waits for conv_2 and the II
    # is 15 to 40 cycles above that bound (and above the thesis' THESIS_II), while emit's
    # FIFOs reach it exactly. Latency: the hardware model's rules (hw/blocks.py) on the first
    # image: each engine S = G steps per window, its D pipeline cycles and its load from the
    # window generator's register the cycle after the accept (conv_1, conv_2: 1 each); each
    # 2x2 pooling's PoolDepth = 1 + 1 + 1 registers and its queue; Top's input and output
    # registers (1 + 1) and its class stage over 10 values (ClassDepth = 2 + 4, and a queue).
    # The model equals the Clash simulation cycle for cycle (test_model_equals_clash_simulation
    # runs (1, 1, 1) among its configurations).
    (1, 1, 1): (2383, 2319, 217),
    (2, 2, 2): (1218, 1175, 434),
    (4, 4, 2): (638, 603, 740),
    (8, 8, 5): (356, 328, 1544),
}
THESIS_II = {(1, 1, 1): 2304, (2, 2, 2): 1168, (4, 4, 2): 600, (8, 8, 5): 316}


@pytest.fixture(scope="module")
def thesis_ir():
    from keras2clash.frontend.convert import load_keras_model, to_ir

    return to_ir(load_keras_model(EXAMPLES / "thesis_cnn" / "thesis_cnn.keras"))


def _plans(ir, pes=None, cycles=None, pipeline=0):
    return make_plan(ir, parse_format("1,7,8"), pes, cycles=cycles, pipeline=pipeline)


@pytest.mark.parametrize("pes", list(MEASURED))
def test_model_gives_the_measured_thesis_figures(thesis_ir, pes) -> None:
    latency, interval, multipliers = MEASURED[pes]
    p1, p2, p3 = pes
    t = hwmodel.timing(_plans(thesis_ir, list(pes)), 8)
    assert (t.first_latency, t.ii, t.interval) == (latency, interval, interval)
    assert hwmodel.figures(_plans(thesis_ir, list(pes))).multipliers == multipliers == 9 * p1 + 144 * p2 + 64 * p3
    with_fifos = hwmodel.timing(hwmodel.with_window_fifos(_plans(thesis_ir, list(pes)))).ii
    assert 144 * 16 // p1 < interval and with_fifos == 144 * 16 // p1 <= THESIS_II[pes]


def test_memory_bits_follow_the_haddock_formulas(thesis_ir) -> None:
    fig = hwmodel.figures(_plans(thesis_ir))
    by = {r.name: r for r in fig.layers}
    assert by["conv_1"].line_buffer_bits == 14 * 2 * 1 * 16  # w * (kh-1) * c * bits
    assert by["pool_1"].line_buffer_bits == 12 * 1 * 16 * 16
    assert by["conv_2"].rom_bits == 16 * 1 * (144 * 16 + 16)  # G*b words of p*(ch*w + bias)
    # ROM + line buffers = what yosys infers as memories for this design (measured: 57,696)
    assert fig.rom_bits + fig.line_buffer_bits == 57696


def test_long_transient_is_jumped_exactly(thesis_ir) -> None:
    """conv fast, dense slow (G*b = 320 > the 315 the convolutions need with emit's FIFO of
    two conv_1 windows): the backlog grows for ~115 images before the input slows to 320;
    the drift jump must give the II a brute-force run of 400 images reaches."""
    plans = hwmodel.with_window_fifos(_plans(thesis_ir, [8, 4, 1], [1, 3, 32]))
    ii, period = hwmodel.steady_state(plans)
    brute = hwmodel.timing(plans, 400)
    assert np.diff(brute.accept_cycle)[:3].tolist() != [320, 320, 320]  # a real transient
    assert (ii, period) == (320.0, 1)
    assert np.all(np.diff(brute.accept_cycle)[-100:] == 320)


def test_long_transients_are_jumped_together_exactly(thesis_ir, monkeypatch) -> None:
    """Many configurations whose backlog grows for hundreds of images (a slow dense after fast
    convolutions), timed together: the batch's drift jumps give each one's II and latency as
    the scalar model does, one configuration at a time."""
    base = hwmodel.with_window_fifos(_plans(thesis_ir, [8, 4, 1], [1, 3, 32]))
    configs = [((8, 4, 1), (1, 3, b)) for b in range(29, 37)]
    configs += [((8, p, 1), (1, c, 32)) for p in range(2, 9) for c in (1, 2, 3)]
    drifting = []
    batch = hwmodel._drift_batch
    monkeypatch.setattr(hwmodel, "_drift_batch", lambda *a: drifting.append(a[2]) or batch(*a))
    many = hwmodel.figures_many(base, configs)
    assert sum(drifting) >= 8  # past the first batch's images
    for (pes, cyc), fig in zip(configs, many):
        plans = [
            p.with_knobs(n, b) if p.is_compute else p for p, n, b in zip(base, _spread(base, pes), _spread(base, cyc))
        ]
        t = hwmodel.timing(plans)
        assert (fig.latency, fig.ii) == (t.first_latency, t.ii)
    assert [f.ii for f in many[:8]] == [315, 315, 315, 320, 330, 340, 350, 360]  # b = 32: 320 as above


def _spread(plans, values):
    """`values` per compute layer, None for the others (plan order)."""
    it = iter(values)
    return [next(it) if p.is_compute else None for p in plans]


def test_vectorised_model_equals_the_scalar_one(thesis_ir) -> None:
    from keras2clash.hw import options

    base = _plans(thesis_ir)
    configs = options.all_configs(base)[::7]
    many = hwmodel.figures_many(base, configs)
    for (pes, cyc), fig in zip(configs, many):
        t = hwmodel.timing(_plans(thesis_ir, list(pes), list(cyc)))
        assert (fig.latency, fig.ii) == (t.first_latency, t.ii)


def test_options_for_the_thesis_cnn_well_under_a_second(thesis_ir) -> None:
    from keras2clash.hw import options

    result = options.explore(_plans(thesis_ir), "thesis_cnn")
    assert len(result.options) == 7 * 7 * 6  # distinct G per layer: 16 and 16 filters, 10 neurons
    assert result.seconds < 0.5
    by = {tuple(o.figures.parallelism): o for o in result.options}
    assert by[(1, 1, 1)].pareto_ii and by[(1, 1, 1)].figures.ii == 2319  # no FIFOs: MEASURED
    assert not by[(2, 2, 2)].pareto_ii  # (2,1,1) has the same II 1175 for fewer multipliers
    assert "1:1,1:1,1:1" in result.to_csv()


def test_useful_knob_values() -> None:
    from keras2clash.hw.options import useful_cycles, useful_pes

    assert useful_pes(16) == [1, 2, 3, 4, 6, 8, 16]
    assert useful_pes(10) == [1, 2, 3, 4, 5, 10]
    assert useful_cycles(9) == [1, 2, 3, 5, 9]


def test_dsp_budget_acceptance(thesis_ir, capsys) -> None:
    from keras2clash.hw.allocate import balanced

    base = hwmodel.figures(_plans(thesis_ir))
    alloc = balanced(_plans(thesis_ir), 217)
    f = alloc.figures
    print(f"(1,1,1): II {base.ii:g}, {base.multipliers} multipliers, efficiency {100 * base.efficiency:.1f}%")
    print(alloc.summary())
    assert f.multipliers <= 217
    assert f.ii <= base.ii / 3  # 2304 -> <= 768
    # FIFOs of windows before the engines absorb conv_2's bursts: the layers' own bound
    assert f.ii == alloc.min_target == 288 and f.efficiency >= 0.9
    t = hwmodel.timing(hwmodel.with_window_fifos(_plans(thesis_ir, f.parallelism, f.cycles)))
    assert (t.first_latency, t.ii) == (f.latency, f.ii)


def test_pixel_fifo_replaces_a_wide_window_fifo(thesis_ir) -> None:
    """The thesis CNN at 130 multipliers (16:3, 16:29, 1:32): conv_2's engine takes 29 cycles
    per window, so a row's windows back up. Four windows (2,304 bits each) queued before its
    engine reach II 464; a FIFO of 8 16-channel input pixels before its window generator
    reaches the same II with a fifth of the bits: 2,048, not 9,216 (the wide queue's write
    enable would be the critical path on ECP5)."""
    plans = _plans(thesis_ir, [16, 16, 1], [3, 29, 32], pipeline=2)
    chosen = hwmodel.with_window_fifos(plans)
    conv_2 = next(p for p in chosen if p.name == "conv_2")
    assert (conv_2.params.window_fifo, conv_2.params.input_fifo) == (0, 8)
    convs = [p.is_compute and p.is_windowed for p in plans]
    depths = hwmodel.window_fifos(plans)
    windows = [hwmodel.queued(p, windows=depths.get(p.name, 0)) if conv else p for p, conv in zip(plans, convs)]
    assert depths == {"conv_2": 4}
    assert hwmodel.timing(chosen).ii == hwmodel.timing(windows).ii == 464
    none = [hwmodel.queued(p, windows=0) if conv else p for p, conv in zip(windows, convs)]
    assert hwmodel.timing(none).ii > 464  # it needs one
    assert 8 * 16 * 16 < 4 * 144 * 16
    assert hwmodel.figures(chosen).fifo_bits == hwmodel.figures(windows).fifo_bits - 4 * 144 * 16 + 8 * 16 * 16


def test_budget_too_small(thesis_ir) -> None:
    from keras2clash.errors import K2CError
    from keras2clash.hw.allocate import balanced

    with pytest.raises(K2CError, match="at least 3"):
        balanced(_plans(thesis_ir), 2)


def _example_plans(name: str):
    from keras2clash.frontend.convert import load_keras_model, to_ir

    return make_plan(to_ir(load_keras_model(EXAMPLES / name / f"{name}.keras")), parse_format("1,7,8"))


def test_dsp_budget_on_a_network_with_branches() -> None:
    """resnet_digits within the LFE5U-85F's 156 multipliers: its dense layer after the joins is
    the bottleneck of some candidates, which the model with unbounded branch FIFOs never let
    hold the layers before the fork back ('no periodic steady state within 100000 images').
    The figures are those of the design as emitted (window and branch FIFOs sized)."""
    from keras2clash.hw.allocate import balanced
    from keras2clash.hw.planner import with_knobs

    plans = _example_plans("resnet_digits")
    alloc = balanced(plans, 156)
    f = alloc.figures
    assert f.multipliers <= 156
    assert f.ii == alloc.min_target == 1536  # the layers' own bound, reached
    emitted = hwmodel.with_fifos(with_knobs(plans, f.parallelism, f.cycles))
    t = hwmodel.timing(emitted)
    assert (t.first_latency, t.ii) == (f.latency, f.ii)


def test_dsp_budget_counts_every_multiplier() -> None:
    """mlp_tanh's BatchNormalization blocks after an activation multiply too (32 + 24), and so
    does dense_2's LeakyReLU(0.1) (24): the engines share what they leave of the budget, so
    the whole design, these products included, stays within it."""
    from keras2clash.errors import K2CError
    from keras2clash.hw.allocate import balanced
    from keras2clash.hw.planner import with_knobs

    plans = _example_plans("mlp_tanh")
    fixed = sum(p.multipliers for p in plans if not p.is_compute)
    assert fixed == 32 + 24
    alloc = balanced(plans, 156)
    assert alloc.figures.multipliers <= 156 and alloc.budget == 156
    assert (
        sum(
            p * -(-plan.window // b)
            for p, b, plan in zip(alloc.parallelism, alloc.cycles, [p for p in plans if p.is_compute])
        )
        <= 156 - fixed - 24
    )
    with pytest.raises(
        K2CError,
        match=r"at least 83 \(one multiplier per dense/conv2d layer and 80 in "
        r"bn_1, dense_2 beside its engine, bn_2\)",
    ):
        balanced(plans, 82)
    # dense_2's LeakyReLU(0.1): a constant product per neuron, a DSP block each on ECP5
    assert [p.activation_multipliers for p in plans if p.is_compute] == [0, 24, 0]
    assert alloc.figures.multipliers == sum(p.multipliers for p in with_knobs(plans, alloc.parallelism, alloc.cycles))


def test_report_config_parsing() -> None:
    from keras2clash.errors import K2CError
    from keras2clash.report.hwreport import parse_config

    assert parse_config("8:1,8:9, 5", 3) == ([8, 8, 5], [1, 9, 1])
    with pytest.raises(K2CError, match="3 dense/conv2d"):
        parse_config("8:1,8:1", 3)


# --- against the Clash simulation --------------------------------------------------------

SIM_CONFIGS = [
    ("thesis_cnn", [1, 1, 1], [1, 1, 1], 4),
    ("thesis_cnn", [16, 1, 10], [1, 1, 1], 6),  # conv_2 slow: backpressure, first interval shorter
    ("thesis_cnn", [4, 3, 2], [3, 16, 7], 5),
    ("thesis_cnn", [16, 16, 10], [9, 1, 1], 5),  # G = 1 engines (R register paths)
    ("thesis_cnn", [16, 2, 10], [1, 7, 1], 5),
    ("thesis_cnn", [16, 16, 1], [3, 29, 32], 4),  # conv_2 after a FIFO of 8 input pixels
    ("cnn_variants", [1, 1, 1, 1], [1, 1, 1, 1], 4),
    ("cnn_variants", [3, 5, 7, 4], [2, 3, 16, 5], 5),
    ("cnn_variants", [8, 16, 32, 10], [9, 1, 4, 2], 5),
    ("digits_dense", [39, 24, 10], [1, 24, 1], 8),  # a fast layer stalled by a slow one
    ("digits_dense", [5, 3, 2], [4, 2, 3], 8),
    ("iris", [8, 3], [4, 8], 8),
    ("mlp_tanh", [4, 1, 5], [5, 1, 8], 6),  # LeakyReLU(0.1) in two register stages (mapP2)
]


def _simulate(example: str, out: Path, n: int, pes=None, cycles=None, dsp_budget=None):
    import keras2clash as k2c
    from keras2clash.backend.project import load_project
    from keras2clash.data import load_dataset
    from keras2clash.quant import golden
    from keras2clash.verify import toolchain
    from keras2clash.verify.simulate import run_simulator

    model = EXAMPLES / example / f"{example}.keras"
    root = k2c.emit(model, "1,7,8", out, pes, cycles=cycles, dsp_budget=dsp_budget)
    project = load_project(root)
    data = load_dataset(EXAMPLES / example / "test.npz", project.input_shape, project.n_out).head(n)
    x_raw = golden.quantize_inputs(project.plans, data.x)
    sim = run_simulator(toolchain.build_simulator(project.root), project.root, x_raw, project.n_out)
    gold = golden.run(project.plans, project.params, x_raw)
    return project, sim, int(np.sum(np.all(sim.outputs == gold, axis=1)))


@needs_toolchain
@pytest.mark.toolchain
@pytest.mark.parametrize(
    ("example", "pes", "cycles", "n"),
    SIM_CONFIGS,
    ids=[f"{e}-{'.'.join(map(str, p))}-{'.'.join(map(str, c))}" for e, p, c, _ in SIM_CONFIGS],
)
def test_model_equals_clash_simulation(tmp_path: Path, example, pes, cycles, n) -> None:
    project, sim, exact = _simulate(example, tmp_path / "net", n, pes, cycles)
    assert exact == n
    t = hwmodel.timing(project.plans, n)
    assert t.accept_cycle.tolist() == sim.accept_cycle.tolist()
    assert t.output_cycle.tolist() == sim.output_cycle.tolist()
    assert (t.first_latency, t.interval) == (sim.first_latency, sim.interval)
    assert np.diff(sim.output_cycle)[-1] == t.ii  # the run has reached the steady state


@needs_toolchain
@pytest.mark.toolchain
def test_dsp_budget_choice_confirmed_in_clash(tmp_path: Path) -> None:
    project, sim, exact = _simulate("thesis_cnn", tmp_path / "net", 6, dsp_budget=217)
    assert exact == 6
    fig = hwmodel.figures(project.plans)
    assert fig.multipliers <= 217 and fig.ii <= 768 and fig.efficiency >= 0.5
    assert sim.first_latency == fig.latency
    assert np.all(np.diff(sim.output_cycle) == fig.ii)


@needs_toolchain
@pytest.mark.toolchain
def test_report_on_iris_with_yosys(tmp_path: Path, capsys) -> None:
    import json

    import keras2clash as k2c
    from keras2clash import cli

    # softmax="argmax": the figures checked are the engines' (a real softmax adds dividers);
    # pipeline=0: with registered products yosys' synth_ice40 -dsp leaves b = 1 multipliers in
    # LUTs (SB_MAC16 inference; nextpnr-ecp5's MULT18X18D count equals the model's either way)
    project = k2c.emit(
        EXAMPLES / "iris" / "iris.keras", "1,7,8", tmp_path / "iris", [3, 2], softmax="argmax", pipeline=0
    )
    old = sys.argv
    sys.argv = [
        "keras2clash",
        "report",
        str(project),
        "--config",
        "3:1,2:1",
        "--config",
        "1:4,1:8",
        "--out-dir",
        str(tmp_path / "rep"),
    ]
    try:
        cli.main()
    except SystemExit as exc:
        assert not exc.code
    finally:
        sys.argv = old
    rows = json.loads((tmp_path / "rep" / "report.json").read_text())["rows"]
    assert [r["label"] for r in rows] == ["3:1,2:1", "1:4,1:8"]
    for row in rows:
        y = row["yosys"]
        assert y["mul_cells"] == row["multipliers"] == y["dsp_blocks"]
        assert y["memory_bits"] == row["rom_bits"] + row["line_buffer_bits"] + row["fifo_bits"]
        assert y["flip_flops"] > 0 and y["luts"] > 0
    assert rows[1]["multipliers"] == 2  # one multiplier per layer, cycles = window
    assert (tmp_path / "rep" / "report.png").stat().st_size > 10_000
    assert "| 3:1,2:1 |" in (tmp_path / "rep" / "report.md").read_text()


def test_conv_engines_load_from_the_window_register(thesis_ir) -> None:
    """A convolution's engine without a FIFO of windows loads each window from the window
    generator's shift register the cycle after it accepted it (K2C.Conv.direct, one LUT per
    window bit): one cycle more in D and in the latency, the same II. Behind a FIFO of windows
    (K2C.Conv.queued) it loads the FIFO's output as it accepts; dense engines likewise."""
    plans = _plans(thesis_ir, [16, 16, 1], [3, 29, 32], pipeline=2)
    by_name = {p.name: p for p in plans}
    conv_1, conv_2, dense = by_name["conv_1"], by_name["conv_2"], by_name["dense"]
    assert (conv_1.loads_late, conv_2.loads_late, dense.loads_late) == (1, 1, 0)
    queued = hwmodel.queued(conv_2, windows=4)
    assert queued.loads_late == 0 and queued.pipe_depth == conv_2.pipe_depth - 1
    assert conv_2.kind.queues(conv_2)[1] == "{- window queue -} direct"
    assert queued.kind.queues(queued)[1] == "{- window queue -} (queued (SNat @4))"
    assert all(p.loads_late == 0 for p in plans if not p.is_compute)
    # Every conv's load cycle is one cycle of latency; with the FIFOs the planner sizes, none
    # of throughput (without them a result, and the credit it frees, a cycle later can cost a
    # cycle of II where downstream stalls the engine: 563 -> 564 here).
    import keras2clash.hw.plan as plan_module

    t = hwmodel.timing(hwmodel.with_fifos(plans))
    original = plan_module.LayerPlan.loads_late
    try:
        plan_module.LayerPlan.loads_late = property(lambda self: 0)  # type: ignore[method-assign]
        t0 = hwmodel.timing(hwmodel.with_fifos(plans))
    finally:
        plan_module.LayerPlan.loads_late = original  # type: ignore[method-assign]
    assert (t.first_latency, t.ii) == (t0.first_latency + 2, t0.ii) == (t0.first_latency + 2, 464)
