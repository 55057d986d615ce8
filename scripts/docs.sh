#!/usr/bin/env bash
# The documentation site (MkDocs + Material; mkdocs.yml).
#   ./scripts/docs.sh           build it into site/ (strict: a broken link or a missing page fails)
#   ./scripts/docs.sh serve     a live preview on http://127.0.0.1:8000 (extra arguments go to mkdocs serve)
#   ./scripts/docs.sh readme    rewrite README.md's headline table from bench/*.json
#   ./scripts/docs.sh check     fail if README.md's headline table differs from bench/*.json
# Installs what it needs first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export DISABLE_MKDOCS_2_WARNING=true NO_MKDOCS_2_WARNING=1
command="${1:-build}"
[ $# -gt 0 ] && shift
case "$command" in
  build) exec .venv/bin/mkdocs build --strict --site-dir site "$@" ;;
  serve) exec .venv/bin/mkdocs serve "$@" ;;
  readme) exec .venv/bin/python docs/benchdocs.py readme "$@" ;;
  check) exec .venv/bin/python docs/benchdocs.py readme --check "$@" ;;
  *) echo "usage: $0 [build|serve|readme|check]" >&2; exit 2 ;;
esac
