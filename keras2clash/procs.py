"""Child processes (finding a tool, running it) and Ctrl-C.

Every tool keras2clash starts (clash, ghc, the simulation executable, verilator and the
make/g++ it drives, iverilog, vvp, ghdl, yosys) runs in its own process group. A Ctrl-C on
the terminal therefore reaches only keras2clash, which stops the whole group (the tool and
whatever it started) before it cleans up and exits with code 130. Without the group, a
tool that caught the signal itself could fail with an unrelated error first, and its own
children could outlive it.

`interrupt_handling()` is what the command line wraps its commands in: the first SIGINT
(or SIGTERM) raises `KeyboardInterrupt`, even when the shell started keras2clash with
SIGINT ignored (a background job of a script); later ones are ignored, so the clean-up
(stopping children, removing temporary folders) is not cut short. The command then exits
with 130 (SIGTERM: 143). `deferred_interrupt()`
holds a signal back over a few statements that must not be split (renaming a finished
output into place).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

INTERRUPT_EXIT_CODE = 130
"""The shell's convention for a command stopped by SIGINT (128 + 2)."""

KILL_GRACE_SECONDS = 2.0
"""How long a stopped tool gets between SIGTERM and SIGKILL."""

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


# --- child processes ----------------------------------------------------------------------


def find_executable(name: str) -> str | None:
    """`name` on PATH, or beside the running Python (the venv's bin/ when keras2clash runs
    from a venv that is not activated: where pip put the yowasp tools)."""
    found = shutil.which(name)
    if found:
        return found
    local = Path(sys.executable).parent / name
    return str(local) if local.is_file() and os.access(local, os.X_OK) else None


def _stop_group(proc: subprocess.Popen) -> None:
    """Stop the process group led by `proc`: SIGTERM, a short grace, then SIGKILL for
    whatever is left of the group (the leader, or tools it started that outlived it)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=KILL_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


@contextmanager
def child(cmd: Sequence[str], **popen: Any) -> Iterator[subprocess.Popen]:
    """`subprocess.Popen` in a new session (so a new process group); if the block is left
    by an exception (Ctrl-C included), the whole group is stopped.

    stdin defaults to /dev/null: a process outside the terminal's foreground group must
    not read from it."""
    popen.setdefault("stdin", subprocess.DEVNULL)
    with subprocess.Popen(list(cmd), start_new_session=True, **popen) as proc:
        try:
            yield proc
        except BaseException:
            with deferred_interrupt():
                _stop_group(proc)
            raise


def run(cmd: Sequence[str], cwd: str | Path, input: str | None = None) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)` in its own process
    group, stopped as a group on Ctrl-C."""
    stdin = subprocess.PIPE if input is not None else subprocess.DEVNULL
    with child(cmd, cwd=cwd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        out, err = proc.communicate(input)
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)


# --- signals ------------------------------------------------------------------------------


_received: list[int] = []


def _on_signal(signum: int, frame: Any) -> None:
    for sig in _SIGNALS:  # one is enough: the clean-up that follows must not be cut short
        signal.signal(sig, signal.SIG_IGN)
    _received.append(signum)
    raise KeyboardInterrupt


def exit_code_for_interrupt() -> tuple[int, str]:
    """(exit code, word) for the KeyboardInterrupt being handled: 130 "interrupted" for
    Ctrl-C, 143 "terminated" for SIGTERM (the shell's 128 + signal number)."""
    if _received and _received[-1] == signal.SIGTERM:
        return 128 + signal.SIGTERM, "terminated"
    return INTERRUPT_EXIT_CODE, "interrupted"


@contextmanager
def interrupt_handling() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt (once) inside the block; the previous
    handlers come back afterwards. Only in the main thread (elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    _received.clear()
    for sig in _SIGNALS:
        signal.signal(sig, _on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


@contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold SIGINT/SIGTERM back during the block and deliver them (as the handler that was
    in place would) when it ends. Only in the main thread (elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    for sig in _SIGNALS:
        if previous[sig] not in (signal.SIG_IGN, None):
            signal.signal(sig, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        if pending:
            signal.raise_signal(pending[0])
