"""The transposed convolution kind: Keras Conv2DTranspose and Conv1DTranspose (strides,
'valid'/'same', `output_padding`, bias, activation; dilation 1), built without multiplying
the zeros a transposed convolution inserts between input pixels.

The sub-pixel identity, per axis of stride `s` and kernel `k`: output position `q*s + r` of
the full transposed output (before Keras' cropping) is `sum_j x[q - j] * w[j*s + r]` over
`j < m = ceil(k / s)` (taps past `k` are zero). So every output phase `r` is a regular
convolution of the input with the `m` taps `w[r], w[s + r], ...` reversed, and all `s*s`
phases of an image are one Conv2D of kernel `(mh, mw)` with `s_h*s_w*F` filters (channel
`(rh*sw + rw)*F + f`: phase `(rh, rw)`, filter `f`) over the input padded by `m - 1` on each
side. Its output pixel `(q, p)` holds the `s_h x s_w` output pixels `(q*sh + rh, p*sw + rw)`:
interleaving them into raster order (depth to space) and cropping Keras' padding gives the
Keras output exactly (each output value is one exact sum of products plus the bias, rounded
once: the same contract as Conv2D).

A Keras Conv2DTranspose `name` therefore becomes two records: the Conv2D `name_phases` (the
filter engine with its knobs, its formats, the bias and the activation) and the
`Interleave2D` `name` of this kind (`K2C.Interleave` then `K2C.Crop`), whose output is the
Keras layer's. Multiplications per input pixel: `s_h*s_w*mh*mw*C*F`, against `kh*kw*C*F` for
the transposed convolution itself (equal when the strides divide the kernel) and
`s_h*s_w*kh*kw*C*F` for a convolution over the zero-inserted input.

Keras' geometry (TF's `conv_transpose` given Keras' output length `L`): output `o` is full
position `o + P`, `P` the 'same' padding before (`max(0, (n - 1)*s + k - L) // 2`; 0 for
'valid'); positions past the full length hold the bias alone. The phase convolution starts
`P // s` phases in (less padding before) and ends where the last kept phase does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from keras2clash.backend.haskell import kind_template, shape_text
from keras2clash.errors import K2CError
from keras2clash.frontend.images import _check_image_layer, _pair
from keras2clash.frontend.registry import (
    ConversionState,
    KerasLayer,
    _activation,
    _check_keras_shape,
    _kernel_and_bias,
    register_converter,
)
from keras2clash.frontend.sequences import _check_sequence_layer, _one
from keras2clash.hw.events import Block, Crop, EngineTiming, Interleave, Max, Stateful
from keras2clash.hw.plan import Common, LayerFormats, LayerPlan, Params
from keras2clash.ir.layers import Layer, register_record
from keras2clash.kinds.base import Entry, Kind, Storage, narrow, params_of
from keras2clash.kinds.conv import Conv2D
from keras2clash.quant.exact import QuantizedLayer
from keras2clash.quant.formats import FixedFormat

HASKELL = kind_template("transpose.hs.j2")


@register_record
@dataclass(frozen=True)
class Interleave2D(Layer):
    """The second half of a transposed convolution (`kinds.transpose`): each input pixel's
    `phases` = (sh, sw) groups of channels become an `sh x sw` block of output pixels (depth
    to space, phase `(rh, rw)` from channels `(rh*sw + rw)*F ...`), then `crops` (top,
    bottom, left, right) are dropped. `source_class`: the Keras class (Conv2DTranspose or
    Conv1DTranspose)."""

    phases: tuple[int, int] = (1, 1)
    crops: tuple[int, int, int, int] = (0, 0, 0, 0)
    source_class: str = "Conv2DTranspose"

    type: ClassVar[str] = "interleave2d"
    keras_class: ClassVar[str] = "Conv2DTranspose"


@dataclass(frozen=True)
class AxisGeometry:
    """One axis of a transposed convolution as the phase convolution builds it."""

    length: int  # Keras' output length
    taps: int  # m = ceil(k / s): the phase convolution's kernel
    pads: tuple[int, int]  # the phase convolution's padding (before, after)
    crops: tuple[int, int]  # interleaved positions dropped (before, after)


def axis_geometry(n: int, k: int, s: int, padding: str, output_padding: int | None) -> AxisGeometry:
    """Keras' output length (`conv_utils.deconv_output_length`), TF's padding before (the
    'same' rule of the forward convolution whose gradient it is), and the phase convolution's
    padding and the crop that give exactly the Keras output positions."""
    if output_padding is None:
        length = n * s + max(k - s, 0) if padding == "valid" else n * s
    else:
        length = (n - 1) * s + k - 2 * (k // 2 if padding == "same" else 0) + output_padding
    before = max(0, (n - 1) * s + k - length) // 2 if padding == "same" else 0
    taps = -(-k // s)
    left = taps - 1 - before // s
    phases = -(-(before % s + length) // s)  # phase outputs the kept positions span
    right = max(0, phases - n + before // s)
    computed = n + left + right - taps + 1
    return AxisGeometry(length, taps, (left, right), (before % s, computed * s - before % s - length))


def phase_kernel(kernel: np.ndarray, strides: tuple[int, int], taps: tuple[int, int]) -> np.ndarray:
    """The Keras transposed kernel (kh, kw, F, C) as the phase convolution's (mh, mw, C,
    sh*sw*F): tap (jh, jw) of phase (rh, rw) is `kernel[(mh-1-jh)*sh + rh, (mw-1-jw)*sw + rw]`
    transposed to (C, F), zero past the kernel."""
    kh, kw, filters, channels = kernel.shape
    (sh, sw), (mh, mw) = strides, taps
    out = np.zeros((mh, mw, channels, sh, sw, filters), dtype=np.float64)
    for jh in range(mh):
        for jw in range(mw):
            for rh in range(sh):
                for rw in range(sw):
                    th, tw = (mh - 1 - jh) * sh + rh, (mw - 1 - jw) * sw + rw
                    if th < kh and tw < kw:
                        out[jh, jw, :, rh, rw, :] = kernel[th, tw].T
    return out.reshape(mh, mw, channels, sh * sw * filters)


def _refuse_options(layer: KerasLayer, dilation: tuple[int, ...]) -> None:
    """One error per option the phase decomposition does not build."""
    kind = type(layer).__name__
    if any(d != 1 for d in dilation):
        raise K2CError(
            f"{kind} layer '{layer.name}' has dilation_rate={tuple(dilation)}; a transposed convolution is "
            "built with dilation 1 only"
        )
    if int(getattr(layer, "groups", 1)) != 1:
        raise K2CError(
            f"{kind} layer '{layer.name}' has groups={layer.groups} (a grouped convolution); only groups=1 is supported"
        )


def _transposed(
    layer: KerasLayer,
    state: ConversionState,
    kernel: np.ndarray,
    bias: np.ndarray,
    strides: tuple[int, int],
    output_padding: tuple[int | None, int | None],
) -> tuple[Layer, ...]:
    """The phase Conv2D and the Interleave2D of a transposed convolution given in 2-D
    (`kernel` (kh, kw, F, C))."""
    kind = type(layer).__name__
    padding = str(layer.padding).lower()
    if padding not in ("valid", "same"):
        raise K2CError(
            f"{kind} layer '{layer.name}' uses padding='{layer.padding}'; only 'valid' and 'same' are supported"
        )
    height, width, _ = state.shape
    kh, kw, filters = int(kernel.shape[0]), int(kernel.shape[1]), int(kernel.shape[2])
    for what, op, s in (("height", output_padding[0], strides[0]), ("width", output_padding[1], strides[1])):
        if op is not None and not 0 <= op < s:
            raise K2CError(
                f"{kind} layer '{layer.name}' has output_padding {op} along its {what}; it must be below the stride {s}"
            )
    rows = axis_geometry(height, kh, strides[0], padding, output_padding[0])
    cols = axis_geometry(width, kw, strides[1], padding, output_padding[1])
    for n, s, axis in ((height, strides[0], rows), (width, strides[1], cols)):
        if axis.length < 1:
            raise K2CError(
                f"{kind} layer '{layer.name}': output_padding {output_padding} with padding='{padding}' leaves "
                "no output positions along an axis"
            )
        if padding == "same" and -(-axis.length // s) != n:
            raise K2CError(
                f"{kind} layer '{layer.name}': output_padding {output_padding} with padding='same' gives "
                f"{axis.length} positions, which a stride-{s} convolution would not map back to its {n} "
                "inputs (Keras cannot run it either)"
            )
    if not layer.use_bias:  # `_kernel_and_bias` sizes its zeros by the kernel's last axis, C here
        bias = np.zeros(filters)
    sh, sw = strides
    phases_name = f"{layer.name}_phases"
    top, bottom = rows.pads
    left, right = cols.pads
    hq = height + top + bottom - rows.taps + 1
    wq = width + left + right - cols.taps + 1
    pads = (top, bottom, left, right)
    conv = Conv2D(
        name=phases_name,
        inputs=tuple(state.inputs),
        input_shapes=tuple(tuple(s) for s in state.shapes),
        output_shape=(hq, wq, sh * sw * filters),
        kernel=phase_kernel(kernel, strides, (rows.taps, cols.taps)),
        bias=np.tile(bias, sh * sw),
        use_bias=bool(layer.use_bias),
        activation=_activation(layer),
        kernel_size=(rows.taps, cols.taps),
        strides=(1, 1),
        padding="same" if any(pads) else "valid",
        pads=pads,
        source_class=kind,
    )
    out = (rows.length, cols.length, filters)
    _check_keras_shape(layer, state, out)
    interleave = Interleave2D(
        name=str(layer.name),
        inputs=(phases_name,),
        input_shapes=(conv.output_shape,),
        output_shape=out,
        phases=strides,
        crops=(*rows.crops, *cols.crops),
        source_class=kind,
    )
    return conv, interleave


@register_converter("Conv2DTranspose")
def _convert_conv2d_transpose(layer: KerasLayer, state: ConversionState) -> tuple[Layer, ...]:
    """A channels_last Conv2DTranspose -> its phase Conv2D `<name>_phases` and its
    Interleave2D `<name>`."""
    _check_image_layer(layer, state)
    _refuse_options(layer, tuple(int(d) for d in layer.dilation_rate))
    kernel_size = _pair(layer, "kernel_size", layer.kernel_size)
    channels, filters = state.shape[2], int(layer.filters)
    kernel, bias = _kernel_and_bias(layer, (*kernel_size, filters, channels))
    op = layer.output_padding
    output_padding = (None, None) if op is None else (int(op[0]), int(op[1]))
    return _transposed(layer, state, kernel, bias, _pair(layer, "strides", layer.strides), output_padding)


@register_converter("Conv1DTranspose")
def _convert_conv1d_transpose(layer: KerasLayer, state: ConversionState) -> tuple[Layer, ...]:
    """Conv1DTranspose (channels_last) -> the 2-D pair on the one-row image (kernel (1, k))."""
    _check_sequence_layer(layer, state)
    _refuse_options(layer, (_one(layer, "dilation_rate", layer.dilation_rate),))
    size = _one(layer, "kernel_size", layer.kernel_size)
    channels, filters = state.shape[2], int(layer.filters)
    kernel, bias = _kernel_and_bias(layer, (size, filters, channels))
    op = layer.output_padding
    output_padding = (None, None) if op is None else (0, int(op[0] if isinstance(op, (tuple, list)) else op))
    return _transposed(
        layer,
        state,
        kernel.reshape(1, size, filters, channels),
        bias,
        (1, _one(layer, "strides", layer.strides)),
        output_padding,
    )


@dataclass(frozen=True)
class InterleaveParams(Params):
    phases: tuple[int, int]  # sh, sw: output pixels down and across per input pixel
    crops: tuple[int, int, int, int]  # top, bottom, left, right of the interleaved image


def interleave(own: Params, x: np.ndarray) -> np.ndarray:
    """(N, Hq, Wq, sh*sw*F) -> the cropped (N, Hq*sh - top - bottom, Wq*sw - left - right, F):
    raw integers or floats alike (values are only moved)."""
    own = narrow(own, InterleaveParams)
    (sh, sw), (top, bottom, left, right) = own.phases, own.crops
    n, hq, wq, channels = x.shape
    f = channels // (sh * sw)
    z = x.reshape(n, hq, wq, sh, sw, f).transpose(0, 1, 3, 2, 4, 5).reshape(n, hq * sh, wq * sw, f)
    return z[:, top : hq * sh - bottom, left : wq * sw - right]


class InterleaveKind(Kind):
    """Depth to space, then the crop (`K2C.Interleave` |> `K2C.Crop`): values moved, the
    phase convolution's format kept."""

    records = (Interleave2D,)
    params_type: ClassVar[type[Params]] = InterleaveParams
    selects_values = True

    def plan_params(self, layer: Layer) -> InterleaveParams:
        assert isinstance(layer, Interleave2D)
        return InterleaveParams(phases=layer.phases, crops=layer.crops)

    def plan(self, common: Common, override: LayerFormats | None, fmt: FixedFormat) -> LayerPlan:
        """The phase convolution's format, kept; its formats are given to that layer."""
        layer = common.layer
        if override is not None:
            source = layer.source_class if isinstance(layer, Interleave2D) else "Conv2DTranspose"
            raise K2CError(
                f"layer '{layer.name}' ({source}) interleaves the outputs of its phase convolution "
                f"'{layer.inputs[0]}' and keeps their format; give the layer's formats to '{layer.inputs[0]}'"
            )
        return super().plan(common, override, fmt)

    def settings_owner(self, layer: Layer) -> str | None:
        """The phase convolution: the transposed convolution's weights, formats and knobs are its."""
        return layer.inputs[0]

    def source_class(self, plan: LayerPlan) -> str:
        return plan.layer.source_class if isinstance(plan.layer, Interleave2D) else ""

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        return interleave(plan.params, xs[0])

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        return None, interleave(self.plan_params(layer), xs[0])

    def _interleaved(self, plan: LayerPlan) -> tuple[int, int]:
        """(H, W) of the image before the crop."""
        sh, sw = params_of(plan, InterleaveParams).phases
        return plan.input_shape[0] * sh, plan.input_shape[1] * sw

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        """[Crop] <- Interleave, from the consumer backwards."""
        own = params_of(plan, InterleaveParams)
        if any(own.crops):
            crop = Crop(*self._interleaved(plan), own.crops, down, mx)
            blocks.append(crop)
            down = crop
        block = Interleave(plan.input_shape[1], own.phases, down, mx)
        blocks.append(block)
        return block

    def storage(self, plan: LayerPlan) -> Storage:
        """The phase rows 1..sh-1 of an input row (block RAM; a register when the row is one
        pixel) and the output register of one output row's sw phases."""
        (sh, sw), wq = params_of(plan, InterleaveParams).phases, plan.input_shape[1]
        f, bits = plan.output_shape[-1], plan.in_fmt.hw_bits
        word = (sh - 1) * sw * f * bits
        return Storage(
            line_buffer_bits=wq * word if wq > 1 else 0,
            register_bits=sw * f * bits + (word if wq == 1 else 0),
        )

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        own = params_of(plan, InterleaveParams)
        (sh, sw), wq = own.phases, plan.input_shape[1]
        shapes = f"{shape_text(plan.input_shape)} -> {shape_text(plan.output_shape)}"
        body = [HASKELL.interleave(wq, sh, sw)]
        uses = ["interleave"]
        if any(own.crops):
            body.append(HASKELL.crop(*self._interleaved(plan), *own.crops))
            uses.append("crop")
        return Entry(
            doc=HASKELL.doc(self.source_class(plan), shapes, sh, sw, *own.crops),
            body=tuple(body),
            notes=(HASKELL.storage_note(wq, sh),),
            uses=tuple(uses),
        )


KINDS = (InterleaveKind(),)
