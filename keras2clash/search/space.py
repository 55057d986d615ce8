"""A candidate (network + hardware) sampled from an optuna trial, and its Keras model.

The search space is static: every trial samples every parameter of every template up to
its largest depth (`dense.units_3` even when the candidate has two layers), and the
candidate uses the ones its depth and template make active. Why: optuna's NSGA-II crosses
and mutates the parameters every trial shares (its intersection search space) and samples
the others at random; a define-by-run space whose parameters come and go with the depth
would leave the layers' widths, the knobs and the formats out of the evolution. Inactive
parameters cost nothing (no training depends on them), and `Candidate.key` ignores them so
duplicates are recognised.

The same function rebuilds a finished trial's candidate from its stored parameters
(`optuna.trial.FixedTrial`), so `emit` and the results cannot drift from the search.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from keras2clash.hw.allocate import config_label
from keras2clash.hw.plan import DEFAULT_STRATEGY, LATENCY_STRATEGY
from keras2clash.quant.formats import FixedFormat, parse_format
from keras2clash.search.description import CELLS, DenseSpace, Description, NetworkSpace, RecurrentSpace


@dataclass(frozen=True)
class NetworkSpec:
    """A network the templates can build: the active choices only."""

    template: str  # "dense" | "cnn" | "recurrent"
    conv: tuple[int, ...] = ()  # filters per Conv2D layer
    kernels: tuple[int, ...] = ()
    pools: tuple[str, ...] = ()  # after each Conv2D: max | avg | none
    dense: tuple[int, ...] = ()  # units per hidden Dense layer
    activation: str = "relu"
    cell: str = ""  # the recurrent layers' cell: simple_rnn | lstm | gru
    recurrent: tuple[int, ...] = ()  # units per stacked recurrent layer

    @property
    def compute_layers(self) -> int:
        return len(self.conv) + len(self.recurrent) + len(self.dense) + 1

    @property
    def resource_only(self) -> tuple[bool, ...]:
        """Per compute layer, whether only the resource strategy builds it: a recurrent step
        feeds its result back through the engine, which an adder graph does not."""
        return (False,) * len(self.conv) + (True,) * len(self.recurrent) + (False,) * (len(self.dense) + 1)

    def fields(self) -> dict[str, Any]:
        """The spec as the keys hash it: a template's unset fields left out, so that the
        dense and cnn templates' keys (and the model files named by them) do not depend on
        the recurrent template's fields."""
        data = asdict(self)
        for key in ("cell", "recurrent"):
            if not data[key]:
                del data[key]
        return data

    @property
    def key(self) -> str:
        """Identifies the trained model: same network, same seed, same weights."""
        return hashlib.sha1(json.dumps(self.fields(), sort_keys=True).encode()).hexdigest()[:12]

    def describe(self) -> str:
        parts = [
            f"conv{f}k{k}{'' if p == 'none' else '+' + p + 'pool'}"
            for f, k, p in zip(self.conv, self.kernels, self.pools)
        ]
        parts += [f"{self.cell}{u}" for u in self.recurrent]
        parts += [f"d{u}" for u in self.dense]
        return f"{self.template}: {'-'.join(parts + ['out'])} {self.activation}"


@dataclass(frozen=True)
class HardwareSpec:
    """The hardware of a candidate: formats per compute layer, knobs or a budget, strategies,
    pipeline."""

    formats: tuple[FixedFormat, ...]  # one per compute layer (all equal unless per_layer_formats)
    parallelism: tuple[int, ...] | None  # knobs: search (clamped to the layers' sizes at planning)
    cycles: tuple[int, ...] | None
    budget: int | None  # knobs: balanced
    pipeline: int
    softmax: str
    strategies: tuple[str, ...] = ()  # one per compute layer; () : resource for every layer
    logic_budget: int | None = None  # auto layers' adder graphs (None: the default budget)

    def describe(self) -> str:
        fmts = sorted({str(f) for f in self.formats})
        fmt = fmts[0] if len(fmts) == 1 else "/".join(str(f) for f in self.formats)
        knobs = (
            f"budget {self.budget}"
            if self.budget is not None
            else "pe:cycles " + config_label(self.parallelism or (), self.cycles or (), self.strategies)
        )
        if self.budget is not None and self.strategies:
            knobs += " strategies " + ",".join(self.strategies)
        return f"{fmt}; {knobs}; pipeline {self.pipeline}"


@dataclass(frozen=True)
class Candidate:
    network: NetworkSpec
    hardware: HardwareSpec

    @property
    def key(self) -> str:
        """Identifies the whole candidate (network and active hardware choices)."""
        data = {"network": self.network.fields(), "hardware": asdict(self.hardware)}
        data["hardware"]["formats"] = [str(f) for f in self.hardware.formats]
        for key in ("strategies", "logic_budget"):  # unset: the keys every resource-only search has had
            if not data["hardware"][key]:
                del data["hardware"][key]
        return hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def _fmt_text(fmt: FixedFormat) -> str:
    return str(fmt)


def sample(trial: Any, desc: Description) -> Candidate:
    """Every parameter of the static space from `trial` (a live optuna trial or a
    `FixedTrial` of stored parameters); the candidate from the active ones."""
    templates = list(desc.networks)
    template = trial.suggest_categorical("network", templates) if len(templates) > 1 else templates[0]
    specs = {kind: _sample_network(trial, kind, space) for kind, space in desc.networks.items()}
    network = specs[template]
    hw = desc.hardware
    n = desc.max_compute
    fmt_texts = [_fmt_text(f) for f in hw.formats]
    if hw.per_layer_formats:
        chosen = [trial.suggest_categorical(f"hw.format_{i}", fmt_texts) for i in range(n)]
    else:
        chosen = [trial.suggest_categorical("hw.format", fmt_texts)] * n
    formats = tuple(parse_format(t) for t in chosen[: network.compute_layers])
    pes = cycles = budget = None
    if hw.knobs == "search":
        pes = tuple(trial.suggest_categorical(f"hw.pe_{i}", list(hw.parallelism)) for i in range(n))
        cycles = tuple(trial.suggest_categorical(f"hw.cycles_{i}", list(hw.cycles)) for i in range(n))
        pes, cycles = pes[: network.compute_layers], cycles[: network.compute_layers]
    else:
        budget = trial.suggest_categorical("hw.budget", list(hw.budgets))
    pipeline = trial.suggest_categorical("hw.pipeline", list(hw.pipeline))
    strategies: tuple[str, ...] = ()
    if hw.weights_matter:  # the default space's parameters (and candidate keys) stay as they were
        if len(hw.strategies) > 1:
            chosen = [trial.suggest_categorical(f"hw.strategy_{i}", list(hw.strategies)) for i in range(n)]
        else:
            chosen = [hw.strategies[0]] * n
        strategies = tuple(
            DEFAULT_STRATEGY if fixed else st
            for st, fixed in zip(chosen[: network.compute_layers], network.resource_only)
        )
        if pes is not None and cycles is not None:  # a latency layer has no knobs: inactive, out of the key
            pes = tuple(1 if st == LATENCY_STRATEGY else p for p, st in zip(pes, strategies))
            cycles = tuple(1 if st == LATENCY_STRATEGY else c for c, st in zip(cycles, strategies))
    return Candidate(
        network, HardwareSpec(formats, pes, cycles, budget, pipeline, hw.softmax, strategies, hw.logic_budget)
    )


def _sample_network(trial: Any, kind: str, space: NetworkSpace) -> NetworkSpec:
    if isinstance(space, RecurrentSpace):
        cell = trial.suggest_categorical("recurrent.cell", list(space.cells))
        depth = trial.suggest_int("recurrent.layers", *space.layers)
        units = [trial.suggest_categorical(f"recurrent.units_{i}", list(space.units)) for i in range(space.layers[1])]
        denses = trial.suggest_int("recurrent.dense_layers", *space.dense_layers)
        dense = [
            trial.suggest_categorical(f"recurrent.dense_units_{i}", list(space.dense_units))
            for i in range(space.dense_layers[1])
        ]
        act = trial.suggest_categorical("recurrent.activation", list(space.activations))
        return NetworkSpec(
            "recurrent", dense=tuple(dense[:denses]), activation=act, cell=cell, recurrent=tuple(units[:depth])
        )
    if isinstance(space, DenseSpace):
        depth = trial.suggest_int("dense.layers", *space.layers)
        units = [trial.suggest_categorical(f"dense.units_{i}", list(space.units)) for i in range(space.layers[1])]
        act = trial.suggest_categorical("dense.activation", list(space.activations))
        return NetworkSpec("dense", dense=tuple(units[:depth]), activation=act)
    convs = trial.suggest_int("cnn.conv_layers", *space.conv_layers)
    filters = [trial.suggest_categorical(f"cnn.filters_{i}", list(space.filters)) for i in range(space.conv_layers[1])]
    kernels = [
        trial.suggest_categorical(f"cnn.kernel_{i}", list(space.kernel_sizes)) for i in range(space.conv_layers[1])
    ]
    pools = [trial.suggest_categorical(f"cnn.pool_{i}", list(space.pooling)) for i in range(space.conv_layers[1])]
    denses = trial.suggest_int("cnn.dense_layers", *space.dense_layers)
    units = [trial.suggest_categorical(f"cnn.units_{i}", list(space.units)) for i in range(space.dense_layers[1])]
    act = trial.suggest_categorical("cnn.activation", list(space.activations))
    return NetworkSpec(
        "cnn",
        conv=tuple(filters[:convs]),
        kernels=tuple(kernels[:convs]),
        pools=tuple(pools[:convs]),
        dense=tuple(units[:denses]),
        activation=act,
    )


def base_params(desc: Description) -> list[dict[str, Any]]:
    """The base designs as (partial) trial parameters, enqueued first: a base fixes its
    network, the first format of the list, one PE and one cycle per layer (or the largest
    budget); everything it leaves open is sampled."""
    out = []
    hw = desc.hardware
    for kind, space in desc.networks.items():
        base = dict(space.base)
        if not base:
            continue
        params: dict[str, Any] = {"network": kind} if len(desc.networks) > 1 else {}
        if isinstance(space, DenseSpace):
            params["dense.layers"] = len(base["layers"])
            params.update({f"dense.units_{i}": u for i, u in enumerate(base["layers"])})
            if "activation" in base:
                params["dense.activation"] = base["activation"]
            layers = len(base["layers"]) + 1
        elif isinstance(space, RecurrentSpace):
            if "cell" in base:
                params["recurrent.cell"] = base["cell"]
            params["recurrent.layers"] = len(base["layers"])
            params.update({f"recurrent.units_{i}": u for i, u in enumerate(base["layers"])})
            dense = base.get("dense", [])
            params["recurrent.dense_layers"] = len(dense)
            params.update({f"recurrent.dense_units_{i}": u for i, u in enumerate(dense)})
            if "activation" in base:
                params["recurrent.activation"] = base["activation"]
            layers = len(base["layers"]) + len(dense) + 1
        else:
            conv = base["conv"]
            params["cnn.conv_layers"] = len(conv)
            params.update({f"cnn.filters_{i}": f for i, f in enumerate(conv)})
            for key, name in (("kernel", "cnn.kernel"), ("pool", "cnn.pool")):
                if key in base:
                    values = base[key] if isinstance(base[key], list) else [base[key]] * len(conv)
                    params.update({f"{name}_{i}": v for i, v in enumerate(values)})
            dense = base.get("dense", [])
            params["cnn.dense_layers"] = len(dense)
            params.update({f"cnn.units_{i}": u for i, u in enumerate(dense)})
            if "activation" in base:
                params["cnn.activation"] = base["activation"]
            layers = len(conv) + len(dense) + 1
        first = _fmt_text(hw.formats[0])
        if hw.per_layer_formats:
            params.update({f"hw.format_{i}": first for i in range(desc.max_compute)})
        else:
            params["hw.format"] = first
        if hw.knobs == "search":
            if 1 in hw.parallelism:
                params.update({f"hw.pe_{i}": 1 for i in range(layers)})
            if 1 in hw.cycles:
                params.update({f"hw.cycles_{i}": 1 for i in range(layers)})
        else:
            params["hw.budget"] = max(hw.budgets)
        if len(hw.pipeline) == 1:
            params["hw.pipeline"] = hw.pipeline[0]
        if len(hw.strategies) > 1:  # the base is built as it would be without the choice
            base_strategy = DEFAULT_STRATEGY if DEFAULT_STRATEGY in hw.strategies else hw.strategies[0]
            params.update({f"hw.strategy_{i}": base_strategy for i in range(desc.max_compute)})
        out.append(params)
    return out


def candidate_from_params(params: Mapping[str, Any], desc: Description) -> Candidate:
    """A finished trial's candidate, rebuilt from its stored parameters."""
    from optuna.trial import FixedTrial

    return sample(FixedTrial(dict(params)), desc)


def build_model(spec: NetworkSpec, input_shape: Sequence[int], classes: int) -> Any:
    """The Keras model of a network spec (untrained; `keras.utils.set_random_seed` first
    for reproducible initial weights). The dense template flattens its input; the CNN's
    convolutions are 'same', and a pooling layer is left out where the image is already
    1 pixel wide (so every depth the space allows builds); the recurrent template's layers
    read a sequence (steps, features), each but the last returning every step's state for
    the next, the last only its final state for the Dense layers."""
    import keras

    sequence = spec.template == "recurrent"
    layers: list[Any] = [keras.Input(tuple(input_shape), name="sequence" if sequence else "pixels")]
    if sequence:
        if len(input_shape) != 2:
            raise ValueError(
                f"the recurrent template needs sequences (steps, features), got inputs of shape {tuple(input_shape)}"
            )
        cell = getattr(keras.layers, CELLS[spec.cell])
        for i, units in enumerate(spec.recurrent):
            last = i == len(spec.recurrent) - 1
            layers.append(
                cell(units, activation=spec.activation, return_sequences=not last, name=f"{spec.cell}_{i + 1}")
            )
    if spec.template == "cnn":
        if len(input_shape) != 3:
            raise ValueError(f"the cnn template needs images (H, W, C), got inputs of shape {tuple(input_shape)}")
        size = min(input_shape[0], input_shape[1])
        for i, (f, k, p) in enumerate(zip(spec.conv, spec.kernels, spec.pools)):
            layers.append(keras.layers.Conv2D(f, k, padding="same", activation=spec.activation, name=f"conv_{i + 1}"))
            if p != "none" and size >= 2:
                pool = keras.layers.MaxPooling2D if p == "max" else keras.layers.AveragePooling2D
                layers.append(pool(2, name=f"pool_{i + 1}"))
                size //= 2
    if len(input_shape) > 1 and not sequence:
        layers.append(keras.layers.Flatten(name="flatten"))
    for i, units in enumerate(spec.dense):
        layers.append(keras.layers.Dense(units, activation=spec.activation, name=f"dense_{i + 1}"))
    layers.append(keras.layers.Dense(classes, activation="softmax", name="output"))
    return keras.Sequential(layers, name=f"search_{spec.template}")
