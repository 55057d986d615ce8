"""Per-layer precision from the command line and from config files (docs/guide/formats.md).

Two ways to say which format each compute layer uses, in the spirit of hls4ml's per-layer
precision. Both end as `{layer name: plan.LayerFormats}` plus an optional input format and
model-wide default, which `planner.make_plan` takes as they are.

Command line, one `--layer-format` per layer (repeatable):

    NAME:FIELD=VALUE[:FIELD=VALUE...]      e.g.  dense_1:w=1,3,12:b=1,7,8:o=1,5,10:acc=24
    NAME:FORMAT                            e.g.  dense_2:1,5,10   (weights, bias and output)

FIELD is `w` (weights), `b` (bias), `o` (layer output = activation), `acc` (accumulator
total width in bits, or `exact`), or `all` (w, b and o at once; later fields override it).
Long names work too: `weight(s)`, `bias`, `output`/`out`/`result`, `accumulator`/`accum`.
A field not given takes the default: weights and output the model-wide `--format`, the bias
the layer's weight format, the accumulator the exact width (docs/guide/contract.md, step 3).

Config file (`--layer-formats FILE`, JSON; YAML too when PyYAML is installed):

    {"default": "1,7,8",                     # optional: replaces --format
     "input": "1,1,10",                      # optional: the input format (--input-format)
     "layers": {
        "dense_1": {"weight": "1,3,12", "bias": "1,7,8", "output": "1,5,10", "accumulator": 24},
        "dense_2": "1,5,10"}}                # a bare format: weights, bias and output

Formats are strings `"1,7,8"`, `"0,4,4,trn,wrap"`, `"ap_fixed<16,8,AP_RND,AP_SAT>"`
(quant.formats.parse_format) or lists `[1, 7, 8]` / `[0, 4, 4, "truncate", "wrap"]`. hls4ml's
key names `result` and
`accum` are accepted as aliases of `output` and `accumulator`. `--layer-format` entries
are applied after the file, field by field, so the command line refines a config.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keras2clash.data import load_named_inputs, read_npz
from keras2clash.errors import K2CError, yaml_problem
from keras2clash.hw.plan import LayerFormats
from keras2clash.jsontypes import JsonObject
from keras2clash.quant.formats import FixedFormat, make_format, parse_format

if TYPE_CHECKING:
    import numpy as np

    from keras2clash.quant.autoformat import AutoReport

FIELD_ALIASES = {
    "w": "weight",
    "weight": "weight",
    "weights": "weight",
    "kernel": "weight",
    "b": "bias",
    "bias": "bias",
    "o": "output",
    "out": "output",
    "output": "output",
    "result": "output",
    "activation": "output",
    "acc": "accumulator_bits",
    "accum": "accumulator_bits",
    "accumulator": "accumulator_bits",
    "accumulator_bits": "accumulator_bits",
    "all": "all",
}
"""Every accepted field name -> the LayerFormats field it sets ('all': weight, bias, output)."""


@dataclass(frozen=True)
class FormatConfig:
    """What the user said about formats: a default, an input format, per-layer overrides."""

    default: FixedFormat | None = None
    input: FixedFormat | None = None
    layers: dict[str, LayerFormats] = field(default_factory=dict)

    def merged(self, other: FormatConfig) -> FormatConfig:
        """`other` applied on top of this one (field by field for layers)."""
        layers = dict(self.layers)
        for name, lf in other.layers.items():
            layers[name] = merge_layer_formats(layers.get(name, LayerFormats()), lf)
        return FormatConfig(other.default or self.default, other.input or self.input, layers)


def merge_layer_formats(base: LayerFormats, top: LayerFormats) -> LayerFormats:
    """Fields set in `top` replace those of `base`."""
    return replace(base, **{k: v for k, v in vars(top).items() if v is not None})


def _format_value(value: object, where: str) -> FixedFormat:
    if isinstance(value, FixedFormat):
        return value
    if isinstance(value, (list, tuple)):
        if (
            not 3 <= len(value) <= 5
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value[:3])
            or not all(isinstance(v, str) for v in value[3:])
        ):
            raise K2CError(
                f"{where}: a format list needs three integers [sign, int, frac] (and optionally the "
                f"rounding and overflow modes), got {value!r}"
            )
        try:
            return make_format(*value)
        except K2CError as exc:
            raise K2CError(f"{where}: {exc}") from None
    if isinstance(value, str):
        try:
            return parse_format(value)
        except K2CError as exc:
            raise K2CError(f"{where}: {exc}") from None
    raise K2CError(f'{where}: expected a format like "1,7,8" or [1, 7, 8], got {value!r}')


def _accumulator_value(value: object, where: str) -> int | None:
    if isinstance(value, str) and value.strip().lower() == "exact":
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64:
        raise K2CError(f"{where}: the accumulator is a width in bits (1..64) or 'exact', got {value!r}")
    return value


def _field_name(key: str, where: str) -> str:
    name = FIELD_ALIASES.get(str(key).strip().lower())
    if name is None:
        raise K2CError(
            f"{where}: unknown field {key!r}; use w (weights), b (bias), o (output), acc (accumulator) or all"
        )
    return name


def _layer_entry(fields: Iterable[tuple[str, object]], where: str) -> LayerFormats:
    values: dict[str, Any] = {}  # LayerFormats' keyword arguments, each of its own type
    for key, value in fields:
        name = _field_name(key, where)
        if name == "accumulator_bits":
            values[name] = _accumulator_value(value, f"{where}, {key}")
        elif name == "all":
            fmt = _format_value(value, f"{where}, {key}")
            values.update(weight=fmt, bias=fmt, output=fmt)
        else:
            values[name] = _format_value(value, f"{where}, {key}")
    return LayerFormats(**values)


def parse_layer_format(text: str) -> tuple[str, LayerFormats]:
    """One `--layer-format` value: `NAME:w=1,3,12:b=...:o=...:acc=24` or `NAME:1,5,10`."""
    where = f"bad --layer-format {text!r}"
    name, sep, rest = text.partition(":")
    name = name.strip()
    if not sep or not name or not rest.strip():
        raise K2CError(f"{where}: expected NAME:w=S,I,F:b=S,I,F:o=S,I,F:acc=BITS or NAME:S,I,F")
    parts = [part.strip() for part in rest.split(":")]
    if len(parts) == 1 and "=" not in parts[0]:
        return name, _layer_entry([("all", parts[0])], where)
    pairs = []
    for part in parts:
        key, eq, value = part.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise K2CError(f"{where}: each field is KEY=VALUE (e.g. w=1,3,12 or acc=24), got {part!r}")
        pairs.append((key.strip(), value.strip()))
    return name, _layer_entry(pairs, where)


def parse_layer_format_options(texts: Iterable[str] | None) -> dict[str, LayerFormats]:
    """All `--layer-format` values; a layer named twice is merged field by field."""
    result: dict[str, LayerFormats] = {}
    for text in texts or ():
        name, lf = parse_layer_format(text)
        result[name] = merge_layer_formats(result.get(name, LayerFormats()), lf)
    return result


def config_from_mapping(data: object, where: str = "layer formats") -> FormatConfig:
    """A parsed JSON/YAML document -> FormatConfig (see the module docstring)."""
    if not isinstance(data, Mapping):
        raise K2CError(f"{where}: expected an object with 'layers' (and optional 'default', 'input')")
    unknown = set(data) - {"default", "input", "layers"}
    if unknown:
        raise K2CError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; use default, input, layers")
    default = _format_value(data["default"], f"{where}, default") if data.get("default") is not None else None
    input_fmt = _format_value(data["input"], f"{where}, input") if data.get("input") is not None else None
    layers_data = data.get("layers") or {}
    if not isinstance(layers_data, Mapping):
        raise K2CError(f"{where}: 'layers' must map layer names to formats")
    layers: dict[str, LayerFormats] = {}
    for name, entry in layers_data.items():
        here = f"{where}, layer {name!r}"
        if isinstance(entry, Mapping):
            layers[str(name)] = _layer_entry(entry.items(), here)
        else:
            layers[str(name)] = _layer_entry([("all", entry)], here)
    return FormatConfig(default, input_fmt, layers)


def load_config(path: str | Path) -> FormatConfig:
    """Read a `--layer-formats` file: .json always; .yaml/.yml when PyYAML is installed."""
    path = Path(path)
    if not path.is_file():
        raise K2CError(f"layer formats file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise K2CError(f"{path} is not UTF-8 text (expected JSON or YAML layer formats)") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError:
            raise K2CError(
                f"{path}: YAML needs PyYAML (pip install pyyaml, or keras2clash[yaml]); or write the file as JSON"
            ) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise K2CError(f"{path} is not valid YAML {yaml_problem(exc)}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise K2CError(f"{path} is not valid JSON: {exc}") from None
    return config_from_mapping(data, str(path))


def layer_formats_to_json(layers: Mapping[str, LayerFormats]) -> JsonObject:
    """{name: LayerFormats} as the config file's 'layers' object (round-trips through load)."""
    out: JsonObject = {}
    for name, lf in layers.items():
        entry: JsonObject = {}
        for key in ("weight", "bias", "output"):
            fmt = getattr(lf, key)
            if fmt is not None:
                entry[key] = str(fmt)
        if lf.accumulator_bits is not None:
            entry["accumulator"] = lf.accumulator_bits
        out[name] = entry
    return out


def resolve_user_formats(
    layer_formats: str | Path | Mapping[str, object] | FormatConfig | None = None,
    layer_format_options: Iterable[str] | None = None,
    input_format: str | FixedFormat | None = None,
) -> FormatConfig:
    """Combine a config (path, mapping or FormatConfig), `--layer-format` strings and
    `--input-format` into one FormatConfig (later sources win)."""
    if layer_formats is None:
        config = FormatConfig()
    elif isinstance(layer_formats, FormatConfig):
        config = layer_formats
    elif isinstance(layer_formats, (str, Path)):
        config = load_config(layer_formats)
    elif (
        isinstance(layer_formats, Mapping)
        and set(layer_formats) <= {"default", "input", "layers"}
        and ("layers" in layer_formats)
    ):
        config = config_from_mapping(layer_formats)
    elif isinstance(layer_formats, Mapping):  # {name: LayerFormats | FixedFormat | "1,5,10" | {...}}
        config = config_from_mapping(
            {
                "layers": {
                    name: ({k: f for k, f in vars(v).items() if f is not None} if isinstance(v, LayerFormats) else v)
                    for name, v in layer_formats.items()
                }
            }
        )
    else:
        raise K2CError(f"layer formats: expected a file path or a mapping, got {type(layer_formats).__name__}")
    config = config.merged(FormatConfig(layers=parse_layer_format_options(layer_format_options)))
    if input_format is not None:
        fmt = (
            input_format
            if isinstance(input_format, FixedFormat)
            else _format_value(str(input_format), "--input-format")
        )
        config = replace(config, input=fmt)
    return config


# --------------------------------------------------------------------------------------
# Resolving everything the user said into the plan's inputs (used by api.emit)
# --------------------------------------------------------------------------------------


def is_auto(fmt: object) -> bool:
    return isinstance(fmt, str) and fmt.strip().lower() == "auto"


@dataclass(frozen=True)
class ResolvedFormats:
    """`make_plan`'s format arguments, plus the auto-format report when one was made."""

    default: FixedFormat
    layers: dict[str, LayerFormats]
    input: FixedFormat | None = None
    auto: AutoReport | None = None
    calibration: str | None = None

    def to_json(self) -> JsonObject:
        data: JsonObject = {
            "default": str(self.default),
            "input": None if self.input is None else str(self.input),
            "layers": layer_formats_to_json(self.layers),
        }
        if self.auto is not None:
            data["auto"] = self.auto.to_json()
            data["calibration"] = self.calibration
        return data


def load_named_calibration(
    path: str | Path, inputs: Sequence[tuple[str, tuple[int, ...]]]
) -> tuple[list[np.ndarray], np.ndarray | None]:
    """`load_calibration` for a model of several inputs ((name, shape) each in `inputs`):
    `x_<input name>` per input (`data.load_named_inputs`), and the labels `y` if present."""
    import numpy as np

    path = Path(path)
    labels = read_npz(path, "calibration").get("y")
    xs = load_named_inputs(path, inputs)
    if labels is not None and labels.ndim == 2:
        labels = np.argmax(labels, axis=1)
    return xs, labels if labels is not None and labels.ndim == 1 and len(labels) == len(xs[0]) else None


def load_calibration(path: str | Path, input_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray | None]:
    """Calibration inputs `x` (and labels `y` if present) from an .npz; `x_train`/`x_test`
    work too. Labels are optional here: only the report's accuracies use them."""
    import numpy as np

    path = Path(path)
    arrays = read_npz(path, "calibration")
    key = next((k for k in ("x", "x_calib", "x_train", "x_test") if k in arrays), None)
    if key is None:
        raise K2CError(f"calibration file {path} needs an array 'x'; it has {sorted(arrays)}")
    x = arrays[key]
    if x.ndim == 3 and (1, *x.shape[1:]) == tuple(input_shape):  # a 1-D sequence (frontend.registry.image_shape)
        x = x.reshape(len(x), *input_shape)
    if x.ndim < 2 or tuple(x.shape[1:]) != tuple(input_shape) or len(x) == 0:
        raise K2CError(
            f"calibration file {path}: inputs have shape {tuple(x.shape)}, the model expects "
            f"(N, {', '.join(map(str, input_shape))}) with N >= 1"
        )
    if not np.issubdtype(x.dtype, np.number) or not np.all(np.isfinite(x)):
        raise K2CError(f"calibration file {path}: inputs must be finite numbers")
    y = arrays.get(key.replace("x", "y", 1))
    if y is not None and y.ndim == 2:
        y = np.argmax(y, axis=1)
    if y is not None and (y.ndim != 1 or len(y) != len(x)):
        y = None
    return x.astype(np.float64), y
