"""Quantization-aware models built with QKeras (qkeras-v3, Keras 3): their layers as IR
records and their quantizers as per-tensor formats (docs/guide/quantization-aware.md has the semantics this
module relies on, with references into QKeras' source).

A QKeras layer (QDense, QConv1D/2D) multiplies its input, as it comes, by its quantized
kernel (`kernel_quantizer`), adds its quantized bias (`bias_quantizer`), both in float32,
and passes the sum to its `activation`: a quantizer (`quantized_bits`, `quantized_relu`)
quantizes the layer's *output* (HGQ2 quantizes inputs instead). A `QActivation` layer applies
a quantizer on its own: right after a compute layer without an activation quantizer it is
that layer's output format; as the model's first operation it is the network's input format.
Every QKeras quantizer rounds with `tf.round` (round half to **even**) and saturates, so
its format is `FixedFormat(sign, integer, frac, "nearest_even", "saturate")`. The formats
come from the model, never from `--format`.

Constants: QKeras' own quantized kernel and bias (the quantizer applied to the weights, as
its forward pass does) are kept, in the narrowest signed container that holds them all;
that is exact by construction, also for per-channel power-of-two scales (`alpha="auto_po2"`,
which QDense/QConv make of `alpha=None`). What no fixed-point format computes (a float scale
`alpha="auto"`, stochastic rounding, a sigmoid or leaky relu quantizer, a symmetric signed
activation quantizer, float weights) is refused with one error naming the layer and the
setting.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.frontend.registry import (
    ConversionState,
    _activation_name,
    _to_numpy,
    keras_converter,
    register_converter,
)
from keras2clash.frontend.walk import refuse_folded_forward
from keras2clash.hw.plan import LayerFormats, accumulator_format
from keras2clash.ir import layers as ir
from keras2clash.ir.graph import Graph
from keras2clash.kinds import kind_of
from keras2clash.kinds.batchnorm import BatchNorm
from keras2clash.quant.formats import (
    MAX_BITS,
    MIN_HARDWARE_BITS,
    NEAREST_EVEN,
    SATURATE,
    FixedFormat,
    grid_frac,
    make_format,
)
from keras2clash.quant.layerformats import FormatConfig

#: Keras activations a QKeras layer may apply in float32 instead of a quantizer: exact on the
#: accumulator (the layer's output is then the exact accumulator, as QKeras leaves it).
EXACT_ACTIVATIONS = ("linear", "relu")
COMPUTE_CLASSES = ("QDense", "QConv1D", "QConv2D")


def _is_qkeras(obj: Any) -> bool:
    return type(obj).__module__.startswith("qkeras.")


def _where(layer: Any, role: str, quantizer: Any) -> str:
    return f"QKeras layer '{layer.name}' ({type(layer).__name__}), {role} {quantizer}"


def _common_checks(where: str, quantizer: Any) -> None:
    """Settings every QKeras quantizer has that would make its output other than the
    rounded value: stochastic rounding (random in training; a model that asks for it was
    trained for it), a partial quantization noise."""
    if getattr(quantizer, "use_stochastic_rounding", False):
        raise K2CError(
            f"{where}: use_stochastic_rounding=True is a stochastic quantizer, which no "
            "deterministic hardware reproduces; train with use_stochastic_rounding=False"
        )
    noise = getattr(quantizer, "qnoise_factor", 1.0)
    if noise is not None and float(_to_numpy(noise)) != 1.0:
        raise K2CError(
            f"{where}: qnoise_factor={float(_to_numpy(noise))} mixes the float value into the "
            "output (only 1.0 quantizes fully); use qnoise_factor=1.0"
        )


def data_format(layer: Any, role: str, quantizer: Any) -> FixedFormat:
    """The format of a quantizer the hardware applies to activations (a layer's activation
    quantizer, a QActivation): one format per tensor, or a clear error."""
    where = _where(layer, role, quantizer)
    kind = type(quantizer).__name__
    if kind not in ("quantized_bits", "quantized_relu") or not _is_qkeras(quantizer):
        raise K2CError(f"{where}: the quantizer {kind} has no fixed-point format; use quantized_bits or quantized_relu")
    _common_checks(where, quantizer)
    bits, integer = int(quantizer.bits), int(np.asarray(_to_numpy(quantizer.integer)).reshape(-1)[0])
    if np.asarray(_to_numpy(quantizer.integer)).size != 1:
        raise K2CError(f"{where}: integer={quantizer.integer} per element; one format per tensor is built")
    if kind == "quantized_bits":
        sign = int(bool(quantizer.keep_negative))
        if quantizer.alpha is not None and (
            isinstance(quantizer.alpha, str) or np.any(_to_numpy(quantizer.alpha) != 1)
        ):
            raise K2CError(
                f"{where}: alpha={quantizer.alpha!r} scales the activations by a value computed at run "
                "time (or a float); only alpha=None or 1 (plain fixed point) is built for activations"
            )
        if sign and quantizer.symmetric:
            raise K2CError(
                f"{where}: symmetric=1 on a signed quantizer excludes the most negative code, which no "
                "format's saturation does; use symmetric=0"
            )
        if bits - sign < 1:
            raise K2CError(f"{where}: {bits} bit with keep_negative makes a sign (binary) quantizer, not fixed point")
        frac = bits - sign - integer
    else:
        sign = 0
        if quantizer.use_sigmoid:
            raise K2CError(
                f"{where}: use_sigmoid={quantizer.use_sigmoid} applies a sigmoid first; use_sigmoid=0 is built"
            )
        if quantizer.negative_slope:
            raise K2CError(
                f"{where}: negative_slope={quantizer.negative_slope} (a leaky quantized relu) is not "
                "built; use negative_slope=0"
            )
        if quantizer.relu_upper_bound and not quantizer.is_quantized_clip:
            raise K2CError(
                f"{where}: relu_upper_bound={quantizer.relu_upper_bound} with is_quantized_clip=False "
                "caps outputs off the format's grid; use the format's own bound"
            )
        frac = bits - integer
    try:
        return make_format(sign, integer, frac, NEAREST_EVEN, SATURATE)
    except K2CError as exc:
        raise K2CError(f"{where}: {exc}") from None


def _grid(values: np.ndarray) -> int | None:
    """The fewest fraction bits (possibly negative) that hold every value exactly; None when
    no power-of-two grid within MAX_BITS does (a float scale)."""
    return grid_frac(values)


def constant_format(layer: Any, role: str, quantizer: Any, values: np.ndarray) -> FixedFormat:
    """The container of QKeras' quantized constant `values` (what its forward pass uses):
    signed, non-negative fields, the narrowest that holds every value exactly."""
    where = _where(layer, role, quantizer)
    _common_checks(where, quantizer)
    if type(quantizer).__name__ == "quantized_bits" and quantizer.alpha == "auto":
        raise K2CError(
            f"{where}: alpha='auto' scales each channel by a float, so the weights are not fixed "
            "point; use alpha='auto_po2' (power-of-two scales), 1 or None"
        )
    frac = _grid(values)
    if frac is None:
        raise K2CError(
            f"{where}: the quantized {role} values are not on one power-of-two grid of at most "
            f"{MAX_BITS} bits, so no format holds them exactly"
        )
    frac = max(frac, 0)
    top = int(np.max(np.abs(np.ldexp(values, frac)), initial=0))
    integer = max(max(top, 0).bit_length() - frac, 0)
    frac += max(0, MIN_HARDWARE_BITS - (1 + integer + frac))
    fmt = FixedFormat(1, integer, frac)
    if fmt.bits > MAX_BITS:
        raise K2CError(
            f"{where}: its values need {fmt.bits} bits ({fmt}), at most {MAX_BITS} supported, "
            "so it cannot be widened safely"
        )
    return fmt


# --- the layers -------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerQuant:
    """The formats of one QKeras compute layer: its constants' containers and, when its
    activation is a quantizer, its output format (None: the exact accumulator)."""

    name: str
    kernel: FixedFormat
    bias: FixedFormat | None
    output: FixedFormat | None
    source: str = ""  # the Keras layer a QActivation after it quantizes ("": an inner part of a layer)


def quantized(layer: Any, role: str, quantizer_name: str, variable: Any) -> np.ndarray:
    """A weight quantized by the layer's quantizer `quantizer_name` (e.g. "kernel_quantizer"),
    as QKeras' `call` computes it (float64, exact), or the error that a float weight is not
    fixed point."""
    import keras

    if not getattr(layer, quantizer_name):
        raise K2CError(
            f"QKeras layer '{layer.name}' ({type(layer).__name__}): {quantizer_name}=None "
            f"{'adds' if role == 'bias' else 'multiplies by'} the float {role}, which is not fixed point; give it a {quantizer_name} (e.g. quantized_bits(8, 0, alpha=1))"
        )
    internal = getattr(layer, f"{quantizer_name}_internal")
    return _to_numpy(internal(keras.ops.convert_to_tensor(variable)))


def quantized_bias(layer: Any) -> np.ndarray | None:
    """QKeras' quantized bias (None without one)."""
    return quantized(layer, "bias", "bias_quantizer", layer.bias) if layer.use_bias else None


def quantized_weights(layer: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """QKeras' own quantized kernel and bias, as its `call` computes them (float64, exact)."""
    return quantized(layer, "kernel", "kernel_quantizer", layer.kernel), quantized_bias(layer)


def _activation_parts(layer: Any) -> tuple[str, Any]:
    """(the Keras activation the record applies, the output quantizer or None)."""
    activation = getattr(layer, "activation", None)
    if _is_qkeras(activation):
        return "linear", activation
    name = _activation_name(activation)
    if name not in EXACT_ACTIVATIONS:
        raise K2CError(
            f"QKeras layer '{layer.name}' ({type(layer).__name__}) applies activation '{name}' in "
            "float32 without a quantizer, which no fixed-point hardware reproduces bit for bit; use "
            f"{' or '.join(EXACT_ACTIVATIONS)}, or a quantizer (quantized_bits, quantized_relu)"
        )
    return name, None


def layer_quant(layer: Any) -> LayerQuant:
    """All formats of one QKeras compute layer (refusing what cannot be built)."""
    kernel, bias = quantized_weights(layer)
    _, out_q = _activation_parts(layer)
    return LayerQuant(
        name=str(layer.name),
        kernel=constant_format(layer, "kernel_quantizer", layer.kernel_quantizer_internal, kernel),
        bias=None if bias is None else constant_format(layer, "bias_quantizer", layer.bias_quantizer_internal, bias),
        output=None if out_q is None else data_format(layer, "activation", out_q),
        source=str(layer.name),
    )


RecordQuants = Callable[[Any], dict[str, LayerQuant]]
_RECORD_QUANTS: dict[str, RecordQuants] = {}
"""QKeras class name -> the formats of the records its layers become, by record name."""


def register_quant(*class_names: str) -> Callable[[RecordQuants], RecordQuants]:
    """Register what reads the formats of a QKeras layer class's records (`format_config`)."""

    def decorate(function: RecordQuants) -> RecordQuants:
        for name in class_names:
            _RECORD_QUANTS[name] = function
        return function

    return decorate


@register_quant(*COMPUTE_CLASSES)
def _compute_quants(layer: Any) -> dict[str, LayerQuant]:
    return {str(layer.name): layer_quant(layer)}


def _quantizes(layer: Any) -> bool:
    """A QKeras layer whose records have formats of their own (`register_quant`)."""
    return _is_qkeras(layer) and type(layer).__name__ in _RECORD_QUANTS


def _twin(float_class: str):
    """A converter for a QKeras compute layer: its float twin's record (geometry and option
    checks, with the activation the record applies) carrying QKeras' quantized kernel and bias."""

    def convert(layer: Any, state: ConversionState) -> ir.Layer:
        import keras

        activation, _ = _activation_parts(layer)
        saved = layer.activation
        try:  # the twin reads a Keras activation; the quantizer is the output format instead
            layer.activation = keras.activations.get(activation)
            record = keras_converter(float_class)(layer, state)
        finally:
            layer.activation = saved
        layer_quant(layer)  # refuses bad settings now, naming the layer
        kernel, bias = quantized_weights(layer)
        old = record.kernel  # type: ignore[attr-defined]
        bias = np.zeros(old.shape[-1]) if bias is None else bias.reshape(-1)
        return dataclasses.replace(record, kernel=kernel.reshape(old.shape), bias=bias)

    convert.__doc__ = f"A QKeras layer computed as a Keras {float_class} with quantized weights."
    return convert


register_converter("QDense", module="qkeras.")(_twin("Dense"))
register_converter("QConv2D", module="qkeras.")(_twin("Conv2D"))
register_converter("QConv1D", module="qkeras.")(_twin("Conv1D"))


@register_converter("QActivation", module="qkeras.")
def _convert_qactivation(layer: Any, state: ConversionState) -> ir.Layer:
    """A QActivation passes its tensor on; its quantizer is the format of that tensor
    (`format_config` checks where it stands)."""
    data_format(layer, "activation", layer.activation)
    return ir.Identity(**state.common(layer, state.shape), source_class="QActivation")


# --- the whole model's formats ------------------------------------------------------------


FLOAT32_SIGNIFICAND = 24
"""Bits of float32's significand: a sum of at most this many bits is exact in float32."""


def check_float32_sum(record: ir.Layer, in_fmt: FixedFormat, quant: LayerQuant) -> None:
    """A QKeras batch normalization adds `x * inv` and its offset in float32: exact only
    while the sum has at most 24 significant bits (the other layers' float32 condition holds
    for the narrow formats QKeras trains; this one's constants come from float statistics)."""
    acc = accumulator_format(in_fmt, quant.kernel, 1, quant.bias)
    if acc.int + acc.frac > FLOAT32_SIGNIFICAND:
        raise K2CError(
            f"QKeras layer '{record.name}' (QBatchNormalization): x * inv + offset needs up to "
            f"{acc.int + acc.frac} bits ({in_fmt} times {quant.kernel}, plus {quant.bias}), more than "
            f"float32's {FLOAT32_SIGNIFICAND}, so QKeras rounds it; quantize gamma, beta, mean and variance "
            "(or inv) to fewer bits"
        )


def exact_result(record: ir.Layer, in_fmt: FixedFormat, weight: FixedFormat, bias: FixedFormat) -> FixedFormat:
    """The exact accumulator of a record with weights (a batch normalization: one product
    and the offset)."""
    home = kind_of(record.type)
    assert home is not None
    n_in = 1 if isinstance(record, BatchNorm) else home.window(record.input_shapes[0], home.plan_params(record))
    return accumulator_format(in_fmt, weight, n_in, bias)


def is_qkeras_model(model: Any) -> bool:
    """Whether a Keras model holds QKeras layers (its formats then come from the model)."""
    return any(_is_qkeras(layer) for layer in getattr(model, "layers", []))


def _producer(layer: Any) -> Any:
    """The Keras layer whose output a single-input layer reads."""
    node = layer._inbound_nodes[0]
    tensors = node.input_tensors if hasattr(node, "input_tensors") else node.arguments.keras_tensors
    return tensors[0]._keras_history[0]


def _keeps_format(record: ir.Layer) -> bool:
    """A record whose outputs are some of its input's values (`Kind.selects_values`: moved,
    or the maximum of a window, exact in float32 too), so in the input's format."""
    home = kind_of(record.type)
    return home is not None and home.selects_values


def format_config(model: Any, graph: Graph, input_format: FixedFormat | None = None) -> Any:
    """The formats of a QKeras model's graph as a `FormatConfig`.

    Input: a QActivation that is the model's first operation states it; else `input_format`
    (the user's `--input-format`: QKeras' own forward pass then equals the hardware on
    inputs on that grid); else an error. Each compute layer: weight and bias formats hold
    its quantized constants; its output format is its activation quantizer, or the
    QActivation that alone reads it, or else the exact accumulator (QKeras passes the float32
    sum on unquantized). A QActivation anywhere else would be a second requantization of a
    tensor that has a format already: refused."""
    refuse_folded_forward(model, graph, "a QKeras layer", "take that layer's weights off their quantized grid")
    quants: dict[str, LayerQuant] = {}
    for layer in model.layers:
        if _quantizes(layer):
            quants.update(_RECORD_QUANTS[type(layer).__name__](layer))
    fused: dict[str, FixedFormat] = {}  # compute layer -> the QActivation format after it
    in_fmt = None
    for layer in model.layers:
        if type(layer).__name__ != "QActivation" or not _is_qkeras(layer):
            continue
        fmt = data_format(layer, "activation", layer.activation)
        source = _producer(layer)
        readers = [
            r for r in model.layers if r._inbound_nodes and type(r).__name__ != "InputLayer" and _producer(r) is source
        ]
        if type(source).__name__ == "InputLayer":
            if len(readers) != 1:
                raise K2CError(
                    f"QActivation '{layer.name}' quantizes the network input, which other layers read "
                    "unquantized too; one tensor needs one format"
                )
            if input_format is not None and input_format != fmt:
                raise K2CError(
                    f"QActivation '{layer.name}' states the input format {fmt}; do not give another "
                    f"input format ({input_format})"
                )
            in_fmt = fmt
            continue
        reason = None
        if not _quantizes(source):
            reason = f"it reads '{source.name}' ({type(source).__name__}), not the output of a QKeras layer"
        elif _activation_parts(source)[1] is not None:
            reason = f"'{source.name}' quantizes its output already (activation {_activation_parts(source)[1]})"
        elif len(readers) != 1:
            reason = f"other layers read '{source.name}' unquantized too"
        if reason is not None:
            raise K2CError(
                f"QActivation '{layer.name}' is a standalone requantization, which is not built: "
                f"{reason}; put the quantizer on the layer (activation=...) or right after it"
            )
        if _activation_name(getattr(source, "activation", None)) != "linear":
            raise K2CError(
                f"QActivation '{layer.name}' quantizes the output of '{source.name}' after its float "
                f"activation '{_activation_name(getattr(source, 'activation', None))}'; use activation=None there and "
                "quantized_relu in the QActivation"
            )
        fused[str(source.name)] = fmt
    if in_fmt is None:
        in_fmt = input_format
    if in_fmt is None:
        raise K2CError(
            "the QKeras model does not quantize its input (QKeras layers multiply whatever comes in); "
            "make its first layer a QActivation(quantized_bits(...)) or give --input-format"
        )

    layers: dict[str, LayerFormats] = {}
    fmts: dict[str, FixedFormat] = {graph.input_name: in_fmt}
    for record in graph.layers:
        source = fmts[record.inputs[0]] if record.inputs else in_fmt
        if _keeps_format(record):
            fmts[record.name] = source
            continue
        q = quants.get(record.name)
        if q is None:
            raise K2CError(
                f"layer '{record.name}' ({record.keras_class}) is not a QKeras layer; a QKeras model must "
                f"quantize every compute layer ({', '.join(sorted(_RECORD_QUANTS))}), with only QActivations "
                "and layers that move values (Flatten, Reshape, max pooling, padding, cropping, upsampling) "
                "between them"
            )
        bias = q.bias if q.bias is not None else q.kernel
        if isinstance(record, BatchNorm):
            check_float32_sum(record, source, replace(q, bias=bias))
        out = q.output or fused.get(q.source)
        if out is None:  # QKeras passes the float32 result on: the exact accumulator
            out = exact_result(record, source, q.kernel, bias)
        layers[record.name] = LayerFormats(weight=q.kernel, bias=bias, output=out)
        fmts[record.name] = out
    return FormatConfig(default=None, input=in_fmt, layers=layers)
