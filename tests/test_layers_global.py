"""Global pooling, average pooling 'same' and BatchNormalization anywhere.

Each layer's golden model is checked against an independent reference over random
options (Keras' own float output at a wide format, or exact rationals), the passes keep a
BatchNormalization that cannot fold, and a few random models that combine the layers are
bit-exact in the Clash simulation with the hardware model's cycles (also under stalls).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from keras import layers

from helpers import assert_clash_matches_golden, needs_toolchain
from keras2clash.errors import K2CError
from keras2clash.frontend.convert import to_graph
from keras2clash.hw import hwmodel
from keras2clash.hw.plan import LayerFormats
from keras2clash.hw.planner import make_plan
from keras2clash.hw.resources import layer_resources
from keras2clash.kinds.batchnorm import BatchNorm
from keras2clash.kinds.dense import Dense
from keras2clash.kinds.pool import AvgPool2D
from keras2clash.quant import golden
from keras2clash.quant.formats import FixedFormat, parse_format

WIDE = parse_format("1,9,14")
FAST = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))


def _randomize(model: keras.Model, seed: int) -> keras.Model:
    """Random weights, and BatchNormalization statistics far from the identity."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            c = layer.moving_mean.shape[0]
            values = {
                "gamma": rng.uniform(0.5, 1.5, c),
                "beta": rng.normal(0, 0.4, c),
                "moving_mean": rng.normal(0, 0.4, c),
                "moving_variance": rng.uniform(0.3, 2.0, c),
            }
            for name, v in values.items():
                if getattr(layer, name, None) is not None:
                    getattr(layer, name).assign(v.astype("float32"))
        elif layer.get_weights():
            layer.set_weights([rng.normal(0, 0.4, w.shape).astype("float32") for w in layer.get_weights()])
    return model


def _golden_vs_keras(model: keras.Model, name: str, x: np.ndarray, fmt: FixedFormat = WIDE):
    """(golden output of layer `name` as reals, Keras' float output of it) on inputs already
    on the format's grid, so only the layer's own rounding separates them."""
    graph = to_graph(model)
    plans = make_plan(graph, fmt)
    params = golden.quantize_params(plans)
    x_raw = golden.quantize_inputs(plans, x)
    got = golden.run_all(plans, params, x_raw)[name] / 2.0**fmt.frac
    ref = keras.Model(model.inputs[0], model.get_layer(name).output)(x_raw / 2.0**fmt.frac).numpy()
    return got, np.asarray(ref, dtype=np.float64).reshape(got.shape)


def _dense_head(x: Any) -> Any:
    return layers.Dense(2, name="head")(layers.Flatten()(x) if len(x.shape) > 2 else x)


# --- global pooling -----------------------------------------------------------------------


@FAST
@given(
    h=st.integers(1, 6),
    w=st.integers(1, 7),
    c=st.integers(1, 4),
    one_d=st.booleans(),
    kind=st.sampled_from(["max", "average"]),
    keepdims=st.booleans(),
    seed=st.integers(0, 999),
)
def test_global_pooling_golden_equals_keras(h, w, c, one_d, kind, keepdims, seed) -> None:
    """Max is exact; the average is Keras' mean rounded half up to the format (one LSB/2)."""
    cls = {
        ("max", False): layers.GlobalMaxPooling2D,
        ("average", False): layers.GlobalAveragePooling2D,
        ("max", True): layers.GlobalMaxPooling1D,
        ("average", True): layers.GlobalAveragePooling1D,
    }
    shape = (w, c) if one_d else (h, w, c)
    inp = keras.Input(shape)
    out = cls[(kind, one_d)](keepdims=keepdims, name="gp")(inp)
    model = keras.Model(inp, _dense_head(out))
    graph = to_graph(model)
    assert graph["gp"].type == ("globalmaxpool" if kind == "max" else "globalavgpool")
    assert graph["gp"].output_shape == ((1, 1, c) if keepdims else (c,))
    x = np.random.default_rng(seed).uniform(-4, 4, size=(5, *shape))
    got, want = _golden_vs_keras(model, "gp", x)
    lsb = 2.0**-WIDE.frac
    assert np.all(np.abs(got - want) <= (0 if kind == "max" else lsb / 2) + 1e-5)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40),
    c=st.integers(1, 3),
    fmt=st.sampled_from(["1,3,4", "1,7,8", "1,20,40"]),
    seed=st.integers(0, 999),
)
def test_global_average_equals_exact_rationals(n, c, fmt, seed) -> None:
    """floor(mean * 2^f + 1/2) on the raw values, for any count, also beyond int64 sums."""
    f = parse_format(fmt)
    x = np.random.default_rng(seed).integers(f.raw_min, f.raw_max + 1, size=(3, 1, n, c))
    plan = make_plan(
        [
            {"type": "globalavgpool", "name": "g", "input_shape": (1, n, c), "output_shape": (c,)},
            {
                "type": "dense",
                "name": "d",
                "input_shape": (c,),
                "output_shape": (1,),
                "weights": {"kernel": np.ones((c, 1)), "bias": np.zeros(1)},
            },
        ],
        f,
    )[0]
    got = golden.layer(plan, {}, [x])
    for s in range(3):
        for k in range(c):
            mean = Fraction(sum(int(v) for v in x[s, 0, :, k]), n)
            assert got[s, k] == (mean + Fraction(1, 2)).__floor__()


def test_global_pooling_refuses_channels_first() -> None:
    inp = keras.Input((2, 5, 5))
    model = keras.Model(
        inp, layers.Dense(2)(layers.GlobalAveragePooling2D(data_format="channels_first", name="gcf")(inp))
    )
    with pytest.raises(K2CError, match="GlobalAveragePooling2D layer 'gcf'.*channels_first"):
        to_graph(model)


def test_global_pool_resources_and_timing_rule() -> None:
    """An input, a running and an output register per channel; the result is valid two cycles
    after an image's last beat (back to back: one beat per cycle, no stall)."""
    inp = keras.Input((3, 4, 5))
    model = keras.Model(inp, layers.Dense(2, name="d")(layers.GlobalAveragePooling2D(name="g")(inp)))
    plans = make_plan(to_graph(model), parse_format("1,7,8"), pipeline=0)
    res = layer_resources(plans[0])
    assert res.multipliers == 0 and res.register_bits == 5 * (16 + (16 + 4 + 2) + 16) + 1
    t = hwmodel.timing(plans, 3)
    assert list(t.accept_cycle) == [0, 12, 24]
    # beat 11 passes Top's input FIFO in cycle 12, is combined in 13, the mean is valid in
    # cycle 14, the Dense (G*b = 2) answers 3 cycles later, the class of 2 values (the
    # registered beat and activation, one level, the queue) 4 more, Top's output FIFO 1 more
    assert list(t.output_cycle) == [22, 34, 46]


# --- average pooling 'same' ---------------------------------------------------------------


@FAST
@given(
    h=st.integers(1, 7),
    w=st.integers(1, 8),
    c=st.integers(1, 3),
    ph=st.integers(1, 4),
    pw=st.integers(1, 4),
    sh=st.integers(1, 3),
    sw=st.integers(1, 3),
    one_d=st.booleans(),
    seed=st.integers(0, 999),
)
def test_average_pooling_same_golden_equals_keras(h, w, c, ph, pw, sh, sw, one_d, seed) -> None:
    """Keras divides each window by its count of non-padding values; so does the golden
    model (within half an LSB). 1-D: a 2-D pool one row high (the IR form of a 1-D pool)."""
    if one_d:
        h, ph, sh = 1, 1, 1
    inp = keras.Input((h, w, c))
    out = layers.AveragePooling2D((ph, pw), strides=(sh, sw), padding="same", name="ap")(inp)
    model = keras.Model(inp, _dense_head(out))
    record = to_graph(model)["ap"]
    assert record.padding == "same"
    x = np.random.default_rng(seed).uniform(-4, 4, size=(4, h, w, c))
    got, want = _golden_vs_keras(model, "ap", x)
    assert np.all(np.abs(got - want) <= 2.0**-WIDE.frac / 2 + 1e-5)


@settings(max_examples=60, deadline=None)
@given(
    h=st.integers(1, 9),
    w=st.integers(1, 9),
    ph=st.integers(1, 5),
    pw=st.integers(1, 5),
    sh=st.integers(1, 3),
    sw=st.integers(1, 3),
    seed=st.integers(0, 999),
)
def test_average_pooling_same_divisor_equals_exact_rationals(h, w, ph, pw, sh, sw, seed) -> None:
    """Per output position: the values of the window that lie inside the image, their exact
    mean rounded half up (the count taken from the geometry, not from the golden model's
    own padded-ones trick)."""
    from keras2clash.frontend.images import same_pads

    f = parse_format("1,7,8")
    (top, bottom), (left, right) = same_pads(h, ph, sh), same_pads(w, pw, sw)
    h2, w2 = -(-h // sh), -(-w // sw)
    record = AvgPool2D(
        name="ap",
        inputs=("input",),
        input_shapes=((h, w, 1),),
        output_shape=(h2, w2, 1),
        pool_size=(ph, pw),
        strides=(sh, sw),
        padding="same",
        pads=(top, bottom, left, right),
    )
    plan = make_plan(
        [
            record.__dict__ | {"type": "avgpool2d", "input_shape": (h, w, 1)},
            {"type": "flatten", "name": "f", "input_shape": (h2, w2, 1), "output_shape": (h2 * w2,)},
            {
                "type": "dense",
                "name": "d",
                "input_shape": (h2 * w2,),
                "output_shape": (1,),
                "weights": {"kernel": np.ones((h2 * w2, 1)), "bias": np.zeros(1)},
            },
        ],
        f,
    )[0]
    assert plan.params.exclude_pads == any(plan.params.pads)
    x = np.random.default_rng(seed).integers(f.raw_min, f.raw_max + 1, size=(2, h, w, 1))
    got = golden.layer(plan, {}, [x])
    for i in range(h2):
        for j in range(w2):
            rows = [r for r in range(i * sh - top, i * sh - top + ph) if 0 <= r < h]
            cols = [q for q in range(j * sw - left, j * sw - left + pw) if 0 <= q < w]
            for s in range(2):
                mean = Fraction(sum(int(x[s, r, q, 0]) for r in rows for q in cols), len(rows) * len(cols))
                assert got[s, i, j, 0] == (mean + Fraction(1, 2)).__floor__()


def test_zero_padding_folded_into_average_pooling_counts_its_zeros() -> None:
    """ZeroPadding2D zeros are real values: folded into a pool they count in the divisor,
    even when the pool says 'same' (which then needs no padding of its own)."""
    inp = keras.Input((4, 4, 1))
    x = layers.ZeroPadding2D(1, name="zp")(inp)
    x = layers.AveragePooling2D(2, padding="same", name="ap")(x)
    model = keras.Model(inp, _dense_head(x))
    record = to_graph(model)["ap"]
    assert record.padding == "valid" and record.pads == (1, 1, 1, 1)
    got, want = _golden_vs_keras(model, "ap", np.random.default_rng(0).uniform(-2, 2, (3, 4, 4, 1)))
    assert np.all(np.abs(got - want) <= 2.0**-WIDE.frac / 2 + 1e-5)


# --- BatchNormalization anywhere ----------------------------------------------------------


def _bn_model(position: str, center: bool, scale: bool, seed: int) -> keras.Model:
    """A BatchNormalization 'bn' where it cannot fold."""
    inp = keras.Input((5, 4, 3) if position != "dense_relu" else (6,))
    bn = layers.BatchNormalization(center=center, scale=scale, name="bn")
    if position == "input":  # before a padded convolution (a Dense or valid one takes it in)
        x = layers.Conv2D(2, 3, padding="same", name="c_same")(bn(inp))
    elif position == "after_relu":
        x = bn(layers.ReLU(name="r")(layers.Conv2D(3, 2, name="c")(inp)))
    elif position == "after_maxpool":
        x = bn(layers.MaxPooling2D(2, name="p")(inp))
    elif position == "after_add":
        a = layers.Conv2D(3, 1, name="ca")(inp)
        x = bn(layers.Add(name="add")([a, inp]))
    elif position == "shared":  # the Conv2D has another reader
        c = layers.Conv2D(3, 1, name="c")(inp)
        x = layers.Add(name="add")([bn(c), c])
    else:  # after a Dense with a relu
        x = bn(layers.Dense(4, activation="relu", name="dr")(inp))
    return _randomize(keras.Model(inp, _dense_head(x)), seed)


@FAST
@given(
    position=st.sampled_from(["input", "after_relu", "after_maxpool", "after_add", "shared", "dense_relu"]),
    center=st.booleans(),
    scale=st.booleans(),
    seed=st.integers(0, 999),
)
def test_batchnorm_anywhere_golden_equals_keras(position, center, scale, seed) -> None:
    """Not folded: a 'batchnorm' hardware layer, within the rounding of its scale and
    offset (1,9,14 weights) and of its output (half an LSB)."""
    model = _bn_model(position, center, scale, seed)
    graph = to_graph(model)
    assert graph["bn"].type == "batchnorm"
    shape = tuple(model.inputs[0].shape[1:])
    x = np.random.default_rng(seed).uniform(-2, 2, size=(4, *shape))
    got, want = _golden_vs_keras(model, "bn", x)
    # |x| < 2^9 at most; the scale's rounding error (2^-15) times |x| plus the offset's and the output's
    bound = float(np.max(np.abs(want))) * 2**-14 + 2**-13 + 1e-4
    assert np.max(np.abs(got - want)) <= bound


@settings(max_examples=60, deadline=None)
@given(
    fa=st.integers(0, 12),
    fw=st.integers(0, 12),
    fb=st.integers(0, 12),
    fo=st.integers(0, 12),
    c=st.integers(1, 4),
    act=st.sampled_from(["linear", "relu"]),
    seed=st.integers(0, 999),
)
def test_batchnorm_multiply_add_equals_exact_rationals(fa, fw, fb, fo, c, act, seed) -> None:
    """x * scale + offset exactly, rounded half up once to the output format, saturated,
    then the activation: for every mix of fraction widths (either side of the output)."""
    a, wt, b, o = (FixedFormat(1, 4, fa), FixedFormat(1, 3, fw), FixedFormat(1, 5, fb), FixedFormat(1, 4, fo))
    rng = np.random.default_rng(seed)
    record = BatchNorm(
        name="bn",
        inputs=("input",),
        input_shapes=((c,),),
        output_shape=(c,),
        scale=rng.uniform(-8, 8, c),
        shift=rng.uniform(-30, 30, c),
        mean=rng.uniform(-1, 1, c),
        activation=act,
    )
    head = Dense(
        name="d", inputs=("bn",), input_shapes=((c,),), output_shape=(1,), kernel=np.ones((c, 1)), bias=np.zeros(1)
    )
    from keras2clash.ir.graph import Graph

    graph = Graph(name="m", input_name="input", input_shape=(c,), layers=(record, head), output="d")
    plan = make_plan(graph, o, layer_formats={"bn": LayerFormats(weight=wt, bias=b, output=o)}, input_fmt=a)[0]
    params = golden.quantize_params([plan])["bn"]
    x = rng.integers(a.raw_min, a.raw_max + 1, size=(5, c))
    got = golden.layer(plan, {plan.name: params}, [x])
    for s in range(5):
        for k in range(c):
            exact = Fraction(int(x[s, k]), 2**fa) * Fraction(int(params.kernel[k]), 2**fw) + Fraction(
                int(params.bias[k]), 2**fb
            )
            r = min(max((exact * 2**fo + Fraction(1, 2)).__floor__(), o.raw_min), o.raw_max)
            assert got[s, k] == (max(r, 0) if act == "relu" else r)


def test_batchnorm_passes_fold_or_keep() -> None:
    """Folded into a linear Conv2D that alone feeds it; kept (with a fused activation)
    after a relu Conv2D; the plan counts one multiplier per channel and stores the constants."""
    inp = keras.Input((5, 5, 2))
    folded = keras.Model(inp, _dense_head(layers.BatchNormalization(name="bn")(layers.Conv2D(3, 2, name="c")(inp))))
    assert "bn" in to_graph(folded)["c"].fused and "bn" not in to_graph(folded).by_name()
    x = layers.Conv2D(3, 2, activation="relu", name="c")(inp)
    x = layers.ReLU(name="r")(layers.BatchNormalization(name="bn")(x))
    graph = to_graph(keras.Model(inp, _dense_head(x)))
    assert graph["bn"].activation == "relu" and graph["bn"].fused == ("r",)
    plans = make_plan(graph, parse_format("1,7,8"))
    bn = next(p for p in plans if p.name == "bn")
    assert bn.multipliers == 3 and bn.rom_bits == 3 * 32 and bn.acc_fmt == FixedFormat(1, 17, 16)
    with pytest.raises(K2CError, match="'bn'.*exact accumulator"):
        make_plan(graph, parse_format("1,7,8"), layer_formats={"bn": LayerFormats(accumulator_bits=20)})


def test_batchnorm_after_1d_input() -> None:
    """A sequence (steps, channels) normalises its channels: IR (1, steps, C), axis -1 or 2
    (before a padded Conv1D, where it stays a stage)."""
    inp = keras.Input((6, 3))
    x = layers.Conv1D(2, 3, padding="same", name="c_same")(layers.BatchNormalization(axis=2, name="bn")(inp))
    model = _randomize(keras.Model(inp, _dense_head(x)), 1)
    got, want = _golden_vs_keras(model, "bn", np.random.default_rng(2).uniform(-2, 2, (3, 6, 3)))
    assert to_graph(model)["bn"].input_shape == (1, 6, 3)
    assert np.max(np.abs(got - want)) <= 2**-12


def test_autoformat_and_profile_handle_the_new_kinds() -> None:
    from keras2clash.quant.autoformat import choose_formats
    from keras2clash.quant.profile import float_forward, profile

    model = _randomize(_model_2d(5, 6, 2, 3, 1, True), 3)
    graph = to_graph(model)
    x = np.random.default_rng(0).uniform(-1, 1, (8, 5, 6, 2))
    traces = float_forward(graph, x)
    assert np.allclose(traces[-1].out, model.predict(x, verbose=0), atol=1e-4)
    auto = choose_formats(graph, x, 12)
    assert "bn" in auto.layers and auto.saturated == 0
    assert any(s.layer == "bn" and s.kind == "weights" for s in profile(graph, x).stats)


# --- golden == Clash simulation, cycles == hardware model ---------------------------------


def _model_2d(h: int, w: int, c: int, k: int, stride: int, keepdims: bool) -> keras.Model:
    """Conv2D(relu) -> BatchNorm -> AveragePooling2D(k, stride, same) -> Conv2D ->
    GlobalAveragePooling2D -> Dense."""
    inp = keras.Input((h, w, c))
    x = layers.Conv2D(3, 2, padding="same", activation="relu", name="conv_a")(inp)
    x = layers.BatchNormalization(name="bn")(x)
    x = layers.AveragePooling2D(k, strides=stride, padding="same", name="avg_same")(x)
    x = layers.Conv2D(4, 2, padding="same", name="conv_b")(x)
    x = layers.GlobalAveragePooling2D(keepdims=keepdims, name="gap")(x)
    if keepdims:
        x = layers.Flatten(name="flat")(x)
    return keras.Model(inp, layers.Dense(3, name="out")(x))


def _model_1d(steps: int, c: int) -> keras.Model:
    """A sequence: BatchNorm at the input, Add with the input, BatchNorm after the Add with
    a fused ReLU, GlobalMaxPooling1D (keepdims) -> Flatten -> Dense."""
    inp = keras.Input((steps, c))
    x = layers.BatchNormalization(name="bn_in")(inp)
    x = layers.Add(name="add")([x, inp])
    x = layers.ReLU(name="bn_relu")(layers.BatchNormalization(name="bn_add")(x))
    x = layers.GlobalMaxPooling1D(keepdims=True, name="gmp")(x)
    return keras.Model(inp, layers.Dense(2, name="out")(layers.Flatten(name="flat")(x)))


def _bit_exact_in_clash(tmp_path_factory, model: keras.Model, fmt: str, rng: np.random.Generator, seed: int) -> None:
    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.network import load_network

    planned = load_network(model, fmt, fifos=False)
    compute = [p for p in planned.plans if p.is_compute]
    pes = [int(rng.integers(1, p.filters + 1)) for p in compute]
    cyc = [int(rng.integers(1, min(p.window, 4) + 1)) for p in compute]
    out = tmp_path_factory.mktemp("global") / "net"
    api.emit(model, fmt, out, pes, cycles=cyc, show=False)
    project = load_project(out)
    x = rng.uniform(-1.5, 1.5, size=(5, *model.inputs[0].shape[1:]))
    x_raw = golden.quantize_inputs(project.plans, x)
    want, exe = assert_clash_matches_golden(project, x_raw, seed)


CLASH = settings(
    max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate]
)  # no shrinking: each example builds Clash


@needs_toolchain
@CLASH
@given(
    h=st.integers(1, 7),
    w=st.integers(3, 7),
    c=st.integers(1, 3),
    k=st.integers(2, 3),
    stride=st.integers(1, 2),
    keepdims=st.booleans(),
    fmt=st.sampled_from(["1,7,8", "1,4,6"]),
    seed=st.integers(0, 10_000),
)
def test_random_2d_models_bit_exact_in_clash(tmp_path_factory, h, w, c, k, stride, keepdims, fmt, seed) -> None:
    rng = np.random.default_rng(seed)
    model = _randomize(_model_2d(h, w, c, k, stride, keepdims), seed)
    _bit_exact_in_clash(tmp_path_factory, model, fmt, rng, seed)


@needs_toolchain
@settings(CLASH, max_examples=1)
@given(
    steps=st.integers(2, 9), c=st.integers(1, 4), fmt=st.sampled_from(["1,7,8", "1,5,10"]), seed=st.integers(0, 10_000)
)
def test_random_1d_models_bit_exact_in_clash(tmp_path_factory, steps, c, fmt, seed) -> None:
    rng = np.random.default_rng(seed)
    model = _randomize(_model_1d(steps, c), seed)
    _bit_exact_in_clash(tmp_path_factory, model, fmt, rng, seed)


@needs_toolchain
def test_verilog_bit_exact_in_verilator(tmp_path) -> None:
    """The Verilog Clash generates equals the golden model too: the position-dependent
    divisors of 'same' average pooling must become constant dividers in HDL (an earlier
    design computed them from elaboration-time Ints and was right in Haskell, wrong in
    Verilog), and the global average and BatchNorm constants translate exactly."""
    from keras2clash import api
    from keras2clash.verify import rtlsim

    inp = keras.Input((5, 4, 2))
    x = layers.AveragePooling2D(3, strides=(1, 2), padding="same", name="avg_same")(inp)
    x = layers.BatchNormalization(name="bn")(x)
    x = layers.GlobalAveragePooling2D(name="gap")(x)
    model = _randomize(keras.Model(inp, layers.Dense(3, name="out")(x)), 5)
    out = tmp_path / "net"
    api.emit(model, "1,5,10", out, [2], show=False)
    x = np.random.default_rng(5).uniform(-2, 2, size=(6, 5, 4, 2))
    np.savez(tmp_path / "data.npz", x_test=x, y_test=np.zeros(6, dtype=int))
    result = rtlsim.rtlsim(out, tmp_path / "data.npz", "verilator", gap_max=3, seed=2)
    assert result.ok and len(result.samples) == 6


@needs_toolchain
@pytest.mark.parametrize("kind", ["average", "max"])
def test_global_pool_held_back_by_a_slow_layer_cycle_exact(tmp_path, kind) -> None:
    """Images of 2 beats into a global pooling whose downstream (a dense layer at 3 cycles a
    window, then one at 9) takes far longer than an image: results wait in the running
    register, the input register fills and input ready falls. Bit-exact, and every accept
    and output cycle equals the hardware model's (the pending rule of K2C.Global)."""
    from keras2clash import api
    from keras2clash.backend.project import load_project

    pool = layers.GlobalAveragePooling2D if kind == "average" else layers.GlobalMaxPooling2D
    inp = keras.Input((1, 2, 3))
    model = keras.Model(inp, layers.Dense(5, name="d")(layers.Dense(6, name="d0")(pool(name="g")(inp))))
    model = _randomize(model, 7)
    api.emit(model, "1,7,8", tmp_path / "net", [1, 1], cycles=[3, 3], show=False)
    project = load_project(tmp_path / "net")
    x = np.random.default_rng(1).uniform(-1.5, 1.5, size=(7, 1, 2, 3))
    assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), 3)
    t = hwmodel.timing(project.plans, 7)
    assert np.all(np.diff(t.accept_cycle)[-2:] > 2)  # held back: the later images wait


@needs_toolchain
def test_join_whose_steady_state_spans_five_images(tmp_path) -> None:
    """BatchNorm -> Add with the network input: with the branch FIFOs the planner sizes, the
    steady state repeats every 5 images (II 3.6 cycles), not every image; the model finds it
    and its accept and output cycles over 12 images equal the Clash simulation's."""
    from keras2clash import api
    from keras2clash.backend.project import load_project

    model = _randomize(_model_1d(3, 3), 11)
    out = tmp_path / "net"
    api.emit(model, "1,7,8", out, [1], show=False)
    project = load_project(out)
    assert [p.params.fifo_depths for p in project.plans if p.is_merge] == [(5, 5)]
    assert hwmodel.steady_state(project.plans) == (3.6, 5)
    x = np.random.default_rng(11).uniform(-1.5, 1.5, size=(12, 3, 3))
    assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), 11)
