"""What the windowed kinds share (convolutions and pooling): the window generator.

Such a layer is `[Fifo] -> [Pad] -> K2C.Window -> [Fifo] -> its own stage`: `K2C.Pad` puts the
explicit zero (or minimum) padding around the image, `K2C.Window` keeps `kh - 1` rows of line
buffer and one window register, which is also its output (a dilated window spans its
extent; the taps are wires after it). The FIFOs are the ones the hardware model sizes
(`hw.hwmodel.input_fifos`, `window_fifos`): of input pixels before the padding, of windows
before the engine.
"""

from __future__ import annotations

from typing import Any

from keras2clash.backend.haskell import kind_template
from keras2clash.hw.events import Pad, Queue, Window
from keras2clash.hw.plan import LayerPlan
from keras2clash.kinds.base import Kind, Storage

HASKELL = kind_template("window.hs.j2")


def generator_geometry(plan: LayerPlan) -> tuple[int, int, int, int, int, int]:
    """The window generator's image (padded), window (the dilated extent) and strides."""
    h, w = plan.padded_input_shape[:2]
    (kh, kw), (sh, sw) = plan.extent, plan.strides
    return h, w, kh, kw, sh, sw


def front_blocks(plan: LayerPlan, down: Any, mx: Any, blocks: list[Any]) -> Any:
    """[FIFO of windows] <- Window <- [Pad] <- [FIFO of pixels], from the consumer backwards."""
    if plan.window_fifo:
        down = Queue(plan.window_fifo, down, mx)
        blocks.append(down)
    down = Window(*generator_geometry(plan), down, mx)
    blocks.append(down)
    if any(plan.pads):
        down = Pad(plan.input_shape[0], plan.input_shape[1], plan.pads, down, mx)
        blocks.append(down)
    if plan.input_fifo:
        down = Queue(plan.input_fifo, down, mx)
        blocks.append(down)
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
        fifo_bits=plan.input_fifo * c * bits,
    )


def pad_stage(plan: LayerPlan, value: str) -> list[str]:
    """An explicit padding stage in front of the window generator (none without padding)."""
    if not any(plan.pads):
        return []
    return [HASKELL.pad(*plan.input_shape[:2], list(plan.pads), value)]


def padding_doc(plan: LayerPlan) -> str:
    """How the layer pads, for its haddock."""
    if not any(plan.pads):
        return HASKELL.padding_valid()
    top, bottom, left, right = plan.pads
    if plan.source_class == "Conv1D" and (top, bottom, right) == (0, 0, 0):
        return HASKELL.padding_causal(left)
    return HASKELL.padding_same(top, bottom, left, right)


def source_doc(plan: LayerPlan) -> str:
    """The Keras class, when the hardware builds it as another kind (a 1-D layer one row high)."""
    if plan.source_class == "Dense":
        return HASKELL.source_dense()
    return HASKELL.source_1d(plan.source_class) if plan.source_class.endswith("1D") else ""


class Windowed(Kind):
    """A kind built on the window generator (`plan.is_windowed`)."""

    windowed = True

    def front(self, plan: LayerPlan, down: Any, mx: Any, blocks: list[Any]) -> Any:
        return front_blocks(plan, down, mx, blocks)
