"""All 1,797 of sklearn's digits in the input layout of a digits example (train and test splits).

Why: a test set of 360 images counts accuracy in steps of 0.28 points, coarser than the
criterion it is held to (hardware accuracy within 0.25 pt of Keras float), so one
float near-tie decides it. What the fixed-point datapath costs is a property of the
datapath, not of generalisation: on the same inputs, Keras float and the golden model
(== the hardware) can be compared on every image there is, which resolves 0.056 pt.
Used by bench/accuracy.py and tests/test_accuracy.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from digits8 import digits_8x8
from digits14 import digits_14x14

LAYOUTS = {(14, 14, 1): digits_14x14, (8, 8, 1): digits_8x8, (64,): digits_8x8, (8, 8): digits_8x8}
"""An example's input shape -> the split its train.py makes (64: the 8x8 images flattened;
(8, 8): read row by row, a sequence of 8 steps)."""


def all_digits(example: Path) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of every digit, shaped as `example`'s test.npz, the test split last.

    Checks that the split rebuilt here is the example's own (its test.npz, bit for bit), so
    the images are the ones its model was trained and tested on."""
    test = np.load(example / "test.npz")
    shape = tuple(test["x"].shape[1:])
    if shape not in LAYOUTS:
        raise ValueError(f"{example.name}: input shape {shape} is not a digits layout ({sorted(LAYOUTS)})")
    x_train, x_test, y_train, y_test = LAYOUTS[shape]()
    x_train, x_test = (a.reshape((-1,) + shape).astype(np.float32) for a in (x_train, x_test))
    if not (np.array_equal(x_test, test["x"]) and np.array_equal(y_test, test["y"])):
        raise ValueError(f"{example.name}: its test.npz is not the digits split rebuilt here")
    return np.concatenate([x_train, x_test]), np.concatenate([y_train, y_test])
