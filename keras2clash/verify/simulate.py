"""Running the compiled Clash simulation on a test set and reading back its outputs.

The simulator streams samples through the design's ready/valid input (each input port's,
for several inputs), back to back, and prints one line per sample: the cycle its input was
accepted, the cycle its (last) output beat left, a classifier's argmax class, and the raw
output integers (docs/reference/project.md, "The simulation protocol").
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from keras2clash import procs
from keras2clash.backend.weightbus import WeightMessage
from keras2clash.errors import K2CError


@dataclass(frozen=True)
class SimResult:
    accept_cycle: np.ndarray  # (N,)
    output_cycle: np.ndarray  # (N,)
    classes: np.ndarray | None  # (N,) argmax computed by the hardware; None: the output has no class
    outputs: np.ndarray  # (N, n_out) raw integers, the output tensor row-major
    answers: tuple[tuple[int, ...], ...] = ()  # each read's answer on the weight port, its 32-bit beats
    answer_cycle: tuple[int, ...] = ()  # the cycle each answer's last beat moved

    @property
    def latency(self) -> np.ndarray:
        """Cycles from accepting a sample's first input beat to its last output beat leaving."""
        return self.output_cycle - self.accept_cycle

    @property
    def first_latency(self) -> int:
        """Latency of the first sample, through an empty pipeline."""
        return int(self.latency[0])

    @property
    def interval(self) -> float:
        """Mean cycles between successive outputs in steady state (initiation interval)."""
        if len(self.output_cycle) < 2:
            return float("nan")
        return float(np.diff(self.output_cycle).mean())


RawInputs = np.ndarray | Sequence[np.ndarray]
"""The raw inputs of a design: one array, or one per input port of several, in the model's order."""


def samples(x_raw: RawInputs) -> int:
    return len(x_raw) if isinstance(x_raw, np.ndarray) else len(x_raw[0])


Messages = Mapping[int, Sequence[Sequence[int] | WeightMessage]]
"""Weight messages (`backend.weightbus`) to send before given samples: sample index -> each
message, or its beats (the header first: a message the simulation does not wait the answer of)."""


def _message_line(message: Sequence[int] | WeightMessage) -> str:
    """A weight message's stdin line: `r` for a read the harness waits the answer of, else `w`."""
    if isinstance(message, WeightMessage):
        return ("r " if message.answer_beats else "w ") + " ".join(map(str, message.beats))
    return "w " + " ".join(map(str, message))


def _format_input(x_raw: RawInputs, messages: Messages | None = None) -> str:
    """`N`, then a line per sample: every input's raw integers, input after input (K2C.Sim);
    before sample `i`, a line `w b_0 b_1 ...` (or `r ...`) per weight message of `messages[i]`."""
    arrays = [x_raw] if isinstance(x_raw, np.ndarray) else list(x_raw)
    n = samples(x_raw)
    rows = np.concatenate([np.asarray(a).reshape(n, -1) for a in arrays], axis=1)
    messages = messages or {}
    if any(not 0 <= i < n for i in messages):
        raise K2CError(f"weight messages before sample(s) {sorted(messages)}: there are {n} samples")
    lines = [str(n)]
    for i, row in enumerate(rows.tolist()):
        lines.extend(_message_line(message) for message in messages.get(i, ()))
        lines.append(" ".join(map(str, row)))
    return "\n".join(lines) + "\n"


def run_simulator(
    exe: Path,
    project: Path,
    x_raw: np.ndarray,
    n_out: int,
    extra_args: list[str] | None = None,
    progress: Callable[[int], None] | None = None,
    *,
    classifies: bool = True,
    messages: Messages | None = None,
) -> SimResult:
    """Feed raw inputs to the simulator, collect its per-sample lines. `classifies`: the
    design's output is a vector with a class (`Project.classifies`), printed before the values.
    `messages`: weight messages sent between the samples (a design emitted with
    `--writable-weights`), each after the outputs of the samples before it.

    `progress(k)` is called as outputs arrive, so long runs can show a progress bar.
    """
    answers: list[list[int]] = []
    rows = _simulator_rows(exe, project, x_raw, len(x_raw), extra_args, progress, messages, answers)
    table = np.array(rows, dtype=np.int64)
    result = _result(table, n_out, classifies)
    return replace(
        result,
        answers=tuple(tuple(answer[1:]) for answer in answers),
        answer_cycle=tuple(answer[0] for answer in answers),
    )


def run_simulator_heads(
    exe: Path,
    project: Path,
    x_raw: RawInputs,
    heads: Sequence[tuple[int, bool]],
    extra_args: list[str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[SimResult]:
    """`run_simulator` for a design of several outputs or inputs, `heads` giving each output's
    (n_out, classifies), `x_raw` one array per input of several: each output port prints its
    own line per sample, its index first (K2C.Sim.simHeads, simPorts); one `SimResult` per
    output, in port order."""
    n = samples(x_raw)
    rows = _simulator_rows(exe, project, x_raw, n * len(heads), extra_args, progress)
    results = []
    for k, (n_out, classifies) in enumerate(heads):
        mine = [row[1:] for row in rows if row[0] == k]
        if len(mine) != n:
            raise K2CError(f"simulation returned {len(mine)} outputs of port {k} for {n} samples")
        results.append(_result(np.array(mine, dtype=np.int64), n_out, classifies, f" of port {k}"))
    return results


def _result(table: np.ndarray, n_out: int, classifies: bool, where: str = "") -> SimResult:
    lead = 3 if classifies else 2
    if table.shape[1] != lead + n_out:
        raise K2CError(f"simulation printed {table.shape[1] - lead} outputs{where} per sample, expected {n_out}")
    return SimResult(table[:, 0], table[:, 1], table[:, 2] if classifies else None, table[:, lead:])


def _simulator_rows(
    exe: Path,
    project: Path,
    x_raw: RawInputs,
    lines: int,
    extra_args: list[str] | None,
    progress: Callable[[int], None] | None,
    messages: Messages | None = None,
    answers: list[list[int]] | None = None,
) -> list[list[int]]:
    """The simulator's output lines as integers: `lines` of them, or one clear error. The
    lines of read answers (`r cycle beats...`) go to `answers`, the cycle first."""
    rows: list[list[int]] = []
    for line in simulator_lines(exe, project, _format_input(x_raw, messages), extra_args or []):
        if line.startswith("r "):
            if answers is not None:
                answers.append([int(v) for v in line.split()[1:]])
            continue
        rows.append([int(v) for v in line.split()])
        if progress is not None:
            progress(len(rows))
    if len(rows) != lines:
        raise K2CError(f"simulation returned {len(rows)} outputs for {samples(x_raw)} samples")
    return rows


def simulator_lines(exe: Path, project: Path, stdin_text: str, args: Sequence[str]) -> Iterator[str]:
    """Run a simulation executable in `project` on `stdin_text`; its non-empty output lines
    as they come, then one clear error if it failed."""
    cmd = [str(exe), *args]
    with procs.child(
        cmd, cwd=project, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        stdin, stderr = proc.stdin, proc.stderr
        errors: list[str] = []

        def feed() -> None:  # a thread, so a simulator that answers early cannot deadlock us
            try:
                stdin.write(stdin_text)
                stdin.close()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the simulator stopped (an error below, or Ctrl-C)

        def drain() -> None:  # stderr too, so a chatty simulator cannot block on it
            errors.append(stderr.read())

        threads = [threading.Thread(target=feed, daemon=True), threading.Thread(target=drain, daemon=True)]
        for thread in threads:
            thread.start()
        for line in proc.stdout:
            if line.strip():
                yield line
        for thread in threads:
            thread.join()
        code = proc.wait()
    err = "".join(errors)
    if code != 0:
        raise K2CError(f"simulation failed (exit {code}): {err.strip()[-2000:]}")
