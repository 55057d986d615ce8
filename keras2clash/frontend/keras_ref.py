"""The Keras rungs of the verification ladder: float outputs, and those outputs rounded.

"Keras outputs rounded to the format" is the thesis' "accuracy after rounding": the float
model's output scores quantized to the output format with the contract's rounding, then
argmax. It shows how much of any accuracy loss is only the output resolution.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from keras2clash.quant.formats import FixedFormat, quantize


def keras_outputs(model_path: Path, x: np.ndarray) -> np.ndarray:
    """Float outputs of the source model (batch inference, no training-mode layers)."""
    from keras2clash.frontend.convert import load_keras_model  # TensorFlow is imported only when needed

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
