"""The rescaling kind: Keras Rescaling, the affine map `x * scale + offset` (`x / 255` on
pixels, `x * 2 - 1`, a per-channel normalisation given as arrays).

`scale` and `offset` are scalars, or arrays Keras broadcasts over the input; the hardware
applies one scale and one offset per channel of a beat (the last axis), so an array must vary
along the channels only. The arithmetic and the block are the batch normalization's
(`kinds.batchnorm`): the scale in the weight format, the offset in the bias format, the sum
exact, one requantization to the output format, `K2C.BatchNorm` on `K2C.Pipe`.
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


def _per_channel(layer: KerasLayer, value: object, keras_shape: tuple[int, ...], what: str) -> np.ndarray:
    """A scalar or an array Keras broadcasts over the input, as one value per channel."""
    values = np.asarray(value, dtype=np.float64)
    channels = keras_shape[-1]
    try:
        full = np.broadcast_to(values, keras_shape)
    except ValueError:
        raise K2CError(
            f"Rescaling layer '{layer.name}' has {what} of shape {values.shape}, which does not "
            f"broadcast to its input {keras_shape}"
        ) from None
    per_channel = full.reshape(-1, channels)
    if not np.all(np.isfinite(per_channel)):
        raise K2CError(f"Rescaling layer '{layer.name}' has a NaN or infinite {what}")
    if not np.all(per_channel == per_channel[:1]):
        raise K2CError(
            f"Rescaling layer '{layer.name}' has a {what} that varies along an axis other than the "
            "channels (the last); one value per channel is supported"
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


class RescalingKind(BatchNormKind):
    """The batch normalization's plan, arithmetic, block and storage on its own constants."""

    records = (Rescaling,)
    texts = HASKELL

    def constants(self, layer: Layer) -> tuple[np.ndarray, np.ndarray]:
        assert isinstance(layer, Rescaling)
        return np.asarray(layer.scale, dtype=np.float64), np.asarray(layer.offset, dtype=np.float64)


KINDS = (RescalingKind(),)
