"""pytest set-up: TensorFlow kept quiet, the xdist grouping, and the small models several files share."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


# Files whose tests share nothing (no module fixtures) and each take minutes: under
# pytest-xdist (scripts/test.sh, --dist loadgroup) their tests spread over the workers one by
# one; every other file stays on one worker, so that its module fixtures are built once.
SPREAD_FILES = {"tests/test_examples.py", "tests/test_docs.py"}


def pytest_collection_modifyitems(config, items) -> None:
    import pytest

    for item in items:
        path = item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(item.nodeid if path in SPREAD_FILES else path))


# Small models and data shared by the CLI, output-policy and project tests (module scope: built
# once per test file).


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """4 inputs, Dense 3 relu, Dense 2 sigmoid, random weights."""
    from helpers import random_dense_model

    path = tmp_path_factory.mktemp("m") / "tiny.keras"
    random_dense_model([(3, "relu"), (2, "sigmoid")], n_in=4, seed=2).save(path)
    return path


@pytest.fixture(scope="module")
def saturating_model(tmp_path_factory) -> Path:
    """4 inputs, weights up to about 3 in magnitude (so narrow-integer formats saturate)."""
    from helpers import random_dense_model

    path = tmp_path_factory.mktemp("m") / "tiny.keras"
    random_dense_model([(3, "relu"), (2, "linear")], n_in=4, seed=5, scale=1.5).save(path)
    return path


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> Path:
    """Six samples for the 4-input models, labels 0 or 1."""
    import numpy as np

    rng = np.random.default_rng(3)
    path = tmp_path_factory.mktemp("d") / "tiny.npz"
    np.savez(path, x=rng.normal(0, 1, (6, 4)).astype("float32"), y=rng.integers(0, 2, 6))
    return path
