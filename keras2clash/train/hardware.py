"""The training core's design: per layer its widths, alignments and memories, and its exact
cycle model (K2C.Train's blocks; the arithmetic is the golden trainer's, bit for bit).

Every decision about the hardware is here; the templates only write it down as Haskell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from bitstring import Bits

from keras2clash.backend.activations import BLOCK_RAM_MODES, ActivationCode, block_rams, table_slices
from keras2clash.backend.emitter import haskell_names
from keras2clash.errors import K2CError
from keras2clash.hw.events import tree_depth
from keras2clash.quant import activations as acts
from keras2clash.quant.formats import FixedFormat, quantize
from keras2clash.train.golden import Constant, GoldenTrainer, LayerFormats

WORD_BITS = 32
"""The host's words (AXI4-Stream TDATA): a raw value sign-extended, a label, a class."""

FWD_LATENCY = 11
"""K2C.Train's FwdLatency: a forward operation's issue to its group's output word."""
SGD_CYCLES, MOMENTUM_CYCLES, BATCH_CYCLES = 2, 8, 5
"""K2C.Train's updates' cycles (`sgd`, `momentum`; `batched` adds its own): the backward
products to the writes."""
TEMPLATE_NAMES = frozenset({"trainer", "loss", "main", "circuit", "run"})
"""Top-level names of the core's modules (Trainer.hs, Sim.hs) a layer's function must not take."""


def bwd_latency(pe: int) -> int:
    """K2C.Train's BwdLatency: a backward operation's issue to the previous layer's gradient."""
    return 9 + tree_depth(pe)


MSE_LATENCY = 5
"""K2C.Train's MseLatency: the last output word to the first gradient of the squared error."""


def deriv_expr(activation: str, frac: int) -> str:
    """K2C.Train.Deriv of an activation whose values have `frac` fraction bits."""
    one = 1 << frac
    return {"relu": "Positive", "linear": "Pass", "tanh": f"(Tanh {one})", "sigmoid": f"(Sigmoid {one})"}[activation]


@dataclass(frozen=True)
class LayerCore:
    """One layer of the core: its sizes, its knob (`pe` outputs a cycle), its formats and the
    alignments of its arithmetic (K2C.Train.LayerArith), the widths of its sums."""

    name: str
    fn: str
    n_in: int
    n_out: int
    pin: int  # values per input word (the previous layer's pe; 1 for the host's input)
    pe: int
    activation: str
    deriv: str  # the input's activation (the previous layer's), for the backward gradient
    x: FixedFormat
    f: LayerFormats
    g_prev: FixedFormat | None
    scale_raw: int
    scale_frac: int
    momentum: Constant | None = None
    batch: int = 1

    @property
    def groups(self) -> int:
        return -(-self.n_out // self.pe)

    @property
    def in_words(self) -> int:
        return -(-self.n_in // self.pin)

    @property
    def ops(self) -> int:
        """Cycles of one pass (forward or backward): a word of weights a cycle."""
        return self.n_in * self.groups

    @property
    def multipliers(self) -> int:
        """The shared products (the input or the gradient times a weight) and the update's;
        with a momentum that is not a power of two, its products with the weights' and the
        biases' velocities."""
        m = self.momentum
        return (4 if m is not None and m.raw != 1 else 2) * self.pe

    @property
    def update_cycles(self) -> int:
        rule = SGD_CYCLES if self.momentum is None else MOMENTUM_CYCLES
        return rule + (BATCH_CYCLES if self.batch > 1 else 0)

    @property
    def xd_bits(self) -> int:
        """Bits of a weight's gradient: `x d`, summed over the batch."""
        return self.x.bits + self.f.g.bits + (self.batch - 1).bit_length()

    @property
    def d_bits(self) -> int:
        """Bits of a bias's gradient: `d`, summed over the batch."""
        return self.f.g.bits + (self.batch - 1).bit_length()

    @property
    def drain_cycles(self) -> int:
        """K2C.Train.drainCycles: the last backward issue to the update's last write."""
        return 5 + self.update_cycles

    # the alignments (K2C.Train.LayerArith)
    @property
    def sum_frac(self) -> int:
        return self.x.frac + self.f.w.frac

    @property
    def bias_shift(self) -> int:
        return self.sum_frac - self.f.b.frac

    @property
    def z_shift(self) -> int:
        return self.sum_frac - self.f.a.frac

    def _update(self, kept: FixedFormat, step_frac: int) -> tuple[int, int]:
        top = max(step_frac, kept.frac)
        return top - step_frac, top - kept.frac

    @property
    def w_shifts(self) -> tuple[int, int]:
        return self._update(self.f.w, self.w_step_frac)

    @property
    def b_shifts(self) -> tuple[int, int]:
        return self._update(self.f.b, self.b_step_frac)

    def _momentum(self, kept: FixedFormat, step_frac: int) -> tuple[int, int, int, int, int]:
        """The velocity's and the new value's alignments (K2C.Train.MomentumArith): `m v` and
        the step onto their common fraction, its rounding to `v`; the value and `v` onto theirs."""
        assert self.momentum is not None
        v = self.f.v
        m_frac = v.frac + self.momentum.frac
        top = max(m_frac, step_frac)
        new = max(kept.frac, v.frac)
        return top - m_frac, top - step_frac, top - v.frac, new - kept.frac, new - v.frac

    @property
    def w_step_frac(self) -> int:
        return self.x.frac + self.f.g.frac + self.scale_frac

    @property
    def b_step_frac(self) -> int:
        return self.f.g.frac + self.scale_frac

    @property
    def vu(self) -> int:
        """Bits of a velocity before its rounding (`m v` and the step aligned, their difference)."""
        assert self.momentum is not None
        raw = self.scale_raw.bit_length() + 1
        mv = self.f.v.bits + self.momentum.raw.bit_length() + 1
        wk, ws, _, _, _ = self._momentum(self.f.w, self.w_step_frac)
        bk, bs, _, _, _ = self._momentum(self.f.b, self.b_step_frac)
        return max(mv + wk, self.xd_bits + raw + ws, mv + bk, self.d_bits + raw + bs) + 2

    @property
    def nu(self) -> int:
        """Bits of a new weight or bias before its rounding (the value and the velocity aligned)."""
        _, _, _, ww, wv = self._momentum(self.f.w, self.w_step_frac)
        _, _, _, bb, bv = self._momentum(self.f.b, self.b_step_frac)
        v = self.f.v.bits
        return max(self.f.w.bits + ww, v + wv, self.f.b.bits + bb, v + bv) + 2

    def update(self) -> str:
        """The layer's update rule (K2C.Train.sgd or .momentum, within .batched for a batch),
        in Haskell, on its `arith` and the `host`'s signals."""
        rule = self._rule()
        if self.batch == 1:
            return rule
        files = f"({self.banks_expr('gw')}) ({self.banks_expr('gb')})"
        return f"batched @{self.xd_bits} @{self.d_bits} (hostUpdate host) {files} ({rule})"

    def _rule(self) -> str:
        if self.momentum is None:
            return f"sgd @{self.uu} arith"
        fields = [
            self.momentum.raw,
            *self._momentum(self.f.w, self.w_step_frac),
            *self._momentum(self.f.b, self.b_step_frac),
        ]
        m = "MomentumArith " + " ".join(f"({v})" if v < 0 else str(v) for v in fields)
        return (
            f"momentum @{self.f.v.bits} @{self.vu} @{self.nu} arith ({m}) "
            f"({self.banks_expr('vw')}) ({self.banks_expr('vb')})"
        )

    @property
    def gpb(self) -> int:
        """Bits of the gradient the layer gives back: the previous layer's; the first layer's
        is never used (2 bits, which synthesis removes with the sum that makes it)."""
        return self.g_prev.bits if self.g_prev is not None else 2

    @property
    def deriv_frac(self) -> int:
        return 2 * self.x.frac if self.deriv in ("tanh", "sigmoid") else 0

    @property
    def back_shift(self) -> int:
        if self.g_prev is None:
            return 0
        return self.f.g.frac + self.f.w.frac + self.deriv_frac - self.g_prev.frac

    # the widths
    @property
    def fu(self) -> int:
        products = self.x.bits + self.f.w.bits + max(self.n_in - 1, 1).bit_length() + 1
        return max(products, self.f.b.bits + self.bias_shift) + 2

    @property
    def uu(self) -> int:
        raw = self.scale_raw.bit_length() + 1
        step_w, keep_w = self.w_shifts
        step_b, keep_b = self.b_shifts
        return (
            max(
                self.f.w.bits + keep_w,
                self.xd_bits + raw + step_w,
                self.f.b.bits + keep_b,
                self.d_bits + raw + step_b,
            )
            + 2
        )

    @property
    def bu(self) -> int:
        return self.f.g.bits + self.f.w.bits + max(self.groups * self.pe - 1, 1).bit_length() + 1

    @property
    def du(self) -> int:
        """The backward sum times the input's derivative: a product with tanh's and sigmoid's
        factor (2 x.bits + 2 bits), the sum itself for relu's and linear's."""
        return self.bu + (2 * self.x.bits + 2 if self.deriv in ("tanh", "sigmoid") else 0)

    def type_args(self) -> list[int]:
        """K2C.Train.trainLayer's type arguments, in its order."""
        f = self.f
        sizes = [self.n_in, self.in_words, self.pin, self.groups, self.pe, self.n_out]
        widths = [self.x.bits, f.w.bits, f.b.bits, f.a.bits, f.g.bits, self.gpb, self.fu, self.bu, self.du]
        return sizes + widths

    def arith(self) -> str:
        """The LayerArith record, in Haskell."""
        (ws, wk), (bs, bk) = self.w_shifts, self.b_shifts
        fields = [self.bias_shift, self.z_shift, ws, wk, bs, bk, self.scale_raw, self.back_shift]
        return "LayerArith " + " ".join(f"({v})" if v < 0 else str(v) for v in fields)

    def deriv_expr(self) -> str:
        return deriv_expr(self.deriv, self.x.frac)

    def memory(self, weights: np.ndarray, biases: np.ndarray) -> tuple[list[str], list[str]]:
        """The weight and bias memories' words ('0'/'1', MSB first): word `k * groups + j` holds
        input k's weights to outputs `j * pe ..`, output `j * pe` in the high bits."""
        return self._words(weights, biases, self.f.w.bits, self.f.b.bits)

    def _words(self, weights: np.ndarray, biases: np.ndarray, w_bits: int, b_bits: int) -> tuple[list[str], list[str]]:
        g, pe = self.groups, self.pe
        w = np.zeros((self.n_in, g * pe), dtype=np.int64)
        w[:, : self.n_out] = weights
        b = np.zeros(g * pe, dtype=np.int64)
        b[: self.n_out] = biases
        w_words = ["".join(Bits(int=int(v), length=w_bits).bin for v in row) for row in w.reshape(-1, pe)]
        b_words = ["".join(Bits(int=int(v), length=b_bits).bin for v in row) for row in b.reshape(-1, pe)]
        return w_words, b_words

    def unpack_weights(self, words: Sequence[Sequence[int]]) -> np.ndarray:
        """(n_in, n_out) raw weights from the memory's words in address order (pe values each)."""
        return np.asarray(words, dtype=np.int64).reshape(self.n_in, self.groups * self.pe)[:, : self.n_out]

    def velocity_memory(self, vw: np.ndarray, vb: np.ndarray) -> tuple[list[str], list[str]]:
        """The velocities' memories, in the weights' and biases' layout (`memory`), `v` bits a value."""
        return self._words(vw, vb, self.f.v.bits, self.f.v.bits)

    def sum_memory(self) -> tuple[list[str], list[str]]:
        """The batch's gradient sums' memories (zero), in the weights' and biases' layout."""
        return self._words(
            np.zeros((self.n_in, self.n_out), dtype=np.int64),
            np.zeros(self.n_out, dtype=np.int64),
            self.xd_bits,
            self.d_bits,
        )

    def unpack_biases(self, words: Sequence[Sequence[int]]) -> np.ndarray:
        return np.asarray(words, dtype=np.int64).reshape(-1)[: self.n_out]

    @property
    def memories(self) -> list[Memory]:
        """K2C.Train's memories of the layer: its input words, weights, biases and gradients,
        the velocities (momentum) and the gradient sums (batch), in the weights' layout."""
        g, pe, n = self.groups, self.pe, self.ops
        out = [
            Memory(f"{self.name}'s input", self.in_words, self.pin * self.x.bits),
            Memory(f"{self.name}'s weights", n, pe * self.f.w.bits, banked=True),
            Memory(f"{self.name}'s biases", g, pe * self.f.b.bits, banked=True),
            Memory(f"{self.name}'s gradients", g, pe * self.f.g.bits),
        ]
        if self.momentum is not None:
            out += [
                Memory(f"{self.name}'s weight velocities", n, pe * self.f.v.bits, banked=True),
                Memory(f"{self.name}'s bias velocities", g, pe * self.f.v.bits, banked=True),
            ]
        if self.batch > 1:
            out += [
                Memory(f"{self.name}'s weight gradient sums", n, pe * self.xd_bits, banked=True),
                Memory(f"{self.name}'s bias gradient sums", g, pe * self.d_bits, banked=True),
            ]
        return out

    def _shape(self, kind: str) -> tuple[int, int]:
        """(words, bits) of a banked memory: `w`, `b` the weights and biases, `vw`, `vb` their
        velocities, `gw`, `gb` their gradient sums."""
        bits = {"w": self.f.w.bits, "b": self.f.b.bits, "vw": self.f.v.bits, "vb": self.f.v.bits}
        bits |= {"gw": self.xd_bits, "gb": self.d_bits}
        return (self.ops if kind.endswith("w") else self.groups), self.pe * bits[kind]

    def _banks(self, kind: str) -> tuple[list[str], int]:
        """A banked memory's files under the project and the words a bank (`banks`)."""
        n, depth = banks(*self._shape(kind))
        names = [f"weights/{self.fn}.{kind}.mem"] if n == 1 else [f"weights/{self.fn}.{kind}.{k}.mem" for k in range(n)]
        return names, depth

    def bank_files(self, kind: str, words: Sequence[str]) -> list[tuple[str, list[str]]]:
        """A banked memory's files under the project (`weights/<layer>.<kind>.mem`, or
        `.<kind>.<k>.mem` for bank `k` of several) and their lines: its words (`memory`,
        `velocity_memory`, `sum_memory`) a bank at a time, the last bank filled with zeros."""
        names, depth = self._banks(kind)
        lines = [*words, *["0" * len(words[0])] * (len(names) * depth - len(words))]
        return [(name, lines[k * depth : (k + 1) * depth]) for k, name in enumerate(names)]

    def banks_expr(self, kind: str) -> str:
        """The Haskell value of a banked memory's files (K2C.Train.Banks)."""
        names, depth = self._banks(kind)
        files = " :> ".join(f'"{name}"' for name in names)
        return f"Banks (SNat @{depth}) ({files} :> Nil)"


def banks(words: int, bits: int) -> tuple[int, int]:
    """(banks, words a bank) of a memory in K2C.Train.bankedRam: banks of a power of two words,
    at most a block RAM deep (a bank's read then needs no multiplexer after the block's slow
    output), the fewest blocks in all, then the fewest banks."""
    whole = 1 << (words - 1).bit_length()

    def cost(depth: int) -> tuple[int, int]:
        n = -(-words // depth)
        return n * block_rams(depth, bits), n

    depth = min({min(whole, d) for d, _ in BLOCK_RAM_MODES}, key=cost)
    return -(-words // depth), depth


@dataclass(frozen=True)
class Memory:
    """One of the core's memories: what it holds, its words and their bits, a table or not, in
    banks (`banks`) or not."""

    name: str
    words: int
    bits: int
    rom: bool = False
    banked: bool = False

    @property
    def block_rams(self) -> int:
        if not self.banked:
            return block_rams(self.words, self.bits, self.rom)
        n, depth = banks(self.words, self.bits)
        return n * block_rams(depth, self.bits)


def table_code(name: str, activation: str, fi: FixedFormat, fo: FixedFormat, n: int) -> ActivationCode:
    """A tanh / sigmoid table (a -> a) or the output's softmax table (a -> g): the inference
    tables (`quant.activations`, the golden trainer's too), as their memory files and value."""
    if activation == "softmax":
        exp = acts.softmax_table(fi, fo, n)
        bits, values, table_type = exp.frac + 2, exp.values, f"TableRom {len(exp.values)} (Signed {exp.frac + 2})"
    else:
        t = acts.table(activation, fi, fo)
        bits, values, table_type = fo.bits, t.values, f"TableRom {len(t.values)} ({fo.clash_type})"
    words = tuple(format(v & ((1 << bits) - 1), f"0{bits}b") for v in values)
    return ActivationCode(name, False, "", "", "", name, table_type, words)


@dataclass(frozen=True)
class CrossEntropyLoss:
    """Softmax with cross-entropy at the output (K2C.Train.softmaxLoss): the host's target is
    the label, a word; the answer the predicted class and, training, the label's probability
    (raw, the last layer's gradient format)."""

    last: LayerCore
    template: ClassVar[str] = "loss_crossentropy.hs.j2"

    @property
    def classes(self) -> int:
        return self.last.n_out

    @property
    def target_words(self) -> int:
        return 1

    @property
    def answer_words(self) -> int:
        return 2

    def answer_count(self, training: bool) -> int:
        return 2 if training else 1

    def latency(self) -> int:
        """K2C.Train's LossLatency: the last output word to the first gradient (the maximum
        and the exponentials a class a cycle, the first division)."""
        return 2 * self.classes + self.last.f.g.frac + 8

    def gradients(self) -> int:
        """The first gradient to the last (a division of g.frac + 1 quotient bits a class)."""
        return (self.classes - 1) * (self.last.f.g.frac + 3)

    def target(self, target: object) -> list[int]:
        return [int(np.asarray(target))]

    def targets_of(self, y: np.ndarray) -> np.ndarray:
        """The samples' targets as the trainers take them: the labels."""
        return y.reshape(len(y), -1)[:, 0].astype(np.int64)

    def answer(self, z: np.ndarray, y: np.ndarray, target: object, training: bool = True) -> list[int]:
        """The answer the golden trainer's outputs of a sample give (z, y: the last layer's)."""
        cls = int(np.argmax(z))
        return [cls, int(y[int(np.asarray(target))])] if training else [cls]

    @property
    def target_text(self) -> str:
        return "its label"

    @property
    def answer_text(self) -> str:
        return f"training, the predicted class then the label's probability (raw, format {self.last.f.g}); inference, the class"


@dataclass(frozen=True)
class MseLoss:
    """The mean squared error at the output (K2C.Train.mseLoss): the host's targets are the
    outputs' (raw, the last layer's activation format, a word each); the answer is the outputs."""

    last: LayerCore
    template: ClassVar[str] = "loss_mse.hs.j2"

    @property
    def target_words(self) -> int:
        return self.last.n_out

    @property
    def answer_words(self) -> int:
        return self.last.n_out

    def answer_count(self, training: bool) -> int:
        return self.last.n_out

    def latency(self) -> int:
        return MSE_LATENCY

    def gradients(self) -> int:
        return self.last.n_out - 1

    @property
    def shift(self) -> int:
        """The fraction of `(y - t) f'(y)` minus the gradient format's."""
        f = self.last.f
        deriv = 2 * f.a.frac if self.last.activation in ("tanh", "sigmoid") else 0
        return f.a.frac + deriv - f.g.frac

    @property
    def deriv(self) -> str:
        return deriv_expr(self.last.activation, self.last.f.a.frac)

    def target(self, target: object) -> list[int]:
        """Float targets, quantized to the outputs' format (as the golden trainer does)."""
        t = np.asarray(target, dtype=np.float64).reshape(-1)
        if t.size != self.last.n_out:
            raise K2CError(f"{t.size} targets for the {self.last.n_out} outputs")
        return [int(v) for v in quantize(t, self.last.f.a)]

    def targets_of(self, y: np.ndarray) -> np.ndarray:
        """The samples' targets as the trainers take them: a row of the outputs' each."""
        return y.reshape(len(y), -1).astype(np.float64)

    def answer(self, z: np.ndarray, y: np.ndarray, target: object, training: bool = True) -> list[int]:
        return [int(v) for v in np.ravel(y)]

    @property
    def target_text(self) -> str:
        return f"its {self.last.n_out} targets (raw, format {self.last.f.a})"

    @property
    def answer_text(self) -> str:
        return f"the {self.last.n_out} outputs (raw, format {self.last.f.a})"


@dataclass(frozen=True)
class TrainCore:
    """A training core for a golden trainer's network, its formats and SGD (any batch, with or
    without momentum), `pe` outputs a cycle per layer."""

    trainer: GoldenTrainer
    pes: tuple[int, ...]

    def __post_init__(self) -> None:
        t = self.trainer
        if len(self.pes) != len(t.net.layers):
            raise K2CError(f"{len(self.pes)} parallelism values for {len(t.net.layers)} layers")
        for layer, pe in zip(t.net.layers, self.pes):
            if not 1 <= pe <= layer.n_out:
                raise K2CError(f"layer '{layer.name}': parallelism {pe} is not within 1 to its {layer.n_out} outputs")
        widest = max(max(f.a.bits, f.w.bits, f.b.bits, f.g.bits) for f in t.formats)
        if t.momentum.raw:
            widest = max(widest, *(f.v.bits for f in t.formats))
        if max(widest, t.x_format.bits) > WORD_BITS:
            raise K2CError(f"training core: formats of up to {WORD_BITS} bits (the host's words)")
        for layer, f, x in zip(t.net.layers, t.formats, [t.x_format, *(f.a for f in t.formats[:-1])]):
            if x.frac + f.w.frac < f.b.frac:
                raise K2CError(
                    f"layer '{layer.name}': bias format {f.b} has more fraction bits than input times weight "
                    f"({x.frac + f.w.frac})"
                )

    @property
    def layers(self) -> list[LayerCore]:
        t = self.trainer
        names = [n if n not in TEMPLATE_NAMES else f"{n}_layer" for n in haskell_names([x.name for x in t.net.layers])]
        out = []
        for i, (layer, f, pe) in enumerate(zip(t.net.layers, t.formats, self.pes)):
            prev = t.net.layers[i - 1] if i else None
            out.append(
                LayerCore(
                    name=layer.name,
                    fn=names[i],
                    n_in=layer.n_in,
                    n_out=layer.n_out,
                    pin=self.pes[i - 1] if i else 1,
                    pe=pe,
                    activation=layer.activation,
                    deriv=prev.activation if prev is not None else "linear",
                    x=t.x_format if i == 0 else t.formats[i - 1].a,
                    f=f,
                    g_prev=t.formats[i - 1].g if i else None,
                    scale_raw=t.scale.raw,
                    scale_frac=t.scale.frac,
                    momentum=t.momentum if t.momentum.raw else None,
                    batch=t.sgd.batch,
                )
            )
        return out

    @property
    def classes(self) -> int:
        return self.trainer.net.layers[-1].n_out

    @property
    def loss(self) -> CrossEntropyLoss | MseLoss:
        last = self.layers[-1]
        return CrossEntropyLoss(last) if self.trainer.net.loss == "categorical_crossentropy" else MseLoss(last)

    @property
    def multipliers(self) -> int:
        return sum(layer.multipliers for layer in self.layers)

    @property
    def table_layers(self) -> list[LayerCore]:
        """The layers whose activation is a table (tanh, sigmoid)."""
        return [layer for layer in self.layers if layer.activation in ("tanh", "sigmoid")]

    @property
    def memories(self) -> list[Memory]:
        """Every layer's memories, then the tables (tanh / sigmoid, the softmax's exponentials),
        each table slice a memory of its own (`table_slices`)."""
        out = [m for layer in self.layers for m in layer.memories]
        tables: list[tuple[str, int, int]] = []
        for layer in self.table_layers:
            t = acts.table(layer.activation, layer.f.a, layer.f.a)
            tables.append((f"{layer.name}'s {layer.activation} table", len(t.values), layer.f.a.bits))
        if isinstance(self.loss, CrossEntropyLoss):
            last = self.layers[-1]
            exp = acts.softmax_table(last.f.a, last.f.g, self.classes)
            tables.append((f"{last.name}'s softmax table", len(exp.values), exp.frac + 2))
        for name, words, bits in tables:
            out += [Memory(name, words, w, rom=True) for w in table_slices(words, bits)]
        return out

    @property
    def block_rams(self) -> int:
        """DP16KD blocks of the core's memories as yosys maps them (`Memory.block_rams`)."""
        return sum(m.block_rams for m in self.memories)

    def check_block_rams(self, available: int, part: str) -> None:
        """Refuse a core whose memories take more block RAM than `part` has, naming the largest."""
        used = self.block_rams
        if used > available:
            big = sorted(self.memories, key=lambda m: -m.block_rams)[:3]
            parts = ", ".join(f"{m.name} {m.block_rams}" for m in big if m.block_rams)
            raise K2CError(
                f"training core: its memories take {used} DP16KD ({parts}), more than the {part}'s "
                f"{available} (narrower formats, batch 1 or no momentum take fewer)"
            )

    def step_cycles(self) -> int:
        """Cycles of one training step, from its command word taken to the core taking the next
        (words back to back, the answer taken as it leaves): the command and the input words, each
        layer's forward pass and its output's latency, the loss, each layer's backward pass and
        its gradient's latency, the first layer's last writes."""
        layers = self.layers
        t = 2 + layers[0].in_words  # the command, the values, their register
        for layer in layers:
            t += layer.ops + FWD_LATENCY
        loss = self.loss
        t += -1 + loss.latency() + loss.gradients() + 1
        for layer in reversed(layers[1:]):
            t += layer.ops + bwd_latency(layer.pe)
        return t + layers[0].ops + layers[0].drain_cycles + 1

    def answer_cycle(self) -> int:
        """Cycles from a sample's command word to its answer's first word."""
        layers = self.layers
        t = 2 + layers[0].in_words + sum(layer.ops + FWD_LATENCY for layer in layers)
        loss = self.loss
        return t - 1 + loss.latency() + loss.gradients() + 1


def layer_cost(core_layer_index: int, n_in: int, n_out: int, pe: int) -> int:
    """A layer's share of a training step's cycles at `pe` outputs a cycle: its forward and
    backward passes, and (below the first layer) its gradient's latency (`TrainCore.step_cycles`)."""
    ops = n_in * -(-n_out // pe)
    return 2 * ops + (bwd_latency(pe) if core_layer_index else 0)


def parallelism_within(trainer: GoldenTrainer, budget: int) -> tuple[int, ...]:
    """The outputs a cycle of every layer that make a training step the shortest within
    `budget` multipliers (two a lane, four with a momentum's products: `LayerCore.multipliers`):
    the step's cycles are a sum over the layers, so a knapsack over the budget (for each layer
    only the smallest `pe` of each group count)."""
    layers = trainer.net.layers
    lane = 4 if trainer.momentum.raw not in (0, 1) else 2
    if budget < lane * len(layers):
        raise K2CError(
            f"a multiplier budget of {budget}: the core needs at least {lane * len(layers)} ({lane} a layer)"
        )
    # best[m]: (cycles, pes) of the layers so far within m multipliers
    best: dict[int, tuple[int, tuple[int, ...]]] = {0: (0, ())}
    for i, layer in enumerate(layers):
        choices = sorted({-(-layer.n_out // g) for g in range(1, layer.n_out + 1)})
        nxt: dict[int, tuple[int, tuple[int, ...]]] = {}
        for used, (cycles, pes) in best.items():
            for pe in choices:
                m = used + lane * pe
                if m > budget:
                    break
                c = cycles + layer_cost(i, layer.n_in, layer.n_out, pe)
                if m not in nxt or c < nxt[m][0]:
                    nxt[m] = (c, (*pes, pe))
        best = nxt
    return min(best.values())[1]
