"""The recurrent kind: Keras SimpleRNN over a sequence, on the filter engine with its
result fed back (`K2C.Recurrent` around `K2C.Dense`).

A sequence `(steps, features)` is an image one row high in the IR (`frontend.registry.
image_shape`): one beat per time step. Each step's window is the step's input `x_t` followed
by the state `h_(t-1)` (zeros before the first step), so the step is a dense layer of
`features + units` inputs whose kernel is Keras' kernel stacked over its recurrent kernel:
`h_t = act(W x_t + U h_(t-1) + b)`. The output is every step's state
(`return_sequences=True`, `(1, steps, units)`) or the last one's (`(units,)`).

Arithmetic (docs/guide/contract.md, "Recurrent layers"): the window is held in the union
format of the input's and the output's containers (`window_format`: both convert to it
exactly), the kernel and the recurrent kernel share the weight format, and a step is the
engine's contract on that window (exact sum, one requantization, the activation) with the
state in the layer's output format. One rounding per step, none on the feedback.

Block and timing (`K2C.Recurrent`, the hardware model `hw.events.Recurrent`): one step in
the engine at a time; a step of the engine's `S` steps and depth `D` takes `S + D + 2`
cycles with downstream always ready, a sequence `steps` times that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from keras2clash.backend.haskell import kind_template
from keras2clash.errors import K2CError
from keras2clash.frontend.registry import (
    ConversionState,
    KerasLayer,
    _activation,
    _check_keras_shape,
    _single_input,
    _to_numpy,
    register_converter,
)
from keras2clash.hw.events import Block, EngineTiming, Max, Recurrent, Stateful
from keras2clash.hw.plan import Common, LayerFormats, LayerPlan, Params
from keras2clash.ir.layers import Layer, register_record
from keras2clash.kinds.base import Entry, Storage, narrow, params_of
from keras2clash.kinds.engine import EngineKind, EngineParams, neurons
from keras2clash.quant import activations
from keras2clash.quant.exact import QuantizedLayer
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


def _check_recurrent(layer: KerasLayer, state: ConversionState) -> tuple[int, int]:
    """One error line for what a recurrent layer does that the hardware does not build;
    (steps, features) of its input."""
    kind = type(layer).__name__
    _single_input(layer, state)
    for setting, why in (
        ("stateful", "keeps its state from one batch to the next"),
        ("return_state", "returns its state as a second output"),
        ("go_backwards", "reads its sequence backwards (the stream is in time order)"),
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


@register_converter("SimpleRNN")
def _convert_simple_rnn(layer: KerasLayer, state: ConversionState) -> Layer:
    steps, features = _check_recurrent(layer, state)
    cell = layer.cell
    units = int(cell.units)
    kernel, recurrent = _to_numpy(cell.kernel), _to_numpy(cell.recurrent_kernel)
    if kernel.shape != (features, units) or recurrent.shape != (units, units):
        raise K2CError(
            f"SimpleRNN layer '{layer.name}' has kernels of shapes {kernel.shape} and {recurrent.shape}, "
            f"expected {(features, units)} and {(units, units)}"
        )
    bias = _to_numpy(cell.bias) if cell.use_bias else np.zeros(units)
    if not all(np.all(np.isfinite(w)) for w in (kernel, recurrent, bias)):
        raise K2CError(f"SimpleRNN layer '{layer.name}' has NaN or infinite weights")
    sequences = bool(layer.return_sequences)
    out = (1, steps, units) if sequences else (units,)
    _check_keras_shape(layer, state, out)
    return SimpleRNN(
        **state.common(layer, out),
        kernel=kernel,
        recurrent_kernel=recurrent,
        bias=bias,
        use_bias=bool(cell.use_bias),
        return_sequences=sequences,
        activation=_activation(cell),
    )


@dataclass(frozen=True)
class RecurrentParams(EngineParams):
    """A recurrent layer's sequence: its steps, its units (the state), whether every step's
    state is an output beat."""

    steps: int = 1
    units: int = 1
    sequences: bool = False


def window_format(in_fmt: FixedFormat, out_fmt: FixedFormat) -> FixedFormat:
    """The step window's format: the union of the input's and the state's containers, which
    both convert to exactly (K2C.Recurrent's `widen`)."""
    a, h = in_fmt.container, out_fmt.container
    return FixedFormat(1, max(a.int, h.int), max(a.frac, h.frac))


class RecurrentKind(EngineKind):
    """SimpleRNN: the filter engine's step on `x_t ++ h_(t-1)`, its result fed back."""

    records = (SimpleRNN,)
    params_type: ClassVar[type[Params]] = RecurrentParams
    feeds_back = True
    filter_word = "unit"

    def plan_params(self, layer: Layer) -> RecurrentParams:
        out = layer.output_shape
        return RecurrentParams(
            steps=layer.input_shape[-2], units=out[-1], sequences=bool(getattr(layer, "return_sequences", False))
        )

    def window(self, input_shape: tuple[int, ...], params: Params) -> int:
        """K = features + units: the step's input and the state."""
        return input_shape[-1] + narrow(params, RecurrentParams).units

    def windows_per_image(self, plan: LayerPlan) -> int:
        return params_of(plan, RecurrentParams).steps

    def plan(self, common: Common, override: LayerFormats | None, fmt: FixedFormat) -> LayerPlan:
        """The engine's plan on the window format (its exact accumulator covers the input's and
        the state's values), with the layer's own input format."""
        out = (override.output if override is not None else None) or fmt
        union = window_format(common.in_fmt, out)
        plan = super().plan(replace(common, in_fmts=(union, *common.in_fmts[1:])), override, fmt)
        return replace(plan, in_fmt=common.in_fmt)

    def plan_latency(self, plan: LayerPlan) -> LayerPlan:
        raise K2CError(
            f"layer '{plan.name}' ({plan.type}): the latency strategy builds dense and undilated convolution "
            "layers; a recurrent step is built at the resource strategy"
        )

    def step_plan(self, plan: LayerPlan) -> LayerPlan:
        """The plan of the step engine: the layer's on its window format."""
        return replace(plan, in_fmt=window_format(plan.in_fmt, plan.out_fmt))

    def check(self, plan: LayerPlan) -> None:
        super().check(plan)
        act = activations.parse(plan.activation)
        if act.kind == "softmax" or activations.per_channel(act, plan.out_fmt, plan.out_fmt):
            raise K2CError(
                f"layer '{plan.name}' ({plan.type}): its activation {plan.activation} is not built inside a "
                "recurrent step (its state is fed back); tanh, sigmoid, hard_sigmoid, relu and linear are"
            )
        if activations.multiplies(act, plan.out_fmt, plan.out_fmt):
            raise K2CError(
                f"layer '{plan.name}' ({plan.type}): its activation {plan.activation} multiplies by a slope, "
                "a stage of its own that a recurrent step does not have; use tanh, sigmoid, hard_sigmoid, relu "
                "or linear"
            )

    def constants(self, layer: Layer) -> tuple[np.ndarray, np.ndarray]:
        """The kernel stacked over the recurrent kernel (the window's order), the bias."""
        rnn: Any = layer
        return np.concatenate([np.asarray(rnn.kernel), np.asarray(rnn.recurrent_kernel)]), np.asarray(rnn.bias)

    def quantize(self, layer: Layer, plan: LayerPlan) -> QuantizedLayer:
        assert plan.w_fmt is not None and plan.b_fmt is not None
        kernel, bias = self.constants(layer)
        return QuantizedLayer(kernel=quantize(kernel, plan.w_fmt), bias=quantize(bias, plan.b_fmt))

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        """(N, 1, steps, features) raw -> every step's state (N, 1, steps, units) or the last's (N, units)."""
        assert params is not None
        own = params_of(plan, RecurrentParams)
        step = self.step_plan(plan)
        x = np.asarray(xs[0]).reshape(len(xs[0]), own.steps, -1)
        x_shift = step.in_fmt.raw_frac - plan.in_fmt.raw_frac
        h_shift = step.in_fmt.raw_frac - plan.out_fmt.raw_frac
        h = np.zeros((len(x), own.units), dtype=np.int64)
        states = []
        for t in range(own.steps):
            window = np.concatenate([x[:, t] << x_shift, np.asarray(h, dtype=x.dtype) << h_shift], axis=1)
            h = neurons(window, step, params)
            states.append(h)
        out = np.stack(states, axis=1) if own.sequences else states[-1]
        return np.asarray(out).reshape(len(x), *plan.output_shape)

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """Keras' step in float64: every step's values before the activation, and the output."""
        kernel, bias = params if params is not None else self.constants(layer)
        kernel, bias = np.asarray(kernel, dtype=np.float64), np.asarray(bias, dtype=np.float64)
        act = activations.parse(layer.activation)
        steps, units = layer.input_shape[-2], layer.output_shape[-1]
        x = np.asarray(xs[0], dtype=np.float64).reshape(len(xs[0]), steps, -1)
        h = np.zeros((len(x), units))
        pres, states = [], []
        for t in range(steps):
            pre = np.concatenate([x[:, t], h], axis=1) @ kernel + bias
            h = activations.keras_float(act, pre)
            pres.append(pre)
            states.append(h)
        out = np.stack(states, axis=1) if getattr(layer, "return_sequences", False) else h
        return np.stack(pres, axis=1), out.reshape(len(x), *layer.output_shape)

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        """K2C.Recurrent around its step engine (S = G*b steps, depth D)."""
        steps, depth, _ = knobs if knobs is not None else (plan.steps, plan.pipe_depth, plan.queue_depth)
        own = params_of(plan, RecurrentParams)
        block = Recurrent(own.steps, own.sequences, steps, depth, down, mx)
        blocks.append(block)
        return block

    def storage(self, plan: LayerPlan) -> Storage:
        """The step engine's (on the window format), the state and the output register (a
        valid bit), the step counter and the busy flag."""
        own = params_of(plan, RecurrentParams)
        engine = super().storage(self.step_plan(plan))
        state = 2 * own.units * plan.out_fmt.hw_bits + 1 + max(own.steps - 1, 1).bit_length() + 1
        return replace(engine, register_bits=engine.register_bits + state)

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        own = params_of(plan, RecurrentParams)
        step = self.step_plan(plan)
        window = step.in_fmt.clash_type
        doc = HASKELL.doc(
            own.steps, plan.input_shape[-1], own.units, plan.activation, own.sequences, step.in_fmt, window
        )
        body = HASKELL.recurrent(own.steps, own.sequences, window, fn)
        entry = self.compute_entry(plan, doc, [body], [], ["dense"])
        return replace(entry, fields={**entry.fields, "imports": [HASKELL.imports()]})


KINDS = (RecurrentKind(),)
