"""Keras LayerNormalization (`kinds.layernorm`, `K2C.LayerNorm`): the golden model against an
independent exact-rational statement of the contract, the rsqrt table's error bound, the
golden model against Keras float within the stated bound, the refusals, the hardware model's
figures, and the Clash simulation bit-exact with the golden model and the hardware model's
cycles."""

from __future__ import annotations

import math
from decimal import Decimal, getcontext
from fractions import Fraction

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from keras import layers

from helpers import assert_clash_matches_golden, needs_toolchain
from keras2clash.errors import K2CError
from keras2clash.frontend.convert import to_graph
from keras2clash.hw.hwmodel import timing, with_fifos
from keras2clash.hw.lanes import divisors
from keras2clash.hw.plan import LayerFormats
from keras2clash.hw.planner import make_plan
from keras2clash.kinds.layernorm import (
    LAYERNORM_DEPTH,
    LAYERNORM_LANES_DEPTH,
    LayerNorm,
    LayerNormKind,
    rsqrt_table,
    sizes,
)
from keras2clash.network import load_network
from keras2clash.quant import golden
from keras2clash.quant.formats import parse_format, quantize

SHAPES = [(5,), (1,), (3, 4), (2, 2, 6), (17,)]


def _model(shape: tuple[int, ...], seed: int, **options) -> keras.Model:
    """Input -> LayerNormalization, gamma and beta random (when the layer has them)."""
    inp = keras.Input(shape)
    norm = layers.LayerNormalization(name="ln", **options)
    model = keras.Model(inp, norm(inp))
    rng = np.random.default_rng(seed)
    norm.set_weights([rng.uniform(-2, 2, w.shape).astype("float32") for w in norm.get_weights()])
    return model


def _on_grid(model: keras.Model, fmt: str):
    """The network, and the Keras layer's gamma and beta replaced by their quantized values, so
    Keras computes on the constants the hardware stores."""
    net = load_network(model, fmt, fifos=False)
    plan = net.plans[0]
    norm = model.get_layer("ln")
    params = net.params["ln"]
    values = []
    if norm.scale:
        values.append(params.kernel * 2.0**-plan.w_fmt.raw_frac)
    if norm.center:
        values.append(params.bias * 2.0**-plan.b_fmt.raw_frac)
    norm.set_weights([v.astype("float32") for v in values])
    return net


# --- the contract in exact rationals -----------------------------------------------------------


def _round_half_up(v: Fraction) -> int:
    return math.floor(v + Fraction(1, 2))


def _contract(x_raw: np.ndarray, plan, params) -> np.ndarray:
    """docs/guide/contract.md, "Layer normalization", on one beat at a time, in Fractions:
    the mean and variance exact, the table read at the mantissa of u = C^3 2^(2f) (var + eps_q),
    the value gamma (x - mean) r' + beta (r' the table's sqrt(C / u) times the scale of d)
    rounded half up once and saturated."""
    c = x_raw.shape[-1]
    f = plan.in_fmt.raw_frac
    fw, fb, fo = plan.w_fmt.raw_frac, plan.b_fmt.raw_frac, plan.out_fmt.raw_frac
    epsilon = Fraction(plan.params.epsilon)
    grid = c**3 * 4**f
    eps_q = Fraction(_round_half_up(epsilon * grid), grid)
    n = min(10, max(8, plan.out_fmt.frac + 2))
    table = rsqrt_table(c, n)
    lo, hi = -(1 << (plan.out_fmt.hw_bits - 1)), (1 << (plan.out_fmt.hw_bits - 1)) - 1
    out = np.zeros(x_raw.shape, dtype=np.int64)
    for pos in np.ndindex(x_raw.shape[:-1]):
        x = [Fraction(int(v), 1 << f) for v in x_raw[pos]]
        mean = sum(x) / c
        var = sum((v - mean) ** 2 for v in x) / c
        u = grid * (var + eps_q)  # an integer: C^3 2^(2f) var = sum d_i^2
        assert u.denominator == 1
        if u == 0:
            r = Fraction(0)
        else:
            h = 0
            while u >= 4**h:
                h += 1
            j = math.floor(u / 4**h * 2**n) - 2 ** (n - 2)
            r = Fraction(table.values[j], 2**table.frac) / 2**h  # ~ sqrt(C / u)
        for i in range(c):
            d = c * (x[i] - mean) * 2**f  # an integer
            value = Fraction(int(params.kernel[i]), 2**fw) * d * r + Fraction(int(params.bias[i]), 2**fb)
            out[(*pos, i)] = min(hi, max(lo, _round_half_up(value * 2**fo)))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    shape=st.sampled_from(SHAPES),
    fmt=st.sampled_from(["1,7,8", "1,3,6", "1,5,10", "1,9,4"]),
    epsilon=st.sampled_from([1e-3, 1e-5, 0.0, 0.1, 1.0, 3e-7]),
    spread=st.sampled_from([0.0, 0.01, 1.0, 8.0]),
    seed=st.integers(0, 2**16),
)
def test_golden_equals_the_contract_in_rationals(shape, fmt, epsilon, spread, seed) -> None:
    """The golden model on random beats (equal values and tiny spreads included, eps = 0
    making u = 0) equals the contract computed in Fractions, bit for bit."""
    model = _model(shape, seed, epsilon=epsilon)
    net = load_network(model, fmt, fifos=False)
    plan = net.plans[0]
    rng = np.random.default_rng(seed)
    x = rng.normal(rng.uniform(-2, 2), spread, size=(4, *shape))
    x_raw = golden.quantize_inputs(net.plans, x)
    got = golden.run_all(net.plans, net.params, x_raw)["ln"]
    assert np.array_equal(got, _contract(x_raw.reshape(got.shape), plan, net.params["ln"]))


def test_equal_values_give_beta_exactly() -> None:
    """With epsilon 0 a beat of equal values has u = 0: every output is beta."""
    model = _model((6,), 3, epsilon=0.0)
    net = load_network(model, "1,7,8", fifos=False)
    x_raw = np.full((2, 6), 77)
    assert sizes(net.plans[0]).e == 0
    got = golden.run(net.plans, net.params, x_raw)
    want = quantize(net.params["ln"].bias * 2.0 ** -net.plans[0].b_fmt.raw_frac, net.plans[0].out_fmt)
    assert np.array_equal(got, np.broadcast_to(want, got.shape))


# --- the table ------------------------------------------------------------------------------


@pytest.mark.parametrize(("channels", "n"), [(1, 8), (5, 9), (16, 10), (64, 10), (1000, 10)])
def test_table_error_is_within_its_bound(channels, n) -> None:
    """rho bounds |T[j] 2^-R / sqrt(C / m) - 1| at each bucket's ends and at random mantissas
    inside (in 40-digit decimals), and is about 2^-N (the bucket's), the entries' rounding a
    small part of it."""
    getcontext().prec = 40
    t = rsqrt_table(channels, n)
    assert len(t.values) == 3 * 2 ** (n - 2) and t.frac == n + 3
    rng = np.random.default_rng(channels)
    worst = Decimal(0)
    root_c = Decimal(channels).sqrt()
    for j, value in enumerate(t.values):
        low = Decimal(j + 2 ** (n - 2)) / Decimal(2**n)
        points = [low, low + Decimal(1) / Decimal(2**n) - Decimal(10) ** -30]
        points += [low + Decimal(float(rng.uniform())) / Decimal(2**n) for _ in range(2)]
        for m in points:
            err = abs(Decimal(value) / Decimal(2**t.frac) * m.sqrt() / root_c - 1)
            worst = max(worst, err)
    assert float(worst) <= t.rho
    assert t.rho < 1.1 * 2.0**-n and t.rho > 0.9 * 2.0**-n


# --- against Keras float ------------------------------------------------------------------------


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    shape=st.sampled_from(SHAPES),
    fmt=st.sampled_from(["1,7,8", "1,5,10", "1,3,12"]),
    epsilon=st.sampled_from([1e-3, 1e-5, 0.1, 1.0]),
    center=st.booleans(),
    scale=st.booleans(),
    spread=st.sampled_from([0.05, 0.5, 2.0]),
    seed=st.integers(0, 2**16),
)
def test_golden_close_to_keras(shape, fmt, epsilon, center, scale, spread, seed) -> None:
    """On inputs on the input grid and Keras' gamma and beta on theirs, the golden model is
    within the stated bound of Keras float (the table's |gamma| sqrt(C - 1) rho plus half an
    output LSB), plus what epsilon's quantization to the grid changes, plus Keras' float32
    rounding; the float model (float_step) is Keras'."""
    model = _model(shape, seed, epsilon=epsilon, center=center, scale=scale)
    net = _on_grid(model, fmt)
    plan = net.plans[0]
    rng = np.random.default_rng(seed)
    x_raw = golden.quantize_inputs(net.plans, rng.normal(rng.uniform(-1, 1), spread, size=(16, *shape)))
    x = x_raw * 2.0**-plan.in_fmt.raw_frac
    want = np.asarray(model(x.astype("float32")), dtype=np.float64)
    kind = LayerNormKind()
    layer = net.graph["ln"]
    assert isinstance(layer, LayerNorm)
    constants = (net.params["ln"].kernel * 2.0**-plan.w_fmt.raw_frac, net.params["ln"].bias * 2.0**-plan.b_fmt.raw_frac)
    pre, _ = kind.float_step(layer, [x.reshape(want.shape)], constants)
    assert pre is not None and np.allclose(pre, want, atol=2e-5 * max(1.0, float(np.max(np.abs(want)))))
    got = golden.run_all(net.plans, net.params, x_raw)["ln"].reshape(want.shape) * 2.0**-plan.out_fmt.raw_frac
    # epsilon on the grid: the same float formula with eps_q
    s = sizes(plan)
    eps_q = s.e / (shape[-1] ** 3 * 4.0**plan.in_fmt.raw_frac)
    pre_q, _ = kind.float_step(LayerNorm(**{**_fields(layer), "epsilon": eps_q}), [x.reshape(want.shape)], constants)
    assert pre_q is not None
    out = plan.out_fmt
    lo, hi = -(2.0**out.int), 2.0**out.int - 2.0**-out.frac
    lsb = 2.0**-out.frac
    bound = s.table.error_bound(plan.params.gamma_max, lsb)
    assert np.all(np.abs(got - np.clip(pre_q, lo, hi)) <= bound + 1e-9)
    slack = np.abs(pre_q - pre) + 2e-5 * max(1.0, float(np.max(np.abs(want))))
    assert np.all(np.abs(got - np.clip(want, lo, hi)) <= bound + slack)


def _fields(layer: LayerNorm) -> dict:
    from dataclasses import fields

    return {f.name: getattr(layer, f.name) for f in fields(layer)}


# --- the frontend -------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 1, 2, 3])
def test_last_axis_by_any_name(axis) -> None:
    """axis=-1 or the last axis' positive index, on a vector, a sequence and an image."""
    shape = {1: (4,), 2: (3, 4), 3: (2, 2, 4)}.get(axis, (4,))
    graph = to_graph(_model(shape, 1, axis=axis))
    record = graph["ln"]
    assert isinstance(record, LayerNorm) and record.gamma.shape == record.beta.shape == (4,)


def test_center_and_scale_off() -> None:
    record = to_graph(_model((3,), 2, center=False, scale=False, epsilon=0.25))["ln"]
    assert isinstance(record, LayerNorm) and record.epsilon == 0.25
    assert np.array_equal(record.gamma, np.ones(3)) and np.array_equal(record.beta, np.zeros(3))


def _refusal(build) -> str:
    with pytest.raises(K2CError) as info:
        to_graph(build())
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("shape", "options", "words"),
    [
        ((3, 4), {"axis": 1}, "normalizes axis 1"),
        ((3, 4), {"axis": -2}, "normalizes axis -2"),
        ((2, 3, 4), {"axis": [1, 2]}, "normalizes axis [1, 2]"),
        ((2, 3, 4), {"axis": [-2, -1]}, "normalizes axis [-2, -1]"),
        ((4,), {"rms_scaling": True}, "rms_scaling=True"),
    ],
)
def test_refusals_name_the_layer_and_the_setting(shape, options, words) -> None:
    inp = keras.Input(shape)
    message = _refusal(lambda: keras.Model(inp, layers.LayerNormalization(name="ln", **options)(inp)))
    assert message.startswith("LayerNormalization layer 'ln' ") and words in message


def test_accumulator_format_is_refused() -> None:
    graph = to_graph(_model((4,), 0))
    with pytest.raises(K2CError, match=r"^layer 'ln' \(layernorm\) computes its value exactly"):
        make_plan(graph, parse_format("1,7,8"), layer_formats={"ln": LayerFormats(accumulator_bits=40)})


# --- the hardware model ---------------------------------------------------------------------------


def test_hardware_figures() -> None:
    """The 18x18 multipliers of the limbs' products, the table's bits, the gamma and beta bits,
    the depth the emitted project checks against LayerNormDepth."""
    net = load_network(_model((3, 8), 0), "1,7,8", fifos=False)
    plan = net.plans[0]
    kind = LayerNormKind()
    s = sizes(plan)
    # per channel d^2: 2x2 limbs (d has 16 + 3 + 1 bits), gamma d: 1x2, its shifted copy times the entry: 3x1
    assert (s.bd, plan.w_fmt.hw_bits, s.table.entry_bits) == (20, 16, 17) and s.hm == 21
    assert plan.multipliers == 8 * (4 + 2 + 3)
    assert kind.storage(plan).table_bits == 768 * s.table.entry_bits
    assert kind.rom_bits(plan) == 8 * (plan.w_fmt.hw_bits + plan.b_fmt.hw_bits)
    (depth,) = kind.depths(plan)
    assert depth.value == LAYERNORM_DEPTH and depth.type == "LayerNorm.LayerNormDepth"
    # two lanes: per lane x^2 1x1, gamma d 1x2, the product with the entry 3x1; S^2 2x2 once
    serial = kind.with_lanes(plan, 2)
    assert (serial.channel_lanes, serial.lane_chunks) == (2, 4)
    assert serial.multipliers == 2 * (1 + 2 + 3) + 4
    (depth,) = kind.depths(serial)
    assert depth.value == LAYERNORM_LANES_DEPTH and depth.type == "LayerNorm.LayerNormLanesDepth"
    assert kind.storage(serial).register_bits < kind.storage(plan).register_bits


def test_serial_beat_takes_two_passes() -> None:
    """A serial layer takes a beat every 2 C / lanes + 1 cycles (its Scatter of both passes):
    three positions of 8 channels at 2 lanes, back to back, are accepted 9 cycles apart."""
    net = load_network(_model((3, 8), 0), "1,7,8", fifos=False)
    plans = with_fifos([net.plans[0].kind.with_lanes(net.plans[0], 2)])
    t = timing(plans, 2)
    assert t.ii == 3 * 9


def test_budget_counts_serial_layers() -> None:
    """Under a multiplier budget a LayerNormalization that whole would not fit is serial, and
    the design keeps to the budget."""
    model = _network("sequence", 8, 6, None, 3)
    full = load_network(model, "1,7,8")
    assert full.plans[0].multipliers == 8 * 9
    net = load_network(model, "1,7,8", dsp_budget=40)
    (ln,) = [p for p in net.plans if p.type == "layernorm"]
    assert ln.params.lanes in divisors(8)[:-1]
    assert sum(p.multipliers for p in net.plans) <= 40
    with pytest.raises(K2CError, match="multiplier budget 40 too small"):
        load_network(model, "1,7,8", dsp_budget=40, lanes="full")


# --- the Clash simulation --------------------------------------------------------------------------

CLASH = settings(
    max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate]
)  # no shrinking: each example builds Clash


def _network(case: str, channels: int, steps: int, act: str | None, seed: int) -> keras.Model:
    """A vector model (Dense -> LayerNormalization -> Dense) or a sequence model
    (LayerNormalization per step -> Flatten -> Dense), an activation layer after the
    normalization when `act` (fused into it)."""
    rng = np.random.default_rng(seed)
    if case == "vector":
        inp = keras.Input((5,))
        x = layers.Dense(channels, name="d1")(inp)
    else:
        inp = keras.Input((steps, channels))
        x = inp
    x = layers.LayerNormalization(name="ln", epsilon=float(rng.choice([1e-3, 1e-2, 1e-5])))(x)
    if act is not None:
        x = layers.Activation(act, name="act")(x)
    if case != "vector":
        x = layers.Flatten(name="flat")(x)
    model = keras.Model(inp, layers.Dense(3, name="out")(x))
    model.set_weights([rng.uniform(-0.8, 0.8, w.shape).astype("float32") for w in model.get_weights()])
    return model


def _bit_exact(tmp_path, case, channels, steps, act, fmt, seed, lanes=0) -> None:
    """`lanes`: the layer's (0: a whole beat a cycle)."""
    from dataclasses import replace

    from keras2clash import api
    from keras2clash.backend.project import load_project

    model = _network(case, channels, steps, act, seed)
    out = tmp_path / "net"
    out.mkdir()
    network = load_network(model, fmt)
    plans = with_fifos([p.kind.with_lanes(p, lanes) if p.type == "layernorm" else p for p in network.plans])
    api._write_project(replace(network, plans=plans), out, None, show=False)
    project = load_project(out)
    assert "layernorm" in [p.type for p in project.plans]
    block = "LayerNorm.layerNormLanes @" if lanes else "LayerNorm.layerNorm @"
    assert block in (out / "Network.hs").read_text()
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1.5, size=(6, *model.input_shape[1:]))
    assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), seed)


@needs_toolchain
def test_bit_exact_in_clash(tmp_path) -> None:
    """A sequence model: the Clash simulation equals the golden model, back to back and under
    stalls, with the hardware model's cycles."""
    _bit_exact(tmp_path, "sequence", 6, 3, None, "1,7,8", 5)


@needs_toolchain
def test_serial_bit_exact_in_clash(tmp_path) -> None:
    """Two lanes of eight channels: the same values, with the serial block's cycles."""
    _bit_exact(tmp_path, "sequence", 8, 3, "relu", "1,7,8", 12, lanes=2)


@pytest.mark.slow
@needs_toolchain
@CLASH
@given(
    case=st.sampled_from(["vector", "sequence"]),
    channels=st.integers(1, 12),
    steps=st.integers(1, 4),
    act=st.sampled_from([None, "relu", "tanh"]),
    fmt=st.sampled_from(["1,7,8", "1,5,10", "1,3,6", "1,4,4,trn,wrap"]),
    seed=st.integers(0, 10_000),
    pick=st.integers(0, 5),
)
def test_random_models_bit_exact_in_clash(tmp_path_factory, case, channels, steps, act, fmt, seed, pick) -> None:
    """Any lanes (`pick` among the divisors of the channels: all of them a whole beat)."""
    if "wrap" in fmt and act == "tanh":
        act = "relu"  # a truncating, wrapping format takes a linear or relu activation only
    options = divisors(channels)
    lanes = options[pick % len(options)]
    _bit_exact(tmp_path_factory.mktemp("ln"), case, channels, steps, act, fmt, seed, 0 if lanes == channels else lanes)


@needs_toolchain
def test_verilog_bit_exact_in_verilator(tmp_path) -> None:
    """The Verilog (the table a block RAM read from its memory file) equals the golden model in
    Verilator, under random gaps and stalls."""
    from keras2clash import api
    from keras2clash.verify import rtlsim

    model = _network("sequence", 7, 3, "tanh", seed=8)
    out = tmp_path / "net"
    api.emit(model, "1,7,8", out, show=False)
    x = np.random.default_rng(5).normal(0, 1.5, size=(6, 3, 7))
    np.savez(tmp_path / "data.npz", x_test=x, y_test=np.zeros(6, dtype=int))
    result = rtlsim.rtlsim(out, tmp_path / "data.npz", "verilator", gap_max=3, seed=2)
    assert result.ok and len(result.samples) == 6
