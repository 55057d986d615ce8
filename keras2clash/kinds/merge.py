"""The merge kinds: Add, Subtract, Multiply, Average, Maximum, Minimum (element-wise, inputs
of one shape, or a per-image gate of one value per channel broadcast over a map) and
Concatenate (along the last axis, the axis a beat carries).

Arithmetic (docs/guide/contract.md, merges): the operands are aligned exactly to the widest
fraction and combined exactly, then requantized to the output format once and activated;
Average divides and rounds on its own, Concatenate requantizes each operand.

Blocks: the join of `K2C.Branch` after one `K2C.Fifo` per branch (sized by the hardware
model, `hw.hwmodel.fifo_depths`; in block RAM, `blockFifo`, when deeper than
`hw.events.BLOCK_RAM_FIFO_DEPTH`: the map's FIFO holds an image while a gate computed from
it is on its way), a held gate's branch ending in `K2C.Repeat.repeatS` before its FIFO (its
one beat per image read at every position of the map, `branch_repeats`), then a stage on the
joined beats with a register after it (`K2C.Pipe.mapP`): the branch FIFOs are LUT RAM read
combinationally, so without it two FIFO reads, the exact arithmetic, the requantization and
the activation would be one path into the next FIFO's write (10.46 ns on
resnet_digits@ecp5-85k: 95.6 MHz). A Multiply, and an element-wise merge of operands wider
than `WIDE_MERGE_BITS`, registers the joined operands too and its exact result before the
requantization (`K2C.Pipe.mapP2`, `PRODUCT_DEPTH`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from keras2clash.backend.haskell import beat_type, format_type_name, kind_template, shape_text
from keras2clash.errors import K2CError
from keras2clash.frontend.registry import ConversionState, KerasLayer, _check_keras_shape, register_converter
from keras2clash.hw.events import Block, EngineTiming, Max, Stateful, block_ram_fifo, pipe_block
from keras2clash.hw.plan import Common, LayerFormats, LayerPlan, Params, relu_before_requantize
from keras2clash.ir.layers import Layer, register_record_type
from keras2clash.kinds.base import (
    Depth,
    Entry,
    Kind,
    Storage,
    check_requantized_output,
    params_of,
    refuse_constant_formats,
)
from keras2clash.quant import activations
from keras2clash.quant.exact import INT64_SAFE_BITS, QuantizedLayer, activate, finish, requantize_to
from keras2clash.quant.formats import FixedFormat, saturate

HASKELL = kind_template("merge.hs.j2")
STAGES = kind_template("stages.hs.j2")

ELEMENTWISE_OPS = ("add", "subtract", "multiply", "average", "maximum", "minimum")
MERGE_DEPTH = 1
"""A merge's register stages (K2C.Pipe.mapP on the joined beats: the exact arithmetic, the
requantization and the activation, then a register)."""

PRODUCT_DEPTH = 3
"""A Multiply's register stages (K2C.Pipe.mapP2): the joined operands, their exact products,
the requantized and activated result. A multiplier between a branch FIFO's read and the
requantization in one cycle was se_digits' critical path on ECP5 (a block-RAM FIFO's 5.6 ns
read, an unregistered MULT18X18D, the rounding adder and the saturation: 23.6 ns); with the
operands and products registered the multipliers take those registers into the DSP blocks."""

WIDE_MERGE_BITS = 192
"""The widest operand beat an element-wise merge combines in the cycle its join moves the beats
(`MERGE_DEPTH`); a wider one takes `PRODUCT_DEPTH` stages as a Multiply does: the joined
operands registered, the exact result, the requantized and activated one. Its branch FIFOs are
LUT RAM read combinationally: a 256-bit beat is 64 LUT-RAM cells, whose read and the merge's
adder were the transformer's critical path on ECP5 at 132 multipliers (a read pointer, 8.8 ns
of route, the read, the adder: 13.6 ns); 192-bit beats (resnet_digits) route at 108 MHz in one
stage."""


@dataclass(frozen=True)
class Merge(Layer):
    """A Keras merge layer: `op` is one of ELEMENTWISE_OPS or `concatenate`. Element-wise ops
    take inputs of the output's shape, except the inputs in `held`: one value per channel
    ((C,), (1, C), (1, 1, C)), broadcast over every position of the others, so the hardware
    holds their one beat per image while the others stream. `concatenate` joins the last
    axis. An activation after it may be fused."""

    op: str = "add"
    activation: str = "linear"  # type: ignore[assignment]
    held: tuple[int, ...] = ()

    keras_class: ClassVar[str] = "Merge"

    @property
    def type(self) -> str:  # type: ignore[override]
        return self.op


for _op in (*ELEMENTWISE_OPS, "concatenate"):
    register_record_type(_op, Merge)


@dataclass(frozen=True)
class MergeParams(Params):
    """A merge's inputs, one entry each: their formats, their shapes, and the depth of the
    FIFO on each branch before the join (`hw.hwmodel.fifo_depths`; () until sized); `held`:
    the inputs broadcast over the others (`Merge.held`)."""

    in_fmts: tuple[FixedFormat, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    fifo_depths: tuple[int, ...] = ()
    held: tuple[int, ...] = ()


_KERAS_OPS = {
    "Add": "add",
    "Subtract": "subtract",
    "Multiply": "multiply",
    "Average": "average",
    "Maximum": "maximum",
    "Minimum": "minimum",
}


def _beat_bits(own: MergeParams) -> list[int]:
    """Each input's beat in bits, as its branch FIFO holds it."""
    return [shape[-1] * fmt.hw_bits for shape, fmt in zip(own.input_shapes, own.in_fmts)]


def _held_inputs(
    kind: str, layer: KerasLayer, shapes: Sequence[tuple[int, ...]]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The output shape and the inputs broadcast over it. Every input has the output's shape
    or is a per-channel gate (all axes 1 but the last, which is the output's channels): the
    broadcast that holds one beat per image against a stream of beats. Keras aligns shapes
    of different ranks at the last axis, as numpy does."""
    out = max(shapes, key=len)
    streamed = [s for s in shapes if len(s) == len(out) and any(d != 1 for d in s[:-1])]
    if streamed:
        out = streamed[0]
    held = tuple(i for i, s in enumerate(shapes) if s != out)
    gates = all(all(d == 1 for d in shapes[i][:-1]) and shapes[i][-1] == out[-1] for i in held)
    if not gates or any(s != out for s in streamed) or len(held) == len(shapes):
        raise K2CError(
            f"{kind} layer '{layer.name}' merges tensors of shapes {', '.join(map(str, shapes))}; "
            "the inputs must have one shape, or some may be one value per channel (such as (1, 1, C) "
            "or (C,)) broadcast over the others"
        )
    return out, held


@register_converter(*_KERAS_OPS)
def _convert_elementwise_merge(layer: KerasLayer, state: ConversionState) -> Layer:
    """Add, Subtract, Multiply, Average, Maximum, Minimum of inputs of one shape, or of a map
    and per-channel gates broadcast over it (squeeze-and-excitation, FiLM)."""
    kind = type(layer).__name__
    if len(state.inputs) < 2 or (kind == "Subtract" and len(state.inputs) != 2):
        raise K2CError(
            f"{kind} layer '{layer.name}' reads {len(state.inputs)} tensor(s); "
            + ("it takes exactly two" if kind == "Subtract" else "it takes two or more")
        )
    out, held = _held_inputs(kind, layer, [tuple(s) for s in state.shapes])
    _check_keras_shape(layer, state, out)
    return Merge(**state.common(layer, out), op=_KERAS_OPS[kind], held=held)


def broadcast_to_output(xs: Sequence[np.ndarray], rank: int) -> list[np.ndarray]:
    """Inputs batch first, each given the output's rank by axes of 1 after the batch axis
    (Keras' alignment of a gate with a map), so numpy broadcasts gates over positions."""
    return [x.reshape(x.shape[:1] + (1,) * (rank + 1 - x.ndim) + x.shape[1:]) for x in map(np.asarray, xs)]


@register_converter("Concatenate")
def _convert_concatenate(layer: KerasLayer, state: ConversionState) -> Layer:
    """Concatenation along the last axis (the channels of images, the values of vectors):
    the axis a beat carries, so it is a per-beat join."""
    rank = len(state.keras_shape)  # as Keras counts the axis
    if len(state.inputs) < 2:
        raise K2CError(f"Concatenate layer '{layer.name}' reads {len(state.inputs)} tensor; it takes two or more")
    if int(layer.axis) not in (-1, rank):
        raise K2CError(
            f"Concatenate layer '{layer.name}' joins axis {layer.axis} of rank-{rank} inputs; "
            "only the last axis (channels, or the values of a vector) is supported"
        )
    if any(len(s) != len(state.shape) or s[:-1] != state.shape[:-1] for s in state.shapes):
        raise K2CError(
            f"Concatenate layer '{layer.name}' joins tensors of shapes "
            f"{', '.join(map(str, state.shapes))}: all axes but the last must agree"
        )
    out = (*state.shape[:-1], sum(s[-1] for s in state.shapes))
    _check_keras_shape(layer, state, out)
    return Merge(**state.common(layer, out), op="concatenate")


def _nested(items: Sequence[str]) -> str:
    """`a`, `(a, b)`, `(a, (b, c))`: how `branches` nests its branches' outputs."""
    return items[0] if len(items) == 1 else f"({items[0]}, {_nested(items[1:])})"


def _zip_nested(xs: Sequence[str]) -> str:
    return xs[0] if len(xs) == 1 else f"zip {xs[0]} ({_zip_nested(xs[1:])})" if len(xs) > 2 else f"zip {xs[0]} {xs[1]}"


class _MergeKind(Kind):
    """What every merge shares: several inputs, formats aligned exactly, the join's stage."""

    keeps_format = False
    fuses_activation = True
    joins = True
    params_type: ClassVar[type[Params]] = MergeParams
    rounds_itself: ClassVar[bool] = False
    """It rounds and saturates on its own (Merge.average), no requantization after it."""

    def plan(self, common: Common, override: LayerFormats | None, fmt: FixedFormat) -> LayerPlan:
        """An output format of its own (the default), the input formats one per input."""
        layer = common.layer
        override = refuse_constant_formats(layer, override)
        own = MergeParams(
            in_fmts=common.in_fmts,
            input_shapes=tuple(tuple(s) for s in layer.input_shapes),
            held=getattr(layer, "held", ()),
        )
        return common.plan(out_fmt=override.output or fmt, params=own)

    def input_formats(self, plan: LayerPlan) -> tuple[FixedFormat, ...]:
        return params_of(plan, MergeParams).in_fmts

    def branch_fifos(self, plan: LayerPlan) -> tuple[int, ...]:
        return params_of(plan, MergeParams).fifo_depths

    def with_branch_fifos(self, plan: LayerPlan, depths: tuple[int, ...]) -> LayerPlan:
        return replace(plan, params=replace(params_of(plan, MergeParams), fifo_depths=depths))

    def branch_repeats(self, plan: LayerPlan) -> tuple[int, ...]:
        """A held gate's beat is read once per position of the map (`K2C.Repeat` at the tail of
        its branch); a streamed input's beats once each."""
        held = params_of(plan, MergeParams).held
        positions = math.prod(plan.output_shape[:-1])
        return tuple(positions if i in held else 1 for i in range(len(plan.inputs))) if held else ()

    def check(self, plan: LayerPlan) -> None:
        if not plan.out_fmt.is_plain:
            raise K2CError(
                f"layer '{plan.name}' ({plan.type}): output format {plan.out_fmt}: a {plan.type} rounds to "
                "nearest and saturates on a signed format; give it one like 1,7,8"
            )

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        pre = self.float_merge(xs)
        return None, activations.keras_float(activations.parse(layer.activation), pre)

    def float_merge(self, xs: Sequence[np.ndarray]) -> np.ndarray:
        """The Keras layer in float (before its activation)."""
        raise NotImplementedError

    def stage_depth(self, plan: LayerPlan) -> int:
        """Its stage's registers (`MERGE_DEPTH`, or `PRODUCT_DEPTH` where it multiplies or its
        operands are wide)."""
        return MERGE_DEPTH

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        """Its own stage (K2C.Pipe.mapP or mapP2 after the join; the join is the graph's, `hw.blocks`)."""
        return pipe_block(self.stage_depth(plan), down, mx, blocks)

    def depths(self, plan: LayerPlan) -> tuple[Depth, ...]:
        depth = self.stage_depth(plan)
        stage = STAGES.map2_depth() if depth == PRODUCT_DEPTH else STAGES.map_depth()
        return (Depth("stage", stage, depth, "pipe_types"),)

    def storage(self, plan: LayerPlan) -> Storage:
        """The branch FIFOs in front of the join (LUT RAM; block RAM when deeper than
        `BLOCK_RAM_FIFO_DEPTH`), a held gate's repeat register; its stage's registered result
        and queue."""
        own = params_of(plan, MergeParams)
        beats = _beat_bits(own)
        lut = sum(d * b for d, b in zip(own.fifo_depths, beats) if not block_ram_fifo(d))
        block = sum(d * b for d, b in zip(own.fifo_depths, beats) if block_ram_fifo(d))
        repeats = sum(b for b, n in zip(beats, self.branch_repeats(plan)) if n > 1)
        out = plan.output_shape[-1] * plan.out_fmt.hw_bits
        depth = self.stage_depth(plan)
        return Storage(
            register_bits=out + depth + repeats,
            fifo_bits=lut + (depth + 2) * out,
            block_fifo_bits=block,
        )

    def body(self, plan: LayerPlan, xs: Sequence[str]) -> tuple[str, str]:
        """The stage's lambda body over the joined beats `xs`, and the haddock's first part."""
        raise NotImplementedError

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        n = len(plan.inputs)
        own = params_of(plan, MergeParams)
        in_types = [beat_type(shape, format_type_name(fmt)) for shape, fmt in zip(own.input_shapes, own.in_fmts)]
        xs = [f"x{i}" for i in range(n)]
        body, what = self.body(plan, xs)
        formats = ", ".join(str(f) for f in own.in_fmts)
        held = [HASKELL.held_note(plan.inputs[i], math.prod(plan.output_shape[:-1])) for i in own.held]
        if self.stage_depth(plan) == PRODUCT_DEPTH:
            stage = HASKELL.product_stage(_nested(xs), body)
        else:
            stage = HASKELL.stage(_nested(xs), body)
        return Entry(
            doc=HASKELL.doc(what, plan.activation, plan.out_fmt),
            body=(stage,),
            notes=(*held, HASKELL.operands_note(formats)),
            uses=("merge",),
            fields={
                "in_type": f"{in_types[0]}, {_nested(in_types[1:])}",  # the template adds the parentheses
                "merge": True,
                "rounds_itself": self.rounds_itself,
            },
        )


EXACT_FN = {
    "add": "Merge.addExact",
    "subtract": "Merge.subExact",
    "multiply": "Merge.mulExact",
    "maximum": "Merge.maxExact",
    "minimum": "Merge.minExact",
    "average": "Merge.addExact",
}
"""The exact (widening) binary operation each merge folds its operands with."""


class ElementwiseKind(_MergeKind):
    """Add, Subtract, Multiply, Maximum, Minimum: the exact result requantized once."""

    records = (Merge,)
    requantizes = True

    def __init__(self, op: str) -> None:
        self.op = op

    @property
    def types(self) -> tuple[str, ...]:
        return (self.op,)

    def check(self, plan: LayerPlan) -> None:
        if self.requantizes:
            check_requantized_output(plan)
        else:
            super().check(plan)

    def multipliers(self, plan: LayerPlan) -> int:
        """A product of n inputs: n - 1 per value."""
        return (len(plan.inputs) - 1) * plan.output_shape[-1] if self.op == "multiply" else 0

    def stage_depth(self, plan: LayerPlan) -> int:
        """`PRODUCT_DEPTH` for a Multiply or operands wider than `WIDE_MERGE_BITS`, else `MERGE_DEPTH`."""
        wide = max(_beat_bits(params_of(plan, MergeParams))) > WIDE_MERGE_BITS
        return PRODUCT_DEPTH if self.op == "multiply" or wide else MERGE_DEPTH

    def float_merge(self, xs: Sequence[np.ndarray]) -> np.ndarray:
        xs = np.broadcast_arrays(*broadcast_to_output(xs, max(np.ndim(x) for x in xs) - 1))
        if self.op == "subtract":
            return xs[0] - xs[1]
        reduce = {
            "add": np.add,
            "multiply": np.multiply,
            "maximum": np.maximum,
            "minimum": np.minimum,
            "average": np.add,
        }[self.op]
        out = reduce.reduce(np.stack(xs), axis=0)
        return out / len(xs) if self.op == "average" else out

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        fmts, out = params_of(plan, MergeParams).in_fmts, plan.out_fmt
        wide = sum(f.hw_bits for f in fmts) + len(fmts) + out.hw_bits > INT64_SAFE_BITS
        vals = list(
            np.broadcast_arrays(
                *(x.astype(object if wide else np.int64) for x in broadcast_to_output(xs, len(plan.output_shape)))
            )
        )
        if self.op == "multiply":
            acc, frac = vals[0], fmts[0].raw_frac
            for v, f in zip(vals[1:], fmts[1:]):
                acc, frac = acc * v, frac + f.raw_frac
            return finish(acc, frac, out, plan.hw_activation, relu_before_requantize(plan))
        frac = max(f.raw_frac for f in fmts)
        aligned = [v << (frac - f.raw_frac) for v, f in zip(vals, fmts)]
        if self.op == "average":
            n = len(aligned)
            total = sum(aligned[1:], aligned[0])
            r = saturate((2 * total * (1 << out.frac) + n * (1 << frac)) // (2 * n * (1 << frac)), out)
            return np.asarray(activate(r, plan.hw_activation, out), dtype=np.int64)
        exact = {
            "add": lambda: sum(aligned[1:], aligned[0]),
            "subtract": lambda: aligned[0] - aligned[1],
            "maximum": lambda: np.maximum.reduce(aligned),
            "minimum": lambda: np.minimum.reduce(aligned),
        }[self.op]()
        return finish(exact, frac, out, plan.hw_activation, relu_before_requantize(plan))

    def body(self, plan: LayerPlan, xs: Sequence[str]) -> tuple[str, str]:
        n = len(xs)
        elems = [f"v{i}" for i in range(n)]
        exact = elems[-1]
        for e in reversed(elems[:-1]):
            exact = f"{EXACT_FN[self.op]} {e} ({exact})" if " " in exact else f"{EXACT_FN[self.op]} {e} {exact}"
        if self.op == "average":
            exact = HASKELL.average(n, exact)
        result = exact if self.stage_depth(plan) == PRODUCT_DEPTH else f"activation ({exact})"
        lam = f"\\{elems[0]} {elems[1]} -> {result}" if n == 2 else f"\\{elems[0]} {_nested(elems[1:])} -> {result}"
        zipped = f"{xs[0]} {xs[1]}" if n == 2 else f"{xs[0]} ({_zip_nested(xs[1:])})"
        return HASKELL.zip_with(lam, zipped), HASKELL.elementwise_doc(
            self.op.capitalize(), ", ".join(plan.inputs), shape_text(plan.output_shape)
        )


class ConcatenateKind(_MergeKind):
    records = (Merge,)

    @property
    def types(self) -> tuple[str, ...]:
        return ("concatenate",)

    def float_merge(self, xs: Sequence[np.ndarray]) -> np.ndarray:
        return np.concatenate(xs, axis=-1)

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        """Each operand requantized to the output format, then joined and activated."""
        fmts, out = params_of(plan, MergeParams).in_fmts, plan.out_fmt
        wide = sum(f.hw_bits for f in fmts) + len(fmts) + out.hw_bits > INT64_SAFE_BITS
        parts = [
            requantize_to(np.asarray(x).astype(object if wide else np.int64), f.raw_frac, out) for x, f in zip(xs, fmts)
        ]
        return np.asarray(activate(np.concatenate(parts, axis=-1), plan.hw_activation, out), dtype=np.int64)

    def body(self, plan: LayerPlan, xs: Sequence[str]) -> tuple[str, str]:
        return HASKELL.concat_body(xs), HASKELL.concat_doc(", ".join(plan.inputs), shape_text(plan.output_shape))


class AverageKind(ElementwiseKind):
    """Average: the sum divided by n, rounded and saturated by Merge.average itself."""

    requantizes = False
    rounds_itself = True

    def __init__(self) -> None:
        super().__init__("average")


KINDS = (*(ElementwiseKind(op) for op in ELEMENTWISE_OPS if op != "average"), AverageKind(), ConcatenateKind())
