"""The exact hardware model: cycles, multipliers and on-chip memory of a planned network.

Given the plans (`plan.make_plan`: layers, formats, each compute layer's `pe` and
`cycles`), this module predicts, without Clash:

- **latency**: cycles from the first beat of the first image being accepted to its output
  beat moving, through an empty pipeline (`Comparison.first_latency`);
- **initiation interval** (II): cycles between outputs in the steady state, images back to
  back, downstream always ready;
- the accept and output cycle of every image of a run (`SimResult.accept_cycle`,
  `.output_cycle`), so also the simulation's mean `interval` over N images;
- multipliers, multiply-accumulates, and memory bits per layer (ROM, line buffers, data
  registers) from the storage formulas in the blocks' haddocks.

# How: an event-level model of the pipeline

The emitted core is a chain of stream blocks (emitter.py): per conv2d `[Pad] -> Window ->
Engine`, per pool `[Pad] -> Window`, per flatten `Collect`, per dense `Engine`, then
combinational stages (argmax, AXI adapter: no registers). Each block is modelled per beat,
not per clock: it is told the cycle `V` from which a beat is offered to it and answers the
cycle `M` in which the beat moves (`M >= V`, the first cycle from `V` on in which the block
is ready; every block here, once ready, stays ready until it accepts). To know when it is
ready, a block asks its own consumer when its earlier outputs moved; it pushes each output
to the consumer as soon as the output's valid cycle is known. All rules below are the
blocks' haddocks (clash_lib/K2C/*.hs) rewritten as recurrences, exact for any downstream
stalls, not only for an always-ready sink:

- Engine (`K2C.Engine`, `S = G*b` steps per window, group ends every `b` steps): window
  `i` is accepted in `a_i = max(V_i, R_i)`; its last step is
  `d_i = max(a_i + S, E_(i-1) + S - b)` (the first group end stalls until result `i-1`
  leaves the register R for O); its result enters O in `E_i = max(d_i, M_(i-1))` and is
  valid from `E_i + 1`; the next window can be accepted from `R_(i+1) = d_i`, or `d_i + 1`
  when R is still full in cycle `d_i` (only possible with `G = 1`).
- Window (`K2C.Window`): window `k`, completed by the pixel accepted in `p_k`, is valid
  from `max(p_k, M_(k-1)) + 1`; the pixel after a completing pixel waits for that cycle
  (input ready is `not pending`).
- Pad (`K2C.Pad`): a wire inside the image; border pixels are offered the cycle after the
  previous output beat moved, without waiting for input.
- Collect (`K2C.Collect`): the vector is valid the cycle after its n-th beat; the next
  image's first beat waits until the cycle after the vector moves.
- Source (`K2C.Sim`): beats back to back, beat 0 offered in cycle 0 (the first cycle after
  reset), each next beat from the cycle after the previous one moved. Sink: always ready.

The event order is the same for every configuration of a network (it depends on the
geometry only), so the model runs on numpy arrays with one element per configuration:
`options` evaluates every configuration of the thesis CNN in one pass.

The steady state: before each image's first beat is offered, the model takes a snapshot
of every block's state relative to that cycle. When it equals the previous image's, the
run is periodic from then on (the model is deterministic and time-invariant), and the
distance between the two snapshots is the exact II.

Where it is not (or not claimed to be) exact:
- cycles: only the source and sink of `simulate` without `--gap-max` are modelled (beats back
  to back, output always ready); the block recurrences hold under any stalls, but the Sim's
  pseudo-random idle cycles and output stalls are not reproduced. A steady state whose period
  is longer than 4 images would raise an error (none seen).
- memory: data storage only (control counters and flags, a few bits per block, are left
  out); the R register's padding outputs (`G*p - F`) are left out as synthesis removes them.
  ROM + line-buffer bits equal Yosys' inferred memory bits; the register bits are an
  estimate of flip-flops (Yosys removes constant and unused bits and adds control).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from dataclasses import replace

from keras2clash.hw.plan import POOL_TYPES, LayerPlan
from keras2clash.ir.structure import Chain, Parallel, structure

NEG = -(1 << 40)
"""'Never' (a cycle before everything)."""
_CLAMP = -(1 << 39)


# --- the blocks as event recurrences ----------------------------------------------------


class _Sink:
    """The AXI master port with m_axis_tready always high: a result moves when valid."""

    def __init__(self) -> None:
        self.times: list[Any] = []

    def ready_at(self, v):
        return v

    def accept(self, v):
        self.times.append(v)
        return v

    def state(self):
        return []


class _Engine:
    """K2C.Engine (dense, and conv2d after its window generator)."""

    def __init__(self, steps, b, g1, down, mx) -> None:
        self.S, self.b, self.g1, self.down, self.mx = steps, b, g1, down, mx
        self.R = self.d = self.E = self.M = NEG

    def ready_at(self, v):
        return self.mx(v, self.R)

    def accept(self, v):
        mx = self.mx
        a = mx(v, self.R)
        d = mx(a + self.S, self.E + (self.S - self.b))
        e = mx(d, self.M)
        rfull = self.g1 & (self.E == d) & (self.E > self.d)
        self.R = d + rfull
        self.d, self.E = d, e
        self.M = self.down.accept(e + 1)
        return a

    def state(self):
        return [self.R, self.d, self.E, self.M]

    def set_state(self, values):
        self.R, self.d, self.E, self.M = values


class _Window:
    """K2C.Window (conv2d and pooling): line buffers, one window register, one output register."""

    def __init__(self, h, w, kh, kw, sh, sw, down, mx) -> None:
        rows = [r >= kh - 1 and (r - kh + 1) % sh == 0 for r in range(h)]
        cols = [x >= kw - 1 and (x - kw + 1) % sw == 0 for x in range(w)]
        self.completes = [rows[r] and cols[x] for r in range(h) for x in range(w)]
        self.n = h * w
        self.pos = 0
        self.down, self.mx = down, mx
        self.ready = NEG
        self.M = NEG

    def ready_at(self, v):
        return self.mx(v, self.ready)

    def accept(self, v):
        q = self.mx(v, self.ready)
        if self.completes[self.pos]:
            valid = self.mx(q, self.M) + 1
            self.M = self.down.accept(valid)
            self.ready = valid
        self.pos = (self.pos + 1) % self.n
        return q

    def state(self):
        return [self.ready, self.M]

    def set_state(self, values):
        self.ready, self.M = values


class _Pad:
    """K2C.Pad: a wire inside the image, border pixels emitted without waiting for input."""

    def __init__(self, h, w, pads, down, mx) -> None:
        top, bottom, left, right = pads
        self.hp, self.wp = top + h + bottom, left + w + right
        self.inside = [top <= r < top + h and left <= x < left + w
                       for r in range(self.hp) for x in range(self.wp)]
        self.last_inside = (top + h - 1) * self.wp + left + w - 1
        self.n = self.hp * self.wp
        self.pos = 0
        self.down, self.mx = down, mx
        self.M = -1  # the first output beat is offered in cycle 0

    def _border(self) -> None:
        self.M = self.down.accept(self.M + 1)
        self.pos = (self.pos + 1) % self.n

    def ready_at(self, v):
        """Border pixels first (they need no input), then the downstream's answer."""
        while not self.inside[self.pos]:
            self._border()
        return self.down.ready_at(self.mx(v, self.M + 1))

    def accept(self, v):
        while not self.inside[self.pos]:
            self._border()
        self.M = self.down.accept(self.mx(v, self.M + 1))
        moved = self.M
        last = self.pos == self.last_inside
        self.pos = (self.pos + 1) % self.n
        if last:  # the trailing border of this image: no input needed
            while self.pos != 0:
                self._border()
        return moved

    def state(self):
        return [self.M]

    def set_state(self, values):
        (self.M,) = values


class _Collect:
    """K2C.Collect (flatten after convolutions): n beats -> one vector."""

    def __init__(self, n, down, mx) -> None:
        self.n, self.down, self.mx = n, down, mx
        self.count = 0
        self.ready = NEG

    def ready_at(self, v):
        return self.mx(v, self.ready) if self.count == 0 else v

    def accept(self, v):
        q = self.mx(v, self.ready) if self.count == 0 else v
        self.count += 1
        if self.count == self.n:
            self.ready = self.down.accept(q + 1) + 1
            self.count = 0
        return q

    def state(self):
        return [self.ready]

    def set_state(self, values):
        (self.ready,) = values


class _Join:
    """K2C.Branch's join after one K2C.Fifo per branch, as one n-input join.

    Branch i's FIFO has depth `D_i` (None: unbounded, to measure what the design needs).
    A beat is offered to it in cycle `v`; it enters in `q = max(v, F(k - D_i) + 1)` for its
    k-th beat (a FIFO's ready is `count < depth`, and the beat D_i earlier leaves in the
    cycle the join fires it, F). Beat k of every FIFO is valid from `max(q_k, F_(k-1)) + 1`;
    all FIFOs' beats move together (the join fires) when all are valid and downstream is
    ready. For `F(k - D_i)` to be known when the k-th beat arrives, D_i must be at least
    the beats that FIFO can hold in the event order (`need`): `fifo_depths` guarantees it,
    and that bound is also what keeps the design free of deadlock under any stalls.
    """

    def __init__(self, n, down, mx, depths=None) -> None:
        self.n, self.down, self.mx = n, down, mx
        self.depths = list(depths) if depths is not None else [None] * n
        self.keep = max([d for d in self.depths if d is not None], default=1)
        self.queues: list[list[Any]] = [[] for _ in range(n)]
        self.fired: list[Any] = [NEG] * self.keep  # the last `keep` fire cycles, newest last
        self.need = [0] * n  # most beats a FIFO holds in the event order (this one included)

    def port(self, i: int) -> _JoinPort:
        return _JoinPort(self, i)

    def ready_at(self, i, v):
        """Check that FIFO i can take a beat in the event order. A fork asks its branch heads
        before any branch has taken the beat, so a FIFO that heads a branch must have room
        then: that is what `need` measures (the beats it holds with the next one)."""
        depth = self.depths[i]
        self.need[i] = max(self.need[i], len(self.queues[i]) + 1)
        if depth is None or len(self.queues[i]) < depth:
            return v
        raise RuntimeError(f"hwmodel: branch FIFO {i} of depth {depth} is asked for more beats than "
                           "the event order allows (depth below the structural bound)")

    def free_from(self, i):
        """The first cycle the FIFO has room for its next beat: after the beat D earlier fired."""
        depth = self.depths[i]
        if depth is None:
            return NEG
        back = depth - len(self.queues[i])  # how many fires ago that beat left
        return self.fired[-back] + 1 if back <= len(self.fired) else NEG

    def push(self, i, q) -> None:
        self.queues[i].append(q)
        self.need[i] = max(self.need[i], len(self.queues[i]))
        while all(self.queues):
            heads = [queue.pop(0) for queue in self.queues]
            valid = self.fired[-1]
            for h in heads:
                valid = self.mx(valid, h)
            self.fired.append(self.down.accept(valid + 1))
            del self.fired[0]

    def state(self):
        return [*self.fired, *(q for queue in self.queues for q in queue)]

    def shape(self):
        return tuple(len(queue) for queue in self.queues)

    def set_state(self, values, shape):
        self.fired = list(values[:self.keep])
        rest = list(values[self.keep:])
        self.queues = []
        for n in shape:
            self.queues.append(rest[:n])
            rest = rest[n:]


class _JoinPort:
    """A branch's FIFO, as its branch's last block sees it."""

    def __init__(self, join: _Join, i: int) -> None:
        self.join, self.i = join, i

    def ready_at(self, v):
        self.join.ready_at(self.i, v)
        return self.join.mx(v, self.join.free_from(self.i))

    def accept(self, v):
        q = self.ready_at(v)
        self.join.push(self.i, q)
        return q


class _Fork:
    """K2C.Branch's fork: the beat moves into every branch in the first cycle in which every
    branch head is ready (each stays ready until it accepts)."""

    def __init__(self, heads, join: _Join, mx) -> None:
        self.heads, self.join, self.mx = heads, join, mx

    def ready_at(self, v):
        q = v
        for head in self.heads:
            q = self.mx(q, head.ready_at(q))
        for head in self.heads:  # a later head's wait may end after an earlier head's
            q = self.mx(q, head.ready_at(q))
        return q

    def accept(self, v):
        q = self.ready_at(v)
        for head in self.heads:
            head.accept(q)
        return q


def _geometry(plan: LayerPlan) -> tuple[int, int, int, int, int, int]:
    h, w = plan.padded_input_shape[:2]
    (kh, kw), (sh, sw) = plan.kernel_size, plan.strides
    return h, w, kh, kw, sh, sw


def _knobs(plan: LayerPlan) -> tuple[int, int, bool]:
    return plan.groups * plan.cycles, plan.cycles, plan.groups == 1


def _layer_blocks(plan: LayerPlan, knobs, down, mx, blocks: list) -> Any:
    """The blocks of one layer (emitter.py), built from its consumer backwards; its head."""
    if plan.is_compute:
        steps, b, g1 = knobs[plan.name]
        down = _Engine(steps, b, g1, down, mx)
        blocks.append(down)
    if plan.type == "conv2d" or plan.type in POOL_TYPES:
        down = _Window(*_geometry(plan), down, mx)
        blocks.append(down)
        if any(plan.pads):
            down = _Pad(*plan.input_shape[:2], plan.pads, down, mx)
            blocks.append(down)
    elif plan.type == "flatten":
        down = _Collect(math.prod(plan.input_shape[:-1]), down, mx)
        blocks.append(down)
    elif not (plan.is_compute or plan.is_merge):
        raise ValueError(f"no timing model for layer type {plan.type!r}")
    return down


def _chain_blocks(chain: Chain, by_name, knobs, down, mx, blocks: list, joins: list, depths=None) -> Any:
    items = list(chain.items)
    for k in range(len(items) - 1, -1, -1):
        item = items[k]
        if isinstance(item, Parallel):
            merge = by_name[items[k + 1]]
            join = _Join(len(item.branches), down, mx, depths.get(merge.name) if depths is not None else None)
            joins.append((merge.name, join))
            blocks.append(join)
            heads = [_chain_blocks(branch, by_name, knobs, join.port(i), mx, blocks, joins, depths)
                     for i, branch in enumerate(item.branches)]
            down = _Fork(heads, join, mx)
        else:
            down = _layer_blocks(by_name[item], knobs, down, mx, blocks)
    return down


def _build(plans: Sequence[LayerPlan], knobs: Sequence[tuple[Any, Any, Any]], mx, joins: list | None = None,
           depths: dict[str, Sequence[int | None]] | None = None):
    """The blocks of the emitted network (emitter.py), from the sink backwards.
    `knobs`: (S = G*b, b, G == 1) per compute layer in plan order, ints or arrays; `depths`
    the branch FIFO depths per merge (default: the plans' `fifo_depths`)."""
    if depths is None:
        depths = {p.name: p.fifo_depths for p in plans if p.is_merge and p.fifo_depths}
    sink = _Sink()
    blocks: list[Any] = []
    by_knob = dict(zip([p.name for p in plans if p.is_compute], knobs))
    source = plans[0].inputs[0] if plans[0].inputs else "input"
    chain = structure(_with_inputs(plans), source, plans[-1].name)
    first = _chain_blocks(chain, {p.name: p for p in plans}, by_knob, sink, mx, blocks,
                          joins if joins is not None else [], depths)
    return first, blocks, sink


def _with_inputs(plans: Sequence[LayerPlan]) -> list[LayerPlan]:
    """Plans read back from an old manifest have no `inputs`: they form a chain."""
    if all(p.inputs for p in plans):
        return list(plans)
    out, previous = [], "input"
    for p in plans:
        out.append(p if p.inputs else replace(p, inputs=(previous,)))
        previous = p.name
    return out


def beats_per_image(plans: Sequence[LayerPlan]) -> int:
    return math.prod(plans[0].input_shape[:-1])


# --- running the model -----------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Predicted cycles of a run of `images` images back to back (cycle 0 = first after reset)."""

    accept_cycle: np.ndarray  # (N,) first beat of each image accepted
    output_cycle: np.ndarray  # (N,) its output beat moved
    ii: float  # steady-state initiation interval (exact; fractional only for a multi-image period)
    period_images: int  # images per period of the steady state (1 in every case seen)

    @property
    def first_latency(self) -> int:
        return int(self.output_cycle[0] - self.accept_cycle[0])

    @property
    def interval(self) -> float:
        """What `SimResult.interval` measures: the mean distance between outputs of this run."""
        if len(self.output_cycle) < 2:
            return float("nan")
        return float(np.diff(self.output_cycle).mean())


def _knob_arrays(configs: Sequence[Sequence[LayerPlan]]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    per_config = [[_knobs(p) for p in plans if p.is_compute] for plans in configs]
    n_layers = len(per_config[0])
    return [
        (np.array([c[i][0] for c in per_config], dtype=np.int64),
         np.array([c[i][1] for c in per_config], dtype=np.int64),
         np.array([c[i][2] for c in per_config], dtype=bool))
        for i in range(n_layers)
    ]


def _simulate_batch(plans: Sequence[LayerPlan], knobs, n_configs: int, images: int | None,
                    max_images: int = 24, max_period: int = 4):
    """Run the event model on arrays of `n_configs` configurations. With `images` given,
    exactly that many images; otherwise until every configuration's state repeats."""
    first, blocks, sink = _build(plans, knobs, np.maximum)
    k = beats_per_image(plans)
    last = np.full(n_configs, -1, dtype=np.int64)
    accepts: list[np.ndarray] = []
    snaps: list[tuple[tuple, np.ndarray]] = []
    refs: list[np.ndarray] = []
    found_lag = np.zeros(n_configs, dtype=np.int64)  # 0: not yet periodic
    found_at = np.zeros(n_configs, dtype=np.int64)
    n = 0
    while True:
        if images is not None and n >= images:
            break
        ref = last + 1
        snap = (_signature(blocks),
                np.stack([np.broadcast_to(np.maximum(np.asarray(s) - ref, _CLAMP), (n_configs,))
                          for b in blocks for s in b.state()]))
        for lag in range(1, min(max_period, len(snaps)) + 1):
            if snaps[-lag][0] != snap[0]:
                continue
            same = np.all(snap[1] == snaps[-lag][1], axis=0) & (found_lag == 0)
            found_lag[same] = lag
            found_at[same] = n - lag
        snaps.append(snap)
        refs.append(ref)
        if images is None and (np.all(found_lag > 0) or n >= max_images):
            break
        for j in range(k):
            q = first.accept(last + 1)
            if j == 0:
                accepts.append(q)
            last = q
        n += 1
    outputs = sink.times[:len(accepts)]
    return accepts, outputs, refs, found_lag, found_at


def _signature(blocks) -> tuple:
    """How many values each block's state holds (a join's FIFOs hold a varying number)."""
    return tuple(b.shape() if isinstance(b, _Join) else len(b.state()) for b in blocks)


def _snapshot(blocks, ref: int) -> tuple[tuple, tuple[int, ...]]:
    return _signature(blocks), tuple(max(int(v) - ref, _CLAMP) for b in blocks for v in b.state())


def _restore(blocks, snap: tuple[tuple, Sequence[int]], ref: int) -> None:
    signature, rel = snap
    values = [NEG if r <= _CLAMP else ref + r for r in rel]
    i = 0
    for b, shape in zip(blocks, signature):
        if isinstance(b, _Join):
            n = 1 + sum(shape)
            b.set_state(values[i:i + n], shape)
        else:
            n = shape
            b.set_state(values[i:i + n])
        i += n


def _one_image(first, beats: int, ref: int) -> int:
    """Feed one image from cycle `ref` on; the next image's first offer cycle."""
    last = ref - 1
    for _ in range(beats):
        last = first.accept(last + 1)
    return last + 1


AFFINE_LIMIT = 1 << 24
"""Images an affine extrapolation may jump at most; past it the run goes on image by image."""


def steady_state(plans: Sequence[LayerPlan], knobs=None, max_period: int = 4,
                 max_images: int = 100_000, depths=None) -> tuple[float, int]:
    """The exact steady-state II (and its period in images) of one configuration.

    Images are fed back to back until the blocks' state, relative to the image's first offer
    cycle, repeats. A slow bottleneck far downstream can take many images to back the
    pipeline up (its backlog grows by a few cycles per image); when two successive images
    change the relative state by the same vector, the run is affine until some comparison
    in a block flips, and each comparison between quantities that move linearly flips at
    most once: so the first image where the one-image step stops being that affine step is
    found by exponential and binary search on extrapolated states, and the run continues
    from there exactly.
    """
    knobs = knobs if knobs is not None else [_knobs(p) for p in plans if p.is_compute]
    first, blocks, _ = _build(plans, knobs, max, depths=depths)
    probe_first, probe_blocks, _ = _build(plans, knobs, max, depths=depths)
    beats = beats_per_image(plans)
    ref, images = 0, 0
    rels: list[tuple[tuple, tuple[int, ...]]] = []
    refs: list[int] = []
    # Affine jumps assume each comparison flips at most once along the extrapolation; a
    # join's window of fire cycles breaks that, so graphs with merges run image by image.
    jumps = not any(p.is_merge for p in plans)
    while images < max_images:
        rel = _snapshot(blocks, ref)
        for lag in range(1, min(max_period, len(rels)) + 1):
            if rels[-lag] == rel:
                return (ref - refs[-lag]) / lag, lag
        if jumps and len(rels) >= 2 and ref - refs[-1] == refs[-1] - refs[-2] and rel[0] == rels[-1][0] == rels[-2][0] \
                and all(a - b == b - c for a, b, c in zip(rel[1], rels[-1][1], rels[-2][1])):
            period, delta = ref - refs[-1], [a - b for a, b in zip(rel[1], rels[-1][1])]
            signature, values = rel

            def virtual(j: int) -> tuple[tuple[tuple, tuple[int, ...]], int]:
                return (signature, tuple(r if r <= _CLAMP else r + j * d for r, d in zip(values, delta))), \
                    ref + j * period

            def affine(j: int) -> bool:
                state, start = virtual(j)
                _restore(probe_blocks, state, start)
                nxt = _one_image(probe_first, beats, start)
                return (nxt, _snapshot(probe_blocks, nxt)) == virtual(j + 1)[::-1]

            hi = 1
            while hi <= AFFINE_LIMIT and affine(hi):
                hi *= 2
            if hi > AFFINE_LIMIT:  # no break found: keep feeding images one by one
                jumps = False  # (a safety net: not seen on chains)
                rels.append(rel)
                refs.append(ref)
                ref = _one_image(first, beats, ref)
                images += 1
                continue
            lo = hi // 2  # affine(lo) holds (or lo == 0: the step just measured)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if affine(mid) else (lo, mid)
            state, ref = virtual(hi)
            _restore(blocks, state, ref)
            images += hi
            rels, refs = [], []
            continue
        rels.append(rel)
        refs.append(ref)
        ref = _one_image(first, beats, ref)
        images += 1
    raise RuntimeError(f"hwmodel: no periodic steady state within {max_images} images")


def timing(plans: Sequence[LayerPlan], images: int = 0) -> Timing:
    """The exact cycles of `images` images back to back (at least one), and the exact II."""
    ii, period = steady_state(plans)
    first, _, sink = _build(plans, [_knobs(p) for p in plans if p.is_compute], max)
    beats = beats_per_image(plans)
    accepts, last = [], -1
    for _ in range(max(images, 1)):
        for j in range(beats):
            last = first.accept(last + 1)
            if j == 0:
                accepts.append(last)
    acc = np.array(accepts, dtype=np.int64)
    out = np.array(sink.times[:len(accepts)], dtype=np.int64)
    return Timing(acc, out, ii, period)


def fifo_depths(plans: Sequence[LayerPlan]) -> dict[str, tuple[int, ...]]:
    """The depth of every branch FIFO, per merge layer (branch order), for this configuration.

    1. No deadlock: a FIFO must hold every beat its branch can produce before the other
       branches produce the beat the join needs, i.e. the most beats it holds in the event
       order (which depends on the geometry only: two images with unbounded FIFOs measure
       it). With that depth no stall pattern can deadlock the fork and join, and the
       bounded FIFOs' cycles are computable in the event order.
    2. No lost throughput: the smallest common slack `s` added to every FIFO such that the
       steady-state II equals the II with FIFOs a whole image deeper (found by doubling,
       then bisection, on the exact model).
    """
    merges = [p for p in plans if p.is_merge]
    if not merges:
        return {}
    knobs = [_knobs(p) for p in plans if p.is_compute]
    joins: list[tuple[str, _Join]] = []
    first, _, _ = _build(plans, knobs, max, joins, depths={})
    beats = beats_per_image(plans)
    ref = 0
    for _ in range(2):
        ref = _one_image(first, beats, ref)
    need = {name: [max(n, 1) for n in join.need] for name, join in joins}

    def with_slack(s: int) -> dict[str, tuple[int, ...]]:
        return {name: tuple(n + s for n in counts) for name, counts in need.items()}

    def ii(s: int) -> float:
        return steady_state(plans, knobs, depths=with_slack(s))[0]

    deep = max(beats, 2) + 1
    best = ii(deep)
    if ii(0) <= best:
        return with_slack(0)
    lo, hi = 0, 1
    while ii(hi) > best:
        lo, hi = hi, 2 * hi
        if hi > deep:
            hi = deep
            break
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ii(mid) > best else (lo, mid)
    return with_slack(hi)


def with_fifo_depths(plans: Sequence[LayerPlan]) -> list[LayerPlan]:
    """The plans with every merge's `fifo_depths` set by `fifo_depths`."""
    depths = fifo_depths(plans)
    return [replace(p, fifo_depths=depths[p.name]) if p.name in depths else p for p in plans]


def timings(configs: Sequence[Sequence[LayerPlan]]) -> list[tuple[int, float]]:
    """(latency, II) of many configurations (plans) of one network in one vectorised run."""
    if not configs:
        return []
    latency, ii = timing_batch(configs[0], _knob_arrays(configs))
    return [(int(latency[i]), float(ii[i])) for i in range(len(configs))]


def timing_batch(plans: Sequence[LayerPlan], knobs) -> tuple[np.ndarray, np.ndarray]:
    """Latency and II arrays for configurations given as knob arrays: per compute layer
    (S = G*b, b, G == 1), each an array with one element per configuration; `plans` gives
    the geometry (any configuration of the network)."""
    n = len(knobs[0][0]) if knobs else 1
    accepts, outputs, refs, lag, at = _simulate_batch(plans, knobs, n, None)
    ref = np.stack(refs)  # (images, configs)
    idx = np.arange(n)
    safe = np.maximum(lag, 1)
    ii = (ref[np.minimum(at + safe, len(refs) - 1), idx] - ref[at, idx]) / safe
    for i in np.nonzero(lag == 0)[0]:  # long transients: the scalar model with drift jumps
        one = [(int(np.broadcast_to(s, (n,))[i]), int(np.broadcast_to(b, (n,))[i]),
                bool(np.broadcast_to(g, (n,))[i])) for s, b, g in knobs]
        ii[i] = steady_state(plans, one)[0]
    latency = np.broadcast_to(outputs[0] - accepts[0], (n,))
    return latency.astype(np.int64), ii


Config = tuple[tuple[int, ...], tuple[int, ...]]
"""(pe per compute layer, cycles per compute layer)."""


def figures_many(plans: Sequence[LayerPlan], configs: Sequence[Config]) -> list[HwFigures]:
    """HwFigures of many (pe, cycles) configurations of the network `plans` (whose own
    knobs are ignored): timing vectorised, deduplicated by (G*b, b, G == 1) per layer;
    resources memoised per layer and knob pair."""
    from dataclasses import replace

    compute = [i for i, p in enumerate(plans) if p.is_compute]
    if not configs:
        return []
    keys = []
    for pes, cyc in configs:
        key = []
        for i, p, b in zip(compute, pes, cyc):
            g = -(-plans[i].filters // p)
            key.append((g * b, b, g == 1))
        keys.append(tuple(key))
    unique = list(dict.fromkeys(keys))
    knobs = [(np.array([k[j][0] for k in unique], dtype=np.int64),
              np.array([k[j][1] for k in unique], dtype=np.int64),
              np.array([k[j][2] for k in unique], dtype=bool)) for j in range(len(compute))]
    latency, ii = timing_batch(plans, knobs)
    where = {k: n for n, k in enumerate(unique)}
    fixed = [layer_resources(p) for p in plans if not p.is_compute]
    cache: dict[tuple[int, int, int], LayerResources] = {}

    def res(i: int, p: int, b: int) -> LayerResources:
        if (i, p, b) not in cache:
            cache[(i, p, b)] = layer_resources(replace(plans[i], pe=p, cycles=b))
        return cache[(i, p, b)]

    out = []
    for (pes, cyc), key in zip(configs, keys):
        n = where[key]
        layers = [res(i, p, b) for i, p, b in zip(compute, pes, cyc)]
        out.append(_assemble(list(pes), list(cyc), int(latency[n]), float(ii[n]), layers, fixed, plans))
    return out


def _assemble(pes, cyc, latency, ii, compute_res, fixed, plans) -> HwFigures:
    by_name = {r.name: r for r in [*compute_res, *fixed]}
    layers = [by_name[p.name] for p in plans]
    return HwFigures(
        parallelism=pes, cycles=cyc, latency=latency, ii=ii,
        multipliers=sum(r.multipliers for r in layers), macs=sum(r.macs for r in layers),
        memory_bits=sum(r.memory_bits for r in layers), rom_bits=sum(r.rom_bits for r in layers),
        line_buffer_bits=sum(r.line_buffer_bits for r in layers),
        register_bits=sum(r.register_bits for r in layers), layers=layers,
    )


# --- resources --------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerResources:
    name: str
    type: str
    pe: int
    cycles: int
    groups: int
    steps: int  # G*b: cycles of the engine per window (0 for non-compute layers)
    multipliers: int
    macs: int  # per image
    rom_bits: int
    line_buffer_bits: int  # K2C.Window's block RAM
    register_bits: int  # data registers (window, engine input/accumulators/results, collect)
    fifo_bits: int = 0  # a merge's branch FIFOs (K2C.Fifo, LUT RAM)

    @property
    def memory_bits(self) -> int:
        return self.rom_bits + self.line_buffer_bits + self.register_bits + self.fifo_bits


def layer_resources(plan: LayerPlan) -> LayerResources:
    in_bits = plan.in_fmt.bits
    out_bits = plan.out_fmt.bits
    line = regs = 0
    if plan.type == "conv2d" or plan.type in POOL_TYPES:
        _, w, kh, kw, _, _ = _geometry(plan)
        c = plan.input_shape[-1]
        line = w * (kh - 1) * c * in_bits
        regs += 2 * kh * kw * c * in_bits + (((kh - 1) * c * in_bits) if w == 1 else 0)
    if plan.is_compute:
        assert plan.acc_fmt is not None
        regs += plan.cycles * plan.chunk * in_bits  # the engine's window (rotating chunks)
        regs += plan.pe * plan.acc_fmt.bits if plan.cycles > 1 else 0  # accumulators
        regs += 2 * plan.filters * out_bits  # result register R and output register O
    if plan.type == "flatten":
        regs += plan.n_in * in_bits
    fifo = 0
    if plan.is_merge:  # the branch FIFOs (LUT RAM) in front of the join
        for depth, shape, fmt in zip(plan.fifo_depths, plan.input_shapes, plan.input_formats):
            fifo += depth * shape[-1] * fmt.bits
    return LayerResources(
        name=plan.name, type=plan.type, pe=plan.pe if plan.is_compute else 0,
        cycles=plan.cycles if plan.is_compute else 0, groups=plan.groups if plan.is_compute else 0,
        steps=plan.groups * plan.cycles if plan.is_compute else 0,
        multipliers=plan.multipliers, macs=plan.macs, rom_bits=plan.rom_bits,
        line_buffer_bits=line, register_bits=regs, fifo_bits=fifo,
    )


@dataclass(frozen=True)
class HwFigures:
    """Everything the model says about one configuration."""

    parallelism: list[int]
    cycles: list[int]
    latency: int
    ii: float
    multipliers: int
    macs: int
    memory_bits: int
    rom_bits: int
    line_buffer_bits: int
    register_bits: int
    layers: list[LayerResources] = field(default_factory=list)

    @property
    def efficiency(self) -> float:
        """Multiplier efficiency: useful MACs per multiplier-cycle, MACs / (multipliers x II)."""
        return multiplier_efficiency(self.macs, self.multipliers, self.ii)

    def images_per_second(self, clock_mhz: float) -> float:
        return clock_mhz * 1e6 / self.ii

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["efficiency"] = self.efficiency
        return data


def multiplier_efficiency(macs: int, multipliers: int, ii: float) -> float:
    return macs / (multipliers * ii) if multipliers and ii else 0.0


def figures(plans: Sequence[LayerPlan], latency: int | None = None, ii: float | None = None) -> HwFigures:
    """Everything the model says about the configuration in `plans`."""
    if latency is None or ii is None:
        t = timing(plans)
        latency, ii = t.first_latency, t.ii
    compute = [p for p in plans if p.is_compute]
    return _assemble([p.pe for p in compute], [p.cycles for p in compute], latency, ii,
                     [layer_resources(p) for p in compute],
                     [layer_resources(p) for p in plans if not p.is_compute], plans)


def layer_interval(plan: LayerPlan) -> int:
    """A compute layer's own busy cycles per image: windows x G*b (a lower bound of the II)."""
    return plan.windows_per_image * plan.groups * plan.cycles
