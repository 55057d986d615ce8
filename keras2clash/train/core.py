"""The training core as a Clash project: written from a `TrainCore`, simulated, its events read
back (the weights after every step, the answers, the cycles).

The project holds `Trainer.hs` (the layers and the loss, K2C.Train), `Top.hs` (the AXI4-Stream
top entity), `Sim.hs` (the simulation executable), the blocks (`clash_lib/K2C`) and the memory
files (`weights/`: each layer's initial weights and biases, the tables).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import numpy as np

from keras2clash.backend.activations import ActivationCode, softmax_width
from keras2clash.backend.emitter import CLASH_LIB
from keras2clash.errors import K2CError
from keras2clash.fsutil import atomic_directory
from keras2clash.quant import activations as acts
from keras2clash.quant.formats import FixedFormat
from keras2clash.train.golden import Constant, GoldenTrainer
from keras2clash.train.hardware import WORD_BITS, CrossEntropyLoss, LayerCore, TrainCore, table_code
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


def template(name: str) -> jinja2.Template:
    return _env.get_template(name)


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


def _tables(core: TrainCore) -> tuple[list[TableSite], SoftmaxSite | None]:
    tables = []
    for layer in core.table_layers:
        fn = f"{layer.fn}_{layer.activation}"
        t = acts.table(layer.activation, layer.f.a, layer.f.a)
        code = table_code(fn, layer.activation, layer.f.a, layer.f.a, layer.n_out)
        doc = acts.describe(layer.activation, layer.f.a, layer.f.a)
        tables.append(TableSite(fn, layer.f.a, t.shift, t.low, code, doc))
    last = core.layers[-1]
    if not isinstance(core.loss, CrossEntropyLoss):
        return tables, None
    exp = acts.softmax_table(last.f.a, last.f.g, core.classes)
    code = table_code(f"{last.fn}_softmax", "softmax", last.f.a, last.f.g, core.classes)
    return tables, SoftmaxSite(
        code, softmax_width(exp, last.f.g, core.classes), len(exp.values), exp.shift, exp.frac + 2
    )


def _context(core: TrainCore, name: str, tables: list[TableSite], softmax: SoftmaxSite | None) -> dict[str, object]:
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
    scale_text = _constant_text(scale)
    m = core.trainer.momentum
    momentum_text = f", momentum {_constant_text(m)}" if m.raw else ""
    batch = core.trainer.sgd.batch
    return {
        "name": name,
        "layers": layers,
        "last": last,
        "tables": tables,
        "activations": activations,
        "softmax": softmax,
        "loss": core.loss,
        "loss_text": "softmax with cross-entropy" if softmax is not None else "the mean squared error",
        "sizes": core.trainer.net.sizes,
        "n_in": layers[0].n_in,
        "x_fmt": layers[0].x,
        "word_bits": WORD_BITS,
        "multipliers": core.multipliers,
        "parameters": sum(layer.n_in * layer.n_out + layer.n_out for layer in layers),
        "step_cycles": core.step_cycles(),
        "scale_text": scale_text,
        "momentum_text": momentum_text,
        "batch": batch,
    }


def _constant_text(c: Constant) -> str:
    return f"2^-{c.frac}" if c.raw == 1 else f"{c.raw} * 2^-{c.frac}"


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
        files: list[tuple[str, Sequence[str]]] = []
        for layer, w, b in zip(core.layers, core.trainer.weights, core.trainer.biases):
            files += _banked(layer, ("w", "b"), layer.memory(w, b))
        if core.trainer.momentum.raw:
            for layer, (vw, vb) in zip(core.layers, core.trainer.velocity):
                files += _banked(layer, ("vw", "vb"), layer.velocity_memory(vw, vb))
        if core.trainer.sgd.batch > 1:
            for layer in core.layers:
                files += _banked(layer, ("gw", "gb"), layer.sum_memory())
        for code in [t.code for t in tables] + ([softmax.code] if softmax is not None else []):
            files += [(f"weights/{file}", lines) for file, lines in code.table_files]
        for file, lines in files:
            (root / file).write_text("\n".join(lines) + "\n")
    return Path(out)


def _banked(
    layer: LayerCore, kinds: tuple[str, str], words: tuple[list[str], list[str]]
) -> list[tuple[str, list[str]]]:
    """A layer's weight-shaped and bias-shaped memories' bank files (`LayerCore.bank_files`)."""
    return [f for kind, w in zip(kinds, words) for f in layer.bank_files(kind, w)]


TRAIN, INFER, READ, WRITE, ACCUMULATE = 0, 1, 2, 3, 4
"""The host's command words (K2C.Train.hostControl)."""
TRAINING = (TRAIN, ACCUMULATE)
"""The commands that run a training step."""


@dataclass(frozen=True)
class Message:
    """A message to the core: its words (the command first) and its answer's length in words."""

    words: tuple[int, ...]
    answer_words: int

    @property
    def command(self) -> int:
        return self.words[0]


def train_message(core: TrainCore, x_raw: np.ndarray, target: object, update: bool = True) -> Message:
    """A training step on a sample (raw values) and its target (a label, or float targets for
    the mean squared error); without `update` its gradients are only summed (a batch's samples
    but its last)."""
    words = (TRAIN if update else ACCUMULATE, *(int(v) for v in np.ravel(x_raw)), *core.loss.target(target))
    return Message(words, core.loss.answer_count(True))


def batch_messages(core: TrainCore, xq: np.ndarray, targets: np.ndarray) -> list[Message]:
    """Training messages for the samples in order, the core's batch a step (a last short batch
    too): every batch's last sample updates."""
    n, batch = len(xq), core.trainer.sgd.batch
    return [
        train_message(core, x, t, update=(s + 1) % batch == 0 or s == n - 1)
        for s, (x, t) in enumerate(zip(xq, targets))
    ]


def infer_message(core: TrainCore, x_raw: np.ndarray) -> Message:
    return Message((INFER, *(int(v) for v in np.ravel(x_raw))), core.loss.answer_count(False))


def read_message(core: TrainCore) -> Message:
    return Message((READ,), sum(layer.n_in * layer.n_out + layer.n_out for layer in core.layers))


def write_message(core: TrainCore, weights: Sequence[np.ndarray], biases: Sequence[np.ndarray]) -> Message:
    """Every layer's raw weights row by row (input by input), then its biases."""
    words: list[int] = [WRITE]
    for layer, w, b in zip(core.layers, weights, biases):
        if np.shape(w) != (layer.n_in, layer.n_out) or np.shape(b) != (layer.n_out,):
            raise K2CError(f"layer '{layer.name}': weights {np.shape(w)} and biases {np.shape(b)} for a write")
        words.extend(int(v) for v in np.ravel(w))
        words.extend(int(v) for v in b)
    return Message(tuple(words), 1)


def split_read(core: TrainCore, values: Sequence[int]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """A read's answer as every layer's raw (weights, biases)."""
    weights, biases, at = [], [], 0
    for layer in core.layers:
        n = layer.n_in * layer.n_out
        weights.append(np.asarray(values[at : at + n], dtype=np.int64).reshape(layer.n_in, layer.n_out))
        biases.append(np.asarray(values[at + n : at + n + layer.n_out], dtype=np.int64))
        at += n + layer.n_out
    return weights, biases


@dataclass
class CoreRun:
    """What a simulation of the core saw: per message its answer's words, the cycle its
    command word moved in and the cycle its answer's first word moved out; per training step
    the weights and biases of every layer after it (raw, from the memories' writes) and the
    cycle it ended (the first layer taking input again)."""

    answers: list[list[int]] = field(default_factory=list)
    first_word: list[int] = field(default_factory=list)
    answer_cycle: list[int] = field(default_factory=list)
    weights: list[list[np.ndarray]] = field(default_factory=list)
    biases: list[list[np.ndarray]] = field(default_factory=list)
    step_end: list[int] = field(default_factory=list)


def simulate_core(
    core: TrainCore, project: Path, messages: Sequence[Message], progress: Callable[[int], None] | None = None
) -> CoreRun:
    """Send `messages` to the simulated core (its words back to back, the answers taken as they
    come); what it answered and wrote, when."""
    exe = build_simulator(project)
    steps = sum(m.command in TRAINING for m in messages)
    words = [w for m in messages for w in m.words]
    text = f"{len(messages)} {steps}\n" + " ".join(map(str, words)) + "\n"
    lines = simulator_lines(exe, project, text, [str(cycle_budget(core, messages))])
    run = read_events(core, messages, lines, progress)
    if len(run.step_end) != steps:
        raise K2CError(f"training core: the simulation ended after {len(run.step_end)} of {steps} steps")
    return run


def cycle_budget(core: TrainCore, messages: Sequence[Message]) -> int:
    """Cycles a simulation of `messages` may take before it is called stuck: twice the cycle
    model's steps, four cycles a word in and out, and some."""
    steps = sum(m.command in TRAINING for m in messages)
    words = sum(len(m.words) + m.answer_words for m in messages)
    return 2 * (steps + 1) * core.step_cycles() + 4 * words + 1000


def read_events(
    core: TrainCore, messages: Sequence[Message], lines: Iterable[str], progress: Callable[[int], None] | None = None
) -> CoreRun:
    """A simulation's event lines (`i C`, `o C VALUE LAST`, and from the Clash simulation
    `w`/`b`/`s`: Sim.hs) as what the core answered and wrote, when; one clear error if an
    answer is missing or has the wrong length."""
    layers = core.layers
    run = CoreRun()
    w_words: list[list[Sequence[int]]] = [[] for _ in layers]
    b_words: list[list[Sequence[int]]] = [[] for _ in layers]
    starts = set(np.cumsum([0] + [len(m.words) for m in messages]).tolist())
    taken, answer = 0, list[int]()
    for line in lines:
        tag, cycle, *rest = line.split()
        values = [int(v) for v in rest]
        if tag == "i":
            if taken in starts:
                run.first_word.append(int(cycle))
            taken += 1
        elif tag == "o":
            if not answer:
                run.answer_cycle.append(int(cycle))
            answer.append(values[0])
            if values[1]:
                run.answers.append(answer)
                answer = []
                if progress is not None:
                    progress(len(run.answers))
        elif tag in ("w", "b"):
            target = w_words if tag == "w" else b_words
            layer, address = values[0], values[1]
            if address != len(target[layer]):
                raise K2CError(
                    f"training core: layer {layer} wrote {tag} word {address}, expected {len(target[layer])}"
                )
            target[layer].append(values[2:])
        elif tag == "s":
            # a step that only sums its gradients writes nothing: the weights stay
            before_w = run.weights[-1] if run.weights else core.trainer.weights
            before_b = run.biases[-1] if run.biases else core.trainer.biases
            run.step_end.append(int(cycle))
            run.weights.append([lay.unpack_weights(ws) if ws else w for lay, ws, w in zip(layers, w_words, before_w)])
            run.biases.append([lay.unpack_biases(bs) if bs else b for lay, bs, b in zip(layers, b_words, before_b)])
            w_words = [[] for _ in layers]
            b_words = [[] for _ in layers]
    if len(run.answers) != len(messages):
        raise K2CError(f"training core: {len(run.answers)} answers to {len(messages)} messages")
    for k, (m, a) in enumerate(zip(messages, run.answers)):
        if len(a) != m.answer_words:
            raise K2CError(
                f"training core: message {k} (command {m.command}) answered {len(a)} words, not {m.answer_words}"
            )
    return run


@dataclass(frozen=True)
class CoreCheck:
    """The simulated core against the golden trainer over `steps` steps: the steps whose weights,
    biases or answer differ (none, when bit-exact), the cycles of each step and of each answer
    as simulated, and as the cycle model counts them."""

    steps: int
    mismatches: list[str]
    step_cycles: list[int]
    answer_cycles: list[int]
    model_step_cycles: int
    model_answer_cycle: int

    @property
    def exact(self) -> bool:
        return not self.mismatches

    @property
    def cycles_match(self) -> bool:
        return set(self.step_cycles) == {self.model_step_cycles} and set(self.answer_cycles) == {
            self.model_answer_cycle
        }


def check_core(
    core: TrainCore,
    project: Path,
    x: np.ndarray,
    targets: np.ndarray,
    progress: Callable[[int], None] | None = None,
) -> CoreCheck:
    """Train the simulated core and a fresh golden trainer (the core's network, formats and
    SGD) on float samples `x` and their targets (labels, or float targets for the mean squared
    error) in order, a batch a step (the core sums a batch's gradients, its last sample
    updates); compare the weights and biases after every sample (unchanged within a batch) and
    every answer (the loss's: `CrossEntropyLoss.answer`, `MseLoss.answer`)."""
    t = core.trainer
    golden = GoldenTrainer(t.net, t.sgd, t.formats, t.x_format)
    xq = golden.quantize_inputs(x)
    targets = np.asarray(targets)
    batch = t.sgd.batch
    run = simulate_core(core, project, batch_messages(core, xq, targets), progress)
    mismatches = []
    for first in range(0, len(xq), batch):
        before = [w.copy() for w in golden.weights], [b.copy() for b in golden.biases]
        z, y = golden.step(xq[first : first + batch], targets[first : first + batch])
        for k in range(len(z)):
            s = first + k
            answer = core.loss.answer(z[k], y[k], targets[s])
            if run.answers[s] != answer:
                mismatches.append(f"step {s}: answer {run.answers[s]}, golden {answer}")
            last = s == len(xq) - 1 or k == batch - 1
            gold_w, gold_b = (golden.weights, golden.biases) if last else before
            for layer, w, b, wg, bg in zip(core.layers, run.weights[s], run.biases[s], gold_w, gold_b):
                for what, hw, gold in (("weights", w, wg), ("biases", b, bg)):
                    if not np.array_equal(hw, gold):
                        wrong = int(np.count_nonzero(hw != gold))
                        mismatches.append(f"step {s}: layer '{layer.name}' {what}: {wrong} of {gold.size} differ")
    starts = [*run.first_word, run.step_end[-1]]
    return CoreCheck(
        steps=len(xq),
        mismatches=mismatches,
        step_cycles=[int(b - a) for a, b in zip(starts, starts[1:])],
        answer_cycles=[int(a - f) for a, f in zip(run.answer_cycle, run.first_word)],
        model_step_cycles=core.step_cycles(),
        model_answer_cycle=core.answer_cycle(),
    )
