"""The hardware plan: formats and space-time knobs of every layer (a pass over the IR).

The IR says what the network computes; the plan says how the hardware computes it: the
fixed-point format of each layer's input, weights, bias, accumulator and output, and, for
each compute layer (dense, conv2d, depthwise2d), its knobs (`Knobs`): `pe` processing
elements (filters or neurons in parallel) and `cycles` per window (each PE then has
ceil(K / cycles) multipliers). Formats are per layer in the data model even when the user
gives one format for all, so per-layer precision needs no new plumbing.

What only one kind has (a window's geometry, a merge's input formats, a batch
normalization's lanes, ...) is that kind's own record (`Params`, defined in its module under
`keras2clash.kinds`): the plan holds it in `params`, and only the kind reads it.
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Self, get_args, get_origin, get_type_hints

from keras2clash.ir.layers import Layer
from keras2clash.jsontypes import Json, JsonObject
from keras2clash.quant import activations
from keras2clash.quant.formats import FixedFormat
from keras2clash.registry import kind_of

if TYPE_CHECKING:
    from keras2clash.kinds.base import Kind


@dataclass(frozen=True)
class LayerFormats:
    """A user's per-layer override: any field left None takes the default."""

    weight: FixedFormat | None = None
    bias: FixedFormat | None = None
    output: FixedFormat | None = None
    accumulator_bits: int | None = None  # total width; fraction bits stay exact


STRATEGIES = ("resource", "latency")
"""What a layer with knobs is built as (hls4ml's words; the kinds decide what each means,
kinds.engine): `resource`, weights in a memory read into multipliers, `pe` and `cycles`
trading them for time; `latency`, the weights as constants in an adder graph, one window a
cycle, `pipeline` adder levels per register stage."""
DEFAULT_STRATEGY, LATENCY_STRATEGY = STRATEGIES
AUTO_STRATEGY = "auto"
"""`--strategy auto`: the layer's strategy is chosen with the knobs (`hw.strategy`); a plan
never holds it."""


@dataclass(frozen=True)
class Knobs:
    """The space-time knobs of a layer on the filter engine (`Kind.has_knobs`).

    They are a field of every plan (`LayerPlan.knobs`, None for a kind without them) rather
    than of one kind's `Params`: the stages that choose them (`hw.allocate`, `hw.options`,
    `hw.clock`, `search`) and those that report them treat every kind with knobs alike."""

    pe: int = 1  # processing elements: filters (neurons) computed in parallel
    cycles: int = 1  # steps per window: each PE has ceil(K / cycles) multipliers
    pipeline: int = 0  # adder-tree levels per register stage; 0: the dot product in one cycle
    strategy: str = DEFAULT_STRATEGY  # one of STRATEGIES: what the layer's kind builds (hls4ml's words)

    def to_json(self) -> JsonObject:
        data: JsonObject = {"pe": self.pe, "cycles": self.cycles, "pipeline": self.pipeline}
        if self.strategy != DEFAULT_STRATEGY:  # a manifest of the default reads as it always has
            data["strategy"] = self.strategy
        return data

    @staticmethod
    def from_json(data: Mapping[str, Json]) -> Knobs:
        values = [data.get(key) for key in ("pe", "cycles", "pipeline")]
        pe, cycles, pipeline = (v for v in values if isinstance(v, int))
        strategy = data.get("strategy", DEFAULT_STRATEGY)
        return Knobs(pe, cycles, pipeline, strategy if isinstance(strategy, str) else DEFAULT_STRATEGY)


@dataclass(frozen=True)
class Params:
    """The base of a kind's own plan parameters: a frozen dataclass in the kind's module
    (`Kind.params_type`), made by the kind when it plans a layer and read by the kind alone.

    The manifest stores a plan's record under its `params` and reads it back through the
    kind's record class, so the fields hold what JSON round-trips: ints, bools, strings,
    formats, and tuples of them (`to_json`, `from_json` follow the field types)."""

    def to_json(self) -> JsonObject:
        return {f.name: _to_json(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Json]) -> Self:
        hints = get_type_hints(cls)
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"{cls.__name__} has no field(s) {', '.join(sorted(unknown))}")
        values = {name: _from_json(value, hints[name]) for name, value in data.items()}
        return cls(**values)


@dataclass(frozen=True)
class NoParams(Params):
    """The parameters of a kind that has none of its own."""


def _to_json(value: object) -> Json:
    if isinstance(value, FixedFormat):
        return format_to_json(value)
    if isinstance(value, tuple):
        return [_to_json(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"a plan parameter of type {type(value).__name__} has no JSON form")


def _from_json(value: Json, hint: object) -> object:
    """`value` as the field type `hint` has it: formats from their lists, tuples from lists."""
    if hint is FixedFormat:
        return format_from_json(value)
    if get_origin(hint) is tuple:
        if not isinstance(value, list):
            raise ValueError(f"expected a list, not {value!r}")
        args = get_args(hint)
        items = args[:1] * len(value) if len(args) == 2 and args[1] is Ellipsis else args
        return tuple(_from_json(v, t) for v, t in zip(value, items, strict=True))
    if isinstance(hint, types.UnionType) and value is not None:  # `X | None`
        return _from_json(value, next(t for t in get_args(hint) if t is not type(None)))
    return value


@dataclass(frozen=True)
class LayerPlan:
    """One layer as the hardware builds it: what every layer has, the knobs of a kind with
    them, and the kind's own parameters (`params`)."""

    name: str
    type: str  # a kind's type (keras2clash.kinds)
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    activation: str  # the Keras activation, kept for reports
    in_fmt: FixedFormat  # the first input's (a merge's others: its kind's `input_formats`)
    out_fmt: FixedFormat
    w_fmt: FixedFormat | None = None
    b_fmt: FixedFormat | None = None
    acc_fmt: FixedFormat | None = None
    inputs: tuple[str, ...] = ()  # producers (layer names, or the network input's name)
    top_activation: bool = False  # the output activation, applied in Top after the class (hw.output.splits_output)
    output_port: int | None = None  # which output of a model of several it is (hw.output.output_plans)
    output_class: bool = True  # as an output vector, the Top takes its class (hw.output.classifies; --no-class)
    # a model of several inputs: every input (name, shape, format) in the model's order, on its first plan (hw.inputs)
    network_inputs: tuple[tuple[str, tuple[int, ...], FixedFormat], ...] = ()
    knobs: Knobs | None = None  # a kind with the space-time knobs (`Kind.has_knobs`); None for the others
    params: Params = field(default_factory=NoParams)  # the kind's own record (`Kind.params_type`)
    layer: Layer | None = field(default=None, compare=False, repr=False)  # the IR record (weights)

    @property
    def kind(self) -> Kind | None:
        """The layer's kind (`keras2clash.kinds`); None for a type no kind builds."""
        return kind_of(self.type)

    @property
    def fixed_knobs(self) -> bool:
        """Its `pe` and `cycles` are fixed by its strategy (`Kind.fixed_knobs`): no other is tried."""
        return self.kind is not None and self.kind.fixed_knobs(self)

    @property
    def is_compute(self) -> bool:
        """A layer with the space-time knobs (`Kind.has_knobs`: the filter engine's kinds)."""
        return self.kind is not None and self.kind.has_knobs

    @property
    def has_params(self) -> bool:
        """Layers with quantized constants: the compute layers' ROMs, a BatchNormalization's
        per-channel scale (weight format) and offset (bias format)."""
        return self.kind is not None and self.kind.has_params

    @property
    def activation_only(self) -> bool:
        """A standalone activation layer (`Kind.activation_only`)."""
        return self.kind is not None and self.kind.activation_only

    @property
    def requantizes(self) -> bool:
        """Its output is one requantization of an exact value (`Kind.requantizes`)."""
        return self.kind is not None and self.kind.requantizes

    @property
    def is_windowed(self) -> bool:
        """Built on the window generator (K2C.Window): convolutions and pooling (`Kind.windowed`)."""
        return self.kind is not None and self.kind.windowed

    @property
    def n_in(self) -> int:
        return math.prod(self.input_shape)

    @property
    def n_out(self) -> int:
        return math.prod(self.output_shape)

    @property
    def filters(self) -> int:
        """Neurons (dense) or filters (conv2d) of its engine: the output's last axis, unless
        its kind computes more per output channel (`Kind.filters`: a gated recurrent step)."""
        return self.kind.filters(self) if self.kind is not None else self.output_shape[-1]

    @property
    def window(self) -> int:
        """K: inputs of one dot product (`Kind.window`: dense n_in; conv2d kh*kw*C; depthwise2d
        kh*kw, its own channel's window only)."""
        return self.kind.window(self.input_shape, self.params) if self.kind is not None else self.n_in

    @property
    def hw_activation(self) -> str:
        """The activation the hardware applies (canonical text, `quant.activations`)."""
        return self.activation

    @property
    def table_regs(self) -> int:
        """t of K2C.Activation.Finish: 2 when a pipelined engine's finish reads a table (the
        activation is a table one and not left to the Top): the first register after the
        block RAM's read becomes its output register, the second is a fabric register
        between the block RAM's row and the engine's result register (mlp_tanh on ECP5:
        that route alone takes 10.2 ns); else 0."""
        table = self.table_activation and not self.top_activation
        return 2 * int(self.knobs is not None and self.knobs.pipeline > 0 and table)

    @property
    def table_activation(self) -> bool:
        """Whether the activation reads a table (K2C.Lut, quant.activations' table family)."""
        return activations.parse(self.activation).family == "table"

    @property
    def act_in_fmt(self) -> FixedFormat:
        """The format the activation reads: a standalone one its input's, a fused one the
        layer's output format (it follows the requantization)."""
        return self.in_fmt if self.activation_only else self.out_fmt

    @property
    def activation_doc(self) -> str:
        """What the hardware computes for the activation, with its error (quant.activations)."""
        return activations.describe(self.activation, self.act_in_fmt, self.out_fmt, self.output_shape[-1])

    # --- the engine's figures (a kind with knobs), which the generic stages read -----------

    @property
    def engine_knobs(self) -> Knobs:
        """The knobs of a layer that has them; an error for one that has none."""
        if self.knobs is None:
            raise ValueError(f"layer '{self.name}' ({self.type}) has no space-time knobs")
        return self.knobs

    def with_strategy(self, strategy: str) -> LayerPlan:
        """The plan built at another strategy (`Kind.with_strategy`: a K2CError when its kind
        cannot build it so)."""
        if self.kind is None:
            raise ValueError(f"layer '{self.name}': type {self.type!r} has no hardware block")
        return self.kind.with_strategy(self, strategy)

    @property
    def logic_cells(self) -> int:
        """LUT4 cells the model counts apart from multipliers and memories (`Kind.logic_cells`)."""
        return 0 if self.kind is None else self.kind.logic_cells(self)

    def with_knobs(self, pe: int, cycles: int) -> LayerPlan:
        """The plan with other `pe` and `cycles` (its pipeline kept)."""
        return replace(self, knobs=replace(self.engine_knobs, pe=pe, cycles=cycles))

    @property
    def groups(self) -> int:
        """G = ceil(filters / pe): groups of PEs' work per window."""
        return -(-self.filters // self.engine_knobs.pe)

    @property
    def chunk(self) -> int:
        """ch = ceil(K / cycles): multipliers per PE."""
        return -(-self.window // self.engine_knobs.cycles)

    @property
    def steps(self) -> int:
        """S = G*b: the engine's cycles per window."""
        return self.groups * self.engine_knobs.cycles

    @property
    def loads_late(self) -> int:
        """e (K2C.Engine's Loading): 1 when the engine loads each window the cycle after
        accepting it (`Kind.loads_late`), else 0."""
        return self.kind.loads_late(self) if self.kind is not None else 0

    @property
    def pipe_depth(self) -> int:
        """D: cycles from a window's accept plus its steps to its result entering the output
        queue (K2C.Engine's PipeDepth after its last step, and the load's delay e)."""
        k = self.engine_knobs
        return pipe_depth(self.chunk, k.pipeline, k.cycles, self.table_regs, self.groups) + self.loads_late

    @property
    def queue_depth(self) -> int:
        """Q: the engine's output queue, the most windows it holds at once (QueueDepth)."""
        k = self.engine_knobs
        return queue_depth(self.chunk, k.pipeline, k.cycles, self.steps, self.table_regs, self.groups, self.loads_late)

    @property
    def rom_depth(self) -> int:
        """ROM words: one per (group, chunk)."""
        return self.steps

    # --- what every kind says about its layer ------------------------------------------

    @property
    def windows_per_image(self) -> int:
        """Dot products (conv2d, pools) per image; 1 for dense (`Kind.windows_per_image`)."""
        return self.kind.windows_per_image(self) if self.kind is not None else math.prod(self.output_shape[:-1])

    @property
    def multipliers(self) -> int:
        return (self.kind.multipliers(self) if self.kind is not None else 0) + self.activation_multipliers

    @property
    def channel_lanes(self) -> int:
        """Channels computed a cycle (`Kind.channel_lanes`): all of a beat's, or a serial
        normalization's lanes."""
        return self.kind.channel_lanes(self) if self.kind is not None else self.output_shape[-1]

    @property
    def lane_chunks(self) -> int:
        """Chunks of `channel_lanes` channels per beat of a serial layer (`batchNormLanes`,
        `layerNormLanes`); 1 when it takes whole beats."""
        return self.output_shape[-1] // self.channel_lanes

    @property
    def splits_activation(self) -> bool:
        """Whether the activation is cut in two register stages (`mapP2`): a ReLU-family slope
        that is a constant multiplication (quant.activations.multiplies)."""
        return activations.multiplies(activations.parse(self.activation), self.act_in_fmt, self.out_fmt)

    @property
    def fixed_multipliers(self) -> int:
        """Multipliers the engine's knobs do not change: a fused activation's and those beside
        the engine (`Kind.side_multipliers`)."""
        return self.activation_multipliers + (self.kind.side_multipliers(self) if self.kind is not None else 0)

    @property
    def activation_multipliers(self) -> int:
        """A ReLU-family slope that is a constant multiplication (LeakyReLU(0.1), PReLU;
        `splits_activation`): one product per channel of a beat, which yosys maps to a DSP
        block each (mlp_tanh's 24 LeakyReLU products took 23 MULT18X18D beside the 132 the
        budget counted)."""
        return self.output_shape[-1] if self.activation != "linear" and self.splits_activation else 0

    @property
    def macs(self) -> int:
        """Multiply-accumulates per image (the useful work)."""
        return self.windows_per_image * self.filters * self.window if self.is_compute else 0

    @property
    def rom_bits(self) -> int:
        return self.kind.rom_bits(self) if self.kind is not None else 0

    @property
    def is_merge(self) -> bool:
        """It joins several inputs (`Kind.joins`)."""
        return self.kind is not None and self.kind.joins

    @property
    def input_formats(self) -> tuple[FixedFormat, ...]:
        """The format of each input (`Kind.input_formats`: one for every layer but a merge)."""
        return self.kind.input_formats(self) if self.kind is not None else (self.in_fmt,)

    def to_json(self) -> JsonObject:
        """Everything but the IR record (the weights travel in golden.npz); the kind's own
        parameters under `params`."""
        data: JsonObject = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("layer", "knobs", "params"):
                continue
            data[f.name] = _to_json(value)
        if self.knobs is not None:
            data["knobs"] = self.knobs.to_json()
        params = self.params.to_json()
        if params:
            data["params"] = params
        return data

    @staticmethod
    def from_json(data: Mapping[str, Json]) -> LayerPlan:
        """A plan `to_json` wrote; the kind's record (`Kind.params_type`) reads its `params`."""
        values = dict(data)
        type_name = values["type"]
        home = kind_of(type_name) if isinstance(type_name, str) else None
        if home is None:
            raise ValueError(f"layer type {type_name!r} has no kind")
        knobs = values.pop("knobs", None)
        params = values.pop("params", None) or {}
        if not isinstance(params, dict) or not (knobs is None or isinstance(knobs, dict)):
            raise ValueError(f"layer '{values.get('name')}': its knobs and params are JSON objects")
        hints = get_type_hints(LayerPlan)
        plan_fields = {f.name for f in fields(LayerPlan)} - {"layer", "knobs", "params"}
        unknown = set(values) - plan_fields
        if unknown:
            raise ValueError(f"a layer plan has no field(s) {', '.join(sorted(unknown))}")
        common = {name: _from_json(value, hints[name]) for name, value in values.items()}
        return LayerPlan(
            **common,  # type: ignore[arg-type]
            knobs=None if knobs is None else Knobs.from_json(knobs),
            params=home.params_type.from_json(params),
        )


@dataclass(frozen=True)
class Common:
    """What the planner knows of a layer before its kind plans it (`Kind.plan`): the record,
    the format of each input (its producers' outputs), and the knobs of a kind with them."""

    layer: Layer
    in_fmts: tuple[FixedFormat, ...]
    knobs: Knobs | None = None

    @property
    def in_fmt(self) -> FixedFormat:
        return self.in_fmts[0]

    def plan(
        self,
        out_fmt: FixedFormat,
        params: Params | None = None,
        w_fmt: FixedFormat | None = None,
        b_fmt: FixedFormat | None = None,
        acc_fmt: FixedFormat | None = None,
    ) -> LayerPlan:
        """The layer's plan with the formats and parameters its kind chose."""
        layer = self.layer
        return LayerPlan(
            name=layer.name,
            type=layer.type,
            input_shape=tuple(layer.input_shape),
            output_shape=tuple(layer.output_shape),
            activation=layer.activation,
            in_fmt=self.in_fmt,
            out_fmt=out_fmt,
            w_fmt=w_fmt,
            b_fmt=b_fmt,
            acc_fmt=acc_fmt,
            inputs=tuple(layer.inputs),
            knobs=self.knobs,
            params=params if params is not None else NoParams(),
            layer=layer,
        )


def format_to_json(fmt: FixedFormat) -> list[Json]:
    """[sign, int, frac], plus [rounding, overflow] when they are not the defaults
    (`format_from_json` reads both forms back)."""
    base: list[Json] = [fmt.sign, fmt.int, fmt.frac]
    return base if fmt.default_modes else base + [fmt.rounding, fmt.overflow]


def format_from_json(value: Json) -> FixedFormat:
    """The format `format_to_json` wrote."""
    if not isinstance(value, list) or len(value) not in (3, 5):
        raise ValueError(f"a format is [sign, int, frac] or [sign, int, frac, rounding, overflow], not {value!r}")
    fields = [v for v in value[:3] if isinstance(v, int) and not isinstance(v, bool)]
    modes = [v for v in value[3:] if isinstance(v, str)]
    if len(fields) != 3 or len(modes) != len(value) - 3:
        raise ValueError(f"bad format {value!r}")
    sign, integer, frac = fields
    return FixedFormat(sign, integer, frac, *modes)


DEFAULT_PIPELINE = 2
"""Adder levels per pipeline stage when the user gives none: two carry chains a cycle (ECP5:
the adder tree then no longer sets the clock; docs/guide/place-and-route.md)."""
MAX_PIPELINE_LEVELS = 32
"""More levels than any adder tree has (2^32 terms): beyond, the value means nothing new."""


def tree_levels(chunk: int) -> int:
    """ceil(log2(chunk + 1)): the levels of an adder tree over `chunk` products and a bias."""
    return (chunk).bit_length()


def tree_stages(chunk: int, levels: int, cycles: int) -> int:
    """K2C.Engine's TreeStages: the adder tree's register stages, one per `levels` levels, and
    one after its last level when that level would otherwise share a cycle with the
    accumulating adder and its clamp (`cycles` >= 2 and `levels` not dividing the tree)."""
    whole, rest = divmod(tree_levels(chunk), levels)
    return whole + int(cycles >= 2 and rest > 0)


def pipe_depth(chunk: int, levels: int, cycles: int, table_regs: int = 0, groups: int = 1) -> int:
    """D (K2C.Engine's PipeDepth): 0 unpipelined; else two operand registers (the route from
    the weight memory, then the multiplier block's input register), two product registers
    (the block's own, then one for the route to the tree), the adder tree's (`tree_stages`),
    the accumulators, and the finish's two (requantized, then activated: K2C.Activation.
    Finish), so a saturating rounding and an activation's comparisons are never one path,
    and `table_regs` after a table activation's block RAM read (`LayerPlan.table_regs`); with
    two groups or more, the result register the output queue is written from (its LUT RAM
    then takes its data from the register beside it, not from the activation through the
    group multiplexer)."""
    if levels == 0:
        return 0
    return 7 + table_regs + tree_stages(chunk, levels, cycles) + int(groups >= 2)


def queue_depth(
    chunk: int, levels: int, cycles: int, steps: int, table_regs: int = 0, groups: int = 1, late: int = 0
) -> int:
    """Q (K2C.Engine's QueueDepth): 2 + (D + e + 1) // S, the fewest windows in flight for which
    an always-ready downstream never holds the input back (`late` = e, LayerPlan.loads_late)."""
    return 2 + (pipe_depth(chunk, levels, cycles, table_regs, groups) + late + 1) // steps


def accumulator_format(
    in_fmt: FixedFormat, w_fmt: FixedFormat, n_in: int, b_fmt: FixedFormat | None = None
) -> FixedFormat:
    """The exact accumulator of docs/guide/contract.md step 3: it can never overflow.

    Fraction bits cf = max(fa + fw, fb) (nothing is dropped). Clash integer bits
    ci = max((1+ia) + (1+iw), 1+ib) + ceil(log2(n_in+1)) + 1; our `int` field excludes the
    sign bit, so it is ci - 1. The formats are the hardware containers (unsigned, negative
    fields: `FixedFormat.container`), so the sum is exact on the values the hardware holds.
    """
    b_fmt = (b_fmt or w_fmt).container
    in_fmt, w_fmt = in_fmt.container, w_fmt.container
    guard = math.ceil(math.log2(n_in + 1))
    product_int = (in_fmt.sign + in_fmt.int) + (w_fmt.sign + w_fmt.int)
    clash_int = max(product_int, b_fmt.sign + b_fmt.int) + guard + 1
    return FixedFormat(1, clash_int - 1, max(in_fmt.frac + w_fmt.frac, b_fmt.frac))


PLAIN_ACTIVATIONS = ("linear", "relu")
"""The activations exact on any format (they keep every value in range and on the grid)."""


def has_constant_layers(plans: Sequence[LayerPlan]) -> bool:
    """Whether a layer is built of constant weights (an adder graph: the latency strategy), whose
    additions the synthesis keeps as carry chains of their own (`Device.synth_script`)."""
    return any(plan.logic_cells for plan in plans)


def relu_before_requantize(plan: LayerPlan) -> bool:
    """Whether `plan` applies its fused relu to the exact value *before* the requantization
    (docs/guide/contract.md, Formats): needed when the output format wraps, because a wrap does
    not commute with a relu (a large positive value wraps negative, a negative one wraps
    positive) and quantization-aware models (HGQ2) quantize the relu's output. For a
    saturating format both orders are equal (`q` is monotone with `q(0) = 0`), so the
    default order, requantize then activate, is kept there."""
    return plan.requantizes and plan.activation == "relu" and plan.out_fmt.overflow == "wrap"
