"""The training core as a Clash project: written from a `TrainCore`, simulated, its events read
back (the weights after every step, the answers, the cycles).

The project holds `Trainer.hs` (the layers and the loss, K2C.Train), `Top.hs` (the AXI4-Stream
top entity), `Sim.hs` (the simulation executable), the blocks (`clash_lib/K2C`) and the memory
files (`weights/`: each layer's initial weights and biases, the tables).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import numpy as np

from keras2clash.backend.activations import ActivationCode
from keras2clash.backend.emitter import CLASH_LIB
from keras2clash.errors import K2CError
from keras2clash.fsutil import atomic_directory
from keras2clash.quant import activations as acts
from keras2clash.quant.formats import FixedFormat
from keras2clash.train.hardware import WORD_BITS, TrainCore, sum_width, table_code
from keras2clash.verify.simulate import simulator_lines
from keras2clash.verify.toolchain import build_simulator

_env = jinja2.Environment(
    loader=jinja2.ChoiceLoader(
        [
            jinja2.PackageLoader("keras2clash.train", "templates"),
            jinja2.PackageLoader("keras2clash.backend", "templates"),
        ]
    ),
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    undefined=jinja2.StrictUndefined,
)
_env.filters["prefix"] = lambda text, prefix: f"{prefix}{text}"

MODULES = {"Trainer.hs": "Trainer.hs.j2", "Top.hs": "Top.hs.j2", "Sim.hs": "Sim.hs.j2"}


@dataclass(frozen=True)
class TableSite:
    """A hidden layer's tanh / sigmoid table (a -> a): its function's name, format, the table's
    shift and first bucket, its memory files and Haskell value, what it computes."""

    name: str
    fmt: FixedFormat
    shift: int
    low: int
    code: ActivationCode
    doc: str


@dataclass(frozen=True)
class SoftmaxSite:
    """The output's softmax (a -> g): its table, sum width, entries, shift, entry bits."""

    code: ActivationCode
    width: int
    entries: int
    shift: int
    eb: int


def _tables(core: TrainCore) -> tuple[list[TableSite], SoftmaxSite]:
    tables = []
    for layer in core.layers:
        if layer.activation in ("tanh", "sigmoid"):
            fn = f"{layer.fn}_{layer.activation}"
            t = acts.table(layer.activation, layer.f.a, layer.f.a)
            code = table_code(fn, layer.activation, layer.f.a, layer.f.a, layer.n_out)
            doc = acts.describe(layer.activation, layer.f.a, layer.f.a)
            tables.append(TableSite(fn, layer.f.a, t.shift, t.low, code, doc))
    last = core.layers[-1]
    exp = acts.softmax_table(last.f.a, last.f.g, core.classes)
    code = table_code(f"{last.fn}_softmax", "softmax", last.f.a, last.f.g, core.classes)
    return tables, SoftmaxSite(code, sum_width(core.classes, last.f.g), len(exp.values), exp.shift, exp.frac + 2)


def _context(core: TrainCore, name: str, tables: list[TableSite], softmax: SoftmaxSite) -> dict[str, object]:
    layers = core.layers
    last = layers[-1]
    table_of = {t.name: t for t in tables}
    activations = [
        f"{layer.fn}_{layer.activation}"
        if f"{layer.fn}_{layer.activation}" in table_of
        else ("(max 0)" if layer.activation == "relu" else "id")
        for layer in layers
    ]
    scale = core.trainer.scale
    scale_text = f"2^-{scale.frac}" if scale.raw == 1 else f"{scale.raw} * 2^-{scale.frac}"
    return {
        "name": name,
        "layers": layers,
        "last": last,
        "tables": tables,
        "activations": activations,
        "softmax": softmax,
        "classes": core.classes,
        "sizes": core.trainer.net.sizes,
        "n_in": layers[0].n_in,
        "x_fmt": layers[0].x,
        "p_fmt": last.f.g,
        "word_bits": WORD_BITS,
        "multipliers": core.multipliers,
        "step_cycles": core.step_cycles(),
        "scale_text": scale_text,
    }


def write_core(core: TrainCore, out: Path, name: str, force: bool = False) -> Path:
    """Write the core's Clash project to `out` (whole, or nothing)."""
    tables, softmax = _tables(core)
    context = _context(core, name, tables, softmax)
    with atomic_directory(out, force=force) as root:
        for target, template in MODULES.items():
            (root / target).write_text(_env.get_template(template).render(**context))
        blocks = root / "clash_lib" / "K2C"
        blocks.mkdir(parents=True)
        for source in sorted((CLASH_LIB / "K2C").glob("*.hs")):
            shutil.copy2(source, blocks / source.name)
        weights = root / "weights"
        weights.mkdir()
        for layer, w, b in zip(core.layers, core.trainer.weights, core.trainer.biases):
            w_words, b_words = layer.memory(w, b)
            (weights / f"{layer.fn}.w.mem").write_text("\n".join(w_words) + "\n")
            (weights / f"{layer.fn}.b.mem").write_text("\n".join(b_words) + "\n")
        for code in [t.code for t in tables] + [softmax.code]:
            for file, lines in code.table_files:
                (weights / file).write_text("\n".join(lines) + "\n")
    return Path(out)


@dataclass
class CoreRun:
    """What a simulation of the core saw: per step the weights and biases of every layer after
    it (raw), the cycle it ended; per sample its answer (class, the label's raw probability)
    and the cycle its first answer word moved."""

    weights: list[list[np.ndarray]] = field(default_factory=list)
    biases: list[list[np.ndarray]] = field(default_factory=list)
    step_end: list[int] = field(default_factory=list)
    answers: list[tuple[int, int]] = field(default_factory=list)
    answer_cycle: list[int] = field(default_factory=list)
    first_word: list[int] = field(default_factory=list)


def simulate_core(
    core: TrainCore,
    project: Path,
    x_raw: np.ndarray,
    labels: np.ndarray,
    progress: Callable[[int], None] | None = None,
) -> CoreRun:
    """Train the simulated core on raw samples `x_raw` (N, n_in) with `labels`, one step each."""
    exe = build_simulator(project)
    n = len(x_raw)
    rows = np.concatenate([np.asarray(x_raw, dtype=np.int64).reshape(n, -1), np.asarray(labels).reshape(n, 1)], axis=1)
    budget = (n + 1) * core.step_cycles() * 2 + 1000
    text = f"{n}\n" + "\n".join(" ".join(map(str, r)) for r in rows.tolist()) + "\n"
    layers = core.layers
    run = CoreRun()
    w_words: list[list[Sequence[int]]] = [[] for _ in layers]
    b_words: list[list[Sequence[int]]] = [[] for _ in layers]
    word: list[int] = []
    taken = 0
    for line in simulator_lines(exe, project, text, [str(budget)]):
        tag, cycle, *rest = line.split()
        values = [int(v) for v in rest]
        if tag == "i":
            if taken % (layers[0].n_in + 1) == 0:
                run.first_word.append(int(cycle))
            taken += 1
        elif tag == "o":
            if not word:
                run.answer_cycle.append(int(cycle))
            word.append(values[0])
            if values[1]:
                run.answers.append((word[0], word[1]))
                word = []
        elif tag in ("w", "b"):
            target = w_words if tag == "w" else b_words
            layer, address = values[0], values[1]
            if address != len(target[layer]):
                raise K2CError(
                    f"training core: layer {layer} wrote {tag} word {address}, expected {len(target[layer])}"
                )
            target[layer].append(values[2:])
        elif tag == "s":
            run.step_end.append(int(cycle))
            run.weights.append([lay.unpack_weights(ws) for lay, ws in zip(layers, w_words)])
            run.biases.append([lay.unpack_biases(bs) for lay, bs in zip(layers, b_words)])
            w_words = [[] for _ in layers]
            b_words = [[] for _ in layers]
            if progress is not None:
                progress(len(run.step_end))
    if len(run.step_end) != n:
        raise K2CError(f"training core: the simulation ended after {len(run.step_end)} of {n} steps")
    return run
