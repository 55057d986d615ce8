"""The shape layers' blocks as event recurrences (the exact hardware model; see `hw.blocks`
for the conventions: a block is told the cycle `v` from which a beat is offered, answers
the cycle it moves, and pushes its outputs to its consumer as soon as their valid cycle is
known). Each rule is the haddock of its Clash block rewritten:

- Crop (`K2C.Crop`): a kept pixel is a wire (it moves when downstream takes it); a dropped
  pixel moves in the cycle it is offered.
- Upsample (`K2C.Upsample`): beat `k` of a row's `sh*w*sw` loads into the output register in
  `L_k = max(offer, M_(k-1))` (input beats) or `L_k = M_(k-1)` (repeats), valid from
  `L_k + 1`; `M_k` is the cycle downstream takes it.
- Scatter (`K2C.Scatter`): a vector accepted in `q` gives beat 0 valid from `q + 1`, beat
  `j + 1` the cycle after beat `j` moved; the next vector is accepted from the cycle after
  the last beat moved.
- Reshape: a relabelling is no block; a beat-width conversion is `K2C.Collect` of `g_in`
  beats (`hw.blocks._Collect`) then Scatter into `g_out` beats.
- ZeroPad2D: `K2C.Pad` (`hw.blocks._Pad`).
"""

from __future__ import annotations

import math
from typing import Any

from keras2clash.hw.plan import LayerPlan

NEG = -(1 << 40)
"""'Never' (as `hw.blocks.NEG`)."""


class _Crop:
    """K2C.Crop: kept pixels are a wire, dropped ones move when offered."""

    def __init__(self, h, w, crops, down, mx) -> None:
        top, bottom, left, right = crops
        self.kept = [top <= r < h - bottom and left <= x < w - right for r in range(h) for x in range(w)]
        self.pos = 0
        self.down, self.mx = down, mx

    def ready_at(self, v):
        return self.down.ready_at(v) if self.kept[self.pos] else v

    def accept(self, v):
        moved = self.down.accept(v) if self.kept[self.pos] else v
        self.pos = (self.pos + 1) % len(self.kept)
        return moved

    def state(self):
        return []

    def set_state(self, values):
        pass


class _Upsample:
    """K2C.Upsample: every input pixel loads its copies into the output register in turn;
    the row's later copies follow the row's last pixel without waiting for input."""

    def __init__(self, w, size, down, mx) -> None:
        self.w, (self.sh, self.sw) = w, size
        self.x = 0  # column of the next input pixel
        self.down, self.mx = down, mx
        self.M = NEG  # the cycle the last beat moved

    def _emit(self, load) -> None:
        self.M = self.down.accept(load + 1)

    def ready_at(self, v):
        return self.mx(v, self.M)

    def accept(self, v):
        q = self.mx(v, self.M)
        self._emit(q)
        for _ in range(self.sw - 1):
            self._emit(self.M)
        self.x += 1
        if self.x == self.w:  # the row's other copies, from the line buffer
            self.x = 0
            for _ in range((self.sh - 1) * self.w * self.sw):
                self._emit(self.M)
        return q

    def state(self):
        return [self.M]

    def set_state(self, values):
        (self.M,) = values


class _Scatter:
    """K2C.Scatter: one vector -> n beats."""

    def __init__(self, n, down, mx) -> None:
        self.n, self.down, self.mx = n, down, mx
        self.ready = NEG

    def ready_at(self, v):
        return self.mx(v, self.ready)

    def accept(self, v):
        q = self.mx(v, self.ready)
        moved = q
        for _ in range(self.n):
            moved = self.down.accept(moved + 1)
        self.ready = moved + 1
        return q

    def state(self):
        return [self.ready]

    def set_state(self, values):
        (self.ready,) = values


def rebeat_groups(plan: LayerPlan) -> tuple[int, int]:
    """A reshape's (g_in, g_out): input beats collected and output beats scattered per group
    of lcm(C_in, C_out) values; (1, 1) is a relabelling (equal last axes)."""
    c_in, c_out = plan.input_shape[-1], plan.output_shape[-1]
    group = math.lcm(c_in, c_out)
    return group // c_in, group // c_out


def shape_blocks(plan: LayerPlan, down: Any, mx, blocks: list) -> Any:
    """The blocks of one shape layer (backend.shape_entries), from its consumer backwards; its head."""
    from keras2clash.hw.blocks import _Collect, _Pad  # hw.blocks imports this module

    new: list[Any] = []
    if plan.type == "zeropad2d":
        new.append(_Pad(*plan.input_shape[:2], plan.pads, down, mx))
    elif plan.type == "crop2d":
        new.append(_Crop(*plan.input_shape[:2], plan.crops, down, mx))
    elif plan.type == "upsample2d":
        new.append(_Upsample(plan.input_shape[1], plan.size, down, mx))
    elif plan.type == "reshape":
        g_in, g_out = rebeat_groups(plan)
        if g_out > 1:
            new.append(_Scatter(g_out, down, mx))
        if g_in > 1:
            new.append(_Collect(g_in, new[-1] if new else down, mx))
    else:
        raise ValueError(f"no timing model for layer type {plan.type!r}")
    blocks.extend(new)
    return new[-1] if new else down
