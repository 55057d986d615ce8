"""Converters of the layers that are the identity at inference (Dropout and friends) and of the
TimeDistributed wrapper (the layer it wraps, converted on the whole sequence); every other
converter is in its kind's module (`keras2clash.kinds`)."""

from __future__ import annotations

from typing import Any

from keras2clash.errors import K2CError
from keras2clash.frontend.registry import (
    ConversionState,
    FloatTwin,
    _single_input,
    keras_converter,
    register_converter,
)
from keras2clash.ir import layers as ir

INFERENCE_IDENTITIES = (
    "Dropout",
    "SpatialDropout1D",
    "SpatialDropout2D",
    "SpatialDropout3D",
    "GaussianNoise",
    "GaussianDropout",
    "AlphaDropout",
    "ActivityRegularization",
    "Identity",
)


@register_converter(*INFERENCE_IDENTITIES)
def _convert_inference_identity(layer: Any, state: ConversionState) -> ir.Layer:
    """Layers whose `call` returns its input unchanged unless training=True (Keras 3 source
    checked: each returns `inputs` when not training; the regularizer only adds a loss).
    The pass `remove_identities` drops them; a call with training=True is rejected."""
    _single_input(layer, state)
    return ir.Identity(**state.common(layer, state.shape), source_class=type(layer).__name__)


PER_POSITION = (
    "Dense",
    "Activation",
    "ReLU",
    "LeakyReLU",
    "ELU",
    "PReLU",
    "Softmax",
    "BatchNormalization",
    *INFERENCE_IDENTITIES,
)
"""The Keras classes TimeDistributed may wrap: each computes every position of the last axis
alone (a Dense on it, a function or an affine of each value), so it computes the same on each
step as on the whole sequence, which its own converter then takes."""


@register_converter("TimeDistributed")
def _convert_time_distributed(layer: Any, state: ConversionState) -> ir.Layer | tuple[ir.Layer, ...]:
    """The wrapped layer (`PER_POSITION`) converted on the whole `(steps, ..., C)` input, under
    the TimeDistributed layer's name (its formats and knobs are given by that name): a Dense
    becomes a 1x1 convolution per position (`kinds.conv.dense_on_tensor`)."""
    _single_input(layer, state)
    inner = layer.layer
    wrapped = type(inner).__name__
    if wrapped not in PER_POSITION or not type(inner).__module__.startswith("keras."):
        raise K2CError(
            f"TimeDistributed layer '{layer.name}' wraps a {wrapped}; only a layer that computes each position "
            f"alone is converted inside it: {', '.join(PER_POSITION[:9])} and the other layers that are the "
            "identity at inference"
        )
    rank = len(state.keras_shape)
    if rank > 3:
        raise K2CError(
            f"TimeDistributed layer '{layer.name}' gets an input of shape {state.keras_shape} (rank {rank}); it is "
            "converted on a sequence (steps, channels) or (steps, width, channels); add a Reshape before it"
        )
    overrides: dict[str, Any] = {"name": layer.name}
    axis = getattr(inner, "axis", None)  # Softmax, BatchNormalization: of the step's shape (rank - 1)
    axes = list(axis) if isinstance(axis, (list, tuple)) else [axis]
    if len(axes) == 1 and axes[0] is not None and int(axes[0]) % rank == rank - 1:
        overrides["axis"] = -1  # the last axis of the whole sequence too
    return keras_converter(wrapped)(FloatTwin(inner, wrapped, **overrides), state)
