#!/usr/bin/env bash
# The test suite (what CI runs): installs what it needs, then pytest. Extra arguments go to
# pytest, e.g. `./scripts/test.sh -m slow` for the long end-to-end checks.
# The test files run in parallel (pytest-xdist), a file on one worker so that its module
# fixtures (a compiled project, a trained model) are built once (tests/conftest.py groups
# them; the long independent whole-test-set checks spread one by one): as many workers as
# cores, at most 4 (each holds TensorFlow); K2C_TEST_WORKERS=N sets N (0: serial). The 25
# slowest tests are listed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
workers="${K2C_TEST_WORKERS:-auto}"
exec .venv/bin/python -m pytest -q -n "$workers" --maxprocesses 4 --dist loadgroup --durations 25 "$@"
