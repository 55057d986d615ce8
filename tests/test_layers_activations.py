"""Activations (docs/guide/contract.md, Activations): the golden model against the exact definitions
(rationals where exact is claimed, the compiler's enumerated maximum error for tables, the
softmax bound), the Keras 3 definitions against Keras itself, the frontend's fused/standalone
decisions and refusals, and golden == Clash simulation (cycles == hardware model) on random
models that combine many activations fused and standalone, with the class taken before a
monotone output activation."""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from helpers import needs_toolchain
from keras2clash.errors import K2CError
from keras2clash.hw import hwmodel
from keras2clash.quant import activations as acts
from keras2clash.quant import golden
from keras2clash.quant.formats import FixedFormat

TABLE_NAMES = (
    "sigmoid",
    "tanh",
    "elu",
    "elu(alpha=0.5)",
    "selu",
    "softplus",
    "softsign",
    "silu",
    "gelu",
    "gelu(approximate=True)",
    "exponential",
)


def _round_sat(value: Fraction, fmt: FixedFormat) -> int:
    """Round half up and saturate, on exact rationals (the contract's one rounding)."""
    q = math.floor(value * (1 << fmt.frac) + Fraction(1, 2))
    return max(fmt.raw_min, min(fmt.raw_max, q))


formats = st.builds(lambda i, f: FixedFormat(1, i, f), st.integers(0, 6), st.integers(0, 9))


def _inputs(fmt: FixedFormat, data) -> np.ndarray:
    return np.array(data.draw(st.lists(st.integers(fmt.raw_min, fmt.raw_max), min_size=1, max_size=40)))


# --- exact functions: rationals ---------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    fi=formats,
    fo=formats,
    data=st.data(),
    t=st.sampled_from([0.0, 0.25, -0.5, 1.0, 0.1]),
    cap=st.sampled_from([None, 6.0, 1.5, 0.6]),
    k=st.sampled_from([0.0, 0.25, 0.125, 0.3, -0.5, 1.5]),
)
def test_relu_family_is_the_exact_value_rounded_once(fi, fo, data, t, cap, k) -> None:
    """y = x > t ? min(round(x'), round(m)) : round(k_q (x - t_q)), rationals; and when the
    constants are representable this is exactly Keras' value rounded half up."""
    text = acts.canonical("relu", negative_slope=k, max_value=cap, threshold=t)
    act = acts.parse(text)
    r = _inputs(fi, data)
    got = acts.apply(r, text, fi, fo)
    kq = Fraction(acts.slope_raw(k), 1 << acts.SLOPE_FRAC)
    tq = Fraction(math.floor(t * (1 << fi.frac) + 0.5), 1 << fi.frac)
    for raw, y in zip(r.tolist(), got.tolist()):
        x = Fraction(raw, 1 << fi.frac)
        if x > Fraction(t):
            v = max(x, Fraction(0)) if cap is not None else x
            want = _round_sat(v, fo)
            if cap is not None:
                want = min(want, _round_sat(Fraction(cap), fo))
        else:
            want = _round_sat(kq * (x - tq), fo)
        assert y == want
        representable = kq == Fraction(k) and tq == Fraction(t)
        if representable and (cap is None or _round_sat(Fraction(cap), fo) * 2**-fo.frac == cap):
            keras_value = Fraction(float(acts.keras_float(act, np.array([float(x)]))[0]))
            assert y == _round_sat(keras_value, fo)


@settings(max_examples=200, deadline=None)
@given(fi=formats, fo=formats, data=st.data(), kind=st.sampled_from(["hard_sigmoid", "hard_silu"]))
def test_hard_functions_are_the_exact_rational_rounded_once(fi, fo, data, kind) -> None:
    r = _inputs(fi, data)
    got = acts.apply(r, kind, fi, fo)
    for raw, y in zip(r.tolist(), got.tolist()):
        x = Fraction(raw, 1 << fi.frac)
        v = min(max(x + 3, Fraction(0)), Fraction(6)) / 6
        assert y == _round_sat(v if kind == "hard_sigmoid" else x * v, fo)


# --- tables: the enumerated maximum error ------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    fi=st.builds(lambda i, f: FixedFormat(1, i, f), st.integers(0, 7), st.integers(0, 10)),
    fo=formats,
    name=st.sampled_from(TABLE_NAMES),
    data=st.data(),
)
def test_tables_stay_within_their_stated_maximum_error(fi, fo, name, data) -> None:
    """Every input's error is at most the figure the compiler states, which is attained;
    `exact` tables give the correctly rounded value everywhere."""
    t = acts.table(name, fi, fo)
    assert len(t.values) <= acts.TABLE_MAX_ENTRIES
    r = np.arange(fi.raw_min, fi.raw_max + 1)
    y = acts.apply(r, name, fi, fo)
    f = acts.keras_float(acts.parse(name), r * 2.0**-fi.frac)
    clipped = np.clip(f, fo.raw_min * fo.lsb, fo.raw_max * fo.lsb)
    err = np.abs(y * fo.lsb - clipped)
    assert err.max() <= t.max_error + 1e-12 and math.isclose(err.max(), t.max_error)
    if t.exact:
        with np.errstate(over="ignore"):
            assert np.array_equal(y, golden.quantize(f, fo))
    one = r[data.draw(st.integers(0, len(r) - 1))]
    assert acts.apply(np.array([one]), name, fi, fo)[0] == y[one - fi.raw_min]


@pytest.mark.parametrize(
    ("name", "lsb"), [("sigmoid", 0.62), ("tanh", 0.5), ("elu", 0.5), ("gelu", 0.5), ("softplus", 1.0), ("selu", 0.62)]
)
def test_stated_errors_at_1_7_8(name: str, lsb: float) -> None:
    """The figures in docs/guide/contract.md: sigmoid within about one output LSB (the PLAN one was ~5)."""
    f = FixedFormat(1, 7, 8)
    assert acts.table(name, f, f).max_error_lsb == pytest.approx(lsb, abs=0.01)
    assert acts.table("tanh", f, f).exact and acts.table("tanh", f, f).shift == 0


@settings(max_examples=150, deadline=None)
@given(
    fi=st.builds(lambda i, f: FixedFormat(1, i, f), st.integers(1, 7), st.integers(2, 10)),
    fo=st.builds(lambda f: FixedFormat(1, 1, f), st.integers(2, 12)),
    data=st.data(),
    n=st.integers(1, 12),
)
def test_softmax_within_its_bound(fi, fo, data, n) -> None:
    r = np.array(
        data.draw(
            st.lists(st.lists(st.integers(fi.raw_min, fi.raw_max), min_size=n, max_size=n), min_size=1, max_size=10)
        )
    )
    y = acts.apply(r, "softmax", fi, fo)
    p = acts.keras_float(acts.parse("softmax"), r * 2.0**-fi.frac)
    bound = acts.softmax_table(fi, fo, n).error_bound
    assert np.all(np.abs(y * fo.lsb - p) <= bound + 1e-12)


def test_softmax_bound_at_1_7_8() -> None:
    f = FixedFormat(1, 7, 8)
    t = acts.softmax_table(f, f, 10)
    assert len(t.values) == 1155 and t.shift == 1 and t.error_bound < 0.0073


# --- the Keras 3 definitions against Keras itself ---------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda k: (
            k.layers.ReLU(max_value=0.6, threshold=0.1, negative_slope=0.25),
            "relu(max_value=0.6, negative_slope=0.25, threshold=0.1)",
        ),
        lambda k: (k.layers.ReLU(negative_slope=0.3, threshold=0.2), "relu(negative_slope=0.3, threshold=0.2)"),
        lambda k: (k.layers.ReLU(max_value=6.0), "relu6"),
        lambda k: (k.layers.LeakyReLU(0.1), "leaky_relu(negative_slope=0.1)"),
        lambda k: (k.layers.ELU(alpha=0.7), "elu(alpha=0.7)"),
        *[
            (lambda name: lambda k: (k.layers.Activation(name), name))(name)  # noqa: B023  (bound by the outer lambda)
            for name in (
                "sigmoid",
                "tanh",
                "selu",
                "softplus",
                "softsign",
                "silu",
                "gelu",
                "exponential",
                "hard_sigmoid",
                "hard_silu",
                "relu6",
                "leaky_relu",
                "softmax",
                "elu",
            )
        ],
    ],
)
def test_definitions_match_keras(make) -> None:
    import keras

    layer, text = make(keras)
    x = np.linspace(-7.013, 7.013, 141).reshape(3, 47).astype("float32")  # no value on a threshold
    want = np.asarray(layer(x), dtype=np.float64)
    got = acts.keras_float(acts.parse(text), x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


# --- frontend: fused or standalone, and refusals ------------------------------------------


def _ir(*layers_, shape=(4,)):
    import keras

    from keras2clash.frontend.convert import to_graph

    model = keras.Sequential([keras.Input(shape), *layers_])
    return [(layer.type, layer.name, layer.activation) for layer in to_graph(model)]


def test_fused_and_standalone_activations() -> None:
    from keras import layers as L

    got = _ir(
        L.Activation("tanh", name="at_input"),
        L.Dense(3, name="d"),
        L.LeakyReLU(0.5, name="lk"),
        L.Activation("sigmoid", name="again"),
        L.Dense(2, activation="gelu", name="d2"),
        L.Softmax(name="sm"),
    )
    assert got == [
        ("activation", "at_input", "tanh"),
        ("dense", "d", "leaky_relu(negative_slope=0.5)"),
        ("activation", "again", "sigmoid"),
        ("dense", "d2", "gelu"),
        ("activation", "sm", "softmax"),
    ]


@pytest.mark.parametrize(("slope", "split"), [(0.1, True), (0.3, True), (0.125, False), (0.0, False), (0.5, False)])
def test_constant_slopes_get_two_register_stages(tmp_path: Path, slope, split) -> None:
    """A LeakyReLU whose slope is a constant multiplication (not a shift) is cut in two register
    stages after its layer, behind a register of the input beat (K2C.Pipe.mapP2: the input, the
    comparison and the product, then the rounding and the choice); the hardware model and the
    resources count them."""
    import keras
    from keras import layers as L

    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.hw.blocks import has_map_stage, map_depth
    from keras2clash.hw.resources import layer_resources

    keras.utils.set_random_seed(1)
    inp = keras.Input((5,))
    x = L.LeakyReLU(slope, name="lk")(L.Dense(4, name="d")(inp))
    api.emit(keras.Model(inp, L.Dense(2, name="d2")(x)), "1,7,8", tmp_path / "net", show=False)
    network = (tmp_path / "net" / "Network.hs").read_text()
    plan = {p.name: p for p in load_project(tmp_path / "net").plans}["d"]
    assert ("|> mapP2 (map d_leaky_relu_product) (map Relu.reluSelect)" in network) == split
    assert ("d_leaky_relu_product :: Q1_7_8 -> Relu.ReluProduct 1 8 8 8 8" in network) == split
    assert (has_map_stage(plan), map_depth(plan)) == ((True, 3) if split else (False, 1))
    # the input beat and the registered halves: 4 x (16 + 1 + 16 + 17 + 16 + 2) bits more than
    # one stage's results
    assert layer_resources(plan).register_bits - layer_resources(replace(plan, activation="relu")).register_bits == (
        4 * (16 + 16 + 52) + 3 if split else 0
    )


def test_prelu_per_channel_is_standalone_and_per_position_refused() -> None:
    import keras
    from keras import layers as L

    init = keras.initializers.RandomUniform(0.1, 0.4, seed=1)
    got = _ir(
        L.Conv2D(3, 2, name="c"),
        L.PReLU(alpha_initializer=init, shared_axes=[1, 2], name="p"),
        L.Flatten(name="f"),
        L.Dense(2, name="d"),
        shape=(3, 3, 1),
    )
    assert got[1][0] == "activation" and got[1][2].startswith("prelu(alpha=[")
    one = _ir(L.Dense(3, name="d"), L.PReLU(name="p"), L.Dense(2, name="d2"))  # alpha 0: one slope
    assert one[0] == ("dense", "d", "prelu(alpha=[0.0, 0.0, 0.0])")
    with pytest.raises(K2CError, match=r"PReLU layer 'p'.*one slope per channel"):
        _ir(
            L.Conv2D(3, 2, name="c"),
            L.PReLU(alpha_initializer=init, name="p"),
            L.Flatten(),
            L.Dense(2),
            shape=(3, 3, 1),
        )


def test_unsupported_activation_is_named() -> None:
    from keras import layers as L

    with pytest.raises(K2CError, match=r"layer 'd' \(Dense\) uses activation 'mish'"):
        _ir(L.Dense(3, activation="mish", name="d"))


@pytest.mark.parametrize("name", ["sigmoid", "tanh", "elu", "softplus"])
def test_wide_inputs_get_a_bounded_table(name: str) -> None:
    """24- and 64-bit inputs: the table is placed on 2^22 cells; the stated figure bounds
    the error of random inputs (monotone functions: exactly a bound)."""
    rng = np.random.default_rng(1)
    for fi, fo in ((FixedFormat(1, 11, 12), FixedFormat(1, 11, 12)), (FixedFormat(1, 0, 63), FixedFormat(1, 0, 63))):
        t = acts.table(name, fi, fo)
        assert not t.exact and len(t.values) <= acts.TABLE_MAX_ENTRIES
        r = np.array([int(v) for v in rng.integers(-(1 << 62), 1 << 62, 2000)], dtype=object) >> (64 - fi.bits)
        y = acts.apply(r, name, fi, fo)
        f = acts.keras_float(acts.parse(name), np.array([float(v) for v in r]) * 2.0**-fi.frac)
        err = np.abs(y * 2.0**-fo.frac - np.clip(f, fo.raw_min * fo.lsb, fo.raw_max * fo.lsb))
        assert err.max() <= t.max_error + 1e-15
    assert acts.table("sigmoid", FixedFormat(1, 11, 12), FixedFormat(1, 11, 12)).max_error < 2.1e-3  # 1/64 buckets


def test_softmax_at_64_bits() -> None:
    f = FixedFormat(1, 0, 63)
    r = np.array([[f.raw_max, 0, f.raw_min, -(1 << 60)]], dtype=object)
    y = acts.apply(r, "softmax", f, f)
    p = acts.keras_float(acts.parse("softmax"), np.array([[float(v) for v in r[0]]]) * 2.0**-63)
    assert np.all(np.abs(y * 2.0**-63 - p) <= acts.softmax_table(f, f, 4).error_bound)


# --- the class before a monotone output activation, and softmax=argmax ------------------


def _saturating_model():
    """Dense logits far beyond sigmoid's saturation: several outputs are exactly 1.0."""
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(5, activation="sigmoid", name="out")])
    kernel = np.array([[20, 21, 22, 23, 1]] * 3, dtype="float32")
    model.set_weights([kernel, np.zeros(5, "float32")])
    return model


def test_class_is_taken_before_the_output_activation() -> None:
    from keras2clash.network import load_network

    net = load_network(_saturating_model(), "1,7,8")
    x = golden.quantize_inputs(net.plans, np.array([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]]))
    out, classes = golden.predict(net.plans, net.params, x)
    assert out[0, :4].tolist() == [256] * 4  # saturated: the argmax of the outputs would say 0
    assert classes.tolist() == [3, 4]


def test_softmax_argmax_mode_leaves_the_output_softmax_out() -> None:
    import keras

    from keras2clash.network import load_network

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="d"), keras.layers.Softmax(name="sm")])
    exact = load_network(model, "1,7,8")
    logits = load_network(model, "1,7,8", softmax="argmax")
    assert [p.type for p in exact.plans] == ["dense"] and exact.plans[-1].activation == "softmax"
    assert logits.plans[-1].activation == "linear"
    x = golden.quantize_inputs(exact.plans, np.random.default_rng(0).normal(size=(20, 3)))
    assert np.array_equal(
        golden.predict(exact.plans, exact.params, x)[1], golden.predict(logits.plans, logits.params, x)[1]
    )
    with pytest.raises(K2CError, match="bad softmax mode"):
        load_network(model, "1,7,8", softmax="probabilities")


# --- golden == Clash simulation ------------------------------------------------------------


def _mixed_model(seed: int, slope: float, alpha: float, cap: float, threshold: float, head: str):
    """Most activations, fused (into Conv2D, Dense, Add, Concatenate) and standalone, in one
    conv + dense network."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(seed)
    inp = keras.Input((4, 4, 2))
    x = L.Activation("softsign", name="at_input")(inp)
    x = L.Conv2D(3, 3, padding="same", name="conv")(x)
    x = L.PReLU(shared_axes=[1, 2], name="prelu", alpha_initializer=keras.initializers.RandomUniform(-0.5, 0.5))(x)
    x = L.Conv2D(4, 2, activation="tanh", name="conv_tanh")(x)
    x = L.MaxPooling2D(name="pool")(x)
    x = L.Activation("hard_silu", name="hsilu")(x)
    x = L.Flatten(name="flat")(x)
    x = L.ELU(alpha=alpha, name="elu_flat")(x)
    x = L.Dense(6, activation="hard_sigmoid", name="d1")(x)
    x = L.ReLU(max_value=cap, threshold=threshold, negative_slope=slope, name="relu_odd")(x)
    x = L.Add(name="add")([L.Dense(4, name="br_a")(x), L.Dense(4, name="br_b")(x)])
    x = L.Activation("tanh", name="add_tanh")(x)  # fused into the merge
    x = L.Concatenate(name="cat")([L.Dense(3, name="br_c")(x), L.Dense(3, name="br_d")(x)])
    x = L.Softmax(name="cat_softmax")(x)  # fused into the merge: a vector stage after it
    x = L.Dense(6, activation="softmax", name="d2")(x)
    x = L.Activation("gelu", name="gelu_sa")(x)
    x = L.LeakyReLU(slope, name="leaky")(x)
    x = L.Dense(6, activation="selu", name="d3")(x)
    x = L.BatchNormalization(name="bn")(x)
    x = L.Activation("sigmoid", name="bn_sigmoid")(x)  # fused into the BatchNormalization: a stage after it
    x = L.Activation("softplus", name="softplus_sa")(x)
    x = L.Dense(5, activation="relu", name="d4")(x)
    x = L.Activation(head, name="head")(x)  # standalone at the output: applied in Top
    return keras.Model(inp, x)


def test_a_table_read_gets_the_block_rams_output_register() -> None:
    """Every table activation's block RAM read is followed by a second register (its output
    register on ECP5): in an engine two more finish stages, the output register and one in
    the fabric (LayerPlan.table_regs, K2C.Engine's PipeDepth); K2C.Pipe.mapTable (two
    registers) standalone or after a merge or a BatchNormalization; none where the Top
    applies the output's activation."""
    from keras2clash.hw import blocks
    from keras2clash.network import load_network

    plans = {p.name: p for p in load_network(_mixed_model(1, 0.3, 1.0, 6.0, 0.1, "sigmoid"), "1,7,8").plans}
    assert {n: p.table_regs for n, p in plans.items() if p.is_compute and p.table_regs} == {"conv_tanh": 2, "d3": 2}
    assert plans["d2"].table_regs == 0 and plans["conv"].table_regs == 0  # softmax, linear
    assert plans["conv_tanh"].pipe_depth == replace(plans["conv_tanh"], activation="linear").pipe_depth + 2
    assert {n for n, p in plans.items() if blocks.stages_table(p)} == {"add", "bn"}
    tables = {
        n: blocks.map_depth(p)
        for n, p in plans.items()
        if blocks.has_map_stage(p) and blocks.is_table(p) and not p.top_activation
    }
    assert tables == {"at_input": 2, "elu_flat": 2, "add": 2, "gelu_sa": 2, "bn": 2, "softplus_sa": 2}
    assert plans["head"].top_activation and not plans["d4"].top_activation
    unpipelined = load_network(_mixed_model(1, 0.3, 1.0, 6.0, 0.1, "sigmoid"), "1,7,8", pipeline=0).plans
    assert not any(p.table_regs for p in unpipelined)


@needs_toolchain
@settings(
    max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate]
)
@given(
    seed=st.integers(0, 1000),
    slope=st.sampled_from([0.125, 0.3, 0.05]),
    alpha=st.sampled_from([1.0, 0.7]),
    cap=st.sampled_from([0.6, 6.0]),
    threshold=st.sampled_from([0.0, 0.1]),
    head=st.sampled_from(["sigmoid", "softmax", "exponential"]),
    fmt=st.sampled_from(["1,7,8", "1,4,7", "1,5,10"]),
)
def test_mixed_activations_bit_exact_in_clash(tmp_path_factory, seed, slope, alpha, cap, threshold, head, fmt) -> None:
    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.hw.plan import LayerFormats
    from keras2clash.verify import toolchain
    from keras2clash.verify.simulate import run_simulator

    model = _mixed_model(seed, slope, alpha, cap, threshold, head)
    out = tmp_path_factory.mktemp("act") / "net"
    api.emit(model, fmt, out, show=False, layer_formats={"hsilu": LayerFormats(output=FixedFormat(1, 3, 6))})
    project = load_project(out)
    assert {p.name: str(p.out_fmt) for p in project.plans}["hsilu"] == "1,3,6"
    assert {p.name: p.activation for p in project.plans if p.is_merge} == {"add": "tanh", "cat": "softmax"}
    rng = np.random.default_rng(seed)
    x_raw = golden.quantize_inputs(project.plans, rng.uniform(-3, 3, size=(8, 4, 4, 2)))
    want, classes = golden.predict(project.plans, project.params, x_raw)
    exe = toolchain.build_simulator(project.root)
    sim = run_simulator(exe, project.root, x_raw, project.n_out)
    assert np.array_equal(sim.outputs, want) and np.array_equal(sim.classes, classes)
    t = hwmodel.timing(project.plans, len(x_raw))
    assert np.array_equal(sim.accept_cycle, t.accept_cycle) and np.array_equal(sim.output_cycle, t.output_cycle)
    stressed = run_simulator(exe, project.root, x_raw, project.n_out, ["--gap-max", "4", "--seed", "1"])
    assert np.array_equal(stressed.outputs, want) and np.array_equal(stressed.classes, classes)


@needs_toolchain
def test_saturated_sigmoid_class_in_clash(tmp_path: Path) -> None:
    """The Clash simulation's class output is the argmax of the logits, not of the saturated
    sigmoid outputs (which tie)."""
    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.verify import toolchain
    from keras2clash.verify.simulate import run_simulator

    api.emit(_saturating_model(), "1,7,8", tmp_path / "net", show=False)
    project = load_project(tmp_path / "net")
    x_raw = golden.quantize_inputs(project.plans, np.array([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0], [0.1, 0.0, 0.0]]))
    want, classes = golden.predict(project.plans, project.params, x_raw)
    sim = run_simulator(toolchain.build_simulator(project.root), project.root, x_raw, project.n_out)
    assert np.array_equal(sim.outputs, want) and sim.classes.tolist() == classes.tolist() == [3, 4, 3]
