"""The flatten kind: Keras Flatten (channels last) of an image or sequence into one vector.

It moves values (row-major, the channel fastest, as Keras flattens) and keeps its input's
format. Block: `K2C.Collect` gathers the image's beats into one vector (the exact hardware
model `hw.events.Collect`: the vector is valid the cycle after its last beat; the next
image's first beat waits until the vector has moved).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from keras2clash.backend.haskell import kind_template, shape_text
from keras2clash.errors import K2CError
from keras2clash.frontend.registry import ConversionState, KerasLayer, _single_input, register_converter
from keras2clash.hw.events import Block, Collect, EngineTiming, Max, Stateful
from keras2clash.hw.plan import LayerPlan
from keras2clash.ir import layers as ir
from keras2clash.ir.layers import Layer, register_record
from keras2clash.kinds.base import Entry, Kind, Storage
from keras2clash.quant.exact import QuantizedLayer

HASKELL = kind_template("flatten.hs.j2")


@register_record
@dataclass(frozen=True)
class Flatten(Layer):
    """Row-major reshape of an image's beats into one vector (Keras Flatten, channels last)."""

    type: ClassVar[str] = "flatten"
    keras_class: ClassVar[str] = "Flatten"


@register_converter("Flatten")
def _convert_flatten(layer: KerasLayer, state: ConversionState) -> Layer:
    """Rank>1 -> 1-D row-major reshape. On a 1-D input it is the identity (removed by the
    passes, which also merges consecutive Flattens)."""
    _single_input(layer, state)
    if len(state.shape) == 1:
        return ir.Identity(**state.common(layer, state.shape), source_class="Flatten")
    if getattr(layer, "data_format", "channels_last") == "channels_first":
        raise K2CError(
            f"Flatten layer '{layer.name}' uses data_format='channels_first', which "
            "transposes its input before flattening; only channels_last is supported"
        )
    return Flatten(**state.common(layer, (math.prod(state.shape),)))


def _beats(plan: LayerPlan) -> int:
    return math.prod(plan.input_shape[:-1])


class FlattenKind(Kind):
    records = (Flatten,)
    selects_values = True
    regroups = True

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        return xs[0].reshape(len(xs[0]), -1)  # row-major, like Keras channels-last Flatten

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        return None, xs[0].reshape(len(xs[0]), -1)

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        collect = Collect(_beats(plan), down, mx)
        blocks.append(collect)
        return collect

    def storage(self, plan: LayerPlan) -> Storage:
        """K2C.Collect's shift register: the whole vector."""
        return Storage(register_bits=plan.n_in * plan.in_fmt.hw_bits)

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        return Entry(
            doc=HASKELL.doc(shape_text(plan.input_shape), plan.n_out),
            body=(HASKELL.collect(_beats(plan)),),
            notes=(HASKELL.note(_beats(plan), plan.input_shape[-1]),),
            uses=("collect",),
        )


KINDS = (FlattenKind(),)
