"""Formats for training chosen from a profile of the training itself (`--formats auto`).

The network is trained once at wide formats (`PROFILE`: 24 bits, about float's precision for
these ranges), watching every tensor as it is stored; each layer's format of each tensor
then gets the integer bits its largest magnitude needs, doubled once for headroom (weights
keep growing after the profile's epochs, and a saturated gradient stops learning), and the
rest of `bits` as fraction bits, as the FPGA training accelerator this follows chose its
formats from a profile of its float training.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.quant.formats import FixedFormat
from keras2clash.train.golden import GoldenTrainer, LayerFormats, Sgd
from keras2clash.train.net import TrainNet

PROFILE = LayerFormats(
    a=FixedFormat(1, 8, 15),
    w=FixedFormat(1, 3, 20),
    b=FixedFormat(1, 3, 20),
    g=FixedFormat(1, 3, 20),
    v=FixedFormat(1, 3, 20),
)
"""The formats the profile trains at (products of two fit int64 with a 784-input layer's sums)."""
PROFILE_INPUT = FixedFormat(1, 8, 15)
HEADROOM = 2.0
"""The largest magnitude seen, times this, must fit the chosen format."""
KEYS = ("a", "w", "b", "g", "v")


def profile(
    net: TrainNet, sgd: Sgd, x: np.ndarray, target: np.ndarray, orders: Sequence[np.ndarray]
) -> list[dict[str, float]]:
    """Per layer, the largest magnitude of each tensor (keys as `LayerFormats`') over a
    training run at `PROFILE` formats, one epoch per order."""
    seen = [dict.fromkeys(KEYS, 0.0) for _ in net.layers]
    trainer = GoldenTrainer(net, sgd, [PROFILE] * len(net.layers), x_format=PROFILE_INPUT)

    def observe(i: int, key: str, raw: np.ndarray) -> None:
        if raw.size:
            fmt = getattr(PROFILE, key)
            seen[i][key] = max(seen[i][key], float(np.max(np.abs(raw))) * fmt.lsb)

    trainer.observe = observe
    for order in orders:
        trainer.epoch(x, target, order)
    return seen


def int_bits(largest: float) -> int:
    """Integer bits (beside the sign) for magnitudes up to `largest * HEADROOM`."""
    top = largest * HEADROOM
    return max(0, math.ceil(math.log2(top))) if top > 0 else 0


def auto_formats(
    net: TrainNet, sgd: Sgd, x: np.ndarray, target: np.ndarray, orders: Sequence[np.ndarray], bits: int
) -> tuple[list[LayerFormats], list[dict[str, float]]]:
    """Each layer's formats of `bits` bits from a profile (and the profile)."""
    if bits < 4:
        raise K2CError(f"--bits {bits}: training formats need at least 4 bits")
    seen = profile(net, sgd, x, target, orders)
    out = []
    for s in seen:
        fmts = {}
        for key in KEYS:
            i = min(int_bits(s[key]), bits - 2)
            fmts[key] = FixedFormat(1, i, bits - 1 - i)
        out.append(LayerFormats(**fmts))
    return out, seen
