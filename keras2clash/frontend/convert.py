"""Keras frontend: a model file (or a live `keras.Model`) in, the dictionary IR out.

The IR is specified in docs/architecture.md: a list of layer dicts, one per hardware
layer ("dense", "conv2d", "maxpool2d", "avgpool2d" or "flatten"). Everything that is the
identity at inference (Dropout and friends, InputLayer) disappears here; separate
activation layers and BatchNormalization are folded into the Dense/Conv2D layer before
them, so the later stages only ever see the few layer kinds the hardware implements.
Images are channels_last `(H, W, C)`, as Keras' default.

Conversion is a registry of per-Keras-layer-class converters (`register_converter`), in
the style of hls4ml: supporting a new layer class means writing one converter function and
registering it, nothing else.

Every mistake a user can make (missing or corrupt file, unsupported layer, misplaced
activation, ...) raises one `K2CError` naming the file or layer and the reason.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from keras2clash.errors import K2CError

if TYPE_CHECKING:  # keras is imported lazily: it takes seconds, and `--help` should not
    import keras

#: Activations the hardware implements (docs/contract.md); softmax only on the output.
SUPPORTED_ACTIVATIONS: tuple[str, ...] = ("linear", "relu", "sigmoid", "softmax")

#: Names tried, in order, for the pickled weights of a JSON config `<dir>/<stem>.json`.
_WEIGHT_SUFFIXES: tuple[str, ...] = (".pkl", ".pickle")
_WEIGHT_FILENAMES: tuple[str, ...] = ("weights.pkl", "weights.pickle")


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------


def load_keras_model(
    source: keras.Model | str | os.PathLike[str],
    weights: str | os.PathLike[str] | None = None,
) -> keras.Model:
    """Return the Keras model that `source` names.

    `source` is a `keras.Model` (returned as is), a Keras 3 `.keras` archive, a legacy
    `.h5`/`.hdf5` full-model file, a JSON config (`model.to_json()`, Keras 3 or the
    Keras 2 format the 2021 thesis stored as `config.json`) whose weights are a pickled
    `model.get_weights()` list, or a directory holding `config.json` + `weights.pkl`.
    For a JSON config the weights come from `weights=` or, failing that, from a file
    beside it: `<stem>.pkl`, `<stem>.pickle`, `weights.pkl`, `weights.pickle`.

    Unpickling runs code from the file: only load weight pickles you trust.
    """
    import keras

    if isinstance(source, keras.Model):
        if weights is not None:
            raise K2CError("weights= is only used with a JSON config, not with a keras.Model")
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise K2CError(
            f"expected a keras.Model or a model file path, got {type(source).__name__}"
        )
    path = Path(source)
    if not path.exists():
        raise K2CError(f"model file not found: {path}")
    if path.is_dir():
        return _load_directory(path, weights)
    suffix = path.suffix.lower()
    if suffix == ".json":
        return _load_json(path, weights)
    if weights is not None:
        raise K2CError(
            f"weights= is only used with a JSON config; {path} already holds its weights"
        )
    if suffix == ".keras":
        return _load_keras_archive(path)
    if suffix in (".h5", ".hdf5"):
        return _load_h5(path)
    raise K2CError(
        f"unknown model file extension '{path.suffix}' for {path}: expected .keras, "
        ".h5, .hdf5, .json (+ pickled weights) or a directory with config.json"
    )


def _first_line(exc: BaseException) -> str:
    """The exception's first line, short: Keras errors often dump whole configs."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 300 else line[:297] + "..."


def _load_keras_archive(path: Path) -> keras.Model:
    """Load a Keras 3 `.keras` zip; check it is a zip first for a precise message."""
    import keras

    if not zipfile.is_zipfile(path):
        raise K2CError(f"corrupt .keras file {path}: not a zip archive (truncated or not Keras 3)")
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
    except (zipfile.BadZipFile, OSError) as exc:
        raise K2CError(f"corrupt .keras file {path}: {_first_line(exc)}") from None
    if "config.json" not in names:
        raise K2CError(f"corrupt .keras file {path}: the archive holds no config.json")
    try:
        return keras.saving.load_model(path, compile=False)
    except Exception as exc:  # any failure here is a property of the user's file
        raise K2CError(f"cannot load Keras model {path}: {_first_line(exc)}") from None


def _load_h5(path: Path) -> keras.Model:
    """Load a legacy HDF5 full-model file; a weights-only HDF5 gets its own message."""
    import h5py
    import keras

    try:
        with h5py.File(path, "r") as handle:
            has_config = "model_config" in handle.attrs
    except OSError as exc:
        raise K2CError(
            f"corrupt HDF5 file {path}: cannot be read ({_first_line(exc)})"
        ) from None
    if not has_config:
        raise K2CError(
            f"HDF5 file {path} holds no model architecture (a weights-only file?); "
            "save the whole model with model.save('model.keras')"
        )
    try:
        return keras.saving.load_model(path, compile=False)
    except Exception as exc:  # truncated datasets, unknown layers, ...
        raise K2CError(f"cannot load HDF5 model {path}: {_first_line(exc)}") from None


def _load_directory(path: Path, weights: str | os.PathLike[str] | None) -> keras.Model:
    """A directory in the 2021 thesis layout: `config.json` + `weights.pkl`."""
    config = path / "config.json"
    if config.is_file():
        return _load_json(config, weights)
    if (path / "saved_model.pb").exists():
        raise K2CError(
            f"{path} is a TensorFlow SavedModel, which Keras 3 cannot load as a model; "
            "save it as .keras or as config.json + weights.pkl"
        )
    raise K2CError(f"directory {path} holds no config.json (expected config.json + weights.pkl)")


def _load_json(path: Path, weights: str | os.PathLike[str] | None) -> keras.Model:
    """Rebuild the model from its JSON config, then install the pickled weights."""
    try:
        text = path.read_text(encoding="utf-8")
        config = json.loads(text)
    except UnicodeDecodeError:
        raise K2CError(f"bad JSON config {path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise K2CError(
            f"bad JSON config {path}: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if not isinstance(config, dict) or "class_name" not in config or "config" not in config:
        raise K2CError(
            f"bad JSON config {path}: not a Keras model config (expected the output of "
            "model.to_json())"
        )
    model = _model_from_config(config, text, path)
    weights_path = _find_weights(path) if weights is None else Path(weights)
    if not weights_path.is_file():
        raise K2CError(f"weights file not found: {weights_path}")
    _install_weights(model, _read_weight_pickle(weights_path), weights_path)
    return model


def _model_from_config(config: dict[str, Any], text: str, path: Path) -> keras.Model:
    """Keras 3 configs carry a "module" key; Keras 2 ones (the thesis) need the legacy reader."""
    import keras

    try:
        if "module" in config:
            model = keras.models.model_from_json(text)
        else:
            from keras.src.legacy.saving import saving_utils

            model = saving_utils.model_from_config(config)
    except Exception as exc:  # unknown layer classes, malformed layer configs, ...
        raise K2CError(
            f"cannot rebuild a model from JSON config {path}: {_first_line(exc)}"
        ) from None
    if not isinstance(model, keras.Model):
        raise K2CError(f"JSON config {path} describes a {type(model).__name__}, not a model")
    if not model.built:
        raise K2CError(
            f"JSON config {path} defines no input shape, so its weights cannot be placed; "
            "give the model a keras.Input(shape=...)"
        )
    return model


def _find_weights(config_path: Path) -> Path:
    """The pickled weights beside a JSON config, in the documented search order."""
    candidates = [config_path.with_suffix(s) for s in _WEIGHT_SUFFIXES]
    candidates += [config_path.parent / n for n in _WEIGHT_FILENAMES]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    tried = ", ".join(c.name for c in candidates)
    raise K2CError(
        f"no weights found for JSON config {config_path}: looked for {tried} in "
        f"{config_path.parent}; pass weights=PATH"
    )


def _read_weight_pickle(path: Path) -> list[np.ndarray]:
    """Unpickle a `model.get_weights()` list and check it is a list of numeric arrays."""
    try:
        with path.open("rb") as handle:
            obj = pickle.load(handle)
    except Exception as exc:  # UnpicklingError, EOFError, missing classes, ...
        raise K2CError(
            f"cannot read weights pickle {path}: {type(exc).__name__}: {_first_line(exc)}"
        ) from None
    if not isinstance(obj, (list, tuple)):
        raise K2CError(
            f"weights pickle {path} holds a {type(obj).__name__}, expected the list "
            "returned by model.get_weights()"
        )
    arrays: list[np.ndarray] = []
    for index, item in enumerate(obj):
        array = np.asarray(item)
        if array.dtype.kind not in "fiu":
            raise K2CError(
                f"weights pickle {path}: entry {index} is not a numeric array "
                f"(dtype {array.dtype})"
            )
        arrays.append(array)
    return arrays


def _install_weights(model: keras.Model, arrays: list[np.ndarray], path: Path) -> None:
    """Check count and shapes against the config before `set_weights` (whose errors are vague)."""
    variables = model.weights
    if len(arrays) != len(variables):
        raise K2CError(
            f"weights pickle {path} has {len(arrays)} arrays but the model config needs "
            f"{len(variables)}"
        )
    for index, (array, variable) in enumerate(zip(arrays, variables)):
        if tuple(array.shape) != tuple(variable.shape):
            raise K2CError(
                f"weights pickle {path}: array {index} has shape {tuple(array.shape)} but "
                f"weight '{variable.path}' needs {tuple(variable.shape)}"
            )
    model.set_weights(arrays)


# --------------------------------------------------------------------------------------
# Model -> chain of layers
# --------------------------------------------------------------------------------------


def _model_chain(model: keras.Model) -> list[keras.layers.Layer]:
    """The model's layers in order, if its graph is a single chain; nested models inlined.

    Sequential models are chains by construction. Functional models are walked back from
    the output, one producing layer at a time, which rejects merges; layers left over
    afterwards sit on a side branch. InputLayers are dropped.
    """
    import keras

    _check_model_kind(model)
    if isinstance(model, keras.Sequential):
        layers = list(model.layers)
    else:
        layers = _functional_chain(model)
    chain: list[keras.layers.Layer] = []
    for layer in layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        if isinstance(layer, keras.Model):
            chain.extend(_model_chain(layer))
        else:
            chain.append(layer)
    return chain


def _check_model_kind(model: keras.Model) -> None:
    """Sequential and functional models expose their graph; subclassed ones only a `call`."""
    import keras
    from keras.src.models.functional import Functional

    if not isinstance(model, (keras.Sequential, Functional)):
        raise K2CError(
            f"model '{model.name}' is a subclassed {type(model).__name__}; only Sequential "
            "and functional models can be converted"
        )


def _functional_chain(model: keras.Model) -> list[Any]:
    """Walk a functional graph back from its output through each layer's producing node.

    Keras 3 has no public graph API, so this reads `_keras_history` / `_inbound_nodes`
    (stable since Keras 3.0). Besides merges it catches layers called with
    training=True, whose behaviour at inference is not the identity Keras promises.
    The leftover-layer check is a guard: Keras itself prunes dead branches.
    """
    import keras

    _single_io(model)
    tensor = model.outputs[0]
    reversed_chain: list[Any] = []
    while True:
        operation, node_index, _ = tensor._keras_history
        if isinstance(operation, keras.layers.InputLayer):
            break
        node = operation._inbound_nodes[node_index]
        inputs = list(node.input_tensors)
        if len(inputs) != 1:
            raise K2CError(
                f"layer '{operation.name}' ({type(operation).__name__}) takes {len(inputs)} "
                "inputs: branches and merges are not supported, only a single chain of layers"
            )
        if node.arguments.kwargs.get("training") is True:
            raise K2CError(
                f"layer '{operation.name}' ({type(operation).__name__}) is called with "
                "training=True, so it is not an inference-time layer"
            )
        reversed_chain.append(operation)
        tensor = inputs[0]
    chain = reversed_chain[::-1]
    on_chain = {id(op) for op in chain}
    for layer in model.layers:
        if not isinstance(layer, keras.layers.InputLayer) and id(layer) not in on_chain:
            raise K2CError(
                f"layer '{layer.name}' ({type(layer).__name__}) is on a side branch: only "
                "models whose layers form a single chain are supported"
            )
    return chain


def _single_io(model: keras.Model) -> None:
    if len(model.inputs) != 1:
        names = ", ".join(t.name for t in model.inputs)
        raise K2CError(
            f"model '{model.name}' has {len(model.inputs)} inputs ({names}); exactly one "
            "is supported"
        )
    if len(model.outputs) != 1:
        raise K2CError(
            f"model '{model.name}' has {len(model.outputs)} outputs; exactly one is supported"
        )


def _input_shape(model: keras.Model) -> tuple[int, ...]:
    """The model's input shape without the batch axis; it must be fully known and float."""
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        inputs = None
    if not inputs:
        raise K2CError(
            f"model '{model.name}' is not built (no input shape); start it with "
            "keras.Input(shape=...) or call model.build(...)"
        )
    _single_io(model)
    tensor = inputs[0]
    dtype = str(tensor.dtype)
    if not dtype.startswith(("float", "bfloat")):
        raise K2CError(
            f"model '{model.name}' input '{tensor.name}' has dtype {dtype}; only float "
            "inputs are supported"
        )
    shape = tuple(tensor.shape[1:])
    if not shape or any(d is None for d in shape):
        raise K2CError(
            f"model '{model.name}' input '{tensor.name}' has shape {tuple(tensor.shape)}: "
            "every non-batch dimension must be known"
        )
    return tuple(int(d) for d in shape)


# --------------------------------------------------------------------------------------
# Converter registry
# --------------------------------------------------------------------------------------


@dataclass
class ConversionState:
    """What a converter sees and extends: the IR so far and the current tensor shape."""

    ir: list[dict[str, Any]]
    shape: tuple[int, ...]  # shape flowing into the next layer, no batch axis


Converter = Callable[[Any, ConversionState], None]
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
}
for _dims in ("1D", "3D"):
    for _kind in ("Max", "Average"):
        _UNSUPPORTED_HINTS[f"Global{_kind}Pooling{_dims}"] = "global pooling is not supported"


def _converter_for(layer: Any) -> Converter:
    cls = type(layer)
    converter = _CONVERTERS.get(cls.__name__)
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


def _check_activation(layer: Any, name: str) -> None:
    if name not in SUPPORTED_ACTIVATIONS:
        raise K2CError(
            f"layer '{layer.name}' ({type(layer).__name__}) uses activation '{name}', which "
            f"is not supported; supported activations: {', '.join(SUPPORTED_ACTIVATIONS)}"
        )


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
def _convert_inference_identity(layer: Any, state: ConversionState) -> None:
    """Layers whose `call` returns its input unchanged unless training=True: dropped.

    (Keras 3 source checked: each returns `inputs` when not training; the regularizer only
    adds a loss.) A functional call with training=True is rejected in `_functional_chain`.
    """


@register_converter("Dense")
def _convert_dense(layer: Any, state: ConversionState) -> None:
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
    activation = _activation_name(layer.activation)
    _check_activation(layer, activation)
    n_in, n_out = state.shape[0], int(layer.units)
    kernel, bias = _kernel_and_bias(layer, (n_in, n_out))
    state.ir.append(
        {
            "type": "dense",
            "name": layer.name,
            "input_shape": (n_in,),
            "output_shape": (n_out,),
            "activation": activation,
            "use_bias": bool(layer.use_bias),
            "weights": {"kernel": kernel, "bias": bias},
            "fused": [],
        }
    )
    state.shape = (n_out,)


@register_converter("Flatten")
def _convert_flatten(layer: Any, state: ConversionState) -> None:
    """Rank>1 -> 1-D row-major reshape. On a 1-D input it is the identity and disappears,
    which also merges consecutive Flattens."""
    if len(state.shape) == 1:
        return
    if getattr(layer, "data_format", "channels_last") == "channels_first":
        raise K2CError(
            f"Flatten layer '{layer.name}' uses data_format='channels_first', which "
            "transposes its input before flattening; only channels_last is supported"
        )
    out = (math.prod(state.shape),)
    state.ir.append(
        {
            "type": "flatten",
            "name": layer.name,
            "input_shape": state.shape,
            "output_shape": out,
            "activation": "linear",
            "use_bias": False,
            "weights": {},
            "fused": [],
        }
    )
    state.shape = out


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


def same_pads(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TF/Keras 'same' padding of one spatial axis: (before, after); the odd pixel goes after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def _window_geometry(
    layer: Any,
    state: ConversionState,
    window: tuple[int, int],
    strides: tuple[int, int],
    padding: str,
    what: str,
) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """Output (H2, W2) and pads (top, bottom, left, right) of a sliding 2-D window."""
    kind = type(layer).__name__
    height, width, _ = state.shape
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
    """Rules shared by Conv2D and the 2-D pooling layers: channels_last on (H, W, C)."""
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


def _check_keras_shape(layer: Any, state: ConversionState, out: tuple[int, ...]) -> None:
    """Guard: our geometry must agree with Keras' own output shape."""
    try:
        expected = tuple(layer.compute_output_shape((None, *state.shape))[1:])
    except Exception:  # pragma: no cover - Keras cannot tell; keep our (tested) geometry
        return
    if expected != out:  # pragma: no cover - would be a frontend bug
        raise K2CError(
            f"{type(layer).__name__} layer '{layer.name}': computed output shape {out} but "
            f"Keras says {expected}"
        )


@register_converter("Conv2D")
def _convert_conv2d(layer: Any, state: ConversionState) -> None:
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
    activation = _activation_name(layer.activation)
    _check_activation(layer, activation)
    channels, filters = state.shape[2], int(layer.filters)
    kernel, bias = _kernel_and_bias(layer, (*kernel_size, channels, filters))
    (out_h, out_w), pads = _window_geometry(layer, state, kernel_size, strides, padding, "kernel_size")
    out = (out_h, out_w, filters)
    _check_keras_shape(layer, state, out)
    state.ir.append(
        {
            "type": "conv2d",
            "name": layer.name,
            "input_shape": state.shape,
            "output_shape": out,
            "activation": activation,
            "use_bias": bool(layer.use_bias),
            "kernel_size": kernel_size,
            "strides": strides,
            "padding": padding,
            "pads": pads,
            "weights": {"kernel": kernel, "bias": bias},
            "fused": [],
        }
    )
    state.shape = out


@register_converter("MaxPooling2D", "AveragePooling2D")
def _convert_pool2d(layer: Any, state: ConversionState) -> None:
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
    (out_h, out_w), pads = _window_geometry(layer, state, pool_size, strides, padding, "pool_size")
    if kind == "AveragePooling2D" and any(pads):
        raise K2CError(
            f"AveragePooling2D layer '{layer.name}' uses padding='same' with pads "
            f"(top, bottom, left, right) = {pads} on its {state.shape[0]}x{state.shape[1]} "
            "input: Keras divides each border window by its count of non-padding values, "
            "not by the pool size; use padding='valid' or an input size the pool divides"
        )
    out = (out_h, out_w, state.shape[2])
    _check_keras_shape(layer, state, out)
    state.ir.append(
        {
            "type": "maxpool2d" if kind == "MaxPooling2D" else "avgpool2d",
            "name": layer.name,
            "input_shape": state.shape,
            "output_shape": out,
            "activation": "linear",
            "use_bias": False,
            "pool_size": pool_size,
            "strides": strides,
            "padding": padding,
            "pads": pads,
            "weights": {},
            "fused": [],
        }
    )
    state.shape = out


_KERAS_CLASS = {
    "dense": "Dense",
    "conv2d": "Conv2D",
    "flatten": "Flatten",
    "maxpool2d": "MaxPooling2D",
    "avgpool2d": "AveragePooling2D",
}


def _describe_previous(previous: dict[str, Any] | None) -> str:
    if previous is None:
        return "the model input"
    return f"{_KERAS_CLASS.get(previous['type'], previous['type'])} layer '{previous['name']}'"


@register_converter("BatchNormalization")
def _convert_batch_normalization(layer: Any, state: ConversionState) -> None:
    """Fold inference-time batch normalisation into the linear Dense/Conv2D before it.

    Keras computes `(x - mean) / sqrt(var + eps) * gamma + beta` per channel of the last
    axis; with `g = gamma / sqrt(var + eps)` that is `w' = w * g`, `b' = (b - mean) * g +
    beta` on the previous layer's output channels (gamma = 1 when scale=False, beta = 0
    when center=False). Dropped layers in between (Dropout, ...) do not count. The folded
    layer has a bias from then on (`use_bias` True).
    """
    rank = len(state.shape) + 1  # with the batch axis
    if int(layer.axis) % rank != rank - 1:
        raise K2CError(
            f"BatchNormalization layer '{layer.name}' normalises axis {layer.axis} of an "
            f"input of shape {state.shape}; only the last (channels) axis can be folded"
        )
    previous = state.ir[-1] if state.ir else None
    if previous is None or previous["type"] not in ("dense", "conv2d"):
        raise K2CError(
            f"BatchNormalization layer '{layer.name}' follows {_describe_previous(previous)}, "
            "not a Dense or Conv2D layer; BatchNormalization is only supported folded into "
            "the Dense/Conv2D layer right before it"
        )
    if previous["activation"] != "linear":
        raise K2CError(
            f"BatchNormalization layer '{layer.name}' follows {_describe_previous(previous)}, "
            f"which applies '{previous['activation']}' first; it can only be folded into a "
            "layer with a linear activation (put the activation after the BatchNormalization)"
        )
    mean = _to_numpy(layer.moving_mean)
    variance = _to_numpy(layer.moving_variance)
    gamma = _to_numpy(layer.gamma) if layer.scale else np.ones_like(mean)
    beta = _to_numpy(layer.beta) if layer.center else np.zeros_like(mean)
    with np.errstate(all="ignore"):
        g = gamma / np.sqrt(variance + float(layer.epsilon))
        kernel = previous["weights"]["kernel"] * g
        bias = (previous["weights"]["bias"] - mean) * g + beta
    if not (np.all(np.isfinite(kernel)) and np.all(np.isfinite(bias))):
        raise K2CError(
            f"BatchNormalization layer '{layer.name}' folds to NaN or infinite weights "
            "(negative moving variance or non-finite statistics)"
        )
    previous["weights"] = {"kernel": kernel, "bias": bias}
    previous["use_bias"] = True
    previous["fused"].append(layer.name)


def _fuse_activation(layer: Any, activation: str, state: ConversionState) -> None:
    """Fold a separate activation layer into the linear Dense/Conv2D right before it.

    A linear activation is the identity and is dropped wherever it sits. Dropped layers
    (Dropout, a Flatten on 1-D data) between the Dense and the activation do not count,
    since they are the identity at inference.
    """
    _check_activation(layer, activation)
    previous = state.ir[-1] if state.ir else None
    if activation == "linear":
        if previous is not None:
            previous["fused"].append(layer.name)
        return
    kind = type(layer).__name__
    if previous is None or previous["type"] not in ("dense", "conv2d"):
        raise K2CError(
            f"{kind} layer '{layer.name}' ({activation}) follows "
            f"{_describe_previous(previous)}, not a Dense or Conv2D layer; activations are "
            "only supported fused into the Dense/Conv2D layer before them"
        )
    if previous["activation"] != "linear":
        raise K2CError(
            f"{kind} layer '{layer.name}' ({activation}) follows "
            f"{_describe_previous(previous)}, which already applies "
            f"'{previous['activation']}'; only one activation per layer is supported"
        )
    previous["activation"] = activation
    previous["fused"].append(layer.name)


@register_converter("Activation")
def _convert_activation(layer: Any, state: ConversionState) -> None:
    _fuse_activation(layer, _activation_name(layer.activation), state)


@register_converter("ReLU")
def _convert_relu(layer: Any, state: ConversionState) -> None:
    """Only the plain ReLU: a cap, leak or threshold would need other hardware."""
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
    _fuse_activation(layer, "relu", state)


@register_converter("Softmax")
def _convert_softmax(layer: Any, state: ConversionState) -> None:
    axis = layer.axis
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    rank = len(state.shape) + 1  # with the batch axis
    if len(axes) != 1 or axes[0] not in (-1, rank - 1):
        raise K2CError(
            f"Softmax layer '{layer.name}' normalises over axis {axis}; only the last "
            "axis (-1) is supported"
        )
    _fuse_activation(layer, "softmax", state)


# --------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------


def to_ir(model: keras.Model) -> list[dict[str, Any]]:
    """Convert a single-chain Sequential/functional Keras model to the dictionary IR.

    Raises `K2CError` naming the layer and the reason for anything the hardware cannot
    implement exactly as Keras does at inference.
    """
    import keras

    if not isinstance(model, keras.Model):
        raise K2CError(f"expected a keras.Model, got {type(model).__name__}")
    _check_model_kind(model)
    state = ConversionState(ir=[], shape=_input_shape(model))
    for layer in _model_chain(model):
        _converter_for(layer)(layer, state)
    _check_ir(model, state.ir)
    return state.ir


def _check_ir(model: keras.Model, ir: list[dict[str, Any]]) -> None:
    """Whole-model rules: a Dense exists, softmax only at the end, unique names."""
    if not any(layer["type"] == "dense" for layer in ir):
        raise K2CError(f"model '{model.name}' has no Dense layer; at least one is needed")
    for layer in ir[:-1]:
        if layer["activation"] == "softmax":
            raise K2CError(
                f"layer '{layer['name']}' applies softmax but is not the last layer: softmax "
                "is only supported at the output, where it is replaced by an "
                "argmax-preserving identity"
            )
    names = [layer["name"] for layer in ir]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise K2CError(
            f"layer name(s) {', '.join(duplicates)} occur more than once (a shared layer or "
            "nested models with clashing names); every layer needs its own name"
        )


def parse(
    source: keras.Model | str | os.PathLike[str],
    weights: str | os.PathLike[str] | None = None,
) -> list[dict[str, Any]]:
    """`to_ir(load_keras_model(source, weights))`: a model file or model to the IR."""
    return to_ir(load_keras_model(source, weights))
