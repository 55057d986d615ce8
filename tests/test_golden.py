"""The golden model against an independent exact-rational reading of docs/guide/contract.md."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras2clash.hw.planner import make_plan
from keras2clash.quant import exact, golden
from keras2clash.quant.formats import FixedFormat, parse_format

F16 = parse_format("1,7,8")


def _round_half_up(v: Fraction) -> int:
    return math.floor(v + Fraction(1, 2))


def _sat(q: int, fmt: FixedFormat) -> int:
    return max(fmt.raw_min, min(fmt.raw_max, q))


def _ref_sigmoid(r: int, fmt: FixedFormat) -> int:
    """PLAN with every breakpoint and constant as an exact rational of the real value."""
    scale = 2**fmt.frac
    a = Fraction(abs(r), scale)
    c = lambda v: _round_half_up(Fraction(v) * scale)  # noqa: E731
    if a >= 5:
        y = scale
    elif abs(r) >= c(Fraction(19, 8)):
        y = abs(r) // 32 + c(Fraction(27, 32))
    elif a >= 1:
        y = abs(r) // 8 + c(Fraction(5, 8))
    else:
        y = abs(r) // 4 + c(Fraction(1, 2))
    if r < 0:
        y = scale - y
    return _sat(y, fmt)


def _ref_dense(
    x: list[int],
    kernel: np.ndarray,
    bias: np.ndarray,
    in_fmt: FixedFormat,
    w_fmt: FixedFormat,
    out_fmt: FixedFormat,
    act: str,
) -> list[int]:
    """Exact real arithmetic: sum(x*w) + b as a Fraction, then round half up, saturate."""
    out = []
    for n in range(kernel.shape[1]):
        acc = sum(
            Fraction(int(xi), 2**in_fmt.frac) * Fraction(int(wi), 2**w_fmt.frac) for xi, wi in zip(x, kernel[:, n])
        )
        acc += Fraction(int(bias[n]), 2**w_fmt.frac)
        r = _sat(_round_half_up(acc * 2**out_fmt.frac), out_fmt)
        if act == "relu":
            r = max(r, 0)
        elif act == "sigmoid":
            r = _ref_sigmoid(r, out_fmt)
        out.append(r)
    return out


@pytest.mark.parametrize(
    ("r", "expected"),
    [
        (0, 128),
        (255, 191),
        (256, 192),
        (-256, 64),
        (607, 235),
        (608, 235),
        (1279, 255),
        (1280, 256),
        (-1280, 0),
        (32767, 256),
        (-32768, 0),
    ],
)
def test_sigmoid_breakpoints_at_1_7_8(r: int, expected: int) -> None:
    assert golden.sigmoid_plan(np.array([r]), F16).tolist() == [expected]
    assert _ref_sigmoid(r, F16) == expected


def test_sigmoid_saturates_when_one_does_not_fit() -> None:
    fmt = FixedFormat(1, 0, 4)  # range [-1, 15/16]: 1.0 is not representable
    assert golden.sigmoid_plan(np.array([100]), fmt).tolist() == [15]


def test_sigmoid_is_close_to_the_real_one() -> None:
    r = np.arange(-3000, 3000)
    y = golden.sigmoid_plan(r, F16) / 256
    assert np.max(np.abs(y - 1 / (1 + np.exp(-r / 256)))) < 0.019 + 1 / 256


def _layer(n_in: int, n_out: int, act: str) -> dict:
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


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    n_in=st.integers(1, 12),
    n_out=st.integers(1, 5),
    fmt=st.builds(lambda i, f: FixedFormat(1, i, f), st.integers(0, 9), st.integers(0, 12)),
    act=st.sampled_from(["linear", "relu", "sigmoid", "softmax"]),
)
def test_dense_equals_exact_reference(data, n_in: int, n_out: int, fmt: FixedFormat, act: str) -> None:
    plan = make_plan([_layer(n_in, n_out, act)], fmt)[0]
    raw = st.integers(fmt.raw_min, fmt.raw_max)
    kernel = np.array(data.draw(st.lists(raw, min_size=n_in * n_out, max_size=n_in * n_out))).reshape(n_in, n_out)
    bias = np.array(data.draw(st.lists(raw, min_size=n_out, max_size=n_out)))
    xs = np.array(data.draw(st.lists(st.lists(raw, min_size=n_in, max_size=n_in), min_size=1, max_size=4)))
    got = golden.layer(plan, {plan.name: golden.QuantizedLayer(kernel, bias)}, [xs])
    for x, row in zip(xs, got):
        if act in ("sigmoid", "softmax"):  # the activation itself: tests/test_layers_activations.py
            linear = _ref_dense(list(x), kernel, bias, fmt, fmt, fmt, "linear")
            assert row.tolist() == exact.activate(np.array(linear), act, fmt).tolist()
        else:
            assert row.tolist() == _ref_dense(list(x), kernel, bias, fmt, fmt, fmt, act)


def test_extremes_saturate_never_wrap() -> None:
    fmt = FixedFormat(1, 3, 4)
    plan = make_plan([_layer(4, 2, "linear")], fmt)[0]
    kernel = np.array([[fmt.raw_min, fmt.raw_max]] * 4)
    x = np.array([[fmt.raw_min] * 4, [fmt.raw_max] * 4])
    out = golden.layer(plan, {plan.name: golden.QuantizedLayer(kernel, np.array([fmt.raw_max, fmt.raw_min]))}, [x])
    assert out.tolist() == [[fmt.raw_max, fmt.raw_min], [fmt.raw_min, fmt.raw_max]]


def test_64_bit_formats_use_exact_python_integers() -> None:
    fmt = FixedFormat(1, 31, 32)
    plan = make_plan([_layer(3, 1, "linear")], fmt)[0]
    assert plan.acc_fmt is not None and plan.acc_fmt.bits > golden.INT64_SAFE_BITS
    x = np.array([[fmt.raw_max, fmt.raw_max, 1]])
    kernel = np.array([[1 << 32], [-(1 << 32)], [3]])
    out = golden.layer(plan, {plan.name: golden.QuantizedLayer(kernel, np.array([5]))}, [x])
    assert out.tolist() == _ref_dense_list(x[0], kernel, [5], fmt)


def _ref_dense_list(x, kernel, bias, fmt):
    return [_ref_dense(list(x), np.array(kernel), np.array(bias), fmt, fmt, fmt, "linear")]


def test_argmax_ties_go_to_lowest_index() -> None:
    assert golden.predict_classes(np.array([[3, 7, 7, 1], [0, 0, 0, 0]])).tolist() == [1, 0]
