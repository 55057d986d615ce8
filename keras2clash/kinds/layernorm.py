"""The layer normalization kind: Keras LayerNormalization over the last axis, per beat.

Each beat (a vector's C values, or one position's C channels of a sequence or an image) is
normalized by its own mean and variance: `(x - mean) / sqrt(var + eps) * gamma + beta`.
The hardware computes it on the raw integers exactly up to one table read and one rounding
(docs/guide/contract.md, "Layer normalization"); with `x_i` raw in a format of `f` fraction
bits:

1. `S = sum x_i`, `d_i = C x_i - S` (= C (x_i - mean) 2^f), `Q = sum d_i^2`, all exact;
2. `u = Q + e`, `e = round(C^3 2^(2f) eps)`: epsilon on the grid 2^(-2f) / C^3, so that
   `z_i = d_i sqrt(C / u) = (x_i - mean) / sqrt(var + eps_q)` exactly;
3. `u = m 4^h` with `m` in [1/4, 1) (an even shift); `r = T[j] 2^-(R+h)` with `j` the top
   `N` bits of `m` less 2^(N-2): the table `T` (`rsqrt_table`) holds `sqrt(C / m)` rounded to
   `R` fraction bits at the value that balances its bucket's relative error;
4. `y_i = round(gamma_i d_i r + beta_i)` once to the output format (gamma in the weight
   format, beta in the bias format, the products exact), then a fused activation.

`u = 0` (every value equal and `e = 0`) makes every `d_i` 0, so the output is beta exactly.

Block: `K2C.LayerNorm` on `K2C.Pipe`, `LAYERNORM_DEPTH` register stages, a beat a cycle. A
serial one (`lanes`, chosen by `hw.lanes` like a BatchNormalization's) is `layerNormLanes`: the
beat scattered twice into `c / lanes` chunks, the first pass summing `x_i` and `x_i^2` (then
`u = c (c sum x_i^2 - S^2) + e`, the same integer) and reading the table, the second computing
the chunks' values, `LAYERNORM_LANES_DEPTH` stages; a beat every `2 c / lanes + 1` cycles.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import ClassVar

import numpy as np

from keras2clash.backend.haskell import kind_template, shape_text, vec_literal
from keras2clash.errors import K2CError
from keras2clash.frontend.registry import ConversionState, KerasLayer, _single_input, _to_numpy, register_converter
from keras2clash.hw.events import Block, Collect, EngineTiming, Max, Scatter, Stateful, pipe_block
from keras2clash.hw.plan import Common, LayerFormats, LayerPlan, Params, relu_before_requantize
from keras2clash.ir.layers import Layer, register_record
from keras2clash.kinds.base import ChannelConstantsKind, Depth, Entry, Storage, check_requantized_output, params_of
from keras2clash.quant import activations
from keras2clash.quant.exact import QuantizedLayer, finish
from keras2clash.quant.formats import FixedFormat, quantize

HASKELL = kind_template("layernorm.hs.j2")

LAYERNORM_DEPTH = 14
"""K2C.LayerNorm's LayerNormDepth: the input beat, the sum, the deviations, the partial products
of the squares and of gamma d, their sums, u, the leading zeros, the table index, the table
read, its output register, a register in the fabric, the partial products with the table's
entry, their sums, then the finished values."""


def limbs(bits: int) -> int:
    """18x18 multipliers' operand pieces of a signed `bits`-bit value (K2C.LayerNorm.Limbs):
    17-bit unsigned ones and an 18-bit signed top one."""
    return max(1, (bits + 15) // 17)


LAYERNORM_LANES_DEPTH = 18
"""K2C.LayerNorm's LayerNormLanesDepth: the chunk with its tag, the chunk's sum and the partial
products of its squares, their sum, the running sums, the deviations (and S registered), the
partial products of gamma d (and of S^2), the same in the fabric, c sum x^2 - S^2, u, the
leading zeros, the table index, the table read, its output register, a register in the fabric,
the partial products with the entry, the same in the fabric, their sums, then the finished
values."""

INDEX_BITS = (8, 10)
"""The table's index bits N lie in this range: 3 * 2^(N-2) entries, 192 to 768 (one ECP5 block
RAM of 1024 words up to 18 bits wide)."""


@register_record
@dataclass(frozen=True)
class LayerNorm(Layer):
    """Keras LayerNormalization of the last axis: `(x - mean) / sqrt(var + epsilon) * gamma +
    beta` per beat (`gamma` 1 with scale=False, `beta` 0 with center=False)."""

    activation: str = "linear"  # type: ignore[assignment]
    gamma: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    beta: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    epsilon: float = 1e-3

    type: ClassVar[str] = "layernorm"
    keras_class: ClassVar[str] = "LayerNormalization"


@register_converter("LayerNormalization")
def _convert_layer_normalization(layer: KerasLayer, state: ConversionState) -> Layer:
    """The last axis only (a 1-D input is one row high only in the IR, so the axis is checked
    against the Keras shape); `rms_scaling` (Keras 3) is refused."""
    _single_input(layer, state)
    rank = len(state.keras_shape) + 1  # with the batch axis
    axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    if len(axes) != 1 or int(axes[0]) % rank != rank - 1:
        raise K2CError(
            f"LayerNormalization layer '{layer.name}' normalizes axis {axes[0] if len(axes) == 1 else list(axes)} "
            f"of an input of shape "
            f"{state.keras_shape}; only the last axis (axis=-1) is supported"
        )
    if getattr(layer, "rms_scaling", False):
        raise K2CError(
            f"LayerNormalization layer '{layer.name}' has rms_scaling=True; only rms_scaling=False "
            "(the mean subtracted) is supported"
        )
    epsilon = float(layer.epsilon)
    if not math.isfinite(epsilon) or epsilon < 0:
        raise K2CError(f"LayerNormalization layer '{layer.name}' has epsilon={epsilon}; it must be finite and >= 0")
    channels = int(state.keras_shape[-1])
    gamma = _to_numpy(layer.gamma).reshape(channels) if layer.scale else np.ones(channels)
    beta = _to_numpy(layer.beta).reshape(channels) if layer.center else np.zeros(channels)
    return LayerNorm(**state.common(layer, state.shape), gamma=gamma, beta=beta, epsilon=epsilon)


# --- the reciprocal square root table ------------------------------------------------------


@dataclass(frozen=True)
class RsqrtTable:
    """`T[j]`, `j` in [0, 3 * 2^(N-2)): `sqrt(C / m)` for a mantissa `m` in the bucket
    [(j + 2^(N-2)) 2^-N, (j + 2^(N-2) + 1) 2^-N), rounded to `frac` (R) fraction bits, at the
    value that makes the relative errors at the bucket's two ends a, b equal (`2 sqrt(C) /
    (sqrt(a) + sqrt(b))`). `rho` bounds |T[j] 2^-R / sqrt(C / m) - 1| over every mantissa of the
    bucket (rsqrt is monotone: the largest error is at an end), computed from the stored
    integers."""

    channels: int
    index_bits: int
    frac: int
    values: tuple[int, ...]
    rho: float

    @property
    def entry_bits(self) -> int:
        """Bits of an entry as a signed number (the block's `SFixed ti R`: a zero sign bit)."""
        return max(self.values).bit_length() + 1

    def error_bound(self, gamma_max: float, lsb: float, rounding: float = 0.5) -> float:
        """The worst |hardware - exact| of an output before its activation, against the exact
        `gamma z + beta` with eps_q: `|gamma| |z| rho` with `|z| <= sqrt(C - 1)` (Samuelson's
        inequality: no value lies further than sqrt(C - 1) population deviations from the mean),
        plus the rounding (`rounding` output LSBs: 1/2 to nearest, 1 truncating)."""
        return gamma_max * math.sqrt(self.channels - 1) * self.rho + rounding * lsb


def index_bits(out: FixedFormat) -> int:
    """N: two more than the output's fraction bits (the bucket's relative error is about
    2^-N), within INDEX_BITS."""
    return min(INDEX_BITS[1], max(INDEX_BITS[0], out.frac + 2))


@functools.lru_cache(maxsize=128)
def rsqrt_table(channels: int, n: int) -> RsqrtTable:
    """The table of `rsqrt(m) sqrt(C)` on N = `n` index bits; R = N + 3 fraction bits, so an
    entry's rounding (at most 2^-(R+1) against a value of at least sqrt(C)) adds at most
    1/16 of the bucket's error."""
    r = n + 3
    quarter = 1 << (n - 2)
    root_c = math.sqrt(channels)
    values, rho = [], 0.0
    for j in range(3 * quarter):
        a, b = (j + quarter) / (1 << n), (j + quarter + 1) / (1 << n)
        value = round(root_c * 2 / (math.sqrt(a) + math.sqrt(b)) * (1 << r))
        values.append(value)
        t = value / (1 << r) / root_c
        rho = max(rho, abs(t * math.sqrt(a) - 1), abs(t * math.sqrt(b) - 1))
    return RsqrtTable(channels, n, r, tuple(values), rho * (1 + 1e-9) + 1e-15)


# --- the sizes of the arithmetic -----------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    """The widths of K2C.LayerNorm's values for one layer, and its constants: `bd` the
    deviations' `Signed bd` (S and C x_i too), `hm` half the width of `u`'s `Unsigned (2 hm)`
    (so `h <= hm`: the normalized `d_i 2^(hm - h)` and `u`'s mantissa shift are exact), `e`
    the epsilon term, `table` the reciprocal square roots."""

    channels: int
    bd: int
    hm: int
    e: int
    table: RsqrtTable


def epsilon_term(epsilon: float, channels: int, frac: int) -> int:
    """e = round(C^3 2^(2f) eps) (half up), exactly from the float epsilon."""
    value = Fraction(epsilon) * channels**3 * (Fraction(2) ** (2 * frac))
    return math.floor(value + Fraction(1, 2))


def sizes(plan: LayerPlan) -> Sizes:
    e = params_of(plan, LayerNormParams).e
    c = plan.output_shape[-1]
    bx = plan.in_fmt.hw_bits
    clog = (c - 1).bit_length()
    bd = bx + clog + 1  # |d_i| <= (C - 1)(2^bx - 1); S and C x_i fit in bx + clog bits
    d_max = (c - 1) * ((1 << bx) - 1)
    u_max = c * d_max * d_max + e
    n = index_bits(plan.out_fmt)
    hm = max((u_max.bit_length() + 1) // 2, (n + 1) // 2, 1)
    return Sizes(c, bd, hm, e, rsqrt_table(c, n))


def final_format(plan: LayerPlan, s: Sizes) -> FixedFormat:
    """The exact value before the rounding, K2C.LayerNorm's `SFixed (1 + max(iw + 1 + ti, ib))
    (max(fw + hm + R, fb))` (Clash integer bits, sign included)."""
    assert plan.w_fmt is not None and plan.b_fmt is not None
    w, b = plan.w_fmt.container, plan.b_fmt.container
    ti = s.table.entry_bits - s.table.frac
    clash_int = 1 + max(w.sign + w.int + 1 + ti, b.sign + b.int)
    return FixedFormat(1, clash_int - 1, max(w.frac + s.hm + s.table.frac, b.frac))


def normalize(u: int, hm: int, n: int) -> tuple[int, int]:
    """(j, k) of `u`: k = hm - h, the leading zero bit pairs of `u` in 2 hm bits (hm - 1 for
    u = 0), and j the table index (0 for u = 0)."""
    if u == 0:
        return 0, hm - 1
    h = (u.bit_length() + 1) // 2  # 4^(h-1) <= u < 4^h
    top = (u << (2 * (hm - h))) >> (2 * hm - n)
    return top - (1 << (n - 2)), hm - h


def describe(plan: LayerPlan) -> str:
    """One line on the table and the error bound (the Network.hs note)."""
    assert plan.w_fmt is not None
    s = sizes(plan)
    t = s.table
    gamma_max = params_of(plan, LayerNormParams).gamma_max
    lsb = 2.0**-plan.out_fmt.frac
    bound = t.error_bound(gamma_max, lsb, 1.0 if plan.out_fmt.rounding == "truncate" else 0.5)
    return (
        f"rsqrt table of {len(t.values)} entries ({t.index_bits} index bits, {t.frac} fraction bits, "
        f"relative error <= {t.rho:.3g}); max error <= {bound:.3g} ({bound / lsb:.2f} LSB) before the activation"
    )


def _products(plan: LayerPlan) -> tuple[tuple[int, int], ...]:
    """The limbs of each lane's products' operands: d d (a serial one: x x), gamma d, gamma d
    2^(hm - h) and the entry."""
    assert plan.w_fmt is not None
    s = sizes(plan)
    ww = plan.w_fmt.hw_bits
    kd = limbs(s.bd)
    kx = limbs(plan.in_fmt.hw_bits) if _lanes(plan) else kd
    return ((kx, kx), (limbs(ww), kd), (limbs(ww + 1 + s.hm), limbs(s.table.entry_bits)))


def _lanes(plan: LayerPlan) -> int:
    return params_of(plan, LayerNormParams).lanes


# --- the kind ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerNormParams(Params):
    """What the block needs of the record once planned (the manifest keeps the plan, not the
    record): `epsilon` as Keras has it, `e` its term on the input's grid (`epsilon_term`),
    `gamma_max` the largest |gamma| in the weight format (the error bound's); `lanes` the
    channels computed a cycle (`layerNormLanes`, a divisor of C below C, chosen by `hw.lanes`),
    0: a whole beat a cycle."""

    epsilon: float = 0.0
    e: int = 0
    gamma_max: float = 0.0
    lanes: int = 0


class LayerNormKind(ChannelConstantsKind):
    records: ClassVar[tuple[type[Layer], ...]] = (LayerNorm,)
    params_type: ClassVar[type[Params]] = LayerNormParams
    keeps_format = False
    requantizes = True
    fuses_activation = True
    lanes_knob = True
    table_after_register = False
    weight_name = "scale"  # hls4ml's LayerNormalization names gamma's precision so

    def plan(self, common: Common, override: LayerFormats | None, fmt: FixedFormat) -> LayerPlan:
        """Gamma in the weight format, beta in the bias format (default: the weight format), the
        output in its own; the exact value before the rounding is `final_format`."""
        layer = common.layer
        override = override or LayerFormats()
        if override.accumulator_bits is not None:
            raise K2CError(
                f"layer '{layer.name}' (layernorm) computes its value exactly; give it weight, bias and output formats only"
            )
        w_fmt = override.weight or fmt
        b_fmt = override.bias or w_fmt
        assert isinstance(layer, LayerNorm)
        c = layer.output_shape[-1]
        gamma = quantize(np.asarray(layer.gamma, dtype=np.float64), w_fmt) * 2.0**-w_fmt.raw_frac
        params = LayerNormParams(
            epsilon=layer.epsilon,
            e=epsilon_term(layer.epsilon, c, common.in_fmt.raw_frac),
            gamma_max=float(np.max(np.abs(gamma))) if c else 0.0,
        )
        plan = common.plan(out_fmt=override.output or fmt, w_fmt=w_fmt, b_fmt=b_fmt, params=params)
        return replace(plan, acc_fmt=final_format(plan, sizes(plan)))

    def check(self, plan: LayerPlan) -> None:
        check_requantized_output(plan)

    def channel_lanes(self, plan: LayerPlan) -> int:
        """`lanes`, or all of a beat's."""
        return _lanes(plan) or plan.output_shape[-1]

    def with_lanes(self, plan: LayerPlan, lanes: int) -> LayerPlan:
        return replace(plan, params=replace(params_of(plan, LayerNormParams), lanes=lanes))

    def multipliers(self, plan: LayerPlan) -> int:
        """18x18 multipliers (an ECP5 MULT18X18D each, K2C.LayerNorm.partials): per lane,
        d_i^2 (a serial one: x_i^2) and gamma_i d_i side by side, then gamma_i d_i 2^(hm - h)
        times the table's entry, each a product of limbs; a serial one also S^2. At most:
        synthesis builds some products of a top limb of a few bits in logic (8 channels at
        1,7,8 and a Dense of 8 multipliers after it, placed on ECP5: 72 blocks in all where the
        model counts 80)."""
        lanes = plan.channel_lanes * sum(a * b for a, b in _products(plan))
        return lanes + (limbs(sizes(plan).bd) ** 2 if _lanes(plan) else 0)

    def constants(self, layer: Layer) -> tuple[np.ndarray, np.ndarray]:
        """Gamma (stored in the weight format) and beta (in the bias format), as floats."""
        assert isinstance(layer, LayerNorm)
        return np.asarray(layer.gamma, dtype=np.float64), np.asarray(layer.beta, dtype=np.float64)

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        """The contract on Python integers (module docstring): exact up to the table read and
        the one rounding of `finish`."""
        assert params is not None and plan.w_fmt is not None and plan.b_fmt is not None
        s = sizes(plan)
        t = s.table
        x = np.asarray(xs[0]).astype(object)
        c = x.shape[-1]
        d = c * x - x.sum(axis=-1, keepdims=True)
        u = (d * d).sum(axis=-1) + s.e
        flat = np.asarray(u).reshape(-1)
        jk = [normalize(int(v), s.hm, t.index_bits) for v in flat]
        table = np.asarray([t.values[j] for j, _ in jk], dtype=object).reshape(np.shape(u))[..., None]
        scale = np.asarray([1 << k for _, k in jk], dtype=object).reshape(np.shape(u))[..., None]
        fw, fb = plan.w_fmt.raw_frac, plan.b_fmt.raw_frac
        f = fw + s.hm + t.frac  # of gamma_i * (d_i 2^(hm - h)) * T[j]
        cf = max(f, fb)
        gamma, beta = params.kernel.astype(object), params.bias.astype(object)
        acc = (gamma * d * scale * table) * (1 << (cf - f)) + beta * (1 << (cf - fb))
        return finish(acc, cf, plan.out_fmt, plan.hw_activation, relu_before_requantize(plan))

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        assert isinstance(layer, LayerNorm)
        gamma, beta = params if params is not None else self.constants(layer)
        x = np.asarray(xs[0], dtype=np.float64)
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        pre = (x - mean) / np.sqrt(var + layer.epsilon) * np.asarray(gamma, dtype=np.float64) + np.asarray(
            beta, dtype=np.float64
        )
        return pre, activations.keras_float(activations.parse(layer.activation), pre)

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        """A beat a cycle on K2C.Pipe; a serial one: a Scatter of the beat's chunks twice, the
        pipe, a Collect of both passes (the first pass's values are dropped)."""
        if not _lanes(plan):
            return pipe_block(LAYERNORM_DEPTH, down, mx, blocks)
        n = 2 * plan.lane_chunks
        collect = Collect(n, down, mx)
        blocks.append(collect)
        down = pipe_block(LAYERNORM_LANES_DEPTH, collect, mx, blocks)
        scatter = Scatter(n, down, mx)
        blocks.append(scatter)
        return scatter

    def depths(self, plan: LayerPlan) -> tuple[Depth, ...]:
        if _lanes(plan):
            return (Depth("stage", HASKELL.lanes_depth(), LAYERNORM_LANES_DEPTH, "layer_norm"),)
        return (Depth("stage", HASKELL.depth(), LAYERNORM_DEPTH, "layer_norm"),)

    def storage(self, plan: LayerPlan) -> Storage:
        """The registers of each stage (valid bits included), the queue of `LAYERNORM_DEPTH + 2`
        output beats, and the table."""
        if _lanes(plan):
            return self._serial_storage(plan)
        assert plan.w_fmt is not None and plan.b_fmt is not None
        s = sizes(plan)
        c, bx, out = s.channels, plan.in_fmt.hw_bits, plan.out_fmt.hw_bits
        ww, tw = plan.w_fmt.hw_bits, s.table.entry_bits
        gd = ww + s.bd  # gamma_i d_i
        gn = ww + s.hm + 1  # gamma_i d_i 2^(hm - h)
        (kd, _), (kw, _), (kn, kt) = _products(plan)
        k = max(s.hm - 1, 1).bit_length()
        n = s.table.index_bits
        stages = (
            c * bx,  # the input beat
            c * bx + s.bd,  # the beat and S
            c * s.bd,  # d
            c * 36 * (kd * kd + kw * kd),  # the partial products of d^2 and gamma d
            c * (2 * s.hm + gd),  # the squares, gamma d
            2 * s.hm + c * gd,  # u, gamma d
            2 * s.hm + k + c * gd,  # u, k, gamma d
            n + k + c * gd,  # j, k, gamma d
            c * gn,  # gamma d normalized, beside the table's read
            c * gn + tw,  # and the table's entry (the block RAM's output register)
            c * gn + tw,  # the same in the fabric
            c * 36 * kn * kt,  # the partial products with the entry
            c * (gn + tw),  # the products
            c * out,  # the finished values
        )
        assert len(stages) == LAYERNORM_DEPTH
        regs = sum(stages) + LAYERNORM_DEPTH  # and the valid bits
        return Storage(
            register_bits=regs,
            fifo_bits=(LAYERNORM_DEPTH + 2) * c * out,
            table_bits=len(s.table.values) * tw,
        )

    def _serial_storage(self, plan: LayerPlan) -> Storage:
        """`layerNormLanes`: its stages on `lanes` channels (each with the chunk's tag), the
        values kept from the first pass, the Scatter's two copies of the beat, the Collect's
        second pass (synthesis drops the first's registers, which nothing reads), the queue."""
        assert plan.w_fmt is not None and plan.b_fmt is not None
        s = sizes(plan)
        c, lanes, k = s.channels, plan.channel_lanes, plan.lane_chunks
        bx, out, ww, bw, tw = (
            plan.in_fmt.hw_bits,
            plan.out_fmt.hw_bits,
            plan.w_fmt.hw_bits,
            plan.b_fmt.hw_bits,
            s.table.entry_bits,
        )
        gd, gn, u = ww + s.bd, ww + s.hm + 1, 2 * s.hm
        (kx, _), (kw, kd), (kn, kt) = _products(plan)
        ks = limbs(s.bd)
        p = max(s.hm - 1, 1).bit_length()
        tag = 2 + max(k - 1, 1).bit_length()
        stages = (
            lanes * bx,  # the chunk
            lanes * bx + s.bd + lanes * 36 * kx * kx,  # its sum, the partial products of its squares
            lanes * bx + s.bd + u,  # the sum of its squares
            lanes * bx + s.bd + u,  # the running sums
            lanes * (s.bd + ww) + u + s.bd,  # d, gamma; sum x^2, S
            lanes * 36 * kw * kd + u + 36 * ks * ks,  # gamma d's partial products; S^2's
            lanes * 36 * kw * kd + u + 36 * ks * ks,  # the same in the fabric
            lanes * 36 * kw * kd + u,  # c sum x^2 - S^2
            lanes * gd + u,  # gamma d, u
            lanes * gd + u + p,  # and its leading pairs
            lanes * gd + s.table.index_bits + p,  # the table index
            lanes * gn + tw,  # gamma d normalized, the table's read
            lanes * gn + tw,  # the block RAM's output register
            lanes * gn + tw,  # the same in the fabric
            lanes * 36 * kn * kt,  # the partial products with the entry
            lanes * 36 * kn * kt,  # the same in the fabric
            lanes * (bw + gn + tw),  # beta, the products
            lanes * out,  # the finished values
        )
        assert len(stages) == LAYERNORM_LANES_DEPTH
        kept = (s.bd + u) + s.bd + p + tw  # the running sums, S, the leading pairs, the entry
        moved = 2 * c * bx + c * out + 3 * (2 * k).bit_length()  # the Scatter, the Collect, the counters
        regs = sum(stages) + LAYERNORM_LANES_DEPTH * (1 + tag) + kept + moved
        return Storage(
            register_bits=regs,
            fifo_bits=(LAYERNORM_LANES_DEPTH + 2) * lanes * out,
            table_bits=len(s.table.values) * tw,
        )

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        assert plan.w_fmt is not None and plan.b_fmt is not None
        s = sizes(plan)
        shapes = f"{shape_text(plan.input_shape)} -> {shape_text(plan.output_shape)}"
        doc = HASKELL.doc(shapes, plan.w_fmt, plan.b_fmt, plan.out_fmt, plan.activation)
        if _lanes(plan):
            k = plan.lane_chunks
            return Entry(
                doc=doc,
                body=(HASKELL.layer_norm_lanes(fn, s.bd, s.table.index_bits, k),),
                notes=(
                    HASKELL.lanes_note(
                        self.multipliers(plan), plan.channel_lanes, s.channels, k, LAYERNORM_LANES_DEPTH
                    ),
                    describe(plan) + ".",
                ),
                uses=("layer_norm",),
            )
        return Entry(
            doc=doc,
            body=(HASKELL.layer_norm(fn, s.bd, s.table.index_bits),),
            notes=(HASKELL.stages_note(self.multipliers(plan), LAYERNORM_DEPTH), describe(plan) + "."),
            uses=("layer_norm",),
        )

    def memory_files(self, plan: LayerPlan, fn: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The table: an entry a line, its `SFixed ti R` bits in ASCII binary, MSB first."""
        t = sizes(plan).table
        return ((f"{fn}_rsqrt.mem", tuple(format(v, f"0{t.entry_bits}b") for v in t.values)),)

    def weights(self, plan: LayerPlan, fn: str, params: QuantizedLayer | None) -> tuple[tuple[str, ...], str]:
        """Weights.hs: gamma, beta, the epsilon term and the table (its memory file)."""
        assert params is not None and plan.w_fmt is not None and plan.b_fmt is not None
        s = sizes(plan)
        t = s.table
        c = {
            "fn": fn,
            "name": plan.name,
            "channels": s.channels,
            "gamma_type": plan.w_fmt.clash_type,
            "gamma_frac": plan.w_fmt.raw_frac,
            "gamma_fmt": str(plan.w_fmt),
            "beta_type": plan.b_fmt.clash_type,
            "beta_frac": plan.b_fmt.raw_frac,
            "beta_fmt": str(plan.b_fmt),
            "gamma": vec_literal(params.kernel),
            "beta": vec_literal(params.bias),
            "u_bits": 2 * s.hm,
            "e": s.e,
            "epsilon": repr(params_of(plan, LayerNormParams).epsilon),
            "in_frac": plan.in_fmt.raw_frac,
            "entries": len(t.values),
            "index_bits": t.index_bits,
            "table_int": t.entry_bits - t.frac,
            "table_frac": t.frac,
        }
        return (f"{fn}_gamma", f"{fn}_beta", f"{fn}_epsilon", f"{fn}_rsqrt"), HASKELL.constants(c)


KINDS = (LayerNormKind(),)
