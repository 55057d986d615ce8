"""Train a one-block transformer encoder on synthetic jets: their constituents as tokens.

8 tokens x 3 -> Dense 16 (per token) -> MultiHeadAttention (2 heads of 8) + residual ->
LayerNormalization -> Dense 16 relu -> Dense 16 (per token) + residual -> LayerNormalization
-> GlobalAveragePooling1D -> Dense 4 softmax.

A jet's 8 hardest constituents, each (pt fraction, eta and phi from the jet axis), ordered by
pt; its class is how many prongs the constituents come from (one, two or three narrow
clusters) or none (a diffuse spray). Whether two constituents belong to one prong is a
relation between tokens: what attention sees. Generated with a fixed seed, no download.

Run: `python examples/jet_transformer/train.py [--epochs N] [--out DIR]`. Writes
`jet_transformer.keras` and `test.npz` (x float32 (n, 8, 3), y int64) to DIR (default:
beside this script) and prints the float test accuracy. A re-run on CPU gives identical files.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # examples/: the shared digits8 module
from digits8 import train_example  # noqa: E402

TOKENS = 8
FEATURES = 3
CLASSES = 4
EMBED = 16
SAMPLES = 5160
TEST = 360
SEED = 7


def jets(n: int = SAMPLES, seed: int = SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, x_test, y_train, y_test): x (n, 8, 3) of (pt fraction, eta, phi) per
    constituent, hardest first; y the number of prongs minus one, or 3 for a diffuse spray.
    The last `TEST` jets are the test set; classes balanced."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % CLASSES
    rng.shuffle(y)
    x = np.zeros((n, TOKENS, FEATURES))
    for k, label in enumerate(y):
        if label < 3:  # 1 to 3 prongs: narrow clusters around their axes
            prongs = label + 1
            axes = rng.uniform(-0.8, 0.8, (prongs, 2))
            which = np.concatenate([np.arange(prongs), rng.integers(0, prongs, TOKENS - prongs)])
            position = axes[which] + rng.normal(0, 0.08, (TOKENS, 2))
        else:
            position = rng.uniform(-1, 1, (TOKENS, 2))
        pt = np.sort(rng.dirichlet(np.full(TOKENS, 0.8)))[::-1]
        axis = (pt[:, None] * position).sum(axis=0)  # the pt-weighted jet axis
        x[k, :, 0] = pt
        x[k, :, 1:] = position - axis
    split = n - TEST
    return x[:split], x[split:], y[:split], y[split:]


def build_model() -> keras.Model:
    layers = keras.layers
    tokens = keras.Input(shape=(TOKENS, FEATURES), name="constituents")
    h = layers.Dense(EMBED, name="embed")(tokens)
    a = layers.MultiHeadAttention(num_heads=2, key_dim=8, name="attention")(h, h)
    h = layers.LayerNormalization(name="norm_1")(layers.Add(name="residual_1")([h, a]))
    f = layers.Dense(EMBED, activation="relu", name="ffn_1")(h)
    f = layers.Dense(EMBED, name="ffn_2")(f)
    h = layers.LayerNormalization(name="norm_2")(layers.Add(name="residual_2")([h, f]))
    pooled = layers.GlobalAveragePooling1D(name="pool")(h)
    out = layers.Dense(CLASSES, activation="softmax", name="dense")(pooled)
    return keras.Model(tokens, out, name="jet_transformer")


if __name__ == "__main__":
    train_example("jet_transformer", build_model, HERE, __doc__, data=jets, epochs=60, fixed_point_check=False)
