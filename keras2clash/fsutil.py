"""Outputs appear whole or not at all.

Every directory keras2clash writes is built beside its destination under a temporary name
and renamed into place at the end, so an error (or Ctrl-C) never leaves a half-written
project, and an existing non-empty directory is only replaced when the user says --force.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from keras2clash.errors import K2CError
from keras2clash.procs import deferred_interrupt


def check_writable_target(out: Path, force: bool) -> None:
    """Refuse early (before any work) to overwrite a non-empty directory or a file."""
    if out.exists() and not out.is_dir():
        raise K2CError(f"output path {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise K2CError(f"output directory {out} is not empty; use --force to replace it")


@contextmanager
def atomic_directory(out: Path, force: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory that becomes `out` when the block succeeds."""
    out = Path(out)
    check_writable_target(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old: Path | None = None
    with deferred_interrupt():  # a Ctrl-C here would leave neither the old nor the new
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / "replaced")
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def atomic_write_text(path: Path, text: str) -> None:
    """Write a file under a temporary name, then rename it into place."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
