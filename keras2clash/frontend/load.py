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


