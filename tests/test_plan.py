"""The hardware plan: accumulator widths, parallelism validation (any value, not only divisors)."""

from __future__ import annotations

import numpy as np
import pytest

from keras2clash.errors import K2CError
from keras2clash.hw.plan import accumulator_format
from keras2clash.hw.planner import make_plan, parse_parallelism
from keras2clash.kinds.engine import padding_neurons
from keras2clash.quant.formats import FixedFormat, parse_format


def _dense(name: str, n_in: int, n_out: int, act: str = "relu") -> dict:
    return {
        "type": "dense",
        "name": name,
        "input_shape": (n_in,),
        "output_shape": (n_out,),
        "activation": act,
        "use_bias": True,
        "fused": [],
        "weights": {"kernel": np.zeros((n_in, n_out)), "bias": np.zeros(n_out)},
    }


IR = [_dense("dense", 64, 39), _dense("dense_1", 39, 24), _dense("dense_2", 24, 10, "sigmoid")]


def test_accumulator_is_exact_width() -> None:
    fmt = parse_format("1,7,8")
    acc = accumulator_format(fmt, fmt, 64)
    # Clash SFixed ci cf with ci = 8 + 8 + ceil(log2 65) + 1 = 24, cf = 16.
    assert acc.clash_type == "SFixed 24 16"
    assert acc.bits == 40


def test_non_divisor_parallelism_pads_the_last_word() -> None:
    plans = make_plan(IR, parse_format("1,7,8"), [2, 5, 3])
    assert [(p.engine_knobs.pe, p.groups, padding_neurons(p)) for p in plans] == [(2, 20, 1), (5, 5, 1), (3, 4, 2)]
    assert [p.multipliers for p in plans] == [128, 195, 72]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("1,2", "2 value"),
        ("1,x,2", "comma-separated integers"),
        ("0,1,1", "between 1 and 39"),
        ("40,1,1", "between 1 and 39"),
        ("1,1,11", "between 1 and 10"),
        ("-1,1,1", "between 1 and 39"),
    ],
)
def test_parallelism_errors_name_the_problem(text: str, fragment: str) -> None:
    with pytest.raises(K2CError, match=fragment):
        make_plan(IR, parse_format("1,7,8"), parse_parallelism(text, 3))


def test_per_layer_formats_chain_input_formats() -> None:
    narrow = FixedFormat(1, 3, 4)
    plans = make_plan(IR, parse_format("1,7,8"), None, {"dense_1": narrow})
    assert plans[1].w_fmt == narrow and plans[1].in_fmt == parse_format("1,7,8")
    assert plans[2].in_fmt == narrow and plans[2].out_fmt == parse_format("1,7,8")
    with pytest.raises(K2CError, match="unknown layer"):
        make_plan(IR, parse_format("1,7,8"), None, {"nope": narrow})


def test_pipeline_auto_picks_the_levels_for_the_clock() -> None:
    """`--pipeline auto[@MHZ]`: the most adder levels a stage whose measured delay fits the
    period (hw/clock.py); the default depth is what auto gives at 100 MHz."""
    from keras2clash.design import pipeline_levels
    from keras2clash.hw.clock import ECP5_STAGE, auto_levels
    from keras2clash.hw.plan import DEFAULT_PIPELINE

    assert auto_levels(100.0) == DEFAULT_PIPELINE == pipeline_levels("auto") == 2
    assert [pipeline_levels(v) for v in ("auto@150", "AUTO@200MHz", "auto @ 66", "auto@40")] == [1, 1, 4, 7]
    for mhz in (40.0, 66.0, 100.0, 150.0):  # the chosen stage fits the period, one more level would not
        levels = auto_levels(mhz)
        assert ECP5_STAGE.register_ns + levels * ECP5_STAGE.level_ns <= 1000.0 / mhz
        assert ECP5_STAGE.register_ns + (levels + 1) * ECP5_STAGE.level_ns > 1000.0 / mhz
    with pytest.raises(K2CError, match="target clock must be 1 to 1000 MHz"):
        pipeline_levels("auto@0")
    with pytest.raises(K2CError, match="or auto / auto@MHZ"):
        pipeline_levels("fast")


def test_engine_depth_counts_the_result_register_with_two_groups_or_more() -> None:
    """D (K2C.Engine's PipeDepth): pipelined, an engine with two groups or more writes its
    output queue from the result register R, one cycle after the last group completed it;
    with one group (every neuron its own PE) the finished values enter the queue directly,
    and unpipelined there are no stages at all."""
    plans = make_plan(IR, parse_format("1,7,8"), [39, 12, 10], pipeline=2)
    assert [p.groups for p in plans] == [1, 2, 1]
    depths = [p.pipe_depth for p in plans]
    # 7 + the adder tree's stages (ceil(log2(ch + 1)) levels, 2 a stage) + [G >= 2]
    assert depths == [7 + 7 // 2, 7 + 6 // 2 + 1, 7 + 5 // 2]
    assert [p.queue_depth for p in plans] == [2 + (d + 1) // p.rom_depth for p, d in zip(plans, depths)]
    assert all(p.pipe_depth == 0 for p in make_plan(IR, parse_format("1,7,8"), [1, 2, 5], pipeline=0))


def _activation_model():
    """A Rescaling at the input and a LeakyReLU after a Flatten (standalone, nothing to fuse into)."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(3)
    inp = keras.Input((2, 2, 3))
    x = layers.LeakyReLU(0.2, name="leaky")(layers.Flatten(name="flat")(layers.Rescaling(0.25, name="scale")(inp)))
    return keras.Model(inp, layers.Dense(3, name="head")(x))


def test_plans_round_trip_through_the_manifest_json() -> None:
    """Every kind's plan, with its knobs, its own parameters (`Kind.params_type`) and the FIFOs
    and lanes the hardware model sets, reads back from its JSON as the same plan."""
    import json
    from pathlib import Path

    from test_layers_shapes import _branch_model

    from keras2clash.hw.plan import LayerPlan
    from keras2clash.network import load_network

    examples = Path(__file__).resolve().parent.parent / "examples"
    networks = [
        load_network(examples / name / f"{name}.keras", "1,7,8", **options)
        for name, options in (
            ("resnet_digits", {}),
            ("inception_digits", {}),
            ("mobilenet_digits", {}),
            ("conv1d_waves", {}),
            ("mlp_tanh", {"dsp_budget": "ecp5-85k"}),  # serial BatchNormalizations
        )
    ]
    networks += [load_network(model, "1,7,8") for model in (_branch_model(), _activation_model())]
    plans = [plan for network in networks for plan in network.plans]
    for plan in plans:
        data = json.loads(json.dumps(plan.to_json()))
        assert ("knobs" in data) == plan.is_compute
        assert LayerPlan.from_json(data) == plan
    assert {plan.type for plan in plans} >= {
        "conv2d", "depthwise2d", "dense", "maxpool2d", "avgpool2d", "globalmaxpool", "globalavgpool", "add",
        "concatenate", "batchnorm", "rescaling", "activation", "flatten", "zeropad2d", "crop2d", "upsample2d",
        "reshape",
    }  # fmt: skip
    # the hardware model's choices are among them: lanes, branch FIFOs, FIFOs of windows
    assert any(plan.lane_chunks > 1 for plan in plans)
    assert any(plan.kind.branch_fifos(plan) for plan in plans if plan.is_merge)
    assert any(plan.params.window_fifo for plan in plans if plan.is_compute and plan.is_windowed)
