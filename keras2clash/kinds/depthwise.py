"""The depthwise convolution kind: Keras DepthwiseConv2D/1D, and SeparableConv2D/1D as a
depthwise record then a pointwise 1x1 Conv2D.

A depthwise convolution becomes one `DepthwiseConv2D` record (its own hardware: each
processing element sees only its channel's window, so no multiplier works on zeros). A
separable convolution is Keras' depthwise part (no bias) followed by a pointwise 1x1
convolution (bias and activation): two records, `<name>_depthwise` and `<name>` (a 1x1
`Conv2D`), so the pointwise part is an ordinary Conv2D and a BatchNormalization or
activation after the Keras layer folds into it. The tensor between them is quantized like
any layer output: the model's format, or the `<name>_depthwise` layer's own format.

1-D layers follow the frontend's convention (`registry.image_shape`): a sequence `(steps,
channels)` is an image one row high, so kernel `(k,)` is `(1, k)`, strides `(s,)` are
`(1, s)` and 'same' pads only left and right.

Blocks: `[Fifo] -> [Pad] -> K2C.Depthwise` (the window generator, the regrouping of each
window per output channel, the engine's control with every channel's window).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from keras2clash.backend.haskell import kind_template, shape_text
from keras2clash.errors import K2CError
from keras2clash.frontend.images import _check_image_layer, _padding, _pair, _window_geometry
from keras2clash.frontend.registry import (
    ConversionState,
    KerasLayer,
    _activation,
    _check_keras_shape,
    _to_numpy,
    register_converter,
)
from keras2clash.hw.plan import LayerPlan, Params
from keras2clash.ir.layers import Layer, register_record
from keras2clash.kinds.base import Entry, narrow, params_of
from keras2clash.kinds.conv import Conv2D, ConvParams
from keras2clash.kinds.engine import EngineKind, is_latency, neurons, per_filter
from keras2clash.kinds.window import Windowed, generator_geometry, pad_stage, pad_uses, padding_doc
from keras2clash.quant import activations
from keras2clash.quant.exact import QuantizedLayer, pad_images, windows

HASKELL = kind_template("depthwise.hs.j2")
Shape = tuple[int, ...]


@register_record
@dataclass(frozen=True)
class DepthwiseConv2D(Layer):
    """A depthwise convolution (Keras DepthwiseConv2D, and the first half of a separable
    one): output channel `f = c*m + j` (m = `depth_multiplier`) is the kh x kw window of
    input channel `c = f // m` times its own filter. `kernel` is (kh, kw, C*m), Keras'
    (kh, kw, C, m) reshaped, so that a per-output-channel scale (a folded BatchNorm)
    broadcasts over its last axis as for Conv2D; `bias` (C*m,)."""

    kernel: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0)), compare=False)
    bias: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    use_bias: bool = True
    activation: str = "linear"  # type: ignore[assignment]
    kernel_size: tuple[int, int] = (1, 1)
    strides: tuple[int, int] = (1, 1)
    padding: str = "valid"
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    depth_multiplier: int = 1

    type: ClassVar[str] = "depthwise2d"
    keras_class: ClassVar[str] = "DepthwiseConv2D"


def _one_d(layer: KerasLayer) -> bool:
    return type(layer).__name__.endswith("1D")


def _as_pair(layer: KerasLayer, what: str, value: Sequence[int]) -> tuple[int, int]:
    """A 2-D layer's pair, or a 1-D layer's single value as (1, value)."""
    if _one_d(layer):
        values = tuple(int(v) for v in value)
        if len(values) != 1 or values[0] < 1:
            raise K2CError(
                f"{type(layer).__name__} layer '{layer.name}' has {what}={value}; one positive integer is needed"
            )
        return 1, values[0]
    return _pair(layer, what, value)


def _check_options(layer: KerasLayer, state: ConversionState) -> None:
    """What both kinds refuse: another rank than the class expects, dilation."""
    kind = type(layer).__name__
    _check_image_layer(layer, state)
    rank = 2 if _one_d(layer) else 3
    if len(state.keras_shape) != rank:
        raise K2CError(f"{kind} layer '{layer.name}' gets an input of shape {state.keras_shape}; it needs rank {rank}")
    dilation = tuple(int(d) for d in layer.dilation_rate)
    if any(d != 1 for d in dilation):
        raise K2CError(
            f"{kind} layer '{layer.name}' has dilation_rate={layer.dilation_rate}; only 1 "
            "(no dilation) is supported for depthwise and separable convolutions"
        )
    if int(layer.depth_multiplier) < 1:
        raise K2CError(
            f"{kind} layer '{layer.name}' has depth_multiplier={layer.depth_multiplier}; a positive integer is needed"
        )


def _weights(layer: KerasLayer, variable: object, shape: Shape, what: str) -> np.ndarray:
    """A weight array as float64, checked against the shape the options imply."""
    value = _to_numpy(variable)
    if value.shape != shape:
        raise K2CError(f"{type(layer).__name__} layer '{layer.name}' has {what} shape {value.shape}, expected {shape}")
    if not np.all(np.isfinite(value)):
        raise K2CError(f"{type(layer).__name__} layer '{layer.name}' has NaN or infinite weights")
    return value


def _depthwise(
    layer: KerasLayer,
    state: ConversionState,
    name: str,
    variable: object,
    with_bias: bool,
) -> DepthwiseConv2D:
    """The depthwise part of either class, as a record named `name`."""
    _check_options(layer, state)
    padding = _padding(layer)
    kernel_size = _as_pair(layer, "kernel_size", layer.kernel_size)
    strides = _as_pair(layer, "strides", layer.strides)
    channels, m = state.shape[2], int(layer.depth_multiplier)
    keras_kernel = (*kernel_size[_one_d(layer) :], channels, m)
    kernel = _weights(layer, variable, keras_kernel, "depthwise kernel").reshape(*kernel_size, channels * m)
    bias = (
        _weights(layer, layer.bias, (channels * m,), "bias") if with_bias and layer.use_bias else np.zeros(channels * m)
    )
    (out_h, out_w), pads = _window_geometry(layer, state.shape, kernel_size, strides, padding, "kernel_size")
    common = state.common(layer, (out_h, out_w, channels * m))
    common["name"] = name
    return DepthwiseConv2D(
        **common,
        kernel=kernel,
        bias=bias,
        use_bias=with_bias and bool(layer.use_bias),
        activation=_activation(layer) if with_bias else "linear",
        kernel_size=kernel_size,
        strides=strides,
        padding=padding,
        pads=pads,
        depth_multiplier=m,
    )


def uniform_window(
    name: str,
    state: ConversionState,
    output_shape: Shape,
    kernel_size: tuple[int, int],
    strides: tuple[int, int],
    weight: float,
) -> DepthwiseConv2D:
    """Each window's sum per channel times one constant `weight`, a record named `name`
    (an average pooling whose library computes the window's sum times a constant)."""
    channels = state.shape[-1]
    return DepthwiseConv2D(
        name=name,
        inputs=tuple(state.inputs),
        input_shapes=tuple(tuple(s) for s in state.shapes),
        output_shape=tuple(output_shape),
        kernel=np.full((*kernel_size, channels), float(weight)),
        bias=np.zeros(channels),
        use_bias=False,
        kernel_size=kernel_size,
        strides=strides,
    )


@register_converter("DepthwiseConv2D", "DepthwiseConv1D")
def _convert_depthwise(layer: KerasLayer, state: ConversionState) -> Layer:
    """One channels_last depthwise convolution, 'valid' or 'same', any kernel, strides and
    depth multiplier; bias and activation as in Keras."""
    record = _depthwise(layer, state, str(layer.name), layer.kernel, with_bias=True)
    _check_keras_shape(layer, state, record.output_shape)
    return record


@register_converter("SeparableConv2D", "SeparableConv1D")
def _convert_separable(layer: KerasLayer, state: ConversionState) -> tuple[Layer, ...]:
    """Depthwise (no bias, linear) then a pointwise 1x1 Conv2D with the bias and activation."""
    depthwise = _depthwise(layer, state, f"{layer.name}_depthwise", layer.depthwise_kernel, with_bias=False)
    h2, w2, mid = depthwise.output_shape
    filters = int(layer.filters)
    pointwise = _weights(
        layer, layer.pointwise_kernel, (1,) * (1 if _one_d(layer) else 2) + (mid, filters), "pointwise kernel"
    ).reshape(1, 1, mid, filters)
    bias = _weights(layer, layer.bias, (filters,), "bias") if layer.use_bias else np.zeros(filters)
    out = (h2, w2, filters)
    _check_keras_shape(layer, state, out)
    conv = Conv2D(
        name=str(layer.name),
        inputs=(depthwise.name,),
        input_shapes=(depthwise.output_shape,),
        output_shape=out,
        kernel=pointwise,
        bias=bias,
        use_bias=bool(layer.use_bias),
        activation=_activation(layer),
        kernel_size=(1, 1),
        strides=(1, 1),
        padding="valid",
        pads=(0, 0, 0, 0),
    )
    return depthwise, conv


class DepthwiseKind(EngineKind, Windowed):
    records = (DepthwiseConv2D,)
    params_type: ClassVar[type[Params]] = ConvParams
    window_per_pe = True
    latency_built = True

    def graph_kernel(self, plan: LayerPlan, kernel: np.ndarray) -> np.ndarray:
        """The (kh*kw*C, C*m) matrix of the whole window, (kh, kw, c) order: output channel
        c*m + j reads input channel c alone (zeros elsewhere cost no adder)."""
        taps, channels = plan.window, plan.input_shape[-1]
        m = plan.filters // channels
        matrix = np.zeros((taps * channels, plan.filters), dtype=np.asarray(kernel).dtype)
        for c in range(channels):
            matrix[c::channels, c * m : (c + 1) * m] = np.asarray(kernel)[:, c * m : (c + 1) * m]
        return matrix

    def plan_params(self, layer: Layer) -> ConvParams:
        assert isinstance(layer, DepthwiseConv2D)
        return ConvParams(kernel_size=layer.kernel_size, strides=layer.strides, pads=layer.pads)

    def window_channels(self, plan: LayerPlan) -> int:
        return plan.input_shape[-1]

    def window(self, input_shape: tuple[int, ...], params: Params) -> int:
        """K = kh*kw: its own channel's window only."""
        kh, kw = narrow(params, ConvParams).kernel_size
        return kh * kw

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        """(N, H, W, C) raw -> (N, H2, W2, C*m) raw: zero padding, then the dense contract per
        window and output channel f over the K = kh*kw values of input channel f // m."""
        assert params is not None
        geometry = params_of(plan, ConvParams)
        win = windows(
            pad_images(xs[0], geometry.pads, 0),
            geometry.kernel_size,
            (1, 1),
            geometry.strides,
            (plan.output_shape[0], plan.output_shape[1]),
        )
        n, h2, w2 = win.shape[:3]
        m = plan.filters // plan.input_shape[-1]
        own = np.repeat(win, m, axis=-1)  # channel c*m + j reads channel c
        out = neurons(own.reshape(n * h2 * w2, plan.window, plan.filters), plan, params, per_filter)
        return out.reshape(n, h2, w2, plan.filters)

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """Output channel c*m + j: channel c's window, its own filter."""
        assert isinstance(layer, DepthwiseConv2D)
        kernel, bias = params if params is not None else self.constants(layer)
        win = windows(
            pad_images(xs[0], layer.pads, 0.0),
            layer.kernel_size,
            (1, 1),
            layer.strides,
            (layer.output_shape[0], layer.output_shape[1]),
        )
        win = np.repeat(win, layer.depth_multiplier, axis=-1)
        pre = np.einsum(
            "nhwijf,ijf->nhwf", win, np.asarray(kernel, dtype=np.float64).reshape(win.shape[3:])
        ) + np.asarray(bias, dtype=np.float64)
        return pre, activations.keras_float(activations.parse(layer.activation), pre)

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        """[Pad] |> K2C.Depthwise (window, per-channel regrouping, engine)."""
        own = params_of(plan, ConvParams)
        (kh, kw), (sh, sw) = own.kernel_size, own.strides
        h, w = generator_geometry(plan)[:2]
        m = plan.filters // plan.input_shape[-1]
        shapes = f"{shape_text(plan.input_shape)} -> {shape_text(plan.output_shape)}"
        input_queue, window_queue, queue_notes, queue_uses = self.queues(plan)
        doc = HASKELL.doc(shapes, kh, kw, m, sh, sw, padding_doc(plan), plan.activation)
        if is_latency(plan):  # every channel's window, flattened, into the adder graph
            own_fifo = own.window_fifo
            gen = [HASKELL.windows(h, w, kh, kw, sh, sw)] + ([HASKELL.window_fifo(own_fifo)] if own_fifo else [])
            uses = [*pad_uses(plan)] + (["fifo"] if input_queue or own_fifo else [])
            return self.latency_entry(plan, doc, [*input_queue, *pad_stage(plan, "0"), *gen], uses)
        body = [*input_queue, *pad_stage(plan, "0"), HASKELL.depthwise(h, w, kh, kw, sh, sw, m, window_queue, fn)]
        return self.compute_entry(
            plan,
            doc,
            body,
            queue_notes,
            ["depthwise2d", *queue_uses, *pad_uses(plan)],
        )


KINDS = (DepthwiseKind(),)
