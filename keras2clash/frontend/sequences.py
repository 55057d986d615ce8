"""The checks the 1-D kinds share (Conv1D, MaxPooling1D, AveragePooling1D, ZeroPadding1D, ...).

A Keras 1-D tensor `(steps, channels)` is an image one row high in the IR
(`registry.image_shape`), so each 1-D layer becomes the matching 2-D record with height 1 and
runs on the 2-D streaming blocks: a Conv1D of kernel `k` is a Conv2D of kernel `(1, k)`, a
1-D pooling a 2-D one of pool `(1, p)`. Each record keeps its Keras class in `source_class`,
so reports and the generated Haskell name the layer the user wrote.
"""

from __future__ import annotations

from typing import Any

from keras2clash.errors import K2CError
from keras2clash.frontend.images import _check_image_layer
from keras2clash.frontend.registry import (
    ConversionState,
)


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
            + ", ".join(f"'{p}'" for p in allowed)
            + " are supported"
        )
    return padding
