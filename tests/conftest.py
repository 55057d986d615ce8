"""pytest set-up: keep TensorFlow quiet."""

from __future__ import annotations

import os

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
