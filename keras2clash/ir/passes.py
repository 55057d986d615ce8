"""Graph passes: each a function `Graph -> Graph`, applied in the order of `PASSES`.

Like hls4ml's optimizer passes, each does one thing: the converters record what Keras
has, and these turn it into what the hardware builds.

1. `remove_identities`: Dropout and friends, and Flatten of a vector, are the identity at
   inference.
2. `fold_padding`: a ZeroPadding2D in front of a Conv2D or valid AveragePooling2D becomes
   that layer's explicit pads (both compute with zeros there).
3. `fold_batchnorm`: BatchNormalization after a linear Dense/Conv2D folds into its
   weights and bias.
4. `fuse_activations`: an activation layer after a Dense, Conv2D or merge with a linear
   activation (and no other reader) becomes that layer's activation; elsewhere it stays a
   standalone hardware stage; a linear one disappears anywhere.
5. `check_network`: every remaining record is one the hardware builds, shapes agree along
   every edge, names unique, at least one Dense layer.

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
from keras2clash.quant import activations

Pass = Callable[[Graph], Graph]


def _describe(graph: Graph, tensor: str) -> str:
    if tensor == graph.input_name:
        return "the model input"
    layer = graph[tensor]
    if isinstance(layer, ir.Merge):
        kind = layer.op.capitalize()
    elif isinstance(layer, (ir.Activation, ir.Identity)):
        kind = layer.source_class
    else:
        kind = layer.keras_class
    return f"{kind} layer '{layer.name}'"


def remove_identities(graph: Graph) -> Graph:
    for layer in graph.layers:
        if isinstance(layer, ir.Identity):
            return remove_identities(graph.without(layer))
    return graph


def fold_padding(graph: Graph) -> Graph:
    """ZeroPadding2D -> the pads of the Conv2D or AveragePooling2D that alone reads it."""
    for layer in graph.layers:
        if not isinstance(layer, ir.ZeroPad2D):
            continue
        readers = graph.consumers(layer.name)
        target = readers[0] if len(readers) == 1 else None
        if not isinstance(target, (ir.Conv2D, ir.AvgPool2D)) or (
                isinstance(target, ir.AvgPool2D) and any(target.pads)):
            what = "several layers" if len(readers) > 1 else (
                _describe(graph, readers[0].name) if readers else "the model output")
            raise K2CError(
                f"ZeroPadding2D layer '{layer.name}' feeds {what}; it is supported folded into "
                "the one Conv2D or valid AveragePooling2D that reads it"
            )
        pads = tuple(a + b for a, b in zip(layer.pads, target.pads))
        folded = replace(target, pads=pads, input_shapes=layer.input_shapes,
                         fused=(*target.fused, layer.name),
                         padding="same" if isinstance(target, ir.Conv2D) else target.padding)
        return fold_padding(graph.replaced(target, folded).without(layer))
    return graph


def _fold_target(graph: Graph, layer: ir.Layer, what: str, rule: str) -> ir.Layer:
    """The Dense/Conv2D (or merge, for activations) that `layer` folds into."""
    (source,) = layer.inputs
    kind = layer.keras_class if not isinstance(layer, ir.Activation) else layer.source_class
    allowed = (ir.Dense, ir.Conv2D) if what == "BatchNormalization" else (ir.Dense, ir.Conv2D, ir.Merge)
    target = None if source == graph.input_name else graph[source]
    if not isinstance(target, allowed):
        raise K2CError(f"{kind} layer '{layer.name}'{rule} follows {_describe(graph, source)}, not a "
                       + ("Dense or Conv2D layer; BatchNormalization is only supported folded into "
                          "the Dense/Conv2D layer right before it" if what == "BatchNormalization" else
                          "Dense or Conv2D layer (nor a merge layer); activations are only supported "
                          "fused into the Dense/Conv2D/merge layer before them"))
    if len(graph.consumers(source)) > 1:
        raise K2CError(f"{kind} layer '{layer.name}'{rule} follows {_describe(graph, source)}, whose "
                       "output is also read by other layers; it can only be folded into a layer "
                       "that it alone reads")
    return target


def fold_batchnorm(graph: Graph) -> Graph:
    """`w' = w * g`, `b' = (b - mean) * g + beta` on the previous layer's output channels."""
    for layer in graph.layers:
        if not isinstance(layer, ir.BatchNorm):
            continue
        (source,) = layer.inputs
        before = None if source == graph.input_name else graph[source]
        if isinstance(before, ir.Activation) and before.inputs[0] != graph.input_name and isinstance(
                graph[before.inputs[0]], (ir.Dense, ir.Conv2D)) and before.activation != "linear":
            raise K2CError(
                f"BatchNormalization layer '{layer.name}' follows {_describe(graph, before.inputs[0])}, "
                f"which applies '{before.activation}' first; it can only be folded into a "
                "layer with a linear activation (put the activation after the BatchNormalization)"
            )
        target = _fold_target(graph, layer, "BatchNormalization", "")
        assert isinstance(target, (ir.Dense, ir.Conv2D))
        if target.activation != "linear":
            raise K2CError(
                f"BatchNormalization layer '{layer.name}' follows {_describe(graph, target.name)}, "
                f"which applies '{target.activation}' first; it can only be folded into a "
                "layer with a linear activation (put the activation after the BatchNormalization)"
            )
        with np.errstate(all="ignore"):
            kernel = target.kernel * layer.scale
            bias = (target.bias - layer.mean) * layer.scale + layer.shift
        if not (np.all(np.isfinite(kernel)) and np.all(np.isfinite(bias))):
            raise K2CError(
                f"BatchNormalization layer '{layer.name}' folds to NaN or infinite weights "
                "(negative moving variance or non-finite statistics)"
            )
        folded = replace(target, kernel=kernel, bias=bias, use_bias=True, fused=(*target.fused, layer.name))
        return fold_batchnorm(_absorb(graph.replaced(target, folded), layer))
    return graph


def _absorb(graph: Graph, layer: ir.Layer) -> Graph:
    """Remove `layer` whose work its producer now does; the producer's record keeps the
    fused name (already added by the caller)."""
    return graph.without(graph[layer.name])


def _fusable(graph: Graph, layer: ir.Activation) -> bool:
    """An activation fuses into the Dense/Conv2D/merge before it when that layer is linear
    and has no other reader. A PReLU with several slopes stays standalone: the engines apply
    one function to every neuron, the standalone stage one slope per channel."""
    (source,) = layer.inputs
    target = None if source == graph.input_name else graph[source]
    if not isinstance(target, (ir.Dense, ir.Conv2D, ir.Merge)) or target.activation != "linear":
        return False
    if len(graph.consumers(source)) > 1:
        return False
    return len(set(activations.parse(layer.activation).slopes)) == 1


def fuse_activations(graph: Graph) -> Graph:
    """Linear activations disappear; others fuse into the layer before them (`_fusable`) or
    stay as standalone hardware stages (type "activation", a combinational stage per beat)."""
    standalone: set[str] = set()
    while True:
        layer = next((other for other in graph.layers
                      if isinstance(other, ir.Activation) and other.name not in standalone), None)
        if layer is None:
            return graph
        (source,) = layer.inputs
        if layer.activation == "linear":
            graph = graph.with_layers([
                replace(other, fused=(*other.fused, layer.name)) if other.name == source else other
                for other in graph.layers])
            graph = graph.without(graph[layer.name])
        elif not _fusable(graph, layer):
            standalone.add(layer.name)
        else:
            target = graph[source]
            fused = replace(target, activation=layer.activation, fused=(*target.fused, layer.name))
            graph = _absorb(graph.replaced(target, fused), layer)


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
        if layer.type not in ir.HARDWARE_TYPES:
            raise K2CError(f"layer '{layer.name}' ({layer.keras_class}) has no hardware block")
        for tensor, shape in zip(layer.inputs, layer.input_shapes):
            if graph.shape_of(tensor) != shape:
                raise K2CError(f"layer '{layer.name}' expects {shape} from '{tensor}', which gives "
                               f"{graph.shape_of(tensor)}")
    if not any(isinstance(layer, ir.Dense) for layer in graph.layers):
        raise K2CError(f"model '{graph.name}' has no Dense layer; at least one is needed")
    if len(graph.output_shape) != 1:
        raise K2CError(f"model '{graph.name}' outputs shape {graph.output_shape}; a vector is needed "
                       "(end with Flatten and Dense)")
    return graph


PASSES: tuple[Pass, ...] = (remove_identities, fold_padding, fold_batchnorm, fuse_activations, check_network)
"""The passes, in the order they run."""


def run_passes(graph: Graph, passes: Sequence[Pass] = PASSES) -> Graph:
    for step in passes:
        graph = step(graph)
    return graph
