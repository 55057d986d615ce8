"""What a layer kind is: the one class every stage asks about a layer.

A kind (`Kind`) owns, in its module under `keras2clash.kinds`, everything that differs
between kinds: its IR record(s) and their Keras converters, its format rule, its plan, its
golden-model step, its float step (profiles and traces), its blocks in the hardware model
and their storage, and its entry in the generated Haskell (the text in a template beside
the module). The stages (frontend, passes, plan, hardware model, golden model, backend)
iterate over the graph and ask each layer's kind; none of them names a kind.

The defaults here are those of a kind that moves values and computes nothing (the shape
kinds): the output keeps its input's format, nothing is stored beyond the blocks' own
registers, and no constant is quantized.

A kind's plan parameters (its window's geometry, a merge's input formats, ...) are a record
of its own (`params_type`, a `hw.plan.Params` in its module): the kind makes it
(`plan_params`), and only the kind reads it (`params_of`); the stages ask the kind's methods.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.hw.events import Block, EngineTiming, Max, Stateful
from keras2clash.hw.plan import PLAIN_ACTIVATIONS, Common, LayerFormats, LayerPlan, NoParams, Params
from keras2clash.ir.layers import Layer
from keras2clash.quant.exact import QuantizedLayer
from keras2clash.quant.formats import FixedFormat, quantize

P = TypeVar("P", bound=Params)


def narrow(params: Params, record: type[P]) -> P:
    """`params` as the kind's own record `record` (what `Kind.plan_params` made)."""
    if not isinstance(params, record):
        raise TypeError(f"parameters {type(params).__name__} where {record.__name__} is expected")
    return params


def params_of(plan: LayerPlan, record: type[P]) -> P:
    """`plan.params` as the kind's own record `record`: how a kind reads its plan's parameters."""
    return narrow(plan.params, record)


@dataclass(frozen=True)
class Storage:
    """On-chip memory bits of one layer's own blocks (`hw.resources.LayerResources`)."""

    line_buffer_bits: int = 0  # block RAM line buffers
    register_bits: int = 0  # data registers
    fifo_bits: int = 0  # LUT RAM FIFOs
    block_fifo_bits: int = 0  # block RAM FIFOs (K2C.Fifo.blockFifo: a branch FIFO that holds an image)
    table_bits: int = 0  # activation tables of its own blocks (a gated recurrent cell's), beside its activation's


@dataclass(frozen=True)
class Depth:
    """A register depth the hardware model counts, and the block's type-level expression of
    the same depth: the emitted Network.hs states `type :~: value` for each, so the project
    does not compile when the Python model and the Clash block disagree."""

    label: str  # what it is, in the name of the check (pipe, queue, stage, ...)
    type: str  # the Haskell type, e.g. `Pool.PoolDepth 2 2`
    value: int  # the hardware model's number
    uses: str  # the import (backend.emitter.IMPORTS) that names `type`


@dataclass(frozen=True)
class Entry:
    """A layer's part of the generated Network.hs: the haddock line, the notes under it, the
    stages composed with `|>` (Haskell text rendered from the kind's template), and the
    K2C blocks it imports (`backend.emitter.IMPORTS`)."""

    doc: str
    body: tuple[str, ...]
    notes: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    fields: Mapping[str, object] = field(default_factory=dict)  # more of Network.hs.j2's per-layer fields
    # a pipeline layer (`Kind.pipeline_stages`): its K2C.Pipe.Pipeline and its depth's type
    pipeline: tuple[str, str] | None = None


class Kind:
    """One layer kind. A subclass names its IR records in `records` (their `type`s are the
    kind's keys in the registry) and overrides what differs from a value-moving kind."""

    records: ClassVar[tuple[type[Layer], ...]] = ()
    params_type: ClassVar[type[Params]] = NoParams
    """Its plans' parameters record (`plan_params`); the manifest reads a plan's back with it."""
    keeps_format: ClassVar[bool] = True
    """The output keeps the input's format (no format of its own, no override allowed)."""
    selects_values: ClassVar[bool] = False
    """Each output value is one of its input's values or a zero (moved, repeated, cropped, or
    a window's maximum): no arithmetic, so the output lies on the input's grid in any model,
    float ones included."""
    compares: ClassVar[bool] = False
    """It selects values by comparing them (a maximum): an element-wise function commutes with
    it only when that function is monotone (a rounding with saturation, not a wrap)."""
    regroups: ClassVar[bool] = False
    """Its output is its input's values unchanged and in the same row-major order, only in
    other beats (a flatten, a reshape): any element-wise function commutes with it."""
    requantizes: ClassVar[bool] = False
    """The output is one requantization of an exact value (K2C.Quant.requantizeTo): its format
    may be unsigned, have negative fields and any rounding/overflow mode."""
    fuses_activation: ClassVar[bool] = False
    """An activation after it fuses into it (`ir.passes.fuse_activations`)."""
    has_knobs: ClassVar[bool] = False
    """It has the space-time knobs pe, cycles and pipeline (the filter engine's kinds)."""
    has_params: ClassVar[bool] = False
    """It stores quantized constants (`quantize`, `constants`)."""
    lanes_knob: ClassVar[bool] = False
    """It can compute fewer channels a cycle than a beat has (`channel_lanes`, `with_lanes`, `hw.lanes`)."""
    table_after_register: ClassVar[bool] = True
    """A table activation can read its block RAM in the kind's last register stage (else it
    gets a stage of its own, `hw.blocks.stages_table`)."""
    windowed: ClassVar[bool] = False
    """It is built on the window generator (`kinds.window`)."""
    joins: ClassVar[bool] = False
    """It reads several inputs (a merge: the join of K2C.Branch in front of it)."""
    feeds_back: ClassVar[bool] = False
    """Its output is fed back into its next step (a recurrent state): its activation is part of
    the step, never applied after the layer (`hw.output.splits_output`), and an activation layer
    after it does not fuse into it (`ir.passes`)."""
    activation_only: ClassVar[bool] = False
    """Its function is its activation (a standalone activation layer): the activation reads
    its input's format, and the Top may apply it after taking the class."""
    weight_name: ClassVar[str] = "weight"
    """What hls4ml calls its weight format's precision."""

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(record.type for record in self.records)

    # --- the plan ----------------------------------------------------------------------

    def plan_params(self, layer: Layer) -> Params:
        """The plan's parameters that come from the record (its geometry), as `params_type`."""
        return NoParams()

    def plan(self, common: Common, override: LayerFormats | None, fmt: FixedFormat) -> LayerPlan:
        """The layer's plan: `common` what the planner knows of the layer (its record, its
        inputs' formats, its knobs), `override` the user's formats for this layer, `fmt` the
        default."""
        layer = common.layer
        if override is not None:
            raise K2CError(f"layer '{layer.name}' ({layer.type}) has no formats of its own; it keeps its input's")
        return common.plan(out_fmt=common.in_fmt, params=self.plan_params(layer))

    def check(self, plan: LayerPlan) -> None:
        """One clear error for formats the kind's blocks cannot build exactly."""

    def filters(self, plan: LayerPlan) -> int:
        """Filters of its engine (`LayerPlan.filters`): one per output channel."""
        return plan.output_shape[-1]

    def window(self, input_shape: tuple[int, ...], params: Params) -> int:
        """K: the inputs of one dot product, for a record (`plan_params`) or a plan of the kind."""
        return math.prod(input_shape)

    def input_formats(self, plan: LayerPlan) -> tuple[FixedFormat, ...]:
        """The format of each input (a merge has several)."""
        return (plan.in_fmt,)

    def loads_late(self, plan: LayerPlan) -> int:
        """e of an engine (K2C.Engine's Loading): 1 when it loads each window the cycle after
        accepting it, else 0."""
        return 0

    def channel_lanes(self, plan: LayerPlan) -> int:
        """Channels it computes a cycle: a whole beat's, unless `lanes_knob` says fewer."""
        return plan.output_shape[-1]

    def with_lanes(self, plan: LayerPlan, lanes: int) -> LayerPlan:
        """The plan computing `lanes` channels a cycle (0: all of a beat's), for a `lanes_knob` kind."""
        raise NotImplementedError(f"{type(self).__name__} has no lanes")

    def with_fifos(self, plan: LayerPlan, *, windows: int | None = None, pixels: int | None = None) -> LayerPlan:
        """The plan of an engine behind a window generator with a FIFO of `windows` windows
        before its engine and one of `pixels` input pixels before its padding (0: none; None:
        as the plan has it), as the hardware model sizes them (`hw.hwmodel.with_window_fifos`)."""
        raise NotImplementedError(f"{type(self).__name__} has no window FIFOs")

    def window_values(self, plan: LayerPlan) -> int:
        """Values one entry of its FIFO of windows holds (`with_fifos`)."""
        raise NotImplementedError(f"{type(self).__name__} has no window FIFOs")

    def branch_fifos(self, plan: LayerPlan) -> tuple[int, ...]:
        """A merge's branch FIFO depths, one per input (`hw.hwmodel.fifo_depths`); () when not sized."""
        return ()

    def branch_repeats(self, plan: LayerPlan) -> tuple[int, ...]:
        """A merge's reads of each input's beats per beat of its output, one per input (a
        per-image gate broadcast over a map: the map's positions); () when each is read once."""
        return ()

    def with_branch_fifos(self, plan: LayerPlan, depths: tuple[int, ...]) -> LayerPlan:
        """The plan of a merge with its branch FIFOs `depths` deep."""
        raise NotImplementedError(f"{type(self).__name__} joins no branches")

    def cost_note(self, plan: LayerPlan) -> str:
        """What its cost is beyond the summary's columns (an adder graph's adders and cells),
        for `emit`'s summary; empty when nothing."""
        return ""

    def logic_cells(self, plan: LayerPlan) -> int:
        """LUT4 cells of logic the model counts apart from multipliers and memories (an adder
        graph's carry chains, `hw.strategy`); 0 when it counts none."""
        return 0

    def with_strategy(self, plan: LayerPlan, strategy: str) -> LayerPlan:
        """The plan built at another strategy (`hw.plan.STRATEGIES`), or a K2CError naming the
        layer and why its kind cannot build it so."""
        raise K2CError(f"layer '{plan.name}' ({plan.type}) has no strategy to choose")

    def fixed_knobs(self, plan: LayerPlan) -> bool:
        """Its `pe` and `cycles` are what its strategy builds, not a choice (`hw.options`,
        `hw.allocate` try no other)."""
        return False

    def exact_accumulator(self, plan: LayerPlan) -> bool:
        """Whether its accumulator (`plan.acc_fmt`, when it has one) is the exact one."""
        return True

    def settings_owner(self, layer: Layer) -> str | None:
        """The record that takes the formats and knobs a config gives this record's Keras
        name, when the Keras layer became several records and this one only moves values
        (None: this record takes its own)."""
        return None

    def source_class(self, plan: LayerPlan) -> str:
        """The Keras class when it differs from the record's (a 1-D layer one row high, a
        Dense on a tensor); empty otherwise."""
        return ""

    def frame_bits(self, plan: LayerPlan) -> int:
        """Bits of the whole input frame a windowed layer would store without line buffers."""
        return 0

    def windows_per_image(self, plan: LayerPlan) -> int:
        """Dot products (windows) per image."""
        return math.prod(plan.output_shape[:-1])

    def multipliers(self, plan: LayerPlan) -> int:
        """Multipliers of the kind's own blocks (a fused activation's are counted apart)."""
        return 0

    def side_multipliers(self, plan: LayerPlan) -> int:
        """A compute layer's multipliers beside its engine, counted in `multipliers`, which the
        engine's knobs do not change (a gated recurrent cell's products)."""
        return 0

    def rom_bits(self, plan: LayerPlan) -> int:
        """Bits of its stored constants."""
        return 0

    # --- constants ---------------------------------------------------------------------

    def constants(self, layer: Layer) -> tuple[np.ndarray, np.ndarray]:
        """Its constants as floats, (weights, biases), as `quantize` stores them."""
        raise NotImplementedError(f"{type(self).__name__} has no constants")

    def quantize(self, layer: Layer, plan: LayerPlan) -> QuantizedLayer:
        """Its constants rounded to the plan's formats."""
        raise NotImplementedError(f"{type(self).__name__} has no constants")

    # --- the golden model and the float model -------------------------------------------

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        """The layer on its inputs' raw integers (batch first); `params` its quantized
        constants (`quantize`), None for a kind without."""
        raise NotImplementedError(f"{type(self).__name__}.golden")

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """The layer in float64: (the values before its activation, or None when it has
        none, and its outputs). `params` may replace its constants."""
        raise NotImplementedError(f"{type(self).__name__}.float_step")

    # --- the hardware model --------------------------------------------------------------

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        """The layer's own blocks (`hw.events`) in front of `down`, appended to `blocks`
        from the consumer backwards; returns the first (what the producer feeds). `knobs`:
        a kind with knobs gets its engine's (S, D, Q), arrays when the model runs many
        configurations at once."""
        raise NotImplementedError(f"{type(self).__name__}.blocks")

    def storage(self, plan: LayerPlan) -> Storage:
        """The memory of the layer's own blocks (activation stages are counted apart)."""
        return Storage()

    def pipeline_stages(self, plan: LayerPlan) -> int | None:
        """The registers of the layer when it is a free-running pipeline that takes one beat a
        cycle and holds nothing but its registers (a `K2C.Pipe.Pipeline`: its entry gives
        `Entry.pipeline`); None when it is not one. Consecutive such layers of a chain become
        one stream stage (`hw.blocks.chain_runs`): one input register and one output queue for
        the run, which its `blocks` and `storage` count when it stands alone."""
        return None

    # --- the backend ---------------------------------------------------------------------

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        """The layer in Network.hs; `fn` is its Haskell name (Weights.hs uses it too), `stage`
        its activation as a stream stage (`backend.activations`), None when linear."""
        raise NotImplementedError(f"{type(self).__name__}.entry")

    def extra_activations(self, plan: LayerPlan, fn: str) -> tuple[tuple[str, LayerPlan], ...]:
        """Activation functions its own blocks apply besides the layer's (a gated recurrent
        cell's), for the emitter to write: (the Haskell name its entry uses, a plan whose
        activation is the function, on the layer's formats)."""
        return ()

    def depths(self, plan: LayerPlan) -> tuple[Depth, ...]:
        """The register depths of its own blocks that the hardware model counts."""
        return ()

    def modules(self, plan: LayerPlan, params: QuantizedLayer | None) -> dict[str, str]:
        """Haskell modules of its own, generated for this layer: module name -> text (the
        project holds `A/B.hs` for module `A.B`, and Network.hs imports it: `Entry.fields`'
        `imports`)."""
        return {}

    def memory_files(self, plan: LayerPlan, fn: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """Memory files its own blocks read (a table too large for a Haskell literal: Clash takes
        minutes to evaluate one), as (name under weights/, lines); its Weights.hs definitions
        name them. () when none."""
        return ()

    def weights(self, plan: LayerPlan, fn: str, params: QuantizedLayer | None) -> tuple[tuple[str, ...], str] | None:
        """Its definitions in Weights.hs: the names exported and the Haskell text; None. `params`:
        its quantized constants (`quantize`), None for a kind without (`has_params`)."""
        return None

    def check_writable(self, plan: LayerPlan) -> None:
        """One clear error when the layer has weights the host is to write at run time
        (`--writable-weights`) but its blocks hold them as constants. A kind's weight memory
        walked by the engine is writable; other constants stay as synthesized."""


class ChannelConstantsKind(Kind):
    """A kind whose constants are one weight (in the weight format) and one bias (in the bias
    format) per channel (`constants`): a batch normalization's scale and offset, a layer
    normalization's gamma and beta."""

    has_params = True

    def rom_bits(self, plan: LayerPlan) -> int:
        """The per-channel constants."""
        assert plan.w_fmt is not None and plan.b_fmt is not None
        return plan.output_shape[-1] * (plan.w_fmt.hw_bits + plan.b_fmt.hw_bits)

    def quantize(self, layer: Layer, plan: LayerPlan) -> QuantizedLayer:
        """The weights in the weight format, the biases in the bias format."""
        assert plan.w_fmt is not None and plan.b_fmt is not None
        weights, biases = self.constants(layer)
        return QuantizedLayer(kernel=quantize(weights, plan.w_fmt), bias=quantize(biases, plan.b_fmt))


def refuse_constant_formats(layer: Layer, override: LayerFormats | None) -> LayerFormats:
    """The override of a kind without weights or accumulator: an output format only."""
    override = override or LayerFormats()
    if override.weight is not None or override.bias is not None or override.accumulator_bits is not None:
        raise K2CError(
            f"layer '{layer.name}' ({layer.type}) has no weights or accumulator; give it an output format only"
        )
    return override


def check_requantized_output(plan: LayerPlan) -> None:
    """A requantizing kind's output format: unsigned formats, negative fields and the
    truncate/wrap modes are built for a linear or relu activation only (docs/guide/contract.md,
    Formats); the other activations round to nearest and saturate on native formats."""
    out, act = plan.out_fmt, plan.activation
    if not out.is_plain and act not in PLAIN_ACTIVATIONS:
        raise K2CError(
            f"layer '{plan.name}' ({plan.type}): output format {out} needs a linear or relu activation (the {act} "
            "activation rounds to nearest and saturates on a signed format); give it a signed format with the "
            "default modes, e.g. 1,7,8"
        )
