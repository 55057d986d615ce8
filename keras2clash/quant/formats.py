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
"""Widest format accepted: raw values must fit numpy's int64 in the golden model."""


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


def quantize(x: np.ndarray, fmt: FixedFormat) -> np.ndarray:
    """Real values to raw integers: round to nearest, ties toward +inf, then saturate.

    Done in float64; float32 inputs times a power of two are exact there, so the only
    rounding is the one the contract states.
    """
    scaled = np.floor(np.asarray(x, dtype=np.float64) * (2.0**fmt.frac) + 0.5)
    lo, hi = float(fmt.raw_min), float(fmt.raw_max)
    return np.clip(scaled, lo, hi).astype(np.int64)


def count_saturated(x: np.ndarray, fmt: FixedFormat) -> tuple[int, float]:
    """How many values of `x` do not fit `fmt`, and the worst absolute error quantizing them."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return 0, 0.0
    q = quantize(x, fmt)
    scaled = np.floor(x * (2.0**fmt.frac) + 0.5)
    over = int(np.count_nonzero(scaled != q))
    worst = float(np.max(np.abs(fmt.to_real(q) - x)))
    return over, worst
