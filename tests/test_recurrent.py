"""Recurrent layers (`kinds.recurrent`): SimpleRNN, LSTM and GRU, their state fed back.

The golden model's step is checked against an exact rational reference and against Keras'
own float output; random recurrent models (steps, features, units, stacking, every step's
state or the last, activations, formats, knobs) are bit-exact in the Clash simulation with
the hardware model's cycles, also under gaps and stalls, and in Verilator; what stays refused
gets one error line naming the layer and the setting.
"""

from __future__ import annotations

from fractions import Fraction

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from keras import layers

from helpers import assert_clash_matches_golden, needs_toolchain
from keras2clash.errors import K2CError
from keras2clash.hw import hwmodel
from keras2clash.network import load_network
from keras2clash.quant import activations, golden
from keras2clash.quant.formats import parse_format

ACTIVATIONS = ("tanh", "sigmoid", "hard_sigmoid", "relu", "linear")


def _randomize(model: keras.Model, seed: int, scale: float = 0.5) -> keras.Model:
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        weights = layer.get_weights()
        if weights:
            layer.set_weights([rng.uniform(-scale, scale, w.shape).astype("float32") for w in weights])
    return model


RECURRENT = {
    "simple": lambda u, act, gate, **kw: layers.SimpleRNN(u, activation=act, **kw),
    "lstm": lambda u, act, gate, **kw: layers.LSTM(u, activation=act, recurrent_activation=gate, **kw),
    "gru": lambda u, act, gate, **kw: layers.GRU(u, activation=act, recurrent_activation=gate, **kw),
    "gru_before": lambda u, act, gate, **kw: layers.GRU(
        u, activation=act, recurrent_activation=gate, reset_after=False, **kw
    ),
}


def _rnn_model(
    steps: int,
    features: int,
    units: tuple[int, ...],
    sequences: tuple[bool, ...],
    act: str,
    seed: int,
    scale: float = 0.5,
    kind: str = "simple",
    gate: str = "sigmoid",
):
    """Input (steps, features) -> a recurrent layer of `kind` per unit count -> (Flatten) ->
    Dense(3), weights uniform in [-scale, scale]."""
    inp = keras.Input((steps, features))
    x = inp
    for k, (u, seq) in enumerate(zip(units, sequences)):
        x = RECURRENT[kind](u, act, gate, return_sequences=seq, name=f"rnn{k}")(x)
    if len(x.shape) == 3:
        x = layers.Flatten(name="flat")(x)
    return _randomize(keras.Model(inp, layers.Dense(3, name="out")(x)), seed, scale)


def _reference(x_raw: np.ndarray, kernel, recurrent, bias, frac: int, act) -> list[list[int]]:
    """The contract's step on exact rationals, raw in and out (`frac` fraction bits, an output
    format wide enough not to saturate): h_t = act(floor((W x_t + U h_(t-1) + b) * 2^frac + 1/2))."""
    one = 2**frac
    h = [Fraction(0)] * len(bias)
    states = []
    for xt in x_raw:
        x = [Fraction(int(v), one) for v in xt]
        pre = [
            sum((a * w for a, w in zip(x, kernel[:, j])), Fraction(0))
            + sum((a * w for a, w in zip(h, recurrent[:, j])), Fraction(0))
            + bias[j]
            for j in range(len(bias))
        ]
        h = [act(Fraction((p * one + Fraction(1, 2)).__floor__(), one)) for p in pre]
        states.append([int(v * one) for v in h])
    return states


@pytest.mark.parametrize("act", ["linear", "relu"])
def test_step_equals_exact_rationals(act) -> None:
    """linear and relu: every state is the rounding of the exact sum of the input and the
    previous state (itself rounded), one rounding per step and none on the feedback."""
    fmt = parse_format("1,9,12")
    model = _rnn_model(5, 3, (4,), (True,), act, seed=3)
    plans = load_network(model, str(fmt), fifos=False).plans
    rnn = plans[0]
    params = golden.quantize_params(plans)["rnn0"]
    x = np.random.default_rng(1).integers(-3000, 3000, size=(4, 5, 3))
    got = golden.layer(rnn, {"rnn0": params}, [x.reshape(4, 1, 5, 3)])
    kernel = [[Fraction(int(w), 2**rnn.w_fmt.frac) for w in row] for row in np.asarray(params.kernel)]
    bias = [Fraction(int(b), 2**rnn.b_fmt.frac) for b in np.asarray(params.bias)]
    k, u = np.asarray(kernel[:3], dtype=object), np.asarray(kernel[3:], dtype=object)
    relu = (lambda v: max(v, Fraction(0))) if act == "relu" else (lambda v: v)
    for n in range(len(x)):
        assert got[n].reshape(5, 4).tolist() == _reference(x[n], k, u, bias, fmt.frac, relu)


def _round(v: Fraction, frac: int) -> Fraction:
    """One rounding to nearest, ties up, at `frac` fraction bits (no saturation: wide formats)."""
    return Fraction((v * 2**frac + Fraction(1, 2)).__floor__(), 2**frac)


def _hard_sigmoid(v: Fraction, frac: int) -> Fraction:
    return _round(min(max((v + 3) / 6, Fraction(0)), Fraction(1)), frac)


def _gated_reference(kind: str, x_raw, kernel, bias, units: int, frac: int, act) -> list[list[int]]:
    """LSTM or GRU (gate hard_sigmoid) on exact rationals, raw in and out: every gate sum
    rounded once to the output format, each activation, product sum and state rounded once.
    A reset-before GRU's candidate sum is on the window x_t ++ round(r * h_(t-1))."""
    one = 2**frac
    h, c = [Fraction(0)] * units, [Fraction(0)] * units
    states = []

    def sums(x, state):
        window = x + state
        return [
            _round(sum((a * w for a, w in zip(window, kernel[:, j])), Fraction(0)) + bias[j], frac)
            for j in range(len(bias))
        ]

    for xt in x_raw:
        x = [Fraction(int(v), one) for v in xt]
        z = sums(x, h)
        g = [z[k * units : (k + 1) * units] for k in range(len(bias) // units)]
        if kind == "gru_before":
            zg, r = ([_hard_sigmoid(v, frac) for v in g[k]] for k in (0, 1))
            cand = [act(v) for v in sums(x, [_round(rv * hv, frac) for rv, hv in zip(r, h)])[2 * units :]]
            h = [_round(zv * hp + (1 - zv) * cv, frac) for zv, hp, cv in zip(zg, h, cand)]
        elif kind == "lstm":
            i, f, o = ([_hard_sigmoid(v, frac) for v in g[k]] for k in (0, 1, 3))
            c = [_round(fv * cv + iv * act(cand), frac) for fv, cv, iv, cand in zip(f, c, i, g[2])]
            h = [_round(ov * act(cv), frac) for ov, cv in zip(o, c)]
        else:
            zg, r = ([_hard_sigmoid(v, frac) for v in g[k]] for k in (0, 1))
            cand = [act(_round(xv + rv * hv, frac)) for xv, rv, hv in zip(g[2], r, g[3])]
            h = [_round(zv * hp + (1 - zv) * cv, frac) for zv, hp, cv in zip(zg, h, cand)]
        states.append([int(v * one) for v in h])
    return states


@pytest.mark.parametrize("kind", ["lstm", "gru", "gru_before"])
@pytest.mark.parametrize("act", ["linear", "relu"])
def test_gated_step_equals_exact_rationals(kind, act) -> None:
    """LSTM and GRU with exact activations (hard_sigmoid gates): the engine's sums rounded
    once per gate, the cell's products exact and each new value rounded once; the GRU's
    window matrix holds the candidate's input and recurrent parts apart; the reset-before
    GRU's r * h_(t-1) is rounded once and its candidate's whole sum once."""
    fmt = parse_format("1,9,12")
    model = _rnn_model(5, 3, (4,), (True,), act, seed=3, kind=kind, gate="hard_sigmoid")
    plans = load_network(model, str(fmt), fifos=False).plans
    rnn = plans[0]
    params = golden.quantize_params(plans)["rnn0"]
    x = np.random.default_rng(1).integers(-3000, 3000, size=(3, 5, 3))
    got = golden.layer(rnn, {"rnn0": params}, [x.reshape(3, 1, 5, 3)])
    kernel = np.asarray(
        [[Fraction(int(w), 2**rnn.w_fmt.frac) for w in row] for row in np.asarray(params.kernel)], dtype=object
    )
    bias = [Fraction(int(b), 2**rnn.b_fmt.frac) for b in np.asarray(params.bias)]
    relu = (lambda v: max(v, Fraction(0))) if act == "relu" else (lambda v: v)
    for n in range(len(x)):
        assert got[n].reshape(5, 4).tolist() == _gated_reference(kind, x[n], kernel, bias, 4, fmt.frac, relu)


def test_gru_window_matrix_keeps_the_candidates_parts_apart() -> None:
    """The GRU's stacked constants: z and r read the whole window with the input's and the
    recurrent bias summed; x_h reads only x_t, r_h only h_(t-1)."""
    from keras2clash.registry import kind_of

    model = _rnn_model(3, 2, (3,), (False,), "tanh", seed=5, kind="gru")
    keras_gru = model.get_layer("rnn0")
    kernel, recurrent, bias = (np.asarray(w, dtype=np.float64) for w in keras_gru.get_weights())
    layer = load_network(model, "1,7,8", fifos=False).plans[0].layer
    matrix, b = kind_of("gru").constants(layer)
    assert matrix.shape == (5, 12) and b.shape == (12,)
    np.testing.assert_array_equal(matrix[:2, :9], kernel)
    np.testing.assert_array_equal(matrix[:2, 9:], 0)
    np.testing.assert_array_equal(matrix[2:, :6], recurrent[:, :6])
    np.testing.assert_array_equal(matrix[2:, 6:9], 0)
    np.testing.assert_array_equal(matrix[2:, 9:], recurrent[:, 6:])
    np.testing.assert_allclose(b, np.concatenate([bias[0, :6] + bias[1, :6], bias[0, 6:], bias[1, 6:]]))


@pytest.mark.parametrize("kind", ["simple", "lstm", "gru", "gru_before"])
@pytest.mark.parametrize("sequences", [True, False])
def test_float_model_is_keras(kind, sequences) -> None:
    """The float model the formats are fitted on (`float_step`) is Keras' layer in float64;
    a reset-before GRU's sums are z's and r's on x_t ++ h_(t-1) and the candidate's on
    x_t ++ r * h_(t-1)."""
    from keras2clash.registry import kind_of

    model = _rnn_model(6, 3, (5,), (sequences,), "tanh", seed=2, kind=kind)
    plan = load_network(model, "1,7,8", fifos=False).plans[0]
    x = np.random.default_rng(0).uniform(-1, 1, (4, 6, 3))
    pre, out = kind_of(plan.type).float_step(plan.layer, [x.reshape(4, 1, 6, 3)], None)
    want = keras.Model(model.inputs, model.get_layer("rnn0").output).predict(x, verbose=0)
    assert pre is not None and pre.shape == (4, 6, plan.filters)
    np.testing.assert_allclose(out.reshape(want.shape), want, atol=1e-5)


def test_gru_reset_before_constants_are_keras_stacked() -> None:
    """A reset-before GRU's engine reads Keras' kernel stacked over its recurrent kernel and
    Keras' bias (z, r, the candidate): both of its passes use them whole."""
    from keras2clash.registry import kind_of

    model = _rnn_model(3, 2, (3,), (False,), "tanh", seed=5, kind="gru_before")
    kernel, recurrent, bias = (np.asarray(w, dtype=np.float64) for w in model.get_layer("rnn0").get_weights())
    plan = load_network(model, "1,7,8", fifos=False).plans[0]
    assert plan.type == "gru_reset_before" and plan.filters == 9 and plan.window == 5
    matrix, b = kind_of(plan.type).constants(plan.layer)
    np.testing.assert_array_equal(matrix, np.concatenate([kernel, recurrent]))
    np.testing.assert_array_equal(b, bias)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    steps=st.integers(1, 8),
    features=st.integers(1, 4),
    units=st.integers(1, 6),
    sequences=st.booleans(),
    act=st.sampled_from(ACTIVATIONS),
    seed=st.integers(0, 9999),
)
def test_golden_close_to_keras(steps, features, units, sequences, act, seed) -> None:
    """At 1,7,16 the golden model is Keras' float model within the errors its contract
    states: the activation's own (the table's), and one output rounding, per step, carried
    through the recurrent kernel."""
    scale = 0.9 / (features + units)  # every |pre-activation| < 1: no saturation anywhere
    model = _rnn_model(steps, features, (units,), (sequences,), act, seed, scale)
    fmt = parse_format("1,7,16")
    plans = load_network(model, str(fmt), fifos=False).plans
    rnn = plans[0]
    x = np.random.default_rng(seed).uniform(-1, 1, (16, steps, features))
    raw = golden.run_all(plans, golden.quantize_params(plans), golden.quantize_inputs(plans, x))["rnn0"]
    got = raw / 2.0**fmt.frac
    want = keras.Model(model.inputs, model.get_layer("rnn0").output).predict(x, verbose=0)
    table = activations.table(rnn.activation, fmt, fmt).max_error if rnn.table_activation else 0.0
    lsb = 2.0**-fmt.frac
    # a step's own error: the inputs' and weights' rounding (half an LSB each, |x|, |w| <= 1),
    # the output's rounding, the table's; the slope of every activation here is <= 1 and the
    # recurrent kernel's row sums are <= 0.9, so an error reaching the state shrinks each step
    per_step = lsb * (features + units + 1) + lsb / 2 + table
    bound = per_step * steps + 1e-6
    assert np.max(np.abs(got.reshape(want.shape) - want)) <= bound


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    kind=st.sampled_from(["lstm", "gru"]),
    steps=st.integers(1, 8),
    features=st.integers(1, 4),
    units=st.integers(1, 5),
    sequences=st.booleans(),
    seed=st.integers(0, 9999),
)
def test_gated_golden_close_to_keras(kind, steps, features, units, sequences, seed) -> None:
    """At 1,7,16 an LSTM or GRU (tanh, sigmoid) is Keras' within a step's own errors (the
    gates' and the cell's table errors and roundings) times the steps: the gates are below 1
    and the weights small, so an error does not grow through the recurrence."""
    scale = 0.9 / (features + units)
    model = _rnn_model(steps, features, (units,), (sequences,), "tanh", seed, scale, kind=kind)
    fmt = parse_format("1,7,16")
    plans = load_network(model, str(fmt), fifos=False).plans
    x = np.random.default_rng(seed).uniform(-1, 1, (16, steps, features))
    raw = golden.run_all(plans, golden.quantize_params(plans), golden.quantize_inputs(plans, x))["rnn0"]
    got = raw / 2.0**fmt.frac
    want = keras.Model(model.inputs, model.get_layer("rnn0").output).predict(x, verbose=0)
    tables = sum(activations.table(f, fmt, fmt).max_error for f in ("tanh", "sigmoid"))
    lsb = 2.0**-fmt.frac
    per_step = 2 * tables + lsb * (features + units + 8)  # two tables on a path, the roundings
    assert np.max(np.abs(got.reshape(want.shape) - want)) <= per_step * steps + 1e-6


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    steps=st.integers(1, 8),
    features=st.integers(1, 4),
    units=st.integers(1, 6),
    sequences=st.booleans(),
    act=st.sampled_from(ACTIVATIONS),
    gate=st.sampled_from(["sigmoid", "hard_sigmoid"]),
    seed=st.integers(0, 9999),
)
def test_gru_reset_before_golden_close_to_keras(steps, features, units, sequences, act, gate, seed) -> None:
    """At 1,7,16 a GRU with reset_after=False is Keras' within a step's own errors times the
    steps (docs/guide/contract.md): those of the reset-after GRU, the rounding of r * h_(t-1)
    carried through U_h (below half an LSB: its row sums are below 1), and the reset gate's
    table error carried the same way."""
    scale = 0.9 / (features + units)
    model = _rnn_model(steps, features, (units,), (sequences,), act, seed, scale, kind="gru_before", gate=gate)
    fmt = parse_format("1,7,16")
    plans = load_network(model, str(fmt), fifos=False).plans
    x = np.random.default_rng(seed).uniform(-1, 1, (16, steps, features))
    raw = golden.run_all(plans, golden.quantize_params(plans), golden.quantize_inputs(plans, x))["rnn0"]
    got = raw / 2.0**fmt.frac
    want = keras.Model(model.inputs, model.get_layer("rnn0").output).predict(x, verbose=0)
    tables = sum(
        activations.table(f, fmt, fmt).max_error for f in (act, gate) if activations.parse(f).family == "table"
    )
    lsb = 2.0**-fmt.frac
    per_step = 2 * tables + lsb * (features + units + 9)
    assert np.max(np.abs(got.reshape(want.shape) - want)) <= per_step * steps + 1e-6


CLASH = settings(
    max_examples=9, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate]
)  # no shrinking: each example builds Clash


def _random_knobs_bit_exact(tmp_path, model, fmt: str, seed: int) -> None:
    """`model` with random processing elements, cycles and pipeline levels per compute layer:
    the Clash simulation equals the golden model on five random sequences, with the hardware
    model's cycles."""
    from keras2clash import api
    from keras2clash.backend.project import load_project

    rng = np.random.default_rng(seed)
    compute = [p for p in load_network(model, fmt, fifos=False).plans if p.is_compute]
    pes = [int(rng.integers(1, p.filters + 1)) for p in compute]
    cycles = [int(rng.integers(1, min(p.window, 4) + 1)) for p in compute]
    pipeline = ",".join(str(int(rng.integers(0, 3))) for _ in compute)
    out = tmp_path / "net"
    api.emit(model, fmt, out, pes, cycles=cycles, pipeline=pipeline, show=False)
    project = load_project(out)
    x = rng.uniform(-1.5, 1.5, size=(5, *model.input_shape[1:]))
    assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), seed)


@needs_toolchain
@CLASH
@given(
    kind=st.sampled_from(["simple", "lstm", "gru"]),
    steps=st.integers(1, 6),
    features=st.integers(1, 4),
    units=st.lists(st.integers(1, 8), min_size=1, max_size=2),
    last_sequences=st.booleans(),
    act=st.sampled_from(ACTIVATIONS),
    gate=st.sampled_from(["sigmoid", "hard_sigmoid", "linear"]),
    fmt=st.sampled_from(["1,5,10", "1,3,6", "1,4,4,trn,wrap"]),
    seed=st.integers(0, 10_000),
)
def test_random_recurrent_models_bit_exact_in_clash(
    tmp_path_factory, kind, steps, features, units, last_sequences, act, gate, fmt, seed
) -> None:
    if "wrap" in fmt and kind != "simple":
        fmt = "1,4,4"  # a gated cell rounds to nearest and saturates
    if "wrap" in fmt and act not in ("relu", "linear"):
        act = "relu"  # a truncating, wrapping format takes a linear or relu activation only
    sequences = (*([True] * (len(units) - 1)), last_sequences)
    model = _rnn_model(steps, features, tuple(units), sequences, act, seed, kind=kind, gate=gate)
    _random_knobs_bit_exact(tmp_path_factory.mktemp("rnn"), model, fmt, seed)


def test_a_reset_before_gru_step_is_two_passes() -> None:
    """A reset-before GRU's time step is two passes, each the engine's S + D + 2 cycles and
    its cell's (chunks scattered one a cycle, six registers, collected: chunks + 8); the
    repeated input beat waits for nothing with the input always there."""
    model = _rnn_model(5, 3, (6,), (True,), "tanh", seed=1, kind="gru_before")
    plans = load_network(model, "1,7,8", fifos=False).plans
    rnn = plans[0]
    assert rnn.filters == 18 and rnn.params.cell_lanes == 3 and rnn.windows_per_image == 10
    t = hwmodel.timing(plans, 3)
    assert t.ii == 5 * 2 * (rnn.steps + rnn.pipe_depth + 2 + 6 // 3 + 8)


def test_a_step_takes_the_engines_steps_depth_and_two() -> None:
    """With downstream always ready a step is S + D + 2 cycles and a sequence steps times
    that: the interval between sequences."""
    model = _rnn_model(6, 3, (4,), (False,), "tanh", seed=1)
    plans = load_network(model, "1,7,8", fifos=False).plans
    rnn = plans[0]
    t = hwmodel.timing(plans, 3)
    period = rnn.steps + rnn.pipe_depth + 2
    assert np.all(np.diff(t.output_cycle) == 6 * period) and t.ii == 6 * period


def test_cell_products_are_multipliers() -> None:
    """A gated cell's three products a lane are multipliers beside the engine: digits_lstm's
    LSTM has 32 in its engine and 3 x 4 in its cell, the design 68 in all (the MULT18X18D
    blocks placed on the LFE5U-85F, bench/fpga.json); a budget counts them as fixed."""
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "digits_lstm" / "digits_lstm.keras"
    plans = load_network(path, "1,7,8", fifos=False).plans
    lstm = plans[0]
    assert lstm.params.cell_lanes == 4 and lstm.fixed_multipliers == 12
    assert lstm.multipliers == 32 + 12 and sum(p.multipliers for p in plans) == 68
    within = load_network(path, "1,7,8", dsp_budget=40).plans
    assert sum(p.multipliers for p in within) <= 40
    with pytest.raises(K2CError, match=r"at least 14 \(.* and 12 in lstm beside its engine\)"):
        load_network(path, "1,7,8", dsp_budget=13)


@needs_toolchain
@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("simple", marks=pytest.mark.slow),
        "lstm",
        pytest.param("gru", marks=pytest.mark.slow),
        pytest.param("gru_before", marks=pytest.mark.slow),
        "bidirectional",
    ],
)
def test_verilog_bit_exact_in_verilator(tmp_path, kind) -> None:
    """Two stacked recurrent layers (the second cell in two chunks; or a Bidirectional GRU and a backwards GRU) in Verilog,
    back to back under random gaps and stalls (the GRU's cell in Verilog by default through
    the Bidirectional one)."""
    from keras2clash import api
    from keras2clash.verify import rtlsim

    if kind == "bidirectional":
        model, pes, cycles = _directions_model("concat", False, "gru", seed=7), [2, 1, 1, 1], [1, 2, 1, 1]
    else:
        model, pes, cycles = _rnn_model(5, 2, (3, 8), (True, False), "tanh", seed=7, kind=kind), [2, 1, 1], [1, 2, 1]
    out = tmp_path / "net"
    api.emit(model, "1,5,10", out, pes, cycles=cycles, show=False)
    x = np.random.default_rng(5).uniform(-1, 1, size=(6, 5, 2))
    np.savez(tmp_path / "data.npz", x_test=x, y_test=np.zeros(6, dtype=int))
    result = rtlsim.rtlsim(out, tmp_path / "data.npz", "verilator", gap_max=3, seed=2)
    assert result.ok and len(result.samples) == 6


def _directions_model(mode: str, sequences: bool, kind: str, seed: int) -> keras.Model:
    """A Bidirectional recurrent layer of `kind` merged by `mode`, then (its last states) a
    layer reading its sequence backwards, then Dense(3)."""
    inp = keras.Input((5, 2))
    x = layers.Bidirectional(
        RECURRENT[kind](3, "tanh", "sigmoid", return_sequences=sequences), merge_mode=mode, name="bi"
    )(inp)
    if sequences:
        x = layers.Flatten(name="flat")(x)
    else:
        x = layers.Reshape((-1, 1), name="steps")(x)
        x = RECURRENT[kind](2, "tanh", "sigmoid", go_backwards=True, name="back")(x)
    return _randomize(keras.Model(inp, layers.Dense(3, name="out")(x)), seed)


@pytest.mark.parametrize("kind", ["simple", "lstm", "gru", "gru_before"])
@pytest.mark.parametrize(("mode", "sequences"), [("concat", True), ("sum", False), ("mul", True), ("ave", False)])
def test_directions_golden_close_to_keras(kind, mode, sequences) -> None:
    """Bidirectional in every merge mode and go_backwards: the backward layer reads the
    sequence from its last step, its outputs return to time order before the merge."""
    model = _directions_model(mode, sequences, kind, seed=3)
    plans = load_network(model, "1,7,16", fifos=False).plans
    names = [p.name for p in plans]
    assert names[:3] == ["bi_forward", "bi_reverse", "bi_backward"] and ("bi_backward_reverse" in names) == sequences
    x = np.random.default_rng(2).uniform(-1, 1, (16, 5, 2))
    got = golden.run(plans, golden.quantize_params(plans), golden.quantize_inputs(plans, x)) / 2.0**16
    want = model.predict(x, verbose=0)
    assert np.max(np.abs(got.reshape(want.shape) - want)) < 0.02


@needs_toolchain
@pytest.mark.parametrize(("mode", "sequences", "kind"), [("concat", True, "gru"), ("sum", False, "lstm")])
def test_directions_bit_exact_in_clash(tmp_path, mode, sequences, kind) -> None:
    from keras2clash import api
    from keras2clash.backend.project import load_project

    model = _directions_model(mode, sequences, kind, seed=5)
    api.emit(model, "1,5,10", tmp_path / "net", show=False)
    project = load_project(tmp_path / "net")
    x = np.random.default_rng(3).uniform(-1, 1, (5, 5, 2))
    assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), seed=4)


def _refusal(build) -> str:
    inp = keras.Input((5, 3))
    model = keras.Model(inp, build(inp))
    with pytest.raises(K2CError) as err:
        load_network(model, "1,7,8", fifos=False)
    return str(err.value)


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (lambda x: layers.SimpleRNN(4, return_state=True, name="r")(x)[0], ["'r'", "return_state"]),
        (
            lambda x: layers.Bidirectional(layers.GRU(4), merge_mode=None, name="b")(x)[0],
            ["'b'", "merge_mode=None"],
        ),
        (lambda x: layers.SimpleRNN(4, activation="softmax", name="r")(x), ["'r'", "softmax", "recurrent"]),
        (lambda x: layers.SimpleRNN(4, activation="leaky_relu", name="r")(x), ["'r'", "leaky_relu"]),
        (lambda x: layers.GRU(4, reset_after=False, return_state=True, name="g")(x)[0], ["'g'", "return_state"]),
        (lambda x: layers.LSTM(4, activation="softmax", name="l")(x), ["'l'", "activation softmax"]),
        (lambda x: layers.LSTM(4, recurrent_activation="leaky_relu", name="l")(x), ["'l'", "recurrent_activation"]),
    ],
)
def test_refusals_name_the_layer_and_the_setting(build, words) -> None:
    message = _refusal(build)
    assert len(message.splitlines()) == 1
    for word in words:
        assert word in message


def test_a_sequence_of_unknown_length_is_refused() -> None:
    inp = keras.Input((None, 3))
    model = keras.Model(inp, layers.SimpleRNN(4, name="r")(inp))
    with pytest.raises(K2CError, match="length|None|shape"):
        load_network(model, "1,7,8", fifos=False)


def test_a_gated_cell_takes_a_plain_output_format() -> None:
    model = _rnn_model(4, 2, (3,), (False,), "tanh", seed=2, kind="lstm")
    with pytest.raises(K2CError, match="'rnn0'.*default modes"):
        load_network(model, "1,4,4,trn,wrap", fifos=False)


@pytest.mark.parametrize(("units", "lanes"), [(5, 1), (8, 4), (6, 3), (24, 4)])
def test_a_gated_step_adds_its_cell_to_the_steps_time(units, lanes) -> None:
    """A gated cell takes the most units up to four a cycle that divide the units (a table
    per lane, not per unit), and a step is the engine's S + D + 2 cycles and the cell's: its
    chunks scattered one a cycle, twelve registers, the chunks collected (chunks + 14)."""
    model = _rnn_model(4, 3, (units,), (True,), "tanh", seed=1, kind="lstm")
    plans = load_network(model, "1,7,8", fifos=False).plans
    rnn = plans[0]
    assert rnn.filters == 4 * units and rnn.window == 3 + units and rnn.params.cell_lanes == lanes
    t = hwmodel.timing(plans, 3)
    assert t.ii == 4 * (rnn.steps + rnn.pipe_depth + 2 + units // lanes + 14)


def test_latency_strategy_is_refused_for_a_recurrent_step() -> None:
    from keras2clash import api

    model = _rnn_model(4, 2, (3,), (False,), "tanh", seed=2)
    with pytest.raises(K2CError, match="'rnn0'.*resource strategy"):
        api.emit(model, "1,7,8", "/nonexistent/never", strategy="latency,resource", show=False)


def test_an_activation_layer_after_it_stays_a_stage_of_its_own() -> None:
    """A ReLU after a linear SimpleRNN acts on its output, not inside the recurrence."""
    inp = keras.Input((4, 2))
    x = layers.SimpleRNN(3, activation="linear", name="r")(inp)
    model = _randomize(keras.Model(inp, layers.Dense(2, name="out")(layers.ReLU(name="act")(x))), 4)
    plans = load_network(model, "1,7,8", fifos=False).plans
    assert [p.name for p in plans] == ["r", "act", "out"] and plans[0].activation == "linear"


@needs_toolchain
def test_gru_reset_before_bit_exact_in_clash(tmp_path) -> None:
    """Two stacked GRUs with reset_after=False, every step's state out and then the last
    step's (its cell in two chunks), each time step two passes of one engine: bit-exact in
    the Clash simulation with the hardware model's cycles, also under gaps and stalls."""
    from keras2clash import api
    from keras2clash.backend.project import load_project

    model = _rnn_model(4, 2, (3, 6), (True, False), "tanh", seed=11, kind="gru_before")
    api.emit(model, "1,5,10", tmp_path / "net", [2, 5, 1], cycles=[1, 3, 1], show=False)
    project = load_project(tmp_path / "net")
    assert [p.type for p in project.plans[:2]] == ["gru_reset_before"] * 2
    x = np.random.default_rng(6).uniform(-1.5, 1.5, (5, 4, 2))
    assert_clash_matches_golden(project, golden.quantize_inputs(project.plans, x), seed=3)


@pytest.mark.slow
@needs_toolchain
@CLASH
@given(
    steps=st.integers(1, 5),
    features=st.integers(1, 3),
    units=st.lists(st.integers(1, 8), min_size=1, max_size=2),
    last_sequences=st.booleans(),
    act=st.sampled_from(ACTIVATIONS),
    gate=st.sampled_from(["sigmoid", "hard_sigmoid", "linear"]),
    fmt=st.sampled_from(["1,5,10", "1,3,6"]),
    bidirectional=st.sampled_from([None, "concat", "sum"]),
    seed=st.integers(0, 10_000),
)
def test_random_gru_reset_before_bit_exact_in_clash(
    tmp_path_factory, steps, features, units, last_sequences, act, gate, fmt, bidirectional, seed
) -> None:
    """Random GRUs with reset_after=False (stacked, or one Bidirectional in concat or sum
    mode), random knobs: bit-exact in the Clash simulation with the hardware model's cycles."""
    sequences = (*([True] * (len(units) - 1)), last_sequences)
    if bidirectional is None:
        model = _rnn_model(steps, features, tuple(units), sequences, act, seed, kind="gru_before", gate=gate)
    else:
        inp = keras.Input((steps, features))
        gru = RECURRENT["gru_before"](units[0], act, gate, return_sequences=last_sequences)
        x = layers.Bidirectional(gru, merge_mode=bidirectional, name="bi")(inp)
        x = layers.Flatten(name="flat")(x) if last_sequences else x
        model = _randomize(keras.Model(inp, layers.Dense(3, name="out")(x)), seed)
    _random_knobs_bit_exact(tmp_path_factory.mktemp("gru_before"), model, fmt, seed)
