"""The recurrent kinds: Keras SimpleRNN, LSTM and GRU over a sequence, on the filter engine
with its result fed back (`K2C.Recurrent` around `K2C.Dense`).

A sequence `(steps, features)` is an image one row high in the IR (`frontend.registry.
image_shape`): one beat per time step. Each step's window is the step's input `x_t` followed
by `h_(t-1)` (zeros before the first step), so the step's sums are a dense layer of
`features + units` inputs whose kernel is Keras' kernel stacked over its recurrent kernel.
SimpleRNN: `h_t = act(W x_t + U h_(t-1) + b)` in the engine's finish. LSTM and GRU: the
engine's `4 * units` sums, rounded once, go through a cell (`GatedKind`) that applies the
gate and cell activations, multiplies exactly and rounds each new value once. A GRU with
`reset_after=False` (`GruResetBeforeKind`) multiplies the reset gate into the state before the
recurrent kernel: each time step is two passes of its engine, the second on
`x_t ++ round(r * h_(t-1))`. The output is every step's `h_t` (`return_sequences=True`,
`(1, steps, units)`) or the last one's (`(units,)`).

Arithmetic (docs/guide/contract.md, "Recurrent layers"): the window is held in the union
format of the input's and the output's containers (`window_format`: both convert to it
exactly), the kernel and the recurrent kernel share the weight format, the state is in the
layer's output format; no rounding on the feedback.

Block and timing (`K2C.Recurrent`, the hardware model `hw.events.Recurrent`): one step in
the engine at a time; a step of the engine's `S` steps and depth `D` takes `S + D + 2`
cycles with downstream always ready (a gated cell's `units / lanes + 14` more:
`hw.events.gated_cell`; a reset-before GRU's two passes each `units / lanes + 8` more), a
sequence `steps` times that.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, ClassVar

import numpy as np

from keras2clash.backend.haskell import kind_template
from keras2clash.errors import K2CError
from keras2clash.frontend.registry import (
    ConversionState,
    KerasLayer,
    _activation,
    _activation_name,
    _check_keras_shape,
    _single_input,
    _to_numpy,
    check_activation,
    register_converter,
)
from keras2clash.hw.events import Block, EngineTiming, Max, Recurrent, Repeat, Stateful, gated_cell
from keras2clash.hw.plan import Common, LayerFormats, LayerPlan, Params
from keras2clash.ir.layers import Layer, register_record
from keras2clash.kinds.base import Depth, Entry, Storage, narrow, params_of
from keras2clash.kinds.engine import EngineKind, EngineParams, neurons
from keras2clash.kinds.merge import Merge
from keras2clash.kinds.reverse import reversed_steps
from keras2clash.quant import activations
from keras2clash.quant.exact import QuantizedLayer, requantize_to
from keras2clash.quant.formats import FixedFormat, quantize

HASKELL = kind_template("recurrent.hs.j2")


@register_record
@dataclass(frozen=True)
class SimpleRNN(Layer):
    """`kernel` (features, units), `recurrent_kernel` (units, units), `bias` (units,) float64
    (zeros without a bias); `return_sequences`: every step's state is an output beat."""

    kernel: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), compare=False)
    recurrent_kernel: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), compare=False)
    bias: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    use_bias: bool = True
    return_sequences: bool = False
    activation: str = "tanh"  # type: ignore[assignment]

    type: ClassVar[str] = "simple_rnn"
    keras_class: ClassVar[str] = "SimpleRNN"


@dataclass(frozen=True)
class GatedRecurrent(Layer):
    """An LSTM or GRU: `kernel` (features, gates * units), `recurrent_kernel` (units, gates *
    units), `bias` as Keras holds it (GRU with `reset_after`: (2, 3 * units), the input's and
    the recurrent bias; without: (3 * units,)); `cell_activation` Keras' `activation`,
    `gate_activation` its `recurrent_activation`. The engine's own activation is linear (the property `activation`):
    the cell applies both."""

    kernel: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), compare=False)
    recurrent_kernel: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), compare=False)
    bias: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    use_bias: bool = True
    return_sequences: bool = False
    cell_activation: str = "tanh"
    gate_activation: str = "sigmoid"


@register_record
@dataclass(frozen=True)
class LSTM(GatedRecurrent):
    type: ClassVar[str] = "lstm"
    keras_class: ClassVar[str] = "LSTM"


@register_record
@dataclass(frozen=True)
class GRU(GatedRecurrent):
    type: ClassVar[str] = "gru"
    keras_class: ClassVar[str] = "GRU"


@register_record
@dataclass(frozen=True)
class GRUResetBefore(GatedRecurrent):
    """A GRU with `reset_after=False`: the reset gate multiplies the state before the
    recurrent kernel's candidate part."""

    type: ClassVar[str] = "gru_reset_before"
    keras_class: ClassVar[str] = "GRU"


def _check_recurrent(layer: KerasLayer, state: ConversionState) -> tuple[int, int]:
    """One error line for what a recurrent layer does that the hardware does not build;
    (steps, features) of its input."""
    kind = type(layer).__name__
    _single_input(layer, state)
    for setting, why in (
        ("stateful", "keeps its state from one batch to the next"),
        ("return_state", "returns its state as a second output"),
    ):
        if getattr(layer, setting, False):
            raise K2CError(f"{kind} layer '{layer.name}' sets {setting}=True: it {why}; not built")
    if len(state.keras_shape) != 2:
        raise K2CError(
            f"{kind} layer '{layer.name}' gets an input of shape {state.keras_shape}; it needs a sequence "
            "(steps, features) of a fixed length"
        )
    steps, features = state.keras_shape
    return int(steps), int(features)


def _cell_weights(
    layer: KerasLayer, state: ConversionState, gates: int, bias_shape: tuple[int, ...]
) -> tuple[dict[str, Any], int]:
    """A recurrent layer's checked weights and its record's common fields; its units."""
    steps, features = _check_recurrent(layer, state)
    cell = layer.cell
    units = int(cell.units)
    kind = type(layer).__name__
    kernel, recurrent = _to_numpy(cell.kernel), _to_numpy(cell.recurrent_kernel)
    if kernel.shape != (features, gates * units) or recurrent.shape != (units, gates * units):
        raise K2CError(
            f"{kind} layer '{layer.name}' has kernels of shapes {kernel.shape} and {recurrent.shape}, "
            f"expected {(features, gates * units)} and {(units, gates * units)}"
        )
    bias = _to_numpy(cell.bias) if cell.use_bias else np.zeros(bias_shape)
    if bias.shape != bias_shape:
        raise K2CError(f"{kind} layer '{layer.name}' has a bias of shape {bias.shape}, expected {bias_shape}")
    if not all(np.all(np.isfinite(w)) for w in (kernel, recurrent, bias)):
        raise K2CError(f"{kind} layer '{layer.name}' has NaN or infinite weights")
    sequences = bool(layer.return_sequences)
    out = (1, steps, units) if sequences else (units,)
    _check_keras_shape(layer, state, out)
    fields = {
        **state.common(layer, out),
        "kernel": kernel,
        "recurrent_kernel": recurrent,
        "bias": bias,
        "use_bias": bool(cell.use_bias),
        "return_sequences": sequences,
    }
    return fields, units


def _simple_rnn(layer: KerasLayer, state: ConversionState) -> Layer:
    fields, units = _cell_weights(layer, state, 1, (int(layer.cell.units),))
    return SimpleRNN(**fields, activation=_activation(layer.cell))


def _gate_activations(layer: KerasLayer) -> dict[str, Any]:
    cell = layer.cell
    gate = _activation_name(cell.recurrent_activation)
    check_activation(layer.name, type(layer).__name__, gate)
    return {"cell_activation": _activation(cell), "gate_activation": gate}


def _lstm(layer: KerasLayer, state: ConversionState) -> Layer:
    fields, _ = _cell_weights(layer, state, 4, (4 * int(layer.cell.units),))
    return LSTM(**fields, **_gate_activations(layer))


def _gru(layer: KerasLayer, state: ConversionState) -> Layer:
    units = int(layer.cell.units)
    if not layer.cell.reset_after:
        fields, _ = _cell_weights(layer, state, 3, (3 * units,))
        return GRUResetBefore(**fields, **_gate_activations(layer))
    fields, _ = _cell_weights(layer, state, 3, (2, 3 * units))
    return GRU(**fields, **_gate_activations(layer))


_BUILDERS = {"SimpleRNN": _simple_rnn, "LSTM": _lstm, "GRU": _gru}
"""The record of each recurrent Keras class, read in time order whatever its `go_backwards`."""


@register_converter(*_BUILDERS)
def _convert_recurrent(layer: KerasLayer, state: ConversionState) -> Layer | tuple[Layer, ...]:
    """The layer's record; with `go_backwards`, after the sequence reversed (Keras then gives
    the outputs in the order it read them: from the last step)."""
    record = _BUILDERS[type(layer).__name__](layer, state)
    if not getattr(layer, "go_backwards", False):
        return record
    backwards = reversed_steps(f"{layer.name}_reverse", state.inputs[0], state.shape)
    return backwards, replace(record, inputs=(backwards.name,))


_MERGE_MODES = {"concat": "concatenate", "sum": "add", "mul": "multiply", "ave": "average"}
"""Bidirectional's merge modes as merge records' ops."""


@register_converter("Bidirectional")
def _convert_bidirectional(layer: KerasLayer, state: ConversionState) -> tuple[Layer, ...]:
    """`<name>_forward` on the sequence; `<name>_backward` on it reversed (`<name>_reverse`),
    its outputs returned to time order (`<name>_backward_reverse`) with `return_sequences`;
    then the merge `<name>` of the two."""
    _single_input(layer, state)
    name = str(layer.name)
    inner = type(layer.forward_layer).__name__
    if inner not in _BUILDERS:
        raise K2CError(f"Bidirectional layer '{name}' wraps a {inner}; SimpleRNN, LSTM and GRU are built")
    if layer.merge_mode not in _MERGE_MODES:
        raise K2CError(
            f"Bidirectional layer '{name}' sets merge_mode={layer.merge_mode!r}: it returns its two directions "
            "as two outputs; concat, sum, mul and ave are built"
        )
    if getattr(layer, "return_state", False):
        raise K2CError(f"Bidirectional layer '{name}' sets return_state=True: it returns its states too; not built")
    forward = replace(_BUILDERS[inner](layer.forward_layer, state), name=f"{name}_forward")
    backwards = reversed_steps(f"{name}_reverse", state.inputs[0], state.shape)
    reversed_state = ConversionState(shapes=state.shapes, inputs=[backwards.name], keras_shapes=state.keras_shapes)
    backward = replace(_BUILDERS[inner](layer.backward_layer, reversed_state), name=f"{name}_backward")
    records: list[Layer] = [forward, backwards, backward]
    shape = tuple(forward.output_shape)
    if getattr(forward, "return_sequences", False):
        records.append(reversed_steps(f"{name}_backward_reverse", backward.name, shape))
    op = _MERGE_MODES[layer.merge_mode]
    out = (*shape[:-1], 2 * shape[-1]) if op == "concatenate" else shape
    _check_keras_shape(layer, state, out)
    merge = Merge(
        name=name, inputs=(forward.name, records[-1].name), input_shapes=(shape, shape), output_shape=out, op=op
    )
    return (*records, merge)


@dataclass(frozen=True)
class RecurrentParams(EngineParams):
    """A recurrent layer's sequence: its steps, its units (the state), whether every step's
    state is an output beat."""

    steps: int = 1
    units: int = 1
    sequences: bool = False
    cell_activation: str = ""  # a gated layer's: Keras' activation
    gate_activation: str = ""  # and recurrent_activation
    cell_lanes: int = 0  # a gated layer's units per cycle in its cell (`GatedKind.lanes`)


def window_format(in_fmt: FixedFormat, out_fmt: FixedFormat) -> FixedFormat:
    """The step window's format: the union of the input's and the state's containers, which
    both convert to exactly (K2C.Recurrent's `widen`)."""
    a, h = in_fmt.container, out_fmt.container
    return FixedFormat(1, max(a.int, h.int), max(a.frac, h.frac))


class RecurrentKind(EngineKind):
    """A recurrent layer: the filter engine's step on `x_t ++ h_(t-1)`, its result (after the
    cell of a gated layer) fed back. SimpleRNN's step is the engine alone (its activation in
    the engine's finish); `GatedKind` adds a cell."""

    records: ClassVar[tuple[type[Layer], ...]] = (SimpleRNN,)
    params_type: ClassVar[type[Params]] = RecurrentParams
    feeds_back = True
    filter_word = "unit"
    gates: ClassVar[int] = 1
    """The engine's filters per unit (its outputs: gates * units)."""
    passes: ClassVar[int] = 1
    """The engine's steps per time step (a reset-before GRU's two), each input beat offered to
    each of them (K2C.Repeat)."""

    def plan_params(self, layer: Layer) -> RecurrentParams:
        out = layer.output_shape
        return RecurrentParams(
            steps=layer.input_shape[-2],
            units=out[-1],
            sequences=bool(getattr(layer, "return_sequences", False)),
            cell_activation=getattr(layer, "cell_activation", ""),
            gate_activation=getattr(layer, "gate_activation", ""),
            cell_lanes=self.lanes(out[-1]),
        )

    def lanes(self, units: int) -> int:
        """Units per cycle in the cell (0: no cell)."""
        return 0

    def window(self, input_shape: tuple[int, ...], params: Params) -> int:
        """K = features + units: the step's input and the state."""
        return input_shape[-1] + narrow(params, RecurrentParams).units

    def windows_per_image(self, plan: LayerPlan) -> int:
        return self.passes * params_of(plan, RecurrentParams).steps

    def plan(self, common: Common, override: LayerFormats | None, fmt: FixedFormat) -> LayerPlan:
        """The engine's plan on the window format (its exact accumulator covers the input's and
        the state's values) and of `gates * units` filters, with the layer's own input format
        and output shape."""
        out = (override.output if override is not None else None) or fmt
        union = window_format(common.in_fmt, out)
        step = super().plan(replace(common, in_fmts=(union, *common.in_fmts[1:])), override, fmt)
        return replace(step, in_fmt=common.in_fmt)

    def plan_latency(self, plan: LayerPlan) -> LayerPlan:
        raise K2CError(
            f"layer '{plan.name}' ({plan.type}): the latency strategy builds dense and undilated convolution "
            "layers; a recurrent step is built at the resource strategy"
        )

    def step_plan(self, plan: LayerPlan) -> LayerPlan:
        """The plan of the step engine: the layer's on its window format."""
        return replace(plan, in_fmt=window_format(plan.in_fmt, plan.out_fmt))

    def filters_for(self, channels: int) -> int:
        """`gates` filters per unit."""
        return self.gates * channels

    def check(self, plan: LayerPlan) -> None:
        super().check(plan)
        for what, text in self.cell_functions(plan):
            act = activations.parse(text)
            if act.kind == "softmax" or activations.per_channel(act, plan.out_fmt, plan.out_fmt):
                raise K2CError(
                    f"layer '{plan.name}' ({plan.type}): its {what} {text} is not built inside a recurrent step "
                    "(its state is fed back); tanh, sigmoid, hard_sigmoid, relu and linear are"
                )
            if activations.multiplies(act, plan.out_fmt, plan.out_fmt):
                raise K2CError(
                    f"layer '{plan.name}' ({plan.type}): its {what} {text} multiplies by a slope, a stage of its "
                    "own that a recurrent step does not have; use tanh, sigmoid, hard_sigmoid, relu or linear"
                )

    def cell_functions(self, plan: LayerPlan) -> tuple[tuple[str, str], ...]:
        """The activations of a step: (what Keras calls it, its canonical text)."""
        return (("activation", plan.activation),)

    def constants(self, layer: Layer) -> tuple[np.ndarray, np.ndarray]:
        """The kernel stacked over the recurrent kernel (the window's order), the bias."""
        rnn: Any = layer
        return np.concatenate([np.asarray(rnn.kernel), np.asarray(rnn.recurrent_kernel)]), np.asarray(rnn.bias)

    def quantize(self, layer: Layer, plan: LayerPlan) -> QuantizedLayer:
        assert plan.w_fmt is not None and plan.b_fmt is not None
        kernel, bias = self.constants(layer)
        return QuantizedLayer(kernel=quantize(kernel, plan.w_fmt), bias=quantize(bias, plan.b_fmt))

    # --- the golden model and the float model -------------------------------------------

    def time_step(
        self, plan: LayerPlan, sums: Callable[[np.ndarray], np.ndarray], state: tuple[np.ndarray, ...]
    ) -> tuple[np.ndarray, ...]:
        """A time step's new state from the previous one; `sums(h)` is the engine's outputs
        (N, gates * units) in the constants' order, raw in the output format, on the window
        `x_t ++ h`: one pass, `cell` on the sums of `x_t ++ h_(t-1)`."""
        return self.cell(plan, sums(state[0]), state)

    def cell(self, plan: LayerPlan, z: np.ndarray, state: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        """A step's new state from the engine's outputs `z` (N, gates * units) raw in the
        output format and the previous state; the first of the state is h."""
        return (z,)

    def standard_order(self, plan: LayerPlan, z: np.ndarray) -> np.ndarray:
        """The engine's sums (its filters' order) in the constants' order (`constants`)."""
        return z

    def float_time_step(
        self, layer: Layer, sums: Callable[[np.ndarray], np.ndarray], state: tuple[np.ndarray, ...]
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """Keras' time step in float64 (`sums(h)`: the exact sums on `x_t ++ h`): the sums its
        cell reads, and the new state."""
        pre = sums(state[0])
        return pre, self.float_cell(layer, pre, state)

    def float_cell(self, layer: Layer, pre: np.ndarray, state: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        """Keras' cell in float64 on the step's exact sums `pre`."""
        return (activations.keras_float(activations.parse(layer.activation), pre),)

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        """(N, 1, steps, features) raw -> every step's h (N, 1, steps, units) or the last's (N, units)."""
        assert params is not None
        own = params_of(plan, RecurrentParams)
        step = self.step_plan(plan)
        x = np.asarray(xs[0]).reshape(len(xs[0]), own.steps, -1)
        x_shift = step.in_fmt.raw_frac - plan.in_fmt.raw_frac
        h_shift = step.in_fmt.raw_frac - plan.out_fmt.raw_frac
        zeros = np.zeros((len(x), own.units), dtype=np.int64)
        state: tuple[np.ndarray, ...] = (zeros,) * self.state_count
        outs = []
        for t in range(own.steps):
            sums = partial(self.window_sums, plan, step, params, x[:, t] << x_shift, h_shift)
            state = tuple(np.asarray(v, dtype=np.int64) for v in self.time_step(plan, sums, state))
            outs.append(state[0])
        out = np.stack(outs, axis=1) if own.sequences else outs[-1]
        return np.asarray(out).reshape(len(x), *plan.output_shape)

    def window_sums(
        self, plan: LayerPlan, step: LayerPlan, params: QuantizedLayer, xt: np.ndarray, h_shift: int, h: np.ndarray
    ) -> np.ndarray:
        """The step engine's (`step`) outputs in the constants' order on the window `x_t ++ h`
        (`xt` already in the window's format, `h` raw in the output format)."""
        window = np.concatenate([xt, np.asarray(h, dtype=xt.dtype) << h_shift], axis=1)
        return self.standard_order(plan, neurons(window, step, params))

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """Keras' layer in float64: every step's exact sums, and the output."""
        kernel, bias = params if params is not None else self.constants(layer)
        kernel, bias = np.asarray(kernel, dtype=np.float64), np.asarray(bias, dtype=np.float64)
        steps, units = layer.input_shape[-2], layer.output_shape[-1]
        x = np.asarray(xs[0], dtype=np.float64).reshape(len(xs[0]), steps, -1)
        state: tuple[np.ndarray, ...] = (np.zeros((len(x), units)),) * self.state_count
        pres, outs = [], []
        for t in range(steps):
            pre, state = self.float_time_step(layer, partial(_float_sums, kernel, bias, x[:, t]), state)
            pres.append(pre)
            outs.append(state[0])
        out = np.stack(outs, axis=1) if getattr(layer, "return_sequences", False) else outs[-1]
        return np.stack(pres, axis=1), out.reshape(len(x), *layer.output_shape)

    state_count: ClassVar[int] = 1
    """Vectors of `units` values in the state (h; an LSTM's h and c; a reset-before GRU's h,
    r * h and z)."""
    cell_depth: ClassVar[int] = 0
    """Registers of the cell after the engine (K2C.Recurrent's `cell_depth_type`; 0: no cell)."""
    cell_depth_type: ClassVar[str] = "CellDepth"

    # --- the hardware model --------------------------------------------------------------

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        """K2C.Recurrent around its step engine (S = G*b steps, depth D) and its cell."""
        steps, depth, _ = knobs if knobs is not None else (plan.steps, plan.pipe_depth, plan.queue_depth)
        own = params_of(plan, RecurrentParams)
        chunks = own.units // own.cell_lanes if own.cell_lanes else 0
        cell = gated_cell(chunks, self.cell_depth, mx) if chunks else None
        block = Recurrent(own.steps, own.sequences, steps, depth, down, mx, cell, self.passes)
        blocks.append(block)
        if self.passes == 1:
            return block
        repeat = Repeat(self.passes, block, mx)
        blocks.append(repeat)
        return repeat

    def storage(self, plan: LayerPlan) -> Storage:
        """The step engine's (on the window format), the state and the output register (a
        valid bit), the step counter and the busy flag; a cell's registers and queue; with two
        passes a step, the pass flag in the state and K2C.Repeat's beat, counter and flag."""
        own = params_of(plan, RecurrentParams)
        engine = super().storage(self.step_plan(plan))
        bits = plan.out_fmt.hw_bits
        counter = max(self.passes * own.steps - 1, 1).bit_length()
        state = (self.state_count + 1) * own.units * bits + 1 + counter + 1
        if self.passes > 1:
            state += 1 + plan.input_shape[-1] * plan.in_fmt.hw_bits + (self.passes - 1).bit_length() + 1
        lanes = own.cell_lanes
        # the scattered sums and the collected state (K2C.Scatter, K2C.Collect), the chunk's
        # registers in the cell and its queue
        cell_regs = (
            (self.gates + self.state_count) * own.units * bits
            + self.cell_register_values(lanes) * bits
            + self.cell_depth
            if lanes
            else 0
        )
        cell_fifo = (self.cell_depth + 2) * self.state_count * lanes * bits
        return replace(
            engine,
            register_bits=engine.register_bits + state + cell_regs,
            fifo_bits=engine.fifo_bits + cell_fifo,
            table_bits=self.cell_table_bits(plan),
        )

    def cell_register_values(self, lanes: int) -> int:
        """Values the cell's registers hold for a chunk of `lanes` units (0 without a cell)."""
        return 0

    def cell_table_bits(self, plan: LayerPlan) -> int:
        """The cell's activation tables (each element its own copy: K2C.Lut)."""
        return 0

    def depths(self, plan: LayerPlan) -> tuple[Depth, ...]:
        own = (
            (Depth("cell", HASKELL.cell_depth(self.cell_depth_type), self.cell_depth, "recurrent"),)
            if self.cell_depth
            else ()
        )
        return (*super().depths(plan), *own)

    # --- the backend ---------------------------------------------------------------------

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        own = params_of(plan, RecurrentParams)
        step = self.step_plan(plan)
        window = step.in_fmt.clash_type
        doc = HASKELL.doc(
            self.keras_word(),
            own.steps,
            plan.input_shape[-1],
            own.units,
            self.describe(plan),
            own.sequences,
            step.in_fmt,
            window,
        )
        chunks = (own.units // own.cell_lanes, own.cell_lanes) if own.cell_lanes else ()
        body = HASKELL.recurrent(
            self.block_name(), own.steps, own.sequences, window, chunks, fn, self.cell_names(plan, fn)
        )
        notes = [HASKELL.cell_note(*chunks, self.cell_depth)] if chunks else []
        return self.compute_entry(plan, doc, [body], notes, ["dense", "recurrent"])

    def keras_word(self) -> str:
        return "SimpleRNN"

    def describe(self, plan: LayerPlan) -> str:
        return plan.activation

    def block_name(self) -> str:
        return "simple"

    def cell_names(self, plan: LayerPlan, fn: str) -> tuple[str, ...]:
        """The Haskell functions the cell takes (its activations: `extra_activations`)."""
        return ()


def _float_sums(kernel: np.ndarray, bias: np.ndarray, xt: np.ndarray, h: np.ndarray) -> np.ndarray:
    """The exact sums on the window `x_t ++ h` in float64."""
    return np.concatenate([xt, h], axis=1) @ kernel + bias


CELL_LANES = 4
"""The most units a gated cell takes a cycle (`GatedKind.lanes`)."""
GATE_TABLES = 3
"""The gated cell's registers after a table's read (the read, the block RAM's output register,
a copy in the fabric near the multipliers); each of its two products takes three more (the
products, their exact sum, its rounding: K2C.Recurrent's CellDepth)."""


class GatedKind(RecurrentKind):
    """LSTM and GRU: the engine's outputs are the gates' exact sums rounded once to the output
    format (a linear finish), then the cell (`K2C.Recurrent.lstmCell`, `gruCell`) on `lanes`
    units a cycle: the gate and cell activations by table or exact function, each product
    exact, each new value rounded once to the output format (docs/guide/contract.md,
    "Recurrent layers")."""

    cell_depth = 2 * GATE_TABLES + 6
    cell_products: ClassVar[int] = 3
    """Products per unit in the cell (LSTM: f c, i c~, o act(c); GRU: r r_h or r h, z h,
    (1 - z) h~), each a multiplier of each lane."""

    def multipliers(self, plan: LayerPlan) -> int:
        return super().multipliers(plan) + self.side_multipliers(plan)

    def side_multipliers(self, plan: LayerPlan) -> int:
        """The cell's products of its lanes' units (synthesis maps each to a MULT18X18D:
        digits_lstm's 56 in the engine and the dense layer and 12 in the cell on the LFE5U-85F)."""
        return self.cell_products * params_of(plan, RecurrentParams).cell_lanes

    def lanes(self, units: int) -> int:
        """The most units up to CELL_LANES that divide `units`: each lane has its own copy of
        every table, so the cell's block RAM stays small whatever the units."""
        return max(d for d in range(1, min(units, CELL_LANES) + 1) if units % d == 0)

    def order(self, plan: LayerPlan) -> np.ndarray:
        """The engine's filter `c` is the constants' column `order[c]`: the sums by chunk of
        `lanes` units, each chunk gate by gate (K2C.Recurrent's `chunked`)."""
        own = params_of(plan, RecurrentParams)
        units, lanes = own.units, own.cell_lanes
        return np.asarray(
            [g * units + j * lanes + i for j in range(units // lanes) for g in range(self.gates) for i in range(lanes)]
        )

    def quantize(self, layer: Layer, plan: LayerPlan) -> QuantizedLayer:
        """The constants with their columns in the engine's order (`order`)."""
        standard = super().quantize(layer, plan)
        order = self.order(plan)
        return QuantizedLayer(kernel=np.asarray(standard.kernel)[:, order], bias=np.asarray(standard.bias)[order])

    def standard_order(self, plan: LayerPlan, z: np.ndarray) -> np.ndarray:
        out = np.empty_like(z)
        out[:, self.order(plan)] = z
        return out

    def check(self, plan: LayerPlan) -> None:
        super().check(plan)
        if not plan.out_fmt.is_plain:
            raise K2CError(
                f"layer '{plan.name}' ({plan.type}): output format {plan.out_fmt}: a gated cell rounds to nearest "
                "and saturates; give it a signed format with the default modes, e.g. 1,7,8"
            )

    def cell_functions(self, plan: LayerPlan) -> tuple[tuple[str, str], ...]:
        gate, act = self.functions(plan)
        return (("activation", act), ("recurrent_activation", gate))

    def functions(self, plan: LayerPlan) -> tuple[str, str]:
        """(the gate activation, the cell activation) as canonical texts."""
        own = params_of(plan, RecurrentParams)
        return own.gate_activation, own.cell_activation

    def apply(self, plan: LayerPlan, text: str, r: np.ndarray) -> np.ndarray:
        return activations.apply(np.asarray(r, dtype=np.int64), text, plan.out_fmt, plan.out_fmt)

    def product_sum(self, plan: LayerPlan, *pairs: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """Sum of exact products of raw values in the output format, rounded once to it."""
        exact = sum(np.asarray(a, dtype=object) * np.asarray(b, dtype=object) for a, b in pairs)
        return np.asarray(requantize_to(np.asarray(exact), 2 * plan.out_fmt.frac, plan.out_fmt), dtype=np.int64)

    def split(self, z: np.ndarray) -> list[np.ndarray]:
        return np.split(np.asarray(z, dtype=np.int64), self.gates, axis=1)

    def describe(self, plan: LayerPlan) -> str:
        gate, act = self.functions(plan)
        return f"gates {gate}, cell {act}"

    def cell_names(self, plan: LayerPlan, fn: str) -> tuple[str, ...]:
        """`<fn>_gate` and `<fn>_cell`; K2C.Activation's `linear` for a linear one."""
        return tuple(
            "linear" if activations.parse(text).is_linear else f"{fn}_{role}"
            for role, text in zip(("gate", "cell"), self.functions(plan))
        )

    def extra_activations(self, plan: LayerPlan, fn: str) -> tuple[tuple[str, LayerPlan], ...]:
        return tuple(
            (name, replace(plan, activation=text))
            for name, text in zip(self.cell_names(plan, fn), self.functions(plan))
            if name != "linear"
        )

    def cell_table_bits(self, plan: LayerPlan) -> int:
        lanes = params_of(plan, RecurrentParams).cell_lanes
        gate, act = self.functions(plan)
        return sum(self.uses(plan)[k] * lanes * _table_bits(text, plan.out_fmt) for k, text in enumerate((gate, act)))

    def uses(self, plan: LayerPlan) -> tuple[int, int]:
        """How many times per unit the cell reads the gate and the cell activation."""
        raise NotImplementedError


def _table_bits(text: str, fmt: FixedFormat) -> int:
    """Bits of one copy of an activation's table on `fmt` (0 when it has none)."""
    if activations.parse(text).family != "table":
        return 0
    return len(activations.table(text, fmt, fmt).values) * fmt.hw_bits


class LstmKind(GatedKind):
    """LSTM: z = W x_t + U h_(t-1) + b in four gates (i, f, c, o: Keras' order), then
    c_t = f * c_(t-1) + i * act(z_c), h_t = o * act(c_t) with i, f, o the gate activation."""

    records = (LSTM,)
    gates = 4
    state_count = 2

    def cell(self, plan: LayerPlan, z: np.ndarray, state: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        gate, act = self.functions(plan)
        zi, zf, zc, zo = self.split(z)
        i, f, o = (self.apply(plan, gate, v) for v in (zi, zf, zo))
        c = self.product_sum(plan, (f, state[1]), (i, self.apply(plan, act, zc)))
        return self.product_sum(plan, (o, self.apply(plan, act, c))), c

    def float_cell(self, layer: Layer, pre: np.ndarray, state: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        rec: Any = layer
        gate, act = activations.parse(rec.gate_activation), activations.parse(rec.cell_activation)
        zi, zf, zc, zo = np.split(pre, 4, axis=1)
        c = activations.keras_float(gate, zf) * state[1] + activations.keras_float(gate, zi) * activations.keras_float(
            act, zc
        )
        return activations.keras_float(gate, zo) * activations.keras_float(act, c), c

    def uses(self, plan: LayerPlan) -> tuple[int, int]:
        return 3, 2

    def cell_register_values(self, lanes: int) -> int:
        """i, f, c~, o and c twice (the read, its register); f·c, i·c~ (double width) and o;
        c and o; c, o, act(c) twice; o·act(c) (double width) and c; h and c."""
        return lanes * (2 * 5 + 5 + 2 + 2 * 3 + 3 + 2)

    def keras_word(self) -> str:
        return "LSTM"

    def block_name(self) -> str:
        return "lstm"


class GruKind(GatedKind):
    """GRU (reset_after, Keras' default): z, r and the candidate's input and recurrent parts
    from one engine of four filters per unit; then h~ = act(x_h + r * (U_h h + b_rh)) and
    h_t = z * h_(t-1) + (1 - z) * h~."""

    records = (GRU,)
    gates = 4

    def constants(self, layer: Layer) -> tuple[np.ndarray, np.ndarray]:
        """The window's matrix [[W_z, W_r, W_h, 0], [U_z, U_r, 0, U_h]] and the biases of z
        and r (input's plus recurrent), of x_h and of the recurrent part."""
        rec: Any = layer
        kernel, recurrent, bias = (
            np.asarray(w, dtype=np.float64) for w in (rec.kernel, rec.recurrent_kernel, rec.bias)
        )
        units = recurrent.shape[0]
        wz, wr, wh = np.split(kernel, 3, axis=1)
        uz, ur, uh = np.split(recurrent, 3, axis=1)
        top = np.concatenate([wz, wr, wh, np.zeros_like(wh)], axis=1)
        bottom = np.concatenate([uz, ur, np.zeros((units, units)), uh], axis=1)
        b_in, b_rec = bias
        b = np.concatenate([b_in[: 2 * units] + b_rec[: 2 * units], b_in[2 * units :], b_rec[2 * units :]])
        return np.concatenate([top, bottom]), b

    def cell(self, plan: LayerPlan, z: np.ndarray, state: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        gate, act = self.functions(plan)
        pz, pr, xh, rh = self.split(z)
        zg, r = self.apply(plan, gate, pz), self.apply(plan, gate, pr)
        one = 1 << plan.out_fmt.frac
        candidate = self.apply(plan, act, self.product_sum(plan, (xh, np.full_like(xh, one)), (r, rh)))
        return (self.product_sum(plan, (zg, state[0]), (one - zg, candidate)),)

    def float_cell(self, layer: Layer, pre: np.ndarray, state: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        rec: Any = layer
        gate, act = activations.parse(rec.gate_activation), activations.parse(rec.cell_activation)
        pz, pr, xh, rh = np.split(pre, 4, axis=1)
        z, r = activations.keras_float(gate, pz), activations.keras_float(gate, pr)
        return (z * state[0] + (1 - z) * activations.keras_float(act, xh + r * rh),)

    def uses(self, plan: LayerPlan) -> tuple[int, int]:
        return 2, 1

    def cell_register_values(self, lanes: int) -> int:
        """z, r, x_h, r_h and h twice; z, 1 - z, x_h, r·r_h (double width) and h; z, 1 - z, the
        candidate's sum and h; the same with h~, twice; z·h and (1 - z)·h~ (double width); h."""
        return lanes * (2 * 5 + 6 + 4 + 2 * 4 + 4 + 1)

    def keras_word(self) -> str:
        return "GRU"

    def block_name(self) -> str:
        return "gru"


class GruResetBeforeKind(GatedKind):
    """GRU with `reset_after=False`: h~ = act(W_h x_t + U_h (r * h_(t-1)) + b_h), so each time
    step is two passes of one engine whose constants are Keras' kernel stacked over its
    recurrent kernel (three filters per unit: z, r, the candidate). The first pass, on
    `x_t ++ h_(t-1)`, gives g = gate(z) and rh = round(gate(r) * h_(t-1)); the second, on
    `x_t ++ rh`, the candidate's sum (its z and r sums are not read), then
    h_t = round(g * h_(t-1) + (1 - g) * act(sum)) (`K2C.Recurrent.gruResetBefore`)."""

    records = (GRUResetBefore,)
    gates = 3
    state_count = 3
    passes = 2
    cell_depth = GATE_TABLES + 3
    cell_depth_type = "ResetBeforeDepth"

    def time_step(
        self, plan: LayerPlan, sums: Callable[[np.ndarray], np.ndarray], state: tuple[np.ndarray, ...]
    ) -> tuple[np.ndarray, ...]:
        """(h_t, rh, g): the state the block keeps between its passes."""
        gate, act = self.functions(plan)
        h = state[0]
        pz, pr, _ = self.split(sums(h))
        g = self.apply(plan, gate, pz)
        rh = self.product_sum(plan, (self.apply(plan, gate, pr), h))
        candidate = self.apply(plan, act, self.split(sums(rh))[2])
        one = 1 << plan.out_fmt.frac
        return self.product_sum(plan, (g, h), (one - g, candidate)), rh, g

    def float_time_step(
        self, layer: Layer, sums: Callable[[np.ndarray], np.ndarray], state: tuple[np.ndarray, ...]
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """The sums of z and r on `x_t ++ h_(t-1)` and the candidate's on `x_t ++ r * h_(t-1)`."""
        rec: Any = layer
        gate, act = activations.parse(rec.gate_activation), activations.parse(rec.cell_activation)
        h = state[0]
        pz, pr, _ = np.split(sums(h), 3, axis=1)
        z, r = activations.keras_float(gate, pz), activations.keras_float(gate, pr)
        pc = np.split(sums(r * h), 3, axis=1)[2]
        return np.concatenate([pz, pr, pc], axis=1), (z * h + (1 - z) * activations.keras_float(act, pc), r * h, z)

    def uses(self, plan: LayerPlan) -> tuple[int, int]:
        return 2, 1

    def cell_register_values(self, lanes: int) -> int:
        """z, r, the candidate, h, g and 1 - g after each of the three table stages; z, h and
        r·h, g·h, (1 - g)·h~ (double width); z, h, r·h and the mix's sum (double width); h, rh,
        g."""
        return lanes * (3 * 6 + 8 + 6 + 3)

    def keras_word(self) -> str:
        return "GRU (reset_after=False)"

    def describe(self, plan: LayerPlan) -> str:
        return f"{super().describe(plan)}, two passes a step (the second on x_t ++ round(r * h_(t-1)))"

    def block_name(self) -> str:
        return "gruResetBefore"


KINDS = (RecurrentKind(), LstmKind(), GruKind(), GruResetBeforeKind())
