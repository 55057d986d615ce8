"""Converters of the activation layers (Activation, ReLU, LeakyReLU, PReLU, ELU, Softmax):
each becomes an `ir.Activation` record whose `activation` is the canonical text of
`quant.activations`; the pass `fuse_activations` fuses it into the layer before it or keeps
it as a standalone hardware stage."""

from __future__ import annotations

from typing import Any

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.frontend.registry import ConversionState, _activation, _single_input, _to_numpy, register_converter
from keras2clash.ir import layers as ir
from keras2clash.quant.activations import canonical


def _record(layer: Any, state: ConversionState, activation: str) -> ir.Activation:
    _single_input(layer, state)
    return ir.Activation(**state.common(layer, state.shape), activation=activation,
                         source_class=type(layer).__name__)


def _finite(layer: Any, **values: float | None) -> None:
    for key, value in values.items():
        if value is not None and not np.isfinite(value):
            raise K2CError(f"{type(layer).__name__} layer '{layer.name}' sets {key}={value}; a finite value is needed")


@register_converter("Activation")
def _convert_activation(layer: Any, state: ConversionState) -> ir.Layer:
    return _record(layer, state, _activation(layer))


@register_converter("ReLU")
def _convert_relu(layer: Any, state: ConversionState) -> ir.Layer:
    """Keras 3 ReLU: `x > threshold ? x : 0`, clipped to [0, max_value], minus
    `negative_slope * relu(threshold - x)` (all three options)."""
    slope = float(layer.negative_slope)
    cap = None if layer.max_value is None else float(layer.max_value)
    threshold = float(layer.threshold)
    _finite(layer, negative_slope=slope, max_value=cap, threshold=threshold)
    return _record(layer, state, canonical("relu", negative_slope=slope, max_value=cap, threshold=threshold))


@register_converter("LeakyReLU")
def _convert_leaky_relu(layer: Any, state: ConversionState) -> ir.Layer:
    slope = float(layer.negative_slope)
    _finite(layer, negative_slope=slope)
    return _record(layer, state, f"leaky_relu(negative_slope={slope!r})")


@register_converter("ELU")
def _convert_elu(layer: Any, state: ConversionState) -> ir.Layer:
    alpha = float(layer.alpha)
    _finite(layer, alpha=alpha)
    return _record(layer, state, canonical("elu", alpha=alpha))


@register_converter("PReLU")
def _convert_prelu(layer: Any, state: ConversionState) -> ir.Layer:
    """`x >= 0 ? x : alpha * x` with learnt slopes; the hardware applies one slope per
    channel (the last axis: each beat's element), so alpha must be shared over every other
    axis (`shared_axes` covering them, or a vector input)."""
    alpha = _to_numpy(layer.alpha)
    per_channel = alpha.reshape(-1, alpha.shape[-1])
    if not np.all(per_channel == per_channel[:1]):
        raise K2CError(
            f"PReLU layer '{layer.name}' learns a slope per position (alpha shape {alpha.shape}, "
            f"shared_axes={layer.shared_axes}); only one slope per channel is supported: set "
            "shared_axes to every axis but the last (e.g. shared_axes=[1, 2] after a Conv2D)")
    slopes = per_channel[0]
    if not np.all(np.isfinite(slopes)):
        raise K2CError(f"PReLU layer '{layer.name}' has NaN or infinite slopes")
    channels = state.shape[-1]
    if slopes.size == 1 and channels > 1:
        slopes = np.repeat(slopes, channels)
    return _record(layer, state, f"prelu(alpha=[{', '.join(repr(float(a)) for a in slopes)}])")


@register_converter("Softmax")
def _convert_softmax(layer: Any, state: ConversionState) -> ir.Layer:
    axis = layer.axis
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    rank = len(state.keras_shape) + 1  # with the batch axis
    if len(axes) != 1 or axes[0] not in (-1, rank - 1):
        raise K2CError(
            f"Softmax layer '{layer.name}' normalises over axis {axis}; only the last "
            "axis (-1) is supported"
        )
    return _record(layer, state, "softmax")
