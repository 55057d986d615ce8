"""The converter registry, in the style of hls4ml: one function per Keras layer class turns
a layer call into one typed IR record (`ir.layers`), checking what only the layer itself
can tell (its options, weights and output shape). The converters live in
`frontend.layers`, `frontend.images` and `frontend.sequences`; `frontend.convert` assembles the graph.
Supporting a new Keras class means writing one converter and registering it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.ir import layers as ir
from keras2clash.quant import activations

if TYPE_CHECKING:
    import keras

KerasLayer: TypeAlias = "keras.layers.Layer"
"""A Keras layer object, what a converter reads (keras itself is imported where models load)."""

#: Activation names the hardware implements (docs/guide/contract.md, quant.activations).
SUPPORTED_ACTIVATIONS: tuple[str, ...] = tuple(n for n in activations.NAMES if n != "prelu")

Shape = tuple[int, ...]


def image_shape(shape: Shape) -> Shape:
    """A Keras tensor shape (no batch axis) as the IR holds it: a 1-D sequence `(steps,
    channels)` is an image one row high, `(1, steps, channels)`, so every 1-D layer runs on
    the 2-D streaming blocks (a beat is one step's channels, steps arrive in order, and the
    row-major flattening is the same). Other shapes are unchanged."""
    shape = tuple(int(d) for d in shape)
    return (1, *shape) if len(shape) == 2 else shape


@dataclass
class ConversionState:
    """What a converter sees of the graph: the names and IR shapes of the tensors it reads
    (`image_shape`: 1-D tensors are one row high), and their shapes as Keras has them."""

    shapes: list[Shape]
    inputs: list[str]
    keras_shapes: list[Shape] | None = None
    options: dict[str, Any] = field(default_factory=dict)  # the call's keyword arguments

    @property
    def keras_shape(self) -> Shape:
        return (self.keras_shapes or self.shapes)[0]

    @property
    def shape(self) -> Shape:
        return self.shapes[0]

    def common(self, layer: KerasLayer, output_shape: Shape) -> dict[str, Any]:
        """The fields every record has."""
        return {
            "name": str(layer.name),
            "inputs": tuple(self.inputs),
            "input_shapes": tuple(tuple(s) for s in self.shapes),
            "output_shape": tuple(output_shape),
        }


Converter = Callable[[KerasLayer, ConversionState], "ir.Layer | tuple[ir.Layer, ...]"]
"""A converter returns a record, or several in order (a separable convolution), the last
named after the Keras layer."""
_CONVERTERS: dict[str, dict[str, Converter]] = {}
"""Class name -> {the package the class must come from (`keras.`, `hgq.` for HGQ2 layers,
`qkeras.` for QKeras ones: both name a layer QDense) -> its converter}."""


def register_converter(*class_names: str, module: str = "keras.") -> Callable[[Converter], Converter]:
    """Register a converter for layer classes, keyed by exact class name.

    Exact names (not isinstance) so that a user subclass of Dense with its own `call`
    is rejected instead of silently compiled as a plain Dense; the class must also come
    from the package `module` names (`keras.` itself, or `hgq.` for the quantization-aware
    layers of `frontend.hgq`; see `_converter_for`).
    """

    def decorate(function: Converter) -> Converter:
        for name in class_names:
            _CONVERTERS.setdefault(name, {})[module] = function
        return function

    return decorate


class FloatTwin:
    """A quantization-aware layer seen as its Keras twin class `float_class`, with some of its
    attributes replaced (`overrides`: its quantized weights, the Keras activation the record
    applies): the twin's converter then checks the options and computes the geometry (the
    twins' converters tell the classes they serve apart by class name)."""

    def __init__(self, layer: Any, float_class: str, **overrides: Any) -> None:
        self._layer = layer
        self._overrides = overrides
        self.__class__ = type(float_class, (FloatTwin,), {})

    def __getattr__(self, name: str) -> Any:
        overrides = self.__dict__["_overrides"]
        return overrides[name] if name in overrides else getattr(self.__dict__["_layer"], name)


def keras_converter(class_name: str) -> Converter:
    """The converter registered for a Keras class (a quantization-aware layer's converter
    reuses its float twin's geometry and checks)."""
    return _CONVERTERS[class_name]["keras."]


def supported_layers() -> list[str]:
    """Keras layer class names the frontend converts (sorted, for messages and docs)."""
    return sorted(_CONVERTERS)


#: Why some unsupported layer classes are not supported, and what to use instead.
_UNSUPPORTED_HINTS: dict[str, str] = {
    "Conv3D": "only 1-D and 2-D convolutions (Conv1D, Conv2D) are supported",
    "Conv3DTranspose": "only 1-D and 2-D transposed convolutions (Conv1DTranspose, Conv2DTranspose) are supported",
    "MaxPooling3D": "only 1-D and 2-D pooling is supported",
    "AveragePooling3D": "only 1-D and 2-D pooling is supported",
    "Lambda": "a Lambda layer runs arbitrary Python, which has no hardware equivalent",
    "Dot": "the Dot merge layer is not supported (element-wise merges and Concatenate are)",
}
_UNSUPPORTED_HINTS["RNN"] = "a generic RNN runs a cell of its own; SimpleRNN, LSTM and GRU are built"
for _kind in ("ConvLSTM1D", "ConvLSTM2D", "ConvLSTM3D"):
    _UNSUPPORTED_HINTS[_kind] = "a convolutional recurrent layer is not built (SimpleRNN, LSTM and GRU are)"
for _kind in ("Attention", "AdditiveAttention", "GroupedQueryAttention"):
    _UNSUPPORTED_HINTS[_kind] = "this attention layer is not converted (MultiHeadAttention is)"
for _kind in ("GroupNormalization", "UnitNormalization", "RMSNormalization"):
    _UNSUPPORTED_HINTS[_kind] = (
        "this per-sample normalization is not built; LayerNormalization over the last axis and "
        "BatchNormalization are supported"
    )
_UNSUPPORTED_HINTS["Embedding"] = "integer token inputs with a table lookup are not supported"
for _kind in ("ZeroPadding3D", "Cropping3D", "UpSampling3D"):
    _UNSUPPORTED_HINTS[_kind] = "only the 1-D and 2-D versions of this layer are supported"
for _kind in ("Max", "Average"):
    _UNSUPPORTED_HINTS[f"Global{_kind}Pooling3D"] = "3-D global pooling is not supported (1-D and 2-D are)"
_QUANTIZATION_AWARE_HINTS: dict[tuple[str, ...], str] = {
    ("QConv3D", "QMaxPooling3D", "QAveragePooling3D", "QGlobalMaxPooling3D", "QGlobalAveragePooling3D"): (
        "only 1-D and 2-D layers are supported"
    ),
    ("QSoftmax", "QUnaryFunctionLUT", "QAffinedUnaryFunctionLUT"): (
        "HGQ2 computes it through a table it fills in float32, which is not reproduced bit for bit"
    ),
    ("QDenseT", "QConvT1D", "QConvT2D", "QEinsumDenseT"): "a learned table per weight is not a multiply-accumulate",
    ("QEinsum", "QDot"): "a product of two activations is not built (QEinsumDense as a Dense on the last axis is)",
    ("QEinsumDenseBatchnorm", "QAveragePow2", "QSum", "QMeanPow2"): "this HGQ2 layer is not converted",
    ("QSimpleRNN", "QGRU", "QLSTM", "QBidirectional", "QLIF", "QSimpleSNN"): (
        "a quantization-aware recurrent layer is not converted (Keras' SimpleRNN, LSTM and GRU are)"
    ),
    (
        "QMultiHeadAttentionT",
    ): "its projections are learned tables, not multiply-accumulates (QMultiHeadAttention is built)",
    ("QLinformerAttention", "QLinformerAttentionT", "QSALTAttention"): (
        "this attention is not converted (QMultiHeadAttention is)"
    ),
    ("QConv2DTranspose", "QDepthwiseConv2DTranspose", "QSeparableConv2DTranspose"): (
        "the quantization-aware transposed convolution is not converted (a plain Conv2DTranspose is)"
    ),
    ("QConv2DBatchnorm", "QDenseBatchnorm", "QDepthwiseConv2DBatchnorm"): (
        "QKeras' folded batch normalization is not converted; use the layer and a QBatchNormalization"
    ),
}
"""Why HGQ2 and QKeras layers without a converter are refused (docs/guide/quantization-aware.md)."""
for _kinds, _why in _QUANTIZATION_AWARE_HINTS.items():
    for _kind in _kinds:
        _UNSUPPORTED_HINTS[_kind] = _why


def _converter_for(layer: Any) -> Converter:
    """The converter of a Keras layer class; Keras operations that are not layers (a
    functional `x * y` makes a `keras.ops` Multiply) have none."""
    import keras

    cls = type(layer)
    by_module = _CONVERTERS.get(cls.__name__, {}) if isinstance(layer, keras.layers.Layer) else {}
    converter = next((c for m, c in by_module.items() if cls.__module__.startswith(m)), None)
    if converter is None:
        raise unsupported_layer(cls.__name__, getattr(layer, "name", "?"), hint=not by_module)
    return converter


def unsupported_layer(class_name: str, name: str, hint: bool = True) -> K2CError:
    """The error for a layer keras2clash cannot compile: its class, name, why, and what is supported."""
    why = _UNSUPPORTED_HINTS.get(class_name) if hint else None
    return K2CError(
        f"unsupported layer {class_name} '{name}'"
        + (f" ({why})" if why else "")
        + f"; supported layers: {', '.join(supported_layers())}"
    )


def _activation_name(function: Any) -> str:
    """The Keras name of an activation function (`None` means linear)."""
    import keras

    if function is None:
        return "linear"
    for name in SUPPORTED_ACTIVATIONS:
        if function is keras.activations.get(name):
            return activations.canonical(name)
    return getattr(function, "__name__", repr(function))


def check_activation(layer_name: str, kind: str, name: str) -> None:
    if not activations.is_activation(name):
        raise K2CError(
            f"layer '{layer_name}' ({kind}) uses activation '{name}', which "
            f"is not supported; supported activations: {', '.join(SUPPORTED_ACTIVATIONS)}"
        )


def _activation(layer: Any) -> str:
    name = _activation_name(layer.activation)
    check_activation(layer.name, type(layer).__name__, name)
    return name


def _single_input(layer: Any, state: ConversionState) -> None:
    if len(state.inputs) != 1:
        raise K2CError(f"layer '{layer.name}' ({type(layer).__name__}) reads {len(state.inputs)} tensors; it takes one")


def _to_numpy(variable: Any) -> np.ndarray:
    import keras

    return np.asarray(keras.ops.convert_to_numpy(variable), dtype=np.float64)


def _kernel_and_bias(layer: Any, kernel_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """A Dense/Conv2D layer's kernel and bias as float64 (zeros when use_bias=False)."""
    kind = type(layer).__name__
    kernel = _to_numpy(layer.kernel)
    if kernel.shape != kernel_shape:
        raise K2CError(f"{kind} layer '{layer.name}' has kernel shape {kernel.shape}, expected {kernel_shape}")
    n_out = kernel_shape[-1]
    bias = _to_numpy(layer.bias) if layer.use_bias else np.zeros(n_out, dtype=np.float64)
    if not (np.all(np.isfinite(kernel)) and np.all(np.isfinite(bias))):
        raise K2CError(f"{kind} layer '{layer.name}' has NaN or infinite weights")
    return kernel, bias


def _check_keras_shape(layer: Any, state: ConversionState, out: Shape) -> None:
    """Guard: our geometry must agree with Keras' own output shape (in IR form, `image_shape`)."""
    expected = keras_output_shape(layer, state)
    if expected is None:  # pragma: no cover - Keras cannot tell; keep our (tested) geometry
        return
    if image_shape(expected) != tuple(out):  # pragma: no cover - would be a frontend bug
        raise K2CError(
            f"{type(layer).__name__} layer '{layer.name}': computed output shape {out} but Keras says {expected}"
        )


def keras_output_shape(layer: Any, state: ConversionState) -> Shape | None:
    """The layer's output shape as Keras computes it from its Keras input shapes (None when
    Keras cannot tell). A layer of several inputs takes their shapes as one list (a merge) or
    as arguments of their own (MultiHeadAttention's query and value)."""
    shapes = [(None, *s) for s in (state.keras_shapes or state.shapes)]
    calls = [(shapes[0],)] if len(shapes) == 1 else [(shapes,), tuple(shapes)]
    for args in calls:
        try:
            return tuple(int(d) for d in layer.compute_output_shape(*args)[1:])
        except Exception:  # noqa: PERF203 - which form a layer takes depends on its class
            continue
    return None
