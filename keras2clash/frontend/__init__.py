"""Frontend: a Keras model (file or object) in, the typed graph IR out.

`load.load_keras_model` reads a model file; `walk` lists its layer calls; `convert` turns
each into an IR record and runs the passes (`ir.passes`). `to_graph` is the entry point.
"""

from keras2clash.frontend.convert import parse, to_graph, to_ir
from keras2clash.frontend.load import load_keras_model

__all__ = ["load_keras_model", "parse", "to_graph", "to_ir"]
