"""One exception type for every mistake a user can make.

The CLI turns a `K2CError` into one clear line on stderr and a non-zero exit code, with no
traceback; anything else escaping is a bug in keras2clash and keeps its traceback.
"""

from __future__ import annotations


class K2CError(Exception):
    """A user-facing error: bad model, bad option, bad data, missing tool."""

    exit_code: int = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
