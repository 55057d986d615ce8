"""Converters of the vector and graph layers: identities, Dense and the merges (Add, ...,
Concatenate); the other kinds' converters are in their modules (`keras2clash.kinds`)."""

from __future__ import annotations

from typing import Any


from keras2clash.errors import K2CError
from keras2clash.frontend.registry import (
    ConversionState, _activation, _check_keras_shape, _kernel_and_bias, _single_input, register_converter,
)
from keras2clash.frontend.sequences import dense_on_tensor
from keras2clash.ir import layers as ir


@register_converter(
    "Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "GaussianNoise",
    "GaussianDropout", "AlphaDropout", "ActivityRegularization", "Identity",
)
def _convert_inference_identity(layer: Any, state: ConversionState) -> ir.Layer:
    """Layers whose `call` returns its input unchanged unless training=True (Keras 3 source
    checked: each returns `inputs` when not training; the regularizer only adds a loss).
    The pass `remove_identities` drops them; a call with training=True is rejected."""
    _single_input(layer, state)
    return ir.Identity(**state.common(layer, state.shape), source_class=type(layer).__name__)


@register_converter("Dense")
def _convert_dense(layer: Any, state: ConversionState) -> ir.Layer:
    _single_input(layer, state)
    if getattr(layer, "quantization_mode", None) is not None:
        raise K2CError(
            f"Dense layer '{layer.name}' is Keras-quantized ({layer.quantization_mode}); "
            "give keras2clash the float model"
        )
    if len(state.shape) != 1:
        return dense_on_tensor(layer, state)  # per position: a 1x1 Conv2D
    activation = _activation(layer)
    n_in, n_out = state.shape[0], int(layer.units)
    kernel, bias = _kernel_and_bias(layer, (n_in, n_out))
    return ir.Dense(**state.common(layer, (n_out,)), kernel=kernel, bias=bias,
                    use_bias=bool(layer.use_bias), activation=activation)


# --- merges -------------------------------------------------------------------------------

_MERGE_OPS = {"Add": "add", "Subtract": "subtract", "Multiply": "multiply", "Average": "average",
              "Maximum": "maximum", "Minimum": "minimum"}


@register_converter(*_MERGE_OPS)
def _convert_elementwise_merge(layer: Any, state: ConversionState) -> ir.Layer:
    """Add, Subtract, Multiply, Average, Maximum, Minimum of inputs of one shape."""
    kind = type(layer).__name__
    if len(state.inputs) < 2 or (kind == "Subtract" and len(state.inputs) != 2):
        raise K2CError(f"{kind} layer '{layer.name}' reads {len(state.inputs)} tensor(s); "
                       + ("it takes exactly two" if kind == "Subtract" else "it takes two or more"))
    if any(shape != state.shape for shape in state.shapes):
        raise K2CError(
            f"{kind} layer '{layer.name}' merges tensors of shapes "
            f"{', '.join(map(str, state.shapes))}; only equal shapes are supported (no broadcasting)"
        )
    _check_keras_shape(layer, state, state.shape)
    return ir.Merge(**state.common(layer, state.shape), op=_MERGE_OPS[kind])


@register_converter("Concatenate")
def _convert_concatenate(layer: Any, state: ConversionState) -> ir.Layer:
    """Concatenation along the last axis (the channels of images, the values of vectors):
    the axis a beat carries, so it is a per-beat join."""
    rank = len(state.keras_shape)  # as Keras counts the axis
    if len(state.inputs) < 2:
        raise K2CError(f"Concatenate layer '{layer.name}' reads {len(state.inputs)} tensor; it takes two or more")
    if int(layer.axis) not in (-1, rank):
        raise K2CError(
            f"Concatenate layer '{layer.name}' joins axis {layer.axis} of rank-{rank} inputs; "
            "only the last axis (channels, or the values of a vector) is supported"
        )
    if any(len(s) != len(state.shape) or s[:-1] != state.shape[:-1] for s in state.shapes):
        raise K2CError(
            f"Concatenate layer '{layer.name}' joins tensors of shapes "
            f"{', '.join(map(str, state.shapes))}: all axes but the last must agree"
        )
    out = (*state.shape[:-1], sum(s[-1] for s in state.shapes))
    _check_keras_shape(layer, state, out)
    return ir.Merge(**state.common(layer, out), op="concatenate")
