"""A Keras model's layer graph: which layer reads which tensor, nested models inlined.

Keras 3 has no public graph API, so this reads `_keras_history` / `_inbound_nodes`
(stable since Keras 3.0), walking back from the model's output. Each layer call becomes
one `KerasNode`; its output tensor is named after the layer, the model input after its
InputLayer. A layer called twice in the model (a shared layer) and layers called with
training=True (not inference-time layers) are rejected here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from keras2clash.errors import K2CError
from keras2clash.ir.graph import Graph

if TYPE_CHECKING:
    import keras


@dataclass
class KerasNode:
    """One call of a Keras layer: the layer, the names of the tensors it reads, and the
    call's keyword arguments (MultiHeadAttention's `use_causal_mask`)."""

    layer: Any
    inputs: list[str]
    options: dict[str, Any] = field(default_factory=dict)


def check_model_kind(model: keras.Model) -> None:
    """Sequential and functional models expose their graph; subclassed ones only a `call`."""
    import keras
    from keras.src.models.functional import Functional

    if not isinstance(model, (keras.Sequential, Functional)):
        raise K2CError(
            f"model '{model.name}' is a subclassed {type(model).__name__}; only Sequential "
            "and functional models can be converted"
        )


def one_input(model: keras.Model) -> None:
    """A nested model reads one tensor; a nested model of several inputs is refused here."""
    if len(model.inputs) != 1:
        names = ", ".join(t.name for t in model.inputs)
        raise K2CError(
            f"nested model '{model.name}' has {len(model.inputs)} inputs ({names}); a nested model with one input "
            "is supported (the outermost model may have several)"
        )


def single_io(model: keras.Model) -> None:
    """A nested model is inlined between one tensor and the next: one input, one output."""
    one_input(model)
    if len(model.outputs) != 1:
        raise K2CError(
            f"nested model '{model.name}' has {len(model.outputs)} outputs; a nested model with one output is "
            "supported (the outermost model may have several)"
        )


def _model_inputs(model: keras.Model) -> list[Any]:
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        inputs = None
    if not inputs:
        raise K2CError(
            f"model '{model.name}' is not built (no input shape); start it with "
            "keras.Input(shape=...) or call model.build(...)"
        )
    return list(inputs)


def input_shapes(model: keras.Model) -> list[tuple[int, ...]]:
    """Each model input's shape without the batch axis, in the model's order; each must be
    fully known and float."""
    shapes = []
    for tensor in _model_inputs(model):
        dtype = str(tensor.dtype)
        if not dtype.startswith(("float", "bfloat")):
            raise K2CError(
                f"model '{model.name}' input '{tensor.name}' has dtype {dtype}; only float inputs are supported"
            )
        shape = tuple(tensor.shape[1:])
        if not shape or any(d is None for d in shape):
            raise K2CError(
                f"model '{model.name}' input '{tensor.name}' has shape {tuple(tensor.shape)}: "
                "every non-batch dimension must be known"
            )
        shapes.append(tuple(int(d) for d in shape))
    return shapes


def input_shape(model: keras.Model) -> tuple[int, ...]:
    """The model's (first) input shape without the batch axis (`input_shapes`)."""
    return input_shapes(model)[0]


def input_names(model: keras.Model) -> list[str]:
    """The InputLayers' names, in the model's order (`model.inputs`)."""
    return [str(tensor._keras_history[0].name) for tensor in _model_inputs(model)]


def input_name(model: keras.Model) -> str:
    return input_names(model)[0]


def layer_nodes(model: keras.Model) -> list[KerasNode]:
    """The model's layer calls in topological order, nested models inlined, InputLayers
    dropped; the inputs are read under `input_names(model)`."""
    return walk_model(model)[0]


def output_names(model: keras.Model) -> list[str]:
    """The tensors of the model's outputs, in Keras order (`model.outputs`)."""
    return walk_model(model)[1]


def walk_model(model: keras.Model) -> tuple[list[KerasNode], list[str]]:
    """The model's layer calls (`layer_nodes`) and its output tensors (`output_names`).

    Each output is one layer's output that no other layer reads, given once: the hardware
    sends it out of its own port, so a tensor that is both an output and read further, or an
    output that is the model's input, is refused with the layer named."""
    check_model_kind(model)
    sources = input_names(model)
    nodes: list[KerasNode] = []
    outputs = _walk(model, sources, nodes, {}, top=True)
    read = {name: str(node.layer.name) for node in nodes for name in node.inputs}
    for k, name in enumerate(outputs):
        if name in sources:
            raise K2CError(f"model '{model.name}' output {k} is its input '{name}'; an output must be a layer's")
        if outputs.count(name) > 1:
            raise K2CError(f"model '{model.name}' gives the output of layer '{name}' as several outputs; give it once")
        if name in read:
            raise K2CError(
                f"layer '{name}' is an output of model '{model.name}' and is also read by layer '{read[name]}'; "
                "an output must be a layer that no other layer reads"
            )
    for name in sources:
        if name not in read:
            raise K2CError(
                f"model '{model.name}' input '{name}' is read by no layer; every input must feed the network"
            )
    return nodes, outputs


def _walk(
    model: keras.Model, sources: list[str], nodes: list[KerasNode], seen: dict[int, int], top: bool = False
) -> list[str]:
    """Append `model`'s calls reading tensors `sources` (one per model input); return the
    names of its output tensors (several inputs and outputs only for the outermost model, `top`)."""
    import keras

    if isinstance(model, keras.Sequential):
        current = sources[0]
        for layer in model.layers:
            if isinstance(layer, keras.layers.InputLayer):
                continue
            current = _add(layer, [current], nodes, seen)
        return [current]
    check_model_kind(model)
    if not top:
        single_io(model)
    names: dict[int, str] = {id(t._keras_history[0]): name for t, name in zip(model.inputs, sources)}
    order: list[tuple[Any, Any]] = []  # (operation, node) in topological order
    visiting: set[tuple[int, int]] = set()

    def visit(tensor: Any) -> None:
        operation, node_index, _ = tensor._keras_history
        key = (id(operation), node_index)
        if id(operation) in names or key in visiting:
            return
        visiting.add(key)
        node = operation._inbound_nodes[node_index]
        for parent in node.input_tensors:
            visit(parent)
        order.append((operation, node))

    for tensor in model.outputs:
        visit(tensor)
    for operation, node in order:
        if isinstance(operation, keras.layers.InputLayer):
            raise K2CError(f"model '{model.name}' reads input '{operation.name}', which is not one of its inputs")
        if node.arguments.kwargs.get("training") is True:
            raise K2CError(
                f"layer '{operation.name}' ({type(operation).__name__}) is called with "
                "training=True, so it is not an inference-time layer"
            )
        inputs = [names[id(t._keras_history[0])] for t in node.input_tensors]
        if isinstance(operation, keras.Model):
            if len(inputs) != 1:
                raise K2CError(f"nested model '{operation.name}' takes {len(inputs)} inputs; one is supported")
            output = _walk(operation, inputs, nodes, seen)[0]
        else:
            output = _add(operation, inputs, nodes, seen, dict(node.arguments.kwargs))
        names[id(operation)] = output
    return [names[id(t._keras_history[0])] for t in model.outputs]


def _add(
    layer: Any, inputs: list[str], nodes: list[KerasNode], seen: dict[int, int], options: dict[str, Any] | None = None
) -> str:
    import keras

    if isinstance(layer, keras.Model):
        return _walk(layer, inputs[:1], nodes, seen)[0]
    if id(layer) in seen:
        raise K2CError(
            f"layer '{layer.name}' ({type(layer).__name__}) is used more than once (a shared "
            "layer); each layer call needs its own hardware, so give each call its own layer"
        )
    seen[id(layer)] = len(nodes)
    nodes.append(KerasNode(layer, inputs, options or {}))
    return str(layer.name)


AFFINE_CLASSES = ("Rescaling", "Normalization", "BatchNormalization")
"""The Keras classes of the per-channel affine layers the passes fold (`ir.passes`)."""


def folded_forward(model: keras.Model, graph: Graph) -> tuple[str, str, str] | None:
    """An affine layer of `model` that the passes folded into a record *after* it
    (`ir.passes.fold_affine_forward`), as (its class, its name, that record's name); None.
    A quantization-aware model quantizes the affine's output, at the next layer's input, and
    that layer's weights on a grid, neither of which the folded weights keep."""
    nodes = layer_nodes(model)
    order = {str(node.layer.name): k for k, node in enumerate(nodes)}
    classes = {str(node.layer.name): type(node.layer).__name__ for node in nodes}
    for record in graph.layers:
        for name in record.fused:
            if classes.get(name) in AFFINE_CLASSES and order[name] < order.get(record.name, -1):
                return classes[name], name, record.name
    return None


def refuse_folded_forward(model: keras.Model, graph: Graph, what: str, harm: str) -> None:
    """One error when the passes folded an affine layer into a layer after it
    (`folded_forward`) of a quantization-aware model: it is not `what` ("an HGQ2 layer"),
    and `harm` says what the fold would break."""
    folded = folded_forward(model, graph)
    if folded is not None:
        kind, name, target = folded
        raise K2CError(
            f"{kind} layer '{name}' is not {what}; folded into '{target}' after it, it would {harm}; "
            "apply it to the data before the model"
        )
