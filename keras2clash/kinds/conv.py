"""The convolution kind: Keras Conv2D and Conv1D, and a Dense applied per position of a
sequence or an image (a 1x1 convolution), on the window generator and the filter engine.

A Conv1D of kernel `k` is a Conv2D of kernel `(1, k)` on the one-row image
(`frontend.registry.image_shape`); 'same' padding follows the TF rule on the dilated extent,
'causal' pads `extent - 1` on the left. `source_class` keeps the Keras class, so reports and
the generated Haskell name the layer the user wrote.

Blocks: `[Fifo] -> [Pad] -> K2C.Window -> [Fifo] -> K2C.Engine` (`K2C.Conv.conv2d`), or a
window of the dilated extent with the taps selected by wires (`K2C.Dilated.conv2dDilated`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from keras2clash.backend.haskell import kind_template, shape_text
from keras2clash.errors import K2CError
from keras2clash.frontend.images import (
    _check_image_layer,
    _padding,
    _pair,
    _window_geometry,
    dilated_extent,
)
from keras2clash.frontend.registry import (
    ConversionState,
    KerasLayer,
    _activation,
    _check_keras_shape,
    _kernel_and_bias,
    register_converter,
)
from keras2clash.frontend.sequences import _check_sequence_layer, _one, _padding_1d
from keras2clash.hw.plan import LayerPlan, Params
from keras2clash.ir.layers import Layer, register_record
from keras2clash.kinds.base import Entry, narrow, params_of
from keras2clash.kinds.engine import EngineKind, EngineParams, is_latency, neurons
from keras2clash.kinds.window import (
    Windowed,
    WindowParams,
    generator_geometry,
    pad_stage,
    pad_uses,
    padding_doc,
    source_doc,
)
from keras2clash.quant import activations
from keras2clash.quant.exact import QuantizedLayer, pad_images, windows

HASKELL = kind_template("conv.hs.j2")


@register_record
@dataclass(frozen=True)
class Conv2D(Layer):
    """`kernel` (kh, kw, C, F), `bias` (F,); `pads` (top, bottom, left, right) are explicit
    zero padding ('same' follows the TF rule, see `frontend.convert.same_pads`, on the
    dilated extent). `dilation` (dh, dw): tap (i, j) reads input pixel (i*dh, j*dw) of the
    window. `source_class` is the Keras class it came from (Conv2D, Conv1D, a Dense
    applied per position of a tensor, or the transposed convolution whose stride phases it
    computes: `kinds.transpose`), for reports and the generated Haskell."""

    kernel: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0, 0)), compare=False)
    bias: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    use_bias: bool = True
    activation: str = "linear"  # type: ignore[assignment]
    kernel_size: tuple[int, int] = (1, 1)
    strides: tuple[int, int] = (1, 1)
    padding: str = "valid"
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    source_class: str = "Conv2D"

    type: ClassVar[str] = "conv2d"
    keras_class: ClassVar[str] = "Conv2D"


@dataclass(frozen=True)
class ConvParams(EngineParams, WindowParams):
    """A convolution's parameters (conv2d, depthwise2d): the window generator's and the engine's."""


@register_converter("Conv2D")
def _convert_conv2d(layer: KerasLayer, state: ConversionState) -> Layer:
    """A channels_last Conv2D, 'valid' or 'same' (explicit pads), any strides, kernel and
    dilation."""
    _check_image_layer(layer, state)
    if int(layer.groups) != 1:
        raise K2CError(
            f"Conv2D layer '{layer.name}' has groups={layer.groups} (a grouped convolution); only groups=1 is supported"
        )
    kernel_size = _pair(layer, "kernel_size", layer.kernel_size)
    channels, filters = state.shape[2], int(layer.filters)
    kernel, bias = _kernel_and_bias(layer, (*kernel_size, channels, filters))
    return conv_record(
        layer,
        state,
        kernel,
        bias,
        strides=_pair(layer, "strides", layer.strides),
        dilation=_pair(layer, "dilation_rate", layer.dilation_rate),
        padding=_padding(layer),
    )


def conv_record(
    layer: KerasLayer,
    state: ConversionState,
    kernel: np.ndarray,
    bias: np.ndarray,
    strides: tuple[int, int],
    dilation: tuple[int, int],
    padding: str,
) -> Conv2D:
    """The Conv2D record of a convolution given as a 2-D one (`kernel` (kh, kw, C, F)):
    Conv2D itself, Conv1D one row high, a Dense applied per position. The geometry uses the
    dilated extent (TF's 'same' rule too); 'causal' (Conv1D) pads `extent - 1` on the left."""
    kernel_size = (int(kernel.shape[0]), int(kernel.shape[1]))
    extent = dilated_extent(kernel_size, dilation)
    what = "kernel_size" if dilation == (1, 1) else f"dilated kernel extent (dilation_rate {dilation})"
    if padding == "causal":
        height, width, channels = state.shape
        shape = (height, width + extent[1] - 1, channels)
        (out_h, out_w), _ = _window_geometry(layer, shape, extent, strides, "valid", what)
        pads = (0, 0, extent[1] - 1, 0)
    else:
        (out_h, out_w), pads = _window_geometry(layer, state.shape, extent, strides, padding, what)
    out = (out_h, out_w, int(kernel.shape[3]))
    _check_keras_shape(layer, state, out)
    return Conv2D(
        **state.common(layer, out),
        kernel=kernel,
        bias=bias,
        use_bias=bool(layer.use_bias),
        activation=_activation(layer),
        kernel_size=kernel_size,
        strides=strides,
        padding=padding,
        pads=pads,
        dilation=dilation,
        source_class=type(layer).__name__,
    )


@register_converter("Conv1D")
def _convert_conv1d(layer: KerasLayer, state: ConversionState) -> Layer:
    """Conv1D (channels_last; 'valid', 'same' or 'causal'; any strides and dilation Keras
    accepts) -> a Conv2D of kernel (1, k, C, F) on the one-row image."""
    _check_sequence_layer(layer, state)
    if int(layer.groups) != 1:
        raise K2CError(
            f"Conv1D layer '{layer.name}' has groups={layer.groups} (a grouped convolution); only groups=1 is supported"
        )
    size = _one(layer, "kernel_size", layer.kernel_size)
    channels, filters = state.shape[2], int(layer.filters)
    kernel, bias = _kernel_and_bias(layer, (size, channels, filters))
    return conv_record(
        layer,
        state,
        kernel.reshape(1, size, channels, filters),
        bias,
        strides=(1, _one(layer, "strides", layer.strides)),
        dilation=(1, _one(layer, "dilation_rate", layer.dilation_rate)),
        padding=_padding_1d(layer, ("valid", "same", "causal")),
    )


def dense_on_tensor(layer: KerasLayer, state: ConversionState) -> Layer:
    """A Dense on a `(..., C)` tensor of rank 2 or 3 (Keras applies it to the last axis at
    every position; an EinsumDense or a TimeDistributed Dense given as one, `kinds.dense`) ->
    a 1x1 Conv2D with kernel (1, 1, C, units) on the IR image (a sequence is one row high).
    BatchNormalization folding and activation fusing then treat it like any Conv2D."""
    if len(state.shape) != 3:
        raise K2CError(
            f"{type(layer).__name__} layer '{layer.name}' gets an input of shape {state.keras_shape} (rank "
            f"{len(state.keras_shape)}); a Dense applies per position only to a sequence "
            "(steps, channels) or an image (height, width, channels); add a Flatten or Reshape before it"
        )
    channels, units = state.shape[2], int(layer.units)
    kernel, bias = _kernel_and_bias(layer, (channels, units))
    return conv_record(
        layer, state, kernel.reshape(1, 1, channels, units), bias, strides=(1, 1), dilation=(1, 1), padding="valid"
    )


class ConvKind(EngineKind, Windowed):
    records = (Conv2D,)
    params_type: ClassVar[type[Params]] = ConvParams
    latency_built = True

    def plan_latency(self, plan: LayerPlan) -> LayerPlan:
        """A dilated convolution's taps are not built at the latency strategy."""
        if params_of(plan, ConvParams).dilation != (1, 1):
            raise K2CError(
                f"layer '{plan.name}' ({plan.type}): the latency strategy builds undilated convolutions; give this "
                "layer the resource strategy (--strategy takes one per dense/conv2d layer, e.g. latency,resource)"
            )
        return super().plan_latency(plan)

    def plan_params(self, layer: Layer) -> ConvParams:
        assert isinstance(layer, Conv2D)
        return ConvParams(
            kernel_size=layer.kernel_size,
            strides=layer.strides,
            pads=layer.pads,
            dilation=layer.dilation,
            source_class="" if layer.source_class == layer.keras_class else layer.source_class,
        )

    def window(self, input_shape: tuple[int, ...], params: Params) -> int:
        """K = kh*kw*C."""
        kh, kw = narrow(params, ConvParams).kernel_size
        return kh * kw * input_shape[-1]

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        """(N, H, W, C) raw -> (N, H2, W2, F) raw: zero padding, then the dense contract per window."""
        assert params is not None
        own = params_of(plan, ConvParams)
        win = windows(
            pad_images(xs[0], own.pads, 0),
            own.kernel_size,
            own.dilation,
            own.strides,
            (plan.output_shape[0], plan.output_shape[1]),
        )
        n, h2, w2 = win.shape[:3]
        out = neurons(win.reshape(n * h2 * w2, plan.window), plan, params)
        return out.reshape(n, h2, w2, plan.filters)

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        assert isinstance(layer, Conv2D)
        kernel, bias = params if params is not None else self.constants(layer)
        kernel = np.asarray(kernel, dtype=np.float64)
        win = windows(
            pad_images(xs[0], layer.pads, 0.0),
            layer.kernel_size,
            layer.dilation,
            layer.strides,
            (layer.output_shape[0], layer.output_shape[1]),
        )
        n, h2, w2 = win.shape[:3]
        flat = win.reshape(n * h2 * w2, -1) @ kernel.reshape(-1, kernel.shape[-1])
        pre = (flat + np.asarray(bias, dtype=np.float64)).reshape(n, h2, w2, kernel.shape[-1])
        return pre, activations.keras_float(activations.parse(layer.activation), pre)

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        """`Conv.conv2d`, or `Dilated.conv2dDilated` (a window of the dilated extent, then the
        taps) when dilated."""
        own = params_of(plan, ConvParams)
        (kh, kw), (sh, sw), (dh, dw) = own.kernel_size, own.strides, own.dilation
        h, w = generator_geometry(plan)[:2]
        dilated = (dh, dw) != (1, 1)
        shapes = f"{shape_text(plan.input_shape)} -> {shape_text(plan.output_shape)}"
        doc = HASKELL.doc(
            source_doc(plan), shapes, kh, kw, sh, sw, (dh, dw) if dilated else None, padding_doc(plan), plan.activation
        )
        input_queue, window_queue, queue_notes, queue_uses = self.queues(plan)
        if is_latency(plan):  # the windows, flattened, into the adder graph
            own_fifo = params_of(plan, ConvParams).window_fifo
            gen = [HASKELL.windows(h, w, kh, kw, sh, sw)] + ([HASKELL.window_fifo(own_fifo)] if own_fifo else [])
            front = [*input_queue, *pad_stage(plan, "0"), *gen]
            uses = [*pad_uses(plan)] + (["fifo"] if input_queue or own_fifo else [])
            return self.latency_entry(plan, doc, front, uses)
        block = (
            HASKELL.conv_dilated(h, w, kh, kw, dh, dw, sh, sw, window_queue, fn)
            if dilated
            else HASKELL.conv(h, w, kh, kw, sh, sw, window_queue, fn)
        )
        notes = [HASKELL.dilated_note(*own.extent)] if dilated else []
        return self.compute_entry(
            plan,
            doc,
            [*input_queue, *pad_stage(plan, "0"), block],
            notes + queue_notes,
            ["conv2d_dilated" if dilated else "conv2d", *queue_uses, *pad_uses(plan)],
        )


KINDS = (ConvKind(),)
