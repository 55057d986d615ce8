"""mkdocs-macros module: the functions of docs/benchdocs.py, callable from any page whose front
matter has `render_macros: true` (`{{ fmax("iris", "ecp5-85k") }}`)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchdocs  # noqa: E402


def define_env(env) -> None:
    for function in benchdocs.MACROS:
        env.macro(function)
