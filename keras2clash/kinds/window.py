"""What the windowed kinds share (convolutions and pooling): the window generator.

Such a layer is `[Fifo] -> [Pad] -> K2C.Window -> [Fifo] -> its own stage`: `K2C.Pad` puts the
explicit zero (or minimum) padding around the image, `K2C.Window` keeps `kh - 1` rows of line
buffer and one window register, which is also its output (a dilated window spans its
extent; the taps are wires after it). The FIFOs are the ones the hardware model sizes
(`hw.hwmodel.input_fifos`, `window_fifos`): of input pixels before the padding, of windows
before the engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

from keras2clash.backend.haskell import kind_template
from keras2clash.hw.events import Block, Max, Pad, Queue, Stateful, Window
from keras2clash.hw.plan import LayerPlan, Params
from keras2clash.kinds.base import Kind, Storage, params_of

HASKELL = kind_template("window.hs.j2")


@dataclass(frozen=True)
class WindowParams(Params):
    """A windowed layer's geometry and the FIFOs around its window generator."""

    kernel_size: tuple[int, int]  # the kernel or the pool
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, bottom, left, right
    dilation: tuple[int, int] = (1, 1)  # tap (i, j) reads window pixel (i*dh, j*dw)
    source_class: str = ""  # the Keras class when it differs from the record's (Conv1D, Dense on a tensor, ...)
    window_fifo: int = 0  # windows queued before the engine (hw.hwmodel.window_fifos); 0: none
    input_fifo: int = 0  # input pixels queued before the padding and the generator (hw.hwmodel.input_fifos)

    @property
    def extent(self) -> tuple[int, int]:
        """Rows and columns of input one window spans (the window generator's size): the
        kernel or pool, dilated: `(k - 1) * d + 1` per axis."""
        (kh, kw), (dh, dw) = self.kernel_size, self.dilation
        return (kh - 1) * dh + 1, (kw - 1) * dw + 1


def padded_input_shape(plan: LayerPlan) -> tuple[int, ...]:
    """The input image with its padding: what the window generator walks."""
    h, w, c = plan.input_shape
    top, bottom, left, right = params_of(plan, WindowParams).pads
    return (h + top + bottom, w + left + right, c)


def generator_geometry(plan: LayerPlan) -> tuple[int, int, int, int, int, int]:
    """The window generator's image (padded), window (the dilated extent) and strides."""
    own = params_of(plan, WindowParams)
    h, w = padded_input_shape(plan)[:2]
    (kh, kw), (sh, sw) = own.extent, own.strides
    return h, w, kh, kw, sh, sw


def front_blocks(plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful]) -> Block:
    """[FIFO of windows] <- Window <- [Pad] <- [FIFO of pixels], from the consumer backwards."""
    own = params_of(plan, WindowParams)
    if own.window_fifo:
        queue = Queue(own.window_fifo, down, mx)
        blocks.append(queue)
        down = queue
    window = Window(*generator_geometry(plan), down, mx)
    blocks.append(window)
    down = window
    if any(own.pads):
        pad = Pad(plan.input_shape[0], plan.input_shape[1], own.pads, down, mx)
        blocks.append(pad)
        down = pad
    if own.input_fifo:
        queue = Queue(own.input_fifo, down, mx)
        blocks.append(queue)
        down = queue
    return down


def window_storage(plan: LayerPlan) -> Storage:
    """K2C.Window's line buffer (block RAM) and registers: the window shift register (also
    the output), the kept line-buffer word, and for w = 1 the bypass; the input FIFO."""
    _, w, kh, kw, _, _ = generator_geometry(plan)
    c, bits = plan.input_shape[-1], plan.in_fmt.hw_bits
    word = (kh - 1) * c * bits
    return Storage(
        line_buffer_bits=w * (kh - 1) * c * bits,
        register_bits=kh * kw * c * bits + word * (2 if w == 1 else 1),
        fifo_bits=params_of(plan, WindowParams).input_fifo * c * bits,
    )


def pad_stage(plan: LayerPlan, value: str) -> list[str]:
    """An explicit padding stage in front of the window generator (none without padding)."""
    pads = params_of(plan, WindowParams).pads
    if not any(pads):
        return []
    return [HASKELL.pad(*plan.input_shape[:2], list(pads), value)]


def pad_uses(plan: LayerPlan) -> list[str]:
    """The import the padding stage needs (`pad_stage`)."""
    return ["pad"] if any(params_of(plan, WindowParams).pads) else []


def padding_doc(plan: LayerPlan) -> str:
    """How the layer pads, for its haddock."""
    own = params_of(plan, WindowParams)
    if not any(own.pads):
        return HASKELL.padding_valid()
    top, bottom, left, right = own.pads
    if own.source_class == "Conv1D" and (top, bottom, right) == (0, 0, 0):
        return HASKELL.padding_causal(left)
    return HASKELL.padding_same(top, bottom, left, right)


def source_doc(plan: LayerPlan) -> str:
    """The Keras class, when the hardware builds it as another kind (a 1-D layer one row high, the
    stride phases of a transposed convolution: `kinds.transpose`)."""
    source = params_of(plan, WindowParams).source_class
    if source.endswith("Dense"):  # Dense, EinsumDense and their quantization-aware twins
        return HASKELL.source_dense(source)
    if source.endswith("Transpose"):
        return HASKELL.source_phases(source)
    return HASKELL.source_1d(source) if source.endswith("1D") else ""


class Windowed(Kind):
    """A kind built on the window generator (`plan.is_windowed`)."""

    windowed = True
    params_type: ClassVar[type[Params]] = WindowParams

    def front(self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful]) -> Block:
        return front_blocks(plan, down, mx, blocks)

    def source_class(self, plan: LayerPlan) -> str:
        return params_of(plan, WindowParams).source_class

    def frame_bits(self, plan: LayerPlan) -> int:
        """Bits of the padded input image."""
        return math.prod(padded_input_shape(plan)) * plan.in_fmt.bits

    def with_fifos(self, plan: LayerPlan, *, windows: int | None = None, pixels: int | None = None) -> LayerPlan:
        own = params_of(plan, WindowParams)
        windows = own.window_fifo if windows is None else windows
        pixels = own.input_fifo if pixels is None else pixels
        return replace(plan, params=replace(own, window_fifo=windows, input_fifo=pixels))
