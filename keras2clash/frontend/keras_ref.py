"""The Keras rungs of the verification ladder: float outputs, and those outputs rounded.

"Keras outputs rounded to the format" is the thesis' "accuracy after rounding": the float
model's output scores quantized to the output format with the contract's rounding, then
argmax. It shows how much of any accuracy loss is only the output resolution.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from keras2clash.frontend import walk
from keras2clash.frontend.convert import load_keras_model
from keras2clash.quant.formats import FixedFormat, quantize


def keras_outputs(model_path: Path, x: np.ndarray) -> np.ndarray:
    """Float outputs of the source model (batch inference, no training-mode layers)."""
    model = load_keras_model(model_path)
    return predict_float(model, x)


def predict_float(model, x: np.ndarray) -> np.ndarray:
    """`model.predict` on inputs in the IR's shape (a 1-D sequence is one row high there,
    `frontend.registry.image_shape`), reshaped to the model's own input shape; the outputs
    flattened per sample when they are not vectors."""
    shape = tuple(int(d) for d in model.inputs[0].shape[1:])
    x = np.asarray(x).reshape(len(x), *shape)
    out = np.asarray(model.predict(as_float32(x), verbose=0, batch_size=256), dtype=np.float64)
    return out.reshape(len(out), -1)


def keras_head_outputs(model_path: Path, x: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
    """Float outputs of a source model of several outputs or inputs (`x`: one array per
    input, in the model's order): one (N, n_out) array per output, in the model's order,
    each flattened per sample."""
    model = load_keras_model(model_path)
    arrays = [x] if isinstance(x, np.ndarray) else list(x)
    n = len(arrays[0])
    feed = [as_float32(np.asarray(a).reshape(n, *(int(d) for d in t.shape[1:]))) for a, t in zip(arrays, model.inputs)]
    outs = model.predict(feed if len(feed) > 1 else feed[0], verbose=0, batch_size=256)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    return [np.asarray(out, dtype=np.float64).reshape(n, -1) for out in outs]


def as_float32(x: np.ndarray) -> np.ndarray:
    """Inputs as Keras computes them: float32, where values beyond its range are +-inf."""
    with np.errstate(over="ignore"):
        return np.asarray(x).astype(np.float32)


def rounded_classes(outputs: np.ndarray, fmt: FixedFormat) -> np.ndarray:
    """Argmax of float outputs after rounding them to `fmt` (ties: lowest index). Scores
    that overflowed in Keras (+-inf) saturate; NaN scores count as the format's minimum."""
    outputs = np.where(np.isnan(outputs), -np.inf, outputs)
    with np.errstate(over="ignore"):
        return np.argmax(quantize(outputs, fmt), axis=1)


# --- every layer's float output (for `keras2clash.trace`) ----------------------------------


def keras_layer_outputs(
    model, x: np.ndarray | Sequence[np.ndarray], pre_activation: tuple[str, ...] = ()
) -> dict[str, np.ndarray]:
    """Every layer call's float output on `x` (a list of arrays in the model's order for a
    model of several inputs), keyed by layer name (the names the IR records carry), each
    flattened per sample; every model input under its InputLayer's name.

    The calls are replayed eagerly in the frontend's walk order (`frontend.walk`, nested
    models inlined), each on its producers' outputs with `training=False`: exactly the
    computation `model.predict` does, layer by layer, so inner layers of a nested model
    have outputs too (a `keras.Model` of intermediate outputs cannot reach those).
    `pre_activation` names layers whose output is also wanted before their own activation
    (a softmax left out of the hardware, `--softmax argmax`): under `name + PRE_ACTIVATION`.
    """
    import keras

    nodes = walk.layer_nodes(model)
    xs = list(x) if isinstance(x, (list, tuple)) else [x]
    n = len(xs[0])
    values = {
        name: keras.ops.convert_to_tensor(as_float32(np.asarray(a).reshape(n, *(int(d) for d in t.shape[1:]))))
        for name, t, a in zip(walk.input_names(model), model.inputs, xs)
    }
    for node in nodes:
        args = [values[name] for name in node.inputs]
        arg = args[0] if len(args) == 1 else args
        values[str(node.layer.name)] = node.layer(arg, training=False)
        if node.layer.name in pre_activation:
            values[str(node.layer.name) + PRE_ACTIVATION] = _without_activation(node.layer, arg)
    return {
        name: np.asarray(keras.ops.convert_to_numpy(v), dtype=np.float64).reshape(n, -1) for name, v in values.items()
    }


PRE_ACTIVATION = ":pre_activation"
"""Suffix of a layer's output before its own activation in `keras_layer_outputs`."""


def _without_activation(layer, arg):
    """The layer's call with its `activation` swapped for the identity (restored after)."""
    import keras

    old = layer.activation
    layer.activation = keras.activations.linear
    try:
        return layer(arg, training=False)
    finally:
        layer.activation = old
