"""Train the convolutional network of the 2021 thesis on sklearn's digits, resized to 14x14.

14x14x1 -> Conv2D 16 3x3 relu -> MaxPooling2D 2x2 -> Conv2D 16 3x3 relu -> MaxPooling2D 2x2
-> Flatten -> Dropout 0.5 -> Dense 10 sigmoid, the thesis' CNN (which used MNIST downscaled
to 14x14). The inputs are the 8x8 images of sklearn's bundled `load_digits()` (0..16),
scaled to [0, 1] by /16 and resized to 14x14 by bilinear interpolation
(`keras.ops.image.resize`, half-pixel centres, no antialiasing); stratified 80/20 split
(`random_state=2021`, the same split as digits_dense). The sigmoid output is trained
one-vs-rest on one-hot targets (binary cross-entropy), as the thesis did.

Run: `python examples/thesis_cnn/train.py [--epochs N] [--out DIR]`. Writes
`thesis_cnn.keras` and `test.npz` (x float32 (n, 14, 14, 1), y int64) to DIR (default:
beside this script) and prints the float test accuracy. Every seed is fixed and the saved
archive is normalised (`save_reproducibly`), so a re-run on CPU gives identical files.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import zipfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

SEED = 2021
SIZE = 14
HERE = Path(__file__).resolve().parent


def build_model() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input(shape=(SIZE, SIZE, 1), name="image"),
            keras.layers.Conv2D(16, 3, activation="relu", name="conv_1"),
            keras.layers.MaxPooling2D(2, name="pool_1"),
            keras.layers.Conv2D(16, 3, activation="relu", name="conv_2"),
            keras.layers.MaxPooling2D(2, name="pool_2"),
            keras.layers.Flatten(name="flatten"),
            keras.layers.Dropout(0.5, name="dropout"),
            keras.layers.Dense(10, activation="sigmoid", name="dense"),
        ],
        name="thesis_cnn",
    )


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
                    lambda m: f'"shared_object_id": {ids.setdefault(m.group(1), str(len(ids) + 1))}',
                    data.decode(),
                )
                data = text.encode()
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--out", type=Path, default=HERE, help="output directory (default: here)")
    args = parser.parse_args()

    keras.utils.set_random_seed(SEED)
    x_train, x_test, y_train, y_test = digits_14x14()
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(0.003),
        loss="binary_crossentropy",
        metrics=["categorical_accuracy"],
    )
    model.fit(x_train, keras.utils.to_categorical(y_train, 10), epochs=args.epochs, batch_size=32, verbose=0)
    predicted = np.argmax(model.predict(x_test, verbose=0), axis=1)
    accuracy = float(np.mean(predicted == y_test))
    args.out.mkdir(parents=True, exist_ok=True)
    save_reproducibly(model, args.out / "thesis_cnn.keras")
    np.savez(args.out / "test.npz", x=x_test.astype(np.float32), y=y_test.astype(np.int64))
    print(f"thesis_cnn: float test accuracy {accuracy:.4f} on {len(x_test)} samples")


if __name__ == "__main__":
    main()
