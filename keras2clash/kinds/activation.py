"""The activation kind: an activation layer the passes could not fuse into the layer before it.

Keras classes: Activation, ReLU, LeakyReLU, PReLU, ELU, Softmax. Each becomes an `Activation`
record whose `activation` is the canonical text of `quant.activations`; the pass
`fuse_activations` fuses it into the Dense/convolution/BatchNormalization/merge before it, or
keeps it standalone: the hardware then builds the function alone, a stage per beat
(`K2C.Pipe.mapP`, `mapP2` for a slope that is a constant multiplication, `mapTable` for a
table; `hw.blocks.has_map_stage`). Its output keeps its input's format unless given one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from keras2clash.backend.haskell import kind_template, shape_text
from keras2clash.errors import K2CError
from keras2clash.frontend.registry import (
    ConversionState,
    KerasLayer,
    _activation,
    _single_input,
    _to_numpy,
    register_converter,
)
from keras2clash.hw.events import Block, EngineTiming, Max, Stateful
from keras2clash.hw.plan import PLAIN_ACTIVATIONS, Common, LayerFormats, LayerPlan
from keras2clash.ir.layers import Layer, register_record
from keras2clash.kinds.base import Entry, Kind, refuse_constant_formats
from keras2clash.quant import activations
from keras2clash.quant.activations import canonical
from keras2clash.quant.exact import QuantizedLayer
from keras2clash.quant.formats import FixedFormat

HASKELL = kind_template("activation.hs.j2")


@register_record
@dataclass(frozen=True)
class Activation(Layer):
    """A separate activation layer (Activation, ReLU, LeakyReLU, PReLU, ELU, Softmax): fused
    into the layer before it by the passes where possible, otherwise a standalone hardware
    stage (`activation` is the canonical text of `quant.activations`)."""

    activation: str = "linear"  # type: ignore[assignment]
    source_class: str = "Activation"

    type: ClassVar[str] = "activation"


def _record(layer: KerasLayer, state: ConversionState, activation: str) -> Activation:
    _single_input(layer, state)
    return Activation(**state.common(layer, state.shape), activation=activation, source_class=type(layer).__name__)


def _finite(layer: KerasLayer, **values: float | None) -> None:
    for key, value in values.items():
        if value is not None and not np.isfinite(value):
            raise K2CError(f"{type(layer).__name__} layer '{layer.name}' sets {key}={value}; a finite value is needed")


@register_converter("Activation")
def _convert_activation(layer: KerasLayer, state: ConversionState) -> Layer:
    return _record(layer, state, _activation(layer))


@register_converter("ReLU")
def _convert_relu(layer: KerasLayer, state: ConversionState) -> Layer:
    """Keras 3 ReLU: `x > threshold ? x : 0`, clipped to [0, max_value], minus
    `negative_slope * relu(threshold - x)` (all three options)."""
    slope = float(layer.negative_slope)
    cap = None if layer.max_value is None else float(layer.max_value)
    threshold = float(layer.threshold)
    _finite(layer, negative_slope=slope, max_value=cap, threshold=threshold)
    return _record(layer, state, canonical("relu", negative_slope=slope, max_value=cap, threshold=threshold))


@register_converter("LeakyReLU")
def _convert_leaky_relu(layer: KerasLayer, state: ConversionState) -> Layer:
    slope = float(layer.negative_slope)
    _finite(layer, negative_slope=slope)
    return _record(layer, state, f"leaky_relu(negative_slope={slope!r})")


@register_converter("ELU")
def _convert_elu(layer: KerasLayer, state: ConversionState) -> Layer:
    alpha = float(layer.alpha)
    _finite(layer, alpha=alpha)
    return _record(layer, state, canonical("elu", alpha=alpha))


@register_converter("PReLU")
def _convert_prelu(layer: KerasLayer, state: ConversionState) -> Layer:
    """`x >= 0 ? x : alpha * x` with learnt slopes; the hardware applies one slope per
    channel (the last axis: each beat's element), so alpha must be shared over every other
    axis (`shared_axes` covering them, or a vector input)."""
    alpha = _to_numpy(layer.alpha)
    per_channel = alpha.reshape(-1, alpha.shape[-1])
    if not np.all(per_channel == per_channel[:1]):
        raise K2CError(
            f"PReLU layer '{layer.name}' learns a slope per position (alpha shape {alpha.shape}, "
            f"shared_axes={layer.shared_axes}); only one slope per channel is supported: set "
            "shared_axes to every axis but the last (e.g. shared_axes=[1, 2] after a Conv2D)"
        )
    slopes = per_channel[0]
    if not np.all(np.isfinite(slopes)):
        raise K2CError(f"PReLU layer '{layer.name}' has NaN or infinite slopes")
    channels = state.shape[-1]
    if slopes.size == 1 and channels > 1:
        slopes = np.repeat(slopes, channels)
    return _record(layer, state, f"prelu(alpha=[{', '.join(repr(float(a)) for a in slopes)}])")


@register_converter("Softmax")
def _convert_softmax(layer: KerasLayer, state: ConversionState) -> Layer:
    axis = layer.axis
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    rank = len(state.keras_shape) + 1  # with the batch axis
    if len(axes) != 1 or axes[0] not in (-1, rank - 1):
        raise K2CError(
            f"Softmax layer '{layer.name}' normalises over axis {axis}; only the last axis (-1) is supported"
        )
    return _record(layer, state, "softmax")


class ActivationKind(Kind):
    records = (Activation,)
    keeps_format = False
    activation_only = True

    def plan(self, common: Common, override: LayerFormats | None, fmt: FixedFormat) -> LayerPlan:
        """Its output keeps its input's format unless given one."""
        override = refuse_constant_formats(common.layer, override)
        return common.plan(out_fmt=override.output or common.in_fmt)

    def check(self, plan: LayerPlan) -> None:
        """Activations other than relu and linear are built on signed formats with the default
        modes; relu and linear keep any format when the output format is the input's."""
        act, out = plan.activation, plan.out_fmt
        if (not plan.in_fmt.is_plain or not out.is_plain) and (act not in PLAIN_ACTIVATIONS or out != plan.in_fmt):
            raise K2CError(
                f"layer '{plan.name}' ({plan.type}): the {act} activation from {plan.in_fmt} to {out} is built on "
                "signed formats with the default modes only (relu or linear keeps any format when the output "
                "format is the input's); give this layer or its producer a format like 1,7,8"
            )

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        return activations.apply(xs[0], plan.activation, plan.in_fmt.container, plan.out_fmt.container)

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        return None, activations.keras_float(activations.parse(layer.activation), xs[0])

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        return down  # the activation's own stage is all (hw.blocks.has_map_stage)

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        assert stage is not None
        return Entry(
            doc=HASKELL.doc(plan.activation, shape_text(plan.output_shape), plan.in_fmt, plan.out_fmt), body=(stage,)
        )


KINDS = (ActivationKind(),)
