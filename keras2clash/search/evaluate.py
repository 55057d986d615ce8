"""One candidate's figures: hardware from the exact model, accuracy from the golden model.

Why in this order: the hardware figures depend on the network's structure, formats and
knobs, never on its weights, so they are computed first on the untrained model (the exact
model answers in milliseconds) and a candidate that breaks a hardware constraint is not
trained at all. Training, the expensive part, depends on the network only: its model is
kept under `models/<network key>.keras`, so candidates that share a network and differ in
hardware (formats, knobs, pipeline) train once. The accuracy is the golden model's (the
hardware's outputs, bit for bit) at the candidate's formats, on the held-out validation
split (what the search selects on) and on the test set (reported beside it).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.hw.plan import LayerFormats, compute_layers
from keras2clash.hw.resources import HwFigures
from keras2clash.search.description import Constraints, DataSpec, Description, Goals, TrainingSpec
from keras2clash.search.space import Candidate, NetworkSpec, build_model

DIGITS_SPLIT_SEED = 2021
"""The examples' split of sklearn's digits (examples/digits_dense, digits8.py): the same
360 test images, so a search's test accuracy compares with the examples'."""


@dataclass(frozen=True)
class SearchData:
    """Images (N, H, W, C) or vectors (N, F), integer labels; the dense template flattens."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int

    @staticmethod
    def shaped(x: np.ndarray, template: str) -> np.ndarray:
        return x.reshape(len(x), -1) if template == "dense" else x

    def input_shape(self, template: str) -> tuple[int, ...]:
        return tuple(self.shaped(self.x_test[:1], template).shape[1:])


def load_data(spec: DataSpec, seed: int) -> SearchData:
    """The description's data, with `validation` of the training set held out (stratified,
    seeded)."""
    from sklearn.model_selection import train_test_split

    from keras2clash.data import read_npz

    if spec.dataset == "digits":
        from sklearn.datasets import load_digits

        digits = load_digits()
        x = (digits.images / 16.0).astype(np.float32)[..., None]
        x_tr, x_te, y_tr, y_te = train_test_split(x, digits.target, test_size=0.2, stratify=digits.target,
                                                  random_state=DIGITS_SPLIT_SEED)
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
    x_fit, x_val, y_fit, y_val = train_test_split(x_tr, y_tr, test_size=spec.validation, stratify=y_tr,
                                                  random_state=seed)
    classes = int(max(y_tr.max(), y_te.max())) + 1
    return SearchData(x_fit, y_fit.astype(np.int64), x_val, y_val.astype(np.int64), x_te, y_te.astype(np.int64),
                      classes)


def _labels(y: np.ndarray) -> np.ndarray:
    return (np.argmax(y, axis=1) if y.ndim == 2 else y).astype(np.int64)


# --- hardware ----------------------------------------------------------------------------


def plan_candidate(candidate: Candidate, keras_model: Any) -> Any:
    """The candidate's planned network (`network.Network`): formats per compute layer, its
    knobs (clamped to each layer's filters and window) or the balanced allocation within
    its budget, its pipeline levels, its softmax mode."""
    from keras2clash.network import load_model, plan_network

    _, graph = load_model(keras_model)
    return plan_network(graph, **plan_options(candidate, graph), keras_model=keras_model)


def plan_options(candidate: Candidate, graph: Any) -> dict[str, Any]:
    """The `plan_network` (and `api.emit`) keyword arguments of a candidate's hardware."""
    hw = candidate.hardware
    layers = compute_layers(graph)
    fmts = hw.formats
    options: dict[str, Any] = {"fmt": fmts[0], "pipeline": hw.pipeline, "softmax": hw.softmax}
    if len(set(fmts)) > 1:
        options["layer_formats"] = {layer.name: LayerFormats(f, f, f) for layer, f in zip(layers, fmts)}
    if hw.budget is not None:
        options["dsp_budget"] = hw.budget
    else:
        from keras2clash.hw.plan import make_plan

        plans = [p for p in make_plan(graph, fmts[0]) if p.is_compute]
        assert hw.parallelism is not None and hw.cycles is not None
        options["parallelism"] = [min(pe, p.filters) for pe, p in zip(hw.parallelism, plans)]
        options["cycles"] = [min(c, p.window) for c, p in zip(hw.cycles, plans)]
    return options


def hardware_figures(network: Any) -> HwFigures:
    """The exact hardware model's figures of a planned network."""
    from keras2clash.hw.hwmodel import figures

    return figures(network.plans)


# --- training ----------------------------------------------------------------------------


def train(spec: NetworkSpec, data: SearchData, training: TrainingSpec, seed: int) -> tuple[Any, int]:
    """A freshly trained model of `spec` and the epochs it ran (deterministic for a seed:
    `keras.utils.set_random_seed`, unshuffled validation, CPU)."""
    import keras

    keras.utils.set_random_seed(seed)
    model = build_model(spec, data.input_shape(spec.template), data.classes)
    model.compile(optimizer=keras.optimizers.Adam(training.learning_rate),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    callbacks = []
    validation = None
    if training.patience:
        callbacks.append(keras.callbacks.EarlyStopping(monitor="val_loss", patience=training.patience,
                                                       restore_best_weights=True))
        validation = (data.shaped(data.x_val, spec.template), data.y_val)
    history = model.fit(data.shaped(data.x_train, spec.template), data.y_train, epochs=training.epochs,
                        batch_size=training.batch_size, validation_data=validation, callbacks=callbacks,
                        verbose=0)
    return model, len(history.history["loss"])


def trained_model(spec: NetworkSpec, data: SearchData, training: TrainingSpec, seed: int,
                  models_dir: Path | None) -> tuple[Any, int, bool]:
    """The trained model of a network: from `models_dir` if a candidate with the same
    network trained it already, else trained now and saved there (atomically: a worker on
    the same network may be saving it too). Returns (model, epochs run, cached)."""
    import keras

    path = None if models_dir is None else Path(models_dir) / f"{spec.key}.keras"
    if path is not None and path.is_file():
        return keras.models.load_model(path, compile=False), 0, True
    model, epochs = train(spec, data, training, seed)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{spec.key}.", suffix=".keras", dir=path.parent)
        os.close(fd)
        try:
            model.save(tmp)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return model, epochs, False


def golden_accuracy(network: Any, x: np.ndarray, y: np.ndarray) -> float:
    """The hardware's accuracy (golden model, bit for bit) of a planned network."""
    from keras2clash.quant import golden

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
    epochs: int = 0
    accuracy: float = 0.0  # golden model, validation split (0 when not trained)
    test_accuracy: float = 0.0  # golden model, test set
    keras_accuracy: float = 0.0  # Keras float, test set
    seconds: float = 0.0

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.violations.values())

    def value(self, metric: str) -> float:
        return float(getattr(self, metric))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def violations(fig: HwFigures, clock_mhz: float, limits: Constraints, accuracy: float | None = None) -> dict[str, float]:
    """Each constraint's relative excess (`value / limit - 1` for a maximum, the other way
    for a minimum): <= 0 is met. NSGA-II ranks feasible candidates first and infeasible
    ones by their total excess (optuna's constraints_func)."""
    out: dict[str, float] = {}
    for name, value, limit in (("multipliers", fig.multipliers, limits.multipliers),
                               ("memory_bits", fig.memory_bits, limits.memory_bits),
                               ("latency", fig.latency, limits.latency), ("ii", fig.ii, limits.ii)):
        if limit is not None:
            out[name] = value / limit - 1.0
    if limits.images_per_second is not None:
        out["images_per_second"] = 1.0 - fig.images_per_second(clock_mhz) / limits.images_per_second
    if limits.accuracy is not None and accuracy is not None:
        out["accuracy"] = limits.accuracy - accuracy
    return out


def evaluate(candidate: Candidate, desc: Description, data: SearchData, models_dir: Path | None) -> Evaluation:
    """Hardware figures (exact model), then, if the hardware constraints hold, training and
    the golden model's accuracy at the candidate's formats."""
    import keras

    started = time.perf_counter()
    spec = candidate.network
    keras.utils.set_random_seed(desc.seed)
    untrained = build_model(spec, data.input_shape(spec.template), data.classes)
    network = plan_candidate(candidate, untrained)
    fig = hardware_figures(network)
    clock = desc.constraints.clock_mhz
    ev = Evaluation(network=spec.describe(), hardware=candidate.hardware.describe(), model_key=spec.key,
                    parallelism=list(fig.parallelism), cycles=list(fig.cycles), multipliers=fig.multipliers,
                    ii=float(fig.ii), latency=int(fig.latency), memory_bits=int(fig.memory_bits),
                    efficiency=float(fig.efficiency), images_per_second=float(fig.images_per_second(clock)),
                    violations=violations(fig, clock, desc.constraints))
    if ev.feasible:
        model, ev.epochs, ev.cached = trained_model(spec, data, desc.training, desc.seed, models_dir)
        trained = plan_candidate(candidate, model)
        # the knobs must be the ones measured (a budget's allocation does not depend on weights)
        assert [p.pe for p in trained.plans if p.is_compute] == ev.parallelism
        ev.trained = True
        ev.accuracy = golden_accuracy(trained, data.shaped(data.x_val, spec.template), data.y_val)
        ev.test_accuracy = golden_accuracy(trained, data.shaped(data.x_test, spec.template), data.y_test)
        x_test = data.shaped(data.x_test, spec.template)
        ev.keras_accuracy = float(np.mean(np.argmax(model.predict(x_test, verbose=0), axis=1) == data.y_test))
        ev.violations = violations(fig, clock, desc.constraints, ev.accuracy)
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
