"""The latency strategy (`--strategy latency`): a Dense or convolution layer's weights as
constants of an adder graph (kinds.cmvm, K2C.Cmvm) finished in its last stage, one vector or
window a cycle. Planned with no multiplier and no weight memory; refused in one line where it
is not built; its solved graphs cached; kept as it is by `options` and `--dsp-budget`; and
in Clash, random small networks equal the golden model bit for bit with the hardware model's
accept and output cycles, alone and beside resource-strategy layers, convolutions of every
padding and stride, and once in Verilator."""

from __future__ import annotations

import json

import numpy as np
import pytest

import keras2clash as k2c
from helpers import assert_clash_matches_golden, needs_toolchain, random_dense_model
from keras2clash.backend.project import load_project
from keras2clash.design import DesignOptions
from keras2clash.errors import K2CError
from keras2clash.hw import allocate, blocks, hwmodel, options, resources
from keras2clash.hw.plan import Knobs, LayerFormats, LayerPlan
from keras2clash.hw.planner import make_plan
from keras2clash.hw.summary import design_summary
from keras2clash.kinds import cmvm, engine
from keras2clash.network import load_network
from keras2clash.quant.formats import parse_format


def _network(layers, strategy, fmt="1,2,3", seed=3, **knobs):
    return load_network(random_dense_model(layers, n_in=6, seed=seed, scale=1.5), fmt, strategy=strategy, **knobs)


def test_a_latency_layer_has_no_multiplier_and_no_weight_memory():
    plans = _network([(5, "relu"), (3, "linear")], "latency").plans
    dense = [p for p in plans if p.is_compute]
    assert [p.multipliers for p in dense] == [0, 0] and [p.rom_bits for p in dense] == [0, 0]
    assert [(p.engine_knobs.pe, p.engine_knobs.cycles) for p in dense] == [(5, 1), (3, 1)]
    assert all(engine.graph_stages(p) == -(-(p.params.adder_depth + 1) // 2) for p in dense)  # type: ignore[attr-defined]
    t = hwmodel.timing(plans, 20)
    assert t.ii == 1
    # a plan reads back from the manifest as it was, strategy and graph figures included
    for plan in dense:
        assert LayerPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
    assert Knobs.from_json(Knobs(2, 3, 1, "latency").to_json()) == Knobs(2, 3, 1, "latency")


def test_the_resource_strategy_plans_as_without_the_knob():
    resource = _network([(5, "relu"), (3, "linear")], None).plans
    assert resource == _network([(5, "relu"), (3, "linear")], "resource").plans
    data = resource[0].to_json()
    assert "strategy" not in data["knobs"] and set(data["params"]) == {"exact_accumulator"}  # type: ignore[arg-type]


def test_the_strategy_per_layer():
    plans = _network([(5, "relu"), (4, "relu"), (3, "linear")], "latency,resource,latency").plans
    assert [p.multipliers for p in plans if p.is_compute] == [0, 5, 0]
    assert [p.engine_knobs.strategy for p in plans if p.is_compute] == ["latency", "resource", "latency"]
    # emit's summary states each graph's adders and carry cells, the manifest keeps them
    notes = [layer.get("cost_note", "") for layer in design_summary(plans)["layers"]]  # type: ignore[union-attr]
    assert notes[0].startswith("latency strategy: ") and "CCU2C" in notes[0] and notes[1] == ""


def test_consecutive_latency_layers_are_one_pipeline_with_one_queue(tmp_path):
    """A run of latency Dense layers is one K2C.Pipe.pipeline: one input register, one output
    queue of d + 2 results (d: the register, the layers' 3 + 2 + 3 registers), two cycles
    fewer for each layer after the first; a resource layer between them breaks the run."""
    model = random_dense_model([(5, "relu"), (4, "relu"), (3, "linear")], n_in=6, seed=3, scale=1.5)
    plans = load_network(model, "1,2,3", strategy="latency").plans
    assert blocks.pipeline_runs(plans) == [("dense_0", "dense_1", "dense_2")]
    assert [engine.cmvm_stages(p) for p in plans] == [3, 2, 3]
    # the run's input register takes the place of Top's input FIFO; the class keeps its output FIFO
    assert blocks.top_slices(plans) == (False, True)
    figures = hwmodel.figures(plans)
    assert (figures.latency, figures.ii) == (16, 1.0)
    alone = [resources.layer_resources(p) for p in plans]
    run = figures.layers
    in_regs = [p.input_shape[-1] * p.in_fmt.hw_bits + 1 for p in plans]  # the input registers
    assert [r.register_bits for r in run] == [alone[0].register_bits] + [
        a.register_bits - bits for a, bits in zip(alone[1:], in_regs[1:])
    ]
    assert [r.fifo_bits for r in run] == [0, 0, (1 + 8 + 2) * 3 * plans[2].out_fmt.hw_bits]
    root = k2c.emit(model, "1,2,3", tmp_path / "net", strategy="latency", show=False)
    network = (root / "Network.hs").read_text()
    assert "network =\n  pipeline (dense_0 >-> dense_1 >-> dense_2)\n" in network
    assert "=> Pipeline dom (Cmvm.CmvmStages Cmvm.Dense_1.Depth 0) (Vec 5 " in network

    split = _network([(5, "relu"), (4, "relu"), (3, "linear")], "latency,resource,latency").plans
    assert blocks.pipeline_runs(split) == []
    assert hwmodel.figures(split).latency == 30


def test_options_and_the_budget_leave_a_latency_layer_as_it_is():
    """`options` varies the resource layers only; `--dsp-budget` gives them the whole budget."""
    plans = _network([(5, "relu"), (4, "relu"), (3, "linear")], "latency,resource,latency").plans
    dense = [p for p in plans if p.is_compute]
    assert [options.layer_choices(p, cycles_too=True) for p in dense[::2]] == [[(5, 1)], [(3, 1)]]
    assert options.count_configs(plans, cycles_too=True) == len(options.layer_choices(dense[1], cycles_too=True))
    alloc = allocate.balanced(plans, 3)
    assert alloc.parallelism[::2] == [5, 3] and alloc.cycles[::2] == [1, 1]
    assert alloc.figures.multipliers <= 3 and alloc.parallelism[1] * -(-5 // alloc.cycles[1]) == 3


def test_bad_strategies_are_refused_in_one_line():
    with pytest.raises(K2CError, match="bad strategy .fast.: expected resource, latency or auto"):
        DesignOptions.of(strategy="fast")
    with pytest.raises(K2CError, match="2 value.s. given, the model has 3"):
        _network([(5, "relu"), (4, "relu"), (3, "linear")], "latency,resource")
    graph = _network([(5, "relu"), (3, "linear")], None).graph
    narrow = {"dense_0": LayerFormats(accumulator_bits=12)}
    with pytest.raises(K2CError, match="layer 'dense_0': the latency strategy computes the exact accumulator"):
        make_plan(graph, parse_format("1,2,3"), layer_formats=narrow, strategy="latency")
    with pytest.raises(K2CError, match="unknown strategy 'fast'"):
        make_plan(graph, parse_format("1,2,3"), strategy="fast")


def test_what_the_latency_strategy_does_not_build_is_refused_in_one_line():
    import keras

    dilated = keras.Sequential([keras.Input((8, 8, 2)), keras.layers.Conv2D(3, 3, dilation_rate=2, name="conv")])
    with pytest.raises(K2CError, match=r"layer 'conv' \(conv2d\): the latency strategy builds undilated convolutions"):
        load_network(dilated, "1,3,4", strategy="latency")


def test_solved_graphs_are_cached_on_disk(tmp_path, monkeypatch, capsys):
    """A solution is written once under cmvm/<key>.json and read back equal."""
    rng = np.random.default_rng(5)
    kernel = rng.integers(-8, 8, size=(7, 4))
    low, high = [-16] * 7, [15] * 7
    monkeypatch.setattr(cmvm, "_solved", {})
    first = cmvm.solve_cached(kernel, low, high, 2, "layer 'x'", tmp_path)
    assert "solving the adder graph of layer 'x' (7 x 4)" in capsys.readouterr().err
    (entry,) = (tmp_path / "cmvm").glob("*.json")
    assert entry.stem == cmvm.solution_key(kernel, low, high, 2)
    monkeypatch.setattr(cmvm, "_solved", {})
    again = cmvm.solve_cached(kernel, low, high, 2, "layer 'x'", tmp_path)
    assert capsys.readouterr().err == ""  # read, not solved
    assert again == first
    assert cmvm.graph_from_json(cmvm.graph_to_json(first)) == first


LATENCY_NETS = [
    # layers, format, pipeline, strategy
    ([(5, "relu"), (3, "linear")], "1,3,4", 1, "latency"),
    ([(7, "relu"), (4, "sigmoid"), (3, "softmax")], "1,2,5", 2, "latency"),
    ([(4, "linear")], "1,4,3", 0, "latency"),
    ([(6, "relu"), (5, "relu"), (3, "linear")], "1,2,3", 3, "latency,resource,latency"),
    # the rounding's offset in the bias (nearest), and the modes it leaves to the finish
    ([(5, "relu"), (3, "linear")], "1,2,3,rnd,wrap", 1, "latency"),
    ([(5, "relu"), (3, "relu")], "0,3,2,rnd,sat", 2, "latency"),
    ([(5, "relu"), (3, "linear")], "1,2,3,rnd_conv,sat", 2, "latency"),
    ([(5, "linear"), (3, "linear")], "1,2,3,trn,wrap", 1, "latency"),
]


@needs_toolchain
@pytest.mark.toolchain
@pytest.mark.parametrize(("layers", "fmt", "pipeline", "strategy"), LATENCY_NETS)
def test_latency_networks_bit_exact_in_clash_with_the_models_cycles(tmp_path, layers, fmt, pipeline, strategy):
    """Golden == Clash simulation, back to back and under input gaps and output stalls, every
    accept and output cycle as the hardware model has them (a few seconds each)."""
    seed = len(layers) + pipeline
    model = random_dense_model(layers, n_in=6, seed=seed, scale=1.5)
    root = k2c.emit(model, fmt, tmp_path / "net", pipeline=pipeline, strategy=strategy, show=False)
    project = load_project(root)
    first = project.plans[0].in_fmt
    x = np.random.default_rng(seed).integers(first.raw_min, first.raw_max + 1, (40, 6))
    x[0], x[1] = first.raw_min, first.raw_max
    assert_clash_matches_golden(project, x, seed)
    assert (root / "Cmvm" / "Dense_0.hs").is_file()


@needs_toolchain
@pytest.mark.toolchain
def test_runs_of_latency_layers_inside_branches_bit_exact_in_clash_with_the_models_cycles(tmp_path):
    """Runs of latency layers in a branch and after a merge (one pipeline each), a layer alone
    before the fork: golden == Clash simulation with the model's every cycle."""
    import keras
    from keras import layers

    inp = keras.Input((6,))
    head = layers.Dense(5, activation="relu", name="head")(inp)
    deep = layers.Dense(4, activation="relu", name="deep_a")(head)
    deep = layers.Dense(4, activation="relu", name="deep_b")(deep)
    side = layers.Dense(4, activation="relu", name="side")(head)
    joined = layers.Add(name="add")([deep, side])
    out = layers.Dense(4, activation="relu", name="tail_a")(joined)
    out = layers.Dense(3, name="tail_b")(out)
    model = keras.Model(inp, out)
    rng = np.random.default_rng(11)
    model.set_weights([rng.normal(0, 1.0, w.shape).astype("float32") for w in model.get_weights()])
    root = k2c.emit(model, "1,3,3", tmp_path / "net", strategy="latency", show=False)
    project = load_project(root)
    assert blocks.pipeline_runs(project.plans) == [("deep_a", "deep_b"), ("tail_a", "tail_b")]
    network = (root / "Network.hs").read_text()
    assert "pipeline (deep_a >-> deep_b)" in network and "pipeline (tail_a >-> tail_b)" in network
    first = project.plans[0].in_fmt
    x = np.random.default_rng(4).integers(first.raw_min, first.raw_max + 1, (30, 6))
    assert_clash_matches_golden(project, x, 4)


def conv_net(kind: str):
    """A small convolutional network of random weights: Conv2D (same, stride 2 or 1), Conv1D
    (causal), a Dense applied per position (a 1x1 convolution) or a SeparableConv2D (a
    depthwise convolution of depth multiplier 2, then a pointwise one), then a Dense."""
    import keras
    from keras import layers

    if kind == "conv1d":
        shape, first = (9, 2), layers.Conv1D(3, 3, padding="causal", activation="relu", name="conv")
    elif kind == "separable":
        shape = (5, 6, 2)
        first = layers.SeparableConv2D(3, 3, depth_multiplier=2, padding="same", activation="relu", name="conv")
    elif kind == "pointwise":
        shape, first = (3, 4, 2), layers.Dense(3, activation="relu", name="conv")
    else:
        stride = 2 if kind == "conv2d_stride" else 1
        shape, first = (5, 6, 2), layers.Conv2D(3, 3, strides=stride, padding="same", activation="relu", name="conv")
    model = keras.Sequential([keras.Input(shape), first, layers.Flatten(), layers.Dense(4, name="dense")])
    rng = np.random.default_rng(len(kind))
    model.set_weights([rng.normal(0, 1.0, w.shape).astype("float32") for w in model.get_weights()])
    return model


@needs_toolchain
@pytest.mark.toolchain
@pytest.mark.parametrize("kind", ["conv2d", "conv2d_stride", "conv1d", "pointwise", "separable"])
def test_latency_convolutions_bit_exact_in_clash_with_the_models_cycles(tmp_path, kind):
    """The window generator's windows into the adder graph, one a cycle: golden == Clash
    simulation (back to back, under gaps and stalls) with the model's every cycle."""
    model = conv_net(kind)
    root = k2c.emit(model, "1,2,3", tmp_path / "net", strategy="latency", show=False)
    project = load_project(root)
    assert all(p.multipliers == 0 for p in project.plans if p.is_compute)
    first = project.plans[0].in_fmt
    shape = (6, *model.inputs[0].shape[1:])
    x = np.random.default_rng(2).integers(first.raw_min, first.raw_max + 1, shape)
    assert_clash_matches_golden(project, x, 5)


@needs_toolchain
@pytest.mark.toolchain
def test_a_latency_network_in_verilator(tmp_path):
    """The generated Verilog of two latency layers, bit-exact under input gaps and output stalls."""
    from keras2clash import api

    model = random_dense_model([(6, "relu"), (3, "linear")], n_in=5, seed=8, scale=1.5)
    k2c.emit(model, "1,3,4", tmp_path / "net", strategy="latency", show=False)
    x = np.random.default_rng(8).normal(0, 3, size=(30, 5)).astype(np.float32)
    np.savez(tmp_path / "data.npz", x=x, y=np.zeros(30, dtype=np.int64))
    k2c.hdl(tmp_path / "net", ("verilog",))
    rtl = api.rtlsim(tmp_path / "net", tmp_path / "data.npz", "verilator", gap_max=3, seed=4, show=False)
    assert rtl.ok and len(rtl.samples) == rtl.passed == 30


@needs_toolchain
@pytest.mark.slow
def test_thesis_cnn_at_the_latency_strategy_in_clash_and_verilator(tmp_path):
    """The thesis CNN at 1,3,4, every layer an adder graph (2,384 adders, no multiplier):
    golden == Clash simulation == Verilator on the whole test set, one image every 196 cycles
    (its input's pixels), 234 cycles of latency, the hardware model's (about seven minutes)."""
    from pathlib import Path

    from keras2clash import api

    example = Path(__file__).resolve().parent.parent / "examples" / "thesis_cnn"
    project = k2c.emit(example / "thesis_cnn.keras", "1,3,4", tmp_path / "cnn", strategy="latency", show=False)
    comp = k2c.simulate(project, example / "test.npz", keras=False, show=False)
    assert comp.samples == comp.bit_exact == 360
    assert comp.multipliers == 0 and comp.interval == 196.0
    assert comp.first_latency == hwmodel.timing(load_project(project).plans).first_latency == 234
    k2c.hdl(project, ("verilog",))
    rtl = api.rtlsim(project, example / "test.npz", "verilator", show=False)
    assert rtl.ok and rtl.passed == len(rtl.samples) == 360
