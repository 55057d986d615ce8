#!/usr/bin/env bash
# The test suite (what CI runs): installs what it needs, then pytest. Extra arguments go to
# pytest, e.g. `./scripts/test.sh -m slow` for the long end-to-end checks.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
