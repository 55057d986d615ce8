"""The search description: a YAML (or JSON) file read into typed, validated records.

Why typed records: the description is read once, by the CLI, before anything slow starts,
and every later stage (sampling, training, the hardware model, the results) reads fields
that are known to exist and to be in range. Every mistake is one `K2CError` naming the
file and the key path (`hardware.parallelism[2]`), including unknown keys: a misspelt
`constriants:` would otherwise silently search without constraints.

The format (docs/guide/search.md, with a complete example):

- `name`, `seed`, `trials` (finished trials the search stops at), `population` (NSGA-II);
- `data`: `dataset: digits` (sklearn's 8x8 digits, the examples' split) or `train`/`test`
  .npz files (x, y); what the search selects on, the golden model's accuracy on data the
  model did not train on: `validation` (a fraction of the training set held out), or
  `folds` (K-fold cross-validation: every training image predicted by the fold model that
  did not see it, then the candidate's model trained on the whole training set); the test
  set's accuracy is reported beside it, never selected on;
- `training`: `epochs`, `batch_size`, `learning_rate`, `patience` (early stopping on the
  validation loss, 0: none);
- `networks`: one or more templates (`dense`, `cnn`, `recurrent` for sequences), each with
  its ranges and a `base` design evaluated first (the evolution starts from it);
- `hardware`: `formats` (uniform, or `per_layer_formats`), the knobs (`knobs: search`
  with `parallelism`/`cycles` choices per compute layer, or `knobs: balanced` with
  multiplier `budgets` the balanced allocator fills), `strategies` (what each compute layer
  may be built as: `resource`, `latency`, and with `knobs: balanced` `auto`, chosen by the
  allocator within `logic_budget`), `pipeline` levels, `softmax`;
- `constraints`: `device` (its multipliers and half its LUT4 cells), `multipliers`,
  `logic_cells` (the adder graphs' LUT4 cells), `memory_bits`, `latency`, `ii` (cycles),
  `images_per_second` at `clock_mhz`, `accuracy` (minimum);
- `goals`: `pareto: [metric, ...]` (a front of several), or `weights: {metric: w}` (one
  fitness, the weighted sum, maximised: give negative weights to what should be small).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from keras2clash.errors import K2CError, yaml_problem
from keras2clash.fpga.devices import get_device, logic_budget, multiplier_budget
from keras2clash.hw.plan import AUTO_STRATEGY, DEFAULT_STRATEGY, STRATEGIES
from keras2clash.quant.formats import FixedFormat, parse_format

METRICS: dict[str, str] = {
    "accuracy": "maximize",  # golden model, validation split or cross-validation (the search selects on it)
    "test_accuracy": "maximize",  # golden model, test set (reported; selecting on it leaks the test set)
    "multipliers": "minimize",
    "images_per_second": "maximize",  # clock_mhz / II
    "ii": "minimize",  # initiation interval, cycles
    "latency": "minimize",  # cycles
    "memory_bits": "minimize",
    "logic_cells": "minimize",  # the latency strategy's adder graphs, LUT4 cells (estimate)
    "efficiency": "maximize",  # MACs on multipliers / (multipliers x II)
}
"""Every metric a goal can name, with its direction."""

ACTIVATIONS = ("relu", "tanh", "sigmoid", "linear")
POOLINGS = ("max", "avg", "none")
CELLS = {"simple_rnn": "SimpleRNN", "lstm": "LSTM", "gru": "GRU"}
"""The recurrent template's cells (named as their records are) and their Keras layers."""
SOFTMAX = ("argmax", "exact")
ONE_PER_NETWORK = ("activation", "cell")
"""Base keys that take one value, not one per layer (the space samples one per network)."""


class _Reader:
    """Walks a parsed mapping with a key path, so every error names where it is."""

    def __init__(self, source: str, data: Any, path: str = "") -> None:
        self.source, self.data, self.path = source, data, path

    def fail(self, message: str, key: str | None = None) -> K2CError:
        where = self._key(key) if key is not None else self.path
        return K2CError(f"search description {self.source}: {where or 'top level'}: {message}")

    def _key(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def mapping(self, allowed: Sequence[str]) -> Mapping[str, Any]:
        if not isinstance(self.data, Mapping):
            raise self.fail(f"expected a mapping (key: value), got {type(self.data).__name__}")
        unknown = [k for k in self.data if k not in allowed]
        if unknown:
            raise self.fail(f"unknown key {unknown[0]!r}; known keys: {', '.join(allowed)}")
        return self.data

    def sub(self, key: str, default: Any = None) -> _Reader:
        value = self.data.get(key, default) if isinstance(self.data, Mapping) else default
        return _Reader(self.source, {} if value is None else value, self._key(key))

    def has(self, key: str) -> bool:
        return isinstance(self.data, Mapping) and self.data.get(key) is not None

    def int(self, key: str, default: int | None = None, low: int = 1, high: int | None = None) -> int:
        value = self.data.get(key, default)
        if value is None:
            raise self.fail("required", key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"expected an integer, got {value!r}", key)
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise self.fail(f"{value} out of range: {bound}", key)
        return value

    def opt_int(self, key: str, low: int = 1) -> int | None:
        return self.int(key, low=low) if self.has(key) else None

    def number(
        self,
        key: str,
        default: float | None = None,
        low: float = 0.0,
        high: float | None = None,
        open_low: bool = False,
    ) -> float:
        value = self.data.get(key, default)
        if value is None:
            raise self.fail("required", key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(f"expected a number, got {value!r}", key)
        if value < low or (open_low and value == low) or (high is not None and value > high):
            raise self.fail(
                f"{value} out of range ({'>' if open_low else '>='} {low}{f', <= {high}' if high is not None else ''})",
                key,
            )
        return float(value)

    def opt_number(self, key: str, low: float = 0.0, high: float | None = None) -> float | None:
        return self.number(key, low=low, high=high, open_low=True) if self.has(key) else None

    def text(self, key: str, default: str | None = None, choices: Sequence[str] | None = None) -> str:
        value = self.data.get(key, default)
        if value is None:
            raise self.fail("required", key)
        if not isinstance(value, str):
            raise self.fail(f"expected text, got {value!r}", key)
        if choices is not None and value not in choices:
            raise self.fail(f"{value!r} is not one of {', '.join(choices)}", key)
        return value

    def items(self, key: str, default: Sequence[Any] | None = None) -> list[Any]:
        value = self.data.get(key, default)
        if value is None:
            raise self.fail("required", key)
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
            raise self.fail(f"expected a non-empty list, got {value!r}", key)
        return list(value)

    def ints(self, key: str, default: Sequence[int] | None = None, low: int = 1) -> tuple[int, ...]:
        values = self.items(key, default)
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise self.fail(f"expected integers >= {low}, got {v!r}", f"{key}[{i}]")
        return _unique(values, self, key)

    def texts(
        self, key: str, default: Sequence[str] | None = None, choices: Sequence[str] | None = None
    ) -> tuple[str, ...]:
        values = self.items(key, default)
        for i, v in enumerate(values):
            if not isinstance(v, str) or (choices is not None and v not in choices):
                allowed = f"one of {', '.join(choices)}" if choices else "text"
                raise self.fail(f"expected {allowed}, got {v!r}", f"{key}[{i}]")
        return _unique(values, self, key)

    def range(self, key: str, default: Sequence[int], low: int = 0) -> tuple[int, int]:
        """`[min, max]` (or one integer: both)."""
        value = self.data.get(key, default)
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value, value]
        if (
            not isinstance(value, Sequence)
            or isinstance(value, str)
            or len(value) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) for v in value)
        ):
            raise self.fail(f"expected [min, max] (two integers) or one integer, got {value!r}", key)
        lo, hi = value
        if lo < low or hi < lo:
            raise self.fail(f"[{lo}, {hi}]: need {low} <= min <= max", key)
        return lo, hi


def _unique(values: list[Any], reader: _Reader, key: str) -> tuple[Any, ...]:
    seen: list[Any] = []
    for i, v in enumerate(values):
        if v in seen:
            raise reader.fail(f"{v!r} appears twice", f"{key}[{i}]")
        seen.append(v)
    return tuple(values)


# --- the records -------------------------------------------------------------------------


@dataclass(frozen=True)
class DataSpec:
    dataset: str | None  # "digits" (built in) or None with train/test files
    train: Path | None
    test: Path | None
    validation: float  # fraction of the training set held out for selection (0 with folds)
    folds: int = 0  # K-fold cross-validation instead of one held-out split


@dataclass(frozen=True)
class TrainingSpec:
    epochs: int
    batch_size: int
    learning_rate: float
    patience: int  # early stopping on the validation loss (folds: each fold's held-out part); 0: none


@dataclass(frozen=True)
class DenseSpace:
    """Flatten -> `layers` hidden Dense layers (units from `units`) -> Dense (classes)."""

    layers: tuple[int, int]
    units: tuple[int, ...]
    activations: tuple[str, ...]
    base: Mapping[str, Any] = field(default_factory=dict)  # layer choices of the base design

    kind = "dense"

    @property
    def max_compute(self) -> int:
        return self.layers[1] + 1


@dataclass(frozen=True)
class CnnSpace:
    """`conv_layers` x (Conv2D 'same' -> optional 2x2 pooling) -> Flatten -> `dense_layers`
    hidden Dense -> Dense (classes)."""

    conv_layers: tuple[int, int]
    filters: tuple[int, ...]
    kernel_sizes: tuple[int, ...]
    pooling: tuple[str, ...]
    dense_layers: tuple[int, int]
    units: tuple[int, ...]
    activations: tuple[str, ...]
    base: Mapping[str, Any] = field(default_factory=dict)

    kind = "cnn"

    @property
    def max_compute(self) -> int:
        return self.conv_layers[1] + self.dense_layers[1] + 1


@dataclass(frozen=True)
class RecurrentSpace:
    """`layers` stacked recurrent layers of one cell from `cells` (units from `units`; each
    but the last returns every step's state, the next one's sequence) -> `dense_layers`
    hidden Dense (units from `dense_units`) -> Dense (classes). `activations`: the cells'
    activation (Keras' `activation`; the gates keep their sigmoid) and the hidden Dense
    layers'."""

    cells: tuple[str, ...]
    layers: tuple[int, int]
    units: tuple[int, ...]
    dense_layers: tuple[int, int]
    dense_units: tuple[int, ...]
    activations: tuple[str, ...]
    base: Mapping[str, Any] = field(default_factory=dict)

    kind = "recurrent"

    @property
    def max_compute(self) -> int:
        return self.layers[1] + self.dense_layers[1] + 1


NetworkSpace = DenseSpace | CnnSpace | RecurrentSpace
TEMPLATES = ("dense", "cnn", "recurrent")


@dataclass(frozen=True)
class HardwareSpace:
    formats: tuple[FixedFormat, ...]
    per_layer_formats: bool
    knobs: str  # "search" (pe and cycles per layer) or "balanced" (a budget per candidate)
    parallelism: tuple[int, ...]  # pe choices (clamped to each layer's filters)
    cycles: tuple[int, ...]  # cycles choices (clamped to each layer's window)
    budgets: tuple[int, ...]  # multipliers, knobs: balanced
    pipeline: tuple[int, ...]
    softmax: str
    strategies: tuple[str, ...] = (DEFAULT_STRATEGY,)  # choices per compute layer (auto: knobs balanced)
    logic_budget: int | None = None  # LUT4 cells for the adder graphs of auto layers (None: the default)

    @property
    def weights_matter(self) -> bool:
        """Whether a candidate's hardware figures depend on its trained weights: a latency
        layer's adder graph is solved from them (and auto chooses by its size)."""
        return any(s != DEFAULT_STRATEGY for s in self.strategies)


@dataclass(frozen=True)
class Constraints:
    multipliers: int | None = None  # the smaller of `multipliers` and the device's
    logic_cells: int | None = None  # the smaller of `logic_cells` and half the device's LUT4 cells
    memory_bits: int | None = None
    latency: int | None = None
    ii: float | None = None
    images_per_second: float | None = None  # at clock_mhz
    accuracy: float | None = None  # minimum validation accuracy (0..1)
    clock_mhz: float = 100.0
    device: str | None = None


@dataclass(frozen=True)
class Goals:
    pareto: tuple[str, ...] = ()  # objectives of a Pareto front, or
    weights: Mapping[str, float] = field(default_factory=dict)  # one weighted fitness

    @property
    def objectives(self) -> tuple[str, ...]:
        """The values optuna optimises: the front's metrics, or one ("fitness")."""
        return self.pareto or ("fitness",)

    @property
    def directions(self) -> list[str]:
        return [METRICS[m] for m in self.pareto] if self.pareto else ["maximize"]


@dataclass(frozen=True)
class Description:
    name: str
    seed: int
    trials: int
    population: int
    data: DataSpec
    training: TrainingSpec
    networks: Mapping[str, NetworkSpace]
    hardware: HardwareSpace
    constraints: Constraints
    goals: Goals
    text: str  # the file as given (stored with the study: a resumed search must use the same)
    source: str = ""

    @property
    def max_compute(self) -> int:
        return max(n.max_compute for n in self.networks.values())


# --- reading -----------------------------------------------------------------------------


def _parse_text(text: str, source: str) -> Any:
    if source.endswith(".json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise K2CError(f"search description {source}: not valid JSON ({exc})") from None
    try:
        import yaml
    except ImportError:  # pragma: no cover - pyyaml is a dependency
        raise K2CError("reading a YAML search description needs pyyaml: pip install pyyaml") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise K2CError(f"search description {source} is not valid YAML {yaml_problem(exc)}") from None


def load_description(path: str | Path) -> Description:
    """Read and validate a description file (YAML, or JSON by its .json suffix)."""
    path = Path(path)
    if not path.is_file():
        raise K2CError(f"search description not found: {path}")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise K2CError(f"cannot read search description {path} ({exc})") from None
    return parse_description(text, str(path), base_dir=path.parent)


def parse_description(text: str, source: str = "<text>", base_dir: Path | None = None) -> Description:
    """A description from its text (`source` names it in errors; `base_dir`: relative data paths)."""
    top = _Reader(source, _parse_text(text, source))
    top.mapping(
        ("name", "seed", "trials", "population", "data", "training", "networks", "hardware", "constraints", "goals")
    )
    name = top.text("name", "search")
    if not name.replace("-", "").replace("_", "").isalnum():
        raise top.fail(f"{name!r}: letters, digits, - and _ only (it names the study)", "name")
    networks = _networks(top.sub("networks"))
    return Description(
        name=name,
        seed=top.int("seed", 1, low=0),
        trials=top.int("trials", 20),
        population=top.int("population", 16, low=2),
        data=_data(top.sub("data"), base_dir),
        training=_training(top.sub("training")),
        networks=networks,
        hardware=_hardware(top.sub("hardware")),
        constraints=_constraints(top.sub("constraints")),
        goals=_goals(top.sub("goals")),
        text=text,
        source=source,
    )


def _data(r: _Reader, base_dir: Path | None) -> DataSpec:
    r.mapping(("dataset", "train", "test", "validation", "folds"))
    if r.has("folds") and r.has("validation"):
        raise r.fail("give either validation: FRACTION or folds: K, not both")
    folds = r.int("folds", 0, low=2, high=20) if r.has("folds") else 0
    validation = 0.0 if folds else r.number("validation", 0.2, high=0.5, open_low=True)
    if r.has("dataset"):
        if r.has("train") or r.has("test"):
            raise r.fail("give either dataset or train/test files, not both")
        return DataSpec(r.text("dataset", choices=("digits",)), None, None, validation, folds)
    if not (r.has("train") and r.has("test")):
        raise r.fail("give dataset: digits, or both train: and test: (.npz files with x and y)")
    files = []
    for key in ("train", "test"):
        p = Path(r.text(key))
        p = p if p.is_absolute() or base_dir is None else base_dir / p
        if not p.is_file():
            raise r.fail(f"file not found: {p}", key)
        files.append(p)
    return DataSpec(None, files[0], files[1], validation, folds)


def _training(r: _Reader) -> TrainingSpec:
    r.mapping(("epochs", "batch_size", "learning_rate", "patience"))
    return TrainingSpec(
        epochs=r.int("epochs", 20),
        batch_size=r.int("batch_size", 32),
        learning_rate=r.number("learning_rate", 0.003, high=10.0, open_low=True),
        patience=r.int("patience", 0, low=0),
    )


def _networks(r: _Reader) -> dict[str, NetworkSpace]:
    data = r.mapping(TEMPLATES)
    if not data:
        raise r.fail(f"at least one network template ({', '.join(TEMPLATES)}) is needed")
    readers: dict[str, Callable[[_Reader], NetworkSpace]] = {"dense": _dense, "cnn": _cnn, "recurrent": _recurrent}
    return {template: readers[template](r.sub(template)) for template in data}


def _dense(r: _Reader) -> DenseSpace:
    r.mapping(("layers", "units", "activations", "base"))
    space = DenseSpace(
        layers=r.range("layers", [1, 2]),
        units=r.ints("units", [16, 32]),
        activations=r.texts("activations", ["relu"], ACTIVATIONS),
    )
    base = _base(
        r.sub("base"),
        {"layers": space.units, "activation": space.activations},
        lambda b: len(b["layers"]),
        space.layers,
        "layers",
    )
    return DenseSpace(space.layers, space.units, space.activations, base)


def _cnn(r: _Reader) -> CnnSpace:
    r.mapping(("conv_layers", "filters", "kernel_sizes", "pooling", "dense_layers", "units", "activations", "base"))
    space = CnnSpace(
        conv_layers=r.range("conv_layers", [1, 2], low=1),
        filters=r.ints("filters", [4, 8]),
        kernel_sizes=r.ints("kernel_sizes", [3]),
        pooling=r.texts("pooling", ["max"], POOLINGS),
        dense_layers=r.range("dense_layers", [0, 0]),
        units=r.ints("units", [16]),
        activations=r.texts("activations", ["relu"], ACTIVATIONS),
    )
    base = _base(
        r.sub("base"),
        {
            "conv": space.filters,
            "kernel": space.kernel_sizes,
            "pool": space.pooling,
            "dense": space.units,
            "activation": space.activations,
        },
        lambda b: len(b["conv"]),
        space.conv_layers,
        "conv",
    )
    _check_base_dense(r, base, space.dense_layers)
    return CnnSpace(
        space.conv_layers,
        space.filters,
        space.kernel_sizes,
        space.pooling,
        space.dense_layers,
        space.units,
        space.activations,
        base,
    )


def _recurrent(r: _Reader) -> RecurrentSpace:
    r.mapping(("cells", "layers", "units", "dense_layers", "dense_units", "activations", "base"))
    space = RecurrentSpace(
        cells=r.texts("cells", ["lstm"], tuple(CELLS)),
        layers=r.range("layers", [1, 1], low=1),
        units=r.ints("units", [8, 16]),
        dense_layers=r.range("dense_layers", [0, 0]),
        dense_units=r.ints("dense_units", [16]),
        activations=r.texts("activations", ["tanh"], ACTIVATIONS),
    )
    base = _base(
        r.sub("base"),
        {
            "cell": space.cells,
            "layers": space.units,
            "dense": space.dense_units,
            "activation": space.activations,
        },
        lambda b: len(b["layers"]),
        space.layers,
        "layers",
    )
    _check_base_dense(r, base, space.dense_layers)
    return replace(space, base=base)


def _check_base_dense(r: _Reader, base: Mapping[str, Any], bounds: tuple[int, int]) -> None:
    """A base's hidden Dense layers (`dense`, none when left out) within `dense_layers`."""
    if base and not bounds[0] <= len(base.get("dense", ())) <= bounds[1]:
        raise r.sub("base").fail(
            f"{len(base.get('dense', ()))} dense layers, outside dense_layers {list(bounds)}", "dense"
        )


def _base(
    r: _Reader, choices: Mapping[str, Sequence[Any]], depth, bounds: tuple[int, int], depth_key: str
) -> dict[str, Any]:
    """The base design: every value must be one the space can sample (it is enqueued as the
    first trial; a value outside the choices would silently be replaced)."""
    if not r.data:
        return {}
    data = r.mapping(tuple(choices))
    base: dict[str, Any] = {}
    for key, allowed in choices.items():
        if key not in data:
            if key == depth_key:
                raise r.fail("required", key)
            continue
        value = data[key]
        values = value if isinstance(value, list) else [value]
        if key in (depth_key, "dense") and not isinstance(value, list):
            raise r.fail(f"expected a list, got {value!r}", key)
        if key in ONE_PER_NETWORK and isinstance(value, list):
            raise r.fail(f"one value for the whole network, got the list {value!r}", key)
        for i, v in enumerate(values):
            if v not in allowed:
                where = f"{key}[{i}]" if isinstance(value, list) else key
                raise r.fail(f"{v!r} is not in the space's choices {list(allowed)}", where)
        base[key] = value
    if not bounds[0] <= depth(base) <= bounds[1]:
        raise r.fail(f"{depth(base)} layers, outside the space's {list(bounds)}", depth_key)
    return base


def _hardware(r: _Reader) -> HardwareSpace:
    r.mapping(
        (
            "formats",
            "per_layer_formats",
            "knobs",
            "parallelism",
            "cycles",
            "budgets",
            "strategies",
            "logic_budget",
            "pipeline",
            "softmax",
        )
    )
    formats = []
    for i, text in enumerate(r.items("formats", ["1,7,8"])):
        try:
            formats.append(parse_format(str(text)))
        except K2CError as exc:
            raise r.fail(str(exc), f"formats[{i}]") from None
    per_layer = r.data.get("per_layer_formats", False)
    if not isinstance(per_layer, bool):
        raise r.fail(f"expected true or false, got {per_layer!r}", "per_layer_formats")
    knobs = r.text("knobs", "search", ("search", "balanced"))
    budgets: tuple[int, ...] = ()
    if knobs == "balanced":
        values = []
        for i, b in enumerate(r.items("budgets")):
            try:
                values.append(multiplier_budget(b if isinstance(b, int) else str(b)))
            except K2CError as exc:
                raise r.fail(str(exc), f"budgets[{i}]") from None
        budgets = tuple(values)
    elif r.has("budgets"):
        raise r.fail("budgets are for knobs: balanced (knobs: search takes parallelism and cycles)", "budgets")
    strategies = r.texts("strategies", [DEFAULT_STRATEGY], choices=(*STRATEGIES, AUTO_STRATEGY))
    if AUTO_STRATEGY in strategies and knobs != "balanced":
        raise r.fail("auto is chosen with a multiplier budget: use it with knobs: balanced", "strategies")
    cells = None
    if r.has("logic_budget"):
        if AUTO_STRATEGY not in strategies:
            raise r.fail(
                "logic_budget is what auto layers' adder graphs may take: add auto to strategies", "logic_budget"
            )
        cells = _logic_cells(r, "logic_budget")
    return HardwareSpace(
        formats=_unique(formats, r, "formats"),
        per_layer_formats=per_layer,
        knobs=knobs,
        parallelism=r.ints("parallelism", [1]),
        cycles=r.ints("cycles", [1]),
        budgets=budgets,
        pipeline=r.ints("pipeline", [2], low=0),
        softmax=r.text("softmax", "argmax", SOFTMAX),
        strategies=strategies,
        logic_budget=cells,
    )


def _logic_cells(r: _Reader, key: str) -> int:
    """LUT4 cells: a number or a device (fpga.devices.logic_budget: half its cells)."""
    value = r.data[key]
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise r.fail(f"expected LUT4 cells or a device name, got {value!r}", key)
    try:
        return logic_budget(value)
    except K2CError as exc:
        raise r.fail(str(exc), key) from None


def _constraints(r: _Reader) -> Constraints:
    r.mapping(
        (
            "device",
            "multipliers",
            "logic_cells",
            "memory_bits",
            "latency",
            "ii",
            "images_per_second",
            "clock_mhz",
            "accuracy",
        )
    )
    device = r.text("device") if r.has("device") else None
    multipliers = r.opt_int("multipliers")
    cells = _logic_cells(r, "logic_cells") if r.has("logic_cells") else None
    if device is not None:
        try:
            budget = get_device(device).multipliers  # fits the part (a budget uses Device.multiplier_budget)
            share = logic_budget(device)
        except K2CError as exc:
            raise r.fail(str(exc), "device") from None
        multipliers = budget if multipliers is None else min(multipliers, budget)
        cells = share if cells is None else min(cells, share)
    return Constraints(
        multipliers=multipliers,
        logic_cells=cells,
        memory_bits=r.opt_int("memory_bits"),
        latency=r.opt_int("latency"),
        ii=r.opt_number("ii"),
        images_per_second=r.opt_number("images_per_second"),
        accuracy=r.opt_number("accuracy", high=1.0),
        clock_mhz=r.number("clock_mhz", 100.0, open_low=True),
        device=device,
    )


def _goals(r: _Reader) -> Goals:
    data = r.mapping(("pareto", "weights"))
    if ("pareto" in data) == ("weights" in data):
        raise r.fail("give either pareto: [metrics] or weights: {metric: weight}")
    if "pareto" in data:
        return Goals(pareto=r.texts("pareto", choices=tuple(METRICS)))
    w = r.sub("weights")
    values = w.mapping(tuple(METRICS))
    if not values:
        raise w.fail("at least one metric weight")
    weights = {}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value == 0:
            raise w.fail(f"expected a non-zero number, got {value!r}", key)
        weights[key] = float(value)
    return Goals(weights=weights)
