"""The shape layers on a batch of values: zero padding, cropping, nearest upsampling and
reshapes (docs/guide/contract.md: they move values and compute nothing, so the raw integers of
the golden model and the floats of `profile.float_forward` go through the same code).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def move(kind: str, x: np.ndarray, output_shape: Sequence[int], pads: Sequence[int] = (0, 0, 0, 0),
         crops: Sequence[int] = (0, 0, 0, 0), size: Sequence[int] = (1, 1)) -> np.ndarray:
    """One shape layer (`ir.layers.SHAPE_TYPES`) on `x` (N, *input_shape) -> (N, *output_shape); the values are moved
    (zero padding adds zeros, the format's zero in raw integers too), never changed."""
    if kind == "zeropad2d":
        top, bottom, left, right = pads
        return np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=0)
    if kind == "crop2d":
        top, bottom, left, right = crops
        h, w = x.shape[1], x.shape[2]
        return x[:, top:h - bottom, left:w - right]
    if kind == "upsample2d":
        return np.repeat(np.repeat(x, size[0], axis=1), size[1], axis=2)
    if kind == "reshape":
        return x.reshape(len(x), *output_shape)  # row-major: the order beats carry the values in
    raise ValueError(f"no shape layer {kind!r}")


def move_layer(layer: object, x: np.ndarray) -> np.ndarray:
    """`move` for an IR record or a LayerPlan (both carry the kind's geometry by name)."""
    geometry = {key: getattr(layer, key) for key in ("pads", "crops", "size") if hasattr(layer, key)}
    return move(getattr(layer, "type"), x, getattr(layer, "output_shape"), **geometry)
