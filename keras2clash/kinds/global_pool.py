"""The global pooling kinds: GlobalMax/AveragePooling1D/2D.

A global pool reduces every channel over the whole image to one value (`K2C.Global`: one
register per channel, one output beat per image). A 1-D sequence `(steps, channels)` is an
image one row high in the IR (`frontend.registry.image_shape`), so the 1-D classes become the
same record. With keepdims the Keras output is `(1, 1, C)` (2-D) or `(1, C)` (1-D), both
`(1, 1, C)` in the IR; without it `(C,)`: the same single beat.

Arithmetic (docs/guide/contract.md, global pooling): the maximum is exact; the average is
floor((2*sum + n) / (2*n)) over the n = H*W positions, the mean rounded half up, in the
input's format (which must round to nearest: frac >= 0 and the default modes).

Block (`K2C.Global`, the exact hardware model `hw.events.Global`): an input register, a
running per-channel register over the n beats of an image, and an output register.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from keras2clash.backend.haskell import kind_template, shape_text
from keras2clash.errors import K2CError
from keras2clash.frontend.registry import (
    ConversionState,
    KerasLayer,
    _check_keras_shape,
    _single_input,
    register_converter,
)
from keras2clash.hw.events import Block, EngineTiming, Global, Max, Stateful
from keras2clash.hw.plan import LayerPlan
from keras2clash.ir.layers import Layer, register_record
from keras2clash.kinds.base import Entry, Kind, Storage
from keras2clash.quant.exact import INT64_SAFE_BITS, QuantizedLayer

HASKELL = kind_template("global_pool.hs.j2")


@dataclass(frozen=True)
class GlobalPool(Layer):
    """One value per channel over a whole image; the output is `(C,)`, or `(1, 1, C)` with
    keepdims: either way the hardware's single beat per image."""

    keepdims: bool = False


@register_record
@dataclass(frozen=True)
class GlobalMaxPool(GlobalPool):
    type: ClassVar[str] = "globalmaxpool"
    keras_class: ClassVar[str] = "GlobalMaxPooling2D"


@register_record
@dataclass(frozen=True)
class GlobalAvgPool(GlobalPool):
    type: ClassVar[str] = "globalavgpool"
    keras_class: ClassVar[str] = "GlobalAveragePooling2D"


@register_converter("GlobalMaxPooling2D", "GlobalAveragePooling2D", "GlobalMaxPooling1D", "GlobalAveragePooling1D")
def _convert_global_pool(layer: KerasLayer, state: ConversionState) -> Layer:
    """Per-channel maximum or rounded mean over all H*W (or steps) positions."""
    _single_input(layer, state)
    kind = type(layer).__name__
    if getattr(layer, "data_format", "channels_last") != "channels_last":
        raise K2CError(
            f"{kind} layer '{layer.name}' uses data_format='{layer.data_format}'; only channels_last is supported"
        )
    rank = 2 if kind.endswith("1D") else 3
    if len(state.keras_shape) != rank or len(state.shape) != 3:
        raise K2CError(
            f"{kind} layer '{layer.name}' gets an input of shape {state.keras_shape}; it needs "
            + ("a sequence (steps, channels)" if rank == 2 else "an image (height, width, channels)")
        )
    keepdims = bool(getattr(layer, "keepdims", False))
    channels = state.shape[-1]
    out = (1, 1, channels) if keepdims else (channels,)
    _check_keras_shape(layer, state, out)
    cls = GlobalMaxPool if "Max" in kind else GlobalAvgPool
    return cls(**state.common(layer, out), keepdims=keepdims)


def _positions(shape: Sequence[int]) -> int:
    """n: the beats of one image (its positions)."""
    return math.prod(shape[:-1])


class _GlobalKind(Kind):
    """What the two reductions share: one beat out per image, the block's three registers."""

    def reduce(self, flat: np.ndarray, plan: LayerPlan) -> np.ndarray:
        """(N, n, C) raw -> (N, C) raw."""
        raise NotImplementedError

    def float_reduce(self, flat: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def running_bits(self, plan: LayerPlan) -> int:
        """K2C.Global's running value per channel."""
        raise NotImplementedError

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        flat = np.asarray(xs[0]).reshape(len(xs[0]), -1, plan.input_shape[-1])
        return np.asarray(self.reduce(flat, plan), dtype=np.int64).reshape(len(xs[0]), *plan.output_shape)

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        h = xs[0]
        return None, self.float_reduce(h.reshape(len(h), -1, h.shape[-1])).reshape(len(h), *layer.output_shape)

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        block = Global(_positions(plan.input_shape), down, mx)
        blocks.append(block)
        return block

    def storage(self, plan: LayerPlan) -> Storage:
        """The input beat, the running register (exact sum or maximum), the output register, a flag."""
        in_bits, out_bits = plan.in_fmt.hw_bits, plan.out_fmt.hw_bits
        return Storage(register_bits=plan.input_shape[-1] * (in_bits + self.running_bits(plan) + out_bits) + 1)

    def haskell(self, beats: int) -> tuple[str, str]:
        """The reduction's name in the haddock and the block's Haskell."""
        raise NotImplementedError

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        beats = _positions(plan.input_shape)
        reduction, body = self.haskell(beats)
        shapes = f"{shape_text(plan.input_shape)} -> {shape_text(plan.output_shape)}"
        return Entry(doc=HASKELL.doc(shapes, reduction, beats), body=(body,), uses=("global",))


class GlobalMaxKind(_GlobalKind):
    records = (GlobalMaxPool,)
    selects_values = True
    compares = True

    def reduce(self, flat: np.ndarray, plan: LayerPlan) -> np.ndarray:
        return flat.max(axis=1)

    def float_reduce(self, flat: np.ndarray) -> np.ndarray:
        return flat.max(axis=1)

    def running_bits(self, plan: LayerPlan) -> int:
        return plan.in_fmt.hw_bits

    def haskell(self, beats: int) -> tuple[str, str]:
        return "maximum", HASKELL.global_max(beats)


class GlobalAverageKind(_GlobalKind):
    records = (GlobalAvgPool,)

    def check(self, plan: LayerPlan) -> None:
        if plan.in_fmt.frac < 0 or not plan.in_fmt.default_modes:
            raise K2CError(
                f"layer '{plan.name}' ({plan.type}): average pooling rounds to nearest on its input format "
                f"{plan.in_fmt}, which asks for other modes or has negative fraction bits; give its producer a "
                "format with frac >= 0 and the default modes"
            )

    def reduce(self, flat: np.ndarray, plan: LayerPlan) -> np.ndarray:
        n = flat.shape[1]
        wide = plan.in_fmt.hw_bits + n.bit_length() + 2 > INT64_SAFE_BITS
        return (2 * flat.astype(object if wide else np.int64).sum(axis=1) + n) // (2 * n)

    def float_reduce(self, flat: np.ndarray) -> np.ndarray:
        return flat.mean(axis=1)

    def running_bits(self, plan: LayerPlan) -> int:
        """Holds `2*sum + n` of n values: `W + clog2(n) + 2`."""
        return plan.in_fmt.hw_bits + (_positions(plan.input_shape) - 1).bit_length() + 2

    def haskell(self, beats: int) -> tuple[str, str]:
        return "rounded mean", HASKELL.global_average(beats)


KINDS = (GlobalMaxKind(), GlobalAverageKind())
