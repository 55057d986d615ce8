"""Converters of the image layers: Conv2D; and the window geometry the windowed kinds share; and
the record builders the 1-D layers share (`frontend.sequences`)."""

from __future__ import annotations

from typing import Any

from keras2clash.errors import K2CError
from keras2clash.frontend.registry import (
    ConversionState, _activation, _check_keras_shape, _kernel_and_bias, _single_input,
    register_converter,
)
from keras2clash.ir import layers as ir

Shape = tuple[int, ...]


def same_pads(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TF/Keras 'same' padding of one spatial axis: (before, after); the odd pixel goes after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def _window_geometry(
    layer: Any, shape: Shape, window: tuple[int, int], strides: tuple[int, int], padding: str, what: str,
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
            f"{type(layer).__name__} layer '{layer.name}' has {what}={value}; two positive "
            "integers are needed"
        )
    return pair  # type: ignore[return-value]


@register_converter("Conv2D")
def _convert_conv2d(layer: Any, state: ConversionState) -> ir.Layer:
    """A channels_last Conv2D, 'valid' or 'same' (explicit pads), any strides, kernel and
    dilation."""
    _check_image_layer(layer, state)
    if int(layer.groups) != 1:
        raise K2CError(
            f"Conv2D layer '{layer.name}' has groups={layer.groups} (a grouped "
            "convolution); only groups=1 is supported"
        )
    kernel_size = _pair(layer, "kernel_size", layer.kernel_size)
    channels, filters = state.shape[2], int(layer.filters)
    kernel, bias = _kernel_and_bias(layer, (*kernel_size, channels, filters))
    return conv_record(layer, state, kernel, bias, strides=_pair(layer, "strides", layer.strides),
                       dilation=_pair(layer, "dilation_rate", layer.dilation_rate), padding=_padding(layer))


def dilated_extent(kernel_size: tuple[int, int], dilation: tuple[int, int]) -> tuple[int, int]:
    """The input rows and columns one dilated window spans: `(k - 1) * d + 1` per axis."""
    return ((kernel_size[0] - 1) * dilation[0] + 1, (kernel_size[1] - 1) * dilation[1] + 1)


def conv_record(layer: Any, state: ConversionState, kernel: Any, bias: Any, strides: tuple[int, int],
                dilation: tuple[int, int], padding: str) -> ir.Conv2D:
    """The Conv2D record of a convolution given as a 2-D one (`kernel` (kh, kw, C, F)):
    Conv2D itself, Conv1D one row high, a Dense applied per position. The geometry uses the
    dilated extent (TF's 'same' rule too); 'causal' (Conv1D) pads `extent - 1` on the left."""
    kernel_size = (int(kernel.shape[0]), int(kernel.shape[1]))
    extent = dilated_extent(kernel_size, dilation)
    what = "kernel_size" if dilation == (1, 1) else f"dilated kernel extent (dilation_rate {dilation})"
    if padding == "causal":
        height, width, channels = state.shape
        shape = (height, width + extent[1] - 1, channels)
        (out_h, out_w), _ = _window_geometry(layer, shape, extent, strides, "valid", what)
        pads = (0, 0, extent[1] - 1, 0)
    else:
        (out_h, out_w), pads = _window_geometry(layer, state.shape, extent, strides, padding, what)
    out = (out_h, out_w, int(kernel.shape[3]))
    _check_keras_shape(layer, state, out)
    return ir.Conv2D(**state.common(layer, out), kernel=kernel, bias=bias, use_bias=bool(layer.use_bias),
                     activation=_activation(layer), kernel_size=kernel_size, strides=strides,
                     padding=padding, pads=pads, dilation=dilation, source_class=type(layer).__name__)
