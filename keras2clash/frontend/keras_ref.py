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
    return np.asarray(model.predict(x.astype(np.float32), verbose=0, batch_size=256), dtype=np.float64)


def rounded_classes(outputs: np.ndarray, fmt: FixedFormat) -> np.ndarray:
    """Argmax of float outputs after rounding them to `fmt` (ties: lowest index)."""
    return np.argmax(quantize(outputs, fmt), axis=1)
