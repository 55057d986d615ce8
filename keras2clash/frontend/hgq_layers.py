"""HGQ2's quantizing layers that compute no dot product of their own: pooling, global pooling,
merges and batch normalization, as records of the existing kinds, and their formats for
`frontend.hgq.format_config` (`register_quant`).

Each quantizes its input(s) with its input quantizer(s) (`iq`; a merge has one per input),
then computes in float32 as its Keras twin does, and quantizes the result with its output
quantizer when `enable_oq=True` (docs/guide/quantization-aware.md has the semantics,
references into HGQ2's `layers/pooling.py`, `layers/ops/merge.py` and
`layers/batch_normalization.py`):
- max pooling (local, global) selects one of its quantized inputs: the record of its twin,
  keeping its input quantizer's format;
- average pooling divides the window's sum by the window's size N in float32; the hardware
  builds the exact mean as a depthwise convolution whose weights are all 2^-k (N = 2^k, the
  sum times 2^-k is exact), requantized once by the quantizer after it, as HGQ2 rounds its
  float32 mean once. Another N (a float32 quotient rounded, then rounded again) and Keras'
  'same' border windows (each divided by its own count) are refused;
- a merge (QAdd, QSubtract, QMultiply, QMaximum, QMinimum) combines its quantized inputs
  exactly (float32 is exact under the float32 condition): the merge record;
- QBatchNormalization computes `iq(x) * kq(scale) + bq(offset)`: the BatchNorm record with
  HGQ2's quantized scale and offset; it is never folded into the layer before it (its input
  quantizer acts between them).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.frontend.hgq import (
    LayerQuant,
    TensorFormat,
    constant_format,
    data_format,
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
from keras2clash.kinds.global_pool import GlobalPool
from keras2clash.kinds.pool import Pool2D

MAX_POOLS = {
    "QMaxPooling1D": "MaxPooling1D",
    "QMaxPooling2D": "MaxPooling2D",
    "QGlobalMaxPooling1D": "GlobalMaxPooling1D",
    "QGlobalMaxPooling2D": "GlobalMaxPooling2D",
}
AVERAGE_POOLS = {"QAveragePooling1D": "AveragePooling1D", "QAveragePooling2D": "AveragePooling2D"}
GLOBAL_AVERAGE_POOLS = {
    "QGlobalAveragePooling1D": "GlobalAveragePooling1D",
    "QGlobalAveragePooling2D": "GlobalAveragePooling2D",
}
MERGES = {
    "QAdd": "Add",
    "QSubtract": "Subtract",
    "QMultiply": "Multiply",
    "QMaximum": "Maximum",
    "QMinimum": "Minimum",
}


def _twin_record(layer: Any, state: ConversionState, float_class: str) -> ir.Layer:
    produced = keras_converter(float_class)(FloatTwin(layer, float_class), state)
    assert isinstance(produced, ir.Layer)
    return produced


def _where(layer: Any) -> str:
    return f"HGQ2 layer '{layer.name}' ({type(layer).__name__})"


def _check_iq(layer: Any) -> None:
    if not layer.enable_iq:
        raise K2CError(
            f"{_where(layer)} has enable_iq=False: its input is not quantized by the layer; keep the input quantizer"
        )


def _data_quant(layer: Any, name: str | None = None, kernel: TensorFormat | None = None) -> LayerQuant:
    """A single-input layer's input (and output) quantizer formats."""
    return LayerQuant(
        name=name or str(layer.name),
        input=data_format(layer, "input", layer.iq),
        kernel=kernel,
        bias=None,
        output=data_format(layer, "output", layer.oq) if layer.enable_oq else None,
    )


# --- pooling ------------------------------------------------------------------------------


@register_converter(*MAX_POOLS, module="hgq.")
def _convert_max_pool(layer: Any, state: ConversionState) -> ir.Layer:
    """Max pooling (local or global) of its quantized input: its Keras twin's record."""
    _check_iq(layer)
    record = _twin_record(layer, state, MAX_POOLS[type(layer).__name__])
    _data_quant(layer)  # refuses bad settings now
    return record


@register_quant(*MAX_POOLS)
def _max_pool_quant(layer: Any) -> LayerQuant:
    return _data_quant(layer)


def _power_of_two(layer: Any, size: int, what: str) -> int:
    """k with 2^k = size, or the error that says why another size is not built."""
    k = size.bit_length() - 1
    if size != 1 << k:
        raise K2CError(
            f"{_where(layer)} averages {what} of {size} values: HGQ2 divides their sum by {size} in "
            "float32 and the quantizer after it rounds that quotient, which the hardware computes "
            "exactly only for a power-of-two count (the sum times 2^-k); use a pool of 2, 4, 8, ... values"
        )
    return k


def _mean_weights(layer: Any, k: int) -> TensorFormat:
    """The format of the constant 2^-k (the mean's weight): unsigned, 1 - k integer and k fraction bits."""
    return TensorFormat(str(layer.name), "kernel", False, 1 - k, k, "RND", "SAT")


@register_converter(*AVERAGE_POOLS, module="hgq.")
def _convert_average_pool(layer: Any, state: ConversionState) -> ir.Layer:
    """Average pooling over windows of 2^k values: a depthwise convolution of weights 2^-k."""
    _check_iq(layer)
    pool = _twin_record(layer, state, AVERAGE_POOLS[type(layer).__name__])
    assert isinstance(pool, Pool2D)
    if any(pool.pads):
        raise K2CError(
            f"{_where(layer)} pads its input ('same'): Keras divides each border window by its own "
            "count of values, and HGQ2 rounds each float32 quotient; use padding='valid'"
        )
    k = _power_of_two(layer, math.prod(pool.pool_size), "windows")
    _data_quant(layer)
    return uniform_window(str(layer.name), state, pool.output_shape, pool.pool_size, pool.strides, 2.0**-k)


@register_quant(*AVERAGE_POOLS)
def _average_pool_quant(layer: Any) -> LayerQuant:
    size = math.prod(int(v) for v in np.ravel(layer.pool_size))
    return _data_quant(layer, kernel=_mean_weights(layer, size.bit_length() - 1))


def _global_mean_name(layer: Any) -> str:
    """The depthwise record of a global average pooling without keepdims (a Flatten after it
    carries the layer's name)."""
    return str(layer.name) if layer.keepdims else f"{layer.name}_mean"


@register_converter(*GLOBAL_AVERAGE_POOLS, module="hgq.")
def _convert_global_average_pool(layer: Any, state: ConversionState) -> ir.Layer | tuple[ir.Layer, ...]:
    """The mean over all 2^k positions: a depthwise convolution whose window is the whole
    image, of weights 2^-k (then a Flatten to `(C,)` without keepdims)."""
    _check_iq(layer)
    pool = _twin_record(layer, state, GLOBAL_AVERAGE_POOLS[type(layer).__name__])
    assert isinstance(pool, GlobalPool)
    height, width, channels = state.shape
    k = _power_of_two(layer, height * width, "its whole input")
    _data_quant(layer)
    mean = uniform_window(_global_mean_name(layer), state, (1, 1, channels), (height, width), (1, 1), 2.0**-k)
    if layer.keepdims:
        return mean
    flatten = Flatten(
        name=str(layer.name), inputs=(mean.name,), input_shapes=(mean.output_shape,), output_shape=(channels,)
    )
    return mean, flatten


@register_quant(*GLOBAL_AVERAGE_POOLS)
def _global_average_pool_quant(layer: Any) -> LayerQuant:
    size = math.prod(int(d) for d in layer.input.shape[1:-1])  # the positions averaged
    return _data_quant(layer, _global_mean_name(layer), _mean_weights(layer, size.bit_length() - 1))


# --- merges -------------------------------------------------------------------------------


@register_converter(*MERGES, module="hgq.")
def _convert_merge(layer: Any, state: ConversionState) -> ir.Layer:
    """An element-wise merge of its quantized inputs: its Keras twin's record."""
    _check_iq(layer)
    record = _twin_record(layer, state, MERGES[type(layer).__name__])
    _merge_quant(layer)
    return record


@register_quant(*MERGES)
def _merge_quant(layer: Any) -> LayerQuant:
    inputs = tuple(data_format(layer, f"input {i}", q) for i, q in enumerate(layer.iq))
    return LayerQuant(
        name=str(layer.name),
        input=inputs[0],
        kernel=None,
        bias=None,
        output=data_format(layer, "output", layer.oq) if layer.enable_oq else None,
        inputs=inputs,
    )


# --- batch normalization --------------------------------------------------------------------


def _scale_and_offset(layer: Any) -> tuple[np.ndarray, np.ndarray]:
    """HGQ2's own quantized scale and offset (inference mode), float64 (exact)."""
    scale, offset = layer.qscaler_and_qoffset
    return _to_numpy(scale).reshape(-1), _to_numpy(offset).reshape(-1)


@register_converter("QBatchNormalization", module="hgq.")
def _convert_batch_normalization(layer: Any, state: ConversionState) -> ir.Layer:
    """`iq(x) * qscale + qoffset` per channel of the last axis: a BatchNorm stage (not folded)."""
    _single_input(layer, state)
    _check_iq(layer)
    rank = len(state.keras_shape) + 1
    axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    if len(axes) != 1 or int(axes[0]) % rank != rank - 1:
        raise K2CError(
            f"{_where(layer)} normalises axis {layer.axis} of an input of shape {state.keras_shape}; "
            "only the last (channels) axis is supported"
        )
    _batch_norm_quant(layer)
    scale, offset = _scale_and_offset(layer)
    return BatchNorm(
        **state.common(layer, state.shape), scale=scale, shift=offset, mean=np.zeros_like(scale), folds=False
    )


@register_quant("QBatchNormalization")
def _batch_norm_quant(layer: Any) -> LayerQuant:
    scale, offset = _scale_and_offset(layer)
    return LayerQuant(
        name=str(layer.name),
        input=data_format(layer, "input", layer.iq),
        kernel=constant_format(layer, "kernel", layer.kq, scale),
        bias=constant_format(layer, "bias", layer.bq, offset),
        output=data_format(layer, "output", layer.oq) if layer.enable_oq else None,
    )
