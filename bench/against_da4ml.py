#!/usr/bin/env python3
"""keras2clash's latency strategy beside da4ml's own Verilog for the same HGQ2 model, through
one place-and-route flow (a script, not a timed test): writes bench/da4ml.json. (Not named
da4ml.py: run as a script, its folder comes first on the import path and would hide the package.)

    .venv/bin/python bench/against_da4ml.py [--model examples/jet_hgq/jet_qat.keras]
        [--data examples/jet_hgq/test.npz] [--levels 3] [--pipeline L] [--fpga ecp5-85k]
        [--freq 100] [--seed 1] [--placer P] [--router R] [--ports scan] [--no-route]
        [--designs da4ml,keras2clash] [--work DIR] [--cache] [--out bench/da4ml.json]

Two designs of the one model, each measured the same way:

- **da4ml**: its converter's steps (`da4ml convert`: `trace_model`, `comb_trace`, `RTLModel`
  with `latency_cutoff` = `--levels`, a register every that many adder levels), its Verilog
  simulated by its own Verilator emulator (`RTLModel.predict`) on the whole test set;
- **keras2clash**: `emit --strategy latency --no-class` (the scores alone, as da4ml's design
  sends them; `--pipeline`: adder levels per register stage, emit's default without it) and
  Clash to Verilog, simulated by `rtlsim` (Verilator, the
  generated testbench) on the whole test set.

Each row: the time to generate the Verilog (from loading the model file), the outputs equal to
the HGQ2 model's (`model.predict`, every value of every sample), and then the same place and
route (`keras2clash.fpga.flow`: `pnr` for keras2clash's project, `pnr_verilog` for da4ml's
folder; one yosys script, each addition a carry chain of its own in both, one set of nextpnr options, one port treatment, `--ports scan` by
default: every port a register of the scan harness): Fmax (routed, or nextpnr's post-placement
estimate with --no-route, labelled so), LUT4 and CCU2C cells of the placed netlist, nextpnr's
TRELLIS_COMB, TRELLIS_FF, MULT18X18D and DP16KD, the place-and-route time, latency in cycles
and in ns at that Fmax, and the initiation interval.

da4ml's pipeline of S stages has S + 1 registers from port to port (its input register, one
between stages, its output register: `pipeline_logic_gen`), so its latency is S + 1 cycles in
keras2clash's count (first beat accepted to result presented). keras2clash's is the hardware
model's, and the Verilator run measures it again.

keras2clash solves its adder graphs with an empty cache (`K2C_CACHE_DIR` empty) unless
`--cache`: da4ml solves its own every time too. Results are written after every design.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DESIGNS = ("da4ml", "keras2clash")
DA4ML_TOP = "model"  # RTLModel's project name: the top module of its pipeline
CELLS = ("LUT4", "CCU2C", "TRELLIS_FF", "MULT18X18D", "DP16KD")
"""Cells counted in the netlist nextpnr placed (design.json): yosys' own count, before
nextpnr packs LUT4s and carry cells (CCU2C, two TRELLIS_COMB each) into slices."""


def _hgq2_outputs(model_path: Path, x: np.ndarray) -> np.ndarray:
    """The HGQ2 model's own quantized forward pass: the reference both designs must equal."""
    import hgq  # noqa: F401  (registers HGQ2's layers with Keras)
    import keras

    model = keras.models.load_model(model_path, compile=False)
    return np.asarray(model.predict(x, verbose=0, batch_size=len(x)), dtype=np.float64).reshape(len(x), -1)


# --- da4ml --------------------------------------------------------------------------------


def da4ml_generate(model_path: Path, out: Path, levels: int, freq_mhz: float):
    """da4ml's Verilog of the model in `out` (its converter's steps, `da4ml convert`), a
    register every `levels` adder levels; returns its RTLModel."""
    import hgq  # noqa: F401
    import keras
    from da4ml.codegen import RTLModel
    from da4ml.converter import trace_model
    from da4ml.trace import HWConfig, comb_trace

    model = keras.models.load_model(model_path, compile=False)
    inp, outp = trace_model(model, HWConfig(1, -1, -1), {"hard_dc": 2}, False)
    comb = comb_trace(inp, outp)
    rtl = RTLModel(
        comb,
        DA4ML_TOP,
        out,
        flavor="verilog",
        latency_cutoff=levels,
        print_latency=True,
        clock_period=1000.0 / freq_mhz,
    )
    rtl.write()
    return rtl


def da4ml_stages(rtl) -> int:
    """The register stages of da4ml's pipeline (RTLModel's `_pipe`: one combinational block each)."""
    return len(rtl._pipe.solutions)


def da4ml_sources(out: Path) -> list[str]:
    """da4ml's Verilog files, relative to its src/ folder: its model's, and those of its static
    blocks (static/NAME.v, module NAME) that the model instantiates. yosys elaborates every
    module it reads, and an unused lookup_table.v reads its default memory file, which does not
    exist (da4ml's Verilator finds the blocks it needs by name in static/)."""
    src = out / "src"
    model = sorted(p.name for p in src.glob("*.v"))
    text = "\n".join((src / name).read_text() for name in model)
    blocks = [
        f"static/{p.name}"
        for p in sorted((src / "static").glob("*.v"))
        if re.search(rf"\b{re.escape(p.stem)}\s*(?:#\s*\(|\w+\s*\()", text)
    ]
    return model + blocks


def da4ml_emulator(rtl, out: Path) -> None:
    """Build da4ml's Verilator emulator of its Verilog (`RTLModel._compile`: its binder and
    Makefile, sim/build_binder.mk). That Makefile takes VERILATOR_ROOT from the last such line
    of `verilator -V` (empty for Debian's Verilator 5.006: the environment's, unset) and links
    the archives a newer Verilator's `--build` leaves (obj_dir/libV<top>.a, libverilated.a);
    where the installed one leaves only V<top>__ALL.a, both are made here, the runtime from
    Verilator's own rules in the generated Makefile. A Verilator before 5.008 has one WIDTH
    warning where da4ml's blocks name its later halves (`lint_off WIDTHTRUNC`, an error there):
    those comments say WIDTH instead (comments only: yosys reads the same logic)."""
    version = subprocess.run(["verilator", "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"Verilator (\d+)\.(\d+)", version)
    if found and (int(found.group(1)), int(found.group(2))) < (5, 8):
        for path in (out / "src").rglob("*.v"):
            text = path.read_text()
            older = re.sub(r"(lint_(?:off|on)\s+)WIDTH(?:TRUNC|EXPAND)\b", r"\1WIDTH", text)
            if older != text:
                path.write_text(older)
    sim = out / "sim"
    mk = sim / "build_binder.mk"
    root = subprocess.run(["verilator", "--getenv", "VERILATOR_ROOT"], capture_output=True, text=True, check=True)
    mk.write_text(re.sub(r"(?m)^VERILATOR_ROOT = .*$", f"VERILATOR_ROOT = {root.stdout.strip()}", mk.read_text()))
    prefix = f"{DA4ML_TOP}_wrapper"
    env = dict(os.environ, VM_PREFIX=prefix, STAMP="bench", VERILATOR_FLAGS="-Wall", N_JOBS="1")
    obj = sim / "obj_dir"
    subprocess.run(
        ["make", "-s", "-f", mk.name, f"obj_dir/V{prefix}__ALL.a"], cwd=sim, env=env, check=True, capture_output=True
    )
    if not (obj / "libverilated.a").exists():
        runtime = ["verilated.o", "verilated_threads.o"]
        subprocess.run(["make", "-s", "-f", f"V{prefix}.mk", *runtime], cwd=obj, check=True, capture_output=True)
        subprocess.run(["ar", "rcs", "libverilated.a", *runtime], cwd=obj, check=True)
        shutil.copy(obj / f"V{prefix}__ALL.a", obj / f"libV{prefix}.a")
    rtl._compile(openmp=False, nproc=1, clean=False)


def da4ml_design(args, work: Path, x: np.ndarray, want: np.ndarray) -> dict:
    import da4ml

    from keras2clash.fpga.flow import pnr_verilog

    out = work / "da4ml"
    print(f"da4ml: converting {args.model.name}, a register every {args.levels} adder levels", flush=True)
    t0 = time.monotonic()
    rtl = da4ml_generate(args.model, out, args.levels, args.freq)
    generate = time.monotonic() - t0
    stages = da4ml_stages(rtl)
    print(f"da4ml: {stages} stages in {generate:.1f} s; Verilator (its emulator)", flush=True)
    t0 = time.monotonic()
    da4ml_emulator(rtl, out)
    built = time.monotonic() - t0
    got = np.asarray(rtl.predict(x, n_threads=1), dtype=np.float64).reshape(len(x), -1)
    sources = da4ml_sources(out)
    print(f"da4ml: place and route ({len(sources)} Verilog files, top {DA4ML_TOP})", flush=True)
    report = pnr_verilog(
        out / "src",
        sources,
        DA4ML_TOP,
        out / "pnr",
        args.fpga,
        name=f"da4ml {da4ml.__version__}",
        latency_cycles=stages + 1,
        interval_cycles=1,
        separate_sums=True,  # the yosys script `pnr` runs on a project with layers of constants
        progress=_progress("da4ml"),
        **_pnr_options(args),
    )
    return _row(
        "da4ml",
        f"da4ml {da4ml.__version__}, a register every {args.levels} adder levels",
        report.to_dict(),
        generate_seconds=generate,
        simulator_seconds=built,
        got=got,
        want=want,
        extra={"levels": args.levels, "stages": stages, "estimated_luts": round(float(rtl._solution.cost))},
    )


# --- keras2clash --------------------------------------------------------------------------


def keras2clash_design(args, work: Path, want: np.ndarray) -> dict:
    from keras2clash import api
    from keras2clash.backend.project import load_project
    from keras2clash.fpga.flow import pnr
    from keras2clash.hw.hwmodel import timing
    from keras2clash.version import __version__

    out = work / "keras2clash"
    pipeline = f", --pipeline {args.pipeline}" if args.pipeline is not None else ""
    print(f"keras2clash: emit {args.model.name} --strategy latency --no-class{pipeline}", flush=True)
    t0 = time.monotonic()
    knobs = {"pipeline": args.pipeline} if args.pipeline is not None else {}
    api.emit(args.model, out=out, show=False, strategy="latency", no_class=True, **knobs)
    emitted = time.monotonic() - t0
    print(f"keras2clash: emitted in {emitted:.1f} s; Clash to Verilog", flush=True)
    t0 = time.monotonic()
    api.hdl(out, ("verilog",), lint=False)
    clash = time.monotonic() - t0
    project = load_project(out)
    t = timing(list(project.plans))
    print(f"keras2clash: Verilog in {clash:.1f} s; Verilator (rtlsim, {len(want)} samples)", flush=True)
    t0 = time.monotonic()
    sim = api.rtlsim(out, args.data, "verilator", show=False)
    simulated = time.monotonic() - t0
    out_fmt = project.plans[-1].out_fmt
    got = np.full(want.shape, np.nan)
    for sample in sim.samples:
        if sample.got is not None:
            got[sample.index] = out_fmt.to_real(np.asarray(sample.got))
    measured = sorted({s.latency for s in sim.samples if s.latency is not None})
    print("keras2clash: place and route", flush=True)
    report = pnr(out, args.fpga, progress=_progress("keras2clash"), **_pnr_options(args))
    plans = [p for p in project.plans if p.is_compute]
    return _row(
        "keras2clash",
        f"keras2clash {__version__}, --strategy latency --no-class{pipeline}",
        report.to_dict(),
        generate_seconds=emitted + clash,
        simulator_seconds=simulated,
        got=got,
        want=want,
        extra={
            "pipeline": [p.engine_knobs.pipeline for p in plans],
            "emit_seconds": round(emitted, 1),
            "clash_seconds": round(clash, 1),
            "model_latency_cycles": int(t.first_latency),
            "measured_latency_cycles": measured,
            "testbench_passed": sim.passed,
        },
    )


# --- rows ---------------------------------------------------------------------------------


def _pnr_options(args) -> dict:
    """The place-and-route options both designs share."""
    return {
        "freq_mhz": args.freq,
        "seed": args.seed,
        "placer": args.placer,
        "router": args.router,
        "route": not args.no_route,
        "ports": args.ports,
        "force": True,
    }


def _progress(design: str):
    def tell(step: str, detail: str) -> None:
        if detail in ("done", "skipped") or not detail.strip():
            return
        print(f"{design}: {step}: {detail.splitlines()[0][:160]}", flush=True)

    return tell


def placed_cells(design_json: Path, top: str) -> dict[str, int]:
    """`CELLS` in the netlist nextpnr placed."""
    from keras2clash.fpga.flow import netlist_cells

    return {cell: netlist_cells(design_json, top, f"{cell}$") for cell in CELLS}


def _row(
    design: str,
    label: str,
    report: dict,
    *,
    generate_seconds: float,
    simulator_seconds: float,
    got: np.ndarray,
    want: np.ndarray,
    extra: dict,
) -> dict:
    """One design's row: what the table shows, beside the whole place-and-route report."""
    from keras2clash.fpga.harness import HARNESS_TOP

    used = {u["cell"]: u["used"] for u in report["utilisation"]}
    logs = Path(report["logs"])
    netlist_top = HARNESS_TOP if report["harness_flip_flops"] else report["top"]
    cells = placed_cells(logs / "design.json", netlist_top) if (logs / "design.json").is_file() else {}
    fmax = report["fmax_mhz"]
    return {
        "design": design,
        "label": label,
        "generate_seconds": round(generate_seconds, 1),
        "simulator_seconds": round(simulator_seconds, 1),
        "bit_exact": int(np.sum(got == want)),
        "outputs": int(want.size),
        "latency_cycles": int(report["latency_cycles"]),
        "ii_cycles": float(report["interval_cycles"]),
        "fmax_mhz": fmax,
        "routed": report["routed"],
        "latency_ns": report["latency_ns"],
        "results_per_second": report["images_per_second"],
        "trellis_comb": used.get("TRELLIS_COMB"),
        "flip_flops": used.get("TRELLIS_FF"),
        "harness_flip_flops": report["harness_flip_flops"],
        "mult18x18d": used.get("MULT18X18D"),
        "dp16kd": used.get("DP16KD"),
        "cells": cells,
        "pnr_seconds": report["seconds"].get("place and route"),
        "synthesis_seconds": report["seconds"].get("synthesis"),
        **extra,
        "report": report,
    }


def table(results: dict) -> str:
    """The bench's table as Markdown (what the status lines and docs show)."""
    lines = [
        "| design | latency | II | Fmax | LUT4 | CCU2C | TRELLIS_COMB | FF | MULT18X18D | DP16KD | bit-exact "
        "| generate | place and route |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in results["designs"]:
        if "error" in r:
            lines.append(f"| {r['design']} | error: {r['error']} |" + " |" * 11)
            continue
        fmax = f"{r['fmax_mhz']:.1f} MHz" + ("" if r["routed"] else " (placed)") if r["fmax_mhz"] else "-"
        ns = f" = {r['latency_ns']:.0f} ns" if r["latency_ns"] else ""
        cells = r["cells"]
        lines.append(
            f"| {r['label']} | {r['latency_cycles']} cycles{ns} | {r['ii_cycles']:g} | {fmax} "
            f"| {cells.get('LUT4', 0):,} | {cells.get('CCU2C', 0):,} | {r['trellis_comb']:,} | {r['flip_flops']:,} "
            f"| {r['mult18x18d']} | {r['dp16kd']} | {r['bit_exact']:,} / {r['outputs']:,} "
            f"| {r['generate_seconds']:.0f} s | {r['pnr_seconds']:.0f} s |"
        )
    return "\n".join(lines)


def main() -> None:
    import argparse

    from keras2clash.fpga.flow import PORTS, ROUTERS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=ROOT / "examples" / "jet_hgq" / "jet_qat.keras")
    parser.add_argument("--data", type=Path, default=ROOT / "examples" / "jet_hgq" / "test.npz")
    parser.add_argument("--levels", type=int, default=3, help="da4ml: adder levels per register stage")
    parser.add_argument("--pipeline", default=None, help="keras2clash: --pipeline (emit's default without it)")
    parser.add_argument("--designs", default=",".join(DESIGNS))
    parser.add_argument("--fpga", default="ecp5-85k")
    parser.add_argument("--freq", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--placer", default=None, help="nextpnr --placer (default: the device's, fpga/devices.py)")
    parser.add_argument("--router", default="router1", choices=ROUTERS)
    parser.add_argument("--ports", default="scan", choices=PORTS, help="the same for both designs (pnr --ports)")
    parser.add_argument("--no-route", action="store_true")
    parser.add_argument("--cache", action="store_true", help="keras2clash: keep the cache of solved adder graphs")
    parser.add_argument("--work", type=Path, default=None, help="keep the designs and their logs here")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "da4ml.json")
    args = parser.parse_args()
    designs = [d for d in args.designs.split(",") if d]
    if not designs or any(d not in DESIGNS for d in designs):
        parser.error(f"--designs {args.designs!r}: some of {', '.join(DESIGNS)}")
    if args.levels < 1:
        parser.error(f"--levels {args.levels}: adder levels per register stage, 1 or more")
    if not args.cache:
        os.environ["K2C_CACHE_DIR"] = ""  # no cache: the adder graphs solved in this run
    args.model, args.data = args.model.resolve(), args.data.resolve()
    from keras2clash.errors import K2CError

    data = np.load(args.data)
    x = data["x"]
    want = _hgq2_outputs(args.model, x)
    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    results = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {platform.processor() or ''}",
        "model": str(args.model.relative_to(ROOT)) if ROOT in args.model.parents else str(args.model),
        "data": str(args.data.relative_to(ROOT)) if ROOT in args.data.parents else str(args.data),
        "samples": len(x),
        "fpga": args.fpga,
        "target_mhz": args.freq,
        "seed": args.seed,
        "ports": args.ports,
        "routed": not args.no_route,
        # a design not measured in this run keeps its earlier row (each can be run alone)
        "designs": [r for r in old.get("designs", []) if r.get("design") not in designs],
    }

    def save() -> None:
        order = {d: i for i, d in enumerate(DESIGNS)}
        results["designs"].sort(key=lambda r: order.get(r.get("design"), len(order)))
        tmp = args.out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(results, indent=2))
        tmp.replace(args.out)

    keep = args.work is not None
    work = args.work.resolve() if keep else Path(tempfile.mkdtemp(prefix="k2c-da4ml-"))
    try:
        work.mkdir(parents=True, exist_ok=True)
        for design in designs:
            try:
                row = da4ml_design(args, work, x, want) if design == "da4ml" else keras2clash_design(args, work, want)
            except (K2CError, subprocess.CalledProcessError, RuntimeError) as exc:  # recorded; the other runs
                row = {"design": design, "error": str(exc).splitlines()[0][:300]}
            results["designs"].append(row)
            save()
            print(f"{design}: done", flush=True)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    print(table(results))
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
