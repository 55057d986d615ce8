"""Graph passes of the shape layers (run from `ir.passes.PASSES`).

`fold_reshapes`: a Reshape moves no value, it only regroups beats, so when the one layer
that reads it regroups them again anyway (a Flatten, which collects every beat of the
image, or another Reshape) it is dropped and that reader reads its input directly: a
Reshape -> Flatten becomes one Flatten (no Collect/Scatter in between), and two Reshapes
in a row become one (or none, when the second undoes the first). The golden model and the
hardware stay the same function of the input, since both orders are row-major.
"""

from __future__ import annotations

from dataclasses import replace

from keras2clash.ir.graph import Graph
from keras2clash.kinds.flatten import Flatten
from keras2clash.kinds.shapes import Reshape


def fold_reshapes(graph: Graph) -> Graph:
    for layer in graph.layers:
        if not isinstance(layer, Reshape):
            continue
        readers = graph.consumers(layer.name)
        target = readers[0] if len(readers) == 1 else None
        if not isinstance(target, (Reshape, Flatten)):
            continue
        folded = replace(target, input_shapes=layer.input_shapes, fused=(*layer.fused, layer.name, *target.fused))
        graph = graph.replaced(target, folded).without(layer)
        if isinstance(folded, Reshape) and folded.output_shape == folded.input_shape:
            graph = graph.without(graph[folded.name])  # the second reshape undid the first
        return fold_reshapes(graph)
    return graph
