"""Converters of the vector layers: identities and Dense; the other kinds' converters are in
their modules (`keras2clash.kinds`)."""

from __future__ import annotations

from typing import Any


from keras2clash.errors import K2CError
from keras2clash.frontend.registry import (
    ConversionState, _activation, _kernel_and_bias, _single_input, register_converter,
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
