"""The blocks of the emitted network as event recurrences (the exact hardware model).

# How: an event-level model of the pipeline

The emitted core is a chain of stream blocks (emitter.py): per conv2d and depthwise2d
`[Pad] -> Window -> Engine` (the depthwise engine has the engine's control), per pool
`[Pad] -> Window -> Pipe` (the reduction's two registers; Keras 'same' average pooling
without the Pipe), per flatten `Collect`, per dense `Engine`; around them Top's two-entry
input FIFO, its pipelined class (and output softmax) and its two-entry output FIFO; the
AXI adapter has no registers. Each block is modelled per beat, not per clock: it
is told the cycle `V` from which a beat is offered to it and answers the cycle `M` in
which the beat moves (`M >= V`, the first cycle from `V` on in which the block
is ready; every block here, once ready, stays ready until it accepts). To know when it is
ready, a block asks its own consumer when its earlier outputs moved; it pushes each output
to the consumer as soon as the output's valid cycle is known. All rules below are the
blocks' haddocks (clash_lib/K2C/*.hs) rewritten as recurrences, exact for any downstream
stalls, not only for an always-ready sink:

- Engine (`K2C.Engine`, `S = G*b` steps per window, pipeline depth `D`, output queue of
  `Q`): window `i` is accepted in `a_i = max(V_i, a_(i-1) + S, M_(i-Q) + 1)` (busy for S
  steps; at most Q windows between accept and the result's move); its result enters the
  queue in `a_i + S + D` and is valid from `max(a_i + S + D, M_(i-1)) + 1`. The engine
  never stalls: downstream stalls reach its input only through the credit bound Q. `D`
  (`LayerPlan.pipe_depth`) includes the load's delay `e` (`LayerPlan.loads_late`: a
  convolution's engine loading from its generator's register the cycle after the accept).
- A convolution's FIFOs (`K2C.Fifo`): of windows between its window generator and its
  engine (`window_fifo`), of input pixels before its padding (`input_fifo`); Top's slices'
  rules below.
- Window (`K2C.Window`): window `k`, completed by the pixel accepted in `p_k`, is offered
  from `p_k` (its shift register is the output); the next pixel waits until the cycle after
  the window moved, `M_k + 1` (input ready is `not pending`).
- Pad (`K2C.Pad`): a wire inside the image; border pixels are offered the cycle after the
  previous output beat moved, without waiting for input.
- Crop, Upsample, Scatter and the reshapes: `hw.shape_blocks`.
- Collect (`K2C.Collect`): the vector is valid the cycle after its n-th beat; the next
  image's first beat waits until the cycle after the vector moves.
- Global (`K2C.Global`): one result per image, completed by its last beat, valid the cycle
  after its input register combined that beat (when the previous result has left).
- BatchNorm (`K2C.BatchNorm`): a stage on K2C.Pipe (below); a serial one (`lanes`) is
  Scatter -> that stage -> Collect of `lane_chunks` beats.
- Top's input and output slices (`K2C.Fifo`, two entries before the network and after the
  argmax): a beat moves in when fewer than two are held and is valid from the cycle after
  it moved in, and not before the previous one moved out. Top's class (`K2C.Classify`) and
  a softmax (`K2C.Softmax`) are pipelines on `K2C.Pipe`: the engine's rules with one step,
  depth `d - 1` and a queue of `d + 2`.
- Source (`K2C.Sim`): beats back to back, beat 0 offered in cycle 0 (the first cycle after
  reset), each next beat from the cycle after the previous one moved. Sink: always ready.

The event order is the same for every configuration of a network (it depends on the
geometry only), so the model runs on numpy arrays with one element per configuration:
`options` evaluates every configuration of the thesis CNN in one pass.

The steady state: before each image's first beat is offered, the model takes a snapshot
of every block's state relative to that cycle. When it equals the previous image's, the
run is periodic from then on (the model is deterministic and time-invariant), and the
distance between the two snapshots is the exact II.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from keras2clash.hw.plan import LayerPlan
from keras2clash.hw.shape_blocks import _Scatter, shape_blocks
from keras2clash.ir.layers import GLOBAL_POOL_TYPES, SHAPE_TYPES
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
    """K2C.Engine (dense, and conv2d after its window generator): S steps per window, D
    pipeline cycles after the last step, an output queue of Q results."""

    def __init__(self, steps, depth, queue, down, mx) -> None:
        self.S, self.D, self.Q, self.down, self.mx = steps, depth, queue, down, mx
        self.A = NEG                      # the previous window's accept cycle
        self.hist = [NEG] * int(np.max(queue))   # the last results' move cycles, newest last

    def _lagged(self):
        """M_(i-Q): the move cycle of the result Q windows back (per configuration)."""
        if isinstance(self.Q, np.ndarray):
            rows = np.stack([np.broadcast_to(h, self.Q.shape) for h in self.hist])
            return rows[len(self.hist) - self.Q, np.arange(self.Q.size)]
        return self.hist[len(self.hist) - self.Q]

    def ready_at(self, v):
        mx = self.mx
        return mx(mx(v, self.A + self.S), self._lagged() + 1)

    def accept(self, v):
        a = self.ready_at(v)
        valid = self.mx(a + self.S + self.D, self.hist[-1]) + 1
        self.A = a
        self.hist = self.hist[1:] + [self.down.accept(valid)]
        return a

    def state(self):
        return [self.A, *self.hist]

    def set_state(self, values):
        self.A, self.hist = values[0], list(values[1:])


class _Queue:
    """K2C.Fifo of `depth` beats (Top's output slice): beat k moves in when fewer than `depth`
    beats are held (`max(V, m_(k-depth) + 1)`) and is valid from `max(q_k, m_(k-1)) + 1`."""

    def __init__(self, depth, down, mx) -> None:
        self.down, self.mx = down, mx
        self.hist = [NEG] * depth  # the last beats' move cycles, newest last

    def ready_at(self, v):
        return self.mx(v, self.hist[0] + 1)

    def accept(self, v):
        q = self.ready_at(v)
        self.hist = self.hist[1:] + [self.down.accept(self.mx(q, self.hist[-1]) + 1)]
        return q

    def state(self):
        return list(self.hist)

    def set_state(self, values):
        self.hist = list(values)


OUTPUT_SLICE = 2
"""Top's output FIFO (Top.hs `OutputSlice`): the class and scores registered before the ports."""
INPUT_SLICE = 2
"""Top's input FIFO (Top.hs `InputSlice`): the beats registered between the ports and the network."""


class _Window:
    """K2C.Window (conv2d and pooling): line buffers and one window register, which is also the
    output: a window is offered in the cycle its last pixel moves in."""

    def __init__(self, h, w, kh, kw, sh, sw, down, mx) -> None:
        rows = [r >= kh - 1 and (r - kh + 1) % sh == 0 for r in range(h)]
        cols = [x >= kw - 1 and (x - kw + 1) % sw == 0 for x in range(w)]
        self.completes = [rows[r] and cols[x] for r in range(h) for x in range(w)]
        self.n = h * w
        self.pos = 0
        self.down, self.mx = down, mx
        self.ready = NEG

    def ready_at(self, v):
        return self.mx(v, self.ready)

    def accept(self, v):
        q = self.mx(v, self.ready)
        if self.completes[self.pos]:
            self.ready = self.down.accept(q) + 1
        self.pos = (self.pos + 1) % self.n
        return q

    def state(self):
        return [self.ready]

    def set_state(self, values):
        (self.ready,) = values


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


class _Global:
    """K2C.Global (global max/average pooling): an input register, a running per-channel
    register over the n beats of an image, and an output register. A beat accepted in `q`
    is combined in `c = max(q + 1, P)` (P: the cycle combining resumes after a pending
    result), and the input register takes the next beat from `c` on. The n-th beat,
    combined in `c`, gives the result valid from `max(c, M_prev) + 1` (it waits in the
    running register while the previous result has not left), which is also when combining
    resumes."""

    def __init__(self, n, down, mx) -> None:
        self.n, self.down, self.mx = n, down, mx
        self.count = 0
        self.ready = NEG  # the cycle the input register is free again (the last beat's c)
        self.resume = NEG  # P
        self.M = NEG

    def ready_at(self, v):
        return self.mx(v, self.ready)

    def accept(self, v):
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

    def state(self):
        return [self.ready, self.resume, self.M]

    def set_state(self, values):
        self.ready, self.resume, self.M = values


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
    """The window generator's image, window and strides; a dilated convolution's window is
    its dilated extent (the tap selection after it is wires)."""
    h, w = plan.padded_input_shape[:2]
    (kh, kw), (sh, sw) = plan.extent, plan.strides
    return h, w, kh, kw, sh, sw


def _knobs(plan: LayerPlan) -> tuple[int, int, int]:
    """What the engine's timing depends on: S = G*b steps, pipeline depth D, queue depth Q."""
    return plan.groups * plan.cycles, plan.pipe_depth, plan.queue_depth


SOFTMAX_STEPS_PER_STAGE = 1
"""K2C.Softmax's StepsPerStage: quotient bits per pipeline stage of its divisions."""


def softmax_depth(out_frac: int, n: int) -> int:
    """K2C.Softmax's SoftmaxDepth over n values: the beat, the maximum (ceil(log2 n) comparison
    levels), exponentials (table indices, table read, its data, a fabric copy for the route
    from the block RAM's row), the sum in two stages (groups of four,
    then the groups: ten exponentials in one cycle would be mobilenet_digits' critical path),
    numerators, then fo + 1 division stages (one quotient bit a stage: two bits a stage would
    chain two ~30-bit subtractions, the iris design's critical path on ECP5, 52 logic levels)."""
    return 1 + tree_depth(n) + 7 + -(-(out_frac + 1) // SOFTMAX_STEPS_PER_STAGE)


def tree_depth(n: int) -> int:
    """K2C.Classify's TreeDepth: ceil(log2 n) registered comparison levels."""
    return (n - 1).bit_length()


def class_depth(n: int) -> int:
    """K2C.Classify's ClassDepth: the registered beat, the registered activation (a table
    becomes a block RAM), then the comparison tree."""
    return 2 + tree_depth(n)


def is_softmax(plan: LayerPlan) -> bool:
    from keras2clash.quant import activations

    return activations.parse(plan.activation).kind == "softmax"


MAP_DEPTH = 1
"""K2C.Pipe.mapP's register stages: a standalone activation, a per-channel one after a layer."""

MERGE_DEPTH = 1
"""A merge's register stages (K2C.Pipe.mapP on the joined beats: the exact arithmetic, the
requantization and the activation, then a register)."""

MAP_TABLE_DEPTH = 2
"""K2C.Pipe.mapTable's: a table activation's block RAM read, then its output register."""

MAP2_DEPTH = 3
"""K2C.Pipe.mapP2's: the input beat, then an activation cut in two (a ReLU-family slope's
constant multiplication)."""

BATCHNORM_DEPTH = 3
"""K2C.BatchNorm's BatchNormDepth: the input beat, the products, then the finished values."""


def axis_depth(n: int) -> int:
    """K2C.Pool's AxisDepth n: a register after every level of a balanced tree over n values
    (ceil(log2 n) levels), one register when there is no level."""
    return max(1, (n - 1).bit_length())


def pool_depth(ph: int, pw: int) -> int:
    """K2C.Pool's PoolDepth ph pw: the window registered (the generator offers it straight from
    the pixel's source), then the tree along the rows and the one down the rows (3 for windows
    of at most 2x2; a 3x3 maximum has 5: one comparison per register stage)."""
    return 1 + axis_depth(pw) + axis_depth(ph)


def has_pool_stage(plan: LayerPlan) -> bool:
    """Whether a layer is a pooling, which reduces its windows on K2C.Pipe (`maxPool`,
    `avgPool`, `avgPoolSame`)."""
    return plan.type in ("maxpool2d", "avgpool2d")


AVG_SAME_DIVISIONS = 2
"""K2C.Pool.AvgSameDepth - PoolDepth: the registered divisions by the window's rows, then columns."""


def pool_stage_depth(plan: LayerPlan) -> int:
    """A pooling's K2C.Pipe registers: PoolDepth, and for Keras 'same' average pooling
    (`avgPoolSame`, AvgSameDepth) one more after each of its two divisions."""
    return pool_depth(*plan.kernel_size) + (AVG_SAME_DIVISIONS if plan.exclude_pads else 0)


def _pipe_block(d: int, down, mx, blocks: list) -> Any:
    """A stage on K2C.Pipe with d registers: the engine's rules with one step, depth d - 1 and
    a queue of d + 2."""
    block = _Engine(1, d - 1, d + 2, down, mx)
    blocks.append(block)
    return block


def _softmax_block(plan: LayerPlan, down, mx, blocks: list) -> Any:
    """K2C.Softmax.softmaxS on K2C.Pipe: one beat a cycle, softmax_depth register stages."""
    return _pipe_block(softmax_depth(plan.out_fmt.frac, plan.output_shape[-1]), down, mx, blocks)


def has_map_stage(plan: LayerPlan) -> bool:
    """Whether the emitter gives the layer's activation a stage of its own (`mapP`,
    backend.activations.ActivationCode.stage): a standalone activation layer, or a function
    that differs per channel after a layer. A softmax is its own block (`_softmax_block`)."""
    from keras2clash.quant import activations

    if is_softmax(plan):
        return False
    if plan.type == "activation" or stages_table(plan):
        return True
    act, fi, fo = activations.parse(plan.activation), plan.act_in_fmt, plan.out_fmt
    return activations.per_channel(act, fi, fo) or activations.multiplies(act, fi, fo)


def is_table(plan: LayerPlan) -> bool:
    """Whether the layer's activation reads a table (LayerPlan.table_activation)."""
    return plan.table_activation


def stages_table(plan: LayerPlan) -> bool:
    """Whether a table activation after a BatchNormalization or a merge gets a stage of its
    own (`mapTable`) rather than sharing their last register: the block RAM's read needs a
    register after it (its output register) before the queue, which those blocks do not
    have (a compute layer's engine has it: LayerPlan.table_regs)."""
    return is_table(plan) and not plan.top_activation and (plan.type == "batchnorm" or plan.is_merge)


def splits_activation(plan: LayerPlan) -> bool:
    """Whether the layer's activation is cut in two register stages (`mapP2`): a ReLU-family
    slope that is a constant multiplication (quant.activations.multiplies)."""
    from keras2clash.quant import activations

    return activations.multiplies(activations.parse(plan.activation), plan.act_in_fmt, plan.out_fmt)


def map_depth(plan: LayerPlan) -> int:
    """The register stages of the layer's activation stage (`has_map_stage`)."""
    if splits_activation(plan):
        return MAP2_DEPTH
    return MAP_TABLE_DEPTH if is_table(plan) else MAP_DEPTH


def _batchnorm_blocks(plan: LayerPlan, down, mx, blocks: list) -> Any:
    """K2C.BatchNorm on K2C.Pipe; a serial one (`lanes`: `batchNormLanes`) between a Scatter
    and a Collect of its `lane_chunks` beats per vector."""
    n = plan.lane_chunks
    if n > 1:
        down = _Collect(n, down, mx)
        blocks.append(down)
    down = _pipe_block(BATCHNORM_DEPTH, down, mx, blocks)
    if n > 1:
        down = _Scatter(n, down, mx)
        blocks.append(down)
    return down


def _layer_blocks(plan: LayerPlan, knobs, down, mx, blocks: list) -> Any:
    """The blocks of one layer (emitter.py), built from its consumer backwards; its head."""
    if is_softmax(plan):  # the pipelined softmax after the layer's own blocks
        down = _softmax_block(plan, down, mx, blocks)
    if has_map_stage(plan):
        down = _pipe_block(map_depth(plan), down, mx, blocks)
    if plan.is_merge:  # the merge's own stage (K2C.Pipe.mapP after the join)
        down = _pipe_block(MERGE_DEPTH, down, mx, blocks)
    if plan.type == "batchnorm":
        down = _batchnorm_blocks(plan, down, mx, blocks)
    if has_pool_stage(plan):
        down = _pipe_block(pool_stage_depth(plan), down, mx, blocks)
    if plan.is_compute:
        steps, depth, queue = knobs[plan.name]
        down = _Engine(steps, depth, queue, down, mx)
        blocks.append(down)
    if plan.is_windowed:
        if plan.window_fifo:
            down = _Queue(plan.window_fifo, down, mx)
            blocks.append(down)
        down = _Window(*_geometry(plan), down, mx)
        blocks.append(down)
        if any(plan.pads):
            down = _Pad(*plan.input_shape[:2], plan.pads, down, mx)
            blocks.append(down)
        if plan.input_fifo:
            down = _Queue(plan.input_fifo, down, mx)
            blocks.append(down)
    elif plan.type == "flatten":
        down = _Collect(math.prod(plan.input_shape[:-1]), down, mx)
        blocks.append(down)
    elif plan.type in SHAPE_TYPES:
        down = shape_blocks(plan, down, mx, blocks)
    elif plan.type in GLOBAL_POOL_TYPES:
        down = _Global(math.prod(plan.input_shape[:-1]), down, mx)
        blocks.append(down)
    elif not (plan.is_compute or plan.is_merge or plan.type in ("batchnorm", "activation")):
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
    `knobs`: (S = G*b, D, Q) per compute layer in plan order, ints or arrays; `depths`
    the branch FIFO depths per merge (default: the plans' `fifo_depths`)."""
    if depths is None:
        depths = {p.name: p.fifo_depths for p in plans if p.is_merge and p.fifo_depths}
    from keras2clash.quant.golden import splits_output

    sink = _Sink()
    blocks: list[Any] = [_Queue(OUTPUT_SLICE, sink, mx)]
    last = blocks[0]
    if splits_output(plans[-1]) and is_softmax(plans[-1]):  # Top's softmax, after the class
        last = _softmax_block(plans[-1], last, mx, blocks)
    last = _pipe_block(class_depth(plans[-1].output_shape[-1]), last, mx, blocks)  # Top's classify
    if splits_output(plans[-1]):  # Top applies the output activation: not in the network
        if plans[-1].type == "activation" and len(plans) > 1:
            plans = plans[:-1]
        else:
            plans = [*plans[:-1], replace(plans[-1], activation="linear")]
    by_knob = dict(zip([p.name for p in plans if p.is_compute], knobs))
    source = plans[0].inputs[0] if plans[0].inputs else "input"
    chain = structure(_with_inputs(plans), source, plans[-1].name)
    first = _chain_blocks(chain, {p.name: p for p in plans}, by_knob, last, mx, blocks,
                          joins if joins is not None else [], depths)
    first = _Queue(INPUT_SLICE, first, mx)
    blocks.append(first)
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
