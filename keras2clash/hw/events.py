"""The stream blocks of the emitted network as event recurrences: one class per Clash block.

A block is told the cycle `v` from which a beat is offered to it (`ready_at`, `accept`) and
answers the cycle in which the beat moves; it pushes each output to its consumer (`down`) as
soon as the output's valid cycle is known. `mx` is the maximum of two cycle values (Python
`max`, or `numpy.maximum` when one model run evaluates many configurations at once). `state`
and `set_state` give the hardware model the snapshots it finds the steady state with. The
rules are the blocks' haddocks (clash_lib/K2C/*.hs) rewritten as recurrences; `hw.blocks`
says how the network's blocks are put together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeAlias

import numpy as np

NEG = -(1 << 40)
"""'Never' (a cycle before everything)."""
CLAMP = -(1 << 39)

Cycle: TypeAlias = int | np.ndarray
"""A cycle, or one per configuration (a numpy array) when the model runs many at once."""
Max: TypeAlias = Callable[[Cycle, Cycle], Cycle]
"""The maximum of two cycles: `max`, or `numpy.maximum` on arrays of configurations."""
EngineTiming: TypeAlias = tuple[Cycle, Cycle, Cycle]
"""What an engine's timing depends on: S = G*b steps, pipeline depth D, queue depth Q."""


SOFTMAX_STEPS_PER_STAGE = 1
"""K2C.Softmax's StepsPerStage: quotient bits per pipeline stage of its divisions."""


def softmax_depth(out_frac: int, n: int) -> int:
    """K2C.Softmax's SoftmaxDepth over n values: the beat, the maximum (ceil(log2 n) comparison
    levels), exponentials (table indices, table read, its data, a fabric copy for the route
    from the block RAM's row), the sum in two stages (groups of four,
    then the groups: ten exponentials in one cycle would be mobilenet_digits' critical path),
    numerators, then fo + 1 division stages (one quotient bit a stage: two bits a stage would
    chain two ~30-bit subtractions, the iris design's critical path on ECP5, 52 logic levels)."""
    return softmax_front_depth(n) + softmax_divide_depth(out_frac)


def softmax_front_depth(n: int) -> int:
    """K2C.Softmax's SoftmaxFrontDepth over n values: the registers before the divisions (the
    beat, the maximum, the exponentials' four, the sum's two)."""
    return 1 + tree_depth(n) + 6


def softmax_divide_depth(out_frac: int) -> int:
    """K2C.Softmax's SoftmaxDivideDepth: the numerators, then the division stages."""
    return 1 + -(-(out_frac + 1) // SOFTMAX_STEPS_PER_STAGE)


def tree_depth(n: int) -> int:
    """K2C.Tree's TreeDepth: ceil(log2 n) registered levels (comparisons, sums)."""
    return (n - 1).bit_length()


class Block(Protocol):
    """A block as its producer sees it: when it is ready for a beat offered from cycle `v`,
    and the cycle the beat moves when it is offered."""

    def ready_at(self, v: Cycle) -> Cycle: ...

    def accept(self, v: Cycle) -> Cycle: ...


class Stateful(Protocol):
    """A block whose state the model snapshots to find the steady state (`hw.hwmodel`)."""

    def state(self) -> list[Cycle]: ...


class Sink:
    """The AXI master port with m_axis_tready always high: a result moves when valid."""

    def __init__(self) -> None:
        self.times: list[Cycle] = []

    def ready_at(self, v: Cycle) -> Cycle:
        return v

    def accept(self, v: Cycle) -> Cycle:
        self.times.append(v)
        return v

    def state(self) -> list[Cycle]:
        return []


class Engine:
    """K2C.Engine (dense, and conv2d after its window generator): S steps per window, D
    pipeline cycles after the last step, an output queue of Q results."""

    def __init__(self, steps: Cycle, depth: Cycle, queue: Cycle, down: Block, mx: Max) -> None:
        self.S, self.D, self.Q, self.down, self.mx = steps, depth, queue, down, mx
        self.A: Cycle = NEG  # the previous window's accept cycle
        self.hist: list[Cycle] = [NEG] * int(np.max(queue))  # the last results' move cycles, newest last
        # the configurations of each distinct Q (a batch has a few): M_(i-Q) is read per group
        self.groups = (
            [(int(q), np.nonzero(queue == q)[0]) for q in np.unique(queue)] if isinstance(queue, np.ndarray) else []
        )

    def _lagged(self) -> Cycle:
        """M_(i-Q): the move cycle of the result Q windows back (per configuration)."""
        if isinstance(self.Q, np.ndarray):
            if len(self.groups) == 1:
                return self.hist[len(self.hist) - self.groups[0][0]]
            out = np.empty(self.Q.shape, dtype=np.int64)
            for q, where in self.groups:
                h = self.hist[len(self.hist) - q]
                out[where] = h[where] if isinstance(h, np.ndarray) and h.shape == self.Q.shape else h
            return out
        return self.hist[len(self.hist) - self.Q]

    def ready_at(self, v: Cycle) -> Cycle:
        mx = self.mx
        return mx(mx(v, self.A + self.S), self._lagged() + 1)

    def accept(self, v: Cycle) -> Cycle:
        a = self.ready_at(v)
        valid = self.mx(a + self.S + self.D, self.hist[-1]) + 1
        self.A = a
        self.hist = self.hist[1:] + [self.down.accept(valid)]
        return a

    def state(self) -> list[Cycle]:
        return [self.A, *self.hist]

    def set_state(self, values: Sequence[Cycle]) -> None:
        self.A, self.hist = values[0], list(values[1:])


class Queue:
    """K2C.Fifo of `depth` beats (Top's output slice): beat k moves in when fewer than `depth`
    beats are held (`max(V, m_(k-depth) + 1)`) and is valid from `max(q_k, m_(k-1)) + 1`."""

    def __init__(self, depth: int, down: Block, mx: Max) -> None:
        self.down, self.mx = down, mx
        self.hist: list[Cycle] = [NEG] * depth  # the last beats' move cycles, newest last

    def ready_at(self, v: Cycle) -> Cycle:
        return self.mx(v, self.hist[0] + 1)

    def accept(self, v: Cycle) -> Cycle:
        q = self.ready_at(v)
        self.hist = self.hist[1:] + [self.down.accept(self.mx(q, self.hist[-1]) + 1)]
        return q

    def state(self) -> list[Cycle]:
        return list(self.hist)

    def set_state(self, values: Sequence[Cycle]) -> None:
        self.hist = list(values)


class Sources:
    """Several input ports, each driven on its own (K2C.Sim): each port's beats back to back,
    beat 0 offered in cycle 0 and each next beat from the cycle after that port's previous
    beat moved. An image's beats are fed port by port in the model's input order, so the
    offer the caller gives is not used. Feeding whole images port by port is exact as the
    model's event order of one source is: a join FIFO must hold the beats it takes in this
    order (`Join.need`, which `fifo_depths` sizes every FIFO to), and then no beat's cycle
    depends on a beat fed after it. `firsts[j]`: the cycle each image's first beat moved
    on port j."""

    def __init__(self, heads: Sequence[Block], beats: Sequence[int]) -> None:
        self.heads = list(heads)
        self.route = [j for j, n in enumerate(beats) for _ in range(n)]
        self.starts = {sum(beats[:j]) for j in range(len(beats))}
        self.pos = 0
        self.last: list[Cycle] = [-1] * len(self.heads)
        self.firsts: list[list[Cycle]] = [[] for _ in self.heads]

    def ready_at(self, v: Cycle) -> Cycle:
        return v

    def accept(self, v: Cycle) -> Cycle:
        j = self.route[self.pos]
        q = self.heads[j].accept(self.last[j] + 1)
        if self.pos in self.starts:
            self.firsts[j].append(q)
        self.last[j] = q
        self.pos = (self.pos + 1) % len(self.route)
        return q

    def state(self) -> list[Cycle]:
        return list(self.last)

    def set_state(self, values: Sequence[Cycle]) -> None:
        self.last = list(values)


OUTPUT_SLICE = 2
"""Top's output FIFO (Top.hs `OutputSlice`): the class and scores registered before the ports."""
INPUT_SLICE = 2
"""Top's input FIFO (Top.hs `InputSlice`): the beats registered between the ports and the network."""


class Window:
    """K2C.Window (conv2d and pooling): line buffers and one window register, which is also the
    output: a window is offered in the cycle its last pixel moves in."""

    def __init__(self, h: int, w: int, kh: int, kw: int, sh: int, sw: int, down: Block, mx: Max) -> None:
        rows = [r >= kh - 1 and (r - kh + 1) % sh == 0 for r in range(h)]
        cols = [x >= kw - 1 and (x - kw + 1) % sw == 0 for x in range(w)]
        self.completes = [rows[r] and cols[x] for r in range(h) for x in range(w)]
        self.n = h * w
        self.pos = 0
        self.down, self.mx = down, mx
        self.ready: Cycle = NEG

    def ready_at(self, v: Cycle) -> Cycle:
        return self.mx(v, self.ready)

    def accept(self, v: Cycle) -> Cycle:
        q = self.mx(v, self.ready)
        if self.completes[self.pos]:
            self.ready = self.down.accept(q) + 1
        self.pos = (self.pos + 1) % self.n
        return q

    def state(self) -> list[Cycle]:
        return [self.ready]

    def set_state(self, values: Sequence[Cycle]) -> None:
        (self.ready,) = values


class Pad:
    """K2C.Pad: a wire inside the image, border pixels emitted without waiting for input."""

    def __init__(self, h: int, w: int, pads: tuple[int, int, int, int], down: Block, mx: Max) -> None:
        top, bottom, left, right = pads
        self.hp, self.wp = top + h + bottom, left + w + right
        self.inside = [top <= r < top + h and left <= x < left + w for r in range(self.hp) for x in range(self.wp)]
        self.last_inside = (top + h - 1) * self.wp + left + w - 1
        self.n = self.hp * self.wp
        self.pos = 0
        self.down, self.mx = down, mx
        self.M: Cycle = -1  # the first output beat is offered in cycle 0

    def _border(self) -> None:
        self.M = self.down.accept(self.M + 1)
        self.pos = (self.pos + 1) % self.n

    def ready_at(self, v: Cycle) -> Cycle:
        """Border pixels first (they need no input), then the downstream's answer."""
        while not self.inside[self.pos]:
            self._border()
        return self.down.ready_at(self.mx(v, self.M + 1))

    def accept(self, v: Cycle) -> Cycle:
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

    def state(self) -> list[Cycle]:
        return [self.M]

    def set_state(self, values: Sequence[Cycle]) -> None:
        (self.M,) = values


class Collect:
    """K2C.Collect (flatten after convolutions): n beats -> one vector, valid `settle` cycles
    after the n-th beat moved in (1 for `collect`; 2 for `collectSum`, whose beats are
    registered before they are added), the next first beat from the cycle after it moved."""

    def __init__(self, n: int, down: Block, mx: Max, settle: int = 1) -> None:
        self.n, self.down, self.mx, self.settle = n, down, mx, settle
        self.count = 0
        self.ready: Cycle = NEG

    def ready_at(self, v: Cycle) -> Cycle:
        return self.mx(v, self.ready) if self.count == 0 else v

    def accept(self, v: Cycle) -> Cycle:
        q = self.mx(v, self.ready) if self.count == 0 else v
        self.count += 1
        if self.count == self.n:
            self.ready = self.down.accept(q + self.settle) + 1
            self.count = 0
        return q

    def state(self) -> list[Cycle]:
        return [self.ready]

    def set_state(self, values: Sequence[Cycle]) -> None:
        (self.ready,) = values


class Global:
    """K2C.Global (global max/average pooling): an input register, a running per-channel
    register over the n beats of an image, and an output register. A beat accepted in `q`
    is combined in `c = max(q + 1, P)` (P: the cycle combining resumes after a pending
    result), and the input register takes the next beat from `c` on. The n-th beat,
    combined in `c`, gives the result valid from `max(c, M_prev) + 1` (it waits in the
    running register while the previous result has not left), which is also when combining
    resumes."""

    def __init__(self, n: int, down: Block, mx: Max) -> None:
        self.n, self.down, self.mx = n, down, mx
        self.count = 0
        self.ready: Cycle = NEG  # the cycle the input register is free again (the last beat's c)
        self.resume: Cycle = NEG  # P
        self.M: Cycle = NEG

    def ready_at(self, v: Cycle) -> Cycle:
        return self.mx(v, self.ready)

    def accept(self, v: Cycle) -> Cycle:
        q = self.mx(v, self.ready)
        c = self.mx(q + 1, self.resume)
        self.ready = c
        self.count += 1
        if self.count == self.n:
            valid = self.mx(c, self.M) + 1
            self.M = self.down.accept(valid)
            self.resume = valid
            self.count = 0
        return q

    def state(self) -> list[Cycle]:
        return [self.ready, self.resume, self.M]

    def set_state(self, values: Sequence[Cycle]) -> None:
        self.ready, self.resume, self.M = values


class Recurrent:
    """K2C.Recurrent: one step at a time in its engine (S steps, depth D), the state fed
    back. A step offered from `v` moves in in `a = max(v, F)` (F: the cycle after the previous
    step's result left the step); the engine's result is valid from `a + S + D + 1` (a gated
    cell's from `cell` of that: `gated_cell`) and leaves in `r`, at once when the step sends
    nothing, else from the cycle after the previous output moved on; the output register
    shows it from `r + 1`, and the next step can move in from `r + 1`. A time step is
    `passes` such steps (a reset-before GRU's two, its input beat offered to each by a
    `Repeat`), of which the last sends: every time step's (`every`), or a sequence's last."""

    def __init__(
        self,
        steps: int,
        every: bool,
        S: Cycle,
        D: Cycle,
        down: Block,
        mx: Max,
        cell: Callable[[Cycle], Cycle] | None = None,
        passes: int = 1,
    ) -> None:
        self.n, self.every, self.S, self.D, self.down, self.mx = steps * passes, every, S, D, down, mx
        self.cell = cell  # a gated cell after the engine: the cycle its result is valid from
        self.passes = passes
        self.t = 0  # the step (a pass) within the sequence
        self.free: Cycle = NEG  # F
        self.out_free: Cycle = NEG  # the cycle after the previous output moved on

    def ready_at(self, v: Cycle) -> Cycle:
        return self.mx(v, self.free)

    def accept(self, v: Cycle) -> Cycle:
        a = self.mx(v, self.free)
        valid = a + self.S + self.D + 1
        if self.cell is not None:
            valid = self.cell(valid)
        if (self.t + 1) % self.passes == 0 and (self.every or self.t == self.n - 1):
            r = self.mx(valid, self.out_free)
            self.out_free = self.down.accept(r + 1) + 1
        else:
            r = valid
        self.free = r + 1
        self.t = (self.t + 1) % self.n
        return a

    def state(self) -> list[Cycle]:
        return [self.free, self.out_free]

    def set_state(self, values: Sequence[Cycle]) -> None:
        self.free, self.out_free = values


class Playback:
    """K2C.Attention's store: fills with a sequence's n beats, one a cycle, then plays m jobs
    from them: the first valid the cycle after the n-th beat moved in, each next one the cycle
    after the one before left; it fills again from `release()`, the cycle after the last job's
    last use downstream (the mixer's last beat) moved."""

    def __init__(self, n: int, m: int, down: Block, mx: Max, release: Callable[[], Cycle]) -> None:
        self.n, self.m, self.down, self.mx, self.release = n, m, down, mx, release
        self.count = 0
        self.free: Cycle = NEG  # the first cycle it takes a beat again

    def ready_at(self, v: Cycle) -> Cycle:
        return self.mx(v, self.free)

    def accept(self, v: Cycle) -> Cycle:
        q = self.mx(v, self.free)
        self.free = q + 1
        self.count += 1
        if self.count == self.n:
            t = q + 1
            for _ in range(self.m):
                t = self.down.accept(t) + 1
            self.free = self.mx(t, self.release())
            self.count = 0
        return q

    def state(self) -> list[Cycle]:
        return [self.free]

    def set_state(self, values: Sequence[Cycle]) -> None:
        (self.free,) = values


class Reverse(Playback):
    """K2C.Reverse: fills with a sequence's n beats, one a cycle, then sends them from the
    last: the last step's beat is valid the cycle after it moved in, each next one the cycle
    after the one before left, and the block fills again from the cycle after the first
    step's beat left (a playback of n beats that nothing downstream holds on to)."""

    def __init__(self, n: int, down: Block, mx: Max) -> None:
        super().__init__(n, n, down, mx, lambda: NEG)


class _Valid:
    """A sink always ready that keeps the cycle its last beat was valid from."""

    def __init__(self) -> None:
        self.valid: Cycle = NEG

    def ready_at(self, v: Cycle) -> Cycle:
        return v

    def accept(self, v: Cycle) -> Cycle:
        self.valid = v
        return v


def gated_cell(chunks: int, depth: int, mx: Max) -> Callable[[Cycle], Cycle]:
    """K2C.Recurrent's gated cell: the engine's sums scattered into `chunks` beats, a pipeline
    of `depth` registers, the beats collected; alone in it (one step at a time), from the cycle
    the sums are valid to the cycle the new state is."""

    def run(valid: Cycle) -> Cycle:
        sink = _Valid()
        Scatter(chunks, pipe_block(depth, Collect(chunks, sink, mx), mx, []), mx).accept(valid)
        return sink.valid

    return run


BLOCK_RAM_FIFO_DEPTH = 64
"""The deepest branch FIFO in LUT RAM (`K2C.Fifo.fifo`); a deeper one, such as the FIFO that
holds a map's whole image while its per-image gate is computed, is `K2C.Fifo.blockFifo`."""


def block_ram_fifo(depth: int | None) -> bool:
    """Whether a branch FIFO of `depth` beats is a block-RAM FIFO (`K2C.Fifo.blockFifo`)."""
    return depth is not None and depth > BLOCK_RAM_FIFO_DEPTH


class Join:
    """K2C.Branch's join after one K2C.Fifo per branch, as one n-input join.

    Branch i's FIFO has depth `D_i` (None: unbounded, to measure what the design needs).
    A beat is offered to it in cycle `v`; it enters in `q = max(v, F(k - D_i) + 1)` for its
    k-th beat (a FIFO's ready is `count < depth`, and the beat D_i earlier leaves in the
    cycle the join fires it, F). Beat k of every FIFO is valid from `max(q_k + r_i, F_(k-1)) + 1`
    (`r_i`: 0 for `fifo`, 1 for a block-RAM FIFO, `block_ram_fifo`, whose read is registered);
    all FIFOs' beats move together (the join fires) when all are valid and downstream is
    ready. For `F(k - D_i)` to be known when the k-th beat arrives, D_i must be at least
    the beats that FIFO can hold in the event order (`need`): `fifo_depths` guarantees it,
    and that bound is also what keeps the design free of deadlock under any stalls.
    """

    def __init__(self, n: int, down: Block, mx: Max, depths: Sequence[int | None] | None = None) -> None:
        self.n, self.down, self.mx = n, down, mx
        self.depths: list[int | None] = list(depths) if depths is not None else [None] * n
        self.keep = max([d for d in self.depths if d is not None], default=1)
        self.late = [int(block_ram_fifo(d)) for d in self.depths]  # r_i
        self.queues: list[list[Cycle]] = [[] for _ in range(n)]
        self.fired: list[Cycle] = [NEG] * self.keep  # the last `keep` fire cycles, newest last
        self.need = [0] * n  # most beats a FIFO holds in the event order (this one included)

    def port(self, i: int) -> JoinPort:
        return JoinPort(self, i)

    def ready_at(self, i: int, v: Cycle) -> Cycle:
        """Check that FIFO i can take a beat in the event order. A fork asks its branch heads
        before any branch has taken the beat, so a FIFO that heads a branch must have room
        then: that is what `need` measures (the beats it holds with the next one)."""
        depth = self.depths[i]
        self.need[i] = max(self.need[i], len(self.queues[i]) + 1)
        if depth is None or len(self.queues[i]) < depth:
            return v
        raise RuntimeError(
            f"hwmodel: branch FIFO {i} of depth {depth} is asked for more beats than "
            "the event order allows (depth below the structural bound)"
        )

    def free_from(self, i: int) -> Cycle:
        """The first cycle the FIFO has room for its next beat: after the beat D earlier fired."""
        depth = self.depths[i]
        if depth is None:
            return NEG
        back = depth - len(self.queues[i])  # how many fires ago that beat left
        return self.fired[-back] + 1 if back <= len(self.fired) else NEG

    def push(self, i: int, q: Cycle) -> None:
        self.queues[i].append(q + self.late[i])
        self.need[i] = max(self.need[i], len(self.queues[i]))
        while all(self.queues):
            heads = [queue.pop(0) for queue in self.queues]
            valid = self.fired[-1]
            for h in heads:
                valid = self.mx(valid, h)
            self.fired.append(self.down.accept(valid + 1))
            del self.fired[0]

    def state(self) -> list[Cycle]:
        return [*self.fired, *(q for queue in self.queues for q in queue)]

    def shape(self) -> tuple[int, ...]:
        return tuple(len(queue) for queue in self.queues)

    def set_state(self, values: Sequence[Cycle], shape: Sequence[int]) -> None:
        self.fired = list(values[: self.keep])
        rest = list(values[self.keep :])
        self.queues = []
        for n in shape:
            self.queues.append(rest[:n])
            rest = rest[n:]


class JoinPort:
    """A branch's FIFO, as its branch's last block sees it."""

    def __init__(self, join: Join, i: int) -> None:
        self.join, self.i = join, i

    def ready_at(self, v: Cycle) -> Cycle:
        self.join.ready_at(self.i, v)
        return self.join.mx(v, self.join.free_from(self.i))

    def accept(self, v: Cycle) -> Cycle:
        q = self.ready_at(v)
        self.join.push(self.i, q)
        return q


class Fork:
    """K2C.Branch's fork (`branches`, or `fork` to any number of readers): the beat moves into
    every head in the first cycle in which every head is ready (each stays ready until it
    accepts). `join`: the join of its branches (None where a network is wired by name)."""

    def __init__(self, heads: Sequence[Block], join: Join | None, mx: Max) -> None:
        self.heads, self.join, self.mx = heads, join, mx

    def ready_at(self, v: Cycle) -> Cycle:
        q = v
        for head in self.heads:
            q = self.mx(q, head.ready_at(q))
        for head in self.heads:  # a later head's wait may end after an earlier head's
            q = self.mx(q, head.ready_at(q))
        return q

    def accept(self, v: Cycle) -> Cycle:
        q = self.ready_at(v)
        for head in self.heads:
            head.accept(q)
        return q


class Crop:
    """K2C.Crop: kept pixels are a wire, dropped ones move when offered."""

    def __init__(self, h: int, w: int, crops: tuple[int, int, int, int], down: Block, mx: Max) -> None:
        top, bottom, left, right = crops
        self.kept = [top <= r < h - bottom and left <= x < w - right for r in range(h) for x in range(w)]
        self.pos = 0
        self.down, self.mx = down, mx

    def ready_at(self, v: Cycle) -> Cycle:
        return self.down.ready_at(v) if self.kept[self.pos] else v

    def accept(self, v: Cycle) -> Cycle:
        moved = self.down.accept(v) if self.kept[self.pos] else v
        self.pos = (self.pos + 1) % len(self.kept)
        return moved

    def state(self) -> list[Cycle]:
        return []

    def set_state(self, values: Sequence[Cycle]) -> None:
        pass


class Upsample:
    """K2C.Upsample: every input pixel loads its copies into the output register in turn;
    the row's later copies follow the row's last pixel without waiting for input."""

    def __init__(self, w: int, size: tuple[int, int], down: Block, mx: Max) -> None:
        self.w, (self.sh, self.sw) = w, size
        self.x = 0  # column of the next input pixel
        self.down, self.mx = down, mx
        self.M: Cycle = NEG  # the cycle the last beat moved

    def _emit(self, load: Cycle) -> None:
        self.M = self.down.accept(load + 1)

    def ready_at(self, v: Cycle) -> Cycle:
        return self.mx(v, self.M)

    def accept(self, v: Cycle) -> Cycle:
        q = self.mx(v, self.M)
        self._emit(q)
        for _ in range(self.sw - 1):
            self._emit(self.M)
        self.x += 1
        if self.x == self.w:  # the row's other copies, from the line buffer
            self.x = 0
            for _ in range((self.sh - 1) * self.w * self.sw):
                self._emit(self.M)
        return q

    def state(self) -> list[Cycle]:
        return [self.M]

    def set_state(self, values: Sequence[Cycle]) -> None:
        (self.M,) = values


class Interleave(Upsample):
    """K2C.Interleave (a transposed convolution's stride phases into raster order): the beat
    order and rules of K2C.Upsample, `sw` beats per input pixel (its first output row's
    phases) and after an input row its other `sh - 1` output rows from the line buffer; only
    the values differ (phases, not copies)."""


class Scatter:
    """K2C.Scatter: one vector -> n beats."""

    def __init__(self, n: int, down: Block, mx: Max) -> None:
        self.n, self.down, self.mx = n, down, mx
        self.ready: Cycle = NEG

    def ready_at(self, v: Cycle) -> Cycle:
        return self.mx(v, self.ready)

    def accept(self, v: Cycle) -> Cycle:
        q = self.mx(v, self.ready)
        moved = q
        for _ in range(self.n):
            moved = self.down.accept(moved + 1)
        self.ready = moved + 1
        return q

    def state(self) -> list[Cycle]:
        return [self.ready]

    def set_state(self, values: Sequence[Cycle]) -> None:
        (self.ready,) = values


class Repeat(Scatter):
    """K2C.Repeat.repeatS: every beat n times, at the tail of a merge's held branch (a per-image
    gate, `Kind.branch_repeats`). Scatter's rules: a beat accepted in `q` gives repeat 0 valid
    from `q + 1`, repeat k + 1 valid the cycle after repeat k moved, and the next beat is
    accepted from the cycle after the last repeat moved."""


PIPELINE_INPUT = 1
"""K2C.Pipe.pipeline's register before a pipeline: the producer's output queue is LUT RAM,
whose read routed straight into the first stage's logic would hold the clock."""


def pipeline_storage(in_bits: int, out_bits: int, stages: int) -> tuple[int, int]:
    """K2C.Pipe.pipeline's own memory around a pipeline of `stages` registers with beats of
    `in_bits` in and `out_bits` out: (register bits: the input register and its valid bit,
    LUT-RAM FIFO bits: pipeS's queue of d + 2 results, d = PIPELINE_INPUT + stages)."""
    return in_bits + 1, (PIPELINE_INPUT + stages + 2) * out_bits


def pipe_block(d: int, down: Block, mx: Max, blocks: list[Stateful]) -> Engine:
    """A stage on K2C.Pipe with d registers: the engine's rules with one step, depth d - 1 and
    a queue of d + 2."""
    block = Engine(1, d - 1, d + 2, down, mx)
    blocks.append(block)
    return block
