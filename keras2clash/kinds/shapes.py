"""The shape kinds: zero padding, cropping, nearest upsampling and reshapes.

They move values and compute nothing (docs/guide/contract.md): the output keeps the input's
format, the golden model and the float model run the same numpy code on raw integers and on
floats, and the blocks store at most a row.

Keras classes: ZeroPadding1D/2D, Cropping1D/2D, UpSampling1D/2D, Reshape, Permute. 1-D layers
become the 2-D records one row high (`frontend.registry.image_shape`): a sequence `(steps, C)`
is the image `(1, steps, C)`, so a 1-D padding or cropping is `(0, 0, left, right)` and a 1-D
upsampling `(1, size)`. Reshape and Permute are accepted when they keep the row-major order of
the values (the order beats carry them in): a Reshape always does; a Permute only when it
moves size-1 axes. Moving data across beats in another order (a transpose) would need a frame
buffer.

Blocks (the exact hardware model, `hw.events`): `K2C.Pad`; `K2C.Crop` (kept pixels are a wire,
dropped ones move when offered); `K2C.Upsample` (one row of line buffer); a reshape is a
relabelling (no block) or `K2C.Collect` of `g_in` beats then `K2C.Scatter` into `g_out` beats
over groups of lcm(C_in, C_out) values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from keras2clash.backend.haskell import kind_template, shape_text
from keras2clash.errors import K2CError
from keras2clash.frontend.images import _check_image_layer
from keras2clash.frontend.registry import (
    ConversionState,
    KerasLayer,
    _check_keras_shape,
    _single_input,
    image_shape,
    keras_output_shape,
    register_converter,
)
from keras2clash.hw.events import Block, Collect, Crop, EngineTiming, Max, Pad, Scatter, Stateful, Upsample
from keras2clash.hw.plan import LayerPlan, NoParams, Params
from keras2clash.ir import layers as ir
from keras2clash.ir.layers import Layer, register_record
from keras2clash.kinds.base import Entry, Kind, Storage, narrow, params_of
from keras2clash.kinds.flatten import Flatten
from keras2clash.quant.exact import QuantizedLayer

Shape = tuple[int, ...]
HASKELL = kind_template("shapes.hs.j2")


# --- the records ---------------------------------------------------------------------------


@register_record
@dataclass(frozen=True)
class ZeroPad2D(Layer):
    """Keras ZeroPadding2D (or ZeroPadding1D, `source_class`, one row high): `pads` (top,
    bottom, left, right) zeros around the image. The pass `fold_padding` folds it into a
    Conv2D or valid AveragePooling2D (or a next ZeroPad2D) that alone reads it; elsewhere it
    is a K2C.Pad."""

    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    source_class: str = ""

    type: ClassVar[str] = "zeropad2d"
    keras_class: ClassVar[str] = "ZeroPadding2D"


@register_record
@dataclass(frozen=True)
class Crop2D(Layer):
    """Keras Cropping2D (and Cropping1D, one row high): `crops` (top, bottom, left, right)
    rows and columns dropped from the image's border (K2C.Crop)."""

    crops: tuple[int, int, int, int] = (0, 0, 0, 0)

    type: ClassVar[str] = "crop2d"
    keras_class: ClassVar[str] = "Cropping2D"


@register_record
@dataclass(frozen=True)
class Upsample2D(Layer):
    """Keras UpSampling2D / UpSampling1D with nearest interpolation: each pixel repeated
    `size` = (sh, sw) times down and across (K2C.Upsample, one row of line buffer)."""

    size: tuple[int, int] = (1, 1)

    type: ClassVar[str] = "upsample2d"
    keras_class: ClassVar[str] = "UpSampling2D"


@register_record
@dataclass(frozen=True)
class Reshape(Layer):
    """Keras Reshape (or a Permute that only moves size-1 axes): the same values in the same
    row-major order, regrouped into beats of the output's last axis. Equal last axes: a
    relabelling (a wire); otherwise a beat-width converter (K2C.Collect then K2C.Scatter
    over groups of lcm(C_in, C_out) values). `source_class` says which Keras class."""

    source_class: str = "Reshape"

    type: ClassVar[str] = "reshape"
    keras_class: ClassVar[str] = "Reshape"


# --- the converters ------------------------------------------------------------------------


def _pairs(layer: KerasLayer, value: Any, rank: int, what: str) -> tuple[int, int, int, int]:
    """A padding/cropping option as (top, bottom, left, right): 1-D `(left, right)`,
    2-D `((top, bottom), (left, right))`; Keras has already normalised ints to pairs."""
    try:
        if rank == 1:
            left, right = (int(v) for v in value)
            sides: tuple[int, ...] = (0, 0, left, right)
        else:
            (top, bottom), (left, right) = (tuple(int(v) for v in pair) for pair in value)
            sides = (top, bottom, left, right)
    except (TypeError, ValueError):
        sides = (-1,)
    if len(sides) != 4 or min(sides) < 0:
        raise K2CError(
            f"{type(layer).__name__} layer '{layer.name}' has {what}={value}; non-negative integers per side are needed"
        )
    return sides  # type: ignore[return-value]


def _check_sequence_or_image(layer: KerasLayer, state: ConversionState, rank: int) -> None:
    """The Keras input must be a sequence (steps, C) for a 1-D layer, an image for a 2-D one."""
    _check_image_layer(layer, state)
    if len(state.keras_shape) != rank + 1:
        needed = "sequence (steps, channels)" if rank == 1 else "image (height, width, channels)"
        raise K2CError(
            f"{type(layer).__name__} layer '{layer.name}' gets an input of shape {state.keras_shape}; it needs a {needed}"
        )


@register_converter("ZeroPadding1D", "ZeroPadding2D")
def _convert_zero_padding(layer: KerasLayer, state: ConversionState) -> Layer:
    """Zeros around the image (before and after a sequence); the pass `fold_padding` moves them
    into the next layer where that computes the same, otherwise a K2C.Pad block."""
    kind = type(layer).__name__
    rank = 1 if kind == "ZeroPadding1D" else 2
    if rank == 1:
        _check_sequence_or_image(layer, state, 1)
    else:
        _check_image_layer(layer, state)
    pads = _pairs(layer, layer.padding, rank, "padding")
    h, w, c = state.shape
    out = (h + pads[0] + pads[1], w + pads[2] + pads[3], c)
    _check_keras_shape(layer, state, out)
    return ZeroPad2D(**state.common(layer, out), pads=pads, source_class="ZeroPadding1D" if rank == 1 else "")


@register_converter("Cropping1D", "Cropping2D")
def _convert_cropping(layer: KerasLayer, state: ConversionState) -> Layer:
    """Rows and columns dropped at the border (K2C.Crop)."""
    rank = 1 if type(layer).__name__ == "Cropping1D" else 2
    _check_sequence_or_image(layer, state, rank)
    top, bottom, left, right = crops = _pairs(layer, layer.cropping, rank, "cropping")
    h, w, c = state.shape
    out = (h - top - bottom, w - left - right, c)
    if min(out) < 1:
        raise K2CError(
            f"{type(layer).__name__} layer '{layer.name}' crops {crops} (top, bottom, left, "
            f"right) from its {h}x{w} input: nothing is left"
        )
    _check_keras_shape(layer, state, out)
    return Crop2D(**state.common(layer, out), crops=crops)


@register_converter("UpSampling1D", "UpSampling2D")
def _convert_upsampling(layer: KerasLayer, state: ConversionState) -> Layer:
    """Nearest-neighbour repetition (K2C.Upsample); other interpolations compute new values
    (bilinear, ...) and are refused."""
    kind = type(layer).__name__
    rank = 1 if kind == "UpSampling1D" else 2
    _check_sequence_or_image(layer, state, rank)
    interpolation = str(getattr(layer, "interpolation", "nearest"))
    if interpolation != "nearest":
        raise K2CError(
            f"UpSampling2D layer '{layer.name}' uses interpolation='{interpolation}', which computes "
            "new values between pixels; only 'nearest' (repeating each pixel) is supported"
        )
    size = (1, int(layer.size)) if rank == 1 else tuple(int(v) for v in layer.size)
    if len(size) != 2 or min(size) < 1:
        raise K2CError(f"{kind} layer '{layer.name}' has size={layer.size}; positive integers are needed")
    h, w, c = state.shape
    out = (h * size[0], w * size[1], c)
    _check_keras_shape(layer, state, out)
    return Upsample2D(**state.common(layer, out), size=size)  # type: ignore[arg-type]


def _reshape_record(layer: KerasLayer, state: ConversionState, out: Shape, source_class: str) -> Layer:
    """The record of an order-keeping reshape to `out` (IR form): none (identity), a Flatten
    (to a vector: K2C.Collect), or a Reshape (relabelling or beat-width conversion)."""
    if len(out) > 3:
        raise K2CError(
            f"{source_class} layer '{layer.name}' outputs shape {keras_output_shape(layer, state)}: "
            "only vectors, sequences (steps, channels) and images (height, width, channels) are supported"
        )
    if tuple(out) == tuple(state.shape):
        return ir.Identity(**state.common(layer, out), source_class=source_class)
    if len(out) == 1:
        return Flatten(**state.common(layer, out))
    return Reshape(**state.common(layer, out), source_class=source_class)


@register_converter("Reshape")
def _convert_reshape(layer: KerasLayer, state: ConversionState) -> Layer:
    """Any Reshape (-1 resolved by Keras): the row-major order is kept, only the beats are
    regrouped."""
    _single_input(layer, state)
    keras_out = keras_output_shape(layer, state)
    if keras_out is None or math.prod(keras_out) != math.prod(state.shape):  # pragma: no cover - Keras checks
        raise K2CError(f"Reshape layer '{layer.name}': cannot reshape {state.keras_shape} to {layer.target_shape}")
    return _reshape_record(layer, state, image_shape(keras_out), "Reshape")


@register_converter("Permute")
def _convert_permute(layer: KerasLayer, state: ConversionState) -> Layer:
    """A Permute that keeps the order of the axes longer than 1 keeps the row-major order of
    the values: it is a reshape. Any other is a transpose."""
    _single_input(layer, state)
    keras_in = state.keras_shape
    dims = tuple(int(d) for d in layer.dims)
    moved = [d - 1 for d in dims if keras_in[d - 1] != 1]
    if moved != sorted(moved):
        raise K2CError(
            f"Permute layer '{layer.name}' with dims={dims} on an input of shape {keras_in} reorders "
            "the values (a transpose needs a frame buffer); only permutations that move size-1 "
            "axes are supported"
        )
    out = tuple(keras_in[d - 1] for d in dims)
    return _reshape_record(layer, state, image_shape(out), "Permute")


# --- the kinds -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PadParams(Params):
    pads: tuple[int, int, int, int]  # top, bottom, left, right


@dataclass(frozen=True)
class CropParams(Params):
    crops: tuple[int, int, int, int]  # top, bottom, left, right


@dataclass(frozen=True)
class UpsampleParams(Params):
    size: tuple[int, int]  # repeats down, across


def _image(plan: LayerPlan) -> tuple[int, int]:
    """(H, W) of the input image; a vector is one pixel."""
    return (plan.input_shape[0], plan.input_shape[1]) if len(plan.input_shape) == 3 else (1, 1)


def _shapes(plan: LayerPlan) -> str:
    return f"{shape_text(plan.input_shape)} -> {shape_text(plan.output_shape)}"


class _Moves(Kind):
    """A shape kind: the same numpy code moves raw integers and floats (`move`)."""

    selects_values = True

    def move(self, own: Params, output_shape: tuple[int, ...], x: np.ndarray) -> np.ndarray:
        """`x` (batch first) moved as the layer of parameters `own` (`plan_params`) does."""
        raise NotImplementedError

    def golden(self, plan: LayerPlan, xs: Sequence[np.ndarray], params: QuantizedLayer | None) -> np.ndarray:
        return self.move(plan.params, plan.output_shape, xs[0])

    def float_step(
        self, layer: Layer, xs: Sequence[np.ndarray], params: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray]:
        return None, self.move(self.plan_params(layer), layer.output_shape, xs[0])


class ZeroPadKind(_Moves):
    records = (ZeroPad2D,)
    params_type: ClassVar[type[Params]] = PadParams

    def plan_params(self, layer: Layer) -> PadParams:
        assert isinstance(layer, ZeroPad2D)
        return PadParams(pads=layer.pads)

    def move(self, own: Params, output_shape: tuple[int, ...], x: np.ndarray) -> np.ndarray:
        top, bottom, left, right = narrow(own, PadParams).pads
        return np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=0)

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        pad = Pad(*_image(plan), params_of(plan, PadParams).pads, down, mx)
        blocks.append(pad)
        return pad

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        pads = params_of(plan, PadParams).pads
        return Entry(
            doc=HASKELL.pad_doc(_shapes(plan), *pads),
            body=(HASKELL.pad(*_image(plan), *pads),),
            uses=("pad",),
        )


class CropKind(_Moves):
    records = (Crop2D,)
    params_type: ClassVar[type[Params]] = CropParams

    def plan_params(self, layer: Layer) -> CropParams:
        assert isinstance(layer, Crop2D)
        return CropParams(crops=layer.crops)

    def move(self, own: Params, output_shape: tuple[int, ...], x: np.ndarray) -> np.ndarray:
        top, bottom, left, right = narrow(own, CropParams).crops
        h, w = x.shape[1], x.shape[2]
        return x[:, top : h - bottom, left : w - right]

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        crop = Crop(*_image(plan), params_of(plan, CropParams).crops, down, mx)
        blocks.append(crop)
        return crop

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        crops = params_of(plan, CropParams).crops
        return Entry(
            doc=HASKELL.crop_doc(_shapes(plan), *crops),
            body=(HASKELL.crop(*_image(plan), *crops),),
            notes=(HASKELL.crop_note(),),
            uses=("crop",),
        )


class UpsampleKind(_Moves):
    records = (Upsample2D,)
    params_type: ClassVar[type[Params]] = UpsampleParams

    def plan_params(self, layer: Layer) -> UpsampleParams:
        assert isinstance(layer, Upsample2D)
        return UpsampleParams(size=layer.size)

    def move(self, own: Params, output_shape: tuple[int, ...], x: np.ndarray) -> np.ndarray:
        sh, sw = narrow(own, UpsampleParams).size
        return np.repeat(np.repeat(x, sh, axis=1), sw, axis=2)

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        upsample = Upsample(_image(plan)[1], params_of(plan, UpsampleParams).size, down, mx)
        blocks.append(upsample)
        return upsample

    def storage(self, plan: LayerPlan) -> Storage:
        """One input row (block RAM), read only for the repeated rows of w > 1 pixels, and the
        output register."""
        bits, c, w = plan.in_fmt.hw_bits, plan.input_shape[-1], _image(plan)[1]
        sh = params_of(plan, UpsampleParams).size[0]
        return Storage(line_buffer_bits=w * c * bits if sh > 1 and w > 1 else 0, register_bits=c * bits)

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        w = _image(plan)[1]
        size = params_of(plan, UpsampleParams).size
        return Entry(
            doc=HASKELL.upsample_doc(_shapes(plan), *size),
            body=(HASKELL.upsample(w, *size),),
            notes=(HASKELL.upsample_note(w),),
            uses=("upsample",),
        )


def rebeat_groups(plan: LayerPlan) -> tuple[int, int]:
    """A reshape's (g_in, g_out): input beats collected and output beats scattered per group
    of lcm(C_in, C_out) values; (1, 1) is a relabelling (equal last axes)."""
    c_in, c_out = plan.input_shape[-1], plan.output_shape[-1]
    group = math.lcm(c_in, c_out)
    return group // c_in, group // c_out


class ReshapeKind(_Moves):
    records = (Reshape,)
    regroups = True

    def plan_params(self, layer: Layer) -> NoParams:
        assert isinstance(layer, Reshape)
        return NoParams()

    def move(self, own: Params, output_shape: tuple[int, ...], x: np.ndarray) -> np.ndarray:
        return x.reshape(len(x), *output_shape)  # row-major: the order beats carry the values in

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        g_in, g_out = rebeat_groups(plan)
        if g_out > 1:
            scatter = Scatter(g_out, down, mx)
            blocks.append(scatter)
            down = scatter
        if g_in > 1:
            collect = Collect(g_in, down, mx)
            blocks.append(collect)
            down = collect
        return down

    def storage(self, plan: LayerPlan) -> Storage:
        """The Collect shift register and the Scatter register of a beat-width conversion."""
        g_in, g_out = rebeat_groups(plan)
        group = g_in * plan.input_shape[-1] * plan.in_fmt.hw_bits
        return Storage(register_bits=(group if g_in > 1 else 0) + (group if g_out > 1 else 0))

    def entry(self, plan: LayerPlan, fn: str, stage: str | None = None) -> Entry:
        """A relabelling is a wire (`id`); otherwise Collect g_in beats, Scatter into g_out."""
        g_in, g_out = rebeat_groups(plan)
        c_in, c_out = plan.input_shape[-1], plan.output_shape[-1]
        source = plan.layer.source_class if isinstance(plan.layer, Reshape) else "Reshape"
        doc = HASKELL.reshape_doc(_shapes(plan), source)
        if (g_in, g_out) == (1, 1):
            return Entry(doc=doc, body=(HASKELL.relabel(),), notes=(HASKELL.relabel_note(c_in),))
        body = ((HASKELL.collect(g_in),) if g_in > 1 else ()) + ((HASKELL.scatter(g_out),) if g_out > 1 else ())
        uses = (("collect",) if g_in > 1 else ()) + (("scatter",) if g_out > 1 else ())
        return Entry(doc=doc, body=body, notes=(HASKELL.rebeat_note(c_in, c_out, g_in, g_out),), uses=uses)


KINDS = (ZeroPadKind(), CropKind(), UpsampleKind(), ReshapeKind())
