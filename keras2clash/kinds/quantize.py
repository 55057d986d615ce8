"""The quantize kind: a quantizer whose every element has its own format (an HGQ2 quantizer with
per-element or per-channel bit-widths, `frontend.hgq`).

Element `e` of the tensor (row-major, the channel fastest) is rounded once, at its own fraction
position, from the exact value its producer passes on, and saturated to (or wrapped at) its
own range: the format `formats[index[e]]`, or 0 where `index[e]` is -1 (an element of no bits,
which HGQ2 outputs as 0). The output is held in one container format that holds every
element's values exactly: signed if any element is, the most integer bits and the most
fraction bits of any element (`container`). The next layer reads that format.

One rounding of the exact value matters: rounding twice (at 3 fraction bits, then at 1) is not
rounding once. So the producer keeps its exact result (its accumulator, after a fused ReLU) and
this stage rounds; at the network input, the host truncates one bit below the finest element
(`input_format`: a floor then a round half up is the round half up, a floor then a floor is the
floor) and this stage rounds each element from there.

Arithmetic (the golden model and `K2C.Requant` alike): in `g = max(fa, fb)` fraction bits
(fa the input's, fb the container's raw fraction bits), element e with `d = g - f_e` has the
constants `bias`, `lsb` (ties to even), `keep = -2^d` (floor to a multiple of 2^d), `lo` and
`hi` (saturate) or `span = 2^(W_e + d) - 1` (wrap, W_e its bits): see `constants`.

Block: `K2C.Requant` on `K2C.Pipe`, `REQUANT_DEPTH` registers (the beat with its position's
constants, then the values), one beat a cycle; the constants are a `Vec` of positions of
`Vec`s of channels in Weights.hs (one position for a per-channel quantizer).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from keras2clash.backend.haskell import kind_template, shape_text
from keras2clash.errors import K2CError
from keras2clash.hw.events import Block, EngineTiming, Max, Stateful, pipe_block
from keras2clash.hw.plan import Common, LayerFormats, LayerPlan, Params
from keras2clash.ir.layers import Layer, register_record
from keras2clash.kinds.base import Depth, Entry, Kind, Storage, params_of
from keras2clash.quant.exact import INT64_SAFE_BITS, QuantizedLayer
from keras2clash.quant.formats import NEAREST, NEAREST_EVEN, SATURATE, TRUNCATE, WRAP, FixedFormat, make_format

HASKELL = kind_template("quantize.hs.j2")

REQUANT_DEPTH = 2
"""K2C.Requant's RequantDepth: the beat with its constants, then the values."""


@register_record
@dataclass(frozen=True)
class Quantize(Layer):
    """Each element quantized to its own format: `formats` the distinct formats (texts of
    `FixedFormat`s, one rounding and one overflow mode for all), `index` the format of each
    element in row-major order (-1: no bits, the element is 0); `source` the layer whose input
    quantizer it is."""

    formats: tuple[str, ...] = ()
    index: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    source: str = ""

    type: ClassVar[str] = "quantize"
    keras_class: ClassVar[str] = "Quantizer"


def element_formats(texts: Sequence[str]) -> tuple[FixedFormat, ...]:
    """The formats of a `Quantize` record (or its plan)."""
    out = []
    for text in texts:
        sign, integer, frac, rounding, overflow = (part.strip() for part in text.split(","))
        out.append(make_format(int(sign), int(integer), int(frac), rounding, overflow))
    return tuple(out)


def format_text(fmt: FixedFormat) -> str:
    """A `Quantize` record's text of one format (both modes always written)."""
    return f"{fmt.sign},{fmt.int},{fmt.frac},{fmt.rounding},{fmt.overflow}"


def container(formats: Sequence[FixedFormat]) -> FixedFormat:
    """The one format that holds every element's values: signed if any is, the most integer
    and fraction bits (the elements' own modes, which no later step applies)."""
    first = formats[0]
    return make_format(
        max(f.sign for f in formats),
        max(f.int for f in formats),
        max(f.frac for f in formats),
        first.rounding,
        first.overflow,
    )


def input_format(formats: Sequence[FixedFormat]) -> FixedFormat:
    """The network input's format before a per-element quantizer: the container truncating one
    fraction bit finer when an element rounds to nearest, with the elements' overflow mode.
    Exact: with F > f, `round_half_up(floor(x 2^F) / 2^(F-f)) = floor(x 2^f + 1/2)`, a floor
    of a floor is the floor, saturating first to a range that holds each element's range
    leaves each element's saturation as it was, and wrapping first at a wider power of two
    leaves each element's wrap as it was. Ties to even cannot be told from just above a tie
    after a truncation: refused by the caller (`check_input`)."""
    held = container(formats)
    finer = 1 if held.rounding == NEAREST else 0
    return make_format(1, max(held.int, 1 - held.frac - finer), held.frac + finer, TRUNCATE, held.overflow)


def check_input(formats: Sequence[FixedFormat], where: str) -> None:
    """One error when the host cannot quantize an input exactly for these formats."""
    if formats and formats[0].rounding == NEAREST_EVEN:
        raise K2CError(
            f"{where} quantizes the network input per element with ties to even (RND_CONV): the "
            "host's one input format cannot leave each element's ties exact; use round_mode='RND' "
            "or 'TRN' on the first layer's input quantizer"
        )


@dataclass(frozen=True)
class QuantizeParams(Params):
    """The record's formats and element index (the golden model and the constants come from
    them and the input format)."""

    formats: tuple[FixedFormat, ...] = ()
    index: tuple[int, ...] = ()


def _check_modes(formats: Sequence[FixedFormat], name: str) -> None:
    modes = {(f.rounding, f.overflow) for f in formats}
    if len(modes) > 1:
        raise K2CError(f"layer '{name}' (quantize): its elements round or overflow differently ({sorted(modes)})")


def constants(plan: LayerPlan) -> tuple[np.ndarray, int, int, int]:
    """Per element (positions x channels x 5): bias, lsb, keep, lo, hi (saturate) or span
    (wrap), in `g` fraction bits, one position only when every position has the same (a
    per-channel quantizer); and `up = g - fa`, `down = g - fb`, the working width n (bits of
    `Signed n` that hold every step)."""
    p = params_of(plan, QuantizeParams)
    fa, fb = plan.in_fmt.raw_frac, plan.out_fmt.raw_frac
    g = max(fa, fb)
    rows = []
    for fmt in p.formats:
        d = g - fmt.frac
        rounding, wrap = fmt.rounding, fmt.overflow == WRAP
        bias = (1 << (d - 1)) - (1 if rounding == NEAREST_EVEN else 0) if d > 0 and rounding != TRUNCATE else 0
        lsb = (1 << d) if d > 0 and rounding == NEAREST_EVEN else 0
        lo = fmt.q_min << d
        top = ((1 << (fmt.bits + d)) - 1) if wrap else fmt.q_max << d
        rows.append((bias, lsb, -(1 << d), lo, top))
    rows.append((0, 0, 0, 0, 0))  # index -1: no bits
    table = np.array(rows, dtype=object)
    index = np.array(p.index, dtype=np.int64)
    per_element = table[index].reshape(-1, plan.output_shape[-1], 5)
    if (per_element == per_element[:1]).all():
        per_element = per_element[:1]
    width = max(plan.in_fmt.hw_bits + g - fa, plan.out_fmt.hw_bits + g - fb) + 2
    biggest = max((abs(int(v)) for v in table.flat), default=0)
    width = max(width, biggest.bit_length() + 2)
    return per_element, g - fa, g - fb, width


def apply(raw: np.ndarray, plan: LayerPlan) -> np.ndarray:
    """The stage on raw integers (batch first), as K2C.Requant computes it."""
    table, up, down, width = constants(plan)
    dtype = np.int64 if width <= INT64_SAFE_BITS else object
    wrap = plan.out_fmt.overflow == WRAP
    x = np.asarray(raw).astype(dtype).reshape(len(raw), -1, plan.output_shape[-1]) << up
    bias, lsb, keep, lo, top = (table[..., k].astype(dtype) for k in range(5))
    y = (x + bias + ((x & lsb) != 0).astype(dtype)) & keep
    fitted = ((y - lo) & top) + lo if wrap else np.minimum(np.maximum(y, lo), top)
    return (fitted >> down).astype(np.int64).reshape(len(raw), *plan.output_shape)


class QuantizeKind(Kind):
    records = (Quantize,)
    params_type = QuantizeParams
    keeps_format = False

    def plan_params(self, layer: Layer) -> Params:
        assert isinstance(layer, Quantize)
        formats = element_formats(layer.formats)
        _check_modes(formats, layer.name)
        index = tuple(int(v) for v in np.asarray(layer.index).reshape(-1))
        if len(index) != math.prod(layer.output_shape) or not formats:
            raise K2CError(f"layer '{layer.name}' (quantize): {len(index)} element formats for {layer.output_shape}")
        return QuantizeParams(formats=formats, index=index)

    def plan(self, common: Common, override: LayerFormats | None, fmt: FixedFormat) -> LayerPlan:
        """The output is the container of the elements' formats (a given output format must be it)."""
        params = self.plan_params(common.layer)
        assert isinstance(params, QuantizeParams)
        out = container(params.formats)
        if override is not None and override.output is not None and override.output != out:
            raise K2CError(
                f"layer '{common.layer.name}' (quantize) holds its elements in {out}; it takes no other format"
            )
        return common.plan(out_fmt=out, params=params)

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        return apply(xs[0], plan)

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """Each element quantized to its own format, in float64 (exact: powers of two)."""
        assert isinstance(layer, Quantize)
        formats = element_formats(layer.formats)
        x = np.asarray(xs[0], dtype=np.float64)
        flat = x.reshape(len(x), -1)
        out = np.zeros_like(flat)
        index = np.asarray(layer.index, dtype=np.int64).reshape(-1)
        for k, fmt in enumerate(formats):
            step = 2.0**-fmt.frac
            q = flat[:, index == k] / step
            q = {NEAREST: np.floor(q + 0.5), TRUNCATE: np.floor(q), NEAREST_EVEN: np.round(q)}[fmt.rounding]
            if fmt.overflow == SATURATE:
                q = np.clip(q, fmt.q_min, fmt.q_max)
            else:
                q = np.mod(q - fmt.q_min, 2.0**fmt.bits) + fmt.q_min
            out[:, index == k] = q * step
        return None, out.reshape(x.shape)

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        return pipe_block(REQUANT_DEPTH, down, mx, blocks)

    def depths(self, plan: LayerPlan) -> tuple[Depth, ...]:
        return (Depth("stage", HASKELL.depth(), REQUANT_DEPTH, "requant"),)

    def rom_bits(self, plan: LayerPlan) -> int:
        """Five constants of the working width per element (per channel when every position
        has the same)."""
        table, _, _, width = constants(plan)
        return 5 * width * table.shape[0] * table.shape[1]

    def storage(self, plan: LayerPlan) -> Storage:
        """The input beat and its constants, the output beat, the position counter, and the
        pipe's queue of output beats."""
        c = plan.output_shape[-1]
        table, _, _, width = constants(plan)
        positions = table.shape[0]
        regs = c * (plan.in_fmt.hw_bits + 5 * width + plan.out_fmt.hw_bits) + (positions - 1).bit_length()
        return Storage(register_bits=regs + REQUANT_DEPTH, fifo_bits=(REQUANT_DEPTH + 2) * c * plan.out_fmt.hw_bits)

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        _, up, down, _ = constants(plan)
        p = params_of(plan, QuantizeParams)
        source = plan.layer.source if isinstance(plan.layer, Quantize) else ""
        doc = HASKELL.doc(
            shape_text(plan.output_shape), len(p.formats), p.index.count(-1), plan.in_fmt, plan.out_fmt, source
        )
        wrap = "Quant.Wrap" if plan.out_fmt.overflow == WRAP else "Quant.Saturate"
        return Entry(doc=doc, body=(HASKELL.requant(fn, wrap, up, down),), uses=("requant", "quant"))

    def weights(self, plan: LayerPlan, fn: str, params: QuantizedLayer | None) -> tuple[tuple[str, ...], str] | None:
        """Weights.hs: the constants of every element, a Vec of positions of Vecs of channels."""
        rows, _, _, width = constants(plan)
        positions, channels = rows.shape[0], rows.shape[1]
        literal = " :> ".join(
            "(" + " :> ".join("(" + ", ".join(str(int(v)) for v in element) + ")" for element in row) + " :> Nil)"
            for row in rows
        )
        c = {
            "fn": fn,
            "name": plan.name,
            "positions": positions,
            "channels": channels,
            "width": width,
            "literal": literal + " :> Nil",
        }
        return (f"{fn}_elements",), HASKELL.constants(c)


KINDS = (QuantizeKind(),)
