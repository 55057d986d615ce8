"""Measured figures for the documentation: bench/*.json read, selected and rendered as Markdown.

Every number in the docs that was measured (Fmax, latency in ns, LUTs, accuracy, seconds) comes
from here: the mkdocs-macros functions (docs/macros.py), the generated benchmarks page
(docs/gen_pages.py) and the README's headline table (`python docs/benchdocs.py readme`). The
Markdown text lives in the Jinja2 templates of docs/templates/; this module holds the choices
(which rows, which units, how many digits).

    python docs/benchdocs.py readme [--check] [--readme README.md]

rewrites (or, with --check, compares) the README region between the headline markers.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
TEMPLATES = Path(__file__).resolve().parent / "templates"

HEADLINE_START = "<!-- headline:start -->"
HEADLINE_END = "<!-- headline:end -->"

DEFAULT_WEIGHT_FORMAT = "fit"  # emit's default (keras2clash.quant.autoformat), the hardware rung of the headline table
# The utilisation rows of a place-and-route report, under the names the tables use.
RESOURCES = {"LUT4": "lut", "flip-flops": "ff", "multipliers": "mult", "block RAM": "bram"}


@cache
def _bench_script() -> Any:
    """bench/fpga.py, whose `emit_options` reads a design's name (`example[@budget][:variant]`)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_fpga", BENCH / "fpga.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BenchError(LookupError):
    """A figure that the bench JSON does not hold (a misspelt example or device)."""


# ---------------------------------------------------------------------------------------------
# formatting


def thousands(value: float | int) -> str:
    """1234 -> '1,234'."""
    return f"{round(value):,}"


def mhz(value: float) -> str:
    return f"{value:.1f} MHz"


def ns(value: float) -> str:
    """A latency: '445 ns' below a microsecond, '5.63 µs' (three significant digits) above."""
    if round(value) < 1000:
        return f"{value:.0f} ns"
    us = value / 1000
    digits = max(0, 2 - int(math.floor(math.log10(max(us, 1.0)))))
    return f"{us:.{digits}f} µs"


def percent(value: float, digits: int = 2) -> str:
    return f"{100 * value:.{digits}f}%"


def rate(value: float) -> str:
    """Images (or cycles) a second, three significant digits: '16.6M', '447k', '886'."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):  # noqa: B007  (read after the break)
        if value >= scale:
            value /= scale
            break
    else:
        suffix = ""
    digits = max(0, 2 - int(math.floor(math.log10(value)))) if value > 0 else 0
    return f"{value:.{digits}f}{suffix}"


def seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 100:
        return f"{value:.1f} s"
    return f"{value:,.0f} s"


def knobs(values: list[int]) -> str:
    return ",".join(str(v) for v in values)


# ---------------------------------------------------------------------------------------------
# the bench files


@cache
def load(name: str) -> dict[str, Any]:
    """bench/NAME, parsed (cached: the files do not change during one build)."""
    path = BENCH / name
    if not path.is_file():
        raise BenchError(f"bench/{name} does not exist")
    return json.loads(path.read_text())


@dataclass(frozen=True)
class Design:
    """One placed and routed design: a row of `examples` (or `sweep`) in bench/fpga*.json."""

    spec: str  # as bench/fpga.py names it: example[@budget][:variant]
    example: str  # the example (examples/EXAMPLE/), `dir/model` for a model beside others
    budget: str | None  # the --dsp-budget it was balanced to
    variant: str | None  # emit options joined by `+` (bench/fpga.py's emit_options): `argmax`, `latency`, `1.3.4`
    device: str
    part: str
    parallelism: list[int]
    cycles: list[int]
    pipeline: list[int]
    fmax_mhz: float
    target_mhz: float
    latency_cycles: int
    ii_cycles: float
    latency_ns: float
    images_per_second: float
    seed: int | None
    routed: bool
    seeds: tuple[tuple[int, float], ...]
    used: dict[str, int]
    available: dict[str, int]
    pnr_seconds: float | None

    @property
    def model(self) -> str:
        """The example's name as the examples/ folder holds it."""
        return self.example.split("/")[0]

    @property
    def configuration(self) -> str:
        """How the design was emitted, as command-line options ('defaults' for none)."""
        named = _bench_script().emit_options(self.spec)
        defaults = {"softmax": "exact", "format": "1,7,8"}
        shown = [k for k in ("dsp_budget", "softmax", "strategy", "no_class", "pipeline", "format") if k in named]
        options = [
            f"--{key.replace('_', '-')}" + ("" if named[key] is True else f" {named[key]}")
            for key in shown
            if named[key] != defaults.get(key)
        ]
        return ", ".join(f"`{option}`" for option in options) or "defaults"

    @property
    def label(self) -> str:
        """A short name for plots: the example, and its budget or variant if any."""
        extra = [part for part in (self.budget and f"budget {self.budget}", self.variant) if part]
        return self.example + (f" ({', '.join(extra)})" if extra else "")


def _design(row: dict[str, Any], device: str) -> Design:
    report = row.get("report", {})
    head, _, variant = row["example"].partition(":")
    example, _, budget = head.partition("@")
    used = {
        RESOURCES[u["resource"]]: int(u["used"]) for u in report.get("utilisation", []) if u["resource"] in RESOURCES
    }
    available = {
        RESOURCES[u["resource"]]: int(u["available"])
        for u in report.get("utilisation", [])
        if u["resource"] in RESOURCES
    }
    return Design(
        spec=row["example"],
        example=example,
        budget=budget or None,
        variant=variant or None,
        device=report.get("device", device),
        part=report.get("part", ""),
        parallelism=list(row.get("parallelism", [])),
        cycles=list(row.get("cycles", [])),
        pipeline=list(row.get("pipeline", [])),
        fmax_mhz=float(row["fmax_mhz"]),
        target_mhz=float(row.get("target_mhz", 0.0)),
        latency_cycles=int(row["latency_cycles"]),
        ii_cycles=float(row["ii_cycles"]),
        latency_ns=float(row["latency_ns"]),
        images_per_second=float(row["images_per_second"]),
        seed=report.get("seed"),
        routed=bool(row.get("routed", False)),
        seeds=tuple((int(s["seed"]), float(s["fmax_mhz"])) for s in row.get("seeds", []) if s.get("routed")),
        used=used,
        available=available,
        pnr_seconds=report.get("seconds", {}).get("place and route"),
    )


@cache
def fpga_files() -> dict[str, str]:
    """Device name -> the bench file that holds its place-and-route results (bench/fpga*.json)."""
    files = {}
    for path in sorted(BENCH.glob("fpga*.json")):
        files[json.loads(path.read_text())["fpga"]] = path.name
    return files


def devices() -> list[str]:
    return list(fpga_files())


def _fpga(device: str) -> dict[str, Any]:
    files = fpga_files()
    if device not in files:
        raise BenchError(f"no place-and-route results for device {device!r}; bench has {', '.join(files)}")
    return load(files[device])


def designs(device: str) -> list[Design]:
    """Every routed design of `device`, in the bench file's order."""
    return [_design(row, device) for row in _fpga(device)["examples"] if row.get("routed")]


def sweep(device: str) -> list[Design]:
    """The pipeline sweep of `device` (bench/fpga.py --sweep), by pipeline depth."""
    rows = [_design(row, device) for row in _fpga(device).get("sweep", []) if row.get("routed")]
    return sorted(rows, key=lambda d: d.pipeline)


def design(example: str, device: str) -> Design:
    """The design of `example` on `device`: its exact bench name (`thesis_cnn@ecp5-85k`,
    `iris@ice40-up5k:argmax`), or an example's name when that picks one design (its default
    configuration where there are several)."""
    rows = designs(device)
    for row in rows:
        if row.spec == example:
            return row
    matches = [row for row in rows if example in (row.example, row.model)]
    plain = [row for row in matches if ":" not in row.spec]  # no emit variant: the default configuration
    for found in (matches, plain):
        if len(found) == 1:
            return found[0]
    names = ", ".join(row.spec for row in rows)
    if matches:
        raise BenchError(
            f"{example!r} names several designs on {device}: use one of {', '.join(row.spec for row in matches)}"
        )
    raise BenchError(f"no design {example!r} on {device}; bench has {names}")


def accuracy_rows() -> list[dict[str, Any]]:
    return load("accuracy.json")["examples"]


def accuracy_of(example: str) -> dict[str, Any] | None:
    name = example.split("@")[0].split(":")[0]
    for row in accuracy_rows():
        if row["example"] in (name, name.split("/")[0]):
            return row
    return None


# ---------------------------------------------------------------------------------------------
# Markdown


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(thousands=thousands, mhz=mhz, ns=ns, percent=percent, rate=rate, seconds=seconds, knobs=knobs)
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context).strip() + "\n"


def _accuracy_cell(design: Design) -> dict[str, Any] | None:
    """The example's accuracy at bench/accuracy.json's format; none for a design emitted at
    another format (its figure is not that one)."""
    row = accuracy_of(design.example)
    if row is None or _bench_script().emit_options(design.spec)["format"] != load("accuracy.json")["format"]:
        return None
    test = row["test"]
    return {
        "images": test["images"],
        "keras": test["right"]["keras_float"] / test["images"],
        "hardware": test["right"][DEFAULT_WEIGHT_FORMAT] / test["images"],
    }


def headline_table() -> str:
    """Every routed design on every device: the example, how it was emitted, its accuracy
    (Keras float and the hardware, whose outputs equal the golden model's bit for bit), Fmax,
    latency, II and resources."""
    rows = [{"design": d, "accuracy": _accuracy_cell(d)} for device in devices() for d in designs(device)]
    return render(
        "headline.md.j2", rows=rows, weight_format=DEFAULT_WEIGHT_FORMAT, format=load("accuracy.json")["format"]
    )


def fpga_table(device: str) -> str:
    """The place-and-route results on `device` (bench/fpga.json, bench/fpga_ice40.json)."""
    rows = designs(device)
    part = rows[0].part if rows else ""
    return render("fpga_table.md.j2", rows=rows, device=device, part=part, available=rows[0].available if rows else {})


def sweep_table(device: str = "ecp5-85k") -> str:
    """Fmax and latency against the pipeline knob (the sweep part of the bench file)."""
    rows = sweep(device)
    if not rows:
        raise BenchError(f"no pipeline sweep for {device}")
    return render("sweep_table.md.j2", rows=rows, device=device, example=rows[0].example)


def da4ml_table() -> str:
    """keras2clash's latency strategy beside da4ml's own Verilog of the same HGQ2 model, through
    one place-and-route flow (bench/da4ml.json, bench/against_da4ml.py)."""
    data = load("da4ml.json")
    rows = [row for row in data["designs"] if "error" not in row]
    if not rows:
        raise BenchError("bench/da4ml.json has no measured design")
    return render(
        "da4ml_table.md.j2",
        rows=rows,
        part=rows[0]["report"]["part"],
        harness=", ".join(
            f"{row['design']} {row['harness_flip_flops']:,}" for row in rows if row["harness_flip_flops"]
        ),
        **{k: data[k] for k in ("model", "data", "samples", "fpga", "target_mhz", "seed", "ports", "routed", "date")},
    )


def accuracy_table() -> str:
    """Accuracy of every classifier example: Keras float and the hardware with each weight format."""
    data = load("accuracy.json")
    return render("accuracy_table.md.j2", rows=data["examples"], format=data["format"])


TRAINING_WITHIN_POINTS = 1.0
"""bench/training.json's overview names the narrowest gradient format whose test accuracy after
the last epoch is within this many points of Keras float's."""


def training_examples() -> list[dict[str, Any]]:
    """bench/training.json's networks, each with the narrowest gradient format within
    `TRAINING_WITHIN_POINTS` of Keras float (`narrowest`, `-` when none is)."""
    rows = []
    for row in load("training.json")["examples"]:
        target = row["keras_float"]["epochs"][-1]["test_accuracy"] - TRAINING_WITHIN_POINTS / 100
        good = [r for r in row["gradient_widths"] if r["epochs"][-1]["test_accuracy"] >= target]
        rows.append({**row, "narrowest": f"`{good[0]['g']}` ({good[0]['g_bits']} bits)" if good else "-"})
    return rows


def training_table() -> str:
    """The golden trainer against Keras float SGD (bench/training.py)."""
    data = load("training.json")
    return render(
        "training_table.md.j2", rows=training_examples(), epochs=data["epochs"], machine=data["machine"]["cpu"]
    )


def training_core_table() -> str:
    """The training core on the FPGA against Keras on the CPU (bench/training_core.py)."""
    data = load("training_core.json")
    return render(
        "training_core_table.md.j2",
        rows=data["cores"],
        keras=data["keras"],
        part=part(data["fpga"]),
        learning_rate=data["learning_rate"],
        date=data["date"],
        machine=data["machine"]["cpu"],
    )


WIDTHS_WITHIN_POINTS = 1.0
"""The overview of bench/widths.json names, per example, the narrowest width from which the
golden model stays within this many accuracy points of Keras float."""


def widths_examples() -> list[dict[str, Any]]:
    """bench/widths.json's examples, each with its rows by total bits."""
    return load("widths.json")["examples"]


def widths_of(example: str) -> dict[str, Any]:
    for row in widths_examples():
        if row["example"] == example:
            return row
    raise BenchError(
        f"no example {example!r} in bench/widths.json; it has {', '.join(r['example'] for r in widths_examples())}"
    )


def widths_levels_off(row: dict[str, Any]) -> int | None:
    """The narrowest width from which every wider row of `row` has the golden model within
    WIDTHS_WITHIN_POINTS of Keras float (None: not even the widest)."""
    floor = row["keras_float"] - WIDTHS_WITHIN_POINTS / 100 * row["images"]
    bits = None
    for r in sorted(row["rows"], key=lambda r: r["bits"], reverse=True):
        if r["golden"] < floor:
            break
        bits = r["bits"]
    return bits


def widths_table(example: str | None = None) -> str:
    """Accuracy against total bits (bench/widths.py): with no example, the golden model of
    every example at every format (a column per example); with one, its Keras rounded, Keras
    weights rounded and golden model at every format."""
    data = load("widths.json")
    if example is not None:
        row = widths_of(example)
        n = row["images"]
        rows = [
            {
                "format": r["format"],
                "bits": r["bits"],
                "keras_rounded": r["keras_rounded"] / n,
                "keras_weights_rounded": r["keras_weights_rounded"] / n,
                "golden": r["golden"] / n,
                "below_float": 100 * (row["keras_float"] - r["golden"]) / n,
            }
            for r in sorted(row["rows"], key=lambda r: r["bits"])
        ]
        return render(
            "widths_example_table.md.j2",
            example=example,
            images=n,
            keras_float=row["keras_float"] / n,
            rows=rows,
            weight_format=data["weight_format"],
        )
    examples = widths_examples()
    formats = sorted({(r["bits"], r["format"]) for e in examples for r in e["rows"]})
    golden = [{r["format"]: r["golden"] / e["images"] for r in e["rows"]} for e in examples]
    rows = [{"format": f, "bits": b, "cells": [g.get(f) for g in golden]} for b, f in formats]
    return render(
        "widths_table.md.j2",
        examples=examples,
        rows=rows,
        keras_float=[e["keras_float"] / e["images"] for e in examples],
        levels_off=[widths_levels_off(e) for e in examples],
        within=f"{WIDTHS_WITHIN_POINTS:g}",
        weight_format=data["weight_format"],
        formats=data["formats"],
    )


def toolchain_table() -> str:
    """How long each step of the flow takes on one model (bench/results.json)."""
    data = load("results.json")
    return render(
        "toolchain_table.md.j2",
        model=data["model"],
        format=data["format"],
        tools=data["tools"],
        speed=data["model_speed"],
    )


def configurations_table() -> str:
    """The space-time configurations of bench/results.json: the hardware model's cycles and
    multipliers next to the Clash simulation's."""
    data = load("results.json")
    return render("configurations_table.md.j2", model=data["model"], format=data["format"], rows=data["configurations"])


# single figures for prose


def fmax(example: str, device: str = "ecp5-85k") -> str:
    """'132.5 MHz'."""
    return mhz(design(example, device).fmax_mhz)


def latency_ns(example: str, device: str = "ecp5-85k") -> str:
    """'445 ns' (latency in cycles at the design's Fmax)."""
    return ns(design(example, device).latency_ns)


def latency_cycles(example: str, device: str = "ecp5-85k") -> str:
    return thousands(design(example, device).latency_cycles)


def ii_cycles(example: str, device: str = "ecp5-85k") -> str:
    """The initiation interval in cycles ('8', '1,568')."""
    return thousands(design(example, device).ii_cycles)


def images_per_second(example: str, device: str = "ecp5-85k") -> str:
    """'16.6M' images/s back to back at Fmax."""
    return rate(design(example, device).images_per_second)


def resource(example: str, device: str = "ecp5-85k", kind: str = "lut") -> str:
    """Used cells of one kind: lut, ff, mult or bram ('3,974')."""
    used = design(example, device).used
    if kind not in used:
        raise BenchError(f"resource kind {kind!r}: one of {', '.join(used)}")
    return thousands(used[kind])


def resources(example: str, device: str = "ecp5-85k") -> str:
    """'3,974 LUT4, 3,368 flip-flops, 12 multipliers, 13 block RAMs'."""
    return render("resources.md.j2", used=design(example, device).used).strip()


def resource_share(example: str, device: str = "ecp5-85k", kind: str = "lut") -> str:
    """Used cells of one kind as a share of the part ('4.75%')."""
    d = design(example, device)
    if kind not in d.used or not d.available.get(kind):
        raise BenchError(f"resource kind {kind!r}: one of {', '.join(d.used)}")
    return percent(d.used[kind] / d.available[kind])


def fmax_seeds(example: str, device: str = "ecp5-85k") -> str:
    """Fmax of every placement seed tried: 'seeds 1 / 2: 123.4 / 132.5 MHz' ('seed 1: 109.5 MHz')."""
    d = design(example, device)
    seeds = d.seeds
    if not seeds and d.seed is not None:
        seeds = ((d.seed, d.fmax_mhz),)
    if not seeds:
        raise BenchError(f"no placement seeds recorded for {d.spec} on {device}")
    word = "seeds" if len(seeds) > 1 else "seed"
    return f"{word} {' / '.join(str(s) for s, _ in seeds)}: {' / '.join(f'{f:.1f}' for _, f in seeds)} MHz"


def part(device: str = "ecp5-85k") -> str:
    """The part a device name stands for ('LFE5U-85F')."""
    rows = designs(device)
    if not rows:
        raise BenchError(f"no routed design on {device}")
    return rows[0].part


def accuracy(example: str, rung: str = "fit", subset: str = "test") -> str:
    """'97.22%': images right of `example`'s test set (subset 'all_digits': all 1,797 digits);
    rung 'keras_float', 'fit' (the hardware, default weight format) or 'same'."""
    row = accuracy_of(example)
    if row is None or subset not in row:
        raise BenchError(f"no accuracy for {example!r} ({subset}) in bench/accuracy.json")
    counts = row[subset]
    if rung not in counts["right"]:
        raise BenchError(f"rung {rung!r}: one of {', '.join(counts['right'])}")
    return percent(counts["right"][rung] / counts["images"])


def bench_value(file: str, path: str, spec: str = "") -> str:
    """Any figure of a bench file by its dotted path, formatted with a format spec:
    `bench_value("results.json", "tools.clash_verilog_seconds", ".1f")` -> '14.0'."""
    value: Any = load(file)
    for key in path.split("."):
        if isinstance(value, list):
            value = value[int(key)]
        elif isinstance(value, dict) and key in value:
            value = value[key]
        else:
            raise BenchError(f"bench/{file} has no {path!r} (at {key!r})")
    return format(value, spec)


def results_md(path: str) -> str:
    """A Markdown file that a script of the repository generates (`examples/jet_hgq/results.md`,
    written by its compare.py), without its top-level title, for inclusion in a page."""
    file = (ROOT / path).resolve()
    if ROOT not in file.parents or file.suffix != ".md" or not file.is_file():
        raise BenchError(f"{path}: not a Markdown file of the repository")
    lines = file.read_text().strip().split("\n")
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join(lines).strip() + "\n"


def jet_hgq_results() -> str:
    """examples/jet_hgq/results.md (examples/jet_hgq/compare.py): HGQ2 against quantized after training."""
    return results_md("examples/jet_hgq/results.md")


def search_front(folder: str) -> str:
    """The Pareto front of a co-design search example (FOLDER/results.md, as `keras2clash search show` writes it)."""
    return results_md(f"{folder.rstrip('/')}/results.md")


MACROS = (
    headline_table,
    fpga_table,
    sweep_table,
    da4ml_table,
    accuracy_table,
    widths_table,
    toolchain_table,
    configurations_table,
    fmax,
    fmax_seeds,
    latency_ns,
    latency_cycles,
    ii_cycles,
    images_per_second,
    resource,
    resource_share,
    resources,
    part,
    accuracy,
    bench_value,
    results_md,
    jet_hgq_results,
    search_front,
)
"""The functions page authors call from Markdown (`{{ fmax("iris", "ecp5-85k") }}`)."""


# ---------------------------------------------------------------------------------------------
# the README's headline region


def readme_with_headline(text: str) -> str:
    """`text` (README.md) with the region between the headline markers replaced by the table."""
    start, end = text.find(HEADLINE_START), text.find(HEADLINE_END)
    if start < 0 or end < 0 or end < start:
        raise BenchError(f"README.md needs the markers {HEADLINE_START} and {HEADLINE_END}, in that order")
    head = text[: start + len(HEADLINE_START)]
    return f"{head}\n\n{headline_table()}\n{text[end:]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Documentation figures from bench/*.json.")
    sub = parser.add_subparsers(dest="command", required=True)
    readme = sub.add_parser("readme", help="rewrite the README's headline table from the bench JSON")
    readme.add_argument("--check", action="store_true", help="only compare; exit 1 if the README differs")
    readme.add_argument("--readme", type=Path, default=ROOT / "README.md")
    args = parser.parse_args(argv)
    text = args.readme.read_text()
    try:
        new = readme_with_headline(text)
    except BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.check:
        if new != text:
            print(
                f"{args.readme}: the headline table differs from bench/*.json; run `./scripts/docs.sh readme`",
                file=sys.stderr,
            )
            return 1
        return 0
    if new != text:
        args.readme.write_text(new)
        print(f"{args.readme}: headline table rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
