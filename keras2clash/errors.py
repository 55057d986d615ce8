"""One exception type for every mistake a user can make, and one line for what the operating
system or a parser reports.

The CLI turns a `K2CError` into one clear line on stderr and a non-zero exit code, with no
traceback; so it does an `OSError` (no space left, permission denied, an I/O error: the
environment, not a bug), with `os_error_text` naming the path. Anything else escaping is a
bug in keras2clash and keeps its traceback.
"""

from __future__ import annotations

import os
from typing import Any


class K2CError(Exception):
    """A user-facing error: bad model, bad option, bad data, missing tool."""

    exit_code: int = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


def os_error_text(exc: OSError) -> str:
    """An operating-system error as one line: the path(s) it names, then the errno's text,
    e.g. `/data/net/weights/dense_0.mem: No space left on device`."""
    reason = exc.strerror or (os.strerror(exc.errno) if exc.errno else "") or str(exc) or type(exc).__name__
    paths = [os.fsdecode(p) for p in (exc.filename, exc.filename2) if p is not None]
    return f"{' -> '.join(paths)}: {reason}" if paths else reason


def yaml_problem(exc: Any) -> str:
    """A PyYAML error as one phrase without the quoted source lines PyYAML adds: where (line
    and column, from 1) and what, e.g. `at line 4, column 10: expected ',' or '}', but got ':'
    (while parsing a flow mapping at line 3, column 12)`."""
    problem = getattr(exc, "problem", None)
    if not problem:
        return "(" + " ".join(str(exc).split()) + ")"
    text = f"{_where(getattr(exc, 'problem_mark', None))}: {problem}"
    context = getattr(exc, "context", None)
    if context:
        text += f" ({context}{_where(getattr(exc, 'context_mark', None))})"
    return text.strip()


def _where(mark: Any) -> str:
    return "" if mark is None else f" at line {mark.line + 1}, column {mark.column + 1}"
