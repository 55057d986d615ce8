"""Converters of the global pooling layers: GlobalMax/AveragePooling1D/2D.

A global pool reduces every channel over the whole image to one value (the hardware's
`K2C.Global`: one register per channel, one output beat per image). A 1-D sequence
`(steps, channels)` is an image one row high in the IR (`registry.image_shape`), so the
1-D classes become the same record. With keepdims the Keras output is `(1, 1, C)` (2-D) or
`(1, C)` (1-D), both `(1, 1, C)` in the IR; without it `(C,)`: the same single beat.
"""

from __future__ import annotations

from typing import Any

from keras2clash.errors import K2CError
from keras2clash.frontend.registry import ConversionState, _check_keras_shape, _single_input, register_converter
from keras2clash.ir import layers as ir


@register_converter("GlobalMaxPooling2D", "GlobalAveragePooling2D", "GlobalMaxPooling1D",
                    "GlobalAveragePooling1D")
def _convert_global_pool(layer: Any, state: ConversionState) -> ir.Layer:
    """Per-channel maximum or rounded mean over all H*W (or steps) positions."""
    _single_input(layer, state)
    kind = type(layer).__name__
    if getattr(layer, "data_format", "channels_last") != "channels_last":
        raise K2CError(
            f"{kind} layer '{layer.name}' uses data_format='{layer.data_format}'; only "
            "channels_last is supported"
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
    cls = ir.GlobalMaxPool if "Max" in kind else ir.GlobalAvgPool
    return cls(**state.common(layer, out), keepdims=keepdims)
