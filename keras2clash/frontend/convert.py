"""Keras layers to IR records: a registry of per-class converters, in the style of hls4ml.

A converter turns one Keras layer call into one typed record (`ir.layers`) and checks
what only the layer itself can tell (its options, its weights, its output shape). It does
not look at its neighbours: removing Dropout, folding BatchNormalization and padding,
fusing activations and the whole-network checks are passes (`ir.passes`), applied after
conversion in a listed order. Supporting a new Keras class means writing one converter and
registering it.

Every unsupported layer or option raises one `K2CError` naming the layer and the reason.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.frontend import walk
from keras2clash.frontend.load import load_keras_model
from keras2clash.ir import layers as ir
from keras2clash.ir.graph import Graph
from keras2clash.ir.passes import run_passes

if TYPE_CHECKING:
    import keras

#: Activations the hardware implements (docs/contract.md); softmax only on the output.
SUPPORTED_ACTIVATIONS: tuple[str, ...] = ("linear", "relu", "sigmoid", "softmax")

Shape = tuple[int, ...]


@dataclass
class ConversionState:
    """What a converter sees of the graph: the names and shapes of the tensors it reads."""

    shapes: list[Shape]
    inputs: list[str]

    @property
    def shape(self) -> Shape:
        return self.shapes[0]

    def common(self, layer: Any, output_shape: Shape) -> dict[str, Any]:
        """The fields every record has."""
        return {"name": str(layer.name), "inputs": tuple(self.inputs),
                "input_shapes": tuple(tuple(s) for s in self.shapes), "output_shape": tuple(output_shape)}


Converter = Callable[[Any, ConversionState], ir.Layer]
_CONVERTERS: dict[str, Converter] = {}


def register_converter(*class_names: str) -> Callable[[Converter], Converter]:
    """Register a converter for Keras layer classes, keyed by exact class name.

    Exact names (not isinstance) so that a user subclass of Dense with its own `call`
    is rejected instead of silently compiled as a plain Dense; the class must also come
    from the `keras` package itself (see `_converter_for`).
    """

    def decorate(function: Converter) -> Converter:
        for name in class_names:
            _CONVERTERS[name] = function
        return function

    return decorate


def supported_layers() -> list[str]:
    """Keras layer class names the frontend converts (sorted, for messages and docs)."""
    return sorted(_CONVERTERS)


#: Why some unsupported layer classes are not supported, and what to use instead.
_UNSUPPORTED_HINTS: dict[str, str] = {
    "Conv1D": "only 2-D convolutions (Conv2D) are supported",
    "Conv3D": "only 2-D convolutions (Conv2D) are supported",
    "DepthwiseConv2D": "depthwise convolutions are not supported, only a plain Conv2D",
    "DepthwiseConv1D": "depthwise convolutions are not supported, only a plain Conv2D",
    "SeparableConv2D": "separable convolutions are not supported; use Conv2D",
    "SeparableConv1D": "separable convolutions are not supported; use Conv2D",
    "Conv2DTranspose": "transposed convolutions are not supported",
    "Conv1DTranspose": "transposed convolutions are not supported",
    "Conv3DTranspose": "transposed convolutions are not supported",
    "MaxPooling1D": "only 2-D pooling (MaxPooling2D, AveragePooling2D) is supported",
    "MaxPooling3D": "only 2-D pooling (MaxPooling2D, AveragePooling2D) is supported",
    "AveragePooling1D": "only 2-D pooling (MaxPooling2D, AveragePooling2D) is supported",
    "AveragePooling3D": "only 2-D pooling (MaxPooling2D, AveragePooling2D) is supported",
    "GlobalMaxPooling2D": (
        "global pooling is not supported; use MaxPooling2D(pool_size=(H, W)) + Flatten"
    ),
    "GlobalAveragePooling2D": (
        "global pooling is not supported; use AveragePooling2D(pool_size=(H, W)) + Flatten"
    ),
    "Lambda": "a Lambda layer runs arbitrary Python, which has no hardware equivalent",
    "Dot": "the Dot merge layer is not supported (element-wise merges and Concatenate are)",
}
for _dims in ("1D", "3D"):
    for _kind in ("Max", "Average"):
        _UNSUPPORTED_HINTS[f"Global{_kind}Pooling{_dims}"] = "global pooling is not supported"


def _converter_for(layer: Any) -> Converter:
    """The converter of a Keras layer class; Keras operations that are not layers (a
    functional `x * y` makes a `keras.ops` Multiply) have none."""
    import keras

    cls = type(layer)
    converter = _CONVERTERS.get(cls.__name__)
    if not isinstance(layer, keras.layers.Layer):
        converter = None
    if converter is None or not cls.__module__.startswith("keras."):
        hint = _UNSUPPORTED_HINTS.get(cls.__name__) if converter is None else None
        raise K2CError(
            f"unsupported layer {cls.__name__} '{getattr(layer, 'name', '?')}'"
            + (f" ({hint})" if hint else "")
            + f"; supported layers: {', '.join(supported_layers())}"
        )
    return converter


def _activation_name(function: Any) -> str:
    """The Keras name of an activation function (`None` means linear)."""
    import keras

    if function is None:
        return "linear"
    for name in SUPPORTED_ACTIVATIONS:
        if function is keras.activations.get(name):
            return name
    return getattr(function, "__name__", repr(function))


def check_activation(layer_name: str, kind: str, name: str) -> None:
    if name not in SUPPORTED_ACTIVATIONS:
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
        raise K2CError(
            f"layer '{layer.name}' ({type(layer).__name__}) reads {len(state.inputs)} tensors; it takes one"
        )


# --- identity, dense, flatten -----------------------------------------------------------


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
    if len(state.shape) != 1:
        raise K2CError(
            f"Dense layer '{layer.name}' gets an input of shape {state.shape} (rank "
            f"{len(state.shape)}); add a Flatten before it"
        )
    if getattr(layer, "quantization_mode", None) is not None:
        raise K2CError(
            f"Dense layer '{layer.name}' is Keras-quantized ({layer.quantization_mode}); "
            "give keras2clash the float model"
        )
    activation = _activation(layer)
    n_in, n_out = state.shape[0], int(layer.units)
    kernel, bias = _kernel_and_bias(layer, (n_in, n_out))
    return ir.Dense(**state.common(layer, (n_out,)), kernel=kernel, bias=bias,
                    use_bias=bool(layer.use_bias), activation=activation)


@register_converter("Flatten")
def _convert_flatten(layer: Any, state: ConversionState) -> ir.Layer:
    """Rank>1 -> 1-D row-major reshape. On a 1-D input it is the identity (removed by the
    passes, which also merges consecutive Flattens)."""
    _single_input(layer, state)
    if len(state.shape) == 1:
        return ir.Identity(**state.common(layer, state.shape), source_class="Flatten")
    if getattr(layer, "data_format", "channels_last") == "channels_first":
        raise K2CError(
            f"Flatten layer '{layer.name}' uses data_format='channels_first', which "
            "transposes its input before flattening; only channels_last is supported"
        )
    return ir.Flatten(**state.common(layer, (math.prod(state.shape),)))


def _to_numpy(variable: Any) -> np.ndarray:
    import keras

    return np.asarray(keras.ops.convert_to_numpy(variable), dtype=np.float64)


def _kernel_and_bias(layer: Any, kernel_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """A Dense/Conv2D layer's kernel and bias as float64 (zeros when use_bias=False)."""
    kind = type(layer).__name__
    kernel = _to_numpy(layer.kernel)
    if kernel.shape != kernel_shape:
        raise K2CError(
            f"{kind} layer '{layer.name}' has kernel shape {kernel.shape}, expected {kernel_shape}"
        )
    n_out = kernel_shape[-1]
    bias = _to_numpy(layer.bias) if layer.use_bias else np.zeros(n_out, dtype=np.float64)
    if not (np.all(np.isfinite(kernel)) and np.all(np.isfinite(bias))):
        raise K2CError(f"{kind} layer '{layer.name}' has NaN or infinite weights")
    return kernel, bias


# --- images: convolution, pooling, padding ---------------------------------------------


def same_pads(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TF/Keras 'same' padding of one spatial axis: (before, after); the odd pixel goes after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def _window_geometry(
    layer: Any, shape: Shape, window: tuple[int, int], strides: tuple[int, int], padding: str, what: str,
) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """Output (H2, W2) and pads (top, bottom, left, right) of a sliding 2-D window."""
    kind = type(layer).__name__
    height, width, _ = shape
    if padding == "same":
        top, bottom = same_pads(height, window[0], strides[0])
        left, right = same_pads(width, window[1], strides[1])
        out = (-(-height // strides[0]), -(-width // strides[1]))
    else:
        top = bottom = left = right = 0
        if window[0] > height or window[1] > width:
            raise K2CError(
                f"{kind} layer '{layer.name}' has {what} {window}, larger than its "
                f"{height}x{width} input with padding='valid'"
            )
        out = ((height - window[0]) // strides[0] + 1, (width - window[1]) // strides[1] + 1)
    return out, (top, bottom, left, right)


def _check_image_layer(layer: Any, state: ConversionState) -> None:
    """Rules shared by Conv2D, pooling and padding: channels_last on (H, W, C)."""
    _single_input(layer, state)
    kind = type(layer).__name__
    if getattr(layer, "data_format", "channels_last") != "channels_last":
        raise K2CError(
            f"{kind} layer '{layer.name}' uses data_format='{layer.data_format}'; only "
            "channels_last (height, width, channels) is supported"
        )
    if len(state.shape) != 3:
        raise K2CError(
            f"{kind} layer '{layer.name}' gets an input of shape {state.shape} (rank "
            f"{len(state.shape)}); it needs an image (height, width, channels)"
        )
    if getattr(layer, "quantization_mode", None) is not None:
        raise K2CError(
            f"{kind} layer '{layer.name}' is Keras-quantized ({layer.quantization_mode}); "
            "give keras2clash the float model"
        )


def _padding(layer: Any) -> str:
    padding = str(layer.padding).lower()
    if padding not in ("valid", "same"):
        raise K2CError(
            f"{type(layer).__name__} layer '{layer.name}' uses padding='{layer.padding}'; "
            "only 'valid' and 'same' are supported"
        )
    return padding


def _pair(layer: Any, what: str, value: Any) -> tuple[int, int]:
    pair = tuple(int(v) for v in value)
    if len(pair) != 2 or min(pair) < 1:
        raise K2CError(
            f"{type(layer).__name__} layer '{layer.name}' has {what}={value}; two positive "
            "integers are needed"
        )
    return pair  # type: ignore[return-value]


def _check_keras_shape(layer: Any, state: ConversionState, out: Shape) -> None:
    """Guard: our geometry must agree with Keras' own output shape."""
    try:
        shapes = [(None, *s) for s in state.shapes]
        expected = tuple(layer.compute_output_shape(shapes[0] if len(shapes) == 1 else shapes)[1:])
    except Exception:  # pragma: no cover - Keras cannot tell; keep our (tested) geometry
        return
    if expected != tuple(out):  # pragma: no cover - would be a frontend bug
        raise K2CError(
            f"{type(layer).__name__} layer '{layer.name}': computed output shape {out} but "
            f"Keras says {expected}"
        )


@register_converter("Conv2D")
def _convert_conv2d(layer: Any, state: ConversionState) -> ir.Layer:
    """A channels_last Conv2D, 'valid' or 'same' (explicit pads), any strides and kernel."""
    _check_image_layer(layer, state)
    dilation = tuple(int(d) for d in layer.dilation_rate)
    if dilation != (1, 1):
        raise K2CError(
            f"Conv2D layer '{layer.name}' has dilation_rate={dilation}; only (1, 1) is "
            "supported"
        )
    if int(layer.groups) != 1:
        raise K2CError(
            f"Conv2D layer '{layer.name}' has groups={layer.groups} (a grouped "
            "convolution); only groups=1 is supported"
        )
    padding = _padding(layer)
    kernel_size = _pair(layer, "kernel_size", layer.kernel_size)
    strides = _pair(layer, "strides", layer.strides)
    activation = _activation(layer)
    channels, filters = state.shape[2], int(layer.filters)
    kernel, bias = _kernel_and_bias(layer, (*kernel_size, channels, filters))
    (out_h, out_w), pads = _window_geometry(layer, state.shape, kernel_size, strides, padding, "kernel_size")
    out = (out_h, out_w, filters)
    _check_keras_shape(layer, state, out)
    return ir.Conv2D(**state.common(layer, out), kernel=kernel, bias=bias, use_bias=bool(layer.use_bias),
                     activation=activation, kernel_size=kernel_size, strides=strides, padding=padding,
                     pads=pads)


@register_converter("MaxPooling2D", "AveragePooling2D")
def _convert_pool2d(layer: Any, state: ConversionState) -> ir.Layer:
    """Max/average pooling over (ph, pw) windows per channel; strides default to the pool.

    'same' max pooling pads with -infinity (never chosen); 'same' average pooling is only
    accepted when it needs no padding, since Keras divides a border window by the count of
    its non-padding values, which the hardware's fixed divisor N = ph*pw does not do.
    """
    _check_image_layer(layer, state)
    kind = type(layer).__name__
    padding = _padding(layer)
    pool_size = _pair(layer, "pool_size", layer.pool_size)
    strides = _pair(layer, "strides", layer.strides)
    (out_h, out_w), pads = _window_geometry(layer, state.shape, pool_size, strides, padding, "pool_size")
    if kind == "AveragePooling2D" and any(pads):
        raise K2CError(
            f"AveragePooling2D layer '{layer.name}' uses padding='same' with pads "
            f"(top, bottom, left, right) = {pads} on its {state.shape[0]}x{state.shape[1]} "
            "input: Keras divides each border window by its count of non-padding values, "
            "not by the pool size; use padding='valid' or an input size the pool divides"
        )
    out = (out_h, out_w, state.shape[2])
    _check_keras_shape(layer, state, out)
    cls = ir.MaxPool2D if kind == "MaxPooling2D" else ir.AvgPool2D
    return cls(**state.common(layer, out), pool_size=pool_size, strides=strides, padding=padding, pads=pads)


@register_converter("ZeroPadding2D")
def _convert_zero_padding2d(layer: Any, state: ConversionState) -> ir.Layer:
    """Zeros around the image; the pass `fold_padding` moves them into the next layer."""
    _check_image_layer(layer, state)
    (top, bottom), (left, right) = (tuple(int(v) for v in pair) for pair in layer.padding)
    h, w, c = state.shape
    out = (h + top + bottom, w + left + right, c)
    _check_keras_shape(layer, state, out)
    return ir.ZeroPad2D(**state.common(layer, out), pads=(top, bottom, left, right))


# --- normalisation and activations (folded and fused by the passes) --------------------


@register_converter("BatchNormalization")
def _convert_batch_normalization(layer: Any, state: ConversionState) -> ir.Layer:
    """Inference-time batch normalisation as a per-channel scale and shift.

    Keras computes `(x - mean) / sqrt(var + eps) * gamma + beta` per channel of the last
    axis; with `g = gamma / sqrt(var + eps)` that is `g * x + (beta - mean * g)` (gamma = 1
    when scale=False, beta = 0 when center=False). The pass `fold_batchnorm` folds it into
    the linear Dense/Conv2D before it.
    """
    _single_input(layer, state)
    rank = len(state.shape) + 1  # with the batch axis
    if int(layer.axis) % rank != rank - 1:
        raise K2CError(
            f"BatchNormalization layer '{layer.name}' normalises axis {layer.axis} of an "
            f"input of shape {state.shape}; only the last (channels) axis can be folded"
        )
    mean = _to_numpy(layer.moving_mean)
    variance = _to_numpy(layer.moving_variance)
    gamma = _to_numpy(layer.gamma) if layer.scale else np.ones_like(mean)
    beta = _to_numpy(layer.beta) if layer.center else np.zeros_like(mean)
    with np.errstate(all="ignore"):
        g = gamma / np.sqrt(variance + float(layer.epsilon))
    return ir.BatchNorm(**state.common(layer, state.shape), scale=g, shift=beta, mean=mean)


@register_converter("Activation")
def _convert_activation(layer: Any, state: ConversionState) -> ir.Layer:
    _single_input(layer, state)
    name = _activation(layer)
    return ir.Activation(**state.common(layer, state.shape), activation=name, source_class="Activation")


@register_converter("ReLU")
def _convert_relu(layer: Any, state: ConversionState) -> ir.Layer:
    """Only the plain ReLU: a cap, leak or threshold would need other hardware."""
    _single_input(layer, state)
    defaults = {"max_value": None, "negative_slope": 0.0, "threshold": 0.0}
    for argument, default in defaults.items():
        value = getattr(layer, argument)
        if value is not None:
            value = float(value)
        if value != default:
            raise K2CError(
                f"ReLU layer '{layer.name}' sets {argument}={value}; only the plain ReLU "
                f"({argument}={default}) is supported"
            )
    return ir.Activation(**state.common(layer, state.shape), activation="relu", source_class="ReLU")


@register_converter("Softmax")
def _convert_softmax(layer: Any, state: ConversionState) -> ir.Layer:
    _single_input(layer, state)
    axis = layer.axis
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    rank = len(state.shape) + 1  # with the batch axis
    if len(axes) != 1 or axes[0] not in (-1, rank - 1):
        raise K2CError(
            f"Softmax layer '{layer.name}' normalises over axis {axis}; only the last "
            "axis (-1) is supported"
        )
    return ir.Activation(**state.common(layer, state.shape), activation="softmax", source_class="Softmax")


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
    rank = len(state.shape)
    if len(state.inputs) < 2:
        raise K2CError(f"Concatenate layer '{layer.name}' reads {len(state.inputs)} tensor; it takes two or more")
    if int(layer.axis) not in (-1, rank):
        raise K2CError(
            f"Concatenate layer '{layer.name}' joins axis {layer.axis} of rank-{rank} inputs; "
            "only the last axis (channels, or the values of a vector) is supported"
        )
    if any(len(s) != rank or s[:-1] != state.shape[:-1] for s in state.shapes):
        raise K2CError(
            f"Concatenate layer '{layer.name}' joins tensors of shapes "
            f"{', '.join(map(str, state.shapes))}: all axes but the last must agree"
        )
    out = (*state.shape[:-1], sum(s[-1] for s in state.shapes))
    _check_keras_shape(layer, state, out)
    return ir.Merge(**state.common(layer, out), op="concatenate")


# --- the model as a graph -----------------------------------------------------------------


def _input_tensor_name(nodes: list[walk.KerasNode]) -> str:
    """The network input's name in the IR: `input` unless a layer already has that name."""
    names = {str(node.layer.name) for node in nodes}
    name, k = "input", 0
    while name in names:
        name, k = f"input_{k}", k + 1
    return name


def raw_graph(model: keras.Model) -> Graph:
    """One record per Keras layer call, before any pass (Dropout, BatchNormalization,
    activation layers still separate)."""
    import keras

    if not isinstance(model, keras.Model):
        raise K2CError(f"expected a keras.Model, got {type(model).__name__}")
    walk.check_model_kind(model)
    shape = walk.input_shape(model)
    nodes = walk.layer_nodes(model)
    keras_input = walk.input_name(model)
    source = _input_tensor_name(nodes)
    shapes: dict[str, Shape] = {source: shape}
    records: list[ir.Layer] = []
    for node in nodes:
        inputs = [source if name == keras_input else name for name in node.inputs]
        state = ConversionState(shapes=[shapes[name] for name in inputs], inputs=inputs)
        record = _converter_for(node.layer)(node.layer, state)
        records.append(record)
        shapes[record.name] = record.output_shape
    output = records[-1].name if records else source
    return Graph(name=str(model.name), input_name=source, input_shape=shape, layers=tuple(records), output=output)


def to_graph(model: keras.Model) -> Graph:
    """A Keras model as the typed graph IR the later stages work on: converted, then every
    pass of `ir.passes.PASSES` applied in order."""
    return run_passes(raw_graph(model))


def to_ir(model: keras.Model) -> list[dict[str, Any]]:
    """The dictionary IR of a model (`to_graph(model).to_dict()`), for users and tools."""
    return to_graph(model).to_dict()


def parse(
    source: keras.Model | str | os.PathLike[str],
    weights: str | os.PathLike[str] | None = None,
) -> list[dict[str, Any]]:
    """`to_ir(load_keras_model(source, weights))`: a model file or model to the dictionary IR."""
    return to_ir(load_keras_model(source, weights))
