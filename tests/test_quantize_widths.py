"""Every accepted width, 1 to 64 bits, stays exact: quantization, the golden model's dense
layers, narrow accumulators, merges, average pooling and the PLAN sigmoid against exact
rationals, the emitted weight files, and iris at 64 bits bit-exact in Clash and Verilator; a
1-bit format is refused at emit.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import error_lines, listing, needs_toolchain, run_cli
from keras2clash.hw.plan import LayerFormats, LayerPlan
from keras2clash.hw.planner import make_plan
from keras2clash.kinds.merge import MergeParams
from keras2clash.kinds.pool import PoolParams
from keras2clash.quant import exact, golden
from keras2clash.quant.formats import MAX_BITS, FixedFormat, count_saturated, parse_format, quantize

ROOT = Path(__file__).resolve().parent.parent
IRIS = ROOT / "examples" / "iris"


def _reference_quantize(x: float, fmt: FixedFormat) -> int:
    q = math.floor(Fraction(x) * 2**fmt.frac + Fraction(1, 2))
    return max(fmt.raw_min, min(fmt.raw_max, q))


@st.composite
def any_format(draw) -> FixedFormat:
    bits = draw(st.integers(1, MAX_BITS))
    integer = draw(st.integers(0, bits - 1))
    return FixedFormat(1, integer, bits - 1 - integer)


EXTREMES = [
    np.finfo(np.float64).max,
    -np.finfo(np.float64).max,
    np.finfo(np.float64).tiny,
    -np.finfo(np.float64).tiny,
    5e-324,
    -5e-324,
    0.5 - 2.0**-54,
    -0.5 - 2.0**-53,
    2.0**63,
    -(2.0**63),
    2.0**62 - 2.0**9,
    2.0**53 + 2,
    1.0,
    -1.0,
    0.0,
    -0.0,
]


@settings(max_examples=500, deadline=None)
@given(
    fmt=any_format(),
    xs=st.lists(st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(EXTREMES), min_size=1, max_size=12),
)
def test_quantize_every_width_matches_exact_rationals(fmt: FixedFormat, xs: list[float]) -> None:
    """Property: for every accepted width, any finite float64 saturates to the
    format's range and equals floor(x * 2^frac + 1/2) computed in fractions.Fraction."""
    got = quantize(np.array(xs, dtype=np.float64), fmt)
    assert got.dtype == np.int64
    want = [_reference_quantize(x, fmt) for x in xs]
    assert got.tolist() == want
    over, _ = count_saturated(np.array(xs), fmt)
    assert over == sum(math.floor(Fraction(x) * 2**fmt.frac + Fraction(1, 2)) != w for x, w in zip(xs, want))


def test_64_bit_extremes_saturate_never_wrap() -> None:
    """At 64 bits the largest values saturate to the format's bounds, never wrap to the other end."""
    fmt = parse_format("1,0,63")
    x = np.array([1.0, 7.9, 1e300, -1.0, -7.9, -1e300, 0.5])
    assert quantize(x, fmt).tolist() == [fmt.raw_max] * 3 + [fmt.raw_min] * 3 + [1 << 62]


def test_iris_at_64_bits_keeps_its_accuracy_in_the_golden_model() -> None:
    """Iris at 1,0,63: inputs and weights saturate (the format's range is [-1, 1)), so the
    golden model keeps 84.44% (wrapped, they would leave 33.33%)."""
    from keras2clash.data import load_dataset
    from keras2clash.network import load_network

    network = load_network(IRIS / "iris.keras", "1,0,63")
    data = load_dataset(IRIS / "test.npz", network.plans[0].input_shape, network.plans[-1].n_out)
    x_raw = golden.quantize_inputs(network.plans, data.x)
    assert x_raw.tolist() == [
        [_reference_quantize(float(v), network.plans[0].in_fmt) for v in row] for row in data.x.astype(np.float64)
    ]
    classes = golden.predict_classes(golden.run(network.plans, network.params, x_raw))
    assert np.mean(classes == data.y) > 0.8


@pytest.mark.parametrize("fmt", ["1,0,55", "1,0,60", "1,0,63", "1,63,0", "1,31,32"])
def test_wide_formats_emit_exact_weight_files(tmp_path: Path, saturating_model: Path, capsys, fmt: str) -> None:
    """From 55 to 64 bits the weight files hold exactly the quantized, saturated weights (a
    saturated weight rounded in float would become 2^(W-1), which does not fit W bits)."""
    from keras2clash.backend.memfiles import rom_table

    out = tmp_path / "net"
    # the weights in the wide format itself (`same`; the default `fit` would move their bits)
    code, text = run_cli(["emit", saturating_model, "--format", fmt, "--weight-format", "same", "--out", out], capsys)
    assert code == 0, text
    from keras2clash.backend.project import load_project

    project = load_project(out)
    f = parse_format(fmt)
    import keras

    weights = keras.models.load_model(saturating_model).get_weights()
    for plan, (kernel, bias) in zip(project.compute_plans, zip(weights[::2], weights[1::2])):
        params = project.params[plan.name]
        assert params.kernel.tolist() == [[_reference_quantize(float(v), f) for v in row] for row in kernel]
        assert params.bias.tolist() == [_reference_quantize(float(v), f) for v in bias]
        words = (out / "weights" / f"{plan.name}.mem").read_text().split()
        table = rom_table(plan, params)
        for word, row in zip(words, table):
            fields = [int(word[i : i + f.bits], 2) for i in range(0, len(word), f.bits)]
            signed = [v - (1 << f.bits) if v >> (f.bits - 1) else v for v in fields]
            assert signed == row.reshape(-1).tolist()


def _ref_sigmoid(r: int, fmt: FixedFormat) -> int:
    scale = 2**fmt.frac
    c = lambda v: math.floor(Fraction(v) * scale + Fraction(1, 2))  # noqa: E731
    a = abs(r)
    if Fraction(a, scale) >= 5:
        y = scale
    elif a >= c(Fraction(19, 8)):
        y = a // 32 + c(Fraction(27, 32))
    elif a >= scale:
        y = a // 8 + c(Fraction(5, 8))
    else:
        y = a // 4 + c(Fraction(1, 2))
    y = scale - y if r < 0 else y
    return max(fmt.raw_min, min(fmt.raw_max, y))


def _round_sat(value: Fraction, fmt: FixedFormat) -> int:
    return max(fmt.raw_min, min(fmt.raw_max, math.floor(value * 2**fmt.frac + Fraction(1, 2))))


def _dense_layer(n_in: int, n_out: int, act: str) -> dict:
    return {
        "type": "dense",
        "name": "d",
        "input_shape": (n_in,),
        "output_shape": (n_out,),
        "activation": act,
        "use_bias": True,
        "fused": [],
        "weights": {},
    }


wide_formats = st.builds(lambda i, f: FixedFormat(1, i, f), st.integers(0, 63), st.integers(0, 63)).filter(
    lambda f: f.bits <= MAX_BITS
)


def _raws(fmt: FixedFormat):
    return st.integers(fmt.raw_min, fmt.raw_max) | st.sampled_from([fmt.raw_min, fmt.raw_max, -1, 0])


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    n_in=st.integers(1, 6),
    n_out=st.integers(1, 3),
    in_fmt=wide_formats,
    w_fmt=wide_formats,
    b_fmt=wide_formats,
    out_fmt=wide_formats,
    act=st.sampled_from(["linear", "relu", "sigmoid"]),
)
def test_golden_dense_exact_at_any_width(data, n_in, n_out, in_fmt, w_fmt, b_fmt, out_fmt, act) -> None:
    """End to end in the golden model: quantize -> accumulate -> requantize ->
    activate equals exact rationals for mixed formats up to 64 bits (Python integers where
    int64 cannot hold the values, never a wrap)."""
    plan = make_plan(
        [_dense_layer(n_in, n_out, act)],
        out_fmt,
        input_fmt=in_fmt,
        layer_formats={"d": LayerFormats(weight=w_fmt, bias=b_fmt, output=out_fmt)},
    )[0]
    kernel = np.array(
        data.draw(st.lists(_raws(w_fmt), min_size=n_in * n_out, max_size=n_in * n_out)), dtype=np.int64
    ).reshape(n_in, n_out)
    bias = np.array(data.draw(st.lists(_raws(b_fmt), min_size=n_out, max_size=n_out)), dtype=np.int64)
    xs = np.array(
        data.draw(st.lists(st.lists(_raws(in_fmt), min_size=n_in, max_size=n_in), min_size=1, max_size=3)),
        dtype=np.int64,
    )
    got = golden.layer(plan, {plan.name: golden.QuantizedLayer(kernel, bias)}, [xs])
    assert got.dtype == np.int64
    for x, row in zip(xs, got):
        want = []
        for n in range(n_out):
            acc = sum(
                Fraction(int(xi), 2**in_fmt.frac) * Fraction(int(wi), 2**w_fmt.frac) for xi, wi in zip(x, kernel[:, n])
            ) + Fraction(int(bias[n]), 2**b_fmt.frac)
            r = _round_sat(acc, out_fmt)
            # sigmoid: the table itself is tested in tests/test_layers_activations.py
            want.append(
                max(r, 0)
                if act == "relu"
                else int(exact.activate(np.array([r]), "sigmoid", out_fmt)[0])
                if act == "sigmoid"
                else r
            )
        assert row.tolist() == want


@settings(max_examples=150, deadline=None)
@given(data=st.data(), n_in=st.integers(1, 6), in_fmt=wide_formats, w_fmt=wide_formats, out_fmt=wide_formats)
def test_golden_narrow_accumulator_exact_at_any_width(data, n_in, in_fmt, w_fmt, out_fmt) -> None:
    """A narrow (user-chosen) accumulator saturating after each chunk, in chunk
    order, stays exact with wide formats: acc_0 = sat(S_0 + bias), acc_t = sat(acc_{t-1} + S_t)."""
    from keras2clash.hw.plan import accumulator_format

    exact = accumulator_format(in_fmt, w_fmt, n_in, w_fmt)
    bits = data.draw(st.integers(exact.frac + 1, exact.bits))
    cycles = data.draw(st.integers(1, n_in))
    plan = make_plan(
        [_dense_layer(n_in, 2, "linear")],
        out_fmt,
        input_fmt=in_fmt,
        cycles=[cycles],
        layer_formats={"d": LayerFormats(weight=w_fmt, output=out_fmt, accumulator_bits=bits)},
    )[0]
    acc_fmt = plan.acc_fmt
    kernel = np.array(data.draw(st.lists(_raws(w_fmt), min_size=2 * n_in, max_size=2 * n_in)), dtype=np.int64).reshape(
        n_in, 2
    )
    bias = np.array(data.draw(st.lists(_raws(w_fmt), min_size=2, max_size=2)), dtype=np.int64)
    x = np.array(data.draw(st.lists(_raws(in_fmt), min_size=n_in, max_size=n_in)), dtype=np.int64)
    got = golden.layer(plan, {plan.name: golden.QuantizedLayer(kernel, bias)}, [x[None, :]])[0].tolist()
    sat = lambda v, f: max(f.raw_min, min(f.raw_max, v))  # noqa: E731
    shift = acc_fmt.frac - (in_fmt.frac + w_fmt.frac)
    want = []
    for n in range(2):
        acc = None
        for t in range(plan.knobs.cycles):
            part = sum(int(x[j]) * int(kernel[j, n]) for j in range(t * plan.chunk, min((t + 1) * plan.chunk, n_in)))
            part <<= shift
            acc = (
                sat(part + (int(bias[n]) << (acc_fmt.frac - w_fmt.frac)), acc_fmt)
                if acc is None
                else sat(acc + part, acc_fmt)
            )
        want.append(_round_sat(Fraction(acc, 2**acc_fmt.frac), out_fmt))
    assert got == want


def test_sigmoid_at_64_bits_does_not_overflow() -> None:
    """The PLAN sigmoid at 64 bits: |most negative| does not fit int64, so it is computed on
    Python integers."""
    for fmt in (FixedFormat(1, 63, 0), FixedFormat(1, 0, 63), FixedFormat(1, 20, 43), FixedFormat(1, 60, 1)):
        r = np.array([fmt.raw_min, fmt.raw_min + 1, -1, 0, 1, fmt.raw_max], dtype=np.int64)
        assert golden.sigmoid_plan(r, fmt).tolist() == [_ref_sigmoid(int(v), fmt) for v in r]


MERGES = ("add", "subtract", "multiply", "average", "maximum", "minimum", "concatenate")


@settings(max_examples=200, deadline=None)
@given(op=st.sampled_from(MERGES), n=st.integers(2, 3), data=st.data(), out=wide_formats)
def test_golden_merges_exact_at_any_width(op, n, data, out) -> None:
    """Merges (their golden step) stay exact with operands and outputs up to 64 bits."""
    n = 2 if op == "subtract" else n
    in_fmts = [data.draw(wide_formats) for _ in range(n)]
    raws = [np.array(data.draw(st.lists(_raws(f), min_size=2, max_size=2)), dtype=np.int64) for f in in_fmts]
    plan = LayerPlan(
        name="m",
        type=op,
        input_shape=(2,),
        output_shape=(2 * n if op == "concatenate" else 2,),
        activation="linear",
        in_fmt=in_fmts[0],
        out_fmt=out,
        inputs=tuple(f"t{i}" for i in range(n)),
        params=MergeParams(in_fmts=tuple(in_fmts), input_shapes=((2,),) * n),
    )
    got = golden.layer(plan, {}, [r[None, :] for r in raws])[0]
    values = [[Fraction(int(v), 2**f.frac) for v in r] for r, f in zip(raws, in_fmts)]
    if op == "concatenate":
        want = [_round_sat(v, out) for vs in values for v in vs]
    else:
        want = []
        for k in range(2):
            column = [vs[k] for vs in values]
            exact = {
                "add": sum(column),
                "subtract": column[0] - column[-1],
                "multiply": math.prod(column),
                "average": sum(column) / len(column),
                "maximum": max(column),
                "minimum": min(column),
            }[op]
            want.append(_round_sat(exact, out))
    assert got.tolist() == want


def test_average_pooling_exact_at_64_bits() -> None:
    """Average pooling at 64 bits: 2*sum + N does not fit int64, so it is computed exactly."""
    fmt = FixedFormat(1, 31, 32)
    plan = LayerPlan(
        name="p",
        type="avgpool2d",
        input_shape=(2, 2, 1),
        output_shape=(1, 1, 1),
        activation="linear",
        in_fmt=fmt,
        out_fmt=fmt,
        params=PoolParams(kernel_size=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0)),
    )
    for values in ([fmt.raw_max] * 4, [fmt.raw_min] * 4, [fmt.raw_max, fmt.raw_max, fmt.raw_min, 7]):
        x = np.array(values, dtype=np.int64).reshape(1, 2, 2, 1)
        want = (2 * sum(values) + 4) // 8
        assert golden.layer(plan, {}, [x]).reshape(-1).tolist() == [want]


@pytest.mark.parametrize("extra", [["--format", "1,0,0"], ["--layer-format", "dense_1:o=1,0,0"]])
def test_one_bit_format_is_refused_at_emit(tmp_path: Path, saturating_model: Path, capsys, extra) -> None:
    """A 1-bit format would fail the Verilog lint (Clash writes a zero-width bit slice): emit
    refuses it with one clear line and writes nothing."""
    code, text = run_cli(["emit", saturating_model, "--out", tmp_path / "net", *extra], capsys)
    assert code == 2, text
    assert len(error_lines(text)) == 1 and "at least 2 bits" in text and "1,0,0" in text
    assert listing(tmp_path) == []


@needs_toolchain
@pytest.mark.slow  # the default run checks wide formats in the golden model and narrow ones in hardware
def test_64_bit_iris_is_bit_exact_and_accurate_in_clash_and_verilator(tmp_path: Path) -> None:
    """At 1,0,63 golden model and hardware both saturate: bit-exact in the Clash simulation
    and in Verilator, with the golden model's accuracy (bit-exact alone would not show a
    wrap that both share)."""
    import keras2clash as k2c

    project = k2c.emit(IRIS / "iris.keras", "1,0,63", tmp_path / "iris64", [2, 3], show=False)
    comp = k2c.simulate(project, IRIS / "test.npz", show=False)
    assert comp.bit_exact == comp.samples == 45
    assert comp.golden_accuracy == comp.sim_accuracy and comp.golden_accuracy > 0.8
    from keras2clash import api

    result = api.rtlsim(project, IRIS / "test.npz", "verilator", 10, show=False)
    assert result.ok and result.passed == 10
