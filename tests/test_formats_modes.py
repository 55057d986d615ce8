"""Formats a quantized network needs: unsigned, negative integer or fraction
bits, truncate/wrap modes. Quantizing against fractions.Fraction, the golden model's
requantization against a reference on Python integers, the plan's refusals, and one Clash
simulation of a network mixing them, bit-exact against the golden model."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cli import run_cli

import keras2clash as k2c
from helpers import needs_toolchain, random_dense_model
from keras2clash.backend.project import load_project
from keras2clash.errors import K2CError
from keras2clash.hw.plan import LayerFormats, LayerPlan
from keras2clash.hw.planner import make_plan
from keras2clash.quant import exact, golden
from keras2clash.quant.formats import (
    FixedFormat,
    ap_type,
    make_format,
    parse_ap_type,
    parse_format,
    quantize,
    requantize,
)

F = parse_format


def reference_code(v: Fraction, fmt: FixedFormat) -> int:
    """The W-bit code of a real value: the rounding mode at 2^-frac, then the overflow mode."""
    y = v * Fraction(2) ** fmt.frac
    if fmt.rounding == "nearest":
        q = math.floor(y + Fraction(1, 2))
    elif fmt.rounding == "nearest_even":  # ties to even, spelled out (not Python's round)
        q = math.floor(y)
        rest = y - q
        q += 1 if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and q % 2 == 1) else 0
    else:
        q = math.floor(y)
    if fmt.overflow == "saturate":
        return min(max(q, fmt.q_min), fmt.q_max)
    return (q - fmt.q_min) % (1 << fmt.bits) + fmt.q_min


formats = st.builds(
    lambda sign, integer, frac, r, o: (sign, integer, frac, r, o),
    st.sampled_from([0, 1]),
    st.integers(-12, 20),
    st.integers(-12, 30),
    st.sampled_from(["nearest", "nearest_even", "truncate"]),
    st.sampled_from(["saturate", "wrap"]),
).filter(lambda t: 1 <= t[0] + t[1] + t[2] <= 40)


@settings(max_examples=300, deadline=None)
@given(
    formats,
    st.lists(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e9, max_value=1e9), min_size=1, max_size=8),
)
def test_quantize_equals_the_fraction_reference(spec, values) -> None:
    fmt = make_format(*spec)
    got = quantize(np.array(values), fmt)
    want = [reference_code(Fraction(v), fmt) * fmt.step for v in values]
    assert got.tolist() == want
    assert all(fmt.raw_min <= g <= fmt.raw_max and g % fmt.step == 0 for g in want)


@settings(max_examples=300, deadline=None)
@given(formats, st.integers(0, 24), st.lists(st.integers(-(1 << 40), 1 << 40), min_size=1, max_size=8))
def test_requantize_equals_the_fraction_reference(spec, frac, raws) -> None:
    fmt = make_format(*spec)
    got = requantize(np.array(raws, dtype=object), frac, fmt)
    assert [int(g) for g in got] == [reference_code(Fraction(r, 1 << frac), fmt) * fmt.step for r in raws]
    # the golden model's entry point agrees, in int64 when it fits
    small = [r for r in raws if abs(r) < 1 << 30]
    if small:
        assert exact.requantize_to(np.array(small, dtype=np.int64), frac, fmt).tolist() == [
            reference_code(Fraction(r, 1 << frac), fmt) * fmt.step for r in small
        ]


@pytest.mark.parametrize(
    ("text", "fmt", "container"),
    [
        ("1,7,8", FixedFormat(1, 7, 8), "1,7,8"),
        ("0,4,4", FixedFormat(0, 4, 4), "1,4,4"),
        ("1,-3,10", FixedFormat(1, -3, 10), "1,0,10"),
        ("1,11,-4", FixedFormat(1, 11, -4), "1,11,0"),
        ("1,7,8,trn,wrap", FixedFormat(1, 7, 8, "truncate", "wrap"), "1,7,8"),
        (" 0 , 3 , 2 , truncate ", FixedFormat(0, 3, 2, "truncate"), "1,3,2"),
        ("ap_fixed<16,8>", FixedFormat(1, 7, 8, "truncate", "wrap"), "1,7,8"),
        ("ap_fixed<16,8,AP_RND,AP_SAT>", FixedFormat(1, 7, 8), "1,7,8"),
        ("ap_ufixed<8,4,AP_RND,AP_SAT>", FixedFormat(0, 4, 4), "1,4,4"),
        ("ap_fixed<8,-2,AP_TRN,AP_SAT>", FixedFormat(1, -3, 10, "truncate"), "1,0,10"),
        ("fixed<4,8,RND,SAT>", FixedFormat(1, 7, -4), "1,7,0"),
        ("ap_int<6>", FixedFormat(1, 5, 0, "truncate", "wrap"), "1,5,0"),
        ("ap_uint<6>", FixedFormat(0, 6, 0, "truncate", "wrap"), "1,6,0"),
        ("1,3,4,rnd_conv", FixedFormat(1, 3, 4, "nearest_even"), "1,3,4"),
        ("0,2,2,nearest_even,wrap", FixedFormat(0, 2, 2, "nearest_even", "wrap"), "1,2,2"),
        ("ap_fixed<8,4,AP_RND_CONV,AP_SAT>", FixedFormat(1, 3, 4, "nearest_even"), "1,3,4"),
    ],
)
def test_format_syntax(text: str, fmt: FixedFormat, container: str) -> None:
    got = parse_format(text)
    assert got == fmt and str(got.container) == container
    assert parse_format(str(got)) == got and parse_ap_type(ap_type(got)) == got


def test_default_contract_is_ap_rnd_sat() -> None:
    assert ap_type(F("1,7,8")) == "ap_fixed<16,8,AP_RND,AP_SAT>"
    assert ap_type(F("0,2,6,trn,wrap")) == "ap_ufixed<8,2,AP_TRN,AP_WRAP>"
    # AP_RND rounds ties toward +inf, as the contract: 0.5 LSB up, -0.5 LSB up (toward zero)
    assert quantize(np.array([0.5, -0.5, 1.5, -1.5]) / 256, F("ap_fixed<16,8,AP_RND,AP_SAT>")).tolist() == [1, 0, 2, -1]


def test_convergent_rounding_sends_ties_to_even() -> None:
    """nearest_even (AP_RND_CONV, tf.round): a tie goes to the even code, both signs, in
    quantize (float64 and the wrapping Fraction route) and requantize."""
    ties = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.25, -2.75]) / 4
    for over in ("sat", "wrap"):
        assert quantize(ties, F(f"1,5,2,rnd_conv,{over}")).tolist() == [0, 2, 2, 0, -2, -2, 2, -3]
    assert quantize(ties, F("1,5,2")).tolist() == [1, 2, 3, 0, -1, -2, 2, -3]  # the default: ties up
    raw = np.array([2, 6, 10, -2, -6, -10, 9, -11])  # 0.5, 1.5, 2.5, ... in units of 2^-2
    assert requantize(raw, 2, F("1,5,0,rnd_conv")).tolist() == [0, 2, 2, 0, -2, -2, 2, -3]
    assert np.round(ties * 4).tolist() == [0, 2, 2, 0, -2, -2, 2, -3]  # numpy (and tf.round) agree


def test_raw_values_and_ranges() -> None:
    f = F("1,11,-4")  # 8-bit codes, steps of 16: raw values are multiples of 16
    assert (f.bits, f.step, f.raw_min, f.raw_max, f.clash_type) == (8, 16, -2048, 2032, "SFixed 12 0")
    assert quantize(np.array([100.0, 7.9, 8.0, -1e9]), f).tolist() == [96, 0, 16, -2048]
    u = F("0,2,3")
    assert (u.raw_min, u.raw_max, u.clash_type, u.hw_bits) == (0, 31, "SFixed 3 3", 6)
    assert u.to_real(quantize(np.array([-1.0, 1.3, 9.0]), u)).tolist() == [0.0, 1.25, 3.875]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2,3,4", "sign must be 1"),
        ("1,-9,4", "at least 1"),
        ("1,7,8,up", "rounding 'up' unknown"),
        ("1,7,8,trn,clip", "overflow 'clip' unknown"),
        ("1,-40,70", "container"),
        ("ap_fixed<16,8,AP_RND_INF>", r"AP_RND_INF \(rounds ties away from zero\) is not built"),
        ("ap_fixed<16,8,AP_RND,AP_SAT_SYM>", r"AP_SAT_SYM \(saturates symmetrically\)"),
        ("ap_fixed<16,8,AP_RND,AP_SAT,2>", "saturation bits N=2"),
        ("ap_fixed<16>", "takes W,I"),
    ],
)
def test_bad_formats(text: str, message: str) -> None:
    with pytest.raises(K2CError, match=message):
        parse_format(text)


def test_plan_refuses_what_it_cannot_build() -> None:
    ir = random_dense_model([(4, "relu"), (3, "sigmoid")], n_in=5, seed=1)
    make_plan(
        ir_graph(ir), F("1,7,8"), layer_formats={"dense_0": LayerFormats(F("0,2,6"), F("1,-2,9"), F("0,3,5,trn,wrap"))}
    )
    with pytest.raises(
        K2CError, match=r"layer 'dense_1' \(dense\): output format 1,3,4,trn,sat needs a linear or relu"
    ):
        make_plan(ir_graph(ir), F("1,7,8"), layer_formats={"dense_1": LayerFormats(output=F("1,3,4,trn"))})


def ir_graph(model):
    from keras2clash.network import load_model

    return load_model(model)[1]


def test_plan_json_keeps_the_modes() -> None:
    ir = random_dense_model([(4, "relu"), (3, "linear")], n_in=5, seed=1)
    plans = make_plan(ir_graph(ir), F("1,7,8"), layer_formats={"dense_0": LayerFormats(output=F("0,1,6,trn,wrap"))})
    back = [LayerPlan.from_json(p.to_json()) for p in plans]
    assert back[0].out_fmt == F("0,1,6,trn,wrap") and back[1].in_fmt == F("0,1,6,trn,wrap")


@needs_toolchain
@pytest.mark.toolchain
def test_unsigned_negative_int_truncate_wrap_bit_exact_in_clash(tmp_path: Path, capsys) -> None:
    """Unsigned weights and outputs, negative integer and fraction bits, truncating and
    wrapping requantizations: the Clash simulation equals the golden model bit for bit."""
    model = random_dense_model([(6, "relu"), (5, "linear"), (4, "relu"), (3, "linear")], n_in=8, seed=5, scale=1.5)
    model_path = tmp_path / "m.keras"
    model.save(model_path)
    cfg = tmp_path / "formats.json"
    cfg.write_text(
        json.dumps(
            {
                "input": "0,3,5",
                "layers": {
                    "dense_0": {"w": "1,-1,8", "b": "1,4,-1", "o": "0,2,4,trn,sat"},
                    "dense_1": {"w": "ap_fixed<6,1,AP_TRN,AP_WRAP>", "b": "0,3,3", "o": "1,2,3,rnd_conv,wrap"},
                    "dense_2": {"w": "1,1,5", "o": "ap_fixed<5,7,AP_RND,AP_SAT>"},
                    "dense_3": {"w": "1,2,5", "o": "1,3,4,trn,wrap", "acc": 14},
                },
            }
        )
    )
    out = tmp_path / "net"
    code, err = run_cli(
        [
            "emit",
            str(model_path),
            "--out",
            str(out),
            "--layer-formats",
            str(cfg),
            "--parallelism",
            "3,5,2,1",
            "--cycles",
            "2,1,3,2",
        ],
        capsys,
    )
    assert code == 0, err
    project = load_project(out)
    plans = {p.name: p for p in project.plans}
    assert plans["dense_2"].out_fmt == FixedFormat(1, 6, -2) and plans["dense_1"].in_fmt == FixedFormat(
        0, 2, 4, "truncate"
    )
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 9, (60, 8)).astype("float32")
    x_raw = golden.quantize_inputs(project.plans, x)
    values = golden.run_all(project.plans, project.params, x_raw)
    # every unusual step really happens: wraps, truncations, large steps
    d1 = values["dense_1"]
    assert (d1 % 1 == 0).all() and d1.min() >= -32 and d1.max() <= 31
    assert np.all(values["dense_2"] % 4 == 0) and np.any(values["dense_2"] != 0)
    assert np.all(values["dense_0"] >= 0)
    data = tmp_path / "d.npz"
    np.savez(data, x=x, y=rng.integers(0, 3, 60))
    comp = k2c.simulate(out, data, keras=False, show=False)
    assert comp.bit_exact == comp.samples == 60


def test_quantize_a_value_far_below_a_negative_frac_step() -> None:
    """hypothesis found it: with frac < 0, ldexp underflows -5e-324 to -0.0, whose floor is 0;
    the truncated code of a tiny negative value is -1 (one step below zero)."""
    tiny = np.array([-5e-324, 5e-324, -1e-310, 1e-310])
    assert quantize(tiny, make_format(1, 1, -1, "truncate", "saturate")).tolist() == [-2, 0, -2, 0]
    assert quantize(tiny, make_format(1, 1, -1)).tolist() == [0, 0, 0, 0]
    assert quantize(tiny, make_format(1, 1, -1, "nearest_even", "saturate")).tolist() == [0, 0, 0, 0]
