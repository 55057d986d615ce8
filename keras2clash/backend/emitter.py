"""The backend: a plan and quantized parameters -> a Clash project directory.

Python decides (names, types, sizes, file contents); the jinja2 templates in
`templates/` hold the Haskell text. The emitted project is self-contained: it carries a
copy of the `clash_lib` blocks it uses, so it can be read, changed and built on its own.
"""

from __future__ import annotations

import functools
import keyword
import math
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import NotRequired, TypeAlias, TypedDict, cast

import jinja2

from keras2clash.backend.activations import ActivationCode, activation_code
from keras2clash.backend.haskell import beat_type, format_type_name, requantizer, shape_text
from keras2clash.backend.memfiles import memfile_text, word_bits
from keras2clash.errors import K2CError
from keras2clash.fpga.devices import get_device
from keras2clash.hw.blocks import (
    branch_repeats,
    chain_runs,
    network_outputs,
    network_plans,
    stages_table,
    timing_checks,
    top_slices,
)
from keras2clash.hw.events import block_ram_fifo
from keras2clash.hw.inputs import network_inputs, several_inputs
from keras2clash.hw.output import classifies, output_beats, output_plans, several_outputs, splits_output
from keras2clash.hw.plan import LayerPlan, has_constant_layers, relu_before_requantize
from keras2clash.ir.structure import Chain, Dag, Parallel, network_shape
from keras2clash.kinds import kind_of
from keras2clash.quant import activations as acts
from keras2clash.quant.formats import MIN_HARDWARE_BITS, FixedFormat
from keras2clash.quant.golden import QuantizedLayer
from keras2clash.version import __version__


def _clash_lib() -> Path:
    """The predefined blocks: package data in an installed wheel (keras2clash/clash_lib), the
    repository's top-level clash_lib/ in a checkout (editable install)."""
    package = Path(__file__).resolve().parent.parent
    installed = package / "clash_lib"
    return installed if (installed / "K2C").is_dir() else package.parent / "clash_lib"


CLASH_LIB = _clash_lib()

SIMULATION_ONLY = {"K2C.Sim"}
"""Blocks that drive simulations and are not part of the synthesizable library."""

HASKELL_RESERVED = {
    "case",
    "class",
    "data",
    "default",
    "deriving",
    "do",
    "else",
    "foreign",
    "if",
    "import",
    "in",
    "infix",
    "infixl",
    "infixr",
    "instance",
    "let",
    "module",
    "newtype",
    "of",
    "then",
    "type",
    "where",
    # names the generated modules define or import unqualified
    "network",
    "topEntity",
    "main",
    "pe",
    "activation",
    "finish",
    "linear",
    "relu",
    "requantize",
    "argmax",
    "mapS",
    "romWords",
    "simMain",
    "cycles",
    "outputActivation",
    # the weight port's names (--writable-weights: Weights.hs and Top.hs use them unqualified)
    "writable",
    "busTable",
    "weightPort",
    "closedWhile",
    "mirror",
    "readAnswer",
    "readBack",
}

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("keras2clash.backend", "templates"),
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    undefined=jinja2.StrictUndefined,
)
_env.filters["prefix"] = lambda text, prefix: f"{prefix}{text}"


def haskell_arg(expr: str) -> str:
    """`expr` as one argument of a Haskell application: in parentheses unless it is a
    single token or already one parenthesised expression."""
    if " " not in expr:
        return expr
    depth = 0
    for i, ch in enumerate(expr):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and i < len(expr) - 1:
            return f"({expr})"
    return expr if expr.startswith("(") else f"({expr})"


_env.filters["arg"] = haskell_arg


@functools.cache
def clash_prelude_names() -> frozenset[str]:
    """Value names Clash.Prelude exports (shipped list, plus the SNat shorthands d0..d1024)."""
    text = (Path(__file__).parent / "clash_prelude_names.txt").read_text()
    names = {line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")}
    return frozenset(names) | {f"d{k}" for k in range(1025)}


def haskell_names(names: Sequence[str]) -> list[str]:
    """Keras layer names as unique Haskell function names (`dense_1` stays `dense_1`); a name
    Clash.Prelude also exports (`d1`, `map`, ...) gets a `_layer` suffix."""
    used: set[str] = set()
    result = []
    for name in names:
        ident = re.sub(r"[^0-9A-Za-z_']", "_", name)
        ident = ident[:1].lower() + ident[1:]
        if not ident or not (ident[0].isalpha() or ident[0] == "_") or ident[0].isdigit():
            ident = "layer_" + ident
        if ident in HASKELL_RESERVED or keyword.iskeyword(ident) or ident in clash_prelude_names():
            ident = ident + "_layer"
        base, k = ident, 1
        while ident in used:
            ident, k = f"{base}_{k}", k + 1
        used.add(ident)
        result.append(ident)
    return result


def cabal_package_name(name: str) -> str:
    """A valid cabal package name: dash-separated parts, none all digits (`net_2` -> `net2`)."""
    parts: list[str] = []
    for part in re.split(r"[^0-9A-Za-z]+", name):
        if not part:
            continue
        if part.isdigit() and parts:
            parts[-1] += part
        else:
            parts.append(part if not part.isdigit() else "net" + part)
    return "-".join(parts) or "net"


HDL_KEYWORDS = {
    "module",
    "input",
    "output",
    "wire",
    "reg",
    "begin",
    "end",
    "signal",
    "entity",
    "architecture",
    "process",
    "type",
    "logic",
    "port",
    "in",
    "out",
    "is",
    "of",
    "and",
    "or",
    "not",
    "case",
}


MAX_NAME_LENGTH = 64
"""Longest top entity name: it names files (`<name>.cabal`, Clash's `<name>.v`), and file
names are limited (255 bytes on most file systems)."""


def hdl_name(text: str) -> str:
    """A Keras model name as the top entity's name, legal in Verilog, VHDL and Haskell:
    lower snake case, starting with a letter, no double or trailing underscore (VHDL)."""
    ident = re.sub(r"_+", "_", re.sub(r"[^0-9a-zA-Z_]", "_", text)).strip("_").lower()
    if not ident or not ident[0].isalpha():
        ident = ("net_" + ident).rstrip("_")
    if ident in HDL_KEYWORDS:
        ident += "_net"
    if len(ident) > MAX_NAME_LENGTH:
        raise K2CError(
            f"name {text[:40]!r}... is {len(ident)} characters as an HDL name; at most "
            f"{MAX_NAME_LENGTH} (it names files): give a shorter --name"
        )
    return ident


CLASH_FLAGS = ("-fclash-spec-limit=100",)
"""What every run of clash on a project passes besides the language: Clash specializes each
block function once per type it is used at, and stops at 20 by default as if it were
recursing; a network of many stages (jet_transformer: attention and two layer normalizations)
uses K2C.Pipe.stageReg at more types than that."""

IMPORTS = {
    "dense": "import qualified K2C.Dense as Dense",
    "conv2d": "import qualified K2C.Conv as Conv",
    "conv2d_dilated": "import qualified K2C.Dilated as Dilated",
    "depthwise2d": "import qualified K2C.Depthwise as Depthwise",
    "pad": "import qualified K2C.Pad as Pad",
    "pool": "import qualified K2C.Pool as Pool",
    "engine": "import qualified K2C.Engine as Engine",
    "pipe_types": "import qualified K2C.Pipe as Pipe",
    "classify": "import qualified K2C.Classify as Classify",
    "type_equality": "import Data.Type.Equality ((:~:) (Refl))",
    "merge": "import qualified K2C.Merge as Merge",
    "global": "import qualified K2C.Global as Global",
    "batch_norm": "import qualified K2C.BatchNorm as BatchNorm",
    "layer_norm": "import qualified K2C.LayerNorm as LayerNorm",
    "branches": "import K2C.Branch (branches)",
    "wiring": "import K2C.Branch (fork, joined, moves)",
    "fifo": "import K2C.Fifo (fifo)",
    "block_fifo": "import K2C.Fifo (blockFifo)",
    "repeat": "import K2C.Repeat (repeatS)",
    "window_direct": "import K2C.Conv (direct)",
    "window_queued": "import K2C.Conv (queued)",
    "collect": "import qualified K2C.Collect as Collect",
    "crop": "import qualified K2C.Crop as Crop",
    "upsample": "import qualified K2C.Upsample as Upsample",
    "interleave": "import qualified K2C.Interleave as Interleave",
    "scatter": "import qualified K2C.Scatter as Scatter",
    "relu": "import qualified K2C.Relu as Relu",
    "table": "import qualified K2C.Lut as Lut",
    "softmax": "import qualified K2C.Softmax as Softmax",
    "activation": "import qualified K2C.Lut as Lut",
    "quant": "import qualified K2C.Quant as Quant",
    "requant": "import qualified K2C.Requant as Requant",
    "cmvm": "import qualified K2C.Cmvm as Cmvm",
    "recurrent": "import qualified K2C.Recurrent as Recurrent",
    "reverse": "import qualified K2C.Reverse as Reverse",
    "attention": "import qualified K2C.Attention as Attention",
}


def _container_label(fmt: FixedFormat) -> str:
    """`1,7,8`, or `0,4,4 held in 1,4,4` for a format whose container differs."""
    return str(fmt) if fmt == fmt.container else f"{fmt} held in {fmt.container}"


LayerEntry: TypeAlias = dict[str, object]
"""One layer as Network.hs.j2 and Weights.hs.j2 see it (`_layer_entry`): the fields every
layer has and its kind's own (`Entry.fields`), which only the kind and its template know."""


class FormatType(TypedDict):
    """A container type the generated modules declare (`format_type_name`)."""

    name: str
    clash: str
    bits: int
    label: str  # the formats it holds


class TimingCheck(TypedDict):
    """A depth the Haskell types must equal (`hw.blocks.timing_checks`)."""

    name: str
    type: str
    value: int


class NetworkArg(TypedDict):
    """A type-level argument of the network: a knob or a FIFO depth."""

    var: str
    value: int
    doc: str


class TemplateContext(TypedDict):
    """What the project's templates are rendered with (`build_context`)."""

    name: str
    package: str
    version: str
    clash_flags: str  # CLASH_FLAGS, for the README's commands
    format_types: list[FormatType]
    layers: list[LayerEntry]
    timing: list[TimingCheck]
    compute_layers: list[LayerEntry]
    layer_weights: list[str]
    weights_exports: list[str]
    imports: list[str]
    network_args: list[NetworkArg]
    composition: str
    piped: bool  # a run of pipeline layers composed into one stage (`hw.blocks.chain_runs`)
    wiring: Wiring | None
    has_branches: bool
    input_type: str
    input_doc: str
    beats_per_image: int
    beat_width: int
    n_in: int
    n_out: int
    classifies: bool
    out_beats: int
    out_width: int
    output_type: str
    output_note: str
    logits_type: str
    output_activation: str
    output_stream: str | None
    output_activation_doc: str
    heads: list[HeadContext]  # several outputs or inputs: one per output port (else empty)
    input_slice: bool  # Top's input FIFO (`hw.blocks.top_slices`)
    output_slice: bool  # Top's output FIFO
    inputs: list[InputContext]  # several inputs: one per input port (empty for one input)
    activations: list[ActivationCode]
    tables: list[ActivationCode]
    kind_tables: bool  # a kind's own memory files (`Kind.memory_files`) beside the activation tables
    uses_maps: bool
    in_fmt: FixedFormat
    out_fmt: FixedFormat
    in_label: str
    out_label: str
    pe_literals: str
    input_shape_text: str
    output_shape_text: str
    layer_modules: list[str]  # modules generated for a layer (`Kind.modules`)
    writable: bool  # the weight memories are written through the weight port (K2C.WeightBus)
    readable: bool  # the weight port reads them back too (K2C.WeightReadBack)
    bus_beats: int  # the most 32-bit beats a word of a writable memory takes
    sim_blocks: NotRequired[list[str]]  # the copied blocks, added by `write_project`
    blocks: NotRequired[list[str]]


def _layer_entry(plan: LayerPlan, fn: str, code: ActivationCode | None = None, at_output: bool = False) -> LayerEntry:
    """Everything one layer's Haskell function needs: its kind's entry (`Kind.entry`) and the
    parts every kind shares (types, the output format's container, the fused activation).
    `code` is its activation; `at_output` says the Top applies it (after taking the class
    from the values before it)."""
    home = kind_of(plan.type)
    if home is None:
        raise ValueError(f"no emitter for layer type {plan.type!r}")
    in_elem, out_elem = format_type_name(plan.in_fmt), format_type_name(plan.out_fmt)
    notes, uses = [], []
    if not plan.out_fmt.is_plain:
        notes.append(
            f"Output format {plan.out_fmt} in its container {plan.out_fmt.container} "
            "(docs: arithmetic contract, formats)."
        )
        uses += ["quant"] if home.requantizes else []
    # an activation of its own stage after the layer (per channel, or cut in two: mapP2), or
    # one inside the layer's last register stage (elementwise)
    staged = code is not None and (code.vector or code.product_body is not None or stages_table(plan))
    elementwise = code is not None and not staged and not at_output
    vector_stage = [code.stage()] if code is not None and staged and not at_output else []
    if code is not None:
        notes.append(f"Activation {code.doc}" + (" (applied in Top, after the class)" if at_output else ""))
        uses.append(_activation_import(plan))
    uses += [_activation_import(variant) for _, variant in home.extra_activations(plan, fn)]
    own = home.entry(plan, fn, code.stage() if code is not None else None)
    entry: LayerEntry = {
        "name": plan.name,
        "fn": fn,
        "type": plan.type,
        "compute": False,
        "merge": False,
        "in_type": beat_type(plan.input_shape, in_elem),
        "out_type": beat_type(plan.output_shape, out_elem),
        "out_elem": out_elem,
        "requantizer": requantizer(plan.out_fmt),
        "requantizes": home.requantizes,
        "doc": own.doc,
        "body": list(own.body) + (vector_stage if home.fuses_activation else []),
        "pipeline": own.pipeline,
        "notes": notes + list(own.notes),
        "uses": list(own.uses) + uses,
    }
    if home.fuses_activation:
        entry["hw_activation"] = code.name if elementwise and code is not None else "linear"
    entry.update(own.fields)
    if relu_before_requantize(plan) and "hw_activation" in entry:  # HGQ2's order (docs: contract, formats)
        entry.update(requantizer=f"({entry['requantizer']} . relu)", hw_activation="linear")
        cast(list[str], entry["notes"]).append(
            f"The ReLU acts on the exact value, before the wrapping requantization to {plan.out_fmt}."
        )
    return entry


def _activation_import(plan: LayerPlan) -> str:
    act = acts.parse(plan.activation)
    return {"relu": "relu", "hard": "relu", "softmax": "softmax"}.get(act.family, "table")


def _stage(plan: LayerPlan, entry: LayerEntry) -> str:
    return (
        f"{entry['fn']} p_{entry['fn']} b_{entry['fn']} l_{entry['fn']}" if entry["compute"] else cast(str, entry["fn"])
    )


def _render_chain(
    chain: Chain,
    by_name: dict[str, tuple[LayerPlan, LayerEntry]],
    fifo_args: list[NetworkArg],
    indent: str,
    built: Mapping[str, LayerPlan],
    runs: list[tuple[str, ...]],
) -> str:
    """The Haskell composition of a chain: layers joined by `|>`, each parallel block a
    `branches` of its branch chains (each ending in its FIFO), then the merge layer; a run of
    pipeline layers (`hw.blocks.chain_runs` over the layers as the network builds them,
    `built`) one `pipeline` of their `>->`, added to `runs`."""
    stages: list[str] = []
    items = chain_runs(chain.items, built)
    for k, item in enumerate(items):
        if isinstance(item, tuple):
            runs.append(item)
            stages.append(f"pipeline ({' >-> '.join(cast(str, by_name[name][1]['fn']) for name in item)})")
        elif isinstance(item, Parallel):
            merge_plan, merge_entry = by_name[items[k + 1]]  # type: ignore[index]
            stages.append(_render_parallel(item, merge_plan, merge_entry, by_name, fifo_args, indent, built, runs))
        else:
            stages.append(_stage(*by_name[item]))
    return f"\n{indent}|> ".join(stages) if stages else "id"


def _pipe_runs(runs: Sequence[tuple[str, ...]], by_name: dict[str, tuple[LayerPlan, LayerEntry]]) -> None:
    """Every layer of a run of pipelines (`_render_chain`) as a K2C.Pipe.Pipeline (its entry's
    `pipeline`: the expression and the depth of its type), with a note naming its run."""
    for run in runs:
        fns = [cast(str, by_name[name][1]["fn"]) for name in run]
        for name in run:
            entry = by_name[name][1]
            expr, depth = cast(tuple[str, str], entry["pipeline"])
            entry.update(body=[expr], piped=depth)
            cast(list[str], entry["notes"]).append(
                f"One pipeline with {_names([f for f in fns if f != entry['fn']])} ('network': "
                "K2C.Pipe.pipeline over their '>->'): one input register and one output queue for the run."
            )


def _names(names: Sequence[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _render_parallel(
    block: Parallel,
    merge: LayerPlan,
    entry: LayerEntry,
    by_name: dict[str, tuple[LayerPlan, LayerEntry]],
    fifo_args: list[NetworkArg],
    indent: str,
    built: Mapping[str, LayerPlan],
    runs: list[tuple[str, ...]],
) -> str:
    inner = indent + "    "
    branches = []
    depths = merge.kind.branch_fifos(merge) if merge.kind is not None else ()
    for i, (branch, repeats) in enumerate(zip(block.branches, branch_repeats(merge))):
        var = f"d_{entry['fn']}_{i}"
        depth = depths[i] if depths else 2
        head = _render_chain(branch, by_name, fifo_args, inner + "  ", built, runs) if branch.items else ""
        fifo = "blockFifo" if block_ram_fifo(depth) else "fifo"
        where = "; block RAM" if block_ram_fifo(depth) else ""
        fifo_args.append(
            {
                "var": var,
                "value": depth,
                "doc": f"FIFO depth of branch {i} into {merge.name} (from the hardware model{where})",
            }
        )
        tail = f"repeatS (SNat @{repeats}) |> {fifo} {var}" if repeats > 1 else f"{fifo} {var}"
        branches.append(f"({head}\n{inner}  |> {tail})" if head else f"({tail})")
    text = branches[-1]
    for k, outer in enumerate(reversed(branches[:-1])):
        text = f"branches\n{inner}{outer}\n{inner}" + (text if k == 0 else f"({text})")
    return text


def _branch_uses(plans: Sequence[LayerPlan]) -> list[str]:
    """The blocks the branches' tails import: `fifo` or `blockFifo` (`hw.events.block_ram_fifo`)
    and, before a held gate's FIFO, `repeatS` (`hw.blocks.branch_repeats`)."""
    uses: set[str] = set()
    for plan in plans:
        if plan.is_merge:
            assert plan.kind is not None
            depths = plan.kind.branch_fifos(plan) or (2,) * len(plan.inputs)
            uses |= {"block_fifo" if block_ram_fifo(d) else "fifo" for d in depths}
            uses |= {"repeat" for n in branch_repeats(plan) if n > 1}
    return sorted(uses)


class WiringFork(TypedDict):
    """A tensor read by several layers (K2C.Branch.fork): its stream, the vector of its
    readers' streams, the ready its producer sees, the readers' readies."""

    stream: str
    reads: str
    ready: str
    readers: list[str]


class WiringFifo(TypedDict):
    """A merge's input FIFO: its output, its ready, its depth argument, the stream it reads and
    the join's move signal."""

    stream: str
    ready: str
    depth: str
    source: str
    moves: str
    tail: str  # `fifo d`, `blockFifo d`, after `repeatS (SNat @n) |>` for a held gate


class WiringRun(TypedDict):
    """Layers composed with `|>` applied to their input stream and their consumer's ready."""

    stream: str
    ready: str
    stages: list[str]
    source: str
    out_ready: str
    fifos: list[WiringFifo]  # a merge's input FIFOs (the run starts with the merge)
    joined: list[str]  # the FIFO outputs the merge pairs
    moves: str


class Wiring(TypedDict):
    """The `where` block of a network that is not series-parallel (Network.hs.j2)."""

    output: str
    outputs: list[str]  # one stream per output (several outputs: `network` returns their tuple)
    port_readies: list[str]  # the ready each output's Top blocks give (several outputs)
    input_ready: str
    inputs: list[str]  # one stream per input (several inputs: `network` takes their tuple)
    input_readies: list[str]  # the ready each input's stream sees
    steps: list[WiringRun | WiringFork]


def _wiring(
    shape: Dag,
    by_name: dict[str, tuple[LayerPlan, LayerEntry]],
    fifo_args: list[NetworkArg],
    port_readies: Sequence[str] = ("ready",),
) -> Wiring:
    """Named streams, one per Keras tensor (`<layer>_out`) with the ready its producer sees
    (`<layer>_out_ready`); a tensor with several readers through a fork (`<layer>_reads`), each
    merge input through a FIFO (`<merge>_fifo_<i>`), whose beats the merge's join moves together.
    Output k (`shape.sinks`) is read by its port, whose ready is `port_readies[k]`."""
    fn = {name: cast(str, entry["fn"]) for name, (_, entry) in by_name.items()}
    streams = input_streams(shape.sources)
    inputs = dict(zip(shape.inputs, streams))

    def tensor(name: str) -> str:
        return inputs.get(name) or f"{fn[name]}_out"

    def reader_ready(reader: str, i: int) -> str:
        plan, _ = by_name[reader]
        return f"{fn[reader]}_fifo_ready_{i}" if plan.is_merge else f"{fn[reader]}_ready"

    ports = dict(zip(shape.sinks, port_readies))
    edge: dict[tuple[str, int], str] = {}  # (reader, input index) -> the stream it reads
    out_ready: dict[str, str] = {}  # tensor -> the ready its producer sees
    outputs: dict[str, str] = {}  # output tensor -> the stream its port reads
    forks: dict[str, WiringFork] = {}
    for name, readers in shape.readers.items():
        readies = [reader_ready(*r) for r in readers] + ([ports[name]] if name in ports else [])
        if len(readies) == 1:
            if name in ports:
                outputs[name] = tensor(name)
            else:
                edge[readers[0]] = tensor(name)
            out_ready[name] = readies[0]
        elif readies:
            stream = tensor(name)
            reads = stream.removesuffix("_out") + "_reads"
            for j, reader in enumerate(readers):
                edge[reader] = f"{reads} !! {j}"
            if name in ports:
                outputs[name] = f"{reads} !! {len(readers)}"
            out_ready[name] = f"{stream}_ready"
            forks[name] = {"stream": stream, "reads": reads, "ready": out_ready[name], "readers": readies}
    steps: list[WiringRun | WiringFork] = [forks[source] for source in shape.inputs if source in forks]
    for run in shape.runs:
        first_plan, _ = by_name[run.layers[0]]
        first = fn[run.layers[0]]
        fifos: list[WiringFifo] = []
        if first_plan.is_merge:
            depths = first_plan.kind.branch_fifos(first_plan) if first_plan.kind is not None else ()
            for i, repeats in enumerate(branch_repeats(first_plan)):
                var = f"d_{first}_{i}"
                depth = depths[i] if depths else 2
                where = "; block RAM" if block_ram_fifo(depth) else ""
                fifo_args.append(
                    {
                        "var": var,
                        "value": depth,
                        "doc": f"FIFO depth of input {i} of {first_plan.name} (from the hardware model{where})",
                    }
                )
                tail = f"{'blockFifo' if block_ram_fifo(depth) else 'fifo'} {var}"
                fifos.append(
                    {
                        "stream": f"{first}_fifo_{i}",
                        "ready": f"{first}_fifo_ready_{i}",
                        "depth": var,
                        "source": edge[(run.layers[0], i)],
                        "moves": f"{first}_moves",
                        "tail": f"(repeatS (SNat @{repeats}) |> {tail})" if repeats > 1 else tail,
                    }
                )
        steps.append(
            {
                "stream": tensor(run.output),
                "ready": f"{first}_ready",
                "stages": [_stage(*by_name[name]) for name in run.layers],
                "source": f"{first}_in" if fifos else edge[(run.layers[0], 0)],
                "out_ready": out_ready[run.output],
                "fifos": fifos,
                "joined": [f["stream"] for f in fifos],
                "moves": f"{first}_moves",
            }
        )
        if run.output in forks:
            steps.append(forks[run.output])
    names: list[str] = list(port_readies) if len(port_readies) > 1 else []  # the names the `where` block defines
    for fork in forks.values():
        names += [fork["reads"], fork["ready"]]
    for step in steps:
        if "fifos" in step:
            wired = cast(WiringRun, step)
            names += [wired["stream"], wired["ready"]] + [f[k] for f in wired["fifos"] for k in ("stream", "ready")]
            names += [wired["source"], wired["moves"]] if wired["fifos"] else []
    taken = set(fn.values()) | {"ready", *streams}
    clash = (set(names) & taken) or {n for n in names if names.count(n) > 1}
    if shape.sources:  # a layer named like an input stream (`input0`) would be shadowed by it
        clash = clash or (set(streams) & set(fn.values()))
    if clash:
        raise K2CError(
            f"the stream name '{sorted(clash)[0]}' of the network's wiring is also a layer's name: rename the layer"
        )
    readies = [out_ready.get(source, reader_ready(*shape.readers[source][0])) for source in shape.inputs]
    ends = [outputs[sink] for sink in shape.sinks]
    return {
        "output": ends[0],
        "outputs": ends,
        "port_readies": list(port_readies),
        "input_ready": readies[0],
        "inputs": streams,
        "input_readies": readies,
        "steps": steps,
    }


def input_streams(sources: Sequence[str]) -> list[str]:
    """The network's input streams: `input`, or `input<k>` per input of several (`Dag.sources`)."""
    return [f"input{k}" for k in range(len(sources))] if sources else ["input"]


def _activation_codes(
    plans: Sequence[LayerPlan], fns: Sequence[str], type_names: dict[FixedFormat, str]
) -> dict[str, ActivationCode | None]:
    """Every layer's activation code; a name that clashes with a layer's gets `_act`."""
    taken = set(fns)
    codes: dict[str, ActivationCode | None] = {}
    for plan, fn in zip(plans, fns):
        code = activation_code(plan, fn, type_names)
        if code is not None and code.name in taken:
            code = _named(code, code.name + "_act")
        if code is not None:
            taken.add(code.name)
        codes[plan.name] = code
        for name, variant in plan.kind.extra_activations(plan, fn) if plan.kind is not None else ():
            extra = activation_code(variant, fn, type_names)
            if extra is None or name in taken:
                raise ValueError(f"layer '{plan.name}': no activation function {name} or one of that name already")
            taken.add(name)
            codes[f"{plan.name}/{name}"] = _named(extra, name)
    return codes


def _named(code: ActivationCode, name: str) -> ActivationCode:
    """`code` under another Haskell name (its table and its first half renamed with it)."""
    return replace(
        code,
        name=name,
        body=code.body.replace(f"W.{code.name}", f"W.{name}").replace(code.product_name, name + "_product"),
        table_name=code.table_name and name,
    )


class HeadContext(TypedDict):
    """One output of the network as the templates show it (Top's port, its class or beats)."""

    index: int
    name: str  # the output layer's Keras name
    fn: str
    port: str  # the port prefix: m<index>_axis
    classifies: bool
    n_out: int
    class_bits: int
    out_beats: int
    out_width: int
    output_type: str
    output_note: str
    logits_type: str
    output_activation: str
    output_stream: str | None
    output_activation_doc: str
    out_fmt: FixedFormat
    out_label: str
    output_shape_text: str


def _head_context(
    index: int, head: LayerPlan, fn: str, code: ActivationCode | None, type_names: dict[FixedFormat, str]
) -> HeadContext:
    """Output `index` of the network, the layer `head`: its types and the activation the Top
    applies after its class (`hw.output.splits_output`)."""
    split = splits_output(head)
    output_stream = code.name if split and code is not None and code.stream else None
    output_activation = (
        "id" if not split or code is None or output_stream else code.name if code.vector else f"map {code.name}"
    )
    logits_fmt = head.act_in_fmt if split else head.out_fmt
    return {
        "index": index,
        "name": head.name,
        "fn": fn,
        "port": f"m{index}_axis",
        "classifies": classifies(head),
        "n_out": head.n_out,
        "class_bits": (head.n_out - 1).bit_length(),
        "out_beats": output_beats(head),
        "out_width": head.output_shape[-1],
        "output_type": beat_type(head.output_shape, format_type_name(head.out_fmt)),
        "output_note": f", after {head.activation}" if not acts.parse(head.activation).is_linear else "",
        "logits_type": beat_type(head.output_shape, format_type_name(logits_fmt)),
        "output_activation": output_activation,
        "output_stream": output_stream,
        "output_activation_doc": (
            f"{head.activation}, applied after the class is taken from the values before it"
            if split
            else "none: the output is the logits"
        ),
        "out_fmt": head.out_fmt.container,
        "out_label": _container_label(head.out_fmt),
        "output_shape_text": shape_text(head.output_shape),
    }


class InputContext(TypedDict):
    """One input of a network of several inputs as the templates show it (Top's slave port)."""

    index: int
    name: str  # the input's Keras name (its InputLayer)
    port: str  # the port prefix: s<index>_axis
    stream: str  # its stream in Network.hs: input<index>
    input_type: str
    input_doc: str
    beats: int
    beat_width: int
    in_fmt: FixedFormat
    in_label: str
    shape_text: str


def _input_contexts(plans: Sequence[LayerPlan], type_names: dict[FixedFormat, str]) -> list[InputContext]:
    """Every input of a network of several inputs, in the model's order (none for one input:
    its port keeps the `s_axis` names)."""
    if not several_inputs(plans):
        return []
    contexts: list[InputContext] = []
    ports = network_inputs(plans)
    for k, (port, stream) in enumerate(zip(ports, input_streams([port.name for port in ports]))):
        beats = math.prod(port.shape[:-1])
        contexts.append(
            {
                "index": k,
                "name": port.name,
                "port": f"s{k}_axis",
                "stream": stream,
                "input_type": beat_type(port.shape, type_names[port.fmt]),
                "input_doc": _input_doc(port.shape),
                "beats": beats,
                "beat_width": port.shape[-1],
                "in_fmt": port.fmt.container,
                "in_label": _container_label(port.fmt),
                "shape_text": shape_text(port.shape),
            }
        )
    return contexts


def _input_doc(shape: Sequence[int]) -> str:
    beats = math.prod(shape[:-1])
    return (
        f"one pixel's {shape[-1]} channel(s); an image is {beats} beats in raster order"
        if beats > 1
        else f"the whole {shape[-1]}-value input vector"
    )


BUS_BEAT_BITS = 32
"""Data bits of a beat of the weight port (K2C.WeightBus)."""
BUS_ADDRESS_BITS = 23
"""Address bits of a weight message's header a memory may need (K2C.WeightBus): the deepest
memory it can write or read. The write-only port decodes 24, so a read header (bit 23 set)
there writes past every memory's end, and nothing."""
BUS_LAYERS = 256
"""Layers a header's 8-bit index can name (K2C.WeightBus)."""


def word_beats(plan: LayerPlan) -> int:
    """32-bit beats of the weight port one word of the layer's memory takes (K2C.WeightBus)."""
    return -(-word_bits(plan) // BUS_BEAT_BITS)


def check_writable(name: str, plans: Sequence[LayerPlan]) -> None:
    """Refuse, with one error, a design whose weights `--writable-weights` cannot put on the
    weight port: a layer whose kind holds them as constants (`Kind.check_writable`), a design
    of several input or output ports (its Top has no weight port), none or too many memories."""
    for plan in plans:
        if plan.kind is not None:
            plan.kind.check_writable(plan)
    if several_outputs(plans) or several_inputs(plans):
        raise K2CError(
            f"design '{name}' has several input or output ports; --writable-weights builds the weight port "
            "into a top entity of one input and one output port"
        )
    memories = [p for p in plans if p.is_compute]
    if not memories:
        raise K2CError(f"design '{name}' has no weight memory (no dense or convolution layer on the engine) to write")
    if len(memories) > BUS_LAYERS:
        raise K2CError(
            f"design '{name}' has {len(memories)} weight memories; a weight message names at most {BUS_LAYERS}"
        )
    for plan in memories:
        if plan.rom_depth >= 2**BUS_ADDRESS_BITS:
            raise K2CError(
                f"layer '{plan.name}': its memory of {plan.rom_depth} words is deeper than a weight message's "
                f"{BUS_ADDRESS_BITS}-bit address reaches"
            )


def build_context(
    name: str,
    plans: Sequence[LayerPlan],
    params: dict[str, QuantizedLayer] | None = None,
    *,
    writable: bool = False,
    readable: bool = False,
) -> TemplateContext:
    """Everything the templates need, computed here so the templates stay declarative.
    `params` supplies the constants generated into Weights.hs (BatchNormalization); `writable`
    puts the weight memories on the weight port (`check_writable`), `readable` makes that port
    read them back (K2C.WeightReadBack)."""
    if readable and not writable:
        raise K2CError(
            f"design '{name}': --readable-weights reads back the weight port's memories: add --writable-weights"
        )
    if writable:
        check_writable(name, plans)
    fns = haskell_names([p.name for p in plans])
    extras = [v for p, fn in zip(plans, fns) if p.kind is not None for _, v in p.kind.extra_activations(p, fn)]
    formats = sorted(
        {p.in_fmt for p in plans}
        | {port.fmt for port in network_inputs(plans)}
        | {p.out_fmt for p in plans}
        | {p.w_fmt for p in plans if p.w_fmt is not None}
        | {p.b_fmt for p in plans if p.b_fmt is not None}
        | {v.in_fmt for v in extras}
        | {v.out_fmt for v in extras}
    )
    containers: dict[FixedFormat, list[str]] = {}
    for f in formats:
        containers.setdefault(f.container, []).append(str(f))
    format_types: list[FormatType] = [
        {
            "name": format_type_name(c),
            "clash": c.clash_type,
            "bits": c.bits,
            "label": ", ".join(labels) + ("" if labels == [str(c)] else f" held in {c}"),
        }
        for c, labels in sorted(containers.items())
    ]
    type_names = {f: format_type_name(f) for f in formats}
    heads = output_plans(plans)
    split_names = {p.name for p in heads if splits_output(p)}
    codes = _activation_codes(plans, fns, type_names)
    layers = [_layer_entry(plan, fn, codes[plan.name], plan.name in split_names) for plan, fn in zip(plans, fns)]
    compute = [entry for entry in layers if entry["compute"]]
    plan_of = {plan.name: plan for plan in plans}
    taken = set(fns) & {f"{entry['fn']}_rom" for entry in compute} if writable else set()
    if taken:  # Weights.hs names each writable memory's file <layer>_rom
        raise K2CError(
            f"layer '{sorted(taken)[0]}': with --writable-weights the name is another layer's file; rename it"
        )
    for index, entry in enumerate(compute):  # the weight port's table, in network order
        plan = plan_of[cast(str, entry["name"])]
        entry.update(bus_index=index, word_bits=word_bits(plan), word_beats=word_beats(plan))
        entry["rom_fn"] = f"{entry['fn']}_rom" if writable else entry["fn"]
        if writable:
            cast(list[str], entry["notes"]).append(
                f"Weights: W.{entry['fn']}, writable: layer {index} on the weight bus (K2C.WeightBus)."
            )
    layer_weights: list[tuple[tuple[str, ...], str]] = []
    for plan, fn in zip(plans, fns):
        if plan.kind is None:
            continue
        if plan.kind.has_params and params is None:
            raise ValueError(f"layer {plan.name!r}: its constants need the quantized parameters")
        own = plan.kind.weights(plan, fn, params[plan.name] if plan.kind.has_params and params is not None else None)
        if own is not None:
            layer_weights.append(own)
    network_args: list[NetworkArg] = []
    for entry in compute:  # an engine's fields (`EngineKind.engine_fields`): its knobs are ints
        p_var, b_var = f"p_{entry['fn']}", f"b_{entry['fn']}"
        network_args.append(
            {"var": p_var, "value": cast(int, entry["pe"]), "doc": f"processing elements of {entry['name']}"}
        )
        network_args.append(
            {"var": b_var, "value": cast(int, entry["cycles"]), "doc": f"cycles per window of {entry['name']}"}
        )
        network_args.append(
            {
                "var": f"l_{entry['fn']}",
                "value": cast(int, entry["levels"]),
                "doc": f"adder levels per pipeline stage of {entry['name']} (0: not pipelined)",
            }
        )
    by_name = {plan.name: (plan, entry) for plan, entry in zip(plans, layers)}
    ports_in = _input_contexts(plans, type_names)
    source = plans[0].inputs[0] if plans[0].inputs else "input"
    sources = tuple(port.name for port in network_inputs(plans)) if ports_in else source
    built = [p for p in plans if not (p.name in split_names and p.activation_only and len(plans) > 1)]
    shape = network_shape(built, sources, tuple(network_outputs(plans)))
    fn_of = {plan.name: fn for plan, fn in zip(plans, fns)}
    several = several_outputs(plans) or bool(ports_in)  # the Top of ports (one master port per output)
    port_readies = [f"{fn_of[head.name]}_port_ready" for head in heads] if several else ["ready"]
    fifo_args: list[NetworkArg] = []
    wiring = _wiring(shape, by_name, fifo_args, port_readies) if isinstance(shape, Dag) else None
    runs: list[tuple[str, ...]] = []
    built_plans = {p.name: p for p in network_plans(plans)}
    composition = _render_chain(shape, by_name, fifo_args, "  ", built_plans, runs) if isinstance(shape, Chain) else ""
    _pipe_runs(runs, by_name)
    piped = bool(runs)
    network_args.extend(fifo_args)
    if fifo_args or wiring:
        cast(list[str], layers[0]["uses"]).extend(["wiring" if wiring else "branches", *_branch_uses(built)])
    bodies = [line for entry in layers for line in cast(list[str], entry.get("body", []))]
    pipes = [f for f in ("mapP", "mapP2", "mapTable") if any(f"{f} " in line for line in bodies)]
    checks = timing_checks(plans)
    timing: list[TimingCheck] = [
        {"name": f"{fn_of.get(owner, owner)}_{depth.label}", "type": depth.type, "value": depth.value}
        for owner, depth in checks
    ]
    timing_uses = {"type_equality"} | {depth.uses for _, depth in checks}
    used = sorted(
        {IMPORTS[u] for entry in layers for u in cast(list[str], entry["uses"])}
        | {IMPORTS[u] for u in timing_uses}
        | ({f"import K2C.Pipe ({', '.join(pipes)})"} if pipes else set())
        | ({"import K2C.Pipe (Pipeline, pipeline, (>->))"} if piped else set())
    )
    own_imports = sorted({line for entry in layers for line in cast(list[str], entry.get("imports", []))})
    imports = ["import K2C.Activation (Finish (..), linear, relu, requantize)"] + used + own_imports
    head_contexts = [
        _head_context(k, head, fn_of[head.name], codes[head.name], type_names) for k, head in enumerate(heads)
    ]
    if len(head_contexts) == 1:  # one output beside several inputs keeps its m_axis port
        head_contexts[0]["port"] = "m_axis"
    last_head = head_contexts[-1]
    first, last = plans[0], plans[-1]
    beats = math.prod(first.input_shape[:-1])
    input_doc = _input_doc(first.input_shape)
    slices = top_slices(plans)
    return {
        "name": name,
        "package": cabal_package_name(name),
        "version": __version__,
        "clash_flags": " ".join(CLASH_FLAGS),
        "format_types": format_types,
        "layers": layers,
        "timing": timing,
        "compute_layers": compute,
        "layer_weights": [text for _, text in layer_weights],
        "layer_modules": sorted(layer_modules(plans, params)),
        "weights_exports": (["BusLayers", "WordBeats", "HiddenWeightBus", "busTable"] if writable else [])
        + (["readBack"] if readable else [])
        + [cast(str, e["fn"]) for e in compute]
        + ([cast(str, e["rom_fn"]) for e in compute] if writable else [])
        + [name for names, _ in layer_weights for name in names]
        + [c.table_name for c in codes.values() if c is not None and c.table_name],
        "imports": imports,
        "network_args": network_args,
        "composition": composition,
        "piped": piped,
        "wiring": wiring,
        "has_branches": bool(fifo_args),
        "input_type": beat_type(first.input_shape, format_type_name(first.in_fmt)),
        "input_doc": input_doc,
        "beats_per_image": beats,
        "beat_width": first.input_shape[-1],
        "n_in": first.n_in,
        "n_out": last.n_out,
        "classifies": classifies(last),
        "out_beats": output_beats(last),
        "out_width": last.output_shape[-1],
        "output_type": last_head["output_type"],
        "output_note": last_head["output_note"],
        "logits_type": last_head["logits_type"],
        "output_activation": last_head["output_activation"],
        "output_stream": last_head["output_stream"],
        "output_activation_doc": last_head["output_activation_doc"],
        "heads": head_contexts if several else [],
        "input_slice": slices[0],
        "output_slice": slices[1],
        "inputs": ports_in,
        "activations": [c for c in codes.values() if c is not None],
        "tables": [c for c in codes.values() if c is not None and c.table_name],
        "kind_tables": bool(kind_memory_files(plans)),
        "uses_maps": bool(fifo_args)
        or any(c is not None and (c.vector or p.activation_only) for p, c in ((p, codes[p.name]) for p in plans)),
        "in_fmt": first.in_fmt.container,  # the hardware types (FixedFormat.container)
        "out_fmt": last.out_fmt.container,
        "in_label": _container_label(first.in_fmt),
        "out_label": _container_label(last.out_fmt),
        "pe_literals": " ".join(f"(SNat @{arg['value']})" for arg in network_args),
        "input_shape_text": shape_text(first.input_shape),
        "output_shape_text": shape_text(last.output_shape),
        "writable": writable,
        "readable": readable,
        "bus_beats": max((cast(int, e["word_beats"]) for e in compute), default=1),
    }


def kind_memory_files(plans: Sequence[LayerPlan]) -> list[tuple[str, tuple[str, ...]]]:
    """The memory files the layers' kinds read (`Kind.memory_files`): (name under weights/, lines)."""
    return [
        file
        for plan, fn in zip(plans, haskell_names([p.name for p in plans]))
        if plan.kind is not None
        for file in plan.kind.memory_files(plan, fn)
    ]


def layer_modules(plans: Sequence[LayerPlan], params: dict[str, QuantizedLayer] | None) -> dict[str, str]:
    """The modules the layers' kinds generate for them (`Kind.modules`): name -> text."""
    modules: dict[str, str] = {}
    for plan in plans:
        if plan.kind is None:
            continue
        own = plan.kind.modules(plan, params.get(plan.name) if params is not None else None)
        clash = set(own) & set(modules)
        if clash:
            raise K2CError(f"layer '{plan.name}': its module {sorted(clash)[0]} is another layer's too: rename one")
        modules.update(own)
    return modules


CABAL_CONFIG = ".cabal/config"
"""A repository-free cabal config: `CABAL_DIR=$PWD/.cabal cabal run ...` builds offline, even
after a cabal run that would otherwise have written its default (Hackage) config there."""

TEMPLATES = {
    "Network.hs": "Network.hs.j2",
    "Weights.hs": "Weights.hs.j2",
    "Top.hs": "Top.hs.j2",
    "Sim.hs": "Sim.hs.j2",
    "cabal.project": "cabal.project.j2",
    "README.md": "README.md.j2",
    "bin/Clash.hs": "Clash.hs.j2",
    CABAL_CONFIG: "cabal_config.j2",
}


def check_buildable(plans: Sequence[LayerPlan]) -> None:
    """Refuse, with one error naming the layer and the format, what Clash cannot build:
    formats narrower than MIN_HARDWARE_BITS (a 1-bit `SFixed 1 0`)."""
    for plan in plans:
        fields: list[tuple[str, FixedFormat | None]] = [("input", f) for f in plan.input_formats]
        fields += [
            ("weight", plan.w_fmt),
            ("bias", plan.b_fmt),
            ("output", plan.out_fmt),
            ("accumulator", plan.acc_fmt),
        ]
        for what, fmt in fields:
            if fmt is not None and fmt.hw_bits < MIN_HARDWARE_BITS:
                raise K2CError(
                    f"layer '{plan.name}': {what} format {fmt} is {fmt.hw_bits} bit wide; the hardware needs at "
                    f"least {MIN_HARDWARE_BITS} bits (Clash 1.6.4 emits an invalid zero-width bit slice for a "
                    "1-bit fixed-point value); use e.g. 1,0,1 or 1,1,0"
                )


FPGA_SCRIPT = "ecp5.ys"
"""The project's yosys script for ECP5 (fpga/), the synthesis `pnr` runs, for a user's own flow."""

FPGA_SCRIPT_DEVICE = "ecp5-85k"
"""The part the script's nextpnr line names (the synthesis is the same for every LFE5U size)."""


def fpga_script(top: str, plans: Sequence[LayerPlan]) -> str:
    """The text of fpga/ecp5.ys for top entity `top`: `Device.synth_script` as `pnr` runs it on
    `plans`, one command a line, the netlist written beside the script, and how to run it."""
    device = get_device(FPGA_SCRIPT_DEVICE)
    json_name = f"{top}_yosys.json"
    sums = has_constant_layers(plans)
    commands = device.synth_script(top, f"../../../fpga/{json_name}", block_roms=True, separate_sums=sums).split("; ")
    return _env.get_template("fpga.ys.j2").render(
        name=top,
        part=device.part,
        device=device.name,
        script=FPGA_SCRIPT,
        json=json_name,
        nextpnr_args=" ".join(device.nextpnr_args),
        package=device.package,
        placer=device.placers[0],
        commands=commands,
        separate_sums=sums,
    )


def write_project(
    root: Path,
    name: str,
    plans: Sequence[LayerPlan],
    params: dict[str, QuantizedLayer],
    *,
    writable: bool = False,
    readable: bool = False,
) -> None:
    """Render the Haskell modules, copy the blocks, write the weight memory files; `writable`:
    the weight memories on the weight port, `readable`: read back through it (`build_context`)."""
    check_buildable(plans)
    context = build_context(name, plans, params, writable=writable, readable=readable)
    modules = sorted(f"K2C.{source.stem}" for source in (CLASH_LIB / "K2C").glob("*.hs"))
    context["sim_blocks"] = [m for m in modules if m in SIMULATION_ONLY]
    context["blocks"] = [m for m in modules if m not in SIMULATION_ONLY]
    (root / "bin").mkdir()
    (root / ".cabal").mkdir()
    for target, template in TEMPLATES.items():
        (root / target).write_text(_env.get_template(template).render(**context))
    (root / f"{context['package']}.cabal").write_text(_env.get_template("project.cabal.j2").render(**context))
    blocks = root / "clash_lib" / "K2C"
    blocks.mkdir(parents=True)
    for source in sorted((CLASH_LIB / "K2C").glob("*.hs")):
        shutil.copy2(source, blocks / source.name)
    (root / "fpga").mkdir()
    (root / "fpga" / FPGA_SCRIPT).write_text(fpga_script(name, plans))
    for module, text in layer_modules(plans, params).items():
        path = root / (module.replace(".", "/") + ".hs")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    weights = root / "weights"
    weights.mkdir()
    for plan, entry in zip(plans, context["layers"]):
        if entry["compute"]:
            (weights / f"{entry['fn']}.mem").write_text(memfile_text(plan, params[plan.name]))
    for code in context["tables"]:
        for name, lines in code.table_files:
            (weights / name).write_text("\n".join(lines) + "\n")
    for name, lines in kind_memory_files(plans):
        (weights / name).write_text("\n".join(lines) + "\n")
