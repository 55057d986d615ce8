"""Keras frontend: a model file (or a live `keras.Model`) in, the dictionary IR out.

The IR is specified in docs/architecture.md: a list of layer dicts, one per hardware
layer ("dense" or "flatten"). Everything that is the identity at inference (Dropout and
friends, InputLayer) disappears here, and separate activation layers are folded into the
Dense layer before them, so the later stages only ever see the few layer kinds the
hardware implements.

Conversion is a registry of per-Keras-layer-class converters (`register_converter`), in
the style of hls4ml: supporting a new layer class (Conv2D, pooling, batch normalisation)
means writing one converter function and registering it, nothing else.

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


def _converter_for(layer: Any) -> Converter:
    cls = type(layer)
    converter = _CONVERTERS.get(cls.__name__)
    if converter is None or not cls.__module__.startswith("keras."):
        raise K2CError(
            f"unsupported layer {cls.__name__} '{getattr(layer, 'name', '?')}'; supported "
            f"layers: {', '.join(supported_layers())}"
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
    import keras

    kernel = np.asarray(keras.ops.convert_to_numpy(layer.kernel), dtype=np.float64)
    n_in, n_out = state.shape[0], int(layer.units)
    if kernel.shape != (n_in, n_out):
        raise K2CError(
            f"Dense layer '{layer.name}' has kernel shape {kernel.shape}, expected {(n_in, n_out)}"
        )
    if layer.use_bias:
        bias = np.asarray(keras.ops.convert_to_numpy(layer.bias), dtype=np.float64)
    else:
        bias = np.zeros(n_out, dtype=np.float64)
    if not (np.all(np.isfinite(kernel)) and np.all(np.isfinite(bias))):
        raise K2CError(f"Dense layer '{layer.name}' has NaN or infinite weights")
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


def _fuse_activation(layer: Any, activation: str, state: ConversionState) -> None:
    """Fold a separate activation layer into the linear Dense right before it.

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
    if previous is None or previous["type"] != "dense":
        if previous is None:
            where = "the model input"
        else:
            where = f"{previous['type']} layer '{previous['name']}'"
        raise K2CError(
            f"{kind} layer '{layer.name}' ({activation}) follows {where}, not a Dense layer; "
            "activations are only supported fused into the Dense layer before them"
        )
    if previous["activation"] != "linear":
        raise K2CError(
            f"{kind} layer '{layer.name}' ({activation}) follows Dense layer "
            f"'{previous['name']}', which already applies '{previous['activation']}'; "
            "only one activation per Dense layer is supported"
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
