"""Fixed-point formats and the one quantization rule (docs/contract.md).

A format is the thesis' `(sign, int, frac)` triple. Everything that turns a real number into
hardware bits goes through `quantize`, so the golden model, the weight files and the Keras
"rounded" rung of the ladder all round the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from keras2clash.errors import K2CError

MAX_BITS = 64
"""Widest format accepted: raw values fit numpy's int64 (wider intermediate values in the
golden model use Python integers), and quantizing is exact up to this width."""

MIN_HARDWARE_BITS = 2
"""Narrowest format `emit` builds: Clash 1.6.4 turns the saturation of a 1-bit `SFixed 1 0`
into a zero-width bit slice (`x[0+:(1-1)]`) that Verilator rejects. The golden model and
the precision sweep still take 1-bit formats."""


@dataclass(frozen=True, order=True)
class FixedFormat:
    """A signed fixed-point format: `sign` bit(s), `int` integer bits, `frac` fraction bits."""

    sign: int
    int: int
    frac: int

    @property
    def bits(self) -> int:
        """Total width W = sign + int + frac."""
        return self.sign + self.int + self.frac

    @property
    def raw_min(self) -> int:
        return -(1 << (self.bits - 1))

    @property
    def raw_max(self) -> int:
        return (1 << (self.bits - 1)) - 1

    @property
    def clash_type(self) -> str:
        """The Clash type: Clash counts the sign bit as an integer bit."""
        return f"SFixed {self.sign + self.int} {self.frac}"

    @property
    def lsb(self) -> float:
        return 2.0 ** -self.frac

    def __str__(self) -> str:
        return f"{self.sign},{self.int},{self.frac}"

    def to_real(self, raw: np.ndarray | int) -> np.ndarray:
        """Raw integers to the real values they stand for."""
        return np.asarray(raw, dtype=np.float64) * self.lsb


_FORMAT_RE = re.compile(r"^\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*$")


def parse_format(text: str) -> FixedFormat:
    """Parse `"1,7,8"`; reject anything else with a message saying what is wrong."""
    match = _FORMAT_RE.match(text)
    if not match:
        raise K2CError(
            f"bad format {text!r}: expected three integers 'sign,int,frac', e.g. '1,7,8'"
        )
    sign, integer, frac = (int(g) for g in match.groups())
    return make_format(sign, integer, frac, text=text)


def make_format(sign: int, integer: int, frac: int, *, text: str | None = None) -> FixedFormat:
    """Validate a format triple (signed only, 1..64 bits, no negative field)."""
    label = text if text is not None else f"{sign},{integer},{frac}"
    if sign not in (0, 1):
        raise K2CError(f"bad format {label!r}: sign must be 1 (signed); got {sign}")
    if sign == 0:
        raise K2CError(
            f"bad format {label!r}: unsigned formats are not supported "
            "(weights of a trained network are signed); use sign 1"
        )
    if integer < 0 or frac < 0:
        raise K2CError(f"bad format {label!r}: integer and fraction bits must be >= 0")
    fmt = FixedFormat(sign, integer, frac)
    if fmt.bits > MAX_BITS:
        raise K2CError(f"bad format {label!r}: {fmt.bits} bits, at most {MAX_BITS} supported")
    return fmt


def saturate(raw: np.ndarray, fmt: FixedFormat) -> np.ndarray:
    """Clamp raw integers to the format's range (the hardware never wraps)."""
    return np.clip(raw, fmt.raw_min, fmt.raw_max)


def _round_and_clamp(x: np.ndarray, fmt: FixedFormat) -> tuple[np.ndarray, np.ndarray]:
    """Exact `floor(x * 2^frac + 1/2)` saturated to `fmt`, as int64, and where it saturated.

    Exact for every finite float64 and every width up to 64 bits, with no float rounding
    anywhere: `x * 2^frac` is exact in float64 (a power-of-two scale; it can only overflow
    to infinity, which saturates anyway); `floor` is exact, and so is the fraction
    `y - floor(y)` (zero once `|y| >= 2^52`, where every float is an integer); the range
    limits `±2^(W-1)` are powers of two, so comparing against them is exact, and a floor
    inside the range is an integer below 2^63 in magnitude, which int64 holds exactly.
    (Adding 1/2 in float64 first, as a naive version does, rounds: 0.5 - 2^-54 + 0.5 is
    1.0; and the largest raw value of a format wider than 53 bits is not a float64.)
    """
    x = np.asarray(x, dtype=np.float64)
    shape = x.shape
    x = x.reshape(-1)
    if np.isnan(x).any():
        raise K2CError(f"cannot quantize NaN to the fixed-point format {fmt}")
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.ldexp(x, fmt.frac)
        low = np.floor(y)
        up = (y - low) >= 0.5  # inf - inf is NaN: False, and the limits below catch it
    limit = 2.0 ** (fmt.bits - 1)
    high = (low + up) >= limit  # low + 1 is exact wherever up is True (|low| < 2^52)
    under = low < -limit
    inside = ~(high | under)
    q = np.where(inside, low, 0.0).astype(np.int64) + (up & inside)
    q[high] = fmt.raw_max
    q[under] = fmt.raw_min
    return q.reshape(shape), ~inside.reshape(shape)


def quantize(x: np.ndarray, fmt: FixedFormat) -> np.ndarray:
    """Real values to raw integers: round to nearest, ties toward +inf, then saturate.

    Exact for every float64 (and so every float32) and every format the tool accepts
    (1..64 bits): the result equals `floor(Fraction(x) * 2^frac + 1/2)` clamped to the
    format's range (tests/test_reliability_b.py checks it with hypothesis). NaN is refused.
    """
    return _round_and_clamp(x, fmt)[0]


def count_saturated(x: np.ndarray, fmt: FixedFormat) -> tuple[int, float]:
    """How many values of `x` do not fit `fmt`, and the worst absolute error quantizing them."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return 0, 0.0
    q, saturated = _round_and_clamp(x, fmt)
    over = int(np.count_nonzero(saturated))
    worst = float(np.max(np.abs(fmt.to_real(q) - x)))
    return over, worst
