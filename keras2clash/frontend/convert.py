"""A Keras model to the graph IR: each layer call through its converter (`frontend.registry`;
the converters are in their kinds' modules, `keras2clash.kinds`, and for the
quantization-aware layers in `frontend.hgq` and `frontend.qkeras`; one Keras layer may become
several records, the last one named after it), then the passes.

A converter does not look at its neighbours: removing Dropout, folding BatchNormalization
and padding, fusing activations and the whole-network checks are passes (`ir.passes`),
applied after conversion in a listed order.

Every unsupported layer or option raises one `K2CError` naming the layer and the reason.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from keras2clash.errors import K2CError
from keras2clash.frontend import walk
from keras2clash.frontend.load import load_keras_model
from keras2clash.ir import layers as ir
from keras2clash.ir.graph import Graph
from keras2clash.ir.passes import run_passes

if TYPE_CHECKING:
    import keras

# The converters register themselves on import (the kinds' with the kinds).
import keras2clash.kinds  # noqa: E402,F401
from keras2clash.frontend import hgq, hgq_attention, hgq_layers, layers, qkeras, qkeras_layers  # noqa: E402,F401
from keras2clash.frontend.images import same_pads  # noqa: E402,F401  (API)
from keras2clash.frontend.registry import (  # noqa: E402,F401  (API)
    SUPPORTED_ACTIVATIONS,
    ConversionState,
    _converter_for,
    image_shape,
    keras_output_shape,
    register_converter,
    supported_layers,
)

Shape = tuple[int, ...]


# --- the model as a graph -----------------------------------------------------------------


def _input_tensor_names(nodes: list[walk.KerasNode], keras_inputs: list[str]) -> list[str]:
    """The network inputs' names in the IR: `input` for a model of one input unless a layer
    already has that name; the InputLayers' own names for a model of several (its test data
    names each input after them)."""
    if len(keras_inputs) > 1:
        return list(keras_inputs)
    names = {str(node.layer.name) for node in nodes}
    name, k = "input", 0
    while name in names:
        name, k = f"input_{k}", k + 1
    return [name]


def raw_graph(model: keras.Model) -> Graph:
    """One record per Keras layer call, before any pass (Dropout, BatchNormalization,
    activation layers still separate)."""
    import keras

    if not isinstance(model, keras.Model):
        raise K2CError(f"expected a keras.Model, got {type(model).__name__}")
    walk.check_model_kind(model)
    keras_input_shapes = walk.input_shapes(model)
    nodes, keras_outputs = walk.walk_model(model)
    keras_inputs = walk.input_names(model)
    sources = _input_tensor_names(nodes, keras_inputs)
    renamed = dict(zip(keras_inputs, sources))
    shapes: dict[str, Shape] = {s: image_shape(k) for s, k in zip(sources, keras_input_shapes)}
    keras_shapes: dict[str, Shape] = dict(zip(sources, keras_input_shapes))
    records: list[ir.Layer] = []
    for node in nodes:
        inputs = [renamed.get(name, name) for name in node.inputs]
        state = ConversionState(
            shapes=[shapes[name] for name in inputs],
            inputs=inputs,
            keras_shapes=[keras_shapes[name] for name in inputs],
            options=node.options,
        )
        produced = _converter_for(node.layer)(node.layer, state)
        for record in produced if isinstance(produced, tuple) else (produced,):  # the last is the layer's output
            records.append(record)
            shapes[record.name] = keras_shapes[record.name] = record.output_shape
        # a layer Keras cannot tell the shape of (HGQ2's Quantizer) and that keeps its input's shape keeps its Keras shape too
        same = state.keras_shape if len(state.inputs) == 1 and record.output_shape == state.shape else None
        keras_shapes[record.name] = keras_output_shape(node.layer, state) or same or record.output_shape
    output = records[-1].name if records else sources[0]
    heads = tuple(keras_outputs) if len(keras_outputs) > 1 else ()
    several = tuple((s, shapes[s]) for s in sources) if len(sources) > 1 else ()
    return Graph(
        name=str(model.name),
        input_name=sources[0],
        input_shape=shapes[sources[0]],
        layers=tuple(records),
        output=output,
        heads=heads,
        sources=several,
    )


def to_graph(model: keras.Model) -> Graph:
    """A Keras model as the typed graph IR the later stages work on: converted, then every
    pass of `ir.passes.PASSES` applied in order."""
    return run_passes(raw_graph(model))


def to_ir(model: keras.Model) -> list[dict[str, Any]]:
    """The dictionary IR of a model (`to_graph(model).to_dict()`), for users and tools."""
    return to_graph(model).to_dict()


def parse(
    source: keras.Model | str | os.PathLike[str],
    weights: str | os.PathLike[str] | None = None,
) -> list[dict[str, Any]]:
    """`to_ir(load_keras_model(source, weights))`: a model file or model to the dictionary IR."""
    return to_ir(load_keras_model(source, weights))
