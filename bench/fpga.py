#!/usr/bin/env python3
"""Place-and-route benchmarks (a script, not a timed test): writes bench/fpga.json and
bench/fpga_pipeline.png.

    .venv/bin/python bench/fpga.py [--examples iris,digits_dense,...] [--sweep digits_dense]
                                   [--levels 0,1,2,3] [--fpga ecp5-85k] [--freq 100]
                                   [--seeds 1,2,3] [--no-route] [--out bench/fpga.json]

Two parts, both through `keras2clash pnr` (yosys + nextpnr, keras2clash.fpga):

- every example at its default configuration (`emit` defaults: 1,7,8, one PE per layer,
  the default pipeline): Fmax after routing, utilisation (LUT4, flip-flops, multipliers,
  block RAM), the critical path, and latency and II in cycles and in ns at that Fmax, and
  images/s;
- a sweep of the pipeline knob (`--pipeline`, adder levels per register stage) on one
  example: Fmax and latency (cycles and ns) against the pipeline depth, plotted.

One placement seed moves these designs by 5 to 20 MHz (on the same code: cnn_variants 96.7 /
102.9, mlp_tanh 79.7 to 87.1), so `--seeds` places and routes each design once per
seed: the row keeps every seed's figure (`seeds`) and reports the best, with its seed, so the
row can be reproduced (`keras2clash pnr P --seed N`).

Routing a 15k-LUT design takes 15 to 20 minutes in the WebAssembly nextpnr on one core, so
the whole run takes hours; `--no-route` gives nextpnr's post-placement estimate instead.
Results are written after every design (a run can be stopped and its JSON still holds what
finished).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EXAMPLES = [
    "iris",
    "digits_dense",
    "cnn_variants",
    "mobilenet_digits",
    "conv1d_waves",
    "jet_hgq/jet_qat",
    "digits_hgq2/digits_hgq2",
    "thesis_cnn@ecp5-85k",
    "resnet_digits@ecp5-85k",
    "inception_digits@ecp5-85k",
    "mlp_tanh@ecp5-85k",
    "digits_autoencoder@ecp5-85k",
    "se_digits@ecp5-85k",
    "densenet_digits@ecp5-85k",
    "digits_denoise@ecp5-85k",
    "digits_heads@ecp5-85k",
    "digits_side@ecp5-85k",
    "digits_lstm",
    "waves_gru",
    "jet_transformer@96",
    "jet_hgq/jet_qat:latency+scores+p3",
    "thesis_cnn:latency+1.2.3",
    "digits_dense:latency+1.2.3",
]
"""Every example at its defaults where they fit the LFE5U-85F's 156 multipliers; the eleven that
need more at one PE per layer (thesis_cnn 217, resnet_digits 533, inception_digits 407, mlp_tanh
176, digits_autoencoder 269, se_digits 293, densenet_digits 445, digits_denoise 354,
digits_heads 193, digits_side 177, jet_transformer 227) balanced to the part (`keras2clash pnr` refuses a design with more multipliers than the part;
`--dsp-budget ecp5-85k` gives 132, what nextpnr-ecp5 routes: devices.ECP5_ROUTABLE_SHARE),
except jet_transformer, balanced to 96 (85 used, an interval of 384 cycles instead of 256): at
132 the attention, the LayerNorms and the projections' engines fill the part so densely that
its routes, not its logic, hold the clock under 100 MHz. Three designs at the latency strategy
(every layer an adder graph of its constant weights, a vector or window a cycle, no
multiplier): the HGQ2 jet tagger at its own formats as a trigger builds it (its scores without
the class, `scores`; three adder levels a stage, `p3`, whose fewer cycles outweigh its slower
clock, the routes between layers being the critical paths at two levels too), the thesis CNN
and digits_dense both at 1,2,3 (at 1,7,8 their graphs would need about 62k and 81k carry cells, more than the part;
the thesis CNN at 1,3,4 takes 48.7k TRELLIS_COMB, which router2 left with 33k overused wires
after 25 minutes).
`dir/model`: examples/dir/model.keras (the quantization-aware models of jet_hgq and digits_hgq2).
`name@budget`: the example balanced to a multiplier budget (`--dsp-budget`, a device name or a
number);
`name@budget:argmax` also leaves the output softmax out (`--softmax argmax`), as iris needs on
the iCE40 UP5K (`--fpga ice40-up5k --freq 24 --examples iris@ice40-up5k:argmax`). After the
colon, `+`-separated emit options (`VARIANTS`): `argmax`, a strategy (`latency`, `auto`: with
a budget, `--strategy auto --dsp-budget`), `scores` (`--no-class`: the output's values without
the class, as a trigger reads them), a format with dots (`1.3.4`: `--format 1,3,4`), `pN`
(`--pipeline N`), e.g. `thesis_cnn:latency+1.3.4`."""

VARIANTS: dict[str, tuple[str, str | bool]] = {
    "argmax": ("softmax", "argmax"),
    "latency": ("strategy", "latency"),
    "auto": ("strategy", "auto"),
    "scores": ("no_class", True),
}
"""The words of a spec's variant and the emit option each sets (a format is `s.i.f`)."""


def emit_options(spec: str) -> dict[str, str | bool]:
    """The emit options a spec names (`example[@budget][:variant]`, variant words joined by
    `+`), beside the defaults the bench uses (1,7,8, the exact softmax)."""
    head, _, variant = spec.partition(":")
    budget = head.partition("@")[2]
    options: dict[str, str | bool] = {"format": "1,7,8", "softmax": "exact"} | (
        {"dsp_budget": budget} if budget else {}
    )
    for word in [w for w in variant.split("+") if w]:
        parts = word.split(".")
        if word in VARIANTS:
            key, value = VARIANTS[word]
            options[key] = value
        elif len(parts) == 3 and all(p.isdigit() for p in parts):
            options["format"] = ",".join(parts)
        elif word[:1] == "p" and word[1:].isdigit():
            options["pipeline"] = word[1:]
        else:
            raise SystemExit(f"{spec!r}: unknown variant {word!r}; use {', '.join(VARIANTS)}, pN or a format s.i.f")
    if options.get("strategy") == "auto" and not budget:
        raise SystemExit(f"{spec!r}: auto chooses with a multiplier budget: name@budget:auto")
    return options


def _design(
    spec: str,
    work: Path,
    pipeline: int | None,
    fpga: str,
    freq: float,
    route: bool,
    router: str = "router1",
    placer: str | None = None,
    seeds: tuple[int, ...] = (1,),
) -> dict:
    from keras2clash import api
    from keras2clash.fpga.flow import pnr

    options = emit_options(spec)
    example = spec.partition(":")[0].partition("@")[0]
    variant = "_".join(f"{k}-{v}" for k, v in sorted(options.items()))
    out = work / f"{example}_{variant}_{'default' if pipeline is None else pipeline}".replace("/", "_").replace(
        ",", "."
    )
    t0 = time.monotonic()
    model = ROOT / "examples" / f"{example if '/' in example else f'{example}/{example}'}.keras"
    fmt = options.pop("format")
    levels = options.pop("pipeline", pipeline)  # the spec's own (`pN`), else the sweep's
    api.emit(model, fmt, out, show=False, pipeline=levels, **options)
    reports = [
        pnr(out, fpga, freq_mhz=freq, route=route, router=router, placer=placer, seed=seed, force=True).to_dict()
        for seed in seeds
    ]
    return _best(spec, out, reports, time.monotonic() - t0)


def _best(spec: str, project_dir: Path, reports: list[dict], seconds: float) -> dict:
    """The row of the best seed (routed first, then the highest Fmax), with every seed's figure
    beside it: a row is one placement among several, and the spread is part of the result."""
    best = max(reports, key=lambda r: (bool(r["routed"]), r["fmax_mhz"] or 0.0))
    row = _row(spec, project_dir, best, seconds)
    row["seeds"] = [{"seed": r["seed"], "fmax_mhz": r["fmax_mhz"], "routed": r["routed"]} for r in reports]
    return row


def _row(spec: str, project_dir: Path, report: dict, seconds: float) -> dict:
    """One design's bench row: its knobs and cycle figures (the hardware model) beside the
    place-and-route report (`PnrReport.to_dict()`)."""
    from keras2clash.backend.project import load_project
    from keras2clash.hw.hwmodel import timing

    project = load_project(project_dir)
    t = timing(project.plans, 8)
    fmax = report["fmax_mhz"]
    return {
        "example": spec,
        "options": emit_options(spec),
        "strategies": [p.engine_knobs.strategy for p in project.compute_plans],
        "parallelism": [p.engine_knobs.pe for p in project.compute_plans],
        "cycles": [p.engine_knobs.cycles for p in project.compute_plans],
        "pipeline": [p.engine_knobs.pipeline for p in project.compute_plans],
        "latency_cycles": int(t.first_latency),
        "ii_cycles": float(t.ii),
        "fmax_mhz": fmax,
        "routed": report["routed"],
        "target_mhz": report["target_mhz"],
        "latency_ns": None if not fmax else t.first_latency * 1e3 / fmax,
        "images_per_second": None if not fmax else fmax * 1e6 / t.ii,
        "report": report,
        "seconds": round(seconds, 1),
    }


def _adopt(item: str, fpga: str) -> dict:
    """`SPEC=PROJECT[,PROJECT...]`: the row of `keras2clash pnr PROJECT --fpga FPGA` runs made
    by hand (each PROJECT/pnr/FPGA/summary.json), so a long run is not repeated to be recorded.
    Several projects are copies of one design placed with different seeds: the row is the best
    of them with every seed beside it, as `--seeds` records it."""
    spec, sep, folders = item.partition("=")
    if not sep or not folders:
        raise SystemExit(f"--adopt {item!r}: SPEC=PROJECT[,PROJECT...], e.g. digits_dense=/tmp/dd")
    runs = [(Path(f), json.loads((Path(f) / "pnr" / fpga / "summary.json").read_text())) for f in folders.split(",")]
    seconds = sum(
        report.get("seconds", {}).get(k, 0.0)
        for _, report in runs
        for k in ("HDL generation", "synthesis", "place and route")
    )
    best_dir = max(runs, key=lambda run: (bool(run[1]["routed"]), run[1]["fmax_mhz"] or 0.0))[0]
    return _best(spec, best_dir, [report for _, report in runs], seconds)


def _plot(sweep: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(sweep, key=lambda r: r["pipeline"][0])
    levels = [r["pipeline"][0] for r in rows]
    labels = ["none" if v == 0 else str(v) for v in levels]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.bar(labels, [r["fmax_mhz"] or 0 for r in rows], color="tab:blue")
    ax1.set_xlabel("adder levels per register stage (--pipeline)")
    ax1.set_ylabel("Fmax after place and route (MHz)")
    ax1.axhline(100, color="grey", linestyle="--", linewidth=1)
    ax2.plot(labels, [r["latency_cycles"] for r in rows], "o-", label="cycles")
    ax2.set_xlabel("adder levels per register stage (--pipeline)")
    ax2.set_ylabel("latency (cycles)")
    twin = ax2.twinx()
    twin.plot(labels, [r["latency_ns"] or 0 for r in rows], "s--", color="tab:red", label="ns at Fmax")
    twin.set_ylabel("latency (ns at Fmax)")
    fig.suptitle(f"{rows[0]['example']}: clock and latency against pipeline depth")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    from keras2clash.fpga.flow import ROUTERS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", default=",".join(EXAMPLES))
    parser.add_argument("--sweep", default="digits_dense")
    parser.add_argument("--levels", default="0,1,2,3")
    parser.add_argument("--fpga", default="ecp5-85k")
    parser.add_argument("--freq", type=float, default=100.0)
    parser.add_argument("--seeds", default="1", help="placement seeds, comma-separated: the best is the row")
    parser.add_argument("--no-route", action="store_true")
    parser.add_argument("--router", default="router1", choices=ROUTERS)
    parser.add_argument("--placer", default=None, help="nextpnr --placer (default: the device's, fpga/devices.py)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "fpga.json")
    parser.add_argument(
        "--adopt",
        action="append",
        default=[],
        metavar="SPEC=PROJECT[,PROJECT...]",
        help="record `keras2clash pnr PROJECT --fpga FPGA` runs made by hand (one per seed) as SPEC's row",
    )
    args = parser.parse_args()
    from keras2clash.errors import K2CError

    try:
        seeds = tuple(int(v) for v in args.seeds.split(",") if v.strip())
    except ValueError:
        seeds = ()
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        parser.error(f"--seeds {args.seeds!r}: distinct non-negative integers, e.g. 1,2,3")

    # Earlier results stay unless this run measures the same design again (routing all of
    # them takes hours: runs can be split by --examples).
    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    if old.get("fpga") != args.fpga:
        old = {}
    results = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {platform.processor() or ''}",
        "fpga": args.fpga,
        "examples": old.get("examples", []),
        "sweep": [] if args.sweep else old.get("sweep", []),
    }

    def put(row: dict) -> None:
        results["examples"] = [r for r in results["examples"] if r["example"] != row["example"]] + [row]

    def save() -> None:
        tmp = args.out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(results, indent=2))
        tmp.replace(args.out)

    with tempfile.TemporaryDirectory(prefix="k2c-fpga-") as tmp:
        work = Path(tmp)
        for level in [int(v) for v in args.levels.split(",") if v != ""] if args.sweep else []:
            print(f"sweep {args.sweep} pipeline {level}", flush=True)
            results["sweep"].append(
                _design(
                    args.sweep, work, level, args.fpga, args.freq, not args.no_route, args.router, args.placer, seeds
                )
            )
            save()
        if results["sweep"]:
            _plot(results["sweep"], args.out.with_name("fpga_pipeline.png"))
        for item in args.adopt:
            put(_adopt(item, args.fpga))
            save()
        for example in [e for e in args.examples.split(",") if e]:
            print(f"example {example}", flush=True)
            try:
                put(
                    _design(
                        example, work, None, args.fpga, args.freq, not args.no_route, args.router, args.placer, seeds
                    )
                )
            except K2CError as exc:  # recorded, and the other designs still run
                put({"example": example, "error": str(exc)})
            save()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    from keras2clash import procs

    # SIGINT/SIGTERM become KeyboardInterrupt, so the running yosys/nextpnr (its own process
    # group, procs.child) is stopped with the bench instead of left running without a parent.
    try:
        with procs.interrupt_handling():
            main()
    except KeyboardInterrupt:
        code, word = procs.exit_code_for_interrupt()
        print(f"{word}: stopped, with every tool it had started", file=sys.stderr)
        sys.exit(code)
