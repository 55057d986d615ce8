"""hls4ml configurations: read one into our formats and knobs, write ours in its shape.

An hls4ml config (the dict `hls4ml.utils.config_from_keras_model(..., granularity='name')`
returns, or its YAML file) looks like

    Model:
      Precision: ap_fixed<16,6>            # or {default: ..., weight: ..., bias: ..., result: ..., accum: ...}
      ReuseFactor: 1
      Strategy: Latency
    LayerName:
      input_1: {Precision: {result: ap_fixed<16,6>}}
      dense_1:
        Precision: {weight: ap_fixed<8,2>, bias: ap_fixed<8,4>, result: ap_ufixed<8,4>, accum: ap_fixed<24,12>}
        ReuseFactor: 4
      dense_1_relu: {Precision: {result: ap_ufixed<8,4>}}

What each setting becomes here (docs/guide/hls4ml.md):
- `Precision` types (`quant.formats.ap_type`): `weight` (`scale` for a BatchNormalization), `bias`,
  `result` (the layer's output format) exactly, modes included; a string sets all three.
  `Model.Precision` (or its `default`) replaces `--format`; model-level `weight`, `bias`,
  `result` apply to every layer that has them. `accum` sets the accumulator's width W (our
  accumulator keeps every fraction bit of the products and saturates per chunk when W is
  below the exact width; I and the modes of the accum type are not used). `auto` is "not
  given". The input layer's `result` is the input format.
- A fused activation hls4ml lists as its own layer (`dense_1_relu`, `dense_1_softmax`): its
  `result` is the layer's output format here (one format for the requantized value and the
  activation); when both are given they must agree. The input layer's entry is found by our
  input name (`input`) or a Keras input layer's (`input_layer`, `input_1`, `dense_1_input`).
- `ReuseFactor` R of a dense/conv layer with window K and F filters: hls4ml uses each
  multiplier R times per window. R <= K: `cycles` R with all F filters in parallel
  (`parallelism` F); R > K: `cycles` K and `parallelism` p with ceil(F/p) = R/K groups
  (refused when no p gives exactly that). Layers without knobs ignore it, as hls4ml does.
- `Strategy`, `Trace`, `TraceOutput`, `BramFactor`, `table_size` and the table types
  change nothing here (one architecture; tables sized by the compiler); pooling, flatten
  and reshape layers keep their input's format, so a `result` stated for them is not used.
  Any other key is refused with its name.

Writing (`to_hls4ml`) states every format-bearing layer's formats as exact ap types with
both modes, the input's, and each compute layer's R = groups x cycles, so reading what we
wrote and planning again gives the same formats (and a config written again is the same).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from keras2clash.errors import K2CError, yaml_problem
from keras2clash.hw.plan import LayerFormats, LayerPlan
from keras2clash.ir.graph import Graph
from keras2clash.ir.layers import Layer
from keras2clash.jsontypes import JsonObject
from keras2clash.quant.formats import FixedFormat, ap_type, parse_format
from keras2clash.quant.layerformats import FormatConfig, merge_layer_formats
from keras2clash.registry import kind_of

MODEL_KEYS = {"Precision", "ReuseFactor", "Strategy", "BramFactor", "TraceOutput", "Trace"}
LAYER_KEYS = {"Precision", "ReuseFactor", "Strategy", "Trace", "table_size"}
PRECISION_KEYS = {
    "default": "all",
    "weight": "weight",
    "scale": "weight",
    "bias": "bias",
    "result": "output",
    "accum": "accumulator_bits",
    "table": None,
    "exp_table": None,
    "inv_table": None,
}
"""Precision keys -> LayerFormats fields; the activation tables' types (None) are read and
not used: the compiler sizes its tables itself (docs/guide/contract.md, table functions)."""
STRATEGIES = ("latency", "resource", "resource_unrolled", "distributed_arithmetic")
CONFIG_FILE = "hls4ml_config.yml"
"""What `emit` writes into a project: its formats and knobs as an hls4ml config."""


@dataclass(frozen=True)
class Hls4mlConfig:
    """An hls4ml config as read: the model defaults, per-layer precision and reuse factors
    (by hls4ml layer name, before they are matched to our graph)."""

    default: FixedFormat | None = None
    model_formats: LayerFormats = field(default_factory=LayerFormats)
    model_reuse: int | None = None
    layers: dict[str, LayerFormats] = field(default_factory=dict)
    reuse: dict[str, int] = field(default_factory=dict)


def _precision(value: object, where: str) -> tuple[FixedFormat | None, LayerFormats]:
    """A `Precision` entry -> (its default, if any; the per-tensor formats it states)."""
    if isinstance(value, str):
        if value.strip().lower() == "auto":
            return None, LayerFormats()
        fmt = _type(value, where)
        return fmt, LayerFormats(fmt, fmt, fmt)
    if not isinstance(value, Mapping):
        raise K2CError(
            f"{where}: Precision is an ap_fixed<W,I> type or a mapping of weight/bias/result/accum, got {value!r}"
        )
    default = None
    fields: dict[str, Any] = {}  # LayerFormats' keyword arguments, each of its own type
    for key, text in value.items():
        if str(key) not in PRECISION_KEYS:
            raise K2CError(f"{where}: Precision key {key!r} is not read; use {', '.join(PRECISION_KEYS)}")
        name = PRECISION_KEYS[str(key)]
        if name is None or (isinstance(text, str) and text.strip().lower() == "auto"):
            continue
        fmt = _type(text, f"{where}, Precision {key}")
        if name == "all":
            default = fmt
        elif name == "accumulator_bits":
            fields[name] = fmt.bits
        else:
            fields[name] = fmt
    return default, LayerFormats(**fields)


def _type(text: object, where: str) -> FixedFormat:
    if not isinstance(text, str):
        raise K2CError(f"{where}: expected a type like ap_fixed<16,6>, got {text!r}")
    try:
        return parse_format(text)
    except K2CError as exc:
        raise K2CError(f"{where}: {exc}") from None


def _reuse(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise K2CError(f"{where}: ReuseFactor must be an integer >= 1, got {value!r}")
    return value


def _has_weights(formats: LayerFormats) -> bool:
    """Whether an entry states weights, bias or accumulator (a bare type states all three
    formats alike, which a layer without weights takes as its result)."""
    same = formats.weight == formats.bias == formats.output
    return formats.accumulator_bits is not None or (not same and (formats.weight or formats.bias) is not None)


def _check_keys(entry: Mapping[str, object], allowed: set[str], where: str) -> None:
    unknown = set(map(str, entry)) - allowed
    if unknown:
        raise K2CError(f"{where}: key(s) {', '.join(sorted(unknown))} not read; use {', '.join(sorted(allowed))}")
    strategy = entry.get("Strategy")
    if strategy is not None and str(strategy).lower() not in STRATEGIES:
        raise K2CError(f"{where}: unknown Strategy {strategy!r}")


def read_hls4ml(data: Mapping[str, object] | str | Path) -> Hls4mlConfig:
    """An hls4ml config (a dict, or a .yml/.yaml/.json file) -> Hls4mlConfig."""
    where = "hls4ml config"
    config: object = data
    if isinstance(data, (str, Path)):
        config, where = _load(Path(data)), str(data)
    if not isinstance(config, Mapping) or "Model" not in config:
        raise K2CError(f"{where}: expected a mapping with a 'Model' section (and optional 'LayerName')")
    unknown = set(map(str, config)) - {"Model", "LayerName"}
    if unknown:
        raise K2CError(
            f"{where}: section(s) {', '.join(sorted(unknown))} not read; use Model and LayerName "
            "(per-layer settings by name)"
        )
    model = config["Model"]
    if not isinstance(model, Mapping):
        raise K2CError(f"{where}: 'Model' must be a mapping")
    _check_keys(model, MODEL_KEYS, f"{where}, Model")
    default, model_formats = (
        _precision(model["Precision"], f"{where}, Model")
        if model.get("Precision") is not None
        else (None, LayerFormats())
    )
    if isinstance(model.get("Precision"), str):  # a bare type is the default, not a per-tensor setting
        model_formats = LayerFormats()
    model_reuse = _reuse(model["ReuseFactor"], f"{where}, Model") if "ReuseFactor" in model else None
    layers: dict[str, LayerFormats] = {}
    reuse: dict[str, int] = {}
    section = config.get("LayerName") or {}
    if not isinstance(section, Mapping):
        raise K2CError(f"{where}: 'LayerName' must map layer names to settings")
    for name, entry in section.items():
        here = f"{where}, layer {name!r}"
        if not isinstance(entry, Mapping):
            raise K2CError(f"{here}: expected a mapping with Precision and/or ReuseFactor")
        _check_keys(entry, LAYER_KEYS, here)
        if entry.get("Precision") is not None:
            layer_default, formats = _precision(entry["Precision"], here)
            if layer_default is not None:
                formats = merge_layer_formats(LayerFormats(layer_default, layer_default, layer_default), formats)
            layers[str(name)] = formats
        if "ReuseFactor" in entry:
            reuse[str(name)] = _reuse(entry["ReuseFactor"], here)
    return Hls4mlConfig(default, model_formats, model_reuse, layers, reuse)


def _load(path: Path) -> object:
    if not path.is_file():
        raise K2CError(f"hls4ml config not found: {path}")
    import yaml  # a dependency (JSON is YAML too)

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise K2CError(f"{path} is not UTF-8 text (expected an hls4ml YAML or JSON config)") from None
    except yaml.YAMLError as exc:
        raise K2CError(f"{path} is not valid YAML {yaml_problem(exc)}") from None


@dataclass(frozen=True)
class Resolved:
    """An hls4ml config matched to a graph: our formats, and the knobs (None: not stated)."""

    formats: FormatConfig
    parallelism: list[int] | None
    cycles: list[int] | None


def knobs_for_reuse(reuse: int, window: int, filters: int, layer: str) -> tuple[int, int]:
    """hls4ml's ReuseFactor R of one layer -> (parallelism, cycles) with R = groups x cycles."""
    if reuse <= window:
        return filters, reuse
    groups = reuse // window
    pe = -(-filters // groups) if reuse % window == 0 else 0
    if pe == 0 or -(-filters // pe) != groups:
        choices = sorted({-(-filters // p) * window for p in range(1, filters + 1)})
        raise K2CError(
            f"layer '{layer}': ReuseFactor {reuse} cannot be built: beyond its window of {window} a reuse "
            f"factor is {window} x the groups of filters, one of {', '.join(map(str, choices))}"
        )
    return pe, window


def resolve(config: Hls4mlConfig, graph: Graph) -> Resolved:
    """Match an hls4ml config to a graph: per-layer formats (model-level tensor formats on
    every layer that has them, fused activations folded into their layer), the input
    format, and the knobs from the reuse factors."""
    config = _to_owners(config, graph)
    by_name = graph.by_name()
    layers: dict[str, LayerFormats] = {}
    with_params = {layer.name for layer in graph if (home := kind_of(layer.type)) is not None and home.has_params}
    model = config.model_formats
    if model != LayerFormats():
        for layer in graph:
            if layer.name in with_params:
                layers[layer.name] = model
            elif model.output is not None and _output_only(layer.type):
                layers[layer.name] = LayerFormats(output=model.output)
    input_fmt = None
    for name, formats in config.layers.items():
        here = f"hls4ml config, layer '{name}'"
        if _is_input(name, graph):
            input_fmt = formats.output
            continue
        target, formats = _own_layer(name, formats, by_name, here)
        kind = by_name[target].type
        if target not in with_params:
            if not _output_only(kind):
                continue  # pooling, flatten, reshapes keep their input's format (docs/guide/contract.md, shape layers)
            if _has_weights(formats):
                raise K2CError(f"{here}: a {kind} layer has no weights or bias; give it a result only")
            formats = LayerFormats(output=formats.output)
        base = layers.get(target, LayerFormats())
        if (
            target != name
            and name not in by_name
            and target in config.layers
            and base.output is not None
            and formats.output is not None
            and base.output != formats.output
        ):
            raise K2CError(
                f"{here}: result {formats.output} differs from layer '{target}''s result "
                f"{base.output}; a fused activation writes its layer's output format"
            )
        layers[target] = merge_layer_formats(base, formats)
    pes, cyc = _knobs(config, graph)
    return Resolved(FormatConfig(config.default, input_fmt, layers), pes, cyc)


def _to_owners(config: Hls4mlConfig, graph: Graph) -> Hls4mlConfig:
    """The config with each Keras layer name that became several records (a transposed
    convolution: its phase convolution and the interleave named after it) moved to the record
    that takes its formats and reuse factor (`Kind.settings_owner`)."""
    owners = {
        layer.name: owner
        for layer in graph
        if (home := kind_of(layer.type)) is not None and (owner := home.settings_owner(layer)) is not None
    }
    for name, owner in owners.items():
        for stated in (config.layers, config.reuse):
            if name in stated and owner in stated:
                raise K2CError(
                    f"hls4ml config: layers '{name}' and '{owner}' are one Keras layer; give its settings once"
                )
    return replace(
        config,
        layers={owners.get(name, name): formats for name, formats in config.layers.items()},
        reuse={owners.get(name, name): reuse for name, reuse in config.reuse.items()},
    )


def _is_input(name: str, graph: Graph) -> bool:
    """The network input's entry: our name for it, or a Keras input layer's (`input_layer`,
    `input_1`, `dense_1_input`) when no layer of the graph has that name."""
    if graph.is_input(name):
        return True
    return name not in graph.by_name() and bool(re.fullmatch(r"input(_layer)?(_\d+)?|.+_input", name))


def _output_only(type_name: str) -> bool:
    """A kind whose only format is its output's (a standalone activation)."""
    home = kind_of(type_name)
    return home is not None and not home.keeps_format and not home.has_params


def _own_layer(name: str, formats: LayerFormats, by_name: Mapping[str, Layer], where: str) -> tuple[str, LayerFormats]:
    """The graph layer an hls4ml layer name stands for: itself, or for `<layer>_<activation>`
    the layer whose fused activation it is (its result only)."""
    if name in by_name:
        return name, formats
    base, _, act = name.rpartition("_")
    layer = by_name.get(base)
    if layer is not None and act and str(layer.activation).split("(")[0] == act:
        if _has_weights(formats):
            raise K2CError(f"{where}: the fused activation of '{base}' has no weights; give it a result only")
        return base, LayerFormats(output=formats.output)
    raise K2CError(f"{where}: no such layer in the model (layers: {', '.join(by_name)})")


def _knobs(config: Hls4mlConfig, graph: Graph) -> tuple[list[int] | None, list[int] | None]:
    computes = [layer for layer in graph if (home := kind_of(layer.type)) is not None and home.has_knobs]
    if config.model_reuse is None and not any(c.name in config.reuse for c in computes):
        return None, None
    pes, cycles = [], []
    for layer in computes:
        reuse = config.reuse.get(layer.name, config.model_reuse or 1)
        window, filters = _geometry(layer)
        pe, b = knobs_for_reuse(reuse, window, filters, layer.name)
        pes.append(pe)
        cycles.append(b)
    return pes, cycles


def _geometry(layer: Layer) -> tuple[int, int]:
    """(K, F) of a compute layer: the window and the filters (plan.LayerPlan.window/filters)."""
    home = kind_of(layer.type)
    assert home is not None
    return home.window(layer.input_shape, home.plan_params(layer)), layer.output_shape[-1]


def to_hls4ml(plans: Sequence[LayerPlan], default: FixedFormat | None = None) -> JsonObject:
    """Our plan in hls4ml's shape: exact ap types for every stated format, R per compute layer."""
    first = plans[0]
    source = first.inputs[0] if first.inputs else "input"
    if default is None:
        counts: dict[FixedFormat, int] = {}
        for p in plans:
            counts[p.out_fmt] = counts.get(p.out_fmt, 0) + 1
        default = max(counts, key=lambda f: counts[f])
    layers: JsonObject = {source: {"Precision": {"result": ap_type(first.in_fmt)}}}
    for p in plans:
        precision: JsonObject = {}
        if p.w_fmt is not None:
            precision[p.kind.weight_name if p.kind is not None else "weight"] = ap_type(p.w_fmt)
        if p.b_fmt is not None:
            precision["bias"] = ap_type(p.b_fmt)
        if p.has_params or p.is_merge or p.activation_only:
            precision["result"] = ap_type(p.out_fmt)
        if p.kind is not None and not p.kind.exact_accumulator(p) and p.acc_fmt is not None:
            precision["accum"] = ap_type(replace(p.acc_fmt, rounding="truncate"))
        entry: JsonObject = {}
        if precision:
            entry["Precision"] = precision
        if p.is_compute:
            entry["ReuseFactor"] = p.steps
        if entry:
            layers[p.name] = entry
    return {
        "Model": {"Precision": {"default": ap_type(default)}, "ReuseFactor": 1, "Strategy": "Latency"},
        "LayerName": layers,
    }


def hls4ml_yaml(plans: Sequence[LayerPlan], default: FixedFormat | None = None) -> str:
    """`to_hls4ml` as YAML text (keys in layer order)."""
    import yaml

    header = (
        "# keras2clash's formats and knobs as an hls4ml config (docs/guide/hls4ml.md).\n"
        "# ReuseFactor = groups x cycles per window; ap types state both modes.\n"
    )
    return header + yaml.safe_dump(to_hls4ml(plans, default), sort_keys=False, default_flow_style=False)
