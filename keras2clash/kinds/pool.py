"""The pooling kinds: MaxPooling1D/2D and AveragePooling1D/2D.

A 1-D pooling is the 2-D record one row high (pool `(1, p)`, strides `(1, s)`). 'same' max
pooling pads with the format's minimum (never chosen, as Keras' -infinity); 'same' average
pooling pads with zeros and divides each window by its count of non-padding values, as
Keras does (the record keeps padding='same' with its pads; a ZeroPadding2D folded in front
instead makes padding='valid', whose zeros count).

Arithmetic (docs/guide/contract.md, pooling): the maximum is exact; the average is
floor((2*sum + N) / (2*N)), the mean rounded half up, in the input's format.

Blocks: the window generator (`kinds.window`), then `K2C.Pool` on `K2C.Pipe`: the window
registered, a balanced tree along the rows and one down the rows, a register after every
level (`pool_depth`); Keras 'same' average pooling (`avgPoolSame`) registers its two
divisions too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from keras2clash.backend.haskell import kind_template, shape_text
from keras2clash.errors import K2CError
from keras2clash.frontend.images import _check_image_layer, _padding, _pair, _window_geometry
from keras2clash.frontend.registry import ConversionState, KerasLayer, _check_keras_shape, register_converter
from keras2clash.frontend.sequences import _check_sequence_layer, _one, _padding_1d
from keras2clash.hw.events import Block, EngineTiming, Max, Stateful, pipe_block
from keras2clash.hw.plan import LayerPlan, Params
from keras2clash.ir.layers import Layer, register_record
from keras2clash.kinds.base import Depth, Entry, Storage, params_of
from keras2clash.kinds.window import (
    Windowed,
    WindowParams,
    generator_geometry,
    pad_stage,
    pad_uses,
    padding_doc,
    source_doc,
    window_storage,
)
from keras2clash.quant.exact import INT64_SAFE_BITS, QuantizedLayer, pad_images, windows

HASKELL = kind_template("pool.hs.j2")


# --- the records and converters ---------------------------------------------------------


@dataclass(frozen=True)
class Pool2D(Layer):
    """Max or average pooling per channel; 'same' max pooling pads with -infinity.
    `source_class` is the Keras class (a 1-D pooling is this record one row high); empty
    means the record's own `keras_class`."""

    pool_size: tuple[int, int] = (2, 2)
    strides: tuple[int, int] = (2, 2)
    padding: str = "valid"
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    source_class: str = ""


@register_record
@dataclass(frozen=True)
class MaxPool2D(Pool2D):
    type: ClassVar[str] = "maxpool2d"
    keras_class: ClassVar[str] = "MaxPooling2D"


@register_record
@dataclass(frozen=True)
class AvgPool2D(Pool2D):
    type: ClassVar[str] = "avgpool2d"
    keras_class: ClassVar[str] = "AveragePooling2D"


def pool_record(
    layer: KerasLayer, state: ConversionState, pool_size: tuple[int, int], strides: tuple[int, int]
) -> Pool2D:
    """The pooling record of a 2-D (or 1-D, one row high) max or average pooling."""
    kind = type(layer).__name__
    padding = _padding(layer)
    (out_h, out_w), pads = _window_geometry(layer, state.shape, pool_size, strides, padding, "pool_size")
    out = (out_h, out_w, state.shape[2])
    _check_keras_shape(layer, state, out)
    cls = MaxPool2D if kind.startswith("MaxPooling") else AvgPool2D
    return cls(
        **state.common(layer, out), pool_size=pool_size, strides=strides, padding=padding, pads=pads, source_class=kind
    )


@register_converter("MaxPooling2D", "AveragePooling2D")
def _convert_pool2d(layer: KerasLayer, state: ConversionState) -> Layer:
    """Max/average pooling over (ph, pw) windows per channel; strides default to the pool."""
    _check_image_layer(layer, state)
    return pool_record(layer, state, _pair(layer, "pool_size", layer.pool_size), _pair(layer, "strides", layer.strides))


@register_converter("MaxPooling1D", "AveragePooling1D")
def _convert_pool1d(layer: KerasLayer, state: ConversionState) -> Layer:
    """1-D max/average pooling -> the 2-D pooling record of pool (1, p), strides (1, s):
    the same code path as the 2-D layers, padding rules included."""
    _check_sequence_layer(layer, state)
    _padding_1d(layer, ("valid", "same"))
    pool = _one(layer, "pool_size", layer.pool_size)
    stride = _one(layer, "strides", layer.strides if layer.strides is not None else pool)
    return pool_record(layer, state, (1, pool), (1, stride))


@dataclass(frozen=True)
class PoolParams(WindowParams):
    """A pooling's geometry; `exclude_pads`: Keras 'same' average pooling divides each window
    by its count of non-padding values."""

    exclude_pads: bool = False


# --- timing ---------------------------------------------------------------------------------


def axis_depth(n: int) -> int:
    """K2C.Pool's AxisDepth n: a register after every level of a balanced tree over n values
    (ceil(log2 n) levels), one register when there is no level."""
    return max(1, (n - 1).bit_length())


def pool_depth(ph: int, pw: int) -> int:
    """K2C.Pool's PoolDepth ph pw: the window registered (the generator offers it straight from
    the pixel's source), then the tree along the rows and the one down the rows (3 for windows
    of at most 2x2; a 3x3 maximum has 5: one comparison per register stage)."""
    return 1 + axis_depth(pw) + axis_depth(ph)


AVG_SAME_DIVISIONS = 2
"""K2C.Pool.AvgSameDepth - PoolDepth: the registered divisions by the window's rows, then columns."""


def pool_stage_depth(plan: LayerPlan) -> int:
    """A pooling's K2C.Pipe registers: PoolDepth, and for Keras 'same' average pooling
    (`avgPoolSame`, AvgSameDepth) one more after each of its two divisions."""
    own = params_of(plan, PoolParams)
    return pool_depth(*own.kernel_size) + (AVG_SAME_DIVISIONS if own.exclude_pads else 0)


def _tree_registers(n: int) -> int:
    """Values registered by K2C.Pool.treeStages over n leaves: 2^(lv-j) after level j of
    lv = ceil(log2 n) levels (the padding included), one value when there is no level."""
    lv = (n - 1).bit_length()
    return sum(1 << (lv - j) for j in range(1, lv + 1)) or 1


# --- the kinds ------------------------------------------------------------------------------


def _float_windows(x: np.ndarray, layer: Pool2D, fill: float) -> np.ndarray:
    return windows(
        pad_images(x, layer.pads, fill),
        layer.pool_size,
        (1, 1),
        layer.strides,
        (layer.output_shape[0], layer.output_shape[1]),
    )


class _PoolKind(Windowed):
    """What max and average pooling share: the window generator, then K2C.Pool on K2C.Pipe."""

    params_type: ClassVar[type[Params]] = PoolParams
    block: ClassVar[str]
    reduction: ClassVar[str]
    pad_value: ClassVar[str]  # the padding in Haskell (K2C.Pad's value)

    def plan_params(self, layer: Layer) -> PoolParams:
        assert isinstance(layer, Pool2D)
        return PoolParams(
            kernel_size=layer.pool_size,
            strides=layer.strides,
            pads=layer.pads,
            source_class="" if layer.source_class == layer.keras_class else layer.source_class,
        )

    def row_bits(self, plan: LayerPlan) -> int:
        """The width of the values K2C.Pool's trees register."""
        return plan.in_fmt.hw_bits

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        stage = pipe_block(pool_stage_depth(plan), down, mx, blocks)
        return self.front(plan, stage, mx, blocks)

    def depths(self, plan: LayerPlan) -> tuple[Depth, ...]:
        own = params_of(plan, PoolParams)
        ph, pw = own.kernel_size
        expr = HASKELL.avg_same_depth(ph, pw) if own.exclude_pads else HASKELL.pool_depth(ph, pw)
        return (Depth("pool", expr, pool_stage_depth(plan), "pool"),)

    def storage(self, plan: LayerPlan) -> Storage:
        """The window generator's, then K2C.Pool on K2C.Pipe: the window registered, the trees
        along and down the rows, their queue; 'same' averaging's two divisions' results."""
        window, own = window_storage(plan), params_of(plan, PoolParams)
        (ph, pw), channels, in_bits = own.kernel_size, plan.output_shape[-1], plan.in_fmt.hw_bits
        depth = pool_stage_depth(plan)
        regs = (
            ph * pw * channels * in_bits
            + channels * self.row_bits(plan) * (ph * _tree_registers(pw) + _tree_registers(ph))
            + depth
        )
        if own.exclude_pads:
            regs += AVG_SAME_DIVISIONS * channels * self.row_bits(plan)
        return Storage(
            line_buffer_bits=window.line_buffer_bits,
            register_bits=window.register_bits + regs,
            fifo_bits=window.fifo_bits + (depth + 2) * channels * plan.out_fmt.hw_bits,
        )

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        own = params_of(plan, PoolParams)
        (ph, pw), (sh, sw) = own.kernel_size, own.strides
        h, w = generator_geometry(plan)[:2]
        shapes = f"{shape_text(plan.input_shape)} -> {shape_text(plan.output_shape)}"
        doc = HASKELL.doc(source_doc(plan), shapes, ph, pw, self.reduction, sh, sw, padding_doc(plan))
        notes: tuple[str, ...] = ()
        if own.exclude_pads:
            body = HASKELL.avg_pool_same(
                h, w, ph, pw, sh, sw, list(own.pads), *(plan.output_shape[0], plan.output_shape[1])
            )
            notes = (HASKELL.same_note(),)
        else:
            body = HASKELL.pool(self.block, h, w, ph, pw, sh, sw)
        return Entry(
            doc=doc, body=(*pad_stage(plan, self.pad_value), body), notes=notes, uses=("pool", *pad_uses(plan))
        )


class MaxPoolKind(_PoolKind):
    records = (MaxPool2D,)
    selects_values = True
    compares = True
    block, reduction, pad_value = "Pool.maxPool", "max", "minBound"

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        """Per channel maximum; 'same' padding counts as the format's minimum (never chosen)."""
        own = params_of(plan, PoolParams)
        padded = pad_images(xs[0], own.pads, plan.in_fmt.raw_min)
        return windows(padded, own.kernel_size, (1, 1), own.strides, (plan.output_shape[0], plan.output_shape[1])).max(
            axis=(3, 4)
        )

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        assert isinstance(layer, Pool2D)
        return None, _float_windows(xs[0], layer, -np.inf).max(axis=(3, 4))


class AvgPoolKind(_PoolKind):
    records = (AvgPool2D,)
    block, reduction, pad_value = "Pool.avgPool", "average", "0"

    def plan_params(self, layer: Layer) -> PoolParams:
        """'same' average pooling divides by each window's count of non-padding values."""
        assert isinstance(layer, AvgPool2D)
        return replace(super().plan_params(layer), exclude_pads=layer.padding == "same" and any(layer.pads))

    def check(self, plan: LayerPlan) -> None:
        if plan.in_fmt.frac < 0 or not plan.in_fmt.default_modes:
            raise K2CError(
                f"layer '{plan.name}' ({plan.type}): average pooling rounds to nearest on its input format "
                f"{plan.in_fmt}, which asks for other modes or has negative fraction bits; give its producer a "
                "format with frac >= 0 and the default modes"
            )

    def row_bits(self, plan: LayerPlan) -> int:
        """K2C.Pool.WideSum: the exact sum of the window."""
        ph, pw = params_of(plan, PoolParams).kernel_size
        return plan.in_fmt.hw_bits + (ph - 1).bit_length() + (pw - 1).bit_length() + 2

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        """Per channel floor((2*sum + N) / (2*N)): the average rounded half up, exactly.

        N is the pool size, or with 'same' padding (`exclude_pads`) each window's count of
        non-padding values (Keras' rule), counted here by pooling an image of ones."""
        own = params_of(plan, PoolParams)
        size = own.kernel_size[0] * own.kernel_size[1]
        wide = plan.in_fmt.hw_bits + size.bit_length() + 2 > INT64_SAFE_BITS  # 2*sum + count, exactly

        def window_sums(x: np.ndarray) -> np.ndarray:
            win = windows(
                pad_images(x, own.pads, 0),
                own.kernel_size,
                (1, 1),
                own.strides,
                (plan.output_shape[0], plan.output_shape[1]),
            )
            return win.astype(object if wide else np.int64).sum(axis=(3, 4))

        count: int | np.ndarray = size
        if own.exclude_pads:
            count = window_sums(np.ones((1, *plan.input_shape[:2], 1), dtype=np.int64))[0]  # (H2, W2, 1)
        return np.asarray((2 * window_sums(xs[0]) + count) // (2 * count), dtype=np.int64)  # in range

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """With 'same' padding each window divides by its count of non-padding values (Keras),
        with folded ZeroPadding2D ('valid') by the pool size."""
        assert isinstance(layer, AvgPool2D)
        total = _float_windows(xs[0], layer, 0.0).sum(axis=(3, 4))
        if layer.padding == "same" and any(layer.pads):
            ones = np.ones((1, *xs[0].shape[1:3], 1))
            return None, total / _float_windows(ones, layer, 0.0).sum(axis=(3, 4))
        return None, total / (layer.pool_size[0] * layer.pool_size[1])


KINDS = (MaxPoolKind(), AvgPoolKind())
