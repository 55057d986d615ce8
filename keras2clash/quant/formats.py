"""Fixed-point formats and the one quantization rule (docs/guide/contract.md).

A format is the thesis' `(sign, int, frac)` triple plus the two modes a quantization-aware
model may ask for: how a value between two steps is rounded (`nearest`, ties toward +inf,
the default; `nearest_even`, ties to even, as tf.round and QKeras; or `truncate`, toward -inf) and how a value beyond the range is brought back
(`saturate`, the default; or `wrap`, modulo 2^W). Unsigned formats (`sign = 0`), negative
integer bits (small values) and negative fraction bits (large values, steps above 1) are
formats too. Everything that turns a real number into hardware bits goes through
`quantize`, and every requantization through `requantize`, so the golden model, the weight
files and the Keras "rounded" rung of the ladder all round the same way. A format's text is
`"sign,int,frac[,rounding[,overflow]]"` or an hls4ml / Vivado type `ap_fixed<W,I,Q,O>`
(`parse_format` reads both; `ap_type` writes the second).

Raw integers. A format's values are `q * 2^-frac` with `q` a W-bit integer; the raw integer
the golden model and the hardware hold is that value in units of `2^-raw_frac`, with
`raw_frac = max(frac, 0)`: `q` itself whenever `frac >= 0`, `q * 2^-frac` (a multiple of
the step) when `frac < 0`. The hardware stores it in the format's *container*, the
narrowest Clash `SFixed` (signed, no negative field) that holds every value exactly:
`(1, max(int, 0), raw_frac)`. For today's formats (signed, `int, frac >= 0`) the container
is the format itself.
"""

from __future__ import annotations

import builtins
import math
import re
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from keras2clash.errors import K2CError

MAX_BITS = 64
"""Widest format (and widest container) accepted: raw values fit numpy's int64 (wider
intermediate values in the golden model use Python integers), and quantizing is exact up to
this width."""

MIN_HARDWARE_BITS = 2
"""Narrowest container `emit` builds: Clash 1.6.4 turns the saturation of a 1-bit `SFixed 1 0`
into a zero-width bit slice (`x[0+:(1-1)]`) that Verilator rejects. The golden model and
the precision sweep still take 1-bit formats."""

NEAREST, TRUNCATE = "nearest", "truncate"
NEAREST_EVEN = "nearest_even"  # ties to even: ap_fixed AP_RND_CONV, tf.round, QKeras, HGQ2 RND_CONV
SATURATE, WRAP = "saturate", "wrap"
ROUNDING_NAMES = {
    "nearest": NEAREST,
    "rnd": NEAREST,
    "round": NEAREST,
    "nearest_even": NEAREST_EVEN,
    "rnd_conv": NEAREST_EVEN,
    "conv": NEAREST_EVEN,
    "truncate": TRUNCATE,
    "trn": TRUNCATE,
    "floor": TRUNCATE,
}
OVERFLOW_NAMES = {"saturate": SATURATE, "sat": SATURATE, "wrap": WRAP}
"""Accepted spellings of the modes in `S,I,F,ROUNDING,OVERFLOW` (the first of each is canonical)."""
_SHORT = {NEAREST: "rnd", NEAREST_EVEN: "rnd_conv", TRUNCATE: "trn", SATURATE: "sat", WRAP: "wrap"}


@dataclass(frozen=True, order=True)
class FixedFormat:
    """A fixed-point format: `sign` bit (1 signed, 0 unsigned), `int` integer bits, `frac`
    fraction bits (either may be negative as long as W = sign + int + frac >= 1), and the
    rounding (`nearest`/`nearest_even`/`truncate`) and overflow (`saturate`/`wrap`) modes used wherever a
    value is quantized or requantized to it. `FixedFormat(1, 7, 8)` is the default contract."""

    sign: builtins.int
    int: builtins.int
    frac: builtins.int
    rounding: str = NEAREST
    overflow: str = SATURATE

    @property
    def bits(self) -> builtins.int:
        """Total width W = sign + int + frac (the format's own width, not its container's)."""
        return self.sign + self.int + self.frac

    @property
    def raw_frac(self) -> builtins.int:
        """Fraction bits of the raw integers (and of the hardware container): max(frac, 0)."""
        return max(self.frac, 0)

    @property
    def step(self) -> builtins.int:
        """Raw integers between two neighbouring values: 2^-frac when frac < 0, else 1."""
        return 1 << max(-self.frac, 0)

    @property
    def q_min(self) -> builtins.int:
        """The smallest W-bit code: -2^(W-1) signed, 0 unsigned."""
        return -(1 << (self.bits - 1)) if self.sign else 0

    @property
    def q_max(self) -> builtins.int:
        """The largest W-bit code: 2^(W-1) - 1 signed, 2^W - 1 unsigned."""
        return (1 << (self.bits - 1)) - 1 if self.sign else (1 << self.bits) - 1

    @property
    def raw_min(self) -> builtins.int:
        return self.q_min * self.step

    @property
    def raw_max(self) -> builtins.int:
        return self.q_max * self.step

    @property
    def container(self) -> FixedFormat:
        """The signed, non-negative-field format the hardware holds this one in (exact)."""
        return FixedFormat(1, max(self.int, 0), self.raw_frac)

    @property
    def hw_bits(self) -> builtins.int:
        """Bits the hardware spends on one value: the container's width."""
        return 1 + max(self.int, 0) + self.raw_frac

    @property
    def is_native(self) -> bool:
        """Signed with no negative field: its own container (today's formats)."""
        return self.sign == 1 and self.int >= 0 and self.frac >= 0

    @property
    def default_modes(self) -> bool:
        return self.rounding == NEAREST and self.overflow == SATURATE

    @property
    def is_plain(self) -> bool:
        """Native with the default modes: every block of the tool takes it."""
        return self.is_native and self.default_modes

    @property
    def clash_type(self) -> str:
        """The Clash type of the container: Clash counts the sign bit as an integer bit."""
        return f"SFixed {1 + max(self.int, 0)} {self.raw_frac}"

    @property
    def lsb(self) -> float:
        """The real value of raw integer 1 (2^-raw_frac): `raw * lsb` is the value."""
        return 2.0**-self.raw_frac

    @property
    def resolution(self) -> float:
        """The distance between two neighbouring values, 2^-frac."""
        return 2.0**-self.frac

    @property
    def modes(self) -> str:
        """`rnd,sat`-style text of the two modes."""
        return f"{_SHORT[self.rounding]},{_SHORT[self.overflow]}"

    def __str__(self) -> str:
        base = f"{self.sign},{self.int},{self.frac}"
        return base if self.default_modes else f"{base},{self.modes}"

    def with_modes(self, rounding: str | None = None, overflow: str | None = None) -> FixedFormat:
        """The same width with other modes (names as in ROUNDING_NAMES / OVERFLOW_NAMES)."""
        return make_format(self.sign, self.int, self.frac, rounding or self.rounding, overflow or self.overflow)

    def to_real(self, raw: np.ndarray | builtins.int) -> np.ndarray:
        """Raw integers to the real values they stand for."""
        return np.asarray(raw, dtype=np.float64) * self.lsb


_FORMAT_RE = re.compile(r"^\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*((?:,\s*[A-Za-z_]+\s*){0,2})$")


def parse_format(text: str) -> FixedFormat:
    """Parse `"1,7,8"`, `"0,4,4"` (unsigned), `"1,7,8,trn,wrap"` (modes) or an hls4ml /
    Vivado type `ap_fixed<16,8,AP_RND,AP_SAT>` (quant.hls4ml); reject anything else with a
    message saying what is wrong."""
    if "<" in text:
        return parse_ap_type(text)
    match = _FORMAT_RE.match(text)
    if not match:
        raise K2CError(
            f"bad format {text!r}: expected three integers 'sign,int,frac' and optional modes, e.g. '1,7,8', "
            "'0,4,4' (unsigned) or '1,7,8,trn,wrap', or an ap_fixed<W,I,...> type"
        )
    sign, integer, frac = (int(g) for g in match.groups()[:3])
    modes = [m.strip() for m in match.group(4).split(",") if m.strip()]
    rounding = modes[0] if modes else NEAREST
    overflow = modes[1] if len(modes) > 1 else SATURATE
    return make_format(sign, integer, frac, rounding, overflow, text=text)


def make_format(
    sign: int, integer: int, frac: int, rounding: str = NEAREST, overflow: str = SATURATE, *, text: str | None = None
) -> FixedFormat:
    """Validate a format: sign 0 or 1, 1 <= W <= 64, a container of at most 64 bits, known modes."""
    label = text if text is not None else f"{sign},{integer},{frac}"
    if sign not in (0, 1):
        raise K2CError(f"bad format {label!r}: sign must be 1 (signed) or 0 (unsigned); got {sign}")
    round_mode = ROUNDING_NAMES.get(str(rounding).strip().lower())
    if round_mode is None:
        raise K2CError(
            f"bad format {label!r}: rounding {rounding!r} unknown; use nearest (rnd), nearest_even (rnd_conv) or truncate (trn)"
        )
    over_mode = OVERFLOW_NAMES.get(str(overflow).strip().lower())
    if over_mode is None:
        raise K2CError(f"bad format {label!r}: overflow {overflow!r} unknown; use saturate (sat) or wrap")
    fmt = FixedFormat(sign, integer, frac, round_mode, over_mode)
    if fmt.bits < 1:
        raise K2CError(f"bad format {label!r}: sign + int + frac = {fmt.bits} bits; a format needs at least 1")
    if fmt.bits > MAX_BITS:
        raise K2CError(f"bad format {label!r}: {fmt.bits} bits, at most {MAX_BITS} supported")
    if fmt.hw_bits > MAX_BITS:
        raise K2CError(
            f"bad format {label!r}: its values need a {fmt.hw_bits}-bit container ({fmt.container}), "
            f"at most {MAX_BITS} supported"
        )
    return fmt


# Vivado/Vitis HLS fixed-point type names (`ap_fixed<W,I,Q,O>`) <-> our formats.
#
# hls4ml states every precision as such a type. `I` counts the sign bit, so
# `ap_fixed<16,8>` holds our `1,7,8`; `ap_ufixed<8,4>` is the unsigned `0,4,4`. Without
# modes an ap type truncates (AP_TRN, toward -inf) and wraps (AP_WRAP): `ap_fixed<16,8>` is
# `1,7,8,trn,wrap`, and our default contract `1,7,8` is `ap_fixed<16,8,AP_RND,AP_SAT>`
# (AP_RND rounds to nearest with ties toward +inf, exactly our rounding). Only the modes the
# hardware builds exactly are accepted; the others are refused with the one we would need.

AP_ROUNDING = {
    "AP_RND": NEAREST,
    "RND": NEAREST,
    "AP_TRN": TRUNCATE,
    "TRN": TRUNCATE,
    "AP_RND_CONV": NEAREST_EVEN,
    "RND_CONV": NEAREST_EVEN,
}
AP_OVERFLOW = {"AP_SAT": SATURATE, "SAT": SATURATE, "AP_WRAP": WRAP, "WRAP": WRAP}
AP_UNSUPPORTED = {
    "AP_RND_ZERO": "rounds ties toward zero",
    "AP_RND_MIN_INF": "rounds ties toward -inf",
    "AP_RND_INF": "rounds ties away from zero",
    "AP_TRN_ZERO": "truncates toward zero",
    "AP_SAT_ZERO": "overflows to zero",
    "AP_SAT_SYM": "saturates symmetrically",
    "AP_WRAP_SM": "wraps sign-magnitude",
}
"""Modes hls4ml knows that the contract does not build (each refused with what it does)."""

_AP_RE = re.compile(r"^\s*(?:ap_)?(u?fixed|u?int)\s*<([^<>]*)>\s*$", re.IGNORECASE)


def parse_ap_type(text: str) -> FixedFormat:
    """`ap_fixed<W,I[,Q[,O[,N]]]>`, `ap_ufixed<...>`, `ap_int<W>`, `ap_uint<W>` (the `ap_`
    prefix optional, as hls4ml's `fixed<16,6,RND,SAT>`) -> a format."""
    match = _AP_RE.match(text)
    if not match:
        raise K2CError(
            f"bad type {text!r}: expected ap_fixed<W,I>, ap_fixed<W,I,Q,O>, ap_ufixed<W,I>, ap_int<W> or ap_uint<W>"
        )
    kind = match.group(1).lower()
    args = [a.strip() for a in match.group(2).split(",")]
    unsigned = kind.startswith("u")
    try:
        if kind.endswith("int"):
            if len(args) != 1:
                raise ValueError
            width, integer, modes = int(args[0]), int(args[0]), []
        else:
            if not 2 <= len(args) <= 5:
                raise ValueError
            width, integer, modes = int(args[0]), int(args[1]), args[2:]
    except ValueError:
        raise K2CError(
            f"bad type {text!r}: {kind}<...> takes "
            f"{'W' if kind.endswith('int') else 'W,I and optionally Q, O, N'} (integers W, I)"
        ) from None
    rounding, overflow = TRUNCATE, WRAP  # the ap types' own defaults
    if modes:
        rounding = _ap_mode(modes[0], AP_ROUNDING, text, "quantization")
    if len(modes) > 1:
        overflow = _ap_mode(modes[1], AP_OVERFLOW, text, "overflow")
    if len(modes) > 2 and modes[2] not in ("0",):
        raise K2CError(f"bad type {text!r}: saturation bits N={modes[2]} are not supported (only 0)")
    sign = 0 if unsigned else 1
    return make_format(sign, integer - sign, width - integer, rounding, overflow, text=text)


def _ap_mode(name: str, known: dict[str, str], text: str, what: str) -> str:
    key = name.strip().upper()
    if key in known:
        return known[key]
    if key in AP_UNSUPPORTED:
        choices = " or ".join(k for k in known if k.startswith("AP_"))
        raise K2CError(
            f"type {text!r}: {what} mode {key} ({AP_UNSUPPORTED[key]}) is not built by keras2clash; use {choices}"
        )
    raise K2CError(f"bad type {text!r}: unknown {what} mode {name!r}")


def ap_type(fmt: FixedFormat) -> str:
    """The exact ap type of a format, both modes spelled out (parse_ap_type's inverse)."""
    q = {NEAREST: "AP_RND", NEAREST_EVEN: "AP_RND_CONV", TRUNCATE: "AP_TRN"}[fmt.rounding]
    o = "AP_SAT" if fmt.overflow == SATURATE else "AP_WRAP"
    kind = "ap_fixed" if fmt.sign else "ap_ufixed"
    return f"{kind}<{fmt.bits},{fmt.sign + fmt.int},{q},{o}>"


def saturate(raw: np.ndarray, fmt: FixedFormat) -> np.ndarray:
    """Clamp raw integers to the format's range."""
    return np.clip(raw, fmt.raw_min, fmt.raw_max)


def overflow(q: np.ndarray, fmt: FixedFormat) -> np.ndarray:
    """W-bit codes `q` (any integers) brought into the format's range by its overflow mode:
    clamp (saturate), or keep the low W bits, sign- or zero-extended (wrap)."""
    if fmt.overflow == SATURATE:
        return np.clip(q, fmt.q_min, fmt.q_max)
    mask = (1 << fmt.bits) - 1
    return ((q - fmt.q_min) & mask) + fmt.q_min


def grid_frac(values: np.ndarray, most: int = MAX_BITS) -> int | None:
    """The fewest fraction bits (possibly negative, at most `most`) that hold every value
    exactly: the power-of-two grid a quantizer put constants on; None when none does."""
    nonzero = np.asarray(values, dtype=np.float64)
    nonzero = nonzero[nonzero != 0]
    if nonzero.size == 0:
        return 0
    for frac in range(-MAX_BITS, most + 1):
        scaled = np.ldexp(nonzero, frac)
        if np.all(scaled == np.floor(scaled)):
            return frac
    return None


def _round_and_clamp(x: np.ndarray, fmt: FixedFormat) -> tuple[np.ndarray, np.ndarray]:
    """Exact `round(x * 2^frac)` (nearest: `floor(y + 1/2)`, nearest_even: ties to the even
    integer, truncate: `floor(y)`) brought into
    `fmt`'s range by its overflow mode, as int64 raw integers, and where it was out of range.

    Saturating, exact for every finite float64 and every width up to 64 bits, with no float
    rounding anywhere: `x * 2^frac` is exact in float64 (a power-of-two scale; it can only
    overflow to infinity, which saturates anyway, or, with frac < 0, underflow a value far
    below one step, where only its sign matters and is kept); `floor` is exact, and so is the fraction
    `y - floor(y)` (zero once `|y| >= 2^52`, where every float is an integer); the range
    limits are powers of two (or one less), so comparing against them is exact, and a floor
    inside the range is an integer below 2^64 in magnitude, converted exactly.
    (Adding 1/2 in float64 first, as a naive version does, rounds: 0.5 - 2^-54 + 0.5 is
    1.0; and the largest raw value of a format wider than 53 bits is not a float64.)
    Wrapping needs the exact integer of every input, so it takes the Fraction route.
    """
    x = np.asarray(x, dtype=np.float64)
    shape = x.shape
    x = x.reshape(-1)
    if np.isnan(x).any():
        raise K2CError(f"cannot quantize NaN to the fixed-point format {fmt}")
    if fmt.overflow == WRAP:
        return _wrap_exact(x, fmt, shape)
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.ldexp(x, fmt.frac)
        # a negative frac can underflow a tiny x: y is then a subnormal of the right sign or
        # zero, |exact y| < 2^-1000, whose floor is -1 for a negative x (not -0.0's 0)
        low = np.where((y == 0) & (x < 0), -1.0, np.floor(y))
        rest = y - low
        if fmt.rounding == NEAREST:
            up = rest >= 0.5
        elif fmt.rounding == NEAREST_EVEN:  # a tie goes to the even neighbour (|low| >= 2^53: rest is 0)
            up = (rest > 0.5) | ((rest == 0.5) & (np.fmod(low, 2.0) != 0))
        else:
            up = np.zeros(y.shape, dtype=bool)
    high = (low + up) >= float(fmt.q_max + 1)  # a power of two: an exact comparison
    under = (low + up) < float(fmt.q_min)  # a value that rounds up onto q_min fits
    inside = ~(high | under)
    q = np.where(inside, low, 0.0).astype(np.int64) + (up & inside)
    q[high] = fmt.q_max
    q[under] = fmt.q_min
    return (q * fmt.step).reshape(shape), ~inside.reshape(shape)


def _wrap_exact(x: np.ndarray, fmt: FixedFormat, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Quantizing with wrap-around: each value's exact code from its Fraction, modulo 2^W."""
    if np.isinf(x).any():
        raise K2CError(f"cannot quantize infinity to the wrapping format {fmt}")
    codes = []
    scale = Fraction(2) ** fmt.frac
    for v in x.tolist():
        y = Fraction(v) * scale
        if fmt.rounding == NEAREST:
            codes.append(math.floor(y + Fraction(1, 2)))
        elif fmt.rounding == NEAREST_EVEN:
            codes.append(round(y))  # Fraction.__round__: ties to even
        else:
            codes.append(math.floor(y))
    q = np.array(codes, dtype=object)
    outside = (q < fmt.q_min) | (q > fmt.q_max)
    wrapped = overflow(q, fmt)
    return (wrapped.astype(np.int64) * fmt.step).reshape(shape), np.asarray(outside, dtype=bool).reshape(shape)


def quantize(x: np.ndarray, fmt: FixedFormat) -> np.ndarray:
    """Real values to raw integers: round by the format's rounding mode (default nearest,
    ties toward +inf), then its overflow mode (default saturate).

    Exact for every float64 (and so every float32) and every format the tool accepts: the
    result equals the mode applied to `Fraction(x) * 2^frac`, times `step` (tests check it
    with hypothesis against fractions.Fraction). NaN is refused."""
    return _round_and_clamp(x, fmt)[0]


def requantize(raw: np.ndarray, frac: int, fmt: FixedFormat) -> np.ndarray:
    """Raw integers with `frac >= 0` fraction bits (an accumulator) to `fmt`'s raw integers:
    drop `d = frac - fmt.frac` bits by the rounding mode (nearest: add 2^(d-1), then an
    arithmetic shift; nearest_even: add 2^(d-1) - 1 plus the lowest kept bit; truncate: the
    shift alone), or scale up exactly when `d <= 0`; then
    the overflow mode on the W-bit code; then times `step`. numpy int64 or object arrays
    (the caller picks a dtype wide enough for the sum and the shifts)."""
    raw = np.asarray(raw)
    d = frac - fmt.frac
    if d > 0:
        if fmt.rounding == NEAREST:
            q = (raw + (1 << (d - 1))) >> d
        elif fmt.rounding == NEAREST_EVEN:  # half - 1, plus 1 when the kept part is odd
            q = (raw + ((1 << (d - 1)) - 1) + ((raw >> d) & 1)) >> d
        else:
            q = raw >> d
    else:
        q = raw << -d
    return overflow(q, fmt) * fmt.step


def count_saturated(x: np.ndarray, fmt: FixedFormat) -> tuple[int, float]:
    """How many values of `x` do not fit `fmt`, and the worst absolute error quantizing them."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return 0, 0.0
    q, saturated = _round_and_clamp(x, fmt)
    over = int(np.count_nonzero(saturated))
    worst = float(np.max(np.abs(fmt.to_real(q) - x)))
    return over, worst
