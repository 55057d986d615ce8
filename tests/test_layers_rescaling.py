"""Keras Rescaling (`kinds.rescaling`): `x * scale + offset` with a scalar or a per-channel
scale and offset, on the batch normalization's arithmetic and block."""

from __future__ import annotations

from fractions import Fraction

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from keras import layers

from helpers import assert_clash_matches_golden, needs_toolchain
from keras2clash.errors import K2CError
from keras2clash.frontend.convert import raw_graph, to_graph
from keras2clash.hw.planner import make_plan
from keras2clash.hw.resources import layer_resources
from keras2clash.ir.passes import PASSES, fold_affine_forward, run_passes
from keras2clash.kinds.rescaling import Rescaling
from keras2clash.quant import golden
from keras2clash.quant.formats import parse_format

WIDE = parse_format("1,9,14")


def _unfolded(model: keras.Model):
    """The graph with the Rescaling its own stage: every pass but the one that folds it into
    the Dense after it."""
    return run_passes(raw_graph(model), tuple(p for p in PASSES if p is not fold_affine_forward))


def _model(shape: tuple[int, ...], scale, offset) -> keras.Model:
    """Input -> Rescaling -> (Flatten) -> Dense, the Dense weights random but fixed."""
    inp = keras.Input(shape)
    x = layers.Rescaling(scale, offset=offset, name="rescale")(inp)
    if len(shape) > 1:
        x = layers.Flatten(name="flat")(x)
    model = keras.Model(inp, layers.Dense(2, name="head")(x))
    head = model.get_layer("head")
    rng = np.random.default_rng(len(shape))
    head.set_weights([rng.normal(0, 0.5, w.shape).astype("float32") for w in head.get_weights()])
    return model


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(shape=st.sampled_from([(6,), (3, 4), (2, 3, 4)]), per_channel=st.booleans(), seed=st.integers(0, 999))
def test_golden_equals_keras(shape, per_channel, seed) -> None:
    """At a wide format the golden model's Rescaling output is Keras' within the rounding of
    its scale and offset and one output step."""
    rng = np.random.default_rng(seed)
    c = shape[-1]
    scale = rng.uniform(-2, 2, c).round(3).tolist() if per_channel else round(float(rng.uniform(-2, 2)), 3)
    offset = rng.uniform(-1, 1, c).round(3).tolist() if per_channel else round(float(rng.uniform(-1, 1)), 3)
    model = _model(shape, scale, offset)
    plans = make_plan(_unfolded(model), WIDE)
    assert plans[0].type == "rescaling" and plans[0].output_shape[-1] == c
    params = golden.quantize_params(plans)
    x = rng.uniform(-3, 3, (8, *shape))
    x_raw = golden.quantize_inputs(plans, x)
    got = golden.run_all(plans, params, x_raw)["rescale"] / 2.0**WIDE.frac
    x_real = x_raw / 2.0**WIDE.frac
    want = x_real * np.asarray(scale) + np.asarray(offset)
    w_step, b_step = 2.0 ** -plans[0].w_fmt.frac, 2.0 ** -plans[0].b_fmt.frac
    bound = np.abs(x_real) * w_step / 2 + b_step / 2 + 2.0**-WIDE.frac
    assert np.all(np.abs(got.reshape(want.shape) - want) <= bound)


def test_arithmetic_equals_exact_rationals() -> None:
    """The output is floor((x * s + o) * 2^fo + 1/2), saturated, with s and o the quantized
    constants: the contract's one requantization of an exact value."""
    a, o_fmt = parse_format("1,3,4"), parse_format("1,3,3")
    model = _model((3,), [0.3, -1.7, 0.05], [0.1, 0.4, -0.6])
    plans = make_plan(_unfolded(model), o_fmt, input_fmt=a)
    params = golden.quantize_params(plans)["rescale"]
    plan = plans[0]
    x = np.arange(a.raw_min, a.raw_max + 1).repeat(3).reshape(-1, 3)
    got = golden.layer(plan, {"rescale": params}, [x])
    for row, out in zip(x, got):
        for k in range(3):
            exact = Fraction(int(row[k]), 2**a.frac) * Fraction(int(params.kernel[k]), 2**plan.w_fmt.frac) + Fraction(
                int(params.bias[k]), 2**plan.b_fmt.frac
            )
            raw = (exact * 2**o_fmt.frac + Fraction(1, 2)).__floor__()
            assert out[k] == min(max(raw, o_fmt.raw_min), o_fmt.raw_max)


def test_record_and_resources() -> None:
    graph = _unfolded(_model((2, 3, 4), 1 / 255, -0.5))
    record = graph["rescale"]
    assert isinstance(record, Rescaling)
    assert record.scale.tolist() == pytest.approx([1 / 255] * 4) and record.offset.tolist() == [-0.5] * 4
    plan = make_plan(graph, parse_format("1,7,8"))[0]
    resources = layer_resources(plan)
    assert resources.multipliers == 4  # one per channel of a beat
    assert resources.rom_bits == 4 * (plan.w_fmt.hw_bits + plan.b_fmt.hw_bits)
    assert graph.to_dict()[0]["type"] == "rescaling"


@pytest.mark.parametrize(
    ("scale", "offset", "fragments"),
    [
        ([[1.0] * 4, [2.0] * 4, [3.0] * 4], 0.0, ["'rescale'", "varies along an axis other than the channels"]),
        ([1.0, 2.0], 0.0, ["'rescale'", "does not broadcast"]),
        (float("nan"), 0.0, ["'rescale'", "NaN or infinite scale"]),
    ],
)
def test_refusals(scale, offset, fragments) -> None:
    inp = keras.Input((3, 4))
    model = keras.Model(
        inp, layers.Dense(2)(layers.Flatten()(layers.Rescaling(scale, offset=offset, name="rescale")(inp)))
    )
    with pytest.raises(K2CError) as info:
        to_graph(model)
    for fragment in fragments:
        assert fragment in str(info.value)


@needs_toolchain
def test_bit_exact_in_clash(tmp_path) -> None:
    """Rescaling with a fused tanh at the input of a small CNN: the Clash simulation equals the
    golden model, back to back and under stalls, with the hardware model's cycles."""
    from keras2clash import api
    from keras2clash.backend.project import load_project

    inp = keras.Input((5, 5, 2))
    x = layers.Rescaling([0.5, -1.25], offset=[0.25, 0.5], name="rescale")(inp)
    x = layers.Activation("tanh", name="tanh")(x)  # fused into the rescaling: a table stage after it
    x = layers.Conv2D(3, 3, activation="relu", name="conv")(x)
    model = keras.Model(inp, layers.Dense(2, name="head")(layers.Flatten(name="flat")(x)))
    rng = np.random.default_rng(3)
    for layer in model.layers:
        if layer.get_weights():
            layer.set_weights([rng.normal(0, 0.4, w.shape).astype("float32") for w in layer.get_weights()])
    out = tmp_path / "net"
    api.emit(model, "1,7,8", out, [2, 1], show=False)
    project = load_project(out)
    assert [p.name for p in project.plans][:2] == ["rescale", "conv"] and project.plans[0].activation == "tanh"
    assert "BatchNorm.batchNorm W.rescale_scale W.rescale_offset" in (out / "Network.hs").read_text()
    x_raw = golden.quantize_inputs(project.plans, rng.uniform(-2, 2, (6, 5, 5, 2)))
    assert_clash_matches_golden(project, x_raw, 5)
