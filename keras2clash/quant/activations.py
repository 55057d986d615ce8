"""Activation functions: their Keras 3 definitions and what the hardware computes instead
(docs/guide/contract.md, "Activations"), on raw integers.

An activation is named by a canonical text (`"sigmoid"`, `"leaky_relu(negative_slope=0.2)"`,
`"relu(max_value=6.0)"`, `"prelu(alpha=[0.25, 0.1])"`): the IR records, the plan and the
manifest carry that text, `parse` turns it into an `Act`. Every function maps a raw input in
format `fi` to a raw output in format `fo` (a fused activation has `fi == fo`, the layer's
output format; a standalone one reads its producer's format). Four families:

- `relu` (ReLU with threshold / max_value / negative_slope, relu6, leaky_relu, PReLU): exact
  comparisons and one product with the slope quantized to SLOPE_FRAC fraction bits, one
  rounding half up, saturate.
- `hard` (hard_sigmoid, hard_silu): the exact rational value, rounded once.
- `table` (sigmoid, tanh, elu, selu, softplus, softsign, silu, gelu, exponential): a table
  indexed by the input's raw value shifted right, clipped to the range where the rounded
  function is not on its tails; the maximum error is found by enumerating every input.
- `softmax`: over the last axis (one beat), an exponential table on `max - x`, an exact sum
  and an exact division per element.
The tables are computed here once and used both by the golden model and (as memory files) by
the Clash blocks, so the two agree by construction.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.quant.formats import FixedFormat, quantize, saturate

TABLE_MAX_ENTRIES = 2048
"""Largest activation table: 2048 words of the output width (32 Kbit at 16 bits, one block
RAM or ~512 LUT6 per copy). At 1,7,8 it holds tanh at shift 0 (correctly rounded) and
sigmoid at shift 1 (under one output LSB); a bigger table buys nothing at that format."""

TABLE_MAX_INPUT_BITS = 22
"""Inputs up to this width are all enumerated (4M at 22 bits) to place a table and compute
its exact maximum error; wider inputs are evaluated on 2^22 cells (a bound)."""

SLOPE_FRAC = 16
"""Fraction bits of a quantized slope (leaky_relu, PReLU, ELU/SELU tails): slopes that are
multiples of 2^-16 (powers of two included) are exact."""

SOFTMAX_GUARD_BITS = 4
"""The softmax exponentials have `fo + 4` fraction bits."""

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946

TABLE_FUNCTIONS = ("sigmoid", "tanh", "elu", "selu", "softplus", "softsign", "silu", "gelu", "exponential")
MONOTONE = (
    "linear",
    "relu",
    "sigmoid",
    "tanh",
    "elu",
    "selu",
    "softplus",
    "softsign",
    "exponential",
    "hard_sigmoid",
    "softmax",
)
"""Non-decreasing (softmax: order preserving per sample): the predicted class of an output
with one of these is the argmax of the values before it (relu/prelu: with slopes >= 0)."""

NAMES = (
    "linear",
    "relu",
    "relu6",
    "leaky_relu",
    "prelu",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "swish",
    "softmax",
    *TABLE_FUNCTIONS,
)
"""Activation names the compiler accepts (Keras names; swish = silu, hard_swish = hard_silu)."""


@dataclass(frozen=True)
class Act:
    """A parsed activation. `kind` is the function (`relu` covers the whole ReLU family);
    `params` its Keras parameters; `text` the canonical name it was parsed from."""

    kind: str
    text: str
    threshold: float = 0.0
    max_value: float | None = None
    slopes: tuple[float, ...] = (0.0,)  # negative side (relu family; one per channel: PReLU)
    alpha: float = 1.0  # elu
    approximate: bool = False  # gelu
    scale: float = 1.0  # softmax: of `scale * x` (HGQ2's attention scales its scores inside its exponential table)

    @property
    def family(self) -> str:
        if self.kind in ("linear", "relu", "softmax"):
            return self.kind
        if self.kind in ("hard_sigmoid", "hard_silu"):
            return "hard"
        return "table"

    @property
    def monotone(self) -> bool:
        if self.kind == "relu":
            return all(k >= 0 for k in self.slopes)
        return self.kind in MONOTONE

    @property
    def is_linear(self) -> bool:
        return self.kind == "linear"


def canonical(name: str, **params: object) -> str:
    """The canonical text of an activation: parameters at their defaults are left out."""
    defaults: dict[str, dict[str, object]] = {
        "relu": {"negative_slope": 0.0, "max_value": None, "threshold": 0.0},
        "leaky_relu": {"negative_slope": 0.2},
        "elu": {"alpha": 1.0},
        "gelu": {"approximate": False},
        "softmax": {"scale": 1.0},
    }
    name = {"swish": "silu", "hard_swish": "hard_silu"}.get(name, name)
    kept = {k: v for k, v in params.items() if defaults.get(name, {}).get(k, object()) != v}
    if name == "relu" and kept == {"max_value": 6.0}:
        return "relu6"
    if not kept:
        return name
    return f"{name}({', '.join(f'{k}={_literal(v)}' for k, v in sorted(kept.items()))})"


def _literal(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(repr(float(v)) for v in value) + "]"
    return repr(float(value)) if isinstance(value, (int, float)) and not isinstance(value, bool) else repr(value)


_TEXT = re.compile(r"^([a-z_0-9]+)(?:\((.*)\))?$", re.S)


@functools.cache
def parse(text: str) -> Act:
    """The `Act` of a canonical activation text (ValueError when it is not one)."""
    match = _TEXT.match(text.strip())
    if not match or match.group(1) not in NAMES:
        raise ValueError(f"not an activation: {text!r}")
    name = {"swish": "silu", "hard_swish": "hard_silu"}.get(match.group(1), match.group(1))
    params: dict[str, Any] = {}  # Python literals (`ast.literal_eval`), read by each kind below
    if match.group(2):
        tree = ast.parse(f"f({match.group(2)})", mode="eval").body
        assert isinstance(tree, ast.Call)
        params = {kw.arg: ast.literal_eval(kw.value) for kw in tree.keywords if kw.arg}
    if name == "relu6":
        return Act("relu", text, max_value=6.0)
    if name == "relu":
        return Act(
            "relu",
            text,
            threshold=float(params.get("threshold", 0.0)),
            max_value=None if params.get("max_value") is None else float(params["max_value"]),
            slopes=(float(params.get("negative_slope", 0.0)),),
        )
    if name == "leaky_relu":
        return Act("relu", text, slopes=(float(params.get("negative_slope", 0.2)),))
    if name == "prelu":
        return Act("relu", text, slopes=tuple(float(a) for a in params["alpha"]))
    if name == "elu":
        return Act("elu", text, alpha=float(params.get("alpha", 1.0)))
    if name == "gelu":
        return Act("gelu", text, approximate=bool(params.get("approximate", False)))
    if name == "softmax":
        return Act("softmax", text, scale=float(params.get("scale", 1.0)))
    return Act(name, text)


def is_activation(text: str) -> bool:
    try:
        parse(text)
    except (ValueError, SyntaxError, KeyError):
        return False
    return True


# --- the Keras 3 definitions, in float64 -----------------------------------------------


def _erf(x: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


def keras_float(act: Act, x: np.ndarray) -> np.ndarray:
    """The activation as Keras 3 defines it (keras/src/activations, backend nn), float64.
    Softmax is over the last axis."""
    x = np.asarray(x, dtype=np.float64)
    k = act.kind
    with np.errstate(over="ignore", invalid="ignore"):
        if k == "linear":
            return x
        if k == "relu":
            slopes = np.asarray(act.slopes)
            t = act.threshold
            if act.max_value is None and t == 0:
                return np.where(x > 0, x, slopes * x)
            a = np.where(x > t, x, 0.0) if t != 0 else np.maximum(x, 0.0)
            if act.max_value is not None:
                a = np.clip(a, 0.0, act.max_value)
            return a - slopes * np.maximum(t - x, 0.0)
        if k == "sigmoid":
            return 0.5 * (1.0 + np.tanh(0.5 * x))
        if k == "tanh":
            return np.tanh(x)
        if k == "elu":
            return np.where(x > 0, x, act.alpha * np.expm1(np.minimum(x, 0.0)))
        if k == "selu":
            return _SELU_SCALE * np.where(x > 0, x, _SELU_ALPHA * np.expm1(np.minimum(x, 0.0)))
        if k == "softplus":
            return np.logaddexp(0.0, x)
        if k == "softsign":
            return x / (1.0 + np.abs(x))
        if k == "silu":
            return x * 0.5 * (1.0 + np.tanh(0.5 * x))
        if k == "gelu":
            if act.approximate:
                return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
            return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
        if k == "exponential":
            return np.exp(x)
        if k == "hard_sigmoid":
            return np.clip(x + 3.0, 0.0, 6.0) / 6.0
        if k == "hard_silu":
            return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0
        if k == "softmax":
            x = act.scale * x
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)
    raise ValueError(f"no float definition of {act.text!r}")


# --- the relu family and the hard functions: exact ------------------------------------


def slope_raw(k: float) -> int:
    """A slope quantized to SLOPE_FRAC fraction bits, rounded half up."""
    return int(math.floor(k * (1 << SLOPE_FRAC) + 0.5))


def slope_bits(raws: Iterable[int]) -> int:
    """The width of the hardware's slope constants (`Signed w`, SFixed (w - SLOPE_FRAC)
    SLOPE_FRAC), one for all the raw slopes given: a sign bit, at least SLOPE_FRAC + 1."""
    return max(max(abs(k).bit_length() + 1 for k in raws), SLOPE_FRAC + 1)


@dataclass(frozen=True)
class ReluConstants:
    """The quantized constants of the ReLU family on (fi, fo): `t_cmp = floor(t * 2^fi)`
    (so `r > t_cmp` iff `x > t`, exactly), `t_raw` the threshold rounded to fi (for the
    negative side), `cap` max_value rounded to fo (None: no cap), `slopes` raw."""

    t_cmp: int
    t_raw: int
    cap: int | None
    slopes: tuple[int, ...]


def relu_constants(act: Act, fi: FixedFormat, fo: FixedFormat) -> ReluConstants:
    t_cmp = math.floor(act.threshold * (1 << fi.frac))
    t_raw = math.floor(act.threshold * (1 << fi.frac) + 0.5)
    cap = None if act.max_value is None else int(quantize(np.array(act.max_value), fo))
    return ReluConstants(t_cmp, t_raw, cap, tuple(slope_raw(k) for k in act.slopes))


def per_channel(act: Act, fi: FixedFormat, fo: FixedFormat) -> bool:
    """Whether the function differs between channels (PReLU's slopes once quantized): the
    hardware then applies it to a whole beat as a stage of its own, not inside the layer."""
    return _relu_family_block(act, fi, fo) and len(set(relu_constants(act, fi, fo).slopes)) > 1


def _relu_family_block(act: Act, fi: FixedFormat, fo: FixedFormat) -> bool:
    """Whether the hardware computes `act` with K2C.Relu.reluFamily (a plain relu that keeps
    its format is K2C.Activation.relu, `max 0`)."""
    return act.kind == "relu" and not (act.text == "relu" and fi == fo)


def multiplies(act: Act, fi: FixedFormat, fo: FixedFormat) -> bool:
    """Whether the ReLU family's negative side multiplies by a constant that is not a power of
    two (a shift): the hardware then cuts the function in two register stages (K2C.Relu's
    reluProduct and reluSelect, K2C.Pipe.mapP2)."""
    return _relu_family_block(act, fi, fo) and any(
        k != 0 and abs(k) & (abs(k) - 1) for k in relu_constants(act, fi, fo).slopes
    )


def _shift_round(v: np.ndarray, shift: int) -> np.ndarray:
    """floor(v / 2^shift + 1/2) (shift > 0) or v * 2^-shift."""
    return (v + (1 << (shift - 1))) >> shift if shift > 0 else v << (-shift)


def relu_family(r: np.ndarray, act: Act, fi: FixedFormat, fo: FixedFormat) -> np.ndarray:
    """`r > t ? min(round(r'), cap) : round(k * (r - t))`, saturated (contract)."""
    c = relu_constants(act, fi, fo)
    r = np.asarray(r).astype(object)
    k = np.asarray(c.slopes, dtype=object)
    pos = r if act.max_value is None else np.maximum(r, 0)
    pos = saturate(_shift_round(pos, fi.frac - fo.frac), fo)
    if c.cap is not None:  # Keras caps the positive part only
        pos = np.minimum(pos, c.cap)
    neg = saturate(_shift_round(-k * (c.t_raw - r), fi.frac + SLOPE_FRAC - fo.frac), fo)
    return np.where(r > c.t_cmp, pos, neg)


def hard_function(r: np.ndarray, act: Act, fi: FixedFormat, fo: FixedFormat) -> np.ndarray:
    """hard_sigmoid: `v = clip(r + 3*2^fi, 0, 6*2^fi)`, `y = floor((2 v 2^fo + 6 2^fi) / (12 2^fi))`;
    hard_silu: `y = floor((2 r v 2^fo + 6 2^2fi) / (12 2^2fi))`: the exact value rounded half
    up, then saturated."""
    r = np.asarray(r).astype(object)
    one = 1 << fi.frac
    v = np.minimum(np.maximum(r + 3 * one, 0), 6 * one)
    if act.kind == "hard_sigmoid":
        num, den = 2 * v * (1 << fo.frac) + 6 * one, 12 * one
    else:
        num, den = 2 * r * v * (1 << fo.frac) + 6 * one * one, 12 * one * one
    return saturate(num // den, fo)


# --- tables ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    """A table activation on (fi, fo): index `clip((r >> shift) - low, 0, len(values) - 1)`;
    with `tail_slope` set, inputs `r > tail_from` give `round(tail_slope * r)` instead (the
    function's linear right side, e.g. elu's `x`). `max_error` is the largest
    |hardware - Keras| over every input value, `exact` says it is the correctly rounded value
    everywhere."""

    shift: int
    low: int
    values: tuple[int, ...]
    tail_from: int | None
    tail_slope: int | None
    max_error: float
    max_error_lsb: float
    exact: bool
    inputs: int


_TAIL_SLOPE = {"elu": 1.0, "selu": _SELU_SCALE, "softplus": 1.0, "silu": 1.0, "gelu": 1.0}
_TAIL_SLOPE_OF = {slope_raw(k) / (1 << SLOPE_FRAC): k for k in _TAIL_SLOPE.values()}
"""The exact slope behind each quantized one (for the wide-input error bound)."""


def _tail(r: np.ndarray, slope: int, fi: FixedFormat, fo: FixedFormat) -> np.ndarray:
    return saturate(_shift_round(np.asarray(r).astype(object) * slope, fi.frac + SLOPE_FRAC - fo.frac), fo)


def check(text: str, fi: FixedFormat, where: str = "") -> None:
    """Refuse, before any table is built, what the hardware cannot build (`where` names the
    layer in the message): today every activation text `parse` accepts builds at any width."""
    try:
        parse(text)
    except (ValueError, SyntaxError, KeyError):
        raise K2CError(f"{where}unknown activation '{text}'") from None


def _cells(fi: FixedFormat) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The inputs the compiler evaluates: every raw value when the input has at most
    TABLE_MAX_INPUT_BITS bits, otherwise 2^22 aligned cells of 2^drop raw values. Returns the
    cell indices (int64) and the real values of each cell's two ends (equal without cells)."""
    drop = max(0, fi.bits - TABLE_MAX_INPUT_BITS)
    cells = np.arange(fi.raw_min >> drop, (fi.raw_max >> drop) + 1, dtype=np.int64)
    lo = cells * 2.0 ** (drop - fi.frac)
    return cells, lo, lo + ((1 << drop) - 1) * 2.0**-fi.frac, drop


@functools.lru_cache(maxsize=256)
def table(text: str, fi: FixedFormat, fo: FixedFormat) -> Table:
    """Place the table of a smooth activation (contract: table activations). Inputs of at
    most 22 bits are all enumerated (the error is exact); wider inputs are evaluated at both
    ends of 2^22 cells nested in the table's buckets, which bounds the error of functions
    monotone within a cell (all of them but gelu/silu in the cell of their minimum)."""
    act = parse(text)
    cells, x_lo, x_hi, drop = _cells(fi)
    f_lo, f_hi = keras_float(act, x_lo), keras_float(act, x_hi)
    slope = slope_raw(_TAIL_SLOPE[act.kind]) if act.kind in _TAIL_SLOPE else None
    k = None if slope is None else slope / (1 << SLOPE_FRAC)
    with np.errstate(over="ignore"):
        q_lo, q_hi = quantize(f_lo, fo).astype(np.int64), quantize(f_hi, fo).astype(np.int64)
        if slope is None:
            right_lo = right_hi = np.full_like(q_lo, q_hi[-1])
        elif drop == 0:
            right_lo = right_hi = _tail(cells, slope, fi, fo).astype(np.int64)
        else:  # only places the table: the error below is computed independently
            right_lo, right_hi = quantize(k * x_lo, fo), quantize(k * x_hi, fo)
    differs_left = np.nonzero((q_lo != q_lo[0]) | (q_hi != q_lo[0]))[0]
    differs_right = np.nonzero((q_lo != right_lo) | (q_hi != right_hi))[0]
    n = len(cells)
    first = int(differs_left[0]) if differs_left.size else n - 1
    last = int(differs_right[-1]) if differs_right.size else first
    first = min(first, last)
    lo_raw, hi_raw = int(cells[first]) << drop, ((int(cells[last]) + 1) << drop) - 1
    if act.kind in ("elu", "selu"):  # Keras: x > 0 -> the linear side, by definition
        hi_raw = min(hi_raw, 0)
    for shift in range(drop, fi.bits + 1):
        low = (lo_raw >> shift) - (1 if first > 0 else 0)
        high = (hi_raw >> shift) + (1 if slope is None and last < n - 1 else 0)
        if high - low + 1 <= TABLE_MAX_ENTRIES:
            break
    ks = np.arange(low, high + 1, dtype=np.int64)
    centres = ks * float(1 << shift) + ((1 << shift) - 1) / 2.0
    with np.errstate(over="ignore"):
        values = quantize(keras_float(act, centres * 2.0**-fi.frac), fo).astype(np.int64)
    if first > 0:
        values[0] = q_lo[0]
    if slope is None and last < n - 1:
        values[-1] = q_hi[-1]
    draft = Table(
        shift, low, tuple(int(v) for v in values), hi_raw if slope is not None else None, slope, 0.0, 0.0, False, n
    )
    clip = (fo.raw_min * fo.lsb, fo.raw_max * fo.lsb)
    if drop == 0:
        hw = np.asarray(table_lookup(cells, draft, fi, fo))
        with np.errstate(over="ignore"):
            exact = bool(np.array_equal(hw, quantize(f_lo, fo)))
        worst = float(np.max(np.abs(hw * fo.lsb - np.clip(f_lo, *clip))))
    else:
        exact = False
        worst = _wide_error(draft, cells, drop, (x_lo, x_hi), (f_lo, f_hi), k, fo)
    return Table(shift, low, draft.values, draft.tail_from, slope, worst, worst * (1 << fo.frac), exact, n)


def _wide_error(
    t: Table,
    cells: np.ndarray,
    drop: int,
    xs: tuple[np.ndarray, np.ndarray],
    fs: tuple[np.ndarray, np.ndarray],
    k: float | None,
    fo: FixedFormat,
) -> float:
    """A bound of the error on 2^drop-wide cells: the table's value is constant on a cell
    (its buckets are at least as wide), the function is taken at both ends; on the linear
    side, `round(k_q x)` is within 0.5 LSB + |k_q - k'| |x| + |k' x - f(x)| of f."""
    clip = (fo.raw_min * fo.lsb, fo.raw_max * fo.lsb)
    idx = np.clip((cells >> (t.shift - drop)) - t.low, 0, len(t.values) - 1)
    hw = np.asarray(t.values, dtype=np.float64)[idx] * fo.lsb
    worst = 0.0
    for x, f in zip(xs, fs):
        err = np.abs(hw - np.clip(f, *clip))
        if t.tail_from is not None and t.tail_slope is not None and k is not None:
            kq = t.tail_slope / (1 << SLOPE_FRAC)
            true_k = _TAIL_SLOPE_OF.get(kq, kq)
            line = fo.lsb / 2 + abs(kq - true_k) * np.abs(x) + np.abs(true_k * x - f)
            split = t.tail_from >> drop  # the cell holding tail_from: both sides
            err = np.where(cells > split, line, np.where(cells == split, np.maximum(err, line), err))
        worst = max(worst, float(err.max()))
    return worst


def table_lookup(r: np.ndarray, t: Table, fi: FixedFormat, fo: FixedFormat) -> np.ndarray:
    """The table activation on raw inputs (what K2C.Lut computes)."""
    r = np.asarray(r)
    rr = r.astype(np.int64) if r.dtype != object else r
    idx = np.clip((rr >> t.shift) - t.low, 0, len(t.values) - 1).astype(np.int64)
    y = np.asarray(t.values, dtype=np.int64)[idx]
    if t.tail_slope is not None and t.tail_from is not None:
        y = np.where(rr > t.tail_from, _tail(rr, t.tail_slope, fi, fo), y)
    return y


# --- softmax ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SoftmaxTable:
    """Softmax over n values on (fi, fo): `e_i = exp_table[min((max - r_i) >> shift, len - 1)]`
    (fraction bits `frac`, the last entry 0), `S = sum e_i`, `y_i = floor((2 e_i 2^fo + S) /
    (2 S))` saturated. `error_bound` bounds |hardware - Keras| per output (derivation in
    docs/guide/contract.md): `(2 rho + (n + 1) eta) / (1 - rho - n eta) + 2^-(fo+1)`."""

    shift: int
    frac: int
    values: tuple[int, ...]
    rho: float
    eta: float
    n: int
    error_bound: float


SOFTMAX_MAX_FRAC = 58
"""The exponentials' fraction bits are at most this (their words stay within 60 bits)."""


@functools.lru_cache(maxsize=256)
def softmax_table(fi: FixedFormat, fo: FixedFormat, n: int, scale: float = 1.0) -> SoftmaxTable:
    """The softmax of `scale * x` over `n` values of `fi`: its exponential table on the raw
    differences `d` (each entry `exp(-scale d 2^-fi)`), with its error bound."""
    frac = min(fo.frac + SOFTMAX_GUARD_BITS, SOFTMAX_MAX_FRAC)
    eta = 2.0 ** -(frac + 1)
    step = scale * 2.0**-fi.frac  # the real exponent of one raw unit of difference
    d_top = min((1 << fi.bits) - 1, math.ceil((frac + 1) * math.log(2) / step))
    shift = 0
    while (d_top >> shift) + 2 > TABLE_MAX_ENTRIES:
        shift += 1
    size = (d_top >> shift) + 2
    starts = np.arange(size - 1) * float(1 << shift)
    centres = starts + ((1 << shift) - 1) / 2.0
    values = np.append(quantize(np.exp(-centres * step), FixedFormat(1, 1, frac)), 0)
    # exp is monotone: within a bucket the error is largest at an end; t >= t(end of bucket)
    t_start = np.exp(-starts * step)
    t_end = np.exp(-(starts + (1 << shift) - 1) * step)
    e = values[:-1] * 2.0**-frac
    gap = np.maximum(np.abs(e - t_start), np.abs(e - t_end))
    rho = float(np.max(np.maximum(gap - eta, 0.0) / t_end))
    bound = (2 * rho + (n + 1) * eta) / (1 - rho - n * eta) + 2.0 ** -(fo.frac + 1)
    return SoftmaxTable(shift, frac, tuple(int(v) for v in values), rho, eta, n, bound)


def softmax_raw(r: np.ndarray, fi: FixedFormat, fo: FixedFormat, scale: float = 1.0) -> np.ndarray:
    """Softmax of `scale * x` over the last axis on raw integers (what K2C.Softmax computes)."""
    r = np.asarray(r).astype(object)
    t = softmax_table(fi, fo, r.shape[-1], scale)
    d = r.max(axis=-1, keepdims=True) - r
    idx = np.minimum(d >> t.shift, len(t.values) - 1)
    e = np.asarray(t.values, dtype=object)[idx.astype(np.int64)]
    total = e.sum(axis=-1, keepdims=True)
    return saturate((2 * e * (1 << fo.frac) + total) // (2 * total), fo)


# --- dispatch --------------------------------------------------------------------------


def apply(r: np.ndarray, text: str, fi: FixedFormat, fo: FixedFormat) -> np.ndarray:
    """The hardware activation on raw values in fi -> raw values in fo (int64)."""
    act = parse(text)
    r = np.asarray(r)
    if act.kind == "linear":
        y = saturate(_shift_round(r.astype(object), fi.frac - fo.frac), fo) if fi != fo else r
    elif act.kind == "relu":
        y = relu_family(r, act, fi, fo)
    elif act.family == "hard":
        y = hard_function(r, act, fi, fo)
    elif act.kind == "softmax":
        y = softmax_raw(r, fi, fo, act.scale)
    else:
        y = table_lookup(r, table(text, fi, fo), fi, fo)
    return np.asarray(y, dtype=np.int64)


def describe(text: str, fi: FixedFormat, fo: FixedFormat, n: int = 1) -> str:
    """One line on what the hardware computes and how close it is (for comments and reports)."""
    act = parse(text)
    lsb = 2.0**-fo.frac
    if act.kind == "linear":
        return "linear" if fi == fo else f"linear, requantized {fi} -> {fo}"
    if act.text == "relu":
        return "relu: max(x, 0), exact" + ("" if fi == fo else f", requantized {fi} -> {fo}")
    if act.kind == "relu":
        exact = all(slope_raw(k) == k * (1 << SLOPE_FRAC) for k in act.slopes) and float(
            math.floor(act.threshold * (1 << fi.frac))
        ) == act.threshold * (1 << fi.frac)
        return f"{text}: exact comparisons, slope(s) quantized to {SLOPE_FRAC} fraction bits, one rounding " + (
            "(the exact value rounded half up: max error 0.5 LSB)"
            if exact
            else "(threshold or slope not representable: exact for the quantized constants)"
        )
    if act.family == "hard":
        return f"{text}: the exact rational value rounded half up once (max error 0.5 LSB = {lsb / 2:.3g})"
    if act.kind == "softmax":
        exp = softmax_table(fi, fo, n, act.scale)
        return (
            f"{text} over {n}: exp table of {len(exp.values)} entries (frac {exp.frac}, shift {exp.shift}), "
            f"exact sum and division; max error <= {exp.error_bound:.3g} ({exp.error_bound / lsb:.2f} LSB)"
        )
    t = table(text, fi, fo)
    return (
        f"{text}: table of {len(t.values)} entries indexed by raw >> {t.shift}"
        + (f", linear above raw {t.tail_from}" if t.tail_from is not None else "")
        + f"; max error {t.max_error:.3g} ({t.max_error_lsb:.2f} LSB) over all {t.inputs} inputs"
        + (", correctly rounded" if t.exact else "")
    )
