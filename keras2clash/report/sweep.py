"""Bit-width sweep: accuracy against total bits, Keras and hardware side by side.

For each format the sweep reports the Keras float outputs rounded to the output format
(the thesis' "after rounding"), float inference with the weights and biases rounded to
their formats, and the golden model (the hardware, bit for bit) — and, for chosen formats,
the Clash simulation confirming the golden model. Keras is loaded and run once; each
format then costs one golden-model run (vectorised numpy), so a 15-format sweep of the
digits network takes seconds.

Format lists (`--formats`, repeatable; docs/guide/formats.md):

- `1,7,8` one format;
- `1,5,6;1,7,8` several (`;` separated);
- `A:B` a range, `A = s,i1,f1` to `B = s,i2,f2` (same sign): the integer bits step by one
  from i1 towards i2 and the fraction bits step by one from f1 towards f2, together, each
  stopping when it reaches its end; the range has `max(|i2-i1|, |f2-f1|) + 1` formats.
  `1,2,3:1,16,17` is 1,2,3 1,3,4 ... 1,16,17 (the thesis' Table 3); `1,7,1:1,7,12` keeps 7
  integer bits and sweeps the fraction; `1,2,3:1,4,9` is 1,2,3 1,3,4 1,4,5 1,4,6 ... 1,4,9;
- `auto`: the automatic per-layer formats (`autoformat`) at each width of `--bits`.

Duplicates are dropped (first one kept); rows are ordered by total bits.
"""

from __future__ import annotations

import csv
import io
import json
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from keras2clash import api
from keras2clash.data import load_dataset
from keras2clash.errors import K2CError
from keras2clash.frontend.keras_ref import predict_float, rounded_classes
from keras2clash.fsutil import atomic_directory, check_writable_target
from keras2clash.hw.plan import LayerFormats, LayerPlan
from keras2clash.hw.planner import make_plan
from keras2clash.network import load_model, plan_network
from keras2clash.quant import golden
from keras2clash.quant.autoformat import AutoFormats, choose_formats, saturation
from keras2clash.quant.formats import FixedFormat, count_saturated, make_format, parse_format
from keras2clash.quant.profile import float_forward, layer_params

DEFAULT_FORMATS = "1,2,3:1,16,17"
"""The thesis' sweep (Table 3): 6 to 34 bits."""


def _sign(v: int) -> int:
    return (v > 0) - (v < 0)


def format_range(start: FixedFormat, end: FixedFormat) -> list[FixedFormat]:
    """`start:end` as the module docstring defines it."""
    if start.sign != end.sign:
        raise K2CError(f"bad format range {start}:{end}: both ends need the same sign bit")
    di, df = end.int - start.int, end.frac - start.frac
    steps = max(abs(di), abs(df))
    return [
        make_format(start.sign, start.int + _sign(di) * min(k, abs(di)), start.frac + _sign(df) * min(k, abs(df)))
        for k in range(steps + 1)
    ]


def parse_format_specs(specs: Iterable[str]) -> list[FixedFormat | str]:
    """`--formats` values -> formats in order (duplicates dropped); 'auto' stays 'auto'."""
    result: list[FixedFormat | str] = []
    for spec in specs:
        for item in str(spec).split(";"):
            item = item.strip()
            if not item:
                continue
            if item.lower() == "auto":
                new: list[FixedFormat | str] = ["auto"]
            elif ":" in item:
                ends = item.split(":")
                if len(ends) != 2:
                    raise K2CError(f"bad format range {item!r}: expected FIRST:LAST, e.g. 1,2,3:1,16,17")
                new = list(format_range(parse_format(ends[0]), parse_format(ends[1])))
            else:
                new = [parse_format(item)]
            result.extend(f for f in new if f not in result)
    if not result:
        raise K2CError("no formats to sweep: give --formats, e.g. 1,2,3:1,16,17 or '1,5,6;1,7,8'")
    return result


def parse_bits(text: str | Sequence[int] | None) -> list[int]:
    """`"6,12,16"` -> [6, 12, 16]."""
    if text is None:
        return []
    if not isinstance(text, str):
        values = [int(v) for v in text]
    else:
        try:
            values = [int(v) for v in text.replace(";", ",").split(",") if v.strip()]
        except ValueError:
            raise K2CError(f"bad bit widths {text!r}: expected integers like 6,12,16") from None
    for v in values:
        if not 1 <= v <= 64:
            raise K2CError(f"bad bit width {v}: between 1 and 64")
    return values


@dataclass(frozen=True)
class FormatChoice:
    """One row of the sweep: a uniform format, or automatic per-layer formats."""

    label: str
    bits: int
    default: FixedFormat
    layers: Mapping[str, LayerFormats] = field(default_factory=dict)
    input_fmt: FixedFormat | None = None
    auto: AutoFormats | None = None

    @property
    def uniform(self) -> bool:
        return self.auto is None and not self.layers

    def plans(self, ir: Sequence[Mapping[str, Any]]) -> list[LayerPlan]:
        return make_plan(ir, self.default, layer_formats=dict(self.layers) or None, input_fmt=self.input_fmt)


def uniform_choice(fmt: FixedFormat) -> FormatChoice:
    return FormatChoice(str(fmt), fmt.bits, fmt)


def auto_choice(auto: AutoFormats) -> FormatChoice:
    return FormatChoice(f"auto {auto.bits}", auto.bits, auto.input_fmt, auto.layers, auto.input_fmt, auto)


@dataclass
class SweepRow:
    label: str
    bits: int
    uniform: bool
    keras_rounded: float
    keras_weights_rounded: float
    golden: float
    saturated_params: int  # weights and biases that do not fit their formats
    saturated_values: int  # inputs and layer outputs (on the test data, float) that do not
    formats: str  # a description of the per-layer formats ("" for uniform)
    sim_accuracy: float | None = None
    bit_exact: int | None = None
    sim_samples: int | None = None


@dataclass
class SweepResult:
    model: str
    samples: int
    keras_float: float
    rows: list[SweepRow]
    seconds: float
    calibration: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f}%"


def _sim(row: SweepRow) -> str:
    if row.bit_exact is None:
        return "-"
    return f"{_pct(row.sim_accuracy)} {row.bit_exact}/{row.sim_samples}"


HEADER = [
    "format",
    "bits",
    "Keras rounded",
    "Keras w. rounded",
    "golden",
    "sat. params",
    "sat. acts",
    "Clash sim, bit-exact",
]
"""Keras rounded: float outputs rounded to the output format; Keras w. rounded: float
inference with weights and biases rounded to their formats; golden: the hardware (golden
model); sat. params: weights and biases that do not fit; sat. acts: inputs and layer
outputs (float, test data) that do not fit; Clash sim: accuracy, samples equal to the golden
model in every output bit / samples."""


def table_rows(result: SweepResult) -> list[list[str]]:
    return [
        [
            r.label,
            str(r.bits),
            _pct(r.keras_rounded),
            _pct(r.keras_weights_rounded),
            _pct(r.golden),
            str(r.saturated_params),
            str(r.saturated_values),
            _sim(r),
        ]
        for r in result.rows
    ]


def caption(result: SweepResult) -> str:
    text = (
        f"{result.model}: {result.samples} test samples, Keras float accuracy "
        f"{_pct(result.keras_float)}; sweep {result.seconds:.1f} s"
    )
    if result.calibration:
        text += f"; auto formats calibrated on {result.calibration}"
    return text


def render(result: SweepResult, console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=caption(result))
    for i, col in enumerate(HEADER):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in table_rows(result):
        table.add_row(*row)
    console.print(table)
    for r in result.rows:
        if r.formats:
            console.print(f"{r.label}: {r.formats}")


def to_markdown(result: SweepResult) -> str:
    lines = [caption(result), "", "| " + " | ".join(HEADER) + " |", "|---|" + "---:|" * (len(HEADER) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(result)]
    autos = [r for r in result.rows if r.formats]
    if autos:
        lines.append("")
        lines += [f"- {r.label}: {r.formats}" for r in autos]
    return "\n".join(lines) + "\n"


def to_csv(result: SweepResult) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(
        [
            "format",
            "bits",
            "uniform",
            "keras_float",
            "keras_rounded",
            "keras_weights_rounded",
            "golden",
            "saturated_params",
            "saturated_values",
            "sim_accuracy",
            "bit_exact",
            "sim_samples",
            "formats",
        ]
    )
    for r in result.rows:
        writer.writerow(
            [
                r.label,
                r.bits,
                int(r.uniform),
                result.keras_float,
                r.keras_rounded,
                r.keras_weights_rounded,
                r.golden,
                r.saturated_params,
                r.saturated_values,
                "" if r.sim_accuracy is None else r.sim_accuracy,
                "" if r.bit_exact is None else r.bit_exact,
                "" if r.sim_samples is None else r.sim_samples,
                r.formats,
            ]
        )
    return buf.getvalue()


def plot(result: SweepResult, path: Path) -> Path:
    """Accuracy against total bits: Keras float, Keras rounded, weights rounded, golden."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    uni = [r for r in result.rows if r.uniform]
    auto = [r for r in result.rows if not r.uniform]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    ax.axhline(100 * result.keras_float, color="black", lw=1, ls=":", label="Keras float")
    if uni:
        bits = [r.bits for r in uni]
        ax.plot(bits, [100 * r.keras_rounded for r in uni], "s--", color="#7f8c8d", label="Keras outputs rounded")
        ax.plot(
            bits, [100 * r.keras_weights_rounded for r in uni], "^-.", color="#16a085", label="Keras weights rounded"
        )
        ax.plot(bits, [100 * r.golden for r in uni], "o-", color="#2c5aa0", label="golden model (hardware)")
    if auto:
        ax.plot(
            [r.bits for r in auto],
            [100 * r.golden for r in auto],
            "D",
            color="#d35400",
            ms=8,
            label="golden model, auto formats",
        )
    sims = [r for r in result.rows if r.bit_exact is not None]
    if sims:
        ax.plot(
            [r.bits for r in sims],
            [100 * (r.sim_accuracy or 0) for r in sims],
            "x",
            color="#c0392b",
            ms=11,
            mew=2,
            label="Clash simulation",
        )
    ax.set_xlabel("total bits")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"{result.model}: accuracy against bit width ({result.samples} test samples)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_outputs(result: SweepResult, out_dir: Path) -> dict[str, Path]:
    """sweep.md, sweep.csv, sweep.json and sweep.png in `out_dir` (created)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        kind: out_dir / f"sweep.{ext}"
        for kind, ext in (("markdown", "md"), ("csv", "csv"), ("json", "json"), ("png", "png"))
    }
    paths["markdown"].write_text(to_markdown(result))
    paths["csv"].write_text(to_csv(result))
    paths["json"].write_text(result.to_json() + "\n")
    plot(result, paths["png"])
    return paths


def _describe(choice: FormatChoice) -> str:
    if choice.uniform:
        return ""
    parts = [f"input {choice.input_fmt}"] if choice.input_fmt else []
    for name, lf in choice.layers.items():
        acc = f" acc={lf.accumulator_bits}" if lf.accumulator_bits else ""
        parts.append(f"{name} w={lf.weight} b={lf.bias} o={lf.output}{acc}")
    return "; ".join(parts)


def evaluate(
    ir: Sequence[Mapping[str, Any]],
    choice: FormatChoice,
    x: np.ndarray,
    y: np.ndarray,
    keras_out: np.ndarray,
    traces: Sequence[Any],
) -> SweepRow:
    """One sweep row from precomputed Keras outputs and float traces (no Keras calls)."""
    network = plan_network(
        ir, choice.default, layer_formats=dict(choice.layers) or None, input_format=choice.input_fmt, fifos=False
    )
    plans, params = network.plans, network.params
    gold = golden.predict(plans, params, golden.quantize_inputs(plans, x))[1]
    real = {
        p.name: (
            p.w_fmt.to_real(params[p.name].kernel).reshape(np.shape(layer_params(ir[p.name])[0])),
            p.b_fmt.to_real(params[p.name].bias),
        )
        for p in plans
        if p.has_params and p.w_fmt is not None and p.b_fmt is not None
    }
    w_rounded = np.argmax(float_forward(ir, x, real)[-1].out.reshape(len(x), -1), axis=1)
    sat_params = 0
    for p in plans:
        if p.has_params:
            assert p.w_fmt is not None and p.b_fmt is not None
            kernel, bias = layer_params(ir[p.name])
            sat_params += count_saturated(kernel, p.w_fmt)[0]
            sat_params += count_saturated(bias, p.b_fmt)[0]
    # every layer's formats: saturation counts the compute layers' and the merge layers' outputs
    layer_fmts = {p.name: LayerFormats(p.w_fmt, p.b_fmt, p.out_fmt) for p in plans}
    sat = saturation(ir, traces, x, plans[0].in_fmt, layer_fmts)
    return SweepRow(
        label=choice.label,
        bits=choice.bits,
        uniform=choice.uniform,
        keras_rounded=float(np.mean(rounded_classes(keras_out, plans[-1].out_fmt) == y)),
        keras_weights_rounded=float(np.mean(w_rounded == y)),
        golden=float(np.mean(gold == y)),
        saturated_params=sat_params,
        saturated_values=sum(s.inputs + s.outputs for s in sat),
        formats=_describe(choice),
    )


def sweep(
    model: Any,
    data: str | Path,
    formats: Iterable[str] = (DEFAULT_FORMATS,),
    *,
    bits: str | Sequence[int] | None = None,
    auto: bool = False,
    calibration: str | Path | None = None,
    confirm: Iterable[str] = (),
    confirm_bits: str | Sequence[int] | None = None,
    out_dir: str | Path | None = None,
    force: bool = False,
    limit: int | None = None,
    weights: str | Path | None = None,
    show: bool = True,
) -> SweepResult:
    """Sweep `formats` on the test set `data`; see the module docstring.

    `auto` adds automatic per-layer formats at every width of the sweep (`--formats auto
    --bits N` at given widths); they are calibrated on `calibration` (default: `data`).
    `confirm` (formats) and `confirm_bits` (widths: every row of that width) are emitted
    and run through the Clash simulation, which must equal the golden model bit for bit.
    Tables, CSV, JSON and the plot go to `out_dir` (with the confirmed projects under
    `out_dir/projects/`).
    """
    from rich.console import Console

    err = Console(stderr=True)
    started = time.perf_counter()
    specs = parse_format_specs(formats)
    widths = parse_bits(bits)
    confirm_formats = [f for f in parse_format_specs(confirm) if isinstance(f, FixedFormat)] if confirm else []
    confirm_widths = set(parse_bits(confirm_bits))
    if "auto" in specs and not widths:
        raise K2CError("--formats auto needs --bits (the total widths, e.g. --bits 6,12,16)")
    if out_dir is not None:
        check_writable_target(Path(out_dir), force)

    with err.status("loading the model"):
        keras_model, ir = load_model(model, weights)
    input_shape = tuple(ir.input_shape)
    n_out = int(np.prod(ir.output_shape))
    dataset = load_dataset(data, input_shape, n_out).head(limit)
    x, y = dataset.x, dataset.y
    with err.status("Keras float inference"):
        keras_out = predict_float(keras_model, x)
    traces = float_forward(ir, x)

    choices: list[FormatChoice] = [uniform_choice(f) for f in specs if isinstance(f, FixedFormat)]
    choices += [uniform_choice(f) for f in confirm_formats if f not in specs]
    auto_widths = list(widths) if "auto" in specs else []
    if auto:
        auto_widths += [c.bits for c in choices]
    calib_label = None
    if auto_widths:
        cal_x = x
        calib_label = f"{Path(data).name} (the test set)"
        if calibration is not None:
            cal_x = load_dataset(calibration, input_shape, n_out).x
            calib_label = Path(calibration).name
        cal_traces = float_forward(ir, cal_x)
        for n in dict.fromkeys(auto_widths):
            choices.append(auto_choice(choose_formats(ir, cal_x, n, traces=cal_traces)))
    choices.sort(key=lambda c: (c.bits, not c.uniform))

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    rows: list[SweepRow] = []
    columns = (TextColumn("sweep {task.fields[label]:>10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True, disable=not show) as bar:
        task = bar.add_task("sweep", total=len(choices), label="")
        for choice in choices:
            bar.update(task, label=choice.label)
            rows.append(evaluate(ir, choice, x, y, keras_out, traces))
            bar.advance(task)

    to_confirm = [
        i for i, c in enumerate(choices) if (c.uniform and c.default in confirm_formats) or c.bits in confirm_widths
    ]
    missing = confirm_widths - {c.bits for c in choices}
    if missing:
        raise K2CError(f"--confirm-bits {','.join(map(str, sorted(missing)))}: no format of that width in the sweep")

    result = SweepResult(
        keras_model.name, len(x), float(np.mean(np.argmax(keras_out, axis=1) == y)), rows, 0.0, calib_label
    )

    def finish(work: Path | None) -> None:
        if to_confirm:
            _confirm(keras_model, choices, rows, to_confirm, data, limit, work, err)
        result.seconds = time.perf_counter() - started
        if work is not None:
            write_outputs(result, work)

    if out_dir is not None:
        with atomic_directory(Path(out_dir), force=force) as tmp:
            finish(tmp)
    elif to_confirm:
        with tempfile.TemporaryDirectory(prefix="k2c-sweep-") as tmp:
            _confirm(keras_model, choices, rows, to_confirm, data, limit, Path(tmp), err)
        result.seconds = time.perf_counter() - started
    else:
        finish(None)
    if show:
        render(result, Console())
    return result


def _confirm(
    keras_model: Any,
    choices: Sequence[FormatChoice],
    rows: list[SweepRow],
    indices: Sequence[int],
    data: str | Path,
    limit: int | None,
    work: Path,
    err: Any,
) -> None:
    """Emit each chosen format and run its Clash simulation (keras=False): bit-exact?"""
    for i in indices:
        choice, row = choices[i], rows[i]
        target = work / "projects" / choice.label.replace(" ", "_").replace(",", "_")
        err.print(f"confirming {choice.label} in the Clash simulation ({target.name})")
        project = api.emit(
            keras_model,
            choice.default,
            target,
            force=True,
            layer_formats=dict(choice.layers) or None,
            input_format=choice.input_fmt,
        )
        comp = api.simulate(project, data, limit, keras=False, show=False)
        row.sim_accuracy, row.bit_exact, row.sim_samples = comp.sim_accuracy, comp.bit_exact, comp.samples
        if comp.bit_exact != comp.samples:
            err.print(
                f"[red]{choice.label}: simulation differs from the golden model on "
                f"{comp.samples - (comp.bit_exact or 0)} sample(s)[/red]"
            )
