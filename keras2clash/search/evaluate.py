"""One candidate's figures: hardware from the exact model, accuracy from the golden model.

Why in this order: the hardware figures depend on the network's structure, formats and
knobs, never on its weights, so they are computed first on the untrained model (the exact
model answers in milliseconds) and a candidate that breaks a hardware constraint is not
trained at all. Training, the expensive part, depends on the network only: its model is
kept under `models/<network key>.keras`, so candidates that share a network and differ in
hardware (formats, knobs, pipeline) train once. The accuracy is the golden model's (the
hardware's outputs, bit for bit) at the candidate's formats, on data the model did not
train on: the held-out validation split, or with cross-validation every training image
predicted by its fold's model (what the search selects on; the candidate's own model is
then trained on the whole training set), and on the test set (reported beside it).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from keras2clash.data import read_npz
from keras2clash.design import DesignOptions
from keras2clash.errors import K2CError
from keras2clash.fsutil import umask
from keras2clash.hw.hwmodel import figures
from keras2clash.hw.plan import LayerFormats
from keras2clash.hw.planner import compute_layers, make_plan
from keras2clash.hw.resources import HwFigures
from keras2clash.network import load_model, plan_network
from keras2clash.quant import golden
from keras2clash.search.description import Constraints, DataSpec, Description, Goals, TrainingSpec
from keras2clash.search.space import Candidate, NetworkSpec, build_model

DIGITS_SPLIT_SEED = 2021
"""The examples' split of sklearn's digits (examples/digits_dense, digits8.py): the same
360 test images, so a search's test accuracy compares with the examples'."""


@dataclass(frozen=True)
class SearchData:
    """Images (N, H, W, C), sequences (N, steps, features) or vectors (N, F), integer
    labels, as stored; each template takes its own view of them (`shaped`).

    `x_train` is what the candidate's model trains on: the training set without the
    validation split, or (cross-validation) all of it, with `folds` the (fit, held-out)
    index pairs into it."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int
    folds: tuple[tuple[np.ndarray, np.ndarray], ...] = ()

    @staticmethod
    def shaped(x: np.ndarray, template: str) -> np.ndarray:
        """The inputs as `template`'s network takes them: the dense template flattens; the
        recurrent template reads the first axis after the examples as time and the rest as
        each step's features (an image row by row, a vector one value a step); the cnn
        template takes them as stored."""
        if template == "dense":
            return x.reshape(len(x), -1)
        if template == "recurrent":
            return x.reshape(len(x), x.shape[1] if x.ndim > 1 else 1, -1)
        return x

    def input_shape(self, template: str) -> tuple[int, ...]:
        return tuple(self.shaped(self.x_test[:1], template).shape[1:])


def load_data(spec: DataSpec, seed: int) -> SearchData:
    """The description's data: `validation` of the training set held out, or `folds`
    (stratified, seeded either way)."""
    from sklearn.model_selection import StratifiedKFold, train_test_split

    if spec.dataset == "digits":
        from sklearn.datasets import load_digits

        digits = load_digits()
        x = (digits.images / 16.0).astype(np.float32)[..., None]
        x_tr, x_te, y_tr, y_te = train_test_split(
            x, digits.target, test_size=0.2, stratify=digits.target, random_state=DIGITS_SPLIT_SEED
        )
    else:
        assert spec.train is not None and spec.test is not None
        train, test = read_npz(spec.train, "training data"), read_npz(spec.test, "test data")
        for what, arrays, path in (("training", train, spec.train), ("test", test, spec.test)):
            if "x" not in arrays or "y" not in arrays:
                raise K2CError(f"{what} data {path}: needs arrays x and y (has {', '.join(arrays) or 'none'})")
        x_tr, y_tr = train["x"].astype(np.float32), _labels(train["y"])
        x_te, y_te = test["x"].astype(np.float32), _labels(test["y"])
        if x_tr.shape[1:] != x_te.shape[1:]:
            raise K2CError(f"training inputs {x_tr.shape[1:]} and test inputs {x_te.shape[1:]} differ in shape")
    classes = int(max(y_tr.max(), y_te.max())) + 1
    y_tr, y_te = y_tr.astype(np.int64), y_te.astype(np.int64)
    if spec.folds:
        splitter = StratifiedKFold(spec.folds, shuffle=True, random_state=seed)
        folds = tuple((fit, held) for fit, held in splitter.split(x_tr.reshape(len(x_tr), -1), y_tr))
        return SearchData(x_tr, y_tr, x_tr[:0], y_tr[:0], x_te, y_te, classes, folds)
    x_fit, x_val, y_fit, y_val = train_test_split(
        x_tr, y_tr, test_size=spec.validation, stratify=y_tr, random_state=seed
    )
    return SearchData(x_fit, y_fit, x_val, y_val, x_te, y_te, classes)


def _labels(y: np.ndarray) -> np.ndarray:
    return (np.argmax(y, axis=1) if y.ndim == 2 else y).astype(np.int64)


# --- hardware ----------------------------------------------------------------------------


def plan_candidate(candidate: Candidate, keras_model: Any) -> Any:
    """The candidate's planned network (`network.Network`): formats per compute layer, its
    knobs (clamped to each layer's filters and window) or the balanced allocation within
    its budget, its strategies (a latency layer's adder graph solved from `keras_model`'s
    weights), its pipeline levels, its softmax mode."""
    _, graph = load_model(keras_model)
    return plan_network(graph, plan_options(candidate, graph), keras_model=keras_model)


def plan_options(candidate: Candidate, graph: Any) -> DesignOptions:
    """The design (`plan_network`'s and `api.emit`'s) of a candidate's hardware."""
    hw = candidate.hardware
    layers = compute_layers(graph)
    fmts = hw.formats
    layer_formats = (
        {layer.name: LayerFormats(f, f, f) for layer, f in zip(layers, fmts)} if len(set(fmts)) > 1 else None
    )
    design = DesignOptions.of(fmts[0], pipeline=hw.pipeline, softmax=hw.softmax, layer_formats=layer_formats)
    if hw.strategies:
        design = replace(design, strategy=hw.strategies, logic_budget=hw.logic_budget)
    if hw.budget is not None:
        return replace(design, dsp_budget=hw.budget)
    plans = [p for p in make_plan(graph, fmts[0]) if p.is_compute]
    assert hw.parallelism is not None and hw.cycles is not None
    return replace(
        design,
        parallelism=tuple(min(pe, p.filters) for pe, p in zip(hw.parallelism, plans)),
        cycles=tuple(min(c, p.window) for c, p in zip(hw.cycles, plans)),
    )


def hardware_figures(network: Any) -> HwFigures:
    """The exact hardware model's figures of a planned network."""
    return figures(network.plans)


# --- training ----------------------------------------------------------------------------


def train(
    spec: NetworkSpec,
    data: SearchData,
    training: TrainingSpec,
    seed: int,
    *,
    fit: np.ndarray | None = None,
    held: np.ndarray | None = None,
    epochs: int | None = None,
) -> tuple[Any, int]:
    """A freshly trained model of `spec` and the epochs it ran (deterministic for a seed:
    `keras.utils.set_random_seed`, CPU). It trains on `x_train` (or its rows `fit`), with
    early stopping on the validation split (or the rows `held`) when `patience` is set and
    `epochs` (a fixed count: the refit after cross-validation) is not."""
    import keras

    keras.utils.set_random_seed(seed)
    model = build_model(spec, data.input_shape(spec.template), data.classes)
    model.compile(
        optimizer=keras.optimizers.Adam(training.learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    x = data.shaped(data.x_train, spec.template)
    y = data.y_train
    x_fit, y_fit = (x, y) if fit is None else (x[fit], y[fit])
    callbacks = []
    validation = None
    if training.patience and epochs is None:
        x_held, y_held = (data.shaped(data.x_val, spec.template), data.y_val) if held is None else (x[held], y[held])
        callbacks.append(
            keras.callbacks.EarlyStopping(monitor="val_loss", patience=training.patience, restore_best_weights=True)
        )
        validation = (x_held, y_held)
    history = model.fit(
        x_fit,
        y_fit,
        epochs=epochs or training.epochs,
        batch_size=training.batch_size,
        validation_data=validation,
        callbacks=callbacks,
        verbose=0,
    )
    ran = len(history.history["loss"])
    if callbacks and callbacks[0].stopped_epoch:  # the best weights are those of an earlier epoch
        ran = max(1, ran - training.patience)
    return model, ran


@dataclass
class TrainedNetwork:
    """A network's trained models: the candidate's own (`model`, what is emitted), and with
    cross-validation the fold models (fold i did not train on fold i's held-out rows)."""

    model: Any
    folds: list[Any]
    epochs: list[int]  # epochs run: the model's, or each fold's then the refit's
    cached: bool


def publish(tmp: str | Path, path: Path) -> None:
    """Move a finished temporary file into place with the umask's permissions (mkstemp
    makes files private)."""
    os.chmod(tmp, 0o666 & ~umask())
    os.replace(tmp, path)


def _save(model: Any, path: Path) -> None:
    """Save atomically: a worker on the same network may be saving it too."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".keras", dir=path.parent)
    os.close(fd)
    try:
        model.save(tmp)
        publish(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def trained_network(
    spec: NetworkSpec, data: SearchData, training: TrainingSpec, seed: int, models_dir: Path | None
) -> TrainedNetwork:
    """The trained models of a network: from `models_dir` if a candidate with the same
    network trained them already (`<key>.json` is written last: its presence says every
    model is there), else trained now and saved there."""
    import json

    import keras

    root = None if models_dir is None else Path(models_dir)
    index = None if root is None else root / f"{spec.key}.json"
    n = len(data.folds)
    names = [f"{spec.key}.fold{i}.keras" for i in range(n)] + [f"{spec.key}.keras"]
    if index is not None and index.is_file():
        epochs = json.loads(index.read_text())["epochs"]
        models = [keras.models.load_model(root / name, compile=False) for name in names]
        return TrainedNetwork(models[-1], models[:-1], epochs, True)
    folds, epochs = [], []
    for fit, held in data.folds:
        model, ran = train(spec, data, training, seed, fit=fit, held=held)
        folds.append(model)
        epochs.append(ran)
    refit = round(sum(epochs) / n) if n and training.patience else None
    model, ran = train(spec, data, training, seed, epochs=refit)
    epochs.append(ran)
    if root is not None:
        for m, name in zip([*folds, model], names):
            _save(m, root / name)
        fd, tmp = tempfile.mkstemp(prefix=f".{spec.key}.", suffix=".json", dir=root)
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps({"network": spec.describe(), "epochs": epochs}) + "\n")
        publish(tmp, index)
    return TrainedNetwork(model, folds, epochs, False)


def golden_accuracy(network: Any, x: np.ndarray, y: np.ndarray) -> float:
    """The hardware's accuracy (golden model, bit for bit) of a planned network."""
    classes = golden.predict(network.plans, network.params, golden.quantize_inputs(network.plans, x))[1]
    return float(np.mean(classes == y))


# --- the evaluation ----------------------------------------------------------------------


@dataclass
class Evaluation:
    """Everything the search records about a candidate (stored with its trial)."""

    network: str
    hardware: str
    model_key: str
    parallelism: list[int]
    cycles: list[int]
    multipliers: int
    ii: float
    latency: int
    memory_bits: int
    efficiency: float
    images_per_second: float
    violations: dict[str, float] = field(default_factory=dict)  # > 0: by how much (relative) a limit is broken
    trained: bool = False
    cached: bool = False  # the trained network came from models/ (another candidate trained it)
    epochs: int = 0  # the candidate's model (0: cached)
    accuracy: float = 0.0  # golden model, validation split or cross-validation (0 when not trained)
    test_accuracy: float = 0.0  # golden model, test set
    keras_accuracy: float = 0.0  # Keras float, test set
    seconds: float = 0.0
    strategies: list[str] = field(default_factory=list)  # per compute layer ([]: resource for every one)
    logic_cells: int = 0  # the adder graphs' LUT4 cells (estimate)

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.violations.values())

    def value(self, metric: str) -> float:
        return float(getattr(self, metric))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def violations(
    fig: HwFigures, clock_mhz: float, limits: Constraints, accuracy: float | None = None
) -> dict[str, float]:
    """Each constraint's relative excess (`value / limit - 1` for a maximum, the other way
    for a minimum): <= 0 is met. NSGA-II ranks feasible candidates first and infeasible
    ones by their total excess (optuna's constraints_func)."""
    out: dict[str, float] = {}
    for name, value, limit in (
        ("multipliers", fig.multipliers, limits.multipliers),
        ("logic_cells", fig.logic_cells, limits.logic_cells),
        ("memory_bits", fig.memory_bits, limits.memory_bits),
        ("latency", fig.latency, limits.latency),
        ("ii", fig.ii, limits.ii),
    ):
        if limit is not None:
            out[name] = value / limit - 1.0
    if limits.images_per_second is not None:
        out["images_per_second"] = 1.0 - fig.images_per_second(clock_mhz) / limits.images_per_second
    if limits.accuracy is not None and accuracy is not None:
        out["accuracy"] = limits.accuracy - accuracy
    return out


def _hardware_evaluation(candidate: Candidate, fig: HwFigures, desc: Description) -> Evaluation:
    """An evaluation's hardware part: the exact model's figures, the hardware constraints."""
    clock = desc.constraints.clock_mhz
    return Evaluation(
        network=candidate.network.describe(),
        hardware=candidate.hardware.describe(),
        model_key=candidate.network.key,
        parallelism=list(fig.parallelism),
        cycles=list(fig.cycles),
        multipliers=fig.multipliers,
        ii=float(fig.ii),
        latency=int(fig.latency),
        memory_bits=int(fig.memory_bits),
        efficiency=float(fig.efficiency),
        images_per_second=float(fig.images_per_second(clock)),
        violations=violations(fig, clock, desc.constraints),
        strategies=fig.strategies if candidate.hardware.strategies else [],
        logic_cells=fig.logic_cells,
    )


def evaluate(candidate: Candidate, desc: Description, data: SearchData, models_dir: Path | None) -> Evaluation:
    """Hardware figures (exact model), then, if the hardware constraints hold, training and
    the golden model's accuracy at the candidate's formats.

    A space with the latency strategy (`HardwareSpace.weights_matter`) has figures that
    depend on the trained weights (the solved adder graphs, and which layers auto builds at
    latency): every candidate is trained, and its figures and constraints are the trained
    network's."""
    import keras

    started = time.perf_counter()
    spec = candidate.network
    if not desc.hardware.weights_matter:  # the constraints first: training only what can be built
        keras.utils.set_random_seed(desc.seed)
        untrained = build_model(spec, data.input_shape(spec.template), data.classes)
        ev = _hardware_evaluation(candidate, hardware_figures(plan_candidate(candidate, untrained)), desc)
        if not ev.feasible:
            ev.seconds = time.perf_counter() - started
            return ev
    net = trained_network(spec, data, desc.training, desc.seed, models_dir)
    trained = plan_candidate(candidate, net.model)
    fig = hardware_figures(trained)
    measured = _hardware_evaluation(candidate, fig, desc)
    if desc.hardware.weights_matter:
        ev = measured
    else:  # the untrained network's figures must be the trained one's (no weight changes them)
        assert measured == ev, (measured, ev)
    ev.epochs, ev.cached = net.epochs[-1], net.cached
    ev.trained = True
    x = data.shaped(data.x_train, spec.template)
    if data.folds:  # every training image, predicted by the fold model that did not train on it
        right = sum(
            golden_accuracy(plan_candidate(candidate, m), x[held], data.y_train[held]) * len(held)
            for m, (_, held) in zip(net.folds, data.folds)
        )
        ev.accuracy = float(right / len(x))
    else:
        ev.accuracy = golden_accuracy(trained, data.shaped(data.x_val, spec.template), data.y_val)
    x_test = data.shaped(data.x_test, spec.template)
    ev.test_accuracy = golden_accuracy(trained, x_test, data.y_test)
    ev.keras_accuracy = float(np.mean(np.argmax(net.model.predict(x_test, verbose=0), axis=1) == data.y_test))
    ev.violations = violations(fig, desc.constraints.clock_mhz, desc.constraints, ev.accuracy)
    ev.seconds = time.perf_counter() - started
    return ev


def objective_values(ev: Evaluation, goals: Goals) -> list[float]:
    """What optuna optimises: the front's metrics, or the weighted fitness."""
    if goals.pareto:
        return [ev.value(m) for m in goals.pareto]
    return [fitness(ev, goals)]


def fitness(ev: Evaluation, goals: Goals) -> float:
    """The weighted sum of the goals' metrics (maximised)."""
    return sum(w * ev.value(m) for m, w in goals.weights.items())
