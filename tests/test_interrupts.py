"""Ctrl-C and SIGTERM: every command stops with exit code 130 (SIGTERM: 143) and one `error:`
line, wherever it is interrupted (loading the model, Clash, GHC, a simulator, writing the
project), with every tool it started stopped and nothing half-written left behind.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

import keras2clash
from helpers import FLOW_COMMANDS, cli_command, cli_env, needs_toolchain, run_cli
from keras2clash import api, procs

ROOT = Path(__file__).resolve().parent.parent
IRIS = ROOT / "examples" / "iris"


def processes_under(path: Path) -> list[str]:
    """Live processes whose working directory or command line lies under `path`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            status = (entry / "status").read_text()
            if re.search(r"^State:\s+Z", status, re.M):
                continue  # a zombie is gone, only not yet reaped by its parent
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except (OSError, ValueError):
            continue
        if str(path) in cmdline or cwd == str(path) or cwd.startswith(str(path) + os.sep):
            found.append(f"{entry.name}: {cmdline.strip()} (in {cwd})")
    return found


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the command ended (exit {proc.returncode}) before {what}:\n{err[-3000:]}")
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def assert_no_processes_under(path: Path) -> None:
    deadline = time.monotonic() + 5
    while processes_under(path) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = processes_under(path)
    for line in left:  # clean up after a failure, then report it
        try:
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
        except OSError:
            pass
    assert not left, "child processes left running:\n" + "\n".join(left)


@pytest.mark.parametrize(
    ("command", "function"),
    FLOW_COMMANDS,
)
def test_interrupt_exits_130_with_a_message(tmp_path: Path, monkeypatch, capsys, command, function) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, function, interrupted)
    args = [
        {
            "MODEL": str(tmp_path / "m.keras"),
            "OUT": str(tmp_path / "o"),
            "PROJECT": str(tmp_path),
            "DATA": str(tmp_path / "d.npz"),
        }.get(a, a)
        for a in command
    ]
    code, err = run_cli(args, capsys)
    assert code == 130
    assert "interrupted" in err and "Traceback" not in err


def _spawn_tree(marker: str) -> list[str]:
    """A tool that starts a tool: a shell running two sleeps in the background and waiting."""
    return ["sh", "-c", f"sleep {marker} & sleep {marker} & echo started; wait"]


def _fake_simulator(tmp_path: Path, marker: str) -> Path:
    exe = tmp_path / "sim"
    exe.write_text(f"#!/bin/sh\nsleep {marker} &\nsleep {marker} &\nwait\n")
    exe.chmod(0o755)
    return exe


def _interrupt_once_running(
    marker: str, stop: threading.Event, fired: threading.Event, timeout: float = 120.0
) -> threading.Thread:
    """Ctrl-C (SIGINT to this process) once both of the tool's sleeps run, not after a fixed
    delay that may come before the tool starts. `stop` disarms it; `fired` says it fired.
    (A suite started as a background job inherits SIGINT ignored, and Python keeps SIG_IGN, so
    the test installs the command line's handlers itself, as `cli.main` does.)"""

    def fire() -> None:
        deadline = time.monotonic() + timeout
        while not stop.is_set() and time.monotonic() < deadline:
            if sum(f"sleep {marker}" in line for line in processes_under(Path(marker))) >= 2:
                fired.set()
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=fire, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("runner", ["toolchain", "simulation", "rtl"])
def test_interrupt_stops_the_whole_tool_process_tree(tmp_path: Path, runner: str) -> None:
    from keras2clash.verify import rtlsim, simulate, toolchain

    marker = f"{300 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6:06d}"  # a unique sleep length
    assert threading.current_thread() is threading.main_thread(), "signals reach only the main thread"
    inherited = signal.getsignal(
        signal.SIGINT
    )  # SIG_IGN in a suite started as a background job (for a failure's message)
    stop, fired = threading.Event(), threading.Event()
    interrupter = _interrupt_once_running(marker, stop, fired)
    try:
        # The command line's own handlers (cli.py wraps every command in them), so the test does
        # not depend on the SIGINT handler this worker inherited.
        with pytest.raises(KeyboardInterrupt), procs.interrupt_handling():
            if runner == "toolchain":
                toolchain._run(_spawn_tree(marker), tmp_path, "a tool")
            elif runner == "simulation":
                simulate.run_simulator(_fake_simulator(tmp_path, marker), tmp_path, np.zeros((2, 4), np.int64), 3)
            else:
                rtlsim._run_streaming(_spawn_tree(marker), tmp_path, 1, None)
            time.sleep(5)  # where the interrupt lands if nothing stopped the tool's call
    except Exception as exc:  # "DID NOT RAISE", or the tool's own error after it ended early
        raise AssertionError(
            f"{exc} (SIGINT handler before the test: {inherited!r}; "
            f"interrupter {'fired' if fired.is_set() else 'did not fire'})"
        ) from exc
    finally:
        stop.set()
        interrupter.join()
    deadline = time.monotonic() + 5
    while processes_under(Path(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert_no_processes_under(Path(marker))


def test_interrupt_is_not_ignored_when_started_with_sigint_ignored(tmp_path: Path, tiny_model: Path) -> None:
    """A script's background job starts with SIGINT ignored; Ctrl-C must still stop it."""
    out = tmp_path / "work" / "net"
    out.parent.mkdir()
    proc = subprocess.Popen(
        cli_command("emit", str(tiny_model), "--out", str(out)),
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        _wait_for_tensorflow(proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err
    assert list(out.parent.iterdir()) == []


def test_sigterm_stops_a_command_with_code_143(tmp_path: Path, tiny_model: Path) -> None:
    out = tmp_path / "work" / "net"
    out.parent.mkdir()
    proc = subprocess.Popen(
        cli_command("emit", str(tiny_model), "--out", str(out)),
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_tensorflow(proc)
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-2000:]
    assert "error: terminated" in err and "Traceback" not in err
    assert list(out.parent.iterdir()) == []


def _wait_for_tensorflow(proc: subprocess.Popen) -> None:
    """The model is being loaded: TensorFlow's library is mapped into the process."""

    def loading() -> bool:
        try:
            return "tensorflow" in Path(f"/proc/{proc.pid}/maps").read_text()
        except OSError:
            return False

    wait_for(loading, 60, "the model load", proc)


def _tool_running(under: Path, tool: str):
    """A process of `tool` (e.g. ghc: /usr/lib/ghc/bin/ghc-stage2) runs under `under`."""

    def running() -> bool:
        programs = [line.split(": ", 1)[1].split()[0] for line in processes_under(under)]
        return any(re.fullmatch(rf"{tool}(-[\w.]+)?", Path(p).name) for p in programs)

    return running


@needs_toolchain
@pytest.mark.parametrize("step", ["emit", "hdl", "simulate"])
def test_run_interrupted_at_each_step(tmp_path: Path, step: str) -> None:
    """`run` interrupted while loading the model, while Clash runs, while GHC builds the
    simulation: exit 130 with a message, no project (not even part of one), no tool left."""
    work = tmp_path / "work"
    work.mkdir()
    out = work / "iris"
    proc = subprocess.Popen(
        cli_command(
            "run", str(IRIS / "iris.keras"), "--data", str(IRIS / "test.npz"), "--out", str(out), "--verilog", "-n", "5"
        ),
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if step == "emit":
            _wait_for_tensorflow(proc)
        elif step == "hdl":
            wait_for(_tool_running(work, "clash"), 120, "clash", proc)
        else:
            wait_for(_tool_running(work, "ghc"), 180, "ghc", proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "error: interrupted" in err and "Traceback" not in err
    assert list(work.iterdir()) == [], "left behind: " + ", ".join(p.name for p in work.iterdir())
    assert_no_processes_under(work)


def test_an_interrupted_emit_leaves_nothing(tmp_path: Path, tiny_model: Path, monkeypatch) -> None:
    """Interrupted in the middle of writing the project: no project, no temporary folder."""
    from keras2clash.backend import emitter

    real = emitter.memfile_text
    calls = []

    def interrupt_midway(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the first weight file is written, the second is not
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(emitter, "memfile_text", interrupt_midway)
    work = tmp_path / "work"
    with pytest.raises(KeyboardInterrupt):
        keras2clash.emit(tiny_model, "1,7,8", work / "net", show=False)
    assert len(calls) == 2
    assert not work.exists()  # the parent made for it is removed too (the output policy)
