"""What the kinds on the filter engine share (dense, conv2d, depthwise2d): the space-time
knobs, the exact accumulation, the engine's block and storage, and its part of Network.hs.

`K2C.Engine` computes `G = ceil(F / pe)` groups of `pe` dot products per window, each in
`cycles` steps of `ch = ceil(K / cycles)` products (the plan's `knobs`; `hw.plan.LayerPlan`:
window, chunk, groups, pipe_depth, queue_depth); its weights are a ROM of `G * cycles` words.
The exact hardware model (`hw.events.Engine`): window `i` is accepted in `a_i = max(V_i,
a_(i-1) + S, M_(i-Q) + 1)` and its result is valid from `max(a_i + S + D, M_(i-1)) + 1`
(S = G*b steps, D the pipeline depth, Q the output queue).

Arithmetic (docs/guide/contract.md, steps 3-5): the products and the bias summed exactly in
the accumulator format (a narrower accumulator chosen by the user saturates after each of the
`cycles` chunks, in chunk order, as the hardware register does), then one requantization to
the output format and the activation.

The latency strategy (`Knobs.strategy`, `LATENCY`) builds the same arithmetic another way:
the weights are constants of an adder graph (`kinds.cmvm`, a generated module per layer) that
takes one window a cycle and finishes it in its last stage (`K2C.Cmvm`, on `K2C.Pipe.pipeS`):
no multiplier and no weight memory; `pe` = filters and `cycles` = 1 in its plan, `pipeline`
the adder levels per register stage. The hardware model is `pipe_block(d)` with d the
register stages of the solved graph's levels and the finish's (and a table's two).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar, Protocol, cast

import numpy as np

from keras2clash.backend.haskell import kind_template, requantizer
from keras2clash.errors import K2CError
from keras2clash.fsutil import cache_root
from keras2clash.hw.events import (
    PIPELINE_INPUT,
    Block,
    Engine,
    EngineTiming,
    Max,
    Stateful,
    pipe_block,
    pipeline_storage,
)
from keras2clash.hw.plan import (
    LATENCY_STRATEGY,
    MAX_PIPELINE_LEVELS,
    Common,
    LayerFormats,
    LayerPlan,
    Params,
    accumulator_format,
    relu_before_requantize,
    tree_levels,
    tree_stages,
)
from keras2clash.ir.layers import Layer
from keras2clash.jsontypes import JsonObject
from keras2clash.kinds import cmvm
from keras2clash.kinds.base import Depth, Entry, Kind, Storage, check_requantized_output, params_of
from keras2clash.kinds.window import WindowParams, front_blocks, window_storage
from keras2clash.quant.exact import INT64_SAFE_BITS, QuantizedLayer, finish
from keras2clash.quant.formats import NEAREST, TRUNCATE, FixedFormat, quantize, saturate

HASKELL = kind_template("engine.hs.j2")

LATENCY = LATENCY_STRATEGY
"""The strategy (`hw.plan.STRATEGIES`) that builds a layer as an adder graph of constants."""
FINISH_LEVELS = 1
"""Adder levels K2C.Cmvm's finish counts as in the graph's last stage: the bias's carry chain,
then a truncation, a saturation's comparison or an activation's gate."""
CELLS_PER_CARRY = 2
"""LUT4 cells an ECP5 CCU2C carry cell takes (nextpnr's TRELLIS_COMB count)."""
GRAPH_DELAY = 2
"""Adder levels da4ml may add over the fewest possible to share more subexpressions
(`kinds.cmvm.solve`; measured on the jet tagger: 3-7 % fewer adders than 0, 1-2 levels more)."""

Dot = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class EngineParams(Params):
    """An engine kind's own parameters (its knobs are the plan's `knobs`, which every kind with
    knobs shares): whether its accumulator is the exact one or a narrower one the user chose."""

    exact_accumulator: bool = True
    adder_depth: int = 0  # the latency strategy: the solved adder graph's levels,
    graph_registers: int = 0  # the data bits of its register stages at the plan's pipeline,
    graph_adders: int = 0  # its adders
    graph_cells: int = 0  # and their ECP5 carry cells (CCU2C, `AdderGraph.carry_cells`)

    def to_json(self) -> JsonObject:
        """The fields a resource-strategy plan has alone when the graph's are 0."""
        data = super().to_json()
        for key in ("adder_depth", "graph_registers", "graph_adders", "graph_cells"):
            if data.get(key) == 0:
                del data[key]
        return data


class _Weighted(Protocol):
    """An engine kind's record: its kernel and bias (Dense, Conv2D, DepthwiseConv2D)."""

    @property
    def kernel(self) -> np.ndarray: ...

    @property
    def bias(self) -> np.ndarray: ...


def matmul(xs: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Every filter over the same window: (M, K) x (K, F) -> (M, F)."""
    return xs @ kernel


def per_filter(xs: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Each filter over its own window (depthwise): (M, K, F) x (K, F) -> (M, F)."""
    return (xs * kernel).sum(axis=1)


def narrow_accumulator(exact: FixedFormat, bits: int, layer: str) -> FixedFormat:
    """A user-chosen accumulator width: same fraction bits, fewer integer bits (saturating)."""
    if bits < exact.frac + 1:
        raise K2CError(
            f"accumulator of layer '{layer}': {bits} bits cannot hold its {exact.frac} exact "
            f"fraction bits plus a sign bit (at least {exact.frac + 1})"
        )
    if bits >= exact.bits:
        return exact
    return FixedFormat(1, bits - 1 - exact.frac, exact.frac)


def accumulate(windows: np.ndarray, plan: LayerPlan, params: QuantizedLayer, dot: Dot = matmul) -> np.ndarray:
    """Contract step 3 on (M, K) windows -> (M, filters) accumulator raw values (frac cf);
    `dot` multiplies window chunks (axis 1) with kernel chunks (axis 0).

    Exact accumulator: one exact sum. A narrower (user-chosen) accumulator saturates after
    each of the `cycles` chunks, in chunk order, exactly as the hardware register does:
    acc_0 = sat(chunk_0 + bias), acc_t = sat(acc_{t-1} + chunk_t).
    """
    assert plan.acc_fmt is not None and plan.w_fmt is not None and plan.b_fmt is not None
    exact = accumulator_format(plan.in_fmt, plan.w_fmt, plan.window, plan.b_fmt)
    wide = max(exact.bits, plan.acc_fmt.bits) > INT64_SAFE_BITS  # every partial sum fits `exact`
    dtype = object if wide else np.int64
    xs = windows.astype(dtype)
    kernel = params.kernel.astype(dtype)
    product_shift = plan.acc_fmt.frac - (plan.in_fmt.raw_frac + plan.w_fmt.raw_frac)
    bias = params.bias.astype(dtype) << (plan.acc_fmt.frac - plan.b_fmt.raw_frac)
    if params_of(plan, EngineParams).exact_accumulator:
        return (dot(xs, kernel) << product_shift) + bias
    acc = None
    ch = plan.chunk
    for t in range(plan.engine_knobs.cycles):
        part = dot(xs[:, t * ch : (t + 1) * ch], kernel[t * ch : (t + 1) * ch]) << product_shift
        acc = saturate(part + bias, plan.acc_fmt) if acc is None else saturate(acc + part, plan.acc_fmt)
    assert acc is not None  # cycles >= 1
    return acc


def neurons(windows: np.ndarray, plan: LayerPlan, params: QuantizedLayer, dot: Dot = matmul) -> np.ndarray:
    """(M, K) windows -> (M, filters) activated raw outputs ((M, K, filters) for `per_filter`)."""
    acc = accumulate(windows, plan, params, dot)
    assert plan.acc_fmt is not None
    return finish(acc, plan.acc_fmt.frac, plan.out_fmt, plan.hw_activation, relu_before_requantize(plan))


def chunk_sum_bits(plan: LayerPlan) -> int:
    """K2C.Filter's ChunkBits: the exact width of a chunk's sum (products, bias, growth)."""
    assert plan.w_fmt is not None and plan.b_fmt is not None and plan.acc_fmt is not None
    a, w, b = plan.in_fmt.container, plan.w_fmt.container, plan.b_fmt.container  # what the hardware holds
    product = (a.sign + a.int) + (w.sign + w.int)
    return max(product, b.sign + b.int) + tree_levels(plan.chunk) + plan.acc_fmt.frac


def padding_neurons(plan: LayerPlan) -> int:
    """Padding neurons in the last group: `G * pe - F`."""
    return plan.groups * plan.engine_knobs.pe - plan.filters


def is_latency(plan: LayerPlan) -> bool:
    """Whether the layer is built as an adder graph of constants (the latency strategy)."""
    return plan.knobs is not None and plan.knobs.strategy == LATENCY


def graph_stages(plan: LayerPlan) -> int:
    """The adder graph's register stages: one per `pipeline` levels of its own and the
    finish's (`kinds.cmvm.Schedule`), one for the whole graph at `pipeline` 0."""
    depth, levels = params_of(plan, EngineParams).adder_depth, plan.engine_knobs.pipeline
    return max(1, -(-(depth + FINISH_LEVELS) // levels)) if levels else 1


def cmvm_stages(plan: LayerPlan) -> int:
    """K2C.Cmvm.stages' registers (CmvmStages): the graph's stages (the finish in its last), a
    table's two."""
    return graph_stages(plan) + plan.table_regs


def cmvm_depth(plan: LayerPlan) -> int:
    """d of K2C.Cmvm.cmvm's pipeS (CmvmDepth): K2C.Pipe.pipeline's input register and
    `cmvm_stages`."""
    return PIPELINE_INPUT + cmvm_stages(plan)


def rounding_offset(plan: LayerPlan) -> int:
    """What K2C.Cmvm adds to each sum with the bias, in the accumulator's raw bits: half an
    output LSB when the output rounds to nearest (ties toward +infinity) and drops fraction
    bits, so that its requantization only truncates, one carry chain fewer per output
    (floor(x + half) is that rounding, ReLU first or not); 0 otherwise."""
    assert plan.acc_fmt is not None
    dropped = plan.acc_fmt.frac - plan.out_fmt.frac
    return 1 << (dropped - 1) if plan.out_fmt.rounding == NEAREST and dropped > 0 else 0


def cmvm_module(plan: LayerPlan) -> str:
    """The generated module of a latency layer's graph: `Cmvm.<Keras name>`, capitalised."""
    ident = "".join(c if c.isalnum() or c == "_" else "_" for c in plan.name)
    return "Cmvm." + (ident[0].upper() + ident[1:] if ident[:1].isalpha() else "L" + ident)


class EngineKind(Kind):
    """A kind on the filter engine: knobs, constants in a ROM, requantized outputs."""

    keeps_format = False
    requantizes = True
    fuses_activation = True
    has_params = True
    has_knobs = True
    params_type: ClassVar[type[Params]] = EngineParams
    filter_word: ClassVar[str] = "filter"  # what the knobs' errors call an output channel
    latency_built: ClassVar[bool] = False
    """The latency strategy builds it (its adder graph, module and Network entry)."""
    window_per_pe: ClassVar[bool] = False
    """Each PE reads a window of its own (depthwise), not one window shared by all PEs."""

    def filters_for(self, channels: int) -> int:
        """The engine's filters for `channels` output channels (one each)."""
        return channels

    def filters(self, plan: LayerPlan) -> int:
        return self.filters_for(plan.output_shape[-1])

    def window_channels(self, plan: LayerPlan) -> int:
        """Channels of the engine's window (a depthwise engine holds every channel's)."""
        return 1

    def plan_params(self, layer: Layer) -> EngineParams:
        return EngineParams()

    def plan(self, common: Common, override: LayerFormats | None, fmt: FixedFormat) -> LayerPlan:
        """Weights, bias and output in their formats (the default), the knobs the planner gives
        (`common.knobs`), the exact accumulator or a narrower one."""
        layer = common.layer
        if common.knobs is None:
            raise ValueError(f"layer '{layer.name}' ({layer.type}) is planned without its knobs")
        override = override or LayerFormats()
        w_fmt = override.weight or fmt
        b_fmt = override.bias or w_fmt
        own = self.plan_params(layer)
        window, filters = self.window(layer.input_shape, own), self.filters_for(layer.output_shape[-1])
        levels, pe, cycles = common.knobs.pipeline, common.knobs.pe, common.knobs.cycles
        if not 0 <= levels <= MAX_PIPELINE_LEVELS:
            raise K2CError(
                f"pipeline {levels} out of range for layer '{layer.name}': it must be between 0 (not "
                f"pipelined) and {MAX_PIPELINE_LEVELS} adder levels per register stage"
            )
        if not 1 <= pe <= filters:
            raise K2CError(
                f"parallelism {pe} out of range for layer '{layer.name}': it must be between 1 "
                f"and {filters} (its {self.filter_word} count)"
            )
        if not 1 <= cycles <= window:
            raise K2CError(
                f"cycles {cycles} out of range for layer '{layer.name}': it must be "
                f"between 1 and {window} (its window size)"
            )
        exact = accumulator_format(common.in_fmt, w_fmt, window, b_fmt)
        acc = (
            exact
            if override.accumulator_bits is None
            else narrow_accumulator(exact, override.accumulator_bits, layer.name)
        )
        plan = common.plan(
            out_fmt=override.output or fmt,
            w_fmt=w_fmt,
            b_fmt=b_fmt,
            acc_fmt=acc,
            params=replace(own, exact_accumulator=acc == exact),
        )
        return self.plan_latency(plan) if is_latency(plan) else plan

    def plan_latency(self, plan: LayerPlan) -> LayerPlan:
        """A latency-strategy plan: every filter at once in one cycle (pe = filters, cycles =
        1), its solved graph's depth and register bits."""
        if not self.latency_built:
            raise K2CError(
                f"layer '{plan.name}' ({plan.type}): the latency strategy builds dense and undilated convolution "
                "layers; give this layer the resource strategy (--strategy takes one per dense/conv2d layer, "
                "e.g. latency,resource)"
            )
        if not self.exact_accumulator(plan):
            raise K2CError(
                f"layer '{plan.name}': the latency strategy computes the exact accumulator; give it no "
                "accumulator width"
            )
        plan = replace(plan, knobs=replace(plan.engine_knobs, pe=plan.filters, cycles=1))
        graph = self.adder_graph(plan)
        schedule = self.schedule(plan, graph)
        params = replace(
            params_of(plan, EngineParams),
            adder_depth=graph.depth,
            graph_registers=schedule.register_bits(),
            graph_adders=len(graph.adders),
            graph_cells=graph.carry_cells(),
        )
        return replace(plan, params=params)

    def adder_graph(self, plan: LayerPlan, kernel: np.ndarray | None = None) -> cmvm.AdderGraph:
        """The layer's quantized kernel (`kernel`, else its record's) as an adder graph on its
        input's raw range (solved once: cached)."""
        if kernel is None:
            if plan.layer is None:
                raise ValueError(f"layer '{plan.name}': its adder graph needs the layer's weights")
            kernel = self.quantize(plan.layer, plan).kernel
        matrix = self.graph_kernel(plan, kernel)
        low, high = [plan.in_fmt.raw_min] * len(matrix), [plan.in_fmt.raw_max] * len(matrix)
        return cmvm.solve_cached(matrix, low, high, GRAPH_DELAY, f"layer '{plan.name}'", cache_root())

    def graph_kernel(self, plan: LayerPlan, kernel: np.ndarray) -> np.ndarray:
        """The matrix the adder graph multiplies its input vector (the whole window, all its
        channels) by, from the (K, filters) kernel: the kernel itself when every filter reads
        the same window."""
        return np.asarray(kernel)

    def schedule(self, plan: LayerPlan, graph: cmvm.AdderGraph) -> cmvm.Schedule:
        """The graph and the finish cut every `pipeline` levels (all of it in one stage at 0)."""
        levels = graph.depth + FINISH_LEVELS
        return cmvm.Schedule(graph, plan.engine_knobs.pipeline or levels, FINISH_LEVELS)

    def check(self, plan: LayerPlan) -> None:
        check_requantized_output(plan)

    def check_writable(self, plan: LayerPlan) -> None:
        """The latency strategy's weights are the adder graph itself: no memory to write."""
        if is_latency(plan):
            raise K2CError(
                f"layer '{plan.name}' uses the latency strategy: its weights are constants of an adder graph, "
                "which --writable-weights cannot rewrite; give it the resource strategy (--strategy resource)"
            )

    def exact_accumulator(self, plan: LayerPlan) -> bool:
        return params_of(plan, EngineParams).exact_accumulator

    def loads_late(self, plan: LayerPlan) -> int:
        """1 when the engine loads each window from its window generator's shift register the
        cycle after accepting it (a convolution without a FIFO of windows: K2C.Conv's
        `direct`), else 0 (from the input beat as it accepts it)."""
        return int(self.windowed and not params_of(plan, WindowParams).window_fifo and not is_latency(plan))

    def window_values(self, plan: LayerPlan) -> int:
        return self.window_channels(plan) * plan.window

    def fixed_knobs(self, plan: LayerPlan) -> bool:
        return is_latency(plan)

    def pipeline_stages(self, plan: LayerPlan) -> int | None:
        """A latency layer on vectors (a Dense): K2C.Cmvm.stages; a convolution's window
        generator before its graph is a stream stage of its own."""
        return cmvm_stages(plan) if is_latency(plan) and not self.windowed else None

    def logic_cells(self, plan: LayerPlan) -> int:
        """A latency layer's LUT4 cells (yosys' LUT4 + 2 x CCU2C; nextpnr counts a CCU2C as two
        TRELLIS_COMB): the adder graph's carry cells and each output's bias adder (the sum one
        bit wider), two cells a carry cell, and one cell an output bit for the requantization
        and activation."""
        if not is_latency(plan):
            return 0
        assert plan.acc_fmt is not None
        bias = plan.filters * -(-(plan.acc_fmt.hw_bits + 1) // 2)
        carries = params_of(plan, EngineParams).graph_cells + bias
        return CELLS_PER_CARRY * carries + plan.filters * plan.out_fmt.hw_bits

    def with_strategy(self, plan: LayerPlan, strategy: str) -> LayerPlan:
        if strategy == plan.engine_knobs.strategy:
            return plan
        if strategy == LATENCY:
            return self.plan_latency(replace(plan, knobs=replace(plan.engine_knobs, strategy=LATENCY)))
        own = replace(params_of(plan, EngineParams), adder_depth=0, graph_registers=0, graph_adders=0, graph_cells=0)
        return replace(plan, knobs=replace(plan.engine_knobs, strategy=strategy), params=own)

    def cost_note(self, plan: LayerPlan) -> str:
        if not is_latency(plan):
            return ""
        own = params_of(plan, EngineParams)
        return HASKELL.cost_note(own.graph_adders, own.adder_depth, own.graph_cells)

    def multipliers(self, plan: LayerPlan) -> int:
        return 0 if is_latency(plan) else plan.engine_knobs.pe * plan.chunk

    def rom_bits(self, plan: LayerPlan) -> int:
        assert plan.w_fmt is not None and plan.b_fmt is not None
        if is_latency(plan):
            return 0
        return plan.rom_depth * plan.engine_knobs.pe * (plan.chunk * plan.w_fmt.hw_bits + plan.b_fmt.hw_bits)

    def constants(self, layer: Layer) -> tuple[np.ndarray, np.ndarray]:
        weighted = cast(_Weighted, layer)
        return np.asarray(weighted.kernel), np.asarray(weighted.bias)

    def quantize(self, layer: Layer, plan: LayerPlan) -> QuantizedLayer:
        """The kernel as (K, filters) in window order, the bias (filters,)."""
        assert plan.w_fmt is not None and plan.b_fmt is not None
        kernel, bias = self.constants(layer)
        return QuantizedLayer(
            kernel=quantize(kernel.reshape(plan.window, plan.filters), plan.w_fmt), bias=quantize(bias, plan.b_fmt)
        )

    def blocks(
        self, plan: LayerPlan, down: Block, mx: Max, blocks: list[Stateful], knobs: EngineTiming | None = None
    ) -> Block:
        """The engine (S = G*b steps, depth D, queue Q: `knobs`, arrays when the model runs many
        configurations at once), behind the window generator when windowed. The latency
        strategy: K2C.Cmvm's pipeS of `cmvm_depth` registers."""
        if is_latency(plan):
            graph = pipe_block(cmvm_depth(plan), down, mx, blocks)
            return front_blocks(plan, graph, mx, blocks) if self.windowed else graph
        steps, depth, queue = knobs if knobs is not None else (plan.steps, plan.pipe_depth, plan.queue_depth)
        engine = Engine(steps, depth, queue, down, mx)
        blocks.append(engine)
        return front_blocks(plan, engine, mx, blocks) if self.windowed else engine

    def storage(self, plan: LayerPlan) -> Storage:
        """The engine's window (rotating chunks), accumulators, result register, pipeline
        registers and output queue; the window generator's and its FIFOs when windowed. The
        latency strategy: the input register, the graph's stages and valid bits (the last
        stage's register holds the finished results, and a table's two more), pipeS's queue of
        d + 2 results."""
        assert plan.acc_fmt is not None
        if is_latency(plan):
            result = plan.filters * plan.out_fmt.hw_bits + 1
            own = params_of(plan, EngineParams)
            accepted, fifo = pipeline_storage(
                self.window_values(plan) * plan.in_fmt.hw_bits, plan.filters * plan.out_fmt.hw_bits, cmvm_stages(plan)
            )
            regs = accepted + own.graph_registers + graph_stages(plan) - 1 + (1 + plan.table_regs) * result
            if not self.windowed:
                return Storage(register_bits=regs, fifo_bits=fifo)
            fifo += params_of(plan, WindowParams).window_fifo * self.window_values(plan) * plan.in_fmt.hw_bits
            window = window_storage(plan)
            return Storage(window.line_buffer_bits, regs + window.register_bits, fifo + window.fifo_bits)
        knobs = plan.engine_knobs
        in_bits, out_bits = plan.in_fmt.hw_bits, plan.out_fmt.hw_bits
        regs = self.window_channels(plan) * knobs.cycles * plan.chunk * in_bits
        regs += knobs.pe * plan.acc_fmt.hw_bits if knobs.cycles > 1 or knobs.pipeline else 0  # accumulators
        regs += plan.filters * out_bits if plan.groups > 1 else 0  # result register R
        regs += self.pipeline_register_bits(plan)
        fifo = plan.queue_depth * plan.filters * out_bits  # the output queue
        line = 0
        if self.windowed:  # the windows queued before the engine, and the window generator's
            fifo += params_of(plan, WindowParams).window_fifo * self.window_values(plan) * in_bits
            window = window_storage(plan)
            line, regs, fifo = window.line_buffer_bits, regs + window.register_bits, fifo + window.fifo_bits
        return Storage(line_buffer_bits=line, register_bits=regs, fifo_bits=fifo)

    def pipeline_register_bits(self, plan: LayerPlan) -> int:
        """A pipelined engine's data registers (K2C.Engine, K2C.Filter.adderTree): the operands
        twice (a chunk of the window per PE, which synthesis shares where the PEs share the
        window, and the weight word), the ch + 1 terms of every PE twice (the product
        registers), the tree's nodes after every `pipeline`-th level and, before an
        accumulating adder, after the last (nodes fed only by zero padding are constants,
        removed), the requantized and the activated results (and a table activation's two
        registers after its read: LayerPlan.table_regs); plus the valid/counter tag beside
        each stage."""
        knobs = plan.engine_knobs
        if knobs.pipeline == 0:
            return 0
        assert plan.w_fmt is not None and plan.b_fmt is not None
        terms, width, top = plan.chunk + 1, chunk_sum_bits(plan), tree_levels(plan.chunk)
        tag = 4 + max(plan.groups - 1, 0).bit_length()
        levels = list(range(knobs.pipeline, top + 1, knobs.pipeline))
        if len(levels) < tree_stages(
            plan.chunk, knobs.pipeline, knobs.cycles
        ):  # the last level, before the accumulators
            levels.append(top)
        chunks = knobs.pe if self.window_per_pe else 1
        operands = chunks * plan.chunk * plan.in_fmt.hw_bits + knobs.pe * (
            plan.chunk * plan.w_fmt.hw_bits + plan.b_fmt.hw_bits
        )
        data = 2 * operands + knobs.pe * width * (2 * terms + sum(-(-terms // 2**j) for j in levels))
        finished = (2 + plan.table_regs) * knobs.pe * plan.out_fmt.hw_bits  # requantized, activated, a table's two
        return data + finished + tag * (7 + plan.table_regs + len(levels))

    def depths(self, plan: LayerPlan) -> tuple[Depth, ...]:
        """D (without the late load e, which is the window generator's) and Q (K2C.Engine); the
        latency strategy: K2C.Cmvm's d over the generated module's Depth."""
        if is_latency(plan):
            expr = HASKELL.cmvm_depth(cmvm_module(plan), plan.table_regs)
            return (Depth("pipe", expr, cmvm_depth(plan), "cmvm"),)
        shape = (plan.chunk, plan.engine_knobs.pipeline, plan.groups, plan.engine_knobs.cycles, plan.table_regs)
        return (
            Depth("pipe", HASKELL.pipe_depth(*shape), plan.pipe_depth - plan.loads_late, "engine"),
            Depth("queue", HASKELL.queue_depth(*shape, plan.loads_late), plan.queue_depth, "engine"),
        )

    def engine_notes(self, plan: LayerPlan) -> tuple[str, ...]:
        """The engine's haddock notes: PEs, pipeline, the late load, the accumulator."""
        assert plan.acc_fmt is not None
        knobs = plan.engine_knobs
        notes = [
            HASKELL.pe_note(knobs.pe, plan.chunk, knobs.cycles, plan.groups, padding_neurons(plan)),
            HASKELL.pipeline_note(knobs.pipeline, plan.pipe_depth - plan.loads_late, plan.queue_depth)
            if knobs.pipeline
            else HASKELL.unpipelined_note(tree_levels(plan.chunk), plan.queue_depth),
        ]
        if plan.loads_late:
            notes.append(HASKELL.late_note())
        exactness = "exact" if self.exact_accumulator(plan) else "narrower than exact: saturates per chunk"
        notes.append(HASKELL.accumulator_note(plan.acc_fmt.clash_type, exactness))
        return tuple(notes)

    def engine_fields(self, plan: LayerPlan) -> dict[str, object]:
        """Network.hs.j2's and Weights.hs.j2's fields of an engine: its knobs and ROM."""
        assert plan.acc_fmt is not None and plan.w_fmt is not None and plan.b_fmt is not None
        knobs = plan.engine_knobs
        return {
            "compute": True,
            "pe": knobs.pe,
            "cycles": knobs.cycles,
            "levels": knobs.pipeline,
            "rom_depth": plan.rom_depth,
            "chunk": plan.chunk,
            "table_regs": plan.table_regs,
            "acc_clash": plan.acc_fmt.clash_type,
            "w_clash": plan.w_fmt.clash_type,
            "b_clash": plan.b_fmt.clash_type,
            "rom_doc": HASKELL.rom_doc(
                plan.rom_depth, plan.groups, knobs.cycles, knobs.pe, plan.chunk, plan.w_fmt, plan.b_fmt
            ),
        }

    def queues(self, plan: LayerPlan) -> tuple[list[str], str, list[str], list[str]]:
        """A windowed engine's FIFOs: the input queue stage, the window queue argument, their
        notes and the imports they need."""
        own = params_of(plan, WindowParams)
        input_queue = [HASKELL.input_queue(own.input_fifo)] if own.input_fifo else []
        window_queue = HASKELL.window_queued(own.window_fifo) if own.window_fifo else HASKELL.window_direct()
        notes = (
            [HASKELL.window_fifo_note(own.window_fifo)]
            if own.window_fifo
            else [HASKELL.input_fifo_note(own.input_fifo)]
            if own.input_fifo
            else []
        )
        uses = ["window_queued" if own.window_fifo else "window_direct"] + (["fifo"] if own.input_fifo else [])
        return input_queue, window_queue, notes, uses

    def compute_entry(
        self, plan: LayerPlan, doc: str, body: Sequence[str], notes: Sequence[str], uses: Sequence[str]
    ) -> Entry:
        if is_latency(plan):
            return self.latency_entry(plan, doc)
        return Entry(
            doc=doc,
            body=tuple(body),
            notes=(*self.engine_notes(plan), *notes),
            uses=tuple(uses),
            fields=self.engine_fields(plan),
        )

    def latency_entry(self, plan: LayerPlan, doc: str, front: Sequence[str] = (), uses: Sequence[str] = ()) -> Entry:
        """The layer as K2C.Cmvm over its generated module (`modules`), after the stages of
        `front` (a convolution's window generator): no knob arguments, the engine's finish."""
        assert plan.acc_fmt is not None
        module = cmvm_module(plan)
        own = params_of(plan, EngineParams)
        folded = rounding_offset(plan) > 0
        notes = [
            HASKELL.cmvm_note(
                module, own.adder_depth, plan.engine_knobs.pipeline, graph_stages(plan), cmvm_stages(plan)
            ),
            HASKELL.accumulator_note(plan.acc_fmt.clash_type, "exact"),
        ]
        return Entry(
            doc=doc,
            body=(*front, HASKELL.cmvm(module)),
            pipeline=(HASKELL.cmvm_stages(module), HASKELL.cmvm_stages_type(module, plan.table_regs)),
            notes=tuple(notes),
            uses=("cmvm", *(("quant",) if folded else ()), *uses),
            fields={
                "compute": False,
                "finishes": True,
                "table_regs": plan.table_regs,
                # the sum with the bias is one bit wider: the offset must not wrap it
                "acc_clash": replace(plan.acc_fmt, int=plan.acc_fmt.int + 1).clash_type,
                **({"requantizer": requantizer(plan.out_fmt, TRUNCATE)} if folded else {}),
                "imports": [f"import qualified {module}"],
            },
        )

    def modules(self, plan: LayerPlan, params: QuantizedLayer | None) -> dict[str, str]:
        """A latency layer's generated module (the weights, its adder graph, its Depth)."""
        if not is_latency(plan):
            return {}
        assert params is not None and plan.acc_fmt is not None and plan.w_fmt is not None
        assert plan.b_fmt is not None
        graph = self.adder_graph(plan, np.asarray(params.kernel))  # the golden model's weights
        product_shift = plan.acc_fmt.frac - (plan.in_fmt.raw_frac + plan.w_fmt.raw_frac)
        bias = np.asarray(params.bias).astype(object) << (plan.acc_fmt.frac - plan.b_fmt.raw_frac)
        module = cmvm_module(plan)
        offset = rounding_offset(plan)
        text = cmvm.haskell_module(
            module,
            "graph",
            self.graph_kernel(plan, np.asarray(params.kernel)),
            self.schedule(plan, graph),
            in_width=plan.in_fmt.hw_bits,
            out_width=plan.acc_fmt.hw_bits,
            out_shift=product_shift,
            bias=[b + offset for b in bias],
            bias_width=plan.acc_fmt.hw_bits + 1,
            bias_note=HASKELL.bias_note(offset),
            doc=HASKELL.module_doc(plan.name, plan.in_fmt, plan.w_fmt, plan.b_fmt, plan.acc_fmt.clash_type),
        )
        return {module: text}
