"""The blocks of the emitted network as event recurrences (the exact hardware model).

# How: an event-level model of the pipeline

The emitted core is a chain of stream blocks (emitter.py): per conv2d and depthwise2d
`[Pad] -> Window -> Engine` (the depthwise engine has the engine's control), per pool
`[Pad] -> Window -> Pipe` (the reduction's two registers; Keras 'same' average pooling
without the Pipe), per flatten `Collect`, per dense `Engine`; around them Top's two-entry
input FIFO, a vector output's pipelined class (and output softmax) and its two-entry output
FIFO; the AXI adapter has no registers. Each block is modelled per beat, not per clock: it
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
- Crop, Upsample, Scatter and the reshapes: `kinds.shapes`.
- Repeat (`K2C.Repeat`): at the tail of a merge's branch that computes a per-image gate,
  before its FIFO: the gate's one beat per image read once per position of the map
  (`branch_repeats`), Scatter's rules.
- A branch FIFO deeper than `events.BLOCK_RAM_FIFO_DEPTH` is in block RAM
  (`K2C.Fifo.blockFifo`): a beat is valid one cycle later when it arrives in an empty FIFO.
- Collect (`K2C.Collect`): the vector is valid the cycle after its n-th beat; the next
  image's first beat waits until the cycle after the vector moves.
- Global (`K2C.Global`): one result per image, completed by its last beat, valid the cycle
  after its input register combined that beat (when the previous result has left).
- BatchNorm (`K2C.BatchNorm`): a stage on K2C.Pipe (below); a serial one (`lanes`) is
  Scatter -> that stage -> Collect of `lane_chunks` beats.
- Top's input and output slices (`K2C.Fifo`, two entries before the network and after the
  argmax; `top_slices` says when a pipeline at the network's end makes one redundant): a
  beat moves in when fewer than two are held and is valid from the cycle after it moved in,
  and not before the previous one moved out. Top's class (`K2C.Classify`) and
  a softmax (`K2C.Softmax`) are pipelines on `K2C.Pipe`: the engine's rules with one step,
  depth `d - 1` and a queue of `d + 2`.
- A run of layers that are free-running pipelines (`Kind.pipeline_stages`: the latency
  strategy's dense layers), consecutive in a chain (`chain_runs`): one stage on K2C.Pipe
  (`K2C.Pipe.pipeline`) whose d is the input register plus the sum of their registers.
- Fork and Join (`K2C.Branch`): a series-parallel network's `branches` (`_chain_blocks`), or
  a DAG's wiring (`_dag_blocks`): one `Fork` per tensor read by several layers, one `Join`
  per merge with a FIFO port per input.
- Source (`K2C.Sim`): beats back to back, beat 0 offered in cycle 0 (the first cycle after
  reset), each next beat from the cycle after the previous one moved. Sink: always ready.
  Several inputs: one source per port, each on its own; an image's beats are fed port by
  port (`events.Sources`), which the join FIFOs' depths make exact.

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
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TypeGuard

from keras2clash.backend.haskell import kind_template
from keras2clash.hw.events import (
    INPUT_SLICE,
    OUTPUT_SLICE,
    PIPELINE_INPUT,
    Block,
    EngineTiming,
    Fork,
    Join,
    Max,
    Queue,
    Repeat,
    Sink,
    Sources,
    Stateful,
    pipe_block,
    softmax_depth,
    tree_depth,
)
from keras2clash.hw.inputs import network_inputs
from keras2clash.hw.output import classifies, output_beats, output_plans, several_outputs, splits_output
from keras2clash.hw.plan import LayerPlan
from keras2clash.ir.structure import Chain, Dag, Parallel, network_shape
from keras2clash.kinds import kind_of
from keras2clash.kinds.base import Depth
from keras2clash.quant import activations

STAGES = kind_template("stages.hs.j2")
"""The type-level depths of the activation stages and of Top's class (`timing_checks`)."""


def _knobs(plan: LayerPlan) -> tuple[int, int, int]:
    """What the engine's timing depends on: S = G*b steps, pipeline depth D, queue depth Q."""
    return plan.steps, plan.pipe_depth, plan.queue_depth


def class_depth(n: int) -> int:
    """K2C.Classify's ClassDepth: the registered beat, the registered activation (a table
    becomes a block RAM), then the comparison tree."""
    return 2 + tree_depth(n)


def is_softmax(plan: LayerPlan) -> bool:
    return activations.parse(plan.activation).kind == "softmax"


MAP_DEPTH = 1
"""K2C.Pipe.mapP's register stages: a standalone activation, a per-channel one after a layer."""

MAP_TABLE_DEPTH = 2
"""K2C.Pipe.mapTable's: a table activation's block RAM read, then its output register."""

MAP2_DEPTH = 3
"""K2C.Pipe.mapP2's: the input beat, then an activation cut in two (a ReLU-family slope's
constant multiplication)."""


def _softmax_block(plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful]) -> Block:
    """K2C.Softmax.softmaxS on K2C.Pipe: one beat a cycle, softmax_depth register stages."""
    return pipe_block(softmax_depth(plan.out_fmt.frac, plan.output_shape[-1]), down, mx, blocks)


def has_map_stage(plan: LayerPlan) -> bool:
    """Whether the emitter gives the layer's activation a stage of its own (`mapP`,
    backend.activations.ActivationCode.stage): a standalone activation layer, or a function
    that differs per channel after a layer. A softmax is its own block (`_softmax_block`)."""
    if is_softmax(plan):
        return False
    if plan.activation_only or stages_table(plan):
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
    no_register = plan.is_merge or (plan.kind is not None and not plan.kind.table_after_register)
    return is_table(plan) and not plan.top_activation and no_register


def map_depth(plan: LayerPlan) -> int:
    """The register stages of the layer's activation stage (`has_map_stage`)."""
    if plan.splits_activation:
        return MAP2_DEPTH
    return MAP_TABLE_DEPTH if is_table(plan) else MAP_DEPTH


def _layer_blocks(
    plan: LayerPlan, knobs: Mapping[str, EngineTiming], down: Block, mx: Max, blocks: list[Stateful]
) -> Block:
    """The blocks of one layer (emitter.py), built from its consumer backwards; its head."""
    home = kind_of(plan.type)
    if home is None:
        raise ValueError(f"no timing model for layer type {plan.type!r}")
    if is_softmax(plan):  # the pipelined softmax after the layer's own blocks
        down = _softmax_block(plan, down, mx, blocks)
    if has_map_stage(plan):
        down = pipe_block(map_depth(plan), down, mx, blocks)
    return home.blocks(plan, down, mx, blocks, knobs[plan.name] if home.has_knobs else None)


def pipeline_stages(plan: LayerPlan) -> int | None:
    """The layer's registers when it may run with its neighbours as one pipeline
    (`Kind.pipeline_stages`), with no stage of its own after it (an activation stage, a
    softmax); None otherwise."""
    if plan.kind is None or has_map_stage(plan) or is_softmax(plan):
        return None
    return plan.kind.pipeline_stages(plan)


Link = str | Parallel | tuple[str, ...]
"""A chain's item, or a run of its layers that are one pipeline (`chain_runs`)."""


def _is_pipeline(item: Link | None, by_name: Mapping[str, LayerPlan]) -> TypeGuard[str]:
    """Whether a chain's item is a layer that may run with its neighbours as one pipeline."""
    return isinstance(item, str) and pipeline_stages(by_name[item]) is not None


def chain_runs(items: Sequence[str | Parallel], by_name: Mapping[str, LayerPlan]) -> list[Link]:
    """A chain's items with every run of two or more consecutive pipeline layers
    (`pipeline_stages`) as one tuple: the run is one stream stage (K2C.Pipe.pipeline over
    the layers' pipelines composed with `>->`), with one input register and one output queue."""
    links: list[Link] = []
    run: list[str] = []
    for item in [*items, None]:
        if _is_pipeline(item, by_name):
            run.append(item)
            continue
        links.extend([tuple(run)] if len(run) > 1 else run)
        run = []
        if item is not None:
            links.append(item)
    return links


def run_depth(run: Sequence[str], by_name: Mapping[str, LayerPlan]) -> int:
    """d of a run's K2C.Pipe.pipeline: its input register and every layer's registers."""
    return PIPELINE_INPUT + sum(pipeline_stages(by_name[name]) or 0 for name in run)


def pipeline_runs(plans: Sequence[LayerPlan]) -> list[tuple[str, ...]]:
    """Every run of pipeline layers that the network builds as one stage (`chain_runs`, in
    the chains of a series-parallel network; a network wired by name has none)."""
    built = network_plans(plans)
    shape = _shape(built, plans)
    by_name = {p.name: p for p in built}
    runs: list[tuple[str, ...]] = []

    def walk(chain: Chain) -> None:
        for link in chain_runs(chain.items, by_name):
            if isinstance(link, tuple):
                runs.append(link)
            elif isinstance(link, Parallel):
                for branch in link.branches:
                    walk(branch)

    if isinstance(shape, Chain):
        walk(shape)
    return runs


def _shape(built: Sequence[LayerPlan], plans: Sequence[LayerPlan]) -> Chain | Dag:
    """The network's shape (`ir.structure.network_shape`) over the layers it builds."""
    inputs = network_inputs(plans)
    sources = tuple(port.name for port in inputs) if len(inputs) > 1 else inputs[0].name
    return network_shape(_with_inputs(built), sources, tuple(network_outputs(plans)))


def _chain_blocks(
    chain: Chain,
    by_name: Mapping[str, LayerPlan],
    knobs: Mapping[str, EngineTiming],
    down: Block,
    mx: Max,
    blocks: list[Stateful],
    joins: list[tuple[str, Join]],
    depths: Mapping[str, Sequence[int | None]] | None = None,
) -> Block:
    items = chain_runs(chain.items, by_name)
    for k in range(len(items) - 1, -1, -1):
        item = items[k]
        if isinstance(item, tuple):
            down = pipe_block(run_depth(item, by_name), down, mx, blocks)
        elif isinstance(item, Parallel):
            after = items[k + 1]
            assert isinstance(after, str)  # the merge that joins the branches
            merge = by_name[after]
            join = Join(len(item.branches), down, mx, depths.get(merge.name) if depths is not None else None)
            joins.append((merge.name, join))
            blocks.append(join)
            heads = [
                _chain_blocks(branch, by_name, knobs, tail, mx, blocks, joins, depths)
                for branch, tail in zip(item.branches, _branch_tails(merge, join, mx, blocks))
            ]
            down = Fork(heads, join, mx)
        else:
            down = _layer_blocks(by_name[item], knobs, down, mx, blocks)
    return down


def branch_repeats(merge: LayerPlan) -> tuple[int, ...]:
    """How many times the join reads each branch's beats (`Kind.branch_repeats`; 1 for each
    branch when the merge holds no input)."""
    assert merge.kind is not None
    return merge.kind.branch_repeats(merge) or (1,) * len(merge.inputs)


def _branch_tails(merge: LayerPlan, join: Join, mx: Max, blocks: list[Stateful]) -> list[Block]:
    """What each branch of `merge` feeds: its FIFO into the join, after a `Repeat` of its beats
    when the merge reads a beat of it more than once (a per-image gate held over a map)."""
    tails: list[Block] = []
    for i, n in enumerate(branch_repeats(merge)):
        port: Block = join.port(i)
        if n > 1:
            repeat = Repeat(n, port, mx)
            blocks.append(repeat)
            port = repeat
        tails.append(port)
    return tails


def _dag_blocks(
    shape: Dag,
    by_name: Mapping[str, LayerPlan],
    knobs: Mapping[str, EngineTiming],
    lasts: Mapping[str, Block],
    mx: Max,
    blocks: list[Stateful],
    joins: list[tuple[str, Join]],
    depths: Mapping[str, Sequence[int | None]] | None = None,
) -> list[Block]:
    """The wiring of a network that is not series-parallel or has several inputs or outputs (emitter
    `_wiring`), from the sinks backwards in reverse topological order: a tensor's consumer is
    its one reader's head (a layer, a merge's FIFO: a port of its Join, or an output's Top
    blocks, `lasts`) or a Fork into all of them. Returns what takes each input's beats."""
    takes: dict[tuple[str, int], Block] = {}  # (reader layer, input index) -> what takes the beat

    def consumer(tensor: str) -> Block:
        heads = [takes[reader] for reader in shape.readers[tensor]]
        if tensor in lasts:
            heads.append(lasts[tensor])
        return heads[0] if len(heads) == 1 else Fork(heads, None, mx)

    for name in reversed(shape.layer_names()):
        plan = by_name[name]
        head = _layer_blocks(plan, knobs, consumer(name), mx, blocks)
        if plan.is_merge:
            join = Join(len(plan.inputs), head, mx, depths.get(name) if depths is not None else None)
            joins.append((name, join))
            blocks.append(join)
            for i, tail in enumerate(_branch_tails(plan, join, mx, blocks)):
                takes[(name, i)] = tail
        else:
            takes[(name, 0)] = head
    return [consumer(source) for source in shape.inputs]


def top_slices(plans: Sequence[LayerPlan]) -> tuple[bool, bool]:
    """Whether Top has its input FIFO and its output FIFO (`INPUT_SLICE`, `OUTPUT_SLICE`).
    A network of one chain, one input and one output that starts with a K2C.Pipe.pipeline (a
    run of pipeline layers or one, `chain_runs`) needs no input FIFO: the pipeline takes each
    beat into its input register, and its ready is registered state. One that ends in a
    pipeline and sends a vector without a class needs no output FIFO: the pipeline's output
    queue is a K2C.Fifo like it. Each saves a cycle of latency at the latency end."""
    built = network_plans(plans)
    return _top_slices(plans, built, _shape(built, plans))


def _top_slices(plans: Sequence[LayerPlan], built: Sequence[LayerPlan], shape: Chain | Dag) -> tuple[bool, bool]:
    """`top_slices` of the layers as the network builds them (`built`) in their `shape`."""
    heads = output_plans(plans)
    if len(heads) != 1 or len(network_inputs(plans)) != 1 or not isinstance(shape, Chain) or not shape.items:
        return True, True
    by_name = {p.name: p for p in built}
    links = chain_runs(shape.items, by_name)

    def piped(link: Link) -> bool:
        return isinstance(link, tuple) or _is_pipeline(link, by_name)

    return not piped(links[0]), classifies(heads[0]) or not piped(links[-1])


def _output_blocks(plan: LayerPlan, mx: Max, blocks: list[Stateful], sliced: bool) -> tuple[Block, Sink]:
    """Top's blocks after the network for the output layer `plan`: its class (and softmax
    after it) for a vector, its two-entry output FIFO when `sliced` (`top_slices`), the port
    (`Sink`)."""
    sink = Sink()
    last: Block = sink
    if sliced:
        last = Queue(OUTPUT_SLICE, sink, mx)
        blocks.append(last)
    if splits_output(plan) and is_softmax(plan):  # Top's softmax, after the class
        last = _softmax_block(plan, last, mx, blocks)
    if classifies(plan):
        last = pipe_block(class_depth(plan.output_shape[-1]), last, mx, blocks)  # Top's classify
    return last, sink


def _build(
    plans: Sequence[LayerPlan],
    knobs: Sequence[EngineTiming],
    mx: Max,
    joins: list[tuple[str, Join]] | None = None,
    depths: Mapping[str, Sequence[int | None]] | None = None,
) -> tuple[Block, list[Stateful], list[Sink]]:
    """The blocks of the emitted network (emitter.py), from the sinks backwards, and one
    `Sink` per output (`hw.output.output_plans` order).
    `knobs`: (S = G*b, D, Q) per compute layer in plan order, ints or arrays; `depths`
    the branch FIFO depths per merge (default: the plans' own, `branch_fifo_depths`)."""
    if depths is None:
        depths = branch_fifo_depths(plans)

    blocks: list[Stateful] = []
    built = network_plans(plans)
    shape = _shape(built, plans)
    input_slice, output_slice = _top_slices(plans, built, shape)
    outputs = [_output_blocks(plan, mx, blocks, output_slice) for plan in output_plans(plans)]
    sinks = [sink for _, sink in outputs]
    ends = network_outputs(plans)
    by_knob = dict(zip([p.name for p in built if p.is_compute], knobs))
    inputs = network_inputs(plans)
    by_name = {p.name: p for p in built}
    found = joins if joins is not None else []
    if isinstance(shape, Dag):
        lasts = {end: last for end, (last, _) in zip(ends, outputs)}
        heads = _dag_blocks(shape, by_name, by_knob, lasts, mx, blocks, found, depths)
    else:
        heads = [_chain_blocks(shape, by_name, by_knob, outputs[0][0], mx, blocks, found, depths)]
    if not input_slice:
        return heads[0], blocks, sinks
    firsts = [Queue(INPUT_SLICE, head, mx) for head in heads]  # Top's input slice per port
    blocks.extend(firsts)
    if len(firsts) == 1:
        return firsts[0], blocks, sinks
    feed = Sources(firsts, [math.prod(port.shape[:-1]) for port in inputs])
    blocks.append(feed)
    return feed, blocks, sinks


def branch_fifo_depths(plans: Sequence[LayerPlan]) -> dict[str, tuple[int, ...]]:
    """Every merge's branch FIFO depths the plans give (`Kind.branch_fifos`), by merge name."""
    depths = {}
    for plan in plans:
        fifos = plan.kind.branch_fifos(plan) if plan.kind is not None else ()
        if fifos:
            depths[plan.name] = fifos
    return depths


def network_plans(plans: Sequence[LayerPlan]) -> list[LayerPlan]:
    """The layers as the network builds them: when the Top applies an output layer's
    activation after taking the class (`hw.output.splits_output`), the network leaves it out."""
    split = {p.name for p in output_plans(plans) if splits_output(p)}
    built: list[LayerPlan] = []
    for plan in plans:
        if plan.name in split and plan.activation_only and len(plans) > 1:
            continue
        built.append(replace(plan, activation="linear") if plan.name in split else plan)
    return built


def network_outputs(plans: Sequence[LayerPlan]) -> list[str]:
    """The tensors the network sends to Top, one per output (`hw.output.output_plans` order):
    an output layer's, or its input's when the Top applies that standalone activation
    (`network_plans` leaves it out)."""
    ends = []
    for plan in output_plans(plans):
        if splits_output(plan) and plan.activation_only and len(plans) > 1:
            k = next(i for i, p in enumerate(plans) if p.name == plan.name)
            ends.append(plan.inputs[0] if plan.inputs else plans[k - 1].name)
        else:
            ends.append(plan.name)
    return ends


def timing_checks(plans: Sequence[LayerPlan]) -> list[tuple[str, Depth]]:
    """Every register depth the model counts, with the layer it belongs to ("top" for Top's
    class and output softmax), beside the block's type-level expression of it (`Depth`)."""
    checks: list[tuple[str, Depth]] = []
    for plan in network_plans(plans):
        assert plan.kind is not None
        checks += [(plan.name, depth) for depth in plan.kind.depths(plan)]
        n, fo = plan.output_shape[-1], plan.out_fmt.frac
        if is_softmax(plan):
            checks.append((plan.name, Depth("softmax", STAGES.softmax_depth(n, fo), softmax_depth(fo, n), "softmax")))
        if has_map_stage(plan):
            expr = (
                STAGES.map2_depth()
                if plan.splits_activation
                else STAGES.map_table_depth()
                if is_table(plan)
                else STAGES.map_depth()
            )
            checks.append((plan.name, Depth("activation", expr, map_depth(plan), "pipe_types")))
    several = several_outputs(plans)
    for last in output_plans(plans):
        owner = f"top_{last.name}" if several else "top"
        n = last.output_shape[-1]
        if classifies(last):
            checks.append((owner, Depth("class", STAGES.class_depth(n), class_depth(n), "classify")))
        if splits_output(last) and is_softmax(last):
            fo = last.out_fmt.frac
            checks.append((owner, Depth("softmax", STAGES.softmax_depth(n, fo), softmax_depth(fo, n), "softmax")))
    return checks


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
    """Input beats per image: one per position, the last axis inside a beat (of every input
    port together, for several inputs: `events.Sources` feeds them port by port)."""
    return sum(math.prod(port.shape[:-1]) for port in network_inputs(plans))


def output_beats_per_image(plans: Sequence[LayerPlan]) -> list[int]:
    """Output beats per image of each output (`hw.output.output_beats`, `output_plans` order)."""
    return [output_beats(plan) for plan in output_plans(plans)]
