"""The network as a graph: typed layer records joined by named tensors.

A `Graph` has one input (a named tensor with a shape) or several (`sources`, in the model's
order; `input_name`/`input_shape` are the first's), its layers in a topological order
(every layer after its producers), and one or several outputs (the names of the layers that
produce them, in the model's order; `output` is the one of a single-output graph). A chain is the simple case; a fork is a tensor several layers read, a merge a layer
that reads several tensors.

`to_dict()` is the design card's dictionary IR (a list of layer dicts with `type`,
`name`, `inputs`, shapes, activation and weights); `Graph.from_dict` reads it back, so
users can build or edit networks as plain data.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TypeAlias

from keras2clash.errors import K2CError
from keras2clash.ir.layers import IRRow, IRValue, Layer, Shape, record_from_dict

DictIR: TypeAlias = Sequence[IRRow]
"""The dictionary IR: one row per layer, in topological order (`Graph.to_dict`)."""


@dataclass(frozen=True)
class Graph:
    """A network of layer records with one input or several (`inputs`) and one output
    (`output`) or several (`outputs`)."""

    name: str
    input_name: str
    input_shape: Shape
    layers: tuple[Layer, ...]
    output: str  # the last of `outputs`
    heads: tuple[str, ...] = ()  # every output in the model's order when there are several
    sources: tuple[tuple[str, Shape], ...] = ()  # every input (name, shape) in the model's order when there are several

    @property
    def inputs(self) -> tuple[tuple[str, Shape], ...]:
        """The network's inputs as (tensor name, shape), in the model's order."""
        return self.sources or ((self.input_name, self.input_shape),)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.inputs)

    def is_input(self, tensor: str) -> bool:
        """Whether `tensor` is one of the network's inputs (not a layer's output)."""
        return tensor in self.input_names

    @property
    def outputs(self) -> tuple[str, ...]:
        """The layers whose outputs are the network's outputs, in the model's order."""
        return self.heads or (self.output,)

    def __iter__(self) -> Iterator[Layer]:
        return iter(self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, name: str) -> Layer:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)

    def by_name(self) -> dict[str, Layer]:
        return {layer.name: layer for layer in self.layers}

    def consumers(self, tensor: str) -> list[Layer]:
        """The layers that read `tensor` (a layer name or the input), once per layer."""
        return [layer for layer in self.layers if tensor in layer.inputs]

    def shape_of(self, tensor: str) -> Shape:
        return dict(self.inputs)[tensor] if self.is_input(tensor) else self[tensor].output_shape

    @property
    def output_shape(self) -> Shape:
        return self.shape_of(self.output)

    def with_layers(self, layers: Sequence[Layer], output: str | None = None) -> Graph:
        return replace(self, layers=tuple(layers), output=output or self.output)

    def without(self, layer: Layer) -> Graph:
        """Remove a one-input layer, its consumers reading its input instead (an output it
        was becomes its input's)."""
        (source,) = layer.inputs
        rewired = [
            replace(other, inputs=tuple(source if t == layer.name else t for t in other.inputs))
            for other in self.layers
            if other is not layer
        ]
        heads = tuple(source if t == layer.name else t for t in self.heads)
        graph = replace(self.with_layers(rewired, source if self.output == layer.name else self.output), heads=heads)
        return graph

    def replaced(self, old: Layer, new: Layer) -> Graph:
        return self.with_layers([new if layer is old else layer for layer in self.layers])

    def to_dict(self) -> list[dict[str, IRValue]]:
        """The dictionary IR: one dict per layer, in topological order, weights included."""
        rows = []
        for layer in self.layers:
            row: dict[str, IRValue] = {
                "type": layer.type,
                "name": layer.name,
                "inputs": list(layer.inputs),
                "input_shape": layer.input_shape,
                "input_shapes": list(layer.input_shapes),
                "output_shape": layer.output_shape,
                "activation": layer.activation,
                "fused": list(layer.fused),
            }
            row["use_bias"] = False
            row.update({k: v for k, v in layer.attributes().items() if k != "activation"})
            row["weights"] = layer.weights()
            rows.append(row)
        return rows

    @staticmethod
    def from_dict(rows: DictIR, name: str = "net", input_name: str = "input") -> Graph:
        """Read the dictionary IR. Rows without `inputs` form a chain (the round-1 form). The
        tensors the rows read that no row produces are the inputs: several of them make a
        graph of several inputs, in the order they are first read."""
        if not rows:
            raise K2CError("the IR has no layers")
        layers: list[Layer] = []
        previous = input_name
        for row in rows:
            row = dict(row)
            if not row.get("inputs"):
                row["inputs"] = [previous]
            layers.append(record_from_dict(row))
            previous = layers[-1].name
        first = layers[0]
        produced = {layer.name for layer in layers}
        sources: dict[str, Shape] = {}  # the tensors read that no layer produces: the inputs, in first-read order
        for layer in layers:
            for tensor, shape in zip(layer.inputs, layer.input_shapes):
                if tensor not in produced:
                    sources.setdefault(tensor, tuple(shape))
        if len(sources) > 1:
            (input_name, input_shape), *_ = sources.items()
        else:
            input_shape = tuple(first.input_shape)
        return Graph(
            name=name,
            input_name=input_name,
            input_shape=input_shape,
            layers=tuple(layers),
            output=previous,
            sources=tuple(sources.items()) if len(sources) > 1 else (),
        )


GraphLike: TypeAlias = Graph | DictIR
"""What the stages after the frontend take: a Graph, or the dictionary IR of one."""


def as_graph(ir: GraphLike) -> Graph:
    """A Graph as it is; a dictionary IR (list of dicts) read into one."""
    return ir if isinstance(ir, Graph) else Graph.from_dict(ir)
