"""QKeras' (qkeras-v3) layers beyond QDense/QConv: QDepthwiseConv2D, QSeparableConv1D/2D,
QAveragePooling2D, QGlobalAveragePooling2D and QBatchNormalization, as records of the
existing kinds with QKeras' own quantized constants, and their formats for
`frontend.qkeras.format_config` (`register_quant`). The semantics, with references into
QKeras' `qconvolutional.py`, `qpooling.py` and `qnormalization.py`, are in
docs/guide/quantization-aware.md:
- QDepthwiseConv2D: the depthwise convolution with `depthwise_quantizer`'d kernel and
  `bias_quantizer`'d bias, then its activation (a quantizer: the output format);
- QSeparableConv2D: the depthwise part (`depthwise_quantizer`) summed exactly in float32,
  then the pointwise part (`pointwise_quantizer`) with the bias and the activation: a
  depthwise record with the exact accumulator as its output, then a 1x1 convolution;
- QAveragePooling2D / QGlobalAveragePooling2D with an `average_quantizer`: the window's sum
  (exact in float32) times `average_quantizer(1/N)`: a depthwise convolution whose weights
  are all that constant, for any N; without one, Keras' float32 mean, exact only for a
  power-of-two N (the constant 2^-k). Keras' 'same' border windows (each divided by its own
  count) are refused;
- QBatchNormalization: `x * inv + (beta - mean * inv)` in float32 with QKeras' quantized
  `gamma`, `beta`, `mean`, `variance` and `inv` (`inverse_quantizer`): a BatchNorm stage with
  those two constants, refused when the exact sum can exceed float32's 24 bits (QKeras then
  rounds it, `qkeras.format_config`); it is never folded into the layer before it (its constants are QKeras' own).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.frontend.qkeras import (
    LayerQuant,
    _activation_parts,
    constant_format,
    data_format,
    quantized,
    quantized_bias,
    register_quant,
)
from keras2clash.frontend.registry import (
    ConversionState,
    FloatTwin,
    _single_input,
    _to_numpy,
    keras_converter,
    register_converter,
)
from keras2clash.ir import layers as ir
from keras2clash.kinds.batchnorm import BatchNorm
from keras2clash.kinds.depthwise import uniform_window
from keras2clash.kinds.flatten import Flatten
from keras2clash.kinds.pool import Pool2D
from keras2clash.quant.formats import FixedFormat


def _where(layer: Any) -> str:
    return f"QKeras layer '{layer.name}' ({type(layer).__name__})"


def _output(layer: Any) -> FixedFormat | None:
    """The format of the layer's activation quantizer (None: its float result passes on)."""
    _, out_q = _activation_parts(layer)
    return None if out_q is None else data_format(layer, "activation", out_q)


def _keras_activation(layer: Any) -> Any:
    """The Keras activation the record applies (the quantizer is the output format instead)."""
    import keras

    return keras.activations.get(_activation_parts(layer)[0])


def _twin(layer: Any, state: ConversionState, float_class: str, **overrides: Any) -> ir.Layer | tuple[ir.Layer, ...]:
    return keras_converter(float_class)(FloatTwin(layer, float_class, **overrides), state)


def _zeros_if_none(bias: np.ndarray | None, size: int) -> np.ndarray:
    return np.zeros(size) if bias is None else bias.reshape(-1)


# --- depthwise and separable convolutions ---------------------------------------------------


@register_converter("QDepthwiseConv2D", module="qkeras.")
def _convert_depthwise(layer: Any, state: ConversionState) -> ir.Layer | tuple[ir.Layer, ...]:
    """A DepthwiseConv2D with QKeras' quantized depthwise kernel and bias."""
    _depthwise_quants(layer)  # refuses bad settings now, naming the layer
    kernel = quantized(layer, "depthwise kernel", "depthwise_quantizer", layer.depthwise_kernel)
    bias = _zeros_if_none(quantized_bias(layer), kernel.shape[-2] * kernel.shape[-1])
    return _twin(layer, state, "DepthwiseConv2D", kernel=kernel, bias=bias, activation=_keras_activation(layer))


@register_quant("QDepthwiseConv2D")
def _depthwise_quants(layer: Any) -> dict[str, LayerQuant]:
    kernel = quantized(layer, "depthwise kernel", "depthwise_quantizer", layer.depthwise_kernel)
    bias = quantized_bias(layer)
    return {
        str(layer.name): LayerQuant(
            name=str(layer.name),
            kernel=constant_format(layer, "depthwise_quantizer", layer.depthwise_quantizer_internal, kernel),
            bias=None
            if bias is None
            else constant_format(layer, "bias_quantizer", layer.bias_quantizer_internal, bias),
            output=_output(layer),
            source=str(layer.name),
        )
    }


def _separable_weights(layer: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    depthwise = quantized(layer, "depthwise kernel", "depthwise_quantizer", layer.depthwise_kernel)
    pointwise = quantized(layer, "pointwise kernel", "pointwise_quantizer", layer.pointwise_kernel)
    return depthwise, pointwise, quantized_bias(layer)


@register_converter("QSeparableConv1D", "QSeparableConv2D", module="qkeras.")
def _convert_separable(layer: Any, state: ConversionState) -> ir.Layer | tuple[ir.Layer, ...]:
    """The depthwise part (exact output) then the pointwise 1x1 convolution, with QKeras'
    quantized kernels and bias."""
    _separable_quants(layer)
    depthwise, pointwise, bias = _separable_weights(layer)
    return _twin(
        layer,
        state,
        type(layer).__name__[1:],
        depthwise_kernel=depthwise,
        pointwise_kernel=pointwise,
        bias=_zeros_if_none(bias, pointwise.shape[-1]),
        activation=_keras_activation(layer),
    )


@register_quant("QSeparableConv1D", "QSeparableConv2D")
def _separable_quants(layer: Any) -> dict[str, LayerQuant]:
    depthwise, pointwise, bias = _separable_weights(layer)
    inner = f"{layer.name}_depthwise"  # the depthwise record (frontend: SeparableConv2D's converter)
    return {
        inner: LayerQuant(
            name=inner,
            kernel=constant_format(layer, "depthwise_quantizer", layer.depthwise_quantizer_internal, depthwise),
            bias=None,
            output=None,  # QKeras sums it exactly in float32 before the pointwise part
        ),
        str(layer.name): LayerQuant(
            name=str(layer.name),
            kernel=constant_format(layer, "pointwise_quantizer", layer.pointwise_quantizer_internal, pointwise),
            bias=None
            if bias is None
            else constant_format(layer, "bias_quantizer", layer.bias_quantizer_internal, bias),
            output=_output(layer),
            source=str(layer.name),
        ),
    }


# --- average pooling ------------------------------------------------------------------------


def _mean_weight(layer: Any, size: int) -> float:
    """What QKeras multiplies the window's sum of `size` values by: `average_quantizer(1/size)`,
    or without one 2^-k for size = 2^k (Keras' float32 mean is exact only then)."""
    import keras

    if layer.average_quantizer:
        factor = keras.ops.divide(keras.ops.convert_to_tensor(1.0, "float32"), float(size))
        return float(_to_numpy(layer.average_quantizer_internal(factor)))
    k = size.bit_length() - 1
    if size != 1 << k:
        raise K2CError(
            f"{_where(layer)} averages {size} values without an average_quantizer: Keras divides their sum "
            f"by {size} in float32, which rounds; give it an average_quantizer (e.g. quantized_bits(8, 0, "
            "alpha=1)) or average a power-of-two count of values"
        )
    return 2.0**-k


def _mean_quant(layer: Any, name: str, weight: float) -> dict[str, LayerQuant]:
    return {
        name: LayerQuant(
            name=name,
            kernel=constant_format(layer, "average_quantizer", layer.average_quantizer_internal, np.array([weight])),
            bias=None,
            output=_output(layer),
            source=str(layer.name),
        )
    }


@register_converter("QAveragePooling2D", module="qkeras.")
def _convert_average_pool(layer: Any, state: ConversionState) -> ir.Layer:
    """Each window's sum times QKeras' constant: a depthwise convolution of that weight."""
    pool = _twin(layer, state, "AveragePooling2D", activation=None)
    assert isinstance(pool, Pool2D)
    if any(pool.pads):
        raise K2CError(
            f"{_where(layer)} pads its input ('same'): Keras divides each border window by its own count "
            "of values; use padding='valid'"
        )
    _average_pool_quants(layer)
    weight = _mean_weight(layer, math.prod(pool.pool_size))
    return uniform_window(str(layer.name), state, pool.output_shape, pool.pool_size, pool.strides, weight)


@register_quant("QAveragePooling2D")
def _average_pool_quants(layer: Any) -> dict[str, LayerQuant]:
    size = math.prod(int(v) for v in np.ravel(layer.pool_size))
    return _mean_quant(layer, str(layer.name), _mean_weight(layer, size))


def _global_mean_name(layer: Any) -> str:
    return str(layer.name) if layer.keepdims else f"{layer.name}_mean"


@register_converter("QGlobalAveragePooling2D", module="qkeras.")
def _convert_global_average_pool(layer: Any, state: ConversionState) -> ir.Layer | tuple[ir.Layer, ...]:
    """The sum over the whole image times QKeras' constant: a depthwise convolution whose window
    is the image (then a Flatten to `(C,)` without keepdims)."""
    _twin(layer, state, "GlobalAveragePooling2D")
    height, width, channels = state.shape
    _global_average_pool_quants(layer)
    weight = _mean_weight(layer, height * width)
    mean = uniform_window(_global_mean_name(layer), state, (1, 1, channels), (height, width), (1, 1), weight)
    if layer.keepdims:
        return mean
    flatten = Flatten(
        name=str(layer.name), inputs=(mean.name,), input_shapes=(mean.output_shape,), output_shape=(channels,)
    )
    return mean, flatten


@register_quant("QGlobalAveragePooling2D")
def _global_average_pool_quants(layer: Any) -> dict[str, LayerQuant]:
    size = math.prod(int(d) for d in layer.input.shape[1:-1])
    return _mean_quant(layer, _global_mean_name(layer), _mean_weight(layer, size))


# --- batch normalization ----------------------------------------------------------------------


def _batch_norm_constants(layer: Any) -> tuple[np.ndarray, np.ndarray]:
    """(inv, offset) per channel in float32 as QKeras' inference `call` computes them:
    `inv = inverse_quantizer(gamma_q / sqrt(variance_q + epsilon))`, `offset = beta_q - mean_q * inv`."""
    import keras

    ops = keras.ops

    def maybe(quantizer_name: str, variable: Any) -> Any:
        internal = getattr(layer, f"{quantizer_name}_internal", None)
        value = ops.convert_to_tensor(variable)
        return internal(value) if getattr(layer, quantizer_name, None) else value

    mean = ops.cast(maybe("mean_quantizer", layer.moving_mean), "float32")
    variance = ops.cast(maybe("variance_quantizer", layer.moving_variance), "float32")
    inv = 1 / ops.sqrt(variance + layer.epsilon)
    if layer.scale:
        inv = inv * ops.cast(maybe("gamma_quantizer", layer.gamma), "float32")
    if layer.inverse_quantizer_internal is not None:
        inv = layer.inverse_quantizer_internal(inv)
    inv = ops.cast(inv, "float32")
    offset = ops.cast(maybe("beta_quantizer", layer.beta), "float32") - mean * inv if layer.center else -mean * inv
    return _to_numpy(inv).reshape(-1), _to_numpy(offset).reshape(-1)


@register_converter("QBatchNormalization", module="qkeras.")
def _convert_batch_normalization(layer: Any, state: ConversionState) -> ir.Layer:
    """`x * inv + offset` per channel of the last axis: a BatchNorm stage (not folded)."""
    _single_input(layer, state)
    rank = len(state.keras_shape) + 1
    axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    if len(axes) != 1 or int(axes[0]) % rank != rank - 1:
        raise K2CError(
            f"{_where(layer)} normalises axis {layer.axis} of an input of shape {state.keras_shape}; only "
            "the last (channels) axis is supported"
        )
    _batch_norm_quants(layer)
    inv, offset = _batch_norm_constants(layer)
    return BatchNorm(**state.common(layer, state.shape), scale=inv, shift=offset, mean=np.zeros_like(inv), folds=False)


@register_quant("QBatchNormalization")
def _batch_norm_quants(layer: Any) -> dict[str, LayerQuant]:
    inv, offset = _batch_norm_constants(layer)
    return {
        str(layer.name): LayerQuant(
            name=str(layer.name),
            kernel=constant_format(layer, "inverse_quantizer", layer.inverse_quantizer_internal, inv),
            bias=constant_format(layer, "offset (beta - mean * inv)", None, offset),
            output=None,
            source=str(layer.name),
        )
    }
