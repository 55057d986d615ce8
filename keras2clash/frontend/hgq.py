"""Quantization-aware models built with HGQ2 (the `hgq` package, Keras 3): their layers as IR
records and their quantizers as formats, per tensor or per element (docs/guide/quantization-aware.md
has the semantics this module relies on, with references into HGQ2's source).

An HGQ2 layer (QDense, QConv1D/2D, QEinsumDense, QBatchNormDense) quantizes its *input* with
its input quantizer `iq`, multiplies by its quantized kernel (`kq`) and adds its quantized
bias (`bq`) in float32, applies its Keras activation in float32, and (only when
`enable_oq=True`, off by default) quantizes its output with `oq`. A layer's result is
therefore quantized by the *next* layer's `iq`; the last layer's result is the exact
accumulator. The formats come from the model, never from `--format`. HGQ2's pooling, merge
and batch-normalization layers quantize their inputs the same way (`frontend.hgq_layers`
registers them with `register_quant`); a standalone `Quantizer` layer sets the format of
the tensor it quantizes (`standalone_quantizers`).

Each quantizer states, per element of its bit-width array (per tensor, per channel or per
element), `k` (keep negative: a sign bit), `i` (integer bits, sign excluded) and `f`
(fraction bits), a rounding mode and an overflow mode. `TensorFormat` is that statement for
one tensor; the widening rule makes one format of a heterogeneous statement:
- constants (kernel, bias): HGQ2's own quantized values are kept, and the format is the
  narrowest one that holds every value exactly (signed if any value is negative): exact by
  construction, and never wider than the widest element (max i, max f) of the quantizer,
  except for a WRAP weight quantizer, which HGQ2 only rounds (the values set the integer bits);
- data (the quantizers the hardware applies to activations): a heterogeneous input quantizer
  rounds and wraps or saturates each element at its own position, which one wider format would
  not compute: it becomes a `Quantize` record before the layer (`kinds.quantize`: each element
  rounded once from the exact value, held in the container of every element's format), and
  the layer before it passes its exact accumulator on. An output quantizer is built per
  tensor only.
`to_fixed_format` is the one place that turns a `TensorFormat` into the compiler's
`FixedFormat` (and refuses, naming the layer and the setting, what no format computes).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.frontend.registry import (
    ConversionState,
    _activation_name,
    _single_input,
    _to_numpy,
    keras_converter,
    register_converter,
)
from keras2clash.frontend.walk import refuse_folded_forward
from keras2clash.hw.plan import LayerFormats, accumulator_format
from keras2clash.ir import layers as ir
from keras2clash.ir.graph import Graph
from keras2clash.kinds import kind_of
from keras2clash.kinds.activation import Activation
from keras2clash.kinds.batchnorm import BatchNorm
from keras2clash.kinds.merge import Merge
from keras2clash.kinds.quantize import Quantize, check_input, format_text, input_format
from keras2clash.kinds.quantize import element_formats as element_formats_of
from keras2clash.quant.formats import MAX_BITS, MIN_HARDWARE_BITS, FixedFormat, grid_frac, make_format
from keras2clash.quant.layerformats import FormatConfig

ROUND_MODES: dict[str, str] = {
    "RND": "round to nearest, ties toward +infinity: floor(x 2^f + 1/2)",
    "TRN": "truncate toward -infinity: floor(x 2^f)",
    "RND_CONV": "round to nearest, ties to even",
    "TRN_ZERO": "truncate toward zero",
    "RND_ZERO": "round to nearest, ties toward zero",
    "RND_MIN_INF": "round to nearest, ties toward -infinity",
    "RND_INF": "round to nearest, ties away from zero",
}
"""HGQ2's deterministic rounding modes (quantizers.fixed_point._fixed_point_ops)."""

OVERFLOW_MODES = ("SAT", "SAT_SYM", "WRAP")
"""Overflow modes a format can state (WRAP_SM, a reflecting wrap, cannot be built)."""

ROLES = ("input", "kernel", "bias", "output")
GRANULARITIES = ("tensor", "channel", "element")


@dataclass(frozen=True)
class TensorFormat:
    """What an HGQ2 quantizer states for one tensor, as one format.

    `int_bits` excludes the sign bit (HGQ2's `i`): the range is `[-keep_negative * 2^int_bits,
    2^int_bits - 2^-frac_bits]` (SAT_SYM: the lower end is `-(2^int_bits - 2^-frac_bits)`),
    `keep_negative + int_bits + frac_bits` bits in all. Either of `int_bits` and `frac_bits`
    may be negative (a value below 1/4 has `int_bits <= -2`; a multiple of 4, `frac_bits <= -2`).
    `granularity` is that of the quantizer's bit-width array; `widened` says the elements
    stated different formats and this one is the widest (constants only)."""

    layer: str
    role: str  # one of ROLES
    keep_negative: bool
    int_bits: int
    frac_bits: int
    round_mode: str  # a key of ROUND_MODES
    overflow_mode: str  # one of OVERFLOW_MODES
    granularity: str = "tensor"  # one of GRANULARITIES
    widened: bool = False
    stochastic: bool = False  # stated S_RND / S_RND_CONV: deterministic at inference (docs/guide/quantization-aware.md)

    @property
    def bits(self) -> int:
        return int(self.keep_negative) + self.int_bits + self.frac_bits

    @property
    def is_constant(self) -> bool:
        return self.role in ("kernel", "bias")

    def describe(self) -> str:
        sign = "signed" if self.keep_negative else "unsigned"
        return (
            f"{sign}, {self.int_bits} integer and {self.frac_bits} fraction bits, "
            f"{self.round_mode}, {self.overflow_mode}"
        )


@dataclass(frozen=True)
class LayerQuant:
    """The formats of one HGQ2 layer's quantized tensors (None where it does not quantize)."""

    name: str
    input: TensorFormat | None
    kernel: TensorFormat | None
    bias: TensorFormat | None
    output: TensorFormat | None
    activation: str = "linear"
    inputs: tuple[TensorFormat | None, ...] = ()  # a merge's input quantizers, one per input

    def input_at(self, position: int) -> TensorFormat | None:
        """The input quantizer of the layer's input `position` (a merge has one per input)."""
        return self.inputs[position] if self.inputs else self.input


# --- reading one quantizer --------------------------------------------------------------


@dataclass(frozen=True)
class _Stated:
    """A quantizer's statement per element of its bit-width array (numpy arrays of one shape)."""

    k: np.ndarray
    i: np.ndarray  # the effective integer bits, max(i, -f) (HGQ2 clamps them so)
    f: np.ndarray
    live: np.ndarray  # k + i + f > 0 (HGQ2 outputs 0 where it is not: a pruned element)
    round_mode: str
    overflow_mode: str
    stochastic: bool
    granularity: str
    is_weight: bool


def _granularity(shape: tuple[int, ...]) -> str:
    sizes = [d for d in shape if d > 1]
    if not sizes:
        return "tensor"
    return "channel" if len(sizes) == 1 and shape[-1] > 1 else "element"


def _state(layer: Any, role: str, quantizer: Any) -> _Stated:
    """Read a `hgq.quantizer.Quantizer`'s settings, refusing what no fixed-point format states."""
    where = f"HGQ2 layer '{layer.name}' ({type(layer).__name__}), {role} quantizer"
    config = quantizer.config
    if config.q_type not in ("kif", "kbi"):
        raise K2CError(
            f"{where}: q_type '{config.q_type}' is not a fixed-point quantizer "
            "(a minifloat or dummy quantizer has no fixed-point format); use 'kif' or 'kbi'"
        )
    for setting in ("scaler", "affine"):
        if getattr(config, setting, None) is not None:
            raise K2CError(
                f"{where}: {setting}={getattr(config, setting)!r} (a scaled fixed-point "
                "value) is not supported; use a quantizer without scaler or affine"
            )
    internal = quantizer.quantizer
    round_mode, overflow_mode = str(internal.round_mode).upper(), str(internal.overflow_mode).upper()
    stochastic = round_mode.startswith("S_")
    base_round = round_mode[2:] if stochastic else round_mode
    if base_round not in ROUND_MODES:
        raise K2CError(
            f"{where}: round_mode '{round_mode}' is not supported; HGQ2's modes are "
            f"{', '.join(ROUND_MODES)} (and S_ variants)"
        )
    if overflow_mode not in OVERFLOW_MODES:
        raise K2CError(
            f"{where}: overflow_mode '{overflow_mode}' cannot be built (a reflecting wrap); "
            f"use one of {', '.join(OVERFLOW_MODES)}"
        )
    k, i, f = (np.asarray(_to_numpy(v)) for v in internal.kif)
    shape = np.broadcast_shapes(k.shape, i.shape, f.shape)
    k, i, f = (np.broadcast_to(a, shape).astype(np.int64) for a in (k, i, f))
    return _Stated(
        k=k,
        i=np.maximum(i, -f),
        f=f,
        live=(k + i + f) > 0,
        round_mode=base_round,
        overflow_mode=overflow_mode,
        stochastic=stochastic,
        granularity=_granularity(shape),
        is_weight=bool(getattr(internal, "_is_weight", False)),
    )


def _triples(stated: _Stated, live_only: bool = False) -> set[tuple[int, int, int]]:
    return {
        (int(k), int(i), int(f))
        for k, i, f, alive in zip(stated.k.flat, stated.i.flat, stated.f.flat, stated.live.flat)
        if alive or not live_only
    }


def heterogeneous(layer: Any, quantizer: Any) -> bool:
    """Whether a data quantizer states more than one (k, i, f), or an element of no bits."""
    stated = _state(layer, "input", quantizer)
    return len(_triples(stated)) > 1 or not stated.live.all()


def data_format(layer: Any, role: str, quantizer: Any, elements: bool = False) -> TensorFormat:
    """The format of a quantizer the hardware applies (an input or output quantizer): one
    (k, i, f) for the whole tensor, or a clear error. With `elements` (an input quantizer,
    built per element: `element_formats`) a heterogeneous one gives the container that holds
    every element (signed if any element is, the most integer and fraction bits of a live
    element)."""
    stated = _state(layer, role, quantizer)
    where = f"HGQ2 layer '{layer.name}' ({type(layer).__name__}), {role} quantizer"
    triples = _triples(stated)
    if elements and (len(triples) > 1 or not stated.live.all()):
        live = _triples(stated, live_only=True)
        if not live:
            raise K2CError(f"{where}: every element has no bits (k + i + f <= 0): the layer reads only zeros")
        return TensorFormat(
            layer=str(layer.name),
            role=role,
            keep_negative=any(t[0] for t in live),
            int_bits=max(t[1] for t in live),
            frac_bits=max(t[2] for t in live),
            round_mode=stated.round_mode,
            overflow_mode=stated.overflow_mode,
            granularity=stated.granularity,
            widened=True,
            stochastic=stated.stochastic,
        )
    if not stated.live.all():
        dead = int((~stated.live).sum())
        raise K2CError(
            f"{where}: {dead} of {stated.live.size} elements have no bits (k + i + f <= 0: "
            "HGQ2 outputs 0 there); a pruned output quantizer cannot be built per tensor"
        )
    if len(triples) > 1:
        ks, is_, fs = (sorted({t[n] for t in triples}) for n in range(3))
        raise K2CError(
            f"{where} is heterogeneous ({stated.granularity} granularity: k in {ks}, i in {is_}, f in "
            f"{fs}); an output quantizer is built per tensor only: disable it (enable_oq=False) and "
            "let the next layer's input quantizer, built per element, quantize the tensor"
        )
    ((k, i, f),) = triples
    return TensorFormat(
        layer=str(layer.name),
        role=role,
        keep_negative=bool(k),
        int_bits=i,
        frac_bits=f,
        round_mode=stated.round_mode,
        overflow_mode=stated.overflow_mode,
        granularity=stated.granularity,
        stochastic=stated.stochastic,
    )


def element_formats(
    layer: Any, role: str, quantizer: Any, keras_shape: tuple[int, ...]
) -> tuple[tuple[FixedFormat, ...], np.ndarray]:
    """A heterogeneous data quantizer per element of a tensor of `keras_shape` (no batch axis):
    its distinct formats (each through `to_fixed_format`) and, row-major, the index of each
    element's format (-1: an element of no bits, which HGQ2 outputs as 0)."""
    stated = _state(layer, role, quantizer)
    full = (1, *keras_shape)
    try:
        k, i, f, live = (np.broadcast_to(a, full).reshape(-1) for a in (stated.k, stated.i, stated.f, stated.live))
    except ValueError:  # pragma: no cover - HGQ2 builds the bit-widths to broadcast so
        raise K2CError(
            f"HGQ2 layer '{layer.name}', {role} quantizer: bit-widths of shape {stated.k.shape} do not "
            f"broadcast to its input {keras_shape}"
        ) from None
    triples = sorted(_triples(stated, live_only=True))
    formats = tuple(
        to_fixed_format(
            TensorFormat(
                layer=str(layer.name),
                role=role,
                keep_negative=bool(t[0]),
                int_bits=t[1],
                frac_bits=t[2],
                round_mode=stated.round_mode,
                overflow_mode=stated.overflow_mode,
                stochastic=stated.stochastic,
            )
        )
        for t in triples
    )
    position = {t: n for n, t in enumerate(triples)}
    index = np.array(
        [position[(int(a), int(b), int(c))] if alive else -1 for a, b, c, alive in zip(k, i, f, live)],
        dtype=np.int64,
    )
    return formats, index


def _frac_needed(values: np.ndarray, most: int) -> int:
    """The fewest fraction bits (possibly negative) that hold every value exactly."""
    frac = grid_frac(values, most)
    if frac is None:  # pragma: no cover - an HGQ2 bug
        raise AssertionError(f"quantized values are not multiples of 2^-{most}")
    return frac


def _int_needed(values: np.ndarray, frac: int, signed: bool) -> int:
    """The fewest integer bits (sign excluded, possibly negative) whose range holds every value."""
    if values.size == 0 or not np.any(values):
        return -frac  # zero bits beyond the sign
    raw = np.ldexp(values, frac).astype(np.int64)
    top = int(raw.max(initial=0))
    bottom = int(-raw.min(initial=0)) - 1 if signed else 0  # -2^n needs n bits, like 2^n - 1
    return max(top, bottom, 0).bit_length() - frac


def constant_format(layer: Any, role: str, quantizer: Any, values: np.ndarray) -> TensorFormat:
    """The format of a quantized constant (`values`, HGQ2's own `qkernel`/`qbias`): the
    narrowest that holds every value exactly."""
    stated = _state(layer, role, quantizer)
    values = np.asarray(values, dtype=np.float64)
    live_f = stated.f[stated.live]
    most_f = int(live_f.max()) if live_f.size else 0
    frac = _frac_needed(values, most_f)
    signed = bool(np.any(values < 0))
    triples = {
        (int(k), int(i), int(f))
        for k, i, f, alive in zip(stated.k.flat, stated.i.flat, stated.f.flat, stated.live.flat)
        if alive
    }
    return TensorFormat(
        layer=str(layer.name),
        role=role,
        keep_negative=signed,
        int_bits=_int_needed(values, frac, signed),
        frac_bits=frac,
        round_mode=stated.round_mode,
        overflow_mode=stated.overflow_mode,
        granularity=stated.granularity,
        widened=len(triples) > 1 or not stated.live.all(),
        stochastic=stated.stochastic,
    )


# --- the one conversion to the compiler's format ------------------------------------------


#: HGQ2 modes a data format computes exactly, as the compiler's (docs/guide/contract.md, Formats).
BUILT_ROUNDING = {"RND": "nearest", "RND_CONV": "nearest_even", "TRN": "truncate"}
BUILT_OVERFLOW = {"SAT": "saturate", "WRAP": "wrap"}


def to_fixed_format(record: TensorFormat) -> FixedFormat:
    """THE place where an HGQ2 format becomes a `FixedFormat`.

    A data format (an input or output quantizer, which the hardware applies) becomes the
    same format: `k` -> sign (0: unsigned), `i` -> int (both count the integer bits without
    the sign), `f` -> frac (either may be negative), RND -> nearest (ties toward +inf, HGQ2's
    `floor(x 2^f + 1/2)`), RND_CONV (and S_RND_CONV, deterministic at inference) ->
    nearest_even (ties to even), TRN -> truncate (floor), SAT -> saturate, WRAP -> wrap (both
    two's complement on `k + i + f` bits). SAT_SYM equals SAT on an unsigned format (its
    lower bound is 0 either way) and is built so; signed, it excludes the most negative code
    (no FixedFormat mode does), and the other rounding modes (TRN_ZERO, RND_ZERO,
    RND_MIN_INF, RND_INF) round ties or negative values otherwise: both
    are refused with the layer and the setting named. A constant (kernel, bias) only needs
    a container that holds HGQ2's own quantized values, so it is widened to a signed format
    with non-negative fields (exact: the values are kept, never re-rounded)."""
    where = f"HGQ2 layer '{record.layer}', {record.role} quantizer ({record.describe()})"
    if record.is_constant:
        integer, frac = max(record.int_bits, 0), max(record.frac_bits, 0)
        frac += max(0, MIN_HARDWARE_BITS - (1 + integer + frac))
        fmt = FixedFormat(1, integer, frac)
        if fmt.bits > MAX_BITS:
            raise K2CError(f"{where}: {fmt.bits} bits, at most {MAX_BITS} supported")
        return fmt
    overflow_mode = record.overflow_mode
    if overflow_mode == "SAT_SYM" and not record.keep_negative:
        overflow_mode = "SAT"  # [0, 2^i - 2^-f] either way
    unsupported = []
    if record.round_mode not in BUILT_ROUNDING:
        unsupported.append(f"round_mode {record.round_mode} (built: {', '.join(BUILT_ROUNDING)})")
    if overflow_mode not in BUILT_OVERFLOW:
        unsupported.append(
            f"overflow_mode {overflow_mode} on a signed format (built: {', '.join(BUILT_OVERFLOW)}; "
            "SAT_SYM only when unsigned)"
        )
    if unsupported:
        raise K2CError(
            f"{where}: cannot be built exactly: {'; '.join(unsupported)}; train the model with "
            "round_mode='RND', 'RND_CONV' or 'TRN' and overflow_mode='SAT' or 'WRAP' on this quantizer"
        )
    try:
        return make_format(
            int(record.keep_negative),
            record.int_bits,
            record.frac_bits,
            BUILT_ROUNDING[record.round_mode],
            BUILT_OVERFLOW[overflow_mode],
        )
    except K2CError as exc:
        raise K2CError(f"{where}: {exc}") from None


# --- the layers -------------------------------------------------------------------------

#: Keras activations an HGQ2 layer may apply in float32 before the next quantizer and still be
#: computed exactly by the hardware (piecewise linear with integer slopes: exact in float32).
EXACT_ACTIVATIONS = ("linear", "relu")


def _check_layer(layer: Any, record: ir.Layer) -> None:
    activation = getattr(record, "activation", "linear")
    if activation not in EXACT_ACTIVATIONS:
        raise K2CError(
            f"HGQ2 layer '{layer.name}' ({type(layer).__name__}) applies activation '{activation}' "
            "in float32 between its accumulator and the next quantizer, which no fixed-point "
            f"hardware reproduces bit for bit; use {' or '.join(EXACT_ACTIVATIONS)}"
        )
    if not layer.enable_iq:
        raise K2CError(
            f"HGQ2 layer '{layer.name}' ({type(layer).__name__}) has enable_iq=False: its "
            "input is not quantized by the layer; keep the input quantizer"
        )


def layer_quant(
    layer: Any,
    kernel: np.ndarray | None,
    bias: np.ndarray | None,
    activation: str = "linear",
    elements: bool = False,
) -> LayerQuant:
    """All formats of one HGQ2 layer (its quantized `kernel` and `bias` as HGQ2 computes them).
    `elements`: its converter builds a heterogeneous input quantizer per element
    (`_quantized_input`), so its input format is that quantizer's container; else such a
    quantizer is refused."""
    bq = getattr(layer, "bq", None)
    return LayerQuant(
        name=str(layer.name),
        input=data_format(layer, "input", layer.iq, elements=elements) if layer.enable_iq else None,
        kernel=constant_format(layer, "kernel", layer.kq, kernel) if kernel is not None else None,
        bias=constant_format(layer, "bias", bq, bias) if bias is not None and bq is not None else None,
        output=data_format(layer, "output", layer.oq) if layer.enable_oq else None,
        activation=activation,
    )


def quantized_weights(layer: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """HGQ2's own quantized kernel and bias (inference mode), as float64 (exact: float32 values)."""
    kernel = _to_numpy(layer.qkernel)
    qbias = layer.qbias
    return kernel, (None if qbias is None else _to_numpy(qbias))


def _with_quantized_weights(layer: Any, record: ir.Layer) -> ir.Layer:
    kernel, bias = quantized_weights(layer)
    old = record.kernel  # type: ignore[attr-defined]
    if kernel.size != old.size:  # pragma: no cover - would be a frontend bug
        raise K2CError(f"HGQ2 layer '{layer.name}': quantized kernel {kernel.shape} does not match {old.shape}")
    bias = np.zeros(old.shape[-1]) if bias is None else bias.reshape(-1)
    return dataclasses.replace(record, kernel=kernel.reshape(old.shape), bias=bias)


def _quantized_input(layer: Any, state: ConversionState, record: ir.Layer) -> ir.Layer | tuple[ir.Layer, ...]:
    """The record alone, or, when its input quantizer is heterogeneous, a `Quantize` record of
    that quantizer per element (`kinds.quantize`, named `<layer>_iq`) and the record reading it."""
    if not heterogeneous(layer, layer.iq):
        return record
    keras_shape = tuple(int(d) for d in state.keras_shapes[0])
    formats, index = element_formats(layer, "input", layer.iq, keras_shape)
    quantizer = Quantize(
        **{**state.common(layer, state.shape), "name": f"{layer.name}_iq"},
        formats=tuple(format_text(f) for f in formats),
        index=index.reshape(state.shape).astype(np.float64),
        source=str(layer.name),
    )
    return quantizer, dataclasses.replace(record, inputs=(quantizer.name,))


def _quantized_twin(float_class: str):
    """A converter for an HGQ2 layer: its float twin's record (geometry and option checks)
    with HGQ2's quantized kernel and bias; the quantizers are checked too."""

    def convert(layer: Any, state: ConversionState) -> ir.Layer | tuple[ir.Layer, ...]:
        record = _with_quantized_weights(layer, keras_converter(float_class)(layer, state))
        _check_layer(layer, record)
        kernel, bias = quantized_weights(layer)
        layer_quant(layer, kernel, bias, getattr(record, "activation", "linear"), elements=True)  # refuses bad settings
        return _quantized_input(layer, state, record)

    convert.__doc__ = f"An HGQ2 layer computed as a Keras {float_class} with quantized weights."
    return convert


register_converter("QDense", "QBatchNormDense", module="hgq.")(_quantized_twin("Dense"))
register_converter("QConv2D", module="hgq.")(_quantized_twin("Conv2D"))
register_converter("QConv1D", module="hgq.")(_quantized_twin("Conv1D"))

# a QEinsumDense whose equation is a Dense on the last axis (`kinds.dense.dense_equation`)
register_converter("QEinsumDense", module="hgq.")(_quantized_twin("EinsumDense"))


def is_hgq_model(model: Any) -> bool:
    """Whether a Keras model holds HGQ2 layers (its formats then come from the model)."""
    return any(type(layer).__module__.startswith("hgq.") for layer in _all_layers(model))


def _all_layers(model: Any) -> list[Any]:
    out = []
    for layer in getattr(model, "layers", []):
        out.extend(_all_layers(layer) if hasattr(layer, "layers") and not hasattr(layer, "iq") else [layer])
    return out


LayerQuantReader = Callable[[Any], "LayerQuant | tuple[LayerQuant, ...]"]
_QUANT_READERS: dict[str, LayerQuantReader] = {}
"""HGQ2 class name -> what reads the formats of one of its layers (`register_quant`): one
`LayerQuant`, or one per record for a layer that becomes several (QMultiHeadAttention)."""


def register_quant(*class_names: str) -> Callable[[LayerQuantReader], LayerQuantReader]:
    """Register the reader of an HGQ2 layer class's formats: the layers `format_config` treats
    as quantizing (each quantizes its input(s) with its own quantizer)."""

    def decorate(function: LayerQuantReader) -> LayerQuantReader:
        for name in class_names:
            _QUANT_READERS[name] = function
        return function

    return decorate


@register_quant("QDense", "QBatchNormDense", "QConv1D", "QConv2D", "QEinsumDense")
def _compute_layer_quant(layer: Any) -> LayerQuant:
    kernel, bias = quantized_weights(layer)
    return layer_quant(layer, kernel, bias, _activation_name(layer.activation), elements=True)


def model_quant(model: Any) -> dict[str, LayerQuant]:
    """Every quantizing HGQ2 layer's formats, by layer name, in model order."""
    result: dict[str, LayerQuant] = {}
    for layer in _all_layers(model):
        reader = _QUANT_READERS.get(type(layer).__name__)
        if reader is not None and type(layer).__module__.startswith("hgq."):
            read = reader(layer)
            for quant in read if isinstance(read, tuple) else (read,):
                result[quant.name] = quant  # the name of the record that quantizes
    return result


# --- the whole model's formats ------------------------------------------------------------


def _transparent(record: ir.Layer) -> bool:
    """A record whose outputs are some of its input's values, or zeros (`Kind.selects_values`:
    regrouped, moved, repeated, cropped, padded, a window's maximum): a quantizer after it
    sees values of its input, so the producer may requantize to that quantizer's format
    instead. A maximum commutes only with a monotone quantizer (`_monotone_only`)."""
    home = kind_of(record.type)
    return home is not None and home.selects_values


def _monotone_only(record: ir.Layer) -> bool:
    """A ReLU, or a record that compares values (`Kind.compares`: max pooling): max(q(a), q(b))
    = q(max(a, b)) for a rounding and saturating quantizer q, not for a wrapping one."""
    home = kind_of(record.type)
    relu = isinstance(record, Activation) and record.activation == "relu"
    return relu or (home is not None and home.compares)


@register_converter("Quantizer", module="hgq.")
def _convert_quantizer(layer: Any, state: ConversionState) -> ir.Layer:
    """HGQ2's standalone quantizer passes its tensor on; its format is the format of that
    tensor (`standalone_quantizers`)."""
    _single_input(layer, state)
    data_format(layer, "quantizer", layer)
    return ir.Identity(**state.common(layer, state.shape), source_class="Quantizer")


def standalone_quantizers(model: Any, graph: Graph) -> dict[str, TensorFormat]:
    """The formats HGQ2's standalone `Quantizer` layers give the tensors they quantize, by the
    graph name of that tensor (the network input, or the layer that computes it). The layer
    itself is gone from the graph (an identity); it must be the only reader of its tensor,
    which is then quantized for everyone after it."""
    pinned: dict[str, TensorFormat] = {}
    layers = _all_layers(model)
    for layer in layers:
        if type(layer).__name__ != "Quantizer" or not type(layer).__module__.startswith("hgq."):
            continue
        source = _producer(layer)
        readers = [other for other in layers if other is not layer and source in _sources(other)]
        tensor = graph.input_name if type(source).__name__ == "InputLayer" else str(source.name)
        if readers or (tensor != graph.input_name and tensor not in {r.name for r in graph.layers}):
            raise K2CError(
                f"HGQ2 Quantizer layer '{layer.name}' quantizes the output of '{source.name}' "
                f"({type(source).__name__}), which "
                + ("other layers read unquantized too" if readers else "is not a layer of the built graph")
                + "; one tensor needs one format: quantize it for all its readers, right after an HGQ2 layer"
            )
        pinned[tensor] = data_format(layer, "quantizer", layer)
    return pinned


def _sources(layer: Any) -> list[Any]:
    """The Keras layers whose outputs `layer` reads (its first call)."""
    if not layer._inbound_nodes:
        return []
    node = layer._inbound_nodes[0]
    tensors = node.input_tensors if hasattr(node, "input_tensors") else node.arguments.keras_tensors
    return [tensor._keras_history[0] for tensor in tensors]


def _producer(layer: Any) -> Any:
    (source,) = _sources(layer)
    return source


def _holds(inner: FixedFormat, outer: FixedFormat) -> bool:
    """Every value of `inner` is a value of `outer`: quantizing to `outer` changes none of them."""
    if outer.frac < inner.frac:
        return False
    two = Fraction(2)
    low = -inner.sign * two**inner.int
    high = two**inner.int - two**-inner.frac
    return -outer.sign * two**outer.int <= low and high <= two**outer.int - two**-outer.frac


def _exact_merge(op: str, fmts: list[FixedFormat]) -> FixedFormat:
    """A container that holds every exact result of a merge of values of `fmts`."""
    fmts = [f.container for f in fmts]
    widest = max(f.sign + f.int for f in fmts)
    if op == "multiply":
        return FixedFormat(1, sum(f.sign + f.int for f in fmts), sum(f.frac for f in fmts))
    guard = {"add": math.ceil(math.log2(len(fmts))), "subtract": 1}.get(op, 0)
    return FixedFormat(1, widest + guard, max(f.frac for f in fmts))


def _exact_output(
    record: ir.Layer, in_fmts: list[FixedFormat], weight: FixedFormat | None, bias: FixedFormat | None
) -> FixedFormat:
    """The network output of a quantizing record without a quantizer after it: its exact
    result, as HGQ2 leaves it (a merge's exact value; a layer's exact accumulator)."""
    if isinstance(record, Merge):
        return _exact_merge(record.op, in_fmts)
    assert weight is not None
    home = kind_of(record.type)
    assert home is not None
    n_in = 1 if isinstance(record, BatchNorm) else home.window(record.input_shapes[0], home.plan_params(record))
    return accumulator_format(in_fmts[0], weight, n_in, bias)


def format_config(model: Any, graph: Graph) -> Any:
    """The formats of an HGQ2 model's graph (after the passes) as a `FormatConfig`: the input
    format is the input quantizer of the layer(s) that read it; each layer's weight and bias
    formats hold its quantized constants; its output format is its own output quantizer,
    else the input quantizer of the layer(s) that read it (through Flatten/Reshape and a
    ReLU, which commutes with a saturating quantizer; a ReLU fused into the layer acts
    before a wrapping one, `hw.plan.relu_before_requantize`), else (the network output) its
    exact result, as HGQ2 leaves it. A layer that keeps its input's values (a max pooling)
    passes its input quantizer's format on: a quantizer after it must keep those values.
    Everything goes through `to_fixed_format`."""
    quant = model_quant(model)
    refuse_folded_forward(model, graph, "an HGQ2 layer", "skip that layer's input quantizer")
    pinned = standalone_quantizers(model, graph)
    for tensor, fmt in pinned.items():
        if tensor != graph.input_name and tensor not in quant:
            raise K2CError(
                f"HGQ2 Quantizer layer '{fmt.layer}' quantizes the output of '{tensor}' "
                f"({graph[tensor].keras_class}), which is not an HGQ2 layer; put it right after an HGQ2 "
                "layer or at the network input"
            )

    monotone_read: dict[str, ir.Layer] = {}  # tensor -> a ReLU or max pooling that reads it

    def readers(tensor: str, source: str | None = None) -> list[tuple[ir.Layer, int]]:
        """The quantizing records that read `tensor` (with the input position they read it
        at), through transparent ones and ReLUs."""
        found: list[tuple[ir.Layer, int]] = []
        for record in graph.consumers(tensor):
            if isinstance(record, Quantize):
                found.append((record, 0))
            elif record.name in quant:
                found.extend((record, i) for i, name in enumerate(record.inputs) if name == tensor)
            elif _transparent(record) or _monotone_only(record):
                if _monotone_only(record):
                    monotone_read.setdefault(source or tensor, record)
                found.extend(readers(record.name, source or tensor))
            else:
                raise K2CError(
                    f"layer '{record.name}' ({record.keras_class}) reads a tensor of HGQ2 layers; only "
                    "HGQ2 layers and, between them, layers that only move or select values (Flatten, "
                    "Reshape, ReLU, MaxPooling, GlobalMaxPooling, ZeroPadding, Cropping, UpSampling) are "
                    "supported in a quantization-aware model"
                )
        return found

    def input_of(found: list[tuple[ir.Layer, int]], what: str) -> TensorFormat | Quantize | None:
        """The one quantizer of a tensor's readers: a format, or a per-element `Quantize`
        record (which rounds the exact value itself)."""
        elements = [r for r, _ in found if isinstance(r, Quantize)]
        if elements:
            if len(found) > 1:
                raise K2CError(
                    f"{what} is read by {', '.join(dict.fromkeys(r.name for r, _ in found))}, one of them "
                    "through a per-element input quantizer; a tensor with a heterogeneous quantizer must be "
                    "read by that one layer only"
                )
            return elements[0]
        stated = [fmt for fmt in (quant[r.name].input_at(i) for r, i in found) if fmt is not None]
        formats = {to_fixed_format(fmt): fmt for fmt in stated}  # one format, stated by any of them
        if len(formats) > 1:
            raise K2CError(
                f"{what} is read by HGQ2 layers {', '.join(dict.fromkeys(r.name for r, _ in found))} whose "
                "input quantizers differ; one tensor needs one format"
            )
        return next(iter(formats.values()), None)

    def no_relu_before_wrap(tensor: str, fmt: TensorFormat, what: str) -> None:
        """A standalone ReLU (one the passes could not fuse into its producer) or a max pooling
        runs after the producer's requantization; HGQ2 wraps their output, and a wrap does not
        commute with them (docs/guide/quantization-aware.md)."""
        between = monotone_read.get(tensor)
        if between is None or fmt.overflow_mode != "WRAP":
            return
        if isinstance(between, Activation):
            raise K2CError(
                f"{what} passes a standalone ReLU layer before HGQ2 layer '{fmt.layer}''s WRAP {fmt.role} "
                "quantizer: the ReLU must act before the wrap, which only a ReLU fused into the layer "
                "(activation='relu' on the HGQ2 layer itself) does; use that, or overflow_mode='SAT'"
            )
        raise K2CError(
            f"{what} passes layer '{between.name}' ({between.keras_class}) before HGQ2 layer "
            f"'{fmt.layer}''s WRAP {fmt.role} quantizer: a maximum of wrapped values is not the wrapped "
            "maximum, and the hardware requantizes before the maximum; use overflow_mode='SAT'"
        )

    def requantized_again(values: FixedFormat, first: str, second: TensorFormat) -> None:
        """A quantizer applied to values already in the format `values`: built when it keeps
        them all (the hardware requantizes a tensor once)."""
        if not _holds(values, to_fixed_format(second)):
            raise K2CError(
                f"HGQ2 layer '{second.layer}''s {second.role} quantizer ({second.describe()}) quantizes "
                f"values {first} has quantized already ({values}); a second requantization is built "
                "only when it keeps every value (as many fraction bits and as wide a range, or more)"
            )

    def in_order(chain: list[TensorFormat], what: str) -> TensorFormat:
        """The first of the quantizers applied one after the other to a tensor: each later
        one must keep its values."""
        for second in chain[1:]:
            requantized_again(to_fixed_format(chain[0]), what, second)
        return chain[0]

    stated = input_of(readers(graph.input_name), "the network input")
    chain = [fmt for fmt in (pinned.get(graph.input_name), stated) if isinstance(fmt, TensorFormat)]
    if not chain and not isinstance(stated, Quantize):
        raise K2CError("the network input is not read by an HGQ2 layer's input quantizer")
    if isinstance(stated, Quantize):  # each element rounds from a finer truncation (kinds.quantize)
        formats = element_formats_of(stated.formats)
        between = monotone_read.get(graph.input_name)
        if graph.input_name in pinned:  # the stage rounds the standalone Quantizer's values again
            in_fmt = to_fixed_format(pinned[graph.input_name])
        else:
            check_input(formats, f"HGQ2 layer '{stated.source}', input quantizer,")
            if between is not None and formats[0].overflow == "wrap":
                raise K2CError(
                    f"the network input passes layer '{between.name}' ({between.keras_class}) before HGQ2 "
                    f"layer '{stated.source}''s per-element WRAP input quantizer: the host's input format "
                    "wraps before it, and a wrap does not commute with a maximum or a ReLU; use "
                    "overflow_mode='SAT'"
                )
            in_fmt = input_format(formats)
    else:
        first = in_order(chain, f"'{chain[0].layer}''s {chain[0].role} quantizer")
        if first is stated:
            no_relu_before_wrap(graph.input_name, first, "the network input")
        in_fmt = to_fixed_format(first)
    layers: dict[str, LayerFormats] = {}
    for record in graph.layers:
        if isinstance(record, Quantize):  # its kind plans its container
            continue
        if record.name not in quant:
            if not (_transparent(record) or _monotone_only(record)):
                raise K2CError(
                    f"layer '{record.name}' ({record.keras_class}) is not an HGQ2 layer; "
                    "a quantization-aware model must quantize every compute layer"
                )
            continue
        q = quant[record.name]
        in_fmts = [to_fixed_format(fmt) for fmt in (q.input_at(i) for i in range(len(record.inputs))) if fmt]
        after = input_of(readers(record.name), f"the output of '{record.name}'")
        home = kind_of(record.type)
        then_quantized = None if isinstance(after, Quantize) else after  # a per-element stage rounds any values
        chain = [fmt for fmt in (q.output, pinned.get(record.name), then_quantized) if fmt is not None]
        if home is not None and home.keeps_format:  # a maximum: its input quantizer's values
            for second in chain:
                requantized_again(in_fmts[0], f"'{record.name}''s input quantizer", second)
            continue
        weight = to_fixed_format(q.kernel) if q.kernel is not None else None
        bias = to_fixed_format(q.bias) if q.bias is not None else weight
        if chain:
            then = in_order(chain, f"'{chain[0].layer}''s {chain[0].role} quantizer")
            if then is q.output or then is then_quantized:  # a standalone Quantizer acts before any ReLU after it
                no_relu_before_wrap(record.name, then, f"the output of '{record.name}'")
            out = to_fixed_format(then)
        else:  # the network output, or a per-element stage's input: the exact result
            out = _exact_output(record, in_fmts, weight, bias)
        layers[record.name] = LayerFormats(weight=weight, bias=bias, output=out)
    return FormatConfig(default=None, input=in_fmt, layers=layers)
