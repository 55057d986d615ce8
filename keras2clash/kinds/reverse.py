"""The reverse kind: a sequence's steps in reverse order. No Keras layer of its own: a
recurrent layer that reads its sequence backwards (`go_backwards`, the backward half of a
`Bidirectional`) is this, then the layer (`kinds.recurrent`).

It moves values and keeps its input's format. Block: `K2C.Reverse` holds a whole sequence
(LUT RAM) and plays it back from its last step (the exact hardware model
`hw.events.Reverse`: it takes a beat a cycle while it fills, sends the last step's beat the
cycle after it took it, one beat a cycle while downstream is ready, and fills again from the
cycle after its first step's beat left).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from keras2clash.backend.haskell import kind_template
from keras2clash.hw.events import Block, EngineTiming, Max, Reverse, Stateful
from keras2clash.hw.plan import LayerPlan
from keras2clash.ir.layers import Layer, register_record
from keras2clash.kinds.base import Entry, Kind, Storage

HASKELL = kind_template("reverse.hs.j2")


@register_record
@dataclass(frozen=True)
class ReverseSteps(Layer):
    """A sequence `(1, steps, C)` with its steps in reverse order."""

    type: ClassVar[str] = "reverse"
    keras_class: ClassVar[str] = "Reverse"


def reversed_steps(name: str, source: str, shape: tuple[int, ...]) -> ReverseSteps:
    """The record reversing `source`'s sequence of IR shape `shape` `(1, steps, C)`."""
    return ReverseSteps(name=name, inputs=(source,), input_shapes=(shape,), output_shape=shape)


def _steps(plan: LayerPlan) -> int:
    return plan.input_shape[-2]


class ReverseKind(Kind):
    records = (ReverseSteps,)
    selects_values = True

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: object) -> np.ndarray:
        return np.asarray(xs[0])[:, :, ::-1, :]

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        return None, np.asarray(xs[0])[:, :, ::-1, :]

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        block = Reverse(_steps(plan), down, mx)
        blocks.append(block)
        return block

    def storage(self, plan: LayerPlan) -> Storage:
        """The sequence in LUT RAM; the step counter and the mode flag."""
        steps = _steps(plan)
        return Storage(
            register_bits=max(steps - 1, 1).bit_length() + 1,
            fifo_bits=steps * plan.input_shape[-1] * plan.in_fmt.hw_bits,
        )

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        steps = _steps(plan)
        return Entry(doc=HASKELL.doc(steps, plan.input_shape[-1]), body=(HASKELL.reverse(steps),), uses=("reverse",))


KINDS = (ReverseKind(),)
