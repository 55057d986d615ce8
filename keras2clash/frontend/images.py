"""The checks and the window geometry the image kinds share (convolutions, pooling, padding):
channels_last images, 'valid'/'same' padding as explicit pads (the TF rule), option pairs."""

from __future__ import annotations

from typing import Any

from keras2clash.errors import K2CError
from keras2clash.frontend.registry import (
    ConversionState,
    _single_input,
)

Shape = tuple[int, ...]


def same_pads(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TF/Keras 'same' padding of one spatial axis: (before, after); the odd pixel goes after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def _window_geometry(
    layer: Any,
    shape: Shape,
    window: tuple[int, int],
    strides: tuple[int, int],
    padding: str,
    what: str,
) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """Output (H2, W2) and pads (top, bottom, left, right) of a sliding 2-D window."""
    kind = type(layer).__name__
    height, width, _ = shape
    if padding == "same":
        top, bottom = same_pads(height, window[0], strides[0])
        left, right = same_pads(width, window[1], strides[1])
        out = (-(-height // strides[0]), -(-width // strides[1]))
    else:
        top = bottom = left = right = 0
        if window[0] > height or window[1] > width:
            raise K2CError(
                f"{kind} layer '{layer.name}' has {what} {window}, larger than its "
                f"{height}x{width} input with padding='valid'"
            )
        out = ((height - window[0]) // strides[0] + 1, (width - window[1]) // strides[1] + 1)
    return out, (top, bottom, left, right)


def _check_image_layer(layer: Any, state: ConversionState) -> None:
    """Rules shared by Conv2D, pooling and padding: channels_last on (H, W, C)."""
    _single_input(layer, state)
    kind = type(layer).__name__
    if getattr(layer, "data_format", "channels_last") != "channels_last":
        raise K2CError(
            f"{kind} layer '{layer.name}' uses data_format='{layer.data_format}'; only "
            "channels_last (height, width, channels) is supported"
        )
    if len(state.shape) != 3:
        raise K2CError(
            f"{kind} layer '{layer.name}' gets an input of shape {state.shape} (rank "
            f"{len(state.shape)}); it needs an image (height, width, channels)"
        )
    if getattr(layer, "quantization_mode", None) is not None:
        raise K2CError(
            f"{kind} layer '{layer.name}' is Keras-quantized ({layer.quantization_mode}); "
            "give keras2clash the float model"
        )


def _padding(layer: Any) -> str:
    padding = str(layer.padding).lower()
    if padding not in ("valid", "same"):
        raise K2CError(
            f"{type(layer).__name__} layer '{layer.name}' uses padding='{layer.padding}'; "
            "only 'valid' and 'same' are supported"
        )
    return padding


def _pair(layer: Any, what: str, value: Any) -> tuple[int, int]:
    pair = tuple(int(v) for v in value)
    if len(pair) != 2 or min(pair) < 1:
        raise K2CError(
            f"{type(layer).__name__} layer '{layer.name}' has {what}={value}; two positive integers are needed"
        )
    return pair  # type: ignore[return-value]


def dilated_extent(kernel_size: tuple[int, int], dilation: tuple[int, int]) -> tuple[int, int]:
    """The input rows and columns one dilated window spans: `(k - 1) * d + 1` per axis."""
    return ((kernel_size[0] - 1) * dilation[0] + 1, (kernel_size[1] - 1) * dilation[1] + 1)
