"""HDL testbenches for the AXI4-Stream top entity: Verilog (Icarus, Verilator) and VHDL (GHDL).

`write_testbench` writes DIR/tb/:

- `input.hex`     one line per input beat: `{tlast, s_axis_tdata}` in hex (element 0 in the
                  lowest bits), beats row-major, `k` beats per image;
- `expected.hex`  one line per image: the golden model's `m_axis_tdata`
                  (`{class, score[m-1], ..., score[0]}`);
- `tb.v`, `tb.vhdl`  the testbench module/entity `k2c_tb` (backend/templates/tb_top.v.j2,
                  tb_top.vhdl.j2: the HDL text lives there, the numbers come from here);
- `tb.json`       what was written (sizes, widths, seed, cycle limit);
- `golden.npz`    raw inputs, expected raw outputs and classes, labels (a classifier's) or
                  targets (a regression model's, when the test set has them).

The testbenches drive `s_axis_*` and `m_axis_tready` exactly as the Clash simulation harness
(K2C.Sim) does: with `--gap-max K --seed S`, 0..K idle cycles before each input beat and
`m_axis_tready` low for 0..K cycles before each cycle it is high, drawn from the same
splitmix64 sequence, so RTL and Clash simulation see the same cycles. They check every
output beat against `expected.hex` (and m_axis_tlast, tlast_error, X on the handshake), run
a few cycles past the last output to catch duplicated beats, and print one line per output:

    OUT <sample> <accept_cycle> <output_cycle> <m_axis_tdata hex> <PASS|FAIL>
    DONE <passes> <fails> <cycles>          (or TIMEOUT / ERROR <what>)

They read their data files by a path relative to the HDL folder (`../../../tb/`): run the
simulator from DIR/hdl/<language>/Top.topEntity/, where Clash put the weight files too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import cast

import numpy as np

from keras2clash.backend.emitter import _env
from keras2clash.backend.project import Project, load_project
from keras2clash.backend.weightbus import WeightMessage
from keras2clash.data import load_head_sets, load_test_set
from keras2clash.errors import K2CError
from keras2clash.fsutil import atomic_directory
from keras2clash.hw.inputs import named_inputs, network_inputs, several_inputs
from keras2clash.hw.output import classifies, output_beats, output_plans, output_task, several_outputs
from keras2clash.quant import golden
from keras2clash.quant.exact import QuantizedLayer

TB_DIR = "tb"
TB_MODULE = "k2c_tb"
DATA_FROM_HDL = "../../../tb/"
"""The testbench's data files seen from DIR/hdl/<language>/Top.topEntity/ (where it runs)."""

GAMMA = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
OUT_SEED_XOR = 0x5BD1E995
"""splitmix64's constants (K2C.Sim's); the m_axis_tready stalls draw from seed ^ OUT_SEED_XOR."""
WEIGHT_SEED_XOR = 0x2F7A1C3D
"""The weight beats' idle cycles draw from seed ^ WEIGHT_SEED_XOR (K2C.Sim.weightSeedXor)."""
ANSWER_SEED_XOR = 0x61C88647
"""The m_axis_weights_tready stalls draw from seed ^ ANSWER_SEED_XOR (K2C.Sim.answerSeedXor)."""
DRAIN_CYCLES = 64
"""Cycles the testbench keeps running after the last expected output, watching for extras."""


@dataclass(frozen=True)
class TbSpec:
    """Everything a testbench needs to know about the design and the run."""

    top: str
    samples: int
    beats: int  # beats per image (k)
    beat_width: int  # values per beat (c)
    in_bits: int  # bits per input value
    n_out: int  # output values per image (a classifier's scores, m)
    out_bits: int  # bits per output value
    class_bits: int  # 0: the output has no class
    gap_max: int
    seed: int
    max_cycles: int
    out_beats: int = 1  # output beats per image (j): one for a classifier
    weight_port: bool = False  # the design has the weight port (--writable-weights, K2C.WeightBus)
    reload_at: int = -1  # the image the weights.hex messages are sent before (-1: none)
    weight_beats: int = 0  # beats in weights.hex
    read_port: bool = False  # the weight port reads back, on m_axis_weights_* (--readable-weights)
    answer_beats: int = 0  # beats in answers.hex: the read answers due on m_axis_weights_*

    @property
    def out_width(self) -> int:
        """Values per output beat."""
        return self.n_out // self.out_beats

    @property
    def tdata_in(self) -> int:
        return self.beat_width * self.in_bits

    @property
    def tdata_out(self) -> int:
        return self.class_bits + self.out_width * self.out_bits

    @property
    def in_word(self) -> int:
        """Width of one input.hex word ({tlast, tdata}), padded to whole hex digits."""
        return _hex_width(self.tdata_in + 1)

    @property
    def out_word(self) -> int:
        return _hex_width(self.tdata_out)


def _hex_width(bits: int) -> int:
    return 4 * math.ceil(bits / 4)


# --- packing (K2C.Axi) -----------------------------------------------------------------


def pack_values(values, bits: int) -> int:
    """Raw integers into one word, element 0 in the lowest bits (two's complement)."""
    mask = (1 << bits) - 1
    word = 0
    for j, v in enumerate(values):
        word |= (int(v) & mask) << (j * bits)
    return word


def pack_result(scores, cls: int, spec: TbSpec) -> int:
    return pack_values(scores, spec.out_bits) | (int(cls) << (spec.n_out * spec.out_bits))


def unpack_result(word: int, spec: TbSpec) -> tuple[np.ndarray, int]:
    """m_axis_tdata -> (raw values, class); the class is 0 for an output without one."""
    mask = (1 << spec.out_bits) - 1
    half = 1 << (spec.out_bits - 1)
    scores = []
    for j in range(spec.out_width):
        v = (word >> (j * spec.out_bits)) & mask
        scores.append(v - (1 << spec.out_bits) if v >= half else v)
    return np.array(scores, dtype=np.int64), word >> (spec.out_width * spec.out_bits)


# --- estimates and limits ----------------------------------------------------------------


def cycles_per_image(project: Project) -> int:
    """A conservative estimate of one image's cycles with nothing overlapping: every compute
    layer walks its ROM once per window, plus a couple of cycles per layer."""
    total = 0
    for plan in project.plans:
        if plan.is_compute:
            depth = plan.rom_depth
            windows = plan.windows_per_image
            total += depth * windows + 2
        else:
            total += 1
    return total


def estimate_cycles(project: Project, samples: int, gap_max: int) -> int:
    """Cycles a run of `samples` images should take at most (before the stalls stretch it)."""
    beats = max(sum(math.prod(port.shape[:-1]) for port in network_inputs(project.plans)), project.output_beats)
    per_image = max(cycles_per_image(project), beats) * (1 + gap_max)
    return samples * per_image + cycles_per_image(project) + 10


def cycle_budget(project: Project, samples: int, gap_max: int) -> int:
    """The testbench's timeout: far above the estimate, so only a hang reaches it."""
    return 1000 + 4 * estimate_cycles(project, samples, gap_max)


# --- writing ------------------------------------------------------------------------------


def spec_for(project: Project, samples: int, gap_max: int, seed: int) -> TbSpec:
    first, last = project.plans[0], project.plans[-1]
    return TbSpec(
        top=project.top,
        samples=samples,
        beats=math.prod(project.input_shape[:-1]),
        beat_width=project.input_shape[-1],
        in_bits=first.in_fmt.hw_bits,
        n_out=project.n_out,
        out_bits=last.out_fmt.hw_bits,
        class_bits=(project.n_out - 1).bit_length() if project.classifies else 0,
        gap_max=gap_max,
        seed=seed,
        max_cycles=cycle_budget(project, samples, gap_max),
        out_beats=project.output_beats,
        weight_port=project.writable_weights,
        read_port=project.readable_weights,
    )


@dataclass(frozen=True)
class Testbench:
    """A written testbench: where, what, and the golden data it checks against."""

    directory: Path
    spec: TbSpec
    x_raw: np.ndarray  # (N, *input_shape)
    expected: np.ndarray  # (N, n_out) raw
    classes: np.ndarray  # (N,)
    labels: np.ndarray | None  # (N,) class labels, or (N, n_out) regression targets, or None (data.Dataset.y)


@dataclass(frozen=True)
class Reload:
    """A weight reload in a testbench run: the weight port's messages (`backend.weightbus`)
    sent before image `at`, after the outputs of the images before it, the golden model's
    constants they load (`params`), which the images from `at` on are checked against, and
    the answers the reads among the messages must get, in order (each its 32-bit beats)."""

    at: int
    messages: tuple[WeightMessage, ...]
    params: Mapping[str, QuantizedLayer]
    answers: tuple[tuple[int, ...], ...] = ()


def prepare(project: Project, data: str | Path, limit: int | None, reload: Reload | None = None):
    """Load and check the test set against the project; the golden model's answers (with
    `reload`, those of its weights from its image on)."""
    last = project.plans[-1]
    dataset = load_test_set(data, project.input_shape, project.n_out, last.activation, output_task(last, "auto"))
    dataset = dataset.head(limit)
    x_raw = np.asarray(golden.quantize_inputs(project.plans, dataset.x), dtype=np.int64)
    at = len(x_raw) if reload is None else reload.at
    if not 0 <= at <= len(x_raw):
        raise K2CError(f"a reload before image {at}: the run has {len(x_raw)} images")
    expected, classes = golden.predict(project.plans, project.params, x_raw[:at])
    if reload is not None:
        after, after_classes = golden.predict(project.plans, reload.params, x_raw[at:])
        expected = np.concatenate([expected.reshape(at, -1), after.reshape(len(x_raw) - at, -1)])
        classes = np.concatenate([classes, after_classes])
    return dataset, x_raw, np.asarray(expected, dtype=np.int64), classes


def write_testbench(
    project_dir: str | Path,
    data: str | Path,
    limit: int | None = None,
    *,
    gap_max: int = 0,
    seed: int = 1,
    reload: Reload | None = None,
) -> Testbench:
    """Write DIR/tb/ (replacing an older one whole) for the first `limit` samples of `data`;
    `reload`: weight messages sent between two images (a design emitted with
    `--writable-weights`), written to weights.hex."""
    if gap_max < 0:
        raise K2CError(f"--gap-max must be >= 0, got {gap_max}")
    if limit is not None and limit < 1:
        raise K2CError(f"-n must be >= 1, got {limit}")
    project = load_project(project_dir)
    if several_outputs(project.plans):
        names = ", ".join(h.name for h in output_plans(project.plans))
        raise K2CError(
            f"design '{project.name}' has several output ports ({names}): its testbench is "
            "write_heads_testbench's (Verilog, every port)"
        )
    if reload is not None and not project.writable_weights:
        raise K2CError(f"design '{project.name}' has no weight port; emit it with --writable-weights to reload weights")
    if reload is not None and reload.answers and not project.readable_weights:
        raise K2CError(
            f"design '{project.name}' does not read its weights back; emit it with --readable-weights to check read answers"
        )
    dataset, x_raw, expected, classes = prepare(project, data, limit, reload)
    spec = spec_for(project, len(dataset), gap_max, seed)
    beats = [b for m in reload.messages for b in _with_tlast(m.beats)] if reload is not None else []
    answers = [b for a in reload.answers for b in _with_tlast(a)] if reload is not None else []
    if reload is not None:
        stalls = 2 * (gap_max + 1) * len(answers)  # each answer beat stalled, a load cycle a word
        spec = replace(
            spec,
            reload_at=reload.at,
            weight_beats=len(beats),
            answer_beats=len(answers),
            max_cycles=spec.max_cycles + 4 * len(beats) + stalls,
        )
    target = project.root / TB_DIR
    with atomic_directory(target, force=True) as tmp:
        _write_files(tmp, spec, x_raw, expected, classes, dataset.y, dataset.task)
        if beats:
            (tmp / "weights.hex").write_text("".join(f"{beat:09x}\n" for beat in beats))
        if answers:
            (tmp / "answers.hex").write_text("".join(f"{beat:09x}\n" for beat in answers))
    return Testbench(target, spec, x_raw, expected, classes, dataset.y)


def _with_tlast(beats: Sequence[int]) -> list[int]:
    """A message's beats as weights.hex words: `{tlast, tdata}`, tlast on the last."""
    return [beat | (int(k == len(beats) - 1) << 32) for k, beat in enumerate(beats)]


def _write_files(root: Path, spec: TbSpec, x_raw, expected, classes, labels, task: str) -> None:
    _write_inputs(root, spec, x_raw)
    (root / "expected.hex").write_text(_expected_text(spec, expected, classes))
    (root / "tb.v").write_text(verilog_tb(spec))
    (root / "tb.vhdl").write_text(vhdl_tb(spec))
    (root / "tb.json").write_text(json.dumps(asdict(spec), indent=2) + "\n")
    known = {} if labels is None else {"labels" if task == "classifier" else "targets": labels}
    np.savez(root / "golden.npz", x_raw=x_raw, expected=expected, classes=classes, **known)


@dataclass(frozen=True)
class HeadsTestbench:
    """A written testbench (Verilog and VHDL) of a design of several outputs or inputs: the
    first input's spec, one spec per input port and per output port, the golden outputs
    (values and classes) of each output port."""

    directory: Path
    spec: TbSpec
    ports: list[TbSpec]
    x_raw: np.ndarray | tuple[np.ndarray, ...]
    expected: list[np.ndarray]
    classes: list[np.ndarray | None]
    inputs: list[TbSpec] = field(default_factory=list)


IN_SEED_MUL = 0x2545F491
"""Input port j's idle cycles draw from seed ^ (IN_SEED_MUL * j) (K2C.Sim.inputSeed)."""


def write_heads_testbench(
    project_dir: str | Path, x: golden.Inputs, *, gap_max: int = 0, seed: int = 1
) -> HeadsTestbench:
    """Write DIR/tb/ for a design of several outputs or inputs and the inputs `x` (reals; one
    array per input of several): input.hex (input_<j>.hex per input port of several),
    expected_<k>.hex per output port (k in `hw.output.output_plans` order), tb.v and tb.vhdl
    (templates/tb_heads.v.j2, tb_heads.vhdl.j2), which drive every port and check every output beat."""
    if gap_max < 0:
        raise K2CError(f"--gap-max must be >= 0, got {gap_max}")
    project = load_project(project_dir)
    heads = output_plans(project.plans)
    quantized = golden.quantize_inputs(project.plans, x)
    raws = [np.asarray(a, dtype=np.int64) for a in (quantized if isinstance(quantized, tuple) else (quantized,))]
    x_raw = tuple(raws) if isinstance(quantized, tuple) else raws[0]
    want = golden.predict_outputs(project.plans, project.params, x_raw)
    spec = spec_for(project, len(raws[0]), gap_max, seed)
    several = several_inputs(project.plans)
    in_specs = [
        replace(spec, beats=math.prod(port.shape[:-1]), beat_width=port.shape[-1], in_bits=port.fmt.hw_bits)
        for port in network_inputs(project.plans)
    ]
    inputs = [
        {
            "index": j,
            "spec": in_spec,
            "port": f"s{j}_axis" if several else "s_axis",
            "file": f"input_{j}.hex" if several else "input.hex",
            "seed_xor": (IN_SEED_MUL * j) % 2**64,
        }
        for j, in_spec in enumerate(in_specs)
    ]
    ports = [
        replace(
            spec,
            n_out=head.n_out,
            out_bits=head.out_fmt.hw_bits,
            class_bits=(head.n_out - 1).bit_length() if classifies(head) else 0,
            out_beats=output_beats(head),
        )
        for head in heads
    ]
    out_names = [f"m{k}_axis" for k in range(len(ports))] if len(ports) > 1 else ["m_axis"]
    target = project.root / TB_DIR
    with atomic_directory(target, force=True) as tmp:
        for inp, raw in zip(inputs, raws):
            _write_inputs(tmp, cast(TbSpec, inp["spec"]), raw, cast(str, inp["file"]))
        for k, (port, (values, classes)) in enumerate(zip(ports, want)):
            (tmp / f"expected_{k}.hex").write_text(_expected_text(port, values, classes))
        context = {**tb_context(spec), "ports": ports, "inputs": inputs, "out_names": out_names}
        (tmp / "tb.v").write_text(_env.get_template("tb_heads.v.j2").render(context))
        (tmp / "tb.vhdl").write_text(_env.get_template("tb_heads.vhdl.j2").render(context))
    return HeadsTestbench(target, spec, ports, x_raw, [v for v, _ in want], [c for _, c in want], in_specs)


def heads_inputs(project: Project, data: str | Path, limit: int | None = None) -> np.ndarray | list[np.ndarray]:
    """The first `limit` inputs of a test set of a design of several outputs or inputs: `x`,
    or `x_<input name>` per input of several (its `y_<output layer>` are for the comparison,
    `data.load_head_sets`)."""
    heads = [(h.name, h.n_out, h.activation, output_task(h, "auto")) for h in output_plans(project.plans)]
    return load_head_sets(data, project.input_shape, heads, named_inputs(project.plans))[0].head(limit).model_inputs


def _write_inputs(root: Path, spec: TbSpec, x_raw: np.ndarray, name: str = "input.hex") -> None:
    """input.hex (or an input port's `name`): one `{tlast, s_axis_tdata}` word per input beat."""
    lines = []
    for image in x_raw.reshape(spec.samples, spec.beats, spec.beat_width):
        for b, beat in enumerate(image):
            word = pack_values(beat, spec.in_bits) | (int(b == spec.beats - 1) << spec.tdata_in)
            lines.append(f"{word:0{spec.in_word // 4}x}")
    (root / name).write_text("\n".join(lines) + "\n")


def _expected_text(spec: TbSpec, expected: np.ndarray, classes: np.ndarray | None) -> str:
    """The expected m_axis_tdata words: one per image (a classifier's), or one per output beat."""
    digits_out = spec.out_word // 4
    if spec.class_bits:
        assert classes is not None
        outs = [f"{pack_result(s, c, spec):0{digits_out}x}" for s, c in zip(expected, classes)]
    else:
        beats = expected.reshape(spec.samples * spec.out_beats, spec.out_width)
        outs = [f"{pack_values(beat, spec.out_bits):0{digits_out}x}" for beat in beats]
    return "\n".join(outs) + "\n"


def read_spec(project_root: Path) -> TbSpec:
    return TbSpec(**json.loads((Path(project_root) / TB_DIR / "tb.json").read_text()))


# --- the testbench texts (templates/tb_*.j2) ----------------------------------------------


def tb_context(spec: TbSpec) -> dict:
    """What the testbench templates are filled with: the run's numbers and the splitmix64
    constants, passed in from here so the HDL draws exactly the gaps K2C.Sim draws."""
    return {
        "spec": spec,
        "module": TB_MODULE,
        "data_dir": DATA_FROM_HDL,
        "drain": DRAIN_CYCLES,
        "gamma": GAMMA,
        "mix1": MIX1,
        "mix2": MIX2,
        "out_seed_xor": OUT_SEED_XOR,
        "weight_seed_xor": WEIGHT_SEED_XOR,
        "answer_seed_xor": ANSWER_SEED_XOR,
    }


def verilog_tb(spec: TbSpec) -> str:
    """Verilog-2005 testbench (Icarus; Verilator 5 with --binary --timing)."""
    return _env.get_template("tb_top.v.j2").render(tb_context(spec))


def vhdl_tb(spec: TbSpec) -> str:
    """VHDL-2008 testbench (GHDL --std=08), the same schedule and checks as the Verilog one."""
    return _env.get_template("tb_top.vhdl.j2").render(tb_context(spec))
