"""The network a training core trains: a chain of Dense layers read from a Keras model.

The model's own weights are the initial weights (a freshly built model holds Keras' seeded
initialisation: `keras.utils.set_random_seed` before building it makes them reproducible).
Inputs of any shape are flattened, as a `Flatten` before the first Dense would.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from keras2clash.errors import K2CError
from keras2clash.ir.graph import Graph
from keras2clash.kinds.dense import Dense
from keras2clash.kinds.flatten import Flatten
from keras2clash.kinds.shapes import Reshape

ACTIVATIONS = ("relu", "linear", "tanh", "sigmoid")
"""The hidden layers' activations training takes (their derivatives are exact)."""
LOSSES = ("categorical_crossentropy", "mse")
"""Softmax output with cross-entropy, or mean squared error on a relu/linear/tanh/sigmoid output."""
FLATTENING = (Flatten, Reshape)
"""Records that only reshape the input before the first Dense (training sees flat vectors)."""


@dataclass(frozen=True)
class TrainLayer:
    name: str
    kernel: np.ndarray  # (n_in, n_out) float64
    bias: np.ndarray  # (n_out,) float64
    activation: str

    @property
    def n_in(self) -> int:
        return int(self.kernel.shape[0])

    @property
    def n_out(self) -> int:
        return int(self.kernel.shape[1])


@dataclass(frozen=True)
class TrainNet:
    name: str
    input_shape: tuple[int, ...]
    layers: tuple[TrainLayer, ...]
    loss: str

    @property
    def sizes(self) -> list[int]:
        return [self.layers[0].n_in, *(layer.n_out for layer in self.layers)]


def train_net(graph: Graph, loss: str | None = None) -> TrainNet:
    """The Dense chain of `graph`, or one error naming the first layer training cannot take.
    `loss`: cross-entropy for a softmax output, mean squared error otherwise (default)."""
    layers: list[TrainLayer] = []
    for record in graph:
        if isinstance(record, FLATTENING) and not layers:
            continue
        if not isinstance(record, Dense):
            raise K2CError(
                f"layer '{record.name}' ({record.keras_class}): training takes a chain of Dense layers "
                f"(an input of any shape, flattened), not {record.keras_class}"
            )
        act = record.activation
        kernel = np.asarray(record.kernel, dtype=np.float64)
        bias = np.asarray(record.bias, dtype=np.float64)
        if not record.use_bias:
            raise K2CError(f"Dense layer '{record.name}' has no bias: training takes Dense layers with a bias")
        layers.append(TrainLayer(record.name, kernel.reshape(-1, kernel.shape[-1]), bias, act))
    if not layers:
        raise K2CError(f"model '{graph.name}' has no Dense layer to train")
    if len(graph.outputs) != 1 or graph.outputs[0] != layers[-1].name:
        raise K2CError(f"model '{graph.name}': training takes one output, the last Dense layer's")
    for layer in layers[:-1]:
        if layer.activation not in ACTIVATIONS:
            raise K2CError(
                f"Dense layer '{layer.name}' activation {layer.activation}: training takes {', '.join(ACTIVATIONS)}"
            )
    last = layers[-1]
    chosen = loss or ("categorical_crossentropy" if last.activation == "softmax" else "mse")
    if chosen not in LOSSES:
        raise K2CError(f"loss {chosen!r}: training takes {' or '.join(LOSSES)}")
    if chosen == "categorical_crossentropy" and last.activation != "softmax":
        raise K2CError(f"loss categorical_crossentropy needs a softmax output; '{last.name}' has {last.activation}")
    if chosen == "mse" and last.activation not in ACTIVATIONS:
        raise K2CError(f"output layer '{last.name}' activation {last.activation}: with mse, one of {ACTIVATIONS}")
    shape = tuple(int(n) for n in graph.inputs[0][1])
    if int(np.prod(shape)) != layers[0].n_in:
        raise K2CError(f"model '{graph.name}': input {shape} does not flatten to the first Dense's {layers[0].n_in}")
    return TrainNet(graph.name, shape, tuple(layers), chosen)
