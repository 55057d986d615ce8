"""The batch normalization kind: a Keras BatchNormalization the passes could not fold.

Inference-time batch normalisation of the last axis is `scale * x + offset` per channel
(scale = gamma / sqrt(var + eps), offset = beta - mean * scale). The pass `fold_batchnorm`
folds it into a linear Dense/Conv2D/DepthwiseConv2D that alone feeds it; anywhere else the
hardware builds it as a per-channel multiply-add (an activation after it may be fused).

Formats (docs/guide/contract.md): the scale in the weight format, the offset in the bias
format, the product and the offset summed exactly (fraction bits max(fa + fw, fb)), then one
requantization to the output format and the activation.

Block: `K2C.BatchNorm` on `K2C.Pipe` (`BATCHNORM_DEPTH` registers: the input beat, the
products, the finished values); a serial one (`lanes`, chosen by `hw.lanes`) is
`batchNormLanes` on `lanes` channels a cycle between a `K2C.Scatter` and a `K2C.Collect` of
the beat's `lane_chunks`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from keras2clash.backend.haskell import KindTemplate, kind_template, shape_text, vec_literal
from keras2clash.errors import K2CError
from keras2clash.frontend.registry import ConversionState, KerasLayer, _single_input, _to_numpy, register_converter
from keras2clash.hw.events import Block, Collect, EngineTiming, Max, Scatter, Stateful, pipe_block
from keras2clash.hw.plan import Common, LayerFormats, LayerPlan, Params, accumulator_format, relu_before_requantize
from keras2clash.ir.layers import Layer, register_record
from keras2clash.kinds.base import ChannelConstantsKind, Depth, Entry, Storage, check_requantized_output, params_of
from keras2clash.quant import activations
from keras2clash.quant.exact import INT64_SAFE_BITS, QuantizedLayer, finish
from keras2clash.quant.formats import FixedFormat

HASKELL = kind_template("batchnorm.hs.j2")

BATCHNORM_DEPTH = 3
"""K2C.BatchNorm's BatchNormDepth: the input beat, the products, then the finished values."""


@register_record
@dataclass(frozen=True)
class BatchNorm(Layer):
    """Inference-time batch normalisation of the last axis: `scale * x + shift` per channel
    (scale = gamma / sqrt(var + eps); the record keeps `shift` = beta and `mean` apart, so
    the per-channel offset is `shift - mean * scale`, `offset`)."""

    activation: str = "linear"  # type: ignore[assignment]
    scale: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    shift: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    mean: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    folds: bool = True  # False: it quantizes its input first (HGQ2's QBatchNormalization), so it stays a stage

    type: ClassVar[str] = "batchnorm"
    keras_class: ClassVar[str] = "BatchNormalization"

    @property
    def offset(self) -> np.ndarray:
        """The per-channel constant added after the scale: `shift - mean * scale`."""
        with np.errstate(all="ignore"):
            return self.shift - self.mean * self.scale


@register_converter("BatchNormalization")
def _convert_batch_normalization(layer: KerasLayer, state: ConversionState) -> Layer:
    """Keras computes `(x - mean) / sqrt(var + eps) * gamma + beta` per channel of the last
    axis; with `g = gamma / sqrt(var + eps)` that is `g * x + (beta - mean * g)` (gamma = 1
    when scale=False, beta = 0 when center=False). The axis is checked against the Keras
    shape (a 1-D tensor is one row high only in the IR)."""
    _single_input(layer, state)
    rank = len(state.keras_shape) + 1  # with the batch axis
    axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    if len(axes) != 1 or int(axes[0]) % rank != rank - 1:
        raise K2CError(
            f"BatchNormalization layer '{layer.name}' normalises axis {layer.axis} of an "
            f"input of shape {state.keras_shape}; only the last (channels) axis is supported"
        )
    mean = _to_numpy(layer.moving_mean)
    variance = _to_numpy(layer.moving_variance)
    gamma = _to_numpy(layer.gamma) if layer.scale else np.ones_like(mean)
    beta = _to_numpy(layer.beta) if layer.center else np.zeros_like(mean)
    with np.errstate(all="ignore"):
        g = gamma / np.sqrt(variance + float(layer.epsilon))
    return BatchNorm(**state.common(layer, state.shape), scale=g, shift=beta, mean=mean)


@dataclass(frozen=True)
class BatchNormParams(Params):
    """`lanes`: channels computed a cycle (K2C.BatchNorm.batchNormLanes, a divisor of C below
    C, chosen by `hw.lanes`); 0: all C of a beat."""

    lanes: int = 0


class BatchNormKind(ChannelConstantsKind):
    records: ClassVar[tuple[type[Layer], ...]] = (BatchNorm,)
    params_type: ClassVar[type[Params]] = BatchNormParams
    keeps_format = False
    requantizes = True
    fuses_activation = True
    lanes_knob = True
    table_after_register = False
    weight_name = "scale"
    texts: ClassVar[KindTemplate] = HASKELL
    """The haddock's and Weights.hs's text (`doc`, `constants`), given the record's Keras class:
    a kind on this arithmetic and block with other constants says there what they are."""

    @property
    def keras_class(self) -> str:
        """The Keras class of the kind's record, which the generated Haskell names."""
        return self.records[0].keras_class

    def plan(self, common: Common, override: LayerFormats | None, fmt: FixedFormat) -> LayerPlan:
        """Scale in the weight format, offset in the bias format, the exact accumulator of one
        product plus the offset (n_in = 1); a whole beat a cycle (`hw.lanes` may choose fewer)."""
        layer = common.layer
        override = override or LayerFormats()
        if override.accumulator_bits is not None:
            raise K2CError(
                f"layer '{layer.name}' (batchnorm) always has an exact accumulator; "
                "give it weight, bias and output formats only"
            )
        w_fmt = override.weight or fmt
        b_fmt = override.bias or w_fmt
        acc = accumulator_format(common.in_fmt, w_fmt, 1, b_fmt)
        return common.plan(
            out_fmt=override.output or fmt, w_fmt=w_fmt, b_fmt=b_fmt, acc_fmt=acc, params=BatchNormParams()
        )

    def check(self, plan: LayerPlan) -> None:
        check_requantized_output(plan)

    def channel_lanes(self, plan: LayerPlan) -> int:
        """`lanes`, or all of a beat's."""
        return params_of(plan, BatchNormParams).lanes or plan.output_shape[-1]

    def with_lanes(self, plan: LayerPlan, lanes: int) -> LayerPlan:
        return replace(plan, params=replace(params_of(plan, BatchNormParams), lanes=lanes))

    def multipliers(self, plan: LayerPlan) -> int:
        """One per channel of a beat, all in the same cycle, or one per lane."""
        return plan.channel_lanes

    def constants(self, layer: Layer) -> tuple[np.ndarray, np.ndarray]:
        """Scale (stored in the weight format) and offset (in the bias format), as floats."""
        assert isinstance(layer, BatchNorm)
        return np.asarray(layer.scale, dtype=np.float64), np.asarray(layer.offset, dtype=np.float64)

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        """Per channel `x * scale + offset` exactly (product with fa + fw fraction bits, offset
        aligned, both to cf = max(fa + fw, fb)), one requantization, the activation."""
        assert params is not None and plan.w_fmt is not None and plan.b_fmt is not None and plan.acc_fmt is not None
        dtype = object if plan.acc_fmt.bits > INT64_SAFE_BITS else np.int64
        fa, fw, fb = plan.in_fmt.raw_frac, plan.w_fmt.raw_frac, plan.b_fmt.raw_frac
        cf = max(fa + fw, fb)
        acc = ((np.asarray(xs[0]).astype(dtype) * params.kernel.astype(dtype)) << (cf - fa - fw)) + (
            params.bias.astype(dtype) << (cf - fb)
        )
        return finish(acc, cf, plan.out_fmt, plan.hw_activation, relu_before_requantize(plan))

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        scale, offset = params if params is not None else self.constants(layer)
        pre = xs[0] * np.asarray(scale, dtype=np.float64) + np.asarray(offset, dtype=np.float64)
        return pre, activations.keras_float(activations.parse(layer.activation), pre)

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        n = plan.lane_chunks
        if n > 1:
            collect = Collect(n, down, mx)
            blocks.append(collect)
            down = collect
        down = pipe_block(BATCHNORM_DEPTH, down, mx, blocks)
        if n > 1:
            scatter = Scatter(n, down, mx)
            blocks.append(scatter)
            down = scatter
        return down

    def depths(self, plan: LayerPlan) -> tuple[Depth, ...]:
        return (Depth("stage", HASKELL.depth(), BATCHNORM_DEPTH, "batch_norm"),)

    def storage(self, plan: LayerPlan) -> Storage:
        """The input beat, the products, the finished values and the queue, each `channel_lanes`
        wide; a serial one also registers its chunk's constants beside the input and keeps a
        chunk counter, between the Scatter's and the Collect's registers of a whole beat."""
        assert plan.w_fmt is not None and plan.b_fmt is not None
        in_bits, out_bits, lanes = plan.in_fmt.hw_bits, plan.out_fmt.hw_bits, plan.channel_lanes
        product = in_bits + plan.w_fmt.hw_bits  # K2C.Merge.mulExact: SFixed (ia + iw) (fa + fw)
        regs = lanes * (in_bits + product + out_bits) + BATCHNORM_DEPTH
        n = plan.lane_chunks
        if n > 1:
            constants = lanes * (plan.w_fmt.hw_bits + plan.b_fmt.hw_bits)
            offsets = lanes * plan.b_fmt.hw_bits  # carried beside the products
            channels = plan.output_shape[-1]
            counters = 3 * (n - 1).bit_length() + 2  # the chunk's, the Scatter's and the Collect's; their flags
            regs += constants + offsets + channels * (in_bits + out_bits) + counters
        return Storage(register_bits=regs, fifo_bits=(BATCHNORM_DEPTH + 2) * lanes * out_bits)

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        assert plan.w_fmt is not None and plan.b_fmt is not None
        shapes = f"{shape_text(plan.input_shape)} -> {shape_text(plan.output_shape)}"
        n = plan.lane_chunks
        notes = (HASKELL.stages_note(plan.channel_lanes),)
        if n == 1:
            return Entry(
                doc=self.texts.doc(shapes, plan.w_fmt, plan.b_fmt, plan.out_fmt, plan.activation, self.keras_class),
                body=(HASKELL.batch_norm(fn),),
                notes=notes,
                uses=("batch_norm",),
            )
        return Entry(
            doc=self.texts.doc(shapes, plan.w_fmt, plan.b_fmt, plan.out_fmt, plan.activation, self.keras_class),
            body=(HASKELL.scatter(n), HASKELL.batch_norm_lanes(n, fn), HASKELL.collect(n)),
            notes=(*notes, HASKELL.serial_note(plan.channel_lanes, plan.output_shape[-1], n)),
            uses=("batch_norm", "scatter", "collect"),
        )

    def weights(self, plan: LayerPlan, fn: str, params: QuantizedLayer | None) -> tuple[tuple[str, ...], str]:
        """Weights.hs: the scale and offset Vecs of raw integers."""
        assert params is not None and plan.w_fmt is not None and plan.b_fmt is not None
        c = {
            "fn": fn,
            "name": plan.name,
            "keras_class": self.keras_class,
            "channels": plan.output_shape[-1],
            "scale_type": plan.w_fmt.clash_type,
            "scale_frac": plan.w_fmt.raw_frac,
            "scale_fmt": str(plan.w_fmt),
            "offset_type": plan.b_fmt.clash_type,
            "offset_frac": plan.b_fmt.raw_frac,
            "offset_fmt": str(plan.b_fmt),
            "scale": vec_literal(params.kernel),
            "offset": vec_literal(params.bias),
        }
        return (f"{fn}_scale", f"{fn}_offset"), self.texts.constants(c)


KINDS = (BatchNormKind(),)
