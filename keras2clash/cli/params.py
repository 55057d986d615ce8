"""Every option and argument that more than one command takes, defined once as a Typer
`Annotated` type: a command writes `parallelism: params.Parallelism = None` and gets the
same flag, help text and checks as every other command that takes it. An option whose help
says something different for some commands (`--force` replaces what each command writes)
has one type per meaning, built from one definition of the flag.

The design knobs (`--format`, `--parallelism`, `--pipeline`, ...) are declared once, as
the parameters of a decorator (`design_knobs`, `run_design_knobs`, `debug_design_knobs`): it
gives a command every knob as an option and calls it with the one `design.DesignOptions`
they state (`design_options`), which checks every value.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from keras2clash.design import DEFAULT_FORMAT, DesignOptions, user_formats
from keras2clash.hw.plan import DEFAULT_PIPELINE
from keras2clash.quant.autoformat import DEFAULT_WEIGHT_FORMAT

# --- help texts -----------------------------------------------------------------------------

FORMAT_HELP = (
    "Fixed-point format sign,int,frac (the thesis' notation): 1,7,8 = 16 bits = SFixed 8 8 = "
    "ap_fixed<16,8,AP_RND,AP_SAT>; 0,4,4 is unsigned, negative int/frac allowed, modes after it "
    "(1,7,8,trn,wrap), or an ap_fixed<W,I,Q,O> type."
)
PAR_HELP = "Processing elements per dense/conv2d layer, e.g. 1,2,5 (each 1..filters; default 1 each)."
PIPE_HELP = (
    "Adder-tree levels per register stage in every dense/conv2d layer's dot product, one "
    "number or one per layer, e.g. 2 or 2,0,1 (0: the whole dot product in one cycle; "
    f"default {DEFAULT_PIPELINE} = auto), or auto / auto@MHZ: the fewest registers for that "
    "clock on ECP5 (auto = 100 MHz). Fewer levels: a faster clock, a few cycles more latency."
)
STRATEGY_HELP = (
    "What every dense/conv2d layer is built as, one for all or one per layer, e.g. "
    "latency or latency,resource: resource (default) reads weights from a memory into "
    "multipliers (--parallelism, --cycles); latency makes them constants of a multiplier-free "
    "adder graph that takes a vector every cycle (--pipeline: adder levels per register stage); "
    "auto chooses per layer with --dsp-budget, its adder graphs within --logic-budget."
)
CYC_HELP = "Cycles per window per dense/conv2d layer, e.g. 1,9,1 (each 1..window size; default 1 each)."
LF_HELP = (
    "Per-layer formats NAME:w=S,I,F:b=S,I,F:o=S,I,F:acc=BITS (or NAME:S,I,F), repeatable; "
    "w weights, b bias, o output, acc accumulator width."
)
LFS_HELP = 'Per-layer formats from a JSON (or YAML) file: {"default", "input", "layers": {NAME: {...}}}.'
IN_HELP = "Format of the network's input (default: --format)."
BITS_HELP = "Total width of every value for --format auto."
CAL_HELP = "Calibration set .npz (array x) for --format auto: the layer outputs' ranges."
SOFTMAX_HELP = (
    "exact: compute a softmax at the output (exp table, exact division); argmax: leave it out, "
    "the outputs are the logits (same predicted class, no softmax hardware)."
)
TASK_HELP = (
    "auto | classifier (accuracy against labels y) | regression (output values against Keras and the "
    "targets y, if any: max |err| and MSE; an autoencoder's data may hold only x). auto: a softmax output, "
    "integer labels or one-hot rows mean a classifier; no y, one output or real-valued targets, regression."
)
WEIGHT_FORMAT_HELP = (
    "fit (default): weights in the layer format's width, with the integer bits each layer's "
    "largest weight needs and the rest in the fraction; same: in the layer's format, as the "
    "2021 thesis (docs/guide/formats.md)."
)
HLS4ML_HELP = (
    "An hls4ml config (YAML/JSON: Model and LayerName sections, Precision with ap_fixed types, "
    "ReuseFactor -> --parallelism/--cycles); --layer-formats/--layer-format refine it. Every project "
    "gets hls4ml_config.yml, its own formats and knobs in that shape."
)
BUDGET_HELP = (
    "Multiplier budget, a number or a device (ecp5-85k: 132 of its 156 MULT18X18D, what nextpnr "
    "routes; ice40-up5k: its 8): choose --parallelism "
    "and --cycles of every dense/conv2d layer for the smallest initiation interval within it "
    "(balanced allocation, exact model)."
)
LOGIC_BUDGET_HELP = (
    "LUT4 cells the adder graphs of --strategy auto may take, a number or a device (ecp5-85k, the "
    "default: half of its 83,640)."
)
LANES_HELP = (
    "Channels a Batch- or LayerNormalization computes a cycle: 'auto' the fewest that keep the initiation "
    "interval (fewer multipliers, a few cycles more latency), 'full' a whole beat a cycle. "
    "Default: auto with --dsp-budget, full without."
)
STORAGE_HELP = (
    "An optuna storage URL shared by several workers or machines (e.g. postgresql://..., or "
    "sqlite:////shared/search.db). Default: DIR/search.db."
)
MODEL_HELP = "A .keras, legacy .h5, or JSON config (+ pickled weights)."
DEBUG_MODEL_HELP = (
    "A .keras, legacy .h5 or JSON config (+ pickled weights), or a project written by 'keras2clash emit'."
)
PROJECT_HELP = "A directory written by 'keras2clash emit'."
TEST_DATA_HELP = "Test set .npz with arrays x and y."
LIMIT_HELP = "Use only the first N samples."


def _force(help: str) -> typer.models.OptionInfo:
    return typer.Option("--force", help=help)


def _format(help: str) -> typer.models.OptionInfo:
    return typer.Option("--format", "-f", help=help)


def _dsp_budget(help: str) -> typer.models.OptionInfo:
    return typer.Option("--dsp-budget", help=help)


def _json(help: str) -> typer.models.OptionInfo:
    return typer.Option("--json", help=help)


def _markdown(help: str) -> typer.models.OptionInfo:
    return typer.Option("--markdown", help=help)


# --- what a command reads -------------------------------------------------------------------

Model = Annotated[Path, typer.Argument(help=MODEL_HELP)]
"""A model file (emit, run, sweep, profile)."""
DebugModel = Annotated[Path, typer.Argument(help=DEBUG_MODEL_HELP)]
"""A model file or an emitted project (trace, predict)."""
Project = Annotated[Path, typer.Argument(help=PROJECT_HELP)]
"""An emitted project (hdl, simulate, testbench, rtlsim, synth, pnr)."""
SearchFolder = Annotated[Path, typer.Argument(metavar="DIR", help="A search folder (search run --out).")]
TestData = Annotated[Path, typer.Option("--data", "-d", help=TEST_DATA_HELP)]
Limit = Annotated[int | None, typer.Option("-n", min=1, help=LIMIT_HELP)]
Weights = Annotated[Path | None, typer.Option("--weights", help="Pickled weight list for a JSON config.")]

# --- what a command writes ------------------------------------------------------------------

ProjectOut = Annotated[Path, typer.Option("--out", "-o", help="Project directory to create.")]
Force = Annotated[bool, _force("Replace a non-empty output directory.")]
ForceOutDir = Annotated[bool, _force("Replace a non-empty --out-dir.")]
ForceReports = Annotated[bool, _force("Replace existing --json/--markdown files.")]
ForceTables = Annotated[bool, _force("Replace existing --json/--csv files.")]
ForcePlot = Annotated[bool, _force("Replace an existing --plot file.")]
ForceOut = Annotated[bool, _force("Replace an existing --out file.")]
ForceOutFile = Annotated[bool, _force("Replace an existing --out file.")]
ForcePnr = Annotated[bool, _force("Replace PROJECT/pnr/FPGA and existing --json/--markdown files.")]
ComparisonJson = Annotated[Path | None, _json("Also write the comparison as JSON.")]
ComparisonMarkdown = Annotated[Path | None, _markdown("Also write the comparison as markdown.")]
ReportJson = Annotated[Path | None, _json("Also write the report as JSON.")]
ReportMarkdown = Annotated[Path | None, _markdown("Also write the report as markdown.")]
Verilog = Annotated[bool, typer.Option("--verilog", help="Generate Verilog.")]
Vhdl = Annotated[bool, typer.Option("--vhdl", help="Generate VHDL.")]
SystemVerilog = Annotated[bool, typer.Option("--systemverilog", help="Generate SystemVerilog.")]

# --- simulation -----------------------------------------------------------------------------

Task = Annotated[str, typer.Option("--task", help=TASK_HELP)]
GapMax = Annotated[
    int,
    typer.Option(
        "--gap-max", min=0, help="Random idle cycles (0..K) before input beats and random m_axis_tready stalls."
    ),
]
"""Stalls of an HDL testbench (testbench, rtlsim)."""
GapSeed = Annotated[int, typer.Option("--seed", help="Seed for --gap-max.")]

# --- the design (design.DesignOptions) ------------------------------------------------------

Format = Annotated[str, _format(FORMAT_HELP)]
"""The format of a design (emit, run)."""
SourceFormat = Annotated[str, _format(FORMAT_HELP + " (model files only)")]
"""The format of a model file, where a project may be given instead (options, report)."""
DebugFormat = Annotated[str | None, _format(FORMAT_HELP + f" Default {DEFAULT_FORMAT} (not for a project).")]
"""The format of a model file, refused for a project (trace, predict)."""
Parallelism = Annotated[str | None, typer.Option("--parallelism", "-p", help=PAR_HELP)]
Cycles = Annotated[str | None, typer.Option("--cycles", "-c", help=CYC_HELP)]
Pipeline = Annotated[str | None, typer.Option("--pipeline", help=PIPE_HELP)]
Strategy = Annotated[str | None, typer.Option("--strategy", help=STRATEGY_HELP)]
LogicBudget = Annotated[str | None, typer.Option("--logic-budget", help=LOGIC_BUDGET_HELP)]
LayerFormat = Annotated[list[str] | None, typer.Option("--layer-format", help=LF_HELP)]
LayerFormats = Annotated[Path | None, typer.Option("--layer-formats", help=LFS_HELP)]
InputFormat = Annotated[str | None, typer.Option("--input-format", help=IN_HELP)]
Bits = Annotated[int | None, typer.Option("--bits", min=1, max=64, help=BITS_HELP)]
Calibration = Annotated[Path | None, typer.Option("--calibration", help=CAL_HELP)]
RunCalibration = Annotated[Path | None, typer.Option("--calibration", help=CAL_HELP + " Default: --data.")]
DspBudget = Annotated[str | None, _dsp_budget(BUDGET_HELP)]
DspBudgetShown = Annotated[str | None, _dsp_budget(BUDGET_HELP + " Shows configurations within it.")]
DspBudgetAdded = Annotated[str | None, _dsp_budget(BUDGET_HELP + " Adds that configuration.")]
Lanes = Annotated[str | None, typer.Option("--lanes", help=LANES_HELP)]
Softmax = Annotated[str, typer.Option("--softmax", help=SOFTMAX_HELP)]
NoClass = Annotated[
    bool,
    typer.Option(
        "--no-class",
        help="An output vector leaves the Top as its values alone, without the class (argmax) it takes "
        "by default: a trigger's scores, in fewer cycles and cells. A test set's class is then their argmax.",
    ),
]
WeightFormat = Annotated[str, typer.Option("--weight-format", help=WEIGHT_FORMAT_HELP)]
DebugWeightFormat = Annotated[
    str | None, typer.Option("--weight-format", help=WEIGHT_FORMAT_HELP + " Not for a project.")
]
Hls4ml = Annotated[Path | None, typer.Option("--hls4ml-config", help=HLS4ML_HELP)]
WritableWeights = Annotated[
    bool,
    typer.Option(
        "--writable-weights",
        help="Weight memories a host writes at run time through the s_axis_weights port (block RAMs "
        "initialised from the weight files); every dense/conv layer must use the resource strategy.",
    ),
]
ReadableWeights = Annotated[
    bool,
    typer.Option(
        "--readable-weights",
        help="With --writable-weights: the s_axis_weights port also takes read messages, answered on the "
        "m_axis_weights port from a copy of each weight memory (as much block RAM again).",
    ),
]

# --- the co-design search -------------------------------------------------------------------

Storage = Annotated[str | None, typer.Option("--storage", help=STORAGE_HELP)]
FolderStorage = Annotated[str | None, typer.Option("--storage", help="The storage URL, if not the one DIR records.")]
Top = Annotated[int, typer.Option("--top", min=1, help="Rows of the table of best candidates.")]


def design_options(
    format: str | None = None,
    *,
    layer_formats: Path | None = None,
    layer_format: list[str] | None = None,
    input_format: str | None = None,
    bits: int | None = None,
    calibration: Path | None = None,
    parallelism: str | None = None,
    cycles: str | None = None,
    pipeline: str | None = None,
    strategy: str | None = None,
    dsp_budget: str | None = None,
    logic_budget: str | None = None,
    lanes: str | None = None,
    softmax: str = "exact",
    no_class: bool = False,
    weight_format: str | None = None,
    hls4ml_config: Path | None = None,
    weights: Path | None = None,
    writable_weights: bool = False,
    readable_weights: bool = False,
) -> DesignOptions:
    """The design the options state (None: the option is not given, its default holds); the
    record checks every value (`design.DesignOptions`)."""
    return DesignOptions.of(
        DEFAULT_FORMAT if format is None else format,
        layer_formats=user_formats(layer_formats, layer_format, input_format),
        bits=bits,
        calibration=calibration,
        parallelism=parallelism,
        cycles=cycles,
        pipeline=pipeline,
        strategy=strategy,
        dsp_budget=dsp_budget,
        logic_budget=logic_budget,
        lanes=lanes,
        softmax=softmax,
        no_class=no_class,
        weight_format=DEFAULT_WEIGHT_FORMAT if weight_format is None else weight_format,
        hls4ml_config=hls4ml_config,
        weights=weights,
        writable_weights=writable_weights,
        readable_weights=readable_weights,
    )


def debug_design(format: str | None = None, **knobs: Any) -> DesignOptions | None:
    """The design the options state for a model file; None when they state none, as a
    project has its own and refuses any (trace, predict)."""
    design = design_options(format, **knobs)
    return None if format is None and design == DesignOptions() else design


# --- the design knobs as one parameter of a command -----------------------------------------

R = TypeVar("R")


def _knob(name: str, annotation: object, default: object = None) -> inspect.Parameter:
    # Keyword-only: Typer passes every value by name, and a keyword-only parameter may stand
    # anywhere in a signature, with or without a default, before or after the command's own.
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


KNOBS = (
    _knob("format", Format, DEFAULT_FORMAT),
    _knob("parallelism", Parallelism),
    _knob("cycles", Cycles),
    _knob("weights", Weights),
    _knob("layer_format", LayerFormat),
    _knob("layer_formats", LayerFormats),
    _knob("input_format", InputFormat),
    _knob("bits", Bits),
    _knob("calibration", Calibration),
    _knob("dsp_budget", DspBudget),
    _knob("softmax", Softmax, "exact"),
    _knob("no_class", NoClass, False),
    _knob("pipeline", Pipeline),
    _knob("strategy", Strategy),
    _knob("logic_budget", LogicBudget),
    _knob("hls4ml_config", Hls4ml),
    _knob("weight_format", WeightFormat, DEFAULT_WEIGHT_FORMAT),
    _knob("lanes", Lanes),
    _knob("writable_weights", WritableWeights, False),
    _knob("readable_weights", ReadableWeights, False),
)
"""Every design knob as a command parameter, named as `design_options`' keyword, in the
order `--help` lists them."""


def _knobs(omit: tuple[str, ...] = (), **variants: object) -> tuple[inspect.Parameter, ...]:
    """KNOBS without `omit`, some of them with another type (another help text), whose
    default None leaves the knob's default to `build`."""
    return tuple(
        _knob(knob.name, variants[knob.name]) if knob.name in variants else knob
        for knob in KNOBS
        if knob.name not in omit
    )


@dataclass(frozen=True)
class DesignParams:
    """A command's design knobs. As a decorator, it puts `knobs` into the command's signature
    in place of its `design` parameter, where Typer reads the options, and calls the command
    with `design=build(**the knobs' values)`: the command's body sees one typed record."""

    knobs: tuple[inspect.Parameter, ...]
    build: Callable[..., DesignOptions | None]

    def __call__(self, command: Callable[..., R]) -> Callable[..., R]:
        signature = inspect.signature(command, eval_str=True)
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in signature.parameters.values()]
        names = [p.name for p in own]
        if "design" not in names:
            raise TypeError(f"{command.__name__} takes no 'design' parameter for its design knobs")
        at = names.index("design")
        parameters = [*own[:at], *self.knobs, *own[at + 1 :]]

        @functools.wraps(command)
        def with_design(**values: Any) -> R:
            knobs = {knob.name: values.pop(knob.name) for knob in self.knobs}
            return command(design=self.build(**knobs), **values)

        with_design.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        # what typing.get_type_hints, which Typer calls, reads: the signature's, not the
        # command's with its `design`
        with_design.__annotations__ = {p.name: p.annotation for p in parameters} | {
            "return": signature.return_annotation
        }
        return with_design


design_knobs = DesignParams(KNOBS, design_options)
"""Every knob (emit)."""
run_design_knobs = DesignParams(_knobs(calibration=RunCalibration), design_options)
"""Every knob; --calibration defaults to --data (run)."""
debug_design_knobs = DesignParams(
    _knobs(
        omit=(
            "parallelism",
            "cycles",
            "dsp_budget",
            "pipeline",
            "strategy",
            "logic_budget",
            "hls4ml_config",
            "lanes",
            "writable_weights",
            "readable_weights",
        ),
        format=DebugFormat,
        weight_format=DebugWeightFormat,
    ),
    debug_design,
)
"""The knobs of the golden model's numbers, for a model file; the design is None when none
is given (trace, predict)."""
