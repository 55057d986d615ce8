"""A constant matrix times a vector as an adder graph: the multiplier-free, one-vector-a-cycle
form of a layer whose weights are constants in the hardware (the latency strategy).

da4ml's CMVM optimiser (`da4ml.cmvm.solve`) turns the integer kernel into shift-and-add
operations with shared subexpressions; `AdderGraph` is that solution in the integers the
hardware holds, every node `p + q` or `p - q` of two shifted earlier nodes, with its exact
range (so its exact width) and its adder level. A register after every `levels` adder levels
(`Schedule`) gives the latency in cycles; one vector enters every cycle.

The arithmetic is the engine's (`kinds.engine.accumulate`): the exact sum `x @ W` of raw
integers, before the bias and the one requantization; only the structure differs.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import da4ml
import numpy as np
from da4ml.cmvm import solve as da4ml_solve
from da4ml.types import Pipeline

from keras2clash.backend.haskell import kind_template, vec_literal
from keras2clash.jsontypes import Json, JsonObject

HASKELL = kind_template("cmvm.hs.j2")

ADD, SUB, INPUT = 0, 1, -1
"""da4ml's opcodes of the operations a linear solution holds."""


@dataclass(frozen=True)
class Term:
    """A node's integer value times `2^shift`, negated when `negate`."""

    node: int
    shift: int = 0
    negate: bool = False


@dataclass(frozen=True)
class Node:
    """An input (`a` is None) or `a + b` / `a - b` (`subtract`) of two earlier nodes, in the
    integer `value / 2^lsb`: both operands are shifted left to the node's lsb, never right.
    `coeffs` states the integer over the inputs (exact: its range over the input box is
    the node's range, hence its width)."""

    name: str
    level: int
    lsb: int
    coeffs: tuple[int, ...]
    low: int
    high: int
    a: Term | None = None
    b: Term | None = None
    subtract: bool = False

    @property
    def width(self) -> int:
        """Bits of the two's complement integer that holds every value of the node."""
        return signed_width(self.low, self.high)


def signed_width(low: int, high: int) -> int:
    """The fewest bits of a Signed holding [low, high]."""
    return max(int(high).bit_length(), int(-low - 1).bit_length() if low < 0 else 0) + 1


def _box(coeffs: Sequence[int], low: Sequence[int], high: Sequence[int]) -> tuple[int, int]:
    """The exact range of sum(c_j x_j) over low_j <= x_j <= high_j."""
    lo = sum(c * (low[j] if c > 0 else high[j]) for j, c in enumerate(coeffs))
    hi = sum(c * (high[j] if c > 0 else low[j]) for j, c in enumerate(coeffs))
    return lo, hi


@dataclass(frozen=True)
class AdderGraph:
    """Inputs (nodes 0 .. n_in-1), adders, and each output as a term of a node (None: 0)."""

    nodes: tuple[Node, ...]
    outputs: tuple[Term | None, ...]
    n_in: int
    low: tuple[int, ...]
    high: tuple[int, ...]

    @property
    def adders(self) -> tuple[Node, ...]:
        return self.nodes[self.n_in :]

    @property
    def depth(self) -> int:
        """Adder levels on the longest path from an input to an output."""
        return max((self.nodes[t.node].level for t in self.outputs if t is not None), default=0)

    @property
    def adder_bits(self) -> int:
        """The adders' widths summed: the full-adder cells (an ECP5 CCU2C holds two)."""
        return sum(node.width for node in self.adders)

    def carry_bits(self) -> int:
        """Bits that need a full adder: of each adder's width, the low bits below its shifted
        operand only pass the other operand through."""
        total = 0
        for node in self.adders:
            assert node.a is not None and node.b is not None
            shifts = [self.nodes[t.node].lsb + t.shift - node.lsb for t in (node.a, node.b)]
            total += node.width - max(shifts)
        return total

    def carry_cells(self) -> int:
        """ECP5 CCU2C cells (two full adders each) when every adder is its own carry chain
        (a register after every level; `Schedule`)."""
        cells = 0
        for node in self.adders:
            assert node.a is not None and node.b is not None
            shifts = [self.nodes[t.node].lsb + t.shift - node.lsb for t in (node.a, node.b)]
            cells += -(-(node.width - max(shifts)) // 2)
        return cells

    def term_coeffs(self, term: Term) -> list[int]:
        """A term's value over the inputs (its shift may be negative: the value is an integer)."""
        node = self.nodes[term.node]
        scale = node.lsb + term.shift
        sign = -1 if term.negate else 1
        if scale >= 0:
            return [sign * (c << scale) for c in node.coeffs]
        assert all(c % (1 << -scale) == 0 for c in node.coeffs), "a term with fraction bits"
        return [sign * (c >> -scale) for c in node.coeffs]

    def kernel(self) -> np.ndarray:
        """The (n_in, n_out) integer matrix the graph multiplies by."""
        cols = [self.term_coeffs(t) if t is not None else [0] * self.n_in for t in self.outputs]
        return np.array(cols, dtype=object).T.reshape(self.n_in, len(self.outputs))

    def output_range(self) -> tuple[int, int]:
        """The exact range of every output together (the accumulator's)."""
        ranges = [_box(self.term_coeffs(t), self.low, self.high) for t in self.outputs if t is not None]
        return min((r[0] for r in ranges), default=0), max((r[1] for r in ranges), default=0)

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        """(N, n_in) raw integers -> (N, n_out), node by node as the hardware adds (Python
        integers: exact whatever the widths)."""
        x = np.asarray(x).astype(object)
        values: list[np.ndarray] = [x[:, j] for j in range(self.n_in)]
        for node in self.adders:
            assert node.a is not None and node.b is not None
            a = values[node.a.node] << (self.nodes[node.a.node].lsb + node.a.shift - node.lsb)
            b = values[node.b.node] << (self.nodes[node.b.node].lsb + node.b.shift - node.lsb)
            values.append(a - b if node.subtract else a + b)
        cols = []
        for term in self.outputs:
            if term is None:
                cols.append(np.zeros(len(x), dtype=object))
                continue
            scale = self.nodes[term.node].lsb + term.shift
            v = values[term.node] << scale if scale >= 0 else values[term.node] >> -scale
            cols.append(-v if term.negate else v)
        return np.stack(cols, axis=1)


class _Builder:
    """Flattens da4ml's solution (one or two cascaded stages) into one AdderGraph."""

    def __init__(self, low: Sequence[int], high: Sequence[int]) -> None:
        self.low, self.high = tuple(int(v) for v in low), tuple(int(v) for v in high)
        n = len(self.low)
        self.nodes: list[Node] = [
            Node(f"x{j}", 0, 0, tuple(int(i == j) for i in range(n)), self.low[j], self.high[j]) for j in range(n)
        ]
        self.memo: dict[tuple[Term, Term, bool], int] = {}

    def add(self, a: Term, b: Term, subtract: bool) -> Term:
        """a + b (or a - b), as a node with a positive first operand (a negated result when
        both are negative), aligned to the finer lsb of the two."""
        if subtract:
            b = Term(b.node, b.shift, not b.negate)
        negate = a.negate and b.negate
        if negate:
            a, b = Term(a.node, a.shift), Term(b.node, b.shift)
        elif a.negate:
            a, b = b, a
        sub = b.negate
        b = Term(b.node, b.shift)
        key = (a, b, sub)
        if key not in self.memo:
            self.memo[key] = self.node(a, b, sub)
        return Term(self.memo[key], 0, negate)

    def node(self, a: Term, b: Term, sub: bool) -> int:
        """A new node a + b (a - b), its exact coefficients, range and level: its index."""
        na, nb = self.nodes[a.node], self.nodes[b.node]
        lsb = min(na.lsb + a.shift, nb.lsb + b.shift)
        sa, sb = na.lsb + a.shift - lsb, nb.lsb + b.shift - lsb
        sign = -1 if sub else 1
        coeffs = tuple((ca << sa) + sign * (cb << sb) for ca, cb in zip(na.coeffs, nb.coeffs, strict=True))
        low, high = _box(coeffs, self.low, self.high)
        level = 1 + max(na.level, nb.level)
        name = f"t{len(self.nodes) - len(self.low)}"
        self.nodes.append(Node(name, level, lsb, coeffs, low, high, a, b, sub))
        return len(self.nodes) - 1

    def graph(self, outputs: Sequence[Term | None]) -> AdderGraph:
        return AdderGraph(tuple(self.nodes), tuple(outputs), len(self.low), self.low, self.high)

    def stage(self, sol: object, inputs: Sequence[Term | None]) -> list[Term | None]:
        """One CombLogic of the cascade on the given input terms -> its output terms."""
        buf: list[Term | None] = []
        for op in sol.ops:  # type: ignore[attr-defined]
            if op.opcode == INPUT:
                src = inputs[op.id0]
                shift = int(sol.inp_shifts[op.id0])  # type: ignore[attr-defined]
                buf.append(None if src is None else Term(src.node, src.shift + shift, src.negate))
            elif op.opcode in (ADD, SUB):
                a, b = buf[op.id0], buf[op.id1]
                assert a is not None and b is not None, "an adder on a constant zero"
                buf.append(self.add(a, Term(b.node, b.shift + int(op.data), b.negate), op.opcode == SUB))
            else:
                raise ValueError(f"da4ml operation {op.opcode} in a linear solution")
        outs: list[Term | None] = []
        for idx, shift, neg in zip(sol.out_idxs, sol.out_shifts, sol.out_negs, strict=True):  # type: ignore[attr-defined]
            src = buf[idx] if idx >= 0 else None
            outs.append(None if src is None else Term(src.node, src.shift + int(shift), src.negate != bool(neg)))
        return outs


def from_da4ml(pipeline: Pipeline, low: Sequence[int], high: Sequence[int]) -> AdderGraph:
    """da4ml's cascaded solution on raw integer inputs in [low, high] as one AdderGraph."""
    builder = _Builder(low, high)
    terms: list[Term | None] = [Term(j) for j in range(len(builder.low))]
    for sol in pipeline.solutions:
        terms = builder.stage(sol, terms)
    return builder.graph(terms)


def _term_json(term: Term | None) -> Json:
    return None if term is None else [term.node, term.shift, term.negate]


def _term_from_json(value: Json) -> Term | None:
    if value is None:
        return None
    assert isinstance(value, list) and len(value) == 3
    node, shift, negate = value
    assert isinstance(node, int) and isinstance(shift, int) and isinstance(negate, bool)
    return Term(node, shift, negate)


def graph_to_json(graph: AdderGraph) -> JsonObject:
    """The graph's structure (each adder's operands, the outputs) and its input box: what
    `graph_from_json` rebuilds the exact ranges and levels from."""
    adders: list[Json] = []
    for node in graph.adders:
        adders.append([_term_json(node.a), _term_json(node.b), node.subtract])
    return {
        "low": list(graph.low),
        "high": list(graph.high),
        "adders": adders,
        "outputs": [_term_json(t) for t in graph.outputs],
    }


def graph_from_json(data: Mapping[str, Json]) -> AdderGraph:
    low, high, adders, outputs = (data[key] for key in ("low", "high", "adders", "outputs"))
    assert isinstance(low, list) and isinstance(high, list) and isinstance(adders, list) and isinstance(outputs, list)
    builder = _Builder([int(v) for v in low if isinstance(v, int)], [int(v) for v in high if isinstance(v, int)])
    for item in adders:
        assert isinstance(item, list)
        a, b, sub = _term_from_json(item[0]), _term_from_json(item[1]), item[2]
        assert a is not None and b is not None and isinstance(sub, bool)
        builder.node(a, b, sub)
    return builder.graph([_term_from_json(t) for t in outputs])


def csd_digits(kernel: np.ndarray) -> np.ndarray:
    """Nonzero digits of each weight in canonical signed digits (its non-adjacent form):
    popcount(|w| xor 3|w|)."""
    magnitude = np.abs(np.asarray(kernel).astype(object))
    return np.vectorize(lambda w: bin(w ^ (3 * w)).count("1"), otypes=[np.int64])(magnitude)


def adders_without_sharing(kernel: np.ndarray) -> int:
    """Adders of every output summed from its CSD digits alone, before da4ml shares any
    subexpression: an upper estimate known without solving."""
    digits = csd_digits(kernel).sum(axis=0)
    return int(np.maximum(digits - 1, 0).sum())


def least_depth(kernel: np.ndarray) -> int:
    """Adder levels of a balanced tree over the CSD digits of the output with the most: the
    depth da4ml aims at with delay 0, an estimate only: its solution can be shallower
    (sharing) or deeper (x @ [-3, 11, 14] on 1-bit inputs: 4 levels against 3), so the
    hardware's depth is always the solved graph's."""
    most = int(csd_digits(kernel).sum(axis=0).max(initial=0))
    return max(most - 1, 0).bit_length()


def solve(kernel: np.ndarray, low: Sequence[int], high: Sequence[int], delay: int = 2) -> AdderGraph:
    """The adder graph of `x @ kernel` for raw integer inputs low_j <= x_j <= high_j; `delay`:
    adder levels da4ml may add over the fewest possible to share more (-1: no bound).
    Costs are counted in adder bits (da4ml's adder_size 1), depths in adders."""
    kernel = np.asarray(kernel)
    qintervals = [(float(lo), float(hi), 1.0) for lo, hi in zip(low, high, strict=True)]
    pipeline = da4ml_solve(
        np.ascontiguousarray(kernel, dtype=np.float32),
        qintervals=qintervals,
        hard_dc=delay,
        adder_size=1,
        carry_size=-1,
    )
    graph = from_da4ml(pipeline, low, high)
    if not np.array_equal(graph.kernel(), kernel.astype(object)):
        raise ValueError("the adder graph does not multiply by the kernel")
    return graph


SOLVER = f"da4ml {da4ml.__version__}"
"""What a cached solution was solved with: part of its key."""

_solved: dict[str, AdderGraph] = {}


def solution_key(kernel: np.ndarray, low: Sequence[int], high: Sequence[int], delay: int) -> str:
    """The sha256 of everything a solution depends on: the kernel's values and shape, the input
    box, the delay and the solver's version."""
    digest = hashlib.sha256(SOLVER.encode())
    digest.update(json.dumps([list(np.shape(kernel)), [int(v) for v in np.ravel(kernel)]]).encode())
    digest.update(json.dumps([[int(v) for v in low], [int(v) for v in high], delay]).encode())
    return digest.hexdigest()


def solve_cached(
    kernel: np.ndarray,
    low: Sequence[int],
    high: Sequence[int],
    delay: int = 2,
    what: str = "",
    cache: Path | None = None,
) -> AdderGraph:
    """`solve`, kept: in this process, and as JSON under `cache`/cmvm/<solution_key> (the
    solver is deterministic; a large layer takes it a minute). A line on stderr says which
    layer (`what`) is being solved and how long it took."""
    key = solution_key(kernel, low, high, delay)
    if key in _solved:
        return _solved[key]
    path = cache / "cmvm" / f"{key}.json" if cache is not None else None
    graph = None
    if path is not None and path.is_file():
        try:
            graph = graph_from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, AssertionError, IndexError):
            graph = None  # a damaged entry is solved again
        if graph is not None and not np.array_equal(graph.kernel(), np.asarray(kernel).astype(object)):
            graph = None
    if graph is None:
        start = time.monotonic()
        print(
            f"solving the adder graph of {what or 'a matrix'} ({kernel.shape[0]} x {kernel.shape[1]})", file=sys.stderr
        )
        graph = solve(kernel, low, high, delay)
        print(
            f"  {len(graph.adders):,} adders in {graph.depth} level(s), {time.monotonic() - start:.1f} s",
            file=sys.stderr,
        )
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(graph_to_json(graph)))
                os.replace(tmp, path)
            except OSError:
                pass  # the cache is best effort
    _solved[key] = graph
    return graph


@dataclass(frozen=True)
class Schedule:
    """The graph cut into `stages` register stages of `levels` adder levels each: stage s
    (1-based) computes the nodes of levels (s-1)*levels+1 .. s*levels and registers every
    value a later stage reads; the last stage also forms the outputs and applies the
    function the generated `graph` is given (a layer's finish: its bias, requantization and
    activation, counted as `finish` more levels after the graph's own). Latency: `stages`
    cycles; one vector a cycle."""

    graph: AdderGraph
    levels: int
    finish: int = 0

    @property
    def stages(self) -> int:
        return max(1, -(-(self.graph.depth + self.finish) // self.levels))

    def stage_of(self, node: Node) -> int:
        return 0 if node.level == 0 else -(-node.level // self.levels)

    def live(self) -> list[list[int]]:
        """The nodes registered after each stage (index s-1 for stage s), in node order."""
        last_use = {i: self.stage_of(n) for i, n in enumerate(self.graph.nodes)}
        for node in self.graph.adders:
            for t in (node.a, node.b):
                assert t is not None
                last_use[t.node] = max(last_use[t.node], self.stage_of(node))
        for t in self.graph.outputs:
            if t is not None:
                last_use[t.node] = self.stages + 1
        return [
            [i for i, n in enumerate(self.graph.nodes) if self.stage_of(n) <= s < last_use[i]]
            for s in range(1, self.stages + 1)
        ]

    def register_bits(self) -> int:
        """Data bits in the registers between stages, each value at its own width (the last
        stage's register holds what the function given to the graph makes of the outputs)."""
        return sum(self.graph.nodes[i].width for live in self.live()[:-1] for i in live)


def _operand(graph: AdderGraph, node: Node, term: Term) -> tuple[str, int]:
    src = graph.nodes[term.node]
    return src.name, src.lsb + term.shift - node.lsb


def haskell_module(
    module: str,
    function: str,
    kernel: np.ndarray,
    schedule: Schedule,
    *,
    in_width: int | None = None,
    out_width: int | None = None,
    out_shift: int = 0,
    bias: Sequence[int] | None = None,
    bias_width: int | None = None,
    bias_note: str = "",
    doc: str = "",
) -> str:
    """A Clash module: `function` (the pipelined graph on a valid-tagged vector), the weights
    it multiplies by, one pure function per register stage, and `type Depth` (its stages).
    A layer's module (kinds.engine) gives its inputs' container width `in_width`, its
    accumulator's width `out_width`, the products' shift into the accumulator's fraction bits
    `out_shift`, and its `bias` (raw, in the accumulator's bits; `bias_width` bits, the
    accumulator's by default; `bias_note` says what it holds beside the bias); by default the
    inputs and products are as wide as their ranges."""
    graph = schedule.graph
    live = schedule.live()
    inputs = list(range(graph.n_in))
    first_width = in_width if in_width is not None else max(graph.nodes[i].width for i in inputs)
    stages = []
    for s in range(1, schedule.stages + 1):
        before = inputs if s == 1 else live[s - 2]
        nodes = [n for n in graph.adders if schedule.stage_of(n) == s]
        equations = []
        for node in nodes:
            assert node.a is not None and node.b is not None
            (a, sa), (b, sb) = _operand(graph, node, node.a), _operand(graph, node, node.b)
            equations.append((node.name, a, sa, "-" if node.subtract else "+", b, sb, node.width, node.level))
        after = live[s - 1]
        width_in = first_width if s == 1 else max(graph.nodes[i].width for i in before)
        width_out = max((graph.nodes[i].width for i in after), default=1)
        stages.append(
            {
                "index": s,
                "inputs": [graph.nodes[i].name for i in before],
                "width_in": width_in,
                "equations": equations,
                "outputs": [graph.nodes[i].name for i in after],
                "width_out": width_out,
            }
        )
    low, high = graph.output_range()
    width = out_width if out_width is not None else signed_width(low << out_shift, high << out_shift)
    outputs = []
    for term in graph.outputs:
        if term is None:
            outputs.append(("0", 0, False))
        else:
            node = graph.nodes[term.node]
            outputs.append((node.name, node.lsb + term.shift + out_shift, term.negate))
    rows = [vec_literal(kernel[:, k]) for k in range(kernel.shape[1])]
    return HASKELL.module(
        module=module,
        function=function,
        n_in=graph.n_in,
        n_out=len(graph.outputs),
        in_width=first_width,
        out_width=width,
        weight_width=max(signed_width(int(kernel.min(initial=0)), int(kernel.max(initial=0))), 2),
        rows=rows,
        stages=stages,
        last_width=stages[-1]["width_out"],
        outputs=outputs,
        adders=len(graph.adders),
        depth=graph.depth,
        levels=schedule.levels,
        latency=schedule.stages,
        bias=vec_literal(np.asarray(bias)) if bias is not None else "",
        bias_width=bias_width if bias_width is not None else width,
        bias_note=bias_note,
        doc=doc,
        out_shift=out_shift,
        finish=schedule.finish,
    )


def simulation_main(module: str, function: str, schedule: Schedule, inputs: Sequence[np.ndarray | None]) -> str:
    """A Main module printing `function`'s output in every cycle for `inputs` (None: no
    vector that cycle), after one cycle of reset; `len(inputs) + latency + 1` cycles."""
    graph = schedule.graph
    return HASKELL.simulation(
        module=module,
        function=function,
        n_in=graph.n_in,
        in_width=max(graph.nodes[i].width for i in range(graph.n_in)),
        inputs=[vec_literal(x) if x is not None else "" for x in inputs],
        cycles=len(inputs) + schedule.stages + 1,
    )


def top_module(module: str, function: str, schedule: Schedule) -> str:
    """A Top module exposing `function` alone to `clash --verilog`."""
    graph = schedule.graph
    low, high = graph.output_range()
    return HASKELL.top(
        module=module,
        function=function,
        n_in=graph.n_in,
        in_width=max(graph.nodes[i].width for i in range(graph.n_in)),
        n_out=len(graph.outputs),
        out_width=signed_width(low, high),
    )
