"""Converters of the layers that are the identity at inference (Dropout and friends); every
other converter is in its kind's module (`keras2clash.kinds`)."""

from __future__ import annotations

from typing import Any

from keras2clash.frontend.registry import (
    ConversionState,
    _single_input,
    register_converter,
)
from keras2clash.ir import layers as ir


@register_converter(
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
def _convert_inference_identity(layer: Any, state: ConversionState) -> ir.Layer:
    """Layers whose `call` returns its input unchanged unless training=True (Keras 3 source
    checked: each returns `inputs` when not training; the regularizer only adds a loss).
    The pass `remove_identities` drops them; a call with training=True is rejected."""
    _single_input(layer, state)
    return ir.Identity(**state.common(layer, state.shape), source_class=type(layer).__name__)
