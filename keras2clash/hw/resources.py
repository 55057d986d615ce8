"""Resources of a planned layer and of a whole configuration: multipliers, MACs, and the
on-chip memory bits the blocks' haddocks give (ROM, line buffers, data registers, FIFOs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from keras2clash.hw.blocks import (
    INPUT_SLICE,
    OUTPUT_SLICE,
    class_depth,
    has_map_stage,
    is_softmax,
    is_table,
    map_depth,
    network_plans,
    pipeline_runs,
    pipeline_stages,
    top_slices,
)
from keras2clash.hw.events import pipeline_storage, softmax_depth
from keras2clash.hw.output import classifies, output_plans, splits_output
from keras2clash.hw.plan import LayerPlan
from keras2clash.jsontypes import JsonObject
from keras2clash.quant import activations


def relu_product_bits(plan: LayerPlan) -> int:
    """K2C.Relu.ReluProduct's bits: the comparison, the value above the threshold (the output
    format), the exact product of the slope (SFixed kb 16) and x - t (SFixed (ii + 2) fi)."""
    fi = plan.act_in_fmt.container
    c = activations.relu_constants(activations.parse(plan.activation), plan.act_in_fmt, plan.out_fmt)
    return 1 + plan.out_fmt.hw_bits + activations.slope_bits(c.slopes) + fi.hw_bits + 2


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
    register_bits: int  # data registers (window, engine input/accumulators/results/pipeline, collect)
    fifo_bits: int = 0  # LUT RAM FIFOs: a merge's branch FIFOs, an engine's output queue (K2C.Fifo)
    table_bits: int = 0  # activation tables (K2C.Lut, K2C.Softmax): one copy per beat element
    block_fifo_bits: int = 0  # block RAM FIFOs: a merge's branch FIFO that holds an image (K2C.Fifo.blockFifo)
    logic_cells: int = 0  # LUT4 cells of a layer of constants (the latency strategy: graph, bias, finish)
    strategy: str = ""  # a compute layer's (hw.plan.STRATEGIES)

    @property
    def memory_bits(self) -> int:
        return (
            self.rom_bits
            + self.line_buffer_bits
            + self.register_bits
            + self.fifo_bits
            + self.table_bits
            + self.block_fifo_bits
        )


def runs_of(plans: Sequence[LayerPlan]) -> dict[str, tuple[LayerPlan, ...]]:
    """Each layer of a run of pipelines that the network builds as one stage
    (`hw.blocks.pipeline_runs`): the run's plans, in order."""
    by_name = {p.name: p for p in network_plans(plans)}
    return {name: tuple(by_name[n] for n in run) for run in pipeline_runs(plans) for name in run}


def _run_share(plan: LayerPlan, run: Sequence[LayerPlan], regs: int, fifo: int) -> tuple[int, int]:
    """A layer's data registers and FIFO bits in a run of pipelines: K2C.Pipe.pipeline's input
    register at the run's head only and the run's output queue at its tail only, in place of
    the ones its kind counts when it stands alone."""
    out_bits = plan.output_shape[-1] * plan.out_fmt.hw_bits
    in_bits = plan.input_shape[-1] * plan.in_fmt.hw_bits
    names = [p.name for p in run]
    stages = [pipeline_stages(p) or 0 for p in run]
    alone_regs, alone_fifo = pipeline_storage(in_bits, out_bits, stages[names.index(plan.name)])
    regs -= 0 if plan.name == names[0] else alone_regs
    fifo -= alone_fifo
    if plan.name == names[-1]:
        fifo += pipeline_storage(0, out_bits, sum(stages))[1]
    return regs, fifo


def layer_resources(plan: LayerPlan, runs: Mapping[str, Sequence[LayerPlan]] | None = None) -> LayerResources:
    """The layer's multipliers, MACs and memory; `runs` (`runs_of`): the runs of pipelines
    of its network, whose layers share one input register and one output queue."""
    out_bits = plan.out_fmt.hw_bits
    assert plan.kind is not None
    own = plan.kind.storage(plan)
    line, regs, fifo = own.line_buffer_bits, own.register_bits, own.fifo_bits
    run = (runs or {}).get(plan.name, ())
    if run:
        regs, fifo = _run_share(plan, run, regs, fifo)
    channels = plan.output_shape[-1]
    knobs = plan.knobs if plan.is_compute else None
    if has_map_stage(plan):  # K2C.Pipe.mapP (mapP2, mapTable): the registered results and their queue
        depth = map_depth(plan)
        regs += channels * out_bits * (1 + int(is_table(plan))) + depth  # mapTable: the read, its output register
        if plan.splits_activation:  # the input beat, the registered halves: K2C.Relu.ReluProduct
            regs += channels * (plan.act_in_fmt.hw_bits + relu_product_bits(plan))
        fifo += (depth + 2) * channels * out_bits
    return LayerResources(
        name=plan.name,
        type=plan.type,
        pe=knobs.pe if knobs is not None else 0,
        cycles=knobs.cycles if knobs is not None else 0,
        groups=plan.groups if knobs is not None else 0,
        steps=plan.steps if knobs is not None else 0,
        multipliers=plan.multipliers,
        macs=plan.macs,
        rom_bits=plan.rom_bits,
        line_buffer_bits=line,
        register_bits=regs,
        fifo_bits=fifo,
        table_bits=activation_table_bits(plan) + own.table_bits,
        block_fifo_bits=own.block_fifo_bits,
        logic_cells=plan.logic_cells,
        strategy=knobs.strategy if knobs is not None else "",
    )


def top_fifo_bits(plans: Sequence[LayerPlan]) -> int:
    """Top.core's FIFOs (LUT RAM): the input FIFO (2 beats), each output's FIFO (2 beats), when
    it has them (`top_slices`). A classifier's output beat is the scores and the class index;
    its class pipeline's queue holds `class_depth + 2` of them, an output softmax's queue
    `softmax_depth + 2`."""
    first = plans[0]
    input_slice, output_slice = top_slices(plans)
    bits = INPUT_SLICE * first.input_shape[-1] * first.in_fmt.hw_bits if input_slice else 0
    for last in output_plans(plans):
        n = last.output_shape[-1]
        if not classifies(last):
            bits += OUTPUT_SLICE * n * last.out_fmt.hw_bits if output_slice else 0
            continue
        result = n * last.out_fmt.hw_bits + (n - 1).bit_length()
        bits += OUTPUT_SLICE * result
        logits_bits = n * (last.act_in_fmt if splits_output(last) else last.out_fmt).hw_bits + (n - 1).bit_length()
        bits += (class_depth(n) + 2) * (logits_bits if splits_output(last) and is_softmax(last) else result)
        if splits_output(last) and is_softmax(last):
            bits += (softmax_depth(last.out_fmt.frac, n) + 2) * result
    return bits


def activation_table_bits(plan: LayerPlan) -> int:
    """Bits of the activation's tables: entries x width x the beat's elements (each element
    reads its own asynchronous ROM)."""
    act = activations.parse(plan.activation)
    beat = plan.output_shape[-1]
    if act.kind == "softmax":
        table = activations.softmax_table(plan.act_in_fmt, plan.out_fmt, beat, act.scale)
        return len(table.values) * (table.frac + 2) * beat
    if act.family == "table":
        return (
            len(activations.table(plan.activation, plan.act_in_fmt, plan.out_fmt).values) * plan.out_fmt.hw_bits * beat
        )
    return 0


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
    fifo_bits: int = 0  # LUT RAM FIFOs: engine output queues, branch FIFOs
    layers: list[LayerResources] = field(default_factory=list)
    block_fifo_bits: int = 0  # block RAM FIFOs: branch FIFOs that hold an image
    logic_cells: int = 0  # LUT4 cells of the layers of constants (the latency strategy: graph, bias, finish)

    @property
    def strategies(self) -> list[str]:
        """Each compute layer's strategy (hw.plan.STRATEGIES)."""
        return [r.strategy for r in self.layers if r.strategy]

    @property
    def efficiency(self) -> float:
        """Multiplier efficiency: useful MACs per multiplier-cycle, MACs / (multipliers x II),
        of the MACs done on multipliers (an adder graph of constants does its own without)."""
        macs = self.macs - sum(r.macs for r in self.layers if r.logic_cells)
        return multiplier_efficiency(macs, self.multipliers, self.ii)

    def images_per_second(self, clock_mhz: float) -> float:
        return clock_mhz * 1e6 / self.ii

    def to_json(self) -> JsonObject:
        data: JsonObject = asdict(self)
        data["efficiency"] = self.efficiency
        return data


def multiplier_efficiency(macs: int, multipliers: int, ii: float) -> float:
    return macs / (multipliers * ii) if multipliers and ii else 0.0
