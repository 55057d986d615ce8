"""Depthwise and separable convolutions: DepthwiseConv2D/1D and
SeparableConv2D/1D through the frontend, the golden model (against Keras float at a wide
format and against plain loops at the contract level), the plan's multipliers, and random
models golden == Clash simulation with the hardware model's cycles, also under stalls.
"""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from keras import layers

from helpers import assert_clash_matches_golden, needs_toolchain
from keras2clash.errors import K2CError
from keras2clash.frontend.convert import to_graph
from keras2clash.frontend.keras_ref import predict_float
from keras2clash.hw.plan import LayerFormats, LayerPlan
from keras2clash.hw.planner import make_plan
from keras2clash.hw.resources import layer_resources
from keras2clash.ir.graph import Graph
from keras2clash.kinds.conv import Conv2D
from keras2clash.kinds.dense import Dense
from keras2clash.kinds.depthwise import DepthwiseConv2D
from keras2clash.kinds.flatten import Flatten
from keras2clash.quant import golden
from keras2clash.quant.formats import FixedFormat, saturate

WIDE = FixedFormat(1, 9, 14)


def _set_random_weights(model: keras.Model, seed: int, scale: float = 0.5) -> None:
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, scale, w.shape).astype("float32") for w in model.get_weights()])


def _layer(kind: str, options: dict, name: str = "dw") -> layers.Layer:
    """One of the four classes with the drawn options (1-D kinds take the width only)."""
    one_d = kind.endswith("1D")
    opts = dict(options)
    if one_d:
        opts["kernel_size"], opts["strides"] = opts["kernel_size"][1], opts["strides"][1]
    if kind.startswith("Separable"):
        return getattr(layers, kind)(filters=opts.pop("filters"), name=name, **opts)
    opts.pop("filters")
    return getattr(layers, kind)(name=name, **opts)


options = st.fixed_dictionaries(
    {
        "kernel_size": st.tuples(st.integers(1, 3), st.integers(1, 4)),
        "strides": st.integers(1, 3).map(lambda s: (s, s)),  # TF's depthwise kernel takes equal strides only
        "padding": st.sampled_from(["valid", "same"]),
        "depth_multiplier": st.integers(1, 3),
        "use_bias": st.booleans(),
        "activation": st.sampled_from(["linear", "relu"]),  # sigmoid: PLAN, not Keras' function
        "filters": st.integers(1, 4),
    }
)


# --- golden model at a wide format against Keras float ----------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["DepthwiseConv2D", "DepthwiseConv1D", "SeparableConv2D", "SeparableConv1D"]),
    opts=options,
    h=st.integers(3, 6),
    w=st.integers(4, 8),
    c=st.integers(1, 3),
    seed=st.integers(0, 99),
)
def test_golden_equals_keras_float_within_rounding(kind, opts, h, w, c, seed) -> None:
    """The layer's golden output at 1,9,14 equals Keras' float output within the rounding of
    the weights (2^-15 each, times the inputs' size) and of the output (2^-15 per layer)."""
    one_d = kind.endswith("1D")
    shape = (w, c) if one_d else (h, w, c)
    inp = keras.Input(shape)
    under = _layer(kind, opts)(inp)
    model = keras.Model(inp, layers.Dense(2, name="head")(layers.Flatten()(under)))
    _set_random_weights(model, seed)
    graph = to_graph(model)
    plans = make_plan(graph, WIDE)
    rng = np.random.default_rng(seed)
    x = np.round(rng.uniform(-1, 1, (4, *shape)) * 2**WIDE.frac) / 2**WIDE.frac  # exact inputs
    values = golden.run_all(plans, golden.quantize_params(plans), golden.quantize_inputs(plans, x))
    got = values["dw"].reshape(4, -1) / 2**WIDE.frac
    want = np.asarray(keras.Model(inp, under)(x.astype("float32")), dtype=np.float64).reshape(4, -1)
    half = 2.0 ** -(WIDE.frac + 1)  # the largest error of one rounding
    k = opts["kernel_size"][1] * (1 if one_d else opts["kernel_size"][0])
    tol = (k + 2) * half  # k weights (inputs |x| <= 1, exact), the bias, the output
    if kind.startswith("Separable"):  # the depthwise error through the pointwise weights
        pointwise = np.asarray(model.get_layer("dw").pointwise_kernel).reshape(-1, opts["filters"])
        mid = np.abs(values["dw_depthwise"]).sum(axis=-1).max() / 2**WIDE.frac
        tol = np.abs(pointwise).sum(axis=0).max() * (k + 1) * half + mid * half + 2 * half
    tol += 1e-5 * (1 + np.abs(want).max())  # Keras computes in float32
    assert got.shape == want.shape
    assert np.max(np.abs(got - want)) <= tol


def test_keras_channel_order_is_c_times_m_plus_j() -> None:
    """Output channel c*m + j is input channel c's window times kernel[:, :, c, j]."""
    inp = keras.Input((3, 3, 2))
    dw = layers.DepthwiseConv2D(3, depth_multiplier=3, use_bias=False, name="dw")
    model = keras.Model(inp, layers.Dense(1)(layers.Flatten()(dw(inp))))
    kernel = np.zeros((3, 3, 2, 3), dtype="float32")
    kernel[1, 1, 1, 2] = 1.0  # channel 1, multiplier 2 -> output channel 5
    dw.set_weights([kernel])
    record = to_graph(model)["dw"]
    assert isinstance(record, DepthwiseConv2D) and record.kernel.shape == (3, 3, 6)
    assert np.flatnonzero(record.kernel[1, 1]) == [5]
    x = np.zeros((1, 3, 3, 2))
    x[0, 1, 1, 1] = 0.5
    plans = make_plan(to_graph(model), WIDE)
    out = golden.run_all(plans, golden.quantize_params(plans), golden.quantize_inputs(plans, x))["dw"]
    assert np.flatnonzero(out) == [5] and out[0, 0, 0, 5] == 2**WIDE.frac // 2


# --- golden model against plain loops (the contract, exact integers) ---------------------


def _plan(h, w, c, m, k, s, pads, fmt, acc_bits, pe, cycles, act):
    kh, kw = k
    top, bottom, left, right = pads
    h2, w2 = (h + top + bottom - kh) // s[0] + 1, (w + left + right - kw) // s[1] + 1
    record = DepthwiseConv2D(
        name="dw",
        inputs=("input",),
        input_shapes=((h, w, c),),
        output_shape=(h2, w2, c * m),
        kernel=np.zeros((kh, kw, c * m)),
        bias=np.zeros(c * m),
        activation=act,
        kernel_size=k,
        strides=s,
        pads=pads,
        depth_multiplier=m,
    )
    flat = Flatten(name="f", inputs=("dw",), input_shapes=((h2, w2, c * m),), output_shape=(h2 * w2 * c * m,))
    dense = Dense(name="d", inputs=("f",), input_shapes=((h2 * w2 * c * m,),), output_shape=(1,))
    graph = Graph(name="g", input_name="input", input_shape=(h, w, c), layers=(record, flat, dense), output="d")
    formats = {"dw": LayerFormats(output=fmt, accumulator_bits=acc_bits)}
    return make_plan(graph, fmt, [pe, 1], formats, [cycles, 1])[0]


def _loops(x, kernel, bias, plan: LayerPlan, m: int) -> np.ndarray:
    """Per output pixel and channel f: channel f // m's window, chunk by chunk (saturating
    a narrow accumulator after each chunk), then round half up, saturate, activate."""
    kh, kw = plan.params.kernel_size
    sh, sw = plan.params.strides
    top, bottom, left, right = plan.params.pads
    n, h, w, c = x.shape
    xp = np.zeros((n, h + top + bottom, w + left + right, c), dtype=object)
    xp[:, top : top + h, left : left + w] = x
    acc_fmt, out_fmt = plan.acc_fmt, plan.out_fmt
    h2, w2, f = plan.output_shape
    out = np.zeros((n, h2, w2, f), dtype=object)
    for b in range(n):
        for i in range(h2):
            for j in range(w2):
                for o in range(f):
                    terms = [
                        int(xp[b, i * sh + di, j * sw + dj, o // m]) * int(kernel[di * kw + dj, o])
                        for di in range(kh)
                        for dj in range(kw)
                    ]
                    acc = None
                    for t in range(plan.knobs.cycles):
                        part = sum(terms[t * plan.chunk : (t + 1) * plan.chunk])
                        part <<= acc_fmt.frac - plan.in_fmt.frac - plan.w_fmt.frac
                        if acc is None:
                            part += int(bias[o]) << (acc_fmt.frac - plan.b_fmt.frac)
                        acc = int(saturate(np.array([part if acc is None else acc + part], dtype=object), acc_fmt)[0])
                    shift = acc_fmt.frac - out_fmt.frac
                    r = (acc + (1 << (shift - 1))) >> shift if shift > 0 else acc << -shift
                    r = max(out_fmt.raw_min, min(out_fmt.raw_max, r))
                    out[b, i, j, o] = max(r, 0) if plan.hw_activation == "relu" else r
    return out.astype(np.int64)


@settings(max_examples=60, deadline=None)
@given(
    h=st.integers(1, 5),
    w=st.integers(1, 6),
    c=st.integers(1, 3),
    m=st.integers(1, 3),
    k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    s=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    pads=st.tuples(*[st.integers(0, 1)] * 4),
    fmt=st.builds(lambda i, f: FixedFormat(1, i, f), st.integers(0, 4), st.integers(0, 5)),
    narrow=st.integers(0, 6),
    act=st.sampled_from(["linear", "relu"]),
    data=st.data(),
)
def test_golden_equals_loops(h, w, c, m, k, s, pads, fmt, narrow, act, data) -> None:
    """Exact integers, any knobs, also a narrower (saturating) accumulator: the golden model
    is the contract per output channel over its own channel's kh*kw window."""
    top, bottom, left, right = pads
    if k[0] > h + top + bottom or k[1] > w + left + right:
        return
    window = k[0] * k[1]
    cycles = data.draw(st.integers(1, window))
    pe = data.draw(st.integers(1, c * m))
    exact = _plan(h, w, c, m, k, s, pads, fmt, None, pe, cycles, act).acc_fmt
    bits = max(exact.frac + 1, exact.bits - narrow)
    plan = _plan(h, w, c, m, k, s, pads, fmt, bits, pe, cycles, act)
    rng = np.random.default_rng(data.draw(st.integers(0, 999)))
    x = rng.integers(fmt.raw_min, fmt.raw_max + 1, (2, h, w, c))
    kernel = rng.integers(fmt.raw_min, fmt.raw_max + 1, (window, c * m))
    bias = rng.integers(fmt.raw_min, fmt.raw_max + 1, c * m)
    got = golden.layer(plan, {plan.name: golden.QuantizedLayer(kernel=kernel, bias=bias)}, [x])
    assert np.array_equal(got, _loops(x, kernel, bias, plan, m))


# --- the plan: no multiplier works on zeros ----------------------------------------------


def test_multipliers_are_per_channel_window() -> None:
    """pe = C*m and cycles = 1: C*m*kh*kw multipliers, not the C*m*kh*kw*C of a Conv2D with
    the depthwise kernel spread over all channels; the ROM holds only the real weights."""
    c, m, kh, kw = 4, 2, 3, 3
    model = keras.Sequential(
        [
            keras.Input((8, 8, c)),
            layers.DepthwiseConv2D((kh, kw), depth_multiplier=m, name="dw"),
            layers.Flatten(),
            layers.Dense(2),
        ]
    )
    dense_conv = keras.Sequential(
        [keras.Input((8, 8, c)), layers.Conv2D(c * m, (kh, kw), name="conv"), layers.Flatten(), layers.Dense(2)]
    )
    dw = make_plan(to_graph(model), FixedFormat(1, 7, 8), [c * m, 1], cycles=[1, 1])[0]
    conv = make_plan(to_graph(dense_conv), FixedFormat(1, 7, 8), [c * m, 1], cycles=[1, 1])[0]
    assert dw.window == kh * kw and dw.filters == c * m
    assert dw.multipliers == c * m * kh * kw == 72
    assert conv.multipliers == c * m * kh * kw * c
    assert dw.macs == 6 * 6 * c * m * kh * kw
    assert dw.rom_bits == c * m * (kh * kw * 16 + 16)
    assert layer_resources(dw).multipliers == 72
    fewer = make_plan(to_graph(model), FixedFormat(1, 7, 8), [3, 1], cycles=[4, 1])[0]
    assert fewer.multipliers == 3 * 3 and fewer.groups == 3 and fewer.rom_depth == 12
    with pytest.raises(K2CError, match="between 1 and 9"):
        make_plan(to_graph(model), FixedFormat(1, 7, 8), [1, 1], cycles=[10, 1])


# --- frontend: records, passes, refusals --------------------------------------------------


def test_separable_becomes_depthwise_then_pointwise_conv() -> None:
    model = keras.Sequential(
        [
            keras.Input((6, 6, 3)),
            layers.SeparableConv2D(4, 3, depth_multiplier=2, name="sep"),
            layers.BatchNormalization(name="bn"),
            layers.ReLU(name="act"),
            layers.Flatten(),
            layers.Dense(2),
        ]
    )
    rng = np.random.default_rng(1)
    model.set_weights([rng.uniform(0.5, 1.5, w.shape).astype("float32") for w in model.get_weights()])
    graph = to_graph(model)
    dw, pw = graph["sep_depthwise"], graph["sep"]
    assert isinstance(dw, DepthwiseConv2D) and dw.output_shape == (4, 4, 6) and not dw.use_bias
    assert dw.activation == "linear" and not np.any(dw.bias)
    assert isinstance(pw, Conv2D) and pw.kernel.shape == (1, 1, 6, 4) and pw.inputs == ("sep_depthwise",)
    assert pw.activation == "relu" and pw.fused == ("bn", "act")
    # the intermediate tensor has its own format when asked
    plans = make_plan(graph, FixedFormat(1, 7, 8), layer_formats={"sep_depthwise": FixedFormat(1, 3, 12)})
    assert plans[0].out_fmt == FixedFormat(1, 3, 12) and plans[1].in_fmt == FixedFormat(1, 3, 12)


def test_batchnorm_activation_and_padding_fold_into_depthwise() -> None:
    model = keras.Sequential(
        [
            keras.Input((6, 6, 2)),
            layers.ZeroPadding2D(1, name="zp"),
            layers.DepthwiseConv2D(3, depth_multiplier=2, name="dw"),
            layers.BatchNormalization(name="bn"),
            layers.Activation("relu", name="act"),
            layers.Flatten(),
            layers.Dense(2),
        ]
    )
    rng = np.random.default_rng(3)
    model.set_weights([rng.uniform(0.5, 1.5, w.shape).astype("float32") for w in model.get_weights()])
    graph = to_graph(model)
    (dw,) = [r for r in graph if r.type == "depthwise2d"]
    assert dw.fused == ("zp", "bn", "act") and dw.pads == (1, 1, 1, 1) and dw.activation == "relu"
    x = rng.uniform(-1, 1, (3, 6, 6, 2))
    plans = make_plan(graph, WIDE)
    got = golden.run(plans, golden.quantize_params(plans), golden.quantize_inputs(plans, x)) / 2**WIDE.frac
    assert np.max(np.abs(got - predict_float(model, x))) < 0.01


def test_zero_padding_folds_into_a_separable_convolutions_depthwise_part() -> None:
    """MobileNet's stride-2 block: ZeroPadding2D then a valid SeparableConv2D."""
    model = keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            layers.ZeroPadding2D(1, name="pad"),
            layers.SeparableConv2D(5, 3, strides=2, name="sep"),
            layers.Flatten(),
            layers.Dense(2),
        ]
    )
    _set_random_weights(model, 4)
    graph = to_graph(model)
    dw = graph["sep_depthwise"]
    assert dw.pads == (1, 1, 1, 1) and dw.fused == ("pad",) and dw.input_shapes == ((8, 8, 3),)
    assert graph["sep"].output_shape == (4, 4, 5)
    x = np.random.default_rng(4).uniform(-1, 1, (3, 8, 8, 3))
    plans = make_plan(graph, WIDE)
    got = golden.run(plans, golden.quantize_params(plans), golden.quantize_inputs(plans, x)) / 2**WIDE.frac
    assert np.max(np.abs(got - predict_float(model, x))) < 0.01


@pytest.mark.parametrize(
    ("layer", "fragments"),
    [
        (
            lambda: layers.DepthwiseConv2D(3, dilation_rate=2, name="dil"),
            ["DepthwiseConv2D layer 'dil'", "dilation_rate", "no dilation"],
        ),
        (
            lambda: layers.SeparableConv2D(2, 3, dilation_rate=(1, 2), name="dil"),
            ["SeparableConv2D layer 'dil'", "dilation_rate"],
        ),
    ],
)
def test_refusals_name_layer_and_reason(layer, fragments) -> None:
    model = keras.Sequential([keras.Input((8, 8, 2)), layer(), layers.Flatten(), layers.Dense(2)])
    with pytest.raises(K2CError) as info:
        to_graph(model)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_emitted_network_names_the_depthwise_block(tmp_path: Path) -> None:
    from keras2clash import api

    model = keras.Sequential(
        [
            keras.Input((5, 5, 2)),
            layers.DepthwiseConv2D(3, padding="same", name="dw"),
            layers.Flatten(),
            layers.Dense(2, name="d"),
        ]
    )
    api.emit(model, "1,7,8", tmp_path / "net", [2, 1], cycles=[3, 1], show=False)
    text = (tmp_path / "net" / "Network.hs").read_text()
    assert "import qualified K2C.Depthwise as Depthwise" in text
    assert "Depthwise.depthwise2d" in text and "Pad.pad" in text and "depth multiplier" in text
    assert (tmp_path / "net" / "weights" / "dw.mem").read_text().count("\n") == 3  # G*b = 1*3 words


# --- golden == Clash simulation, cycles == hardware model --------------------------------


def _model_2d(seed: int) -> keras.Model:
    rng = np.random.default_rng(seed)
    model = keras.Sequential(
        [
            keras.Input((8, 7, 2)),
            layers.Conv2D(3, 3, padding="same", activation="relu", name="conv"),
            layers.DepthwiseConv2D(
                int(rng.integers(2, 4)), strides=2, padding="same", depth_multiplier=2, activation="relu", name="dw"
            ),
            layers.SeparableConv2D(
                4,
                (2, 3),
                depth_multiplier=int(rng.integers(1, 3)),
                use_bias=bool(rng.integers(2)),
                activation="relu",
                name="sep",
            ),
            layers.MaxPooling2D((1, 2), name="pool"),
            layers.Flatten(name="flat"),
            layers.Dense(3, name="out"),
        ]
    )
    _set_random_weights(model, seed)
    return model


def _model_1d(seed: int) -> keras.Model:
    rng = np.random.default_rng(seed)
    model = keras.Sequential(
        [
            keras.Input((12, 3)),
            layers.DepthwiseConv1D(
                3, strides=int(rng.integers(1, 3)), padding="same", depth_multiplier=2, activation="relu", name="dw1"
            ),
            layers.SeparableConv1D(
                4,
                int(rng.integers(2, 4)),
                padding=str(rng.choice(["valid", "same"])),
                activation="sigmoid",
                name="sep1",
            ),
            layers.Flatten(name="flat"),
            layers.Dense(3, name="out"),
        ]
    )
    _set_random_weights(model, seed)
    return model


@needs_toolchain
@settings(
    max_examples=2,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@example(kind="2d", seed=0, knobs=1)
@example(kind="1d", seed=1, knobs=2)
@given(kind=st.sampled_from(["2d", "1d"]), seed=st.integers(0, 1000), knobs=st.integers(0, 1000))
def test_random_models_bit_exact_in_clash(tmp_path_factory, kind, seed, knobs) -> None:
    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.network import load_network

    model = _model_2d(seed) if kind == "2d" else _model_1d(seed)
    rng = np.random.default_rng(knobs)
    planned = load_network(model, "1,7,8", fifos=False)
    compute = [p for p in planned.plans if p.is_compute]
    pes = [int(rng.integers(1, p.filters + 1)) for p in compute]
    cyc = [int(rng.integers(1, min(p.window, 5) + 1)) for p in compute]
    out = tmp_path_factory.mktemp("depthwise") / "net"
    api.emit(model, "1,7,8", out, pes, cycles=cyc, show=False)
    project = load_project(out)
    x = rng.uniform(-1, 1, size=(5, *model.inputs[0].shape[1:]))
    x_raw = golden.quantize_inputs(project.plans, x)
    want, exe = assert_clash_matches_golden(project, x_raw, seed)
