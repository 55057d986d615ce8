"""Converters of the shape layers: ZeroPadding1D, Cropping1D/2D, UpSampling1D/2D, Reshape,
Permute (ZeroPadding2D is in `frontend.images`).

They move values and compute nothing. 1-D layers become the 2-D records one row high (the
1-D convention, `registry.image_shape`): a sequence `(steps, C)` is the image `(1, steps, C)`,
so a 1-D padding or cropping is `(0, 0, left, right)` and a 1-D upsampling `(1, size)`.

Reshape and Permute are accepted when they keep the row-major order of the values (the
order beats carry them in): a Reshape always does; a Permute only when it moves size-1
axes. Moving data across beats in another order (a transpose) would need a frame buffer.
"""

from __future__ import annotations

import math
from typing import Any

from keras2clash.errors import K2CError
from keras2clash.frontend.images import _check_image_layer
from keras2clash.frontend.registry import (
    ConversionState, _check_keras_shape, _single_input, image_shape, keras_output_shape,
    register_converter,
)
from keras2clash.ir import layers as ir

Shape = tuple[int, ...]


def _pairs(layer: Any, value: Any, rank: int, what: str) -> tuple[int, int, int, int]:
    """A padding/cropping option as (top, bottom, left, right): 1-D `(left, right)`,
    2-D `((top, bottom), (left, right))`; Keras has already normalised ints to pairs."""
    try:
        if rank == 1:
            left, right = (int(v) for v in value)
            sides = (0, 0, left, right)
        else:
            (top, bottom), (left, right) = (tuple(int(v) for v in pair) for pair in value)
            sides = (top, bottom, left, right)
    except (TypeError, ValueError):
        sides = (-1,)
    if len(sides) != 4 or min(sides) < 0:
        raise K2CError(f"{type(layer).__name__} layer '{layer.name}' has {what}={value}; "
                       "non-negative integers per side are needed")
    return sides  # type: ignore[return-value]


def _check_sequence_or_image(layer: Any, state: ConversionState, rank: int) -> None:
    """The Keras input must be a sequence (steps, C) for a 1-D layer, an image for a 2-D one."""
    _check_image_layer(layer, state)
    if len(state.keras_shape) != rank + 1:
        raise K2CError(
            f"{type(layer).__name__} layer '{layer.name}' gets an input of shape "
            f"{state.keras_shape}; it needs a {'sequence (steps, channels)' if rank == 1 else 'image (height, width, channels)'}"
        )


@register_converter("ZeroPadding1D")
def _convert_zero_padding1d(layer: Any, state: ConversionState) -> ir.Layer:
    """Zeros before and after the sequence: a ZeroPad2D with pads (0, 0, left, right)."""
    _check_sequence_or_image(layer, state, 1)
    pads = _pairs(layer, layer.padding, 1, "padding")
    _, w, c = state.shape
    out = (1, w + pads[2] + pads[3], c)
    _check_keras_shape(layer, state, out)
    return ir.ZeroPad2D(**state.common(layer, out), pads=pads, source_class="ZeroPadding1D")


@register_converter("Cropping1D", "Cropping2D")
def _convert_cropping(layer: Any, state: ConversionState) -> ir.Layer:
    """Rows and columns dropped at the border (K2C.Crop)."""
    rank = 1 if type(layer).__name__ == "Cropping1D" else 2
    _check_sequence_or_image(layer, state, rank)
    top, bottom, left, right = crops = _pairs(layer, layer.cropping, rank, "cropping")
    h, w, c = state.shape
    out = (h - top - bottom, w - left - right, c)
    if min(out) < 1:
        raise K2CError(f"{type(layer).__name__} layer '{layer.name}' crops {crops} (top, bottom, left, "
                       f"right) from its {h}x{w} input: nothing is left")
    _check_keras_shape(layer, state, out)
    return ir.Crop2D(**state.common(layer, out), crops=crops)


@register_converter("UpSampling1D", "UpSampling2D")
def _convert_upsampling(layer: Any, state: ConversionState) -> ir.Layer:
    """Nearest-neighbour repetition (K2C.Upsample); other interpolations compute new values
    (bilinear, ...) and are refused."""
    kind = type(layer).__name__
    rank = 1 if kind == "UpSampling1D" else 2
    _check_sequence_or_image(layer, state, rank)
    interpolation = str(getattr(layer, "interpolation", "nearest"))
    if interpolation != "nearest":
        raise K2CError(
            f"UpSampling2D layer '{layer.name}' uses interpolation='{interpolation}', which computes "
            "new values between pixels; only 'nearest' (repeating each pixel) is supported"
        )
    size = (1, int(layer.size)) if rank == 1 else tuple(int(v) for v in layer.size)
    if len(size) != 2 or min(size) < 1:
        raise K2CError(f"{kind} layer '{layer.name}' has size={layer.size}; positive integers are needed")
    h, w, c = state.shape
    out = (h * size[0], w * size[1], c)
    _check_keras_shape(layer, state, out)
    return ir.Upsample2D(**state.common(layer, out), size=size)  # type: ignore[arg-type]


def _reshape_record(layer: Any, state: ConversionState, out: Shape, source_class: str) -> ir.Layer:
    """The record of an order-keeping reshape to `out` (IR form): none (identity), a Flatten
    (to a vector: K2C.Collect), or a Reshape (relabelling or beat-width conversion)."""
    if len(out) > 3:
        raise K2CError(
            f"{source_class} layer '{layer.name}' outputs shape {keras_output_shape(layer, state)}: "
            "only vectors, sequences (steps, channels) and images (height, width, channels) are supported"
        )
    if tuple(out) == tuple(state.shape):
        return ir.Identity(**state.common(layer, out), source_class=source_class)
    if len(out) == 1:
        return ir.Flatten(**state.common(layer, out))
    return ir.Reshape(**state.common(layer, out), source_class=source_class)


@register_converter("Reshape")
def _convert_reshape(layer: Any, state: ConversionState) -> ir.Layer:
    """Any Reshape (-1 resolved by Keras): the row-major order is kept, only the beats are
    regrouped."""
    _single_input(layer, state)
    keras_out = keras_output_shape(layer, state)
    if keras_out is None or math.prod(keras_out) != math.prod(state.shape):  # pragma: no cover - Keras checks
        raise K2CError(f"Reshape layer '{layer.name}': cannot reshape {state.keras_shape} to {layer.target_shape}")
    return _reshape_record(layer, state, image_shape(keras_out), "Reshape")


@register_converter("Permute")
def _convert_permute(layer: Any, state: ConversionState) -> ir.Layer:
    """A Permute that keeps the order of the axes longer than 1 keeps the row-major order of
    the values: it is a reshape. Any other is a transpose."""
    _single_input(layer, state)
    keras_in = state.keras_shape
    dims = tuple(int(d) for d in layer.dims)
    moved = [d - 1 for d in dims if keras_in[d - 1] != 1]
    if moved != sorted(moved):
        raise K2CError(
            f"Permute layer '{layer.name}' with dims={dims} on an input of shape {keras_in} reorders "
            "the values (a transpose needs a frame buffer); only permutations that move size-1 "
            "axes are supported"
        )
    out = tuple(keras_in[d - 1] for d in dims)
    return _reshape_record(layer, state, image_shape(out), "Permute")
