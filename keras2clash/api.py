"""The Python API: the same four steps as the CLI (`emit`, `hdl`, `simulate`, `run`).

Each function calls the stages in order and passes data forward; none of them holds
decisions of its own beyond argument normalisation, so the CLI and the API cannot drift.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from keras2clash.backend.emitter import hdl_name, write_project
from keras2clash.backend.project import SOURCE_MODEL, ManifestExtra, load_project, write_project_data
from keras2clash.backend.weightbus import WeightMessage, read_answers, read_back, read_message, read_messages
from keras2clash.backend.weightbus import weight_messages as bus_messages
from keras2clash.data import check_task, load_head_sets, load_test_set, read_npz
from keras2clash.design import DEFAULT_FORMAT, DesignKnobs, DesignOptions
from keras2clash.errors import K2CError
from keras2clash.frontend.keras_ref import keras_head_outputs, keras_outputs, rounded_classes
from keras2clash.fsutil import atomic_directory, check_output_file, check_writable_target, work_dir, write_output_file
from keras2clash.hw.inputs import named_inputs, several_inputs
from keras2clash.hw.output import classifies, output_plans, output_task, several_outputs
from keras2clash.hw.summary import design_summary, render_summary
from keras2clash.network import Network, load_model, load_network
from keras2clash.quant import golden
from keras2clash.quant.autoformat import overflow_to_json, parameter_overflow, warn_overflow
from keras2clash.quant.exact import QuantizedLayer
from keras2clash.quant.formats import FixedFormat, quantize
from keras2clash.quant.hls4ml import CONFIG_FILE as HLS4ML_FILE
from keras2clash.quant.hls4ml import hls4ml_yaml
from keras2clash.report.comparison import Comparison, RungErrors, accuracy, error_figures, render
from keras2clash.verify import rtlsim as rtl
from keras2clash.verify import synth as yosys
from keras2clash.verify import toolchain
from keras2clash.verify.lint import verilator_lint
from keras2clash.verify.simulate import SimResult, run_simulator, run_simulator_heads
from keras2clash.verify.testbench import Reload, heads_inputs, write_heads_testbench, write_testbench

if TYPE_CHECKING:
    from typing_extensions import Unpack

console = Console(stderr=True)


def emit(
    model: Any,
    design: DesignOptions | str | FixedFormat = DEFAULT_FORMAT,
    out: str | Path = "build/net",
    parallelism: str | Sequence[int] | None = None,
    *,
    name: str | None = None,
    force: bool = False,
    show: bool = True,
    **knobs: Unpack[DesignKnobs],
) -> Path:
    """Parse a Keras model (file or object) and write a Clash project to `out`.

    `design` holds the knobs: a `DesignOptions`, or just the fixed-point format
    (`"sign,int,frac"`, default 1,7,8) with the other knobs as keywords, as strings or Python
    values: `emit(model, "1,7,8", out, [1, 2, 5], cycles=[1, 9, 1], pipeline="auto@150")`
    (`parallelism`, the processing elements of each dense/conv2d layer, may come fourth).
    Keywords given with a record replace its fields. `DesignOptions` says what each knob does.
    Weights and biases that saturate are reported and in manifest.json; the project always
    gets `hls4ml_config.yml`, its formats and knobs in hls4ml's shape. `name`: the top
    entity's (default: the Keras model's name); `force` replaces a non-empty `out`.
    """
    design = _design(design, parallelism, knobs)
    with _emitting(model, design, Path(out), name=name, force=force, show=show):
        pass
    return Path(out)


def _design(
    design: DesignOptions | str | FixedFormat, parallelism: str | Sequence[int] | None, knobs: DesignKnobs
) -> DesignOptions:
    """`emit`'s and `run`'s keyword form as the one record (`parallelism` may come positionally)."""
    if parallelism is not None:
        knobs = {**knobs, "parallelism": parallelism}
    return DesignOptions.of(design, **knobs)


@contextmanager
def _emitting(
    model: Any,
    design: DesignOptions,
    out: Path,
    *,
    name: str | None,
    force: bool,
    show: bool,
    inputs: Callable[[DesignOptions], DesignOptions] | None = None,
    fits: Callable[[Network], None] | None = None,
) -> Iterator[Path]:
    """emit's steps, which `run` continues: the name and the output folder checked (then
    `inputs`: run's other inputs, which may complete the design) before the slow model load;
    the network planned (`fits`: whether run's test set fits it) and written into a fresh
    temporary folder, yielded; that folder becomes `out` when the block ends without an error,
    so an error or Ctrl-C leaves nothing."""
    if name is not None:
        hdl_name(name)  # a bad --name fails before any work
    check_writable_target(out, force)  # before the slow model load
    if inputs is not None:
        design = inputs(design)
    network = load_network(model, design, console=console)
    if fits is not None:
        fits(network)
    with atomic_directory(out, force=force) as tmp:
        _write_project(network, tmp, name, show, writable=design.writable_weights, readable=design.readable_weights)
        yield tmp


def _write_project(
    network: Any, root: Path, name: str | None, show: bool, *, writable: bool = False, readable: bool = False
) -> None:
    """Write a planned network's project into the (fresh, temporary) folder `root`; `writable`:
    its weight memories on the weight port (`DesignOptions.writable_weights`), `readable`: read
    back through it (`DesignOptions.readable_weights`)."""
    warn_overflow(network.overflow, console)
    precision = {"formats": network.formats.to_json(), "parameter_saturation": overflow_to_json(network.overflow)}
    net_name = hdl_name(name or network.name)
    summary = design_summary(network.plans)
    write_project(root, net_name, network.plans, network.params, writable=writable, readable=readable)
    extra: ManifestExtra = {"precision": precision, "design": summary}
    if writable:
        extra["writable_weights"] = True
    if readable:
        extra["readable_weights"] = True
    write_project_data(root, net_name, net_name, network.plans, network.params, extra=extra)
    network.keras_model.save(root / SOURCE_MODEL)
    (root / HLS4ML_FILE).write_text(hls4ml_yaml(network.plans, network.formats.default))
    if show:
        render_summary(summary, console)


def hdl(
    project_dir: str | Path,
    languages: Sequence[str] = ("verilog",),
    lint: bool = True,
    *,
    shown_as: str | Path | None = None,
) -> dict[str, Path]:
    """Generate HDL with Clash for each language; lint Verilog with Verilator if present.
    (`shown_as`: the folder named in the messages, when `project_dir` is a temporary one.)"""
    _check_languages(languages)
    _require_tools(languages, lint)
    project = load_project(project_dir)
    results: dict[str, Path] = {}
    for language in languages:
        with console.status(f"clash --{language} ({project.name})"):
            results[language] = toolchain.generate_hdl(project.root, language)
        shown = results[language] if shown_as is None else Path(shown_as) / "hdl" / language
        console.print(f"[green]✓[/green] {language}: {shown}")
    if lint and "verilog" in results:
        verilator_lint(project.root, project.top)
        console.print("[green]✓[/green] verilator --lint-only: clean")
    return results


def _check_languages(languages: Sequence[str]) -> None:
    unknown = [lang for lang in languages if lang not in toolchain.LANGUAGES]
    if unknown:
        raise K2CError(f"unknown HDL {unknown[0]!r}; choose from {', '.join(toolchain.LANGUAGES)}")


def _require_tools(languages: Sequence[str], lint: bool, simulate: bool = False) -> None:
    """Every tool the steps will need, checked before the first one runs."""
    if languages:
        toolchain.require_tool("clash")
    if lint and "verilog" in languages:
        toolchain.require_tool("verilator")
    if simulate:
        toolchain.require_tool("ghc")


def simulate(
    project_dir: str | Path,
    data: str | Path,
    limit: int | None = None,
    *,
    keras: bool = True,
    show: bool = True,
    gap_max: int = 0,
    seed: int = 1,
    task: str = "auto",
) -> Comparison | list[Comparison]:
    """Run the test set through golden model and Clash simulation; compare with Keras.
    A design of several outputs gives one comparison per output (`_simulate_heads`); a design
    of several inputs reads `x_<input name>` per input from `data`.

    `gap_max > 0` stresses the stream protocol: 0..gap_max idle cycles before each input
    and downstream ready held low for 0..gap_max cycles at a time (reproducible from
    `seed`); outputs must stay bit-exact, only the cycle figures change.
    `task`: "classifier" (accuracies), "regression" (output errors against Keras and the
    targets; an autoencoder's test set may have no `y`), or "auto" (`data.detect_task`).
    """
    if gap_max < 0:
        raise K2CError(f"gap_max must be >= 0, got {gap_max}")
    _check_limit(limit)
    project = load_project(project_dir)
    work_dir(project.root / toolchain.BUILD_DIR)  # the simulator is built there: writable?
    if several_outputs(project.plans) or several_inputs(project.plans):
        comps = _simulate_heads(project, data, limit, keras=keras, show=show, gap_max=gap_max, seed=seed, task=task)
        return comps if several_outputs(project.plans) else comps[0]
    task = output_task(project.plans[-1], task)
    dataset = load_test_set(data, project.input_shape, project.n_out, project.plans[-1].activation, task).head(limit)
    toolchain.require_tool("ghc")
    x_raw = golden.quantize_inputs(project.plans, dataset.x)
    gold, gold_classes = golden.predict(project.plans, project.params, x_raw)

    with console.status("ghc -O2: building the Clash simulation"):
        exe = toolchain.build_simulator(project.root)
    extra = ["--gap-max", str(gap_max), "--seed", str(seed)] if gap_max else []
    sim = _run_with_progress(exe, project, x_raw, extra)

    outputs = None
    if keras and project.source_model.exists():
        with console.status("Keras float inference"):
            outputs = keras_outputs(project.source_model, dataset.x)
    exact = int(np.sum(np.all(sim.outputs == gold, axis=1)))
    if dataset.task == "regression":
        comp = _regression_comparison(project, dataset, outputs, gold, sim, exact)
    else:
        comp = _classifier_comparison(project, dataset, outputs, gold_classes, sim, exact)
    if show:
        render(comp, Console())
    return comp


WeightsSource = Any
"""New weights for a design: a Keras model (file or object) of the model's architecture, an
.npz of raw constants as the project's golden.npz holds them (`<layer>/kernel`,
`<layer>/bias`), or a mapping of layer names to `QuantizedLayer`."""


def new_weights(project_dir: str | Path, weights: WeightsSource) -> dict[str, QuantizedLayer]:
    """The golden model's quantized constants of `weights` for the emitted design: a Keras
    model's through the graph passes and each kind's `quantize` at the design's formats, as
    `emit` quantized the design's own (`quant.golden.quantize_params`); weights that saturate
    in their format are reported as `emit` reports them."""
    project = load_project(project_dir)
    wanted = [plan for plan in project.plans if plan.has_params]
    if isinstance(weights, Mapping):
        return {name: weights[name] for name in weights}
    if isinstance(weights, str | Path) and Path(weights).suffix == ".npz":
        with np.load(weights) as archive:
            missing = [p.name for p in wanted if f"{p.name}/kernel" not in archive or f"{p.name}/bias" not in archive]
            if missing:
                raise K2CError(f"{weights} has no '{missing[0]}/kernel' and '{missing[0]}/bias'")
            return {p.name: QuantizedLayer(archive[f"{p.name}/kernel"], archive[f"{p.name}/bias"]) for p in wanted}
    _, graph = load_model(weights)
    records = graph.by_name()
    missing = [p.name for p in wanted if p.name not in records]
    if missing:
        raise K2CError(f"the new model has no layer '{missing[0]}' of design '{project.name}'")
    try:
        params = golden.quantize_params(project.plans, graph)
    except ValueError as exc:
        raise K2CError(f"the new model's weights do not fit design '{project.name}': {exc}") from None
    warn_overflow(parameter_overflow(project.plans, graph), console)  # saturated, as emit reports them
    return params


def weight_messages(
    project_dir: str | Path, weights: WeightsSource, *, changed_only: bool = False
) -> list[WeightMessage]:
    """The weight port's messages (`backend.weightbus`) that load `weights` (`new_weights`) into
    a design emitted with `--writable-weights`: one per weight memory in bus order."""
    return bus_messages(load_project(project_dir), new_weights(project_dir, weights), changed_only=changed_only)


def weight_reads(
    project_dir: str | Path, layers: Sequence[str] | None = None, *, first: int = 0, count: int | None = None
) -> list[WeightMessage]:
    """The weight port's read messages (`backend.weightbus`) of a design emitted with
    `--writable-weights --readable-weights` (one clear error for another): each named memory (default: every one, in bus order) whole, or, for
    one layer, `count` words from address `first`."""
    project = load_project(project_dir)
    messages = read_messages(project, layers)
    if (first, count) == (0, None):
        return messages
    if len(messages) != 1:
        raise K2CError("a read of some words (--first, --count) names one layer (--layer)")
    plan = next(p for p in project.plans if p.name == messages[0].layer)
    return [read_message(plan, messages[0].index, first, count)]


def read_back_weights(
    project_dir: str | Path, answers: Sequence[Sequence[int]], layers: Sequence[str] | None = None
) -> dict[str, QuantizedLayer]:
    """The raw constants the weight port's answers read back (`answers`: the beats of each
    answer to `weight_reads(project_dir, layers)`, whole memories, in the same order), with the
    constants of the layers not read, and of those off the weight port, as the design has them:
    every layer's, as `new_weights` and the project's golden.npz hold them."""
    project = load_project(project_dir)
    names = [m.layer for m in read_messages(project, layers)]
    if len(answers) != len(names):
        raise K2CError(f"{len(answers)} answer(s) for the {len(names)} memories read ({', '.join(names)})")
    return {**project.params, **read_back(project, dict(zip(names, answers, strict=True)))}


def save_weights(path: str | Path, params: Mapping[str, QuantizedLayer], *, force: bool = False) -> None:
    """Raw constants as an .npz the way golden.npz holds them (`<layer>/kernel`, `<layer>/bias`):
    what `new_weights` (and `keras2clash weight-messages`) reads. Written whole at `path` as
    given (no `.npz` added); an existing file is refused unless `force`."""
    check_output_file(path, force)
    arrays = {f"{name}/{part}": getattr(layer, part) for name, layer in params.items() for part in ("kernel", "bias")}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_output_file(path, buffer.getvalue(), force)


def weight_reload(project_dir: str | Path, weights: WeightsSource, at: int) -> Reload:
    """A reload of every weight memory with `weights` before image `at`, for `rtlsim` and
    `simulate_reload`: the images from `at` on are checked against the golden model of the new
    weights. A design that reads its weights back (`--readable-weights`) has the writes between
    two read-backs of every memory: the first read must answer the design's words (its .mem
    files), the second the new ones."""
    project = load_project(project_dir)
    params = new_weights(project_dir, weights)
    if not project.readable_weights:
        return Reload(at, tuple(bus_messages(project, params)), params)
    reads = read_messages(project)
    messages = (*reads, *bus_messages(project, params), *reads)
    answers = (*read_answers(project, project.params), *read_answers(project, params))
    return Reload(at, messages, params, answers)


@dataclass(frozen=True)
class ReloadCheck:
    """A run with a weight reload: the Clash simulation's outputs and the golden model's, of the
    design's weights before sample `at` and of the new weights from it on."""

    at: int
    sim: SimResult
    expected: np.ndarray  # (N, n_out) raw
    classes: np.ndarray | None  # (N,) the golden model's classes (a classifier's)
    answers: tuple[tuple[int, ...], ...] = ()  # the read-backs' answers due, in order (none: a write-only design)

    @property
    def read_back_exact(self) -> bool:
        """Every read-back answered the words due, bit for bit."""
        return self.sim.answers == self.answers

    @property
    def exact(self) -> bool:
        same = bool(np.array_equal(self.sim.outputs, self.expected)) and self.read_back_exact
        if self.classes is None:
            return same
        return same and self.sim.classes is not None and bool(np.array_equal(self.sim.classes, self.classes))


def simulate_reload(
    project_dir: str | Path,
    data: str | Path,
    weights: WeightsSource,
    at: int,
    limit: int | None = None,
    *,
    gap_max: int = 0,
    seed: int = 1,
) -> ReloadCheck:
    """The test set through the Clash simulation with a weight reload before sample `at`: the
    samples before it with the design's weights, then every weight memory written with
    `weights` (`weight_messages`) after their outputs, read back before and after the writes
    when the design reads its weights back (`weight_reload`), then the rest; against the golden
    model of the respective weights and the words each read-back must answer
    (`ReloadCheck.exact`)."""
    _check_limit(limit)
    project = load_project(project_dir)
    reload = weight_reload(project.root, weights, at)
    new = dict(reload.params)
    last = project.plans[-1]
    dataset = load_test_set(data, project.input_shape, project.n_out, last.activation, output_task(last, "auto"))
    dataset = dataset.head(limit)
    if not 0 <= at < len(dataset):
        raise K2CError(f"reload before sample {at}: the test set has {len(dataset)} samples")
    x_raw = np.asarray(golden.quantize_inputs(project.plans, dataset.x))
    before, before_classes = golden.predict(project.plans, project.params, x_raw[:at])
    after, after_classes = golden.predict(project.plans, new, x_raw[at:])
    exe = toolchain.build_simulator(project.root)
    extra = ["--gap-max", str(gap_max), "--seed", str(seed)] if gap_max else []
    sim = run_simulator(
        exe,
        project.root,
        x_raw,
        project.n_out,
        extra,
        classifies=project.classifies,
        messages={at: reload.messages},
    )
    expected = np.concatenate([np.asarray(before).reshape(at, -1), np.asarray(after).reshape(len(x_raw) - at, -1)])
    classes = np.concatenate([before_classes, after_classes]) if project.classifies else None
    return ReloadCheck(at, sim, expected, classes, reload.answers)


def _simulate_heads(
    project: Any, data: str | Path, limit: int | None, *, keras: bool, show: bool, gap_max: int, seed: int, task: str
) -> list[Comparison]:
    """`simulate` for a design of several outputs or inputs: one comparison per output port,
    in the model's order, each titled `<model>:<output layer>` for several outputs
    (`data.load_head_sets`: the test set's `x_<input>` per input of several, and
    `y_<output layer>` are that output's labels or targets)."""
    heads = output_plans(project.plans)
    tasks = [(h.name, h.n_out, h.activation, output_task(h, task)) for h in heads]
    sets = [s.head(limit) for s in load_head_sets(data, project.input_shape, tasks, named_inputs(project.plans))]
    toolchain.require_tool("ghc")
    x_raw = golden.quantize_inputs(project.plans, sets[0].model_inputs)
    want = golden.predict_outputs(project.plans, project.params, x_raw)
    with console.status("ghc -O2: building the Clash simulation"):
        exe = toolchain.build_simulator(project.root)
    extra = ["--gap-max", str(gap_max), "--seed", str(seed)] if gap_max else []
    with console.status("Clash simulation"):
        sims = run_simulator_heads(exe, project.root, x_raw, [(h.n_out, classifies(h)) for h in heads], extra)
    outputs: list[np.ndarray | None] = [None] * len(heads)
    if keras and project.source_model.exists():
        with console.status("Keras float inference"):
            outputs = list(keras_head_outputs(project.source_model, sets[0].model_inputs))
    comps = []
    for head, dataset, sim, (gold, gold_classes), out in zip(heads, sets, sims, want, outputs):
        exact = int(np.sum(np.all(sim.outputs == gold, axis=1)))
        named = replace(project, name=f"{project.name}:{head.name}") if len(heads) > 1 else project
        if dataset.task == "regression":
            comp = _regression_comparison(named, dataset, out, gold, sim, exact, head.out_fmt)
        else:
            assert gold_classes is not None
            comp = _classifier_comparison(named, dataset, out, gold_classes, sim, exact, head.out_fmt)
        if show:
            render(comp, Console())
        comps.append(comp)
    return comps


def _classifier_comparison(
    project: Any,
    dataset: Any,
    outputs: np.ndarray | None,
    gold_classes: np.ndarray,
    sim: SimResult,
    exact: int,
    out_fmt: FixedFormat | None = None,
) -> Comparison:
    """The ladder's accuracies against the labels (`out_fmt`: the output's, default the last
    layer's); the simulation's class is the Top's, or the argmax of the values it sends without
    one (`hw.output.classifies`), as the golden model takes it then."""
    sim_classes = sim.classes if sim.classes is not None else golden.predict_classes(sim.outputs)
    keras_float = keras_rounded = None
    if outputs is not None:
        keras_float = accuracy(np.argmax(outputs, axis=1), dataset.y)
        keras_rounded = accuracy(rounded_classes(outputs, out_fmt or project.plans[-1].out_fmt), dataset.y)
    return Comparison(
        **_ladder_fields(project, dataset, sim, exact),
        keras_float_accuracy=keras_float,
        keras_rounded_accuracy=keras_rounded,
        golden_accuracy=accuracy(gold_classes, dataset.y),
        sim_accuracy=accuracy(sim_classes, dataset.y),
        class_match=int(np.sum(sim_classes == gold_classes)),
    )


def _ladder_fields(project: Any, dataset: Any, sim: SimResult, exact: int) -> dict[str, Any]:
    """What every comparison states whatever the task: the design and the simulation."""
    return dict(
        model=project.name,
        format=project.formats_label,
        parallelism=[p.engine_knobs.pe for p in project.compute_plans],
        cycles=[p.engine_knobs.cycles for p in project.compute_plans],
        samples=len(dataset),
        bit_exact=exact,
        first_latency=sim.first_latency,
        interval=sim.interval,
        multipliers=sum(p.multipliers for p in project.plans),
        output_cycles_last=int(sim.output_cycle[-1]),
    )


def _regression_comparison(
    project: Any,
    dataset: Any,
    outputs: np.ndarray | None,
    gold: np.ndarray,
    sim: SimResult,
    exact: int,
    out_fmt: FixedFormat | None = None,
) -> Comparison:
    """The ladder's output values (reals) against Keras float and against the targets
    (`out_fmt`: the output's, default the last layer's)."""
    out_fmt = out_fmt or project.plans[-1].out_fmt

    def rung(values: np.ndarray | None, keras_too: bool = True) -> RungErrors | None:
        if values is None:
            return None
        return RungErrors(
            vs_keras=error_figures(values, outputs) if keras_too and outputs is not None else None,
            vs_targets=None if dataset.y is None else error_figures(values, dataset.y),
        )

    rounded = None
    if outputs is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            rounded = out_fmt.to_real(quantize(np.where(np.isnan(outputs), 0.0, outputs), out_fmt))
    return Comparison(
        **_ladder_fields(project, dataset, sim, exact),
        keras_float_accuracy=None,
        keras_rounded_accuracy=None,
        golden_accuracy=None,
        sim_accuracy=None,
        class_match=None,
        task="regression",
        keras_float_errors=rung(outputs, keras_too=False),
        keras_rounded_errors=rung(rounded),
        golden_errors=rung(out_fmt.to_real(gold)),
        sim_errors=rung(out_fmt.to_real(sim.outputs)),
    )


def _run_with_progress(exe: Path, project: Any, x_raw: np.ndarray, extra: list[str]) -> SimResult:
    columns = (TextColumn("Clash simulation"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("sim", total=len(x_raw))
        return run_simulator(
            exe,
            project.root,
            x_raw,
            project.n_out,
            extra,
            progress=lambda k: bar.update(task, completed=k),
            classifies=project.classifies,
        )


def run(
    model: Any,
    data: str | Path,
    design: DesignOptions | str | FixedFormat = DEFAULT_FORMAT,
    out: str | Path = "build/net",
    parallelism: str | Sequence[int] | None = None,
    *,
    languages: Sequence[str] = ("verilog", "vhdl", "systemverilog"),
    limit: int | None = None,
    name: str | None = None,
    force: bool = False,
    task: str = "auto",
    **knobs: Unpack[DesignKnobs],
) -> Comparison | list[Comparison]:
    """emit -> hdl -> simulate, as the demo does: `emit`'s design and keywords, then the HDL
    in `languages` and the Clash simulation of the first `limit` samples of `data`
    (`format="auto"` calibrates on `data` unless `calibration` is given).

    Every input is checked before the first step: the output folder, the data file (also
    against the model), the HDL names and the tools. The project is built in a temporary
    folder that becomes `out` when all steps are done: an error or Ctrl-C leaves nothing."""
    out = Path(out)

    def inputs(design: DesignOptions) -> DesignOptions:
        read_npz(data, "data")  # exists and is an .npz: before the slow model load
        _check_languages(languages)
        _check_limit(limit)
        check_task(task)
        _require_tools(languages, lint=True, simulate=True)
        if design.format == "auto" and design.calibration is None:
            console.print(
                f"[yellow]--format auto: calibrating on the test set {data} "
                "(give --calibration for a separate calibration set)[/yellow]"
            )
            return replace(design, calibration=Path(data))
        return design

    def fits(network: Network) -> None:
        if several_outputs(network.plans) or several_inputs(network.plans):
            heads = [(h.name, h.n_out, h.activation, output_task(h, task)) for h in output_plans(network.plans)]
            load_head_sets(data, network.plans[0].input_shape, heads, named_inputs(network.plans))
            return
        last = network.plans[-1]
        load_test_set(data, network.plans[0].input_shape, last.n_out, last.activation, output_task(last, task))

    with _emitting(
        model, _design(design, parallelism, knobs), out, name=name, force=force, show=True, inputs=inputs, fits=fits
    ) as tmp:
        console.print(f"[green]✓[/green] emitted Clash project: {out}")
        hdl(tmp, languages, shown_as=out)
        return simulate(tmp, data, limit, task=task)


def _check_limit(limit: int | None) -> None:
    if limit is not None and limit < 1:
        raise K2CError(f"the number of samples must be at least 1, got {limit}")


# --- HDL testbenches, RTL simulation, synthesis smoke (verify: testbench.py, rtlsim.py, synth.py)


def testbench(
    project_dir: str | Path, data: str | Path, limit: int | None = None, *, gap_max: int = 0, seed: int = 1
) -> Path:
    """Write Verilog and VHDL testbenches with the quantized inputs and the golden model's
    expected outputs into DIR/tb/ (see keras2clash.testbench); return that folder."""
    project = load_project(project_dir)
    if several_outputs(project.plans) or several_inputs(project.plans):
        x = heads_inputs(project, data, limit)
        heads_tb = write_heads_testbench(project_dir, x, gap_max=gap_max, seed=seed)
        directory, samples = heads_tb.directory, heads_tb.spec.samples
    else:
        tb = write_testbench(project_dir, data, limit, gap_max=gap_max, seed=seed)
        directory, samples = tb.directory, tb.spec.samples
    console.print(f"[green]✓[/green] testbench for {samples} samples: {directory}")
    return directory


def rtlsim(
    project_dir: str | Path,
    data: str | Path,
    simulator: str = "verilator",
    limit: int | None = None,
    *,
    gap_max: int = 0,
    seed: int = 1,
    max_cycles: int | None = None,
    show: bool = True,
    all_rows: bool = False,
    reload: Reload | None = None,
):
    """Simulate the generated HDL in Icarus, Verilator or GHDL against the golden model;
    returns a keras2clash.rtlsim.RtlResult (`.ok` is True when every sample is bit-exact).
    `reload`: a weight reload between two images (`weight_reload`)."""
    columns = (TextColumn(f"{simulator}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("rtl", total=None)
        result = rtl.rtlsim(
            project_dir,
            data,
            simulator,
            limit,
            gap_max=gap_max,
            seed=seed,
            max_cycles=max_cycles,
            status=lambda text: bar.update(task, description=text),
            progress=lambda k, total: bar.update(task, completed=k, total=total),
            reload=reload,
        )
    if show:
        if isinstance(result, rtl.HeadsRtlResult):
            rtl.render_heads(result, Console())
        else:
            rtl.render(result, Console(), all_rows=all_rows)
    return result


def synth(project_dir: str | Path, show: bool = True):
    """Yosys `synth` on the generated Verilog; returns a keras2clash.synth.SynthResult."""
    with console.status("yosys synth"):
        result = yosys.synth(project_dir)
    if show:
        yosys.render(result, Console())
    return result
