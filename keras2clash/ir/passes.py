"""Graph passes: each a function `Graph -> Graph`, applied in the order of `PASSES`.

Like hls4ml's optimizer passes, each does one thing: the converters record what Keras
has, and these turn it into what the hardware builds.

1. `remove_identities`: Dropout and friends, and Flatten of a vector, are the identity at
   inference.
2. `fold_padding`: a ZeroPadding2D in front of a (depthwise) convolution, valid
   AveragePooling2D or another ZeroPadding2D becomes that layer's explicit pads (all compute
   with zeros there); elsewhere it stays a padding layer (K2C.Pad).
   `fold_reshapes` (`ir.shape_passes`): a Reshape read only by a Flatten or another Reshape
   is dropped into it.
3. `fold_batchnorm`: BatchNormalization after a linear Dense/Conv2D/DepthwiseConv2D (or a
   linear transposed convolution: into its phase convolution) folds into its weights and
   bias (per output channel: the kernels' last axis); anywhere else it stays (a per-channel
   multiply-add in hardware).
4. `fuse_activations`: an activation layer after a Dense, (depthwise) Conv2D, transposed
   convolution, BatchNormalization or merge with a linear activation (and no other reader)
   becomes that layer's activation; elsewhere it stays a standalone hardware stage; a
   linear one disappears anywhere.
5. `fold_affine_forward`: a per-channel affine layer of the preprocessing (Rescaling,
   Normalization, a BatchNormalization on the input) without an activation folds into the
   Dense or unpadded (depthwise) convolution that alone reads it (per input channel: the
   kernels' input axis), through a Flatten for a Dense; anywhere else it stays (a
   per-channel multiply-add).
6. `check_network`: every remaining record is one the hardware builds, shapes agree along
   every edge, names unique, at least one layer with weights.

A fold or fusion needs the layer it folds into to have no other reader: otherwise the
unfolded value would be needed too, and the error says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.ir import layers as ir
from keras2clash.ir.graph import Graph
from keras2clash.ir.shape_passes import fold_reshapes
from keras2clash.kinds import kind_of
from keras2clash.kinds.activation import Activation
from keras2clash.kinds.batchnorm import BatchNorm
from keras2clash.kinds.conv import Conv2D
from keras2clash.kinds.dense import Dense
from keras2clash.kinds.depthwise import DepthwiseConv2D
from keras2clash.kinds.merge import Merge
from keras2clash.kinds.pool import AvgPool2D
from keras2clash.kinds.rescaling import Rescaling
from keras2clash.kinds.shapes import ZeroPad2D
from keras2clash.kinds.transpose import Interleave2D
from keras2clash.quant import activations

Pass = Callable[[Graph], Graph]


def _describe(graph: Graph, tensor: str) -> str:
    if graph.is_input(tensor):
        return "the model input" if len(graph.inputs) == 1 else f"the model input '{tensor}'"
    layer = graph[tensor]
    if isinstance(layer, Merge):
        kind = layer.op.capitalize()
    else:
        kind = getattr(layer, "source_class", "") or layer.keras_class
    return f"{kind} layer '{layer.name}'"


def remove_identities(graph: Graph) -> Graph:
    for layer in graph.layers:
        if isinstance(layer, ir.Identity):
            return remove_identities(graph.without(layer))
    return graph


def fold_padding(graph: Graph) -> Graph:
    """ZeroPadding2D -> the pads of the Conv2D, valid AveragePooling2D or next ZeroPadding2D
    that alone reads it (each computes with zeros there). Anywhere else (several readers, a
    MaxPooling2D whose own padding is -infinity, a Cropping2D, ...) it stays a padding
    layer of its own (K2C.Pad); one with no padding at all is removed."""
    for layer in graph.layers:
        if not isinstance(layer, ZeroPad2D):
            continue
        if not any(layer.pads):
            return fold_padding(graph.without(layer))
        readers = graph.consumers(layer.name)
        target = readers[0] if len(readers) == 1 else None
        if not isinstance(target, (Conv2D, DepthwiseConv2D, AvgPool2D, ZeroPad2D)) or (
            isinstance(target, AvgPool2D) and any(target.pads)
        ):
            continue
        top, bottom, left, right = (a + b for a, b in zip(layer.pads, target.pads))
        pads = (top, bottom, left, right)
        folded = replace(
            target, pads=pads, input_shapes=layer.input_shapes, fused=(*target.fused, *layer.fused, layer.name)
        )
        if isinstance(folded, (Conv2D, DepthwiseConv2D)):
            folded = replace(folded, padding="same")
        elif isinstance(folded, AvgPool2D):
            folded = replace(folded, padding="valid")
        return fold_padding(graph.replaced(target, folded).without(layer))
    return graph


def fold_batchnorm(graph: Graph) -> Graph:
    """`w' = w * g`, `b' = (b - mean) * g + beta` on the previous layer's output channels,
    when that layer is a linear Dense/Conv2D/DepthwiseConv2D that only the BatchNormalization
    reads.
    Anywhere else (at the input, after an activation, a pool or a merge, after a layer with
    other readers) the BatchNormalization stays: the hardware builds it as a per-channel
    multiply-add (`batchnorm`)."""
    for layer in graph.layers:
        if not isinstance(layer, BatchNorm):
            continue
        _check_finite_batchnorm(layer)
        if not layer.folds:
            continue
        target = _batchnorm_target(graph, layer)
        if target is None:
            continue
        _, repeats, holder = _through_interleave(graph, layer.inputs[0])
        scale, mean, shift = (
            np.tile(np.asarray(v, dtype=np.float64), repeats) for v in (layer.scale, layer.mean, layer.shift)
        )
        with np.errstate(all="ignore"):
            kernel = target.kernel * scale
            bias = (target.bias - mean) * scale + shift
        if not (np.all(np.isfinite(kernel)) and np.all(np.isfinite(bias))):
            raise K2CError(
                f"BatchNormalization layer '{layer.name}' folds to NaN or infinite weights "
                "(negative moving variance or non-finite statistics)"
            )
        own = (layer.name,) if holder is None else ()
        graph = graph.replaced(
            target, replace(target, kernel=kernel, bias=bias, use_bias=True, fused=(*target.fused, *own))
        )
        if holder is not None:
            graph = graph.replaced(holder, replace(holder, fused=(*holder.fused, layer.name)))
        return fold_batchnorm(_absorb(graph, layer))
    return graph


def _through_interleave(graph: Graph, source: str) -> tuple[str, int, Interleave2D | None]:
    """A transposed convolution's interleave (`kinds.transpose`) only moves whole channels of
    its phase convolution (channel `(rh*sw + rw)*F + f` becomes channel `f` of an output pixel),
    so a per-channel step after it is the same step on the phase convolution, its constants
    tiled `sh*sw` times. Returns the tensor such a step reads through it, the tiling, and the
    interleave (which then lists the step as fused: its output is the step's Keras tensor);
    `source`, 1 and None when `source` is not an interleave that only the step reads."""
    layer = None if graph.is_input(source) else graph[source]
    if isinstance(layer, Interleave2D) and len(graph.consumers(source)) == 1:
        sh, sw = layer.phases
        return layer.inputs[0], sh * sw, layer
    return source, 1, None


def _batchnorm_target(graph: Graph, layer: BatchNorm) -> Dense | Conv2D | DepthwiseConv2D | None:
    """The linear Dense/Conv2D/DepthwiseConv2D a BatchNormalization folds into (per output
    channel: the kernels' last axis; through a transposed convolution's interleave,
    `_through_interleave`), or None: it stays."""
    source, _, _ = _through_interleave(graph, layer.inputs[0])
    target = None if graph.is_input(source) else graph[source]
    if not isinstance(target, (Dense, Conv2D, DepthwiseConv2D)) or target.activation != "linear":
        return None
    return target if len(graph.consumers(source)) == 1 else None


def _check_finite_batchnorm(layer: BatchNorm) -> None:
    """Statistics with a negative variance or non-finite values have no hardware value."""
    if not (np.all(np.isfinite(layer.scale)) and np.all(np.isfinite(layer.offset))):
        raise K2CError(
            f"BatchNormalization layer '{layer.name}' has NaN or infinite scale or offset "
            "(negative moving variance or non-finite statistics)"
        )


def fold_affine_forward(graph: Graph) -> Graph:
    """A per-channel affine layer `x * s + t` of the preprocessing (`_preprocessing`: a
    Rescaling or Normalization anywhere, a BatchNormalization `fold_batchnorm` left on the
    network input) folds into the layer after it: with `c` the input channel of a weight,
    `W'[.., c, o] = W[.., c, o] * s[c]` and `b'[o] = b[o] + sum W[.., c, o] * t[c]`, summed
    over the window too (`_folded_forward`), the same function in exact arithmetic, rounded
    once as that layer's weights.

    It folds when it has no activation (one fused into it acts between the two), its output
    is read by one layer only (the others need the mapped values), and that layer is

    - a Dense, directly or through a Flatten (or a Reshape to a vector) that only the Dense
      reads: flattening is row-major with the channels last, so value `i` of the vector
      is channel `i mod C`, and the Flatten then moves the unmapped values;
    - a Conv2D, Conv1D or DepthwiseConv2D/1D (a separable convolution's depthwise part)
      with no padding: every tap of every window reads a real input value. Padded zeros
      would stay raw zeros where Keras convolves mapped values (`t`, not 0), so a padded
      convolution (`same`, `causal`, a ZeroPadding folded into it) keeps the affine in
      front of it.

    Anywhere else (before a pooling, a merge, a padded convolution, a shape layer, with an
    activation, several readers) it stays its own stage, the batch normalization's block."""
    for layer in graph.layers:
        if not _preprocessing(graph, layer) or layer.activation != "linear":
            continue
        target = _affine_target(graph, layer)
        if target is None:
            continue
        home = kind_of(layer.type)
        assert home is not None
        scale, offset = home.constants(layer)
        kernel, bias = _folded_forward(target, scale, offset)
        if not (np.all(np.isfinite(kernel)) and np.all(np.isfinite(bias))):
            continue  # folded weights beyond float64 have no format; a stage saturates its constants to theirs
        folded = replace(
            target, kernel=kernel, bias=bias, use_bias=True, fused=(layer.name, *layer.fused, *target.fused)
        )
        return fold_affine_forward(graph.replaced(target, folded).without(layer))
    return graph


def _preprocessing(graph: Graph, layer: ir.Layer) -> bool:
    """A Rescaling or Normalization (preprocessing classes wherever they sit), or a
    BatchNormalization that reads the network input, directly or through such layers. A
    BatchNormalization inside the network (after an activation, a pooling, a merge) is a
    layer of the model the design keeps as its stage, as hls4ml builds it: its per-layer
    formats, its lanes knob and the trace name it."""
    if isinstance(layer, Rescaling):
        return True
    if not isinstance(layer, BatchNorm) or not layer.folds:
        return False
    (source,) = layer.inputs
    return graph.is_input(source) or _preprocessing(graph, graph[source])


def _affine_target(graph: Graph, layer: ir.Layer) -> Dense | Conv2D | DepthwiseConv2D | None:
    """The layer an affine layer folds into (`fold_affine_forward`), or None: it stays."""
    readers = graph.consumers(layer.name)
    reader = readers[0] if len(readers) == 1 and layer.name not in graph.outputs else None
    if reader is not None and len(reader.output_shape) == 1 and _regroups(reader):
        after = graph.consumers(reader.name)
        if reader.name in graph.outputs or len(after) != 1 or not isinstance(after[0], Dense):
            return None
        reader = after[0]
    if isinstance(reader, Dense):
        return reader
    if isinstance(reader, (Conv2D, DepthwiseConv2D)) and not any(reader.pads):
        return reader
    return None


def _regroups(layer: ir.Layer) -> bool:
    """Its output is its input's values in row-major order (`Kind.regroups`: Flatten, Reshape)."""
    home = kind_of(layer.type)
    return home is not None and home.regroups


def _folded_forward(
    target: Dense | Conv2D | DepthwiseConv2D, scale: np.ndarray, offset: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The kernel and bias of `target` reading `x * scale + offset` (per channel `c` of its
    input) from `x`. A Dense's input value `i` is channel `i mod C` (its input vector, or an
    image flattened channels last); a depthwise kernel's output channel `f` reads input
    channel `f // m` (`kernel` (kh, kw, C*m))."""
    kernel = np.asarray(target.kernel, dtype=np.float64)
    bias = np.asarray(target.bias, dtype=np.float64)
    with np.errstate(all="ignore"):
        if isinstance(target, Dense):
            s = np.tile(scale, kernel.shape[0] // len(scale))
            t = np.tile(offset, kernel.shape[0] // len(offset))
            return kernel * s[:, None], bias + t @ kernel
        if isinstance(target, DepthwiseConv2D):
            s = np.repeat(scale, target.depth_multiplier)
            t = np.repeat(offset, target.depth_multiplier)
            return kernel * s, bias + kernel.sum(axis=(0, 1)) * t
        return kernel * scale[:, None], bias + np.einsum("hwcf,c->f", kernel, offset)


def _absorb(graph: Graph, layer: ir.Layer) -> Graph:
    """Remove `layer` whose work its producer now does; the producer's record keeps the
    fused name (already added by the caller)."""
    return graph.without(graph[layer.name])


def _fusable(graph: Graph, layer: Activation) -> bool:
    """An activation fuses into the layer before it when that layer's kind takes one
    (`Kind.fuses_activation`: the engines, batch normalization, rescaling, the merges), it is
    linear and has no other reader. A PReLU with several slopes stays standalone: the engines
    apply one function to every neuron, the standalone stage one slope per channel. Through
    a transposed convolution's interleave it fuses into the phase convolution
    (`_through_interleave`)."""
    source, _, _ = _through_interleave(graph, layer.inputs[0])
    target = None if graph.is_input(source) else graph[source]
    home = None if target is None else kind_of(target.type)
    if target is None or home is None or not home.fuses_activation or target.activation != "linear":
        return False
    if home.feeds_back:  # its activation acts inside the recurrence, before the state is fed back
        return False
    if len(graph.consumers(source)) > 1:
        return False
    return len(set(activations.parse(layer.activation).slopes)) == 1


def fuse_activations(graph: Graph) -> Graph:
    """Linear activations disappear; others fuse into the layer before them (`_fusable`) or
    stay as standalone hardware stages (type "activation", a combinational stage per beat)."""
    standalone: set[str] = set()
    while True:
        layer = next(
            (other for other in graph.layers if isinstance(other, Activation) and other.name not in standalone), None
        )
        if layer is None:
            return graph
        (source,) = layer.inputs
        if layer.activation == "linear":
            graph = graph.with_layers(
                [
                    replace(other, fused=(*other.fused, layer.name)) if other.name == source else other
                    for other in graph.layers
                ]
            )
            graph = graph.without(graph[layer.name])
        elif not _fusable(graph, layer):
            standalone.add(layer.name)
        else:
            source, _, holder = _through_interleave(graph, source)
            target = graph[source]
            own = (layer.name,) if holder is None else ()
            fused = replace(target, activation=layer.activation, fused=(*target.fused, *own))  # type: ignore[call-arg]
            graph = graph.replaced(target, fused)
            if holder is not None:
                graph = graph.replaced(holder, replace(holder, fused=(*holder.fused, layer.name)))
            graph = _absorb(graph, layer)


def check_network(graph: Graph) -> Graph:
    """Whole-network rules (see the module docstring); returns the graph unchanged."""
    names = [layer.name for layer in graph.layers]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise K2CError(
            f"layer name(s) {', '.join(duplicates)} occur more than once (a shared layer or "
            "nested models with clashing names); every layer needs its own name"
        )
    for layer in graph.layers:
        if kind_of(layer.type) is None:
            raise K2CError(f"layer '{layer.name}' ({layer.keras_class}) has no hardware block")
        for tensor, shape in zip(layer.inputs, layer.input_shapes):
            if graph.shape_of(tensor) != shape:
                raise K2CError(
                    f"layer '{layer.name}' expects {shape} from '{tensor}', which gives {graph.shape_of(tensor)}"
                )
    if not any(kind_of(layer.type).has_params for layer in graph.layers):  # type: ignore[union-attr]
        raise K2CError(
            f"model '{graph.name}' has no layer with weights (Dense, a convolution, a normalization); "
            "at least one is needed"
        )
    return graph


PASSES: tuple[Pass, ...] = (
    remove_identities,
    fold_padding,
    fold_reshapes,
    fold_batchnorm,
    fuse_activations,
    fold_affine_forward,
    check_network,
)
"""The passes, in the order they run."""


def run_passes(graph: Graph, passes: Sequence[Pass] = PASSES) -> Graph:
    for step in passes:
        graph = step(graph)
    return graph
