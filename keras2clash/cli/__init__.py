"""The `keras2clash` command line: emit, hdl, simulate, run, ... and pnr (place and route).

One module per group of commands, each registering its commands on the one Typer `app`
(`common.py`); every option that several commands take is defined once (`params.py`).

User mistakes (`K2CError`) and what the operating system reports (`OSError`: no space left,
permission denied, an I/O error) become one line on stderr and exit code 2, never a
traceback.
"""

from __future__ import annotations

import sys

import typer
from rich.markup import escape

from keras2clash import procs

# The command modules register their commands on `app` as they are imported, in the order
# `keras2clash --help` lists them.
from keras2clash.cli import debugging, flow, hardware, pnr, precision, rtl, search, train  # noqa: E402, F401, I001
from keras2clash.cli.common import app, err
from keras2clash.errors import K2CError, os_error_text

__all__ = ["app", "main"]


def _error(message: str) -> None:
    err.print(f"[bold red]error:[/bold red] {escape(message)}", highlight=False, soft_wrap=True)


def _usage_error(exc: Exception) -> str:
    """A usage error (click's UsageError & co.) as one line: the problem and where to look."""
    text = " ".join(line.strip() for line in exc.format_message().splitlines() if line.strip()).rstrip(".")
    ctx = getattr(exc, "ctx", None)
    if ctx is not None and getattr(ctx, "command_path", None):
        text += f"; see '{ctx.command_path} --help'"
    return text


def _interrupted() -> int:
    code, what = procs.exit_code_for_interrupt()
    _error(f"{what}; stopped, with every tool it had started")
    return code


def main() -> None:
    """Console entry point: user errors and operating-system errors are one line and exit
    code 2, no traceback; Ctrl-C stops every tool it started and exits 130 (SIGTERM: 143;
    procs.py)."""
    with procs.interrupt_handling():
        code = _main()
    sys.exit(code)


def _main() -> int:
    try:
        result = app(standalone_mode=False)
    except KeyboardInterrupt:
        return _interrupted()
    except K2CError as exc:
        _error(str(exc))
        return exc.exit_code
    except OSError as exc:  # the environment, not a bug: the path and the errno's text
        _error(os_error_text(exc))
        return K2CError.exit_code
    except typer.Abort:
        return _interrupted()
    except typer.Exit as exc:
        return exc.exit_code
    except Exception as exc:
        # Usage errors from the click that typer vendors; the help screen that a bare
        # command shows stays a help screen.
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()
            return exc.exit_code
        if hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int):
            _error(_usage_error(exc))
            return exc.exit_code
        raise
    if result == procs.INTERRUPT_EXIT_CODE:  # typer turns a KeyboardInterrupt into Exit(130)
        return _interrupted()
    return result if isinstance(result, int) else 0
