"""Formats: parsing every malformed case, and quantization's rounding/saturation edges."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras2clash.errors import K2CError
from keras2clash.quant.formats import FixedFormat, count_saturated, parse_format, quantize


def test_thesis_format_is_sfixed_8_8() -> None:
    fmt = parse_format("1,7,8")
    assert fmt == FixedFormat(1, 7, 8)
    assert fmt.bits == 16
    assert fmt.clash_type == "SFixed 8 8"
    assert (fmt.raw_min, fmt.raw_max) == (-32768, 32767)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("1,7", "three integers"),
        ("1,7,8,9", "three integers"),
        ("abc", "three integers"),
        ("", "three integers"),
        ("2,7,8", "sign must be 1"),
        ("0,-2,1", "-1 bits; a format needs at least 1"),
        ("1,-9,8", "0 bits; a format needs at least 1"),
        ("1,7,-8", "0 bits; a format needs at least 1"),
        ("1,7,8,round_up", "rounding 'round_up' unknown"),
        ("1,40,40", "81 bits, at most 64"),
        ("1,0,0", None),  # 1 bit: the smallest legal format
    ],
)
def test_parse_format_rejects_with_reason(text: str, fragment: str | None) -> None:
    if fragment is None:
        assert parse_format(text).bits == 1
        return
    with pytest.raises(K2CError, match=fragment) as info:
        parse_format(text)
    assert repr(text) in str(info.value)


def test_64_bits_is_the_limit() -> None:
    assert parse_format("1,31,32").bits == 64
    with pytest.raises(K2CError, match="65 bits"):
        parse_format("1,32,32")


def test_rounding_ties_go_up_and_saturation_clamps() -> None:
    fmt = parse_format("1,3,4")  # lsb 1/16, range [-8, 7.9375]
    x = np.array([0.5 / 16, -0.5 / 16, 1.5 / 16, -1.5 / 16, 7.96875, 7.97, -8.0, -8.04, 1e9, -1e9])
    assert quantize(x, fmt).tolist() == [1, 0, 2, -1, 127, 127, -128, -128, 127, -128]


def _reference_quantize(x: float, fmt: FixedFormat) -> int:
    q = math.floor(Fraction(x) * 2**fmt.frac + Fraction(1, 2))
    return max(fmt.raw_min, min(fmt.raw_max, q))


formats = st.builds(lambda i, f: FixedFormat(1, i, f), st.integers(0, 20), st.integers(0, 30))


@settings(max_examples=300, deadline=None)
@given(fmt=formats, xs=st.lists(st.floats(-1e7, 1e7, allow_nan=False, width=32), min_size=1, max_size=20))
def test_quantize_matches_exact_rational_rounding(fmt: FixedFormat, xs: list[float]) -> None:
    got = quantize(np.array(xs, dtype=np.float32), fmt).tolist()
    assert got == [_reference_quantize(float(np.float32(x)), fmt) for x in xs]


def test_count_saturated_reports_count_and_worst_error() -> None:
    fmt = parse_format("1,1,2")  # range [-2, 1.75]
    over, worst = count_saturated(np.array([0.0, 1.75, 3.0, -2.5]), fmt)
    assert over == 2
    assert worst == pytest.approx(1.25)
