"""HGQ2's QMultiHeadAttention as the records of Keras' MultiHeadAttention
(`kinds.attention.attention_records`), with HGQ2's quantized weights, and its quantizers as
the formats of those records for `frontend.hgq.format_config` (`register_quant`).

What HGQ2 computes (hgq/layers/attn/mha.py, hgq/layers/softmax.py) and where it goes
(docs/guide/quantization-aware.md, "QMultiHeadAttention"):
- the query, key and value projections are QEinsumDense layers, a Dense per step, each with
  its input quantizer, its kernel and bias quantizers (the key has no bias) and an output
  quantizer that is always on: the records `<name>_query`, `<name>_key`, `<name>_value` with
  those formats, bit for bit;
- the scores `q . k`, summed in float32 and not quantized: the attention kind's exact scores;
  QSoftmax multiplies them by `1/sqrt(key_dim)` inside its exponential table: the record's
  `scale`, which keras2clash's softmax table applies in the same place;
- QSoftmax itself runs on two tables HGQ2 fills in float32 (exponential and reciprocal), with
  quantizers of their own: keras2clash computes its own softmax (an exponential table, an
  exact sum and division) to the format of QSoftmax's output quantizer instead;
- the mix `sum_j p v` in float32 (exact) is quantized by the output projection's input
  quantizer: the attention record's output format; the output projection `<name>` is a
  QEinsumDense as any other.

The attention kind takes one format per tensor, so each data quantizer here must state one
(k, i, f): a heterogeneous one would round each element at its own position, which no one
format reproduces, and is refused naming the quantizer and the setting that makes it per
tensor. Kernels and biases keep HGQ2's quantized values in the narrowest format that holds
them (`constant_format`), per-weight bit-widths included.
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
    heterogeneous,
    quantized_weights,
    register_quant,
    to_fixed_format,
)
from keras2clash.frontend.registry import ConversionState, register_converter
from keras2clash.ir import layers as ir
from keras2clash.kinds.attention import Projection, attention_records, check_call
from keras2clash.kinds.quantize import format_text
from keras2clash.quant.formats import FixedFormat

CLASS = "QMultiHeadAttention"
PROJECTIONS = ("query", "key", "value")
SETTINGS = {"input": "qkvo_iq_conf", "output": "qkvo_oq_conf"}
"""The QMultiHeadAttention argument that configures the projections' quantizers of a role."""


def _dense(layer: Any, part: str) -> Any:
    """The QEinsumDense of a projection (`query`, `key`, `value`, `output`)."""
    return getattr(layer, f"_{part}_dense")


def _record(layer: Any, part: str) -> str:
    """The record a projection becomes (the output projection takes the layer's name)."""
    return str(layer.name) if part == "output" else f"{layer.name}_{part}"


def _named(name: str) -> Any:
    """A stand-in for a part of the layer in `frontend.hgq`'s readers, which name a quantizer
    by its layer's name and class: the record's name, the HGQ2 class."""
    return type(CLASS, (), {"name": name})()


def _per_tensor(layer: Any, record: str, role: str, quantizer: Any, setting: str) -> TensorFormat:
    """The one format of a data quantizer, or the error that names it and the setting."""
    where = _named(record)
    if heterogeneous(where, quantizer):
        raise K2CError(
            f"HGQ2 layer '{layer.name}' ({CLASS}): the {role} quantizer of '{record}' is heterogeneous "
            "(a format per element or channel); the attention is built with one format per tensor: "
            f"give {setting} heterogeneous_axis=() (one format for the whole tensor)"
        )
    return data_format(where, role, quantizer)


def _check_layer(layer: Any) -> None:
    if not layer.enable_iq:
        raise K2CError(
            f"HGQ2 layer '{layer.name}' ({CLASS}) has enable_iq=False: its projections' inputs are not "
            "quantized; keep the input quantizers"
        )
    if layer.enable_oq:  # pragma: no cover - HGQ2 0.2.0 fails to build such a layer (its `mha_oq` unbuilt)
        raise K2CError(
            f"HGQ2 layer '{layer.name}' ({CLASS}) has enable_oq=True: HGQ2 quantizes its output twice (the "
            "output projection's output quantizer, then the layer's own), which is not built; use "
            "enable_oq=False (the next layer's input quantizer quantizes the output)"
        )
    if layer._softmax.enable_iq:  # pragma: no cover - QMultiHeadAttention builds its QSoftmax without one
        raise K2CError(f"HGQ2 layer '{layer.name}' ({CLASS}): its softmax quantizes the scores; not built")


def _projection_quant(layer: Any, part: str) -> LayerQuant:
    """A projection's formats: its input quantizer, HGQ2's quantized kernel and bias, and
    its output quantizer (always on for the query, key and value; the output projection's
    is the layer's `enable_oq`, refused)."""
    dense, record = _dense(layer, part), _record(layer, part)
    where = _named(record)
    kernel, bias = quantized_weights(dense)
    return LayerQuant(
        name=record,
        input=_per_tensor(layer, record, "input", dense.iq, SETTINGS["input"]),
        kernel=constant_format(where, "kernel", dense.kq, kernel),
        bias=constant_format(where, "bias", dense.bq, bias) if bias is not None else None,
        output=_per_tensor(layer, record, "output", dense.oq, SETTINGS["output"]) if part != "output" else None,
    )


def _container(name: str, formats: list[TensorFormat]) -> TensorFormat:
    """The signed format with the most integer and fraction bits of `formats`' containers:
    `q ++ k ++ v` in it keeps every value (the concatenation moves values only)."""
    containers = [to_fixed_format(f).container for f in formats]
    integer, frac = max(c.int for c in containers), max(c.frac for c in containers)
    return TensorFormat(name, "input", True, integer, frac, "RND", "SAT")


def probability_format(layer: Any) -> FixedFormat:
    """The probabilities' format: QSoftmax's output quantizer as a signed format (the
    probabilities are in [0, 1], where a signed and an unsigned format of the same integer and
    fraction bits hold the same values), or the error that says why it is not built."""
    record = f"{layer.name}_attention"
    stated = _per_tensor(layer, record, "softmax output", layer._softmax.oq, "softmax_oq_conf")
    fmt = to_fixed_format(stated)
    if fmt.int < 0 or fmt.frac < 0:
        raise K2CError(
            f"HGQ2 layer '{layer.name}' ({CLASS}): its softmax output quantizer ({stated.describe()}) has a "
            "negative field; the attention holds probabilities with integer and fraction bits >= 0"
        )
    if fmt.overflow == "wrap" and fmt.int < 1:
        raise K2CError(
            f"HGQ2 layer '{layer.name}' ({CLASS}): its softmax output quantizer ({stated.describe()}) wraps a "
            "probability of 1 (or near it) to 0, which the attention's softmax does not; use "
            "overflow_mode='SAT' or at least 1 integer bit"
        )
    return FixedFormat(1, fmt.int, fmt.frac)


def _attention_quant(layer: Any) -> tuple[LayerQuant, ...]:
    """The formats of the records the layer becomes: the projections' quantizers; the
    concatenation and the attention read `q ++ k ++ v` in the container of the three output
    quantizers (exact); the attention's output is quantized by the output projection's input
    quantizer, which `format_config` reads as any reader's."""
    _check_layer(layer)
    projections = [_projection_quant(layer, part) for part in PROJECTIONS]
    outputs = [q.output for q in projections if q.output is not None]
    qkv = _container(f"{layer.name}_qkv", outputs)
    name = str(layer.name)
    return (
        *projections,
        LayerQuant(name=f"{name}_qkv", input=outputs[0], kernel=None, bias=None, output=None, inputs=tuple(outputs)),
        LayerQuant(name=f"{name}_attention", input=qkv, kernel=None, bias=None, output=None),
        _projection_quant(layer, "output"),
    )


register_quant(CLASS)(_attention_quant)


def _same_input_quantizers(layer: Any, state: ConversionState, quants: tuple[LayerQuant, ...]) -> None:
    """Projections that read one tensor must quantize it to one format: the hardware holds a
    tensor in one format (HGQ2's `fuse` shares one quantizer among them)."""
    readers: dict[str, list[LayerQuant]] = {}
    for source, quant in zip((state.inputs[0], state.inputs[1], state.inputs[1]), quants):
        readers.setdefault(source, []).append(quant)
    for group in readers.values():
        formats = {to_fixed_format(q.input) for q in group if q.input is not None}
        if len(formats) > 1:
            names = ", ".join(f"'{q.name}' ({q.input.describe() if q.input else ''})" for q in group)
            fuse = "'qkv'" if len(group) == 3 else "'kv'"
            raise K2CError(
                f"HGQ2 layer '{layer.name}' ({CLASS}): its projections {names} read one tensor through input "
                f"quantizers of different formats, and the hardware holds a tensor in one format; use "
                f"fuse={fuse} (one input quantizer for them)"
            )


@register_converter(CLASS, module="hgq.")
def _convert_multi_head_attention(layer: Any, state: ConversionState) -> tuple[ir.Layer, ...]:
    """The records of Keras' MultiHeadAttention with HGQ2's quantized weights (the query
    unscaled: HGQ2 scales in its softmax), exact scores, the softmax's scale and
    HGQ2's probability format."""
    check_call(str(layer.name), CLASS, state, layer.attention_axes)
    quants = _attention_quant(layer)  # refuses bad settings now
    _same_input_quantizers(layer, state, quants)
    parts = []
    for part in (*PROJECTIONS, "output"):
        kernel, bias = quantized_weights(_dense(layer, part))
        parts.append(Projection(kernel, np.zeros(0) if bias is None else bias))
    scale = float(layer._softmax.input_scaler)
    if not math.isfinite(scale) or scale <= 0:  # pragma: no cover - HGQ2 sets 1/sqrt(key_dim)
        raise K2CError(f"HGQ2 layer '{layer.name}' ({CLASS}): softmax input scale {scale} is not built")
    return attention_records(
        layer,
        state,
        (parts[0], parts[1], parts[2], parts[3]),
        scale=scale,
        exact_scores=True,
        probability_format=format_text(probability_format(layer)),
    )
