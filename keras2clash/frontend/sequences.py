"""Converters of the 1-D layers (Conv1D, MaxPooling1D, AveragePooling1D, ZeroPadding1D) and
of a Dense applied to a tensor of rank > 1.

A Keras 1-D tensor `(steps, channels)` is an image one row high in the IR
(`registry.image_shape`), so each of these layers becomes the matching 2-D record with
height 1 and runs on the 2-D streaming blocks: a Conv1D of kernel `k` is a Conv2D of kernel
`(1, k)`, a 1-D pooling a 2-D one of pool `(1, p)`. A Dense on `(..., C)` computes the same
`C -> units` product at every position, which is a 1x1 Conv2D. Each record keeps its Keras
class in `source_class`, so reports and the generated Haskell name the layer the user wrote.
"""

from __future__ import annotations

from typing import Any

from keras2clash.errors import K2CError
from keras2clash.frontend.images import _check_image_layer, conv_record
from keras2clash.frontend.registry import (
    ConversionState, _kernel_and_bias, register_converter,
)
from keras2clash.ir import layers as ir


def _one(layer: Any, what: str, value: Any) -> int:
    """A 1-D layer's option as one positive integer (Keras keeps a 1-tuple)."""
    values = tuple(int(v) for v in (value if isinstance(value, (tuple, list)) else (value,)))
    if len(values) != 1 or values[0] < 1:
        raise K2CError(
            f"{type(layer).__name__} layer '{layer.name}' has {what}={value}; one positive integer is needed"
        )
    return values[0]


def _check_sequence_layer(layer: Any, state: ConversionState) -> None:
    """A 1-D layer reads a Keras `(steps, channels)` tensor (one row high in the IR)."""
    _check_image_layer(layer, state)
    if len(state.keras_shape) != 2:
        raise K2CError(
            f"{type(layer).__name__} layer '{layer.name}' gets an input of shape {state.keras_shape}; "
            "it needs a sequence (steps, channels)"
        )


def _padding_1d(layer: Any, allowed: tuple[str, ...]) -> str:
    padding = str(layer.padding).lower()
    if padding not in allowed:
        raise K2CError(
            f"{type(layer).__name__} layer '{layer.name}' uses padding='{layer.padding}'; only "
            + ", ".join(f"'{p}'" for p in allowed) + " are supported"
        )
    return padding


@register_converter("Conv1D")
def _convert_conv1d(layer: Any, state: ConversionState) -> ir.Layer:
    """Conv1D (channels_last; 'valid', 'same' or 'causal'; any strides and dilation Keras
    accepts) -> a Conv2D of kernel (1, k, C, F) on the one-row image."""
    _check_sequence_layer(layer, state)
    if int(layer.groups) != 1:
        raise K2CError(
            f"Conv1D layer '{layer.name}' has groups={layer.groups} (a grouped convolution); "
            "only groups=1 is supported"
        )
    size = _one(layer, "kernel_size", layer.kernel_size)
    channels, filters = state.shape[2], int(layer.filters)
    kernel, bias = _kernel_and_bias(layer, (size, channels, filters))
    return conv_record(layer, state, kernel.reshape(1, size, channels, filters), bias,
                       strides=(1, _one(layer, "strides", layer.strides)),
                       dilation=(1, _one(layer, "dilation_rate", layer.dilation_rate)),
                       padding=_padding_1d(layer, ("valid", "same", "causal")))


def dense_on_tensor(layer: Any, state: ConversionState) -> ir.Layer:
    """A Dense on a `(..., C)` tensor of rank 2 or 3 (Keras applies it to the last axis at
    every position) -> a 1x1 Conv2D with kernel (1, 1, C, units) on the IR image (a
    sequence is one row high). BatchNormalization folding and activation fusing then treat
    it like any Conv2D."""
    if len(state.shape) != 3:
        raise K2CError(
            f"Dense layer '{layer.name}' gets an input of shape {state.keras_shape} (rank "
            f"{len(state.keras_shape)}); a Dense applies per position only to a sequence "
            "(steps, channels) or an image (height, width, channels); add a Flatten or Reshape before it"
        )
    channels, units = state.shape[2], int(layer.units)
    kernel, bias = _kernel_and_bias(layer, (channels, units))
    return conv_record(layer, state, kernel.reshape(1, 1, channels, units), bias,
                       strides=(1, 1), dilation=(1, 1), padding="valid")
