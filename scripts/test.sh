#!/usr/bin/env bash
# The test suite (what CI runs): installs what it needs, then pytest. Extra arguments go to
# pytest, e.g. `./scripts/test.sh -m slow` for the long end-to-end checks.
# The test files run in parallel (pytest-xdist), one file per worker at a time so that a
# file's module fixtures (a compiled project, a trained model) are built once: as many
# workers as cores, at most 4 (each holds TensorFlow); K2C_TEST_WORKERS=N sets N (0: serial).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
workers="${K2C_TEST_WORKERS:-auto}"
exec .venv/bin/python -m pytest -q -n "$workers" --maxprocesses 4 --dist loadfile "$@"
