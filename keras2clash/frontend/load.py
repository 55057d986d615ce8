"""Loading a Keras model: a model file (`.keras`, `.h5`, JSON config + pickled weights, a
thesis directory) or a live `keras.Model` in, a built `keras.Model` out.

Every mistake a user can make here (missing or corrupt file, weights that do not fit)
raises one `K2CError` naming the file and the reason. Keras is imported lazily: it takes
seconds, and `--help` or a missing file should not wait for it.
"""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.frontend.registry import unsupported_layer

if TYPE_CHECKING:  # keras is imported lazily: it takes seconds, and `--help` should not
    import keras

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
    if not isinstance(source, (str, os.PathLike)):
        import keras

        if not isinstance(source, keras.Model):
            raise K2CError(f"expected a keras.Model or a model file path, got {type(source).__name__}")
        if weights is not None:
            raise K2CError("weights= is only used with a JSON config, not with a keras.Model")
        return source
    # A path: every check that can be made without Keras comes first (importing Keras,
    # that is TensorFlow, takes seconds); each loader imports it when it needs it.
    path = Path(source)
    if not path.exists():
        raise K2CError(f"model file not found: {path}")
    if path.is_dir():
        return _load_directory(path, weights)
    suffix = path.suffix.lower()
    if suffix == ".json":
        return _load_json(path, weights)
    if weights is not None:
        raise K2CError(f"weights= is only used with a JSON config; {path} already holds its weights")
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
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read("config.json"))
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise K2CError(f"corrupt .keras file {path}: config.json: {_first_line(exc)}") from None
    reject_code_layers(config)
    import_layer_packages(config)
    import keras

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
            config_text = handle.attrs["model_config"] if has_config else None
    except OSError as exc:
        raise K2CError(f"corrupt HDF5 file {path}: cannot be read ({_first_line(exc)})") from None
    if not has_config:
        raise K2CError(
            f"HDF5 file {path} holds no model architecture (a weights-only file?); "
            "save the whole model with model.save('model.keras')"
        )
    try:
        if isinstance(config_text, bytes):
            config_text = config_text.decode("utf-8")
        config = json.loads(config_text)
    except (UnicodeDecodeError, TypeError, ValueError):
        config = None  # Keras says what is wrong with it below
    reject_code_layers(config)
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
        raise K2CError(f"bad JSON config {path}: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(config, dict) or "class_name" not in config or "config" not in config:
        raise K2CError(f"bad JSON config {path}: not a Keras model config (expected the output of model.to_json())")
    reject_code_layers(config)
    model = _model_from_config(config, text, path)
    weights_path = _find_weights(path) if weights is None else Path(weights)
    if not weights_path.is_file():
        raise K2CError(f"weights file not found: {weights_path}")
    _install_weights(model, _read_weight_pickle(weights_path), weights_path)
    return model


def _model_from_config(config: dict[str, Any], text: str, path: Path) -> keras.Model:
    """Keras 3 configs carry a "module" key; Keras 2 ones (the thesis) need the legacy reader."""
    import keras

    import_layer_packages(config)
    try:
        if "module" in config:
            model = keras.models.model_from_json(text)
        else:
            from keras.src.legacy.saving import saving_utils

            model = saving_utils.model_from_config(config)
    except Exception as exc:  # unknown layer classes, malformed layer configs, ...
        raise K2CError(f"cannot rebuild a model from JSON config {path}: {_first_line(exc)}") from None
    if not isinstance(model, keras.Model):
        raise K2CError(f"JSON config {path} describes a {type(model).__name__}, not a model")
    if not model.built:
        raise K2CError(
            f"JSON config {path} defines no input shape, so its weights cannot be placed; "
            "give the model a keras.Input(shape=...)"
        )
    return model


#: Layer classes that carry Python code: Keras' safe mode refuses to load them, and they
#: have no hardware equivalent anyway, so they are named as unsupported layers up front.
CODE_LAYERS: tuple[str, ...] = ("Lambda",)


def reject_code_layers(config: Any) -> None:
    """Raise the unsupported-layer error for a Lambda (any CODE_LAYERS class) anywhere in a
    model config, nested models included, before Keras' safe-mode loading refuses it with a
    message about deserialization."""
    for class_name, name in _config_layers(config):
        if class_name in CODE_LAYERS:
            raise unsupported_layer(class_name, name)


def import_layer_packages(config: Any) -> None:
    """Import the packages whose layers a model config names (HGQ2's `hgq`, `qkeras`), so that Keras
    can deserialize them; a missing one is one clear error saying what to install."""
    stack, modules = [config], set()
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("module"), str):
                modules.add(item["module"].split(".")[0])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    if "hgq" in modules:
        try:
            import hgq  # noqa: F401  (registers its layers with Keras)
        except ImportError:
            raise K2CError(
                "the model holds HGQ2 layers (package 'hgq'), which is not installed: "
                "pip install 'keras2clash[hgq]' (or hgq2)"
            ) from None
    if "qkeras" in modules:
        try:
            import qkeras.qlayers  # noqa: F401  (registers its layers and quantizers with Keras)
        except ImportError as exc:
            raise K2CError(
                f"the model holds QKeras layers (package 'qkeras'), which cannot be imported ({exc}): "
                "install qkeras-v3 as scripts/install_qkeras.sh does (docs/guide/quantization-aware.md)"
            ) from None


def _config_layers(node: Any) -> list[tuple[str, str]]:
    """(class name, layer name) of every object in a config that looks like a layer."""
    found: list[tuple[str, str]] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            cfg = item.get("config")
            if isinstance(item.get("class_name"), str) and isinstance(cfg, dict):
                found.append((item["class_name"], str(cfg.get("name", item.get("name", "?")))))
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return found


def _find_weights(config_path: Path) -> Path:
    """The pickled weights beside a JSON config, in the documented search order."""
    candidates = [config_path.with_suffix(s) for s in _WEIGHT_SUFFIXES]
    candidates += [config_path.parent / n for n in _WEIGHT_FILENAMES]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    tried = ", ".join(c.name for c in candidates)
    raise K2CError(
        f"no weights found for JSON config {config_path}: looked for {tried} in {config_path.parent}; pass weights=PATH"
    )


def _read_weight_pickle(path: Path) -> list[np.ndarray]:
    """Unpickle a `model.get_weights()` list and check it is a list of numeric arrays."""
    try:
        with path.open("rb") as handle:
            obj = pickle.load(handle)
    except Exception as exc:  # UnpicklingError, EOFError, missing classes, ...
        raise K2CError(f"cannot read weights pickle {path}: {type(exc).__name__}: {_first_line(exc)}") from None
    if not isinstance(obj, (list, tuple)):
        raise K2CError(
            f"weights pickle {path} holds a {type(obj).__name__}, expected the list returned by model.get_weights()"
        )
    arrays: list[np.ndarray] = []
    for index, item in enumerate(obj):
        array = np.asarray(item)
        if array.dtype.kind not in "fiu":
            raise K2CError(f"weights pickle {path}: entry {index} is not a numeric array (dtype {array.dtype})")
        arrays.append(array)
    return arrays


def _install_weights(model: keras.Model, arrays: list[np.ndarray], path: Path) -> None:
    """Check count and shapes against the config before `set_weights` (whose errors are vague)."""
    variables = model.weights
    if len(arrays) != len(variables):
        raise K2CError(f"weights pickle {path} has {len(arrays)} arrays but the model config needs {len(variables)}")
    for index, (array, variable) in enumerate(zip(arrays, variables)):
        if tuple(array.shape) != tuple(variable.shape):
            raise K2CError(
                f"weights pickle {path}: array {index} has shape {tuple(array.shape)} but "
                f"weight '{variable.path}' needs {tuple(variable.shape)}"
            )
    model.set_weights(arrays)
