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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.hw.plan import PLAIN_ACTIVATIONS, LayerFormats, LayerPlan
from keras2clash.ir.layers import Layer
from keras2clash.quant.formats import FixedFormat


@dataclass(frozen=True)
class Storage:
    """On-chip memory bits of one layer's own blocks (`hw.resources.LayerResources`)."""

    line_buffer_bits: int = 0  # block RAM line buffers
    register_bits: int = 0  # data registers
    fifo_bits: int = 0  # LUT RAM FIFOs


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


class Kind:
    """One layer kind. A subclass names its IR records in `records` (their `type`s are the
    kind's keys in the registry) and overrides what differs from a value-moving kind."""

    records: ClassVar[tuple[type[Layer], ...]] = ()
    keeps_format: ClassVar[bool] = True
    """The output keeps the input's format (no format of its own, no override allowed)."""
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
    """It can compute fewer channels a cycle than a beat has (`plan.lanes`, `hw.lanes`)."""
    table_after_register: ClassVar[bool] = True
    """A table activation can read its block RAM in the kind's last register stage (else it
    gets a stage of its own, `hw.blocks.stages_table`)."""
    windowed: ClassVar[bool] = False
    """It is built on the window generator (`kinds.window`)."""
    joins: ClassVar[bool] = False
    """It reads several inputs (a merge: the join of K2C.Branch in front of it)."""
    activation_only: ClassVar[bool] = False
    """Its function is its activation (a standalone activation layer): the activation reads
    its input's format, and the Top may apply it after taking the class."""
    weight_name: ClassVar[str] = "weight"
    """What hls4ml calls its weight format's precision."""

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(record.type for record in self.records)

    # --- the plan ----------------------------------------------------------------------

    def plan_fields(self, layer: Layer) -> dict[str, Any]:
        """The plan's fields that come from the record (its geometry)."""
        return {}

    def plan(
        self, layer: Layer, common: Mapping[str, Any], override: LayerFormats | None, fmt: FixedFormat
    ) -> LayerPlan:
        """The layer's plan: `common` holds the fields every plan has (name, shapes, input
        format, ...), `override` the user's formats for this layer, `fmt` the default."""
        if override is not None:
            raise K2CError(f"layer '{layer.name}' ({layer.type}) has no formats of its own; it keeps its input's")
        return LayerPlan(out_fmt=common["in_fmt"], **common, **self.plan_fields(layer))

    def check(self, plan: LayerPlan) -> None:
        """One clear error for formats the kind's blocks cannot build exactly."""

    def window(self, kernel_size: tuple[int, int], input_shape: tuple[int, ...]) -> int:
        """K: the inputs of one dot product, for a record or a plan of the kind."""
        return math.prod(input_shape)

    def windows_per_image(self, plan: LayerPlan) -> int:
        """Dot products (windows) per image."""
        return math.prod(plan.output_shape[:-1])

    def multipliers(self, plan: LayerPlan) -> int:
        """Multipliers of the kind's own blocks (a fused activation's are counted apart)."""
        return 0

    def rom_bits(self, plan: LayerPlan) -> int:
        """Bits of its stored constants."""
        return 0

    # --- constants ---------------------------------------------------------------------

    def constants(self, layer: Layer) -> tuple[np.ndarray, np.ndarray]:
        """Its constants as floats, (weights, biases), as `quantize` stores them."""
        raise NotImplementedError(f"{type(self).__name__} has no constants")

    def quantize(self, layer: Layer, plan: LayerPlan) -> Any:
        """Its constants rounded to the plan's formats (`quant.exact.QuantizedLayer`)."""
        raise NotImplementedError(f"{type(self).__name__} has no constants")

    # --- the golden model and the float model -------------------------------------------

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: Any) -> np.ndarray:
        """The layer on its inputs' raw integers (batch first); `params` its quantized
        constants (`quant.golden.QuantizedLayer`) or None."""
        raise NotImplementedError(f"{type(self).__name__}.golden")

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """The layer in float64: (the values before its activation, or None when it has
        none, and its outputs). `params` may replace its constants."""
        raise NotImplementedError(f"{type(self).__name__}.float_step")

    # --- the hardware model --------------------------------------------------------------

    def blocks(self, plan: LayerPlan, down: Any, mx: Any, blocks: list[Any], knobs: Any = None) -> Any:
        """The layer's own blocks (`hw.events`) in front of `down`, appended to `blocks`
        from the consumer backwards; returns the first (what the producer feeds). `knobs`:
        a kind with knobs gets its engine's (S, D, Q), arrays when the model runs many
        configurations at once."""
        raise NotImplementedError(f"{type(self).__name__}.blocks")

    def storage(self, plan: LayerPlan) -> Storage:
        """The memory of the layer's own blocks (activation stages are counted apart)."""
        return Storage()

    # --- the backend ---------------------------------------------------------------------

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        """The layer in Network.hs; `fn` is its Haskell name (Weights.hs uses it too), `stage`
        its activation as a stream stage (`backend.activations`), None when linear."""
        raise NotImplementedError(f"{type(self).__name__}.entry")

    def depths(self, plan: LayerPlan) -> tuple[Depth, ...]:
        """The register depths of its own blocks that the hardware model counts."""
        return ()

    def weights(self, plan: LayerPlan, fn: str, params: Any) -> tuple[tuple[str, ...], str] | None:
        """Its definitions in Weights.hs: the names exported and the Haskell text; None."""
        return None


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
