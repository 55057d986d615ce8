"""The `keras2clash` command line: emit, hdl, simulate, run, ... and pnr (place and route).

User mistakes (`K2CError`) and what the operating system reports (`OSError`: no space left,
permission denied, an I/O error) become one line on stderr and exit code 2, never a
traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from keras2clash import api, procs
from keras2clash.errors import K2CError, os_error_text
from keras2clash.hw.plan import DEFAULT_PIPELINE
from keras2clash.quant.autoformat import DEFAULT_WEIGHT_FORMAT
from keras2clash.report.comparison import to_markdown

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Compile a trained Keras network to Clash, Verilog and VHDL, and verify it bit-exact.",
)
err = Console(stderr=True)

FORMAT_HELP = ("Fixed-point format sign,int,frac (the thesis' notation): 1,7,8 = 16 bits = SFixed 8 8 = "
               "ap_fixed<16,8,AP_RND,AP_SAT>; 0,4,4 is unsigned, negative int/frac allowed, modes after it "
               "(1,7,8,trn,wrap), or an ap_fixed<W,I,Q,O> type.")
PAR_HELP = "Processing elements per dense/conv2d layer, e.g. 1,2,5 (each 1..filters; default 1 each)."
PIPE_HELP = ("Adder-tree levels per register stage in every dense/conv2d layer's dot product, one "
             "number or one per layer, e.g. 2 or 2,0,1 (0: the whole dot product in one cycle; "
             f"default {DEFAULT_PIPELINE} = auto), or auto / auto@MHZ: the fewest registers for that "
             "clock on ECP5 (auto = 100 MHz). Fewer levels: a faster clock, a few cycles more latency.")
CYC_HELP = "Cycles per window per dense/conv2d layer, e.g. 1,9,1 (each 1..window size; default 1 each)."
LF_HELP = ("Per-layer formats NAME:w=S,I,F:b=S,I,F:o=S,I,F:acc=BITS (or NAME:S,I,F), repeatable; "
           "w weights, b bias, o output, acc accumulator width.")
LFS_HELP = "Per-layer formats from a JSON (or YAML) file: {\"default\", \"input\", \"layers\": {NAME: {...}}}."
IN_HELP = "Format of the network's input (default: --format)."
BITS_HELP = "Total width of every value for --format auto."
CAL_HELP = "Calibration set .npz (array x) for --format auto: the layer outputs' ranges."
SOFTMAX_HELP = ("exact: compute a softmax at the output (exp table, exact division); argmax: leave it out, "
                "the outputs are the logits (same predicted class, no softmax hardware).")
TASK_HELP = ("auto | classifier (accuracy against labels y) | regression (output values against Keras and the "
             "targets y, if any: max |err| and MSE; an autoencoder's data may hold only x). auto: a softmax output, "
             "integer labels or one-hot rows mean a classifier; no y, one output or real-valued targets, regression.")
WEIGHT_FORMAT_HELP = ("fit (default): weights in the layer format's width, with the integer bits each layer's "
                      "largest weight needs and the rest in the fraction; same: in the layer's format, as the "
                      "2021 thesis (docs/guide/formats.md).")
HLS4ML_HELP = ("An hls4ml config (YAML/JSON: Model and LayerName sections, Precision with ap_fixed types, "
               "ReuseFactor -> --parallelism/--cycles); --layer-formats/--layer-format refine it. Every project "
               "gets hls4ml_config.yml, its own formats and knobs in that shape.")
BUDGET_HELP = ("Multiplier budget, a number or a device (ecp5-85k: 132 of its 156 MULT18X18D, what nextpnr "
               "routes; ice40-up5k: its 8): choose --parallelism "
               "and --cycles of every dense/conv2d layer for the smallest initiation interval within it "
               "(balanced allocation, exact model).")


LANES_HELP = ("Channels a BatchNormalization computes a cycle: 'auto' the fewest that keep the initiation "
              "interval (fewer multipliers, a few cycles more latency), 'full' a whole beat a cycle. "
              "Default: auto with --dsp-budget, full without.")


def _user_formats(layer_formats: Optional[Path], layer_format: Optional[list[str]], input_format: Optional[str]):
    """--layer-formats FILE, --layer-format ..., --input-format -> one FormatConfig (checked now);
    None when none is given (an HGQ2 model refuses formats given with it, even empty ones)."""
    from keras2clash.quant.layerformats import resolve_user_formats

    if layer_formats is None and not layer_format and input_format is None:
        return None
    return resolve_user_formats(layer_formats, layer_format, input_format)


def _languages(verilog: bool, vhdl: bool, systemverilog: bool, default: tuple[str, ...]) -> list[str]:
    chosen = [name for name, on in (("verilog", verilog), ("vhdl", vhdl), ("systemverilog", systemverilog)) if on]
    return chosen or list(default)


@app.command()
def emit(
    model: Path = typer.Argument(..., help="A .keras, legacy .h5, or JSON config (+ pickled weights)."),
    format: str = typer.Option("1,7,8", "--format", "-f", help=FORMAT_HELP),
    out: Path = typer.Option(Path("build/net"), "--out", "-o", help="Project directory to create."),
    parallelism: Optional[str] = typer.Option(None, "--parallelism", "-p", help=PAR_HELP),
    cycles: Optional[str] = typer.Option(None, "--cycles", "-c", help=CYC_HELP),
    weights: Optional[Path] = typer.Option(None, "--weights", help="Pickled weight list for a JSON config."),
    name: Optional[str] = typer.Option(None, "--name", help="Name of the top entity (default: the Keras model name)."),
    force: bool = typer.Option(False, "--force", help="Replace a non-empty output directory."),
    layer_format: Optional[list[str]] = typer.Option(None, "--layer-format", help=LF_HELP),
    layer_formats: Optional[Path] = typer.Option(None, "--layer-formats", help=LFS_HELP),
    input_format: Optional[str] = typer.Option(None, "--input-format", help=IN_HELP),
    bits: Optional[int] = typer.Option(None, "--bits", min=1, max=64, help=BITS_HELP),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help=CAL_HELP),
    dsp_budget: Optional[str] = typer.Option(None, "--dsp-budget", help=BUDGET_HELP),
    softmax: str = typer.Option("exact", "--softmax", help=SOFTMAX_HELP),
    pipeline: Optional[str] = typer.Option(None, "--pipeline", help=PIPE_HELP),
    hls4ml_config: Optional[Path] = typer.Option(None, "--hls4ml-config", help=HLS4ML_HELP),
    weight_format: str = typer.Option(DEFAULT_WEIGHT_FORMAT, "--weight-format", help=WEIGHT_FORMAT_HELP),
    lanes: Optional[str] = typer.Option(None, "--lanes", help=LANES_HELP),
) -> None:
    """Parse MODEL and write a Clash project (network, weights, memory files) to --out."""
    path = api.emit(model, format, out, parallelism, cycles=cycles, weights=weights, name=name, force=force,
                    layer_formats=_user_formats(layer_formats, layer_format, input_format), bits=bits,
                    calibration=calibration, dsp_budget=dsp_budget, softmax=softmax, pipeline=pipeline,
                    hls4ml_config=hls4ml_config, weight_format=weight_format, lanes=lanes)
    err.print(f"[green]✓[/green] emitted {path}")


@app.command()
def hdl(
    project: Path = typer.Argument(..., help="A directory written by 'keras2clash emit'."),
    verilog: bool = typer.Option(False, "--verilog", help="Generate Verilog."),
    vhdl: bool = typer.Option(False, "--vhdl", help="Generate VHDL."),
    systemverilog: bool = typer.Option(False, "--systemverilog", help="Generate SystemVerilog."),
    lint: bool = typer.Option(True, "--lint/--no-lint", help="verilator --lint-only the Verilog."),
) -> None:
    """Run Clash on PROJECT: HDL lands in PROJECT/hdl/<language>/ (default: Verilog)."""
    api.hdl(project, _languages(verilog, vhdl, systemverilog, ("verilog",)), lint=lint)


@app.command()
def simulate(
    project: Path = typer.Argument(..., help="A directory written by 'keras2clash emit'."),
    data: Path = typer.Option(..., "--data", "-d", help="Test set .npz with arrays x and y."),
    n: Optional[int] = typer.Option(None, "-n", min=1, help="Use only the first N samples."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the comparison as JSON."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Also write the comparison as markdown."),
    gap_max: int = typer.Option(0, "--gap-max", min=0, help="Random idle cycles (0..K) between inputs and random output stalls."),
    seed: int = typer.Option(1, "--seed", help="Seed for --gap-max."),
    force: bool = typer.Option(False, "--force", help="Replace existing --json/--markdown files."),
    task: str = typer.Option("auto", "--task", help=TASK_HELP),
) -> None:
    """Simulate PROJECT in Clash (GHC-compiled) and compare with the golden model and Keras."""
    _check_reports(force, json_out, markdown)
    comp = api.simulate(project, data, n, gap_max=gap_max, seed=seed, task=task)
    _write_reports(comp, json_out, markdown, force)
    if not comp.all_exact:
        raise K2CError(f"simulation differs from the golden model on {comp.samples - (comp.bit_exact or 0)} sample(s)", exit_code=1)


@app.command()
def run(
    model: Path = typer.Argument(..., help="A .keras, legacy .h5, or JSON config (+ pickled weights)."),
    data: Path = typer.Option(..., "--data", "-d", help="Test set .npz with arrays x and y."),
    format: str = typer.Option("1,7,8", "--format", "-f", help=FORMAT_HELP),
    out: Path = typer.Option(Path("build/net"), "--out", "-o", help="Project directory to create."),
    parallelism: Optional[str] = typer.Option(None, "--parallelism", "-p", help=PAR_HELP),
    cycles: Optional[str] = typer.Option(None, "--cycles", "-c", help=CYC_HELP),
    verilog: bool = typer.Option(False, "--verilog", help="Generate Verilog."),
    vhdl: bool = typer.Option(False, "--vhdl", help="Generate VHDL."),
    systemverilog: bool = typer.Option(False, "--systemverilog", help="Generate SystemVerilog."),
    n: Optional[int] = typer.Option(None, "-n", min=1, help="Use only the first N samples."),
    weights: Optional[Path] = typer.Option(None, "--weights", help="Pickled weight list for a JSON config."),
    force: bool = typer.Option(False, "--force", help="Replace a non-empty output directory."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the comparison as JSON."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Also write the comparison as markdown."),
    layer_format: Optional[list[str]] = typer.Option(None, "--layer-format", help=LF_HELP),
    layer_formats: Optional[Path] = typer.Option(None, "--layer-formats", help=LFS_HELP),
    input_format: Optional[str] = typer.Option(None, "--input-format", help=IN_HELP),
    bits: Optional[int] = typer.Option(None, "--bits", min=1, max=64, help=BITS_HELP),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help=CAL_HELP + " Default: --data."),
    dsp_budget: Optional[str] = typer.Option(None, "--dsp-budget", help=BUDGET_HELP),
    softmax: str = typer.Option("exact", "--softmax", help=SOFTMAX_HELP),
    pipeline: Optional[str] = typer.Option(None, "--pipeline", help=PIPE_HELP),
    task: str = typer.Option("auto", "--task", help=TASK_HELP),
    weight_format: str = typer.Option(DEFAULT_WEIGHT_FORMAT, "--weight-format", help=WEIGHT_FORMAT_HELP),
    lanes: Optional[str] = typer.Option(None, "--lanes", help=LANES_HELP),
) -> None:
    """emit -> hdl -> simulate in one go (default: all three HDLs)."""
    langs = _languages(verilog, vhdl, systemverilog, ("verilog", "vhdl", "systemverilog"))
    _check_reports(force, json_out, markdown)
    comp = api.run(model, data, format, out, parallelism, cycles=cycles, languages=langs, limit=n, weights=weights, force=force,
                   layer_formats=_user_formats(layer_formats, layer_format, input_format), bits=bits,
                   calibration=calibration, dsp_budget=dsp_budget, softmax=softmax, pipeline=pipeline, task=task,
                   weight_format=weight_format, lanes=lanes)
    _write_reports(comp, json_out, markdown, force)
    if not comp.all_exact:
        raise K2CError(f"simulation differs from the golden model on {comp.samples - (comp.bit_exact or 0)} sample(s)", exit_code=1)


@app.command()
def sweep(
    model: Path = typer.Argument(..., help="A .keras, legacy .h5, or JSON config (+ pickled weights)."),
    data: Path = typer.Option(..., "--data", "-d", help="Test set .npz with arrays x and y."),
    formats: Optional[list[str]] = typer.Option(
        None, "--formats", "--format", "-f",
        help="Formats: 1,7,8 | '1,5,6;1,7,8' | a range 1,2,3:1,16,17 (int and frac step by one together) "
             "| auto (with --bits); repeatable. Default: 1,2,3:1,16,17."),
    bits: Optional[str] = typer.Option(None, "--bits", help="Widths for --formats auto, e.g. 6,12,16."),
    auto: bool = typer.Option(False, "--auto", help="Also sweep auto per-layer formats at every width."),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help="Calibration .npz for auto formats (default: --data)."),
    confirm: Optional[list[str]] = typer.Option(None, "--confirm", help="Confirm this format in the Clash simulation (repeatable)."),
    confirm_bits: Optional[str] = typer.Option(None, "--confirm-bits", help="Confirm every swept format of these widths, e.g. 6,12,16."),
    out_dir: Optional[Path] = typer.Option(None, "--out-dir", "-o", help="Write sweep.md/.csv/.json/.png (and confirmed projects) here."),
    force: bool = typer.Option(False, "--force", help="Replace a non-empty --out-dir."),
    n: Optional[int] = typer.Option(None, "-n", min=1, help="Use only the first N samples."),
    weights: Optional[Path] = typer.Option(None, "--weights", help="Pickled weight list for a JSON config."),
) -> None:
    """Accuracy against bit width: Keras rounded, weights rounded, golden model (hardware), Clash simulation."""
    from keras2clash.report.sweep import DEFAULT_FORMATS
    from keras2clash.report.sweep import sweep as run_sweep

    result = run_sweep(model, data, formats or [DEFAULT_FORMATS], bits=bits, auto=auto, calibration=calibration,
                       confirm=confirm or (), confirm_bits=confirm_bits, out_dir=out_dir, force=force, limit=n,
                       weights=weights)
    if out_dir is not None:
        err.print(f"[green]✓[/green] wrote {out_dir}/sweep.md, .csv, .json, .png")
    bad = [r.label for r in result.rows if r.bit_exact is not None and r.bit_exact != r.sim_samples]
    if bad:
        raise K2CError(f"simulation differs from the golden model at {', '.join(bad)}", exit_code=1)


@app.command()
def profile(
    model: Path = typer.Argument(..., help="A .keras, legacy .h5, or JSON config (+ pickled weights)."),
    data: Path = typer.Option(..., "--data", "-d", help="Calibration .npz (array x)."),
    out_dir: Optional[Path] = typer.Option(None, "--out-dir", "-o", help="Write profile.md/.csv/.json/.png here."),
    n: Optional[int] = typer.Option(None, "-n", min=1, help="Use only the first N samples."),
    weights: Optional[Path] = typer.Option(None, "--weights", help="Pickled weight list for a JSON config."),
    force: bool = typer.Option(False, "--force", help="Replace a non-empty --out-dir."),
) -> None:
    """Value ranges and histograms of weights, biases and activations; the integer bits each needs."""
    from keras2clash.fsutil import atomic_directory, check_writable_target
    from keras2clash.quant import profile as prof
    from keras2clash.network import load_model
    from keras2clash.quant.layerformats import load_calibration

    if out_dir is not None:
        check_writable_target(out_dir, force)
    keras_model, graph = load_model(model, weights)
    x, _ = load_calibration(data, tuple(graph.input_shape))
    result = prof.profile(graph, x[:n] if n else x, keras_model.name)
    prof.render(result)
    if out_dir is not None:
        with atomic_directory(out_dir, force=force) as tmp:
            paths = prof.write_outputs(result, tmp)
        err.print(f"[green]✓[/green] wrote {', '.join(str(out_dir / p.name) for p in paths.values())}")


def _check_reports(force: bool, *paths: Optional[Path]) -> None:
    """Report files are checked before any work (fsutil: the output policy)."""
    from keras2clash.fsutil import check_output_file

    for path in paths:
        check_output_file(path, force)


def _write_reports(comp, json_out: Optional[Path], markdown: Optional[Path], force: bool = False) -> None:
    from keras2clash.fsutil import write_output_file

    if json_out is not None:
        write_output_file(json_out, comp.to_json() + "\n", force)
    if markdown is not None:
        write_output_file(markdown, to_markdown(comp), force)


def _budget(value: Optional[str]) -> Optional[int]:
    from keras2clash.fpga.devices import multiplier_budget

    return None if value is None else multiplier_budget(value)


def _error(message: str) -> None:
    err.print(f"[bold red]error:[/bold red] {escape(message)}", highlight=False, soft_wrap=True)


def _usage_error(exc: Exception) -> str:
    """A usage error (click's UsageError & co.) as one line: the problem and where to look."""
    text = " ".join(line.strip() for line in exc.format_message().splitlines() if line.strip()).rstrip(".")
    ctx = getattr(exc, "ctx", None)
    if ctx is not None and getattr(ctx, "command_path", None):
        text += f"; see '{ctx.command_path} --help'"
    return text


def _interrupted() -> int:
    code, what = procs.exit_code_for_interrupt()
    _error(f"{what}; stopped, with every tool it had started")
    return code


def main() -> None:
    """Console entry point: user errors and operating-system errors are one line and exit
    code 2, no traceback; Ctrl-C stops every tool it started and exits 130 (SIGTERM: 143;
    procs.py)."""
    with procs.interrupt_handling():
        code = _main()
    sys.exit(code)


def _main() -> int:
    try:
        result = app(standalone_mode=False)
    except KeyboardInterrupt:
        return _interrupted()
    except K2CError as exc:
        _error(str(exc))
        return exc.exit_code
    except OSError as exc:  # the environment, not a bug: the path and the errno's text
        _error(os_error_text(exc))
        return K2CError.exit_code
    except typer.Abort:
        return _interrupted()
    except typer.Exit as exc:
        return exc.exit_code
    except Exception as exc:
        # Usage errors from the click that typer vendors; the help screen that a bare
        # command shows stays a help screen.
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()
            return exc.exit_code
        if hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int):
            _error(_usage_error(exc))
            return exc.exit_code
        raise
    if result == procs.INTERRUPT_EXIT_CODE:  # typer turns a KeyboardInterrupt into Exit(130)
        return _interrupted()
    return result if isinstance(result, int) else 0


# --- Verification in the HDLs: testbenches, RTL simulation, synthesis smoke -----------------


@app.command()
def testbench(
    project: Path = typer.Argument(..., help="A directory written by 'keras2clash emit'."),
    data: Path = typer.Option(..., "--data", "-d", help="Test set .npz with arrays x and y."),
    n: Optional[int] = typer.Option(None, "-n", min=1, help="Use only the first N samples."),
    gap_max: int = typer.Option(0, "--gap-max", min=0, help="Random idle cycles (0..K) before input beats and random m_axis_tready stalls."),
    seed: int = typer.Option(1, "--seed", help="Seed for --gap-max."),
) -> None:
    """Write Verilog and VHDL testbenches (inputs, golden outputs, AXI drivers) to PROJECT/tb/."""
    api.testbench(project, data, n, gap_max=gap_max, seed=seed)


@app.command()
def rtlsim(
    project: Path = typer.Argument(..., help="A directory written by 'keras2clash emit'."),
    data: Path = typer.Option(..., "--data", "-d", help="Test set .npz with arrays x and y."),
    sim: str = typer.Option("verilator", "--sim", help="verilator (default: whole test set), icarus or ghdl (default: 5 samples)."),
    n: Optional[int] = typer.Option(None, "-n", min=1, help="Use only the first N samples."),
    gap_max: int = typer.Option(0, "--gap-max", min=0, help="Random idle cycles (0..K) before input beats and random m_axis_tready stalls."),
    seed: int = typer.Option(1, "--seed", help="Seed for --gap-max."),
    max_cycles: Optional[int] = typer.Option(None, "--max-cycles", min=1, help="Refuse runs estimated longer (default: icarus 200k, ghdl 500k)."),
    all_rows: bool = typer.Option(False, "--all", help="List every sample, not only failures (long runs)."),
) -> None:
    """Simulate PROJECT's HDL (generated if missing) in an RTL simulator against the golden model."""
    result = api.rtlsim(project, data, sim, n, gap_max=gap_max, seed=seed, max_cycles=max_cycles, all_rows=all_rows)
    if not result.ok:
        failed = len(result.samples) - result.passed
        raise K2CError(f"RTL simulation in {sim}: {failed} of {len(result.samples)} sample(s) differ from the golden model"
                       + (f"; {'; '.join(result.messages)}" if result.messages else ""), exit_code=1)


@app.command()
def synth(
    project: Path = typer.Argument(..., help="A directory written by 'keras2clash emit'."),
) -> None:
    """Run yosys synth on PROJECT's Verilog (generated if missing): cells, flip-flops, multipliers."""
    api.synth(project)


# --- Hardware figures before any HDL: the exact model's options and the project reports -----


@app.command()
def options(
    model: Path = typer.Argument(..., help="A model file (.keras, .h5, JSON config) or an emitted project directory."),
    format: str = typer.Option("1,7,8", "--format", "-f", help=FORMAT_HELP + " (model files only)"),
    sort: str = typer.Option("interval", "--sort", help="latency | interval | multipliers"),
    cycles_too: bool = typer.Option(False, "--cycles-too", help="Also vary the cycles knob (layer-wise Pareto-pruned)."),
    max_rows: int = typer.Option(40, "--max", min=1, help="Show at most N rows (JSON/CSV hold every configuration)."),
    pareto: bool = typer.Option(False, "--pareto", help="Show only Pareto-optimal configurations."),
    dsp_budget: Optional[str] = typer.Option(None, "--dsp-budget", help=BUDGET_HELP + " Shows configurations within it."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write every configuration as JSON."),
    csv_out: Optional[Path] = typer.Option(None, "--csv", help="Write every configuration as CSV."),
    weights: Optional[Path] = typer.Option(None, "--weights", help="Pickled weight list for a JSON config."),
    force: bool = typer.Option(False, "--force", help="Replace existing --json/--csv files."),
) -> None:
    """Every useful parallelism configuration with its exact latency, II, multipliers, memory, efficiency."""
    from keras2clash.fsutil import write_output_file
    from keras2clash.hw import options as opts
    from keras2clash.report.hwreport import load_source

    _check_reports(force, json_out, csv_out)
    source = load_source(model, format, weights)
    result = opts.explore(source.plans, source.name, cycles_too=cycles_too, budget=_budget(dsp_budget))
    if sort not in opts.SORT_KEYS:
        raise K2CError(f"bad --sort {sort!r}: one of {', '.join(opts.SORT_KEYS)}")
    opts.render(result, Console(), sort=sort, max_rows=max_rows, pareto_only=pareto)
    if json_out is not None:
        write_output_file(json_out, result.to_json() + "\n", force)
    if csv_out is not None:
        write_output_file(csv_out, result.to_csv(), force)


@app.command()
def report(
    source_path: Path = typer.Argument(..., metavar="DIR", help="An emitted project directory, or a model file (with --format)."),
    config: Optional[list[str]] = typer.Option(None, "--config", help="PE:CYCLES per dense/conv2d layer, e.g. 8:1,8:1,5:1 (repeatable). Default: the project's own."),
    clock_mhz: float = typer.Option(100.0, "--clock-mhz", min=0.001, help="Clock for images/s."),
    yosys: bool = typer.Option(True, "--yosys/--no-yosys", help="Measure each configuration with Clash + Yosys."),
    dsp: str = typer.Option("ice40", "--dsp", help="Yosys target: ice40 (synth_ice40 -dsp), xilinx (synth_xilinx, DSP48E1) or none (generic synth; slow)."),
    out_dir: Optional[Path] = typer.Option(None, "--out-dir", "-o", help="Write report.md/.json/.png (and the configurations' projects) here."),
    dsp_budget: Optional[str] = typer.Option(None, "--dsp-budget", help=BUDGET_HELP + " Adds that configuration."),
    format: str = typer.Option("1,7,8", "--format", "-f", help=FORMAT_HELP + " (model files only)"),
    weights: Optional[Path] = typer.Option(None, "--weights", help="Pickled weight list for a JSON config."),
    force: bool = typer.Option(False, "--force", help="Replace a non-empty --out-dir."),
) -> None:
    """Chosen configurations side by side: model latency/II/images/s, Yosys multipliers/DSPs/LUTs/FFs/memory, efficiency."""
    from keras2clash.fsutil import check_writable_target
    from keras2clash.report import hwreport as reportcmd

    reportcmd.check_dsp(dsp)
    if out_dir is not None:
        check_writable_target(out_dir, force)
    source = reportcmd.load_source(source_path, format, weights)
    n = sum(1 for p in source.plans if p.is_compute)
    configs = [reportcmd.parse_config(c, n) for c in (config or [])]
    if not configs and dsp_budget is None:
        configs = [([p.pe for p in source.plans if p.is_compute], [p.cycles for p in source.plans if p.is_compute])]
    with err.status("report") as status:
        result = reportcmd.report_to(source, configs, out_dir, force=force, clock_mhz=clock_mhz, yosys=yosys,
                                     dsp=dsp, budget=_budget(dsp_budget), status=status.update)
    reportcmd.render(result, Console())
    if out_dir is not None:
        err.print(f"[green]✓[/green] wrote {', '.join(str(out_dir / n) for n in reportcmd.OUTPUT_FILES)}")


# --- Debugging: the golden model's outputs and per-layer trace (keras2clash.debug) ----------

DEBUG_MODEL_HELP = "A .keras, legacy .h5 or JSON config (+ pickled weights), or a project written by 'keras2clash emit'."


def _debug_options(format: Optional[str], layer_format, layer_formats, input_format, bits, calibration, softmax,
                   weights, weight_format) -> dict:
    """The planning options given on the command line (none for an emitted project)."""
    options = {"layer_formats": _user_formats(layer_formats, layer_format, input_format), "bits": bits,
               "calibration": calibration, "weights": weights, "softmax": None if softmax == "exact" else softmax,
               "weight_format": weight_format}
    return {"design": format, **{k: v for k, v in options.items() if v is not None}}


@app.command()
def trace(
    model: Path = typer.Argument(..., help=DEBUG_MODEL_HELP),
    data: Path = typer.Option(..., "--data", "-d", help="Inputs .npz with an array x (labels are not needed)."),
    format: Optional[str] = typer.Option(None, "--format", "-f", help=FORMAT_HELP + " Default 1,7,8 (not for a project)."),
    threshold: Optional[float] = typer.Option(None, "--threshold", "-t", min=0,
                                              help="Report the first layer whose --metric exceeds this; exit 1 if one does."),
    metric: str = typer.Option("max_lsb", "--metric",
                               help="max_lsb (largest error in output LSBs) | max_abs | mean_abs | mse."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write a PNG of the per-layer error."),
    n: Optional[int] = typer.Option(None, "-n", min=1, help="Use only the first N samples."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --plot file."),
    layer_format: Optional[list[str]] = typer.Option(None, "--layer-format", help=LF_HELP),
    layer_formats: Optional[Path] = typer.Option(None, "--layer-formats", help=LFS_HELP),
    input_format: Optional[str] = typer.Option(None, "--input-format", help=IN_HELP),
    bits: Optional[int] = typer.Option(None, "--bits", min=1, max=64, help=BITS_HELP),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help=CAL_HELP),
    softmax: str = typer.Option("exact", "--softmax", help=SOFTMAX_HELP),
    weights: Optional[Path] = typer.Option(None, "--weights", help="Pickled weight list for a JSON config."),
    weight_format: Optional[str] = typer.Option(None, "--weight-format", help=WEIGHT_FORMAT_HELP + " Not for a project."),
) -> None:
    """Every layer's fixed-point output (the golden model, = the hardware) against Keras' float output of the same layer."""
    from keras2clash.data import read_npz
    from keras2clash.debug import trace as run_trace
    from keras2clash.report.trace import METRICS, render

    if metric not in METRICS:
        raise K2CError(f"unknown --metric {metric!r}; choose from {', '.join(METRICS)}")
    _check_reports(force, plot)
    read_npz(data, "data")  # before the slow model load
    options = _debug_options(format, layer_format, layer_formats, input_format, bits, calibration, softmax, weights,
                             weight_format)
    result = run_trace(model, data, limit=n, **options)
    first = render(result, Console(width=max(Console().width, 120)), threshold=threshold, metric=metric)
    if plot is not None:
        result.plot(plot, threshold=threshold, metric=metric, force=force)
        err.print(f"[green]✓[/green] wrote {escape(str(plot))}")
    if first is not None:
        raise K2CError(f"layer '{first.name}' is the first whose {metric} exceeds {threshold:g}", exit_code=1)


@app.command()
def predict(
    model: Path = typer.Argument(..., help=DEBUG_MODEL_HELP),
    data: Path = typer.Option(..., "--data", "-d", help="Inputs .npz with an array x."),
    out: Path = typer.Option(..., "--out", "-o", help="Write raw, values, classes (and input_raw) to this .npz."),
    format: Optional[str] = typer.Option(None, "--format", "-f", help=FORMAT_HELP + " Default 1,7,8 (not for a project)."),
    n: Optional[int] = typer.Option(None, "-n", min=1, help="Use only the first N samples."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out file."),
    layer_format: Optional[list[str]] = typer.Option(None, "--layer-format", help=LF_HELP),
    layer_formats: Optional[Path] = typer.Option(None, "--layer-formats", help=LFS_HELP),
    input_format: Optional[str] = typer.Option(None, "--input-format", help=IN_HELP),
    bits: Optional[int] = typer.Option(None, "--bits", min=1, max=64, help=BITS_HELP),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help=CAL_HELP),
    softmax: str = typer.Option("exact", "--softmax", help=SOFTMAX_HELP),
    weights: Optional[Path] = typer.Option(None, "--weights", help="Pickled weight list for a JSON config."),
    weight_format: Optional[str] = typer.Option(None, "--weight-format", help=WEIGHT_FORMAT_HELP + " Not for a project."),
) -> None:
    """The golden model's (= the hardware's) outputs for the inputs in --data, as an .npz."""
    import io

    import numpy as np

    from keras2clash.data import read_npz
    from keras2clash.debug import predict as run_predict
    from keras2clash.fsutil import write_output_file

    _check_reports(force, out)
    read_npz(data, "data")
    options = _debug_options(format, layer_format, layer_formats, input_format, bits, calibration, softmax, weights,
                             weight_format)
    result = run_predict(model, data, limit=n, **options)
    buffer = io.BytesIO()
    np.savez(buffer, raw=result.raw, values=result.values, classes=result.classes, input_raw=result.input_raw,
             output_format=np.array(str(result.output_format)), input_format=np.array(str(result.input_format)))
    write_output_file(out, buffer.getvalue(), force)
    err.print(f"[green]✓[/green] {len(result)} samples, outputs in {result.output_format}: {escape(str(out))}")


# --- Place and route on an FPGA (keras2clash.fpga) ------------------------------------------


@app.command()
def pnr(
    project: Path = typer.Argument(..., help="A directory written by 'keras2clash emit'."),
    fpga: str = typer.Option(..., "--fpga", help="ecp5-85k | ecp5-45k | ecp5-25k | ice40-up5k | ice40-hx8k"),
    freq: float = typer.Option(100.0, "--freq", help="Target clock in MHz (nextpnr --freq)."),
    seed: int = typer.Option(1, "--seed", help="Placer seed (nextpnr --seed)."),
    placer: Optional[str] = typer.Option(None, "--placer", help="nextpnr's placer: ecp5-* static (the default: spreads the design, so the routers converge), heap or sa; ice40-* heap (the default) or sa."),
    router: str = typer.Option("router1", "--router", help="nextpnr's router: router1 (timing-driven, its default) or router2 (negotiated congestion: converges where router1 stalls on a congested design)."),
    no_route: bool = typer.Option(False, "--no-route", help="Stop after placement: a post-placement timing estimate (much quicker)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the report as JSON."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Also write the report as markdown."),
    force: bool = typer.Option(False, "--force", help="Replace PROJECT/pnr/FPGA and existing --json/--markdown files."),
    dsp_registers: bool = typer.Option(True, "--dsp-registers/--no-dsp-registers",
                                       help="ECP5: move the multipliers' operand and product flip-flops into the MULT18X18D blocks."),
    bram_registers: bool = typer.Option(True, "--bram-registers/--no-bram-registers",
                                        help="ECP5: move the flip-flops after each block-RAM read into the DP16KD's output register (REGMODE=OUTREG)."),
    check_dsp_registers: int = typer.Option(0, "--check-dsp-registers", min=0, metavar="CYCLES",
                                            help="ECP5: first simulate the netlist before and after those moves (DSP and block-RAM registers) side by side for CYCLES random cycles (Icarus Verilog) and stop if any output differs."),
    max_fanout: Optional[int] = typer.Option(None, "--max-fanout", min=0, metavar="N",
                                             help="Copy every flip-flop and LUT driving more than N pins so each copy drives at most N, readers grouped in name order (fpga/fanout.py). Default: 64 on ECP5, 0 (off) on iCE40."),
    fanout_placement: bool = typer.Option(False, "--fanout-placement",
                                          help="With --max-fanout: group each copy's readers by a first placement (one more nextpnr run) instead of by name."),
    block_roms: bool = typer.Option(True, "--block-roms/--no-block-roms",
                                    help="ECP5: put every registered ROM (the weights) in block RAM, unless they would not fit; --no-block-roms leaves the choice to yosys (LUTs for shallow ROMs)."),
    ff_queues: int = typer.Option(0, "--ff-queues", min=0, metavar="WORDS",
                                  help="ECP5: build every queue (a memory with a write port) of at most WORDS words from flip-flops instead of LUT RAM; 0: all in LUT RAM."),
    ports: str = typer.Option("auto", "--ports",
                              help="Where the top's ports go: pins (the package's IO pins), scan (a scan harness: every port a register of a shift chain behind four pins, the design measured as a block inside a larger one), auto (pins when there are enough)."),
) -> None:
    """Synthesise (yosys) and place and route (nextpnr) PROJECT on an FPGA: utilisation, Fmax, critical path, latency in ns."""
    from keras2clash.fpga import flow
    from keras2clash.fpga.devices import get_device
    from keras2clash.fpga.report import render, to_markdown
    from keras2clash.fsutil import write_output_file

    get_device(fpga)  # an unknown name is refused before anything else
    _check_reports(force, json_out, markdown)
    with _StepProgress() as steps:
        report = flow.pnr(project, fpga, freq_mhz=freq, seed=seed, router=router, placer=placer, route=not no_route, force=force,
                          dsp_registers=dsp_registers, bram_registers=bram_registers, check_cycles=check_dsp_registers, block_roms=block_roms,
                          max_fanout=max_fanout, fanout_placement=fanout_placement, ff_queues=ff_queues,
                          ports=ports, progress=steps.update)
    render(report, Console())
    if json_out is not None:
        write_output_file(json_out, report.to_json() + "\n", force)
    if markdown is not None:
        write_output_file(markdown, to_markdown(report), force)
    err.print(f"[green]✓[/green] logs and report in {escape(report.logs)}")


class _StepProgress:
    """One line per step of `pnr` with a spinner and the elapsed time; a finished step keeps
    its line with a tick (or 'skipped')."""

    def __init__(self) -> None:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.bar = Progress(SpinnerColumn(finished_text="[green]✓[/green]"), TextColumn("{task.description}"),
                            TimeElapsedColumn(), console=err)
        self.tasks: dict[str, int] = {}

    def __enter__(self) -> "_StepProgress":
        self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def update(self, step: str, detail: str) -> None:
        if step not in self.tasks:
            self.tasks[step] = self.bar.add_task(step, total=1)
        task = self.tasks[step]
        if detail == "done":
            self.bar.update(task, completed=1)
        elif detail == "skipped":
            self.bar.update(task, completed=1, description=f"{step} (skipped)")
        else:
            self.bar.update(task, description=f"{step}: {escape(detail)}")


# --- Co-design search: the network and its hardware together (keras2clash.search) -----------

search_app = typer.Typer(
    no_args_is_help=True,
    help="Co-design search: evolve the network and its hardware together (optuna NSGA-II, exact hardware "
         "model, golden model), then emit a candidate.",
)
app.add_typer(search_app, name="search")

STORAGE_HELP = ("An optuna storage URL shared by several workers or machines (e.g. postgresql://..., or "
                "sqlite:////shared/search.db). Default: DIR/search.db.")


@search_app.command("run")
def search_run(
    description: Path = typer.Argument(..., help="The search description (YAML, or JSON by its .json suffix)."),
    out: Path = typer.Option(..., "--out", "-o", help="The search folder: created, or resumed if it holds this search."),
    workers: int = typer.Option(1, "--workers", "-w", min=1, help="Worker processes on this machine."),
    storage: Optional[str] = typer.Option(None, "--storage", help=STORAGE_HELP),
    trials: Optional[int] = typer.Option(None, "--trials", min=1, help="Finished trials to stop at (default: the description's)."),
    top: int = typer.Option(15, "--top", min=1, help="Rows of the table of best candidates."),
) -> None:
    """Run (or resume) a co-design search; results.md/.json and pareto.png land in --out."""
    from keras2clash.search import results, study
    from keras2clash.search.description import load_description

    desc = load_description(description)
    summary = study.run(desc, out, workers=workers, storage=storage, trials=trials)
    res = results.collect(summary.folder, desc)
    results.render(res, Console(), limit=top)
    results.write_results(res, summary.folder.root)
    err.print(f"[green]✓[/green] {summary.finished} finished trials ({summary.finished - summary.finished_before} "
              f"this run, {summary.seconds:.0f} s); wrote {', '.join(str(out / n) for n in results.RESULT_FILES)}")


@search_app.command("show")
def search_show(
    folder: Path = typer.Argument(..., metavar="DIR", help="A search folder (search run --out)."),
    storage: Optional[str] = typer.Option(None, "--storage", help="The storage URL, if not the one DIR records."),
    top: int = typer.Option(15, "--top", min=1, help="Rows of the table of best candidates."),
) -> None:
    """The best candidates of a search (running or finished); rewrites results.md/.json and pareto.png."""
    from keras2clash.search import results, study

    found = study.open_folder(folder, storage)
    res = results.collect(found, found.description())
    results.render(res, Console(), limit=top)
    results.write_results(res, found.root)
    err.print(f"[green]✓[/green] wrote {', '.join(str(folder / n) for n in results.RESULT_FILES)}")


@search_app.command("emit")
def search_emit(
    folder: Path = typer.Argument(..., metavar="DIR", help="A search folder (search run --out)."),
    trial: int = typer.Option(..., "--trial", "-t", min=0, help="The candidate's trial number (search show)."),
    out: Path = typer.Option(..., "--out", "-o", help="Project directory to create."),
    simulate: bool = typer.Option(False, "--simulate", help="Also run the Clash simulation: bit-exact and the model's cycles?"),
    n: Optional[int] = typer.Option(None, "-n", min=1, help="Simulate only the first N test samples."),
    storage: Optional[str] = typer.Option(None, "--storage", help="The storage URL, if not the one DIR records."),
    force: bool = typer.Option(False, "--force", help="Replace a non-empty output directory."),
) -> None:
    """Emit a candidate of a search as a Clash project (the normal flow: hdl, simulate, pnr)."""
    from keras2clash.search.emit import emit as emit_candidate

    result = emit_candidate(folder, trial, out, force=force, simulate=simulate, limit=n, storage=storage)
    ev = result.evaluation
    err.print(f"[green]✓[/green] trial {trial} ({escape(ev.network)}; {escape(ev.hardware)}) emitted to {out}: "
              f"{ev.multipliers} multipliers, II {ev.ii:g}, latency {ev.latency} cycles, golden test accuracy "
              f"{100 * ev.test_accuracy:.2f}%" + (" (network trained again)" if result.retrained else ""))
    comp = result.comparison
    if comp is None:
        err.print(f"next: keras2clash simulate {out} --data {result.data}; keras2clash hdl {out}")
        return
    err.print(f"Clash simulation: {comp.bit_exact}/{comp.samples} bit-exact with the golden model, accuracy "
              f"{100 * comp.sim_accuracy:.2f}%; first latency {comp.first_latency} cycles (model {ev.latency}), "
              f"mean interval {comp.interval:g} (model {result.model_interval:g}, steady-state II {ev.ii:g})")
    if not result.confirmed:
        raise K2CError("the Clash simulation differs from the golden model or the hardware model", exit_code=1)


if __name__ == "__main__":
    main()
