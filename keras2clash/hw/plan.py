"""The hardware plan: formats and space-time knobs of every layer (a pass over the IR).

The IR says what the network computes; the plan says how the hardware computes it: the
fixed-point format of each layer's input, weights, bias, accumulator and output, and, for
each compute layer (dense, conv2d, depthwise2d), its two knobs: `pe` processing elements (filters or
neurons in parallel) and `cycles` per window (each PE then has ceil(K / cycles)
multipliers). Formats are per layer in the data model even when the user gives one format
for all, so per-layer precision needs no new plumbing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from keras2clash.ir.layers import Layer
from keras2clash.quant import activations
from keras2clash.quant.formats import FixedFormat
from keras2clash.registry import kind_of

if TYPE_CHECKING:
    from keras2clash.kinds.base import Kind

_FORMAT_FIELDS = ("in_fmt", "out_fmt", "w_fmt", "b_fmt", "acc_fmt")


@dataclass(frozen=True)
class LayerFormats:
    """A user's per-layer override: any field left None takes the default."""

    weight: FixedFormat | None = None
    bias: FixedFormat | None = None
    output: FixedFormat | None = None
    accumulator_bits: int | None = None  # total width; fraction bits stay exact


@dataclass(frozen=True)
class LayerPlan:
    """One layer as the hardware builds it."""

    name: str
    type: str  # a kind's type (keras2clash.kinds)
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    activation: str  # the Keras activation, kept for reports
    in_fmt: FixedFormat
    out_fmt: FixedFormat
    w_fmt: FixedFormat | None = None
    b_fmt: FixedFormat | None = None
    acc_fmt: FixedFormat | None = None
    pe: int = 1
    cycles: int = 1
    pipeline: int = 0  # adder-tree levels per register stage; 0: the dot product in one cycle
    kernel_size: tuple[int, int] = (1, 1)  # conv kernel or pool size
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, bottom, left, right
    crops: tuple[int, int, int, int] = (0, 0, 0, 0)  # crop2d: top, bottom, left, right
    size: tuple[int, int] = (1, 1)  # upsample2d: repeats down, across
    exclude_pads: bool = False  # average pooling 'same': divide by each window's non-padding count
    dilation: tuple[int, int] = (1, 1)  # conv: tap (i, j) reads window pixel (i*dh, j*dw)
    source_class: str = ""  # the Keras class when it differs from the type's (Conv1D, Dense on a tensor, ...)
    exact_accumulator: bool = True
    inputs: tuple[str, ...] = ()  # producers (layer names, or the network input's name)
    in_fmts: tuple[FixedFormat, ...] = ()  # a merge's input formats, one per input
    input_shapes: tuple[tuple[int, ...], ...] = ()  # a merge's input shapes
    fifo_depths: tuple[int, ...] = ()  # a merge's branch FIFOs (hw.fifos, from the hardware model)
    window_fifo: int = 0  # a convolution's FIFO of windows before its engine (hwmodel.window_fifos); 0: none
    input_fifo: int = 0  # a convolution's FIFO of input pixels before its padding and window generator; 0: none
    top_activation: bool = False  # the output layer's activation, applied in Top after the class (golden.splits_output)
    lanes: int = (
        0  # batchnorm: channels a cycle (K2C.BatchNorm.batchNormLanes, a divisor of C below C); 0: all C (hw.lanes)
    )
    layer: Layer | None = field(default=None, compare=False, repr=False)  # the IR record (weights)

    @property
    def kind(self) -> Kind | None:
        """The layer's kind (`keras2clash.kinds`); None for a type no kind builds."""
        return kind_of(self.type)

    @property
    def is_compute(self) -> bool:
        """A layer with the space-time knobs (`Kind.has_knobs`: the filter engine's kinds)."""
        return self.kind is not None and self.kind.has_knobs

    @property
    def has_params(self) -> bool:
        """Layers with quantized constants: the compute layers' ROMs, a BatchNormalization's
        per-channel scale (weight format) and offset (bias format)."""
        return self.kind is not None and self.kind.has_params

    @property
    def activation_only(self) -> bool:
        """A standalone activation layer (`Kind.activation_only`)."""
        return self.kind is not None and self.kind.activation_only

    @property
    def requantizes(self) -> bool:
        """Its output is one requantization of an exact value (`Kind.requantizes`)."""
        return self.kind is not None and self.kind.requantizes

    @property
    def is_windowed(self) -> bool:
        """Built on the window generator (K2C.Window): convolutions and pooling (`Kind.windowed`)."""
        return self.kind is not None and self.kind.windowed

    @property
    def n_in(self) -> int:
        return math.prod(self.input_shape)

    @property
    def n_out(self) -> int:
        return math.prod(self.output_shape)

    @property
    def filters(self) -> int:
        """Neurons (dense) or filters (conv2d): the output's last axis."""
        return self.output_shape[-1]

    @property
    def window(self) -> int:
        """K: inputs of one dot product (`Kind.window`: dense n_in; conv2d kh*kw*C; depthwise2d
        kh*kw, its own channel's window only)."""
        return self.kind.window(self.kernel_size, self.input_shape) if self.kind is not None else self.n_in

    @property
    def extent(self) -> tuple[int, int]:
        """Rows and columns of input one window spans (the window generator's size): the
        kernel or pool, dilated: `(k - 1) * d + 1` per axis."""
        (kh, kw), (dh, dw) = self.kernel_size, self.dilation
        return (kh - 1) * dh + 1, (kw - 1) * dw + 1

    @property
    def hw_activation(self) -> str:
        """The activation the hardware applies (canonical text, `quant.activations`)."""
        return self.activation

    @property
    def table_regs(self) -> int:
        """t of K2C.Activation.Finish: 2 when a pipelined engine's finish reads a table (the
        activation is a table one and not left to the Top): the first register after the
        block RAM's read becomes its output register, the second is a fabric register
        between the block RAM's row and the engine's result register (mlp_tanh on ECP5:
        that route alone takes 10.2 ns); else 0."""
        table = self.table_activation and not self.top_activation
        return 2 * int(self.is_compute and self.pipeline > 0 and table)

    @property
    def table_activation(self) -> bool:
        """Whether the activation reads a table (K2C.Lut, quant.activations' table family)."""
        return activations.parse(self.activation).family == "table"

    @property
    def act_in_fmt(self) -> FixedFormat:
        """The format the activation reads: a standalone one its input's, a fused one the
        layer's output format (it follows the requantization)."""
        return self.in_fmt if self.activation_only else self.out_fmt

    @property
    def activation_doc(self) -> str:
        """What the hardware computes for the activation, with its error (quant.activations)."""
        return activations.describe(self.activation, self.act_in_fmt, self.out_fmt, self.output_shape[-1])

    @property
    def groups(self) -> int:
        """G = ceil(filters / pe): groups of PEs' work per window."""
        return -(-self.filters // self.pe)

    @property
    def chunk(self) -> int:
        """ch = ceil(K / cycles): multipliers per PE."""
        return -(-self.window // self.cycles)

    @property
    def tree_levels(self) -> int:
        """Levels of each PE's adder tree over its ch products and the bias field."""
        return tree_levels(self.chunk)

    @property
    def loads_late(self) -> int:
        """e (K2C.Engine's Loading): 1 when the engine loads each window from its window
        generator's shift register the cycle after accepting it (a convolution without a FIFO
        of windows: K2C.Conv's `direct`), else 0 (from the input beat as it accepts it)."""
        return int(self.is_compute and self.is_windowed and not self.window_fifo)

    @property
    def pipe_depth(self) -> int:
        """D: cycles from a window's accept plus its steps to its result entering the output
        queue (K2C.Engine's PipeDepth after its last step, and the load's delay e)."""
        return pipe_depth(self.chunk, self.pipeline, self.cycles, self.table_regs, self.groups) + self.loads_late

    @property
    def queue_depth(self) -> int:
        """Q: the engine's output queue, the most windows it holds at once (QueueDepth)."""
        return queue_depth(
            self.chunk,
            self.pipeline,
            self.cycles,
            self.groups * self.cycles,
            self.table_regs,
            self.groups,
            self.loads_late,
        )

    @property
    def rom_depth(self) -> int:
        """ROM words: one per (group, chunk)."""
        return self.groups * self.cycles

    @property
    def pad(self) -> int:
        """Padding neurons in the last group."""
        return self.groups * self.pe - self.filters

    @property
    def padded_input_shape(self) -> tuple[int, ...]:
        if not self.is_windowed:
            return self.input_shape
        h, w, c = self.input_shape
        top, bottom, left, right = self.pads
        return (h + top + bottom, w + left + right, c)

    @property
    def windows_per_image(self) -> int:
        """Dot products (conv2d, pools) per image; 1 for dense (`Kind.windows_per_image`)."""
        return self.kind.windows_per_image(self) if self.kind is not None else math.prod(self.output_shape[:-1])

    @property
    def multipliers(self) -> int:
        return (self.kind.multipliers(self) if self.kind is not None else 0) + self.activation_multipliers

    @property
    def channel_lanes(self) -> int:
        """Channels a BatchNormalization computes a cycle: `lanes`, or all of a beat's."""
        return self.lanes or self.output_shape[-1]

    @property
    def lane_chunks(self) -> int:
        """n of a serial BatchNormalization (K2C.Scatter and K2C.Collect around
        `batchNormLanes`): chunks of `lanes` channels per beat; 1 when it takes whole beats."""
        return self.output_shape[-1] // self.channel_lanes

    @property
    def splits_activation(self) -> bool:
        """Whether the activation is cut in two register stages (`mapP2`): a ReLU-family slope
        that is a constant multiplication (quant.activations.multiplies)."""
        return activations.multiplies(activations.parse(self.activation), self.act_in_fmt, self.out_fmt)

    @property
    def activation_multipliers(self) -> int:
        """A ReLU-family slope that is a constant multiplication (LeakyReLU(0.1), PReLU;
        `splits_activation`): one product per channel of a beat, which yosys maps to a DSP
        block each (mlp_tanh's 24 LeakyReLU products took 23 MULT18X18D beside the 132 the
        budget counted)."""
        return self.output_shape[-1] if self.activation != "linear" and self.splits_activation else 0

    @property
    def macs(self) -> int:
        """Multiply-accumulates per image (the useful work)."""
        return self.windows_per_image * self.filters * self.window if self.is_compute else 0

    @property
    def rom_bits(self) -> int:
        return self.kind.rom_bits(self) if self.kind is not None else 0

    @property
    def is_merge(self) -> bool:
        """It joins several inputs (`Kind.joins`)."""
        return self.kind is not None and self.kind.joins

    @property
    def input_formats(self) -> tuple[FixedFormat, ...]:
        """The format of each input (one for every layer but a merge)."""
        return self.in_fmts or (self.in_fmt,)

    def to_json(self) -> dict[str, Any]:
        """Everything but the IR record (the weights travel in golden.npz)."""
        data: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "layer":
                continue
            value = getattr(self, f.name)
            if f.name in _FORMAT_FIELDS:
                value = None if value is None else format_to_json(value)
            elif f.name == "in_fmts":
                value = [format_to_json(v) for v in value]
            elif isinstance(value, tuple):
                value = [list(v) if isinstance(v, tuple) else v for v in value]
            data[f.name] = value
        return data

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> LayerPlan:
        fields = dict(data)
        for key in _FORMAT_FIELDS:
            value = fields.get(key)
            fields[key] = None if value is None else FixedFormat(*value)
        for key in (
            "input_shape",
            "output_shape",
            "kernel_size",
            "strides",
            "pads",
            "crops",
            "size",
            "dilation",
            "inputs",
        ):
            if key in fields:
                fields[key] = tuple(fields[key])
        fields["in_fmts"] = tuple(FixedFormat(*v) for v in fields.get("in_fmts", ()))
        fields["input_shapes"] = tuple(tuple(s) for s in fields.get("input_shapes", ()))
        fields["fifo_depths"] = tuple(fields.get("fifo_depths", ()))
        return LayerPlan(**fields)


def format_to_json(fmt: FixedFormat) -> list[Any]:
    """[sign, int, frac], plus [rounding, overflow] when they are not the defaults
    (`FixedFormat(*value)` reads both forms back)."""
    base: list[Any] = [fmt.sign, fmt.int, fmt.frac]
    return base if fmt.default_modes else base + [fmt.rounding, fmt.overflow]


DEFAULT_PIPELINE = 2
"""Adder levels per pipeline stage when the user gives none: two carry chains a cycle (ECP5:
the adder tree then no longer sets the clock; docs/guide/place-and-route.md)."""
MAX_PIPELINE_LEVELS = 32
"""More levels than any adder tree has (2^32 terms): beyond, the value means nothing new."""


def tree_levels(chunk: int) -> int:
    """ceil(log2(chunk + 1)): the levels of an adder tree over `chunk` products and a bias."""
    return (chunk).bit_length()


def tree_stages(chunk: int, levels: int, cycles: int) -> int:
    """K2C.Engine's TreeStages: the adder tree's register stages, one per `levels` levels, and
    one after its last level when that level would otherwise share a cycle with the
    accumulating adder and its clamp (`cycles` >= 2 and `levels` not dividing the tree)."""
    whole, rest = divmod(tree_levels(chunk), levels)
    return whole + int(cycles >= 2 and rest > 0)


def pipe_depth(chunk: int, levels: int, cycles: int, table_regs: int = 0, groups: int = 1) -> int:
    """D (K2C.Engine's PipeDepth): 0 unpipelined; else two operand registers (the route from
    the weight memory, then the multiplier block's input register), two product registers
    (the block's own, then one for the route to the tree), the adder tree's (`tree_stages`),
    the accumulators, and the finish's two (requantized, then activated: K2C.Activation.
    Finish), so a saturating rounding and an activation's comparisons are never one path,
    and `table_regs` after a table activation's block RAM read (`LayerPlan.table_regs`); with
    two groups or more, the result register the output queue is written from (its LUT RAM
    then takes its data from the register beside it, not from the activation through the
    group multiplexer)."""
    if levels == 0:
        return 0
    return 7 + table_regs + tree_stages(chunk, levels, cycles) + int(groups >= 2)


def queue_depth(
    chunk: int, levels: int, cycles: int, steps: int, table_regs: int = 0, groups: int = 1, late: int = 0
) -> int:
    """Q (K2C.Engine's QueueDepth): 2 + (D + e + 1) // S, the fewest windows in flight for which
    an always-ready downstream never holds the input back (`late` = e, LayerPlan.loads_late)."""
    return 2 + (pipe_depth(chunk, levels, cycles, table_regs, groups) + late + 1) // steps


def accumulator_format(
    in_fmt: FixedFormat, w_fmt: FixedFormat, n_in: int, b_fmt: FixedFormat | None = None
) -> FixedFormat:
    """The exact accumulator of docs/guide/contract.md step 3: it can never overflow.

    Fraction bits cf = max(fa + fw, fb) (nothing is dropped). Clash integer bits
    ci = max((1+ia) + (1+iw), 1+ib) + ceil(log2(n_in+1)) + 1; our `int` field excludes the
    sign bit, so it is ci - 1. The formats are the hardware containers (unsigned, negative
    fields: `FixedFormat.container`), so the sum is exact on the values the hardware holds.
    """
    b_fmt = (b_fmt or w_fmt).container
    in_fmt, w_fmt = in_fmt.container, w_fmt.container
    guard = math.ceil(math.log2(n_in + 1))
    product_int = (in_fmt.sign + in_fmt.int) + (w_fmt.sign + w_fmt.int)
    clash_int = max(product_int, b_fmt.sign + b_fmt.int) + guard + 1
    return FixedFormat(1, clash_int - 1, max(in_fmt.frac + w_fmt.frac, b_fmt.frac))


PLAIN_ACTIVATIONS = ("linear", "relu")
"""The activations exact on any format (they keep every value in range and on the grid)."""


def relu_before_requantize(plan: LayerPlan) -> bool:
    """Whether `plan` applies its fused relu to the exact value *before* the requantization
    (docs/guide/contract.md, Formats): needed when the output format wraps, because a wrap does
    not commute with a relu (a large positive value wraps negative, a negative one wraps
    positive) and quantization-aware models (HGQ2) quantize the relu's output. For a
    saturating format both orders are equal (`q` is monotone with `q(0) = 0`), so the
    default order, requantize then activate, is kept there."""
    return plan.requantizes and plan.activation == "relu" and plan.out_fmt.overflow == "wrap"
