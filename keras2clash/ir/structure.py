"""The network's shape as the hardware builds it: chains and parallel branches, or wiring.

The hardware composes stream blocks left to right (`|>`); a merge is built as a fork of
one tensor into parallel branches, each ending in a FIFO, joined by the merge layer
(`K2C.Branch.branches`). So a graph is emitted as a `Chain` of items, each a layer name
or a `Parallel` of branch chains that all start at the same tensor (the fork) and are
followed, in the enclosing chain, by the merge layer that joins them.

The fork of a merge is the nearest tensor that every path from the network input to the
merge passes through (its immediate dominator). Residual blocks, Inception blocks and
nestings of them decompose this way (series-parallel graphs). A graph in which some
branch also feeds a layer outside its fork/merge pair cannot: `structure` names the layer
whose output would be needed in two places.

Any other DAG (a tensor read again past a merge, as in DenseNet blocks, or forks from
several depths into one merge) is built as explicit wiring (`Dag`): runs of layers composed
with `|>`, a fork wherever a tensor has several readers and a FIFO on every input of a merge.
`network_shape` gives the series-parallel `Chain` where there is one (its Haskell reads as a
composition) and the `Dag` otherwise. A network of several outputs is a `Dag` with several
sinks: each output leaves through its own port.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from keras2clash.errors import K2CError


class Node(Protocol):
    """What the structure reads of a layer (an IR record or a plan): its name and producers."""

    @property
    def name(self) -> str: ...

    @property
    def inputs(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class Parallel:
    """Branches forked from one tensor; the merge layer after it joins their outputs in order
    (branch i computes the merge's input i)."""

    branches: tuple[Chain, ...]


@dataclass(frozen=True)
class Chain:
    """Items composed left to right: layer names and Parallel blocks (empty: the identity)."""

    items: tuple[str | Parallel, ...]

    def layer_names(self) -> list[str]:
        names: list[str] = []
        for item in self.items:
            if isinstance(item, Parallel):
                for branch in item.branches:
                    names.extend(branch.layer_names())
            else:
                names.append(item)
        return names


def _dominators(nodes: Sequence[Node], source: str) -> dict[str, list[str]]:
    """Each tensor's dominators, as a list from the source down to the tensor itself."""
    dom: dict[str, list[str]] = {source: [source]}
    for node in nodes:
        paths = [dom[t] for t in node.inputs]
        common = [t for t in paths[0] if all(t in p for p in paths[1:])]
        dom[node.name] = [*common, node.name]
    return dom


class NotSeriesParallel(K2CError):
    """The graph does not decompose into fork/merge pairs (`structure`)."""


def structure(nodes: Sequence[Node], source: str, sink: str) -> Chain:
    """The chain of the whole network, from the input tensor `source` to `sink`.

    `nodes` are in topological order. Raises K2CError when the graph is not series-parallel.
    """
    by_name = {node.name: node for node in nodes}
    dom = _dominators(nodes, source)

    def chain(tensor: str, start: str) -> list[str | Parallel]:
        if tensor == start:
            return []
        node = by_name[tensor]
        if len(node.inputs) == 1:
            return [*chain(node.inputs[0], start), node.name]
        paths = [dom[t] for t in node.inputs]
        fork = [t for t in paths[0] if all(t in p for p in paths[1:])][-1]
        if start not in dom[fork]:
            raise _not_series_parallel(node.name, start)
        branches = tuple(Chain(tuple(chain(t, fork))) for t in node.inputs)
        return [*chain(fork, start), Parallel(branches), node.name]

    result = Chain(tuple(chain(sink, source)))
    names = result.layer_names()
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise NotSeriesParallel(
                f"layer '{name}' feeds branches that are not joined by one merge layer: "
                "keras2clash builds branches that fork from one tensor and join at one merge "
                "(residual and Inception blocks, nested or in sequence), not a tensor used "
                "across such blocks"
            )
        seen.add(name)
    _check_all_used(nodes, seen)
    return result


def _check_all_used(nodes: Sequence[Node], used: set[str]) -> None:
    missing = [node.name for node in nodes if node.name not in used]
    if missing:
        raise K2CError(f"layer '{missing[0]}' does not lead to the model's output")


def _not_series_parallel(merge: str, start: str) -> K2CError:
    return NotSeriesParallel(
        f"merge layer '{merge}' joins branches that fork before '{start}': the branches "
        "cross another fork/merge block, which keras2clash cannot build as nested branches"
    )


def fifo_slots(chain: Chain, prefix: str = "") -> list[tuple[str, int]]:
    """Every branch FIFO, in emission order: (merge layer, input index)."""
    slots: list[tuple[str, int]] = []
    items = list(chain.items)
    for k, item in enumerate(items):
        if isinstance(item, Parallel):
            merge = items[k + 1]
            assert isinstance(merge, str)
            for i, branch in enumerate(item.branches):
                slots.extend(fifo_slots(branch))
                slots.append((merge, i))
    return slots


@dataclass(frozen=True)
class Run:
    """Layers composed left to right (`|>`): the first reads the tensor `source` (the network's
    input or a layer's output; None when the first is a merge, which reads its joined FIFOs),
    every later one reads the one before it, which has no other reader."""

    layers: tuple[str, ...]
    source: str | None

    @property
    def output(self) -> str:
        return self.layers[-1]


@dataclass(frozen=True)
class Dag:
    """A network that is not series-parallel, as wiring: its runs in topological order and,
    per tensor, its readers in that order, each a (layer, input index) pair. A tensor with
    several readers goes through a fork; a merge reads each input through a FIFO."""

    runs: tuple[Run, ...]
    readers: dict[str, tuple[tuple[str, int], ...]] = field(hash=False)
    source: str  # the first of `sources`
    sinks: tuple[str, ...]  # the network's outputs, in the model's order
    sources: tuple[str, ...] = ()  # the network's inputs, in the model's order

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.sources or (self.source,)

    def layer_names(self) -> list[str]:
        return [name for run in self.runs for name in run.layers]


def dag(nodes: Sequence[Node], source: str | tuple[str, ...], sink: str | tuple[str, ...]) -> Dag:
    """The wiring of the whole network from `source` (or inputs, a tuple) to its output
    `sink` (or outputs, a tuple), `nodes` in topological order."""
    sinks = (sink,) if isinstance(sink, str) else sink
    inputs = (source,) if isinstance(source, str) else source
    by_name = {node.name: node for node in nodes}
    used: set[str] = set()
    pending = list(sinks)
    while pending:  # the layers the output depends on
        name = pending.pop()
        if name in used or name not in by_name:
            continue
        used.add(name)
        pending.extend(by_name[name].inputs)
    _check_all_used(nodes, used)
    readers: dict[str, list[tuple[str, int]]] = {name: [] for name in inputs}
    for node in nodes:
        readers[node.name] = []
        for i, tensor in enumerate(node.inputs):
            readers[tensor].append((node.name, i))
    runs: list[list[str]] = []
    run_of: dict[str, list[str]] = {}
    sources: list[str | None] = []
    for node in nodes:
        read = node.inputs[0] if len(node.inputs) == 1 else None
        if read is not None and read not in inputs and len(readers[read]) == 1:
            run = run_of[read]
            run.append(node.name)
        else:
            run = [node.name]
            runs.append(run)
            sources.append(read)
        run_of[node.name] = run
    return Dag(
        runs=tuple(Run(tuple(run), src) for run, src in zip(runs, sources)),
        readers={tensor: tuple(r) for tensor, r in readers.items()},
        source=inputs[0],
        sinks=sinks,
        sources=inputs if len(inputs) > 1 else (),
    )


def network_shape(nodes: Sequence[Node], source: str | tuple[str, ...], sink: str | tuple[str, ...]) -> Chain | Dag:
    """The series-parallel chain of the network where it has one, otherwise its wiring (always
    for several inputs or outputs, `source` or `sink` a tuple)."""
    if not isinstance(source, str):
        if len(source) > 1:
            return dag(nodes, source, sink)
        (source,) = source
    if not isinstance(sink, str):
        if len(sink) > 1:
            return dag(nodes, source, sink)
        (sink,) = sink
    try:
        return structure(nodes, source, sink)
    except NotSeriesParallel:
        return dag(nodes, source, sink)
