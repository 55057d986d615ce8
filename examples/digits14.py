"""Shared by the CNN examples: sklearn's digits at 14x14, and a reproducible `.keras` save.

`digits_14x14` is the data of the thesis CNN (the thesis used MNIST downscaled to 14x14):
sklearn's bundled 8x8 digits, /16, bilinear resize, stratified 80/20 split with the same
seed as digits_dense. `save_reproducibly` makes a saved model a function of its weights.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import keras
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

SEED = 2021
SIZE = 14


def digits_14x14() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """sklearn digits, /16 to [0, 1], bilinear 8x8 -> 14x14, stratified 80/20 split."""
    data = load_digits()
    images = (data.images / 16.0).astype(np.float32)[..., None]  # (n, 8, 8, 1)
    resized = keras.ops.image.resize(images, (SIZE, SIZE), interpolation="bilinear")
    x = np.clip(keras.ops.convert_to_numpy(resized), 0.0, 1.0).astype(np.float32)
    return train_test_split(x, data.target, test_size=0.2, stratify=data.target, random_state=SEED)


def save_reproducibly(model: keras.Model, path: Path) -> None:
    """`model.save(path)`, then make the archive a function of the weights alone.

    Keras writes the save date into metadata.json, Python object ids as
    `shared_object_id`s into config.json, and the time into the zip entries; these are
    replaced by constants (the ids renumbered in order of appearance, which keeps their
    meaning), so identical weights give identical bytes. The HDF5 weights are already
    deterministic.
    """
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        items = [(name, archive.read(name)) for name in archive.namelist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in items:
            if name == "metadata.json":
                metadata = json.loads(data)
                metadata["date_saved"] = "reproducible"
                data = json.dumps(metadata).encode()
            elif name == "config.json":
                ids: dict[str, str] = {}
                text = re.sub(
                    r'"shared_object_id": (\d+)',
                    lambda m: f'"shared_object_id": {ids.setdefault(m.group(1), str(len(ids) + 1))}',  # noqa: B023
                    data.decode(),
                )
                data = text.encode()
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
