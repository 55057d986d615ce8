"""Test data: an `.npz` with inputs `x` and labels `y`, checked against the model.

Accepted keys: `x`/`y`, or `x_test`/`y_test`. Labels may be integers or one-hot rows.
A regression model or an autoencoder has real-valued targets `y` (one row of `n_out`
values per sample), or none at all (its outputs are then compared with Keras only):
`load_test_set` tells the two tasks apart (`detect_task`). Everything that can be wrong
with a data file is reported here, once, before any simulation starts.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from keras2clash.errors import K2CError

TASKS = ("auto", "classifier", "regression")
"""How a test set is scored: `classifier` (accuracy of the predicted class against labels),
`regression` (the output values against Keras and against real-valued targets: maximum
absolute error and mean squared error; an autoencoder is one), `auto` (`detect_task`)."""


@dataclass(frozen=True)
class Dataset:
    x: np.ndarray  # (N, *input_shape) float; a model of several inputs: its first input's
    y: np.ndarray | None  # classifier: (N,) int64 class labels; regression: (N, n_out) float64 targets, or None
    task: str = "classifier"
    inputs: tuple[np.ndarray, ...] = ()  # a model of several inputs: every input, in the model's order

    def __len__(self) -> int:
        return len(self.x)

    @property
    def model_inputs(self) -> np.ndarray | list[np.ndarray]:
        """What the golden model and Keras take: `x`, or the list of every input."""
        return list(self.inputs) if self.inputs else self.x

    def head(self, n: int | None) -> Dataset:
        if n is None:
            return self
        return Dataset(self.x[:n], None if self.y is None else self.y[:n], self.task, tuple(a[:n] for a in self.inputs))


def read_npz(path: Path | str, what: str = "data") -> dict[str, np.ndarray]:
    """All arrays of an .npz (no pickles), or one clear error naming the `what` file."""
    path = Path(path)
    if not path.is_file():
        raise K2CError(f"{what} file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise K2CError(f"{what} file {path} is not a readable .npz: {exc}") from None


def _inputs(path: Path, x: np.ndarray, input_shape: tuple[int, ...]) -> np.ndarray:
    """The inputs checked against the model: shape (a 1-D sequence may come without the IR's
    row axis), numbers, finite."""
    if x.ndim == 3 and (1, *x.shape[1:]) == tuple(input_shape):  # a 1-D sequence (frontend.registry.image_shape)
        x = x.reshape(len(x), *input_shape)
    if x.ndim < 2 or tuple(x.shape[1:]) != tuple(input_shape):
        raise K2CError(
            f"data file {path}: inputs have shape {tuple(x.shape)}, the model expects "
            f"(N, {', '.join(map(str, input_shape))})"
        )
    if not np.issubdtype(x.dtype, np.number):
        raise K2CError(f"data file {path}: inputs are {x.dtype}, not numbers")
    if not np.all(np.isfinite(x)):
        raise K2CError(f"data file {path}: inputs contain NaN or infinity")
    if len(x) == 0:
        raise K2CError(f"data file {path} holds no samples")
    return x


def load_inputs(path: Path | str, input_shape: tuple[int, ...]) -> np.ndarray:
    """Only the inputs `x` (or `x_test`) of an .npz, checked against the model (labels, if
    any, are not read): for `predict` and `trace`."""
    path = Path(path)
    arrays = read_npz(path, "data")
    x = arrays.get("x", arrays.get("x_test"))
    if x is None:
        raise K2CError(f"data file {path} needs an array 'x' (inputs); it has {sorted(arrays)}")
    return _inputs(path, x, input_shape).astype(np.float64)


def load_named_inputs(path: Path | str, inputs: Sequence[tuple[str, tuple[int, ...]]]) -> list[np.ndarray]:
    """The inputs of a model of several inputs from an .npz: `x_<input name>` per input
    ((name, shape) in the model's order), each checked against its shape and all with the
    same number of samples: for `predict` and `trace`."""
    path = Path(path)
    arrays = read_npz(path, "data")
    missing = [f"x_{name}" for name, _ in inputs if f"x_{name}" not in arrays]
    if missing:
        raise K2CError(
            f"data file {path} needs an array per model input ({', '.join(missing)}); it has {sorted(arrays)}"
        )
    xs = [_inputs(path, arrays[f"x_{name}"], shape).astype(np.float64) for name, shape in inputs]
    if len({len(x) for x in xs}) != 1:
        counts = ", ".join(f"x_{name} {len(x)}" for (name, _), x in zip(inputs, xs))
        raise K2CError(f"data file {path}: the inputs have different numbers of samples ({counts})")
    return xs


def load_dataset(path: Path | str, input_shape: tuple[int, ...], n_classes: int) -> Dataset:
    """Load and validate a test set for a model with `input_shape` and `n_classes` outputs."""
    path = Path(path)
    arrays = read_npz(path, "data")
    x = arrays.get("x", arrays.get("x_test"))
    y = arrays.get("y", arrays.get("y_test"))
    if x is None or y is None:
        raise K2CError(f"data file {path} needs arrays 'x' and 'y'; it has {sorted(arrays)}")
    x = _inputs(path, x, input_shape)
    return Dataset(x.astype(np.float64), _labels(path, y, len(x), n_classes))


def _labels(path: Path, y: np.ndarray, n: int, n_classes: int) -> np.ndarray:
    """Class labels (integers, whole floats or one-hot rows) as (N,) int64, checked."""
    if y.ndim == 2 and y.shape[1] == n_classes:
        y = np.argmax(y, axis=1)
    if y.ndim != 1 or len(y) != n:
        raise K2CError(f"data file {path}: labels have shape {tuple(y.shape)}, expected ({n},) or ({n}, {n_classes})")
    if not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.floating) or y.dtype == np.bool_):
        raise K2CError(f"data file {path}: labels are {y.dtype}, not class numbers")
    if np.issubdtype(y.dtype, np.floating):  # 2.0 is class 2; 2.5 or -0.5 is no class (never truncated)
        whole = np.isfinite(y) & (y == np.floor(y))
        if not np.all(whole):
            bad = int(np.argmin(whole))
            raise K2CError(
                f"data file {path}: labels must be whole class numbers 0..{n_classes - 1}; "
                f"label {bad} is {float(y[bad])}"
            )
    if len(y) and (y.min() < 0 or y.max() >= n_classes):
        raise K2CError(f"data file {path}: labels must be classes 0..{n_classes - 1}")
    return y.astype(np.int64)


def check_task(task: str) -> None:
    if task not in TASKS:
        raise K2CError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")


def detect_task(y: np.ndarray | None, n_out: int, output_activation: str, task: str = "auto") -> str:
    """`classifier` or `regression` for a test set's labels/targets `y` (None: the file has
    none) and the model's output layer; `task` other than "auto" decides.

    A softmax output is a classifier's; then no labels, a single output, or 2-D targets
    that are not one-hot rows mean regression (an autoencoder's targets are its inputs, or
    absent); 1-D integer labels and one-hot rows mean a classifier."""
    check_task(task)
    if task != "auto":
        return task
    if output_activation == "softmax":
        return "classifier"
    if y is None or n_out == 1:
        return "regression"
    if y.ndim == 1:
        return "classifier"
    one_hot = y.ndim == 2 and y.shape[1] == n_out and np.all((y == 0) | (y == 1)) and np.all(np.sum(y, axis=1) == 1)
    return "classifier" if one_hot else "regression"


def load_test_set(
    path: Path | str, input_shape: tuple[int, ...], n_out: int, output_activation: str, task: str = "auto"
) -> Dataset:
    """A test set for a classifier (`load_dataset`'s checks) or a regression model (inputs,
    and real targets reshaped to (N, n_out) when the file has `y`), the task chosen by
    `detect_task`."""
    path = Path(path)
    arrays = read_npz(path, "data")
    x = arrays.get("x", arrays.get("x_test"))
    y = arrays.get("y", arrays.get("y_test"))
    kind = detect_task(y, n_out, output_activation, task)
    if x is None or (y is None and kind == "classifier"):
        raise K2CError(
            f"data file {path} needs arrays 'x' and 'y'; it has {sorted(arrays)} (a regression "
            "model or an autoencoder needs only x: --task regression)"
        )
    x = _inputs(path, x, input_shape).astype(np.float64)
    if kind == "classifier":
        return Dataset(x, _labels(path, y, len(x), n_out))
    return Dataset(x, None if y is None else _targets(path, y, len(x), n_out), "regression")


def load_head_sets(
    path: Path | str,
    input_shape: tuple[int, ...],
    heads: Sequence[tuple[str, int, str, str]],
    inputs: Sequence[tuple[str, tuple[int, ...]]] = (),
) -> list[Dataset]:
    """The test set of a model of several outputs or inputs: the inputs `x` (several inputs,
    (name, shape) each in `inputs`: `x_<input name>` per input, `load_named_inputs`), and per
    output `y_<name>` (its labels or targets, or `y` for a model of one output; an output
    without them is compared with Keras only). `heads` gives each output's (layer name, n_out,
    activation, task) as `load_test_set` takes them."""
    path = Path(path)
    arrays = read_npz(path, "data")
    several: tuple[np.ndarray, ...] = ()
    if inputs:
        several = tuple(load_named_inputs(path, inputs))
        x = several[0]
    else:
        found = arrays.get("x", arrays.get("x_test"))
        if found is None:
            raise K2CError(
                f"data file {path} needs an array 'x' (and 'y_<output>' per output); it has {sorted(arrays)}"
            )
        x = _inputs(path, found, input_shape).astype(np.float64)
    sets = []
    for name, n_out, activation, task in heads:
        y = arrays.get(f"y_{name}")
        if y is None and len(heads) == 1:
            y = arrays.get("y", arrays.get("y_test"))
        kind = "regression" if y is None else detect_task(y, n_out, activation, task)
        if y is None:
            sets.append(Dataset(x, None, "regression", several))
        elif kind == "classifier":
            sets.append(Dataset(x, _labels(path, y, len(x), n_out), "classifier", several))
        else:
            sets.append(Dataset(x, _targets(path, y, len(x), n_out), "regression", several))
    return sets


def _targets(path: Path, y: np.ndarray, n: int, n_out: int) -> np.ndarray:
    """Real-valued targets as (N, n_out) float64: one value per output, finite."""
    if len(y) != n or y.size != n * n_out:
        raise K2CError(
            f"data file {path}: targets have shape {tuple(y.shape)}, expected ({n}, {n_out}) "
            f"(one value per model output)"
        )
    if not (np.issubdtype(y.dtype, np.number) or y.dtype == np.bool_):
        raise K2CError(f"data file {path}: targets are {y.dtype}, not numbers")
    if not np.all(np.isfinite(y)):
        raise K2CError(f"data file {path}: targets contain NaN or infinity")
    return y.astype(np.float64).reshape(n, n_out)
