"""The design knobs of a network in one record: `DesignOptions`.

Every way in builds this record — the command line's options, the keywords of `emit`, `run`,
`network.load_network` and `network.plan_network`, a search candidate — and planning reads
it. Each knob is checked here, once, when the record is made, with one `K2CError` naming it;
what only a model can answer (one value per compute layer, the names in per-layer formats,
the layers an hls4ml config names) is checked when the network is planned.

Knobs are given as strings (the command line's text: `"1,2,5"`, `"auto@150"`, `"ecp5-85k"`) or
as Python values (`[1, 2, 5]`, `2`, `132`); the record holds them parsed.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict, cast

from keras2clash.errors import K2CError
from keras2clash.fpga.devices import logic_budget, multiplier_budget
from keras2clash.hw.clock import auto_clock, auto_levels
from keras2clash.hw.lanes import resolve_lanes
from keras2clash.hw.plan import AUTO_STRATEGY, STRATEGIES
from keras2clash.hw.planner import parse_int_list
from keras2clash.quant.autoformat import DEFAULT_WEIGHT_FORMAT, WEIGHT_FORMATS
from keras2clash.quant.formats import FixedFormat, parse_format
from keras2clash.quant.hls4ml import Hls4mlConfig, read_hls4ml
from keras2clash.quant.layerformats import FormatConfig, is_auto, resolve_user_formats

if TYPE_CHECKING:
    from typing_extensions import Unpack

DEFAULT_FORMAT = "1,7,8"
DEFAULT_LOGIC_BUDGET = "ecp5-85k"
"""What `--strategy auto` fits its adder graphs into when no `--logic-budget` is given."""
"""The uniform format when none is given: the thesis' 1,7,8 (`SFixed 8 8`)."""

SOFTMAX_MODES = ("exact", "argmax")
"""How a softmax at the output is built: computed (exact), or left out (argmax: the
outputs are the logits, the predicted class is the same)."""

Auto = Literal["auto"]
SoftmaxMode = Literal["exact", "argmax"]
WeightFormat = Literal["same", "fit"]
LanesChoice = Literal["auto", "full"]

UserFormats = str | Path | Mapping[str, object] | FormatConfig
"""Per-layer formats as a user gives them: a JSON/YAML file, a mapping {layer: format or
LayerFormats} (or a whole config {"default", "input", "layers"}), or a FormatConfig
(quant.layerformats)."""

Hls4mlSource = str | Path | Mapping[str, object] | Hls4mlConfig
"""An hls4ml config: a YAML/JSON file, its parsed mapping, or an Hls4mlConfig (quant.hls4ml)."""


# --- one parser per knob: a string or a Python value in, the record's value out ------------


def design_format(value: str | FixedFormat) -> FixedFormat | Auto:
    """`--format`: a fixed-point format (`"1,7,8"`, `"ap_fixed<16,8>"`, a FixedFormat) or
    `"auto"` (per-layer formats chosen from calibration data, with `bits`)."""
    if isinstance(value, FixedFormat):
        return value
    if is_auto(value):
        return "auto"
    return parse_format(str(value))


def int_list(value: str | Iterable[int] | None, what: str) -> tuple[int, ...] | None:
    """`"1,2,5"` or [1, 2, 5] -> (1, 2, 5): one value per compute layer (how many the model
    has is checked when it is planned: `per_layer`); None or "" stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        # hw.plan.parse_int_list states what a good list is; the count comes with the model
        parsed = parse_int_list(value, value.count(",") + 1, what)
        return None if parsed is None else tuple(parsed)
    values = tuple(value) if isinstance(value, Iterable) else (value,)
    if not isinstance(value, Iterable) or not all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values
    ):
        raise K2CError(f"bad {what} {value!r}: expected whole numbers, one per dense/conv2d/depthwise2d layer")
    return tuple(int(v) for v in values)


def per_layer(values: Sequence[int] | None, n: int, what: str) -> list[int] | None:
    """A knob's values checked against the model's `n` compute layers."""
    if values is None:
        return None
    return parse_int_list(",".join(map(str, values)), n, what)


def pipeline_levels(value: str | int | Iterable[int] | None) -> int | tuple[int, ...] | None:
    """`--pipeline`: one number for every compute layer ("2"), one per layer ("2,0,1"), or
    "auto" / "auto@MHZ": the fewest registers for that clock (hw/clock.py, 100 MHz)."""
    if isinstance(value, str):
        mhz = auto_clock(value)
        if mhz is not None:
            return auto_levels(mhz)
        if "," not in value:
            try:
                return int(value)
            except ValueError:
                raise K2CError(
                    f"bad pipeline {value!r}: expected adder levels per register stage, "
                    "one number (e.g. 2), one per dense/conv2d/depthwise2d layer (e.g. 2,0,1), "
                    "or auto / auto@MHZ (e.g. auto@150)"
                ) from None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return int_list(value, "pipeline")


def strategies(value: str | Iterable[str] | None) -> str | tuple[str, ...] | None:
    """`--strategy`: one for every compute layer ("latency") or one per layer
    ("latency,resource,latency"), each one of hw.plan.STRATEGIES or "auto" (chosen with the
    multiplier budget, hw.strategy)."""
    if value is None:
        return None
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [str(name).strip() for name in names]
    bad = [name for name in names if name not in (*STRATEGIES, AUTO_STRATEGY)]
    if bad or not names:
        raise K2CError(
            f"bad strategy {value!r}: expected {', '.join(STRATEGIES)} or {AUTO_STRATEGY}, one for every "
            "dense/conv2d/depthwise2d layer or one per layer (e.g. latency,resource)"
        )
    return names[0] if len(names) == 1 else tuple(names)


def dsp_budget(value: int | str | None) -> int | None:
    """`--dsp-budget`: a number of multipliers or a device (fpga.devices.multiplier_budget)."""
    return None if value is None else multiplier_budget(value)


def logic_cells(value: int | str | None) -> int | None:
    """`--logic-budget`: LUT4 cells or a device (fpga.devices.logic_budget)."""
    return None if value is None else logic_budget(value)


def lanes_choice(value: str | None) -> LanesChoice | None:
    """`--lanes`: auto or full; None leaves the choice to the budget (hw.lanes.resolve_lanes)."""
    return None if value is None else cast(LanesChoice, resolve_lanes(value, None))


def softmax_choice(value: str) -> SoftmaxMode:
    """`--softmax`: one of SOFTMAX_MODES."""
    if value not in SOFTMAX_MODES:
        raise K2CError(f"bad softmax mode {value!r}: use one of {', '.join(SOFTMAX_MODES)}")
    return cast(SoftmaxMode, value)


def weight_format_choice(value: str) -> WeightFormat:
    """`--weight-format`: fit or same (quant.autoformat.WEIGHT_FORMATS)."""
    if value not in WEIGHT_FORMATS:
        raise K2CError(f"bad --weight-format {value!r}: one of {', '.join(WEIGHT_FORMATS)}")
    return cast(WeightFormat, value)


def total_bits(value: int | None) -> int | None:
    """`--bits`: the width of every value under `--format auto`, 1 to 64."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 1 <= value <= 64:
        raise K2CError(f"bad --bits {value!r}: the total width of every value, 1 to 64")
    return int(value)


def user_formats(
    layer_formats: UserFormats | None = None,
    layer_format_options: Sequence[str] | None = None,
    input_format: str | FixedFormat | None = None,
) -> FormatConfig | None:
    """`--layer-formats FILE`, `--layer-format ...` and `--input-format` as one FormatConfig,
    later ones on top (quant.layerformats.resolve_user_formats); None when none is given (an
    HGQ2 model refuses formats given with it, even empty ones)."""
    if layer_formats is None and not layer_format_options and input_format is None:
        return None
    return resolve_user_formats(layer_formats, layer_format_options, input_format)


def hls4ml_config(value: Hls4mlSource | None) -> Hls4mlConfig | None:
    """`--hls4ml-config`: read now (quant.hls4ml.read_hls4ml); matched to the graph when planned."""
    if value is None or isinstance(value, Hls4mlConfig):
        return value
    return read_hls4ml(value)


def _path(value: str | Path | None) -> Path | None:
    return None if value is None else Path(value)


# --- the record ----------------------------------------------------------------------------


@dataclass(frozen=True)
class DesignOptions:
    """The knobs that decide a network's hardware (docs/guide/knobs.md, docs/guide/formats.md).

    `DesignOptions.of` builds it from strings (the command line's text) or Python values (a
    list for a tuple, "ecp5-85k" for a budget, a file for a config) and refuses a bad one with
    a `K2CError` naming it; the fields hold the parsed values, and a record made or changed
    (`dataclasses.replace`) with field values directly checks them the same way.

    Attributes:
        format: The uniform fixed-point format (`--format`), or "auto": per-layer formats
            chosen from `calibration` at `bits` total width (quant.autoformat).
        layer_formats: Per-layer, default and input formats on top of `format`
            (`--layer-formats`, `--layer-format`, `--input-format`); None: none given.
        bits: The total width of every value under `format="auto"`.
        calibration: The calibration set (.npz, array x) of `format="auto"`.
        parallelism: Processing elements of each dense/conv2d/depthwise2d layer (None: 1 each).
        cycles: Cycles each processing element spends on a window (None: 1 each, a whole
            dot product a cycle).
        pipeline: Adder-tree levels per register stage, one for every compute layer or one
            each (0: a whole dot product in one cycle; None: hw.plan.DEFAULT_PIPELINE).
        strategy: What each compute layer is built as, one for every compute layer or one
            each: "resource" (weights in a memory, multipliers, `parallelism` and `cycles`)
            or "latency" (the weights as constants of an adder graph, one window a cycle),
            or "auto" (chosen with `dsp_budget` within `logic_budget`, hw.strategy); None:
            "resource".
        dsp_budget: Multipliers to balance `parallelism` and `cycles` within, for the
            smallest initiation interval (hw.allocate; a device's is the share the open flow
            routes: fpga.devices.Device.multiplier_budget); None: the knobs as given.
        logic_budget: LUT4 cells the adder graphs of layers whose strategy is "auto" may take
            (a device's is a share of its cells: fpga.devices.LOGIC_SHARE); None: the
            default device's share (DEFAULT_LOGIC_BUDGET).
        lanes: A Batch- or LayerNormalization's channels a cycle: "auto" the fewest that keep the
            initiation interval, "full" a whole beat (None: auto under a budget, else full).
        softmax: An output softmax computed ("exact") or left out ("argmax": the outputs
            are the logits, the class the same).
        no_class: An output vector leaves the Top as its values alone, without the class
            (the argmax) the Top takes by default: a trigger's scores, in fewer cycles and
            cells (hw.output.classifies).
        weight_format: "fit": each layer's weights in the format's width with the integer
            bits their largest value needs (quant.autoformat.fitted_weights); "same": in the
            layer's format.
        hls4ml_config: An hls4ml config's formats and, through its ReuseFactor, the knobs
            (quant.hls4ml).
        weights: The pickled weight list of a model given as a JSON config.
        writable_weights: The engines' weight memories in block RAMs a host writes at run
            time through the top entity's weight port (K2C.WeightBus; docs/guide/integration.md,
            "Writable weights"); False: ROMs, as synthesized.
        readable_weights: With `writable_weights`, the weight port also reads the memories
            back, answering on a port of its own from a copy of each memory
            (K2C.WeightReadBack), which takes as much block RAM again; False: the port only
            writes.
    """

    format: FixedFormat | Auto = parse_format(DEFAULT_FORMAT)
    layer_formats: FormatConfig | None = None
    bits: int | None = None
    calibration: Path | None = None
    parallelism: tuple[int, ...] | None = None
    cycles: tuple[int, ...] | None = None
    pipeline: int | tuple[int, ...] | None = None
    strategy: str | tuple[str, ...] | None = None
    dsp_budget: int | None = None
    logic_budget: int | None = None
    lanes: LanesChoice | None = None
    softmax: SoftmaxMode = "exact"
    no_class: bool = False
    weight_format: WeightFormat = cast(WeightFormat, DEFAULT_WEIGHT_FORMAT)
    hls4ml_config: Hls4mlConfig | None = None
    weights: Path | None = None
    writable_weights: bool = False
    readable_weights: bool = False

    def __post_init__(self) -> None:
        for name, parse in _PARSERS.items():
            object.__setattr__(self, name, parse(getattr(self, name)))
        if self.readable_weights and not self.writable_weights:
            # the read-back copies are written from the weight port: without it they would hold
            # the synthesized words forever, and there would be no port to read them through
            raise K2CError("--readable-weights reads back the weight port's memories: add --writable-weights")

    @classmethod
    def of(
        cls, design: DesignOptions | str | FixedFormat = DEFAULT_FORMAT, **knobs: Unpack[DesignKnobs]
    ) -> DesignOptions:
        """The record a keyword call stands for: `design` (a record, or just its format) with
        the knobs given as keywords on top; `input_format` goes into `layer_formats`.
        `DesignOptions.of("1,7,8", parallelism="1,2,5")`."""
        values: dict[str, object] = dict(knobs)
        unknown = sorted(set(values) - set(DesignKnobs.__annotations__))
        if unknown:
            raise TypeError(
                f"unknown design option(s) {', '.join(map(repr, unknown))}; the options are "
                f"{', '.join(DesignKnobs.__annotations__)}"
            )
        input_format = values.pop("input_format", None)
        if input_format is not None:
            base = (
                values["layer_formats"]
                if "layer_formats" in values
                else (design.layer_formats if isinstance(design, DesignOptions) else None)
            )
            values["layer_formats"] = user_formats(base, None, input_format)  # type: ignore[arg-type]
        if isinstance(design, DesignOptions):
            return replace(design, **values) if values else design  # type: ignore[arg-type]
        return cls(format=design, **values)  # type: ignore[arg-type]

    def changed(self) -> tuple[str, ...]:
        """The fields that differ from the defaults (`DesignOptions()`)."""
        default = DesignOptions()
        return tuple(f.name for f in fields(self) if getattr(self, f.name) != getattr(default, f.name))


class DesignKnobs(TypedDict, total=False):
    """`DesignOptions`' fields as keywords, each as a string or a Python value
    (`emit(model, "1,7,8", out, parallelism=[1, 2, 5], pipeline="auto@150")`), and
    `input_format`, which goes into `layer_formats`."""

    layer_formats: UserFormats | None
    input_format: str | FixedFormat | None
    bits: int | None
    calibration: str | Path | None
    parallelism: str | Sequence[int] | None
    cycles: str | Sequence[int] | None
    pipeline: str | int | Sequence[int] | None
    strategy: str | Sequence[str] | None
    dsp_budget: int | str | None
    logic_budget: int | str | None
    lanes: str | None
    softmax: str
    no_class: bool
    weight_format: str
    hls4ml_config: Hls4mlSource | None
    weights: str | Path | None
    writable_weights: bool
    readable_weights: bool


_PARSERS = {
    "format": design_format,
    "layer_formats": lambda value: user_formats(value),
    "bits": total_bits,
    "calibration": _path,
    "parallelism": lambda value: int_list(value, "parallelism"),
    "cycles": lambda value: int_list(value, "cycles"),
    "pipeline": pipeline_levels,
    "strategy": strategies,
    "dsp_budget": dsp_budget,
    "logic_budget": logic_cells,
    "lanes": lanes_choice,
    "softmax": softmax_choice,
    "no_class": lambda value: bool(value),
    "weight_format": weight_format_choice,
    "hls4ml_config": hls4ml_config,
    "weights": _path,
    "writable_weights": lambda value: bool(value),
    "readable_weights": lambda value: bool(value),
}
"""Each field's parser (every field has one: the record holds only parsed values)."""
