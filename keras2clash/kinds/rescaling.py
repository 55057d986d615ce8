"""The rescaling and normalization kinds: Keras Rescaling and Normalization, the affine map
`x * scale + offset` per channel (`x / 255` on pixels, `x * 2 - 1`, a standardisation).

Rescaling's `scale` and `offset` are scalars, or arrays Keras broadcasts over the input.
Normalization computes `(x - mean) / max(sqrt(variance), epsilon)` (`epsilon` Keras'
`keras.config.epsilon()`), with `invert=True` `x * max(sqrt(variance), epsilon) + mean`,
its statistics adapted or given for the kept `axis`, broadcast over the others: the same map
with `scale = 1 / max(sqrt(variance), epsilon)` and `offset = -mean * scale` (inverted:
`scale = max(sqrt(variance), epsilon)`, `offset = mean`). The hardware applies one scale and
one offset per channel of a beat (the last axis), so the constants must vary along the
channels only: Normalization with `axis=-1` or `None`, or another axis whose statistics
happen to be equal along everything but the channels.

The pass `ir.passes.fold_affine_forward` folds either into the Dense or unpadded convolution
that alone reads it; anywhere else it is built. The arithmetic and the block are the batch
normalization's (`kinds.batchnorm`): the scale in the weight format, the offset in the bias
format, the sum exact, one requantization to the output format, `K2C.BatchNorm` on
`K2C.Pipe`. Normalization is its own record type (a `Rescaling` with its Keras class), so
errors, reports and the generated Haskell name the class the user wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from keras2clash.backend.haskell import kind_template
from keras2clash.errors import K2CError
from keras2clash.frontend.registry import (
    ConversionState,
    KerasLayer,
    _check_keras_shape,
    _single_input,
    _to_numpy,
    register_converter,
)
from keras2clash.ir.layers import Layer, register_record
from keras2clash.kinds.batchnorm import BatchNormKind

HASKELL = kind_template("rescaling.hs.j2")


@register_record
@dataclass(frozen=True)
class Rescaling(Layer):
    """`x * scale + offset` per channel of the last axis (`scale`, `offset` (C,) float64)."""

    activation: str = "linear"  # type: ignore[assignment]
    scale: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    offset: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)

    type: ClassVar[str] = "rescaling"
    keras_class: ClassVar[str] = "Rescaling"


@register_record
@dataclass(frozen=True)
class Normalization(Rescaling):
    """Keras Normalization as its per-channel affine map (`scale`, `offset` (C,) float64: see
    the module docstring)."""

    type: ClassVar[str] = "normalization"
    keras_class: ClassVar[str] = "Normalization"


def _per_channel(
    layer: KerasLayer, value: object, keras_shape: tuple[int, ...], what: str, hint: str = ""
) -> np.ndarray:
    """A scalar or an array Keras broadcasts over the input (with or without the batch axis,
    of size 1), as one value per channel."""
    kind = type(layer).__name__
    values = np.asarray(value, dtype=np.float64)
    channels = keras_shape[-1]
    try:
        full = np.broadcast_to(values, (1, *keras_shape))
    except ValueError:
        raise K2CError(
            f"{kind} layer '{layer.name}' has {what} of shape {values.shape}, which does not "
            f"broadcast to its input {keras_shape}"
        ) from None
    per_channel = full.reshape(-1, channels)
    if not np.all(np.isfinite(per_channel)):
        raise K2CError(f"{kind} layer '{layer.name}' has a NaN or infinite {what}")
    if not np.all(per_channel == per_channel[:1]):
        raise K2CError(
            f"{kind} layer '{layer.name}' has a {what} that varies along an axis other than the "
            f"channels (the last); one value per channel is supported{hint}"
        )
    return per_channel[0].copy()


@register_converter("Rescaling")
def _convert_rescaling(layer: KerasLayer, state: ConversionState) -> Layer:
    _single_input(layer, state)
    keras_shape = tuple(int(d) for d in state.keras_shape)
    scale = _per_channel(layer, layer.scale, keras_shape, "scale")
    offset = _per_channel(layer, layer.offset, keras_shape, "offset")
    _check_keras_shape(layer, state, state.shape)
    return Rescaling(**state.common(layer, state.shape), scale=scale, offset=offset)


@register_converter("Normalization")
def _convert_normalization(layer: KerasLayer, state: ConversionState) -> Layer:
    """The statistics as Keras holds them after `build` or `adapt` (`layer.mean`,
    `layer.variance`, shaped to broadcast over the input with its batch axis), each checked to
    be one value per channel, then the affine map of the module docstring in float64."""
    import keras  # imported where a model is read, so that the command line starts without it

    _single_input(layer, state)
    keras_shape = tuple(int(d) for d in state.keras_shape)
    if layer.mean is None or layer.variance is None:
        raise K2CError(
            f"Normalization layer '{layer.name}' has no mean and variance (it is not built); "
            "adapt it to the data or give mean and variance"
        )
    axes = tuple(int(a) for a in layer.axis)
    hint = f" (axis={axes[0] if len(axes) == 1 else axes} keeps statistics along another axis; use axis=-1 or None)"
    mean = _per_channel(layer, _to_numpy(layer.mean), keras_shape, "mean", hint)
    variance = _per_channel(layer, _to_numpy(layer.variance), keras_shape, "variance", hint)
    if np.any(variance < 0):
        raise K2CError(f"Normalization layer '{layer.name}' has a negative variance, which has no square root")
    std = np.maximum(np.sqrt(variance), float(keras.config.epsilon()))
    if layer.invert:
        scale, offset = std, mean
    else:
        scale = 1.0 / std
        offset = -mean * scale
    _check_keras_shape(layer, state, state.shape)
    return Normalization(**state.common(layer, state.shape), scale=scale, offset=offset)


class RescalingKind(BatchNormKind):
    """The batch normalization's plan, arithmetic, block and storage on its own constants."""

    records = (Rescaling,)
    texts = HASKELL

    def constants(self, layer: Layer) -> tuple[np.ndarray, np.ndarray]:
        assert isinstance(layer, Rescaling)
        return np.asarray(layer.scale, dtype=np.float64), np.asarray(layer.offset, dtype=np.float64)


class NormalizationKind(RescalingKind):
    """Rescaling's kind on a Normalization's constants."""

    records = (Normalization,)


KINDS = (RescalingKind(), NormalizationKind())
